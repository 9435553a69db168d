/* lower_math.c: the lowering of the elementwise built-in functions: those
 * that are one op with nothing to check (`elem`), and those with options. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* An op of the tensors b names, nothing else to check (shapes are the op's). */
Inst *lower_elem(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)arg;
  return finish(c, ir_new(c->f, b->op, e->loc, b->ntensor, in));
}

/* relu(x): of i32 values i32, as torch's. */
Inst *lower_relu(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  if (in[0]->type.dtype == DT_I32)
    return lower_int_relu(c, e->loc, in[0]);
  return lower_elem(c, e, b, in, arg);
}

/* gelu(x, approximate = "none"): with "tanh" the op gelu_tanh. */
Inst *lower_gelu(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Op op = b->op;
  if (arg[1]) {
    const Expr *ap = arg[1];
    const char *s = ap->kind == E_STR || ap->kind == E_IDENT ? ap->s : NULL;
    if (!s || (strcmp(s, "none") && strcmp(s, "tanh"))) {
      if (ap->kind != E_ERROR)
        diag_error(c->d, ap->loc, "'approximate' must be \"none\" or \"tanh\"");
      return NULL;
    }
    op = !strcmp(s, "tanh") ? OP_gelu_tanh : OP_gelu;
  }
  return finish(c, ir_new(c->f, op, e->loc, 1, in));
}

/* silu(input): x sigmoid(x), as torch.nn.functional's. */
Inst *lower_silu(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b, (void)arg;
  Inst *s = op1(c, OP_sigmoid, e->loc, in[0]);
  return s ? op2(c, OP_mul, e->loc, in[0], s) : NULL;
}

/* abs(input): relu(x) + relu(-x), exact (one term is 0); its derivative the
 * sign of x, 0 at 0 as torch's. Of i32 values i32, as torch's. */
Inst *lower_abs(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b, (void)arg;
  if (in[0]->type.dtype == DT_I32)
    return lower_int_abs(c, e->loc, in[0]);
  Inst *n = op1(c, OP_neg, e->loc, in[0]);
  Inst *p = op1(c, OP_relu, e->loc, in[0]), *q = n ? op1(c, OP_relu, e->loc, n) : NULL;
  return p && q ? op2(c, OP_add, e->loc, p, q) : NULL;
}

/* leaky_relu(input, negative_slope = 0.01): relu(x) - s relu(-x), exactly x
 * s below 0 (a product negated twice); the derivative at 0 is 0 (torch's is
 * s). */
Inst *lower_leaky_relu(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  double s = 0.01;
  if (arg[1] && !float_arg(c, arg[1], "'negative_slope'", &s))
    return NULL;
  Inst *n = op1(c, OP_neg, e->loc, in[0]);
  Inst *p = op1(c, OP_relu, e->loc, in[0]), *q = n ? op1(c, OP_relu, e->loc, n) : NULL;
  Inst *k = constant(c, s, arg[1] ? arg[1]->loc : e->loc);
  Inst *sq = q && k ? op2(c, OP_mul, e->loc, q, k) : NULL;
  return p && sq ? op2(c, OP_sub, e->loc, p, sq) : NULL;
}

/* expand(input, size) as torch's Tensor.expand: size lists the result's
 * dims, -1 keeping the input's (aligned at the end); dims of 1 and new
 * leading dims are repeated (the op broadcast; the gradient sums them). */
Inst *lower_expand(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  int64_t dim[IR_MAX_RANK];
  int n, r = x->type.rank;
  char buf[128];
  if (!ints_arg(c, arg[1], "size", dim, &n))
    return NULL;
  if (n < r) {
    diag_error(c->d, arg[1]->loc, "'size' must list at least the %d dims of the input %s, "
               "not %d", r, type_str(&x->type, buf, sizeof buf), n);
    return NULL;
  }
  for (int k = 0; k < n; k++) {
    Loc at = arg[1]->args.a[k].loc;
    int j = k - (n - r);   /* the input's dim under k, if any */
    if (dim[k] == -1 && j >= 0) {
      dim[k] = x->type.dim[j];
    } else if (dim[k] == -1) {
      diag_error(c->d, at, "-1 keeps a dim of the input; a new leading dim needs its size");
      return NULL;
    } else if (!dim_ok(c, dim[k], at)) {
      return NULL;
    } else if (j >= 0 && x->type.dim[j] != 1 && x->type.dim[j] != dim[k]) {
      diag_error(c->d, at, "dim %d of %s is %lld: it expands only from 1, not to %lld", j,
                 type_str(&x->type, buf, sizeof buf), (long long)x->type.dim[j],
                 (long long)dim[k]);
      return NULL;
    }
  }
  Inst *i = ir_new(c->f, OP_broadcast, e->loc, 1, &x);
  ir_set_ints(i, "shape", dim, n);
  return finish(c, i);
}

/* pow(x, p) of an f32 x and a number p: for the exponents torch's kernel
 * computes without std::pow, the same way: 2 x x, 3 x x x, 0.5 sqrt, -0.5
 * 1 / sqrt, -1 1 / x, -2 1 / (x x), 1 x; other exponents the op pow. */
static Inst *pow_number(Ctx *c, const Expr *e, Inst *x, const Expr *exponent) {
  static const double ok[] = {2, 3, 0.5, -0.5, -1, -2, 1};
  double p;
  if (!real_arg(c, exponent, "'exponent'", &p))
    return NULL;
  int k = 0;
  while (k < COUNTOF(ok) && ok[k] != p)
    k++;
  Loc at = e->loc;
  if (k == COUNTOF(ok))
    return op2(c, OP_pow, at, x, constant(c, p, exponent->loc));
  Inst *v = x;
  if (p == 2 || p == 3 || p == -2)
    v = op2(c, OP_mul, at, x, x);
  if (v && p == 3)
    v = op2(c, OP_mul, at, v, x);
  if (p == 0.5 || p == -0.5)
    v = op1(c, OP_sqrt, at, x);
  if (v && p < 0)
    v = op2(c, OP_div, at, constant(c, 1, at), v);
  return v;
}

/* pow(input, exponent) as torch.pow: a tensor to a number (pow_number), a
 * number to a tensor, or a tensor to a tensor, broadcasting (the op pow,
 * powf's values). Of i32 values: an i32 tensor or an integer to an i32
 * power i32 (int_elem pow), to a negative integer number an error, as
 * torch's; with an f32 operand or another number f32, the i32 ones made
 * f32, as torch promotes. */
Inst *lower_pow(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b, (void)in;
  bool number[2] = {is_number(c, arg[0]), is_number(c, arg[1])};
  Inst *v[2] = {NULL, NULL};
  if (number[0] && number[1]) {
    diag_error(c->d, e->loc, "'pow' needs a tensor as its input or its exponent (torch.pow "
               "takes no two numbers)");
    return NULL;
  }
  for (int k = 0; k < 2; k++)
    if (!number[k] && !(v[k] = lower_expr(c, arg[k])))
      return NULL;
  Inst *x = v[0], *y = v[1];
  bool promote = true;
  if (number[1] && x->type.dtype == DT_I32) {
    Inst *r = lower_int_pow(c, e, x, arg[1], &promote);
    if (!promote)
      return r;
  } else if (x && y && !broadcasts(x, y)) {
    char b1[128], b2[128];
    diag_error(c->d, e->loc, "shape mismatch in 'pow': %s and %s do not broadcast",
               type_str(&x->type, b1, sizeof b1), type_str(&y->type, b2, sizeof b2));
    return NULL;
  } else if (y && y->type.dtype == DT_I32 && (!x || x->type.dtype == DT_I32)) {
    Inst *r = lower_int_pow_tensor(c, e, x, arg[0], y, &promote);
    if (!promote)
      return r;
  }
  for (int k = 0; k < 2; k++)
    if (v[k] && v[k]->type.dtype == DT_I32 && !(v[k] = op1(c, OP_to_f32, arg[k]->loc, v[k])))
      return NULL;
  if (number[1])
    return pow_number(c, e, v[0], arg[1]);
  if (number[0]) {
    double base;
    if (!real_arg(c, arg[0], "'input'", &base))
      return NULL;
    v[0] = constant(c, base, arg[0]->loc);
  }
  return v[0] ? op2(c, OP_pow, e->loc, v[0], v[1]) : NULL;
}

/* maximum(input, other) and minimum(input, other) as torch's: elementwise,
 * broadcasting, two tensors (torch takes no number: clamp does); of two i32
 * values i32, of i32 and f32 values f32, as torch promotes. */
Inst *lower_extremum(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  bool max = b->op == OP_maximum;
  for (int k = 0; k < 2; k++)
    if (is_number(c, arg[k])) {
      diag_error(c->d, arg[k]->loc, "'%s' takes two tensors, as torch.%s; with a number "
                 "write clamp(input, %s = ...)", b->name, b->name, max ? "min" : "max");
      return NULL;
    }
  if (!broadcasts(in[0], in[1])) {
    char b1[128], b2[128];
    diag_error(c->d, e->loc, "shape mismatch in '%s': %s and %s do not broadcast", b->name,
               type_str(&in[0]->type, b1, sizeof b1), type_str(&in[1]->type, b2, sizeof b2));
    return NULL;
  }
  if (in[0]->type.dtype == DT_I32 && in[1]->type.dtype == DT_I32)
    return lower_int_extremum(c, e->loc, max, in[0], in[1]);
  for (int k = 0; k < 2; k++)
    if (in[k]->type.dtype == DT_I32 && !(in[k] = op1(c, OP_to_f32, arg[k]->loc, in[k])))
      return NULL;
  return op2(c, b->op, e->loc, in[0], in[1]);
}

/* where(condition, input, other) as torch.where: input where the condition
 * (a mask, as a comparison gives: f32, not 0 is true) holds, other
 * elsewhere, the three broadcast together; input and other may be numbers,
 * -inf and inf included. where_true(c, x) + where_false(c, y), exact; of
 * i32 values int_where, or both made f32 (lower_int_where). */
Inst *lower_where(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *cond = in[0];
  if (cond->type.dtype != DT_F32) {
    char buf[128];
    diag_error(c->d, arg[0]->loc, "'condition' must be a mask (f32, as a comparison gives), not %s",
               type_str(&cond->type, buf, sizeof buf));
    return NULL;
  }
  Inst *x = tensor_or_number(c, arg[1], "'input'");
  Inst *y = tensor_or_number(c, arg[2], "'other'");
  if (!x || !y)
    return NULL;
  if (!broadcasts(cond, x) || !broadcasts(cond, y) || !broadcasts(x, y)) {
    char b1[128], b2[128], b3[128];
    diag_error(c->d, e->loc, "shape mismatch in 'where': condition %s, input %s and other %s "
               "do not broadcast", type_str(&cond->type, b1, sizeof b1),
               type_str(&x->type, b2, sizeof b2), type_str(&y->type, b3, sizeof b3));
    return NULL;
  }
  if (x->type.dtype == DT_I32 || y->type.dtype == DT_I32)
    return lower_int_where(c, e, cond, x, y, arg + 1);
  return lower_select(c, e->loc, cond, x, y);
}

/* where(m, a, b) of a mask m: where_true(m, a) + where_false(m, b). */
Inst *lower_select(Ctx *c, Loc at, Inst *m, Inst *a, Inst *b) {
  Inst *t = m ? op2(c, OP_where_true, at, m, a) : NULL;
  Inst *f = t ? op2(c, OP_where_false, at, m, b) : NULL;
  return f ? op2(c, OP_add, at, t, f) : NULL;
}

/* Whether a bound given is a tensor: not a number, nor what is neither. */
static bool tensor_bound(Ctx *c, const Expr *e) {
  return e && !is_number(c, e) && e->kind != E_STR && e->kind != E_LIST && e->kind != E_QUANT;
}

/* clamp with a tensor bound: where(x < min, min, x), then where(y > max,
 * max, y), each bound a tensor or a number, all broadcasting together. The
 * derivative goes to x inside the bounds, to min below it and to max above
 * it (or everywhere when max < min), as torch's; where min equals max and x
 * is below, torch gives none, this min. */
static Inst *clamp_tensors(Ctx *c, const Expr *e, Inst *x, Expr **arg, Inst **bound) {
  static const char *const what[] = {"'min'", "'max'"};
  for (int k = 1; k <= 2; k++) {
    if (!arg[k])
      continue;
    Inst *v = bound[k - 1] ? bound[k - 1] : tensor_or_number(c, arg[k], what[k - 1]);
    if (!v)
      return NULL;
    if (!broadcasts(x, v)) {
      char b1[128], b2[128];
      diag_error(c->d, arg[k]->loc, "%s %s of 'clamp' does not broadcast with input %s",
                 what[k - 1], type_str(&v->type, b1, sizeof b1), type_str(&x->type, b2, sizeof b2));
      return NULL;
    }
    Inst *m = k == 1 ? op2(c, OP_gt, e->loc, v, x) : op2(c, OP_gt, e->loc, x, v);
    x = lower_select(c, e->loc, m, v, x);
    if (!x)
      return NULL;
  }
  return x;
}

/* hardtanh(x, lo, hi) of i32 values: each bound made an integer toward 0,
 * as torch converts it to the input's type; one outside i32 (inf among
 * them) an error, as torch's overflow. */
static Inst *int_hardtanh(Ctx *c, const Expr *e, Inst *x, Expr **arg, const char *const *what,
                          double lo, double hi) {
  double v[2] = {trunc(lo), trunc(hi)};
  int64_t k[2];
  for (int j = 0; j < 2; j++) {
    if (!(v[j] >= INT32_MIN && v[j] <= INT32_MAX)) {
      diag_error(c->d, arg[j + 1]->loc, "%s %g of 'hardtanh' does not fit in i32, the type of "
                 "the input", what[j], j ? hi : lo);
      return NULL;
    }
    k[j] = (int64_t)v[j];
  }
  return lower_int_hardtanh(c, e->loc, x, k[0], k[1]);
}

/* clamp(input, min, max) as torch.clamp, at least one bound given;
 * hardtanh(input, min_val = -1, max_val = 1) and relu6(input) (hardtanh
 * from 0 to 6) as torch.nn.functional's. One op clamp: min(max(x, min),
 * max), NaN kept; bounds are numbers, -inf and inf included, rounded to
 * f32 as torch's. The derivative is 1 inside, 0 outside; at a bound 1 for
 * clamp, 0 for hardtanh and relu6 (`open`), as torch's. Of i32 values:
 * clamp with integer and i32 bounds i32, with other bounds f32 (an i32
 * tensor bound made f32 too, as of an f32 input); hardtanh
 * and relu6 i32, their bounds made integers toward 0 (torch converts them
 * to the input's type), as torch's. */
Inst *lower_clamp(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  bool clamp = !strcmp(b->name, "clamp"), relu6 = !strcmp(b->name, "relu6");
  double lo = relu6 ? 0 : -1, hi = relu6 ? 6 : 1;
  const char *what[2] = {clamp ? "'min'" : "'min_val'", clamp ? "'max'" : "'max_val'"};
  Inst *bound[2] = {NULL, NULL};   /* clamp's tensor bounds, lowered once */
  if (clamp && !arg[1] && !arg[2]) {
    diag_error(c->d, e->loc, "'clamp' needs 'min' or 'max', or both");
    return NULL;
  }
  for (int j = 0; j < 2; j++)
    if (clamp && tensor_bound(c, arg[j + 1]) && !(bound[j] = lower_expr(c, arg[j + 1])))
      return NULL;
  if (in[0]->type.dtype == DT_I32 && clamp) {
    bool promote;
    Inst *v = lower_int_clamp(c, e, in[0], arg + 1, bound, &promote);
    if (!promote)
      return v;
  }
  for (int j = 0; j < 2; j++)   /* an i32 bound beside f32 values or bound, made f32 */
    if (bound[j] && bound[j]->type.dtype == DT_I32 && broadcasts(in[0], bound[j]) &&
        !(bound[j] = op1(c, OP_to_f32, arg[j + 1]->loc, bound[j])))
      return NULL;
  if (clamp && in[0]->type.dtype == DT_I32 && !(in[0] = op1(c, OP_to_f32, arg[0]->loc, in[0])))
    return NULL;
  if (bound[0] || bound[1])
    return clamp_tensors(c, e, in[0], arg, bound);
  if (!relu6 && ((arg[1] && !real_arg(c, arg[1], what[0], &lo)) ||
                 (arg[2] && !real_arg(c, arg[2], what[1], &hi))))
    return NULL;
  if (in[0]->type.dtype == DT_I32)
    return int_hardtanh(c, e, in[0], arg, what, lo, hi);
  Inst *i = ir_new(c->f, OP_clamp, e->loc, 1, in);
  if (!clamp || arg[1])
    ir_set_float(i, "min", lo);
  if (!clamp || arg[2])
    ir_set_float(i, "max", hi);
  if (!clamp)
    ir_set_int(i, "open", 1);
  return finish(c, i);
}
