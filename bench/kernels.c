/* kernels.c: the memory-bound kernels of a training step against a
 * STREAM-like copy of the same bytes, in one run. Each kernel runs on the
 * sizes of bench/gpt's step (B 16, T 128, D 256, H 4, V 2048) or on 1M and
 * 4M floats: softmax and its derivative, the normalisation of layer norm
 * and its derivative, cross entropy and its derivative, and the others the
 * gpt step calls (causal mask, dropout, transpose, the bias gradient's sum)
 * through libdtrt (dtrt_k_NAME on a context of its own), and torch's gather,
 * its scatter-add, cumsum, tril, one_hot, i32 arithmetic and where; the optimizers'
 * updates (AdamW, SGD with momentum) as dtc generates them (the models
 * opt_*, bench/opt_*.ir.in), and torch.pow of two tensors as dtc generates
 * it (elem_pow_4m, bench/elem_pow.ir.in). Beside each run, interleaved so
 * that both see the same load, a copy and a triad (a = b + s c) of as many
 * bytes on the threads of a context's pool (dtrt_parallel_for, as
 * generated loops run).
 *
 * Bytes are what a kernel must read and write at least, each element once:
 *
 *   softmax, normalize, causal_mask, dropout, transpose   x in, y out: 8 n
 *   softmax_grad (y, dy), normalize_grad (x, dy)          12 n
 *   cross_entropy (logits, labels)                        4 n + 4 rows
 *   cross_entropy_grad (logits, labels)                   8 n + 4 rows
 *   sum over the rows of [rows, d]                        4 n + 4 d
 *   gather (index, x's row in cache), gather_grad (index, dy, dx)  12 n
 *   (gather_grad also of two long rows, which the threads split by place)
 *   the same along dim 0 (x read, or dx added to, at random)       12 n
 *   cumsum, tril, int_elem                                8 n
 *   one_hot (ids [B T] in, f32 [B T, D] out)              4 n + 4 rows
 *   int_where (mask, x, y in, i32 out)                    16 n
 *   adamw: w, g, m, v in, w, m, v out                     28 n
 *   sgd with momentum: w, g, m in, w, m out               20 n
 *   pow (torch.pow(w + 2, g), generated): w, g in, o out  12 n
 *
 * and STREAM's: copy 8 bytes an element, triad 12 (no write-allocate
 * counted: a kernel writing a fresh output pays it as the copy does, while
 * the updates write back what they read and do not, so they may beat the
 * copy). A scatter-add adds to its destination: along the last axis each
 * row of dx is cleared and added to in cache, so its bound stays 12 n, a
 * copy's (index and dy read, dx written once, paying its write-allocate as
 * the copy's destination does: 1.5 copies only if dx's read were counted
 * and index's not); along dim 0 the adds reach the whole of dx at random
 * places, read and written: 16 n, 4/3 of a copy. The four gathers of
 * [B T, D] also run as the plainest loop (kernels_plain: kernel_over_plain),
 * a yardstick where random places put the bandwidth out of reach. One JSON line
 * per kernel: medians in ms with their range, GB/s, kernel_over_copy (the
 * kernel's time over the copy's at equal bytes, of the medians),
 * kernel_over_bound (over the copy's time at the bound's bytes: 1 is as
 * fast as the memory allows) and kernel_over_copy_best (of the shortest
 * runs: when other processes hold a CPU, a run on the pool waits for it,
 * and the medians of both sides swing with the load) and the 1-minute load
 * average before and after.
 *
 *     build/bench/kernels [REPS] [--only=PREFIX]
 */
#define _GNU_SOURCE /* getloadavg */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dtrt.h"

/* the models of bench/opt_*.ir.in */
#define MODELS(X) X(opt_adamw_1m) X(opt_adamw_4m) X(opt_sgd_1m) X(opt_sgd_4m) X(elem_pow_4m)
#define DECLARE(name) int name##_create(DtModel **, uint64_t);
MODELS(DECLARE)
#undef DECLARE

typedef struct Case {
  char shape[64];
  const char *from; /* "libdtrt" or "generated" */
  double bytes;
  double bound;     /* the bytes of its bandwidth bound; 0: bytes */
  DtKernelFn k; /* a kernel of libdtrt, or */
  DtTensor in[3], out;
  int nin;
  DtAttrs a;
  DtModel *model; /* a generated update, fed g */
  float *g;
  int64_t ng;
  int plain; /* a gather (1) or scatter-add (2) of [act] to run as a plain loop too */
} Case;

static unsigned seed = 1;

static float *randv(int64_t n, float scale) {
  float *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++)
    p[i] = scale * ((float)((seed = seed * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f);
  return p;
}

static DtTensor f32(int rank, const int64_t *dim, float scale) {
  DtTensor t = {.dtype = DTRT_F32, .rank = rank};
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    n *= t.dim[k] = dim[k];
  t.data = randv(n, scale);
  return t;
}

static int64_t numel(const DtTensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++)
    n *= t->dim[k];
  return n;
}

/* A libdtrt kernel on inputs shaped like x (nin of them, the others given),
 * out shaped like x unless set after. */
static void kernel(Case *c, DtKernelFn k, int rank, const int64_t *dim, int nin) {
  c->from = "libdtrt";
  c->k = k;
  c->nin = nin;
  for (int j = 0; j < nin; j++)
    c->in[j] = f32(rank, dim, 4);
  c->out = f32(rank, dim, 1);
  char *p = c->shape + snprintf(c->shape, sizeof c->shape, "f32[");
  for (int d = 0; d < rank; d++)
    p += snprintf(p, (size_t)(c->shape + sizeof c->shape - p), "%s%lld", d ? "," : "",
                  (long long)dim[d]);
  snprintf(p, (size_t)(c->shape + sizeof c->shape - p), "]");
}

static void update(Case *c, int (*create)(DtModel **, uint64_t), int64_t n, const char *shape) {
  c->from = "generated";
  if (create(&c->model, 1)) {
    fprintf(stderr, "kernels: cannot create the model of %s\n", shape);
    exit(1);
  }
  c->g = randv(n, 1e-2f);
  c->ng = n;
  snprintf(c->shape, sizeof c->shape, "%s", shape);
}

/* ---- the cases ---- */

static const int64_t att[] = {64, 128, 128}; /* B H, T, T */
static const int64_t act[] = {2048, 256};    /* B T, D */
static const int64_t logit[] = {2048, 2048}; /* B T, V */

static void softmax(Case *c) {
  kernel(c, dtrt_k_softmax, 3, att, 1);
  c->a = (DtAttrs){.i = {-1}, .ni = 1};
  c->bytes = 8.0 * numel(&c->out);
}

static void softmax_grad(Case *c) {
  kernel(c, dtrt_k_softmax_grad, 3, att, 2);
  c->a = (DtAttrs){.i = {-1}, .ni = 1};
  c->bytes = 12.0 * numel(&c->out);
}

static void normalize(Case *c) {
  kernel(c, dtrt_k_normalize, 2, act, 1);
  c->a = (DtAttrs){.f = {1e-5}, .nf = 1};
  c->bytes = 8.0 * numel(&c->out);
}

static void normalize_grad(Case *c) {
  kernel(c, dtrt_k_normalize_grad, 2, act, 2);
  c->a = (DtAttrs){.f = {1e-5}, .nf = 1};
  c->bytes = 12.0 * numel(&c->out);
}

/* logits and labels in [0, V); the gradient's dloss 1 */
static void ce_inputs(Case *c) {
  free(c->in[1].data);
  int32_t *lab = malloc(sizeof(int32_t) * (size_t)logit[0]);
  for (int64_t i = 0; i < logit[0]; i++)
    lab[i] = (int32_t)((seed = seed * 1103515245u + 12345u) >> 8) % (int32_t)logit[1];
  c->in[1] = (DtTensor){.data = lab, .dtype = DTRT_I32, .rank = 1, .dim = {logit[0]}};
  static float one = 1;
  c->in[2] = (DtTensor){.data = &one, .dtype = DTRT_F32, .rank = 0};
}

static void cross_entropy(Case *c) {
  kernel(c, dtrt_k_cross_entropy, 2, logit, 2);
  ce_inputs(c);
  c->out.rank = 0;
  c->bytes = 4.0 * numel(&c->in[0]) + 4.0 * logit[0];
}

static void cross_entropy_grad(Case *c) {
  kernel(c, dtrt_k_cross_entropy_grad, 2, logit, 2);
  ce_inputs(c);
  c->nin = 3;
  c->bytes = 8.0 * numel(&c->in[0]) + 4.0 * logit[0];
}

static void causal_mask(Case *c) {
  kernel(c, dtrt_k_causal_mask, 3, att, 1);
  c->bytes = 8.0 * numel(&c->out);
}

static void dropout(Case *c) {
  kernel(c, dtrt_k_dropout, 2, act, 1);
  c->a = (DtAttrs){.i = {4995867793629708304}, .ni = 1, .f = {0.1}, .nf = 1};
  c->bytes = 8.0 * numel(&c->out);
}

/* q's [B, T, H, D/H] to [B, H, T, D/H] */
static void transpose(Case *c) {
  static const int64_t q[] = {16, 128, 4, 64};
  kernel(c, dtrt_k_transpose, 4, q, 1);
  c->a = (DtAttrs){.i = {0, 2, 1, 3}, .ni = 4};
  c->out.dim[1] = 4, c->out.dim[2] = 128;
  c->bytes = 8.0 * numel(&c->out);
}

/* a bias's gradient: [B, T, D] summed over B and T */
static void sum(Case *c) {
  static const int64_t x[] = {16, 128, 256};
  kernel(c, dtrt_k_sum, 3, x, 1);
  c->a = (DtAttrs){.i = {0, 1}, .ni = 2};
  c->out.rank = 1, c->out.dim[0] = 256;
  c->bytes = 4.0 * numel(&c->in[0]) + 4.0 * 256;
}

/* i32 values in [0, n) in place of input j, of x's shape */
static void ids(Case *c, int j, int64_t n) {
  int32_t *v = c->in[j].data;
  c->in[j].dtype = DTRT_I32;
  for (int64_t i = 0; i < numel(&c->in[j]); i++)
    v[i] = (int32_t)(((seed = seed * 1103515245u + 12345u) >> 8) % (unsigned)n);
}

/* torch.gather of [B T, D] along D at random places: index in, y out, x's
 * row read (in cache) */
static void gather(Case *c) {
  kernel(c, dtrt_k_gather, 2, act, 2);
  ids(c, 1, act[1]);
  c->a = (DtAttrs){.i = {1}, .ni = 1};
  c->bytes = 12.0 * numel(&c->out);
  c->plain = 1;
}

/* its scatter-add: index and dy in, dx zeroed and added to */
static void gather_grad(Case *c) {
  kernel(c, dtrt_k_gather_grad, 2, act, 2);
  ids(c, 0, act[1]);
  c->a = (DtAttrs){.i = {1, act[0], act[1]}, .ni = 3};
  c->bytes = 12.0 * numel(&c->out);
  c->plain = 2;
}

/* its scatter-add along rows longer than the threads are many: [2, 256K],
 * each row's places split in parts, each thread adding the values that
 * fall in its own (reading the whole row of index and dy) */
static void gather_grad_long(Case *c) {
  static const int64_t x[] = {2, 1 << 18};
  kernel(c, dtrt_k_gather_grad, 2, x, 2);
  ids(c, 0, x[1]);
  c->a = (DtAttrs){.i = {1, x[0], x[1]}, .ni = 3};
  c->bytes = 12.0 * numel(&c->out);
}

/* torch.gather of [B T, D] along B T at random places: each element from
 * another row (x read once, at random) */
static void gather_dim0(Case *c) {
  gather(c);
  ids(c, 1, act[0]);
  c->a.i[0] = 0;
}

/* its scatter-add: each element to another row */
static void gather_grad_dim0(Case *c) {
  gather_grad(c);
  ids(c, 0, act[0]);
  c->a.i[0] = 0;
  c->bound = 16.0 * numel(&c->out);
}

/* cumsum over T of [B, T, D] */
static void cumsum(Case *c) {
  static const int64_t x[] = {16, 128, 256};
  kernel(c, dtrt_k_cumsum, 3, x, 1);
  c->a = (DtAttrs){.i = {1}, .ni = 1};
  c->bytes = 8.0 * numel(&c->out);
}

static void tril(Case *c) {
  kernel(c, dtrt_k_tril, 3, att, 1);
  c->bytes = 8.0 * numel(&c->out);
}

/* one_hot of B T ids among D classes: ids in, f32[B T, D] out */
static void one_hot(Case *c) {
  kernel(c, dtrt_k_one_hot, 2, act, 1);
  c->in[0].rank = 1;
  ids(c, 0, act[1]);
  c->a = (DtAttrs){.i = {act[1]}, .ni = 1};
  c->bytes = 4.0 * act[0] + 4.0 * numel(&c->out);
}

/* where(mask, x, y) of i32 values [B T, D]: mask, x and y in, i32 out */
static void int_where(Case *c) {
  kernel(c, dtrt_k_int_where, 2, act, 3);
  ids(c, 1, 1000);
  ids(c, 2, 1000);
  float *m = c->in[0].data;
  for (int64_t i = 0; i < numel(&c->in[0]); i++)
    m[i] = m[i] > 0;
  c->out.dtype = DTRT_I32;
  c->bytes = 16.0 * numel(&c->out);
}

/* ids - 1 over 1M i32 */
static void int_elem(Case *c) {
  static const int64_t n[] = {1 << 20};
  kernel(c, dtrt_k_int_elem, 1, n, 1);
  ids(c, 0, 1 << 20);
  c->out.dtype = DTRT_I32;
  c->shape[0] = 'i';   /* i32[1048576] */
  c->shape[1] = '3', c->shape[2] = '2';
  c->a = (DtAttrs){.i = {DT_INT_SUB, 1}, .ni = 2};
  c->bytes = 8.0 * numel(&c->out);
}

static void adamw_1m(Case *c) {
  update(c, opt_adamw_1m_create, 1 << 20, "f32[1048576]");
  c->bytes = 28.0 * c->ng;
}

static void adamw_4m(Case *c) {
  update(c, opt_adamw_4m_create, 1 << 22, "f32[4194304]");
  c->bytes = 28.0 * c->ng;
}

static void sgd_1m(Case *c) {
  update(c, opt_sgd_1m_create, 1 << 20, "f32[1048576]");
  c->bytes = 20.0 * c->ng;
}

static void sgd_4m(Case *c) {
  update(c, opt_sgd_4m_create, 1 << 22, "f32[4194304]");
  c->bytes = 20.0 * c->ng;
}

/* torch.pow(w + 2, g), generated (bench/elem_pow.ir.in): w, g in, o out */
static void pow_4m(Case *c) {
  update(c, elem_pow_4m_create, 1 << 22, "f32[4194304]");
  c->bytes = 12.0 * c->ng;
}

static const struct {
  const char *name;
  void (*make)(Case *);
} cases[] = {
    {"softmax", softmax},
    {"softmax_grad", softmax_grad},
    {"normalize", normalize},
    {"normalize_grad", normalize_grad},
    {"cross_entropy", cross_entropy},
    {"cross_entropy_grad", cross_entropy_grad},
    {"causal_mask", causal_mask},
    {"dropout", dropout},
    {"transpose", transpose},
    {"sum", sum},
    {"gather", gather},
    {"gather_grad", gather_grad},
    {"gather_grad", gather_grad_long},
    {"gather_dim0", gather_dim0},
    {"gather_grad_dim0", gather_grad_dim0},
    {"cumsum", cumsum},
    {"tril", tril},
    {"int_elem", int_elem},
    {"one_hot", one_hot},
    {"int_where", int_where},
    {"adamw", adamw_1m},
    {"adamw", adamw_4m},
    {"sgd_momentum", sgd_1m},
    {"sgd_momentum", sgd_4m},
    {"pow", pow_4m},
};
enum { NCASE = sizeof cases / sizeof cases[0] };

static void case_free(Case *c) {
  for (int j = 0; j < c->nin; j++)
    if (c->in[j].rank)
      free(c->in[j].data);
  if (c->k)
    free(c->out.data);
  if (c->model)
    dtrt_model_destroy(c->model);
  free(c->g);
}

static void run(DtrtCtx *ctx, Case *c) {
  float loss;
  DtStatus s = c->k ? c->k(ctx, c->in, c->nin, &c->out, &c->a)
                    : dtrt_model_train_step(c->model, (const void *const *)&c->g, &c->ng, &loss);
  if (s) {
    fprintf(stderr, "kernels: %s\n", c->k ? dtrt_errmsg(ctx) : dtrt_model_error(c->model));
    exit(1);
  }
}

/* ---- the same gather or scatter-add as a plain loop ---- */

/* A yardstick for a gather's access pattern: the places the kernel reads (or
 * reads and writes) touched by the plainest loop, on the same threads, split
 * as the kernel splits them (rows; a scatter-add along dim 0 by blocks of 16
 * columns, which no two units share). Places in range: no checks. */
typedef struct Plain {
  const Case *c;
  int axis;
} Plain;

static void plain_part(void *env, int64_t lo, int64_t hi) {
  const Plain *p = env;
  const Case *c = p->c;
  const int64_t cols = act[1];
  bool scatter = c->plain == 2;
  const int32_t *id = c->in[scatter ? 0 : 1].data;
  const float *src = c->in[scatter ? 1 : 0].data;
  float *dst = c->out.data;
  if (p->axis == 1) { /* units: rows */
    for (int64_t i = lo; i < hi; i++) {
      const int32_t *ir = id + i * cols;
      const float *sr = src + i * cols;
      float *dr = dst + i * cols;
      if (scatter) {
        memset(dr, 0, sizeof(float) * (size_t)cols);
        for (int64_t j = 0; j < cols; j++)
          dr[ir[j]] += sr[j];
      } else {
        for (int64_t j = 0; j < cols; j++)
          dr[j] = sr[ir[j]];
      }
    }
    return;
  }
  if (!scatter) { /* units: rows of the index */
    for (int64_t i = lo; i < hi; i++)
      for (int64_t j = 0; j < cols; j++)
        dst[i * cols + j] = src[(int64_t)id[i * cols + j] * cols + j];
    return;
  }
  int64_t j0 = lo * 16, j1 = hi * 16 < cols ? hi * 16 : cols; /* units: 16 columns */
  for (int64_t i = 0; i < act[0]; i++)
    memset(dst + i * cols + j0, 0, sizeof(float) * (size_t)(j1 - j0));
  for (int64_t i = 0; i < act[0]; i++)
    for (int64_t j = j0; j < j1; j++)
      dst[(int64_t)id[i * cols + j] * cols + j] += src[i * cols + j];
}

static void plain_run(DtrtCtx *ctx, const Case *c) {
  Plain p = {c, (int)c->a.i[0]};
  int64_t units = p.axis == 0 && c->plain == 2 ? (act[1] + 15) / 16 : act[0];
  dtrt_parallel_for(ctx, units, plain_part, &p);
}

/* ---- STREAM ---- */

typedef struct Stream {
  float *a, *b, *c;
  int64_t n; /* elements of each array */
} Stream;

static void copy_part(void *env, int64_t lo, int64_t hi) {
  Stream *s = env;
  float *restrict c = s->c;
  const float *restrict a = s->a;
  for (int64_t i = lo; i < hi; i++)
    c[i] = a[i];
}

static void triad_part(void *env, int64_t lo, int64_t hi) {
  Stream *s = env;
  float *restrict a = s->a;
  const float *restrict b = s->b, *restrict c = s->c;
  for (int64_t i = lo; i < hi; i++)
    a[i] = b[i] + 3.0f * c[i];
}

static Stream stream_new(double bytes) {
  Stream s;
  s.n = (int64_t)(bytes / 8); /* copy: 2 arrays; triad uses 2/3 of n, of 3 */
  s.a = randv(s.n, 1), s.b = randv(s.n, 1), s.c = randv(s.n, 1);
  return s;
}

static void stream_free(Stream *s) { free(s->a), free(s->b), free(s->c); }

int main(int argc, char **argv) {
  int max = 50;
  const char *only = "";
  for (int i = 1; i < argc; i++) {
    if (!strncmp(argv[i], "--only=", 7))
      only = argv[i] + 7;
    else
      max = atoi(argv[i]);
  }
  if (max < 3)
    max = 3;
  if (max > 1000)
    max = 1000;
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx)
    return 1;
  int threads = dtrt_threads(ctx);
  double *tk = malloc(sizeof(double) * (size_t)max), *tc = malloc(sizeof(double) * (size_t)max);
  double *tt = malloc(sizeof(double) * (size_t)max), *tp = malloc(sizeof(double) * (size_t)max);
  for (int i = 0; i < NCASE; i++) {
    if (strncmp(cases[i].name, only, strlen(only)))
      continue;
    Case c;
    memset(&c, 0, sizeof c);
    cases[i].make(&c);
    Stream s = stream_new(c.bytes);
    Stream t = s;
    t.n = s.n * 2 / 3; /* triad: 12 bytes an element */
    double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
    getloadavg(load0, 3);
    run(ctx, &c); /* warm-up, and the first run's time for the count */
    dtrt_parallel_for(ctx, s.n, copy_part, &s);
    dtrt_parallel_for(ctx, t.n, triad_part, &t);
    if (c.plain)
      plain_run(ctx, &c);
    double t0 = now_ms();
    run(ctx, &c);
    double first = now_ms() - t0;
    int reps = first > 0 ? (int)(500 / first) : max;
    reps = reps < 3 ? 3 : reps > max ? max : reps;
    for (int r = 0; r < reps; r++) {
      t0 = now_ms();
      run(ctx, &c);
      double t1 = now_ms();
      dtrt_parallel_for(ctx, s.n, copy_part, &s);
      double t2 = now_ms();
      dtrt_parallel_for(ctx, t.n, triad_part, &t);
      double t3 = now_ms();
      tk[r] = t1 - t0, tc[r] = t2 - t1, tt[r] = t3 - t2;
      if (c.plain) {
        plain_run(ctx, &c);
        tp[r] = now_ms() - t3;
      }
    }
    getloadavg(load1, 3);
    double k = median(tk, reps), cp = median(tc, reps), tr = median(tt, reps);
    double cbytes = 8.0 * s.n, tbytes = 12.0 * t.n, bound = c.bound > 0 ? c.bound : c.bytes;
    printf("{\"bench\": \"kernels\", \"kernel\": \"%s\", \"runs\": \"%s\", \"shape\": \"%s\", "
           "\"threads\": %d, \"reps\": %d, \"mbytes\": %.3f, \"ms\": %.4f, \"ms_min\": %.4f, "
           "\"ms_max\": %.4f, \"gbps\": %.2f, \"copy_ms\": %.4f, \"copy_ms_min\": %.4f, "
           "\"copy_gbps\": %.2f, \"triad_gbps\": %.2f, \"kernel_over_copy\": %.3f, "
           "\"kernel_over_bound\": %.3f, \"kernel_over_copy_best\": %.3f, "
           "\"load_before\": %.2f, \"load_after\": %.2f}\n",
           cases[i].name, c.from, c.shape, threads, reps, c.bytes / 1e6, k, tk[0], tk[reps - 1],
           c.bytes / k / 1e6, cp, tc[0], cbytes / cp / 1e6, tbytes / tr / 1e6,
           k / (cp * c.bytes / cbytes), k / (cp * bound / cbytes),
           tk[0] / (tc[0] * c.bytes / cbytes), load0[0], load1[0]);
    if (c.plain) {
      double pl = median(tp, reps);
      printf("{\"bench\": \"kernels_plain\", \"kernel\": \"%s\", \"shape\": \"%s\", "
             "\"ms\": %.4f, \"plain_ms\": %.4f, \"plain_ms_min\": %.4f, \"plain_ms_max\": %.4f, "
             "\"kernel_over_plain\": %.3f, \"plain_over_bound\": %.3f}\n",
             cases[i].name, c.shape, k, pl, tp[0], tp[reps - 1], k / pl, pl / (cp * bound / cbytes));
    }
    fflush(stdout);
    stream_free(&s);
    case_free(&c);
  }
  free(tk), free(tc), free(tt), free(tp);
  dtrt_ctx_free(ctx);
  return 0;
}
