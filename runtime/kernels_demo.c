/* kernels_demo.c: DeMo's compression (Peng, Quesnelle and Kingma, "Decoupled
 * Momentum Optimization", 2024): a momentum's orthonormal DCT-II by tiles,
 * the topk coefficients of each tile, and the inverse DCT of what one or
 * several ranks kept. Operands and attributes in dtrt.h; the tiles are
 * dtrt_demo_tiles'. Each tile's transform is two small products with the
 * DCT matrices, in double, each element of a product summed in the order of
 * its terms (the inner loop runs over the elements of a row, so that it
 * vectorises without reordering a sum; an inverse skips the terms whose
 * coefficient is 0, which add nothing). The tiles are independent and split
 * over a fixed number of slots (demo_slots, by the shapes alone), each with
 * its own scratch, run on the context's threads: the bits never depend on
 * the threads or the CPU's vector width. */
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

/* A cached DCT matrix's node (dct_of) takes a cache line before it. */
enum { DCT_HEAD = 64 };

/* At most DEMO_SLOTS slots, and no more than DEMO_SLOT_BYTES of their
 * scratch together unless one slot needs more. */
enum { DEMO_SLOTS = 16, DEMO_SLOT_BYTES = 4 << 20 };

/* A slot's scratch: three tiles of doubles and a tile of 64-bit keys. */
static int64_t slot_bytes(const DtDemoTiles *t) { return 32 * t->c1 * t->c2; }

static int64_t demo_slots(const DtDemoTiles *t) {
  int64_t fit = DEMO_SLOT_BYTES / slot_bytes(t), n = t->tiles < DEMO_SLOTS ? t->tiles : DEMO_SLOTS;
  n = fit < n ? fit : n;
  return n < 1 ? 1 : n;
}

/* The scratch of one call: the DCT matrices of c1 and c2 (one when they
 * are equal) and their transposes, and the slots'. The matrices are the
 * context's (dct_of), made at a size's first call and kept; they are
 * counted here still, the most a call can add to what is held. */
static int64_t scratch_bytes(const DtDemoTiles *t) {
  /* a matrix's node: its line and the allocation's header (ctx.c) */
  int64_t mats = 16 * t->c1 * t->c1 + 2 * DCT_HEAD;
  if (t->c1 != t->c2)
    mats += 16 * t->c2 * t->c2 + 2 * DCT_HEAD;
  return mats + demo_slots(t) * slot_bytes(t);
}

typedef struct Demo {
  DtDemoTiles t;
  int64_t slots;
  const double *d1, *d2;   /* the orthonormal DCT-II matrices of c1 and c2 */
  const double *d1t, *d2t; /* their transposes (the context's, dct_of) */
  char *slot;        /* slots x slot_bytes */
  void *block;
  /* the operands of the running kernel */
  const float *delta, *grad, *packed;
  float lr, beta;
  float *out;
  int64_t ranks; /* demo_sign: the packed rows */
} Demo;

/* One slot's scratch: a tile, a product's middle, its coefficients, and
 * the keys of the selection (the inverses' rows with a coefficient, as
 * bytes, reuse them). */
typedef struct Slot {
  double *x, *y, *c;
  uint64_t *key;
} Slot;

static Slot slot_at(const Demo *g, int64_t s) {
  int64_t per = g->t.c1 * g->t.c2;
  double *x = (double *)(g->slot + s * slot_bytes(&g->t));
  return (Slot){x, x + per, x + 2 * per, (uint64_t *)(x + 3 * per)};
}

/* d[k n] = s_k cos(pi (2n + 1) k / 2N), s_0 = sqrt(1/N), s_k = sqrt(2/N). */
static void dct_matrix(double *d, double *dt, int64_t n) {
  for (int64_t k = 0; k < n; k++)
    for (int64_t j = 0; j < n; j++)
      dt[j * n + k] = d[k * n + j] =
          sqrt((k ? 2.0 : 1.0) / (double)n) *
          cos(3.14159265358979323846 * (double)(2 * j + 1) * (double)k / (double)(2 * n));
}

/* The DCT matrices of one size, cached in the context (DtrtCtx.dct): made
 * once, by dct_matrix, the same bits as made anew; freed with the context. */
struct DtDct {
  DtDct *next;
  int64_t n;
  double *d, *dt;
};

_Static_assert(sizeof(DtDct) <= DCT_HEAD, "a DCT node fits its header");

static DtStatus dct_of(DtrtCtx *ctx, int64_t n, const double **d, const double **dt) {
  DtDct *c = ctx->dct;
  while (c && c->n != n)
    c = c->next;
  if (!c) {
    c = dtrt_alloc_raw(ctx, DCT_HEAD + 16 * (size_t)(n * n));
    if (!c)
      return DT_ERR_NOMEM;
    c->n = n;
    c->d = (double *)((char *)c + DCT_HEAD);
    c->dt = c->d + n * n;
    dct_matrix(c->d, c->dt, n);
    c->next = ctx->dct;
    ctx->dct = c;
  }
  *d = c->d, *dt = c->dt;
  return DT_OK;
}

const double *dtrt_demo_dct(DtrtCtx *ctx, int64_t n) {
  const double *d, *dt;
  return n >= 1 && !dct_of(ctx, n, &d, &dt) ? d : NULL;
}

void dtrt_demo_free(DtrtCtx *ctx) {
  while (ctx->dct) {
    DtDct *next = ctx->dct->next;
    dtrt_free(ctx, ctx->dct);
    ctx->dct = next;
  }
}

static DtStatus demo_begin(DtrtCtx *ctx, const char *op, const int64_t *dim, int rank,
                           const DtAttrs *a, Demo *g) {
  int64_t chunk = dtrt_ai(a, 0, 0), topk = dtrt_ai(a, 1, 0);
  memset(g, 0, sizeof *g);
  if (!dtrt_demo_tiles(dim, rank, dtrt_ai(a, 2, 0) != 0, chunk, topk, &g->t))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: chunk %lld and topk %lld must be at least 1", op,
                     (long long)chunk, (long long)topk);
  const DtDemoTiles *t = &g->t;
  DtStatus s;
  if ((s = dct_of(ctx, t->c1, &g->d1, &g->d1t)) || (s = dct_of(ctx, t->c2, &g->d2, &g->d2t)))
    return dtrt_fail(ctx, s, "%s: no memory for the DCT matrices", op);
  g->slots = demo_slots(t);
  g->block = dtrt_alloc_raw(ctx, (size_t)(g->slots * slot_bytes(t)));
  if (!g->block)
    return DT_ERR_NOMEM;
  g->slot = g->block;
  return DT_OK;
}

/* Element (h, w) of tile q lies at the returned offset plus h cols + w. */
static int64_t tile_base(const DtDemoTiles *t, int64_t q) {
  int64_t tx = t->cols / t->c2, ty = t->rows / t->c1;
  int64_t b = q / (tx * ty), r = q % (tx * ty);
  return (b * t->rows + (r / tx) * t->c1) * t->cols + (r % tx) * t->c2;
}

/* The products, written once and compiled twice (plain and AVX-512): the
 * same adds and multiplies in the same order, so the same bits (ISO C17
 * contracts no multiply and add into one FMA). */
#define ALWAYS static inline __attribute__((always_inline))

/* c = D1 x D2^T through y: y[h] = sum_w x[h w] D2^T[w], c[b] = sum_h D1[b h] y[h]. */
ALWAYS void forward_body(const Demo *g, const double *restrict x, double *restrict y,
                         double *restrict c) {
  int64_t c1 = g->t.c1, c2 = g->t.c2;
  const double *d1 = g->d1, *d2t = g->d2t;
  for (int64_t h = 0; h < c1; h++) {
    double *restrict yr = y + h * c2;
    for (int64_t e = 0; e < c2; e++)
      yr[e] = 0;
    for (int64_t w = 0; w < c2; w++) {
      double v = x[h * c2 + w];
      const double *restrict m = d2t + w * c2;
      for (int64_t e = 0; e < c2; e++)
        yr[e] += v * m[e];
    }
  }
  for (int64_t b = 0; b < c1; b++) {
    double *restrict cr = c + b * c2;
    for (int64_t e = 0; e < c2; e++)
      cr[e] = 0;
    for (int64_t h = 0; h < c1; h++) {
      double v = d1[b * c1 + h];
      const double *restrict yr = y + h * c2;
      for (int64_t e = 0; e < c2; e++)
        cr[e] += v * yr[e];
    }
  }
}

/* x = D1^T c D2 through y, skipping c's zeros and y's rows without a
 * coefficient (their terms are 0, and a sum that starts at +0 is never -0,
 * so adding them changes no bit). nz: c1 bytes. */
ALWAYS void inverse_body(const Demo *g, const double *restrict c, double *restrict y,
                         double *restrict x, unsigned char *restrict nz) {
  int64_t c1 = g->t.c1, c2 = g->t.c2;
  const double *d1t = g->d1t, *d2 = g->d2;
  for (int64_t h = 0; h < c1; h++) {
    double *restrict yr = y + h * c2;
    nz[h] = 0;
    for (int64_t e = 0; e < c2; e++)
      yr[e] = 0;
    for (int64_t w = 0; w < c2; w++) {
      double v = c[h * c2 + w];
      if (v == 0)
        continue;
      nz[h] = 1;
      const double *restrict m = d2 + w * c2;
      for (int64_t e = 0; e < c2; e++)
        yr[e] += v * m[e];
    }
  }
  for (int64_t b = 0; b < c1; b++) {
    double *restrict xr = x + b * c2;
    for (int64_t e = 0; e < c2; e++)
      xr[e] = 0;
    for (int64_t h = 0; h < c1; h++) {
      if (!nz[h])
        continue;
      double v = d1t[b * c1 + h];
      const double *restrict yr = y + h * c2;
      for (int64_t e = 0; e < c2; e++)
        xr[e] += v * yr[e];
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void forward_avx512(const Demo *g, const double *x,
                                                              double *y, double *c) {
  forward_body(g, x, y, c);
}
__attribute__((target("avx512f"))) static void inverse_avx512(const Demo *g, const double *c,
                                                              double *y, double *x,
                                                              unsigned char *nz) {
  inverse_body(g, c, y, x, nz);
}
#define WIDE dtrt_avx512()
#else
#define forward_avx512 forward_plain
#define inverse_avx512 inverse_plain
#define WIDE false
#endif

static void forward_plain(const Demo *g, const double *x, double *y, double *c) {
  forward_body(g, x, y, c);
}
static void inverse_plain(const Demo *g, const double *c, double *y, double *x,
                          unsigned char *nz) {
  inverse_body(g, c, y, x, nz);
}

/* The momentum beta delta + lr g, as torch computes it in f32. */
static inline float momentum(float beta, float lr, float delta, float g) {
  float d = beta * delta;
  return d + lr * g;
}

/* Key of coefficient j: its magnitude as sent (f32) above, ~j below, so
 * that a larger key is a larger magnitude, then the lower index: a total
 * order (a NaN, whose bits are above infinity's, first), so the kept
 * coefficients never depend on how they are found. */
static inline uint64_t key_of(double c, int64_t j) {
  float m = fabsf((float)c);
  uint32_t bits;
  memcpy(&bits, &m, sizeof bits);
  return (uint64_t)bits << 32 | (uint32_t)(UINT32_MAX - (uint32_t)j);
}
static inline int64_t key_index(uint64_t key) { return (int64_t)(UINT32_MAX - (uint32_t)key); }

/* Sift key[at] down the min-heap key[0..n). */
static void sift_down(uint64_t *key, int64_t n, int64_t at) {
  uint64_t v = key[at];
  for (;;) {
    int64_t l = 2 * at + 1;
    if (l >= n)
      break;
    if (l + 1 < n && key[l + 1] < key[l])
      l++;
    if (key[l] >= v)
      break;
    key[at] = key[l];
    at = l;
  }
  key[at] = v;
}

/* The k largest of key[0..n) in key[0..k), in decreasing order: a min-heap
 * of the k largest so far, then sorted by popping its minimum to its end. */
static void top_k(uint64_t *key, int64_t n, int64_t k) {
  for (int64_t j = k / 2 - 1; j >= 0; j--)
    sift_down(key, k, j);
  for (int64_t j = k; j < n; j++)
    if (key[j] > key[0]) {
      key[0] = key[j];
      sift_down(key, k, 0);
    }
  for (int64_t end = k - 1; end > 0; end--) {
    uint64_t v = key[0];
    key[0] = key[end];
    key[end] = v;
    sift_down(key, end, 0);
  }
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

/* Every index of the packed rows an integer of [0, c1 c2), tile by tile,
 * row by row: the first that is not, in that order, named. */
static DtStatus indices_check(DtrtCtx *ctx, const char *op, const Demo *g) {
  const DtDemoTiles *t = &g->t;
  int64_t per = t->c1 * t->c2, row = 2 * t->tiles * t->k;
  for (int64_t q = 0; q < t->tiles; q++)
    for (int64_t r = 0; r < g->ranks; r++)
      for (int64_t j = 0; j < t->k; j++) {
        float f = g->packed[r * row + q * t->k + j];
        if (f >= 0 && f < (float)per && f == floorf(f))
          continue;
        if (g->delta) /* demo_residual's one row */
          return dtrt_fail(ctx, DT_ERR_ARG, "%s: tile %lld's index %g is not one of [0, %lld)", op,
                           (long long)q, (double)f, (long long)per);
        return dtrt_fail(ctx, DT_ERR_ARG, "%s: row %lld, tile %lld: index %g is not one of [0, %lld)",
                         op, (long long)r, (long long)q, (double)f, (long long)per);
      }
  return DT_OK;
}

/* What a kernel does to tile q with slot s's scratch (wide: the AVX-512
 * products). */
typedef void TileFn(const Demo *g, const Slot *s, int64_t q, bool wide);

typedef struct Run {
  const Demo *g;
  TileFn *fn;
} Run;

/* The tiles of each slot in [begin, end), a slot's share of the tiles a
 * contiguous range. */
static void run_slots(void *env, int64_t begin, int64_t end) {
  const Run *r = env;
  const Demo *g = r->g;
  bool wide = WIDE;
  for (int64_t s = begin; s < end; s++) {
    Slot sl = slot_at(g, s);
    for (int64_t q = s * g->t.tiles / g->slots; q < (s + 1) * g->t.tiles / g->slots; q++)
      r->fn(g, &sl, q, wide);
  }
}

static void run_tiles(DtrtCtx *ctx, const Demo *g, TileFn *fn) {
  Run r = {g, fn};
  dtrt_parallel_for(ctx, g->slots, run_slots, &r);
}

/* The tile's momentum into s->x. */
static void load_momentum(const Demo *g, const Slot *s, int64_t q) {
  const DtDemoTiles *t = &g->t;
  int64_t at = tile_base(t, q);
  for (int64_t h = 0; h < t->c1; h++) {
    const float *dl = g->delta + at + h * t->cols, *gr = g->grad + at + h * t->cols;
    double *xr = s->x + h * t->c2;
    for (int64_t w = 0; w < t->c2; w++)
      xr[w] = momentum(g->beta, g->lr, dl[w], gr[w]);
  }
}

static void compress_tile(const Demo *g, const Slot *s, int64_t q, bool wide) {
  const DtDemoTiles *t = &g->t;
  int64_t per = t->c1 * t->c2, P = t->tiles * t->k;
  load_momentum(g, s, q);
  (wide ? forward_avx512 : forward_plain)(g, s->x, s->y, s->c);
  for (int64_t j = 0; j < per; j++)
    s->key[j] = key_of(s->c[j], j);
  top_k(s->key, per, t->k);
  for (int64_t j = 0; j < t->k; j++) {
    int64_t i = key_index(s->key[j]);
    g->out[q * t->k + j] = (float)i;
    g->out[P + q * t->k + j] = (float)s->c[i];
  }
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
  if (!(s = packed_check(ctx, op, "output", out, &g.t, true))) {
    g.delta = in[0].data, g.grad = in[1].data, g.out = out->data;
    g.lr = *(const float *)in[2].data, g.beta = (float)dtrt_af(a, 0, 0);
    run_tiles(ctx, &g, compress_tile);
  }
  dtrt_free(ctx, g.block);
  return s;
}

/* The coefficients of tile q that packed row 0 sent into s->c, the others 0. */
static void load_sent(const Demo *g, const Slot *s, int64_t q) {
  const DtDemoTiles *t = &g->t;
  const float *idx = g->packed, *val = idx + t->tiles * t->k;
  memset(s->c, 0, sizeof *s->c * (size_t)(t->c1 * t->c2));
  for (int64_t j = 0; j < t->k; j++)
    s->c[(int64_t)idx[q * t->k + j]] = val[q * t->k + j];
}

static void residual_tile(const Demo *g, const Slot *s, int64_t q, bool wide) {
  const DtDemoTiles *t = &g->t;
  load_sent(g, s, q);
  (wide ? inverse_avx512 : inverse_plain)(g, s->c, s->y, s->x, (unsigned char *)s->key);
  int64_t at = tile_base(t, q);
  for (int64_t h = 0; h < t->c1; h++) {
    const float *dl = g->delta + at + h * t->cols, *gr = g->grad + at + h * t->cols;
    const double *xr = s->x + h * t->c2;
    float *o = g->out + at + h * t->cols;
    for (int64_t w = 0; w < t->c2; w++)
      o[w] = (float)((double)momentum(g->beta, g->lr, dl[w], gr[w]) - xr[w]);
  }
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
  g.delta = in[0].data, g.grad = in[1].data, g.packed = in[3].data, g.out = out->data;
  g.lr = *(const float *)in[2].data, g.beta = (float)dtrt_af(a, 0, 0);
  g.ranks = 1;
  if (!(s = packed_check(ctx, op, "packed", &in[3], &g.t, true)) &&
      !(s = indices_check(ctx, op, &g)))
    run_tiles(ctx, &g, residual_tile);
  dtrt_free(ctx, g.block);
  return s;
}

/* An element of an inverse DCT within DEMO_ZERO times the tile's sum of
 * |coefficients| is 0 in exact arithmetic: its kept cosines all vanish
 * there (the middle of an odd tile when every kept frequency is odd), and
 * what the double sum leaves is rounding, whose sign means nothing. */
#define DEMO_ZERO 1e-12

static void sign_tile(const Demo *g, const Slot *s, int64_t q, bool wide) {
  const DtDemoTiles *t = &g->t;
  int64_t per = t->c1 * t->c2, row = 2 * t->tiles * t->k;
  double *sum = s->c, *cnt = s->x;
  memset(sum, 0, sizeof *sum * (size_t)per);
  memset(cnt, 0, sizeof *cnt * (size_t)per);
  for (int64_t r = 0; r < g->ranks; r++) {
    const float *idx = g->packed + r * row, *val = idx + t->tiles * t->k;
    for (int64_t j = 0; j < t->k; j++) {
      int64_t i = (int64_t)idx[q * t->k + j];
      sum[i] += val[q * t->k + j];
      cnt[i] += 1;
    }
  }
  double mass = 0;
  for (int64_t j = 0; j < per; j++) {
    sum[j] = cnt[j] > 0 ? sum[j] / cnt[j] : 0;
    mass += fabs(sum[j]);
  }
  (wide ? inverse_avx512 : inverse_plain)(g, sum, s->y, cnt, (unsigned char *)s->key);
  int64_t at = tile_base(t, q);
  for (int64_t h = 0; h < t->c1; h++) {
    const double *v = cnt + h * t->c2;
    float *o = g->out + at + h * t->cols;
    for (int64_t w = 0; w < t->c2; w++)
      o[w] = v[w] > DEMO_ZERO * mass ? 1.0f : v[w] < -DEMO_ZERO * mass ? -1.0f : 0.0f;
  }
}

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
  g.packed = in[0].data, g.out = out->data;
  g.ranks = in[0].dim[0];
  if (!(s = packed_check(ctx, op, "packed", &in[0], &g.t, false)) &&
      !(s = indices_check(ctx, op, &g)))
    run_tiles(ctx, &g, sign_tile);
  dtrt_free(ctx, g.block);
  return s;
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
