/* data.c: data set readers: IDX (MNIST), NumPy .npy and CSV. A file is read
 * whole through zlib, so gzip-compressed files (told by their magic) work too,
 * then parsed from memory: every claim a header makes is checked against the
 * bytes present before anything is allocated for it. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrt_int.h"

typedef struct Buf {
  unsigned char *p;   /* n bytes and a NUL */
  int64_t n;
} Buf;

/* Grows b (n bytes used) to hold more, up to limit + 1 bytes and a NUL; false
 * (with the context's message) when it holds more than limit already. */
static bool grow(DtrtCtx *ctx, const char *path, Buf *b, int64_t *cap, int64_t limit,
                 const char *what) {
  if (b->n > limit) {
    dtrt_fail(ctx, DT_ERR_FORMAT, "%s: %smore than the read limit of %lld bytes", path, what,
              (long long)limit);
    return false;
  }
  int64_t c = *cap > limit / 2 ? limit + 1 : 2 * *cap;
  unsigned char *q = dtrt_alloc_raw(ctx, (size_t)c + 1);
  if (!q)
    return false;
  memcpy(q, b->p, (size_t)b->n);
  dtrt_free(ctx, b->p);
  b->p = q;
  *cap = c;
  return true;
}

/* Reads fd to its end into b, at most limit bytes (a file may grow, or say it
 * is empty as /proc's do). */
static DtStatus read_fd(DtrtCtx *ctx, const char *path, int fd, int64_t size, int64_t limit,
                        Buf *b) {
  int64_t cap = size + 1 < 4096 ? 4096 : size + 1;
  if (cap > limit + 1)
    cap = limit + 1;
  b->n = 0;
  if (!(b->p = dtrt_alloc_raw(ctx, (size_t)cap + 1)))
    return DT_ERR_NOMEM;
  for (;;) {
    if (b->n == cap && !grow(ctx, path, b, &cap, limit, ""))
      return b->n > limit ? DT_ERR_FORMAT : DT_ERR_NOMEM;
    int64_t room = cap - b->n;
    ssize_t r = read(fd, b->p + b->n, (size_t)(room < (1 << 30) ? room : (1 << 30)));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return dtrt_fail(ctx, DT_ERR_IO, "%s: read error: %s", path, strerror(errno));
    if (r == 0)
      return DT_OK;
    b->n += r;
  }
}

/* Decompresses the gzip data in (one member or several, back to back) into
 * out, at most limit bytes; anything after the last member is an error. */
static DtStatus gunzip(DtrtCtx *ctx, const char *path, const Buf *in, int64_t limit, Buf *out) {
  z_stream z = {0};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: out of memory starting zlib", path);
  /* a member's trailer ends with its size mod 2^32: exact for one member
   * under 4 GiB, and otherwise the buffer grows as it would from a guess */
  int64_t cap = in->n < limit / 4 ? 4 * in->n : limit + 1;
  if (in->n >= 18) {
    const unsigned char *t = in->p + in->n - 4;
    int64_t isize = (int64_t)((uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 |
                              (uint32_t)t[3] << 24);
    if (isize > 0 && isize < limit)
      cap = isize + 1;
  }
  cap = cap < 65536 && limit >= 65536 ? 65536 : cap;
  const unsigned char *p = in->p, *end = in->p + in->n;
  DtStatus s = DT_OK;
  out->n = 0;
  if (!(out->p = dtrt_alloc_raw(ctx, (size_t)cap + 1)))
    s = DT_ERR_NOMEM;
  while (!s) {
    if (out->n == cap && !grow(ctx, path, out, &cap, limit, "decompresses to ")) {
      s = out->n > limit ? DT_ERR_FORMAT : DT_ERR_NOMEM;
      break;
    }
    int64_t in_left = end - p, room = cap - out->n;
    z.next_in = (unsigned char *)p;
    z.avail_in = (uInt)(in_left < (1 << 30) ? in_left : (1 << 30));
    z.next_out = out->p + out->n;
    z.avail_out = (uInt)(room < (1 << 30) ? room : (1 << 30));
    int r = inflate(&z, Z_NO_FLUSH);
    p = z.next_in;
    out->n = z.next_out - out->p;
    if (r == Z_STREAM_END && p == end)
      break;
    if (r == Z_STREAM_END && end - p >= 2 && p[0] == 0x1f && p[1] == 0x8b)
      inflateReset(&z);
    else if (r == Z_STREAM_END)
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: %lld bytes after the gzip data", path,
                    (long long)(end - p));
    else if ((r == Z_OK || r == Z_BUF_ERROR) && p == end && z.avail_out > 0)
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: truncated gzip data", path);
    else if (r != Z_OK && r != Z_BUF_ERROR)
      s = dtrt_fail(ctx, r == Z_MEM_ERROR ? DT_ERR_NOMEM : DT_ERR_FORMAT,
                    "%s: corrupt gzip data: %s", path, z.msg ? z.msg : zError(r));
  }
  inflateEnd(&z);
  return s;
}

/* Reads the whole file, decompressed when it starts with gzip's magic. It
 * must be a regular file of at most the context's read limit, before and
 * after decompression. */
static DtStatus slurp(DtrtCtx *ctx, const char *path, Buf *b) {
  int64_t size, limit = dtrt_read_limit(ctx);
  int fd = dtrt_open_input(ctx, path, &size);
  if (fd < 0 && errno == EINVAL)
    return dtrt_fail(ctx, DT_ERR_IO, "%s: not a regular file", path);
  if (fd < 0 && errno == EFBIG)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: %lld bytes, more than the read limit of %lld",
                     path, (long long)size, (long long)limit);
  if (fd < 0)
    return dtrt_fail(ctx, DT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  Buf raw = {0};
  DtStatus s = read_fd(ctx, path, fd, size, limit, &raw);
  close(fd);
  if (!s && raw.n >= 2 && raw.p[0] == 0x1f && raw.p[1] == 0x8b) {
    s = gunzip(ctx, path, &raw, limit, b);
    dtrt_free(ctx, raw.p);
  } else {
    *b = raw;
  }
  if (s) {
    dtrt_free(ctx, b->p);
    b->p = NULL;
    return s;
  }
  b->p[b->n] = 0;
  return DT_OK;
}

/* Allocates out for dtype and dims (count n already checked), cleared unless
 * the caller writes it whole. */
static DtStatus make(DtrtCtx *ctx, DtData *out, int dtype, const int64_t *dim, int rank,
                     int64_t n, bool whole) {
  out->t.dtype = dtype;
  out->t.rank = rank;
  memcpy(out->t.dim, dim, (size_t)rank * sizeof *dim);
  out->t.data = whole ? dtrt_alloc_raw(ctx, (size_t)n * 4) : dtrt_alloc(ctx, (size_t)n * 4);
  return out->t.data ? DT_OK : DT_ERR_NOMEM;
}

/* Common start of the readers: arguments, a cleared out, the file's bytes. */
static DtStatus start(DtrtCtx *ctx, const char *path, DtData *out, Buf *b) {
  if (!ctx)
    return DT_ERR_ARG;
  if (!out)
    return dtrt_fail(ctx, DT_ERR_ARG, "read: no output");
  memset(out, 0, sizeof *out);
  if (!path)
    return dtrt_fail(ctx, DT_ERR_ARG, "read: no path");
  return slurp(ctx, path, b);
}

void dtrt_data_free(DtrtCtx *ctx, DtData *d) {
  if (!d)
    return;
  dtrt_free(ctx, d->t.data);
  memset(d, 0, sizeof *d);
}

/* ---- IDX ---- */

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* *f = x as f32: an infinity or NaN as it is, a finite value beyond f32's
 * range refused (element k of the file at path), one too small rounded. */
static DtStatus to_f32(DtrtCtx *ctx, const char *path, double x, int64_t k, float *f) {
  if (isfinite(x) && fabs(x) > FLT_MAX)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: value %g at index %lld does not fit in f32", path,
                     x, (long long)k);
  *f = (float)x;
  return DT_OK;
}

/* Element k of big-endian IDX data of the given type, as a double. */
static double idx_value(const unsigned char *p, int type, int64_t k) {
  switch (type) {
  case 0x08: return p[k];
  case 0x09: return (int8_t)p[k];
  case 0x0B: return (int16_t)(uint16_t)(p[2 * k] << 8 | p[2 * k + 1]);
  case 0x0C: return (int32_t)be32(p + 4 * k);
  case 0x0D: {
    uint32_t u = be32(p + 4 * k);
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  default: {
    uint64_t u = (uint64_t)be32(p + 8 * k) << 32 | be32(p + 8 * k + 4);
    double d;
    memcpy(&d, &u, 8);
    return d;
  }
  }
}

/* u8 pixels to f32 / 255, in chunks of SCALE_CHUNK on the context's threads. */
enum { SCALE_CHUNK = 1 << 18 };

typedef struct Scale {
  const unsigned char *d;
  float *f;
  int64_t n;
} Scale;

static void scale_part(void *env, int64_t begin, int64_t end) {
  const Scale *e = env;
  int64_t k1 = end * SCALE_CHUNK < e->n ? end * SCALE_CHUNK : e->n;
  for (int64_t k = begin * SCALE_CHUNK; k < k1; k++)
    e->f[k] = (float)e->d[k] / 255.0f;
}

/* Layout: 0, 0, type, rank, rank big-endian u32 dims, big-endian data. u8 data
 * of rank 2 or more becomes f32 / 255, other integer data i32, float data f32. */
DtStatus dtrt_read_idx(DtrtCtx *ctx, const char *path, DtData *out) {
  Buf b;
  DtStatus s = start(ctx, path, out, &b);
  if (s)
    return s;
  const unsigned char *p = b.p;
  int64_t dim[DT_MAX_RANK], n, bytes, esize = 0;
  int type = b.n >= 4 ? p[2] : 0, rank = b.n >= 4 ? p[3] : 0;
  if (b.n < 4 || p[0] || p[1])
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: not an IDX file (bad magic)", path);
  else if (!(esize = type == 0x08 || type == 0x09 ? 1 : type == 0x0B ? 2
                   : type == 0x0C || type == 0x0D ? 4 : type == 0x0E ? 8 : 0))
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: unknown IDX element type 0x%02x", path, type);
  else if (rank < 1 || rank > DT_MAX_RANK)
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: IDX rank %d (1 to %d supported)", path, rank,
                  DT_MAX_RANK);
  else if (b.n < 4 + 4 * rank)
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: truncated IDX header", path);
  if (s)
    goto done;
  for (int k = 0; k < rank; k++)
    dim[k] = be32(p + 4 + 4 * k);
  n = dtrt_elems(dim, rank);
  int64_t have = b.n - 4 - 4 * rank;
  if (n < 0 || !dtrt_mul(n, esize, &bytes) || bytes > have) {
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: header promises more data than the %lld bytes present",
                  path, (long long)have);
    goto done;
  }
  if (bytes < have) {
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: %lld bytes after the data", path,
                  (long long)(have - bytes));
    goto done;
  }
  bool image = type == 0x08 && rank >= 2, real = type == 0x0D || type == 0x0E;
  if ((s = make(ctx, out, image || real ? DTRT_F32 : DTRT_I32, dim, rank, n, true)))
    goto done;
  const unsigned char *d = p + 4 + 4 * rank;
  if (image) {
    Scale e = {d, out->t.data, n};
    dtrt_parallel_for(ctx, (n + SCALE_CHUNK - 1) / SCALE_CHUNK, scale_part, &e);
  } else if (real) {
    float *f = out->t.data;
    for (int64_t k = 0; k < n; k++) {
      if ((s = to_f32(ctx, path, idx_value(d, type, k), k, &f[k]))) {
        dtrt_data_free(ctx, out);
        goto done;
      }
    }
  } else {
    int32_t *v = out->t.data;
    for (int64_t k = 0; k < n; k++)
      v[k] = (int32_t)idx_value(d, type, k);
  }
done:
  dtrt_free(ctx, b.p);
  return s;
}

/* ---- npy ---- */

/* A cursor over the npy header's Python dict literal. */
typedef struct Lex {
  const char *p, *end;
} Lex;

static void ws(Lex *l) {
  while (l->p < l->end && (*l->p == ' ' || *l->p == '\t' || *l->p == '\n' || *l->p == '\r'))
    l->p++;
}

static bool eat(Lex *l, char c) {
  ws(l);
  if (l->p < l->end && *l->p == c) {
    l->p++;
    return true;
  }
  return false;
}

/* A quoted string (no escapes) into buf. */
static bool str(Lex *l, char *buf, size_t n) {
  ws(l);
  if (l->p >= l->end || (*l->p != '\'' && *l->p != '"'))
    return false;
  char q = *l->p++;
  const char *s = l->p;
  while (l->p < l->end && *l->p != q && *l->p != '\\')
    l->p++;
  if (l->p >= l->end || *l->p != q || (size_t)(l->p - s) >= n)
    return false;
  memcpy(buf, s, (size_t)(l->p - s));
  buf[l->p - s] = 0;
  l->p++;
  return true;
}

static bool word(Lex *l, const char *w) {
  ws(l);
  size_t n = strlen(w);
  if ((size_t)(l->end - l->p) < n || memcmp(l->p, w, n))
    return false;
  l->p += n;
  return true;
}

/* (d0, d1, ...) with a trailing comma required for one element, allowed after more. */
static bool shape(Lex *l, int64_t *dim, int *rank) {
  if (!eat(l, '('))
    return false;
  *rank = 0;
  bool comma = true;
  for (;;) {
    ws(l);
    if (l->p < l->end && *l->p == ')') {
      l->p++;
      return *rank != 1 || comma;
    }
    if (!comma || *rank == DT_MAX_RANK || l->p >= l->end || *l->p < '0' || *l->p > '9')
      return false;
    int64_t v = 0;
    while (l->p < l->end && *l->p >= '0' && *l->p <= '9')
      if (!dtrt_mul(v, 10, &v) || (v += *l->p++ - '0') > DTRT_MAX_ELEMS)
        return false;
    if (l->p < l->end && *l->p == 'L')
      l->p++;
    dim[(*rank)++] = v;
    comma = eat(l, ',');
  }
}

enum { NPY_F4, NPY_I4, NPY_F8, NPY_I8, NPY_U1 };

/* Parses the header dict: exactly the keys descr, fortran_order and shape. */
static DtStatus npy_header(DtrtCtx *ctx, const char *path, Lex *l, int *kind, int64_t *dim,
                           int *rank) {
  static const char *const descr[] = {"<f4", "<i4", "<f8", "<i8", "|u1"};
  char key[32], val[32];
  int seen = 0;
  if (!eat(l, '{'))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy header is not a dict", path);
  while (!eat(l, '}')) {
    int bit;
    if (!str(l, key, sizeof key) || !eat(l, ':'))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: malformed .npy header", path);
    if (!strcmp(key, "descr")) {
      bit = 1;
      if (!str(l, val, sizeof val))
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy descr is not a string", path);
      *kind = -1;
      for (int k = 0; k < 5; k++)
        if (!strcmp(val, descr[k]) || (k == NPY_U1 && !strcmp(val, "<u1")))
          *kind = k;
      if (*kind < 0)
        return dtrt_fail(ctx, DT_ERR_FORMAT,
                         "%s: .npy dtype '%s' not supported (<f4 <i4 <f8 <i8 |u1 are)", path,
                         val);
    } else if (!strcmp(key, "fortran_order")) {
      bit = 2;
      if (word(l, "True"))
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: Fortran-order .npy data is not supported",
                         path);
      if (!word(l, "False"))
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy fortran_order is not True or False",
                         path);
    } else if (!strcmp(key, "shape")) {
      bit = 4;
      if (!shape(l, dim, rank))
        return dtrt_fail(ctx, DT_ERR_FORMAT,
                         "%s: .npy shape is not a tuple of at most %d sizes", path, DT_MAX_RANK);
    } else {
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: unknown key '%s' in the .npy header", path, key);
    }
    if (seen & bit)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: key '%s' twice in the .npy header", path, key);
    seen |= bit;
    if (!eat(l, ',')) {
      if (!eat(l, '}'))
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: malformed .npy header", path);
      break;
    }
  }
  ws(l);
  if (l->p != l->end)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: text after the .npy header dict", path);
  if (seen != 7)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy header lacks descr, fortran_order or shape",
                     path);
  return DT_OK;
}

static uint64_t le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int k = n - 1; k >= 0; k--)
    v = v << 8 | p[k];
  return v;
}

/* Layout: "\x93NUMPY", major, minor, header length (u16 LE for 1.x, u32 LE for
 * 2.x and 3.x), the header dict, then the data. f4/f8 become f32, i4/i8/u1 i32. */
DtStatus dtrt_read_npy(DtrtCtx *ctx, const char *path, DtData *out) {
  Buf b;
  DtStatus s = start(ctx, path, out, &b);
  if (s)
    return s;
  const unsigned char *p = b.p;
  int64_t dim[DT_MAX_RANK], n, bytes, hl = 0, at = 0;
  int kind = 0, rank = 0, major = b.n >= 8 ? p[6] : 0;
  if (b.n < 10 || memcmp(p, "\x93NUMPY", 6))
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: not a .npy file (bad magic)", path);
  else if (major < 1 || major > 3)
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy version %d.%d not supported", path, major, p[7]);
  else if (major > 1 && b.n < 12)
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: truncated .npy header", path);
  if (s)
    goto done;
  at = major == 1 ? 10 : 12;
  hl = (int64_t)le(p + 8, major == 1 ? 2 : 4);
  if (hl > b.n - at) {
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy header of %lld bytes runs past the file", path,
                  (long long)hl);
    goto done;
  }
  Lex l = {(const char *)p + at, (const char *)p + at + hl};
  if ((s = npy_header(ctx, path, &l, &kind, dim, &rank)))
    goto done;
  at += hl;
  int esize = kind == NPY_F8 || kind == NPY_I8 ? 8 : kind == NPY_U1 ? 1 : 4;
  n = dtrt_elems(dim, rank);
  if (n < 0 || !dtrt_mul(n, esize, &bytes) || bytes != b.n - at) {
    s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: .npy shape needs %s data bytes, the file has %lld",
                  path, n < 0 ? "too many" : "a different number of", (long long)(b.n - at));
    goto done;
  }
  bool real = kind == NPY_F4 || kind == NPY_F8;
  if ((s = make(ctx, out, real ? DTRT_F32 : DTRT_I32, dim, rank, n, false)))
    goto done;
  const unsigned char *d = p + at;
  float *f = out->t.data;
  int32_t *v = out->t.data;
  for (int64_t k = 0; k < n; k++) {
    if (kind == NPY_F4 || kind == NPY_I4) {
      uint32_t u = (uint32_t)le(d + 4 * k, 4);
      memcpy(&v[k], &u, 4);
    } else if (kind == NPY_F8) {
      uint64_t u = le(d + 8 * k, 8);
      double x;
      memcpy(&x, &u, 8);
      if ((s = to_f32(ctx, path, x, k, &f[k]))) {
        dtrt_data_free(ctx, out);
        goto done;
      }
    } else if (kind == NPY_U1) {
      v[k] = d[k];
    } else {
      int64_t x = (int64_t)le(d + 8 * k, 8);
      if (x < INT32_MIN || x > INT32_MAX) {
        s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: value %lld at index %lld does not fit in int32",
                      path, (long long)x, (long long)k);
        dtrt_data_free(ctx, out);
        goto done;
      }
      v[k] = (int32_t)x;
    }
  }
done:
  dtrt_free(ctx, b.p);
  return s;
}

/* ---- CSV ---- */

static const char *skip_blank(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return p;
}

enum { FIELD_OK, FIELD_NAN, FIELD_RANGE };

/* Parses one field starting at p into *v: FIELD_OK, FIELD_NAN when it is not a
 * number, FIELD_RANGE when it is one too large for f32. *end is left at the
 * field's delimiter (',', '\n', '\r' before '\n', or the end). */
static int field(const char *p, const char **end, float *v) {
  p = skip_blank(p);
  bool ok = *p && *p != ',' && *p != '\n' && *p != '\r';
  char *e = (char *)p;
  int range = 0;
  if (ok) {
    errno = 0;
    *v = strtof(p, &e);
    ok = e != p;
    range = errno == ERANGE && isinf(*v);
  }
  e = (char *)skip_blank(e);
  ok = ok && (*e == ',' || *e == '\n' || *e == '\r' || !*e);
  while (*e && *e != ',' && *e != '\n')
    e++;
  *end = e;
  return !ok ? FIELD_NAN : range ? FIELD_RANGE : FIELD_OK;
}

/* One pass over the text: counts rows and columns and checks them; fills out,
 * rows of width values, when it is not NULL. A line ends at '\n' or "\r\n"; a
 * carriage return anywhere else is an error, as it would hide what follows. */
static DtStatus csv_pass(DtrtCtx *ctx, const char *path, const Buf *b, float *out,
                         int64_t width, int64_t *rows, int64_t *cols) {
  const char *p = (const char *)b->p, *end = p + b->n;
  int64_t line = 0, hcols = -1, hline = 0;
  *rows = 0;
  *cols = -1;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p)), *q = skip_blank(p);
    line++;
    if (!nl)
      nl = end;
    if (q == nl || (*q == '\r' && q + 1 == nl)) {
      p = nl + 1;
      continue;
    }
    if (memchr(p, 0, (size_t)(nl - p)))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s:%lld: NUL byte in a CSV file", path,
                       (long long)line);
    const char *le = nl[-1] == '\r' ? nl - 1 : nl, *cr = memchr(p, '\r', (size_t)(le - p));
    if (cr)
      return dtrt_fail(ctx, DT_ERR_FORMAT,
                       "%s:%lld:%lld: carriage return inside a line (only \\r\\n ends one)",
                       path, (long long)line, (long long)(cr - p + 1));
    int64_t nf = 0, bad = -1;
    for (q = p;; q++) {
      float v = 0;
      const char *at = q;
      int k = field(q, &q, &v);
      if (k == FIELD_RANGE)
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s:%lld:%lld: field %lld does not fit in f32",
                         path, (long long)line, (long long)(skip_blank(at) - p + 1),
                         (long long)nf + 1);
      if (k && bad < 0)
        bad = nf;
      if (out && bad < 0 && nf < width)
        out[*rows * width + nf] = v;
      nf++;
      if (*q != ',')
        break;
    }
    if (bad >= 0 && *cols < 0 && hcols < 0) {
      hcols = nf;
      hline = line;
    } else if (bad >= 0) {
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s:%lld: field %lld is not a number", path,
                       (long long)line, (long long)bad + 1);
    } else if (*cols >= 0 && nf != *cols) {
      return dtrt_fail(ctx, DT_ERR_FORMAT, "%s:%lld: %lld fields, earlier rows have %lld", path,
                       (long long)line, (long long)nf, (long long)*cols);
    } else {
      if (*cols < 0 && hcols >= 0 && hcols != nf)
        return dtrt_fail(ctx, DT_ERR_FORMAT, "%s:%lld: %lld fields, the header on line %lld has %lld",
                         path, (long long)line, (long long)nf, (long long)hline,
                         (long long)hcols);
      *cols = nf;
      ++*rows;
    }
    p = nl + 1;
  }
  if (*rows == 0)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "%s: no data rows%s", path,
                     hcols >= 0 ? " after the header" : " (empty file)");
  return DT_OK;
}

/* The name of the UTF-16 or UTF-32 byte-order mark p (n bytes) starts with,
 * or NULL. UTF-32's are tested first: its little-endian mark begins with
 * UTF-16's. */
static const char *wide_bom(const unsigned char *p, int64_t n) {
  if (n >= 4 && !memcmp(p, "\xFF\xFE\0\0", 4))
    return "UTF-32LE";
  if (n >= 4 && !memcmp(p, "\0\0\xFE\xFF", 4))
    return "UTF-32BE";
  if (n >= 2 && !memcmp(p, "\xFF\xFE", 2))
    return "UTF-16LE";
  if (n >= 2 && !memcmp(p, "\xFE\xFF", 2))
    return "UTF-16BE";
  return NULL;
}

/* Numbers separated by commas, one row a line; blank lines are skipped. The
 * first non-blank line is a header when a field of it is not a number. A
 * leading UTF-8 byte-order mark is skipped (lines and columns are counted
 * without it); a UTF-16 or UTF-32 one is an error, as that text is not
 * ASCII-compatible. */
DtStatus dtrt_read_csv(DtrtCtx *ctx, const char *path, DtData *out) {
  Buf b;
  DtStatus s = start(ctx, path, out, &b);
  if (s)
    return s;
  const char *wide = wide_bom(b.p, b.n);
  int64_t skip = b.n >= 3 && !memcmp(b.p, "\xEF\xBB\xBF", 3) ? 3 : 0;
  Buf text = {b.p + skip, b.n - skip};
  int64_t rows, cols, n;
  if (wide)
    s = dtrt_fail(ctx, DT_ERR_FORMAT,
                  "%s: starts with a %s byte-order mark; a CSV file must be UTF-8 or ASCII",
                  path, wide);
  else if (!(s = csv_pass(ctx, path, &text, NULL, 0, &rows, &cols))) {
    int64_t dim[2] = {rows, cols};
    if (!dtrt_mul(rows, cols, &n))
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "%s: too many values", path);
    else if (!(s = make(ctx, out, DTRT_F32, dim, 2, n, false)))
      s = csv_pass(ctx, path, &text, out->t.data, cols, &rows, &cols);
    if (s)
      dtrt_data_free(ctx, out);
  }
  dtrt_free(ctx, b.p);
  return s;
}
