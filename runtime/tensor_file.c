/* tensor_file.c: safetensors files of named tensors (dtrt_save, dtrt_load;
 * and the per-rank model checkpoints of earlier versions, which still load;
 * a model's own are in model_ckpt.c), read and written through
 * safetensors.c. Saving is atomic; loading checks the whole file before it
 * writes into any tensor.
 *
 * __metadata__ holds "model_hash", "step" (decimal) and "checksum" ("crc32:" and
 * 8 hex digits): a CRC-32 of the data section followed by, in data order, each
 * tensor's name, dtype, shape, offsets and block (if it has one), then the
 * model hash and the step. A tensor that is a block of a larger one has the
 * key "block:NAME", valued {"full":[..],"begin":[..]} as JSON text. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrt_int.h"

typedef DtStEntry Entry;

static unsigned long crc_str(unsigned long crc, const char *s) {
  return dtrt_st_crc(crc, s, (int64_t)strlen(s) + 1);
}

static unsigned long crc_i64(unsigned long crc, int64_t v) {
  unsigned char b[8];
  for (int k = 0; k < 8; k++)
    b[k] = (unsigned char)((uint64_t)v >> 8 * k);
  return dtrt_st_crc(crc, b, 8);
}

/* Continues crc of the data section over the table (entries in data order). */
static unsigned long crc_table(unsigned long crc, const Entry *e, int n, const char *hash,
                               int64_t step) {
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

/* The header JSON (free with cJSON_free); NULL on no memory. */
static char *header(DtrtCtx *ctx, int n, const Entry *e, const char *hash, int64_t step,
                    unsigned long crc) {
  char buf[160], block[300], full[128], start[128];
  cJSON *meta, *root = dtrt_st_new_header(&meta);
  if (!root)
    return NULL;
  bool ok = cJSON_AddStringToObject(meta, "model_hash", hash) != NULL;
  snprintf(buf, sizeof buf, "%" PRId64, step);
  ok = ok && cJSON_AddStringToObject(meta, "step", buf);
  snprintf(buf, sizeof buf, "crc32:%08lx", crc);
  ok = ok && cJSON_AddStringToObject(meta, "checksum", buf);
  for (int k = 0; ok && k < n; k++) {
    ok = dtrt_st_add_entry(root, &e[k]);
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

static DtStatus save_blocks(DtrtCtx *ctx, const char *path, const DtNamed *t, const DtBlock *b,
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
  char *tmp = dtrt_st_tmp_name(ctx, path), *frame = NULL;
  if (!e || !tmp) {
    dtrt_free(ctx, e);
    dtrt_free(ctx, tmp);
    return DT_ERR_NOMEM;
  }
  unsigned long crc = 0;
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
    crc = dtrt_st_crc(crc, t[k].t.data, e[k].end - e[k].begin);
  }
  qsort(e, (size_t)n, sizeof *e, dtrt_st_by_begin);
  crc = crc_table(crc, e, n, hash, step);
  char *json = header(ctx, n, e, hash, step, crc);
  dtrt_free(ctx, e);
  int64_t size = 0;
  if (!json || !(frame = dtrt_st_frame(ctx, json, &size))) {
    s = dtrt_fail(ctx, DT_ERR_NOMEM, "save: out of memory building the header of %s", path);
    goto done;
  }

  int lock, fd = dtrt_st_create_tmp(ctx, path, tmp, &lock);
  if (fd < 0) {
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot create a temporary file beside %s: %s", path,
                  strerror(errno));
    goto done;
  }
  int bad = dtrt_st_pwrite(fd, frame, size, 0);
  for (int k = 0; k < n && !bad; k++) {
    int64_t bytes = dtrt_numel(&t[k].t) * 4;
    bad = dtrt_st_pwrite(fd, t[k].t.data, bytes, size);
    size += bytes;
  }
  bad = bad || fsync(fd);
  int err = errno;
  if (close(fd) && !bad)
    bad = 1, err = errno;
  if (bad) {
    unlink(tmp);
    close(lock);
    s = dtrt_fail(ctx, DT_ERR_IO, "save: cannot write %s: %s", path, strerror(err));
  } else {
    s = dtrt_st_replace(ctx, tmp, path, lock);
  }
done:
  cJSON_free(json);
  dtrt_free(ctx, frame);
  dtrt_free(ctx, tmp);
  return s;
}

/* SIGINT, SIGTERM and SIGHUP act once the save is over, the temporary file
 * renamed or removed. */
DtStatus dtrt_save_blocks(DtrtCtx *ctx, const char *path, const DtNamed *t, const DtBlock *b,
                          int n, const char *model_hash, int64_t step) {
  sigset_t old;
  dtrt_defer_signals(&old);
  DtStatus s = save_blocks(ctx, path, t, b, n, model_hash, step);
  dtrt_undefer_signals(&old);
  return s;
}

/* ---- load ---- */

/* The "block:NAME" keys of meta into the entries (sorted by name). */
static DtStatus parse_blocks(DtrtCtx *ctx, const char *path, const cJSON *meta, Entry *e,
                             int n) {
  for (const cJSON *j = meta->child; j; j = j->next) {
    if (strncmp(j->string, "block:", 6))
      continue;
    Entry *at = dtrt_st_find(e, n, j->string + 6);
    if (!at)
      return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: metadata '%s' names no tensor", path,
                       j->string);
    cJSON *b = cJSON_IsString(j) ? cJSON_Parse(j->valuestring) : NULL;
    const cJSON *full = cJSON_GetObjectItemCaseSensitive(b, "full");
    bool ok = b && dtrt_json_dims(full, at->rank, at->full) &&
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

/* Everything a load holds, released at once. */
typedef struct Load {
  int fd;
  DtStHeader h;
  unsigned char *data;
} Load;

/* Reads and checks the whole file into l: format, layout, checksum; the
 * entries end sorted by name. */
static DtStatus read_file(DtrtCtx *ctx, const char *path, int64_t size, Load *l) {
  DtStHeader *h = &l->h;
  DtStatus s = dtrt_st_read_header(ctx, path, l->fd, size, false, h);
  if (!s)
    s = dtrt_st_check_names(ctx, path, h);
  if (s)
    return s;
  const cJSON *mh = cJSON_GetObjectItemCaseSensitive(h->meta, "model_hash");
  const cJSON *ms = cJSON_GetObjectItemCaseSensitive(h->meta, "step");
  const cJSON *mc = cJSON_GetObjectItemCaseSensitive(h->meta, "checksum");
  int64_t step;
  unsigned long want;
  if (!cJSON_IsString(mh) || !cJSON_IsString(ms) || !cJSON_IsString(mc))
    return dtrt_fail(ctx, DT_ERR_FORMAT,
                     "load: %s: __metadata__ lacks a string model_hash, step or checksum", path);
  if (!dtrt_st_parse_i64(ms->valuestring, &step))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: step '%s' is not an integer", path,
                     ms->valuestring);
  if (step < 0 || step > DTRT_MAX_STEP)
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: step %lld is outside 0..%lld", path,
                     (long long)step, (long long)DTRT_MAX_STEP);
  if (!dtrt_st_parse_crc(mc->valuestring, &want))
    return dtrt_fail(ctx, DT_ERR_FORMAT, "load: %s: checksum '%s' is not crc32:XXXXXXXX", path,
                     mc->valuestring);
  if ((s = parse_blocks(ctx, path, h->meta, h->e, h->ne)) ||
      (s = dtrt_st_check_layout(ctx, path, h, "")))
    return s;
  if (!(l->data = dtrt_alloc(ctx, (size_t)h->datalen)))
    return DT_ERR_NOMEM;
  if (dtrt_st_pread(l->fd, l->data, h->datalen, 8 + h->hl))
    return dtrt_fail(ctx, DT_ERR_IO, "load: cannot read the data of %s", path);
  unsigned long crc = dtrt_st_crc(0, l->data, h->datalen);
  crc = crc_table(crc, h->e, h->ne, mh->valuestring, step);
  if (crc != want)
    return dtrt_fail(ctx, DT_ERR_CHECKSUM,
                     "load: %s is corrupt: its checksum is %08lx, its contents give %08lx", path,
                     want, crc);
  qsort(h->e, (size_t)h->ne, sizeof *h->e, dtrt_st_by_name);
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
  Load l = {0};
  if ((s = dtrt_st_open(ctx, path, &l.fd, &size)))
    return s;
  const Entry **match = dtrt_alloc(ctx, (size_t)n * sizeof *match);
  if (!match)
    s = DT_ERR_NOMEM;
  else
    s = read_file(ctx, path, size, &l);
  if (s)
    goto done;

  const char *hash = cJSON_GetObjectItemCaseSensitive(l.h.meta, "model_hash")->valuestring;
  if (model_hash && strcmp(model_hash, hash)) {
    s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s was saved by model '%s', this is model '%s'",
                  path, hash, model_hash);
    goto done;
  }
  for (int k = 0; k < n; k++) {
    const Entry *e = dtrt_st_find(l.h.e, l.h.ne, t[k].name);
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
  if (l.h.ne != n) {
    /* Every requested name matched and names are distinct: the file has more. */
    for (int j = 0; j < l.h.ne; j++) {
      int k = 0;
      while (k < n && match[k] != &l.h.e[j])
        k++;
      if (k == n) {
        s = dtrt_fail(ctx, DT_ERR_MISMATCH, "load: %s has tensor '%s', which is not expected",
                      path, l.h.e[j].name);
        goto done;
      }
    }
  }
  for (int k = 0; k < n; k++)
    if (match[k]->end > match[k]->begin)
      memcpy(t[k].t.data, l.data + match[k]->begin, (size_t)(match[k]->end - match[k]->begin));
  if (step)
    dtrt_st_parse_i64(cJSON_GetObjectItemCaseSensitive(l.h.meta, "step")->valuestring, step);
done:
  dtrt_free(ctx, match);
  dtrt_st_header_free(ctx, &l.h);
  dtrt_free(ctx, l.data);
  close(l.fd);
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
