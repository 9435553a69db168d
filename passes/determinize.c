/* determinize.c: deterministic mode. With Module.det_pieces = G > 1, every
 * sum over the batch is cut into G fixed pieces of rows: the op runs once per
 * piece (its `pieces` attribute), and `fold` adds the pieces' results in piece
 * order. A device holds whole pieces (ir_dim_blocks) and spmd gathers a
 * fold's pieces to every device, so each device adds the same numbers in the
 * same order whatever the layout; every other op computes a row from that
 * row alone. The step's losses and parameters are then the same bit for bit
 * on one process and on any mesh that splits the batch, evenly or not
 * (EasyScale's fixed logical workers, in the compiler).
 *
 * A value holds rows of the batch (ROWS) when it comes from an input whose
 * dim 0 is the batch (Module.batch), through ops that keep those rows in dim
 * 0. An op that sums over them runs in pieces; a mean over them becomes the
 * fold of sums over a count, and cross_entropy and its derivative the forms
 * with an explicit divisor (cross_entropy_sum), bce_with_logits the fold of
 * its elementwise terms' sums over the count and its derivative elementwise
 * over that count, whose arithmetic no longer depends on a device's share of
 * the rows. A matrix product over anything
 * else sums its k in G fixed pieces too (cut_k), in every layout, so a form
 * that splits k (Megatron's split weights) adds the same numbers in the
 * same order as one process.
 *
 * A loop's body is cut as its loop reads it: an arg holds rows where the
 * carried or whole operand does, or where a stacked operand holds them in
 * its dim 1 (a loop's stacked outputs: the saved activations, [L, B, ...]),
 * so the sums over the batch in @X.save and @X.grad run in pieces and fold
 * in the body, each iteration's (each layer's weight gradient) before it is
 * stacked; rows behind a loop's layers may only be read by a loop.
 *
 * Requires: autodiff, eval, microbatch. Guarantees: in @train_step and
 * @forward, and in the bodies their loops run, no op sums over the batch's
 * rows but in pieces, no op scales by a device's share of them, and no
 * matrix product whose k G divides sums k in one piece; an op that mixes
 * the rows otherwise, a loop cut into micro-batches, or a mean loss without
 * a fixed form, is a located error. */
#include <string.h>

#include "passes.h"

/* A body already cut, with the rows of its args and of its outputs: a
 * body runs under one repeat, or under several alike. */
typedef struct Body {
  Func *f;
  uint8_t *arg, *out;   /* by index: ROWS, STACK (args of stacked rows) or 0 */
  int narg, nout;
} Body;

enum { ROWS = 1, STACK = 2 };   /* the batch's rows in dim 0, in dim 1 */

typedef struct Det {
  Module *m;
  Diag *d;
  Func *f;
  int g;               /* pieces */
  Inst **map;          /* by old id: the value that replaces it */
  uint8_t *rows;       /* by old id: ROWS, STACK or 0 */
  const uint8_t *arg;  /* in a body: the rows of its args, by index */
  uint8_t *out;        /* in a body: the rows of its outputs, by index */
  int nout;            /* the outputs met so far */
  struct {
    Body *a;
    int n, cap;
  } done;
  bool failed;
} Det;

static void fail(Det *c, const Inst *i, const char *fmt, const char *what) {
  c->failed = true;
  diag_error(c->d, i->loc, fmt, what);
  diag_note(c->d, c->m->det_loc, "deterministic mode (%d pieces of the batch) asked for here",
            c->g);
}

static Inst *konst(Det *c, Loc loc, double v) {
  Inst *k = ir_new(c->f, OP_const, loc, 0, NULL);
  ir_set_float(k, "value", v);
  return ir_finish(k);
}

/* x (built on operands in, its attributes set) run in pieces, operand k cut
 * when cut[k], and then folded. */
static Inst *fold_of(Det *c, Inst *x, Inst **in, const bool *cut) {
  int64_t pc[32];
  int n = 0;
  for (int k = 0; k < x->nin; k++)
    if (cut[k])
      pc[n++] = k, pc[n++] = in[k]->type.dim[0] / c->g;
  ir_set_ints(x, "pieces", pc, n);
  return ir_make(c->f, OP_fold, x->loc, 1, ir_finish(x));
}

static Inst *pieces(Det *c, const Inst *i, Op op, Inst **in, const bool *cut) {
  Inst *x = ir_new(c->f, op, i->loc, i->nin, in);
  ir_copy_attrs(x, i);
  return fold_of(c, x, in, cut);
}

/* bce_with_logits' terms max(x, 0) - x t + log(1 + exp(-|x|)), element by
 * element (so row by row): relu(x) - x t + log(1 + exp(-(relu(x) + relu(-x)))). */
static Inst *bce_terms(Det *c, Loc loc, Inst *x, Inst *t) {
  Inst *p = ir_make(c->f, OP_relu, loc, 1, x);
  Inst *q = ir_make(c->f, OP_relu, loc, 1, ir_make(c->f, OP_neg, loc, 1, x));
  Inst *e = ir_make(c->f, OP_exp, loc, 1, ir_make(c->f, OP_neg, loc, 1,
                                                  ir_make(c->f, OP_add, loc, 2, p, q)));
  Inst *l = ir_make(c->f, OP_log, loc, 1, ir_make(c->f, OP_add, loc, 2, e, konst(c, loc, 1)));
  return ir_make(c->f, OP_add, loc, 2, ir_make(c->f, OP_sub, loc, 2, p,
                                               ir_make(c->f, OP_mul, loc, 2, x, t)), l);
}

/* bce_with_logits_grad's dloss (sigmoid(x) - t) / N, element by element, N
 * the whole batch's count: no kernel divides by a device's share. */
static Inst *bce_grad(Det *c, const Inst *i, Inst **in) {
  Inst *g = ir_make(c->f, OP_div, i->loc, 2, in[2],
                    konst(c, i->loc, (double)type_elems(&in[0]->type)));
  Inst *d = ir_make(c->f, OP_sub, i->loc, 2, ir_make(c->f, OP_sigmoid, i->loc, 1, in[0]), in[1]);
  return ir_make(c->f, OP_mul, i->loc, 2, d, g);
}

/* The mean of every element of v (rows of the batch in dim 0): the fold of
 * the pieces' sums, over the whole count. */
static Inst *mean_all(Det *c, Loc loc, Inst *v) {
  Inst *sq[1] = {v};
  int64_t axes[IR_MAX_RANK];
  for (int d = 0; d < v->type.rank; d++)
    axes[d] = d;
  Inst *y = ir_new(c->f, OP_sum, loc, 1, sq);
  ir_set_ints(y, "axes", axes, v->type.rank);
  bool first[16] = {true};
  Inst *x = fold_of(c, y, sq, first);
  return ir_make(c->f, OP_div, loc, 2, x, konst(c, loc, (double)type_elems(&v->type)));
}

/* A sum over the batch's rows: operand k's dim 0 is summed over, with
 * label s; every dim of that label must be a cut operand's dim 0. */
static Inst *cut_sum(Det *c, const Inst *i, Inst **in, const DimMap *dm, int s) {
  bool cut[16] = {0};
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; j < i->in[k]->type.rank; j++) {
      if (dm->to[k][j] != FORM_SUM(s))
        continue;
      if (j != 0 || in[k]->type.dim[0] % c->g) {
        fail(c, i, "deterministic mode: '%s' sums the batch's rows with a dimension that is not "
                   "an operand's first or not a multiple of the pieces", ir_ops[i->op].name);
        return NULL;
      }
      cut[k] = true;
    }
  Inst *x;
  switch (i->op) {
  case OP_mean: {   /* the fold of sums, over the count */
    double n = (double)type_elems(&in[0]->type) / (double)type_elems(&i->type);
    x = pieces(c, i, OP_sum, in, cut);
    return ir_make(c->f, OP_div, i->loc, 2, x, konst(c, i->loc, n));
  }
  case OP_cross_entropy: {   /* every label kept: the sum over the rows */
    Inst *y = ir_new(c->f, OP_cross_entropy_sum, i->loc, 2, in);
    ir_set_int(y, "ignore_index", INT32_MIN);
    ir_set_float(y, "smoothing", 0);
    bool both[16] = {true, true};
    x = fold_of(c, y, in, both);
    return ir_make(c->f, OP_div, i->loc, 2, x, konst(c, i->loc, (double)in[0]->type.dim[0]));
  }
  case OP_mse: {   /* the mean of the squares */
    Inst *e = ir_make(c->f, OP_sub, i->loc, 2, in[0], in[1]);
    return mean_all(c, i->loc, ir_make(c->f, OP_mul, i->loc, 2, e, e));
  }
  case OP_bce_with_logits:   /* the mean of its terms */
    return mean_all(c, i->loc, bce_terms(c, i->loc, in[0], in[1]));
  default:
    return pieces(c, i, i->op, in, cut);
  }
}

/* cross_entropy_grad's dloss / N on a device's rows, as one process has it. */
static Inst *ce_grad(Det *c, const Inst *i, Inst **in) {
  Inst *d = ir_make(c->f, OP_div, i->loc, 2, in[2],
                    konst(c, i->loc, (double)in[0]->type.dim[0]));
  Inst *x = ir_new(c->f, OP_cross_entropy_sum_grad, i->loc, 3, (Inst *[]){in[0], in[1], d});
  ir_set_int(x, "ignore_index", INT32_MIN);
  ir_set_float(x, "smoothing", 0);
  return ir_finish(x);
}

/* v reshaped to `rank` dims of `dim`, then transposed by perm if given. */
static Inst *shape(Det *c, Loc loc, Inst *v, const int64_t *dim, int rank, const int64_t *perm) {
  Inst *r = ir_new(c->f, OP_reshape, loc, 1, &v);
  ir_set_ints(r, "shape", dim, rank);
  r = ir_finish(r);
  if (!perm)
    return r;
  Inst *t = ir_new(c->f, OP_transpose, loc, 1, &r);
  ir_set_ints(t, "perm", perm, rank);
  return ir_finish(t);
}

/* A matmul of matrices whose contraction is not over the batch's rows: a
 * mesh may split its k as it splits a weight, so every layout sums k in
 * the same G pieces of k / G, a batched matmul of the pieces and their fold
 * (a device then holds whole pieces of k, and spmd chains the fold over the
 * devices). NULL where k is not a multiple of G: then a split of k is an
 * error at spmd. */
static Inst *cut_k(Det *c, const Inst *i, Inst **in) {
  bool ta = ir_get_int(i, "ta", 0), tb = ir_get_int(i, "tb", 0);
  const Type *a = &in[0]->type, *b = &in[1]->type;
  int64_t g = c->g, m = a->dim[ta ? 1 : 0], k = a->dim[ta ? 0 : 1], n = b->dim[tb ? 0 : 1];
  if (k % g)
    return NULL;
  static const int64_t swap[3] = {1, 0, 2};
  /* a: [m, k] as [g, m, k/g], or [k, m] as [g, k/g, m] (ta kept) */
  Inst *pa = ta ? shape(c, i->loc, in[0], (int64_t[]){g, k / g, m}, 3, NULL)
                : shape(c, i->loc, in[0], (int64_t[]){m, g, k / g}, 3, swap);
  /* b: [k, n] as [g, k/g, n], or [n, k] as [g, n, k/g] (tb kept) */
  Inst *pb = tb ? shape(c, i->loc, in[1], (int64_t[]){n, g, k / g}, 3, swap)
                : shape(c, i->loc, in[1], (int64_t[]){g, k / g, n}, 3, NULL);
  Inst *x = ir_new(c->f, OP_matmul, i->loc, 2, (Inst *[]){pa, pb});
  ir_copy_attrs(x, i);
  return ir_make(c->f, OP_fold, i->loc, 1, ir_finish(x));
}

static void determinize(Det *c, Func *f);

/* Body b cut for args of rows arg[0..narg): a body cut before must have
 * been cut for the same rows. NULL after an error. */
static const Body *cut_body(Det *c, const Inst *at, Func *b, const uint8_t *arg, int narg) {
  for (int k = 0; k < c->done.n; k++) {
    const Body *x = &c->done.a[k];
    if (x->f != b)
      continue;
    if (x->narg == narg && !memcmp(x->arg, arg, (size_t)narg))
      return x;
    fail(c, at, "deterministic mode: loops run the body '%s' on operands that hold the "
                "batch's rows differently", b->name);
    return NULL;
  }
  Body y = {b, arena_alloc(c->m->arena, (size_t)narg + 1), NULL, narg, ir_func_noutputs(b)};
  memcpy(y.arg, arg, (size_t)narg);
  y.out = arena_alloc(c->m->arena, (size_t)y.nout + 1);
  Det in = *c;   /* the caller's function, restored after the body */
  c->arg = y.arg, c->out = y.out, c->nout = 0;
  determinize(c, b);
  in.failed = c->failed, in.done = c->done;
  *c = in;
  vec_push(c->m->arena, &c->done, y);
  return &c->done.a[c->done.n - 1];
}

static const Body *body_done(const Det *c, const Func *b) {
  for (int k = 0; k < c->done.n; k++)
    if (c->done.a[k].f == b)
      return &c->done.a[k];
  return NULL;
}

/* Loop i: its body cut, a carried or whole operand's rows in the body's arg
 * as they are, a stacked one's (rows in its dim d + 1) in the arg's dim d;
 * its value's rows those of the body's first output. */
static void cut_loop(Det *c, Inst *i, uint8_t *rows) {
  if (c->m->microbatches > 1) {
    fail(c, i, "deterministic mode: this %s runs in micro-batches, whose sums deterministic "
               "mode does not yet add in the order of the pieces", "loop");
    diag_note(c->d, c->m->microbatches_loc, "micro-batches asked for here");
    return;
  }
  uint8_t arg[SHARD_MAX_IN];
  int carry = (int)ir_get_int(i, "carry", 1);
  for (int k = 0; k < i->nin; k++) {
    uint8_t r = c->rows[i->in[k]->id];
    bool stacked = ir_repeat_operand_kind(i, k) == 2;
    if (stacked && r == ROWS) {
      fail(c, i, "deterministic mode: this %s stacks its iterations along the batch's rows",
           "loop");
      return;
    }
    arg[k] = stacked && r ? r - 1 : r;
  }
  const Body *b = cut_body(c, i, ir_repeat_body(i), arg, i->nin);
  if (!b)
    return;
  for (int k = 0; k < carry; k++)
    if (b->out[k] != arg[k]) {
      fail(c, i, "deterministic mode: this %s carries a value that holds the batch's rows in "
                 "one iteration and not in another", "loop");
      return;
    }
  *rows = b->out[0];
}

/* Output k of a loop: a carried value's rows, or a stacked output's, one
 * dimension further in. */
static uint8_t loop_out(const Det *c, const Inst *i) {
  const Inst *r = i->in[0];
  const Body *b = body_done(c, ir_repeat_body(r));
  int k = (int)ir_get_int(i, "index", 0);
  if (!b || k >= b->nout || !b->out[k])
    return 0;
  return k < ir_get_int(r, "carry", 1) ? b->out[k] : (uint8_t)(b->out[k] + 1);
}

/* i with operands in (the new values): what replaces it, and whether that
 * holds the batch's rows; NULL: i itself. */
static Inst *rewrite(Det *c, Inst *i, Inst **in, uint8_t *rows) {
  bool any = false, deep = false;
  *rows = 0;
  for (int k = 0; k < i->nin; k++) {
    any |= c->rows[i->in[k]->id] != 0;
    deep |= c->rows[i->in[k]->id] > ROWS;
  }
  switch (i->op) {
  case OP_load: {
    const Global *g = ir_global_of(i);
    *rows = g->kind == G_INPUT && g->type.rank >= 1 && g->type.dim[0] == c->m->batch ? ROWS : 0;
    return NULL;
  }
  case OP_arg:
    *rows = c->arg ? c->arg[ir_get_int(i, "index", 0)] : 0;
    return NULL;
  case OP_output:
    if (c->out)
      c->out[c->nout++] = c->rows[i->in[0]->id];
    return NULL;
  case OP_repeat_out:
    *rows = loop_out(c, i);
    return NULL;
  case OP_repeat:
    if (any)
      cut_loop(c, i, rows);
    return NULL;
  default:
    break;
  }
  if (ir_attr(i, "kfold")) {   /* its k is rows of several dims, not one to cut */
    fail(c, i, "deterministic mode: a '%s' with kfold has no fixed order of its sums",
         ir_ops[i->op].name);
    return NULL;
  }
  if (!any || i->op == OP_store)
    return NULL;
  if (deep) {
    fail(c, i, "deterministic mode: '%s' reads a loop's stacked values, whose batch's rows lie "
               "behind its layers (only a loop may read them)", ir_ops[i->op].name);
    return NULL;
  }
  if (i->op == OP_conv2d || i->op == OP_conv2d_grad_input || i->op == OP_conv2d_grad_weight) {
    /* their kernels' sums run in OpenBLAS, whose order is its own */
    fail(c, i, "deterministic mode: '%s' has no kernel with a fixed order of its sums yet",
         ir_ops[i->op].name);
    return NULL;
  }
  DimMap dm;
  if (!shard_map(i, &dm)) {
    fail(c, i, "deterministic mode: '%s' cannot take the batch's rows", ir_ops[i->op].name);
    return NULL;
  }
  int sum = -1;
  bool keep = false;
  for (int k = 0; k < i->nin; k++) {
    if (!c->rows[i->in[k]->id])
      continue;
    int e = dm.to[k][0];
    if (e <= FORM_SUM(0)) {
      sum = FORM_SUM(0) - e;
    } else if (e == 0 && dm.mul[k][0] == dm.div[k][0] && i->type.dim[0] == i->in[k]->type.dim[0]) {
      keep = true;
    } else if (e == 0 && i->type.rank && i->type.dim[0] % c->g == 0) {
      keep = true;   /* a reshape that merges or splits the rows' trailing dims */
    } else {
      fail(c, i, "deterministic mode: '%s' moves or mixes the batch's rows (it needs them in "
                 "dimension 0, row by row)", ir_ops[i->op].name);
      return NULL;
    }
  }
  if (sum >= 0)
    return cut_sum(c, i, in, &dm, sum);
  *rows = keep ? ROWS : 0;
  if (i->op == OP_cross_entropy_grad)
    return ce_grad(c, i, in);
  if (i->op == OP_bce_with_logits_grad)
    return bce_grad(c, i, in);
  if (i->op == OP_matmul && i->type.rank == 2)
    return cut_k(c, i, in);
  return NULL;
}

/* f's ops rewritten in order; a body's (c->arg set) as its loop reads it. */
static void determinize(Det *c, Func *f) {
  Module *m = c->m;
  ir_renumber(f);
  int n = f->inst.n;
  Inst **old = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(n + 1));
  memcpy(old, f->inst.a, sizeof(Inst *) * (size_t)n);
  c->f = f;
  c->map = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(n + 1));
  c->rows = arena_alloc(m->arena, (size_t)(n + 1));
  f->inst.n = 0;
  for (int k = 0; k < n; k++) {
    Inst *i = old[k];
    Inst *in[SHARD_MAX_IN];
    DTC_ASSERT(i->nin <= SHARD_MAX_IN);
    for (int j = 0; j < i->nin; j++)
      in[j] = c->map[i->in[j]->id];
    uint8_t rows = 0;
    Inst *x = c->failed ? NULL : rewrite(c, i, in, &rows);
    if (!x) {
      for (int j = 0; j < i->nin; j++)
        i->in[j] = in[j];
      vec_push(m->arena, &f->inst, i);
      x = i;
    } else if (i->name && !x->name) {
      x->name = i->name;
    }
    c->map[k] = x;
    c->rows[k] = rows;
  }
  ir_renumber(f);
}

bool pass_determinize(Module *m, Diag *d, PassRun *run) {
  (void)run;
  if (m->det_pieces < 2)
    return true;
  Det c = {.m = m, .d = d, .g = m->det_pieces};
  DTC_ASSERT(m->batch > 0 && m->batch % c.g == 0);
  for (int k = 0; k < m->mesh.n; k++)
    for (int a = 0; a < m->mesh.a[k].naxis; a++)
      if (m->mesh.a[k].axis_size[a] > c.g) {
        diag_error(d, m->det_loc, "deterministic mode cuts the batch into %d pieces, fewer than "
                   "the %d devices of mesh axis '%s'", c.g, m->mesh.a[k].axis_size[a],
                   m->mesh.a[k].axis_name[a]);
        return false;
      }
  for (int k = 0; k < m->func.n && !c.failed; k++) {
    Func *f = m->func.a[k];
    if (f->device < 0 && !f->body && (ir_func_is(f, "train_step") || ir_func_is(f, "forward")))
      determinize(&c, f);
  }
  return !c.failed;
}
