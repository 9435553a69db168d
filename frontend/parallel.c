/* parallel.c: a parallel block to meshes over a cluster's devices, the
 * shardings and placements of globals, and the plan mode and options. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ast.h"
#include "dtrt.h"

static const char *device_names(Arena *a, const Cluster *c, const char *name) {
  const char **cand = arena_alloc(a, sizeof(char *) * (size_t)(c->dev.n + 1));
  for (int k = 0; k < c->dev.n; k++)
    cand[k] = c->dev.a[k].name;
  return fe_did_you_mean(a, name, cand, c->dev.n);
}

/* Finds a mesh axis by name across all meshes. */
static bool find_axis(const Module *m, const char *name, int *mesh, int *axis) {
  for (int i = 0; i < m->mesh.n; i++)
    for (int j = 0; j < m->mesh.a[i].naxis; j++)
      if (!strcmp(m->mesh.a[i].axis_name[j], name)) {
        *mesh = i;
        *axis = j;
        return true;
      }
  return false;
}

/* mesh NAME[axis = size, ...] [over dev, ...]: without a device list, the
 * first devices of the cluster in order. devices > 0 (--devices): one axis
 * of that size, over the first devices of the list (or of the cluster, which
 * it then need not divide). */
static bool lower_mesh(Module *m, const Stmt *s, int devices, Diag *d) {
  Arena *a = m->arena;
  const Cluster *c = m->cluster;
  for (int k = 0; k < m->mesh.n; k++)
    if (!strcmp(m->mesh.a[k].name, s->name)) {
      diag_error(d, s->name_loc, "mesh '%s' is already defined", s->name);
      return false;
    }
  if (s->axes.n > IR_MAX_MESH_AXES) {
    diag_error(d, s->axes.a[IR_MAX_MESH_AXES].loc, "a mesh has at most %d axes", IR_MAX_MESH_AXES);
    return false;
  }
  if (devices > 0 && s->axes.n != 1) {
    diag_error(d, s->name_loc, "--devices resizes a mesh of one axis, but mesh '%s' has %d",
               s->name, s->axes.n);
    return false;
  }
  Mesh mesh = {.name = s->name, .naxis = s->axes.n, .loc = s->name_loc};
  int64_t size = 1;
  bool ok = true;
  for (int k = 0; k < s->axes.n; k++) {
    const Arg *ax = &s->axes.a[k];
    int mi, ai;
    int64_t v;
    bool dup = find_axis(m, ax->name, &mi, &ai);
    for (int j = 0; j < k; j++)
      dup |= !strcmp(mesh.axis_name[j], ax->name);
    mesh.axis_name[k] = ax->name;
    if (dup) {
      diag_error(d, ax->loc, "mesh axis '%s' is already defined", ax->name);
      ok = false;
    } else if (!fe_eval_int(ax->val, NULL, 0, "a mesh axis size", &v, d)) {
      ok = false;
    } else if (devices > 0) {   /* the size written is replaced */
      mesh.axis_size[k] = devices;
      size = devices;
    } else if (v <= 0 || v > c->dev.n) {
      diag_error(d, ax->val->loc, "mesh axis size %lld is out of range: cluster '%s' has %d devices",
                 (long long)v, c->name, c->dev.n);
      ok = false;
    } else {
      mesh.axis_size[k] = (int)v;
      size *= v;
    }
  }
  if (!ok)
    return false;
  mesh.dev = arena_alloc(a, sizeof(int) * (size_t)size);
  if (s->list.n == 0 && devices > 0 && size > c->dev.n) {
    diag_error(d, s->name_loc, "--devices asks for a plan of %lld devices, but cluster '%s' "
               "has %d", (long long)size, c->name, c->dev.n);
    return false;
  } else if (devices > 0 && size > s->list.n && s->list.n) {
    diag_error(d, s->name_loc, "--devices asks for a plan of %lld devices, but mesh '%s' "
               "lists %d", (long long)size, s->name, s->list.n);
    return false;
  }
  if (s->list.n == 0) {
    if (size > c->dev.n) {
      diag_error(d, s->name_loc, "mesh '%s' needs %lld devices, but cluster '%s' has %d", s->name,
                 (long long)size, c->name, c->dev.n);
      return false;
    }
    if (c->dev.n % size && devices <= 0) {
      diag_error(d, s->name_loc,
                 "mesh '%s' has %lld devices, which does not divide the %d devices of cluster '%s'",
                 s->name, (long long)size, c->dev.n, c->name);
      return false;
    }
    for (int k = 0; k < size; k++)
      mesh.dev[k] = k;
  } else {
    if (s->list.n != size && devices <= 0) {
      diag_error(d, s->name_loc, "mesh '%s' has %lld positions but lists %d devices", s->name,
                 (long long)size, s->list.n);
      return false;
    }
    for (int k = 0; k < size; k++) {
      const Expr *e = s->list.a[k];
      int j = 0;
      while (j < c->dev.n && strcmp(c->dev.a[j].name, e->s))
        j++;
      if (j == c->dev.n) {
        diag_error(d, e->loc, "no device '%s' in cluster '%s'%s", e->s, c->name,
                   device_names(a, c, e->s));
        mesh.dev[k] = -1;
        ok = false;
        continue;
      }
      for (int i = 0; i < k; i++)
        if (mesh.dev[i] == j) {
          diag_error(d, e->loc, "device '%s' appears twice in mesh '%s'", e->s, s->name);
          ok = false;
        }
      mesh.dev[k] = j;
    }
  }
  if (ok)
    vec_push(a, &m->mesh, mesh);
  return ok;
}

/* Per-device ratios of a split: tp(0.5, 0.25, 0.25). */
static double *lower_ratios(Arena *a, const Expr *e, int size, Diag *d) {
  if (e->args.n != size) {
    diag_error(d, e->loc, "axis '%s' has %d devices, but %d ratios are given", e->s, size, e->args.n);
    return NULL;
  }
  double *r = arena_alloc(a, sizeof(double) * (size_t)size), sum = 0;
  for (int k = 0; k < size; k++) {
    const Expr *v = e->args.a[k].val;
    if (!fe_eval_float(v, NULL, 0, "a ratio", &r[k], d))
      return NULL;
    if (!(r[k] > 0)) {
      diag_error(d, v->loc, "ratios must be positive, not %g", r[k]);
      return NULL;
    }
    sum += r[k];
  }
  if (fabs(sum - 1) > 1e-6) {
    diag_error(d, e->loc, "the ratios of axis '%s' sum to %g, not 1", e->s, sum);
    return NULL;
  }
  return r;
}

static void unknown_axis(const Module *m, const Expr *e, Diag *d) {
  VEC(const char *) axes = {0};
  for (int i = 0; i < m->mesh.n; i++)
    for (int j = 0; j < m->mesh.a[i].naxis; j++)
      vec_push(m->arena, &axes, m->mesh.a[i].axis_name[j]);
  diag_error(d, e->loc, "unknown mesh axis '%s'%s", e->s,
             fe_did_you_mean(m->arena, e->s, axes.a, axes.n));
}

/* shard NAME: on AXIS[INDEX]: table NAME whole on device INDEX of AXIS
 * (table-wise), the others holding none of it: its columns split over the
 * axis with ratio 1 on that device and 0 on the rest, so each lookup's
 * pooled [B, D] is computed there and taken to the batch's split by the
 * all-to-all of a column-wise table (docs/LANGUAGE.md, Embedding tables). */
static bool lower_place(Module *m, Global *g, const Stmt *s, Diag *d) {
  const Expr *e = s->val;
  int mi, ai;
  int64_t at;
  if (e->kind != E_INDEX || e->lhs->kind != E_IDENT || e->args.n != 1 ||
      e->args.a[0].val->kind == E_RANGE || e->args.a[0].val->kind == E_DOTS) {
    diag_error(d, e->loc, "'on' names one device of a mesh axis by its index: "
               "shard %s: on dp[1]", s->name);
    return false;
  }
  if (!find_axis(m, e->lhs->s, &mi, &ai)) {
    unknown_axis(m, e->lhs, d);
    return false;
  }
  const Expr *ix = e->args.a[0].val;
  if (!fe_eval_int(ix, NULL, 0, "a device index", &at, d))
    return false;
  int size = m->mesh.a[mi].axis_size[ai];
  if (at < 0 || at >= size) {
    diag_error(d, ix->loc, "device index %lld is out of range: axis '%s' has %d device%s (0 to %d)",
               (long long)at, e->lhs->s, size, size == 1 ? "" : "s", size - 1);
    return false;
  }
  if (g->kind != G_PARAM || g->type.rank != 2 || !ir_looks_up(m->func.n ? m->func.a[0] : NULL, g)) {
    diag_error(d, s->name_loc, "'%s' is not an embedding table: 'on' places the weight of an "
               "embedding_bag whole on one device; split other tensors with shard %s: [...]",
               s->name, s->name);
    return false;
  }
  Sharding *sh = arena_alloc(m->arena, sizeof *sh);
  sh->mesh = mi;
  for (int k = 0; k < IR_MAX_RANK; k++)
    sh->axis[k] = -1;
  sh->axis[1] = (int8_t)ai;
  sh->ratio[1] = arena_alloc(m->arena, sizeof(double) * (size_t)size);
  for (int k = 0; k < size; k++)
    sh->ratio[1][k] = k == at;
  g->shard = sh;
  return true;
}

/* shard NAME: [entry, ...]: per dimension '*' (whole), an axis (even split)
 * or an axis with ratios (uneven split); shard NAME: on AXIS[INDEX]
 * (lower_place). */
static bool lower_shard(Module *m, const Stmt *s, const bool *used, int devices, Diag *d) {
  Arena *a = m->arena;
  int gi = 0;
  while (gi < m->global.n && strcmp(m->global.a[gi].name, s->name))
    gi++;
  if (gi == m->global.n) {
    if (ir_find_inst(m->func.a[0], s->name)) {
      diag_error(d, s->name_loc, "'%s' is computed; shard applies to inputs and params", s->name);
    } else {
      const char **cand = arena_alloc(a, sizeof(char *) * (size_t)(m->global.n + 1));
      for (int k = 0; k < m->global.n; k++)
        cand[k] = m->global.a[k].name;
      diag_error(d, s->name_loc, "no input or param named '%s'%s", s->name,
                 fe_did_you_mean(a, s->name, cand, m->global.n));
    }
    return false;
  }
  Global *g = &m->global.a[gi];
  char buf[128];
  if (g->shard) {
    diag_error(d, s->name_loc, "'%s' is already sharded", s->name);
    return false;
  }
  if (s->val)   /* a table is read: no warning of an unused one */
    return lower_place(m, g, s, d);
  if (s->list.n != g->type.rank) {
    diag_error(d, s->name_loc, "shard of '%s' has %d entr%s, but '%s' is %s", s->name, s->list.n,
               s->list.n == 1 ? "y" : "ies", s->name, type_str(&g->type, buf, sizeof buf));
    return false;
  }
  Sharding *sh = arena_alloc(a, sizeof *sh);
  sh->mesh = -1;
  for (int k = 0; k < IR_MAX_RANK; k++)
    sh->axis[k] = -1;
  for (int k = 0; k < s->list.n; k++) {
    const Expr *e = s->list.a[k];
    int mi, ai;
    if (e->kind == E_STAR)
      continue;
    if (!find_axis(m, e->s, &mi, &ai)) {
      unknown_axis(m, e, d);
      return false;
    }
    if (sh->mesh >= 0 && sh->mesh != mi) {
      diag_error(d, e->loc, "axis '%s' is of mesh '%s', the others of mesh '%s'", e->s,
                 m->mesh.a[mi].name, m->mesh.a[sh->mesh].name);
      return false;
    }
    for (int j = 0; j < k; j++)
      if (sh->axis[j] == ai) {
        diag_error(d, e->loc, "axis '%s' splits two dimensions of '%s'", e->s, s->name);
        return false;
      }
    sh->mesh = mi;
    sh->axis[k] = (int8_t)ai;
    int size = m->mesh.a[mi].axis_size[ai];
    if (e->kind == E_CALL && devices > 0) {
      diag_error(d, e->loc, "per-device ratios fix the number of devices; with --devices, "
                 "write '%s' (an even split) and let plan auto choose each plan's ratios", e->s);
      return false;
    }
    if (e->kind == E_CALL && !(sh->ratio[k] = lower_ratios(a, e, size, d)))
      return false;
    /* Under plan auto and even, a split that does not divide gets blocks
     * that differ by at most one element; explicit plans say what they mean. */
    if (e->kind == E_IDENT && m->plan == PLAN_EXPLICIT && g->type.dim[k] % size) {
      diag_error(d, e->loc, "dimension %d of '%s' (%lld) does not split evenly over the %d devices "
                 "of axis '%s'; give ratios, or plan auto", k, s->name,
                 (long long)g->type.dim[k], size, e->s);
      return false;
    }
  }
  if (sh->mesh < 0)
    sh->mesh = 0;
  g->shard = sh;
  if (!used[gi] && (d->wflags & W_UNUSED))
    diag_warn(d, s->name_loc, "shard annotation on '%s', which is never used", s->name);
  return true;
}

/* shard_state = axis: every param's optimizer state split over that mesh
 * axis, the data-parallel one (ZeRO stages 1 and 2; passes/sharding.c
 * checks the rest, once the optimizer and the batch's split are known);
 * shard_state = none: each state stays as its param's, also under plan
 * auto, which otherwise may split it. */
static void lower_shard_state(Module *m, const Stmt *s, Diag *d) {
  const Expr *e = s->val;
  const Mesh *mesh = m->mesh.n ? &m->mesh.a[0] : NULL;
  int a = 0;
  while (mesh && e && e->kind == E_IDENT && a < mesh->naxis && strcmp(mesh->axis_name[a], e->s))
    a++;
  if (!e || e->kind != E_IDENT)
    diag_error(d, e ? e->loc : s->name_loc,
               "'shard_state' needs the data-parallel mesh axis (shard_state = dp) or none");
  else if (m->state_sharded || m->state_whole)
    diag_error(d, s->name_loc, "a second shard_state option");
  else if (mesh && a == mesh->naxis && !strcmp(e->s, "none"))
    m->state_whole = true, m->state_loc = s->name_loc;
  else if (!mesh)
    diag_error(d, s->name_loc, "shard_state splits the optimizer state over a mesh axis; "
               "declare a mesh with mesh NAME[axis = size]");
  else if (a == mesh->naxis)
    diag_error(d, e->loc, "unknown mesh axis '%s'", e->s);
  else
    m->state_sharded = true, m->state_axis = a, m->state_loc = s->name_loc;
}

/* option = "microbatches" "=" expr: the batch of every training step cut into
 *          that many micro-batches, which pipeline stages overlap;
 *        | "schedule" "=" ("1f1b" | "gpipe"): their order on a stage;
 *        | "exchange" "=" ("f32" | "bf16" | "auto"): the format of the
 *          gradient exchange over the data-parallel axis (passes/comm.c),
 *          auto: the planner's choice by cost (passes/plan.c);
 *        | "deterministic" [ "=" expr ]: every sum over the batch in that many
 *          fixed pieces (default: ir_det_pieces), added in order;
 *        | "shard_state" "=" axis: see lower_shard_state;
 *        | "attention" "=" ("ring" | "heads"): how an attention whose
 *          sequence is split runs (passes/ring.c, passes/heads.c). */
static void lower_option(Module *m, const Stmt *s, Diag *d) {
  int64_t v;
  bool det = !strcmp(s->name, "deterministic");
  if (!strcmp(s->name, "shard_state")) {
    lower_shard_state(m, s, d);
  } else if (!strcmp(s->name, "schedule") && !s->val) {
    diag_error(d, s->name_loc, "'schedule' needs a value: schedule = 1f1b or gpipe");
  } else if (!strcmp(s->name, "schedule")) {
    const Expr *e = s->val;
    /* 1f1b lexes as the number 1 with the unit f1b */
    const char *name = e->kind == E_IDENT ? e->s
                       : e->kind == E_QUANT && e->is_int && e->i == 1 && !strcmp(e->s, "f1b") ? "1f1b"
                       : "";
    int k = 0;
    while (k < COUNTOF(ir_pipe_schedules) && strcmp(name, ir_pipe_schedules[k]))
      k++;
    if (m->schedule_loc.file)
      diag_error(d, s->name_loc, "a second schedule option");
    else if (k == COUNTOF(ir_pipe_schedules))
      diag_error(d, e->loc, "'schedule' must be 1f1b or gpipe");
    else
      m->schedule = (PipeSchedule)k, m->schedule_loc = s->name_loc;
  } else if (!strcmp(s->name, "exchange")) {
    const Expr *e = s->val;
    bool any = e && e->kind == E_IDENT && !strcmp(e->s, "auto");
    int k = any ? DT_WIRE_F32
            : e && e->kind == E_IDENT ? dtrt_name_index(dtrt_wire_names, DT_WIRE_COUNT, e->s) : -1;
    if (!e)
      diag_error(d, s->name_loc, "'exchange' needs a format: exchange = bf16");
    else if (m->exchange_loc.file)
      diag_error(d, s->name_loc, "a second exchange option");
    else if (k < 0)
      diag_error(d, e->loc, "unknown exchange format%s%s%s (expected f32, bf16 or auto)",
                 e->kind == E_IDENT ? " '" : "", e->kind == E_IDENT ? e->s : "",
                 e->kind == E_IDENT ? "'" : "");
    else
      m->exchange = k, m->exchange_auto = any, m->exchange_loc = s->name_loc;
  } else if (!strcmp(s->name, "attention")) {
    const Expr *e = s->val;
    const char *v = e && e->kind == E_IDENT ? e->s : "";
    if (!e)
      diag_error(d, s->name_loc, "'attention' needs a form: attention = heads or ring");
    else if (m->attn_loc.file)
      diag_error(d, s->name_loc, "a second attention option");
    else if (strcmp(v, "heads") && strcmp(v, "ring"))
      diag_error(d, e->loc, "'attention' must be ring or heads");
    else if (!m->mesh.n)
      diag_error(d, s->name_loc, "attention = %s splits an attention over a mesh axis; "
                 "declare a mesh with mesh NAME[axis = size]", v);
    else
      m->attn_heads = !strcmp(v, "heads"), m->attn_loc = s->name_loc;
  } else if (!det && strcmp(s->name, "microbatches")) {
    diag_error(d, s->name_loc,
               "unknown option '%s' (expected microbatches, schedule, "
               "deterministic, exchange, shard_state or attention)",
               s->name);
  } else if (det ? m->det_pieces != 0 : m->microbatches != 0) {
    diag_error(d, s->name_loc, "a second %s option", s->name);
  } else if (det && !m->batch) {
    diag_error(d, s->name_loc, "deterministic mode cuts the batch into pieces, but model '%s' "
               "declares no batch dimension (model %s(batch B = ...))", m->name, m->name);
  } else if (det && !s->val) {
    if (!(m->det_pieces = ir_det_pieces(m->batch)))
      diag_error(d, s->name_loc, "a batch of %lld rows has no count of pieces between 2 and 8; "
                 "give one: deterministic = N", (long long)m->batch);
    m->det_loc = s->name_loc;
  } else if (!s->val) {
    diag_error(d, s->name_loc, "'microbatches' needs a count: microbatches = 4");
  } else if (det && fe_eval_int(s->val, NULL, 0, "'deterministic'", &v, d)) {
    if (v < 2 || v > IR_MAX_PIECES)
      diag_error(d, s->val->loc, "'deterministic' takes a count of pieces between 2 and %d, not %lld",
                 IR_MAX_PIECES, (long long)v);
    else if (m->batch % v)
      diag_error(d, s->val->loc, "a batch of %lld rows is not %lld equal pieces",
                 (long long)m->batch, (long long)v);
    else
      m->det_pieces = (int)v, m->det_loc = s->name_loc;
  } else if (!det && fe_eval_int(s->val, NULL, 0, "'microbatches'", &v, d)) {
    if (v < 1 || v > IR_MAX_MICROBATCHES)
      diag_error(d, s->val->loc, "'microbatches' must be between 1 and %d, not %lld",
                 IR_MAX_MICROBATCHES, (long long)v);
    else
      m->microbatches = (int)v, m->microbatches_loc = s->name_loc;
  }
}

bool lower_parallel(Module *m, const Decl *pd, Cluster *c, const bool *used, int devices,
                    Diag *d) {
  static const char *const plans[] = {"auto", "even", "explicit"};
  static const PlanMode modes[] = {PLAN_AUTO, PLAN_EVEN, PLAN_EXPLICIT};
  int nerr = d->nerr;
  const Stmt *plan = NULL;
  m->cluster = c;
  m->plan = PLAN_AUTO;
  const Stmt *mesh = NULL;
  for (int k = 0; k < pd->body.n; k++) {
    const Stmt *s = pd->body.a[k];
    if (s->kind == S_MESH && mesh && devices > 0)
      diag_error(d, s->name_loc, "--devices resizes the one mesh of a parallel block, but "
                 "mesh '%s' is a second", s->name);
    else if (s->kind == S_MESH)
      lower_mesh(m, s, devices, d);
    mesh = s->kind == S_MESH && !mesh ? s : mesh;
  }
  if (devices > 0 && !mesh)
    diag_error(d, pd->name_loc, "--devices resizes the mesh of the parallel block, but it "
               "has none");
  /* Shards name mesh axes: after a broken mesh, they are not checked. */
  bool meshes_ok = d->nerr == nerr;
  /* Whether an even split must divide depends on the plan, which may come
   * after the shards: read it first, report on it in source order. */
  for (int k = 0; k < pd->body.n; k++) {
    const Stmt *s = pd->body.a[k];
    for (int j = 0; s->kind == S_PLAN && j < COUNTOF(plans); j++)
      if (!strcmp(plans[j], s->name)) {
        m->plan = modes[j];
        break;
      }
    if (s->kind == S_PLAN)
      break;
  }
  for (int k = 0; k < pd->body.n && !diag_full(d); k++) {
    const Stmt *s = pd->body.a[k];
    if (s->kind == S_SHARD && meshes_ok && m->mesh.n == 0) {
      diag_error(d, s->loc, "shard needs a mesh; declare one with mesh NAME[axis = size]");
      meshes_ok = false;
    } else if (s->kind == S_SHARD && meshes_ok) {
      lower_shard(m, s, used, devices, d);
    } else if (s->kind == S_ASSIGN) {
      lower_option(m, s, d);
    } else if (s->kind == S_PLAN && plan) {
      diag_error(d, s->loc, "a second plan statement");
    } else if (s->kind == S_PLAN) {
      plan = s;
      int j = 0;
      while (j < COUNTOF(plans) && strcmp(plans[j], s->name))
        j++;
      if (j == COUNTOF(plans))
        diag_error(d, s->name_loc, "unknown plan '%s' (expected auto, even or explicit)", s->name);
    }
  }
  if (d->nerr == nerr && m->schedule_loc.file && m->microbatches < 2)
    diag_warn(d, m->schedule_loc, "'schedule' has no effect without micro-batches "
              "(microbatches = M, M > 1)");
  return d->nerr == nerr;
}
