/* kernels_shape.c: data movement: reshape, transpose, slice, pad (with a
 * value or copies: reflect, replicate, circular), concat and broadcast. They move
 * 4-byte elements, so f32 and i32 alike; out keeps the dtype. The copying
 * pads' derivatives add f32. */
#include <stdio.h>
#include <string.h>

#include "dtrt_int.h"

/* Fills dst, contiguous with dims dim[0..n), from src read at strides st[0..n)
 * (in elements; 0 repeats). Dims that stay contiguous in src are merged first so
 * the inner loop is as long as possible: a memcpy when it is contiguous. */
static void gather(uint32_t *dst, const uint32_t *src, const int64_t *dim, const int64_t *st,
                   int n) {
  int64_t d[DT_MAX_RANK], s[DT_MAX_RANK], total = 1;
  int m = 0;
  for (int k = 0; k < n; k++) {
    total *= dim[k];
    if (dim[k] == 1)
      continue;
    if (m && s[m - 1] == st[k] * dim[k]) {
      d[m - 1] *= dim[k];
      s[m - 1] = st[k];
    } else {
      d[m] = dim[k];
      s[m++] = st[k];
    }
  }
  if (total == 0)
    return;
  if (m == 0) {
    dst[0] = src[0];
    return;
  }
  int64_t len = d[m - 1], sl = s[m - 1], rows = total / len, idx[DT_MAX_RANK] = {0}, off = 0;
  for (int64_t r = 0; r < rows; r++, dst += len) {
    const uint32_t *sr = src + off;
    if (sl == 1)
      memcpy(dst, sr, (size_t)len * 4);
    else if (sl == 0)
      for (int64_t j = 0; j < len; j++)
        dst[j] = sr[0];
    else
      for (int64_t j = 0; j < len; j++)
        dst[j] = sr[j * sl];
    for (int k = m - 2; k >= 0; k--) {
      off += s[k];
      if (++idx[k] < d[k])
        break;
      off -= s[k] * d[k];
      idx[k] = 0;
    }
  }
}

/* Row-major strides, in elements, of t. */
static void strides(const DtTensor *t, int64_t *st) {
  int64_t s = 1;
  for (int k = t->rank - 1; k >= 0; k--) {
    st[k] = s;
    s *= t->dim[k];
  }
}

/* A shape attribute (reshape, broadcast) must be absent or list out's dims,
 * where -1 matches any dim. */
static DtStatus shape_attr(DtrtCtx *ctx, const char *op, const DtAttrs *a, const DtTensor *out) {
  int ni = dtrt_ni(a);
  if (ni && ni != out->rank)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: shape attribute has %d dims, output has rank %d",
                     op, ni, (int)out->rank);
  for (int k = 0; k < ni; k++)
    if (a->i[k] != -1 && a->i[k] != out->dim[k])
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: shape attribute says %lld at axis %d, output has %lld",
                       op, (long long)a->i[k], k, (long long)out->dim[k]);
  return DT_OK;
}

/* Entry of the one-input kernels: x of any dtype, out of the same dtype. */
static DtStatus begin1(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                       const DtTensor *out, const DtAttrs *a, int maxi) {
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, maxi, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check(ctx, op, "output", out, in[0].dtype)))
    return s;
  return DT_OK;
}

/* reshape(x){shape}: out's shape is the one used; a->i, when given, lists it
 * (-1 matches any dim). Same element count; elements are copied in order. */
DTRT_TRACED(reshape, DTRT_TID_KERNEL) {
  DtStatus s;
  if ((s = begin1(ctx, "reshape", in, nin, out, a, DT_MAX_RANK)) ||
      (s = shape_attr(ctx, "reshape", a, out)))
    return s;
  int64_t n = dtrt_numel(&in[0]);
  if (n != dtrt_numel(out))
    return dtrt_fail(ctx, DT_ERR_ARG, "reshape: input has %lld elements, output %lld",
                     (long long)n, (long long)dtrt_numel(out));
  if (n && out->data != in[0].data)
    memmove(out->data, in[0].data, (size_t)n * 4);
  return DT_OK;
}

/* transpose(x){perm}: a->i[0..rank) = perm, out dim k is x's dim perm[k];
 * negative entries count from the end. */
DTRT_TRACED(transpose, DTRT_TID_KERNEL) {
  const char *op = "transpose";
  DtStatus s;
  if ((s = begin1(ctx, op, in, nin, out, a, DT_MAX_RANK)))
    return s;
  int r = in[0].rank;
  if (dtrt_ni(a) != r)
    return dtrt_fail(ctx, DT_ERR_ARG, "transpose: perm has %d entries, input has rank %d",
                     dtrt_ni(a), r);
  int64_t dim[DT_MAX_RANK], ist[DT_MAX_RANK], st[DT_MAX_RANK];
  bool seen[DT_MAX_RANK] = {false};
  strides(&in[0], ist);
  for (int k = 0; k < r; k++) {
    int ax;
    if ((s = dtrt_axis(ctx, op, a->i[k], r, &ax)))
      return s;
    if (seen[ax])
      return dtrt_fail(ctx, DT_ERR_ARG, "transpose: axis %d appears twice in perm", ax);
    seen[ax] = true;
    dim[k] = in[0].dim[ax];
    st[k] = ist[ax];
  }
  if ((s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, dim, r)))
    return s;
  gather(out->data, in[0].data, dim, st, r);
  return DT_OK;
}

/* Decodes {axis, begin, X} (slice, pad): a->i[0] = axis (negative counts from
 * the end), a->i[1] = begin, a->i[2] = end (slice) or size (pad). */
static DtStatus range_attrs(DtrtCtx *ctx, const char *op, const DtAttrs *a, int rank,
                            int *ax, int64_t *begin, int64_t *x) {
  if (dtrt_ni(a) != 3)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: needs 3 int attributes, got %d", op, dtrt_ni(a));
  *begin = a->i[1];
  *x = a->i[2];
  return rank ? dtrt_axis(ctx, op, a->i[0], rank, ax)
              : dtrt_fail(ctx, DT_ERR_ARG, "%s: input is a scalar", op);
}

/* Copies outer blocks of n elements from src to dst, src blocks sn apart and dst
 * blocks dn apart. */
static void blocks(uint32_t *dst, int64_t dn, const uint32_t *src, int64_t sn, int64_t n,
                   int64_t outer) {
  if (n == 1) {   /* one element a block (a column): no call a block */
    for (int64_t o = 0; o < outer; o++)
      dst[o * dn] = src[o * sn];
    return;
  }
  for (int64_t o = 0; o < outer && n; o++)
    memcpy(dst + o * dn, src + o * sn, (size_t)n * 4);
}

/* slice(x){axis, begin, end}: elements begin <= j < end along axis, with
 * 0 <= begin <= end <= x's dim. */
DTRT_TRACED(slice, DTRT_TID_KERNEL) {
  const char *op = "slice";
  DtStatus s;
  int ax;
  int64_t b = 0, e = 0;
  if ((s = begin1(ctx, op, in, nin, out, a, 3)) ||
      (s = range_attrs(ctx, op, a, in[0].rank, &ax, &b, &e)))
    return s;
  int64_t n = in[0].dim[ax], dim[DT_MAX_RANK];
  if (b < 0 || b > e || e > n)
    return dtrt_fail(ctx, DT_ERR_ARG, "slice: [%lld, %lld) is not inside [0, %lld) on axis %d",
                     (long long)b, (long long)e, (long long)n, ax);
  memcpy(dim, in[0].dim, sizeof dim);
  dim[ax] = e - b;
  if ((s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, dim, in[0].rank)))
    return s;
  int64_t outer = dtrt_elems(in[0].dim, ax), inner = dtrt_elems(dim + ax + 1, in[0].rank - ax - 1);
  blocks(out->data, (e - b) * inner, (const uint32_t *)in[0].data + b * inner, n * inner,
         (e - b) * inner, outer);
  return DT_OK;
}

/* Fills n elements at dst with the element v (4 bytes). */
static void fill(uint32_t *dst, uint32_t v, int64_t n) {
  if (v == 0) {
    memset(dst, 0, (size_t)n * 4);
    return;
  }
  for (int64_t k = 0; k < n; k++)
    dst[k] = v;
}

/* pad(x){axis, begin, size; value}: extends axis to size with x placed at
 * begin, 0 <= begin and begin + x's dim <= size, and value (a->f[0], 0 when
 * absent) everywhere else: for f32 rounded to f32 (-inf and inf too), for
 * i32 an integer of 32 bits. With value 0, the backward of slice. */
DTRT_TRACED(pad, DTRT_TID_KERNEL) {
  const char *op = "pad";
  DtStatus s;
  int ax;
  int64_t b = 0, size = 0;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 3, 1)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check(ctx, op, "output", out, in[0].dtype)) ||
      (s = range_attrs(ctx, op, a, in[0].rank, &ax, &b, &size)))
    return s;
  int64_t n = in[0].dim[ax], dim[DT_MAX_RANK];
  if (b < 0 || size < 0 || b > size - n)
    return dtrt_fail(ctx, DT_ERR_ARG, "pad: %lld elements at %lld do not fit in %lld on axis %d",
                     (long long)n, (long long)b, (long long)size, ax);
  double v = dtrt_af(a, 0, 0);
  uint32_t bits;
  if (in[0].dtype == DTRT_I32) {
    if (!(v >= INT32_MIN && v <= INT32_MAX && v == (double)(int64_t)v))
      return dtrt_fail(ctx, DT_ERR_ARG, "pad: value %g for an i32 tensor is not a 32-bit integer",
                       v);
    int32_t iv = (int32_t)v;
    memcpy(&bits, &iv, 4);
  } else {
    float fv = (float)v;
    memcpy(&bits, &fv, 4);
  }
  memcpy(dim, in[0].dim, sizeof dim);
  dim[ax] = size;
  if ((s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, dim, in[0].rank)))
    return s;
  int64_t outer = dtrt_elems(dim, ax), inner = dtrt_elems(dim + ax + 1, in[0].rank - ax - 1);
  const uint32_t *x = in[0].data;
  uint32_t *y = out->data;
  if (bits == 0 && (size - n) * inner < 64) {   /* short pads of zeros: one fill, then the rows */
    fill(y, 0, outer * size * inner);
    blocks(y + b * inner, size * inner, x, n * inner, n * inner, outer);
    return DT_OK;
  }
  for (int64_t o = 0; o < outer; o++, x += n * inner, y += size * inner) {
    fill(y, bits, b * inner);
    if (n > 0 && inner > 0)
      memcpy(y + b * inner, x, (size_t)(n * inner) * 4);
    fill(y + (b + n) * inner, bits, (size - b - n) * inner);
  }
  return DT_OK;
}

/* ---- pads filled with copies: reflect, replicate, circular ---- */

enum { PAD_REFLECT, PAD_REPLICATE, PAD_CIRCULAR };

/* The element of x, of length n, that position i of its pad at begin holds. */
static int64_t pad_src(int mode, int64_t i, int64_t begin, int64_t n) {
  int64_t j = i - begin;
  if (j >= 0 && j < n)
    return j;
  switch (mode) {
  case PAD_REFLECT: return j < 0 ? -j : 2 * (n - 1) - j;
  case PAD_REPLICATE: return j < 0 ? 0 : n - 1;
  default: return j < 0 ? j + n : j - n;
  }
}

typedef struct CopyPad {
  int mode;
  bool grad;
  int64_t n, size, begin, inner; /* x's length, the pad's, where x starts, elements after axis */
  const void *src;
  void *dst;
} CopyPad;

/* Rows [begin, end) of the dims before the axis: the pad's copies, or the
 * adjoint's elements added into their sources. */
static void copy_pad_part(void *env, int64_t begin, int64_t end) {
  const CopyPad *e = env;
  size_t row = sizeof(float) * (size_t)e->inner;
  for (int64_t o = begin; o < end; o++)
    if (e->grad) {
      const float *dy = (const float *)e->src + o * e->size * e->inner;
      float *dx = (float *)e->dst + o * e->n * e->inner;
      memset(dx, 0, row * (size_t)e->n);
      for (int64_t i = 0; i < e->size; i++) {
        float *d = dx + pad_src(e->mode, i, e->begin, e->n) * e->inner;
        for (int64_t k = 0; k < e->inner; k++)
          d[k] += dy[i * e->inner + k];
      }
    } else {
      const uint32_t *x = (const uint32_t *)e->src + o * e->n * e->inner;
      uint32_t *y = (uint32_t *)e->dst + o * e->size * e->inner;
      for (int64_t i = 0; i < e->size; i++)
        memcpy(y + i * e->inner, x + pad_src(e->mode, i, e->begin, e->n) * e->inner, row);
    }
}

/* pad_MODE(x){axis, begin, size} and pad_MODE_grad(dy){axis, begin, size}:
 * a->i[0] = axis, [1] = begin (x's first element's place), [2] = size (the
 * pad's length; for _grad, dx's); reflect's two sides below x's length,
 * circular's at most it. The forward moves 4-byte elements, _grad adds f32. */
static DtStatus copy_pad(DtrtCtx *ctx, const char *op, int mode, bool grad, const DtTensor *in,
                         int nin, DtTensor *out, const DtAttrs *a) {
  DtStatus s;
  int ax;
  int64_t b = 0, attr = 0;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 3, 0)) ||
      (s = dtrt_check(ctx, op, grad ? "adjoint" : "input", &in[0], grad ? DTRT_F32 : 0)) ||
      (s = range_attrs(ctx, op, a, in[0].rank, &ax, &b, &attr)))
    return s;
  int64_t n = grad ? attr : in[0].dim[ax], size = grad ? in[0].dim[ax] : attr, dim[DT_MAX_RANK];
  if (n < 1 || size < n || b < 0 || b > size - n)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %lld elements at %lld do not fit in %lld on axis %d", op,
                     (long long)n, (long long)b, (long long)size, ax);
  int64_t after = size - n - b;
  if ((mode == PAD_REFLECT && (b >= n || after >= n)) ||
      (mode == PAD_CIRCULAR && (b > n || after > n)))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: padding (%lld, %lld) of %lld elements on axis %d is %s",
                     op, (long long)b, (long long)after, (long long)n, ax,
                     mode == PAD_REFLECT ? "not less than them" : "more than them");
  memcpy(dim, in[0].dim, sizeof dim);
  dim[ax] = grad ? n : size;
  if ((s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, dim, in[0].rank)))
    return s;
  CopyPad e = {.mode = mode,
               .grad = grad,
               .n = n,
               .size = size,
               .begin = b,
               .src = in[0].data,
               .dst = out->data,
               .inner = dtrt_elems(dim + ax + 1, in[0].rank - ax - 1)};
  dtrt_parallel_for(ctx, dtrt_elems(dim, ax), copy_pad_part, &e);
  return DT_OK;
}

/* pad_reflect(x): x mirrored about its first and last elements, which are
 * not repeated. */
DTRT_TRACED(pad_reflect, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_reflect", PAD_REFLECT, false, in, nin, out, a);
}

/* pad_replicate(x): x's first and last elements repeated. */
DTRT_TRACED(pad_replicate, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_replicate", PAD_REPLICATE, false, in, nin, out, a);
}

/* pad_circular(x): x's last elements before it, its first ones after. */
DTRT_TRACED(pad_circular, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_circular", PAD_CIRCULAR, false, in, nin, out, a);
}

/* pad_MODE_grad(dy) -> dx: each element of dy added into the one of dx its
 * place in pad_MODE's result copies. */
DTRT_TRACED(pad_reflect_grad, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_reflect_grad", PAD_REFLECT, true, in, nin, out, a);
}

DTRT_TRACED(pad_replicate_grad, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_replicate_grad", PAD_REPLICATE, true, in, nin, out, a);
}

DTRT_TRACED(pad_circular_grad, DTRT_TID_KERNEL) {
  return copy_pad(ctx, "pad_circular_grad", PAD_CIRCULAR, true, in, nin, out, a);
}

/* concat(x0, ..., xk){axis}: a->i[0] = axis; inputs agree in dtype, rank and
 * every dim but axis; out's axis is the sum. */
DTRT_TRACED(concat, DTRT_TID_KERNEL) {
  const char *op = "concat";
  DtStatus s;
  int ax;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 16, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, "input 0", &in[0], 0)))
    return s;
  if (dtrt_ni(a) != 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "concat: needs the int attribute axis");
  if (in[0].rank == 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "concat: input 0 is a scalar");
  if ((s = dtrt_axis(ctx, op, a->i[0], in[0].rank, &ax)))
    return s;
  int64_t dim[DT_MAX_RANK];
  memcpy(dim, in[0].dim, sizeof dim);
  dim[ax] = 0;
  for (int k = 0; k < nin; k++) {
    char what[32], bk[128], b0[128];
    snprintf(what, sizeof what, "input %d", k);
    if ((s = dtrt_check(ctx, op, what, &in[k], in[0].dtype)))
      return s;
    bool ok = in[k].rank == in[0].rank;
    for (int d = 0; ok && d < in[0].rank; d++)
      ok = d == ax || in[k].dim[d] == in[0].dim[d];
    if (!ok)
      return dtrt_fail(ctx, DT_ERR_ARG, "concat: input %d is %s, input 0 is %s: only axis %d may differ",
                       k, dtrt_type_str(in[k].dtype, in[k].dim, in[k].rank, bk, sizeof bk),
                       dtrt_type_str(in[0].dtype, in[0].dim, in[0].rank, b0, sizeof b0), ax);
    dim[ax] += in[k].dim[ax];
  }
  if ((s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, dim, in[0].rank)))
    return s;
  int64_t outer = dtrt_elems(dim, ax), inner = dtrt_elems(dim + ax + 1, in[0].rank - ax - 1);
  int64_t at = 0;
  for (int k = 0; k < nin; k++) {
    int64_t n = in[k].dim[ax] * inner;
    blocks((uint32_t *)out->data + at, dim[ax] * inner, in[k].data, n, n, outer);
    at += n;
  }
  return DT_OK;
}

/* broadcast(x){shape}: numpy rules: x's dims align with out's from the right,
 * missing leading dims are added, and each of x's dims equals out's or is 1.
 * a->i, when given, lists out's dims (-1 matches any). */
DTRT_TRACED(broadcast, DTRT_TID_KERNEL) {
  const char *op = "broadcast";
  DtStatus s;
  if ((s = begin1(ctx, op, in, nin, out, a, DT_MAX_RANK)) || (s = shape_attr(ctx, op, a, out)))
    return s;
  int r = out->rank, lead = r - in[0].rank;
  if (lead < 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "broadcast: input rank %d exceeds output rank %d",
                     (int)in[0].rank, r);
  int64_t ist[DT_MAX_RANK], st[DT_MAX_RANK];
  strides(&in[0], ist);
  for (int k = 0; k < r; k++) {
    int64_t d = k < lead ? 1 : in[0].dim[k - lead];
    if (d != 1 && d != out->dim[k]) {
      char bi[128], bo[128];
      return dtrt_fail(ctx, DT_ERR_ARG, "broadcast: %s does not broadcast to %s",
                       dtrt_type_str(in[0].dtype, in[0].dim, in[0].rank, bi, sizeof bi),
                       dtrt_type_str(out->dtype, out->dim, r, bo, sizeof bo));
    }
    st[k] = d == 1 ? 0 : ist[k - lead];
  }
  gather(out->data, in[0].data, out->dim, st, r);
  return DT_OK;
}
