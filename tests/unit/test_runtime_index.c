/* test_runtime_index.c: the kernels of torch's functions on indices and
 * integers (runtime/kernels_index.c, kernels_gather.c) against plain
 * reference loops written here, on tensors small and large enough to run on
 * several threads, and their refusals of bad indices. */
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

typedef DtStatus (*Kern)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

static DtTensor ten(int dtype, void *data, int rank, const int64_t *dim) {
  DtTensor t = {.data = data, .dtype = dtype, .rank = rank};
  memcpy(t.dim, dim, sizeof(int64_t) * (size_t)rank);
  return t;
}

static int64_t numel(const DtTensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++)
    n *= t->dim[k];
  return n;
}

static void run(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a) {
  if (k(ctx, in, nin, out, a))
    fail_msg("kernel failed: %s", dtrt_errmsg(ctx));
}

static void refuse(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a,
                   const char *want) {
  DtStatus s = k(ctx, in, nin, out, a);
  assert_int_equal(s, DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), want))
    fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), want);
}

/* The same bits from a context of one thread. */
static void same_on_one_thread(Kern k, const DtTensor *in, int nin, const DtTensor *out,
                               const DtAttrs *a) {
  setenv("DTRT_NUM_THREADS", "1", 1);
  DtrtCtx *one = dtrt_ctx_new();
  unsetenv("DTRT_NUM_THREADS");
  assert_non_null(one);
  DtTensor o = *out;
  size_t bytes = (size_t)numel(out) * 4;
  o.data = malloc(bytes);
  if (k(one, in, nin, &o, a))
    fail_msg("kernel failed on one thread: %s", dtrt_errmsg(one));
  assert_memory_equal(o.data, out->data, bytes);
  free(o.data);
  dtrt_ctx_free(one);
}

/* Coordinates c of element q of dims dim[0..r); its offset at dims w. */
static void coords(int64_t q, const int64_t *dim, int r, int64_t *c) {
  for (int d = r - 1; d >= 0; d--) {
    c[d] = q % dim[d];
    q /= dim[d];
  }
}
static int64_t offset(const int64_t *c, const int64_t *w, int r) {
  int64_t o = 0;
  for (int d = 0; d < r; d++)
    o = o * w[d] + c[d];
  return o;
}

/* ---- int_elem, to_f32 ---- */

/* a ** b by b multiplications, wrapping; of a negative b 1 / a^-b rounded
 * toward 0 as torch's: 1 and -1 themselves to that power, 0 otherwise. */
static int32_t ref_pow(int32_t a, int32_t b) {
  if (b < 0 && a != 1 && a != -1)
    return 0;
  uint64_t r = 1;
  for (int64_t k = 0; k < (b < 0 ? -(int64_t)b : b); k++)
    r = (r * (uint64_t)(int64_t)a) & 0xffffffffu;
  return (int32_t)(uint32_t)r;
}

static int32_t ref_int(int fn, int32_t a, int32_t b) {
  int64_t x = a, y = b;
  switch (fn) {
  case DT_INT_POW: return ref_pow(a, b);
  case DT_INT_ADD: return (int32_t)(uint32_t)(x + y);
  case DT_INT_SUB: return (int32_t)(uint32_t)(x - y);
  case DT_INT_MUL: return (int32_t)(uint32_t)(uint64_t)(x * y);
  case DT_INT_FLOORDIV: return (int32_t)(uint32_t)(int64_t)floor((double)x / (double)y);
  case DT_INT_MAX: return x > y ? a : b;
  case DT_INT_MIN: return x < y ? a : b;
  default: return (int32_t)(x - y * (int64_t)floor((double)x / (double)y));
  }
}

static float ref_cmp(int fn, int32_t a, int32_t b) {
  return fn == DT_INT_GT ? a > b : fn == DT_INT_GE ? a >= b : fn == DT_INT_EQ ? a == b : a != b;
}

/* a [R, C] against b [C], [R, 1] and the integer k on either side, for
 * every function, with values near the wrap-around among them. */
static void test_int_elem(void **state) {
  (void)state;
  enum { R = 300, C = 257 };
  int32_t *a = malloc(sizeof(int32_t) * R * C), b[C], bc[R], *y = malloc(sizeof(int32_t) * R * C);
  for (int k = 0; k < R * C; k++)
    a[k] = k % 5 == 0   ? INT32_MAX - k % 3
           : k % 7 == 0 ? INT32_MIN + k % 4
                        : (int32_t)(rt_next() % 2001) - 1000;
  for (int k = 0; k < C; k++) { /* divisors: never 0 */
    b[k] = k % 11 == 0 ? -1 : (int32_t)(rt_next() % 41) - 20;
    b[k] = b[k] ? b[k] : 3;
  }
  for (int k = 0; k < R; k++)
    bc[k] = k % 9 == 4 ? 5 : (int32_t)(k % 9) - 4;
  int64_t dim[2] = {R, C}, db[1] = {C}, dc[2] = {R, 1};
  DtTensor at = ten(DTRT_I32, a, 2, dim);
  for (int fn = 0; fn < DT_INT_COUNT; fn++) {
    bool cmp = dtrt_int_compares(fn);
    DtTensor yt = ten(cmp ? DTRT_F32 : DTRT_I32, y, 2, dim);
    for (int form = 0; form < 4; form++) {
      DtTensor in[2] = {at, form == 1 ? ten(DTRT_I32, bc, 2, dc) : ten(DTRT_I32, b, 1, db)};
      int32_t kv = fn == DT_INT_FLOORDIV || fn == DT_INT_REM ? -7 : fn == DT_INT_POW ? 37 : 12345;
      DtAttrs att = {.ni = form >= 2 ? 3 : 1, .i = {fn, kv, form == 3}};
      bool swap = form == 3;
      if (swap && (fn == DT_INT_FLOORDIV || fn == DT_INT_REM || fn == DT_INT_POW))
        continue; /* a can be 0; a as a power is up to 2^31 (test_int_pow) */
      run(dtrt_k_int_elem, in, form >= 2 ? 1 : 2, &yt, &att);
      for (int64_t q = 0; q < R * C; q++) {
        int32_t x = a[q], v = form == 0 ? b[q % C] : form == 1 ? bc[q / C] : kv;
        if (swap) {
          int32_t t = x;
          x = v, v = t;
        }
        if (cmp ? ((float *)y)[q] != ref_cmp(fn, x, v) : y[q] != ref_int(fn, x, v))
          fail_msg("fn %d form %d element %lld: %d and %d", fn, form, (long long)q, x, v);
      }
      same_on_one_thread(dtrt_k_int_elem, in, form >= 2 ? 1 : 2, &yt, &att);
    }
  }
  /* a zero divisor, in a tensor or as k */
  b[100] = 0;
  DtTensor in[2] = {at, ten(DTRT_I32, b, 1, db)}, yt = ten(DTRT_I32, y, 2, dim);
  DtAttrs fd = {.ni = 1, .i = {DT_INT_FLOORDIV}}, rk = {.ni = 2, .i = {DT_INT_REM, 0}};
  refuse(dtrt_k_int_elem, in, 2, &yt, &fd, "integer division by zero");
  refuse(dtrt_k_int_elem, in, 1, &yt, &rk, "integer division by zero");
  DtAttrs bad = {.ni = 1, .i = {DT_INT_COUNT}};
  refuse(dtrt_k_int_elem, in, 1, &yt, &bad, "unknown function");
  int64_t d3[1] = {3};
  DtTensor odd[2] = {at, ten(DTRT_I32, b, 1, d3)};
  DtAttrs add = {.ni = 1, .i = {DT_INT_ADD}};
  refuse(dtrt_k_int_elem, odd, 2, &yt, &add, "does not broadcast");

  /* to_f32 */
  float *f = malloc(sizeof(float) * R * C);
  DtTensor ft = ten(DTRT_F32, f, 2, dim);
  run(dtrt_k_to_f32, &at, 1, &ft, NULL);
  for (int64_t q = 0; q < R * C; q++)
    assert_true(f[q] == (float)a[q]);
  free(a), free(y), free(f);
}

/* pow against torch.pow of int32 tensors (torch 1.13, values printed by
 * it): powers 0, 1, past 2^31 (wrapping), up to 2^31 - 1, negative ones, and
 * an integer to tensor powers (swap). */
static void test_int_pow(void **state) {
  (void)state;
  static const struct {
    int32_t k;
    bool swap;
    int32_t x[6], want[6];
  } cases[] = {
      {3, false, {-3, -1, 0, 2, 5, 1}, {-27, -1, 0, 8, 125, 1}},
      {0, false, {0, INT32_MIN, -1, 7, 1, 2}, {1, 1, 1, 1, 1, 1}},
      {1, false, {INT32_MIN, 2, 0, -5, INT32_MAX, 1}, {INT32_MIN, 2, 0, -5, INT32_MAX, 1}},
      {2, false, {70000, -3, 46341, 65536, 1, 0}, {605032704, 9, -2147479015, 0, 1, 0}},
      {31, false, {2, -2, 1, -1, 0, 3}, {INT32_MIN, INT32_MIN, 1, -1, 0, 1264544299}},
      {40, false, {3, 2, -1, 1, 0, -3}, {689956897, 0, 1, 1, 0, 689956897}},
      {INT32_MAX, false, {3, -1, 5, 2, 7, 1}, {-1431655765, -1, -858993459, 0, -1227133513, 1}},
      {1000003, false, {3, -3, 12345, 0, 1, -1}, {1223452443, -1223452443, 1345751401, 0, 1, -1}},
      {-1, false, {2, 1, -1, 0, -2, 5}, {0, 1, -1, 0, 0, 0}},
      {-2, false, {2, 1, -1, 0, -2, 5}, {0, 1, 1, 0, 0, 0}},
      {3, true, {INT32_MAX, 1000003, 0, -5, 2, 1}, {-1431655765, 1223452443, 1, 0, 9, 3}},
      {2, true, {2, 1, -1, 0, -2, 5}, {4, 2, 0, 1, 0, 32}},
  };
  int64_t dim[1] = {6};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    int32_t x[6], y[6];
    memcpy(x, cases[c].x, sizeof x);
    DtTensor in = ten(DTRT_I32, x, 1, dim), out = ten(DTRT_I32, y, 1, dim);
    DtAttrs att = {.ni = 3, .i = {DT_INT_POW, cases[c].k, cases[c].swap}};
    run(dtrt_k_int_elem, &in, 1, &out, &att);
    for (int q = 0; q < 6; q++)
      if (y[q] != cases[c].want[q])
        fail_msg("case %zu element %d: %d, torch %d", c, q, y[q], cases[c].want[q]);
  }
}

/* ---- int_where ---- */

/* where(mask [R, 1] or [R, C], x [R, C] or [C], y [] or [R, C]) against a
 * plain loop; the masks hold 0, -0, 1, -2 and NaN (true, as not 0). */
static void test_int_where(void **state) {
  (void)state;
  enum { R = 300, C = 257 };
  float *m = malloc(sizeof(float) * R * C);
  int32_t *x = malloc(sizeof(int32_t) * R * C), *y = malloc(sizeof(int32_t) * R * C);
  int32_t *out = malloc(sizeof(int32_t) * R * C);
  static const float vals[] = {0.0f, -0.0f, 1.0f, -2.0f, NAN};
  for (int k = 0; k < R * C; k++) {
    m[k] = vals[rt_next() % 5];
    x[k] = (int32_t)rt_next();
    y[k] = (int32_t)rt_next();
  }
  int64_t full[2] = {R, C}, col[2] = {R, 1}, row[1] = {C};
  DtTensor ot = ten(DTRT_I32, out, 2, full);
  for (int form = 0; form < 3; form++) {
    DtTensor in[3] = {ten(DTRT_F32, m, 2, form == 1 ? col : full),
                      form == 2 ? ten(DTRT_I32, x, 1, row) : ten(DTRT_I32, x, 2, full),
                      form == 1 ? ten(DTRT_I32, y, 0, row) : ten(DTRT_I32, y, 2, full)};
    run(dtrt_k_int_where, in, 3, &ot, NULL);
    for (int64_t q = 0; q < R * C; q++) {
      float mv = form == 1 ? m[q / C] : m[q];
      int32_t xv = form == 2 ? x[q % C] : x[q], yv = form == 1 ? y[0] : y[q];
      if (out[q] != (mv != 0 ? xv : yv))
        fail_msg("form %d element %lld: mask %g, got %d", form, (long long)q, mv, out[q]);
    }
    same_on_one_thread(dtrt_k_int_where, in, 3, &ot, NULL);
  }
  /* each operand whole or [R, 1] (a stride of 1 or 0 along the last dim:
   * the kernel's eight inner loops) */
  for (int form = 0; form < 8; form++) {
    bool whole[3] = {form & 4, form & 2, form & 1};
    DtTensor in[3] = {ten(DTRT_F32, m, 2, whole[0] ? full : col),
                      ten(DTRT_I32, x, 2, whole[1] ? full : col),
                      ten(DTRT_I32, y, 2, whole[2] ? full : col)};
    run(dtrt_k_int_where, in, 3, &ot, NULL);
    for (int64_t q = 0; q < R * C; q++) {
      float mv = m[whole[0] ? q : q / C];
      int32_t xv = x[whole[1] ? q : q / C], yv = y[whole[2] ? q : q / C];
      if (out[q] != (mv != 0 ? xv : yv))
        fail_msg("strides %d element %lld: mask %g, got %d", form, (long long)q, mv, out[q]);
    }
  }
  DtTensor in[3] = {ten(DTRT_F32, m, 1, row), ten(DTRT_I32, x, 1, col), ten(DTRT_I32, y, 2, full)};
  refuse(dtrt_k_int_where, in, 3, &ot, NULL, "x i32[300] does not broadcast to i32[300,257]");
  free(m), free(x), free(y), free(out);
}

/* ---- gather, gather_grad ---- */

/* gather of x [xd] along axis with index [id] (id no longer than xd but along
 * axis; `one`: each row of index one value, as an expanded index);
 * gather_grad against the scatter-add in row-major order of dy, in float
 * (the same bits: the kernel adds in that order) and in double (sums of a
 * few terms: within one rounding each). */
static void gather_run(const int64_t *xd, const int64_t *id, int axis, bool one) {
  DtTensor xt = ten(DTRT_F32, NULL, 3, xd), it = ten(DTRT_I32, NULL, 3, id);
  int64_t nx = numel(&xt), ni = numel(&it);
  float *x = malloc(sizeof(float) * (size_t)nx), *y = malloc(sizeof(float) * (size_t)ni);
  float *dy = malloc(sizeof(float) * (size_t)ni), *dx = malloc(sizeof(float) * (size_t)nx);
  float *same = calloc((size_t)nx, sizeof(float));
  double *want = calloc((size_t)nx, sizeof(double));
  int32_t *ix = malloc(sizeof(int32_t) * (size_t)ni);
  for (int64_t k = 0; k < nx; k++)
    x[k] = frand();
  for (int64_t k = 0; k < ni; k++) {
    ix[k] = one && k % id[2] ? ix[k - 1] : (int32_t)(rt_next() % (uint64_t)xd[axis]);
    dy[k] = frand();
  }
  xt.data = x;
  it.data = ix;
  DtTensor in[2] = {xt, it}, yt = ten(DTRT_F32, y, 3, id);
  DtAttrs ax = {.ni = 1, .i = {axis - 3}}; /* counted from the end */
  run(dtrt_k_gather, in, 2, &yt, &ax);
  for (int64_t q = 0; q < ni; q++) {
    int64_t c[3];
    coords(q, id, 3, c);
    c[axis] = ix[q];
    int64_t o = offset(c, xd, 3);
    if (y[q] != x[o])
      fail_msg("gather axis %d element %lld: got %g, want %g", axis, (long long)q, y[q], x[o]);
    want[o] += dy[q];
    same[o] += dy[q];
  }
  same_on_one_thread(dtrt_k_gather, in, 2, &yt, &ax);
  DtTensor gin[2] = {it, ten(DTRT_F32, dy, 3, id)}, dxt = ten(DTRT_F32, dx, 3, xd);
  DtAttrs ga = {.ni = 4, .i = {axis, xd[0], xd[1], xd[2]}};
  for (int64_t o = 0; o < nx; o++)
    dx[o] = NAN; /* cleared by the kernel */
  run(dtrt_k_gather_grad, gin, 2, &dxt, &ga);
  for (int64_t o = 0; o < nx; o++)
    if (fabs(dx[o] - want[o]) > 1e-5 * (1 + fabs(want[o])) || dx[o] != same[o])
      fail_msg("gather_grad axis %d element %lld: got %.9g, want %.9g (%.9g in order)", axis,
               (long long)o, dx[o], want[o], same[o]);
  same_on_one_thread(dtrt_k_gather_grad, gin, 2, &dxt, &ga);
  /* an index out of range, either side */
  ix[ni / 2] = (int32_t)xd[axis];
  refuse(dtrt_k_gather, in, 2, &yt, &ax, "is out of bounds for dimension");
  refuse(dtrt_k_gather_grad, gin, 2, &dxt, &ga, "is out of bounds for dimension");
  ix[ni / 2] = -1;
  refuse(dtrt_k_gather, in, 2, &yt, &ax, "index -1 is out of bounds");
  refuse(dtrt_k_gather_grad, gin, 2, &dxt, &ga, "index -1 is out of bounds");
  free(x), free(y), free(dy), free(dx), free(same), free(want), free(ix);
}

/* x [A, B, C], index [A - 1, B, C - 2] (shorter: dx is cleared first) or
 * [A, B, C] (each part of the work clears its own), `along` long on axis. */
static void gather_case(int64_t A, int64_t B, int64_t C, int axis, int64_t along) {
  int64_t xd[3] = {A, B, C}, id[3] = {A > 1 ? A - 1 : 1, B, C > 2 ? C - 2 : C};
  id[axis] = along;
  gather_run(xd, id, axis, false);
  memcpy(id, xd, sizeof id);
  id[axis] = along;
  gather_run(xd, id, axis, false);
  if (axis < 2)
    gather_run(xd, id, axis, true);
}

static void test_gather(void **state) {
  (void)state;
  for (int axis = 0; axis < 3; axis++) {
    gather_case(3, 4, 5, axis, 6);
    gather_case(40, 50, 60, axis, 30); /* 60000 to 72000 elements: threads */
    /* rows fewer than the threads, long: the rows split in parts (along
     * the last axis, the scatter-add's by the values they add to) */
    gather_case(1, 1, 100000, axis, axis == 2 ? 150000 : 1);
    gather_case(2, 3000, 33, axis, axis == 1 ? 2500 : axis == 0 ? 3 : 40);
  }
  /* the scatter-add along the last axis two rows at a time, two values of
   * each a step: an odd count of rows and odd rows, many places repeated */
  gather_case(1, 2049, 256, 2, 255);
  gather_case(3, 7, 9, 2, 301);
  int64_t xd[2] = {3, 4}, id[2] = {4, 4};
  float x[16] = {0}, y[16];
  int32_t ix[16] = {0};
  DtTensor in[2] = {ten(DTRT_F32, x, 2, xd), ten(DTRT_I32, ix, 2, id)},
           yt = ten(DTRT_F32, y, 2, id);
  DtAttrs ax = {.ni = 1, .i = {1}};
  refuse(dtrt_k_gather, in, 2, &yt, &ax, "does not fit [3,4] along dims other than 1");
  /* an empty index: nothing read, dx all zeros */
  int64_t none[2] = {0, 4};
  float dx[12];
  for (int k = 0; k < 12; k++)
    dx[k] = NAN;
  for (int axis = 0; axis < 2; axis++) {
    DtTensor ein[2] = {in[0], ten(DTRT_I32, ix, 2, none)}, et = ten(DTRT_F32, y, 2, none);
    DtAttrs ea = {.ni = 1, .i = {axis}}, ga = {.ni = 3, .i = {axis, 3, 4}};
    run(dtrt_k_gather, ein, 2, &et, &ea);
    DtTensor gin[2] = {ein[1], ten(DTRT_F32, y, 2, none)}, dxt = ten(DTRT_F32, dx, 2, xd);
    run(dtrt_k_gather_grad, gin, 2, &dxt, &ga);
    for (int k = 0; k < 12; k++)
      assert_true(dx[k] == 0);
  }
}

/* ---- one_hot, arange ---- */

static void test_one_hot(void **state) {
  (void)state;
  enum { N = 3000, C = 37 };
  int32_t id[N];
  for (int k = 0; k < N; k++)
    id[k] = (int32_t)(rt_next() % C);
  float *y = malloc(sizeof(float) * N * C);
  int64_t di[2] = {N / 30, 30}, dy[3] = {N / 30, 30, C};
  DtTensor it = ten(DTRT_I32, id, 2, di), yt = ten(DTRT_F32, y, 3, dy);
  DtAttrs c = {.ni = 1, .i = {C}};
  run(dtrt_k_one_hot, &it, 1, &yt, &c);
  for (int64_t q = 0; q < (int64_t)N * C; q++)
    assert_true(y[q] == (q % C == id[q / C]));
  same_on_one_thread(dtrt_k_one_hot, &it, 1, &yt, &c);
  id[17] = C;
  refuse(dtrt_k_one_hot, &it, 1, &yt, &c, "class 37 is outside [0, 37) (element 17)");
  id[17] = -2;
  refuse(dtrt_k_one_hot, &it, 1, &yt, &c, "class -2 is outside");
  free(y);
}

static void test_arange(void **state) {
  (void)state;
  int32_t yi[7];
  float yf[5];
  int64_t ni = 7, nf = 5;
  DtTensor ti = ten(DTRT_I32, yi, 1, &ni), tf = ten(DTRT_F32, yf, 1, &nf);
  DtAttrs ai = {.ni = 2, .i = {7, 1}, .nf = 2, .f = {10, -3}};
  run(dtrt_k_arange, NULL, 0, &ti, &ai);
  for (int k = 0; k < 7; k++)
    assert_int_equal(yi[k], 10 - 3 * k);
  DtAttrs af = {.ni = 1, .i = {5}, .nf = 2, .f = {0.1, 0.3}};
  run(dtrt_k_arange, NULL, 0, &tf, &af);
  for (int k = 0; k < 5; k++)
    assert_true(yf[k] == (float)(0.1 + k * 0.3));
  refuse(dtrt_k_arange, NULL, 0, &ti, &af, "output");
}

/* ---- cumsum ---- */

/* Along each axis of [A, B, C], forward and reverse, against sums in
 * double: n terms in float differ by at most about n 2^-24 sum |x|. */
static void test_cumsum(void **state) {
  (void)state;
  int64_t dims[2][3] = {{3, 4, 5}, {50, 40, 35}};
  for (int s = 0; s < 2; s++) {
    int64_t *d = dims[s];
    DtTensor xt = ten(DTRT_F32, NULL, 3, d);
    int64_t n = numel(&xt);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    int32_t *xi = malloc(sizeof(int32_t) * (size_t)n), *yi = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t k = 0; k < n; k++) {
      x[k] = frand();
      xi[k] = (int32_t)(rt_next() % 200001) - 100000;
    }
    xt.data = x;
    DtTensor yt = ten(DTRT_F32, y, 3, d), xit = ten(DTRT_I32, xi, 3, d),
             yit = ten(DTRT_I32, yi, 3, d);
    for (int axis = 0; axis < 3; axis++)
      for (int rev = 0; rev < 2; rev++) {
        DtAttrs a = {.ni = 2, .i = {axis, rev}};
        run(dtrt_k_cumsum, &xt, 1, &yt, &a);
        run(dtrt_k_cumsum, &xit, 1, &yit, &a);
        for (int64_t q = 0; q < n; q++) {
          int64_t c[3];
          coords(q, d, 3, c);
          int64_t k0 = rev ? c[axis] : 0, k1 = rev ? d[axis] - 1 : c[axis];
          double w = 0, mag = 0;
          int64_t wi = 0;
          for (int64_t k = k0; k <= k1; k++) {
            c[axis] = k;
            int64_t o = offset(c, d, 3);
            w += x[o];
            mag += fabs(x[o]);
            wi += xi[o];
          }
          if (fabs(y[q] - w) > (double)(k1 - k0 + 2) * 0x1p-23 * mag)
            fail_msg("cumsum axis %d reverse %d element %lld: got %.9g, want %.9g", axis, rev,
                     (long long)q, y[q], w);
          assert_int_equal(yi[q], (int32_t)wi);
        }
        same_on_one_thread(dtrt_k_cumsum, &xt, 1, &yt, &a);
      }
    free(x), free(y), free(xi), free(yi);
  }
}

/* ---- tril, triu ---- */

static void test_tri(void **state) {
  (void)state;
  int64_t dims[3][3] = {{2, 4, 6}, {2, 6, 4}, {30, 60, 70}};
  for (int s = 0; s < 3; s++) {
    int64_t *d = dims[s];
    DtTensor xt = ten(DTRT_F32, NULL, 3, d);
    int64_t n = numel(&xt);
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++)
      x[k] = frand();
    xt.data = x;
    DtTensor yt = ten(DTRT_F32, y, 3, d);
    for (int up = 0; up < 2; up++)
      for (int64_t diag = -8; diag <= 8; diag += 3) {
        DtAttrs a = {.ni = 1, .i = {diag}};
        run(up ? dtrt_k_triu : dtrt_k_tril, &xt, 1, &yt, &a);
        for (int64_t q = 0; q < n; q++) {
          int64_t c[3];
          coords(q, d, 3, c);
          bool keep = up ? c[2] >= c[1] + diag : c[2] <= c[1] + diag;
          assert_true(y[q] == (keep ? x[q] : 0));
        }
        same_on_one_thread(up ? dtrt_k_triu : dtrt_k_tril, &xt, 1, &yt, &a);
      }
    free(x), free(y);
  }
  int64_t d1 = 4;
  float v[4];
  DtTensor vt = ten(DTRT_F32, v, 1, &d1);
  refuse(dtrt_k_tril, &vt, 1, &vt, NULL, "rank 2 or more");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_int_elem, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int_pow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_int_where, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_hot, setup, teardown),
      cmocka_unit_test_setup_teardown(test_arange, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cumsum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tri, setup, teardown),
  };
  return cmocka_run_group_tests_name("runtime index kernels", tests, NULL, NULL);
}
