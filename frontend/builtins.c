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
  return fe_eval_int(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
}

bool float_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  return fe_eval_float(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
}

/* A number that may be -inf or inf, but not NaN. */
bool real_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  return fe_eval_real(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
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

typedef enum {
  B_ELEM,       /* elementwise on tensors, no attributes */
  B_SOFTMAX,    /* axis */
  B_REDUCE,     /* axis or axes, keepdim */
  B_MATMUL,     /* ta, tb */
  B_RESHAPE,
  B_TRANSPOSE,
  B_SLICE,
  B_CONCAT,
  B_LAYER_NORM,
  B_DROPOUT,
  B_GELU,       /* gelu, or with approximate = "tanh" gelu_tanh */
  B_CROSS_ENTROPY, /* with ignore_index or label_smoothing: sum / count */
  B_BCE,        /* with pos_weight: the op plus the positives' extra weight */
  /* convolutional networks (lower_conv2d ...) */
  B_CONV2D,     /* conv2d(input, weight, bias, stride, padding, dilation, groups) */
  B_POOL2D,     /* max_pool2d, avg_pool2d: kernel_size, stride, padding, then their own */
  B_FLATTEN,    /* start_dim, end_dim */
  B_PAD,        /* pad (as F.pad), mode, value */
  B_BATCH_NORM, /* running stats, weight, bias, momentum, eps */
  B_EMBEDDING_BAG, /* offsets, mode, per_sample_weights, padding_idx */
  B_SDPA,       /* scaled_dot_product_attention: is_causal, scale */
} BuiltinKind;

struct Builtin {
  const char *name;
  BuiltinKind kind;
  int ntensor;           /* leading parameters that are tensors */
  int nreq;              /* leading parameters that are required */
  int nparam;
  const char *param[7];
};

static const Builtin builtins[] = {
  {"relu", B_ELEM, 1, 1, 1, {"x"}},
  {"gelu", B_GELU, 1, 1, 2, {"x", "approximate"}},
  {"tanh", B_ELEM, 1, 1, 1, {"x"}},
  {"sigmoid", B_ELEM, 1, 1, 1, {"x"}},
  {"exp", B_ELEM, 1, 1, 1, {"x"}},
  {"log", B_ELEM, 1, 1, 1, {"x"}},
  {"sqrt", B_ELEM, 1, 1, 1, {"x"}},
  {"causal_mask", B_ELEM, 1, 1, 1, {"x"}},
  {"cross_entropy", B_CROSS_ENTROPY, 2, 2, 4,
   {"logits", "labels", "ignore_index", "label_smoothing"}},
  {"bce_with_logits", B_BCE, 3, 2, 3, {"logits", "target", "pos_weight"}},
  {"mse", B_ELEM, 2, 2, 2, {"pred", "target"}},
  {"embedding", B_ELEM, 2, 2, 2, {"table", "ids"}},
  {"embedding_bag", B_EMBEDDING_BAG, 3, 2, 6,
   {"input", "weight", "offsets", "mode", "per_sample_weights", "padding_idx"}},
  {"softmax", B_SOFTMAX, 1, 1, 2, {"x", "axis"}},
  {"log_softmax", B_SOFTMAX, 1, 1, 2, {"x", "axis"}},
  {"sum", B_REDUCE, 1, 1, 4, {"x", "axis", "axes", "keepdim"}},
  {"mean", B_REDUCE, 1, 1, 4, {"x", "axis", "axes", "keepdim"}},
  {"max", B_REDUCE, 1, 1, 4, {"x", "axis", "axes", "keepdim"}},
  {"matmul", B_MATMUL, 2, 2, 4, {"a", "b", "ta", "tb"}},
  {"reshape", B_RESHAPE, 1, 2, 2, {"x", "shape"}},
  {"transpose", B_TRANSPOSE, 1, 1, 2, {"x", "perm"}},
  {"slice", B_SLICE, 1, 1, 4, {"x", "axis", "begin", "end"}},
  {"concat", B_CONCAT, 0, 0, 1, {"axis"}},
  {"layer_norm", B_LAYER_NORM, 3, 1, 4, {"x", "gamma", "beta", "eps"}},
  {"dropout", B_DROPOUT, 1, 1, 3, {"x", "p", "seed"}},
  /* convolutional networks, named as torch.nn.functional's */
  {"conv2d", B_CONV2D, 3, 2, 7, {"input", "weight", "bias", "stride", "padding", "dilation", "groups"}},
  {"max_pool2d", B_POOL2D, 1, 2, 6,
   {"input", "kernel_size", "stride", "padding", "dilation", "ceil_mode"}},
  {"avg_pool2d", B_POOL2D, 1, 2, 7,
   {"input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
    "divisor_override"}},
  {"flatten", B_FLATTEN, 1, 1, 3, {"input", "start_dim", "end_dim"}},
  {"pad", B_PAD, 1, 2, 4, {"input", "pad", "mode", "value"}},
  {"batch_norm", B_BATCH_NORM, 5, 3, 7,
   {"input", "running_mean", "running_var", "weight", "bias", "momentum", "eps"}},
  {"scaled_dot_product_attention", B_SDPA, 3, 3, 7,
   {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"}},
};

const Builtin *find_builtin(const char *name) {
  for (int k = 0; k < COUNTOF(builtins); k++)
    if (!strcmp(builtins[k].name, name))
      return &builtins[k];
  return NULL;
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
  if (b->kind == B_CONCAT)
    return lower_concat(c, e);
  Expr *arg[COUNTOF(b->param)];
  if (!fe_bind(e, b->param, b->nparam, b->nparam, b->nreq, arg, c->a, c->d))
    return NULL;
  Inst *in[5] = {0};
  bool ok = true;
  for (int k = 0; k < b->ntensor; k++)
    if (arg[k]) {
      in[k] = lower_expr(c, arg[k]);
      ok &= in[k] != NULL;
    }
  if (!ok)
    return NULL;
  Op op = b->kind == B_LAYER_NORM   ? OP_normalize
          : b->kind == B_FLATTEN    ? OP_reshape
          : b->kind == B_BATCH_NORM ? OP_batch_stat
          : b->kind == B_SDPA       ? OP_sdpa
                                    : ir_op_lookup(b->name);
  DTC_ASSERT(op != OP_COUNT);
  Inst *x = in[0], *i;
  int64_t axis, seed;
  bool ta = false, tb = false;
  double v;
  switch (b->kind) {
  case B_ELEM:
    return finish(c, ir_new(c->f, op, e->loc, b->ntensor, in));
  case B_CROSS_ENTROPY:
    return lower_cross_entropy(c, e, in, arg);
  case B_BCE:
    return lower_bce(c, e, in, arg);
  case B_GELU:
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
  case B_SOFTMAX:
    axis = x->type.rank - 1;
    if (arg[1] && !axis_arg(c, arg[1], x, &axis))
      return NULL;
    i = ir_new(c->f, op, e->loc, 1, &x);
    ir_set_int(i, "axis", axis);
    return finish(c, i);
  case B_REDUCE:
    return lower_reduce(c, e, op, x, arg);
  case B_MATMUL:
    if ((arg[2] && !bool_arg(c, arg[2], "ta", &ta)) || (arg[3] && !bool_arg(c, arg[3], "tb", &tb)))
      return NULL;
    i = ir_new(c->f, op, e->loc, 2, in);
    if (ta)
      ir_set_int(i, "ta", 1);
    if (tb)
      ir_set_int(i, "tb", 1);
    return finish(c, i);
  case B_RESHAPE:
    return lower_reshape(c, e, x, arg[1]);
  case B_TRANSPOSE:
    return lower_transpose(c, e, x, arg[1]);
  case B_SLICE:
    return lower_slice(c, e, x, arg);
  case B_LAYER_NORM:
    v = 1e-5;
    if (arg[3] && !real_in(c, arg[3], "eps", &ir_positive, &v))
      return NULL;
    i = ir_new(c->f, op, e->loc, 1, &x);
    ir_set_float(i, "eps", v);
    if ((i = finish(c, i)) && in[1])
      i = op2(c, OP_mul, e->loc, i, in[1]);
    if (i && in[2])
      i = op2(c, OP_add, e->loc, i, in[2]);
    return i;
  case B_DROPOUT:
    v = 0.1;
    seed = (int64_t)e->loc.line << 16 | (e->loc.col & 0xffff);
    if (c->path[0])   /* each application of a block draws its own masks */
      seed ^= (int64_t)(ir_hash(c->path, strlen(c->path)) & 0xffffffff00000000u);
    if (arg[1] && !real_in(c, arg[1], "p", &ir_unit_open, &v))
      return NULL;
    if (arg[2] && !int_arg(c, arg[2], "'seed'", &seed))
      return NULL;
    i = ir_new(c->f, op, e->loc, 1, &x);
    ir_set_float(i, "p", v);
    ir_set_int(i, "seed", seed);
    return finish(c, i);
  case B_CONCAT:
    break;
  case B_CONV2D:
    return lower_conv2d(c, e, in, arg);
  case B_POOL2D:
    return lower_pool2d(c, e, op, x, arg);
  case B_FLATTEN:
    return lower_flatten(c, e, x, arg);
  case B_PAD:
    return lower_pad(c, e, x, arg);
  case B_BATCH_NORM:
    return lower_batch_norm(c, e, in, arg);
  case B_EMBEDDING_BAG:
    return lower_embedding_bag(c, e, in, arg);
  case B_SDPA:
    return lower_sdpa(c, e, in, arg);
  }
  DTC_UNREACHABLE();
}
