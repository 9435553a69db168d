/* test_codegen_e2e.c: examples/mlp.dt, transformer.dt and cnn.dt, and
 * tests/mpi/dlrm_sparse.dt (sparse tables updated in place by Adagrad),
 * compiled by the dtc driver at build time and linked in, run through their
 * generated C interfaces. Their forward outputs and training steps must equal those of
 * the interpreter on the same source compiled here, within 1e-5 relative in
 * the max norm of each tensor, each step starting from the same state. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/dtrt.h"
#include "cnn.h"
#include "dlrm.h"
#include "frontend.h"
#include "gpt.h"
#include "mlp.h"
#include "test_codegen.h"

/* The module of a .dt file after the whole pass pipeline, and an
 * interpreter over it holding model's params and state. */
typedef struct Ref {
  Arena *a;
  Module *m;
  Interp *it;
} Ref;

/* The interpreter's params and state := the model's, so each step is
 * compared from the same start. */
static void ref_sync(Ref *r, DtModel *model) {
  for (int k = 0; k < r->m->global.n; k++) {
    const Global *g = &r->m->global.a[k];
    if (g->kind == G_INPUT)
      continue;
    void *p = dtrt_model_tensor(model, g->name);
    assert_non_null(p);
    assert_true(interp_set_global(r->it, g->name, p));
  }
}

static void ref_init(Ref *r, const char *path, DtModel *model) {
  Diag d;
  diag_init(&d, stderr);
  r->a = arena_new();
  SrcFile *src = src_read(r->a, path);
  assert_non_null(src);
  r->m = fe_compile(r->a, src, NULL, 0, &d);
  assert_non_null(r->m);
  assert_true(passes_run(r->m, &d, NULL, NULL));
  r->it = interp_new(r->m);
  ref_sync(r, model);
}

static void ref_free(Ref *r) {
  interp_free(r->it);
  arena_free(r->a);
}

/* Runs @forward in the interpreter; returns a copy of output `name`. */
static float *ref_forward(Ref *r, const char *name) {
  Func *f = ir_find_func(r->m, "forward");
  const Inst **outs = calloc((size_t)f->inst.n, sizeof *outs);
  int n = cg_func_outputs(f, NULL, outs);
  void **buf = calloc((size_t)n, sizeof *buf);
  float *want = NULL;
  for (int k = 0; k < n; k++) {
    buf[k] = calloc((size_t)type_elems(&outs[k]->in[0]->type), 4);
    if (!strcmp(ir_get_str(outs[k], "name", ""), name))
      want = buf[k];
  }
  assert_true(interp_run(r->it, "forward", buf));
  for (int k = 0; k < n; k++)
    if (buf[k] != want)
      free(buf[k]);
  free(buf);
  free(outs);
  assert_non_null(want);
  return want;
}

/* Adam's and AdamW's update, p' = p - lr_t m' / (sqrt(v') + eps_t) (- lr wd p),
 * is ill-conditioned in the gradient: an element whose gradient is a sum that
 * nearly cancels (a bias of the transformer, summed over 1536 positions; a
 * weight of the CNN that few pixels reach) moves by about lr whatever the
 * sign its rounding gives it, and the rounding differs between the generated
 * loops and the interpreter (order, fused multiply-adds, BLAS kernels). So
 * the gradient is checked where it is well conditioned, in the state m' and v'
 * (linear in g and g^2) at CT_RTOL, and the params against the update
 * computed here in double from the model's own m' and v', with the step sizes
 * of dtrt_lr (optimizer.c's formulas). Sgd's update is linear in g and is
 * checked against the interpreter directly. */
static void adam_reference(const Module *m, DtModel *model, const char *name, const float *p0,
                           int64_t n, int64_t step, float *want) {
  const Train *t = &m->train;
  assert_true(t->clip_norm <= 0 && t->accumulate <= 1);
  char mn[128], vn[128];
  snprintf(mn, sizeof mn, "%s__m", name);
  snprintf(vn, sizeof vn, "%s__v", name);
  const float *m1 = dtrt_model_tensor(model, mn), *v1 = dtrt_model_tensor(model, vn);
  assert_non_null(m1);
  assert_non_null(v1);
  int sched = t->schedule >= 0 ? t->schedule : DT_SCHED_CONSTANT;
  double rate = dtrt_lr(sched, t->lr, t->warmup, t->total, 0, t->beta1, t->beta2, step);
  double eps = t->eps_kingma ? (double)(float)t->eps
                             : dtrt_lr(DT_SCHED_CONSTANT, t->eps, 0, 0, 0, 0, t->beta2, step);
  double decay = t->opt == OPT_ADAMW && t->weight_decay != 0
                     ? (double)dtrt_lr(sched, t->lr, t->warmup, t->total, 0, 0, 0, step) *
                           (double)(float)t->weight_decay
                     : 0;
  for (int64_t i = 0; i < n; i++)
    want[i] = (float)(p0[i] - rate * m1[i] / (sqrt(v1[i]) + eps) - decay * p0[i]);
}

/* One training step in the interpreter (after ref_sync and the model's own
 * step); compares the loss and every param and state of the model with it,
 * Adam's params as adam_reference says. */
static void ref_step(Ref *r, DtModel *model, float loss, int step) {
  const Module *m = r->m;
  bool adam = m->train.opt == OPT_ADAM || m->train.opt == OPT_ADAMW;
  float **p0 = calloc((size_t)m->global.n, sizeof *p0);
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    if (adam && g->kind == G_PARAM) {
      size_t bytes = sizeof(float) * (size_t)type_elems(&g->type);
      p0[k] = malloc(bytes);
      memcpy(p0[k], interp_global(r->it, g->name), bytes);
    }
  }
  float want, *wp = &want;
  assert_true(interp_run(r->it, "train_step", (void *const *)&wp));
  char what[128];
  snprintf(what, sizeof what, "%s loss of step %d", m->name, step);
  ct_close_to(&loss, &want, 1, what);
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    if (g->kind == G_INPUT)
      continue;
    int64_t n = type_elems(&g->type);
    float *got = dtrt_model_tensor(model, g->name);
    snprintf(what, sizeof what, "%s %s after step %d", m->name, g->name, step);
    if (p0[k]) {
      float *ref = malloc(sizeof(float) * (size_t)n);
      adam_reference(m, model, g->name, p0[k], n, step, ref);
      ct_close_to(got, ref, n, what);
      free(ref);
      free(p0[k]);
    } else {
      ct_close_to(got, interp_global(r->it, g->name), n, what);
    }
  }
  free(p0);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

static void mlp_example(void **state) {
  (void)state;
  static float x[MLP_X_ELEMS], logits[MLP_LOGITS_ELEMS];
  static int32_t y[MLP_Y_ELEMS];
  for (int i = 0; i < MLP_X_ELEMS; i++)
    x[i] = (float)(next() % 1000) / 1000;
  for (int i = 0; i < MLP_Y_ELEMS; i++)
    y[i] = (int32_t)(next() % 10);
  mlp *m;
  assert_int_equal(mlp_create(&m, 7), 0);
  Ref r;
  ref_init(&r, DTC_TEST_EXAMPLES "/mlp.dt", (DtModel *)m);
  assert_true(interp_set_global(r.it, "x", x) && interp_set_global(r.it, "y", y));

  assert_int_equal(mlp_forward(m, x, MLP_X_ELEMS, logits, MLP_LOGITS_ELEMS), 0);
  float *want = ref_forward(&r, "logits");
  ct_close_to(logits, want, MLP_LOGITS_ELEMS, "mlp logits");
  free(want);
  for (int s = 0; s < 3; s++) {
    float loss;
    ref_sync(&r, (DtModel *)m);
    assert_int_equal(mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, &loss), 0);
    ref_step(&r, (DtModel *)m, loss, s);
  }
  assert_int_equal(mlp_step(m), 3);
  assert_int_not_equal(mlp_forward(m, x, MLP_X_ELEMS - 1, logits, MLP_LOGITS_ELEMS), 0);
  assert_non_null(strstr(mlp_error(m), "elements"));
  ref_free(&r);
  mlp_destroy(m);
}

static void transformer_example(void **state) {
  (void)state;
  static int32_t ids[GPT_IDS_ELEMS], nxt[GPT_NEXT_ELEMS];
  static float logits[GPT_LOGITS_ELEMS];
  for (int i = 0; i < GPT_IDS_ELEMS; i++)
    ids[i] = (int32_t)(next() % GPT_DIM_V);
  for (int i = 0; i < GPT_NEXT_ELEMS; i++)
    nxt[i] = (int32_t)(next() % GPT_DIM_V);
  gpt *m;
  assert_int_equal(gpt_create(&m, 11), 0);
  Ref r;
  ref_init(&r, DTC_TEST_EXAMPLES "/transformer.dt", (DtModel *)m);
  assert_true(interp_set_global(r.it, "ids", ids) && interp_set_global(r.it, "next", nxt));

  assert_int_equal(gpt_forward(m, ids, GPT_IDS_ELEMS, logits, GPT_LOGITS_ELEMS), 0);
  float *want = ref_forward(&r, "logits");
  ct_close_to(logits, want, GPT_LOGITS_ELEMS, "gpt logits");
  free(want);
  for (int s = 0; s < 2; s++) {
    float loss;
    ref_sync(&r, (DtModel *)m);
    assert_int_equal(gpt_train_step(m, ids, GPT_IDS_ELEMS, nxt, GPT_NEXT_ELEMS, &loss), 0);
    ref_step(&r, (DtModel *)m, loss, s);
  }
  ref_free(&r);
  gpt_destroy(m);
}

static void cnn_example(void **state) {
  (void)state;
  static float x[CNN_X_ELEMS], logits[CNN_LOGITS_ELEMS];
  static int32_t y[CNN_Y_ELEMS];
  for (int i = 0; i < CNN_X_ELEMS; i++)
    x[i] = (float)(next() % 1000) / 1000;
  for (int i = 0; i < CNN_Y_ELEMS; i++)
    y[i] = (int32_t)(next() % 10);
  cnn *m;
  assert_int_equal(cnn_create(&m, 5), 0);
  Ref r;
  ref_init(&r, DTC_TEST_EXAMPLES "/cnn.dt", (DtModel *)m);
  assert_true(interp_set_global(r.it, "x", x) && interp_set_global(r.it, "y", y));
  assert_int_equal(cnn_forward(m, x, CNN_X_ELEMS, logits, CNN_LOGITS_ELEMS), 0);
  float *want = ref_forward(&r, "logits");
  ct_close_to(logits, want, CNN_LOGITS_ELEMS, "cnn logits");
  free(want);
  for (int s = 0; s < 2; s++) {
    float loss;
    ref_sync(&r, (DtModel *)m);
    assert_int_equal(cnn_train_step(m, x, CNN_X_ELEMS, y, CNN_Y_ELEMS, &loss), 0);
    ref_step(&r, (DtModel *)m, loss, s);
  }
  ref_free(&r);
  cnn_destroy(m);
}

/* Each step on a batch of its own, so the tables' touched rows change. */
static void dlrm_sparse(void **state) {
  (void)state;
  static int32_t items[DLRM_ITEMS_ELEMS], tags[DLRM_TAGS_ELEMS], cats[DLRM_CATS_ELEMS],
      offs[DLRM_OFFS_ELEMS];
  static float x[DLRM_X_ELEMS], y[DLRM_Y_ELEMS];
  dlrm *m;
  assert_int_equal(dlrm_create(&m, 3), 0);
  Ref r;
  ref_init(&r, DTC_TEST_MPI "/dlrm_sparse.dt", (DtModel *)m);
  for (int s = 0; s < 3; s++) {
    for (int i = 0; i < DLRM_ITEMS_ELEMS; i++)
      items[i] = (int32_t)(next() % 40 + 20 * (uint64_t)s);
    for (int i = 0; i < DLRM_TAGS_ELEMS; i++)
      tags[i] = (int32_t)(next() % 30);
    for (int i = 0; i < DLRM_CATS_ELEMS; i++)
      cats[i] = (int32_t)(next() % 20);
    for (int b = 0; b < DLRM_OFFS_ELEMS; b++)
      offs[b] = (int32_t)(b * DLRM_CATS_ELEMS / DLRM_OFFS_ELEMS);
    for (int i = 0; i < DLRM_X_ELEMS; i++)
      x[i] = (float)(next() % 1000) / 1000;
    for (int i = 0; i < DLRM_Y_ELEMS; i++)
      y[i] = (float)(next() % 2);
    assert_true(interp_set_global(r.it, "items", items) && interp_set_global(r.it, "tags", tags) &&
                interp_set_global(r.it, "cats", cats) && interp_set_global(r.it, "offs", offs) &&
                interp_set_global(r.it, "x", x) && interp_set_global(r.it, "y", y));
    float loss;
    ref_sync(&r, (DtModel *)m);
    assert_int_equal(dlrm_train_step(m, items, DLRM_ITEMS_ELEMS, tags, DLRM_TAGS_ELEMS, cats,
                                     DLRM_CATS_ELEMS, offs, DLRM_OFFS_ELEMS, x, DLRM_X_ELEMS, y,
                                     DLRM_Y_ELEMS, &loss),
                     0);
    ref_step(&r, (DtModel *)m, loss, s);
  }
  ref_free(&r);
  dlrm_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mlp_example),
      cmocka_unit_test(transformer_example),
      cmocka_unit_test(cnn_example),
      cmocka_unit_test(dlrm_sparse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
