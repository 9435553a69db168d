/* test_runtime_kernels.c: every libdtrt kernel against a plain reference loop
 * written here, and every gradient kernel against finite differences. */
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
#include "dtrt_int.h"
#include "rt_test.h"

typedef DtStatus (*Kern)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

/* ---- helpers ---- */

static float *randv(int64_t n) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t k = 0; k < n; k++)
    p[k] = frand();
  return p;
}

static DtTensor ten(int dtype, void *data, int rank, ...) {
  DtTensor t = {.data = data, .dtype = dtype, .rank = rank};
  va_list ap;
  va_start(ap, rank);
  for (int k = 0; k < rank; k++) {
    int d = va_arg(ap, int);
    if (k < DT_MAX_RANK)
      t.dim[k] = d;
  }
  va_end(ap);
  return t;
}

static DtTensor like(const DtTensor *t, void *data) {
  DtTensor r = *t;
  r.data = data;
  return r;
}

static int64_t numel(const DtTensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++)
    n *= t->dim[k];
  return n;
}

static DtAttrs ints(int n, ...) {
  DtAttrs a = {.ni = n};
  va_list ap;
  va_start(ap, n);
  for (int k = 0; k < n; k++)
    a.i[k] = va_arg(ap, int);
  va_end(ap);
  return a;
}

static void near(const float *got, const float *want, int64_t n, double tol) {
  for (int64_t k = 0; k < n; k++) {
    double d = fabs((double)got[k] - want[k]);
    if (!(d <= tol * (1 + fabs(want[k]))) && !(isinf(got[k]) && got[k] == want[k]))
      fail_msg("element %lld: got %.9g, want %.9g", (long long)k, got[k], want[k]);
  }
}

/* Runs k and asserts it succeeds. */
static void run(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a) {
  DtStatus s = k(ctx, in, nin, out, a);
  if (s)
    fail_msg("kernel failed: %s", dtrt_errmsg(ctx));
}

/* Runs k, asserts it fails with DT_ERR_ARG and its message contains want. */
static void refuse(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a,
                   const char *want) {
  assert_int_equal(k(ctx, in, nin, out, a), DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), want))
    fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), want);
}

/* Finite differences: for the scalar L(x) = sum(w * f(x)), checks grad[i] is
 * dL/dx[i] for every i. f fills y from x. */
typedef void (*Fwd)(const float *x, float *y, void *u);

static void fd_check(Fwd f, void *u, float *x, int64_t nx, int64_t ny, const float *w,
                     const float *grad, double h, double tol) {
  float *y1 = malloc((size_t)ny * sizeof *y1), *y2 = malloc((size_t)ny * sizeof *y2);
  for (int64_t i = 0; i < nx; i++) {
    float xi = x[i];
    x[i] = (float)(xi + h);
    f(x, y1, u);
    x[i] = (float)(xi - h);
    f(x, y2, u);
    x[i] = xi;
    double d = 0;
    for (int64_t j = 0; j < ny; j++)
      d += (double)w[j] * ((double)y1[j] - y2[j]);
    d /= 2 * h;
    if (!(fabs(d - grad[i]) <= tol * (1 + fabs(d))))
      fail_msg("d/dx[%lld]: finite difference %.6g, kernel %.6g", (long long)i, d, grad[i]);
  }
  free(y1);
  free(y2);
}

/* ---- matmul ---- */

/* Element (i, j) of a 2-D block stored with cols columns, read transposed when t. */
static float at2(const float *p, int64_t cols, int t, int64_t i, int64_t j) {
  return t ? p[j * cols + i] : p[i * cols + j];
}

static void matmul_case(int ra, const int *da, int rb, const int *db, int ta, int tb) {
  DtTensor x = {.dtype = DTRT_F32, .rank = ra}, w = {.dtype = DTRT_F32, .rank = rb};
  for (int k = 0; k < ra; k++)
    x.dim[k] = da[k];
  for (int k = 0; k < rb; k++)
    w.dim[k] = db[k];
  int64_t nx = numel(&x), nw = numel(&w);
  x.data = randv(nx);
  w.data = randv(nw);
  int64_t xr = x.dim[ra - 2], xc = x.dim[ra - 1], wr = w.dim[rb - 2], wc = w.dim[rb - 1];
  int64_t m = ta ? xc : xr, kk = ta ? xr : xc, n = tb ? wr : wc;
  const DtTensor *big = ra >= rb ? &x : &w;
  DtTensor y = *big;
  y.dim[y.rank - 2] = m;
  y.dim[y.rank - 1] = n;
  int64_t nb = 1;
  for (int k = 0; k < big->rank - 2; k++)
    nb *= big->dim[k];
  float *got = malloc((size_t)(nb * m * n + 1) * 4), *want = calloc((size_t)(nb * m * n + 1), 4);
  y.data = got;
  for (int64_t b = 0; b < nb; b++) {
    const float *xb = (const float *)x.data + (ra > 2 ? b * xr * xc : 0);
    const float *wb = (const float *)w.data + (rb > 2 ? b * wr * wc : 0);
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0;
        for (int64_t p = 0; p < kk; p++)
          s += (double)at2(xb, xc, ta, i, p) * at2(wb, wc, tb, p, j);
        want[b * m * n + i * n + j] = (float)s;
      }
  }
  DtTensor in[2] = {x, w};
  DtAttrs a = ints(2, ta, tb);
  run(dtrt_k_matmul, in, 2, &y, &a);
  near(got, want, nb * m * n, 1e-5);
  free(x.data);
  free(w.data);
  free(got);
  free(want);
}

static void test_matmul(void **state) {
  (void)state;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int a2[] = {ta ? 7 : 5, ta ? 5 : 7}, b2[] = {tb ? 3 : 7, tb ? 7 : 3};
      matmul_case(2, a2, 2, b2, ta, tb);
      int a3[] = {4, ta ? 6 : 5, ta ? 5 : 6}, b3[] = {4, tb ? 2 : 6, tb ? 6 : 2};
      matmul_case(3, a3, 3, b3, ta, tb);
      int a4[] = {2, 3, ta ? 8 : 5, ta ? 5 : 8}, b4[] = {tb ? 4 : 8, tb ? 8 : 4};
      matmul_case(4, a4, 2, b4, ta, tb);
      int a5[] = {ta ? 6 : 3, ta ? 3 : 6}, b5[] = {5, tb ? 4 : 6, tb ? 6 : 4};
      matmul_case(2, a5, 3, b5, ta, tb);
    }
  int k0a[] = {3, 0}, k0b[] = {0, 4};
  matmul_case(2, k0a, 2, k0b, 0, 0);
  int e0a[] = {0, 3}, e0b[] = {3, 4};
  matmul_case(2, e0a, 2, e0b, 0, 0);
  /* a larger product, so OpenBLAS takes its blocked path */
  int la[] = {2, 96, 130}, lb[] = {130, 70};
  matmul_case(3, la, 2, lb, 0, 0);
  matmul_case(3, (int[]){2, 130, 96}, 2, lb, 1, 0);

  float buf[64] = {0};
  DtTensor in[2] = {ten(DTRT_F32, buf, 2, 2, 3), ten(DTRT_F32, buf, 2, 4, 2)};
  DtTensor y = ten(DTRT_F32, buf, 2, 2, 2);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "inner dimensions differ");
  in[1] = ten(DTRT_F32, buf, 2, 3, 2);
  y = ten(DTRT_F32, buf, 2, 2, 3);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "output is f32[2,3], expected f32[2,2]");
  in[0] = ten(DTRT_F32, buf, 3, 2, 2, 3);
  in[1] = ten(DTRT_F32, buf, 3, 3, 3, 2);
  y = ten(DTRT_F32, buf, 3, 2, 2, 2);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "batch dimensions");
  in[0] = ten(DTRT_F32, buf, 1, 3);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "rank 2 or more");
  in[0] = ten(DTRT_I32, buf, 2, 2, 3);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "lhs is i32, expected f32");
  DtAttrs bad = ints(2, 2, 0);
  in[0] = ten(DTRT_F32, buf, 2, 2, 3);
  in[1] = ten(DTRT_F32, buf, 2, 3, 2);
  y = ten(DTRT_F32, buf, 2, 2, 2);
  refuse(dtrt_k_matmul, in, 2, &y, &bad, "0 or 1");
  refuse(dtrt_k_matmul, in, 1, &y, NULL, "expected 2 inputs, got 1");
  refuse(dtrt_k_matmul, NULL, 2, &y, NULL, "inputs are NULL");
  refuse(dtrt_k_matmul, in, 2, NULL, NULL, "output is NULL");
  in[0].data = NULL;
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "lhs has no data");
  in[0] = ten(DTRT_F32, buf, 7, 1, 1, 1, 1, 1, 1, 1);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "rank 7");
  in[0] = ten(DTRT_F32, buf, 2, -2, 3);
  refuse(dtrt_k_matmul, in, 2, &y, NULL, "negative dimension");
  bad.ni = 17;
  in[0] = ten(DTRT_F32, buf, 2, 2, 3);
  refuse(dtrt_k_matmul, in, 2, &y, &bad, "int attributes");
  assert_int_equal(dtrt_k_matmul(NULL, in, 2, NULL, NULL), DT_ERR_ARG);

  /* kfold 1: [F, k, m]^T @ [F, k, n] -> [m, n], summed over F and k; against
   * a loop in double, within (F k) 2^-24 of the sum of |terms| */
  enum { F = 3, K = 5, M = 4, N = 6 };
  float xf[F * K * M], wf[F * K * N], yf[M * N];
  for (int j = 0; j < F * K * M; j++)
    xf[j] = (float)sin(0.7 * j + 0.1);
  for (int j = 0; j < F * K * N; j++)
    wf[j] = (float)cos(1.3 * j - 0.4);
  in[0] = ten(DTRT_F32, xf, 3, F, K, M);
  in[1] = ten(DTRT_F32, wf, 3, F, K, N);
  y = ten(DTRT_F32, yf, 2, M, N);
  DtAttrs fold = ints(4, 1, 0, 0, 1);
  run(dtrt_k_matmul, in, 2, &y, &fold);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double want = 0, abs = 0;
      for (int r = 0; r < F * K; r++) {
        want += (double)xf[r * M + i] * wf[r * N + j];
        abs += fabs((double)xf[r * M + i] * wf[r * N + j]);
      }
      if (!(fabs(yf[i * N + j] - want) <= F * K * 0x1p-24 * abs))
        fail_msg("kfold: element (%d, %d): got %.9g, want %.9g", i, j, yf[i * N + j], want);
    }
  fold = ints(4, 0, 0, 0, 1);
  refuse(dtrt_k_matmul, in, 2, &y, &fold, "kfold 1 needs ta");
  fold = ints(4, 1, 0, 0, 1);
  in[1] = ten(DTRT_F32, wf, 3, F, K - 1, N);
  refuse(dtrt_k_matmul, in, 2, &y, &fold, "alike in their first 2 dims");
  fold = ints(3, 1, 0, 4);
  refuse(dtrt_k_matmul, in, 2, &y, &fold, "kblock 4");
}

/* ---- reductions ---- */

enum { RSUM, RMEAN, RMAX };

/* Reference: walks every element of x by multi-index. */
static void reduce_ref(const DtTensor *x, unsigned mask, int op, float *y, int64_t ny) {
  double *acc = calloc((size_t)ny + 1, sizeof *acc);
  int64_t *cnt = calloc((size_t)ny + 1, sizeof *cnt);
  for (int64_t k = 0; k < ny; k++)
    acc[k] = op == RMAX ? -INFINITY : 0;
  int64_t n = numel(x), idx[DT_MAX_RANK];
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f;
    for (int d = x->rank - 1; d >= 0; d--) {
      idx[d] = r % x->dim[d];
      r /= x->dim[d];
    }
    int64_t o = 0;
    for (int d = 0; d < x->rank; d++)
      if (!(mask >> d & 1))
        o = o * x->dim[d] + idx[d];
    float v = ((const float *)x->data)[f];
    if (op == RMAX)
      acc[o] = v > acc[o] ? v : acc[o];
    else
      acc[o] += v;
    cnt[o]++;
  }
  for (int64_t k = 0; k < ny; k++)
    y[k] = (float)(op == RMEAN ? acc[k] / (double)cnt[k] : acc[k]);
  free(acc);
  free(cnt);
}

/* Builds attrs and the output shape for reducing mask with keepdim mode
 * (-1: attribute absent, 0, 1); neg writes axes counted from the end. */
static void reduce_setup(const DtTensor *x, unsigned mask, int keep, int neg, DtAttrs *a,
                         DtTensor *y) {
  *a = (DtAttrs){0};
  y->dtype = DTRT_F32;
  y->rank = 0;
  for (int d = 0; d < x->rank; d++) {
    if (mask >> d & 1)
      a->i[a->ni++] = neg ? d - x->rank : d;
    if (!(mask >> d & 1) || keep == 1)
      y->dim[y->rank++] = mask >> d & 1 ? 1 : x->dim[d];
  }
  if (keep >= 0)
    a->i[a->ni++] = keep;
}

static void test_reduce(void **state) {
  (void)state;
  int shapes[][4] = {{3, 4, 5, 2}, {2, 1, 7, 3}, {1, 6, 1, 4}};
  for (int sh = 0; sh < 3; sh++) {
    DtTensor x = ten(DTRT_F32, NULL, 4, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3]);
    int64_t nx = numel(&x);
    x.data = randv(nx);
    float got[512], want[512];
    for (unsigned mask = 1; mask < 16; mask++)
      for (int keep = -1; keep <= 1; keep++)
        for (int op = RSUM; op <= RMAX; op++) {
          DtAttrs a;
          DtTensor y = {.data = got};
          reduce_setup(&x, mask, keep, (int)mask & 1, &a, &y);
          Kern k = op == RSUM ? dtrt_k_sum : op == RMEAN ? dtrt_k_mean : dtrt_k_max;
          run(k, &x, 1, &y, &a);
          reduce_ref(&x, mask, op, want, numel(&y));
          near(got, want, numel(&y), op == RMAX ? 0 : 1e-5);
        }
    /* an empty axes list reduces every axis */
    DtAttrs a = {0};
    DtTensor y = ten(DTRT_F32, got, 0);
    run(dtrt_k_sum, &x, 1, &y, &a);
    reduce_ref(&x, 15, RSUM, want, 1);
    near(got, want, 1, 1e-5);
    free(x.data);
  }
  float v[6] = {1, 2, 3, 4, 5, 6}, o[6];
  DtTensor x = ten(DTRT_F32, v, 2, 2, 3), y = ten(DTRT_F32, o, 1, 3);
  DtAttrs a = ints(1, 1);
  refuse(dtrt_k_sum, &x, 1, &y, &a, "reduced tensor is f32[3], expected f32[2]");
  a = ints(2, 1, 1);
  y = ten(DTRT_F32, o, 0);
  refuse(dtrt_k_sum, &x, 1, &y, &a, "listed twice");
  y = ten(DTRT_F32, o, 1, 2);
  a = ints(1, 5);
  y = ten(DTRT_F32, o, 1, 2);
  refuse(dtrt_k_max, &x, 1, &y, &a, "axis 5 out of range");
  a = ints(2, 0, 7);
  refuse(dtrt_k_mean, &x, 1, &y, &a, "do not describe a reduction");
  /* NaN propagates through max; an empty reduction gives -inf and NaN for mean */
  v[4] = NAN;
  a = ints(1, 1);
  run(dtrt_k_max, &x, 1, &y, &a);
  assert_true(o[0] == 3 && isnan(o[1]));
  DtTensor e = ten(DTRT_F32, v, 2, 2, 0);
  run(dtrt_k_max, &e, 1, &y, &a);
  assert_true(isinf(o[0]) && o[0] < 0);
  run(dtrt_k_mean, &e, 1, &y, &a);
  assert_true(isnan(o[0]));
}

/* Sums large enough for the thread pool (cut along the first group): batch
 * norm's statistics over [0, 2, 3] and every other set of axes, against the
 * reference loop; the same result whatever the thread count. */
static void test_reduce_parallel(void **state) {
  (void)state;
  int shapes[][4] = {{64, 16, 28, 28}, {9, 5, 40, 37}, {1000, 3, 5, 7}};
  for (int sh = 0; sh < 3; sh++) {
    DtTensor x = ten(DTRT_F32, NULL, 4, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3]);
    int64_t nx = numel(&x);
    x.data = randv(nx);
    float *got = malloc((size_t)nx * sizeof *got), *want = malloc((size_t)nx * sizeof *want);
    for (unsigned mask = 0; mask < 16; mask++)
      for (int op = RSUM; op <= RMEAN; op++) {
        DtAttrs a;
        DtTensor y = {.data = got};
        reduce_setup(&x, mask, 1, 0, &a, &y);
        if (!mask)   /* no axes listed: every axis */
          a = ints(1, 1), y = ten(DTRT_F32, got, 4, 1, 1, 1, 1);
        run(op == RSUM ? dtrt_k_sum : dtrt_k_mean, &x, 1, &y, &a);
        reduce_ref(&x, mask ? mask : 15, op, want, numel(&y));
        near(got, want, numel(&y), 1e-4);   /* float partial sums of up to 8e5 terms */
      }
    /* one thread: the same sums, bit for bit */
    DtAttrs a;
    DtTensor y = {.data = got}, y1 = {.data = want};
    reduce_setup(&x, 13, 1, 0, &a, &y);
    reduce_setup(&x, 13, 1, 0, &a, &y1);
    run(dtrt_k_sum, &x, 1, &y, &a);
    setenv("DTRT_NUM_THREADS", "1", 1);   /* read when the new context makes its pool */
    DtrtCtx *one = dtrt_ctx_new();
    assert_non_null(one);
    assert_int_equal(dtrt_k_sum(one, &x, 1, &y1, &a), DT_OK);
    assert_int_equal(dtrt_threads(one), 1);
    unsetenv("DTRT_NUM_THREADS");
    assert_memory_equal(got, want, (size_t)numel(&y) * sizeof *got);
    dtrt_ctx_free(one);
    free(got), free(want), free(x.data);
  }
}

/* sum_mul and mean_mul: the bits of sum and mean over the stored product
 * (each product rounded to f32), on the pool and on one thread, for every
 * set of axes, large and small; against the reference loop of that product;
 * factors of another shape refused. */
static void test_reduce_products(void **state) {
  (void)state;
  int shapes[][4] = {{64, 16, 28, 28}, {3, 5, 4, 7}};
  for (int sh = 0; sh < 2; sh++) {
    DtTensor x = ten(DTRT_F32, NULL, 4, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3]);
    int64_t nx = numel(&x);
    float *a = randv(nx), *b = randv(nx), *p = malloc((size_t)nx * sizeof *p);
    float *got = malloc((size_t)nx * sizeof *got), *want = malloc((size_t)nx * sizeof *want);
    for (int64_t k = 0; k < nx; k++)
      p[k] = a[k] * b[k];
    DtTensor ab[2] = {like(&x, a), like(&x, b)}, prod = like(&x, p);
    for (unsigned mask = 1; mask < 16; mask++)
      for (int op = RSUM; op <= RMEAN; op++) {
        DtAttrs at;
        DtTensor y = {.data = got}, y1 = {.data = want};
        reduce_setup(&x, mask, 1, 0, &at, &y);
        reduce_setup(&x, mask, 1, 0, &at, &y1);
        run(op == RSUM ? dtrt_k_sum_mul : dtrt_k_mean_mul, ab, 2, &y, &at);
        run(op == RSUM ? dtrt_k_sum : dtrt_k_mean, &prod, 1, &y1, &at);
        assert_memory_equal(got, want, (size_t)numel(&y) * sizeof *got);
        reduce_ref(&prod, mask, op, want, numel(&y));
        near(got, want, numel(&y), 1e-4);
      }
    DtAttrs at;
    DtTensor y = {.data = got}, y1 = {.data = want};
    reduce_setup(&x, 13, 1, 0, &at, &y);
    reduce_setup(&x, 13, 1, 0, &at, &y1);
    run(dtrt_k_sum_mul, ab, 2, &y, &at);
    setenv("DTRT_NUM_THREADS", "1", 1);
    DtrtCtx *one = dtrt_ctx_new();
    assert_non_null(one);
    assert_int_equal(dtrt_k_sum_mul(one, ab, 2, &y1, &at), DT_OK);
    unsetenv("DTRT_NUM_THREADS");
    assert_memory_equal(got, want, (size_t)numel(&y) * sizeof *got);
    dtrt_ctx_free(one);
    DtTensor bad[2] = {ab[0], ten(DTRT_F32, b, 4, 1, 1, 1, 1)};
    refuse(dtrt_k_sum_mul, bad, 2, &y, &at, "second factor");
    free(a), free(b), free(p), free(got), free(want), free(x.data);
  }
}

/* y[j] (ny of them) = 0 plus, in memory order, the elements f of x (times
 * b[f], the product rounded to f32 first, when b is not NULL) whose place
 * along the kept axes of [A, B, C, D] (mask: the reduced ones, bit 0 for A)
 * is j: a plain loop in the order a sum below the pool's size adds. */
static void sum_order_ref(const float *x, const float *b, const int64_t *dim, unsigned mask,
                          float *y, int64_t ny) {
  for (int64_t k = 0; k < ny; k++)
    y[k] = 0;
  int64_t n = dim[0] * dim[1] * dim[2] * dim[3];
  for (int64_t f = 0; f < n; f++) {
    int64_t r = f, idx[4], o = 0;
    for (int d = 3; d >= 0; d--)
      idx[d] = r % dim[d], r /= dim[d];
    for (int d = 0; d < 4; d++)
      if (!(mask >> d & 1))
        o = o * dim[d] + idx[d];
    float t = b ? x[f] * b[f] : x[f];
    y[o] += t;
  }
}

/* sum and sum_mul whose last axis is kept (a bias's gradient, layer norm's
 * scale's), which add a reduced axis's rows a few at a time: the bits of
 * the plain loop in memory order, rows in counts below and above the rows
 * added a pass and not multiples of them; above the pool's size, in pieces
 * of the first axis, each summed from 0, the pieces' sums added in order. */
static void test_sum_rows_bits(void **state) {
  (void)state;
  static const int64_t shapes[][4] = {{1, 1, 1, 5}, {1, 1, 3, 8}, {1, 1, 4, 17}, {1, 1, 5, 64},
                                      {1, 1, 9, 3}, {1, 1, 13, 256}, {3, 7, 5, 9},
                                      {2, 5, 3, 64}, {4, 3, 6, 2}};
  static const unsigned masks[] = {4, 6, 5, 1, 7, 3};   /* reduced axes, bit 0 for A */
  float *x = randv(4096), *b = randv(4096), got[4096], want[4096];
  for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
    for (size_t mk = 0; mk < sizeof masks / sizeof *masks; mk++) {
      const int64_t *d = shapes[sh];
      DtTensor xt = ten(DTRT_F32, x, 4, (int)d[0], (int)d[1], (int)d[2], (int)d[3]);
      DtTensor in[2] = {xt, like(&xt, b)}, y = {.data = got};
      DtAttrs a;
      reduce_setup(&xt, masks[mk], -1, 0, &a, &y);
      for (int mul = 0; mul < 2; mul++) {
        run(mul ? dtrt_k_sum_mul : dtrt_k_sum, in, mul ? 2 : 1, &y, &a);
        sum_order_ref(x, mul ? b : NULL, d, masks[mk], want, numel(&y));
        assert_memory_equal(got, want, (size_t)numel(&y) * sizeof *got);
      }
    }
  free(x), free(b);
  /* [3001, 37] over axis 0: 8 pieces of 375 or 376 rows */
  enum { R = 3001, C = 37, PIECES = 8 };
  float *big = randv(R * C), *big2 = randv(R * C), part[C];
  DtTensor bt = ten(DTRT_F32, big, 2, R, C), bin[2] = {bt, like(&bt, big2)};
  DtTensor y = ten(DTRT_F32, got, 1, C);
  DtAttrs a0 = ints(1, 0);
  for (int mul = 0; mul < 2; mul++) {
    run(mul ? dtrt_k_sum_mul : dtrt_k_sum, bin, mul ? 2 : 1, &y, &a0);
    for (int j = 0; j < C; j++)
      want[j] = 0;
    for (int p = 0; p < PIECES; p++) {
      int64_t lo = (int64_t)R * p / PIECES, hi = (int64_t)R * (p + 1) / PIECES;
      int64_t dim[4] = {1, 1, hi - lo, C};
      sum_order_ref(big + lo * C, mul ? big2 + lo * C : NULL, dim, 4, part, C);
      for (int j = 0; j < C; j++)
        want[j] += part[j];
    }
    assert_memory_equal(got, want, C * sizeof *got);
  }
  free(big), free(big2);
}

typedef struct MaxU {
  DtTensor x, y;
  DtAttrs a;
} MaxU;

static void max_fwd(const float *x, float *y, void *u) {
  MaxU *m = u;
  DtTensor xt = like(&m->x, (void *)x), yt = like(&m->y, y);
  run(dtrt_k_max, &xt, 1, &yt, &m->a);
}

static void test_max_grad(void **state) {
  (void)state;
  DtTensor x = ten(DTRT_F32, NULL, 3, 3, 4, 5);
  for (unsigned mask = 1; mask < 8; mask++)
    for (int keep = -1; keep <= 1; keep++) {
      MaxU u = {.x = x};
      float yb[64], dyb[64], dx[60], *xv = randv(60);
      /* distinct values 0.05 apart, so no finite-difference step crosses a tie */
      for (int k = 0; k < 60; k++)
        xv[k] = 0.05f * (float)((k * 37) % 60) - 1.5f;
      u.x.data = xv;
      u.y.data = yb;
      reduce_setup(&x, mask, keep, 0, &u.a, &u.y);
      int64_t ny = numel(&u.y);
      float *w = randv(ny);
      memcpy(dyb, w, (size_t)ny * 4);
      max_fwd(u.x.data, yb, &u);
      DtTensor in[3] = {u.x, u.y, like(&u.y, dyb)}, out = like(&x, dx);
      run(dtrt_k_max_grad, in, 3, &out, &u.a);
      fd_check(max_fwd, &u, u.x.data, 60, ny, w, dx, 1e-3, 1e-3);
      free(u.x.data);
      free(w);
    }
  /* ties: the first maximal element in memory order takes the gradient */
  float xv[8] = {1, 3, 3, 0, 2, 2, 2, 2}, yv[4], dy[4] = {10, 20, 30, 40}, dx[8];
  DtTensor xt = ten(DTRT_F32, xv, 2, 2, 4), yt = ten(DTRT_F32, yv, 1, 4);
  DtAttrs a = ints(2, 0, 0);
  run(dtrt_k_max, &xt, 1, &yt, &a);
  DtTensor in[3] = {xt, yt, ten(DTRT_F32, dy, 1, 4)}, out = ten(DTRT_F32, dx, 2, 2, 4);
  run(dtrt_k_max_grad, in, 3, &out, &a);
  float want[8] = {0, 20, 30, 0, 10, 0, 0, 40};
  near(dx, want, 8, 0);
  a = ints(1, 1);
  yt = ten(DTRT_F32, yv, 1, 2);
  in[1] = yt;
  in[2] = ten(DTRT_F32, dy, 1, 2);
  run(dtrt_k_max_grad, in, 3, &out, &a);
  float want2[8] = {0, 10, 0, 0, 20, 0, 0, 0};
  near(dx, want2, 8, 0);
  in[2] = ten(DTRT_F32, dy, 1, 3);
  refuse(dtrt_k_max_grad, in, 3, &out, &a, "dy is f32[3], expected f32[2]");
}

/* ---- softmax family ---- */

static void softmax_ref(const DtTensor *x, int ax, int lg, float *y) {
  int64_t outer = 1, n = x->dim[ax], inner = 1;
  for (int d = 0; d < ax; d++)
    outer *= x->dim[d];
  for (int d = ax + 1; d < x->rank; d++)
    inner *= x->dim[d];
  const float *v = x->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < n; j++)
        m = fmax(m, v[(o * n + j) * inner + i]);
      for (int64_t j = 0; j < n; j++)
        s += exp(v[(o * n + j) * inner + i] - m);
      for (int64_t j = 0; j < n; j++) {
        double z = v[(o * n + j) * inner + i] - m;
        y[(o * n + j) * inner + i] = (float)(lg ? z - log(s) : exp(z) / s);
      }
    }
}

typedef struct SmU {
  DtTensor x;
  DtAttrs a;
  Kern k;
} SmU;

static void sm_fwd(const float *x, float *y, void *u) {
  SmU *s = u;
  DtTensor xt = like(&s->x, (void *)x), yt = like(&s->x, y);
  run(s->k, &xt, 1, &yt, &s->a);
}

/* softmax over rows of 1000 against the same arithmetic written plainly
 * here (built for the baseline CPU): e^(x - max) by dtrt_exp_fast, summed
 * in 8 lanes (element j into lane j % 8), the lanes and the tail in double.
 * Bit for bit: the kernel's loops, built wider where the CPU has AVX2
 * (DTRT_WIDE), must not change a result. */
static void test_softmax_bits(void **state) {
  (void)state;
  enum { R = 7, N = 1003 };
  DtTensor x = ten(DTRT_F32, NULL, 2, R, N);
  x.data = randv(R * N);
  float *xv = x.data, *y = malloc(sizeof(float) * R * N);
  for (int i = 0; i < R * N; i++)
    xv[i] *= 30;
  DtTensor yt = like(&x, y);
  run(dtrt_k_softmax, &x, 1, &yt, NULL);
  for (int r = 0; r < R; r++) {
    const float *row = xv + r * N;
    float m = -INFINITY, acc[8] = {0}, e[N];
    for (int j = 0; j < N; j++)
      m = row[j] > m ? row[j] : m;
    int j = 0;
    for (; j + 8 <= N; j += 8)
      for (int l = 0; l < 8; l++)
        acc[l] += e[j + l] = dtrt_exp_fast(row[j + l] - m);
    double s = 0;
    for (int l = 0; l < 8; l++)
      s += acc[l];
    for (; j < N; j++)
      s += e[j] = dtrt_exp_fast(row[j] - m);
    float inv = (float)(1.0 / s);
    for (j = 0; j < N; j++) {
      float want = e[j] * inv;
      if (memcmp(&want, &y[r * N + j], sizeof want))
        fail_msg("row %d element %d: %.9g, want %.9g", r, j, y[r * N + j], want);
    }
  }
  free(y);
  free(x.data);
}

static void test_softmax(void **state) {
  (void)state;
  DtTensor x = ten(DTRT_F32, NULL, 3, 3, 4, 5);
  x.data = randv(60);
  for (int i = 0; i < 60; i++)
    ((float *)x.data)[i] *= 5;
  float y[60], want[60], dy[60], dx[60];
  for (int lg = 0; lg < 2; lg++)
    for (int ax = -3; ax < 3; ax++) {
      DtAttrs a = ints(1, ax);
      DtTensor yt = like(&x, y);
      run(lg ? dtrt_k_log_softmax : dtrt_k_softmax, &x, 1, &yt, &a);
      softmax_ref(&x, (ax + 3) % 3, lg, want);
      near(y, want, 60, 1e-5);
      float *w = randv(60);
      memcpy(dy, w, sizeof dy);
      DtTensor in[2] = {yt, like(&x, dy)}, out = like(&x, dx);
      run(lg ? dtrt_k_log_softmax_grad : dtrt_k_softmax_grad, in, 2, &out, &a);
      SmU u = {x, a, lg ? dtrt_k_log_softmax : dtrt_k_softmax};
      fd_check(sm_fwd, &u, x.data, 60, 60, w, dx, 1e-2, 2e-3);
      free(w);
    }
  /* default axis is the last; large inputs stay finite */
  float big[3] = {1000, 1001, 999}, out3[3];
  DtTensor bt = ten(DTRT_F32, big, 1, 3), ot = ten(DTRT_F32, out3, 1, 3);
  run(dtrt_k_softmax, &bt, 1, &ot, NULL);
  softmax_ref(&bt, 0, 0, want);
  near(out3, want, 3, 1e-6);
  run(dtrt_k_log_softmax, &bt, 1, &ot, NULL);
  softmax_ref(&bt, 0, 1, want);
  near(out3, want, 3, 1e-6);
  DtTensor sc = ten(DTRT_F32, big, 0);
  refuse(dtrt_k_softmax, &sc, 1, &sc, NULL, "scalar");
  DtAttrs a = ints(1, 3);
  refuse(dtrt_k_softmax, &x, 1, &x, &a, "axis 3 out of range for rank 3");
  free(x.data);
}

/* ---- losses ---- */

typedef struct CeU {
  DtTensor lab;
  int n, c;
} CeU;

static void ce_fwd(const float *x, float *y, void *u) {
  CeU *c = u;
  DtTensor in[2] = {ten(DTRT_F32, (void *)x, 2, c->n, c->c), c->lab}, out = ten(DTRT_F32, y, 0);
  run(dtrt_k_cross_entropy, in, 2, &out, NULL);
}

static void test_cross_entropy(void **state) {
  (void)state;
  enum { N = 6, C = 5 };
  float *x = randv(N * C), loss, dl = 1.5f, dx[N * C], w = 1.5f;
  int32_t lab[N] = {0, 4, 2, 2, 1, 3};
  double want = 0;
  for (int i = 0; i < N; i++) {
    double s = 0;
    for (int j = 0; j < C; j++)
      s += exp(x[i * C + j]);
    want += log(s) - x[i * C + lab[i]];
  }
  want /= N;
  CeU u = {ten(DTRT_I32, lab, 1, N), N, C};
  ce_fwd(x, &loss, &u);
  assert_true(fabs(loss - want) < 1e-5);
  DtTensor in[3] = {ten(DTRT_F32, x, 2, N, C), u.lab, ten(DTRT_F32, &dl, 0)};
  DtTensor out = ten(DTRT_F32, dx, 2, N, C);
  run(dtrt_k_cross_entropy_grad, in, 3, &out, NULL);
  fd_check(ce_fwd, &u, x, N * C, 1, &w, dx, 1e-2, 2e-3);
  lab[3] = 5;
  DtTensor o = ten(DTRT_F32, &loss, 0);
  refuse(dtrt_k_cross_entropy, in, 2, &o, NULL, "label 5 in row 3 is outside [0, 5)");
  lab[3] = -1;
  refuse(dtrt_k_cross_entropy_grad, in, 3, &out, NULL, "label -1 in row 3");
  lab[3] = 0;
  in[1] = ten(DTRT_I32, lab, 1, N - 1);
  refuse(dtrt_k_cross_entropy, in, 2, &o, NULL, "labels is i32[5], expected i32[6]");
  in[1] = ten(DTRT_F32, lab, 1, N);
  refuse(dtrt_k_cross_entropy, in, 2, &o, NULL, "labels is f32, expected i32");
  o = ten(DTRT_F32, &loss, 1, 1);
  in[1] = u.lab;
  refuse(dtrt_k_cross_entropy, in, 2, &o, NULL, "output is f32[1], expected f32[]");
  free(x);
}

/* ---- PyTorch's losses ---- */

typedef struct CesU {
  DtTensor lab;
  DtAttrs a;
  int n, c;
} CesU;

static void ces_fwd(const float *x, float *y, void *u) {
  CesU *c = u;
  DtTensor in[2] = {ten(DTRT_F32, (void *)x, 2, c->n, c->c), c->lab}, out = ten(DTRT_F32, y, 0);
  run(dtrt_k_cross_entropy_sum, in, 2, &out, &c->a);
}

/* The sum over kept rows of (1 - e) (-log p[label]) + e/C sum_c (-log p[c]),
 * from the log-softmax written out, against the kernel and its gradient
 * against finite differences; the count of kept labels. */
static void test_cross_entropy_sum(void **state) {
  (void)state;
  enum { N = 6, C = 5 };
  float *x = randv(N * C), loss, ds = 0.75f, dx[N * C], w = 0.75f, count;
  int32_t lab[N] = {0, -3, 2, 4, -3, 1};
  const double eps = 0.3;
  double want = 0;
  for (int i = 0; i < N; i++) {
    if (lab[i] == -3)
      continue;
    double s = 0;
    for (int j = 0; j < C; j++)
      s += exp(x[i * C + j]);
    for (int j = 0; j < C; j++) {
      double nlp = log(s) - x[i * C + j];
      want += (j == lab[i] ? 1 - eps : 0) * nlp + eps / C * nlp;
    }
  }
  CesU u = {ten(DTRT_I32, lab, 1, N), {.ni = 1, .nf = 1, .i = {-3}, .f = {eps}}, N, C};
  ces_fwd(x, &loss, &u);
  assert_true(fabs(loss - want) < 1e-5);
  DtTensor in[3] = {ten(DTRT_F32, x, 2, N, C), u.lab, ten(DTRT_F32, &ds, 0)};
  DtTensor out = ten(DTRT_F32, dx, 2, N, C);
  run(dtrt_k_cross_entropy_sum_grad, in, 3, &out, &u.a);
  fd_check(ces_fwd, &u, x, N * C, 1, &w, dx, 1e-2, 2e-3);
  for (int j = 0; j < C; j++)
    assert_true(dx[1 * C + j] == 0 && dx[4 * C + j] == 0);   /* ignored rows */
  DtTensor co = ten(DTRT_F32, &count, 0);
  DtAttrs ca = ints(1, -3);
  run(dtrt_k_label_count, &in[1], 1, &co, &ca);
  assert_true(count == 4);
  /* ignored rows stay 0 even for an infinite dsum (0 kept labels) */
  ds = INFINITY;
  run(dtrt_k_cross_entropy_sum_grad, in, 3, &out, &u.a);
  for (int j = 0; j < C; j++)
    assert_true(dx[1 * C + j] == 0);
  lab[3] = 5;
  DtTensor o = ten(DTRT_F32, &loss, 0);
  refuse(dtrt_k_cross_entropy_sum, in, 2, &o, &u.a,
         "label 5 in row 3 is outside [0, 5) and not ignore_index");
  lab[3] = -100;
  refuse(dtrt_k_cross_entropy_sum_grad, in, 3, &out, &u.a, "label -100 in row 3");
  lab[3] = 2;
  DtTensor bad = ten(DTRT_I32, lab, 2, 2, 3);
  refuse(dtrt_k_label_count, &bad, 1, &co, &ca, "labels need rank 1");
  free(x);
}

typedef struct BceU {
  DtTensor t;
} BceU;

static void bce_fwd(const float *x, float *y, void *u) {
  BceU *b = u;
  DtTensor in[2] = {ten(DTRT_F32, (void *)x, 2, 3, 4), b->t}, out = ten(DTRT_F32, y, 0);
  run(dtrt_k_bce_with_logits, in, 2, &out, NULL);
}

/* -(t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))) averaged, written out,
 * against the kernel; its gradient against finite differences; logits of
 * +-100 stay finite. */
static void test_bce_with_logits(void **state) {
  (void)state;
  enum { N = 12 };
  float *x = randv(N), t[N], loss, dl = 2, dx[N], w = 2;
  double want = 0;
  for (int k = 0; k < N; k++) {
    t[k] = (float)(k % 4) / 3;
    double p = 1 / (1 + exp(-(double)x[k]));
    want -= t[k] * log(p) + (1 - t[k]) * log(1 - p);
  }
  want /= N;
  BceU u = {ten(DTRT_F32, t, 2, 3, 4)};
  bce_fwd(x, &loss, &u);
  assert_true(fabs(loss - want) < 1e-5);
  DtTensor in[3] = {ten(DTRT_F32, x, 2, 3, 4), u.t, ten(DTRT_F32, &dl, 0)};
  DtTensor out = ten(DTRT_F32, dx, 2, 3, 4);
  run(dtrt_k_bce_with_logits_grad, in, 3, &out, NULL);
  fd_check(bce_fwd, &u, x, N, 1, &w, dx, 1e-2, 2e-3);
  float big[2] = {100, -100}, tb[2] = {0, 1}, db[2];
  DtTensor bi[3] = {ten(DTRT_F32, big, 1, 2), ten(DTRT_F32, tb, 1, 2), ten(DTRT_F32, &dl, 0)};
  DtTensor o = ten(DTRT_F32, &loss, 0);
  run(dtrt_k_bce_with_logits, bi, 2, &o, NULL);
  assert_true(fabs(loss - 100) < 1e-4);
  DtTensor bo = ten(DTRT_F32, db, 1, 2);
  run(dtrt_k_bce_with_logits_grad, bi, 3, &bo, NULL);
  assert_true(fabs(db[0] - 1) < 1e-6 && fabs(db[1] + 1) < 1e-6);
  bi[1] = ten(DTRT_F32, tb, 1, 1);
  refuse(dtrt_k_bce_with_logits, bi, 2, &o, NULL, "target is f32[1], expected f32[2]");
  free(x);
}

static void test_mse(void **state) {
  (void)state;
  float *p = randv(24), *t = randv(24), out;
  double want = 0;
  for (int i = 0; i < 24; i++)
    want += ((double)p[i] - t[i]) * ((double)p[i] - t[i]);
  want /= 24;
  DtTensor in[2] = {ten(DTRT_F32, p, 2, 4, 6), ten(DTRT_F32, t, 2, 4, 6)}, o = ten(DTRT_F32, &out, 0);
  run(dtrt_k_mse, in, 2, &o, NULL);
  assert_true(fabs(out - want) < 1e-6);
  in[1] = ten(DTRT_F32, t, 2, 6, 4);
  refuse(dtrt_k_mse, in, 2, &o, NULL, "target is f32[6,4], expected f32[4,6]");
  free(p);
  free(t);
}

/* ---- normalize ---- */

typedef struct NormU {
  DtTensor x;
  DtAttrs a;
} NormU;

static void norm_fwd(const float *x, float *y, void *u) {
  NormU *n = u;
  DtTensor xt = like(&n->x, (void *)x), yt = like(&n->x, y);
  run(dtrt_k_normalize, &xt, 1, &yt, &n->a);
}

static void test_normalize(void **state) {
  (void)state;
  DtTensor x = ten(DTRT_F32, NULL, 3, 2, 3, 7);
  x.data = randv(42);
  float y[42], want[42], dx[42];
  for (int with_eps = 0; with_eps < 2; with_eps++) {
    DtAttrs a = {.nf = with_eps, .f = {0.25}};
    double eps = with_eps ? 0.25 : 1e-5;
    for (int r = 0; r < 6; r++) {
      const float *v = (const float *)x.data + r * 7;
      double m = 0, var = 0;
      for (int j = 0; j < 7; j++)
        m += v[j] / 7.0;
      for (int j = 0; j < 7; j++)
        var += (v[j] - m) * (v[j] - m) / 7.0;
      for (int j = 0; j < 7; j++)
        want[r * 7 + j] = (float)((v[j] - m) / sqrt(var + eps));
    }
    NormU u = {x, a};
    norm_fwd(x.data, y, &u);
    near(y, want, 42, 1e-5);
    float *w = randv(42);
    DtTensor in[2] = {x, like(&x, w)}, out = like(&x, dx);
    run(dtrt_k_normalize_grad, in, 2, &out, &a);
    fd_check(norm_fwd, &u, x.data, 42, 42, w, dx, 1e-3, 2e-3);
    free(w);
  }
  DtAttrs neg = {.nf = 1, .f = {-1}};
  refuse(dtrt_k_normalize, &x, 1, &x, &neg, "eps");
  free(x.data);
}

/* normalize (dy NULL) or normalize_grad of row x of d as plain loops in
 * the order kernels_nn.c documents: each sum in 8 float lanes, element j
 * into lane j % 8, the lanes then added in double in lane order, the last
 * d % 8 elements after them in double. */
static void norm_lanes_ref(const float *x, const float *dy, int64_t d, double eps, float *y) {
  float s8[8] = {0}, a8[8] = {0}, b8[8] = {0}, c8[8] = {0};
  int64_t whole = d - d % 8;
  for (int64_t j = 0; j < whole; j++)
    s8[j % 8] += x[j];
  double s = 0;
  for (int l = 0; l < 8; l++)
    s += s8[l];
  for (int64_t j = whole; j < d; j++)
    s += x[j];
  float mu = (float)(s / (double)d);
  for (int64_t j = 0; j < whole; j++) {
    float t = x[j] - mu;
    a8[j % 8] += t * t;
    if (dy) {
      b8[j % 8] += dy[j] * t;
      c8[j % 8] += dy[j];
    }
  }
  double xx = 0, xdy = 0, sdy = 0;
  for (int l = 0; l < 8; l++)
    xx += a8[l], xdy += b8[l], sdy += c8[l];
  for (int64_t j = whole; j < d; j++) {
    double t = x[j] - mu;
    xx += t * t;
    xdy += dy ? dy[j] * t : 0.0;
    sdy += dy ? dy[j] : 0.0f;
  }
  float inv = (float)(1.0 / sqrt(xx / (double)d + eps));
  float mdy = (float)(sdy / (double)d), mdyx = (float)(xdy * inv / (double)d);
  for (int64_t k = 0; k < d; k++)
    y[k] = dy ? inv * (dy[k] - mdy - (x[k] - mu) * inv * mdyx) : (x[k] - mu) * inv;
}

/* normalize and normalize_grad: the bits of norm_lanes_ref, rows of
 * lengths below, at and around multiples of the 8 lanes. */
static void test_normalize_bits(void **state) {
  (void)state;
  static const int lens[] = {1, 3, 7, 8, 9, 16, 23, 64, 131};
  enum { ROWS = 5 };
  float *x = randv(ROWS * 131), *dy = randv(ROWS * 131), got[ROWS * 131], want[ROWS * 131];
  for (int k = 0; k < ROWS * 131; k++)
    x[k] = 3 * x[k] + 1;   /* a mean away from 0 */
  DtAttrs eps = {.nf = 1, .f = {1e-5}};
  for (size_t t = 0; t < sizeof lens / sizeof *lens; t++) {
    int d = lens[t];
    DtTensor xt = ten(DTRT_F32, x, 2, ROWS, d), in[2] = {xt, like(&xt, dy)};
    DtTensor yt = like(&xt, got);
    for (int grad = 0; grad < 2; grad++) {
      run(grad ? dtrt_k_normalize_grad : dtrt_k_normalize, in, grad ? 2 : 1, &yt, &eps);
      for (int r = 0; r < ROWS; r++)
        norm_lanes_ref(x + r * d, grad ? dy + r * d : NULL, d, 1e-5, want + r * d);
      assert_memory_equal(got, want, (size_t)(ROWS * d) * sizeof *got);
    }
  }
  free(x), free(dy);
}

/* ---- embedding ---- */

typedef struct EmbU {
  DtTensor ids;
  int v, d;
} EmbU;

static void emb_fwd(const float *t, float *y, void *u) {
  EmbU *e = u;
  DtTensor in[2] = {ten(DTRT_F32, (void *)t, 2, e->v, e->d), e->ids};
  DtTensor out = ten(DTRT_F32, y, 3, (int)e->ids.dim[0], (int)e->ids.dim[1], e->d);
  run(dtrt_k_embedding, in, 2, &out, NULL);
}

static void test_embedding(void **state) {
  (void)state;
  enum { V = 5, D = 3 };
  float *tab = randv(V * D), y[2 * 4 * D], g[V * D];
  int32_t ids[8] = {0, 4, 2, 2, 1, 4, 4, 3};
  EmbU u = {ten(DTRT_I32, ids, 2, 2, 4), V, D};
  emb_fwd(tab, y, &u);
  for (int k = 0; k < 8; k++)
    near(y + k * D, tab + ids[k] * D, D, 0);
  float *w = randv(8 * D);
  DtTensor in[2] = {u.ids, ten(DTRT_F32, w, 3, 2, 4, D)}, out = ten(DTRT_F32, g, 2, V, D);
  DtAttrs rows = ints(1, V);
  run(dtrt_k_embedding_grad, in, 2, &out, &rows);
  fd_check(emb_fwd, &u, tab, V * D, 8 * D, w, g, 1e-2, 1e-4);
  ids[5] = 5;
  DtTensor ein[2] = {ten(DTRT_F32, tab, 2, V, D), u.ids}, eo = ten(DTRT_F32, y, 3, 2, 4, D);
  refuse(dtrt_k_embedding, ein, 2, &eo, NULL, "id 5 at index 5 is outside [0, 5)");
  refuse(dtrt_k_embedding_grad, in, 2, &out, &rows, "id 5 at index 5");
  ids[5] = 0;
  refuse(dtrt_k_embedding_grad, in, 2, &out, NULL, "rows");
  in[1] = ten(DTRT_F32, w, 3, 2, 3, D);
  refuse(dtrt_k_embedding_grad, in, 2, &out, &rows, "dy is f32[2,3,3], expected f32[2,4,3]");
  free(tab);
  free(w);
}

/* ---- dropout ---- */

static void test_dropout(void **state) {
  (void)state;
  enum { N = 20000 };
  float *x = randv(N), *y = malloc(N * 4), *y2 = malloc(N * 4), *g = malloc(N * 4);
  float *ones = malloc(N * 4);
  for (int k = 0; k < N; k++)
    ones[k] = 1;
  DtTensor xt = ten(DTRT_F32, x, 2, 100, 200), yt = like(&xt, y), y2t = like(&xt, y2);
  DtTensor gt = like(&xt, g), ot = like(&xt, ones);
  DtAttrs a = {.ni = 1, .i = {1234}, .nf = 1, .f = {0.3}, .step = 7};
  run(dtrt_k_dropout, &xt, 1, &yt, &a);
  int kept = 0;
  for (int k = 0; k < N; k++) {
    if (y[k] != 0) {
      kept++;
      assert_true(fabsf(y[k] - x[k] / 0.7f) < 1e-6f);
    }
  }
  assert_true(fabs(kept / (double)N - 0.7) < 0.02);
  run(dtrt_k_dropout, &xt, 1, &y2t, &a);
  assert_memory_equal(y, y2, N * 4);
  /* the gradient applies the same mask: it is the derivative of a linear map */
  run(dtrt_k_dropout_grad, &ot, 1, &gt, &a);
  for (int k = 0; k < N; k++)
    assert_true(fabsf(g[k] - (y[k] != 0 ? 1 / 0.7f : 0)) < 1e-6f);
  a.step = 8;
  run(dtrt_k_dropout, &xt, 1, &y2t, &a);
  int same = 0;
  for (int k = 0; k < N; k++)
    same += (y[k] != 0) == (y2[k] != 0);
  assert_true(same < N * 0.7);
  a.f[0] = 0;
  run(dtrt_k_dropout, &xt, 1, &yt, &a);
  assert_memory_equal(x, y, N * 4);
  a.f[0] = 1;
  run(dtrt_k_dropout, &xt, 1, &yt, &a);
  for (int k = 0; k < N; k++)
    assert_true(y[k] == 0);
  a.f[0] = 1.5;
  refuse(dtrt_k_dropout, &xt, 1, &yt, &a, "p = 1.5 is outside [0, 1]");
  a.nf = 0;
  refuse(dtrt_k_dropout_grad, &xt, 1, &yt, &a, "needs the float attribute p");
  free(x);
  free(y);
  free(y2);
  free(g);
  free(ones);
}

/* A block of a [6,10,12] tensor that names its place (rows 2..5 of dim 0,
 * 3..9 of dim 1, 4..11 of dim 2) gets the same elements as that block of the
 * whole tensor's dropout: a device's share after spmd drops what one device
 * would. */
static void test_dropout_block(void **state) {
  (void)state;
  enum { A = 6, B = 10, C = 12, A0 = 2, B0 = 3, C0 = 4, LA = 4, LB = 7, LC = 8 };
  float *x = randv(A * B * C), *y = malloc(A * B * C * 4), *xb = malloc(LA * LB * LC * 4);
  float *yb = malloc(LA * LB * LC * 4);
  DtTensor xt = ten(DTRT_F32, x, 3, A, B, C), yt = like(&xt, y);
  DtAttrs a = {.ni = 1, .i = {99}, .nf = 1, .f = {0.5}, .step = 3};
  run(dtrt_k_dropout, &xt, 1, &yt, &a);
  for (int i = 0; i < LA; i++)
    for (int j = 0; j < LB; j++)
      for (int k = 0; k < LC; k++)
        xb[(i * LB + j) * LC + k] = x[((i + A0) * B + j + B0) * C + k + C0];
  DtTensor xbt = ten(DTRT_F32, xb, 3, LA, LB, LC), ybt = like(&xbt, yb);
  DtAttrs ab = {.ni = 7, .i = {99, A, B, C, A0, B0, C0}, .nf = 1, .f = {0.5}, .step = 3};
  run(dtrt_k_dropout, &xbt, 1, &ybt, &ab);
  int dropped = 0;
  for (int i = 0; i < LA; i++)
    for (int j = 0; j < LB; j++)
      for (int k = 0; k < LC; k++) {
        float want = y[((i + A0) * B + j + B0) * C + k + C0];
        assert_true(yb[(i * LB + j) * LC + k] == want);
        dropped += want == 0;
      }
  assert_true(dropped > 0 && dropped < LA * LB * LC);
  ab.i[4] = A0 + 3;   /* rows 5..8 of 6 */
  refuse(dtrt_k_dropout, &xbt, 1, &ybt, &ab,
         "a block of 4 from 5 does not fit dimension 0 of length 6");
  ab.ni = 4;
  refuse(dtrt_k_dropout, &xbt, 1, &ybt, &ab, "optionally the block's place");
  free(x);
  free(y);
  free(xb);
  free(yb);
}

/* ---- causal mask ---- */

static void mask_fwd(const float *x, float *y, void *u) {
  DtTensor xt = ten(DTRT_F32, (void *)x, 3, 2, 4, 4), yt = like(&xt, y);
  run(dtrt_k_causal_mask, &xt, 1, &yt, u);
}

static void test_causal_mask(void **state) {
  (void)state;
  float *x = randv(32), y[32], g[32];
  mask_fwd(x, y, NULL);
  for (int b = 0; b < 2; b++)
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++) {
        float v = y[b * 16 + i * 4 + j];
        assert_true(j > i ? isinf(v) && v < 0 : v == x[b * 16 + i * 4 + j]);
      }
  /* more rows than columns, and more columns than rows */
  for (int t = 0; t < 2; t++) {
    int r = t ? 3 : 6, c = t ? 6 : 3;
    DtTensor xt = ten(DTRT_F32, x, 2, r, c), yt = like(&xt, y);
    run(dtrt_k_causal_mask, &xt, 1, &yt, NULL);
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++)
        assert_true(j > i ? isinf(y[i * c + j]) : y[i * c + j] == x[i * c + j]);
  }
  /* rows of 32 as attention's, and rows counted across matrices and leading
   * axes: against the plain loop, with fill -inf and 0 */
  static const int shapes[][4] = {{2, 3, 32, 32}, {1, 4, 5, 3}, {3, 2, 2, 7}, {1, 1, 9, 40}};
  float *xs = randv(6144), *ys = malloc(6144 * sizeof *ys);
  for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
    const int *d = shapes[t];
    DtTensor xt = ten(DTRT_F32, xs, 4, d[0], d[1], d[2], d[3]), yt = like(&xt, ys);
    for (int f = 0; f < 2; f++) {
      DtAttrs fill = {.nf = 1, .f = {f ? 0 : -INFINITY}};
      run(dtrt_k_causal_mask, &xt, 1, &yt, &fill);
      for (int64_t k = 0; k < numel(&xt); k++) {
        int64_t i = k / d[3] % d[2], j = k % d[3];
        assert_true(j > i ? ys[k] == (float)fill.f[0] : ys[k] == xs[k]);
      }
    }
  }
  free(xs), free(ys);
  /* the backward is the same op with fill 0 */
  float *w = randv(32);
  DtAttrs z = {.nf = 1, .f = {0}};
  DtTensor wt = ten(DTRT_F32, w, 3, 2, 4, 4), gt = like(&wt, g);
  run(dtrt_k_causal_mask, &wt, 1, &gt, &z);
  DtAttrs big = {.nf = 1, .f = {-1e4}};
  fd_check(mask_fwd, &big, x, 32, 32, w, g, 1e-2, 1e-4);
  DtTensor v = ten(DTRT_F32, x, 1, 4);
  refuse(dtrt_k_causal_mask, &v, 1, &v, NULL, "rank 2 or more");
  free(x);
  free(w);
}

/* ---- data movement ---- */

static void test_reshape(void **state) {
  (void)state;
  int32_t v[12], o[12];
  for (int k = 0; k < 12; k++)
    v[k] = k * 7;
  DtTensor x = ten(DTRT_I32, v, 2, 3, 4), y = ten(DTRT_I32, o, 3, 2, 3, 2);
  DtAttrs a = ints(3, 2, -1, 2);
  run(dtrt_k_reshape, &x, 1, &y, &a);
  assert_memory_equal(v, o, sizeof v);
  run(dtrt_k_reshape, &x, 1, &y, NULL);
  a = ints(3, 2, 2, 3);
  refuse(dtrt_k_reshape, &x, 1, &y, &a, "shape attribute says 2 at axis 1");
  y = ten(DTRT_I32, o, 2, 5, 2);
  refuse(dtrt_k_reshape, &x, 1, &y, NULL, "12 elements, output 10");
  y = ten(DTRT_F32, o, 2, 4, 3);
  refuse(dtrt_k_reshape, &x, 1, &y, NULL, "output is f32, expected i32");
}

static void test_transpose(void **state) {
  (void)state;
  int dims[4] = {2, 3, 4, 5};
  DtTensor x = ten(DTRT_F32, NULL, 4, 2, 3, 4, 5);
  x.data = randv(120);
  float y[120], want[120];
  int perm[4];
  for (int p = 0; p < 24; p++) {
    /* the p-th permutation of 0..3 */
    int avail[4] = {0, 1, 2, 3}, r = p;
    for (int k = 0; k < 4; k++) {
      int f = k == 0 ? 6 : k == 1 ? 2 : 1, j = k == 3 ? 0 : r / f;
      r = k == 3 ? 0 : r % f;
      perm[k] = avail[j];
      for (int m = j; m < 3 - k; m++)
        avail[m] = avail[m + 1];
    }
    DtTensor yt = ten(DTRT_F32, y, 4, dims[perm[0]], dims[perm[1]], dims[perm[2]], dims[perm[3]]);
    DtAttrs a = ints(4, perm[0], perm[1] - 4, perm[2], perm[3]);
    run(dtrt_k_transpose, &x, 1, &yt, &a);
    int64_t o = 0, idx[4];
    for (idx[0] = 0; idx[0] < yt.dim[0]; idx[0]++)
      for (idx[1] = 0; idx[1] < yt.dim[1]; idx[1]++)
        for (idx[2] = 0; idx[2] < yt.dim[2]; idx[2]++)
          for (idx[3] = 0; idx[3] < yt.dim[3]; idx[3]++) {
            int64_t src[4];
            for (int k = 0; k < 4; k++)
              src[perm[k]] = idx[k];
            want[o++] = ((float *)x.data)[((src[0] * 3 + src[1]) * 4 + src[2]) * 5 + src[3]];
          }
    near(y, want, 120, 0);
  }
  DtTensor yt = ten(DTRT_F32, y, 4, 2, 3, 4, 5);
  DtAttrs a = ints(4, 0, 1, 1, 3);
  refuse(dtrt_k_transpose, &x, 1, &yt, &a, "appears twice");
  a = ints(3, 0, 1, 2);
  refuse(dtrt_k_transpose, &x, 1, &yt, &a, "perm has 3 entries");
  a = ints(4, 1, 0, 2, 3);
  refuse(dtrt_k_transpose, &x, 1, &yt, &a, "output is f32[2,3,4,5], expected f32[3,2,4,5]");
  free(x.data);
}

static void test_slice_pad(void **state) {
  (void)state;
  DtTensor x = ten(DTRT_F32, NULL, 3, 3, 4, 5);
  x.data = randv(60);
  float y[60], back[60];
  /* on each axis [1, n - 1), then one element, [2, 3) (one a block on the
   * last axis: the copy without a call a block) */
  for (int t = 0; t < 6; t++) {
    int ax = t % 3, n = (int)x.dim[ax], b = t < 3 ? 1 : 2, e = t < 3 ? n - 1 : 3;
    DtTensor yt = x, bt = x;
    yt.data = y;
    yt.dim[ax] = e - b;
    bt.data = back;
    DtAttrs a = ints(3, ax - (ax == 2 ? 3 : 0), b, e);
    run(dtrt_k_slice, &x, 1, &yt, &a);
    DtAttrs p = ints(3, ax, b, n);
    run(dtrt_k_pad, &yt, 1, &bt, &p);
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 4; j++)
        for (int k = 0; k < 5; k++) {
          int c = ax == 0 ? i : ax == 1 ? j : k, f = (i * 4 + j) * 5 + k;
          int sd[3] = {3, 4, 5};
          sd[ax] = e - b;
          int si[3] = {i, j, k};
          si[ax] -= b;
          bool in = c >= b && c < e;
          float want = in ? ((float *)x.data)[f] : 0;
          assert_true(back[f] == want);
          if (in)
            assert_true(y[(si[0] * sd[1] + si[1]) * sd[2] + si[2]] == want);
        }
  }
  DtTensor yt = ten(DTRT_F32, y, 3, 3, 4, 5);
  DtAttrs a = ints(3, 1, 3, 2);
  refuse(dtrt_k_slice, &x, 1, &yt, &a, "[3, 2) is not inside [0, 4)");
  a = ints(2, 1, 0);
  refuse(dtrt_k_slice, &x, 1, &yt, &a, "needs 3 int attributes");
  a = ints(3, 1, 2, 5);
  yt = ten(DTRT_F32, y, 3, 3, 5, 5);
  refuse(dtrt_k_pad, &x, 1, &yt, &a, "4 elements at 2 do not fit in 5");
  free(x.data);
}

/* pad with a value (f[0]) on each axis of an f32[3,4,5] and an i32 one:
 * the value's bits (-0.0, infinities, beyond any sum's reach) in every place
 * outside x, x's bits inside; an i32 value must be an integer of 32 bits. */
static void test_pad_value(void **state) {
  (void)state;
  static const double values[] = {1.2, -3.0e38, -INFINITY, INFINITY, -0.0, 0.5};
  const int nv = (int)(sizeof values / sizeof values[0]);
  DtTensor x = ten(DTRT_F32, NULL, 3, 3, 4, 5);
  x.data = randv(60);
  int32_t xi[60], yi[120];   /* the largest result: 3 x 4 x 5 with 3 + ax more on axis ax */
  for (int k = 0; k < 60; k++)
    xi[k] = k * 37 - 1000;
  DtTensor xit = ten(DTRT_I32, xi, 3, 3, 4, 5);
  float y[120];
  for (int v = 0; v < nv + 2; v++)
    for (int ax = 0; ax < 3; ax++) {
      bool i32 = v >= nv;
      double value = i32 ? (v == nv ? 7 : INT32_MIN) : values[v];
      const DtTensor *in = i32 ? &xit : &x;
      int n = (int)x.dim[ax], b = 1 + ax, size = n + b + 2;
      DtTensor yt = like(in, i32 ? (void *)yi : (void *)y);
      yt.dim[ax] = size;
      DtAttrs a = ints(3, ax - (ax == 1 ? 3 : 0), b, size);
      a.f[0] = value;
      a.nf = 1;
      run(dtrt_k_pad, in, 1, &yt, &a);
      float fv = (float)value;
      int32_t iv = i32 ? (int32_t)value : 0;
      int dim[3] = {3, 4, 5};
      dim[ax] = size;
      for (int i = 0; i < dim[0]; i++)
        for (int j = 0; j < dim[1]; j++)
          for (int k = 0; k < dim[2]; k++) {
            int at[3] = {i, j, k}, o = (i * dim[1] + j) * dim[2] + k;
            at[ax] -= b;
            bool inside = at[ax] >= 0 && at[ax] < n;
            int f = (at[0] * 4 + at[1]) * 5 + at[2];
            const void *want = inside ? (i32 ? (const void *)&xi[f] : (float *)x.data + f)
                                      : (i32 ? (const void *)&iv : &fv);
            const void *got = i32 ? (const void *)&yi[o] : &y[o];
            if (memcmp(got, want, 4))
              fail_msg("value %g, axis %d, place (%d, %d, %d): got %.9g", value, ax, i, j, k,
                       i32 ? (double)yi[o] : (double)y[o]);
          }
    }
  DtTensor yt = ten(DTRT_I32, yi, 3, 3, 4, 7);
  DtAttrs a = ints(3, 2, 1, 7);
  a.f[0] = 0.5;
  a.nf = 1;
  refuse(dtrt_k_pad, &xit, 1, &yt, &a, "value 0.5 for an i32 tensor is not a 32-bit integer");
  a.f[0] = 2147483648.0;
  refuse(dtrt_k_pad, &xit, 1, &yt, &a, "is not a 32-bit integer");
  a.f[0] = NAN;
  refuse(dtrt_k_pad, &xit, 1, &yt, &a, "is not a 32-bit integer");
  a.nf = 2;
  yt = ten(DTRT_F32, y, 3, 3, 4, 7);
  refuse(dtrt_k_pad, &x, 1, &yt, &a, "2 float attributes (at most 1)");
  free(x.data);
}

/* The source, along one axis of length n, of each place of a pad of it by
 * (before, after) filled as mode 0 reflect, 1 replicate, 2 circular: x's own
 * places, then each side built outward from x's ends. */
static void copy_pad_src(int mode, int n, int before, int after, int *src) {
  for (int j = 0; j < n; j++)
    src[before + j] = j;
  for (int t = 1; t <= before; t++)
    src[before - t] = mode == 0 ? t : mode == 1 ? 0 : n - t;
  for (int t = 1; t <= after; t++)
    src[before + n - 1 + t] = mode == 0 ? n - 1 - t : mode == 1 ? n - 1 : t - 1;
}

/* pad_reflect, pad_replicate, pad_circular and their derivatives on each
 * axis of x [3,4,5], against copy_pad_src. */
static void test_copy_pads(void **state) {
  (void)state;
  static const Kern fwd[] = {dtrt_k_pad_reflect, dtrt_k_pad_replicate, dtrt_k_pad_circular};
  static const Kern bwd[] = {dtrt_k_pad_reflect_grad, dtrt_k_pad_replicate_grad,
                             dtrt_k_pad_circular_grad};
  static const int sides[][2] = {{1, 2}, {0, 3}, {3, 0}, {2, 2}, {4, 4}, {7, 9}};
  int sd[3] = {3, 4, 5};
  DtTensor x = ten(DTRT_F32, randv(60), 3, 3, 4, 5);
  float y[19 * 4 * 5], dx[60], want[60];
  int src[24];
  for (int mode = 0; mode < 3; mode++)
    for (int ax = 0; ax < 3; ax++)
      for (int c = 0; c < (int)(sizeof sides / sizeof sides[0]); c++) {
        int n = sd[ax], b = sides[c][0], after = sides[c][1], size = n + b + after;
        if ((mode == 0 && (b >= n || after >= n)) || (mode == 2 && (b > n || after > n)))
          continue;
        copy_pad_src(mode, n, b, after, src);
        int yd[3] = {3, 4, 5};
        yd[ax] = size;
        DtTensor yt = ten(DTRT_F32, y, 3, yd[0], yd[1], yd[2]), dxt = like(&x, dx);
        DtAttrs a = ints(3, ax, b, size), g = ints(3, ax - 3, b, n);
        run(fwd[mode], &x, 1, &yt, &a);
        for (int k = 0; k < 60; k++)
          want[k] = 0;
        for (int i = 0; i < yd[0]; i++)
          for (int j = 0; j < yd[1]; j++)
            for (int k = 0; k < yd[2]; k++) {
              int at[3] = {i, j, k};
              at[ax] = src[at[ax]];
              int xi = (at[0] * 4 + at[1]) * 5 + at[2], yi = (i * yd[1] + j) * yd[2] + k;
              if (y[yi] != ((float *)x.data)[xi])
                fail_msg("mode %d axis %d (%d, %d): y[%d] is not x[%d]", mode, ax, b, after, yi,
                         xi);
              want[xi] += y[yi];
            }
        /* the adjoint y itself: dx sums the copies of each element */
        run(bwd[mode], &yt, 1, &dxt, &g);
        near(dx, want, 60, 1e-6);
      }
  float v[72];
  DtTensor y6 = ten(DTRT_F32, y, 3, 3, 4, 10), dxt = like(&x, v);
  DtAttrs a = ints(3, 2, 5, 10);
  refuse(dtrt_k_pad_reflect, &x, 1, &y6, &a, "padding (5, 0) of 5 elements on axis 2 is not less");
  run(dtrt_k_pad_circular, &x, 1, &y6, &a);
  a = ints(3, 2, 0, 11);
  DtTensor y11 = ten(DTRT_F32, y, 3, 3, 4, 11);
  refuse(dtrt_k_pad_circular, &x, 1, &y11, &a, "padding (0, 6) of 5 elements on axis 2 is more");
  run(dtrt_k_pad_replicate, &x, 1, &y11, &a);
  a = ints(3, 2, 1, 5);
  DtTensor dx6 = ten(DTRT_F32, v, 3, 3, 4, 6);
  refuse(dtrt_k_pad_replicate_grad, &y6, 1, &dx6, &a, "output is f32[3,4,6], expected f32[3,4,5]");
  a = ints(3, 2, 6, 5);
  refuse(dtrt_k_pad_replicate_grad, &y6, 1, &dxt, &a, "5 elements at 6 do not fit in 10");
  DtTensor yi = ten(DTRT_I32, y, 3, 3, 4, 10);
  a = ints(3, 2, 2, 5);
  refuse(dtrt_k_pad_circular_grad, &yi, 1, &dxt, &a, "adjoint");
  free(x.data);
}

static void test_concat(void **state) {
  (void)state;
  int32_t a[24], b[12], c[36], y[72];
  for (int k = 0; k < 24; k++)
    a[k] = k;
  for (int k = 0; k < 12; k++)
    b[k] = 100 + k;
  for (int k = 0; k < 36; k++)
    c[k] = 200 + k;
  /* along axis 1: [2,4,3] [2,2,3] [2,6,3] -> [2,12,3] */
  DtTensor in[3] = {ten(DTRT_I32, a, 3, 2, 4, 3), ten(DTRT_I32, b, 3, 2, 2, 3),
                    ten(DTRT_I32, c, 3, 2, 6, 3)};
  DtTensor out = ten(DTRT_I32, y, 3, 2, 12, 3);
  DtAttrs ax = ints(1, -2);
  run(dtrt_k_concat, in, 3, &out, &ax);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 12; j++)
      for (int k = 0; k < 3; k++) {
        int want = j < 4 ? a[(i * 4 + j) * 3 + k]
                   : j < 6 ? b[(i * 2 + j - 4) * 3 + k] : c[(i * 6 + j - 6) * 3 + k];
        assert_int_equal(y[(i * 12 + j) * 3 + k], want);
      }
  /* along axis 0 it is plain concatenation */
  in[0] = ten(DTRT_I32, a, 2, 2, 12);
  in[1] = ten(DTRT_I32, b, 2, 1, 12);
  in[2] = ten(DTRT_I32, c, 2, 3, 12);
  out = ten(DTRT_I32, y, 2, 6, 12);
  ax = ints(1, 0);
  run(dtrt_k_concat, in, 3, &out, &ax);
  assert_memory_equal(y, a, sizeof a);
  assert_memory_equal(y + 24, b, sizeof b);
  assert_memory_equal(y + 36, c, sizeof c);
  in[1] = ten(DTRT_I32, b, 2, 2, 6);
  refuse(dtrt_k_concat, in, 3, &out, &ax, "only axis 0 may differ");
  in[1] = ten(DTRT_F32, b, 2, 1, 12);
  refuse(dtrt_k_concat, in, 3, &out, &ax, "input 1 is f32, expected i32");
  refuse(dtrt_k_concat, in, 17, &out, &ax, "expected 1 to 16 inputs");
}

static void test_broadcast(void **state) {
  (void)state;
  float v[12], y[48];
  for (int k = 0; k < 12; k++)
    v[k] = (float)k;
  struct {
    int rin, din[3], rout, dout[3];
  } cases[] = {{2, {3, 1}, 3, {2, 3, 4}}, {0, {0}, 2, {2, 2}}, {1, {4}, 2, {3, 4}},
               {2, {1, 4}, 3, {2, 3, 4}}, {3, {2, 1, 4}, 3, {2, 3, 4}}, {1, {3}, 1, {3}}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    DtTensor x = {.data = v, .dtype = DTRT_F32, .rank = cases[c].rin};
    DtTensor o = {.data = y, .dtype = DTRT_F32, .rank = cases[c].rout};
    DtAttrs a = {.ni = cases[c].rout};
    for (int k = 0; k < x.rank; k++)
      x.dim[k] = cases[c].din[k];
    for (int k = 0; k < o.rank; k++)
      o.dim[k] = a.i[k] = cases[c].dout[k];
    run(dtrt_k_broadcast, &x, 1, &o, &a);
    int lead = o.rank - x.rank;
    int64_t n = numel(&o), idx[3];
    for (int64_t f = 0; f < n; f++) {
      int64_t r = f, src = 0;
      for (int d = o.rank - 1; d >= 0; d--) {
        idx[d] = r % o.dim[d];
        r /= o.dim[d];
      }
      for (int d = lead; d < o.rank; d++)
        src = src * x.dim[d - lead] + (x.dim[d - lead] == 1 ? 0 : idx[d]);
      assert_true(y[f] == v[src]);
    }
  }
  DtTensor x = ten(DTRT_F32, v, 2, 2, 3), o = ten(DTRT_F32, y, 2, 4, 3);
  refuse(dtrt_k_broadcast, &x, 1, &o, NULL, "f32[2,3] does not broadcast to f32[4,3]");
  o = ten(DTRT_F32, y, 1, 6);
  refuse(dtrt_k_broadcast, &x, 1, &o, NULL, "input rank 2 exceeds output rank 1");
}

/* ---- convolution and pooling ---- */

typedef struct ConvCase {
  int n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} ConvCase;

static int conv_out(int in, int k, int s, int p, int d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

static DtAttrs conv_attrs(const ConvCase *q, int extra0, int extra1, bool extra) {
  DtAttrs a = ints(7, q->sh, q->sw, q->ph, q->pw, q->dh, q->dw, q->groups);
  if (extra)
    a.i[a.ni++] = extra0, a.i[a.ni++] = extra1;
  return a;
}

/* The convolution written out: y, and for the adjoint dy the derivatives
 * dx and dw by the chain rule, one product at a time; abs, when not NULL,
 * the same sums of the products' magnitudes, [y, dx, dw] one after the
 * other. */
static void conv_ref(const ConvCase *q, const float *x, const float *w, const float *dy, double *y,
                     double *dx, double *dw, double *abs) {
  int ho = conv_out(q->h, q->kh, q->sh, q->ph, q->dh), wo = conv_out(q->w, q->kw, q->sw, q->pw, q->dw);
  int cg = q->c / q->groups, og = q->o / q->groups;
  int64_t ny = (int64_t)q->n * q->o * ho * wo, nx = (int64_t)q->n * q->c * q->h * q->w;
  for (int n = 0; n < q->n; n++)
    for (int o = 0; o < q->o; o++)
      for (int i = 0; i < ho; i++)
        for (int j = 0; j < wo; j++) {
          int yi = ((n * q->o + o) * ho + i) * wo + j;
          double acc = 0;
          for (int c = 0; c < cg; c++)
            for (int a = 0; a < q->kh; a++)
              for (int b = 0; b < q->kw; b++) {
                int ih = i * q->sh - q->ph + a * q->dh, iw = j * q->sw - q->pw + b * q->dw;
                if (ih < 0 || ih >= q->h || iw < 0 || iw >= q->w)
                  continue;
                int xi = ((n * q->c + o / og * cg + c) * q->h + ih) * q->w + iw;
                int wi = ((o * cg + c) * q->kh + a) * q->kw + b;
                acc += (double)x[xi] * w[wi];
                dx[xi] += (double)dy[yi] * w[wi];
                dw[wi] += (double)dy[yi] * x[xi];
                if (abs) {
                  abs[yi] += fabs((double)x[xi] * w[wi]);
                  abs[ny + xi] += fabs((double)dy[yi] * w[wi]);
                  abs[ny + nx + wi] += fabs((double)dy[yi] * x[xi]);
                }
              }
          y[yi] = acc;
        }
}

static void near_d(const float *got, const double *want, int64_t n, double tol) {
  for (int64_t k = 0; k < n; k++)
    if (!(got[k] == want[k] || fabs(got[k] - want[k]) <= tol * (1 + fabs(want[k]))))
      fail_msg("element %lld: got %.9g, want %.9g", (long long)k, got[k], want[k]);
}

static void conv_case(const ConvCase *q) {
  int ho = conv_out(q->h, q->kh, q->sh, q->ph, q->dh), wo = conv_out(q->w, q->kw, q->sw, q->pw, q->dw);
  int cg = q->c / q->groups;
  DtTensor x = ten(DTRT_F32, NULL, 4, q->n, q->c, q->h, q->w);
  DtTensor w = ten(DTRT_F32, NULL, 4, q->o, cg, q->kh, q->kw);
  DtTensor y = ten(DTRT_F32, NULL, 4, q->n, q->o, ho, wo);
  int64_t nx = numel(&x), nw = numel(&w), ny = numel(&y);
  x.data = randv(nx);
  w.data = randv(nw);
  float *dy = randv(ny), *got = malloc(sizeof(float) * (size_t)(nx + nw + ny));
  double *ry = calloc((size_t)ny, sizeof(double)), *rdx = calloc((size_t)nx, sizeof(double));
  double *rdw = calloc((size_t)nw, sizeof(double));
  conv_ref(q, x.data, w.data, dy, ry, rdx, rdw, NULL);

  DtAttrs a = conv_attrs(q, 0, 0, false);
  DtTensor in[2] = {x, w}, out = like(&y, got);
  run(dtrt_k_conv2d, in, 2, &out, &a);
  near_d(got, ry, ny, 1e-5);

  a = conv_attrs(q, q->h, q->w, true);
  in[0] = w, in[1] = like(&y, dy), out = like(&x, got);
  memset(got, 0x7f, sizeof(float) * (size_t)nx);   /* the kernel must clear it */
  run(dtrt_k_conv2d_grad_input, in, 2, &out, &a);
  near_d(got, rdx, nx, 1e-5);

  a = conv_attrs(q, q->kh, q->kw, true);
  in[0] = x, out = like(&w, got);
  run(dtrt_k_conv2d_grad_weight, in, 2, &out, &a);
  near_d(got, rdw, nw, 1e-4);
  free(x.data), free(w.data), free(dy), free(got), free(ry), free(rdx), free(rdw);
}

static void test_conv2d(void **state) {
  (void)state;
  static const ConvCase cases[] = {
      /* n  c  h  w  o kh kw sh sw ph pw dh dw groups */
      {2, 3, 5, 6, 4, 3, 2, 1, 1, 0, 0, 1, 1, 1},      /* odd sizes */
      {3, 2, 9, 7, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1},      /* stride 2, padding */
      {2, 3, 11, 10, 2, 3, 2, 1, 2, 2, 0, 2, 2, 1},    /* dilation 2 */
      {2, 4, 7, 8, 6, 3, 3, 2, 1, 1, 2, 1, 2, 2},      /* groups 2 */
      {1, 6, 5, 5, 3, 1, 1, 1, 1, 0, 0, 1, 1, 3},      /* 1x1, groups 3 */
      {1, 1, 3, 3, 2, 5, 5, 1, 1, 1, 1, 1, 1, 1},      /* kernel = padded input */
      {130, 1, 64, 64, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1},  /* the batch in two chunks */
  };
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++)
    conv_case(&cases[k]);
}

/* got within n u sum|terms| of want, the bound of a float sum of n terms
 * (u = 2^-24) in any order, plus the float rounding of the result. */
static void near_sum(const float *got, const double *want, const double *abs, int64_t count,
                     int64_t n) {
  for (int64_t k = 0; k < count; k++) {
    double tol = (double)n * 0x1p-24 * abs[k] + 0x1p-24 * fabs(want[k]);
    if (!(fabs(got[k] - want[k]) <= tol))
      fail_msg("element %lld: got %.9g, want %.9g (tolerance %.3g)", (long long)k, got[k],
               want[k], tol);
  }
}

/* Shapes the direct kernels of kernels_conv.c take on AVX-512 (elsewhere
 * the im2col products), with their edges: tiles of 1 to 4 vectors of output
 * channels, a last vector or block in part, rows of more than one tile and
 * less than one, stride 2, dilation, groups, 1 x 1 kernels, a weight
 * gradient's last channel tile overlapping the one before; and the shapes
 * they leave to the products (stride 3, padding past the kernel, a kernel
 * not square). Against the reference loop, and the same bits on a context
 * of one thread. */
static void test_conv2d_direct(void **state) {
  (void)state;
  static const ConvCase cases[] = {
      /* n  c  h  w   o kh kw sh sw ph pw dh dw groups */
      {3, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* ResNet's layer1 */
      {2, 1, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* its stem: one channel */
      {2, 16, 30, 33, 32, 3, 3, 2, 2, 1, 1, 1, 1, 1},   /* stride 2, a row of 1.2 tiles */
      {2, 32, 14, 14, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* 3 vectors of 9 pixels */
      {2, 64, 7, 7, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1},     /* a block of 4, one of 1 */
      {3, 16, 13, 11, 20, 1, 1, 2, 2, 0, 0, 1, 1, 1},   /* 1x1 stride 2, 16 + 4 outputs */
      {2, 6, 9, 9, 17, 1, 1, 1, 1, 0, 0, 1, 1, 1},      /* 1x1 on 6 channels: 4, then 2..5 */
      {2, 2, 10, 9, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},     /* 2 channels: one at a time */
      {2, 7, 12, 10, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1},    /* 7 channels: 3, 3, then 4..6 */
      {2, 8, 12, 12, 40, 3, 3, 1, 1, 1, 1, 1, 1, 2},    /* groups 2 of 20 outputs */
      {2, 4, 13, 12, 5, 3, 3, 1, 1, 2, 2, 2, 2, 1},     /* dilation 2 */
      {1, 3, 9, 40, 16, 3, 5, 1, 1, 1, 2, 1, 1, 1},     /* rows of 40, kernel 3x5 */
      {2, 3, 8, 8, 4, 3, 3, 1, 1, 3, 3, 1, 1, 1},       /* padding 3: dx by the products */
      {2, 4, 11, 11, 16, 3, 3, 3, 3, 1, 1, 1, 1, 1},    /* stride 3: by the products */
  };
  setenv("DTRT_NUM_THREADS", "1", 1); /* read when the context makes its pool */
  DtrtCtx *one = dtrt_ctx_new();
  unsetenv("DTRT_NUM_THREADS");
  assert_non_null(one);
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    const ConvCase *q = &cases[k];
    int ho = conv_out(q->h, q->kh, q->sh, q->ph, q->dh), wo = conv_out(q->w, q->kw, q->sw, q->pw, q->dw);
    int cg = q->c / q->groups, og = q->o / q->groups;
    DtTensor x = ten(DTRT_F32, NULL, 4, q->n, q->c, q->h, q->w);
    DtTensor w = ten(DTRT_F32, NULL, 4, q->o, cg, q->kh, q->kw);
    DtTensor y = ten(DTRT_F32, NULL, 4, q->n, q->o, ho, wo);
    int64_t nx = numel(&x), nw = numel(&w), ny = numel(&y);
    x.data = randv(nx);
    w.data = randv(nw);
    float *dy = randv(ny), *got = malloc(sizeof(float) * (size_t)(nx + nw + ny));
    float *again = malloc(sizeof(float) * (size_t)(nx + nw + ny));
    double *ref = calloc((size_t)(2 * (nx + nw + ny)), sizeof(double)), *abs = ref + nx + nw + ny;
    conv_ref(q, x.data, w.data, dy, ref, ref + ny, ref + ny + nx, abs);
    /* the three kernels: inputs, output, attributes' extras, sum length */
    struct {
      Kern k;
      DtTensor in0, in1, out;
      int e0, e1;
      int64_t len, off, count;
    } kinds[] = {
        {dtrt_k_conv2d, x, w, y, 0, 0, (int64_t)cg * q->kh * q->kw, 0, ny},
        {dtrt_k_conv2d_grad_input, w, like(&y, dy), x, q->h, q->w, (int64_t)og * q->kh * q->kw, ny, nx},
        {dtrt_k_conv2d_grad_weight, x, like(&y, dy), w, q->kh, q->kw, (int64_t)q->n * ho * wo, ny + nx, nw},
    };
    for (int j = 0; j < 3; j++) {
      DtAttrs a = conv_attrs(q, kinds[j].e0, kinds[j].e1, j > 0);
      DtTensor in[2] = {kinds[j].in0, kinds[j].in1}, out = like(&kinds[j].out, got);
      memset(got, 0x7f, sizeof(float) * (size_t)kinds[j].count);   /* every element written */
      run(kinds[j].k, in, 2, &out, &a);
      near_sum(got, ref + kinds[j].off, abs + kinds[j].off, kinds[j].count, kinds[j].len);
      out.data = again;
      assert_int_equal(kinds[j].k(one, in, 2, &out, &a), DT_OK);
      if (memcmp(got, again, sizeof(float) * (size_t)kinds[j].count))
        fail_msg("case %d, kernel %d: other bits on one thread", k, j);
    }
    free(x.data), free(w.data), free(dy), free(got), free(again), free(ref);
  }
  dtrt_ctx_free(one);
}

static void test_conv2d_refuse(void **state) {
  (void)state;
  float v[4 * 3 * 5 * 5] = {0}, wv[2 * 3 * 3 * 3] = {0}, o[400];
  DtTensor in[2] = {ten(DTRT_F32, v, 4, 4, 3, 5, 5), ten(DTRT_F32, wv, 4, 2, 3, 3, 3)};
  DtTensor out = ten(DTRT_F32, o, 4, 4, 2, 3, 3);
  DtAttrs a = ints(7, 1, 1, 0, 0, 1, 1, 1);
  run(dtrt_k_conv2d, in, 2, &out, &a);
  DtAttrs bad = ints(7, 1, 1, 0, 0, 1, 1, 2);
  refuse(dtrt_k_conv2d, in, 2, &out, &bad, "groups 2 does not fit 3 input channels");
  bad = ints(7, 0, 1, 0, 0, 1, 1, 1);
  refuse(dtrt_k_conv2d, in, 2, &out, &bad, "stride [0, 1] is out of range");
  bad = ints(7, 1, 1, 0, 0, 3, 1, 1);
  refuse(dtrt_k_conv2d, in, 2, &out, &bad, "is larger than the padded input [5, 5]");
  bad = ints(6, 1, 1, 0, 0, 1, 1);
  refuse(dtrt_k_conv2d, in, 2, &out, &bad, "expected 7 int attributes");
  DtTensor wrong = ten(DTRT_F32, o, 4, 4, 2, 3, 4);
  refuse(dtrt_k_conv2d, in, 2, &wrong, &a, "output is f32[4,2,3,4], expected f32[4,2,3,3]");
  in[0] = ten(DTRT_F32, v, 3, 12, 5, 5);
  refuse(dtrt_k_conv2d, in, 2, &out, &a, "input must be f32[N,C,H,W], got f32[12,5,5]");
  in[0] = ten(DTRT_F32, v, 4, 4, 3, 5, 5);
  DtTensor dy = ten(DTRT_F32, o, 4, 4, 2, 3, 3);
  DtTensor gin[2] = {in[1], dy}, dx = in[0];
  dx.data = v;
  DtAttrs ga = ints(9, 1, 1, 0, 0, 1, 1, 1, 6, 5);
  refuse(dtrt_k_conv2d_grad_input, gin, 2, &dx, &ga, "adjoint is f32[4,2,3,3], expected f32[4,2,4,3]");
  ga = ints(9, 1, 1, 0, 0, 1, 1, 1, 7, 7);
  refuse(dtrt_k_conv2d_grad_weight, (DtTensor[]){in[0], dy}, 2, &in[1], &ga,
         "the kernel [7, 7] (dilation [1, 1]) is larger than the padded input [5, 5]");
}

typedef struct PoolCase {
  int n, c, h, w, kh, kw, sh, sw, ph, pw;
  int ceil, dh, dw, divisor, with_pad; /* dh, dw 0: 1 and max_pool2d's attributes without them */
} PoolCase;

/* One output length as PyTorch defines it: the division rounded down, or up
 * with ceil_mode, less a last window that would start in the right padding. */
static int pool_len(int in, int k, int s, int p, int d, int cm) {
  double q = (double)(in + 2 * p - d * (k - 1) - 1) / s;
  int n = (int)(cm ? ceil(q) : floor(q)) + 1;
  return cm && (n - 1) * s >= in + p ? n - 1 : n;
}

/* max_pool2d written out, [ho, wo] its result's size, with its derivative
 * for the adjoint dy: the first maximum of the dilated kernel's places
 * inside x; a window of padding only gives -inf and no derivative. */
static void max_ref(const PoolCase *q, int ho, int wo, const float *x, const float *dy, double *y,
                    double *dx) {
  int dh = q->dh ? q->dh : 1, dw = q->dw ? q->dw : 1;
  for (int p = 0; p < q->n * q->c; p++)
    for (int i = 0; i < ho; i++)
      for (int j = 0; j < wo; j++) {
        int yi = (p * ho + i) * wo + j, best = -1;
        for (int a = 0; a < q->kh; a++)
          for (int b = 0; b < q->kw; b++) {
            int ih = i * q->sh - q->ph + a * dh, iw = j * q->sw - q->pw + b * dw;
            if (ih < 0 || ih >= q->h || iw < 0 || iw >= q->w)
              continue;
            int xi = (p * q->h + ih) * q->w + iw;
            if (best < 0 || x[xi] > x[best])
              best = xi;
          }
        y[yi] = best < 0 ? -INFINITY : x[best];
        if (best >= 0)
          dx[best] += dy[yi];
      }
}

/* avg_pool2d written out, with its derivative: the sum of the x under the
 * kernel over divisor_override, or the count of the window's places inside
 * the padded input (count_include_pad), or of those inside x. */
static void avg_ref(const PoolCase *q, int ho, int wo, const float *x, const float *dy, double *y,
                    double *dx) {
  for (int p = 0; p < q->n * q->c; p++)
    for (int i = 0; i < ho; i++)
      for (int j = 0; j < wo; j++) {
        int yi = (p * ho + i) * wo + j, places = 0, inside = 0;
        double sum = 0;
        for (int a = 0; a < q->kh; a++)
          for (int b = 0; b < q->kw; b++) {
            int ih = i * q->sh - q->ph + a, iw = j * q->sw - q->pw + b;
            places += ih < q->h + q->ph && iw < q->w + q->pw;
            if (ih < 0 || ih >= q->h || iw < 0 || iw >= q->w)
              continue;
            inside++;
            sum += x[(p * q->h + ih) * q->w + iw];
          }
        double div = q->divisor ? q->divisor : q->with_pad ? places : inside;
        y[yi] = sum / div;
        for (int a = 0; a < q->kh; a++)
          for (int b = 0; b < q->kw; b++) {
            int ih = i * q->sh - q->ph + a, iw = j * q->sw - q->pw + b;
            if (ih >= 0 && ih < q->h && iw >= 0 && iw < q->w)
              dx[(p * q->h + ih) * q->w + iw] += dy[yi] / div;
          }
      }
}

/* The kernels against max_ref or avg_ref: forward and derivative. */
static void pool_check(const PoolCase *q, bool max) {
  int dh = max && q->dh ? q->dh : 1, dw = max && q->dw ? q->dw : 1;
  int ho = pool_len(q->h, q->kh, q->sh, q->ph, dh, q->ceil),
      wo = pool_len(q->w, q->kw, q->sw, q->pw, dw, q->ceil);
  DtTensor x = ten(DTRT_F32, NULL, 4, q->n, q->c, q->h, q->w);
  DtTensor y = ten(DTRT_F32, NULL, 4, q->n, q->c, ho, wo);
  int64_t nx = numel(&x), ny = numel(&y);
  x.data = randv(nx);
  float *dy = randv(ny), *got = malloc(sizeof(float) * (size_t)(nx > ny ? nx : ny));
  double *ry = calloc((size_t)ny, sizeof(double)), *rdx = calloc((size_t)nx, sizeof(double));
  (max ? max_ref : avg_ref)(q, ho, wo, x.data, dy, ry, rdx);
  DtAttrs a = ints(9, q->kh, q->kw, q->sh, q->sw, q->ph, q->pw, q->ceil, q->dh, q->dw);
  a.ni = q->dh ? 9 : q->ceil ? 7 : 6;
  if (!max)
    a = ints(9, q->kh, q->kw, q->sh, q->sw, q->ph, q->pw, q->ceil, q->divisor, q->with_pad);
  DtTensor out = like(&y, got), in[2] = {x, like(&y, dy)};
  run(max ? dtrt_k_max_pool2d : dtrt_k_avg_pool2d, &x, 1, &out, &a);
  near_d(got, ry, ny, max ? 0 : 1e-6);
  out = like(&x, got);
  if (max) {
    run(dtrt_k_max_pool2d_grad, in, 2, &out, &a);
  } else {
    DtAttrs ag = ints(11, q->kh, q->kw, q->sh, q->sw, q->ph, q->pw, q->h, q->w, q->ceil, q->divisor,
                      q->with_pad);
    run(dtrt_k_avg_pool2d_grad, &in[1], 1, &out, &ag);
  }
  near_d(got, rdx, nx, 1e-6);
  free(x.data), free(dy), free(got), free(ry), free(rdx);
}

static void test_pool2d(void **state) {
  (void)state;
  static const PoolCase cases[] = {
      /* n  c  h  w kh kw sh sw ph pw ceil dh dw div pad */
      {2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1},   /* odd sizes: the last row, column out */
      {2, 2, 5, 6, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 1},   /* stride 2, padding */
      {1, 3, 6, 7, 3, 2, 1, 2, 1, 1, 0, 0, 0, 0, 1},   /* overlapping windows */
      {3, 1, 4, 4, 4, 4, 4, 4, 2, 2, 0, 0, 0, 0, 1},   /* windows mostly padding */
      {2, 3, 7, 9, 2, 2, 2, 2, 0, 0, 1, 0, 0, 0, 1},   /* ceil_mode: the last windows clipped */
      {1, 2, 6, 5, 3, 2, 2, 3, 1, 1, 1, 0, 0, 0, 1},   /* ceil_mode: a window past the padded
                                                          input; one dropped (w) */
      {1, 2, 6, 5, 3, 2, 2, 3, 1, 1, 1, 0, 0, 0, 0},   /* the same, count_include_pad false */
      {2, 1, 3, 3, 4, 4, 2, 2, 0, 0, 1, 1, 1, 0, 1},   /* ceil_mode: a kernel past the input */
      {2, 2, 9, 8, 3, 3, 1, 2, 1, 1, 0, 2, 2, 0, 1},   /* dilation 2 */
      {1, 2, 11, 10, 3, 2, 2, 1, 1, 1, 1, 2, 3, 0, 1}, /* dilation [2, 3], ceil_mode */
      {1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 0, 3, 3, 0, 1},   /* dilation 3: windows of padding only */
      {2, 2, 7, 6, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 0},   /* count_include_pad false */
      {2, 2, 7, 6, 3, 2, 2, 2, 1, 1, 1, 0, 0, 5, 1},   /* divisor_override 5, ceil_mode */
  };
  for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
    pool_check(&cases[k], true);
    pool_check(&cases[k], false);
  }
  float v[2 * 3 * 4 * 4] = {0}, o[96];
  DtTensor x = ten(DTRT_F32, v, 4, 2, 3, 4, 4), y = ten(DTRT_F32, o, 4, 2, 3, 2, 2);
  DtAttrs bad = ints(6, 2, 2, 2, 2, 2, 0);
  refuse(dtrt_k_max_pool2d, &x, 1, &y, &bad, "padding [2, 0] is more than half the kernel");
  bad = ints(6, 5, 5, 1, 1, 0, 0);
  refuse(dtrt_k_avg_pool2d, &x, 1, &y, &bad, "is larger than the padded input [4, 4]");
  bad = ints(7, 6, 6, 2, 2, 0, 0, 1);
  refuse(dtrt_k_avg_pool2d, &x, 1, &y, &bad, "is larger than the padded input [4, 4]");
  bad = ints(6, 2, 2, 2, 2, 0, 0);
  refuse(dtrt_k_avg_pool2d_grad, &y, 1, &x, &bad, "expected 8 int attributes");
  bad = ints(8, 2, 2, 2, 2, 0, 0, 0, 1);
  refuse(dtrt_k_max_pool2d, &x, 1, &y, &bad, "expected 6 int attributes");
  bad = ints(9, 2, 2, 2, 2, 0, 0, 0, 0, 1);
  refuse(dtrt_k_max_pool2d, &x, 1, &y, &bad, "dilation [0, 1] is out of range");
  bad = ints(7, 2, 2, 2, 2, 0, 0, 2);
  refuse(dtrt_k_max_pool2d, &x, 1, &y, &bad, "ceil_mode 2 and count_include_pad 1 must be 0 or 1");
  bad = ints(8, 2, 2, 2, 2, 0, 0, 0, -3);
  refuse(dtrt_k_avg_pool2d, &x, 1, &y, &bad, "divisor_override -3 is out of range");
  DtTensor x3 = ten(DTRT_F32, v, 3, 6, 4, 4);
  bad = ints(6, 2, 2, 2, 2, 0, 0);
  refuse(dtrt_k_max_pool2d, &x3, 1, &y, &bad, "input must be f32[N,C,H,W], got f32[6,4,4]");
}

/* Windows of [2, 2] with ties and NaNs: the value is the first maximum or,
 * where there are NaNs, NaN, and the derivative goes to the first maximum
 * or to the last NaN, as PyTorch's (max_pool2d's fast path for this kernel,
 * four windows at a time and the rest one by one, against the rule). */
static void test_max_pool_ties(void **state) {
  (void)state;
  enum { NW = 9, W = 2 * NW };
  /* each window [a b; c d] and the place that wins, 0 to 3 */
  static const struct {
    float v[4];
    int win;
  } win[NW] = {
      {{1, 2, 3, 4}, 3},         {{5, 5, 5, 1}, 0},         {{7, NAN, 7, 7}, 1},
      {{NAN, 1, 3, NAN}, 3},     {{9, 1, 1, 1}, 0},         {{1, 9, 1, 9}, 1},
      {{-INFINITY, -INFINITY, -INFINITY, -INFINITY}, 0},    {{1, 1, 9, 1}, 2},
      {{NAN, NAN, 1, 1}, 1},
  };
  float v[2 * W], o[NW], dx[2 * W], dy[NW], want[2 * W] = {0};
  for (int k = 0; k < NW; k++) {
    for (int q = 0; q < 4; q++)
      v[q / 2 * W + 2 * k + q % 2] = win[k].v[q];
    dy[k] = (float)(10 * (k + 1));
    want[win[k].win / 2 * W + 2 * k + win[k].win % 2] = dy[k];
  }
  DtTensor x = ten(DTRT_F32, v, 4, 1, 1, 2, W), y = ten(DTRT_F32, o, 4, 1, 1, 1, NW);
  DtAttrs a = ints(6, 2, 2, 2, 2, 0, 0);
  run(dtrt_k_max_pool2d, &x, 1, &y, &a);
  for (int k = 0; k < NW; k++) {
    float best = win[k].v[win[k].win];
    if (isnan(best) ? !isnan(o[k]) : o[k] != best)
      fail_msg("window %d: %g, expected %g", k, o[k], best);
  }
  DtTensor in[2] = {x, ten(DTRT_F32, dy, 4, 1, 1, 1, NW)}, d = ten(DTRT_F32, dx, 4, 1, 1, 2, W);
  run(dtrt_k_max_pool2d_grad, in, 2, &d, &a);
  assert_memory_equal(dx, want, sizeof want);
}

/* ---- rows on the thread pool ---- */

/* k on a context of one thread gives the same bits as it gave on ctx into
 * out. */
static void same_on_one_thread(DtrtCtx *one, Kern k, const DtTensor *in, int nin,
                               const DtTensor *out, const DtAttrs *a) {
  DtTensor o = *out;
  size_t bytes = (size_t)numel(out) * sizeof(float);
  o.data = malloc(bytes);
  if (k(one, in, nin, &o, a))
    fail_msg("kernel failed on one thread: %s", dtrt_errmsg(one));
  assert_memory_equal(o.data, out->data, bytes);
  free(o.data);
}

/* The derivatives of softmax (lg 0) and log_softmax (lg 1) along ax, from y
 * and dy, in double. */
static void softmax_grad_ref(const DtTensor *y, const float *dy, int ax, int lg, float *dx) {
  int64_t outer = 1, n = y->dim[ax], inner = 1;
  for (int d = 0; d < ax; d++)
    outer *= y->dim[d];
  for (int d = ax + 1; d < y->rank; d++)
    inner *= y->dim[d];
  const float *v = y->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double s = 0;
      for (int64_t j = 0; j < n; j++) {
        int64_t at = (o * n + j) * inner + i;
        s += lg ? dy[at] : (double)dy[at] * v[at];
      }
      for (int64_t j = 0; j < n; j++) {
        int64_t at = (o * n + j) * inner + i;
        dx[at] = (float)(lg ? dy[at] - exp(v[at]) * s : v[at] * (dy[at] - s));
      }
    }
}

/* normalize (dy NULL) or normalize_grad over rows of d, in double. */
static void norm_ref(const float *x, const float *dy, int64_t rows, int64_t d, double eps,
                     float *y) {
  for (int64_t r = 0; r < rows; r++) {
    const float *v = x + r * d;
    double m = 0, var = 0, mdy = 0, mdyx = 0;
    for (int64_t j = 0; j < d; j++)
      m += v[j] / (double)d;
    for (int64_t j = 0; j < d; j++)
      var += (v[j] - m) * (v[j] - m) / (double)d;
    double inv = 1 / sqrt(var + eps);
    for (int64_t j = 0; dy && j < d; j++) {
      mdy += dy[r * d + j] / (double)d;
      mdyx += dy[r * d + j] * (v[j] - m) * inv / (double)d;
    }
    for (int64_t j = 0; j < d; j++)
      y[r * d + j] =
          (float)(dy ? inv * (dy[r * d + j] - mdy - (v[j] - m) * inv * mdyx) : (v[j] - m) * inv);
  }
}

/* Kernels whose rows run on the thread pool once they touch 65536 elements
 * or more (kernels_nn.c), on such sizes with rows of lengths that are not
 * multiples of their 8 lanes: against reference loops, and the same bits on
 * a context of one thread. */
static void test_rows_parallel(void **state) {
  (void)state;
  setenv("DTRT_NUM_THREADS", "1", 1); /* read when the context makes its pool */
  DtrtCtx *one = dtrt_ctx_new();
  unsetenv("DTRT_NUM_THREADS");
  assert_non_null(one);

  /* the softmax family over the last axis and over a middle one (rows at a stride) */
  DtTensor x = ten(DTRT_F32, NULL, 3, 3, 181, 151); /* the largest of the cases below */
  int64_t n = numel(&x);
  x.data = randv(n);
  for (int64_t k = 0; k < n; k++)
    ((float *)x.data)[k] *= 5;
  float *y = malloc((size_t)n * 4), *want = malloc((size_t)n * 4), *dy = randv(n);
  float *dx = malloc((size_t)n * 4);
  for (int lg = 0; lg < 2; lg++)
    for (int ax = 1; ax < 3; ax++) {
      DtAttrs a = ints(1, ax);
      DtTensor yt = like(&x, y), dxt = like(&x, dx);
      Kern f = lg ? dtrt_k_log_softmax : dtrt_k_softmax;
      Kern g = lg ? dtrt_k_log_softmax_grad : dtrt_k_softmax_grad;
      run(f, &x, 1, &yt, &a);
      softmax_ref(&x, ax, lg, want);
      near(y, want, n, 1e-5);
      same_on_one_thread(one, f, &x, 1, &yt, &a);
      DtTensor in[2] = {yt, like(&x, dy)};
      run(g, in, 2, &dxt, &a);
      softmax_grad_ref(&yt, dy, ax, lg, want);
      near(dx, want, n, 1e-5);
      same_on_one_thread(one, g, in, 2, &dxt, &a);
    }

  /* normalize and its derivative over rows of 131 */
  DtTensor xn = ten(DTRT_F32, x.data, 2, 517, 131), yn = like(&xn, y);
  DtAttrs eps = {.nf = 1, .f = {1e-5}};
  int64_t nn = numel(&xn);
  run(dtrt_k_normalize, &xn, 1, &yn, &eps);
  norm_ref(x.data, NULL, 517, 131, 1e-5, want);
  near(y, want, nn, 1e-5);
  same_on_one_thread(one, dtrt_k_normalize, &xn, 1, &yn, &eps);
  DtTensor nin[2] = {xn, like(&xn, dy)};
  run(dtrt_k_normalize_grad, nin, 2, &yn, &eps);
  norm_ref(x.data, dy, 517, 131, 1e-5, want);
  near(y, want, nn, 1e-5);
  same_on_one_thread(one, dtrt_k_normalize_grad, nin, 2, &yn, &eps);

  /* cross entropy and its derivative over 300 rows of 259 classes */
  enum { N = 300, C = 259 };
  int32_t lab[N];
  for (int i = 0; i < N; i++)
    lab[i] = (i * 97 + 13) % C;
  float loss, dl = 1.5f;
  DtTensor cin[3] = {ten(DTRT_F32, x.data, 2, N, C), ten(DTRT_I32, lab, 1, N),
                     ten(DTRT_F32, &dl, 0)};
  DtTensor lo = ten(DTRT_F32, &loss, 0), cdx = ten(DTRT_F32, dx, 2, N, C);
  const float *v = x.data;
  double wl = 0;
  for (int i = 0; i < N; i++) {
    double m = -INFINITY, s = 0;
    for (int j = 0; j < C; j++)
      m = fmax(m, v[i * C + j]);
    for (int j = 0; j < C; j++)
      s += exp(v[i * C + j] - m);
    wl += m + log(s) - v[i * C + lab[i]];
    for (int j = 0; j < C; j++) /* the derivative times N / dloss */
      want[i * C + j] = (float)(exp(v[i * C + j] - m) / s - (j == lab[i]));
  }
  run(dtrt_k_cross_entropy, cin, 2, &lo, NULL);
  if (!(fabs(loss - wl / N) < 1e-5 * (1 + wl / N)))
    fail_msg("loss %.9g, want %.9g", loss, wl / N);
  same_on_one_thread(one, dtrt_k_cross_entropy, cin, 2, &lo, NULL);
  run(dtrt_k_cross_entropy_grad, cin, 3, &cdx, NULL);
  same_on_one_thread(one, dtrt_k_cross_entropy_grad, cin, 3, &cdx, NULL);
  for (int k = 0; k < N * C; k++)
    dx[k] *= N / dl;
  near(dx, want, N * C, 1e-6);

  /* the causal mask over [5, 120, 130] */
  DtTensor xm = ten(DTRT_F32, x.data, 3, 5, 120, 130), ym = like(&xm, y);
  DtAttrs fill = {.nf = 1, .f = {-2}};
  run(dtrt_k_causal_mask, &xm, 1, &ym, &fill);
  for (int64_t k = 0; k < numel(&xm); k++)
    assert_true(y[k] == (k % 130 > k / 130 % 120 ? -2 : v[k]));
  same_on_one_thread(one, dtrt_k_causal_mask, &xm, 1, &ym, &fill);
  free(want);
  free(dy);
  free(dx);

  /* dropout: each row of a [70, 1000] tensor equals that row dropped alone
   * (a block naming its place, 1000 elements: on the caller); a block of
   * [4, 150, 130] at [1, 5, 7] of a [6, 160, 140] tensor equals that block
   * of the whole's */
  DtTensor xd = ten(DTRT_F32, x.data, 2, 70, 1000), yd = like(&xd, y);
  DtAttrs pd = {.ni = 1, .i = {77}, .nf = 1, .f = {0.25}, .step = 5};
  run(dtrt_k_dropout, &xd, 1, &yd, &pd);
  same_on_one_thread(one, dtrt_k_dropout, &xd, 1, &yd, &pd);
  float r[1000];
  for (int i = 0; i < 70; i++) {
    DtTensor xr = ten(DTRT_F32, (float *)x.data + i * 1000, 2, 1, 1000), yr = like(&xr, r);
    DtAttrs pr = {.ni = 5, .i = {77, 70, 1000, i, 0}, .nf = 1, .f = {0.25}, .step = 5};
    run(dtrt_k_dropout, &xr, 1, &yr, &pr);
    assert_memory_equal(r, y + i * 1000, sizeof r);
  }
  enum { WA = 6, WB = 160, WC = 140, LA = 4, LB = 150, LC = 130, A0 = 1, B0 = 5, C0 = 7 };
  float *xw = randv(WA * WB * WC), *yw = malloc(WA * WB * WC * 4), *xb = malloc(LA * LB * LC * 4);
  DtTensor xwt = ten(DTRT_F32, xw, 3, WA, WB, WC), ywt = like(&xwt, yw);
  run(dtrt_k_dropout, &xwt, 1, &ywt, &pd);
  for (int i = 0; i < LA; i++)
    for (int j = 0; j < LB; j++)
      for (int k = 0; k < LC; k++)
        xb[(i * LB + j) * LC + k] = xw[((i + A0) * WB + j + B0) * WC + k + C0];
  DtTensor xbt = ten(DTRT_F32, xb, 3, LA, LB, LC), ybt = like(&xbt, y);
  DtAttrs pb = {.ni = 7, .i = {77, WA, WB, WC, A0, B0, C0}, .nf = 1, .f = {0.25}, .step = 5};
  run(dtrt_k_dropout, &xbt, 1, &ybt, &pb);
  for (int i = 0; i < LA; i++)
    for (int j = 0; j < LB; j++)
      for (int k = 0; k < LC; k++)
        assert_true(y[(i * LB + j) * LC + k] == yw[((i + A0) * WB + j + B0) * WC + k + C0]);
  same_on_one_thread(one, dtrt_k_dropout, &xbt, 1, &ybt, &pb);
  free(xw);
  free(yw);
  free(xb);
  free(y);
  free(x.data);
  dtrt_ctx_free(one);
}

/* A NaN in a row makes its softmax NaN, wherever it lies among the lanes or
 * in the tail; an entry of -inf (a masked one) gets 0. */
static void test_softmax_nan(void **state) {
  (void)state;
  enum { C = 13 };
  for (int at = 0; at < C; at++) {
    float x[2 * C], y[2 * C], want[2 * C];
    for (int j = 0; j < 2 * C; j++)
      x[j] = (float)(j % 5) - 2;
    x[at] = NAN;
    x[C + at] = -INFINITY;
    DtTensor xt = ten(DTRT_F32, x, 2, 2, C), yt = ten(DTRT_F32, y, 2, 2, C);
    run(dtrt_k_softmax, &xt, 1, &yt, NULL);
    for (int j = 0; j < C; j++)
      assert_true(isnan(y[j]));
    softmax_ref(&xt, 1, 0, want);
    near(y + C, want + C, C, 1e-6);
    assert_true(y[C + at] == 0);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_matmul, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_grad, setup, teardown),
      cmocka_unit_test_setup_teardown(test_softmax, setup, teardown),
      cmocka_unit_test_setup_teardown(test_softmax_bits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cross_entropy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cross_entropy_sum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bce_with_logits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_normalize, setup, teardown),
      cmocka_unit_test_setup_teardown(test_normalize_bits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_embedding, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dropout, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dropout_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_causal_mask, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reshape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_transpose, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slice_pad, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pad_value, setup, teardown),
      cmocka_unit_test_setup_teardown(test_copy_pads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_concat, setup, teardown),
      cmocka_unit_test_setup_teardown(test_broadcast, setup, teardown),
      cmocka_unit_test_setup_teardown(test_conv2d, setup, teardown),
      cmocka_unit_test_setup_teardown(test_conv2d_direct, setup, teardown),
      cmocka_unit_test_setup_teardown(test_conv2d_refuse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_pool2d, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_parallel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reduce_products, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sum_rows_bits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rows_parallel, setup, teardown),
      cmocka_unit_test_setup_teardown(test_softmax_nan, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_pool_ties, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
