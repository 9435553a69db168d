/* demo_kernels.c: DeMo's three kernels (runtime/kernels_demo.c) on one
 * training step's params of examples/gpt.dt at bench/exchange.sh's size
 * (L 2, D 128, V 96, T 32: 0.42M params, the layers' stacked): each
 * kernel called once per param, the set timed REPS times (default 20) on a
 * context of its own (DTRT_NUM_THREADS threads, as libdtrt reads it).
 * demo_sign averages two ranks' packed rows, each compressed from its own
 * momentum. One JSON line per kernel: the median of the set in ms with its
 * range and ns per element; then one line with the sum of the medians.
 *
 *     build/bench/demo_kernels [REPS]
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "dtrt.h"

enum { L = 2, D = 128, V = 96, T = 32, PARAMS = 17, KERNELS = 3, MAXREPS = 1000 };

/* gpt.dt's params: the model's, then the layers' (stacked: [L, ...]). */
static const struct {
  int rank;
  int64_t dim[3];
  bool stacked;
} params[PARAMS] = {
    {2, {V, D}, false},         {2, {T, D}, false},         {1, {D}, false},
    {1, {D}, false},            {2, {D, V}, false},         {2, {L, D}, true},
    {2, {L, D}, true},          {3, {L, D, D}, true},       {3, {L, D, D}, true},
    {3, {L, D, D}, true},       {3, {L, D, D}, true},       {2, {L, D}, true},
    {2, {L, D}, true},          {3, {L, D, 4 * D}, true},   {2, {L, 4 * D}, true},
    {3, {L, 4 * D, D}, true},   {2, {L, D}, true},
};

typedef struct Param {
  DtTensor delta[2], grad, lr, packed[2], both, out;
  DtAttrs a, sign;
  int64_t n;
} Param;

static float *randoms(int64_t n, uint32_t *seed) {
  float *p = malloc(sizeof *p * (size_t)n);
  for (int64_t i = 0; p && i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = (float)((*seed >> 8) * (1.0 / 16777216.0) - 0.5);
  }
  return p;
}

static DtTensor tensor(float *p, int rank, const int64_t *dim) {
  DtTensor t = {.data = p, .dtype = DTRT_F32, .rank = rank};
  for (int d = 0; d < rank; d++)
    t.dim[d] = dim[d];
  return t;
}

static DtStatus run(DtrtCtx *ctx, Param *p, int kernel) {
  DtTensor in[4] = {p->delta[0], p->grad, p->lr, p->packed[0]};
  if (kernel == 0)
    return dtrt_k_demo_compress(ctx, in, 3, &p->packed[0], &p->a);
  if (kernel == 1)
    return dtrt_k_demo_residual(ctx, in, 4, &p->out, &p->a);
  return dtrt_k_demo_sign(ctx, &p->both, 1, &p->out, &p->sign);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  if (reps < 1 || reps > MAXREPS) {
    fprintf(stderr, "usage: demo_kernels [REPS in 1..%d]\n", MAXREPS);
    return 2;
  }
  DtrtCtx *ctx = dtrt_ctx_new();
  static Param p[PARAMS];
  static float lr = 1e-3f;
  uint32_t seed = 1;
  int64_t elems = 0;
  for (int k = 0; k < PARAMS; k++) {
    Param *q = &p[k];
    const int64_t *dim = params[k].dim;
    int rank = params[k].rank;
    DtDemoTiles t;
    if (!ctx || !dtrt_demo_tiles(dim, rank, params[k].stacked, 64, 32, &t))
      return 1;
    q->n = t.batch * t.rows * t.cols;
    elems += q->n;
    int64_t row = 2 * t.tiles * t.k;
    float *both = malloc(sizeof *both * (size_t)(2 * row));
    for (int r = 0; r < 2; r++) {
      q->delta[r] = tensor(randoms(q->n, &seed), rank, dim);
      q->packed[r] = tensor(both + r * row, 2, (int64_t[]){1, row});
    }
    q->grad = tensor(randoms(q->n, &seed), rank, dim);
    q->out = tensor(malloc(sizeof(float) * (size_t)q->n), rank, dim);
    q->lr = tensor(&lr, 0, NULL);
    q->both = tensor(both, 2, (int64_t[]){2, row});
    q->a = (DtAttrs){.ni = 3, .i = {64, 32, params[k].stacked}, .nf = 1, .f = {0.999}};
    q->sign = (DtAttrs){.ni = 3 + rank, .i = {64, 32, params[k].stacked}};
    for (int d = 0; d < rank; d++)
      q->sign.i[3 + d] = dim[d];
    for (int r = 0; r < 2; r++) {
      DtTensor in[3] = {q->delta[r], q->grad, q->lr};
      if (!both || !q->out.data || dtrt_k_demo_compress(ctx, in, 3, &q->packed[r], &q->a)) {
        fprintf(stderr, "demo_kernels: %s\n", dtrt_errmsg(ctx));
        return 1;
      }
    }
  }
  static const char *const names[KERNELS] = {"demo_compress", "demo_residual", "demo_sign"};
  static double t[KERNELS][MAXREPS];
  for (int i = 0; i < reps; i++)
    for (int k = 0; k < KERNELS; k++) { /* interleaved: each rep sees the same load */
      double t0 = now_ms();
      for (int j = 0; j < PARAMS; j++)
        if (run(ctx, &p[j], k)) {
          fprintf(stderr, "demo_kernels: %s\n", dtrt_errmsg(ctx));
          return 1;
        }
      t[k][i] = now_ms() - t0;
    }
  double total = 0;
  for (int k = 0; k < KERNELS; k++) {
    double med = median(t[k], reps);
    total += med;
    printf("{\"bench\": \"demo_kernels\", \"kernel\": \"%s\", \"elems\": %lld, \"reps\": %d, "
           "\"ms\": %.3f, \"ms_min\": %.3f, \"ms_max\": %.3f, \"ns_per_elem\": %.2f}\n",
           names[k], (long long)elems, reps, med, t[k][0], t[k][reps - 1], med * 1e6 / (double)elems);
  }
  printf("{\"bench\": \"demo_kernels_step\", \"threads\": %d, \"ms\": %.3f}\n", dtrt_threads(ctx),
         total);
  for (int k = 0; k < PARAMS; k++) {
    free(p[k].delta[0].data), free(p[k].delta[1].data), free(p[k].grad.data);
    free(p[k].out.data), free(p[k].both.data);
  }
  dtrt_ctx_free(ctx);
  return 0;
}
