/* coalesce.c: independent all_to_alls, and all_gathers, over one axis
 * become one. Each table's pooled value reaches the batch's split by its own
 * all_to_all (or is gathered whole), and its adjoint comes back by another;
 * as Neo and TorchRec exchange the pooled embeddings of all tables at once,
 * the members of a group are concatenated into one buffer, exchanged by one
 * collective and cut apart after it, so a step pays one latency each way
 * instead of one per table.
 *
 * Members of a group share the op, the axis, `dim`, `to` (all_to_all), the
 * dtype and the rank, and either their blocks along `to` (`sizes`: they
 * are stacked along `dim`, forward's pooled [B, D_t] rows) or along `dim`
 * (`dim_sizes`: stacked along `to`, the adjoints) and every other
 * dimension; all_gathers stack along `dim`. The buffer is member-major
 * along the stacked dimension, as a collective's blocks are: stacked along
 * `dim`, a device sends its own blocks of the members in order, and
 * receives device m's blocks of every member after those of the devices
 * before m, so member t's result is the concat over m of its pieces;
 * stacked along `to`, a device sends each device m its pieces of every
 * member in order (slices of the members' inputs) and receives its own
 * block of member t at the sum of its blocks of the members before t.
 * Every length is a fact of the group (`sizes`, `dim_sizes`), the same on
 * every rank, so the fused op's lengths and the comm pass's method agree.
 *
 * Requires: per-device functions (spmd). Guarantees: a group's inputs are
 * all computed before its first member's first user (a member's input
 * never depends on another member), and the fused collective stands where
 * its last member stood, or before the first user of a member if that is
 * earlier; each member's users read a slice (or a concat of slices) of it,
 * the member's value bit for bit, under the member's sharding; the buffers
 * in between have none (no tensor of the model lies so). The devices of a
 * function group alike or the function keeps its collectives, so every
 * rank calls the same collectives in the same order. Does nothing under
 * `dtc -fno-coalesce` (Module.no_coalesce). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* A group of all_to_alls of one device's function. */
typedef struct Group {
  Inst **mem;            /* members, in order */
  int n, cap;
  int stack;             /* the stacked dim (`dim` or `to`); -1 while one member */
  int ready;             /* the latest id defining a member's input */
  int first_use;         /* the earliest id reading a member; INT_MAX: none */
  int last;              /* the last member's id */
} Group;

typedef struct Co {
  Module *m;
  Func *f;
} Co;

/* The size of the group of collective c's axis. */
static int group_size(const Co *co, const Inst *c) {
  return co->m->mesh.a[0].axis_size[ir_get_int(c, "axis", 0)];
}

/* The blocks of all_to_all c along `to` (along_dim false: sizes) or `dim`
 * (dim_sizes, or the even blocks of the result's whole dim), or of
 * all_gather c along `dim` (sizes), into b. */
static void blocks_of(const Co *co, const Inst *c, bool along_dim, int64_t *b) {
  int n, k = group_size(co, c);
  const int64_t *s =
      ir_get_ints(c, along_dim && c->op == OP_all_to_all ? "dim_sizes" : "sizes", &n);
  if (s) {
    DTC_ASSERT(n == k);
    memcpy(b, s, sizeof *b * (size_t)n);
    return;
  }
  DTC_ASSERT(along_dim);
  ir_dim_blocks(co->m, c->type.dim[ir_get_int(c, "dim", 0)], NULL, k, b);
}

static bool same_blocks(const Co *co, const Inst *a, const Inst *b, bool along_dim) {
  int64_t x[SHARD_MAX_AXIS], y[SHARD_MAX_AXIS];
  blocks_of(co, a, along_dim, x);
  blocks_of(co, b, along_dim, y);
  return !memcmp(x, y, sizeof *x * (size_t)group_size(co, a));
}

/* Whether a and b's inputs agree in every dim but `but`. */
static bool same_but(const Inst *a, const Inst *b, int but) {
  const Type *x = &a->in[0]->type, *y = &b->in[0]->type;
  if (x->dtype != y->dtype || x->rank != y->rank)
    return false;
  for (int d = 0; d < x->rank; d++)
    if (d != but && x->dim[d] != y->dim[d])
      return false;
  return true;
}

/* The dim group g would stack c along, -1 when c cannot join it. */
static int stack_with(const Co *co, const Group *g, const Inst *c) {
  const Inst *h = g->mem[0];
  int dim = (int)ir_get_int(c, "dim", 0), to = (int)ir_get_int(c, "to", 0);
  if (h->op != c->op || ir_get_int(h, "axis", 0) != ir_get_int(c, "axis", 0) ||
      ir_get_int(h, "dim", 0) != dim || ir_get_int(h, "to", 0) != to)
    return -1;
  if (c->op == OP_all_gather)   /* member-major along dim, as gathered */
    return same_but(h, c, dim) ? dim : -1;
  for (int s = 0; s < 2; s++) {
    int stack = s ? to : dim;
    if ((g->stack < 0 || g->stack == stack) && same_blocks(co, h, c, s) &&
        same_but(h, c, stack))
      return stack;
  }
  return -1;
}

static void push(Arena *a, Group *g, Inst *c) {
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 4;
    Inst **more = arena_alloc(a, sizeof *more * (size_t)g->cap);
    if (g->n)
      memcpy(more, g->mem, sizeof *more * (size_t)g->n);
    g->mem = more;
  }
  g->mem[g->n++] = c;
}

/* The groups of co->f's all_to_alls (ids current) into *out; sig[j] is the
 * group of the j-th all_to_all, -1 for one left alone. Returns the count. */
static int find_groups(Co *co, Group **out, int **sig, int *nsig) {
  Func *f = co->f;
  Arena *a = co->m->arena;
  Uses u = ir_uses(a, f);
  Group *g = arena_alloc(a, sizeof *g * (size_t)(f->inst.n + 1));
  int ng = 0, nc = 0;
  int *of = arena_alloc(a, sizeof *of * (size_t)(f->inst.n + 1));
  for (int i = 0; i < f->inst.n; i++) {
    Inst *c = f->inst.a[i];
    if (c->op != OP_all_to_all && c->op != OP_all_gather)
      continue;
    int ready = c->in[0]->id, use = u.off[i] < u.off[i + 1] ? u.u[u.off[i]]->id : INT_MAX;
    int j = 0, stack = -1;
    for (; j < ng; j++)
      if ((stack = stack_with(co, &g[j], c)) >= 0 &&
          (ready > g[j].ready ? ready : g[j].ready) < (use < g[j].first_use ? use : g[j].first_use))
        break;
    if (j == ng)
      g[ng++] = (Group){.stack = -1, .ready = ready, .first_use = use};
    else
      g[j].stack = stack;
    push(a, &g[j], c);
    g[j].ready = ready > g[j].ready ? ready : g[j].ready;
    g[j].first_use = use < g[j].first_use ? use : g[j].first_use;
    g[j].last = i;
    of[nc++] = j;
  }
  for (int j = 0; j < nc; j++)
    if (g[of[j]].n < 2)
      of[j] = -1;
  *out = g;
  *sig = of;
  *nsig = nc;
  return ng;
}

/* x[0..n) joined along axis (concats of at most 16 operands each). */
static Inst *join(Co *co, Inst **x, int n, int axis, Loc loc) {
  if (n == 1)
    return x[0];
  Inst **part = arena_alloc(co->m->arena, sizeof *part * (size_t)((n + 15) / 16));
  int np = 0;
  for (int s = 0; s < n; s += 16) {
    int c = n - s < 16 ? n - s : 16;
    if (c == 1) {
      part[np++] = x[s];
      continue;
    }
    Inst *j = ir_new(co->f, OP_concat, loc, c, x + s);
    ir_set_int(j, "axis", axis);
    part[np++] = ir_finish(j);
  }
  return join(co, part, np, axis, loc);
}

/* [b, e) of x along axis; x itself when that is all of it. */
static Inst *cut(Co *co, Inst *x, int axis, int64_t b, int64_t e, Loc loc) {
  if (b == 0 && e == x->type.dim[axis])
    return x;
  Inst *s = ir_new(co->f, OP_slice, loc, 1, &x);
  ir_set_int(s, "axis", axis);
  ir_set_int(s, "begin", b);
  ir_set_int(s, "end", e);
  return ir_finish(s);
}

/* Emits group g's fused all_to_all and the values that replace its members
 * (into repl, by member), appending them to co->f. */
static void fuse(Co *co, const Group *g, Inst **repl) {
  Arena *a = co->m->arena;
  Inst *h = g->mem[0];
  int k = group_size(co, h), n = g->n, coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(&co->m->mesh.a[0], co->f->device, coord);
  int me = coord[ir_get_int(h, "axis", 0)];
  int dim = (int)ir_get_int(h, "dim", 0), to = (int)ir_get_int(h, "to", 0), stack = g->stack;
  bool by_dim = stack == dim;
  /* bl[t * k + m]: member t's block on device m along the stacked dim */
  int64_t *bl = arena_alloc(a, sizeof *bl * (size_t)(n * k)), sum[SHARD_MAX_AXIS] = {0};
  for (int t = 0; t < n; t++) {
    blocks_of(co, g->mem[t], by_dim, bl + t * k);
    for (int m = 0; m < k; m++)
      sum[m] += bl[t * k + m];
  }
  Inst **piece = arena_alloc(a, sizeof *piece * (size_t)(n * k + 1));
  int np = 0;
  if (by_dim) {   /* the device's own blocks, in member order; empty ones too,
                     so what computes them stays needed as it was (a device's
                     @forward takes the inputs every device's does) */
    for (int t = 0; t < n; t++)
      piece[np++] = g->mem[t]->in[0];
  } else {        /* member-major: for each m, every member's block for m */
    for (int m = 0; m < k; m++)
      for (int t = 0; t < n; t++) {
        int64_t off = 0;
        for (int j = 0; j < m; j++)
          off += bl[t * k + j];
        if (bl[t * k + m])
          piece[np++] = cut(co, g->mem[t]->in[0], to, off, off + bl[t * k + m], g->mem[t]->loc);
      }
  }
  Inst *buf = join(co, piece, np, stack, h->loc);
  Inst *x = ir_new(co->f, h->op, h->loc, 1, &buf);
  ir_set_int(x, "axis", ir_get_int(h, "axis", 0));
  ir_set_int(x, "dim", dim);
  if (h->op == OP_all_gather) {
    ir_set_ints(x, "sizes", sum, k);
  } else {
    ir_set_int(x, "to", to);
    int64_t other[SHARD_MAX_AXIS];
    blocks_of(co, h, !by_dim, other);
    ir_set_ints(x, "sizes", by_dim ? other : sum, k);
    bool even = true;
    for (int m = 1; m < k; m++)
      even &= (by_dim ? sum : other)[m] == (by_dim ? sum : other)[0];
    if (!even || (!by_dim && ir_attr(h, "dim_sizes")))
      ir_set_ints(x, "dim_sizes", by_dim ? sum : other, k);
  }
  ir_finish(x);
  int64_t before[SHARD_MAX_AXIS] = {0};   /* by_dim: where device m's blocks start */
  for (int m = 1; m < k; m++)
    before[m] = before[m - 1] + sum[m - 1];
  int64_t mine = 0;                       /* !by_dim: where member t's block starts */
  for (int t = 0; t < n; t++) {
    Inst *c = g->mem[t], *r;
    if (by_dim) {
      np = 0;
      for (int m = 0; m < k; m++) {
        if (bl[t * k + m])
          piece[np++] = cut(co, x, dim, before[m], before[m] + bl[t * k + m], c->loc);
        before[m] += bl[t * k + m];
      }
      r = join(co, piece, np, dim, c->loc);
    } else {
      r = cut(co, x, to, mine, mine + bl[t * k + me], c->loc);
      mine += bl[t * k + me];
    }
    DTC_ASSERT(type_eq(&r->type, &c->type));
    r->shard = c->shard;   /* the fused value itself only when it is c's */
    if (r != x)
      r->name = c->name;
    repl[t] = r;
  }
}

/* The name of f without its device's suffix (@train_step.1: train_step). */
static size_t base_len(const Func *f) {
  const char *dot = strrchr(f->name, '.');
  return dot && atoi(dot + 1) == f->device ? (size_t)(dot - f->name) : strlen(f->name);
}

/* Whether f and o run the same ops in the same order (the copies of one
 * function on devices of one stage). */
static bool same_ops(const Func *f, const Func *o) {
  if (f->inst.n != o->inst.n)
    return false;
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op != o->inst.a[i]->op)
      return false;
  return true;
}

/* Whether every device's copy of f's function runs the same ops and groups
 * as f does, so the fused collectives meet in the same order everywhere
 * (a pipeline's stages run different copies: they keep theirs). */
static bool alike(const Module *m, int fi, int *const *sig, const int *nsig, const int *ng) {
  const Func *f = m->func.a[fi];
  size_t n = base_len(f);
  for (int j = 0; j < m->func.n; j++) {
    const Func *o = m->func.a[j];
    if (o->device < 0 || base_len(o) != n || strncmp(o->name, f->name, n))
      continue;
    if (!same_ops(f, o) || nsig[j] != nsig[fi] || ng[j] != ng[fi] ||
        memcmp(sig[j], sig[fi], sizeof(int) * (size_t)nsig[fi]))
      return false;
  }
  return true;
}

/* Replaces co->f's groups of two or more by their fused collectives. */
static void apply(Co *co, Group *g, int ng) {
  Func *f = co->f;
  Arena *a = co->m->arena;
  int n = f->inst.n;
  Inst **repl = arena_alloc(a, sizeof *repl * (size_t)(n + 1));   /* by member id */
  int *from = arena_alloc(a, sizeof *from * (size_t)(ng + 1));
  int *upto = arena_alloc(a, sizeof *upto * (size_t)(ng + 1));
  for (int j = 0; j < ng; j++) {
    from[j] = f->inst.n;
    if (g[j].n >= 2) {
      Inst **r = arena_alloc(a, sizeof *r * (size_t)g[j].n);
      fuse(co, &g[j], r);
      for (int t = 0; t < g[j].n; t++)
        repl[g[j].mem[t]->id] = r[t];
    }
    upto[j] = f->inst.n;
  }
  for (int i = 0; i < f->inst.n; i++)
    for (int q = 0; q < f->inst.a[i]->nin; q++) {
      Inst *v = f->inst.a[i]->in[q];
      if (v->fn == f && v->id < n && f->inst.a[v->id] == v && repl[v->id])
        f->inst.a[i]->in[q] = repl[v->id];
    }
  Inst **order = arena_alloc(a, sizeof *order * (size_t)f->inst.n);
  int w = 0;
  for (int i = 0; i <= n; i++) {
    for (int j = 0; j < ng; j++) {
      int at = g[j].first_use < g[j].last + 1 ? g[j].first_use : g[j].last + 1;
      for (int e = from[j]; g[j].n >= 2 && at == i && e < upto[j]; e++)
        order[w++] = f->inst.a[e];
    }
    if (i < n && !repl[i])
      order[w++] = f->inst.a[i];
  }
  memcpy(f->inst.a, order, sizeof *order * (size_t)w);
  f->inst.n = w;
  ir_renumber(f);
}

bool pass_coalesce(Module *m, Diag *d, PassRun *run) {
  (void)d, (void)run;
  if (m->no_coalesce || !m->mesh.n)
    return true;
  int nf = m->func.n;
  Group **g = arena_alloc(m->arena, sizeof *g * (size_t)(nf + 1));
  int **sig = arena_alloc(m->arena, sizeof *sig * (size_t)(nf + 1));
  int *nsig = arena_alloc(m->arena, sizeof *nsig * (size_t)(nf + 1));
  int *ng = arena_alloc(m->arena, sizeof *ng * (size_t)(nf + 1));
  Co *co = arena_alloc(m->arena, sizeof *co * (size_t)(nf + 1));
  for (int k = 0; k < nf; k++) {
    Func *f = m->func.a[k];
    if (f->device < 0)
      continue;
    ir_renumber(f);
    co[k] = (Co){m, f};
    ng[k] = find_groups(&co[k], &g[k], &sig[k], &nsig[k]);
  }
  bool *fuse_in = arena_alloc(m->arena, sizeof *fuse_in * (size_t)(nf + 1));
  for (int k = 0; k < nf; k++)   /* all decided before any function changes */
    fuse_in[k] = m->func.a[k]->device >= 0 && ng[k] && alike(m, k, sig, nsig, ng);
  for (int k = 0; k < nf; k++)
    if (fuse_in[k])
      apply(&co[k], g[k], ng[k]);
  return true;
}
