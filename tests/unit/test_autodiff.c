/* test_autodiff.c: the derivative of every differentiable op, and of a few
 * compositions, against central finite differences (see gradcheck). */
#include <math.h>
#include <string.h>

#include "test_autodiff.h"

#define NARGS(...) NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define NARGS_(a, b, c, d, e, f, n, ...) n
#define F32(...) ty(DT_F32, NARGS(__VA_ARGS__), __VA_ARGS__)
#define I32(...) ty(DT_I32, NARGS(__VA_ARGS__), __VA_ARGS__)

static Inst *with_ints(Inst *i, const char *name, int n, const int64_t *v) {
  ir_set_ints(i, name, v, n);
  return i;
}

/* ---- elementwise ---- */

static void binary(Op op, Type ta, Type tb, const char *label) {
  Inst *a = tm_param(&t, "a", ta), *b = tm_param(&t, "b", tb);
  if (op == OP_div)
    fill_uniform(tm_data(&t, "b"), type_elems(&tb), 0.5, 2);
  gradcheck(&t, tm_op(&t, op, 2, a, b), label);
}

static void test_add(void **s) { (void)s; binary(OP_add, F32(2, 3, 4), F32(2, 3, 4), "add"); }
static void test_add_bias(void **s) { (void)s; binary(OP_add, F32(5, 4), F32(4), "add bias [5,4]+[4]"); }
static void test_add_outer(void **s) { (void)s; binary(OP_add, F32(3, 1), F32(1, 4), "add [3,1]+[1,4]"); }
static void test_add_scalar(void **s) { (void)s; binary(OP_add, ty(DT_F32, 0), F32(2, 3), "add []+[2,3]"); }
static void test_sub(void **s) { (void)s; binary(OP_sub, F32(2, 3), F32(2, 1), "sub [2,3]-[2,1]"); }
static void test_mul(void **s) { (void)s; binary(OP_mul, F32(4, 1, 3), F32(2, 3), "mul [4,1,3]*[2,3]"); }
static void test_div(void **s) { (void)s; binary(OP_div, F32(3, 4), F32(4), "div [3,4]/[4]"); }

static void test_mul_const(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(2, 3));
  gradcheck(&t, tm_op(&t, OP_mul, 2, tm_const(&t, 2.5), a), "mul const*[2,3]");
}

/* The same value on both sides: adjoints add up. */
static void test_mul_self(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(3, 2));
  gradcheck(&t, tm_op(&t, OP_mul, 2, a, a), "mul x*x");
}

static void unary(Op op, double lo, double hi, const char *label) {
  Inst *x = tm_param(&t, "x", F32(3, 4));
  fill_uniform(tm_data(&t, "x"), 12, lo, hi);
  gradcheck(&t, tm_op(&t, op, 1, x), label);
}

static void test_neg(void **s) { (void)s; unary(OP_neg, -1, 1, "neg"); }
static void test_exp(void **s) { (void)s; unary(OP_exp, -1, 1, "exp"); }
static void test_log(void **s) { (void)s; unary(OP_log, 0.5, 2, "log"); }
static void test_sqrt(void **s) { (void)s; unary(OP_sqrt, 0.5, 2, "sqrt"); }
static void test_tanh(void **s) { (void)s; unary(OP_tanh, -2, 2, "tanh"); }
static void test_sigmoid(void **s) { (void)s; unary(OP_sigmoid, -3, 3, "sigmoid"); }
static void test_gelu(void **s) { (void)s; unary(OP_gelu, -3, 3, "gelu"); }
static void test_gelu_tanh(void **s) { (void)s; unary(OP_gelu_tanh, -3, 3, "gelu_tanh"); }

static void test_relu(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(4, 5));
  fill_away_from_zero(tm_data(&t, "x"), 20, 0.1, 1);
  gradcheck(&t, tm_op(&t, OP_relu, 1, x), "relu");
}

/* where(a > 0, a a, b) as the frontend writes it: where_true(c, a a) +
 * where_false(c, b); no derivative reaches the mask c (a comparison), and a
 * stays away from the threshold, where the finite differences would jump. */
static void test_where(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(3, 4)), *b = tm_param(&t, "b", F32(4));
  fill_away_from_zero(tm_data(&t, "a"), 12, 0.1, 1);
  Inst *c = tm_op(&t, OP_gt, 2, a, tm_const(&t, 0));
  Inst *y = tm_op(&t, OP_add, 2, tm_op(&t, OP_where_true, 2, c, tm_op(&t, OP_mul, 2, a, a)),
                  tm_op(&t, OP_where_false, 2, c, b));
  gradcheck(&t, y, "where(a > 0, a a, b)");
}

/* A mask times a value: the value's derivative is the mask, the mask's none. */
static void test_mask_mul(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(3, 4)), *b = tm_param(&t, "b", F32(3, 1));
  fill_away_from_zero(tm_data(&t, "a"), 12, 0.1, 1);
  Inst *m = tm_op(&t, OP_ne, 2, tm_op(&t, OP_ge, 2, a, b), tm_op(&t, OP_eq, 2, a, b));
  gradcheck(&t, tm_op(&t, OP_mul, 2, m, tm_op(&t, OP_mul, 2, a, b)), "(a >= b != (a == b)) a b");
}

/* clamp with both bounds, one, and hardtanh's open bounds (the same
 * derivative away from them): x steps 0.3 from -1.85, never within 0.05 of
 * a bound, where the finite differences would jump. */
static void clamp(double lo, double hi, bool open, const char *label) {
  Inst *x = tm_param(&t, "x", F32(3, 4));
  float *v = tm_data(&t, "x");
  for (int k = 0; k < 12; k++)
    v[k] = (float)(-1.85 + 0.3 * k);
  Inst *y = tm_new(&t, OP_clamp, 1, x);
  if (!isinf(lo))
    ir_set_float(y, "min", lo);
  if (!isinf(hi))
    ir_set_float(y, "max", hi);
  if (open)
    ir_set_int(y, "open", 1);
  gradcheck(&t, ir_finish(y), label);
}

static void test_clamp(void **s) { (void)s; clamp(-1, 1, false, "clamp(x, -1, 1)"); }
static void test_clamp_min(void **s) { (void)s; clamp(-0.5, INFINITY, false, "clamp(x, min = -0.5)"); }
static void test_clamp_max(void **s) { (void)s; clamp(-INFINITY, 0.5, false, "clamp(x, max = 0.5)"); }
static void test_hardtanh(void **s) { (void)s; clamp(-1, 1, true, "hardtanh(x)"); }

/* maximum and minimum of a [3, 4] and b [4], broadcast: a above b in row
 * 0, below it in row 1, at least 0.125 apart (beyond the step), and equal
 * in row 2, where the central differences give each side half the change
 * (max(a + h, a) - max(a - h, a) = h): the half torch's derivative gives
 * each where they tie. */
static void extremum(Op op, const char *label) {
  Inst *a = tm_param(&t, "a", F32(3, 4)), *b = tm_param(&t, "b", F32(4));
  float *va = tm_data(&t, "a"), *vb = tm_data(&t, "b");
  for (int j = 0; j < 4; j++) {
    vb[j] = -0.75f + 0.5f * (float)j;
    va[j] = vb[j] + 0.25f * (float)(j + 1);
    va[4 + j] = vb[j] - 0.125f * (float)(j + 1);
    va[8 + j] = vb[j];
  }
  gradcheck(&t, tm_op(&t, op, 2, a, b), label);
}

/* pow(a, b) of a [3, 4] in [0.5, 2] and b [4] in [-1.5, 1.5], broadcast:
 * the derivative with respect to both; a number to b (b's only) and a
 * negative a to a number that is an integer (a's only). */
static void test_pow(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(3, 4)), *b = tm_param(&t, "b", F32(4));
  fill_uniform(tm_data(&t, "a"), 12, 0.5, 2);
  fill_uniform(tm_data(&t, "b"), 4, -1.5, 1.5);
  gradcheck(&t, tm_op(&t, OP_pow, 2, a, b), "pow [3,4],[4]");
}

static void test_pow_base(void **s) {
  (void)s;
  Inst *b = tm_param(&t, "b", F32(3, 4));
  fill_uniform(tm_data(&t, "b"), 12, -2, 2);
  gradcheck(&t, tm_op(&t, OP_pow, 2, tm_const(&t, 2.5), b), "pow 2.5,[3,4]");
}

static void test_pow_odd(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(3, 4));
  fill_uniform(tm_data(&t, "a"), 12, -2, -0.5);
  gradcheck(&t, tm_op(&t, OP_pow, 2, a, tm_const(&t, -3)), "pow [3,4],-3");
}

static void test_maximum(void **s) { (void)s; extremum(OP_maximum, "maximum [3,4],[4]"); }
static void test_minimum(void **s) { (void)s; extremum(OP_minimum, "minimum [3,4],[4]"); }

/* ---- reductions ---- */

static void reduce(Op op, Type tx, int n, const int64_t *axes, int keep, const char *label) {
  Inst *x = tm_param(&t, "x", tx);
  if (op == OP_max)
    fill_distinct(tm_data(&t, "x"), type_elems(&tx), -1, 0.1);
  Inst *r = with_ints(tm_new(&t, op, 1, x), "axes", n, axes);
  if (keep >= 0)
    ir_set_int(r, "keepdim", keep);
  gradcheck(&t, ir_finish(r), label);
}

static void test_sum(void **s) { (void)s; reduce(OP_sum, F32(3, 4), 1, (int64_t[]){1}, -1, "sum axes=[1]"); }
static void test_sum_keep(void **s) { (void)s; reduce(OP_sum, F32(2, 3, 4), 2, (int64_t[]){0, 2}, 1, "sum axes=[0,2] keepdim"); }
static void test_sum_all(void **s) { (void)s; reduce(OP_sum, F32(2, 3), 2, (int64_t[]){0, 1}, 0, "sum all"); }
static void test_sum_neg(void **s) { (void)s; reduce(OP_sum, F32(2, 3, 4), 1, (int64_t[]){-2}, 0, "sum axes=[-2]"); }
static void test_mean(void **s) { (void)s; reduce(OP_mean, F32(3, 4), 1, (int64_t[]){0}, -1, "mean axes=[0]"); }
static void test_mean_keep(void **s) { (void)s; reduce(OP_mean, F32(2, 3, 4), 2, (int64_t[]){1, 2}, 1, "mean axes=[1,2] keepdim"); }
static void test_max(void **s) { (void)s; reduce(OP_max, F32(3, 5), 1, (int64_t[]){1}, -1, "max axes=[1]"); }
static void test_max_keep(void **s) { (void)s; reduce(OP_max, F32(2, 3, 4), 2, (int64_t[]){0, 2}, 1, "max axes=[0,2] keepdim"); }

/* ---- matmul ---- */

static void matmul(Type ta, Type tb, int tra, int trb, const char *label) {
  Inst *a = tm_param(&t, "a", ta), *b = tm_param(&t, "b", tb);
  Inst *y = tm_new(&t, OP_matmul, 2, a, b);
  if (tra)
    ir_set_int(y, "ta", 1);
  if (trb)
    ir_set_int(y, "tb", 1);
  gradcheck(&t, ir_finish(y), label);
}

static void test_matmul(void **s) { (void)s; matmul(F32(3, 4), F32(4, 5), 0, 0, "matmul [3,4]@[4,5]"); }
static void test_matmul_ta(void **s) { (void)s; matmul(F32(4, 3), F32(4, 5), 1, 0, "matmul ta"); }
static void test_matmul_tb(void **s) { (void)s; matmul(F32(3, 4), F32(5, 4), 0, 1, "matmul tb"); }
static void test_matmul_tab(void **s) { (void)s; matmul(F32(4, 3), F32(5, 4), 1, 1, "matmul ta tb"); }
static void test_matmul_batch(void **s) { (void)s; matmul(F32(2, 3, 4), F32(2, 4, 2), 0, 0, "matmul batch [2,3,4]@[2,4,2]"); }
static void test_matmul_batch_tab(void **s) { (void)s; matmul(F32(2, 2, 4, 3), F32(2, 2, 5, 4), 1, 1, "matmul batch ta tb"); }
static void test_matmul_bcast(void **s) { (void)s; matmul(F32(2, 3, 4), F32(4, 5), 0, 0, "matmul [2,3,4]@[4,5]"); }
static void test_matmul_bcast_tb(void **s) { (void)s; matmul(F32(2, 3, 4), F32(5, 4), 0, 1, "matmul [2,3,4]@[5,4]^T"); }
static void test_matmul_bcast_ta(void **s) { (void)s; matmul(F32(2, 4, 3), F32(4, 5), 1, 0, "matmul [2,4,3]^T@[4,5]"); }
static void test_matmul_bcast_tab(void **s) { (void)s; matmul(F32(2, 2, 4, 3), F32(5, 4), 1, 1, "matmul [2,2,4,3]^T@[5,4]^T"); }
/* kfold: [F.., k, m]^T @ [F.., k, n] -> [m, n], the F dims summed with k */
static void test_matmul_kfold(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(2, 3, 4, 5)), *b = tm_param(&t, "b", F32(2, 3, 4, 2));
  Inst *y = tm_new(&t, OP_matmul, 2, a, b);
  ir_set_int(y, "ta", 1);
  ir_set_int(y, "kfold", 2);
  gradcheck(&t, ir_finish(y), "matmul [2,3,4,5]^T@[2,3,4,2] kfold 2");
}

/* ---- other kernels ---- */

static void test_softmax(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(3, 5));
  gradcheck(&t, tm_op(&t, OP_softmax, 1, x), "softmax");
}

static void test_softmax_axis0(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(4, 3));
  Inst *y = tm_new(&t, OP_softmax, 1, x);
  ir_set_int(y, "axis", 0);
  gradcheck(&t, ir_finish(y), "softmax axis=0");
}

static void test_log_softmax(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 4));
  Inst *y = tm_new(&t, OP_log_softmax, 1, x);
  ir_set_int(y, "axis", 1);
  gradcheck(&t, ir_finish(y), "log_softmax axis=1");
}

static void test_cross_entropy(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(4, 5)), *y = tm_input(&t, "y", I32(4));
  int32_t *lab = tm_data(&t, "y");
  for (int k = 0; k < 4; k++)
    lab[k] = (k * 3 + 1) % 5;
  gradcheck(&t, tm_op(&t, OP_cross_entropy, 2, x, y), "cross_entropy");
}

/* cross_entropy(..., ignore_index, label_smoothing) as the frontend lowers
 * it: the sum over kept rows over their count. */
static void test_cross_entropy_smoothed(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(5, 4)), *y = tm_input(&t, "y", I32(5));
  int32_t *lab = tm_data(&t, "y");
  for (int k = 0; k < 5; k++)
    lab[k] = k == 2 ? -100 : (k * 3 + 1) % 4;
  Inst *sum = tm_new(&t, OP_cross_entropy_sum, 2, x, y);
  ir_set_int(sum, "ignore_index", -100);
  ir_set_float(sum, "smoothing", 0.2);
  Inst *n = tm_new(&t, OP_label_count, 1, y);
  ir_set_int(n, "ignore_index", -100);
  gradcheck(&t, tm_op(&t, OP_div, 2, ir_finish(sum), ir_finish(n)), "cross_entropy smoothed");
}

static void test_bce_with_logits(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(3, 4)), *q = tm_param(&t, "q", F32(3, 4));
  gradcheck(&t, tm_op(&t, OP_bce_with_logits, 2, x, q), "bce_with_logits");
}

static void test_mse(void **s) {
  (void)s;
  Inst *p = tm_param(&t, "p", F32(3, 4)), *q = tm_param(&t, "q", F32(3, 4));
  gradcheck(&t, tm_op(&t, OP_mse, 2, p, q), "mse");
}

static void test_normalize(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(3, 6));
  fill_uniform(tm_data(&t, "x"), 18, -2, 2);
  Inst *y = tm_new(&t, OP_normalize, 1, x);
  ir_set_float(y, "eps", 1e-3);
  gradcheck(&t, ir_finish(y), "normalize");
}

static void test_embedding(void **s) {
  (void)s;
  Inst *tab = tm_param(&t, "tab", F32(5, 3)), *ids = tm_input(&t, "ids", I32(2, 3));
  int32_t *id = tm_data(&t, "ids");
  int32_t v[6] = {4, 0, 4, 2, 1, 4};   /* repeats add up; row 3 unused */
  for (int k = 0; k < 6; k++)
    id[k] = v[k];
  gradcheck(&t, tm_op(&t, OP_embedding, 2, tab, ids), "embedding");
}

/* embedding_bag in mode m: ids [3, 4] (or a flat [9] in bags 0-3, 4-3
 * (empty), 4-8), row 6 as padding_idx when pad, per-sample weights a param
 * when psw; max's rows distinct, so small steps keep the arg-max. */
static void bag(int mode, bool flat, bool psw, bool pad, const char *label) {
  static const int32_t v[12] = {4, 0, 4, 6, 1, 6, 2, 5, 3, 3, 0, 1};
  Inst *w = tm_param(&t, "w", F32(7, 3)), *in[4] = {0};
  Inst *ids = tm_input(&t, "ids", flat ? I32(9) : I32(3, 4));
  int n = 0;
  in[n++] = ids;
  in[n++] = w;
  memcpy(tm_data(&t, "ids"), v, sizeof(int32_t) * (flat ? 9 : 12));
  if (mode == DT_BAG_MAX)
    fill_distinct(tm_data(&t, "w"), 21, -1, 0.1);
  if (flat) {
    in[n++] = tm_input(&t, "offs", I32(3));
    int32_t *o = tm_data(&t, "offs");
    o[0] = 0, o[1] = 4, o[2] = 4;
  }
  if (psw)
    in[n++] = tm_param(&t, "sw", flat ? F32(9) : F32(3, 4));
  Inst *y = tm_new(&t, OP_embedding_bag, n, in[0], in[1], in[2], in[3]);
  ir_set_int(y, "mode", mode);
  if (pad)
    ir_set_int(y, "padding_idx", 6);
  gradcheck(&t, ir_finish(y), label);
}

static void test_embedding_bag_sum(void **s) {
  (void)s;
  bag(DT_BAG_SUM, false, false, false, "embedding_bag sum");
}
static void test_embedding_bag_mean(void **s) {
  (void)s;
  bag(DT_BAG_MEAN, false, false, true, "embedding_bag mean, padding_idx");
}
static void test_embedding_bag_max(void **s) {
  (void)s;
  bag(DT_BAG_MAX, false, false, true, "embedding_bag max, padding_idx");
}
static void test_embedding_bag_psw(void **s) {
  (void)s;
  bag(DT_BAG_SUM, false, true, true, "embedding_bag sum, per_sample_weights");
}
static void test_embedding_bag_offsets(void **s) {
  (void)s;
  bag(DT_BAG_SUM, true, true, false, "embedding_bag offsets, per_sample_weights");
}
static void test_embedding_bag_offsets_mean(void **s) {
  (void)s;
  bag(DT_BAG_MEAN, true, false, true, "embedding_bag offsets mean");
}
static void test_embedding_bag_offsets_max(void **s) {
  (void)s;
  bag(DT_BAG_MAX, true, false, false, "embedding_bag offsets max");
}

static void test_dropout(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(4, 6));
  Inst *y = tm_new(&t, OP_dropout, 1, x);
  ir_set_float(y, "p", 0.3);
  ir_set_int(y, "seed", 7);
  gradcheck(&t, ir_finish(y), "dropout p=0.3");
}

static void test_causal_mask(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 3));
  Inst *y = tm_new(&t, OP_causal_mask, 1, x);
  ir_set_float(y, "fill", -3);
  gradcheck(&t, ir_finish(y), "causal_mask fill=-3");
}

/* ---- indices ---- */

/* gather along each axis of x [3, 4, 2] with an index shorter than x in the
 * other dims; repeated indices add up in the derivative. */
static void gather_along(int64_t axis, const char *label) {
  static const int64_t dims[3] = {3, 4, 2};
  Inst *x = tm_param(&t, "x", F32(3, 4, 2));
  Type it = I32(2, 3, 2);
  it.dim[axis] = 5;
  Inst *ix = tm_input(&t, "ix", it);
  int32_t *v = tm_data(&t, "ix");
  for (int64_t k = 0; k < type_elems(&it); k++)
    v[k] = (int32_t)((k * 7 + 3) % dims[axis]);
  Inst *y = tm_new(&t, OP_gather, 2, x, ix);
  ir_set_int(y, "axis", axis);
  gradcheck(&t, ir_finish(y), label);
}
static void test_gather0(void **s) { (void)s; gather_along(0, "gather axis 0"); }
static void test_gather1(void **s) { (void)s; gather_along(1, "gather axis 1"); }
static void test_gather2(void **s) { (void)s; gather_along(2, "gather axis 2"); }

static void cumsum_along(int64_t axis, bool reverse, const char *label) {
  Inst *x = tm_param(&t, "x", F32(3, 4, 2));
  Inst *y = tm_new(&t, OP_cumsum, 1, x);
  ir_set_int(y, "axis", axis);
  if (reverse)
    ir_set_int(y, "reverse", 1);
  gradcheck(&t, ir_finish(y), label);
}
static void test_cumsum0(void **s) { (void)s; cumsum_along(0, false, "cumsum axis 0"); }
static void test_cumsum1(void **s) { (void)s; cumsum_along(1, false, "cumsum axis 1"); }
static void test_cumsum2(void **s) { (void)s; cumsum_along(-1, true, "cumsum axis -1 reverse"); }

static void tri(Op op, int64_t diagonal, const char *label) {
  Inst *x = tm_param(&t, "x", F32(2, 3, 4));
  Inst *y = tm_new(&t, op, 1, x);
  ir_set_int(y, "diagonal", diagonal);
  gradcheck(&t, ir_finish(y), label);
}
static void test_tril(void **s) { (void)s; tri(OP_tril, 0, "tril"); }
static void test_tril_below(void **s) { (void)s; tri(OP_tril, -1, "tril diagonal -1"); }
static void test_triu(void **s) { (void)s; tri(OP_triu, 1, "triu diagonal 1"); }

/* (y - 1) as f32 times x: nothing flows into the i32 values; to_f32 passes
 * the integers on. */
static void test_int_promoted(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3)), *ids = tm_input(&t, "ids", I32(3));
  int32_t *v = tm_data(&t, "ids");
  v[0] = 4, v[1] = -2, v[2] = 7;
  Inst *m = tm_new(&t, OP_int_elem, 1, ids);
  ir_set_int(m, "fn", DT_INT_SUB);
  ir_set_int(m, "k", 1);
  Inst *f = tm_op(&t, OP_to_f32, 1, ir_finish(m));
  gradcheck(&t, tm_op(&t, OP_mul, 2, f, x), "to_f32(ids - 1) x");
}

/* ---- data movement ---- */

static void test_reshape(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 2));
  gradcheck(&t, ir_finish(with_ints(tm_new(&t, OP_reshape, 1, x), "shape", 2, (int64_t[]){3, 4})),
            "reshape");
}

static void test_transpose(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 4));
  gradcheck(&t, ir_finish(with_ints(tm_new(&t, OP_transpose, 1, x), "perm", 3, (int64_t[]){2, 0, 1})),
            "transpose perm=[2,0,1]");
}

/* Slices of one value lying apart (gaps at 2 and 5, the last column left
 * out), whose adjoints autodiff sums as one concat of pieces and zeros, and
 * one overlapping them, which it adds. */
static Inst *slice_of(Inst *x, int64_t axis, int64_t begin, int64_t end) {
  Inst *y = tm_new(&t, OP_slice, 1, x);
  ir_set_int(y, "axis", axis);
  ir_set_int(y, "begin", begin);
  ir_set_int(y, "end", end);
  return ir_finish(y);
}

static void test_slice(void **s) {
  (void)s;
  gradcheck(&t, slice_of(tm_param(&t, "x", F32(3, 5)), -1, 1, 4), "slice axis=-1 [1,4)");
}

/* Three slices of x [3, 8] along 1, concatenated. */
static void slices_of(const char *what, int64_t b2, int64_t e2) {
  Inst *x = tm_param(&t, "x", F32(3, 8));
  Inst *y = tm_new(&t, OP_concat, 3, slice_of(x, 1, 3, 5), slice_of(x, 1, 0, 2),
                   slice_of(x, 1, b2, e2));
  ir_set_int(y, "axis", 1);
  gradcheck(&t, ir_finish(y), what);
}

static void test_slices_apart(void **s) {
  (void)s;
  slices_of("slices [3,5), [0,2), [6,7) concatenated", 6, 7);
}

static void test_slices_overlap(void **s) {
  (void)s;
  slices_of("slices [3,5), [0,2) and [1,4) overlapping", 1, 4);
}

static void test_pad(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3));
  Inst *y = tm_new(&t, OP_pad, 1, x);
  ir_set_int(y, "axis", 0);
  ir_set_int(y, "begin", 1);
  ir_set_int(y, "size", 4);
  gradcheck(&t, ir_finish(y), "pad axis=0 at 1 to 4");
}

/* A pad with a value: finite differences where the loss stays finite. */
static void test_pad_value(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3));
  Inst *y = tm_new(&t, OP_pad, 1, x);
  ir_set_int(y, "axis", 1);
  ir_set_int(y, "begin", 2);
  ir_set_int(y, "size", 6);
  ir_set_float(y, "value", 1.2);
  gradcheck(&t, ir_finish(y), "pad axis=1 at 2 to 6 value 1.2");
}

/* Where the value swamps the loss (-3e38) or makes it infinite, the slice
 * identity: d sum(pad(x) * w) / dx is w's part at x's places, exactly,
 * whatever the value. */
static void pad_slice_identity(double value) {
  Inst *x = tm_param(&t, "x", F32(2, 3));
  Inst *y = tm_new(&t, OP_pad, 1, x);
  ir_set_int(y, "axis", -1);
  ir_set_int(y, "begin", 1);
  ir_set_int(y, "size", 5);
  ir_set_float(y, "value", value);
  ir_finish(y);
  Inst *w = tm_input(&t, "w", F32(2, 5));
  Inst *loss = tm_new(&t, OP_sum, 1, tm_op(&t, OP_mul, 2, y, w));
  ir_set_ints(loss, "axes", (int64_t[]){0, 1}, 2);
  tm_output(&t, ir_finish(loss), "loss");
  t.m->train.loss = "loss";
  Func *g = autodiff_grads(t.m, t.f, "grads", &t.d);
  assert_non_null(g);
  if (!ir_verify(t.m, &t.d))
    fail_msg("pad value %g: %s", value, tm_log(&t));
  float l, dx[6];
  void *outs[2] = {&l, dx};
  Interp *it = tm_interp(&t);
  if (!interp_run(it, "grads", outs))
    fail_msg("pad value %g: %s", value, interp_error(it));
  const float *wv = tm_data(&t, "w");
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      if (dx[i * 3 + j] != wv[i * 5 + j + 1])
        fail_msg("pad value %g: dx[%d][%d] is %.9g, not w[%d][%d] = %.9g", value, i, j,
                 dx[i * 3 + j], i, j + 1, wv[i * 5 + j + 1]);
  interp_free(it);
}

static void test_pad_value_huge(void **s) { (void)s; pad_slice_identity(-3.0e38); }
static void test_pad_value_neg_inf(void **s) { (void)s; pad_slice_identity(-INFINITY); }
static void test_pad_value_inf(void **s) { (void)s; pad_slice_identity(INFINITY); }

/* A pad filled with copies: each element's derivative sums its copies'. */
static void copy_pad_check(Op op, int64_t axis, int64_t begin, int64_t size, const char *label) {
  Inst *x = tm_param(&t, "x", F32(2, 3, 4));
  Inst *y = tm_new(&t, op, 1, x);
  ir_set_int(y, "axis", axis);
  ir_set_int(y, "begin", begin);
  ir_set_int(y, "size", size);
  gradcheck(&t, ir_finish(y), label);
}

static void test_pad_reflect(void **s) {
  (void)s;
  copy_pad_check(OP_pad_reflect, 2, 2, 9, "pad_reflect axis=2 (2, 3)");
}

static void test_pad_replicate(void **s) {
  (void)s;
  copy_pad_check(OP_pad_replicate, 1, 4, 9, "pad_replicate axis=1 (4, 2)");
}

static void test_pad_circular(void **s) {
  (void)s;
  copy_pad_check(OP_pad_circular, -1, 4, 11, "pad_circular axis=-1 (4, 3)");
}

static void test_concat(void **s) {
  (void)s;
  Inst *a = tm_param(&t, "a", F32(2, 1)), *b = tm_param(&t, "b", F32(2, 3));
  Inst *c = tm_param(&t, "c", F32(2, 2));
  Inst *y = tm_new(&t, OP_concat, 3, a, b, c);
  ir_set_int(y, "axis", 1);
  gradcheck(&t, ir_finish(y), "concat axis=1");
}

static void test_broadcast(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(3, 1));
  gradcheck(&t, ir_finish(with_ints(tm_new(&t, OP_broadcast, 1, x), "shape", 3, (int64_t[]){2, 3, 4})),
            "broadcast [3,1]->[2,3,4]");
}

/* ---- convolution and pooling ---- */

/* conv2d of x and w with stride, padding, dilation (pairs) and groups. */
static Inst *conv(Inst *x, Inst *w, const int64_t *st, const int64_t *pd, const int64_t *dl,
                  int64_t groups) {
  Inst *y = tm_new(&t, OP_conv2d, 2, x, w);
  ir_set_ints(y, "stride", st, 2);
  ir_set_ints(y, "padding", pd, 2);
  ir_set_ints(y, "dilation", dl, 2);
  ir_set_int(y, "groups", groups);
  return ir_finish(y);
}

static void conv_check(Type tx, Type tw, const int64_t *st, const int64_t *pd, const int64_t *dl,
                       int64_t groups, const char *label) {
  Inst *x = tm_param(&t, "x", tx), *w = tm_param(&t, "w", tw);
  gradcheck(&t, conv(x, w, st, pd, dl, groups), label);
}

static void test_conv2d(void **s) {
  (void)s;
  conv_check(F32(2, 3, 5, 6), F32(4, 3, 3, 2), (int64_t[]){1, 1}, (int64_t[]){0, 0},
             (int64_t[]){1, 1}, 1, "conv2d");
}

static void test_conv2d_strided(void **s) {
  (void)s;
  conv_check(F32(2, 2, 7, 6), F32(3, 2, 3, 3), (int64_t[]){2, 2}, (int64_t[]){1, 2},
             (int64_t[]){2, 1}, 1, "conv2d stride 2 pad [1,2] dil [2,1]");
}

static void test_conv2d_groups(void **s) {
  (void)s;
  conv_check(F32(2, 4, 5, 5), F32(6, 2, 3, 3), (int64_t[]){2, 1}, (int64_t[]){1, 1},
             (int64_t[]){1, 2}, 2, "conv2d groups 2");
}

/* A pooling of x, not yet finished (its options may follow). */
static Inst *pool_new(Op op, Inst *x, const int64_t *k, const int64_t *st, const int64_t *pd) {
  Inst *y = tm_new(&t, op, 1, x);
  ir_set_ints(y, "kernel", k, 2);
  ir_set_ints(y, "stride", st, 2);
  ir_set_ints(y, "padding", pd, 2);
  return y;
}

static Inst *pool(Op op, Inst *x, const int64_t *k, const int64_t *st, const int64_t *pd) {
  return ir_finish(pool_new(op, x, k, st, pd));
}

/* Distinct values keep each window's maximum where it is under the steps. */
static void test_max_pool2d(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 5, 7));
  fill_distinct(tm_data(&t, "x"), 210, -1, 0.05);
  gradcheck(&t, pool(OP_max_pool2d, x, (int64_t[]){3, 2}, (int64_t[]){2, 2}, (int64_t[]){1, 1}),
            "max_pool2d k [3,2] s 2 p 1");
}

static void test_avg_pool2d(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 2, 5, 6));
  gradcheck(&t, pool(OP_avg_pool2d, x, (int64_t[]){3, 3}, (int64_t[]){2, 1}, (int64_t[]){1, 1}),
            "avg_pool2d k 3 s [2,1] p 1");
}

/* ceil_mode (a last window clipped at the input's end, one starting in the
 * padding dropped) with dilation. */
static void test_max_pool2d_ceil_dilation(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 2, 8, 7));
  fill_distinct(tm_data(&t, "x"), 224, -1, 0.05);
  Inst *y = pool_new(OP_max_pool2d, x, (int64_t[]){3, 2}, (int64_t[]){2, 3}, (int64_t[]){1, 1});
  ir_set_int(y, "ceil_mode", 1);
  ir_set_ints(y, "dilation", (int64_t[]){2, 2}, 2);
  gradcheck(&t, ir_finish(y), "max_pool2d k [3,2] s [2,3] p 1 d 2 ceil_mode");
}

/* ceil_mode windows past the padded input, counted with and without the
 * padding; a divisor_override. */
static void avg_options(int64_t with_pad, int64_t divisor, const char *label) {
  Inst *x = tm_param(&t, "x", F32(2, 2, 6, 5));
  Inst *y = pool_new(OP_avg_pool2d, x, (int64_t[]){3, 2}, (int64_t[]){2, 3}, (int64_t[]){1, 1});
  ir_set_int(y, "ceil_mode", 1);
  ir_set_int(y, "count_include_pad", with_pad);
  if (divisor)
    ir_set_int(y, "divisor_override", divisor);
  gradcheck(&t, ir_finish(y), label);
}

static void test_avg_pool2d_ceil(void **s) {
  (void)s;
  avg_options(1, 0, "avg_pool2d k [3,2] s [2,3] p 1 ceil_mode");
}

static void test_avg_pool2d_no_pad(void **s) {
  (void)s;
  avg_options(0, 0, "avg_pool2d ceil_mode count_include_pad false");
}

static void test_avg_pool2d_divisor(void **s) {
  (void)s;
  avg_options(0, 5, "avg_pool2d ceil_mode divisor_override 5");
}

/* conv2d + bias, tanh, avg_pool2d, flattened into a linear layer and
 * cross_entropy: the loss of a small CNN (smooth: the kinks of relu and of
 * max_pool2d would move under the finite differences' steps). */
static void test_cnn(void **s) {
  (void)s;
  Inst *x = tm_input(&t, "x", F32(3, 2, 6, 6)), *y = tm_input(&t, "y", I32(3));
  Inst *k = tm_param(&t, "k", F32(4, 2, 3, 3)), *b = tm_param(&t, "b", F32(4, 1, 1));
  Inst *w = tm_param(&t, "w", F32(36, 5));
  int32_t *lab = tm_data(&t, "y");
  for (int i = 0; i < 3; i++)
    lab[i] = (2 * i + 1) % 5;
  Inst *c = conv(x, k, (int64_t[]){1, 1}, (int64_t[]){1, 1}, (int64_t[]){1, 1}, 1);
  Inst *h = tm_op(&t, OP_tanh, 1, tm_op(&t, OP_add, 2, c, b));
  Inst *p = pool(OP_avg_pool2d, h, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){0, 0});
  Inst *f = ir_finish(with_ints(tm_new(&t, OP_reshape, 1, p), "shape", 2, (int64_t[]){3, 36}));
  gradcheck(&t, tm_op(&t, OP_cross_entropy, 2, tm_op(&t, OP_matmul, 2, f, w), y), "cnn + cross_entropy");
}

/* ---- compositions ---- */

/* normalize(x) * g + b: the layer norm of a transformer. Rows of x are spread
 * out: with a small variance the curvature would defeat finite differences. */
static void test_layer_norm(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 4)), *g = tm_param(&t, "g", F32(4));
  Inst *b = tm_param(&t, "b", F32(4));
  float *xv = tm_data(&t, "x");
  for (int r = 0; r < 6; r++)
    fill_distinct(xv + 4 * r, 4, -1.5, 1);
  Inst *n = ir_finish(tm_new(&t, OP_normalize, 1, x));
  gradcheck(&t, tm_op(&t, OP_add, 2, tm_op(&t, OP_mul, 2, n, g), b), "layer norm");
}

/* softmax(causal_mask(q k^T / sqrt(d))) v over a batch of sequences. */
static void test_attention(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(2, 4, 3)), *k = tm_param(&t, "k", F32(2, 4, 3));
  Inst *v = tm_param(&t, "v", F32(2, 4, 3));
  Inst *sc = tm_new(&t, OP_matmul, 2, q, k);
  ir_set_int(sc, "tb", 1);
  sc = tm_op(&t, OP_mul, 2, ir_finish(sc), tm_const(&t, 1 / sqrt(3.0)));
  Inst *p = tm_op(&t, OP_softmax, 1, tm_op(&t, OP_causal_mask, 1, sc));
  gradcheck(&t, tm_op(&t, OP_matmul, 2, p, v), "attention");
}

/* The attention op by blocks: Tq and Tk odd and unequal, causal and not, and
 * one value as query, key and value (its adjoints add up). */
static Inst *sdpa(Inst *q, Inst *k, Inst *v, bool causal, double scale) {
  Inst *y = tm_new(&t, OP_sdpa, 3, q, k, v);
  if (causal)
    ir_set_int(y, "causal", 1);
  ir_set_float(y, "scale", scale);
  return ir_finish(y);
}

static void test_sdpa(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(2, 2, 5, 3)), *k = tm_param(&t, "k", F32(2, 2, 7, 3));
  Inst *v = tm_param(&t, "v", F32(2, 2, 7, 3));
  gradcheck(&t, sdpa(q, k, v, false, 0.8), "sdpa Tq 5 Tk 7");
}

static void test_sdpa_causal(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(1, 3, 7, 2)), *k = tm_param(&t, "k", F32(1, 3, 5, 2));
  Inst *v = tm_param(&t, "v", F32(1, 3, 5, 2));
  gradcheck(&t, sdpa(q, k, v, true, 1 / sqrt(2.0)), "sdpa causal Tq 7 Tk 5");
}

static void test_sdpa_self(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(1, 2, 6, 4));
  gradcheck(&t, sdpa(x, x, x, true, 0.5), "sdpa causal q = k = v");
}

/* sdpa with a mask operand m (NULL: none) and dropout p (0: none). */
static Inst *sdpa_with(Inst *q, Inst *k, Inst *v, Inst *m, double p) {
  Inst *y = m ? tm_new(&t, OP_sdpa, 4, q, k, v, m) : tm_new(&t, OP_sdpa, 3, q, k, v);
  ir_set_float(y, "scale", 0.7);
  if (p > 0) {
    ir_set_float(y, "p", p);
    ir_set_int(y, "seed", 5);
  }
  return ir_finish(y);
}

/* An additive f32 mask [Tq, Tk] broadcast over B and H, with -inf in places
 * (a whole row of it: a row that sees no key gives zeros and no gradient). */
static void test_sdpa_mask_f32(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(2, 2, 5, 3)), *k = tm_param(&t, "k", F32(2, 2, 7, 3));
  Inst *v = tm_param(&t, "v", F32(2, 2, 7, 3)), *m = tm_input(&t, "m", F32(5, 7));
  float *mv = tm_data(&t, "m");
  for (int j = 0; j < 7; j++)
    mv[2 * 7 + j] = -INFINITY;
  mv[4 * 7 + 1] = mv[0] = -INFINITY;
  gradcheck(&t, sdpa_with(q, k, v, m, 0), "sdpa f32 mask");
}

/* A bool (i32) mask [H, 1, Tk] broadcast over B and the queries. */
static void test_sdpa_mask_i32(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(2, 3, 4, 2)), *k = tm_param(&t, "k", F32(2, 3, 6, 2));
  Inst *v = tm_param(&t, "v", F32(2, 3, 6, 2)), *m = tm_input(&t, "m", I32(3, 1, 6));
  int32_t *mv = tm_data(&t, "m");
  for (int e = 0; e < 18; e++)
    mv[e] = e % 4 != 1;
  gradcheck(&t, sdpa_with(q, k, v, m, 0), "sdpa i32 mask");
}

/* Dropout of the attention probabilities: the backward redraws the mask. */
static void test_sdpa_dropout(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(1, 2, 6, 3)), *k = tm_param(&t, "k", F32(1, 2, 5, 3));
  Inst *v = tm_param(&t, "v", F32(1, 2, 5, 3));
  gradcheck(&t, sdpa_with(q, k, v, NULL, 0.4), "sdpa dropout 0.4");
}

/* Dropout and an f32 mask [B, H, Tq, Tk] at once, q = k = v. */
static void test_sdpa_mask_dropout(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 2, 6, 3)), *m = tm_input(&t, "m", F32(2, 2, 6, 6));
  gradcheck(&t, sdpa_with(x, x, x, m, 0.3), "sdpa mask and dropout");
}

/* An f32 mask that is a param gets the scores' adjoint summed over its
 * broadcast dims: [Tq, Tk] (over B and H), and [B, 1, Tq, Tk] with dropout
 * and causal. */
static void test_sdpa_mask_param(void **s) {
  (void)s;
  Inst *q = tm_param(&t, "q", F32(2, 2, 5, 3)), *k = tm_param(&t, "k", F32(2, 2, 7, 3));
  Inst *v = tm_param(&t, "v", F32(2, 2, 7, 3)), *m = tm_param(&t, "m", F32(5, 7));
  gradcheck(&t, sdpa_with(q, k, v, m, 0), "sdpa mask param");
}

static void test_sdpa_mask_param_dropout(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(2, 3, 6, 2)), *m = tm_param(&t, "m", F32(2, 1, 6, 6));
  Inst *y = sdpa_with(x, x, x, m, 0.3);
  ir_set_int(y, "causal", 1);
  gradcheck(&t, ir_finish(y), "sdpa mask param, dropout, causal");
}

/* relu(x @ w1 + b1) @ w2 + b2 into cross_entropy: the loss itself. */
static void test_mlp(void **s) {
  (void)s;
  Inst *x = tm_input(&t, "x", F32(6, 3)), *y = tm_input(&t, "y", I32(6));
  Inst *w1 = tm_param(&t, "w1", F32(3, 5)), *b1 = tm_param(&t, "b1", F32(5));
  Inst *w2 = tm_param(&t, "w2", F32(5, 4)), *b2 = tm_param(&t, "b2", F32(4));
  int32_t *lab = tm_data(&t, "y");
  for (int k = 0; k < 6; k++)
    lab[k] = k % 4;
  Inst *h = tm_op(&t, OP_relu, 1, tm_op(&t, OP_add, 2, tm_op(&t, OP_matmul, 2, x, w1), b1));
  Inst *logits = tm_op(&t, OP_add, 2, tm_op(&t, OP_matmul, 2, h, w2), b2);
  gradcheck(&t, tm_op(&t, OP_cross_entropy, 2, logits, y), "mlp + cross_entropy");
}

/* A param read by two loads, through sigmoid and tanh and exp/log. */
static void test_chain(void **s) {
  (void)s;
  Inst *x = tm_param(&t, "x", F32(3, 2));
  Inst *x2 = tm_new(&t, OP_load, 0);
  ir_set_str(x2, "global", "x");
  ir_finish(x2);
  Inst *a = tm_op(&t, OP_sigmoid, 1, x), *b = tm_op(&t, OP_tanh, 1, x2);
  Inst *c = tm_op(&t, OP_log, 1, tm_op(&t, OP_add, 2, tm_op(&t, OP_exp, 1, a), b));
  gradcheck(&t, tm_op(&t, OP_sub, 2, c, tm_op(&t, OP_div, 2, a, tm_op(&t, OP_sqrt, 1, tm_op(&t, OP_exp, 1, b)))),
            "chain, two loads of x");
}

#define T(f) cmocka_unit_test_setup_teardown(f, tm_setup, tm_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
    T(test_add), T(test_add_bias), T(test_add_outer), T(test_add_scalar), T(test_sub),
    T(test_mul), T(test_div), T(test_mul_const), T(test_mul_self), T(test_neg), T(test_exp),
    T(test_log), T(test_sqrt), T(test_tanh), T(test_sigmoid), T(test_gelu), T(test_gelu_tanh),
    T(test_relu), T(test_where), T(test_mask_mul), T(test_clamp), T(test_clamp_min),
    T(test_clamp_max), T(test_hardtanh), T(test_maximum), T(test_minimum),
    T(test_pow), T(test_pow_base), T(test_pow_odd),
    T(test_sum), T(test_sum_keep), T(test_sum_all), T(test_sum_neg), T(test_mean),
    T(test_mean_keep), T(test_max), T(test_max_keep), T(test_matmul), T(test_matmul_ta),
    T(test_matmul_tb), T(test_matmul_tab), T(test_matmul_batch), T(test_matmul_batch_tab),
    T(test_matmul_bcast), T(test_matmul_bcast_tb), T(test_matmul_bcast_ta),
    T(test_matmul_bcast_tab), T(test_matmul_kfold), T(test_softmax), T(test_softmax_axis0), T(test_log_softmax),
    T(test_cross_entropy), T(test_cross_entropy_smoothed), T(test_bce_with_logits), T(test_mse), T(test_normalize), T(test_embedding),
    T(test_embedding_bag_sum), T(test_embedding_bag_mean), T(test_embedding_bag_max),
    T(test_embedding_bag_psw), T(test_embedding_bag_offsets), T(test_embedding_bag_offsets_mean),
    T(test_embedding_bag_offsets_max), T(test_dropout),
    T(test_causal_mask), T(test_gather0), T(test_gather1), T(test_gather2), T(test_cumsum0),
    T(test_cumsum1), T(test_cumsum2), T(test_tril), T(test_tril_below), T(test_triu),
    T(test_int_promoted), T(test_sdpa), T(test_sdpa_causal), T(test_sdpa_self),
    T(test_sdpa_mask_f32), T(test_sdpa_mask_i32), T(test_sdpa_dropout), T(test_sdpa_mask_dropout),
    T(test_sdpa_mask_param), T(test_sdpa_mask_param_dropout),
    T(test_reshape), T(test_transpose), T(test_slice), T(test_slices_apart), T(test_slices_overlap), T(test_pad),
    T(test_pad_value), T(test_pad_value_huge), T(test_pad_value_neg_inf), T(test_pad_value_inf),
    T(test_pad_reflect), T(test_pad_replicate), T(test_pad_circular),
    T(test_concat), T(test_broadcast), T(test_layer_norm), T(test_attention), T(test_mlp),
    T(test_chain),
    T(test_conv2d), T(test_conv2d_strided), T(test_conv2d_groups), T(test_max_pool2d),
    T(test_avg_pool2d), T(test_max_pool2d_ceil_dilation), T(test_avg_pool2d_ceil),
    T(test_avg_pool2d_no_pad), T(test_avg_pool2d_divisor), T(test_cnn),
  };
  return cmocka_run_group_tests_name("autodiff gradients", tests, NULL, NULL);
}
