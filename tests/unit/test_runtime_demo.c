/* test_runtime_demo.c: libdtrt's DeMo kernels against plain loops written
 * here: the tiles' rule (largest divisor not above chunk), each tile's
 * DCT-II by the O(n^2) formula, the top-k choice by a full sort with its tie
 * rule (all magnitudes tied: the lowest indices), the residual, the average
 * over the rows that sent each coefficient and its sign, what the kernels
 * allocate against dtrt_staged_bytes, the same bits on 1 and 3 threads and
 * with the DCT matrices cached in the context or made anew, and the errors
 * bad operands give. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

enum { MAXN = 4096 };

static DtTensor tensor(float *p, int rank, const int64_t *dim) {
  DtTensor t = {.data = p, .dtype = DTRT_F32, .rank = rank};
  for (int d = 0; d < rank; d++)
    t.dim[d] = dim[d];
  return t;
}

/* Coefficient (b, e) of the tile at rows r0.., cols c0.. of x [rows, cols]
 * (one batch), by the formula: sum_h sum_w s_b s_e cos(pi (2h+1) b / 2c1)
 * cos(pi (2w+1) e / 2c2) x[h, w]. */
static double dct_ref(const float *x, int64_t cols, int64_t r0, int64_t c0, int64_t c1, int64_t c2,
                      int64_t b, int64_t e) {
  double s = 0, pi = 3.14159265358979323846;
  for (int64_t h = 0; h < c1; h++)
    for (int64_t w = 0; w < c2; w++)
      s += cos(pi * (2 * h + 1) * b / (2.0 * c1)) * cos(pi * (2 * w + 1) * e / (2.0 * c2)) *
           x[(r0 + h) * cols + c0 + w];
  return s * sqrt((b ? 2.0 : 1.0) / c1) * sqrt((e ? 2.0 : 1.0) / c2);
}

static void test_tiles(void **state) {
  (void)state;
  DtDemoTiles t;
  /* 12 x 20 at chunk 8: 6 x 5 tiles; topk 4 */
  assert_true(dtrt_demo_tiles((int64_t[]){12, 20}, 2, false, 8, 4, &t));
  assert_int_equal(t.c1, 6);
  assert_int_equal(t.c2, 5);
  assert_int_equal(t.tiles, 8);
  assert_int_equal(t.k, 4);
  /* a prime above chunk: chunks of 1; below it: one chunk, k clamped */
  assert_true(dtrt_demo_tiles((int64_t[]){13}, 1, false, 8, 4, &t));
  assert_int_equal(t.c2, 1);
  assert_int_equal(t.tiles, 13);
  assert_int_equal(t.k, 1);
  assert_true(dtrt_demo_tiles((int64_t[]){3}, 1, false, 64, 32, &t));
  assert_int_equal(t.c1 * t.c2, 3);
  assert_int_equal(t.k, 3);
  /* [2, 128, 96] at the defaults: 2 matrices of 2 x 2 tiles of 64 x 48 */
  assert_true(dtrt_demo_tiles((int64_t[]){2, 128, 96}, 3, false, 64, 32, &t));
  assert_int_equal(t.batch, 2);
  assert_int_equal(t.c1, 64);
  assert_int_equal(t.c2, 48);
  assert_int_equal(t.tiles, 8);
  /* stacked [2, 20]: two params of 20, chunks of 20; [3, 12, 20]: three
   * matrices; [4]: four scalars */
  assert_true(dtrt_demo_tiles((int64_t[]){2, 20}, 2, true, 64, 32, &t));
  assert_int_equal(t.batch, 2);
  assert_int_equal(t.rows, 1);
  assert_int_equal(t.c2, 20);
  assert_int_equal(t.tiles, 2);
  assert_true(dtrt_demo_tiles((int64_t[]){3, 12, 20}, 3, true, 8, 4, &t));
  assert_int_equal(t.tiles, 24);
  assert_true(dtrt_demo_tiles((int64_t[]){4}, 1, true, 8, 4, &t));
  assert_int_equal(t.tiles, 4);
  assert_int_equal(t.k, 1);
  assert_false(dtrt_demo_tiles((int64_t[]){0}, 0, true, 8, 4, &t));
  /* a scalar: one element */
  assert_true(dtrt_demo_tiles((int64_t[]){0}, 0, false, 64, 32, &t));
  assert_int_equal(t.tiles, 1);
  assert_int_equal(t.k, 1);
  assert_false(dtrt_demo_tiles((int64_t[]){4}, 1, false, 0, 4, &t));
  assert_false(dtrt_demo_tiles((int64_t[]){4}, 1, false, 4, 0, &t));
}

/* compress with topk the whole tile: every coefficient, against the formula;
 * with topk k: the k largest by a sort here; then the residual. */
static void check_compress(int rank, const int64_t *dim, int64_t chunk, int64_t topk) {
  DtDemoTiles t;
  assert_true(dtrt_demo_tiles(dim, rank, false, chunk, topk, &t));
  int64_t n = t.batch * t.rows * t.cols, per = t.c1 * t.c2, P = t.tiles * t.k;
  float *delta = malloc(sizeof *delta * (size_t)n), *g = malloc(sizeof *g * (size_t)n);
  float *d = malloc(sizeof *d * (size_t)n), *res = malloc(sizeof *res * (size_t)n);
  float *packed = malloc(sizeof *packed * (size_t)(2 * P)), lr = 0.25f, beta = 0.5f;
  for (int64_t i = 0; i < n; i++) {
    delta[i] = frand();
    g[i] = frand();
    d[i] = beta * delta[i] + lr * g[i]; /* exact: powers of two */
  }
  DtTensor in[4] = {tensor(delta, rank, dim), tensor(g, rank, dim), tensor(&lr, 0, NULL),
                    tensor(packed, 2, (int64_t[]){1, 2 * P})};
  DtTensor out = in[3];
  DtAttrs a = {.ni = 2, .i = {chunk, topk, 0}, .nf = 1, .f = {beta}};
  dtrt_threads(ctx); /* the pool made before the count */
  counts.peak = counts.bytes;
  long long before = counts.bytes;
  assert_int_equal(dtrt_k_demo_compress(ctx, in, 3, &out, &a), DT_OK);
  assert_true(counts.peak - before <= dtrt_staged_bytes(DT_STAGED_DEMO, in, 3, &out, &a, 1) + 64);
  double *c = malloc(sizeof *c * (size_t)per);
  int64_t *order = malloc(sizeof *order * (size_t)per);
  int64_t tx = t.cols / t.c2, ty = t.rows / t.c1;
  for (int64_t q = 0; q < t.tiles; q++) {
    int64_t bq = q / (tx * ty), r0 = (q % (tx * ty)) / tx * t.c1, c0 = q % tx * t.c2;
    for (int64_t j = 0; j < per; j++) {
      c[j] = dct_ref(d + bq * t.rows * t.cols, t.cols, r0, c0, t.c1, t.c2, j / t.c2, j % t.c2);
      order[j] = j;
    }
    /* the k largest by |c| as sent (f32), lower index on a tie (a stable
     * insertion sort) */
    for (int64_t j = 1; j < per; j++)
      for (int64_t i = j; i > 0 && fabsf((float)c[order[i]]) > fabsf((float)c[order[i - 1]]); i--) {
        int64_t s = order[i];
        order[i] = order[i - 1], order[i - 1] = s;
      }
    /* the sum of c1 c2 products: (c1 + c2 + 2) 2^-24 of its terms, at most
     * sqrt(c1 c2) max|x| (|d| <= 0.75) */
    double tol = (double)(t.c1 + t.c2 + 2) * ldexp(1, -24) * sqrt((double)per) * 0.75;
    for (int64_t j = 0; j < t.k; j++) {
      int64_t idx = (int64_t)packed[q * t.k + j];
      double v = packed[P + q * t.k + j];
      assert_int_equal(idx, order[j]);
      assert_true(fabs(v - c[idx]) <= tol);
    }
  }
  /* the residual: d minus the kept coefficients' inverse, by the formula */
  DtTensor rout = tensor(res, rank, dim);
  assert_int_equal(dtrt_k_demo_residual(ctx, in, 4, &rout, &a), DT_OK);
  for (int64_t q = 0; q < t.tiles; q++) {
    int64_t bq = q / (tx * ty), r0 = (q % (tx * ty)) / tx * t.c1, c0 = q % tx * t.c2;
    for (int64_t h = 0; h < t.c1; h++)
      for (int64_t w = 0; w < t.c2; w++) {
        double x = 0, pi = 3.14159265358979323846;
        for (int64_t j = 0; j < t.k; j++) {
          int64_t idx = (int64_t)packed[q * t.k + j], b = idx / t.c2, e = idx % t.c2;
          x += packed[P + q * t.k + j] * sqrt((b ? 2.0 : 1.0) / t.c1) *
               sqrt((e ? 2.0 : 1.0) / t.c2) * cos(pi * (2 * h + 1) * b / (2.0 * t.c1)) *
               cos(pi * (2 * w + 1) * e / (2.0 * t.c2));
        }
        int64_t at = (bq * t.rows + r0 + h) * t.cols + c0 + w;
        double tol = (double)(t.c1 + t.c2 + 2) * ldexp(1, -24) * (fabs(d[at]) + fabs(x) + 1);
        assert_true(fabs(res[at] - (d[at] - x)) <= tol);
      }
  }
  free(c), free(order), free(delta), free(g), free(d), free(res), free(packed);
}

static void test_compress(void **state) {
  (void)state;
  check_compress(2, (int64_t[]){12, 20}, 8, 30); /* every coefficient of 6 x 5 tiles */
  check_compress(2, (int64_t[]){12, 20}, 8, 4);
  check_compress(1, (int64_t[]){20}, 8, 3);        /* chunks of 5 */
  check_compress(1, (int64_t[]){7}, 64, 32);       /* one chunk of 7, all sent */
  check_compress(3, (int64_t[]){2, 16, 24}, 8, 5); /* two matrices of 8 x 8 tiles */
  check_compress(2, (int64_t[]){64, 64}, 64, 32);  /* the defaults, one tile */
  check_compress(2, (int64_t[]){12, 20}, 8, 1);    /* the largest alone */
  check_compress(3, (int64_t[]){3, 40, 48}, 8, 5); /* 90 tiles: more than one a slot */
}

/* Ties through the selection at the defaults: 64 x 64 tiles, two of them
 * zero (every magnitude tied: the 32 lowest indices, values 0) between
 * tiles of random momenta, which keep what a stable sort keeps. */
static void test_ties_tiles(void **state) {
  (void)state;
  enum { R = 64, C = 256, N = R * C, K = 32 };
  float *delta = calloc(N, sizeof *delta), *g = calloc(N, sizeof *g), lr = 1;
  float packed[2 * 4 * K];
  for (int i = 0; i < N; i++)
    if (i % C / 64 % 2) /* tiles 1 and 3 */
      g[i] = frand();
  int64_t dim[2] = {R, C};
  DtTensor in[3] = {tensor(delta, 2, dim), tensor(g, 2, dim), tensor(&lr, 0, NULL)};
  DtTensor out = tensor(packed, 2, (int64_t[]){1, 2 * 4 * K});
  DtAttrs a = {.ni = 3, .i = {64, K, 0}, .nf = 1, .f = {0.5}};
  assert_int_equal(dtrt_k_demo_compress(ctx, in, 3, &out, &a), DT_OK);
  for (int q = 0; q < 4; q += 2)
    for (int j = 0; j < K; j++) {
      assert_int_equal((int)packed[q * K + j], j);
      assert_true(packed[4 * K + q * K + j] == 0);
    }
  for (int j = 0; j < K; j++) /* tiles 1 and 3 hold nonzero values */
    assert_true(packed[4 * K + K + j] != 0 && packed[4 * K + 3 * K + j] != 0);
  free(delta), free(g);
}

/* The three kernels' bits on contexts of 1 and of 3 threads. */
static void run_all(DtrtCtx *c, const float *delta, const float *g, float *packed, float *res,
                    float *sign, const int64_t *dim, int64_t P) {
  float lr = 0.01f;
  DtTensor in[4] = {tensor((float *)delta, 3, dim), tensor((float *)g, 3, dim),
                    tensor(&lr, 0, NULL), tensor(packed, 2, (int64_t[]){1, 2 * P})};
  DtTensor out = in[3], r = tensor(res, 3, dim), s = tensor(sign, 3, dim);
  DtAttrs a = {.ni = 3, .i = {64, 32, 1}, .nf = 1, .f = {0.999}};
  DtAttrs sa = {.ni = 6, .i = {64, 32, 1, dim[0], dim[1], dim[2]}};
  assert_int_equal(dtrt_k_demo_compress(c, in, 3, &out, &a), DT_OK);
  assert_int_equal(dtrt_k_demo_residual(c, in, 4, &r, &a), DT_OK);
  assert_int_equal(dtrt_k_demo_sign(c, &in[3], 1, &s, &sa), DT_OK);
}

static void test_threads(void **state) {
  (void)state;
  int64_t dim[3] = {2, 192, 320}; /* stacked: 2 x 3 x 5 tiles of 64 x 64 */
  DtDemoTiles t;
  assert_true(dtrt_demo_tiles(dim, 3, true, 64, 32, &t));
  assert_int_equal(t.tiles, 30);
  int64_t n = 2 * 192 * 320, P = t.tiles * t.k;
  float *buf = malloc(sizeof *buf * (size_t)(2 * n + 2 * (2 * P + 2 * n)));
  float *delta = buf, *g = delta + n;
  for (int64_t i = 0; i < n; i++)
    delta[i] = frand(), g[i] = frand();
  float *out[2];
  for (int k = 0; k < 2; k++) {
    setenv("DTRT_NUM_THREADS", k ? "3" : "1", 1);
    DtrtCtx *c = dtrt_ctx_new();
    assert_non_null(c);
    assert_int_equal(dtrt_threads(c), k ? 3 : 1);
    out[k] = g + n + k * (2 * P + 2 * n);
    run_all(c, delta, g, out[k], out[k] + 2 * P, out[k] + 2 * P + n, dim, P);
    dtrt_ctx_free(c);
  }
  unsetenv("DTRT_NUM_THREADS");
  assert_memory_equal(out[0], out[1], sizeof(float) * (size_t)(2 * P + 2 * n));
  free(buf);
}

/* The DCT matrices are the context's, made at a size's first call: a
 * second call on one context keeps what the context holds and gives the
 * bits of a fresh context's first call (the matrices made anew), for
 * compress, residual and sign; the context frees them (teardown counts). */
static void test_dct_cache(void **state) {
  (void)state;
  int64_t dim[3] = {2, 128, 96}; /* stacked: tiles of 64 x 48, two matrices */
  DtDemoTiles t;
  assert_true(dtrt_demo_tiles(dim, 3, true, 64, 32, &t));
  int64_t n = 2 * 128 * 96, P = t.tiles * t.k, len = 2 * P + 2 * n;
  float *buf = malloc(sizeof *buf * (size_t)(2 * n + 3 * len));
  float *delta = buf, *g = delta + n, *out = g + n;
  for (int64_t i = 0; i < n; i++)
    delta[i] = frand(), g[i] = frand();
  DtrtCtx *fresh = dtrt_ctx_new();
  assert_non_null(fresh);
  run_all(fresh, delta, g, out, out + 2 * P, out + 2 * P + n, dim, P);
  dtrt_ctx_free(fresh);
  long long before = counts.bytes;
  run_all(ctx, delta, g, out + len, out + len + 2 * P, out + len + 2 * P + n, dim, P);
  long long held = counts.bytes;
  assert_true(held - before >= 16 * (64 * 64 + 48 * 48)); /* both sizes kept */
  run_all(ctx, delta, g, out + 2 * len, out + 2 * len + 2 * P, out + 2 * len + 2 * P + n, dim, P);
  assert_int_equal(counts.bytes, held);
  assert_memory_equal(out, out + len, sizeof(float) * (size_t)len);
  assert_memory_equal(out, out + 2 * len, sizeof(float) * (size_t)len);
  free(buf);
}

/* All magnitudes tied (a zero momentum): the lowest indices, values 0. */
static void test_ties(void **state) {
  (void)state;
  float zero[24] = {0}, packed[2 * 6 * 3], lr = 1;
  int64_t dim[2] = {4, 6};
  DtTensor in[3] = {tensor(zero, 2, dim), tensor(zero, 2, dim), tensor(&lr, 0, NULL)};
  DtTensor out = tensor(packed, 2, (int64_t[]){1, 2 * 6 * 3});
  DtAttrs a = {.ni = 3, .i = {2, 3, 0}, .nf = 1, .f = {0.9}}; /* six 2 x 2 tiles, topk 3 */
  assert_int_equal(dtrt_k_demo_compress(ctx, in, 3, &out, &a), DT_OK);
  for (int q = 0; q < 6; q++)
    for (int j = 0; j < 3; j++) {
      assert_int_equal((int)packed[q * 3 + j], j);
      assert_true(packed[18 + q * 3 + j] == 0);
    }
}

/* demo_sign of 3 rows over [6, 4] in 3 x 2 tiles (chunk 3, topk 2): the mean
 * of what the rows sent to each coefficient over the rows that sent it. */
static void test_sign(void **state) {
  (void)state;
  enum { R = 3, K = 2, TILES = 4, PER = 6, ROW = 2 * TILES * K };
  /* per tile, rows 0, 1, 2 send {0, 1}, {1, 2}, {5, 1}: coefficient 1 by
   * all three, 0, 2 and 5 by one each, 3 and 4 by none */
  static const int sent[R][K] = {{0, 1}, {1, 2}, {5, 1}};
  float packed[R * ROW], y[24];
  for (int r = 0; r < R; r++)
    for (int q = 0; q < TILES; q++)
      for (int j = 0; j < K; j++) {
        packed[r * ROW + q * K + j] = (float)sent[r][j];
        packed[r * ROW + TILES * K + q * K + j] = frand();
      }
  DtTensor in = tensor(packed, 2, (int64_t[]){R, ROW}), out = tensor(y, 2, (int64_t[]){6, 4});
  DtAttrs a = {.ni = 5, .i = {3, K, 0, 6, 4}};
  assert_int_equal(dtrt_k_demo_sign(ctx, &in, 1, &out, &a), DT_OK);
  double pi = 3.14159265358979323846;
  for (int q = 0; q < TILES; q++) {
    double sum[PER] = {0}, cnt[PER] = {0};
    for (int r = 0; r < R; r++)
      for (int j = 0; j < K; j++) {
        int idx = (int)packed[r * ROW + q * K + j];
        sum[idx] += packed[r * ROW + TILES * K + q * K + j];
        cnt[idx]++;
      }
    for (int h = 0; h < 3; h++)
      for (int w = 0; w < 2; w++) {
        double x = 0, mass = 0;
        for (int j = 0; j < PER; j++) {
          double m = cnt[j] ? sum[j] / cnt[j] : 0;
          int b = j / 2, e = j % 2;
          x += m * sqrt((b ? 2.0 : 1.0) / 3) * sqrt((e ? 2.0 : 1.0) / 2) *
               cos(pi * (2 * h + 1) * b / 6.0) * cos(pi * (2 * w + 1) * e / 4.0);
          mass += fabs(m);
        }
        float want = x > 1e-12 * mass ? 1.0f : x < -1e-12 * mass ? -1.0f : 0.0f;
        /* a sign within rounding of a tie cannot be compared */
        if (fabs(x) > 1e-9 * mass || want == 0)
          assert_true(y[(q / 2 * 3 + h) * 4 + q % 2 * 2 + w] == want);
      }
  }
}

/* An odd tile whose kept frequencies are all odd: its middle is 0 exactly,
 * whatever the rounding leaves. */
static void test_sign_zero(void **state) {
  (void)state;
  float packed[2 * 2] = {1, 3, 0.7f, -0.4f}, y[5];
  DtTensor in = tensor(packed, 2, (int64_t[]){1, 4}), out = tensor(y, 1, (int64_t[]){5});
  DtAttrs a = {.ni = 4, .i = {5, 2, 0, 5}};
  assert_int_equal(dtrt_k_demo_sign(ctx, &in, 1, &out, &a), DT_OK);
  assert_true(y[2] == 0);
  assert_true(y[0] != 0 && y[1] != 0 && y[3] != 0 && y[4] != 0);
}

static void refuse(DtStatus s, const char *text) {
  assert_int_equal(s, DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), text))
    fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), text);
}

static void test_errors(void **state) {
  (void)state;
  float x[20] = {0}, g[20] = {0}, lr = 1, packed[2 * 3 * 8];
  int64_t dim[1] = {20};
  DtTensor in[4] = {tensor(x, 1, dim), tensor(g, 1, dim), tensor(&lr, 0, NULL),
                    tensor(packed, 2, (int64_t[]){1, 16})};
  DtTensor out = in[3];
  DtAttrs a = {.ni = 3, .i = {5, 2, 0}, .nf = 1, .f = {0.9}};
  out.dim[1] = 15;
  refuse(dtrt_k_demo_compress(ctx, in, 3, &out, &a), "output needs shape [1, 16]");
  a.i[0] = 0;
  refuse(dtrt_k_demo_compress(ctx, in, 3, &out, &a), "chunk 0 and topk 2 must be at least 1");
  a.i[0] = 8; /* 20 in chunks of 5: 4 tiles of 2 */
  out.dim[1] = 16;
  in[1].dim[0] = 19;
  refuse(dtrt_k_demo_compress(ctx, in, 3, &out, &a), "gradient");
  in[1].dim[0] = 20;
  assert_int_equal(dtrt_k_demo_compress(ctx, in, 3, &out, &a), DT_OK);
  packed[3] = 7; /* tile 1's second index, outside [0, 5) */
  DtTensor y = tensor(x, 1, dim);
  refuse(dtrt_k_demo_residual(ctx, in, 4, &y, &a), "tile 1's index 7 is not one of [0, 5)");
  DtAttrs s = {.ni = 4, .i = {8, 2, 0, 20}};
  refuse(dtrt_k_demo_sign(ctx, &in[3], 1, &y, &s), "row 0, tile 1: index 7 is not one of [0, 5)");
  packed[3] = 2.5f;
  refuse(dtrt_k_demo_sign(ctx, &in[3], 1, &y, &s), "index 2.5");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_tiles, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compress, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ties, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ties_tiles, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dct_cache, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sign, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sign_zero, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
