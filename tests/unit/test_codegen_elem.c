/* test_codegen_elem.c: the elementwise ops of torch's functions (the
 * comparisons, where, clamp, maximum, minimum, pow) compiled to objects, linked with
 * test_codegen_harness.c and libdtrt, and run: against the reference
 * interpreter (ct_run), and against a plain loop here, bit for bit, on
 * inputs that hold the edge cases (both zeros, infinities, NaN, the
 * threshold itself). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_codegen.h"

enum { N = 64 };

/* Halves from -4 to 4 (the threshold 0.5 among them), then the edges. */
static void edge_inputs(float *x, int64_t n) {
  static const float edge[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0.49999997f, 0.50000006f};
  for (int64_t i = 0; i < n; i++)
    x[i] = i < COUNTOF(edge) ? edge[i] : (float)(i % 17 - 8) / 2;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Output k of masks() for the element x, by a plain C expression. */
static float mask_ref(int k, float x) {
  switch (k) {
  case 0: return x > 0.5f ? 1.0f : 0.0f;
  case 1: return x >= 0.5f ? 1.0f : 0.0f;
  case 2: return x == 0.5f ? 1.0f : 0.0f;
  case 3: return x != 0.5f ? 1.0f : 0.0f;
  case 4: return 0.5f > x ? 1.0f : 0.0f;
  case 5: return x > 0.5f ? x : -INFINITY;
  case 6: return x != 0 ? 1.0f : 2.0f;           /* NaN is not 0: true, as torch's bool(nan) */
  default: return x > -1.0f ? x : 3.0f;          /* -0 stays -0 */
  }
}

static void mask_check(int k, const float *x, const float *got, int64_t n) {
  assert_int_equal(n, N);
  for (int64_t i = 0; i < n; i++) {
    float want = mask_ref(k, x[i]);
    if (!same_bits(got[i], want))
      fail_msg("output %d, element %lld (x = %g): %g, the plain loop says %g", k, (long long)i,
               x[i], got[i], want);
  }
}

/* where(c, a, b) as the frontend writes it. */
static Inst *where(CT *t, Inst *c, Inst *a, Inst *b) {
  return ct_op(t, OP_add, 2, ct_op(t, OP_where_true, 2, c, a), ct_op(t, OP_where_false, 2, c, b));
}

/* Every comparison, and where with a mask, a raw condition and a signed
 * zero, on the edge cases: generated code equals the plain loop bit for
 * bit (the interpreter too, within ct_run). */
static void masks(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "masks");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, N), NULL);
  Inst *half = ct_const(&t, 0.5);
  Inst *gt = ct_op(&t, OP_gt, 2, x, half);
  ct_output(&t, gt, "gt");
  ct_output(&t, ct_op(&t, OP_ge, 2, x, half), "ge");
  ct_output(&t, ct_op(&t, OP_eq, 2, x, half), "eq");
  ct_output(&t, ct_op(&t, OP_ne, 2, x, half), "ne");
  ct_output(&t, ct_op(&t, OP_gt, 2, half, x), "lt");
  ct_output(&t, where(&t, gt, x, ct_const(&t, -INFINITY)), "where_inf");
  ct_output(&t, where(&t, x, ct_const(&t, 1), ct_const(&t, 2)), "where_raw");
  ct_output(&t, where(&t, ct_op(&t, OP_gt, 2, x, ct_const(&t, -1)), x, ct_const(&t, 3)),
            "where_zero");
  ct_run(&t, 0, edge_inputs, mask_check);
  ct_free(&t);
}

/* A training model's globals: inputs x and target [2, 4, 8], params p [8]
 * and q [2, 4, 1] (normal, std 1), which broadcast against x. */
static void train_globals(CT *t, Inst **x, Inst **tg, Inst **p, Inst **q) {
  *x = ct_global(t, "x", G_INPUT, ty(DT_F32, 2, 4, 8), NULL);
  *tg = ct_global(t, "target", G_INPUT, ty(DT_F32, 2, 4, 8), NULL);
  *p = ct_global(t, "p", G_PARAM, ty(DT_F32, 1, 8), "normal");
  *q = ct_global(t, "q", G_PARAM, ty(DT_F32, 2, 4, 1), "normal");
  ir_find_global(t->m, "p")->init_arg = 1;
  ir_find_global(t->m, "q")->init_arg = 1;
}

/* A param through both sides of a where, and a mask multiplying another:
 * the training steps' losses, params and momenta equal the interpreter's. */
static void where_trains(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "wtrain");
  Inst *x, *tg, *p, *q;
  train_globals(&t, &x, &tg, &p, &q);
  Inst *c = ct_op(&t, OP_gt, 2, x, p);
  Inst *y = where(&t, c, ct_op(&t, OP_mul, 2, p, x), q);
  y = ct_op(&t, OP_mul, 2, y, ct_op(&t, OP_ne, 2, q, ct_const(&t, 0)));
  ct_output(&t, y, "y");
  ct_output(&t, ct_op(&t, OP_mse, 2, y, tg), "loss");
  ct_train(&t, "sgd", 0.1);
  ct_run(&t, 3, NULL, NULL);
  ct_free(&t);
}

/* The bounds of clamps(): min and max (NaN: absent), open. */
static const struct { float lo, hi; bool open; } clamp_bounds[] = {
    {-1, 1, false}, {0.5f, NAN, false}, {NAN, -1, false}, {1, -1, false},
    {-1, 1, true},  {0, 6, true},       {-INFINITY, 0.1f, false},
};

/* Output k of clamps() for x (a plain loop): clamp k, then its derivative
 * (dy = 1 + x / 8: never 0, NaN where x is). */
static float clamp_ref(int k, float x) {
  int n = COUNTOF(clamp_bounds), j = k % n;
  float lo = isnan(clamp_bounds[j].lo) ? -INFINITY : clamp_bounds[j].lo;
  float hi = isnan(clamp_bounds[j].hi) ? INFINITY : clamp_bounds[j].hi;
  if (k < n) {
    float v = x < lo ? lo : x;
    return v > hi ? hi : v;
  }
  bool in = clamp_bounds[j].open ? !(x <= lo || x >= hi) : x >= lo && x <= hi;
  return in ? 1 + x / 8 : 0;
}

static void clamp_check(int k, const float *x, const float *got, int64_t n) {
  assert_int_equal(n, N);
  for (int64_t i = 0; i < n; i++) {
    float want = clamp_ref(k, x[i]);
    if (!same_bits(got[i], want) && !(isnan(got[i]) && isnan(want)))
      fail_msg("output %d, element %lld (x = %g): %g, the plain loop says %g", k, (long long)i,
               x[i], got[i], want);
  }
}

/* Finite inputs: the comparison with the interpreter fails on NaN. */
static void finite_edges(float *x, int64_t n) {
  edge_inputs(x, n);
  x[4] = 6;
}

/* clamp and clamp_grad with both bounds, one, crossed ones, open ones and
 * an infinite one, at the bounds themselves among the inputs: generated
 * code equals the plain loop bit for bit. */
static void clamps(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "clamps");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, N), NULL);
  int n = COUNTOF(clamp_bounds);
  Inst *dy = ct_op(&t, OP_add, 2, ct_const(&t, 1), ct_op(&t, OP_div, 2, x, ct_const(&t, 8)));
  for (int pass = 0; pass < 2; pass++)
    for (int j = 0; j < n; j++) {
      Inst *y = pass ? ct_new(&t, OP_clamp_grad, 2, x, dy) : ct_new(&t, OP_clamp, 1, x);
      if (!isnan(clamp_bounds[j].lo))
        ir_set_float(y, "min", clamp_bounds[j].lo);
      if (!isnan(clamp_bounds[j].hi))
        ir_set_float(y, "max", clamp_bounds[j].hi);
      if (clamp_bounds[j].open)
        ir_set_int(y, "open", 1);
      ct_output(&t, ir_finish(y), arena_printf(t.a, "%s%d", pass ? "dclamp" : "clamp", j));
    }
  ct_run(&t, 0, finite_edges, clamp_check);
  ct_free(&t);
}

/* The other operand of extrema(), on either side of x: a tie with the
 * input 0.5, both zeros, NaN. */
static const float extremum_other[] = {0.5f, -0.0f, 0.0f, NAN};

/* torch's maximum (minimum) by its definition: NaN if either is, else
 * a < b ? b : a (a > b ? b : a), so a where they are equal. */
static float extremum_ref(bool max, float a, float b) {
  if (isnan(a) || isnan(b))
    return isnan(a) ? a : b;
  return (max ? a < b : a > b) ? b : a;
}

/* Output k of extrema(): maximum then minimum, x first then second, each
 * other operand; NaN shown as 7 (where(y != y, 7, y)), which the
 * interpreter's comparison can take. */
static void extremum_check(int k, const float *x, const float *got, int64_t n) {
  int no = COUNTOF(extremum_other);
  float o = extremum_other[k % no];
  bool max = k < 2 * no, first = k % (2 * no) < no;
  for (int64_t i = 0; i < n; i++) {
    float want = first ? extremum_ref(max, x[i], o) : extremum_ref(max, o, x[i]);
    want = isnan(want) ? 7 : want;
    if (!same_bits(got[i], want))
      fail_msg("output %d, element %lld (x = %g): %g, the plain loop says %g", k, (long long)i,
               x[i], got[i], want);
  }
}

/* maximum and minimum of x and a tie, both zeros and NaN, x on either side,
 * on the edge cases: generated code equals the plain loop bit for bit (-0
 * and 0 told apart, NaN from either side), and the interpreter. */
static void extrema(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "extrema");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, N), NULL);
  static const Op op[] = {OP_maximum, OP_minimum};
  int no = COUNTOF(extremum_other);
  for (int k = 0; k < 4 * no; k++) {
    Inst *o = ct_const(&t, extremum_other[k % no]);
    bool first = k % (2 * no) < no;
    Inst *y = ct_op(&t, op[k / (2 * no)], 2, first ? x : o, first ? o : x);
    ct_output(&t, where(&t, ct_op(&t, OP_ne, 2, y, y), ct_const(&t, 7), y),
              arena_printf(t.a, "ext%d", k));
  }
  ct_run(&t, 0, edge_inputs, extremum_check);
  ct_free(&t);
}

/* Params through maximum and minimum, broadcasting: the training steps'
 * losses, params and momenta (the derivatives' halves where they tie
 * included) equal the interpreter's. */
static void extrema_train(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "etrain");
  Inst *x, *tg, *p, *q;
  train_globals(&t, &x, &tg, &p, &q);
  Inst *y = ct_op(&t, OP_maximum, 2, ct_op(&t, OP_mul, 2, p, x), q);
  y = ct_op(&t, OP_add, 2, y, ct_op(&t, OP_minimum, 2, p, ct_op(&t, OP_maximum, 2, q, q)));
  ct_output(&t, y, "y");
  ct_output(&t, ct_op(&t, OP_mse, 2, y, tg), "loss");
  ct_train(&t, "sgd", 0.1);
  ct_run(&t, 3, NULL, NULL);
  ct_free(&t);
}

/* ---- pow ---- */

static const float pow_exps[] = {2.5f, -1.5f, 0.3f, 7, -3, 40, -40, INFINITY, -INFINITY, 0, 1e-3f};
static const float pow_bases[] = {2, -2, 0.5f, 0, -0.0f, 1, -1, INFINITY, -INFINITY, 1e-3f};

/* Output k of powers() for x: x to each exponent, each base to x, x to x. */
static float pow_ref(int k, float x) {
  int ne = COUNTOF(pow_exps), nb = COUNTOF(pow_bases);
  return k < ne ? powf(x, pow_exps[k]) : k < ne + nb ? powf(pow_bases[k - ne], x) : powf(x, x);
}

/* Whether got is powf's want: the same bits, both NaN, or finite and
 * within an ulp of it (powf and the generated loop each within about half
 * an ulp of the true power); a denormal want as a zero of its sign, as a
 * step flushes denormals (runtime/fp.c). */
static bool pow_close(float got, float want) {
  if (fabsf(want) < FLT_MIN)
    want = copysignf(0, want);
  if (same_bits(got, want) || (isnan(got) && isnan(want)))
    return true;
  float a = fabsf(want);
  return isfinite(want) && isfinite(got) && fabsf(got - want) <= nextafterf(a, INFINITY) - a;
}

/* Outputs show NaN as 7, which the interpreter's comparison can take. */
static void pow_check(int k, const float *x, const float *got, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float want = pow_ref(k, x[i]);
    if (!pow_close(got[i], isnan(want) ? 7 : want))
      fail_msg("output %d, element %lld (x = %.9g): %.9g, powf says %.9g", k, (long long)i,
               x[i], got[i], want);
  }
}

/* Zeros, infinities, NaN, +-1, tiny ones, the largest float, integers odd
 * and even (2^24 and beyond all even), then magnitudes from 1.7^-20 to
 * 1.7^19 of either sign, some of them integers. */
static void pow_inputs(float *x, int64_t n) {
  static const float edge[] = {0.0f,  -0.0f, INFINITY,   -INFINITY,   NAN,         1,
                               -1,    0.5f,  -0.5f,      2,           -2,          3,
                               -3,    1e-30f, -1e-30f,   3.4028235e38f, 1.17549435e-38f, 88.7f,
                               1.0000001f, 0.99999994f, 16777216.0f, -16777218.0f, 1e10f, -7};
  for (int64_t i = 0; i < n; i++)
    x[i] = i < COUNTOF(edge) ? edge[i]
           : i % 5 == 0      ? (float)(i % 2 ? -(i / 5) : i / 5)
                             : (i % 2 ? -1 : 1) * powf(1.7f, (float)(i - 44));
}

static Inst *nan_as_7(CT *t, Inst *y) {
  return where(t, ct_op(t, OP_ne, 2, y, y), ct_const(t, 7), y);
}

/* pow of x and numbers on either side, and of x and x, on the edge cases
 * and magnitudes far apart: generated code within an ulp of powf (its
 * special values bit for bit), and of the interpreter. */
static void powers(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "powers");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, N), NULL);
  int ne = COUNTOF(pow_exps), nb = COUNTOF(pow_bases);
  for (int k = 0; k <= ne + nb; k++) {
    Inst *y = k < ne        ? ct_op(&t, OP_pow, 2, x, ct_const(&t, pow_exps[k]))
              : k < ne + nb ? ct_op(&t, OP_pow, 2, ct_const(&t, pow_bases[k - ne]), x)
                            : ct_op(&t, OP_pow, 2, x, x);
    ct_output(&t, nan_as_7(&t, y), arena_printf(t.a, "pow%d", k));
  }
  ct_run(&t, 0, pow_inputs, pow_check);
  ct_free(&t);
}

/* pow_sweep's exponents and bases: powers that reach past both ends of
 * float's range for the larger and smaller of sweep_inputs, and bases near
 * 1 to exponents up to 2^21. */
static const float sweep_exps[] = {0.33333334f, -2.5f, 7.25f, -19.5f, 0.015625f, 101.5f};
static const float sweep_bases[] = {1.0001f, 0.75f, 3, 1e-3f, -2};

static void sweep_check(int k, const float *x, const float *got, int64_t n) {
  int ne = COUNTOF(sweep_exps);
  for (int64_t i = 0; i < n; i++) {
    float want = k < ne ? powf(x[i], sweep_exps[k]) : powf(sweep_bases[k - ne], x[i]);
    if (!pow_close(got[i], isnan(want) ? 7 : want))
      fail_msg("output %d, element %lld (x = %a): %a, powf says %a", k, (long long)i, x[i],
               got[i], want);
  }
}

/* 2^e m, e from -20 to 20 and m in [1, 2) spread by a multiplicative hash
 * (so over the whole range of log_split's m, on both sides of 1), a
 * seventh of them negative; every eleventh an integer. */
static void sweep_inputs(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    float m = 1 + (float)(((uint32_t)i * 2654435761u) >> 9) / (float)(1 << 23);
    x[i] = ldexpf(m, (int)(i % 41) - 20);
    if (i % 11 == 0)
      x[i] = rintf(x[i]);
    if (i % 7 == 3)
      x[i] = -x[i];
  }
}

/* pow of 4096 numbers of every mantissa to exponents and as exponents
 * (results that overflow, underflow to denormals and to zero, and many
 * near 1): generated code within an ulp of powf, its special values bit
 * for bit. */
static void pow_sweep(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "psweep");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, 4096), NULL);
  int ne = COUNTOF(sweep_exps), nb = COUNTOF(sweep_bases);
  for (int k = 0; k < ne + nb; k++) {
    Inst *y = k < ne ? ct_op(&t, OP_pow, 2, x, ct_const(&t, sweep_exps[k]))
                     : ct_op(&t, OP_pow, 2, ct_const(&t, sweep_bases[k - ne]), x);
    ct_output(&t, nan_as_7(&t, y), arena_printf(t.a, "pow%d", k));
  }
  ct_run(&t, 0, sweep_inputs, sweep_check);
  ct_free(&t);
}

/* A param through pow as base and as exponent, broadcasting, and a number
 * to a param: the training steps' losses, params and momenta equal the
 * interpreter's. */
static void pow_train(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "ptrain");
  Inst *x, *tg, *p, *q;
  train_globals(&t, &x, &tg, &p, &q);
  Inst *base = ct_op(&t, OP_add, 2, ct_op(&t, OP_sigmoid, 1, ct_op(&t, OP_mul, 2, p, x)),
                     ct_const(&t, 0.5));
  Inst *y = ct_op(&t, OP_pow, 2, base, q);
  y = ct_op(&t, OP_add, 2, y, ct_op(&t, OP_pow, 2, ct_const(&t, 1.5), ct_op(&t, OP_mul, 2, q, x)));
  ct_output(&t, y, "y");
  ct_output(&t, ct_op(&t, OP_mse, 2, y, tg), "loss");
  ct_train(&t, "sgd", 0.1);
  ct_run(&t, 3, NULL, NULL);
  ct_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(masks),
      cmocka_unit_test(where_trains),
      cmocka_unit_test(clamps),
      cmocka_unit_test(extrema),
      cmocka_unit_test(extrema_train),
      cmocka_unit_test(powers),
      cmocka_unit_test(pow_sweep),
      cmocka_unit_test(pow_train),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
