/* kernels_attn.c: scaled dot-product attention by blocks of queries and keys
 * (FlashAttention-2's online softmax): the forward, the rows' log-sum-exp and
 * the backward, none of which holds more than one block of the [Tq, Tk] scores.
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
 * dv); item t runs on chunk t % chunks, each chunk on one thread with its own
 * scratch. Every element of a result is summed by one item in a fixed order,
 * so its bits do not depend on the number of threads. The products are
 * register tiles of GCC's vector types (product), the softmax's loops run
 * along a block's row of BK keys, unit stride, so that GCC vectorises them;
 * all of it is compiled twice, for AVX-512 and portably, the one chosen at
 * run time (the portable path serves other CPUs and valgrind). */
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

enum { BQ = 64, BK = 64 };
enum { ATTN_FWD, ATTN_LSE, ATTN_DKV, ATTN_DQ, ATTN_DS };

typedef struct Attn {
  int kind;
  const float *q, *k, *v, *o, *lse, *dout;
  float *out;              /* ATTN_FWD: [BH, Tq, D]; ATTN_LSE: [BH, Tq]; ATTN_DS: [BH, Tq, Tk];
                              else the packed grads */
  float *dsum;             /* backward: rowsum(dout * o), [BH, Tq] */
  float *kt, *vt;          /* k and v transposed, [BH, D, tkp], zeros after Tk */
  float *scratch;          /* slot floats per chunk */
  int64_t slot, chunks, items;
  int64_t bh, h, tq, tk, tkp, d, nqb, nkb;
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

/* One chunk's scratch: score tiles s and p [BQ][BK], accumulators a1 and a2
 * [max(BQ, BK)][D], the rows' running maximum and sum. */
typedef struct Tiles {
  float *s, *p, *a1, *a2, *m, *l;
} Tiles;

static int64_t slot_floats(int64_t d) {
  return 2 * BQ * BK + 2 * (BQ > BK ? BQ : BK) * d + 2 * BQ;
}

static Tiles tiles_of(const Attn *A, int64_t chunk) {
  float *f = A->scratch + chunk * A->slot;
  int64_t rows = BQ > BK ? BQ : BK;
  Tiles t = {.s = f, .p = f + BQ * BK};
  t.a1 = t.p + BQ * BK;
  t.a2 = t.a1 + rows * A->d;
  t.m = t.a2 + rows * A->d;
  t.l = t.m + BQ;
  return t;
}

/* A vector of 16 floats (GCC's vector extension: AVX-512 registers where
 * compiled for them, pairs or quads of narrower ones elsewhere), and one at
 * any float's address. */
typedef float V16 __attribute__((vector_size(64)));
typedef float V16u __attribute__((vector_size(64), aligned(4)));
enum { VL = 16, TO = 4, TE = 4 };   /* a tile: TO rows of TE vectors */
#define UNROLL _Pragma("GCC unroll 4")

/* acc[o][e] += sum_k w[o wo + k wk] y[k ys + e] for o < TO (or 1 when one),
 * e < TE VL, k < nk, in that order of k: TO TE accumulators in registers. */
INLINE void tile(const float *restrict w, int64_t wo, int64_t wk, const float *restrict y,
                 int64_t ys, int64_t nk, float *restrict acc, int64_t as, bool one) {
  V16 a[TO][TE];
  int no = one ? 1 : TO;
  UNROLL for (int o = 0; o < no; o++)
    UNROLL for (int e = 0; e < TE; e++)
      a[o][e] = *(const V16u *)(acc + o * as + e * VL);
  for (int64_t k = 0; k < nk; k++) {
    V16 yv[TE];
    UNROLL for (int e = 0; e < TE; e++)
      yv[e] = *(const V16u *)(y + k * ys + e * VL);
    UNROLL for (int o = 0; o < no; o++) {
      float wv = w[o * wo + k * wk];
      UNROLL for (int e = 0; e < TE; e++)
        a[o][e] += wv * yv[e];
    }
  }
  UNROLL for (int o = 0; o < no; o++)
    UNROLL for (int e = 0; e < TE; e++)
      *(V16u *)(acc + o * as + e * VL) = a[o][e];
}

/* acc[o][e] += sum_{k < nk} w[o wo + k wk] y[k ys + e] for o < no, e < ne:
 * a small product by tiles, then what is left of e element by element. Each
 * acc[o][e] sums its k in order whatever the tile. */
INLINE void product(const float *restrict w, int64_t wo, int64_t wk, const float *restrict y,
                    int64_t ys, int64_t nk, int64_t no, int64_t ne, float *restrict acc,
                    int64_t as) {
  int64_t e0 = 0;
  for (; e0 + TE * VL <= ne; e0 += TE * VL) {
    int64_t o = 0;
    for (; o + TO <= no; o += TO)
      tile(w + o * wo, wo, wk, y + e0, ys, nk, acc + o * as + e0, as, false);
    for (; o < no; o++)
      tile(w + o * wo, wo, wk, y + e0, ys, nk, acc + o * as + e0, as, true);
  }
  for (int64_t o = 0; e0 < ne && o < no; o++)
    for (int64_t k = 0; k < nk; k++) {
      float wv = w[o * wo + k * wk];
      const float *yk = y + k * ys;
      float *ao = acc + o * as;
      for (int64_t e = e0; e < ne; e++)
        ao[e] += wv * yk[e];
    }
}

/* s[r][c] = scale sum_j x[r][j] yt[j ys + c] for r < nr and every c < BK. */
INLINE void products(const float *restrict x, const float *restrict yt, int64_t ys, int64_t nr,
                     int64_t d, float scale, float *restrict s) {
  memset(s, 0, sizeof(float) * (size_t)(nr * BK));
  product(x, d, 1, yt, ys, d, nr, BK, s, BK);
  for (int64_t e = 0; e < nr * BK; e++)
    s[e] *= scale;
}

/* Sets s[r][c] to -inf where key j0 + c does not exist or, causal, lies after
 * query i0 + r. */
INLINE void mask(float *s, int64_t nr, int64_t i0, int64_t j0, int64_t nc, bool causal) {
  for (int64_t r = 0; r < nr; r++) {
    int64_t end = causal && i0 + r + 1 - j0 < nc ? i0 + r + 1 - j0 : nc;
    for (int64_t c = end < 0 ? 0 : end; c < BK; c++)
      s[r * BK + c] = -INFINITY;
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
        s[r * BK + c] = mk[c * A->ms[3]] ? s[r * BK + c] : -INFINITY;
    } else {
      const float *mk = (const float *)A->mask + o;
      for (int64_t c = 0; c < nc; c++)
        s[r * BK + c] += mk[c * A->ms[3]];
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
      x[r * BK + c] = dtrt_rand_at(A->key, g + (uint64_t)c) >> 40 >= A->cut
                          ? x[r * BK + c] * A->keep : 0.0f;
  }
}

/* acc[r][:] += sum_c p[r][c] y[c][:] for r < nr, c < nc, y of rows of length d. */
INLINE void mix(const float *restrict p, const float *restrict y, int64_t nr, int64_t nc,
                int64_t d, float *restrict acc) {
  product(p, BK, 1, y, d, nc, nr, d, acc, d);
}

/* acc[c][:] += sum_r p[r][c] y[r][:] for r < nr, c < nc: mix by the transposed tile. */
INLINE void mix_t(const float *restrict p, const float *restrict y, int64_t nr, int64_t nc,
                  int64_t d, float *restrict acc) {
  product(p, 1, BK, y, d, nr, nc, d, acc, d);
}

/* The online softmax of one block of scores s of row r: the running maximum
 * m and sum l move to the block's, s becomes e^(s - m); returns the factor
 * e^(m_old - m_new) that rescales what was summed before. The maximum and
 * the sum go by VL lanes, so that their loops vectorise as the others do. */
INLINE float online_row(float *restrict s, float *m, float *l) {
  float lane[VL], mx = *m, sum = 0;
  for (int k = 0; k < VL; k++)
    lane[k] = s[k];
  for (int c = VL; c < BK; c += VL)
    for (int k = 0; k < VL; k++)
      lane[k] = s[c + k] > lane[k] ? s[c + k] : lane[k];
  for (int k = 0; k < VL; k++)
    mx = lane[k] > mx ? lane[k] : mx;
  if (mx == -INFINITY) {   /* no key seen yet: nothing to sum or rescale */
    memset(s, 0, sizeof(float) * BK);
    return 1;
  }
  float alpha = dtrt_exp_fast(*m - mx);
  for (int c = 0; c < BK; c++)
    s[c] = dtrt_exp_fast(s[c] - mx);
  for (int k = 0; k < VL; k++)
    lane[k] = s[k];
  for (int c = VL; c < BK; c += VL)
    for (int k = 0; k < VL; k++)
      lane[k] += s[c + k];
  for (int k = 0; k < VL; k++)
    sum += lane[k];
  *m = mx;
  *l = *l * alpha + sum;
  return alpha;
}

/* The forward (with v) or the log-sum-exp (without) of one block of queries. */
/* The keys [0, end) that queries i0 .. i0 + nr - 1 see (all but causal). */
INLINE int64_t keys_seen(const Attn *A, int64_t i0, int64_t nr) {
  int64_t end = A->qoff + i0 + nr - A->koff;
  return A->causal && end < A->tk ? end : A->tk;
}

/* The forward (with v) or the log-sum-exp (without) of one block of queries;
 * with carried state, the state moved on by this block of keys instead. */
INLINE void fwd_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nqb, i0 = item % A->nqb * BQ, d = A->d, row = b * A->tq + i0;
  int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
  int64_t kend = keys_seen(A, i0, nr);
  const float *q = A->q + row * d;
  bool with_v = A->kind == ATTN_FWD, carry = A->st_m != NULL;
  float *m = carry ? A->st_m + row : t->m, *l = carry ? A->st_l + row : t->l;
  float *a1 = carry && with_v ? A->st_a + row * d : t->a1;
  for (int64_t r = 0; !carry && r < nr; r++)
    m[r] = -INFINITY, l[r] = 0;
  if (with_v && !carry)
    memset(a1, 0, sizeof(float) * (size_t)(nr * d));
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    products(q, A->kt + b * d * A->tkp + j0, A->tkp, nr, d, A->scale, t->s);
    add_mask(A, t->s, b, i0, nr, j0, nc);
    mask(t->s, nr, A->qoff + i0, A->koff + j0, nc, A->causal);
    for (int64_t r = 0; r < nr; r++) {
      float alpha = online_row(t->s + r * BK, &m[r], &l[r]);
      for (int64_t j = 0; with_v && j < d; j++)
        a1[r * d + j] *= alpha;
    }
    if (with_v) {
      drop_block(A, t->s, b, i0, nr, j0, nc);
      mix(t->s, A->v + (b * A->tk + j0) * d, nr, nc, d, a1);
    }
  }
  for (int64_t r = 0; !carry && r < nr; r++) {
    if (!with_v) {
      A->out[b * A->tq + i0 + r] = t->l[r] > 0 ? t->m[r] + logf(t->l[r]) : -INFINITY;
      continue;
    }
    float inv = t->l[r] > 0 ? 1 / t->l[r] : 0, *o = A->out + (b * A->tq + i0 + r) * d;
    for (int64_t j = 0; j < d; j++)
      o[j] = t->a1[r * d + j] * inv;
  }
}

/* p[r][c] = e^(s[r][c] - lse_r): the probabilities of a block of scores;
 * zeros in a row that sees no key (lse -inf). */
INLINE void probs(const float *restrict s, const float *restrict lse, int64_t nr,
                  float *restrict p) {
  for (int64_t r = 0; r < nr; r++) {
    float l = lse[r] == -INFINITY ? INFINITY : lse[r];
    for (int c = 0; c < BK; c++)
      p[r * BK + c] = dtrt_exp_fast(s[r * BK + c] - l);
  }
}

/* ds[r][c] = p[r][c] (dp[r][c] - dsum_r), in place of dp. */
INLINE void dscores(const float *restrict p, const float *restrict dsum, int64_t nr,
                    float *restrict dp) {
  for (int64_t r = 0; r < nr; r++)
    for (int c = 0; c < BK; c++)
      dp[r * BK + c] = p[r * BK + c] * (dp[r * BK + c] - dsum[r]);
}

/* The gradients of (batch, head) b: dq [Tq][D], dk and dv [Tk][D]. */
static float *grad_of(const Attn *A, int64_t b, int which) {
  return A->g[which] + b / A->h * A->gb[which] + b % A->h * A->gh[which];
}

/* P, then dS of the block of queries i0.. (nr) and keys j0.. (nc) of b: P
 * after dropout into t->p, dS into t->s. With dropout, dP is the dropped
 * probabilities' adjoint dropped alike, and dsum (dout . out) is still
 * rowsum(P dP). */
INLINE void block_grads(const Attn *A, const Tiles *t, int64_t b, int64_t i0, int64_t nr,
                        int64_t j0, int64_t nc) {
  int64_t row = b * A->tq + i0, d = A->d;
  products(A->q + row * d, A->kt + b * d * A->tkp + j0, A->tkp, nr, d, A->scale, t->s);
  add_mask(A, t->s, b, i0, nr, j0, nc);
  mask(t->s, nr, A->qoff + i0, A->koff + j0, nc, A->causal);
  probs(t->s, A->lse + row, nr, t->p);
  products(A->dout + row * d, A->vt + b * d * A->tkp + j0, A->tkp, nr, d, 1, t->s);
  drop_block(A, t->s, b, i0, nr, j0, nc);
  dscores(t->p, A->dsum + row, nr, t->s);
  drop_block(A, t->p, b, i0, nr, j0, nc);
}

/* dk and dv of one block of keys, over every block of queries that sees it. */
INLINE void dkv_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nkb, j0 = item % A->nkb * BK, d = A->d;
  int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
  memset(t->a1, 0, sizeof(float) * (size_t)(nc * d));
  memset(t->a2, 0, sizeof(float) * (size_t)(nc * d));
  int64_t first = A->causal ? A->koff + j0 - A->qoff : 0;   /* the first query seeing j0 */
  for (int64_t i0 = first > 0 ? first / BQ * BQ : 0; i0 < A->tq; i0 += BQ) {
    int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ, row = b * A->tq + i0;
    block_grads(A, t, b, i0, nr, j0, nc);
    mix_t(t->p, A->dout + row * d, nr, nc, d, t->a2);
    mix_t(t->s, A->q + row * d, nr, nc, d, t->a1);
  }
  float *dk = grad_of(A, b, 1) + j0 * d, *dv = grad_of(A, b, 2) + j0 * d;
  for (int64_t e = 0; e < nc * d; e++) {
    dk[e] = (A->add ? dk[e] : 0) + t->a1[e] * A->scale;
    dv[e] = (A->add ? dv[e] : 0) + t->a2[e];
  }
}

/* dq of one block of queries, over every block of keys it sees. */
INLINE void dq_item(const Attn *A, const Tiles *t, int64_t item) {
  int64_t b = item / A->nqb, i0 = item % A->nqb * BQ, d = A->d;
  int64_t nr = A->tq - i0 < BQ ? A->tq - i0 : BQ;
  int64_t kend = keys_seen(A, i0, nr);
  memset(t->a1, 0, sizeof(float) * (size_t)(nr * d));
  for (int64_t j0 = 0; j0 < kend; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    block_grads(A, t, b, i0, nr, j0, nc);
    mix(t->s, A->k + (b * A->tk + j0) * d, nr, nc, d, t->a1);
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
  for (int64_t j0 = 0; j0 < A->tk; j0 += BK) {
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    block_grads(A, t, b, i0, nr, j0, nc);
    for (int64_t r = 0; r < nr; r++)
      memcpy(A->out + (b * A->tq + i0 + r) * A->tk + j0, t->s + r * BK,
             sizeof(float) * (size_t)nc);
  }
}

INLINE void run_items(const Attn *A, int64_t chunk) {
  Tiles t = tiles_of(A, chunk);
  for (int64_t item = chunk; item < A->items; item += A->chunks)
    switch (A->kind) {
    case ATTN_FWD: case ATTN_LSE: fwd_item(A, &t, item); break;
    case ATTN_DKV: dkv_item(A, &t, item); break;
    case ATTN_DS: ds_item(A, &t, item); break;
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

/* Blocks [begin, end) of (batch-head, block of keys): k (and with a grad's
 * dout, v) transposed into kt (vt), [D][tkp] per batch-head, zeros after Tk. */
static void transpose_blocks(void *env, int64_t begin, int64_t end) {
  const Attn *A = env;
  int64_t d = A->d;
  for (int64_t it = begin; it < end; it++) {
    int64_t b = it / A->nkb, j0 = it % A->nkb * BK;
    int64_t nc = A->tk - j0 < BK ? A->tk - j0 : BK;
    for (int which = 0; which < (A->dout ? 2 : 1); which++) {
      const float *x = (which ? A->v : A->k) + (b * A->tk + j0) * d;
      float *xt = (which ? A->vt : A->kt) + b * d * A->tkp + j0;
      for (int64_t j = 0; j < d; j++) {
        for (int64_t c = 0; c < nc; c++)
          xt[j * A->tkp + c] = x[c * d + j];
        for (int64_t c = nc; c < BK; c++)
          xt[j * A->tkp + c] = 0;
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
 * on `slots` threads: a slot per thread, k (a grad's v too) transposed, a
 * grad's rowsums. */
static int64_t scratch_floats(int64_t bh, int64_t tq, int64_t tk, int64_t d, bool grad,
                              int64_t slots) {
  int64_t tf = bh * d * ((tk + BK - 1) / BK * BK);
  return slots * slot_floats(d) + (grad ? 2 : 1) * tf + (grad ? bh * tq : 0);
}

int64_t dtrt_sdpa_scratch_bytes(const DtTensor *q, const DtTensor *k, bool grad) {
  if (q->rank != 4 || k->rank != 4)
    return 0;
  return (int64_t)sizeof(float) *
         scratch_floats(q->dim[0] * q->dim[1], q->dim[2], k->dim[2], q->dim[3], grad, 1);
}

/* The context's kernel scratch for A (scratch_floats), k (and v) transposed
 * there, the rowsums at A->dsum. */
static DtStatus prepare(DtrtCtx *ctx, const char *op, Attn *A) {
  bool grad = A->dout != NULL;
  A->chunks = dtrt_threads(ctx);
  A->slot = slot_floats(A->d);
  A->tkp = A->nkb * BK;
  int64_t tf = A->bh * A->d * A->tkp;
  int64_t floats = scratch_floats(A->bh, A->tq, A->tk, A->d, grad, A->chunks);
  A->scratch = dtrt_scratch_of(ctx, DTRT_SCRATCH_KERNEL, sizeof(float) * (size_t)floats);
  if (!A->scratch)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for %lld floats of blocks", op,
                     (long long)floats);
  A->kt = A->scratch + A->chunks * A->slot;
  A->vt = grad ? A->kt + tf : NULL;
  A->dsum = grad ? A->vt + tf : NULL;
  dtrt_parallel_for(ctx, A->bh * A->nkb, transpose_blocks, A);
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
 * each). Two passes: one by
 * blocks of keys (dk, dv), one by blocks of queries (dq). */
DTRT_TRACED(sdpa_grad, DTRT_TID_KERNEL) {
  Attn A = {0};
  DtStatus s = begin(ctx, "sdpa_grad", in, nin, 6, false, out, a, &A);
  if (s)
    return s;
  dtrt_parallel_for(ctx, A.bh * A.tq, dsum_rows, &A);
  run(ctx, &A, ATTN_DKV, A.bh * A.nkb);
  run(ctx, &A, ATTN_DQ, A.bh * A.nqb);
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
  for (int w = 0; w < 3; w++) {   /* dq in sdpa_grad's stacked layout, dk and dv packed */
    A.g[w] = st->g[w];
    A.gh[w] = (w ? A.tk : A.tq) * A.d;
    A.gb[w] = (w ? 1 : 3) * A.h * A.gh[w];
  }
  DtStatus s = prepare(ctx, op, &A);
  if (s)
    return s;
  if (!st->dout) {
    run(ctx, &A, st->acc ? ATTN_FWD : ATTN_LSE, A.bh * A.nqb);
    return DT_OK;
  }
  dtrt_parallel_for(ctx, A.bh * A.tq, dsum_rows, &A);
  run(ctx, &A, ATTN_DKV, A.bh * A.nkb);
  run(ctx, &A, ATTN_DQ, A.bh * A.nqb);
  return DT_OK;
}
