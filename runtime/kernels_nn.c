/* kernels_nn.c: dense and network kernels: matmul through OpenBLAS, the softmax
 * family, losses, normalisation, embeddings, dropout and causal masking.
 * Above each kernel: its inputs, output and how its attributes are decoded.
 * The output must not overlap the inputs. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

/* ---- matmul ---- */

/* matmul(x, w){ta?, tb?, kblock?, kfold?}: a->i[0] = ta, a->i[1] = tb, each 0
 * or 1 (default 0); a->i[2] = kblock must be 0 (a fixed order of k's blocks is
 * the generated GEMM's); a->i[3] = kfold (default 0). ta transposes the last
 * two dims of x, tb those of w. With them applied x is [..., m, k] and w
 * [..., k, n]: equal batch dims, or one side 2-D and shared by every batch of
 * the other. out is [batch..., m, n]. When w is 2-D and x is not transposed,
 * x's batch dims fold into m and one sgemm does the whole product. With kfold
 * f (and ta), x [F.., k, m] and w [F.., k, n] of f leading dims F alike are
 * read as [F.. x k, m] and [F.. x k, n]: out is [m, n], summed over F and k. */
DTRT_TRACED(matmul, DTRT_TID_KERNEL) {
  const char *op = "matmul";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 4, 0)) ||
      (s = dtrt_check(ctx, op, "lhs", &in[0], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "rhs", &in[1], DTRT_F32)))
    return s;
  DtTensor flat[2];
  const DtTensor *x = &in[0], *w = &in[1];
  int64_t ta = dtrt_ai(a, 0, 0), tb = dtrt_ai(a, 1, 0), kfold = dtrt_ai(a, 3, 0);
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
    return dtrt_fail(ctx, DT_ERR_ARG, "matmul: ta and tb must be 0 or 1, got %lld and %lld",
                     (long long)ta, (long long)tb);
  if (dtrt_ai(a, 2, 0))
    return dtrt_fail(ctx, DT_ERR_ARG, "matmul: kblock %lld: OpenBLAS sums k in its own order",
                     (long long)dtrt_ai(a, 2, 0));
  if (kfold) {
    bool same = ta && !tb && kfold > 0 && x->rank == kfold + 2 && w->rank == x->rank;
    for (int d = 0; same && d <= kfold; d++)
      same = x->dim[d] == w->dim[d];
    if (!same)
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "matmul: kfold %lld needs ta, no tb and operands of rank %lld alike in "
                       "their first %lld dims", (long long)kfold, (long long)kfold + 2,
                       (long long)kfold + 1);
    for (int k = 0; k < 2; k++) {
      const DtTensor *t = &in[k];
      flat[k] = (DtTensor){.data = t->data, .dtype = t->dtype, .rank = 2,
                           .dim = {dtrt_elems(t->dim, t->rank - 1), t->dim[t->rank - 1]}};
    }
    x = &flat[0], w = &flat[1];
  }
  int ra = x->rank, rb = w->rank;
  if (ra < 2 || rb < 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "matmul: operands need rank 2 or more, got %d and %d",
                     ra, rb);
  int64_t m = x->dim[ra - 2 + ta], k = x->dim[ra - 1 - ta];
  int64_t kw = w->dim[rb - 2 + tb], n = w->dim[rb - 1 - tb];
  char bx[128], bw[128];
  dtrt_type_str(x->dtype, x->dim, ra, bx, sizeof bx);
  dtrt_type_str(w->dtype, w->dim, rb, bw, sizeof bw);
  if (k != kw)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "matmul: inner dimensions differ: %s%s has %lld, %s%s has %lld", bx,
                     ta ? " (transposed)" : "", (long long)k, bw, tb ? " (transposed)" : "",
                     (long long)kw);
  if (ra > 2 && rb > 2) {
    bool same = ra == rb;
    for (int d = 0; same && d < ra - 2; d++)
      same = x->dim[d] == w->dim[d];
    if (!same)
      return dtrt_fail(ctx, DT_ERR_ARG, "matmul: batch dimensions of %s and %s differ", bx,
                       bw);
  }
  const DtTensor *big = ra >= rb ? x : w;
  int r = big->rank;
  int64_t dim[DT_MAX_RANK];
  memcpy(dim, big->dim, sizeof dim);
  dim[r - 2] = m;
  dim[r - 1] = n;
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, r)))
    return s;
  if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "matmul: a dimension of %s or %s exceeds BLAS's int",
                     bx, bw);

  int64_t nb = dtrt_elems(big->dim, r - 2);
  int64_t sx = ra > 2 ? m * k : 0, sw = rb > 2 ? k * n : 0;
  float *y = out->data;
  if (m == 0 || n == 0 || nb == 0)
    return DT_OK;
  if (k == 0) {
    memset(y, 0, (size_t)(nb * m * n) * sizeof(float));
    return DT_OK;
  }
  if (rb == 2 && !ta && nb * m <= INT_MAX) {
    m *= nb;
    nb = 1;
  }
  const float *xd = x->data, *wd = w->data;
  enum CBLAS_TRANSPOSE opx = ta ? CblasTrans : CblasNoTrans, opw = tb ? CblasTrans : CblasNoTrans;
  ctx->blas_called = true;
  for (int64_t b = 0; b < nb; b++)
    cblas_sgemm(CblasRowMajor, opx, opw, (int)m, (int)n, (int)k, 1.0f, xd + b * sx,
                (int)(ta ? m : k), wd + b * sw, (int)(tb ? k : n), 0.0f, y + b * m * n,
                (int)n);
  return DT_OK;
}

/* ---- rows on the threads, reductions in lanes ---- */

/* Runs body(env, begin, end) over rows [0, rows) on the context's threads
 * when the kernel touches at least PARALLEL_ELEMS elements (as generated
 * loops do), else on the caller. Each row is computed by the same code
 * whatever the split, so results do not depend on the thread count. */
enum { PARALLEL_ELEMS = 1 << 16 };

static void rows_run(DtrtCtx *ctx, int64_t rows, int64_t elems,
                     void (*body)(void *env, int64_t begin, int64_t end), void *env) {
  if (elems >= PARALLEL_ELEMS && rows > 1)
    dtrt_parallel_for(ctx, rows, body, env);
  else if (rows > 0)
    body(env, 0, rows);
}

/* Sums of x[0..n) (and, with y, of x[j] y[j]) in LANES float partial sums,
 * element j into lane j % LANES, the partials then added in double: a fixed
 * order, so the same on every run, and loops the compiler vectorises. */
enum { LANES = 8 };

static double sum_lanes(const float *x, int64_t n) {
  float acc[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += x[j + l];
  double s = 0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; j < n; j++)
    s += x[j];
  return s;
}

double dtrt_dot_lanes(const float *x, const float *y, int64_t n) {
  float acc[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += x[j + l] * y[j + l];
  double s = 0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; j < n; j++)
    s += (double)x[j] * y[j];
  return s;
}

/* The largest of x[0..n), -inf when empty; NaN is passed over, as a plain
 * `x[j] > m` loop passes over it. Exact, so the order does not matter. */
DTRT_WIDE static float max_lanes(const float *x, int64_t n) {
  float acc[LANES];
  for (int l = 0; l < LANES; l++)
    acc[l] = -INFINITY;
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  float m = -INFINITY;
  for (int l = 0; l < LANES; l++)
    m = acc[l] > m ? acc[l] : m;
  for (; j < n; j++)
    m = x[j] > m ? x[j] : m;
  return m;
}

/* ---- softmax family ---- */

/* Views t as [outer, n, inner] around axis ax. */
static void around(const DtTensor *t, int ax, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = dtrt_elems(t->dim, ax);
  *n = t->dim[ax];
  *inner = dtrt_elems(t->dim + ax + 1, t->rank - ax - 1);
}

enum { SOFTMAX, LOG_SOFTMAX, SOFTMAX_GRAD, LOG_SOFTMAX_GRAD };

/* y[j] = e^(x[j] - m) for j < n, contiguous; returns their sum, as
 * sum_lanes(y, n) gives it, from the same pass. */
DTRT_WIDE static double exp_row(const float *x, float m, float *y, int64_t n) {
  float acc[LANES] = {0};
  int64_t j = 0;
  for (; j + LANES <= n; j += LANES)
    for (int l = 0; l < LANES; l++)
      acc[l] += y[j + l] = dtrt_exp_fast(x[j + l] - m);
  double s = 0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; j < n; j++)
    s += y[j] = dtrt_exp_fast(x[j] - m);
  return s;
}

/* One row of n elements at stride st. NaN in the row makes the row NaN.
 * Inlined twice into row(), with st the constant 1 and with st as it comes,
 * so that every loop of a contiguous row vectorises. */
static inline __attribute__((always_inline)) void row_at(int kind, const float *x, const float *dy,
                                                         float *dx, int64_t n, int64_t st) {
  if (kind == SOFTMAX || kind == LOG_SOFTMAX) {
    float m = st == 1 ? max_lanes(x, n) : -INFINITY;
    for (int64_t j = 0; st != 1 && j < n; j++)
      if (x[j * st] > m)
        m = x[j * st];
    double s = 0;
    if (st == 1) {
      s = exp_row(x, m, dx, n);
    } else {
      for (int64_t j = 0; j < n; j++)
        s += dx[j * st] = dtrt_exp_fast(x[j * st] - m);
    }
    if (kind == SOFTMAX) {
      float inv = (float)(1.0 / s);
      for (int64_t j = 0; j < n; j++)
        dx[j * st] *= inv;
    } else {
      float ls = (float)log(s);
      for (int64_t j = 0; j < n; j++)
        dx[j * st] = (x[j * st] - m) - ls;
    }
  } else if (kind == SOFTMAX_GRAD) {
    double d = st == 1 ? dtrt_dot_lanes(dy, x, n) : 0;
    for (int64_t j = 0; st != 1 && j < n; j++)
      d += (double)dy[j * st] * x[j * st];
    for (int64_t j = 0; j < n; j++)
      dx[j * st] = x[j * st] * (dy[j * st] - (float)d);
  } else {
    double d = st == 1 ? sum_lanes(dy, n) : 0;
    for (int64_t j = 0; st != 1 && j < n; j++)
      d += dy[j * st];
    for (int64_t j = 0; j < n; j++)
      dx[j * st] = dy[j * st] - dtrt_exp_fast(x[j * st]) * (float)d;
  }
}

static void row(int kind, const float *x, const float *dy, float *dx, int64_t n, int64_t st) {
  if (st == 1)
    row_at(kind, x, dy, dx, n, 1);
  else
    row_at(kind, x, dy, dx, n, st);
}

/* Rows [b, e) of a softmax op, row r at (r / inner) n inner + r % inner. */
typedef struct SoftmaxJob {
  int kind;
  const float *x, *dy;
  float *y;
  int64_t n, inner;
} SoftmaxJob;

static void softmax_rows(void *env, int64_t b, int64_t e) {
  const SoftmaxJob *j = env;
  for (int64_t r = b; r < e; r++) {
    int64_t at = r / j->inner * j->n * j->inner + r % j->inner;
    row(j->kind, j->x + at, j->dy ? j->dy + at : NULL, j->y + at, j->n, j->inner);
  }
}

static DtStatus softmax_op(DtrtCtx *ctx, const char *op, int kind, const DtTensor *in,
                           int nin, DtTensor *out, const DtAttrs *a) {
  int want = kind == SOFTMAX || kind == LOG_SOFTMAX ? 1 : 2, ax;
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, want, want, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, want == 1 ? "input" : "y", &in[0], DTRT_F32)) ||
      (want == 2 && (s = dtrt_check_as(ctx, op, "dy", &in[1], DTRT_F32, in[0].dim, in[0].rank))) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  if (in[0].rank == 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: input is a scalar; it needs an axis", op);
  if ((s = dtrt_axis(ctx, op, dtrt_ai(a, 0, -1), in[0].rank, &ax)))
    return s;
  SoftmaxJob j = {kind, in[0].data, want == 2 ? in[1].data : NULL, out->data, 0, 0};
  int64_t outer;
  around(&in[0], ax, &outer, &j.n, &j.inner);
  rows_run(ctx, outer * j.inner, dtrt_numel(&in[0]), softmax_rows, &j);
  return DT_OK;
}

/* softmax(x){axis?}: a->i[0] = axis, default -1 (the last). */
DTRT_TRACED(softmax, DTRT_TID_KERNEL) { return softmax_op(ctx, "softmax", SOFTMAX, in, nin, out, a); }

/* log_softmax(x){axis?}: a->i[0] = axis, default -1. */
DTRT_TRACED(log_softmax, DTRT_TID_KERNEL) {
  return softmax_op(ctx, "log_softmax", LOG_SOFTMAX, in, nin, out, a);
}

/* softmax_grad(y, dy){axis?} -> y * (dy - sum(dy * y)); a->i[0] = axis, default -1. */
DTRT_TRACED(softmax_grad, DTRT_TID_KERNEL) {
  return softmax_op(ctx, "softmax_grad", SOFTMAX_GRAD, in, nin, out, a);
}

/* log_softmax_grad(y, dy){axis?} -> dy - exp(y) * sum(dy); a->i[0] = axis, default -1. */
DTRT_TRACED(log_softmax_grad, DTRT_TID_KERNEL) {
  return softmax_op(ctx, "log_softmax_grad", LOG_SOFTMAX_GRAD, in, nin, out, a);
}

/* ---- losses ---- */

/* Checks logits f32[N,C] and labels i32[N] with every label in [0, C), but
 * for those equal to ignore (when kept is set: PyTorch's ignore_index). */
static DtStatus ce_check_kept(DtrtCtx *ctx, const char *op, const DtTensor *in, bool kept,
                              int64_t ignore);

static DtStatus ce_check(DtrtCtx *ctx, const char *op, const DtTensor *in) {
  return ce_check_kept(ctx, op, in, false, 0);
}

static DtStatus ce_check_kept(DtrtCtx *ctx, const char *op, const DtTensor *in, bool kept,
                              int64_t ignore) {
  DtStatus s;
  if ((s = dtrt_check(ctx, op, "logits", &in[0], DTRT_F32)))
    return s;
  if (in[0].rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: logits need rank 2 [N, C], got rank %d", op,
                     (int)in[0].rank);
  if ((s = dtrt_check_as(ctx, op, "labels", &in[1], DTRT_I32, in[0].dim, 1)))
    return s;
  const int32_t *lab = in[1].data;
  int64_t c = in[0].dim[1];
  for (int64_t i = 0; i < in[0].dim[0]; i++)
    if ((lab[i] < 0 || lab[i] >= c) && !(kept && lab[i] == ignore))
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: label %d in row %lld is outside [0, %lld)%s", op,
                       (int)lab[i], (long long)i, (long long)c,
                       kept ? " and not ignore_index"
                       : lab[i] == -100 ? " (cross_entropy skips such rows with ignore_index = -100)"
                                        : "");
  return DT_OK;
}

/* log(sum(exp(x[0..n)))) computed stably, in chunks through a buffer so the
 * exponentials vectorise. */
static double logsumexp(const float *x, int64_t n) {
  enum { CHUNK = 256 };
  float m = max_lanes(x, n), buf[CHUNK];
  double s = 0;
  for (int64_t j = 0; j < n; j += CHUNK)
    s += exp_row(x + j, m, buf, n - j < CHUNK ? n - j : CHUNK);
  return m + log(s);
}

/* Rows of cross entropy over logits x[N, C]: row i's loss into loss[i], or
 * (dx set) its gradient g (softmax(row) - onehot(label)) into dx's row. */
typedef struct CeJob {
  const float *x;
  const int32_t *lab;
  double *loss;
  float *dx;
  int64_t c;
  float g;
} CeJob;

static double ce_row(const CeJob *j, int64_t i) {
  const float *x = j->x + i * j->c;
  return logsumexp(x, j->c) - x[j->lab[i]];
}

static void ce_rows(void *env, int64_t b, int64_t e) {
  const CeJob *j = env;
  for (int64_t i = b; i < e; i++) {
    if (!j->dx) {
      j->loss[i] = ce_row(j, i);
      continue;
    }
    const float *x = j->x + i * j->c;
    float *d = j->dx + i * j->c;
    float scale = (float)(j->g / exp_row(x, max_lanes(x, j->c), d, j->c));
    for (int64_t k = 0; k < j->c; k++)
      d[k] *= scale;
    d[j->lab[i]] -= j->g;
  }
}

/* The bytes of cross_entropy's row losses for logits [N, C]: none when the
 * rows are too few elements for the threads (then summed as they come). */
static int64_t ce_loss_bytes(const DtTensor *logits) {
  int64_t rows = logits->dim[0];
  return rows * logits->dim[1] < PARALLEL_ELEMS ? 0 : (int64_t)sizeof(double) * rows;
}

/* dtrt_staged_bytes of cross_entropy. */
int64_t dtrt_nn_staged(const DtTensor *in, int nin) {
  return nin >= 1 && in[0].rank == 2 ? ce_loss_bytes(&in[0]) : 0;
}

/* cross_entropy(logits[N,C], labels i32[N]) -> f32[]: the mean over rows of
 * -log_softmax(row)[label]; no attributes. N = 0 gives 0. */
DTRT_TRACED(cross_entropy, DTRT_TID_KERNEL) {
  const char *op = "cross_entropy";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 0, 0)) ||
      (s = ce_check(ctx, op, in)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, NULL, 0)))
    return s;
  int64_t rows = in[0].dim[0], c = in[0].dim[1];
  CeJob j = {.x = in[0].data, .lab = in[1].data, .c = c};
  double loss = 0;
  if (!ce_loss_bytes(&in[0])) {
    for (int64_t i = 0; i < rows; i++)
      loss += ce_row(&j, i);
  } else {
    /* each row's loss on the threads, added in row order as above */
    if (!(j.loss = dtrt_alloc(ctx, (size_t)ce_loss_bytes(&in[0]))))
      return DT_ERR_NOMEM;
    rows_run(ctx, rows, rows * c, ce_rows, &j);
    for (int64_t i = 0; i < rows; i++)
      loss += j.loss[i];
    dtrt_free(ctx, j.loss);
  }
  *(float *)out->data = rows ? (float)(loss / (double)rows) : 0.0f;
  return DT_OK;
}

/* cross_entropy_grad(logits[N,C], labels i32[N], dloss f32[]) -> f32[N,C]:
 * dloss * (softmax(row) - onehot(label)) / N; no attributes. */
DTRT_TRACED(cross_entropy_grad, DTRT_TID_KERNEL) {
  const char *op = "cross_entropy_grad";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 0, 0)) ||
      (s = ce_check(ctx, op, in)) ||
      (s = dtrt_check_as(ctx, op, "dloss", &in[2], DTRT_F32, NULL, 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, 2)))
    return s;
  int64_t rows = in[0].dim[0], c = in[0].dim[1];
  if (rows == 0)
    return DT_OK;
  CeJob j = {.x = in[0].data,
             .lab = in[1].data,
             .dx = out->data,
             .c = c,
             .g = (float)(*(const float *)in[2].data / (double)rows)};
  rows_run(ctx, rows, rows * c, ce_rows, &j);
  return DT_OK;
}

/* ---- PyTorch's losses (dtrt.h) ---- */

/* cross_entropy_sum(logits[N,C], labels i32[N]){ignore_index, smoothing}:
 * a->i[0] = ignore_index, a->f[0] = smoothing e; per kept row
 * logsumexp - (1 - e) x[label] - e/C sum(x), which is (1 - e) (-log p[label])
 * + e/C sum_c (-log p[c]). */
DTRT_TRACED(cross_entropy_sum, DTRT_TID_KERNEL) {
  const char *op = "cross_entropy_sum";
  DtStatus s;
  int64_t ignore = dtrt_ai(a, 0, -100);
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 1, 1)) ||
      (s = ce_check_kept(ctx, op, in, true, ignore)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, NULL, 0)))
    return s;
  int64_t rows = in[0].dim[0], c = in[0].dim[1];
  double e = dtrt_af(a, 0, 0);
  const float *x = in[0].data;
  const int32_t *lab = in[1].data;
  double loss = 0;
  for (int64_t i = 0; i < rows; i++) {
    if (lab[i] == ignore)
      continue;
    const float *r = x + i * c;
    double all = 0;
    for (int64_t j = 0; e != 0 && j < c; j++)
      all += r[j];
    loss += logsumexp(r, c) - (1 - e) * r[lab[i]] - e / (double)c * all;
  }
  *(float *)out->data = (float)loss;
  return DT_OK;
}

/* cross_entropy_sum_grad(logits, labels, dsum){ignore_index, smoothing}:
 * dsum (softmax(row) - (1 - e) onehot(label) - e/C) on kept rows, 0 on the
 * others (even for a dsum that is not finite: PyTorch's gradient when every
 * label is ignored). */
DTRT_TRACED(cross_entropy_sum_grad, DTRT_TID_KERNEL) {
  const char *op = "cross_entropy_sum_grad";
  DtStatus s;
  int64_t ignore = dtrt_ai(a, 0, -100);
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 1, 1)) ||
      (s = ce_check_kept(ctx, op, in, true, ignore)) ||
      (s = dtrt_check_as(ctx, op, "dsum", &in[2], DTRT_F32, NULL, 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, 2)))
    return s;
  int64_t rows = in[0].dim[0], c = in[0].dim[1];
  double e = dtrt_af(a, 0, 0);
  const float *x = in[0].data;
  const int32_t *lab = in[1].data;
  float *dx = out->data, g = *(const float *)in[2].data;
  float off = (float)(e / (double)c), hit = (float)(1 - e);
  for (int64_t i = 0; i < rows; i++) {
    float *d = dx + i * c;
    if (lab[i] == ignore) {
      memset(d, 0, sizeof(float) * (size_t)c);
      continue;
    }
    row(SOFTMAX, x + i * c, NULL, d, c, 1);
    for (int64_t j = 0; j < c; j++)
      d[j] = g * (d[j] - off);
    d[lab[i]] -= g * hit;
  }
  return DT_OK;
}

/* label_count(labels i32[N]){ignore_index} -> f32[]: a->i[0] = ignore_index. */
DTRT_TRACED(label_count, DTRT_TID_KERNEL) {
  const char *op = "label_count";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, "labels", &in[0], DTRT_I32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, NULL, 0)))
    return s;
  if (in[0].rank != 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: labels need rank 1 [N], got rank %d", op,
                     (int)in[0].rank);
  int64_t ignore = dtrt_ai(a, 0, -100), n = 0;
  const int32_t *lab = in[0].data;
  for (int64_t i = 0; i < in[0].dim[0]; i++)
    n += lab[i] != ignore;
  *(float *)out->data = (float)n;
  return DT_OK;
}

static DtStatus bce_check(DtrtCtx *ctx, const char *op, const DtTensor *in) {
  DtStatus s;
  if ((s = dtrt_check(ctx, op, "logits", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "target", &in[1], DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  return DT_OK;
}

/* bce_with_logits(x, t) -> f32[]: the mean of max(x, 0) - x t + log(1 +
 * exp(-|x|)) (binary_cross_entropy_with_logits' stable form); no attributes. */
DTRT_TRACED(bce_with_logits, DTRT_TID_KERNEL) {
  const char *op = "bce_with_logits";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 0, 0)) || (s = bce_check(ctx, op, in)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, NULL, 0)))
    return s;
  int64_t n = dtrt_numel(&in[0]);
  const float *x = in[0].data, *t = in[1].data;
  double acc = 0;
  for (int64_t k = 0; k < n; k++) {
    double v = x[k];
    acc += (v > 0 ? v : 0) - v * t[k] + log1p(exp(-fabs(v)));
  }
  *(float *)out->data = n ? (float)(acc / (double)n) : 0.0f;
  return DT_OK;
}

/* bce_with_logits_grad(x, t, dloss) -> dloss (sigmoid(x) - t) / numel. */
DTRT_TRACED(bce_with_logits_grad, DTRT_TID_KERNEL) {
  const char *op = "bce_with_logits_grad";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 0, 0)) || (s = bce_check(ctx, op, in)) ||
      (s = dtrt_check_as(ctx, op, "dloss", &in[2], DTRT_F32, NULL, 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  int64_t n = dtrt_numel(&in[0]);
  const float *x = in[0].data, *t = in[1].data;
  float *dx = out->data;
  if (n == 0)
    return DT_OK;
  double g = *(const float *)in[2].data / (double)n;
  for (int64_t k = 0; k < n; k++) {
    double z = exp(-fabs((double)x[k]));
    double sig = x[k] >= 0 ? 1 / (1 + z) : z / (1 + z);
    dx[k] = (float)(g * (sig - t[k]));
  }
  return DT_OK;
}

/* mse(pred, target) -> f32[]: mean((pred - target)^2) over every element; no
 * attributes. Empty tensors give 0. */
DTRT_TRACED(mse, DTRT_TID_KERNEL) {
  const char *op = "mse";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 0, 0)) ||
      (s = dtrt_check(ctx, op, "pred", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "target", &in[1], DTRT_F32, in[0].dim, in[0].rank)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, NULL, 0)))
    return s;
  int64_t n = dtrt_numel(&in[0]);
  const float *p = in[0].data, *t = in[1].data;
  double acc = 0;
  for (int64_t k = 0; k < n; k++) {
    double d = (double)p[k] - t[k];
    acc += d * d;
  }
  *(float *)out->data = n ? (float)(acc / (double)n) : 0.0f;
  return DT_OK;
}

/* ---- normalisation ---- */

/* Eight floats (GCC's and clang's vector extension: one AVX2 register
 * where DTRT_WIDE builds for it, two SSE ones elsewhere), and eight at any
 * float's address: GCC did not vectorise the normalisations' three sums of
 * lanes written as loops over arrays of LANES. */
typedef float V8 __attribute__((vector_size(32)));
typedef float V8u __attribute__((vector_size(32), aligned(4)));
_Static_assert(LANES == 8, "a V8 holds the lanes");

/* Row x of d normalised into y (dy NULL), or normalize's derivative applied
 * to dy: the mean as sum_lanes(x, d) gives it, then the sums of
 * (x[j] - mu)^2, of dy[j] (x[j] - mu) and of dy[j] in the same lanes and
 * order, the lanes as one vector. */
DTRT_WIDE static void norm_row(const float *x, const float *dy, float *y, int64_t d,
                               double eps) {
  int64_t whole = d - d % LANES, j;
  V8 acc = {0};
  for (j = 0; j < whole; j += LANES)
    acc += *(const V8u *)(x + j);
  double s = 0;
  for (int l = 0; l < LANES; l++)
    s += acc[l];
  for (; j < d; j++)
    s += x[j];
  float mu = (float)(s / (double)d);
  V8 a = {0}, b = {0}, c = {0};
  for (j = 0; j < whole; j += LANES) {
    V8 t = *(const V8u *)(x + j) - mu;
    a += t * t;
    if (dy) {
      V8 g = *(const V8u *)(dy + j);
      b += g * t;
      c += g;
    }
  }
  double xx = 0, xdy = 0, sdy = 0;
  for (int l = 0; l < LANES; l++)
    xx += a[l], xdy += b[l], sdy += c[l];
  for (; j < d; j++) {
    double t = x[j] - mu;
    xx += t * t;
    xdy += dy ? dy[j] * t : 0.0;
    sdy += dy ? dy[j] : 0.0f;
  }
  float inv = (float)(1.0 / sqrt(xx / (double)d + eps));
  if (!dy) {
    for (int64_t k = 0; k < d; k++)
      y[k] = (x[k] - mu) * inv;
    return;
  }
  /* mean(dy) and mean(dy * xhat), xhat = (x - mu) inv */
  float mdy = (float)(sdy / (double)d);
  float mdyx = (float)(xdy * inv / (double)d);
  for (int64_t k = 0; k < d; k++)
    y[k] = inv * (dy[k] - mdy - (x[k] - mu) * inv * mdyx);
}

/* Rows [b, e) of normalize (dy NULL) or normalize_grad over rows of d. */
typedef struct NormJob {
  const float *x, *dy;
  float *y;
  int64_t d;
  double eps;
} NormJob;

static void norm_rows(void *env, int64_t b, int64_t e) {
  const NormJob *j = env;
  for (int64_t r = b; r < e; r++)
    norm_row(j->x + r * j->d, j->dy ? j->dy + r * j->d : NULL, j->y + r * j->d, j->d, j->eps);
}

static DtStatus norm_op(DtrtCtx *ctx, const char *op, bool grad, const DtTensor *in, int nin,
                        DtTensor *out, const DtAttrs *a) {
  int want = grad ? 2 : 1;
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, want, want, out, a, 0, 1)) ||
      (s = dtrt_check(ctx, op, "x", &in[0], DTRT_F32)) ||
      (grad && (s = dtrt_check_as(ctx, op, "dy", &in[1], DTRT_F32, in[0].dim, in[0].rank))) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  double eps = dtrt_af(a, 0, 1e-5);
  if (!(eps >= 0))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: eps = %g must be 0 or more", op, eps);
  if (in[0].rank == 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: input is a scalar; it needs a last axis", op);
  int64_t d = in[0].dim[in[0].rank - 1], rows = d ? dtrt_numel(&in[0]) / d : 0;
  NormJob j = {in[0].data, grad ? in[1].data : NULL, out->data, d, eps};
  rows_run(ctx, rows, rows * d, norm_rows, &j);
  return DT_OK;
}

/* normalize(x){eps?} over the last axis: (x - mean) / sqrt(var + eps), var biased;
 * a->f[0] = eps, default 1e-5. */
DTRT_TRACED(normalize, DTRT_TID_KERNEL) { return norm_op(ctx, "normalize", false, in, nin, out, a); }

/* normalize_grad(x, dy){eps?}: the exact derivative of normalize applied to dy:
 * (dy - mean(dy) - xhat * mean(dy * xhat)) / sqrt(var + eps); a->f[0] = eps. */
DTRT_TRACED(normalize_grad, DTRT_TID_KERNEL) { return norm_op(ctx, "normalize_grad", true, in, nin, out, a); }

/* ---- embeddings ---- */

/* Checks ids i32 all in [0, rows). */
static DtStatus ids_check(DtrtCtx *ctx, const char *op, const DtTensor *ids, int64_t rows) {
  const int32_t *id = ids->data;
  int64_t n = dtrt_numel(ids);
  for (int64_t k = 0; k < n; k++)
    if (id[k] < 0 || id[k] >= rows)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: id %d at index %lld is outside [0, %lld)", op,
                       (int)id[k], (long long)k, (long long)rows);
  return DT_OK;
}

/* Into dim: the ids' dims, then d (embedding's output, embedding_grad's
 * dy); fails when the ids leave no room for one more dim. */
static DtStatus ids_then(DtrtCtx *ctx, const char *op, const DtTensor *ids, int64_t d,
                         int64_t *dim) {
  if (ids->rank >= DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: ids have rank %d; at most %d allowed", op,
                     (int)ids->rank, DT_MAX_RANK - 1);
  memcpy(dim, ids->dim, sizeof ids->dim);
  dim[ids->rank] = d;
  return DT_OK;
}

/* The entry of embedding (table, ids) and embedding_grad (ids, dy): two
 * operands, in operand order the ids (i32, operand ids_at) and the other
 * (f32, named other), and at most nattr int attributes. */
static DtStatus embed_begin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                            const DtTensor *out, const DtAttrs *a, int nattr, int ids_at,
                            const char *other) {
  DtStatus s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, nattr, 0);
  for (int k = 0; !s && k < 2; k++)
    s = dtrt_check(ctx, op, k == ids_at ? "ids" : other, &in[k], k == ids_at ? DTRT_I32 : DTRT_F32);
  return s;
}

/* embedding(table f32[V,D], ids i32[...]) -> f32[..., D]: row ids[k] of table for
 * each k; no attributes. */
DTRT_TRACED(embedding, DTRT_TID_KERNEL) {
  const char *op = "embedding";
  DtStatus s;
  if ((s = embed_begin(ctx, op, in, nin, out, a, 0, 1, "table")))
    return s;
  const DtTensor *tab = &in[0], *ids = &in[1];
  if (tab->rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "embedding: table needs rank 2 [V, D], got rank %d",
                     (int)tab->rank);
  int64_t dim[DT_MAX_RANK], d = tab->dim[1];
  if ((s = ids_then(ctx, op, ids, d, dim)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, ids->rank + 1)) ||
      (s = ids_check(ctx, op, ids, tab->dim[0])))
    return s;
  const int32_t *id = ids->data;
  const float *t = tab->data;
  float *y = out->data;
  int64_t n = dtrt_numel(ids);
  for (int64_t k = 0; k < n && d; k++)
    memcpy(y + k * d, t + id[k] * d, (size_t)d * sizeof(float));
  return DT_OK;
}

/* embedding_grad(ids i32[...], dy f32[..., D]){rows} -> f32[rows, D]: zero, then
 * dy's row k added into row ids[k]; a->i[0] = rows (required). */
DTRT_TRACED(embedding_grad, DTRT_TID_KERNEL) {
  const char *op = "embedding_grad";
  DtStatus s;
  if ((s = embed_begin(ctx, op, in, nin, out, a, 1, 0, "dy")))
    return s;
  if (dtrt_ni(a) != 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "embedding_grad: needs the int attribute rows");
  const DtTensor *ids = &in[0], *dy = &in[1];
  int64_t dim[DT_MAX_RANK], rows = a->i[0];
  int64_t d = dy->rank == ids->rank + 1 ? dy->dim[ids->rank] : 0;
  if ((s = ids_then(ctx, op, ids, d, dim)) ||
      (s = dtrt_check_as(ctx, op, "dy", dy, DTRT_F32, dim, ids->rank + 1)))
    return s;
  if (rows < 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "embedding_grad: rows = %lld is negative",
                     (long long)rows);
  int64_t odim[2] = {rows, d};
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, odim, 2)) ||
      (s = ids_check(ctx, op, ids, rows)))
    return s;
  const int32_t *id = ids->data;
  const float *g = dy->data;
  float *y = out->data;
  memset(y, 0, (size_t)(rows * d) * sizeof(float));
  int64_t n = dtrt_numel(ids);
  for (int64_t k = 0; k < n; k++) {
    float *yr = y + id[k] * d;
    const float *gr = g + k * d;
    for (int64_t j = 0; j < d; j++)
      yr[j] += gr[j];
  }
  return DT_OK;
}

/* ---- dropout ---- */

/* Element k of the whole tensor is kept when the top 24 bits of random draw k
 * of stream `step` under seed, as a fraction of 2^24, are >= p; kept elements
 * are scaled by 1/(1-p). A block of a larger tensor (a device's share after
 * spmd) names its place, so its mask is that block of the whole tensor's. */
/* Rows [b, e) (along the last dim, of len) of a dropout of rank r: the
 * block's dims, its place in the whole tensor and the whole's strides. */
typedef struct DropJob {
  const float *x;
  float *y;
  uint64_t key;
  uint64_t cut; /* kept when the top 24 bits are at least this */
  float scale;
  int r;
  int64_t len, dim[DT_MAX_RANK], begin[DT_MAX_RANK], stride[DT_MAX_RANK];
} DropJob;

static void drop_rows(void *env, int64_t b, int64_t e) {
  const DropJob *j = env;
  for (int64_t q = b; q < e; q++) {
    /* the whole tensor's index of the row's first element */
    int64_t g = j->r ? j->begin[j->r - 1] * j->stride[j->r - 1] : 0;
    for (int64_t d = j->r - 2, rest = q; d >= 0; d--) {
      g += (rest % j->dim[d] + j->begin[d]) * j->stride[d];
      rest /= j->dim[d];
    }
    const float *x = j->x + q * j->len;
    float *y = j->y + q * j->len;
    for (int64_t k = 0; k < j->len; k++)
      y[k] = dtrt_rand_at(j->key, (uint64_t)(g + k)) >> 40 >= j->cut ? x[k] * j->scale : 0.0f;
  }
}

static DtStatus dropout_op(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                           DtTensor *out, const DtAttrs *a) {
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 1 + 2 * DT_MAX_RANK, 1)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  int r = in[0].rank;
  if ((dtrt_ni(a) != 1 && dtrt_ni(a) != 1 + 2 * r) || dtrt_nf(a) != 1)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: needs the float attribute p, the int seed and optionally the block's "
                     "place (%d whole dims, %d begins)", op, r, r);
  double p = a->f[0];
  if (!(p >= 0 && p <= 1))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: p = %g is outside [0, 1]", op, p);
  /* whole[d] and begin[d]: the block's place; stride[d] of the whole tensor */
  int64_t whole[DT_MAX_RANK], begin[DT_MAX_RANK], stride[DT_MAX_RANK];
  bool block = dtrt_ni(a) > 1;
  for (int d = 0; d < r; d++) {
    whole[d] = block ? a->i[1 + d] : in[0].dim[d];
    begin[d] = block ? a->i[1 + r + d] : 0;
    if (begin[d] < 0 || in[0].dim[d] > whole[d] - begin[d])
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "%s: a block of %lld from %lld does not fit dimension %d of length %lld",
                       op, (long long)in[0].dim[d], (long long)begin[d], d, (long long)whole[d]);
  }
  int64_t st = 1;
  for (int d = r - 1; d >= 0; d--) {
    stride[d] = st;
    st *= whole[d];
  }
  /* u >= p 2^24 for a whole u below 2^24 is u >= ceil(p 2^24), exactly */
  DropJob j = {.x = in[0].data,
               .y = out->data,
               .r = r,
               .len = r ? in[0].dim[r - 1] : 1,
               .key = dtrt_rand_key((uint64_t)a->i[0], (uint64_t)a->step),
               .cut = (uint64_t)ceil(p * 16777216.0),
               .scale = p < 1 ? (float)(1.0 / (1.0 - p)) : 0.0f};
  memcpy(j.dim, in[0].dim, sizeof j.dim);
  memcpy(j.begin, begin, sizeof j.begin);
  memcpy(j.stride, stride, sizeof j.stride);
  int64_t n = dtrt_numel(&in[0]);
  rows_run(ctx, j.len ? n / j.len : 0, n, drop_rows, &j);
  return DT_OK;
}

/* dropout(x){p, seed, at}: a->f[0] = p in [0, 1], a->i[0] = seed; the mask
 * also depends on a->step, so each training step draws a new one. When x is
 * a block of a larger tensor, a->i[1..r] are the larger tensor's dims and
 * a->i[r+1..2r] the block's first index along each. */
DTRT_TRACED(dropout, DTRT_TID_KERNEL) { return dropout_op(ctx, "dropout", in, nin, out, a); }

/* dropout_grad(dy){p, seed, at}: the same mask and scale as dropout with the
 * same attributes and step, applied to dy. */
DTRT_TRACED(dropout_grad, DTRT_TID_KERNEL) { return dropout_op(ctx, "dropout_grad", in, nin, out, a); }

/* ---- causal mask ---- */

/* Rows [b, e) of all the [rows, cols] matrices of a causal mask. */
typedef struct MaskJob {
  const float *x;
  float *y;
  int64_t rows, cols;
  float fill;
} MaskJob;

/* Row i keeps its columns up to i and fills the rest: two plain loops,
 * where one comparing each column with i does not vectorise; i counted
 * along, as a division a row and a call of memcpy took most of the time of
 * short rows. */
DTRT_WIDE static void mask_rows(void *env, int64_t b, int64_t e) {
  const MaskJob *j = env;
  int64_t cols = j->cols, i = b % j->rows;
  float fill = j->fill;
  for (int64_t q = b; q < e; q++) {
    int64_t keep = i + 1 < cols ? i + 1 : cols, k = 0;
    const float *restrict x = j->x + q * cols;
    float *restrict y = j->y + q * cols;
    for (; k < keep; k++)
      y[k] = x[k];
    for (; k < cols; k++)
      y[k] = fill;
    if (++i == j->rows)
      i = 0;
  }
}

/* causal_mask(x[..., r, c]){fill?}: entries with column j > row i become fill,
 * the others are copied; a->f[0] = fill, default -inf. Its backward is the same
 * op with fill = 0. */
DTRT_TRACED(causal_mask, DTRT_TID_KERNEL) {
  const char *op = "causal_mask";
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 0, 1)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  int r = in[0].rank;
  if (r < 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "causal_mask: input needs rank 2 or more, got %d", r);
  MaskJob j = {in[0].data, out->data, in[0].dim[r - 2], in[0].dim[r - 1],
               (float)dtrt_af(a, 0, -INFINITY)};
  int64_t n = dtrt_numel(&in[0]);
  rows_run(ctx, j.cols ? n / j.cols : 0, n, mask_rows, &j);
  return DT_OK;
}
