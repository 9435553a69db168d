/* lower.c: a model to a module: dimensions, globals and the function @forward,
 * built statement by statement, checking names, arguments and shapes. A block
 * applied once is lowered into its caller's function; repeat(N) lowers it
 * once, into a body function that a `repeat` runs N times. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- expressions ---- */

/* Numbers, dimension names and arithmetic on them fold to one constant. */
bool is_const(Ctx *c, const Expr *e) {
  switch (e->kind) {
  case E_NUM: return true;
  case E_IDENT: {
    Name *n = lookup(c, e->s);
    return n && n->kind == N_DIM;
  }
  case E_NEG: return is_const(c, e->lhs);
  case E_BINARY:
    return e->op != '@' && !ast_compare(e->op) && is_const(c, e->lhs) && is_const(c, e->rhs);
  default: return false;
  }
}

/* a < b and a <= b are gt(b, a) and ge(b, a): a mask of 1 and 0 in f32. */
static Inst *compare(Ctx *c, const Expr *e, Inst *x, Inst *y) {
  static const char *const name[] = {['<'] = "<", ['>'] = ">", [B_LE] = "<=", [B_GE] = ">=",
                                      [B_EQ] = "==", [B_NE] = "!="};
  const Inst *bad = x->type.dtype != DT_F32 ? x : y->type.dtype != DT_F32 ? y : NULL;
  char b1[128], b2[128];
  if (bad) {
    diag_error(c->d, e->loc, "a comparison takes f32 values, not %s",
               type_str(&bad->type, b1, sizeof b1));
    return NULL;
  }
  if (!broadcasts(x, y)) {
    diag_error(c->d, e->loc, "shape mismatch in '%s': %s and %s do not broadcast", name[e->op],
               type_str(&x->type, b1, sizeof b1), type_str(&y->type, b2, sizeof b2));
    return NULL;
  }
  switch (e->op) {
  case '>': return op2(c, OP_gt, e->loc, x, y);
  case '<': return op2(c, OP_gt, e->loc, y, x);
  case B_GE: return op2(c, OP_ge, e->loc, x, y);
  case B_LE: return op2(c, OP_ge, e->loc, y, x);
  case B_EQ: return op2(c, OP_eq, e->loc, x, y);
  default: return op2(c, OP_ne, e->loc, x, y);
  }
}

/* x OP y of f32 operands: a comparison, or the op's instruction. */
Inst *lower_binary(Ctx *c, const Expr *e, Inst *x, Inst *y) {
  static const Op binop[128] = {['+'] = OP_add, ['-'] = OP_sub, ['*'] = OP_mul, ['/'] = OP_div,
                                ['@'] = OP_matmul};
  return ast_compare(e->op) ? compare(c, e, x, y) : op2(c, binop[e->op], e->loc, x, y);
}

Inst *lower_expr(Ctx *c, const Expr *e) {
  if ((e->kind == E_NEG || e->kind == E_BINARY) && is_const(c, e)) {
    Num v;
    int nd;
    const Dim *dims = ctx_dims(c, &nd);
    return fe_eval(e, dims, nd, &v, c->d) ? constant(c, v.f, e->loc) : NULL;
  }
  switch (e->kind) {
  case E_NUM:
    return constant(c, e->f, e->loc);
  case E_IDENT:
    return ref(c, e->s, e->loc);
  case E_NEG: {
    Inst *x = lower_expr(c, e->lhs);
    if (x && x->type.dtype == DT_I32)
      return lower_int_neg(c, e->loc, x);
    return x ? op1(c, OP_neg, e->loc, x) : NULL;
  }
  case E_BINARY: {
    Inst *x = lower_expr(c, e->lhs);
    Inst *y = lower_expr(c, e->rhs);
    if (!x || !y)
      return NULL;
    if (e->op == '@' && !(f32_arg(c, "@", "left operand", e->lhs, x) &
                          f32_arg(c, "@", "right operand", e->rhs, y)))
      return NULL;
    if (e->op != '@' && (x->type.dtype == DT_I32 || y->type.dtype == DT_I32))
      return lower_int_binary(c, e, x, y);
    return lower_binary(c, e, x, y);
  }
  case E_CALL:
    return lower_call(c, e);
  case E_INDEX:
    return lower_index(c, e);
  case E_RANGE:
  case E_DOTS:
    diag_error(c->d, e->loc, "'%s' stands only in an index, as in x[1:3] or x[..., 0]",
               e->kind == E_DOTS ? "..." : ":");
    return NULL;
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
  Global g = {.type = t, .kind = s->kind == S_BUFFER ? G_BUFFER : G_PARAM};
  if (!lower_init(c, s, &g)) {
    n->bad = true;
    return;
  }
  const char *global = join(c, c->path, s->name);
  Ctx *o = owner(c);
  if (o->up) {
    n->val = stacked_arg(o, global, t, &g, s->name_loc);
    n->bad = !n->val;
    return;
  }
  Global *pg = ir_add_global(c->m, global, g.kind, t, s->name_loc);
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

/* ---- statements ---- */

void emit_output(Ctx *c, const char *name, Inst *v, Loc at) {
  Inst *o = ir_new(c->f, OP_output, at, 1, &v);
  ir_set_str(o, "name", name);
  finish(c, o);
}

/* Whether s applies a block: [repeat(N)] BLOCK(args) [as NAME]. */
bool is_apply(const Ctx *c, const Stmt *s) {
  if ((s->kind != S_ASSIGN && s->kind != S_OUTPUT) || !s->val)
    return false;
  if (s->count || s->inst || s->val->sized)
    return true;
  return s->val->kind == E_CALL && !find_builtin(s->val->s) && find_block(c->prog, s->val->s);
}

/* The instance name of application s (the block's by default), and where. */
const char *inst_name(const Stmt *s, Loc *at) {
  *at = s->inst ? s->inst_loc : s->val->loc;
  return s->inst ? s->inst : s->val->s;
}

/* Lowers the value of `name = expr`; the new instruction takes the name. A
 * block's value takes it too, unless it is a load or an arg. */
static void lower_assign(Ctx *c, const Stmt *s, Name *n) {
  int before = c->f->inst.n, nv = s->names.n ? s->names.n : 1;
  bool apply = is_apply(c, s);
  Inst **v = arena_alloc(c->a, sizeof(Inst *) * (size_t)nv);
  if (apply) {
    lower_apply(c, s, v);
  } else if (s->names.n) {
    diag_error(c->d, s->names.a[1]->loc, "several names take the values of a block's "
               "application, as in 'a, b = BLOCK(x)' or '(h, c), ys = repeat(N) BLOCK(h0, c0, "
               "each xs)'");
  } else {
    v[0] = lower_expr(c, s->val);
  }
  for (int k = 0; k < nv; k++) {
    Name *nk = k ? lookup(c, s->names.a[k]->s) : n;
    if (!nk || nk->stmt != c->cur)
      continue;   /* defined twice: reported */
    if (!v[k]) {
      nk->bad = true;
      continue;
    }
    if (v[k]->id >= before && (apply ? v[k]->op != OP_load && v[k]->op != OP_arg : !v[k]->name))
      v[k]->name = vname(c, nk->name);
    nk->val = v[k];
  }
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

/* Defines the names the statements of c define: values, inputs, params and
 * instances. */
void define_stmts(Ctx *c) {
  static const NameKind kinds[] = {[S_INPUT] = N_INPUT, [S_PARAM] = N_PARAM, [S_ASSIGN] = N_VALUE,
                                   [S_OUTPUT] = N_VALUE, [S_BUFFER] = N_PARAM};
  bool block = c->decl->kind == D_BLOCK;
  const StmtList *body = &c->decl->body;
  for (int k = 0; k < body->n && !diag_full(c->d); k++) {
    const Stmt *s = body->a[k];
    if ((s->kind == S_INPUT && !block) || s->kind == S_PARAM || s->kind == S_BUFFER ||
        s->kind == S_ASSIGN || (s->kind == S_OUTPUT && s->val && !block))
      c->def[k] = define(c, s->name, kinds[s->kind], s->name_loc, k);
    for (int j = 1; j < s->names.n && s->kind == S_ASSIGN; j++)
      define(c, s->names.a[j]->s, N_VALUE, s->names.a[j]->loc, k);
    if (c->def[k] && s->kind == S_BUFFER)
      c->def[k]->buffer = true;
    if (is_apply(c, s) && (!block || s->kind == S_ASSIGN)) {
      Loc at;
      c->inst[k] = define(c, inst_name(s, &at), N_INST, at, k);
    }
  }
}

/* return v1, v2, ...: c->rets, each lowered; c->ret the first, NULL when
 * any failed. */
static void lower_return(Ctx *c, const Stmt *s) {
  c->nret = s->names.n ? s->names.n : 1;
  c->rets = arena_alloc(c->a, sizeof(Inst *) * (size_t)c->nret);
  bool ok = true;
  for (int k = 0; k < c->nret; k++)
    ok &= (c->rets[k] = lower_expr(c, s->names.n ? s->names.a[k] : s->val)) != NULL;
  c->ret = ok ? c->rets[0] : NULL;
}

/* Lowers the statements of c in order; a block's return sets c->ret. */
void lower_stmts(Ctx *c) {
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
        lower_return(c, s);
      else
        diag_error(c->d, s->loc, "'return' belongs in a block; a model's results are its outputs");
      break;
    default:
      DTC_UNREACHABLE();
    }
  }
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
  lower_groups(&c);
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
