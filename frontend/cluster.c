/* cluster.c: cluster blocks to a Cluster (nodes, devices, links, measured
 * collectives; quantities in SI units); parallel.c lowers the parallel block. */
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

/* A memory size (mem, l2) into *out, whole bytes in the IR reader's range. */
static bool bytes_arg(const Expr *e, const char *what, int64_t *out, Diag *d) {
  double v = 0;
  if (!quantity(e, what, U_MEM, &v, d))
    return false;
  if (!ir_in_range(ir_field(ir_device_fields, what)->range, v)) {
    diag_error(d, e->loc, "'%s' must be at least one byte", what);
    return false;
  }
  *out = (int64_t)llround(v);
  return true;
}

/* device NAME: cpu(gflops = G, mem = M, target = "triple", cpu = "name", spread = S, bw = B,
 *   lat = T, row = T, attn = F, score = T, tile_m = R, tile_n = C, product = T, spill = B,
 *   l2 = M, attn_block = T, entry = T) */
static bool lower_device(Arena *a, Cluster *c, const Stmt *s, Diag *d) {
  static const char *const param[] = {"gflops", "mem",   "target", "cpu",     "spread",
                                      "bw",     "lat",   "row",    "attn",    "score",
                                      "tile_m", "tile_n", "product", "spill", "l2",
                                      "attn_block", "entry"};
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
  Expr *arg[17];
  if (!fe_bind(e, param, 17, 0, 2, arg, a, d))
    return false;
  Device dev = {.name = s->name, .node = c->node.n - 1, .kind = "cpu", .loc = s->name_loc};
  bool ok = ranged_arg(arg[0], "gflops", &dev.gflops, NULL, d);
  ok &= bytes_arg(arg[1], "mem", &dev.mem, d);
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
  ok &= !arg[12] || quantity(arg[12], "product", U_TIME, &dev.product, d);
  ok &= !arg[13] || quantity(arg[13], "spill", U_BW, &dev.spill, d);
  ok &= !arg[14] || bytes_arg(arg[14], "l2", &dev.l2, d);
  ok &= !arg[15] || quantity(arg[15], "attn_block", U_TIME, &dev.attn_block, d);
  ok &= !arg[16] || quantity(arg[16], "entry", U_TIME, &dev.entry, d);
  for (int k = 10; ok && k < 14; k += 3)   /* tile_m with tile_n, spill with l2 */
    if (!arg[k] != !arg[k + 1]) {
      diag_error(d, (arg[k] ? arg[k] : arg[k + 1])->loc, "give '%s' and '%s' together",
                 param[k], param[k + 1]);
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
