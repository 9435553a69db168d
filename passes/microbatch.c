/* microbatch.c: the loops of a training step cut into micro-batches. With
 * Module.microbatches = M > 1, each loop of @train_step runs as M loops, one
 * per block of B/M consecutive rows of its carried values (B their first
 * dimension), each on a copy of its body typed for B/M rows. Pipeline
 * stages (passes/spmd.c) then overlap them: stage s runs micro-batch j + 1
 * while stage s + 1 runs j, so of (stages - 1) stage times of a loop without
 * micro-batches (a forward and a backward wave) only (stages - 1) / M
 * remain idle. The step's ops between the loops (the head, the loss, their
 * derivatives) run on the parts too where they read rows row by row
 * (cut_step), so micro-batch j's backward needs only its own forward and
 * passes/schedule.c may interleave them (1F1B).
 *
 * In a body, a value either holds rows of the batch in its first dimension
 * (ROWS: cut by M), or does not depend on the batch (PLAIN: the same in every
 * copy), or is a micro-batch's part of a sum over the batch (SUM: a weight's
 * gradient; only in a backward loop, only through linear ops). A forward
 * loop's results join by concatenation; a backward loop's carried gradient
 * joins by concatenation and its summed outputs by addition. A dropout's
 * copy draws its rows of the whole batch's mask (`at`), so the step is the
 * uncut step up to the order of the sums.
 *
 * Requires: autodiff (its backward loops read the stacks their forward loops
 * save); the step's inputs hold the batch in their first dimension (as a
 * data-parallel split has them). Guarantees: with M > 1 no loop of
 * @train_step runs a body typed for the whole batch; every op a body holds
 * is one the cut computes exactly, else a located error says which op needs
 * the whole batch; an op of the step outside the loops runs on parts only
 * where it computes them exactly, else on their join. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef enum { V_PLAIN, V_ROWS, V_SUM } Kind;

typedef struct Cut {
  Module *m;
  Diag *d;
  int n;               /* micro-batches */
  bool failed;
  bool soft;           /* a trial: a refusal sets refused, reports nothing */
  bool refused;
} Cut;

/* A value of the step as the cut has it: in n parts of a kind, or whole. */
typedef struct Parts {
  Inst *v[IR_MAX_MICROBATCHES];
  Kind kind;
} Parts;

/* A forward loop cut in pieces: each piece's loop. */
typedef struct Piece {
  const Inst *x;       /* the loop in @train_step */
  Inst *loop[IR_MAX_MICROBATCHES];
  Kind *out;           /* by output of its body */
} Piece;

static void fail(Cut *c, Loc loc, const char *msg) {
  if (c->soft) {
    c->refused = true;
    return;
  }
  if (c->failed)
    return;
  c->failed = true;
  diag_error(c->d, loc, "micro-batches: %s", msg);
  diag_note(c->d, c->m->microbatches_loc, "micro-batches asked for here");
}

static bool has_axis0(const Inst *i, const char *attr, int rank) {
  int n;
  const int64_t *ax = ir_get_ints(i, attr, &n);
  for (int k = 0; k < n; k++)
    if (ax[k] == 0 || ax[k] == -rank)
      return true;
  return false;
}

/* Fixes the attributes of x, body copy j's copy of i, whose operands in
 * rows hold rows: shapes that name the batch, the dropout mask's place.
 * False when i reads across the rows of the batch. */
static bool cut_attrs(Cut *c, const Inst *i, Inst *x, int j, bool rows, bool backward) {
  const Type *t0 = i->nin ? &i->in[0]->type : NULL;
  const char *why = NULL;
  if (!rows)
    return true;
  switch (i->op) {
  case OP_reshape: case OP_broadcast: {
    int n;
    int64_t s[IR_MAX_RANK];
    const int64_t *shape = ir_get_ints(i, "shape", &n);
    memcpy(s, shape, sizeof(int64_t) * (size_t)n);
    if (n == 0 || s[0] % c->n || (i->op == OP_reshape && s[0] % t0->dim[0] && t0->dim[0] % s[0]))
      why = "puts the batch's rows elsewhere than the first dimension";
    else
      s[0] /= c->n, ir_set_ints(x, "shape", s, n);
    break;
  }
  case OP_transpose: {
    int n;
    if (ir_get_ints(i, "perm", &n)[0] != 0)
      why = "moves the batch's rows out of the first dimension";
    break;
  }
  case OP_slice: case OP_pad: case OP_concat: case OP_pad_reflect: case OP_pad_replicate:
  case OP_pad_circular: case OP_pad_reflect_grad: case OP_pad_replicate_grad:
  case OP_pad_circular_grad:
    if (ir_get_int(i, "axis", 0) == 0)
      why = "cuts or joins the batch's rows";
    break;
  case OP_softmax: case OP_log_softmax: case OP_softmax_grad: case OP_log_softmax_grad:
    if (ir_get_int(i, "axis", t0->rank - 1) == 0)
      why = "normalises over the batch";
    break;
  case OP_normalize: case OP_normalize_grad:
    if (t0->rank == 1)
      why = "normalises over the batch";
    break;
  case OP_mean: case OP_max: case OP_max_grad:
    if (has_axis0(i, "axes", t0->rank))
      why = "reduces over the batch";
    break;
  case OP_sum:
    if (!backward && has_axis0(i, "axes", t0->rank))
      why = "reduces over the batch";
    break;
  case OP_dropout: case OP_dropout_grad: case OP_sdpa: case OP_sdpa_grad: case OP_sdpa_dmask: {
    int64_t at[2 * IR_MAX_RANK] = {0};
    Type whole;
    if (!ir_dropout_whole(i, &whole))
      break;
    for (int d = 0; d < whole.rank; d++)
      at[d] = whole.dim[d];
    at[whole.rank] = j * (whole.dim[0] / c->n);
    ir_set_ints(x, "at", at, 2 * whole.rank);
    break;
  }
  case OP_repeat:
    why = "is a loop inside the loop";
    break;
  default:
    break;
  }
  if (why)
    fail(c, i->loc, arena_printf(c->m->arena, "'%s' %s", ir_ops[i->op].name, why));
  return !why;
}

/* What x (the copy of i, typed) holds, from its operands' kinds. */
static Kind kind_of(Cut *c, const Inst *i, const Inst *x, const Kind *k, bool backward) {
  bool rows = false, sum = false, plain_sum_ok = true;
  for (int j = 0; j < i->nin; j++) {
    rows |= k[j] == V_ROWS;
    sum |= k[j] == V_SUM;
  }
  if (sum) {
    switch (i->op) {
    case OP_add: case OP_sub:
      for (int j = 0; j < i->nin; j++)
        plain_sum_ok &= k[j] == V_SUM;
      break;
    case OP_mul: case OP_div:
      plain_sum_ok = !rows && (i->op == OP_mul || k[1] != V_SUM) && (k[0] != V_SUM || k[1] != V_SUM);
      break;
    case OP_neg: case OP_reshape: case OP_transpose: case OP_sum: case OP_broadcast:
      break;
    default:
      plain_sum_ok = false;
    }
    if (!plain_sum_ok)
      fail(c, i->loc, arena_printf(c->m->arena, "'%s' is not linear in a sum over the batch",
                                   ir_ops[i->op].name));
    return V_SUM;
  }
  if (!rows) {
    DTC_ASSERT(type_eq(&x->type, &i->type));
    return V_PLAIN;
  }
  const Type *a = &i->type, *b = &x->type;
  bool cut = a->rank == b->rank && a->rank > 0 && b->dim[0] * c->n == a->dim[0];
  for (int d = 1; cut && d < a->rank; d++)
    cut = a->dim[d] == b->dim[d];
  if (cut)
    return V_ROWS;
  /* a reduction over the rows: a weight's gradient */
  if (backward && type_eq(a, b) &&
      (i->op == OP_sum || i->op == OP_matmul || i->op == OP_embedding_grad ||
       i->op == OP_embedding_bag_grad ||
       i->op == OP_cross_entropy_sum || i->op == OP_label_count))
    return V_SUM;
  fail(c, i->loc, arena_printf(c->m->arena, "'%s' %s", ir_ops[i->op].name,
                               backward ? "mixes the batch's rows with other dimensions"
                                        : "reduces over the batch or mixes its rows with other dimensions"));
  return V_PLAIN;
}

/* Body b for micro-batch j: its args typed t and holding k; out[o]: what
 * output o holds. NULL after an error. */
static Func *cut_body(Cut *c, Func *b, const Type *t, const Kind *k, int j, bool backward,
                      Kind *out) {
  Module *m = c->m;
  Func *f = ir_add_body(m, b->name, arena_printf(m->arena, "mb%d", j), b->loc);
  ir_renumber(b);
  Inst **map = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(b->inst.n + 1));
  Kind *kind = arena_alloc(m->arena, sizeof(Kind) * (size_t)(b->inst.n + 1));
  int nout = 0;
  for (int n = 0; n < b->inst.n && !c->failed; n++) {
    const Inst *i = b->inst.a[n];
    Inst **in = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(i->nin + 1));
    Kind ink[SHARD_MAX_IN];
    bool rows = false;
    for (int q = 0; q < i->nin; q++) {
      in[q] = map[i->in[q]->id];
      ink[q] = kind[i->in[q]->id];
      rows |= ink[q] == V_ROWS;
    }
    Inst *x = ir_new(f, i->op, i->loc, i->nin, in);
    x->name = i->name;
    ir_copy_attrs(x, i);
    if (i->op == OP_arg) {
      int a = (int)ir_get_int(i, "index", 0);
      x->type = t[a];
      kind[n] = k[a];
    } else if (i->op == OP_output) {
      ir_finish(x);
      out[nout++] = kind[n] = ink[0];
    } else {
      char err[256];
      if (!cut_attrs(c, i, x, j, rows, backward))
        break;
      if (!ir_infer(x, err, sizeof err)) {
        fail(c, i->loc, arena_printf(m->arena, "'%s' cannot take a micro-batch: %s", ir_ops[i->op].name, err));
        break;
      }
      kind[n] = kind_of(c, i, x, ink, backward);
    }
    map[n] = x;
  }
  return c->failed ? NULL : f;
}

static Inst *make(Func *f, Op op, Loc loc, int nin, Inst **in, const char *attr, int64_t v) {
  Inst *x = ir_new(f, op, loc, nin, in);
  if (attr)
    ir_set_int(x, attr, v);
  return ir_finish(x);
}

static Inst *rows_of(Cut *c, Func *f, Inst *v, int j, Loc loc) {
  int64_t b = v->type.dim[0] / c->n;
  Inst *x = ir_new(f, OP_slice, loc, 1, &v);
  ir_set_int(x, "axis", 0);
  ir_set_int(x, "begin", j * b);
  ir_set_int(x, "end", (j + 1) * b);
  return ir_finish(x);
}

/* The forward loop whose saved stack v is, NULL if none. */
static const Piece *saved_by(const Piece *p, int np, const Inst *v) {
  const Inst *r = v->op == OP_repeat_out ? v->in[0] : v;
  for (int k = 0; k < np; k++)
    if (p[k].x == r)
      return &p[k];
  return NULL;
}

/* Loop r of @train_step as n loops on rows of its carries, at the end of f
 * (its operands already in f: in, or in parts: pin, for carried rows).
 * Pieces of forward loops before it: p. */
static Piece cut_loop(Cut *c, Func *f, const Inst *r, Inst **in, Parts *const *pin,
                      const Piece *p, int np) {
  Module *m = c->m;
  Func *b = ir_repeat_body(r);
  bool backward = ir_get_int(r, "reverse", 0);
  int64_t carry = ir_get_int(r, "carry", 1);
  Piece out = {r, {0}, arena_alloc(m->arena, sizeof(Kind) * (size_t)(ir_func_noutputs(b) + 1))};
  /* the carries of a backward loop past its forward loop's are sums */
  int64_t rows = carry;
  const Piece *fwd = NULL;
  for (int k = (int)carry; backward && k < r->nin && !fwd; k++)
    fwd = saved_by(p, np, r->in[k]);
  if (backward && fwd)
    rows = ir_get_int(fwd->x, "carry", 1);
  for (int k = 0; k < rows; k++)
    if (r->in[k]->type.rank == 0 || r->in[k]->type.dim[0] % c->n) {
      fail(c, r->loc, arena_printf(m->arena, "the loop's carried value has %lld rows, which %d micro-batches do not divide",
                                   (long long)(r->in[k]->type.rank ? r->in[k]->type.dim[0] : 1), c->n));
      return out;
    }
  for (int k = (int)rows; k < carry; k++)
    if (!shard_zero(r->in[k])) {
      fail(c, r->loc, "a backward loop's sum does not start from zeros");
      return out;
    }
  for (int j = 0; j < c->n; j++) {
    Type t[SHARD_MAX_IN];
    Kind k[SHARD_MAX_IN];
    Inst *ops[SHARD_MAX_IN];
    for (int q = 0; q < r->nin; q++) {
      int kind = ir_repeat_operand_kind(r, q);
      ops[q] = in[q];
      k[q] = V_PLAIN;
      if (kind == 0 && q < rows)
        ops[q] = pin[q] ? pin[q]->v[j] : rows_of(c, f, in[q], j, r->loc), k[q] = V_ROWS;
      else if (kind == 0)
        k[q] = V_SUM;
      const Piece *s = kind == 2 ? saved_by(p, np, r->in[q]) : NULL;
      if (s) {
        int64_t o = r->in[q]->op == OP_repeat_out ? ir_get_int(r->in[q], "index", 0) : 0;
        Inst *l = s->loop[j];
        ops[q] = o ? make(f, OP_repeat_out, r->loc, 1, &l, "index", o) : l;
        k[q] = s->out[o];
      }
      DTC_ASSERT(ops[q]);
      t[q] = ops[q]->type;
      if (kind == 2) {
        t[q].rank--;
        memmove(t[q].dim, t[q].dim + 1, sizeof(int64_t) * (size_t)t[q].rank);
      }
    }
    Func *body = cut_body(c, b, t, k, j, backward, out.out);
    if (!body)
      return out;
    Inst *x = ir_new(f, OP_repeat, r->loc, r->nin, ops);
    ir_copy_attrs(x, r);
    ir_set_str(x, "body", body->name);
    out.loop[j] = ir_finish(x);
  }
  for (int o = 0; o < rows; o++)
    if (out.out[o] != V_ROWS)
      fail(c, r->loc, "the loop's carried value does not keep the batch's rows");
  int nout = ir_func_noutputs(b);
  for (int o = (int)carry; !backward && o < nout; o++)
    if (out.out[o] == V_SUM)
      fail(c, r->loc, "a forward loop sums over the batch");
  for (int o = (int)carry; backward && o < nout; o++)
    if (out.out[o] == V_ROWS)
      fail(c, r->loc, "a backward loop stacks rows of the batch");
  return out;
}

/* The parts joined: rows by concatenation, sums by addition, the rest as
 * part 0 has it. */
static Inst *join(Cut *c, Func *f, const Parts *p, Loc loc) {
  if (p->kind == V_ROWS)
    return make(f, OP_concat, loc, c->n, (Inst **)p->v, "axis", 0);
  if (p->kind == V_PLAIN)
    return p->v[0];
  Inst *s = p->v[0];
  for (int j = 1; j < c->n; j++)
    s = ir_make(f, OP_add, loc, 2, s, p->v[j]);
  return s;
}

static const char *part_name(Cut *c, const char *name, int j) {
  return name ? arena_printf(c->m->arena, "%s.mb%d", name, j) : NULL;
}

static Inst *scaled(Func *f, Inst *x, double by, Loc loc) {
  Inst *k = ir_new(f, OP_const, loc, 0, NULL);
  ir_set_float(k, "value", by);
  return ir_make(f, OP_mul, loc, 2, x, ir_finish(k));
}

/* The cut of a step's values, by id in the step before the cut. */
typedef struct Step {
  Inst **whole;        /* the value whole (joined when first read whole) */
  Parts **parts;       /* or in parts */
  bool *data;          /* depends on an input: its first dimension the batch's rows */
  const Inst **old;
} Step;

static Inst *whole_of(Cut *c, Func *f, Step *st, int id) {
  if (!st->whole[id] && st->parts[id]) {
    st->whole[id] = join(c, f, st->parts[id], st->old[id]->loc);
    st->whole[id]->name = st->old[id]->name;
  }
  return st->whole[id];
}

/* i, an op of the step outside the loops that reads rows of micro-batches,
 * as n ops on their parts: a whole operand that depends on the inputs gives
 * its rows, a mean over the batch is the sum of the parts' means over n,
 * and its derivative scales by 1/n. False when i needs the whole batch
 * (nothing is then left in f). */
static bool cut_op(Cut *c, Func *f, Step *st, const Inst *i, Parts *out) {
  for (int q = 0; q < i->nin; q++) {
    const Parts *p = st->parts[i->in[q]->id];
    if (p && p->kind != V_ROWS)
      whole_of(c, f, st, i->in[q]->id);
  }
  int mark = f->inst.n;
  bool mean = i->op == OP_cross_entropy || i->op == OP_mse || i->op == OP_bce_with_logits;
  bool dmean = i->op == OP_cross_entropy_grad || i->op == OP_bce_with_logits_grad;
  c->soft = true;
  c->refused = false;
  for (int j = 0; j < c->n && !c->refused; j++) {
    Inst *in[SHARD_MAX_IN];
    Kind k[SHARD_MAX_IN];
    for (int q = 0; q < i->nin; q++) {
      int id = i->in[q]->id;
      const Parts *p = st->parts[id];
      Inst *w = p && p->kind == V_ROWS ? NULL : st->whole[id];
      const Type *t = w ? &w->type : NULL;
      DTC_ASSERT(w || p);
      k[q] = w ? V_PLAIN : V_ROWS;
      in[q] = w ? w : p->v[j];
      if (w && st->data[id] && t->rank && t->dim[0] % c->n == 0 && t->dim[0] >= c->n)
        in[q] = rows_of(c, f, w, j, i->loc), k[q] = V_ROWS;
    }
    if ((mean || dmean) && (k[0] != V_ROWS || (dmean && k[2] != V_PLAIN)))
      c->refused = true;
    if (dmean && !c->refused)
      in[2] = scaled(f, in[2], 1.0 / c->n, i->loc);
    Inst *x = ir_new(f, i->op, i->loc, i->nin, in);
    ir_copy_attrs(x, i);
    char err[256];
    if (c->refused || !cut_attrs(c, i, x, j, true, true) || !ir_infer(x, err, sizeof err)) {
      c->refused = true;
      break;
    }
    Kind kind = mean ? V_SUM : kind_of(c, i, x, k, true);
    if (mean)
      x = scaled(f, x, 1.0 / c->n, i->loc);
    x->name = part_name(c, i->name, j);
    out->v[j] = x;
    out->kind = kind;
  }
  c->soft = false;
  if (c->refused)
    f->inst.n = mark;
  return !c->refused;
}

/* Rebuilds f's list; an old inst keeps its id (its index in old) until the
 * end, new ones are never looked up by id. A value a loop's piece computes
 * stays in parts through the ops that read it row by row (the head of the
 * network, its loss and their derivatives), so micro-batch j's backward
 * depends on its forward only (passes/schedule.c interleaves them); it is
 * joined where an op needs it whole (the optimizer's update). */
static void cut_step(Cut *c, Func *f) {
  Module *m = c->m;
  ir_renumber(f);
  int n = f->inst.n, np = 0;
  Step st = {arena_alloc(m->arena, sizeof(Inst *) * (size_t)(n + 1)),
             arena_alloc(m->arena, sizeof(Parts *) * (size_t)(n + 1)),
             arena_alloc(m->arena, sizeof(bool) * (size_t)(n + 1)),
             arena_alloc(m->arena, sizeof(Inst *) * (size_t)(n + 1))};
  Piece *p = arena_alloc(m->arena, sizeof(Piece) * (size_t)(n + 1));
  memcpy(st.old, f->inst.a, sizeof(Inst *) * (size_t)n);
  f->inst.n = 0;
  for (int k = 0; k < n && !c->failed; k++) {
    Inst *i = (Inst *)st.old[k];
    Inst *in[SHARD_MAX_IN];
    bool rows = false;
    const Global *g = i->op == OP_load ? ir_global_of(i) : NULL;
    st.data[k] = g && g->kind == G_INPUT;
    for (int q = 0; q < i->nin; q++) {
      int id = i->in[q]->id;
      st.data[k] |= st.data[id];
      rows |= st.parts[id] && st.parts[id]->kind == V_ROWS;
    }
    const Piece *s = i->op == OP_repeat_out ? saved_by(p, np, i->in[0]) : NULL;
    if (i->op == OP_repeat) {
      Parts *pin[SHARD_MAX_IN] = {0};
      int64_t carry = ir_get_int(i, "carry", 1);
      for (int q = 0; q < i->nin; q++) {
        int id = i->in[q]->id;
        if (q < carry && st.parts[id] && st.parts[id]->kind == V_ROWS)
          pin[q] = st.parts[id], in[q] = NULL;
        else   /* none for a forward loop's stack: its pieces' are read */
          in[q] = whole_of(c, f, &st, id);
      }
      p[np] = cut_loop(c, f, i, in, pin, p, np);
      st.parts[k] = arena_alloc(m->arena, sizeof(Parts));
      memcpy(st.parts[k]->v, p[np].loop, sizeof p[np].loop);
      st.parts[k]->kind = p[np].out[0];
      np++;
    } else if (s) {
      int64_t o = ir_get_int(i, "index", 0);
      /* a forward loop's stack is read by its backward loops only, piece by piece */
      if (ir_get_int(s->x, "reverse", 0) || o < ir_get_int(s->x, "carry", 1)) {
        Parts *pt = st.parts[k] = arena_alloc(m->arena, sizeof(Parts));
        for (int j = 0; j < c->n; j++) {
          Inst *l = s->loop[j];
          pt->v[j] = make(f, OP_repeat_out, i->loc, 1, &l, "index", o);
          pt->v[j]->name = part_name(c, i->name, j);
        }
        pt->kind = s->out[o];
      }
    } else if (rows && i->op != OP_output && i->op != OP_store &&
               cut_op(c, f, &st, i, st.parts[k] = arena_alloc(m->arena, sizeof(Parts)))) {
      continue;
    } else {
      st.parts[k] = NULL;
      for (int q = 0; q < i->nin; q++) {
        in[q] = whole_of(c, f, &st, i->in[q]->id);
        DTC_ASSERT(in[q]);
      }
      for (int q = 0; q < i->nin; q++)
        i->in[q] = in[q];
      vec_push(m->arena, &f->inst, i);
      st.whole[k] = i;
    }
  }
  ir_renumber(f);
}

static bool runs(const Module *m, const Func *b) {
  for (int k = 0; k < m->func.n; k++)
    for (int i = 0; i < m->func.a[k]->inst.n; i++) {
      const Inst *x = m->func.a[k]->inst.a[i];
      if (x->op == OP_repeat && ir_repeat_body(x) == b)
        return true;
    }
  return false;
}

bool pass_microbatch(Module *m, Diag *d, PassRun *run) {
  (void)run;
  Cut c = {m, d, m->microbatches, false, false, false};
  if (c.n < 2)
    return true;
  int loops = 0;
  for (int k = 0; k < m->func.n && !c.failed; k++)
    if (!strcmp(m->func.a[k]->name, "train_step")) {
      for (int i = 0; i < m->func.a[k]->inst.n; i++)
        loops += m->func.a[k]->inst.a[i]->op == OP_repeat;
      cut_step(&c, m->func.a[k]);
    }
  if (!loops)
    diag_warn(d, m->microbatches_loc,
              "'microbatches' has no effect: the training step repeats no block to cut");
  /* the bodies only the uncut loops ran (one that runs another goes first) */
  for (bool gone = !c.failed; gone;) {
    gone = false;
    for (int k = 0; k < m->func.n; k++)
      if (m->func.a[k]->body && !runs(m, m->func.a[k])) {
        memmove(&m->func.a[k], &m->func.a[k + 1], sizeof(Func *) * (size_t)(m->func.n - k - 1));
        m->func.n--, k--, gone = true;
      }
  }
  return !c.failed;
}

bool microbatch_fits(const Module *m, int n) {
  Arena *a = arena_new();
  Module *copy = ir_copy(a, m);
  Diag quiet;
  diag_init_quiet(&quiet);
  bool fits = copy != NULL;
  if (fits) {
    copy->microbatches = n;
    fits = pass_microbatch(copy, &quiet, NULL) && !quiet.nerr;
  }
  arena_free(a);
  return fits;
}
