/* plan.c: the planner. `plan auto` chooses, on a mesh of one, two or three
 * axes, a layout of the step: for each mesh axis a layout family (rows: the
 * batch split, data parallel; forms: HAP's search over which params are
 * split along which dimension; stages: the stacked layers of the step's
 * loops split into pipeline stages, in micro-batches; sequence: the inputs
 * split along an attention's sequence, the attention a ring (ring.c); keep:
 * what the parallel block writes for the axis, Megatron's splits say), and the
 * per-device ratios of every split, so that devices of unequal speed finish
 * together and the collectives cost least (docs/ARCHITECTURE.md, Planner).
 *
 * For each combination of families over the axes (one role per axis: at
 * most one rows, one stages and one sequence axis; an axis the block writes forms for
 * keeps them), the family seeds the forms; on one axis a greedy descent
 * over the open globals' forms follows; the sharding pass propagates them,
 * plan_cost.c estimates the step and its linear programs choose the ratios
 * within each device's memory. On one axis the estimate ranks, and the
 * plan kept is the simplest no other beats by more than the probe's noise:
 * even data parallel, data parallel with the planned ratios, the best; its
 * memory plan, where the count comes near a device's memory, is checked on
 * a copy and corrects the count. On more axes, the best few by the estimate
 * and the block's own forms are compiled on a copy, simulated and memory
 * planned; the fastest that fits is kept, the block's forms unless beaten
 * by more than NOISE_FLOOR. A candidate whose attention the block leaves
 * open, a ring, goes with its twin by heads (or back), both simulated.
 *
 * Requires: @train_step (passes/autodiff.c; @forward for an inference-only
 * model), the parallel block's shardings (Global.shard), no propagation yet.
 * Guarantees: with `plan even`, every annotated split is even (Sharding.ratio
 * NULL); with `plan auto` and a cluster, Global.shard holds the chosen forms
 * of inputs and params (NULL: left to propagation), every split over an axis
 * carrying that axis's planned ratios (multiples of 1e-6 summing to 1, NULL
 * when even), Module.microbatches a planned pipeline's; a parallel block
 * that writes ratios, `plan explicit`, and modules without a mesh or
 * cluster are left as they are. PassRun.plan keeps the record for
 * --emit=plan. Deterministic: combinations and choices in a fixed order,
 * the first of equal costs kept. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

#define MAX_SWEEPS 4        /* passes over the choices of each start */
#define IMPROVES 1e-6       /* a relative fall in cost that counts */
#define NOISE_FLOOR 0.05    /* the least gain over the simpler plan that counts */
#define NFINAL 3            /* candidates simulated besides the block's forms ... */
#define PRUNE 1.5           /* ... whose estimate is within this of the least */
#define MAX_CANDS 128

/* ---- the layout families ---- */

typedef enum { F_KEEP, F_ROWS, F_FORMS, F_STAGES, F_SEQ, NFAMILY } FamilyId;
/* The one-axis contenders that are no combination: even data parallel, and
 * data parallel with the planned ratios (Cand.fam[0]). */
enum { F_EVEN = -1, F_DP = -2 };

typedef struct Family {
  const char *name;
  /* Seeds forms A for axis x (rows: the combination's rows axis, -1: none);
   * false when the family does not apply there. */
  bool (*seed)(Planner *p, int x, int rows, Sharding **A);
} Family;

static Sharding *form(Planner *p, int dim, int x) {
  Sharding *s = arena_alloc(p->m->arena, sizeof *s);
  ir_shard_whole(s);
  if (dim >= 0)
    s->axis[dim] = (int8_t)x;
  return s;
}

/* Whether the parallel block's forms split something over axis x. */
static bool taken(const Planner *p, int x) {
  for (int g = 0; g < p->m->global.n; g++)
    for (int d = 0; p->user[g] && d < p->m->global.a[g].type.rank; d++)
      if (p->user[g]->axis[d] == x)
        return true;
  return false;
}

static bool seed_keep(Planner *p, int x, int rows, Sharding **A) {
  (void)x, (void)rows, (void)A;
  return p->naxis > 1;
}

/* A[g] split along dim over axis x besides what another axis's family
 * seeded. */
static void split_more(Planner *p, Sharding **A, int g, int dim, int x) {
  Sharding *s = form(p, -1, x);
  if (A[g])
    *s = *A[g];
  s->axis[dim] = (int8_t)x;
  A[g] = s;
}

/* Data parallel: every open input split along its first dimension. */
static bool seed_rows(Planner *p, int x, int rows, Sharding **A) {
  (void)rows;
  if (p->naxis > 1 && taken(p, x))
    return false;
  for (int g = 0; g < p->m->global.n; g++) {
    const Global *gl = &p->m->global.a[g];
    if (!p->user[g] && gl->kind == G_INPUT && gl->type.rank > 0 && gl->type.dim[0] >= p->size[x])
      split_more(p, A, g, 0, x);
  }
  return true;
}

/* The sequence length of the module's attentions of as many keys as
 * queries (the length of q's dim 2), 0 when there is none or they differ. */
static int64_t attention_len(const Module *m) {
  int64_t t = 0;
  for (int f = 0; f < m->func.n; f++)
    for (int k = 0; k < m->func.a[f]->inst.n; k++) {
      const Inst *i = m->func.a[f]->inst.a[k];
      if (i->op != OP_sdpa || i->type.rank != 4 || i->in[0]->type.dim[2] != i->in[1]->type.dim[2])
        continue;
      if (t && t != i->in[0]->type.dim[2])
        return 0;
      t = i->in[0]->type.dim[2];
    }
  return t;
}

/* The sequence split (context parallelism, ring attention): where the step
 * attends, every open input split along the last of its dimensions past
 * the first whose length is the attention's sequence. */
static bool seed_seq(Planner *p, int x, int rows, Sharding **A) {
  (void)rows;
  int64_t t = attention_len(p->m);
  bool any = false;
  if (t < p->size[x] || (p->naxis > 1 && taken(p, x)))
    return false;
  for (int g = 0; g < p->m->global.n; g++) {
    const Global *gl = &p->m->global.a[g];
    for (int d = gl->type.rank - 1; !p->user[g] && gl->kind == G_INPUT && d > 0; d--)
      if (gl->type.dim[d] == t) {
        split_more(p, A, g, d, x);
        any = true;
        break;
      }
  }
  return any;
}

/* HAP's search over forms (one axis): the inputs whole, the params open,
 * the descent chooses. */
static bool seed_forms(Planner *p, int x, int rows, Sharding **A) {
  (void)x, (void)rows, (void)A;
  return p->naxis == 1;
}

/* Pipeline stages: the stacked params of the step's forward loops split
 * along their layers, where the block leaves them open (on more than one
 * axis, or writes forms for them that leave their layers whole and use
 * neither this axis nor the rows'). */
static bool seed_stages(Planner *p, int x, int rows, Sharding **A) {
  if (taken(p, x))
    return false;
  bool any = false;
  for (int k = 0; k < p->step->inst.n; k++) {
    const Inst *r = p->step->inst.a[k];
    if (r->op != OP_repeat || ir_get_int(r, "reverse", 0))
      continue;
    for (int j = 0; j < r->nin; j++) {
      const Global *gl = r->in[j]->op == OP_load ? ir_global_of(r->in[j]) : NULL;
      if (!gl || gl->kind != G_PARAM || ir_repeat_operand_kind(r, j) != 2 || gl->type.rank < 1)
        continue;
      int at = (int)(gl - p->m->global.a);
      const Sharding *u = p->user[at];
      if (gl->type.dim[0] < p->size[x])
        continue;
      if (u && (p->naxis == 1 || u->axis[0] >= 0))
        return false;
      for (int d = 1; u && d < IR_MAX_RANK; d++)
        if (u->axis[d] == rows && rows >= 0)
          return false;
      A[at] = form(p, 0, x);
      if (u) {
        *A[at] = *u;
        A[at]->axis[0] = (int8_t)x;
      }
      any = true;
    }
  }
  return any;
}

static const Family families[NFAMILY] = {
  [F_KEEP] = {"keep", seed_keep},
  [F_ROWS] = {"rows", seed_rows},
  [F_FORMS] = {"forms", seed_forms},
  [F_STAGES] = {"stages", seed_stages},
  [F_SEQ] = {"sequence", seed_seq},
};

/* ---- the search over forms (one axis) ---- */

/* A choice of the search: its forms, the micro-batches, the estimate, the
 * ratios, and the forms as they propagated. */
typedef struct Cand {
  int id;                   /* its place in the order of combinations */
  int fam[IR_MAX_MESH_AXES];
  Sharding **forms;         /* as seeded and searched; once settled, with their ratios */
  int mb;
  int state;                /* the axis its optimizer state is split over; -1: none */
  bool heads;               /* its attentions split their heads, not a ring (heads.c) */
  int wire;                 /* the format of its gradient exchange (DtWire) */
  bool either;              /* ... a ring the planner may take by heads instead (or back) */
  double est;               /* the estimate; once settled, with the rounded ratios */
  double comm;              /* ... of which in collectives */
  double *predicted;        /* each device's memory, as estimated */
  const struct Cand *same;  /* an earlier contender of the same forms, which stands for it */
  bool tried;               /* simulated: ... */
  double sim, worst;        /* its step (INFINITY: the passes failed), need / mem */
  double *need;             /* each device's need, as its memory plan counts */
  Ratios R;
  char what[160];
} Cand;

typedef struct Search {
  Planner *p;
  VEC(Sharding **) seen;    /* every choice costed with planned ratios ... */
  VEC(double) seen_t;       /* ... and its predicted step */
} Search;

/* The planner set for candidate c's micro-batches, optimizer state,
 * attention and gradient exchange; and back to the parallel block's. */
static void use(Planner *p, const Cand *c) {
  p->mb = c->mb;
  p->state = c->state;
  p->m->attn_heads = c->heads;
  p->m->exchange = c->wire;
}

/* Candidate c of family fam (on its first axis) in one micro-batch, with
 * the parallel block's optimizer state, attention and gradient exchange. */
static void blank(const Planner *p, Cand *c, int fam) {
  *c = (Cand){.fam = {fam}, .mb = 1, .state = p->user_state, .heads = p->user_heads,
              .wire = p->user_wire};
}

static void unuse(Planner *p) {
  p->state = p->user_state;
  p->m->attn_heads = p->user_heads;
  p->m->exchange = p->user_wire;
}

/* Whether the planner may split the optimizer state over the rows axis
 * (passes/zero.c): the parallel block leaves it open and the step trains
 * dense params that keep state. */
static bool state_open(const Planner *p) {
  const Module *m = p->m;
  bool any = false;
  if (p->user_state >= 0 || m->state_whole || m->train.opt == OPT_DEMO ||
      !ir_find_func(m, "train_step"))
    return false;
  for (int g = 0; g < m->global.n; g++) {
    if (m->global.a[g].sparse)
      return false;
    any |= m->global.a[g].kind == G_STATE;
  }
  return any;
}

static Sharding **copy_forms(Planner *p, Sharding *const *A) {
  int ng = p->m->global.n;
  Sharding **out = arena_alloc(p->m->arena, sizeof *out * (size_t)(ng + 1));
  memcpy(out, A, sizeof *out * (size_t)ng);
  return out;
}

/* plan_evaluate, keeping the propagated forms and step for the runner-up. */
static double evaluate(Search *s, Sharding **A, bool even, Ratios R, Est *e) {
  Planner *p = s->p;
  double t = plan_evaluate(p, A, even, R, e);
  if (!even && t < INFINITY) {
    Sharding **forms = arena_alloc(p->m->arena, sizeof *forms * (size_t)(p->m->global.n + 1));
    for (int g = 0; g < p->m->global.n; g++)
      forms[g] = p->m->global.a[g].shard;
    vec_push(p->m->arena, &s->seen, forms);
    vec_push(p->m->arena, &s->seen_t, t);
  }
  return t;
}

/* The forms global g may take on one axis: whole, or split along a dimension
 * of at least one element per device (inputs along their first only), or
 * for a param also open (its form follows from its users); an embedding
 * bag's table also whole on one device (placed, as `on dp[i]`). At most
 * MAX_FORMS. */
#define MAX_FORMS (IR_MAX_RANK + 2 + SHARD_MAX_AXIS)
static int forms_of(Planner *p, int g, Sharding **out) {
  const Global *gl = &p->m->global.a[g];
  int n = 0, k = p->size[0];
  if (gl->kind == G_PARAM)
    out[n++] = NULL;
  out[n++] = form(p, -1, 0);
  int dims = gl->kind == G_INPUT ? (gl->type.rank > 0) : gl->type.rank;
  for (int d = 0; d < dims; d++)
    if (gl->type.dim[d] >= k)
      out[n++] = form(p, d, 0);
  for (int i = 0; p->table[g] && gl->type.rank == 2 && i < k; i++) {
    double *one = arena_alloc(p->m->arena, sizeof *one * (size_t)k);
    for (int c = 0; c < k; c++)
      one[c] = c == i;
    out[n] = form(p, 1, 0);
    out[n++]->ratio[1] = one;
  }
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
 * choice stays when it lowers the cost; until a sweep changes nothing. A
 * sweep that comes back to the global of the last move, nothing having
 * moved since, ends the descent: from there on it would cost the very
 * choices the sweep before did, against the same cost, and keep none. */
static double descend(Search *s, Sharding **A, double cost) {
  Planner *p = s->p;
  Ratios R;
  Est e;
  Sharding **forms = malloc(sizeof *forms * MAX_FORMS);
  DTC_ASSERT(forms);
  int last = -1;   /* the variable of the last move */
  for (int sweep = 0; sweep < MAX_SWEEPS; sweep++) {
    bool moved = false;
    for (int v = 0; v < p->nvar; v++) {
      if (v == last && !moved)
        goto done;
      int g = p->var[v], n = forms_of(p, g, forms);
      for (int f = 0; f < n; f++) {
        if (form_eq(p, g, forms[f], A[g]))
          continue;
        Sharding *was = A[g];
        A[g] = forms[f];
        double t = evaluate(s, A, false, R, &e);
        if (t < cost * (1 - IMPROVES)) {
          cost = t;
          moved = true;
          last = v;
        } else {
          A[g] = was;
        }
      }
    }
    if (!moved)
      break;
  }
done:
  free(forms);
  return cost;
}

/* The micro-batch counts a pipeline may run in: the parallel block's, or 1
 * and each power of two up to IR_MAX_MICROBATCHES that leaves every
 * micro-batch two rows of the batch on each device of the rows axis (size
 * `per`) and that the cut takes (none in deterministic mode). The estimate
 * has no time per kernel call, so it would always take the most; two rows
 * is the floor. */
static int mb_choices(const Planner *p, int per, int *out) {
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
    if (rows % mb == 0 && rows / mb >= 2 * per && microbatch_fits(m, mb))
      out[n++] = mb;
  return n;
}

/* The best micro-batch count of choices mb[n] for forms A: into p->mb, its
 * step returned (ratios into R, the estimate into e). */
static double pick_mb(Search *s, Sharding **A, const int *mb, int n, Ratios R, Est *e) {
  Planner *p = s->p;
  double best = INFINITY;
  int at = 0;
  for (int j = 0; j < n; j++) {
    p->mb = mb[j];
    double t = evaluate(s, A, false, R, e);
    if (t < best * (1 - IMPROVES))
      best = t, at = j;
  }
  p->mb = mb[at];
  return evaluate(s, A, false, R, e);
}

/* The open inputs of A whole. */
static Sharding **inputs_whole(Planner *p, Sharding **A) {
  for (int g = 0; g < p->m->global.n; g++)
    if (!A[g] && p->m->global.a[g].kind == G_INPUT)
      A[g] = form(p, -1, 0);
  return A;
}

/* Under `exchange = auto`, candidate c (its forms and choices) takes its
 * gradients in bf16 where that gains more than NOISE_FLOOR by the estimate
 * (with even ratios when `even`), with that estimate and its ratios. */
static void try_bf16(Search *s, Cand *c, bool even) {
  Planner *p = s->p;
  if (!p->exchange_open || !c->forms)
    return;
  Ratios R;
  Est e;
  use(p, c);
  double f32 = evaluate(s, c->forms, even, R, &e);
  p->m->exchange = DT_WIRE_BF16;
  double t = evaluate(s, c->forms, even, R, &e);
  unuse(p);
  if (t * (1 + NOISE_FLOOR) < f32)
    c->est = t, c->wire = DT_WIRE_BF16, memcpy(c->R, R, sizeof R);
}

/* Whether forms a and b are written alike, global by global: both open,
 * or the same splits with the same ratio arrays. */
static bool same_seed(const Planner *p, Sharding *const *a, Sharding *const *b) {
  for (int g = 0; g < p->m->global.n; g++) {
    const Sharding *x = a[g], *y = b[g];
    if (x == y)
      continue;
    if (!x || !y || x->mesh != y->mesh || x->partial != y->partial ||
        x->partial_axes != y->partial_axes)
      return false;
    for (int d = 0; d < IR_MAX_RANK; d++)
      if (x->axis[d] != y->axis[d] || x->ratio[d] != y->ratio[d])
        return false;
  }
  return true;
}

/* A candidate's forms as seeded and what their search found: the forms
 * descended, in micro-batch count mb, estimated est with ratios R; ring,
 * the estimate's ring axis. */
typedef struct Searched {
  Sharding **seed, **forms;
  int nmb, mbs[IR_MAX_MICROBATCHES + 1], mb, ring;
  double est;
  Ratios R;
} Searched;

/* The candidates: each combination of families over the axes, seeded,
 * descended on one axis, in its best micro-batch count; with a rows axis,
 * the optimizer state split over it (in that count) where that is open and
 * gains more than NOISE_FLOOR by the estimate; so too the attention by
 * heads, and under `exchange = auto` the gradients in bf16; their number.
 * Two families may seed the same forms (rows, when the block splits the
 * inputs, and forms): the search, which depends on nothing else, is made
 * once. */
static int candidates(Search *s, Cand *cand) {
  Planner *p = s->p;
  int nc = 0, fam[IR_MAX_MESH_AXES] = {0}, n = 1;
  Searched *done = malloc(sizeof *done * MAX_CANDS);
  DTC_ASSERT(done);
  bool open = state_open(p);
  static const FamilyId order[] = {F_ROWS, F_FORMS, F_STAGES, F_KEEP, F_SEQ};
  static_assert(COUNTOF(order) == NFAMILY, "every family in the order");
  for (int x = 0; x < p->naxis; x++)
    n *= NFAMILY;
  for (int c = 0; c < n && nc < MAX_CANDS; c++) {
    int rows = -1, stages = -1, nrows = 0, nstages = 0, nseq = 0;
    for (int x = 0, v = c; x < p->naxis; x++, v /= NFAMILY) {
      fam[x] = order[v % NFAMILY];
      if (fam[x] == F_ROWS)
        rows = x, nrows++;
      if (fam[x] == F_STAGES)
        stages = x, nstages++;
      nseq += fam[x] == F_SEQ;
    }
    if (nrows > 1 || nstages > 1 || nseq > 1)
      continue;
    Sharding **A = copy_forms(p, p->user);
    bool ok = true;
    for (int x = 0; x < p->naxis && ok; x++)
      ok = families[fam[x]].seed(p, x, rows, A);
    if (!ok)
      continue;
    if (p->naxis == 1)   /* the rest of the inputs whole */
      inputs_whole(p, A);
    Cand *cd = &cand[nc++];
    blank(p, cd, 0);
    cd->id = nc - 1;
    unuse(p);
    memcpy(cd->fam, fam, sizeof fam);
    Est e;
    Searched *sr = &done[nc - 1];
    sr->nmb = 1;
    p->mb = sr->mbs[0] = p->m->microbatches > 1 ? p->m->microbatches : 1;
    if (stages >= 0)
      sr->nmb = mb_choices(p, rows >= 0 ? p->size[rows] : 1, sr->mbs);
    sr->seed = copy_forms(p, A);
    const Searched *same = NULL;
    for (int k = 0; k < nc - 1 && !same; k++)
      if (done[k].nmb == sr->nmb && !memcmp(done[k].mbs, sr->mbs, sizeof *sr->mbs * (size_t)sr->nmb) &&
          same_seed(p, done[k].seed, sr->seed))
        same = &done[k];
    if (same) {
      A = copy_forms(p, same->forms);
      p->mb = same->mb, sr->ring = same->ring, sr->est = same->est;
      memcpy(sr->R, same->R, sizeof sr->R);
    } else {
      int nmb = sr->nmb;
      sr->est = nmb > 1 ? pick_mb(s, A, sr->mbs, nmb, sr->R, &e) : evaluate(s, A, false, sr->R, &e);
      if (p->naxis == 1) {
        sr->est = descend(s, A, sr->est);
        if (nmb > 1)
          sr->est = pick_mb(s, A, sr->mbs, nmb, sr->R, &e);
      }
      sr->ring = e.ring;
    }
    sr->forms = copy_forms(p, A);
    sr->mb = p->mb;
    e.ring = sr->ring;
    cd->est = sr->est;
    memcpy(cd->R, sr->R, sizeof cd->R);
    cd->mb = p->mb;
    cd->forms = A;
    cd->sim = INFINITY;
    if (rows >= 0 && open) {   /* the state split over the rows axis, where it gains */
      Ratios R;
      p->state = rows;
      double t = evaluate(s, A, false, R, &e);
      if (t * (1 + NOISE_FLOOR) < cd->est)
        cd->est = t, cd->state = rows, memcpy(cd->R, R, sizeof R);
      unuse(p);
    }
    cd->either = p->heads_open && e.ring >= 0;
    if (cd->either) {   /* heads instead of a ring, where they gain */
      Ratios R;
      use(p, cd);
      p->m->attn_heads = true;
      double t = evaluate(s, A, false, R, &e);
      if (t * (1 + NOISE_FLOOR) < cd->est)
        cd->est = t, cd->heads = true, memcpy(cd->R, R, sizeof R);
      unuse(p);
    }
    try_bf16(s, cd, false);
  }
  free(done);
  return nc;
}

/* ---- the plan kept ---- */

/* The forms A with each axis's ratios ratio[x] on its splits. */
static Sharding **with_ratios(Planner *p, Sharding **A, double *const *ratio) {
  int ng = p->m->global.n;
  Sharding **out = copy_forms(p, A);
  for (int g = 0; g < ng; g++) {
    if (!A[g])
      continue;
    out[g] = arena_alloc(p->m->arena, sizeof *out[g]);
    *out[g] = *A[g];
    for (int d = 0; d < IR_MAX_RANK; d++)
      if (out[g]->axis[d] >= 0 && ir_placed(A[g]->ratio[d], p->size[A[g]->axis[d]]) < 0)
        out[g]->ratio[d] = ratio[out[g]->axis[d]];
  }
  return out;
}

/* Forms A estimated with ratios from the linear programs, rounded: the
 * rounded ratios (NULL: even) into out, as R, and the step returned. */
static double rounded(Search *s, Sharding **A, double **out, Ratios R, Est *e) {
  Planner *p = s->p;
  double t = evaluate(s, A, false, R, e), lo, *hi = malloc(sizeof *hi * SHARD_MAX_AXIS);
  DTC_ASSERT(hi);
  for (int x = 0; x < p->naxis; x++) {
    out[x] = NULL;
    if (t == INFINITY)
      continue;
    plan_bounds(p, e, R, x, &lo, hi);
    out[x] = plan_round(p, e, x, R[x], hi);
    for (int i = 0; i < p->size[x]; i++)
      R[x][i] = out[x] ? out[x][i] : 1.0 / p->size[x];
  }
  free(hi);
  return t == INFINITY ? t : plan_step(p, e, R, NULL);
}

/* The record of plan A (its ratios on its splits) with ratios R, starting
 * from base (may be NULL). */
static PlanInfo *record(Planner *p, Sharding **A, const Ratios R, double step, double even,
                        const PlanInfo *base) {
  Module *m = p->m;
  PlanInfo *pi = arena_alloc(m->arena, sizeof *pi);
  if (base)
    *pi = *base;
  pi->k = p->ndev;
  pi->ratio = arena_alloc(m->arena, sizeof *pi->ratio * (size_t)p->ndev);
  pi->busy = arena_alloc(m->arena, sizeof *pi->busy * (size_t)p->ndev);
  pi->mem = arena_alloc(m->arena, sizeof *pi->mem * (size_t)p->ndev);
  pi->step = step;
  pi->even = even;
  pi->evals = p->evals;
  pi->user = p->user;
  pi->chosen = A;
  Est e;
  Ratios rr;
  plan_evaluate(p, A, true, rr, &e);
  plan_step(p, &e, R, pi->busy);
  pi->comm = e.comm;
  pi->ncoll = e.ncoll;
  for (int k = 0; k < p->step->inst.n; k++)
    pi->flops += ir_flops(p->step->inst.a[k]);
  for (int d = 0; d < p->ndev; d++) {
    pi->ratio[d] = plan_share(p, d, NMASK - 1, R);
    pi->mem[d] = plan_memory(p, &e, R, d);
    if (pi->busy[d] > pi->busy[pi->bottleneck])
      pi->bottleneck = d;
  }
  return pi;
}

/* ---- when nothing fits ---- */

/* Memory point t of a one-axis estimate: bytes whole and split. */
static void point(const Est *e, int t, double *fixed, double *scaled) {
  *fixed = e->mem[(size_t)t * NMASK];
  *scaled = e->mem[(size_t)t * NMASK + 1];
}

static double point_bound(const Est *e, int t, double mem) {
  double f, s;
  point(e, t, &f, &s);
  return s > 0 ? fmin(1, (mem - f) / s) : (mem >= f ? 1 : -1);
}

/* The error when no choice of forms fits in memory, from the estimate e of
 * the parallel block's own forms. */
static void diag_no_room(Planner *p, const Est *e, Diag *d) {
  Module *m = p->m;
  double hi[SHARD_MAX_AXIS], lo, most = 0, f, s;
  Ratios R = {0};
  plan_bounds(p, e, R, 0, &lo, hi);
  for (int k = 0; k < p->ndev; k++) {
    const Device *dv = &m->cluster->dev.a[p->mesh->dev[k]];
    if (hi[k] >= lo)
      continue;
    int t = 0;   /* the point that allows least */
    for (int u = 1; u < e->nmem; u++)
      if (point_bound(e, u, (double)dv->mem) < point_bound(e, t, (double)dv->mem))
        t = u;
    point(e, t, &f, &s);
    diag_error(d, p->mesh->loc,
               "device '%s' has %lld bytes of memory, too few for any share of the step: "
               "it needs %.0f bytes of whole tensors and %.0f bytes for its smallest share%s",
               dv->name, (long long)dv->mem, f, s * lo,
               hi[k] < point_bound(e, t, (double)dv->mem) ? " (and its memory plan more than that)"
                                                            : "");
    return;
  }
  for (int t = 0; t < e->nmem; t++)
    point(e, t, &f, &s), most = fmax(most, s);
  diag_error(d, p->mesh->loc,
             "the devices of mesh '%s' together have too little memory for the step: "
             "its split tensors and activations need %.0f bytes",
             p->mesh->name, most);
}

/* The error when not even pipeline stages fit, from their estimate e: how
 * many layers each device holds within its memory, and what one more layer
 * needs; false when whole layers are not what is missing. */
static bool diag_no_layers(Planner *p, const Est *e, Diag *d) {
  Module *m = p->m;
  double hi[SHARD_MAX_AXIS], lo, layer = 0, f, s;
  Ratios R = {0};
  plan_bounds(p, e, R, 0, &lo, hi);
  char held[512] = "";
  for (int t = 0; t < e->nmem; t++)
    point(e, t, &f, &s), layer = fmax(layer, s / (double)e->layers);
  int64_t room = 0;
  bool none = false;
  for (int k = 0; k < p->ndev; k++) {
    int64_t n = hi[k] < 0 ? 0 : (int64_t)floor(hi[k] * (double)e->layers + 1e-9);
    room += n, none |= n == 0;
    size_t at = strlen(held);
    snprintf(held + at, sizeof held - at, "%s%s %lld", k ? ", " : "",
             m->cluster->dev.a[p->mesh->dev[k]].name, (long long)n);
  }
  if (!none && room >= e->layers)
    return false;
  diag_error(d, p->mesh->loc,
             "no plan fits in the devices' memory: as pipeline stages, the %lld layers "
             "need at least one on every device and all %lld in all, but within its "
             "memory each device holds (%s); a layer takes about %.0f bytes with its "
             "optimizer state and activations",
             (long long)e->layers, (long long)e->layers, held, layer);
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
        saved += type_bytes(&o->type);
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
  for (int d = 0; d < p->ndev; d++) {
    const Device *dv = &cl->dev.a[p->mesh->dev[d]];
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
    if (c->ranks == p->ndev && c->spread > pi->comm_spread) {
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

/* The runner-up: the least predicted step of the plans the search costed
 * whose propagated forms differ from `forms` (INFINITY when there are none)
 * into pi, with the first global whose form differs. */
static void runner_up(const Search *s, Sharding **forms, PlanInfo *pi) {
  const Planner *p = s->p;
  const Module *m = p->m;
  int best = -1;
  for (int k = 0; k < s->seen.n; k++)
    if ((best < 0 || s->seen_t.a[k] < s->seen_t.a[best]) && !same_forms(p, s->seen.a[k], forms))
      best = k;
  pi->runner_up = best < 0 ? INFINITY : s->seen_t.a[best];
  for (int g = 0; best >= 0 && g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    const Sharding *sg = s->seen.a[best][g];
    if (!form_eq(p, g, sg, forms[g])) {
      char b1[128], b2[128];
      pi->runner_up_how = arena_printf(m->arena, "%s %s instead of %s", gl->name,
                                       ir_shard_str(m, sg, gl->type.rank, b1, sizeof b1),
                                       ir_shard_str(m, forms[g], gl->type.rank, b2, sizeof b2));
      break;
    }
  }
}

/* The axis forms A split some input's batch (first dimension) over; -1: none. */
static int batch_axis(const Planner *p, Sharding *const *A) {
  for (int g = 0; g < p->m->global.n; g++) {
    const Global *gl = &p->m->global.a[g];
    if (gl->kind == G_INPUT && A[g] && gl->type.rank > 0 && A[g]->axis[0] >= 0)
      return A[g]->axis[0];
  }
  return -1;
}

/* The parallel block's forms, every other input whole. */
static Sharding **block_forms(Planner *p) {
  return inputs_whole(p, copy_forms(p, p->user));
}

/* Data parallel on one axis: the block's forms, every other input split
 * along its first dimension where it can be, else whole. */
static Sharding **dp_forms(Planner *p) {
  Sharding **A = copy_forms(p, p->user);
  seed_rows(p, 0, -1, A);
  return inputs_whole(p, A);
}

/* ---- the choice ---- */

/* A contender's memory is checked by its memory plan only where the
 * estimate's count reaches this share of a device's memory: the count has
 * fallen short by up to 40% (pipelines), never by half. */
#define MEMORY_NEAR 0.5

/* Candidate c's name: each axis's family, a pipeline's layers and micro-batches. */
static void describe(Planner *p, Cand *c, double *const *ratio, int64_t layers) {
  size_t at = 0, n = sizeof c->what;
  bool block = true;
  for (int x = 0; x < p->naxis; x++)
    block &= c->fam[x] == F_KEEP;
  if (block)
    at += (size_t)snprintf(c->what, n, "the parallel block's forms");
  for (int x = 0; x < p->naxis && at < n; x++) {
    static const char *one[] = {[F_ROWS] = "searched from data parallel",
                                [F_FORMS] = "searched from whole inputs",
                                [F_SEQ] = "searched from the sequence split"};
    const char *axis = p->mesh->axis_name[x], *sep = at ? ", " : "";
    if (p->naxis == 1 && c->fam[x] != F_STAGES)
      at += (size_t)snprintf(c->what + at, n - at, "%s%s", sep,
                             c->fam[x] == F_EVEN ? "even data parallel"
                             : c->fam[x] == F_DP ? "data parallel with the planned ratios"
                                               : one[c->fam[x]]);
    else if (c->fam[x] == F_ROWS || c->fam[x] == F_SEQ)
      at += (size_t)snprintf(c->what + at, n - at, "%s%s over %s", sep,
                             c->fam[x] == F_ROWS ? "rows" : "sequence", axis);
    if (c->fam[x] != F_STAGES)
      continue;
    at += (size_t)snprintf(c->what + at, n - at, "%sstages over %s (layers", sep, axis);
    int64_t len[SHARD_MAX_AXIS];
    ir_blocks(layers, ratio[x], p->size[x], len);
    for (int i = 0; i < p->size[x] && at < n; i++)
      at += (size_t)snprintf(c->what + at, n - at, "%s%lld", i ? "/" : " ", (long long)len[i]);
    if (at < n)
      at += (size_t)snprintf(c->what + at, n - at, "), %d micro-batch%s", c->mb,
                             c->mb == 1 ? "" : "es");
  }
  if (c->state >= 0 && c->state != p->user_state && at < n)
    at += (size_t)snprintf(c->what + at, n - at, ", state split over %s",
                           p->mesh->axis_name[c->state]);
  if (c->heads && !p->user_heads && at < n)
    at += (size_t)snprintf(c->what + at, n - at, ", attention by heads");
  if (c->wire != p->user_wire && at < n)
    snprintf(c->what + at, n - at, ", gradients in %s", dtrt_wire_names[c->wire]);
}

/* Candidate c with its ratios rounded (even ones when `even`): its forms
 * with them, its estimate, its memory, its name. */
static void settle(Search *s, Cand *c, bool even) {
  Planner *p = s->p;
  double *ratio[IR_MAX_MESH_AXES] = {0};
  Est e;
  use(p, c);
  c->sim = INFINITY;
  c->est = even ? plan_evaluate(p, c->forms, true, c->R, &e) : rounded(s, c->forms, ratio, c->R, &e);
  if (c->est == INFINITY)
    return;
  describe(p, c, ratio, e.layers);
  c->forms = with_ratios(p, c->forms, ratio);
  c->comm = e.comm;
  c->predicted = arena_alloc(p->m->arena, sizeof *c->predicted * (size_t)p->ndev);
  for (int d = 0; d < p->ndev; d++)
    c->predicted[d] = plan_memory(p, &e, c->R, d);
}

/* Simulates contender c: its forms in its micro-batches, the passes after
 * plan on a copy (plan_trial); m as it was after, but for the forms. */
static void try_cand(Planner *p, Cand *c, const PassRun *run) {
  Module *m = p->m;
  int was = m->microbatches;
  Loc was_loc = m->microbatches_loc;
  use(p, c);
  plan_apply(p, c->forms);
  if (c->mb > 1) {
    m->microbatches = c->mb;
    m->microbatches_loc = p->mesh->loc;
  }
  c->tried = true;
  c->worst = 0;
  c->need = arena_alloc(m->arena, sizeof *c->need * (size_t)p->ndev);
  if (!plan_trial(m, run, c->need, &c->sim, NULL))
    c->sim = INFINITY;
  for (int d = 0; c->sim < INFINITY && d < p->ndev; d++) {
    double mem = (double)m->cluster->dev.a[p->mesh->dev[d]].mem;
    if (mem > 0)
      c->worst = fmax(c->worst, c->need[d] / mem);
  }
  m->microbatches = was;
  m->microbatches_loc = was_loc;
  unuse(p);
}

/* A contender's step, simulated where it was; INFINITY when it does not
 * fit. Where the passes after plan fail on it, its estimate: the compile
 * itself reports why. */
static double step_of(const Cand *c) {
  if (!c || c->est == INFINITY)
    return INFINITY;
  return !c->tried || c->sim == INFINITY ? c->est : c->worst <= 1 ? c->sim : INFINITY;
}

static int by_estimate(const void *a, const void *b) {
  const Cand *x = a, *y = b;
  return x->est < y->est ? -1 : x->est > y->est ? 1 : x->id - y->id;
}

#define MEMORY_ROUNDS 8

/* Contender c's memory plan exceeds a device's memory: its forms (as they
 * propagate) bound that device's ratio to its share times memory over need,
 * and at least one block of the shortest split fewer; and any forms count
 * that device's memory short by as much (Planner.under). False when there
 * is no room for another trial. */
static bool correct(Planner *p, const Cand *c) {
  Module *m = p->m;
  if (p->ntrial == p->room)
    return false;
  Ratios R;
  Est e;
  use(p, c);
  plan_evaluate(p, c->forms, true, R, &e);
  Trial *t = &p->trial[p->ntrial++];
  t->forms = arena_alloc(m->arena, sizeof *t->forms * (size_t)(m->global.n + 1));
  for (int g = 0; g < m->global.n; g++)
    t->forms[g] = m->global.a[g].shard;
  t->cap = arena_alloc(m->arena, sizeof *t->cap * (size_t)p->ndev);
  int64_t unit = e.min_len[0], *blocks = malloc(sizeof *blocks * (size_t)p->ndev);
  DTC_ASSERT(blocks);
  const double *ratio = c->R[0];
  if (unit > 0)
    ir_blocks(unit, ratio, p->size[0], blocks);
  for (int k = 0; k < p->ndev; k++) {
    double mem = (double)m->cluster->dev.a[p->mesh->dev[k]].mem;
    t->cap[k] = 1;
    if (c->need[k] <= mem)
      continue;
    if (p->naxis == 1) {
      t->cap[k] = ratio[k] * mem / c->need[k];
      if (unit > 0)
        t->cap[k] = fmin(t->cap[k], (double)(blocks[k] - 1) / (double)unit + 2.0 / RATIO_UNITS);
    }
    p->under[k] = fmax(p->under[k], c->need[k] / c->predicted[k]);
  }
  free(blocks);
  return true;
}

/* No candidate fits: a loop that saves activations recomputes them
 * (PassRun.want_remat, and passes_run plans again), else the error says
 * what is missing on one axis; more axes keep the block's forms and leave
 * it to the later passes. False after an error or to plan again. */
static bool no_plan(Planner *p, Diag *d, PassRun *run, const Cand *stages) {
  Ratios R;
  Est e;
  unuse(p);
  plan_evaluate(p, block_forms(p), true, R, &e);
  bool propagated = p->propagated;
  plan_apply(p, p->user);
  /* forms that do not propagate are the sharding pass's to report, and so
   * are sums that deterministic mode cannot order (spmd) */
  if (!propagated || e.comm == INFINITY)
    return true;
  const Inst *loop = run ? most_saving_loop(p) : NULL;
  if (loop) {
    run->want_remat = loop->loc;
    return false;
  }
  if (p->naxis > 1)
    return true;
  if (stages) {
    int mbs[IR_MAX_MICROBATCHES + 1];
    p->mb = mbs[mb_choices(p, 1, mbs) - 1];
    plan_evaluate(p, stages->forms, true, R, &e);
    bool fail = p->propagated && e.layers && diag_no_layers(p, &e, d);
    plan_apply(p, p->user);
    if (fail)
      return false;
    plan_evaluate(p, block_forms(p), true, R, &e);
  }
  diag_no_room(p, &e, d);
  plan_apply(p, p->user);
  return false;
}

/* The choice. The candidates, ranked by the estimate; the
 * contenders: the best NFINAL, the simple plan (on one axis even data
 * parallel, on more the block's forms) and on one axis data parallel with
 * the planned ratios. Those whose estimate is within PRUNE of the least are
 * simulated when there are several, and any whose memory comes near a
 * device's; the plan kept is the simplest no faster one beats by more than
 * the noise. When nothing fits, where the contenders' memory plans show the
 * estimate's count short, it is corrected (correct) and the choice made
 * again, at most MEMORY_ROUNDS times. False after an error. */
static bool choose(Planner *p, Diag *d, PassRun *run, int round) {
  Module *m = p->m;
  Search s = {.p = p};
  Cand *cand = arena_alloc(m->arena, sizeof *cand * (MAX_CANDS + 2 + NFINAL));
  int nc = candidates(&s, cand), nf = 0, nt = 0;
  const Cand *stages = NULL;
  for (int c = 0; c < nc; c++)
    if (cand[c].fam[0] == F_STAGES && p->naxis == 1)
      stages = &cand[c];
  Sharding **seen_best = NULL;   /* the best's forms as they propagate, for the runner-up */
  qsort(cand, (size_t)nc, sizeof *cand, by_estimate);
  if (!nc || cand[0].est == INFINITY)
    return no_plan(p, d, run, stages);
  Ratios R;
  Est e;
  use(p, &cand[0]);
  evaluate(&s, cand[0].forms, false, R, &e);
  unuse(p);
  seen_best = s.seen.a[s.seen.n - 1];
  PlanInfo conf = {.block = plan_evaluate(p, block_forms(p), true, R, &e)};
  Cand *simple = &cand[nc], *dp = p->naxis == 1 ? &cand[nc + 1] : NULL;
  blank(p, simple, F_EVEN);
  simple->forms = p->naxis == 1 ? dp_forms(p) : NULL;
  for (int c = 0; c < nc && !simple->forms; c++)   /* more axes: the block's forms */
    if (cand[c].fam[0] == F_KEEP && cand[c].fam[1] == F_KEEP &&
        (p->naxis < 3 || cand[c].fam[2] == F_KEEP))
      simple->forms = cand[c].forms, memcpy(simple->fam, cand[c].fam, sizeof simple->fam);
  try_bf16(&s, simple, p->naxis == 1);
  settle(&s, simple, p->naxis == 1);
  conf.simple_ruled_out = !p->propagated;
  if (dp) {
    blank(p, dp, F_DP);
    dp->forms = dp_forms(p);
    try_bf16(&s, dp, false);
    settle(&s, dp, false);
  }
  /* A candidate whose attention may be a ring or the heads split has a twin
   * taking the other, for the simulator to weigh: the estimate counts a
   * causal ring's work in linear shares, which its zig-zag meets only on
   * even shares */
  Cand *twin = &cand[nc + 2];
  for (; nf < NFINAL && nf < nc && cand[nf].est < INFINITY; nf++) {
    if (cand[nf].either) {
      twin[nt] = cand[nf];
      twin[nt].heads = !twin[nt].heads;
      settle(&s, &twin[nt++], false);
    }
    settle(&s, &cand[nf], false);
  }
  Cand *con[2 * NFINAL + 2];
  int ncon = 0, rivals = 0;
  double least = INFINITY;
  con[ncon++] = simple;
  if (dp)
    con[ncon++] = dp;
  for (int c = 0; c < nf + nt; c++)
    con[ncon++] = c < nf ? &cand[c] : &twin[c - nf];
  for (int c = 0; c < ncon; c++)
    least = fmin(least, con[c]->est);
  for (int c = 0; c < ncon; c++) {   /* an earlier contender of the same forms stands for it */
    for (int b = 0; b < c && !con[c]->same; b++)
      if (!con[b]->same && con[b]->est < INFINITY && con[c]->est < INFINITY &&
          con[b]->mb == con[c]->mb && con[b]->state == con[c]->state &&
          con[b]->heads == con[c]->heads && con[b]->wire == con[c]->wire &&
          same_forms(p, con[b]->forms, con[c]->forms))
        con[c]->same = con[b];
    rivals += !con[c]->same && con[c]->est <= least * PRUNE;
  }
  for (int c = 0; c < ncon; c++) {
    bool near = false;
    for (int k = 0; con[c]->predicted && k < p->ndev; k++)
      near |= con[c]->predicted[k] > MEMORY_NEAR * (double)m->cluster->dev.a[p->mesh->dev[k]].mem;
    if (!con[c]->same && con[c]->est <= least * PRUNE && (rivals > 1 || near))
      try_cand(p, con[c], run);
  }
  for (int c = 0; c < ncon; c++) {
    const Cand *same = con[c]->same;
    if (same) {
      con[c]->tried = same->tried, con[c]->sim = same->sim, con[c]->worst = same->worst;
      con[c]->need = same->need, con[c]->est = same->est, con[c]->what[0] = 0;
    }
  }
  /* the best: the fastest that fits; then the simplest within the noise */
  Cand *best = NULL;
  for (int c = 0; c < nf + nt; c++) {   /* a twin where the passes take it */
    Cand *x = c < nf ? &cand[c] : &twin[c - nf];
    if (c >= nf && (!x->tried || x->sim == INFINITY))
      continue;
    if (step_of(x) < INFINITY && (!best || step_of(x) < step_of(best)))
      best = x;
  }
  if (!best) {   /* nothing fits: the estimate corrected by the memory plans */
    bool over = false;
    for (int c = 0; c < ncon && round < MEMORY_ROUNDS; c++)
      over |= con[c]->tried && con[c]->sim < INFINITY && con[c]->worst > 1 && correct(p, con[c]);
    unuse(p);
    plan_apply(p, p->user);
    return over ? choose(p, d, run, round + 1) : no_plan(p, d, run, stages);
  }
  conf.best = step_of(best);
  conf.simple = step_of(simple);
  conf.dp = dp && !same_forms(p, best->forms, dp->forms) ? step_of(dp) : INFINITY;
  conf.simulated = best->tried && best->sim < INFINITY;
  runner_up(&s, seen_best, &conf);
  spreads(p, &conf);
  conf.noise = fmax(NOISE_FLOOR, fmax(step_noise(&conf, conf.best, best->comm),
                                      step_noise(&conf, conf.simple, simple->comm)));
  if (conf.dp < INFINITY)
    conf.noise = fmax(conf.noise, step_noise(&conf, conf.dp, dp->comm));
  double n1 = 1 + conf.noise;
  bool even_fits = conf.simple < INFINITY;
  bool dp_beats_even = conf.dp < INFINITY && !(even_fits && !(conf.simple > conf.dp * n1));
  bool best_beats_even = !(even_fits && !(conf.simple > conf.best * n1));
  conf.kept_simple = even_fits && !dp_beats_even && !best_beats_even;
  conf.kept_dp = dp_beats_even && !(conf.dp > conf.best * n1);
  Cand *kept = conf.kept_simple ? simple : conf.kept_dp ? dp : best;
  /* Recomputation, where memory binds (a contender does not fit): the loop
   * saving most recomputing its forward, estimated; when its best beats the
   * plan kept by more than the noise, the passes run again with it. */
  bool tight = false;
  for (int c = 0; c < ncon; c++)
    tight |= con[c]->est == INFINITY || (con[c]->tried && con[c]->worst > 1);
  const Inst *loop = tight && run ? most_saving_loop(p) : NULL;
  if (loop) {
    Search rs = {.p = p};
    Cand *rc = arena_alloc(m->arena, sizeof *rc * MAX_CANDS);
    double with = INFINITY;
    p->remat = loop;
    for (int c = 0, n = candidates(&rs, rc); c < n; c++)
      with = fmin(with, rc[c].est);
    p->remat = NULL;
    if (with * (1 + conf.noise) < step_of(kept)) {
      unuse(p);
      plan_apply(p, p->user);
      run->want_remat = loop->loc;
      return false;
    }
  }
  bool planned_mb = kept->mb > 1 && m->microbatches < 2;
  if (planned_mb) {
    m->microbatches = kept->mb;
    m->microbatches_loc = p->mesh->loc;
  }
  if (run) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    for (int c = 0; out && c < ncon; c++) {
      const Cand *x = con[c];
      if (x->est == INFINITY || !x->what[0])
        continue;
      fprintf(out, "  %s %-60s estimated %9.4f ms, ", x == kept || x == kept->same ? "*" : " ",
              x->what, x->est * 1e3);
      if (!x->tried)
        fprintf(out, "not simulated\n");
      else if (x->sim == INFINITY)
        fprintf(out, "fails in the passes\n");
      else
        fprintf(out, "simulated %9.4f ms, fullest device at %.1f%% of its memory%s\n",
                x->sim * 1e3, x->worst * 100, x->worst > 1 ? " (OVER)" : "");
    }
    if (out)
      fclose(out);
    use(p, kept);
    PlanInfo *pi = record(p, kept->forms, kept->R, step_of(kept), conf.simple, &conf);
    pi->mb = kept->mb;
    pi->planned_mb = planned_mb;
    pi->remat = m->nremat_planned;
    pi->candidates = nc;
    pi->mesh_report = text ? arena_printf(m->arena, "%s", text) : NULL;
    free(text);
    pi->state_rows = kept->state >= 0 ? kept->state : batch_axis(p, kept->forms);
    pi->state_open = state_open(p) && pi->state_rows >= 0;
    run->plan = pi;
  }
  use(p, kept);
  plan_apply(p, kept->forms);
  if (m->state_sharded && p->user_state < 0)
    m->state_loc = p->mesh->loc;
  if (m->attn_heads && !p->user_heads)
    m->attn_loc = p->mesh->loc;
  return true;
}

/* `plan even`: the parallel block's forms, even; the prediction for the
 * report when the module can be planned. */
static bool plan_even(Module *m, PassRun *run) {
  for (int i = 0; i < m->global.n; i++) {
    Global *g = &m->global.a[i];
    for (int dd = 0; g->shard && dd < g->type.rank; dd++)
      if (g->shard->axis[dd] < 0 ||
          ir_placed(g->shard->ratio[dd], m->mesh.a[0].axis_size[g->shard->axis[dd]]) < 0)
        g->shard->ratio[dd] = NULL;   /* a table-wise table stays on its device */
  }
  Planner p;
  if (!plan_init(&p, m))
    return true;
  Sharding **user = block_forms(&p);
  Ratios R;
  Est e;
  double even = plan_evaluate(&p, user, true, R, &e);
  if (even < INFINITY && run) {
    PlanInfo *pi = record(&p, user, R, even, even, NULL);
    pi->block = even;
    run->plan = pi;
  }
  plan_apply(&p, p.user);
  return true;
}

static bool user_ratios(const Module *m) {
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    for (int d = 0; gl->shard && d < gl->type.rank; d++)
      if (gl->shard->axis[d] >= 0 && gl->shard->ratio[d] &&
          ir_placed(gl->shard->ratio[d], m->mesh.a[0].axis_size[gl->shard->axis[d]]) < 0)
        return true;
  }
  return false;
}

/* `exchange = auto` where it cannot choose: on a model that is not
 * trained, in deterministic mode, without a mesh or a cluster, or where the
 * parallel block fixes a layout that splits no input's batch; as
 * passes/comm.c's errors for bf16. False after an error. */
static bool exchange_applies(const Module *m, Diag *d) {
  /* a mesh of one device (an elastic build's smallest) exchanges nothing */
  bool batch = m->plan == PLAN_AUTO || ir_mesh_devices(m) == 1;
  for (int g = 0; g < m->global.n && !batch; g++) {
    const Global *gl = &m->global.a[g];
    batch = gl->kind == G_INPUT && gl->shard && gl->type.rank > 0 && gl->shard->axis[0] >= 0;
  }
  const char *why = NULL;
  if (!m->train.loss)
    why =
        arena_printf(m->arena, "model '%s' is not trained (it has no minimize statement)", m->name);
  else if (m->det_pieces > 1)
    why = arena_printf(m->arena,
                       "deterministic mode (%s:%d:%d) promises the same bits on any "
                       "layout, and bf16's rounding where devices meet depends on the layout: "
                       "write exchange = f32, or drop deterministic",
                       m->det_loc.file ? m->det_loc.file->name : "?", m->det_loc.line,
                       m->det_loc.col);
  else if (!m->mesh.n)
    why = "there is no mesh: split the batch of an input over a mesh axis (shard x: [dp, *])";
  else if (!m->cluster)
    why = arena_printf(m->arena,
                       "model '%s' has no cluster to price them by: write exchange = "
                       "f32 or bf16, or give it a cluster",
                       m->name);
  else if (!batch)
    why = "this plan sums none over a data-parallel axis (no input's batch is split): split "
          "the batch of an input over a mesh axis (shard x: [dp, *]), or write plan auto";
  if (why)
    diag_error(d, m->exchange_loc,
               "exchange = auto chooses the format of the gradients' sums by their cost, but %s",
               why);
  return !why;
}

/* `exchange = auto`: the plan kept, simulated with the gradients exchanged
 * in each format, and where the planner chose the optimizer state's split
 * (PlanInfo.state_open), with the state split over the batch's axis and
 * whole. The alternatives in order of preference: f32 before bf16 (whose
 * rounding is the price of it), the planner's state before the other; the
 * plan is the first no other that fits beats by more than the noise. */
static void choose_exchange(Module *m, PassRun *run) {
  PlanInfo *pi = run ? run->plan : NULL;
  bool split = m->state_sharded;
  int axis = m->state_axis, states[2] = {split ? axis : -1, -1}, ns = 1, n = 0;
  if (pi && pi->state_open)
    states[ns++] = split ? -1 : pi->state_rows;
  PlanExchange alt[PLAN_EXCHANGES];
  double need[SHARD_MAX_AXIS];
  const Mesh *mesh = &m->mesh.a[0];
  m->exchange_auto = false;
  for (int w = 0; w < DT_WIRE_COUNT; w++)
    for (int k = 0; k < ns; k++) {
      PlanExchange *x = &alt[n++];
      *x = (PlanExchange){.wire = w, .state = states[k], .step = INFINITY};
      m->exchange = w;
      m->state_sharded = x->state >= 0;
      m->state_axis = x->state >= 0 ? x->state : axis;
      if (!plan_trial(m, run, need, &x->step, &x->bytes))
        x->step = INFINITY;
      for (int dev = 0; dev < ir_mesh_devices(m) && x->step < INFINITY; dev++) {
        double mem = (double)m->cluster->dev.a[mesh->dev[dev]].mem;
        x->over |= mem > 0 && need[dev] > mem;
      }
    }
  double noise = pi ? fmax(pi->noise, NOISE_FLOOR) : NOISE_FLOOR, fastest = INFINITY;
  for (int k = 0; k < n; k++)
    if (!alt[k].over)
      fastest = fmin(fastest, alt[k].step);
  int kept = 0;
  while (kept + 1 < n && !(!alt[kept].over && alt[kept].step <= fastest * (1 + noise)))
    kept++;
  if (alt[kept].over || alt[kept].step == INFINITY)
    kept = 0;
  m->exchange = alt[kept].wire;
  m->state_sharded = alt[kept].state >= 0;
  m->state_axis = alt[kept].state >= 0 ? alt[kept].state : axis;
  if (m->state_sharded && !split)
    m->state_loc = mesh->loc;
  if (pi) {
    memcpy(pi->exchange, alt, sizeof *alt * (size_t)n);
    pi->nexchange = n;
    pi->exchange_kept = kept;
  }
}

bool pass_plan(Module *m, Diag *d, PassRun *run) {
  bool ok = true;
  Planner p;
  if (m->exchange_auto && !exchange_applies(m, d))
    return false;
  if (m->mesh.n && m->plan == PLAN_EVEN)
    ok = plan_even(m, run);
  else if (m->mesh.n && m->plan == PLAN_AUTO && plan_init(&p, m) && !user_ratios(m))
    ok = choose(&p, d, run, 0);
  if (ok && m->exchange_auto)
    choose_exchange(m, run);
  return ok;
}

bool plan_trial(const Module *m, const PassRun *run, double *need, double *step, double *bytes) {
  Arena *a = arena_new();
  Module *copy = ir_copy(a, m);
  Diag quiet;
  diag_init_quiet(&quiet);
  bool ok = copy != NULL;
  if (ok) /* under exchange = auto, in the format in hand (the text says auto) */
    copy->exchange = m->exchange, copy->exchange_auto = false;
  bool after = false;
  for (int k = 0; ok && k < pass_count; k++) {
    if (after)
      ok = pass_table[k].run(copy, &quiet, NULL) && !quiet.nerr;
    after |= !strcmp(pass_table[k].name, "plan");
  }
  int ndev = ok ? ir_mesh_devices(copy) : 0;
  for (int dev = 0; dev < ndev; dev++) {
    need[dev] = 0;
    for (int g = 0; g < copy->global.n; g++)
      if (copy->global.a[g].kind != G_INPUT) {
        Type t = ir_global_type_on(copy, &copy->global.a[g], dev);
        need[dev] += type_bytes(&t);
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
  if (ok && bytes)
    *bytes = spmd_step_bytes(copy);
  arena_free(a);
  return ok;
}

/* ---- the report ---- */

/* "3.1% (r1)", or "none given". */
static const char *spread_text(double spread, const char *of, char *buf, size_t n) {
  if (!of)
    return "none given";
  snprintf(buf, n, "%.1f%% (%s)", spread * 100, of);
  return buf;
}

/* plan auto: the best plan's margins, the spreads, the noise, the choice;
 * the simple plan is even data parallel on one axis, `simple` on more. */
static void report_confidence(FILE *out, const PlanInfo *pi, const char *simple) {
  double best = pi->best > 0 ? pi->best : 1;
  fprintf(out, "  best plan found: %.4f ms%s; ", pi->best * 1e3,
          pi->simulated ? " (simulated, as the two below)" : "");
  if (pi->simple < INFINITY)
    fprintf(out, "%s %.4f ms (that/this %.3fx)", simple, pi->simple * 1e3, pi->simple / best);
  else if (pi->simple_ruled_out)
    fprintf(out, "%s is ruled out by the parallel block's forms", simple);
  else
    fprintf(out, "%s does not fit in memory", simple);
  if (pi->dp < INFINITY)
    fprintf(out, "; data parallel with the planned ratios %.4f ms (that/this %.3fx)",
            pi->dp * 1e3, pi->dp / best);
  if (pi->runner_up < INFINITY)
    fprintf(out, "; runner-up %.4f ms estimated (that/this %.3fx; %s)\n", pi->runner_up * 1e3,
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
    fprintf(out, "  kept %s: the best plan found gains %.3fx, within the noise\n", simple,
            pi->simple / best);
  else if (pi->simple < INFINITY)
    fprintf(out, "  kept the best plan found: it gains more than the noise over %s\n", simple);
  else
    fprintf(out, "  kept the best plan found: %s is no plan here\n", simple);
}

/* "bf16", "f32, state whole", "bf16, state split over dp": alternative x
 * of the exchange, with its state where the planner chose that too. */
static const char *exchange_name(const Module *m, const PlanInfo *pi, const PlanExchange *x,
                                 char *buf, size_t n) {
  if (!pi->state_open)
    snprintf(buf, n, "%s", dtrt_wire_names[x->wire]);
  else if (x->state < 0)
    snprintf(buf, n, "%s, state whole", dtrt_wire_names[x->wire]);
  else
    snprintf(buf, n, "%s, state split over %s", dtrt_wire_names[x->wire],
             m->mesh.a[0].axis_name[x->state]);
  return buf;
}

/* exchange = auto: each alternative's simulated step and bytes, and why
 * the plan is the one kept. */
static void report_exchange(FILE *out, const Module *m, const PlanInfo *pi) {
  if (!pi->nexchange)
    return;
  const PlanExchange *kept = &pi->exchange[pi->exchange_kept], *fastest = kept;
  char b1[96], b2[96];
  fputs("  exchange = auto: the plan simulated with each gradient exchange (its step; the "
        "bytes device 0 sends a step)\n",
        out);
  for (int k = 0; k < pi->nexchange; k++) {
    const PlanExchange *x = &pi->exchange[k];
    fprintf(out, "  %s %-34s ", x == kept ? "*" : " ", exchange_name(m, pi, x, b1, sizeof b1));
    if (x->step == INFINITY) {
      fputs("fails in the passes\n", out);
      continue;
    }
    fprintf(out, "%9.4f ms  %12s%s\n", x->step * 1e3, ir_bytes_str(x->bytes, b2, sizeof b2),
            x->over ? "  (OVER a device's memory)" : "");
    if (!x->over && x->step < fastest->step)
      fastest = x;
  }
  double noise = fmax(pi->noise, NOISE_FLOOR);
  exchange_name(m, pi, kept, b1, sizeof b1);
  if (kept != pi->exchange)
    fprintf(out, "  kept %s: it gains %.3fx over %s, more than the noise (%.1f%%)\n", b1,
            pi->exchange[0].step / kept->step, exchange_name(m, pi, pi->exchange, b2, sizeof b2),
            noise * 100);
  else if (fastest != kept)
    fprintf(out, "  kept %s: %s gains %.3fx, within the noise (%.1f%%)\n", b1,
            exchange_name(m, pi, fastest, b2, sizeof b2), kept->step / fastest->step, noise * 100);
  else
    fprintf(out, "  kept %s: no other is faster\n", b1);
}

void plan_report(FILE *out, const Module *m, const PlanInfo *pi) {
  static const char *modes[] = {"none", "auto", "even", "explicit"};
  static_assert(COUNTOF(modes) == PLAN_EXPLICIT + 1, "plan mode names");
  if (!pi)
    return;
  const Mesh *mesh = &m->mesh.a[0];
  fprintf(out, "device plan of %s on mesh %s[", m->name, mesh->name);
  for (int x = 0; x < mesh->naxis; x++)
    fprintf(out, "%s%s = %d", x ? ", " : "", mesh->axis_name[x], mesh->axis_size[x]);
  fprintf(out, "] (plan %s): %.4g GFLOP per step; %d choice%s of forms costed", modes[m->plan],
          pi->flops * 1e-9, pi->evals, pi->evals == 1 ? "" : "s");
  if (pi->mesh_report)
    fprintf(out, ", %d candidate%s", pi->candidates, pi->candidates == 1 ? "" : "s");
  fputc('\n', out);
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
    fprintf(out, "  the loop at %s:%d:%d recomputes its forward in the backward (planned: "
            "memory binds the plans without it)\n", l->file->name, l->line, l->col);
  }
  if (pi->mesh_report)
    fprintf(out, "  candidates: the best %d by the estimate and the simple plans, simulated where "
            "more than one is within %.1fx of the least estimate:\n%s", NFINAL, PRUNE,
            pi->mesh_report);
  if (m->plan == PLAN_AUTO && pi->block < INFINITY)
    fprintf(out, "  the parallel block's forms, even: %.4f ms (that/this %.3fx)\n", pi->block * 1e3,
            pi->step > 0 ? pi->block / pi->step : 1.0);
  else if (m->plan == PLAN_AUTO)
    fprintf(out, "  the parallel block's forms, even: do not fit in memory\n");
  fprintf(out, "  predicted step: %.4f ms (even: %.4f ms, even/this %.3fx); bottleneck %s\n",
          pi->step * 1e3, pi->even * 1e3, pi->step > 0 ? pi->even / pi->step : 1.0,
          m->cluster->dev.a[mesh->dev[pi->bottleneck]].name);
  if (m->plan == PLAN_AUTO)
    report_confidence(out, pi, mesh->naxis > 1 ? "the parallel block's forms" : "even data parallel");
  report_exchange(out, m, pi);
  fputc('\n', out);
}
