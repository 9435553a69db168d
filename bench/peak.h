/* peak.h: the machine's FP32 peak, measured: independent fused multiply-adds
 * on the widest vector registers the CPU has (AVX-512, AVX2 with FMA, SSE,
 * NEON; chosen at run time), on one thread pinned to each CPU of the affinity
 * mask, all started together. Header only; link with Threads, and define
 * _GNU_SOURCE before the first include (CPU affinity).
 *
 *     Peak p = peak_measure(9);      // 9 samples of about 50 ms
 *     double ms = flops / (p.best * 1e6);
 */
#ifndef PEAK_H
#define PEAK_H

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "bench.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

/* Independent accumulators: more than FMA latency (4 cycles) times FMA units
 * (2), so the units never wait for a result. */
enum { PEAK_ACC = 16 };

typedef struct Peak {
  const char *isa;       /* "avx512", "avx2", "sse", "neon", "scalar" */
  int lanes;             /* floats per register */
  int threads;
  int samples;
  double best, median, worst;   /* GFLOP/s */
} Peak;

/* Each kernel runs iters rounds of PEAK_ACC fused multiply-adds of one
 * register width (2 flops per lane each) and leaves a sum in *sink so the
 * work is not optimised away. a = a * 0.999 + 0.001 tends to 1: no denormals,
 * no overflow. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void peak_avx512(int64_t iters, float *sink) {
  __m512 a[PEAK_ACC], x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
  for (int i = 0; i < PEAK_ACC; i++)
    a[i] = _mm512_set1_ps((float)i);
  for (int64_t it = 0; it < iters; it++)
    for (int i = 0; i < PEAK_ACC; i++)
      a[i] = _mm512_fmadd_ps(a[i], x, y);
  for (int i = 1; i < PEAK_ACC; i++)
    a[0] = _mm512_add_ps(a[0], a[i]);
  *sink = _mm512_reduce_add_ps(a[0]);
}

__attribute__((target("avx2,fma"))) static void peak_avx2(int64_t iters, float *sink) {
  __m256 a[PEAK_ACC], x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.001f);
  for (int i = 0; i < PEAK_ACC; i++)
    a[i] = _mm256_set1_ps((float)i);
  for (int64_t it = 0; it < iters; it++)
    for (int i = 0; i < PEAK_ACC; i++)
      a[i] = _mm256_fmadd_ps(a[i], x, y);
  float out[8];
  for (int i = 1; i < PEAK_ACC; i++)
    a[0] = _mm256_add_ps(a[0], a[i]);
  _mm256_storeu_ps(out, a[0]);
  *sink = out[0] + out[7];
}

/* Without FMA a multiply and an add, 2 flops per lane as one FMA. */
static void peak_sse(int64_t iters, float *sink) {
  __m128 a[PEAK_ACC], x = _mm_set1_ps(0.999f), y = _mm_set1_ps(0.001f);
  for (int i = 0; i < PEAK_ACC; i++)
    a[i] = _mm_set1_ps((float)i);
  for (int64_t it = 0; it < iters; it++)
    for (int i = 0; i < PEAK_ACC; i++)
      a[i] = _mm_add_ps(_mm_mul_ps(a[i], x), y);
  float out[4];
  for (int i = 1; i < PEAK_ACC; i++)
    a[0] = _mm_add_ps(a[0], a[i]);
  _mm_storeu_ps(out, a[0]);
  *sink = out[0] + out[3];
}
#elif defined(__aarch64__)
static void peak_neon(int64_t iters, float *sink) {
  float32x4_t a[PEAK_ACC], x = vdupq_n_f32(0.999f), y = vdupq_n_f32(0.001f);
  for (int i = 0; i < PEAK_ACC; i++)
    a[i] = vdupq_n_f32((float)i);
  for (int64_t it = 0; it < iters; it++)
    for (int i = 0; i < PEAK_ACC; i++)
      a[i] = vfmaq_f32(y, a[i], x);
  for (int i = 1; i < PEAK_ACC; i++)
    a[0] = vaddq_f32(a[0], a[i]);
  *sink = vaddvq_f32(a[0]);
}
#endif

static void peak_scalar(int64_t iters, float *sink) {
  float a[PEAK_ACC];
  for (int i = 0; i < PEAK_ACC; i++)
    a[i] = (float)i;
  for (int64_t it = 0; it < iters; it++)
    for (int i = 0; i < PEAK_ACC; i++)
      a[i] = a[i] * 0.999f + 0.001f;
  float s = 0;
  for (int i = 0; i < PEAK_ACC; i++)
    s += a[i];
  *sink = s;
}

typedef void (*PeakFn)(int64_t, float *);

/* The widest kernel this CPU runs, its name and lanes. */
static PeakFn peak_kernel(const char **isa, int *lanes) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    *isa = "avx512", *lanes = 16;
    return peak_avx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    *isa = "avx2", *lanes = 8;
    return peak_avx2;
  }
  *isa = "sse", *lanes = 4;
  return peak_sse;
#elif defined(__aarch64__)
  *isa = "neon", *lanes = 4;
  return peak_neon;
#else
  *isa = "scalar", *lanes = 1;
  return peak_scalar;
#endif
}

typedef struct PeakJob {
  PeakFn fn;
  int64_t iters;
  int cpu;
  pthread_barrier_t *go;
  float sink;
} PeakJob;

static void *peak_thread(void *arg) {
  PeakJob *j = arg;
  pthread_barrier_wait(j->go);
  j->fn(j->iters, &j->sink);
  return NULL;
}

/* Wall time in ms of iters rounds on every CPU of set at once. */
static double peak_run(PeakFn fn, int64_t iters, const cpu_set_t *set, int n) {
  PeakJob job[256];
  pthread_t th[256];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)n + 1);
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < n; c++) {
    if (!CPU_ISSET(c, set))
      continue;
    job[k] = (PeakJob){fn, iters, c, &go, 0};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(c, &one);
    pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    pthread_create(&th[k], &attr, peak_thread, &job[k]);
    pthread_attr_destroy(&attr);
    k++;
  }
  pthread_barrier_wait(&go);
  double t0 = now_ms();
  for (int k = 0; k < n; k++)
    pthread_join(th[k], NULL);
  double t = now_ms() - t0;
  pthread_barrier_destroy(&go);
  return t;
}

/* samples runs of about 50 ms each on all CPUs; best, median and worst
 * GFLOP/s (the peak is the best: other load only lowers a sample). */
static Peak peak_measure(int samples) {
  Peak p = {0};
  int lanes;
  PeakFn fn = peak_kernel(&p.isa, &lanes);
  p.lanes = lanes;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set)) {
    CPU_ZERO(&set);
    CPU_SET(0, &set);
  }
  p.threads = CPU_COUNT(&set) > 256 ? 256 : CPU_COUNT(&set);
  double per_iter = 2.0 * PEAK_ACC * lanes;   /* flops per thread and round */
  int64_t iters = 100000;
  double t = peak_run(fn, iters, &set, p.threads);
  while (t < 5) {
    iters *= 4;
    t = peak_run(fn, iters, &set, p.threads);
  }
  iters = (int64_t)(iters * 50 / t) + 1;
  if (samples < 1)
    samples = 1;
  if (samples > 64)
    samples = 64;
  double g[64];
  for (int s = 0; s < samples; s++)
    g[s] = per_iter * (double)iters * p.threads / (peak_run(fn, iters, &set, p.threads) * 1e6);
  p.samples = samples;
  p.median = median(g, samples);   /* sorts g */
  p.worst = g[0];
  p.best = g[samples - 1];
  (void)peak_scalar;
  return p;
}

#endif
