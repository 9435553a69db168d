/* kernels_sparse.c: optimizer updates of an embedding table's touched rows
 * from its sparse gradient (rows i32, values f32 [..., D]), with
 * torch.optim's semantics for sparse gradients (operands and attributes in
 * dtrt.h). The rows may repeat and come in any order, -1 among them (the
 * gradients of several ranks one after the other): a row's values are
 * summed in the order they come, then the row is updated once. Rows are
 * updated in parallel, each by one thread, so the bits never depend on the
 * threads. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt_int.h"

/* Rows times D below which an update runs on the calling thread alone. */
enum { SPARSE_PARALLEL = 1 << 15 };

typedef enum { SGD, ADAGRAD_SUM, ADAGRAD, MOMENT, ADAM } Update;

/* One call: the touched rows, each once, and their summed values. */
typedef struct Rows {
  Update kind;
  float *p;               /* the updated tensor [R, D] (or [R]: a row's one value) */
  int64_t rows, d, pd;    /* R, the values' D, the updated tensor's columns */
  int64_t u;              /* touched rows */
  int64_t *row;           /* [u] */
  float *g;               /* [u, D] summed values; NULL: none (adam) */
  const float *s, *m, *v; /* adagrad: the sums; adam: the moments */
  float lr, eps, beta;    /* beta: moment's 1 - beta */
  float init;             /* adagrad: the sums' start, added to them */
  bool square;
} Rows;

typedef struct Entry {
  int32_t row;
  int64_t at;
} Entry;

static int by_row(const void *x, const void *y) {
  const Entry *a = x, *b = y;
  if (a->row != b->row)
    return (a->row > b->row) - (a->row < b->row);
  return (a->at > b->at) - (a->at < b->at);
}

/* Checks the operands: dst [R, D] or [R] (out alike), rows i32, values f32
 * of rows' shape plus D (NULL: none); sorts the touched rows into r. */
static DtStatus gather(DtrtCtx *ctx, const char *op, const DtTensor *dst, const DtTensor *rows,
                       const DtTensor *values, int64_t d, const DtTensor *out, Rows *r) {
  DtStatus s;
  if ((s = dtrt_check(ctx, op, "table", dst, DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "rows", rows, DTRT_I32)))
    return s;
  if (dst->rank != 1 && dst->rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the table needs rank 2 [R, D] (or 1, [R]), got %d", op,
                     (int)dst->rank);
  if (rows->rank >= DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: rows of rank %d leave no room for D", op,
                     (int)rows->rank);
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dst->dim, dst->rank)))
    return s;
  int64_t vd[DT_MAX_RANK];
  memcpy(vd, rows->dim, sizeof(int64_t) * (size_t)rows->rank);
  vd[rows->rank] = d;
  if (values && (s = dtrt_check_as(ctx, op, "values", values, DTRT_F32, vd, rows->rank + 1)))
    return s;
  r->p = out->data;
  r->rows = dst->dim[0];
  r->pd = dst->rank == 2 ? dst->dim[1] : 1;
  r->d = d;
  if (out->data != dst->data && dtrt_numel(dst))
    memcpy(out->data, dst->data, (size_t)dtrt_numel(dst) * sizeof(float));
  int64_t n = dtrt_numel(rows), k = 0;
  const int32_t *id = rows->data;
  Entry *e = dtrt_alloc_raw(ctx, sizeof(Entry) * (size_t)(n ? n : 1));
  if (!e)
    return DT_ERR_NOMEM;
  for (int64_t j = 0; j < n; j++) {
    if (id[j] == -1)
      continue;
    if (id[j] < 0 || id[j] >= r->rows) {
      dtrt_free(ctx, e);
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: rows[%lld] = %d is outside [0, %lld)", op,
                       (long long)j, (int)id[j], (long long)r->rows);
    }
    e[k++] = (Entry){id[j], j};
  }
  bool sorted = true; /* one process's sparse_rows come sorted, each once */
  for (int64_t j = 1; sorted && j < k; j++)
    sorted = by_row(&e[j - 1], &e[j]) < 0;
  if (!sorted)
    qsort(e, (size_t)k, sizeof *e, by_row);
  int64_t u = 0;
  for (int64_t j = 0; j < k; j++)
    u += !j || e[j].row != e[j - 1].row;
  r->u = u;
  /* sized by the rows, not by u, as dtrt_sparse_staged counts them */
  r->row = dtrt_alloc_raw(ctx, sizeof(int64_t) * (size_t)(n ? n : 1));
  r->g = values ? dtrt_alloc(ctx, sizeof(float) * (size_t)(n * d > 0 ? n * d : 1)) : NULL;
  if (!r->row || (values && !r->g)) {
    dtrt_free(ctx, e);
    dtrt_free(ctx, r->row);
    dtrt_free(ctx, r->g);
    return DT_ERR_NOMEM;
  }
  for (int64_t j = 0, q = -1; j < k; j++) {
    if (!j || e[j].row != e[j - 1].row)
      r->row[++q] = e[j].row;
    if (values) {
      const float *restrict x = (const float *)values->data + e[j].at * d;
      float *restrict y = r->g + q * d;
      for (int64_t c = 0; c < d; c++)
        y[c] += x[c];
    }
  }
  dtrt_free(ctx, e);
  return DT_OK;
}

/* Rows ahead of the one being updated whose lines are fetched: the rows
 * are scattered over a table larger than the caches, and each update is
 * short, so the loads of later rows must be under way while it runs. */
enum { AHEAD = 16 };

/* Starts the loads of touched row k's table and state rows. */
static void fetch_row(const Rows *r, int64_t k) {
  int64_t at = r->row[k], pd = r->pd, b = pd * (int64_t)sizeof(float);
  dtrt_prefetch(r->p + at * pd, b);
  if (r->kind == ADAGRAD)
    dtrt_prefetch(r->s + at * (r->s == r->m ? 1 : r->d), r->s == r->m ? 4 : r->d * 4);
  if (r->kind == ADAM)
    dtrt_prefetch(r->m + at * pd, b), dtrt_prefetch(r->v + at * pd, b);
}

/* Each kind's update of one row p from its summed values g; the loops
 * run along the row, element by element as torch.optim's formulas. */
static void update_row(const Rows *r, int64_t k, float *restrict p, const float *restrict g) {
  int64_t d = r->d, pd = r->pd, at = r->row[k];
  float lr = r->lr;
  switch (r->kind) {
  case SGD:
    for (int64_t c = 0; c < d; c++)
      p[c] -= lr * g[c];
    break;
  case ADAGRAD_SUM:
    if (pd == 1) { /* row-wise: the mean of g^2 over the row */
      double t = 0;
      for (int64_t c = 0; c < d; c++)
        t += (double)g[c] * g[c];
      p[0] += d ? (float)(t / (double)d) : 0;
    } else {
      for (int64_t c = 0; c < d; c++)
        p[c] += g[c] * g[c];
    }
    break;
  case ADAGRAD:
    if (r->s == r->m) { /* one sum a row */
      float q = sqrtf(r->s[at] + r->init) + r->eps;
      for (int64_t c = 0; c < d; c++)
        p[c] -= lr * (g[c] / q);
    } else {
      const float *restrict s = r->s + at * d;
      float init = r->init, eps = r->eps;
      for (int64_t c = 0; c < d; c++)
        p[c] -= lr * (g[c] / (sqrtf(s[c] + init) + eps));
    }
    break;
  case MOMENT: {
    float beta = r->beta;
    if (r->square)
      for (int64_t c = 0; c < d; c++)
        p[c] += beta * (g[c] * g[c] - p[c]);
    else
      for (int64_t c = 0; c < d; c++)
        p[c] += beta * (g[c] - p[c]);
    break;
  }
  case ADAM: {
    const float *restrict m = r->m + at * pd, *restrict v = r->v + at * pd;
    float eps = r->eps;
    for (int64_t c = 0; c < pd; c++)
      p[c] -= lr * (m[c] / (sqrtf(v[c]) + eps));
    break;
  }
  }
}

static void update_rows(void *env, int64_t k0, int64_t k1) {
  const Rows *r = env;
  for (int64_t k = k0; k < k1 && k < k0 + AHEAD; k++)
    fetch_row(r, k);
  for (int64_t k = k0; k < k1; k++) {
    if (k + AHEAD < k1)
      fetch_row(r, k + AHEAD);
    update_row(r, k, r->p + r->row[k] * r->pd, r->g ? r->g + k * r->d : NULL);
  }
}

static DtStatus finish(DtrtCtx *ctx, Rows *r) {
  if (r->u * r->pd >= SPARSE_PARALLEL && r->u > 1)
    dtrt_parallel_for(ctx, r->u, update_rows, r);
  else if (r->u > 0)
    update_rows(r, 0, r->u);
  dtrt_free(ctx, r->row);
  dtrt_free(ctx, r->g);
  return DT_OK;
}

/* The scalar operand k (a learning rate), checked. */
static DtStatus scalar(DtrtCtx *ctx, const char *op, const DtTensor *in, int k, float *x) {
  DtStatus s = dtrt_check_as(ctx, op, "learning rate", &in[k], DTRT_F32, NULL, 0);
  if (!s)
    *x = *(const float *)in[k].data;
  return s;
}

/* The values' D: the table's columns (or, for a row-wise sum [R], the
 * values' last dim). */
static int64_t value_cols(const DtTensor *dst, const DtTensor *values) {
  if (dst->rank == 2)
    return dst->dim[1];
  return values->rank >= 1 ? values->dim[values->rank - 1] : 0;
}

DTRT_TRACED(sparse_sgd, DTRT_TID_KERNEL) {
  const char *op = "sparse_sgd";
  DtStatus s;
  Rows r = {.kind = SGD};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 4, 4, out, a, 0, 0)) ||
      (s = scalar(ctx, op, in, 3, &r.lr)))
    return s;
  if (in[0].rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the table needs rank 2 [R, D], got %d", op,
                     (int)in[0].rank);
  if ((s = gather(ctx, op, &in[0], &in[1], &in[2], in[0].dim[1], out, &r)))
    return s;
  return finish(ctx, &r);
}

DTRT_TRACED(sparse_adagrad_sum, DTRT_TID_KERNEL) {
  const char *op = "sparse_adagrad_sum";
  DtStatus s;
  Rows r = {.kind = ADAGRAD_SUM};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 0, 0)) ||
      (s = dtrt_check(ctx, op, "values", &in[2], DTRT_F32)) ||
      (s = gather(ctx, op, &in[0], &in[1], &in[2], value_cols(&in[0], &in[2]), out, &r)))
    return s;
  return finish(ctx, &r);
}

DTRT_TRACED(sparse_adagrad, DTRT_TID_KERNEL) {
  const char *op = "sparse_adagrad";
  DtStatus s;
  Rows r = {.kind = ADAGRAD};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 5, 5, out, a, 0, 3)) ||
      (s = scalar(ctx, op, in, 4, &r.lr)) || (s = dtrt_check(ctx, op, "sums", &in[3], DTRT_F32)))
    return s;
  if (in[0].rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the table needs rank 2 [R, D], got %d", op,
                     (int)in[0].rank);
  const DtTensor *sum = &in[3];
  bool rowwise = sum->rank == 1;
  if (!(sum->dim[0] == in[0].dim[0] &&
        (rowwise || (sum->rank == 2 && sum->dim[1] == in[0].dim[1]))))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the sums need the table's shape or [R], its rows", op);
  r.eps = (float)dtrt_af(a, 0, 1e-10);
  r.init = (float)dtrt_af(a, 2, 0);
  double decay = dtrt_af(a, 1, 0), step = a ? (double)a->step : 0;
  r.lr = (float)(r.lr / (1 + step * decay));
  r.s = sum->data;
  r.m = rowwise ? r.s : NULL; /* marks the sums as one per row */
  if ((s = gather(ctx, op, &in[0], &in[1], &in[2], in[0].dim[1], out, &r)))
    return s;
  return finish(ctx, &r);
}

DTRT_TRACED(sparse_moment, DTRT_TID_KERNEL) {
  const char *op = "sparse_moment";
  DtStatus s;
  Rows r = {.kind = MOMENT};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 1, 1)))
    return s;
  if (in[0].rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the moment needs rank 2 [R, D], got %d", op,
                     (int)in[0].rank);
  r.beta = (float)(1 - dtrt_af(a, 0, 0));
  r.square = dtrt_ai(a, 0, 0) != 0;
  if ((s = gather(ctx, op, &in[0], &in[1], &in[2], in[0].dim[1], out, &r)))
    return s;
  return finish(ctx, &r);
}

DTRT_TRACED(sparse_adam, DTRT_TID_KERNEL) {
  const char *op = "sparse_adam";
  DtStatus s;
  Rows r = {.kind = ADAM};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 5, 5, out, a, 0, 1)) ||
      (s = scalar(ctx, op, in, 4, &r.lr)))
    return s;
  if (in[0].rank != 2)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the table needs rank 2 [R, D], got %d", op,
                     (int)in[0].rank);
  if ((s = dtrt_check_as(ctx, op, "first moment", &in[2], DTRT_F32, in[0].dim, 2)) ||
      (s = dtrt_check_as(ctx, op, "second moment", &in[3], DTRT_F32, in[0].dim, 2)))
    return s;
  r.m = in[2].data;
  r.v = in[3].data;
  r.eps = (float)dtrt_af(a, 0, 1e-8);
  if ((s = gather(ctx, op, &in[0], &in[1], NULL, in[0].dim[1], out, &r)))
    return s;
  return finish(ctx, &r);
}

/* dtrt_staged_bytes of the updates: gather's entries, rows and, with
 * values (all but sparse_adam), sums. */
int64_t dtrt_sparse_staged(const DtTensor *in, int nin, bool values) {
  if (nin < 3 || in[1].rank < 0 || in[1].rank >= DT_MAX_RANK || in[2].rank < 1)
    return 0;
  int64_t n = dtrt_numel(&in[1]), one = n > 0 ? n : 1;
  int64_t nd = n * in[2].dim[in[2].rank - 1];
  if (n < 0)
    return 0;
  return one * (int64_t)(sizeof(Entry) + sizeof(int64_t)) +
         (values ? (nd > 0 ? nd : 1) * (int64_t)sizeof(float) : 0);
}
