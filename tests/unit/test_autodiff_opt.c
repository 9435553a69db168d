/* test_autodiff_opt.c: the optimizer updates of @train_step, run by the
 * interpreter, against a reference loop in double written from the formulas
 * at the top of passes/optimizer.c. The model is
 *   loss = sum(c w w + b w),  so  d loss / d w = 2 c w + b
 * with w f32[2,3] a param and c, b fixed inputs. */
#include <math.h>
#include <string.h>

#include "test_autodiff.h"

#define NW 6
#define STEPS 20

static int setup(void **state) {
  (void)state;
  tm_init(&t);
  Inst *w = tm_param(&t, "w", ty(DT_F32, 2, 2, 3)), *c = tm_input(&t, "c", ty(DT_F32, 2, 2, 3));
  Inst *b = tm_input(&t, "b", ty(DT_F32, 1, 3));
  fill_uniform(tm_data(&t, "c"), NW, 0.2, 1);
  Inst *e = tm_op(&t, OP_add, 2, tm_op(&t, OP_mul, 2, tm_op(&t, OP_mul, 2, c, w), w),
                  tm_op(&t, OP_mul, 2, b, w));
  Inst *l = tm_new(&t, OP_sum, 1, e);
  ir_set_ints(l, "axes", (int64_t[]){0, 1}, 2);
  tm_output(&t, ir_finish(l), "loss");
  return 0;
}

/* The learning rate of dtrt_lr, restated. */
static double ref_lr(const Train *tr, int64_t step) {
  int s = tr->schedule;
  double t1 = (double)step + 1;
  if (s != DT_SCHED_CONSTANT && step < tr->warmup)
    return tr->lr * t1 / (double)tr->warmup;
  double f = tr->total > tr->warmup ? (double)(step - tr->warmup) / (double)(tr->total - tr->warmup) : 1;
  if (s == DT_SCHED_COSINE)   /* CosineAnnealingLR's closed form, held at min_lr */
    return tr->min_lr + (tr->lr - tr->min_lr) * 0.5 * (1 + cos(3.14159265358979323846 * fmin(f, 1)));
  if (s == DT_SCHED_LINEAR)   /* LinearLR from 1 to end_factor */
    return tr->lr * (1 - fmin(f, 1) + tr->end_factor * fmin(f, 1));
  if (s == DT_SCHED_STEP) {   /* StepLR: gamma once every step_size steps */
    double lr = tr->lr;
    for (int64_t e = step - tr->warmup; e >= tr->step_size; e -= tr->step_size)
      lr *= tr->gamma;
    return lr;
  }
  return tr->lr;
}

/* Runs STEPS training steps and the reference side by side. */
static void run(Train tr) {
  tr.loss = "loss";
  tr.loc = tm_loc(&t, 5);
  t.m->train = tr;
  assert_true(tm_autodiff(&t));
  assert_true(ir_verify(t.m, &t.d));
  bool sgd = tr.opt == OPT_SGD, adamw = tr.opt == OPT_ADAMW;
  bool skip = 2 < tr.decay_min_rank || ir_find_global(t.m, "w")->no_decay;   /* w: rank 2 */
  double wd = skip ? 0 : tr.weight_decay;
  assert_true((ir_find_global(t.m, "w__m") != NULL) == (!sgd || tr.momentum != 0));
  assert_true((ir_find_global(t.m, "w__v") != NULL) == !sgd);

  double w[NW], m[NW] = {0}, v[NW] = {0}, c[NW], b[3];
  const float *w0 = tm_data(&t, "w"), *c0 = tm_data(&t, "c"), *b0 = tm_data(&t, "b");
  for (int k = 0; k < NW; k++)
    w[k] = w0[k], c[k] = c0[k];
  for (int k = 0; k < 3; k++)
    b[k] = b0[k];

  Interp *it = tm_interp(&t);
  for (int64_t step = 0; step < STEPS; step++) {
    float loss;
    assert_int_equal(interp_step(it), step);
    assert_true(interp_run(it, "train_step", (void *[]){&loss}));
    double ref_loss = 0, lr = ref_lr(&tr, step), tt = (double)step + 1, norm = 0;
    for (int k = 0; k < NW; k++)
      norm += pow(2 * c[k] * w[k] + b[k % 3], 2);
    /* torch.nn.utils.clip_grad_norm_ */
    double clip = tr.clip_norm > 0 ? fmin(1, tr.clip_norm / (sqrt(norm) + 1e-6)) : 1;
    for (int k = 0; k < NW; k++) {
      ref_loss += c[k] * w[k] * w[k] + b[k % 3] * w[k];
      double g = clip * (2 * c[k] * w[k] + b[k % 3]);
      if (!adamw)
        g += wd * w[k];
      if (sgd) {   /* torch.optim.SGD (dampening 0) */
        m[k] = tr.momentum * m[k] + g;
        double d = tr.momentum == 0 ? g : tr.nesterov ? g + tr.momentum * m[k] : m[k];
        w[k] -= lr * d;
      } else {     /* torch.optim.Adam, AdamW; or Kingma and Ba's efficient form */
        double decay = adamw ? lr * wd * w[k] : 0;
        m[k] = tr.beta1 * m[k] + (1 - tr.beta1) * g;
        v[k] = tr.beta2 * v[k] + (1 - tr.beta2) * g * g;
        double bc1 = 1 - pow(tr.beta1, tt), bc2 = 1 - pow(tr.beta2, tt), step;
        if (tr.eps_kingma)
          step = lr * sqrt(bc2) / bc1 * m[k] / (sqrt(v[k]) + tr.eps);
        else
          step = lr / bc1 * m[k] / (sqrt(v[k] / bc2) + tr.eps);
        w[k] -= step + decay;
      }
    }
    assert_float_equal(loss, ref_loss, 1e-4 * (1 + fabs(ref_loss)));
    const float *wi = interp_global(it, "w"), *mi = interp_global(it, "w__m");
    for (int k = 0; k < NW; k++) {
      assert_float_equal(wi[k], w[k], 1e-4 * (1 + fabs(w[k])));
      if (mi)
        assert_float_equal(mi[k], m[k], 1e-4 * (1 + fabs(m[k])));
    }
  }
  assert_int_equal(interp_step(it), STEPS);
  interp_free(it);
}

static void test_sgd(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .schedule = DT_SCHED_CONSTANT});
}

static void test_sgd_momentum_wd_warmup(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01,
              .schedule = DT_SCHED_WARMUP, .warmup = 5});
}

static void test_sgd_cosine_past_total(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.2, .momentum = 0.5, .schedule = DT_SCHED_COSINE, .total = 15});
}

static void test_adam(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAM, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
              .schedule = DT_SCHED_CONSTANT});
}

static void test_adam_l2(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAM, .lr = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6,
              .weight_decay = 0.1, .schedule = DT_SCHED_WARMUP, .warmup = 4});
}

static void test_adamw_cosine(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAMW, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
              .weight_decay = 0.1, .schedule = DT_SCHED_COSINE, .warmup = 3, .total = 15});
}

/* A large eps, where torch.optim.Adam's form (eps added to the corrected
 * sqrt(v)) and Kingma and Ba's (to the uncorrected one) part: at the first
 * step sqrt(1 - beta2) = 0.03 scales the one against the other. */
static void test_adam_eps_forms(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAM, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 0.1,
              .schedule = DT_SCHED_CONSTANT});
}

static void test_adam_eps_kingma(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAM, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 0.1,
              .schedule = DT_SCHED_CONSTANT, .eps_kingma = 1});
}

/* beta1 = 0: v's correction still applies (sqrt(1 - beta2^t)). */
static void test_adam_no_beta1(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAM, .lr = 0.05, .beta1 = 0, .beta2 = 0.99, .eps = 1e-3,
              .schedule = DT_SCHED_CONSTANT});
}

/* Clipped to a global norm below the gradients' (so every step clips). */
static void test_clip_adamw(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAMW, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
              .weight_decay = 0.1, .schedule = DT_SCHED_CONSTANT, .clip_norm = 0.3});
}

static void test_clip_sgd(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .momentum = 0.9, .schedule = DT_SCHED_CONSTANT,
              .clip_norm = 0.3});
}

static void test_sgd_nesterov(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = 1,
              .schedule = DT_SCHED_WARMUP, .warmup = 3});
}

static void test_sgd_cosine_min_lr(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.2, .momentum = 0.5, .schedule = DT_SCHED_COSINE,
              .warmup = 3, .total = 12, .min_lr = 0.02});
}

static void test_adamw_linear(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAMW, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
              .weight_decay = 0.1, .schedule = DT_SCHED_LINEAR, .warmup = 2, .total = 14,
              .end_factor = 0.25});
}

static void test_sgd_step(void **s) {
  (void)s;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .weight_decay = 0.01, .schedule = DT_SCHED_STEP,
              .warmup = 2, .step_size = 5, .gamma = 0.5});
}

/* decay_min_rank 3 leaves the rank-2 w without weight decay (adamw's and sgd's) */
static void test_no_decay_rank(void **s) {
  (void)s;
  run((Train){.opt = OPT_ADAMW, .lr = 0.05, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
              .weight_decay = 0.5, .decay_min_rank = 3, .schedule = DT_SCHED_CONSTANT});
}

static void test_sgd_no_decay_param(void **s) {
  (void)s;
  ir_find_global(t.m, "w")->no_decay = 1;
  run((Train){.opt = OPT_SGD, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.5,
              .schedule = DT_SCHED_CONSTANT});
}

/* Adam's first step moves every weight by lr against the sign of its gradient. */
static void test_adam_first_step(void **s) {
  (void)s;
  t.m->train = (Train){.loss = "loss", .opt = OPT_ADAM, .lr = 0.01, .beta1 = 0.9,
                       .beta2 = 0.999, .eps = 1e-8, .schedule = DT_SCHED_CONSTANT};
  assert_true(tm_autodiff(&t));
  float before[NW];
  memcpy(before, tm_data(&t, "w"), sizeof before);
  const float *c = tm_data(&t, "c"), *b = tm_data(&t, "b");
  Interp *it = tm_interp(&t);
  assert_true(interp_run(it, "train_step", NULL));
  const float *w = interp_global(it, "w");
  for (int k = 0; k < NW; k++) {
    double g = 2 * c[k] * before[k] + b[k % 3];
    assert_float_equal(w[k], before[k] - 0.01 * (g > 0 ? 1 : -1), 1e-6);
  }
  interp_free(it);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, tm_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
    T(test_sgd), T(test_sgd_momentum_wd_warmup), T(test_sgd_cosine_past_total), T(test_adam),
    T(test_adam_l2), T(test_adamw_cosine), T(test_adam_first_step), T(test_adam_eps_forms),
    T(test_adam_eps_kingma), T(test_adam_no_beta1), T(test_sgd_nesterov), T(test_clip_adamw),
    T(test_clip_sgd), T(test_sgd_cosine_min_lr), T(test_adamw_linear), T(test_sgd_step),
    T(test_no_decay_rank), T(test_sgd_no_decay_param),
  };
  return cmocka_run_group_tests_name("autodiff optimizers", tests, NULL, NULL);
}
