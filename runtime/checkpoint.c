/* checkpoint.c: safetensors checkpoints of named tensors (dtrt_save,
 * dtrt_load; and the per-rank model checkpoints of earlier versions, which
 * still load; a model's own are in ckpt.c): an 8-byte little-endian header
 * length, a JSON header (cJSON), then the tensors' bytes. Saving is atomic;
 * loading checks the whole file before it writes into any tensor.
 *
 * __metadata__ holds "model_hash", "step" (decimal) and "checksum" ("crc32:" and
 * 8 hex digits): a CRC-32 of the data section followed by, in data order, each
 * tensor's name, dtype, shape, offsets and block (if it has one), then the
 * model hash and the step. A tensor that is a block of a larger one has the
 * key "block:NAME", valued {"full":[..],"begin":[..]} as JSON text. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrt_int.h"

#define MAX_HEADER (100 << 20)   /* the limit of the safetensors reference reader */

typedef struct Entry {
  const char *name;
  int dtype, rank;
  int64_t dim[DT_MAX_RANK];
  int64_t begin, end;            /* in the data section */
  bool block;                    /* of the tensor of shape full, from start on */
  int64_t full[DT_MAX_RANK], start[DT_MAX_RANK];
} Entry;

/* zlib restarts at 0 when given NULL, which an empty tensor may have. */
static uLong crc_bytes(uLong crc, const void *p, int64_t n) {
  return n ? crc32_z(crc, p, (z_size_t)n) : crc;
}

static uLong crc_str(uLong crc, const char *s) { return crc_bytes(crc, s, (int64_t)strlen(s) + 1); }

static uLong crc_i64(uLong crc, int64_t v) {
  unsigned char b[8];
  for (int k = 0; k < 8; k++)
    b[k] = (unsigned char)((uint64_t)v >> 8 * k);
  return crc_bytes(crc, b, 8);
}

/* Data order; empty tensors at one offset by name, so that the table has one
 * order for the checksum. */
static int by_begin(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Continues crc of the data section over the table (entries in data order). */
static uLong crc_table(uLong crc, const Entry *e, int n, const char *hash, int64_t step) {
  for (int k = 0; k < n; k++) {
    crc = crc_str(crc, e[k].name);
    crc = crc_i64(crc, e[k].dtype);
    crc = crc_i64(crc, e[k].rank);
    for (int d = 0; d < e[k].rank; d++)
      crc = crc_i64(crc, e[k].dim[d]);
    crc = crc_i64(crc, e[k].begin);
    crc = crc_i64(crc, e[k].end);
    for (int d = 0; e[k].block && d < e[k].rank; d++)
      crc = crc_i64(crc_i64(crc, e[k].full[d]), e[k].start[d]);
  }
  return crc_i64(crc_str(crc, hash), step);
}

static const DtBlock whole_block;

/* Checks the caller's tensor list: names present, distinct, not reserved;
 * blocks within their tensors. */
static DtStatus check_list(DtrtCtx *ctx, const char *op, const DtNamed *t, const DtBlock *b,
                           int n) {
  if (n < 0 || (n > 0 && !t))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d tensors at %p", op, n, (const void *)t);
  for (int k = 0; k < n; k++) {
    if (!t[k].name || !t[k].name[0] || !strcmp(t[k].name, "__metadata__"))
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: tensor %d has %s name", op, k,
                       t[k].name && t[k].name[0] ? "a reserved" : "no");
    DtStatus s = dtrt_check(ctx, op, t[k].name, &t[k].t, 0);
    if (!s)
      s = dtrt_check_block(ctx, op, t[k].name, t[k].t.dim, b ? b[k].full : whole_block.full,
                           b ? b[k].begin : whole_block.begin, t[k].t.rank);
    if (s)
      return s;
    for (int j = 0; j < k; j++)
      if (!strcmp(t[j].name, t[k].name))
        return dtrt_fail(ctx, DT_ERR_ARG, "%s: tensor name '%s' appears twice", op, t[k].name);
  }
  return DT_OK;
}

/* ---- opening ---- */

int dtrt_open_regular(const char *path, int64_t limit, int64_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), err = 0;
  struct stat st;
  *size = 0;
  if (fd < 0)
    return -1;
  if (fstat(fd, &st) || fcntl(fd, F_SETFL, 0))
    err = errno;
  else if (!S_ISREG(st.st_mode))
    err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
  else if ((*size = (int64_t)st.st_size) > limit)
    err = EFBIG;
  if (err) {
    close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

int dtrt_open_input(const DtrtCtx *ctx, const char *path, int64_t *size) {
  int fd = dtrt_open_regular(path, dtrt_read_limit(ctx), size);
  if (fd < 0 && errno == EISDIR)
    errno = EINVAL;   /* the runtime says "not a regular file" of a directory too */
  return fd;
}

FILE *dtrt_open_output(const char *path) {
  struct stat st;
  if (!stat(path, &st) && !S_ISREG(st.st_mode)) {
    errno = EINVAL;
    return NULL;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
  if (fd < 0)
    return NULL;
  FILE *f = NULL;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode))
    errno = EINVAL;
  else if (!ftruncate(fd, 0) && !fcntl(fd, F_SETFL, 0))
    f = fdopen(fd, "w");
  if (!f) {
    int err = errno;
    close(fd);
    errno = err;
  }
  return f;
}

DtStatus dtrt_check_output(DtrtCtx *ctx, const char *op, const char *path) {
  struct stat st;
  if (!stat(path, &st))
    return S_ISREG(st.st_mode)
               ? DT_OK
               : dtrt_fail(ctx, DT_ERR_IO, "%s: %s is not a regular file; not writing it", op,
                           path);
  if (errno == ENOENT)
    return DT_OK;
  return dtrt_fail(ctx, DT_ERR_IO, "%s: cannot write %s: %s", op, path, strerror(errno));
}

static int write_all(int fd, const void *p, int64_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, (size_t)(n < (1 << 30) ? n : (1 << 30)));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    c += w;
    n -= w;
  }
  return 0;
}

/* The header JSON (free with cJSON_free); NULL on no memory. */
static char *header(DtrtCtx *ctx, int n, const Entry *e, const char *hash, int64_t step,
                    uLong crc) {
  char buf[160], block[300], full[128], start[128];
  cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject();
  if (!root || !meta || !cJSON_AddItemToObject(root, "__metadata__", meta)) {
    cJSON_Delete(root);
    cJSON_Delete(meta);
    return NULL;
  }
  bool ok = cJSON_AddStringToObject(meta, "model_hash", hash) != NULL;
  snprintf(buf, sizeof buf, "%" PRId64, step);
  ok = ok && cJSON_AddStringToObject(meta, "step", buf);
  snprintf(buf, sizeof buf, "crc32:%08lx", crc);
  ok = ok && cJSON_AddStringToObject(meta, "checksum", buf);
  for (int k = 0; ok && k < n; k++) {
    cJSON *o = cJSON_AddObjectToObject(root, e[k].name);
    int at = snprintf(buf, sizeof buf, "[");
    for (int d = 0; d < e[k].rank; d++)
      at += snprintf(buf + at, sizeof buf - (size_t)at, "%s%" PRId64, d ? "," : "", e[k].dim[d]);
    snprintf(buf + at, sizeof buf - (size_t)at, "]");
    ok = o && cJSON_AddStringToObject(o, "dtype", e[k].dtype == DTRT_F32 ? "F32" : "I32") &&
         cJSON_AddRawToObject(o, "shape", buf);
    snprintf(buf, sizeof buf, "[%" PRId64 ",%" PRId64 "]", e[k].begin, e[k].end);
    ok = ok && cJSON_AddRawToObject(o, "data_offsets", buf);
    if (ok && e[k].block) {
      size_t len = strlen(e[k].name) + 8;
      char *key = dtrt_alloc(ctx, len);
      snprintf(block, sizeof block, "{\"full\":%s,\"begin\":%s}",
               dtrt_dims_str(e[k].full, e[k].rank, full, sizeof full),
               dtrt_dims_str(e[k].start, e[k].rank, start, sizeof start));
      if ((ok = key != NULL)) {
        snprintf(key, len, "block:%s", e[k].name);
        ok = cJSON_AddStringToObject(meta, key, block) != NULL;
      }
      dtrt_free(ctx, key);
    }
  }
  char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return json;
}

/* fsync of the directory holding path, so the rename itself is durable. */
int dtrt_sync_dir(DtrtCtx *ctx, const char *path) {
  size_t n = strlen(path);
  char *dir = dtrt_alloc(ctx, n + 2);
  if (!dir)
    return -1;
  const char *slash = strrchr(path, '/');
  if (!slash)
    strcpy(dir, ".");
  else if (slash == path)
    strcpy(dir, "/");
  else
    memcpy(dir, path, (size_t)(slash - path));
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = -1;
  if (fd >= 0) {
    r = fsync(fd);
    close(fd);
  }
  dtrt_free(ctx, dir);
  return r;
}

DtStatus dtrt_save_blocks(DtrtCtx *ctx, const char *path, const DtNamed *t, const DtBlock *b,
                          int n, const char *model_hash, int64_t step) {
  if (!ctx)
    return DT_ERR_ARG;
  if (!path || !path[0])
    return dtrt_fail(ctx, DT_ERR_ARG, "save: no path");
  DtStatus s = check_list(ctx, "save", t, b, n);
  if (!s && (step < 0 || step > DTRT_MAX_STEP))
    s = dtrt_fail(ctx, DT_ERR_ARG, "save: step %lld is outside 0..%lld", (long long)step,
                  (long long)DTRT_MAX_STEP);
  if (!s)
    s = dtrt_check_output(ctx, "save", path);
  if (s)
    return s;
  const char *hash = model_hash ? model_hash : "";
  Entry *e = dtrt_alloc(ctx, (size_t)n * sizeof *e);
  size_t plen = strlen(path);
  char *tmp = dtrt_alloc(ctx, plen + 16);
  if (!e || !tmp) {
    dtrt_free(ctx, e);
    dtrt_free(ctx, tmp);
    return DT_ERR_NOMEM;
  }
  uLong crc = crc32_z(0, NULL, 0);
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    e[k] = (Entry){.name = t[k].name, .dtype = t[k].t.dtype, .rank = t[k].t.rank, .begin = at,
                   .block = b && !dtrt_whole(b[k].full, t[k].t.rank)};
    memcpy(e[k].dim, t[k].t.dim, sizeof e[k].dim);
    if (e[k].block) {
      memcpy(e[k].full, b[k].full, sizeof e[k].full);
      memcpy(e[k].start, b[k].begin, sizeof e[k].start);
    }
    at = e[k].end = at + dtrt_numel(&t[k].t) * 4;
    crc = crc_bytes(crc, t[k].t.data, e[k].end - e[k].begin);
  }
  qsort(e, (size_t)n, sizeof *e, by_begin);
  crc = crc_table(crc, e, n, hash, step);
  char *json = header(ctx, n, e, hash, step, crc);
  dtrt_free(ctx, e);
  if (!json) {
    dtrt_free(ctx, tmp);
    return dtrt_fail(ctx, DT_ERR_NOMEM, "save: out of memory building the header of %s", path);
  }

  memcpy(tmp, path, plen);
  strcpy(tmp + plen, ".tmp.XXXXXX");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot create a temporary file beside %s: %s", path,
                  strerror(errno));
    goto done;
  }
  /* The header is padded with spaces to a multiple of 8 bytes, as is usual. */
  uint64_t len = strlen(json), hl = (len + 7) / 8 * 8;
  unsigned char len8[8];
  for (int k = 0; k < 8; k++)
    len8[k] = (unsigned char)(hl >> 8 * k);
  int bad = fchmod(fd, 0644) || write_all(fd, len8, 8) || write_all(fd, json, (int64_t)len) ||
            write_all(fd, "        ", (int64_t)(hl - len));
  for (int k = 0; k < n && !bad; k++)
    bad = write_all(fd, t[k].t.data, dtrt_numel(&t[k].t) * 4);
  bad = bad || fsync(fd);
  int err = errno;
  if (close(fd) && !bad)
    bad = 1, err = errno;
  /* the path may have become something else while the data were written */
  if (!bad && (s = dtrt_check_output(ctx, "save", path))) {
    unlink(tmp);
    goto done;
  }
  if (!bad && rename(tmp, path))
    bad = 1, err = errno;
  if (bad) {
    unlink(tmp);
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", path, strerror(err));
    goto done;
  }
  if (dtrt_sync_dir(ctx, path))
    s = dtrt_fail(ctx, DT_ERR_IO, "save: wrote %s but could not sync its directory: %s", path,
                  strerror(errno));
done:
  cJSON_free(json);
  dtrt_free(ctx, tmp);
  return s;
}

/* ---- load ---- */

/* A JSON number that is a whole number in [0, 2^53]. */
bool dtrt_json_whole(const cJSON *j, int64_t *v) {
  if (!cJSON_IsNumber(j))
    return false;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0) || d != (double)(int64_t)d)
    return false;
  *v = (int64_t)d;
  return true;
}

/* Reads one tensor entry of the header into e. */
static DtStatus parse_entry(DtrtCtx *ctx, const char *path, const cJSON *j, int64_t datalen,
                            Entry *e) {
  const char *name = j->string;
  if (!cJSON_IsObject(j))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: entry '%s' is not an object", path, name);
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shape");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
  if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' lacks a string dtype, a shape or data_offsets", path,
                     name);
  e->name = name;
  if (!strcmp(dt->valuestring, "F32"))
    e->dtype = DTRT_F32;
  else if (!strcmp(dt->valuestring, "I32"))
    e->dtype = DTRT_I32;
  else
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "load: %s: tensor '%s' has dtype %s; only F32 and I32 load", path, name,
                     dt->valuestring);
  int rank = cJSON_GetArraySize(sh);
  if (rank > DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s: tensor '%s' has rank %d; at most %d load",
                     path, name, rank, DT_MAX_RANK);
  e->rank = rank;
  int d = 0;
  for (const cJSON *x = sh->child; x; x = x->next)
    if (!dtrt_json_whole(x, &e->dim[d++]))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' has a bad shape entry", path,
                       name);
  int64_t n = dtrt_elems(e->dim, rank), bytes;
  if (n < 0 || !dtrt_mul(n, 4, &bytes))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' has too many elements", path,
                     name);
  if (cJSON_GetArraySize(off) != 2 || !dtrt_json_whole(off->child, &e->begin) ||
      !dtrt_json_whole(off->child->next, &e->end) || e->begin > e->end || e->end > datalen)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' has data_offsets outside the %lld data bytes", path,
                     name, (long long)datalen);
  if (e->end - e->begin != bytes)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: tensor '%s' spans %lld bytes, its shape needs %lld", path, name,
                     (long long)(e->end - e->begin), (long long)bytes);
  return DT_OK;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

/* A JSON array of rank whole numbers into v. */
bool dtrt_json_dims(const cJSON *j, int rank, int64_t *v) {
  if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) != rank)
    return false;
  int d = 0;
  for (const cJSON *x = j->child; x; x = x->next)
    if (!dtrt_json_whole(x, &v[d++]))
      return false;
  return true;
}

/* The "block:NAME" keys of meta into the entries (sorted by name). */
static DtStatus parse_blocks(DtrtCtx *ctx, const char *path, const cJSON *meta, Entry *e,
                             int n) {
  for (const cJSON *j = meta->child; j; j = j->next) {
    if (strncmp(j->string, "block:", 6))
      continue;
    Entry key = {.name = j->string + 6}, *at = bsearch(&key, e, (size_t)n, sizeof key, by_name);
    if (!at)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: metadata '%s' names no tensor", path,
                       j->string);
    cJSON *b = cJSON_IsString(j) ? cJSON_Parse(j->valuestring) : NULL;
    bool ok = b && dtrt_json_dims(cJSON_GetObjectItemCaseSensitive(b, "full"), at->rank, at->full) &&
              dtrt_json_dims(cJSON_GetObjectItemCaseSensitive(b, "begin"), at->rank, at->start) &&
              !at->block && !dtrt_whole(at->full, at->rank) &&
              !dtrt_check_block(ctx, "load", at->name, at->dim, at->full, at->start, at->rank);
    cJSON_Delete(b);
    if (!ok)
      return dtrt_fail(ctx, DT_ERR_FORMAT,
                       "load: %s: metadata '%s' is not a block of the tensor's shape", path,
                       j->string);
    at->block = true;
  }
  return DT_OK;
}

/* Strict decimal int64. */
static bool parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!(s[0] == '-' || (s[0] >= '0' && s[0] <= '9')) || *end || errno)
    return false;
  *v = x;
  return true;
}

/* "crc32:" and exactly 8 lowercase hex digits. */
static bool parse_crc(const char *s, uLong *v) {
  if (strlen(s) != 14 || strncmp(s, "crc32:", 6))
    return false;
  *v = 0;
  for (int k = 6; k < 14; k++) {
    int c = s[k], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0)
      return false;
    *v = *v << 4 | (uLong)d;
  }
  return true;
}

static bool read_exact(FILE *f, void *p, int64_t n) {
  return n == 0 || fread(p, 1, (size_t)n, f) == (size_t)n;
}

/* Everything a load holds, released at once. */
typedef struct Load {
  FILE *f;
  char *hdr;
  cJSON *root;
  Entry *e;
  int ne;
  unsigned char *data;
  int64_t datalen;
} Load;

/* Reads and checks the whole file into l: format, layout, checksum. */
static DtStatus read_file(DtrtCtx *ctx, const char *path, Load *l, const cJSON **meta) {
  struct stat st;
  unsigned char len8[8];
  if (fstat(fileno(l->f), &st) || !S_ISREG(st.st_mode))
    return dtrt_fail(ctx, DT_ERR_IO, "load: %s is not a regular file", path);
  int64_t size = st.st_size;
  if (size < 8 || !read_exact(l->f, len8, 8))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s is too short (%lld bytes) for a checkpoint",
                     path, (long long)size);
  uint64_t hl = 0;
  for (int k = 0; k < 8; k++)
    hl |= (uint64_t)len8[k] << 8 * k;
  if (hl < 2 || hl > MAX_HEADER || hl > (uint64_t)size - 8)
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: header length %llu does not fit a %lld-byte file", path,
                     (unsigned long long)hl, (long long)size);
  if (!(l->hdr = dtrt_alloc(ctx, hl + 1)))
    return DT_ERR_NOMEM;
  if (!read_exact(l->f, l->hdr, (int64_t)hl))
    return dtrt_fail(ctx, DT_ERR_IO, "load: cannot read the header of %s", path);
  const char *end = l->hdr;
  l->root = cJSON_ParseWithLengthOpts(l->hdr, hl, &end, 0);
  if (!cJSON_IsObject(l->root))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: the header is not a JSON object%s", path,
                     l->root ? "" : " (malformed JSON)");
  for (; end < l->hdr + hl; end++)
    if (*end != ' ' && *end != '\n' && *end != '\t' && *end != '\r')
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: text after the JSON header", path);

  l->datalen = size - 8 - (int64_t)hl;
  if (!(l->e = dtrt_alloc(ctx, (size_t)cJSON_GetArraySize(l->root) * sizeof *l->e)))
    return DT_ERR_NOMEM;
  DtStatus s;
  for (const cJSON *j = l->root->child; j; j = j->next) {
    if (strcmp(j->string, "__metadata__"))
      s = parse_entry(ctx, path, j, l->datalen, &l->e[l->ne++]);
    else if (*meta)
      s = dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: two __metadata__ entries", path);
    else
      *meta = j, s = DT_OK;
    if (s)
      return s;
  }
  qsort(l->e, (size_t)l->ne, sizeof *l->e, by_name);
  for (int k = 1; k < l->ne; k++)
    if (!strcmp(l->e[k - 1].name, l->e[k].name))
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' appears twice", path,
                       l->e[k].name);

  const cJSON *mh = cJSON_GetObjectItemCaseSensitive(*meta, "model_hash");
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(*meta, "step");
  const cJSON *mc = cJSON_GetObjectItemCaseSensitive(*meta, "checksum");
  int64_t step;
  uLong want;
  if (!cJSON_IsString(mh) || !cJSON_IsString(ms) || !cJSON_IsString(mc))
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: __metadata__ lacks a string model_hash, step or checksum", path);
  if (!parse_i64(ms->valuestring, &step))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: step '%s' is not an integer", path,
                     ms->valuestring);
  if (step < 0 || step > DTRT_MAX_STEP)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: step %lld is outside 0..%lld", path,
                     (long long)step, (long long)DTRT_MAX_STEP);
  if (!parse_crc(mc->valuestring, &want))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: checksum '%s' is not crc32:XXXXXXXX", path,
                     mc->valuestring);
  if ((s = parse_blocks(ctx, path, *meta, l->e, l->ne)))
    return s;

  qsort(l->e, (size_t)l->ne, sizeof *l->e, by_begin);
  int64_t at = 0;
  for (int k = 0; k < l->ne; k++) {
    if (l->e[k].begin != at)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensor '%s' %s at byte %lld", path,
                       l->e[k].name, l->e[k].begin < at ? "overlaps another" : "leaves a hole",
                       (long long)l->e[k].begin);
    at = l->e[k].end;
  }
  if (at != l->datalen)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: tensors cover %lld of the %lld data bytes",
                     path, (long long)at, (long long)l->datalen);
  if (!(l->data = dtrt_alloc(ctx, (size_t)l->datalen)))
    return DT_ERR_NOMEM;
  if (!read_exact(l->f, l->data, l->datalen))
    return dtrt_fail(ctx, DT_ERR_IO, "load: cannot read the data of %s", path);
  uLong crc = crc_bytes(crc32_z(0, NULL, 0), l->data, l->datalen);
  crc = crc_table(crc, l->e, l->ne, mh->valuestring, step);
  if (crc != want)
    return dtrt_fail(ctx, DT_ERR_CHECKSUM,
                     "load: %s is corrupt: its checksum is %08lx, its contents give %08lx", path,
                     (unsigned long)want, (unsigned long)crc);
  qsort(l->e, (size_t)l->ne, sizeof *l->e, by_name);
  return DT_OK;
}

DtStatus dtrt_load_blocks(DtrtCtx *ctx, const char *path, DtNamed *t, const DtBlock *b, int n,
                          const char *model_hash, int64_t *step) {
  if (!ctx)
    return DT_ERR_ARG;
  if (!path || !path[0])
    return dtrt_fail(ctx, DT_ERR_ARG, "load: no path");
  DtStatus s = check_list(ctx, "load", t, b, n);
  if (s)
    return s;
  int64_t size;
  int fd = dtrt_open_input(ctx, path, &size);
  Load l = {.f = fd >= 0 ? fdopen(fd, "rb") : NULL};
  if (!l.f) {
    int err = errno;
    if (fd >= 0)
      close(fd);
    if (err == EINVAL)
      return dtrt_fail(ctx, DT_ERR_IO, "load: %s is not a regular file", path);
    if (err == EFBIG)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s is %lld bytes, more than the read limit of "
                       "%lld", path, (long long)size, (long long)dtrt_read_limit(ctx));
    return dtrt_fail(ctx, DT_ERR_IO, "load: cannot open %s: %s", path, strerror(err));
  }
  const cJSON *meta = NULL;
  const Entry **match = dtrt_alloc(ctx, (size_t)n * sizeof *match);
  if (!match)
    s = DT_ERR_NOMEM;
  else
    s = read_file(ctx, path, &l, &meta);
  if (s)
    goto done;

  const char *hash = cJSON_GetObjectItemCaseSensitive(meta, "model_hash")->valuestring;
  if (model_hash && strcmp(model_hash, hash)) {
    s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s was saved by model '%s', this is model '%s'",
                  path, hash, model_hash);
    goto done;
  }
  for (int k = 0; k < n; k++) {
    Entry key = {.name = t[k].name};
    const Entry *e = bsearch(&key, l.e, (size_t)l.ne, sizeof key, by_name);
    if (!e) {
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s has no tensor '%s'", path, t[k].name);
      goto done;
    }
    bool same = e->dtype == t[k].t.dtype && e->rank == t[k].t.rank;
    for (int d = 0; same && d < e->rank; d++)
      same = e->dim[d] == t[k].t.dim[d];
    if (!same) {
      char bf[128], bw[128];
      s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s: tensor '%s' is %s, expected %s", path,
                    t[k].name, dtrt_type_str(e->dtype, e->dim, e->rank, bf, sizeof bf),
                    dtrt_type_str(t[k].t.dtype, t[k].t.dim, t[k].t.rank, bw, sizeof bw));
      goto done;
    }
    int64_t ff[DT_MAX_RANK], fb[DT_MAX_RANK], wf[DT_MAX_RANK], wb[DT_MAX_RANK];
    dtrt_block(e->dim, e->full, e->start, e->rank, ff, fb);
    const DtBlock *want = b ? &b[k] : &whole_block;
    dtrt_block(t[k].t.dim, want->full, want->begin, e->rank, wf, wb);
    size_t bytes = (size_t)e->rank * sizeof *ff;
    if (memcmp(ff, wf, bytes) || memcmp(fb, wb, bytes)) {
      char f1[128], b1[128], f2[128], b2[128];
      s = dtrt_fail(ctx, DT_ERR_MISMATCH,
                    "load: %s: tensor '%s' is the block at %s of %s, expected the block at %s "
                    "of %s",
                    path, t[k].name, dtrt_dims_str(fb, e->rank, b1, sizeof b1),
                    dtrt_dims_str(ff, e->rank, f1, sizeof f1),
                    dtrt_dims_str(wb, e->rank, b2, sizeof b2),
                    dtrt_dims_str(wf, e->rank, f2, sizeof f2));
      goto done;
    }
    match[k] = e;
  }
  if (l.ne != n) {
    /* Every requested name matched and names are distinct: the file has more. */
    for (int j = 0; j < l.ne; j++) {
      int k = 0;
      while (k < n && match[k] != &l.e[j])
        k++;
      if (k == n) {
        s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s has tensor '%s', which is not expected",
                      path, l.e[j].name);
        goto done;
      }
    }
  }
  for (int k = 0; k < n; k++)
    if (match[k]->end > match[k]->begin)
      memcpy(t[k].t.data, l.data + match[k]->begin, (size_t)(match[k]->end - match[k]->begin));
  if (step)
    parse_i64(cJSON_GetObjectItemCaseSensitive(meta, "step")->valuestring, step);
done:
  dtrt_free(ctx, match);
  cJSON_Delete(l.root);
  dtrt_free(ctx, l.e);
  dtrt_free(ctx, l.hdr);
  dtrt_free(ctx, l.data);
  fclose(l.f);
  return s;
}

DtStatus dtrt_save(DtrtCtx *ctx, const char *path, const DtNamed *t, int n,
                   const char *model_hash, int64_t step) {
  return dtrt_save_blocks(ctx, path, t, NULL, n, model_hash, step);
}

DtStatus dtrt_load(DtrtCtx *ctx, const char *path, DtNamed *t, int n, const char *model_hash,
                   int64_t *step) {
  return dtrt_load_blocks(ctx, path, t, NULL, n, model_hash, step);
}
