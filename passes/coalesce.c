/* coalesce.c: independent all_to_alls, all_gathers, and (in buckets)
 * reduce_scatters and all_reduces, over one axis become one. Each table's
 * pooled value reaches the batch's split by its own
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
 * Buckets (FLAT): the gradients of a step are summed one collective each
 * (a row-wise table's pooled sums, the optimizer state split's gradients
 * and params), so sums of one op, axis, method, wire and dtype that reach
 * the same things (comm_reach) go flattened into one vector, as DDP's and
 * ZeRO's buckets: an all_reduce's members one after another; a
 * reduce_scatter's (and an all_gather's whose other dims differ) member-
 * major within each device's block, each member's block along its own dim,
 * uneven as it is. An element is summed with the same partners as alone.
 * Not in deterministic mode, where a kernel's order of addition depends on
 * an element's place in its buffer. A store that nothing reads or stores
 * after it (an update's) does not hold a group back: it moves after the
 * fused collective.
 *
 * Requires: per-device functions (spmd). Guarantees: a group's inputs are
 * all computed before its first member's first user (a member's input
 * never depends on another member), and the fused collective stands where
 * its last member stood, or before the first user of a member if that is
 * earlier; each member's users read a slice (or a concat of slices) of it,
 * the member's value bit for bit (a bucket's sums: the same terms, in an
 * order the kernel may choose), under the member's sharding; the buffers
 * in between have none (no tensor of the model lies so). The devices of a
 * function group alike or the function keeps its collectives, so every
 * rank calls the same collectives in the same order. Does nothing under
 * `dtc -fno-coalesce` (Module.no_coalesce). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* A group's stacked dim when its members are flattened into one vector;
 * such a bucket holds at most BUCKET_BYTES of its members' whole tensors (a
 * larger member stays alone): its copies in and out stay small beside the
 * step's memory, and the small tensors, whose latency dominates, merge. */
enum { FLAT = IR_MAX_RANK, BUCKET_BYTES = 256 << 10 };

/* A group of collectives of one device's function. */
typedef struct Group {
  Inst **mem;            /* members, in order */
  int n, cap;
  int stack;             /* the stacked dim (`dim` or `to`), or FLAT; -1 while one member */
  int ready;             /* the latest id defining a member's input */
  int first_use;         /* the earliest id reading a member but a store that
                            may move (defer); INT_MAX: none */
  int last;              /* the last member's id */
  int64_t bytes;         /* the members' whole tensors */
} Group;

typedef struct Co {
  Module *m;
  Func *f;
  Arena *tmp;            /* what the function's grouping needs, freed after it */
  Uses u;                /* of f, ids as find_groups found them */
  unsigned char *reach;  /* comm_reach's, by id */
  bool *defer;           /* by id: a store that may move down past anything */
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

/* Whether h and c are collectives of one kind: op, axis, method and wire
 * (what IR text or an earlier pass set), the operand's dtype. */
static bool same_kind(const Inst *h, const Inst *c) {
  return h->op == c->op && ir_get_int(h, "axis", 0) == ir_get_int(c, "axis", 0) &&
         ir_get_int(h, "method", -1) == ir_get_int(c, "method", -1) &&
         ir_get_int(h, "wire", DT_WIRE_F32) == ir_get_int(c, "wire", DT_WIRE_F32) &&
         h->in[0]->type.dtype == c->in[0]->type.dtype;
}

/* The dim group g would stack c along, FLAT, or -1 when c cannot join it.
 * Sums (all_reduce, reduce_scatter) go flat, in one class of comm_reach
 * (so a bucket is a gradient exchange exactly when its members are) and
 * never in deterministic mode; all_gathers stack along dim where their
 * other dims agree, else go flat. */
static int stack_with(const Co *co, const Group *g, const Inst *c) {
  const Inst *h = g->mem[0];
  if (!same_kind(h, c))
    return -1;
  if (c->op == OP_all_reduce || c->op == OP_reduce_scatter)
    return co->m->det_pieces > 1 || co->reach[h->id] != co->reach[c->id] ? -1 : FLAT;
  int dim = (int)ir_get_int(c, "dim", 0), to = (int)ir_get_int(c, "to", 0);
  if (c->op == OP_all_gather)   /* member-major along dim, as gathered */
    return g->stack != FLAT && ir_get_int(h, "dim", 0) == dim && same_but(h, c, dim) ? dim
                                                                                    : FLAT;
  if (ir_get_int(h, "dim", 0) != dim || ir_get_int(h, "to", 0) != to)
    return -1;
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

static bool coalesced(Op op) {
  return op == OP_all_to_all || op == OP_all_gather || op == OP_all_reduce ||
         op == OP_reduce_scatter;
}

/* The global behind operand v (a load, through shape ops), -1: none. */
static int global_behind(const Module *m, const Inst *v) {
  while (ir_ops[v->op].kind == K_SHAPE && v->nin)
    v = v->in[0];
  const Global *g = v->op == OP_load ? ir_global_of(v) : NULL;
  return g ? (int)(g - m->global.a) : -1;
}

/* co->defer: the stores after which nothing reads or stores their global
 * (a new param and its state, stored at the end of the step), which may
 * move down to follow a fused collective they read. A loop's repeat reads
 * what its body does: nothing moves past one. */
static void find_deferred(Co *co) {
  Func *f = co->f;
  Module *m = co->m;
  bool *later = arena_alloc(co->tmp, sizeof *later * (size_t)(m->global.n + 1));
  bool loop = false;
  co->defer = arena_alloc(co->tmp, sizeof *co->defer * (size_t)(f->inst.n + 1));
  for (int k = f->inst.n - 1; k >= 0; k--) {
    const Inst *i = f->inst.a[k];
    const Global *g = i->op == OP_store ? ir_global_of(i) : NULL;
    if (g) {
      int x = (int)(g - m->global.a);
      co->defer[k] = !loop && !later[x];
      later[x] = true;
    }
    loop |= i->op == OP_repeat;
    for (int q = 0; q < i->nin; q++) {
      int x = global_behind(m, i->in[q]);
      if (x >= 0)
        later[x] = true;
    }
  }
}

/* The earliest id reading c (ids current) but a store that may move. */
static int first_use(const Co *co, const Inst *c) {
  for (int j = co->u.off[c->id]; j < co->u.off[c->id + 1]; j++)
    if (!co->defer[co->u.u[j]->id])
      return co->u.u[j]->id;
  return INT_MAX;
}

/* The groups of co->f's collectives (ids current) into *out; sig[j] is the
 * group of the j-th collective, -1 for one left alone. Returns the count. */
static int find_groups(Co *co, Group **out, int **sig, int *nsig) {
  Func *f = co->f;
  Arena *a = co->tmp;
  co->u = ir_uses(a, f);
  co->reach = comm_reach(a, co->m, f);
  find_deferred(co);
  int ng = 0, nc = 0, ncoll = 0;
  for (int i = 0; i < f->inst.n; i++)
    ncoll += coalesced(f->inst.a[i]->op);
  Group *g = arena_alloc(a, sizeof *g * (size_t)(ncoll + 1));   /* at most one a collective */
  int *of = arena_alloc(a, sizeof *of * (size_t)(ncoll + 1));
  for (int i = 0; i < f->inst.n; i++) {
    Inst *c = f->inst.a[i];
    if (!coalesced(c->op))
      continue;
    int ready = c->in[0]->id, use = first_use(co, c);
    /* the whole tensor's (a gather's result), the same on every device */
    const Type *whole = c->op == OP_all_gather ? &c->type : &c->in[0]->type;
    int64_t bytes = type_elems(whole) * (int64_t)dtype_size(whole->dtype);
    int j = 0, stack = -1;
    for (; j < ng; j++)
      if ((stack = stack_with(co, &g[j], c)) >= 0 &&
          (ready > g[j].ready ? ready : g[j].ready) < (use < g[j].first_use ? use : g[j].first_use) &&
          (stack != FLAT || g[j].bytes + bytes <= BUCKET_BYTES))
        break;
    if (j == ng)
      g[ng++] = (Group){.stack = -1, .ready = ready, .first_use = use};
    else
      g[j].stack = stack;
    g[j].bytes += bytes;
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
  Inst **part = arena_alloc(co->tmp, sizeof *part * (size_t)((n + 15) / 16));
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

/* x as type t (x itself when it is so). */
static Inst *reshape_to(Co *co, Inst *x, const Type *t, Loc loc) {
  if (type_eq(&x->type, t))
    return x;
  Inst *r = ir_new(co->f, OP_reshape, loc, 1, &x);
  ir_set_ints(r, "shape", t->dim, t->rank);
  return ir_finish(r);
}

static Inst *flatten(Co *co, Inst *x, Loc loc) {
  Type t = {x->type.dtype, 1, {type_elems(&x->type)}};
  return reshape_to(co, x, &t, loc);
}

/* The elements of t per index of its dim d. */
static int64_t unit_of(const Type *t, int d) {
  int64_t u = 1;
  for (int j = 0; j < t->rank; j++)
    if (j != d)
      u *= t->dim[j];
  return u;
}

/* Emits flat group g's fused collective over one vector, a bucket, and the
 * values that replace its members (into repl), appending them to co->f.
 * all_reduce: the members' elements one after another. reduce_scatter and
 * all_gather: member-major within each device's block, as a collective's
 * blocks are: device m's block of the bucket holds m's block (along the
 * member's own dim) of every member in order, so every member keeps its own
 * blocks, uneven ones too, and the bucket's block lengths are sums of the
 * members' (facts of the group, the same on every rank). An element is
 * summed or moved with the same partners as alone; only its place in the
 * buffer changes. */
static void fuse_flat(Co *co, const Group *g, Inst **repl) {
  Arena *a = co->tmp;
  Inst *h = g->mem[0];
  int k = group_size(co, h), n = g->n, coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(&co->m->mesh.a[0], co->f->device, coord);
  int me = coord[ir_get_int(h, "axis", 0)];
  bool blocks = h->op != OP_all_reduce;
  /* bl, el [t * k + m]: member t's block on device m along its dim, and its
   * elements (an all_reduce has no blocks) */
  size_t nbl = blocks ? (size_t)n * (size_t)k : 1;
  int64_t *bl = arena_alloc(a, sizeof *bl * nbl), sum[SHARD_MAX_AXIS] = {0};
  int64_t *el = arena_alloc(a, sizeof *el * nbl);
  for (int t = 0; blocks && t < n; t++) {
    const Inst *c = g->mem[t];
    int dim = (int)ir_get_int(c, "dim", 0);
    blocks_of(co, c, false, bl + t * k);
    for (int m = 0; m < k; m++)
      sum[m] += el[t * k + m] = bl[t * k + m] * unit_of(&c->in[0]->type, dim);
  }
  Inst **piece = arena_alloc(a, sizeof *piece * (h->op == OP_all_reduce ? (size_t)n : nbl + 1));
  int np = 0;
  if (h->op == OP_reduce_scatter) {   /* for each m, every member's block for m */
    for (int m = 0; m < k; m++)
      for (int t = 0; t < n; t++) {
        Inst *c = g->mem[t];
        int dim = (int)ir_get_int(c, "dim", 0);
        int64_t off = 0;
        for (int j = 0; j < m; j++)
          off += bl[t * k + j];
        if (bl[t * k + m])
          piece[np++] =
              flatten(co, cut(co, c->in[0], dim, off, off + bl[t * k + m], c->loc), c->loc);
      }
  } else {   /* the device's own, empty ones too (fuse's comment) */
    for (int t = 0; t < n; t++)
      piece[np++] = flatten(co, g->mem[t]->in[0], g->mem[t]->loc);
  }
  Inst *buf = join(co, piece, np, 0, h->loc);
  Inst *x = ir_new(co->f, h->op, h->loc, 1, &buf);
  ir_set_int(x, "axis", ir_get_int(h, "axis", 0));
  if (blocks) {
    ir_set_int(x, "dim", 0);
    ir_set_ints(x, "sizes", sum, k);
  }
  if (ir_attr(h, "method"))
    ir_set_int(x, "method", ir_get_int(h, "method", 0));
  if (ir_attr(h, "wire"))
    ir_set_int(x, "wire", ir_get_int(h, "wire", 0));
  ir_finish(x);
  int64_t at = 0;                         /* all_reduce, reduce_scatter: where member t starts */
  int64_t before[SHARD_MAX_AXIS] = {0};   /* all_gather: where device m's part starts */
  for (int m = 1; m < k; m++)
    before[m] = before[m - 1] + sum[m - 1];
  for (int t = 0; t < n; t++) {
    Inst *c = g->mem[t], *r;
    if (h->op == OP_all_gather) {
      int dim = (int)ir_get_int(c, "dim", 0);
      np = 0;
      for (int m = 0; m < k; m++) {
        Type b = c->type;
        b.dim[dim] = bl[t * k + m];
        if (bl[t * k + m])
          piece[np++] =
              reshape_to(co, cut(co, x, 0, before[m], before[m] + el[t * k + m], c->loc), &b,
                         c->loc);
        before[m] += el[t * k + m];
      }
      r = join(co, piece, np, dim, c->loc);
    } else {
      int64_t len = blocks ? el[t * k + me] : type_elems(&c->type);
      r = reshape_to(co, cut(co, x, 0, at, at + len, c->loc), &c->type, c->loc);
      at += len;
    }
    DTC_ASSERT(type_eq(&r->type, &c->type));
    r->shard = c->shard;
    if (r != x)
      r->name = c->name;
    repl[t] = r;
  }
}

/* Emits group g's fused all_to_all and the values that replace its members
 * (into repl, by member), appending them to co->f. */
static void fuse(Co *co, const Group *g, Inst **repl) {
  if (g->stack == FLAT) {
    fuse_flat(co, g, repl);
    return;
  }
  Arena *a = co->tmp;
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

/* Whether every device's copy of each function runs the same ops and groups
 * as the others, so the fused collectives meet in the same order everywhere
 * (a pipeline's stages run different copies: they keep theirs), into ok[k]
 * for function k: each copy is compared with the first of its name, once. */
static void alike(const Module *m, Arena *a, int *const *sig, const int *nsig, const int *ng,
                  bool *ok) {
  int nf = m->func.n, nrep = 0;
  int *first = arena_alloc(a, sizeof *first * (size_t)(nf + 1));
  int *rep = arena_alloc(a, sizeof *rep * (size_t)(nf + 1));
  bool *differ = arena_alloc(a, sizeof *differ * (size_t)(nf + 1));
  for (int k = 0; k < nf; k++) {
    const Func *f = m->func.a[k];
    differ[k] = false;
    if (f->device < 0)
      continue;
    size_t n = base_len(f);
    int r = 0;
    while (r < nrep && (base_len(m->func.a[rep[r]]) != n ||
                        strncmp(m->func.a[rep[r]]->name, f->name, n)))
      r++;
    if (r == nrep)
      rep[nrep++] = k;
    int o = first[k] = rep[r];
    differ[o] |= !same_ops(f, m->func.a[o]) || nsig[k] != nsig[o] || ng[k] != ng[o] ||
                 memcmp(sig[k], sig[o], sizeof(int) * (size_t)nsig[o]);
  }
  for (int k = 0; k < nf; k++)
    ok[k] = m->func.a[k]->device >= 0 && ng[k] && !differ[first[k]];
}

/* Replaces co->f's groups of two or more by their fused collectives. */
static void apply(Co *co, Group *g, int ng) {
  Func *f = co->f;
  Arena *a = co->tmp;
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
  /* the stores of a member that stand before their group's fused op follow it */
  bool *moved = arena_alloc(a, sizeof *moved * (size_t)(n + 1));
  for (int j = 0; j < ng; j++) {
    int at = g[j].first_use < g[j].last + 1 ? g[j].first_use : g[j].last + 1;
    for (int t = 0; g[j].n >= 2 && t < g[j].n; t++)
      for (int q = co->u.off[g[j].mem[t]->id]; q < co->u.off[g[j].mem[t]->id + 1]; q++)
        moved[co->u.u[q]->id] |= co->u.u[q]->id < at;
  }
  Inst **order = arena_alloc(a, sizeof *order * (size_t)f->inst.n);
  int w = 0;
  for (int i = 0; i <= n; i++) {
    for (int j = 0; j < ng; j++) {
      int at = g[j].first_use < g[j].last + 1 ? g[j].first_use : g[j].last + 1;
      if (g[j].n < 2 || at != i)
        continue;
      for (int e = from[j]; e < upto[j]; e++)
        order[w++] = f->inst.a[e];
      for (int t = 0; t < g[j].n; t++)
        for (int q = co->u.off[g[j].mem[t]->id]; q < co->u.off[g[j].mem[t]->id + 1]; q++)
          if (co->u.u[q]->id < at)
            order[w++] = co->u.u[q];
    }
    if (i < n && !repl[i] && !moved[i])
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
  /* A function's groups are found twice, to decide and to apply, each time
   * in an arena of its own freed after it: only their signatures (keep)
   * wait for every function's, not a thousand devices' uses and blocks. */
  int nf = m->func.n;
  Arena *keep = arena_new();
  int **sig = arena_alloc(keep, sizeof *sig * (size_t)(nf + 1));
  int *nsig = arena_alloc(keep, sizeof *nsig * (size_t)(nf + 1));
  int *ng = arena_alloc(keep, sizeof *ng * (size_t)(nf + 1));
  for (int k = 0; k < nf; k++) {
    Func *f = m->func.a[k];
    if (f->device < 0)
      continue;
    ir_renumber(f);
    Co co = {.m = m, .f = f, .tmp = arena_new()};
    Group *g;
    int *s;
    ng[k] = find_groups(&co, &g, &s, &nsig[k]);
    sig[k] = arena_alloc(keep, sizeof *s * (size_t)(nsig[k] + 1));
    memcpy(sig[k], s, sizeof *s * (size_t)nsig[k]);
    arena_free(co.tmp);
  }
  bool *fuse_in = arena_alloc(keep, sizeof *fuse_in * (size_t)(nf + 1));
  alike(m, keep, sig, nsig, ng, fuse_in);   /* all decided before any function changes */
  for (int k = 0; k < nf; k++) {
    if (!fuse_in[k])
      continue;
    Co co = {.m = m, .f = m->func.a[k], .tmp = arena_new()};
    Group *g;
    int *s, ns;
    int n = find_groups(&co, &g, &s, &ns);
    DTC_ASSERT(n == ng[k] && ns == nsig[k]);
    apply(&co, g, n);
    arena_free(co.tmp);
  }
  arena_free(keep);
  return true;
}
