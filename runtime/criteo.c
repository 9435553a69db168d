/* criteo.c: a streaming reader of the Criteo display-advertising text format
 * (a label, 13 integer and 26 categorical fields a line, tab-separated): lines
 * are read in batches through a fixed buffer, plain or gzip-compressed, each
 * checked whole and turned into DLRM's inputs (log-transformed dense features,
 * categories hashed into each table's rows, labels). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrt_int.h"

enum {
  FIELDS = 1 + DTRT_CRITEO_DENSE + DTRT_CRITEO_CATS,
  BUF = 1 << 16, /* the read buffer; a line must fit with room to spare */
};
_Static_assert(DTRT_CRITEO_MAX_LINE < BUF / 2, "a line fits the buffer");

struct DtCriteo {
  DtrtCtx *ctx;
  gzFile gz;
  char *path;
  int64_t rows[DTRT_CRITEO_CATS];
  int64_t line;     /* lines consumed */
  int64_t pos, len; /* unread bytes: buf[pos, len) */
  bool eof;         /* the file has no more bytes beyond buf */
  DtStatus failed;  /* a read's error: every later read returns it */
  char buf[BUF];
};

int32_t dtrt_criteo_row(uint32_t value, int64_t rows) {
  if (rows <= 1)
    return 0;
  return (int32_t)(1 + dtrt_mix(value) % (uint64_t)(rows - 1));
}

DtStatus dtrt_criteo_open(DtrtCtx *ctx, const char *path, const int64_t *rows, DtCriteo **out) {
  if (!ctx)
    return DT_ERR_ARG;
  if (!out)
    return dtrt_fail(ctx, DT_ERR_ARG, "criteo: no output");
  *out = NULL;
  if (!path || !rows)
    return dtrt_fail(ctx, DT_ERR_ARG, "criteo: no %s", path ? "row counts" : "path");
  for (int k = 0; k < DTRT_CRITEO_CATS; k++)
    if (rows[k] < 1 || rows[k] > INT32_MAX)
      return dtrt_fail(ctx, DT_ERR_ARG, "criteo: table %d (C%d) has %lld rows, not 1 to %d", k,
                       k + 1, (long long)rows[k], INT32_MAX);
  int64_t size;
  int fd = dtrt_open_regular(path, INT64_MAX, &size);
  if (fd < 0 && (errno == EINVAL || errno == EISDIR))
    return dtrt_fail(ctx, DT_ERR_IO, "%s: not a regular file", path);
  if (fd < 0)
    return dtrt_fail(ctx, DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  DtCriteo *r = dtrt_alloc_raw(ctx, sizeof *r);
  size_t n = strlen(path) + 1;
  char *name = r ? dtrt_alloc_raw(ctx, n) : NULL;
  gzFile gz = name ? gzdopen(fd, "rb") : NULL;
  if (!gz) {
    close(fd);
    dtrt_free(ctx, name);
    dtrt_free(ctx, r);
    return r && name ? dtrt_fail(ctx, DT_ERR_NOMEM, "%s: out of memory starting zlib", path)
                     : DT_ERR_NOMEM;
  }
  memcpy(name, path, n);
  *r = (DtCriteo){.ctx = ctx, .gz = gz, .path = name};
  memcpy(r->rows, rows, sizeof r->rows);
  *out = r;
  return DT_OK;
}

void dtrt_criteo_close(DtCriteo *r) {
  if (!r)
    return;
  gzclose(r->gz);
  dtrt_free(r->ctx, r->path);
  dtrt_free(r->ctx, r);
}

DtStatus dtrt_criteo_rewind(DtCriteo *r) {
  if (!r)
    return DT_ERR_ARG;
  if (gzrewind(r->gz))
    return dtrt_fail(r->ctx, DT_ERR_IO, "%s: cannot rewind", r->path);
  r->line = r->pos = r->len = 0;
  r->eof = false;
  r->failed = DT_OK;
  return DT_OK;
}

int64_t dtrt_criteo_line(const DtCriteo *r) { return r ? r->line : 0; }

/* Fills the buffer behind its unread bytes; sets eof at the file's end. */
static DtStatus refill(DtCriteo *r) {
  memmove(r->buf, r->buf + r->pos, (size_t)(r->len - r->pos));
  r->len -= r->pos;
  r->pos = 0;
  int got = gzread(r->gz, r->buf + r->len, (unsigned)(BUF - r->len));
  int err = Z_OK;
  const char *msg = got <= 0 ? gzerror(r->gz, &err) : "";
  if (got < 0 || (err != Z_OK && err != Z_STREAM_END))
    return dtrt_fail(r->ctx, err == Z_ERRNO ? DT_ERR_IO : DT_ERR_FORMAT, "%s:%lld: %s%s", r->path,
                     (long long)r->line + 1,
                     err == Z_BUF_ERROR ? "truncated gzip data" : "cannot read: ",
                     err == Z_BUF_ERROR ? ""
                     : err == Z_ERRNO   ? strerror(errno)
                                        : msg);
  r->len += got;
  r->eof = got == 0;
  return DT_OK;
}

/* The next line (without its '\n') in *p, *n bytes; *n = -1 at the end. A
 * last line without '\n' counts; one longer than DTRT_CRITEO_MAX_LINE is
 * refused before the rest of it is read. */
static DtStatus next_line(DtCriteo *r, const char **p, int64_t *n) {
  for (;;) {
    char *at = r->buf + r->pos, *nl = memchr(at, '\n', (size_t)(r->len - r->pos));
    int64_t have = nl ? nl - at : r->len - r->pos;
    if (have > DTRT_CRITEO_MAX_LINE)
      return dtrt_fail(r->ctx, DT_ERR_FORMAT, "%s:%lld: line longer than %d bytes", r->path,
                       (long long)r->line + 1, DTRT_CRITEO_MAX_LINE);
    if (nl || (r->eof && have > 0)) {
      *p = at;
      *n = have;
      r->pos += have + (nl != NULL);
      r->line++;
      return DT_OK;
    }
    if (r->eof) {
      *n = -1;
      return DT_OK;
    }
    DtStatus s = refill(r);
    if (s)
      return s;
  }
}

/* A field's bytes for a message: quoted, at most 24 of them, anything but
 * printable ASCII as \xNN. */
static const char *shown(const char *s, int64_t n, char *out, size_t size) {
  size_t k = 0;
  out[k++] = '\'';
  for (int64_t i = 0; i < n && i < 24 && k + 6 < size; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
      out[k++] = (char)c;
    else
      k += (size_t)snprintf(out + k, size - k, "\\x%02x", c);
  }
  if (n > 24 && k + 4 < size) {
    memcpy(out + k, "...", 3);
    k += 3;
  }
  out[k++] = '\'';
  out[k] = 0;
  return out;
}

/* An integer field: optional '-', then decimal digits, within int64. */
static int integer(const char *s, int64_t n, int64_t *v) {
  int64_t i = n > 0 && s[0] == '-', x = 0;
  if (i == n)
    return 1;
  for (; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return 1;
    int d = s[i] - '0';
    if (x > (INT64_MAX - d) / 10)
      return 2;
    x = 10 * x + d;
  }
  *v = s[0] == '-' ? -x : x;
  return 0;
}

/* Eight hexadecimal digits, either case. */
static bool hex8(const char *s, int64_t n, uint32_t *v) {
  if (n != 8)
    return false;
  uint32_t x = 0;
  for (int i = 0; i < 8; i++) {
    char c = s[i];
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0)
      return false;
    x = x << 4 | (uint32_t)d;
  }
  *v = x;
  return true;
}

/* Checks line p (n bytes) whole and writes its row of dense, ids, label. */
static DtStatus parse_line(DtCriteo *r, const char *p, int64_t n, float *dense, int32_t *ids,
                           float *label) {
  if (n > 0 && p[n - 1] == '\r')
    n--;
  const char *f[FIELDS];
  int64_t len[FIELDS], nf = 0;
  for (int64_t i = 0, start = 0;; i++)
    if (i == n || p[i] == '\t') {
      if (nf < FIELDS) {
        f[nf] = p + start;
        len[nf] = i - start;
      }
      nf++;
      start = i + 1;
      if (i == n)
        break;
    }
  long long line = (long long)r->line;
  if (nf != FIELDS)
    return dtrt_fail(r->ctx, DT_ERR_FORMAT,
                     "%s:%lld: %lld tab-separated fields, expected %d (a label, %d integers, "
                     "%d categories)",
                     r->path, line, (long long)nf, FIELDS, DTRT_CRITEO_DENSE, DTRT_CRITEO_CATS);
  char q[128];
  if (len[0] != 1 || (f[0][0] != '0' && f[0][0] != '1'))
    return dtrt_fail(r->ctx, DT_ERR_FORMAT, "%s:%lld:1: label %s is not 0 or 1", r->path, line,
                     shown(f[0], len[0], q, sizeof q));
  *label = (float)(f[0][0] - '0');
  for (int k = 0; k < DTRT_CRITEO_DENSE; k++) {
    const char *s = f[1 + k];
    int64_t v = 0;
    int bad = len[1 + k] ? integer(s, len[1 + k], &v) : 0;
    if (bad)
      return dtrt_fail(r->ctx, DT_ERR_FORMAT, "%s:%lld:%lld: I%d: %s %s", r->path, line,
                       (long long)(s - p + 1), k + 1, shown(s, len[1 + k], q, sizeof q),
                       bad == 2 ? "does not fit in 64 bits" : "is not an integer");
    dense[k] = (float)log1p((double)(v > 0 ? v : 0));
  }
  for (int k = 0; k < DTRT_CRITEO_CATS; k++) {
    const char *s = f[1 + DTRT_CRITEO_DENSE + k];
    int64_t m = len[1 + DTRT_CRITEO_DENSE + k];
    uint32_t v = 0;
    if (m && !hex8(s, m, &v))
      return dtrt_fail(r->ctx, DT_ERR_FORMAT, "%s:%lld:%lld: C%d: %s is not 8 hexadecimal digits",
                       r->path, line, (long long)(s - p + 1), k + 1, shown(s, m, q, sizeof q));
    ids[k] = m ? dtrt_criteo_row(v, r->rows[k]) : 0;
  }
  return DT_OK;
}

DtStatus dtrt_criteo_read(DtCriteo *r, int64_t max, float *dense, int32_t *ids, float *labels,
                          int64_t *n) {
  if (n)
    *n = 0;
  if (!r)
    return DT_ERR_ARG;
  if (!n || max < 0 || (max && (!dense || !ids || !labels)))
    return dtrt_fail(r->ctx, DT_ERR_ARG, "criteo: %s", max < 0 ? "a negative count" : "no output");
  if (r->failed)
    return dtrt_fail(r->ctx, r->failed, "%s:%lld: not read on after an error (rewind first)",
                     r->path, (long long)r->line + 1);
  DtStatus s = DT_OK;
  int64_t i = 0;
  for (; i < max; i++) {
    const char *p;
    int64_t len;
    if ((s = next_line(r, &p, &len)) || len < 0)
      break;
    if ((s = parse_line(r, p, len, dense + i * DTRT_CRITEO_DENSE, ids + i * DTRT_CRITEO_CATS,
                        labels + i)))
      break;
  }
  *n = i;
  r->failed = s;
  return s;
}
