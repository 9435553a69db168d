/* test_runtime_ctx.c: the runtime context (errors, allocation hook), the
 * initialisers and the learning-rate schedules. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_count.h"

/* Memory that is only 16-byte aligned. */
static void *bad_alloc(void *u, size_t n) {
  (void)u;
  char *p;
  if (posix_memalign((void **)&p, 64, n + 64))
    return NULL;
  return p + 16;
}

static void bad_free(void *u, void *p) {
  (void)u;
  free((char *)p - 16);
}

static void test_errors(void **state) {
  (void)state;
  DtrtCtx *ctx = dtrt_ctx_new();
  assert_non_null(ctx);
  assert_string_equal(dtrt_errmsg(ctx), "");
  assert_int_equal(dtrt_fail(ctx, DT_ERR_FORMAT, "bad %s at %d", "thing", 42), DT_ERR_FORMAT);
  assert_string_equal(dtrt_errmsg(ctx), "bad thing at 42");
  char longer[2000];
  memset(longer, 'x', sizeof longer - 1);
  longer[sizeof longer - 1] = 0;
  dtrt_fail(ctx, DT_ERR_IO, "%s", longer);
  assert_true(strlen(dtrt_errmsg(ctx)) > 100 && strlen(dtrt_errmsg(ctx)) < sizeof longer);
  assert_string_equal(dtrt_status_name(DT_OK), "ok");
  assert_string_equal(dtrt_status_name(DT_ERR_CHECKSUM), "checksum mismatch");
  assert_string_equal(dtrt_status_name((DtStatus)99), "unknown status");
  assert_int_equal(dtrt_fail(NULL, DT_ERR_ARG, "x"), DT_ERR_ARG);
  assert_string_equal(dtrt_errmsg(NULL), "no context");
  assert_null(dtrt_alloc(NULL, 8));
  dtrt_free(NULL, NULL);
  dtrt_free(ctx, NULL);
  dtrt_ctx_free(NULL);
  dtrt_ctx_free(ctx);
}

static void test_alloc(void **state) {
  (void)state;
  Count c = {.limit = -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtrtCtx *ctx = dtrt_ctx_new_with(&a);
  assert_non_null(ctx);
  assert_int_equal(c.allocs, 1);
  for (size_t n = 0; n < 300; n += 37) {
    unsigned char *p = dtrt_alloc(ctx, n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (size_t k = 0; k < n; k++)
      assert_int_equal(p[k], 0);
    dtrt_free(ctx, p);
  }
  c.limit = c.allocs;
  assert_null(dtrt_alloc(ctx, 100));
  assert_non_null(strstr(dtrt_errmsg(ctx), "out of memory allocating 100 bytes"));
  dtrt_ctx_free(ctx);
  assert_int_equal(c.allocs, c.frees);

  c = (Count){.limit = 0};
  assert_null(dtrt_ctx_new_with(&a));
  DtAllocator half = {count_alloc, NULL, &c};
  assert_null(dtrt_ctx_new_with(&half));

  DtAllocator bad = {bad_alloc, bad_free, NULL};
  ctx = dtrt_ctx_new_with(&bad);
  if (ctx) {
    assert_null(dtrt_alloc(ctx, 32));
    assert_non_null(strstr(dtrt_errmsg(ctx), "64-byte"));
    dtrt_ctx_free(ctx);
  }
}

/* Two contexts are independent: no state is shared. */
static void test_reentrant(void **state) {
  (void)state;
  DtrtCtx *a = dtrt_ctx_new(), *b = dtrt_ctx_new();
  dtrt_fail(a, DT_ERR_IO, "first");
  dtrt_fail(b, DT_ERR_IO, "second");
  assert_string_equal(dtrt_errmsg(a), "first");
  assert_string_equal(dtrt_errmsg(b), "second");
  dtrt_ctx_free(a);
  dtrt_ctx_free(b);
}

/* The moments of n values of p: sum x^j / n for j = 1, 2, 4; the largest |x|. */
static void moments(const float *p, int n, double *m1, double *m2, double *m4, double *top) {
  *m1 = *m2 = *m4 = *top = 0;
  for (int k = 0; k < n; k++) {
    double x = p[k], x2 = x * x;
    *m1 += x, *m2 += x2, *m4 += x2 * x2;
    *top = fmax(*top, fabs(x));
  }
  *m1 /= n, *m2 /= n, *m4 /= n;
}

/* kaiming_uniform and kaiming_normal over n values against their laws: each
 * sample moment within 6 of its standard errors (sqrt(var(x^j) / n), from
 * the law's moments), the uniform's values within the bound and reaching
 * it to 20 / n (the chance of falling short is e^-20). */
static void test_init_kaiming(void **state) {
  (void)state;
  DtrtCtx *ctx = dtrt_ctx_new();
  enum { N = 1 << 20 };
  float *p = malloc(N * 4);
  double m1, m2, m4, top, n = N;
  /* torch's nn.Linear default: a = sqrt(5), fan_in 64: bound 1 / 8 */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_KAIMING_UNIFORM, sqrt(5.0), 64, 3, 2, 1), DT_OK);
  moments(p, N, &m1, &m2, &m4, &top);
  double b = 1.0 / 8, var = b * b / 3;   /* E x^2; E x^4 = b^4 / 5 */
  assert_true(top <= b && top >= b * (1 - 20 / n));
  assert_true(fabs(m1) <= 6 * sqrt(var / n));
  assert_true(fabs(m2 - var) <= 6 * sqrt((pow(b, 4) / 5 - var * var) / n));
  assert_true(fabs(m4 - pow(b, 4) / 5) <= 6 * sqrt((pow(b, 8) / 9 - pow(b, 8) / 25) / n));
  /* He's a = 0, fan_in 50: N(0, 2 / 50); E x^4 = 3 s^4, E x^8 = 105 s^8 */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_KAIMING_NORMAL, 0, 50, 7, 2, 2), DT_OK);
  moments(p, N, &m1, &m2, &m4, &top);
  double s2 = 2.0 / 50;
  assert_true(fabs(m1) <= 6 * sqrt(s2 / n));
  assert_true(fabs(m2 - s2) <= 6 * sqrt(2 * s2 * s2 / n));
  assert_true(fabs(m4 - 3 * s2 * s2) <= 6 * sqrt(96 * pow(s2, 4) / n));
  /* the gain of slope a: sqrt(2 / (1 + a^2)), the sign of a immaterial */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_KAIMING_NORMAL, -1, 8, 1, 3, 0), DT_OK);
  moments(p, N, &m1, &m2, &m4, &top);
  s2 = 1.0 / 8;
  assert_true(fabs(m2 - s2) <= 6 * sqrt(2 * s2 * s2 / n));
  /* a fan_in is needed, a slope finite */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_KAIMING_UNIFORM, 0, 0, 5, 0, 0), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "kaiming"));
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_KAIMING_NORMAL, NAN, 4, 5, 0, 0), DT_ERR_ARG);
  assert_string_equal(dtrt_init_names[DT_INIT_KAIMING_UNIFORM], "kaiming_uniform");
  assert_string_equal(dtrt_init_names[DT_INIT_KAIMING_NORMAL], "kaiming_normal");
  free(p);
  dtrt_ctx_free(ctx);
}

static void test_init(void **state) {
  (void)state;
  DtrtCtx *ctx = dtrt_ctx_new();
  enum { N = 40001 };
  float *p = malloc(N * 4), *q = malloc(N * 4);

  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_ZEROS, 0, 0, 0, 1, 0), DT_OK);
  for (int k = 0; k < N; k++)
    assert_true(p[k] == 0);
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_ONES, 0, 0, 0, 1, 0), DT_OK);
  for (int k = 0; k < N; k++)
    assert_true(p[k] == 1);

  /* glorot: bounded by the limit, mean 0, variance lim^2/3 */
  double lim = sqrt(6.0 / (300 + 100)), s = 0, s2 = 0;
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_GLOROT, 0, 300, 100, 7, 3), DT_OK);
  for (int k = 0; k < N; k++) {
    assert_true(fabsf(p[k]) <= lim);
    s += p[k];
    s2 += (double)p[k] * p[k];
  }
  assert_true(fabs(s / N) < 0.01 * lim);
  assert_true(fabs(s2 / N - lim * lim / 3) < 0.02 * lim * lim);

  /* same (seed, stream) gives the same values; a prefix is the shorter fill;
   * another stream or seed gives others */
  assert_int_equal(dtrt_init(ctx, q, 1000, DT_INIT_GLOROT, 0, 300, 100, 7, 3), DT_OK);
  assert_memory_equal(p, q, 1000 * 4);
  assert_int_equal(dtrt_init(ctx, q, 1000, DT_INIT_GLOROT, 0, 300, 100, 7, 4), DT_OK);
  assert_memory_not_equal(p, q, 1000 * 4);
  assert_int_equal(dtrt_init(ctx, q, 1000, DT_INIT_GLOROT, 0, 300, 100, 8, 3), DT_OK);
  assert_memory_not_equal(p, q, 1000 * 4);

  /* the values themselves are part of the contract: the same on every machine
   * and every release, or saved experiments stop reproducing */
  static const float uni[4] = {0x1.2fba38p-1f, 0x1.72a912p-2f, 0x1.a4cc9p-1f, 0x1.56465ap-2f};
  static const float glo[4] = {-0x1.a870bep-1f, -0x1.e4c502p-2f, 0x1.2cb0f2p-1f, -0x1.3ed356p-1f};
  assert_int_equal(dtrt_init(ctx, q, 4, DT_INIT_UNIFORM, 1, 0, 0, 0, 0), DT_OK);
  assert_memory_equal(q, uni, sizeof uni);
  assert_int_equal(dtrt_init(ctx, q, 4, DT_INIT_GLOROT, 0, 3, 5, 42, 7), DT_OK);
  assert_memory_equal(q, glo, sizeof glo);

  /* normal: mean 0, standard deviation arg, odd and even elements alike */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_NORMAL, 0.5, 0, 0, 11, 0), DT_OK);
  for (int par = 0; par < 2; par++) {
    s = s2 = 0;
    int n = 0;
    for (int k = par; k < N; k += 2, n++) {
      assert_true(isfinite(p[k]));
      s += p[k];
      s2 += (double)p[k] * p[k];
    }
    assert_true(fabs(s / n) < 0.02);
    assert_true(fabs(sqrt(s2 / n) - 0.5) < 0.02);
  }
  /* uniform: in [-arg, arg) with mean 0 */
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_UNIFORM, 3, 0, 0, 5, 9), DT_OK);
  s = 0;
  for (int k = 0; k < N; k++) {
    assert_true(p[k] >= -3 && p[k] < 3);
    s += p[k];
  }
  assert_true(fabs(s / N) < 0.05);

  assert_int_equal(dtrt_init(ctx, p, N, 17, 0, 0, 0, 0, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_GLOROT, 0, 0, 0, 0, 0), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "glorot"));
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_NORMAL, -1, 0, 0, 0, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_init(ctx, p, N, DT_INIT_NORMAL, NAN, 0, 0, 0, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_init(ctx, NULL, 3, DT_INIT_ZEROS, 0, 0, 0, 0, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_init(ctx, NULL, 0, DT_INIT_ZEROS, 0, 0, 0, 0, 0), DT_OK);
  free(p);
  free(q);
  dtrt_ctx_free(ctx);
}

static void test_lr(void **state) {
  (void)state;
  assert_true(dtrt_lr(0, 0.1, 0, 0, 0, 0, 0, 0) == 0.1f);
  assert_true(dtrt_lr(0, 0.1, 10, 100, 0, 0, 0, 500) == 0.1f);
  /* warm-up: base * (step+1) / warmup, then base */
  assert_true(fabsf(dtrt_lr(1, 1.0, 4, 0, 0, 0, 0, 0) - 0.25f) < 1e-7f);
  assert_true(fabsf(dtrt_lr(1, 1.0, 4, 0, 0, 0, 0, 2) - 0.75f) < 1e-7f);
  assert_true(dtrt_lr(1, 1.0, 4, 0, 0, 0, 0, 3) == 1.0f);
  assert_true(dtrt_lr(1, 1.0, 4, 0, 0, 0, 0, 1000) == 1.0f);
  /* cosine: base at the end of warm-up, half way at the middle, 0 at total */
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0, 0, 0, 10) - 2.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0, 0, 0, 60) - 1.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0, 0, 0, 110)) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0, 0, 0, 5000)) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0, 0, 0, 4) - 1.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 1.0, 0, 100, 0, 0, 0, 25) - 0.5f * (1 + cosf(0.25f * 3.14159265f))) < 1e-6f);
  /* Adam's bias correction */
  for (int64_t t = 0; t < 5; t++) {
    double c = sqrt(1 - pow(0.999, (double)t + 1)) / (1 - pow(0.9, (double)t + 1));
    assert_true(fabs(dtrt_lr(0, 0.001, 0, 0, 0, 0.9, 0.999, t) - 0.001 * c) < 1e-9);
  }
  assert_true(dtrt_lr(7, 0.5, 0, 0, 0, 0, 0, 3) == 0.5f);
  /* cosine to min_lr 0.2: warm-up as before, the mid-point (2 + 0.2) / 2, min_lr from total on */
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0.2, 0, 0, 4) - 1.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0.2, 0, 0, 10) - 2.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0.2, 0, 0, 60) - 1.1f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0.2, 0, 0, 110) - 0.2f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(2, 2.0, 10, 110, 0.2, 0, 0, 9999) - 0.2f) < 1e-6f);
  /* linear from base to end_factor 0.5 of it over total - warmup = 100 */
  assert_true(fabsf(dtrt_lr(3, 2.0, 10, 110, 0.5, 0, 0, 1) - 0.4f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(3, 2.0, 10, 110, 0.5, 0, 0, 10) - 2.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(3, 2.0, 10, 110, 0.5, 0, 0, 35) - 1.75f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(3, 2.0, 10, 110, 0.5, 0, 0, 500) - 1.0f) < 1e-6f);
  assert_true(fabsf(dtrt_lr(3, 2.0, 0, 100, 0, 0, 0, 100)) < 1e-6f);
  /* step: gamma 0.5 every 3 steps (total carries step_size) after 2 of warm-up */
  assert_true(fabsf(dtrt_lr(4, 1.0, 2, 3, 0.5, 0, 0, 0) - 0.5f) < 1e-7f);
  assert_true(dtrt_lr(4, 1.0, 2, 3, 0.5, 0, 0, 4) == 1.0f);
  assert_true(dtrt_lr(4, 1.0, 2, 3, 0.5, 0, 0, 5) == 0.5f);
  assert_true(dtrt_lr(4, 1.0, 2, 3, 0.5, 0, 0, 10) == 0.25f);
  assert_true(dtrt_lr(4, 1.0, 2, 3, 0.5, 0, 0, 11) == 0.125f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_errors), cmocka_unit_test(test_alloc),
      cmocka_unit_test(test_reentrant), cmocka_unit_test(test_init),
      cmocka_unit_test(test_init_kaiming),
      cmocka_unit_test(test_lr),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
