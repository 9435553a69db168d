/* parse.c: reads the text form of docs/IR.md back into a module. A hand-written
 * lexer feeds a line-oriented recursive-descent parser that reports each error
 * at its position in the text and resumes at the next line. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrt.h"
#include "ir.h"

/* Attributes per list and positions per mesh; the text form needs far fewer. */
#define MAX_ATTRS 64
#define MAX_MESH_SIZE (1 << 20)
/* A file named by a loc is read for carets only if it is a plausible source. */
#define MAX_SRC_SIZE ((off_t)1 << 26)

typedef enum { T_EOF, T_NL, T_IDENT, T_INT, T_FLOAT, T_STR, T_VAL, T_FUNC, T_PUNCT, T_ERR } TokKind;

typedef struct Tok {
  TokKind kind;
  const char *at;   /* raw text */
  size_t len;
  Loc loc;
  const char *s;    /* STR, VAL, FUNC: the decoded name */
  int64_t i;        /* INT; VAL when num */
  double f;         /* FLOAT */
  bool num;         /* VAL written %N: an unnamed value */
} Tok;

/* Open-addressing string map; a NULL value marks a name whose definition
 * failed, so that its uses are dropped without further errors. */
typedef struct MapEnt { const char *key; void *val; } MapEnt;
typedef struct Map { MapEnt *e; int cap, n; } Map;

typedef struct Parser {
  Arena *a;
  Diag *d;
  const SrcFile *src;   /* the text, flagged ir_text */
  const char *text;
  size_t len, pos;
  int line, col;
  bool quiet;           /* skipping a bad line: no lexer errors */
  Tok tok;
  Module *m;
  Map files;            /* name -> SrcFile named by locs */
  Map vals, nums;       /* per function: %name and %N -> Inst */
  bool seen_plan, seen_train;
  bool empty_ok;        /* in a device's copy: a table-wise table's empty blocks */
} Parser;

typedef struct PAttr { Attr a; Loc loc; } PAttr;
typedef VEC(PAttr) PAttrs;

static void error_at(Parser *p, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(p->d, loc, fmt, ap);
  va_end(ap);
}

/* ---- maps ---- */

static uint64_t hash(const char *s) { return ir_hash(s, strlen(s)); }

static MapEnt *map_find(Map *m, const char *key) {
  if (!m->cap)
    return NULL;
  for (uint64_t h = hash(key) & (uint64_t)(m->cap - 1);; h = (h + 1) & (uint64_t)(m->cap - 1)) {
    if (!m->e[h].key)
      return NULL;
    if (!strcmp(m->e[h].key, key))
      return &m->e[h];
  }
}

/* key must be absent. */
static void map_put(Arena *a, Map *m, const char *key, void *val) {
  if (2 * (m->n + 1) > m->cap) {
    Map g = {arena_alloc(a, sizeof(MapEnt) * (size_t)(m->cap ? 2 * m->cap : 64)),
             m->cap ? 2 * m->cap : 64, 0};
    for (int k = 0; k < m->cap; k++)
      if (m->e[k].key)
        map_put(a, &g, m->e[k].key, m->e[k].val);
    *m = g;
  }
  uint64_t h = hash(key) & (uint64_t)(m->cap - 1);
  while (m->e[h].key)
    h = (h + 1) & (uint64_t)(m->cap - 1);
  m->e[h] = (MapEnt){key, val};
  m->n++;
}

/* ---- lexer ---- */

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_name_char(int c) { return is_alpha(c) || is_digit(c) || c == '.'; }

static int peekc(const Parser *p, size_t k) {
  return p->pos + k < p->len ? (unsigned char)p->text[p->pos + k] : -1;
}

/* Never crosses a newline: the lexer turns those into tokens. Columns of
 * lines longer than INT_MAX stay at INT_MAX. */
static void adv(Parser *p, size_t n) {
  p->pos += n;
  p->col = n < (size_t)(INT_MAX - p->col) ? p->col + (int)n : INT_MAX;
}

static Loc here(const Parser *p) { return (Loc){p->src, p->line, p->col}; }

static void lex_error(Parser *p, Loc loc, const char *fmt, ...) {
  if (p->quiet)
    return;
  va_list ap;
  va_start(ap, fmt);
  diag_verror(p->d, loc, fmt, ap);
  va_end(ap);
}

static int hexval(int c) {
  if (is_digit(c))
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* "..." with \" \\ \n \t \xHH; sets tok kind STR and s, or ERR. */
static void lex_string(Parser *p) {
  Tok *t = &p->tok;
  Loc start = here(p);
  size_t end = p->pos + 1;
  while (end < p->len && p->text[end] != '"' && p->text[end] != '\n')
    end += p->text[end] == '\\' && end + 1 < p->len && p->text[end + 1] != '\n' ? 2 : 1;
  if (end >= p->len || p->text[end] != '"') {
    lex_error(p, start, "unterminated string");
    adv(p, end - p->pos);
    t->kind = T_ERR;
    return;
  }
  char *s = arena_alloc(p->a, end - p->pos), *o = s;
  bool ok = true;
  adv(p, 1);
  while (p->pos < end) {
    int c = peekc(p, 0);
    Loc at = here(p);
    if (c != '\\') {
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        lex_error(p, at, "byte 0x%02x in a string; write it as \\x%02x", c, c);
        ok = false;
      }
      *o++ = (char)c;
      adv(p, 1);
      continue;
    }
    int e = peekc(p, 1), h1 = hexval(peekc(p, 2)), h2 = hexval(peekc(p, 3));
    if (e == 'n' || e == 't' || e == '"' || e == '\\') {
      *o++ = e == 'n' ? '\n' : e == 't' ? '\t' : (char)e;
      adv(p, 2);
    } else if (e == 'x' && h1 >= 0 && h2 >= 0 && p->pos + 4 <= end && (h1 | h2)) {
      *o++ = (char)(h1 * 16 + h2);
      adv(p, 4);
    } else {
      if (e == 'x')
        lex_error(p, at, "'\\x' needs two hex digits, not 00");
      else if (e >= 0x20 && e < 0x7f)
        lex_error(p, at, "unknown escape '\\%c' in a string", e);
      else
        lex_error(p, at, "unknown escape in a string");
      ok = false;
      adv(p, e >= 0 && e != '\n' && p->pos + 2 <= end ? 2 : 1);
    }
  }
  adv(p, 1);
  t->kind = ok ? T_STR : T_ERR;
  t->s = s;
}

static void lex_number(Parser *p) {
  Tok *t = &p->tok;
  size_t start = p->pos;
  bool isfloat = false;
  if (peekc(p, 0) == '-')
    adv(p, 1);
  while (is_digit(peekc(p, 0)))
    adv(p, 1);
  if (peekc(p, 0) == '.' && is_digit(peekc(p, 1))) {
    isfloat = true;
    adv(p, 1);
    while (is_digit(peekc(p, 0)))
      adv(p, 1);
  }
  int e1 = peekc(p, 1);
  if ((peekc(p, 0) == 'e' || peekc(p, 0) == 'E') &&
      (is_digit(e1) || ((e1 == '+' || e1 == '-') && is_digit(peekc(p, 2))))) {
    isfloat = true;
    adv(p, 2);
    while (is_digit(peekc(p, 0)))
      adv(p, 1);
  }
  char *s = arena_strndup(p->a, p->text + start, p->pos - start);
  errno = 0;
  if (isfloat) {
    t->kind = T_FLOAT;
    t->f = strtod(s, NULL);
    if (errno == ERANGE && isinf(t->f)) {
      lex_error(p, t->loc, "number %s is out of range", s);
      t->kind = T_ERR;
    }
  } else {
    t->kind = T_INT;
    t->i = strtoll(s, NULL, 10);
    if (errno == ERANGE) {
      lex_error(p, t->loc, "integer %s is out of range", s);
      t->kind = T_ERR;
    }
  }
}

/* %name, %N, %"name", @name, @"name" */
static void lex_sigil(Parser *p) {
  Tok *t = &p->tok;
  int sigil = peekc(p, 0);
  adv(p, 1);
  if (peekc(p, 0) == '"') {
    lex_string(p);
    if (t->kind == T_STR)
      t->kind = sigil == '%' ? T_VAL : T_FUNC;
    return;
  }
  size_t start = p->pos;
  bool digits = true;
  while (is_name_char(peekc(p, 0))) {
    digits &= is_digit(peekc(p, 0));
    adv(p, 1);
  }
  if (p->pos == start) {
    lex_error(p, t->loc, "expected a name after '%c'", sigil);
    t->kind = T_ERR;
    return;
  }
  t->kind = sigil == '%' ? T_VAL : T_FUNC;
  t->s = arena_strndup(p->a, p->text + start, p->pos - start);
  if (sigil == '%' && digits) {
    errno = 0;
    t->i = strtoll(t->s, NULL, 10);
    t->num = true;
    if (errno == ERANGE) {
      lex_error(p, t->loc, "value number %%%s is out of range", t->s);
      t->kind = T_ERR;
    }
  }
}

static void next(Parser *p) {
  Tok *t = &p->tok;
  for (;;) {
    int c = peekc(p, 0);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
      adv(p, 1);
      continue;
    }
    if (c == ';') {
      while (peekc(p, 0) >= 0 && peekc(p, 0) != '\n')
        adv(p, 1);
      continue;
    }
    break;
  }
  *t = (Tok){.loc = here(p), .at = p->text + p->pos};
  int c = peekc(p, 0);
  if (c < 0) {
    t->kind = T_EOF;
  } else if (c == '\n') {
    t->kind = T_NL;
    p->pos++;
    p->line += p->line < INT_MAX;
    p->col = 1;
  } else if (is_alpha(c)) {
    while (is_name_char(peekc(p, 0)))
      adv(p, 1);
    t->kind = T_IDENT;
  } else if (is_digit(c) || (c == '-' && is_digit(peekc(p, 1)))) {
    lex_number(p);
  } else if (c == '"') {
    lex_string(p);
  } else if (c == '%' || c == '@') {
    lex_sigil(p);
  } else if (c && strchr("=,:[]{}()*-", c)) {
    t->kind = T_PUNCT;
    adv(p, 1);
  } else {
    if (c > 0x20 && c < 0x7f)
      lex_error(p, t->loc, "unexpected character '%c'", c);
    else
      lex_error(p, t->loc, "unexpected byte 0x%02x", c);
    t->kind = T_ERR;
    adv(p, 1);
  }
  t->len = (size_t)(p->text + p->pos - t->at);
}

/* ---- token helpers ---- */

static bool is_kw(const Tok *t, const char *kw) {
  return t->kind == T_IDENT && t->len == strlen(kw) && !memcmp(t->at, kw, t->len);
}

static bool is_punct(const Tok *t, int c) { return t->kind == T_PUNCT && *t->at == c; }

static const char *describe(Parser *p, const Tok *t) {
  switch (t->kind) {
  case T_EOF: return "end of file";
  case T_NL: return "end of line";
  case T_STR: return "a string";
  default: break;
  }
  int n = t->len > 40 ? 40 : (int)t->len;
  return arena_printf(p->a, "'%.*s%s'", n, t->at, t->len > 40 ? "..." : "");
}

/* Reports "expected WHAT" unless the lexer already reported this token. */
static bool expected(Parser *p, const char *what) {
  if (p->tok.kind != T_ERR)
    error_at(p, p->tok.loc, "expected %s, found %s", what, describe(p, &p->tok));
  return false;
}

static bool accept(Parser *p, int c) {
  if (!is_punct(&p->tok, c))
    return false;
  next(p);
  return true;
}

static bool expect(Parser *p, int c) {
  if (accept(p, c))
    return true;
  char what[4] = {'\'', (char)c, '\'', 0};
  return expected(p, what);
}

static bool at_eol(const Parser *p) { return p->tok.kind == T_NL || p->tok.kind == T_EOF; }

/* Ends a line: after an error, skips the rest of it quietly. */
static void finish_line(Parser *p, bool ok) {
  if (ok && !at_eol(p))
    expected(p, "end of line");
  bool quiet = p->quiet;
  p->quiet = true;
  while (!at_eol(p))
    next(p);
  p->quiet = quiet;
  if (p->tok.kind == T_NL)
    next(p);
}

static void skip_blank(Parser *p) {
  while (p->tok.kind == T_NL)
    next(p);
}

/* name := IDENT | STR */
static const char *parse_name(Parser *p, const char *what) {
  const char *s = NULL;
  if (p->tok.kind == T_IDENT)
    s = arena_strndup(p->a, p->tok.at, p->tok.len);
  else if (p->tok.kind == T_STR)
    s = p->tok.s;
  else
    return expected(p, what), NULL;
  next(p);
  return s;
}

static bool parse_int(Parser *p, int64_t lo, int64_t hi, const char *what, int64_t *out) {
  if (p->tok.kind != T_INT)
    return expected(p, what);
  if (p->tok.i < lo || p->tok.i > hi) {
    error_at(p, p->tok.loc, "%s must be between %lld and %lld", what, (long long)lo, (long long)hi);
    return false;
  }
  *out = p->tok.i;
  next(p);
  return true;
}

/* number := INT | FLOAT | 'inf' | 'nan' | '-' 'inf' */
static bool parse_number(Parser *p, double *out) {
  Tok *t = &p->tok;
  if (t->kind == T_INT || t->kind == T_FLOAT) {
    *out = t->kind == T_INT ? (double)t->i : t->f;
  } else if (is_kw(t, "inf") || is_kw(t, "nan")) {
    *out = is_kw(t, "inf") ? INFINITY : NAN;
  } else if (is_punct(t, '-')) {
    next(p);
    if (!is_kw(t, "inf"))
      return expected(p, "'inf' after '-'");
    *out = -INFINITY;
  } else {
    return expected(p, "a number");
  }
  next(p);
  return true;
}

/* One SrcFile per file name; read when it can be, so that carets show. */
static const SrcFile *intern_file(Parser *p, const char *name) {
  MapEnt *e = map_find(&p->files, name);
  if (e)
    return e->val;
  struct stat st;
  SrcFile *f = NULL;
  if (stat(name, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= MAX_SRC_SIZE)
    f = src_read(p->a, name);
  if (!f) {
    f = arena_alloc(p->a, sizeof *f);
    f->name = name;
  }
  map_put(p->a, &p->files, name, f);
  return f;
}

/* loc := 'loc' STR ':' INT ':' INT; leaves *loc alone when absent. */
static bool parse_loc(Parser *p, Loc *loc) {
  if (!is_kw(&p->tok, "loc"))
    return true;
  next(p);
  if (p->tok.kind != T_STR)
    return expected(p, "a file name string");
  const char *name = p->tok.s;
  int64_t line, col;
  next(p);
  if (!expect(p, ':') || !parse_int(p, 1, INT_MAX, "a line number", &line) ||
      !expect(p, ':') || !parse_int(p, 1, INT_MAX, "a column number", &col))
    return false;
  *loc = (Loc){intern_file(p, name), (int)line, (int)col};
  return true;
}

/* type := ('f32' | 'i32') '[' [INT {',' INT}] ']' | 'void' */
static bool parse_type(Parser *p, Type *t) {
  *t = (Type){0};
  if (is_kw(&p->tok, "void")) {
    next(p);
    return true;
  }
  if (is_kw(&p->tok, "f32"))
    t->dtype = DT_F32;
  else if (is_kw(&p->tok, "i32"))
    t->dtype = DT_I32;
  else
    return expected(p, "a type (f32[...], i32[...] or void)");
  next(p);
  if (!expect(p, '['))
    return false;
  if (accept(p, ']'))
    return true;
  int64_t elems = 1;
  for (;;) {
    Loc at = p->tok.loc;
    int64_t n;
    if (t->rank == IR_MAX_RANK) {
      error_at(p, at, "a tensor has at most %d dimensions", IR_MAX_RANK);
      return false;
    }
    if (!parse_int(p, p->empty_ok ? 0 : 1, IR_MAX_DIM, "a dimension", &n))
      return false;
    if (n && elems > IR_MAX_ELEMS / n) {
      error_at(p, at, "a tensor has at most %lld elements", (long long)IR_MAX_ELEMS);
      return false;
    }
    elems *= n;
    t->dim[t->rank++] = n;
    if (accept(p, ']'))
      return true;
    if (!expect(p, ','))
      return false;
  }
}

/* attrs := '{' [attr {',' attr}] '}'     attr := name '=' value
 * value := INT | FLOAT | STR | 'inf' | 'nan' | '-' 'inf' | '[' [INT {',' INT}] ']' */
static bool parse_attrs(Parser *p, PAttrs *v) {
  v->n = 0;
  if (!accept(p, '{') || accept(p, '}'))
    return true;
  for (;;) {
    PAttr pa = {.loc = p->tok.loc};
    if (v->n == MAX_ATTRS) {
      error_at(p, pa.loc, "more than %d attributes", MAX_ATTRS);
      return false;
    }
    if (!(pa.a.name = parse_name(p, "an attribute name")))
      return false;
    for (int k = 0; k < v->n; k++)
      if (!strcmp(v->a[k].a.name, pa.a.name)) {
        error_at(p, pa.loc, "attribute '%s' is given twice", pa.a.name);
        return false;
      }
    if (!expect(p, '='))
      return false;
    Tok *t = &p->tok;
    if (t->kind == T_INT) {
      pa.a.kind = A_INT;
      pa.a.i = t->i;
      next(p);
    } else if (t->kind == T_STR) {
      pa.a.kind = A_STR;
      pa.a.s = t->s;
      next(p);
    } else if (accept(p, '[')) {
      VEC(int64_t) ints = {0};
      pa.a.kind = A_INTS;
      while (!accept(p, ']')) {
        if (ints.n && !expect(p, ','))
          return false;
        if (t->kind != T_INT)
          return expected(p, "an integer");
        vec_push(p->a, &ints, t->i);
        next(p);
      }
      pa.a.ints = ints.a ? ints.a : arena_alloc(p->a, sizeof(int64_t));
      pa.a.n = ints.n;
    } else if (t->kind == T_FLOAT || is_kw(t, "inf") || is_kw(t, "nan") || is_punct(t, '-')) {
      pa.a.kind = A_FLOAT;
      if (!parse_number(p, &pa.a.f))
        return false;
    } else {
      return expected(p, "an attribute value (number, string or [integers])");
    }
    vec_push(p->a, v, pa);
    if (accept(p, '}'))
      return true;
    if (!expect(p, ','))
      return false;
  }
}

/* Stores attributes into the fields of rec named by the table. */
static bool set_fields(Parser *p, void *rec, const IrField *fields, const PAttrs *v,
                       const char *what) {
  bool ok = true;
  for (int k = 0; k < v->n; k++) {
    const Attr *a = &v->a[k].a;
    const IrField *f = fields;
    while (f->name && strcmp(f->name, a->name))
      f++;
    char *dst = (char *)rec + f->off;
    if (!f->name) {
      char list[256] = "";
      for (f = fields; f->name; f++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", f == fields ? "" : ", ",
                 f->name);
      error_at(p, v->a[k].loc, "%s has no field '%s' (it has %s)", what, a->name, list);
      ok = false;
    } else if (f->kind == 's' && a->kind == A_STR) {
      memcpy(dst, &a->s, sizeof a->s);
    } else if (f->kind == 'e' && a->kind == A_STR) {
      int e = dtrt_name_index(f->names, f->n, a->s);
      memcpy(dst, &e, sizeof e);
      if (e < 0) {
        char list[256] = "";
        for (int j = 0; j < f->n; j++)
          snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                   f->names[j]);
        error_at(p, v->a[k].loc, "field '%s' of %s is '%s', not one of %s", a->name, what, a->s,
                 list);
        ok = false;
      }
    } else if (f->kind == 'i' && a->kind == A_INT) {
      memcpy(dst, &a->i, sizeof a->i);
      if (f->range && !ir_in_range(f->range, (double)a->i)) {
        error_at(p, v->a[k].loc, "field '%s' of %s must be %s, not %lld", a->name, what,
                 f->range->text, (long long)a->i);
        ok = false;
      }
    } else if (f->kind == 'f' && (a->kind == A_FLOAT || a->kind == A_INT)) {
      double x = a->kind == A_INT ? (double)a->i : a->f;
      memcpy(dst, &x, sizeof x);
      if (f->range && !ir_in_range(f->range, x)) {
        error_at(p, v->a[k].loc, "field '%s' of %s must be %s%s, not %g", a->name, what,
                 isfinite(x) ? "" : "finite and ", f->range->text, x);
        ok = false;
      }
    } else {
      error_at(p, v->a[k].loc, "field '%s' of %s must be %s", a->name, what,
               f->kind == 's' || f->kind == 'e' ? "a string"
               : f->kind == 'i'                ? "an integer"
                                               : "a number");
      ok = false;
    }
  }
  return ok;
}

static int find_mesh(const Module *m, const char *name) {
  for (int k = 0; k < m->mesh.n; k++)
    if (!strcmp(m->mesh.a[k].name, name))
      return k;
  return -1;
}

/* The index of mesh's axis named name; -1 after reporting it at loc. */
static int mesh_axis(Parser *p, const Mesh *mesh, const char *name, Loc loc) {
  for (int ax = 0; ax < mesh->naxis; ax++)
    if (!strcmp(mesh->axis_name[ax], name))
      return ax;
  error_at(p, loc, "mesh '%s' has no axis '%s'", mesh->name, name);
  return -1;
}

/* shard := 'shard' name '[' [spec {',' spec}] ']' ['partial' ['(' axis {',' axis} ')']]
 * spec := '*' | axis ['(' number {',' number} ')'] */
static bool parse_shard(Parser *p, int rank, Sharding **out) {
  if (!is_kw(&p->tok, "shard"))
    return true;
  next(p);
  Loc at = p->tok.loc;
  const char *name = parse_name(p, "a mesh name");
  if (!name)
    return false;
  int mi = find_mesh(p->m, name);
  if (mi < 0) {
    error_at(p, at, "unknown mesh '%s'", name);
    return false;
  }
  const Mesh *mesh = &p->m->mesh.a[mi];
  Sharding *s = arena_alloc(p->a, sizeof *s);
  ir_shard_whole(s);
  s->mesh = mi;
  Loc open = p->tok.loc;
  if (!expect(p, '['))
    return false;
  int nd = 0;
  while (!accept(p, ']')) {
    if (nd && !expect(p, ','))
      return false;
    Loc dl = p->tok.loc;
    if (nd == rank) {
      error_at(p, dl, "sharding has more entries than the type's rank %d", rank);
      return false;
    }
    if (accept(p, '*')) {
      nd++;
      continue;
    }
    const char *axn = parse_name(p, "a mesh axis name or '*'");
    int ax = axn ? mesh_axis(p, mesh, axn, dl) : -1;
    if (ax < 0)
      return false;
    s->axis[nd] = (int8_t)ax;
    if (accept(p, '(')) {
      VEC(double) r = {0};
      do {
        double x;
        if (!parse_number(p, &x))
          return false;
        vec_push(p->a, &r, x);
      } while (accept(p, ','));
      if (!expect(p, ')'))
        return false;
      if (r.n != mesh->axis_size[ax]) {
        error_at(p, dl, "axis '%s' has size %d, but %d ratios are given", axn,
                 mesh->axis_size[ax], r.n);
        return false;
      }
      /* checked here, not only by the verifier: the types of the values
       * that follow are worked out from these blocks as they are parsed */
      double sum = 0;
      for (int k = 0; k < r.n; k++) {
        if ((!(r.a[k] > 0) || !isfinite(r.a[k])) && ir_placed(r.a, r.n) < 0) {
          error_at(p, dl, "ratio %d of axis '%s' is %g; ratios must be positive "
                   "(or one 1, the rest 0)", k, axn, r.a[k]);
          return false;
        }
        sum += r.a[k];
      }
      if (!(fabs(sum - 1) <= 1e-6)) {
        error_at(p, dl, "the ratios of axis '%s' sum to %.9g, not 1", axn, sum);
        return false;
      }
      s->ratio[nd] = r.a;
    }
    nd++;
  }
  if (nd != rank) {
    error_at(p, open, "sharding has %d entries, but the type has rank %d", nd, rank);
    return false;
  }
  if (is_kw(&p->tok, "partial")) {
    s->partial = true;
    next(p);
    if (accept(p, '(')) {
      do {
        Loc al = p->tok.loc;
        const char *axn = parse_name(p, "a mesh axis name");
        int ax = axn ? mesh_axis(p, mesh, axn, al) : -1;
        if (ax < 0)
          return false;
        s->partial_axes |= (uint8_t)(1u << ax);
      } while (accept(p, ','));
      if (!expect(p, ')'))
        return false;
    }
  }
  *out = s;
  return true;
}

/* ---- declarations ---- */

/* dim := 'dim' name '=' INT [loc] */
static bool parse_dim(Parser *p) {
  Dim dm = {.loc = p->tok.loc};
  next(p);
  if (!(dm.name = parse_name(p, "a dimension name")) || !expect(p, '=') ||
      !parse_int(p, INT64_MIN, INT64_MAX, "an integer", &dm.value) || !parse_loc(p, &dm.loc))
    return false;
  vec_push(p->a, &p->m->dim, dm);
  return true;
}

/* A measured figure's spread (Device, Link, Collective): finite, 0 or more;
 * false after reporting it at the line's start. */
static bool spread_ok(Parser *p, double spread, Loc at, const char *what) {
  if (spread >= 0 && isfinite(spread))
    return true;
  error_at(p, at, "the spread of %s must be a finite number of 0 or more", what);
  return false;
}

/* node := 'node' name [loc]
 * device := 'device' name 'on' name [attrs] [loc]
 * link := 'link' name [attrs] [loc]
 * collective := 'collective' name [attrs] [loc] */
static bool parse_cluster_line(Parser *p, Cluster *c) {
  PAttrs attrs = {0};
  Loc at = p->tok.loc;
  if (is_kw(&p->tok, "node")) {
    Node n = {.loc = at};
    next(p);
    if (!(n.name = parse_name(p, "a node name")) || !parse_loc(p, &n.loc))
      return false;
    vec_push(p->a, &c->node, n);
    return true;
  }
  if (is_kw(&p->tok, "device")) {
    Device dv = {.loc = at};
    next(p);
    if (!(dv.name = parse_name(p, "a device name")))
      return false;
    if (!is_kw(&p->tok, "on"))
      return expected(p, "'on'");
    next(p);
    Loc nl = p->tok.loc;
    const char *node = parse_name(p, "a node name");
    if (!node)
      return false;
    while (dv.node < c->node.n && strcmp(c->node.a[dv.node].name, node))
      dv.node++;
    if (dv.node == c->node.n) {
      error_at(p, nl, "unknown node '%s'", node);
      return false;
    }
    if (!parse_attrs(p, &attrs) || !set_fields(p, &dv, ir_device_fields, &attrs, "a device") ||
        !parse_loc(p, &dv.loc) || !spread_ok(p, dv.spread, at, "a device"))
      return false;
    if (!dv.tile_m != !dv.tile_n) {
      error_at(p, at, "a device gives tile_m and tile_n together, or neither");
      return false;
    }
    vec_push(p->a, &c->dev, dv);
    return true;
  }
  if (is_kw(&p->tok, "link")) {
    Link l = {.loc = at};
    next(p);
    if (!(l.name = parse_name(p, "a link name")) || !parse_attrs(p, &attrs) ||
        !set_fields(p, &l, ir_link_fields, &attrs, "a link") || !parse_loc(p, &l.loc) ||
        !spread_ok(p, l.spread, at, "a link"))
      return false;
    vec_push(p->a, &c->link, l);
    return true;
  }
  if (is_kw(&p->tok, "collective")) {
    Collective col = {.loc = at};
    next(p);
    Loc nl = p->tok.loc;
    const char *name = parse_name(p, "a collective name");
    if (!name)
      return false;
    col.op = ir_op_lookup(name);
    if (col.op < OP_all_reduce || col.op > OP_all_to_all) {
      error_at(p, nl, "unknown collective '%s'", name);
      return false;
    }
    if (!parse_attrs(p, &attrs) ||
        !set_fields(p, &col, ir_collective_fields, &attrs, "a collective") ||
        !parse_loc(p, &col.loc) || !spread_ok(p, col.spread, at, "a collective"))
      return false;
    if (col.method < DTRT_COMM_MPI || col.method >= DTRT_COMM_COUNT || col.ranks < 2 ||
        col.ranks > INT_MAX || !(col.bw > 0) || !(col.lat >= 0) || isinf(col.bw) ||
        isinf(col.lat)) {
      error_at(p, at, "collective %s needs a method from 0 to %d, ranks from 2, a finite bw "
               "above 0 and a finite lat of 0 or more", name, DTRT_COMM_COUNT - 1);
      return false;
    }
    vec_push(p->a, &c->coll, col);
    return true;
  }
  return expected(p, "'node', 'device', 'link', 'collective' or '}'");
}

static bool is_toplevel(const Tok *t) {
  static const char *kws[] = {"module", "dim",           "cluster", "mesh",  "plan",
                              "train",  "input",         "param",   "state", "func",
                              "buffer", "deterministic", "exchange", "shard_state",
                              "attention"};
  for (int k = 0; k < COUNTOF(kws); k++)
    if (is_kw(t, kws[k]))
      return true;
  return false;
}

/* True at the '}' that closes a block opened on line `open` (consumed with
 * its line), and where a '}' was forgotten: end of file or a declaration. */
static bool block_end(Parser *p, Loc open, const char *what) {
  skip_blank(p);
  if (p->tok.kind == T_EOF || is_toplevel(&p->tok)) {
    error_at(p, p->tok.loc, "missing '}' to close %s opened on line %d", what, open.line);
    return true;
  }
  if (!is_punct(&p->tok, '}'))
    return false;
  next(p);
  finish_line(p, true);
  return true;
}

/* After a bad block header: skips the block's lines quietly. */
static void skip_block(Parser *p) {
  finish_line(p, false);
  p->quiet = true;
  for (skip_blank(p); p->tok.kind != T_EOF && !is_toplevel(&p->tok); skip_blank(p)) {
    bool close = is_punct(&p->tok, '}');
    finish_line(p, false);
    if (close)
      break;
  }
  p->quiet = false;
}

/* cluster := 'cluster' name [loc] '{' NL {cluster-line NL} '}' */
static void parse_cluster(Parser *p) {
  Loc at = p->tok.loc;
  Cluster *c = arena_alloc(p->a, sizeof *c);
  c->loc = at;
  if (p->m->cluster)
    error_at(p, at, "a module has one cluster");
  next(p);
  if (p->m->cluster || !(c->name = parse_name(p, "a cluster name")) || !parse_loc(p, &c->loc) ||
      !expect(p, '{') || (!at_eol(p) && !expected(p, "end of line after '{'"))) {
    skip_block(p);
    return;
  }
  p->m->cluster = c;
  finish_line(p, true);
  while (!block_end(p, at, "the cluster") && !diag_full(p->d))
    finish_line(p, parse_cluster_line(p, c));
}

/* mesh := 'mesh' name '[' [axis '=' INT {',' axis '=' INT}] ']' 'on' '[' dev {',' dev} ']' [loc]
 * dev := name | INT */
static bool parse_mesh(Parser *p) {
  Mesh mh = {.loc = p->tok.loc};
  next(p);
  if (!(mh.name = parse_name(p, "a mesh name")) || !expect(p, '['))
    return false;
  int64_t size = 1;
  while (!accept(p, ']')) {
    if (mh.naxis && !expect(p, ','))
      return false;
    Loc al = p->tok.loc;
    if (mh.naxis == IR_MAX_MESH_AXES) {
      error_at(p, al, "a mesh has at most %d axes", IR_MAX_MESH_AXES);
      return false;
    }
    int64_t n;
    if (!(mh.axis_name[mh.naxis] = parse_name(p, "an axis name")) || !expect(p, '=') ||
        !parse_int(p, 1, MAX_MESH_SIZE, "an axis size", &n))
      return false;
    if ((size *= n) > MAX_MESH_SIZE) {
      error_at(p, al, "a mesh has at most %d positions", MAX_MESH_SIZE);
      return false;
    }
    mh.axis_size[mh.naxis++] = (int)n;
  }
  if (!is_kw(&p->tok, "on"))
    return expected(p, "'on'");
  next(p);
  Loc open = p->tok.loc;
  if (!expect(p, '['))
    return false;
  const Cluster *c = p->m->cluster;
  int ndev = c ? c->dev.n : 1;
  VEC(int) devs = {0};
  while (!accept(p, ']')) {
    if (devs.n && !expect(p, ','))
      return false;
    Loc dl = p->tok.loc;
    int idx = 0;
    if (p->tok.kind == T_INT) {
      if (p->tok.i < 0 || p->tok.i >= ndev) {
        error_at(p, dl, "device %lld is out of range: %s", (long long)p->tok.i,
                 c ? "the cluster has fewer devices" : "without a cluster the only device is 0");
        return false;
      }
      idx = (int)p->tok.i;
      next(p);
    } else {
      const char *dn = parse_name(p, "a device name");
      if (!dn)
        return false;
      while (c && idx < c->dev.n && strcmp(c->dev.a[idx].name, dn))
        idx++;
      if (!c || idx == c->dev.n) {
        error_at(p, dl, "unknown device '%s'", dn);
        return false;
      }
    }
    if (devs.n == size) {
      error_at(p, dl, "mesh '%s' has %lld positions, but more devices are listed", mh.name,
               (long long)size);
      return false;
    }
    vec_push(p->a, &devs, idx);
  }
  if (devs.n != size) {
    error_at(p, open, "mesh '%s' has %lld positions, but %d devices are listed", mh.name,
             (long long)size, devs.n);
    return false;
  }
  mh.dev = devs.a ? devs.a : arena_alloc(p->a, sizeof(int));
  if (!parse_loc(p, &mh.loc))
    return false;
  vec_push(p->a, &p->m->mesh, mh);
  return true;
}

/* plan := 'plan' ('none' | 'auto' | 'even' | 'explicit')
 *         ['microbatches' int [loc] ['schedule' ('"1f1b"' | '"gpipe"') [loc]]] */
static bool parse_plan(Parser *p) {
  static const char *names[] = {"none", "auto", "even", "explicit"};
  if (p->seen_plan) {
    error_at(p, p->tok.loc, "a module has one plan");
    return false;
  }
  p->seen_plan = true;
  next(p);
  for (int k = 0; k < COUNTOF(names); k++)
    if (is_kw(&p->tok, names[k])) {
      p->m->plan = (PlanMode)k;
      next(p);
      if (!is_kw(&p->tok, "microbatches"))
        return true;
      int64_t n;
      p->m->microbatches_loc = p->tok.loc;
      next(p);
      if (!parse_int(p, 2, IR_MAX_MICROBATCHES, "a micro-batch count", &n))
        return false;
      p->m->microbatches = (int)n;
      if (!parse_loc(p, &p->m->microbatches_loc))
        return false;
      if (!is_kw(&p->tok, "schedule"))
        return true;
      next(p);
      int k = 0;
      while (p->tok.kind == T_STR && k < COUNTOF(ir_pipe_schedules) &&
             strcmp(p->tok.s, ir_pipe_schedules[k]))
        k++;
      if (p->tok.kind != T_STR || k == COUNTOF(ir_pipe_schedules))
        return expected(p, "\"1f1b\" or \"gpipe\"");
      p->m->schedule = (PipeSchedule)k;
      next(p);
      return parse_loc(p, &p->m->schedule_loc);
    }
  return expected(p, "'none', 'auto', 'even' or 'explicit'");
}

/* deterministic := 'deterministic' INT 'batch' INT [loc] */
static bool parse_deterministic(Parser *p) {
  int64_t n, b;
  if (p->m->det_pieces) {
    error_at(p, p->tok.loc, "a module has one deterministic line");
    return false;
  }
  p->m->det_loc = p->tok.loc;
  next(p);
  if (!parse_int(p, 2, IR_MAX_PIECES, "a piece count", &n))
    return false;
  if (!is_kw(&p->tok, "batch"))
    return expected(p, "'batch'");
  next(p);
  Loc at = p->tok.loc;
  if (!parse_int(p, n, IR_MAX_DIM, "a batch dimension", &b))
    return false;
  if (b % n) {
    error_at(p, at, "a batch of %lld rows is not %lld equal pieces", (long long)b,
             (long long)n);
    return false;
  }
  p->m->det_pieces = (int)n, p->m->batch = b;
  return parse_loc(p, &p->m->det_loc);
}

/* exchange := 'exchange' ('f32' | 'bf16' | 'auto') [loc] */
static bool parse_exchange(Parser *p) {
  if (p->m->exchange_loc.file || p->m->exchange || p->m->exchange_auto) {
    error_at(p, p->tok.loc, "a module has one exchange line");
    return false;
  }
  Loc at = p->tok.loc;
  next(p);
  int k = 0;
  while (k < DT_WIRE_COUNT && !is_kw(&p->tok, dtrt_wire_names[k]))
    k++;
  p->m->exchange_auto = k == DT_WIRE_COUNT && is_kw(&p->tok, "auto");
  if (k == DT_WIRE_COUNT && !p->m->exchange_auto)
    return expected(p, "'f32', 'bf16' or 'auto'");
  next(p);
  p->m->exchange = p->m->exchange_auto ? DT_WIRE_F32 : k;
  p->m->exchange_loc = at;
  return parse_loc(p, &p->m->exchange_loc);
}

/* attention := 'attention' 'heads' [loc] */
static bool parse_attention(Parser *p) {
  if (p->m->attn_heads) {
    error_at(p, p->tok.loc, "a module has one attention line");
    return false;
  }
  Loc at = p->tok.loc;
  next(p);
  if (!is_kw(&p->tok, "heads"))
    return expected(p, "'heads'");
  next(p);
  p->m->attn_heads = true;
  p->m->attn_loc = at;
  return parse_loc(p, &p->m->attn_loc);
}

/* shard_state := 'shard_state' (axis | 'none') [loc], an axis of the mesh
 * before it */
static bool parse_shard_state(Parser *p) {
  if (p->m->state_sharded || p->m->state_whole) {
    error_at(p, p->tok.loc, "a module has one shard_state line");
    return false;
  }
  Loc at = p->tok.loc;
  next(p);
  const Mesh *mesh = p->m->mesh.n ? &p->m->mesh.a[0] : NULL;
  int a = 0;
  while (mesh && a < mesh->naxis && !is_kw(&p->tok, mesh->axis_name[a]))
    a++;
  bool none = mesh && a == mesh->naxis && is_kw(&p->tok, "none");
  if (!mesh || (a == mesh->naxis && !none))
    return expected(p, "an axis of the mesh declared before, or none");
  next(p);
  p->m->state_whole = none;
  p->m->state_sharded = !none;
  p->m->state_axis = a;
  p->m->state_loc = at;
  return parse_loc(p, &p->m->state_loc);
}

/* train := 'train' [attrs] [loc] */
static bool parse_train(Parser *p) {
  PAttrs attrs = {0};
  if (p->seen_train) {
    error_at(p, p->tok.loc, "a module has one train line");
    return false;
  }
  p->seen_train = true;
  p->m->train.loc = p->tok.loc;
  next(p);
  return parse_attrs(p, &attrs) && set_fields(p, &p->m->train, ir_train_fields, &attrs, "train") &&
         parse_loc(p, &p->m->train.loc);
}

/* global := ('input' | 'param' | 'buffer' | 'state') name ':' type [attrs] [shard] [loc] */
static bool parse_global(Parser *p, GlobalKind kind) {
  Global g = {.kind = kind, .init = -1, .loc = p->tok.loc};
  PAttrs attrs = {0};
  next(p);
  if (!(g.name = parse_name(p, "a global name")) || !expect(p, ':') || !parse_type(p, &g.type) ||
      !parse_attrs(p, &attrs) || !set_fields(p, &g, ir_global_fields, &attrs, "a global") ||
      !parse_shard(p, g.type.rank, &g.shard) || !parse_loc(p, &g.loc))
    return false;
  vec_push(p->a, &p->m->global, g);
  return true;
}

/* ---- instructions ---- */

/* %N values are keyed by their number, so %07 is %7. */
static const char *value_key(Parser *p, const Tok *t) {
  return t->num ? arena_printf(p->a, "%lld", (long long)t->i) : t->s;
}

static MapEnt *find_value(Parser *p, const Tok *t) {
  return map_find(t->num ? &p->nums : &p->vals, value_key(p, t));
}

static void define_value(Parser *p, const Tok *t, Inst *in) {
  if (!find_value(p, t))
    map_put(p->a, t->num ? &p->nums : &p->vals, value_key(p, t), in);
}

typedef struct InstLine {
  bool has_lhs, poisoned, typed;
  Tok lhs;
  Op op;
  Loc oploc, tyloc, loc;
  VEC(Inst *) ins;
  PAttrs attrs;
  Type ty;
  Sharding *shard;
  int64_t fuse, offset;
} InstLine;

/* inst := [VAL '='] op [VAL {',' VAL}] [attrs] [':' type] [shard] ['fuse' INT]
 *         ['offset' INT] [loc] */
static bool read_inst(Parser *p, InstLine *l) {
  if (p->tok.kind == T_VAL) {
    l->lhs = p->tok;
    if (find_value(p, &l->lhs)) {
      error_at(p, l->lhs.loc, "%%%s is defined twice", l->lhs.s);
      return false;
    }
    l->has_lhs = true;
    next(p);
    if (!expect(p, '='))
      return false;
  }
  if (p->tok.kind != T_IDENT)
    return expected(p, "an op name");
  l->oploc = p->tok.loc;
  l->op = ir_op_lookup(arena_strndup(p->a, p->tok.at, p->tok.len));
  if (l->op == OP_COUNT) {
    error_at(p, l->oploc, "unknown op %s", describe(p, &p->tok));
    return false;
  }
  next(p);
  while (p->tok.kind == T_VAL) {
    MapEnt *e = find_value(p, &p->tok);
    if (!e) {
      error_at(p, p->tok.loc, "%%%s is not defined before this use", p->tok.s);
      return false;
    }
    l->poisoned |= !e->val;
    vec_push(p->a, &l->ins, e->val);
    next(p);
    if (!accept(p, ','))
      break;
    if (p->tok.kind != T_VAL)
      return expected(p, "a value");
  }
  if (!parse_attrs(p, &l->attrs))
    return false;
  l->tyloc = p->tok.loc;
  if (accept(p, ':')) {
    l->tyloc = p->tok.loc;
    l->typed = true;
    if (!parse_type(p, &l->ty))
      return false;
  }
  if (!parse_shard(p, l->ty.rank, &l->shard))
    return false;
  if (is_kw(&p->tok, "fuse")) {
    next(p);
    if (!parse_int(p, INT32_MIN, INT32_MAX, "a fusion group", &l->fuse))
      return false;
  }
  if (is_kw(&p->tok, "offset")) {
    next(p);
    if (!parse_int(p, INT64_MIN, INT64_MAX, "an offset", &l->offset))
      return false;
  }
  return parse_loc(p, &l->loc) && (at_eol(p) || expected(p, "end of line"));
}

/* Appends the instruction, checks its attributes and infers its type, which
 * must be the one written; on an error it is taken out again. */
static bool build_inst(Parser *p, Func *f, const InstLine *l) {
  Inst *in = ir_new(f, l->op, l->loc, l->ins.n, l->ins.a);
  Loc *at = arena_alloc(p->a, sizeof(Loc) * (size_t)(l->attrs.n + 1));
  for (int k = 0; k < l->attrs.n; k++) {
    const Attr *a = &l->attrs.a[k].a;
    at[k] = l->attrs.a[k].loc;
    switch (a->kind) {
    case A_INT: ir_set_int(in, a->name, a->i); break;
    case A_INTS: ir_set_ints(in, a->name, a->ints, a->n); break;
    case A_FLOAT: ir_set_float(in, a->name, a->f); break;
    case A_STR: ir_set_str(in, a->name, a->s); break;
    }
  }
  char err[256], b1[128], b2[128];
  if (l->op == OP_arg && l->typed)
    in->type = l->ty;   /* an arg's type is the one written */
  bool ok = ir_check_attrs(in, p->d, l->oploc, at);
  if (ok && !ir_infer(in, err, sizeof err)) {
    error_at(p, l->oploc, "%s", err);
    ok = false;
  } else if (ok && l->typed && !type_eq(&l->ty, &in->type)) {
    error_at(p, l->tyloc, "type %s does not match the inferred type %s", type_str(&l->ty, b1, 128),
             type_str(&in->type, b2, 128));
    ok = false;
  } else if (ok && !l->typed && in->type.dtype != DT_VOID) {
    error_at(p, l->tyloc, "missing the type ': %s' of '%s'", type_str(&in->type, b1, 128),
             ir_ops[l->op].name);
    ok = false;
  }
  if (!ok) {
    f->inst.n--;
    return false;
  }
  in->name = l->has_lhs && !l->lhs.num ? l->lhs.s : NULL;
  in->shard = l->shard;
  in->fuse = (int)l->fuse;
  in->offset = l->offset;
  return true;
}

/* A value whose line fails is still defined, as poison: its users are
 * dropped quietly instead of reporting it undefined. */
static bool parse_inst(Parser *p, Func *f) {
  InstLine l = {.loc = p->tok.loc, .offset = -1};
  bool ok = read_inst(p, &l) && !l.poisoned && build_inst(p, f, &l);
  if (l.has_lhs)
    define_value(p, &l.lhs, ok ? f->inst.a[f->inst.n - 1] : NULL);
  return ok;
}

/* func := 'func' FUNC ['device' INT] ['body'] [loc] '{' NL {inst NL} '}' */
static void parse_func(Parser *p) {
  Loc at = p->tok.loc, loc = at;
  const char *name = NULL;
  int64_t device = -1;
  next(p);
  if (p->tok.kind == T_FUNC) {
    name = p->tok.s;
    next(p);
  } else {
    expected(p, "a function name (@name)");
  }
  bool dev_ok = true;
  if (name && is_kw(&p->tok, "device")) {
    next(p);
    dev_ok = parse_int(p, 0, INT_MAX, "a device number", &device);
  }
  bool body = false;
  if (name && dev_ok && is_kw(&p->tok, "body")) {
    next(p);
    body = true;
  }
  if (!name || !dev_ok || !parse_loc(p, &loc) || !expect(p, '{') ||
      (!at_eol(p) && !expected(p, "end of line after '{'"))) {
    skip_block(p);
    return;
  }
  if (ir_find_func(p->m, name)) {
    error_at(p, at, "a second function @%s", name);
    skip_block(p);
    return;
  }
  Func *f = ir_add_func(p->m, name, loc);
  f->device = (int)device;
  f->body = body;
  p->vals = p->nums = (Map){0};
  finish_line(p, true);
  p->empty_ok = device >= 0;
  while (!block_end(p, at, "the function") && !diag_full(p->d))
    finish_line(p, parse_inst(p, f));
  p->empty_ok = false;
}

/* module := 'module' name NL {decl NL} */
Module *ir_parse(Arena *a, const SrcFile *src, Diag *d) {
  SrcFile *self = arena_alloc(a, sizeof *self);
  *self = *src;
  self->ir_text = true;
  Parser ps = {.a = a, .d = d, .src = self, .text = src->text ? src->text : "",
               .len = src->text ? src->len : 0, .line = 1, .col = 1};
  Parser *p = &ps;
  int nerr = d->nerr;
  next(p);
  skip_blank(p);
  if (!is_kw(&p->tok, "module")) {
    expected(p, "'module NAME' to start the IR text");
    p->m = ir_module_new(a, "");
  } else {
    Loc at = p->tok.loc;
    next(p);
    const char *name = parse_name(p, "a module name");
    p->m = ir_module_new(a, name ? name : "");
    p->m->loc = at;
    finish_line(p, name != NULL);
  }
  while (!diag_full(d)) {
    skip_blank(p);
    Tok *t = &p->tok;
    bool ok;
    if (t->kind == T_EOF)
      break;
    if (is_kw(t, "cluster")) {
      parse_cluster(p);
      continue;
    }
    if (is_kw(t, "func")) {
      parse_func(p);
      continue;
    }
    if (is_kw(t, "dim"))
      ok = parse_dim(p);
    else if (is_kw(t, "mesh"))
      ok = parse_mesh(p);
    else if (is_kw(t, "plan"))
      ok = parse_plan(p);
    else if (is_kw(t, "train"))
      ok = parse_train(p);
    else if (is_kw(t, "deterministic"))
      ok = parse_deterministic(p);
    else if (is_kw(t, "exchange"))
      ok = parse_exchange(p);
    else if (is_kw(t, "shard_state"))
      ok = parse_shard_state(p);
    else if (is_kw(t, "attention"))
      ok = parse_attention(p);
    else if (is_kw(t, "input"))
      ok = parse_global(p, G_INPUT);
    else if (is_kw(t, "param"))
      ok = parse_global(p, G_PARAM);
    else if (is_kw(t, "buffer"))
      ok = parse_global(p, G_BUFFER);
    else if (is_kw(t, "state"))
      ok = parse_global(p, G_STATE);
    else if (is_kw(t, "module"))
      ok = (error_at(p, t->loc, "a file holds one module"), false);
    else
      ok = expected(p, "a declaration (dim, cluster, mesh, plan, deterministic, exchange, "
                       "shard_state, attention, train, input, param, buffer, state, func)");
    finish_line(p, ok);
  }
  return d->nerr > nerr ? NULL : p->m;
}

Module *ir_parse_string(Arena *a, const char *name, const char *text) {
  Diag quiet;
  diag_init_quiet(&quiet);
  Module *m = ir_parse(a, src_from_string(a, name, text), &quiet);
  return quiet.nerr ? NULL : m;
}

Module *ir_copy(Arena *a, const Module *m) {
  char *text = ir_print_string(m);
  Module *copy = text ? ir_parse_string(a, m->name, text) : NULL;
  free(text);
  if (copy)   /* a driver's flag the text does not hold (the planner's trials honour it) */
    copy->no_coalesce = m->no_coalesce;
  return copy;
}
