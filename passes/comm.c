/* comm.c: the method of every collective, the cheapest by a cost model of the
 * cluster's measured collectives or links and the collective's bytes
 * (libdtrt's DTRT_COMM_* methods).
 *
 * Requires: per-device functions with collectives (passes/spmd.c). Guarantees:
 * every all_reduce, all_gather, reduce_scatter and all_to_all of a per-device
 * function carries `method`, one its kernel implements, the same on every
 * member of its group (it depends on the group, not on the member), the
 * lowest-numbered of the cheapest; under `exchange = bf16` every gradient
 * exchange (below) carries `wire = 1` (DT_WIRE_BF16) and no other collective
 * does. Changes nothing else.
 *
 * The gradient exchange: an all_reduce or reduce_scatter of @train_step.D
 * over a mesh axis that splits an input's batch (dim 0), whose result reaches
 * a store of a param or of optimizer state but not the loss output: the sum
 * of the backward's partial gradients over the data-parallel axis. The
 * forward's collectives (the loss, batch norm's statistics, a Megatron
 * row-parallel product) reach the loss and keep f32, as does the backward's
 * over another axis (tensor parallelism's input gradients), and a loop body's
 * (a weight's gradient in a loop is a carried sum, reduced after it). Located
 * errors, at the option: a model without training, deterministic mode (whose
 * sums must not depend on where the rounding falls), and a plan with no
 * gradient exchange to apply it to.
 *
 * bf16 on the wire halves the bytes of the formulas below and adds the
 * packing pass, 12 bytes per element of the buffer (f32 read, bf16 written,
 * and back) at the slowest member's sim_bw.
 *
 * The model (Hockney's: a message of b bytes over a link costs lat + b / bw;
 * L(k) = ceil(log2 k); k members; a = lat, t = 1 / bw of the group's link:
 * `intra` when every member lies on one node, else `inter`):
 *
 *   all_reduce of B bytes
 *     0 mpi, 1 ring   2(k-1) a + 2(k-1)/k B t     ring reduce-scatter + all-gather
 *     2 grouped       2 L(k) (a + B t)            binomial reduce, then broadcast
 *     3 hierarchical  2 L(g) (a_i + B t_i) + 2(n-1) a_e + 2(n-1)/n B t_e
 *                     over n > 1 nodes, g = the most members on one node: a
 *                     binomial reduce and broadcast on intra, a ring among the
 *                     n leaders on inter; only when the group spans nodes
 *   all_gather of blocks b_0..b_{k-1} (T their sum, k' of them non-empty)
 *     0 mpi           (k-1) a + (T - min b) t     variable counts: each member
 *                                                 receives all but its own
 *     1 ring          (k-1) (a + max b t)         each step waits for the largest
 *     2 grouped       k' L(k) a + L(k) T t        a binomial broadcast per block
 *     4 padded        L(k) a + (k-1) max b t      recursive doubling over k
 *                                                 blocks padded to the largest
 *   reduce_scatter of the same blocks: 0, 1 as all_gather; 2 grouped is a
 *     binomial reduce per non-empty block, k' L(k) a + L(k) T t
 *   all_to_all of S bytes sent by a member (spmd_comm_bytes): 0 and 1 both
 *     (k-1) a + S t, so 0
 *   send of B bytes   a + B t over the link between its two members
 *   bcast of B bytes  L(k) (a + B t), a binomial tree; neither has a method
 *
 * Without a cluster or link, a = SIM_DEFAULT_LAT and bw = SIM_DEFAULT_BW, as
 * in the simulator.
 *
 * A measured figure replaces the model: when the cluster has a `collective`
 * of the op by the method with ranks = k (dtc-probe times each method over
 * all the job's ranks, so it was measured over exactly such a group), the
 * cost is its lat + V / bw, the bytes V as the figure defines them:
 *
 *   all_reduce      B, the buffer
 *   all_gather,     T, the whole tensor, for mpi and grouped; k max b for
 *   reduce_scatter  ring and padded, whose steps wait for the largest block
 *                   (the figure was timed on even blocks, where k max b = T)
 *   all_to_all      S k / (k-1), a member's whole input (S leaves it)
 *
 * A figure for another group size, or for a method the op's kernel does not
 * have (ir_has_method; IR text can hold one), is ignored. A measured
 * hierarchical all_reduce counts even on one node: libdtrt runs it there. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "ir.h"
#include "passes.h"

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* ceil(log2 k) for k >= 1. */
static int log2up(int k) {
  int l = 0;
  while ((1 << l) < k)
    l++;
  return l;
}

/* The cluster device of mesh position d; NULL without a cluster. */
static const Device *member_dev(const Module *m, int d) {
  if (!m->cluster || !m->mesh.n)
    return NULL;
  int k = m->mesh.a[0].dev[d];
  return k >= 0 && k < m->cluster->dev.n ? &m->cluster->dev.a[k] : NULL;
}

/* The link named `name`, else the other one; lat and 1 / bw into *a, *t. */
static void link_of(const Module *m, const char *name, double *a, double *t) {
  const Link *l = NULL;
  for (int k = 0; m->cluster && k < m->cluster->link.n; k++) {
    l = &m->cluster->link.a[k];
    if (!strcmp(l->name, name))
      break;
  }
  *a = l ? l->lat : SIM_DEFAULT_LAT;
  *t = 1 / (l && l->bw > 0 ? l->bw : SIM_DEFAULT_BW);
}

/* The cluster's figure for op by method over a group of k; NULL if none. */
static const Collective *measured(const Module *m, Op op, int method, int k) {
  for (int j = 0; m->cluster && j < m->cluster->coll.n; j++) {
    const Collective *c = &m->cluster->coll.a[j];
    if (c->method == method && c->ranks == k && c->op == op)
      return c;
  }
  return NULL;
}

/* Seconds of op by a measured figure: its bytes V as documented above. */
static double measured_cost(const Collective *f, Op op, int method, double bytes,
                            const double *b, int k) {
  double v = bytes;
  if (op == OP_all_to_all) {
    v = bytes * k / (k - 1);
  } else if (op != OP_all_reduce) {
    double sum = 0, hi = 0;
    for (int j = 0; j < k; j++)
      sum += b[j], hi = fmax(hi, b[j]);
    v = method == DTRT_COMM_RING || method == DTRT_COMM_PADDED ? k * hi : sum;
  }
  return f->lat + v / f->bw;
}

/* Ring all-reduce of b bytes over k. */
static double ring_all_reduce(int k, double b, double a, double t) {
  return 2.0 * (k - 1) * a + 2.0 * (k - 1) / k * b * t;
}

/* Bytes of each member's block of an all_gather or reduce_scatter, into b. */
static void block_bytes(const Inst *c, int k, double *b) {
  const Type *whole = c->op == OP_all_gather ? &c->type : &c->in[0]->type;
  int64_t dim = ir_get_int(c, "dim", 0);
  if (dim < 0)
    dim += whole->rank;
  double unit = dtype_size(whole->dtype);
  for (int j = 0; j < whole->rank; j++)
    if (j != dim)
      unit *= (double)whole->dim[j];
  int n;
  const int64_t *len = ir_get_ints(c, "sizes", &n);
  DTC_ASSERT(len && n == k);
  for (int m = 0; m < k; m++)
    b[m] = (double)len[m] * unit;
}

double comm_cost(const Module *m, Op op, double bytes, const double *b, const int *members,
                 int k, int method) {
  if (k < 2 || op == OP_shard_slice)
    return 0;
  const Collective *f = ir_has_method(op, method) ? measured(m, op, method, k) : NULL;
  if (f)
    return measured_cost(f, op, method, bytes, b, k);
  /* the nodes the members lie on, and the most members on one of them */
  int node[SHARD_MAX_AXIS], nodes = 0, most = 0;
  bool known = true;
  for (int j = 0; j < k && known; j++) {
    const Device *dv = member_dev(m, members[j]);
    if ((known = dv != NULL))
      node[j] = dv->node;
  }
  if (known) {
    bool sorted = true;  /* as a mesh over whole nodes usually lists them */
    for (int j = 1; j < k && sorted; j++)
      sorted = node[j - 1] <= node[j];
    if (!sorted)
      qsort(node, (size_t)k, sizeof *node, cmp_int);
    for (int j = 0, run = 0; j < k; j++) {
      run = j && node[j] == node[j - 1] ? run + 1 : 1;
      nodes += run == 1;
      most = run > most ? run : most;
    }
  } else {
    nodes = 1;
  }
  double a, t, ai, ti, ae, te;
  link_of(m, nodes == 1 ? "intra" : "inter", &a, &t);
  link_of(m, "intra", &ai, &ti);
  link_of(m, "inter", &ae, &te);
  int l = log2up(k);
  if (op == OP_send)
    return a + bytes * t;
  if (op == OP_bcast)
    return l * (a + bytes * t);
  if (op == OP_all_reduce) {
    switch (method) {
    case DTRT_COMM_MPI: case DTRT_COMM_RING: return ring_all_reduce(k, bytes, a, t);
    case DTRT_COMM_GROUPED: return 2.0 * l * (a + bytes * t);
    case DTRT_COMM_HIER:
      if (nodes < 2)
        return INFINITY;
      return 2.0 * log2up(most) * (ai + bytes * ti) + ring_all_reduce(nodes, bytes, ae, te);
    default: return INFINITY;
    }
  }
  if (op == OP_all_to_all)
    return method == DTRT_COMM_MPI || method == DTRT_COMM_RING ? (k - 1) * a + bytes * t
                                                                : INFINITY;
  double sum = 0, lo = INFINITY, hi = 0;
  int full = 0;
  for (int j = 0; j < k; j++) {
    sum += b[j];
    lo = fmin(lo, b[j]);
    hi = fmax(hi, b[j]);
    full += b[j] > 0;
  }
  switch (method) {
  case DTRT_COMM_MPI: return (k - 1) * a + (sum - lo) * t;
  case DTRT_COMM_RING: return (k - 1) * (a + hi * t);
  case DTRT_COMM_GROUPED: return (double)full * l * a + l * sum * t;
  case DTRT_COMM_PADDED: return op == OP_all_gather ? l * a + (k - 1) * hi * t : INFINITY;
  default: return INFINITY;
  }
}

double comm_best(const Module *m, Op op, double bytes, const double *b, const int *members,
                 int k, int *method) {
  int best = DTRT_COMM_MPI;
  double cost = comm_cost(m, op, bytes, b, members, k, best);
  for (int j = 1; j < DTRT_COMM_COUNT; j++) {
    double t = comm_cost(m, op, bytes, b, members, k, j);
    if (t < cost)
      cost = t, best = j;
  }
  if (method)
    *method = best;
  return cost;
}

double comm_pack_time(const Module *m, double n, const int *members, int k) {
  double bw = INFINITY;
  for (int j = 0; j < k; j++)
    bw = fmin(bw, sim_bw(m, members[j]));
  return 12 * n / bw;
}

/* What all_to_all c sends from its largest member's block along `dim`: the
 * same on every member, which must all choose the same method. */
static double all_to_all_bytes(const Inst *c, int k) {
  const Type *in = &c->in[0]->type;
  int d = (int)ir_get_int(c, "dim", 0), n;
  const int64_t *len = ir_get_ints(c, "dim_sizes", &n);
  double other = 4, most = (double)in->dim[d];
  for (int q = 0; q < in->rank; q++)
    other *= q == d ? 1 : (double)in->dim[q];
  for (int j = 0; len && j < n; j++)
    most = fmax(most, (double)len[j]);
  return (double)(k - 1) / k * other * most;
}

double comm_time(const Module *m, const Inst *c, const int *members, int k, int method) {
  if (k < 2 || c->op == OP_shard_slice)
    return 0;
  if (ir_get_int(c, "wire", DT_WIRE_F32) == DT_WIRE_BF16) {
    double n = (double)type_elems(&c->in[0]->type), half[SHARD_MAX_AXIS] = {0};
    if (c->op == OP_reduce_scatter)
      block_bytes(c, k, half);
    for (int j = 0; j < k; j++)
      half[j] /= 2;
    return comm_cost(m, c->op, n * 2, half, members, k, method) + comm_pack_time(m, n, members, k);
  }
  double b[SHARD_MAX_AXIS] = {0}, bytes = 0;
  if (c->op == OP_send) {   /* between its two members */
    int pair[2] = {members[ir_get_int(c, "from", 0)], members[ir_get_int(c, "to", 0)]};
    return comm_cost(m, c->op, spmd_comm_bytes(c), b, pair, 2, method);
  }
  if (c->op == OP_all_reduce || c->op == OP_bcast)
    bytes = type_bytes(&c->in[0]->type);
  else if (c->op == OP_all_to_all)
    bytes = all_to_all_bytes(c, k);
  else
    block_bytes(c, k, b);
  return comm_cost(m, c->op, bytes, b, members, k, method);
}

int comm_choose(const Module *m, const Inst *c, const int *members, int k) {
  int best = DTRT_COMM_MPI;
  double cost = comm_time(m, c, members, k, best);
  for (int method = 1; method < DTRT_COMM_COUNT; method++) {
    double t = comm_time(m, c, members, k, method);
    if (t < cost) {
      cost = t;
      best = method;
    }
  }
  return best;
}

unsigned comm_batch_axes(const Module *m) {
  unsigned axes = 0;
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind == G_INPUT && gl->shard && gl->type.rank > 0 && gl->shard->axis[0] >= 0)
      axes |= 1u << gl->shard->axis[0];
  }
  return axes;
}

/* A value reaches what one of its users reaches: one sweep from the last
 * instruction back. */
unsigned char *comm_reach(Arena *a, const Module *m, Func *f) {
  Uses u = ir_uses(a, f);
  unsigned char *reach = arena_alloc(a, (size_t)f->inst.n + 1);
  for (int k = f->inst.n - 1; k >= 0; k--) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_output && m->train.loss && !strcmp(ir_get_str(i, "name", ""), m->train.loss))
      reach[k] |= COMM_REACH_LOSS;
    const Global *g = i->op == OP_store ? ir_global_of(i) : NULL;
    if (g && (g->kind == G_PARAM || g->kind == G_STATE))
      reach[k] |= COMM_REACH_UPDATE;
    for (int j = u.off[k]; j < u.off[k + 1]; j++)
      reach[k] |= reach[u.u[j]->id];
  }
  return reach;
}

/* Marks the gradient exchanges of device function f (see the file's
 * comment) with `wire`; their count. */
static int mark_exchange(Module *m, Func *f, unsigned axes, int wire) {
  Arena *tmp = arena_new();
  const unsigned char *reach = comm_reach(tmp, m, f);
  int n = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *c = f->inst.a[k];
    if ((c->op == OP_all_reduce || c->op == OP_reduce_scatter) && reach[k] == COMM_REACH_UPDATE &&
        (axes >> ir_get_int(c, "axis", 0) & 1u)) {
      if (!ir_attr(c, "method"))   /* chosen below; first, so attributes print in schema order */
        ir_set_int(c, "method", DTRT_COMM_MPI);
      ir_set_int(c, "wire", wire);
      n++;
    }
  }
  arena_free(tmp);
  return n;
}

/* Under `exchange = bf16` (or auto, which the plan pass has decided, and
 * where it cannot, reported): its located errors, then the wire of every
 * gradient exchange. run is NULL in the planner's trials, which may try a
 * plan without one; a mesh of one device has none to have. */
static bool set_exchange(Module *m, Diag *d, const PassRun *run) {
  char at[300] = "";
  if (m->exchange == DT_WIRE_F32)
    return true;
  const char *fmt = dtrt_wire_names[m->exchange];
  if (!m->train.loss) {
    diag_error(d, m->exchange_loc,
               "exchange = %s sends the gradients of training in %s, but "
               "model '%s' is not trained (it has no minimize statement)",
               fmt, fmt, m->name);
    return false;
  }
  if (m->det_pieces > 1) {
    if (m->det_loc.file && m->det_loc.line)
      snprintf(at, sizeof at, " (%s:%d:%d)", m->det_loc.file->name, m->det_loc.line,
               m->det_loc.col);
    diag_error(d, m->exchange_loc,
               "exchange = %s rounds partial sums where devices meet, "
               "so its result depends on the layout; deterministic mode%s promises the same "
               "bits on any layout: drop one of them",
               fmt, at);
    return false;
  }
  unsigned axes = comm_batch_axes(m);
  int n = 0;
  for (int f = 0; f < m->func.n; f++) {
    Func *fn = m->func.a[f];
    if (fn->device >= 0 && !fn->body && ir_func_is(fn, "train_step"))
      n += mark_exchange(m, fn, axes, m->exchange);
  }
  int ndev = ir_mesh_devices(m);   /* a mesh of one device (an elastic build's smallest)
                                     exchanges nothing */
  if (!n && (run || !m->mesh.n) && !(m->mesh.n && ndev == 1)) {
    diag_error(d, m->exchange_loc,
               "exchange = %s applies to the sum of gradients over a "
               "data-parallel axis, but %s: split the batch of an input over a mesh axis "
               "(shard x: [dp, *])",
               fmt,
               m->mesh.n ? "this plan has none (no input's batch is split)" : "there is no mesh");
    return false;
  }
  return true;
}

bool pass_comm(Module *m, Diag *d, PassRun *run) {
  if (!set_exchange(m, d, run))
    return false;
  if (!m->mesh.n)
    return true;
  int members[SHARD_MAX_AXIS];
  for (int f = 0; f < m->func.n; f++) {
    const Func *fn = m->func.a[f];
    if (fn->device < 0)
      continue;
    for (int k = 0; k < fn->inst.n; k++) {
      Inst *c = fn->inst.a[k];
      if (ir_ops[c->op].kind != K_COMM || c->op == OP_shard_slice || c->op == OP_send ||
          c->op == OP_bcast || c->op == OP_fold_all)
        continue;
      int axis = (int)ir_get_int(c, "axis", 0), n = m->mesh.a[0].axis_size[axis];
      ir_mesh_group(&m->mesh.a[0], fn->device, axis, members);
      ir_set_int(c, "method", comm_choose(m, c, members, n));
    }
  }
  return true;
}
