/* ast.h: the syntax tree of .dt files and the frontend's internal interface
 * (parser, lowering of models, clusters and parallel blocks). */
#ifndef DTC_AST_H
#define DTC_AST_H

#include "ir.h"

#define FE_MAX_NEST 256      /* open parentheses and brackets */
#define FE_MAX_DEPTH 1000    /* operators in one expression tree, root to leaf */
#define FE_MAX_BLOCK_NEST 64 /* block applications inside block applications */
#define FE_MAX_INSTANCES 4096 /* block applications lowered in one model */

typedef enum {
  E_NUM,      /* 42, 0.1, 1e-3 */
  E_QUANT,    /* a number with a unit: 16GiB, 20GB/s, 1us */
  E_STR,      /* "aarch64-linux-gnu" */
  E_IDENT,
  E_CALL,     /* name(args) */
  E_LIST,     /* [a, b]; items are unnamed args */
  E_BINARY,
  E_NEG,
  E_STAR,     /* '*' in a shard spec: not split */
  E_EACH,     /* each x: an argument of a repeat cut along its leading dim; lhs is x */
  E_INDEX,    /* x[items]: lhs is x, args its items (an expression, E_RANGE or E_DOTS) */
  E_RANGE,    /* begin:end in an index; lhs, rhs NULL when left out */
  E_DOTS,     /* ... in an index */
  E_ERROR,    /* already reported */
} ExprKind;

typedef struct Expr Expr;

/* E_BINARY's op for the operators of two characters. */
typedef enum { B_LE = 256, B_GE, B_EQ, B_NE } BinOp;

/* Whether op compares: < > <= >= == != */
static inline bool ast_compare(int op) {
  return op == '<' || op == '>' || op == B_LE || op == B_GE || op == B_EQ || op == B_NE;
}

/* An argument of a call: positional when name is NULL. */
typedef struct Arg {
  const char *name;
  Loc loc;               /* the keyword, or the value when positional */
  Expr *val;
} Arg;

typedef VEC(Arg) ArgList;
typedef VEC(Expr *) ExprList;

struct Expr {
  ExprKind kind;
  Loc loc;               /* the operator of E_BINARY and E_NEG, the name of E_CALL */
  int depth;             /* height of this tree */
  bool is_int;           /* E_NUM, E_QUANT: written as an integer */
  int64_t i;             /* its value when is_int */
  double f;              /* the value, integer or not */
  const char *s;         /* E_IDENT and E_CALL name, E_STR text, E_QUANT unit */
  int op;                /* E_BINARY: '+' '-' '*' '/' '@' '<' '>', or a BinOp */
  Expr *lhs, *rhs;       /* E_BINARY; E_NEG uses lhs */
  ArgList args;          /* E_CALL arguments, E_LIST items */
  ArgList sizes;         /* E_CALL of a sized block, BLOCK(sizes)(args) */
  bool sized;            /* E_CALL written with sizes (maybe none: BLOCK()(args)) */
};

typedef struct TypeExpr {
  const char *dtype;     /* "f32", "i32" */
  Loc loc;
  ExprList dim;
} TypeExpr;

typedef enum {
  S_DIM,        /* model header: [role] name = default */
  S_INPUT,      /* input name: type */
  S_PARAM,      /* param name: type [init val] */
  S_ASSIGN,     /* name = val */
  S_OUTPUT,     /* output name [= val] */
  S_MINIMIZE,   /* minimize name with val */
  S_NODE,       /* node name { body } */
  S_DEVICE,     /* device name: val */
  S_LINK,       /* link val (a call named intra or inter) */
  S_COLLECTIVE, /* collective val (a call named after the op) */
  S_MESH,       /* mesh name[axes] [over list] */
  S_SHARD,      /* shard name: [list], or shard name: on val (val: axis[index]) */
  S_PLAN,       /* plan name */
  S_RETURN,     /* return val (a block's value) */
  S_BUFFER,     /* buffer name: type [init val] (a tensor the step updates, not trained) */
} StmtKind;

typedef struct Stmt Stmt;
typedef VEC(Stmt *) StmtList;

struct Stmt {
  StmtKind kind;
  Loc loc;               /* the statement's keyword, or its name */
  const char *name;
  Loc name_loc;
  const char *role;      /* S_DIM: the word before the name, or NULL */
  Loc role_loc;
  TypeExpr *type;        /* S_INPUT, S_PARAM, S_BUFFER */
  Expr *val;             /* NULL when absent */
  ArgList axes;          /* S_MESH: axis = size */
  ExprList list;         /* S_MESH devices (E_IDENT), S_SHARD entries */
  StmtList body;         /* S_NODE devices */
  /* S_ASSIGN, S_OUTPUT with a value: a block application `[repeat(count)]
   * BLOCK(args) [as inst]` when val is a call and count or inst is given, or
   * val's name is a block's. */
  Expr *count;           /* the N of repeat(N); NULL: not a repeat */
  Loc repeat_loc;        /* the word repeat */
  const char *mode;      /* repeat(N, MODE): "remat"; NULL when absent */
  Loc mode_loc;
  const char *inst;      /* the name after 'as'; NULL when absent */
  Loc inst_loc;
  const char *flag;      /* S_PARAM: the word after the type and init ("sparse"), or NULL */
  Loc flag_loc;
  /* S_ASSIGN of several names `a, b = ...` or `(h, c), ys = repeat(N) ...`:
   * every name (E_IDENT), the first is name; S_RETURN of several values
   * `return a, b`: every value, the first is val. Empty otherwise. */
  ExprList names;
  int carried;           /* S_ASSIGN: names in the first group, (h, c); 0: no parentheses */
};

typedef enum { D_IMPORT, D_MODEL, D_CLUSTER, D_PARALLEL, D_BLOCK } DeclKind;

/* A top-level item. */
typedef struct Decl {
  DeclKind kind;
  Loc loc;               /* the keyword */
  const char *name;      /* model, cluster, block, the parallel block's model, the import path */
  Loc name_loc;
  const char *on;        /* D_PARALLEL: the cluster */
  Loc on_loc;
  StmtList dims;         /* D_MODEL: S_DIM */
  ExprList args;         /* D_BLOCK: its arguments' names (E_IDENT) */
  ExprList sizes;        /* D_BLOCK: its sizes' names, block NAME(sizes)(args) */
  bool sized;            /* D_BLOCK: written with a list of sizes (maybe empty) */
  StmtList body;
} Decl;

typedef VEC(Decl *) DeclList;

/* ---- lex.l, parse.y --------------------------------------------------- */

/* State shared by the scanner and the parser of one file. */
typedef struct Parser {
  Arena *a;
  Diag *d;
  const SrcFile *file;
  DeclList *out;
  int line, col;         /* position of the next byte */
  int eline, ecol;       /* just past the last token: where end of file is reported */
  int last;              /* the last token returned, for newline handling */
  int nest;              /* open parentheses and brackets */
  bool stop;             /* the scanner gave up; the parser's complaint is dropped */
} Parser;

/* Appends src's top-level items to out; false after reporting errors. */
bool ast_parse(Arena *a, const SrcFile *src, Diag *d, DeclList *out);
Expr *ast_expr(Parser *p, ExprKind kind, Loc loc);

/* ---- frontend.c ------------------------------------------------------- */

/* A constant: an integer (is_int) or a real number. */
typedef struct Num { bool is_int; int64_t i; double f; } Num;

/* Evaluates a constant expression of numbers, dimension names, inf and nan
 * (names that are not dimensions), + - * / and sqrt(x); false after
 * reporting why e is not one. */
bool fe_eval(const Expr *e, const Dim *dim, int ndim, Num *out, Diag *d);
bool fe_eval_int(const Expr *e, const Dim *dim, int ndim, const char *what, int64_t *out, Diag *d);
/* A finite number. */
bool fe_eval_float(const Expr *e, const Dim *dim, int ndim, const char *what, double *out, Diag *d);
/* A number that may be -inf or inf, but not NaN. */
bool fe_eval_real(const Expr *e, const Dim *dim, int ndim, const char *what, double *out, Diag *d);
/* The candidate closest to name by edit distance, if close enough; else NULL. */
const char *fe_suggest(const char *name, const char *const *cand, int n);
/* ", did you mean 'x'?" for the message of an unknown name, or "". */
const char *fe_did_you_mean(Arena *a, const char *name, const char *const *cand, int n);

/* Binds a call's arguments to parameter names: out[k] is the value of param[k]
 * or NULL. The first npos parameters may be given by position, the first nreq
 * must be given. False after reporting an unknown keyword, a repeated one, too
 * many arguments or a missing one. */
bool fe_bind(const Expr *call, const char *const *param, int nparam, int npos, int nreq,
             Expr **out, Arena *a, Diag *d);

/* ---- lower.c ---------------------------------------------------------- */

/* Lowers a model to a module with the function forward, and a body
 * function for each repeat of a block; blocks are the program's D_BLOCK
 * items. used[g] tells whether global g is read. NULL after reporting
 * errors. */
Module *lower_model(Arena *a, const Decl *model, const Decl *const *blocks, int nblocks,
                    const char *const *defs, int ndefs, bool **used, Diag *d);

/* ---- cluster.c -------------------------------------------------------- */

Cluster *lower_cluster(Arena *a, const Decl *c, Diag *d);
/* Meshes, shardings and the plan of a parallel block, against cluster c;
 * devices > 0 (dtc --devices): its one mesh resized to that many devices
 * (see fe_compile_for). */
bool lower_parallel(Module *m, const Decl *par, Cluster *c, const bool *used, int devices,
                    Diag *d);

#endif
