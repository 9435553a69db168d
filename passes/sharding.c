/* sharding.c: how every value lies on the mesh (Inst.shard), GSPMD style.
 * Annotated globals seed their loads; each op's legal forms (shard_form)
 * carry shardings forward from operands to results and backward from results
 * to unknown operands, sweep after sweep until nothing changes. Where an op's
 * operands disagree, the form that moves the fewest bytes wins and a note at
 * the op says so. A result is never split where none of its operands is (no
 * invented splits), so unannotated tensors stay whole unless a neighbour's
 * split reaches them.
 *
 * Requires: autodiff done; at most one mesh. Guarantees, with a mesh: every
 * value of @train_step and @forward has a sharding that a form of its op
 * yields; every global has one, and a param's optimizer state (<p>__m, <p>__v)
 * shares its param's; inputs without annotation are whole; no split leaves a
 * device an empty block. Without a mesh it does nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

enum { NONE = -1, RED = -2 };   /* fwd_dim: must stay whole; summed over */
enum { MAX_ROLES = 2 * 16 + 1 };  /* nothing, or per operand a split and a partial sum */

static int popcount(unsigned x) {
  int n = 0;
  for (; x; x &= x - 1)
    n++;
  return n;
}

static void clear(Sharding *s, int mesh) {
  memset(s, 0, sizeof *s);
  s->mesh = mesh;
  for (int d = 0; d < IR_MAX_RANK; d++)
    s->axis[d] = -1;
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
  ir_blocks(t->dim[d], s->ratio[d], axis_size(m, s->axis[d]), b);
}

static bool blocks_eq(const int64_t *a, const int64_t *b, int k) {
  for (int c = 0; c < k; c++)
    if (a[c] != b[c])
      return false;
  return true;
}

/* The ratios that give blocks b of a dimension of n over k devices: NULL when
 * they are the even ones, else `hint` when it gives them, else b / n. */
static double *ratio_of(const Module *m, int64_t n, const int64_t *b, int k, double *hint) {
  int64_t even[SHARD_MAX_AXIS], back[SHARD_MAX_AXIS];
  ir_blocks(n, NULL, k, even);
  if (blocks_eq(b, even, k))
    return NULL;
  if (hint) {
    ir_blocks(n, hint, k, back);
    if (blocks_eq(b, back, k))
      return hint;
  }
  double *r = arena_alloc(m->arena, sizeof *r * (size_t)k);
  for (int c = 0; c < k; c++)
    r[c] = (double)b[c] / (double)n;
  ir_blocks(n, r, k, back);
  DTC_ASSERT(blocks_eq(b, back, k));
  return r;
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

/* ---- reshape: dimensions in groups of equal products ---- */

typedef struct Group { int i0, i1, o0, o1; } Group;

static int groups(const Type *x, const Type *y, Group *g) {
  int i = 0, o = 0, n = 0;
  while (i < x->rank || o < y->rank) {
    if (i < x->rank && x->dim[i] == 1) {
      g[n++] = (Group){i, i + 1, o, o};
      i++;
      continue;
    }
    if (o < y->rank && y->dim[o] == 1) {
      g[n++] = (Group){i, i, o, o + 1};
      o++;
      continue;
    }
    Group gr = {i, i, o, o};
    int64_t pi = 1, po = 1;
    do {
      if (pi <= po && i < x->rank)
        pi *= x->dim[i++];
      else if (o < y->rank)
        po *= y->dim[o++];
      else
        break;
    } while (pi != po);
    gr.i1 = i;
    gr.o1 = o;
    g[n++] = gr;
  }
  return n;
}

static int64_t prod(const Type *t, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++)
    p *= t->dim[d];
  return p;
}

/* A split of x's dimension j (blocks b) as a split of y: only the first
 * dimension of a group carries a split across a reshape, its blocks scaled by
 * the rest of the group. Returns y's dimension, or NONE. */
static int reshape_map(const Type *x, const Type *y, int j, const int64_t *b, int k, int64_t *out) {
  Group g[2 * IR_MAX_RANK];
  int n = groups(x, y, g);
  for (int q = 0; q < n; q++) {
    if (g[q].i0 != j || g[q].i1 == g[q].i0 || g[q].o1 == g[q].o0)
      continue;
    int64_t in = prod(x, g[q].i0 + 1, g[q].i1), on = prod(y, g[q].o0 + 1, g[q].o1);
    for (int c = 0; c < k; c++) {
      if (b[c] * in % on)
        return NONE;
      out[c] = b[c] * in / on;
    }
    return g[q].o0;
  }
  return NONE;
}

/* ---- forms ---- */

static int64_t norm_axis(int64_t ax, int rank) { return ax < 0 ? ax + rank : ax; }

/* Which dimensions of x a reduction sums over, and where the others go. */
static void reduced(const Inst *i, bool *red, int *to) {
  int rank = i->in[0]->type.rank, n;
  const int64_t *axes = ir_get_ints(i, "axes", &n);
  bool keep = ir_get_int(i, "keepdim", 0) != 0;
  memset(red, 0, sizeof(bool) * IR_MAX_RANK);
  for (int k = 0; k < n; k++)
    red[norm_axis(axes[k], rank)] = true;
  for (int j = 0, d = 0; j < rank; j++)
    to[j] = red[j] && !keep ? NONE : d++;
}

/* The matmul's dimensions: a's m and k, b's k and n. */
static void mm_dims(const Inst *i, int *am, int *ak, int *bk, int *bn) {
  int ra = i->in[0]->type.rank, rb = i->in[1]->type.rank;
  bool ta = ir_get_int(i, "ta", 0), tb = ir_get_int(i, "tb", 0);
  *am = ta ? ra - 1 : ra - 2;
  *ak = ta ? ra - 2 : ra - 1;
  *bk = tb ? rb - 1 : rb - 2;
  *bn = tb ? rb - 2 : rb - 1;
}

/* The result dimension that dimension j of operand k becomes; blocks b of a
 * split there become out. NONE: a split there cannot carry over; RED: the op
 * sums over it, so a split there makes a partial result. */
static int fwd_dim(const Inst *i, int k, int j, const int64_t *b, int nb, int64_t *out) {
  const Type *x = &i->in[k]->type, *y = &i->type;
  memcpy(out, b, sizeof *b * (size_t)nb);
  int lead = y->rank - x->rank, to[IR_MAX_RANK], am, ak, bk, bn;
  bool red[IR_MAX_RANK];
  switch (i->op) {
  case OP_sum: case OP_mean: case OP_max:
    reduced(i, red, to);
    return red[j] ? (i->op == OP_max ? NONE : RED) : to[j];
  case OP_max_grad:
    if (k == 0)
      return j;
    reduced(i, red, to);
    for (int d = 0; d < y->rank; d++)
      if (!red[d] && to[d] == j)
        return d;
    return NONE;
  case OP_matmul:
    mm_dims(i, &am, &ak, &bk, &bn);
    if (k == 0)
      return j == ak ? RED : j == am ? y->rank - 2 : j;
    return j == bk ? RED : j == bn ? y->rank - 1 : x->rank > 2 ? j : NONE;
  case OP_softmax: case OP_log_softmax: case OP_softmax_grad: case OP_log_softmax_grad:
    return j == norm_axis(ir_get_int(i, "axis", -1), x->rank) ? NONE : j;
  case OP_normalize: case OP_normalize_grad:
    return j == x->rank - 1 ? NONE : j;
  case OP_causal_mask:
    return j >= x->rank - 2 ? NONE : j;
  case OP_dropout: case OP_dropout_grad:
    return j;
  case OP_cross_entropy:
    return j == 0 ? RED : NONE;
  case OP_cross_entropy_grad:
    return k < 2 && j == 0 ? 0 : NONE;
  case OP_mse:
    return RED;
  case OP_embedding:
    return k == 1 ? j : j == 1 ? y->rank - 1 : NONE;
  case OP_embedding_grad:
    return k == 1 && j == x->rank - 1 ? 1 : RED;
  case OP_reshape:
    return reshape_map(x, y, j, b, nb, out);
  case OP_transpose: {
    int n;
    const int64_t *perm = ir_get_ints(i, "perm", &n);
    for (int d = 0; d < n; d++)
      if (perm[d] == j)
        return d;
    return NONE;
  }
  case OP_slice: case OP_pad: case OP_concat:
    return j == norm_axis(ir_get_int(i, "axis", 0), x->rank) ? NONE : j;
  default:
    if (ir_ops[i->op].kind == K_ELEM || i->op == OP_broadcast)
      return x->dim[j] == y->dim[j + lead] ? j + lead : NONE;
    return NONE;
  }
}

/* Elementwise with numpy broadcasting: dimensions that broadcast stay whole. */
static void elem_map(const Type *x, const Type *y, const Sharding *r, Sharding *req) {
  int lead = y->rank - x->rank;
  for (int j = 0; j < x->rank; j++)
    if (x->dim[j] == y->dim[j + lead])
      copy_dim(req, j, r, j + lead);
}

/* The split of operand dimension j over axis a in cur, if any, as a ratio. */
static bool ratio_from(const Sharding *cur, int j, int a, double **ratio) {
  if (!cur || j < 0 || cur->axis[j] != a)
    return false;
  *ratio = cur->ratio[j];
  return true;
}

/* Places each axis of P on a dimension of the operands listed in `ops`,
 * where cur splits it, else on the first free dimension below `lim`. */
static bool place_partial(const Inst *i, unsigned P, const int *ops, int nops, int lim,
                          const Sharding *const *cur, Sharding *req) {
  for (int a = 0; a < IR_MAX_MESH_AXES; a++) {
    if (!(P & (1u << a)))
      continue;
    int j = -1;
    double *ratio = NULL;
    for (int q = 0; q < nops && j < 0; q++) {
      int jj = dim_over(cur[ops[q]], i->in[ops[q]]->type.rank, a);
      if (jj >= 0 && jj < lim && ratio_from(cur[ops[q]], jj, a, &ratio))
        j = jj;
    }
    for (int jj = 0; jj < lim && j < 0; jj++)
      if (req[ops[0]].axis[jj] < 0)
        j = jj;
    if (j < 0)
      return false;
    for (int q = 0; q < nops; q++)
      split(&req[ops[q]], j, a, ratio);
  }
  return true;
}

bool shard_form(const Module *m, const Inst *i, const Sharding *r, const Sharding *const *cur,
                Sharding *req) {
  const Type *y = &i->type;
  int rr = y->rank;
  unsigned P = ir_partial_axes(m, r, rr);
  for (int k = 0; k < i->nin; k++)
    clear(&req[k], r->mesh);
  for (int d = 0; d < rr; d++)
    if (r->axis[d] >= 0 && (P & (1u << r->axis[d])))
      return false;
  bool whole_r = P == 0;
  for (int d = 0; d < rr; d++)
    whole_r &= r->axis[d] < 0;
  const Type *x = i->nin ? &i->in[0]->type : NULL;
  bool red[IR_MAX_RANK];
  int to[IR_MAX_RANK], am, ak, bk, bn;
  int64_t ax;
  switch (i->op) {
  case OP_load:
    return P == 0;
  case OP_const: case OP_lr:
    return whole_r;
  case OP_sum: case OP_mean: case OP_max:
    reduced(i, red, to);
    for (int j = 0; j < x->rank; j++)
      if (!red[j])
        copy_dim(&req[0], j, r, to[j]);
    if (i->op == OP_max)
      return P == 0;
    for (int a = 0; a < IR_MAX_MESH_AXES; a++) {
      if (!(P & (1u << a)))
        continue;
      int j = dim_over(cur[0], x->rank, a);
      double *ratio = NULL;
      if (j >= 0 && red[j] && ratio_from(cur[0], j, a, &ratio)) {
        split(&req[0], j, a, ratio);
        continue;
      }
      if (ir_partial_axes(m, cur[0], x->rank) & (1u << a)) {
        set_partial(&req[0], ir_partial_axes(m, &req[0], x->rank) | (1u << a));
        continue;
      }
      for (j = 0; j < x->rank && !(red[j] && req[0].axis[j] < 0); j++)
        ;
      if (j == x->rank)
        return false;
      split(&req[0], j, a, NULL);
    }
    return true;
  case OP_max_grad:
    if (P)
      return false;
    reduced(i, red, to);
    for (int j = 0; j < rr; j++) {
      if (red[j] && r->axis[j] >= 0)
        return false;
      copy_dim(&req[0], j, r, j);
      if (!red[j]) {
        copy_dim(&req[1], to[j], r, j);
        copy_dim(&req[2], to[j], r, j);
      }
    }
    return true;
  case OP_matmul: {
    if (popcount(P) > 1)
      return false;
    mm_dims(i, &am, &ak, &bk, &bn);
    int rb = i->in[1]->type.rank;
    for (int d = 0; d < rr - 2; d++) {
      copy_dim(&req[0], d, r, d);
      if (rb > 2)
        copy_dim(&req[1], d, r, d);
    }
    copy_dim(&req[0], am, r, rr - 2);
    copy_dim(&req[1], bn, r, rr - 1);
    for (int a = 0; a < IR_MAX_MESH_AXES; a++) {
      if (!(P & (1u << a)))
        continue;
      double *ratio = NULL;
      if (!ratio_from(cur[0], ak, a, &ratio))
        ratio_from(cur[1], bk, a, &ratio);
      split(&req[0], ak, a, ratio);
      split(&req[1], bk, a, ratio);
    }
    return true;
  }
  case OP_softmax: case OP_log_softmax: case OP_softmax_grad: case OP_log_softmax_grad:
  case OP_normalize: case OP_normalize_grad: case OP_causal_mask: {
    int64_t lo = i->op == OP_causal_mask ? rr - 2 : rr - 1, hi = rr - 1;
    if (i->op != OP_normalize && i->op != OP_normalize_grad && i->op != OP_causal_mask)
      lo = hi = norm_axis(ir_get_int(i, "axis", -1), rr);
    if (P)
      return false;
    for (int64_t d = lo; d <= hi; d++)
      if (r->axis[d] >= 0)
        return false;
    for (int k = 0; k < i->nin; k++)
      for (int d = 0; d < rr; d++)
        copy_dim(&req[k], d, r, d);
    return true;
  }
  case OP_dropout: case OP_dropout_grad:   /* any split: a block's mask is its share */
    if (P)
      return false;
    for (int d = 0; d < rr; d++)
      copy_dim(&req[0], d, r, d);
    return true;
  case OP_cross_entropy: {
    if (popcount(P) > 1)
      return false;
    int a = P ? (P & 1u ? 0 : 1) : -1;
    double *ratio = NULL;
    if (a >= 0 && !ratio_from(cur[0], 0, a, &ratio))
      ratio_from(cur[1], 0, a, &ratio);
    split(&req[0], 0, a, ratio);
    split(&req[1], 0, a, ratio);
    return true;
  }
  case OP_cross_entropy_grad:
    if (P || r->axis[1] >= 0)
      return false;
    copy_dim(&req[0], 0, r, 0);
    copy_dim(&req[1], 0, r, 0);
    return true;
  case OP_mse: {
    int ops[2] = {0, 1};
    return place_partial(i, P, ops, 2, x->rank, cur, req);
  }
  case OP_embedding:
    if (P)
      return false;
    copy_dim(&req[0], 1, r, rr - 1);
    for (int d = 0; d < rr - 1; d++)
      copy_dim(&req[1], d, r, d);
    return true;
  case OP_embedding_grad: {
    if (r->axis[0] >= 0)
      return false;
    int ops[2] = {0, 1};
    copy_dim(&req[1], i->in[1]->type.rank - 1, r, 1);
    return place_partial(i, P, ops, 2, x->rank, cur, req);
  }
  case OP_reshape:
    for (int d = 0; d < rr; d++) {
      int a = r->axis[d];
      if (a < 0)
        continue;
      int k = axis_size(m, a);
      int64_t b[SHARD_MAX_AXIS], back[SHARD_MAX_AXIS];
      blocks_of(m, r, y, d, b);
      int j = reshape_map(y, x, d, b, k, back);
      if (j < 0)
        return false;
      split(&req[0], j, a, ratio_of(m, x->dim[j], back, k, r->ratio[d]));
    }
    set_partial(&req[0], P);
    return true;
  case OP_transpose: {
    int n;
    const int64_t *perm = ir_get_ints(i, "perm", &n);
    for (int d = 0; d < n; d++)
      copy_dim(&req[0], (int)perm[d], r, d);
    set_partial(&req[0], P);
    return true;
  }
  case OP_slice: case OP_pad: case OP_concat:
    ax = norm_axis(ir_get_int(i, "axis", 0), rr);
    if (r->axis[ax] >= 0)
      return false;
    for (int k = 0; k < i->nin; k++) {
      for (int d = 0; d < rr; d++)
        copy_dim(&req[k], d, r, d);
      set_partial(&req[k], P);
    }
    return true;
  default:
    break;
  }
  if (ir_ops[i->op].kind != K_ELEM && i->op != OP_broadcast)
    return false;
  if (P && i->op != OP_add && i->op != OP_sub && i->op != OP_neg && i->op != OP_broadcast)
    return false;
  for (int k = 0; k < i->nin; k++) {
    elem_map(&i->in[k]->type, y, r, &req[k]);
    set_partial(&req[k], P);
  }
  return true;
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
    bool even = !cur.ratio[i] && t->dim[i] % axis_size(m, a) == 0;
    if (j >= 0 && j != i && cur.axis[j] < 0 && even) {
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
  VEC(Loc) noted;
} Ctx;

static int gindex(Ctx *c, const Inst *i) { return c->owner[ir_global_of(i) - c->m->global.a]; }

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
  if (x->shard || ir_partial_axes(c->m, req, x->type.rank))
    return;
  if (x->op == OP_load) {
    int g = gindex(c, x);
    if (!c->gs[g])
      set_global(c, g, req);
    return;
  }
  const Sharding *cur[16];
  Sharding tmp[16];
  for (int k = 0; k < x->nin; k++)
    cur[k] = x->in[k]->shard;
  if (shard_form(c->m, x, req, cur, tmp))
    set_shard(c, x, req);
}

/* Pushes a known result's form to its open operands. */
static void fill(Ctx *c, Inst *i) {
  Sharding req[16];
  const Sharding *cur[16];
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

static void add_role(const Type *y, int k, Role *roles, int *n, Role r) {
  for (int q = 0; q < *n; q++) {
    if (roles[q].dim != r.dim || roles[q].partial != r.partial)
      continue;
    if (r.dim < 0 || roles[q].ratio == r.ratio)
      return;
    int64_t x[SHARD_MAX_AXIS], z[SHARD_MAX_AXIS];
    ir_blocks(y->dim[r.dim], roles[q].ratio, k, x);
    ir_blocks(y->dim[r.dim], r.ratio, k, z);
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

/* Keeping every operand's split first (a form that undoes none exists unless
 * they conflict), then fewer bytes, then smaller blocks. */
static bool better(const Cand *a, const Cand *b) {
  if (a->undone != b->undone)
    return a->undone < b->undone;
  if (a->cost != b->cost)
    return a->cost < b->cost;
  return a->elems < b->elems;
}

/* Evaluates result sharding r for i: false when no form yields it. An
 * operand marked `reduced` is also available as a complete sum, at no cost:
 * another user needs it so. */
static bool evaluate(Ctx *c, const Inst *i, const Sharding *r, const Sharding *const *cur,
                     const bool *reduced, Cand *out) {
  Module *m = c->m;
  Sharding req[16];
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
    if (reduced[k]) {
      Sharding whole_sum = *cur[k];
      set_partial(&whole_sum, 0);
      double alt = reshard_cost(m, t, &whole_sum, &req[k]);
      cost = alt < cost ? alt : cost;
    }
    out->cost += cost;
  }
  unsigned P = ir_partial_axes(m, r, i->type.rank);
  for (int a = 0; a < IR_MAX_MESH_AXES; a++)
    if (P & (1u << a)) {
      ShardStep st = {OP_all_reduce, a, -1, 0, *r, *r};
      out->cost += shard_step_bytes(m, &i->type, &st);
    }
  out->elems = local_bytes(m, &i->type, r);
  out->conflict = known >= 2 && out->undone > 0;
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
static void choose(Ctx *c, Inst *i, const bool *reduced) {
  Module *m = c->m;
  const Mesh *mesh = &m->mesh.a[0];
  const Sharding *cur[16];
  bool any = false;
  for (int k = 0; k < i->nin; k++)
    any |= (cur[k] = i->in[k]->shard) != NULL;
  if (!any)
    return;
  Role roles[IR_MAX_MESH_AXES][MAX_ROLES];
  int nr[IR_MAX_MESH_AXES] = {0, 0};
  const Type *y = &i->type;
  for (int a = 0; a < mesh->naxis; a++) {
    int kk = axis_size(m, a);
    add_role(y, kk, roles[a], &nr[a], (Role){-1, false, NULL});
    for (int k = 0; k < i->nin; k++) {
      const Type *t = &i->in[k]->type;
      if (!cur[k])
        continue;
      if (ir_partial_axes(m, cur[k], t->rank) & (1u << a))
        add_role(y, kk, roles[a], &nr[a], (Role){-1, true, NULL});
      int j = dim_over(cur[k], t->rank, a);
      if (j < 0)
        continue;
      int64_t b[SHARD_MAX_AXIS], out[SHARD_MAX_AXIS];
      blocks_of(m, cur[k], t, j, b);
      int d = fwd_dim(i, k, j, b, kk, out);
      if (d == RED)
        add_role(y, kk, roles[a], &nr[a], (Role){-1, true, NULL});
      else if (d >= 0)
        add_role(y, kk, roles[a], &nr[a],
                 (Role){d, false, ratio_of(m, y->dim[d], out, kk, cur[k]->ratio[j])});
    }
  }
  Cand best = {0}, next = {0}, cand;
  bool have = false, have_next = false;
  int n1 = mesh->naxis > 1 ? nr[1] : 1;
  for (int p = 0; p < nr[0]; p++)
    for (int q = 0; q < n1; q++) {
      Sharding r;
      clear(&r, 0);
      const Role *ro[2] = {&roles[0][p], mesh->naxis > 1 ? &roles[1][q] : NULL};
      unsigned P = 0;
      bool ok = true;
      for (int a = 0; a < mesh->naxis; a++) {
        if (ro[a]->partial)
          P |= 1u << a;
        if (ro[a]->dim >= 0) {
          ok &= r.axis[ro[a]->dim] < 0;
          split(&r, ro[a]->dim, a, ro[a]->ratio);
        }
      }
      set_partial(&r, P);
      if (!ok || !evaluate(c, i, &r, cur, reduced, &cand))
        continue;
      if (!have || better(&cand, &best)) {
        if (have)
          next = best, have_next = true;
        best = cand;
        have = true;
      } else if (!have_next || better(&cand, &next)) {
        next = cand;
        have_next = true;
      }
    }
  if (!have)
    return;
  set_shard(c, i, &best.r);
  /* plan auto chose its conflicts by cost; the notes are for the user's. */
  if (best.conflict && !c->planned)
    note_choice(c, i, &best, have_next ? &next : NULL);
}

/* Does user u need x, its operand k, without x's partial axes? */
static bool needs_sum(Ctx *c, const Inst *u, int k) {
  const Inst *x = u->in[k];
  unsigned p = ir_partial_axes(c->m, x->shard, x->type.rank);
  if (u->op == OP_store || u->op == OP_output)
    return true;
  const Sharding *cur[16];
  Sharding req[16];
  for (int j = 0; j < u->nin; j++)
    cur[j] = u->in[j]->shard;
  return shard_form(c->m, u, u->shard, cur, req) &&
         !(ir_partial_axes(c->m, &req[k], x->type.rank) & p);
}

/* Once every value has a sharding: an op that keeps a partial operand partial
 * is chosen again when another user of that operand reduces it anyway, the
 * reduction then being shared (spmd makes each reshard once). */
static void share_reductions(Ctx *c, Func *f) {
  ir_renumber(f);
  Uses u = ir_uses(c->m->arena, f);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (!ir_partial_axes(c->m, i->shard, i->type.rank) || i->op == OP_load)
      continue;
    bool reduced[16] = {0}, any = false;
    for (int j = 0; j < i->nin; j++) {
      const Inst *x = i->in[j];
      if (!ir_partial_axes(c->m, x->shard, x->type.rank))
        continue;
      for (int q = u.off[x->id]; q < u.off[x->id + 1] && !reduced[j]; q++)
        for (int kk = 0; kk < u.u[q]->nin && !reduced[j]; kk++)
          reduced[j] = u.u[q] != i && u.u[q]->in[kk] == x && needs_sum(c, u.u[q], kk);
      any |= reduced[j];
    }
    if (any)
      choose(c, i, reduced);
  }
}

static void whole(Ctx *c, Inst *i) {
  Sharding s;
  clear(&s, 0);
  set_shard(c, i, &s);
}

static void propagate(Ctx *c, Func *f) {
  c->f = f;
  ir_renumber(f);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_load && i->shard && !c->gs[gindex(c, i)])
      set_global(c, gindex(c, i), i->shard);
  }
  do {
    c->changed = false;
    for (int k = 0; k < f->inst.n; k++) {
      Inst *i = f->inst.a[k];
      if (!i->shard && i->op == OP_load && c->gs[gindex(c, i)])
        set_shard(c, i, c->gs[gindex(c, i)]);
      else if (!i->shard && (i->op == OP_const || i->op == OP_lr))
        whole(c, i);
      else if (!i->shard && i->type.dtype != DT_VOID && i->op != OP_load)
        choose(c, i, (bool[16]){0});
      fill(c, i);
    }
    for (int k = f->inst.n - 1; k >= 0; k--)
      fill(c, f->inst.a[k]);
  } while (c->changed);
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_load && !c->gs[gindex(c, i)]) {
      Sharding s;
      clear(&s, 0);
      set_global(c, gindex(c, i), &s);
    }
    if (i->op == OP_load && !i->shard)
      set_shard(c, i, c->gs[gindex(c, i)]);
    else if (!i->shard && i->type.dtype != DT_VOID)
      whole(c, i);
  }
  share_reductions(c, f);
}

/* A split must leave every device at least one element. */
static void check_blocks(Ctx *c, const Sharding *s, const Type *t, Loc loc, const char *what) {
  const Mesh *mesh = &c->m->mesh.a[0];
  for (int d = 0; s && d < t->rank; d++) {
    int a = s->axis[d];
    if (a < 0)
      continue;
    int64_t b[SHARD_MAX_AXIS];
    ir_blocks(t->dim[d], s->ratio[d], mesh->axis_size[a], b);
    for (int k = 0; k < mesh->axis_size[a]; k++)
      if (b[k] < 1) {
        diag_error(c->d, loc,
                   "splitting dimension %d of %s (%lld) over mesh axis '%s' leaves its device "
                   "%d no elements", d, what, (long long)t->dim[d], mesh->axis_name[a], k);
        return;
      }
  }
}

/* The param a state global belongs to: "<param>__m" and "<param>__v". */
static int owner_of(const Module *m, int g) {
  const char *name = m->global.a[g].name;
  size_t n = strlen(name);
  if (m->global.a[g].kind != G_STATE || n < 4 || name[n - 3] != '_' || name[n - 2] != '_')
    return g;
  char *p = arena_strndup(m->arena, name, n - 3);
  const Global *pg = ir_find_global(m, p);
  return pg && pg->kind == G_PARAM ? (int)(pg - m->global.a) : g;
}

bool pass_sharding(Module *m, Diag *d, PassRun *run) {
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
  Ctx c = {.m = m, .d = d, .planned = m->plan == PLAN_AUTO && run && run->plan};
  c.gs = arena_alloc(m->arena, sizeof *c.gs * (size_t)(ng + 1));
  c.owner = arena_alloc(m->arena, sizeof *c.owner * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    c.owner[g] = owner_of(m, g);
    check_blocks(&c, gl->shard, &gl->type, gl->loc, arena_printf(m->arena, "'%s'", gl->name));
  }
  if (d->nerr > nerr)
    return false;
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    if (gl->shard && !c.gs[c.owner[g]]) {
      c.gs[c.owner[g]] = gl->shard;
    } else if (!gl->shard && gl->kind == G_INPUT) {
      Sharding s;
      clear(&s, 0);
      set_global(&c, g, &s);
    }
  }
  const char *fns[] = {"train_step", "forward"};
  for (int k = 0; k < COUNTOF(fns); k++) {
    Func *f = ir_find_func(m, fns[k]);
    if (f && f->device < 0)
      propagate(&c, f);
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
  for (int k = 0; k < COUNTOF(fns); k++) {
    Func *f = ir_find_func(m, fns[k]);
    for (int j = 0; f && f->device < 0 && j < f->inst.n; j++) {
      Inst *i = f->inst.a[j];
      if (i->shard)
        check_blocks(&c, i->shard, &i->type, i->loc,
                     arena_printf(m->arena, "the value of '%s'", ir_ops[i->op].name));
    }
  }
  return d->nerr == nerr;
}
