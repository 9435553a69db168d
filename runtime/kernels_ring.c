/* kernels_ring.c: ring attention, the sequence split over the group of one
 * mesh axis (context parallelism). Member r holds the queries, keys and
 * values of its block of the sequence (positions off_r .. off_r + n_r - 1,
 * n_r the op's `sizes`, uneven as they may be); the blocks of keys and
 * values pass around the ring, r sending to r + 1 and receiving from r - 1,
 * and each member meets them in the order r, r - 1, ..., r + 1, merging
 * each into its rows' online softmax (kernels_attn.c's dtrt_attn_step). The
 * next block's transfer is posted (MPI_Isend, MPI_Irecv) before the current
 * block's products, so the two overlap. Causal: a block of keys wholly after
 * the member's last query is passed on unread. The backward passes the keys
 * and values around again, with the adjoints of each block's keys and
 * values, which every member adds its part to and which come home after a
 * last hop. Every sum runs in the ring's order, fixed by the ranks: the
 * result does not depend on timing.
 *
 * An optional last operand is a mask broadcast to [B, H, 1, T] (T the
 * whole sequence: each block of keys reads its columns), as sdpa's.
 *
 * Attributes (int): i[0] the axis, i[1..p] the block lengths of its p
 * members, then causal, seed and the block's place in the whole [B, H, Tq,
 * Tk] (its dims, then the block's first index along each: 8 ints; the keys'
 * index, 0, is moved to each block's); floats: the scale, dropout's p. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "dtrt_int.h"

/* Tag of the ring's messages, on dtrt's own communicators. */
enum { TAG = 0x7269 };

typedef struct Ring {
  DtGroup g;
  const int64_t *len;          /* [p] the members' block lengths */
  int64_t b, h, d, tq, qoff;   /* this member's queries: tq of them from qoff */
  int64_t maxt;                /* the longest block */
  DtAttnStep st;               /* filled but for the keys' block */
} Ring;

static int64_t offset_of(const Ring *R, int m) {
  int64_t o = 0;
  for (int k = 0; k < m; k++)
    o += R->len[k];
  return o;
}

/* The mask m, broadcast (right-aligned) to [B, H, 1, T] (T the whole
 * sequence): f32 or i32, each dim 1 or whole, the queries' 1. */
static DtStatus ring_mask(DtrtCtx *ctx, const char *op, const DtTensor *m, Ring *R) {
  int64_t full[4] = {R->b, R->h, 1, offset_of(R, R->g.size)};
  DtStatus s = dtrt_attn_mask(ctx, op, m, full, R->st.ms);
  R->st.mask = m->data;
  R->st.mask_i32 = m->dtype == DTRT_I32;
  return s;
}

/* Checks the operands (want of q, k, v, out, lse, dout; this member's
 * blocks), the output (out_rank: [B, H, T], [B, H, T, D] or [B, 3, H, T,
 * D]) and the attributes; fills R. */
static DtStatus ring_begin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, int want,
                           const DtTensor *out, int out_rank, const DtAttrs *a, Ring *R) {
  static const char *const names[] = {"query", "key", "value", "out", "lse", "dout"};
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, want, want + 1, out, a, DTRT_MAX_IATTRS, 2)))
    return s;
  if (dtrt_ni(a) < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: needs the axis", op);
  if ((s = dtrt_group(ctx, op, a->i[0], &R->g)))
    return s;
  int p = R->g.size;
  int extra = dtrt_ni(a) - 1 - p;   /* causal, seed, the place: trailing absent ones */
  if (extra < 0 || (extra > 2 && extra != 10))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d int attributes; a group of %d takes %d to %d or "
                     "%d", op, dtrt_ni(a), p, 1 + p, 3 + p, 11 + p);
  R->len = a->i + 1;
  R->maxt = 0;
  for (int m = 0; m < p; m++) {
    if (R->len[m] < 1)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: block %d has length %lld", op, m,
                       (long long)R->len[m]);
    R->maxt = R->len[m] > R->maxt ? R->len[m] : R->maxt;
  }
  if ((s = dtrt_check(ctx, op, "query", &in[0], DTRT_F32)))
    return s;
  if (in[0].rank != 4 || in[0].dim[2] != R->len[R->g.me])
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: query must be [B, H, %lld, D], this member's block of the sequence",
                     op, (long long)R->len[R->g.me]);
  for (int k = 1; k < want; k++)
    if ((s = dtrt_check_as(ctx, op, names[k], &in[k], DTRT_F32, in[0].dim, k == 4 ? 3 : 4)))
      return s;
  int64_t dim[5] = {in[0].dim[0], in[0].dim[1], in[0].dim[2], in[0].dim[3]};
  if (out_rank == 5)
    dim[1] = 3, memcpy(dim + 2, in[0].dim + 1, sizeof(int64_t) * 3);
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, dim, out_rank)))
    return s;
  R->b = in[0].dim[0], R->h = in[0].dim[1], R->tq = in[0].dim[2], R->d = in[0].dim[3];
  R->qoff = offset_of(R, R->g.me);
  int64_t elems;
  if (!dtrt_mul(4 * R->b * R->h, R->maxt * R->d, &elems) || elems > INT_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: blocks of %lld x %lld x %lld x %lld are too large "
                     "for one message", op, (long long)R->b, (long long)R->h,
                     (long long)R->maxt, (long long)R->d);
  const int64_t *ai = a->i + 1 + p;
  double pd = dtrt_af(a, 1, 0);
  if (!(pd >= 0 && pd < 1))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: dropout p = %g is outside [0, 1)", op, pd);
  R->st = (DtAttnStep){.q = in[0].data, .b = R->b, .h = R->h, .tq = R->tq, .d = R->d,
                       .qoff = R->qoff, .causal = extra > 0 && ai[0] != 0, .p = pd,
                       .seed = extra > 1 ? ai[1] : 0, .step = a->step};
  R->st.scale = (float)dtrt_af(a, 0, 1 / sqrt((double)R->d));
  int64_t block[4] = {R->b, R->h, R->tq, offset_of(R, p)};
  for (int k = 0; k < 4; k++) {
    R->st.whole[k] = extra == 10 ? ai[2 + k] : k == 2 ? block[3] : block[k];
    R->st.at[k] = extra == 10 ? ai[6 + k] : k == 2 ? R->qoff : 0;
  }
  R->st.at[3] = 0;   /* each block of keys' own, from its offset */
  if (nin > want && (s = ring_mask(ctx, op, &in[want], R)))
    return s;
  for (int k = 0; k < 4 && pd > 0; k++) {
    int64_t n = block[k];
    if (R->st.at[k] < 0 || n > R->st.whole[k] - R->st.at[k])
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: a block of %lld from %lld does not fit dimension "
                       "%d of length %lld", op, (long long)n, (long long)R->st.at[k], k,
                       (long long)R->st.whole[k]);
  }
  return DT_OK;
}

/* The floats of the ring's blocks: two blocks of kv of k and v (forward),
 * and the rows' state; four of k, v, dk and dv (backward). */
static int64_t ring_floats(int kv, int64_t bh, int64_t maxt, int64_t tq, int64_t d) {
  if (kv == 4)
    return 4 * 2 * bh * maxt * d;
  return 2 * kv * bh * maxt * d + bh * tq * (2 + (kv - 1) * d);
}

int64_t dtrt_ring_staged(const DtTensor *in, int nin, const DtTensor *out, const DtAttrs *a,
                         int p) {
  if (nin < 2 || in[0].rank != 4 || out->rank < 3 || out->rank > 5 || dtrt_ni(a) < 1 + p)
    return 0;
  int64_t maxt = 0;
  for (int m = 0; m < p; m++)
    maxt = a->i[1 + m] > maxt ? a->i[1 + m] : maxt;
  int kv = out->rank == 5 ? 4 : out->rank - 2;   /* grad; forward, lse */
  return (int64_t)sizeof(float) *
         ring_floats(kv, in[0].dim[0] * in[0].dim[1], maxt, in[0].dim[2], in[0].dim[3]);
}

/* Whether member r skips the block of keys from src: causal, all of it after
 * r's last query. */
static bool unseen(const Ring *R, int src) {
  return R->st.causal && offset_of(R, src) >= R->qoff + R->tq;
}

/* Step s's block of keys (from member src, at cur: k, then v unless kv is
 * 1) into R->st. */
static void at_block(Ring *R, int src, const float *cur, int kv) {
  int64_t n = R->len[src];
  R->st.k = cur;
  R->st.v = kv > 1 ? cur + R->b * R->h * n * R->d : NULL;
  R->st.tk = n;
  R->st.koff = offset_of(R, src);
  R->st.at[3] = R->st.koff;
}

/* Posts the hop of step s: what this member holds (count floats, at cur) to
 * r + 1, and the next block (next floats) from r - 1 into nxt. */
static DtStatus post(DtrtCtx *ctx, const char *op, const Ring *R, const float *cur,
                     int64_t count, float *nxt, int64_t next, MPI_Request *req) {
  int p = R->g.size, me = R->g.me;
  DtStatus s = dtrt_mpi(ctx, MPI_Irecv(nxt, (int)next, MPI_FLOAT, (me - 1 + p) % p, TAG,
                                       R->g.comm, &req[0]), op, "MPI_Irecv");
  if (!s)
    s = dtrt_mpi(ctx, MPI_Isend(cur, (int)count, MPI_FLOAT, (me + 1) % p, TAG, R->g.comm,
                                &req[1]), op, "MPI_Isend");
  return s;
}

/* The forward (kv 2: k and v travel, the output) or the rows' log-sum-exp
 * (kv 1: k alone). */
static DtStatus ring_forward(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                             DtTensor *out, const DtAttrs *a, int kv) {
  Ring R;
  DtStatus s = ring_begin(ctx, op, in, nin, kv + 1, out, kv == 2 ? 4 : 3, a, &R);
  if (s)
    return s;
  int p = R.g.size, me = R.g.me;
  int64_t bh = R.b * R.h, d = R.d, tq = R.tq, blk = kv * bh * R.maxt * d;
  float *buf = dtrt_alloc(ctx, sizeof(float) * (size_t)ring_floats(kv, bh, R.maxt, tq, d));
  if (!buf)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for the ring's blocks", op);
  float *cur = buf, *nxt = buf + blk;
  R.st.m = nxt + blk, R.st.l = R.st.m + bh * tq, R.st.acc = kv == 2 ? R.st.l + bh * tq : NULL;
  for (int64_t r = 0; r < bh * tq; r++)
    R.st.m[r] = -INFINITY;
  memcpy(cur, in[1].data, sizeof(float) * (size_t)(bh * tq * d));
  if (kv == 2)
    memcpy(cur + bh * tq * d, in[2].data, sizeof(float) * (size_t)(bh * tq * d));
  for (int step = 0; !s && step < p; step++) {
    int src = (me - step + p) % p, nsrc = (src - 1 + p) % p;
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (step < p - 1)
      s = post(ctx, op, &R, cur, kv * bh * R.len[src] * d, nxt, kv * bh * R.len[nsrc] * d, req);
    at_block(&R, src, cur, kv);
    if (!s && !unseen(&R, src))
      s = dtrt_attn_step(ctx, op, &R.st);
    DtStatus w = dtrt_mpi(ctx, MPI_Waitall(2, req, MPI_STATUSES_IGNORE), op, "MPI_Waitall");
    s = s ? s : w;
    float *t = cur;
    cur = nxt, nxt = t;
  }
  float *o = out->data;
  for (int64_t r = 0; !s && r < bh * tq; r++) {
    float l = R.st.l[r];
    if (kv == 1) {
      o[r] = l > 0 ? R.st.m[r] + logf(l) : -INFINITY;
      continue;
    }
    float inv = l > 0 ? 1 / l : 0;
    for (int64_t j = 0; j < d; j++)
      o[r * d + j] = R.st.acc[r * d + j] * inv;
  }
  dtrt_free(ctx, buf);
  return s;
}

/* ring_sdpa(q, k, v){axis, sizes, causal?, scale, p?, seed?, at}: q, k, v
 * [B, H, n_r, D], member r's block -> [B, H, n_r, D], sdpa's rows of the
 * whole sequence. */
DTRT_TRACED(ring_sdpa, DTRT_TID_COMM) { return ring_forward(ctx, "ring_sdpa", in, nin, out, a, 2); }

/* ring_sdpa_lse(q, k){...}: -> [B, H, n_r], sdpa_lse's rows. */
DTRT_TRACED(ring_sdpa_lse, DTRT_TID_COMM) {
  return ring_forward(ctx, "ring_sdpa_lse", in, nin, out, a, 1);
}

/* ring_sdpa_grad(q, k, v, out, lse, dout){...}: -> [B, 3, H, n_r, D], dq,
 * dk and dv of member r's block, stacked. Each hop carries a block's keys and values
 * (posted before the step's products) and then their adjoints (after). */
DTRT_TRACED(ring_sdpa_grad, DTRT_TID_COMM) {
  const char *op = "ring_sdpa_grad";
  Ring R;
  DtStatus s = ring_begin(ctx, op, in, nin, 6, out, 5, a, &R);
  if (s)
    return s;
  int p = R.g.size, me = R.g.me;
  int64_t bh = R.b * R.h, d = R.d, tq = R.tq, blk = 2 * bh * R.maxt * d, own = bh * tq * d;
  float *buf = dtrt_alloc(ctx, sizeof(float) * (size_t)ring_floats(4, bh, R.maxt, tq, d));
  if (!buf)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for the ring's blocks", op);
  float *cur = buf, *nxt = buf + 2 * blk, *dq = out->data;   /* k v | dk dv, each of blk */
  R.st.o = in[3].data, R.st.lse = in[4].data, R.st.dout = in[5].data;
  memset(out->data, 0, sizeof(float) * (size_t)(3 * own));
  memcpy(cur, in[1].data, sizeof(float) * (size_t)own);
  memcpy(cur + own, in[2].data, sizeof(float) * (size_t)own);
  for (int step = 0; !s && step < p; step++) {
    int src = (me - step + p) % p, nsrc = (src - 1 + p) % p;
    int64_t n = 2 * bh * R.len[src] * d, nn = 2 * bh * R.len[nsrc] * d;
    MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                          MPI_REQUEST_NULL};
    if (step < p - 1)
      s = post(ctx, op, &R, cur, n, nxt, nn, req);
    at_block(&R, src, cur, 2);
    R.st.g[0] = dq, R.st.g[1] = cur + blk, R.st.g[2] = cur + blk + n / 2;
    if (!s && !unseen(&R, src))
      s = dtrt_attn_step(ctx, op, &R.st);
    if (!s && step < p - 1)
      s = post(ctx, op, &R, cur + blk, n, nxt + blk, nn, req + 2);
    DtStatus w = dtrt_mpi(ctx, MPI_Waitall(4, req, MPI_STATUSES_IGNORE), op, "MPI_Waitall");
    s = s ? s : w;
    float *t = cur;
    cur = nxt, nxt = t;
  }
  /* the adjoints of member r + 1's block, complete here, go home (into
   * cur, free now), then into their places of [B, 3, H, n_r, D] */
  int next = (me + 1) % p;
  if (!s && p == 1)
    memcpy(cur, nxt + blk, sizeof(float) * (size_t)(2 * own));
  else if (!s)
    s = dtrt_mpi(ctx, MPI_Sendrecv(nxt + blk, (int)(2 * bh * R.len[next] * d), MPI_FLOAT, next,
                                   TAG, cur, (int)(2 * own), MPI_FLOAT, (me - 1 + p) % p, TAG,
                                   R.g.comm, MPI_STATUS_IGNORE),
                 op, "MPI_Sendrecv");
  int64_t hd = R.h * tq * d;   /* one batch's of dq, dk or dv */
  for (int64_t b = 0; !s && b < R.b; b++)
    for (int w = 1; w < 3; w++)
      memcpy(dq + (3 * b + w) * hd, cur + (w - 1) * own + b * hd, sizeof(float) * (size_t)hd);
  dtrt_free(ctx, buf);
  return s;
}
