/* lower_int.h: what the files of lowering share (lower.c, scope.c, builtins.c,
 * lower_tensor.c, lower_nn.c, train.c, blocks.c): the context of a model or
 * of an application of a block, its names, and the helpers each file offers
 * the others, in sections named after the file that owns them. Private to
 * frontend/. */
#ifndef DTC_LOWER_INT_H
#define DTC_LOWER_INT_H

#include "ast.h"

typedef enum { N_DIM, N_INPUT, N_PARAM, N_VALUE, N_INST } NameKind;

/* An entry of the namespace of the model or of a block being applied. */
typedef struct Name {
  const char *name;
  NameKind kind;
  Loc loc;
  int stmt;              /* the defining statement's index; -1 for dimensions, -2
                            for a block's sizes */
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
  bool buffer;           /* a buffer: the global is a G_BUFFER, its rows updated */
} Stacked;

/* A buffer's new value in a body: an output of the body, stacked by the
 * repeat into the new value of the caller's (a store, or an update of its
 * own when the caller is a body too). */
typedef struct Update {
  const char *global;    /* the stacked global's name (Stacked.global) */
  Inst *v;               /* the row of this iteration (of every inner iteration) */
  Loc loc;               /* the batch_norm */
} Update;

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
  VEC(Update) updates;   /* a body: the buffers its iterations update, in order */
  Inst *ret;             /* a block: its return value (the first of several) */
  Inst **rets;           /* a block returning several values: each of them */
  int nret;              /* a block: the values its return gives */
  const Dim *dim;        /* a sized block: its sizes, then the model's dimensions */
  int ndim;              /* (NULL: the model's dimensions) */
  const Expr *no_decay;  /* the model: the optimizer's no_decay list, or NULL */
  const Expr *groups;    /* the model: the optimizer's groups, or NULL */
};

/* The dimensions the constant expressions of c may name. */
static inline const Dim *ctx_dims(const Ctx *c, int *n) {
  *n = c->dim ? c->ndim : c->m->dim.n;
  return c->dim ? c->dim : c->m->dim.a;
}

/* ---- scope.c: names, values, instructions ---- */

Name *lookup(Ctx *c, const char *s);
/* ", did you mean 'x'?" for an unknown name s among c's, or "". */
const char *did_you_mean(Ctx *c, const char *s);
/* Defines a name; NULL after reporting a second definition. */
Name *define(Ctx *c, const char *s, NameKind kind, Loc at, int stmt);
/* i with its type inferred; NULL after reporting a shape error at i's loc. */
Inst *finish(Ctx *c, Inst *i);
Inst *constant(Ctx *c, double v, Loc at);
/* Whether the shapes of a and b broadcast together (numpy's rule). */
bool broadcasts(const Inst *a, const Inst *b);
Inst *op1(Ctx *c, Op op, Loc at, Inst *x);
Inst *op2(Ctx *c, Op op, Loc at, Inst *x, Inst *y);
/* The value of a name used at `at`; inputs and params are loaded at first use. */
Inst *ref(Ctx *c, const char *s, Loc at);
/* path.name, or name when path is "". */
const char *join(Ctx *c, const char *path, const char *name);
/* The name value `name` of c takes in its function. */
const char *vname(Ctx *c, const char *name);
/* The context that owns c's function: the model, or a repeat's body. */
Ctx *owner(Ctx *c);
/* Diag's context hook (arg: the Prog): where the enclosing applications are. */
void apply_notes(Diag *d, void *arg);

/* ---- builtins.c: arguments of built-in functions, the table, calls ---- */

typedef struct Builtin Builtin;

/* The lowering of a built-in function (builtins.def): e the call, b its
 * entry, in[k] the tensor of param k and arg[k] the expression of param k,
 * NULL when not given. NULL after reporting. */
typedef Inst *LowerFn(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg);

/* An entry of builtins.def. */
struct Builtin {
  const char *name;
  Op op;                 /* the op it names; OP_COUNT: several or none */
  LowerFn *lower;
  const char *tensors;   /* a letter per leading tensor param: f, p or a
                            (builtins.def); "*": lower binds */
  int ntensor;           /* strlen(tensors) */
  int nreq;              /* leading parameters that are required */
  int nparam;
  const char *param[10];
};

/* The first name in e that is a tensor, not a dimension. */
const Expr *tensor_in(Ctx *c, const Expr *e);
/* Constant arguments; each reports at e and returns false when e is not one. */
bool int_arg(Ctx *c, const Expr *e, const char *what, int64_t *out);
bool float_arg(Ctx *c, const Expr *e, const char *what, double *out);
/* A number that may be -inf or inf, but not NaN. */
bool real_arg(Ctx *c, const Expr *e, const char *what, double *out);
/* A finite number in range r (shared with the IR reader, ir/print.c). */
bool real_in(Ctx *c, const Expr *e, const char *what, const IrRange *r, double *out);
bool bool_arg(Ctx *c, const Expr *e, const char *what, bool *out);
/* Whether e is a number: numbers, dimensions, inf, nan, arithmetic on them. */
bool is_number(Ctx *c, const Expr *e);
/* A tensor, or a number (inf and -inf included) as a scalar constant. */
Inst *tensor_or_number(Ctx *c, const Expr *e, const char *what);
/* An axis of x; negative ones count from the end. */
bool axis_arg(Ctx *c, const Expr *e, const Inst *x, int64_t *out);
/* A dimension: from 1 to IR_MAX_DIM. */
bool dim_ok(Ctx *c, int64_t v, Loc at);
/* A list of at most IR_MAX_RANK integers, as in [B, 16, 64]. */
bool ints_arg(Ctx *c, const Expr *e, const char *what, int64_t *out, int *n);
/* Whether x, the tensor `what` (as in "input", "'weight'") of fn given at e,
 * is f32; a located error otherwise. The one check of builtins.def's "f"
 * params and of the operands of '@'. */
bool f32_arg(Ctx *c, const char *fn, const char *what, const Expr *e, const Inst *x);
/* One of n names: its index into *out. */
bool choice_in(Ctx *c, const Expr *e, const char *what, const char *const *names, int n,
               int64_t *out);
const Builtin *find_builtin(const char *name);

/* ---- lower_tensor.c: axes ---- */

/* Axes of x: one (an int, unless `list`) or the list e, `what` in messages;
 * negative ones count from the end; sorted, each once. */
bool axes_arg(Ctx *c, const Expr *e, const char *what, bool list, const Inst *x, int64_t *axes,
              int *n);
/* The axes of a reduction of x: `axis` (one), `axes` (a list) or torch's
 * `dim` (either), at most one given; none: every axis. */
bool reduce_axes(Ctx *c, const Expr *axis, const Expr *axes, const Expr *dim, const Inst *x,
                 int64_t *out, int *n);
/* A call of a built-in function (or a misplaced block's name: an error). */
Inst *lower_call(Ctx *c, const Expr *e);
/* x[items] as torch indexes: slices, then a reshape dropping indexed dims. */
Inst *lower_index(Ctx *c, const Expr *e);

/* ---- lower_*.c: the lowerings of built-in functions (LowerFn, named in
 * builtins.def): lower_math.c elementwise, lower_tensor.c reductions and
 * reshapes, lower_nn.c convolutions, normalisation, losses, attention ---- */

/* where(m, a, b) of a mask m and f32 values: where_true(m, a) +
 * where_false(m, b). */
Inst *lower_select(Ctx *c, Loc at, Inst *m, Inst *a, Inst *b);
/* v reshaped to shape [dim, n] (v itself when that is its shape). */
Inst *reshaped(Ctx *c, Loc at, Inst *v, const int64_t *dim, int n);

/* ---- lower_index.c: integers as torch promotes them ---- */

/* x OP y of e, a binary expression (not '@'), x or y i32. */
Inst *lower_int_binary(Ctx *c, const Expr *e, Inst *x, Inst *y);
/* where(cond, x, y) with x or y i32, as torch.where: i32 when the other is
 * i32 or an integer, else both f32; arg the call's input and other. */
Inst *lower_int_where(Ctx *c, const Expr *e, Inst *cond, Inst *x, Inst *y, Expr *const *arg);
/* -x of an i32 value. */
Inst *lower_int_neg(Ctx *c, Loc at, Inst *x);
/* relu(x) and abs(x) of an i32 value, i32 as torch's (abs wrapping at
 * -2^31 as torch's). */
Inst *lower_int_relu(Ctx *c, Loc at, Inst *x);
Inst *lower_int_abs(Ctx *c, Loc at, Inst *x);
/* clamp(x, min, max) of an i32 value, arg[0] and arg[1] the bounds' expressions
 * (NULL: absent), bound[j] the value of a tensor bound (NULL: a number):
 * with integer and i32 bounds i32, max then min as torch's; another bound
 * (a number that is not an integer, an f32 tensor) sets *promote and gives
 * NULL: torch computes in f32 then. NULL after reporting (a tensor bound
 * that does not broadcast with x, an integer outside i32). */
Inst *lower_int_clamp(Ctx *c, const Expr *e, Inst *x, Expr *const *arg, Inst *const *bound,
                      bool *promote);
/* min(max(x, lo), hi) of an i32 value (hardtanh's, with its bounds made
 * integers). */
Inst *lower_int_hardtanh(Ctx *c, Loc at, Inst *x, int64_t lo, int64_t hi);
/* maximum(a, b) (max) or minimum(a, b) of two i32 values: i32, as torch's. */
Inst *lower_int_extremum(Ctx *c, Loc at, bool max, Inst *a, Inst *b);
/* pow(x, exponent) of an i32 value: x to an integer power 0 .. 2^31 - 1,
 * i32 (wrapping) as torch's; a negative integer an error, as torch's; a
 * number that is not an integer, or a tensor, sets *promote and gives NULL
 * (f32 then, as torch's). NULL after reporting. */
Inst *lower_int_pow(Ctx *c, const Expr *e, Inst *x, const Expr *exponent, bool *promote);
/* pow(x, y) of an i32 tensor y and an i32 tensor x or (x NULL) the number
 * base, broadcasting: i32 (wrapping) as torch's, a negative power as
 * torch's int pow (1 of 1, 1 or -1 of -1, 0 of the others); a base that is
 * not an integer sets *promote and gives NULL (f32 then, as torch's). NULL
 * after reporting (an integer base outside i32). */
Inst *lower_int_pow_tensor(Ctx *c, const Expr *e, Inst *x, const Expr *base, Inst *y,
                          bool *promote);

/* ---- train.c: minimize, optimizers, schedules ---- */

/* minimize NAME with OPTIMIZER(...): fills c->m->train. */
void lower_minimize(Ctx *c, const Stmt *s);
/* Marks the params of the optimizer's no_decay list and groups, once all
 * are declared. */
void lower_groups(Ctx *c);

/* ---- blocks.c: definitions, applications, repeats ---- */

/* The namespace of c: hash table and statement slots; for a block also the
 * model's dimensions, its args and the names its statements define. */
void open_scope(Ctx *c);
Block *find_block(const Prog *p, const char *name);
/* A new arg of body o for a param (or a buffer, init->kind G_BUFFER) it
 * reads (numbered when the body is done). */
Inst *stacked_arg(Ctx *o, const char *global, Type t, const Global *init, Loc at);
/* The new value v of the buffer `global` in c: a store in the model, an
 * output of the body that owns c (stacked by its repeat) in a repeat. */
void update_buffer(Ctx *c, const char *global, Inst *v, Loc at);
/* [repeat(N)] BLOCK(args) [as NAME] in c. */
/* res[k] for each name of s (s->names, or s->name alone): a block's k-th
 * returned value once, a repeat's carried values then its stacked outputs;
 * NULL after reporting. */
void lower_apply(Ctx *c, const Stmt *s, Inst **res);
/* What a block is whatever applies it; b->bad after reporting. */
void check_block(Ctx *model, Block *b);
/* Each cycle of applications from b is an error; its blocks are bad. */
void check_cycles(Ctx *model, Block *b, Block **path, int depth);

/* ---- lower.c: expressions, declarations, statements, the model ---- */

Inst *lower_expr(Ctx *c, const Expr *e);
/* Whether e is a constant expression: numbers, dimensions, arithmetic. */
bool is_const(Ctx *c, const Expr *e);
/* x OP y of e (a binary expression) on f32 operands lowered already. */
Inst *lower_binary(Ctx *c, const Expr *e, Inst *x, Inst *y);
void emit_output(Ctx *c, const char *name, Inst *v, Loc at);
/* Whether s applies a block: [repeat(N)] BLOCK(args) [as NAME]. */
bool is_apply(const Ctx *c, const Stmt *s);
/* The instance name of application s (the block's by default), and where. */
const char *inst_name(const Stmt *s, Loc *at);
/* Defines the names the statements of c define. */
void define_stmts(Ctx *c);
/* Lowers the statements of c in order; a block's return sets c->ret. */
void lower_stmts(Ctx *c);

#endif
