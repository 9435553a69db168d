/* builtins.c: the built-in functions a model calls: the table of their names
 * and parameters, the checks of their arguments, and the call that binds the
 * arguments and dispatches to the lowering. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- arguments of built-in functions ---- */

/* The first name in e that is a tensor, not a dimension. */
const Expr *tensor_in(Ctx *c, const Expr *e) {
  const Expr *t = NULL;
  if (e->kind == E_IDENT) {
    Name *n = lookup(c, e->s);
    return n && n->kind != N_DIM && n->kind != N_INST ? e : NULL;
  }
  if (e->kind == E_NEG || e->kind == E_BINARY)
    t = tensor_in(c, e->lhs);
  if (!t && e->kind == E_BINARY)
    t = tensor_in(c, e->rhs);
  return t;
}

bool int_arg(Ctx *c, const Expr *e, const char *what, int64_t *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  int nd;
  const Dim *dims = ctx_dims(c, &nd);
  return fe_eval_int(e, dims, nd, what, out, c->d);
}

bool float_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  int nd;
  const Dim *dims = ctx_dims(c, &nd);
  return fe_eval_float(e, dims, nd, what, out, c->d);
}

/* A number that may be -inf or inf, but not NaN. */
bool real_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  int nd;
  const Dim *dims = ctx_dims(c, &nd);
  return fe_eval_real(e, dims, nd, what, out, c->d);
}

/* A finite number in range r (shared with the IR reader, ir/print.c). */
bool real_in(Ctx *c, const Expr *e, const char *what, const IrRange *r, double *out) {
  if (!float_arg(c, e, arena_printf(c->a, "'%s'", what), out))
    return false;
  if (!ir_in_range(r, *out)) {
    diag_error(c->d, e->loc, "'%s' must be %s, not %g", what, r->text, *out);
    return false;
  }
  return true;
}

bool bool_arg(Ctx *c, const Expr *e, const char *what, bool *out) {
  if (e->kind == E_IDENT && (!strcmp(e->s, "true") || !strcmp(e->s, "false"))) {
    *out = e->s[0] == 't';
    return true;
  }
  if (e->kind == E_NUM && e->is_int && (e->i == 0 || e->i == 1)) {
    *out = e->i == 1;
    return true;
  }
  if (e->kind != E_ERROR)
    diag_error(c->d, e->loc, "'%s' must be true or false", what);
  return false;
}

/* Whether e is a number: numbers, dimensions, inf and nan (names that are
 * not otherwise defined), and arithmetic on them. */
bool is_number(Ctx *c, const Expr *e) {
  switch (e->kind) {
  case E_NUM: return true;
  case E_IDENT: {
    Name *n = lookup(c, e->s);
    return n ? n->kind == N_DIM : !strcmp(e->s, "inf") || !strcmp(e->s, "nan");
  }
  case E_NEG: return is_number(c, e->lhs);
  case E_BINARY:
    return e->op != '@' && !ast_compare(e->op) && is_number(c, e->lhs) && is_number(c, e->rhs);
  default: return false;
  }
}

/* A tensor, or a number (inf and -inf included) as a scalar constant. */
Inst *tensor_or_number(Ctx *c, const Expr *e, const char *what) {
  double v;
  if (!is_number(c, e))
    return lower_expr(c, e);
  return real_arg(c, e, what, &v) ? constant(c, v, e->loc) : NULL;
}

/* An axis of x; negative ones count from the end. */
bool axis_arg(Ctx *c, const Expr *e, const Inst *x, int64_t *out) {
  int64_t v, r = x->type.rank;
  if (!int_arg(c, e, "an axis", &v))
    return false;
  if (v < -r || v >= r) {
    char buf[128];
    diag_error(c->d, e->loc, "axis %lld is out of range for %s", (long long)v,
               type_str(&x->type, buf, sizeof buf));
    return false;
  }
  *out = v < 0 ? v + r : v;
  return true;
}

/* A dimension: from 1 to IR_MAX_DIM. */
bool dim_ok(Ctx *c, int64_t v, Loc at) {
  if (v <= 0)
    diag_error(c->d, at, "dimension must be positive, not %lld", (long long)v);
  else if (v > IR_MAX_DIM)
    diag_error(c->d, at, "dimension %lld is larger than the limit %lld", (long long)v,
               (long long)IR_MAX_DIM);
  return v > 0 && v <= IR_MAX_DIM;
}

/* A list of at most IR_MAX_RANK integers, as in [B, 16, 64]. */
bool ints_arg(Ctx *c, const Expr *e, const char *what, int64_t *out, int *n) {
  if (e->kind != E_LIST) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'%s' must be a list, as in [0, 1]", what);
    return false;
  }
  if (e->args.n > IR_MAX_RANK) {
    diag_error(c->d, e->args.a[IR_MAX_RANK].loc, "'%s' has more than %d entries", what, IR_MAX_RANK);
    return false;
  }
  bool ok = true;
  for (int k = 0; k < e->args.n; k++)
    ok &= int_arg(c, e->args.a[k].val, arena_printf(c->a, "an entry of '%s'", what), &out[k]);
  *n = e->args.n;
  return ok;
}

/* ---- built-in functions ---- */

/* Each lowering named in builtins.def, declared from it: one missing is a
 * link error. */
#define BUILTIN(name, op, lower, tensors, nreq, ...) LowerFn lower_##lower;
#include "builtins.def"

static const Builtin builtins[] = {
#define BUILTIN(name, op, lower, tensors, nreq, ...)                                      \
  {#name, op, lower_##lower, tensors, (int)sizeof(tensors) - 1, nreq,                     \
   COUNTOF(((const char *[]){__VA_ARGS__})), {__VA_ARGS__}},
#include "builtins.def"
};

const Builtin *find_builtin(const char *name) {
  for (int k = 0; k < COUNTOF(builtins); k++)
    if (!strcmp(builtins[k].name, name))
      return &builtins[k];
  return NULL;
}

bool f32_arg(Ctx *c, const char *fn, const char *what, const Expr *e, const Inst *x) {
  if (x->type.dtype == DT_F32)
    return true;
  char buf[128];
  diag_error(c->d, e->loc, "'%s' needs an f32 %s, not %s", fn, what,
             type_str(&x->type, buf, sizeof buf));
  return false;
}

/* One of n names: its index into *out. */
bool choice_in(Ctx *c, const Expr *e, const char *what, const char *const *names, int n,
                      int64_t *out) {
  int k = e->kind == E_IDENT ? dtrt_name_index(names, n, e->s) : -1;
  if (k < 0) {
    if (e->kind != E_ERROR) {
      const char *list = "";
      for (int j = 0; j < n; j++)
        list = arena_printf(c->a, "%s%s%s", list, j == 0 ? "" : j == n - 1 ? " or " : ", ",
                            names[j]);
      diag_error(c->d, e->loc, "'%s' must be %s", what, list);
    }
    return false;
  }
  *out = k;
  return true;
}

Inst *lower_call(Ctx *c, const Expr *e) {
  const Builtin *b = find_builtin(e->s);
  if (!b && find_block(c->prog, e->s)) {
    diag_error(c->d, e->loc, "block '%s' is applied only as the whole value of an assignment, "
               "as in 'y = %s(...)'", e->s, e->s);
    return NULL;
  }
  if (e->sized) {
    diag_error(c->d, e->loc, "only a block takes sizes, as in 'y = BLOCK(SIZES)(args)'; '%s' is "
               "%s", e->s, b ? "a built-in function" : "no block");
    return NULL;
  }
  if (!b) {
    const char **cand = arena_alloc(c->a, sizeof(char *) * (size_t)(COUNTOF(builtins) + c->prog->nblk));
    for (int k = 0; k < COUNTOF(builtins); k++)
      cand[k] = builtins[k].name;
    for (int k = 0; k < c->prog->nblk; k++)
      cand[COUNTOF(builtins) + k] = c->prog->blk[k].decl->name;
    diag_error(c->d, e->loc, "unknown function '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, cand, COUNTOF(builtins) + c->prog->nblk));
    return NULL;
  }
  if (b->tensors[0] == '*')
    return b->lower(c, e, b, NULL, NULL);
  const char *param[COUNTOF(b->param)];
  int n = 0, npos = -1;   /* params after a "*" are given by name only */
  for (int k = 0; k < b->nparam; k++)
    if (!strcmp(b->param[k], "*"))
      npos = n;
    else
      param[n++] = b->param[k];
  Expr *arg[COUNTOF(b->param)];
  if (!fe_bind(e, param, n, npos < 0 ? n : npos, b->nreq, arg, c->a, c->d))
    return NULL;
  Inst *in[COUNTOF(b->param)] = {0};
  bool ok = true;
  for (int k = 0; k < b->ntensor; k++) {
    if (!arg[k] || !(in[k] = lower_expr(c, arg[k]))) {
      ok &= !arg[k];
      continue;
    }
    bool input = !strcmp(param[k], "x") || !strcmp(param[k], "input");
    if (b->tensors[k] == 'f')
      ok &= f32_arg(c, b->name, input ? "input" : arena_printf(c->a, "'%s'", param[k]), arg[k],
                    in[k]);
    else if (b->tensors[k] == 'p' && in[k]->type.dtype == DT_I32)
      ok &= (in[k] = op1(c, OP_to_f32, arg[k]->loc, in[k])) != NULL;
  }
  return ok ? b->lower(c, e, b, in, arg) : NULL;
}
