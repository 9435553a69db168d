/* lower_index.c: integers and indices as torch has them: arithmetic and
 * comparisons of i32 values with torch's promotion, floor_divide and
 * remainder, gather, one_hot, arange, cumsum, tril and triu. */
#include <math.h>
#include <string.h>

#include "lower_int.h"

/* ---- integer arithmetic ---- */

/* An i32 value as f32 (torch's promotion); x itself when f32. */
static Inst *as_f32(Ctx *c, Loc at, Inst *x) {
  return x && x->type.dtype == DT_I32 ? op1(c, OP_to_f32, at, x) : x;
}

/* One side of an integer op: a value, or the integer k. */
typedef struct Side {
  Inst *v;
  int64_t k;
} Side;

/* a fn b on i32 values, a number on at most one side. */
static Inst *int_op(Ctx *c, Loc at, DtIntFn fn, Side a, Side b) {
  Inst *in[2] = {a.v ? a.v : b.v, b.v};
  Inst *i = ir_new(c->f, OP_int_elem, at, a.v && b.v ? 2 : 1, in);
  ir_set_int(i, "fn", fn);
  if (!a.v || !b.v)
    ir_set_int(i, "k", a.v ? b.k : a.k);
  if (!a.v)
    ir_set_int(i, "swap", 1);
  return finish(c, i);
}

/* Whether e, a constant expression, is an integer: its value in *k, which
 * must fit in i32 (a located error otherwise, *bad set). */
static bool int_const(Ctx *c, const Expr *e, int64_t *k, bool *bad) {
  Num v;
  if (!fe_eval(e, c->m->dim.a, c->m->dim.n, &v, c->d)) {
    *bad = true;
    return false;
  }
  if (!v.is_int)
    return false;
  if (v.i < INT32_MIN || v.i > INT32_MAX) {
    diag_error(c->d, e->loc, "%lld does not fit in i32, the type of the other operand",
               (long long)v.i);
    *bad = true;
    return false;
  }
  *k = v.i;
  return true;
}

/* The integer k as an i32 value of rank 0. */
static Inst *int_scalar(Ctx *c, Loc at, int64_t k) {
  Inst *i = ir_new(c->f, OP_arange, at, 0, NULL);
  ir_set_int(i, "size", 1);
  ir_set_float(i, "start", (double)k);
  ir_set_float(i, "step", 1);
  ir_set_int(i, "i32", 1);
  i = finish(c, i);
  return i ? reshaped(c, at, i, NULL, 0) : NULL;
}

Inst *lower_int_where(Ctx *c, const Expr *e, Inst *cond, Inst *x, Inst *y, Expr *const *arg) {
  Inst *v[2] = {x, y};
  bool ints = true, bad = false;
  for (int k = 0; k < 2; k++) {
    int64_t n;
    if (v[k]->type.dtype == DT_I32)
      continue;
    if (is_number(c, arg[k]) && int_const(c, arg[k], &n, &bad))
      v[k] = int_scalar(c, arg[k]->loc, n);
    else if (bad)
      return NULL;
    else
      ints = false;
  }
  if (!ints)
    return lower_select(c, e->loc, cond, as_f32(c, e->loc, x), as_f32(c, e->loc, y));
  if (!v[0] || !v[1])
    return NULL;
  Inst *in[3] = {cond, v[0], v[1]};
  return finish(c, ir_new(c->f, OP_int_where, e->loc, 3, in));
}

/* x OP y, x or y i32, as torch computes it: + - * and comparisons of i32
 * values and integers stay integers (comparisons giving an f32 mask, as of
 * f32 values), exact, sums and products wrapping at 2^32; `/`, an f32
 * operand or a number that is not an integer make both f32 first. The
 * numbers on either side, lowered already as f32 constants, are read again
 * from the expression here. */
Inst *lower_int_binary(Ctx *c, const Expr *e, Inst *x, Inst *y) {
  static const DtIntFn fn[] = {['+'] = DT_INT_ADD, ['-'] = DT_INT_SUB, ['*'] = DT_INT_MUL,
                               ['>'] = DT_INT_GT,  ['<'] = DT_INT_GT,  [B_GE] = DT_INT_GE,
                               [B_LE] = DT_INT_GE, [B_EQ] = DT_INT_EQ, [B_NE] = DT_INT_NE};
  static const char *const name[] = {
      ['+'] = "add", ['-'] = "sub", ['*'] = "mul", ['/'] = "div", ['<'] = "<",
      ['>'] = ">",   [B_LE] = "<=", [B_GE] = ">=", [B_EQ] = "==", [B_NE] = "!="};
  const Expr *side[2] = {e->lhs, e->rhs};
  Side s[2] = {{x, 0}, {y, 0}};
  bool exact = e->op != '/' && e->op != '@';
  for (int k = 0; k < 2 && exact; k++) {
    if (s[k].v->type.dtype == DT_I32)
      continue;
    bool bad = false;
    exact = is_const(c, side[k]) && int_const(c, side[k], &s[k].k, &bad);
    if (bad)
      return NULL;
    if (exact)
      s[k].v = NULL;
  }
  if (!broadcasts(x, y)) {
    char b1[128], b2[128];
    diag_error(c->d, e->loc, "shape mismatch in '%s': %s and %s do not broadcast", name[e->op],
               type_str(&x->type, b1, sizeof b1), type_str(&y->type, b2, sizeof b2));
    return NULL;
  }
  if (!exact) {
    x = as_f32(c, e->loc, x);
    y = x ? as_f32(c, e->loc, y) : NULL;
    return x && y ? lower_binary(c, e, x, y) : NULL;
  }
  bool swap = e->op == '<' || e->op == B_LE;
  return int_op(c, e->loc, fn[e->op], s[swap], s[!swap]);
}

/* -x of an i32 value: 0 - x, wrapping as torch's. */
Inst *lower_int_neg(Ctx *c, Loc at, Inst *x) {
  return int_op(c, at, DT_INT_SUB, (Side){NULL, 0}, (Side){x, 0});
}

Inst *lower_int_relu(Ctx *c, Loc at, Inst *x) {
  return int_op(c, at, DT_INT_MAX, (Side){x, 0}, (Side){NULL, 0});
}

Inst *lower_int_abs(Ctx *c, Loc at, Inst *x) {
  Inst *n = lower_int_neg(c, at, x);
  return n ? int_op(c, at, DT_INT_MAX, (Side){x, 0}, (Side){n, 0}) : NULL;
}

Inst *lower_int_clamp(Ctx *c, const Expr *e, Inst *x, Expr *const *arg, Inst *const *bound,
                      bool *promote) {
  static const char *const what[] = {"'min'", "'max'"};
  Side s[2] = {{NULL, 0}, {NULL, 0}};
  *promote = false;
  for (int j = 0; j < 2; j++) {   /* an f32 tensor or a number not an integer: f32 */
    Num v;
    if (bound[j] && !broadcasts(x, bound[j])) {
      char b1[128], b2[128];
      diag_error(c->d, arg[j]->loc, "%s %s of 'clamp' does not broadcast with input %s", what[j],
                 type_str(&bound[j]->type, b1, sizeof b1), type_str(&x->type, b2, sizeof b2));
      return NULL;
    }
    if (bound[j]) {
      *promote |= bound[j]->type.dtype != DT_I32;
    } else if (arg[j] && !is_number(c, arg[j])) {
      *promote = true;   /* a string or a list: the f32 lowering reports it */
    } else if (arg[j]) {
      if (!fe_eval(arg[j], c->m->dim.a, c->m->dim.n, &v, c->d))
        return NULL;
      *promote |= !v.is_int;
    }
  }
  if (*promote)
    return NULL;
  for (int j = 0; j < 2; j++) {
    bool bad = false;
    if (bound[j])
      s[j].v = bound[j];
    else if (arg[j] && !int_const(c, arg[j], &s[j].k, &bad))
      return NULL;
  }
  for (int j = 0; j < 2 && x; j++)
    if (arg[j])
      x = int_op(c, e->loc, j ? DT_INT_MIN : DT_INT_MAX, (Side){x, 0}, s[j]);
  return x;
}

Inst *lower_int_hardtanh(Ctx *c, Loc at, Inst *x, int64_t lo, int64_t hi) {
  x = int_op(c, at, DT_INT_MAX, (Side){x, 0}, (Side){NULL, lo});
  return x ? int_op(c, at, DT_INT_MIN, (Side){x, 0}, (Side){NULL, hi}) : NULL;
}

Inst *lower_int_extremum(Ctx *c, Loc at, bool max, Inst *a, Inst *b) {
  return int_op(c, at, max ? DT_INT_MAX : DT_INT_MIN, (Side){a, 0}, (Side){b, 0});
}

Inst *lower_int_pow(Ctx *c, const Expr *e, Inst *x, const Expr *exponent, bool *promote) {
  Num v;
  *promote = !is_number(c, exponent);
  if (*promote || !fe_eval(exponent, c->m->dim.a, c->m->dim.n, &v, c->d))
    return NULL;
  *promote = !v.is_int;
  if (*promote)
    return NULL;
  if (v.i < 0) {
    diag_error(c->d, exponent->loc, "'pow' of i32 values to the negative power %lld: torch "
               "refuses integers to negative integer powers; make the input f32 first (x * 1.0)",
               (long long)v.i);
    return NULL;
  }
  if (v.i > INT32_MAX) {
    diag_error(c->d, exponent->loc, "exponent %lld of 'pow' does not fit in i32, the type of the "
               "input", (long long)v.i);
    return NULL;
  }
  return int_op(c, e->loc, DT_INT_POW, (Side){x, 0}, (Side){NULL, v.i});
}

Inst *lower_int_pow_tensor(Ctx *c, const Expr *e, Inst *x, const Expr *base, Inst *y,
                          bool *promote) {
  Side s = {x, 0};
  bool bad = false;
  *promote = false;
  if (!x && !int_const(c, base, &s.k, &bad)) {
    *promote = !bad;
    return NULL;
  }
  return int_op(c, e->loc, DT_INT_POW, s, (Side){y, 0});
}

/* floor_divide(input, other) and remainder(input, other) as torch's on
 * integer tensors: Python's // (rounding down) and % (the sign of other);
 * other an i32 tensor or an integer. A zero divisor is the step's error, as
 * torch's ZeroDivisionError; f32 operands are not supported yet. */
Inst *lower_int_fn(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  char buf[128];
  DtIntFn fn = !strcmp(b->name, "floor_divide") ? DT_INT_FLOORDIV : DT_INT_REM;
  if (in[0]->type.dtype != DT_I32) {
    diag_error(c->d, arg[0]->loc, "'%s' takes an i32 input here, not %s", b->name,
               type_str(&in[0]->type, buf, sizeof buf));
    return NULL;
  }
  Side o = {NULL, 0};
  if (!is_number(c, arg[1])) {
    o.v = lower_expr(c, arg[1]);
    if (!o.v)
      return NULL;
    if (o.v->type.dtype != DT_I32) {
      diag_error(c->d, arg[1]->loc, "'other' of '%s' must be i32 or an integer, not %s", b->name,
                 type_str(&o.v->type, buf, sizeof buf));
      return NULL;
    }
    if (!broadcasts(in[0], o.v)) {
      char b2[128];
      diag_error(c->d, e->loc, "shape mismatch in '%s': %s and %s do not broadcast", b->name,
                 type_str(&in[0]->type, buf, sizeof buf), type_str(&o.v->type, b2, sizeof b2));
      return NULL;
    }
  } else {
    if (!int_arg(c, arg[1], "'other'", &o.k))
      return NULL;
    if (o.k == 0) {
      diag_error(c->d, arg[1]->loc, "'%s' by zero", b->name);
      return NULL;
    }
    if (o.k < INT32_MIN || o.k > INT32_MAX) {
      diag_error(c->d, arg[1]->loc, "%lld does not fit in i32", (long long)o.k);
      return NULL;
    }
  }
  return int_op(c, e->loc, fn, (Side){in[0], 0}, o);
}

/* ---- indices ---- */

static bool need_i32(Ctx *c, const Expr *e, const Inst *x, const char *fn, const char *what) {
  if (x->type.dtype == DT_I32)
    return true;
  char buf[128];
  diag_error(c->d, e->loc, "'%s' of '%s' must be i32, not %s", what, fn,
             type_str(&x->type, buf, sizeof buf));
  return false;
}

/* gather(input, dim, index) as torch.gather: out[i][j][k] = input[index[i]
 * [j][k]][j][k] for dim 0, and so on; index i32 of input's rank, no longer
 * than input in the other dims; out has index's shape. An index outside
 * [0, input.size(dim)) is the step's error. The derivative adds into input
 * at the places read. */
Inst *lower_gather(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0], *ix = lower_expr(c, arg[2]);
  int64_t ax;
  if (!ix || !need_i32(c, arg[2], ix, "gather", "index") || !axis_arg(c, arg[1], x, &ax))
    return NULL;
  char b1[128], b2[128];
  bool fits = ix->type.rank == x->type.rank;
  for (int d = 0; fits && d < x->type.rank; d++)
    fits = d == ax || ix->type.dim[d] <= x->type.dim[d];
  if (!fits) {
    diag_error(c->d, arg[2]->loc,
               "'index' %s of 'gather' must have the rank of input %s and no "
               "dimension longer than input's but 'dim' (%lld)",
               type_str(&ix->type, b1, sizeof b1), type_str(&x->type, b2, sizeof b2),
               (long long)ax);
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_gather, e->loc, 2, (Inst *[]){x, ix});
  ir_set_int(i, "axis", ax);
  return finish(c, i);
}

/* one_hot(tensor, num_classes) as torch.nn.functional.one_hot, with
 * num_classes required (torch's -1, the largest class plus one, is known
 * only when the step runs). The result is f32[..., num_classes] (torch:
 * int64), ready to multiply; a class outside [0, num_classes) is the
 * step's error. */
Inst *lower_one_hot(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  int64_t n;
  if (!need_i32(c, arg[0], in[0], "one_hot", "tensor"))
    return NULL;
  if (!arg[1]) {
    diag_error(c->d, e->loc,
               "'one_hot' needs 'num_classes': dtc knows every shape before the "
               "step runs, so the classes cannot be counted from the data");
    return NULL;
  }
  if (!int_arg(c, arg[1], "'num_classes'", &n))
    return NULL;
  if (n < 1 || n > IR_MAX_DIM) {
    diag_error(c->d, arg[1]->loc, "'num_classes' must be from 1 to %lld, not %lld",
               (long long)IR_MAX_DIM, (long long)n);
    return NULL;
  }
  if (in[0]->type.rank >= IR_MAX_RANK) {
    diag_error(c->d, arg[0]->loc, "'one_hot' of rank %d would pass %d dimensions", in[0]->type.rank,
               IR_MAX_RANK);
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_one_hot, e->loc, 1, in);
  ir_set_int(i, "classes", n);
  return finish(c, i);
}

/* arange(end), arange(start, end, step = 1) as torch.arange: start, start
 * + step, ... while before end. Integers give i32 (torch: int64), any
 * other number f32; a constant, as the numbers are. */
Inst *lower_arange(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b, (void)in;
  const Expr *se = arg[1] ? arg[0] : NULL, *ee = arg[1] ? arg[1] : arg[0];
  if (arg[2] && !arg[1])
    ee = NULL;
  Num v[3] = {{true, 0, 0}, {true, 0, 0}, {true, 1, 1}};
  const Expr *ex[3] = {se, ee, arg[2]};
  static const char *const what[] = {"'start'", "'end'", "'step'"};
  if (!ee) {
    diag_error(c->d, e->loc, "'arange' needs 'end'");
    return NULL;
  }
  for (int k = 0; k < 3; k++) {
    if (!ex[k])
      continue;
    double f;
    if (!float_arg(c, ex[k], what[k], &f) || !fe_eval(ex[k], c->m->dim.a, c->m->dim.n, &v[k], c->d))
      return NULL;
  }
  bool ints = v[0].is_int && v[1].is_int && v[2].is_int;
  double start = v[0].f, end = v[1].f, step = v[2].f;
  if (step == 0) {
    diag_error(c->d, arg[2]->loc, "'step' of 'arange' must not be zero");
    return NULL;
  }
  double n = ceil((end - start) / step);
  if (!(n >= 1)) {
    diag_error(c->d, e->loc,
               "'arange' from %.15g to %.15g by %.15g is empty; a tensor needs at least one "
               "element",
               start, end, step);
    return NULL;
  }
  if (n > (double)IR_MAX_DIM ||
      (ints && (fabs(start) > INT32_MAX || fabs(start + (n - 1) * step) > INT32_MAX))) {
    diag_error(c->d, e->loc,
               ints ? "'arange' from %.15g to %.15g by %.15g does not fit in i32"
                    : "'arange' from %.15g to %.15g by %.15g has too many elements",
               start, end, step);
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_arange, e->loc, 0, NULL);
  ir_set_int(i, "size", (int64_t)n);
  ir_set_float(i, "start", start);
  ir_set_float(i, "step", step);
  if (ints)
    ir_set_int(i, "i32", 1);
  return finish(c, i);
}

/* cumsum(input, dim) as torch.cumsum: element k along dim the sum of
 * elements 0..k, added in order; i32 stays i32 (torch: int64). The
 * derivative is the sum from the end. */
Inst *lower_cumsum(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  int64_t ax;
  if (!axis_arg(c, arg[1], in[0], &ax))
    return NULL;
  Inst *i = ir_new(c->f, OP_cumsum, e->loc, 1, in);
  ir_set_int(i, "axis", ax);
  return finish(c, i);
}

/* tril(input, diagonal = 0) and triu(input, diagonal = 0) as torch's: the
 * last two dims' elements (i, j) with j <= i + diagonal (j >= i + diagonal)
 * kept, the others 0. The derivative keeps the same ones. */
Inst *lower_tri(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  int64_t d = 0;
  if (in[0]->type.rank < 2) {
    char buf[128];
    diag_error(c->d, arg[0]->loc, "'%s' needs a tensor of rank 2 or more, not %s", b->name,
               type_str(&in[0]->type, buf, sizeof buf));
    return NULL;
  }
  if (arg[1] && !int_arg(c, arg[1], "'diagonal'", &d))
    return NULL;
  Inst *i = ir_new(c->f, b->op, e->loc, 1, in);
  if (d)
    ir_set_int(i, "diagonal", d < -IR_MAX_DIM ? -IR_MAX_DIM : d > IR_MAX_DIM ? IR_MAX_DIM : d);
  return finish(c, i);
}
