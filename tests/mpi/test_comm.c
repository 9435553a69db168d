/* test_comm.c: libdtrt's communication layer on as many ranks as it is started
 * with (alone, or under mpiexec -n 2 or -n 4): every collective against a
 * reference computed locally from all ranks' deterministic inputs, meshes,
 * agreement, failure sharing, an SPMD model against the single-process
 * computation, and SIGHUP, SIGINT and SIGTERM blocked in every thread the
 * runtime and MPI started, and which ranks count as sharing their cores
 * under each placement. Checks record and go on, so every rank makes the same calls;
 * rank 0 prints "N passed, M failed", the exit status says if any rank failed.
 * With --app-mpi the program starts MPI itself, and dtrt must not finalise it. */
#define _GNU_SOURCE
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "dtrt.h"
#include "dtrt_int.h"
#include "../unit/rt_count.h"
#include "mpi_check.h"

/* A small integer, so that sums are exact in any order. */
static float value(int seed, int64_t k) { return (float)((seed * 7919 + k * 31) % 17 - 8); }

static int64_t numel(const int64_t *dim, int rank) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    n *= dim[k];
  return n;
}

static DtTensor tensor(int dtype, int rank, const int64_t *dim) {
  DtTensor t = {.dtype = dtype, .rank = rank};
  memcpy(t.dim, dim, (size_t)rank * sizeof *dim);
  t.data = calloc((size_t)numel(dim, rank) + 1, 4);
  return t;
}

static void fill(DtTensor *t, int seed) {
  for (int64_t k = 0; k < numel(t->dim, t->rank); k++)
    if (t->dtype == DTRT_F32)
      ((float *)t->data)[k] = value(seed, k);
    else
      ((int32_t *)t->data)[k] = (int32_t)value(seed, k) * 1000 + (int32_t)k;
}

/* part = full[..., at:at+len, ...] along dim d, by coordinates. */
static DtTensor slice(const DtTensor *full, int d, int64_t at, int64_t len) {
  int64_t dim[DT_MAX_RANK];
  memcpy(dim, full->dim, sizeof dim);
  dim[d] = len;
  DtTensor part = tensor(full->dtype, full->rank, dim);
  int64_t n = numel(dim, full->rank);
  for (int64_t k = 0; k < n; k++) {
    int64_t rest = k, src = 0, stride = 1;
    for (int j = full->rank - 1; j >= 0; j--) {
      int64_t c = rest % dim[j] + (j == d ? at : 0);
      rest /= dim[j];
      src += c * stride;
      stride *= full->dim[j];
    }
    ((uint32_t *)part.data)[k] = ((uint32_t *)full->data)[src];
  }
  return part;
}

static bool same(const DtTensor *a, const DtTensor *b) {
  int64_t n = numel(a->dim, a->rank);
  return a->rank == b->rank && n == numel(b->dim, b->rank) &&
         !memcmp(a->data, b->data, (size_t)n * 4);
}

/* Uneven blocks for p members summing to *total, one of them empty when p > 1. */
static void uneven(int p, int64_t *len, int64_t *total) {
  *total = 0;
  for (int m = 0; m < p; m++)
    *total += len[m] = p == 1 ? 3 : (m * 3 + 1) % 4;
}

static void even(int p, int64_t total, int64_t *len) {
  for (int m = 0; m < p; m++)
    len[m] = total / p + (m < total % p);
}

static int64_t start(const int64_t *len, int m) {
  int64_t at = 0;
  for (int k = 0; k < m; k++)
    at += len[k];
  return at;
}

/* By DTRT_COMM_* number; hierarchical is all_reduce's, padded all_gather's. */
static const char *methods[] = {"mpi", "ring", "grouped", "hierarchical", "padded"};

/* Attributes: the leading ones, the block lengths, then the method (-1:
 * omitted, meaning mpi). */
static DtAttrs attrs(int nlead, const int64_t *lead, const int64_t *len, int method) {
  DtAttrs a = {.ni = nlead};
  memcpy(a.i, lead, (size_t)nlead * sizeof *lead);
  for (int m = 0; m < np; m++)
    a.i[a.ni++] = len[m];
  if (method >= 0)
    a.i[a.ni++] = method;
  return a;
}

static const char *method_name(int m) { return m < 0 ? "default" : methods[m]; }

static Count *counted;   /* main's context's allocator */

/* Kernel k of in and out; the most it held while it ran beyond what was
 * held before must be what dtrt_staged_bytes says, and libdtrt's 64-byte
 * header for each of its blocks (at most three at once). */
static DtStatus staged(DtrtCtx *ctx, DtKernelFn k, DtStaged which, const DtTensor *in,
                       DtTensor *out, const DtAttrs *a, const char *what) {
  long long before = counted->bytes;
  counted->peak = before;
  DtStatus s = k(ctx, in, 1, out, a);
  long long held = counted->peak - before, want = dtrt_staged_bytes(which, in, 1, out, a, np);
  CHECK(s || (held >= want && held <= want + 3 * 64),
        "%s: held %lld bytes while it ran; dtrt_staged_bytes: %lld", what, held, want);
  return s;
}

/* ---- collectives over the whole job (no mesh) ------------------------- */

static void test_all_reduce(DtrtCtx *ctx) {
  static const int64_t sizes[] = {0, 1, 5, 1000, 12347};
  for (int method = 0; method <= DTRT_COMM_HIER; method++)
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
      for (int inplace = 0; inplace < 2; inplace++) {
        int64_t n = sizes[z];
        DtTensor x = tensor(DTRT_F32, 1, &n), y = tensor(DTRT_F32, 1, &n);
        fill(&x, me);
        DtAttrs a = {.i = {0, method}, .ni = 2};
        DtTensor *out = inplace ? &x : &y;
        DtStatus s = staged(ctx, dtrt_k_all_reduce, DT_STAGED_ALL_REDUCE, &x, out, &a,
                            "all_reduce");
        CHECK(s == DT_OK, "all_reduce %s n=%lld: %s", methods[method], (long long)n,
              dtrt_errmsg(ctx));
        int64_t bad = -1;
        for (int64_t k = 0; k < n && bad < 0; k++) {
          float want = 0;
          for (int r = 0; r < np; r++)
            want += value(r, k);
          if (((float *)out->data)[k] != want)
            bad = k;
        }
        CHECK(bad < 0, "all_reduce %s n=%lld in place %d: wrong at %lld", methods[method],
              (long long)n, inplace, (long long)bad);
        free(x.data), free(y.data);
      }
}

/* A global tensor, the dims to split, and whether the blocks are uneven. */
static const struct {
  int rank;
  int64_t dim[3];
} shapes[] = {{1, {0}}, {2, {0, 5}}, {3, {3, 0, 4}}, {3, {2, 3, 0}}};

/* shapes[s] with the split dim d set to total (0 in the table marks it). */
static DtTensor shaped(int s, int dtype, int d, int64_t total) {
  int64_t dim[3];
  memcpy(dim, shapes[s].dim, sizeof dim);
  dim[d] = total;
  return tensor(dtype, shapes[s].rank, dim);
}

static int split_dim(int s) {
  for (int d = 0; d < shapes[s].rank; d++)
    if (!shapes[s].dim[d])
      return d;
  return 0;
}

static void test_all_gather(DtrtCtx *ctx) {
  for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
    for (int dtype = DTRT_F32; dtype <= DTRT_I32; dtype++)
      for (int ue = 0; ue < 2; ue++)
        for (int method = -1; method <= DTRT_COMM_PADDED; method++) {
          if (method == DTRT_COMM_HIER)
            continue;
          int d = split_dim((int)sh);
          int64_t len[16], total = 7;
          if (ue)
            uneven(np, len, &total);
          else
            even(np, total, len);
          DtTensor full = shaped((int)sh, dtype, d, total), out = shaped((int)sh, dtype, d, total);
          fill(&full, 99);
          DtTensor in = slice(&full, d, start(len, me), len[me]);
          DtAttrs a = attrs(2, (int64_t[]){0, d}, len, method);
          DtStatus s = staged(ctx, dtrt_k_all_gather, DT_STAGED_ALL_GATHER, &in, &out, &a,
                              "all_gather");
          CHECK(s == DT_OK && same(&out, &full), "all_gather shape %zu %s %s %s: %s", sh,
                dtype == DTRT_F32 ? "f32" : "i32", ue ? "uneven" : "even", method_name(method),
                s ? dtrt_errmsg(ctx) : "wrong values");
          free(full.data), free(out.data), free(in.data);
        }
}

static void test_reduce_scatter(DtrtCtx *ctx) {
  for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
    for (int ue = 0; ue < 2; ue++)
      for (int method = -1; method < 3; method++) {
        int d = split_dim((int)sh);
        int64_t len[16], total = 9;
        if (ue)
          uneven(np, len, &total);
        else
          even(np, total, len);
        DtTensor in = shaped((int)sh, DTRT_F32, d, total);
        DtTensor sum = shaped((int)sh, DTRT_F32, d, total);
        fill(&in, me);
        for (int64_t k = 0; k < numel(sum.dim, sum.rank); k++)
          for (int r = 0; r < np; r++)
            ((float *)sum.data)[k] += value(r, k);
        DtTensor want = slice(&sum, d, start(len, me), len[me]);
        DtTensor out = shaped((int)sh, DTRT_F32, d, len[me]);
        DtAttrs a = attrs(2, (int64_t[]){0, d}, len, method);
        DtStatus s = staged(ctx, dtrt_k_reduce_scatter, DT_STAGED_REDUCE_SCATTER, &in, &out, &a,
                            "reduce_scatter");
        CHECK(s == DT_OK && same(&out, &want), "reduce_scatter shape %zu %s %s: %s", sh,
              ue ? "uneven" : "even", method_name(method), s ? dtrt_errmsg(ctx) : "wrong values");
        DtTensor cut = shaped((int)sh, DTRT_F32, d, len[me]);
        a = attrs(2, (int64_t[]){0, d}, len, -1);
        s = staged(ctx, dtrt_k_shard_slice, DT_STAGED_SHARD_SLICE, &sum, &cut, &a, "shard_slice");
        CHECK(s == DT_OK && same(&cut, &want), "shard_slice shape %zu %s: %s", sh,
              ue ? "uneven" : "even", s ? dtrt_errmsg(ctx) : "wrong values");
        free(cut.data);
        free(in.data), free(sum.data), free(want.data), free(out.data);
      }
}

/* Variants: 0 even, no method, no input lengths; 1 uneven output blocks,
 * even input blocks (no list); 2 uneven on both sides, both listed. */
static void test_all_to_all(DtrtCtx *ctx) {
  static const int dims[][2] = {{0, 1}, {1, 0}, {0, 2}, {2, 0}, {1, 2}, {2, 1}};
  for (size_t k = 0; k < sizeof dims / sizeof *dims; k++)
    for (int dtype = DTRT_F32; dtype <= DTRT_I32; dtype++)
      for (int v = 0; v < 3; v++)
        for (int method = v ? 0 : -1; method < (v ? 2 : 0); method++) {
          int di = dims[k][0], dout = dims[k][1];
          int64_t li[16], lo[16], ni = 6, no = 5;
          even(np, ni, li);
          even(np, no, lo);
          if (v >= 1)
            uneven(np, lo, &no);
          if (v == 2) {
            uneven(np, li, &ni);
            for (int m = 0; m < np; m++)
              lo[m] = li[np - 1 - m];
            no = ni;
          }
          int64_t gdim[3] = {2, 3, 4};
          gdim[di] = ni, gdim[dout] = no;
          DtTensor full = tensor(dtype, 3, gdim);
          fill(&full, 7);
          DtTensor in = slice(&full, di, start(li, me), li[me]);
          DtTensor want = slice(&full, dout, start(lo, me), lo[me]);
          DtTensor out = tensor(dtype, 3, want.dim);
          DtAttrs a = attrs(3, (int64_t[]){0, di, dout}, lo, method);
          for (int m = 0; v == 2 && m < np; m++)
            a.i[a.ni++] = li[m];
          DtStatus s = staged(ctx, dtrt_k_all_to_all, DT_STAGED_ALL_TO_ALL, &in, &out, &a,
                              "all_to_all");
          CHECK(s == DT_OK && same(&out, &want), "all_to_all %d->%d %s variant %d %s: %s", di,
                dout, dtype == DTRT_F32 ? "f32" : "i32", v, method_name(method),
                s ? dtrt_errmsg(ctx) : "wrong values");
          free(full.data), free(in.data), free(want.data), free(out.data);
        }
}

/* Mistakes every rank makes alike: refused on every rank, before MPI. */
/* send along the chain of members both ways, each pair alone (the others
 * make no call), and bcast from every member; f32 and i32. */
static void test_p2p(DtrtCtx *ctx) {
  int64_t dim[2] = {3, 5};
  for (int dtype = DTRT_F32; dtype <= DTRT_I32; dtype++) {
    for (int dir = 1; dir >= -1; dir -= 2)
      for (int from = 0; from < np; from++) {
        int to = from + dir;
        if (to < 0 || to >= np || (me != from && me != to))
          continue;
        DtTensor in = tensor(dtype, 2, dim), out = tensor(dtype, 2, dim), want = tensor(dtype, 2, dim);
        fill(&in, me == from ? 10 + from : 50);   /* the receiver's in only gives the shape */
        fill(&want, 10 + from);
        DtAttrs a = {.i = {0, from, to}, .ni = 3};
        DtStatus s = dtrt_k_send(ctx, &in, 1, &out, &a);
        CHECK(s == DT_OK && same(&out, &want), "send %d -> %d %s on %d: %s", from, to,
              dtype == DTRT_F32 ? "f32" : "i32", me, s ? dtrt_errmsg(ctx) : "wrong values");
        free(in.data), free(out.data), free(want.data);
      }
    for (int from = 0; from < np; from++) {
      DtTensor in = tensor(dtype, 2, dim), out = tensor(dtype, 2, dim), want = tensor(dtype, 2, dim);
      fill(&in, 20 + me);
      fill(&want, 20 + from);
      DtAttrs a = {.i = {0, from}, .ni = 2};
      DtStatus s = dtrt_k_bcast(ctx, &in, 1, &out, &a);
      CHECK(s == DT_OK && same(&out, &want), "bcast from %d %s on %d: %s", from,
            dtype == DTRT_F32 ? "f32" : "i32", me, s ? dtrt_errmsg(ctx) : "wrong values");
      free(in.data), free(out.data), free(want.data);
    }
  }
}

static void test_errors(DtrtCtx *ctx) {
  int64_t n = 4, two[2] = {2, 2}, len[16], zero[16] = {0}, big[16] = {5};
  even(np, n, len);
  DtTensor x = tensor(DTRT_F32, 1, &n), y = tensor(DTRT_F32, 1, &n), iy = tensor(DTRT_I32, 1, &n);
  DtTensor m = tensor(DTRT_F32, 2, two);
  DtAttrs many = attrs(2, (int64_t[]){0, 0}, zero, 0);
  many.i[many.ni++] = 0;
  struct {
    DtStatus (*k)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);
    DtTensor *in, *out;
    DtAttrs a;
    const char *want;
  } cases[] = {
      {dtrt_k_all_reduce, &iy, &iy, {.i = {0, 0}, .ni = 2}, "input is i32, expected f32"},
      {dtrt_k_all_reduce, &x, &y, {.i = {1, 0}, .ni = 2}, "mesh axis 1 out of range"},
      {dtrt_k_all_reduce, &x, &y, {.i = {0, 4}, .ni = 2}, "method 4 (padded) is not one of its methods"},
      {dtrt_k_all_reduce, &x, &y, {.ni = 0}, "no mesh axis attribute"},
      {dtrt_k_all_reduce, &x, &y, {.i = {0, 0, 0, 0}, .ni = 4}, "4 int attributes"},
      {dtrt_k_all_gather, &x, &y, many, "int attributes; over a group of"},
      {dtrt_k_all_gather, &x, &y, attrs(2, (int64_t[]){0, 5}, len, -1), "axis 5 out of range"},
      {dtrt_k_all_gather, &x, &y, attrs(2, (int64_t[]){0, 0}, len, 3),
       "method 3 (hierarchical) is not one of its methods"},
      {dtrt_k_all_gather, &x, &y, attrs(2, (int64_t[]){0, 0}, len, 5), "method 5 is not one of its methods"},
      {dtrt_k_reduce_scatter, &x, &y, attrs(2, (int64_t[]){0, 0}, len, 3),
       "method 3 (hierarchical) is not one of its methods"},
      {dtrt_k_all_gather, &x, &y, attrs(2, (int64_t[]){0, 0}, big, 0),
       "block 0 of the split dim has length 5"},
      {dtrt_k_reduce_scatter, &x, &m, attrs(2, (int64_t[]){0, 0}, len, 0),
       "differ outside the split dim"},
      {dtrt_k_all_to_all, &m, &m, attrs(3, (int64_t[]){0, 1, 1}, len, 0), "both 1"},
      {dtrt_k_shard_slice, &x, &y, attrs(2, (int64_t[]){0, 0}, len, 0), "int attributes"},
      {dtrt_k_send, &x, &y, {.i = {0, me, me}, .ni = 3}, "called on member"},
      {dtrt_k_send, &x, &y, {.i = {0, 0, np}, .ni = 3}, "is not one of the group's"},
      {dtrt_k_send, &x, &y, {.i = {0, 0}, .ni = 2}, "2 int attributes; it takes 3"},
      {dtrt_k_send, &x, &m, {.i = {0, 0, 1}, .ni = 3}, "output is f32[2,2], expected f32[4]"},
      {dtrt_k_bcast, &x, &y, {.i = {0, -1}, .ni = 2}, "member -1 is not one of the group's"},
      {dtrt_k_all_gather, &x, &y, attrs(2, (int64_t[]){0, 0}, len, 0),
       np > 1 ? "input has 4 along dim 0, but member" : NULL},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    DtStatus s = cases[k].k(ctx, cases[k].in, 1, cases[k].out, &cases[k].a);
    if (cases[k].want)
      CHECK(s == DT_ERR_ARG && strstr(dtrt_errmsg(ctx), cases[k].want),
            "error case %zu: got %s: %s", k, dtrt_status_name(s), dtrt_errmsg(ctx));
    else
      CHECK(s == DT_OK, "case %zu: %s", k, dtrt_errmsg(ctx));
  }
  free(x.data), free(y.data), free(iy.data), free(m.data);
}

/* ---- meshes ------------------------------------------------------------ */

static float axis_sum(DtrtCtx *ctx, int axis, float v, int method) {
  DtTensor t = {.data = &v, .dtype = DTRT_F32, .rank = 1, .dim = {1}};
  DtAttrs a = {.i = {axis, method}, .ni = 2};
  DtStatus s = dtrt_k_all_reduce(ctx, &t, 1, &t, &a);
  CHECK(s == DT_OK, "all_reduce over axis %d: %s", axis, dtrt_errmsg(ctx));
  return v;
}

static void test_mesh(void) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  DtrtCtx *ctx = dtrt_ctx_new_with(&al);
  int bad[] = {np + 1};
  CHECK(dtrt_mesh_init(ctx, 1, bad) == DT_ERR_ARG && strstr(dtrt_errmsg(ctx), "mesh has"),
        "mesh of %d on %d ranks: %s", np + 1, np, dtrt_errmsg(ctx));
  for (int rows = 1; rows <= np; rows++) {
    if (np % rows)
      continue;
    int cols = np / rows, size[] = {rows, cols};
    DtStatus s = dtrt_mesh_init(ctx, 2, size);
    CHECK(s == DT_OK, "mesh %dx%d: %s", rows, cols, dtrt_errmsg(ctx));
    int r = me / cols, q = me % cols;
    CHECK(dtrt_mesh_coord(ctx, 0) == r && dtrt_mesh_coord(ctx, 1) == q &&
              dtrt_mesh_coord(ctx, 2) == -1,
          "mesh %dx%d: rank %d at (%d,%d)", rows, cols, me, dtrt_mesh_coord(ctx, 0),
          dtrt_mesh_coord(ctx, 1));
    for (int method = 0; method <= DTRT_COMM_HIER; method++) {
      float down = axis_sum(ctx, 0, (float)me, method);
      float across = axis_sum(ctx, 1, (float)me, method);
      CHECK(down == (float)(cols * rows * (rows - 1) / 2 + rows * q),
            "mesh %dx%d axis 0 sum %g", rows, cols, down);
      CHECK(across == (float)(cols * cols * r + cols * (cols - 1) / 2),
            "mesh %dx%d axis 1 sum %g", rows, cols, across);
    }
    /* gather the ranks along axis 1: a row of the mesh */
    int32_t mine = me, row[16] = {0};
    DtTensor in = {.data = &mine, .dtype = DTRT_I32, .rank = 1, .dim = {1}};
    DtTensor out = {.data = row, .dtype = DTRT_I32, .rank = 1, .dim = {cols}};
    DtAttrs a = {.i = {1, 0}, .ni = 2};
    for (int k = 0; k < cols; k++)
      a.i[a.ni++] = 1;
    a.i[a.ni++] = DTRT_COMM_GROUPED;
    s = dtrt_k_all_gather(ctx, &in, 1, &out, &a);
    bool ok = s == DT_OK;
    for (int k = 0; k < cols; k++)
      ok = ok && row[k] == r * cols + k;
    CHECK(ok, "mesh %dx%d: gather along axis 1: %s", rows, cols, dtrt_errmsg(ctx));
  }
  int three[] = {1, np, 1};
  CHECK(dtrt_mesh_init(ctx, 3, three) == DT_OK && dtrt_mesh_coord(ctx, 1) == me &&
            axis_sum(ctx, 2, 1, 0) == 1 && axis_sum(ctx, 1, 1, 1) == (float)np,
        "mesh 1x%dx1: %s", np, dtrt_errmsg(ctx));
  dtrt_ctx_free(ctx);
  CHECK(c.allocs == c.frees, "mesh context: %ld allocations, %ld frees", c.allocs, c.frees);
}

/* ---- agreement and failure --------------------------------------------- */

static void test_agree(DtrtCtx *ctx) {
  CHECK(dtrt_comm_agree(ctx, "model hash", "abc123") == DT_OK, "agree: %s", dtrt_errmsg(ctx));
  CHECK(dtrt_comm_agree(ctx, "empty", NULL) == DT_OK, "agree on NULL: %s", dtrt_errmsg(ctx));
  char big[700];
  memset(big, 'h', sizeof big - 1);
  big[sizeof big - 1] = 0;
  CHECK(dtrt_comm_agree(ctx, "long", big) == DT_OK, "agree on 699 bytes: %s", dtrt_errmsg(ctx));
  if (np == 1)
    return;
  const char *mine = me == np - 1 ? "def456" : "abc123";
  DtStatus s = dtrt_comm_agree(ctx, "model hash", mine);
  char want[160];
  snprintf(want, sizeof want, "model hash differs between ranks: rank 0 has \"abc123\", rank %d "
           "has \"def456\" (1 of %d ranks differ from rank 0)", np - 1, np);
  CHECK(s == DT_ERR_MISMATCH && !strcmp(dtrt_errmsg(ctx), want), "disagree: %s: %s",
        dtrt_status_name(s), dtrt_errmsg(ctx));
  if (me == 1)
    big[600] = 'x';
  s = dtrt_comm_agree(ctx, "long", big);
  CHECK(s == DT_ERR_MISMATCH && strstr(dtrt_errmsg(ctx), "rank 1 has \"hhh"),
        "disagree after 600 bytes: %s", dtrt_errmsg(ctx));
  big[600] = 'h';
  if (me == 0)
    big[650] = 0;
  s = dtrt_comm_agree(ctx, "long", big);
  CHECK(s == DT_ERR_MISMATCH && strstr(dtrt_errmsg(ctx), "rank 1 has") &&
            strstr(dtrt_errmsg(ctx), "ranks differ"),
        "disagree on length: %s", dtrt_errmsg(ctx));
  CHECK(axis_sum(ctx, 0, 1, 0) == (float)np, "collectives after a disagreement");
}

/* msg as every rank reports it when the last rank failed with it. */
static const char *on_last(const char *msg) {
  static char text[256];
  if (np == 1)
    return msg;
  snprintf(text, sizeof text, "rank %d failed: %s", np - 1, msg);
  return text;
}

static void test_status(DtrtCtx *ctx) {
  CHECK(dtrt_comm_status(ctx, DT_OK) == DT_OK, "status, all well: %s", dtrt_errmsg(ctx));
  DtStatus local = DT_OK;
  if (me == np - 1)
    local = dtrt_fail(ctx, DT_ERR_IO, "disk full on purpose");
  DtStatus s = dtrt_comm_status(ctx, local);
  CHECK(s == DT_ERR_IO && !strcmp(dtrt_errmsg(ctx), on_last("disk full on purpose")),
        "status, rank %d failing: %s: %s",
        np - 1, dtrt_status_name(s), dtrt_errmsg(ctx));
  local = me >= 1 ? dtrt_fail(ctx, me == 1 ? DT_ERR_NOMEM : DT_ERR_ARG, "rank %d broke", me)
                  : DT_OK;
  s = dtrt_comm_status(ctx, local);
  if (np > 1)
    CHECK(s == DT_ERR_NOMEM && !strcmp(dtrt_errmsg(ctx), "rank 1 failed: rank 1 broke"),
          "status, ranks 1.. failing: %s", dtrt_errmsg(ctx));
  CHECK(dtrt_comm_status(ctx, DT_OK) == DT_OK, "status after failures");
}

/* ---- an SPMD model: data-parallel linear regression --------------------- */

enum { B = 8, F = 3, W = 0, BIAS = 16 };

/* Rows k*B/np .. of the global batch at step t: y = 2 x0 - x1 + 0.5 x2 + 1. */
static void batch(int64_t t, int first, int rows, float *x, float *y) {
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < F; j++)
      x[i * F + j] = sinf((float)(t * 13 + (first + i) * 7 + j * 3));
    y[i] = 2 * x[i * F] - x[i * F + 1] + 0.5f * x[i * F + 2] + 1;
  }
}

/* The gradient of the global batch's mean squared error, from this rank's
 * rows, summed over the ranks. A NaN input fails the step, after the
 * collective the other ranks wait in (with no share from this rank). */
static DtStatus dp_train(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                         void *const *in, void *const *out, int64_t step) {
  (void)work;
  const float *x = in[0], *y = in[1];
  float *w = (float *)(state + W), *b = (float *)(state + BIAS);
  int rows = B / dtrt_nranks(ctx);
  float g[F + 2] = {0};
  bool poisoned = isnan(x[0]);
  for (int i = 0; i < rows && !poisoned; i++) {
    float e = b[0] - y[i];
    for (int j = 0; j < F; j++)
      e += x[i * F + j] * w[j];
    for (int j = 0; j < F; j++)
      g[j] += 2 * e * x[i * F + j] / B;
    g[F] += 2 * e / B;
    g[F + 1] += e * e / B;
  }
  DtTensor t = {.data = g, .dtype = DTRT_F32, .rank = 1, .dim = {F + 2}};
  DtAttrs a = {.i = {0, step % 2}, .ni = 2};
  DtStatus s = dtrt_k_all_reduce(ctx, &t, 1, &t, &a);
  if (s)
    return s;
  if (poisoned)
    return dtrt_fail(ctx, DT_ERR_ARG, "NaN in the input");
  for (int j = 0; j < F; j++)
    w[j] -= 0.1f * g[j];
  b[0] -= 0.1f * g[F];
  *(float *)out[0] = g[F + 1];
  return DT_OK;
}

static DtGlobalDesc dp_globals[] = {
    {"x", DT_G_INPUT, DTRT_F32, 2, {B, F}, 0, 0, 0, 0, -1, {0}, {0}},
    {"y", DT_G_INPUT, DTRT_F32, 1, {B}, 0, 0, 0, 0, -1, {0}, {0}},
    {"w", DT_G_PARAM, DTRT_F32, 1, {F}, DT_INIT_GLOROT, 0, F, 1, W, {0}, {0}},
    {"b", DT_G_PARAM, DTRT_F32, 1, {1}, DT_INIT_ZEROS, 0, 0, 0, BIAS, {0}, {0}},
};
static const int32_t dp_in[] = {0, 1};

static DtModelDesc dp_desc(const int32_t *mesh, const char *plan) {
  dp_globals[0].dim[0] = dp_globals[1].dim[0] = B / np;
  return (DtModelDesc){.name = "dp", .hash = "dp-hash-1", .nglobal = 4, .global = dp_globals,
                       .state_bytes = 32, .train_step = dp_train, .ntrain_in = 2,
                       .train_in = dp_in, .nmesh_axis = 1, .mesh_axis_size = mesh,
                       .plan_hash = plan};
}

/* The same training on the whole batch, in one process. */
static void reference(const float *w0, int steps, float *w, float *b) {
  memcpy(w, w0, F * sizeof *w);
  *b = 0;
  for (int t = 0; t < steps; t++) {
    float x[B * F], y[B], g[F + 1] = {0};
    batch(t, 0, B, x, y);
    for (int i = 0; i < B; i++) {
      float e = *b - y[i];
      for (int j = 0; j < F; j++)
        e += x[i * F + j] * w[j];
      for (int j = 0; j < F; j++)
        g[j] += 2 * e * x[i * F + j] / B;
      g[F] += 2 * e / B;
    }
    for (int j = 0; j < F; j++)
      w[j] -= 0.1f * g[j];
    *b -= 0.1f * g[F];
  }
}

/* One training step on this rank's rows; poison: a NaN input, or no loss
 * pointer. */
static DtStatus step(DtModel *m, int poison) {
  int rows = B / np;
  float x[B * F], y[B], loss;
  batch(dtrt_model_step(m), me * rows, rows, x, y);
  if (poison == 1)
    x[0] = NAN;
  const void *in[] = {x, y};
  int64_t elems[] = {rows * F, rows};
  return dtrt_model_train_step(m, in, elems, poison == 2 ? NULL : &loss);
}

static void test_model(const char *dir) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  int32_t mesh[] = {np}, wrong[] = {np + 1};
  char err[512], path[400];
  DtModel *m;
  DtModelDesc d = dp_desc(mesh, "plan-1");
  DtStatus s = dtrt_model_create_with(&d, 5, &al, err, sizeof err, &m);
  CHECK(s == DT_OK, "create: %s", err);
  if (s)
    return;
  CHECK(dtrt_model_rank(m) == me, "model rank %d", dtrt_model_rank(m));
  float *w = dtrt_model_tensor(m, "w"), *b = dtrt_model_tensor(m, "b"), w0[F], wr[F], br;
  memcpy(w0, w, sizeof w0);
  for (int t = 0; t < 4; t++)
    CHECK(step(m, 0) == DT_OK, "step %d: %s", t, dtrt_model_error(m));
  reference(w0, 4, wr, &br);
  bool close = fabsf(*b - br) < 1e-5f;
  for (int j = 0; j < F; j++)
    close = close && fabsf(w[j] - wr[j]) < 1e-5f;
  CHECK(close, "weights after 4 steps differ from one process: %g %g %g %g vs %g %g %g %g",
        w[0], w[1], w[2], *b, wr[0], wr[1], wr[2], br);

  /* a step failing on the last rank fails on all, and advances no counter */
  s = step(m, me == np - 1); /* NaN on the last rank */
  CHECK(s == DT_ERR_ARG && !strcmp(dtrt_model_error(m), on_last("NaN in the input")),
        "poisoned step: %s: %s", dtrt_status_name(s), dtrt_model_error(m));
  CHECK(dtrt_model_step(m) == 4, "step counter %lld after a failed step",
        (long long)dtrt_model_step(m));
  s = step(m, me == np - 1 ? 2 : 0);
  CHECK(s == DT_ERR_ARG &&
            !strcmp(dtrt_model_error(m), on_last("dp train_step: loss pointer is NULL")) &&
            dtrt_model_step(m) == 4,
        "no loss pointer on rank %d: %s", np - 1, dtrt_model_error(m));

  /* checkpoints: one file of whole tensors, loaded back. The failed steps
   * above left the replicas unspecified (the last rank did not update): rank
   * 0's values on every rank first, as a checkpoint holds one copy */
  if (np > 1) {
    MPI_Bcast(w, F, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Bcast(b, 1, MPI_FLOAT, 0, MPI_COMM_WORLD);
  }
  snprintf(path, sizeof path, "%s/dp.st", dir);
  CHECK(dtrt_model_save(m, path) == DT_OK, "save: %s", dtrt_model_error(m));
  struct stat st;
  CHECK(stat(path, &st) == 0, "no checkpoint %s", path);
  float saved[F + 1];
  memcpy(saved, w, F * sizeof *w), saved[F] = *b;
  CHECK(step(m, 0) == DT_OK, "step 5: %s", dtrt_model_error(m));
  s = dtrt_model_load(m, path);
  CHECK(s == DT_OK && dtrt_model_step(m) == 4 && !memcmp(w, saved, F * 4) &&
            *b == saved[F],
        "load: %s", dtrt_model_error(m));
  if (np > 1) {
    /* a save whose writes fail on the ranks other than 0 (files limited to
     * 8 bytes there): every rank fails, the last checkpoint stays, no
     * temporary file is left */
    CHECK(step(m, 0) == DT_OK, "step 5 again: %s", dtrt_model_error(m));
    FILE *f = fopen(path, "rb");
    char before[4096], after[4096];
    size_t nb = f ? fread(before, 1, sizeof before, f) : 0;
    if (f)
      fclose(f);
    struct rlimit was;
    getrlimit(RLIMIT_FSIZE, &was);
    if (me > 0) {
      signal(SIGXFSZ, SIG_IGN);
      struct rlimit small = {8, was.rlim_max};
      setrlimit(RLIMIT_FSIZE, &small);
    }
    s = dtrt_model_save(m, path);
    if (me > 0)
      setrlimit(RLIMIT_FSIZE, &was);
    CHECK(s == DT_ERR_IO && strstr(dtrt_model_error(m), "failed: save: cannot write") &&
              strstr(dtrt_model_error(m), "File too large"),
          "a save failing on ranks 1..: %s: %s", dtrt_status_name(s), dtrt_model_error(m));
    f = fopen(path, "rb");
    size_t na = f ? fread(after, 1, sizeof after, f) : 0;
    if (f)
      fclose(f);
    CHECK(na == nb && nb > 0 && !memcmp(before, after, nb), "the last checkpoint changed");
    MPI_Barrier(MPI_COMM_WORLD);
    int left = 0;
    DIR *dd = opendir(dir);
    for (struct dirent *e; dd && (e = readdir(dd));)
      left += strstr(e->d_name, ".tmp.") != NULL;
    if (dd)
      closedir(dd);
    CHECK(left == 0, "%d temporary files left in %s", left, dir);
    CHECK(dtrt_model_load(m, path) == DT_OK && dtrt_model_step(m) == 4, "load after: %s",
          dtrt_model_error(m));
    CHECK(step(m, 0) == DT_OK, "step 5 once more: %s", dtrt_model_error(m));
    memcpy(saved, w, F * sizeof *w), saved[F] = *b;

    /* the per-rank files of earlier versions load into the plan that wrote them */
    char file[440], hash[128];
    snprintf(file, sizeof file, "%s/old.st.rank%d", dir, me);
    snprintf(hash, sizeof hash, "dp-hash-1 plan plan-1 rank %d of %d", me, np);
    DtNamed t[] = {{"w", {saved, DTRT_F32, 1, {F}}}, {"b", {saved + F, DTRT_F32, 1, {1}}}};
    DtrtCtx *own = dtrt_ctx_new();
    CHECK(dtrt_save(own, file, t, 2, hash, 5) == DT_OK, "old file: %s", dtrt_errmsg(own));
    dtrt_ctx_free(own);
    snprintf(file, sizeof file, "%s/old.st", dir);
    CHECK(dtrt_model_load(m, path) == DT_OK && dtrt_model_step(m) == 4, "load: %s",
          dtrt_model_error(m));
    s = dtrt_model_load(m, file);
    CHECK(s == DT_OK && dtrt_model_step(m) == 5 && !memcmp(w, saved, F * 4) && *b == saved[F],
          "old per-rank files: %s: %s", dtrt_status_name(s), dtrt_model_error(m));
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0)
      remove(path);
    s = dtrt_model_load(m, path);
    CHECK(s == DT_ERR_IO && strstr(dtrt_model_error(m), "rank 0 failed: load: cannot open") &&
              dtrt_model_step(m) == 5 && !memcmp(w, saved, F * 4),
          "missing checkpoint: %s: %s", dtrt_status_name(s), dtrt_model_error(m));
  }
  dtrt_model_destroy(m);
  CHECK(c.allocs == c.frees, "model context: %ld allocations, %ld frees", c.allocs, c.frees);

  /* creation refused alike on every rank */
  d = dp_desc(wrong, "plan-1");
  s = dtrt_model_create_with(&d, 5, NULL, err, sizeof err, &m);
  CHECK(s == DT_ERR_ARG && strstr(err, "mesh has") && !m, "wrong mesh: %s", err);
  if (np > 1) {
    d = dp_desc(mesh, me % 2 ? "plan-B" : "plan-A");
    s = dtrt_model_create_with(&d, 5, NULL, err, sizeof err, &m);
    CHECK(s == DT_ERR_MISMATCH && strstr(err, "model dp: plan hash differs between ranks") && !m,
          "plans differ: %s", err);
  }
}

/* The threads of the process before the runtime started any (the main
 * one, and those a library starts as it is loaded, as OpenBLAS does). */
static int first_tids[64], nfirst;

static void note_first_tids(void) {
  DIR *d = opendir("/proc/self/task");
  for (struct dirent *e; d && (e = readdir(d)) && nfirst < 64;)
    if (e->d_name[0] != '.')
      first_tids[nfirst++] = atoi(e->d_name);
  if (d)
    closedir(d);
}

/* Every thread started since, MPI's (when the runtime starts MPI), the
 * pool's and the watchdog's, blocks SIGHUP, SIGINT and SIGTERM, so that a
 * save holds them off (Linux: /proc/self/task). */
static void test_signal_masks(DtrtCtx *ctx) {
  dtrt_threads(ctx);   /* the pool started */
  DIR *d = opendir("/proc/self/task");
  if (!d)
    return;
  int threads = 0;
  for (struct dirent *e; (e = readdir(d));) {
    bool first = e->d_name[0] == '.';
    for (int k = 0; k < nfirst && !first; k++)
      first = first_tids[k] == atoi(e->d_name);
    if (first)
      continue;
    char path[300], line[256], name[64] = "?";
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    FILE *f = fopen(path, "r");
    unsigned long long blk = 0;
    bool found = false;
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "SigBlk:", 7))
        found = sscanf(line + 7, "%llx", &blk) == 1;
      else if (!strncmp(line, "Name:", 5))
        sscanf(line + 5, "%63s", name);
    if (f)
      fclose(f);
    unsigned long long held = 1ull << (SIGHUP - 1) | 1ull << (SIGINT - 1) | 1ull << (SIGTERM - 1);
    if (found)
      threads++;
    CHECK(!found || (blk & held) == held,
          "thread %s (%s) blocks %llx, not SIGHUP, SIGINT, SIGTERM", e->d_name, name, blk);
  }
  closedir(d);
  CHECK(dtrt_threads(ctx) < 2 || threads > 0, "no thread but the main one");
}

/* Whether a fresh context of this rank, pinned to `set`, with
 * DTRT_NUM_THREADS=threads and DTRT_COMM_YIELD=yield (NULL: unset), counts
 * itself as sharing its cores. */
static bool crowded_as(const cpu_set_t *set, const char *threads, const char *yield) {
  cpu_set_t was;
  sched_getaffinity(0, sizeof was, &was);
  CHECK(!sched_setaffinity(0, sizeof *set, set), "sched_setaffinity");
  setenv("DTRT_NUM_THREADS", threads, 1);
  if (yield)
    setenv("DTRT_COMM_YIELD", yield, 1);
  else
    unsetenv("DTRT_COMM_YIELD");
  DtrtCtx *ctx = dtrt_ctx_new();
  CHECK(dtrt_comm_init(ctx) == DT_OK, "comm_init: %s", dtrt_errmsg(ctx));
  bool crowded = dtrt_comm_crowded(ctx);
  dtrt_ctx_free(ctx);
  sched_setaffinity(0, sizeof was, &was);
  return crowded;
}

/* A rank yields its core after a collective exactly where the threads of
 * its node's ranks on its CPUs outnumber them, or where DTRT_COMM_YIELD
 * says so: every rank of a node on its first CPU, each on its own (in
 * turn, when there are more ranks than CPUs), each with two threads, all
 * unpinned. */
static void test_crowded(void) {
  int lme = 0, lnp = 1;   /* this rank among its node's (MPI_COMM_TYPE_SHARED) */
  cpu_set_t all;          /* the CPUs of the node's ranks */
  sched_getaffinity(0, sizeof all, &all);
  if (mpi_up()) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &lme);
    MPI_Comm_size(node, &lnp);
    MPI_Allreduce(MPI_IN_PLACE, &all, (int)sizeof all, MPI_BYTE, MPI_BOR, node);
    MPI_Comm_free(&node);
  }
  int cpu[CPU_SETSIZE], n = 0;
  for (int k = 0; k < CPU_SETSIZE; k++)
    if (CPU_ISSET(k, &all))
      cpu[n++] = k;
  char *threads = getenv("DTRT_NUM_THREADS"), *yield = getenv("DTRT_COMM_YIELD");
  threads = threads ? strdup(threads) : NULL;
  yield = yield ? strdup(yield) : NULL;
  cpu_set_t first, own;
  CPU_ZERO(&first);
  CPU_SET(cpu[0], &first);
  CPU_ZERO(&own);
  CPU_SET(cpu[lme % n], &own);
  bool mpi = mpi_up(), twin = lme + n < lnp || lme >= n;   /* another rank on its CPU */
  CHECK(crowded_as(&first, "1", NULL) == (lnp > 1), "all on CPU %d", cpu[0]);
  CHECK(!crowded_as(&first, "1", "0"), "all on CPU %d, DTRT_COMM_YIELD=0", cpu[0]);
  CHECK(crowded_as(&own, "1", NULL) == twin, "each on its own CPU of %d", n);
  CHECK(crowded_as(&own, "1", "1") == mpi, "each on its own CPU, DTRT_COMM_YIELD=1");
  CHECK(crowded_as(&own, "2", NULL) == mpi, "each on its own CPU with two threads");
  CHECK(crowded_as(&all, "1", NULL) == (lnp > n), "%d ranks on %d CPUs", lnp, n);
  if (threads)
    setenv("DTRT_NUM_THREADS", threads, 1);
  else
    unsetenv("DTRT_NUM_THREADS");
  if (yield)
    setenv("DTRT_COMM_YIELD", yield, 1);
  free(threads);
  free(yield);
}

int main(int argc, char **argv) {
  note_first_tids();
  bool app = argc > 1 && !strcmp(argv[1], "--app-mpi");
  if (app) {
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  }
  bool launched = getenv("PMI_RANK") || getenv("PMI_PORT") || getenv("PMIX_RANK") ||
                  getenv("OMPI_COMM_WORLD_SIZE") || getenv("SLURM_PROCID");
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  counted = &c;
  DtrtCtx *ctx = dtrt_ctx_new_with(&al); /* the first to join: it owns MPI unless the app does */
  CHECK(dtrt_nranks(ctx) == 1 && dtrt_rank(ctx) == 0, "before comm_init");
  DtStatus s = dtrt_comm_init(ctx);
  CHECK(s == DT_OK && dtrt_comm_init(ctx) == DT_OK, "comm_init: %s", dtrt_errmsg(ctx));
  me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  if (mpi_up()) {
    int r, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(r == me && n == np, "rank %d of %d, MPI says %d of %d", me, np, r, n);
  } else {
    CHECK(!launched && np == 1, "MPI not started under a launcher");
  }
  int up;
  MPI_Initialized(&up);
  CHECK(launched || app || !up, "MPI started without a launcher");

  char dir[256] = "";
  if (me == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/dtrt-comm-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  }
  if (mpi_up())
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);

  test_all_reduce(ctx);
  test_all_gather(ctx);
  test_reduce_scatter(ctx);
  test_all_to_all(ctx);
  test_p2p(ctx);
  test_errors(ctx);
  test_mesh();
  test_agree(ctx);
  test_status(ctx);
  test_model(dir);
  if (!app)   /* MPI's threads are the application's then */
    test_signal_masks(ctx);
  test_crowded();

  DtrtCtx *other = dtrt_ctx_new(); /* joins the running MPI: must not end it */
  CHECK(dtrt_comm_init(other) == DT_OK && dtrt_rank(other) == me, "second context");
  dtrt_ctx_free(other);
  CHECK(!launched || mpi_up(), "freeing a second context ended MPI");

  int total[2];
  mpi_totals(total);
  if (me == 0)
    remove_dir(dir);
  dtrt_ctx_free(ctx);
  int down;
  MPI_Finalized(&down);
  bool ok = c.allocs == c.frees && (app ? !down : down == launched);
  if (!ok)
    fprintf(stderr, "rank %d: allocations %ld, frees %ld; MPI finalised: %d\n", me, c.allocs,
            c.frees, down);
  if (app)
    MPI_Finalize();
  if (me == 0)
    printf("%d passed, %d failed\n", total[0], total[1]);
  return total[1] || !ok;
}
