/* kernels_bag.c: torch's embedding_bag and its derivatives: bags of rows of
 * a table pooled by sum, mean or max (operands and attributes in dtrt.h),
 * the weight's gradient dense [R, D] or sparse (the touched rows, sorted,
 * and their values). The forward and the per-sample weights' gradient split
 * the bags over threads; the weight's gradients split the rows, each thread
 * adding into its own rows in bag order, so the bits never depend on the
 * threads. A weight may be a block of rows of a larger table (attribute
 * `at` = [R, lo], a row-wise split): ids are checked against R, and an id
 * outside the block is a zero row, so the devices' results add up to the
 * whole table's (mean divides by every entry of the bag, as one device). */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

/* Bags times D below which a kernel runs on the calling thread alone. */
enum { BAG_PARALLEL = 1 << 15, LANES = 8 };

/* The operands of one call, checked. */
typedef struct Bag {
  const int32_t *id, *off;   /* off NULL: bag b is input row b, k entries */
  const float *w, *psw, *dy; /* psw NULL: none; dy: the _grad ops' adjoint */
  float *y;                  /* the result */
  const int64_t *arg;        /* max's backward: the entry of each (bag, column) */
  const int32_t *touched;    /* sparse_values: the rows, sorted, then -1s */
  int64_t ntouched;          /* how many of them are rows */
  int64_t n, k, b, rows, d, parts;
  int64_t lo, nloc;          /* the weight: rows [lo, lo + nloc) of the table */
  int64_t pad; /* padding_idx; none: INT64_MIN */
  int mode;
} Bag;

/* Entries [*lo, *hi) of input make bag b. */
static void span(const Bag *g, int64_t b, int64_t *lo, int64_t *hi) {
  if (!g->off) {
    *lo = b * g->k;
    *hi = *lo + g->k;
    return;
  }
  *lo = g->off[b];
  *hi = b + 1 < g->b ? g->off[b + 1] : g->n;
}

/* The entries of bag b that count: those not padding_idx. */
static int64_t count(const Bag *g, int64_t b) {
  int64_t lo, hi, c = 0;
  span(g, b, &lo, &hi);
  for (int64_t j = lo; j < hi; j++)
    c += g->id[j] != g->pad;
  return c;
}

/* Entry j's row in the weight: its id less the block's first row; -1 for
 * padding and for ids outside the block. */
static inline int64_t row_of(const Bag *g, int64_t j) {
  int64_t r = (int64_t)g->id[j] - g->lo;
  return g->id[j] == g->pad || r < 0 || r >= g->nloc ? -1 : r;
}

/* "OP: table 'NAME'" (or "OP" when the table has no name) into buf. */
static const char *where(const char *op, const DtAttrs *a, char *buf, size_t n) {
  if (a && a->s && a->s[0])
    snprintf(buf, n, "%s: table '%s'", op, a->s);
  else
    snprintf(buf, n, "%s", op);
  return buf;
}

/* Offsets start at 0, never decrease and stay within the input; every id
 * but padding_idx lies in [0, rows). */
static DtStatus check_ids(DtrtCtx *ctx, const char *at, const Bag *g) {
  if (g->off && g->b && g->off[0] != 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: offsets[0] is %d; the first bag must start at 0", at,
                     (int)g->off[0]);
  for (int64_t b = 1; g->off && b < g->b; b++)
    if (g->off[b] < g->off[b - 1])
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "%s: offsets[%lld] = %d is less than offsets[%lld] = %d; offsets must "
                       "not decrease",
                       at, (long long)b, (int)g->off[b], (long long)(b - 1), (int)g->off[b - 1]);
  if (g->off && g->b && g->off[g->b - 1] > g->n)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: offsets[%lld] = %d is past the input's end, %lld", at,
                     (long long)(g->b - 1), (int)g->off[g->b - 1], (long long)g->n);
  for (int64_t b = 0; b < g->b; b++) {
    int64_t lo, hi;
    span(g, b, &lo, &hi);
    for (int64_t j = lo; j < hi; j++)
      if (g->id[j] != g->pad && (g->id[j] < 0 || g->id[j] >= g->rows))
        return dtrt_fail(ctx, DT_ERR_ARG,
                         "%s: batch row %lld has id %d (input entry %lld), outside [0, %lld)", at,
                         (long long)b, (int)g->id[j], (long long)j, (long long)g->rows);
  }
  return DT_OK;
}

/* What a kernel computes, for begin: the forward, the weight's dense
 * gradient, per_sample_weights' gradient, the touched rows, their values. */
typedef enum { FWD, GRAD, PSW, ROWS, VALUES } Kind;

/* The common entry: operands (GRAD, PSW: dy last; VALUES: dy, then the
 * rows; PSW: per_sample_weights required), attributes and ids, into g. */
static DtStatus begin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                      const DtTensor *out, const DtAttrs *a, Kind kind, Bag *g) {
  DtStatus s;
  char at[192];
  bool psw = kind == PSW;
  int extra = kind == GRAD || kind == PSW ? 1 : kind == VALUES ? 2 : 0;
  where(op, a, at, sizeof at);
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2 + extra, 4 + extra, out, a, 4, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_I32)) ||
      (s = dtrt_check(ctx, op, "weight", &in[1], DTRT_F32)))
    return s;
  const DtTensor *x = &in[0], *w = &in[1];
  if (x->rank != 1 && x->rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: input needs rank 2 [B, K], or 1 with offsets; got %d",
                     op, (int)x->rank);
  if (w->rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: weight needs rank 2 [R, D], got %d", op, (int)w->rank);
  int base = x->rank == 2 ? 2 : 3, npsw = nin - extra - base;
  if (npsw < (psw ? 1 : 0) || npsw > 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d operands do not fit an input of rank %d%s", op, nin,
                     (int)x->rank, psw ? " and per_sample_weights" : "");
  *g = (Bag){.id = x->data, .w = w->data, .n = dtrt_numel(x), .d = w->dim[1]};
  g->rows = g->nloc = w->dim[0];
  g->mode = (int)dtrt_ai(a, 0, -1);
  g->pad = dtrt_ai(a, 1, -1);
  if (dtrt_ni(a) == 4) { /* at = [R, lo]: a block of rows */
    g->rows = a->i[2];
    g->lo = a->i[3];
    if (g->lo < 0 || g->lo + g->nloc > g->rows)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: rows [%lld, %lld) are not a block of a table of %lld",
                       at, (long long)g->lo, (long long)(g->lo + g->nloc), (long long)g->rows);
    if (g->mode == DT_BAG_MAX)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: a block of rows needs mode sum or mean, not max", at);
  }
  if (g->mode < 0 || g->mode >= DT_BAG_COUNT)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: mode %lld is not one of sum (0), mean (1), max (2)", op,
                     (long long)dtrt_ai(a, 0, -1));
  if (g->pad < -1 || g->pad >= g->rows)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: padding_idx %lld is outside [0, %lld)", op,
                     (long long)g->pad, (long long)g->rows);
  if (g->pad < 0)
    g->pad = INT64_MIN; /* no id equals it */
  if (npsw && g->mode != DT_BAG_SUM)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: per_sample_weights need mode sum, not %s", op,
                     dtrt_bag_mode_names[g->mode]);
  if (x->rank == 2) {
    g->b = x->dim[0];
    g->k = x->dim[1];
  } else {
    if ((s = dtrt_check(ctx, op, "offsets", &in[2], DTRT_I32)))
      return s;
    if (in[2].rank != 1)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: offsets need rank 1 [B], got %d", op, (int)in[2].rank);
    g->off = in[2].data;
    g->b = in[2].dim[0];
  }
  if (npsw) {
    if ((s = dtrt_check_as(ctx, op, "per_sample_weights", &in[base], DTRT_F32, x->dim, x->rank)))
      return s;
    g->psw = in[base].data;
  }
  int64_t bd[2] = {g->b, g->d}, xd[DT_MAX_RANK] = {x->dim[0], x->dim[1], g->d};
  xd[x->rank] = g->d;
  if (extra) {
    if ((s = dtrt_check_as(ctx, op, "dy", &in[nin - extra], DTRT_F32, bd, 2)))
      return s;
    g->dy = in[nin - extra].data;
  }
  if (kind == VALUES) {
    if ((s = dtrt_check_as(ctx, op, "rows", &in[nin - 1], DTRT_I32, x->dim, x->rank)))
      return s;
    g->touched = in[nin - 1].data;
  }
  if ((kind == ROWS || kind == VALUES) && g->mode == DT_BAG_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: a sparse gradient needs mode sum or mean, not max", at);
  if (kind == ROWS) {
    if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_I32, x->dim, x->rank)))
      return s;
  } else {
    const int64_t *od = psw ? x->dim : kind == GRAD ? w->dim : kind == VALUES ? xd : bd;
    int orank = psw ? x->rank : kind == VALUES ? x->rank + 1 : 2;
    if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, od, orank)))
      return s;
  }
  g->y = out->data;
  return check_ids(ctx, at, g);
}

/* body over [0, n) on the pool when the work (elements touched) is large. */
static void run(DtrtCtx *ctx, int64_t n, int64_t work, void (*body)(void *, int64_t, int64_t),
                void *env) {
  if (work >= BAG_PARALLEL && n > 1)
    dtrt_parallel_for(ctx, n, body, env);
  else if (n > 0)
    body(env, 0, n);
}

/* y = max(y, v) element by element; NaN counts as larger than everything
 * (dtc's max), so it stays once there. */
static inline int takes(float v, float y) { return (v > y) | ((v != v) & (y == y)); }

static void max_into(float *restrict y, const float *restrict v, int64_t d) {
  for (int64_t c = 0; c < d; c++)
    y[c] = takes(v[c], y[c]) ? v[c] : y[c];
}

/* Entries ahead of the one being added whose rows are fetched. */
enum { AHEAD = 16 };

static void forward_bags(void *env, int64_t b0, int64_t b1) {
  const Bag *g = env;
  int64_t d = g->d;
  for (int64_t b = b0; b < b1; b++) {
    float *restrict y = g->y + b * d;
    int64_t lo, hi, cnt = 0;
    memset(y, 0, (size_t)d * sizeof(float));
    span(g, b, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
      int64_t ahead = j + AHEAD < g->n ? row_of(g, j + AHEAD) : -1;
      if (ahead >= 0)
        dtrt_prefetch(g->w + ahead * d, d * (int64_t)sizeof(float));
      int64_t row = row_of(g, j);
      if (row < 0) {
        cnt += g->id[j] != g->pad; /* another block's row: counted, not added */
        continue;
      }
      const float *restrict r = g->w + row * d;
      if (g->mode == DT_BAG_MAX && !cnt)
        memcpy(y, r, (size_t)d * sizeof(float));
      else if (g->mode == DT_BAG_MAX)
        max_into(y, r, d);
      else if (g->psw)
        for (int64_t c = 0; c < d; c++)
          y[c] += g->psw[j] * r[c];
      else
        for (int64_t c = 0; c < d; c++)
          y[c] += r[c];
      cnt++;
    }
    if (g->mode == DT_BAG_MEAN && cnt > 1)
      for (int64_t c = 0; c < d; c++)
        y[c] /= (float)cnt;
  }
}

DTRT_TRACED(embedding_bag, DTRT_TID_KERNEL) {
  Bag g;
  DtStatus s = begin(ctx, "embedding_bag", in, nin, out, a, FWD, &g);
  if (!s)
    run(ctx, g.b, g.n * g.d, forward_bags, &g);
  return s;
}

/* max's backward: arg[b d + c], the first entry of bag b holding the bag's
 * maximum in column c (the first NaN when there is one), -1 when empty. */
static void argmax_bags(void *env, int64_t b0, int64_t b1) {
  enum { COLS = 256 }; /* columns whose maxima so far stay on the stack */
  const Bag *g = env;
  int64_t d = g->d;
  for (int64_t b = b0; b < b1; b++) {
    int64_t lo, hi, first;
    span(g, b, &lo, &hi);
    for (first = lo; first < hi && g->id[first] == g->pad;)
      first++;
    for (int64_t c0 = 0; c0 < d; c0 += COLS) {
      int64_t nc = d - c0 < COLS ? d - c0 : COLS, *ab = (int64_t *)g->arg + b * d + c0;
      float best[COLS];
      int32_t at[COLS]; /* entries after the first (a bag holds at most INT32_MAX) */
      if (first < hi)
        memcpy(best, g->w + g->id[first] * d + c0, (size_t)nc * sizeof(float));
      memset(at, 0, sizeof at);
      for (int64_t j = first + 1; j < hi; j++) {
        if (g->id[j] == g->pad)
          continue;
        const float *restrict r = g->w + g->id[j] * d + c0;
        int32_t e = (int32_t)(j - first);
        for (int64_t c = 0; c < nc; c++) {
          int t = takes(r[c], best[c]);
          best[c] = t ? r[c] : best[c];
          at[c] = t ? e : at[c];
        }
      }
      for (int64_t c = 0; c < nc; c++)
        ab[c] = first < hi ? first + at[c] : -1;
    }
  }
}

/* Rows [rows p / parts, rows (p+1) / parts) of the weight's gradient for
 * each part p: zeroed, then each bag's contributions to them in bag order. */
/* Entry j's share of bag b's adjoint dy added to its row y: weighted by
 * its per-sample weight, or divided by the bag's count cnt (mean), or as
 * is; the dense gradient and sparse_values add it alike, so the same bits. */
static inline void add_row(const Bag *g, int64_t j, float cnt, const float *restrict dy,
                           float *restrict y) {
  if (g->psw)
    for (int64_t c = 0; c < g->d; c++)
      y[c] += g->psw[j] * dy[c];
  else if (g->mode == DT_BAG_MEAN)
    for (int64_t c = 0; c < g->d; c++)
      y[c] += dy[c] / cnt;
  else
    for (int64_t c = 0; c < g->d; c++)
      y[c] += dy[c];
}

static void grad_rows(void *env, int64_t p0, int64_t p1) {
  const Bag *g = env;
  int64_t d = g->d;
  for (int64_t p = p0; p < p1; p++) {
    int64_t r0 = g->nloc * p / g->parts, r1 = g->nloc * (p + 1) / g->parts;
    memset(g->y + r0 * d, 0, (size_t)((r1 - r0) * d) * sizeof(float));
    for (int64_t b = 0; b < g->b; b++) {
      const float *restrict dy = g->dy + b * d;
      if (g->mode == DT_BAG_MAX) {
        for (int64_t c = 0; c < d; c++) {
          int64_t j = g->arg[b * d + c], id = j < 0 ? -1 : g->id[j];
          if (id >= r0 && id < r1)
            g->y[id * d + c] += dy[c];
        }
        continue;
      }
      int64_t lo, hi;
      float cnt = g->mode == DT_BAG_MEAN ? (float)count(g, b) : 1;
      span(g, b, &lo, &hi);
      for (int64_t j = lo; j < hi; j++) {
        int64_t row = row_of(g, j);
        if (row < r0 || row >= r1)
          continue;
        add_row(g, j, cnt, dy, g->y + row * d);
      }
    }
  }
}

static int64_t argmax_bytes(int64_t b, int64_t d) { return b * d * (int64_t)sizeof(int64_t); }

DTRT_TRACED(embedding_bag_grad, DTRT_TID_KERNEL) {
  Bag g;
  DtStatus s = begin(ctx, "embedding_bag_grad", in, nin, out, a, GRAD, &g);
  if (s)
    return s;
  int64_t work = g.n * g.d + g.nloc * g.d;
  void *arg = NULL;
  for (int64_t b = 0; g.mode == DT_BAG_MAX && b < g.b; b++) {
    int64_t lo, hi;
    span(&g, b, &lo, &hi);
    if (hi - lo > INT32_MAX) /* argmax_bags counts a bag's entries in int32 */
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "embedding_bag_grad: bag %lld holds %lld entries; max "
                       "takes at most %d",
                       (long long)b, (long long)(hi - lo), INT32_MAX);
  }
  if (g.mode == DT_BAG_MAX && g.b > 0 && g.d > 0) {
    if (!(arg = dtrt_alloc(ctx, (size_t)argmax_bytes(g.b, g.d))))
      return DT_ERR_NOMEM;
    g.arg = arg;
    run(ctx, g.b, g.n * g.d, argmax_bags, &g);
  }
  g.parts = work >= BAG_PARALLEL ? dtrt_threads(ctx) : 1;
  if (g.parts > g.nloc)
    g.parts = g.nloc > 0 ? g.nloc : 1;
  if (g.parts > 1)
    dtrt_parallel_for(ctx, g.parts, grad_rows, &g);
  else
    grad_rows(&g, 0, 1);
  dtrt_free(ctx, arg);
  return DT_OK;
}

static void psw_grad_bags(void *env, int64_t b0, int64_t b1) {
  const Bag *g = env;
  for (int64_t b = b0; b < b1; b++) {
    int64_t lo, hi;
    span(g, b, &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
      int64_t row = row_of(g, j);
      g->y[j] = row < 0 ? 0 : (float)dtrt_dot_lanes(g->dy + b * g->d, g->w + row * g->d, g->d);
    }
  }
}

DTRT_TRACED(embedding_bag_psw_grad, DTRT_TID_KERNEL) {
  Bag g;
  DtStatus s = begin(ctx, "embedding_bag_psw_grad", in, nin, out, a, PSW, &g);
  if (s)
    return s;
  run(ctx, g.b, g.n * g.d, psw_grad_bags, &g);
  return DT_OK;
}

/* ---- the sparse gradient ---- */

/* Sorts a[0, n) of ids in [0, 2^31) whose bits above shift + 8 are equal:
 * in place, by the byte at shift (an American flag sort), short runs by
 * insertion; at most four levels deep. */
static void sort_ids(int32_t *a, int64_t n, int shift) {
  if (n < 32) {
    for (int64_t i = 1; i < n; i++) {
      int32_t x = a[i];
      int64_t j = i;
      for (; j > 0 && a[j - 1] > x; j--)
        a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  int64_t count[256] = {0}, head[256], tail[256];
  for (int64_t i = 0; i < n; i++)
    count[(a[i] >> shift) & 255]++;
  for (int64_t b = 0, at = 0; b < 256; at += count[b], b++)
    head[b] = at, tail[b] = at + count[b];
  for (int b = 0; b < 256; b++)
    while (head[b] < tail[b]) {
      int32_t x = a[head[b]];
      int c = (x >> shift) & 255;
      while (c != b) { /* x belongs in bucket c: put it there, take what it displaces */
        int32_t y = a[head[c]];
        a[head[c]++] = x;
        x = y, c = (x >> shift) & 255;
      }
      a[head[b]++] = x;
    }
  for (int64_t b = 0, at = 0; shift > 0 && b < 256; at += count[b], b++)
    if (count[b] > 1)
      sort_ids(a + at, count[b], shift - 8);
}

/* The ids but padding_idx, sorted, each once, then -1 to the input's end;
 * of a block of rows, those in the block, as rows of the block. */
DTRT_TRACED(sparse_rows, DTRT_TID_KERNEL) {
  Bag g;
  DtStatus s = begin(ctx, "sparse_rows", in, nin, out, a, ROWS, &g);
  if (s)
    return s;
  int32_t *r = (int32_t *)g.y;
  int64_t n = 0, u = 0;
  for (int64_t j = 0; j < g.n; j++)
    if (row_of(&g, j) >= 0)
      r[n++] = (int32_t)row_of(&g, j);
  int32_t most = 0;
  for (int64_t j = 0; j < n; j++)
    most = r[j] > most ? r[j] : most;
  int shift = 0;
  while (shift < 24 && most >> shift > 255)
    shift += 8;
  sort_ids(r, n, shift);
  for (int64_t j = 0; j < n; j++)
    if (!u || r[j] != r[u - 1])
      r[u++] = r[j];
  for (int64_t j = u; j < g.n; j++)
    r[j] = -1;
  return DT_OK;
}

/* The place of row id among the touched rows (sorted, all there). */
static int64_t place(const Bag *g, int32_t id) {
  const int32_t *t = g->touched;
  int64_t lo = 0;
  for (int64_t n = g->ntouched; n > 1; n -= n / 2) /* a select, not a branch, a step */
    lo = t[lo + n / 2] <= id ? lo + n / 2 : lo;
  return lo;
}

/* Places [u p / parts, u (p+1) / parts) of the values for each part p:
 * zeroed, then each bag's contributions to them in bag order, as grad_rows
 * adds them to the dense gradient. */
static void value_rows(void *env, int64_t p0, int64_t p1) {
  const Bag *g = env;
  int64_t d = g->d, u = g->ntouched;
  for (int64_t p = p0; p < p1; p++) {
    int64_t s0 = u * p / g->parts, s1 = u * (p + 1) / g->parts;
    if (s0 == s1)
      continue;
    int32_t lo = g->touched[s0], hi = g->touched[s1 - 1];
    memset(g->y + s0 * d, 0, (size_t)((s1 - s0) * d) * sizeof(float));
    for (int64_t b = 0; b < g->b; b++) {
      const float *restrict dy = g->dy + b * d;
      int64_t j0, j1;
      float cnt = g->mode == DT_BAG_MEAN ? (float)count(g, b) : 1;
      span(g, b, &j0, &j1);
      for (int64_t j = j0; j < j1; j++) {
        int64_t row = row_of(g, j);
        if (row < lo || row > hi)
          continue;
        add_row(g, j, cnt, dy, g->y + place(g, (int32_t)row) * d);
      }
    }
  }
}

/* The gradient's values: row k of the result for the k-th touched row, zeros
 * where the rows hold -1. The rows must be sparse_rows' of the same input. */
DTRT_TRACED(sparse_values, DTRT_TID_KERNEL) {
  Bag g;
  DtStatus s = begin(ctx, "sparse_values", in, nin, out, a, VALUES, &g);
  if (s)
    return s;
  while (g.ntouched < g.n && g.touched[g.ntouched] >= 0)
    g.ntouched++;
  for (int64_t k = 0; k < g.ntouched; k++)
    if (g.touched[k] >= g.nloc || (k && g.touched[k] <= g.touched[k - 1]))
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "sparse_values: rows[%lld] = %d is not a row of [0, %lld) above the one "
                       "before; the rows must be sparse_rows' of the same input",
                       (long long)k, (int)g.touched[k], (long long)g.nloc);
  for (int64_t j = 0; j < g.n; j++) {
    int64_t row = row_of(&g, j);
    if (row >= 0 && (!g.ntouched || g.touched[place(&g, (int32_t)row)] != row))
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "sparse_values: id %d (input entry %lld) is not among the rows; the rows "
                       "must be sparse_rows' of the same input",
                       (int)g.id[j], (long long)j);
  }
  memset(g.y + g.ntouched * g.d, 0, (size_t)((g.n - g.ntouched) * g.d) * sizeof(float));
  int64_t work = g.n * g.d;
  g.parts = work >= BAG_PARALLEL ? dtrt_threads(ctx) : 1;
  if (g.parts > g.ntouched)
    g.parts = g.ntouched > 0 ? g.ntouched : 1;
  if (g.parts > 1)
    dtrt_parallel_for(ctx, g.parts, value_rows, &g);
  else
    value_rows(&g, 0, 1);
  return DT_OK;
}

/* dtrt_staged_bytes of embedding_bag_grad: max's arg-maxima. */
int64_t dtrt_bag_staged(const DtTensor *in, int nin, const DtAttrs *a) {
  if (dtrt_ai(a, 0, -1) != DT_BAG_MAX || nin < 3 || in[1].rank != 2)
    return 0;
  const DtTensor *bags = in[0].rank == 2 ? &in[0] : &in[2];
  return bags->rank >= 1 ? argmax_bytes(bags->dim[0], in[1].dim[1]) : 0;
}
