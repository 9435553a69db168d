/* frontend.c: entry points (files, imports, which model and cluster), and the
 * helpers lower.c and cluster.c share: constants, arguments, suggestions. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "ast.h"
#include "frontend.h"

#define MAX_IMPORT_DEPTH 64

/* ---- constants ---- */

static const char *what_expr(const Expr *e) {
  switch (e->kind) {
  case E_QUANT: return "a number with a unit";
  case E_STR: return "a string";
  case E_LIST: return "a list";
  case E_CALL: return "a call";
  case E_STAR: return "'*'";
  case E_EACH: return "an 'each' argument";
  case E_INDEX: return "an indexed tensor";
  default: return "an expression";
  }
}

static bool eval_call(const Expr *e, const Dim *dim, int ndim, Num *out, Diag *d);

bool fe_eval(const Expr *e, const Dim *dim, int ndim, Num *out, Diag *d) {
  Num l, r;
  switch (e->kind) {
  case E_NUM:
    *out = (Num){e->is_int, e->i, e->f};
    return true;
  case E_IDENT:
    for (int k = 0; k < ndim; k++)
      if (!strcmp(dim[k].name, e->s)) {
        *out = (Num){true, dim[k].value, (double)dim[k].value};
        return true;
      }
    if (!strcmp(e->s, "inf") || !strcmp(e->s, "nan")) {
      *out = (Num){false, 0, e->s[0] == 'i' ? INFINITY : NAN};
      return true;
    }
    diag_error(d, e->loc, ndim ? "'%s' is not a dimension" : "expected a number, found '%s'", e->s);
    return false;
  case E_NEG:
    if (!fe_eval(e->lhs, dim, ndim, &l, d))
      return false;
    if (l.is_int && l.i == INT64_MIN) {
      diag_error(d, e->loc, "integer overflow in constant expression");
      return false;
    }
    *out = (Num){l.is_int, -l.i, -l.f};
    return true;
  case E_BINARY:
    if (e->op == '@') {
      diag_error(d, e->loc, "'@' needs tensors, not numbers");
      return false;
    }
    if (ast_compare(e->op)) {
      diag_error(d, e->loc, "a comparison gives a mask (a tensor), not a number");
      return false;
    }
    bool okl = fe_eval(e->lhs, dim, ndim, &l, d);
    bool okr = fe_eval(e->rhs, dim, ndim, &r, d);
    if (!okl || !okr)
      return false;
    if (e->op == '/' && r.f == 0) {
      diag_error(d, e->loc, "division by zero in constant expression");
      return false;
    }
    if (l.is_int && r.is_int && (e->op != '/' || l.i % r.i == 0)) {
      int64_t v = 0;
      bool over;
      switch (e->op) {
      case '+': over = __builtin_add_overflow(l.i, r.i, &v); break;
      case '-': over = __builtin_sub_overflow(l.i, r.i, &v); break;
      case '*': over = __builtin_mul_overflow(l.i, r.i, &v); break;
      default: over = r.i == -1 && l.i == INT64_MIN; v = over ? 0 : l.i / r.i; break;
      }
      if (over) {
        diag_error(d, e->loc, "integer overflow in constant expression");
        return false;
      }
      *out = (Num){true, v, (double)v};
      return true;
    }
    double f = e->op == '+' ? l.f + r.f : e->op == '-' ? l.f - r.f : e->op == '*' ? l.f * r.f : l.f / r.f;
    *out = (Num){false, 0, f};
    return true;
  case E_ERROR:
    return false;
  case E_CALL:
    return eval_call(e, dim, ndim, out, d);
  default:
    diag_error(d, e->loc, "expected a number, found %s", what_expr(e));
    return false;
  }
}

/* sqrt(x), the one function of constant expressions (sqrt(2.0 / D) in an
 * initialiser's argument). */
static bool eval_call(const Expr *e, const Dim *dim, int ndim, Num *out, Diag *d) {
  if (strcmp(e->s, "sqrt")) {
    diag_error(d, e->loc, "expected a number, found a call to '%s' (a constant expression "
               "calls sqrt only)", e->s);
    return false;
  }
  if (e->args.n != 1 || e->args.a[0].name) {
    diag_error(d, e->loc, "'sqrt' takes one argument, by position");
    return false;
  }
  Num x;
  if (!fe_eval(e->args.a[0].val, dim, ndim, &x, d))
    return false;
  if (x.f < 0) {
    diag_error(d, e->loc, "sqrt of %g, a negative number", x.f);
    return false;
  }
  *out = (Num){false, 0, sqrt(x.f)};
  return true;
}

bool fe_eval_int(const Expr *e, const Dim *dim, int ndim, const char *what, int64_t *out, Diag *d) {
  Num v;
  if (!fe_eval(e, dim, ndim, &v, d))
    return false;
  if (!v.is_int) {
    diag_error(d, e->loc, v.f == floor(v.f) && fabs(v.f) < 1e15 ? "%s must be an integer, not %.1f"
                                                                 : "%s must be an integer, not %g",
               what, v.f);
    return false;
  }
  *out = v.i;
  return true;
}

bool fe_eval_float(const Expr *e, const Dim *dim, int ndim, const char *what, double *out, Diag *d) {
  Num v;
  if (!fe_eval(e, dim, ndim, &v, d))
    return false;
  if (!isfinite(v.f)) {
    diag_error(d, e->loc, "%s is not a finite number", what);
    return false;
  }
  *out = v.f;
  return true;
}

bool fe_eval_real(const Expr *e, const Dim *dim, int ndim, const char *what, double *out, Diag *d) {
  Num v;
  if (!fe_eval(e, dim, ndim, &v, d))
    return false;
  if (isnan(v.f)) {
    diag_error(d, e->loc, "%s is NaN (not a number); it must be a real number, -inf or inf", what);
    return false;
  }
  *out = v.is_int ? (double)v.i : v.f;   /* -0 is 0 */
  return true;
}

/* ---- suggestions ---- */

/* Edit distance with transpositions (optimal string alignment). */
static int distance(const char *a, int n, const char *b, int m) {
  int row[3][65];
  for (int j = 0; j <= m; j++)
    row[0][j] = j;
  for (int i = 1; i <= n; i++) {
    int *cur = row[i % 3], *prev = row[(i + 2) % 3], *prev2 = row[(i + 1) % 3];
    cur[0] = i;
    for (int j = 1; j <= m; j++) {
      int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
      int del = prev[j] + 1, ins = cur[j - 1] + 1;
      int best = sub < del ? sub : del;
      best = best < ins ? best : ins;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && prev2[j - 2] + 1 < best)
        best = prev2[j - 2] + 1;
      cur[j] = best;
    }
  }
  return row[n % 3][m];
}

const char *fe_suggest(const char *name, const char *const *cand, int n) {
  int len = (int)strlen(name);
  if (len > 64)
    return NULL;
  const char *best = NULL;
  int bestd = len / 3 > 1 ? len / 3 : 1;
  for (int k = 0; k < n; k++) {
    int clen = (int)strlen(cand[k]);
    if (clen > 64 || !strcmp(cand[k], name))
      continue;
    int dist = distance(name, len, cand[k], clen);
    if (dist <= bestd && dist < clen && (!best || dist < bestd)) {
      best = cand[k];
      bestd = dist;
    }
  }
  return best;
}

const char *fe_did_you_mean(Arena *a, const char *name, const char *const *cand, int n) {
  const char *s = fe_suggest(name, cand, n);
  return s ? arena_printf(a, "; did you mean '%s'?", s) : "";
}

/* ---- arguments ---- */

bool fe_bind(const Expr *call, const char *const *param, int nparam, int npos, int nreq,
             Expr **out, Arena *a, Diag *d) {
  bool ok = true;
  int pos = 0, given = 0;
  for (int k = 0; k < call->args.n; k++)
    given += call->args.a[k].name == NULL;
  for (int k = 0; k < nparam; k++)
    out[k] = NULL;
  for (int k = 0; k < call->args.n; k++) {
    const Arg *arg = &call->args.a[k];
    if (!arg->name) {
      if (pos == npos) {
        if (nparam == 0)
          diag_error(d, arg->loc, "'%s' takes no arguments", call->s);
        else if (npos == 0)
          diag_error(d, arg->loc, "the arguments of '%s' must be named, as in %s = ...",
                     call->s, param[0]);
        else
          diag_error(d, arg->loc, "'%s' takes %s%d argument%s, got %d", call->s,
                     nreq < npos ? "at most " : "", npos, npos == 1 ? "" : "s", given);
        return false;
      }
      if (k > 0 && call->args.a[k - 1].name) {
        diag_error(d, arg->loc, "positional argument after a named one");
        return false;
      }
      out[pos++] = arg->val;
      continue;
    }
    int j = 0;
    while (j < nparam && strcmp(param[j], arg->name))
      j++;
    if (j == nparam) {
      if (nparam == 0)
        diag_error(d, arg->loc, "'%s' takes no arguments", call->s);
      else
        diag_error(d, arg->loc, "unknown argument '%s' of '%s'%s", arg->name, call->s,
                   fe_did_you_mean(a, arg->name, param, nparam));
      ok = false;
    } else if (out[j]) {
      diag_error(d, arg->loc, "argument '%s' is given twice", arg->name);
      ok = false;
    } else {
      out[j] = arg->val;
    }
  }
  for (int k = 0; ok && k < nreq; k++)
    if (!out[k]) {
      diag_error(d, call->loc, "missing argument '%s' of '%s'", param[k], call->s);
      ok = false;
    }
  return ok;
}

/* ---- files and imports ---- */

typedef struct FileId { dev_t dev; ino_t ino; const char *name; } FileId;

typedef struct Loader {
  Arena *a;
  Diag *d;
  DeclList decls;        /* of every file, each file's after its importer's */
  VEC(FileId) seen;      /* files read */
  VEC(FileId) stack;     /* the chain of imports being read */
} Loader;

/* Identifies path's file, which must be a regular one; false with errno set. */
static bool file_id(const char *path, FileId *id) {
  struct stat st;
  if (stat(path, &st))
    return false;
  if (!S_ISREG(st.st_mode)) {
    errno = EISDIR;
    if (!S_ISDIR(st.st_mode))
      errno = EINVAL;
    return false;
  }
  *id = (FileId){st.st_dev, st.st_ino, path};
  return true;
}

static int find_id(const FileId *ids, int n, const FileId *id) {
  for (int k = 0; k < n; k++)
    if (ids[k].dev == id->dev && ids[k].ino == id->ino)
      return k;
  return -1;
}

/* An import's path is relative to the directory of the importing file. */
static char *resolve(Arena *a, const char *from, const char *path) {
  const char *slash = strrchr(from, '/');
  if (path[0] == '/' || !slash)
    return arena_strdup(a, path);
  return arena_printf(a, "%.*s%s", (int)(slash - from + 1), from, path);
}

static void load_file(Loader *l, const SrcFile *src);

/* Reads the file an import names, unless it is already read. */
static void load_import(Loader *l, const SrcFile *src, const Decl *dc) {
  char *path = resolve(l->a, src->name, dc->name);
  FileId id;
  if (!file_id(path, &id)) {
    diag_error(l->d, dc->name_loc, "cannot open '%s': %s", path,
               errno == EINVAL ? "not a regular file" : strerror(errno));
    return;
  }
  int on = find_id(l->stack.a, l->stack.n, &id);
  if (on >= 0) {
    char *chain = "";
    for (int j = on; j < l->stack.n; j++)
      chain = arena_printf(l->a, "%s%s -> ", chain, l->stack.a[j].name);
    diag_error(l->d, dc->name_loc, "import cycle: %s%s", chain, path);
    return;
  }
  if (find_id(l->seen.a, l->seen.n, &id) >= 0)
    return;
  if (l->stack.n >= MAX_IMPORT_DEPTH) {
    diag_error(l->d, dc->name_loc, "imports nested more than %d deep", MAX_IMPORT_DEPTH);
    return;
  }
  SrcFile *f = src_read(l->a, path);
  if (!f) {
    diag_error(l->d, dc->name_loc, "cannot read '%s': %s", path, strerror(errno));
    return;
  }
  vec_push(l->a, &l->seen, id);
  vec_push(l->a, &l->stack, id);
  load_file(l, f);
  l->stack.n--;
}

/* Appends src's items, each imported file's in place of its import. */
static void load_file(Loader *l, const SrcFile *src) {
  DeclList mine = {0};
  if (!ast_parse(l->a, src, l->d, &mine))
    return;
  for (int k = 0; k < mine.n && !diag_full(l->d); k++) {
    if (mine.a[k]->kind == D_IMPORT && mine.a[k]->name)
      load_import(l, src, mine.a[k]);
    vec_push(l->a, &l->decls, mine.a[k]);
  }
}

/* Reads src and everything it imports; false after reporting errors. */
static bool load(Loader *l, const SrcFile *src) {
  int nerr = l->d->nerr;
  FileId id;
  if (file_id(src->name, &id)) {
    vec_push(l->a, &l->seen, id);
    vec_push(l->a, &l->stack, id);
  }
  load_file(l, src);
  return l->d->nerr == nerr;
}

/* ---- entry points ---- */

static Decl *find_decl(const Loader *l, DeclKind kind, const char *name) {
  for (int k = 0; k < l->decls.n; k++)
    if (l->decls.a[k]->kind == kind && !strcmp(l->decls.a[k]->name, name))
      return l->decls.a[k];
  return NULL;
}

static const char *did_you_mean_decl(const Loader *l, DeclKind kind, const char *name) {
  VEC(const char *) names = {0};
  for (int k = 0; k < l->decls.n; k++)
    if (l->decls.a[k]->kind == kind)
      vec_push(l->a, &names, l->decls.a[k]->name);
  return fe_did_you_mean(l->a, name, names.a, names.n);
}

/* Reports the second of two items of one kind with the same name. */
static void check_unique(Loader *l, DeclKind kind, const char *what) {
  for (int k = 0; k < l->decls.n; k++) {
    Decl *dc = l->decls.a[k];
    if (dc->kind != kind)
      continue;
    Decl *first = find_decl(l, kind, dc->name);
    if (first != dc) {
      diag_error(l->d, dc->name_loc, "%s '%s' is already defined", what, dc->name);
      if (!diag_full(l->d))
        diag_note(l->d, first->name_loc, "the first definition is here");
    }
  }
}

/* The model to compile: the parallel block's, or the only one. */
static Decl *pick_model(Loader *l, const SrcFile *src, const Decl *par) {
  if (par) {
    Decl *md = find_decl(l, D_MODEL, par->name);
    if (!md)
      diag_error(l->d, par->name_loc, "no model named '%s'%s", par->name,
                 did_you_mean_decl(l, D_MODEL, par->name));
    return md;
  }
  Decl *md = NULL;
  for (int k = 0; k < l->decls.n; k++) {
    Decl *dc = l->decls.a[k];
    if (dc->kind != D_MODEL)
      continue;
    if (md) {
      diag_error(l->d, dc->name_loc,
                 "a second model, '%s'; name the one to compile in a parallel block", dc->name);
      return NULL;
    }
    md = dc;
  }
  if (!md)
    diag_error(l->d, (Loc){src, 1, 1}, "no model in file");
  return md;
}

Module *fe_compile_for(Arena *a, const SrcFile *src, const char *const *defs, int ndefs,
                       Cluster *over, int devices, Diag *d) {
  int nerr = d->nerr;
  Loader l = {.a = a, .d = d};
  if (!load(&l, src))
    return NULL;
  check_unique(&l, D_MODEL, "model");
  bool models_ok = d->nerr == nerr;
  check_unique(&l, D_CLUSTER, "cluster");
  check_unique(&l, D_BLOCK, "block");
  Decl *par = NULL;
  VEC(const Decl *) blocks = {0};
  VEC(Cluster *) clusters = {0};
  for (int k = 0; k < l.decls.n; k++) {
    Decl *dc = l.decls.a[k];
    if (dc->kind == D_CLUSTER) {
      Cluster *c = lower_cluster(a, dc, d);
      vec_push(a, &clusters, c);
    } else if (dc->kind == D_PARALLEL && par) {
      diag_error(d, dc->loc, "a second parallel block; a program has at most one");
      if (!diag_full(d))
        diag_note(d, par->loc, "the first is here");
    } else if (dc->kind == D_PARALLEL) {
      par = dc;
    } else if (dc->kind == D_BLOCK) {
      vec_push(a, &blocks, dc);
    }
  }
  Decl *md = models_ok ? pick_model(&l, src, par) : NULL;
  if (!md)
    return NULL;
  bool *used;
  Module *m = lower_model(a, md, blocks.a, blocks.n, defs, ndefs, &used, d);
  if (!m)
    return NULL;
  if (par) {
    Cluster *c = over;
    for (int k = 0, j = 0; !c && k < l.decls.n; k++)
      if (l.decls.a[k]->kind == D_CLUSTER && !strcmp(l.decls.a[k]->name, par->on))
        c = clusters.a[j];
      else if (l.decls.a[k]->kind == D_CLUSTER)
        j++;
    if (!c && !find_decl(&l, D_CLUSTER, par->on))
      diag_error(d, par->on_loc, "no cluster named '%s'%s", par->on,
                 did_you_mean_decl(&l, D_CLUSTER, par->on));
    if (c)
      lower_parallel(m, par, c, used, devices, d);
  } else if (devices > 0) {
    diag_error(d, md->name_loc, "--devices resizes the mesh of a parallel block, but model "
               "'%s' has none", m->name);
  } else if (over) {
    m->cluster = over;
    m->plan = PLAN_AUTO;
  }
  return d->nerr == nerr ? m : NULL;
}

Module *fe_compile_on(Arena *a, const SrcFile *src, const char *const *defs, int ndefs,
                      Cluster *over, Diag *d) {
  return fe_compile_for(a, src, defs, ndefs, over, 0, d);
}

Module *fe_compile(Arena *a, const SrcFile *src, const char *const *defs, int ndefs, Diag *d) {
  return fe_compile_on(a, src, defs, ndefs, NULL, d);
}

Cluster *fe_cluster(Arena *a, const SrcFile *src, Diag *d) {
  int nerr = d->nerr;
  Loader l = {.a = a, .d = d};
  if (!load(&l, src))
    return NULL;
  Decl *cd = NULL;
  for (int k = 0; k < l.decls.n; k++) {
    Decl *dc = l.decls.a[k];
    if (dc->kind != D_CLUSTER)
      continue;
    if (cd) {
      diag_error(d, dc->name_loc, "a second cluster, '%s'; a cluster file holds one", dc->name);
      return NULL;
    }
    cd = dc;
  }
  if (!cd) {
    diag_error(d, (Loc){src, 1, 1}, "no cluster in file");
    return NULL;
  }
  Cluster *c = lower_cluster(a, cd, d);
  return d->nerr == nerr ? c : NULL;
}
