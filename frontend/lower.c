/* lower.c: a model to a module: dimensions, globals and the function @forward,
 * built statement by statement, checking names, arguments and shapes. A block
 * applied once is lowered into its caller's function; repeat(N) lowers it
 * once, into a body function that a `repeat` runs N times. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

typedef enum { N_DIM, N_INPUT, N_PARAM, N_VALUE, N_INST } NameKind;

/* An entry of the namespace of the model or of a block being applied. */
typedef struct Name {
  const char *name;
  NameKind kind;
  Loc loc;
  int stmt;              /* the defining statement's index; -1 for dimensions */
  int global;            /* N_INPUT, N_PARAM: index into Module.global; -1 for a
                            block's param in a body, whose arg is val */
  int64_t dim;           /* N_DIM: its value */
  Inst *val;             /* the value once lowered; inputs and params at first use */
  bool bad;              /* its definition failed: uses stay silent */
  bool output;           /* an output statement names it */
  bool used;             /* read by an expression */
  bool buffer;           /* N_PARAM: declared with 'buffer' (updated by the step, not trained) */
  bool updated;          /* a buffer a batch_norm updates */
  struct Name *next;     /* hash chain */
} Name;

/* A param of a block that a body function reads as an arg: row i of a global
 * stacked along the repeat's count, or of an arg of the enclosing body. */
typedef struct Stacked {
  const char *global;    /* the global's name: the instance path, '.', the param */
  Type type;             /* of the arg: the declared type, within enclosing repeats */
  int init;              /* of the declared type (DtInit) */
  double init_arg;
  int64_t fan_in, fan_out; /* glorot's, of the declared type (Global's) */
  Loc loc;               /* the declaration */
  Inst *arg;
} Stacked;

typedef struct Ctx Ctx;

typedef struct Block {
  const Decl *decl;
  bool bad;              /* a reported error in its statements: applications stay silent */
  int mark;              /* the search for applications of itself: 0 new, 1 on the path, 2 done */
} Block;

/* What every Ctx of one model shares. */
typedef struct Prog {
  Block *blk;
  int nblk;
  Ctx *cur;              /* the context being lowered, for notes after diagnostics */
  VEC(Ctx *) inst;       /* every block application lowered */
  Loc single;            /* the first batch_norm of one value per channel, which cannot train */
  Type single_type;
  Loc remat;             /* the first repeat(N, remat), which does nothing without training */
} Prog;

/* The model, or one application of a block. */
struct Ctx {
  Arena *a;
  Diag *d;
  Module *m;
  Func *f;
  Name **tab;            /* hash table of names, cap a power of two */
  int cap;
  VEC(Name *) names;     /* in definition order */
  Name **def;            /* per statement: the name it defines, NULL if none */
  Name **inst;           /* per statement: the instance it names, NULL if none */
  int cur;               /* the statement being lowered */
  bool minimized;
  Prog *prog;
  const Decl *decl;      /* the model or the block */
  Ctx *up;               /* the caller; NULL for the model */
  const Stmt *app;       /* the application, a statement of up */
  bool inlined;          /* lowered into up's function; else into a body of its own */
  const char *path;      /* the instance ("layers", "outer.inner"): the prefix of its
                            globals; "" for the model */
  const char *vpath;     /* the prefix of value names in f: "" for the model and a
                            body, "first." for an application inlined into them */
  int depth;             /* applications this one is inside of */
  int64_t n;             /* a body: the repeat's count */
  VEC(Stacked) stacked;  /* a body: the params it reads as args, in order */
  Inst *ret;             /* a block: its return value */
};

/* ---- names ---- */

static unsigned hash(const char *s) { return (unsigned)ir_hash(s, strlen(s)); }

static Name *lookup(Ctx *c, const char *s) {
  for (Name *n = c->tab[hash(s) & (unsigned)(c->cap - 1)]; n; n = n->next)
    if (!strcmp(n->name, s))
      return n;
  return NULL;
}

static const char *did_you_mean(Ctx *c, const char *s) {
  const char **cand = arena_alloc(c->a, sizeof(char *) * (size_t)(c->names.n + 1));
  for (int k = 0; k < c->names.n; k++)
    cand[k] = c->names.a[k]->name;
  return fe_did_you_mean(c->a, s, cand, c->names.n);
}

/* Defines a name; NULL after reporting a second definition. */
static Name *define(Ctx *c, const char *s, NameKind kind, Loc at, int stmt) {
  Name *old = lookup(c, s);
  if (old) {
    if (kind == N_INST && old->kind == N_INST)
      diag_error(c->d, at, "instance name '%s' is already taken by the application on line %d; "
                 "name this one with 'as NAME'", s, old->loc.line);
    else if (kind == N_INST)
      diag_error(c->d, at, "instance name '%s' is already defined", s);
    else if (old->kind == N_INST)
      diag_error(c->d, at, "'%s' is already the name of a block instance", s);
    else if (old->kind == N_DIM && c->decl->kind == D_BLOCK)
      diag_error(c->d, at, "'%s' is already defined: a block sees the dimensions of the model", s);
    else
      diag_error(c->d, at, "'%s' is already defined", s);
    if (!diag_full(c->d))
      diag_note(c->d, old->loc, old->kind == N_INST ? "the instance is named here"
                                                    : "the first definition is here");
    return NULL;
  }
  Name *n = arena_alloc(c->a, sizeof *n);
  *n = (Name){.name = s, .kind = kind, .loc = at, .stmt = stmt, .global = -1};
  unsigned h = hash(s) & (unsigned)(c->cap - 1);
  n->next = c->tab[h];
  c->tab[h] = n;
  vec_push(c->a, &c->names, n);
  return n;
}

/* ---- instructions ---- */

static Inst *finish(Ctx *c, Inst *i) {
  char err[256];
  if (ir_infer(i, err, sizeof err))
    return i;
  diag_error(c->d, i->loc, "%s", err);
  return NULL;
}

static Inst *constant(Ctx *c, double v, Loc at) {
  Inst *i = ir_new(c->f, OP_const, at, 0, NULL);
  ir_set_float(i, "value", v);
  return finish(c, i);
}

static Inst *op1(Ctx *c, Op op, Loc at, Inst *x) { return finish(c, ir_new(c->f, op, at, 1, &x)); }

static Inst *op2(Ctx *c, Op op, Loc at, Inst *x, Inst *y) {
  Inst *in[2] = {x, y};
  return finish(c, ir_new(c->f, op, at, 2, in));
}

/* The value of a name used at `at`; inputs and params are loaded at first use. */
static Inst *ref(Ctx *c, const char *s, Loc at) {
  Name *n = lookup(c, s);
  if (!n) {
    diag_error(c->d, at, "unknown name '%s'%s", s, did_you_mean(c, s));
    return NULL;
  }
  if (n->bad)
    return NULL;
  if (n->kind == N_DIM)
    return constant(c, (double)n->dim, at);
  if (n->kind == N_INST) {
    diag_error(c->d, at, "'%s' names a block instance, not a value", s);
    return NULL;
  }
  if (n->stmt == c->cur) {
    diag_error(c->d, at, "'%s' is used in its own definition", s);
    return NULL;
  }
  if (n->stmt > c->cur) {
    diag_error(c->d, at, "'%s' is used before its definition on line %d", s, n->loc.line);
    return NULL;
  }
  n->used = true;
  if (!n->val && n->global >= 0) {
    Global *g = &c->m->global.a[n->global];
    n->val = ir_new(c->f, OP_load, g->loc, 0, NULL);
    n->val->name = g->name;
    ir_set_str(n->val, "global", g->name);
    n->val = finish(c, n->val);
  }
  return n->val;
}

/* ---- instances ---- */

static const char *join(Ctx *c, const char *path, const char *name) {
  return path[0] ? arena_printf(c->a, "%s.%s", path, name) : name;
}

/* The name value `name` of c takes in its function. */
static const char *vname(Ctx *c, const char *name) {
  return c->vpath[0] ? arena_printf(c->a, "%s%s", c->vpath, name) : name;
}

/* The context that owns c's function: the model, or the application that is a
 * repeat's body. */
static Ctx *owner(Ctx *c) {
  while (c->inlined)
    c = c->up;
  return c;
}

/* Diag's context hook: after a diagnostic inside a block, where each
 * enclosing application is, innermost first; of a long chain the innermost
 * and the outermost NOTES_END. */
enum { NOTES_END = 5 };
static void apply_notes(Diag *d, void *arg) {
  const Prog *p = arg;
  int depth = p->cur ? p->cur->depth : 0, k = 0;
  for (const Ctx *c = p->cur; c && c->up; c = c->up, k++) {
    if (k == NOTES_END && depth > 2 * NOTES_END)
      diag_note(d, (Loc){0}, "(%d more applications in between)", depth - 2 * NOTES_END);
    if (k < NOTES_END || k >= depth - NOTES_END)
      diag_note(d, c->inlined ? c->app->val->loc : c->app->repeat_loc,
                "in '%s', the %s of block '%s' here", c->path,
                c->inlined ? "application" : "repeat", c->decl->name);
  }
}

/* A new arg of body o for a param it reads: row i of global `global`, whose
 * name starts with o's path. Numbered when the body is complete. */
static Inst *stacked_arg(Ctx *o, const char *global, Type t, const Global *init, Loc at) {
  Inst *arg = ir_new(o->f, OP_arg, at, 0, NULL);
  arg->name = global + strlen(o->path) + 1;
  arg->type = t;
  ir_set_int(arg, "index", 0);
  vec_push(o->a, &o->stacked,
           ((Stacked){global, t, init->init, init->init_arg, init->fan_in, init->fan_out, at, arg}));
  return finish(o, arg);
}

/* t with a leading dimension n; false after reporting at `at` when that passes
 * a tensor's limits. */
static bool stack_type(Ctx *c, Type *t, int64_t n, const char *global, Loc at) {
  if (t->rank == IR_MAX_RANK || type_elems(t) > IR_MAX_ELEMS / n) {
    char buf[128];
    diag_error(c->d, at, "param '%s', %s stacked %lld times, passes the limits of a tensor "
               "(%d dimensions, 2^40 elements)", global, type_str(t, buf, sizeof buf),
               (long long)n, IR_MAX_RANK);
    return false;
  }
  memmove(t->dim + 1, t->dim, sizeof(int64_t) * (size_t)t->rank);
  t->dim[0] = n;
  t->rank++;
  return true;
}

/* In c, the operand of a repeat for its body's stacked param sp, of type t:
 * a load of a new global in the model, an arg in a body. */
static Inst *stacked_value(Ctx *c, const Stacked *sp, Type t) {
  Ctx *o = owner(c);
  Global init = {.init = sp->init, .init_arg = sp->init_arg, .fan_in = sp->fan_in,
                 .fan_out = sp->fan_out};
  if (o->up)
    return stacked_arg(o, sp->global, t, &init, sp->loc);
  Global *g = ir_add_global(c->m, sp->global, G_PARAM, t, sp->loc);
  g->init = init.init;
  g->init_arg = init.init_arg;
  g->fan_in = init.fan_in;
  g->fan_out = init.fan_out;
  Inst *v = ir_new(c->f, OP_load, sp->loc, 0, NULL);
  v->name = g->name;
  ir_set_str(v, "global", g->name);
  return finish(c, v);
}

/* ---- arguments of built-in functions ---- */

/* The first name in e that is a tensor, not a dimension. */
static const Expr *tensor_in(Ctx *c, const Expr *e) {
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

static bool int_arg(Ctx *c, const Expr *e, const char *what, int64_t *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  return fe_eval_int(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
}

static bool float_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  return fe_eval_float(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
}

/* A number that may be -inf or inf, but not NaN. */
static bool real_arg(Ctx *c, const Expr *e, const char *what, double *out) {
  const Expr *t = tensor_in(c, e);
  if (t) {
    diag_error(c->d, t->loc, "'%s' is a tensor, but %s must be a number", t->s, what);
    return false;
  }
  return fe_eval_real(e, c->m->dim.a, c->m->dim.n, what, out, c->d);
}

/* A finite number in range r (shared with the IR reader, ir/print.c). */
static bool real_in(Ctx *c, const Expr *e, const char *what, const IrRange *r, double *out) {
  if (!float_arg(c, e, arena_printf(c->a, "'%s'", what), out))
    return false;
  if (!ir_in_range(r, *out)) {
    diag_error(c->d, e->loc, "'%s' must be %s, not %g", what, r->text, *out);
    return false;
  }
  return true;
}

static bool bool_arg(Ctx *c, const Expr *e, const char *what, bool *out) {
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
static bool axis_arg(Ctx *c, const Expr *e, const Inst *x, int64_t *out) {
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
static bool dim_ok(Ctx *c, int64_t v, Loc at) {
  if (v <= 0)
    diag_error(c->d, at, "dimension must be positive, not %lld", (long long)v);
  else if (v > IR_MAX_DIM)
    diag_error(c->d, at, "dimension %lld is larger than the limit %lld", (long long)v,
               (long long)IR_MAX_DIM);
  return v > 0 && v <= IR_MAX_DIM;
}

/* A list of at most IR_MAX_RANK integers, as in [B, 16, 64]. */
static bool ints_arg(Ctx *c, const Expr *e, const char *what, int64_t *out, int *n) {
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

typedef struct Builtin {
  const char *name;
  BuiltinKind kind;
  int ntensor;           /* leading parameters that are tensors */
  int nreq;              /* leading parameters that are required */
  int nparam;
  const char *param[7];
} Builtin;

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

static Inst *lower_expr(Ctx *c, const Expr *e);

/* sum, mean, max: over `axis`, the list `axes`, or everything. */
static Inst *lower_reduce(Ctx *c, const Expr *e, Op op, Inst *x, Expr **arg) {
  int64_t axes[IR_MAX_RANK];
  int n = 0;
  bool keep = false;
  if (arg[1] && arg[2]) {
    diag_error(c->d, arg[2]->loc, "give 'axis' or 'axes', not both");
    return NULL;
  }
  if (arg[1]) {
    if (!axis_arg(c, arg[1], x, &axes[0]))
      return NULL;
    n = 1;
  } else if (arg[2]) {
    if (!ints_arg(c, arg[2], "axes", axes, &n))
      return NULL;
    for (int k = 0; k < n; k++) {
      int64_t r = x->type.rank;
      if (axes[k] < -r || axes[k] >= r) {
        char buf[128];
        diag_error(c->d, arg[2]->args.a[k].loc, "axis %lld is out of range for %s",
                   (long long)axes[k], type_str(&x->type, buf, sizeof buf));
        return NULL;
      }
      axes[k] = axes[k] < 0 ? axes[k] + r : axes[k];
      for (int j = 0; j < k; j++)
        if (axes[j] == axes[k]) {
          diag_error(c->d, arg[2]->args.a[k].loc, "axis %lld appears twice", (long long)axes[k]);
          return NULL;
        }
    }
  } else {
    for (n = 0; n < x->type.rank; n++)
      axes[n] = n;
  }
  if (arg[3] && !bool_arg(c, arg[3], "keepdim", &keep))
    return NULL;
  for (int k = 1; k < n; k++)
    for (int j = k; j > 0 && axes[j - 1] > axes[j]; j--) {
      int64_t t = axes[j];
      axes[j] = axes[j - 1];
      axes[j - 1] = t;
    }
  Inst *i = ir_new(c->f, op, e->loc, 1, &x);
  ir_set_ints(i, "axes", axes, n);
  if (keep)
    ir_set_int(i, "keepdim", 1);
  return finish(c, i);
}

/* reshape(x, [..]): one entry may be -1, inferred from the element count. */
static Inst *lower_reshape(Ctx *c, const Expr *e, Inst *x, const Expr *shape) {
  int64_t dim[IR_MAX_RANK], known = 1;
  int n, infer = -1;
  if (!ints_arg(c, shape, "shape", dim, &n))
    return NULL;
  for (int k = 0; k < n; k++) {
    Loc at = shape->args.a[k].loc;
    if (dim[k] == -1 && infer < 0) {
      infer = k;
    } else if (dim[k] == -1) {
      diag_error(c->d, at, "only one entry of a shape can be -1");
      return NULL;
    } else if (!dim_ok(c, dim[k], at)) {
      return NULL;
    } else if (__builtin_mul_overflow(known, dim[k], &known) || known > IR_MAX_ELEMS) {
      diag_error(c->d, at, "shape has more than %lld elements", (long long)IR_MAX_ELEMS);
      return NULL;
    }
  }
  if (infer >= 0) {
    int64_t total = type_elems(&x->type);
    if (total % known) {
      char buf[128];
      diag_error(c->d, shape->args.a[infer].loc,
                 "cannot infer -1: %s has %lld elements, not a multiple of %lld",
                 type_str(&x->type, buf, sizeof buf), (long long)total, (long long)known);
      return NULL;
    }
    dim[infer] = total / known;
  }
  Inst *i = ir_new(c->f, OP_reshape, e->loc, 1, &x);
  ir_set_ints(i, "shape", dim, n);
  return finish(c, i);
}

/* transpose(x, perm): without perm, the last two axes swap. */
static Inst *lower_transpose(Ctx *c, const Expr *e, Inst *x, const Expr *perm) {
  int64_t p[IR_MAX_RANK];
  int n, r = x->type.rank;
  char buf[128];
  if (!perm) {
    if (r < 2) {
      diag_error(c->d, e->loc, "transpose of %s needs a 'perm'", type_str(&x->type, buf, sizeof buf));
      return NULL;
    }
    for (n = 0; n < r; n++)
      p[n] = n;
    p[r - 2] = r - 1;
    p[r - 1] = r - 2;
  } else {
    if (!ints_arg(c, perm, "perm", p, &n))
      return NULL;
    bool seen[IR_MAX_RANK] = {0}, ok = n == r;
    for (int k = 0; ok && k < n; k++) {
      p[k] = p[k] < 0 ? p[k] + r : p[k];
      ok = p[k] >= 0 && p[k] < r && !seen[p[k]];
      if (ok)
        seen[p[k]] = true;
    }
    if (!ok) {
      diag_error(c->d, perm->loc, "'perm' must order all %d axes of %s", r,
                 type_str(&x->type, buf, sizeof buf));
      return NULL;
    }
  }
  Inst *i = ir_new(c->f, OP_transpose, e->loc, 1, &x);
  ir_set_ints(i, "perm", p, n);
  return finish(c, i);
}

/* slice(x, axis, begin, end): [begin, end) of one axis; negative indices
 * count from the end. */
static Inst *lower_slice(Ctx *c, const Expr *e, Inst *x, Expr **arg) {
  int64_t axis = 0, begin = 0, end;
  char buf[128];
  if (x->type.rank == 0) {
    diag_error(c->d, e->loc, "cannot slice %s", type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if (arg[1] && !axis_arg(c, arg[1], x, &axis))
    return NULL;
  int64_t size = x->type.dim[axis];
  end = size;
  if ((arg[2] && !int_arg(c, arg[2], "'begin'", &begin)) || (arg[3] && !int_arg(c, arg[3], "'end'", &end)))
    return NULL;
  int64_t b = begin + (begin < 0 ? size : 0), en = end + (end < 0 ? size : 0);
  if (b < 0 || b >= en || en > size) {
    diag_error(c->d, e->loc, "slice [%lld, %lld) of axis %lld is empty or outside %s",
               (long long)begin, (long long)end, (long long)axis, type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  begin = b;
  end = en;
  Inst *i = ir_new(c->f, OP_slice, e->loc, 1, &x);
  ir_set_int(i, "axis", axis);
  ir_set_int(i, "begin", begin);
  ir_set_int(i, "end", end);
  return finish(c, i);
}

/* concat(a, b, ..., axis = k): any number of tensors, then the axis by name. */
static Inst *lower_concat(Ctx *c, const Expr *e) {
  Inst *in[16];
  int n = 0, max = ir_ops[OP_concat].maxin;
  const Expr *axis = NULL;
  bool ok = true;
  for (int k = 0; k < e->args.n; k++) {
    const Arg *arg = &e->args.a[k];
    if (arg->name && !strcmp(arg->name, "axis") && !axis) {
      axis = arg->val;
    } else if (arg->name && !strcmp(arg->name, "axis")) {
      diag_error(c->d, arg->loc, "argument 'axis' is given twice");
      ok = false;
    } else if (arg->name) {
      diag_error(c->d, arg->loc, "unknown argument '%s' of 'concat'", arg->name);
      ok = false;
    } else if (n == max) {
      diag_error(c->d, arg->loc, "'concat' takes at most %d tensors", max);
      return NULL;
    } else {
      in[n] = lower_expr(c, arg->val);
      ok &= in[n++] != NULL;
    }
  }
  if (ok && n == 0) {
    diag_error(c->d, e->loc, "'concat' needs at least one tensor");
    return NULL;
  }
  int64_t ax = 0;
  if (!ok || (axis && !axis_arg(c, axis, in[0], &ax)))
    return NULL;
  Inst *i = ir_new(c->f, OP_concat, e->loc, n, in);
  ir_set_int(i, "axis", ax);
  return finish(c, i);
}

/* ---- convolutional networks ---- */

/* An int or a pair [height, width] of ints, each at least lo. */
static bool pair_arg(Ctx *c, const Expr *e, const char *what, int64_t lo, int64_t v[2]) {
  if (e->kind == E_LIST && e->args.n != 2) {
    diag_error(c->d, e->loc, "'%s' must be an int or a pair [height, width]", what);
    return false;
  }
  for (int k = 0; k < 2; k++) {
    const Expr *x = e->kind == E_LIST ? e->args.a[k].val : e;
    if (!int_arg(c, x, arena_printf(c->a, "'%s'", what), &v[k]))
      return false;
    if (v[k] < lo || v[k] > IR_MAX_DIM) {
      diag_error(c->d, x->loc, "'%s' must be %s, not %lld", what,
                 lo ? "positive" : "non-negative", (long long)v[k]);
      return false;
    }
  }
  return true;
}

/* A tensor of rank 4: [N, C, H, W] or, as layout says, a weight's. */
static bool nchw(Ctx *c, const Expr *e, const char *what, const char *layout, const Inst *x) {
  char buf[128];
  if (x->type.dtype == DT_F32 && x->type.rank == 4)
    return true;
  diag_error(c->d, e->loc, "%s must be f32[%s], not %s", what, layout ? layout : "N, C, H, W",
             type_str(&x->type, buf, sizeof buf));
  return false;
}

/* conv2d(input, weight, bias, stride = 1, padding = 0, dilation = 1,
 * groups = 1): padding may also be "valid" (0) or "same" (stride 1, an
 * even dilated kernel span); bias f32[O] is added over each channel. */
static Inst *lower_conv2d(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  int64_t st[2] = {1, 1}, pd[2] = {0, 0}, dl[2] = {1, 1}, groups = 1;
  if (!nchw(c, arg[0], "the input of 'conv2d'", NULL, in[0]) ||
      !nchw(c, arg[1], "the weight of 'conv2d'", "out, in / groups, kh, kw", in[1]))
    return NULL;
  if ((arg[3] && !pair_arg(c, arg[3], "stride", 1, st)) ||
      (arg[5] && !pair_arg(c, arg[5], "dilation", 1, dl)))
    return NULL;
  const Expr *p = arg[4];
  if (p && (p->kind == E_STR || (p->kind == E_IDENT && !lookup(c, p->s)))) {
    bool same = !strcmp(p->s, "same");
    if (!same && strcmp(p->s, "valid")) {
      diag_error(c->d, p->loc, "'padding' must be an int, a pair, \"valid\" or \"same\"");
      return NULL;
    }
    for (int d = 0; same && d < 2; d++) {
      int64_t span = dl[d] * (in[1]->type.dim[2 + d] - 1);
      if (st[d] != 1) {
        diag_error(c->d, p->loc, "padding \"same\" needs stride 1, not %lld", (long long)st[d]);
        return NULL;
      }
      if (span % 2) {
        diag_error(c->d, p->loc, "padding \"same\" of a kernel of even span (%lld along the "
                   "%s) pads one side more; write the padding with pad()", (long long)span + 1,
                   d ? "width" : "height");
        return NULL;
      }
      pd[d] = span / 2;
    }
  } else if (p && !pair_arg(c, p, "padding", 0, pd)) {
    return NULL;
  }
  if (arg[6] && !int_arg(c, arg[6], "'groups'", &groups))
    return NULL;
  Inst *i = ir_new(c->f, OP_conv2d, e->loc, 2, in);
  ir_set_ints(i, "stride", st, 2);
  ir_set_ints(i, "padding", pd, 2);
  ir_set_ints(i, "dilation", dl, 2);
  ir_set_int(i, "groups", groups);
  if (!(i = finish(c, i)) || !in[2])
    return i;
  const Type *b = &in[2]->type;
  char buf[128];
  if (b->dtype != DT_F32 || b->rank != 1 || b->dim[0] != i->type.dim[1]) {
    diag_error(c->d, arg[2]->loc, "the bias of 'conv2d' must be f32[%lld], one per output "
               "channel, not %s", (long long)i->type.dim[1], type_str(b, buf, sizeof buf));
    return NULL;
  }
  Inst *r = ir_new(c->f, OP_reshape, e->loc, 1, &in[2]);
  ir_set_ints(r, "shape", (int64_t[]){b->dim[0], 1, 1}, 3);
  return (r = finish(c, r)) ? op2(c, OP_add, e->loc, i, r) : NULL;
}

/* max_pool2d(input, kernel_size, stride = kernel_size, padding = 0,
 * dilation = 1, ceil_mode = false), avg_pool2d(input, kernel_size, stride,
 * padding, ceil_mode = false, count_include_pad = true, divisor_override =
 * none): the options at their defaults are left out of the IR. */
static Inst *lower_pool2d(Ctx *c, const Expr *e, Op op, Inst *x, Expr **arg) {
  int64_t k[2], st[2], pd[2] = {0, 0}, dl[2] = {1, 1}, div = 0;
  bool max = op == OP_max_pool2d, ceil = false, with_pad = true;
  const Expr *ceil_arg = arg[max ? 5 : 4], *div_arg = max ? NULL : arg[6];
  if (!nchw(c, arg[0], arena_printf(c->a, "the input of '%s'", ir_ops[op].name), NULL, x) ||
      !pair_arg(c, arg[1], "kernel_size", 1, k))
    return NULL;
  st[0] = k[0], st[1] = k[1];
  if ((arg[2] && !pair_arg(c, arg[2], "stride", 1, st)) ||
      (arg[3] && !pair_arg(c, arg[3], "padding", 0, pd)) ||
      (max && arg[4] && !pair_arg(c, arg[4], "dilation", 1, dl)) ||
      (ceil_arg && !bool_arg(c, ceil_arg, "ceil_mode", &ceil)) ||
      (!max && arg[5] && !bool_arg(c, arg[5], "count_include_pad", &with_pad)))
    return NULL;
  bool none =
      div_arg && div_arg->kind == E_IDENT && !strcmp(div_arg->s, "none") && !lookup(c, div_arg->s);
  if (div_arg && !none) {
    if (!int_arg(c, div_arg, "'divisor_override'", &div))
      return NULL;
    if (div < 1 || div > IR_MAX_DIM) {
      diag_error(c->d, div_arg->loc, "'divisor_override' must be positive, not %lld",
                 (long long)div);
      return NULL;
    }
  }
  Inst *i = ir_new(c->f, op, e->loc, 1, &x);
  ir_set_ints(i, "kernel", k, 2);
  ir_set_ints(i, "stride", st, 2);
  ir_set_ints(i, "padding", pd, 2);
  if (ceil)
    ir_set_int(i, "ceil_mode", 1);
  if (dl[0] != 1 || dl[1] != 1)
    ir_set_ints(i, "dilation", dl, 2);
  if (div)
    ir_set_int(i, "divisor_override", div);
  if (!with_pad)
    ir_set_int(i, "count_include_pad", 0);
  return finish(c, i);
}

/* flatten(input, start_dim = 1, end_dim = -1): dims start_dim .. end_dim
 * made one. */
static Inst *lower_flatten(Ctx *c, const Expr *e, Inst *x, Expr **arg) {
  int64_t lo = x->type.rank > 1 ? 1 : 0, hi = x->type.rank - 1;
  char buf[128];
  if (x->type.rank == 0) {
    diag_error(c->d, e->loc, "cannot flatten %s", type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if ((arg[1] && !axis_arg(c, arg[1], x, &lo)) || (arg[2] && !axis_arg(c, arg[2], x, &hi)))
    return NULL;
  if (lo > hi) {
    diag_error(c->d, e->loc, "'start_dim' (%lld) comes after 'end_dim' (%lld)", (long long)lo,
               (long long)hi);
    return NULL;
  }
  int64_t dim[IR_MAX_RANK];
  int n = 0;
  for (int d = 0; d < x->type.rank; d++)
    if (d <= lo || d > hi)
      dim[n++] = x->type.dim[d];
    else
      dim[n - 1] *= x->type.dim[d];
  Inst *i = ir_new(c->f, OP_reshape, e->loc, 1, &x);
  ir_set_ints(i, "shape", dim, n);
  return finish(c, i);
}

/* The modes of pad: constant, then the ones that copy (their op, and the
 * ranks torch.nn.functional.pad takes for k padded dims: k + 1 and k + 2,
 * or only k + 2, for k from 1 to 3). */
static const struct {
  const char *name;
  Op op;
  int lead_lo;
} pad_modes[] = {
    {"constant", OP_pad, 0},
    {"reflect", OP_pad_reflect, 1},
    {"replicate", OP_pad_replicate, 1},
    {"circular", OP_pad_circular, 2},
};

/* One op on axis of x: slice [lo, hi) of it, or op (pad, pad_MODE) of it
 * at begin into size; pad's value v is its attribute unless it is +0, the
 * default. */
static Inst *pad_step(Ctx *c, Loc at, Inst *x, Op op, int64_t axis, int64_t lo, int64_t hi,
                      double v) {
  Inst *i = ir_new(c->f, op, at, 1, &x);
  ir_set_int(i, "axis", axis);
  ir_set_int(i, "begin", lo);
  ir_set_int(i, op == OP_slice ? "end" : "size", hi);
  if (op == OP_pad && (v != 0 || signbit(v)))
    ir_set_float(i, "value", v);
  return finish(c, i);
}

/* pad(input, pad, mode = "constant", value = 0), as F.pad: pad lists
 * (before, after) pairs from the last dim back; a negative one crops. The
 * constant mode fills with value, any f32 including -inf and inf (pad's
 * attribute). The other modes fill with copies of x's elements where F.pad
 * does: reflect and replicate pad x and then crop (a reflection is about x's
 * own end), circular crops first and wraps what is left. */
static Inst *lower_pad(Ctx *c, const Expr *e, Inst *x, Expr **arg) {
  int64_t p[2 * IR_MAX_RANK];
  double v = 0;
  char buf[128];
  const Expr *pe = arg[1];
  const Type xt = x->type;
  int mode = 0, rank = xt.rank;
  if (pe->kind != E_LIST || pe->args.n % 2 || pe->args.n > 2 * rank) {
    diag_error(c->d, pe->loc,
               "'pad' must be a list of (before, after) pairs, one pair per "
               "dimension from the last, at most %d entries for %s",
               2 * rank, type_str(&xt, buf, sizeof buf));
    return NULL;
  }
  for (int k = 0; k < pe->args.n; k++)
    if (!int_arg(c, pe->args.a[k].val, "an entry of 'pad'", &p[k]))
      return NULL;
  if (arg[2]) {
    const Expr *m = arg[2];
    bool named = m->kind == E_STR || m->kind == E_IDENT;
    while (named && mode < COUNTOF(pad_modes) && strcmp(m->s, pad_modes[mode].name))
      mode++;
    if (!named || mode == COUNTOF(pad_modes)) {
      diag_error(c->d, m->loc,
                 "'mode' must be \"constant\", \"reflect\", \"replicate\" or "
                 "\"circular\"");
      return NULL;
    }
  }
  if (arg[3] && !real_arg(c, arg[3], "'value'", &v))
    return NULL;
  if (xt.dtype == DT_I32 && !(v >= INT32_MIN && v <= INT32_MAX && v == floor(v))) {
    diag_error(c->d, arg[3]->loc, "'value' of a pad of %s must be a 32-bit integer, not %g",
               type_str(&xt, buf, sizeof buf), v);
    return NULL;
  }
  if (isfinite(v) && isinf((float)v)) {
    diag_error(c->d, arg[3]->loc,
               "'value' %g is beyond the range of f32 (%g in magnitude); an infinity is "
               "written -inf or inf",
               v, FLT_MAX);
    return NULL;
  }
  Op op = pad_modes[mode].op;
  int npad = pe->args.n / 2, lo_rank = npad + pad_modes[mode].lead_lo;
  if (mode && v != 0) {
    diag_error(c->d, arg[3]->loc, "mode \"%s\" takes no 'value' (only \"constant\" does)",
               pad_modes[mode].name);
    return NULL;
  }
  if (mode && (npad < 1 || npad > 3)) {
    diag_error(c->d, pe->loc, "mode \"%s\" pads 1, 2 or 3 dimensions, not %d", pad_modes[mode].name,
               npad);
    return NULL;
  }
  if (mode && (rank < lo_rank || rank > npad + 2)) {
    diag_error(c->d, pe->loc, "mode \"%s\" pads %d dimension%s of an input of rank %d%s, not %s",
               pad_modes[mode].name, npad, npad > 1 ? "s" : "", lo_rank,
               lo_rank < npad + 2 ? arena_printf(c->a, " or %d", npad + 2) : "",
               type_str(&xt, buf, sizeof buf));
    return NULL;
  }
  for (int k = 0; k < npad; k++) {
    int64_t axis = rank - 1 - k, n = x->type.dim[axis], lo = p[2 * k], hi = p[2 * k + 1];
    bool big = lo > IR_MAX_DIM || hi > IR_MAX_DIM || lo < -IR_MAX_DIM || hi < -IR_MAX_DIM;
    bool crop_first = op == OP_pad || op == OP_pad_circular;
    int64_t clo = !big && lo < 0 ? -lo : 0, chi = !big && hi < 0 ? -hi : 0,
            plo = !big && lo > 0 ? lo : 0, phi = !big && hi > 0 ? hi : 0;
    /* what the crop leaves: of x, or of x padded */
    if (big || (crop_first ? n - clo - chi : n + lo + hi) < 1) {
      diag_error(c->d, pe->args.a[2 * k].loc,
                 "padding (%lld, %lld) leaves nothing of dimension "
                 "%lld of %s",
                 (long long)lo, (long long)hi, (long long)axis, type_str(&xt, buf, sizeof buf));
      return NULL;
    }
    int64_t m = n - clo - chi;
    for (int side = 0; side < 2; side++) {
      int64_t q = side ? phi : plo;
      Loc at = pe->args.a[2 * k + side].loc;
      if (op == OP_pad_reflect && q >= n) {
        diag_error(c->d, at,
                   "reflect padding %lld of dimension %lld of %s must be less than its "
                   "size %lld",
                   (long long)q, (long long)axis, type_str(&xt, buf, sizeof buf), (long long)n);
        return NULL;
      }
      if (op == OP_pad_circular && q > m) {
        diag_error(c->d, at,
                   "circular padding %lld of dimension %lld of %s wraps around more "
                   "than once: at most %lld%s",
                   (long long)q, (long long)axis, type_str(&xt, buf, sizeof buf), (long long)m,
                   m < n ? ", the size the other side's crop leaves" : ", its size");
        return NULL;
      }
    }
    if (crop_first && (clo || chi) &&
        !(x = pad_step(c, e->loc, x, OP_slice, axis, clo, n - chi, 0)))
      return NULL;
    if ((plo || phi) &&
        !(x = pad_step(c, e->loc, x, op, axis, plo, x->type.dim[axis] + plo + phi, v)))
      return NULL;
    if (!crop_first && (clo || chi) &&
        !(x = pad_step(c, e->loc, x, OP_slice, axis, clo, x->type.dim[axis] - chi, 0)))
      return NULL;
  }
  return x;
}

/* The buffer argument `what` of batch_norm names, updated by no other call;
 * NULL after reporting. */
static const Global *bn_buffer(Ctx *c, const Expr *e, const char *what, const Inst *x) {
  Name *n = e->kind == E_IDENT ? lookup(c, e->s) : NULL;
  char buf[128];
  if (!n || !n->buffer || n->global < 0) {
    diag_error(c->d, e->loc, "'%s' of 'batch_norm' must name a buffer (declared 'buffer NAME: "
               "f32[%lld]'), which the training step updates", what, (long long)x->type.dim[1]);
    return NULL;
  }
  const Global *g = &c->m->global.a[n->global];
  if (g->type.dtype != DT_F32 || g->type.rank != 1 || g->type.dim[0] != x->type.dim[1]) {
    char b2[128];
    diag_error(c->d, e->loc, "'%s' of 'batch_norm' must be f32[%lld], one per channel of %s, "
               "not %s", what, (long long)x->type.dim[1], type_str(&x->type, buf, sizeof buf),
               type_str(&g->type, b2, sizeof b2));
    return NULL;
  }
  for (int k = 0; k < c->f->inst.n; k++) {
    const Inst *s = c->f->inst.a[k];
    if (s->op == OP_store && ir_global_of(s) == g) {
      diag_error(c->d, e->loc, "buffer '%s' is already updated by the batch_norm on line %d; "
                 "each batch_norm needs buffers of its own", e->s, s->loc.line);
      return NULL;
    }
  }
  n->updated = true;
  return g;
}

/* v reshaped to shape [dim, n] (v itself when that is its shape). */
static Inst *reshaped(Ctx *c, Loc at, Inst *v, const int64_t *dim, int n) {
  if (v->type.rank == n && !memcmp(v->type.dim, dim, sizeof *dim * (size_t)n))
    return v;
  Inst *r = ir_new(c->f, OP_reshape, at, 1, &v);
  ir_set_ints(r, "shape", dim, n);
  return finish(c, r);
}

/* batch_norm(input, running_mean, running_var, weight, bias, momentum = 0.1,
 * eps = 1e-5), as torch.nn.functional's over every dim but 1: the batch's
 * mean and biased variance (mean reductions, partial sums under a batch
 * split) normalise in training and update the buffers, (1 - m) r + m s with
 * the unbiased variance; batch_stat lets evaluation read the buffers
 * instead. y = x a + (bias - mean a), a = weight / sqrt(var + eps). */
static Inst *lower_batch_norm(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  Inst *x = in[0];
  char buf[128];
  Loc at = e->loc;
  if (x->type.dtype != DT_F32 || x->type.rank < 2) {
    diag_error(c->d, arg[0]->loc, "the input of 'batch_norm' must be f32[N, C, ...], not %s",
               type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  const Type *xt = &x->type;
  int64_t C = xt->dim[1], count = type_elems(xt) / C;
  const Global *rm = bn_buffer(c, arg[1], "running_mean", x);
  const Global *rv = rm ? bn_buffer(c, arg[2], "running_var", x) : NULL;
  if (!rv)
    return NULL;
  if (rm == rv) {
    diag_error(c->d, arg[2]->loc, "'running_mean' and 'running_var' of 'batch_norm' name the "
               "same buffer");
    return NULL;
  }
  for (int k = 3; k < 5; k++) {
    const Type *t = in[k] ? &in[k]->type : NULL;
    if (t && (t->dtype != DT_F32 || t->rank != 1 || t->dim[0] != C)) {
      diag_error(c->d, arg[k]->loc, "the %s of 'batch_norm' must be f32[%lld], one per channel, "
                 "not %s", k == 3 ? "weight" : "bias", (long long)C, type_str(t, buf, sizeof buf));
      return NULL;
    }
  }
  double mom = 0.1, eps = 1e-5;
  if ((arg[5] && !real_in(c, arg[5], "momentum", &ir_unit, &mom)) ||
      (arg[6] && !real_in(c, arg[6], "eps", &ir_positive, &eps)))
    return NULL;
  if (count < 2 && !c->prog->single.file)   /* refused if the model trains */
    c->prog->single = arg[0]->loc, c->prog->single_type = *xt;
  int64_t axes[IR_MAX_RANK], stat[IR_MAX_RANK];
  int na = 0;
  for (int d = 0; d < xt->rank; d++) {
    stat[d] = d == 1 ? C : 1;
    if (d != 1)
      axes[na++] = d;
  }
  Inst *mu = ir_new(c->f, OP_mean, at, 1, &x);
  ir_set_ints(mu, "axes", axes, na);
  ir_set_int(mu, "keepdim", 1);
  if (!(mu = finish(c, mu)))
    return NULL;
  Inst *xc = op2(c, OP_sub, at, x, mu);
  Inst *sq = xc ? op2(c, OP_mul, at, xc, xc) : NULL;
  Inst *var = sq ? ir_new(c->f, OP_mean, at, 1, &sq) : NULL;
  if (!var)
    return NULL;
  ir_set_ints(var, "axes", axes, na);
  ir_set_int(var, "keepdim", 1);
  if (!(var = finish(c, var)))
    return NULL;
  Inst *rmv = in[1], *rvv = in[2];
  Inst *ms = op2(c, OP_batch_stat, at, mu, reshaped(c, at, rmv, stat, xt->rank));
  Inst *vs = op2(c, OP_batch_stat, at, var, reshaped(c, at, rvv, stat, xt->rank));
  Inst *a = op1(c, OP_sqrt, at, op2(c, OP_add, at, vs, constant(c, eps, at)));
  int64_t cw[IR_MAX_RANK];   /* [C, 1, ...]: a per-channel vector against [N, C, ...] */
  for (int d = 1; d < xt->rank; d++)
    cw[d - 1] = d == 1 ? C : 1;
  a = in[3] ? op2(c, OP_div, at, reshaped(c, at, in[3], cw, xt->rank - 1), a)
            : op2(c, OP_div, at, constant(c, 1, at), a);
  Inst *shift = op1(c, OP_neg, at, op2(c, OP_mul, at, ms, a));
  if (in[4])
    shift = op2(c, OP_add, at, shift, reshaped(c, at, in[4], cw, xt->rank - 1));
  Inst *y = op2(c, OP_add, at, op2(c, OP_mul, at, x, a), shift);
  /* the running statistics: (1 - m) r + m s, the variance unbiased */
  const Global *g[2] = {rm, rv};
  Inst *s[2] = {mu, var}, *r[2] = {rmv, rvv};
  double f[2] = {mom, count > 1 ? mom * (double)count / (double)(count - 1) : mom};
  for (int k = 0; k < 2; k++) {
    Inst *v = op2(c, OP_add, at, op2(c, OP_mul, at, constant(c, 1 - mom, at), r[k]),
                  op2(c, OP_mul, at, constant(c, f[k], at), reshaped(c, at, s[k], &C, 1)));
    Inst *st = ir_new(c->f, OP_store, at, 1, &v);
    ir_set_str(st, "global", g[k]->name);
    if (!finish(c, st))
      return NULL;
  }
  return y;
}

static const Builtin *find_builtin(const char *name) {
  for (int k = 0; k < COUNTOF(builtins); k++)
    if (!strcmp(builtins[k].name, name))
      return &builtins[k];
  return NULL;
}

static Block *find_block(const Prog *p, const char *name) {
  for (int k = 0; k < p->nblk; k++)
    if (!strcmp(p->blk[k].decl->name, name))
      return &p->blk[k];
  return NULL;
}

/* cross_entropy(logits, labels, ignore_index, label_smoothing) as
 * torch.nn.functional's: without either keyword the op cross_entropy (the
 * mean over every row); with one, the sum over the rows whose label is not
 * ignore_index (-100 unless given) over their count, each a partial sum
 * under a batch split, so the mean is over the kept rows of the whole batch
 * (0/0, NaN, when every label is ignored, as PyTorch gives). */
static Inst *lower_cross_entropy(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  if (!arg[2] && !arg[3])
    return finish(c, ir_new(c->f, OP_cross_entropy, e->loc, 2, in));
  int64_t ignore = -100;
  double eps = 0;
  if (arg[2] && !int_arg(c, arg[2], "'ignore_index'", &ignore))
    return NULL;
  if (arg[2] && (ignore < INT32_MIN || ignore > INT32_MAX)) {
    diag_error(c->d, arg[2]->loc, "'ignore_index' must fit a label (i32), not %lld",
               (long long)ignore);
    return NULL;
  }
  if (arg[3] && !real_in(c, arg[3], "label_smoothing", &ir_unit, &eps))
    return NULL;
  Inst *sum = ir_new(c->f, OP_cross_entropy_sum, e->loc, 2, in);
  ir_set_int(sum, "ignore_index", ignore);
  ir_set_float(sum, "smoothing", eps);
  if (!(sum = finish(c, sum)))
    return NULL;
  Inst *count = ir_new(c->f, OP_label_count, e->loc, 1, &in[1]);
  ir_set_int(count, "ignore_index", ignore);
  if (!(count = finish(c, count)))
    return NULL;
  return finish(c, ir_make(c->f, OP_div, e->loc, 2, sum, count));
}

/* bce_with_logits(logits, target, pos_weight) as torch.nn.functional's
 * binary_cross_entropy_with_logits: without pos_weight the op; with it, the
 * mean of (1 - t) x + (1 + (w - 1) t) softplus(-x), which is the op plus the
 * mean of (w - 1) t softplus(-x). softplus(-x) = -log sigmoid(x) is taken as
 * -log_softmax([x/2, -x/2])[0], exact for any x and smooth at 0. */
static Inst *lower_bce(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  Loc at = e->loc;
  Inst *base = finish(c, ir_new(c->f, OP_bce_with_logits, at, 2, in));
  if (!base || !in[2])
    return base;
  Inst *x = in[0], *t = in[1];
  const Type *xt = &x->type;
  int64_t dim[IR_MAX_RANK + 1];
  int r = xt->rank;
  if (r == IR_MAX_RANK) {
    diag_error(c->d, at, "'pos_weight' needs logits of at most %d dimensions", IR_MAX_RANK - 1);
    return NULL;
  }
  const Type *wt0 = &in[2]->type;
  bool fits = wt0->rank <= r;
  for (int d = 0; fits && d < wt0->rank; d++) {
    int64_t w = wt0->dim[wt0->rank - 1 - d];
    fits = w == 1 || w == xt->dim[r - 1 - d];
  }
  if (!fits) {
    char a[128], b[128];
    diag_error(c->d, arg[2]->loc, "'pos_weight' of %s does not broadcast to the logits' %s",
               type_str(wt0, a, sizeof a), type_str(xt, b, sizeof b));
    return NULL;
  }
  memcpy(dim, xt->dim, sizeof(int64_t) * (size_t)r);
  dim[r] = 1;
  Inst *half = op2(c, OP_mul, at, reshaped(c, at, x, dim, r + 1), constant(c, 0.5, at));
  Inst *pair[2] = {half, half ? op1(c, OP_neg, at, half) : NULL};
  if (!pair[1])
    return NULL;
  Inst *v = ir_new(c->f, OP_concat, at, 2, pair);
  ir_set_int(v, "axis", r);
  if (!(v = finish(c, v)))
    return NULL;
  v = ir_new(c->f, OP_log_softmax, at, 1, &v);
  ir_set_int(v, "axis", r);
  if (!(v = finish(c, v)))
    return NULL;
  v = ir_new(c->f, OP_slice, at, 1, &v);
  ir_set_int(v, "axis", r);
  ir_set_int(v, "begin", 0);
  ir_set_int(v, "end", 1);
  Inst *logsig = finish(c, v);   /* log sigmoid(x), [..., 1] */
  Inst *w1 = op2(c, OP_sub, at, in[2], constant(c, 1, at));
  Inst *wt = w1 ? op2(c, OP_mul, at, w1, t) : NULL;
  Inst *ls0 = logsig ? reshaped(c, at, logsig, xt->dim, r) : NULL;
  Inst *term = wt && ls0 ? op2(c, OP_mul, at, wt, ls0) : NULL;
  if (!term)
    return NULL;
  int64_t axes[IR_MAX_RANK];
  for (int d = 0; d < r; d++)
    axes[d] = d;
  Inst *mean = ir_new(c->f, OP_mean, at, 1, &term);
  ir_set_ints(mean, "axes", axes, r);
  mean = finish(c, mean);
  return mean ? op2(c, OP_sub, at, base, mean) : NULL;
}

/* embedding_bag(input, weight, offsets, mode, per_sample_weights,
 * padding_idx) as torch.nn.functional's (include_last_offset false): input
 * [B, K], or [N] with offsets [B]; mode "mean" unless given;
 * per_sample_weights with "sum" only; a negative padding_idx counts from the
 * weight's end. The weight's global names the table in runtime errors. */
static Inst *lower_embedding_bag(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  char buf[128];
  Inst *ops[4] = {in[0], in[1]};
  int n = 2, mode = DT_BAG_MEAN;
  const Type *xt = &in[0]->type, *wt = &in[1]->type;
  if (arg[3]) {
    const Expr *m = arg[3];
    mode = m->kind == E_STR || m->kind == E_IDENT
               ? dtrt_name_index(dtrt_bag_mode_names, DT_BAG_COUNT, m->s)
               : -1;
    if (mode < 0) {
      diag_error(c->d, m->loc, "'mode' must be \"sum\", \"mean\" or \"max\"");
      return NULL;
    }
  }
  if (in[2] && xt->rank == 2) {
    diag_error(c->d, arg[2]->loc, "'offsets' go with a 1-D input; input %s is 2-D, a bag per row",
               type_str(xt, buf, sizeof buf));
    return NULL;
  }
  if (!in[2] && xt->rank == 1) {
    diag_error(c->d, arg[0]->loc, "a 1-D input (%s) needs 'offsets'", type_str(xt, buf, sizeof buf));
    return NULL;
  }
  if (in[2])
    ops[n++] = in[2];
  if (arg[4]) {
    if (mode != DT_BAG_SUM) {
      diag_error(c->d, arg[4]->loc, "'per_sample_weights' need mode \"sum\", not \"%s\"",
                 dtrt_bag_mode_names[mode]);
      return NULL;
    }
    if (!(ops[n++] = lower_expr(c, arg[4])))
      return NULL;
  }
  int64_t pad = 0, rows = wt->rank == 2 ? wt->dim[0] : 0;
  if (arg[5] && !int_arg(c, arg[5], "'padding_idx'", &pad))
    return NULL;
  if (arg[5] && rows && (pad < -rows || pad >= rows)) {
    diag_error(c->d, arg[5]->loc, "'padding_idx' %lld is outside [-%lld, %lld), the weight's rows",
               (long long)pad, (long long)rows, (long long)rows);
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_embedding_bag, e->loc, n, ops);
  ir_set_int(i, "mode", mode);
  if (arg[5])
    ir_set_int(i, "padding_idx", pad < 0 ? pad + rows : pad);
  if (in[1]->op == OP_load)
    ir_set_str(i, "table", ir_get_str(in[1], "global", ""));
  return finish(c, i);
}

/* scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
 * is_causal, scale) as torch.nn.functional's, on [B, H, T, D]: the op sdpa
 * (by blocks, no [Tq, Tk] scores kept); scale defaults to 1/sqrt(D). No
 * attn_mask or dropout yet. */
static Inst *lower_sdpa(Ctx *c, const Expr *e, Inst **in, Expr **arg) {
  bool causal = false;
  double p = 0, scale = 1 / sqrt((double)in[0]->type.dim[in[0]->type.rank ? in[0]->type.rank - 1 : 0]);
  if (arg[3]) {
    diag_error(c->d, arg[3]->loc, "'attn_mask' is not supported yet (is_causal is)");
    return NULL;
  }
  if (arg[4] && !real_in(c, arg[4], "dropout_p", &ir_unit, &p))
    return NULL;
  if (p != 0) {
    diag_error(c->d, arg[4]->loc, "'dropout_p' other than 0 is not supported yet");
    return NULL;
  }
  if ((arg[5] && !bool_arg(c, arg[5], "is_causal", &causal)) ||
      (arg[6] && !float_arg(c, arg[6], "'scale'", &scale)))
    return NULL;
  Inst *i = ir_new(c->f, OP_sdpa, e->loc, 3, in);
  if (causal)
    ir_set_int(i, "causal", 1);
  ir_set_float(i, "scale", scale);
  return finish(c, i);
}

static Inst *lower_call(Ctx *c, const Expr *e) {
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

/* ---- expressions ---- */

/* Numbers, dimension names and arithmetic on them fold to one constant. */
static bool is_const(Ctx *c, const Expr *e) {
  switch (e->kind) {
  case E_NUM: return true;
  case E_IDENT: {
    Name *n = lookup(c, e->s);
    return n && n->kind == N_DIM;
  }
  case E_NEG: return is_const(c, e->lhs);
  case E_BINARY: return e->op != '@' && is_const(c, e->lhs) && is_const(c, e->rhs);
  default: return false;
  }
}

static Inst *lower_expr(Ctx *c, const Expr *e) {
  static const Op binop[128] = {['+'] = OP_add, ['-'] = OP_sub, ['*'] = OP_mul, ['/'] = OP_div,
                                ['@'] = OP_matmul};
  if ((e->kind == E_NEG || e->kind == E_BINARY) && is_const(c, e)) {
    Num v;
    return fe_eval(e, c->m->dim.a, c->m->dim.n, &v, c->d) ? constant(c, v.f, e->loc) : NULL;
  }
  switch (e->kind) {
  case E_NUM:
    return constant(c, e->f, e->loc);
  case E_IDENT:
    return ref(c, e->s, e->loc);
  case E_NEG: {
    Inst *x = lower_expr(c, e->lhs);
    return x ? op1(c, OP_neg, e->loc, x) : NULL;
  }
  case E_BINARY: {
    Inst *x = lower_expr(c, e->lhs);
    Inst *y = lower_expr(c, e->rhs);
    return x && y ? op2(c, binop[e->op], e->loc, x, y) : NULL;
  }
  case E_CALL:
    return lower_call(c, e);
  case E_QUANT:
    diag_error(c->d, e->loc, "a unit ('%s') belongs in a cluster, not in a model", e->s);
    return NULL;
  case E_STR:
    diag_error(c->d, e->loc, "expected a tensor, found a string");
    return NULL;
  case E_LIST:
    diag_error(c->d, e->loc, "expected a tensor, found a list");
    return NULL;
  case E_EACH:
    diag_error(c->d, e->loc, "'each' is allowed only in the arguments of a repeat");
    return NULL;
  case E_STAR:
  case E_ERROR:
    return NULL;
  }
  DTC_UNREACHABLE();
}

/* ---- declarations ---- */

static bool lower_type(Ctx *c, const TypeExpr *t, Type *out) {
  *out = (Type){0};
  if (!strcmp(t->dtype, "f32")) {
    out->dtype = DT_F32;
  } else if (!strcmp(t->dtype, "i32")) {
    out->dtype = DT_I32;
  } else {
    diag_error(c->d, t->loc, "unknown element type '%s' (expected f32 or i32)", t->dtype);
    return false;
  }
  if (t->dim.n > IR_MAX_RANK) {
    diag_error(c->d, t->dim.a[IR_MAX_RANK]->loc, "a tensor has at most %d dimensions", IR_MAX_RANK);
    return false;
  }
  bool ok = true;
  int64_t elems = 1;
  for (int k = 0; k < t->dim.n; k++) {
    int64_t v;
    const Expr *e = t->dim.a[k];
    if (!int_arg(c, e, "a dimension", &v) || !dim_ok(c, v, e->loc)) {
      ok = false;
    } else {
      out->dim[k] = v;
      if (elems <= IR_MAX_ELEMS)
        elems = v > IR_MAX_ELEMS / elems ? IR_MAX_ELEMS + 1 : elems * v;
    }
  }
  out->rank = t->dim.n;
  if (ok && elems > IR_MAX_ELEMS) {
    diag_error(c->d, t->loc, "tensor has more than %lld elements", (long long)IR_MAX_ELEMS);
    ok = false;
  }
  return ok;
}

/* Glorot's fans of a declared type t, as torch.nn.init.xavier_uniform_ takes
 * them: a matrix [in, out] its two dims (their sum is what counts), a tensor
 * of rank 3 or more [out, in, k...] (a convolution's weight) out and in times
 * its receptive field k... . Zero (the trailing matrix's) below rank 3. */
static void glorot_fans(const Type *t, Global *g) {
  if (t->rank < 3)
    return;
  int64_t field = 1;
  for (int d = 2; d < t->rank; d++)
    field *= t->dim[d];
  g->fan_in = t->dim[1] * field;
  g->fan_out = t->dim[0] * field;
}

/* kaiming_*(a = sqrt(5)): a, the negative slope of the leaky ReLU whose gain
 * scales the values, any finite number; the param of rank 2 or more that
 * fan_in needs. */
static bool kaiming_arg(Ctx *c, const Expr *e, Global *g) {
  static const char *const param[] = {"a"};
  Expr *arg[1] = {NULL};
  if (e->kind == E_CALL && !fe_bind(e, param, 1, 1, 0, arg, c->a, c->d))
    return false;
  if (g->type.rank < 2) {
    diag_error(c->d, e->loc, "'%s' needs a param of rank 2 or more, [in, out] or [out, in, "
               "k...], to take its fan_in from; for a bias as torch draws it, write "
               "uniform(bound = 1 / sqrt(IN))", e->s);
    return false;
  }
  g->init_arg = sqrt(5.0);
  return !arg[0] || float_arg(c, arg[0], "'a'", &g->init_arg);
}

/* init = zeros | ones | glorot | normal(std = 0.02) | uniform(bound = 0.1)
 *      | kaiming_uniform(a = sqrt(5)) | kaiming_normal(a = sqrt(5));
 * arguments are constant expressions; without an init, matrices get glorot
 * and the rest zeros. g->type is the declared type (a block's param before
 * it is stacked). Kaiming's fan_in is glorot's: a matrix [in, out] its first
 * dim (codegen's trailing matrix), [out, in, k...] in times k... . */
static bool lower_init(Ctx *c, const Stmt *s, Global *g) {
  const Expr *e = s->val;
  if (!e) {
    g->init = g->type.rank >= 2 && s->kind == S_PARAM ? DT_INIT_GLOROT : DT_INIT_ZEROS;
    if (g->init == DT_INIT_GLOROT)
      glorot_fans(&g->type, g);
    return true;
  }
  int k = dtrt_name_index(dtrt_init_names, DT_INIT_COUNT, e->s);
  if (k < 0) {
    diag_error(c->d, e->loc, "unknown initializer '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, dtrt_init_names, DT_INIT_COUNT));
    return false;
  }
  g->init = k;
  bool kaiming = k == DT_INIT_KAIMING_UNIFORM || k == DT_INIT_KAIMING_NORMAL;
  if (k == DT_INIT_GLOROT || kaiming)
    glorot_fans(&g->type, g);
  if (kaiming)
    return kaiming_arg(c, e, g);
  if (k != DT_INIT_NORMAL && k != DT_INIT_UNIFORM) {
    Expr *none[1];
    return e->kind != E_CALL || fe_bind(e, NULL, 0, 0, 0, none, c->a, c->d);
  }
  const char *param = k == DT_INIT_NORMAL ? "std" : "bound";
  g->init_arg = k == DT_INIT_NORMAL ? 0.02 : 0.1;
  Expr *arg[1] = {NULL};
  if (e->kind == E_CALL && !fe_bind(e, &param, 1, 1, 0, arg, c->a, c->d))
    return false;
  return !arg[0] || real_in(c, arg[0], param, &ir_positive, &g->init_arg);
}

/* A block's param: a global named after the instance when the block is
 * inlined into the model, else an arg of the body (the init is the declared
 * type's either way). */
static void lower_block_param(Ctx *c, const Stmt *s, Name *n, Type t) {
  Global g = {.type = t};
  if (!lower_init(c, s, &g)) {
    n->bad = true;
    return;
  }
  const char *global = join(c, c->path, s->name);
  Ctx *o = owner(c);
  if (o->up && s->kind == S_BUFFER) {
    diag_error(c->d, s->loc, "buffer '%s' in a repeated block: a loop's iterations cannot "
               "update buffers yet; apply the block once per layer instead", s->name);
    n->bad = true;
    return;
  }
  if (o->up) {
    n->val = stacked_arg(o, global, t, &g, s->name_loc);
    n->bad = !n->val;
    return;
  }
  Global *pg = ir_add_global(c->m, global, s->kind == S_BUFFER ? G_BUFFER : G_PARAM, t,
                             s->name_loc);
  pg->init = g.init;
  pg->init_arg = g.init_arg;
  pg->fan_in = g.fan_in;
  pg->fan_out = g.fan_out;
  n->global = c->m->global.n - 1;
}

static void lower_decl(Ctx *c, const Stmt *s, Name *n) {
  Type t;
  if (!lower_type(c, s->type, &t)) {
    n->bad = true;
    return;
  }
  if (s->kind == S_PARAM && t.dtype != DT_F32) {
    diag_error(c->d, s->type->loc, "param '%s' must be f32: only f32 tensors are trained", s->name);
    n->bad = true;
    return;
  }
  if (s->flag && strcmp(s->flag, "sparse")) {
    diag_error(c->d, s->flag_loc, "unknown word '%s' after param '%s'; the one allowed is 'sparse'",
               s->flag, s->name);
    n->bad = true;
    return;
  }
  if (s->flag && (t.rank != 2 || c->decl->kind == D_BLOCK)) {
    char buf[128];
    diag_error(c->d, s->flag_loc,
               c->decl->kind == D_BLOCK
                   ? "param '%s' is sparse in a block; a sparse table is a model's own param"
                   : "sparse param '%s' must be a table f32[R, D], not %s",
               s->name, type_str(&t, buf, sizeof buf));
    n->bad = true;
    return;
  }
  if (s->kind == S_BUFFER && t.dtype != DT_F32) {
    diag_error(c->d, s->type->loc, "buffer '%s' must be f32", s->name);
    n->bad = true;
    return;
  }
  if (c->decl->kind == D_BLOCK) {
    lower_block_param(c, s, n, t);
    return;
  }
  GlobalKind kind = s->kind == S_INPUT ? G_INPUT : s->kind == S_BUFFER ? G_BUFFER : G_PARAM;
  Global *g = ir_add_global(c->m, s->name, kind, t, s->name_loc);
  n->global = c->m->global.n - 1;
  g->sparse = s->flag != NULL;
  if (s->kind != S_INPUT && !lower_init(c, s, g))
    n->bad = true;
}

/* ---- training ---- */

/* schedule = constant | warmup(steps = N) | cosine(total = N, warmup = 0) */
static bool lower_schedule(Ctx *c, const Expr *e, Train *t) {
  static const char *const cosine[] = {"total", "warmup"};
  static const char *const warm[] = {"steps"};
  if (e->kind != E_IDENT && e->kind != E_CALL) {
    if (e->kind != E_ERROR)
      diag_error(c->d, e->loc, "'schedule' must be constant, warmup(steps = N) or cosine(total = N)");
    return false;
  }
  int k = dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, e->s);
  if (k < 0) {
    diag_error(c->d, e->loc, "unknown schedule '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, dtrt_schedule_names, DT_SCHED_COUNT));
    return false;
  }
  t->schedule = k;
  Expr *arg[2] = {NULL, NULL};
  if (k == DT_SCHED_CONSTANT)
    return e->kind != E_CALL || fe_bind(e, NULL, 0, 0, 0, arg, c->a, c->d);
  if (e->kind != E_CALL) {
    diag_error(c->d, e->loc, "'%s' needs its argument '%s'", e->s, k == DT_SCHED_WARMUP ? "steps" : "total");
    return false;
  }
  if (!fe_bind(e, k == DT_SCHED_WARMUP ? warm : cosine, k == DT_SCHED_WARMUP ? 1 : 2, 0, 1, arg, c->a, c->d))
    return false;
  int64_t v[2] = {0, 0};
  for (int j = 0; j < 2; j++) {
    if (!arg[j])
      continue;
    const char *what = k == DT_SCHED_WARMUP ? "steps" : cosine[j];
    if (!int_arg(c, arg[j], arena_printf(c->a, "'%s'", what), &v[j]))
      return false;
    if (v[j] < (j == 0 ? 1 : 0)) {
      diag_error(c->d, arg[j]->loc, "'%s' must be %s", what, j == 0 ? "positive" : "non-negative");
      return false;
    }
  }
  t->warmup = k == DT_SCHED_WARMUP ? v[0] : v[1];
  t->total = k == DT_SCHED_WARMUP ? 0 : v[0];
  if (k == DT_SCHED_COSINE && t->warmup >= t->total) {
    diag_error(c->d, arg[1]->loc, "'warmup' must be below 'total'");
    return false;
  }
  return true;
}

/* One of n names: its index into *out. */
static bool choice_in(Ctx *c, const Expr *e, const char *what, const char *const *names, int n,
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

/* accumulate = K: the calls of the training step whose gradients one update
 * averages, 1 to IR_MAX_ACCUMULATE. */
static bool accumulate_arg(Ctx *c, const Expr *e, int64_t *out) {
  if (!int_arg(c, e, "'accumulate'", out))
    return false;
  if (*out < 1 || *out > IR_MAX_ACCUMULATE) {
    diag_error(c->d, e->loc, "'accumulate' must be between 1 and %d, not %lld",
               IR_MAX_ACCUMULATE, (long long)*out);
    return false;
  }
  return true;
}

/* optimizer = sgd(lr, momentum, weight_decay, schedule, nesterov, clip_norm, dampening,
 *                 accumulate)
 *           | adam(lr, beta1, beta2, eps, weight_decay, schedule, eps_form, clip_norm,
 *                  accumulate)
 *           | adamw(...)
 *           | adagrad(lr, lr_decay, weight_decay, eps, initial_accumulator_value, schedule)
 *           | rowwise_adagrad(...)
 *           | sparse_adam(lr, beta1, beta2, eps, schedule) */
static bool lower_optimizer(Ctx *c, const Expr *e, Train *t) {
  static const char *const sgd[] = {"lr",       "momentum", "weight_decay",
                                    "schedule", "nesterov", "clip_norm", "dampening",
                                    "accumulate"};
  static const char *const adam[] = {"lr",           "beta1",    "beta2",     "eps",
                                     "weight_decay", "schedule", "eps_form",  "clip_norm",
                                     "accumulate"};
  static const char *const adagrad[] = {
      "lr", "lr_decay", "weight_decay", "eps", "initial_accumulator_value", "schedule"};
  static const char *const sparse_adam[] = {"lr", "beta1", "beta2", "eps", "schedule"};
  int kind = dtrt_name_index(ir_opt_names, OPT_COUNT, e->s);
  if (kind < 0) {
    diag_error(c->d, e->loc, "unknown optimizer '%s'%s", e->s,
               fe_did_you_mean(c->a, e->s, ir_opt_names, OPT_COUNT));
    return false;
  }
  bool is_sgd = kind == OPT_SGD, is_adamw = kind == OPT_ADAMW;
  bool is_adagrad = kind == OPT_ADAGRAD || kind == OPT_ROWWISE_ADAGRAD;
  t->opt = kind;
  t->schedule = DT_SCHED_CONSTANT;
  t->lr = is_sgd || is_adagrad ? 0.01 : 1e-3;
  if (!is_sgd && !is_adagrad) {
    t->beta1 = 0.9;
    t->beta2 = 0.999;
    t->eps = 1e-8;
    t->weight_decay = is_adamw ? 0.01 : 0;
  }
  if (is_adagrad)
    t->eps = 1e-10; /* torch.optim.Adagrad's */
  const char *const *param = is_sgd                    ? sgd
                             : is_adagrad              ? adagrad
                             : kind == OPT_SPARSE_ADAM ? sparse_adam
                                                       : adam;
  int nparam = is_sgd                    ? COUNTOF(sgd)
               : is_adagrad              ? COUNTOF(adagrad)
               : kind == OPT_SPARSE_ADAM ? COUNTOF(sparse_adam)
                                         : COUNTOF(adam);
  Expr *arg[COUNTOF(adam)] = {0};
  if (e->kind == E_CALL && !fe_bind(e, param, nparam, 1, 0, arg, c->a, c->d))
    return false;
  bool ok = true;
  for (int k = 0; k < nparam; k++) {
    if (!arg[k])
      continue;
    const char *p = param[k];
    if (!strcmp(p, "schedule"))
      ok &= lower_schedule(c, arg[k], t);
    else if (!strcmp(p, "nesterov")) {
      bool on = false;
      ok &= bool_arg(c, arg[k], p, &on);
      t->nesterov = on;
    }
    else if (!strcmp(p, "eps_form"))
      ok &= choice_in(c, arg[k], p, (const char *const[]){"pytorch", "kingma"}, 2,
                      &t->eps_kingma);
    else if (!strcmp(p, "accumulate"))
      ok &= accumulate_arg(c, arg[k], &t->accumulate);
    else {
      /* a number: its range and its place in Train from the IR's field table */
      const IrField *f = ir_field(ir_train_fields, p);
      DTC_ASSERT(f && f->kind == 'f' && f->range);
      ok &= real_in(c, arg[k], p, f->range, (double *)((char *)t + f->off));
    }
  }
  if (ok && t->nesterov && t->momentum == 0) {
    diag_error(c->d, e->loc, "'nesterov' needs a momentum above 0");
    ok = false;
  }
  /* torch.optim.SGD refuses Nesterov momentum with dampening */
  if (ok && t->nesterov && t->dampening != 0) {
    diag_error(c->d, arg[6]->loc, "'nesterov' needs 'dampening' 0, not %g", t->dampening);
    ok = false;
  }
  return ok;
}

/* ---- statements ---- */

static void emit_output(Ctx *c, const char *name, Inst *v, Loc at) {
  Inst *o = ir_new(c->f, OP_output, at, 1, &v);
  ir_set_str(o, "name", name);
  finish(c, o);
}

/* Whether s applies a block: [repeat(N)] BLOCK(args) [as NAME]. */
static bool is_apply(const Ctx *c, const Stmt *s) {
  if ((s->kind != S_ASSIGN && s->kind != S_OUTPUT) || !s->val)
    return false;
  if (s->count || s->inst)
    return true;
  return s->val->kind == E_CALL && !find_builtin(s->val->s) && find_block(c->prog, s->val->s);
}

/* The instance name of application s (the block's by default), and where. */
static const char *inst_name(const Stmt *s, Loc *at) {
  *at = s->inst ? s->inst_loc : s->val->loc;
  return s->inst ? s->inst : s->val->s;
}

static Inst *lower_apply(Ctx *c, const Stmt *s);

/* Lowers the value of `name = expr`; the new instruction takes the name. A
 * block's value takes it too, unless it is a load or an arg. */
static void lower_assign(Ctx *c, const Stmt *s, Name *n) {
  int before = c->f->inst.n;
  bool apply = is_apply(c, s);
  Inst *v = apply ? lower_apply(c, s) : lower_expr(c, s->val);
  if (!v) {
    n->bad = true;
    return;
  }
  if (v->id >= before && (apply ? v->op != OP_load && v->op != OP_arg : !v->name))
    v->name = vname(c, s->name);
  n->val = v;
}

/* output name [= expr] */
static void lower_output(Ctx *c, const Stmt *s, Name *n) {
  Inst *v;
  if (s->val) {
    lower_assign(c, s, n);
    v = n->val;
  } else {
    v = ref(c, s->name, s->name_loc);
    n = lookup(c, s->name);
  }
  if (!v)
    return;
  if (n->output) {
    diag_error(c->d, s->name_loc, "'%s' is already an output", s->name);
    return;
  }
  n->output = true;
  emit_output(c, s->name, v, s->name_loc);
}

static void lower_minimize(Ctx *c, const Stmt *s) {
  if (c->minimized) {
    diag_error(c->d, s->loc, "a second minimize statement; a model has at most one");
    return;
  }
  c->minimized = true;
  Train *t = &c->m->train;
  t->loc = s->loc;
  bool ok = lower_optimizer(c, s->val, t);
  Inst *v = ref(c, s->name, s->name_loc);
  if (!v || !ok)
    return;
  char buf[128];
  if (v->type.dtype != DT_F32 || v->type.rank != 0) {
    diag_error(c->d, s->name_loc, "the minimized value must be an f32 scalar; '%s' is %s", s->name,
               type_str(&v->type, buf, sizeof buf));
    return;
  }
  t->loss = s->name;
  Name *n = lookup(c, s->name);
  if (!n->output) {
    n->output = true;
    emit_output(c, s->name, v, s->name_loc);
  }
}

/* Defines the names the statements of c define: values, inputs, params and
 * instances. */
static void define_stmts(Ctx *c) {
  static const NameKind kinds[] = {[S_INPUT] = N_INPUT, [S_PARAM] = N_PARAM, [S_ASSIGN] = N_VALUE,
                                   [S_OUTPUT] = N_VALUE, [S_BUFFER] = N_PARAM};
  bool block = c->decl->kind == D_BLOCK;
  const StmtList *body = &c->decl->body;
  for (int k = 0; k < body->n && !diag_full(c->d); k++) {
    const Stmt *s = body->a[k];
    if ((s->kind == S_INPUT && !block) || s->kind == S_PARAM || s->kind == S_BUFFER ||
        s->kind == S_ASSIGN || (s->kind == S_OUTPUT && s->val && !block))
      c->def[k] = define(c, s->name, kinds[s->kind], s->name_loc, k);
    if (c->def[k] && s->kind == S_BUFFER)
      c->def[k]->buffer = true;
    if (is_apply(c, s) && (!block || s->kind == S_ASSIGN)) {
      Loc at;
      c->inst[k] = define(c, inst_name(s, &at), N_INST, at, k);
    }
  }
}

/* Lowers the statements of c in order; a block's return sets c->ret. */
static void lower_stmts(Ctx *c) {
  const StmtList *body = &c->decl->body;
  for (c->cur = 0; c->cur < body->n && !diag_full(c->d); c->cur++) {
    const Stmt *s = body->a[c->cur];
    Name *n = c->def[c->cur];
    switch (s->kind) {
    case S_INPUT:
    case S_PARAM:
    case S_BUFFER:
      if (n)
        lower_decl(c, s, n);
      break;
    case S_ASSIGN:
      if (n)
        lower_assign(c, s, n);
      break;
    case S_OUTPUT:
      if (n || !s->val)
        lower_output(c, s, n);
      break;
    case S_MINIMIZE:
      lower_minimize(c, s);
      break;
    case S_RETURN:
      if (c->decl->kind == D_BLOCK)
        c->ret = lower_expr(c, s->val);
      else
        diag_error(c->d, s->loc, "'return' belongs in a block; a model's results are its outputs");
      break;
    default:
      DTC_UNREACHABLE();
    }
  }
}

/* ---- blocks ---- */

/* The namespace of c: hash table and statement slots; for a block also the
 * model's dimensions, its args and the names its statements define. */
static void open_scope(Ctx *c) {
  const Decl *dc = c->decl;
  bool block = dc->kind == D_BLOCK;
  int names = 2 * dc->body.n + dc->dims.n + dc->args.n + (block ? c->m->dim.n : 0);
  for (c->cap = 16; c->cap < 2 * names; c->cap *= 2) {}
  c->tab = arena_alloc(c->a, sizeof(Name *) * (size_t)c->cap);
  c->def = arena_alloc(c->a, sizeof(Name *) * (size_t)(dc->body.n + 1));
  c->inst = arena_alloc(c->a, sizeof(Name *) * (size_t)(dc->body.n + 1));
  if (!block)
    return;
  for (int k = 0; k < c->m->dim.n; k++) {
    const Dim *dm = &c->m->dim.a[k];
    Name *n = define(c, dm->name, N_DIM, dm->loc, -1);
    if (n)
      n->dim = dm->value;
  }
  for (int k = 0; k < dc->args.n; k++)
    define(c, dc->args.a[k]->s, N_VALUE, dc->args.a[k]->loc, -1);
  define_stmts(c);
}

static const char *did_you_mean_block(Ctx *c, const char *name) {
  const char **cand = arena_alloc(c->a, sizeof(char *) * (size_t)(c->prog->nblk + 1));
  for (int k = 0; k < c->prog->nblk; k++)
    cand[k] = c->prog->blk[k].decl->name;
  return fe_did_you_mean(c->a, name, cand, c->prog->nblk);
}

/* Numbers the args of body b: the block's nargs args first (already
 * numbered), then its stacked params in order; moves them to the top. */
static void number_args(Ctx *b, int nargs) {
  Func *f = b->f;
  for (int k = 0; k < b->stacked.n; k++)
    ir_set_int(b->stacked.a[k].arg, "index", nargs + k);
  Inst **order = arena_alloc(b->a, sizeof(Inst *) * (size_t)(f->inst.n + 1));
  int j = nargs + b->stacked.n;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    order[i->op == OP_arg ? ir_get_int(i, "index", 0) : j++] = i;
  }
  memcpy(f->inst.a, order, sizeof(Inst *) * (size_t)f->inst.n);
  ir_renumber(f);
}

/* The args of an application bound and lowered in c: val[k] for the block's
 * arg k, each[k] when it is an `each` argument of a repeat of count n. */
static bool lower_apply_args(Ctx *c, const Stmt *s, const Decl *bd, int64_t n, Inst **val,
                             bool *each) {
  const Expr *call = s->val;
  int nargs = bd->args.n;
  const char **names = arena_alloc(c->a, sizeof(char *) * (size_t)(nargs + 1));
  Expr **arg = arena_alloc(c->a, sizeof(Expr *) * (size_t)(nargs + 1));
  for (int k = 0; k < nargs; k++)
    names[k] = bd->args.a[k]->s;
  if (!fe_bind(call, names, nargs, nargs, nargs, arg, c->a, c->d))
    return false;
  bool ok = true;
  for (int k = 0; k < nargs; k++) {
    const Expr *e = arg[k];
    each[k] = s->count && e->kind == E_EACH;
    if (each[k] && k == 0) {
      diag_error(c->d, e->loc, "the first argument of a repeat is carried from one iteration to "
                 "the next; it cannot be 'each'");
      ok = false;
      continue;
    }
    val[k] = lower_expr(c, each[k] ? e->lhs : e);
    if (!val[k]) {
      ok = false;
    } else if (each[k] && (val[k]->type.rank == 0 || val[k]->type.dim[0] != n)) {
      char buf[128];
      diag_error(c->d, e->loc, "'each' needs a leading dimension of %lld, the count of the "
                 "repeat; argument '%s' of '%s' is %s", (long long)n, names[k], bd->name,
                 type_str(&val[k]->type, buf, sizeof buf));
      ok = false;
    }
  }
  return ok;
}

/* [repeat(N)] BLOCK(args) [as NAME] in c. Without repeat the block is lowered
 * into c's function and its return value is the result; with it, into a body
 * function named after the instance, run by a new `repeat` (the result):
 * operands the carried first arg, the args read whole, the `each` ones, the
 * stacked params. */
static Inst *lower_apply(Ctx *c, const Stmt *s) {
  const Expr *call = s->val;
  if (call->kind != E_CALL) {
    diag_error(c->d, s->inst_loc, "'as' names the instance of a block application, as in "
               "'y = BLOCK(x) as NAME'");
    return NULL;
  }
  Block *b = find_block(c->prog, call->s);
  if (!b) {
    if (find_builtin(call->s))
      diag_error(c->d, call->loc, "'%s' is a built-in function, not a block", call->s);
    else
      diag_error(c->d, call->loc, "unknown block '%s'%s", call->s, did_you_mean_block(c, call->s));
    return NULL;
  }
  if (b->bad || !c->inst[c->cur])
    return NULL;
  if (c->depth == FE_MAX_BLOCK_NEST) {
    diag_error(c->d, call->loc, "blocks applied inside each other more than %d deep",
               FE_MAX_BLOCK_NEST);
    return NULL;
  }
  if (c->prog->inst.n == FE_MAX_INSTANCES) {
    diag_error(c->d, call->loc, "more than %d block applications in one model", FE_MAX_INSTANCES);
    return NULL;
  }
  const Decl *bd = b->decl;
  int64_t n = 0;
  if (s->count) {
    if (!int_arg(c, s->count, "the count of 'repeat'", &n))
      return NULL;
    if (n < 1 || n > IR_MAX_DIM) {
      diag_error(c->d, s->count->loc, n < 1 ? "the count of 'repeat' must be 1 or more, not %lld"
                                            : "the count of 'repeat' must be at most 2^40, not %lld",
                 (long long)n);
      return NULL;
    }
    if (bd->args.n == 0) {
      diag_error(c->d, call->loc, "'repeat' carries the first argument of block '%s' from one "
                 "iteration to the next, but '%s' takes none", bd->name, bd->name);
      return NULL;
    }
  }
  int nargs = bd->args.n, neach = 0;
  Inst **val = arena_alloc(c->a, sizeof(Inst *) * (size_t)(nargs + 1));
  bool *each = arena_alloc(c->a, sizeof(bool) * (size_t)(nargs + 1));
  if (!lower_apply_args(c, s, bd, n, val, each))
    return NULL;
  Loc at;
  const char *path = join(c, c->path, inst_name(s, &at));
  if (s->count && (ir_find_func(c->m, path) || !strcmp(path, "train_step"))) {
    diag_error(c->d, at, "a repeat named '%s' would take the name of the model's function @%s; "
               "name it with 'as NAME'", path, path);
    return NULL;
  }

  Ctx *bc = arena_alloc(c->a, sizeof *bc);
  *bc = (Ctx){.a = c->a, .d = c->d, .m = c->m, .f = c->f, .prog = c->prog, .decl = bd, .up = c,
              .app = s, .inlined = !s->count, .path = path, .vpath = "", .depth = c->depth + 1,
              .n = n};
  vec_push(c->a, &c->prog->inst, bc);
  if (s->count) {
    bc->f = ir_add_func(c->m, path, bd->name_loc);
    bc->f->body = true;
  } else {
    bc->vpath = arena_printf(c->a, "%s%s.", c->vpath, inst_name(s, &at));
  }
  open_scope(bc);
  for (int k = 1; k < nargs; k++)
    neach += each[k];
  for (int k = 0, whole = 1, cut = nargs - neach; k < nargs; k++) {
    Name *an = lookup(bc, bd->args.a[k]->s);
    if (!s->count) {
      an->val = val[k];
      continue;
    }
    Type t = val[k]->type;
    if (each[k]) {
      t.rank--;
      memmove(t.dim, t.dim + 1, sizeof(int64_t) * (size_t)t.rank);
      t.dim[t.rank] = 0;
    }
    Inst *arg = ir_new(bc->f, OP_arg, bd->args.a[k]->loc, 0, NULL);
    arg->name = bd->args.a[k]->s;
    arg->type = t;
    ir_set_int(arg, "index", k == 0 ? 0 : each[k] ? cut++ : whole++);
    an->val = finish(bc, arg);
  }

  int nerr = c->d->nerr;
  Ctx *caller = c->prog->cur;
  c->prog->cur = bc;
  lower_stmts(bc);
  Inst *r = bc->ret;
  const Stmt *rs = bd->body.a[bd->body.n - 1];
  if (r && s->count && !type_eq(&r->type, &val[0]->type)) {
    char b1[128], b2[128];
    diag_error(c->d, rs->val->loc, "a repeat carries the value of block '%s' into its first "
               "argument '%s', but it returns %s where '%s' is %s", bd->name, bd->args.a[0]->s,
               type_str(&r->type, b1, sizeof b1), bd->args.a[0]->s,
               type_str(&val[0]->type, b2, sizeof b2));
    r = NULL;
  }
  c->prog->cur = caller;
  if (!r || !s->count)
    return r;
  Inst *out = ir_new(bc->f, OP_output, rs->loc, 1, &r);
  ir_set_str(out, "name", bd->args.a[0]->s);
  finish(bc, out);
  if (c->d->nerr != nerr)
    return NULL;
  number_args(bc, nargs);

  int nin = nargs + bc->stacked.n;
  if (nin > ir_ops[OP_repeat].maxin) {
    diag_error(c->d, s->repeat_loc, "a repeat of more than %d args and params",
               ir_ops[OP_repeat].maxin);
    return NULL;
  }
  Inst **in = arena_alloc(c->a, sizeof(Inst *) * (size_t)nin);
  int j = 0;
  in[j++] = val[0];
  for (int pass = 0; pass < 2; pass++)
    for (int k = 1; k < nargs; k++)
      if (each[k] == (pass == 1))
        in[j++] = val[k];
  for (int k = 0; k < bc->stacked.n; k++) {
    const Stacked *sp = &bc->stacked.a[k];
    Type t = sp->type;
    if (!stack_type(c, &t, n, sp->global, s->repeat_loc) || !(in[j++] = stacked_value(c, sp, t)))
      return NULL;
  }
  if (s->mode && strcmp(s->mode, "remat")) {
    diag_error(c->d, s->mode_loc, "unknown option '%s' of 'repeat' (the one option is remat)",
               s->mode);
    return NULL;
  }
  Inst *rep = ir_new(c->f, OP_repeat, s->repeat_loc, nin, in);
  ir_set_str(rep, "body", path);
  ir_set_int(rep, "n", n);
  ir_set_int(rep, "carry", 1);
  ir_set_int(rep, "stacked", neach + bc->stacked.n);
  if (s->mode) {
    ir_set_int(rep, "remat", 1);
    if (!c->prog->remat.file)
      c->prog->remat = s->mode_loc;
  }
  return finish(c, rep);
}

/* What a block is whatever applies it: the statements it takes, one return
 * last, names defined once and not a dimension's; bad after reporting. */
static void check_block(Ctx *model, Block *b) {
  static const char *const misplaced[] = {
      [S_INPUT] = "'input' is not allowed in a block: a block's values come in as its arguments",
      [S_OUTPUT] = "'output' is not allowed in a block: a block's value is the one it returns",
      [S_MINIMIZE] = "'minimize' is not allowed in a block: only a model minimizes",
  };
  const Decl *bd = b->decl;
  int nerr = model->d->nerr;
  if (find_builtin(bd->name))
    diag_error(model->d, bd->name_loc, "block '%s' has the name of a built-in function", bd->name);
  bool ret = false;
  for (int k = 0; k < bd->body.n; k++) {
    const Stmt *s = bd->body.a[k];
    if (s->kind == S_INPUT || s->kind == S_OUTPUT || s->kind == S_MINIMIZE)
      diag_error(model->d, s->loc, "%s", misplaced[s->kind]);
    else if (s->kind == S_RETURN && k != bd->body.n - 1)
      diag_error(model->d, s->loc, "'return' must be the last statement of block '%s'", bd->name);
    ret |= s->kind == S_RETURN;
  }
  if (!ret)
    diag_error(model->d, bd->name_loc, "block '%s' has no return: its last statement must be "
               "'return VALUE'", bd->name);
  Ctx t = {.a = model->a, .d = model->d, .m = model->m, .prog = model->prog, .decl = bd,
           .path = "", .vpath = ""};
  open_scope(&t);
  b->bad = model->d->nerr != nerr;
}

/* Depth first from b along applications: each that closes a cycle (a block
 * applying itself, directly or not) is an error there; its blocks are bad. */
static void check_cycles(Ctx *model, Block *b, Block **path, int depth) {
  b->mark = 1;
  path[depth] = b;
  const StmtList *body = &b->decl->body;
  for (int k = 0; k < body->n; k++) {
    const Stmt *s = body->a[k];
    Block *t = is_apply(model, s) && s->val->kind == E_CALL ? find_block(model->prog, s->val->s)
                                                             : NULL;
    if (t && t->mark == 1) {
      int from = depth;
      while (path[from] != t)
        from--;
      const char *chain = "";
      for (int j = from; j <= depth; j++) {
        chain = arena_printf(model->a, "%s%s -> ", chain, path[j]->decl->name);
        path[j]->bad = true;
      }
      diag_error(model->d, s->val->loc, "block '%s' applies itself: %s%s", t->decl->name, chain,
                 t->decl->name);
    } else if (t && t->mark == 0) {
      check_cycles(model, t, path, depth + 1);
    }
  }
  b->mark = 2;
}

/* ---- dimensions ---- */

/* Applies -D NAME=VALUE overrides; *over[k] gets the value for dimension
 * statement k, or 0. */
static bool read_defs(Ctx *c, const Decl *md, const char *const *defs, int ndefs, int64_t *over) {
  bool ok = true;
  for (int k = 0; k < ndefs; k++) {
    const char *eq = strchr(defs[k], '=');
    if (!eq || eq == defs[k]) {
      diag_error(c->d, (Loc){0}, "-D %s: expected NAME=VALUE", defs[k]);
      ok = false;
      continue;
    }
    char *name = arena_strndup(c->a, defs[k], (size_t)(eq - defs[k]));
    int j = 0;
    while (j < md->dims.n && strcmp(md->dims.a[j]->name, name))
      j++;
    if (j == md->dims.n) {
      const char **cand = arena_alloc(c->a, sizeof(char *) * (size_t)(md->dims.n + 1));
      for (int i = 0; i < md->dims.n; i++)
        cand[i] = md->dims.a[i]->name;
      diag_error(c->d, (Loc){0}, "-D %s: model '%s' has no dimension '%s'%s", defs[k], md->name, name,
                 fe_did_you_mean(c->a, name, cand, md->dims.n));
      ok = false;
      continue;
    }
    const char *v = eq + 1;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || n <= 0 || n > IR_MAX_DIM) {
      diag_error(c->d, (Loc){0}, "-D %s: the value must be an integer from 1 to %lld", defs[k],
                 (long long)IR_MAX_DIM);
      ok = false;
      continue;
    }
    over[j] = n;
  }
  return ok;
}

/* dim = [ "batch" ] NAME "=" value; a value may use earlier dimensions. */
static bool lower_dims(Ctx *c, const Decl *md, const char *const *defs, int ndefs) {
  int64_t *over = arena_alloc(c->a, sizeof(int64_t) * (size_t)(md->dims.n + 1));
  bool ok = read_defs(c, md, defs, ndefs, over), batch = false;
  for (int k = 0; k < md->dims.n; k++) {
    const Stmt *s = md->dims.a[k];
    if (s->role && strcmp(s->role, "batch")) {
      diag_error(c->d, s->role_loc, "unknown word '%s' before a dimension (only 'batch' may stand there)",
                 s->role);
      ok = false;
    } else if (s->role && batch) {
      diag_error(c->d, s->role_loc, "a second batch dimension");
      ok = false;
    }
    batch |= s->role != NULL;
    int64_t v = over[k];
    if (!v && (!int_arg(c, s->val, "a dimension", &v) || !dim_ok(c, v, s->val->loc))) {
      ok = false;
      v = 1;
    }
    Name *n = define(c, s->name, N_DIM, s->name_loc, -1);
    if (!n) {
      ok = false;
      continue;
    }
    n->dim = v;
    if (s->role)
      c->m->batch = v;
    Dim dim = {s->name, v, s->name_loc};
    vec_push(c->a, &c->m->dim, dim);
  }
  return ok;
}

Module *lower_model(Arena *a, const Decl *md, const Decl *const *blocks, int nblocks,
                    const char *const *defs, int ndefs, bool **used, Diag *d) {
  int nerr = d->nerr;
  Prog prog = {.nblk = nblocks};
  prog.blk = arena_alloc(a, sizeof(Block) * (size_t)(nblocks + 1));
  for (int k = 0; k < nblocks; k++)
    prog.blk[k].decl = blocks[k];
  Ctx c = {.a = a, .d = d, .prog = &prog, .decl = md, .path = "", .vpath = ""};
  prog.cur = &c;
  c.m = ir_module_new(a, md->name);
  c.m->loc = md->name_loc;
  c.f = ir_add_func(c.m, "forward", md->name_loc);
  open_scope(&c);
  lower_dims(&c, md, defs, ndefs);
  for (int k = 0; k < nblocks && !diag_full(d); k++)
    check_block(&c, &prog.blk[k]);
  Block **path = arena_alloc(a, sizeof(Block *) * (size_t)(nblocks + 1));
  for (int k = 0; k < nblocks && !diag_full(d); k++)
    if (!prog.blk[k].mark)
      check_cycles(&c, &prog.blk[k], path, 0);

  void (*context)(Diag *, void *) = d->context;
  void *context_arg = d->context_arg;
  d->context = apply_notes;
  d->context_arg = &prog;
  define_stmts(&c);
  lower_stmts(&c);
  if (c.m->train.loss && prog.single.file) {
    char buf[128];
    diag_error(d, prog.single, "'batch_norm' of %s has one value per channel: training needs "
               "more than one", type_str(&prog.single_type, buf, sizeof buf));
  }

  *used = arena_alloc(a, sizeof(bool) * (size_t)(c.m->global.n + 1));
  for (int k = 0; k < c.f->inst.n; k++)
    if (c.f->inst.a[k]->op == OP_load)
      (*used)[ir_global_of(c.f->inst.a[k]) - c.m->global.a] = true;
  bool ok = d->nerr == nerr;
  if (ok && !c.m->train.loss && prog.remat.file)
    diag_warn(d, prog.remat, "'remat' has no effect: the model does not train (no 'minimize'), "
              "so there is no backward to recompute the forward in");
  for (int k = 0; k < c.names.n && ok && (d->wflags & W_UNUSED); k++) {
    Name *n = c.names.a[k];
    if (n->kind == N_PARAM && !n->val)
      diag_warn(d, n->loc, "%s '%s' is never used", n->buffer ? "buffer" : "param", n->name);
  }
  for (int k = 0; k < c.names.n && ok; k++) {
    Name *n = c.names.a[k];
    if (n->kind == N_PARAM && n->buffer && n->val && !n->updated)
      diag_warn(d, n->loc, "buffer '%s' is never updated: no batch_norm names it, so it keeps its "
                "initial value (declare it 'param' to train it)", n->name);
  }
  for (int j = 0; j < prog.inst.n && ok; j++) {
    Ctx *bc = prog.inst.a[j];
    prog.cur = bc;
    for (int k = 0; k < bc->names.n; k++) {
      Name *n = bc->names.a[k];
      if (n->kind == N_PARAM && !n->used && !(d->wflags & W_UNUSED))
        continue;
      if (n->kind == N_PARAM && !n->used)
        diag_warn(d, n->loc, "%s '%s' of block '%s' is never used", n->buffer ? "buffer" : "param",
                  n->name, bc->decl->name);
      else if (n->kind == N_PARAM && n->buffer && !n->updated)
        diag_warn(d, n->loc, "buffer '%s' of block '%s' is never updated: no batch_norm names it, "
                  "so it keeps its initial value (declare it 'param' to train it)", n->name,
                  bc->decl->name);
    }
  }
  d->context = context;
  d->context_arg = context_arg;
  return ok ? c.m : NULL;
}
