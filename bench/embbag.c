/* embbag.c: libdtrt's embedding_bag and its weight gradient on a DLRM-like
 * table (R rows of D floats, B bags of K ids drawn uniformly), in each mode,
 * on one thread and on the context's pool, in one run. Bytes are what the
 * forward must move at least: the rows it gathers and its result, 4 D (B K
 * + B); the backward also writes the whole dense gradient, 4 D (B K + B +
 * R). One JSON line per (kernel, mode): medians in ms of REPS runs on one
 * thread and on the pool, the pool's GB/s, one_over_pool (the one thread's
 * median over the pool's), the pool's thread count and the 1-minute load
 * average before the pair of runs (other processes on the CPUs slow the
 * pool most).
 *
 *     build/bench/embbag [REPS] [B K R D]
 */
#define _GNU_SOURCE /* getloadavg */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dtrt.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* The median of reps calls of k on ctx, in ms; -1 on a failure. */
static double time_kernel(DtrtCtx *ctx, DtKernelFn k, const DtTensor *in, int nin, DtTensor *out,
                          const DtAttrs *a, int reps) {
  double *t = malloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    if (k(ctx, in, nin, out, a)) {
      fprintf(stderr, "embbag: %s\n", dtrt_errmsg(ctx));
      free(t);
      return -1;
    }
    t[r] = now_ms() - t0;
  }
  double m = median(t, reps);
  free(t);
  return m;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  int64_t b = 2048, k = 20, r = 100000, d = 64;
  if (argc == 6)
    b = atoll(argv[2]), k = atoll(argv[3]), r = atoll(argv[4]), d = atoll(argv[5]);
  if (reps < 1 || b < 1 || k < 1 || r < 1 || d < 1 || (argc != 2 && argc != 6 && argc != 1)) {
    fprintf(stderr, "usage: embbag [REPS] [B K R D]\n");
    return 2;
  }
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)(b * k));
  float *w = malloc(sizeof(float) * (size_t)(r * d)), *y = malloc(sizeof(float) * (size_t)(b * d));
  float *dw = malloc(sizeof(float) * (size_t)(r * d));
  for (int64_t j = 0; j < b * k; j++)
    ids[j] = (int32_t)(next() % (uint64_t)r);
  for (int64_t j = 0; j < r * d; j++)
    w[j] = (float)(next() >> 40) / (float)(1 << 24) - 0.5f;
  for (int64_t j = 0; j < b * d; j++)
    y[j] = (float)(next() >> 40) / (float)(1 << 24) - 0.5f;
  DtTensor in[3] = {{.data = ids, .dtype = DTRT_I32, .rank = 2, .dim = {b, k}},
                    {.data = w, .dtype = DTRT_F32, .rank = 2, .dim = {r, d}},
                    {.data = y, .dtype = DTRT_F32, .rank = 2, .dim = {b, d}}};
  DtTensor out = {.data = y, .dtype = DTRT_F32, .rank = 2, .dim = {b, d}};
  DtTensor gout = {.data = dw, .dtype = DTRT_F32, .rank = 2, .dim = {r, d}};
  setenv("DTRT_NUM_THREADS", "1", 1); /* read when the context makes its pool */
  DtrtCtx *one = dtrt_ctx_new();
  dtrt_threads(one);
  unsetenv("DTRT_NUM_THREADS");
  DtrtCtx *pool = dtrt_ctx_new();
  int threads = dtrt_threads(pool);
  float *fwd_out = malloc(sizeof(float) * (size_t)(b * d));
  out.data = fwd_out;
  for (int mode = 0; mode < DT_BAG_COUNT; mode++)
    for (int grad = 0; grad < 2; grad++) {
      DtAttrs a = {.ni = 1, .i = {mode}, .s = "bench"};
      DtKernelFn kf = grad ? dtrt_k_embedding_bag_grad : dtrt_k_embedding_bag;
      DtTensor *o = grad ? &gout : &out;
      time_kernel(pool, kf, in, 2 + grad, o, &a, 2); /* warm the pages and the pool */
      double load = -1;
      getloadavg(&load, 1);
      double t1 = time_kernel(one, kf, in, 2 + grad, o, &a, reps);
      double tp = time_kernel(pool, kf, in, 2 + grad, o, &a, reps);
      if (t1 < 0 || tp < 0)
        return 1;
      double bytes = 4.0 * (double)d * (double)(b * k + b + (grad ? r : 0));
      printf("{\"bench\": \"embbag\", \"kernel\": \"%s\", \"mode\": \"%s\", \"B\": %lld, "
             "\"K\": %lld, \"R\": %lld, \"D\": %lld, \"reps\": %d, \"one_ms\": %.4f, "
             "\"pool_ms\": %.4f, \"pool_gbs\": %.2f, \"one_over_pool\": %.3f, \"threads\": %d, "
             "\"load\": %.2f}\n",
             grad ? "embedding_bag_grad" : "embedding_bag", dtrt_bag_mode_names[mode], (long long)b,
             (long long)k, (long long)r, (long long)d, reps, t1, tp, bytes / tp / 1e6, t1 / tp,
             threads, load);
    }
  dtrt_ctx_free(one);
  dtrt_ctx_free(pool);
  free(ids), free(w), free(y), free(dw), free(fwd_out);
  return 0;
}
