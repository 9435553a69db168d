/* train.c: the training statement: minimize, its optimizer with its
 * arguments, the learning-rate schedule and the param groups. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- training ---- */

/* schedule = constant | warmup(steps = N)
 *          | cosine(total = N, warmup = 0, min_lr = 0)
 *          | linear(total = N, warmup = 0, end_factor = 0)
 *          | step(step_size = N, gamma = 0.1, warmup = 0)
 * Integers are step counts; the numbers are Train's fields of the same name
 * (their ranges from ir_train_fields). *min_lr gets cosine's min_lr argument,
 * checked against lr once that is known. */
static bool lower_schedule(Ctx *c, const Expr *e, Train *t, const Expr **min_lr) {
  static const struct {
    const char *param[3];
    int n;
  } form[DT_SCHED_COUNT] = {
      [DT_SCHED_WARMUP] = {{"steps"}, 1},
      [DT_SCHED_COSINE] = {{"total", "warmup", "min_lr"}, 3},
      [DT_SCHED_LINEAR] = {{"total", "warmup", "end_factor"}, 3},
      [DT_SCHED_STEP] = {{"step_size", "gamma", "warmup"}, 3},
  };
  if (e->kind != E_IDENT && e->kind != E_CALL) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'schedule' must be constant, warmup(steps = N), cosine(total = N), "
                 "linear(total = N) or step(step_size = N)");
    return false;
  }
  int k = dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, e->s);
  if (k < 0) {
    diag_error(c->d, e->loc, "unknown schedule '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, dtrt_schedule_names, DT_SCHED_COUNT));
    return false;
  }
  t->schedule = k;
  Expr *arg[3] = {NULL, NULL, NULL};
  if (k == DT_SCHED_CONSTANT)
    return e->kind != E_CALL || fe_bind(e, NULL, 0, 0, 0, arg, c->a, c->d);
  const char *const *param = form[k].param;
  if (e->kind != E_CALL) {
    diag_error(c->d, e->loc, "'%s' needs its argument '%s'", e->s, param[0]);
    return false;
  }
  if (!fe_bind(e, param, form[k].n, 0, 1, arg, c->a, c->d))
    return false;
  if (k == DT_SCHED_STEP)
    t->gamma = 0.1;
  const Expr *warm_at = NULL;
  for (int j = 0; j < form[k].n; j++) {
    const char *p = param[j];
    if (!arg[j])
      continue;
    const IrField *f = ir_field(ir_train_fields, p);
    if (f && f->kind == 'f') {
      if (!real_in(c, arg[j], p, f->range, (double *)((char *)t + f->off)))
        return false;
      if (!strcmp(p, "min_lr"))
        *min_lr = arg[j];
      continue;
    }
    int64_t v;
    if (!int_arg(c, arg[j], arena_printf(c->a, "'%s'", p), &v))
      return false;
    bool warm = !strcmp(p, "warmup");
    if (v < (warm ? 0 : 1)) {
      diag_error(c->d, arg[j]->loc, "'%s' must be %s, not %lld", p,
                 warm ? "non-negative" : "positive", (long long)v);
      return false;
    }
    if (warm || k == DT_SCHED_WARMUP) {
      t->warmup = v;
      warm_at = arg[j];
    } else if (k == DT_SCHED_STEP) {
      t->step_size = v;
    } else {
      t->total = v;
    }
  }
  if ((k == DT_SCHED_COSINE || k == DT_SCHED_LINEAR) && warm_at && t->warmup >= t->total) {
    diag_error(c->d, warm_at->loc, "'warmup' must be below 'total'");
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

/* A list of params: identifiers or strings (a block's "layers.g1"). */
static bool is_names(const Expr *e) {
  bool ok = e->kind == E_LIST;
  for (int k = 0; ok && k < e->args.n; k++)
    ok = e->args.a[k].val->kind == E_IDENT || e->args.a[k].val->kind == E_STR;
  return ok;
}

/* no_decay = biases_and_norms | "[" param { "," param } "]": the params the
 * weight decay skips. biases_and_norms: those of rank below 2 (a loop's
 * stacked param: per iteration), nanoGPT's rule; a list is resolved by
 * lower_groups. */
static bool no_decay_arg(Ctx *c, const Expr *e, Train *t) {
  if (e->kind == E_IDENT && !strcmp(e->s, "biases_and_norms")) {
    t->decay_min_rank = 2;
    return true;
  }
  if (!is_names(e)) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'no_decay' must be biases_and_norms or a list of params, as "
                 "[b1, \"layers.g1\"]");
    return false;
  }
  c->no_decay = e;
  return true;
}

/* groups = "[" group { "," group } "]",
 * group = "group" "(" params [, lr = X] [, weight_decay = Y] ")": torch's
 * param_groups, params a list as no_decay's; checked here, resolved by
 * lower_groups. no_wd: the optimizer, when it has no weight decay. */
static bool groups_arg(Ctx *c, const Expr *e, const char *no_wd) {
  static const char *const param[] = {"params", "lr", "weight_decay"};
  if (e->kind != E_LIST) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'groups' must be a list of group(params, lr, weight_decay)");
    return false;
  }
  bool ok = true;
  for (int k = 0; k < e->args.n; k++) {
    const Expr *g = e->args.a[k].val;
    if (g->kind != E_CALL || strcmp(g->s, "group")) {
      diag_error(c->d, g->loc, "a group must be group(params, lr, weight_decay)");
      ok = false;
      continue;
    }
    Expr *arg[3] = {0};
    if (!fe_bind(g, param, 3, 1, 1, arg, c->a, c->d)) {
      ok = false;
      continue;
    }
    if (!is_names(arg[0])) {
      diag_error(c->d, arg[0]->loc, "a group's params must be a list of params, as "
                 "[b1, \"layers.g1\"]");
      ok = false;
    }
    double v;
    if (arg[1])
      ok &= real_in(c, arg[1], "lr", &ir_positive, &v);
    if (arg[2] && no_wd) {
      diag_error(c->d, arg[2]->loc, "%s takes no weight decay, nor do its groups", no_wd);
      ok = false;
    } else if (arg[2]) {
      ok &= real_in(c, arg[2], "weight_decay", &ir_nonnegative, &v);
    }
  }
  if (ok)
    c->groups = e;
  return ok;
}

/* The param named by x, marked once (*seen), or NULL after reporting. */
static Global *group_param(Ctx *c, const Expr *x, const char *what, bool *seen,
                           const char **names, int n) {
  Module *m = c->m;
  Global *g = ir_find_global(m, x->s);
  if (g && g->kind == G_PARAM) {
    if (seen[g - m->global.a]) {
      diag_error(c->d, x->loc, "param '%s' is in two groups (no_decay counts as one)", x->s);
      return NULL;
    }
    seen[g - m->global.a] = true;
    return g;
  }
  if (g) {
    diag_error(c->d, x->loc, "'%s' in '%s' is %s, not a param", x->s, what,
               g->kind == G_INPUT ? "an input" : "a buffer");
    return NULL;
  }
  /* a block's param named alone: its instance's global "layers.g1" */
  const char *hint = NULL;
  size_t len = strlen(x->s);
  for (int k = 0; k < n && !hint; k++) {
    size_t l = strlen(names[k]);
    if (l > len + 1 && names[k][l - len - 1] == '.' && !strcmp(names[k] + l - len, x->s))
      hint = arena_printf(c->a, "; did you mean \"%s\"?", names[k]);
  }
  diag_error(c->d, x->loc, "'%s' in '%s' is not a param%s", x->s, what,
             hint ? hint : fe_did_you_mean(c->a, x->s, names, n));
  return NULL;
}

void lower_groups(Ctx *c) {
  Module *m = c->m;
  if (!c->no_decay && !c->groups)
    return;
  const char **names = arena_alloc(c->a, sizeof *names * (size_t)(m->global.n + 1));
  bool *seen = arena_alloc(c->a, sizeof *seen * (size_t)(m->global.n + 1));
  int n = 0;
  for (int k = 0; k < m->global.n; k++) {
    seen[k] = false;
    if (m->global.a[k].kind == G_PARAM)
      names[n++] = m->global.a[k].name;
  }
  for (int j = 0; c->no_decay && j < c->no_decay->args.n; j++) {
    Global *g = group_param(c, c->no_decay->args.a[j].val, "no_decay", seen, names, n);
    if (g)
      g->no_decay = 1;
  }
  for (int k = 0; c->groups && k < c->groups->args.n; k++) {
    static const char *const param[] = {"params", "lr", "weight_decay"};
    Expr *arg[3] = {0};
    const Expr *grp = c->groups->args.a[k].val;
    bool ok = fe_bind(grp, param, 3, 1, 1, arg, c->a, c->d);   /* checked by groups_arg */
    double lr = 0, wd = -1;
    if (arg[1])
      ok &= float_arg(c, arg[1], "'lr'", &lr);
    if (arg[2])
      ok &= float_arg(c, arg[2], "'weight_decay'", &wd);
    DTC_ASSERT(ok);
    for (int j = 0; j < arg[0]->args.n; j++) {
      Global *g = group_param(c, arg[0]->args.a[j].val, "groups", seen, names, n);
      if (!g)
        continue;
      g->lr = lr;
      g->no_decay = wd == 0;
      g->weight_decay = wd > 0 ? wd : 0;
    }
  }
}

/* optimizer = sgd(lr, momentum, weight_decay, schedule, nesterov, clip_norm, dampening,
 *                 accumulate, no_decay, groups)
 *           | adam(lr, beta1, beta2, eps, weight_decay, schedule, eps_form, clip_norm,
 *                  accumulate, no_decay, groups)
 *           | adamw(...)
 *           | demo(lr, beta, topk, chunk, weight_decay, schedule, no_decay, groups)
 *           | adagrad(lr, lr_decay, weight_decay, eps, initial_accumulator_value, schedule,
 *                     no_decay, groups)
 *           | rowwise_adagrad(...)
 *           | sparse_adam(lr, beta1, beta2, eps, schedule, groups) */
static bool lower_optimizer(Ctx *c, const Expr *e, Train *t) {
  static const char *const sgd[] = {"lr",       "momentum", "weight_decay",
                                    "schedule", "nesterov", "clip_norm", "dampening",
                                    "accumulate", "no_decay", "groups"};
  static const char *const adam[] = {"lr",           "beta1",    "beta2",     "eps",
                                     "weight_decay", "schedule", "eps_form",  "clip_norm",
                                     "accumulate", "no_decay", "groups"};
  static const char *const demo[] = {"lr", "beta", "topk", "chunk", "weight_decay", "schedule",
                                     "no_decay", "groups"};
  static const char *const adagrad[] = {
      "lr", "lr_decay", "weight_decay", "eps", "initial_accumulator_value", "schedule",
      "no_decay", "groups"};
  static const char *const sparse_adam[] = {"lr", "beta1", "beta2", "eps", "schedule", "groups"};
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
  const Expr *min_lr = NULL;
  for (int k = 0; k < nparam; k++) {
    if (!arg[k])
      continue;
    const char *p = param[k];
    if (!strcmp(p, "schedule"))
      ok &= lower_schedule(c, arg[k], t, &min_lr);
    else if (!strcmp(p, "no_decay"))
      ok &= no_decay_arg(c, arg[k], t);
    else if (!strcmp(p, "groups"))
      ok &= groups_arg(c, arg[k], kind == OPT_SPARSE_ADAM ? "sparse_adam" : NULL);
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
  if (ok && min_lr && t->min_lr > t->lr) {
    diag_error(c->d, min_lr->loc, "'min_lr' must be at most lr = %g, not %g", t->lr, t->min_lr);
    ok = false;
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
