/* optimizer.c: the parameter update at the end of @train_step, as IR.
 * Requires: each trained param's value and gradient g in f. Guarantees: its new
 * value and optimizer state stored back (state globals "<param>__m" and
 * "<param>__v", zero-initialised, created here).
 *
 * lr is the scalar op `lr`, evaluated by dtrt_lr at the runtime's step counter
 * s (0 on the first step; t = s + 1), with W warm-up and T total steps:
 *
 *   constant  lr = base
 *   warmup    lr = base t / W while s < W, then base
 *   cosine    as warmup while s < W, then
 *             lr = base (1 + cos(pi min(1, (s - W) / (T - W)))) / 2   (0 if T <= W)
 *
 * With wd the weight decay:
 *
 *   sgd    g' = g + wd p
 *          m' = momentum m + g'                       (no m when momentum is 0:
 *          p' = p - lr m'                              p' = p - lr g')
 *          nesterov: p' = p - lr (g' + momentum m')   (torch.optim.SGD's)
 *          dampening d: m' = momentum m + (1 - d) g' after the first step,
 *          m' = g' on it (torch.optim.SGD's buffer starts at g'); the factor
 *          is an lr op of base 1 - d, first 1
 *   adam   g' = g + wd p
 *          m' = beta1 m + (1 - beta1) g'
 *          v' = beta2 v + (1 - beta2) g' g'
 *          p' = p - lr / (1 - beta1^t) m' / (sqrt(v' / (1 - beta2^t)) + eps)
 *             = p - lr_t m' / (sqrt(v') + eps_t),
 *          lr_t = lr sqrt(1 - beta2^t) / (1 - beta1^t), eps_t = eps sqrt(1 - beta2^t)
 *          (torch.optim.Adam); with eps_kingma, eps_t = eps (Kingma and Ba's
 *          efficient form: eps added to the uncorrected sqrt(v'))
 *   adamw  as adam with g' = g, and p' = ... - lr wd p
 *
 * With clip_norm > 0 every g is first scaled by min(1, clip_norm / (|g| +
 * 1e-6)), |g| the norm of all gradients together (torch.nn.utils.
 * clip_grad_norm_), before weight decay.
 *
 * lr_t and eps_t are lr ops (one scalar each per step): dtrt_lr folds in the
 * corrections, sqrt(1 - beta2^t) for beta2 > 0 and 1 / (1 - beta1^t) for
 * beta1 > 0. The lr ops whose base is not the learning rate (eps_t, the
 * dampening factor) are marked fixed: NAME_set_lr replaces the base of the
 * others. */
#include <string.h>

#include "ir.h"
#include "passes.h"

typedef struct Opt {
  Module *m;
  Func *f;
  Loc loc;           /* of the param being updated */
} Opt;

static Inst *cnst(Opt *o, double v) {
  Inst *c = ir_new(o->f, OP_const, o->loc, 0, NULL);
  ir_set_float(c, "value", v);
  return ir_finish(c);
}

static Inst *bin(Opt *o, Op op, Inst *a, Inst *b) { return ir_make(o->f, op, o->loc, 2, a, b); }

static Inst *lr(Opt *o, double beta1, double beta2) {
  const Train *t = &o->m->train;
  Inst *r = ir_new(o->f, OP_lr, t->loc, 0, NULL);
  ir_set_float(r, "base", t->lr);
  int schedule = t->schedule >= 0 ? t->schedule : DT_SCHED_CONSTANT;
  ir_set_str(r, "schedule", dtrt_schedule_names[schedule]);
  ir_set_int(r, "warmup", t->warmup);
  ir_set_int(r, "total", t->total);
  ir_set_float(r, "beta1", beta1);
  ir_set_float(r, "beta2", beta2);
  return ir_finish(r);
}

/* eps sqrt(1 - beta2^t), t the step (dtrt_lr with base eps, beta2 alone). */
static Inst *eps_rate(Opt *o) {
  const Train *t = &o->m->train;
  Inst *r = ir_new(o->f, OP_lr, t->loc, 0, NULL);
  ir_set_float(r, "base", t->eps);
  ir_set_str(r, "schedule", dtrt_schedule_names[DT_SCHED_CONSTANT]);
  ir_set_int(r, "warmup", 0);
  ir_set_int(r, "total", 0);
  ir_set_float(r, "beta1", 0);
  ir_set_float(r, "beta2", t->beta2);
  ir_set_int(r, "fixed", 1);
  return ir_finish(r);
}

/* sgd's dampening: 1 on the first step, 1 - dampening after it. */
static Inst *damp_rate(Opt *o) {
  const Train *t = &o->m->train;
  Inst *r = ir_new(o->f, OP_lr, t->loc, 0, NULL);
  ir_set_float(r, "base", 1 - t->dampening);
  ir_set_str(r, "schedule", dtrt_schedule_names[DT_SCHED_CONSTANT]);
  ir_set_int(r, "warmup", 0);
  ir_set_int(r, "total", 0);
  ir_set_float(r, "beta1", 0);
  ir_set_float(r, "beta2", 0);
  ir_set_float(r, "first", 1);
  ir_set_int(r, "fixed", 1);
  return ir_finish(r);
}

/* torch.nn.utils.clip_grad_norm_'s factor: min(1, clip_norm / (|g| + 1e-6)),
 * |g| the 2-norm of every gradient together (min(1, r) as 1 - relu(1 - r)).
 * Under SPMD each sum over a split gradient is a partial sum, which the
 * sharding pass reduces, so the norm is the whole gradient's. */
static Inst *clip_scale(Opt *o, Inst *const *grad) {
  Inst *total = NULL;
  for (int k = 0; k < o->m->global.n; k++) {
    if (!grad[k])
      continue;
    Inst *sq = bin(o, OP_mul, grad[k], grad[k]);
    int64_t axes[IR_MAX_RANK];
    for (int d = 0; d < sq->type.rank; d++)
      axes[d] = d;
    if (sq->type.rank) {
      Inst *s = ir_new(o->f, OP_sum, o->loc, 1, &sq);
      ir_set_ints(s, "axes", axes, sq->type.rank);
      sq = ir_finish(s);
    }
    total = total ? bin(o, OP_add, total, sq) : sq;
  }
  Inst *norm = bin(o, OP_add, ir_make(o->f, OP_sqrt, o->loc, 1, total), cnst(o, 1e-6));
  Inst *r = bin(o, OP_div, cnst(o, o->m->train.clip_norm), norm);
  Inst *over = ir_make(o->f, OP_relu, o->loc, 1, bin(o, OP_sub, cnst(o, 1), r));
  return bin(o, OP_sub, cnst(o, 1), over);
}

/* The state global "<param>__<suffix>", created on first use. */
static const char *state(Opt *o, int param, const char *suffix) {
  Module *m = o->m;
  const char *name = arena_printf(m->arena, "%s__%s", m->global.a[param].name, suffix);
  if (!ir_find_global(m, name)) {
    Global p = m->global.a[param];
    Global *s = ir_add_global(m, name, G_STATE, p.type, p.loc);
    s->init = DT_INIT_ZEROS;
    s->shard = p.shard;
  }
  return name;
}

static Inst *load(Opt *o, const char *global) {
  Inst *l = ir_new(o->f, OP_load, o->loc, 0, NULL);
  ir_set_str(l, "global", global);
  return ir_finish(l);
}

static void store(Opt *o, const char *global, Inst *v) {
  Inst *s = ir_new(o->f, OP_store, o->loc, 1, &v);
  ir_set_str(s, "global", global);
  ir_finish(s);
}

/* a x + b y, leaving out a factor of 1 */
static Inst *axpby(Opt *o, double a, Inst *x, double b, Inst *y) {
  Inst *l = a == 1 ? x : bin(o, OP_mul, cnst(o, a), x);
  return bin(o, OP_add, l, b == 1 ? y : bin(o, OP_mul, cnst(o, b), y));
}

bool opt_emit(Module *m, Func *f, Inst *const *value, Inst *const *grad, Diag *d) {
  const Train *t = &m->train;
  int kind = t->opt >= 0 ? t->opt : OPT_SGD;
  const char *name = ir_opt_names[kind];
  bool sgd = kind == OPT_SGD, adamw = kind == OPT_ADAMW, adam = adamw || kind == OPT_ADAM;
  if (adam && !(t->beta1 >= 0 && t->beta1 < 1 && t->beta2 >= 0 && t->beta2 < 1)) {
    diag_error(d, t->loc, "%s needs beta1 and beta2 in [0, 1), got %g and %g", name, t->beta1,
               t->beta2);
    return false;
  }
  Opt o = {m, f, t->loc};
  Inst *rate = lr(&o, adam ? t->beta1 : 0, adam ? t->beta2 : 0);
  /* torch.optim.Adam adds eps to sqrt(v / (1 - beta2^t)); with the
   * corrections in the step size that is eps sqrt(1 - beta2^t) added to
   * sqrt(v). Kingma and Ba's efficient form adds eps itself. */
  Inst *eps = NULL;
  if (adam)
    eps = t->eps_kingma ? cnst(&o, t->eps) : eps_rate(&o);
  Inst *decay = adamw && t->weight_decay != 0 ? lr(&o, 0, 0) : NULL;
  if (decay)
    decay = bin(&o, OP_mul, decay, cnst(&o, t->weight_decay));

  Inst *damp = sgd && t->momentum != 0 && t->dampening != 0 ? damp_rate(&o) : NULL;

  int ng = m->global.n;
  Inst *clip = t->clip_norm > 0 ? clip_scale(&o, grad) : NULL;
  for (int k = 0; k < ng; k++) {
    if (!grad[k])
      continue;
    o.loc = m->global.a[k].loc;
    const char *param = m->global.a[k].name;
    Inst *p = value[k], *g = clip ? bin(&o, OP_mul, clip, grad[k]) : grad[k], *step;
    if (t->weight_decay != 0 && !adamw)
      g = axpby(&o, 1, g, t->weight_decay, p);
    const char *mname = NULL, *vname = NULL;
    Inst *m1 = NULL, *v1 = NULL;
    if (sgd && t->momentum != 0) {
      mname = state(&o, k, "m");
      Inst *gd = damp ? bin(&o, OP_mul, damp, g) : g;
      m1 = axpby(&o, t->momentum, load(&o, mname), 1, gd);
      step = t->nesterov ? axpby(&o, 1, g, t->momentum, m1) : m1;
    } else if (sgd) {
      step = g;
    } else {
      mname = state(&o, k, "m");
      vname = state(&o, k, "v");
      m1 = axpby(&o, t->beta1, load(&o, mname), 1 - t->beta1, g);
      v1 = axpby(&o, t->beta2, load(&o, vname), 1 - t->beta2, bin(&o, OP_mul, g, g));
      Inst *den = bin(&o, OP_add, ir_make(f, OP_sqrt, o.loc, 1, v1), eps);
      step = bin(&o, OP_div, m1, den);
    }
    Inst *p1 = bin(&o, OP_sub, p, bin(&o, OP_mul, rate, step));
    if (decay)
      p1 = bin(&o, OP_sub, p1, bin(&o, OP_mul, decay, p));
    store(&o, param, p1);
    if (m1)
      store(&o, mname, m1);
    if (v1)
      store(&o, vname, v1);
  }
  return true;
}
