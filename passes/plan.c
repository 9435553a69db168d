/* plan.c: the planner. Chooses the per-device ratios of the splits the
 * parallel block asks for, so that devices of unequal speed finish a training
 * step together (HAP's linear program, docs/ARCHITECTURE.md, Planner).
 *
 * Requires: @train_step (passes/autodiff.c; @forward for an inference-only
 * model), the annotated shardings of the parallel block (Global.shard), no
 * propagation yet. Guarantees: with `plan even`, every annotated split is even
 * (Sharding.ratio NULL); with `plan auto` on a one-axis mesh, every annotated
 * split written without ratios carries the planned ratios (multiples of 1e-6
 * summing to 1, NULL when the plan is even), the same for every global split
 * on the axis; splits written with ratios, `plan explicit`, two-axis meshes
 * and modules without a mesh are left as they are. Deterministic. */
#include <glpk.h>
#include <math.h>
#include <string.h>

#include "ir.h"
#include "passes.h"

/* Ratios are written in millionths, so their %g text parses back exactly and
 * sums to 1. */
#define RATIO_UNITS 1000000

/* The planner's cost model of one training step on a one-axis mesh: device c
 * computes its ratio r[c] of the step's FLOPs (time w[c] r[c]) and then joins
 * the gradient all-reduce (time comm, independent of the ratios); it holds
 * `fixed` bytes of whole globals and r[c] of `scaled` bytes (split globals
 * and activations). */
typedef struct Model {
  int k;
  const Device *dev[SHARD_MAX_AXIS];
  double w[SHARD_MAX_AXIS];   /* seconds for the whole step's FLOPs */
  double flops, grad_bytes, comm;
  double fixed, scaled;
  int64_t min_len;            /* shortest split dimension; 0: none */
} Model;

static bool split_on(const Global *g, int axis) {
  for (int d = 0; g->shard && d < g->type.rank; d++)
    if (g->shard->axis[d] == axis)
      return true;
  return false;
}

static double func_flops(const Func *f) {
  double n = 0;
  for (int i = 0; i < f->inst.n; i++)
    n += ir_ops[f->inst.a[i]->op].flops(f->inst.a[i]);
  return n;
}

/* Bytes of the values a step keeps while it runs, an upper bound on its
 * activations: every result but loads (counted as globals) and plumbing. */
static double func_value_bytes(const Func *f) {
  double n = 0;
  for (int i = 0; i < f->inst.n; i++) {
    const Inst *x = f->inst.a[i];
    if (x->type.dtype == DT_VOID || x->op == OP_load || x->op == OP_const)
      continue;
    n += (double)type_elems(&x->type) * (double)dtype_size(x->type.dtype);
  }
  return n;
}

/* The step's FLOPs: the global step before spmd, the sum of its per-device
 * copies after. */
static const Func *step_func(const Module *m, double *flops) {
  const char *names[] = {"train_step", "forward"};
  for (int n = 0; n < COUNTOF(names); n++) {
    const Func *global = NULL;
    double sum = 0;
    bool any = false;
    for (int i = 0; i < m->func.n; i++) {
      const Func *f = m->func.a[i];
      if (!ir_func_is(f, names[n]))
        continue;
      any = true;
      if (f->device < 0)
        global = f;
      sum += func_flops(f);
    }
    if (any) {
      *flops = sum;
      return global;
    }
  }
  *flops = 0;
  return NULL;
}

static const Link *find_link(const Cluster *c, const char *name) {
  for (int i = 0; c && i < c->link.n; i++)
    if (!strcmp(c->link.a[i].name, name))
      return &c->link.a[i];
  return NULL;
}

/* The cost model of mesh 0's axis 0; false when the module cannot be planned
 * (no cluster, no one-axis mesh, no step). */
static bool model_build(const Module *m, Model *md) {
  memset(md, 0, sizeof *md);
  if (!m->cluster || m->mesh.n != 1 || m->mesh.a[0].naxis != 1)
    return false;
  const Mesh *mesh = &m->mesh.a[0];
  md->k = mesh->axis_size[0];
  if (md->k > SHARD_MAX_AXIS)
    return false;
  const Func *step = step_func(m, &md->flops);
  if (md->flops <= 0 && !step)
    return false;
  bool one_node = true;
  for (int c = 0; c < md->k; c++) {
    md->dev[c] = &m->cluster->dev.a[mesh->dev[c]];
    md->w[c] = md->flops / (md->dev[c]->gflops * 1e9);
    one_node = one_node && md->dev[c]->node == md->dev[0]->node;
  }
  for (int i = 0; i < m->global.n; i++) {
    const Global *g = &m->global.a[i];
    double bytes = (double)type_elems(&g->type) * (double)dtype_size(g->type.dtype);
    if (g->kind == G_PARAM)
      md->grad_bytes += bytes;
    if (!split_on(g, 0)) {
      md->fixed += bytes;
      continue;
    }
    md->scaled += bytes;
    for (int d = 0; d < g->type.rank; d++)
      if (g->shard->axis[d] == 0 && (!md->min_len || g->type.dim[d] < md->min_len))
        md->min_len = g->type.dim[d];
  }
  if (step)
    md->scaled += func_value_bytes(step);
  const Link *l = find_link(m->cluster, one_node ? "intra" : "inter");
  if (md->k > 1 && l)
    md->comm = 2.0 * (md->k - 1) / md->k * md->grad_bytes / l->bw + l->lat;
  return true;
}

/* Predicted step time with ratios r (NULL: even); *slow gets the bottleneck. */
static double model_time(const Model *md, const double *r, int *slow) {
  double worst = -1;
  for (int c = 0; c < md->k; c++) {
    double t = md->w[c] * (r ? r[c] : 1.0 / md->k);
    if (t > worst)
      worst = t, *slow = c;
  }
  return worst + md->comm;
}

/* Minimise t subject to t >= w[c] r[c] + comm, sum r = 1,
 * lo <= r[c] <= hi[c] (hi from memory). Times are scaled by the largest w so
 * the simplex works on numbers near 1. */
static bool solve_lp(const Model *md, double lo, const double *hi, double *r) {
  int k = md->k;
  double scale = 0;
  for (int c = 0; c < k; c++)
    scale = fmax(scale, md->w[c]);
  glp_prob *lp = glp_create_prob();
  glp_set_obj_dir(lp, GLP_MIN);
  glp_add_cols(lp, k + 1);
  for (int c = 0; c < k; c++) {
    if (hi[c] > lo)
      glp_set_col_bnds(lp, c + 1, GLP_DB, lo, hi[c]);
    else
      glp_set_col_bnds(lp, c + 1, GLP_FX, lo, lo);
  }
  glp_set_col_bnds(lp, k + 1, GLP_LO, 0, 0);
  glp_set_obj_coef(lp, k + 1, 1);
  glp_add_rows(lp, k + 1);
  int ind[SHARD_MAX_AXIS + 2];
  double val[SHARD_MAX_AXIS + 2];
  for (int c = 0; c < k; c++) {
    ind[1] = k + 1, val[1] = 1;
    ind[2] = c + 1, val[2] = -md->w[c] / scale;
    glp_set_mat_row(lp, c + 1, 2, ind, val);
    glp_set_row_bnds(lp, c + 1, GLP_LO, md->comm / scale, 0);
  }
  for (int c = 0; c < k; c++)
    ind[c + 1] = c + 1, val[c + 1] = 1;
  glp_set_mat_row(lp, k + 1, k, ind, val);
  glp_set_row_bnds(lp, k + 1, GLP_FX, 1, 1);
  glp_smcp parm;
  glp_init_smcp(&parm);
  parm.msg_lev = GLP_MSG_OFF;
  bool ok = glp_simplex(lp, &parm) == 0 && glp_get_status(lp) == GLP_OPT;
  for (int c = 0; ok && c < k; c++)
    r[c] = glp_get_col_prim(lp, c + 1);
  glp_delete_prob(lp);
  return ok;
}

static void set_ratios(Module *m, double *ratio) {
  for (int i = 0; i < m->global.n; i++) {
    Global *g = &m->global.a[i];
    for (int d = 0; split_on(g, 0) && d < g->type.rank; d++)
      if (g->shard->axis[d] == 0)
        g->shard->ratio[d] = ratio;
  }
}

/* The bounds of every ratio: at least lo, so every device keeps one element
 * of the shortest split; at most hi[c], what device c's memory holds. */
static double ratio_bounds(const Model *md, double *hi) {
  for (int c = 0; c < md->k; c++) {
    double room = (double)md->dev[c]->mem - md->fixed;
    hi[c] = md->scaled > 0 ? fmin(1, room / md->scaled) : 1;
  }
  return md->min_len ? fmin(1.0 / (double)md->min_len + 1.0 / RATIO_UNITS, 1.0 / md->k) : 0;
}

/* Plans the ratios of axis 0 from the cost model; false after an error. */
static bool plan_auto(Module *m, Diag *d) {
  Model md;
  if (!model_build(m, &md) || !md.min_len)
    return true;
  for (int i = 0; i < m->global.n; i++) {
    const Global *g = &m->global.a[i];
    for (int dd = 0; split_on(g, 0) && dd < g->type.rank; dd++)
      if (g->shard->axis[dd] == 0 && g->shard->ratio[dd])
        return true;   /* the user's ratios */
  }
  int k = md.k;
  const Mesh *mesh = &m->mesh.a[0];
  double hi[SHARD_MAX_AXIS], room = 0, lo = ratio_bounds(&md, hi);
  for (int c = 0; c < k; c++) {
    if (hi[c] < lo) {
      diag_error(d, mesh->loc,
                 "device '%s' has %lld bytes of memory, too few for any share of the step: "
                 "it needs %.0f bytes of whole tensors and %.0f bytes for its smallest share",
                 md.dev[c]->name, (long long)md.dev[c]->mem, md.fixed, md.scaled * lo);
      return false;
    }
    room += hi[c];
  }
  if (room < 1) {
    diag_error(d, mesh->loc,
               "the devices of mesh '%s' together have too little memory for the step: "
               "its split tensors and activations need %.0f bytes",
               mesh->name, md.scaled);
    return false;
  }
  double r[SHARD_MAX_AXIS];
  bool all_same = true;
  for (int c = 0; c < k; c++)
    all_same = all_same && md.w[c] == md.w[0] && hi[c] >= 1.0 / k;
  if (all_same || md.flops <= 0) {
    set_ratios(m, NULL);
    return true;
  }
  DTC_ASSERT(solve_lp(&md, lo, hi, r));
  int64_t units[SHARD_MAX_AXIS];
  ir_blocks(RATIO_UNITS, r, k, units);
  /* Rounding may lift a device at its memory bound by a unit: hand that unit
   * to the device with the most room left. */
  for (int c = 0; c < k; c++)
    while ((double)units[c] > floor(hi[c] * RATIO_UNITS)) {
      int to = -1;
      double most = 0;
      for (int j = 0; j < k; j++) {
        double left = floor(hi[j] * RATIO_UNITS) - (double)units[j];
        if (left >= 1 && (to < 0 || left > most))
          to = j, most = left;
      }
      DTC_ASSERT(to >= 0);
      units[c]--, units[to]++;
    }
  double *ratio = arena_alloc(m->arena, sizeof *ratio * (size_t)k);
  bool even = true;
  for (int c = 0; c < k; c++) {
    DTC_ASSERT(units[c] > 0);
    ratio[c] = (double)units[c] / RATIO_UNITS;
    even = even && fabs(r[c] - 1.0 / k) < 1e-9;
  }
  set_ratios(m, even ? NULL : ratio);
  return true;
}

bool pass_plan(Module *m, Diag *d) {
  if (!m->mesh.n || m->plan == PLAN_EXPLICIT || m->plan == PLAN_NONE)
    return true;
  if (m->plan == PLAN_EVEN) {
    for (int i = 0; i < m->global.n; i++) {
      Global *g = &m->global.a[i];
      for (int dd = 0; g->shard && dd < g->type.rank; dd++)
        g->shard->ratio[dd] = NULL;
    }
    return true;
  }
  return plan_auto(m, d);
}

bool plan_solve(const Module *m, double *ratio) {
  Model md;
  if (!model_build(m, &md))
    return false;
  double hi[SHARD_MAX_AXIS], lo = ratio_bounds(&md, hi);
  return solve_lp(&md, lo, hi, ratio);
}

/* ---- the report ---- */

static const double *axis_ratios(const Module *m) {
  for (int i = 0; i < m->global.n; i++) {
    const Global *g = &m->global.a[i];
    for (int d = 0; split_on(g, 0) && d < g->type.rank; d++)
      if (g->shard->axis[d] == 0)
        return g->shard->ratio[d];
  }
  return NULL;
}

void plan_report(FILE *out, const Module *m) {
  static const char *modes[] = {"none", "auto", "even", "explicit"};
  static_assert(COUNTOF(modes) == PLAN_EXPLICIT + 1, "plan mode names");
  Model md;
  if (!model_build(m, &md))
    return;
  const Mesh *mesh = &m->mesh.a[0];
  const double *ratio = axis_ratios(m);
  double r[SHARD_MAX_AXIS];
  for (int c = 0; c < md.k; c++)
    r[c] = ratio ? ratio[c] : 1.0 / md.k;
  int slow = 0, slow_even = 0;
  double t = model_time(&md, r, &slow), t_even = model_time(&md, NULL, &slow_even);
  fprintf(out, "device plan of %s on mesh %s[%s = %d] (plan %s): %.4g GFLOP per step\n",
          m->name, mesh->name, mesh->axis_name[0], md.k, modes[m->plan], md.flops * 1e-9);
  fprintf(out, "  %-12s %10s %10s %12s\n", "device", "GFLOP/s", "ratio", "compute ms");
  for (int c = 0; c < md.k; c++)
    fprintf(out, "  %-12s %10.4g %10.6f %12.4f\n", md.dev[c]->name, md.dev[c]->gflops, r[c],
            md.w[c] * r[c] * 1e3);
  fprintf(out, "  gradient all-reduce: %.0f bytes, %.4f ms\n", md.grad_bytes, md.comm * 1e3);
  fprintf(out, "  predicted step: %.4f ms (even: %.4f ms, even/this %.3fx); bottleneck %s\n\n",
          t * 1e3, t_even * 1e3, t > 0 ? t_even / t : 1.0, md.dev[slow]->name);
}
