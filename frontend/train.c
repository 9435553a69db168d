/* train.c: the training statement: minimize, its optimizer with its
 * arguments, and the learning-rate schedule. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- training ---- */

/* schedule = constant | warmup(steps = N) | cosine(total = N, warmup = 0) */
static bool lower_schedule(Ctx *c, const Expr *e, Train *t) {
  static const char *const cosine[] = {"total", "warmup"};
  static const char *const warm[] = {"steps"};
  if (e->kind != E_IDENT && e->kind != E_CALL) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'schedule' must be constant, warmup(steps = N) or cosine(total = N)");
    return false;
  }
  int k = dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, e->s);
  if (k < 0) {
    diag_error(c->d, e->loc, "unknown schedule '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, dtrt_schedule_names, DT_SCHED_COUNT));
    return false;
  }
  t->schedule = k;
  Expr *arg[2] = {NULL, NULL};
  if (k == DT_SCHED_CONSTANT)
    return e->kind != E_CALL || fe_bind(e, NULL, 0, 0, 0, arg, c->a, c->d);
  if (e->kind != E_CALL) {
    diag_error(c->d, e->loc, "'%s' needs its argument '%s'", e->s, k == DT_SCHED_WARMUP ? "steps" : "total");
    return false;
  }
  if (!fe_bind(e, k == DT_SCHED_WARMUP ? warm : cosine, k == DT_SCHED_WARMUP ? 1 : 2, 0, 1, arg, c->a, c->d))
    return false;
  int64_t v[2] = {0, 0};
  for (int j = 0; j < 2; j++) {
    if (!arg[j])
      continue;
    const char *what = k == DT_SCHED_WARMUP ? "steps" : cosine[j];
    if (!int_arg(c, arg[j], arena_printf(c->a, "'%s'", what), &v[j]))
      return false;
    if (v[j] < (j == 0 ? 1 : 0)) {
      diag_error(c->d, arg[j]->loc, "'%s' must be %s", what, j == 0 ? "positive" : "non-negative");
      return false;
    }
  }
  t->warmup = k == DT_SCHED_WARMUP ? v[0] : v[1];
  t->total = k == DT_SCHED_WARMUP ? 0 : v[0];
  if (k == DT_SCHED_COSINE && t->warmup >= t->total) {
    diag_error(c->d, arg[1]->loc, "'warmup' must be below 'total'");
    return false;
  }
  return true;
}
/* accumulate = K: the calls of the training step whose gradients one update
 * averages, 1 to IR_MAX_ACCUMULATE. */
static bool accumulate_arg(Ctx *c, const Expr *e, int64_t *out) {
  if (!int_arg(c, e, "'accumulate'", out))
    return false;
  if (*out < 1 || *out > IR_MAX_ACCUMULATE) {
    diag_error(c->d, e->loc, "'accumulate' must be between 1 and %d, not %lld",
               IR_MAX_ACCUMULATE, (long long)*out);
    return false;
  }
  return true;
}

/* demo's chunk, 1 to IR_DEMO_MAX_CHUNK, or topk, at least 1 (at most chunk
 * x chunk, checked once both are known). */
static bool demo_arg(Ctx *c, const Expr *e, const char *p, int64_t *out) {
  bool chunk = !strcmp(p, "chunk");
  if (!int_arg(c, e, chunk ? "'chunk'" : "'topk'", out))
    return false;
  if (*out < 1 || (chunk && *out > IR_DEMO_MAX_CHUNK)) {
    if (chunk)
      diag_error(c->d, e->loc, "'chunk' must be between 1 and %d, not %lld", IR_DEMO_MAX_CHUNK,
                 (long long)*out);
    else
      diag_error(c->d, e->loc, "'topk' must be at least 1, not %lld", (long long)*out);
    return false;
  }
  return true;
}

/* optimizer = sgd(lr, momentum, weight_decay, schedule, nesterov, clip_norm, dampening,
 *                 accumulate)
 *           | adam(lr, beta1, beta2, eps, weight_decay, schedule, eps_form, clip_norm,
 *                  accumulate)
 *           | adamw(...)
 *           | demo(lr, beta, topk, chunk, weight_decay, schedule)
 *           | adagrad(lr, lr_decay, weight_decay, eps, initial_accumulator_value, schedule)
 *           | rowwise_adagrad(...)
 *           | sparse_adam(lr, beta1, beta2, eps, schedule) */
static bool lower_optimizer(Ctx *c, const Expr *e, Train *t) {
  static const char *const sgd[] = {"lr",       "momentum", "weight_decay",
                                    "schedule", "nesterov", "clip_norm", "dampening",
                                    "accumulate"};
  static const char *const adam[] = {"lr",           "beta1",    "beta2",     "eps",
                                     "weight_decay", "schedule", "eps_form",  "clip_norm",
                                     "accumulate"};
  static const char *const demo[] = {"lr", "beta", "topk", "chunk", "weight_decay", "schedule"};
  static const char *const adagrad[] = {
      "lr", "lr_decay", "weight_decay", "eps", "initial_accumulator_value", "schedule"};
  static const char *const sparse_adam[] = {"lr", "beta1", "beta2", "eps", "schedule"};
  int kind = dtrt_name_index(ir_opt_names, OPT_COUNT, e->s);
  if (kind < 0) {
    diag_error(c->d, e->loc, "unknown optimizer '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, ir_opt_names, OPT_COUNT));
    return false;
  }
  bool is_sgd = kind == OPT_SGD, is_adamw = kind == OPT_ADAMW, is_demo = kind == OPT_DEMO;
  bool is_adagrad = kind == OPT_ADAGRAD || kind == OPT_ROWWISE_ADAGRAD;
  t->opt = kind;
  t->schedule = DT_SCHED_CONSTANT;
  t->lr = is_sgd || is_adagrad ? 0.01 : 1e-3;
  if (is_adagrad) {
    t->eps = 1e-10; /* torch.optim.Adagrad's */
  } else if (is_demo) {
    /* the reference's defaults (bloc97/DeMo's demo.py) */
    t->beta = 0.999;
    t->topk = 32;
    t->chunk = 64;
  } else if (!is_sgd) {
    t->beta1 = 0.9;
    t->beta2 = 0.999;
    t->eps = 1e-8;
    t->weight_decay = is_adamw ? 0.01 : 0;
  }
  const char *const *param = is_sgd                    ? sgd
                             : is_demo                 ? demo
                             : is_adagrad              ? adagrad
                             : kind == OPT_SPARSE_ADAM ? sparse_adam
                                                       : adam;
  int nparam = is_sgd                    ? COUNTOF(sgd)
               : is_demo                 ? COUNTOF(demo)
               : is_adagrad              ? COUNTOF(adagrad)
               : kind == OPT_SPARSE_ADAM ? COUNTOF(sparse_adam)
                                         : COUNTOF(adam);
  Expr *arg[COUNTOF(adam)] = {0};
  if (e->kind == E_CALL && !fe_bind(e, param, nparam, 1, 0, arg, c->a, c->d))
    return false;
  bool ok = true;
  for (int k = 0; k < nparam; k++) {
    if (!arg[k])
      continue;
    const char *p = param[k];
    if (!strcmp(p, "schedule"))
      ok &= lower_schedule(c, arg[k], t);
    else if (!strcmp(p, "nesterov")) {
      bool on = false;
      ok &= bool_arg(c, arg[k], p, &on);
      t->nesterov = on;
    }
    else if (!strcmp(p, "eps_form"))
      ok &= choice_in(c, arg[k], p, (const char *const[]){"pytorch", "kingma"}, 2,
                      &t->eps_kingma);
    else if (!strcmp(p, "accumulate"))
      ok &= accumulate_arg(c, arg[k], &t->accumulate);
    else if (!strcmp(p, "topk") || !strcmp(p, "chunk"))
      ok &= demo_arg(c, arg[k], p, !strcmp(p, "topk") ? &t->topk : &t->chunk);
    else {
      /* a number: its range and its place in Train from the IR's field table */
      const IrField *f = ir_field(ir_train_fields, p);
      DTC_ASSERT(f && f->kind == 'f' && f->range);
      ok &= real_in(c, arg[k], p, f->range, (double *)((char *)t + f->off));
    }
  }
  if (ok && t->nesterov && t->momentum == 0) {
    diag_error(c->d, e->loc, "'nesterov' needs a momentum above 0");
    ok = false;
  }
  /* a chunk's coefficients: chunk x chunk in a 2-D tile (the default topk
   * is at most that) */
  if (ok && is_demo && !arg[2] && t->topk > t->chunk * t->chunk)
    t->topk = t->chunk * t->chunk;
  if (ok && is_demo && t->topk > t->chunk * t->chunk) {
    diag_error(c->d, arg[2]->loc, "'topk' must be at most chunk x chunk = %lld, not %lld",
               (long long)(t->chunk * t->chunk), (long long)t->topk);
    ok = false;
  }
  /* torch.optim.SGD refuses Nesterov momentum with dampening */
  if (ok && t->nesterov && t->dampening != 0) {
    diag_error(c->d, arg[6]->loc, "'nesterov' needs 'dampening' 0, not %g", t->dampening);
    ok = false;
  }
  return ok;
}

/* ---- minimize ---- */

void lower_minimize(Ctx *c, const Stmt *s) {
  if (c->minimized) {
    diag_error(c->d, s->loc, "a second minimize statement; a model has at most one");
    return;
  }
  c->minimized = true;
  Train *t = &c->m->train;
  t->loc = s->loc;
  bool ok = lower_optimizer(c, s->val, t);
  Inst *v = ref(c, s->name, s->name_loc);
  if (!v || !ok)
    return;
  char buf[128];
  if (v->type.dtype != DT_F32 || v->type.rank != 0) {
    diag_error(c->d, s->name_loc, "the minimized value must be an f32 scalar; '%s' is %s", s->name,
               type_str(&v->type, buf, sizeof buf));
    return;
  }
  t->loss = s->name;
  Name *n = lookup(c, s->name);
  if (!n->output) {
    n->output = true;
    emit_output(c, s->name, v, s->name_loc);
  }
}
