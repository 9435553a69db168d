/* unroll.c: writes a model file's loop out by hand, as a user would without
 * blocks, so that tests and benches can hold a looped model against the same
 * model written layer by layer. The input has one `block NAME(ARG) { ... }`
 * and one `OUT = repeat(N) NAME(IN) as INST` statement; the output has no
 * block, and for each layer i, params INST_i_P (one per block param) and
 * values INST_i_V, the first layer reading IN and each next one the last's
 * return value, OUT the last one's. With --no-dropout every dropout(x, ...)
 * becomes (x). N = 0 keeps the loop (with --no-dropout: the looped model
 * without dropout). The text is read token by token: comments go, spacing
 * stays.
 *
 *     unroll [--no-dropout] [--name MODEL] IN.dt N OUT.dt
 */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *text;
static size_t len;

static void die(const char *msg) {
  fprintf(stderr, "unroll: %s\n", msg);
  exit(1);
}

/* Appends to a growing output. */
static char *out;
static size_t olen, ocap;
static void put(const char *s, size_t n) {
  if (olen + n + 1 > ocap) {
    ocap = 2 * (olen + n + 1);
    out = realloc(out, ocap);
    if (!out)
      die("out of memory");
  }
  memcpy(out + olen, s, n);
  olen += n;
  out[olen] = 0;
}
static void puts_(const char *s) { put(s, strlen(s)); }

static bool ident_start(int c) { return isalpha(c) || c == '_'; }
static bool ident_char(int c) { return isalnum(c) || c == '_'; }

/* The text without comments. */
static char *strip_comments(const char *s) {
  char *r = malloc(strlen(s) + 1);
  size_t n = 0;
  for (; *s; s++) {
    if (*s == '#')
      while (*s && *s != '\n')
        s++;
    if (!*s)
      break;
    r[n++] = *s;
  }
  r[n] = 0;
  return r;
}

/* Removes every dropout(x, ...) for (x). */
static char *no_dropout(const char *s) {
  char *r = malloc(strlen(s) + 1);
  size_t n = 0;
  while (*s) {
    if (!strncmp(s, "dropout", 7) && !ident_char(s[7]) && (n == 0 || !ident_char(r[n - 1]))) {
      const char *p = s + 7;
      while (*p == ' ')
        p++;
      if (*p == '(') {
        r[n++] = '(';
        int depth = 1;
        bool skip = false;
        for (p++; *p && depth; p++) {
          depth += *p == '(' || *p == '[';
          depth -= *p == ')' || *p == ']';
          if (depth == 1 && *p == ',')
            skip = true;
          if (!skip || !depth)
            r[n++] = *p;
        }
        s = p;
        continue;
      }
    }
    r[n++] = *s++;
  }
  r[n] = 0;
  return r;
}

typedef struct Names { char **a; int n; } Names;

static bool has(const Names *ns, const char *s, size_t n) {
  for (int k = 0; k < ns->n; k++)
    if (strlen(ns->a[k]) == n && !strncmp(ns->a[k], s, n))
      return true;
  return false;
}

static void add(Names *ns, const char *s, size_t n) {
  if (has(ns, s, n))
    return;
  ns->a = realloc(ns->a, sizeof *ns->a * (size_t)(ns->n + 1));
  ns->a[ns->n++] = strndup(s, n);
}

/* The names a block defines: params and assigned values, each at the start
 * of a statement (depth 0). */
static void locals(const char *b, size_t n, Names *ns) {
  int depth = 0;
  bool start = true;
  for (size_t i = 0; i < n;) {
    char c = b[i];
    if (c == '\n') {
      start = depth == 0;
      i++;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      i++;
    } else if (ident_start(c)) {
      size_t j = i;
      while (j < n && ident_char(b[j]))
        j++;
      if (start && depth == 0) {
        if (j - i == 5 && !strncmp(b + i, "param", 5)) {
          size_t k = j;
          while (b[k] == ' ')
            k++;
          size_t e = k;
          while (ident_char(b[e]))
            e++;
          add(ns, b + k, e - k);
        } else {
          size_t k = j;
          while (b[k] == ' ')
            k++;
          if (b[k] == '=' && b[k + 1] != '=')
            add(ns, b + i, j - i);
        }
      }
      start = false;
      i = j;
    } else {
      depth += c == '(' || c == '[';
      depth -= c == ')' || c == ']';
      start = false;
      i++;
    }
  }
}

/* Layer i of the block body b[0..n): locals renamed INST_i_NAME, the arg
 * read as `in`, `return e` written `INST_i_out = e`; params first. */
static void layer(const char *b, size_t n, const Names *ns, const char *arg, const char *in,
                  const char *inst, int i, bool params) {
  int depth = 0;
  bool start = true, skip = false;
  char pre[256];
  snprintf(pre, sizeof pre, "%s_%d_", inst, i);
  for (size_t p = 0; p < n;) {
    char c = b[p];
    if (c == '\n') {
      if (!skip)
        put("\n", 1);
      start = depth == 0;
      if (start)
        skip = false;
      p++;
      continue;
    }
    if (start && depth == 0 && c != ' ' && c != '\t' && c != '\r')
      skip = params != (!strncmp(b + p, "param", 5) && !ident_char(b[p + 5]));
    if (ident_start(c)) {
      size_t j = p;
      while (j < n && ident_char(b[j]))
        j++;
      size_t k = j;
      while (k < n && b[k] == ' ')
        k++;
      bool kwarg = depth > 0 && b[k] == '=' && b[k + 1] != '=';
      if (skip) {
      } else if (start && j - p == 6 && !strncmp(b + p, "return", 6)) {
        puts_(pre);
        puts_("out =");
      } else if (!kwarg && j - p == strlen(arg) && !strncmp(b + p, arg, j - p)) {
        puts_(in);
      } else if (!kwarg && has(ns, b + p, j - p)) {
        puts_(pre);
        put(b + p, j - p);
      } else {
        put(b + p, j - p);
      }
      start = false;
      p = j;
      continue;
    }
    if (c != ' ' && c != '\t' && c != '\r')
      start = false;
    depth += c == '(' || c == '[';
    depth -= c == ')' || c == ']';
    if (!skip)
      put(&c, 1);
    p++;
  }
}

static const char *find_word(const char *s, const char *w) {
  size_t n = strlen(w);
  for (const char *p = strstr(s, w); p; p = strstr(p + 1, w))
    if ((p == s || !ident_char(p[-1])) && !ident_char(p[n]))
      return p;
  return NULL;
}

static void expect(const char **p, const char *what) {
  while (**p == ' ')
    (*p)++;
  size_t n = strlen(what);
  if (strncmp(*p, what, n))
    die(what);
  *p += n;
}

static char *word(const char **p) {
  while (**p == ' ')
    (*p)++;
  const char *s = *p;
  while (ident_char(**p))
    (*p)++;
  if (*p == s)
    die("expected a name");
  return strndup(s, (size_t)(*p - s));
}

static void write_out(const char *path) {
  FILE *o = fopen(path, "wb");
  if (!o || fwrite(out, 1, olen, o) != olen || fclose(o))
    die("cannot write the output");
}

int main(int argc, char **argv) {
  bool nodrop = false;
  const char *name = NULL;
  int a = 1;
  for (; a < argc && argv[a][0] == '-'; a++) {
    if (!strcmp(argv[a], "--no-dropout"))
      nodrop = true;
    else if (!strcmp(argv[a], "--name") && a + 1 < argc)
      name = argv[++a];
    else
      die("usage: unroll [--no-dropout] [--name MODEL] IN.dt N OUT.dt");
  }
  if (argc - a != 3)
    die("usage: unroll [--no-dropout] [--name MODEL] IN.dt N OUT.dt");
  int layers = atoi(argv[a + 1]);
  FILE *f = fopen(argv[a], "rb");
  if (!f || layers < 0)
    die("cannot read the input, or N < 0");
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
    text = realloc(text, len + got + 1);
    memcpy(text + len, buf, got);
    len += got;
  }
  fclose(f);
  if (!text)
    die("empty input");
  text[len] = 0;
  char *stripped = strip_comments(text);
  char *src = nodrop ? no_dropout(stripped) : stripped;
  if (!layers) {
    puts_(src);
    write_out(argv[a + 2]);
    if (src != stripped)
      free(src);
    free(stripped);
    free(text);
    free(out);
    return 0;
  }

  /* block NAME(ARG) { body } */
  const char *bk = find_word(src, "block");
  if (!bk)
    die("no block");
  const char *p = bk + 5;
  char *bname = word(&p);
  expect(&p, "(");
  char *arg = word(&p);
  expect(&p, ")");
  expect(&p, "{");
  const char *body = p;
  int depth = 1;
  for (; *p && depth; p++)
    depth += (*p == '{') - (*p == '}');
  if (depth)
    die("unterminated block");
  size_t blen = (size_t)(p - 1 - body);
  const char *after_block = p;
  Names ns = {0};
  locals(body, blen, &ns);

  /* OUT = repeat(N) NAME(IN) as INST */
  const char *rp = find_word(src, "repeat");
  if (!rp)
    die("no repeat");
  const char *ls = rp;
  while (ls > src && ls[-1] != '\n')
    ls--;
  const char *q = ls;
  char *outv = word(&q);
  expect(&q, "=");
  expect(&q, "repeat");
  expect(&q, "(");
  while (*q && *q != ')')
    q++;
  expect(&q, ")");
  char *called = word(&q);
  if (strcmp(called, bname))
    die("the repeat is not of the block");
  free(called);
  expect(&q, "(");
  char *in = word(&q);
  expect(&q, ")");
  expect(&q, "as");
  char *inst = word(&q);
  const char *le = strchr(q, '\n');
  le = le ? le + 1 : q + strlen(q);

  /* the text before the block, the model to the repeat, the layers, the rest */
  put(src, (size_t)(bk - src));
  const char *model = after_block;
  if (name) {
    const char *mk = find_word(after_block, "model");
    if (!mk || mk > ls)
      die("no model before the repeat");
    put(after_block, (size_t)(mk - after_block));
    puts_("model ");
    puts_(name);
    const char *mp = mk + 5;
    free(word(&mp));
    model = mp;
  }
  if (ls < model)
    die("the repeat must follow the block");
  put(model, (size_t)(ls - model));
  char prev[512];
  snprintf(prev, sizeof prev, "%s", in);
  for (int i = 0; i < layers; i++) {
    layer(body, blen, &ns, arg, prev, inst, i, true);
    layer(body, blen, &ns, arg, prev, inst, i, false);
    snprintf(prev, sizeof prev, "%s_%d_out", inst, i);
  }
  puts_("\n  ");
  puts_(outv);
  puts_(" = ");
  puts_(prev);
  puts_("\n");
  puts_(le);
  write_out(argv[a + 2]);
  if (src != stripped)
    free(src);
  free(stripped);
  free(text);
  free(out);
  for (int k = 0; k < ns.n; k++)
    free(ns.a[k]);
  free(ns.a);
  free(bname), free(arg), free(outv), free(in), free(inst);
  return 0;
}
