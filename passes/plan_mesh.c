/* plan_mesh.c: `plan auto` on a mesh of two or three axes, where the
 * one-axis search of plan.c does not reach: a choice among whole plans,
 * each run through the passes after plan on a copy and simulated. The
 * candidates: the parallel block's forms as written; and, for each axis the
 * block leaves free as the pipeline's, the stacked params of the step's
 * forward loops split by layers over that axis (each stage's share of the
 * layers in proportion to its speed: the devices of a stage split the batch
 * evenly, so a stage runs at its slowest device's speed times their number)
 * with the inputs the block leaves open split by rows over another axis
 * (data parallel within each stage; on three axes the third keeps what the
 * block writes for it, Megatron's splits say), in each micro-batch count
 * the cut takes. The fastest
 * candidate whose every device fits in its memory wins; the written forms
 * stay unless it gains more than NOISE over them (or they do not fit).
 *
 * Requires: as plan.c, a mesh of two or three axes and a cluster. Guarantees: the
 * globals' forms and the micro-batch count of the candidate kept; a record
 * for --emit=plan (PlanInfo.mesh_report). Modules it cannot plan (no
 * cluster, no @train_step, more devices than SHARD_MAX_AXIS) are left as
 * they are. Deterministic: candidates in a fixed order, the first of equal
 * steps kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "passes.h"

#define NOISE 0.05   /* the least gain over the written forms that counts */
#define MAX_CANDS 32

typedef struct Cand {
  char what[160];
  Sharding **forms;   /* by global */
  int mb;             /* micro-batches; 0: the module's own */
  double step;        /* simulated seconds; INFINITY: failed in the passes */
  double worst;       /* the largest need / mem over the devices */
} Cand;

/* Device `dev` (flat, row-major) of the mesh. */
static const Device *mesh_dev(const Module *m, int dev) {
  return &m->cluster->dev.a[m->mesh.a[0].dev[dev]];
}

/* The stage of flat device dev along axis x. */
static int coord(const Mesh *mesh, int dev, int x) {
  int c[IR_MAX_MESH_AXES];
  ir_mesh_coords(mesh, dev, c);
  return c[x];
}

/* The mesh's device count. */
static int mesh_size(const Mesh *mesh) {
  int n = 1;
  for (int x = 0; x < mesh->naxis; x++)
    n *= mesh->axis_size[x];
  return n;
}

static Sharding *split(Arena *a, int mesh, int dim, int axis, double *ratio) {
  Sharding *s = arena_alloc(a, sizeof *s);
  memset(s, 0, sizeof *s);
  s->mesh = mesh;
  for (int d = 0; d < IR_MAX_RANK; d++)
    s->axis[d] = -1;
  s->axis[dim] = (int8_t)axis;
  s->ratio[dim] = ratio;
  return s;
}

/* Layer ratios over axis x: L layers in proportion to each stage's speed,
 * whole layers, at least one each (largest remainder), as multiples of
 * 1e-6 that ir_blocks turns back into those counts; NULL when L is short. */
static double *stage_ratios(const Module *m, int x, int64_t L, int64_t *layers) {
  const Mesh *mesh = &m->mesh.a[0];
  int k = mesh->axis_size[x], ndev = mesh_size(mesh);
  if (L < k)
    return NULL;
  double speed[SHARD_MAX_AXIS], sum = 0;
  for (int s = 0; s < k; s++)
    speed[s] = INFINITY;
  for (int dev = 0; dev < ndev; dev++) {
    double g = mesh_dev(m, dev)->gflops > 0 ? mesh_dev(m, dev)->gflops : 1;
    int s = coord(mesh, dev, x);
    speed[s] = fmin(speed[s], g);
  }
  for (int s = 0; s < k; s++)
    sum += speed[s];
  int64_t given = 0;
  double rest[SHARD_MAX_AXIS];
  for (int s = 0; s < k; s++) {
    double want = (double)L * speed[s] / sum;
    layers[s] = (int64_t)want;
    rest[s] = want - floor(want);
    given += layers[s];
  }
  while (given < L) {
    int best = 0;
    for (int s = 1; s < k; s++)
      if (rest[s] > rest[best])
        best = s;
    layers[best]++, rest[best] = -1, given++;
  }
  for (int s = 0; s < k; s++)   /* a stage holds a layer at least */
    while (layers[s] < 1) {
      int most = 0;
      for (int t = 1; t < k; t++)
        if (layers[t] > layers[most])
          most = t;
      layers[most]--, layers[s]++;
    }
  double *r = arena_alloc(m->arena, sizeof *r * (size_t)k);
  int64_t units = 0;
  for (int s = 0; s < k; s++) {
    r[s] = floor((double)layers[s] * 1e6 / (double)L) / 1e6;
    units += (int64_t)llround(r[s] * 1e6);
  }
  r[k - 1] += (double)(1000000 - units) / 1e6;
  int64_t check[SHARD_MAX_AXIS];
  ir_blocks(L, r, k, check);
  for (int s = 0; s < k; s++)
    if (check[s] != layers[s])
      return NULL;
  return r;
}

/* The step's forward loops' stacked params into g[] (global indices, room
 * for every global); their layer count (the least) into *L. */
static int stacked_params(const Module *m, const Func *step, int *g, int64_t *L) {
  int n = 0;
  *L = 0;
  for (int k = 0; k < step->inst.n; k++) {
    const Inst *r = step->inst.a[k];
    if (r->op != OP_repeat || ir_get_int(r, "reverse", 0))
      continue;
    for (int j = 0; j < r->nin; j++) {
      const Global *gl = r->in[j]->op == OP_load ? ir_global_of(r->in[j]) : NULL;
      if (!gl || gl->kind != G_PARAM || ir_repeat_operand_kind(r, j) != 2 || gl->type.rank < 1)
        continue;
      int at = (int)(gl - m->global.a), dup = 0;
      for (int q = 0; q < n; q++)
        dup |= g[q] == at;
      if (dup)
        continue;
      g[n++] = at;
      *L = *L && *L < gl->type.dim[0] ? *L : gl->type.dim[0];
    }
  }
  return n;
}

/* Simulates candidate c: its forms and micro-batches on m, the passes after
 * plan on a copy; m as it was after. */
static void try_cand(Module *m, const PassRun *run, Cand *c) {
  int ng = m->global.n, mb = m->microbatches;
  Loc mb_loc = m->microbatches_loc;
  Sharding **was = arena_alloc(m->arena, sizeof *was * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++) {
    was[g] = m->global.a[g].shard;
    m->global.a[g].shard = c->forms[g];
  }
  if (c->mb) {
    m->microbatches = c->mb;
    m->microbatches_loc = m->mesh.a[0].loc;
  }
  double need[SHARD_MAX_AXIS], step = INFINITY;
  const Mesh *mesh = &m->mesh.a[0];
  int ndev = mesh_size(mesh);
  c->step = INFINITY;
  c->worst = INFINITY;
  if (plan_trial(m, run, need, &step)) {
    c->step = step;
    c->worst = 0;
    for (int dev = 0; dev < ndev; dev++) {
      double mem = (double)mesh_dev(m, dev)->mem;
      if (mem > 0)
        c->worst = fmax(c->worst, need[dev] / mem);
    }
  }
  for (int g = 0; g < ng; g++)
    m->global.a[g].shard = was[g];
  m->microbatches = mb;
  m->microbatches_loc = mb_loc;
}

/* Whether forms split something over axis x. */
static bool taken(const Module *m, Sharding *const *forms, int x) {
  for (int g = 0; g < m->global.n; g++)
    for (int d = 0; forms[g] && d < m->global.a[g].type.rank; d++)
      if (forms[g]->axis[d] == x)
        return true;
  return false;
}

/* Whether the ns stacked params sg may take stages over an axis the block
 * leaves free with rows over y: each is open, or its form (Megatron's
 * split, say) leaves its layer dimension whole and uses no axis y. */
static bool layers_free(Sharding *const *forms, const int *sg, int ns, int y) {
  for (int q = 0; q < ns; q++) {
    const Sharding *f = forms[sg[q]];
    if (!f)
      continue;
    if (f->axis[0] >= 0)
      return false;
    for (int d = 1; d < IR_MAX_RANK; d++)
      if (f->axis[d] == y)
        return false;
  }
  return true;
}

static const Func *train_step(const Module *m) {
  const Func *f = ir_find_func(m, "train_step");
  return f && f->device < 0 ? f : NULL;
}

bool plan_mesh(Module *m, Diag *d, PassRun *run) {
  (void)d;
  const Mesh *mesh = &m->mesh.a[0];
  const Func *step = train_step(m);
  int ng = m->global.n;
  if (!m->cluster || m->mesh.n != 1 || mesh->naxis < 2 || !step ||
      mesh_size(mesh) > SHARD_MAX_AXIS)
    return true;
  Cand *cand = arena_alloc(m->arena, sizeof *cand * MAX_CANDS);
  int nc = 0;
  Sharding **user = arena_alloc(m->arena, sizeof *user * (size_t)(ng + 1));
  for (int g = 0; g < ng; g++)
    user[g] = m->global.a[g].shard;
  cand[nc] = (Cand){.forms = user};
  snprintf(cand[nc].what, sizeof cand[nc].what, "the parallel block's forms%s",
           m->microbatches > 1 ? ", its micro-batches" : "");
  try_cand(m, run, &cand[nc++]);

  int *sg = arena_alloc(m->arena, sizeof *sg * (size_t)(ng + 1));
  int64_t L;
  int ns = stacked_params(m, step, sg, &L);
  int64_t rows = 0;
  for (int k = 0; k < step->inst.n && !rows; k++)
    if (step->inst.a[k]->op == OP_repeat && step->inst.a[k]->in[0]->type.rank)
      rows = step->inst.a[k]->in[0]->type.dim[0];
  for (int xy = 0; ns > 0 && xy < mesh->naxis * mesh->naxis; xy++) {
    int x = xy / mesh->naxis, y = xy % mesh->naxis;   /* stages over x, rows over y */
    if (x == y || mesh->axis_size[x] < 2 || taken(m, user, x) ||
        (mesh->naxis > 2 && taken(m, user, y)) || !layers_free(user, sg, ns, y))
      continue;
    int64_t layers[SHARD_MAX_AXIS];
    double *r = stage_ratios(m, x, L, layers);
    if (!r)
      continue;
    Sharding **forms = arena_alloc(m->arena, sizeof *forms * (size_t)(ng + 1));
    for (int g = 0; g < ng; g++) {
      const Global *gl = &m->global.a[g];
      forms[g] = user[g];
      if (!user[g] && gl->kind == G_INPUT && gl->type.rank > 0 &&
          gl->type.dim[0] >= mesh->axis_size[y])
        forms[g] = split(m->arena, 0, 0, y, NULL);
    }
    for (int q = 0; q < ns; q++) {   /* their layers over x, the rest as written */
      Sharding *f = split(m->arena, 0, 0, x, r);
      if (user[sg[q]]) {
        *f = *user[sg[q]];
        f->axis[0] = (int8_t)x;
        f->ratio[0] = r;
      }
      forms[sg[q]] = f;
    }
    char split_text[96] = "";
    for (int s = 0, at = 0; s < mesh->axis_size[x] && at < 80; s++)
      at += snprintf(split_text + at, sizeof split_text - (size_t)at, "%s%lld", s ? "/" : "",
                     (long long)layers[s]);
    int mbs[8], nmb = 0;
    if (m->microbatches > 1)
      mbs[nmb++] = m->microbatches;
    else
      for (int mb = 1; mb <= IR_MAX_MICROBATCHES && nmb < 8; mb *= 2)
        if (mb == 1 || (m->det_pieces < 2 && rows % mb == 0 &&
                        rows / mb >= 2 * mesh->axis_size[y] && microbatch_fits(m, mb)))
          mbs[nmb++] = mb;
    for (int k = 0; k < nmb && nc < MAX_CANDS; k++) {
      Cand *c = &cand[nc++];
      *c = (Cand){.forms = forms, .mb = m->microbatches > 1 ? 0 : mbs[k]};
      snprintf(c->what, sizeof c->what, "stages over %s (layers %s), rows over %s, %d micro-batch%s",
               mesh->axis_name[x], split_text, mesh->axis_name[y], mbs[k], mbs[k] == 1 ? "" : "es");
      try_cand(m, run, c);
    }
  }

  int best = -1;
  for (int c = 0; c < nc; c++)
    if (cand[c].step < INFINITY && cand[c].worst <= 1 && (best < 0 || cand[c].step < cand[best].step))
      best = c;
  bool keep = best < 0 || (cand[0].step < INFINITY && cand[0].worst <= 1 &&
                           !(cand[best].step < cand[0].step * (1 - NOISE)));
  int kept = keep ? 0 : best;

  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  if (out) {
    fprintf(out, "device plan of %s on mesh %s[", m->name, mesh->name);
    for (int x = 0; x < mesh->naxis; x++)
      fprintf(out, "%s%s = %d", x ? ", " : "", mesh->axis_name[x], mesh->axis_size[x]);
    fprintf(out, "] (plan auto): %d candidate%s simulated\n", nc, nc == 1 ? "" : "s");
    for (int c = 0; c < nc; c++) {
      fprintf(out, "  %s %-72s ", c == kept ? "*" : " ", cand[c].what);
      if (cand[c].step == INFINITY)
        fprintf(out, "fails in the passes\n");
      else
        fprintf(out, "%10.4f ms, fullest device at %.1f%% of its memory%s\n",
                cand[c].step * 1e3, cand[c].worst * 100, cand[c].worst > 1 ? " (OVER)" : "");
    }
    if (best < 0)
      fprintf(out, "  no candidate fits every device's memory: the parallel block's forms kept\n");
    else if (keep && best != 0)
      fprintf(out, "  the best gains less than %.0f%% over the parallel block's forms: they are "
              "kept\n", NOISE * 100);
    fclose(out);
  }
  if (kept) {
    for (int g = 0; g < ng; g++)
      m->global.a[g].shard = cand[kept].forms[g];
    if (cand[kept].mb > 1) {
      m->microbatches = cand[kept].mb;
      m->microbatches_loc = mesh->loc;
    }
  }
  if (run) {
    PlanInfo *pi = arena_alloc(m->arena, sizeof *pi);
    memset(pi, 0, sizeof *pi);
    pi->step = cand[kept].step;
    pi->mesh_report = text ? arena_printf(m->arena, "%s", text) : NULL;
    run->plan = pi;
  }
  free(text);
  return true;
}
