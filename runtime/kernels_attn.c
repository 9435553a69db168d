/* kernels_attn.c: scaled dot-product attention by blocks of queries and keys
 * (FlashAttention-2's online softmax): the forward, the rows' log-sum-exp and
 * the backward, none of which holds more than one block of the [Tq, Tk] scores;
 * the forward can write the rows' log-sum-exp beside its output
 * (sdpa_with_lse), the bits sdpa_lse gives, from its own running maxima and
 * sums.
 *
 * Operands are [B, H, T, D] (q [.., Tq, D], k and v [.., Tk, D]); s_ij =
 * scale q_i . k_j, with causal (attribute i[0]) j > i masked (torch's top-left
 * aligned tril(ones(Tq, Tk))); scale is f[0]. An optional last operand, the
 * mask, broadcast to [B, H, Tq, Tk] (right-aligned, each dim 1 or whole), is
 * added to the scores (f32) or keeps those where it is nonzero (i32, torch's
 * boolean mask); a row that sees no key gives zeros. Dropout (f[1] = p > 0,
 * seed i[1], the block's place i[2..9]) keeps probability ij with the
 * element's draw of dtrt_k_dropout's stream over the whole [B, H, Tq, Tk],
 * so the mask is that op's on the scores whatever the layout; the softmax's
 * sums are taken before it, as torch's dropout follows its softmax. Work is cut into items of one
 * (batch, head) and one block of BQ queries (forward, lse, dq) or BK keys (dk,
 * dv), or (the backward in one pass) of one (batch, head) whole; item t runs
 * on chunk t % chunks, each chunk on one thread with its own
 * scratch. Every element of a result is summed by one item in a fixed order,
 * so its bits do not depend on the number of threads. A block of scores is
 * held transposed, [BK][BQ], a row of queries per key, so that the online
 * softmax's loops run along the queries, unit stride, in vectors (GCC
 * vectorises them), with no reduction across a vector; q and dout are
 * transposed by blocks beforehand. The products are register tiles of GCC's
 * vector types (product), of fused multiply-adds; all of it is compiled
 * twice, for AVX-512 and portably, the one chosen at run time (the portable
 * path serves other CPUs and valgrind). */
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

enum { BQ = 64, BK = 64 };
enum { ATTN_FWD, ATTN_LSE, ATTN_DKV, ATTN_DQ, ATTN_DS, ATTN_BH };

/* A product of small blocks (product, below). */
typedef void ProductFn(const float *restrict w, int64_t wo, int64_t wk, const float *restrict y,
                       int64_t ys, int64_t nk, int64_t no, int64_t ne, float *restrict acc,
                       int64_t as, bool fresh, float mul);

typedef struct Attn {
  int kind;
  ProductFn *prod;         /* product, for this CPU */
  const float *q, *k, *v, *o, *lse, *dout;
  float *out;              /* ATTN_FWD: [BH, Tq, D]; ATTN_LSE: [BH, Tq]; ATTN_DS: [BH, Tq, Tk];
                              else the packed grads */
  float *out_lse;          /* ATTN_FWD (sdpa_with_lse): the rows' lse too, [BH, Tq]; or NULL */
  float *dsum;             /* backward: rowsum(dout * o), [BH, Tq] */
  float *dq;               /* backward in one pass: each chunk's dq sums, [chunks][Tq, D] */
  float *qt, *dot;         /* q and (backward) dout by blocks of BQ queries, each
                              transposed: [BH, nqb, D, BQ], zeros after Tq */
  float *scratch;          /* slot floats per chunk */
  int64_t slot, chunks, items;
  int64_t bh, h, tq, tk, d, nqb, nkb;
  float scale;
  bool causal;
  const void *mask;        /* NULL: none; else f32 added or i32 kept where nonzero */
  bool mask_i32;
  int64_t ms[4];           /* the mask's strides along [B, H, Tq, Tk], 0 where broadcast */
  bool drop;               /* dropout: p > 0 */
  uint64_t key, cut;       /* the stream's key; kept when the top 24 bits are >= cut */
  float keep;              /* a kept probability's factor, 1 / (1 - p) */
  int64_t whole[4], at[4]; /* the whole [B, H, Tq, Tk] and this block's place in it */
  int64_t qoff, koff;      /* the first query's and key's positions in the sequence (causal) */
  float *g[3];             /* backward: dq, dk and dv of batch-head 0 */
  int64_t gb[3], gh[3];    /* ... and the floats from one batch's to the next, one head's */
  bool add;                /* backward: add to g instead of setting */
  float *st_m, *st_l, *st_a; /* forward, lse: the rows' running maximum, sum and (forward)
                              unnormalised output, carried from call to call (a ring) */
} Attn;

#define INLINE static inline __attribute__((always_inline))

/* One chunk's scratch: score tiles s and p [BK][BQ] (a block's scores
 * transposed: a row per key, the queries along it), accumulators a1 and a2
 * [max(BQ, BK)][D], and per query of the block its running maximum and sum,
 * a factor, and its lse and dsum (backward). */
typedef struct Tiles {
  float *s, *p, *a1, *a2, *m, *l, *f, *lse, *dsum;
  float *dq; /* A->dq's part, or NULL */
} Tiles;

static int64_t slot_floats(int64_t d) {
  return 2 * BQ * BK + 2 * (BQ > BK ? BQ : BK) * d + 5 * BQ;
}

static Tiles tiles_of(const Attn *A, int64_t chunk) {
  float *f = A->scratch + chunk * A->slot;
  int64_t rows = BQ > BK ? BQ : BK;
  Tiles t = {.s = f, .p = f + BQ * BK};
  t.a1 = t.p + BQ * BK;
  t.a2 = t.a1 + rows * A->d;
  t.m = t.a2 + rows * A->d;
  t.l = t.m + BQ;
  t.f = t.l + BQ;
  t.lse = t.f + BQ;
  t.dsum = t.lse + BQ;
  t.dq = A->dq ? A->dq + chunk * A->tq * A->d : NULL;
  return t;
}

/* A vector of 16 floats (GCC's vector extension: AVX-512 registers where
 * compiled for them, pairs or quads of narrower ones elsewhere), and one at
 * any float's address. */
typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4)));
enum { VL = 16, TO_MAX = 16, TE_MAX = 4 };
_Static_assert(BQ % VL == 0, "a block's queries are whole vectors");
#define UNROLL _Pragma("GCC unroll 16")

/* acc[o][e] = mul (acc[o][e] (0 if fresh) + sum_k w[o wo + k wk] y[k ys + e])
 * for o < to, e < te VL, k < nk, in that order of k: to te accumulators in
 * registers, to and te constants where it is inlined. The sums are fused
 * multiply-adds where the CPU has them (kernels_attn.c is compiled with
 * -ffp-contract=fast), the same for every shape of tile. */
INLINE void tile(int to, int te, const float *restrict w, int64_t wo, int64_t wk,
                 const float *restrict y, int64_t ys, int64_t nk, float *restrict acc,
                 int64_t as, bool fresh, float mul) {
  V16 a[TO_MAX][TE_MAX];
  UNROLL for (int o = 0; o < to; o++)
    UNROLL for (int e = 0; e < te; e++)
      a[o][e] = fresh ? (V16){0} : *(const V16u *)(acc + o * as + e * VL);
  for (int64_t k = 0; k < nk; k++) {
    V16 yv[TE_MAX];
    UNROLL for (int e = 0; e < te; e++)
      yv[e] = *(const V16u *)(y + k * ys + e * VL);
    UNROLL for (int o = 0; o < to; o++) {
      float wv = w[o * wo + k * wk];
      UNROLL for (int e = 0; e < te; e++)
        a[o][e] += wv * yv[e];
    }
  }
  UNROLL for (int o = 0; o < to; o++)
    UNROLL for (int e = 0; e < te; e++)
      *(V16u *)(acc + o * as + e * VL) = a[o][e] * mul;
}

/* Rows o0.. of a product by tiles of to rows and te vectors at column e0,
 * while whole tiles fit in no rows; returns the first row left. */
INLINE int64_t rows_by(int to, int te, const float *restrict w, int64_t wo, int64_t wk,
                       const float *restrict y, int64_t ys, int64_t nk, int64_t o0, int64_t no,
                       int64_t e0, float *restrict acc, int64_t as, bool fresh, float mul) {
  int64_t o = o0;
  for (; o + to <= no; o += to)
    tile(to, te, w + o * wo, wo, wk, y + e0, ys, nk, acc + o * as + e0, as, fresh, mul);
  return o;
}

/* Columns e0 .. e0 + te VL of every row: tiles of as many rows as keep
 * about 16 accumulators (16 rows of one vector, 8 of two, 4 of four), then
 * of 4 rows, then of one. */
INLINE void columns(int te, const float *restrict w, int64_t wo, int64_t wk,
                    const float *restrict y, int64_t ys, int64_t nk, int64_t no, int64_t e0,
                    float *restrict acc, int64_t as, bool fresh, float mul) {
  int to = te == 1 ? 16 : te == 2 ? 8 : 4;
  int64_t o = rows_by(to, te, w, wo, wk, y, ys, nk, 0, no, e0, acc, as, fresh, mul);
  if (to > 4)
    o = rows_by(4, te, w, wo, wk, y, ys, nk, o, no, e0, acc, as, fresh, mul);
  rows_by(1, te, w, wo, wk, y, ys, nk, o, no, e0, acc, as, fresh, mul);
}

/* acc[o][e] = mul (acc[o][e] (0 if fresh) + sum_{k < nk} w[o wo + k wk]
 * y[k ys + e]) for o < no, e < ne: a small product by tiles of 4, 2 or 1
 * vectors of columns, then what is left of e element by element. Each
 * acc[o][e] sums its k in order whatever the tile. */
INLINE void product(const float *restrict w, int64_t wo, int64_t wk, const float *restrict y,
                    int64_t ys, int64_t nk, int64_t no, int64_t ne, float *restrict acc,
                    int64_t as, bool fresh, float mul) {
  int64_t e0 = 0;
  for (; e0 + 4 * VL <= ne; e0 += 4 * VL)
    columns(4, w, wo, wk, y, ys, nk, no, e0, acc, as, fresh, mul);
  if (e0 + 2 * VL <= ne) {
    columns(2, w, wo, wk, y, ys, nk, no, e0, acc, as, fresh, mul);
    e0 += 2 * VL;
  }
  if (e0 + VL <= ne) {
    columns(1, w, wo, wk, y, ys, nk, no, e0, acc, as, fresh, mul);
    e0 += VL;
  }
  for (int64_t o = 0; e0 < ne && o < no; o++) {
    float *ao = acc + o * as;
    for (int64_t e = e0; fresh && e < ne; e++)
      ao[e] = 0;
    for (int64_t k = 0; k < nk; k++) {
      float wv = w[o * wo + k * wk];
      const float *yk = y + k * ys;
      for (int64_t e = e0; e < ne; e++)
        ao[e] += wv * yk[e];
    }
    for (int64_t e = e0; e < ne; e++)
      ao[e] *= mul;
  }
}

/* product, not inlined: its tiles' registers are its own, not shared with
 * the constants of the loops around it (which would leave the tiles reading
 * their operands again from memory). Compiled for AVX-512 and portably,
 * as run_items is. */
/* product with its strides constants where they are those of mix and
 * mix_t (one address for all the rows of a tile). */
INLINE void product_by(const float *restrict w, int64_t wo, int64_t wk,
                       const float *restrict y, int64_t ys, int64_t nk, int64_t no, int64_t ne,
                       float *restrict acc, int64_t as, bool fresh, float mul) {
  if (wo == 1 && wk == BQ)
    product(w, 1, BQ, y, ys, nk, no, ne, acc, as, fresh, mul);
  else if (wo == BQ && wk == 1)
    product(w, BQ, 1, y, ys, nk, no, ne, acc, as, fresh, mul);
  else
    product(w, wo, wk, y, ys, nk, no, ne, acc, as, fresh, mul);
}

__attribute__((noinline)) static void product_plain(const float *restrict w, int64_t wo,
                                                    int64_t wk, const float *restrict y,
                                                    int64_t ys, int64_t nk, int64_t no,
                                                    int64_t ne, float *restrict acc, int64_t as,
                                                    bool fresh, float mul) {
  product_by(w, wo, wk, y, ys, nk, no, ne, acc, as, fresh, mul);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((noinline, target("avx512f,fma"))) static void
product_avx512(const float *restrict w, int64_t wo, int64_t wk, const float *restrict y,
               int64_t ys, int64_t nk, int64_t no, int64_t ne, float *restrict acc, int64_t as,
               bool fresh, float mul) {
  product_by(w, wo, wk, y, ys, nk, no, ne, acc, as, fresh, mul);
}
#else
#define product_avx512 product_plain
#endif

/* dtrt_exp_fast's steps for x <= 88 (what attention takes the exponential
 * of is at most 0, give or take a rounding): 0 below -87, NaN for NaN; one
 * clamp, where the two-sided one vectorises to twice the compares and
 * blends. */
INLINE float exp_of(float x) {
  bool below = x < -87.0f;
  float p = dtrt_exp_core(below ? -87.0f : x);
  return below ? 0.0f : x == x ? p : x;
}

/* The queries of a block of nr that its loops run over: nr in whole vectors.
 * A block's keys are its nc alone. The queries and keys left out of a short
 * block (a sequence shorter than BQ or BK, or its last block) would only add
 * zeros to the sums and -inf to the maxima, so the bits are those of the
 * whole block. */
INLINE int64_t lanes(int64_t nr) { return (nr + VL - 1) / VL * VL; }

/* s[c][r] = scale sum_j x[c][j] yt[j ys + r] for c < nc and r < nq: the
 * scores of keys x (rows of d) and queries yt (transposed), a row per key. */
INLINE void products(ProductFn *prod, const float *restrict x, const float *restrict yt,
                     int64_t ys, int64_t nc, int64_t nq, int64_t d, float scale,
                     float *restrict s) {
  prod(x, d, 1, yt, ys, d, nc, nq, s, BQ, true, scale);
}

/* Sets s[c][r] (c < nc, r < nq) to -inf where key j0 + c, causal, lies after
 * query i0 + r. */
INLINE void mask(float *s, int64_t i0, int64_t j0, int64_t nc, int64_t nq, bool causal) {
  for (int64_t c = 0; causal && c < nc; c++) {
    int64_t end = j0 + c - i0;   /* the queries before key c */
    for (int64_t r = 0; r < (end < nq ? end : nq); r++)
      s[c * BQ + r] = -INFINITY;
  }
}

/* Adds the mask operand to the block of scores s of (batch-head) b, queries
 * i0.. (nr) and keys j0.. (nc): an f32 mask's values, or -inf where an i32
 * mask is zero. */
INLINE void add_mask(const Attn *A, float *restrict s, int64_t b, int64_t i0, int64_t nr,
                     int64_t j0, int64_t nc) {
  if (!A->mask)
    return;
  int64_t base = b / A->h * A->ms[0] + b % A->h * A->ms[1] + (A->koff + j0) * A->ms[3];
  for (int64_t r = 0; r < nr; r++) {
    int64_t o = base + (i0 + r) * A->ms[2];
    if (A->mask_i32) {
      const int32_t *mk = (const int32_t *)A->mask + o;
      for (int64_t c = 0; c < nc; c++)
        s[c * BQ + r] = mk[c * A->ms[3]] ? s[c * BQ + r] : -INFINITY;
    } else {
      const float *mk = (const float *)A->mask + o;
      for (int64_t c = 0; c < nc; c++)
        s[c * BQ + r] += mk[c * A->ms[3]];
    }
  }
}

/* Dropout of a block x of probabilities (or their adjoints) of b, queries
 * i0.. (nr), keys j0.. (nc): element ij kept, times 1 / (1 - p), when draw
 * ((b' H + h') Tq + i') Tk + j' of the stream keeps it, ' the indices in the
 * whole [B, H, Tq, Tk] (dtrt_k_dropout's rule); zero otherwise. */
INLINE void drop_block(const Attn *A, float *restrict x, int64_t b, int64_t i0, int64_t nr,
                       int64_t j0, int64_t nc) {
  if (!A->drop)
    return;
  const int64_t *w = A->whole, *at = A->at;
  int64_t row = ((b / A->h + at[0]) * w[1] + b % A->h + at[1]) * w[2] + at[2] + i0;
  for (int64_t r = 0; r < nr; r++) {
    uint64_t g = (uint64_t)((row + r) * w[3] + at[3] + j0);
    for (int64_t c = 0; c < nc; c++)
      x[c * BQ + r] = dtrt_rand_at(A->key, g + (uint64_t)c) >> 40 >= A->cut
                          ? x[c * BQ + r] * A->keep : 0.0f;
  }
}

/* acc[r][:] += sum_c p[c][r] y[c][:] for r < nr, c < nc, y of rows of length
 * d: a block of probabilities by the keys' rows. */
INLINE void mix(ProductFn *prod, const float *restrict p, const float *restrict y, int64_t nr,
                int64_t nc, int64_t d, float *restrict acc) {
  prod(p, 1, BQ, y, d, nc, nr, d, acc, d, false, 1);
}

/* acc[c][:] += sum_r p[c][r] y[r][:] for r < nr, c < nc: a block by the
 * queries' rows. */
INLINE void mix_t(ProductFn *prod, const float *restrict p, const float *restrict y, int64_t nr,
                  int64_t nc, int64_t d, float *restrict acc) {
  prod(p, BQ, 1, y, d, nr, nc, d, acc, d, false, 1);
}

/* The online softmax of a block of scores s [BK][BQ] (its nc keys and nq
 * queries), every query at once: the running maxima m and sums l move to the
 * block's, s becomes e^(s - m) (zero where -inf), f the factors
 * e^(m_old - m_new) that rescale what was summed before (1 for a query that
 * has seen no key yet). Each loop runs along the queries, unit stride, so
 * that GCC vectorises it; a whole block's bounds are constants (online). */
INLINE void online_by(float *restrict s, float *restrict m, float *restrict l,
                      float *restrict f, int64_t nc, int64_t nq) {
  float mx[BQ], sum[BQ];
  for (int64_t r = 0; r < nq; r++)
    mx[r] = m[r];
  for (int64_t c = 0; c < nc; c++)
    for (int64_t r = 0; r < nq; r++)
      mx[r] = s[c * BQ + r] > mx[r] ? s[c * BQ + r] : mx[r];
  for (int64_t r = 0; r < nq; r++) {
    bool none = mx[r] == -INFINITY;   /* no key seen yet: nothing to sum or rescale */
    f[r] = none ? 1.0f : exp_of(m[r] - mx[r]);
    m[r] = mx[r];
    mx[r] = none ? 0.0f : mx[r];      /* then e^(-inf - 0) = 0 */
    sum[r] = 0;
  }
  for (int64_t c = 0; c < nc; c++)
    for (int64_t r = 0; r < nq; r++) {
      float e = exp_of(s[c * BQ + r] - mx[r]);
      s[c * BQ + r] = e;
      sum[r] += e;
    }
  for (int64_t r = 0; r < nq; r++)
    l[r] = l[r] * f[r] + sum[r];
}

INLINE void online(float *restrict s, float *restrict m, float *restrict l, float *restrict f,
                   int64_t nc, int64_t nq) {
  if (nc == BK && nq == BQ)
    online_by(s, m, l, f, BK, BQ);
  else
    online_by(s, m, l, f, nc, nq);
}

/* The keys [0, end) that queries i0 .. i0 + nr - 1 see (all but causal). */
INLINE int64_t keys_seen(const Attn *A, int64_t i0, int64_t nr) {
  int64_t end = A->qoff + i0 + nr - A->koff;
  return A->causal && end < A->tk ? end : A->tk;
}

/* The block of keys j0.. (nc) of b against the queries i0.. (nr): its
 * scores scaled, masked, transposed into s (lanes(nr) queries). */
INLINE void scores(const Attn *A, float *restrict s, int64_t b, int64_t i0, int64_t nr,
                   int64_t j0, int64_t nc) {
  products(A->prod, A->k + (b * A->tk + j0) * A->d,
           A->qt + (b * A->nqb + i0 / BQ) * A->d * BQ, BQ, nc, lanes(nr), A->d, A->scale, s);
  add_mask(A, s, b, i0, nr, j0, nc);
  mask(s, A->qoff + i0, A->koff + j0, nc, lanes(nr), A->causal);
}

/* The forward (with v; A->out_lse: its rows' log-sum-exp too) or the
 * log-sum-exp (without) of one block of queries; with carried state, the
 * state moved on by this block of keys instead. The lse is the same
 * expression of the same m and l either way, so the same bits. */
INLINE void fwd_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nqb, i0 = item % A->nqb * BQ, d = A->d, row = b * A->tq + i0;
  int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
  int64_t kend = keys_seen(A, i0, nr);
  bool with_v = A->kind == ATTN_FWD, carry = A->st_m != NULL;
  float *a1 = carry && with_v ? A->st_a + row * d : t->a1;
  for (int64_t r = 0; r < BQ; r++)
    t->m[r] = carry && r < nr ? A->st_m[row + r] : -INFINITY;
  for (int64_t r = 0; r < BQ; r++)
    t->l[r] = carry && r < nr ? A->st_l[row + r] : 0;
  if (with_v && !carry)
    memset(a1, 0, sizeof(float) * (size_t)(nr * d));
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    scores(A, t->s, b, i0, nr, j0, nc);
    online(t->s, t->m, t->l, t->f, nc, lanes(nr));
    if (!with_v)
      continue;
    for (int64_t r = 0; r < nr; r++)
      for (int64_t j = 0; j < d; j++)
        a1[r * d + j] *= t->f[r];
    drop_block(A, t->s, b, i0, nr, j0, nc);
    mix(A->prod, t->s, A->v + (b * A->tk + j0) * d, nr, nc, d, a1);
  }
  for (int64_t r = 0; r < nr; r++) {
    if (carry) {
      A->st_m[row + r] = t->m[r], A->st_l[row + r] = t->l[r];
      continue;
    }
    if (!with_v || A->out_lse)
      (with_v ? A->out_lse : A->out)[row + r] =
          t->l[r] > 0 ? t->m[r] + logf(t->l[r]) : -INFINITY;
    if (!with_v)
      continue;
    float inv = t->l[r] > 0 ? 1 / t->l[r] : 0, *o = A->out + (row + r) * d;
    for (int64_t j = 0; j < d; j++)
      o[j] = t->a1[r * d + j] * inv;
  }
}

/* The gradients of (batch, head) b: dq [Tq][D], dk and dv [Tk][D]. */
static float *grad_of(const Attn *A, int64_t b, int which) {
  return A->g[which] + b / A->h * A->gb[which] + b % A->h * A->gh[which];
}

/* The rows' lse and dsum of the block of queries i0.. (nr) of b into t:
 * after nr, lse +inf and dsum 0, so that their probabilities are zeros. */
INLINE void rows_of(const Attn *A, const Tiles *t, int64_t b, int64_t i0, int64_t nr) {
  int64_t row = b * A->tq + i0;
  for (int64_t r = 0; r < BQ; r++) {
    float l = r < nr ? A->lse[row + r] : INFINITY;
    t->lse[r] = l == -INFINITY ? INFINITY : l;   /* a row that sees no key: zeros */
    t->dsum[r] = r < nr ? A->dsum[row + r] : 0;
  }
}

/* Of a block's nc keys and nq queries: P = e^(s - lse) into p, or (ds)
 * dS = P (s - dsum) into s, where s holds dP; a whole block's bounds
 * constants (probabilities). */
INLINE void probabilities_by(float *restrict s, const float *restrict lse,
                             const float *restrict dsum, float *restrict p, int64_t nc,
                             int64_t nq, bool ds) {
  for (int64_t c = 0; c < nc; c++)
    for (int64_t r = 0; r < nq; r++)
      if (ds)
        s[c * BQ + r] = p[c * BQ + r] * (s[c * BQ + r] - dsum[r]);
      else
        p[c * BQ + r] = exp_of(s[c * BQ + r] - lse[r]);
}

INLINE void probabilities(float *restrict s, const float *restrict lse,
                          const float *restrict dsum, float *restrict p, int64_t nc, int64_t nq,
                          bool ds) {
  if (nc == BK && nq == BQ)
    probabilities_by(s, lse, dsum, p, BK, BQ, ds);
  else
    probabilities_by(s, lse, dsum, p, nc, nq, ds);
}

/* P, then dS of the block of queries i0.. (nr) and keys j0.. (nc) of b,
 * transposed (a row per key), rows_of's lse and dsum in t: P after dropout
 * into t->p, dS into t->s. With dropout, dP is the dropped probabilities'
 * adjoint dropped alike, and dsum (dout . out) is still rowsum(P dP). */
INLINE void block_grads(const Attn *A, const Tiles *t, int64_t b, int64_t i0, int64_t nr,
                        int64_t j0, int64_t nc) {
  float *restrict s = t->s, *restrict p = t->p;
  const float *restrict lse = t->lse, *restrict dsum = t->dsum;
  int64_t nq = lanes(nr);
  scores(A, s, b, i0, nr, j0, nc);
  probabilities(s, lse, dsum, p, nc, nq, false);
  products(A->prod, A->v + (b * A->tk + j0) * A->d,
           A->dot + (b * A->nqb + i0 / BQ) * A->d * BQ, BQ, nc, nq, A->d, 1, s);
  drop_block(A, s, b, i0, nr, j0, nc);
  probabilities(s, lse, dsum, p, nc, nq, true);
  drop_block(A, p, b, i0, nr, j0, nc);
}

/* dk and dv of the block of keys j0.. of b, over every block of queries
 * that sees it; with dq (a chunk's sums, [Tq, D]), each pair's dS also added
 * to the block of queries' rows of dq, where they see the block, as dq_item
 * adds it (bh_item). */
INLINE void key_block(const Attn *A, const Tiles *t, int64_t b, int64_t j0, float *dq) {
  int64_t d = A->d, nc = A->tk - j0 < BK ? A->tk - j0 : BK;
  memset(t->a1, 0, sizeof(float) * (size_t)(nc * d));
  memset(t->a2, 0, sizeof(float) * (size_t)(nc * d));
  int64_t first = A->causal ? A->koff + j0 - A->qoff : 0;   /* the first query seeing j0 */
  for (int64_t i0 = first > 0 ? first / BQ * BQ : 0; i0 < A->tq; i0 += BQ) {
    int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ, row = b * A->tq + i0;
    rows_of(A, t, b, i0, nr);
    block_grads(A, t, b, i0, nr, j0, nc);
    mix_t(A->prod, t->p, A->dout + row * d, nr, nc, d, t->a2);
    mix_t(A->prod, t->s, A->q + row * d, nr, nc, d, t->a1);
    if (dq && j0 < keys_seen(A, i0, nr))
      mix(A->prod, t->s, A->k + (b * A->tk + j0) * d, nr, nc, d, dq + i0 * d);
  }
  float *dk = grad_of(A, b, 1) + j0 * d, *dv = grad_of(A, b, 2) + j0 * d;
  for (int64_t e = 0; e < nc * d; e++) {
    dk[e] = (A->add ? dk[e] : 0) + t->a1[e] * A->scale;
    dv[e] = (A->add ? dv[e] : 0) + t->a2[e];
  }
}

/* dk and dv of one block of keys. */
INLINE void dkv_item(const Attn *A, const Tiles *t, int64_t item) {
  key_block(A, t, item / A->nkb, item % A->nkb * BK, NULL);
}

/* dq, dk and dv of one (batch, head) b in one pass over its blocks of keys
 * (key_block): dq_item's pairs are among dkv_item's, in the same order of
 * keys for each block of queries, its sums kept in the chunk's t->dq until
 * scaled and added: the bits of both passes, with q k^T, P and dP made once
 * a pair instead of twice. */
INLINE void bh_item(const Attn *A, const Tiles *t, int64_t b) {
  float *out = grad_of(A, b, 0);
  memset(t->dq, 0, sizeof(float) * (size_t)(A->tq * A->d));
  for (int64_t j0 = 0; j0 < A->tk; j0 += BK)
    key_block(A, t, b, j0, t->dq);
  for (int64_t e = 0; e < A->tq * A->d; e++)
    out[e] = (A->add ? out[e] : 0) + t->dq[e] * A->scale;
}

/* dq of one block of queries, over every block of keys it sees. */
INLINE void dq_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nqb, i0 = item % A->nqb * BQ, d = A->d;
  int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
  int64_t kend = keys_seen(A, i0, nr);
  memset(t->a1, 0, sizeof(float) * (size_t)(nr * d));
  rows_of(A, t, b, i0, nr);
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    block_grads(A, t, b, i0, nr, j0, nc);
    mix(A->prod, t->s, A->k + (b * A->tk + j0) * d, nr, nc, d, t->a1);
  }
  float *dq = grad_of(A, b, 0) + i0 * d;
  for (int64_t e = 0; e < nr * d; e++)
    dq[e] = (A->add ? dq[e] : 0) + t->a1[e] * A->scale;
}

/* dS of one block of queries, over every block of keys, into out [Tq, Tk]
 * of b: the scores' adjoint, zero where a key is masked or not seen. */
INLINE void ds_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nqb, i0 = item % A->nqb * BQ;
  int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
  rows_of(A, t, b, i0, nr);
  for (int64_t j0 = 0; j0 < A->tk; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    block_grads(A, t, b, i0, nr, j0, nc);
    for (int64_t r = 0; r < nr; r++) {
      float *o = A->out + (b * A->tq + i0 + r) * A->tk + j0;
      for (int64_t c = 0; c < nc; c++)
        o[c] = t->s[c * BQ + r];
    }
  }
}

INLINE void run_items(const Attn *A, int64_t chunk) {
  Tiles t = tiles_of(A, chunk);
  for (int64_t item = chunk; item < A->items; item += A->chunks)
    switch (A->kind) {
    case ATTN_FWD: case ATTN_LSE: fwd_item(A, &t, item); break;
    case ATTN_DKV: dkv_item(A, &t, item); break;
    case ATTN_DS: ds_item(A, &t, item); break;
    case ATTN_BH: bh_item(A, &t, item); break;
    default: dq_item(A, &t, item); break;
    }
}

static void run_plain(const Attn *A, int64_t chunk) { run_items(A, chunk); }

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,fma"))) static void run_avx512(const Attn *A, int64_t chunk) {
  run_items(A, chunk);
}
#else
static void run_avx512(const Attn *A, int64_t chunk) { run_items(A, chunk); }
#endif

static void chunks_body(void *env, int64_t begin, int64_t end) {
  const Attn *A = env;
  bool wide = dtrt_avx512();
  for (int64_t c = begin; c < end; c++)
    (wide ? run_avx512 : run_plain)(A, c);
}

/* Blocks [begin, end) of (batch-head, block of queries): q (and with a
 * grad's dout, dout) transposed into qt (dot), [D][BQ] per block, zeros
 * after Tq; a block's rows are 256 bytes apart, not a sequence's length,
 * which would put them all in one set of the cache. */
static void transpose_blocks(void *env, int64_t begin, int64_t end) {
  const Attn *A = env;
  int64_t d = A->d;
  for (int64_t it = begin; it < end; it++) {
    int64_t b = it / A->nqb, i0 = it % A->nqb * BQ;
    int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
    for (int which = 0; which < (A->dout ? 2 : 1); which++) {
      const float *x = (which ? A->dout : A->q) + (b * A->tq + i0) * d;
      float *xt = (which ? A->dot : A->qt) + it * d * BQ;
      for (int64_t j = 0; j < d; j++) {
        for (int64_t r = 0; r < nr; r++)
          xt[j * BQ + r] = x[r * d + j];
        for (int64_t r = nr; r < BQ; r++)
          xt[j * BQ + r] = 0;
      }
    }
  }
}

/* dsum[r] = dout_r . o_r, rows [begin, end). */
static void dsum_rows(void *env, int64_t begin, int64_t end) {
  const Attn *A = env;
  for (int64_t r = begin; r < end; r++) {
    double s = 0;
    for (int64_t j = 0; j < A->d; j++)
      s += (double)A->dout[r * A->d + j] * A->o[r * A->d + j];
    A->dsum[r] = (float)s;
  }
}

/* The floats of scratch for q [bh, tq, d], k [bh, tk, d], a grad's or not,
 * on `slots` threads: a slot per thread, q (a grad's dout too) transposed, a
 * grad's rowsums, and a grad's dq sums a slot (Attn.dq). */
static int64_t scratch_floats(int64_t bh, int64_t tq, int64_t tk, int64_t d, bool grad,
                              int64_t slots) {
  (void)tk;
  int64_t tf = bh * d * ((tq + BQ - 1) / BQ * BQ);
  return slots * (slot_floats(d) + (grad ? tq * d : 0)) + (grad ? 2 : 1) * tf +
         (grad ? bh * tq : 0);
}

/* The pairs (blocks: 0) or the blocks of fewer than BQ queries or BK keys
 * (1) the kernels make of tq queries and tk keys (dtrt_sdpa_pairs). */
static double made(int64_t tq, int64_t tk, bool causal, bool blocks) {
  double n = 0;
  for (int64_t i0 = 0; i0 < tq; i0 += BQ) {
    int64_t nr = tq - i0 < BQ ? tq - i0 : BQ, end = i0 + nr;
    int64_t kend = causal && end < tk ? end : tk, keys = (kend + BK - 1) / BK * BK;
    if (!blocks)
      n += (double)lanes(nr) * (double)(keys < tk ? keys : tk);
    else if (nr < BQ)
      n += (double)(keys / BK);    /* every block of these queries */
    else
      n += keys > tk;               /* the last block of keys, if short */
  }
  return n;
}

double dtrt_sdpa_pairs(int64_t tq, int64_t tk, bool causal) {
  return made(tq, tk, causal, false);
}

double dtrt_sdpa_blocks(int64_t tq, int64_t tk, bool causal) {
  return made(tq, tk, causal, true);
}

int64_t dtrt_sdpa_scratch_bytes(const DtTensor *q, const DtTensor *k, bool grad) {
  if (q->rank != 4 || k->rank != 4)
    return 0;
  return (int64_t)sizeof(float) *
         scratch_floats(q->dim[0] * q->dim[1], q->dim[2], k->dim[2], q->dim[3], grad, 1);
}

/* The context's kernel scratch for A (scratch_floats), q (and dout)
 * transposed there, the rowsums at A->dsum. */
static DtStatus prepare(DtrtCtx *ctx, const char *op, Attn *A) {
  bool grad = A->dout != NULL;
  A->chunks = dtrt_threads(ctx);
  A->prod = dtrt_avx512() ? product_avx512 : product_plain;
  A->slot = slot_floats(A->d);
  int64_t tf = A->bh * A->nqb * A->d * BQ;
  int64_t floats = scratch_floats(A->bh, A->tq, A->tk, A->d, grad, A->chunks);
  A->scratch = dtrt_scratch_of(ctx, DTRT_SCRATCH_KERNEL, sizeof(float) * (size_t)floats);
  if (!A->scratch)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for %lld floats of blocks", op,
                     (long long)floats);
  A->qt = A->scratch + A->chunks * A->slot;
  A->dot = grad ? A->qt + tf : NULL;
  A->dsum = grad ? A->dot + tf : NULL;
  A->dq = grad ? A->dsum + A->bh * A->tq : NULL;
  dtrt_parallel_for(ctx, A->bh * A->nqb, transpose_blocks, A);
  return DT_OK;
}

/* Runs items of kind on the context's threads, at most one chunk a slot. */
static void run(DtrtCtx *ctx, Attn *A, int kind, int64_t items) {
  int64_t slots = dtrt_threads(ctx);
  A->kind = kind;
  A->items = items;
  A->chunks = items < slots ? items : slots;
  dtrt_parallel_for(ctx, A->chunks, chunks_body, A);
}

DtStatus dtrt_attn_mask(DtrtCtx *ctx, const char *op, const DtTensor *m, const int64_t full[4],
                        int64_t ms[4]) {
  int64_t st = 1;
  if (!m->data || (m->dtype != DTRT_F32 && m->dtype != DTRT_I32) || m->rank < 0 || m->rank > 4)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the mask must be f32 or i32 of rank 0 to 4", op);
  for (int d = 3, md = m->rank - 1; d >= 0; d--, md--) {
    int64_t n = md >= 0 ? m->dim[md] : 1;
    if (n != 1 && n != full[d])
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "%s: mask dim %d of length %lld is neither 1 nor %lld", op, md,
                       (long long)n, (long long)full[d]);
    ms[d] = n == 1 ? 0 : st;
    st *= n;
  }
  return DT_OK;
}

/* The mask m over [B, H, Tq, Tk] into A, with its strides. */
static DtStatus check_mask(DtrtCtx *ctx, const char *op, const DtTensor *m, Attn *A) {
  int64_t full[4] = {A->bh / (A->h ? A->h : 1), A->h, A->tq, A->tk};
  DtStatus s = dtrt_attn_mask(ctx, op, m, full, A->ms);
  A->mask = m->data;
  A->mask_i32 = m->dtype == DTRT_I32;
  return s;
}

/* Dropout's attributes: p = f[1] in [0, 1) (absent or 0: none), the seed
 * i[1], and optionally the block's place i[2..9]: the whole [B, H, Tq, Tk],
 * then the block's first index along each. */
static DtStatus check_dropout(DtrtCtx *ctx, const char *op, const DtAttrs *a, int64_t step,
                              Attn *A) {
  double p = dtrt_af(a, 1, 0);
  if (!(p >= 0 && p < 1))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: dropout p = %g is outside [0, 1)", op, p);
  int n = dtrt_ni(a);
  if (n > 2 && n != 10)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the block's place needs 8 ints, got %d", op, n - 2);
  int64_t dim[4] = {A->bh / (A->h ? A->h : 1), A->h, A->tq, A->tk};
  for (int d = 0; d < 4; d++) {
    A->whole[d] = n == 10 ? a->i[2 + d] : dim[d];
    A->at[d] = n == 10 ? a->i[6 + d] : 0;
    if (A->at[d] < 0 || dim[d] > A->whole[d] - A->at[d])
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "%s: a block of %lld from %lld does not fit dimension %d of length %lld",
                       op, (long long)dim[d], (long long)A->at[d], d, (long long)A->whole[d]);
  }
  A->drop = p > 0;
  A->key = dtrt_rand_key((uint64_t)dtrt_ai(a, 1, 0), (uint64_t)step);
  A->cut = (uint64_t)ceil(p * 16777216.0);
  A->keep = (float)(1.0 / (1.0 - p));
  return DT_OK;
}

/* Checks op's operands, a prefix of (q, k, v, out, lse, dout) of want, then
 * optionally the mask: k and v [B, H, Tk, D] for q [B, H, Tq, D], out and
 * dout as q, lse [B, H, Tq]. Fills A's sizes and attributes. */
static DtStatus check(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, int want,
                      const DtTensor *out, const DtAttrs *a, Attn *A) {
  static const char *const names[] = {"query", "key", "value", "out", "lse", "dout"};
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, want, want + 1, out, a, 10, 2)) ||
      (s = dtrt_check(ctx, op, "query", &in[0], DTRT_F32)))
    return s;
  if (in[0].rank != 4)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: query must be [B, H, Tq, D], got rank %d", op,
                     in[0].rank);
  const int64_t *qd = in[0].dim;
  int64_t tk = want >= 2 && in[1].rank == 4 ? in[1].dim[2] : 0;
  for (int k = 1; k < want; k++) {
    int64_t dim[4] = {qd[0], qd[1], k == 1 || k == 2 ? tk : qd[2], qd[3]};
    if ((s = dtrt_check_as(ctx, op, names[k], &in[k], DTRT_F32, dim, k == 4 ? 3 : 4)))
      return s;
  }
  A->bh = qd[0] * qd[1], A->h = qd[1], A->tq = qd[2], A->tk = tk, A->d = qd[3];
  A->nqb = (A->tq + BQ - 1) / BQ, A->nkb = (A->tk + BK - 1) / BK;
  A->causal = dtrt_ai(a, 0, 0) != 0;
  A->scale = (float)dtrt_af(a, 0, 1 / sqrt((double)A->d));
  if (!(A->scale == A->scale) || isinf(A->scale))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: scale must be finite, got %g", op, (double)A->scale);
  if (nin > want && (s = check_mask(ctx, op, &in[want], A)))
    return s;
  return check_dropout(ctx, op, a, a ? a->step : 0, A);
}

/* Sets A up for op: its want operands (q, k, v, out, lse, dout, a prefix),
 * the optional mask after them (required: need_mask) and the attributes
 * checked, its result [B, H, Tq, D] (sdpa), [B, H, Tq] (sdpa_lse), [B, H,
 * Tq + 2 Tk, D] (sdpa_grad) or [B, H, Tq, Tk] (need_mask: sdpa_dmask), the
 * scratch prepared. */
static DtStatus begin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, int want,
                      bool need_mask, DtTensor *out, const DtAttrs *a, Attn *A) {
  DtStatus s;
  if ((nin != want || need_mask) && nin != want + 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: takes %d operands and a mask, got %d", op, want, nin);
  if ((s = check(ctx, op, in, nin, want, out, a, A)))
    return s;
  if (need_mask && A->mask_i32)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the mask must be f32", op);
  bool stack = want == 6 && !need_mask && A->tq == A->tk;
  int64_t dim[5] = {in[0].dim[0], in[0].dim[1], A->tq + (want == 6 ? 2 * A->tk : 0), A->d};
  if (need_mask)
    dim[2] = A->tq, dim[3] = A->tk;
  if (stack)
    dim[1] = 3, dim[2] = in[0].dim[1], dim[3] = A->tq, dim[4] = A->d;
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, want == 2 ? 3 : stack ? 5 : 4)))
    return s;
  const float **to[] = {&A->q, &A->k, &A->v, &A->o, &A->lse, &A->dout};
  for (int k = 0; k < want; k++)
    *to[k] = in[k].data;
  A->out = out->data;
  for (int w = 0; want == 6 && w < 3; w++) {   /* stacked, or along dim 2 */
    int64_t before = w ? A->tq + (w - 1) * A->tk : 0;
    A->g[w] = A->out + (stack ? w * A->h * A->tq : before) * A->d;
    A->gh[w] = (stack ? A->tq : A->tq + 2 * A->tk) * A->d;
    A->gb[w] = (stack ? 3 : 1) * A->h * A->gh[w];
  }
  return prepare(ctx, op, A);
}

/* The backward's dq, dk and dv: in one pass a (batch, head) where that is
 * the faster (dtrt_sdpa_grad_passes), else in two passes by blocks, keys
 * then queries. The same bits either way. */
int dtrt_sdpa_grad_passes(int64_t bh, int threads) {
  int64_t per = threads > 0 ? (bh + threads - 1) / threads : bh; /* heads on the busiest */
  return 7 * per * threads <= 10 * bh ? 1 : 2;
}

static void backward(DtrtCtx *ctx, Attn *A) {
  if (dtrt_sdpa_grad_passes(A->bh, dtrt_threads(ctx)) == 1) {
    run(ctx, A, ATTN_BH, A->bh);
    return;
  }
  run(ctx, A, ATTN_DKV, A->bh * A->nkb);
  run(ctx, A, ATTN_DQ, A->bh * A->nqb);
}

/* sdpa(q, k, v, mask?){causal?, scale, p?, seed?, at?}: q [B, H, Tq, D], k
 * and v [B, H, Tk, D] -> [B, H, Tq, D], dropout(softmax(scale q k^T + mask,
 * masked)) v. */
DTRT_TRACED(sdpa, DTRT_TID_KERNEL) {
  Attn A = {0};
  DtStatus s = begin(ctx, "sdpa", in, nin, 3, false, out, a, &A);
  if (!s)
    run(ctx, &A, ATTN_FWD, A.bh * A.nqb);
  return s;
}

/* sdpa_with_lse(q, k, v, mask?){causal?, scale, p?, seed?, at?}: sdpa's
 * out[0], and out[1] f32 [B, H, Tq], sdpa_lse's rows (the same bits), from
 * the forward's own running maxima and sums: the backward needs no
 * sdpa_lse. Traced as "sdpa". */
DTRT_TRACED_AS(sdpa_with_lse, "sdpa", DTRT_TID_KERNEL) {
  const char *op = "sdpa_with_lse";
  Attn A = {0};
  DtStatus s = begin(ctx, op, in, nin, 3, false, out, a, &A);
  if (!s)
    s = dtrt_check_as(ctx, op, "lse", &out[1], DTRT_F32, out[0].dim, 3);
  if (s)
    return s;
  A.out_lse = out[1].data;
  run(ctx, &A, ATTN_FWD, A.bh * A.nqb);
  return DT_OK;
}

/* sdpa_lse(q, k, mask?){causal?, scale, p?, seed?, at?}: -> [B, H, Tq], each
 * row's log sum_j e^(s_ij) over the keys it sees (-inf: none); dropout plays
 * no part. */
DTRT_TRACED(sdpa_lse, DTRT_TID_KERNEL) {
  Attn A = {0};
  DtStatus s = begin(ctx, "sdpa_lse", in, nin, 2, false, out, a, &A);
  if (!s)
    run(ctx, &A, ATTN_LSE, A.bh * A.nqb);
  return s;
}

/* sdpa_grad(q, k, v, out, lse, dout, mask?){causal?, scale, p?, seed?, at?}:
 * -> [B, 3, H, T, D], dq, dk and dv stacked, when Tq = Tk = T;
 * else [B, H, Tq + 2 Tk, D], along dim 2 dq (Tq rows), dk and dv (Tk rows
 * each). One pass by (batch, head) or two by blocks (backward). */
DTRT_TRACED(sdpa_grad, DTRT_TID_KERNEL) {
  Attn A = {0};
  DtStatus s = begin(ctx, "sdpa_grad", in, nin, 6, false, out, a, &A);
  if (s)
    return s;
  dtrt_parallel_for(ctx, A.bh * A.tq, dsum_rows, &A);
  backward(ctx, &A);
  return DT_OK;
}

/* sdpa_dmask(q, k, v, out, lse, dout, mask){causal?, scale, p?, seed?, at?}:
 * -> [B, H, Tq, Tk], the adjoint of the scores (scale q k^T + mask), an f32
 * mask's before its broadcast dims are summed. By blocks of queries. */
DTRT_TRACED(sdpa_dmask, DTRT_TID_KERNEL) {
  Attn A = {0};
  DtStatus s = begin(ctx, "sdpa_dmask", in, nin, 6, true, out, a, &A);
  if (s)
    return s;
  dtrt_parallel_for(ctx, A.bh * A.tq, dsum_rows, &A);
  run(ctx, &A, ATTN_DS, A.bh * A.nqb);
  return DT_OK;
}

/* One step of ring attention (kernels_ring.c): the queries of st against
 * one block of keys, at their places in the sequence. */
DtStatus dtrt_attn_step(DtrtCtx *ctx, const char *op, const DtAttnStep *st) {
  Attn A = {.bh = st->b * st->h, .h = st->h, .tq = st->tq, .tk = st->tk, .d = st->d};
  A.nqb = (A.tq + BQ - 1) / BQ, A.nkb = (A.tk + BK - 1) / BK;
  A.causal = st->causal, A.scale = st->scale, A.qoff = st->qoff, A.koff = st->koff;
  double p = st->p;
  A.drop = p > 0;
  A.key = dtrt_rand_key((uint64_t)st->seed, (uint64_t)st->step);
  A.cut = (uint64_t)ceil(p * 16777216.0);
  A.keep = (float)(1.0 / (1.0 - p));
  memcpy(A.whole, st->whole, sizeof A.whole);
  memcpy(A.at, st->at, sizeof A.at);
  A.q = st->q, A.k = st->k, A.v = st->v, A.o = st->o, A.lse = st->lse, A.dout = st->dout;
  A.mask = st->mask, A.mask_i32 = st->mask_i32;
  memcpy(A.ms, st->ms, sizeof A.ms);
  A.st_m = st->m, A.st_l = st->l, A.st_a = st->acc;
  A.add = true;
  for (int w = 0; w < 3; w++) {   /* dq [B, H, tq, D], dk and dv [B, H, tk, D] */
    A.g[w] = st->g[w];
    A.gh[w] = (w ? A.tk : A.tq) * A.d;
    A.gb[w] = A.h * A.gh[w];
  }
  DtStatus s = prepare(ctx, op, &A);
  if (s)
    return s;
  if (!st->dout) {
    run(ctx, &A, st->acc ? ATTN_FWD : ATTN_LSE, A.bh * A.nqb);
    return DT_OK;
  }
  dtrt_parallel_for(ctx, A.bh * A.tq, dsum_rows, &A);
  backward(ctx, &A);
  return DT_OK;
}
