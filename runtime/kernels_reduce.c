/* kernels_reduce.c: sum, mean and max over a set of axes, and the gradient of max.
 *
 * Attributes (schema "axes:ints,keepdim:int?"): a->i holds the axes and then,
 * when present, keepdim. The count of axes is not stored; it follows from the
 * rank r of the full tensor and the rank ro of the reduced one:
 *   no keepdim:  ni axes,     ro = r - ni
 *   keepdim 0:   ni - 1 axes, ro = r - (ni - 1), a->i[ni-1] == 0
 *   keepdim 1:   ni - 1 axes, ro = r,            a->i[ni-1] == 1
 * These never disagree on a rank. An empty axes list means every axis. Negative
 * axes count from the end; an axis may appear once.
 *
 * Plan: dims of size 1 are dropped, neighbours that are both reduced or both
 * kept merge into one group, and the input is walked once in memory order. The
 * last group is either a contiguous run reduced into one output (fast path for
 * reductions over trailing axes) or a contiguous run added into as many outputs
 * (the rows of the reduced group before it a few at a time: add_rows).
 * A large sum is cut along the first group into SUM_CHUNKS pieces run on the
 * thread pool; when that group is reduced each piece sums into its own
 * partial outputs, added in piece order, so the result does not depend on
 * the thread count. */
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

typedef struct Plan {
  int n;                          /* groups */
  int64_t len[DT_MAX_RANK];
  int64_t ostride[DT_MAX_RANK];   /* in the output; 0 for reduced groups */
  bool red[DT_MAX_RANK];
  int64_t total;                  /* input elements */
  int64_t count;                  /* input elements per output element */
} Plan;

enum { R_SUM, R_MAX, R_ARGMAX };

/* Decodes the attributes for x (full) and y (reduced: its shape), checks y's
 * shape and builds the plan. */
static DtStatus plan(DtrtCtx *ctx, const char *op, const DtTensor *x, const DtTensor *y,
                     const DtAttrs *a, Plan *p) {
  int r = x->rank, ro = y->rank, ni = dtrt_ni(a), naxes, keep;
  int64_t last = ni ? a->i[ni - 1] : -1;
  if (ro == (ni ? r - ni : 0))
    naxes = ni, keep = 0;
  else if (ni >= 1 && last == 0 && ro == (ni > 1 ? r - ni + 1 : 0))
    naxes = ni - 1, keep = 0;
  else if (ni >= 1 && last == 1 && ro == r)
    naxes = ni - 1, keep = 1;
  else
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: %d int attributes do not describe a reduction from rank %d to %d",
                     op, ni, r, ro);

  bool red[DT_MAX_RANK] = {false};
  for (int k = 0; k < naxes; k++) {
    int ax;
    DtStatus s = dtrt_axis(ctx, op, a->i[k], r, &ax);
    if (s)
      return s;
    if (red[ax])
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: axis %d listed twice", op, ax);
    red[ax] = true;
  }
  if (naxes == 0)
    for (int k = 0; k < r; k++)
      red[k] = true;

  int64_t want[DT_MAX_RANK];
  int nw = 0;
  for (int k = 0; k < r; k++)
    if (!red[k] || keep)
      want[nw++] = red[k] ? 1 : x->dim[k];
  bool same = nw == ro;
  for (int k = 0; same && k < ro; k++)
    same = y->dim[k] == want[k];
  if (!same) {
    char got[128], exp[128];
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: reduced tensor is %s, expected %s", op,
                     dtrt_type_str(y->dtype, y->dim, ro, got, sizeof got),
                     dtrt_type_str(y->dtype, want, nw, exp, sizeof exp));
  }

  memset(p, 0, sizeof *p);
  p->total = dtrt_numel(x);
  p->count = 1;
  for (int k = 0; k < r; k++) {
    if (red[k])
      p->count *= x->dim[k];
    if (x->dim[k] == 1)
      continue;
    if (p->n && p->red[p->n - 1] == red[k]) {
      p->len[p->n - 1] *= x->dim[k];
    } else {
      p->len[p->n] = x->dim[k];
      p->red[p->n++] = red[k];
    }
  }
  if (p->n == 0)
    p->len[p->n++] = 1;
  int64_t st = 1;
  for (int k = p->n - 1; k >= 0; k--)
    if (!p->red[k]) {
      p->ostride[k] = st;
      st *= p->len[k];
    }
  return DT_OK;
}

/* NaN counts as larger than everything, so it propagates; among equals the
 * first in memory order wins. */
static inline bool better(float v, float m) { return v > m || (v != v && m == m); }

/* The sum of x[0 .. n) in eight sums side by side: one chain of dependent
 * adds took 4 cycles an element. */
static double sum_row(const float *x, int64_t n) {
  double s8[8] = {0}, s = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++)
      s8[k] += x[j + k];
  for (; j < n; j++)
    s += x[j];
  for (int k = 0; k < 8; k++)
    s += s8[k];
  return s;
}

/* The same of the products x[j] y[j], each rounded to f32 first, as a mul
 * op would have stored it: the bits of sum_row over that stored product. */
static double dot_row(const float *x, const float *y, int64_t n) {
  double s8[8] = {0}, s = 0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; k++) {
      float t = x[j + k] * y[j + k];
      s8[k] += t;
    }
  for (; j < n; j++) {
    float t = x[j] * y[j];
    s += t;
  }
  for (int k = 0; k < 8; k++)
    s += s8[k];
  return s;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* sum_row (y NULL) or dot_row with the eight sums as the lanes of one
 * register: the same adds in the same order, so the same bits. */
__attribute__((target("avx512f"))) static double row_avx512(const float *x, const float *y,
                                                            int64_t n) {
  __m512d acc = _mm512_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_loadu_ps(x + j);
    if (y)
      v = _mm256_mul_ps(v, _mm256_loadu_ps(y + j));
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(v));
  }
  double s8[8], s = 0;
  _mm512_storeu_pd(s8, acc);
  for (; j < n; j++) {
    float t = y ? x[j] * y[j] : x[j];
    s += t;
  }
  for (int k = 0; k < 8; k++)
    s += s8[k];
  return s;
}

static double row_sum(const float *x, const float *y, int64_t n, bool wide) {
  if (wide)
    return row_avx512(x, y, n);
  return y ? dot_row(x, y, n) : sum_row(x, n);
}
#else
static double row_sum(const float *x, const float *y, int64_t n, bool wide) {
  (void)wide;
  return y ? dot_row(x, y, n) : sum_row(x, n);
}
#endif

enum { ADD_ROWS = 4 };   /* rows add_rows adds in one pass over y */

/* y[j] += x[r len + j] (times x2[r len + j], the product rounded to f32
 * first, when x2 is not NULL) for r < rows, j < len, each y[j] adding the
 * rows in order of r: ADD_ROWS rows a pass, so y is loaded and stored once
 * per ADD_ROWS rows instead of once a row. */
DTRT_WIDE static void add_rows(float *restrict y, const float *restrict x,
                               const float *restrict x2, int64_t rows, int64_t len) {
  int64_t r = 0;
  for (; x2 && r + ADD_ROWS <= rows; r += ADD_ROWS)
    for (int64_t j = 0; j < len; j++) {
      float s = y[j];
      for (int k = 0; k < ADD_ROWS; k++) {
        float t = x[(r + k) * len + j] * x2[(r + k) * len + j];
        s += t;
      }
      y[j] = s;
    }
  for (; !x2 && r + ADD_ROWS <= rows; r += ADD_ROWS)
    for (int64_t j = 0; j < len; j++) {
      float s = y[j];
      for (int k = 0; k < ADD_ROWS; k++)
        s += x[(r + k) * len + j];
      y[j] = s;
    }
  for (; r < rows; r++)
    for (int64_t j = 0; j < len; j++) {
      float t = x2 ? x[r * len + j] * x2[r * len + j] : x[r * len + j];
      y[j] += t;
    }
}

/* y must hold the identity of op (0, -inf; arg: -1) on entry; x2 (R_SUM
 * only): a second factor of x's shape, or NULL. */
static void run(const Plan *p, const float *x, const float *x2, float *y, int64_t *arg, int op) {
  if (p->total == 0)
    return;
  int last = p->n - 1, top = last - 1;   /* the odometer's innermost group */
  int64_t len = p->len[last], rows = p->total / len, idx[DT_MAX_RANK] = {0}, o = 0, step = 1;
  if (op == R_SUM && !p->red[last] && last > 0)   /* a reduced group's rows, into one y + o */
    step = p->len[last - 1], top = last - 2;
  bool wide = dtrt_avx512();
  for (int64_t row = 0; row < rows; row += step) {
    const float *xr = x + row * len, *x2r = x2 ? x2 + row * len : NULL;
    int64_t base = row * len;
    if (p->red[last] && op == R_SUM) {
      y[o] += (float)row_sum(xr, x2r, len, wide);
    } else if (p->red[last]) {
      float m = y[o];
      int64_t at = arg ? arg[o] : 0;
      for (int64_t j = 0; j < len; j++)
        if ((arg && at < 0) || better(xr[j], m))
          m = xr[j], at = base + j;
      y[o] = m;
      if (arg)
        arg[o] = at;
    } else if (op == R_SUM) {
      add_rows(y + o, xr, x2r, step, len);
    } else {
      float *yr = y + o;
      for (int64_t j = 0; j < len; j++)
        if ((arg && arg[o + j] < 0) || better(xr[j], yr[j])) {
          yr[j] = xr[j];
          if (arg)
            arg[o + j] = base + j;
        }
    }
    for (int d = top; d >= 0; d--) {
      o += p->ostride[d];
      if (++idx[d] < p->len[d])
        break;
      o -= p->ostride[d] * p->len[d];
      idx[d] = 0;
    }
  }
}

enum { SUM_CHUNKS = 8, SUM_PARALLEL = 1 << 16 };   /* pieces; from this many elements */

typedef struct SumJob {
  const Plan *p;
  const float *x, *x2;
  float *y, *part;   /* part: SUM_CHUNKS partial outputs of ny when group 0 is reduced */
  int64_t ny, inner;
} SumJob;

static void sum_part(void *env, int64_t b, int64_t e) {
  const SumJob *j = env;
  for (int64_t c = b; c < e; c++) {
    int64_t lo = j->p->len[0] * c / SUM_CHUNKS, hi = j->p->len[0] * (c + 1) / SUM_CHUNKS;
    if (hi == lo)
      continue;
    Plan s = *j->p;
    s.len[0] = hi - lo;
    s.total = (hi - lo) * j->inner;
    run(&s, j->x + lo * j->inner, j->x2 ? j->x2 + lo * j->inner : NULL,
        j->p->red[0] ? j->part + c * j->ny : j->y + lo * j->p->ostride[0], NULL, R_SUM);
  }
}

/* The bytes of a parallel sum's partial outputs, ny elements each. */
static size_t part_bytes(int64_t ny) { return (size_t)(SUM_CHUNKS * ny) * sizeof(float); }

/* The bytes of max_grad's maxima and their places, ny of each. */
static size_t argmax_bytes(int64_t ny) { return (size_t)ny * (sizeof(int64_t) + sizeof(float)); }

/* run() of a sum on the thread pool; false when there is no memory for it. */
static bool sum_parallel(DtrtCtx *ctx, const Plan *p, const float *x, const float *x2, float *y,
                         int64_t ny) {
  SumJob j = {p, x, x2, y, NULL, ny, p->total / p->len[0]};
  if (p->red[0]) {
    if (!(j.part = dtrt_alloc(ctx, part_bytes(ny))))
      return false;
  }
  dtrt_parallel_for(ctx, SUM_CHUNKS, sum_part, &j);
  for (int c = 0; j.part && c < SUM_CHUNKS; c++)
    for (int64_t k = 0; k < ny; k++)
      y[k] += j.part[c * ny + k];
  dtrt_free(ctx, j.part);
  return true;
}

/* With two operands (sum_mul, mean_mul) the terms are their products. */
static DtStatus reduce(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                       DtTensor *out, const DtAttrs *a, int kind, bool mean, int factors) {
  DtStatus s;
  Plan p;
  if ((s = dtrt_kbegin(ctx, op, in, nin, factors, factors, out, a, 16, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (factors == 2 && (s = dtrt_check_as(ctx, op, "second factor", &in[1], DTRT_F32, in[0].dim,
                                          in[0].rank))) ||
      (s = dtrt_check(ctx, op, "output", out, DTRT_F32)) ||
      (s = plan(ctx, op, &in[0], out, a, &p)))
    return s;
  float *y = out->data;
  const float *x2 = factors == 2 ? in[1].data : NULL;
  int64_t ny = dtrt_numel(out);
  for (int64_t k = 0; k < ny; k++)
    y[k] = kind == R_SUM ? 0.0f : -INFINITY;
  if (kind != R_SUM || p.total < SUM_PARALLEL || p.len[0] < SUM_CHUNKS ||
      !sum_parallel(ctx, &p, in[0].data, x2, y, ny))
    run(&p, in[0].data, x2, y, NULL, kind);
  if (mean)
    for (int64_t k = 0; k < ny; k++)
      y[k] = (float)((double)y[k] / (double)p.count);
  return DT_OK;
}

/* sum(x){axes, keepdim?}: attributes as at the top of this file. */
DTRT_TRACED(sum, DTRT_TID_KERNEL) { return reduce(ctx, "sum", in, nin, out, a, R_SUM, false, 1); }

/* mean(x){axes, keepdim?}: the sum divided by the reduced element count (an
 * empty reduction gives NaN). */
DTRT_TRACED(mean, DTRT_TID_KERNEL) { return reduce(ctx, "mean", in, nin, out, a, R_SUM, true, 1); }

/* sum_mul(a, b){axes, keepdim?}, mean_mul: the sum and the mean of a b,
 * each product rounded to f32 first (the bits of sum and mean of a stored
 * mul); a and b of one shape. */
DTRT_TRACED(sum_mul, DTRT_TID_KERNEL) {
  return reduce(ctx, "sum_mul", in, nin, out, a, R_SUM, false, 2);
}
DTRT_TRACED(mean_mul, DTRT_TID_KERNEL) {
  return reduce(ctx, "mean_mul", in, nin, out, a, R_SUM, true, 2);
}

/* max(x){axes, keepdim?}: an empty reduction gives -inf; NaN propagates. */
DTRT_TRACED(max, DTRT_TID_KERNEL) { return reduce(ctx, "max", in, nin, out, a, R_MAX, false, 1); }

/* max_grad(x, y, dy){axes, keepdim?} -> dx shaped like x: each dy element goes
 * to the first maximal element of its group (first in memory order; the first
 * NaN when the group has one), every other element gets 0. y is only checked
 * for shape: the maxima are found again from x, exactly as max found them. The
 * attributes decode as for max, with y's rank as the reduced rank. */
DTRT_TRACED(max_grad, DTRT_TID_KERNEL) {
  const char *op = "max_grad";
  DtStatus s;
  Plan p;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 16, 0)) ||
      (s = dtrt_check(ctx, op, "x", &in[0], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "y", &in[1], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "dy", &in[2], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)) ||
      (s = plan(ctx, op, &in[0], &in[1], a, &p)) ||
      (s = dtrt_check_as(ctx, op, "dy", &in[2], DTRT_F32, in[1].dim, in[1].rank)))
    return s;
  int64_t ny = dtrt_numel(&in[1]);
  int64_t *arg = dtrt_alloc(ctx, argmax_bytes(ny));
  if (!arg)
    return DT_ERR_NOMEM;
  float *m = (float *)(arg + ny);
  for (int64_t k = 0; k < ny; k++)
    m[k] = -INFINITY, arg[k] = -1;
  run(&p, in[0].data, NULL, m, arg, R_ARGMAX);
  float *dx = out->data;
  const float *dy = in[2].data;
  memset(dx, 0, (size_t)p.total * sizeof(float));
  for (int64_t k = 0; k < ny; k++)
    if (arg[k] >= 0)
      dx[arg[k]] = dy[k];
  dtrt_free(ctx, arg);
  return DT_OK;
}

/* ---- deterministic mode: pieces and their fold ---- */

/* fold(x[P, ...]) -> [...]: no attributes. */
DTRT_TRACED(fold, DTRT_TID_KERNEL) {
  const char *op = "fold";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 0, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)))
    return s;
  if (in[0].rank < 1 || in[0].dim[0] < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: input needs a leading dim of pieces, got rank %d", op,
                     (int)in[0].rank);
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim + 1, in[0].rank - 1)))
    return s;
  int64_t n = 1, p = in[0].dim[0];
  for (int d = 1; d < in[0].rank; d++)
    n *= in[0].dim[d];
  const float *x = in[0].data;
  float *y = out->data;
  memcpy(y, x, sizeof(float) * (size_t)n);
  for (int64_t q = 1; q < p; q++)
    for (int64_t j = 0; j < n; j++)
      y[j] += x[q * n + j];
  return DT_OK;
}

DtStatus dtrt_pieces(DtrtCtx *ctx, DtKernelFn k, const DtTensor *in, int nin, DtTensor *out,
                     const DtAttrs *a, uint32_t cut) {
  if (!ctx || !k || !in || !out || nin < 1 || nin > 16 || out->rank < 1 || !(cut & ((1u << nin) - 1)))
    return dtrt_fail(ctx, DT_ERR_ARG, "pieces: bad arguments");
  int64_t p = out->dim[0], oelems = 1;
  for (int d = 1; d < out->rank; d++)
    oelems *= out->dim[d];
  DtTensor pin[16], pout = *out;
  pout.rank = out->rank - 1;
  memmove(pout.dim, out->dim + 1, sizeof(int64_t) * (size_t)pout.rank);
  int64_t stride[16] = {0};
  for (int j = 0; j < nin; j++) {
    pin[j] = in[j];
    if (!(cut >> j & 1u))
      continue;
    if (in[j].rank < 1 || p < 1 || in[j].dim[0] % p)
      return dtrt_fail(ctx, DT_ERR_ARG, "pieces: operand %d's dim 0 is not %lld equal blocks", j,
                       (long long)p);
    pin[j].dim[0] = in[j].dim[0] / p;
    stride[j] = 4;   /* f32 and i32 */
    for (int d = 0; d < in[j].rank; d++)
      stride[j] *= pin[j].dim[d];
  }
  for (int64_t q = 0; q < p; q++) {
    for (int j = 0; j < nin; j++)
      if (cut >> j & 1u)
        pin[j].data = (char *)in[j].data + q * stride[j];
    pout.data = (char *)out->data + q * oelems * 4;
    DtStatus s = k(ctx, pin, nin, &pout, a);
    if (s)
      return s;
  }
  return DT_OK;
}

/* dtrt_staged_bytes of sum and mean (the partial outputs of a sum large
 * enough for the threads; whether its first group is reduced is not asked)
 * and of max_grad (its second input the reduced shape). */
int64_t dtrt_reduce_staged(DtStaged k, const DtTensor *in, int nin, const DtTensor *out) {
  if (k == DT_STAGED_MAX_GRAD)
    return nin >= 2 ? (int64_t)argmax_bytes(dtrt_numel(&in[1])) : 0;
  return dtrt_numel(&in[0]) >= SUM_PARALLEL ? (int64_t)part_bytes(dtrt_numel(out)) : 0;
}
