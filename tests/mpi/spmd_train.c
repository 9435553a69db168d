/* spmd_train.c: trains a model compiled by dtc for STEPS steps on batches
 * made here from a fixed seed, then runs its forward once, and writes the
 * loss of every step, every param (gathered whole from the ranks' blocks)
 * and the forward's output to OUT. Compiled once per plan of the same model:
 * for one device (run alone) and for each parallel plan (run under mpiexec
 * with that plan's rank count), so the files must agree:
 *
 *     spmd_train [--memory] OUT [REF]
 *     spmd_train --create-fails TEXT
 *
 * With REF (the single-device run's file) rank 0 compares OUT against it
 * and exits 1 on a difference beyond the tolerance: per step
 * |loss - ref| <= TOL max(1, |ref|), and every element of a tensor within
 * TOL times the largest magnitude in the reference tensor. Elements that
 * several ranks hold (replicated params) must agree to the same tolerance.
 * With --memory each rank prints, after the forward, what it held at most
 * as tests/mpi/mem_train.c does (tests/mpi/memory.sh compares it with the
 * plan). With --create-fails a rank exits 0 only when creating the model fails
 * with a message holding TEXT (a launch with the wrong rank count).
 * Build with -DSPMD_GPT for examples/transformer.dt, with -DSPMD_GPT
 * -DSPMD_DEEP for examples/gpt.dt, with -DSPMD_CNN for examples/cnn.dt,
 * with -DSPMD_CNN_BN for tests/mpi/cnn_bn_sgd.dt (its buffers compared too),
 * with -DSPMD_BN_LOOP for tests/mpi/bn_loop_sgd.dt (batch norm in a loop,
 * its stacked buffers compared too),
 * with -DSPMD_DLRM for tests/mpi/dlrm.dt (embedding bags; --bad-id before
 * OUT: an id outside its table, and the step must fail), with
 * -DSPMD_CRITEO=R for tests/mpi/criteo_sgd.dt (examples/dlrm.dt's DLRM,
 * tables of R rows), else
 * examples/mlp.dt (with -DSPMD_IGNORE tests/mpi/mlp_losses.dt, some
 * labels -100). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dtrt.h"

#ifndef STEPS
#define STEPS 5   /* -DSTEPS=7: gradient accumulation's tests (mlp_accum.dt) */
#endif
#ifndef TOL
#define TOL 1e-4   /* -DTOL=0: bit for bit (deterministic mode) */
#endif
#define SEED 42

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

#ifdef SPMD_GPT
#include "gpt.h"
typedef gpt Model;
#define model_create gpt_create
#define model_destroy gpt_destroy
#define model_error gpt_error
#define OUT_ELEMS GPT_LOGITS_ELEMS
#ifdef SPMD_DEEP   /* examples/gpt.dt: the layers' params stacked */
static const char *const params[] = {
    "tok",       "pos",       "layers.g1",   "layers.c1",   "layers.wq",   "layers.wk",
    "layers.wv", "layers.wo", "layers.g2",   "layers.c2",   "layers.w_up", "layers.b_up",
    "layers.w_dn", "layers.b_dn", "g3",      "c3",          "w_out"};
#else
static const char *const params[] = {"tok", "pos", "g1",   "c1",   "wq",   "wk", "wv", "wo", "g2",
                                     "c2",  "w_up", "b_up", "w_dn", "b_dn", "g3", "c3", "w_out"};
#endif
static int32_t ids[GPT_IDS_ELEMS], nxt[GPT_NEXT_ELEMS];

/* Token sequences where each next token is the following id. */
static void batch(void) {
  for (int b = 0; b < GPT_IDS_DIM0; b++)
    for (int t = 0; t < GPT_IDS_DIM1; t++)
      ids[b * GPT_IDS_DIM1 + t] = (int32_t)(next() % GPT_DIM_V);
  for (int k = 0; k < GPT_IDS_ELEMS; k++)
    nxt[k] = (k + 1) % GPT_IDS_DIM1 ? ids[k + 1] : (int32_t)(next() % GPT_DIM_V);
}

static int train(Model *m, float *loss) {
  batch();
  return gpt_train_step(m, ids, GPT_IDS_ELEMS, nxt, GPT_NEXT_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return gpt_forward(m, ids, GPT_IDS_ELEMS, out, OUT_ELEMS);
}
#elif defined SPMD_CNN   /* examples/cnn.dt */
#include "cnn.h"
typedef cnn Model;
#define model_create cnn_create
#define model_destroy cnn_destroy
#define model_error cnn_error
#define OUT_ELEMS CNN_LOGITS_ELEMS
static const char *const params[] = {"k1", "b1", "k2", "b2", "w1", "c1", "w2", "c2"};
static float x[CNN_X_ELEMS];
static int32_t y[CNN_Y_ELEMS];

static void batch(void) {
  for (int k = 0; k < CNN_X_ELEMS; k++)
    x[k] = (float)(next() >> 40) / (float)(1 << 24);
  for (int k = 0; k < CNN_Y_ELEMS; k++)
    y[k] = (int32_t)(next() % 10);
}

static int train(Model *m, float *loss) {
  batch();
  return cnn_train_step(m, x, CNN_X_ELEMS, y, CNN_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return cnn_forward(m, x, CNN_X_ELEMS, out, OUT_ELEMS);
}
#elif defined SPMD_CNN_BN   /* tests/mpi/cnn_bn_sgd.dt */
#include "cnnbn.h"
typedef cnnbn Model;
#define model_create cnnbn_create
#define model_destroy cnnbn_destroy
#define model_error cnnbn_error
#define OUT_ELEMS CNNBN_LOGITS_ELEMS
static const char *const params[] = {"k1", "g1", "b1", "m1", "v1", "k2", "g2", "b2",
                                     "m2", "v2", "w1", "c1", "w2", "c2"};
static float x[CNNBN_X_ELEMS];
static int32_t y[CNNBN_Y_ELEMS];

static void batch(void) {
  for (int k = 0; k < CNNBN_X_ELEMS; k++)
    x[k] = (float)(next() >> 40) / (float)(1 << 24);
  for (int k = 0; k < CNNBN_Y_ELEMS; k++)
    y[k] = (int32_t)(next() % 10);
}

static int train(Model *m, float *loss) {
  batch();
  return cnnbn_train_step(m, x, CNNBN_X_ELEMS, y, CNNBN_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return cnnbn_forward(m, x, CNNBN_X_ELEMS, out, OUT_ELEMS);
}
#elif defined SPMD_BN_LOOP   /* tests/mpi/bn_loop_sgd.dt */
#include "bnloop.h"
typedef bnloop Model;
#define model_create bnloop_create
#define model_destroy bnloop_destroy
#define model_error bnloop_error
#define OUT_ELEMS BNLOOP_H_ELEMS
static const char *const params[] = {"layers.conv.weight", "layers.bn.weight", "layers.bn.bias",
                                     "layers.bn.running_mean", "layers.bn.running_var"};
static float x[BNLOOP_X_ELEMS], y[BNLOOP_Y_ELEMS];

static void batch(void) {
  for (int k = 0; k < BNLOOP_X_ELEMS; k++)
    x[k] = (float)(next() >> 40) / (float)(1 << 24) - 0.5f;
  for (int k = 0; k < BNLOOP_Y_ELEMS; k++)
    y[k] = (float)(next() >> 40) / (float)(1 << 24) - 0.5f;
}

static int train(Model *m, float *loss) {
  batch();
  return bnloop_train_step(m, x, BNLOOP_X_ELEMS, y, BNLOOP_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return bnloop_forward(m, x, BNLOOP_X_ELEMS, out, OUT_ELEMS);
}
#elif defined SPMD_CRITEO   /* tests/mpi/criteo_sgd.dt: 26 tables of SPMD_CRITEO rows */
#include "dlrm.h"
typedef dlrm Model;
#define model_create dlrm_create
#define model_destroy dlrm_destroy
#define model_error dlrm_error
#define OUT_ELEMS DLRM_LOGIT_ELEMS
static const char *const params[] = {
    "c1.w",  "c2.w",  "c3.w",  "c4.w",  "c5.w",  "c6.w",  "c7.w",  "c8.w",  "c9.w",
    "c10.w", "c11.w", "c12.w", "c13.w", "c14.w", "c15.w", "c16.w", "c17.w", "c18.w",
    "c19.w", "c20.w", "c21.w", "c22.w", "c23.w", "c24.w", "c25.w", "c26.w", "bw0",
    "bb0",   "bw1",   "bb1",   "tw0",   "tb0",   "tw1",   "tb1"};
static int32_t ids[DLRM_IDS_ELEMS];
static float dense[DLRM_DENSE_ELEMS], y[DLRM_Y_ELEMS];

/* Ids over each table, dense features in [0, 1), clicks 0 or 1. */
static void batch(void) {
  for (int k = 0; k < DLRM_IDS_ELEMS; k++)
    ids[k] = (int32_t)(next() % SPMD_CRITEO);
  for (int k = 0; k < DLRM_DENSE_ELEMS; k++)
    dense[k] = (float)(next() >> 40) / (float)(1 << 24);
  for (int k = 0; k < DLRM_Y_ELEMS; k++)
    y[k] = (float)(next() % 2);
}

static int train(Model *m, float *loss) {
  batch();
  return dlrm_train_step(m, dense, DLRM_DENSE_ELEMS, ids, DLRM_IDS_ELEMS, y, DLRM_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return dlrm_forward(m, dense, DLRM_DENSE_ELEMS, ids, DLRM_IDS_ELEMS, out, OUT_ELEMS);
}
#elif defined SPMD_DLRM   /* tests/mpi/dlrm.dt */
#include "dlrm.h"
typedef dlrm Model;
#define model_create dlrm_create
#define model_destroy dlrm_destroy
#define model_error dlrm_error
#define OUT_ELEMS DLRM_LOGIT_ELEMS
static const char *const params[] = {"e_item", "e_tag", "e_cat", "w0", "w1", "b1", "w2"};
static int32_t items[DLRM_ITEMS_ELEMS], tags[DLRM_TAGS_ELEMS], cats[DLRM_CATS_ELEMS];
static int32_t offs[DLRM_OFFS_ELEMS];
static float x[DLRM_X_ELEMS], y[DLRM_Y_ELEMS];

/* Ids over each table (a tag of 0 is padding, about one in three), bags of
 * categories of 0 to 4 entries, clicks 0 or 1. */
static void batch(void) {
  for (int k = 0; k < DLRM_ITEMS_ELEMS; k++)
    items[k] = (int32_t)(next() % 100);
  for (int k = 0; k < DLRM_TAGS_ELEMS; k++)
    tags[k] = next() % 3 ? (int32_t)(next() % 30) : 0;
  for (int k = 0; k < DLRM_CATS_ELEMS; k++)
    cats[k] = (int32_t)(next() % 20);
  offs[0] = 0;
  for (int k = 1; k < DLRM_OFFS_ELEMS; k++) {
    int32_t end = offs[k - 1] + (int32_t)(next() % 5);
    offs[k] = end > DLRM_CATS_ELEMS ? DLRM_CATS_ELEMS : end;
  }
  for (int k = 0; k < DLRM_X_ELEMS; k++)
    x[k] = (float)(next() >> 40) / (float)(1 << 24);
  for (int k = 0; k < DLRM_Y_ELEMS; k++)
    y[k] = (float)(next() % 2);
}

static bool bad_id;   /* --bad-id: id 100 (e_item has 100 rows) in batch row 1 */

static int train(Model *m, float *loss) {
  batch();
  if (bad_id)
    items[1 * DLRM_ITEMS_DIM1 + 2] = 100;
  return dlrm_train_step(m, items, DLRM_ITEMS_ELEMS, tags, DLRM_TAGS_ELEMS, cats,
                         DLRM_CATS_ELEMS, offs, DLRM_OFFS_ELEMS, x, DLRM_X_ELEMS, y,
                         DLRM_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return dlrm_forward(m, items, DLRM_ITEMS_ELEMS, tags, DLRM_TAGS_ELEMS, cats, DLRM_CATS_ELEMS,
                      offs, DLRM_OFFS_ELEMS, x, DLRM_X_ELEMS, out, OUT_ELEMS);
}
#else
#include "mlp.h"
typedef mlp Model;
#define model_create mlp_create
#define model_destroy mlp_destroy
#define model_error mlp_error
#define OUT_ELEMS MLP_LOGITS_ELEMS
static const char *const params[] = {"w1", "b1", "w2", "b2"};
static float x[MLP_X_ELEMS];
static int32_t y[MLP_Y_ELEMS];

static void batch(void) {
  for (int k = 0; k < MLP_X_ELEMS; k++)
    x[k] = (float)(next() >> 40) / (float)(1 << 24);
  for (int k = 0; k < MLP_Y_ELEMS; k++)
    y[k] = (int32_t)(next() % 10);
#ifdef SPMD_IGNORE   /* tests/mpi/mlp_losses.dt: about one label in four is -100 */
  for (int k = 0; k < MLP_Y_ELEMS; k++)
    if (next() % 4 == 0)
      y[k] = -100;
#endif
}

static int train(Model *m, float *loss) {
  batch();
  return mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, loss);
}

static int forward(Model *m, float *out) {
  batch();
  return mlp_forward(m, x, MLP_X_ELEMS, out, OUT_ELEMS);
}
#endif

#define NPARAM ((int)(sizeof params / sizeof params[0]))
#define NTENSOR (NPARAM + 1)

typedef struct Tensor {
  char name[32];
  int64_t n;
  float *v;
} Tensor;

typedef struct Run {
  float loss[STEPS];
  Tensor t[NTENSOR];   /* the params, then the forward's output */
} Run;

static int64_t elems(const int64_t *dim, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++)
    n *= dim[d];
  return n;
}

/* Puts block b (dims dim, from begin on) into the whole tensor w of dims
 * full; where held[] is already set, records the largest difference. */
static void place(float *w, bool *held, const int64_t *full, int rank, const float *b,
                  const int64_t *dim, const int64_t *begin, double *diff) {
  int64_t at[DT_MAX_RANK] = {0}, n = elems(dim, rank);
  for (int64_t k = 0; k < n; k++) {
    int64_t i = 0;
    for (int d = 0; d < rank; d++)
      i = i * full[d] + begin[d] + at[d];
    if (held[i])
      *diff = fmax(*diff, fabs((double)w[i] - b[k]));
    else
      w[i] = b[k], held[i] = true;
    for (int d = rank - 1; d >= 0 && ++at[d] == dim[d]; d--)
      at[d] = 0;
  }
}

/* Rank 0 gathers every rank's block of param `name` into t; false (on rank
 * 0) when an element is missing or replicas differ. */
static bool gather(Model *model, const char *name, Tensor *t, int me, int np) {
  DtTensor b;
  int64_t full[DT_MAX_RANK], meta[2 * DT_MAX_RANK] = {0};   /* block dims, then begin */
  if (dtrt_model_tensor_block((DtModel *)model, name, &b, full, meta + DT_MAX_RANK)) {
    fprintf(stderr, "spmd_train: %s\n", model_error(model));
    exit(1);
  }
  memcpy(meta, b.dim, sizeof b.dim);
  int nm = 2 * DT_MAX_RANK;
  int64_t *all = me ? NULL : malloc(sizeof *all * (size_t)(nm * np));
  if (np > 1)
    MPI_Gather(meta, nm, MPI_INT64_T, all, nm, MPI_INT64_T, 0, MPI_COMM_WORLD);
  else
    memcpy(all, meta, sizeof meta);
  if (me) {
    MPI_Send(b.data, (int)elems(b.dim, b.rank), MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
    return true;
  }
  snprintf(t->name, sizeof t->name, "%s", name);
  t->n = elems(full, b.rank);
  t->v = calloc((size_t)t->n, sizeof *t->v);
  bool *held = calloc((size_t)t->n, sizeof *held);
  double diff = 0, max = 0;
  for (int r = 0; r < np; r++) {
    const int64_t *mr = all + r * nm;
    int64_t n = elems(mr, b.rank);
    float *blk = r ? malloc(sizeof *blk * (size_t)(n + 1)) : b.data;
    if (r)
      MPI_Recv(blk, (int)n, MPI_FLOAT, r, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    place(t->v, held, full, b.rank, blk, mr, mr + DT_MAX_RANK, &diff);
    if (r)
      free(blk);
  }
  bool ok = true;
  for (int64_t i = 0; i < t->n; i++) {
    ok &= held[i];
    max = fmax(max, fabs(t->v[i]));
  }
  if (!ok)
    fprintf(stderr, "spmd_train: '%s': no rank holds some elements\n", name);
  if (diff > TOL * max) {
    fprintf(stderr, "spmd_train: '%s': replicas differ by %g (largest element %g)\n", name, diff,
            max);
    ok = false;
  }
  free(held);
  free(all);
  return ok;
}

static bool write_run(const char *path, const Run *r) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(r->loss, sizeof r->loss, 1, f) == 1;
  for (int k = 0; ok && k < NTENSOR; k++)
    ok = fwrite(r->t[k].name, sizeof r->t[k].name, 1, f) == 1 &&
         fwrite(&r->t[k].n, sizeof r->t[k].n, 1, f) == 1 &&
         fwrite(r->t[k].v, sizeof *r->t[k].v, (size_t)r->t[k].n, f) == (size_t)r->t[k].n;
  if (f && fclose(f))
    ok = false;
  if (!ok)
    fprintf(stderr, "spmd_train: cannot write %s\n", path);
  return ok;
}

static bool read_run(const char *path, Run *r) {
  FILE *f = fopen(path, "rb");
  bool ok = f && fread(r->loss, sizeof r->loss, 1, f) == 1;
  for (int k = 0; ok && k < NTENSOR; k++) {
    ok = fread(r->t[k].name, sizeof r->t[k].name, 1, f) == 1 &&
         fread(&r->t[k].n, sizeof r->t[k].n, 1, f) == 1 && r->t[k].n > 0 &&
         r->t[k].n < (1 << 28);
    r->t[k].v = ok ? malloc(sizeof *r->t[k].v * (size_t)r->t[k].n) : NULL;
    ok = ok && fread(r->t[k].v, sizeof *r->t[k].v, (size_t)r->t[k].n, f) == (size_t)r->t[k].n;
  }
  if (f)
    fclose(f);
  if (!ok)
    fprintf(stderr, "spmd_train: cannot read %s\n", path);
  return ok;
}

static bool compare(const Run *got, const Run *ref) {
  bool ok = true;
  double worst = 0;
  for (int s = 0; s < STEPS; s++) {
    double tol = TOL * fmax(1, fabs(ref->loss[s]));
    worst = fmax(worst, fabs(got->loss[s] - ref->loss[s]));
    if (fabs(got->loss[s] - ref->loss[s]) > tol) {
      fprintf(stderr, "spmd_train: step %d: loss %.9g, single device %.9g\n", s, got->loss[s],
              ref->loss[s]);
      ok = false;
    }
  }
  printf("%-8s max |diff| %.3g over %d steps\n", "loss", worst, STEPS);
  for (int k = 0; k < NTENSOR; k++) {
    const Tensor *g = &got->t[k], *r = &ref->t[k];
    if (strcmp(g->name, r->name) || g->n != r->n) {
      fprintf(stderr, "spmd_train: tensor %d is '%s' of %lld, single device '%s' of %lld\n", k,
              g->name, (long long)g->n, r->name, (long long)r->n);
      ok = false;
      continue;
    }
    double max = 0, diff = 0;
    int64_t worst = 0;
    for (int64_t i = 0; i < r->n; i++)
      max = fmax(max, fabs(r->v[i]));
    for (int64_t i = 0; i < r->n; i++)
      if (fabs((double)g->v[i] - r->v[i]) > diff)
        diff = fabs((double)g->v[i] - r->v[i]), worst = i;
    printf("%-8s max |diff| %.3g, %.3g of its largest element\n", r->name, diff,
           max > 0 ? diff / max : diff);
    if (diff > TOL * max) {
      fprintf(stderr, "spmd_train: '%s'[%lld] is %.9g, single device %.9g\n", r->name,
              (long long)worst, g->v[worst], r->v[worst]);
      ok = false;
    }
  }
  return ok;
}

int main(int argc, char **argv) {
  bool memory = argc > 1 && !strcmp(argv[1], "--memory");
  argc -= memory, argv += memory;
#if defined SPMD_DLRM && !defined SPMD_CRITEO
  bad_id = argc > 1 && !strcmp(argv[1], "--bad-id");
  argc -= bad_id, argv += bad_id;
#endif
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: spmd_train [--memory] OUT [REF] | spmd_train --create-fails TEXT\n");
    return 2;
  }
  const char *expect = strcmp(argv[1], "--create-fails") ? NULL : argv[2];
  Model *model;
  if (model_create(&model, SEED)) {
    fprintf(stderr, "spmd_train: create: %s\n", model_error(NULL));
    return expect && argc == 3 && strstr(model_error(NULL), expect) ? 0 : 1;
  }
  if (expect) {
    fprintf(stderr, "spmd_train: the model was created; expected: %s\n", expect);
    model_destroy(model);
    return 1;
  }
  int me = dtrt_model_rank((DtModel *)model), np = 1, up;
  MPI_Initialized(&up);
  if (up)
    MPI_Comm_size(MPI_COMM_WORLD, &np);
  Run run = {0};
  bool ok = true, bad = false;
  for (int s = 0; s < STEPS && ok; s++)
    if (train(model, &run.loss[s])) {
      fprintf(stderr, "spmd_train: rank %d: step %d: %s\n", me, s, model_error(model));
      ok = false;
    }
  Tensor *out = &run.t[NPARAM];
  snprintf(out->name, sizeof out->name, "output");
  out->n = OUT_ELEMS;
  out->v = malloc(sizeof *out->v * OUT_ELEMS);
  if (ok && forward(model, out->v)) {
    fprintf(stderr, "spmd_train: rank %d: forward: %s\n", me, model_error(model));
    ok = false;
  }
  int64_t peak, rss;   /* before the gathers, which allocate whole params */
  if (ok && memory) {
    if (dtrt_model_memory((DtModel *)model, &peak, &rss)) {
      fprintf(stderr, "spmd_train: rank %d: memory: %s\n", me, model_error(model));
      ok = false;
    } else {
      printf("rank %d peak_bytes %lld rss_growth %lld\n", me, (long long)peak, (long long)rss);
    }
  }
  /* every rank takes part in every gather, whatever rank 0 found */
  for (int k = 0; ok && k < NPARAM; k++)
    bad |= !gather(model, params[k], &run.t[k], me, np);
  ok &= !bad;
  model_destroy(model);
  if (me == 0 && ok) {
    ok = write_run(argv[1], &run);
    Run ref = {0};
    if (ok && argc == 3)
      ok = read_run(argv[2], &ref) && compare(&run, &ref);
    for (int k = 0; k < NTENSOR; k++)
      free(ref.t[k].v);
    printf("spmd_train: %d rank%s, loss %.6g -> %.6g: %s\n", np, np == 1 ? "" : "s", run.loss[0],
           run.loss[STEPS - 1], ok ? "ok" : "FAILED");
  }
  for (int k = 0; k < NTENSOR; k++)
    free(run.t[k].v);
  return ok ? 0 : 1;
}
