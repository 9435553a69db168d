/* autodiff.c: reverse-mode differentiation; one grad_<op> per op of ops.def.
 * Requires: @forward whose output named m->train.loss is an f32 scalar.
 * Guarantees: @train_step holding the forward insts the loss (or a store) needs,
 * `output "loss"` (its first and only output), the adjoints of the insts that
 * lead to the loss and depend on a param, and the optimizer update of every
 * param the loss reaches (optimizer.c); other params are left alone and warned
 * about with -Wunused. Every emitted op carries the Loc of the forward op it
 * differentiates. Without a loss, with @train_step present, or after spmd
 * (per-device functions), does nothing. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct GradCtx {
  Func *f;          /* where the backward is emitted */
  int n;            /* the cloned forward: ids [0, n) */
  bool *active;     /* by id: depends on a param and leads to the loss */
  Inst **adj;       /* by id: adjoint so far, NULL: none yet */
  struct Pend **pend; /* by id: slices' adjoints not yet summed (settle) */
  Diag *d;
} GradCtx;

/* The adjoint dy of a slice [begin, begin + n) along axis of a value of
 * `size` there: kept apart until the value's turn, when disjoint ones make
 * one concat of the pieces and the zeros between them. Added one by one,
 * each would be a full-size pad and add (a DLRM's interaction slices its
 * [B, 729] products 26 times). */
typedef struct Pend {
  Inst *dy, *at;
  int64_t axis, begin, size;
  struct Pend *next;
} Pend;

/* Whether x is a load of a sparse table. */
static bool sparse_table(const Module *m, const Inst *x) {
  if (x->op != OP_load)
    return false;
  const Global *gl = ir_find_global(m, ir_get_str(x, "global", ""));
  return gl && gl->sparse;
}

/* A sparse table is read once, as the weight of an embedding_bag of mode
 * sum or mean: its gradient is then that lookup's rows and values. */
static bool check_sparse(const Module *m, const Func *f, Diag *d) {
  int nerr = d->nerr;
  int *seen = calloc((size_t)m->global.n + 1, sizeof *seen);
  DTC_ASSERT(seen);
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++) {
      if (!sparse_table(m, i->in[j]))
        continue;
      const Global *gl = ir_global_of(i->in[j]);
      if (i->op != OP_embedding_bag || j != 1)
        diag_error(d, i->loc,
                   "sparse table '%s' is read by '%s'; a sparse table may only be the weight of "
                   "embedding_bag",
                   gl->name, ir_ops[i->op].name);
      else if (ir_get_int(i, "mode", 0) == DT_BAG_MAX)
        diag_error(d, i->loc,
                   "sparse table '%s' in an embedding_bag of mode \"max\": a sparse gradient "
                   "needs mode \"sum\" or \"mean\" (as torch's)",
                   gl->name);
      else if (seen[gl - m->global.a]++)
        diag_error(d, i->loc,
                   "sparse table '%s' is looked up a second time; a sparse table takes one "
                   "embedding_bag",
                   gl->name);
    }
  }
  free(seen);
  return d->nerr == nerr;
}

/* Emits the adjoints of inst's operands: one grad_<id> per op of ops.def. */
typedef void (*GradFn)(GradCtx *g, Inst *inst);
#define OP(id, name, minin, maxin, kind, attrs) static void grad_##id(GradCtx *, Inst *);
#include "ops.def"
#undef OP
static const GradFn grad_fn[OP_COUNT] = {
#define OP(id, name, minin, maxin, kind, attrs) [OP_##id] = grad_##id,
#include "ops.def"
#undef OP
};

static bool wants(const GradCtx *g, const Inst *x) { return x->id < g->n && g->active[x->id]; }

/* Whether a derivative can flow through i: an f32 value that is not a
 * comparison's mask. */
static bool differentiable(const Inst *i) {
  return i->type.dtype == DT_F32 && i->op != OP_gt && i->op != OP_ge && i->op != OP_eq &&
         i->op != OP_ne;
}

/* ---- emitting ---- */

static Inst *mk1(GradCtx *g, Op op, Inst *at, Inst *a) { return ir_make(g->f, op, at->loc, 1, a); }
static Inst *mk2(GradCtx *g, Op op, Inst *at, Inst *a, Inst *b) {
  return ir_make(g->f, op, at->loc, 2, a, b);
}

static Inst *cnst(GradCtx *g, Inst *at, double v) {
  Inst *c = ir_new(g->f, OP_const, at->loc, 0, NULL);
  ir_set_float(c, "value", v);
  return ir_finish(c);
}

/* The _grad op of inst with inst's attributes. */
static Inst *grad_op(GradCtx *g, Op op, Inst *inst, int nin, Inst **in) {
  Inst *r = ir_new(g->f, op, inst->loc, nin, in);
  ir_copy_attrs(r, inst);
  return ir_finish(r);
}

static Inst *with_shape(GradCtx *g, Op op, Inst *x, const Type *t, Inst *at) {
  Inst *r = ir_new(g->f, op, at->loc, 1, &x);
  ir_set_ints(r, "shape", t->dim, t->rank);
  return ir_finish(r);
}

static Inst *reshape(GradCtx *g, Inst *x, const Type *t, Inst *at) {
  return type_eq(&x->type, t) ? x : with_shape(g, OP_reshape, x, t, at);
}

static Inst *broadcast(GradCtx *g, Inst *x, const Type *t, Inst *at) {
  return type_eq(&x->type, t) ? x : with_shape(g, OP_broadcast, x, t, at);
}

static Inst *sum(GradCtx *g, Inst *x, const int64_t *axes, int n, Inst *at) {
  if (n == 0)
    return x;
  Inst *r = ir_new(g->f, OP_sum, at->loc, 1, &x);
  ir_set_ints(r, "axes", axes, n);
  return ir_finish(r);
}

static Inst *matmul(GradCtx *g, Inst *a, Inst *b, int ta, int tb, Inst *at) {
  Inst *in[2] = {a, b};
  Inst *r = ir_new(g->f, OP_matmul, at->loc, 2, in);
  if (ta)
    ir_set_int(r, "ta", 1);
  if (tb)
    ir_set_int(r, "tb", 1);
  return ir_finish(r);
}

static Inst *slice(GradCtx *g, Inst *x, int64_t axis, int64_t begin, int64_t end, Inst *at) {
  Inst *r = ir_new(g->f, OP_slice, at->loc, 1, &x);
  ir_set_int(r, "axis", axis);
  ir_set_int(r, "begin", begin);
  ir_set_int(r, "end", end);
  return ir_finish(r);
}

static Inst *swap_last2(GradCtx *g, Inst *x, Inst *at) {
  int r = x->type.rank;
  int64_t perm[IR_MAX_RANK];
  for (int d = 0; d < r; d++)
    perm[d] = d;
  perm[r - 2] = r - 1;
  perm[r - 1] = r - 2;
  Inst *t = ir_new(g->f, OP_transpose, at->loc, 1, &x);
  ir_set_ints(t, "perm", perm, r);
  return ir_finish(t);
}

/* [..., k] -> [prod(...), k] */
static Inst *flatten2(GradCtx *g, Inst *x, Inst *at) {
  Type t = x->type;
  t.rank = 2;
  t.dim[1] = x->type.dim[x->type.rank - 1];
  t.dim[0] = type_elems(&x->type) / t.dim[1];
  return reshape(g, x, &t, at);
}

/* Sums dy (of a numpy-broadcast result) back to the shape t of an operand. */
static Inst *unbroadcast(GradCtx *g, Inst *dy, const Type *t) {
  const Type *y = &dy->type;
  int lead = y->rank - t->rank, n = 0;
  int64_t axes[IR_MAX_RANK];
  for (int d = 0; d < y->rank; d++)
    if (y->dim[d] != 1 && (d < lead || t->dim[d - lead] == 1))
      axes[n++] = d;
  return reshape(g, sum(g, dy, axes, n, dy), t, dy);
}

/* Adds dx to the adjoint of x, summing away broadcast axes first. */
static void accum(GradCtx *g, Inst *x, Inst *dx) {
  dx = unbroadcast(g, dx, &x->type);
  Inst **a = &g->adj[x->id];
  *a = *a ? mk2(g, OP_add, dx, *a, dx) : dx;
}

#define DY (g->adj[inst->id])
#define X (inst->in[0])

static void no_derivative(GradCtx *g, Inst *inst) {
  diag_error(g->d, inst->loc, "'%s' cannot be differentiated (%s)", ir_ops[inst->op].name,
             ir_pieces(inst) ? "it runs in pieces" : "it is itself a derivative");
}

/* ---- module plumbing: never active, or (load) read by the pass ---- */

static void grad_load(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_const(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_lr(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_arg(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_store(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }
static void grad_output(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }

/* ---- elementwise ---- */

static void grad_add(GradCtx *g, Inst *inst) {
  for (int k = 0; k < 2; k++)
    if (wants(g, inst->in[k]))
      accum(g, inst->in[k], DY);
}

static void grad_sub(GradCtx *g, Inst *inst) {
  Inst *a = inst->in[0], *b = inst->in[1];
  if (wants(g, a))
    accum(g, a, DY);
  if (wants(g, b))
    accum(g, b, mk1(g, OP_neg, inst, unbroadcast(g, DY, &b->type)));
}

static void grad_mul(GradCtx *g, Inst *inst) {
  Inst *a = inst->in[0], *b = inst->in[1];
  if (wants(g, a))
    accum(g, a, mk2(g, OP_mul, inst, DY, b));
  if (wants(g, b))
    accum(g, b, mk2(g, OP_mul, inst, DY, a));
}

/* y = bn_center(x, m) = x - m: bn_scale's derivative, which follows it, is
 * already the whole normalisation's, m's part included. */
static void grad_bn_center(GradCtx *g, Inst *inst) { accum(g, X, DY); }

/* Whether w, aligned to r's trailing dims, is 1 wherever r is 1: one value
 * per kept index, constant over the reduced dims. */
static bool per_kept(const Type *w, const Type *r) {
  if (w->rank > r->rank)
    return false;
  for (int d = 0; d < w->rank; d++)
    if (w->dim[d] != 1 && w->dim[d] != r->dim[d + r->rank - w->rank])
      return false;
  return true;
}

/* y = bn_scale(c, r) = c r, c = x - mean(x), r = 1 / sqrt(mean(c^2) + eps),
 * the means over the n elements of each kept index (the dims where r is 1):
 * dx = r (dy - mean(dy) - y mean(dy y)), passed to c; r gets none. When dy
 * is a w with w per kept index (batch norm's weight), the means are w
 * mean(a) and w mean(a y): the sums of a and a y that the weight's and the
 * bias's gradients take too (cse.c keeps one of each). */
static void grad_bn_scale(GradCtx *g, Inst *inst) {
  Inst *c = inst->in[0], *r = inst->in[1], *a = DY, *w = NULL;
  if (!wants(g, c))
    return;
  if (DY->op == OP_mul && type_eq(&DY->in[0]->type, &inst->type) &&
      per_kept(&DY->in[1]->type, &r->type))
    a = DY->in[0], w = DY->in[1];
  Inst *k = cnst(g, inst, (double)type_elems(&r->type) / (double)type_elems(&c->type));
  Inst *m1 = mk2(g, OP_mul, inst, unbroadcast(g, a, &r->type), k);
  Inst *m2 = mk2(g, OP_mul, inst, unbroadcast(g, mk2(g, OP_mul, inst, a, inst), &r->type), k);
  if (w)
    m1 = mk2(g, OP_mul, inst, m1, w), m2 = mk2(g, OP_mul, inst, m2, w);
  Inst *d = mk2(g, OP_sub, inst, mk2(g, OP_sub, inst, DY, m1), mk2(g, OP_mul, inst, inst, m2));
  accum(g, c, mk2(g, OP_mul, inst, d, r));
}

/* y = a / b: da = dy / b, db = -dy y / b */
static void grad_div(GradCtx *g, Inst *inst) {
  Inst *a = inst->in[0], *b = inst->in[1];
  if (wants(g, a))
    accum(g, a, mk2(g, OP_div, inst, DY, b));
  if (wants(g, b)) {
    Inst *t = mk2(g, OP_div, inst, mk2(g, OP_mul, inst, DY, inst), b);
    accum(g, b, mk1(g, OP_neg, inst, unbroadcast(g, t, &b->type)));
  }
}

static void grad_neg(GradCtx *g, Inst *inst) { accum(g, X, mk1(g, OP_neg, inst, DY)); }
static void grad_exp(GradCtx *g, Inst *inst) { accum(g, X, mk2(g, OP_mul, inst, DY, inst)); }
static void grad_log(GradCtx *g, Inst *inst) { accum(g, X, mk2(g, OP_div, inst, DY, X)); }

/* dx = 0.5 dy / y */
static void grad_sqrt(GradCtx *g, Inst *inst) {
  accum(g, X, mk2(g, OP_div, inst, mk2(g, OP_mul, inst, DY, cnst(g, inst, 0.5)), inst));
}

/* dx = dy (1 - y^2) */
static void grad_tanh(GradCtx *g, Inst *inst) {
  Inst *t = mk2(g, OP_sub, inst, cnst(g, inst, 1), mk2(g, OP_mul, inst, inst, inst));
  accum(g, X, mk2(g, OP_mul, inst, DY, t));
}

/* dx = dy y (1 - y) */
static void grad_sigmoid(GradCtx *g, Inst *inst) {
  Inst *t = mk2(g, OP_mul, inst, inst, mk2(g, OP_sub, inst, cnst(g, inst, 1), inst));
  accum(g, X, mk2(g, OP_mul, inst, DY, t));
}

/* relu(x) > 0 exactly where x > 0 (a NaN gives 0 both ways): the backward
 * reads the output, which the next layer keeps anyway, not the input. */
static void grad_relu(GradCtx *g, Inst *inst) { accum(g, X, mk2(g, OP_relu_grad, inst, inst, DY)); }
static void grad_gelu(GradCtx *g, Inst *inst) { accum(g, X, mk2(g, OP_gelu_grad, inst, X, DY)); }
static void grad_relu_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_demo_compress(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_demo_residual(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_demo_sign(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_gelu_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_gelu_tanh(GradCtx *g, Inst *inst) {
  accum(g, X, mk2(g, OP_gelu_tanh_grad, inst, X, DY));
}
static void grad_gelu_tanh_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* A comparison is never active (differentiable): its mask takes nothing. */
static void grad_gt(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }
static void grad_ge(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }
static void grad_eq(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }
static void grad_ne(GradCtx *g, Inst *inst) { (void)g, (void)inst, DTC_UNREACHABLE(); }

/* y = where_true(c, x): dx = where_true(c, dy), and where_false alike; c
 * gets nothing. */
static void grad_where_true(GradCtx *g, Inst *inst) {
  if (wants(g, inst->in[1]))
    accum(g, inst->in[1], mk2(g, OP_where_true, inst, X, DY));
}

static void grad_where_false(GradCtx *g, Inst *inst) {
  if (wants(g, inst->in[1]))
    accum(g, inst->in[1], mk2(g, OP_where_false, inst, X, DY));
}

/* y = maximum(a, b) (minimum): dy to the larger (smaller) operand, half of
 * it to each where a equals b, all of it to both where either is NaN, as
 * torch's: da = where_false(lose_a, h), h = where_false(e, dy) +
 * where_true(e, dy / 2), e = (a == b), lose_a = (b > a) for maximum. Exact,
 * an infinite or NaN dy kept from where it does not go. */
static void extremum_grad(GradCtx *g, Inst *inst, bool max) {
  Inst *a = inst->in[0], *b = inst->in[1];
  Inst *e = mk2(g, OP_eq, inst, a, b);
  Inst *h = mk2(g, OP_add, inst, mk2(g, OP_where_false, inst, e, DY),
                mk2(g, OP_where_true, inst, e, mk2(g, OP_mul, inst, DY, cnst(g, inst, 0.5))));
  for (int k = 0; k < 2; k++)
    if (wants(g, inst->in[k])) {
      Inst *lose = max == (k == 0) ? mk2(g, OP_gt, inst, b, a) : mk2(g, OP_gt, inst, a, b);
      accum(g, inst->in[k], mk2(g, OP_where_false, inst, lose, h));
    }
}
static void grad_maximum(GradCtx *g, Inst *inst) { extremum_grad(g, inst, true); }
static void grad_minimum(GradCtx *g, Inst *inst) { extremum_grad(g, inst, false); }

/* y = pow(a, b), torch's derivative: da = where(b == 0, 0, dy (b pow(a, b -
 * 1))), db = where(a == 0 and b >= 0, 0, dy (y ln a)); NaN where a < 0. */
static void grad_pow(GradCtx *g, Inst *inst) {
  Inst *a = inst->in[0], *b = inst->in[1], *zero = cnst(g, inst, 0);
  if (wants(g, a)) {
    Inst *p = mk2(g, OP_pow, inst, a, mk2(g, OP_sub, inst, b, cnst(g, inst, 1)));
    Inst *t = mk2(g, OP_mul, inst, DY, mk2(g, OP_mul, inst, b, p));
    accum(g, a, mk2(g, OP_where_false, inst, mk2(g, OP_eq, inst, b, zero), t));
  }
  if (wants(g, b)) {
    Inst *m = mk2(g, OP_mul, inst, mk2(g, OP_eq, inst, a, zero), mk2(g, OP_ge, inst, b, zero));
    Inst *t = mk2(g, OP_mul, inst, DY, mk2(g, OP_mul, inst, inst, mk1(g, OP_log, inst, a)));
    accum(g, b, mk2(g, OP_where_false, inst, m, t));
  }
}

/* y = clamp(x): dx = clamp_grad(x, dy), dy inside the bounds, 0 outside. */
static void grad_clamp(GradCtx *g, Inst *inst) {
  Inst *in[2] = {X, DY};
  accum(g, X, grad_op(g, OP_clamp_grad, inst, 2, in));
}
static void grad_clamp_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* ---- reductions ---- */

/* dy of a reduction broadcast back to the shape of its operand. */
static Inst *expand(GradCtx *g, Inst *inst, Inst *dy) {
  const Type *x = &X->type;
  Type kept = *x;
  int n;
  const int64_t *axes = ir_get_ints(inst, "axes", &n);
  for (int k = 0; k < n; k++)
    kept.dim[axes[k] < 0 ? axes[k] + x->rank : axes[k]] = 1;
  return broadcast(g, reshape(g, dy, &kept, inst), x, inst);
}

static void grad_sum(GradCtx *g, Inst *inst) { accum(g, X, expand(g, inst, DY)); }
/* d fold(x) / d x[p] = 1 for every piece p. */
static void grad_fold(GradCtx *g, Inst *inst) {
  Type one = X->type;
  one.dim[0] = 1;
  accum(g, X, broadcast(g, reshape(g, DY, &one, inst), &X->type, inst));
}

static void grad_mean(GradCtx *g, Inst *inst) {
  double n = (double)type_elems(&X->type) / (double)type_elems(&inst->type);
  accum(g, X, expand(g, inst, mk2(g, OP_mul, inst, DY, cnst(g, inst, 1 / n))));
}

/* sum(a b): da = dy b, db = dy a, dy broadcast back (scaled for the mean) */
static void grad_mul_reduce(GradCtx *g, Inst *inst, Inst *dy) {
  Inst *e = expand(g, inst, dy);
  for (int k = 0; k < 2; k++)
    if (wants(g, inst->in[k]))
      accum(g, inst->in[k], mk2(g, OP_mul, inst, e, inst->in[1 - k]));
}
static void grad_sum_mul(GradCtx *g, Inst *inst) { grad_mul_reduce(g, inst, DY); }
static void grad_mean_mul(GradCtx *g, Inst *inst) {
  double n = (double)type_elems(&X->type) / (double)type_elems(&inst->type);
  grad_mul_reduce(g, inst, mk2(g, OP_mul, inst, DY, cnst(g, inst, 1 / n)));
}

static void grad_max(GradCtx *g, Inst *inst) {
  Inst *in[3] = {X, inst, DY};
  accum(g, X, grad_op(g, OP_max_grad, inst, 3, in));
}

static void grad_max_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* ---- dense ----
 * y = op(a) @ op(b) with op transposing the last two dims when ta/tb:
 *   d op(a) = dy @ op(b)^T,  d op(b) = op(a)^T @ dy,
 * written with ta/tb so that no transpose is materialised, except for a
 * transposed batched a times a 2-D b. A 2-D b broadcast over a's batch gets
 * the sum over the batch: one 2-D product when a's rows are contiguous. */
static void grad_matmul(GradCtx *g, Inst *inst) {
  Inst *a = inst->in[0], *b = inst->in[1], *dy = DY;
  int ta = ir_get_int(inst, "ta", 0) != 0, tb = ir_get_int(inst, "tb", 0) != 0;
  bool bbatch = a->type.rank > 2 && b->type.rank == 2;
  if (ir_attr(inst, "kfold")) {   /* [F..,k,m]^T @ [F..,k,n]: da = b dy^T, db = a dy */
    if (wants(g, a))
      accum(g, a, matmul(g, b, dy, 0, 1, inst));
    if (wants(g, b))
      accum(g, b, matmul(g, a, dy, 0, 0, inst));
    return;
  }
  if (wants(g, a)) {
    Inst *da;
    if (!ta)
      da = matmul(g, dy, b, 0, !tb, inst);
    else if (!bbatch)
      da = matmul(g, b, dy, tb, 1, inst);
    else
      da = swap_last2(g, matmul(g, dy, b, 0, !tb, inst), inst);
    accum(g, a, da);
  }
  if (wants(g, b)) {
    Inst *x = a;
    if (bbatch && !ta) {
      x = flatten2(g, a, inst);
      dy = flatten2(g, dy, inst);
    }
    Inst *db = tb ? matmul(g, dy, x, 1, ta, inst) : matmul(g, x, dy, !ta, 0, inst);
    int64_t batch[IR_MAX_RANK];
    int nb = db->type.rank - b->type.rank;
    for (int d = 0; d < nb; d++)
      batch[d] = d;
    accum(g, b, sum(g, db, batch, nb, inst));
  }
}

/* ---- other kernels ---- */

static void grad_softmax(GradCtx *g, Inst *inst) {
  Inst *in[2] = {inst, DY};
  accum(g, X, grad_op(g, OP_softmax_grad, inst, 2, in));
}

static void grad_log_softmax(GradCtx *g, Inst *inst) {
  Inst *in[2] = {inst, DY};
  accum(g, X, grad_op(g, OP_log_softmax_grad, inst, 2, in));
}

static void grad_softmax_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_log_softmax_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* Labels are i32, never active. */
static void grad_cross_entropy(GradCtx *g, Inst *inst) {
  accum(g, X, ir_make(g->f, OP_cross_entropy_grad, inst->loc, 3, X, inst->in[1], DY));
}

static void grad_cross_entropy_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* y = mean((p - t)^2): dp = (2 dy / N) (p - t), dt = -dp */
static void grad_mse(GradCtx *g, Inst *inst) {
  Inst *p = inst->in[0], *t = inst->in[1];
  Inst *s = mk2(g, OP_mul, inst, DY, cnst(g, inst, 2.0 / (double)type_elems(&p->type)));
  Inst *dp = mk2(g, OP_mul, inst, mk2(g, OP_sub, inst, p, t), s);
  if (wants(g, p))
    accum(g, p, dp);
  if (wants(g, t))
    accum(g, t, mk1(g, OP_neg, inst, dp));
}

/* ---- PyTorch's losses ---- */

/* Labels are i32, never active. */
static void grad_cross_entropy_sum(GradCtx *g, Inst *inst) {
  Inst *in[3] = {X, inst->in[1], DY};
  accum(g, X, grad_op(g, OP_cross_entropy_sum_grad, inst, 3, in));
}

static void grad_cross_entropy_sum_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_label_count(GradCtx *g, Inst *inst) { (void)g, (void)inst; }

/* y = mean(max(x, 0) - x t + log(1 + exp(-|x|))): dx = dy (sigmoid(x) - t) / N,
 * dt = -dy x / N */
static void grad_bce_with_logits(GradCtx *g, Inst *inst) {
  Inst *x = inst->in[0], *t = inst->in[1];
  if (wants(g, x))
    accum(g, x, ir_make(g->f, OP_bce_with_logits_grad, inst->loc, 3, x, t, DY));
  if (wants(g, t)) {
    Inst *s = mk2(g, OP_mul, inst, DY, cnst(g, inst, -1.0 / (double)type_elems(&x->type)));
    accum(g, t, mk2(g, OP_mul, inst, x, s));
  }
}

static void grad_bce_with_logits_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

static void grad_normalize(GradCtx *g, Inst *inst) {
  Inst *in[2] = {X, DY};
  accum(g, X, grad_op(g, OP_normalize_grad, inst, 2, in));
}

static void grad_normalize_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* Ids are i32, never active. */
static void grad_embedding(GradCtx *g, Inst *inst) {
  Inst *in[2] = {inst->in[1], DY};
  Inst *r = ir_new(g->f, OP_embedding_grad, inst->loc, 2, in);
  ir_set_int(r, "rows", X->type.dim[0]);
  accum(g, X, ir_finish(r));
}

static void grad_embedding_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* The i32 operands (input, offsets) have none; the weight's adjoint and
 * per_sample_weights' are kernels of the same operands and dy. */
static void grad_embedding_bag(GradCtx *g, Inst *inst) {
  int n = inst->nin, psw = n > (inst->in[0]->type.rank == 2 ? 2 : 3) ? n - 1 : 0;
  Inst *in[6];
  memcpy(in, inst->in, sizeof(Inst *) * (size_t)n);
  in[n] = DY;
  if (wants(g, inst->in[1]) && sparse_table(g->f->mod, inst->in[1])) {
    /* the sparse gradient: the touched rows and their values, never [R, D]
     * (check_sparse saw to one lookup, so this is the load's one adjoint) */
    in[n + 1] = grad_op(g, OP_sparse_rows, inst, n, in);
    g->adj[inst->in[1]->id] = grad_op(g, OP_sparse_values, inst, n + 2, in);
  } else if (wants(g, inst->in[1])) {
    accum(g, inst->in[1], grad_op(g, OP_embedding_bag_grad, inst, n + 1, in));
  }
  if (psw && wants(g, inst->in[psw]))
    accum(g, inst->in[psw], grad_op(g, OP_embedding_bag_psw_grad, inst, n + 1, in));
}

static void grad_embedding_bag_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_embedding_bag_psw_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_rows(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_values(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_sgd(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_adagrad_sum(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_adagrad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_moment(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sparse_adam(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* The same (p, seed) give the same mask. */
static void grad_dropout(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  accum(g, X, grad_op(g, OP_dropout_grad, inst, 1, &dy));
}

static void grad_dropout_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

static void grad_causal_mask(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  Inst *r = ir_new(g->f, OP_causal_mask, inst->loc, 1, &dy);
  ir_set_float(r, "fill", 0);
  accum(g, X, ir_finish(r));
}

/* ---- attention ---- */

/* sdpa keeps no scores: the backward takes the rows' log-sum-exp (sdpa_lse,
 * which the forward's kernel writes as it goes, ir_lse_partner; a loop's
 * forward makes and saves it, grad_repeat) and sdpa_grad gives dq, dk and
 * dv as one tensor, stacked along
 * a new dim 1 (Tq = Tk: a split of T splits all three alike) or along dim
 * 2, cut apart here; both read the mask, and sdpa_grad redraws the dropout
 * mask from the same attributes. q, k and v may be one value; accum adds
 * what each gets. An f32 mask that needs a gradient gets the scores'
 * adjoint (sdpa_dmask, [B,H,Tq,Tk] kept) summed over its broadcast dims. */
static void grad_sdpa(GradCtx *g, Inst *inst) {
  Inst *q = inst->in[0], *k = inst->in[1], *v = inst->in[2];
  Inst *mask = inst->nin > 3 ? inst->in[3] : NULL;
  Inst *lse = grad_op(g, OP_sdpa_lse, inst, mask ? 3 : 2, (Inst *[]){q, k, mask});
  Inst *all = grad_op(g, OP_sdpa_grad, inst, mask ? 7 : 6,
                      (Inst *[]){q, k, v, inst, lse, DY, mask});
  int64_t tq = q->type.dim[2], tk = k->type.dim[2];
  Inst *to[3] = {q, k, v};
  for (int w = 0; w < 3; w++) {
    if (!wants(g, to[w]))
      continue;
    if (all->type.rank == 5)   /* stacked along dim 1 */
      accum(g, to[w], reshape(g, slice(g, all, 1, w, w + 1, inst), &to[w]->type, inst));
    else
      accum(g, to[w], slice(g, all, 2, w ? tq + (w - 1) * tk : 0, w ? tq + w * tk : tq, inst));
  }
  if (mask && wants(g, mask))
    accum(g, mask, grad_op(g, OP_sdpa_dmask, inst, 7, (Inst *[]){q, k, v, inst, lse, DY, mask}));
}

static void grad_sdpa_lse(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sdpa_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_sdpa_dmask(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_ring_sdpa(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_ring_sdpa_lse(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_ring_sdpa_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* ---- convolution and pooling ---- */

/* The _grad op of inst with inst's attributes and ints attribute `name`
 * from dims 2 and 3 of t (the spatial size a stride cannot give back). */
static Inst *grad_op_hw(GradCtx *g, Op op, Inst *inst, int nin, Inst **in, const char *name,
                        const Type *t) {
  Inst *r = ir_new(g->f, op, inst->loc, nin, in);
  ir_copy_attrs(r, inst);
  ir_set_ints(r, name, t->dim + 2, 2);
  return ir_finish(r);
}

static void grad_conv2d(GradCtx *g, Inst *inst) {
  Inst *x = inst->in[0], *w = inst->in[1];
  if (wants(g, x))
    accum(g, x, grad_op_hw(g, OP_conv2d_grad_input, inst, 2, (Inst *[]){w, DY}, "size", &x->type));
  if (wants(g, w))
    accum(g, w, grad_op_hw(g, OP_conv2d_grad_weight, inst, 2, (Inst *[]){x, DY}, "kernel", &w->type));
}

static void grad_conv2d_grad_input(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_conv2d_grad_weight(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

static void grad_max_pool2d(GradCtx *g, Inst *inst) {
  Inst *in[2] = {X, DY};
  accum(g, X, grad_op(g, OP_max_pool2d_grad, inst, 2, in));
}

static void grad_avg_pool2d(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  accum(g, X, grad_op_hw(g, OP_avg_pool2d_grad, inst, 1, &dy, "size", &X->type));
}

static void grad_max_pool2d_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_avg_pool2d_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* ---- data movement ---- */

static void grad_reshape(GradCtx *g, Inst *inst) { accum(g, X, reshape(g, DY, &X->type, inst)); }

static void grad_transpose(GradCtx *g, Inst *inst) {
  int n;
  const int64_t *perm = ir_get_ints(inst, "perm", &n);
  int64_t inv[IR_MAX_RANK];
  for (int d = 0; d < n; d++)
    inv[perm[d]] = d;
  Inst *dy = DY;
  Inst *r = ir_new(g->f, OP_transpose, inst->loc, 1, &dy);
  ir_set_ints(r, "perm", inv, n);
  accum(g, X, ir_finish(r));
}

static int64_t axis_of(const Inst *inst) {
  int64_t ax = ir_get_int(inst, "axis", 0);
  return ax < 0 ? ax + inst->type.rank : ax;
}

/* dy's elements added into the ones of x they copy: op (pad for a slice,
 * the _grad op of a copying pad) with inst's axis and begin and x's length. */
/* x placed at begin of `size` along axis by op (a pad or a pad's derivative). */
static Inst *pad(GradCtx *g, Op op, Inst *x, int64_t axis, int64_t begin, int64_t size, Inst *at) {
  Inst *r = ir_new(g->f, op, at->loc, 1, &x);
  ir_set_int(r, "axis", axis);
  ir_set_int(r, "begin", begin);
  ir_set_int(r, "size", size);
  return ir_finish(r);
}

static void grad_copy_pad(GradCtx *g, Inst *inst, Op op) {
  int64_t ax = axis_of(inst);
  accum(g, X, pad(g, op, DY, ax, ir_get_int(inst, "begin", 0), X->type.dim[ax], inst));
}

static void grad_slice(GradCtx *g, Inst *inst) {
  Pend *p = arena_alloc(g->f->mod->arena, sizeof *p);
  *p = (Pend){DY, inst, axis_of(inst), ir_get_int(inst, "begin", 0), 0, g->pend[X->id]};
  p->size = X->type.dim[p->axis];
  g->pend[X->id] = p;
}

static int by_begin(const void *a, const void *b) {
  const Pend *x = *(Pend *const *)a, *y = *(Pend *const *)b;
  if (x->axis != y->axis)
    return (x->axis > y->axis) - (x->axis < y->axis);
  return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Value k's slices' adjoints into its adjoint: where they lie apart along
 * one axis, each piece padded only over the gap before it (the last also
 * after it) and the pieces concatenated (16 at a time); else a pad each. */
static void settle(GradCtx *g, int k) {
  int n = 0, at = 0;
  for (Pend *p = g->pend[k]; p; p = p->next)
    n++;
  if (!n)
    return;
  Pend **v = malloc(sizeof *v * (size_t)n);
  DTC_ASSERT(v);
  for (Pend *p = g->pend[k]; p; p = p->next)
    v[at++] = p;
  g->pend[k] = NULL;
  qsort(v, (size_t)n, sizeof *v, by_begin);
  bool apart = true;
  for (int j = 1; j < n; j++)
    apart &= v[j]->axis == v[0]->axis &&
             v[j]->begin >= v[j - 1]->begin + v[j - 1]->dy->type.dim[v[j]->axis];
  Inst *sum = NULL, **piece = malloc(sizeof *piece * (size_t)n);
  DTC_ASSERT(piece);
  for (int j = 0; j < n; j++) {
    const Pend *p = v[j];
    int64_t len = p->dy->type.dim[p->axis], from = 0, to = p->size;
    if (apart) {
      from = j ? v[j - 1]->begin + v[j - 1]->dy->type.dim[p->axis] : 0;
      to = j + 1 < n ? p->begin + len : p->size;
    }
    piece[j] = p->begin == from && p->begin + len == to
                   ? p->dy : pad(g, OP_pad, p->dy, p->axis, p->begin - from, to - from, p->at);
    if (!apart)
      sum = sum ? mk2(g, OP_add, p->at, piece[j], sum) : piece[j];
  }
  for (int m = n; apart && m > 1;) {   /* concats of at most 16 operands */
    int out = 0;
    for (int j = 0; j < m; j += 16) {
      int c = m - j < 16 ? m - j : 16;
      if (c == 1) {
        piece[out++] = piece[j];
        continue;
      }
      Inst *r = ir_new(g->f, OP_concat, v[0]->at->loc, c, piece + j);
      ir_set_int(r, "axis", v[0]->axis);
      piece[out++] = ir_finish(r);
    }
    m = out;
  }
  if (apart)
    sum = piece[0];
  g->adj[k] = g->adj[k] ? mk2(g, OP_add, v[0]->at, sum, g->adj[k]) : sum;
  free(piece);
  free(v);
}

static void grad_pad(GradCtx *g, Inst *inst) {
  int64_t ax = axis_of(inst), b = ir_get_int(inst, "begin", 0);
  accum(g, X, slice(g, DY, ax, b, b + X->type.dim[ax], inst));
}


static void grad_pad_reflect(GradCtx *g, Inst *i) { grad_copy_pad(g, i, OP_pad_reflect_grad); }
static void grad_pad_replicate(GradCtx *g, Inst *i) { grad_copy_pad(g, i, OP_pad_replicate_grad); }
static void grad_pad_circular(GradCtx *g, Inst *i) { grad_copy_pad(g, i, OP_pad_circular_grad); }
static void grad_pad_reflect_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_pad_replicate_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }
static void grad_pad_circular_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

static void grad_concat(GradCtx *g, Inst *inst) {
  int64_t ax = axis_of(inst), at = 0;
  for (int k = 0; k < inst->nin; k++) {
    Inst *x = inst->in[k];
    if (wants(g, x))
      accum(g, x, slice(g, DY, ax, at, at + x->type.dim[ax], inst));
    at += x->type.dim[ax];
  }
}

static void grad_broadcast(GradCtx *g, Inst *inst) { accum(g, X, DY); }

/* ---- indices and integers: nothing flows into i32 values ---- */

static void grad_int_elem(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_to_f32(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_int_where(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_one_hot(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_arange(GradCtx *g, Inst *inst) { (void)g, (void)inst; }
static void grad_gather_grad(GradCtx *g, Inst *inst) { no_derivative(g, inst); }

/* dx: dy added at the places gather read */
static void grad_gather(GradCtx *g, Inst *inst) {
  Inst *in[2] = {inst->in[1], DY};
  Inst *r = ir_new(g->f, OP_gather_grad, inst->loc, 2, in);
  ir_set_int(r, "axis", axis_of(inst));
  ir_set_ints(r, "shape", X->type.dim, X->type.rank);
  accum(g, X, ir_finish(r));
}

/* dx[k] = dy[k] + ... + dy[n-1]: the cumsum the other way */
static void grad_cumsum(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  Inst *r = ir_new(g->f, OP_cumsum, inst->loc, 1, &dy);
  ir_set_int(r, "axis", axis_of(inst));
  if (!ir_get_int(inst, "reverse", 0))
    ir_set_int(r, "reverse", 1);
  accum(g, X, ir_finish(r));
}

/* the same mask on dy */
static void grad_tril(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  accum(g, X, grad_op(g, OP_tril, inst, 1, &dy));
}
static void grad_triu(GradCtx *g, Inst *inst) {
  Inst *dy = DY;
  accum(g, X, grad_op(g, OP_triu, inst, 1, &dy));
}

/* ---- loops ----
 * The backward of `repeat` is a repeat in reverse over a body made once. The
 * body B is differentiated as a function: G holds a copy of B (its forward
 * part, including what the grad of a nested loop adds to it) and then the
 * adjoints of B's args from the adjoint of its carried value. The forward
 * values the backward part reads are saved: the forward loop runs B_save, a
 * copy of G's forward part that also outputs them, stacked by the loop; the
 * backward loop runs B_grad, G's backward part reading the saved values, the
 * loop's whole and stacked operands and the adjoint as args. Its carried
 * values are the adjoint of the carried value and a sum for each whole
 * operand that needs an adjoint; it stacks the adjoints of the stacked
 * operands. G itself is dropped. With remat the forward loop saves only
 * each iteration's carried value, and B_grad recomputes from it the forward
 * values its backward part reads: less memory, one more forward. */

static Inst *new_arg(Func *f, int index, const Type *t, Loc loc, const char *name) {
  Inst *a = ir_new(f, OP_arg, loc, 0, NULL);
  ir_set_int(a, "index", index);
  a->type = *t;
  a->name = name;
  return ir_finish(a);
}

static void new_output(Func *f, Inst *v, const char *name) {
  Inst *o = ir_new(f, OP_output, v->loc, 1, &v);
  ir_set_str(o, "name", name);
  ir_finish(o);
}

static Inst *zeros(GradCtx *g, const Type *t, Inst *at) {
  return broadcast(g, cnst(g, at, 0), t, at);
}

static void drop_func(Module *m, const Func *f) {
  int n = 0;
  for (int k = 0; k < m->func.n; k++)
    if (m->func.a[k] != f)
      m->func.a[n++] = m->func.a[k];
  m->func.n = n;
}

/* A loop's output k >= 1 flows back through the loop's grad (grad_repeat),
 * run once for all its outputs when the loop itself has an adjoint: give it
 * one (zeros) when only its repeat_outs lead to the loss. */
static void grad_repeat_out(GradCtx *g, Inst *inst) {
  Inst *r = inst->in[0];
  if (wants(g, r) && !g->adj[r->id])
    g->adj[r->id] = zeros(g, &r->type, r);
}

/* The adjoint of output k of loop r: r's own for k = 0, else the sum of
 * those of its repeat_outs {index = k}; NULL when none has one. */
static Inst *out_adj(GradCtx *g, Inst *r, int k) {
  if (k == 0)
    return g->adj[r->id];
  Inst *s = NULL;
  for (int j = r->id + 1; j < g->n; j++) {
    Inst *o = g->f->inst.a[j];
    if (o->op == OP_repeat_out && o->in[0] == r && ir_get_int(o, "index", 0) == k &&
        g->active[j] && g->adj[j])
      s = s ? mk2(g, OP_add, r, s, g->adj[j]) : g->adj[j];
  }
  return s;
}

static const char *dname(Module *m, const char *what, int k) {
  return k ? arena_printf(m->arena, "%s%d", what, k) : what;
}

static void grad_repeat(GradCtx *g, Inst *r) {
  Module *m = g->f->mod;
  Func *b = ir_repeat_body(r);
  int nin = r->nin, nout = ir_func_noutputs(b);
  int64_t n = ir_get_int(r, "n", 1), nst = ir_get_int(r, "stacked", 0);
  int nc = (int)ir_get_int(r, "carry", 1);
  if (ir_get_int(r, "reverse", 0)) {
    diag_error(g->d, r->loc, "a loop is differentiated only in forward order");
    return;
  }
  int first_st = nin - (int)nst;
  /* the adjoints of the loop's outputs: carried values, then stacked ones */
  Inst **dout = calloc((size_t)nout + 1, sizeof *dout);
  DTC_ASSERT(dout);
  for (int k = 0; k < nout; k++)
    dout[k] = out_adj(g, r, k);

  /* G: B's forward part, then its backward part */
  Func *gf = ir_add_func(m, arena_printf(m->arena, "%s.G", b->name), b->loc);
  gf->body = true;
  ir_renumber(b);
  int nb = b->inst.n;
  Inst **map = calloc((size_t)nb + 1, sizeof *map);
  DTC_ASSERT(map);
  for (int k = 0; k < nb; k++) {
    Inst *i = b->inst.a[k], *in[1024];
    DTC_ASSERT(i->nin <= COUNTOF(in));
    for (int j = 0; j < i->nin; j++)
      in[j] = map[i->in[j]->id];
    map[k] = ir_copy_inst(gf, i, in);
  }
  Inst **outs = calloc((size_t)nout + 1, sizeof *outs);
  DTC_ASSERT(outs);
  for (int k = 0; k < nout; k++)
    outs[k] = map[ir_func_output(b, k)->in[0]->id];
  free(map);
  GradCtx h = {.f = gf, .n = nb, .d = g->d};
  h.active = calloc((size_t)nb + 1, sizeof *h.active);
  h.adj = calloc((size_t)nb + 1, sizeof *h.adj);
  h.pend = calloc((size_t)nb + 1, sizeof *h.pend);
  bool *reach = calloc((size_t)nb + 1, sizeof *reach);
  DTC_ASSERT(h.active && h.adj && h.pend && reach);
  for (int k = 0; k < nb; k++) {
    Inst *i = gf->inst.a[k];
    int64_t ix = ir_get_int(i, "index", 0);
    bool on = i->op == OP_arg && (ix < nc || wants(g, r->in[ix]));
    for (int j = 0; j < i->nin; j++)
      on |= h.active[i->in[j]->id];
    h.active[k] = on && differentiable(i);
  }
  for (int k = 0; k < nout; k++)
    reach[outs[k]->id] |= k < nc || dout[k];
  for (int k = nb - 1; k >= 0; k--) {
    Inst *i = gf->inst.a[k];
    for (int j = 0; reach[k] && j < i->nin; j++)
      reach[i->in[j]->id] = true;
    h.active[k] &= reach[k];
  }
  /* the adjoints of B's outputs, args of G: each carried value's, and each
   * stacked output's row that has one */
  Inst **dargs_out = calloc((size_t)nout + 1, sizeof *dargs_out);
  DTC_ASSERT(dargs_out);
  for (int k = 0; k < nout; k++) {
    if (k >= nc && !dout[k])
      continue;
    dargs_out[k] = new_arg(gf, nin + k, &outs[k]->type, r->loc,
                           k < nc ? dname(m, "dcarry", k) : dname(m, "dy", k));
    if (h.active[outs[k]->id])
      accum(&h, outs[k], dargs_out[k]);
  }
  for (int k = nb - 1; k >= 0; k--) {
    settle(&h, k);
    if (h.active[k] && h.adj[k])
      (ir_pieces(gf->inst.a[k]) ? no_derivative : grad_fn[gf->inst.a[k]->op])(&h, gf->inst.a[k]);
  }
  Inst **dargs = calloc((size_t)nin + 1, sizeof *dargs);
  DTC_ASSERT(dargs);
  for (int k = 0; k < nb; k++)
    if (gf->inst.a[k]->op == OP_arg)
      dargs[ir_get_int(gf->inst.a[k], "index", 0)] = h.adj[k];
  free(h.active);
  free(reach);

  /* the forward part: B's copies, and the repeat_outs of its loops */
  ir_renumber(gf);
  int ng = gf->inst.n;
  Uses u = ir_uses(m->arena, gf);
  bool *fwd = calloc((size_t)ng + 1, sizeof *fwd), *saved = calloc((size_t)ng + 1, sizeof *saved);
  DTC_ASSERT(fwd && saved);
  for (int k = 0; k < ng; k++) {   /* and the rows' lse of an attention, its forward's */
    const Inst *i = gf->inst.a[k];
    fwd[k] = k < nb || (i->op == OP_repeat_out && fwd[i->in[0]->id]);
    for (int j = 0; i->op == OP_sdpa_lse && j < i->nin; j++)
      fwd[k] = j ? fwd[k] && fwd[i->in[j]->id] : fwd[i->in[j]->id];
  }
  int nsaved = 0;
  for (int k = 0; k < ng; k++) {
    const Inst *i = gf->inst.a[k];
    if (!fwd[k] || i->op == OP_const || (i->op == OP_arg && ir_get_int(i, "index", 0) >= nc))
      continue;
    for (int j = u.off[k]; j < u.off[k + 1] && !saved[k]; j++)
      saved[k] = !fwd[u.u[j]->id] && u.u[j]->op != OP_repeat_out;
  }
  /* remat: the backward recomputes the forward values it reads from the
   * iteration's carried values, the only values saved */
  bool remat = ir_get_int(r, "remat", 0) != 0;
  bool *redo = calloc((size_t)ng + 1, sizeof *redo);
  DTC_ASSERT(redo);
  for (int k = ng - 1; remat && k >= 0; k--) {
    const Inst *i = gf->inst.a[k];
    if (saved[k] || redo[k])
      for (int j = 0; j < i->nin; j++)
        redo[i->in[j]->id] = true;
  }
  for (int k = 0; k < ng; k++) {
    const Inst *i = gf->inst.a[k];
    if (remat && (saved[k] || redo[k])) {   /* args but the carried ones are the loop's operands */
      saved[k] = i->op == OP_arg && ir_get_int(i, "index", 0) < nc;
      redo[k] = i->op != OP_arg && i->op != OP_const;
    }
    nsaved += saved[k];
  }

  /* B_save: the forward part, outputting the saved values after B's own */
  Func *bs = ir_add_body(m, b->name, "save", b->loc);
  Inst **smap = calloc((size_t)ng + 1, sizeof *smap);
  DTC_ASSERT(smap);
  for (int k = 0; k < ng; k++) {
    Inst *i = gf->inst.a[k], *in[1024];
    if (!fwd[k] || i->op == OP_output)
      continue;
    for (int j = 0; j < i->nin; j++)
      in[j] = smap[i->in[j]->id];
    smap[k] = ir_copy_inst(bs, i, in);
  }
  for (int k = 0; k < nout; k++)
    new_output(bs, smap[outs[k]->id], ir_get_str(ir_func_output(b, k), "name", "carry"));
  for (int k = 0; k < ng; k++)
    if (saved[k])
      new_output(bs, smap[k], arena_printf(m->arena, "save.%d", k));
  free(smap);

  /* the forward loop runs B_save; its saved outputs, stacked */
  ir_set_str(r, "body", bs->name);
  Inst **stack = calloc((size_t)nsaved + 1, sizeof *stack);
  DTC_ASSERT(stack);
  for (int k = 0; k < nsaved; k++) {
    Inst *o = ir_new(g->f, OP_repeat_out, r->loc, 1, &r);
    ir_set_int(o, "index", nout + k);
    stack[k] = ir_finish(o);
  }

  /* B_grad's args: the adjoints of the carried values, the sums, the whole
   * operands, the stacked operands, the rows of the stacked outputs'
   * adjoints and the saved values; its outputs: the adjoints of the carried
   * args, the sums, the adjoints of the stacked operands that need one */
  Func *bg = ir_add_body(m, b->name, "grad", b->loc);
  Inst **gmap = calloc((size_t)ng + 1, sizeof *gmap);
  DTC_ASSERT(gmap);
  int na = 0;
  for (int k = 0; k < nc; k++)
    gmap[dargs_out[k]->id] = new_arg(bg, na++, &outs[k]->type, r->loc, dname(m, "dcarry", k));
  Inst **sum_in = calloc((size_t)nin + 1, sizeof *sum_in);
  DTC_ASSERT(sum_in);
  for (int k = nc; k < first_st; k++)
    if (wants(g, r->in[k]))
      sum_in[k] = new_arg(bg, na++, &r->in[k]->type, r->in[k]->loc, NULL);
  int ncarry = na;
  for (int k = 0; k < nb; k++) {
    Inst *a = gf->inst.a[k];
    int64_t ix = ir_get_int(a, "index", 0);
    if (a->op == OP_arg && ix >= nc && ix < first_st)
      gmap[k] = new_arg(bg, na + (int)ix - nc, &a->type, a->loc, a->name);
  }
  na += first_st - nc;
  for (int k = 0; k < nb; k++) {
    Inst *a = gf->inst.a[k];
    int64_t ix = ir_get_int(a, "index", 0);
    if (a->op == OP_arg && ix >= first_st)
      gmap[k] = new_arg(bg, na + (int)(ix - first_st), &a->type, a->loc, a->name);
  }
  na += (int)nst;
  int ndy = 0;
  for (int k = nc; k < nout; k++)
    if (dargs_out[k]) {
      gmap[dargs_out[k]->id] = new_arg(bg, na++, &outs[k]->type, r->loc, dname(m, "dy", k));
      ndy++;
    }
  for (int k = 0; k < ng; k++)
    if (saved[k])
      gmap[k] = new_arg(bg, na++, &gf->inst.a[k]->type, gf->inst.a[k]->loc, gf->inst.a[k]->name);
  for (int k = 0; k < ng; k++) {
    Inst *i = gf->inst.a[k], *in[1024];
    if (gmap[k] || (fwd[k] && i->op != OP_const && !redo[k]) || i->op == OP_arg)
      continue;
    for (int j = 0; j < i->nin; j++)
      DTC_ASSERT((in[j] = gmap[i->in[j]->id]) != NULL);
    gmap[k] = ir_copy_inst(bg, i, in);
  }
  GradCtx e = {.f = bg};
  for (int k = 0; k < nc; k++)
    new_output(bg, dargs[k] ? gmap[dargs[k]->id] : zeros(&e, &r->in[k]->type, r),
               dname(m, "dcarry", k));
  for (int k = nc; k < first_st; k++)
    if (sum_in[k]) {
      Inst *s = dargs[k] ? mk2(&e, OP_add, r, sum_in[k], gmap[dargs[k]->id]) : sum_in[k];
      new_output(bg, s, arena_printf(m->arena, "d%d", k));
    }
  int *ys = calloc((size_t)nin + 1, sizeof *ys), nys = 0;
  DTC_ASSERT(ys);
  for (int k = first_st; k < nin; k++)
    if (wants(g, r->in[k])) {
      const Inst *a = ir_func_arg(b, k);
      new_output(bg, dargs[k] ? gmap[dargs[k]->id] : zeros(&e, &a->type, r),
                 arena_printf(m->arena, "d%d", k));
      ys[k] = ncarry + nys++;
    }

  /* the backward loop */
  Inst **in = calloc((size_t)(na + 1), sizeof *in);
  DTC_ASSERT(in);
  int ni = 0;
  for (int k = 0; k < nc; k++)
    in[ni++] = dout[k] ? dout[k] : zeros(g, &r->in[k]->type, r);
  for (int k = nc; k < first_st; k++)
    if (sum_in[k])
      in[ni++] = zeros(g, &r->in[k]->type, r);
  for (int k = nc; k < nin; k++)
    in[ni++] = r->in[k];
  for (int k = nc; k < nout; k++)
    if (dargs_out[k])
      in[ni++] = dout[k];
  for (int k = 0; k < nsaved; k++)
    in[ni++] = stack[k];
  DTC_ASSERT(ni == na);
  Inst *back = ir_new(g->f, OP_repeat, r->loc, ni, in);
  ir_set_str(back, "body", bg->name);
  ir_set_int(back, "n", n);
  ir_set_int(back, "carry", ncarry);
  ir_set_int(back, "stacked", nst + ndy + nsaved);
  ir_set_int(back, "reverse", 1);
  ir_finish(back);
  for (int k = 0, c = nc; k < nin; k++) {   /* output ix of the backward loop */
    int ix = k < nc ? k : k < first_st ? (sum_in[k] ? c++ : -1) : (ys[k] ? ys[k] : -1);
    if (ix < 0 || !wants(g, r->in[k]))
      continue;
    Inst *o = back;
    if (ix > 0) {
      o = ir_new(g->f, OP_repeat_out, r->loc, 1, &back);
      ir_set_int(o, "index", ix);
      o = ir_finish(o);
    }
    accum(g, r->in[k], o);
  }
  drop_func(m, gf);
  free(h.adj);
  free(h.pend);
  free(dout);
  free(outs);
  free(dargs_out);
  free(dargs);
  free(fwd);
  free(saved);
  free(redo);
  free(gmap);
  free(stack);
  free(sum_in);
  free(ys);
  free(in);
}

/* ---- the pass ---- */

static Inst *find_loss(Module *m, Func *src, Diag *d) {
  for (int k = 0; k < src->inst.n; k++) {
    Inst *i = src->inst.a[k];
    if (i->op == OP_output && !strcmp(ir_get_str(i, "name", ""), m->train.loss)) {
      char b[128];
      const Type *t = &i->in[0]->type;
      if (t->dtype == DT_F32 && t->rank == 0)
        return i->in[0];
      diag_error(d, i->in[0]->loc, "the loss '%s' must be a scalar f32, got %s", m->train.loss,
                 type_str(t, b, sizeof b));
      return NULL;
    }
  }
  diag_error(d, m->train.loc, "the loss '%s' is not an output of @%s", m->train.loss, src->name);
  return NULL;
}

/* Copies into f the insts of src that the loss or a store needs; returns the
 * copy of the loss. */
static Inst *clone(Func *f, Func *src, Inst *loss) {
  int n = src->inst.n;
  ir_renumber(src);
  bool *need = calloc((size_t)n + 1, sizeof *need);
  Inst **map = calloc((size_t)n + 1, sizeof *map);
  DTC_ASSERT(need && map);
  need[loss->id] = true;
  for (int k = n - 1; k >= 0; k--) {
    Inst *i = src->inst.a[k];
    need[k] |= i->op == OP_store;
    for (int j = 0; need[k] && j < i->nin; j++)
      need[i->in[j]->id] = true;
  }
  for (int k = 0; k < n; k++) {
    Inst *i = src->inst.a[k];
    if (!need[k])
      continue;
    Inst *in[1024];
    DTC_ASSERT(i->nin <= COUNTOF(in));
    for (int j = 0; j < i->nin; j++)
      in[j] = map[i->in[j]->id];
    map[k] = ir_copy_inst(f, i, in);
  }
  Inst *r = map[loss->id];
  free(need);
  free(map);
  return r;
}

/* Builds @name: the forward of src, `output "loss"` and the backward. For each
 * global k, value[k] is its first load (NULL: none) and grad[k] the sum of the
 * adjoints of its loads (NULL: the loss does not depend on it). */
static Func *differentiate(Module *m, Func *src, const char *name, Diag *d, Inst **value,
                           Inst **grad) {
  int nerr = d->nerr;
  Inst *loss = find_loss(m, src, d);
  if (!loss || !check_sparse(m, src, d))
    return NULL;
  Func *f = ir_add_func(m, name, src->loc);
  loss = clone(f, src, loss);
  int n = f->inst.n;
  GradCtx g = {.f = f, .n = n, .d = d};
  g.active = calloc((size_t)n, sizeof *g.active);
  g.adj = calloc((size_t)n, sizeof *g.adj);
  g.pend = calloc((size_t)n + 1, sizeof *g.pend);
  bool *reach = calloc((size_t)n, sizeof *reach);
  DTC_ASSERT(g.active && g.adj && g.pend && reach);
  for (int k = 0; k < n; k++) {
    Inst *i = f->inst.a[k];
    bool on = i->op == OP_load && ir_find_global(m, ir_get_str(i, "global", ""))->kind == G_PARAM;
    for (int j = 0; j < i->nin; j++)
      on |= g.active[i->in[j]->id];
    g.active[k] = on && differentiable(i);
  }
  reach[loss->id] = true;
  for (int k = n - 1; k >= 0; k--) {
    Inst *i = f->inst.a[k];
    for (int j = 0; reach[k] && j < i->nin; j++)
      reach[i->in[j]->id] = true;
    g.active[k] &= reach[k];
  }

  Inst *out = ir_new(f, OP_output, loss->loc, 1, &loss);
  ir_set_str(out, "name", "loss");
  ir_finish(out);

  if (g.active[loss->id])
    g.adj[loss->id] = cnst(&g, loss, 1);
  for (int k = n - 1; k >= 0; k--) {
    Inst *i = f->inst.a[k];
    settle(&g, k);
    if (g.active[k] && g.adj[k])
      (ir_pieces(i) ? no_derivative : grad_fn[i->op])(&g, i);
  }

  for (int k = 0; k < n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op != OP_load)
      continue;
    const Global *gl = ir_find_global(m, ir_get_str(i, "global", ""));
    int gk = (int)(gl - m->global.a);
    if (!value[gk])
      value[gk] = i;
    if (g.active[k] && g.adj[k])
      grad[gk] = grad[gk] ? ir_make(f, OP_add, i->loc, 2, grad[gk], g.adj[k]) : g.adj[k];
  }
  free(g.active);
  free(g.adj);
  free(g.pend);
  free(reach);
  return d->nerr == nerr ? f : NULL;
}

Func *autodiff_grads(Module *m, Func *src, const char *name, Diag *d) {
  int ng = m->global.n;
  Inst **value = calloc((size_t)ng + 1, sizeof *value), **grad = calloc((size_t)ng + 1, sizeof *grad);
  DTC_ASSERT(value && grad);
  Func *f = differentiate(m, src, name, d, value, grad);
  for (int k = 0; f && k < ng; k++)
    if (grad[k]) {
      Inst *o = ir_new(f, OP_output, m->global.a[k].loc, 1, &grad[k]);
      ir_set_str(o, "name", m->global.a[k].name);
      ir_finish(o);
    }
  free(value);
  free(grad);
  return f;
}

bool pass_autodiff(Module *m, Diag *d, PassRun *run) {
  (void)run;
  if (!m->train.loss || ir_find_func(m, "train_step"))
    return true;
  for (int k = 0; k < m->func.n; k++)
    if (m->func.a[k]->device >= 0)
      return true;
  Func *fwd = ir_find_func(m, "forward");
  if (!fwd) {
    diag_error(d, m->train.loc, "there is no @forward to train");
    return false;
  }
  int ng = m->global.n;
  Inst **value = calloc((size_t)ng + 1, sizeof *value), **grad = calloc((size_t)ng + 1, sizeof *grad);
  DTC_ASSERT(value && grad);
  Func *f = differentiate(m, fwd, "train_step", d, value, grad);
  bool ok = f != NULL;
  for (int k = 0; ok && k < ng; k++) {
    const Global *gl = &m->global.a[k];
    if (gl->kind == G_PARAM && !grad[k] && (d->wflags & W_UNUSED))
      diag_warn(d, gl->loc, "param '%s' does not affect the loss '%s'; it is not trained",
                gl->name, m->train.loss);
  }
  ok = ok && opt_emit(m, f, value, grad, d);
  free(value);
  free(grad);
  return ok;
}

/* ---- communication: autodiff runs on the global program, before spmd ---- */

static void no_collective(GradCtx *g, Inst *inst) {
  diag_error(g->d, inst->loc, "'%s' cannot be differentiated: collectives appear only after "
             "the spmd pass, which runs after autodiff", ir_ops[inst->op].name);
}

static void grad_all_reduce(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_all_gather(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_reduce_scatter(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_all_to_all(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_shard_slice(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_send(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_bcast(GradCtx *g, Inst *inst) { no_collective(g, inst); }
static void grad_fold_all(GradCtx *g, Inst *inst) { no_collective(g, inst); }

/* ---- batch norm ---- */

/* A training step normalises by the batch's statistics: the adjoint is the
 * batch operand's (the running one is a buffer, never active). */
static void grad_batch_stat(GradCtx *g, Inst *inst) { accum(g, X, DY); }
