/* test_autodiff_pass.c: what pass_autodiff builds: @train_step's shape and
 * outputs, the state it creates, locations, warnings and errors. */
#include <string.h>

#include "test_autodiff.h"

static int count(const Func *f, Op op) {
  int n = 0;
  for (int k = 0; k < f->inst.n; k++)
    n += f->inst.a[k]->op == op;
  return n;
}

static bool stores(const Func *f, const char *global) {
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_store && !strcmp(ir_get_str(f->inst.a[k], "global", ""), global))
      return true;
  return false;
}

/* logits = x @ w + b; loss = cross_entropy(logits, y); outputs logits, loss. */
static void linear_model(void) {
  Inst *x = tm_input(&t, "x", ty(DT_F32, 2, 4, 3)), *y = tm_input(&t, "y", ty(DT_I32, 1, 4));
  Inst *w = tm_param(&t, "w", ty(DT_F32, 2, 3, 5)), *b = tm_param(&t, "b", ty(DT_F32, 1, 5));
  Inst *logits = tm_op(&t, OP_add, 2, tm_op(&t, OP_matmul, 2, x, w), b);
  tm_output(&t, logits, "logits");
  tm_output(&t, tm_op(&t, OP_cross_entropy, 2, logits, y), "loss");
  t.m->train = (Train){.loss = "loss", .opt = OPT_SGD, .lr = 0.1, .momentum = 0.9,
                       .schedule = DT_SCHED_CONSTANT, .loc = tm_loc(&t, 5)};
}

static void test_no_loss(void **s) {
  (void)s;
  linear_model();
  t.m->train.loss = NULL;
  assert_true(tm_autodiff(&t));
  assert_null(ir_find_func(t.m, "train_step"));
  assert_int_equal(t.m->func.n, 1);
}

static void test_train_step(void **s) {
  (void)s;
  linear_model();
  int nfwd = t.f->inst.n, nglobal = t.m->global.n;
  assert_true(tm_autodiff(&t));
  assert_true(ir_verify(t.m, &t.d));
  assert_int_equal(t.d.nerr + t.d.nwarn, 0);
  Func *f = ir_find_func(t.m, "train_step");
  assert_non_null(f);
  assert_int_equal(t.f->inst.n, nfwd);

  assert_int_equal(count(f, OP_output), 1);
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_output) {
      assert_string_equal(ir_get_str(f->inst.a[k], "name", ""), "loss");
      assert_int_equal(f->inst.a[k]->in[0]->op, OP_cross_entropy);
      break;
    }
  /* x is an input: its adjoint is never built, so one backward matmul (dw). */
  assert_int_equal(count(f, OP_matmul), 2);
  assert_int_equal(count(f, OP_cross_entropy_grad), 1);

  assert_int_equal(t.m->global.n, nglobal + 2);
  for (int k = 0; k < 2; k++) {
    const char *name = k ? "b__m" : "w__m";
    const Global *g = ir_find_global(t.m, name);
    assert_non_null(g);
    assert_int_equal(g->kind, G_STATE);
    assert_int_equal(g->init, DT_INIT_ZEROS);
    assert_true(type_eq(&g->type, &ir_find_global(t.m, k ? "b" : "w")->type));
    assert_true(stores(f, name));
  }
  assert_true(stores(f, "w"));
  assert_true(stores(f, "b"));
  assert_false(stores(f, "x"));
  for (int k = 0; k < f->inst.n; k++)
    assert_ptr_equal(f->inst.a[k]->loc.file, t.src);

  /* Run again: @train_step is there, nothing changes. */
  int n = f->inst.n;
  assert_true(tm_autodiff(&t));
  assert_int_equal(t.m->func.n, 2);
  assert_int_equal(f->inst.n, n);
  assert_int_equal(t.m->global.n, nglobal + 2);
}

/* The backward of an op carries the op's location. */
static void test_locations(void **s) {
  (void)s;
  Inst *w = tm_param(&t, "w", ty(DT_F32, 1, 3));
  Inst *e = tm_op(&t, OP_exp, 1, w);
  e->loc = tm_loc(&t, 4);
  Inst *l = tm_new(&t, OP_sum, 1, e);
  ir_set_ints(l, "axes", (int64_t[]){0}, 1);
  tm_output(&t, ir_finish(l), "loss");
  t.m->train = (Train){.loss = "loss", .opt = OPT_SGD, .lr = 0.1, .loc = tm_loc(&t, 5)};
  assert_true(tm_autodiff(&t));
  Func *f = ir_find_func(t.m, "train_step");
  int seen = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_mul && i->in[1]->op == OP_exp) {
      assert_int_equal(i->loc.line, 4);
      seen++;
    }
  }
  assert_int_equal(seen, 1);
}

static void test_unused_param(void **s) {
  (void)s;
  linear_model();
  Inst *u = tm_param(&t, "u", ty(DT_F32, 1, 5));
  tm_output(&t, tm_op(&t, OP_exp, 1, u), "other");
  t.d.wflags = W_UNUSED;
  assert_true(tm_autodiff(&t));
  assert_int_equal(t.d.nwarn, 1);
  assert_non_null(strstr(tm_log(&t),
                         "t.dt:2:1: warning: param 'u' does not affect the loss 'loss'"));
  Func *f = ir_find_func(t.m, "train_step");
  assert_false(stores(f, "u"));
  assert_null(ir_find_global(t.m, "u__m"));
  assert_int_equal(count(f, OP_exp), 0);
}

static void test_unused_param_quiet(void **s) {
  (void)s;
  linear_model();
  tm_param(&t, "u", ty(DT_F32, 1, 5));
  assert_true(tm_autodiff(&t));
  assert_int_equal(t.d.nwarn, 0);
  assert_string_equal(tm_log(&t), "");
}

static void test_loss_not_output(void **s) {
  (void)s;
  linear_model();
  t.m->train.loss = "nope";
  assert_false(tm_autodiff(&t));
  assert_non_null(strstr(tm_log(&t), "t.dt:5:1: error: the loss 'nope' is not an output of @forward"));
}

static void test_loss_not_scalar(void **s) {
  (void)s;
  linear_model();
  t.m->train.loss = "logits";
  assert_false(tm_autodiff(&t));
  assert_non_null(strstr(tm_log(&t), "error: the loss 'logits' must be a scalar f32, got f32[4,5]"));
}

static void test_derivative_of_derivative(void **s) {
  (void)s;
  Inst *w = tm_param(&t, "w", ty(DT_F32, 1, 3));
  Inst *r = tm_op(&t, OP_relu_grad, 2, w, w);
  r->loc = tm_loc(&t, 4);
  Inst *l = tm_new(&t, OP_sum, 1, r);
  ir_set_ints(l, "axes", (int64_t[]){0}, 1);
  tm_output(&t, ir_finish(l), "loss");
  t.m->train = (Train){.loss = "loss", .opt = OPT_SGD, .lr = 0.1, .loc = tm_loc(&t, 5)};
  assert_false(tm_autodiff(&t));
  assert_non_null(strstr(tm_log(&t), "t.dt:4:1: error: 'relu_grad' cannot be differentiated"));
}

/* cse: an op computed twice with the same operands and attributes is
 * computed once; different attributes or operands stay apart, and so do
 * loads; batch norm's backward sums dy and dy y once each. */
static void test_cse(void **s) {
  (void)s;
  Inst *x = tm_input(&t, "x", ty(DT_F32, 2, 4, 3)), *w = tm_param(&t, "w", ty(DT_F32, 2, 4, 3));
  Inst *x2 = tm_new(&t, OP_load, 0);
  ir_set_str(x2, "global", "x");
  ir_finish(x2);
  Inst *p = tm_op(&t, OP_mul, 2, x, w), *q = tm_op(&t, OP_mul, 2, x, w);
  Inst *r = tm_op(&t, OP_mul, 2, x2, w);
  Inst *s0 = tm_new(&t, OP_sum, 1, p), *s1 = tm_new(&t, OP_sum, 1, q), *s2 = tm_new(&t, OP_sum, 1, q);
  ir_set_ints(s0, "axes", (int64_t[]){0}, 1);
  ir_set_ints(s1, "axes", (int64_t[]){0}, 1);
  ir_set_ints(s2, "axes", (int64_t[]){1}, 1);
  ir_finish(s0), ir_finish(s1), ir_finish(s2);
  tm_output(&t, tm_op(&t, OP_add, 2, tm_op(&t, OP_add, 2, p, q), r), "y");
  tm_output(&t, tm_op(&t, OP_add, 2, s0, s1), "a");
  tm_output(&t, s2, "b");
  assert_true(pass_cse(t.m, &t.d, NULL));
  if (!ir_verify(t.m, &t.d))
    fail_msg("%s", tm_log(&t));
  assert_int_equal(count(t.f, OP_load), 3);
  assert_int_equal(count(t.f, OP_mul), 2);   /* p and r: x2 is another load */
  assert_int_equal(count(t.f, OP_sum), 2);   /* axes [0] once, [1] */
  for (int k = 0; k < t.f->inst.n; k++) {
    const Inst *i = t.f->inst.a[k];
    if (i->op == OP_add && i->in[0]->op == OP_mul)
      assert_ptr_equal(i->in[0], i->in[1]);
    if (i->op == OP_add && i->in[0]->op == OP_sum)
      assert_ptr_equal(i->in[0], i->in[1]);
  }
}

#define T(f) cmocka_unit_test_setup_teardown(f, tm_setup, tm_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
    T(test_no_loss), T(test_train_step), T(test_locations), T(test_unused_param),
    T(test_unused_param_quiet), T(test_loss_not_output), T(test_loss_not_scalar),
    T(test_derivative_of_derivative), T(test_cse),
  };
  return cmocka_run_group_tests_name("autodiff pass", tests, NULL, NULL);
}
