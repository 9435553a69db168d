/* exchange.c: DeMo's exchange on a mesh (passes/optimizer.c's demo). Each
 * rank's momentum takes its own gradient, and what the ranks share is the
 * compressed momentum: an all_gather of every rank's packed coefficients.
 *
 * Requires: per-device functions (passes/spmd.c), where the sharding pass
 * has all-reduced each gradient that demo_compress and demo_residual read
 * (their forms take whole operands). Guarantees: on every device, those two
 * read the all_reduce's operand instead, the rank's own partial gradient
 * (the all_reduce goes when nothing else reads it), and demo_sign reads an
 * all_gather over the same axis of demo_compress's [1, 2P] row: [R, 2P],
 * rank r's row r, so every rank averages the same rows in the same order
 * and the params stay equal on all. A gradient never reduced (every rank
 * computed all of it) is left alone: the ranks agree without an exchange.
 * Each gathered row's demo_compress (and the loads it reads) moves up to
 * follow the first, so every row exists before the first gather's user and
 * passes/coalesce.c gathers them all as one.
 * A param split over the mesh is gathered whole for its update (every rank
 * computes all of it: correct, not cheaper). A gradient reduced over two
 * axes, reduced before it is gathered or folded in deterministic mode's
 * pieces is an error at the param. Changes nothing without demo_compress. */
#include <string.h>

#include "passes.h"

typedef struct Ex {
  Module *m;
  Diag *d;
  Func *f;
  int axis;  /* the all_reduce's axis of the update in hand; -1: none */
  bool *cut; /* by id: an all_reduce a DeMo kernel no longer reads */
} Ex;

/* Whether a collective behind v (through collectives only) is an all_reduce
 * or a fold_all. */
static bool reduced_behind(const Inst *v) {
  for (; ir_ops[v->op].kind == K_COMM; v = v->in[0])
    if (v->op == OP_all_reduce || v->op == OP_fold_all)
      return true;
  return false;
}

/* The rank's own gradient behind operand 1 of x (an all_reduce's operand),
 * recording the axis; false after an error. */
static bool local_grad(Ex *e, Inst *x) {
  Inst *g = x->in[1];
  if (g->op == OP_fold_all) {
    diag_error(e->d, x->loc,
               "demo does not run in deterministic mode: it would fold this gradient over the "
               "mesh, where each device's momentum takes the device's own");
    return false;
  }
  if (g->op != OP_all_reduce) {
    if (!reduced_behind(g))
      return true;
    diag_error(e->d, x->loc,
               "demo cannot exchange this gradient: it is summed over the mesh before it is "
               "gathered (a param split over one mesh axis, its gradient summed over another)");
    return false;
  }
  int a = (int)ir_get_int(g, "axis", 0);
  if (reduced_behind(g->in[0]) || (e->axis >= 0 && e->axis != a)) {
    diag_error(e->d, x->loc,
               "demo exchanges over one mesh axis; this gradient is reduced "
               "over two");
    return false;
  }
  e->axis = a;
  e->cut[g->id] = true;
  x->in[1] = g->in[0];
  return true;
}

/* An all_gather of packed row c over axis a: [R, 2P]. */
static Inst *gather(Ex *e, Inst *c, int a) {
  int n = e->m->mesh.a[0].axis_size[a];
  int64_t *sizes = arena_alloc(e->m->arena, sizeof *sizes * (size_t)n);
  for (int k = 0; k < n; k++)
    sizes[k] = 1;
  Inst *x = ir_new(e->f, OP_all_gather, c->loc, 1, &c);
  ir_set_int(x, "axis", a);
  ir_set_int(x, "dim", 0);
  ir_set_ints(x, "sizes", sizes, n);
  ir_finish(x);
  x->shard = c->shard;
  return x;
}

/* A gradient's all_reduce the DeMo kernels no longer read, nor anything else. */
static bool dead_reduce(const Ex *e, const Inst *x, const Uses *u) {
  return e->cut[x->id] && u->off[x->id] == u->off[x->id + 1];
}

/* Whether something in f's [from, to) stores global name. */
static bool stored_between(const Func *f, const char *name, int from, int to) {
  for (int j = from; j < to; j++)
    if (f->inst.a[j]->op == OP_store && !strcmp(ir_get_str(f->inst.a[j], "global", ""), name))
      return true;
  return false;
}

/* By id: the demo_compress of a gathered row (before[k], the gather of
 * demo_sign k's row), and the loads it reads, that move up to follow the
 * first such demo_compress (*first, its id): every row is then computed
 * before the first gather's user, so passes/coalesce.c gathers all rows of
 * an axis as one. One stays where its other operands come after *first. */
static bool *hoisted(Ex *e, Inst *const *before, int n, int *first) {
  Func *f = e->f;
  bool *up = arena_alloc(e->m->arena, sizeof *up * (size_t)(n + 1));
  for (int k = 0; k < n; k++) {
    if (!before[k])
      continue;
    Inst *c = before[k]->in[0];
    if (*first == n) {
      *first = c->id;
      continue;
    }
    bool ok = c->id > *first;
    for (int q = 0; ok && q < c->nin; q++) {
      const Inst *v = c->in[q];
      ok = v->id < *first ||
           (v->op == OP_load && !stored_between(f, ir_get_str(v, "global", ""), *first, c->id));
    }
    if (!ok)
      continue;
    up[c->id] = true;
    for (int q = 0; q < c->nin; q++)
      up[c->in[q]->id] |= c->in[q]->id > *first;
  }
  return up;
}

static bool exchange_func(Ex *e) {
  Func *f = e->f;
  int n = f->inst.n;
  Inst **before = arena_alloc(e->m->arena, sizeof *before * (size_t)(n ? n : 1));
  e->cut = arena_alloc(e->m->arena, sizeof *e->cut * (size_t)(n ? n : 1));
  bool any = false;
  for (int k = 0; k < n; k++) {
    Inst *x = f->inst.a[k];
    if (x->op != OP_demo_sign || x->in[0]->op != OP_demo_compress)
      continue;
    Inst *c = x->in[0], *r = NULL;
    for (int j = c->id + 1; j < n && !r; j++)
      if (f->inst.a[j]->op == OP_demo_residual && f->inst.a[j]->in[3] == c)
        r = f->inst.a[j];
    e->axis = -1;
    Inst *g = c->in[1];
    if (!local_grad(e, c))
      return false;
    if (r && r->in[1] == g && !local_grad(e, r))
      return false;
    if (e->axis < 0)
      continue;
    before[k] = gather(e, c, e->axis);
    x->in[0] = before[k];
    any = true;
  }
  if (!any)
    return true;
  ir_renumber(f);
  Uses u = ir_uses(e->m->arena, f);
  int first = n;
  bool *up = hoisted(e, before, n, &first);
  int w = 0;
  Inst **order = arena_alloc(e->m->arena, sizeof *order * (size_t)f->inst.n);
  for (int k = 0; k < n; k++) {
    if (before[k])
      order[w++] = before[k];
    if (!dead_reduce(e, f->inst.a[k], &u) && !up[k])
      order[w++] = f->inst.a[k];
    for (int j = k + 1; k == first && j < n; j++)
      if (up[j])
        order[w++] = f->inst.a[j];
  }
  memcpy(f->inst.a, order, sizeof *order * (size_t)w);
  f->inst.n = w;
  ir_renumber(f);
  return true;
}

bool pass_exchange(Module *m, Diag *d, PassRun *run) {
  (void)run;
  Ex e = {m, d, NULL, -1, NULL};
  for (int k = 0; k < m->func.n; k++) {
    e.f = m->func.a[k];
    if (e.f->device >= 0 && !exchange_func(&e))
      return false;
  }
  return true;
}
