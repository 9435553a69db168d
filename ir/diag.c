/* diag.c: user-facing diagnostics, clang style: location, message, source
 * line, caret. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir.h"

void diag_init(Diag *d, FILE *out) {
  memset(d, 0, sizeof *d);
  d->out = out ? out : stderr;
  d->max_errors = 20;
}

void diag_init_quiet(Diag *d) {
  diag_init(d, NULL);
  d->quiet = true;
  d->max_errors = 0;
}

bool diag_full(const Diag *d) { return d->max_errors > 0 && d->nerr >= d->max_errors; }

/* A message echoes a run of non-blank bytes (a token, a name) whole up to
 * DIAG_RUN_MAX bytes; a longer one is cut to its first DIAG_RUN_HEAD and last
 * DIAG_RUN_TAIL bytes around "...", at UTF-8 character boundaries. */
enum { DIAG_RUN_MAX = 100, DIAG_RUN_HEAD = 80, DIAG_RUN_TAIL = 8 };

static bool utf8_cont(char c) { return ((unsigned char)c & 0xC0) == 0x80; }

/* Prints the source line of loc and a caret under its column. Long lines are
 * cut to a window around the column so the caret stays readable. */
static void show_line(Diag *d, Loc loc) {
  const char *text = loc.file ? loc.file->text : NULL;
  if (!text || loc.line < 1)
    return;
  const char *p = text, *end = text + loc.file->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n')
      l++;
  if (p >= end && loc.line > 1)
    return;
  const char *e = p;
  while (e < end && *e != '\n')
    e++;
  long len = e - p, col = loc.col > 0 ? loc.col - 1 : 0;
  if (col > len)
    col = len;
  long from = 0;
  if (len > 160 && col > 80)
    from = col - 80;
  while (from > 0 && utf8_cont(p[from]))
    from--;
  long to = from + 160 < len ? from + 160 : len;
  while (to < len && utf8_cont(p[to]))
    to++;
  fputs(from ? "..." : "", d->out);
  for (const char *q = p + from; q < p + to; q++)
    fputc((unsigned char)*q >= 0x20 && *q != 0x7f ? *q : (*q == '\t' ? '\t' : '?'), d->out);
  fputs(to < len ? "...\n" : "\n", d->out);
  if (from)
    fputs("   ", d->out);
  for (const char *q = p + from; q < p + col; q++)
    fputc(*q == '\t' ? '\t' : ' ', d->out);
  fputs("^\n", d->out);
}

static void put_capped(FILE *out, const char *s) {
  while (*s) {
    size_t n = strcspn(s, " \t\n");
    if (n > DIAG_RUN_MAX) {
      size_t head = DIAG_RUN_HEAD, tail = n - DIAG_RUN_TAIL;
      while (head > 0 && utf8_cont(s[head]))
        head--;
      while (tail < n && utf8_cont(s[tail]))
        tail++;
      fwrite(s, 1, head, out);
      fputs("...", out);
      fwrite(s + tail, 1, n - tail, out);
    } else {
      fwrite(s, 1, n, out);
    }
    s += n;
    n = strspn(s, " \t\n");
    fwrite(s, 1, n, out);
    s += n;
  }
}

static void report(Diag *d, Loc loc, const char *kind, const char *fmt, va_list ap) {
  if (d->quiet)
    return;
  if (loc.file)
    fprintf(d->out, "%s:%d:%d: ", loc.file->name, loc.line, loc.col);
  else
    fputs("dtc: ", d->out);
  fprintf(d->out, "%s: ", kind);
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, again);
  va_end(again);
  char *msg = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (msg) {
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    put_capped(d->out, msg);
    free(msg);
  } else {
    vfprintf(d->out, fmt, ap);
  }
  fputc('\n', d->out);
  show_line(d, loc);
}

void diag_verror(Diag *d, Loc loc, const char *fmt, va_list ap) {
  if (diag_full(d)) {
    d->nerr++;
    return;
  }
  report(d, loc, "error", fmt, ap);
  if (d->context && !d->quiet)
    d->context(d, d->context_arg);
  if (++d->nerr == d->max_errors && !d->quiet)
    fprintf(d->out, "dtc: fatal error: too many errors emitted, stopping now\n");
}

void diag_error(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  diag_verror(d, loc, fmt, ap);
  va_end(ap);
}

void diag_warn(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (d->werror) {
    diag_verror(d, loc, fmt, ap);
  } else {
    report(d, loc, "warning", fmt, ap);
    if (d->context && !d->quiet)
      d->context(d, d->context_arg);
    d->nwarn++;
  }
  va_end(ap);
}

void diag_note(Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  report(d, loc, "note", fmt, ap);
  va_end(ap);
}

SrcFile *src_from_string(Arena *a, const char *name, const char *text) {
  SrcFile *f = arena_alloc(a, sizeof *f);
  f->name = arena_strdup(a, name);
  f->len = strlen(text);
  f->text = arena_strndup(a, text, f->len);
  return f;
}

/* src_read's bound, 256 MiB: no model, IR or cluster file is near it. */
#define SRC_MAX_BYTES ((size_t)1 << 28)

SrcFile *src_read(Arena *a, const char *path) {
  int64_t size;
  int fd = dtrt_open_regular(path, (int64_t)SRC_MAX_BYTES, &size);
  if (fd < 0)
    return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  int err = buf ? 0 : ENOMEM;
  while (!err) {
    if (len == cap) {
      if (len > SRC_MAX_BYTES) {   /* it grew while read */
        err = EFBIG;
        break;
      }
      cap = cap > SRC_MAX_BYTES / 2 ? SRC_MAX_BYTES + 1 : 2 * cap;
      char *nb = realloc(buf, cap);
      if (!nb) {
        err = ENOMEM;
        break;
      }
      buf = nb;
    }
    ssize_t got = read(fd, buf + len, cap - len);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      err = got < 0 ? errno : 0;
      break;
    }
    len += (size_t)got;
  }
  close(fd);
  if (err) {
    free(buf);
    errno = err;
    return NULL;
  }
  SrcFile *f = arena_alloc(a, sizeof *f);
  f->name = arena_strdup(a, path);
  f->text = arena_strndup(a, buf, len);   /* NUL-terminated copy */
  f->len = len;
  free(buf);
  return f;
}
