/* kernels_index.c: torch's functions on indices and integers: arithmetic and
 * comparisons of i32 values (int_elem), i32 to f32 (to_f32), where of i32
 * values (int_where), one_hot, arange, cumsum, tril and triu (gather:
 * kernels_gather.c). Each reads and writes
 * its elements once, on the context's threads when it has PARALLEL_ELEMS or
 * more; an index out of range is an error (DT_ERR_ARG) naming the first one. */
#include <stdio.h>
#include <string.h>

#include "dtrt_int.h"

enum { PARALLEL_ELEMS = 1 << 16 };

static void run_rows(DtrtCtx *ctx, int64_t rows, int64_t elems,
                     void (*body)(void *env, int64_t begin, int64_t end), void *env) {
  if (elems >= PARALLEL_ELEMS && rows > 1)
    dtrt_parallel_for(ctx, rows, body, env);
  else if (rows > 0)
    body(env, 0, rows);
}

/* Row-major strides of dim[0..rank) aligned at the end with out's rank r:
 * 0 along a dim of size 1 (broadcast) or absent. */
static void bstrides(const DtTensor *t, int r, const int64_t *odim, int64_t *st) {
  int64_t s = 1;
  for (int d = r - 1; d >= 0; d--) {
    int k = d - (r - t->rank);
    st[d] = k >= 0 && t->dim[k] == odim[d] && odim[d] != 1 ? s : 0;
    s *= k >= 0 ? t->dim[k] : 1;
  }
}

/* Offset of row q (of rows of the last dim) at strides st over dim[0..r-1). */
static int64_t row_offset(int64_t q, const int64_t *dim, const int64_t *st, int r) {
  int64_t off = 0;
  for (int d = r - 2; d >= 0; d--) {
    off += q % dim[d] * st[d];
    q /= dim[d];
  }
  return off;
}

/* ---- int_elem ---- */

typedef struct IntJob {
  const int32_t *a, *b;
  void *y;
  int fn, r;
  int32_t k;
  bool swap;
  int64_t dim[DT_MAX_RANK], sa[DT_MAX_RANK], sb[DT_MAX_RANK];
  int bad; /* a zero divisor was met */
} IntJob;

/* Python's a // b and a % b (b != 0); INT32_MIN // -1 wraps as torch's. */
static int32_t floordiv(int32_t a, int32_t b) {
  if (b == -1)
    return (int32_t)(0u - (uint32_t)a);
  int32_t q = a / b;
  return q * b != a && (a < 0) != (b < 0) ? q - 1 : q;
}
static int32_t rem(int32_t a, int32_t b) {
  if (b == -1)
    return 0;
  int32_t m = a % b;
  return m != 0 && (m < 0) != (b < 0) ? m + b : m;
}

/* a ** b by squaring, wrapping; a negative b as torch's powi: 1 of 1, 1 or
 * -1 of -1 (b even or odd), 0 of the others. */
static int32_t ipow(int32_t a, int32_t b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
  uint32_t r = 1, x = (uint32_t)a;
  for (; b; b >>= 1, x *= x)
    if (b & 1)
      r *= x;
  return (int32_t)r;
}

/* One row of n results; a and b at strides 0 or 1. Sums and products wrap
 * (in uint32_t, where C's signed overflow is undefined). */
#define INT_LOOP(expr)                                                                             \
  do {                                                                                             \
    if (sa && sb)                                                                                  \
      for (int64_t j = 0; j < n; j++) {                                                            \
        int32_t x = a[j], v = b[j];                                                                \
        out[j] = (expr);                                                                           \
      }                                                                                            \
    else if (sa)                                                                                   \
      for (int64_t j = 0; j < n; j++) {                                                            \
        int32_t x = a[j], v = b[0];                                                                \
        out[j] = (expr);                                                                           \
      }                                                                                            \
    else                                                                                           \
      for (int64_t j = 0; j < n; j++) {                                                            \
        int32_t x = a[0], v = sb ? b[j] : b[0];                                                    \
        out[j] = (expr);                                                                           \
      }                                                                                            \
  } while (0)

static void int_row(int fn, const int32_t *a, int64_t sa, const int32_t *b, int64_t sb, void *y,
                    int64_t n) {
  if (dtrt_int_compares(fn)) {
    float *out = y;
    switch (fn) {
    case DT_INT_GT: INT_LOOP(x > v ? 1.0f : 0.0f); break;
    case DT_INT_GE: INT_LOOP(x >= v ? 1.0f : 0.0f); break;
    case DT_INT_EQ: INT_LOOP(x == v ? 1.0f : 0.0f); break;
    default: INT_LOOP(x != v ? 1.0f : 0.0f); break;
    }
    return;
  }
  int32_t *out = y;
  switch (fn) {
  case DT_INT_ADD: INT_LOOP((int32_t)((uint32_t)x + (uint32_t)v)); break;
  case DT_INT_SUB: INT_LOOP((int32_t)((uint32_t)x - (uint32_t)v)); break;
  case DT_INT_MUL: INT_LOOP((int32_t)((uint32_t)x * (uint32_t)v)); break;
  case DT_INT_FLOORDIV: INT_LOOP(floordiv(x, v)); break;
  case DT_INT_MAX: INT_LOOP(x > v ? x : v); break;
  case DT_INT_MIN: INT_LOOP(x < v ? x : v); break;
  case DT_INT_POW: INT_LOOP(ipow(x, v)); break;
  default: INT_LOOP(rem(x, v)); break;
  }
}

static void int_rows(void *env, int64_t begin, int64_t end) {
  IntJob *j = env;
  int r = j->r;
  int64_t n = r ? j->dim[r - 1] : 1;
  int32_t k = j->k;
  bool div = j->fn == DT_INT_FLOORDIV || j->fn == DT_INT_REM;
  size_t esz = 4;
  for (int64_t q = begin; q < end; q++) {
    const int32_t *a = j->a ? j->a + row_offset(q, j->dim, j->sa, r) : &k;
    const int32_t *b = j->b ? j->b + row_offset(q, j->dim, j->sb, r) : &k;
    int64_t sa = j->a && r ? j->sa[r - 1] : 0, sb = j->b && r ? j->sb[r - 1] : 0;
    if (div)
      for (int64_t i = 0; i < (sb ? n : 1); i++)
        if (b[i] == 0) {
          __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
          return;
        }
    int_row(j->fn, a, sa, b, sb, (char *)j->y + (size_t)(q * n) * esz, n);
  }
}

/* int_elem(a[, b]): i[0] fn (DtIntFn), i[1] k, i[2] swap. Two operands:
 * a fn b, broadcasting; one: a fn k, or k fn a with swap. i32 results,
 * f32 masks (1, 0) for the comparisons. */
DTRT_TRACED(int_elem, DTRT_TID_KERNEL) {
  const char *op = "int_elem";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 2, out, a, 3, 0)) ||
      (s = dtrt_check(ctx, op, "a", &in[0], DTRT_I32)) ||
      (nin > 1 && (s = dtrt_check(ctx, op, "b", &in[1], DTRT_I32))))
    return s;
  int fn = (int)dtrt_ai(a, 0, -1);
  if (fn < 0 || fn >= DT_INT_COUNT)
    return dtrt_fail(ctx, DT_ERR_ARG, "int_elem: unknown function %d", fn);
  int64_t kv = dtrt_ai(a, 1, 0);
  if (kv < INT32_MIN || kv > INT32_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "int_elem: k = %lld does not fit in i32", (long long)kv);
  if ((s = dtrt_check(ctx, op, "output", out, dtrt_int_compares(fn) ? DTRT_F32 : DTRT_I32)))
    return s;
  IntJob j = {.fn = fn, .r = out->rank, .k = (int32_t)kv, .swap = dtrt_ai(a, 2, 0) != 0};
  memcpy(j.dim, out->dim, sizeof j.dim);
  const DtTensor *x = &in[0], *y = nin > 1 ? &in[1] : NULL;
  for (int t = 0; t < nin; t++) {
    const DtTensor *v = &in[t];
    bool ok = v->rank <= out->rank;
    for (int d = 0; ok && d < v->rank; d++) {
      int64_t o = out->dim[out->rank - v->rank + d];
      ok = v->dim[d] == o || v->dim[d] == 1;
    }
    if (!ok) {
      char b1[128], b2[128];
      return dtrt_fail(ctx, DT_ERR_ARG, "int_elem: %s does not broadcast to %s",
                       dtrt_type_str(v->dtype, v->dim, v->rank, b1, sizeof b1),
                       dtrt_type_str(out->dtype, out->dim, out->rank, b2, sizeof b2));
    }
  }
  bstrides(x, j.r, j.dim, j.sa);
  j.a = x->data;
  if (y) {
    bstrides(y, j.r, j.dim, j.sb);
    j.b = y->data;
  } else if (j.swap) {
    j.b = j.a;
    memcpy(j.sb, j.sa, sizeof j.sb);
    j.a = NULL;
  }
  if (!y && !j.swap)
    j.b = NULL;
  if (!y && (fn == DT_INT_FLOORDIV || fn == DT_INT_REM) && !j.swap && j.k == 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "int_elem: integer division by zero");
  int64_t n = dtrt_numel(out), len = j.r ? j.dim[j.r - 1] : 1;
  j.y = out->data;
  run_rows(ctx, len ? n / len : 0, n, int_rows, &j);
  if (j.bad)
    return dtrt_fail(ctx, DT_ERR_ARG, "int_elem: integer division by zero");
  return DT_OK;
}

/* ---- to_f32 ---- */

typedef struct CastJob {
  const int32_t *x;
  float *y;
} CastJob;

static void cast_rows(void *env, int64_t begin, int64_t end) {
  const CastJob *j = env;
  for (int64_t k = begin * 4096; k < end * 4096; k++)
    j->y[k] = (float)j->x[k];
}

/* to_f32(x i32) -> f32, rounded to nearest even past 2^24. */
DTRT_TRACED(to_f32, DTRT_TID_KERNEL) {
  const char *op = "to_f32";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 0, 0)) ||
      (s = dtrt_check(ctx, op, "x", &in[0], DTRT_I32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  int64_t n = dtrt_numel(out), blocks = n / 4096;
  CastJob j = {in[0].data, out->data};
  run_rows(ctx, blocks, n, cast_rows, &j);
  for (int64_t k = blocks * 4096; k < n; k++)
    j.y[k] = (float)j.x[k];
  return DT_OK;
}

/* ---- int_where ---- */

typedef struct WhereJob {
  const float *m;
  const int32_t *x, *y;
  int32_t *out;
  int r;
  int64_t dim[DT_MAX_RANK], sm[DT_MAX_RANK], sx[DT_MAX_RANK], sy[DT_MAX_RANK];
} WhereJob;

/* out[k] = m[k a] != 0 ? x[k b] : y[k c] for k < n. Both values are read,
 * so that the choice is a select and not a branch (a mask at random would
 * mispredict half of them); inlined with each stride the constant 0 or 1
 * (a broadcast operand's or a whole one's along the last dim), the loop
 * vectorises. */
static inline __attribute__((always_inline)) void where_run(const float *m, const int32_t *x,
                                                            const int32_t *y, int32_t *out,
                                                            int64_t n, int64_t a, int64_t b,
                                                            int64_t c) {
  for (int64_t k = 0; k < n; k++) {
    int32_t u = x[k * b], v = y[k * c];
    out[k] = m[k * a] != 0 ? u : v;
  }
}

static void where_rows(void *env, int64_t begin, int64_t end) {
  const WhereJob *j = env;
  int r = j->r;
  int64_t n = r ? j->dim[r - 1] : 1;
  int64_t a = r ? j->sm[r - 1] : 0, b = r ? j->sx[r - 1] : 0, c = r ? j->sy[r - 1] : 0;
  /* bstrides gives the last dim a stride of 0 or 1 */
  for (int64_t q = begin; q < end; q++) {
    const float *m = j->m + row_offset(q, j->dim, j->sm, r);
    const int32_t *x = j->x + row_offset(q, j->dim, j->sx, r);
    const int32_t *y = j->y + row_offset(q, j->dim, j->sy, r);
    int32_t *out = j->out + q * n;
    switch (a << 2 | b << 1 | c) {
    case 0: where_run(m, x, y, out, n, 0, 0, 0); break;
    case 1: where_run(m, x, y, out, n, 0, 0, 1); break;
    case 2: where_run(m, x, y, out, n, 0, 1, 0); break;
    case 3: where_run(m, x, y, out, n, 0, 1, 1); break;
    case 4: where_run(m, x, y, out, n, 1, 0, 0); break;
    case 5: where_run(m, x, y, out, n, 1, 0, 1); break;
    case 6: where_run(m, x, y, out, n, 1, 1, 0); break;
    default: where_run(m, x, y, out, n, 1, 1, 1); break;
    }
  }
}

/* int_where(mask f32, x i32, y i32) -> i32: x where the mask is not 0
 * (NaN included), y elsewhere, the three broadcast to the output's shape. */
DTRT_TRACED(int_where, DTRT_TID_KERNEL) {
  const char *op = "int_where";
  static const char *const what[] = {"mask", "x", "y"};
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 0, 0)) ||
      (s = dtrt_check(ctx, op, "mask", &in[0], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "x", &in[1], DTRT_I32)) ||
      (s = dtrt_check(ctx, op, "y", &in[2], DTRT_I32)) ||
      (s = dtrt_check(ctx, op, "output", out, DTRT_I32)))
    return s;
  for (int t = 0; t < 3; t++) {
    const DtTensor *v = &in[t];
    bool ok = v->rank <= out->rank;
    for (int d = 0; ok && d < v->rank; d++) {
      int64_t o = out->dim[out->rank - v->rank + d];
      ok = v->dim[d] == o || v->dim[d] == 1;
    }
    if (!ok) {
      char b1[128], b2[128];
      return dtrt_fail(ctx, DT_ERR_ARG, "int_where: %s %s does not broadcast to %s", what[t],
                       dtrt_type_str(v->dtype, v->dim, v->rank, b1, sizeof b1),
                       dtrt_type_str(out->dtype, out->dim, out->rank, b2, sizeof b2));
    }
  }
  WhereJob j = {in[0].data, in[1].data, in[2].data, out->data, out->rank, {0}, {0}, {0}, {0}};
  memcpy(j.dim, out->dim, sizeof j.dim);
  bstrides(&in[0], j.r, j.dim, j.sm);
  bstrides(&in[1], j.r, j.dim, j.sx);
  bstrides(&in[2], j.r, j.dim, j.sy);
  int64_t n = dtrt_numel(out), len = j.r ? j.dim[j.r - 1] : 1;
  run_rows(ctx, len ? n / len : 0, n, where_rows, &j);
  return DT_OK;
}

/* ---- one_hot ---- */

typedef struct HotJob {
  const int32_t *id;
  float *y;
  int64_t classes;
  int bad;
} HotJob;

static void hot_rows(void *env, int64_t begin, int64_t end) {
  HotJob *j = env;
  int64_t c = j->classes;
  memset(j->y + begin * c, 0, sizeof(float) * (size_t)((end - begin) * c));
  for (int64_t q = begin; q < end; q++) {
    int64_t v = j->id[q];
    if (v < 0 || v >= c) {
      __atomic_store_n(&j->bad, 1, __ATOMIC_RELAXED);
      return;
    }
    j->y[q * c + v] = 1;
  }
}

/* one_hot(ids i32[...]){classes} -> f32[..., classes]: 1 at each id, 0
 * elsewhere. */
DTRT_TRACED(one_hot, DTRT_TID_KERNEL) {
  const char *op = "one_hot";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, "ids", &in[0], DTRT_I32)))
    return s;
  int r = in[0].rank;
  int64_t c = dtrt_ai(a, 0, 0), dim[DT_MAX_RANK + 1];
  if (c < 1 || r >= DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_ARG, "one_hot: needs classes >= 1 and ids of rank below %d",
                     DT_MAX_RANK);
  memcpy(dim, in[0].dim, sizeof(int64_t) * (size_t)r);
  dim[r] = c;
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, r + 1)))
    return s;
  HotJob j = {in[0].data, out->data, c, 0};
  int64_t n = dtrt_numel(&in[0]);
  run_rows(ctx, n, n * c, hot_rows, &j);
  if (!j.bad)
    return DT_OK;
  const int32_t *v = in[0].data;
  int64_t k = 0;
  while (v[k] >= 0 && v[k] < c)
    k++;
  return dtrt_fail(ctx, DT_ERR_ARG, "one_hot: class %d is outside [0, %lld) (element %lld)", v[k],
                   (long long)c, (long long)k);
}

/* ---- arange ---- */

/* arange(){size, start, step, i32}: [size], element k start + k step,
 * computed in double and rounded to f32, or in int64 and taken as i32
 * (the compiler keeps it within i32). f[0] start, f[1] step, i[0] size,
 * i[1] i32. */
DTRT_TRACED(arange, DTRT_TID_KERNEL) {
  const char *op = "arange";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in ? in : out, nin, 0, 0, out, a, 2, 2)))
    return s;
  bool i32 = dtrt_ai(a, 1, 0) != 0;
  int64_t n = dtrt_ai(a, 0, 0);
  if ((s = dtrt_check_as(ctx, op, "output", out, i32 ? DTRT_I32 : DTRT_F32, &n, 1)))
    return s;
  double start = dtrt_af(a, 0, 0), step = dtrt_af(a, 1, 1);
  if (i32) {
    int32_t *y = out->data;
    for (int64_t k = 0; k < n; k++)
      y[k] = (int32_t)((int64_t)start + k * (int64_t)step);
  } else {
    float *y = out->data;
    for (int64_t k = 0; k < n; k++)
      y[k] = (float)(start + (double)k * step);
  }
  return DT_OK;
}

/* ---- cumsum ---- */

typedef struct CumJob {
  const void *x;
  void *y;
  int64_t len, inner;
  bool reverse, i32;
} CumJob;

/* Block o of [outer, len, inner]: rows along the axis added in order (from
 * the end with reverse), each row in f32 (i32 wrapping) onto the last. */
static void cum_blocks(void *env, int64_t begin, int64_t end) {
  const CumJob *j = env;
  int64_t len = j->len, in = j->inner;
  for (int64_t o = begin; o < end; o++)
    for (int64_t t = 0; t < len; t++) {
      int64_t k = j->reverse ? len - 1 - t : t, prev = !t ? k : j->reverse ? k + 1 : k - 1;
      size_t at = (size_t)((o * len + k) * in), pa = (size_t)((o * len + prev) * in);
      if (!t) {
        memcpy((char *)j->y + 4 * at, (const char *)j->x + 4 * at, 4 * (size_t)in);
      } else if (j->i32) {
        const int32_t *x = (const int32_t *)j->x + at;
        int32_t *y = (int32_t *)j->y + at, *p = (int32_t *)j->y + pa;
        for (int64_t i = 0; i < in; i++)
          y[i] = (int32_t)((uint32_t)p[i] + (uint32_t)x[i]);
      } else {
        const float *x = (const float *)j->x + at;
        float *y = (float *)j->y + at, *p = (float *)j->y + pa;
        for (int64_t i = 0; i < in; i++)
          y[i] = p[i] + x[i];
      }
    }
}

/* cumsum(x){axis, reverse}: y[..k..] = x[..0..] + ... + x[..k..] along axis,
 * added in that order in the type of x (f32 or i32, wrapping); with reverse
 * from the end, y[..k..] = x[..k..] + ... + x[..n-1..] (cumsum's derivative).
 * i[0] axis, i[1] reverse. */
DTRT_TRACED(cumsum, DTRT_TID_KERNEL) {
  const char *op = "cumsum";
  DtStatus s;
  int ax;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 2, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, in[0].dim, in[0].rank)) ||
      (s = dtrt_axis(ctx, op, dtrt_ai(a, 0, 0), in[0].rank, &ax)))
    return s;
  CumJob j = {
      in[0].data, out->data, in[0].dim[ax], 1, dtrt_ai(a, 1, 0) != 0, in[0].dtype == DTRT_I32};
  int64_t outer = 1;
  for (int d = 0; d < ax; d++)
    outer *= in[0].dim[d];
  for (int d = ax + 1; d < in[0].rank; d++)
    j.inner *= in[0].dim[d];
  run_rows(ctx, j.len && j.inner ? outer : 0, dtrt_numel(out), cum_blocks, &j);
  return DT_OK;
}

/* ---- tril, triu ---- */

typedef struct TriJob {
  const uint32_t *x;
  uint32_t *y;
  int64_t rows, cols, diag;
  bool upper;
} TriJob;

static void tri_rows(void *env, int64_t begin, int64_t end) {
  const TriJob *j = env;
  int64_t c = j->cols;
  for (int64_t q = begin; q < end; q++) {
    /* tril keeps columns [0, i + diag], triu [i + diag, c): two plain loops */
    int64_t i = q % j->rows, cut = i + j->diag + (j->upper ? 0 : 1);
    cut = cut < 0 ? 0 : cut > c ? c : cut;
    const uint32_t *x = j->x + q * c;
    uint32_t *y = j->y + q * c;
    int64_t keep0 = j->upper ? cut : 0, keep1 = j->upper ? c : cut;
    memset(y, 0, 4 * (size_t)keep0);
    memcpy(y + keep0, x + keep0, 4 * (size_t)(keep1 - keep0));
    memset(y + keep1, 0, 4 * (size_t)(c - keep1));
  }
}

static DtStatus tri(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, DtTensor *out,
                    const DtAttrs *a, bool upper) {
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, in[0].dim, in[0].rank)))
    return s;
  int r = in[0].rank;
  if (r < 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: input needs rank 2 or more, got %d", op, r);
  TriJob j = {in[0].data, out->data, in[0].dim[r - 2], in[0].dim[r - 1], dtrt_ai(a, 0, 0), upper};
  int64_t n = dtrt_numel(&in[0]);
  run_rows(ctx, j.cols ? n / j.cols : 0, n, tri_rows, &j);
  return DT_OK;
}

/* tril(x[..., r, c]){diagonal}: element (i, j) kept where j <= i + diagonal,
 * 0 elsewhere; triu where j >= i + diagonal. f32 or i32; i[0] diagonal. Each
 * is its own derivative. */
DTRT_TRACED(tril, DTRT_TID_KERNEL) { return tri(ctx, "tril", in, nin, out, a, false); }
DTRT_TRACED(triu, DTRT_TID_KERNEL) { return tri(ctx, "triu", in, nin, out, a, true); }
