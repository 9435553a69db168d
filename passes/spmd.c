/* spmd.c: one program per device. Each global function F (@train_step,
 * @forward) becomes copies @F.0 .. @F.N-1, one per mesh position (= rank),
 * computing on local blocks. Where an op's form (shard_form) needs an operand
 * in another sharding than its producer gives, the collectives of shard_plan
 * go in between, once per value and target. A mean over a split dimension
 * becomes a partial sum of the global mean: the local mean times
 * n_local / N, so uneven blocks give the single-device result. A split
 * dropout, or an attention that drops (sdpa, sdpa_grad), names its block's
 * place (`at`), so its mask is the block of the whole tensor's mask, and so
 * does a lookup in a row-wise table (`at` = [R, lo]: its block's rows among
 * the table's). A row-wise table is never gathered: an op that would need it
 * whole is a located error (spmd_tables.c).
 *
 * A loop's body B gets copies @B.D too, made before the functions that run
 * them (device D's `repeat {body = "B"}` runs @B.D): its args are the
 * device's blocks, a stacked operand is whole along its leading dim, and
 * collectives may lie inside. A body's outputs keep their shardings, but a
 * carried value's is resharded to its arg's, so every iteration reads what
 * the previous one wrote; a sum carried from zeros starts from the device's
 * block of zeros (shard_zero).
 *
 * A loop whose stacked operands split their layer dim over a mesh axis
 * (shard_pipe_axis) runs as pipeline stages: on the device at coordinate s
 * of that axis it is a loop over its own layers only (n = its block l_s,
 * first = the layers before it, so dropout draws the whole loop's masks);
 * its carries come from stage s-1 by `send` before it and go to stage s+1
 * by `send` after it (a reverse loop runs from the last stage to the first,
 * so the other way), and the stage that ran the last iteration broadcasts
 * them (`bcast`) where a value of the loop is first read: every device
 * continues with the loop's whole result, as everything outside the loop
 * runs on every stage alike, and a stage runs its next loop (a micro-batch's,
 * passes/microbatch.c) while the later stages still run this one.
 *
 * Requires: shardings (passes/sharding.c). Guarantees, with a mesh: no
 * global @train_step or @forward is left, nor a global body that only they
 * ran; in each copy (Func.device = its position) every value's type is its
 * device's block of the value's global sharding, kept in Inst.shard;
 * collectives carry the block lengths of their axis group in `sizes`; a
 * store's value has its global's sharding; every output of @train_step.D and
 * @forward.D is whole on every device (the loss is all-reduced and split
 * outputs all-gathered, so every rank reports the global values). With
 * -Wreshard, a warning at each op that needed a reshard, naming its
 * collectives and their bytes per step. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct Memo {
  const Inst *x;       /* the value in the global function */
  Sharding to;
  Inst *v;             /* its reshard in the copy */
} Memo;

/* A loop run as pipeline stages: its copy on this device and the carries
 * every device has after it, broadcast from the last stage when first used
 * (so a stage goes on to its next loop, a micro-batch's, while the later
 * stages still run this one). */
typedef struct Stage {
  const Inst *x;       /* the repeat in the global function */
  Inst *loop;          /* this device's loop */
  Inst **out;          /* by carry: its value on the last stage, then broadcast */
  int tail, axis;      /* the last stage, over mesh axis */
  bool sent;           /* out broadcast */
} Stage;

typedef struct Ctx {
  Module *m;
  Diag *d;
  int dev;
  Func *f;             /* the copy being built */
  const Func *src;     /* the global function it copies */
  int64_t carry;       /* a body's: its loop's carried values; -1: an entry */
  int nout;            /* outputs emitted so far */
  Inst **map;          /* by id in the global function: the value in the copy */
  VEC(Memo) memo;
  VEC(Stage) stage;
  Sharding *scalar;    /* whole, for the constants spmd adds */
  bool failed;         /* an error (a sum deterministic mode cannot order, a layout no
                          collective makes): the rest is not emitted */
} Ctx;

static int axis_size(const Module *m, int axis) { return m->mesh.a[0].axis_size[axis]; }

double spmd_comm_bytes(const Inst *c) {
  int k = axis_size(c->fn->mod, (int)ir_get_int(c, "axis", 0));
  double f = (double)(k - 1) / k, in = (double)type_elems(&c->in[0]->type) * 4;
  if (ir_get_int(c, "wire", DT_WIRE_F32) == DT_WIRE_BF16) /* 2 bytes an element */
    in /= 2;
  switch (c->op) {
  case OP_all_reduce: return 2 * f * in;
  case OP_all_gather: return f * (double)type_elems(&c->type) * 4;
  case OP_reduce_scatter: case OP_all_to_all: return f * in;
  case OP_send: case OP_bcast: return in;   /* the sender's; a bcast's root's */
  case OP_fold_all: return 2 * (double)type_elems(&c->type) * 4;   /* a hop, the bcast */
  case OP_ring_sdpa: case OP_ring_sdpa_lse: case OP_ring_sdpa_grad: {
    /* p - 1 hops of blocks of k (and v; the backward's adjoints too, and
     * their hop home), counted as even blocks; causal, the zig-zag's swaps
     * of halves, about one hop more (ring.c, ring_time) */
    int n;
    const int64_t *sizes = ir_get_ints(c, "sizes", &n);
    const Type *q = &c->in[0]->type;
    double t = 0, row = (double)q->dim[0] * (double)q->dim[1] * (double)q->dim[3] * 4;
    for (int j = 0; j < n; j++)
      t += (double)sizes[j];
    double hops = (f + (ir_get_int(c, "causal", 0) && k > 1 ? 1.0 / k : 0)) * t * row;
    if (c->op != OP_ring_sdpa_grad)
      return c->op == OP_ring_sdpa ? 2 * hops : hops;
    return 4 * hops + 2 * row * t / k;
  }
  default: return 0;
  }
}

static Sharding *keep(Ctx *c, const Sharding *s) {
  Sharding *k = arena_alloc(c->m->arena, sizeof *k);
  *k = *s;
  return k;
}

static void blocks(const Module *m, const Sharding *s, const Type *t, int d, int64_t *b) {
  ir_dim_blocks(m, t->dim[d], s->ratio[d], axis_size(m, s->axis[d]), b);
}

static Inst *emit_comm(Ctx *c, const ShardStep *st, Inst *v, const Type *t, Loc loc) {
  Module *m = c->m;
  Inst *x = ir_new(c->f, st->op, loc, 1, &v);
  ir_set_int(x, "axis", st->axis);
  if (st->op != OP_all_reduce) {
    int64_t b[SHARD_MAX_AXIS];
    int d = st->op == OP_all_to_all ? st->to : st->dim;
    blocks(m, st->op == OP_all_gather ? &st->before : &st->after, t, d, b);
    ir_set_int(x, "dim", st->dim);
    if (st->op == OP_all_to_all)
      ir_set_int(x, "to", st->to);
    ir_set_ints(x, "sizes", b, axis_size(m, st->axis));
    if (st->op == OP_all_to_all) { /* unequal blocks along dim: their lengths */
      int k = axis_size(m, st->axis);
      bool equal = true;
      blocks(m, &st->before, t, st->dim, b);
      for (int c = 1; c < k; c++)
        equal &= b[c] == b[0];
      if (!equal)
        ir_set_ints(x, "dim_sizes", b, k);
    }
  }
  ir_finish(x);
  x->shard = keep(c, &st->after);
  return x;
}

/* What needs a reshard, for its diagnostics: operand k of inst i, or the
 * value a store or output i takes (k: a body output's index); written out
 * by need_text only for a diagnostic. */
typedef struct Need {
  const Inst *i;
  int k;
} Need;

static const char *need_text(const Ctx *c, Need w, char *buf, size_t n) {
  const Inst *i = w.i;
  if (i->op == OP_store)
    snprintf(buf, n, "the store to '%s'", ir_get_str(i, "global", ""));
  else if (i->op == OP_output && c->carry >= 0)   /* a body's */
    snprintf(buf, n, "output %d of @%s", w.k, c->src->name);
  else if (i->op == OP_output)
    snprintf(buf, n, "output '%s'", ir_get_str(i, "name", ""));
  else if (i->nin > 1)
    snprintf(buf, n, "operand %d of '%s'", w.k + 1, ir_ops[i->op].name);
  else
    snprintf(buf, n, "'%s'", ir_ops[i->op].name);
  return buf;
}

static void warn_reshard(Ctx *c, Loc loc, Need need, const Inst *x, const Sharding *to,
                         Inst *const *made, const ShardStep *st, int n) {
  const Module *m = c->m;
  char ty[128], from[256], want[256], list[1024] = "", src[512] = "", what[512];
  for (int k = 0; k < n; k++) {
    size_t len = strlen(list);
    snprintf(list + len, sizeof list - len, "%s%s over '%s' (%.0f bytes per step)",
             k ? ", then " : "", ir_ops[st[k].op].name, m->mesh.a[0].axis_name[st[k].axis],
             spmd_comm_bytes(made[k]));
  }
  size_t len = (size_t)snprintf(src, sizeof src, "%s%s%s'%s'", x->name ? "%" : "",
                                x->name ? x->name : "", x->name ? " of " : "",
                                ir_ops[x->op].name);
  if (x->loc.file && (x->loc.file != loc.file || x->loc.line != loc.line || x->loc.col != loc.col))
    snprintf(src + len, sizeof src - len, " at %s:%d:%d", x->loc.file->name, x->loc.line,
             x->loc.col);
  diag_warn(c->d, loc, "%s: %s needs %s as %s, but %s gives %s", list,
            need_text(c, need, what, sizeof what),
            type_str(&x->type, ty, sizeof ty), ir_shard_str(m, to, x->type.rank, want, sizeof want),
            src, ir_shard_str(m, x->shard, x->type.rank, from, sizeof from));
}

/* The copy of x in sharding `to`, made by collectives the first time. */
static Inst *reshard(Ctx *c, const Inst *x, const Sharding *to, Loc loc, Need need) {
  Module *m = c->m;
  Inst *v = c->map[x->id];
  if (shard_same(m, &x->type, x->shard, to))
    return v;
  for (int k = 0; k < c->memo.n; k++)
    if (c->memo.a[k].x == x && shard_same(m, &x->type, &c->memo.a[k].to, to))
      return c->memo.a[k].v;
  ShardStep st[SHARD_MAX_STEPS];
  Inst *made[SHARD_MAX_STEPS];
  int n = shard_plan(m, &x->type, x->shard, to, st);
  if (n < 0) {   /* a partial sum wanted of a value that is none */
    char ty[128], from[256], want[256], what[512];
    if (!c->failed)
      diag_error(c->d, loc, "%s needs %s as %s, which no collective makes from %s: the "
                 "shardings of this program do not fit together (a pipeline's micro-batches "
                 "beside another split over the stages' axis, for one)",
                 need_text(c, need, what, sizeof what), type_str(&x->type, ty, sizeof ty),
                 ir_shard_str(m, to, x->type.rank, want, sizeof want),
                 ir_shard_str(m, x->shard, x->type.rank, from, sizeof from));
    c->failed = true;
    return v;
  }
  for (int k = 0; k < n; k++)
    if (m->det_pieces > 1 && !c->failed &&
        (st[k].op == OP_all_reduce || st[k].op == OP_reduce_scatter)) {
      char what[512];
      c->failed = true;   /* the rest is not emitted */
      diag_error(c->d, loc, "deterministic mode: %s needs a sum over mesh axis '%s' of parts "
                 "whose split depends on the layout; deterministic mode fixes the pieces of "
                 "sums over the batch and of matrix products over a multiple of the pieces",
                 need_text(c, need, what, sizeof what), m->mesh.a[0].axis_name[st[k].axis]);
      diag_note(c->d, m->det_loc, "deterministic mode asked for here");
    }
  for (int k = 0; k < n; k++)
    v = made[k] = emit_comm(c, &st[k], v, &x->type, loc);
  vec_push(m->arena, &c->memo, ((Memo){x, *to, v}));
  if (c->dev == 0 && (c->d->wflags & W_RESHARD))
    warn_reshard(c, loc, need, x, to, made, st, n);
  return v;
}

/* A load of an input split past its first dimension (a sequence split,
 * `shard ids: [*, cp]`): the input itself lies as its rows do (pass_spmd
 * made its global so: a rank reads runs of whole rows), and shard_slice
 * cuts the device's block of the rest. False for other insts. */
static bool input_block(Ctx *c, const Inst *i) {
  Module *m = c->m;
  const Global *g = i->op == OP_load ? ir_global_of(i) : NULL;
  if (!g || g->kind != G_INPUT || shard_same(m, &i->type, i->shard, g->shard))
    return false;
  Inst *x = ir_new(c->f, OP_load, i->loc, 0, NULL);
  ir_copy_attrs(x, i);
  ir_finish(x);
  x->shard = g->shard;
  x->name = i->name;
  ShardStep st[SHARD_MAX_STEPS];
  int n = shard_plan(m, &i->type, g->shard, i->shard, st);
  DTC_ASSERT(n >= 0);
  for (int k = 0; k < n; k++)
    x = emit_comm(c, &st[k], x, &i->type, i->loc);
  c->map[i->id] = x;
  return true;
}

static Inst *scale(Ctx *c, Inst *x, double f, Loc loc) {
  Inst *k = ir_new(c->f, OP_const, loc, 0, NULL);
  ir_set_float(k, "value", f);
  ir_finish(k)->shard = c->scalar;
  Inst *r = ir_make(c->f, OP_mul, loc, 2, x, k);
  r->shard = x->shard;
  return r;
}

/* The share of a mean's summed elements that lie on this device: local
 * count over global count. */
static double mean_share(const Inst *i, const Inst *local) {
  const Type *g = &i->in[0]->type, *l = &local->type;
  double f = 1;
  if (i->op == OP_cross_entropy || i->op == OP_cross_entropy_grad)
    return (double)l->dim[0] / (double)g->dim[0];
  if (i->op == OP_mse || i->op == OP_bce_with_logits || i->op == OP_bce_with_logits_grad)
    return (double)type_elems(l) / (double)type_elems(g);
  int n;
  const int64_t *axes = ir_get_ints(i, "axes", &n);
  for (int k = 0; k < n; k++) {
    int64_t a = axes[k] < 0 ? axes[k] + g->rank : axes[k];
    f *= (double)l->dim[a] / (double)g->dim[a];
  }
  return f;
}

static Inst *emit_p2p(Ctx *c, Op op, Inst *v, int axis, int from, int to, Loc loc) {
  Inst *x = ir_new(c->f, op, loc, 1, &v);
  ir_set_int(x, "axis", axis);
  ir_set_int(x, "from", from);
  if (op == OP_send)
    ir_set_int(x, "to", to);
  ir_finish(x)->shard = v->shard;
  return x;
}

static const Stage *stage_of(const Ctx *c, const Inst *x) {
  for (int k = 0; k < c->stage.n; k++)
    if (c->stage.a[k].x == x)
      return &c->stage.a[k];
  return NULL;
}

/* A fold of pieces split along one mesh axis, and nothing else, as one
 * fold_all over that axis (no gather of the pieces); false for any other. */
static bool fold_chain(Ctx *c, const Inst *i) {
  const Module *m = c->m;
  const Inst *x = i->in[0];
  const Sharding *s = x->shard;
  if (!s || s->axis[0] < 0 || ir_partial_axes(m, s, x->type.rank))
    return false;
  for (int d = 1; d < x->type.rank; d++)
    if (s->axis[d] >= 0)
      return false;
  int64_t b[SHARD_MAX_AXIS];
  blocks(m, s, &x->type, 0, b);
  for (int k = 0; k < axis_size(m, s->axis[0]); k++)
    if (b[k] < 1)
      return false;
  Inst *in = c->map[x->id];
  Inst *y = ir_new(c->f, OP_fold_all, i->loc, 1, &in);
  ir_set_int(y, "axis", s->axis[0]);
  ir_set_ints(y, "sizes", b, axis_size(m, s->axis[0]));
  ir_finish(y)->shard = i->shard;
  y->name = i->name;
  c->map[i->id] = y;
  return true;
}

/* Loop i as this device's pipeline stage over mesh axis `axis`: its own
 * layers [first, first + n) of the blocks of i's n, the carries in from the
 * stage before (in loop order: a reverse loop runs from the last stage to the
 * first), out to the stage after, and from the last stage to every one. */
static void emit_stage(Ctx *c, const Inst *i, Inst **in, int axis, const double *ratio) {
  Module *m = c->m;
  int p = axis_size(m, axis), coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(&m->mesh.a[0], c->dev, coord);
  int me = coord[axis], carry = (int)ir_get_int(i, "carry", 1);
  int64_t b[SHARD_MAX_AXIS], first = 0;
  ir_blocks(ir_get_int(i, "n", 1), ratio, p, b);
  for (int k = 0; k < me; k++)
    first += b[k];
  bool rev = ir_get_int(i, "reverse", 0);
  int dir = rev ? -1 : 1, head = rev ? p - 1 : 0, tail = rev ? 0 : p - 1;
  for (int k = 0; me != head && k < carry; k++)
    in[k] = emit_p2p(c, OP_send, in[k], axis, me - dir, me, i->loc);
  Inst *x = ir_new(c->f, OP_repeat, i->loc, i->nin, in);
  ir_copy_attrs(x, i);
  ir_set_int(x, "n", b[me]);
  if (first)
    ir_set_int(x, "first", first);
  ir_finish(x)->shard = i->shard;
  Stage st = {i, x, arena_alloc(m->arena, sizeof(Inst *) * (size_t)carry), tail, axis, false};
  const Func *body = ir_repeat_body(i);
  for (int k = 0; k < carry; k++) {
    Inst *v = x;
    if (k) {
      v = ir_new(c->f, OP_repeat_out, i->loc, 1, &x);
      ir_set_int(v, "index", k);
      ir_finish(v)->shard = ir_func_arg(body, k)->shard;
    }
    if (me != tail)
      emit_p2p(c, OP_send, v, axis, me, me + dir, i->loc);
    st.out[k] = v;
  }
  vec_push(m->arena, &c->stage, st);
}

/* Maps x when it is a staged loop's carried result: its broadcast, emitted
 * the first time a value of the loop is used (on every device alike, in the
 * global function's order). */
static void staged_use(Ctx *c, const Inst *x) {
  const Inst *r = x->op == OP_repeat_out ? x->in[0] : x;
  if (c->map[x->id] || r->op != OP_repeat)
    return;
  Stage *st = (Stage *)stage_of(c, r);
  if (!st)
    return;
  int carry = (int)ir_get_int(r, "carry", 1);
  for (int k = 0; !st->sent && k < carry; k++)
    st->out[k] = emit_p2p(c, OP_bcast, st->out[k], st->axis, st->tail, 0, r->loc);
  if (!st->sent)
    st->out[0]->name = r->name;
  st->sent = true;
  c->map[x->id] = st->out[x == r ? 0 : ir_get_int(x, "index", 0)];
}

/* x, device c->dev's copy of i, a block of i's value: a dropout (or an
 * attention that drops) names its block's place in the whole mask (`at`);
 * a block of a block (a micro-batch's) lies in the outer whole. */
static void place_dropout(Ctx *c, const Inst *i, Inst *x) {
  Type whole, local;
  int64_t at[2 * IR_MAX_RANK] = {0}, begin[IR_MAX_RANK] = {0};
  if (!ir_dropout_whole(i, &whole))
    return;
  int r = whole.rank, n;
  const int64_t *had = ir_get_ints(i, "at", &n);
  ir_local_type(c->m, i->shard, &i->type, c->dev, &local, begin);
  if (i->type.rank == 5)        /* sdpa_grad's dq, dk, dv stacked: then [B,H,T,D] */
    memmove(begin + 1, begin + 2, sizeof *begin * 3);
  else if (i->op == OP_sdpa_grad)   /* its dim 2 (dq, dk, dv) is whole */
    begin[2] = 0;
  if (i->op == OP_sdpa || i->op == OP_sdpa_grad)
    begin[3] = 0;              /* the result's D is the keys' Tk: whole */
  for (int d = 0; d < r; d++)
    at[d] = n ? had[d] : whole.dim[d], at[r + d] = (n ? had[r + d] : 0) + begin[d];
  ir_set_ints(x, "at", at, 2 * r);
}

static void emit(Ctx *c, const Inst *i) {
  Module *m = c->m;
  Inst *in[SHARD_MAX_IN];
  const Stage *st = i->op == OP_repeat_out ? stage_of(c, i->in[0]) : NULL;
  if (st && ir_get_int(i, "index", 0) < ir_get_int(i->in[0], "carry", 1))
    return;   /* a carry: broadcast when used */
  for (int k = 0; !st && k < i->nin; k++)
    staged_use(c, i->in[k]);
  if (i->op == OP_store || i->op == OP_output) {
    const Inst *x = i->in[0];
    Sharding to = *x->shard;
    Need need = {i, 0};
    if (i->op == OP_store) {
      const Global *g = ir_find_global(m, ir_get_str(i, "global", ""));
      DTC_ASSERT(g->shard);
      to = *g->shard;
    } else if (c->carry >= 0) {   /* a body's: a carried value ends as its arg reads it */
      int k = need.k = c->nout++;
      if (k < c->carry)
        to = *ir_func_arg(c->src, k)->shard;
    } else {
      to = *c->scalar;
    }
    in[0] = reshard(c, x, &to, i->loc, need);
    Inst *s = ir_new(c->f, i->op, i->loc, 1, in);
    ir_copy_attrs(s, i);
    ir_finish(s);
    return;
  }
  if ((i->op == OP_fold && fold_chain(c, i)) || input_block(c, i))
    return;
  const Sharding *cur[SHARD_MAX_IN];
  Sharding req[SHARD_MAX_IN];
  DTC_ASSERT(i->nin <= SHARD_MAX_IN);
  for (int k = 0; k < i->nin; k++)
    cur[k] = i->in[k]->shard;
  bool ok = shard_form(m, i, i->shard, cur, req);
  DTC_ASSERT(ok);
  for (int k = 0; i->op == OP_repeat && k < i->nin; k++) {
    const Type *t = &i->in[k]->type;
    if (ir_partial_axes(m, &req[k], t->rank) & ~ir_partial_axes(m, cur[k], t->rank)) {
      DTC_ASSERT(shard_zero(i->in[k]));   /* a partial sum starts from its blocks of zeros */
      req[k].partial = false;
      req[k].partial_axes = 0;
    }
  }
  for (int k = 0; !st && k < i->nin; k++)
    in[k] = reshard(c, i->in[k], &req[k], i->loc, (Need){i, k});
  if (i->op == OP_cross_entropy_grad && req[0].axis[0] >= 0)
    in[2] = scale(c, in[2], mean_share(i, in[0]), i->loc);
  if (i->op == OP_bce_with_logits_grad && mean_share(i, in[0]) != 1)
    in[2] = scale(c, in[2], mean_share(i, in[0]), i->loc);
  double *ratio = NULL;
  int pipe = i->op == OP_repeat ? shard_pipe_axis(i, cur, &ratio) : -1;
  if (pipe >= 0) {
    emit_stage(c, i, in, pipe, ratio);
    return;
  }
  if (st)
    in[0] = st->loop;
  Inst *x = heads_lower(m, c->f, i, in, c->dev);
  if (x) {
    x->shard = i->shard;
    x->name = i->name;
    c->map[i->id] = x;
    return;
  }
  x = ir_new(c->f, i->op, i->loc, i->nin, in);
  ir_copy_attrs(x, i);
  ring_lower(m, i, x);
  int tk = spmd_table_operand(i->op);
  if (tk >= 0 && !spmd_table_block(m, c->d, c->dev, i, tk, cur[tk], req, x, &c->failed))
    return;
  Type local;
  ir_local_type(m, i->shard, &i->type, c->dev, &local, NULL);
  if (i->op == OP_reshape || i->op == OP_broadcast || i->op == OP_gather_grad)
    ir_set_ints(x, "shape", local.dim, local.rank);
  if (i->op == OP_arg)
    x->type = local;
  if (!type_eq(&local, &i->type))
    place_dropout(c, i, x);
  ir_finish(x);
  DTC_ASSERT(type_eq(&x->type, &local));
  x->shard = i->shard;
  if (i->op == OP_cross_entropy || i->op == OP_mse || i->op == OP_mean ||
      i->op == OP_bce_with_logits) {
    double f = mean_share(i, in[0]);
    if (f != 1)
      x = scale(c, x, f, i->loc);
  }
  x->name = i->name;
  c->map[i->id] = x;
}

/* Device dev's copy @F.dev of src; a body's (its loop `by`) before the
 * functions that run it. */
static Func *copy_func(Ctx *c, Func *src, const Inst *by, int dev) {
  Module *m = c->m;
  c->dev = dev;
  c->f = ir_add_func(m, arena_printf(m->arena, "%s.%d", src->name, dev), src->loc);
  c->f->device = dev;
  c->f->body = src->body;
  c->src = src;
  c->carry = by ? ir_get_int(by, "carry", 1) : -1;
  c->nout = 0;
  c->memo.n = 0;
  c->stage.n = 0;
  ir_renumber(src);
  c->map = calloc((size_t)src->inst.n + 1, sizeof *c->map);
  DTC_ASSERT(c->map);
  for (int k = 0; k < src->inst.n && !c->failed; k++)
    emit(c, src->inst.a[k]);
  heads_prune(m, c->f);
  free(c->map);
  return c->f;
}

/* The global functions to copy: f and, depth first, the bodies its loops
 * run, each after the bodies it runs (by[k]: the loop of fns[k]). */
static void collect(Module *m, Func *f, Inst *loop, Func **fns, Inst **by, int *n) {
  for (int k = 0; k < *n; k++)
    if (fns[k] == f)
      return;
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_repeat)
      collect(m, ir_repeat_body(f->inst.a[k]), f->inst.a[k], fns, by, n);
  fns[*n] = f;
  by[(*n)++] = loop;
}

/* Whether a function other than the copied ones runs body b. */
static bool still_run(const Module *m, Func *const *fns, int nf, const Func *b) {
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    bool copied = f->device >= 0;
    for (int j = 0; j < nf; j++)
      copied |= fns[j] == f;
    for (int i = 0; !copied && i < f->inst.n; i++)
      if (f->inst.a[i]->op == OP_repeat && ir_repeat_body(f->inst.a[i]) == b)
        return true;
  }
  return false;
}

bool pass_spmd(Module *m, Diag *d, PassRun *run) {
  (void)run;
  if (m->mesh.n == 0)
    return true;
  int ndev = ir_mesh_devices(m), nerr = d->nerr;
  const char *names[] = {"train_step", "forward"};
  Func **fns = arena_alloc(m->arena, sizeof *fns * (size_t)(m->func.n + 1));
  Inst **by = arena_alloc(m->arena, sizeof *by * (size_t)(m->func.n + 1));
  int nf = 0;
  for (int k = 0; k < 2; k++) {
    Func *f = ir_find_func(m, names[k]);
    if (f && f->device < 0)
      collect(m, f, NULL, fns, by, &nf);
  }
  for (int k = 0; k < nf; k++)
    for (int j = 0; j < fns[k]->inst.n; j++) {
      const Inst *i = fns[k]->inst.a[j];
      if (!i->shard && i->type.dtype != DT_VOID) {
        diag_error(d, i->loc, "'%s' in @%s has no sharding; spmd runs after the sharding pass",
                   ir_ops[i->op].name, fns[k]->name);
        return false;
      }
    }
  for (int g = 0; g < m->global.n; g++)
    if (!m->global.a[g].shard) {
      diag_error(d, m->global.a[g].loc, "global '%s' has no sharding; spmd runs after the "
                 "sharding pass", m->global.a[g].name);
      return false;
    }
  if (!heads_check(m, d, fns, nf))
    return false;
  for (int g = 0; g < m->global.n; g++) {   /* inputs lie as their rows do (input_block) */
    Global *gl = &m->global.a[g];
    if (gl->kind != G_INPUT)
      continue;
    Sharding *rows = arena_alloc(m->arena, sizeof *rows);
    *rows = *gl->shard;
    for (int k = 1; k < gl->type.rank; k++)
      rows->axis[k] = -1, rows->ratio[k] = NULL;
    gl->shard = rows;
  }
  Ctx c = {.m = m, .d = d};
  c.scalar = arena_alloc(m->arena, sizeof *c.scalar);
  ir_shard_whole(c.scalar);
  int nold = m->func.n;
  Func **old = arena_alloc(m->arena, sizeof *old * (size_t)(nold + 1));
  memcpy(old, m->func.a, sizeof *old * (size_t)nold);
  /* copies[k * ndev + dev]: device dev's copy of fns[k] */
  Func **copies = arena_alloc(m->arena, sizeof *copies * (size_t)(nf * ndev + 1));
  for (int k = 0; k < nf; k++)
    for (int dev = 0; dev < ndev; dev++)
      copies[k * ndev + dev] = copy_func(&c, fns[k], by[k], dev);
  /* Each global function's copies take its place, or follow a body that a
   * function left global still runs. */
  Func **order = arena_alloc(m->arena, sizeof *order * (size_t)(m->func.n + 1));
  int n = 0;
  for (int j = 0; j < nold; j++) {
    int k = 0;
    while (k < nf && fns[k] != old[j])
      k++;
    if (k == nf || (old[j]->body && still_run(m, fns, nf, old[j])))
      order[n++] = old[j];
    for (int dev = 0; k < nf && dev < ndev; dev++)
      order[n++] = copies[k * ndev + dev];
  }
  memcpy(m->func.a, order, sizeof *order * (size_t)n);
  m->func.n = n;
  return d->nerr == nerr;
}

/* ---- the plan report ---- */

/* Onto out, as ir_bytes_str writes it. */
static void print_size(FILE *out, double b) {
  char buf[32];
  fputs(ir_bytes_str(b, buf, sizeof buf), out);
}

const char *spmd_device_name(const Module *m, int pos, char *buf, size_t n) {
  int dv = m->mesh.a[0].dev[pos];
  if (m->cluster && dv >= 0 && dv < m->cluster->dev.n)
    snprintf(buf, n, "%s", m->cluster->dev.a[dv].name);
  else
    snprintf(buf, n, "%d", dv);
  return buf;
}

static const Func *copy_of(const Module *m, const char *name, int dev) {
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    size_t n = strlen(name);
    if (f->device == dev && !strncmp(f->name, name, n) && f->name[n] == '.')
      return f;
  }
  return NULL;
}

/* The collectives of f, a loop's body's each time it runs (times: the
 * iterations f runs), onto out (NULL: counted only), into *total bytes and
 * *n collectives per step. */
static void report_func(FILE *out, const Module *m, const Func *f, int64_t times, double *total,
                        int64_t *n) {
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *c = f->inst.a[k];
    if (c->op == OP_repeat)
      report_func(out, m, ir_repeat_body(c), times * ir_get_int(c, "n", 1), total, n);
    if ((ir_ops[c->op].kind != K_COMM && c->op != OP_ring_sdpa && c->op != OP_ring_sdpa_lse &&
         c->op != OP_ring_sdpa_grad) || ir_lse_partner(c))   /* its ring_sdpa's */
      continue;
    double b = spmd_comm_bytes(c);
    *total += b * (double)times;
    *n += times;
    if (!out)
      continue;
    char t[128], at[300] = "?";
    if (c->loc.file)
      snprintf(at, sizeof at, "%s:%d", c->loc.file->name, c->loc.line);
    fprintf(out, "  %-14s over %-6s %-18s %-24s ", ir_ops[c->op].name,
            m->mesh.a[0].axis_name[ir_get_int(c, "axis", 0)], type_str(&c->in[0]->type, t, sizeof t),
            at);
    print_size(out, b);
    if (ir_attr(c, "method"))
      fprintf(out, " by %s", dtrt_comm_method_names[ir_get_int(c, "method", 0)]);
    if (ir_get_int(c, "wire", DT_WIRE_F32) != DT_WIRE_F32)
      fprintf(out, " in %s", dtrt_wire_names[ir_get_int(c, "wire", 0)]);
    if (times > 1)
      fprintf(out, ", %lld times (in @%s)", (long long)times, f->name);
    fputc('\n', out);
  }
}

double spmd_step_bytes(const Module *m) {
  const Func *f = copy_of(m, "train_step", 0);
  double total = 0;
  int64_t n = 0;
  if (f)
    report_func(NULL, m, f, 1, &total, &n);
  return total;
}

static void report_collectives(FILE *out, const Module *m, const char *name) {
  const Func *f = copy_of(m, name, 0);
  if (!f)
    return;
  double total = 0;
  int64_t n = 0;
  fprintf(out, "collectives of @%s, in order (device 0's blocks; bytes each device sends):\n",
          name);
  report_func(out, m, f, 1, &total, &n);
  fprintf(out, "  %lld collective%s, ", (long long)n, n == 1 ? "" : "s");
  print_size(out, total);
  fputs(" per step\n", out);
}

/* The k-th forward loop of device dev's step that runs as pipeline stages
 * (over *axis), NULL past the last. */
static const Inst *stage_loop(const Module *m, int dev, int k, int *axis) {
  const Func *f = copy_of(m, "train_step", dev);
  for (int i = 0; f && i < f->inst.n; i++) {
    const Inst *r = f->inst.a[i];
    const Sharding *cur[SHARD_MAX_IN];
    if (r->op != OP_repeat || ir_get_int(r, "reverse", 0))
      continue;
    for (int q = 0; q < r->nin; q++)
      cur[q] = r->in[q]->shard;
    double *ratio;
    if ((*axis = shard_pipe_axis(r, cur, &ratio)) >= 0 && k-- == 0)
      return r;
  }
  return NULL;
}

/* Which layers each stage runs, the micro-batches, their order
 * (passes/schedule.c), the most whose saved activations a stage holds at
 * once (stage 0's), and the idle share of a wave for equal stage times:
 * (stages - 1) / (micro-batches + stages - 1) under either order. */
static void report_stages(FILE *out, const Module *m, int ndev) {
  int mb = m->microbatches > 1 ? m->microbatches : 1, axis;
  char dn[64];
  for (int k = 0; stage_loop(m, 0, k * mb, &axis); k++) {
    const Inst *r0 = stage_loop(m, 0, k * mb, &axis);
    int p = m->mesh.a[0].axis_size[axis];
    fprintf(out, "pipeline stages over %s, loop at %s:%d:", m->mesh.a[0].axis_name[axis],
            r0->loc.file ? r0->loc.file->name : "?", r0->loc.line);
    for (int dev = 0; dev < ndev; dev++) {
      const Inst *r = stage_loop(m, dev, k * mb, &axis);
      int64_t first = ir_get_int(r, "first", 0), n = ir_get_int(r, "n", 0);
      fprintf(out, "%s %s layers %lld-%lld", dev ? "," : "", spmd_device_name(m, dev, dn, sizeof dn),
              (long long)first, (long long)(first + n - 1));
    }
    bool f1b = mb > 1 && m->schedule == PIPE_1F1B;
    fprintf(out, "\n  schedule: %d micro-batch%s of %lld rows, %s; at most %d micro-batch%s' "
            "activations live on a stage; idle %d/%d of each wave with equal stage times\n",
            mb, mb == 1 ? "" : "es", (long long)(r0->nin ? r0->in[0]->type.dim[0] : 0),
            f1b ? "1F1B: stage s runs stages - s - 1 forward ones, then one forward and one "
                  "backward in turn" : "all forward then all backward",
            f1b && p < mb ? p : mb, (f1b && p < mb ? p : mb) == 1 ? "" : "es", p - 1, mb + p - 1);
  }
}

/* Under shard_state: each device's bytes of optimizer state against the
 * whole state's. */
static void report_state(FILE *out, const Module *m, int ndev) {
  double whole = 0;
  char dn[64];
  for (int g = 0; g < m->global.n; g++)
    if (m->global.a[g].kind == G_STATE)
      whole += type_bytes(&m->global.a[g].type);
  fprintf(out, "optimizer state split over %s (shard_state), of ",
          m->mesh.a[0].axis_name[m->state_axis]);
  print_size(out, whole);
  fputs(":", out);
  for (int dev = 0; dev < ndev; dev++) {
    double b = 0;
    for (int g = 0; g < m->global.n; g++)
      if (m->global.a[g].kind == G_STATE) {
        Type t = ir_global_type_on(m, &m->global.a[g], dev);
        b += type_bytes(&t);
      }
    fprintf(out, "%s %s ", dev ? "," : "", spmd_device_name(m, dev, dn, sizeof dn));
    print_size(out, b);
    fprintf(out, " (%.3f)", whole > 0 ? b / whole : 0);
  }
  fputc('\n', out);
}

void spmd_report(FILE *out, const Module *m) {
  if (!m->mesh.n)
    return;
  const Mesh *mesh = &m->mesh.a[0];
  int ndev = ir_mesh_devices(m);
  char b1[256], b2[128], dn[64];
  fprintf(out, "sharding plan of %s on mesh %s[", m->name, mesh->name);
  for (int a = 0; a < mesh->naxis; a++)
    fprintf(out, "%s%s = %d", a ? ", " : "", mesh->axis_name[a], mesh->axis_size[a]);
  fputs("] over", out);
  for (int k = 0; k < ndev; k++)
    fprintf(out, "%s %s", k ? "," : "", spmd_device_name(m, k, dn, sizeof dn));
  fputs("\n", out);
  static const char *kinds[] = {"input", "param", "buffer", "state"};
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    fprintf(out, "  %-5s %-12s %-16s %-28s", kinds[gl->kind], gl->name,
            type_str(&gl->type, b2, sizeof b2),
            gl->shard ? ir_shard_str(m, gl->shard, gl->type.rank, b1, sizeof b1) : "whole");
    bool same = true;
    Type t0 = ir_global_type_on(m, gl, 0);
    for (int dev = 1; dev < ndev; dev++) {
      Type t = ir_global_type_on(m, gl, dev);
      same &= type_eq(&t, &t0);
    }
    if (same)
      fprintf(out, " every device %s\n", type_str(&t0, b2, sizeof b2));
    else
      for (int dev = 0; dev < ndev; dev++) {
        Type t = ir_global_type_on(m, gl, dev);
        fprintf(out, "%s%s %s", dev ? ", " : " ", spmd_device_name(m, dev, dn, sizeof dn),
                type_str(&t, b2, sizeof b2));
      }
    if (!same)
      fputc('\n', out);
  }
  if (m->state_sharded)
    report_state(out, m, ndev);
  spmd_report_tables(out, m, copy_of(m, "train_step", 0), copy_of(m, "forward", 0), ndev);
  report_stages(out, m, ndev);
  heads_report(out, m);
  report_collectives(out, m, "train_step");
  report_collectives(out, m, "forward");
}
