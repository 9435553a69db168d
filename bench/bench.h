/* bench.h: what every benchmark needs: a monotonic clock in milliseconds,
 * the median of a set of timings, and counts of subnormal floats. Header
 * only. */
#ifndef BENCH_H
#define BENCH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#include "dtrt.h"

/* libdtrt's clock, in milliseconds. */
static inline double now_ms(void) { return (double)dtrt_now_ns() / 1e6; }

static inline int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Sorts t in place and returns its median. */
static inline double median(double *t, int n) {
  qsort(t, (size_t)n, sizeof *t, cmp_double);
  return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* How many of p[0..n) are subnormal (nonzero, below FLT_MIN in magnitude):
 * values an x86 core computes with through a slow microcode assist unless
 * flush-to-zero is set. Trained optimizer state has them where a gradient
 * has been zero for hundreds of steps and the moments decayed. Read from
 * the bits, so that denormals-are-zero mode cannot hide them. */
static inline int64_t subnormals(const float *p, int64_t n) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &p[i], sizeof u);
    c += (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
  }
  return c;
}

/* The share of the floats of m's tensors name[k] + suffix[j] (k < n, j < ns)
 * that is subnormal; a name the model lacks counts for nothing. */
static inline double subnormal_share(DtModel *m, const char *const *name, int n,
                                     const char *const *suffix, int ns) {
  int64_t count = 0, total = 0;
  for (int k = 0; k < n * ns; k++) {
    char full[64];
    snprintf(full, sizeof full, "%s%s", name[k % n], suffix[k / n]);
    DtTensor t;
    if (dtrt_model_tensor_block(m, full, &t, NULL, NULL) || t.dtype != DTRT_F32)
      continue;
    int64_t e = 1;
    for (int d = 0; d < t.rank; d++)
      e *= t.dim[d];
    count += subnormals(t.data, e);
    total += e;
  }
  return total ? (double)count / (double)total : 0;
}

#endif
