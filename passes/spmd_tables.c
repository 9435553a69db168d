/* spmd_tables.c: what the spmd pass does with embedding tables. A lookup
 * in a row-wise table (split by rows) gets `at` = [R, lo], its block's place
 * among the table's rows; a table split by rows or columns is never
 * gathered: an op whose form would need it whole is a located error at its
 * expression. A table-wise table (whole on one device, `on dp[1]`) is a
 * column-wise one with a placement's ratios (ir_placed) and needs nothing
 * more here. --emit=plan lists each table's form and bytes per device. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

/* The operand of op that is an embedding table: 1 for a lookup, 0 for a
 * sparse update; -1 for other ops. */
int spmd_table_operand(Op op) {
  if (op == OP_embedding_bag || op == OP_embedding_bag_grad || op == OP_embedding_bag_psw_grad ||
      op == OP_sparse_rows || op == OP_sparse_values)
    return 1;
  if (op == OP_sparse_sgd || op == OP_sparse_adagrad_sum || op == OP_sparse_adagrad ||
      op == OP_sparse_moment || op == OP_sparse_adam)
    return 0;
  return -1;
}

/* The name of the global x loads, through the reshards spmd made; NULL when
 * x is no load. */
static const char *table_name(const Inst *x) {
  return x->op == OP_load ? ir_get_str(x, "global", "?") : NULL;
}

/* Whether s (of rank `rank`) splits a dimension over axis a. */
static bool splits_over(const Sharding *s, int rank, int a) {
  for (int d = 0; s && d < rank; d++)
    if (s->axis[d] == a)
      return true;
  return false;
}

/* Why a form of i that leaves table operand k (split over axis a along
 * dim: 0 rows, 1 columns) whole would gather it, for the error: max, bags
 * split over a, or else. */
static const char *why_gathered(const Module *m, const Inst *i, int a, int dim,
                                const Sharding *req) {
  const char *an = m->mesh.a[0].axis_name[a];
  if (dim == 0 && ir_get_int(i, "mode", 0) == DT_BAG_MAX)
    return "a maximum does not add up over blocks of rows; a row-wise table needs mode \"sum\" "
           "or \"mean\"";
  for (int q = 0; q < i->nin; q++)
    if (splits_over(&req[q], i->in[q]->type.rank, a) || splits_over(i->shard, i->type.rank, a))
      return arena_printf(m->arena,
                          "its bags are split over '%s' too, and an axis splits the "
                          "%s or the bags; leave the input whole over '%s'",
                          an, dim ? "columns" : "rows", an);
  return dim ? "this op has no form on a block of columns"
             : "this op has no form on a block of rows";
}

/* Table operand k of i split by rows or columns in cur: false with a
 * located error (unless *failed already: one is enough) when the op's form
 * gathers it (req not split alike), setting *failed; else,
 * for a lookup of a block of rows, x (the device's op) given `at` = [R, lo],
 * and padding_idx -1 when it has none (the kernel's attributes are
 * positional). */
bool spmd_table_block(Module *m, Diag *d, int dev, const Inst *i, int k, const Sharding *cur,
                      const Sharding *req, Inst *x, bool *failed) {
  const Type *t = &i->in[k]->type;
  for (int dim = 0; cur && dim < t->rank; dim++)
    if (cur->axis[dim] >= 0 && req[k].axis[dim] != cur->axis[dim]) {
      const char *name = table_name(i->in[k]);
      if (!*failed)
        diag_error(d, i->loc, "'%s' would gather table '%s', split by %s over '%s': %s",
                   ir_ops[i->op].name, name ? name : "?", dim ? "columns" : "rows",
                   m->mesh.a[0].axis_name[cur->axis[dim]],
                   why_gathered(m, i, cur->axis[dim], dim, req));
      *failed = true;
      return false;
    }
  if (req[k].axis[0] < 0 || k != 1)
    return true;
  Type local;
  int64_t begin[IR_MAX_RANK];
  ir_local_type(m, &req[k], t, dev, &local, begin);
  int64_t at[2] = {t->dim[0], begin[0]};
  ir_set_ints(x, "at", at, 2);
  if (!ir_attr(x, "padding_idx"))
    ir_set_int(x, "padding_idx", -1);
  return true;
}


/* Bytes of global g on device dev, with its optimizer state (<g>__*). */
static double table_bytes(const Module *m, const Global *g, int dev) {
  double b = 0;
  size_t n = strlen(g->name);
  for (int k = 0; k < m->global.n; k++) {
    const Global *s = &m->global.a[k];
    if (s == g || (s->kind == G_STATE && !strncmp(s->name, g->name, n) && s->name[n] == '_' &&
                   s->name[n + 1] == '_')) {
      Type t = ir_global_type_on(m, s, dev);
      b += type_bytes(&t);
    }
  }
  return b;
}

/* The embedding tables: each one's form (row-wise or column-wise over an
 * axis, table-wise on one device, or replicated) and its bytes with its optimizer state on every
 * device. */
void spmd_report_tables(FILE *out, const Module *m, const Func *step, const Func *fwd, int ndev) {
  const Func *f = step ? step : fwd;
  bool any = false;
  char dn[64], size[32];
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind != G_PARAM || !ir_looks_up(f, gl))
      continue;
    if (!any)
      fputs("embedding tables (each device's bytes of the table and its optimizer state):\n", out);
    any = true;
    int rows = gl->shard ? gl->shard->axis[0] : -1, cols = gl->shard ? gl->shard->axis[1] : -1;
    int on = cols >= 0 ? ir_placed(gl->shard->ratio[1], m->mesh.a[0].axis_size[cols]) : -1;
    fprintf(out, "  %-12s ", gl->name);
    if (on >= 0)
      fprintf(out, "table-wise on %s[%d]", m->mesh.a[0].axis_name[cols], on), cols = -1;
    if (rows >= 0)
      fprintf(out, "row-wise over %s", m->mesh.a[0].axis_name[rows]);
    if (cols >= 0)
      fprintf(out, "%scolumn-wise over %s", rows >= 0 ? ", " : "", m->mesh.a[0].axis_name[cols]);
    fputs(rows < 0 && cols < 0 && on < 0 ? "replicated:" : ":", out);
    for (int dev = 0; dev < ndev; dev++) {
      fprintf(out, "%s %s ", dev ? "," : "", spmd_device_name(m, dev, dn, sizeof dn));
      fputs(ir_bytes_str(table_bytes(m, gl, dev), size, sizeof size), out);
    }
    fputc('\n', out);
  }
}

