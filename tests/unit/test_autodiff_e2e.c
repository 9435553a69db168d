/* test_autodiff_e2e.c: small models trained end to end through the
 * interpreter: @train_step from pass_autodiff must make the loss fall.
 *   xor:  2-16-2 relu MLP, cross_entropy, labels sign(x0 x1) on 128 points
 *         (not linearly separable), adam: loss < 0.03, train accuracy >= 97%.
 *   sine: 1-16-1 tanh MLP, mse against sin(3x) on 64 points, sgd with
 *         momentum and a cosine schedule: loss < 0.005. */
#include <math.h>

#include "test_autodiff.h"

/* Uniform(+-sqrt(6/(fan_in+fan_out))) */
static void glorot(const char *name, int fan_in, int fan_out) {
  double r = sqrt(6.0 / (fan_in + fan_out));
  fill_uniform(tm_data(&t, name), (int64_t)fan_in * fan_out, -r, r);
}

/* act(x @ w1 + b1) @ w2 + b2 */
static Inst *mlp(Inst *x, int in, int hidden, int out, Op act) {
  Inst *w1 = tm_param(&t, "w1", ty(DT_F32, 2, in, hidden));
  Inst *b1 = tm_param(&t, "b1", ty(DT_F32, 1, hidden));
  Inst *w2 = tm_param(&t, "w2", ty(DT_F32, 2, hidden, out));
  Inst *b2 = tm_param(&t, "b2", ty(DT_F32, 1, out));
  glorot("w1", in, hidden);
  glorot("w2", hidden, out);
  fill_uniform(tm_data(&t, "b1"), hidden, 0, 0);
  fill_uniform(tm_data(&t, "b2"), out, 0, 0);
  Inst *h = tm_op(&t, act, 1, tm_op(&t, OP_add, 2, tm_op(&t, OP_matmul, 2, x, w1), b1));
  return tm_op(&t, OP_add, 2, tm_op(&t, OP_matmul, 2, h, w2), b2);
}

static float train(Interp *it, int steps, const char *label) {
  float loss = 0, first = 0;
  for (int s = 0; s < steps; s++) {
    assert_true(interp_run(it, "train_step", (void *[]){&loss}));
    assert_false(isnan(loss));
    if (s == 0)
      first = loss;
    if (s % (steps / 4) == 0 || s == steps - 1)
      print_message("%s: step %4d loss %.5f\n", label, s, loss);
  }
  print_message("%s: loss %.4f -> %.4f after %d steps\n", label, first, loss, steps);
  return loss;
}

#define NX 128

static void test_xor(void **s) {
  (void)s;
  Inst *x = tm_input(&t, "x", ty(DT_F32, 2, NX, 2)), *y = tm_input(&t, "y", ty(DT_I32, 1, NX));
  float *xv = tm_data(&t, "x");
  int32_t *yv = tm_data(&t, "y");
  fill_uniform(xv, 2 * NX, -1, 1);
  for (int k = 0; k < NX; k++)
    yv[k] = xv[2 * k] * xv[2 * k + 1] > 0;
  Inst *logits = mlp(x, 2, 16, 2, OP_relu);
  tm_output(&t, logits, "logits");
  tm_output(&t, tm_op(&t, OP_cross_entropy, 2, logits, y), "loss");
  t.m->train = (Train){.loss = "loss", .opt = OPT_ADAM, .lr = 0.03, .beta1 = 0.9, .beta2 = 0.999,
                       .eps = 1e-8, .schedule = DT_SCHED_CONSTANT, .loc = tm_loc(&t, 5)};
  assert_true(tm_autodiff(&t));
  assert_true(ir_verify(t.m, &t.d));

  Interp *it = tm_interp(&t);
  float loss = train(it, 400, "xor");
  assert_true(loss < 0.03f);
  float logit[NX * 2];
  assert_true(interp_run(it, "forward", (void *[]){logit, NULL}));
  int right = 0;
  for (int k = 0; k < NX; k++)
    right += (logit[2 * k + 1] > logit[2 * k]) == yv[k];
  print_message("xor: train accuracy %d/%d\n", right, NX);
  assert_true(right >= NX * 97 / 100);
  interp_free(it);
}

#define NS 64

static void test_sine(void **s) {
  (void)s;
  Inst *x = tm_input(&t, "x", ty(DT_F32, 2, NS, 1)), *y = tm_input(&t, "y", ty(DT_F32, 2, NS, 1));
  float *xv = tm_data(&t, "x"), *yv = tm_data(&t, "y");
  for (int k = 0; k < NS; k++) {
    xv[k] = -1 + 2 * (float)k / (NS - 1);
    yv[k] = sinf(3 * xv[k]);
  }
  tm_output(&t, tm_op(&t, OP_mse, 2, mlp(x, 1, 16, 1, OP_tanh), y), "loss");
  t.m->train = (Train){.loss = "loss", .opt = OPT_SGD, .lr = 0.2, .momentum = 0.9,
                       .schedule = DT_SCHED_COSINE, .warmup = 20, .total = 1500, .loc = tm_loc(&t, 5)};
  assert_true(tm_autodiff(&t));
  Interp *it = tm_interp(&t);
  assert_true(train(it, 1500, "sine") < 0.005f);
  interp_free(it);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_xor, tm_setup, tm_teardown),
    cmocka_unit_test_setup_teardown(test_sine, tm_setup, tm_teardown),
  };
  return cmocka_run_group_tests_name("autodiff end to end", tests, NULL, NULL);
}
