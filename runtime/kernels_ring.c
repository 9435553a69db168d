/* kernels_ring.c: ring attention, the sequence split over the group of one
 * mesh axis (context parallelism). Member r holds the queries, keys and
 * values of its block of the sequence (positions off_r .. off_r + n_r - 1,
 * n_r the op's `sizes`, uneven as they may be); the blocks of keys and
 * values pass around the ring, r sending to r + 1 and receiving from r - 1,
 * and each member meets them in the order r, r - 1, ..., r + 1, merging
 * each into its rows' online softmax (kernels_attn.c's dtrt_attn_step). The
 * next block's transfer is posted (MPI_Isend, MPI_Irecv) before the current
 * block's products, so the two overlap. The backward passes the keys and
 * values around again, with the adjoints of each block's keys and values,
 * which every member adds its part to and which come home after a last hop.
 *
 * Causal, a block's queries see the keys before them, so with the blocks
 * as they lie the last member would do the work of k blocks against the
 * first's one. The ring runs in a zig-zag instead (dtrt_ring_piece): each
 * member's block is cut in an early half (the larger by a row when its
 * length is odd) and a late one, and member r works on the early half of
 * its own block and the late half of member k - 1 - r's (the middle member
 * of an odd k on its own two), its queries and its keys and values alike.
 * Before the ring the partners swap their late halves (of q, k, v; of out,
 * lse and dout backward) by MPI_Sendrecv, and after it the late halves'
 * results (out or lse; dq, dk and dv) go back, O(T D) each against the
 * ring's O(T^2 D). Each step a member meets one member's two pieces of
 * keys with its two of queries, a pair wholly after the queries skipped:
 * those of a member before it, both its pieces of queries meet the early
 * piece of keys; those of a member after it, its late piece meets both. So
 * every member does about k / 2 blocks' work (the last did k - 1/2), and
 * about as much at each step, as the hops need, since they tie the members
 * step by step. With uneven blocks the halves are each member's own
 * block's, so the balance is as near as their lengths allow.
 * Without causality the blocks stay whole (no swap). Every sum runs in the
 * ring's order, piece by piece, fixed by the ranks: the result does not
 * depend on timing. ring_sdpa_with_lse is the forward that also sends its
 * rows' log-sum-exp home (ring_sdpa_lse's bits, from the rows' state it
 * ends with), so that the backward needs no ring_sdpa_lse.
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
  DtAttnStep st;               /* filled but for the pieces of queries and keys */
  bool zig;                    /* causal over several members: the zig-zag */
  int partner;                 /* whose late half this member computes */
  int64_t pos[2], cnt[2];      /* its pieces of queries: first positions, lengths */
  int64_t at2;                 /* a piece's first index in the whole Tq, less its position */
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
  R->zig = R->st.causal && p > 1;
  R->partner = R->zig ? p - 1 - R->g.me : R->g.me;
  for (int k = 0; k < 2; k++)
    dtrt_ring_piece(R->len, p, R->g.me, R->zig, k, &R->pos[k], &R->cnt[k]);
  R->at2 = R->st.at[2] - R->qoff;
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

/* The floats of the ring's work: two blocks of kv of k and v (forward),
 * the queries' pieces and the rows' state; two blocks of k, v, dk and dv
 * (backward, kv 4), the pieces of q, out, dout and dq, and of lse. Pieces
 * and blocks hold at most maxt rows of each head. */
static int64_t ring_floats(int kv, int64_t bh, int64_t maxt, int64_t d) {
  if (kv == 4)
    return 2 * 4 * bh * maxt * d + 4 * bh * maxt * d + bh * maxt;
  return 2 * kv * bh * maxt * d + bh * maxt * d + bh * maxt * (2 + (kv - 1) * d);
}

int64_t dtrt_ring_staged(const DtTensor *in, int nin, const DtTensor *out, const DtAttrs *a,
                         int p) {
  if (nin < 2 || in[0].rank != 4 || out->rank < 3 || out->rank > 5 || dtrt_ni(a) < 1 + p)
    return 0;
  int64_t maxt = 0;
  for (int m = 0; m < p; m++)
    maxt = a->i[1 + m] > maxt ? a->i[1 + m] : maxt;
  int kv = out->rank == 5 ? 4 : out->rank - 2;   /* grad; forward, lse */
  return (int64_t)sizeof(float) * ring_floats(kv, in[0].dim[0] * in[0].dim[1], maxt,
                                              in[0].dim[3]);
}

void dtrt_ring_piece(const int64_t *len, int p, int r, bool zig, int piece, int64_t *off,
                     int64_t *n) {
  int m = piece && zig ? p - 1 - r : r;
  int64_t o = 0;
  for (int k = 0; k < m; k++)
    o += len[k];
  int64_t early = zig ? (len[m] + 1) / 2 : len[m];
  *off = o + (piece ? early : 0);
  *n = piece ? len[m] - early : early;
}

/* Rows [from, from + n) of each head of x (xrows rows of w floats a head,
 * its batches xs floats apart) to packed y ([B, H, n, w]), or from y back
 * (back). */
static void rows(const Ring *R, float *x, int64_t xs, int64_t xrows, int64_t from, int64_t n,
                 int64_t w, float *y, bool back) {
  size_t bytes = sizeof(float) * (size_t)(n * w);
  for (int64_t b = 0; n && b < R->b; b++)
    for (int64_t h = 0; h < R->h; h++) {
      float *xp = x + b * xs + (h * xrows + from) * w, *yp = y + ((b * R->h + h) * n) * w;
      memcpy(back ? xp : yp, back ? yp : xp, bytes);
    }
}

/* Sends ns floats at send to the zig-zag partner and receives nr into recv
 * (a copy when the partner is this member). */
static DtStatus trade(DtrtCtx *ctx, const char *op, const Ring *R, const float *send, int64_t ns,
                      float *recv, int64_t nr) {
  if (R->partner == R->g.me) {
    memmove(recv, send, sizeof(float) * (size_t)ns);
    return DT_OK;
  }
  return dtrt_mpi(ctx, MPI_Sendrecv(send, (int)ns, MPI_FLOAT, R->partner, TAG + 1, recv, (int)nr,
                                    MPI_FLOAT, R->partner, TAG + 1, R->g.comm, MPI_STATUS_IGNORE),
                  op, "MPI_Sendrecv");
}

/* This member's pieces of x (its block's rows, w floats each, batches xs
 * floats apart) packed into y: its early half, then the partner's late
 * half (tmp: room for this member's late half). */
static DtStatus gather(DtrtCtx *ctx, const char *op, const Ring *R, const float *x, int64_t xs,
                       int64_t w, float *y, float *tmp) {
  int64_t bh = R->b * R->h, n0 = R->cnt[0], late = R->tq - n0;
  float *xv = (float *)x;   /* read only: rows copies to y */
  rows(R, xv, xs, R->tq, 0, n0, w, y, false);
  rows(R, xv, xs, R->tq, n0, late, w, tmp, false);
  return trade(ctx, op, R, tmp, bh * late * w, y + bh * n0 * w, bh * R->cnt[1] * w);
}

/* The inverse of gather: the rows of this member's pieces in y go home to
 * their places in x (tmp: room for this member's late half). */
static DtStatus scatter(DtrtCtx *ctx, const char *op, const Ring *R, const float *y, float *x,
                        int64_t xs, int64_t w, float *tmp) {
  int64_t bh = R->b * R->h, n0 = R->cnt[0], late = R->tq - n0;
  DtStatus s = trade(ctx, op, R, y + bh * n0 * w, bh * R->cnt[1] * w, tmp, bh * late * w);
  rows(R, x, xs, R->tq, 0, n0, w, (float *)y, true);
  if (!s)
    rows(R, x, xs, R->tq, n0, late, w, tmp, true);
  return s;
}

/* Posts the hop of a step: what this member holds (count floats, at cur) to
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

/* The rows of member src's block of keys and values: its two pieces. */
static int64_t block_rows(const Ring *R, int src, int64_t off[2], int64_t n[2]) {
  for (int k = 0; k < 2; k++)
    dtrt_ring_piece(R->len, R->g.size, src, R->zig, k, &off[k], &n[k]);
  return n[0] + n[1];
}

/* The products of this member's pieces of queries (their rows' state, out,
 * lse, dout and dq packed at q's layout) with the block of keys from src at
 * cur (k, then v unless kv is 1: each its two pieces; their adjoints at
 * grad, or NULL), piece by piece, skipping a pair whose keys all lie after
 * its last query (causal). */
static DtStatus products(DtrtCtx *ctx, const char *op, Ring *R, int src, const float *cur, int kv,
                         float *grad) {
  int64_t koff[2], kn[2], bh = R->b * R->h, d = R->d;
  int64_t tk = block_rows(R, src, koff, kn);
  DtAttnStep st = R->st;
  DtStatus s = DT_OK;
  for (int qi = 0; !s && qi < 2; qi++)
    for (int ki = 0; !s && ki < 2; ki++) {
      if (!R->cnt[qi] || !kn[ki] || (st.causal && koff[ki] >= R->pos[qi] + R->cnt[qi]))
        continue;
      int64_t q = qi ? bh * R->cnt[0] : 0, k = ki ? bh * kn[0] : 0;   /* first rows, packed */
      st.q = R->st.q + q * d, st.tq = R->cnt[qi], st.qoff = R->pos[qi];
      st.at[2] = R->at2 + R->pos[qi];
      st.k = cur + k * d, st.v = kv > 1 ? cur + (bh * tk + k) * d : NULL;
      st.tk = kn[ki], st.koff = st.at[3] = koff[ki];
      if (R->st.m)
        st.m = R->st.m + q, st.l = R->st.l + q, st.acc = R->st.acc ? R->st.acc + q * d : NULL;
      if (grad) {
        st.o = R->st.o + q * d, st.lse = R->st.lse + q, st.dout = R->st.dout + q * d;
        st.g[0] = R->st.g[0] + q * d, st.g[1] = grad + k * d, st.g[2] = grad + (bh * tk + k) * d;
      }
      s = dtrt_attn_step(ctx, op, &st);
    }
  return s;
}

/* The forward (kv 2: k and v travel, the output; with_lse: out[1] the
 * rows' log-sum-exp too) or the rows' log-sum-exp (kv 1: k alone). */
static DtStatus ring_forward(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                             DtTensor *out, const DtAttrs *a, int kv, bool with_lse) {
  Ring R;
  DtStatus s = ring_begin(ctx, op, in, nin, kv + 1, out, kv == 2 ? 4 : 3, a, &R);
  DtTensor *lse = kv == 1 ? out : with_lse ? &out[1] : NULL;
  if (!s && lse != out && lse)
    s = dtrt_check_as(ctx, op, "lse", lse, DTRT_F32, in[0].dim, 3);
  if (s)
    return s;
  int p = R.g.size, me = R.g.me;
  int64_t bh = R.b * R.h, d = R.d, blk = kv * bh * R.maxt * d;
  int64_t rows_me = R.cnt[0] + R.cnt[1], hd = R.h * R.tq * d;
  float *buf = dtrt_alloc(ctx, sizeof(float) * (size_t)ring_floats(kv, bh, R.maxt, d));
  if (!buf)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for the ring's blocks", op);
  float *cur = buf, *nxt = buf + blk, *q = nxt + blk;
  R.st.q = q;
  R.st.m = q + bh * R.maxt * d, R.st.l = R.st.m + bh * R.maxt;
  R.st.acc = kv == 2 ? R.st.l + bh * R.maxt : NULL;
  for (int64_t r = 0; r < bh * rows_me; r++)
    R.st.m[r] = -INFINITY;
  /* the pieces: of q, and of k and v as the first block */
  s = gather(ctx, op, &R, in[0].data, hd, d, q, nxt);
  for (int k = 1; !s && k <= kv; k++)
    s = gather(ctx, op, &R, in[k].data, hd, d, cur + (k - 1) * bh * rows_me * d, nxt);
  for (int step = 0; !s && step < p; step++) {
    int src = (me - step + p) % p, nsrc = (src - 1 + p) % p;
    int64_t off[2], n[2];
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (step < p - 1)
      s = post(ctx, op, &R, cur, kv * bh * block_rows(&R, src, off, n) * d, nxt,
               kv * bh * block_rows(&R, nsrc, off, n) * d, req);
    if (!s)
      s = products(ctx, op, &R, src, cur, kv, NULL);
    DtStatus w = step < p - 1 ? dtrt_mpi(ctx, MPI_Waitall(2, req, MPI_STATUSES_IGNORE), op,
                                         "MPI_Waitall") : DT_OK;   /* a group of one: no MPI */
    s = s ? s : w;
    float *t = cur;
    cur = nxt, nxt = t;
  }
  /* the pieces' rows, the output into q's room and the lse into m's (each
   * row's m read before it is written), then home */
  for (int64_t r = 0; !s && r < bh * rows_me; r++) {
    float l = R.st.l[r];
    if (lse)
      R.st.m[r] = l > 0 ? R.st.m[r] + logf(l) : -INFINITY;
    float inv = l > 0 ? 1 / l : 0;
    for (int64_t j = 0; kv == 2 && j < d; j++)
      q[r * d + j] = R.st.acc[r * d + j] * inv;
  }
  if (!s && kv == 2)
    s = scatter(ctx, op, &R, q, out->data, R.h * R.tq * d, d, cur);
  if (!s && lse)
    s = scatter(ctx, op, &R, R.st.m, lse->data, R.h * R.tq, 1, cur);
  dtrt_free(ctx, buf);
  return s;
}

/* ring_sdpa(q, k, v){axis, sizes, causal?, scale, p?, seed?, at}: q, k, v
 * [B, H, n_r, D], member r's block -> [B, H, n_r, D], sdpa's rows of the
 * whole sequence. */
DTRT_TRACED(ring_sdpa, DTRT_TID_COMM) {
  return ring_forward(ctx, "ring_sdpa", in, nin, out, a, 2, false);
}

/* ring_sdpa_lse(q, k){...}: -> [B, H, n_r], sdpa_lse's rows. */
DTRT_TRACED(ring_sdpa_lse, DTRT_TID_COMM) {
  return ring_forward(ctx, "ring_sdpa_lse", in, nin, out, a, 1, false);
}

/* ring_sdpa_with_lse(q, k, v){...}: ring_sdpa's out[0], and out[1] f32 [B,
 * H, n_r], ring_sdpa_lse's rows (the same bits), from the rows' state the
 * forward ends with, sent home as ring_sdpa_lse sends them: one more
 * exchange of the late halves' rows (causal), no more memory than
 * ring_sdpa's (dtrt_ring_staged counts out[0]). Traced as "ring_sdpa". */
DTRT_TRACED_AS(ring_sdpa_with_lse, "ring_sdpa", DTRT_TID_COMM) {
  return ring_forward(ctx, "ring_sdpa_with_lse", in, nin, out, a, 2, true);
}

/* ring_sdpa_grad(q, k, v, out, lse, dout){...}: -> [B, 3, H, n_r, D], dq,
 * dk and dv of member r's block, stacked. Each hop carries a block's keys
 * and values (posted before the step's products) and then their adjoints
 * (after). */
DTRT_TRACED(ring_sdpa_grad, DTRT_TID_COMM) {
  const char *op = "ring_sdpa_grad";
  Ring R;
  DtStatus s = ring_begin(ctx, op, in, nin, 6, out, 5, a, &R);
  if (s)
    return s;
  int p = R.g.size, me = R.g.me;
  int64_t bh = R.b * R.h, d = R.d, blk = 2 * bh * R.maxt * d, piece = bh * R.maxt * d;
  int64_t rows_me = R.cnt[0] + R.cnt[1], hd = R.h * R.tq * d;
  float *buf = dtrt_alloc(ctx, sizeof(float) * (size_t)ring_floats(4, bh, R.maxt, d));
  if (!buf)
    return dtrt_fail(ctx, DT_ERR_NOMEM, "%s: no memory for the ring's blocks", op);
  /* k v | dk dv, each of blk; then the pieces of q, out, dout, dq and lse */
  float *cur = buf, *nxt = buf + 2 * blk, *q = nxt + 2 * blk;
  float *o = q + piece, *dout = o + piece, *dq = dout + piece, *lse = dq + piece;
  R.st.q = q, R.st.o = o, R.st.dout = dout, R.st.lse = lse, R.st.g[0] = dq;
  R.st.m = NULL;
  const float *from[] = {in[0].data, in[3].data, in[5].data};
  float *to[] = {q, o, dout};
  for (int k = 0; !s && k < 3; k++)
    s = gather(ctx, op, &R, from[k], hd, d, to[k], nxt);
  if (!s)
    s = gather(ctx, op, &R, in[4].data, R.h * R.tq, 1, lse, nxt);
  for (int k = 1; !s && k <= 2; k++)
    s = gather(ctx, op, &R, in[k].data, hd, d, cur + (k - 1) * bh * rows_me * d, nxt);
  for (int step = 0; !s && step < p; step++) {
    int src = (me - step + p) % p, nsrc = (src - 1 + p) % p;
    int64_t off[2], n[2];
    int64_t cnt = 2 * bh * block_rows(&R, src, off, n) * d;
    int64_t ncnt = 2 * bh * block_rows(&R, nsrc, off, n) * d;
    MPI_Request req[4] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL,
                          MPI_REQUEST_NULL};
    if (step < p - 1)
      s = post(ctx, op, &R, cur, cnt, nxt, ncnt, req);
    if (!s)
      s = products(ctx, op, &R, src, cur, 2, cur + blk);
    if (!s && step < p - 1)
      s = post(ctx, op, &R, cur + blk, cnt, nxt + blk, ncnt, req + 2);
    DtStatus w = step < p - 1 ? dtrt_mpi(ctx, MPI_Waitall(4, req, MPI_STATUSES_IGNORE), op,
                                         "MPI_Waitall") : DT_OK;
    s = s ? s : w;
    float *t = cur;
    cur = nxt, nxt = t;
  }
  /* the adjoints of member r + 1's pieces, complete here, go home (into
   * cur, free now); then every piece's dq, dk and dv to its place of
   * [B, 3, H, n_r, D] */
  int next = (me + 1) % p;
  int64_t off[2], n[2], mine = 2 * bh * rows_me * d;
  if (!s && p == 1)
    memcpy(cur, nxt + blk, sizeof(float) * (size_t)mine);
  else if (!s)
    s = dtrt_mpi(ctx, MPI_Sendrecv(nxt + blk, (int)(2 * bh * block_rows(&R, next, off, n) * d),
                                   MPI_FLOAT, next, TAG, cur, (int)mine, MPI_FLOAT,
                                   (me - 1 + p) % p, TAG, R.g.comm, MPI_STATUS_IGNORE),
                 op, "MPI_Sendrecv");
  float *g = out->data;
  const float *res[] = {dq, cur, cur + bh * rows_me * d};
  for (int w = 0; !s && w < 3; w++)
    s = scatter(ctx, op, &R, res[w], g + w * hd, 3 * hd, d, nxt);
  dtrt_free(ctx, buf);
  return s;
}
