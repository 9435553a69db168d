/* tensor.c: checks shared by the kernels, checkpoints, readers and models:
 * element counts without overflow, tensor validation, shape text. */
#include <stdio.h>

#include "dtrt_int.h"

bool dtrt_mul(int64_t a, int64_t b, int64_t *r) {
  if (a < 0 || b < 0 || (a && b > DTRT_MAX_ELEMS / a))
    return false;
  *r = a * b;
  return true;
}

int64_t dtrt_elems(const int64_t *dim, int rank) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    if (!dtrt_mul(n, dim[k], &n))
      return -1;
  return n;
}

const char *dtrt_dtype_name(int dtype) {
  return dtype == DTRT_F32 ? "f32" : dtype == DTRT_I32 ? "i32" : "?";
}

const char *dtrt_dims_str(const int64_t *dim, int rank, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dim[i]);
  if (k < n)
    snprintf(buf + k, n - k, "]");
  return buf;
}

const char *dtrt_type_str(int dtype, const int64_t *dim, int rank, char *buf, size_t n) {
  char dims[128];
  snprintf(buf, n, "%s%s", dtrt_dtype_name(dtype), dtrt_dims_str(dim, rank, dims, sizeof dims));
  return buf;
}

DtStatus dtrt_check(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *t,
                    int dtype) {
  if (!t)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s is NULL", op, what);
  if (t->rank < 0 || t->rank > DT_MAX_RANK)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s has rank %d (0 to %d allowed)", op, what,
                     (int)t->rank, DT_MAX_RANK);
  if (t->dtype != DTRT_F32 && t->dtype != DTRT_I32)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s has unknown dtype code %d", op, what,
                     (int)t->dtype);
  if (dtype && t->dtype != dtype)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s is %s, expected %s", op, what,
                     dtrt_dtype_name(t->dtype), dtrt_dtype_name(dtype));
  for (int k = 0; k < t->rank; k++)
    if (t->dim[k] < 0)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s has negative dimension %lld at axis %d", op,
                       what, (long long)t->dim[k], k);
  int64_t n = dtrt_numel(t);
  if (n < 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s has too many elements", op, what);
  if (n > 0 && !t->data)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s has no data", op, what);
  return DT_OK;
}

DtStatus dtrt_check_as(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *t,
                       int dtype, const int64_t *dim, int rank) {
  DtStatus s = dtrt_check(ctx, op, what, t, dtype);
  if (s)
    return s;
  int same = t->rank == rank;
  for (int k = 0; same && k < rank; k++)
    same = t->dim[k] == dim[k];
  if (!same) {
    char got[128], want[128];
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s is %s, expected %s", op, what,
                     dtrt_type_str(t->dtype, t->dim, t->rank, got, sizeof got),
                     dtrt_type_str(t->dtype, dim, rank, want, sizeof want));
  }
  return DT_OK;
}

bool dtrt_whole(const int64_t *full, int rank) {
  for (int k = 0; k < rank; k++)
    if (full[k])
      return false;
  return true;
}

void dtrt_block(const int64_t *dim, const int64_t *full, const int64_t *begin, int rank,
                int64_t *full_out, int64_t *begin_out) {
  bool whole = dtrt_whole(full, rank);
  for (int k = 0; k < rank; k++) {
    full_out[k] = whole ? dim[k] : full[k];
    begin_out[k] = whole ? 0 : begin[k];
  }
}

DtStatus dtrt_check_block(DtrtCtx *ctx, const char *op, const char *what, const int64_t *dim,
                          const int64_t *full, const int64_t *begin, int rank) {
  bool whole = dtrt_whole(full, rank), fits = true;
  for (int k = 0; k < rank; k++)
    fits = fits && (whole ? !begin[k]
                          : full[k] >= 0 && begin[k] >= 0 && dim[k] <= full[k] - begin[k]);
  if (fits && dtrt_elems(full, rank) >= 0)
    return DT_OK;
  char b[128], d[128], f[128];
  dtrt_dims_str(begin, rank, b, sizeof b);
  dtrt_dims_str(full, rank, f, sizeof f);
  if (!fits && whole)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s begins at %s but has no full shape", op, what, b);
  if (!fits)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s: a block of %s at %s does not fit in %s", op, what,
                     dtrt_dims_str(dim, rank, d, sizeof d), b, f);
  return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s: the whole %s has too many elements", op, what, f);
}

DtStatus dtrt_kbegin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, int minin,
                     int maxin, const DtTensor *out, const DtAttrs *a, int maxi, int maxf) {
  if (nin < minin || nin > maxin) {
    if (minin == maxin)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: expected %d input%s, got %d", op, minin,
                       minin == 1 ? "" : "s", nin);
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: expected %d to %d inputs, got %d", op, minin,
                     maxin, nin);
  }
  if (!in)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: inputs are NULL", op);
  if (!out)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: output is NULL", op);
  int ni = dtrt_ni(a), nf = dtrt_nf(a);
  if (ni < 0 || ni > maxi)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d int attributes (at most %d)", op, ni, maxi);
  if (nf < 0 || nf > maxf)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d float attributes (at most %d)", op, nf, maxf);
  return DT_OK;
}

DtStatus dtrt_axis(DtrtCtx *ctx, const char *op, int64_t axis, int rank, int *ax) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: axis %lld out of range for rank %d", op,
                     (long long)axis, rank);
  *ax = (int)a;
  return DT_OK;
}
