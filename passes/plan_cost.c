/* plan_cost.c: the planner's estimate of one choice of forms on a mesh of
 * any number of axes, and the linear programs that choose its ratios.
 *
 * The sharding pass propagates the forms through the global step; walking
 * it in order, every reshard the spmd pass would insert (shard_plan) costs
 * comm_best over each group of the axis it runs on (the slowest group), each
 * member with its own block, and ends a segment, since every device waits
 * there for the others. An op's work, its result's bytes and each operand's
 * bytes (sim_compute_parts) take, on device d, the product of d's ratios over
 * the axes they are split over; the rest of the op takes all of its time on
 * every device. With t[s][M] the seconds of segment s that scale over the
 * axes M, the step is
 *
 *   collectives + sum over s of max over d (sum over M of t[s][M] share(d, M)),
 *
 * a pipeline's segments weighted as Est.w says. Memory is counted as the
 * memory plan counts it, before fusion. For one axis x, with the others'
 * ratios fixed, every term is linear in x's ratios: GLPK minimises the step
 * over them (one variable per class of equal indices: equal devices along the
 * other axes), each between one element of the shortest split and what every
 * device's memory holds. On more than one axis, the axes are solved in turn,
 * twice. */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

/* The axes s splits type t over. */
static unsigned split_mask(const Sharding *s, const Type *t) {
  unsigned mask = 0;
  for (int d = 0; s && d < t->rank; d++)
    if (s->axis[d] >= 0)
      mask |= 1u << s->axis[d];
  return mask;
}

/* The axes over which t sharded by s holds a share of the work: split or partial. */
static unsigned work_mask(const Module *m, const Sharding *s, const Type *t) {
  return split_mask(s, t) | ir_partial_axes(m, s, t->rank);
}

/* The index of axis *x where sharding s of t places a dimension whole (its
 * ratios one device's alone: a table on one device, `on dp[1]`); -1: none. */
static int placed_at(const Planner *p, const Sharding *s, const Type *t, int *x) {
  for (int d = 0; s && d < t->rank; d++)
    if (s->axis[d] >= 0 && s->axis[d] < p->naxis) {
      int i = ir_placed(s->ratio[d], p->size[s->axis[d]]);
      if (i >= 0) {
        *x = s->axis[d];
        return i;
      }
    }
  return -1;
}

/* Index i's ratio on axis x. */
static double ratio_at(const Planner *p, const Ratios R, int x, int i) {
  return R[x] ? R[x][i] : 1.0 / p->size[x];
}

double plan_share(const Planner *p, int d, unsigned mask, const Ratios R) {
  double s = 1;
  for (int x = 0; x < p->naxis; x++)
    if (mask >> x & 1)
      s *= ratio_at(p, R, x, p->coord[d * IR_MAX_MESH_AXES + x]);
  return s;
}

/* ---- the walk ---- */

static void new_segment(Planner *p, Est *e) {
  e->nseg++;
  vec_push(p->m->arena, &p->w, 1.0);
  vec_push(p->m->arena, &p->pipe, -1);
  for (int k = 0; k < NMASK * p->nclass; k++)
    vec_push(p->m->arena, &p->t, 0.0);
}

static double *seg(Planner *p, int s, unsigned mask) {
  return p->t.a + ((size_t)s * NMASK + mask) * (size_t)p->nclass;
}

/* The next mask after M (from -1) that segment s uses; NMASK: none. */
static unsigned next_mask(const Est *e, int s, int M) {
  uint32_t left = e->used[s] >> (M + 1) << (M + 1);
  return left ? (unsigned)__builtin_ctz(left) : NMASK;
}

/* Whether step st of a reshard of x is a gradient exchange that `exchange =
 * bf16` sends in bf16 (passes/comm.c): a sum over an axis that splits the
 * batch of a value of the step that reaches an update only. */
static bool in_bf16(const Planner *p, const Inst *x, const ShardStep *st) {
  const Func *f = p->step;
  return p->m->exchange == DT_WIRE_BF16 && p->reach &&
         (st->op == OP_all_reduce || st->op == OP_reduce_scatter) && x->id < f->inst.n &&
         f->inst.a[x->id] == x && p->reach[x->id] == COMM_REACH_UPDATE &&
         (comm_batch_axes(p->m) >> st->axis & 1u);
}

/* Seconds of step st of a reshard of x: the slowest group of its axis. */
static double step_cost(Planner *p, const Inst *x, const ShardStep *st) {
  Module *m = p->m;
  int ax = st->axis, k = p->size[ax];
  bool half = in_bf16(p, x, st);
  int *members = malloc(sizeof *members * (size_t)k);
  double *b = malloc(sizeof *b * (size_t)k);
  int64_t *len = malloc(sizeof *len * (size_t)k);
  DTC_ASSERT(members && b && len);
  double worst = 0;
  for (int d = 0; d < p->ndev; d++) {
    if (p->coord[d * IR_MAX_MESH_AXES + ax])
      continue;   /* not the first of its group */
    ir_mesh_group(p->mesh, d, ax, members);
    double bytes = 0;
    Type local;
    if (st->op == OP_all_reduce) {
      ir_local_type(m, &st->before, &x->type, d, &local, NULL);
      bytes = type_bytes(&local);
    } else if (st->op == OP_all_to_all) {
      bytes = shard_step_bytes(m, &x->type, st);
    } else {   /* each member's block along the split dimension */
      const Sharding *split = st->op == OP_all_gather ? &st->before : &st->after;
      ir_local_type(m, split, &x->type, d, &local, NULL);
      ir_dim_blocks(m, x->type.dim[st->dim], split->ratio[st->dim], k, len);
      local.dim[st->dim] = 1;
      double unit = type_bytes(&local);
      for (int j = 0; j < k; j++)
        b[j] = (double)len[j] * unit;
    }
    double pack = 0;
    if (half) { /* 2 bytes an element on the wire, and the packing pass */
      ir_local_type(m, &st->before, &x->type, d, &local, NULL);
      pack = comm_pack_time(m, (double)type_elems(&local), members, k);
      bytes /= 2;
      for (int j = 0; j < k && st->op == OP_reduce_scatter; j++)
        b[j] /= 2;
    }
    worst = fmax(worst, comm_best(m, st->op, bytes, b, members, k, NULL) + pack);
  }
  free(members);
  free(b);
  free(len);
  return worst;
}

static void reshard(Planner *p, Est *e, const Inst *x, const Sharding *to, double times);

/* x's sharding with its sequence (dimension t) split over its heads (t - 1)
 * instead, as passes/heads.c swaps it. */
static Sharding by_heads(const Inst *x, int t) {
  Sharding s = *x->shard;
  s.axis[t - 1] = s.axis[t], s.ratio[t - 1] = s.ratio[t];
  s.axis[t] = -1, s.ratio[t] = NULL;
  return s;
}

/* Attention op i whose sequence is split over axis ax, its keys split as
 * `keys`. Under `attention = heads`, the all_to_alls that swap each of its
 * operands and its result between the sequence's split and the heads'
 * (passes/heads.c), each value once, as reshards are counted. Else the
 * ring's transfers on the slowest group, as a collective (the estimate does
 * not overlap them with the products; the simulator does). */
static void attention_cost(Planner *p, Est *e, const Inst *i, const Sharding *keys, int ax,
                           double times) {
  if (p->m->attn_heads) {
    for (int k = 0; k < i->nin; k++)
      if (i->in[k]->shard && i->in[k]->type.rank >= 3 &&
          i->in[k]->shard->axis[i->in[k]->type.rank == 5 ? 3 : 2] == ax) {
        Sharding h = by_heads(i->in[k], i->in[k]->type.rank == 5 ? 3 : 2);
        reshard(p, e, i->in[k], &h, times);
      }
    Sharding h = by_heads(i, i->type.rank == 5 ? 3 : 2);
    reshard(p, e, i, &h, times);
    return;
  }
  const Type *t = &i->in[1]->type;
  int k = p->size[ax];
  int *members = malloc(sizeof *members * (size_t)k);
  int64_t *len = malloc(sizeof *len * (size_t)k);
  DTC_ASSERT(members && len && t->rank == 4);
  ir_dim_blocks(p->m, t->dim[2], keys->ratio[2], k, len);
  bool causal = ir_get_int(i, "causal", 0);
  int64_t most = ring_most(len, k, causal);
  double worst = 0;
  for (int d = 0; d < p->ndev; d++) {
    if (p->coord[d * IR_MAX_MESH_AXES + ax])
      continue;   /* not the first of its group */
    ir_mesh_group(p->mesh, d, ax, members);
    Type local;
    ir_local_type(p->m, keys, t, d, &local, NULL);
    local.dim[2] = most;
    worst = fmax(worst, ring_time(p->m, i->op, causal, type_bytes(&local), members, k));
  }
  free(members);
  free(len);
  e->comm += times * worst;
  e->ncoll++;
  new_segment(p, e);
}

/* Costs the collectives that take x to sharding `to`, once per value and
 * target, as the spmd pass makes them. */
static void reshard(Planner *p, Est *e, const Inst *x, const Sharding *to, double times) {
  Module *m = p->m;
  if (shard_same(m, &x->type, x->shard, to))
    return;
  for (int k = 0; k < p->memo.n; k++)
    if (p->memo_x.a[k] == x && shard_same(m, &x->type, &p->memo.a[k], to))
      return;
  vec_push(m->arena, &p->memo, *to);
  vec_push(m->arena, &p->memo_x, x);
  ShardStep st[SHARD_MAX_STEPS];
  int n = shard_plan(m, &x->type, x->shard, to, st);
  for (int s = 0; s < n; s++) {
    if (st[s].op == OP_shard_slice)
      continue;
    /* deterministic mode: a sum of parts whose split depends on the layout
     * is an error at spmd, so no plan */
    if (m->det_pieces > 1 && (st[s].op == OP_all_reduce || st[s].op == OP_reduce_scatter))
      e->comm = INFINITY;
    e->comm += times * step_cost(p, x, &st[s]);
    e->ncoll++;
    new_segment(p, e);
  }
}

/* Op i's seconds into the current segment: its work over the axes `work`,
 * its result's bytes over `out`, operand k's over in[k]. */
static void add_compute(Planner *p, Est *e, const Inst *i, const unsigned *in, unsigned out,
                        unsigned work, double times) {
  unsigned masks[18];
  int nm = 0;
  bool in_split[16];
  masks[nm++] = work;
  masks[nm++] = out;
  for (int k = 0; k < i->nin && ir_ops[i->op].kind != K_ELEM; k++)
    masks[nm++] = in[k];
  for (int q = 0; q < p->nclass; q++) {
    double whole, share;
    for (int k = 0; k < i->nin; k++)
      in_split[k] = in[k] != 0;
    sim_compute_parts(p->m, i, in_split, out != 0, work != 0, p->rep[q], &whole, &share);
    seg(p, e->nseg - 1, 0)[q] += times * whole;
    /* each axis set its own share: one set (always so on one axis) takes
     * share whole, several are asked for one by one */
    unsigned one = 0;
    bool several = false;
    for (int j = 0; j < nm; j++) {
      several |= masks[j] && one && masks[j] != one;
      one = masks[j] ? masks[j] : one;
    }
    if (!several) {
      if (one)
        seg(p, e->nseg - 1, one)[q] += times * share;
      continue;
    }
    for (unsigned M = 1; M < NMASK; M++) {
      bool any = false;
      for (int k = 0; k < i->nin; k++)
        in_split[k] = in[k] == M;
      for (int j = 0; j < nm; j++)
        any |= masks[j] == M;
      if (!any)
        continue;
      sim_compute_parts(p->m, i, in_split, out == M, work == M, p->rep[q], &whole, &share);
      seg(p, e->nseg - 1, M)[q] += times * share;
    }
  }
}

/* What the last op added to the current segment (beyond `was`, the
 * segment before it) moved to the devices at index at of axis x alone. */
static void place(Planner *p, Est *e, const double *was, int x, int at) {
  for (unsigned M = 0; M < NMASK; M++) {
    double *now = seg(p, e->nseg - 1, M), *t = NULL;
    for (int q = 0; q < p->nclass; q++) {
      double dt = now[q] - was[M * (unsigned)p->nclass + (unsigned)q];
      if (dt == 0)
        continue;
      if (!t) {
        t = arena_alloc(p->m->arena, sizeof *t * (size_t)p->nclass);
        vec_push(p->m->arena, &p->placed, ((Placed){e->nseg - 1, x, at, M, t}));
      }
      t[q] = dt;
      now[q] -= dt;
    }
  }
  p->placed_axes |= 1u << x;
}

static void note_len(Planner *p, Est *e, const Sharding *s, const Type *t) {
  for (int d = 0; s && d < t->rank; d++) {
    int x = s->axis[d];
    if (x >= 0 && x < p->naxis && ir_placed(s->ratio[d], p->size[x]) < 0 &&
        (!e->min_len[x] || t->dim[d] < e->min_len[x]))
      e->min_len[x] = t->dim[d];
  }
}

/* Values that take memory of their own: not aliases (loads of globals,
 * reshapes) nor immediates. */
static bool owns_memory(const Inst *i) {
  return i->type.dtype != DT_VOID && i->op != OP_load && i->op != OP_const && i->op != OP_lr &&
         i->op != OP_reshape;
}

/* Whether loop r is the backward of the loop the estimate recomputes: it
 * reads that loop's saved values. */
static bool redoes(const Planner *p, const Inst *r) {
  for (int j = 0; p->remat && ir_get_int(r, "reverse", 0) && j < r->nin; j++)
    if (r->in[j]->op == OP_repeat_out && r->in[j]->in[0] == p->remat)
      return true;
  return false;
}

/* The bytes value i holds: a recomputing loop saves only each iteration's
 * carried value, in place of the values its backward reads. */
static double held(const Planner *p, const Inst *i) {
  if (i->op != OP_repeat_out || i->in[0] != p->remat || ir_get_int(i, "index", 0) < 1)
    return type_bytes(&i->type);
  return ir_get_int(i, "index", 0) > 1 ? 0 : (double)ir_get_int(p->remat, "n", 1) *
                                             type_bytes(&p->remat->in[0]->type);
}

static void live_walk(Planner *p, const Func *f, const double *g, double *peak);

/* The memory a loop takes while it runs, as the memory plan's scratch
 * region: two buffers per carried value and the body's fullest point, by
 * the axes they are split over, into sc. A loop of @train_step cut into
 * micro-batches runs on one, and its carried values live beside their join. */
static void loop_scratch(Planner *p, const Inst *r, bool in_step, double *sc) {
  double none[NMASK] = {0};
  memset(sc, 0, sizeof *sc * NMASK);
  live_walk(p, ir_repeat_body(r), none, sc);
  double part = in_step && p->mb > 1 ? 1.0 / p->mb : 1;
  double carried = part < 1 ? 2 * part + 1 : 2;
  double redo[NMASK] = {0};
  if (redoes(p, r))   /* the forward recomputed beside the backward's body */
    live_walk(p, ir_repeat_body(p->remat), none, redo);
  for (int M = 0; M < NMASK; M++)
    sc[M] = (sc[M] + redo[M]) * part;
  for (int k = 0; k < ir_get_int(r, "carry", 1); k++) {
    const Inst *x = r->in[k];
    sc[split_mask(x->shard, &x->type)] += carried * type_bytes(&x->type);
  }
}

/* Walks f's values as the memory plan counts memory (a value lives from its
 * definition to its last use, a loop's scratch at the loop), before fusion
 * keeps some values in registers, on top of g: the fullest point's bytes
 * into peak (each set of axes its own maximum), and for the step every
 * point into the planner's memory points. */
static void live_walk(Planner *p, const Func *f, const double *g, double *peak) {
  Module *m = p->m;
  bool step = f == p->step;
  double live[NMASK] = {0}, sc[NMASK];
  ir_renumber((Func *)f);
  int *last = calloc((size_t)f->inst.n + 1, sizeof *last);
  DTC_ASSERT(last);
  for (int k = 0; k < f->inst.n; k++) {
    last[k] = k;
    for (int j = 0; j < f->inst.a[k]->nin; j++)
      last[f->inst.a[k]->in[j]->id] = k;
  }
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    memset(sc, 0, sizeof sc);
    if (i->op == OP_repeat)
      loop_scratch(p, i, step, sc);
    if (owns_memory(i))
      live[split_mask(i->shard, &i->type)] += held(p, i);
    if (owns_memory(i) || i->op == OP_repeat)
      for (int M = 0; M < NMASK; M++) {
        double at = g[M] + live[M] + sc[M];
        peak[M] = fmax(peak[M], at);
        if (step)
          vec_push(m->arena, &p->mem, at);
      }
    for (int j = 0; j <= i->nin; j++) {   /* the operands, then i itself */
      const Inst *x = j < i->nin ? i->in[j] : i;
      if (last[x->id] == k && owns_memory(x)) {
        live[split_mask(x->shard, &x->type)] -= held(p, x);
        last[x->id] = -1;
      }
    }
  }
  free(last);
}

/* Whether memory point a holds at least point b's bytes by every set of axes. */
static bool holds(const double *a, const double *b) {
  for (int M = 0; M < NMASK; M++)
    if (a[M] < b[M])
      return false;
  return true;
}

/* The n points of pt ([n][NMASK]) that no other holds (the first of equal
 * ones), in their order, compacted at its start; their number. The rest
 * bound nothing: a device's bytes at a point grow with each set's bytes. */
static int pareto(double *pt, int n) {
  int *live = malloc(sizeof *live * ((size_t)n + 1)), nl = 0;   /* the points kept so far */
  DTC_ASSERT(live);
  for (int t = 0; t < n; t++) {
    const double *x = pt + (size_t)t * NMASK;
    bool held = false;
    int k = 0;
    for (int j = 0; j < nl; j++) {
      const double *y = pt + (size_t)live[j] * NMASK;
      held |= holds(y, x);
      if (held || !holds(x, y))
        live[k++] = live[j];
    }
    nl = k;
    if (!held)
      live[nl++] = t;
  }
  for (int j = 0; j < nl; j++)
    memmove(pt + (size_t)j * NMASK, pt + (size_t)live[j] * NMASK, sizeof *pt * NMASK);
  free(live);
  return nl;
}

/* The memory points of the step: at each definition, the globals (inputs
 * whole: every rank is given the whole batch) and the values live there. */
static void memory_points(Planner *p, Est *e) {
  Module *m = p->m;
  double g[NMASK] = {0}, peak[NMASK] = {0};
  for (int k = 0; k < m->global.n; k++) {
    const Global *gl = &m->global.a[k];
    int x = -1, at = gl->kind == G_INPUT ? -1 : placed_at(p, gl->shard, &gl->type, &x);
    for (int d = 0; at >= 0 && d < p->ndev; d++)   /* a table and its state on one device */
      p->placed_mem[d] += p->coord[d * IR_MAX_MESH_AXES + x] == at ? type_bytes(&gl->type) : 0;
    if (at < 0)
      g[gl->kind == G_INPUT ? 0 : split_mask(gl->shard, &gl->type)] += type_bytes(&gl->type);
    note_len(p, e, gl->shard, &gl->type);
  }
  p->mem.n = 0;
  for (int M = 0; M < NMASK; M++)
    vec_push(m->arena, &p->mem, g[M]);
  live_walk(p, p->step, g, peak);
  e->nmem = pareto(p->mem.a, p->mem.n / NMASK);
  e->mem = p->mem.a;
}

/* What a loop's operand k must be: its body arg's sharding, behind a whole
 * leading dimension for a stacked one. */
static Sharding loop_operand(const Inst *r, int k) {
  const Inst *a = ir_func_arg(ir_repeat_body(r), k);
  Sharding s;
  ir_shard_whole(&s);
  if (!a->shard)
    return s;
  if (ir_repeat_operand_kind(r, k) != 2)
    return *a->shard;
  s = *a->shard;
  memmove(s.axis + 1, s.axis, sizeof s.axis[0] * (IR_MAX_RANK - 1));
  memmove(s.ratio + 1, s.ratio, sizeof s.ratio[0] * (IR_MAX_RANK - 1));
  s.axis[0] = -1;
  s.ratio[0] = NULL;
  return s;
}

/* comm_cost of op over the groups of axis x, the slowest: a send (bcast) of
 * `bytes` (a value of type t under s on the sender, over mb) from index
 * `from` to `from` + 1 (every index) of each group. */
static double axis_cost(Planner *p, Op op, int x, int from, const Type *t, const Sharding *s,
                        int mb) {
  int k = p->size[x], *members = malloc(sizeof *members * (size_t)k);
  double *none = calloc((size_t)k, sizeof *none), worst = 0;
  DTC_ASSERT(members && none);
  for (int d = 0; d < p->ndev; d++) {
    if (p->coord[d * IR_MAX_MESH_AXES + x])
      continue;
    ir_mesh_group(p->mesh, d, x, members);
    Type local;
    ir_local_type(p->m, s, t, members[op == OP_send ? from : k - 1], &local, NULL);
    double part = type_bytes(&local) / mb;
    worst = fmax(worst, op == OP_send ? comm_cost(p->m, op, part, none, members + from, 2, 0)
                                      : comm_cost(p->m, op, part, none, members, k, 0));
  }
  free(members);
  free(none);
  return worst;
}

static void cost_walk(Planner *p, Est *e, const Func *f, double times, int carry);

/* Loop r's body, times its trip count, and for the backward of a loop that
 * recomputes, that loop's forward body again. */
static void walk_body(Planner *p, Est *e, const Inst *r, double times) {
  double n = (double)ir_get_int(r, "n", 1);
  cost_walk(p, e, ir_repeat_body(r), times * n, (int)ir_get_int(r, "carry", 1));
  if (redoes(p, r))
    cost_walk(p, e, ir_repeat_body(p->remat), times * n, (int)ir_get_int(p->remat, "carry", 1));
}

/* Loop r as pipeline stages over axis x: index c runs r[c] of its n
 * iterations on each of M micro-batches, stage after stage. A wave takes
 * every stage's time for one micro-batch in turn (the first reaching the
 * last), then M - 1 times the slowest stage's: with t[c] = r[c] n W[c] for
 * the whole batch (W[c] the body's time on c), (1/M) sum t[c] + ((M-1)/M)
 * max t[c], in segments of its own (Est.w). A middle stage receives and
 * sends each micro-batch's carried value, and the sends wait for their
 * receivers: 2M + k - 2 sends lie on the wave's critical path, over the
 * boundaries between stages in turn, each on its own links (the mean of their
 * costs each); and the last stage broadcasts each micro-batch's result. */
static void pipe_cost(Planner *p, Est *e, const Inst *r, int x, double times) {
  int mb = p->mb > 1 ? p->mb : 1, k = p->size[x];
  e->layers = ir_get_int(r, "n", 1);
  e->pipe_axis = x;
  new_segment(p, e);
  int s0 = e->nseg - 1;
  walk_body(p, e, r, times);
  /* Every stage's work scales with its layers. Cut into micro-batches, the
   * loop runs each micro-batch's rows whole on every device of the stage
   * (the pass cuts the global batch, whose blocks the other axes split), so
   * its work no longer scales with their ratios. */
  unsigned keep = mb > 1 ? 1u << x : NMASK - 1;
  for (int s = s0; s < e->nseg; s++) {
    for (unsigned M = 0; M < NMASK; M++) {
      unsigned to = (M | 1u << x) & keep;
      for (int q = 0; q < p->nclass && to != M; q++) {
        seg(p, s, to)[q] += seg(p, s, M)[q];
        seg(p, s, M)[q] = 0;
      }
    }
    p->w.a[s] = (mb - 1.0) / mb;
    p->pipe.a[s] = x;
  }
  const Inst *v = r->in[0];
  double hops = 0;   /* a send over every boundary, each on its own links */
  for (int c = 0; c + 1 < k; c++)
    hops += axis_cost(p, OP_send, x, c, &v->type, v->shard, mb);
  e->comm += times * (k > 1 ? (2 * mb + k - 2) * hops / (k - 1) : 0) +
             times * mb * axis_cost(p, OP_bcast, x, 0, &v->type, v->shard, mb);
  e->ncoll += 2 * mb;
  new_segment(p, e);
}

/* Costs function f, times `times`: a loop costs its body once, times its
 * trip count, so planning does not grow with depth. A body's collectives
 * end segments as the caller's do; max over devices of a segment repeated n
 * times is n times its max, so one copy of each segment stands for all. A
 * body's first `carry` outputs end as its args read them, as spmd makes them
 * (carry < 0 outside a body). */
static void cost_walk(Planner *p, Est *e, const Func *f, double times, int carry) {
  Module *m = p->m;
  Sharding whole;
  ir_shard_whole(&whole);
  int nout = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_store) {
      reshard(p, e, i->in[0], ir_global_of(i)->shard, times);
      continue;
    }
    if (i->op == OP_output) {
      if (!f->body)
        reshard(p, e, i->in[0], &whole, times);
      else if (nout < carry)
        reshard(p, e, i->in[0], ir_func_arg(f, nout)->shard, times);
      nout++;
      continue;
    }
    if (i->op == OP_repeat) {
      double *ratio;
      int px = shard_pipe_axis(i, NULL, &ratio);
      for (int j = 0; j < i->nin; j++) {
        Sharding req = loop_operand(i, j);
        if (px < 0 || ir_repeat_operand_kind(i, j) != 2)   /* a stage holds its layers */
          reshard(p, e, i->in[j], &req, times);
      }
      if (px >= 0)
        pipe_cost(p, e, i, px, times);
      else
        walk_body(p, e, i, times);
      continue;
    }
    if (!i->shard)
      continue;
    const Sharding *cur[16];
    Sharding req[16];
    DTC_ASSERT(i->nin <= 16);
    for (int j = 0; j < i->nin; j++)
      cur[j] = i->in[j]->shard;
    if (!shard_form(m, i, i->shard, cur, req))
      continue;
    unsigned work = work_mask(m, i->shard, &i->type), in[16], out = split_mask(i->shard, &i->type);
    int px = -1, at = placed_at(p, i->shard, &i->type, &px);
    for (int j = 0; j < i->nin; j++) {
      reshard(p, e, i->in[j], &req[j], times);
      work |= work_mask(m, &req[j], &i->in[j]->type);
      in[j] = split_mask(&req[j], &i->in[j]->type);
      at = at >= 0 ? at : placed_at(p, &req[j], &i->in[j]->type, &px);
    }
    double *was = NULL;
    if (at >= 0) {   /* all of it on the device that holds the table */
      size_t n = (size_t)NMASK * (size_t)p->nclass;
      was = malloc(sizeof *was * n);
      DTC_ASSERT(was);
      memcpy(was, seg(p, e->nseg - 1, 0), sizeof *was * n);
      work &= ~(1u << px), out &= ~(1u << px);
      for (int j = 0; j < i->nin; j++)
        in[j] &= ~(1u << px);
    }
    int ring = ring_axis(i);
    if (ring >= 0 && !m->attn_heads)
      e->ring = ring;
    if (ring >= 0 && m->attn_heads) {   /* heads split in ratios that give each a head */
      int hd = i->type.rank == 5 ? 2 : 1;
      int64_t h = i->type.dim[hd];
      e->heads_axis = ring;
      e->heads_taken |= i->shard && i->shard->axis[hd] >= 0;
      e->heads = e->heads && e->heads < h ? e->heads : h;
      e->min_len[ring] = e->min_len[ring] && e->min_len[ring] < h ? e->min_len[ring] : h;
    }
    add_compute(p, e, i, in, out, work, times);
    if (was) {
      place(p, e, was, px, at);
      free(was);
    }
    if (ring >= 0 && !ir_lse_partner(i))   /* else its partner's ring writes it */
      attention_cost(p, e, i, &req[1], ring, times);
    note_len(p, e, i->shard, &i->type);
  }
}

/* The estimate of the propagated step into e. */
static void estimate(Planner *p, Est *e) {
  memset(e, 0, sizeof *e);
  e->pipe_axis = e->ring = e->heads_axis = -1;
  p->t.n = p->w.n = p->pipe.n = p->memo.n = p->memo_x.n = p->placed.n = 0;
  p->placed_axes = 0;
  memset(p->placed_mem, 0, sizeof *p->placed_mem * (size_t)p->ndev);
  new_segment(p, e);
  cost_walk(p, e, p->step, 1, -1);
  memory_points(p, e);
  p->used.n = 0;
  for (int s = 0; s < e->nseg; s++) {
    uint32_t u = 0;
    for (unsigned M = 0; M < NMASK; M++)
      for (int q = 0; q < p->nclass && !(u >> M & 1); q++)
        u |= (uint32_t)(seg(p, s, M)[q] != 0) << M;
    vec_push(p->m->arena, &p->used, u);
  }
  e->used = p->used.a;
  e->placed = p->placed.a;
  e->nplaced = p->placed.n;
  e->placed_mem = p->placed_mem;
  e->t = p->t.a;
  e->w = p->w.a;
  e->pipe = p->pipe.a;
}

/* ---- the step and the bounds ---- */

/* v, seconds or bytes that scale with the ratios of the axes in M, on
 * device d under R: into *c1 as a multiple of d's ratio on axis x where M
 * has x, else into *c0. */
static void add_term(const Planner *p, int d, int x, unsigned M, double v, const Ratios R,
                     double *c0, double *c1) {
  if (x >= 0 && M >> x & 1)
    *c1 += v * plan_share(p, d, M & ~(1u << x), R);
  else
    *c0 += v * plan_share(p, d, M, R);
}

/* Device d's seconds in segment s: c0 + c1 r, with r its ratio on axis x
 * (x < 0: all in c0). */
static void seg_terms(const Planner *p, const Est *e, int s, int d, int x, const Ratios R,
                      double *c0, double *c1) {
  *c0 = *c1 = 0;
  for (unsigned M = next_mask(e, s, -1); M < NMASK; M = next_mask(e, s, (int)M)) {
    double t = e->t[((size_t)s * NMASK + M) * (size_t)p->nclass + (size_t)p->cls[d]];
    if (t)
      add_term(p, d, x, M, t, R, c0, c1);
  }
  for (int k = 0; k < e->nplaced; k++) {
    const Placed *pl = &e->placed[k];
    if (pl->seg == s && p->coord[d * IR_MAX_MESH_AXES + pl->x] == pl->i)
      add_term(p, d, x, pl->M, pl->t[p->cls[d]], R, c0, c1);
  }
}

double plan_step(const Planner *p, const Est *e, const Ratios R, double *busy) {
  double t = e->comm, *stage = malloc(sizeof *stage * SHARD_MAX_AXIS);
  DTC_ASSERT(stage);
  for (int d = 0; busy && d < p->ndev; d++)
    busy[d] = 0;
  for (int s = 0; s < e->nseg; s++) {
    int px = e->pipe[s];
    double worst = 0, turn = 0;
    for (int c = 0; px >= 0 && c < p->size[px]; c++)
      stage[c] = 0;
    for (int d = 0; d < p->ndev; d++) {
      double x, none;
      seg_terms(p, e, s, d, -1, R, &x, &none);
      worst = fmax(worst, x);
      if (px >= 0) {
        double *st = &stage[p->coord[d * IR_MAX_MESH_AXES + px]];
        *st = fmax(*st, x);
      }
      if (busy)
        busy[d] += x;
    }
    for (int c = 0; px >= 0 && c < p->size[px]; c++)
      turn += stage[c];
    t += e->w[s] * worst + (1 - e->w[s]) * turn;
  }
  free(stage);
  return t;
}

/* Device d's bytes at memory point t: c0 + c1 r, with r its ratio on axis x
 * (x < 0: all in c0). */
static void point_terms(const Planner *p, const Est *e, int t, int d, int x, const Ratios R,
                        double *c0, double *c1) {
  *c0 = *c1 = 0;
  for (unsigned M = 0; M < NMASK; M++)
    if (e->mem[(size_t)t * NMASK + M])
      add_term(p, d, x, M, e->mem[(size_t)t * NMASK + M], R, c0, c1);
}

double plan_memory(const Planner *p, const Est *e, const Ratios R, int d) {
  double most = 0, c0, c1;
  for (int t = 0; t < e->nmem; t++) {
    point_terms(p, e, t, d, -1, R, &c0, &c1);
    most = fmax(most, c0);
  }
  return most + e->placed_mem[d];
}

/* Whether the parallel block's forms, as last propagated, are those of trial t. */
static bool propagated_as(const Module *m, const Sharding *const *forms) {
  for (int g = 0; g < m->global.n; g++) {
    const Sharding *a = m->global.a[g].shard, *b = forms[g];
    if (!a || !b) {
      if (a != b)
        return false;
      continue;
    }
    if (a->partial != b->partial)
      return false;
    for (int d = 0; d < m->global.a[g].type.rank; d++)
      if (a->axis[d] != b->axis[d])
        return false;
  }
  return true;
}

void plan_bounds(const Planner *p, const Est *e, const Ratios R, int x, double *lo, double *hi) {
  int k = p->size[x];
  bool tried = false;   /* these forms: their trials' bounds, else the model's shortfall */
  for (int i = 0; i < k; i++)
    hi[i] = 1;
  for (int t = 0; t < p->ntrial; t++)
    if (propagated_as(p->m, p->trial[t].forms)) {
      tried = true;
      for (int d = 0; d < p->ndev; d++)
        hi[p->coord[d * IR_MAX_MESH_AXES + x]] =
            fmin(hi[p->coord[d * IR_MAX_MESH_AXES + x]], p->trial[t].cap[d]);
    }
  for (int d = 0; d < p->ndev; d++) {
    double *h = &hi[p->coord[d * IR_MAX_MESH_AXES + x]], c0, c1;
    double mem = (double)p->m->cluster->dev.a[p->mesh->dev[d]].mem /
                 (tried ? 1 : fmax(1, p->under[d]));
    for (int t = 0; t < e->nmem; t++) {
      point_terms(p, e, t, d, x, R, &c0, &c1);
      double room = mem - c0 - e->placed_mem[d];
      *h = fmin(*h, c1 > 0 ? fmin(1, room / c1) : (room >= 0 ? 1 : -1));
    }
  }
  int64_t n = e->min_len[x];
  *lo = n ? fmin(1.0 / (double)n + 1.0 / RATIO_UNITS, 1.0 / k) : 0;
}

/* ---- the linear programs ---- */

/* The classes of axis x's indices: equal devices at every other coordinate
 * (class of index i into vc[i], each class's first index into vrep, its
 * count into vn); their number. */
static int index_classes(const Planner *p, int x, int *vc, int *vrep, int *vn) {
  int k = p->size[x], per = p->ndev / k, nv = 0;
  if (p->placed_axes >> x & 1) {   /* each index's placed tables price its share */
    for (int i = 0; i < k; i++)
      vc[i] = vrep[i] = i, vn[i] = 1;
    return k;
  }
  int *dev = malloc(sizeof *dev * (size_t)p->ndev);   /* index i's devices in order */
  int *at = calloc((size_t)k, sizeof *at);
  DTC_ASSERT(dev && at);
  for (int d = 0; d < p->ndev; d++) {
    int i = p->coord[d * IR_MAX_MESH_AXES + x];
    dev[i * per + at[i]++] = d;
  }
  for (int i = 0; i < k; i++) {
    int v = 0;
    for (; v < nv; v++) {
      bool same = true;
      for (int j = 0; j < per && same; j++)
        same = p->cls[dev[i * per + j]] == p->cls[dev[vrep[v] * per + j]];
      if (same)
        break;
    }
    if (v == nv)
      vrep[nv] = i, vn[nv++] = 0;
    vc[i] = v;
    vn[v]++;
  }
  free(dev);
  free(at);
  return nv;
}

/* A row `var - c1 r_v >= c0` of the program, unless one like it is there
 * (rows[first..] this group's). */
typedef struct Row { int col, v; double c0, c1; } Row;
typedef VEC(Row) Rows;

static void add_row(glp_prob *lp, Rows *rows, int first, Row r, double scale, Arena *a) {
  for (int j = first; j < rows->n; j++)
    if (rows->a[j].col == r.col && rows->a[j].v == r.v && rows->a[j].c0 == r.c0 &&
        rows->a[j].c1 == r.c1)
      return;
  vec_push(a, rows, r);
  int ind[3] = {0, r.col, r.v + 1};
  double val[3] = {0, 1, -r.c1 / scale};
  int row = glp_add_rows(lp, 1);
  glp_set_mat_row(lp, row, 2, ind, val);
  glp_set_row_bnds(lp, row, GLP_LO, r.c0 / scale, 0);
}

/* Axis x's ratios into R[x] minimising the step under the other axes' R:
 * false when no ratios fit (the devices' memory is too small). Times are
 * scaled by the largest term so the simplex works on numbers near 1. */
static bool solve_axis(Planner *p, const Est *e, Ratios R, int x) {
  int k = p->size[x];
  int *vc = malloc(sizeof *vc * (size_t)k * 3), *vrep = vc + k, *vn = vc + 2 * k;
  double *hi = malloc(sizeof *hi * (size_t)k), *c0 = malloc(sizeof *c0 * (size_t)p->ndev * 2);
  double *c1 = c0 + p->ndev, lo, scale = 0;
  DTC_ASSERT(vc && hi && c0);
  int nv = index_classes(p, x, vc, vrep, vn);
  plan_bounds(p, e, R, x, &lo, hi);
  for (int s = 0; s < e->nseg; s++)
    for (int d = 0; d < p->ndev; d++)
      for (unsigned M = next_mask(e, s, -1); M < NMASK; M = next_mask(e, s, (int)M))
        if (M >> x & 1)
          scale = fmax(scale, e->t[((size_t)s * NMASK + M) * (size_t)p->nclass + (size_t)p->cls[d]] *
                                  plan_share(p, d, M & ~(1u << x), R));
  bool ok = true;
  if (scale <= 0) {   /* nothing split over x: its ratios change nothing */
    for (int i = 0; i < k; i++)
      R[x][i] = 1.0 / k;
    goto done;
  }
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_cols(lp, nv);
  for (int v = 0; v < nv; v++) {
    double h = 1;
    for (int i = 0; i < k; i++)
      h = vc[i] == v ? fmin(h, hi[i]) : h;
    if (h < lo) {
      glp_delete_prob(lp);
      ok = false;
      goto done;
    }
    glp_set_col_bnds(lp, v + 1, h > lo ? GLP_DB : GLP_FX, lo, h);
  }
  int *ind = malloc(sizeof *ind * (size_t)(nv + 1));
  double *val = malloc(sizeof *val * (size_t)(nv + 1));
  DTC_ASSERT(ind && val);
  for (int v = 0; v < nv; v++)
    ind[v + 1] = v + 1, val[v + 1] = vn[v];
  int row = glp_add_rows(lp, 1);
  glp_set_mat_row(lp, row, nv, ind, val);
  glp_set_row_bnds(lp, row, GLP_FX, 1, 1);
  free(ind);
  free(val);
  Rows rows = {0};
  Arena *a = arena_new();
  for (int s = 0; s < e->nseg; s++) {
    bool any = false;
    for (int d = 0; d < p->ndev; d++) {
      seg_terms(p, e, s, d, x, R, &c0[d], &c1[d]);
      any |= c1[d] > 0;
    }
    if (!any)
      continue;
    int T = glp_add_cols(lp, 1), px = e->pipe[s];
    glp_set_col_bnds(lp, T, GLP_LO, 0, 0);
    glp_set_obj_coef(lp, T, e->w[s]);
    rows.n = 0;
    for (int d = 0; d < p->ndev; d++)
      add_row(lp, &rows, 0, (Row){T, vc[p->coord[d * IR_MAX_MESH_AXES + x]], c0[d], c1[d]},
              scale, a);
    if (e->w[s] >= 1)
      continue;
    /* the pipeline's turn: each stage's slowest device. With one device a
     * stage on x, its term itself: (1 - w) count c1 r in the objective. */
    if (px == x && p->ndev == k) {
      for (int d = 0; d < p->ndev; d++)
        if (vrep[vc[d]] == d)
          glp_set_obj_coef(lp, vc[d] + 1, glp_get_obj_coef(lp, vc[d] + 1) +
                                              (1 - e->w[s]) * vn[vc[d]] * c1[d] / scale);
      continue;
    }
    int ng = px == x ? nv : p->size[px];
    for (int g = 0; g < ng; g++) {
      int U = glp_add_cols(lp, 1), first = rows.n;
      glp_set_col_bnds(lp, U, GLP_LO, 0, 0);
      glp_set_obj_coef(lp, U, (1 - e->w[s]) * (px == x ? vn[g] : 1));
      for (int d = 0; d < p->ndev; d++) {
        int i = p->coord[d * IR_MAX_MESH_AXES + x];
        if (px == x ? i == vrep[g] : p->coord[d * IR_MAX_MESH_AXES + px] == g)
          add_row(lp, &rows, first, (Row){U, vc[i], c0[d], c1[d]}, scale, a);
      }
    }
  }
  arena_free(a);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  ok = glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT;
  if (!ok) {   /* the simplex's perturbation can fail a feasible program: presolved again */
    parm.presolve = GLP_ON;
    ok = glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT;
  }
  for (int i = 0; ok && i < k; i++)
    R[x][i] = glp_get_col_prim(lp, vc[i] + 1);
  glp_delete_prob(lp);
done:
  free(vc);
  free(hi);
  free(c0);
  return ok;
}

/* ---- one choice ---- */

void plan_apply(Planner *p, Sharding **A) {
  Module *m = p->m;
  m->state_sharded = p->state >= 0;
  m->state_axis = p->state >= 0 ? p->state : 0;
  for (int g = 0; g < m->global.n; g++)
    m->global.a[g].shard = A[g];
  for (int k = 0; k < p->step->inst.n; k++)
    p->step->inst.a[k]->shard = NULL;
  Func *fwd = ir_find_func(m, "forward");
  for (int k = 0; fwd && fwd != p->step && fwd->device < 0 && k < fwd->inst.n; k++)
    fwd->inst.a[k]->shard = NULL;
}

double plan_evaluate(Planner *p, Sharding **A, bool even, Ratios R, Est *e) {
  Module *m = p->m;
  p->evals++;
  plan_apply(p, A);
  int nerr = p->quiet.nerr;
  p->propagated = pass_sharding(m, &p->quiet, NULL) && p->quiet.nerr == nerr;
  for (int x = 0; x < p->naxis; x++) {
    R[x] = arena_alloc(m->arena, sizeof *R[x] * (size_t)p->size[x]);
    for (int i = 0; i < p->size[x]; i++)
      R[x][i] = 1.0 / p->size[x];
  }
  if (!p->propagated)
    return INFINITY;
  estimate(p, e);
  for (int round = 0; !even && round < (p->naxis > 1 ? 2 : 1); round++)
    for (int x = 0; x < p->naxis; x++)
      if (p->size[x] > 1 && !solve_axis(p, e, R, x))
        return INFINITY;
  double *hi = malloc(sizeof *hi * SHARD_MAX_AXIS), lo;
  DTC_ASSERT(hi);
  bool fits = true;
  for (int x = 0; x < p->naxis && fits; x++) {
    plan_bounds(p, e, R, x, &lo, hi);
    for (int i = 0; i < p->size[x]; i++)
      fits &= !(R[x][i] > hi[i] + 1e-12 || hi[i] < 0);
    /* a pipeline's stages hold whole layers */
    int64_t room = 0;
    for (int i = 0; x == e->pipe_axis && i < p->size[x]; i++)
      room += (int64_t)floor(hi[i] * (double)e->layers + 1e-9);
    fits &= x != e->pipe_axis || room >= e->layers;
  }
  free(hi);
  /* attention by heads gives every device of its axis a head, of heads no
   * other axis splits (heads.c) */
  fits &= e->heads_axis < 0 || (e->heads >= p->size[e->heads_axis] && !e->heads_taken);
  /* nothing else splits over a pipeline's axis (spmd makes no such plan) */
  for (int g = 0; fits && e->pipe_axis >= 0 && g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    fits = !((gl->kind == G_PARAM || gl->kind == G_INPUT) && !p->stacked[g] &&
             split_mask(gl->shard, &gl->type) >> e->pipe_axis & 1);
  }
  return fits ? plan_step(p, e, R, NULL) : INFINITY;
}

/* Blocks of n summing to n in proportion to r, by largest remainder, each
 * within n hi[c] when it can be: a unit over a device's bound goes to the
 * device with the most room. */
static void round_within(int64_t n, const double *r, const double *hi, int k, int64_t *units) {
  ir_blocks(n, r, k, units);
  for (int c = 0; c < k; c++)
    while ((double)units[c] > floor(hi[c] * (double)n + 1e-9)) {
      int to = -1;
      double most = 0;
      for (int j = 0; j < k; j++) {
        double left = floor(hi[j] * (double)n + 1e-9) - (double)units[j];
        if (left >= 1 && (to < 0 || left > most))
          to = j, most = left;
      }
      if (to < 0)
        return;
      units[c]--, units[to]++;
    }
}

double *plan_round(Planner *p, const Est *e, int x, const double *r, const double *hi) {
  int k = p->size[x];
  int64_t *units = malloc(sizeof *units * (size_t)k);
  double *layers = malloc(sizeof *layers * (size_t)k);
  DTC_ASSERT(units && layers);
  /* each layer holds a large share of the memory; heads are whole */
  int64_t whole = x == e->pipe_axis && e->layers >= k ? e->layers
                  : x == e->heads_axis && e->heads >= k ? e->heads : 0;
  if (whole) {
    round_within(whole, r, hi, k, units);
    for (int j = 0; j < k; j++)
      layers[j] = (double)units[j] / (double)whole;
    r = layers;
  }
  round_within(RATIO_UNITS, r, hi, k, units);
  double *ratio = arena_alloc(p->m->arena, sizeof *ratio * (size_t)k);
  bool even = true;
  for (int j = 0; j < k; j++) {
    DTC_ASSERT(units[j] > 0);
    ratio[j] = (double)units[j] / RATIO_UNITS;
    even = even && units[j] == units[0];
  }
  free(units);
  free(layers);
  return even ? NULL : ratio;
}

static bool near(double x, double y, double spread) {
  return fabs(x - y) <= spread * fmax(fabs(x), fabs(y));
}

/* Whether the planner takes devices a and b for one kind (one class, one
 * ratio, a's figures): equal memory, and figures that differ by no more
 * than the spread the probe measured either with (equal ones, where it gave
 * none). Ranks sharing a core probe several percent apart; ratios fitted
 * to that noise would cost the slower a row. */
static bool alike(const Device *a, const Device *b) {
  double s = fmin(a->spread, b->spread);
  return a->mem == b->mem && near(a->gflops, b->gflops, s) && near(a->bw, b->bw, s) &&
         near(a->lat, b->lat, s);
}

bool plan_init(Planner *p, Module *m) {
  memset(p, 0, sizeof *p);
  if (!m->cluster || m->mesh.n != 1)
    return false;
  const Mesh *mesh = &m->mesh.a[0];
  const char *names[] = {"train_step", "forward"};
  for (int n = 0; n < COUNTOF(names) && !p->step; n++) {
    Func *f = ir_find_func(m, names[n]);
    p->step = f && f->device < 0 ? f : NULL;
  }
  p->m = m;
  p->mesh = mesh;
  p->naxis = mesh->naxis;
  p->ndev = 1;
  for (int x = 0; x < p->naxis; x++)
    p->ndev *= p->size[x] = mesh->axis_size[x];
  p->mb = m->microbatches > 1 ? m->microbatches : 1;
  p->state = p->user_state = m->state_sharded ? m->state_axis : -1;
  p->user_heads = m->attn_heads;
  p->heads_open = !m->attn_loc.file;
  p->user_wire = m->exchange;
  p->exchange_open = m->exchange_auto && m->train.loss && m->det_pieces <= 1 &&
                     m->train.opt != OPT_DEMO;   /* DeMo exchanges momenta, not gradients */
  if (!p->step || p->ndev > SHARD_MAX_AXIS || p->ndev < 1)
    return false;
  if (ir_func_is(p->step, "train_step"))
    p->reach = comm_reach(m->arena, m, p->step);
  Arena *a = m->arena;
  p->coord = arena_alloc(a, sizeof *p->coord * (size_t)p->ndev * IR_MAX_MESH_AXES);
  p->placed_mem = arena_alloc(a, sizeof *p->placed_mem * (size_t)p->ndev);
  p->cls = arena_alloc(a, sizeof *p->cls * (size_t)p->ndev);
  p->rep = arena_alloc(a, sizeof *p->rep * (size_t)p->ndev);
  p->under = arena_alloc(a, sizeof *p->under * (size_t)p->ndev);
  p->room = 64;
  p->trial = arena_alloc(a, sizeof *p->trial * (size_t)p->room);
  for (int d = 0; d < p->ndev; d++) {
    ir_mesh_coords(mesh, d, p->coord + d * IR_MAX_MESH_AXES);
    p->under[d] = 1;
    const Device *dv = &m->cluster->dev.a[mesh->dev[d]];
    int q = 0;
    while (q < p->nclass && !alike(&m->cluster->dev.a[mesh->dev[p->rep[q]]], dv))
      q++;
    if (q == p->nclass)
      p->rep[p->nclass++] = d;
    p->cls[d] = q;
  }
  int ng = m->global.n;
  p->stacked = arena_alloc(a, sizeof *p->stacked * (size_t)(ng + 1));
  p->table = arena_alloc(a, sizeof *p->table * (size_t)(ng + 1));
  for (int k = 0; k < p->step->inst.n; k++) {
    const Inst *r = p->step->inst.a[k];
    for (int j = 0; r->op == OP_repeat && j < r->nin; j++)
      if (ir_repeat_operand_kind(r, j) == 2 && r->in[j]->op == OP_load)
        p->stacked[ir_global_of(r->in[j]) - m->global.a] = true;
    if (r->op == OP_embedding_bag && r->in[1]->op == OP_load)
      p->table[ir_global_of(r->in[1]) - m->global.a] = true;
  }
  p->user = arena_alloc(a, sizeof *p->user * (size_t)(ng + 1));
  p->var = arena_alloc(a, sizeof *p->var * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    p->user[g] = gl->shard;
    if (!gl->shard && (gl->kind == G_INPUT || gl->kind == G_PARAM))
      p->var[p->nvar++] = g;
  }
  diag_init_quiet(&p->quiet);
  return true;
}
