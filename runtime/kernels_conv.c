/* kernels_conv.c: convolution and pooling over NCHW tensors. On AVX-512 a
 * convolution and its derivatives run direct, from padded samples, where
 * their shapes allow (direct_fits); otherwise each is one matrix product per
 * group and chunk of the batch (by the generated GEMM that compiled code
 * passes in its attributes, else OpenBLAS's sgemm), on the chunk's im2col
 * columns, which dtrt_parallel_for builds (and col2im folds back) on the
 * context's threads; pooling runs its planes on them.
 * Above each kernel: its inputs, output and how its attributes are decoded.
 * The output must not overlap the inputs. */
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtrt_int.h"

/* The geometry of a convolution or pooling; pairs are [height, width]. */
typedef struct Geom {
  int64_t n, c, h, w; /* the input */
  int64_t o, kh, kw;  /* the weight [o, c / groups, kh, kw]; a pooling's o is c */
  int64_t ho, wo;     /* the result */
  int64_t sh, sw, ph, pw, dh, dw, groups;
  bool ceil; /* a pooling's ceil_mode */
} Geom;

/* Attributes are at most this: a larger one is refused, so that no product
 * of them below overflows. */
#define ATTR_MAX (INT64_C(1) << 30)

static DtStatus need_nchw(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *t) {
  DtStatus s = dtrt_check(ctx, op, what, t, DTRT_F32);
  if (s)
    return s;
  if (t->rank != 4) {
    char b[128];
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s must be f32[N,C,H,W], got %s", op, what,
                     dtrt_type_str(t->dtype, t->dim, t->rank, b, sizeof b));
  }
  for (int d = 0; d < 4; d++)
    if (t->dim[d] < 1 || t->dim[d] > INT_MAX)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: dimension %d of %s is %lld (1 to %d)", op, d, what,
                       (long long)t->dim[d], INT_MAX);
  return DT_OK;
}

/* a->i[k], a->i[k + 1] into v[0], v[1], each from lo to ATTR_MAX. */
static DtStatus attr_pair(DtrtCtx *ctx, const char *op, const char *name, const DtAttrs *a, int k,
                          int64_t lo, int64_t *v0, int64_t *v1) {
  *v0 = a->i[k];
  *v1 = a->i[k + 1];
  if (*v0 < lo || *v1 < lo || *v0 > ATTR_MAX || *v1 > ATTR_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %s [%lld, %lld] is out of range (%lld to %lld)", op,
                     name, (long long)*v0, (long long)*v1, (long long)lo, (long long)ATTR_MAX);
  return DT_OK;
}

/* a / b rounded down, for b > 0. */
static int64_t div_down(int64_t a, int64_t b) { return a >= 0 ? a / b : -((b - 1 - a) / b); }

/* One output length: (in + 2p - e) / s + 1 for a dilated kernel spanning e,
 * rounded down, or with ceil_mode up, dropping a last window that would
 * start in the right padding (PyTorch's rule); 0 or less when no window fits. */
static int64_t out_len(int64_t in, int64_t p, int64_t e, int64_t s, bool ceil) {
  int64_t n = div_down(in + 2 * p - e + (ceil ? s - 1 : 0), s) + 1;
  return ceil && (n - 1) * s >= in + p ? n - 1 : n;
}

/* The result's [ho, wo] from the input's [h, w] and the kernel [kh, kw]
 * dilated by [dh, dw]: the dilated kernel must fit the padded input, or with
 * ceil_mode leave some window that starts in it. */
static DtStatus out_size(DtrtCtx *ctx, const char *op, Geom *g) {
  int64_t eh = g->dh * (g->kh - 1) + 1, ew = g->dw * (g->kw - 1) + 1;
  g->ho = out_len(g->h, g->ph, eh, g->sh, g->ceil);
  g->wo = out_len(g->w, g->pw, ew, g->sw, g->ceil);
  if (g->ho < 1 || g->wo < 1)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: the kernel [%lld, %lld] (dilation [%lld, %lld]) is larger than the "
                     "padded input [%lld, %lld]",
                     op, (long long)g->kh, (long long)g->kw, (long long)g->dh, (long long)g->dw,
                     (long long)(g->h + 2 * g->ph), (long long)(g->w + 2 * g->pw));
  return DT_OK;
}

/* ---- convolution ---- */

/* Decodes a convolution's attributes (ni of them: stride, padding, dilation,
 * groups, then the two of size or kernel) and checks the operands' channels:
 * x [n, c, h, w] and w [o, cg, kh, kw] must be in g already. */
static DtStatus conv_geom(DtrtCtx *ctx, const char *op, const DtAttrs *a, int ni, int64_t cg,
                          Geom *g) {
  DtStatus s;
  if (dtrt_ni(a) != ni)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: expected %d int attributes (stride, padding, dilation, groups%s), "
                     "got %d",
                     op, ni, ni > 7 ? ", and two more" : "", dtrt_ni(a));
  if ((s = attr_pair(ctx, op, "stride", a, 0, 1, &g->sh, &g->sw)) ||
      (s = attr_pair(ctx, op, "padding", a, 2, 0, &g->ph, &g->pw)) ||
      (s = attr_pair(ctx, op, "dilation", a, 4, 1, &g->dh, &g->dw)))
    return s;
  g->groups = a->i[6];
  if (g->groups < 1 || g->c % g->groups || g->o % g->groups || cg * g->groups != g->c)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: groups %lld does not fit %lld input channels, %lld output channels "
                     "and %lld input channels per group",
                     op, (long long)g->groups, (long long)g->c, (long long)g->o, (long long)cg);
  return out_size(ctx, op, g);
}

static void geom_x(Geom *g, const DtTensor *x) {
  g->n = x->dim[0], g->c = x->dim[1], g->h = x->dim[2], g->w = x->dim[3];
}

static void geom_w(Geom *g, const DtTensor *w) {
  g->o = w->dim[0], g->kh = w->dim[2], g->kw = w->dim[3];
}

/* One group and chunk of the batch: samples [n0, n0 + nb) of group gi, whose
 * im2col columns are col, K = cg kh kw rows of P = ho wo columns per sample,
 * row r of sample s at col + r rs + s ss: [K, nb * P] (rs = nb P, ss = P)
 * or [nb, K, P] (rs = P, ss = K P); the chunk's result, or adjoint, is yt
 * [og, nb * P]. */
typedef struct Chunk {
  const Geom *g;
  const float *x; /* im2col's source */
  float *dx;      /* col2im's destination */
  float *col;
  int64_t n0, nb, gi, cg, k, p, rs, ss;
} Chunk;

/* The outputs [*lo, *hi) of a row whose kernel column j reads inside the
 * input: ow with 0 <= ow sw - pw + j dw < w. */
static void inside(const Geom *g, int64_t j, int64_t *lo, int64_t *hi) {
  int64_t off = j * g->dw - g->pw;   /* the input column of ow = 0 */
  *lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
  *hi = off >= g->w ? 0 : (g->w - off + g->sw - 1) / g->sw;
  *hi = *hi < g->wo ? *hi : g->wo;
  *lo = *lo < *hi ? *lo : *hi;
}

/* Rows of col, one (sample, row) pair per index. */
static void im2col_part(void *env, int64_t begin, int64_t end) {
  const Chunk *e = env;
  const Geom *g = e->g;
  for (int64_t t = begin; t < end; t++) {
    int64_t r = t % e->k, s = t / e->k;
    int64_t ci = r / (g->kh * g->kw), i = r / g->kw % g->kh, j = r % g->kw;
    const float *xp = e->x + ((e->n0 + s) * g->c + e->gi * e->cg + ci) * g->h * g->w;
    float *dst = e->col + r * e->rs + s * e->ss;
    int64_t lo, hi;
    inside(g, j, &lo, &hi);
    for (int64_t oh = 0; oh < g->ho; oh++) {
      int64_t ih = oh * g->sh - g->ph + i * g->dh;
      float *d = dst + oh * g->wo;
      if (ih < 0 || ih >= g->h) {
        memset(d, 0, sizeof(float) * (size_t)g->wo);
        continue;
      }
      const float *row = xp + ih * g->w + j * g->dw - g->pw;
      memset(d, 0, sizeof(float) * (size_t)lo);
      if (g->sw == 1)
        memcpy(d + lo, row + lo, sizeof(float) * (size_t)(hi - lo));
      else
        for (int64_t ow = lo; ow < hi; ow++)
          d[ow] = row[ow * g->sw];
      memset(d + hi, 0, sizeof(float) * (size_t)(g->wo - hi));
    }
  }
}

/* col's rows added into dx, one (sample, channel) plane per index. */
static void col2im_part(void *env, int64_t begin, int64_t end) {
  const Chunk *e = env;
  const Geom *g = e->g;
  for (int64_t t = begin; t < end; t++) {
    int64_t ci = t % e->cg, s = t / e->cg;
    float *xp = e->dx + ((e->n0 + s) * g->c + e->gi * e->cg + ci) * g->h * g->w;
    for (int64_t i = 0; i < g->kh; i++)
      for (int64_t j = 0; j < g->kw; j++) {
        const float *src = e->col + ((ci * g->kh + i) * g->kw + j) * e->rs + s * e->ss;
        int64_t lo, hi;
        inside(g, j, &lo, &hi);
        for (int64_t oh = 0; oh < g->ho; oh++) {
          int64_t ih = oh * g->sh - g->ph + i * g->dh;
          if (ih < 0 || ih >= g->h)
            continue;
          float *row = xp + ih * g->w + j * g->dw - g->pw;
          const float *sr = src + oh * g->wo;
          if (g->sw == 1)
            for (int64_t ow = lo; ow < hi; ow++)
              row[ow] += sr[ow];
          else
            for (int64_t ow = lo; ow < hi; ow++)
              row[ow * g->sw] += sr[ow];
        }
      }
  }
}

/* Between y [N, O, P] and the chunk's yt [og, nb * P] of group gi. */
static void gather_y(const Chunk *e, const float *y, float *yt, int64_t og) {
  for (int64_t s = 0; s < e->nb; s++)
    for (int64_t o = 0; o < og; o++)
      memcpy(yt + o * e->nb * e->p + s * e->p, y + ((e->n0 + s) * e->g->o + e->gi * og + o) * e->p,
             sizeof(float) * (size_t)e->p);
}

static void scatter_y(const Chunk *e, const float *yt, float *y, int64_t og) {
  for (int64_t s = 0; s < e->nb; s++)
    for (int64_t o = 0; o < og; o++)
      memcpy(y + ((e->n0 + s) * e->g->o + e->gi * og + o) * e->p, yt + o * e->nb * e->p + s * e->p,
             sizeof(float) * (size_t)e->p);
}

/* Floats of scratch a chunk may take: col and yt together. */
#define CHUNK_FLOATS (INT64_C(1) << 23)

enum { CONV_FWD = DT_CONV_FWD, CONV_DX = DT_CONV_DX, CONV_DW = DT_CONV_DW };

/* The batch chunk conv_run takes at once, and the floats of its scratch
 * block: the columns, the chunk's y and, for dw's sums over chunks by the
 * GEMM, one group's dw. */
static int64_t chunk_of(const Geom *g, int64_t k, int64_t og, int64_t p) {
  int64_t nb = CHUNK_FLOATS / ((k + og) * p);
  nb = nb < 1 ? 1 : nb > g->n ? g->n : nb;
  while (nb > 1 && nb * p > INT_MAX)
    nb /= 2;
  return nb;
}

static int64_t scratch_floats(int kind, const Geom *g, bool gemm) {
  int64_t og = g->o / g->groups, k = g->c / g->groups * g->kh * g->kw, p = g->ho * g->wo;
  int64_t nb = chunk_of(g, k, og, p);
  bool per_sample = gemm && g->groups == 1 && kind != CONV_DW;
  int64_t sum = kind == CONV_DW && gemm && nb < g->n ? og * k : 0;
  return (k + (per_sample ? 0 : og)) * nb * p + sum;
}

static bool direct_fits(int kind, const Geom *g);
static int64_t direct_floats(int kind, const Geom *g);

/* The geometry of a convolution of x, w, y (dims only) and attributes a;
 * false for shapes the kernels would refuse. */
static bool geom_of(const DtTensor *x, const DtTensor *w, const DtTensor *y, const DtAttrs *a,
                    Geom *g) {
  int64_t groups = a && dtrt_ni(a) >= 7 ? a->i[6] : 0;
  if (x->rank != 4 || w->rank != 4 || y->rank != 4 || groups < 1 || x->dim[1] % groups ||
      w->dim[0] % groups || (x->dim[1] / groups * w->dim[2] * w->dim[3] + w->dim[0] / groups) *
                               y->dim[2] * y->dim[3] <= 0)
    return false;
  *g = (Geom){.n = x->dim[0], .c = x->dim[1], .h = x->dim[2], .w = x->dim[3], .o = w->dim[0],
              .kh = w->dim[2], .kw = w->dim[3], .ho = y->dim[2], .wo = y->dim[3],
              .sh = a->i[0], .sw = a->i[1], .ph = a->i[2], .pw = a->i[3], .dh = a->i[4],
              .dw = a->i[5], .groups = groups};
  return true;
}

int64_t dtrt_conv_scratch_bytes(DtConvKind kind, const DtTensor *x, const DtTensor *w,
                                const DtTensor *y, const DtAttrs *a, bool gemm) {
  Geom g;
  if (!geom_of(x, w, y, a, &g))
    return 0;
  int64_t floats = direct_fits(kind, &g) ? direct_floats(kind, &g) : scratch_floats(kind, &g, gemm);
  return floats * (int64_t)sizeof(float);
}

bool dtrt_conv_direct(DtConvKind kind, const DtTensor *x, const DtTensor *w, const DtTensor *y,
                      const DtAttrs *a) {
  Geom g;
  return geom_of(x, w, y, a, &g) && direct_fits(kind, &g);
}

/* c [m, n] = op(a) op(b), or c += it (add, through sum [m, n]), op(a) a's
 * transpose when ta, a's rows lda apart (b's alike): by the generated GEMM
 * when gemm is not NULL, else by OpenBLAS. */
static DtStatus product(DtrtCtx *ctx, DtGemmFn gemm, bool ta, bool tb, int64_t m, int64_t n,
                        int64_t k, const float *a, int64_t lda, const float *b, int64_t ldb,
                        float *c, bool add, float *sum) {
  if (!gemm) {
    ctx->blas_called = true;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, add ? 1.0f : 0.0f, c,
                (int)n);
    return DT_OK;
  }
  float *out = add ? sum : c;
  DtStatus s = gemm(ctx, a, b, out, 1, m, n, k, ta ? 1 : lda, ta ? lda : 1, 0, tb ? 1 : ldb,
                    tb ? ldb : 1, 0, 0, NULL, NULL);
  for (int64_t i = 0; !s && add && i < m * n; i++)
    c[i] += sum[i];
  return s;
}

/* ---- direct convolution (x86-64 with AVX-512) ---- */

/* On a CPU with AVX-512 a convolution whose shape allows it (direct_fits)
 * runs without im2col columns:
 *   CONV_FWD  each sample padded once; each output row in tiles of r pixels
 *             by nv vectors of 16 output channels, nv r = 28 accumulators in
 *             registers (16 x 28, 32 x 14, 48 x 9, 64 x 7), summed over the
 *             input channels and the kernel's taps, from weights packed
 *             [group][block][c][tap][nv 16]
 *   CONV_DX   (stride 1) the forward convolution of dy padded by (k - 1) d - p
 *             with the weights transposed and flipped
 *   CONV_DW   (3 x 3 or 1 x 1, no dilation) 16 output channels by cb
 *             channels' taps in registers (3 x 9, or 16 x 1), over each
 *             sample's pixels, from dy transposed to [pixel][channel];
 *             each sample's sum is added to dw in the order of the samples.
 * Each element of the result is summed by one thread in a fixed order, so
 * its bits do not depend on the number of threads. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE static inline __attribute__((always_inline, target("avx512f,fma")))

enum { LANES = 16, ACCS = 28, TAPS_MAX = 64 };

typedef struct Direct {
  Geom g;                 /* the convolution made: for CONV_DX, the transposed one */
  const float *x, *dy;    /* its input; CONV_DW's adjoint */
  float *w, *y;           /* the packed weights (CONV_DW: dw); the result */
  float *pad, *dyt;       /* padded samples (one per slot, or all); dy transposed */
  float *sums;            /* CONV_DW: each item's [cb kh kw][16] sums */
  int64_t cg, og, kk;     /* input and output channels per group, taps */
  int64_t hp, wp, plane, sample; /* the padded plane; floats of a padded sample */
  int64_t nv, nob, cb;    /* vectors per block, blocks per group, CONV_DW's channels */
  int64_t slots, ogp;     /* CONV_DW: floats of a pixel of dyt */
  int64_t toff[TAPS_MAX]; /* each tap's offset in the padded plane */
} Direct;

/* The first n of 16 lanes. */
static inline __mmask16 first_lanes(int64_t n) {
  return (__mmask16)(n >= LANES ? 0xffff : (1u << n) - 1);
}

/* Sample x [c, h, w] into dst [c, hp, wp] with its padding, then zeros
 * over the slack that tiles' unused pixels read past the last plane; with
 * fresh false dst already holds them (an earlier sample's), and only the
 * pixels are copied. Rows are short: vectors, not memcpy and memset calls. */
AVX512 static void zeros(float *p, int64_t n) {
  for (int64_t k = 0; k < n; k += LANES)
    _mm512_mask_storeu_ps(p + k, first_lanes(n - k), _mm512_setzero_ps());
}

AVX512 static void pad_sample(const Direct *d, int64_t c, const float *x, float *dst, bool fresh) {
  const Geom *g = &d->g;
  int64_t below = d->hp - g->ph - g->h, right = d->wp - g->pw - g->w;
  for (int64_t ci = 0; fresh && ci < c; ci++) {   /* the padding only: pixels come next */
    float *p = dst + ci * d->plane;
    zeros(p, g->ph * d->wp);
    zeros(p + (g->ph + g->h) * d->wp, below * d->wp);
    for (int64_t ih = 0; ih < g->h; ih++) {
      float *row = p + (ih + g->ph) * d->wp;
      zeros(row, g->pw);
      zeros(row + g->pw + g->w, right);
    }
  }
  if (fresh)
    zeros(dst + c * d->plane, d->sample - c * d->plane);
  for (int64_t ci = 0; ci < c; ci++)
    for (int64_t ih = 0; ih < g->h; ih++) {
      const float *src = x + (ci * g->h + ih) * g->w;
      float *row = dst + ci * d->plane + (ih + g->ph) * d->wp + g->pw;
      for (int64_t k = 0; k < g->w; k += LANES) {
        __mmask16 m = first_lanes(g->w - k);
        _mm512_mask_storeu_ps(row + k, m, _mm512_maskz_loadu_ps(m, src + k));
      }
    }
}

/* The nv x r accumulators of r pixels from the padded input xs (at the
 * tile's first pixel), stride sw, by the nv vectors of output channels of
 * the packed weights w, over cin channels: into tmp [nv r][16]. */
INLINE void fwd_tile(const Direct *d, int nv, int r, int sw, const float *xs, const float *w,
                     int64_t cin, float *tmp) {
  __m512 acc[ACCS];
#pragma GCC unroll 32
  for (int k = 0; k < nv * r; k++)
    acc[k] = _mm512_setzero_ps();
  for (int64_t c = 0; c < cin; c++)
    for (int64_t t = 0; t < d->kk; t++, w += nv * LANES) {
      const float *xp = xs + c * d->plane + d->toff[t];
      /* opaque: else GCC keeps an induction variable per pixel, on the stack */
      __asm__("" : "+r"(xp));
      __m512 wv[4];
#pragma GCC unroll 4
      for (int v = 0; v < nv; v++)
        wv[v] = _mm512_loadu_ps(w + v * LANES);
#pragma GCC unroll 32
      for (int i = 0; i < r; i++) {
        __m512 xb = _mm512_set1_ps(xp[i * sw]);
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++)
          acc[v * r + i] = _mm512_fmadd_ps(wv[v], xb, acc[v * r + i]);
      }
    }
#pragma GCC unroll 32
  for (int k = 0; k < nv * r; k++)
    _mm512_storeu_ps(tmp + k * LANES, acc[k]);
}

/* dst[j][i] = src[i][j] for i < nr, j < nc (at most 16 each), row i of src
 * at src + i ss, row j of dst at dst + j ds; sm: the lanes of dst's rows
 * stored (those past nr, zeros). In registers: 4 x 4 blocks transposed in
 * each 128-bit lane, then the lanes. */
INLINE void transpose16(const float *src, int64_t ss, int nr, int nc, float *dst, int64_t ds,
                        __mmask16 sm) {
  __m512 r[16], t[16];
  __mmask16 cm = (__mmask16)((1u << nc) - 1);
  for (int i = 0; i < 16; i++)
    r[i] = i < nr ? _mm512_maskz_loadu_ps(cm, src + i * ss) : _mm512_setzero_ps();
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
    r[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int k = 0; k < 4; k++) {
    __m512 ab02 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    __m512 ab13 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    __m512 cd02 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    __m512 cd13 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
    t[k] = _mm512_shuffle_f32x4(ab02, cd02, 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(ab13, cd13, 0x88);
    t[8 + k] = _mm512_shuffle_f32x4(ab02, cd02, 0xdd);
    t[12 + k] = _mm512_shuffle_f32x4(ab13, cd13, 0xdd);
  }
  for (int j = 0; j < nc; j++)
    _mm512_mask_storeu_ps(dst + j * ds, sm, t[j]);
}

/* One block of output channels (the first `valid` of its nv 16) of one
 * sample: y at the block's first channel, xs the padded sample at the
 * group's first channel, w the block's packed weights. */
INLINE void fwd_block(const Direct *d, int nv, int sw, const float *xs, const float *w, float *y,
                      int64_t valid) {
  const Geom *g = &d->g;
  int r = ACCS / nv;
  float tmp[ACCS * LANES];
  for (int64_t oh = 0; oh < g->ho; oh++)
    for (int64_t ow0 = 0; ow0 < g->wo; ow0 += r) {
      fwd_tile(d, nv, r, sw, xs + oh * g->sh * d->wp + ow0 * sw, w, d->cg, tmp);
      int64_t rn = g->wo - ow0 < r ? g->wo - ow0 : r;
      for (int v = 0; v < nv && v * LANES < valid; v++)
        for (int i0 = 0; i0 < rn; i0 += LANES) {
          int nr = rn - i0 < LANES ? (int)(rn - i0) : LANES;
          int nc = valid - v * LANES < LANES ? (int)(valid - v * LANES) : LANES;
          transpose16(tmp + (v * r + i0) * LANES, LANES, nr, nc,
                      y + (v * LANES * g->ho + oh) * g->wo + ow0 + i0, g->ho * g->wo,
                      (__mmask16)((1u << nr) - 1));
        }
    }
}

AVX512 static void fwd_any(const Direct *d, const float *xs, const float *w, float *y,
                           int64_t valid) {
  switch (d->nv * 2 + d->g.sw - 1) {
  case 2: fwd_block(d, 1, 1, xs, w, y, valid); break;
  case 3: fwd_block(d, 1, 2, xs, w, y, valid); break;
  case 4: fwd_block(d, 2, 1, xs, w, y, valid); break;
  case 5: fwd_block(d, 2, 2, xs, w, y, valid); break;
  case 6: fwd_block(d, 3, 1, xs, w, y, valid); break;
  case 7: fwd_block(d, 3, 2, xs, w, y, valid); break;
  case 8: fwd_block(d, 4, 1, xs, w, y, valid); break;
  default: fwd_block(d, 4, 2, xs, w, y, valid); break;
  }
}

/* Slot s: its share of the samples, each padded into the slot's part. */
static void fwd_part(void *env, int64_t begin, int64_t end) {
  const Direct *d = env;
  const Geom *g = &d->g;
  for (int64_t s = begin; s < end; s++) {
    float *pad = d->pad + s * d->sample;
    int64_t first = s * g->n / d->slots;
    for (int64_t n = first; n < (s + 1) * g->n / d->slots; n++) {
      pad_sample(d, g->c, d->x + n * g->c * g->h * g->w, pad, n == first);
      for (int64_t gi = 0; gi < g->groups; gi++)
        for (int64_t b = 0; b < d->nob; b++) {
          int64_t o0 = b * d->nv * LANES, valid = d->og - o0 < d->nv * LANES ? d->og - o0 : d->nv * LANES;
          fwd_any(d, pad + gi * d->cg * d->plane,
                  d->w + (gi * d->nob + b) * d->cg * d->kk * d->nv * LANES,
                  d->y + (n * g->o + gi * d->og + o0) * g->ho * g->wo, valid);
        }
    }
  }
}

/* cb channels' kh x kw taps (c0 and on) by 16 output channels, over the
 * pixels of one sample: xs the padded sample at channel c0, dyt the
 * sample's transposed adjoint at the block's channels; added into sum
 * [cb kh kw][16]. */
INLINE void dw_tile(const Direct *d, int cb, int kh, int kw, int sw, const float *xs,
                    const float *dyt, float *sum) {
  const Geom *g = &d->g;
  __m512 acc[ACCS];
#pragma GCC unroll 32
  for (int k = 0; k < cb * kh * kw; k++)
    acc[k] = _mm512_setzero_ps();
  for (int64_t oh = 0; oh < g->ho; oh++) {
    const float *row = xs + oh * g->sh * d->wp;
    const float *dr = dyt + oh * g->wo * d->ogp;
    for (int64_t ow = 0; ow < g->wo; ow++) {
      __m512 dv = _mm512_loadu_ps(dr + ow * d->ogp);
      const float *xp = row + ow * sw;
#pragma GCC unroll 16
      for (int c = 0; c < cb; c++)
#pragma GCC unroll 3
        for (int i = 0; i < kh; i++)
#pragma GCC unroll 3
          for (int j = 0; j < kw; j++) {
            int k = (c * kh + i) * kw + j;
            acc[k] = _mm512_fmadd_ps(dv, _mm512_set1_ps(xp[c * d->plane + i * d->wp + j]), acc[k]);
          }
    }
  }
#pragma GCC unroll 32
  for (int k = 0; k < cb * kh * kw; k++)
    _mm512_storeu_ps(sum + k * LANES, _mm512_add_ps(_mm512_loadu_ps(sum + k * LANES), acc[k]));
}

AVX512 static void dw_any(const Direct *d, const float *xs, const float *dyt, float *sum) {
  bool one = d->g.kh == 1, s2 = d->g.sw == 2;
  if (one && d->cb == 16)
    s2 ? dw_tile(d, 16, 1, 1, 2, xs, dyt, sum) : dw_tile(d, 16, 1, 1, 1, xs, dyt, sum);
  else if (one)
    s2 ? dw_tile(d, 4, 1, 1, 2, xs, dyt, sum) : dw_tile(d, 4, 1, 1, 1, xs, dyt, sum);
  else if (d->cb == 3)
    s2 ? dw_tile(d, 3, 3, 3, 2, xs, dyt, sum) : dw_tile(d, 3, 3, 3, 1, xs, dyt, sum);
  else
    s2 ? dw_tile(d, 1, 3, 3, 2, xs, dyt, sum) : dw_tile(d, 1, 3, 3, 1, xs, dyt, sum);
}

/* Sample n's adjoint transposed, zeros past each group's channels. */
AVX512 static void dw_transpose(const Direct *d, int64_t n) {
  const Geom *g = &d->g;
  int64_t p = g->ho * g->wo, nob = (d->og + LANES - 1) / LANES;
  for (int64_t gi = 0; gi < g->groups; gi++)
    for (int64_t o0 = 0; o0 < d->og; o0 += LANES)
      for (int64_t q0 = 0; q0 < p; q0 += LANES)
        transpose16(d->dy + (n * g->o + gi * d->og + o0) * p + q0, p,
                    d->og - o0 < LANES ? (int)(d->og - o0) : LANES,
                    p - q0 < LANES ? (int)(p - q0) : LANES,
                    d->dyt + (n * p + q0) * d->ogp + gi * nob * LANES + o0, d->ogp, 0xffff);
}

/* Sample n padded into its own place, and its adjoint transposed. */
static void dw_prep(void *env, int64_t begin, int64_t end) {
  const Direct *d = env;
  const Geom *g = &d->g;
  for (int64_t n = begin; n < end; n++) {
    pad_sample(d, g->c, d->x + n * g->c * g->h * g->w, d->pad + n * d->sample, true);
    dw_transpose(d, n);
  }
}

/* Slot s: its share of the (group, block of 16 output channels, cb
 * channels) items, each over every sample in order, then into dw. */
static void dw_part(void *env, int64_t begin, int64_t end) {
  const Direct *d = env;
  const Geom *g = &d->g;
  int64_t nob = (d->og + LANES - 1) / LANES, nct = (d->cg + d->cb - 1) / d->cb;
  int64_t items = g->groups * nob * nct, p = g->ho * g->wo, size = d->cb * d->kk * LANES;
  for (int64_t s = begin; s < end; s++) {
    int64_t lo = s * items / d->slots, hi = (s + 1) * items / d->slots;
    memset(d->sums + lo * size, 0, sizeof(float) * (size_t)((hi - lo) * size));
    for (int64_t n = 0; n < g->n; n++)
      for (int64_t it = lo; it < hi; it++) {
        int64_t gi = it / (nob * nct), b = it / nct % nob, ct = it % nct;
        int64_t c0 = ct * d->cb + d->cb > d->cg ? d->cg - d->cb : ct * d->cb;
        dw_any(d, d->pad + n * d->sample + (gi * d->cg + c0) * d->plane,
               d->dyt + n * p * d->ogp + (gi * nob + b) * LANES, d->sums + it * size);
      }
    for (int64_t it = lo; it < hi; it++) {
      int64_t gi = it / (nob * nct), b = it / nct % nob, ct = it % nct;
      /* the last tile ends at the last channel, overlapping the one before */
      int64_t first = ct * d->cb, c0 = first + d->cb > d->cg ? d->cg - d->cb : first;
      for (int64_t o = b * LANES; o < d->og && o < (b + 1) * LANES; o++)
        for (int64_t c = first - c0; c < d->cb; c++)
          for (int64_t t = 0; t < d->kk; t++)
            d->y[((gi * d->og + o) * d->cg + c0 + c) * d->kk + t] =
                d->sums[it * size + (c * d->kk + t) * LANES + o % LANES];
    }
  }
}

/* Whether kind of g runs direct, on this CPU. */
static bool direct_fits(int kind, const Geom *g) {
  int64_t cg = g->c / g->groups, og = g->o / g->groups;
  /* the padded samples' floats, before a product of them could overflow */
  double padded = (double)g->n * (double)(g->c + g->o) *
                  (double)(g->h + g->ho + 2 * (g->ph + g->kh * g->dh)) *
                  (double)(g->w + g->wo + 2 * (g->pw + g->kw * g->dw));
  if (g->sw > 2 || g->kh * g->kw > TAPS_MAX || padded > 0x1p50 ||
      !dtrt_avx512())
    return false;
  if (kind == CONV_DX)
    return g->sh == 1 && g->sw == 1 && g->ph <= (g->kh - 1) * g->dh &&
           g->pw <= (g->kw - 1) * g->dw;
  if (kind == CONV_DW)
    return g->dh == 1 && g->dw == 1 && g->kh == g->kw &&
           (g->kh == 3 || (g->kh == 1 && cg >= 4)) && og >= 1;
  return true;
}

/* The scratch of d, its floats into *floats, the packed weights first. */
static void direct_layout(Direct *d, const Geom *g, int slots) {
  d->g = *g;
  d->cg = g->c / g->groups, d->og = g->o / g->groups, d->kk = g->kh * g->kw;
  d->hp = g->h + 2 * g->ph, d->wp = g->w + 2 * g->pw, d->plane = d->hp * d->wp;
  for (int64_t t = 0; t < d->kk; t++)
    d->toff[t] = t / g->kw * g->dh * d->wp + t % g->kw * g->dw;
  int64_t nvec = (d->og + LANES - 1) / LANES;
  d->nv = nvec < 4 ? nvec : 4;
  d->nob = (nvec + d->nv - 1) / d->nv;
  d->cb = g->kh == 1 ? (d->cg >= 16 ? 16 : 4) : d->cg >= 3 ? 3 : 1;
  d->slots = slots;
  d->ogp = g->groups * nvec * LANES;
  /* what a tile's unused pixels or taps read past the last plane */
  d->sample = g->c * d->plane + ACCS * g->sw + d->wp * g->kh * g->dh + 64;
}

/* The weights w, [o, cin, kh, kw] (or, flip, [cin, o, kh, kw] with the
 * kernel turned by half a turn), into d->w's blocks. */
static void pack_weights(const Direct *d, const float *w, bool flip) {
  int64_t cin = d->cg, og = d->og, kk = d->kk, bw = d->nv * LANES;
  for (int64_t gi = 0; gi < d->g.groups; gi++)
    for (int64_t b = 0; b < d->nob; b++)
      for (int64_t c = 0; c < cin; c++)
        for (int64_t t = 0; t < kk; t++) {
          float *dst = d->w + (((gi * d->nob + b) * cin + c) * kk + t) * bw;
          for (int64_t l = 0; l < bw; l++) {
            int64_t o = b * bw + l;
            dst[l] = o >= og ? 0
                     : flip ? w[((gi * cin + c) * og + o) * kk + kk - 1 - t]
                            : w[((gi * og + o) * cin + c) * kk + t];
          }
        }
}

/* The direct products' geometry (for dx, the convolution of dy padded by
 * (k - 1) d - p with w flipped), their layout on `slots` threads and the
 * floats of their scratch block. */
static int64_t direct_plan(int kind, const Geom *g0, int slots, Geom *g, Direct *d) {
  *g = *g0;
  if (kind == CONV_DX)
    *g = (Geom){.n = g0->n, .c = g0->o, .h = g0->ho, .w = g0->wo, .o = g0->c, .kh = g0->kh,
                .kw = g0->kw, .ho = g0->h, .wo = g0->w, .sh = 1, .sw = 1,
                .ph = (g0->kh - 1) * g0->dh - g0->ph, .pw = (g0->kw - 1) * g0->dw - g0->pw,
                .dh = g0->dh, .dw = g0->dw, .groups = g0->groups};
  direct_layout(d, g, slots);
  if (kind == CONV_DW)
    return g->n * (d->sample + g->ho * g->wo * d->ogp) +
           d->ogp * ((d->cg + d->cb - 1) / d->cb) * d->cb * d->kk;
  return g->groups * d->nob * d->cg * d->kk * d->nv * LANES + slots * d->sample;
}

/* conv_run's products, direct: x (or dx), w (or dw), y (or dy). */
static DtStatus direct_run(DtrtCtx *ctx, const char *op, int kind, const Geom *g0, float *x,
                           float *w, float *y) {
  Geom g;
  Direct d;
  int slots = dtrt_threads(ctx);
  int64_t floats = direct_plan(kind, g0, slots, &g, &d);
  float *scratch = dtrt_scratch_of(ctx, DTRT_SCRATCH_KERNEL, sizeof(float) * (size_t)floats);
  if (!scratch)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for %lld floats of padded samples", op,
                     (long long)floats);
  if (kind == CONV_DW) {
    d.x = x, d.dy = y, d.y = w, d.pad = scratch, d.dyt = scratch + g.n * d.sample;
    d.sums = d.dyt + g.n * g.ho * g.wo * d.ogp;
    dtrt_parallel_for(ctx, g.n, dw_prep, &d);
    dtrt_parallel_for(ctx, slots, dw_part, &d);
    return DT_OK;
  }
  d.w = scratch, d.pad = scratch + g.groups * d.nob * d.cg * d.kk * d.nv * LANES;
  d.x = kind == CONV_DX ? y : x, d.y = kind == CONV_DX ? x : y;
  pack_weights(&d, w, kind == CONV_DX);
  dtrt_parallel_for(ctx, slots, fwd_part, &d);
  return DT_OK;
}

static int64_t direct_floats(int kind, const Geom *g0) {
  Geom g;
  Direct d;
  return direct_plan(kind, g0, 1, &g, &d);
}
#else
static bool direct_fits(int kind, const Geom *g) { return (void)kind, (void)g, false; }
static int64_t direct_floats(int kind, const Geom *g) { return (void)kind, (void)g, 0; }
static DtStatus direct_run(DtrtCtx *ctx, const char *op, int kind, const Geom *g, float *x,
                           float *w, float *y) {
  return (void)ctx, (void)op, (void)kind, (void)g, (void)x, (void)w, (void)y, DT_ERR_ARG;
}
#endif

/* The three products on x (or dx) [N, C, H, W], w (or dw) [O, cg, kh, kw]
 * and y (or dy) [N, O, ho, wo], per group and chunk of the batch:
 *   CONV_FWD  y_g = w_g @ col(x)
 *   CONV_DX   dx += col2im(w_g^T @ dy_g)
 *   CONV_DW   dw_g += dy_g @ col(x)^T
 * made by gemm (the model's generated GEMM) or, NULL, OpenBLAS. Without
 * groups the GEMM makes the first two as a batch of one product per
 * sample, reading and writing y's samples in place: the columns are then
 * [nb, K, P] and nothing is gathered or scattered. */
static DtStatus conv_run(DtrtCtx *ctx, const char *op, int kind, const Geom *g, float *x, float *w,
                         float *y, DtGemmFn gemm) {
  int64_t cg = g->c / g->groups, og = g->o / g->groups, k = cg * g->kh * g->kw, p = g->ho * g->wo;
  if (k > INT_MAX || p > INT_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: a product of %lld by %lld exceeds BLAS's int", op,
                     (long long)k, (long long)p);
  if (direct_fits(kind, g))
    return direct_run(ctx, op, kind, g, x, w, y);
  int64_t nb = chunk_of(g, k, og, p), floats = scratch_floats(kind, g, gemm != NULL);
  bool per_sample = gemm && g->groups == 1 && kind != CONV_DW;
  float *col = dtrt_scratch_of(ctx, DTRT_SCRATCH_KERNEL, sizeof(float) * (size_t)floats);
  if (!col)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for %lld floats of im2col columns", op,
                     (long long)floats);
  float *yt = col + k * nb * p, *dw = yt + og * nb * p;
  if (kind == CONV_DX)
    memset(x, 0, sizeof(float) * (size_t)(g->n * g->c * g->h * g->w));
  DtStatus s = DT_OK;
  for (int64_t n0 = 0; !s && n0 < g->n; n0 += nb) {
    Chunk e = {g, x, x, col, n0, nb < g->n - n0 ? nb : g->n - n0, 0, cg, k, p, 0, p};
    int64_t ld = e.nb * p;
    e.rs = per_sample ? p : ld, e.ss = per_sample ? k * p : p;
    for (e.gi = 0; !s && e.gi < g->groups; e.gi++) {
      float *wg = w + e.gi * og * k, *ys = y + n0 * g->o * p;
      if (kind != CONV_DX)
        dtrt_parallel_for(ctx, e.nb * k, im2col_part, &e);
      if (per_sample && kind == CONV_FWD) {
        s = gemm(ctx, wg, col, ys, e.nb, og, p, k, k, 1, 0, p, 1, k * p, 0, NULL, NULL);
      } else if (per_sample) {
        s = gemm(ctx, wg, ys, col, e.nb, k, p, og, 1, k, 0, p, 1, og * p, 0, NULL, NULL);
        if (!s)
          dtrt_parallel_for(ctx, e.nb * cg, col2im_part, &e);
      } else {
        if (kind != CONV_FWD)
          gather_y(&e, y, yt, og);
        if (kind == CONV_FWD) {
          s = product(ctx, gemm, false, false, og, ld, k, wg, k, col, ld, yt, false, NULL);
          scatter_y(&e, yt, y, og);
        } else if (kind == CONV_DX) {
          s = product(ctx, gemm, true, false, k, ld, og, wg, k, yt, ld, col, false, NULL);
          dtrt_parallel_for(ctx, e.nb * cg, col2im_part, &e);
        } else {
          s = product(ctx, gemm, false, true, og, k, ld, yt, ld, col, ld, wg, n0 > 0, dw);
        }
      }
      if (s) {
        char why[256];
        snprintf(why, sizeof why, "%s", dtrt_errmsg(ctx));
        s = dtrt_fail(ctx, s, "%s: the generated GEMM failed: %s", op, why);
      }
    }
  }
  return s;
}

/* conv2d(x[N,C,H,W], w[O,C/groups,kh,kw]) -> [N,O,ho,wo]: a->i[0..1] the
 * stride, [2..3] the padding, [4..5] the dilation, [6] groups; the output
 * channels of group g read its input channels only. */
DTRT_TRACED(conv2d, DTRT_TID_KERNEL) {
  const char *op = "conv2d";
  DtStatus s;
  Geom g = {0};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 7, 0)) ||
      (s = need_nchw(ctx, op, "input", &in[0])) || (s = need_nchw(ctx, op, "weight", &in[1])))
    return s;
  geom_x(&g, &in[0]);
  geom_w(&g, &in[1]);
  if ((s = conv_geom(ctx, op, a, 7, in[1].dim[1], &g)))
    return s;
  int64_t dim[4] = {g.n, g.o, g.ho, g.wo};
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, 4)))
    return s;
  return conv_run(ctx, op, CONV_FWD, &g, in[0].data, in[1].data, out->data, a ? a->gemm : NULL);
}

/* conv2d_grad_input's geometry: from w, dy's batch and the attributes. */
static DtStatus dx_geom(DtrtCtx *ctx, const char *op, const DtTensor *in, const DtAttrs *a,
                        Geom *g) {
  DtStatus s;
  geom_w(g, &in[0]);
  if (dtrt_ni(a) == 9 && (a->i[6] < 1 || a->i[6] > ATTR_MAX))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: groups %lld is out of range", op, (long long)a->i[6]);
  g->n = in[1].dim[0];
  g->c = in[0].dim[1] * (dtrt_ni(a) == 9 ? a->i[6] : 1);
  if (dtrt_ni(a) == 9 && (s = attr_pair(ctx, op, "size", a, 7, 1, &g->h, &g->w)))
    return s;
  return conv_geom(ctx, op, a, 9, in[0].dim[1], g);
}

/* conv2d_grad_weight's geometry: from x, dy's channels and the attributes. */
static DtStatus dw_geom(DtrtCtx *ctx, const char *op, const DtTensor *in, const DtAttrs *a,
                        Geom *g) {
  DtStatus s;
  geom_x(g, &in[0]);
  g->o = in[1].dim[1];
  if (dtrt_ni(a) == 9 && (s = attr_pair(ctx, op, "kernel", a, 7, 1, &g->kh, &g->kw)))
    return s;
  int64_t groups = dtrt_ni(a) == 9 ? a->i[6] : 1;
  return conv_geom(ctx, op, a, 9, groups >= 1 ? g->c / groups : 0, g);
}

/* Both derivatives of conv2d: in[0] (w for dx, x for dw) and the adjoint dy
 * in[1], its shape and the output's checked against the geometry. */
static DtStatus conv_grad(DtrtCtx *ctx, const char *op, int kind, const DtTensor *in, int nin,
                          DtTensor *out, const DtAttrs *a) {
  bool dx = kind == CONV_DX;
  DtStatus s;
  Geom g = {0};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 9, 0)) ||
      (s = need_nchw(ctx, op, dx ? "weight" : "input", &in[0])) ||
      (s = need_nchw(ctx, op, "adjoint", &in[1])) ||
      (s = (dx ? dx_geom : dw_geom)(ctx, op, in, a, &g)))
    return s;
  int64_t ydim[4] = {g.n, g.o, g.ho, g.wo}, xdim[4] = {g.n, g.c, g.h, g.w},
          wdim[4] = {g.o, g.c / g.groups, g.kh, g.kw};
  if ((s = dtrt_check_as(ctx, op, "adjoint", &in[1], DTRT_F32, ydim, 4)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dx ? xdim : wdim, 4)))
    return s;
  DtGemmFn gemm = a ? a->gemm : NULL;
  if (dx)
    return conv_run(ctx, op, CONV_DX, &g, out->data, in[0].data, in[1].data, gemm);
  return conv_run(ctx, op, CONV_DW, &g, in[0].data, out->data, in[1].data, gemm);
}

/* conv2d_grad_input(w, dy) -> dx[N,C,H,W]: attributes as conv2d's, then
 * a->i[7..8] = [H, W]. */
DTRT_TRACED(conv2d_grad_input, DTRT_TID_KERNEL) {
  return conv_grad(ctx, "conv2d_grad_input", CONV_DX, in, nin, out, a);
}

/* conv2d_grad_weight(x, dy) -> dw[O,C/groups,kh,kw]: attributes as conv2d's,
 * then a->i[7..8] = [kh, kw]. */
DTRT_TRACED(conv2d_grad_weight, DTRT_TID_KERNEL) {
  return conv_grad(ctx, "conv2d_grad_weight", CONV_DW, in, nin, out, a);
}

/* ---- pooling ---- */

enum { MAX_FWD, MAX_DX, AVG_FWD, AVG_DX };

typedef struct Pool {
  Geom g;
  int kind;
  int64_t divisor;    /* avg: divisor_override, 0 for none */
  bool with_pad;      /* avg: count_include_pad */
  const float *x, *y; /* x: the input (max); y: the result or adjoint */
  float *out;
} Pool;

/* Decodes a pooling's attributes for the input [n, c, h, w] in e->g: kernel,
 * stride, padding (a->i[0..5]), for avg_pool2d_grad the two of size, then
 * the optional ones: ceil_mode and dilation (max), or ceil_mode,
 * divisor_override (0: none) and count_include_pad (1 when absent) (avg).
 * The padding is at most half the kernel, as PyTorch has it. */
static DtStatus pool_geom(DtrtCtx *ctx, const char *op, const DtAttrs *a, Pool *e) {
  DtStatus s;
  Geom *g = &e->g;
  bool max = e->kind == MAX_FWD || e->kind == MAX_DX;
  int base = e->kind == AVG_DX ? 8 : 6, ni = dtrt_ni(a);
  if (ni < base || ni > base + 3 || (max && ni == base + 2))
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: expected %d int attributes (kernel, stride, padding%s), then %s; got %d",
                     op, base, base > 6 ? ", size" : "",
                     max ? "ceil_mode and dilation's 2"
                         : "up to 3 (ceil_mode, divisor_override, count_include_pad)",
                     ni);
  if ((s = attr_pair(ctx, op, "kernel", a, 0, 1, &g->kh, &g->kw)) ||
      (s = attr_pair(ctx, op, "stride", a, 2, 1, &g->sh, &g->sw)) ||
      (s = attr_pair(ctx, op, "padding", a, 4, 0, &g->ph, &g->pw)))
    return s;
  if (g->ph > g->kh / 2 || g->pw > g->kw / 2)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: padding [%lld, %lld] is more than half the kernel "
                     "[%lld, %lld]",
                     op, (long long)g->ph, (long long)g->pw, (long long)g->kh, (long long)g->kw);
  int64_t ceil = dtrt_ai(a, base, 0), with_pad = max ? 1 : dtrt_ai(a, base + 2, 1);
  e->divisor = max ? 0 : dtrt_ai(a, base + 1, 0);
  g->dh = g->dw = 1;
  if ((ceil != 0 && ceil != 1) || (with_pad != 0 && with_pad != 1))
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: ceil_mode %lld and count_include_pad %lld must be 0 or 1", op,
                     (long long)ceil, (long long)with_pad);
  if (e->divisor < 0 || e->divisor > ATTR_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: divisor_override %lld is out of range (1 to %lld)", op,
                     (long long)e->divisor, (long long)ATTR_MAX);
  if (max && ni == base + 3 && (s = attr_pair(ctx, op, "dilation", a, base + 1, 1, &g->dh, &g->dw)))
    return s;
  g->ceil = ceil;
  e->with_pad = with_pad;
  g->o = g->c;
  g->groups = 1;
  return out_size(ctx, op, g);
}

/* The first of lo, lo + d, lo + 2d, ... that is 0 or more. */
static int64_t first_in(int64_t lo, int64_t d) { return lo >= 0 ? lo : lo + (-lo + d - 1) / d * d; }

/* Whether v takes a max window's place from best: larger, or NaN (the last
 * NaN wins, as PyTorch has it). */
static inline bool beats(float v, float best) { return v > best || v != v; }

/* Four lanes at a time (GCC's and clang's vector extensions, SSE or NEON):
 * which element of a window wins is data, and branches on it, mispredicted
 * half the time, took most of the time. */
typedef float V4 __attribute__((vector_size(16)));
typedef int32_t M4 __attribute__((vector_size(16)));

static inline V4 load4(const float *p) {
  V4 v;
  memcpy(&v, p, sizeof v);
  return v;
}

static inline void store4(float *p, V4 v) { memcpy(p, &v, sizeof v); }

static inline V4 pick(M4 m, V4 a, V4 b) { return (V4)(((M4)a & m) | ((M4)b & ~m)); }

static inline M4 beats4(V4 v, V4 best) { return (M4)(v > best) | (M4)(v != v); }

/* Max pooling of kernel [2, 2] and stride [2, 2] without padding or
 * dilation, every window whole (the common case), on plane t: the
 * comparisons of pool_part, in the same order, without its bounds. */
static void max_2x2(const Pool *e, int64_t t) {
  const Geom *g = &e->g;
  const float *x = e->x + t * g->h * g->w;
  bool fwd = e->kind == MAX_FWD;
  const float *y = fwd ? NULL : e->y + t * g->ho * g->wo;
  float *out = e->out + t * (fwd ? g->ho * g->wo : g->h * g->w);
  if (!fwd)
    memset(out, 0, sizeof(float) * (size_t)(g->h * g->w));
  for (int64_t oh = 0; oh < g->ho; oh++) {
    const float *r0 = x + 2 * oh * g->w, *r1 = r0 + g->w;
    float *d0 = out + 2 * oh * g->w, *d1 = d0 + g->w;
    int64_t ow = 0;
    for (; ow + 4 <= g->wo; ow += 4) {
      V4 a = load4(r0 + 2 * ow), b = load4(r0 + 2 * ow + 4);
      V4 c = load4(r1 + 2 * ow), d = load4(r1 + 2 * ow + 4);
      V4 v0 = __builtin_shufflevector(a, b, 0, 2, 4, 6), v1 = __builtin_shufflevector(a, b, 1, 3, 5, 7);
      V4 v2 = __builtin_shufflevector(c, d, 0, 2, 4, 6), v3 = __builtin_shufflevector(c, d, 1, 3, 5, 7);
      M4 t1 = beats4(v1, v0);
      V4 b1 = pick(t1, v1, v0);
      M4 t2 = beats4(v2, b1);
      V4 b2 = pick(t2, v2, b1);
      M4 t3 = beats4(v3, b2);
      if (fwd) {
        store4(out + oh * g->wo + ow, pick(t3, v3, b2));
        continue;
      }
      V4 dy = load4(y + oh * g->wo + ow), zero = {0, 0, 0, 0};
      V4 o3 = pick(t3, dy, zero), o2 = pick(t2 & ~t3, dy, zero);
      V4 o1 = pick(t1 & ~t2 & ~t3, dy, zero), o0 = pick(~(t1 | t2 | t3), dy, zero);
      store4(d0 + 2 * ow, __builtin_shufflevector(o0, o1, 0, 4, 1, 5));
      store4(d0 + 2 * ow + 4, __builtin_shufflevector(o0, o1, 2, 6, 3, 7));
      store4(d1 + 2 * ow, __builtin_shufflevector(o2, o3, 0, 4, 1, 5));
      store4(d1 + 2 * ow + 4, __builtin_shufflevector(o2, o3, 2, 6, 3, 7));
    }
    for (; ow < g->wo; ow++) {
      const float v[4] = {r0[2 * ow], r0[2 * ow + 1], r1[2 * ow], r1[2 * ow + 1]};
      float best = v[0];
      int arg = 0;
      for (int k = 1; k < 4; k++)
        if (beats(v[k], best))
          best = v[k], arg = k;
      if (fwd)
        out[oh * g->wo + ow] = best;
      else
        (arg < 2 ? d0 : d1)[2 * ow + arg % 2] = y[oh * g->wo + ow];
    }
  }
}

/* One [h, w] plane of the input per index. A max window holds the input's
 * elements at its dilated kernel's places (none, when they all fall in the
 * padding: -inf and no derivative, as PyTorch gives); an avg window the
 * ones under its kernel, divided by divisor_override, or by the count of
 * its places inside the padded input (count_include_pad: a ceil_mode window
 * reaching past it counts only what is inside) or of its input elements. */
static void pool_part(void *env, int64_t begin, int64_t end) {
  const Pool *e = env;
  const Geom *g = &e->g;
  int64_t hw = g->h * g->w, p = g->ho * g->wo;
  bool fwd = e->kind == MAX_FWD || e->kind == AVG_FWD;
  if ((e->kind == MAX_FWD || e->kind == MAX_DX) && g->kh == 2 && g->kw == 2 && g->sh == 2 &&
      g->sw == 2 && !g->ph && !g->pw && g->dh == 1 && g->dw == 1 && 2 * g->ho <= g->h &&
      2 * g->wo <= g->w) {
    for (int64_t t = begin; t < end; t++)
      max_2x2(e, t);
    return;
  }
  for (int64_t t = begin; t < end; t++) {
    const float *x = e->x ? e->x + t * hw : NULL;
    const float *y = fwd ? NULL : e->y + t * p;
    float *out = e->out + t * (fwd ? p : hw);
    if (y)
      memset(out, 0, sizeof(float) * (size_t)hw);
    for (int64_t oh = 0; oh < g->ho; oh++)
      for (int64_t ow = 0; ow < g->wo; ow++) {
        int64_t h0 = oh * g->sh - g->ph, w0 = ow * g->sw - g->pw, at = oh * g->wo + ow;
        if (e->kind == AVG_FWD || e->kind == AVG_DX) {
          int64_t h1 = h0 + g->kh < g->h + g->ph ? h0 + g->kh : g->h + g->ph,
                  w1 = w0 + g->kw < g->w + g->pw ? w0 + g->kw : g->w + g->pw;
          int64_t places = (h1 - h0) * (w1 - w0);
          h0 = h0 < 0 ? 0 : h0, w0 = w0 < 0 ? 0 : w0;
          h1 = h1 < g->h ? h1 : g->h, w1 = w1 < g->w ? w1 : g->w;
          int64_t div = e->divisor ? e->divisor : e->with_pad ? places : (h1 - h0) * (w1 - w0);
          if (h0 >= h1 || w0 >= w1) {
            if (fwd)
              out[at] = 0;
            continue;
          }
          if (e->kind == AVG_DX) {
            float d = y[at] / (float)div;
            for (int64_t ih = h0; ih < h1; ih++)
              for (int64_t iw = w0; iw < w1; iw++)
                out[ih * g->w + iw] += d;
            continue;
          }
          float sum = 0;
          for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++)
              sum += x[ih * g->w + iw];
          out[at] = sum / (float)div;
          continue;
        }
        int64_t h1 = h0 + g->dh * (g->kh - 1) + 1, w1 = w0 + g->dw * (g->kw - 1) + 1;
        h1 = h1 < g->h ? h1 : g->h, w1 = w1 < g->w ? w1 : g->w;
        h0 = first_in(h0, g->dh), w0 = first_in(w0, g->dw);
        /* the first maximum, or the last NaN (as PyTorch has it) */
        float best = -INFINITY;
        int64_t arg = h0 < h1 && w0 < w1 ? h0 * g->w + w0 : -1;
        for (int64_t ih = h0; ih < h1; ih += g->dh)
          for (int64_t iw = w0; iw < w1; iw += g->dw) {
            float v = x[ih * g->w + iw];
            if (v > best || isnan(v)) {
              best = v;
              arg = ih * g->w + iw;
            }
          }
        if (e->kind == MAX_FWD)
          out[at] = best;
        else if (arg >= 0)
          out[arg] += y[at];
      }
  }
}

/* The pooling kinds: x [N,C,H,W] (or, for avg_pool2d_grad, [N,C] and size),
 * y its result or adjoint. */
static DtStatus pool_op(DtrtCtx *ctx, const char *op, int kind, const DtTensor *in, int nin,
                        DtTensor *out, const DtAttrs *a) {
  DtStatus s;
  Pool e = {.kind = kind};
  Geom *g = &e.g;
  int nt = kind == MAX_DX ? 2 : 1;
  if ((s = dtrt_kbegin(ctx, op, in, nin, nt, nt, out, a, kind == AVG_DX ? 11 : 9, 0)) ||
      (s = need_nchw(ctx, op, kind == AVG_DX ? "adjoint" : "input", &in[0])))
    return s;
  geom_x(g, &in[0]);
  if (kind == AVG_DX && dtrt_ni(a) >= 8 && (s = attr_pair(ctx, op, "size", a, 6, 1, &g->h, &g->w)))
    return s;
  if ((s = pool_geom(ctx, op, a, &e)))
    return s;
  int64_t xdim[4] = {g->n, g->c, g->h, g->w}, ydim[4] = {g->n, g->c, g->ho, g->wo};
  bool fwd = kind == MAX_FWD || kind == AVG_FWD;
  const DtTensor *dy = kind == MAX_DX ? &in[1] : kind == AVG_DX ? &in[0] : NULL;
  if ((dy && (s = dtrt_check_as(ctx, op, "adjoint", dy, DTRT_F32, ydim, 4))) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, fwd ? ydim : xdim, 4)))
    return s;
  e.x = kind == AVG_DX ? NULL : in[0].data;
  e.y = dy ? dy->data : NULL;
  e.out = out->data;
  dtrt_parallel_for(ctx, g->n * g->c, pool_part, &e);
  return DT_OK;
}

/* max_pool2d(x[N,C,H,W]) -> [N,C,ho,wo]: a->i[0..1] the kernel, [2..3] the
 * stride, [4..5] the padding (with -inf), at most half the kernel; then
 * optionally [6] ceil_mode and [7..8] the dilation. */
DTRT_TRACED(max_pool2d, DTRT_TID_KERNEL) {
  return pool_op(ctx, "max_pool2d", MAX_FWD, in, nin, out, a);
}

/* max_pool2d_grad(x, dy) -> dx: dy added at each window's first maximum of x;
 * attributes as max_pool2d's. */
DTRT_TRACED(max_pool2d_grad, DTRT_TID_KERNEL) {
  return pool_op(ctx, "max_pool2d_grad", MAX_DX, in, nin, out, a);
}

/* avg_pool2d(x[N,C,H,W]) -> [N,C,ho,wo]: each window's sum over its divisor;
 * a->i[0..5] as max_pool2d's, then optionally [6] ceil_mode, [7]
 * divisor_override (0: none) and [8] count_include_pad (1 when absent). */
DTRT_TRACED(avg_pool2d, DTRT_TID_KERNEL) {
  return pool_op(ctx, "avg_pool2d", AVG_FWD, in, nin, out, a);
}

/* avg_pool2d_grad(dy) -> dx[N,C,H,W]: each window's dy over its divisor
 * added at its input elements; a->i[0..5] as avg_pool2d's, [6..7] = [H, W],
 * then its optional ones. */
DTRT_TRACED(avg_pool2d_grad, DTRT_TID_KERNEL) {
  return pool_op(ctx, "avg_pool2d_grad", AVG_DX, in, nin, out, a);
}
