/* peak.h: the machine's FP32 peak, measured: independent fused multiply-adds
 * on the widest vector registers the CPU has (AVX-512, AVX2 with FMA, SSE,
 * NEON; chosen at run time), on one thread pinned to each CPU of the affinity
 * mask, all started together. Header only; link with Threads, and define
 * _GNU_SOURCE before the first include (CPU affinity).
 *
 *     Peak p = peak_measure(9);      // 9 samples of about 10 ms
 *     double ms = flops / (p.best * 1e6);
 *     double now = peak_again(&p);   // one more, beside another measurement
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
enum { PEAK_ACC = 16 };   /* as PEAK_EACH counts */

typedef void (*PeakFn)(int64_t, float *);

typedef struct Peak {
  const char *isa;       /* "avx512", "avx2", "sse", "neon", "scalar" */
  int lanes;             /* floats per register */
  int threads;
  int samples;
  double best, median, worst;   /* GFLOP/s */
  PeakFn fn;             /* for peak_again: the kernel, its rounds, the CPUs */
  int64_t iters;
  cpu_set_t set;
} Peak;

/* Each kernel runs iters rounds of PEAK_ACC fused multiply-adds of one
 * register width (2 flops per lane each) and leaves a sum in *sink so the
 * work is not optimised away. a = a * 0.999 + 0.001 tends to 1: no denormals,
 * no overflow. The accumulators are PEAK_ACC named variables, not an array,
 * so that they live in registers. Each kernel is PEAK_KERNEL under its own
 * V (the vector type), SET1, FMA, ADD and SUM. */
#define PEAK_EACH(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) \
  F(12) F(13) F(14) F(15)
#define PEAK_DECL(i) V a##i = SET1((float)i);
#define PEAK_STEP(i) a##i = FMA(a##i, x, y);
#define PEAK_ADD(i) s = ADD(s, a##i);
#define PEAK_KERNEL(name)                     \
  static void name(int64_t iters, float *sink) { \
    V x = SET1(0.999f), y = SET1(0.001f);     \
    PEAK_EACH(PEAK_DECL)                      \
    for (int64_t it = 0; it < iters; it++) {  \
      PEAK_EACH(PEAK_STEP)                    \
    }                                         \
    V s = SET1(0.0f);                         \
    PEAK_EACH(PEAK_ADD)                       \
    *sink = SUM(s);                           \
  }

#if defined(__x86_64__)
#define V __m512
#define SET1 _mm512_set1_ps
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define ADD _mm512_add_ps
#define SUM _mm512_reduce_add_ps
__attribute__((target("avx512f"))) PEAK_KERNEL(peak_avx512)
#undef V
#undef SET1
#undef FMA
#undef ADD
#undef SUM

__attribute__((target("avx2,fma"))) static float sum256(__m256 v) {
  float out[8];
  _mm256_storeu_ps(out, v);
  return out[0] + out[7];
}
#define V __m256
#define SET1 _mm256_set1_ps
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define ADD _mm256_add_ps
#define SUM sum256
__attribute__((target("avx2,fma"))) PEAK_KERNEL(peak_avx2)
#undef V
#undef SET1
#undef FMA
#undef ADD
#undef SUM

/* Without FMA a multiply and an add, 2 flops per lane as one FMA. */
static float sum128(__m128 v) {
  float out[4];
  _mm_storeu_ps(out, v);
  return out[0] + out[3];
}
#define V __m128
#define SET1 _mm_set1_ps
#define FMA(a, b, c) _mm_add_ps(_mm_mul_ps(a, b), c)
#define ADD _mm_add_ps
#define SUM sum128
PEAK_KERNEL(peak_sse)
#undef V
#undef SET1
#undef FMA
#undef ADD
#undef SUM
#elif defined(__aarch64__)
#define V float32x4_t
#define SET1 vdupq_n_f32
#define FMA(a, b, c) vfmaq_f32(c, a, b)
#define ADD vaddq_f32
#define SUM vaddvq_f32
PEAK_KERNEL(peak_neon)
#undef V
#undef SET1
#undef FMA
#undef ADD
#undef SUM
#endif

#define V float
#define SET1(v) (v)
#define FMA(a, b, c) ((a) * (b) + (c))
#define ADD(a, b) ((a) + (b))
#define SUM(v) (v)
PEAK_KERNEL(peak_scalar)
#undef V
#undef SET1
#undef FMA
#undef ADD
#undef SUM

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
  pthread_barrier_t *go;
  float sink;
  double t0, t1;   /* when it started and ended, ms */
} PeakJob;

static void *peak_thread(void *arg) {
  PeakJob *j = arg;
  pthread_barrier_wait(j->go);
  j->t0 = now_ms();
  j->fn(j->iters, &j->sink);
  j->t1 = now_ms();
  return NULL;
}

/* Wall time in ms of iters rounds on every CPU of set at once: from the
 * first thread's start to the last one's end (the caller shares a CPU with
 * one of them, so its own clock could start late). */
static double peak_run(PeakFn fn, int64_t iters, const cpu_set_t *set, int n) {
  PeakJob job[256];
  pthread_t th[256];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, (unsigned)n + 1);
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < n; c++) {
    if (!CPU_ISSET(c, set))
      continue;
    job[k] = (PeakJob){fn, iters, &go, 0, 0, 0};
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
  double t0 = 1e300, t1 = 0;
  for (int k = 0; k < n; k++) {
    pthread_join(th[k], NULL);
    t0 = job[k].t0 < t0 ? job[k].t0 : t0;
    t1 = job[k].t1 > t1 ? job[k].t1 : t1;
  }
  pthread_barrier_destroy(&go);
  return t1 - t0;
}

/* samples runs of about 10 ms each on all CPUs; best, median and worst
 * GFLOP/s (the peak is the best: other load only lowers a sample, and a
 * short sample more often finds the machine to itself). */
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
  iters = (int64_t)(iters * 10 / t) + 1;
  if (samples < 1)
    samples = 1;
  if (samples > 64)
    samples = 64;
  p.fn = fn;
  p.iters = iters;
  p.set = set;
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

/* One more sample of about 10 ms like those of p, in GFLOP/s: to set beside
 * a measurement made just before or after it. */
static inline double peak_again(const Peak *p) {
  double flops = 2.0 * PEAK_ACC * p->lanes * (double)p->iters * p->threads;
  return flops / (peak_run(p->fn, p->iters, &p->set, p->threads) * 1e6);
}

#endif
