/* kernels_demo.c: DeMo's compression (Peng, Quesnelle and Kingma, "Decoupled
 * Momentum Optimization", 2024): a momentum's orthonormal DCT-II by tiles,
 * the topk coefficients of each tile, and the inverse DCT of what one or
 * several ranks kept. Operands and attributes in dtrt.h; the tiles are
 * dtrt_demo_tiles'. Each tile's transform is two small products with the
 * DCT matrices, in double, in a fixed order: the bits never depend on the
 * threads or the CPU's vector width beyond what a double sum of at most
 * chunk terms rounds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt_int.h"

static int64_t largest_divisor(int64_t n, int64_t chunk) {
  int64_t c = n < chunk ? n : chunk;
  while (c > 1 && n % c)
    c--;
  return c < 1 ? 1 : c;
}

bool dtrt_demo_tiles(const int64_t *dim, int rank, bool stacked, int64_t chunk, int64_t topk,
                     DtDemoTiles *t) {
  if (!dim || !t || rank < (stacked ? 1 : 0) || rank > DT_MAX_RANK || chunk < 1 || topk < 1)
    return false;
  memset(t, 0, sizeof *t);
  t->batch = t->rows = t->cols = 1;
  for (int d = 0; d < rank; d++) {
    if (dim[d] < 0)
      return false;
    if (d == rank - 1 && !(stacked && d == 0))
      t->cols = dim[d];
    else if (d == rank - 2 && !(stacked && d == 0))
      t->rows = dim[d];
    else if (!dtrt_mul(t->batch, dim[d], &t->batch))
      return false;
  }
  t->c1 = largest_divisor(t->rows, chunk);
  t->c2 = largest_divisor(t->cols, chunk);
  int64_t per = t->c1 * t->c2;
  t->k = topk < per ? topk : per;
  int64_t grid = (t->rows / t->c1) * (t->cols / t->c2);
  return dtrt_mul(t->batch, grid, &t->tiles) && dtrt_mul(t->tiles, 2 * t->k, &grid);
}

/* The scratch of one call: the two DCT matrices, three tiles of doubles and
 * a tile of (magnitude, index) pairs. */
static int64_t scratch_bytes(const DtDemoTiles *t) {
  int64_t per = t->c1 * t->c2;
  return 8 * (t->c1 * t->c1 + t->c2 * t->c2 + 3 * per) + 16 * per;
}

typedef struct Rank {
  double mag;
  int64_t idx;
} Rank;

typedef struct Demo {
  DtDemoTiles t;
  double *d1, *d2;   /* the orthonormal DCT-II matrices of c1 and c2 */
  double *x, *y, *c; /* a tile, a product's middle, its coefficients */
  Rank *rank;
  void *block;
} Demo;

/* d[k n] = s_k cos(pi (2n + 1) k / 2N), s_0 = sqrt(1/N), s_k = sqrt(2/N). */
static void dct_matrix(double *d, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    for (int64_t j = 0; j < n; j++)
      d[k * n + j] =
          sqrt((k ? 2.0 : 1.0) / (double)n) *
          cos(3.14159265358979323846 * (double)(2 * j + 1) * (double)k / (double)(2 * n));
}

static DtStatus demo_begin(DtrtCtx *ctx, const char *op, const int64_t *dim, int rank,
                           const DtAttrs *a, Demo *g) {
  int64_t chunk = dtrt_ai(a, 0, 0), topk = dtrt_ai(a, 1, 0);
  if (!dtrt_demo_tiles(dim, rank, dtrt_ai(a, 2, 0) != 0, chunk, topk, &g->t))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: chunk %lld and topk %lld must be at least 1", op,
                     (long long)chunk, (long long)topk);
  const DtDemoTiles *t = &g->t;
  int64_t per = t->c1 * t->c2;
  g->block = dtrt_alloc_raw(ctx, (size_t)scratch_bytes(t));
  if (!g->block)
    return DT_ERR_NOMEM;
  g->d1 = g->block;
  g->d2 = g->d1 + t->c1 * t->c1;
  g->x = g->d2 + t->c2 * t->c2;
  g->y = g->x + per;
  g->c = g->y + per;
  g->rank = (Rank *)(g->c + per);
  dct_matrix(g->d1, t->c1);
  dct_matrix(g->d2, t->c2);
  return DT_OK;
}

/* Element (h, w) of tile q lies at the returned offset of the tensor. */
static int64_t tile_at(const DtDemoTiles *t, int64_t q, int64_t h, int64_t w) {
  int64_t tx = t->cols / t->c2, ty = t->rows / t->c1;
  int64_t b = q / (tx * ty), r = q % (tx * ty);
  return (b * t->rows + (r / tx) * t->c1 + h) * t->cols + (r % tx) * t->c2 + w;
}

/* c = D1 x D2^T (forward) or x = D1^T c D2 (inverse), through g->y. */
static void transform(const Demo *g, const double *in, double *out, bool inverse) {
  int64_t c1 = g->t.c1, c2 = g->t.c2;
  for (int64_t h = 0; h < c1; h++)
    for (int64_t e = 0; e < c2; e++) {
      double s = 0;
      for (int64_t w = 0; w < c2; w++)
        s += in[h * c2 + w] * (inverse ? g->d2[w * c2 + e] : g->d2[e * c2 + w]);
      g->y[h * c2 + e] = s;
    }
  for (int64_t b = 0; b < c1; b++)
    for (int64_t e = 0; e < c2; e++) {
      double s = 0;
      for (int64_t h = 0; h < c1; h++)
        s += (inverse ? g->d1[h * c1 + b] : g->d1[b * c1 + h]) * g->y[h * c2 + e];
      out[b * c2 + e] = s;
    }
}

/* The momentum beta delta + lr g, as torch computes it in f32. */
static inline float momentum(float beta, float lr, float delta, float g) {
  float d = beta * delta;
  return d + lr * g;
}

/* Larger magnitude first, then the lower index: a total order, so the kept
 * coefficients never depend on the sort. */
static int by_magnitude(const void *pa, const void *pb) {
  const Rank *a = pa, *b = pb;
  if (a->mag != b->mag)
    return a->mag > b->mag ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* delta, g of one shape, lr f32[]; the packed row [1, 2 tiles k]. */
static DtStatus momentum_check(DtrtCtx *ctx, const char *op, const DtTensor *in) {
  DtStatus s;
  if ((s = dtrt_check(ctx, op, "delta", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "gradient", &in[1], DTRT_F32, in[0].dim, in[0].rank)) ||
      (s = dtrt_check_as(ctx, op, "lr", &in[2], DTRT_F32, NULL, 0)))
    return s;
  return DT_OK;
}

static DtStatus packed_check(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *p,
                             const DtDemoTiles *t, bool one_row) {
  DtStatus s;
  if ((s = dtrt_check(ctx, op, what, p, DTRT_F32)))
    return s;
  if (p->rank != 2 || p->dim[1] != 2 * t->tiles * t->k || (one_row && p->dim[0] != 1))
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: %s needs shape [%s, %lld] (%lld tiles of %lld x %lld, "
                     "%lld indices and values each), got rank %d",
                     op, what, one_row ? "1" : "ranks", (long long)(2 * t->tiles * t->k),
                     (long long)t->tiles, (long long)t->c1, (long long)t->c2, (long long)t->k,
                     (int)p->rank);
  return DT_OK;
}

/* demo_compress(delta, g, lr f32[]){chunk, topk, stacked; beta} -> f32[1, 2 P],
 * P = tiles k: d = beta delta + lr g, each tile's DCT coefficients of the k
 * largest magnitudes (ties: the lower index), the tiles' indices (within
 * the tile, row-major, as f32) then their values, tile by tile, each tile's
 * by decreasing magnitude. a->i = {chunk, topk, stacked}, a->f[0] = beta. */
DTRT_TRACED(demo_compress, DTRT_TID_KERNEL) {
  const char *op = "demo_compress";
  DtStatus s;
  Demo g;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 3, 3, out, a, 3, 1)) ||
      (s = momentum_check(ctx, op, in)) || (s = demo_begin(ctx, op, in[0].dim, in[0].rank, a, &g)))
    return s;
  const DtDemoTiles *t = &g.t;
  if ((s = packed_check(ctx, op, "output", out, t, true))) {
    dtrt_free(ctx, g.block);
    return s;
  }
  const float *delta = in[0].data, *grad = in[1].data;
  float lr = *(const float *)in[2].data, beta = (float)dtrt_af(a, 0, 0);
  float *idx = out->data, *val = idx + t->tiles * t->k;
  int64_t per = t->c1 * t->c2;
  for (int64_t q = 0; q < t->tiles; q++) {
    for (int64_t h = 0; h < t->c1; h++)
      for (int64_t w = 0; w < t->c2; w++) {
        int64_t at = tile_at(t, q, h, w);
        g.x[h * t->c2 + w] = momentum(beta, lr, delta[at], grad[at]);
      }
    transform(&g, g.x, g.c, false);
    for (int64_t j = 0; j < per; j++)
      g.rank[j] = (Rank){fabs((double)(float)g.c[j]), j};
    qsort(g.rank, (size_t)per, sizeof *g.rank, by_magnitude);
    for (int64_t j = 0; j < t->k; j++) {
      idx[q * t->k + j] = (float)g.rank[j].idx;
      val[q * t->k + j] = (float)g.c[g.rank[j].idx];
    }
  }
  dtrt_free(ctx, g.block);
  return DT_OK;
}

/* demo_residual(delta, g, lr f32[], packed f32[1, 2 P]){chunk, topk, stacked; beta}
 * -> delta's shape: d - IDCT(packed's coefficients, the others 0), d =
 * beta delta + lr g as demo_compress makes it. */
DTRT_TRACED(demo_residual, DTRT_TID_KERNEL) {
  const char *op = "demo_residual";
  DtStatus s;
  Demo g;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 4, 4, out, a, 3, 1)) ||
      (s = momentum_check(ctx, op, in)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)) ||
      (s = demo_begin(ctx, op, in[0].dim, in[0].rank, a, &g)))
    return s;
  const DtDemoTiles *t = &g.t;
  if ((s = packed_check(ctx, op, "packed", &in[3], t, true))) {
    dtrt_free(ctx, g.block);
    return s;
  }
  const float *delta = in[0].data, *grad = in[1].data, *idx = in[3].data;
  const float *val = idx + t->tiles * t->k;
  float lr = *(const float *)in[2].data, beta = (float)dtrt_af(a, 0, 0);
  float *y = out->data;
  int64_t per = t->c1 * t->c2;
  for (int64_t q = 0; q < t->tiles; q++) {
    memset(g.c, 0, sizeof *g.c * (size_t)per);
    for (int64_t j = 0; j < t->k; j++) {
      float f = idx[q * t->k + j];
      if (!(f >= 0 && f < (float)per && f == floorf(f))) {
        dtrt_free(ctx, g.block);
        return dtrt_fail(ctx, DT_ERR_ARG, "%s: tile %lld's index %g is not one of [0, %lld)", op,
                         (long long)q, (double)f, (long long)per);
      }
      g.c[(int64_t)f] = val[q * t->k + j];
    }
    transform(&g, g.c, g.x, true);
    for (int64_t h = 0; h < t->c1; h++)
      for (int64_t w = 0; w < t->c2; w++) {
        int64_t at = tile_at(t, q, h, w);
        y[at] = (float)((double)momentum(beta, lr, delta[at], grad[at]) - g.x[h * t->c2 + w]);
      }
  }
  dtrt_free(ctx, g.block);
  return DT_OK;
}

/* An element of an inverse DCT within DEMO_ZERO times the tile's sum of
 * |coefficients| is 0 in exact arithmetic: its kept cosines all vanish
 * there (the middle of an odd tile when every kept frequency is odd), and
 * what the double sum leaves is rounding, whose sign means nothing. */
#define DEMO_ZERO 1e-12

/* demo_sign(packed f32[R, 2 P]){chunk, topk, stacked, shape} -> f32[shape]: the sign
 * (1, -1 or 0) of the inverse DCT of the average: each coefficient the mean
 * of the values the rows sent to it, over the rows that sent it (torch's
 * scatter_reduce "mean" without the zeros it starts from), 0 where none
 * did; the rows added in order, in double; 0 where the inverse DCT is zero
 * (DEMO_ZERO). a->i = {chunk, topk, stacked, shape...}. */
DTRT_TRACED(demo_sign, DTRT_TID_KERNEL) {
  const char *op = "demo_sign";
  DtStatus s;
  Demo g;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, 3 + DT_MAX_RANK, 0)) ||
      (s = dtrt_check(ctx, op, "output", out, DTRT_F32)) ||
      (s = demo_begin(ctx, op, out->dim, out->rank, a, &g)))
    return s;
  const DtDemoTiles *t = &g.t;
  if ((s = packed_check(ctx, op, "packed", &in[0], t, false))) {
    dtrt_free(ctx, g.block);
    return s;
  }
  int64_t per = t->c1 * t->c2, row = 2 * t->tiles * t->k;
  double *sum = g.c, *cnt = g.x;
  float *y = out->data;
  for (int64_t q = 0; q < t->tiles; q++) {
    memset(sum, 0, sizeof *sum * (size_t)per);
    memset(cnt, 0, sizeof *cnt * (size_t)per);
    for (int64_t r = 0; r < in[0].dim[0]; r++) {
      const float *idx = (const float *)in[0].data + r * row, *val = idx + t->tiles * t->k;
      for (int64_t j = 0; j < t->k; j++) {
        float f = idx[q * t->k + j];
        if (!(f >= 0 && f < (float)per && f == floorf(f))) {
          dtrt_free(ctx, g.block);
          return dtrt_fail(ctx, DT_ERR_ARG,
                           "%s: row %lld, tile %lld: index %g is not one of "
                           "[0, %lld)",
                           op, (long long)r, (long long)q, (double)f, (long long)per);
        }
        sum[(int64_t)f] += val[q * t->k + j];
        cnt[(int64_t)f] += 1;
      }
    }
    double mass = 0;
    for (int64_t j = 0; j < per; j++) {
      sum[j] = cnt[j] > 0 ? sum[j] / cnt[j] : 0;
      mass += fabs(sum[j]);
    }
    transform(&g, sum, cnt, true);
    for (int64_t h = 0; h < t->c1; h++)
      for (int64_t w = 0; w < t->c2; w++) {
        double v = cnt[h * t->c2 + w];
        y[tile_at(t, q, h, w)] = v > DEMO_ZERO * mass ? 1.0f : v < -DEMO_ZERO * mass ? -1.0f : 0.0f;
      }
  }
  dtrt_free(ctx, g.block);
  return DT_OK;
}

int64_t dtrt_demo_staged(const DtTensor *in, int nin, const DtTensor *out, const DtAttrs *a) {
  /* demo_sign's tiles are its output's, the others' their first operand's */
  const DtTensor *x = nin == 1 ? out : &in[0];
  DtDemoTiles t;
  if (!dtrt_demo_tiles(x->dim, x->rank, dtrt_ai(a, 2, 0) != 0, dtrt_ai(a, 0, 0), dtrt_ai(a, 1, 0),
                       &t))
    return 0;
  return scratch_bytes(&t);
}
