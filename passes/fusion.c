/* fusion.c: groups chains of elementwise ops into fusion groups, each one loop
 * in codegen, and reschedules every function around them.
 *
 * Requires: verified IR. Guarantees: every elementwise op has fuse > 0; the
 * elementwise members of a group share one result shape, and every operand
 * from outside the group broadcasts to it and is computed before the group; a
 * group's members (under -fepilogue a matmul whose strips it reads as they
 * are written, first; its ops, the scalar consts and learning rates only it
 * uses, and the stores it writes straight into the state block) are
 * contiguous; a
 * group value used only inside its group needs no memory; outputs keep their
 * order; a store moves after the last read of its global's old value when no
 * later load of that global needs the new one; a group that writes the state
 * block runs as early as its inputs and those reads allow. In deterministic
 * mode it first makes the fold of a product's pieces one product that sums k
 * in the same blocks in the same order (fold_product). A sum or mean of a
 * product only it reads becomes sum_mul or mean_mul of the factors. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* The most elementwise ops in one group (one loop in codegen). */
#define FUSE_MAX_OPS 64

typedef struct Fuser {
  Func *f;
  Arena *tmp;          /* the function's work, freed after it */
  Uses use;
  int *grp;            /* by inst id: group (resolve with find), 0 none */
  int *parent;         /* by group: merged into */
  bool *sealed;        /* by group: read from outside, takes no more members */
  const Type **shape;  /* by group */
  int *last;           /* by group: id of its last elementwise member */
  int *size;           /* by group: its elementwise members */
  int *slot;           /* by inst id: runs in the place of the inst of this id */
  char *tier;          /* by inst id: order in that place (see reschedule) */
  bool *movable;       /* by inst id: a store that may run later than it stands */
  const Global **gl;   /* by inst id: the global of a load or store, else NULL */
  int ngrp;
} Fuser;

static int find(Fuser *fu, int g) {
  while (fu->parent[g] != g)
    g = fu->parent[g] = fu->parent[fu->parent[g]];
  return g;
}

static int group_of(Fuser *fu, const Inst *i) {
  return fu->grp[i->id] ? find(fu, fu->grp[i->id]) : 0;
}

static bool same_dims(const Type *a, const Type *b) {
  if (a->rank != b->rank)
    return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dim[d] != b->dim[d])
      return false;
  return true;
}

static bool is_elem(const Inst *i) { return ir_ops[i->op].kind == K_ELEM; }

/* A store may be delayed unless it is one of several to its global or a later
 * load needs the value it writes. */
static bool store_movable(Fuser *fu, const Inst *s) {
  const Func *f = fu->f;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *j = f->inst.a[k];
    if (j == s || fu->gl[k] != fu->gl[s->id])
      continue;
    if (j->op == OP_store || j->id > s->id)
      return false;
  }
  return true;
}

/* An elementwise op joins the open groups of its operands that have its shape
 * and leave the joined group within FUSE_MAX_OPS members; a longer chain
 * goes on in a new group, so one loop's body (and the time LLVM takes over
 * it) stays bounded whatever the program's length. */
static void join(Fuser *fu, Inst *x) {
  int g = 0;
  for (int k = 0; k < x->nin; k++) {
    int h = group_of(fu, x->in[k]);
    if (!h || h == g || fu->sealed[h] || !same_dims(fu->shape[h], &x->type))
      continue;
    if (fu->size[h] + (g ? fu->size[g] : 0) >= FUSE_MAX_OPS)
      continue;
    if (g) {
      fu->parent[h] = g;
      fu->size[g] += fu->size[h];
    } else {
      g = h;
    }
  }
  if (!g) {
    g = ++fu->ngrp;
    fu->parent[g] = g;
    fu->shape[g] = &x->type;
  }
  fu->grp[x->id] = g;
  fu->last[g] = x->id;
  fu->size[g]++;
}

/* Pass 1: in order, an elementwise op joins (and merges) the open groups of
 * its operands that have its shape; any other reader seals the group it
 * reads, except outputs and movable stores, which can wait for the loop. */
static void form_groups(Fuser *fu) {
  Func *f = fu->f;
  for (int i = 0; i < f->inst.n; i++) {
    Inst *x = f->inst.a[i];
    if (is_elem(x))
      join(fu, x);
    int g = group_of(fu, x);
    bool waits = x->op == OP_output || (x->op == OP_store && fu->movable[i]);
    for (int k = 0; k < x->nin && !waits; k++) {
      int h = group_of(fu, x->in[k]);
      if (h && h != g)
        fu->sealed[h] = true;
    }
  }
  for (int i = 0; i < f->inst.n; i++) {
    Inst *x = f->inst.a[i];
    if (x->op != OP_const && x->op != OP_lr)
      continue;
    int g = -1;
    for (int k = fu->use.off[i]; k < fu->use.off[i + 1]; k++) {
      Inst *u = fu->use.u[k];
      int h = is_elem(u) ? group_of(fu, u) : 0;
      g = g == -1 || g == h ? h : 0;
    }
    if (g > 0)
      fu->grp[i] = g;
  }
  for (int i = 0; i < f->inst.n; i++) {
    int g = group_of(fu, f->inst.a[i]);
    fu->slot[i] = g ? fu->last[g] : i;
    fu->tier[i] = 1;
  }
}

static int max(int a, int b) { return a > b ? a : b; }

/* Readers of the value a load produced (through reshapes, which alias it):
 * the latest slot among those outside group g, and whether those inside g
 * all read it element for element. */
static void readers(Fuser *fu, const Inst *v, const Inst *store, int g, int *late, bool *same) {
  for (int k = fu->use.off[v->id]; k < fu->use.off[v->id + 1]; k++) {
    const Inst *u = fu->use.u[k];
    if (u == store)
      continue;
    if (u->op == OP_reshape)
      readers(fu, u, store, g, late, same);
    else if (g && group_of(fu, u) == g && is_elem(u))
      *same &= same_dims(&v->type, fu->shape[g]);
    else
      *late = max(*late, fu->slot[u->id]);
  }
}

/* Pass 2: outputs wait for their loop, in order; a store joins its value's
 * group (written straight into the state block by the loop) when the old
 * value is read only before the loop or element for element inside it, and
 * otherwise waits until the old value is read for the last time. */
static void place_sinks(Fuser *fu) {
  Func *f = fu->f;
  int prev = -1;
  for (int i = 0; i < f->inst.n; i++) {
    Inst *x = f->inst.a[i];
    if (x->op != OP_output)
      continue;
    prev = fu->slot[i] = max(max(i, prev), fu->slot[x->in[0]->id]);
    fu->tier[i] = fu->slot[i] == i ? 1 : 3;
  }
  for (int i = 0; i < f->inst.n; i++) {
    Inst *s = f->inst.a[i];
    if (s->op != OP_store || !fu->movable[i])
      continue;
    const Inst *v = s->in[0];
    int g = is_elem(v) ? group_of(fu, v) : 0;
    int late = -1;
    bool same = true;
    for (int k = 0; k < i; k++) {
      const Inst *l = f->inst.a[k];
      if (l->op == OP_load && fu->gl[k] == fu->gl[i])
        readers(fu, l, s, g, &late, &same);
    }
    if (g && same && late < fu->last[g]) {
      fu->grp[i] = g;
      fu->slot[i] = fu->last[g];
    } else {
      fu->slot[i] = max(max(i, fu->slot[v->id]), late);
      fu->tier[i] = fu->slot[i] == i ? 1 : 3;
    }
  }
}

/* A load that only group g reads, of a global no one but g stores. */
static bool moves_with(Fuser *fu, const Inst *l, int g) {
  if (l->op != OP_load)
    return false;
  for (int k = fu->use.off[l->id]; k < fu->use.off[l->id + 1]; k++)
    if (group_of(fu, fu->use.u[k]) != g)
      return false;
  const Func *f = fu->f;
  for (int j = 0; j < f->inst.n; j++) {
    const Inst *x = f->inst.a[j];
    if (x->op == OP_store && fu->gl[j] == fu->gl[l->id] && group_of(fu, x) != g)
      return false;
  }
  return true;
}

/* Whether a sink (which runs after the insts of its slot) reads the old
 * value of a global through v at slot `at`. */
static bool sink_reads_at(Fuser *fu, const Inst *v, const Inst *store, int g, int at) {
  for (int k = fu->use.off[v->id]; k < fu->use.off[v->id + 1]; k++) {
    const Inst *u = fu->use.u[k];
    if (u == store || (g && group_of(fu, u) == g))
      continue;
    if (u->op == OP_reshape ? sink_reads_at(fu, u, store, g, at)
                            : fu->slot[u->id] == at && fu->tier[u->id] == 3)
      return true;
  }
  return false;
}

/* Where group g can run at the earliest: after its operands from outside
 * (but for the loads that move with it, and consts and learning rates) and
 * after every read of the old values it overwrites; -1 when that is not
 * before its place. */
static int earliest(Fuser *fu, int g) {
  Func *f = fu->f;
  int early = 0;
  for (int j = 0; j < f->inst.n; j++) {
    Inst *x = f->inst.a[j];
    if (group_of(fu, x) != g)
      continue;
    for (int k = 0; k < x->nin; k++) {
      const Inst *o = x->in[k];
      if (group_of(fu, o) != g && o->op != OP_const && o->op != OP_lr && !moves_with(fu, o, g))
        early = max(early, fu->slot[o->id]);
    }
    if (x->op != OP_store)
      continue;
    for (int k = 0; k < j; k++) {
      const Inst *l = f->inst.a[k];
      if (l->op != OP_load || fu->gl[k] != fu->gl[j])
        continue;
      bool same = true;
      readers(fu, l, x, g, &early, &same);
    }
  }
  for (int j = 0; j < f->inst.n; j++) {
    Inst *x = f->inst.a[j];
    if (x->op != OP_store || group_of(fu, x) != g)
      continue;
    for (int k = 0; k < j; k++) {
      const Inst *l = f->inst.a[k];
      if (l->op == OP_load && fu->gl[k] == fu->gl[j] &&
          sink_reads_at(fu, l, x, g, early))
        return -1;
    }
  }
  return early < fu->last[g] ? early : -1;
}

/* Pass 3: a group that writes the state block (an optimizer update) moves up
 * to its earliest place, so the gradient it reads dies early; the loads only
 * it reads come along, just before it, and consts and learning rates move up
 * to their first reader. */
static void hoist_updates(Fuser *fu) {
  Func *f = fu->f;
  bool *done = arena_alloc(fu->tmp, sizeof(bool) * (size_t)(fu->ngrp + 1));
  for (int i = 0; i < f->inst.n; i++) {
    int g = f->inst.a[i]->op == OP_store ? group_of(fu, f->inst.a[i]) : 0;
    if (!g || done[g])
      continue;
    done[g] = true;
    int at = earliest(fu, g);
    if (at < 0)
      continue;
    for (int j = 0; j < f->inst.n; j++) {
      Inst *x = f->inst.a[j];
      if (group_of(fu, x) == g) {
        fu->slot[j] = at;
        fu->tier[j] = 2;
      } else if (moves_with(fu, x, g)) {
        fu->slot[j] = at;
        fu->tier[j] = 0;
      }
    }
  }
  for (int i = 0; i < f->inst.n; i++) {
    const Inst *x = f->inst.a[i];
    if ((x->op != OP_const && x->op != OP_lr) || group_of(fu, x))
      continue;
    for (int k = fu->use.off[i]; k < fu->use.off[i + 1]; k++) {
      int s = fu->slot[fu->use.u[k]->id];
      if (s < fu->slot[i]) {
        fu->slot[i] = s;
        fu->tier[i] = 0;
      }
    }
  }
}

typedef struct Key { int slot, tier, group, id; } Key;

static int by_key(const void *x, const void *y) {
  const Key *a = x, *b = y;
  if (a->slot != b->slot)
    return a->slot - b->slot;
  if (a->tier != b->tier)
    return a->tier - b->tier;
  return a->group != b->group ? a->group - b->group : a->id - b->id;
}

/* Pass 4: the new order. In each place: tier 0, what moved up to just
 * before it (loads, consts, learning rates); tier 1, its own inst, or its
 * group; tier 2, the groups that moved up to it, one after the other; tier 3,
 * the sinks that wait for it. */
static void reschedule(Fuser *fu) {
  Func *f = fu->f;
  Arena *a = fu->tmp;
  int n = f->inst.n;
  Key *key = arena_alloc(a, sizeof(Key) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    int g = group_of(fu, f->inst.a[i]);
    key[i] = (Key){fu->slot[i], fu->tier[i], g ? fu->last[g] : 0, i};
  }
  qsort(key, (size_t)n, sizeof *key, by_key);
  Inst **old = arena_alloc(a, sizeof(Inst *) * (size_t)(n ? n : 1));
  memcpy(old, f->inst.a, sizeof(Inst *) * (size_t)n);
  int *newid = arena_alloc(a, sizeof(int) * (size_t)(fu->ngrp + 1));
  int ngrp = 0;
  for (int k = 0; k < n; k++) {
    Inst *x = old[key[k].id];
    int g = group_of(fu, x);
    if (g && !newid[g])
      newid[g] = ++ngrp;
    x->fuse = g ? newid[g] : 0;
    f->inst.a[k] = x;
  }
  ir_renumber(f);
}

/* ---- folds of products (deterministic mode) ---- */

/* The matrix x whose k (x's dim kdim, of g blocks of kp) the pieces operand
 * v lays out as [g, kp, other] (kdim 0: reshape(x, [g, kp, other])) or as
 * [g, other, kp] (kdim 1: transpose(reshape(x, [other, g, kp]), [1, 0, 2])),
 * as determinize's cut_k builds them; NULL for any other v. */
static Inst *pieces_of(Inst *v, int kdim, int64_t g, int64_t kp) {
  if (kdim == 1) {
    int n;
    const int64_t *perm = ir_get_ints(v, "perm", &n);
    if (v->op != OP_transpose || !perm || n != 3 || perm[0] != 1 || perm[1] != 0 || perm[2] != 2)
      return NULL;
    v = v->in[0];
  }
  if (v->op != OP_reshape)
    return NULL;
  Inst *x = v->in[0];
  const Type *t = &x->type;
  if (t->rank != 2 || t->dim[kdim] != g * kp || t->dim[!kdim] != v->type.dim[kdim ? 0 : 2])
    return NULL;
  return x;
}

/* The one product that sums k in order in blocks as the fold of fold's
 * pieces does, or NULL: the fold of a matmul run in pieces over the rows of
 * both operands (k), or of cut_k's batch of products of k's pieces, whose
 * result nothing else reads. The generated GEMM then writes each block of
 * k to C or adds it, in order, as the fold adds the pieces (a piece is one
 * block of the GEMM in this mode, at most IR_DET_KBLOCK long): the same
 * numbers in the same order, without the pieces' results, their fold or
 * cut_k's copies of the operands. */
static Inst *fold_product(Func *f, const Inst *fold, const Uses *u) {
  Inst *x = fold->in[0];
  if (x->op != OP_matmul || u->off[x->id + 1] - u->off[x->id] != 1)
    return NULL;
  bool ta = ir_get_int(x, "ta", 0), tb = ir_get_int(x, "tb", 0);
  Inst *in[2];
  int64_t kp;
  if (ir_pieces(x)) {   /* a sum over the batch's rows: rows are k in both */
    kp = ir_piece_rows(x, 0);
    if (!ta || tb || kp < 1 || ir_piece_rows(x, 1) != kp || x->in[0]->type.rank != 2 ||
        x->in[1]->type.rank != 2)
      return NULL;
    in[0] = x->in[0], in[1] = x->in[1];
  } else {
    const Type *a = &x->in[0]->type;
    if (a->rank != 3 || x->in[1]->type.rank != 3)
      return NULL;
    kp = a->dim[ta ? 1 : 2];
    in[0] = pieces_of(x->in[0], !ta, a->dim[0], kp);
    in[1] = pieces_of(x->in[1], tb, a->dim[0], kp);
    if (!in[0] || !in[1])
      return NULL;
  }
  if (kp > IR_DET_KBLOCK)
    return NULL;
  Inst *y = ir_new(f, OP_matmul, fold->loc, 2, in);
  if (ta)
    ir_set_int(y, "ta", 1);
  if (tb)
    ir_set_int(y, "tb", 1);
  ir_set_int(y, "kblock", kp);
  ir_finish(y);
  DTC_ASSERT(type_eq(&y->type, &fold->type));
  return y;
}

/* Pass 0: every fold that fold_product makes one product, and the ops only
 * its pieces read, gone. */
static void fold_products(Func *f, Arena *a) {
  if (f->mod->det_pieces < 2)
    return;
  ir_renumber(f);
  int n = f->inst.n;
  Uses u = ir_uses(a, f);
  Inst **old = arena_alloc(a, sizeof(Inst *) * (size_t)(n ? n : 1));
  memcpy(old, f->inst.a, sizeof(Inst *) * (size_t)n);
  Inst **map = arena_alloc(a, sizeof(Inst *) * (size_t)(n ? n : 1));
  bool any = false;
  f->inst.n = 0;
  for (int k = 0; k < n; k++) {
    Inst *i = old[k];
    for (int j = 0; j < i->nin; j++)
      if (map[i->in[j]->id])
        i->in[j] = map[i->in[j]->id];
    Inst *y = i->op == OP_fold ? fold_product(f, i, &u) : NULL;
    if (y)
      map[k] = y, y->name = i->name, any = true;
    else
      vec_push(f->mod->arena, &f->inst, i);
  }
  if (!any)
    return;
  /* what only the folds' pieces read: unread products, copies and views */
  ir_renumber(f);
  n = f->inst.n;
  int *reads = arena_alloc(a, sizeof(int) * (size_t)(n ? n : 1));
  for (int k = 0; k < n; k++)
    for (int j = 0; j < f->inst.a[k]->nin; j++)
      reads[f->inst.a[k]->in[j]->id]++;
  bool *gone = arena_alloc(a, sizeof(bool) * (size_t)(n ? n : 1));
  for (int k = n - 1; k >= 0; k--) {
    Inst *i = f->inst.a[k];
    Op op = i->op;
    if (reads[k] || (op != OP_matmul && op != OP_transpose && op != OP_reshape))
      continue;
    gone[k] = true;
    for (int j = 0; j < i->nin; j++)
      reads[i->in[j]->id]--;
  }
  int kept = 0;
  for (int k = 0; k < n; k++)
    if (!gone[k])
      f->inst.a[kept++] = f->inst.a[k];
  f->inst.n = kept;
  ir_renumber(f);
}

/* ---- products with their epilogues ---- */

/* The global value v reads (a load of it, or a reshape of one), else NULL. */
static const Global *read_global(const Inst *v) {
  while (v->op == OP_reshape)
    v = v->in[0];
  return v->op == OP_load ? ir_global_of(v) : NULL;
}

/* Whether a store to global g stands strictly between positions lo and hi;
 * at[] holds the positions of g's stores in order. */
static bool stored_between(const int *at, int n, int lo, int hi) {
  int i = 0, j = n;
  while (i < j) {   /* the first store past lo */
    int mid = i + (j - i) / 2;
    if (at[mid] <= lo)
      i = mid + 1;
    else
      j = mid;
  }
  return i < n && at[i] < hi;
}

/* Pass 5: a matmul whose every reader is an elementwise member of one
 * group, a group of the matmul's shape that stores nothing, whose other
 * operands read that shape as a matrix tile by tile (type_tile_read),
 * joins the group as its first member (the first such matmul, one a
 * group): codegen then runs the group on each strip of the product as the
 * product is written (an epilogue). Either the matmul moves down to just
 * before the group, past no store to a global it reads, or the group,
 * reading nothing made after the matmul, moves up to just after it. The
 * choices are made on the order as it stands, then the new order is built
 * in one pass. A group that stores (an optimizer's update of the weight
 * whose gradient the matmul makes) stays a loop of its own: run on strips
 * of the product it read its weights and moments a few columns at a time,
 * and bench/mlp's step took 2% longer. Only under dtc -fepilogue
 * (Module.epilogues): on the machines measured the epilogues saved nothing
 * (docs/PERFORMANCE.md, Epilogues). */
static void join_products(Func *f, Arena *a) {
  const Module *m = f->mod;
  ir_renumber(f);
  Uses use = ir_uses(a, f);
  int n = f->inst.n, ngrp = 0;
  for (int i = 0; i < n; i++)
    ngrp = max(ngrp, f->inst.a[i]->fuse);
  int *first = arena_alloc(a, sizeof(int) * (size_t)(ngrp + 1));
  int *last = arena_alloc(a, sizeof(int) * (size_t)(ngrp + 1));
  Inst **head = arena_alloc(a, sizeof(Inst *) * (size_t)(ngrp + 1));
  int *heads = arena_alloc(a, sizeof(int) * (size_t)(n + 1));   /* by inst id: its group */
  bool *up = arena_alloc(a, sizeof(bool) * (size_t)(ngrp + 1));
  bool *stores = arena_alloc(a, sizeof(bool) * (size_t)(ngrp + 1));
  int *nstore = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  int **store = arena_alloc(a, sizeof(int *) * (size_t)(m->global.n + 1));
  for (int g = 0; g <= ngrp; g++)
    first[g] = -1;
  for (int i = 0; i < n; i++) {
    const Inst *y = f->inst.a[i];
    if (y->fuse) {
      first[y->fuse] = first[y->fuse] < 0 ? i : first[y->fuse];
      last[y->fuse] = i;
      stores[y->fuse] |= y->op == OP_store;
    }
    if (y->op == OP_store)
      nstore[ir_global_of(y) - m->global.a]++;
  }
  for (int k = 0; k < m->global.n; k++) {
    store[k] = arena_alloc(a, sizeof(int) * (size_t)(nstore[k] + 1));
    nstore[k] = 0;
  }
  for (int i = 0; i < n; i++)
    if (f->inst.a[i]->op == OP_store) {
      int k = (int)(ir_global_of(f->inst.a[i]) - m->global.a);
      store[k][nstore[k]++] = i;
    }

  for (int i = 0; i < n; i++) {
    Inst *x = f->inst.a[i];
    if (x->op != OP_matmul || x->fuse || ir_pieces(x))
      continue;
    int g = 0;
    bool ok = use.off[x->id + 1] > use.off[x->id];
    for (int k = use.off[x->id]; ok && k < use.off[x->id + 1]; k++) {
      const Inst *u = use.u[k];
      ok = u->fuse && is_elem(u) && (!g || u->fuse == g);
      g = u->fuse;
    }
    if (!ok || stores[g] || head[g])
      continue;
    const Type *shape = NULL;
    bool early = true;   /* the group reads nothing made after x */
    for (int e = first[g]; ok && e <= last[g]; e++) {
      const Inst *y = f->inst.a[e];
      if (!is_elem(y))
        continue;
      shape = shape ? shape : &y->type;
      for (int j = 0; j < y->nin && ok; j++) {
        const Inst *o = y->in[j];
        if (o->fuse == g || o == x)
          continue;
        ok = type_tile_read(shape, &o->type) != TILE_NONE;
        early = early && o->id < i;
      }
    }
    if (!ok || !shape || !same_dims(shape, &x->type))
      continue;
    bool down = true;
    for (int k = 0; k < 2 && down; k++) {
      const Global *gl = read_global(x->in[k]);
      int at = gl ? (int)(gl - m->global.a) : -1;
      down = at < 0 || !stored_between(store[at], nstore[at], i, first[g]);
    }
    if (!down && !early)
      continue;
    head[g] = x;
    heads[x->id] = g;
    up[g] = !down;
  }

  /* the new order: a product moving down right before its group's first
   * member, a group moving up right after its product */
  Inst **order = arena_alloc(a, sizeof(Inst *) * (size_t)(n + 1));
  int k = 0;
  for (int i = 0; i < n; i++) {
    Inst *y = f->inst.a[i];
    int g = y->fuse, h = heads[y->id];
    if ((g && head[g] && up[g]) || (h && !up[h]))
      continue;   /* placed after its product, or before its group */
    if (g && head[g] && i == first[g])
      order[k++] = head[g];
    order[k++] = y;
    for (int e = first[h]; h && e <= last[h]; e++)
      order[k++] = f->inst.a[e];   /* h moves up */
  }
  DTC_ASSERT(k == n);
  memcpy(f->inst.a, order, sizeof(Inst *) * (size_t)n);
  for (int g = 1; g <= ngrp; g++)
    if (head[g])
      head[g]->fuse = g;
  ir_renumber(f);
}

/* Pass 0b: a sum or mean of a product that nothing else reads takes the
 * product's factors instead (sum_mul, mean_mul), so the product is never
 * stored and read back; a reduction in pieces keeps its operand. */
static void reduce_products(Func *f, Arena *a) {
  ir_renumber(f);
  int n = f->inst.n, kept = 0;
  Uses u = ir_uses(a, f);
  bool *gone = arena_alloc(a, sizeof(bool) * (size_t)(n + 1));
  for (int k = 0; k < n; k++) {
    Inst *i = f->inst.a[k], *p = i->in ? i->in[0] : NULL;
    if ((i->op != OP_sum && i->op != OP_mean) || ir_attr(i, "pieces") || p->op != OP_mul ||
        u.off[p->id + 1] - u.off[p->id] != 1 || !type_eq(&p->in[0]->type, &p->type) ||
        !type_eq(&p->in[1]->type, &p->type))
      continue;
    Inst **in = arena_alloc(f->mod->arena, 2 * sizeof *in);
    in[0] = p->in[0], in[1] = p->in[1];
    i->op = i->op == OP_sum ? OP_sum_mul : OP_mean_mul;
    i->in = in, i->nin = 2;
    gone[p->id] = true;
  }
  for (int k = 0; k < n; k++)
    if (!gone[k])
      f->inst.a[kept++] = f->inst.a[k];
  f->inst.n = kept;
  ir_renumber(f);
}

static void fuse_func(Func *f, Arena *a) {
  int n = f->inst.n;
  ir_renumber(f);
  Fuser fu = {.f = f, .tmp = a, .use = ir_uses(a, f)};
  size_t ni = (size_t)n + 1;
  fu.grp = arena_alloc(a, sizeof(int) * ni);
  fu.parent = arena_alloc(a, sizeof(int) * ni);
  fu.sealed = arena_alloc(a, sizeof(bool) * ni);
  fu.shape = arena_alloc(a, sizeof(Type *) * ni);
  fu.last = arena_alloc(a, sizeof(int) * ni);
  fu.size = arena_alloc(a, sizeof(int) * ni);
  fu.slot = arena_alloc(a, sizeof(int) * ni);
  fu.tier = arena_alloc(a, ni);
  fu.movable = arena_alloc(a, sizeof(bool) * ni);
  fu.gl = arena_alloc(a, sizeof(Global *) * ni);
  for (int i = 0; i < n; i++) {
    Inst *x = f->inst.a[i];
    x->fuse = 0;
    fu.gl[i] = x->op == OP_load || x->op == OP_store ? ir_global_of(x) : NULL;
  }
  for (int i = 0; i < n; i++)
    fu.movable[i] = f->inst.a[i]->op == OP_store && store_movable(&fu, f->inst.a[i]);
  form_groups(&fu);
  place_sinks(&fu);
  hoist_updates(&fu);
  reschedule(&fu);
  if (f->mod->epilogues)
    join_products(f, a);
}

bool pass_fusion(Module *m, Diag *d, PassRun *run) {
  (void)run;
  (void)d;
  for (int k = 0; k < m->func.n; k++) {   /* each function's work freed after it */
    Arena *tmp = arena_new();
    fold_products(m->func.a[k], tmp);
    reduce_products(m->func.a[k], tmp);
    fuse_func(m->func.a[k], tmp);
    arena_free(tmp);
  }
  return true;
}
