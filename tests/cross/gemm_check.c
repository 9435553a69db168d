/* gemm_check.c: one matmul compiled by dtc (tests/cross/gemm.sh writes it
 * as IR, module mm: c = matmul(a, b) with ta = TA and tb = TB) against a
 * plain triple loop in double, run where the code runs (under qemu-aarch64
 * for the NEON micro-kernel). Shapes come from mm.h. Each element may differ
 * from the reference by (k + 2) 2^-23 sum_p |a_ip b_pj|; the product on one
 * thread and on three must be the same bits. Prints one line; exit 1 on a
 * difference. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mm.h"

#ifndef TA
#define TA 0
#endif
#ifndef TB
#define TB 0
#endif

static uint64_t rng = 0x2545f4914f6cdd1du;

static float uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

/* The product on threads threads (DTRT_NUM_THREADS, read when the model's
 * pool is made); 0 on success. */
static int run(const char *threads, const float *a, const float *b, float *c) {
  setenv("DTRT_NUM_THREADS", threads, 1);
  mm *m;
  if (mm_create(&m, 1)) {
    fprintf(stderr, "gemm_check: create: %s\n", mm_error(NULL));
    return 1;
  }
  int rc = mm_forward(m, a, MM_A_ELEMS, b, MM_B_ELEMS, c, MM_C_ELEMS);
  if (rc)
    fprintf(stderr, "gemm_check: forward: %s\n", mm_error(m));
  mm_destroy(m);
  return rc;
}

int main(void) {
  static const int64_t ad[] = MM_A_DIMS, cd[] = MM_C_DIMS;
  int ra = MM_A_RANK, rb = MM_B_RANK, rc = MM_C_RANK;
  int64_t m = cd[rc - 2], n = cd[rc - 1], k = TA ? ad[ra - 2] : ad[ra - 1];
  int64_t nb = MM_C_ELEMS / (m * n);
  int64_t sa = m * k, sb = rb > 2 ? k * n : 0;
  float *a = malloc(sizeof(float) * MM_A_ELEMS), *b = malloc(sizeof(float) * MM_B_ELEMS);
  float *c1 = malloc(sizeof(float) * MM_C_ELEMS), *c3 = malloc(sizeof(float) * MM_C_ELEMS);
  if (!a || !b || !c1 || !c3)
    return 1;
  for (int64_t i = 0; i < MM_A_ELEMS; i++)
    a[i] = uniform();
  for (int64_t i = 0; i < MM_B_ELEMS; i++)
    b[i] = uniform();
  if (run("1", a, b, c1) || run("3", a, b, c3))
    return 1;
  if (memcmp(c1, c3, sizeof(float) * MM_C_ELEMS)) {
    printf("gemm_check: FAIL: 1 and 3 threads give different bits\n");
    return 1;
  }
  double worst = 0;
  for (int64_t q = 0; q < nb; q++)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = a[q * sa + (TA ? p * m + i : i * k + p)];
          double y = b[q * sb + (TB ? j * k + p : p * n + j)];
          s += x * y;
          mag += fabs(x * y);
        }
        double err = fabs(c1[(q * m + i) * n + j] - s), bound = (double)(k + 2) * 0x1p-23 * mag;
        if (err > bound) {
          printf("gemm_check: FAIL: c[%lld][%lld][%lld] = %.9g, reference %.9g (bound %.3g)\n",
                 (long long)q, (long long)i, (long long)j, c1[(q * m + i) * n + j], s, bound);
          return 1;
        }
        if (bound > 0 && err / bound > worst)
          worst = err / bound;
      }
  printf("gemm_check: ok: %lld x [%lld x %lld] k %lld ta %d tb %d, worst error %.3f of the bound\n",
         (long long)nb, (long long)m, (long long)n, (long long)k, TA, TB, worst);
  free(a), free(b), free(c1), free(c3);
  return 0;
}
