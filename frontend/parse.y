/* parse.y: the grammar of .dt files, building the syntax tree of ast.h; a bad
 * statement is skipped to the next newline or '}', so a run reports several. */
%code requires {
#include "ast.h"
#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif
}

%code provides {
int felex(FESTYPE *lval, FELTYPE *lloc, yyscan_t scanner);
}

%code {
#include <string.h>

static void feerror(FELTYPE *l, yyscan_t scanner, Parser *p, const char *msg);
static Loc loc(Parser *p, FELTYPE l) { return (Loc){p->file, l.first_line, l.first_column}; }
static Expr *ident(Parser *p, const char *name, FELTYPE l);
static Expr *binary(Parser *p, int op, Expr *lhs, Expr *rhs, FELTYPE l);
static Expr *call(Parser *p, const char *name, FELTYPE l, ArgList args);
static Expr *list(Parser *p, FELTYPE l, ExprList items);
static Expr *each(Parser *p, Expr *x, FELTYPE l);
static Expr *index(Parser *p, Expr *x, ArgList items, FELTYPE l);
static Expr *range(Parser *p, Expr *begin, Expr *end, FELTYPE l);
static Stmt *stmt(Parser *p, StmtKind kind, FELTYPE l);
static Stmt *named(Parser *p, StmtKind kind, FELTYPE l, const char *name, FELTYPE nl);
static Decl *decl(Parser *p, DeclKind kind, FELTYPE l, const char *name, FELTYPE nl);
static Stmt *value(Parser *p, Expr *val, Expr *count, FELTYPE rl, const char *inst, FELTYPE il);
static Stmt *assign(Parser *p, Stmt *s, StmtKind kind, FELTYPE l, const char *name, FELTYPE nl);
static Stmt *several(Parser *p, Stmt *s, FELTYPE l, ExprList group, Expr *first, ExprList rest,
                     int carried);
#define L(x) loc(p, (x))
#define PUSH(v, x) vec_push(p->a, &(v), (x))
}

%define api.pure full
%define api.prefix {fe}
%define parse.error detailed
%locations
%lex-param {yyscan_t scanner}
%parse-param {yyscan_t scanner} {Parser *p}

%union {
  const char *s;
  Expr *e;
  Stmt *st;
  Decl *decl;
  TypeExpr *type;
  Arg arg;
  ArgList args;
  ExprList exprs;
  StmtList stmts;
}

%token END 0 "end of file"
%token <s> IDENT "identifier"
%token <e> NUMBER "number" QUANTITY "number with a unit" STRING "string"
%token NL "newline"
%token MODEL "'model'" CLUSTER "'cluster'" PARALLEL "'parallel'" IMPORT "'import'"
%token INPUT "'input'" PARAM "'param'" OUTPUT "'output'" MINIMIZE "'minimize'"
%token WITH "'with'" INIT "'init'" NODE "'node'" DEVICE "'device'" LINK "'link'"
%token COLLECTIVE "'collective'"
%token MESH "'mesh'" SHARD "'shard'" PLAN "'plan'" ON "'on'" OVER "'over'"
%token BLOCK "'block'" RETURN "'return'" REPEAT "'repeat'" AS "'as'" EACH "'each'"
%token BUFFER "'buffer'"
%token LE "'<='" GE "'>='" EQ "'=='" NE "'!='" DOTS "'...'"

%type <e> expr call callee sdim idx
%type <args> idxs
%type <s> gname
%type <arg> arg axis
%type <args> args axes cargs
%type <exprs> exprs names sdims bnames
%type <type> type
%type <st> dim mstmt value cstmt nstmt pstmt
%type <stmts> dims dimlist mstmts mbody cstmts cbody nstmts nbody pstmts pbody

%nonassoc '<' '>' LE GE EQ NE
%left '+' '-'
%left '*' '/' '@'
%precedence NEG
%precedence '['

%%

/* file = { sep } [ item { sep { sep } item } { sep } ]; the last item needs
 * no sep. A top-level error skips to the end of its line. */
file: items
    | items item
    ;

items: %empty
     | items sep
     | items item sep
     | items error sep
     ;

/* sep = NEWLINE | ";" */
sep: NL | ';' ;

/* A newline is allowed before a block's '{'. */
nl_opt: %empty | NL ;

/* item = import | model | block | cluster | parallel
 * block = "block" IDENT bnames [ bnames ] body: with two lists, the first
 * holds the block's sizes */
item: IMPORT STRING              { Decl *d = decl(p, D_IMPORT, @1, $2->s, @2);
                                   if ($2->kind == E_ERROR) d->name = NULL; }
    | MODEL IDENT '(' dims ')' nl_opt mbody
                                 { Decl *d = decl(p, D_MODEL, @1, $2, @2); d->dims = $4; d->body = $7; }
    | MODEL IDENT '(' error ')' nl_opt mbody
                                 { decl(p, D_MODEL, @1, $2, @2)->body = $7; }
    | MODEL IDENT nl_opt mbody   { decl(p, D_MODEL, @1, $2, @2)->body = $4; }
    | BLOCK IDENT bnames nl_opt mbody
                                 { Decl *d = decl(p, D_BLOCK, @1, $2, @2); d->args = $3; d->body = $5; }
    | BLOCK IDENT bnames bnames nl_opt mbody
                                 { Decl *d = decl(p, D_BLOCK, @1, $2, @2); d->sized = true;
                                   d->sizes = $3; d->args = $4; d->body = $6; }
    | CLUSTER IDENT nl_opt cbody { decl(p, D_CLUSTER, @1, $2, @2)->body = $4; }
    | PARALLEL IDENT ON IDENT nl_opt pbody
                                 { Decl *d = decl(p, D_PARALLEL, @1, $2, @2);
                                   d->on = $4; d->on_loc = L(@4); d->body = $6; }
    ;

/* bnames = "(" [ IDENT { "," IDENT } ] ")": a block's sizes or arguments */
bnames: '(' ')'                  { $$ = (ExprList){0}; }
      | '(' names ')'            { $$ = $2; }
      | '(' error ')'            { $$ = (ExprList){0}; }
      ;

/* dims = [ dim { "," dim } ] */
dims: %empty                     { $$ = (StmtList){0}; }
    | dimlist
    ;

/* dimlist = dim { "," dim } */
dimlist: dim                     { $$ = (StmtList){0}; PUSH($$, $1); }
       | dimlist ',' dim         { $$ = $1; PUSH($$, $3); }
       ;

/* dim = [ role ] IDENT "=" expr */
dim: IDENT '=' expr              { $$ = named(p, S_DIM, @1, $1, @1); $$->val = $3; }
   | IDENT IDENT '=' expr        { $$ = named(p, S_DIM, @2, $2, @2); $$->val = $4;
                                   $$->role = $1; $$->role_loc = L(@1); }
   ;

/* mbody = "{" mstmts [ mstmt ] "}", the body of a model or a block (the
 * lowering tells which statements each takes). As in every block, statements are
 * separated by sep, the last needs none, and after a bad statement errors
 * are reported again from the next one on. */
mbody: '{' mstmts '}'            { $$ = $2; }
     | '{' mstmts mstmt '}'      { $$ = $2; PUSH($$, $3); }
     | '{' mstmts error '}'      { $$ = $2; yyerrok; }
     ;

/* mstmts = { sep | mstmt sep } */
mstmts: %empty                   { $$ = (StmtList){0}; }
      | mstmts sep
      | mstmts mstmt sep         { $$ = $1; PUSH($$, $2); }
      | mstmts error sep         { $$ = $1; yyerrok; }
      ;

/* mstmt = "input" IDENT ":" type
 *       | "param" IDENT ":" type [ "init" callee ] [ IDENT ]   (the word: sparse)
 *       | "buffer" IDENT ":" type [ "init" callee ]
 *       | IDENT "=" value
 *       | IDENT "," IDENT { "," IDENT } "=" value
 *       | "(" IDENT { "," IDENT } ")" { "," IDENT } "=" value   (a repeat's carried group)
 *       | "output" IDENT [ "=" value ]
 *       | "minimize" IDENT "with" callee
 *       | "return" expr { "," expr } */
mstmt: INPUT IDENT ':' type      { $$ = named(p, S_INPUT, @1, $2, @2); $$->type = $4; }
     | PARAM IDENT ':' type      { $$ = named(p, S_PARAM, @1, $2, @2); $$->type = $4; }
     | PARAM IDENT ':' type INIT callee
                                 { $$ = named(p, S_PARAM, @1, $2, @2); $$->type = $4; $$->val = $6; }
     | PARAM IDENT ':' type IDENT
                                 { $$ = named(p, S_PARAM, @1, $2, @2); $$->type = $4;
                                   $$->flag = $5; $$->flag_loc = L(@5); }
     | PARAM IDENT ':' type INIT callee IDENT
                                 { $$ = named(p, S_PARAM, @1, $2, @2); $$->type = $4; $$->val = $6;
                                   $$->flag = $7; $$->flag_loc = L(@7); }
     | BUFFER IDENT ':' type     { $$ = named(p, S_BUFFER, @1, $2, @2); $$->type = $4; }
     | BUFFER IDENT ':' type INIT callee
                                 { $$ = named(p, S_BUFFER, @1, $2, @2); $$->type = $4; $$->val = $6; }
     | IDENT '=' value           { $$ = assign(p, $3, S_ASSIGN, @1, $1, @1); }
     | IDENT ',' names '=' value { $$ = several(p, $5, @1, (ExprList){0}, ident(p, $1, @1), $3, 0); }
     | '(' names ')' '=' value   { $$ = several(p, $5, @1, $2, NULL, (ExprList){0}, $2.n); }
     | '(' names ')' ',' names '=' value
                                 { $$ = several(p, $7, @1, $2, NULL, $5, $2.n); }
     | OUTPUT IDENT              { $$ = named(p, S_OUTPUT, @1, $2, @2); }
     | OUTPUT IDENT '=' value    { $$ = assign(p, $4, S_OUTPUT, @1, $2, @2); }
     | MINIMIZE IDENT WITH callee
                                 { $$ = named(p, S_MINIMIZE, @1, $2, @2); $$->val = $4; }
     | RETURN exprs              { $$ = stmt(p, S_RETURN, @1); $$->val = $2.a[0];
                                   if ($2.n > 1) $$->names = $2; }
     ;

/* value = expr [ "as" IDENT ]
 *       | "repeat" "(" expr [ "," IDENT ] ")" call [ "as" IDENT ]: a value, or
 * a block application (then expr is a call; IDENT after the count an
 * option: remat), of which the statement is made */
value: expr                      { $$ = value(p, $1, NULL, @1, NULL, @1); }
     | expr AS IDENT             { $$ = value(p, $1, NULL, @1, $3, @3); }
     | REPEAT '(' expr ')' call  { $$ = value(p, $5, $3, @1, NULL, @1); }
     | REPEAT '(' expr ')' call AS IDENT
                                 { $$ = value(p, $5, $3, @1, $7, @7); }
     | REPEAT '(' expr ',' IDENT ')' call
                                 { $$ = value(p, $7, $3, @1, NULL, @1); $$->mode = $5;
                                   $$->mode_loc = L(@5); }
     | REPEAT '(' expr ',' IDENT ')' call AS IDENT
                                 { $$ = value(p, $7, $3, @1, $9, @9); $$->mode = $5;
                                   $$->mode_loc = L(@5); }
     ;

/* type = IDENT "[" [ expr { "," expr } ] "]" */
type: IDENT '[' ']'              { $$ = arena_alloc(p->a, sizeof *$$); $$->dtype = $1; $$->loc = L(@1); }
    | IDENT '[' exprs ']'        { $$ = arena_alloc(p->a, sizeof *$$); $$->dtype = $1; $$->loc = L(@1);
                                   $$->dim = $3; }
    ;

/* callee = IDENT | call: an initializer, optimizer or device kind */
callee: IDENT                    { $$ = ident(p, $1, @1); }
      | call
      ;

/* cbody = "{" cstmts [ cstmt ] "}" */
cbody: '{' cstmts '}'            { $$ = $2; }
     | '{' cstmts cstmt '}'      { $$ = $2; PUSH($$, $3); }
     | '{' cstmts error '}'      { $$ = $2; yyerrok; }
     ;

/* cstmts = { sep | cstmt sep } */
cstmts: %empty                   { $$ = (StmtList){0}; }
      | cstmts sep
      | cstmts cstmt sep         { $$ = $1; PUSH($$, $2); }
      | cstmts error sep         { $$ = $1; yyerrok; }
      ;

/* cstmt = "node" IDENT "{" nstmts "}" | "link" call | "collective" call */
cstmt: NODE IDENT nl_opt nbody   { $$ = named(p, S_NODE, @1, $2, @2); $$->body = $4; }
     | LINK call                 { $$ = named(p, S_LINK, @1, $2->s, @2); $$->val = $2; }
     | COLLECTIVE call           { $$ = named(p, S_COLLECTIVE, @1, $2->s, @2); $$->val = $2; }
     ;

/* nbody = "{" nstmts [ nstmt ] "}" */
nbody: '{' nstmts '}'            { $$ = $2; }
     | '{' nstmts nstmt '}'      { $$ = $2; PUSH($$, $3); }
     | '{' nstmts error '}'      { $$ = $2; yyerrok; }
     ;

/* nstmts = { sep | nstmt sep } */
nstmts: %empty                   { $$ = (StmtList){0}; }
      | nstmts sep
      | nstmts nstmt sep         { $$ = $1; PUSH($$, $2); }
      | nstmts error sep         { $$ = $1; yyerrok; }
      ;

/* nstmt = "device" IDENT ":" callee */
nstmt: DEVICE IDENT ':' callee   { $$ = named(p, S_DEVICE, @1, $2, @2); $$->val = $4; }
     ;

/* pbody = "{" pstmts [ pstmt ] "}" */
pbody: '{' pstmts '}'            { $$ = $2; }
     | '{' pstmts pstmt '}'      { $$ = $2; PUSH($$, $3); }
     | '{' pstmts error '}'      { $$ = $2; yyerrok; }
     ;

/* pstmts = { sep | pstmt sep } */
pstmts: %empty                   { $$ = (StmtList){0}; }
      | pstmts sep
      | pstmts pstmt sep         { $$ = $1; PUSH($$, $2); }
      | pstmts error sep         { $$ = $1; yyerrok; }
      ;

/* pstmt = "mesh" IDENT "[" axis { "," axis } "]" [ "over" IDENT { "," IDENT } ]
 *       | "shard" gname ":" "[" sdim { "," sdim } "]"
 *       | "shard" gname ":" "on" expr            (a table whole on one device: on dp[1])
 *       | "plan" IDENT
 *       | IDENT [ "=" expr ]                    (an option: microbatches = 4, deterministic) */
pstmt: MESH IDENT '[' axes ']'   { $$ = named(p, S_MESH, @1, $2, @2); $$->axes = $4; }
     | MESH IDENT '[' axes ']' OVER names
                                 { $$ = named(p, S_MESH, @1, $2, @2); $$->axes = $4; $$->list = $7; }
     | SHARD gname ':' '[' sdims ']'
                                 { $$ = named(p, S_SHARD, @1, $2, @2); $$->list = $5; }
     | SHARD gname ':' ON expr   { $$ = named(p, S_SHARD, @1, $2, @2); $$->val = $5; }
     | PLAN IDENT                { $$ = named(p, S_PLAN, @1, $2, @2); }
     | IDENT '=' expr            { $$ = named(p, S_ASSIGN, @1, $1, @1); $$->val = $3; }
     | IDENT                     { $$ = named(p, S_ASSIGN, @1, $1, @1); }
     ;

/* gname = IDENT { "." IDENT }: a global, such as a block's stacked param
 * layers.wq */
gname: IDENT
     | gname '.' IDENT           { $$ = arena_printf(p->a, "%s.%s", $1, $3); }
     ;

/* axes = axis { "," axis } */
axes: axis                       { $$ = (ArgList){0}; PUSH($$, $1); }
    | axes ',' axis              { $$ = $1; PUSH($$, $3); }
    ;

/* axis = IDENT "=" expr */
axis: IDENT '=' expr             { $$ = (Arg){$1, L(@1), $3}; }
    ;

/* names = IDENT { "," IDENT } */
names: IDENT                     { $$ = (ExprList){0}; PUSH($$, ident(p, $1, @1)); }
     | names ',' IDENT           { $$ = $1; PUSH($$, ident(p, $3, @3)); }
     ;

/* sdims = sdim { "," sdim } */
sdims: sdim                      { $$ = (ExprList){0}; PUSH($$, $1); }
     | sdims ',' sdim            { $$ = $1; PUSH($$, $3); }
     ;

/* sdim = "*" | IDENT | IDENT "(" expr { "," expr } ")" */
sdim: '*'                        { $$ = ast_expr(p, E_STAR, L(@1)); }
    | IDENT                      { $$ = ident(p, $1, @1); }
    | IDENT '(' exprs ')'        { ArgList a = {0};
                                   for (int k = 0; k < $3.n; k++)
                                     PUSH(a, ((Arg){NULL, $3.a[k]->loc, $3.a[k]}));
                                   $$ = call(p, $1, @1, a); }
    ;

/* expr = expr ("<" | ">" | "<=" | ">=" | "==" | "!=") expr (not chained)
 *      | expr ("+" | "-" | "*" | "/" | "@") expr | "-" expr | "(" expr ")"
 *      | expr "[" idxs "]"
 *      | NUMBER | QUANTITY | STRING | IDENT | call | "[" [ exprs ] "]" */
expr: expr '<' expr              { $$ = binary(p, '<', $1, $3, @2); }
    | expr '>' expr              { $$ = binary(p, '>', $1, $3, @2); }
    | expr LE expr               { $$ = binary(p, B_LE, $1, $3, @2); }
    | expr GE expr               { $$ = binary(p, B_GE, $1, $3, @2); }
    | expr EQ expr               { $$ = binary(p, B_EQ, $1, $3, @2); }
    | expr NE expr               { $$ = binary(p, B_NE, $1, $3, @2); }
    | expr '+' expr              { $$ = binary(p, '+', $1, $3, @2); }
    | expr '-' expr              { $$ = binary(p, '-', $1, $3, @2); }
    | expr '*' expr              { $$ = binary(p, '*', $1, $3, @2); }
    | expr '/' expr              { $$ = binary(p, '/', $1, $3, @2); }
    | expr '@' expr              { $$ = binary(p, '@', $1, $3, @2); }
    | '-' expr %prec NEG         { $$ = binary(p, '-', NULL, $2, @1); }
    | '(' expr ')'               { $$ = $2; }
    | expr '[' idxs ']'          { $$ = index(p, $1, $3, @2); }
    | NUMBER
    | QUANTITY
    | STRING
    | IDENT                      { $$ = ident(p, $1, @1); }
    | call
    | '[' ']'                    { $$ = list(p, @1, (ExprList){0}); }
    | '[' exprs ']'              { $$ = list(p, @1, $2); }
    ;

/* idxs = idx { "," idx } */
idxs: idx                        { $$ = (ArgList){0}; PUSH($$, ((Arg){NULL, $1->loc, $1})); }
    | idxs ',' idx               { $$ = $1; PUSH($$, ((Arg){NULL, $3->loc, $3})); }
    ;

/* idx = expr | [ expr ] ":" [ expr ] | "..." */
idx: expr
    | ':'                        { $$ = range(p, NULL, NULL, @1); }
    | expr ':'                   { $$ = range(p, $1, NULL, @2); }
    | ':' expr                   { $$ = range(p, NULL, $2, @1); }
    | expr ':' expr              { $$ = range(p, $1, $3, @2); }
    | DOTS                       { $$ = ast_expr(p, E_DOTS, L(@1)); }
    ;

/* exprs = expr { "," expr } */
exprs: expr                      { $$ = (ExprList){0}; PUSH($$, $1); }
     | exprs ',' expr            { $$ = $1; PUSH($$, $3); }
     ;

/* call = IDENT cargs [ cargs ]: with two lists, a sized block's
 * application BLOCK(sizes)(args) */
call: IDENT cargs                { $$ = call(p, $1, @1, $2); }
    | IDENT cargs cargs          { $$ = call(p, $1, @1, $3); $$->sized = true; $$->sizes = $2; }
    ;

/* cargs = "(" [ arg { "," arg } ] ")" */
cargs: '(' ')'                   { $$ = (ArgList){0}; }
     | '(' args ')'              { $$ = $2; }
     ;

/* args = arg { "," arg } */
args: arg                        { $$ = (ArgList){0}; PUSH($$, $1); }
    | args ',' arg               { $$ = $1; PUSH($$, $3); }
    ;

/* arg = [ IDENT "=" ] [ "each" ] expr; "each" is taken only by a repeat */
arg: expr                        { $$ = (Arg){NULL, $1->loc, $1}; }
   | IDENT '=' expr              { $$ = (Arg){$1, L(@1), $3}; }
   | EACH expr                   { $$ = (Arg){NULL, L(@1), each(p, $2, @1)}; }
   | IDENT '=' EACH expr         { $$ = (Arg){$1, L(@1), each(p, $4, @3)}; }
   ;

%%

static void feerror(FELTYPE *l, yyscan_t scanner, Parser *p, const char *msg) {
  (void)scanner;
  if (p->stop)
    return;
  if (!strcmp(msg, "memory exhausted"))
    msg = "expression nested too deeply";
  else if (!strncmp(msg, "syntax error, ", 14))
    msg += 14;
  diag_error(p->d, loc(p, *l), "%s", msg);
}

Expr *ast_expr(Parser *p, ExprKind kind, Loc at) {
  Expr *e = arena_alloc(p->a, sizeof *e);
  e->kind = kind;
  e->loc = at;
  e->depth = 1;
  return e;
}

static Expr *ident(Parser *p, const char *name, FELTYPE l) {
  Expr *e = ast_expr(p, E_IDENT, L(l));
  e->s = name;
  return e;
}

/* Trees deeper than FE_MAX_DEPTH are cut here, so that the recursive
 * lowering of an expression has a bounded depth. A cut keeps its height, so
 * the trees above it are cut silently. */
static Expr *deep(Parser *p, Expr *e, const Expr *tallest) {
  if (e->depth <= FE_MAX_DEPTH)
    return e;
  if (tallest->kind != E_ERROR)
    diag_error(p->d, e->loc, "expression nested too deeply (more than %d levels)", FE_MAX_DEPTH);
  Expr *cut = ast_expr(p, E_ERROR, e->loc);
  cut->depth = FE_MAX_DEPTH + 1;
  return cut;
}

/* A NULL lhs makes unary minus. */
static Expr *binary(Parser *p, int op, Expr *lhs, Expr *rhs, FELTYPE l) {
  Expr *e = ast_expr(p, lhs ? E_BINARY : E_NEG, L(l));
  e->op = op;
  e->lhs = lhs ? lhs : rhs;
  e->rhs = lhs ? rhs : NULL;
  Expr *tallest = lhs && lhs->depth > rhs->depth ? lhs : rhs;
  e->depth = 1 + tallest->depth;
  return deep(p, e, tallest);
}

static Expr *call(Parser *p, const char *name, FELTYPE l, ArgList args) {
  Expr *e = ast_expr(p, E_CALL, L(l));
  const Expr *tallest = e;
  e->s = name;
  e->args = args;
  for (int k = 0; k < args.n; k++)
    if (args.a[k].val->depth >= e->depth) {
      tallest = args.a[k].val;
      e->depth = tallest->depth + 1;
    }
  return deep(p, e, tallest);
}

static Expr *list(Parser *p, FELTYPE l, ExprList items) {
  Expr *e = ast_expr(p, E_LIST, L(l));
  const Expr *tallest = e;
  for (int k = 0; k < items.n; k++) {
    PUSH(e->args, ((Arg){NULL, items.a[k]->loc, items.a[k]}));
    if (items.a[k]->depth >= e->depth) {
      tallest = items.a[k];
      e->depth = tallest->depth + 1;
    }
  }
  return deep(p, e, tallest);
}

static Expr *each(Parser *p, Expr *x, FELTYPE l) {
  Expr *e = ast_expr(p, E_EACH, L(l));
  e->lhs = x;
  e->depth = x->depth + 1;
  return deep(p, e, x);
}

/* x[items], located at the '['. */
static Expr *index(Parser *p, Expr *x, ArgList items, FELTYPE l) {
  Expr *e = ast_expr(p, E_INDEX, L(l));
  const Expr *tallest = x;
  e->lhs = x;
  e->args = items;
  e->depth = x->depth + 1;
  for (int k = 0; k < items.n; k++)
    if (items.a[k].val->depth >= e->depth) {
      tallest = items.a[k].val;
      e->depth = tallest->depth + 1;
    }
  return deep(p, e, tallest);
}

/* begin:end in an index, located at the ':' (at the begin when given). */
static Expr *range(Parser *p, Expr *begin, Expr *end, FELTYPE l) {
  Expr *e = ast_expr(p, E_RANGE, begin ? begin->loc : L(l));
  e->lhs = begin;
  e->rhs = end;
  return e;
}

static Stmt *stmt(Parser *p, StmtKind kind, FELTYPE l) {
  Stmt *s = arena_alloc(p->a, sizeof *s);
  s->kind = kind;
  s->loc = L(l);
  return s;
}

static Stmt *named(Parser *p, StmtKind kind, FELTYPE l, const char *name, FELTYPE nl) {
  Stmt *s = stmt(p, kind, l);
  s->name = name;
  s->name_loc = L(nl);
  return s;
}

/* The value of an assignment or an output, kind and name still unset. */
static Stmt *value(Parser *p, Expr *val, Expr *count, FELTYPE rl, const char *inst, FELTYPE il) {
  Stmt *s = stmt(p, S_ASSIGN, rl);
  s->val = val;
  s->count = count;
  s->repeat_loc = L(rl);
  s->inst = inst;
  s->inst_loc = L(il);
  return s;
}

static Stmt *assign(Parser *p, Stmt *s, StmtKind kind, FELTYPE l, const char *name, FELTYPE nl) {
  s->kind = kind;
  s->loc = L(l);
  s->name = name;
  s->name_loc = L(nl);
  return s;
}

static Decl *decl(Parser *p, DeclKind kind, FELTYPE l, const char *name, FELTYPE nl) {
  Decl *d = arena_alloc(p->a, sizeof *d);
  d->kind = kind;
  d->loc = L(l);
  d->name = name;
  d->name_loc = L(nl);
  vec_push(p->a, p->out, d);
  return d;
}

/* `(group), rest = value` or `first, rest = value`: an assignment of several
 * names, the first group carried when parenthesized. */
static Stmt *several(Parser *p, Stmt *s, FELTYPE l, ExprList group, Expr *first, ExprList rest,
                     int carried) {
  ExprList all = {0};
  if (first)
    PUSH(all, first);
  for (int k = 0; k < group.n; k++)
    PUSH(all, group.a[k]);
  for (int k = 0; k < rest.n; k++)
    PUSH(all, rest.a[k]);
  s->kind = S_ASSIGN;
  s->loc = L(l);
  s->name = all.a[0]->s;
  s->name_loc = all.a[0]->loc;
  s->names = all;
  s->carried = carried;
  return s;
}
