/* test_sharded.c: an SPMD model compiled for as many devices as ranks it is
 * started with (alone, or under mpiexec -n 2 or -n 3), one description per
 * device with uneven blocks of its params: every rank's initial block equals
 * that block of the whole tensor computed here, the blocks gathered from all
 * ranks make the whole tensor, steps run, the checkpoint holds the whole
 * tensors with every rank's block in its place (blocks that do not tile a
 * tensor are refused), and
 * creation fails alike on every rank for a wrong rank count or one rank's bad
 * description. Checks record and go on, as in test_comm.c. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <mpi.h>

#include "dtrt.h"
#include "../unit/rt_count.h"
#include "mpi_check.h"

/* Member m's block of a dim of length len over p members: uneven, growing
 * with m, empty for member 0 of 3 when len < 9. */
static void cut(int64_t len, int p, int m, int64_t *begin, int64_t *n) {
  *begin = len * m * m / (p * p);
  *n = len * (m + 1) * (m + 1) / (p * p) - *begin;
}

/* The params of the whole model, with the dim each is split along on the
 * devices (-1: replicated; 2: a block in dims 0 and 1 that does not tile). */
static const struct {
  const char *name;
  int rank;
  int64_t full[3];
  int init;
  double arg;
  int split;
} params[] = {
    {"w", 2, {7, 5}, DT_INIT_GLOROT, 0, 0},   {"e", 3, {4, 6, 3}, DT_INIT_NORMAL, 0.02, 1},
    {"v", 1, {11}, DT_INIT_UNIFORM, 0.1, 0},  {"g", 2, {6, 8}, DT_INIT_UNIFORM, 1, 2},
    {"b", 1, {5}, DT_INIT_NORMAL, 1, -1},
};
enum { NPARAM = 5, NGLOBAL = NPARAM + 2, MAXDEV = 8 };

/* The loss: the sum of w over the ranks' blocks, which tile it. w is first
 * in the state block (device() lays it out at 0). */
static DtStatus train(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                      void *const *in, void *const *out, int64_t step) {
  (void)work, (void)in, (void)step;
  int64_t b, n;
  cut(params[0].full[0], dtrt_nranks(ctx), dtrt_rank(ctx), &b, &n);
  const float *w = (const float *)state;
  double sum = 0;
  for (int64_t k = 0; k < n * params[0].full[1]; k++)
    sum += w[k];
  float part = (float)sum;
  DtTensor t = {.data = &part, .dtype = DTRT_F32, .rank = 1, .dim = {1}};
  DtAttrs a = {.i = {0, 0}, .ni = 2};
  DtStatus s = dtrt_k_all_reduce(ctx, &t, 1, &t, &a);
  if (s)
    return s;
  *(float *)out[0] = part;
  return DT_OK;
}

/* Whether g is split like w (rows) instead of its own way, which does not
 * tile it. */
static bool tile_g;

/* Device dev's globals of a model of ndev devices: the params, then "w.m"
 * (w's block, zeros) and "seen" (i32, ones), laid out 64-byte aligned. */
static DtModelDesc device(int dev, int ndev, DtGlobalDesc *g, const int32_t *mesh) {
  int64_t at = 0;
  for (int k = 0; k < NGLOBAL; k++) {
    int p = k < NPARAM ? k : 0;
    DtGlobalDesc *x = &g[k];
    *x = (DtGlobalDesc){.name = params[p].name, .kind = DT_G_PARAM, .dtype = DTRT_F32,
                        .rank = params[p].rank, .init = params[p].init,
                        .init_arg = params[p].arg, .fan_in = params[p].full[0],
                        .fan_out = params[p].full[1]};
    memcpy(x->full, params[p].full, sizeof params[p].full);
    memcpy(x->dim, params[p].full, sizeof params[p].full);
    if (params[p].split == 0 || params[p].split == 1 || (params[p].split == 2 && tile_g)) {
      int d = params[p].split % 2;
      cut(x->full[d], ndev, dev, &x->begin[d], &x->dim[d]);
    } else if (params[p].split == 2) {
      cut(x->full[0], ndev, dev, &x->begin[0], &x->dim[0]);
      cut(x->full[1], ndev, ndev - 1 - dev, &x->begin[1], &x->dim[1]);
    }
    if (k == NPARAM)
      x->name = "w.m", x->kind = DT_G_STATE, x->init = DT_INIT_ZEROS;
    if (k == NPARAM + 1)
      *x = (DtGlobalDesc){.name = "seen", .kind = DT_G_STATE, .dtype = DTRT_I32,
                          .init = DT_INIT_ONES};
    int64_t n = 1;
    for (int j = 0; j < x->rank; j++)
      n *= x->dim[j];
    x->offset = at;
    at += (n * 4 + 63) / 64 * 64;
  }
  return (DtModelDesc){.name = "spmd", .hash = "spmd-hash", .nglobal = NGLOBAL, .global = g,
                       .state_bytes = at, .train_step = train, .nmesh_axis = 1,
                       .mesh_axis_size = mesh, .plan_hash = "uneven"};
}

static int64_t numel(const int64_t *dim, int rank) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    n *= dim[k];
  return n;
}

/* The element of the whole tensor full at local index k of the block dim at
 * begin, by coordinates. */
static int64_t whole_index(int rank, const int64_t *dim, const int64_t *full,
                           const int64_t *begin, int64_t k) {
  int64_t at = 0, stride = 1;
  for (int j = rank - 1; j >= 0; j--) {
    at += (begin[j] + k % dim[j]) * stride;
    k /= dim[j];
    stride *= full[j];
  }
  return at;
}

/* Param p as one process makes it: stream p, the whole tensor. */
static float *whole(int p, uint64_t seed) {
  int64_t n = numel(params[p].full, params[p].rank);
  float *x = calloc((size_t)n + 1, sizeof *x);
  DtrtCtx *ctx = dtrt_ctx_new();
  CHECK(dtrt_init(ctx, x, n, params[p].init, params[p].arg, params[p].full[0], params[p].full[1],
                  seed, (uint64_t)p) == DT_OK,
        "init of whole %s: %s", params[p].name, dtrt_errmsg(ctx));
  dtrt_ctx_free(ctx);
  return x;
}

/* Every rank's block of every param against the whole tensor; then the
 * blocks of the tiled ones gathered from all ranks against it. */
static void check_blocks(DtModel *m, uint64_t seed) {
  for (int p = 0; p < NPARAM; p++) {
    float *ref = whole(p, seed);
    DtTensor t;
    int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
    DtStatus s = dtrt_model_tensor_block(m, params[p].name, &t, full, begin);
    CHECK(s == DT_OK, "block of %s: %s", params[p].name, dtrt_model_error(m));
    if (s) { /* alike on every rank: the same names */
      free(ref);
      continue;
    }
    int r = params[p].rank;
    int64_t n = numel(t.dim, r), bad = -1;
    for (int64_t k = 0; k < n && bad < 0; k++)
      if (memcmp(&((float *)t.data)[k], &ref[whole_index(r, t.dim, full, begin, k)], 4))
        bad = k;
    CHECK(bad < 0, "%s: element %lld of this rank's block differs from the whole tensor",
          params[p].name, (long long)bad);

    /* each rank in turn broadcasts its block and where it lies */
    int64_t nw = numel(params[p].full, r);
    float *built = calloc((size_t)nw + 1, sizeof *built);
    char *seen = calloc((size_t)nw + 1, 1);
    for (int root = 0; root < np; root++) {
      int64_t where[2 * DT_MAX_RANK];
      memcpy(where, t.dim, sizeof t.dim);
      memcpy(where + DT_MAX_RANK, begin, sizeof t.dim);
      if (mpi_up())
        MPI_Bcast(where, 2 * DT_MAX_RANK, MPI_INT64_T, root, MPI_COMM_WORLD);
      int64_t nb = numel(where, r);
      float *block = root == me ? t.data : calloc((size_t)nb + 1, sizeof *block);
      if (mpi_up())
        MPI_Bcast(block, (int)nb, MPI_FLOAT, root, MPI_COMM_WORLD);
      for (int64_t k = 0; k < nb; k++) {
        int64_t at = whole_index(r, where, params[p].full, where + DT_MAX_RANK, k);
        built[at] = block[k];
        seen[at]++;
      }
      if (root != me)
        free(block);
    }
    bool tiled = params[p].split == 0 || params[p].split == 1, ok = true;
    for (int64_t k = 0; k < nw; k++)
      ok = ok && (tiled ? seen[k] == 1 : params[p].split < 0 ? seen[k] == np : true);
    CHECK(ok, "%s: the blocks of the ranks do not cover the tensor as planned", params[p].name);
    if (tiled)
      CHECK(!memcmp(built, ref, (size_t)nw * 4), "%s gathered from %d ranks differs from one "
            "process", params[p].name, np);
    free(built), free(seen), free(ref);
  }
}

/* The header of the checkpoint file contains text. */
static bool header_has(const char *file, const char *text) {
  char buf[4096] = {0};
  FILE *f = fopen(file, "rb");
  if (!f)
    return false;
  size_t n = fread(buf, 1, sizeof buf - 1, f), len = strlen(text);
  fclose(f);
  for (size_t at = 0; at + len <= n; at++)
    if (!memcmp(buf + at, text, len))
      return true;
  return false;
}

static void test_model(const char *dir) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  static DtGlobalDesc g[MAXDEV][NGLOBAL];
  static DtModelDesc d[MAXDEV];
  const DtModelDesc *dev[MAXDEV];
  int32_t mesh[] = {np};
  for (int k = 0; k < np; k++) {
    d[k] = device(k, np, g[k], mesh);
    dev[k] = &d[k];
  }
  char err[512];
  DtModel *m;
  DtStatus s = dtrt_model_create_spmd_with(dev, np, 11, &al, err, sizeof err, &m);
  CHECK(s == DT_OK, "create: %s", err);
  if (s)
    return;
  CHECK(dtrt_model_rank(m) == me, "model rank %d", dtrt_model_rank(m));
  check_blocks(m, 11);

  float *ref = whole(0, 11), loss = 0;
  double sum = 0;
  for (int64_t k = 0; k < numel(params[0].full, 2); k++)
    sum += ref[k];
  free(ref);
  s = dtrt_model_train_step(m, NULL, NULL, &loss);
  CHECK(s == DT_OK && fabs(loss - sum) < 1e-5, "step: %s: loss %g, sum of w %g",
        dtrt_model_error(m), loss, sum);
  int32_t *seen = dtrt_model_tensor(m, "seen");
  CHECK(seen && *seen == 1 && dtrt_model_step(m) == 1, "seen %d", seen ? *seen : -1);

  /* a checkpoint holds whole tensors: g's blocks do not tile it */
  char path[400], text[480];
  int64_t wb, wn;
  struct stat st;
  snprintf(path, sizeof path, "%s/spmd.st", dir);
  s = dtrt_model_save(m, path);
  if (np > 1)
    CHECK(s == DT_ERR_ARG && strstr(dtrt_model_error(m), "of the 48 elements of 'g'") &&
              stat(path, &st) != 0,
          "save of blocks that do not tile: %s: %s", dtrt_status_name(s), dtrt_model_error(m));
  else
    CHECK(s == DT_OK, "save: %s", dtrt_model_error(m));
  dtrt_model_destroy(m);
  CHECK(c.allocs == c.frees, "model context: %ld allocations, %ld frees", c.allocs, c.frees);
  if (mpi_up())
    MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0)
    remove(path);

  /* g tiled: one file of whole tensors, each rank's block written in its
   * place; every rank reads it alone, as one process, and finds its blocks */
  tile_g = true;
  for (int k = 0; k < np; k++)
    d[k] = device(k, np, g[k], mesh);
  s = dtrt_model_create_spmd_with(dev, np, 11, &al, err, sizeof err, &m);
  CHECK(s == DT_OK, "create with g tiled: %s", err);
  if (s)
    return;
  s = dtrt_model_train_step(m, NULL, NULL, &loss);
  CHECK(s == DT_OK, "step: %s", dtrt_model_error(m));
  CHECK(dtrt_model_save(m, path) == DT_OK, "save: %s", dtrt_model_error(m));
  snprintf(text, sizeof text, "%s.rank%d", path, me);
  CHECK(stat(path, &st) == 0 && stat(text, &st) != 0, "not one file %s", path);
  CHECK(header_has(path, "\"w\":{\"dtype\":\"F32\",\"shape\":[7,5]"), "%s lacks the whole w",
        path);
  DtCkptTensor t[NGLOBAL];
  float *data[NGLOBAL];
  int64_t step = -1;
  for (int k = 0; k < NGLOBAL; k++) {
    const DtGlobalDesc *x = &g[me][k];
    t[k] = (DtCkptTensor){.name = x->name, .kind = x->kind,
                          .t = {.dtype = x->dtype, .rank = x->rank}};
    memcpy(t[k].t.dim, x->rank ? x->full : x->dim, sizeof x->dim);
    t[k].t.data = data[k] = calloc((size_t)numel(t[k].t.dim, x->rank) + 1, 4);
  }
  DtrtCtx *alone = dtrt_ctx_new();
  s = dtrt_ckpt_load(alone, path, t, NGLOBAL, false, &step);
  CHECK(s == DT_OK && step == 1, "load alone: %s", dtrt_errmsg(alone));
  dtrt_ctx_free(alone);
  for (int k = 0; k < NGLOBAL && !s; k++) {
    DtTensor b;
    int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK], bad = -1;
    dtrt_model_tensor_block(m, g[me][k].name, &b, full, begin);
    for (int64_t i = 0; i < numel(b.dim, b.rank) && bad < 0; i++)
      if (memcmp((float *)b.data + i, data[k] + whole_index(b.rank, b.dim, full, begin, i), 4))
        bad = i;
    CHECK(bad < 0, "'%s': element %lld of this rank's block is not in its place in the file",
          g[me][k].name, (long long)bad);
  }
  for (int k = 0; k < NGLOBAL; k++)
    free(data[k]);
  float *v = dtrt_model_tensor(m, "v");
  float v0 = v[0];
  v[0] = 42;
  CHECK(dtrt_model_load(m, path) == DT_OK && v[0] == v0 && dtrt_model_step(m) == 1, "load: %s",
        dtrt_model_error(m));
  dtrt_model_destroy(m);
  CHECK(c.allocs == c.frees, "model context: %ld allocations, %ld frees", c.allocs, c.frees);
  tile_g = false;
  for (int k = 0; k < np; k++)
    d[k] = device(k, np, g[k], mesh);

  /* one device more than ranks: refused alike on every rank */
  d[np] = device(np, np + 1, g[np], mesh);
  dev[np] = &d[np];
  s = dtrt_model_create_spmd_with(dev, np + 1, 11, &al, err, sizeof err, &m);
  snprintf(text, sizeof text, "model spmd was compiled for %d devices but runs on %d rank%s; "
           "launch it with mpirun -np %d", np + 1, np, np == 1 ? "" : "s", np + 1);
  CHECK(s == DT_ERR_ARG && !strcmp(err, text) && !m, "too few ranks: %s", err);

  /* the last rank's description is broken: every rank learns of it */
  g[np - 1][0].begin[0] = 7;
  s = dtrt_model_create_spmd_with(dev, np, 11, &al, err, sizeof err, &m);
  char want[200], who[32] = "";
  cut(7, np, np - 1, &wb, &wn);
  if (np > 1)
    snprintf(who, sizeof who, "rank %d failed: ", np - 1);
  snprintf(want, sizeof want, "%sspmd: w: a block of [%lld,5] at [7,0] does not fit in [7,5]",
           who, (long long)wn);
  CHECK(s == DT_ERR_ARG && !strcmp(err, want) && !m, "bad block on the last rank: %s", err);
  g[np - 1][0].begin[0] = wb;
  if (np > 1) {
    d[np - 1].nmesh_axis = 0;
    s = dtrt_model_create_spmd_with(dev, np, 11, &al, err, sizeof err, &m);
    snprintf(want, sizeof want, "rank %d failed: model spmd: device %d of %d has no mesh", np - 1,
             np - 1, np);
    CHECK(s == DT_ERR_ARG && !strcmp(err, want) && !m, "no mesh on the last rank: %s", err);
  }
  CHECK(c.allocs == c.frees, "failed creations: %ld allocations, %ld frees", c.allocs, c.frees);
}

int main(void) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  DtrtCtx *ctx = dtrt_ctx_new_with(&al); /* the first to join: it owns MPI */
  DtStatus s = dtrt_comm_init(ctx);
  CHECK(s == DT_OK, "comm_init: %s", dtrt_errmsg(ctx));
  me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  CHECK(np < MAXDEV, "at most %d ranks", MAXDEV - 1);

  char dir[256] = "";
  if (me == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrt-spmd-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  }
  if (mpi_up())
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (np < MAXDEV)
    test_model(dir);

  int total[2];
  mpi_totals(total);
  if (me == 0)
    remove_dir(dir);
  dtrt_ctx_free(ctx);
  return mpi_report(total, c.allocs, c.frees);
}
