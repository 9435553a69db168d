/* scope.c: the names of a model or of a block being applied (definition, lookup,
 * did-you-mean), the values they take, and the instructions lowering emits. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* ---- names ---- */

static unsigned hash(const char *s) { return (unsigned)ir_hash(s, strlen(s)); }

Name *lookup(Ctx *c, const char *s) {
  for (Name *n = c->tab[hash(s) & (unsigned)(c->cap - 1)]; n; n = n->next)
    if (!strcmp(n->name, s))
      return n;
  return NULL;
}

const char *did_you_mean(Ctx *c, const char *s) {
  const char **cand = arena_alloc(c->a, sizeof(char *) * (size_t)(c->names.n + 1));
  for (int k = 0; k < c->names.n; k++)
    cand[k] = c->names.a[k]->name;
  return fe_did_you_mean(c->a, s, cand, c->names.n);
}

/* Defines a name; NULL after reporting a second definition. */
Name *define(Ctx *c, const char *s, NameKind kind, Loc at, int stmt) {
  Name *old = lookup(c, s);
  if (old) {
    if (kind == N_INST && old->kind == N_INST)
      diag_error(c->d, at, "instance name '%s' is already taken by the application on line %d; "
                 "name this one with 'as NAME'", s, old->loc.line);
    else if (kind == N_INST)
      diag_error(c->d, at, "instance name '%s' is already defined", s);
    else if (old->kind == N_INST)
      diag_error(c->d, at, "'%s' is already the name of a block instance", s);
    else if (old->kind == N_DIM && old->stmt == -2)
      diag_error(c->d, at, "'%s' is already defined as a size of block '%s'", s, c->decl->name);
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

Inst *finish(Ctx *c, Inst *i) {
  char err[256];
  if (ir_infer(i, err, sizeof err))
    return i;
  diag_error(c->d, i->loc, "%s", err);
  return NULL;
}

Inst *constant(Ctx *c, double v, Loc at) {
  Inst *i = ir_new(c->f, OP_const, at, 0, NULL);
  ir_set_float(i, "value", v);
  return finish(c, i);
}

/* Whether the shapes of a and b broadcast together (numpy's rule). */
bool broadcasts(const Inst *a, const Inst *b) {
  const Type *s = &a->type, *t = &b->type;
  for (int k = 1; k <= s->rank && k <= t->rank; k++) {
    int64_t m = s->dim[s->rank - k], n = t->dim[t->rank - k];
    if (m != n && m != 1 && n != 1)
      return false;
  }
  return true;
}

Inst *op1(Ctx *c, Op op, Loc at, Inst *x) { return finish(c, ir_new(c->f, op, at, 1, &x)); }

Inst *op2(Ctx *c, Op op, Loc at, Inst *x, Inst *y) {
  Inst *in[2] = {x, y};
  return finish(c, ir_new(c->f, op, at, 2, in));
}

/* The value of a name used at `at`; inputs and params are loaded at first use. */
Inst *ref(Ctx *c, const char *s, Loc at) {
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

const char *join(Ctx *c, const char *path, const char *name) {
  return path[0] ? arena_printf(c->a, "%s.%s", path, name) : name;
}

/* The name value `name` of c takes in its function. */
const char *vname(Ctx *c, const char *name) {
  return c->vpath[0] ? arena_printf(c->a, "%s%s", c->vpath, name) : name;
}

/* The context that owns c's function: the model, or the application that is a
 * repeat's body. */
Ctx *owner(Ctx *c) {
  while (c->inlined)
    c = c->up;
  return c;
}

/* Diag's context hook: after a diagnostic inside a block, where each
 * enclosing application is, innermost first; of a long chain the innermost
 * and the outermost NOTES_END. */
enum { NOTES_END = 5 };
void apply_notes(Diag *d, void *arg) {
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
