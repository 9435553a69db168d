/* optimizer.c: the parameter update at the end of @train_step, as IR.
 * Requires: each trained param's value and gradient g in f. Guarantees: its new
 * value and optimizer state stored back (state globals "<param>__m",
 * "<param>__v" and, with accumulation, "<param>__acc", zero-initialised,
 * created here).
 *
 * lr is the scalar op `lr`, evaluated by dtrt_lr at the runtime's step counter
 * s (0 on the first step; t = s + 1), with W warm-up and T total steps:
 *
 *   constant  lr = base
 *   warmup    lr = base t / W while s < W, then base
 *   cosine    as warmup while s < W, then, f = min(1, (s - W) / (T - W)),
 *             lr = min_lr + (base - min_lr) (1 + cos(pi f)) / 2   (min_lr if T <= W)
 *   linear    as warmup while s < W, then lr = base (1 + (end_factor - 1) f)
 *   step      as warmup while s < W, then lr = base gamma^floor((s - W) / step_size)
 *
 * The lr op carries min_lr, end_factor or gamma as `arg`, step_size as total.
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
 *   (wd is 0 for a param marked no_decay; a param group's for a param with
 *   a weight_decay of its own; else 0 for one whose rank, a loop's stacked
 *   param's per iteration, is below decay_min_rank, and the optimizer's.
 *   A param with an lr of its own has lr ops of that base: torch's
 *   param_groups)
 *   demo   DeMo (Peng, Quesnelle and Kingma, 2024; bloc97/DeMo's demo.py),
 *          with delta the state "<param>__delta" and g this rank's gradient:
 *          d  = beta delta + lr g
 *          c  = demo_compress(d): each tile's topk DCT coefficients
 *          delta' = d - IDCT(c)                          (demo_residual)
 *          p' = p (1 - lr wd) - lr sign(IDCT(mean of every rank's c)) (demo_sign)
 *          On one device the mean is c itself; under SPMD the exchange
 *          pass gives each rank its own gradient (no all_reduce) and
 *          gathers every rank's c (passes/exchange.c). A loop's stacked
 *          param [L, ...] is L params, each tiled alone (`stacked`).
 *   adagrad g' = g + wd p
 *          s' = s + g' g'                               (state "<param>__sum")
 *          p' = p - lr g' / (sqrt(s' + s0) + eps)       (torch.optim.Adagrad; s0 its
 *                                                        initial_accumulator_value)
 *   rowwise_adagrad  as adagrad for dense params; sparse_adam  as adam
 *
 * A sparse table (Global.sparse) has for gradient sparse_values, whose last
 * operand is sparse_rows: its touched rows and their values. It is updated
 * in those rows only, by the sparse_* ops, as torch.optim updates a param
 * whose gradient is sparse (g the row's summed gradient, t the step):
 *
 *   sgd              p[r] -= lr g                        (no momentum, weight decay)
 *   adagrad          s[r] += g g; p[r] -= clr g / (sqrt(s[r] + s0) + eps),
 *                    clr = lr / (1 + (t - 1) lr_decay)   (no weight decay)
 *   rowwise_adagrad  as adagrad with s [R], s[r] += mean(g g) (FBGEMM's)
 *   sparse_adam      m[r] += (1 - beta1) (g - m[r]); v[r] += (1 - beta2) (g g - v[r]);
 *                    p[r] -= lr_t m[r] / (sqrt(v[r]) + eps)  (torch.optim.SparseAdam:
 *                    eps added to the uncorrected sqrt(v))
 *
 * adam and adamw have no sparse form, nor do clip_norm and accumulate; a
 * located error says so. lr_decay is applied to sparse tables only (dense
 * params with lr_decay are refused).
 *
 * With clip_norm > 0 every g is first scaled by min(1, clip_norm / (|g| +
 * 1e-6)), |g| the norm of all gradients together (torch.nn.utils.
 * clip_grad_norm_), before weight decay.
 *
 * With accumulate = K > 1 each call adds its gradient to the state
 * "<param>__acc" (a = acc + g), and g above is the mean a / K of the window's
 * K gradients; the step counter s counts calls, and only the calls with
 * s % K == K - 1 update. Every lr op then carries accumulate = K: its value
 * is dtrt_lr's at update t - 1 = s / K on those calls and its `idle` value on
 * the others. The state moves by gated factors instead of constants,
 *
 *   m' = beta m + c g     becomes   m' = [beta | 1] m + [c | 0] g
 *   acc' = a [0 | 1]      (cleared by the update, kept otherwise)
 *
 * [x | y] an lr op of base x and idle value y, and p' = p - lr step with lr
 * idle 0, so a call that ends no window leaves p, m and v as they were
 * (exactly, for finite values: 1 m + 0 g = m). eps_t idles at eps, keeping
 * Adam's step finite on those calls.
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
  int64_t every;     /* calls per update: accumulate, 1 without */
} Opt;

static Inst *cnst(Opt *o, double v) {
  Inst *c = ir_new(o->f, OP_const, o->loc, 0, NULL);
  ir_set_float(c, "value", v);
  return ir_finish(c);
}

static Inst *bin(Opt *o, Op op, Inst *a, Inst *b) { return ir_make(o->f, op, o->loc, 2, a, b); }

/* The scheduled learning rate of base `base` (a param group's, else lr). */
static Inst *lr_of(Opt *o, double base, double beta1, double beta2) {
  const Train *t = &o->m->train;
  Inst *r = ir_new(o->f, OP_lr, t->loc, 0, NULL);
  ir_set_float(r, "base", base);
  int schedule = t->schedule >= 0 ? t->schedule : DT_SCHED_CONSTANT;
  ir_set_str(r, "schedule", dtrt_schedule_names[schedule]);
  ir_set_int(r, "warmup", t->warmup);
  ir_set_int(r, "total", schedule == DT_SCHED_STEP ? t->step_size : t->total);
  ir_set_float(r, "beta1", beta1);
  ir_set_float(r, "beta2", beta2);
  if (o->every > 1)
    ir_set_int(r, "accumulate", o->every);
  double arg = schedule == DT_SCHED_COSINE   ? t->min_lr
               : schedule == DT_SCHED_LINEAR ? t->end_factor
               : schedule == DT_SCHED_STEP   ? t->gamma
                                             : 0;
  if (arg != 0)
    ir_set_float(r, "arg", arg);
  return ir_finish(r);
}

static Inst *lr(Opt *o, double beta1, double beta2) {
  return lr_of(o, o->m->train.lr, beta1, beta2);
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
  if (o->every > 1) {
    ir_set_int(r, "accumulate", o->every);
    ir_set_float(r, "idle", t->eps);
  }
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
  if (o->every > 1)
    ir_set_int(r, "accumulate", o->every);
  return ir_finish(r);
}

/* [on | off]: on on the calls that update, off on the others (an lr op of
 * base on and idle value off); the constant on without accumulation. */
static Inst *gate(Opt *o, double on, double off) {
  if (o->every == 1)
    return cnst(o, on);
  Inst *r = ir_new(o->f, OP_lr, o->m->train.loc, 0, NULL);
  ir_set_float(r, "base", on);
  ir_set_str(r, "schedule", dtrt_schedule_names[DT_SCHED_CONSTANT]);
  ir_set_int(r, "warmup", 0);
  ir_set_int(r, "total", 0);
  ir_set_float(r, "beta1", 0);
  ir_set_float(r, "beta2", 0);
  ir_set_int(r, "fixed", 1);
  ir_set_int(r, "accumulate", o->every);
  ir_set_float(r, "idle", off);
  return ir_finish(r);
}

/* torch.nn.utils.clip_grad_norm_'s factor: min(1, clip_norm / (|g| + 1e-6)),
 * |g| the 2-norm of the gradients grad[0..ng) together (min(1, r) as
 * 1 - relu(1 - r)).
 * Under SPMD each sum over a split gradient is a partial sum, which the
 * sharding pass reduces, so the norm is the whole gradient's. */
static Inst *clip_scale(Opt *o, Inst *const *grad, int ng) {
  Inst *total = NULL;
  for (int k = 0; k < ng; k++) {
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

/* The factors of a state's update m' = a m + b g: constants without
 * accumulation, else [a | 1] and [b | 0] (or the gated factor gb given for
 * b), so a call that ends no window keeps m. */
typedef struct Mix {
  double a, b;
  Inst *ga, *gb;     /* the gates; NULL without accumulation */
} Mix;

static Mix mix_new(Opt *o, double a, double b, Inst *gb) {
  Mix x = {a, b, NULL, NULL};
  if (o->every > 1) {
    x.ga = gate(o, a, 1);
    x.gb = gb ? gb : gate(o, b, 0);
  }
  return x;
}

static Inst *mix(Opt *o, const Mix *x, Inst *m, Inst *g) {
  if (!x->ga)
    return axpby(o, x->a, m, x->b, g);
  Inst *l = bin(o, OP_mul, x->ga, m), *r = bin(o, OP_mul, x->gb, g);
  return bin(o, OP_add, l, r);
}

/* The gradients the update reads, for the first ng globals: grad itself,
 * or with accumulation the mean (acc + g) / K of the window so far, acc
 * stored back cleared on the calls that update and kept on the others. */
static Inst **accumulate(Opt *o, Inst *const *grad, int ng) {
  Inst **gm = arena_alloc(o->m->arena, sizeof *gm * (size_t)(ng + 1));
  Inst *keep = o->every > 1 ? gate(o, 0, 1) : NULL;
  for (int k = 0; k < ng; k++) {
    gm[k] = grad[k];
    if (!grad[k] || !keep)
      continue;
    o->loc = o->m->global.a[k].loc;
    const char *acc = state(o, k, "acc");
    Inst *a = bin(o, OP_add, load(o, acc), grad[k]);
    gm[k] = bin(o, OP_div, a, cnst(o, (double)o->every));
    store(o, acc, bin(o, OP_mul, a, keep));
  }
  o->loc = o->m->train.loc;
  return gm;
}

/* Whether a loop of f reads p stacked: a loop's params, each tiled alone. */
static bool stacked(const Func *f, const Inst *p) {
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *r = f->inst.a[k];
    for (int j = 0; r->op == OP_repeat && j < r->nin; j++)
      if (r->in[j] == p && ir_repeat_operand_kind(r, j) == 2)
        return true;
  }
  return false;
}

/* The weight decay of param k, value p: 0 for a no_decay param, its group's
 * if it has one, else 0 below decay_min_rank and the optimizer's. */
static double decay_of(const Opt *o, int k, const Inst *p) {
  const Train *t = &o->m->train;
  const Global *g = &o->m->global.a[k];
  int rank = p->type.rank - (int)stacked(o->f, p);
  if (g->no_decay)
    return 0;
  if (g->weight_decay > 0)
    return g->weight_decay;
  return rank < t->decay_min_rank ? 0 : t->weight_decay;
}

/* DeMo's update of param k (value p, gradient g): the header's. */
static void demo_update(Opt *o, int k, Inst *p, Inst *g, Inst *rate) {
  const Train *t = &o->m->train;
  int64_t stack = stacked(o->f, p);
  const char *dname = state(o, k, "delta");
  Inst *delta = load(o, dname);
  Inst *in[4] = {delta, g, rate, NULL};
  Inst *c = ir_new(o->f, OP_demo_compress, o->loc, 3, in);
  ir_set_int(c, "chunk", t->chunk);
  ir_set_int(c, "topk", t->topk);
  ir_set_int(c, "stacked", stack);
  ir_set_float(c, "beta", t->beta);
  in[3] = c = ir_finish(c);
  Inst *res = ir_new(o->f, OP_demo_residual, o->loc, 4, in);
  ir_set_int(res, "chunk", t->chunk);
  ir_set_int(res, "topk", t->topk);
  ir_set_int(res, "stacked", stack);
  ir_set_float(res, "beta", t->beta);
  res = ir_finish(res);
  Inst *sgn = ir_new(o->f, OP_demo_sign, o->loc, 1, &c);
  ir_set_int(sgn, "chunk", t->chunk);
  ir_set_int(sgn, "topk", t->topk);
  ir_set_int(sgn, "stacked", stack);
  ir_set_ints(sgn, "shape", p->type.dim, p->type.rank);
  sgn = ir_finish(sgn);
  double wd = decay_of(o, k, p);
  if (wd != 0)
    p = bin(o, OP_mul, p, bin(o, OP_sub, cnst(o, 1), bin(o, OP_mul, rate, cnst(o, wd))));
  store(o, o->m->global.a[k].name, bin(o, OP_sub, p, bin(o, OP_mul, rate, sgn)));
  store(o, dname, res);
}

/* Why a sparse table of weight decay wd cannot train with the model's
 * optimizer, or NULL. */
static const char *no_sparse_form(const Train *t, double wd) {
  switch (t->opt >= 0 ? t->opt : OPT_SGD) {
  case OPT_ADAM:
  case OPT_ADAMW:
    return "Adam takes no sparse gradient; sparse tables train with sgd, adagrad, "
           "rowwise_adagrad or sparse_adam (torch's SparseAdam, with Adam for the dense params)";
  case OPT_SGD:
    if (t->momentum != 0 || wd != 0)
      return "sgd with momentum or weight decay has no sparse form (torch.optim.SGD's)";
    break;
  case OPT_DEMO:
    return "demo takes no sparse gradient; sparse tables train with sgd, adagrad, "
           "rowwise_adagrad or sparse_adam";
  case OPT_ADAGRAD:
  case OPT_ROWWISE_ADAGRAD:
    if (wd != 0)
      return "adagrad's weight decay does not apply to sparse gradients (torch.optim.Adagrad's)";
    break;
  default: break;
  }
  if (t->clip_norm > 0)
    return "clip_norm does not apply to sparse tables yet";
  if (t->accumulate > 1)
    return "accumulate does not apply to sparse tables yet";
  return NULL;
}

static Inst *op3(Opt *o, Op op, Inst *a, Inst *b, Inst *c) {
  return ir_make(o->f, op, o->loc, 3, a, b, c);
}

/* The update of sparse table k, value p, from its gradient's rows and
 * values; rate the lr op (adam's corrections folded in for sparse_adam). */
static void sparse_emit(Opt *o, int k, Inst *p, Inst *values, Inst *rate) {
  const Train *t = &o->m->train;
  const char *param = o->m->global.a[k].name;
  Inst *rows = values->in[values->nin - 1], *p1;
  int kind = t->opt >= 0 ? t->opt : OPT_SGD;
  if (kind == OPT_SGD) {
    p1 = ir_make(o->f, OP_sparse_sgd, o->loc, 4, p, rows, values, rate);
  } else if (kind == OPT_SPARSE_ADAM) {
    const char *mname = state(o, k, "m"), *vname = state(o, k, "v");
    Inst *m1 = ir_new(o->f, OP_sparse_moment, o->loc, 3, (Inst *[]){load(o, mname), rows, values});
    ir_set_float(m1, "beta", t->beta1);
    m1 = ir_finish(m1);
    Inst *v1 = ir_new(o->f, OP_sparse_moment, o->loc, 3, (Inst *[]){load(o, vname), rows, values});
    ir_set_float(v1, "beta", t->beta2);
    ir_set_int(v1, "square", 1);
    v1 = ir_finish(v1);
    store(o, mname, m1);
    store(o, vname, v1);
    Inst *u = ir_new(o->f, OP_sparse_adam, o->loc, 5, (Inst *[]){p, rows, m1, v1, rate});
    ir_set_float(u, "eps", t->eps);
    p1 = ir_finish(u);
  } else {
    const char *sname = state(o, k, "sum");
    if (kind == OPT_ROWWISE_ADAGRAD) {
      Global *sg = (Global *)ir_find_global(o->m, sname);
      sg->type.rank = 1;
      sg->shard = NULL;
    }
    Inst *s1 = op3(o, OP_sparse_adagrad_sum, load(o, sname), rows, values);
    store(o, sname, s1);
    Inst *u = ir_new(o->f, OP_sparse_adagrad, o->loc, 5, (Inst *[]){p, rows, values, s1, rate});
    ir_set_float(u, "eps", t->eps);
    ir_set_float(u, "lr_decay", t->lr_decay);
    if (t->initial_accumulator_value != 0)
      ir_set_float(u, "initial", t->initial_accumulator_value);
    p1 = ir_finish(u);
  }
  store(o, param, p1);
}

bool opt_emit(Module *m, Func *f, Inst *const *value, Inst *const *grad, Diag *d) {
  const Train *t = &m->train;
  int kind = t->opt >= 0 ? t->opt : OPT_SGD;
  const char *name = ir_opt_names[kind];
  bool sgd = kind == OPT_SGD, adamw = kind == OPT_ADAMW;
  bool adam = adamw || kind == OPT_ADAM || kind == OPT_SPARSE_ADAM;
  bool adagrad = kind == OPT_ADAGRAD || kind == OPT_ROWWISE_ADAGRAD;
  bool ok = true;
  Opt o = {m, f, t->loc, t->accumulate > 1 ? t->accumulate : 1};
  for (int k = 0; k < m->global.n; k++) {
    const Global *gl = &m->global.a[k];
    if (!grad[k])
      continue;
    const char *why = gl->sparse ? no_sparse_form(t, decay_of(&o, k, value[k])) : NULL;
    if (why) {
      diag_error(d, gl->loc, "sparse table '%s' cannot train with %s: %s", gl->name, name, why);
      ok = false;
    } else if (!gl->sparse && adagrad && t->lr_decay != 0) {
      diag_error(d, gl->loc,
                 "param '%s': %s's lr_decay applies to sparse tables only; dense params need "
                 "lr_decay 0",
                 gl->name, name);
      ok = false;
    }
  }
  if (!ok)
    return false;
  if (adam && !(t->beta1 >= 0 && t->beta1 < 1 && t->beta2 >= 0 && t->beta2 < 1)) {
    diag_error(d, t->loc, "%s needs beta1 and beta2 in [0, 1), got %g and %g", name, t->beta1,
               t->beta2);
    return false;
  }
  if (t->accumulate < 0 || t->accumulate > IR_MAX_ACCUMULATE) {
    diag_error(d, t->loc, "'accumulate' must be between 1 and %d, not %lld", IR_MAX_ACCUMULATE,
               (long long)t->accumulate);
    return false;
  }
  if (kind == OPT_DEMO && (t->accumulate > 1 || t->clip_norm > 0 || t->chunk < 1 || t->topk < 1 ||
                           !(t->beta >= 0 && t->beta < 1))) {
    diag_error(d, t->loc,
               "demo needs chunk and topk of at least 1 and beta in [0, 1), "
               "and takes no accumulate or clip_norm");
    return false;
  }
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
  /* the state's factors, gated under accumulation (m: momentum or beta1, v:
   * beta2); sgd's gradient factor is the dampening's, itself gated */
  Mix mm = {0}, mv = {0};
  if (adam) {
    mm = mix_new(&o, t->beta1, 1 - t->beta1, NULL);
    mv = mix_new(&o, t->beta2, 1 - t->beta2, NULL);
  } else if (t->momentum != 0) {
    mm = mix_new(&o, t->momentum, 1, damp);
  }

  int ng = m->global.n;
  if (kind == OPT_DEMO) {
    for (int k = 0; k < ng; k++)
      if (grad[k]) {
        o.loc = m->global.a[k].loc;
        double base = m->global.a[k].lr;
        demo_update(&o, k, value[k], grad[k], base > 0 ? lr_of(&o, base, 0, 0) : rate);
      }
    return true;
  }
  Inst **dense = arena_alloc(m->arena, sizeof *dense * (size_t)(ng + 1));
  for (int k = 0; k < ng; k++) {
    dense[k] = m->global.a[k].sparse ? NULL : grad[k];
    if (grad[k] && !dense[k]) {
      o.loc = m->global.a[k].loc;
      DTC_ASSERT(grad[k]->op == OP_sparse_values);
      double base = m->global.a[k].lr;
      sparse_emit(&o, k, value[k], grad[k],
                  base > 0 ? lr_of(&o, base, adam ? t->beta1 : 0, adam ? t->beta2 : 0) : rate);
    }
  }
  o.loc = t->loc;
  Inst **gm = accumulate(&o, dense, ng);
  Inst *clip = t->clip_norm > 0 ? clip_scale(&o, gm, ng) : NULL;
  for (int k = 0; k < ng; k++) {
    if (!gm[k])
      continue;
    o.loc = m->global.a[k].loc;
    const char *param = m->global.a[k].name;
    Inst *p = value[k], *g = clip ? bin(&o, OP_mul, clip, gm[k]) : gm[k], *step;
    double wd = decay_of(&o, k, p);
    if (wd != 0 && !adamw)
      g = axpby(&o, 1, g, wd, p);
    const char *mname = NULL, *vname = NULL;
    Inst *m1 = NULL, *v1 = NULL;
    if (sgd && t->momentum != 0) {
      mname = state(&o, k, "m");
      Inst *gd = damp && !mm.gb ? bin(&o, OP_mul, damp, g) : g;
      m1 = mix(&o, &mm, load(&o, mname), gd);
      step = t->nesterov ? axpby(&o, 1, g, t->momentum, m1) : m1;
    } else if (sgd) {
      step = g;
    } else if (adagrad) {
      mname = state(&o, k, "sum");
      m1 = bin(&o, OP_add, load(&o, mname), bin(&o, OP_mul, g, g));
      Inst *sum = m1;
      if (t->initial_accumulator_value != 0)
        sum = bin(&o, OP_add, sum, cnst(&o, t->initial_accumulator_value));
      Inst *den = bin(&o, OP_add, ir_make(f, OP_sqrt, o.loc, 1, sum), cnst(&o, t->eps));
      step = bin(&o, OP_div, g, den);
    } else {
      mname = state(&o, k, "m");
      vname = state(&o, k, "v");
      m1 = mix(&o, &mm, load(&o, mname), g);
      v1 = mix(&o, &mv, load(&o, vname), bin(&o, OP_mul, g, g));
      Inst *den = bin(&o, OP_add, ir_make(f, OP_sqrt, o.loc, 1, v1), eps);
      step = bin(&o, OP_div, m1, den);
    }
    /* a param group's own lr or weight decay: its own lr ops */
    double base = m->global.a[k].lr;
    Inst *r = base > 0 ? lr_of(&o, base, adam ? t->beta1 : 0, adam ? t->beta2 : 0) : rate;
    Inst *p1 = bin(&o, OP_sub, p, bin(&o, OP_mul, r, step));
    if (adamw && wd != 0) {
      Inst *dk = decay;
      if (!dk || base > 0 || wd != t->weight_decay)
        dk = bin(&o, OP_mul, lr_of(&o, base > 0 ? base : t->lr, 0, 0), cnst(&o, wd));
      p1 = bin(&o, OP_sub, p1, bin(&o, OP_mul, dk, p));
    }
    store(&o, param, p1);
    if (m1)
      store(&o, mname, m1);
    if (v1)
      store(&o, vname, v1);
  }
  return true;
}
