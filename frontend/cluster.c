/* cluster.c: cluster blocks to a Cluster (nodes, devices, links, measured
 * collectives; quantities in SI units), and a parallel block to meshes,
 * shardings and a plan mode. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ast.h"
#include "dtrt.h"

/* ---- quantities ---- */

typedef enum { U_MEM, U_BW, U_TIME } UnitKind;

/* A value in a unit is value * mul / div in SI units (dividing keeps 50us
 * exactly 5e-05). */
static const struct { const char *name; UnitKind kind; double mul, div; } units[] = {
  {"B", U_MEM, 1, 1}, {"KB", U_MEM, 1e3, 1}, {"MB", U_MEM, 1e6, 1}, {"GB", U_MEM, 1e9, 1},
  {"TB", U_MEM, 1e12, 1}, {"KiB", U_MEM, 1024.0, 1}, {"MiB", U_MEM, 1048576.0, 1},
  {"GiB", U_MEM, 1073741824.0, 1}, {"TiB", U_MEM, 1099511627776.0, 1},
  {"B/s", U_BW, 1, 1}, {"KB/s", U_BW, 1e3, 1}, {"MB/s", U_BW, 1e6, 1}, {"GB/s", U_BW, 1e9, 1},
  {"TB/s", U_BW, 1e12, 1}, {"Kb/s", U_BW, 1e3, 8}, {"Mb/s", U_BW, 1e6, 8}, {"Gb/s", U_BW, 1e9, 8},
  {"ns", U_TIME, 1, 1e9}, {"us", U_TIME, 1, 1e6}, {"ms", U_TIME, 1, 1e3}, {"s", U_TIME, 1, 1},
};

static const char *const kind_name[] = {"a memory size", "a bandwidth", "a time"};
static const char *const kind_example[] = {"16GiB", "20GB/s", "50us"};

/* A positive quantity of the given kind, in SI units. */
static bool quantity(const Expr *e, const char *what, UnitKind kind, double *out, Diag *d) {
  if (e->kind == E_NEG && (e->lhs->kind == E_QUANT || e->lhs->kind == E_NUM)) {
    diag_error(d, e->loc, "'%s' must be positive", what);
    return false;
  }
  if (e->kind == E_NUM) {
    diag_error(d, e->loc, "'%s' needs a unit, as in %s = %s", what, what, kind_example[kind]);
    return false;
  }
  if (e->kind != E_QUANT) {
    if (e->kind != E_ERROR)
      diag_error(d, e->loc, "'%s' must be %s, as in %s = %s", what, kind_name[kind], what,
                 kind_example[kind]);
    return false;
  }
  int k = 0;
  while (k < COUNTOF(units) && strcmp(units[k].name, e->s))
    k++;
  if (k == COUNTOF(units)) {
    diag_error(d, e->loc, "unknown unit '%s'", e->s);
    return false;
  }
  if (units[k].kind != kind) {
    diag_error(d, e->loc, "'%s' must be %s, but %s is %s", what, kind_name[kind], e->s,
               kind_name[units[k].kind]);
    return false;
  }
  *out = e->f * units[k].mul / units[k].div;
  if (!(*out > 0)) {
    diag_error(d, e->loc, "'%s' must be positive", what);
    return false;
  }
  if (!ir_in_range(&ir_quantity, *out)) {   /* the IR reader's range of bw and lat */
    diag_error(d, e->loc, "'%s' is too large", what);
    return false;
  }
  return true;
}

static bool string_arg(const Expr *e, const char *what, const char **out, Diag *d) {
  if (e->kind != E_STR) {
    if (e->kind != E_ERROR)
      diag_error(d, e->loc, "'%s' must be a string, as in %s = \"...\"", what, what);
    return false;
  }
  *out = e->s;
  return true;
}

/* spread = S: how far a measured figure may be off, relative (dtc-probe's
 * interquartile range of its median over resamples), a finite number, 0 or
 * more. */
static bool spread_arg(const Expr *e, double *out, Diag *d) {
  if (!fe_eval_float(e, NULL, 0, "'spread'", out, d))
    return false;
  if (!(*out >= 0)) {
    diag_error(d, e->loc, "'spread' must be 0 or more, not %g", *out);
    return false;
  }
  return true;
}

/* A device's figure given as a number, in *x, or an integer, in *i (gflops,
 * attn; tile_m, tile_n): in the IR reader's range of the field of that name. */
static bool ranged_arg(const Expr *e, const char *what, double *x, int64_t *i, Diag *d) {
  char quoted[32];
  snprintf(quoted, sizeof quoted, "'%s'", what);
  if (i ? !fe_eval_int(e, NULL, 0, quoted, i, d) : !fe_eval_float(e, NULL, 0, quoted, x, d))
    return false;
  const IrRange *r = ir_field(ir_device_fields, what)->range;
  if (!ir_in_range(r, i ? (double)*i : *x)) {
    diag_error(d, e->loc, "'%s' must be %s", what, r->text);
    return false;
  }
  return true;
}

/* ---- clusters ---- */


/* device NAME: cpu(gflops = G, mem = M, target = "triple", cpu = "name", spread = S,
 *                  bw = B, lat = T, row = T, attn = F, score = T, tile_m = R, tile_n = C) */
static bool lower_device(Arena *a, Cluster *c, const Stmt *s, Diag *d) {
  static const char *const param[] = {"gflops", "mem", "target", "cpu",    "spread", "bw",
                                      "lat",    "row", "attn",   "score", "tile_m", "tile_n"};
  for (int k = 0; k < c->dev.n; k++)
    if (!strcmp(c->dev.a[k].name, s->name)) {
      diag_error(d, s->name_loc, "device '%s' is already defined", s->name);
      return false;
    }
  const Expr *e = s->val;
  if (strcmp(e->s, "cpu")) {
    diag_error(d, e->loc, "unknown device kind '%s' (the known kind is cpu)", e->s);
    return false;
  }
  if (e->kind != E_CALL) {
    diag_error(d, e->loc, "'cpu' needs its arguments 'gflops' and 'mem'");
    return false;
  }
  Expr *arg[12];
  if (!fe_bind(e, param, 12, 0, 2, arg, a, d))
    return false;
  Device dev = {.name = s->name, .node = c->node.n - 1, .kind = "cpu", .loc = s->name_loc};
  double mem = 0;
  bool ok = ranged_arg(arg[0], "gflops", &dev.gflops, NULL, d);
  ok &= quantity(arg[1], "mem", U_MEM, &mem, d);
  if (ok && !ir_in_range(ir_field(ir_device_fields, "mem")->range, mem)) {
    diag_error(d, arg[1]->loc, "'mem' must be at least one byte");
    ok = false;
  }
  dev.mem = (int64_t)llround(mem);
  ok &= !arg[2] || string_arg(arg[2], "target", &dev.target, d);
  ok &= !arg[3] || string_arg(arg[3], "cpu", &dev.cpu, d);
  ok &= !arg[4] || spread_arg(arg[4], &dev.spread, d);
  ok &= !arg[5] || quantity(arg[5], "bw", U_BW, &dev.bw, d);
  ok &= !arg[6] || quantity(arg[6], "lat", U_TIME, &dev.lat, d);
  ok &= !arg[7] || quantity(arg[7], "row", U_TIME, &dev.row, d);
  ok &= !arg[8] || ranged_arg(arg[8], "attn", &dev.attn, NULL, d);
  ok &= !arg[9] || quantity(arg[9], "score", U_TIME, &dev.score, d);
  ok &= !arg[10] || ranged_arg(arg[10], "tile_m", NULL, &dev.tile_m, d);
  ok &= !arg[11] || ranged_arg(arg[11], "tile_n", NULL, &dev.tile_n, d);
  if (ok && !arg[10] != !arg[11]) {
    diag_error(d, (arg[10] ? arg[10] : arg[11])->loc, "give 'tile_m' and 'tile_n' together");
    ok = false;
  }
  if (ok)
    vec_push(a, &c->dev, dev);
  return ok;
}

/* link intra(bw = B, lat = T, spread = S) | link inter(bw = B, lat = T, spread = S) */
static bool lower_link(Arena *a, Cluster *c, const Stmt *s, Diag *d) {
  static const char *const param[] = {"bw", "lat", "spread"};
  const Expr *e = s->val;
  if (strcmp(e->s, "intra") && strcmp(e->s, "inter")) {
    diag_error(d, e->loc, "unknown link '%s' (expected intra or inter)", e->s);
    return false;
  }
  for (int k = 0; k < c->link.n; k++)
    if (!strcmp(c->link.a[k].name, e->s)) {
      diag_error(d, e->loc, "link '%s' is already defined", e->s);
      return false;
    }
  Expr *arg[3];
  if (!fe_bind(e, param, 3, 0, 2, arg, a, d))
    return false;
  Link l = {.name = e->s, .loc = e->loc};
  bool ok = quantity(arg[0], "bw", U_BW, &l.bw, d);
  ok &= quantity(arg[1], "lat", U_TIME, &l.lat, d);
  ok &= !arg[2] || spread_arg(arg[2], &l.spread, d);
  if (ok)
    vec_push(a, &c->link, l);
  return ok;
}

/* "mpi, ring or grouped": the methods of op's kernel. */
static const char *method_list(Arena *a, Op op) {
  const char *list = "", *last = NULL;
  for (int k = 0; k < DTRT_COMM_COUNT; k++)
    if (ir_has_method(op, k)) {
      if (last)
        list = arena_printf(a, "%s%s%s", list, *list ? ", " : "", last);
      last = dtrt_comm_method_names[k];
    }
  return arena_printf(a, "%s%s%s", list, *list ? " or " : "", last);
}

/* collective OP(method = M, ranks = N, lat = T, bw = B, spread = S) */
static bool lower_collective(Arena *a, Cluster *c, const Stmt *s, Diag *d) {
  static const char *const param[] = {"method", "ranks", "lat", "bw", "spread"};
  static const Op ops[] = {OP_all_reduce, OP_all_gather, OP_reduce_scatter, OP_all_to_all};
  const Expr *e = s->val;
  int op = 0;
  while (op < COUNTOF(ops) && strcmp(ir_ops[ops[op]].name, e->s))
    op++;
  if (op == COUNTOF(ops)) {
    const char *cand[COUNTOF(ops)];
    for (int k = 0; k < COUNTOF(ops); k++)
      cand[k] = ir_ops[ops[k]].name;
    diag_error(d, e->loc, "unknown collective '%s' (expected all_reduce, all_gather, "
               "reduce_scatter or all_to_all)%s", e->s,
               fe_did_you_mean(a, e->s, cand, COUNTOF(ops)));
    return false;
  }
  Expr *arg[5];
  if (!fe_bind(e, param, 5, 0, 4, arg, a, d))
    return false;
  Collective col = {.op = ops[op], .method = -1, .loc = e->loc};
  bool ok = true;
  const Expr *m = arg[0];
  if (m->kind != E_IDENT) {
    if (m->kind != E_ERROR)
      diag_error(d, m->loc, "'method' must be a method name, as in method = ring");
    ok = false;
  } else {
    int k = dtrt_name_index(dtrt_comm_method_names, DTRT_COMM_COUNT, m->s);
    if (k < 0 || !ir_has_method(ops[op], k)) {
      diag_error(d, m->loc, "%s has no method '%s' (expected %s)%s", e->s, m->s,
                 method_list(a, ops[op]),
                 k < 0 ? fe_did_you_mean(a, m->s, dtrt_comm_method_names, DTRT_COMM_COUNT) : "");
      ok = false;
    }
    col.method = k;
  }
  if (!fe_eval_int(arg[1], NULL, 0, "'ranks'", &col.ranks, d)) {
    ok = false;
  } else if (col.ranks < 2 || col.ranks > INT_MAX) {
    diag_error(d, arg[1]->loc, "'ranks' must be %s, not %lld",
               col.ranks < 2 ? "at least 2" : "at most 2147483647", (long long)col.ranks);
    ok = false;
  }
  ok &= quantity(arg[2], "lat", U_TIME, &col.lat, d);
  ok &= quantity(arg[3], "bw", U_BW, &col.bw, d);
  ok &= !arg[4] || spread_arg(arg[4], &col.spread, d);
  for (int k = 0; ok && k < c->coll.n; k++) {
    const Collective *o = &c->coll.a[k];
    if (o->op == col.op && o->method == col.method && o->ranks == col.ranks) {
      diag_error(d, e->loc, "collective %s by %s over %lld ranks is already given", e->s,
                 dtrt_comm_method_names[col.method], (long long)col.ranks);
      ok = false;
    }
  }
  if (ok)
    vec_push(a, &c->coll, col);
  return ok;
}

static bool has_link(const Cluster *c, const char *name) {
  for (int k = 0; k < c->link.n; k++)
    if (!strcmp(c->link.a[k].name, name))
      return true;
  return false;
}

Cluster *lower_cluster(Arena *a, const Decl *cd, Diag *d) {
  Cluster *c = arena_alloc(a, sizeof *c);
  c->name = cd->name;
  c->loc = cd->name_loc;
  bool ok = true, crowded = false;
  for (int k = 0; k < cd->body.n && !diag_full(d); k++) {
    const Stmt *s = cd->body.a[k];
    if (s->kind == S_LINK || s->kind == S_COLLECTIVE) {
      ok &= s->kind == S_LINK ? lower_link(a, c, s, d) : lower_collective(a, c, s, d);
      continue;
    }
    for (int j = 0; j < c->node.n; j++)
      if (!strcmp(c->node.a[j].name, s->name)) {
        diag_error(d, s->name_loc, "node '%s' is already defined", s->name);
        ok = false;
      }
    Node node = {s->name, s->name_loc};
    vec_push(a, &c->node, node);
    if (s->body.n == 0) {
      diag_error(d, s->name_loc, "node '%s' has no devices", s->name);
      ok = false;
    }
    crowded |= s->body.n > 1;
    for (int j = 0; j < s->body.n; j++)
      ok &= lower_device(a, c, s->body.a[j], d);
  }
  if (!ok)
    return NULL;
  if (c->dev.n == 0) {
    diag_error(d, cd->name_loc, "cluster '%s' has no devices", cd->name);
    return NULL;
  }
  if (crowded && !has_link(c, "intra")) {
    diag_error(d, cd->name_loc, "cluster '%s' needs a link intra(...): a node has several devices",
               cd->name);
    return NULL;
  }
  if (c->node.n > 1 && !has_link(c, "inter")) {
    diag_error(d, cd->name_loc, "cluster '%s' needs a link inter(...): it has several nodes", cd->name);
    return NULL;
  }
  for (int k = 0; k < c->coll.n; k++)
    if (c->coll.a[k].ranks > c->dev.n) {
      diag_error(d, c->coll.a[k].loc, "collective %s over %lld ranks, but cluster '%s' has %d "
                 "device%s", ir_ops[c->coll.a[k].op].name, (long long)c->coll.a[k].ranks, cd->name, c->dev.n,
                 c->dev.n == 1 ? "" : "s");
      ok = false;
    }
  return ok ? c : NULL;
}

/* ---- parallel blocks ---- */

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

/* Whether global g is the weight of an embedding_bag of the model. */
static bool is_table(const Module *m, const Global *g) {
  const Func *f = m->func.n ? m->func.a[0] : NULL;
  for (int k = 0; f && k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_embedding_bag && i->in[1]->op == OP_load &&
        !strcmp(ir_get_str(i->in[1], "global", ""), g->name))
      return true;
  }
  return false;
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
  if (g->kind != G_PARAM || g->type.rank != 2 || !is_table(m, g)) {
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
