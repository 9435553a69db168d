/* test_codegen_run.c: small models compiled to objects, linked by the C
 * compiler with test_codegen_harness.c and libdtrt, and run. Their forward
 * outputs, training losses and updated params and optimizer state must equal
 * those of the reference interpreter (ir/interp.c) within 1e-5 relative, each
 * step starting from the same state. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_codegen.h"

static int64_t elems(const Type *t) { return type_elems(t); }

/* A test may choose the f32 inputs and check the forward outputs itself,
 * besides the comparison with the interpreter. */
static void (*fill_input)(float *x, int64_t n);
static void (*check_output)(int k, const float *x, const float *got, int64_t n);

static void run_model(CT *t, int steps) { ct_run(t, steps, fill_input, check_output); }

/* x[6,5] -> 7 relu -> 3 logits, cross entropy with y */
static void classifier(CT *t, const char *opt) {
  Inst *x = ct_global(t, "x", G_INPUT, ty(DT_F32, 2, 6, 5), NULL);
  Inst *y = ct_global(t, "y", G_INPUT, ty(DT_I32, 1, 6), NULL);
  Inst *w1 = ct_global(t, "w1", G_PARAM, ty(DT_F32, 2, 5, 7), "glorot");
  Inst *b1 = ct_global(t, "b1", G_PARAM, ty(DT_F32, 1, 7), "normal");
  Inst *w2 = ct_global(t, "w2", G_PARAM, ty(DT_F32, 2, 7, 3), "glorot");
  Inst *b2 = ct_global(t, "b2", G_PARAM, ty(DT_F32, 1, 3), "zeros");
  ir_find_global(t->m, "b1")->init_arg = 0.5;
  Inst *h = ct_op(t, OP_relu, 1, ct_op(t, OP_add, 2, ct_op(t, OP_matmul, 2, x, w1), b1));
  Inst *logits = ct_op(t, OP_add, 2, ct_op(t, OP_matmul, 2, h, w2), b2);
  ct_output(t, logits, "logits");
  Inst *loss = ct_op(t, OP_cross_entropy, 2, logits, y);
  ct_output(t, loss, "loss");
  ct_output(t, ct_op(t, OP_mul, 2, loss, ct_const(t, 2)), "twice_loss");
  ct_train(t, opt, 0.1);
}

static void classifier_sgd(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "clsgd");
  classifier(&t, "sgd");
  run_model(&t, 3);
  ct_free(&t);
}

static void classifier_adam(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "cladam");
  classifier(&t, "adam");
  run_model(&t, 3);
  ct_free(&t);
}

/* The classifier with its step functions cut into parts of one statement
 * each (CgOptions.part_ops): each part makes again what it reads. */
static void classifier_parts(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "clparts");
  classifier(&t, "adam");
  t.part_ops = 1;
  run_model(&t, 3);
  const char *ll = ct_emit(&t, "llvm", NULL, NULL, 0);
  char *text = ll ? ct_read(ll, NULL) : NULL;
  assert_non_null(text);
  assert_non_null(strstr(text, "@clparts.train_step.part9("));
  assert_non_null(strstr(text, "@clparts.forward.part3("));
  free(text);
  ct_free(&t);
}

/* h <- tanh(h * 1.01 + 0.5), 300 times after a product, and a softmax every
 * 50: groups cut at 64 ops by fusion, more of them and softmaxes than 8 (a
 * group counts as one statement) in @forward and @train_step, which are
 * cut into several parts of at most 8. */
static void long_chain(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "chain");
  t.part_ops = 8;
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 4, 6), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 6, 6), "glorot");
  Inst *h = ct_op(&t, OP_matmul, 2, x, w);
  for (int k = 1; k <= 300; k++) {
    h = ct_op(&t, OP_add, 2, ct_op(&t, OP_mul, 2, h, ct_const(&t, 1.01)), ct_const(&t, 0.5));
    h = ct_op(&t, OP_tanh, 1, h);
    if (k % 50 == 0)
      h = ct_op(&t, OP_softmax, 1, h);
  }
  ct_output(&t, h, "h");
  Inst *loss = ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, h, h));
  ir_set_ints(loss, "axes", (int64_t[]){0, 1}, 2);
  ir_finish(loss);
  ct_output(&t, loss, "loss");
  ct_train(&t, "sgd", 0.5);
  run_model(&t, 2);
  const char *ll = ct_emit(&t, "llvm", NULL, NULL, 0);
  char *text = ll ? ct_read(ll, NULL) : NULL;
  assert_non_null(text);
  assert_non_null(strstr(text, "@chain.train_step.part2("));
  assert_non_null(strstr(text, "@chain.forward.part2("));
  free(text);
  ct_free(&t);
}

/* Every elementwise op, broadcasting over [4,3,5] from [4,1,5], [3,1] and
 * [5], trained through mse. */
/* The same classifier with -fepilogue: its products head the groups that
 * read them (bias, activation, ReLU derivative); products this small go to
 * OpenBLAS, so each group runs after its call (test_codegen_gemm runs
 * epilogues inside the generated GEMM). */
static void classifier_epilogue(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "cle");
  classifier(&t, "adam");
  t.m->epilogues = true;
  run_model(&t, 3);
  int heads = 0;
  Func *f = ir_find_func(t.m, "train_step");
  for (int i = 0; i < f->inst.n; i++)
    heads += f->inst.a[i]->op == OP_matmul && f->inst.a[i]->fuse;
  assert_true(heads >= 3);   /* two forward products and the first backward one */
  ct_free(&t);
}

static void elementwise_zoo(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "zoo");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 3, 4, 1, 5), NULL);
  Inst *tg = ct_global(&t, "target", G_INPUT, ty(DT_F32, 3, 4, 3, 5), NULL);
  Inst *p = ct_global(&t, "p", G_PARAM, ty(DT_F32, 2, 3, 1), "uniform");
  Inst *q = ct_global(&t, "q", G_PARAM, ty(DT_F32, 1, 5), "normal");
  ir_find_global(t.m, "p")->init_arg = 1;
  ir_find_global(t.m, "q")->init_arg = 1;
  Inst *xq = ct_op(&t, OP_mul, 2, x, q);
  Inst *a = ct_op(&t, OP_mul, 2, ct_op(&t, OP_gelu, 1, xq), ct_op(&t, OP_sigmoid, 1, p));
  Inst *b = ct_op(&t, OP_div, 2, ct_op(&t, OP_tanh, 1, xq),
                  ct_op(&t, OP_add, 2, ct_op(&t, OP_exp, 1, p), ct_const(&t, 2)));
  Inst *c = ct_op(&t, OP_sqrt, 1, ct_op(&t, OP_add, 2, ct_op(&t, OP_mul, 2, x, x), ct_const(&t, 1)));
  Inst *d = ct_op(&t, OP_log, 1, ct_op(&t, OP_add, 2, ct_op(&t, OP_mul, 2, p, p), ct_const(&t, 1)));
  Inst *e = ct_op(&t, OP_neg, 1, ct_op(&t, OP_relu, 1, ct_op(&t, OP_sub, 2, xq, p)));
  Inst *out = ct_op(&t, OP_add, 2, ct_op(&t, OP_sub, 2, ct_op(&t, OP_add, 2, a, b), c),
                    ct_op(&t, OP_add, 2, d, e));
  ct_output(&t, out, "out");
  ct_output(&t, ct_op(&t, OP_mse, 2, out, tg), "loss");
  ct_train(&t, "adam", 0.05);
  run_model(&t, 3);
  ct_free(&t);
}

static Inst *with_ints(Inst *i, const char *name, int n, ...) {
  int64_t v[8];
  va_list ap;
  va_start(ap, n);
  for (int k = 0; k < n; k++)
    v[k] = va_arg(ap, int);
  va_end(ap);
  ir_set_ints(i, name, v, n);
  return i;
}

/* Kernels with attributes and data movement: reshape (an alias), transpose,
 * normalize, softmax, slice, concat, max and mean with keepdim. */
static void kernels_and_shapes(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "ks");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 3, 2, 3, 4), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 6, 5), "glorot");
  Inst *r = ir_finish(with_ints(ct_new(&t, OP_reshape, 1, x), "shape", 2, 6, 4));
  Inst *tr = ir_finish(with_ints(ct_new(&t, OP_transpose, 1, r), "perm", 2, 1, 0));
  Inst *h = ct_op(&t, OP_normalize, 1, ct_op(&t, OP_matmul, 2, tr, w));
  Inst *sm = ct_new(&t, OP_softmax, 1, h);
  ir_set_int(sm, "axis", 0);
  ir_finish(sm);
  Inst *sl = ct_new(&t, OP_slice, 1, sm);
  ir_set_int(sl, "axis", 1);
  ir_set_int(sl, "begin", 1);
  ir_set_int(sl, "end", 4);
  ir_finish(sl);
  Inst *cc = ct_new(&t, OP_concat, 2, sl, h);
  ir_set_int(cc, "axis", 1);
  ir_finish(cc);
  Inst *mx = ir_finish(with_ints(ct_new(&t, OP_max, 1, cc), "axes", 1, 1));
  Inst *mk = with_ints(ct_new(&t, OP_mean, 1, cc), "axes", 1, 0);
  ir_set_int(mk, "keepdim", 1);
  ir_finish(mk);
  Inst *mix = ct_op(&t, OP_mul, 2, cc, mk);
  ct_output(&t, mix, "mix");
  ct_output(&t, mx, "mx");
  Inst *loss = ir_finish(with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, mix, mix)), "axes", 2, 0, 1));
  ct_output(&t, ct_op(&t, OP_add, 2, loss, ir_finish(with_ints(ct_new(&t, OP_sum, 1, mx), "axes", 1, 0))), "loss");
  ct_train(&t, "sgd", 0.5);
  run_model(&t, 2);
  ct_free(&t);
}

/* embedding_bag in each mode through libdtrt's kernels: ids [4,3] in
 * rows 0..2 of two tables (mean skipping row 2, max), a flat [6] cut by
 * offsets [0, 1, 2] summed with trained per-sample weights (the harness's
 * i32 inputs are i * 7 % 3). */
static Inst *bag_op(CT *t, int mode, int pad, int nin, Inst *a, Inst *b, Inst *c, Inst *d) {
  Inst *i = ct_new(t, OP_embedding_bag, nin, a, b, c, d);
  ir_set_int(i, "mode", mode);
  if (pad >= 0)
    ir_set_int(i, "padding_idx", pad);
  ir_set_str(i, "table", "e");
  return ir_finish(i);
}

static void embedding_bags(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "bags");
  Inst *ids = ct_global(&t, "ids", G_INPUT, ty(DT_I32, 2, 4, 3), NULL);
  Inst *flat = ct_global(&t, "flat", G_INPUT, ty(DT_I32, 1, 6), NULL);
  Inst *offs = ct_global(&t, "offs", G_INPUT, ty(DT_I32, 1, 3), NULL);
  Inst *e1 = ct_global(&t, "e1", G_PARAM, ty(DT_F32, 2, 5, 4), "glorot");
  Inst *e2 = ct_global(&t, "e2", G_PARAM, ty(DT_F32, 2, 5, 4), "glorot");
  Inst *sw = ct_global(&t, "sw", G_PARAM, ty(DT_F32, 1, 6), "ones");
  Inst *a = bag_op(&t, DT_BAG_MEAN, 2, 2, ids, e1, NULL, NULL);
  Inst *b = bag_op(&t, DT_BAG_MAX, -1, 2, ids, e2, NULL, NULL);
  Inst *c = bag_op(&t, DT_BAG_SUM, -1, 4, flat, e1, offs, sw);
  Inst *ab = ct_op(&t, OP_add, 2, a, b);
  ct_output(&t, ab, "ab");
  ct_output(&t, c, "c");
  Inst *l1 = ir_finish(with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, ab, ab)), "axes", 2, 0, 1));
  Inst *l2 = ir_finish(with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, c, c)), "axes", 2, 0, 1));
  ct_output(&t, ct_op(&t, OP_add, 2, l1, l2), "loss");
  ct_train(&t, "sgd", 0.5);
  run_model(&t, 3);
  ct_free(&t);
}

/* torch's functions on indices and integers through libdtrt's kernels:
 * i32 arithmetic on the ids (i * 7 % 3 from the harness), their f32, an
 * arange made with no operand, gather, one_hot, cumsum and tril, trained. */
static Inst *attr1(Inst *i, const char *name, int64_t v) {
  ir_set_int(i, name, v);
  return i;
}

static void indices_and_integers(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "idx");
  Inst *ids = ct_global(&t, "ids", G_INPUT, ty(DT_I32, 1, 6), NULL);
  Inst *p = ct_global(&t, "p", G_PARAM, ty(DT_F32, 2, 6, 4), "glorot");
  Inst *a = ir_finish(attr1(attr1(ct_new(&t, OP_int_elem, 1, ids), "fn", DT_INT_ADD), "k", 1));
  Inst *sq = ir_finish(attr1(ct_new(&t, OP_int_elem, 2, a, a), "fn", DT_INT_MUL));
  Inst *f = ir_finish(with_ints(ct_new(&t, OP_reshape, 1, ct_op(&t, OP_to_f32, 1, sq)), "shape", 2, 6, 1));
  Inst *r = ct_new(&t, OP_arange, 0);
  ir_set_int(r, "size", 4);
  ir_set_float(r, "start", 3);
  ir_set_float(r, "step", -2);
  ir_set_int(r, "i32", 1);
  Inst *rf = ct_op(&t, OP_to_f32, 1, ir_finish(r));
  Inst *ix = ir_finish(with_ints(ct_new(&t, OP_reshape, 1, a), "shape", 2, 6, 1));
  Inst *g = ir_finish(attr1(ct_new(&t, OP_gather, 2, p, ix), "axis", 1));
  Inst *h = ir_finish(attr1(ct_new(&t, OP_one_hot, 1, ids), "classes", 4));
  Inst *cs = ir_finish(attr1(ct_new(&t, OP_cumsum, 1, p), "axis", 0));
  Inst *tl = ir_finish(attr1(ct_new(&t, OP_tril, 1, p), "diagonal", 1));
  Inst *v = ct_op(&t, OP_add, 2, ct_op(&t, OP_mul, 2, g, f), ct_op(&t, OP_mul, 2, h, p));
  v = ct_op(&t, OP_add, 2, ct_op(&t, OP_add, 2, v, cs), ct_op(&t, OP_mul, 2, tl, rf));
  ct_output(&t, v, "v");
  Inst *loss = ir_finish(with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, v, v)), "axes", 2, 0, 1));
  ct_output(&t, loss, "loss");
  ct_train(&t, "sgd", 0.1);
  run_model(&t, 2);
  ct_free(&t);
}

/* Attention by blocks, causal with more queries than keys and not, its
 * derivative (sdpa_lse, sdpa_grad and the slices), two steps. */
static void attention(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "attn");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 4, 2, 3, 70, 5), NULL);
  Inst *k = ct_global(&t, "k", G_PARAM, ty(DT_F32, 4, 2, 3, 67, 5), "glorot");
  Inst *v = ct_global(&t, "v", G_PARAM, ty(DT_F32, 4, 2, 3, 67, 5), "glorot");
  Inst *a = ct_new(&t, OP_sdpa, 3, x, k, v);
  ir_set_int(a, "causal", 1);
  ir_set_float(a, "scale", 0.45);
  ir_finish(a);
  Inst *b = ct_new(&t, OP_sdpa, 3, a, x, x);
  ir_set_float(b, "scale", 1.3);
  ir_finish(b);
  ct_output(&t, b, "att");
  Inst *loss = with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, b, b)), "axes", 4, 0, 1, 2, 3);
  ct_output(&t, ir_finish(loss), "loss");
  ct_train(&t, "sgd", 0.5);
  run_model(&t, 2);
  ct_free(&t);
}

/* Attention with an i32 (bool) mask broadcast over B, and one with an f32
 * mask that is a param (its gradient sdpa_dmask's) and dropout, whose mask
 * the generated code draws at each step as the interpreter does; two
 * steps. */
static void attention_mask_dropout(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "attnmask");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 4, 2, 3, 70, 5), NULL);
  Inst *m = ct_global(&t, "m", G_INPUT, ty(DT_I32, 4, 1, 3, 70, 67), NULL);
  Inst *f = ct_global(&t, "f", G_PARAM, ty(DT_F32, 2, 70, 70), "glorot");
  Inst *k = ct_global(&t, "k", G_PARAM, ty(DT_F32, 4, 2, 3, 67, 5), "glorot");
  Inst *v = ct_global(&t, "v", G_PARAM, ty(DT_F32, 4, 2, 3, 67, 5), "glorot");
  Inst *a = ct_new(&t, OP_sdpa, 4, x, k, v, m);
  ir_set_float(a, "scale", 0.45);
  ir_finish(a);
  Inst *b = ct_new(&t, OP_sdpa, 4, a, x, x, f);
  ir_set_float(b, "scale", 1.3);
  ir_set_float(b, "p", 0.3);
  ir_set_int(b, "seed", 77);
  ir_finish(b);
  ct_output(&t, b, "att");
  Inst *loss = with_ints(ct_new(&t, OP_mean, 1, ct_op(&t, OP_mul, 2, b, b)), "axes", 4, 0, 1, 2, 3);
  ct_output(&t, ir_finish(loss), "loss");
  ct_train(&t, "sgd", 0.5);
  run_model(&t, 2);
  ct_free(&t);
}

/* A pad of x filled by op (pad_reflect, ...) on axis at begin to size. */
static Inst *copy_pad(CT *t, Op op, Inst *x, int64_t axis, int64_t begin, int64_t size) {
  Inst *p = ct_new(t, op, 1, x);
  ir_set_int(p, "axis", axis);
  ir_set_int(p, "begin", begin);
  ir_set_int(p, "size", size);
  return ir_finish(p);
}

/* The pooling kernels' optional attributes as the generated calls pass
 * them: max_pool2d with ceil_mode and dilation, avg_pool2d with ceil_mode
 * and count_include_pad 0, and with divisor_override alone; the pads that
 * fill with copies; and their derivatives. */
static void pools_and_pads(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "pools");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 4, 2, 3, 9, 8), NULL);
  Inst *s = ct_global(&t, "s", G_PARAM, ty(DT_F32, 1, 8), "uniform");
  ir_find_global(t.m, "s")->init_arg = 1;
  Inst *xs = ct_op(&t, OP_mul, 2, x, s);
  Inst *mp = with_ints(ct_new(&t, OP_max_pool2d, 1, xs), "kernel", 2, 3, 3);
  with_ints(with_ints(mp, "stride", 2, 2, 2), "padding", 2, 1, 1);
  ir_set_int(mp, "ceil_mode", 1);
  ir_finish(with_ints(mp, "dilation", 2, 2, 1));
  Inst *ap = with_ints(ct_new(&t, OP_avg_pool2d, 1, mp), "kernel", 2, 2, 3);
  with_ints(with_ints(ap, "stride", 2, 2, 2), "padding", 2, 1, 1);
  ir_set_int(ap, "ceil_mode", 1);
  ir_set_int(ap, "count_include_pad", 0);
  ir_finish(ap);
  Inst *dp = with_ints(ct_new(&t, OP_avg_pool2d, 1, xs), "kernel", 2, 2, 2);
  with_ints(with_ints(dp, "stride", 2, 3, 2), "padding", 2, 0, 0);
  ir_set_int(dp, "divisor_override", 3);
  ir_finish(dp);
  ct_output(&t, ap, "ap");
  ct_output(&t, dp, "dp");
  Inst *la = ir_finish(
      with_ints(ct_new(&t, OP_sum, 1, ct_op(&t, OP_mul, 2, ap, ap)), "axes", 4, 0, 1, 2, 3));
  Inst *ld = ir_finish(
      with_ints(ct_new(&t, OP_sum, 1, ct_op(&t, OP_mul, 2, dp, dp)), "axes", 4, 0, 1, 2, 3));
  Inst *pr = copy_pad(&t, OP_pad_reflect, xs, 3, 2, 11);
  Inst *pp = copy_pad(&t, OP_pad_replicate, pr, 2, 1, 12);
  Inst *pc = copy_pad(&t, OP_pad_circular, pp, -1, 3, 15);
  ct_output(&t, pc, "pc");
  Inst *lp = ir_finish(
      with_ints(ct_new(&t, OP_sum, 1, ct_op(&t, OP_mul, 2, pc, pc)), "axes", 4, 0, 1, 2, 3));
  ct_output(&t, ct_op(&t, OP_add, 2, ct_op(&t, OP_add, 2, la, ld), lp), "loss");
  ct_train(&t, "sgd", 0.1);
  run_model(&t, 2);
  ct_free(&t);
}

/* pad's values: x [2,3,PH,PW] padded with each of pad_values (2 rows
 * before and 1 after, 1 column before and 2 after), then max_pool2d over
 * -inf pads: 2x2 of stride 1 after one row and column at the end (ONNX's
 * SAME_UPPER), 3x3 of stride 2 after one on each side. */
enum { PH = 5, PW = 6 };
static const double pad_values[] = {1.2, -3.0e38, -INFINITY, INFINITY};
static const struct { int k, s, before; } pad_pools[] = {{2, 1, 0}, {3, 2, 1}};

static Inst *const_pad(CT *t, Inst *x, int64_t axis, int64_t begin, int64_t size, double v) {
  Inst *p = ct_new(t, OP_pad, 1, x);
  ir_set_int(p, "axis", axis);
  ir_set_int(p, "begin", begin);
  ir_set_int(p, "size", size);
  ir_set_float(p, "value", v);
  return ir_finish(p);
}

static void pad_inputs(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)(0.37 * (double)(i % 7) - 1.1 + 1e-3 * (double)i);
}

/* Output k: the padded x, exactly (bit for bit), or a pooling against the
 * maximum over each window's places inside x. */
static void pad_check(int k, const float *x, const float *got, int64_t n) {
  int np = (int)COUNTOF(pad_values);
  if (k < np) {
    int h = PH + 3, w = PW + 3;
    assert_int_equal(n, 6 * h * w);
    float v = (float)pad_values[k];
    for (int c = 0; c < 6; c++)
      for (int i = 0; i < h; i++)
        for (int j = 0; j < w; j++) {
          int xi = i - 2, xj = j - 1;
          bool in = xi >= 0 && xi < PH && xj >= 0 && xj < PW;
          float want = in ? x[(c * PH + xi) * PW + xj] : v;
          const float *at = &got[(c * h + i) * w + j];
          if (memcmp(at, &want, 4))
            fail_msg("pad value %g: place (%d, %d, %d) is %.9g, not %.9g", pad_values[k], c, i, j,
                     *at, want);
        }
    return;
  }
  int K = pad_pools[k - np].k, S = pad_pools[k - np].s, B = pad_pools[k - np].before;
  int h = PH + 1 + B, w = PW + 1 + B, oh = (h - K) / S + 1, ow = (w - K) / S + 1;
  assert_int_equal(n, 6 * oh * ow);
  for (int c = 0; c < 6; c++)
    for (int i = 0; i < oh; i++)
      for (int j = 0; j < ow; j++) {
        float m = -INFINITY;
        for (int a = i * S - B; a < i * S - B + K; a++)
          for (int b = j * S - B; b < j * S - B + K; b++)
            if (a >= 0 && a < PH && b >= 0 && b < PW)
              m = fmaxf(m, x[(c * PH + a) * PW + b]);
        if (got[(c * oh + i) * ow + j] != m)
          fail_msg("pool %d: window (%d, %d, %d) is %.9g, not %.9g", k - np, c, i, j,
                   got[(c * oh + i) * ow + j], m);
      }
}

/* pad with the values that pad(x - v) + v got wrong (1.2 inexact, -3e38
 * losing x, -inf giving NaN) and inf, in the generated code and in the
 * interpreter, each checked against x directly; and max pooling after a
 * -inf pad against a plain loop. */
static void pad_values_exact(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "padv");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 4, 2, 3, PH, PW), NULL);
  for (int k = 0; k < COUNTOF(pad_values); k++) {
    double v = pad_values[k];
    ct_output(&t, const_pad(&t, const_pad(&t, x, 2, 2, PH + 3, v), -1, 1, PW + 3, v),
              arena_printf(t.a, "p%d", k));
  }
  for (int k = 0; k < COUNTOF(pad_pools); k++) {
    int K = pad_pools[k].k, S = pad_pools[k].s, B = pad_pools[k].before;
    Inst *p =
        const_pad(&t, const_pad(&t, x, 2, B, PH + 1 + B, -INFINITY), 3, B, PW + 1 + B, -INFINITY);
    Inst *mp = with_ints(ct_new(&t, OP_max_pool2d, 1, p), "kernel", 2, K, K);
    with_ints(with_ints(mp, "stride", 2, S, S), "padding", 2, 0, 0);
    ct_output(&t, ir_finish(mp), arena_printf(t.a, "m%d", k));
  }
  fill_input = pad_inputs;
  check_output = pad_check;
  run_model(&t, 0);
  fill_input = NULL;
  check_output = NULL;

  Func *fwd = ir_find_func(t.m, "forward");
  const Inst **outs = calloc((size_t)fwd->inst.n + 1, sizeof *outs);
  int nout = cg_func_outputs(fwd, NULL, outs);
  assert_int_equal(nout, COUNTOF(pad_values) + COUNTOF(pad_pools));
  float xv[2 * 3 * PH * PW], *want[8];
  pad_inputs(xv, COUNTOF(xv));
  Interp *it = interp_new(t.m);
  assert_true(interp_set_global(it, "x", xv));
  for (int k = 0; k < nout; k++)
    want[k] = calloc((size_t)elems(&outs[k]->in[0]->type), 4);
  if (!interp_run(it, "forward", (void *const *)want))
    fail_msg("interpreter: %s", interp_error(it));
  for (int k = 0; k < nout; k++) {
    pad_check(k, xv, want[k], elems(&outs[k]->in[0]->type));
    free(want[k]);
  }
  interp_free(it);
  free(outs);
  ct_free(&t);
}

/* An inference-only model: every kind of output, scalars among them; an
 * output named like a param. */
static void inference_only(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "inf");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 3, 4), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 1, 4), "ones");
  Inst *s = ct_op(&t, OP_mul, 2, x, w);
  ct_output(&t, s, "s");
  ct_output(&t, s, "again");
  ct_output(&t, w, "w");
  ct_output(&t, ct_const(&t, 2.5), "two_and_a_half");
  Inst *total = ir_finish(with_ints(ct_new(&t, OP_sum, 1, s), "axes", 2, 0, 1));
  ct_output(&t, total, "total");
  ct_output(&t, total, "total_again");
  ct_output(&t, ct_op(&t, OP_mul, 2, total, ct_const(&t, 3)), "triple");
  run_model(&t, 0);
  ct_free(&t);
}

static Inst *fn_op(Func *f, Op op, int nin, ...) {
  Inst *in[4];
  va_list ap;
  va_start(ap, nin);
  for (int k = 0; k < nin; k++)
    in[k] = va_arg(ap, Inst *);
  va_end(ap);
  return ir_new(f, op, (Loc){0}, nin, in);
}

static void fn_store(Func *f, const char *global, Inst *v) {
  Inst *s = ir_new(f, OP_store, (Loc){0}, 1, &v);
  ir_set_str(s, "global", global);
  ir_finish(s);
}

static Inst *total(Func *f, Inst *x) { return ir_finish(with_ints(fn_op(f, OP_sum, 1, x), "axes", 2, 0, 1)); }

/* A hand-written @train_step: a store whose global's old value is read
 * later (it must wait), a store followed by a load of the new value (the
 * old one is then copied), stores of a kernel result and of a reshape. */
static void stores_and_loads(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "sl");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 2, 2, 3), NULL);
  Inst *w = ct_global(&t, "w", G_PARAM, ty(DT_F32, 2, 3, 3), "glorot");
  ct_global(&t, "u", G_PARAM, ty(DT_F32, 2, 3, 3), "uniform");
  ir_find_global(t.m, "u")->init_arg = 0.5;
  ir_add_global(t.m, "r", G_STATE, ty(DT_F32, 1, 6), (Loc){0})->init = DT_INIT_ONES;
  ct_output(&t, ct_op(&t, OP_matmul, 2, x, w), "y");

  Func *f = ir_add_func(t.m, "train_step", (Loc){0});
  x = ct_load(&t, f, "x");
  w = ct_load(&t, f, "w");
  Inst *c = ir_new(f, OP_const, (Loc){0}, 0, NULL);
  ir_set_float(c, "value", 0.5);
  ir_finish(c);
  fn_store(f, "w", ir_finish(fn_op(f, OP_add, 2, ir_finish(fn_op(f, OP_mul, 2, w, c)), c)));
  Inst *y1 = ir_finish(fn_op(f, OP_matmul, 2, x, w));
  Inst *u = ct_load(&t, f, "u");
  fn_store(f, "u", ir_finish(fn_op(f, OP_matmul, 2, u, u)));
  Inst *u2 = ct_load(&t, f, "u");
  Inst *z = ir_finish(fn_op(f, OP_matmul, 2, x, u));
  Inst *z2 = ir_finish(fn_op(f, OP_matmul, 2, x, u2));
  Inst *loss = ir_finish(fn_op(f, OP_add, 2, ir_finish(fn_op(f, OP_add, 2, total(f, y1), total(f, z))),
                               total(f, z2)));
  Inst *o = ir_new(f, OP_output, (Loc){0}, 1, &loss);
  ir_set_str(o, "name", "loss");
  ir_finish(o);
  Inst *r = ct_load(&t, f, "r");
  fn_store(f, "r", ir_finish(with_ints(fn_op(f, OP_reshape, 1, y1), "shape", 1, 6)));
  fn_store(f, "r", ir_finish(fn_op(f, OP_add, 2, r, ir_finish(with_ints(fn_op(f, OP_reshape, 1, z), "shape", 1, 6)))));
  run_model(&t, 2);
  ct_free(&t);
}

/* Inputs from 1e-8 to 2.5e1 in magnitude, both signs, and the edges of
 * tanh's two formulas (0, 1/4, 9) and beyond. */
static void tanh_inputs(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((i % 2 ? -1 : 1) * pow(10, -8 + 9.4 * (double)(i / 2) / (double)(n / 2)));
  static const float edge[] = {0, 0.25f, -0.25f, 0.2499999f, 0.2500001f, 9, -9, 100, -100};
  for (int k = 0; k < COUNTOF(edge); k++)
    x[k] = edge[k];
}

static double worst_tanh, worst_gelu, worst_erf_gelu, worst_erf_grad;

/* tanh against double tanh, relative; gelu_tanh (the tanh form, ir/elem.c),
 * gelu (x Phi(x), by erf) and gelu_grad (dy (Phi(x) + x phi(x)), dy = x
 * here) against the same in double, absolute for |x| <= 1, relative to |x|
 * (|x|^2 for the gradient) above. */
static void tanh_check(int k, const float *x, const float *got, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double a = x[i], cdf = 0.5 * (1 + erf(a / sqrt(2.0)));
    double pdf = exp(-0.5 * a * a) / sqrt(2 * 3.14159265358979323846);
    if (k == 0) {
      double ref = tanh(a);
      double err = fabs(got[i] - ref) / fmax(fabs(ref), 1e-37);
      worst_tanh = fmax(worst_tanh, err);
    } else if (k == 1) {
      double ref = 0.5 * a * (1 + tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)));
      worst_gelu = fmax(worst_gelu, fabs(got[i] - ref) / fmax(1, fabs(a)));
    } else if (k == 2) {
      worst_erf_gelu = fmax(worst_erf_gelu, fabs(got[i] - a * cdf) / fmax(1, fabs(a)));
    } else {
      double ref = a * (cdf + a * pdf);
      worst_erf_grad = fmax(worst_erf_grad, fabs(got[i] - ref) / fmax(1, a * a));
    }
  }
}

/* The generated tanh (a polynomial and an exponential, so loops vectorise)
 * against libm in double: within 3e-7 relative; gelu_tanh within 1e-6; gelu
 * and its gradient by erf (a rational term and an exponential) within 5e-7. */
static void tanh_accuracy(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "th");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, 70001), NULL);
  ct_output(&t, ct_op(&t, OP_tanh, 1, x), "tanh");
  ct_output(&t, ct_op(&t, OP_gelu_tanh, 1, x), "gelu_tanh");
  ct_output(&t, ct_op(&t, OP_gelu, 1, x), "gelu");
  ct_output(&t, ct_op(&t, OP_gelu_grad, 2, x, x), "gelu_grad");
  fill_input = tanh_inputs;
  check_output = tanh_check;
  run_model(&t, 0);
  fill_input = NULL;
  check_output = NULL;
  printf("generated tanh: worst relative error %.3g; gelu_tanh: worst error %.3g; gelu: %.3g; "
         "gelu_grad: %.3g\n", worst_tanh, worst_gelu, worst_erf_gelu, worst_erf_grad);
  assert_true(worst_tanh <= 3e-7);
  assert_true(worst_gelu <= 1e-6);
  assert_true(worst_erf_gelu <= 5e-7);
  assert_true(worst_erf_grad <= 5e-7);
  ct_free(&t);
}

/* Inputs over every range exp, log and sigmoid meet: magnitudes from 1e-45
 * to 3e38, both signs, the edges of exp's range (ln FLT_MAX, where results
 * turn denormal, and beyond), and 0, inf and NaN. */
static void explog_inputs(float *x, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    x[i] = (float)((i % 2 ? -1 : 1) * pow(10, -44.8 + 83.3 * (double)(i / 2) / (double)(n / 2)));
  static const float edge[] = {0, -0.0f, 1, -1, 88.72283f, 88.7229f, 89, -87.3f, -103.9f, -104.1f,
                               -200, 1e-40f, 1.17549435e-38f, 3.4e38f, INFINITY, -INFINITY, NAN};
  for (int k = 0; k < COUNTOF(edge); k++)
    x[k] = edge[k];
  for (int64_t i = COUNTOF(edge); i < n / 4; i++)   /* exp's whole range, densely */
    x[i] = (float)(-110 + 200 * (double)i / (double)(n / 4));
}

static double worst_exp, worst_log, worst_sigmoid;

/* got against ref within rel of |ref|, or within FLT_MIN where the step
 * flushes a denormal result; the same inf and NaN. */
static double explog_err(double got, double ref) {
  if (isnan(ref) || isinf(ref))
    return (isnan(ref) ? isnan(got) : got == ref) ? 0 : INFINITY;
  if (fabs(ref) < 0x1p-126)
    return fabs(got - ref) <= 0x1p-126 ? 0 : INFINITY;
  return fabs(got - ref) / fabs(ref);
}

/* exp, log and sigmoid (ir/elem.c) against libm in double, relative; the
 * model's step flushes denormals, so inputs that are denormal read as 0. */
static void explog_check(int k, const float *x, const float *got, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    double a = fabs(x[i]) < 0x1p-126 ? 0 : x[i];
    if (k == 0)   /* beyond FLT_MAX, the float is inf */
      worst_exp = fmax(worst_exp, explog_err(got[i], exp(a) > FLT_MAX ? INFINITY : exp(a)));
    else if (k == 1)
      worst_log = fmax(worst_log, explog_err(got[i], a < 0 ? NAN : log(a)));
    else
      worst_sigmoid = fmax(worst_sigmoid, explog_err(got[i], 1 / (1 + exp(-a))));
  }
}

/* The generated exp, log and sigmoid (polynomials, so loops vectorise)
 * against libm: within 4 float roundings (5e-7) relative over the whole
 * range, inf, NaN, 0 and the edges included. */
static void explog_accuracy(void **state) {
  (void)state;
  CT t;
  ct_init(&t, "el");
  Inst *x = ct_global(&t, "x", G_INPUT, ty(DT_F32, 1, 80001), NULL);
  ct_output(&t, ct_op(&t, OP_exp, 1, x), "exp");
  ct_output(&t, ct_op(&t, OP_log, 1, x), "log");
  ct_output(&t, ct_op(&t, OP_sigmoid, 1, x), "sigmoid");
  fill_input = explog_inputs;
  check_output = explog_check;
  run_model(&t, 0);
  fill_input = NULL;
  check_output = NULL;
  printf("generated exp: worst relative error %.3g; log: %.3g; sigmoid: %.3g\n", worst_exp,
         worst_log, worst_sigmoid);
  assert_true(worst_exp <= 5e-7);
  assert_true(worst_log <= 5e-7);
  assert_true(worst_sigmoid <= 5e-7);
  ct_free(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(classifier_sgd),   cmocka_unit_test(classifier_adam),
      cmocka_unit_test(classifier_epilogue),
      cmocka_unit_test(elementwise_zoo),  cmocka_unit_test(kernels_and_shapes),
      cmocka_unit_test(pools_and_pads),   cmocka_unit_test(attention),
      cmocka_unit_test(attention_mask_dropout),
      cmocka_unit_test(inference_only),
      cmocka_unit_test(stores_and_loads), cmocka_unit_test(tanh_accuracy),
      cmocka_unit_test(explog_accuracy),  cmocka_unit_test(embedding_bags),
      cmocka_unit_test(pad_values_exact), cmocka_unit_test(classifier_parts),
      cmocka_unit_test(long_chain),       cmocka_unit_test(indices_and_integers),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
