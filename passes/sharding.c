/* sharding.c: how every value lies on the mesh (Inst.shard), GSPMD style.
 * Annotated globals seed their loads; each op's legal forms (shard_form)
 * carry shardings forward from operands to results and backward from results
 * to unknown operands, sweep after sweep until nothing changes. Where an op's
 * operands disagree, the form that moves the fewest bytes wins and a note at
 * the op says so. A result is never split where none of its operands is (no
 * invented splits), so unannotated tensors stay whole unless a neighbour's
 * split reaches them. A loop's body is propagated once, for every
 * iteration, inside its caller's sweeps: the caller's shardings enter it
 * through its args, and its own leave through the loop's operands and
 * outputs (section "loops"), to one fixed point. A split of a loop's
 * stacked operand along its layer dim makes the loop pipeline stages: every
 * stacked operand and output of it is split so (shard_pipe_axis).
 *
 * Requires: autodiff done; at most one mesh. Guarantees, with a mesh: every
 * value of @train_step and @forward and of the bodies their loops run has a
 * sharding that a form of its op yields (a body's are derived anew on every
 * run; a body a second loop runs is copied for it first, @B.copy); every
 * global has one, and a param's optimizer state (<p>__m, <p>__v, <p>__acc)
 * shares its param's, or under shard_state is split further over the
 * data-parallel axis (passes/zero.c); inputs without annotation are whole;
 * no split leaves a device an empty block but a placement's (ir_placed).
 * Without a mesh it does nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

enum { NONE = -1, RED = -2 };   /* fwd_dim: must stay whole; summed over */
enum { MAX_ROLES = 2 * 16 + 1 };  /* nothing, or per operand a split and a partial sum */

static void clear(Sharding *s, int mesh) {
  ir_shard_whole(s);
  s->mesh = mesh;
}

static void set_partial(Sharding *s, unsigned mask) {
  s->partial = mask != 0;
  s->partial_axes = (uint8_t)mask;
}

static int dim_over(const Sharding *s, int rank, int axis) {
  for (int d = 0; s && d < rank; d++)
    if (s->axis[d] == axis)
      return d;
  return -1;
}

static void split(Sharding *s, int d, int axis, double *ratio) {
  s->axis[d] = (int8_t)axis;
  s->ratio[d] = axis >= 0 ? ratio : NULL;
}

static void copy_dim(Sharding *to, int dt, const Sharding *from, int df) {
  split(to, dt, from->axis[df], from->ratio[df]);
}

static int axis_size(const Module *m, int axis) { return m->mesh.a[0].axis_size[axis]; }

/* ---- blocks and ratios ---- */

static void blocks_of(const Module *m, const Sharding *s, const Type *t, int d, int64_t *b) {
  ir_dim_blocks(m, t->dim[d], s->ratio[d], axis_size(m, s->axis[d]), b);
}

static bool blocks_eq(const int64_t *a, const int64_t *b, int k) {
  for (int c = 0; c < k; c++)
    if (a[c] != b[c])
      return false;
  return true;
}

/* The ratios that give blocks b of a dimension of n over k devices into *r:
 * NULL when they are the even ones, else `hint` when it gives them, else b /
 * n; false when no ratios give them (in deterministic mode, blocks of whole
 * pieces: ir_dim_blocks). */
static bool ratio_try(const Module *m, int64_t n, const int64_t *b, int k, double *hint,
                      double **r);

static bool ratio_try(const Module *m, int64_t n, const int64_t *b, int k, double *hint,
                      double **out) {
  int64_t even[SHARD_MAX_AXIS], back[SHARD_MAX_AXIS];
  *out = NULL;
  if (n <= 0)
    return true;
  ir_dim_blocks(m, n, NULL, k, even);
  if (blocks_eq(b, even, k))
    return true;
  if (hint) {
    ir_dim_blocks(m, n, hint, k, back);
    if (blocks_eq(b, back, k))
      return *out = hint, true;
  }
  double *r = arena_alloc(m->arena, sizeof *r * (size_t)k);
  for (int c = 0; c < k; c++)
    r[c] = (double)b[c] / (double)n;
  ir_dim_blocks(m, n, r, k, back);
  *out = r;
  return blocks_eq(b, back, k);
}

/* Same split of dimension d (axis and blocks) in a and b. */
static bool dim_same(const Module *m, const Type *t, const Sharding *a, const Sharding *b, int d) {
  if (a->axis[d] != b->axis[d])
    return false;
  if (a->axis[d] < 0 || a->ratio[d] == b->ratio[d])
    return true;
  int64_t x[SHARD_MAX_AXIS], y[SHARD_MAX_AXIS];
  blocks_of(m, a, t, d, x);
  blocks_of(m, b, t, d, y);
  return blocks_eq(x, y, axis_size(m, a->axis[d]));
}

bool shard_same(const Module *m, const Type *t, const Sharding *a, const Sharding *b) {
  if (ir_partial_axes(m, a, t->rank) != ir_partial_axes(m, b, t->rank))
    return false;
  for (int d = 0; d < t->rank; d++)
    if (!dim_same(m, t, a, b, d))
      return false;
  return true;
}

/* Every split of s is in r too (r may split more). */
static bool keeps_splits(const Module *m, const Type *t, const Sharding *s, const Sharding *r) {
  for (int d = 0; d < t->rank; d++)
    if (s->axis[d] >= 0 && !dim_same(m, t, s, r, d))
      return false;
  return true;
}

/* ---- forms, from each op's rule (forms.c) ---- */

/* The result dimension that dimension j of operand k becomes; blocks b of a
 * split there become out. NONE: a split there cannot carry over; RED: the op
 * sums over it, so a split there makes a partial result. */
static int fwd_dim(const Inst *i, int k, int j, const int64_t *b, int nb, int64_t *out) {
  DimMap dm;
  if (!shard_map(i, &dm))
    return NONE;
  int e = dm.to[k][j];
  if (e <= FORM_SUM(0))
    return RED;
  if (e < 0 || dm.res_whole[e])
    return NONE;
  for (int c = 0; c < nb; c++) {
    if (b[c] * dm.mul[k][j] % dm.div[k][j])
      return NONE;
    out[c] = b[c] * dm.mul[k][j] / dm.div[k][j];
  }
  return e;
}

/* The split of operand dimension j over axis a in cur, if any, as a ratio. */
static bool ratio_from(const Sharding *cur, int j, int a, double **ratio) {
  if (!cur || j < 0 || cur->axis[j] != a)
    return false;
  *ratio = cur->ratio[j];
  return true;
}

/* Splits every operand dim of label c over axis a; false when one of them
 * is split already. */
static bool split_label(const Inst *i, const DimMap *dm, int c, int a, double *ratio,
                        Sharding *req, bool apply) {
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; j < i->in[k]->type.rank; j++)
      if (dm->to[k][j] == FORM_SUM(c)) {
        if (req[k].axis[j] >= 0)
          return false;
        if (apply)
          split(&req[k], j, a, ratio);
      }
  return true;
}

/* Makes the result partial over axis a: a summed label an operand already
 * splits over a, else (a linear op) partial operands, else the first free
 * summed label. */
static bool make_partial(const Module *m, const Inst *i, const DimMap *dm, int a,
                         const Sharding *const *cur, Sharding *req) {
  for (int k = 0; k < i->nin; k++) {
    int j = dim_over(cur[k], i->in[k]->type.rank, a);
    double *ratio = NULL;
    int e = j >= 0 ? dm->to[k][j] : FORM_WHOLE;
    if (e <= FORM_SUM(0) && ratio_from(cur[k], j, a, &ratio) &&
        split_label(i, dm, FORM_SUM(0) - e, a, ratio, req, false))
      return split_label(i, dm, FORM_SUM(0) - e, a, ratio, req, true);
  }
  bool partial_in = false;
  for (int k = 0; k < i->nin; k++)
    partial_in |= (ir_partial_axes(m, cur[k], i->in[k]->type.rank) >> a) & 1u;
  if (dm->linear && (dm->nsum == 0 || partial_in)) {
    for (int k = 0; k < i->nin; k++)
      set_partial(&req[k], ir_partial_axes(m, &req[k], i->in[k]->type.rank) | (1u << a));
    return true;
  }
  for (int c = 0; c < dm->nsum; c++)
    if (split_label(i, dm, c, a, NULL, req, false))
      return split_label(i, dm, c, a, NULL, req, true);
  return false;
}

static bool loop_form(const Module *m, const Inst *i, const Sharding *r,
                      const Sharding *const *cur, Sharding *req);

/* Whether axis a splits or sums anything of s (of rank `rank`). */
static bool uses_axis(const Module *m, const Sharding *s, int rank, int a) {
  return dim_over(s, rank, a) >= 0 || ((ir_partial_axes(m, s, rank) >> a) & 1u);
}

/* The operand dims the map marks own keep their splits (each device works
 * on its block), when nothing else of the form uses that axis; false when
 * something does. */
static bool keep_own(const Module *m, const Inst *i, const DimMap *dm, const Sharding *r,
                     const Sharding *const *cur, Sharding *req) {
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; cur[k] && j < i->in[k]->type.rank; j++) {
      int a = cur[k]->axis[j];
      if (!dm->own[k][j] || a < 0)
        continue;
      if (uses_axis(m, r, i->type.rank, a))
        return false;
      for (int q = 0; q < i->nin; q++)
        if (uses_axis(m, &req[q], i->in[q]->type.rank, a))
          return false;
      split(&req[k], j, a, cur[k]->ratio[j]);
    }
  return true;
}

bool shard_form(const Module *m, const Inst *i, const Sharding *r, const Sharding *const *cur,
                Sharding *req) {
  if (i->op == OP_repeat || i->op == OP_repeat_out)
    return loop_form(m, i, r, cur, req);
  const Type *y = &i->type;
  unsigned P = ir_partial_axes(m, r, y->rank);
  for (int k = 0; k < i->nin; k++)
    clear(&req[k], r->mesh);
  for (int d = 0; d < y->rank; d++)
    if (r->axis[d] >= 0 && (P & (1u << r->axis[d])))
      return false;
  DimMap dm;
  if (!shard_map(i, &dm))
    return false;
  for (int d = 0; d < y->rank; d++) {
    int a = r->axis[d];
    if (a < 0)
      continue;
    if (dm.res_whole[d])
      return false;
    int kk = axis_size(m, a);
    int64_t b[SHARD_MAX_AXIS], back[SHARD_MAX_AXIS];
    blocks_of(m, r, y, d, b);
    for (int k = 0; k < i->nin; k++)
      for (int j = 0; j < i->in[k]->type.rank; j++) {
        if (dm.to[k][j] != d)
          continue;
        if (dm.mul[k][j] == dm.div[k][j]) {
          copy_dim(&req[k], j, r, d);
          continue;
        }
        for (int c = 0; c < kk; c++) {
          if (b[c] * dm.div[k][j] % dm.mul[k][j])
            return false;
          back[c] = b[c] * dm.div[k][j] / dm.mul[k][j];
        }
        double *ratio;
        if (!ratio_try(m, i->in[k]->type.dim[j], back, kk, r->ratio[d], &ratio))
          return false;
        split(&req[k], j, a, ratio);
      }
  }
  for (int a = 0; a < IR_MAX_MESH_AXES; a++)
    if ((P & (1u << a)) && !make_partial(m, i, &dm, a, cur, req))
      return false;
  return keep_own(m, i, &dm, r, cur, req);
}

/* ---- loops ----
 * A loop's forms come from its body, whose values have one sharding for
 * every iteration. Carried value k has one sharding for its operand, arg k,
 * body output k and loop output k: the arg's (spmd reshards the body output
 * to it). A whole operand has its arg's; a stacked operand is a whole
 * leading dim, then its arg's; a stacked output a whole leading dim, then its
 * body output's, which may be a partial sum (the stack of partial sums is
 * one). Args are not partial sums, but for a sum the loop carries from
 * zeros (partial_sums). */

/* s of a value of rank `rank` behind a whole leading dimension: the stack. */
static Sharding stacked_of(const Sharding *s, int rank) {
  Sharding t = *s;
  for (int d = rank; d > 0; d--)
    copy_dim(&t, d, s, d - 1);
  split(&t, 0, -1, NULL);
  return t;
}

/* s of a stacked value of rank `rank` without its leading dimension and
 * not a partial sum: a row, as an arg reads it. */
static Sharding row_of(const Sharding *s, int rank) {
  Sharding t = *s;
  for (int d = 0; d + 1 < rank; d++)
    copy_dim(&t, d, s, d + 1);
  split(&t, rank - 1, -1, NULL);
  set_partial(&t, 0);
  return t;
}

/* A loop's pipeline stages (docs/ARCHITECTURE.md, "Pipeline stages"): when
 * a stacked operand splits its leading, layer dim over a mesh axis, every
 * stacked operand and output of the loop splits it alike, over that axis
 * with those ratios, and each device runs its own layers; the carries and
 * the body's values are not split by it. The first such operand (of cur,
 * or of r's operands when cur is NULL) says how: its axis, -1 for none. */
int shard_pipe_axis(const Inst *r, const Sharding *const *cur, double **ratio) {
  for (int k = ir_repeat_first_stacked(r); k < r->nin; k++) {
    const Sharding *s = cur ? cur[k] : r->in[k]->shard;
    if (s && s->axis[0] >= 0) {
      *ratio = s->ratio[0];
      return s->axis[0];
    }
  }
  return -1;
}

/* stacked_of, the leading dim split as loop r's stages are. */
static Sharding stacked_in(const Inst *r, const Sharding *const *cur, const Sharding *s,
                           int rank) {
  double *ratio = NULL;
  int a = shard_pipe_axis(r, cur, &ratio);
  Sharding t = stacked_of(s, rank);
  if (a >= 0)
    split(&t, 0, a, ratio);
  return t;
}

/* What loop output k of repeat r is: carry k's arg's sharding, or a stacked
 * body output's; false while that is open. */
static bool loop_result(const Inst *r, int k, Sharding *out) {
  const Func *b = ir_repeat_body(r);
  if (k < ir_get_int(r, "carry", 1)) {
    const Inst *a = ir_func_arg(b, k);
    if (!a->shard)
      return false;
    *out = *a->shard;
    return true;
  }
  const Inst *v = ir_func_output(b, k)->in[0];
  if (!v->shard)
    return false;
  *out = stacked_in(r, NULL, v->shard, v->type.rank);
  return true;
}

bool shard_zero(const Inst *x) {
  while (x->op == OP_broadcast)
    x = x->in[0];
  return x->op == OP_const && ir_get_float(x, "value", 1) == 0;
}

/* A repeat needs each operand as its arg reads it (stacked: whole along n)
 * and yields carry 0's sharding; a repeat_out reads its loop as it is. */
static bool loop_form(const Module *m, const Inst *i, const Sharding *r,
                      const Sharding *const *cur, Sharding *req) {
  Sharding want;
  if (i->op == OP_repeat_out) {
    if (!cur[0] || !loop_result(i->in[0], (int)ir_get_int(i, "index", 0), &want))
      return false;
    req[0] = *cur[0];
    return shard_same(m, &i->type, r, &want);
  }
  const Func *b = ir_repeat_body(i);
  for (int k = 0; k < i->nin; k++) {
    const Inst *a = ir_func_arg(b, k);
    if (!a->shard)
      return false;
    req[k] = ir_repeat_operand_kind(i, k) == 2 ? stacked_in(i, cur, a->shard, a->type.rank)
                                               : *a->shard;
  }
  return shard_same(m, &i->type, r, &req[0]);
}

/* ---- reshards ---- */

static void step(ShardStep *st, int *n, Op op, int axis, int dim, int to, const Sharding *before,
                 const Sharding *after) {
  st[*n] = (ShardStep){op, axis, dim, to, *before, *after};
  ++*n;
}

int shard_plan(const Module *m, const Type *t, const Sharding *s, const Sharding *r,
               ShardStep *st) {
  int rank = t->rank, n = 0, naxis = m->mesh.a[0].naxis;
  unsigned ps = ir_partial_axes(m, s, rank), pr = ir_partial_axes(m, r, rank);
  if (pr & ~ps)
    return -1;
  Sharding cur = *s, next;
  set_partial(&cur, ps);
  for (int a = 0; a < naxis; a++) {
    if (!(ps & ~pr & (1u << a)))
      continue;
    int j = dim_over(r, rank, a);
    next = cur;
    set_partial(&next, ir_partial_axes(m, &cur, rank) & ~(1u << a));
    if (j >= 0 && cur.axis[j] < 0) {
      copy_dim(&next, j, r, j);
      step(st, &n, OP_reduce_scatter, a, j, 0, &cur, &next);
    } else {
      step(st, &n, OP_all_reduce, a, -1, 0, &cur, &next);
    }
    cur = next;
  }
  for (int a = 0; a < naxis; a++) {
    int i = dim_over(&cur, rank, a), j = dim_over(r, rank, a);
    if (i < 0 || (i == j && dim_same(m, t, &cur, r, i)))
      continue;
    next = cur;
    split(&next, i, -1, NULL);
    if (j >= 0 && j != i && cur.axis[j] < 0) {
      copy_dim(&next, j, r, j);
      step(st, &n, OP_all_to_all, a, i, j, &cur, &next);
    } else {
      step(st, &n, OP_all_gather, a, i, 0, &cur, &next);
    }
    cur = next;
  }
  for (int a = 0; a < naxis; a++) {
    int j = dim_over(r, rank, a);
    if (j < 0 || cur.axis[j] == a)
      continue;
    DTC_ASSERT(cur.axis[j] < 0);
    next = cur;
    copy_dim(&next, j, r, j);
    step(st, &n, OP_shard_slice, a, j, 0, &cur, &next);
    cur = next;
  }
  return n;
}

/* Bytes of a device's block under s, taking every split as even. */
static double local_bytes(const Module *m, const Type *t, const Sharding *s) {
  double b = (double)dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++)
    b *= (double)t->dim[d] / (s->axis[d] >= 0 ? axis_size(m, s->axis[d]) : 1);
  return b;
}

double shard_step_bytes(const Module *m, const Type *t, const ShardStep *st) {
  int k = axis_size(m, st->axis);
  double f = (double)(k - 1) / k;
  switch (st->op) {
  case OP_all_reduce: return 2 * f * local_bytes(m, t, &st->before);
  case OP_all_gather: return f * local_bytes(m, t, &st->after);
  case OP_reduce_scatter: case OP_all_to_all: return f * local_bytes(m, t, &st->before);
  default: return 0;
  }
}

/* Bytes moved to turn s into r (HUGE_VAL: impossible). */
static double reshard_cost(const Module *m, const Type *t, const Sharding *s, const Sharding *r) {
  ShardStep st[SHARD_MAX_STEPS];
  int n = shard_plan(m, t, s, r, st);
  if (n < 0)
    return HUGE_VAL;
  double c = 0;
  for (int k = 0; k < n; k++)
    c += shard_step_bytes(m, t, &st[k]);
  return c;
}

/* ---- the pass ---- */

typedef struct Ctx {
  Module *m;
  Diag *d;
  Func *f;             /* being propagated */
  Sharding **gs;       /* by global: its sharding (the owner's entry counts), NULL: open */
  int *owner;          /* by global: the global whose sharding it shares */
  bool changed;
  bool planned;        /* plan auto chose the forms (its conflicts by cost) */
  unsigned whole_sums; /* axes no op sums over into a partial result (det_seq_axes) */
  VEC(Loc) noted;
  VEC(Func *) fns;     /* @train_step, @forward and the bodies they run, callers first */
  VEC(Inst *) runner;  /* by fns entry: the repeat that runs that body (NULL: an entry) */
  int **gi;            /* by fns entry, by inst id: a load's or store's owner (gindex) */
} Ctx;

/* The owner of the global load or store i reads or writes. */
static int gindex(Ctx *c, const Inst *i) {
  for (int k = 0; k < c->fns.n; k++)
    if (c->fns.a[k] == i->fn)
      return c->gi[k][i->id];
  DTC_UNREACHABLE();
}

/* A copy for the IR, partial axes written out only when not the default. */
static Sharding *keep(Ctx *c, const Sharding *s, int rank) {
  Sharding *k = arena_alloc(c->m->arena, sizeof *k);
  *k = *s;
  for (int d = rank; d < IR_MAX_RANK; d++)
    split(k, d, -1, NULL);
  unsigned p = ir_partial_axes(c->m, s, rank);
  k->partial_axes = 0;
  k->partial = p != 0;
  if (p && ir_partial_axes(c->m, k, rank) != p)
    k->partial_axes = (uint8_t)p;
  return k;
}

static void set_shard(Ctx *c, Inst *i, const Sharding *s) {
  i->shard = keep(c, s, i->type.rank);
  c->changed = true;
}

/* The global's sharding decided, its loads take it at once (every open
 * global is whole at the end). */
static void set_global(Ctx *c, int g, const Sharding *s) {
  Sharding t = *s;
  set_partial(&t, 0);
  c->gs[g] = keep(c, &t, c->m->global.a[g].type.rank);
  c->changed = true;
  for (int k = 0; c->f && k < c->f->inst.n; k++) {
    Inst *i = c->f->inst.a[k];
    if (i->op == OP_load && !i->shard && gindex(c, i) == g)
      i->shard = c->gs[g];
  }
}

/* Gives an open operand x the sharding req that a user's form asks for, when
 * x's own op can produce it. */
static void offer(Ctx *c, Inst *x, const Sharding *req) {
  /* a loop's outputs follow its body (loop_out) */
  if (x->shard || ir_partial_axes(c->m, req, x->type.rank) || x->op == OP_repeat ||
      x->op == OP_repeat_out)
    return;
  if (x->op == OP_load) {
    int g = gindex(c, x);
    if (!c->gs[g])
      set_global(c, g, req);
    return;
  }
  const Sharding *cur[SHARD_MAX_IN];
  Sharding tmp[SHARD_MAX_IN];
  for (int k = 0; k < x->nin; k++)
    cur[k] = x->in[k]->shard;
  if (shard_form(c->m, x, req, cur, tmp))
    set_shard(c, x, req);
}

static void loop_out(Ctx *c, Inst *r);
static void body_output(Ctx *c, Inst *o);

/* Pushes a known result's form to its open operands. */
static void fill(Ctx *c, Inst *i) {
  Sharding req[SHARD_MAX_IN];
  const Sharding *cur[SHARD_MAX_IN];
  if (i->op == OP_repeat) {
    loop_out(c, i);
    return;
  }
  if (i->op == OP_repeat_out)
    return;
  if (i->op == OP_output && i->fn->body) {
    body_output(c, i);
    return;
  }
  if (i->op == OP_store) {
    int g = gindex(c, i);
    Inst *v = i->in[0];
    if (c->gs[g])
      offer(c, v, c->gs[g]);
    else if (v->shard)
      set_global(c, g, v->shard);
    return;
  }
  if (!i->shard || i->op == OP_output)
    return;
  for (int k = 0; k < i->nin; k++)
    cur[k] = i->in[k]->shard;
  if (!shard_form(c->m, i, i->shard, cur, req))
    return;
  for (int k = 0; k < i->nin; k++)
    if (!cur[k])
      offer(c, i->in[k], &req[k]);
}

/* What an axis does in a candidate result. */
typedef struct Role { int dim; bool partial; double *ratio; } Role;   /* dim -1: nothing */

static void add_role(const Module *m, const Type *y, int k, Role *roles, int *n, Role r) {
  for (int q = 0; q < *n; q++) {
    if (roles[q].dim != r.dim || roles[q].partial != r.partial)
      continue;
    if (r.dim < 0 || roles[q].ratio == r.ratio)
      return;
    int64_t x[SHARD_MAX_AXIS], z[SHARD_MAX_AXIS];
    ir_dim_blocks(m, y->dim[r.dim], roles[q].ratio, k, x);
    ir_dim_blocks(m, y->dim[r.dim], r.ratio, k, z);
    if (blocks_eq(x, z, k))
      return;
  }
  roles[(*n)++] = r;
}

typedef struct Cand {
  Sharding r;
  int undone;          /* operands whose splits the form undoes */
  double cost, elems;
  bool conflict;       /* two split operands, and one of them moves */
} Cand;

/* What a choice made once every value has a sharding counts besides its
 * operands (share_reductions, share_reshards): the forms other users have
 * each operand resharded to, free to share (spmd makes each reshard of a
 * value once); what i's users need of its result, whose reshards count
 * instead of reducing a partial result; and whether bytes rank first. */
#define MAX_SHARED 4
typedef struct Share {
  int navail[16];
  Sharding avail[16][MAX_SHARED];
  int nneed;
  Sharding need[MAX_SHARED];
  bool by_bytes;
} Share;

/* Keeping every operand's split first (a form that undoes none exists unless
 * they conflict), then fewer bytes, then smaller blocks; with by_bytes,
 * fewer bytes first. */
static bool better(const Cand *a, const Cand *b, bool by_bytes) {
  if (by_bytes && a->cost != b->cost)
    return a->cost < b->cost;
  if (a->undone != b->undone)
    return a->undone < b->undone;
  if (a->cost != b->cost)
    return a->cost < b->cost;
  return a->elems < b->elems;
}

/* Evaluates result sharding r for i: false when no form yields it. With sh,
 * an operand is also available in sh's forms at no cost, and the result's
 * reshards to sh's needs count. */
static bool evaluate(Ctx *c, const Inst *i, const Sharding *r, const Sharding *const *cur,
                     const Share *sh, Cand *out) {
  Module *m = c->m;
  Sharding req[16];
  DTC_ASSERT(i->nin <= COUNTOF(req));   /* a repeat is not chosen (loop_step) */
  if (!shard_form(m, i, r, cur, req))
    return false;
  *out = (Cand){*r, 0, 0, 0, false};
  int known = 0;
  for (int k = 0; k < i->nin; k++) {
    const Type *t = &i->in[k]->type;
    if (!cur[k]) {
      if (ir_partial_axes(m, &req[k], t->rank))
        return false;
      continue;
    }
    known += dim_over(cur[k], t->rank, 0) >= 0 || dim_over(cur[k], t->rank, 1) >= 0;
    out->undone += !keeps_splits(m, t, cur[k], &req[k]);
    double cost = reshard_cost(m, t, cur[k], &req[k]);
    for (int q = 0; sh && q < sh->navail[k]; q++)
      cost = fmin(cost, reshard_cost(m, t, &sh->avail[k][q], &req[k]));
    out->cost += cost;
  }
  for (int q = 0; sh && q < sh->nneed; q++)
    out->cost += reshard_cost(m, &i->type, r, &sh->need[q]);
  unsigned P = sh && sh->nneed ? 0 : ir_partial_axes(m, r, i->type.rank);
  for (int a = 0; a < IR_MAX_MESH_AXES; a++)
    if (P & (1u << a)) {
      ShardStep st = {OP_all_reduce, a, -1, 0, *r, *r};
      out->cost += shard_step_bytes(m, &i->type, &st);
    }
  out->elems = local_bytes(m, &i->type, r);
  /* a sparse table's update gathers its rows by design, and so does a
   * row- or column-wise table's gradient its adjoint: no note */
  bool rows_kept = (i->op == OP_embedding_bag_grad || i->op == OP_sparse_values) && cur[1] &&
                   keeps_splits(m, &i->in[1]->type, cur[1], &req[1]) &&
                   (cur[1]->axis[0] >= 0 || cur[1]->axis[1] >= 0);
  out->conflict = known >= 2 && out->undone > 0 && !ir_in_place(i->op) && !rows_kept;
  return out->cost < HUGE_VAL;
}

static void note_choice(Ctx *c, const Inst *i, const Cand *best, const Cand *next) {
  for (int k = 0; k < c->noted.n; k++)
    if (c->noted.a[k].file == i->loc.file && c->noted.a[k].line == i->loc.line &&
        c->noted.a[k].col == i->loc.col)
      return;
  vec_push(c->m->arena, &c->noted, i->loc);
  char ops[512] = "", b1[256], b2[256];
  for (int k = 0; k < i->nin; k++) {
    const Inst *x = i->in[k];
    size_t n = strlen(ops);
    snprintf(ops + n, sizeof ops - n, "%s%s", k ? ", " : "",
             x->shard ? ir_shard_str(c->m, x->shard, x->type.rank, b1, sizeof b1) : "open");
  }
  const char *name = ir_ops[i->op].name;
  if (next)
    diag_note(c->d, i->loc,
              "operands of '%s' disagree (%s): chose %s, moving %.0f bytes per step; %s would "
              "move %.0f",
              name, ops, ir_shard_str(c->m, &best->r, i->type.rank, b1, sizeof b1), best->cost,
              ir_shard_str(c->m, &next->r, i->type.rank, b2, sizeof b2), next->cost);
  else
    diag_note(c->d, i->loc, "operands of '%s' disagree (%s): chose %s, moving %.0f bytes per step",
              name, ops, ir_shard_str(c->m, &best->r, i->type.rank, b1, sizeof b1), best->cost);
}

/* Chooses i's result sharding from its known operands: each axis of the mesh
 * does in the result what it does in some operand (split the dimension that
 * operand's split becomes, or make a partial sum), or nothing; the form that
 * undoes the fewest operand splits wins, then the one that moves the fewest
 * bytes, then the one that leaves the smallest block. */
static void choose(Ctx *c, Inst *i, const Share *sh) {
  Module *m = c->m;
  const Mesh *mesh = &m->mesh.a[0];
  const Sharding *cur[16];
  bool any = false;
  DTC_ASSERT(i->nin <= COUNTOF(cur));
  for (int k = 0; k < i->nin; k++)
    any |= (cur[k] = i->in[k]->shard) != NULL;
  if (!any)
    return;
  Role roles[IR_MAX_MESH_AXES][MAX_ROLES];
  int nr[IR_MAX_MESH_AXES] = {0};
  const Type *y = &i->type;
  for (int a = 0; a < mesh->naxis; a++) {
    int kk = axis_size(m, a);
    add_role(m, y, kk, roles[a], &nr[a], (Role){-1, false, NULL});
    for (int k = 0; k < i->nin; k++) {
      const Type *t = &i->in[k]->type;
      if (!cur[k])
        continue;
      if (ir_partial_axes(m, cur[k], t->rank) & (1u << a))
        add_role(m, y, kk, roles[a], &nr[a], (Role){-1, true, NULL});
      int j = dim_over(cur[k], t->rank, a);
      if (j < 0)
        continue;
      int64_t b[SHARD_MAX_AXIS], out[SHARD_MAX_AXIS];
      blocks_of(m, cur[k], t, j, b);
      int d = fwd_dim(i, k, j, b, kk, out);
      if (d == RED && !((c->whole_sums >> a) & 1u))
        add_role(m, y, kk, roles[a], &nr[a], (Role){-1, true, NULL});
      double *ratio;
      if (d >= 0 && ratio_try(m, y->dim[d], out, kk, cur[k]->ratio[j], &ratio))
        add_role(m, y, kk, roles[a], &nr[a], (Role){d, false, ratio});
    }
  }
  Cand best = {0}, next = {0}, cand;
  bool have = false, have_next = false, by_bytes = sh && sh->by_bytes;
  int pick[IR_MAX_MESH_AXES] = {0};   /* one role per axis, every combination */
  for (int a = 0; a >= 0;) {
    Sharding r;
    clear(&r, 0);
    unsigned P = 0;
    bool ok = true;
    for (int b = 0; b < mesh->naxis; b++) {
      const Role *ro = &roles[b][pick[b]];
      if (ro->partial)
        P |= 1u << b;
      if (ro->dim >= 0) {
        ok &= r.axis[ro->dim] < 0;
        split(&r, ro->dim, b, ro->ratio);
      }
    }
    set_partial(&r, P);
    if (ok && evaluate(c, i, &r, cur, sh, &cand)) {
      if (!have || better(&cand, &best, by_bytes)) {
        if (have)
          next = best, have_next = true;
        best = cand;
        have = true;
      } else if (!have_next || better(&cand, &next, by_bytes)) {
        next = cand;
        have_next = true;
      }
    }
    for (a = mesh->naxis - 1; a >= 0 && ++pick[a] == nr[a]; a--)
      pick[a] = 0;
  }
  if (!have || (by_bytes && evaluate(c, i, i->shard, cur, sh, &cand) &&
                 !(best.cost < cand.cost * (1 - 1e-9))))
    return;
  set_shard(c, i, &best.r);
  /* plan auto chose its conflicts by cost; the notes are for the user's. */
  if (best.conflict && !c->planned)
    note_choice(c, i, &best, have_next ? &next : NULL);
}

/* ---- loops in the propagation ---- */

/* The repeat that runs body b. */
static Inst *runner(Ctx *c, const Func *b) {
  for (int k = 0; k < c->fns.n; k++)
    if (c->fns.a[k] == b)
      return c->runner.a[k];
  DTC_UNREACHABLE();
}

/* Output o's position among its function's outputs. */
static int output_index(const Inst *o) {
  int k = 0;
  for (int j = 0; j < o->id; j++)
    k += o->fn->inst.a[j]->op == OP_output;
  return k;
}

/* Whether output o of a body is a carried value (not a stacked one). */
static bool carries(Ctx *c, const Inst *o) {
  return output_index(o) < ir_get_int(runner(c, o->fn), "carry", 1);
}

/* Caller to body: an open arg takes its operand's sharding (a stacked
 * operand's rows), a carried one else its body output's; never a partial
 * sum, which is reduced before the loop. */
static void loop_in(Ctx *c, Inst *r) {
  Func *b = ir_repeat_body(r);
  for (int k = 0; k < r->nin; k++) {
    Inst *a = (Inst *)ir_func_arg(b, k), *x = r->in[k];
    int kind = ir_repeat_operand_kind(r, k);
    const Sharding *from = x->shard;
    if (!from && kind == 0)
      from = ir_func_output(b, k)->in[0]->shard;
    if (a->shard || !from)
      continue;
    Sharding s = *from;
    if (kind == 2)
      s = row_of(from, x->type.rank);
    else
      set_partial(&s, 0);
    set_shard(c, a, &s);
  }
}

/* Body to caller: open operands are offered what their args read, and the
 * loop's outputs take theirs (loop_result). */
static void loop_out(Ctx *c, Inst *r) {
  const Func *b = ir_repeat_body(r);
  for (int k = 0; k < r->nin; k++) {
    const Inst *a = ir_func_arg(b, k);
    if (!a->shard || r->in[k]->shard)
      continue;
    Sharding req = ir_repeat_operand_kind(r, k) == 2 ? stacked_in(r, NULL, a->shard, a->type.rank)
                                                     : *a->shard;
    offer(c, r->in[k], &req);
  }
  const Func *f = r->fn;
  for (int j = r->id; j < f->inst.n; j++) {
    Inst *o = f->inst.a[j];
    Sharding s;
    if (o->shard || (o != r && (o->op != OP_repeat_out || o->in[0] != r)))
      continue;
    if (loop_result(r, o == r ? 0 : (int)ir_get_int(o, "index", 0), &s))
      set_shard(c, o, &s);
  }
}

/* A carried value's body output must end in its arg's sharding (spmd
 * reshards it there): offered to the open value, as a store's global is. */
static void body_output(Ctx *c, Inst *o) {
  if (!carries(c, o))
    return;
  const Inst *a = ir_func_arg(o->fn, output_index(o));
  if (a->shard && !o->in[0]->shard)
    offer(c, o->in[0], a->shard);
}

/* A sum loop r accumulates from zeros, in carry k: arg + v -> output k, the
 * arg read by nothing else. When v is a partial sum that the add reduces in
 * every iteration, the carry becomes a partial sum instead, reduced once
 * after the loop: arg, add and loop output k take v's sharding (the zeros
 * are a partial sum as they are, shard_zero). Users of the loop output
 * chose their forms from a complete sum; spmd reduces it for them. */
static void partial_sums(Ctx *c, Inst *r) {
  Func *b = ir_repeat_body(r);
  Uses u = ir_uses(c->m->arena, b);
  for (int k = 0; k < ir_get_int(r, "carry", 1); k++) {
    Inst *a = (Inst *)ir_func_arg(b, k), *s = ir_func_output(b, k)->in[0], *v = NULL;
    if (!shard_zero(r->in[k]) || s->op != OP_add || u.off[a->id + 1] - u.off[a->id] != 1 ||
        u.off[s->id + 1] - u.off[s->id] != 1)
      continue;
    v = s->in[0] == a ? s->in[1] : s->in[1] == a ? s->in[0] : NULL;
    if (!v || !type_eq(&v->type, &a->type) || !ir_partial_axes(c->m, v->shard, v->type.rank))
      continue;
    Sharding sum = *v->shard;
    set_partial(&sum, 0);
    if (!shard_same(c->m, &a->type, a->shard, &sum) || !shard_same(c->m, &a->type, s->shard, &sum))
      continue;
    a->shard = s->shard = keep(c, v->shard, v->type.rank);
    for (int j = r->id; j < r->fn->inst.n; j++) {
      Inst *o = r->fn->inst.a[j];
      bool out_k = o->op == OP_repeat_out && o->in[0] == r && ir_get_int(o, "index", 0) == k;
      if (o == r ? k == 0 : out_k)
        o->shard = a->shard;
    }
  }
}

/* Does user u need x, its operand k, without x's partial axes? */
static bool needs_sum(Ctx *c, const Inst *u, int k) {
  const Inst *x = u->in[k];
  unsigned p = ir_partial_axes(c->m, x->shard, x->type.rank);
  if (u->op == OP_store || u->op == OP_output)
    return u->op == OP_store || !u->fn->body || carries(c, u);
  const Sharding *cur[SHARD_MAX_IN];
  Sharding req[SHARD_MAX_IN];
  for (int j = 0; j < u->nin; j++)
    cur[j] = u->in[j]->shard;
  return shard_form(c->m, u, u->shard, cur, req) &&
         !(ir_partial_axes(c->m, &req[k], x->type.rank) & p);
}

/* Once every value has a sharding: an op that keeps a partial operand partial
 * is chosen again when another user of that operand reduces it anyway, the
 * reduction then being shared (spmd makes each reshard once). A body's
 * outputs keep theirs: the loop's outputs were made from them. */
static void share_reductions(Ctx *c, Func *f) {
  ir_renumber(f);
  Uses u = ir_uses(c->m->arena, f);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    Share sh = {0};
    if (!ir_partial_axes(c->m, i->shard, i->type.rank) || i->op == OP_load ||
        i->op == OP_repeat || i->op == OP_repeat_out || i->nin > COUNTOF(sh.navail))
      continue;
    bool any = false, output = false;
    for (int q = u.off[i->id]; f->body && q < u.off[i->id + 1]; q++)
      output |= u.u[q]->op == OP_output;
    for (int j = 0; j < i->nin && !output; j++) {
      const Inst *x = i->in[j];
      if (!ir_partial_axes(c->m, x->shard, x->type.rank))
        continue;
      for (int q = u.off[x->id]; q < u.off[x->id + 1] && !sh.navail[j]; q++)
        for (int kk = 0; kk < u.u[q]->nin && !sh.navail[j]; kk++)
          if (u.u[q] != i && u.u[q]->in[kk] == x && needs_sum(c, u.u[q], kk)) {
            sh.avail[j][0] = *x->shard;
            set_partial(&sh.avail[j][0], 0);
            sh.navail[j] = 1;
          }
      any |= sh.navail[j] > 0;
    }
    if (any)
      choose(c, i, &sh);
  }
}

/* What user u needs of its operand k under u's form into *need; false for
 * a loop's or an output's, and for a flattening seqflat.c may rewrite so
 * that it keeps the split it sees (left as they are). */
static bool need_of(Ctx *c, const Inst *u, int k, Sharding *need) {
  if (u->op == OP_store) {
    const Sharding *g = c->gs[gindex(c, u)];
    if (g)
      *need = *g;
    return g != NULL;
  }
  const Sharding *cur[16];
  Sharding req[16];
  if (u->op == OP_output || u->op == OP_repeat || u->op == OP_repeat_out || !u->shard ||
      u->nin > COUNTOF(cur) || (u->op == OP_reshape && shard_seq_flat_split(u)))
    return false;
  for (int j = 0; j < u->nin; j++)
    cur[j] = u->in[j]->shard;
  if (!shard_form(c->m, u, u->shard, cur, req))
    return false;
  *need = req[k];
  return true;
}

/* s into the n forms of set (of values of type t), unless there; false when
 * the set is full. */
static bool add_form(Ctx *c, const Type *t, Sharding *set, int *n, const Sharding *s) {
  for (int q = 0; q < *n; q++)
    if (shard_same(c->m, t, &set[q], s))
      return true;
  if (*n == MAX_SHARED)
    return false;
  set[(*n)++] = *s;
  return true;
}

/* Once every value has a sharding: an op that reshards an operand is chosen
 * again by bytes alone, an operand's reshards that other users make anyway
 * free and its result's reshards to what its users need counted; the new
 * form is kept when it moves fewer bytes. A matmul whose operands' splits
 * conflict thus takes the one whose undoing another op shares (the
 * backward's weight gradient of Megatron's column split: the forward
 * gathers its input whole), and leaves its result as its user reads it. */
static void share_reshards(Ctx *c, Func *f) {
  const Module *m = c->m;
  ir_renumber(f);
  Uses u = ir_uses(c->m->arena, f);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    const Sharding *cur[16];
    Sharding req[16], need;
    if (!i->shard || i->nin > COUNTOF(cur) || i->op == OP_load || i->op == OP_store ||
        i->op == OP_output || i->op == OP_repeat || i->op == OP_repeat_out)
      continue;
    bool moves = false, ok = true;
    for (int j = 0; j < i->nin; j++)
      cur[j] = i->in[j]->shard;
    if (!shard_form(m, i, i->shard, cur, req))
      continue;
    for (int j = 0; j < i->nin; j++)
      moves |= !shard_same(m, &i->in[j]->type, cur[j], &req[j]);
    if (!moves)
      continue;
    Share sh = {.by_bytes = true};
    for (int q = u.off[i->id]; ok && q < u.off[i->id + 1]; q++)
      for (int kk = 0; ok && kk < u.u[q]->nin; kk++)
        if (u.u[q]->in[kk] == i)
          ok = need_of(c, u.u[q], kk, &need) && add_form(c, &i->type, sh.need, &sh.nneed, &need);
    for (int j = 0; ok && j < i->nin; j++) {
      const Inst *x = i->in[j];
      for (int q = u.off[x->id]; q < u.off[x->id + 1]; q++)
        for (int kk = 0; u.u[q] != i && kk < u.u[q]->nin; kk++)
          if (u.u[q]->in[kk] == x && need_of(c, u.u[q], kk, &need) &&
              !shard_same(m, &x->type, x->shard, &need))
            add_form(c, &x->type, sh.avail[j], &sh.navail[j], &need);
    }
    if (ok)
      choose(c, i, &sh);
  }
}

static void whole(Ctx *c, Inst *i) {
  Sharding s;
  clear(&s, 0);
  set_shard(c, i, &s);
}

static bool settle(Ctx *c, Func *f);

/* A loop in a sweep: the caller's shardings into the body, the body to its
 * fixed point, the body's back out. */
static void loop_step(Ctx *c, Inst *r) {
  bool was = c->changed;
  c->changed = false;
  loop_in(c, r);
  bool any = c->changed;
  any |= settle(c, ir_repeat_body(r));
  c->changed = was || any;
  loop_out(c, r);
}

/* One sweep forward (an op with known operands chooses its result) and one
 * backward (a known result offers its form to open operands). */
static void sweep(Ctx *c, Func *f) {
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (!i->shard && i->op == OP_load && c->gs[gindex(c, i)])
      set_shard(c, i, c->gs[gindex(c, i)]);
    else if (!i->shard && (i->op == OP_const || i->op == OP_lr))
      whole(c, i);
    else if (i->op == OP_repeat)
      loop_step(c, i);
    else if (!i->shard && i->type.dtype != DT_VOID && i->op != OP_load && i->op != OP_repeat_out)
      choose(c, i, NULL);
    fill(c, i);
  }
  for (int k = f->inst.n - 1; k >= 0; k--)
    fill(c, f->inst.a[k]);
}

/* Sweeps f until nothing changes; whether anything did. */
static bool settle(Ctx *c, Func *f) {
  Func *caller = c->f;
  bool any = false;
  c->f = f;
  do {
    c->changed = false;
    sweep(c, f);
    any |= c->changed;
  } while (c->changed);
  c->f = caller;
  return any;
}

/* After the fixed point, in order: an open global is whole, and so is every
 * open value; a loop's body is settled and finished once its args are
 * known, its outputs then settle the rest of f; then shared reductions. */
static void finish(Ctx *c, Func *f) {
  Func *caller = c->f;
  c->f = f;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_load && !c->gs[gindex(c, i)]) {
      Sharding s;
      clear(&s, 0);
      set_global(c, gindex(c, i), &s);
    }
    if (i->op == OP_load && !i->shard) {
      set_shard(c, i, c->gs[gindex(c, i)]);
    } else if (i->op == OP_repeat) {
      Func *b = ir_repeat_body(i);
      loop_in(c, i);
      settle(c, b);
      finish(c, b);
      partial_sums(c, i);
      c->changed = false;
      loop_out(c, i);
      if (c->changed)
        settle(c, f);
      DTC_ASSERT(i->shard);
    } else if (!i->shard && i->type.dtype != DT_VOID) {
      whole(c, i);
    }
  }
  share_reductions(c, f);
  share_reshards(c, f);
  c->f = caller;
}

static void propagate(Ctx *c, Func *f) {
  c->f = f;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_load && i->shard && !c->gs[gindex(c, i)])
      set_global(c, gindex(c, i), i->shard);
  }
  settle(c, f);
  finish(c, f);
}

/* Adds f and, depth first, the bodies its repeats run to c->fns. A body a
 * second repeat runs is copied for it (@B.copy), so each body has one loop
 * and its shardings one meaning. */
static void collect(Ctx *c, Func *f, Inst *by) {
  vec_push(c->m->arena, &c->fns, f);
  vec_push(c->m->arena, &c->runner, by);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *r = f->inst.a[k];
    if (r->op != OP_repeat)
      continue;
    Func *b = ir_repeat_body(r);
    for (int j = 0; j < c->fns.n; j++)
      if (c->fns.a[j] == b) {
        b = ir_copy_body(c->m, b, "copy");
        ir_set_str(r, "body", b->name);
        break;
      }
    collect(c, b, r);
  }
}

/* A split must leave every device at least one element, but for a
 * placement's (ir_placed: a table-wise table's columns and what they map
 * to), whose other devices hold none. An error names the value `of` name. */
static void check_blocks(Ctx *c, const Sharding *s, const Type *t, Loc loc, const char *of,
                         const char *name) {
  const Mesh *mesh = &c->m->mesh.a[0];
  for (int d = 0; s && d < t->rank; d++) {
    int a = s->axis[d];
    if (a < 0 || ir_placed(s->ratio[d], mesh->axis_size[a]) >= 0)
      continue;
    int64_t b[SHARD_MAX_AXIS];
    ir_dim_blocks(c->m, t->dim[d], s->ratio[d], mesh->axis_size[a], b);
    for (int k = 0; k < mesh->axis_size[a]; k++)
      if (b[k] < 1) {
        diag_error(c->d, loc,
                   "splitting dimension %d of %s'%s' (%lld) over mesh axis '%s' leaves its "
                   "device %d no elements", d, of, name, (long long)t->dim[d], mesh->axis_name[a], k);
        return;
      }
  }
}

/* A loop's stages split its layers over a mesh axis; what its body reads
 * must not be split over that axis too (each stage runs whole iterations). */
static void check_stages(Ctx *c, const Inst *r) {
  double *ratio;
  int a = shard_pipe_axis(r, NULL, &ratio);
  const Func *b = ir_repeat_body(r);
  /* the stacked params of one loop are split alike: an annotation that says
   * otherwise is refused (an open one followed the loop's) */
  for (int k = 0; a >= 0 && k < r->nin; k++) {
    const Inst *x = r->in[k];
    if (ir_repeat_operand_kind(r, k) != 2 || x->op != OP_load || !x->shard)
      continue;
    Sharding want = *x->shard;
    split(&want, 0, a, ratio);
    if (!dim_same(c->m, &x->type, x->shard, &want, 0)) {
      char b1[256], b2[256];
      const Global *g = ir_global_of(x);
      diag_error(c->d, g->loc, "'%s' is %s, but the stacked params of its loop are split "
                 "alike along their layer dim, as pipeline stages: %s", g->name,
                 ir_shard_str(c->m, x->shard, x->type.rank, b1, sizeof b1),
                 ir_shard_str(c->m, &want, x->type.rank, b2, sizeof b2));
      return;
    }
  }
  for (int k = 0; a >= 0 && k < r->nin; k++) {
    const Inst *arg = ir_func_arg(b, k);
    bool over = (ir_partial_axes(c->m, arg->shard, arg->type.rank) >> a) & 1u;
    for (int d = 0; d < arg->type.rank; d++)
      over |= arg->shard->axis[d] == a;
    if (over) {
      diag_error(c->d, r->loc, "the loop's layers are split over mesh axis '%s' (pipeline "
                 "stages), so what an iteration reads cannot be split over it too, but its "
                 "operand %d is", c->m->mesh.a[0].axis_name[a], k + 1);
      return;
    }
  }
}

/* The param a state global belongs to: "<param>__m", "<param>__v" and
 * "<param>__acc" (the name before the last "__"). */
static int owner_of(const Module *m, int g) {
  const char *name = m->global.a[g].name, *cut = NULL;
  for (const char *s = strstr(name, "__"); s; s = strstr(s + 1, "__"))
    cut = s;
  if (m->global.a[g].kind != G_STATE || !cut || cut == name || !cut[2])
    return g;
  char *p = arena_strndup(m->arena, name, (size_t)(cut - name));
  const Global *pg = ir_find_global(m, p);
  return pg && pg->kind == G_PARAM ? (int)(pg - m->global.a) : g;
}

static bool shard_run(Module *m, Diag *d, PassRun *run, unsigned whole_sums) {
  if (m->mesh.n == 0)
    return true;
  if (m->mesh.n > 1) {
    diag_error(d, m->mesh.a[1].loc, "dtc supports one mesh per model; '%s' is a second one",
               m->mesh.a[1].name);
    return false;
  }
  const Mesh *mesh = &m->mesh.a[0];
  for (int a = 0; a < mesh->naxis; a++)
    if (mesh->axis_size[a] > SHARD_MAX_AXIS) {
      diag_error(d, mesh->loc, "mesh axis '%s' has %d devices; dtc shards over at most %d per axis",
                 mesh->axis_name[a], mesh->axis_size[a], SHARD_MAX_AXIS);
      return false;
    }
  int ng = m->global.n, nerr = d->nerr;
  Ctx c = {.m = m, .d = d, .planned = m->plan == PLAN_AUTO && run && run->plan,
           .whole_sums = whole_sums};
  c.gs = arena_alloc(m->arena, sizeof *c.gs * (size_t)(ng + 1));
  c.owner = arena_alloc(m->arena, sizeof *c.owner * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++)
    c.owner[g] = owner_of(m, g);
  if (!zero_seed(m, d, c.owner))
    return false;
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    if (c.owner[g] == g)   /* a param's state is split as the param, said once */
      check_blocks(&c, gl->shard, &gl->type, gl->loc, "", gl->name);
  }
  if (d->nerr > nerr)
    return false;
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    if (gl->shard && !c.gs[c.owner[g]]) {
      c.gs[c.owner[g]] = gl->shard;
    } else if (!gl->shard && (gl->kind == G_INPUT || gl->kind == G_BUFFER)) {
      Sharding s;
      clear(&s, 0);
      set_global(&c, g, &s);
    }
  }
  const char *entries[] = {"train_step", "forward"};
  for (int k = 0; k < COUNTOF(entries); k++) {
    Func *f = ir_find_func(m, entries[k]);
    if (f && f->device < 0)
      collect(&c, f, NULL);
  }
  /* a body's shardings are derived from its loop's, every time */
  c.gi = arena_alloc(m->arena, sizeof *c.gi * (size_t)c.fns.n);
  for (int k = 0; k < c.fns.n; k++) {
    Func *f = c.fns.a[k];
    ir_renumber(f);
    c.gi[k] = arena_alloc(m->arena, sizeof *c.gi[k] * (size_t)(f->inst.n + 1));
    for (int j = 0; j < f->inst.n; j++) {
      Inst *i = f->inst.a[j];
      c.gi[k][j] = i->op == OP_load || i->op == OP_store
                       ? c.owner[ir_global_of(i) - m->global.a] : -1;
      if (c.runner.a[k])
        i->shard = NULL;
    }
  }
  for (int k = 0; k < c.fns.n; k++)
    if (!c.runner.a[k]) {
      propagate(&c, c.fns.a[k]);
      zero_sink(m, c.fns.a[k]);
    }
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    if (!c.gs[c.owner[g]]) {
      Sharding s;
      clear(&s, 0);
      set_global(&c, c.owner[g], &s);
    }
    gl->shard = c.gs[c.owner[g]];
  }
  for (int k = 0; k < c.fns.n; k++) {
    Func *f = c.fns.a[k];
    for (int j = 0; j < f->inst.n; j++) {
      Inst *i = f->inst.a[j];
      if (i->op == OP_repeat && d->nerr == nerr)   /* once: its loops share the loc */
        check_stages(&c, i);
      if (i->shard)
        check_blocks(&c, i->shard, &i->type, i->loc, "the value of ", ir_ops[i->op].name);
    }
  }
  return d->nerr == nerr;
}

/* What a derivation starts from: the globals' shardings and those of the
 * entry functions' instructions (a body's are derived anew anyway). */
typedef struct Seed { VEC(Sharding *) global; VEC(Inst *) inst; VEC(Sharding *) shard; } Seed;

static void seed_take(Module *m, Seed *s) {
  for (int g = 0; g < m->global.n; g++)
    vec_push(m->arena, &s->global, m->global.a[g].shard);
  for (int k = 0; k < m->func.n; k++) {
    Func *f = m->func.a[k];
    for (int j = 0; f->device < 0 && !f->body && j < f->inst.n; j++) {
      vec_push(m->arena, &s->inst, f->inst.a[j]);
      vec_push(m->arena, &s->shard, f->inst.a[j]->shard);
    }
  }
}

static void seed_restore(Module *m, const Seed *s) {
  for (int g = 0; g < m->global.n; g++)
    m->global.a[g].shard = s->global.a[g];
  for (int k = 0; k < m->func.n; k++) {
    Func *f = m->func.a[k];
    for (int j = 0; f->device < 0 && !f->body && j < f->inst.n; j++)
      f->inst.a[j]->shard = NULL;
  }
  for (int k = 0; k < s->inst.n; k++)
    s->inst.a[k]->shard = s->shard.a[k];
}

/* In deterministic mode, the axes that split an attention's sequence (its
 * queries' T): a sum over the positions of such a split would add the
 * devices' parts, whose split depends on the layout, so no op sums over it
 * into a partial result; its operands are gathered along the sequence
 * instead and every device adds the whole sum as one process does (its
 * sums over the batch still in their pieces). */
static unsigned det_seq_axes(const Module *m) {
  unsigned axes = 0;
  for (int k = 0; m->det_pieces > 1 && k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    for (int j = 0; f->device < 0 && j < f->inst.n; j++) {
      const Inst *i = f->inst.a[j];
      const Sharding *q = i->nin ? i->in[0]->shard : NULL;
      if ((i->op == OP_sdpa || i->op == OP_sdpa_lse || i->op == OP_sdpa_grad) && q &&
          i->in[0]->type.rank == 4 && q->axis[2] >= 0)
        axes |= 1u << q->axis[2];
    }
  }
  return axes;
}

/* Derives the shardings on a quiet copy of d while seqflat.c rewrites
 * flattenings that would gather a split, or deterministic mode finds
 * sequence splits whose sums must stay whole (at most a few rounds), then
 * once more with d's messages (a planner's quiet trials keep the last
 * round). */
bool pass_sharding(Module *m, Diag *d, PassRun *run) {
  if (m->mesh.n != 1)
    return shard_run(m, d, run, 0);
  Seed seed = {0};
  seed_take(m, &seed);
  Diag trial;
  diag_init_quiet(&trial);
  unsigned whole = 0;
  for (int round = 0; round < 4; round++) {
    if (!shard_run(m, d->quiet ? d : &trial, run, whole))
      break;
    unsigned more = det_seq_axes(m) & ~whole;
    whole |= more;
    bool rewrote = shard_seq_flatten(m);
    if (!rewrote && !more && d->quiet)
      return true;
    seed_restore(m, &seed);
    if (!rewrote && !more)
      break;
  }
  seed_restore(m, &seed);
  return shard_run(m, d, run, whole);
}
