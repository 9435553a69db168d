/* blocks.c: blocks: their checks (statements, cycles), their scope, and their
 * application, inlined into the caller or as the body of a repeat with its
 * params stacked along the count. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- blocks ---- */

/* A new arg of body o for a param it reads: row i of global `global`, whose
 * name starts with o's path. Numbered when the body is complete. */
Inst *stacked_arg(Ctx *o, const char *global, Type t, const Global *init, Loc at) {
  Inst *arg = ir_new(o->f, OP_arg, at, 0, NULL);
  arg->name = global + strlen(o->path) + 1;
  arg->type = t;
  ir_set_int(arg, "index", 0);
  vec_push(o->a, &o->stacked,
           ((Stacked){global, t, init->init, init->init_arg, init->fan_in, init->fan_out, at, arg,
                      init->kind == G_BUFFER}));
  return finish(o, arg);
}

void update_buffer(Ctx *c, const char *global, Inst *v, Loc at) {
  Ctx *o = owner(c);
  if (o->up) {
    vec_push(o->a, &o->updates, ((Update){global, v, at}));
    return;
  }
  Inst *st = ir_new(c->f, OP_store, at, 1, &v);
  ir_set_str(st, "global", global);
  finish(c, st);
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
  Global init = {.kind = sp->buffer ? G_BUFFER : G_PARAM, .init = sp->init,
                 .init_arg = sp->init_arg, .fan_in = sp->fan_in, .fan_out = sp->fan_out};
  if (o->up)
    return stacked_arg(o, sp->global, t, &init, sp->loc);
  Global *g = ir_add_global(c->m, sp->global, init.kind, t, sp->loc);
  g->init = init.init;
  g->init_arg = init.init_arg;
  g->fan_in = init.fan_in;
  g->fan_out = init.fan_out;
  Inst *v = ir_new(c->f, OP_load, sp->loc, 0, NULL);
  v->name = g->name;
  ir_set_str(v, "global", g->name);
  return finish(c, v);
}

Block *find_block(const Prog *p, const char *name) {
  for (int k = 0; k < p->nblk; k++)
    if (!strcmp(p->blk[k].decl->name, name))
      return &p->blk[k];
  return NULL;
}

/* The namespace of c: hash table and statement slots; for a block also the
 * model's dimensions, its args and the names its statements define. */
void open_scope(Ctx *c) {
  const Decl *dc = c->decl;
  bool block = dc->kind == D_BLOCK;
  int names = 2 * dc->body.n + dc->dims.n + dc->args.n + dc->sizes.n + (block ? c->m->dim.n : 0);
  for (int k = 0; k < dc->body.n; k++)
    names += dc->body.a[k]->names.n;
  for (c->cap = 16; c->cap < 2 * names; c->cap *= 2) {}
  c->tab = arena_alloc(c->a, sizeof(Name *) * (size_t)c->cap);
  c->def = arena_alloc(c->a, sizeof(Name *) * (size_t)(dc->body.n + 1));
  c->inst = arena_alloc(c->a, sizeof(Name *) * (size_t)(dc->body.n + 1));
  if (!block)
    return;
  for (int k = 0; k < dc->sizes.n; k++) {   /* a size hides a dimension of the same name */
    Name *n = define(c, dc->sizes.a[k]->s, N_DIM, dc->sizes.a[k]->loc, -2);
    if (n)
      n->dim = c->dim ? c->dim[k].value : 1;
  }
  for (int k = 0; k < c->m->dim.n; k++) {
    const Dim *dm = &c->m->dim.a[k];
    if (dc->sizes.n && lookup(c, dm->name))
      continue;
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

/* The sizes of block bd at application `call` in c, evaluated there: the
 * dimensions the block's constant expressions see, its sizes first, then the
 * model's (*out, *nout). False after reporting a wrong count, an unknown or
 * repeated name, or a size that is not an integer from 0 to 2^40 (a size of 0,
 * a padding, stands where a literal 0 may: a type of it is an error there). */
static bool apply_sizes(Ctx *c, const Expr *call, const Decl *bd, const Dim **out, int *nout) {
  int n = bd->sizes.n, pos = 0;
  if (n == 0 && call->sizes.n == 0)
    return true;
  if (n == 0) {
    diag_error(c->d, call->sizes.a[0].loc, "block '%s' takes no sizes; apply it as '%s(...)'",
               bd->name, bd->name);
    return false;
  }
  const char **names = arena_alloc(c->a, sizeof(char *) * (size_t)n);
  const char *list = "";
  for (int k = 0; k < n; k++) {
    names[k] = bd->sizes.a[k]->s;
    list = arena_printf(c->a, "%s%s%s", list, k ? ", " : "", names[k]);
  }
  if (!call->sized) {
    diag_error(c->d, call->loc, "block '%s' takes %d size%s before its arguments: apply it as "
               "'%s(%s)(...)'", bd->name, n, n == 1 ? "" : "s", bd->name, list);
    return false;
  }
  const Expr **val = arena_alloc(c->a, sizeof(Expr *) * (size_t)n);
  bool ok = true;
  for (int k = 0; k < call->sizes.n; k++) {
    const Arg *a = &call->sizes.a[k];
    int j = pos;
    if (!a->name && (k > 0 && call->sizes.a[k - 1].name)) {
      diag_error(c->d, a->loc, "positional size after a named one");
      return false;
    }
    if (!a->name && pos++ == n) {
      diag_error(c->d, a->loc, "block '%s' takes %d size%s (%s), got %d", bd->name, n,
                 n == 1 ? "" : "s", list, call->sizes.n);
      return false;
    }
    if (a->name)
      for (j = 0; j < n && strcmp(names[j], a->name); j++) {}
    if (j == n) {
      diag_error(c->d, a->loc, "block '%s' has no size '%s'%s", bd->name, a->name,
                 fe_did_you_mean(c->a, a->name, names, n));
      ok = false;
    } else if (val[j]) {
      diag_error(c->d, a->loc, "size '%s' is given twice", names[j]);
      ok = false;
    } else {
      val[j] = a->val;
    }
  }
  for (int k = 0; ok && k < n; k++)
    if (!val[k]) {
      diag_error(c->d, call->loc, "block '%s' takes %d size%s (%s): '%s' is missing", bd->name,
                 n, n == 1 ? "" : "s", list, names[k]);
      ok = false;
    }
  if (!ok)
    return false;
  Dim *dim = arena_alloc(c->a, sizeof(Dim) * (size_t)(n + c->m->dim.n));
  for (int k = 0; k < n; k++) {
    const char *what = arena_printf(c->a, "size '%s' of block '%s'", names[k], bd->name);
    int64_t v;
    if (!int_arg(c, val[k], what, &v)) {
      ok = false;
    } else if (v < 0 || v > IR_MAX_DIM) {
      diag_error(c->d, val[k]->loc, "%s must be an integer from 0 to 2^40, not %lld", what,
                 (long long)v);
      ok = false;
    }
    dim[k] = (Dim){names[k], v, bd->sizes.a[k]->loc};
  }
  memcpy(dim + n, c->m->dim.a, sizeof(Dim) * (size_t)c->m->dim.n);
  *out = dim;
  *nout = n + c->m->dim.n;
  return ok;
}

/* The args of an application bound and lowered in c: val[k] for the block's
 * arg k, each[k] when it is an `each` argument of a repeat of count n. */
static bool lower_apply_args(Ctx *c, const Stmt *s, const Decl *bd, int64_t n, int ncarry,
                             Inst **val, bool *each) {
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
    if (each[k] && k < ncarry) {
      diag_error(c->d, e->loc, "argument '%s' of '%s' is carried from one iteration to the next "
                 "(the repeat carries %d values); it cannot be 'each'", names[k], bd->name, ncarry);
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

/* The values of block bd's return (bc->rets) as the names of application s
 * take them: as many as the names, each carried one of a repeat of arg k's
 * type. False after reporting. */
static bool check_returns(Ctx *c, const Stmt *s, const Ctx *bc, Inst *const *val, int ncarry) {
  const Decl *bd = bc->decl;
  const Stmt *rs = bd->body.a[bd->body.n - 1];
  int nnames = s->names.n ? s->names.n : 1;
  if (bc->nret != nnames) {
    Ctx *inner = c->prog->cur;
    c->prog->cur = c;   /* an error of the application, not of the block */
    if (nnames == 1)
      diag_error(c->d, s->name_loc, "block '%s' returns %d values; name each of them, as in "
                 "'a, b = %s(...)'%s", bd->name, bc->nret, bd->name,
                 s->count ? " or '(h, c), ys = repeat(N) ...'" : "");
    else
      diag_error(c->d, s->names.a[0]->loc, "%d names take the values of block '%s', but it "
                 "returns %d", nnames, bd->name, bc->nret);
    if (!diag_full(c->d))
      diag_note(c->d, rs->loc, "the return of '%s' is here", bd->name);
    c->prog->cur = inner;
    return false;
  }
  for (int k = 0; k < ncarry && s->count; k++) {
    const Inst *r = bc->rets[k];
    if (type_eq(&r->type, &val[k]->type))
      continue;
    char b1[128], b2[128];
    const char *an = bd->args.a[k]->s;
    const Expr *at = rs->names.n ? rs->names.a[k] : rs->val;
    if (ncarry == 1)
      diag_error(c->d, at->loc, "a repeat carries the value of block '%s' into its first "
                 "argument '%s', but it returns %s where '%s' is %s", bd->name, an,
                 type_str(&r->type, b1, sizeof b1), an, type_str(&val[k]->type, b2, sizeof b2));
    else
      diag_error(c->d, at->loc, "a repeat carries value %d of block '%s' into its argument '%s', "
                 "but it returns %s where '%s' is %s", k + 1, bd->name, an,
                 type_str(&r->type, b1, sizeof b1), an, type_str(&val[k]->type, b2, sizeof b2));
    return false;
  }
  return true;
}

/* [repeat(N)] BLOCK(args) [as NAME] in c. Without repeat the block is lowered
 * into c's function and its return values are the results; with it, into a
 * body function named after the instance, run by a new `repeat`: operands
 * the carried args (the first `ncarry`), the args read whole, the `each`
 * ones, the stacked params; results the carried values after the last
 * iteration (the repeat, then repeat_outs), the stacked outputs
 * (repeat_outs) and the new rows of the buffers the body updates, stacked
 * (repeat_outs after them, which update_buffer stores or passes up). */
static bool apply(Ctx *c, const Stmt *s, Inst **res) {
  const Expr *call = s->val;
  if (call->kind != E_CALL) {
    diag_error(c->d, s->inst_loc, "'as' names the instance of a block application, as in "
               "'y = BLOCK(x) as NAME'");
    return false;
  }
  Block *b = find_block(c->prog, call->s);
  if (!b) {
    if (find_builtin(call->s))
      diag_error(c->d, call->loc, "'%s' is a built-in function, not a block", call->s);
    else
      diag_error(c->d, call->loc, "unknown block '%s'%s", call->s, did_you_mean_block(c, call->s));
    return false;
  }
  if (b->bad || !c->inst[c->cur])
    return false;
  if (c->depth == FE_MAX_BLOCK_NEST) {
    diag_error(c->d, call->loc, "blocks applied inside each other more than %d deep",
               FE_MAX_BLOCK_NEST);
    return false;
  }
  if (c->prog->inst.n == FE_MAX_INSTANCES) {
    diag_error(c->d, call->loc, "more than %d block applications in one model", FE_MAX_INSTANCES);
    return false;
  }
  const Decl *bd = b->decl;
  int ncarry = s->carried ? s->carried : 1;
  int nnames = s->names.n ? s->names.n : 1;
  if (s->carried && !s->count) {
    diag_error(c->d, s->loc, "parentheses group the carried values of a repeat, as in '(h, c), "
               "ys = repeat(N) %s(...)'; a block applied once gives its values to 'a, b = ...'",
               bd->name);
    return false;
  }
  int64_t n = 0;
  if (s->count) {
    if (!int_arg(c, s->count, "the count of 'repeat'", &n))
      return false;
    if (n < 1 || n > IR_MAX_DIM) {
      diag_error(c->d, s->count->loc, n < 1 ? "the count of 'repeat' must be 1 or more, not %lld"
                                            : "the count of 'repeat' must be at most 2^40, not %lld",
                 (long long)n);
      return false;
    }
    if (bd->args.n < ncarry) {
      if (ncarry == 1)
        diag_error(c->d, call->loc, "'repeat' carries the first argument of block '%s' from one "
                   "iteration to the next, but '%s' takes none", bd->name, bd->name);
      else
        diag_error(c->d, s->loc, "the repeat carries %d values into the first %d arguments of "
                   "block '%s', but '%s' takes %d", ncarry, ncarry, bd->name, bd->name,
                   bd->args.n);
      return false;
    }
  }
  const Dim *dim = NULL;
  int ndim = 0;
  if (!apply_sizes(c, call, bd, &dim, &ndim))
    return false;
  int nargs = bd->args.n, neach = 0;
  Inst **val = arena_alloc(c->a, sizeof(Inst *) * (size_t)(nargs + 1));
  bool *each = arena_alloc(c->a, sizeof(bool) * (size_t)(nargs + 1));
  if (!lower_apply_args(c, s, bd, n, ncarry, val, each))
    return false;
  Loc at;
  const char *path = join(c, c->path, inst_name(s, &at));
  if (s->count && (ir_find_func(c->m, path) || !strcmp(path, "train_step"))) {
    diag_error(c->d, at, "a repeat named '%s' would take the name of the model's function @%s; "
               "name it with 'as NAME'", path, path);
    return false;
  }

  Ctx *bc = arena_alloc(c->a, sizeof *bc);
  *bc = (Ctx){.a = c->a, .d = c->d, .m = c->m, .f = c->f, .prog = c->prog, .decl = bd, .up = c,
              .app = s, .inlined = !s->count, .path = path, .vpath = "", .depth = c->depth + 1,
              .n = n, .dim = dim, .ndim = ndim};
  vec_push(c->a, &c->prog->inst, bc);
  if (s->count) {
    bc->f = ir_add_func(c->m, path, bd->name_loc);
    bc->f->body = true;
  } else {
    bc->vpath = arena_printf(c->a, "%s%s.", c->vpath, inst_name(s, &at));
  }
  open_scope(bc);
  for (int k = ncarry; k < nargs; k++)
    neach += each[k];
  for (int k = 0, whole = ncarry, cut = nargs - neach; k < nargs; k++) {
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
    ir_set_int(arg, "index", k < ncarry ? k : each[k] ? cut++ : whole++);
    an->val = finish(bc, arg);
  }

  int nerr = c->d->nerr;
  Ctx *caller = c->prog->cur;
  c->prog->cur = bc;
  lower_stmts(bc);
  bool ok = bc->ret && check_returns(c, s, bc, val, ncarry);
  c->prog->cur = caller;
  if (!ok)
    return false;
  if (!s->count) {
    memcpy(res, bc->rets, sizeof(Inst *) * (size_t)nnames);
    return true;
  }
  const Stmt *rs = bd->body.a[bd->body.n - 1];
  for (int k = 0; k < nnames; k++) {
    Inst *out = ir_new(bc->f, OP_output, rs->loc, 1, &bc->rets[k]);
    ir_set_str(out, "name", k < ncarry ? bd->args.a[k]->s : s->names.a[k]->s);
    finish(bc, out);
  }
  for (int k = 0; k < bc->updates.n; k++) {   /* each buffer's row, stacked by the loop */
    Update *u = &bc->updates.a[k];
    Inst *out = ir_new(bc->f, OP_output, u->loc, 1, &u->v);
    ir_set_str(out, "name", u->global + strlen(path) + 1);
    finish(bc, out);
  }
  if (c->d->nerr != nerr)
    return false;
  number_args(bc, nargs);

  int nin = nargs + bc->stacked.n;
  if (nin > ir_ops[OP_repeat].maxin) {
    diag_error(c->d, s->repeat_loc, "a repeat of more than %d args and params",
               ir_ops[OP_repeat].maxin);
    return false;
  }
  Inst **in = arena_alloc(c->a, sizeof(Inst *) * (size_t)nin);
  int j = 0;
  for (int k = 0; k < ncarry; k++)
    in[j++] = val[k];
  for (int pass = 0; pass < 2; pass++)
    for (int k = ncarry; k < nargs; k++)
      if (each[k] == (pass == 1))
        in[j++] = val[k];
  for (int k = 0; k < bc->stacked.n; k++) {
    const Stacked *sp = &bc->stacked.a[k];
    Type t = sp->type;
    if (!stack_type(c, &t, n, sp->global, s->repeat_loc) || !(in[j++] = stacked_value(c, sp, t)))
      return false;
  }
  for (int k = ncarry; k < nnames; k++) {
    Type t = bc->rets[k]->type;
    if (t.rank == IR_MAX_RANK || type_elems(&t) > IR_MAX_ELEMS / n) {
      char buf[128];
      diag_error(c->d, s->names.a[k]->loc, "'%s', %s stacked %lld times, passes the limits of a "
                 "tensor (%d dimensions, 2^40 elements)", s->names.a[k]->s,
                 type_str(&t, buf, sizeof buf), (long long)n, IR_MAX_RANK);
      return false;
    }
  }
  if (s->mode && strcmp(s->mode, "remat")) {
    diag_error(c->d, s->mode_loc, "unknown option '%s' of 'repeat' (the one option is remat)",
               s->mode);
    return false;
  }
  Inst *rep = ir_new(c->f, OP_repeat, s->repeat_loc, nin, in);
  ir_set_str(rep, "body", path);
  ir_set_int(rep, "n", n);
  ir_set_int(rep, "carry", ncarry);
  ir_set_int(rep, "stacked", neach + bc->stacked.n);
  if (s->mode) {
    ir_set_int(rep, "remat", 1);
    if (!c->prog->remat.file)
      c->prog->remat = s->mode_loc;
  }
  if (!(res[0] = finish(c, rep)))
    return false;
  for (int k = 1; k < nnames + bc->updates.n; k++) {
    Inst *o = ir_new(c->f, OP_repeat_out, s->repeat_loc, 1, &rep);
    ir_set_int(o, "index", k);
    if (!(o = finish(c, o)))
      return false;
    if (k < nnames)
      res[k] = o;
    else
      update_buffer(c, bc->updates.a[k - nnames].global, o, bc->updates.a[k - nnames].loc);
  }
  return true;
}

void lower_apply(Ctx *c, const Stmt *s, Inst **res) {
  int nnames = s->names.n ? s->names.n : 1;
  if (!apply(c, s, res))
    memset(res, 0, sizeof(Inst *) * (size_t)nnames);
}

/* What a block is whatever applies it: the statements it takes, one return
 * last, names defined once and not a dimension's; bad after reporting. */
void check_block(Ctx *model, Block *b) {
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
void check_cycles(Ctx *model, Block *b, Block **path, int depth) {
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
