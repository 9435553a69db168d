/* weights.c: params read by name from a plain safetensors file (PyTorch's
 * state_dict), a stacked param also from its slices (layers.3.wq is row 3 of
 * layers.wq), every missing, extra and mismatched name told at once; and the
 * checkpoint of step 0 that dtc-ckpt import makes of a model's checkpoint
 * and such a file. The format is safetensors.c's. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dtrt_int.h"

enum { SHOWN = 4 }; /* names shown per kind of difference; the rest counted */

/* Where tensor k of the caller's lies in the data section: pieces of se
 * elements each, at off[i] (the slices of a stacked tensor), or one piece
 * at `one` (off NULL). */
typedef struct Where {
  int64_t se;
  int64_t *off;
  int64_t one;
} Where;

/* The differences between the caller's tensors and the file's, as text. */
typedef struct Diff {
  int n[3]; /* missing, extra, mismatched */
  char list[3][200];
} Diff;

static void note(Diff *d, int kind, const char *fmt, ...) {
  char *b = d->list[kind];
  size_t at = strlen(b);
  if (d->n[kind]++ < SHOWN && at < sizeof d->list[kind] - 1) {
    if (at)
      at += (size_t)snprintf(b + at, sizeof d->list[kind] - at, ", ");
    va_list ap;
    va_start(ap, fmt);
    if (at < sizeof d->list[kind])
      vsnprintf(b + at, sizeof d->list[kind] - at, fmt, ap);
    va_end(ap);
  }
}

static bool same_type(const DtStEntry *e, int dtype, const int64_t *dim, int rank) {
  return e->dtype == dtype && e->rank == rank && !memcmp(e->dim, dim, (size_t)rank * sizeof *dim);
}

/* name with ".i" put after its first `at` bytes (at a dot), into buf. */
static const char *slice_name(char *buf, size_t n, const char *name, size_t at, int64_t i) {
  snprintf(buf, n, "%.*s.%lld%s", (int)at, name, (long long)i, name + at);
  return buf;
}

/* The slices of the stacked tensor t (whole dims full) in the file, when it
 * has slice 0 of it under some dot of its name (layers.0.wq of layers.wq):
 * full[0] rows, each of dims full[1..]. All or nothing: a slice missing or
 * of another type is noted. Returns whether the file holds slices of it. */
static bool find_slices(DtrtCtx *ctx, DtStHeader *h, const DtCkptTensor *t, const int64_t *full,
                        int k, Where *w, Diff *d, DtStatus *s) {
  size_t blen = strlen(t->name) + 24, at = 0;
  char *buf = dtrt_alloc(ctx, blen);
  if (!buf) {
    *s = DT_ERR_NOMEM;
    return false;
  }
  const DtStEntry *e = NULL;
  for (const char *dot = strchr(t->name, '.'); dot && !e; dot = strchr(dot + 1, '.')) {
    at = (size_t)(dot - t->name);
    e = dtrt_st_find(h->e, h->ne, slice_name(buf, blen, t->name, at, 0));
  }
  if (!e) {
    dtrt_free(ctx, buf);
    return false;
  }
  int64_t L = full[0], missing = 0, wrong = 0;
  char ty[128], first[160] = "";
  w->se = dtrt_elems(full + 1, t->t.rank - 1);
  if (L > h->ne) { /* more slices than the file has tensors: not all there */
    note(d, 0, "%s (%lld slices; the file has %d tensors)", t->name, (long long)L, h->ne);
    L = 0;
  } else if (!(w->off = dtrt_alloc(ctx, (size_t)L * sizeof *w->off + 1))) {
    *s = DT_ERR_NOMEM;
    L = 0;
  }
  for (int64_t i = 0; i < L; i++) {
    DtStEntry *f = dtrt_st_find(h->e, h->ne, slice_name(buf, blen, t->name, at, i));
    if (!f && !missing++)
      snprintf(first, sizeof first, "%s", buf);
    if (!f)
      continue;
    f->local = k;
    w->off[i] = f->begin;
    if (!same_type(f, t->t.dtype, full + 1, t->t.rank - 1) && !wrong++)
      note(d, 2, "%s: %s, a row of %s", f->name,
           dtrt_type_str(f->dtype, f->dim, f->rank, ty, sizeof ty), t->name);
  }
  if (missing)
    note(d, 0, "%s (%lld of its %lld slices, as %s)", t->name, (long long)missing, (long long)L,
         first);
  dtrt_free(ctx, buf);
  return true;
}

/* Matches the caller's tensors with the file's entries (sorted by name):
 * w[k] where t[k] is, the differences in d. */
static DtStatus match(DtrtCtx *ctx, DtStHeader *h, const DtCkptTensor *t, int n, Where *w,
                      Diff *d) {
  DtStatus s = DT_OK;
  char a[128], b[128];
  for (int k = 0; k < n && !s; k++) {
    int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
    const DtTensor *x = &t[k].t;
    dtrt_block(x->dim, t[k].full, t[k].begin, x->rank, full, begin);
    DtStEntry *e = dtrt_st_find(h->e, h->ne, t[k].name);
    if (e) {
      e->local = k;
      if (same_type(e, x->dtype, full, x->rank))
        w[k] = (Where){.se = dtrt_elems(full, x->rank), .one = e->begin};
      else
        note(d, 2, "%s: %s, the model's %s", e->name,
             dtrt_type_str(e->dtype, e->dim, e->rank, a, sizeof a),
             dtrt_type_str(x->dtype, full, x->rank, b, sizeof b));
      continue;
    }
    if (x->rank >= 1 && find_slices(ctx, h, &t[k], full, k, &w[k], d, &s))
      continue;
    if (!s)
      note(d, 0, "%s %s", t[k].name, dtrt_type_str(x->dtype, full, x->rank, a, sizeof a));
  }
  for (int k = 0; k < h->ne && !s; k++)
    if (h->e[k].local < 0)
      note(d, 1, "%s %s", h->e[k].name,
           dtrt_type_str(h->e[k].dtype, h->e[k].dim, h->e[k].rank, a, sizeof a));
  return s;
}

static DtStatus refuse(DtrtCtx *ctx, const char *path, const Diff *d) {
  static const char *const what[3] = {"missing", "extra", "of another type"};
  char text[480] = "";
  size_t at = 0;
  for (int j = 0; j < 3; j++)
    if (d->n[j] && at < sizeof text)
      at += (size_t)snprintf(text + at, sizeof text - at, "; %d %s: %s%s", d->n[j], what[j],
                             d->list[j], d->n[j] > SHOWN ? ", ..." : "");
  return dtrt_fail(ctx, DT_ERR_MISMATCH, "load_params: %s does not fit the model%s", path, text);
}

typedef struct Reader {
  int fd;
  int64_t data; /* the data section's offset in the file */
  const Where *w;
  unsigned char *dst;
} Reader;

/* A run of the whole tensor, read piece by piece (a run may span slices). */
static int read_run(void *arg, int64_t whole, int64_t local, int64_t n) {
  const Reader *r = arg;
  const Where *w = r->w;
  while (n > 0) {
    int64_t s = whole / w->se, o = whole % w->se, take = w->se - o < n ? w->se - o : n;
    int64_t off = w->off ? w->off[s] : w->one;
    int v = dtrt_st_pread(r->fd, r->dst + local * 4, take * 4, r->data + off + o * 4);
    if (v) {
      if (v == -2)
        errno = EIO;
      return -1;
    }
    whole += take, local += take, n -= take;
  }
  return 0;
}

static DtStatus share(DtrtCtx *ctx, DtStatus s) {
  return dtrt_nranks(ctx) > 1 ? dtrt_comm_status(ctx, s) : s;
}

DtStatus dtrt_weights_load(DtrtCtx *ctx, const char *path, DtCkptTensor *t, int n) {
  if (!ctx)
    return DT_ERR_ARG;
  int fd = -1;
  int64_t size = 0;
  DtStHeader h = {0};
  Diff d = {0};
  Where *w = NULL;
  DtStatus s = DT_OK;
  if (n < 0 || (n > 0 && !t))
    s = dtrt_fail(ctx, DT_ERR_ARG, "load_params: %d tensors at %p", n, (const void *)t);
  else if (!path || !path[0])
    s = dtrt_fail(ctx, DT_ERR_ARG, "load_params: no path");
  if (!s)
    s = dtrt_st_open(ctx, path, &fd, &size);
  if (!s)
    s = dtrt_st_read_header(ctx, path, fd, size, false, &h);
  if (!s)
    s = dtrt_st_check_layout(ctx, path, &h, " (truncated or extended?)");
  if (!s)
    s = dtrt_st_check_names(ctx, path, &h);
  if (!s && !(w = dtrt_alloc(ctx, (size_t)(n + 1) * sizeof *w)))
    s = DT_ERR_NOMEM;
  if (!s)
    s = match(ctx, &h, t, n, w, &d);
  if (!s && (d.n[0] || d.n[1] || d.n[2]))
    s = refuse(ctx, path, &d);
  if (!(s = share(ctx, s)) && dtrt_nranks(ctx) > 1) {
    char id[64]; /* the ranks read the same file */
    snprintf(id, sizeof id, "%lld bytes, header crc32 %08lx", (long long)size,
             dtrt_st_crc(0, h.text, h.hl));
    s = dtrt_comm_agree(ctx, "the weights file (size and header)", id);
  }
  if (!s) {
    for (int k = 0; !s && k < n; k++) {
      int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
      const DtTensor *x = &t[k].t;
      dtrt_block(x->dim, t[k].full, t[k].begin, x->rank, full, begin);
      Reader r = {fd, 8 + h.hl, &w[k], x->data};
      if (w[k].se > 0 && dtrt_for_runs(full, begin, x->dim, x->rank, read_run, &r))
        s = dtrt_fail(ctx, DT_ERR_IO, "load_params: cannot read %s: %s", path, strerror(errno));
    }
    s = share(ctx, s);
  }
  for (int k = 0; w && k < n; k++)
    dtrt_free(ctx, w[k].off);
  dtrt_free(ctx, w);
  if (fd >= 0)
    close(fd);
  dtrt_st_header_free(ctx, &h);
  return s;
}

/* ---- dtc-ckpt import ---- */

/* Whether entry e of h (sorted by name) is optimizer state: P__m, P__v or
 * P__acc of a tensor P of the same file (optimizer.c's names). */
static bool is_state(const DtStHeader *h, const DtStEntry *e) {
  static const char *const suffix[] = {"__m", "__v", "__acc"};
  size_t len = strlen(e->name);
  for (size_t j = 0; j < sizeof suffix / sizeof *suffix; j++) {
    size_t sl = strlen(suffix[j]);
    if (len <= sl || strcmp(e->name + len - sl, suffix[j]))
      continue;
    char buf[512];
    if (len - sl >= sizeof buf)
      continue;
    memcpy(buf, e->name, len - sl);
    buf[len - sl] = 0;
    if (dtrt_st_find(h->e, h->ne, buf))
      return true;
  }
  return false;
}

static const char *meta_str(const DtStHeader *h, const char *key) {
  const cJSON *j = h->meta ? cJSON_GetObjectItemCaseSensitive(h->meta, key) : NULL;
  return cJSON_IsString(j) ? j->valuestring : NULL;
}

/* The template's tensors as whole ones, zero, with their kinds: params,
 * or optimizer state as the names say, which the params hash confirms. */
static DtStatus template_tensors(DtrtCtx *ctx, const char *tmpl, DtStHeader *h,
                                 DtCkptTensor **out) {
  int fd = -1;
  int64_t size = 0;
  DtStatus s = dtrt_ckpt_verify(ctx, tmpl, NULL);
  if (!s)
    s = dtrt_st_open(ctx, tmpl, &fd, &size);
  if (!s)
    s = dtrt_st_read_header(ctx, tmpl, fd, size, true, h);
  if (fd >= 0)
    close(fd);
  if (!s)
    s = dtrt_st_check_layout(ctx, tmpl, h, "");
  if (!s)
    s = dtrt_st_check_names(ctx, tmpl, h);
  if (s)
    return s;
  for (int k = 0; k < h->ne; k++)
    h->e[k].kind = is_state(h, &h->e[k]) ? DT_G_STATE : DT_G_PARAM;
  const char *phash = meta_str(h, "params_hash");
  char mine[17];
  dtrt_ckpt_hash(h->e, h->ne, true, mine);
  if (phash && strcmp(phash, mine))
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "import: %s: its params are not the tensors without a __m, __v or __acc "
                     "suffix (params hash %s, those give %s)",
                     tmpl, phash, mine);
  DtCkptTensor *x = *out = dtrt_alloc(ctx, (size_t)(h->ne + 1) * sizeof *x);
  if (!x)
    return DT_ERR_NOMEM;
  for (int k = 0; k < h->ne; k++) {
    const DtStEntry *e = &h->e[k];
    x[k] =
        (DtCkptTensor){.name = e->name, .kind = e->kind, .t = {.dtype = e->dtype, .rank = e->rank}};
    memcpy(x[k].t.dim, e->dim, sizeof e->dim);
    if (!(x[k].t.data = dtrt_alloc(ctx, (size_t)(e->end - e->begin) + 1)))
      return DT_ERR_NOMEM;
  }
  return DT_OK;
}

DtStatus dtrt_ckpt_import(DtrtCtx *ctx, const char *out, const char *tmpl, const char *weights) {
  if (!ctx)
    return DT_ERR_ARG;
  if (dtrt_nranks(ctx) > 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "import: runs in one process");
  if (!out || !out[0] || !tmpl || !weights)
    return dtrt_fail(ctx, DT_ERR_ARG, "import: no output, template or weights path");
  DtStHeader h = {0};
  DtCkptTensor *x = NULL, *p = NULL;
  int np = 0;
  DtStatus s = template_tensors(ctx, tmpl, &h, &x);
  if (!s && !(p = dtrt_alloc(ctx, (size_t)(h.ne + 1) * sizeof *p)))
    s = DT_ERR_NOMEM;
  for (int k = 0; !s && k < h.ne; k++)
    if (x[k].kind == DT_G_PARAM)
      p[np++] = x[k];
  if (!s)
    s = dtrt_weights_load(ctx, weights, p, np);
  if (!s) {
    const char *model = meta_str(&h, "model");
    char plan[300];
    snprintf(plan, sizeof plan, "imported: params of %s, optimizer state zero", weights);
    s = dtrt_ckpt_save(ctx, out, x, h.ne, model ? model : "", plan, 0);
  }
  for (int k = 0; x && k < h.ne; k++)
    dtrt_free(ctx, x[k].t.data);
  dtrt_free(ctx, x);
  dtrt_free(ctx, p);
  dtrt_st_header_free(ctx, &h);
  return s;
}
