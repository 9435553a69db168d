/* test_autodiff_loop.c: the derivative of `repeat` against finite
 * differences: loops with stacked params (layers), a whole operand (an RNN's
 * shared weights), a stacked input, dropout, a loop inside a loop, and scans
 * (several carried values, stacked outputs); and a loop against the same
 * program written out, iteration by iteration. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_autodiff.h"


/* ---- building bodies by hand ---- */

static Func *body(const char *name) {
  Func *f = ir_add_func(t.m, name, tm_loc(&t, 4));
  f->body = true;
  return f;
}

static Inst *arg(Func *f, int index, Type ty_) {
  Inst *a = ir_new(f, OP_arg, tm_loc(&t, 5), 0, NULL);
  ir_set_int(a, "index", index);
  a->type = ty_;
  return ir_finish(a);
}

static Inst *op(Func *f, Op o, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = ir_new_va(f, o, tm_loc(&t, 6), nin, ap);
  va_end(ap);
  return ir_finish(i);
}

static void out(Func *f, Inst *v) {
  Inst *o = ir_new(f, OP_output, tm_loc(&t, 7), 1, &v);
  ir_set_str(o, "name", "y");
  ir_finish(o);
}

/* repeat of body b in function f over operands in[0..nin) */
static Inst *repeat(Func *f, Func *b, int64_t n, int64_t stacked, int nin, Inst **in) {
  Inst *r = ir_new(f, OP_repeat, tm_loc(&t, 8), nin, in);
  ir_set_str(r, "body", b->name);
  ir_set_int(r, "n", n);
  ir_set_int(r, "carry", 1);
  ir_set_int(r, "stacked", stacked);
  return ir_finish(r);
}

/* x <- x + tanh(x @ w + b) */
static Func *residual_body(const char *name, int d) {
  Func *b = body(name);
  Inst *x = arg(b, 0, ty(DT_F32, 2, 2, d)), *w = arg(b, 1, ty(DT_F32, 2, d, d)),
       *c = arg(b, 2, ty(DT_F32, 1, d));
  out(b, op(b, OP_add, 2, x, op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, x, w), c))));
  return b;
}

static void stacked_layers(void **state) {
  (void)state;
  Func *b = residual_body("layers", 4);
  Inst *in[3] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 4)),
                 tm_param(&t, "layers.w", ty(DT_F32, 3, 3, 4, 4)),
                 tm_param(&t, "layers.b", ty(DT_F32, 2, 3, 4))};
  gradcheck(&t, repeat(t.f, b, 3, 2, 3, in), "three residual layers");
}

static void one_iteration(void **state) {
  (void)state;
  Func *b = residual_body("layers", 3);
  Inst *in[3] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 3)),
                 tm_param(&t, "layers.w", ty(DT_F32, 3, 1, 3, 3)),
                 tm_param(&t, "layers.b", ty(DT_F32, 2, 1, 3))};
  gradcheck(&t, repeat(t.f, b, 1, 2, 3, in), "n = 1");
}

/* h <- tanh(h @ u + x_i): u whole (shared by every step), x stacked input */
static void recurrence(void **state) {
  (void)state;
  Func *b = body("rnn");
  Inst *h = arg(b, 0, ty(DT_F32, 2, 2, 3)), *u = arg(b, 1, ty(DT_F32, 2, 3, 3)),
       *x = arg(b, 2, ty(DT_F32, 2, 2, 3));
  out(b, op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, h, u), x)));
  Inst *xs = tm_input(&t, "xs", ty(DT_F32, 3, 5, 2, 3));
  Inst *in[3] = {tm_param(&t, "h0", ty(DT_F32, 2, 2, 3)), tm_param(&t, "u", ty(DT_F32, 2, 3, 3)),
                 xs};
  gradcheck(&t, repeat(t.f, b, 5, 1, 3, in), "rnn over 5 steps");
}

/* The stacked operand is computed from a param: its adjoint flows back. */
static void stacked_from_param(void **state) {
  (void)state;
  Func *b = body("rnn");
  Inst *h = arg(b, 0, ty(DT_F32, 1, 3)), *x = arg(b, 1, ty(DT_F32, 1, 3));
  out(b, op(b, OP_mul, 2, op(b, OP_sigmoid, 1, h), x));
  Inst *e = tm_param(&t, "e", ty(DT_F32, 2, 4, 3));
  Inst *in[2] = {tm_input(&t, "h0", ty(DT_F32, 1, 3)), tm_op(&t, OP_exp, 1, e)};
  gradcheck(&t, repeat(t.f, b, 4, 1, 2, in), "stacked operand from a param, h0 an input");
}

/* A loop of two layers inside a loop of three: params [3, 2, ...]. */
static void nested(void **state) {
  (void)state;
  Func *inner = residual_body("outer.inner", 3);
  Func *b = body("outer");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 2, 3)), *w = arg(b, 1, ty(DT_F32, 3, 2, 3, 3)),
       *c = arg(b, 2, ty(DT_F32, 2, 2, 3)), *s = arg(b, 3, ty(DT_F32, 1, 3));
  Inst *iin[3] = {op(b, OP_mul, 2, x, s), w, c};
  out(b, repeat(b, inner, 2, 2, 3, iin));
  Inst *in[4] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 3)),
                 tm_param(&t, "outer.inner.w", ty(DT_F32, 4, 3, 2, 3, 3)),
                 tm_param(&t, "outer.inner.b", ty(DT_F32, 3, 3, 2, 3)),
                 tm_param(&t, "outer.s", ty(DT_F32, 2, 3, 3))};
  gradcheck(&t, repeat(t.f, b, 3, 3, 4, in), "a loop in a loop");
}

/* Softmax, gelu and a product of two values of the body, so the backward
 * reads many saved values. */
static void saved_values(void **state) {
  (void)state;
  Func *b = body("blk");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 3, 4)), *w = arg(b, 1, ty(DT_F32, 2, 4, 4));
  Inst *a = op(b, OP_tanh, 1, x);
  Inst *q = op(b, OP_matmul, 2, a, w);
  Inst *sm = op(b, OP_softmax, 1, q);
  Inst *y = op(b, OP_add, 2, x, op(b, OP_mul, 2, sm, op(b, OP_gelu, 1, q)));
  out(b, y);
  Inst *in[2] = {tm_param(&t, "x0", ty(DT_F32, 2, 3, 4)),
                 tm_param(&t, "blk.w", ty(DT_F32, 3, 2, 4, 4))};
  gradcheck(&t, repeat(t.f, b, 2, 1, 2, in), "softmax, gelu, tanh in a body");
}

/* Dropout in a body: each iteration draws its own mask, and the backward
 * of an iteration applies that iteration's mask (finite differences see the
 * same masks: the step is fixed). */
static void dropout_in_body(void **state) {
  (void)state;
  Func *b = body("drop");
  Inst *x = arg(b, 0, ty(DT_F32, 1, 64)), *w = arg(b, 1, ty(DT_F32, 1, 64));
  Inst *dr = ir_new(b, OP_dropout, tm_loc(&t, 6), 1, (Inst *[]){op(b, OP_mul, 2, x, w)});
  ir_set_float(dr, "p", 0.5);
  ir_set_int(dr, "seed", 7);
  out(b, op(b, OP_tanh, 1, ir_finish(dr)));
  Inst *in[2] = {tm_param(&t, "x0", ty(DT_F32, 1, 64)), tm_param(&t, "drop.w", ty(DT_F32, 2, 2, 64))};
  gradcheck(&t, repeat(t.f, b, 2, 1, 2, in), "dropout in a body");
}

/* The loop against its iterations written out: the same values, bit for
 * bit, forward and gradients (the interpreter runs the same kernels). */
static void loop_equals_unrolled(void **state) {
  (void)state;
  const int n = 3;
  Func *b = residual_body("layers", 4);
  Inst *x0 = tm_param(&t, "x0", ty(DT_F32, 2, 2, 4)),
       *w = tm_param(&t, "layers.w", ty(DT_F32, 3, n, 4, 4)),
       *c = tm_param(&t, "layers.b", ty(DT_F32, 2, n, 4));
  Inst *in[3] = {x0, w, c};
  tm_output(&t, repeat(t.f, b, n, 2, 3, in), "y");
  /* unrolled: slice row i of each stacked param */
  Func *u = ir_add_func(t.m, "unrolled", tm_loc(&t, 9));
  Inst *lx = ir_new(u, OP_load, tm_loc(&t, 9), 0, NULL), *lw = ir_new(u, OP_load, tm_loc(&t, 9), 0, NULL),
       *lb = ir_new(u, OP_load, tm_loc(&t, 9), 0, NULL);
  ir_set_str(lx, "global", "x0");
  ir_set_str(lw, "global", "layers.w");
  ir_set_str(lb, "global", "layers.b");
  Inst *x = ir_finish(lx);
  ir_finish(lw), ir_finish(lb);
  for (int i = 0; i < n; i++) {
    Inst *rows[2] = {lw, lb};
    for (int k = 0; k < 2; k++) {
      Inst *s = ir_new(u, OP_slice, tm_loc(&t, 9), 1, &rows[k]);
      ir_set_int(s, "axis", 0);
      ir_set_int(s, "begin", i);
      ir_set_int(s, "end", i + 1);
      Inst *sl = ir_finish(s);
      Type rt = rows[k]->type;
      rt.rank--;
      memmove(rt.dim, rt.dim + 1, sizeof(int64_t) * (size_t)rt.rank);
      Inst *rs = ir_new(u, OP_reshape, tm_loc(&t, 9), 1, &sl);
      ir_set_ints(rs, "shape", rt.dim, rt.rank);
      rows[k] = ir_finish(rs);
    }
    x = op(u, OP_add, 2, x, op(u, OP_tanh, 1, op(u, OP_add, 2, op(u, OP_matmul, 2, x, rows[0]), rows[1])));
  }
  Inst *o = ir_new(u, OP_output, tm_loc(&t, 9), 1, &x);
  ir_set_str(o, "name", "y");
  ir_finish(o);
  if (!ir_verify(t.m, &t.d))
    fail_msg("%s", tm_log(&t));
  float y1[8], y2[8];
  Interp *it = tm_interp(&t);
  assert_true(interp_run(it, "forward", (void *[]){y1}));
  assert_true(interp_run(it, "unrolled", (void *[]){y2}));
  assert_memory_equal(y1, y2, sizeof y1);
  interp_free(it);
}

/* With remat the backward recomputes the forward from the carried value. */
static Inst *remat(Inst *r) {
  ir_set_int(r, "remat", 1);
  return r;
}

static void remat_saved_values(void **state) {
  (void)state;
  Func *b = body("blk");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 3, 4)), *w = arg(b, 1, ty(DT_F32, 2, 4, 4));
  Inst *q = op(b, OP_matmul, 2, op(b, OP_tanh, 1, x), w);
  out(b, op(b, OP_add, 2, x, op(b, OP_mul, 2, op(b, OP_softmax, 1, q), op(b, OP_gelu, 1, q))));
  Inst *in[2] = {tm_param(&t, "x0", ty(DT_F32, 2, 3, 4)),
                 tm_param(&t, "blk.w", ty(DT_F32, 3, 2, 4, 4))};
  gradcheck(&t, remat(repeat(t.f, b, 2, 1, 2, in)), "remat: softmax, gelu, tanh");
}

static void remat_nested(void **state) {
  (void)state;
  Func *inner = residual_body("outer.inner", 3);
  Func *b = body("outer");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 2, 3)), *w = arg(b, 1, ty(DT_F32, 3, 2, 3, 3)),
       *c = arg(b, 2, ty(DT_F32, 2, 2, 3));
  Inst *iin[3] = {op(b, OP_tanh, 1, x), w, c};
  out(b, repeat(b, inner, 2, 2, 3, iin));
  Inst *in[3] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 3)),
                 tm_param(&t, "outer.inner.w", ty(DT_F32, 4, 3, 2, 3, 3)),
                 tm_param(&t, "outer.inner.b", ty(DT_F32, 3, 3, 2, 3))};
  gradcheck(&t, remat(repeat(t.f, b, 3, 2, 3, in)), "remat of a loop holding a loop");
}

/* The same gradients bit for bit, from one saved value per iteration
 * instead of many. */
static int saved_stacks(const Func *f, const char *body) {
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *r = f->inst.a[k];
    if (r->op == OP_repeat && !ir_get_int(r, "reverse", 0) && strstr(ir_get_str(r, "body", ""), body))
      return ir_func_noutputs(ir_repeat_body(r)) - 1;
  }
  return -1;
}

static void remat_same_gradients(void **state) {
  (void)state;
  float g[2][1 + 3 * 4 + 3 * 4 * 4];   /* loss, d x0 [3,4], d blk.w [3,4,4] */
  int saved[2];
  for (int pass = 0; pass < 2; pass++) {
    tm_teardown(NULL);
    tm_setup(NULL);
    Func *b = body("blk");
    Inst *x = arg(b, 0, ty(DT_F32, 2, 3, 4)), *w = arg(b, 1, ty(DT_F32, 2, 4, 4));
    Inst *q = op(b, OP_matmul, 2, op(b, OP_normalize, 1, x), w);
    out(b, op(b, OP_add, 2, x, op(b, OP_mul, 2, op(b, OP_softmax, 1, q), op(b, OP_gelu, 1, q))));
    Inst *x0 = tm_param(&t, "x0", ty(DT_F32, 2, 3, 4)), *bw = tm_param(&t, "blk.w", ty(DT_F32, 3, 3, 4, 4));
    Inst *in[2] = {x0, bw};
    Inst *r = repeat(t.f, b, 3, 1, 2, in);
    if (pass)
      remat(r);
    Inst *loss = tm_new(&t, OP_sum, 1, r);
    ir_set_ints(loss, "axes", (int64_t[]){0, 1}, 2);
    tm_output(&t, ir_finish(loss), "loss");
    t.m->train.loss = "loss";
    Func *gf = autodiff_grads(t.m, t.f, "grads", &t.d);
    assert_non_null(gf);
    if (!ir_verify(t.m, &t.d))
      fail_msg("%s", tm_log(&t));
    saved[pass] = saved_stacks(gf, "blk");
    Interp *it = tm_interp(&t);
    void *outs[3] = {g[pass], g[pass] + 1, g[pass] + 1 + 3 * 4};
    assert_true(interp_run(it, "grads", outs));
    interp_free(it);
  }
  for (int k = 0; k < COUNTOF(g[0]); k++)
    if (memcmp(&g[0][k], &g[1][k], sizeof g[0][k]))
      fail_msg("output element %d: %.9g saved, %.9g recomputed", k, g[0][k], g[1][k]);
  printf("saved per iteration: %d values, %d with remat\n", saved[0], saved[1]);
  assert_int_equal(saved[1], 1);
  assert_true(saved[0] > 3);
}

static char *print_module(const Module *m) {
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  ir_print(f, m);
  fclose(f);
  return buf;
}

/* The loops a derivative makes print and parse back, nested ones too. */
static void round_trip(void **state) {
  (void)state;
  Func *inner = residual_body("outer.inner", 3);
  Func *b = body("outer");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 2, 3)), *w = arg(b, 1, ty(DT_F32, 3, 2, 3, 3)),
       *c = arg(b, 2, ty(DT_F32, 2, 2, 3));
  Inst *iin[3] = {x, w, c};
  out(b, repeat(b, inner, 2, 2, 3, iin));
  Inst *in[3] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 3)),
                 tm_param(&t, "outer.inner.w", ty(DT_F32, 4, 3, 2, 3, 3)),
                 tm_param(&t, "outer.inner.b", ty(DT_F32, 3, 3, 2, 3))};
  Inst *y = repeat(t.f, b, 3, 2, 3, in);
  Inst *loss = tm_new(&t, OP_sum, 1, y);
  ir_set_ints(loss, "axes", (int64_t[]){0, 1}, 2);
  tm_output(&t, ir_finish(loss), "loss");
  t.m->train.loss = "loss";
  assert_non_null(autodiff_grads(t.m, t.f, "grads", &t.d));
  if (!ir_verify(t.m, &t.d))
    fail_msg("%s", tm_log(&t));
  char *text = print_module(t.m);
  assert_non_null(strstr(text, "func @outer.inner.grad body"));
  assert_non_null(strstr(text, "reverse = 1"));
  SrcFile *src = src_from_string(t.a, "t.ir", text);
  Module *back = ir_parse(t.a, src, &t.d);
  if (!back)
    fail_msg("%s\n%s", tm_log(&t), text);
  char *again = print_module(back);
  assert_string_equal(text, again);
  free(text);
  free(again);
}

/* ---- scans: several carried values, stacked outputs ---- */

static void out_named(Func *f, Inst *v, const char *name) {
  Inst *o = ir_new(f, OP_output, tm_loc(&t, 7), 1, &v);
  ir_set_str(o, "name", name);
  ir_finish(o);
}

static Inst *scan(Func *f, Func *b, int64_t n, int64_t carry, int64_t stacked, int nin, Inst **in) {
  Inst *r = repeat(f, b, n, stacked, nin, in);
  ir_set_int(r, "carry", carry);
  return ir_finish(r);
}

static Inst *loop_out(Func *f, Inst *r, int64_t k) {
  Inst *o = ir_new(f, OP_repeat_out, tm_loc(&t, 8), 1, &r);
  ir_set_int(o, "index", k);
  return ir_finish(o);
}

/* One step of an LSTM-like cell of two carried values h and c, weights u
 * shared by every step, input row x: c' = sigmoid(a) c + tanh(a) sigmoid(h),
 * h' = tanh(c') sigmoid(a), a = h @ u + x; outputs h', c', then h' again
 * and c' * x stacked (carried values as outputs too). */
static Func *cell_body(const char *name) {
  Func *b = body(name);
  Inst *h = arg(b, 0, ty(DT_F32, 2, 2, 3)), *c = arg(b, 1, ty(DT_F32, 2, 2, 3)),
       *u = arg(b, 2, ty(DT_F32, 2, 3, 3)), *x = arg(b, 3, ty(DT_F32, 2, 2, 3));
  Inst *a = op(b, OP_add, 2, op(b, OP_matmul, 2, h, u), x);
  Inst *c2 = op(b, OP_add, 2, op(b, OP_mul, 2, op(b, OP_sigmoid, 1, a), c),
                op(b, OP_mul, 2, op(b, OP_tanh, 1, a), op(b, OP_sigmoid, 1, h)));
  Inst *h2 = op(b, OP_mul, 2, op(b, OP_tanh, 1, c2), op(b, OP_sigmoid, 1, a));
  out_named(b, h2, "h");
  out_named(b, c2, "c");
  out_named(b, h2, "ys");
  out_named(b, op(b, OP_mul, 2, c2, x), "zs");
  return b;
}

/* The cell over 4 steps from params h0, c0, u and xs = exp(e) (a stacked
 * operand computed from a param); its outputs: h, c, ys [4,2,3], zs. */
static Inst *cell_scan(Inst **outs) {
  Func *b = cell_body("cell");
  Inst *in[4] = {tm_param(&t, "h0", ty(DT_F32, 2, 2, 3)), tm_param(&t, "c0", ty(DT_F32, 2, 2, 3)),
                 tm_param(&t, "u", ty(DT_F32, 2, 3, 3)),
                 tm_op(&t, OP_exp, 1, tm_param(&t, "e", ty(DT_F32, 3, 4, 2, 3)))};
  Inst *r = scan(t.f, b, 4, 2, 1, 4, in);
  outs[0] = r;
  for (int k = 1; k < 4; k++)
    outs[k] = loop_out(t.f, r, k);
  return r;
}

static Inst *sum0(Inst *x) {
  Inst *s = tm_new(&t, OP_sum, 1, x);
  ir_set_ints(s, "axes", (int64_t[]){0}, 1);
  return ir_finish(s);
}

/* Every output of the scan reaches the loss. */
static void scan_all_outputs(void **state) {
  (void)state;
  Inst *o[4];
  cell_scan(o);
  Inst *y = tm_op(&t, OP_add, 2, tm_op(&t, OP_add, 2, o[0], tm_op(&t, OP_mul, 2, o[1], o[1])),
                  tm_op(&t, OP_add, 2, sum0(o[2]), sum0(o[3])));
  gradcheck(&t, y, "scan: h, c, ys and zs");
}

/* Only the stacked outputs reach the loss: the final carried values have
 * no adjoint of their own. */
static void scan_stacked_only(void **state) {
  (void)state;
  Inst *o[4];
  cell_scan(o);
  gradcheck(&t, tm_op(&t, OP_add, 2, o[2], tm_op(&t, OP_tanh, 1, o[3])), "scan: ys and zs only");
}

/* Only the second carried value reaches the loss. */
static void scan_second_carry(void **state) {
  (void)state;
  Inst *o[4];
  cell_scan(o);
  gradcheck(&t, o[1], "scan: c only");
}

static void scan_remat(void **state) {
  (void)state;
  Inst *o[4];
  Inst *r = cell_scan(o);
  ir_set_int(r, "remat", 1);
  gradcheck(&t, tm_op(&t, OP_add, 2, o[1], sum0(o[2])), "scan with remat: c and ys");
}

/* A scan inside a loop: the outer body runs the cell over 3 steps from its
 * carried value and adds the stacked outputs' sum. */
static void scan_nested(void **state) {
  (void)state;
  Func *cell = cell_body("outer.cell");
  Func *b = body("outer");
  Inst *x = arg(b, 0, ty(DT_F32, 2, 2, 3)), *u = arg(b, 1, ty(DT_F32, 2, 3, 3)),
       *xs = arg(b, 2, ty(DT_F32, 3, 4, 2, 3));
  Inst *iin[4] = {x, op(b, OP_tanh, 1, x), u, xs};
  Inst *r = scan(b, cell, 4, 2, 1, 4, iin);
  Inst *ys = loop_out(b, r, 2);
  Inst *s = ir_new(b, OP_sum, tm_loc(&t, 6), 1, &ys);
  ir_set_ints(s, "axes", (int64_t[]){0}, 1);
  out(b, op(b, OP_add, 2, loop_out(b, r, 1), ir_finish(s)));
  Inst *in[3] = {tm_param(&t, "x0", ty(DT_F32, 2, 2, 3)), tm_param(&t, "u", ty(DT_F32, 2, 3, 3)),
                 tm_param(&t, "xs", ty(DT_F32, 3, 4, 2, 3))};
  gradcheck(&t, repeat(t.f, b, 2, 0, 3, in), "a scan in a loop");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(stacked_layers, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(one_iteration, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(recurrence, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(stacked_from_param, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(nested, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(saved_values, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(dropout_in_body, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(loop_equals_unrolled, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(round_trip, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(remat_saved_values, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(remat_nested, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(remat_same_gradients, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(scan_all_outputs, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(scan_stacked_only, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(scan_second_carry, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(scan_remat, tm_setup, tm_teardown),
      cmocka_unit_test_setup_teardown(scan_nested, tm_setup, tm_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
