/* zero.c: the optimizer state split over the data-parallel axis (`shard_state
 * = dp`, ZeRO stages 1 and 2), as shardings the sharding pass starts from.
 *
 * Each dense param's state (<p>__m, <p>__v, <p>__sum, <p>__acc) is split
 * along the first dimension the param keeps whole whose blocks are none
 * empty, over the axis and by the ratios that split the batch. The update
 * is elementwise, so the sharding pass then computes it on the state's
 * blocks: the gradient, a partial sum over the axis, is reduce-scattered
 * into them (never all-reduced), the param's block is sliced (free), and
 * the new param is all-gathered where it is stored whole. Each device
 * updates and keeps only its share. A param already split over the axis,
 * a scalar, or one with no dimension to give every device a block, keeps
 * its state as the param's (already 1/N, or replicated).
 *
 * Called by pass_sharding before it propagates. Errors, at the option:
 * a model that does not train, the demo optimizer (each device keeps its own
 * momentum), an optimizer without state, an axis splitting no input's
 * batch (under plan auto, a plan without one leaves every state as its
 * param's); at the table: a sparse table (its state moves by touched
 * rows). */
#include <string.h>

#include "passes.h"

/* The ratios of the batch's split over axis a (NULL: even) into *r; false
 * when no input's first dimension is split over a. */
static bool batch_ratio(const Module *m, int a, double **r) {
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind == G_INPUT && gl->shard && gl->type.rank > 0 && gl->shard->axis[0] == a) {
      *r = gl->shard->ratio[0];
      return true;
    }
  }
  return false;
}

/* Whether the module allows its state split: the located errors. */
static bool zero_applies(const Module *m, Diag *d, const int *owner) {
  const char *axis = m->mesh.a[0].axis_name[m->state_axis];
  if (!ir_find_func(m, "train_step")) {
    diag_error(d, m->state_loc,
               "shard_state splits the optimizer state of training, but "
               "model '%s' has no minimize",
               m->name);
    return false;
  }
  if (m->train.opt == OPT_DEMO) {
    diag_error(d, m->state_loc,
               "shard_state does not apply to demo: each device keeps its own "
               "momentum of its own gradient, and exchanges compressed momenta, not gradients");
    return false;
  }
  bool ok = true, any = false;
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind != G_STATE || owner[g] == g)
      continue;
    const Global *p = &m->global.a[owner[g]];
    any = true;
    if (p->sparse && ok) {
      diag_error(d, p->loc,
                 "shard_state does not apply to sparse table '%s': its state moves "
                 "by the rows a batch touches; train it without shard_state",
                 p->name);
      ok = false;
    }
  }
  if (ok && !any) {
    diag_error(d, m->state_loc,
               "shard_state splits the optimizer state, but sgd without "
               "momentum keeps none");
    return false;
  }
  double *r;
  if (ok && m->plan != PLAN_AUTO && !batch_ratio(m, m->state_axis, &r)) {
    diag_error(d, m->state_loc,
               "shard_state splits the optimizer state over the data-parallel "
               "axis, but no input's batch (its first dimension) is split over '%s'",
               axis);
    return false;
  }
  return ok;
}

/* The dimension of param p (sharding s) its state splits over axis a by
 * ratios r: the first whole one giving every device a block; -1: none. */
static int state_dim(const Module *m, const Global *p, const Sharding *s, int a, double *r) {
  int n = m->mesh.a[0].axis_size[a];
  int64_t b[SHARD_MAX_AXIS];
  for (int d = 0; d < p->type.rank; d++)
    if (s->axis[d] == a)
      return -1;
  for (int d = 0; d < p->type.rank; d++) {
    if (s->axis[d] >= 0)
      continue;
    ir_dim_blocks(m, p->type.dim[d], r, n, b);
    int c = 0;
    while (c < n && b[c] > 0)
      c++;
    if (c == n)
      return d;
  }
  return -1;
}

/* A whole sharding on m's mesh. */
static Sharding *whole(Module *m) {
  Sharding *s = arena_alloc(m->arena, sizeof *s);
  ir_shard_whole(s);
  return s;
}

/* The form open param p takes before propagation: whole, but split along its
 * layers as the other stacked params of its loop are, where they are
 * pipeline stages (the sharding pass splits a loop's stacked operands alike). */
static Sharding *open_form(Module *m, const Global *p) {
  Sharding *s = whole(m);
  const Func *f = ir_find_func(m, "train_step");
  for (int k = 0; f && k < f->inst.n; k++) {
    const Inst *r = f->inst.a[k];
    bool mine = false;
    const Sharding *stage = NULL;
    for (int j = 0; r->op == OP_repeat && j < r->nin; j++) {
      const Global *q = ir_repeat_operand_kind(r, j) == 2 && r->in[j]->op == OP_load
                            ? ir_global_of(r->in[j]) : NULL;
      mine |= q == p;
      if (q && q->shard && q->shard->axis[0] >= 0)
        stage = q->shard;
    }
    if (mine && stage) {
      s->axis[0] = stage->axis[0];
      s->ratio[0] = stage->ratio[0];
      return s;
    }
  }
  return s;
}

bool zero_seed(Module *m, Diag *d, int *owner) {
  if (!m->state_sharded)
    return true;
  if (!zero_applies(m, d, owner))
    return false;
  int a = m->state_axis;
  double *r = NULL;
  if (!batch_ratio(m, a, &r))   /* plan auto chose no data parallelism over a */
    return true;
  for (int g = 0; g < m->global.n; g++) {
    Global *gl = &m->global.a[g];
    if (gl->kind != G_STATE || owner[g] == g)
      continue;
    Global *p = &m->global.a[owner[g]];
    if (!p->shard) /* a param left open is whole, or split as its loop's stages */
      p->shard = open_form(m, p);
    int dim = state_dim(m, p, p->shard, a, r);
    if (dim < 0)
      continue;
    Sharding *s = arena_alloc(m->arena, sizeof *s);
    *s = *p->shard;
    s->axis[dim] = (int8_t)a;
    s->ratio[dim] = r;
    gl->shard = s;
    owner[g] = g;
  }
  return true;
}

/* Whether s splits nothing and sums nothing, for a value of rank r. */
static bool is_whole(const Module *m, const Sharding *s, int r) {
  for (int d = 0; d < r; d++)
    if (s->axis[d] >= 0)
      return false;
  return !ir_partial_axes(m, s, r);
}

/* Whether `want` splits, for a value of rank r, every dim s splits as s
 * does and some dim s keeps whole too, neither summing anything. */
static bool splits_more(const Module *m, const Sharding *s, const Sharding *want, int r) {
  bool more = false;
  if (ir_partial_axes(m, s, r) || ir_partial_axes(m, want, r))
    return false;
  for (int d = 0; d < r; d++) {
    if (s->axis[d] >= 0 && want->axis[d] != s->axis[d])
      return false;
    more |= s->axis[d] < 0 && want->axis[d] >= 0;
  }
  return more;
}

/* The sharding every user of x (elementwise, all decided) needs x in, when
 * they agree on one with a split, into *want; false otherwise. */
static bool users_split(const Module *m, const Inst *x, const Uses *u, Sharding *want) {
  const Sharding *cur[SHARD_MAX_IN];
  Sharding req[SHARD_MAX_IN];
  bool any = false;
  for (int q = u->off[x->id]; q < u->off[x->id + 1]; q++) {
    const Inst *y = u->u[q];
    if (ir_ops[y->op].kind != K_ELEM || !y->shard || y->nin > SHARD_MAX_IN)
      return false;
    for (int k = 0; k < y->nin; k++)
      cur[k] = y->in[k]->shard;
    if (!shard_form(m, y, y->shard, cur, req))
      return false;
    for (int k = 0; k < y->nin; k++) {
      if (y->in[k] != x)
        continue;
      if (is_whole(m, &req[k], x->type.rank) || (any && !shard_same(m, &x->type, want, &req[k])))
        return false;
      *want = req[k];
      any = true;
    }
  }
  return any;
}

void zero_sink(Module *m, Func *f) {
  if (!m->state_sharded)
    return;
  bool changed = true;
  while (changed) {
    changed = false;
    ir_renumber(f);
    Uses u = ir_uses(m->arena, f);
    for (int k = f->inst.n - 1; k >= 0; k--) {
      Inst *x = f->inst.a[k];
      const Sharding *cur[SHARD_MAX_IN];
      Sharding want, req[SHARD_MAX_IN];
      if (ir_ops[x->op].kind != K_ELEM || !x->shard || x->nin > SHARD_MAX_IN ||
          !users_split(m, x, &u, &want) || !splits_more(m, x->shard, &want, x->type.rank))
        continue;
      for (int j = 0; j < x->nin; j++)
        cur[j] = x->in[j]->shard;
      if (!shard_form(m, x, &want, cur, req))
        continue;
      Sharding *s = arena_alloc(m->arena, sizeof *s);
      *s = want;
      x->shard = s;
      changed = true;
    }
  }
}
