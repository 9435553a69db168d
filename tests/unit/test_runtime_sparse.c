/* test_runtime_sparse.c: libdtrt's updates of a sparse table's touched rows
 * (sparse_sgd, sparse_adagrad_sum, sparse_adagrad, sparse_moment,
 * sparse_adam) against plain loops written here, in double from the same
 * summed gradient: rows that repeat and come in two sorted runs with -1
 * among them (two ranks' gradients one after the other), in place and into
 * another buffer alike, the same bits on any thread count, the errors
 * bad rows give, and their scratch as dtrt_staged_bytes counts it. */
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

enum { R = 13, D = 6, N = 10 };

typedef DtStatus (*Kern)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

static DtTensor t1(int dtype, void *p, int64_t a) {
  return (DtTensor){.data = p, .dtype = dtype, .rank = 1, .dim = {a}};
}
static DtTensor t2(int dtype, void *p, int64_t a, int64_t b) {
  return (DtTensor){.data = p, .dtype = dtype, .rank = 2, .dim = {a, b}};
}
static DtTensor scalar(float *x) { return (DtTensor){.data = x, .dtype = DTRT_F32}; }

/* Two runs of rows, as two ranks' sparse_rows, and their values. */
static const int32_t rows[N] = {1, 4, 9, -1, -1, 0, 4, 9, 12, -1};
static float val[N * D];

/* g[r]: row r's values summed in the order they come (in float, as the
 * kernels are specified to), touched[r] whether r comes at all. */
static void summed(float *g, bool *touched) {
  memset(g, 0, sizeof(float) * R * D);
  memset(touched, 0, sizeof(bool) * R);
  for (int j = 0; j < N; j++) {
    if (rows[j] < 0)
      continue;
    touched[rows[j]] = true;
    for (int c = 0; c < D; c++)
      g[rows[j] * D + c] += val[j * D + c];
  }
}

static void fill(float *x, int n, float lo) {
  for (int k = 0; k < n; k++)
    x[k] = lo + (frand() + 1) / 2;
}

/* Runs kernel k into a buffer of its own and in place over in[0]'s copy;
 * both give out, bit for bit. */
static void run2(Kern k, DtTensor *in, int nin, float *out, const DtAttrs *a) {
  int64_t n = in[0].rank == 2 ? in[0].dim[0] * in[0].dim[1] : in[0].dim[0];
  float *place = malloc(sizeof(float) * (size_t)n);
  memcpy(place, in[0].data, sizeof(float) * (size_t)n);
  DtTensor o = in[0];
  o.data = out;
  if (k(ctx, in, nin, &o, a) != DT_OK)
    fail_msg("kernel failed: %s", dtrt_errmsg(ctx));
  void *keep = in[0].data;
  in[0].data = o.data = place;
  if (k(ctx, in, nin, &o, a) != DT_OK)
    fail_msg("kernel in place failed: %s", dtrt_errmsg(ctx));
  in[0].data = keep;
  assert_memory_equal(place, out, sizeof(float) * (size_t)n);
  free(place);
}

/* |got - want| within a few float roundings of the element's magnitude
 * (each update is a handful of operations on well-scaled numbers). */
static void near(const float *got, const double *want, int n, const char *what) {
  for (int k = 0; k < n; k++)
    if (!(fabs(got[k] - want[k]) <= 8 * ldexp(1, -24) * (1 + fabs(want[k]))))
      fail_msg("%s[%d]: got %.9g, want %.9g", what, k, got[k], want[k]);
}

static void test_sgd(void **state) {
  (void)state;
  float p[R * D], out[R * D], g[R * D], lr = 0.3f;
  bool t[R];
  double want[R * D];
  fill(p, R * D, -1);
  fill(val, N * D, -1);
  summed(g, t);
  for (int k = 0; k < R * D; k++)
    want[k] = t[k / D] ? p[k] - (double)lr * g[k] : p[k];
  DtTensor in[4] = {t2(DTRT_F32, p, R, D), t1(DTRT_I32, (void *)rows, N), t2(DTRT_F32, val, N, D),
                    scalar(&lr)};
  run2(dtrt_k_sparse_sgd, in, 4, out, NULL);
  near(out, want, R * D, "sgd p");
  for (int k = 0; k < R * D; k++) /* untouched rows keep their bits */
    if (!t[k / D])
      assert_true(out[k] == p[k]);
}

/* Adagrad (torch's for sparse gradients), element-wise and row-wise. */
static void test_adagrad(void **state) {
  (void)state;
  for (int rowwise = 0; rowwise < 2; rowwise++) {
    float p[R * D], s[R * D], s1[R * D], out[R * D], g[R * D], lr = 0.1f;
    bool t[R];
    double want_s[R * D], want_p[R * D];
    int ns = rowwise ? R : R * D;
    fill(p, R * D, -1);
    fill(s, ns, 0);
    fill(val, N * D, -1);
    summed(g, t);
    for (int r = 0; r < R; r++) {
      double q = 0;
      for (int c = 0; c < D; c++)
        q += (double)g[r * D + c] * g[r * D + c];
      for (int c = 0; c < D && !rowwise; c++)
        want_s[r * D + c] = s[r * D + c] + (t[r] ? (double)g[r * D + c] * g[r * D + c] : 0);
      if (rowwise)
        want_s[r] = s[r] + (t[r] ? q / D : 0);
    }
    DtTensor sum = rowwise ? t1(DTRT_F32, s, R) : t2(DTRT_F32, s, R, D);
    DtTensor in[5] = {sum, t1(DTRT_I32, (void *)rows, N), t2(DTRT_F32, val, N, D)};
    run2(dtrt_k_sparse_adagrad_sum, in, 3, s1, NULL);
    near(s1, want_s, ns, rowwise ? "row-wise sums" : "sums");
    /* step 3 (the fourth), lr_decay 0.5, initial_accumulator_value 0.25 */
    double clr = lr / (1 + 3 * 0.5);
    for (int k = 0; k < R * D; k++) {
      double sk = rowwise ? s1[k / D] : s1[k];
      want_p[k] = t[k / D] ? p[k] - clr * g[k] / (sqrt(sk + 0.25) + 1e-10) : p[k];
    }
    in[0] = t2(DTRT_F32, p, R, D);
    in[3] = rowwise ? t1(DTRT_F32, s1, R) : t2(DTRT_F32, s1, R, D);
    in[4] = scalar(&lr);
    DtAttrs a = {.nf = 3, .f = {1e-10, 0.5, 0.25}, .step = 3};
    run2(dtrt_k_sparse_adagrad, in, 5, out, &a);
    near(out, want_p, R * D, "adagrad p");
  }
}

/* SparseAdam: the moments move toward g and g^2 in the touched rows only,
 * and p by lr m / (sqrt(v) + eps) there. */
static void test_adam(void **state) {
  (void)state;
  float m[R * D], v[R * D], m1[R * D], v1[R * D], p[R * D], out[R * D], g[R * D], lr = 0.01f;
  bool t[R];
  double wm[R * D], wv[R * D], wp[R * D];
  fill(m, R * D, -0.5f);
  fill(v, R * D, 0);
  fill(p, R * D, -1);
  fill(val, N * D, -1);
  summed(g, t);
  for (int k = 0; k < R * D; k++) {
    wm[k] = t[k / D] ? m[k] + (1 - 0.9) * (g[k] - m[k]) : m[k];
    wv[k] = t[k / D] ? v[k] + (1 - 0.999) * ((double)g[k] * g[k] - v[k]) : v[k];
  }
  DtTensor in[5] = {t2(DTRT_F32, m, R, D), t1(DTRT_I32, (void *)rows, N), t2(DTRT_F32, val, N, D)};
  DtAttrs a = {.nf = 1, .f = {0.9}};
  run2(dtrt_k_sparse_moment, in, 3, m1, &a);
  near(m1, wm, R * D, "m");
  in[0] = t2(DTRT_F32, v, R, D);
  a = (DtAttrs){.nf = 1, .f = {0.999}, .ni = 1, .i = {1}};
  run2(dtrt_k_sparse_moment, in, 3, v1, &a);
  near(v1, wv, R * D, "v");
  for (int k = 0; k < R * D; k++)
    wp[k] = t[k / D] ? p[k] - lr * m1[k] / (sqrt(v1[k]) + 1e-8) : p[k];
  in[0] = t2(DTRT_F32, p, R, D);
  in[2] = t2(DTRT_F32, m1, R, D);
  in[3] = t2(DTRT_F32, v1, R, D);
  in[4] = scalar(&lr);
  a = (DtAttrs){.nf = 1, .f = {1e-8}};
  run2(dtrt_k_sparse_adam, in, 5, out, &a);
  near(out, wp, R * D, "adam p");
}

/* The same bits on 1, 2 and 3 threads, on enough rows to run in parallel. */
static void test_threads(void **state) {
  (void)state;
  enum { RR = 3000, DD = 32, NN = 4000 };
  float *p = malloc(sizeof(float) * RR * DD), *v = malloc(sizeof(float) * NN * DD), lr = 0.1f;
  float *out[3];
  int32_t *id = malloc(sizeof(int32_t) * NN);
  fill(p, RR * DD, -1);
  fill(v, NN * DD, -1);
  for (int j = 0; j < NN; j++)
    id[j] = j % 7 == 3 ? -1 : (int32_t)(rt_next() % RR);
  for (int t = 0; t < 3; t++) {
    char n[8];
    snprintf(n, sizeof n, "%d", t + 1);
    setenv("DTRT_NUM_THREADS", n, 1); /* read when the new context makes its pool */
    DtrtCtx *c = dtrt_ctx_new();
    assert_int_equal(dtrt_threads(c), t + 1);
    out[t] = malloc(sizeof(float) * RR * DD);
    DtTensor in[4] = {t2(DTRT_F32, p, RR, DD), t1(DTRT_I32, id, NN), t2(DTRT_F32, v, NN, DD),
                      scalar(&lr)};
    DtTensor o = t2(DTRT_F32, out[t], RR, DD);
    assert_int_equal(dtrt_k_sparse_sgd(c, in, 4, &o, NULL), DT_OK);
    assert_memory_equal(out[t], out[0], sizeof(float) * RR * DD);
    dtrt_ctx_free(c);
  }
  unsetenv("DTRT_NUM_THREADS");
  for (int t = 0; t < 3; t++)
    free(out[t]);
  free(p), free(v), free(id);
}

static void refuse(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a,
                   const char *want) {
  if (k(ctx, in, nin, out, a) != DT_ERR_ARG)
    fail_msg("kernel accepted bad operands (wanted '%s')", want);
  if (!strstr(dtrt_errmsg(ctx), want))
    fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), want);
}

/* A row outside the table, values of another shape, sums of another size. */
static void test_errors(void **state) {
  (void)state;
  float p[R * D] = {0}, out[R * D], lr = 0.1f;
  int32_t bad[N];
  memcpy(bad, rows, sizeof bad);
  bad[6] = R;
  DtTensor in[5] = {t2(DTRT_F32, p, R, D), t1(DTRT_I32, bad, N), t2(DTRT_F32, val, N, D),
                    scalar(&lr)};
  DtTensor o = t2(DTRT_F32, out, R, D);
  refuse(dtrt_k_sparse_sgd, in, 4, &o, NULL, "sparse_sgd: rows[6] = 13 is outside [0, 13)");
  bad[6] = -2;
  refuse(dtrt_k_sparse_sgd, in, 4, &o, NULL, "rows[6] = -2 is outside");
  in[1] = t1(DTRT_I32, (void *)rows, N);
  in[2] = t2(DTRT_F32, val, N, D - 1);
  refuse(dtrt_k_sparse_sgd, in, 4, &o, NULL, "sparse_sgd: values");
  in[2] = t2(DTRT_F32, val, N, D);
  in[3] = t1(DTRT_F32, p, R - 1);
  in[4] = scalar(&lr);
  refuse(dtrt_k_sparse_adagrad, in, 5, &o, NULL, "the sums need the table's shape or [R]");
}

/* What the updates allocate while they run is what dtrt_staged_bytes says
 * (the memory plan counts it so): the most held, from a baseline, less
 * libdtrt's header of 64 bytes on each block (entries, rows, sums). */
static void test_staged(void **state) {
  (void)state;
  float p[R * D] = {0}, m[R * D] = {0}, out[R * D], lr = 0.1f;
  fill(val, N * D, -1);
  DtTensor in[5] = {t2(DTRT_F32, p, R, D), t1(DTRT_I32, (void *)rows, N), t2(DTRT_F32, val, N, D),
                    scalar(&lr)};
  DtTensor o = t2(DTRT_F32, out, R, D);
  DtAttrs a = {0};
  counts.peak = counts.bytes;
  long long base = counts.bytes;
  assert_int_equal(dtrt_k_sparse_sgd(ctx, in, 4, &o, &a), DT_OK);
  int64_t want = dtrt_staged_bytes(DT_STAGED_SPARSE, in, 4, &o, &a, 1);
  assert_true(want > 0);
  assert_int_equal(counts.peak - base - 3 * 64, want);
  in[2] = t2(DTRT_F32, m, R, D);
  in[3] = t2(DTRT_F32, m, R, D);
  in[4] = scalar(&lr);
  counts.peak = counts.bytes;
  assert_int_equal(dtrt_k_sparse_adam(ctx, in, 5, &o, &a), DT_OK);
  want = dtrt_staged_bytes(DT_STAGED_SPARSE_ROWS, in, 5, &o, &a, 1);
  assert_true(want > 0);
  assert_int_equal(counts.peak - base - 2 * 64, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_sgd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_adagrad, setup, teardown),
      cmocka_unit_test_setup_teardown(test_adam, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_staged, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
