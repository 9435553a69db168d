/* model_ckpt.c: checkpoints of whole tensors whatever the layout: one safetensors
 * file that every rank writes its own blocks into and reads its own blocks
 * from, by positioned I/O, and the conversion of the per-rank files of
 * earlier versions (docs/RUNTIME.md, "Checkpoints"); the format is
 * safetensors.c's.
 *
 * The checksum ("crc32:" and 8 hex digits) is the CRC-32 of the file from
 * byte 8 on, header and data, with the checksum's own 8 digits read as '0':
 * a rank's runs are CRCs of their own bytes, joined in file order with
 * crc32_combine, so neither the save nor the check gathers any data. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrt_int.h"

#define FORMAT "dtc-1"
#define CK_KEY "\"checksum\":\"crc32:"
enum { CHUNK = 1 << 20, DIGITS = DTRT_ST_DIGITS };

/* A tensor of the file: whole dims, place in the data section, and the
 * caller's tensor it is (local; -1: none, skipped). */
typedef DtStEntry Entry;

/* A run of bytes of the data section and their CRC. */
typedef struct Piece {
  int64_t off, len;
  uint64_t crc;
} Piece;

static int by_off(const void *a, const void *b) {
  const Piece *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

/* The status of every rank when ctx has joined a job of several ranks. */
static DtStatus share(DtrtCtx *ctx, DtStatus s) {
  return dtrt_nranks(ctx) > 1 ? dtrt_comm_status(ctx, s) : s;
}

/* ---- text ---- */

/* A growing string through the context's allocator; ok false once out of
 * memory. */
typedef struct Text {
  DtrtCtx *ctx;
  char *s;
  size_t n, cap;
  bool ok;
} Text;

static void add(Text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (!t->ok || k < 0)
    return;
  if (t->n + (size_t)k + 1 > t->cap) {
    size_t cap = (t->n + (size_t)k + 1) * 2;
    char *s = dtrt_alloc(t->ctx, cap);
    if (!s) {
      t->ok = false;
      return;
    }
    if (t->s)
      memcpy(s, t->s, t->n + 1);
    dtrt_free(t->ctx, t->s);
    t->s = s, t->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n += (size_t)k;
}

/* FNV-1a of the tensors' "NAME DTYPE[DIMS]" lines (in name order), of the
 * params alone when params; "" when a kind needed is not known. */
static void hash_of(const Entry *e, int n, bool params, char out[17]) {
  uint64_t h = 0xcbf29ce484222325u;
  char ty[160];
  out[0] = 0;
  for (int k = 0; k < n; k++) {
    if (params && e[k].kind < 0)
      return;
    if (params && e[k].kind != DT_G_PARAM)
      continue;
    int len = snprintf(ty, sizeof ty, "%s ", e[k].name);
    if (len < 0 || len >= (int)sizeof ty - 1) {   /* a long name: hashed whole */
      for (const char *c = e[k].name; *c; c++)
        h = (h ^ (unsigned char)*c) * 0x100000001b3u;
      len = 0;
    }
    dtrt_type_str(e[k].dtype, e[k].dim, e[k].rank, ty + len, sizeof ty - (size_t)len);
    for (const char *c = ty; *c; c++)
      h = (h ^ (unsigned char)*c) * 0x100000001b3u;
    h = (h ^ '\n') * 0x100000001b3u;
  }
  snprintf(out, 17, "%016" PRIx64, h);
}

void dtrt_ckpt_hash(const DtStEntry *e, int n, bool params, char out[17]) {
  hash_of(e, n, params, out);
}

/* ---- runs of a block ---- */

int dtrt_for_runs(const int64_t *full, const int64_t *begin, const int64_t *dim, int r,
                  DtRunFn fn, void *arg) {
  int64_t n = dtrt_elems(dim, r);
  if (n <= 0)
    return 0;
  int c = r > 0 ? r - 1 : 0;
  int64_t run = r > 0 ? dim[c] : 1, stride[DT_MAX_RANK], at[DT_MAX_RANK] = {0};
  for (; c > 0 && dim[c] == full[c]; c--)
    run *= dim[c - 1];
  for (int k = r - 1; k >= 0; k--)
    stride[k] = k == r - 1 ? 1 : stride[k + 1] * full[k + 1];
  for (int64_t done = 0; done < n; done += run) {
    int64_t first = 0;
    for (int k = 0; k < r; k++)
      first += (begin[k] + at[k]) * stride[k];
    int v = fn(arg, first, done, run);
    if (v)
      return v;
    for (int k = c - 1; k >= 0 && ++at[k] == dim[k]; k--)
      at[k] = 0;
  }
  return 0;
}

/* ---- save ---- */

typedef struct Writer {
  int fd;
  int64_t data, base;   /* the data section's offset in the file; the tensor's in it */
  const unsigned char *src;
  DtrtCtx *ctx;
  Piece *p;
  int np, cap;
} Writer;

static int write_run(void *arg, int64_t whole, int64_t local, int64_t n) {
  Writer *w = arg;
  const unsigned char *src = w->src + local * 4;
  int64_t off = w->base + whole * 4, len = n * 4;
  if (dtrt_st_pwrite(w->fd, src, len, w->data + off))
    return -1;
  uLong crc = dtrt_st_crc(0, src, len);
  if (w->np && w->p[w->np - 1].off + w->p[w->np - 1].len == off) {
    Piece *last = &w->p[w->np - 1];
    last->crc = crc32_combine((uLong)last->crc, crc, (z_off_t)len);
    last->len += len;
    return 0;
  }
  if (w->np == w->cap) {
    int cap = w->cap ? 2 * w->cap : 64;
    Piece *p = dtrt_alloc(w->ctx, (size_t)cap * sizeof *p);
    if (!p) {
      errno = ENOMEM;
      return -1;
    }
    if (w->np)
      memcpy(p, w->p, (size_t)w->np * sizeof *p);
    dtrt_free(w->ctx, w->p);
    w->p = p, w->cap = cap;
  }
  w->p[w->np++] = (Piece){off, len, crc};
  return 0;
}

/* The caller's tensors checked and as entries of the file (whole dims, data
 * order = name order, offsets); NULL on failure. */
static Entry *table(DtrtCtx *ctx, const DtCkptTensor *t, int n, DtStatus *s) {
  *s = DT_OK;
  if (n < 0 || (n > 0 && !t)) {
    *s = dtrt_fail(ctx, DT_ERR_ARG, "checkpoint: %d tensors at %p", n, (const void *)t);
    return NULL;
  }
  Entry *e = dtrt_alloc(ctx, (size_t)(n + 1) * sizeof *e);
  if (!e) {
    *s = DT_ERR_NOMEM;
    return NULL;
  }
  for (int k = 0; k < n && !*s; k++) {
    if (!t[k].name || !t[k].name[0] || !strcmp(t[k].name, "__metadata__")) {
      *s = dtrt_fail(ctx, DT_ERR_ARG, "checkpoint: tensor %d has %s name", k,
                     t[k].name && t[k].name[0] ? "a reserved" : "no");
      break;
    }
    if ((*s = dtrt_check(ctx, "checkpoint", t[k].name, &t[k].t, 0)) ||
        (*s = dtrt_check_block(ctx, "checkpoint", t[k].name, t[k].t.dim, t[k].full, t[k].begin,
                               t[k].t.rank)))
      break;
    int64_t begin[DT_MAX_RANK];
    e[k] = (Entry){.name = t[k].name, .dtype = t[k].t.dtype, .rank = t[k].t.rank,
                   .kind = t[k].kind, .local = k};
    dtrt_block(t[k].t.dim, t[k].full, t[k].begin, t[k].t.rank, e[k].dim, begin);
  }
  if (!*s) {
    qsort(e, (size_t)n, sizeof *e, dtrt_st_by_name);
    int64_t at = 0;
    for (int k = 0; k < n && !*s; k++) {
      if (k && !strcmp(e[k - 1].name, e[k].name))
        *s = dtrt_fail(ctx, DT_ERR_ARG, "checkpoint: tensor name '%s' appears twice", e[k].name);
      e[k].begin = at;
      at = e[k].end = at + dtrt_elems(e[k].dim, e[k].rank) * 4;
    }
  }
  if (*s) {
    dtrt_free(ctx, e);
    return NULL;
  }
  return e;
}

/* This rank's block of entry k of the table (begin, then dims). */
static void my_block(const DtCkptTensor *t, const Entry *e, int64_t *out) {
  int64_t full[DT_MAX_RANK];
  const DtCkptTensor *x = &t[e->local];
  memset(out, 0, 2 * DT_MAX_RANK * sizeof *out);
  dtrt_block(x->t.dim, x->full, x->begin, x->t.rank, full, out);
  memcpy(out + DT_MAX_RANK, x->t.dim, (size_t)x->t.rank * sizeof *out);
}

static bool overlap(const int64_t *a, const int64_t *b, int r) {
  for (int d = 0; d < r; d++)
    if (a[d] >= b[d] + b[DT_MAX_RANK + d] || b[d] >= a[d] + a[DT_MAX_RANK + d])
      return false;
  return true;
}

/* Who writes what, from every rank's blocks (all: [rank][tensor][begin, dims]):
 * each distinct block once, by the rank holding it that has the fewest bytes
 * to write so far (the lowest such); mine[k]: this rank writes tensor k. The
 * distinct blocks must tile each tensor. Also the plan's text. The same on
 * every rank. */
static DtStatus owners(DtrtCtx *ctx, const Entry *e, int n, const int64_t *all, int np, int me,
                       bool *mine, Text *plan) {
  const int B = 2 * DT_MAX_RANK;
  int64_t *load = dtrt_alloc(ctx, (size_t)np * sizeof *load);
  if (!load)
    return DT_ERR_NOMEM;
  DtStatus s = DT_OK;
  for (int k = 0; k < n && !s; k++) {
    int r = e[k].rank;
    int64_t covered = 0;
    bool whole = true;
    for (int q = 0; q < np && !s; q++) {
      const int64_t *bq = all + ((size_t)q * (size_t)n + (size_t)k) * B;
      int64_t cnt = dtrt_elems(bq + DT_MAX_RANK, r);
      whole = whole && !memcmp(bq + DT_MAX_RANK, e[k].dim, (size_t)r * sizeof *bq);
      bool seen = cnt == 0;
      for (int p = 0; p < q && !seen; p++) {
        const int64_t *bp = all + ((size_t)p * (size_t)n + (size_t)k) * B;
        if (!memcmp(bp, bq, (size_t)B * sizeof *bq))
          seen = true;
        else if (dtrt_elems(bp + DT_MAX_RANK, r) > 0 && overlap(bp, bq, r))
          s = dtrt_fail(ctx, DT_ERR_ARG,
                        "checkpoint: the blocks of '%s' on ranks %d and %d overlap without "
                        "being the same",
                        e[k].name, p, q);
      }
      if (seen || s)
        continue;
      int best = q;
      for (int h = q + 1; h < np; h++)
        if (!memcmp(all + ((size_t)h * (size_t)n + (size_t)k) * B, bq, (size_t)B * sizeof *bq) &&
            load[h] < load[best])
          best = h;
      load[best] += cnt * 4;
      covered += cnt;
      if (best == me)
        mine[k] = true;
    }
    if (!s && covered != dtrt_elems(e[k].dim, r))
      s = dtrt_fail(ctx, DT_ERR_ARG,
                    "checkpoint: the ranks hold %lld of the %lld elements of '%s'",
                    (long long)covered, (long long)dtrt_elems(e[k].dim, r), e[k].name);
    if (s || whole)
      continue;
    add(plan, "\n%s:", e[k].name);
    for (int q = 0; q < np; q++) {
      const int64_t *bq = all + ((size_t)q * (size_t)n + (size_t)k) * B;
      add(plan, " r%d [", q);
      for (int d = 0; d < r; d++)
        add(plan, "%s%lld:%lld", d ? "," : "", (long long)bq[d],
            (long long)(bq[d] + bq[DT_MAX_RANK + d]));
      add(plan, "]");
    }
  }
  dtrt_free(ctx, load);
  return s;
}

/* The header's JSON with the checksum as 8 '0' digits (free with cJSON_free). */
static char *header(const Entry *e, int n, const char *model, const char *hash,
                    const char *phash, int64_t step, const char *plan) {
  char buf[32];
  cJSON *meta, *root = dtrt_st_new_header(&meta);
  if (!root)
    return NULL;
  snprintf(buf, sizeof buf, "%" PRId64, step);
  bool ok = cJSON_AddStringToObject(meta, "format", FORMAT) &&
            cJSON_AddStringToObject(meta, "model", model) &&
            cJSON_AddStringToObject(meta, "model_hash", hash) &&
            (!phash[0] || cJSON_AddStringToObject(meta, "params_hash", phash)) &&
            cJSON_AddStringToObject(meta, "step", buf) &&
            cJSON_AddStringToObject(meta, "plan", plan) &&
            cJSON_AddStringToObject(meta, "checksum", "crc32:00000000");
  for (int k = 0; ok && k < n; k++)
    ok = dtrt_st_add_entry(root, &e[k]);
  char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return json;
}

/* Joins the pieces of every rank (all, count bytes) in file order after the
 * header's CRC; they must cover the data section [0, datalen) exactly. */
static DtStatus join_crc(DtrtCtx *ctx, const char *op, Piece *p, int np, int64_t datalen,
                         uLong *crc) {
  qsort(p, (size_t)np, sizeof *p, by_off);
  int64_t at = 0;
  for (int k = 0; k < np; k++) {
    if (p[k].off != at)
      return dtrt_fail(ctx, DT_ERR_INTERNAL, "%s: the ranks' runs %s at byte %lld of the data",
                       op, p[k].off < at ? "overlap" : "leave a hole", (long long)at);
    *crc = crc32_combine(*crc, (uLong)p[k].crc, (z_off_t)p[k].len);
    at += p[k].len;
  }
  if (at != datalen)
    return dtrt_fail(ctx, DT_ERR_INTERNAL, "%s: the ranks' runs cover %lld of %lld data bytes",
                     op, (long long)at, (long long)datalen);
  return DT_OK;
}

static DtStatus ckpt_save(DtrtCtx *ctx, const char *path, const DtCkptTensor *t, int n,
                          const char *model, const char *plan, int64_t step) {
  if (!ctx)
    return DT_ERR_ARG;
  const char *op = "save";
  int me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  DtStatus s = DT_OK;
  Entry *e = NULL;
  if (!path || !path[0])
    s = dtrt_fail(ctx, DT_ERR_ARG, "save: no path");
  else if (step < 0 || step > DTRT_MAX_STEP)
    s = dtrt_fail(ctx, DT_ERR_ARG, "save: step %lld is outside 0..%lld", (long long)step,
                  (long long)DTRT_MAX_STEP);
  else if (!(e = table(ctx, t, n, &s)))
    ;
  else if (me == 0)
    s = dtrt_check_output(ctx, op, path);
  char hash[17] = "", phash[17] = "", both[80];
  if (!s) {
    hash_of(e, n, false, hash);
    hash_of(e, n, true, phash);
  }
  if ((s = share(ctx, s))) {
    dtrt_free(ctx, e);
    return s;
  }
  snprintf(both, sizeof both, "%s %s step %lld", hash, phash, (long long)step);
  if (np > 1 && (s = dtrt_comm_agree(ctx, "the checkpoint's tensors (names, dtypes, shapes)",
                                     both))) {
    dtrt_free(ctx, e);
    return s;
  }

  /* every rank's blocks, who writes what, the plan's text, the header */
  const int B = 2 * DT_MAX_RANK;
  size_t plen = strlen(path);
  int64_t *blk = dtrt_alloc(ctx, (size_t)(n + 1) * (size_t)B * sizeof *blk);
  int64_t *all = dtrt_alloc(ctx, (size_t)(n + 1) * (size_t)np * (size_t)B * sizeof *all);
  bool *mine = dtrt_alloc(ctx, (size_t)n + 1);
  char *tmp = dtrt_st_tmp_name(ctx, path), *json = NULL, *hdr = NULL;
  Text pt = {.ctx = ctx, .ok = true};
  Writer w = {.fd = -1, .ctx = ctx};
  int lock = -1;
  if (!blk || !all || !mine || !tmp)
    s = DT_ERR_NOMEM;
  for (int k = 0; !s && k < n; k++)
    my_block(t, &e[k], blk + (size_t)k * B);
  if (!s && (int64_t)n * B * 8 > INT32_MAX)
    s = dtrt_fail(ctx, DT_ERR_ARG, "save: %d tensors are too many", n);
  if ((s = share(ctx, s)))
    goto done;
  if ((s = dtrt_comm_allgather(ctx, "save", blk, n * B * 8, all)))
    goto done;
  add(&pt, "%s", plan ? plan : np > 1 ? "" : "one process");
  if (!plan && np > 1)
    add(&pt, "%d ranks", np);
  s = owners(ctx, e, n, all, np, me, mine, &pt);
  if (!s && !pt.ok)
    s = DT_ERR_NOMEM;
  if (!s && !(json = header(e, n, model ? model : "", hash, phash, step, pt.s)))
    s = dtrt_fail(ctx, DT_ERR_NOMEM, "save: out of memory building the header of %s", path);
  if (!s && !(hdr = dtrt_st_frame(ctx, json, &w.data)))
    s = DT_ERR_NOMEM;
  if ((s = share(ctx, s)))
    goto done;
  int64_t hl = w.data - 8, datalen = n ? e[n - 1].end : 0;
  snprintf(both, sizeof both, "%lld", (long long)hl);
  if (np > 1 && (s = dtrt_comm_agree(ctx, "the length of the checkpoint's header", both)))
    goto done;

  /* the temporary file: rank 0 makes it, every rank opens it */
  if (me == 0 && (w.fd = dtrt_st_create_tmp(ctx, path, tmp, &lock)) < 0)
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot create a temporary file beside %s: %s", path,
                  strerror(errno));
  if ((s = share(ctx, s)))
    goto done;
  if ((s = dtrt_comm_bcast(ctx, "save", tmp, (int)plen + 12, 0)))
    goto done;
  if (me != 0 && (w.fd = open(tmp, O_WRONLY | O_CLOEXEC)) < 0)
    s = dtrt_fail(ctx, DT_ERR_IO,
                  "save: cannot open %s, which rank 0 created: %s (every rank must see the "
                  "checkpoint's directory)",
                  tmp, strerror(errno));
  for (int k = 0; !s && k < n; k++) {
    if (!mine[k])
      continue;
    const DtCkptTensor *x = &t[e[k].local];
    int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
    dtrt_block(x->t.dim, x->full, x->begin, x->t.rank, full, begin);
    w.src = x->t.data, w.base = e[k].begin;
    if (dtrt_for_runs(full, begin, x->t.dim, x->t.rank, write_run, &w))
      s = errno == ENOMEM ? DT_ERR_NOMEM
                          : dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", tmp,
                                      strerror(errno));
  }
  /* every rank flushes its own blocks at once; rank 0's later fsync then
   * has only the header left */
  if (!s && fsync(w.fd))
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", tmp, strerror(errno));
  if (me != 0 && w.fd >= 0) {
    if (close(w.fd) && !s)
      s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", tmp, strerror(errno));
    w.fd = -1;
  }
  if ((s = share(ctx, s)))
    goto done;

  /* the checksum from every rank's runs; rank 0 writes the header, renames */
  void *pieces = NULL;
  int bytes = 0;
  if ((int64_t)w.np * (int64_t)sizeof(Piece) > INT32_MAX)
    s = dtrt_fail(ctx, DT_ERR_ARG, "save: too many runs of blocks");
  if ((s = share(ctx, s)) ||
      (s = dtrt_comm_allgatherv(ctx, "save", w.p, w.np * (int)sizeof(Piece), &pieces, &bytes)))
    goto done;
  if (me == 0) {
    uLong crc = dtrt_st_crc(0, hdr + 8, hl);
    s = join_crc(ctx, op, pieces, bytes / (int)sizeof(Piece), datalen, &crc);
    char *at = strstr(hdr + 8, CK_KEY), digits[DIGITS + 1];
    if (!s && !at)
      s = dtrt_fail(ctx, DT_ERR_INTERNAL, "save: the header of %s has no checksum", path);
    snprintf(digits, sizeof digits, "%08lx", (unsigned long)crc);
    if (!s)
      memcpy(at + strlen(CK_KEY), digits, DIGITS);
    if (!s && (dtrt_st_pwrite(w.fd, hdr, w.data, 0) || fsync(w.fd)))
      s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", tmp, strerror(errno));
    if (close(w.fd) && !s)
      s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", tmp, strerror(errno));
    w.fd = -1;
    if (!s) {
      s = dtrt_st_replace(ctx, tmp, path, lock);
      tmp[0] = 0, lock = -1;   /* renamed, or removed: nothing to remove */
    }
  }
  dtrt_free(ctx, pieces);
  s = share(ctx, s);
done:
  if (w.fd >= 0)
    close(w.fd);
  if (me == 0 && s && tmp && tmp[0] && strcmp(tmp + plen, DTRT_ST_TMP))
    unlink(tmp);
  if (lock >= 0)
    close(lock);
  cJSON_free(json);
  dtrt_free(ctx, hdr);
  dtrt_free(ctx, pt.s);
  dtrt_free(ctx, w.p);
  dtrt_free(ctx, tmp);
  dtrt_free(ctx, mine);
  dtrt_free(ctx, all);
  dtrt_free(ctx, blk);
  dtrt_free(ctx, e);
  return s;
}

/* SIGINT, SIGTERM and SIGHUP act once the save is over on this rank, the
 * temporary file renamed or removed. */
DtStatus dtrt_ckpt_save(DtrtCtx *ctx, const char *path, const DtCkptTensor *t, int n,
                        const char *model, const char *plan, int64_t step) {
  sigset_t old;
  dtrt_defer_signals(&old);
  DtStatus s = ckpt_save(ctx, path, t, n, model, plan, step);
  dtrt_undefer_signals(&old);
  return s;
}

/* ---- load ---- */

/* A file's header, parsed and checked against the file's size. */
typedef struct Hdr {
  DtStHeader f;            /* its entries by name */
  const char *hash, *phash, *checksum;
  int64_t step;
  int64_t ck_at;           /* the checksum's digits: their offset in f.text */
} Hdr;

static const char *meta_str(const cJSON *meta, const char *key) {
  const cJSON *j = cJSON_GetObjectItemCaseSensitive(meta, key);
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* Reads and checks the header of the file fd (size bytes) into h: the JSON,
 * the tensors covering the data exactly, the metadata. A file without
 * "format" is of the per-rank format: DT_ERR_FORMAT and *old set (old may be
 * NULL), unless old_ok (then h has its tensors, and no metadata checked). */
static DtStatus read_header(DtrtCtx *ctx, const char *path, int fd, int64_t size, Hdr *h,
                            bool old_ok, bool *old) {
  if (old)
    *old = false;
  DtStatus s = dtrt_st_read_header(ctx, path, fd, size, true, &h->f);
  if (!s)
    s = dtrt_st_check_layout(ctx, path, &h->f, " (truncated or extended?)");
  if (!s)
    s = dtrt_st_check_names(ctx, path, &h->f);
  if (s)
    return s;
  const cJSON *meta = h->f.meta;
  const char *format = meta ? meta_str(meta, "format") : NULL;
  if (!format) {
    if (old)
      *old = true;
    return old_ok ? DT_OK
                  : dtrt_fail(ctx, DT_ERR_FORMAT,
                              "load: %s has no \"format\" in its metadata: it is not a "
                              "checkpoint of dtc-ckpt's format " FORMAT,
                              path);
  }
  if (strcmp(format, FORMAT))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s is of format '%s'; this runtime reads " FORMAT,
                     path, format);
  const char *step = meta_str(meta, "step");
  h->hash = meta_str(meta, "model_hash");
  h->phash = meta_str(meta, "params_hash");
  h->checksum = meta_str(meta, "checksum");
  if (!h->hash || !step || !h->checksum)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: __metadata__ lacks a string model_hash, step or checksum", path);
  if (step[0] == '-' || !dtrt_st_parse_i64(step, &h->step) || h->step > DTRT_MAX_STEP)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: step '%s' is not an integer in 0..%lld",
                     path, step, (long long)DTRT_MAX_STEP);
  unsigned long crc;
  const char *text = h->f.text, *ck = strstr(text, CK_KEY);
  if (!dtrt_st_parse_crc(h->checksum, &crc) || !ck ||
      ck + strlen(CK_KEY) + DIGITS > text + h->f.hl ||
      memcmp(ck + strlen(CK_KEY), h->checksum + 6, DIGITS))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: checksum '%s' is not crc32:XXXXXXXX", path,
                     h->checksum);
  h->ck_at = ck + strlen(CK_KEY) - text;
  return DT_OK;
}

/* Checks the checksum: this rank's slice of the data section, then every
 * rank's CRC joined in rank order after the header's. */
static DtStatus check_sum(DtrtCtx *ctx, const char *path, int fd, const Hdr *h) {
  int me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  int64_t q = h->f.datalen / np, rem = h->f.datalen % np;
  int64_t from = q * me + (me < rem ? me : rem), len = q + (me < rem);
  uint64_t mine[2] = {0, (uint64_t)len};
  unsigned char *buf = dtrt_alloc(ctx, (size_t)(len < CHUNK ? len : CHUNK) + 1);
  uint64_t *all = dtrt_alloc(ctx, 2 * (size_t)np * sizeof *all);
  DtStatus s = buf && all ? DT_OK : DT_ERR_NOMEM;
  for (int64_t at = 0; !s && at < len; at += CHUNK) {
    int64_t n = len - at < CHUNK ? len - at : CHUNK;
    int r = dtrt_st_pread(fd, buf, n, 8 + h->f.hl + from + at);
    if (r)
      s = dtrt_fail(ctx, r == -2 ? DT_ERR_FORMAT : DT_ERR_IO, "load: cannot read %s: %s", path,
                    r == -2 ? "it is shorter than it was" : strerror(errno));
    else
      mine[0] = crc32_z((uLong)mine[0], buf, (z_size_t)n);
  }
  if (!(s = share(ctx, s)))
    s = dtrt_comm_allgather(ctx, "load", mine, sizeof mine, all);
  if (!s) {   /* the header's CRC, its digits read as '0' */
    char zeros[DIGITS];
    memset(zeros, '0', DIGITS);
    uLong crc = dtrt_st_crc(0, h->f.text, h->ck_at);
    crc = crc32_z(crc, (const unsigned char *)zeros, DIGITS);
    crc = crc32_z(crc, (const unsigned char *)h->f.text + h->ck_at + DIGITS,
                  (z_size_t)(h->f.hl - h->ck_at - DIGITS));
    for (int r = 0; r < np; r++)
      crc = crc32_combine(crc, (uLong)all[2 * r], (z_off_t)all[2 * r + 1]);
    char got[16];
    snprintf(got, sizeof got, "%08lx", (unsigned long)crc);
    if (strcmp(got, h->checksum + 6))
      s = dtrt_fail(ctx, DT_ERR_CHECKSUM,
                    "load: %s is corrupt: its checksum is %s, its contents give %s", path,
                    h->checksum + 6, got);
  }
  dtrt_free(ctx, buf);
  dtrt_free(ctx, all);
  return s;
}

/* Matches the caller's tensors (table e, n, by name) with the file's: the
 * same tensors (model_hash), or with params_only these as the params of the
 * file (params_hash). Sets e[k].begin/end to the file's and the file's
 * entries' local. Names the first difference when they differ. */
static DtStatus match(DtrtCtx *ctx, const char *path, Entry *e, int n, Hdr *h,
                      bool params_only) {
  char mine[17];
  hash_of(e, n, false, mine);
  bool same = !strcmp(mine, h->hash), as_params = false;
  if (!same && params_only && h->phash && !strcmp(mine, h->phash))
    as_params = true;
  char params[17];
  hash_of(e, n, true, params);
  if (!same && !params_only && params[0] && !strcmp(params, h->hash))
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "load: %s holds this model's params alone (an export), not its optimizer "
                     "state: NAME_load_params starts from it with the state fresh",
                     path);
  for (int k = 0; k < n; k++) {
    Entry *f = bsearch(&e[k], h->f.e, (size_t)h->f.ne, sizeof *f, dtrt_st_by_name);
    if (!f)
      return dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s has no tensor '%s' (another model's?)",
                       path, e[k].name);
    if (f->dtype != e[k].dtype || f->rank != e[k].rank ||
        memcmp(f->dim, e[k].dim, (size_t)f->rank * sizeof *f->dim)) {
      char a[128], b[128];
      return dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s: tensor '%s' is %s, this model's is %s",
                       path, e[k].name, dtrt_type_str(f->dtype, f->dim, f->rank, a, sizeof a),
                       dtrt_type_str(e[k].dtype, e[k].dim, e[k].rank, b, sizeof b));
    }
    e[k].begin = f->begin, e[k].end = f->end;
    f->local = k;
  }
  for (int k = 0; k < h->f.ne && !as_params; k++)
    if (h->f.e[k].local < 0) {
      if (params_only && !h->phash)
        return dtrt_fail(ctx, DT_ERR_MISMATCH,
                         "load: %s does not say which of its tensors are params (it was "
                         "converted from per-rank files): load it into the training build and "
                         "save it again",
                         path);
      return dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s has tensor '%s', which this model %s",
                       path, h->f.e[k].name,
                       params_only ? "does not have as a param" : "does not have");
    }
  if (!same && !as_params)
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "load: %s was saved by model '%s', this is model '%s'", path,
                     params_only && h->phash ? h->phash : h->hash, mine);
  return DT_OK;
}

typedef struct Reader {
  int fd;
  int64_t base;   /* the tensor's offset in the file */
  unsigned char *dst;
} Reader;

static int read_run(void *arg, int64_t whole, int64_t local, int64_t n) {
  Reader *r = arg;
  int v = dtrt_st_pread(r->fd, r->dst + local * 4, n * 4, r->base + whole * 4);
  if (v == -2)
    errno = EIO;
  return v ? -1 : 0;
}

/* Opens path for a load, with its header; old: see read_header. */
static DtStatus open_ckpt(DtrtCtx *ctx, const char *path, int *fd, Hdr *h, bool old_ok,
                          bool *old) {
  int64_t size = 0;
  if (!path || !path[0])
    return dtrt_fail(ctx, DT_ERR_ARG, "load: no path");
  DtStatus s = dtrt_st_open(ctx, path, fd, &size);
  if (s)
    return s;
  return read_header(ctx, path, *fd, size, h, old_ok, old);
}

DtStatus dtrt_ckpt_load_as(DtrtCtx *ctx, const char *path, DtCkptTensor *t, int n,
                           bool params_only, int64_t *step, bool *old) {
  if (!ctx)
    return DT_ERR_ARG;
  int fd = -1;
  Hdr h = {0};
  DtStatus s;
  Entry *e = table(ctx, t, n, &s);
  if (!s)
    s = open_ckpt(ctx, path, &fd, &h, false, old);
  if (!s)
    s = match(ctx, path, e, n, &h, params_only);
  if (!(s = share(ctx, s)) && dtrt_nranks(ctx) > 1) {
    char id[64];   /* the ranks read the same file (a directory every rank sees) */
    snprintf(id, sizeof id, "%s step %lld", h.checksum, (long long)h.step);
    s = dtrt_comm_agree(ctx, "the checkpoint's checksum and step", id);
  }
  if (!s)
    s = check_sum(ctx, path, fd, &h);
  if (!s) {
    for (int k = 0; !s && k < n; k++) {
      DtCkptTensor *x = &t[e[k].local];
      int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
      dtrt_block(x->t.dim, x->full, x->begin, x->t.rank, full, begin);
      Reader r = {fd, 8 + h.f.hl + e[k].begin, x->t.data};
      if (dtrt_for_runs(full, begin, x->t.dim, x->t.rank, read_run, &r))
        s = dtrt_fail(ctx, DT_ERR_IO, "load: cannot read %s: %s", path, strerror(errno));
    }
    s = share(ctx, s);
  }
  if (!s && step)
    *step = h.step;
  if (fd >= 0)
    close(fd);
  dtrt_st_header_free(ctx, &h.f);
  dtrt_free(ctx, e);
  return s;
}

DtStatus dtrt_ckpt_load(DtrtCtx *ctx, const char *path, DtCkptTensor *t, int n,
                        bool params_only, int64_t *step) {
  return dtrt_ckpt_load_as(ctx, path, t, n, params_only, step, NULL);
}

DtStatus dtrt_ckpt_verify(DtrtCtx *ctx, const char *path, int64_t *step) {
  if (!ctx)
    return DT_ERR_ARG;
  if (dtrt_nranks(ctx) > 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "verify: runs in one process");
  int fd = -1;
  Hdr h = {0};
  DtStatus s = open_ckpt(ctx, path, &fd, &h, false, NULL);
  if (!s)
    s = check_sum(ctx, path, fd, &h);
  if (!s && step)
    *step = h.step;
  if (fd >= 0)
    close(fd);
  dtrt_st_header_free(ctx, &h.f);
  return s;
}

/* ---- conversion of per-rank files ---- */


/* The block of tensor e in an old file's metadata ("block:NAME"), or whole. */
static DtStatus old_block(DtrtCtx *ctx, const char *path, const cJSON *meta, const Entry *e,
                          DtBlock *b) {
  memset(b, 0, sizeof *b);
  char key[300];
  snprintf(key, sizeof key, "block:%s", e->name);
  const char *v = meta ? meta_str(meta, key) : NULL;
  if (!v)
    return DT_OK;
  cJSON *j = cJSON_Parse(v);
  bool ok = j && dtrt_json_dims(cJSON_GetObjectItemCaseSensitive(j, "full"), e->rank, b->full) &&
            dtrt_json_dims(cJSON_GetObjectItemCaseSensitive(j, "begin"), e->rank, b->begin) &&
            !dtrt_check_block(ctx, "convert", e->name, e->dim, b->full, b->begin, e->rank);
  cJSON_Delete(j);
  return ok ? DT_OK
            : dtrt_fail(ctx, DT_ERR_FORMAT, "convert: %s: the block of '%s' is malformed", path,
                        e->name);
}

typedef struct Placer {
  unsigned char *whole, *held;
  const unsigned char *src;
} Placer;

static int place_run(void *arg, int64_t whole, int64_t local, int64_t n) {
  Placer *p = arg;
  memcpy(p->whole + whole * 4, p->src + local * 4, (size_t)n * 4);
  memset(p->held + whole, 1, (size_t)n);
  return 0;
}

/* One old file: its header, its tensors read and checked, its rank. */
typedef struct Old {
  Hdr h;
  DtNamed *t;
  DtBlock *b;
  const char *hash;   /* "HASH plan PLAN rank R of N", or "HASH" of one process */
  int rank, nranks;
  size_t stem;        /* the length of "HASH plan PLAN" */
  int64_t step;
} Old;

static DtStatus read_old(DtrtCtx *ctx, const char *path, Old *o) {
  int fd = -1;
  bool old;
  DtStatus s = open_ckpt(ctx, path, &fd, &o->h, true, &old);
  if (fd >= 0)
    close(fd);
  if (s)
    return s;
  if (!old)
    return dtrt_fail(ctx, DT_ERR_ARG, "convert: %s is a checkpoint of format " FORMAT " already",
                     path);
  o->hash = o->h.f.meta ? meta_str(o->h.f.meta, "model_hash") : NULL;
  if (!o->hash)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "convert: %s has no model_hash", path);
  const char *r = strstr(o->hash, " rank ");
  o->stem = strlen(o->hash), o->rank = 0, o->nranks = 1;
  if (strstr(o->hash, " plan ")) {
    while (r && strstr(r + 1, " rank "))
      r = strstr(r + 1, " rank ");
    const char *rs = r ? r + 6 : NULL, *ns = NULL;
    size_t rl = rs ? strspn(rs, "0123456789") : 0, nl = 0;
    if (rl && !strncmp(rs + rl, " of ", 4))
      ns = rs + rl + 4, nl = strspn(ns, "0123456789");
    if (!nl || ns[nl])
      return dtrt_fail(ctx, DT_ERR_FORMAT,
                       "convert: %s: model_hash '%s' does not name its rank (HASH plan PLAN "
                       "rank R of N)",
                       path, o->hash);
    errno = 0;
    unsigned long long rank = strtoull(rs, NULL, 10), nranks = strtoull(ns, NULL, 10);
    if (errno || nranks < 1 || nranks > INT_MAX || rank >= nranks)
      return dtrt_fail(ctx, DT_ERR_FORMAT,
                       "convert: %s: model_hash says rank %.*s of %.*s, which is not a rank "
                       "of 1 to %d ranks",
                       path, (int)rl, rs, (int)nl, ns, INT_MAX);
    o->rank = (int)rank, o->nranks = (int)nranks;
    o->stem = (size_t)(r - o->hash);
  }
  int n = o->h.f.ne;
  o->t = dtrt_alloc(ctx, (size_t)(n + 1) * sizeof *o->t);
  o->b = dtrt_alloc(ctx, (size_t)(n + 1) * sizeof *o->b);
  if (!o->t || !o->b)
    return DT_ERR_NOMEM;
  for (int k = 0; k < n; k++) {
    const Entry *e = &o->h.f.e[k];
    o->t[k] = (DtNamed){e->name, {.dtype = e->dtype, .rank = e->rank}};
    memcpy(o->t[k].t.dim, e->dim, sizeof e->dim);
    if ((s = old_block(ctx, path, o->h.f.meta, e, &o->b[k])))
      return s;
    if (!(o->t[k].t.data = dtrt_alloc(ctx, (size_t)(e->end - e->begin) + 1)))
      return DT_ERR_NOMEM;
  }
  return dtrt_load_blocks(ctx, path, o->t, o->b, n, o->hash, &o->step);
}

static void old_free(DtrtCtx *ctx, Old *o) {
  for (int k = 0; o->t && k < o->h.f.ne; k++)
    dtrt_free(ctx, o->t[k].t.data);
  dtrt_free(ctx, o->t);
  dtrt_free(ctx, o->b);
  dtrt_st_header_free(ctx, &o->h.f);
}

/* Whether the files' blocks of tensor k of file 0 can cover the whole
 * tensor its block claims to be part of: a whole tensor never holds more
 * elements than the blocks read from the files, so the output's memory is
 * bounded by the files' sizes before any of it is allocated. */
static DtStatus bounded(DtrtCtx *ctx, const char *const *files, Old *o, int n, int k) {
  const Entry *e0 = &o[0].h.f.e[k];
  int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK], held = 0;
  dtrt_block(e0->dim, o[0].b[k].full, o[0].b[k].begin, e0->rank, full, begin);
  for (int f = 0; f < n; f++) {
    const Entry *e = bsearch(e0, o[f].h.f.e, (size_t)o[f].h.f.ne, sizeof *e, dtrt_st_by_name);
    if (e)
      held += dtrt_elems(e->dim, e->rank);   /* each at most the file's size */
  }
  int64_t cnt = dtrt_elems(full, e0->rank);
  if (cnt >= 0 && cnt <= held)
    return DT_OK;
  char buf[160];
  return dtrt_fail(ctx, DT_ERR_MISMATCH,
                   "convert: %s says '%s' is a block of %s, which the %d file%s cannot "
                   "cover: %s %lld of its elements",
                   files[0], e0->name, dtrt_dims_str(full, e0->rank, buf, sizeof buf), n,
                   n == 1 ? "" : "s", n == 1 ? "it holds" : "they hold", (long long)held);
}

/* Every file's block of tensor k of file 0 placed in the whole tensor x. */
static DtStatus assemble(DtrtCtx *ctx, const char *const *files, Old *o, int n, int k,
                         DtCkptTensor *x) {
  const Entry *e0 = &o[0].h.f.e[k];
  int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
  dtrt_block(e0->dim, o[0].b[k].full, o[0].b[k].begin, e0->rank, full, begin);
  *x = (DtCkptTensor){.name = e0->name, .kind = -1, .t = {.dtype = e0->dtype, .rank = e0->rank}};
  memcpy(x->t.dim, full, sizeof full);
  int64_t cnt = dtrt_elems(full, e0->rank);
  unsigned char *held = dtrt_alloc(ctx, (size_t)cnt + 1);
  x->t.data = dtrt_alloc(ctx, (size_t)cnt * 4 + 1);
  DtStatus s = held && x->t.data ? DT_OK : DT_ERR_NOMEM;
  for (int f = 0; !s && f < n; f++) {
    const Entry *e = bsearch(e0, o[f].h.f.e, (size_t)o[f].h.f.ne, sizeof *e, dtrt_st_by_name);
    int j = e ? (int)(e - o[f].h.f.e) : -1;
    int64_t ff[DT_MAX_RANK], fb[DT_MAX_RANK];
    if (e)
      dtrt_block(e->dim, o[f].b[j].full, o[f].b[j].begin, e->rank, ff, fb);
    if (!e || e->dtype != e0->dtype || e->rank != e0->rank ||
        memcmp(ff, full, (size_t)e->rank * sizeof *ff)) {
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "convert: %s %s '%s' as %s does", files[f],
                    e ? "does not hold" : "has no tensor", e0->name, files[0]);
      break;
    }
    Placer p = {x->t.data, held, o[f].t[j].t.data};
    dtrt_for_runs(full, fb, e->dim, e->rank, place_run, &p);
  }
  for (int64_t i = 0; !s && i < cnt; i++)
    if (!held[i])
      s = dtrt_fail(ctx, DT_ERR_MISMATCH,
                    "convert: no file holds element %lld of '%s': give the files of every rank",
                    (long long)i, e0->name);
  dtrt_free(ctx, held);
  return s;
}

DtStatus dtrt_ckpt_convert(DtrtCtx *ctx, const char *out, const char *const *files, int n) {
  if (!ctx)
    return DT_ERR_ARG;
  if (n < 1 || !files)
    return dtrt_fail(ctx, DT_ERR_ARG, "convert: no files to convert");
  if (!out || !out[0])
    return dtrt_fail(ctx, DT_ERR_ARG, "convert: no output path");
  Old *o = dtrt_alloc(ctx, (size_t)n * sizeof *o);
  bool *seen = dtrt_alloc(ctx, (size_t)n);
  DtCkptTensor *x = NULL;
  int nx = 0;
  DtStatus s = o && seen ? DT_OK : DT_ERR_NOMEM;
  for (int f = 0; !s && f < n; f++) {
    if (!files[f])
      s = dtrt_fail(ctx, DT_ERR_ARG, "convert: file %d has no name", f);
    else
      s = read_old(ctx, files[f], &o[f]);
  }
  for (int f = 0; !s && f < n; f++) {
    if (o[f].nranks != n)
      s = dtrt_fail(ctx, DT_ERR_ARG, "convert: %s is rank %d of %d; %d file%s given", files[f],
                    o[f].rank, o[f].nranks, n, n == 1 ? "" : "s");
    else if (o[f].stem != o[0].stem || strncmp(o[f].hash, o[0].hash, o[0].stem))
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "convert: %s and %s were saved by different plans "
                    "or models", files[0], files[f]);
    else if (o[f].step != o[0].step)
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "convert: %s holds step %lld, %s step %lld", files[0],
                    (long long)o[0].step, files[f], (long long)o[f].step);
    else if (o[f].h.f.ne != o[0].h.f.ne)
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "convert: %s holds %d tensors, %s %d", files[0],
                    o[0].h.f.ne, files[f], o[f].h.f.ne);
    else if (seen[o[f].rank])
      s = dtrt_fail(ctx, DT_ERR_ARG, "convert: two files of rank %d", o[f].rank);
    else
      seen[o[f].rank] = true;
  }
  for (int k = 0; !s && k < o[0].h.f.ne; k++)
    s = bounded(ctx, files, o, n, k);
  if (!s && !(x = dtrt_alloc(ctx, (size_t)(o[0].h.f.ne + 1) * sizeof *x)))
    s = DT_ERR_NOMEM;
  for (; !s && nx < o[0].h.f.ne; nx++)
    s = assemble(ctx, files, o, n, nx, &x[nx]);
  if (!s) {
    Text plan = {.ctx = ctx, .ok = true};
    add(&plan, "converted from %d per-rank file%s of %.*s", n, n == 1 ? "" : "s",
        (int)o[0].stem, o[0].hash);
    s = plan.ok ? dtrt_ckpt_save(ctx, out, x, nx, NULL, plan.s, o[0].step) : DT_ERR_NOMEM;
    dtrt_free(ctx, plan.s);
  }
  for (int k = 0; x && k <= nx && k < (o ? o[0].h.f.ne : 0); k++)
    dtrt_free(ctx, x[k].t.data);
  dtrt_free(ctx, x);
  for (int f = 0; o && f < n; f++)
    old_free(ctx, &o[f]);
  dtrt_free(ctx, o);
  dtrt_free(ctx, seen);
  return s;
}
