/* plan.c: the planner. On a one-axis mesh, `plan auto` chooses the forms of
 * the step (which inputs and params are split, along which dimension, or
 * whole) and the per-device ratios of the splits, so that devices of unequal
 * speed finish together and the collectives the forms need cost least: HAP's
 * search over forms, each choice costed with the ratios of a linear program
 * (GLPK) that minimises the predicted step (docs/ARCHITECTURE.md, Planner).
 *
 * Requires: @train_step (passes/autodiff.c; @forward for an inference-only
 * model), the parallel block's shardings (Global.shard), no propagation yet.
 * Guarantees: with `plan even`, every annotated split is even (Sharding.ratio
 * NULL); with `plan auto` on a one-axis mesh with a cluster, Global.shard
 * holds the chosen forms of inputs and params (NULL: left to propagation),
 * every split carrying the planned ratios (multiples of 1e-6 summing to 1, the
 * same for every split, NULL when even); a parallel block that writes ratios,
 * `plan explicit`, and modules without a mesh or cluster are left as they
 * are. A two-axis mesh is plan_mesh.c's. PassRun.plan keeps the record for --emit=plan.
 * Deterministic: the search visits choices in a fixed order and keeps the
 * first of equal costs.
 *
 * The cost of one choice of forms: the sharding pass propagates them through
 * the global step; walking it in order, every reshard the spmd pass would
 * insert (shard_plan) costs comm_best of its bytes over the mesh, and ends a
 * segment, since every device waits there for the others. An op whose
 * operands or result are split (or partial) takes r[c] of its FLOPs on device
 * c, and r[c] of the bytes of each of its split values (sim_compute_parts);
 * whole values and ops cost all of their time on every device. With a[s][c]
 * the time of segment s that does not scale and b[s][c] the whole time of
 * what does, the step is
 *
 *   sum over s of max over c (a[s][c] + b[s][c] r[c])  +  collectives,
 *
 * minimised by the linear program over r (sum r = 1, every device keeping at
 * least one element of the shortest split and no more than its memory holds).
 * Devices of equal speed and memory share one ratio variable. */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "passes.h"

/* Ratios are written in millionths, so their %g text parses back exactly and
 * sums to 1. */
#define RATIO_UNITS 1000000
#define MAX_SWEEPS 4        /* passes over the choices of each start */
#define IMPROVES 1e-6       /* a relative fall in cost that counts */
#define NOISE_FLOOR 0.05    /* the least gain over the simpler plan that counts */

typedef struct Cost {
  int nseg;
  double *a, *b;            /* [nseg * nclass] seconds */
  double *w;                /* [nseg] the weight of the segment's slowest device: 1, or
                               (M - 1) / M for a pipeline's loop over M micro-batches,
                               whose other 1 / M is every stage's time in turn */
  double comm;              /* seconds of collectives */
  int ncoll;
  /* Memory, at each value's definition: the bytes whole on every device and
   * the bytes split by ratio of the globals and of the values live there. */
  int nmem;
  double *fixed, *scaled;
  int64_t min_len;          /* the shortest split dimension; 0: nothing split */
  int64_t layers;           /* a pipeline's layers: its loop's trip count; 0: none */
} Cost;

/* A plan compiled on trial: its forms as propagated, and each device's
 * largest ratio for them, where its memory plan exceeded the device's
 * memory. */
typedef struct Trial {
  const Sharding **forms;
  double cap[SHARD_MAX_AXIS];   /* 1: no bound */
} Trial;

typedef struct Planner {
  Module *m;
  Func *step;
  int k, nclass;
  int cls[SHARD_MAX_AXIS];      /* device -> its class (equal speed and memory) */
  int rep[SHARD_MAX_AXIS];      /* class -> its first device */
  int count[SHARD_MAX_AXIS];    /* class -> its devices */
  int members[SHARD_MAX_AXIS];  /* 0 .. k-1 */
  Sharding **user;              /* by global: the parallel block's sharding */
  int *var, nvar;               /* the globals whose forms the search chooses */
  bool *stacked;                /* by global: a stacked operand of a loop of the step */
  VEC(double) a, b, w, fixed, scaled;
  int mb;                       /* micro-batches a pipeline's loop runs in */
  const Trial *trial;           /* earlier plans' memory plans, which bound the ratios
                                   of the forms they had */
  int ntrial;
  double under[SHARD_MAX_AXIS]; /* how far the memory model fell short on each device in
                                   a trial: its memory counts as that much smaller (>= 1) */
  Sharding **chosen;            /* the plan's forms, ... */
  const double *predicted;      /* ... its memory on each device, as modelled, ... */
  const double *ratio;          /* ... its ratios ... */
  int64_t unit;                 /* ... and its shortest split dimension */
  VEC(Sharding) memo;           /* reshards costed in this walk ... */
  VEC(const Inst *) memo_x;     /* ... and of which value */
  VEC(Sharding **) seen;        /* every global's propagated form of each choice costed
                                   with planned ratios ... */
  VEC(double) seen_t;           /* ... and its predicted step */
  int evals;
  bool propagated;              /* the last evaluate's forms propagated */
  Diag quiet;
} Planner;

static bool split_on(const Sharding *s, int rank) {
  for (int d = 0; s && d < rank; d++)
    if (s->axis[d] == 0)
      return true;
  return false;
}

/* Does value type t sharded by s hold a share of the work: split or partial. */
static bool shares(const Module *m, const Sharding *s, const Type *t) {
  return split_on(s, t->rank) || ir_partial_axes(m, s, t->rank);
}

static double bytes_of(const Type *t) {
  return (double)type_elems(t) * (double)dtype_size(t->dtype);
}

static const Func *find_step(const Module *m) {
  const char *names[] = {"train_step", "forward"};
  for (int n = 0; n < COUNTOF(names); n++) {
    const Func *f = ir_find_func(m, names[n]);
    if (f && f->device < 0)
      return f;
  }
  return NULL;
}

/* ---- the cost of one choice of forms ---- */

static void new_segment(Planner *p, Cost *c) {
  c->nseg++;
  vec_push(p->m->arena, &p->w, 1.0);
  for (int q = 0; q < p->nclass; q++) {
    vec_push(p->m->arena, &p->a, 0.0);
    vec_push(p->m->arena, &p->b, 0.0);
  }
}

/* Costs the collectives that take x to sharding `to`, once per value and
 * target, as the spmd pass makes them. */
static void reshard(Planner *p, Cost *c, const Inst *x, const Sharding *to, double times) {
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
      c->comm = INFINITY;
    double b[SHARD_MAX_AXIS], bytes = 0;
    Type local;
    ir_local_type(m, &st[s].before, &x->type, 0, &local, NULL);
    if (st[s].op == OP_all_reduce) {
      bytes = bytes_of(&local);
    } else if (st[s].op == OP_all_to_all) {
      bytes = shard_step_bytes(m, &x->type, &st[s]);
    } else {
      const Sharding *split = st[s].op == OP_all_gather ? &st[s].before : &st[s].after;
      int64_t len[SHARD_MAX_AXIS];
      ir_dim_blocks(p->m, x->type.dim[st[s].dim], split->ratio[st[s].dim], p->k, len);
      double unit = bytes_of(&x->type) / (double)x->type.dim[st[s].dim];
      for (int j = 0; j < p->k; j++)
        b[j] = (double)len[j] * unit;
    }
    c->comm += times * comm_best(m, st[s].op, bytes, b, p->members, p->k, NULL);
    c->ncoll++;
    new_segment(p, c);
  }
}

static void add_compute(Planner *p, Cost *c, const Inst *i, const bool *in_split, bool out_split,
                        bool split, double times) {
  size_t at = (size_t)(c->nseg - 1) * (size_t)p->nclass;
  for (int q = 0; q < p->nclass; q++) {
    double whole, share;
    sim_compute_parts(p->m, i, in_split, out_split, split, p->rep[q], &whole, &share);
    p->a.a[at + q] += times * whole;
    p->b.a[at + q] += times * share;
  }
}

static void note_len(Cost *c, const Sharding *s, const Type *t) {
  for (int d = 0; s && d < t->rank; d++)
    if (s->axis[d] == 0 && (!c->min_len || t->dim[d] < c->min_len))
      c->min_len = t->dim[d];
}

/* Values that take memory of their own: not aliases (loads of globals,
 * reshapes) nor immediates. */
static bool owns_memory(const Inst *i) {
  return i->type.dtype != DT_VOID && i->op != OP_load && i->op != OP_const && i->op != OP_lr &&
         i->op != OP_reshape;
}

static void live_walk(Planner *p, const Func *f, double gf, double gs, double *pf, double *ps);

/* The memory a loop takes while it runs, as the memory plan's scratch
 * region: two buffers per carried value and the body's fullest point, whole
 * (into *f) or split (*s). A loop of @train_step cut into micro-batches
 * runs on one, and its carried values live beside their join. */
static void loop_scratch(Planner *p, const Inst *r, bool in_step, double *f, double *s) {
  *f = *s = 0;
  live_walk(p, ir_repeat_body(r), 0, 0, f, s);
  double part = in_step && p->mb > 1 ? 1.0 / p->mb : 1;
  double carried = part < 1 ? 2 * part + 1 : 2;
  *f *= part, *s *= part;
  for (int k = 0; k < ir_get_int(r, "carry", 1); k++) {
    const Inst *x = r->in[k];
    *(x->shard && split_on(x->shard, x->type.rank) ? s : f) += carried * bytes_of(&x->type);
  }
}

/* Walks f's values as the memory plan counts memory (a value lives from its
 * definition to its last use, a loop's scratch at the loop), before fusion
 * keeps some values in registers, on top of gf whole and gs split bytes:
 * the fullest point's whole and split bytes into *pf and *ps (each its own
 * maximum), and for the step every point into the planner's memory points. */
static void live_walk(Planner *p, const Func *f, double gf, double gs, double *pf, double *ps) {
  Module *m = p->m;
  bool step = f == p->step;
  double lf = 0, ls = 0;
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
    double sf = 0, ss = 0;
    if (i->op == OP_repeat)
      loop_scratch(p, i, step, &sf, &ss);
    if (owns_memory(i))
      *(i->shard && split_on(i->shard, i->type.rank) ? &ls : &lf) += bytes_of(&i->type);
    if (owns_memory(i) || i->op == OP_repeat) {
      *pf = fmax(*pf, gf + lf + sf);
      *ps = fmax(*ps, gs + ls + ss);
      if (step) {
        vec_push(m->arena, &p->fixed, gf + lf + sf);
        vec_push(m->arena, &p->scaled, gs + ls + ss);
      }
    }
    for (int j = 0; j <= i->nin; j++) {   /* the operands, then i itself */
      const Inst *x = j < i->nin ? i->in[j] : i;
      if (last[x->id] == k && owns_memory(x)) {
        *(x->shard && split_on(x->shard, x->type.rank) ? &ls : &lf) -= bytes_of(&x->type);
        last[x->id] = -1;
      }
    }
  }
  free(last);
}

/* The memory points of the step: at each definition, the globals (inputs
 * whole: every rank is given the whole batch) and the values live there,
 * whole or split. */
static void memory_points(Planner *p, Cost *c) {
  Module *m = p->m;
  double gf = 0, gs = 0, pf = 0, ps = 0;
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    bool split = gl->kind != G_INPUT && split_on(gl->shard, gl->type.rank);
    *(split ? &gs : &gf) += bytes_of(&gl->type);
    note_len(c, gl->shard, &gl->type);
  }
  p->fixed.n = p->scaled.n = 0;
  vec_push(m->arena, &p->fixed, gf);
  vec_push(m->arena, &p->scaled, gs);
  live_walk(p, p->step, gf, gs, &pf, &ps);
  c->nmem = p->fixed.n;
  c->fixed = p->fixed.a;
  c->scaled = p->scaled.a;
}

/* What a loop's operand k must be: its body arg's sharding, behind a whole
 * leading dimension for a stacked one. */
static Sharding loop_operand(const Inst *r, int k) {
  const Inst *a = ir_func_arg(ir_repeat_body(r), k);
  Sharding s;
  memset(&s, 0, sizeof s);
  for (int d = 0; d < IR_MAX_RANK; d++)
    s.axis[d] = -1;
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

static void cost_walk(Planner *p, Cost *c, const Func *f, double times);

/* Loop r as pipeline stages over the mesh axis: device c runs r[c] of its n
 * iterations on each of M micro-batches, stage after stage. A wave takes
 * every stage's time for one micro-batch in turn (the first reaching the
 * last), then M - 1 times the slowest stage's: with t[c] = r[c] n W[c] for
 * the whole batch (W[c] the body's time on c), (1/M) sum t[c] + ((M-1)/M)
 * max t[c], in a segment of its own (Cost.w). A middle stage receives and
 * sends each micro-batch's carried value, and the sends wait for their
 * receivers: 2M + k - 2 sends lie on the wave's critical path, over the
 * boundaries between stages in turn, each on its own link (the mean of their
 * costs each); and the last stage broadcasts each micro-batch's result. */
static void pipe_cost(Planner *p, Cost *c, const Inst *r, double times) {
  int mb = p->mb > 1 ? p->mb : 1;
  c->layers = ir_get_int(r, "n", 1);
  new_segment(p, c);
  int s = c->nseg - 1;
  cost_walk(p, c, ir_repeat_body(r), times * (double)ir_get_int(r, "n", 1));
  for (int t = s; t < c->nseg; t++) {
    for (int q = 0; q < p->nclass; q++) {
      size_t at = (size_t)t * (size_t)p->nclass + (size_t)q;
      p->b.a[at] += p->a.a[at];
      p->a.a[at] = 0;
    }
    p->w.a[t] = (mb - 1.0) / mb;
  }
  double part = bytes_of(&r->in[0]->type) / mb, none[SHARD_MAX_AXIS] = {0};
  double hops = 0;  /* a send over every boundary, each on its own link */
  for (int d = 0; d + 1 < p->k; d++)
    hops += comm_cost(p->m, OP_send, part, none, p->members + d, 2, 0);
  c->comm += times * (p->k > 1 ? (2 * mb + p->k - 2) * hops / (p->k - 1) : 0) +
             times * mb * comm_cost(p->m, OP_bcast, part, none, p->members, p->k, 0);
  c->ncoll += 2 * mb;
  new_segment(p, c);
}

/* Costs function f, times `times`: a loop costs its body once, times its
 * trip count, so planning does not grow with depth. A body's collectives
 * end segments as the caller's do; max over devices of a segment repeated n
 * times is n times its max, so one copy of each segment stands for all. */
static void cost_walk(Planner *p, Cost *c, const Func *f, double times) {
  Module *m = p->m;
  Sharding whole;
  memset(&whole, 0, sizeof whole);
  for (int d = 0; d < IR_MAX_RANK; d++)
    whole.axis[d] = -1;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_store) {
      reshard(p, c, i->in[0], ir_global_of(i)->shard, times);
      continue;
    }
    if (i->op == OP_output) {
      if (!f->body)
        reshard(p, c, i->in[0], &whole, times);
      continue;
    }
    if (i->op == OP_repeat) {
      double *ratio;
      bool pipe = shard_pipe_axis(i, NULL, &ratio) == 0;
      for (int j = 0; j < i->nin; j++) {
        Sharding req = loop_operand(i, j);
        if (!pipe || ir_repeat_operand_kind(i, j) != 2)   /* a stage holds its layers */
          reshard(p, c, i->in[j], &req, times);
      }
      if (pipe)
        pipe_cost(p, c, i, times);
      else
        cost_walk(p, c, ir_repeat_body(i), times * (double)ir_get_int(i, "n", 1));
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
    bool split = shares(m, i->shard, &i->type), in_split[16];
    for (int j = 0; j < i->nin; j++) {
      reshard(p, c, i->in[j], &req[j], times);
      split |= shares(m, &req[j], &i->in[j]->type);
      in_split[j] = split_on(&req[j], i->in[j]->type.rank);
    }
    add_compute(p, c, i, in_split, split_on(i->shard, i->type.rank), split, times);
    note_len(c, i->shard, &i->type);
  }
}

/* The cost model of the propagated step. */
static void cost_build(Planner *p, Cost *c) {
  memset(c, 0, sizeof *c);
  p->a.n = p->b.n = p->w.n = p->memo.n = p->memo_x.n = 0;
  new_segment(p, c);
  cost_walk(p, c, p->step, 1);
  memory_points(p, c);
  c->a = p->a.a;
  c->b = p->b.a;
  c->w = p->w.a;
}

/* Whether the globals' propagated shardings split the same dimensions over
 * the same axes as forms, whatever the ratios. */
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

/* The largest ratio device memory mem allows at memory point t (negative
 * when none does). */
static double point_bound(const Cost *c, int t, double mem) {
  double room = mem - c->fixed[t];
  return c->scaled[t] > 0 ? fmin(1, room / c->scaled[t]) : (room >= 0 ? 1 : -1);
}

/* The bounds of every device's ratio: at least lo, so each keeps one element
 * of the shortest split; at most hi[c], what its memory holds at every
 * memory point. */
static double ratio_bounds(const Planner *p, const Cost *c, double *hi) {
  const Mesh *mesh = &p->m->mesh.a[0];
  bool tried = false;   /* these forms: their trials' bounds, else the model's shortfall */
  for (int d = 0; d < p->k; d++)
    hi[d] = 1;
  for (int t = 0; t < p->ntrial; t++)
    if (propagated_as(p->m, p->trial[t].forms)) {
      tried = true;
      for (int d = 0; d < p->k; d++)
        hi[d] = fmin(hi[d], p->trial[t].cap[d]);
    }
  for (int d = 0; d < p->k; d++) {
    double mem = (double)p->m->cluster->dev.a[mesh->dev[d]].mem / (tried ? 1 : fmax(1, p->under[d]));
    for (int t = 0; t < c->nmem; t++)
      hi[d] = fmin(hi[d], point_bound(c, t, mem));
  }
  return c->min_len ? fmin(1.0 / (double)c->min_len + 1.0 / RATIO_UNITS, 1.0 / p->k) : 0;
}

/* The step with ratios r[device] (NULL: even); each device's busy time into
 * busy (may be NULL). */
static double step_time(const Planner *p, const Cost *c, const double *r, double *busy) {
  double t = c->comm;
  for (int d = 0; busy && d < p->k; d++)
    busy[d] = 0;
  for (int s = 0; s < c->nseg; s++) {
    double worst = 0, turn = 0;
    for (int d = 0; d < p->k; d++) {
      int q = p->cls[d];
      double share = c->b[s * p->nclass + q] * (r ? r[d] : 1.0 / p->k);
      double x = c->a[s * p->nclass + q] + share;
      worst = fmax(worst, x);
      turn += share;
      if (busy)
        busy[d] += x;
    }
    t += c->w[s] * worst + (1 - c->w[s]) * turn;
  }
  return t;
}

/* The linear program: minimise sum w_s T_s + (1 - w_s) sum_q count_q b[s][q] r_q
 * over segments with split work, T_s >= a[s][q] + b[s][q] r_q, sum count_q
 * r_q = 1, lo <= r_q <= hi_q. False
 * when it has no solution (the devices' memory is too small). Times are
 * scaled by the largest b so the simplex works on numbers near 1. */
static bool solve_lp(const Planner *p, const Cost *c, double lo, const double *hi, double *r) {
  int nq = p->nclass;
  double scale = 0;
  for (int s = 0; s < c->nseg * nq; s++)
    scale = fmax(scale, c->b[s]);
  if (scale <= 0) {   /* nothing split: the ratios change nothing */
    for (int d = 0; d < p->k; d++)
      r[d] = 1.0 / p->k;
    return true;
  }
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_cols(lp, nq);
  for (int q = 0; q < nq; q++) {
    double h = hi[p->rep[q]];
    if (h < lo) {
      glp_delete_prob(lp);
      return false;
    }
    glp_set_col_bnds(lp, q + 1, h > lo ? GLP_DB : GLP_FX, lo, h);
  }
  int *ind = malloc(sizeof *ind * (size_t)(nq + 2));
  double *val = malloc(sizeof *val * (size_t)(nq + 2));
  DTC_ASSERT(ind && val);
  for (int q = 0; q < nq; q++)
    ind[q + 1] = q + 1, val[q + 1] = p->count[q];
  int row = glp_add_rows(lp, 1);
  glp_set_mat_row(lp, row, nq, ind, val);
  glp_set_row_bnds(lp, row, GLP_FX, 1, 1);
  for (int s = 0; s < c->nseg; s++) {
    const double *a = c->a + s * nq, *b = c->b + s * nq;
    bool any = false;
    for (int q = 0; q < nq; q++)
      any |= b[q] > 0;
    if (!any)
      continue;
    int t = glp_add_cols(lp, 1);
    glp_set_col_bnds(lp, t, GLP_LO, 0, 0);
    glp_set_obj_coef(lp, t, c->w[s]);
    for (int q = 0; q < nq && c->w[s] < 1; q++)
      glp_set_obj_coef(lp, q + 1, glp_get_obj_coef(lp, q + 1) +
                                      (1 - c->w[s]) * p->count[q] * b[q] / scale);
    for (int q = 0; q < nq; q++) {
      ind[1] = t, val[1] = 1;
      ind[2] = q + 1, val[2] = -b[q] / scale;
      row = glp_add_rows(lp, 1);
      glp_set_mat_row(lp, row, 2, ind, val);
      glp_set_row_bnds(lp, row, GLP_LO, a[q] / scale, 0);
    }
  }
  free(ind);
  free(val);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  bool ok = glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT;
  for (int d = 0; ok && d < p->k; d++)
    r[d] = glp_get_col_prim(lp, p->cls[d] + 1);
  glp_delete_prob(lp);
  return ok;
}

/* Gives the globals forms A (by global; NULL: open) and clears the step's
 * shardings, as before the sharding pass. */
static void apply(Planner *p, Sharding **A) {
  Module *m = p->m;
  for (int g = 0; g < m->global.n; g++)
    m->global.a[g].shard = A[g];
  const char *names[] = {"train_step", "forward"};
  for (int n = 0; n < COUNTOF(names); n++) {
    Func *f = ir_find_func(m, names[n]);
    for (int k = 0; f && f->device < 0 && k < f->inst.n; k++)
      f->inst.a[k]->shard = NULL;
  }
}

/* Keeps the globals' forms as propagated and their predicted step t, for
 * the runner-up: two choices that propagate alike (an open param and the
 * form its users give it) are one plan. */
static void note_seen(Planner *p, double t) {
  Module *m = p->m;
  Sharding **forms = arena_alloc(m->arena, sizeof *forms * (size_t)(m->global.n + 1));
  for (int g = 0; g < m->global.n; g++)
    forms[g] = m->global.a[g].shard;
  vec_push(m->arena, &p->seen, forms);
  vec_push(m->arena, &p->seen_t, t);
}

/* The predicted step of forms A with the linear program's ratios (into r)
 * or, when even, with even ratios; INFINITY when the forms do not propagate
 * or do not fit. The cost model into c. */
static double evaluate(Planner *p, Sharding **A, bool even, double *r, Cost *c) {
  p->evals++;
  apply(p, A);
  int nerr = p->quiet.nerr;
  p->propagated = pass_sharding(p->m, &p->quiet, NULL) && p->quiet.nerr == nerr;
  if (!p->propagated)
    return INFINITY;
  cost_build(p, c);
  double hi[SHARD_MAX_AXIS], lo = ratio_bounds(p, c, hi);
  if (even) {
    for (int d = 0; d < p->k; d++)
      r[d] = 1.0 / p->k;
  } else if (!solve_lp(p, c, lo, hi, r)) {
    return INFINITY;
  }
  for (int d = 0; d < p->k; d++)
    if (r[d] > hi[d] + 1e-12 || hi[d] < 0)
      return INFINITY;
  /* a pipeline's stages hold whole layers, and nothing else splits over
   * their axis (spmd makes no such plan) */
  for (int g = 0; c->layers && g < p->m->global.n; g++) {
    const Global *gl = &p->m->global.a[g];
    if ((gl->kind == G_PARAM || gl->kind == G_INPUT) && !p->stacked[g] &&
        split_on(gl->shard, gl->type.rank))
      return INFINITY;
  }
  int64_t room = 0;
  for (int d = 0; c->layers && d < p->k; d++)
    room += (int64_t)floor(hi[d] * (double)c->layers + 1e-9);
  if (room < c->layers)
    return INFINITY;
  double t = step_time(p, c, r, NULL);
  if (!even)
    note_seen(p, t);
  return t;
}

/* ---- the search over forms ---- */

static Sharding *form(Planner *p, int dim) {
  Sharding *s = arena_alloc(p->m->arena, sizeof *s);
  memset(s, 0, sizeof *s);
  for (int d = 0; d < IR_MAX_RANK; d++)
    s->axis[d] = -1;
  if (dim >= 0)
    s->axis[dim] = 0;
  return s;
}

/* The forms global g may take: whole, or split along a dimension of at least
 * one element per device (inputs along their first only), or for a param
 * also open (its form follows from its users). */
static int forms_of(Planner *p, int g, Sharding **out) {
  const Global *gl = &p->m->global.a[g];
  int n = 0;
  if (gl->kind == G_PARAM)
    out[n++] = NULL;
  out[n++] = form(p, -1);
  int dims = gl->kind == G_INPUT ? (gl->type.rank > 0) : gl->type.rank;
  for (int d = 0; d < dims; d++)
    if (gl->type.dim[d] >= p->k)
      out[n++] = form(p, d);
  return n;
}

static bool form_eq(const Planner *p, int g, const Sharding *a, const Sharding *b) {
  if (!a || !b)
    return a == b;
  return shard_same(p->m, &p->m->global.a[g].type, a, b);
}

static bool same_forms(const Planner *p, Sharding *const *a, Sharding *const *b) {
  for (int g = 0; g < p->m->global.n; g++)
    if (!form_eq(p, g, a[g], b[g]))
      return false;
  return true;
}

/* Greedy descent from A: each global in turn takes each of its forms, and a
 * choice stays when it lowers the cost; until a sweep changes nothing. */
static double descend(Planner *p, Sharding **A, double cost) {
  double r[SHARD_MAX_AXIS];
  Cost c;
  Sharding *forms[IR_MAX_RANK + 2];
  for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    bool moved = false;
    for (int v = 0; v < p->nvar; v++) {
      int g = p->var[v], n = forms_of(p, g, forms);
      for (int f = 0; f < n; f++) {
        if (form_eq(p, g, forms[f], A[g]))
          continue;
        Sharding *was = A[g];
        A[g] = forms[f];
        double t = evaluate(p, A, false, r, &c);
        if (t < cost * (1 - IMPROVES)) {
          cost = t;
          moved = true;
        } else {
          A[g] = was;
        }
      }
    }
    if (!moved)
      break;
  }
  return cost;
}

/* ---- the pass ---- */

/* A planner for mesh 0 axis 0; false when the module cannot be planned (no
 * cluster, no one-axis mesh, no step). */
static bool planner_init(Planner *p, Module *m) {
  memset(p, 0, sizeof *p);
  if (!m->cluster || m->mesh.n != 1 || m->mesh.a[0].naxis != 1)
    return false;
  const Mesh *mesh = &m->mesh.a[0];
  p->m = m;
  p->k = mesh->axis_size[0];
  p->step = (Func *)find_step(m);
  p->mb = m->microbatches > 1 ? m->microbatches : 1;
  if (!p->step || p->k > SHARD_MAX_AXIS || p->k < 1)
    return false;
  for (int d = 0; d < p->k; d++) {
    const Device *dv = &m->cluster->dev.a[mesh->dev[d]];
    p->members[d] = d;
    int q = 0;
    while (q < p->nclass) {
      const Device *o = &m->cluster->dev.a[mesh->dev[p->rep[q]]];
      if (o->gflops == dv->gflops && o->bw == dv->bw && o->lat == dv->lat &&
          o->mem == dv->mem)
        break;
      q++;
    }
    if (q == p->nclass)
      p->rep[p->nclass++] = d;
    p->cls[d] = q;
    p->count[q]++;
  }
  int ng = m->global.n;
  p->stacked = arena_alloc(m->arena, sizeof *p->stacked * (size_t)(ng + 1));
  memset(p->stacked, 0, sizeof *p->stacked * (size_t)(ng + 1));
  for (int k = 0; k < p->step->inst.n; k++) {
    const Inst *r = p->step->inst.a[k];
    for (int j = 0; r->op == OP_repeat && j < r->nin; j++)
      if (ir_repeat_operand_kind(r, j) == 2 && r->in[j]->op == OP_load)
        p->stacked[ir_global_of(r->in[j]) - m->global.a] = true;
  }
  p->user = arena_alloc(m->arena, sizeof *p->user * (size_t)(ng + 1));
  p->var = arena_alloc(m->arena, sizeof *p->var * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    Global *gl = &m->global.a[g];
    p->user[g] = gl->shard;
    if (!gl->shard && (gl->kind == G_INPUT || gl->kind == G_PARAM))
      p->var[p->nvar++] = g;
  }
  diag_init_quiet(&p->quiet);
  return true;
}

static bool user_ratios(const Module *m) {
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    for (int d = 0; gl->shard && d < gl->type.rank; d++)
      if (gl->shard->axis[d] >= 0 && gl->shard->ratio[d])
        return true;
  }
  return false;
}

/* The record of plan A with ratios r, starting from base (may be NULL). */
static PlanInfo *record(Planner *p, Sharding **A, const double *r, double step, double even,
                        const PlanInfo *base) {
  Module *m = p->m;
  PlanInfo *pi = arena_alloc(m->arena, sizeof *pi);
  memset(pi, 0, sizeof *pi);
  if (base)
    *pi = *base;
  pi->k = p->k;
  pi->ratio = arena_alloc(m->arena, sizeof *pi->ratio * (size_t)p->k);
  pi->busy = arena_alloc(m->arena, sizeof *pi->busy * (size_t)p->k);
  memcpy(pi->ratio, r, sizeof *r * (size_t)p->k);
  pi->step = step;
  pi->even = even;
  pi->evals = p->evals;
  pi->user = p->user;
  pi->chosen = A;
  Cost c;
  double rr[SHARD_MAX_AXIS];
  evaluate(p, A, true, rr, &c);
  step_time(p, &c, r, pi->busy);
  pi->comm = c.comm;
  pi->ncoll = c.ncoll;
  p->unit = c.min_len;
  for (int k = 0; k < p->step->inst.n; k++)
    pi->flops += ir_flops(p->step->inst.a[k]);
  pi->mem = arena_alloc(m->arena, sizeof *pi->mem * (size_t)p->k);
  for (int d = 0; d < p->k; d++) {
    pi->mem[d] = 0;
    for (int t = 0; t < c.nmem; t++)
      pi->mem[d] = fmax(pi->mem[d], c.fixed[t] + r[d] * c.scaled[t]);
  }
  for (int d = 0; d < p->k; d++)
    if (pi->busy[d] > pi->busy[pi->bottleneck])
      pi->bottleneck = d;
  return pi;
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

/* Integer ratios in millionths summing to 1, within every device's memory
 * (a pipeline's: whole layers, its loop's trip count in c's blocks, since
 * each layer holds a large share of the memory); NULL when even. */
static double *round_ratios(Planner *p, const Cost *c, const double *r, const double *hi) {
  int k = p->k;
  int64_t units[SHARD_MAX_AXIS];
  double layers[SHARD_MAX_AXIS];
  if (c->layers >= k) {
    round_within(c->layers, r, hi, k, units);
    for (int j = 0; j < k; j++)
      layers[j] = (double)units[j] / (double)c->layers;
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
  return even ? NULL : ratio;
}

/* The chosen forms with the ratios on every split. */
static Sharding **with_ratios(Planner *p, Sharding **A, double *ratio) {
  int ng = p->m->global.n;
  Sharding **out = arena_alloc(p->m->arena, sizeof *out * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    out[g] = A[g];
    if (!A[g] || !split_on(A[g], p->m->global.a[g].type.rank))
      continue;
    out[g] = arena_alloc(p->m->arena, sizeof *out[g]);
    *out[g] = *A[g];
    for (int d = 0; d < IR_MAX_RANK; d++)
      out[g]->ratio[d] = out[g]->axis[d] == 0 ? ratio : NULL;
  }
  return out;
}

/* The error when no choice of forms fits in memory, from the cost model c
 * of the parallel block's own forms. */
static void diag_no_room(Planner *p, const Cost *c, Diag *d) {
  Module *m = p->m;
  const Mesh *mesh = &m->mesh.a[0];
  double hi[SHARD_MAX_AXIS], lo = ratio_bounds(p, c, hi), most = 0;
  for (int k = 0; k < p->k; k++) {
    const Device *dv = &m->cluster->dev.a[mesh->dev[k]];
    if (hi[k] >= lo)
      continue;
    int t = 0;   /* the point that allows least */
    for (int u = 1; u < c->nmem; u++)
      if (point_bound(c, u, (double)dv->mem) < point_bound(c, t, (double)dv->mem))
        t = u;
    diag_error(d, mesh->loc,
               "device '%s' has %lld bytes of memory, too few for any share of the step: "
               "it needs %.0f bytes of whole tensors and %.0f bytes for its smallest share%s",
               dv->name, (long long)dv->mem, c->fixed[t], c->scaled[t] * lo,
               hi[k] < point_bound(c, t, (double)dv->mem) ? " (and its memory plan more than that)"
                                                            : "");
    return;
  }
  for (int t = 0; t < c->nmem; t++)
    most = fmax(most, c->scaled[t]);
  diag_error(d, mesh->loc,
             "the devices of mesh '%s' together have too little memory for the step: "
             "its split tensors and activations need %.0f bytes",
             mesh->name, most);
}

/* The error when not even pipeline stages fit, from their cost model c:
 * how many layers each device holds within its memory, and what one more
 * layer needs; false when whole layers are not what is missing. */
static bool diag_no_layers(Planner *p, const Cost *c, Diag *d) {
  Module *m = p->m;
  const Mesh *mesh = &m->mesh.a[0];
  double hi[SHARD_MAX_AXIS];
  ratio_bounds(p, c, hi);
  char held[512] = "";
  double layer = 0;
  for (int t = 0; t < c->nmem; t++)
    layer = fmax(layer, c->scaled[t] / (double)c->layers);
  int64_t room = 0;
  bool none = false;
  for (int k = 0; k < p->k; k++) {
    int64_t n = hi[k] < 0 ? 0 : (int64_t)floor(hi[k] * (double)c->layers + 1e-9);
    room += n, none |= n == 0;
    size_t at = strlen(held);
    snprintf(held + at, sizeof held - at, "%s%s %lld", k ? ", " : "",
             m->cluster->dev.a[mesh->dev[k]].name, (long long)n);
  }
  if (!none && room >= c->layers)
    return false;
  diag_error(d, mesh->loc,
             "no plan fits in the devices' memory: as pipeline stages, the %lld layers "
             "need at least one on every device and all %lld in all, but within its "
             "memory each device holds (%s); a layer takes about %.0f bytes with its "
             "optimizer state and activations",
             (long long)c->layers, (long long)c->layers, held, layer);
  return true;
}

/* Of the step's forward loops that save their activations for the backward
 * (no `remat`), the one that saves the most bytes, whose recomputation
 * frees the most memory; NULL: none. A loop is known again by its location
 * in the source when passes_run reruns from the IR's text. */
static const Inst *most_saving_loop(const Planner *p) {
  const Inst *best = NULL;
  double most = 0;
  for (int k = 0; k < p->step->inst.n; k++) {
    const Inst *r = p->step->inst.a[k];
    if (r->op != OP_repeat || ir_get_int(r, "reverse", 0) || ir_get_int(r, "remat", 0) ||
        !r->loc.file || r->loc.file->ir_text)
      continue;
    double saved = 0;
    for (int j = k + 1; j < p->step->inst.n; j++) {
      const Inst *o = p->step->inst.a[j];
      if (o->op == OP_repeat_out && o->in[0] == r && ir_get_int(o, "index", 0) > 0)
        saved += (double)type_elems(&o->type) * dtype_size(o->type.dtype);
    }
    if (!best || saved > most)
      best = r, most = saved;
  }
  return best;
}

/* ---- confidence ---- */

/* The largest spreads of the figures the step's cost rests on: the mesh's
 * devices' (compute), and the links' and the collectives' measured over the
 * mesh's size (communication), with whose they are. */
static void spreads(const Planner *p, PlanInfo *pi) {
  const Module *m = p->m;
  const Cluster *cl = m->cluster;
  for (int d = 0; d < p->k; d++) {
    const Device *dv = &cl->dev.a[m->mesh.a[0].dev[d]];
    if (dv->spread > pi->dev_spread) {
      pi->dev_spread = dv->spread;
      pi->dev_spread_of = dv->name;
    }
  }
  for (int k = 0; k < cl->link.n; k++)
    if (cl->link.a[k].spread > pi->comm_spread) {
      pi->comm_spread = cl->link.a[k].spread;
      pi->comm_spread_of = arena_printf(m->arena, "link %s", cl->link.a[k].name);
    }
  for (int k = 0; k < cl->coll.n; k++) {
    const Collective *c = &cl->coll.a[k];
    if (c->ranks == p->k && c->spread > pi->comm_spread) {
      pi->comm_spread = c->spread;
      pi->comm_spread_of = arena_printf(m->arena, "%s by %s", ir_ops[c->op].name,
                                        dtrt_comm_method_names[c->method]);
    }
  }
}

/* The relative error the spreads may put into a predicted step of t
 * seconds, comm of them in collectives: its compute by the devices' spread,
 * its collectives by the communication's. */
static double step_noise(const PlanInfo *pi, double t, double comm) {
  if (!(t > 0 && t < INFINITY))
    return 0;
  return ((t - comm) * pi->dev_spread + comm * pi->comm_spread) / t;
}

static bool forms_eq(const Planner *p, Sharding **a, Sharding **b) {
  for (int g = 0; g < p->m->global.n; g++)
    if (!form_eq(p, g, a[g], b[g]))
      return false;
  return true;
}

/* The runner-up: the least predicted step of the plans the search costed
 * whose propagated forms differ from `forms` (INFINITY when there are none)
 * into pi, with the first global whose form differs. */
static void runner_up(const Planner *p, Sharding **forms, PlanInfo *pi) {
  const Module *m = p->m;
  int best = -1;
  for (int k = 0; k < p->seen.n; k++)
    if ((best < 0 || p->seen_t.a[k] < p->seen_t.a[best]) && !forms_eq(p, p->seen.a[k], forms))
      best = k;
  pi->runner_up = best < 0 ? INFINITY : p->seen_t.a[best];
  for (int g = 0; best >= 0 && g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    const Sharding *s = p->seen.a[best][g];
    if (!form_eq(p, g, s, forms[g])) {
      char b1[128], b2[128];
      pi->runner_up_how = arena_printf(m->arena, "%s %s instead of %s", gl->name,
                                       ir_shard_str(m, s, gl->type.rank, b1, sizeof b1),
                                       ir_shard_str(m, forms[g], gl->type.rank, b2, sizeof b2));
      break;
    }
  }
}

/* A start of the search: the parallel block's forms, every other input
 * split along its first dimension (data parallel) or whole, params open. */
static Sharding **start(Planner *p, bool split_inputs) {
  int ng = p->m->global.n;
  Sharding **A = arena_alloc(p->m->arena, sizeof *A * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    const Global *gl = &p->m->global.a[g];
    A[g] = p->user[g];
    if (!A[g] && gl->kind == G_INPUT)
      A[g] = form(p, split_inputs && gl->type.rank > 0 && gl->type.dim[0] >= p->k ? 0 : -1);
  }
  return A;
}

/* The third start, pipeline stages: the inputs whole and the stacked
 * params of @train_step's forward loops split along their layers, where the
 * parallel block leaves them open; NULL when there are none. */
static Sharding **pipe_start(Planner *p) {
  Sharding **A = start(p, false);
  bool any = false;
  for (int k = 0; k < p->step->inst.n; k++) {
    const Inst *r = p->step->inst.a[k];
    if (r->op != OP_repeat || ir_get_int(r, "reverse", 0))
      continue;
    for (int j = 0; j < r->nin; j++) {
      const Global *g = r->in[j]->op == OP_load ? ir_global_of(r->in[j]) : NULL;
      if (!g || g->kind != G_PARAM || ir_repeat_operand_kind(r, j) != 2 ||
          g->type.dim[0] < p->k)
        continue;
      int at = (int)(g - p->m->global.a);
      if (p->user[at])
        return NULL;
      A[at] = form(p, 0);
      any = true;
    }
  }
  return any ? A : NULL;
}

/* The micro-batch counts a pipeline may run in: the parallel block's, or 1
 * and each power of two up to IR_MAX_MICROBATCHES that leaves every
 * micro-batch two rows of the batch and that the cut takes (none in
 * deterministic mode). The cost model has no time per kernel call, so it
 * would always take the most; two rows is the floor. */
static int mb_choices(const Planner *p, int *out) {
  const Module *m = p->m;
  if (m->microbatches > 1) {
    out[0] = m->microbatches;
    return 1;
  }
  int n = 0;
  out[n++] = 1;
  int64_t rows = 0;
  for (int k = 0; k < p->step->inst.n && !rows; k++) {
    const Inst *r = p->step->inst.a[k];
    if (r->op == OP_repeat && r->in[0]->type.rank)
      rows = r->in[0]->type.dim[0];
  }
  for (int mb = 2; m->det_pieces < 2 && mb <= IR_MAX_MICROBATCHES; mb *= 2)
    if (rows % mb == 0 && rows / mb >= 2 && microbatch_fits(m, mb))
      out[n++] = mb;
  return n;
}

/* The best micro-batch count of choices mb[n] for forms A: into p->mb, its
 * step returned (ratios into r, the cost model into c). */
static double pick_mb(Planner *p, Sharding **A, const int *mb, int n, double *r, Cost *c) {
  double best = INFINITY;
  int at = 0;
  for (int j = 0; j < n; j++) {
    p->mb = mb[j];
    double t = evaluate(p, A, false, r, c);
    if (t < best * (1 - IMPROVES))
      best = t, at = j;
  }
  p->mb = mb[at];
  return evaluate(p, A, false, r, c);
}

/* One plan, within the bounds earlier trials found: the search,
 * the choice among the simplest plans, the forms applied. */
static bool plan_once(Planner *p, Diag *d, PassRun *run) {
  Module *m = p->m;
  double r[SHARD_MAX_AXIS];
  Cost c;
  int mbs[IR_MAX_MICROBATCHES + 1], nmb = mb_choices(p, mbs);
  /* Three starts: data parallel, everything whole, and pipeline stages
   * with the best micro-batch count; the first of equal costs wins. */
  Sharding **A = start(p, true), **B = start(p, false), **P = pipe_start(p);
  double ca = descend(p, A, evaluate(p, A, false, r, &c));
  double cb = descend(p, B, evaluate(p, B, false, r, &c));
  Sharding **best = cb < ca * (1 - IMPROVES) ? B : A;
  int mb = p->mb;
  if (P) {
    double cp = descend(p, P, pick_mb(p, P, mbs, nmb, r, &c));
    cp = pick_mb(p, P, mbs, nmb, r, &c);
    if (cp < fmin(ca, cb) * (1 - IMPROVES))
      best = P, mb = p->mb;
  }
  p->mb = mb;
  double cost = evaluate(p, best, false, r, &c);
  if (cost == INFINITY) {
    /* Forms that do not propagate are the sharding pass's to report. */
    evaluate(p, start(p, false), true, r, &c);
    bool propagated = p->propagated;
    apply(p, p->user);
    /* ... and so are sums that deterministic mode cannot order (spmd) */
    if (!propagated || c.comm == INFINITY)
      return true;
    const Inst *loop = run ? most_saving_loop(p) : NULL;
    if (loop) {   /* try again with that loop recomputing its forward */
      apply(p, p->user);
      run->want_remat = loop->loc;
      return false;
    }
    if (P && (p->mb = mbs[nmb - 1], evaluate(p, P, true, r, &c), p->propagated) && c.layers &&
        diag_no_layers(p, &c, d)) {
      apply(p, p->user);
      return false;
    }
    if (P)   /* the parallel block's forms again */
      evaluate(p, start(p, false), true, r, &c);
    diag_no_room(p, &c, d);
    apply(p, p->user);
    return false;
  }
  Sharding **best_forms = p->seen.a[p->seen.n - 1];   /* as the last evaluate propagated them */
  double hi[SHARD_MAX_AXIS];
  ratio_bounds(p, &c, hi);
  double *ratio = round_ratios(p, &c, r, hi);
  Sharding **final = with_ratios(p, best, ratio);
  p->chosen = best;
  double rr[SHARD_MAX_AXIS];
  for (int k = 0; k < p->k; k++)
    rr[k] = ratio ? ratio[k] : 1.0 / p->k;
  double step = step_time(p, &c, rr, NULL), comm = c.comm;
  double even = step_time(p, &c, NULL, NULL);
  PlanInfo conf = {.block = evaluate(p, start(p, false), true, r, &c), .best = step};
  /* The simpler plan, and whether the best one gains more than the noise
   * over it: else the simpler one is kept. */
  Sharding **simple = start(p, true);
  conf.simple = evaluate(p, simple, true, r, &c);
  conf.simple_ruled_out = !p->propagated;
  runner_up(p, best_forms, &conf);
  spreads(p, &conf);
  double simple_comm = c.comm;
  /* Between the two, data parallel with the linear program's ratios: forms
   * with more collectives must gain more than the noise over it too. */
  Sharding **dp = start(p, true), **dp_final = NULL;
  double rdp[SHARD_MAX_AXIS], dp_comm = 0;
  conf.dp = INFINITY;
  if (!same_forms(p, best, dp) && evaluate(p, dp, false, rdp, &c) < INFINITY) {
    double hdp[SHARD_MAX_AXIS];
    ratio_bounds(p, &c, hdp);
    double *dr = round_ratios(p, &c, rdp, hdp);
    for (int k = 0; k < p->k; k++)
      rdp[k] = dr ? dr[k] : 1.0 / p->k;
    conf.dp = step_time(p, &c, rdp, NULL);
    dp_comm = c.comm;
    dp_final = with_ratios(p, dp, dr);
  }
  conf.noise = fmax(NOISE_FLOOR, fmax(step_noise(&conf, step, comm),
                                      step_noise(&conf, conf.simple, simple_comm)));
  if (conf.dp < INFINITY)
    conf.noise = fmax(conf.noise, step_noise(&conf, conf.dp, dp_comm));
  /* The simplest plan no other beats by more than the noise: even data
   * parallel unless one does; then data parallel with ratios, if it is one
   * and the best does not beat it so. */
  double n1 = 1 + conf.noise;
  bool even_fits = conf.simple < INFINITY;
  bool dp_beats_even = conf.dp < INFINITY && !(even_fits && !(conf.simple > conf.dp * n1));
  bool best_beats_even = !(even_fits && !(conf.simple > step * n1));
  conf.kept_simple = even_fits && !dp_beats_even && !best_beats_even;
  conf.kept_dp = dp_beats_even && !(conf.dp > step * n1);
  if (conf.kept_dp) {
    final = dp_final;
    p->chosen = dp;
    memcpy(rr, rdp, sizeof rr);
    step = conf.dp;
    even = conf.simple;
  } else if (conf.kept_simple) {
    final = simple;
    p->chosen = simple;
    for (int k = 0; k < p->k; k++)
      rr[k] = 1.0 / p->k;
    step = even = conf.simple;
  }
  /* the pipeline's micro-batches, when the plan kept is the best one */
  p->mb = conf.kept_dp || conf.kept_simple ? 1 : mb;
  bool planned_mb = m->microbatches < 2 && p->mb > 1;
  if (planned_mb) {
    m->microbatches = p->mb;
    m->microbatches_loc = m->mesh.a[0].loc;
  }
  PlanInfo *pi = record(p, final, rr, step, even, &conf);
  pi->mb = p->mb;
  p->ratio = pi->ratio;
  p->predicted = pi->mem;
  pi->remat = m->nremat_planned;
  pi->planned_mb = planned_mb;
  if (run)
    run->plan = pi;
  apply(p, final);
  return true;
}

bool plan_trial(const Module *m, const PassRun *run, double *need, double *step) {
  Arena *a = arena_new();
  Module *copy = ir_copy(a, m);
  Diag quiet;
  diag_init_quiet(&quiet);
  bool ok = copy != NULL;
  bool after = false;
  for (int k = 0; ok && k < pass_count; k++) {
    if (after)
      ok = pass_table[k].run(copy, &quiet, NULL) && !quiet.nerr;
    after |= !strcmp(pass_table[k].name, "plan");
  }
  const Mesh *mesh = ok ? &copy->mesh.a[0] : NULL;
  int ndev = 1;
  for (int x = 0; ok && x < mesh->naxis; x++)
    ndev *= mesh->axis_size[x];
  for (int dev = 0; ok && dev < ndev; dev++) {
    need[dev] = 0;
    for (int g = 0; g < copy->global.n; g++)
      if (copy->global.a[g].kind != G_INPUT) {
        Type t = ir_global_type_on(copy, &copy->global.a[g], dev);
        need[dev] += bytes_of(&t);
      }
    int64_t work = 0, staged = 0;   /* as codegen/memory.c counts them */
    for (int k = 0; k < copy->func.n; k++) {
      const Func *f = copy->func.a[k];
      if (f->device != dev || f->body)
        continue;
      work = f->work_bytes > work ? f->work_bytes : work;
      staged = f->staged_bytes > staged ? f->staged_bytes : staged;
    }
    need[dev] += (double)(work + staged);
  }
  if (ok && run && run->extra_memory) {
    double extra[SHARD_MAX_AXIS] = {0};
    run->extra_memory(copy, extra, run->extra_arg);
    for (int dev = 0; dev < ndev; dev++)
      need[dev] += extra[dev];
  }
  if (ok && step)
    ok = (*step = sim_step(copy, NULL)) >= 0;
  arena_free(a);
  return ok;
}

#define MEMORY_TRIALS 8   /* plans corrected by their memory plans, at most */
/* A plan is tried against its memory plan only where the planner's count
 * reaches this share of a device's memory: the count has fallen short by
 * up to 40% (pipelines), never by half, and a trial compiles the step once
 * more (12 s for 1024 devices). */
#define MEMORY_NEAR 0.5

/* plan auto: a plan, then its memory plan on a copy of the module; while a
 * device's arenas and state exceed its memory, the planner learns by how
 * much its model missed there and plans again. */
static bool plan_auto(Module *m, Diag *d, PassRun *run) {
  Planner p;
  if (!planner_init(&p, m) || user_ratios(m))
    return true;
  int mb = m->microbatches;
  Loc mb_loc = m->microbatches_loc;
  Trial *trial = arena_alloc(m->arena, sizeof *trial * MEMORY_TRIALS);
  double under[SHARD_MAX_AXIS];
  for (int k = 0; k < p.k; k++)
    under[k] = 1;
  for (int n = 0;; n++) {
    p.trial = trial, p.ntrial = n;
    if (!plan_once(&p, d, run))
      return false;
    const Mesh *mesh = &m->mesh.a[0];
    bool near = false;   /* (no plan recorded: the later passes report) */
    for (int k = 0; p.predicted && k < p.k; k++)
      near |= p.predicted[k] > MEMORY_NEAR * (double)m->cluster->dev.a[mesh->dev[k]].mem;
    double need[SHARD_MAX_AXIS];
    if (!near || n == MEMORY_TRIALS || !plan_trial(m, run, need, NULL))
      return true;   /* the sharding plan's memory shows what is over */
    int64_t blocks[SHARD_MAX_AXIS];
    if (p.unit > 0)
      ir_blocks(p.unit, p.ratio, p.k, blocks);
    Trial *t = &trial[n];
    bool over = false;
    for (int k = 0; k < p.k; k++) {
      double mem = (double)m->cluster->dev.a[mesh->dev[k]].mem;
      t->cap[k] = 1;
      if (need[k] <= mem)
        continue;
      /* a smaller share of these forms: in proportion, and at least one
       * block of the shortest split fewer */
      t->cap[k] = p.ratio[k] * mem / need[k];
      if (p.unit > 0)
        t->cap[k] = fmin(t->cap[k], (double)(blocks[k] - 1) / (double)p.unit + 2.0 / RATIO_UNITS);
      /* and any forms: the model's count, short by as much as here */
      under[k] = fmax(under[k], need[k] / p.predicted[k]);
      over = true;
    }
    if (!over)
      return true;
    double r[SHARD_MAX_AXIS];
    Cost c;
    evaluate(&p, p.chosen, true, r, &c);   /* its forms, propagated */
    t->forms = arena_alloc(m->arena, sizeof *t->forms * (size_t)(m->global.n + 1));
    for (int g = 0; g < m->global.n; g++)
      t->forms[g] = m->global.a[g].shard;
    apply(&p, p.user);   /* and from the parallel block again */
    m->microbatches = mb;
    m->microbatches_loc = mb_loc;
    planner_init(&p, m);
    memcpy(p.under, under, sizeof under);
  }
}

/* `plan even`: the parallel block's forms, even; the prediction for the
 * report when the module can be planned. */
static bool plan_even(Module *m, PassRun *run) {
  for (int i = 0; i < m->global.n; i++) {
    Global *g = &m->global.a[i];
    for (int dd = 0; g->shard && dd < g->type.rank; dd++)
      g->shard->ratio[dd] = NULL;
  }
  Planner p;
  if (!planner_init(&p, m))
    return true;
  Sharding **user = start(&p, false);
  double r[SHARD_MAX_AXIS];
  Cost c;
  double even = evaluate(&p, user, true, r, &c);
  if (even < INFINITY) {
    PlanInfo *pi = record(&p, user, r, even, even, NULL);
    pi->block = even;
    if (run)
      run->plan = pi;
  }
  apply(&p, p.user);
  return true;
}

bool pass_plan(Module *m, Diag *d, PassRun *run) {
  if (!m->mesh.n || m->plan == PLAN_EXPLICIT || m->plan == PLAN_NONE)
    return true;
  if (m->plan == PLAN_EVEN)
    return plan_even(m, run);
  if (m->mesh.a[0].naxis > 1)
    return plan_mesh(m, d, run);
  return plan_auto(m, d, run);
}

/* ---- the report ---- */

/* "3.1% (r1)", or "none given". */
static const char *spread_text(double spread, const char *of, char *buf, size_t n) {
  if (!of)
    return "none given";
  snprintf(buf, n, "%.1f%% (%s)", spread * 100, of);
  return buf;
}

/* plan auto: the best plan's margins, the spreads, the noise, the choice. */
static void report_confidence(FILE *out, const PlanInfo *pi) {
  double best = pi->best > 0 ? pi->best : 1;
  fprintf(out, "  best plan found: %.4f ms; ", pi->best * 1e3);
  if (pi->simple < INFINITY)
    fprintf(out, "even data parallel %.4f ms (that/this %.3fx)", pi->simple * 1e3,
            pi->simple / best);
  else if (pi->simple_ruled_out)
    fputs("even data parallel is ruled out by the parallel block's forms", out);
  else
    fputs("even data parallel does not fit in memory", out);
  if (pi->dp < INFINITY)
    fprintf(out, "; data parallel with the planned ratios %.4f ms (that/this %.3fx)",
            pi->dp * 1e3, pi->dp / best);
  if (pi->runner_up < INFINITY)
    fprintf(out, "; runner-up %.4f ms (that/this %.3fx; %s)\n", pi->runner_up * 1e3,
            pi->runner_up / best, pi->runner_up_how);
  else
    fputs("; no other forms costed\n", out);
  char b1[160], b2[160];
  fprintf(out, "  probe spread: devices %s, communication %s; noise %.1f%% (at least %.0f%%)\n",
          spread_text(pi->dev_spread, pi->dev_spread_of, b1, sizeof b1),
          spread_text(pi->comm_spread, pi->comm_spread_of, b2, sizeof b2), pi->noise * 100,
          NOISE_FLOOR * 100);
  if (pi->kept_dp)
    fprintf(out, "  kept data parallel with the planned ratios: the best plan found gains %.3fx "
            "over it, within the noise\n", pi->dp / best);
  else if (pi->kept_simple)
    fprintf(out, "  kept even data parallel: the best plan found gains %.3fx, within the noise\n",
            pi->simple / best);
  else if (pi->simple < INFINITY)
    fputs("  kept the best plan found: it gains more than the noise over even data parallel\n",
          out);
  else
    fputs("  kept the best plan found: even data parallel is no plan here\n", out);
}

void plan_report(FILE *out, const Module *m, const PlanInfo *pi) {
  static const char *modes[] = {"none", "auto", "even", "explicit"};
  static_assert(COUNTOF(modes) == PLAN_EXPLICIT + 1, "plan mode names");
  if (!pi)
    return;
  if (pi->mesh_report) {
    fputs(pi->mesh_report, out);
    return;
  }
  const Mesh *mesh = &m->mesh.a[0];
  fprintf(out, "device plan of %s on mesh %s[%s = %d] (plan %s): %.4g GFLOP per step; %d "
          "choice%s of forms costed\n",
          m->name, mesh->name, mesh->axis_name[0], pi->k, modes[m->plan], pi->flops * 1e-9,
          pi->evals, pi->evals == 1 ? "" : "s");
  char b1[256], b2[256];
  bool head = false;
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    const Sharding *u = pi->user[g], *c = pi->chosen[g];
    if (gl->kind == G_STATE || (!u && !c))
      continue;
    if (!head)
      fprintf(out, "  %-12s %-24s %s\n", "form of", "parallel block", "plan");
    head = true;
    fprintf(out, "  %-12s %-24s %s\n", gl->name,
            u ? ir_shard_str(m, u, gl->type.rank, b1, sizeof b1) : "(open)",
            c ? ir_shard_str(m, c, gl->type.rank, b2, sizeof b2) : "(open)");
  }
  fprintf(out, "  %-12s %10s %10s %12s %12s %12s\n", "device", "GFLOP/s", "ratio", "busy ms",
          "memory MiB", "of MiB");
  for (int k = 0; k < pi->k; k++) {
    const Device *dv = &m->cluster->dev.a[mesh->dev[k]];
    fprintf(out, "  %-12s %10.4g %10.6f %12.4f %12.2f %12.2f\n", dv->name, dv->gflops,
            pi->ratio[k], pi->busy[k] * 1e3, pi->mem[k] / 1048576, (double)dv->mem / 1048576);
  }
  fprintf(out, "  collectives: %d per step, %.4f ms\n", pi->ncoll, pi->comm * 1e3);
  if (pi->mb > 1)
    fprintf(out, "  pipeline stages in %d micro-batches%s\n", pi->mb,
            pi->planned_mb ? " (planned)" : "");
  for (int k = 0; k < m->nremat_planned; k++) {
    const Loc *l = &m->remat_planned[k];
    fprintf(out, "  the loop at %s:%d:%d recomputes its forward in the backward (planned: no "
            "plan fits without)\n", l->file->name, l->line, l->col);
  }
  if (m->plan == PLAN_AUTO && pi->block < INFINITY)
    fprintf(out, "  the parallel block's forms, even: %.4f ms (that/this %.3fx)\n", pi->block * 1e3,
            pi->step > 0 ? pi->block / pi->step : 1.0);
  else if (m->plan == PLAN_AUTO)
    fprintf(out, "  the parallel block's forms, even: do not fit in memory\n");
  fprintf(out, "  predicted step: %.4f ms (even: %.4f ms, even/this %.3fx); bottleneck %s\n",
          pi->step * 1e3, pi->even * 1e3, pi->step > 0 ? pi->even / pi->step : 1.0,
          m->cluster->dev.a[mesh->dev[pi->bottleneck]].name);
  if (m->plan == PLAN_AUTO)
    report_confidence(out, pi);
  fputc('\n', out);
}
