/* kernels_comm.c: the collective kernels over the group of one mesh axis:
 * all-reduce, all-gather, reduce-scatter and all-to-all, each either through
 * MPI's own collective or by one of dtc's methods (ring, grouped,
 * hierarchical by node for all_reduce, padded for all_gather), the summing
 * ones in f32 or bf16 on the wire, and shard_slice, the local cut of a whole
 * tensor to this member's block.
 *
 * bf16 on the wire (DT_WIRE_BF16) rounds to nearest-even exactly here:
 *   mpi, grouped, hierarchical: each member's input, once, then every
 *     combination of MPI's reduction (bf16.c's MPI_Op: bf16(a + b), the
 *     addition in f32), in MPI's order;
 *   ring: the running sum a member forwards, at each of the p-1 hops (the
 *     receiver adds it in f32 to its own unrounded input), then the chunk's
 *     final sum at its owner, before the all-gather sends it as it is.
 * So the result is a bf16 value, the same on every member (over a group of
 * one nothing travels and nothing is rounded). Each member's value meets at
 * most 2p-1 roundings of a relative error of at most u = 2^-8 (bf16's 8-bit
 * significand: half its spacing 2^-7 at 1) + 2^-24 (the f32 addition before
 * it), so the result lies within gamma(2p-1) sum |x_m| of the exact sum,
 * gamma(n) = n u / (1 - n u): about 1.2% of sum |x_m| on 2 members, 2.8% on
 * 4. */
#include <limits.h>
#include <string.h>

#include "dtrt_int.h"

/* Tag of the point-to-point messages of the rings and the pairwise exchange;
 * they travel on dtrt's own communicators, so no other traffic shares it. */
enum { TAG = 0x6474 };

/* How a dim is cut among the p members of a group: member m holds
 * [off[m], off[m] + len[m]) along it (off[p] is the dim's length). Packed
 * member after member, the blocks of a tensor whose other dims hold `unit`
 * elements start at dsp[m] and hold cnt[m] elements: MPI's counts. */
typedef struct Split {
  int64_t *len, *off;
  int *cnt, *dsp;
} Split;

/* The bytes of one split's tables for a group of p. */
static size_t table_bytes(int p) {
  return (size_t)(2 * p + 1) * sizeof(int64_t) + (size_t)(2 * p) * sizeof(int);
}

/* n splits for a group of p in one allocation, released by free_splits. */
static bool alloc_splits(DtrtCtx *ctx, int p, Split *sp, int n) {
  size_t one = table_bytes(p);
  char *mem = dtrt_alloc(ctx, one * (size_t)n);
  for (int k = 0; mem && k < n; k++, mem += one) {
    sp[k].len = (int64_t *)mem;
    sp[k].off = sp[k].len + p;
    sp[k].cnt = (int *)(sp[k].off + p + 1);
    sp[k].dsp = sp[k].cnt + p;
  }
  return mem != NULL;
}

static void free_splits(DtrtCtx *ctx, Split *sp) { dtrt_free(ctx, sp[0].len); }

/* Cuts a dim of `total` elements among p members: by the lengths list[0..p),
 * or evenly when list is NULL (the first total % p members one more). */
static DtStatus cut(DtrtCtx *ctx, const char *op, const char *what, const int64_t *list, int p,
                    int64_t total, int64_t unit, Split *sp) {
  int64_t at = 0, elems;
  for (int m = 0; m < p; m++) {
    int64_t len = list ? list[m] : total / p + (m < total % p);
    if (len < 0 || len > total - at)
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "%s: block %d of the %s dim has length %lld; the dim has %lld, %lld of "
                       "them in earlier blocks",
                       op, m, what, (long long)len, (long long)total, (long long)at);
    sp->len[m] = len;
    sp->off[m] = at;
    at += len;
  }
  sp->off[p] = at;
  if (at != total)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the blocks of the %s dim sum to %lld, the dim has %lld",
                     op, what, (long long)at, (long long)total);
  if (!dtrt_mul(total, unit, &elems) || elems > INT_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: %lld x %lld elements are more than one MPI call can move (%d)", op,
                     (long long)total, (long long)unit, INT_MAX);
  for (int m = 0; m < p; m++) {
    sp->cnt[m] = (int)(sp->len[m] * unit);
    sp->dsp[m] = (int)(sp->off[m] * unit);
  }
  return DT_OK;
}

/* Product of t's dims other than d1 and d2 (-1 for none). */
static int64_t unit_of(const DtTensor *t, int d1, int d2) {
  int64_t n = 1;
  for (int k = 0; k < t->rank; k++)
    if (k != d1 && k != d2)
      n *= t->dim[k];
  return n;
}

static int64_t outer_of(const DtTensor *t, int d) {
  int64_t n = 1;
  for (int k = 0; k < d; k++)
    n *= t->dim[k];
  return n;
}

/* Copies the slab [at, at + len) along dim d of t (4-byte elements) to or from
 * a packed buffer p. All other dims are whole, so the slab is `outer` runs of
 * len * inner contiguous elements. */
static void slab(void *t, const DtTensor *shape, int d, int64_t at, int64_t len, void *p,
                 bool pack) {
  int64_t outer = outer_of(shape, d), inner = 1;
  for (int k = d + 1; k < shape->rank; k++)
    inner *= shape->dim[k];
  size_t run = (size_t)(len * inner) * 4;
  if (!run)
    return;
  for (int64_t o = 0; o < outer; o++) {
    char *a = (char *)t + (size_t)((o * shape->dim[d] + at) * inner) * 4;
    char *b = (char *)p + (size_t)o * run;
    if (pack)
      memcpy(b, a, run);
    else
      memcpy(a, b, run);
  }
}

/* The bytes of the copy of t's blocks along d packed member after member
 * (4-byte elements): none when they are contiguous already, every dim
 * before d of length 1. */
static int64_t pack_bytes(const DtTensor *t, int d) {
  return outer_of(t, d) == 1 ? 0 : dtrt_numel(t) * 4;
}

/* How a summing collective's values travel: MPI's type and sum, and the
 * bytes of one element on the wire. */
typedef struct Wire {
  MPI_Datatype type;
  MPI_Op sum;
  int size;
  bool bf16;
} Wire;

static Wire wire_of(const DtGroup *g, int wire) {
  return wire == DT_WIRE_BF16 ? (Wire){g->bf16, g->bf16_sum, 2, true}
                              : (Wire){MPI_FLOAT, MPI_SUM, 4, false};
}

/* The elements of the largest of p near-even chunks of n (the first). */
static int64_t ring_chunk(int64_t n, int p) { return n / p + (n % p != 0); }

/* The bytes of padded all-gather's buffer: its own block, then p blocks,
 * each padded to the largest, `most` elements. */
static int64_t padded_bytes(int64_t most, int p) { return most * (p + 1) * 4; }

/* The bytes reduce-scatter works on, its input in cut along d:
 * the ring sums a packed copy in place beside the largest block (`most`
 * elements; in bf16 two of them, sent and received); the others pack only
 * blocks that are not contiguous, and in bf16 then round the whole input
 * and receive their block in bf16. */
static int64_t scatter_bytes(const DtTensor *in, int d, bool ring, int64_t most, bool bf16) {
  int64_t n = dtrt_numel(in);
  if (ring)
    return (n + most) * 4;
  return pack_bytes(in, d) + (bf16 ? (n + most) * 2 : 0);
}

/* The bytes all_reduce works on beside its output, n elements over p: the
 * ring's received chunk (in bf16 also the chunk sent) and, in bf16, the
 * rounded copy of the whole that the all-gather (or MPI) moves. */
static int64_t reduce_bytes(int64_t n, int p, int method, bool bf16) {
  return (method == DTRT_COMM_RING ? ring_chunk(n, p) * 4 : 0) + (bf16 ? n * 2 : 0);
}

static MPI_Datatype mpi_type(int dtype) { return dtype == DTRT_I32 ? MPI_INT32_T : MPI_FLOAT; }

/* The int attributes of a collective kernel: `fixed` ones (the mesh axis
 * first), then, when `listed`, the p members' block lengths, then a method
 * when the kernel takes one (coll >= 0; default DTRT_COMM_MPI) and, when
 * `more`, optionally p more lengths. */
typedef struct Layout {
  const char *op;
  int fixed;
  bool listed, more;
  int coll;                /* DtColl, -1: no method */
  bool wire;               /* a DtWire may follow the method */
} Layout;

static const Layout all_reduce_l = {"all_reduce", 1, false, false, DT_COLL_ALL_REDUCE, true};
static const Layout all_gather_l = {"all_gather", 2, true, false, DT_COLL_ALL_GATHER, false};
static const Layout reduce_scatter_l = {"reduce_scatter",       2,   true, false,
                                        DT_COLL_REDUCE_SCATTER, true};
static const Layout all_to_all_l = {"all_to_all", 3, true, true, DT_COLL_ALL_TO_ALL, false};
static const Layout shard_slice_l = {"shard_slice", 2, true, false, -1, false};

/* One call's group, method, wire format (DtWire), and where its `more`
 * lengths start (-1: none). */
typedef struct Call {
  DtGroup g;
  int method, wire, rest;
} Call;

/* The entry of every collective: one input, the group of mesh axis a->i[0],
 * the attributes of layout l. */
static DtStatus begin(DtrtCtx *ctx, const Layout *l, const DtTensor *in, int nin,
                      const DtTensor *out, const DtAttrs *a, Call *call) {
  const char *op = l->op;
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, DTRT_MAX_IATTRS, 0)))
    return s;
  if (dtrt_ni(a) < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: no mesh axis attribute", op);
  if ((s = dtrt_group(ctx, op, a->i[0], &call->g)))
    return s;
  int ni = a->ni, p = call->g.size, need = l->fixed + (l->listed ? p : 0);
  bool method = l->coll >= 0;
  if (ni != need && (!method || ni != need + 1) && !(l->wire && ni == need + 2) &&
      !(l->more && ni == need + 1 + p))
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: %d int attributes; over a group of %d it takes %d%s%s%s (at most %d)", op,
                     ni, p, need, method ? ", or one more for the method" : "",
                     l->wire ? ", then optionally the wire format" : "",
                     l->more ? ", then optionally the input's block lengths" : "", DTRT_MAX_IATTRS);
  int64_t m = ni > need ? a->i[need] : DTRT_COMM_MPI;
  bool known = m >= 0 && m < DTRT_COMM_COUNT;
  if (m != DTRT_COMM_MPI && !(known && dtrt_coll_has_method(l->coll, (int)m)))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: method %lld%s%s%s is not one of its methods", op,
                     (long long)m, known ? " (" : "", known ? dtrt_comm_method_names[m] : "",
                     known ? ")" : "");
  int64_t w = l->wire && ni == need + 2 ? a->i[need + 1] : DT_WIRE_F32;
  if (w < 0 || w >= DT_WIRE_COUNT)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: wire format %lld is not f32 (%d) or bf16 (%d)", op,
                     (long long)w, DT_WIRE_F32, DT_WIRE_BF16);
  call->method = (int)m;
  call->wire = (int)w;
  call->rest = l->more && ni == need + 1 + p ? need + 1 : -1;
  return DT_OK;
}

/* in and out: same dtype, same rank, same dims but d1 and d2 (-1: none). */
static DtStatus same_but(DtrtCtx *ctx, const char *op, const DtTensor *in, const DtTensor *out,
                         int d1, int d2) {
  bool same = in->rank == out->rank;
  for (int k = 0; same && k < in->rank; k++)
    same = k == d1 || k == d2 || in->dim[k] == out->dim[k];
  if (same)
    return DT_OK;
  char ti[128], to[128];
  return dtrt_fail(ctx, DT_ERR_ARG, "%s: input %s and output %s differ outside the split dim%s",
                   op, dtrt_type_str(in->dtype, in->dim, in->rank, ti, sizeof ti),
                   dtrt_type_str(out->dtype, out->dim, out->rank, to, sizeof to),
                   d2 >= 0 ? "s" : "");
}

/* A group of one: out is in. */
static DtStatus copy(const DtTensor *in, DtTensor *out) {
  int64_t n = dtrt_numel(out);
  if (n && out->data != in->data)
    memcpy(out->data, in->data, (size_t)n * 4);
  return DT_OK;
}

/* Ring reduce-scatter over y, packed as sp says: in step k member r passes
 * its running sum of chunk r-k-1 to r+1 and adds what r-1 passes into chunk
 * r-k-2; after p-1 steps member r holds the whole sum of chunk r, in f32.
 * tmp holds the largest chunk (`most` elements) received; in bf16 it first
 * holds the chunk sent, rounded, and then the one received. */
static DtStatus ring_reduce(DtrtCtx *ctx, const char *op, const DtGroup *g, float *y,
                            const Split *sp, void *tmp, int64_t most, const Wire *w) {
  int p = g->size, r = g->me, next = (r + 1) % p, prev = (r + p - 1) % p;
  uint16_t *out = tmp, *in = out + most;
  for (int k = 0; k < p - 1; k++) {
    int cs = (r - k - 1 + 2 * p) % p, cr = (r - k - 2 + 2 * p) % p;
    if (w->bf16)
      dtrt_bf16_pack(y + sp->dsp[cs], out, sp->cnt[cs]);
    DtStatus s = dtrt_mpi(ctx,
                          MPI_Sendrecv(w->bf16 ? (void *)out : y + sp->dsp[cs], sp->cnt[cs],
                                       w->type, next, TAG, w->bf16 ? (void *)in : tmp, sp->cnt[cr],
                                       w->type, prev, TAG, g->comm, MPI_STATUS_IGNORE),
                          op, "MPI_Sendrecv");
    if (s)
      return s;
    float *acc = y + sp->dsp[cr];
    if (w->bf16)
      for (int j = 0; j < sp->cnt[cr]; j++)
        acc[j] += dtrt_bf16_to_f32(in[j]);
    else
      for (int j = 0; j < sp->cnt[cr]; j++)
        acc[j] += ((const float *)tmp)[j];
  }
  return DT_OK;
}

/* Ring all-gather over y (elements of esz bytes), packed as sp says,
 * member r holding chunk r: in step k it passes chunk r-k to r+1 and
 * receives chunk r-k-1 from r-1. */
static DtStatus ring_gather(DtrtCtx *ctx, const char *op, const DtGroup *g, void *y,
                            const Split *sp, MPI_Datatype type, int esz) {
  int p = g->size, r = g->me, next = (r + 1) % p, prev = (r + p - 1) % p;
  char *u = y;
  for (int k = 0; k < p - 1; k++) {
    int cs = (r - k + p) % p, cr = (r - k - 1 + p) % p;
    DtStatus s = dtrt_mpi(ctx,
                          MPI_Sendrecv(u + (size_t)sp->dsp[cs] * esz, sp->cnt[cs], type, next, TAG,
                                       u + (size_t)sp->dsp[cr] * esz, sp->cnt[cr], type, prev, TAG,
                                       g->comm, MPI_STATUS_IGNORE),
                          op, "MPI_Sendrecv");
    if (s)
      return s;
  }
  return DT_OK;
}

/* Element `at` of a buffer of w's elements. */
static void *wire_at(void *y, int64_t at, const Wire *w) { return (char *)y + at * w->size; }

/* MPI_Allreduce in pieces of at most INT_MAX elements (x == y: in place). */
static DtStatus all_reduce_mpi(DtrtCtx *ctx, const char *op, const DtGroup *g, const void *x,
                               void *y, int64_t n, const Wire *w) {
  for (int64_t at = 0; at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    DtStatus s = dtrt_mpi(ctx,
                          MPI_Allreduce(x == y ? MPI_IN_PLACE : wire_at((void *)x, at, w),
                                        wire_at(y, at, w), k, w->type, w->sum, g->comm),
                          op, "MPI_Allreduce");
    if (s)
      return s;
  }
  return DT_OK;
}

/* Ring all-reduce of y (f32) in place: y cut evenly into p chunks, a ring
 * reduce-scatter, then a ring all-gather; each member sends 2(p-1)/p of y.
 * In bf16, h (n elements) is where each owner rounds its chunk's sum and the
 * all-gather moves them. */
static DtStatus all_reduce_ring(DtrtCtx *ctx, const char *op, const DtGroup *g, float *y,
                                uint16_t *h, int64_t n, const Wire *w) {
  Split sp;
  if (!alloc_splits(ctx, g->size, &sp, 1))
    return DT_ERR_NOMEM;
  int64_t most = ring_chunk(n, g->size);
  DtStatus s = cut(ctx, op, "flattened", NULL, g->size, n, 1, &sp);
  float *tmp = s ? NULL : dtrt_alloc(ctx, (size_t)most * 4);
  if (!s && !tmp)
    s = DT_ERR_NOMEM;
  if (!s && !(s = ring_reduce(ctx, op, g, y, &sp, tmp, most, w))) {
    if (w->bf16) {
      int me = g->me;
      dtrt_bf16_pack(y + sp.dsp[me], h + sp.dsp[me], sp.cnt[me]);
      if (!(s = ring_gather(ctx, op, g, h, &sp, w->type, w->size)))
        dtrt_bf16_unpack(h, y, n);
    } else {
      s = ring_gather(ctx, op, g, y, &sp, MPI_FLOAT, 4);
    }
  }
  dtrt_free(ctx, tmp);
  free_splits(ctx, &sp);
  return s;
}

/* Grouped all-reduce of y in place: MPI_Reduce to member 0, MPI_Bcast from
 * it, each in pieces of at most INT_MAX elements. */
static DtStatus all_reduce_grouped(DtrtCtx *ctx, const char *op, MPI_Comm comm, int me, void *y,
                                   int64_t n, const Wire *w) {
  DtStatus s = DT_OK;
  for (int64_t at = 0; !s && at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    void *ya = wire_at(y, at, w);
    s = dtrt_mpi(ctx,
                 MPI_Reduce(me ? ya : MPI_IN_PLACE, me ? NULL : ya, k, w->type, w->sum, 0, comm),
                 op, "MPI_Reduce");
    if (!s)
      s = dtrt_mpi(ctx, MPI_Bcast(ya, k, w->type, 0, comm), op, "MPI_Bcast");
  }
  return s;
}

/* Hierarchical all-reduce of y in place (P2's reduce / all-reduce /
 * broadcast decomposition): the group is split into nodes, the members that
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) puts together; each node reduces
 * to its first member, those leaders all-reduce among themselves, and each
 * leader broadcasts inside its node. The two communicators are made and
 * freed on every call: the method is for large tensors, where their cost is
 * small beside the transfer. */
static DtStatus all_reduce_hier(DtrtCtx *ctx, const char *op, const DtGroup *g, void *y, int64_t n,
                                const Wire *w) {
  MPI_Comm node = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
  int nme = 0;
  DtStatus s = dtrt_mpi(ctx,
                        MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->me, MPI_INFO_NULL,
                                            &node),
                        op, "MPI_Comm_split_type");
  if (!s)
    s = dtrt_mpi(ctx, MPI_Comm_rank(node, &nme), op, "MPI_Comm_rank");
  if (!s)
    s = dtrt_mpi(ctx, MPI_Comm_split(g->comm, nme ? MPI_UNDEFINED : 0, g->me, &leaders), op,
                 "MPI_Comm_split");
  for (int64_t at = 0; !s && at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    void *ya = wire_at(y, at, w);
    s = dtrt_mpi(ctx,
                 MPI_Reduce(nme ? ya : MPI_IN_PLACE, nme ? NULL : ya, k, w->type, w->sum, 0, node),
                 op, "MPI_Reduce");
    if (!s && !nme)
      s = dtrt_mpi(ctx, MPI_Allreduce(MPI_IN_PLACE, ya, k, w->type, w->sum, leaders), op,
                   "MPI_Allreduce");
    if (!s)
      s = dtrt_mpi(ctx, MPI_Bcast(ya, k, w->type, 0, node), op, "MPI_Bcast");
  }
  if (leaders != MPI_COMM_NULL)
    MPI_Comm_free(&leaders);
  if (node != MPI_COMM_NULL)
    MPI_Comm_free(&node);
  return s;
}

/* all_reduce: attributes axis, [method (mpi, ring, grouped: reduce to member
 * 0 then broadcast, or hierarchical by node), [wire (DtWire)]]. in f32; out
 * the sum over the group, of in's shape; out->data may be in->data. */
DTRT_TRACED(all_reduce, DTRT_TID_COMM) {
  const char *op = "all_reduce";
  Call call;
  DtStatus s;
  if ((s = begin(ctx, &all_reduce_l, in, nin, out, a, &call)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim, in[0].rank)))
    return s;
  int64_t n = dtrt_numel(out);
  if (call.g.size == 1)
    return copy(&in[0], out);
  Wire w = wire_of(&call.g, call.wire);
  if (!w.bf16 && call.method == DTRT_COMM_MPI)
    return all_reduce_mpi(ctx, op, &call.g, in[0].data, out->data, n, &w);
  copy(&in[0], out);
  if (!w.bf16 && call.method == DTRT_COMM_GROUPED)
    return all_reduce_grouped(ctx, op, call.g.comm, call.g.me, out->data, n, &w);
  if (!w.bf16 && call.method == DTRT_COMM_HIER)
    return all_reduce_hier(ctx, op, &call.g, out->data, n, &w);
  if (!w.bf16)
    return all_reduce_ring(ctx, op, &call.g, out->data, NULL, n, &w);
  /* bf16: h is the rounded copy MPI sums in place, or the ring's gather */
  uint16_t *h = dtrt_alloc(ctx, (size_t)n * 2);
  if (!h)
    return DT_ERR_NOMEM;
  if (call.method != DTRT_COMM_RING)
    dtrt_bf16_pack(out->data, h, n);
  if (call.method == DTRT_COMM_RING)
    s = all_reduce_ring(ctx, op, &call.g, out->data, h, n, &w);
  else if (call.method == DTRT_COMM_GROUPED)
    s = all_reduce_grouped(ctx, op, call.g.comm, call.g.me, h, n, &w);
  else if (call.method == DTRT_COMM_HIER)
    s = all_reduce_hier(ctx, op, &call.g, h, n, &w);
  else
    s = all_reduce_mpi(ctx, op, &call.g, h, h, n, &w);
  if (!s && call.method != DTRT_COMM_RING)
    dtrt_bf16_unpack(h, out->data, n);
  dtrt_free(ctx, h);
  return s;
}

/* The split dim a->i[1] of a gather (out whole, in this member's block) or a
 * scatter (in whole, out the block): checks the shapes and fills sp. */
static DtStatus gather_split(DtrtCtx *ctx, const char *op, const DtAttrs *a, const DtGroup *g,
                             const DtTensor *in, const DtTensor *out, bool gather, int *d,
                             Split *sp) {
  const DtTensor *whole = gather ? out : in, *part = gather ? in : out;
  DtStatus s;
  if ((s = dtrt_axis(ctx, op, a->i[1], whole->rank, d)) ||
      (s = same_but(ctx, op, in, out, *d, -1)))
    return s;
  if (!alloc_splits(ctx, g->size, sp, 1))
    return DT_ERR_NOMEM;
  s = cut(ctx, op, "split", &a->i[2], g->size, whole->dim[*d], unit_of(whole, *d, -1), sp);
  if (!s && part->dim[*d] != sp->len[g->me])
    s = dtrt_fail(ctx, DT_ERR_ARG,
                  "%s: %s has %lld along dim %d, but member %d's block of the %lld is %lld", op,
                  gather ? "input" : "output", (long long)part->dim[*d], *d, g->me,
                  (long long)whole->dim[*d], (long long)sp->len[g->me]);
  if (s)
    free_splits(ctx, sp);
  return s;
}

/* The entry of a collective that moves blocks of any dtype: begin, in and
 * out of one dtype, and the split of the dim (gather_split). */
static DtStatus begin_moved(DtrtCtx *ctx, const Layout *l, const DtTensor *in, int nin,
                            const DtTensor *out, const DtAttrs *a, bool gather, Call *call,
                            int *d, Split *sp) {
  DtStatus s;
  if ((s = begin(ctx, l, in, nin, out, a, call)) ||
      (s = dtrt_check(ctx, l->op, "input", &in[0], 0)) ||
      (s = dtrt_check(ctx, l->op, "output", out, in[0].dtype)))
    return s;
  return gather_split(ctx, l->op, a, &call->g, &in[0], out, gather, d, sp);
}

/* Padded all-gather into y, packed as sp says: every member sends its block
 * padded to the largest (most elements), MPI_Allgather fills p * most
 * elements, and each block is then copied to its place in y. */
static DtStatus gather_padded(DtrtCtx *ctx, const char *op, const DtGroup *g, const void *x,
                              uint32_t *y, const Split *sp, MPI_Datatype type) {
  int p = g->size, most = 0;
  for (int m = 0; m < p; m++)
    most = sp->cnt[m] > most ? sp->cnt[m] : most;
  if (!most)
    return DT_OK;
  if ((int64_t)most * p > INT_MAX)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s: %d blocks padded to %d elements are more than one MPI call can move",
                     op, p, most);
  uint32_t *pad = dtrt_alloc(ctx, (size_t)padded_bytes(most, p));
  if (!pad)
    return DT_ERR_NOMEM;
  memset(pad, 0, (size_t)most * 4);
  if (sp->cnt[g->me])
    memcpy(pad, x, (size_t)sp->cnt[g->me] * 4);
  DtStatus s = dtrt_mpi(ctx, MPI_Allgather(pad, most, type, pad + most, most, type, g->comm), op,
                        "MPI_Allgather");
  for (int m = 0; !s && m < p; m++)
    if (sp->cnt[m])
      memcpy(y + sp->dsp[m], pad + most + (size_t)m * (size_t)most, (size_t)sp->cnt[m] * 4);
  dtrt_free(ctx, pad);
  return s;
}

/* all_gather: attributes axis, dim, p block lengths, [method] (mpi, ring,
 * grouped, or padded). in: this member's block along dim; out: the whole
 * tensor, blocks in member order; f32 or i32. The blocks are contiguous in out when every
 * dim before dim has length 1: MPI then writes straight into out. Otherwise
 * they arrive packed, member after member, in a temporary buffer and are
 * copied into place (outer runs of len * inner elements each). */
DTRT_TRACED(all_gather, DTRT_TID_COMM) {
  const char *op = "all_gather";
  Call call;
  int d;
  Split sp;
  DtStatus s;
  if ((s = begin_moved(ctx, &all_gather_l, in, nin, out, a, true, &call, &d, &sp)))
    return s;
  if (call.g.size == 1) {
    free_splits(ctx, &sp);
    return copy(&in[0], out);
  }
  MPI_Datatype type = mpi_type(in[0].dtype);
  bool direct = outer_of(out, d) == 1;
  uint32_t *y = direct ? out->data : dtrt_alloc(ctx, (size_t)pack_bytes(out, d));
  if (!y) {
    free_splits(ctx, &sp);
    return DT_ERR_NOMEM;
  }
  int me = call.g.me;
  if (call.method == DTRT_COMM_MPI) {
    s = dtrt_mpi(ctx, MPI_Allgatherv(in[0].data, sp.cnt[me], type, y, sp.cnt, sp.dsp, type,
                                     call.g.comm),
                 op, "MPI_Allgatherv");
  } else if (call.method == DTRT_COMM_PADDED) {
    s = gather_padded(ctx, op, &call.g, in[0].data, y, &sp, type);
  } else {
    if (sp.cnt[me])
      memcpy(y + sp.dsp[me], in[0].data, (size_t)sp.cnt[me] * 4);
    if (call.method == DTRT_COMM_RING)
      s = ring_gather(ctx, op, &call.g, y, &sp, type, 4);
    for (int m = 0; call.method == DTRT_COMM_GROUPED && !s && m < call.g.size; m++)
      if (sp.cnt[m])
        s = dtrt_mpi(ctx, MPI_Bcast(y + sp.dsp[m], sp.cnt[m], type, m, call.g.comm), op,
                     "MPI_Bcast");
  }
  if (!direct) {
    for (int m = 0; !s && m < call.g.size; m++)
      slab(out->data, out, d, sp.off[m], sp.len[m], y + sp.dsp[m], false);
    dtrt_free(ctx, y);
  }
  free_splits(ctx, &sp);
  return s;
}

/* reduce_scatter: attributes axis, dim, p block lengths, [method (mpi, ring,
 * grouped), [wire (DtWire)]]. in: the whole partial sum; out: this member's
 * block along dim of the sum over the group; f32. MPI and the ring read the
 * blocks packed member after member: in itself when every dim before dim has
 * length 1, else a packed copy (the ring always works on a copy, as it sums
 * in place). In bf16, mpi and grouped round that whole and receive their
 * block rounded; the ring rounds what it forwards and the owner's sum. */
DTRT_TRACED(reduce_scatter, DTRT_TID_COMM) {
  const char *op = "reduce_scatter";
  Call call;
  int d;
  Split sp;
  DtStatus s;
  if ((s = begin(ctx, &reduce_scatter_l, in, nin, out, a, &call)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "output", out, DTRT_F32)) ||
      (s = gather_split(ctx, op, a, &call.g, &in[0], out, false, &d, &sp)))
    return s;
  if (call.g.size == 1) {
    free_splits(ctx, &sp);
    return copy(&in[0], out);
  }
  int64_t n = dtrt_numel(&in[0]), most = 0;
  for (int m = 0; m < call.g.size; m++)
    most = sp.cnt[m] > most ? sp.cnt[m] : most;
  bool packed = outer_of(&in[0], d) == 1, ring = call.method == DTRT_COMM_RING;
  Wire w = wire_of(&call.g, call.wire);
  const float *x = in[0].data;
  float *tmp = NULL;
  int64_t staged = scatter_bytes(&in[0], d, ring, most, w.bf16);
  if (staged) {
    tmp = dtrt_alloc(ctx, (size_t)staged);
    if (!tmp) {
      free_splits(ctx, &sp);
      return DT_ERR_NOMEM;
    }
  }
  if (!packed || ring) {
    for (int m = 0; m < call.g.size; m++)
      slab(in[0].data, &in[0], d, sp.off[m], sp.len[m], tmp + sp.dsp[m], true);
    x = tmp;
  }
  /* mpi and grouped in bf16: the rounded whole h, the block received r */
  uint16_t *h = w.bf16 && !ring ? (uint16_t *)((char *)tmp + pack_bytes(&in[0], d)) : NULL,
           *r = h ? h + n : NULL;
  const void *send = h ? (const void *)h : x;
  void *recv = r ? (void *)r : out->data;
  int me = call.g.me;
  if (h)
    dtrt_bf16_pack(x, h, n);
  if (call.method == DTRT_COMM_MPI) {
    s = dtrt_mpi(ctx, MPI_Reduce_scatter(send, recv, sp.cnt, w.type, w.sum, call.g.comm), op,
                 "MPI_Reduce_scatter");
  } else if (ring) {
    s = ring_reduce(ctx, op, &call.g, tmp, &sp, tmp + n, most, &w);
    if (!s && w.bf16) /* the owner's sum, rounded as the other methods' */
      for (int j = 0; j < sp.cnt[me]; j++)
        tmp[sp.dsp[me] + j] = dtrt_bf16_to_f32(dtrt_bf16_from_f32(tmp[sp.dsp[me] + j]));
    if (!s && sp.cnt[me])
      memcpy(out->data, tmp + sp.dsp[me], (size_t)sp.cnt[me] * 4);
  } else {
    for (int m = 0; !s && m < call.g.size; m++)
      if (sp.cnt[m])
        s = dtrt_mpi(ctx,
                     MPI_Reduce(wire_at((void *)send, sp.dsp[m], &w), recv, sp.cnt[m], w.type,
                                w.sum, m, call.g.comm),
                     op, "MPI_Reduce");
  }
  if (!s && r)
    dtrt_bf16_unpack(r, out->data, sp.cnt[me]);
  dtrt_free(ctx, tmp);
  free_splits(ctx, &sp);
  return s;
}

/* The exchange of all_to_all, sp[0] cutting din (what arrives), sp[1] dout
 * (what leaves). What goes to each member is cut from x as a slab along dout,
 * what comes from each is put into out as a slab along din; a side needs no
 * packing when every dim before its split dim has length 1. */
static DtStatus exchange(DtrtCtx *ctx, const char *op, const DtGroup *g, int method,
                         const DtTensor *x, DtTensor *out, int di, int dout, const Split *sp) {
  int p = g->size, me = g->me;
  bool spack = outer_of(x, dout) != 1, rpack = outer_of(out, di) != 1;
  uint32_t *sbuf = x->data, *rbuf = out->data, *tmp = NULL;
  if (spack || rpack) {
    int64_t sbytes = pack_bytes(x, dout);
    tmp = dtrt_alloc(ctx, (size_t)(sbytes + pack_bytes(out, di)));
    if (!tmp)
      return DT_ERR_NOMEM;
    sbuf = spack ? tmp : sbuf;
    rbuf = rpack ? tmp + sbytes / 4 : rbuf;
  }
  for (int m = 0; spack && m < p; m++)
    slab(x->data, x, dout, sp[1].off[m], sp[1].len[m], sbuf + sp[1].dsp[m], true);
  MPI_Datatype type = mpi_type(x->dtype);
  DtStatus s = DT_OK;
  if (method == DTRT_COMM_MPI) {
    s = dtrt_mpi(ctx, MPI_Alltoallv(sbuf, sp[1].cnt, sp[1].dsp, type, rbuf, sp[0].cnt, sp[0].dsp,
                                    type, g->comm),
                 op, "MPI_Alltoallv");
  } else {
    if (sp[0].cnt[me])
      memcpy(rbuf + sp[0].dsp[me], sbuf + sp[1].dsp[me], (size_t)sp[0].cnt[me] * 4);
    for (int k = 1; !s && k < p; k++) {
      int to = (me + k) % p, from = (me - k + p) % p;
      s = dtrt_mpi(ctx,
                   MPI_Sendrecv(sbuf + sp[1].dsp[to], sp[1].cnt[to], type, to, TAG,
                                rbuf + sp[0].dsp[from], sp[0].cnt[from], type, from, TAG,
                                g->comm, MPI_STATUS_IGNORE),
                   op, "MPI_Sendrecv");
    }
  }
  for (int m = 0; !s && rpack && m < p; m++)
    slab(out->data, out, di, sp[0].off[m], sp[0].len[m], rbuf + sp[0].dsp[m], false);
  dtrt_free(ctx, tmp);
  return s;
}

/* all_to_all: attributes axis, din, dout, p block lengths along dout,
 * [method (mpi, or ring: a pairwise exchange of p-1 MPI_Sendrecv), [p block
 * lengths along din]]. in: this member's block along din, whole along dout;
 * out: its block along dout, whole along din; f32 or i32. Without lengths
 * along din the blocks there are even (the first length % p members one
 * more). Member m receives from every member s the part of s's block that
 * falls in m's block along dout. */
DTRT_TRACED(all_to_all, DTRT_TID_COMM) {
  const char *op = "all_to_all";
  Call call;
  int di, dout;
  DtStatus s;
  if ((s = begin(ctx, &all_to_all_l, in, nin, out, a, &call)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check(ctx, op, "output", out, in[0].dtype)) ||
      (s = dtrt_axis(ctx, op, a->i[1], in[0].rank, &di)) ||
      (s = dtrt_axis(ctx, op, a->i[2], in[0].rank, &dout)))
    return s;
  if (di == dout)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the input and output split dims are both %d", op, di);
  if ((s = same_but(ctx, op, &in[0], out, di, dout)))
    return s;
  const DtTensor *x = &in[0];
  int p = call.g.size, me = call.g.me;
  Split sp[2];
  if (!alloc_splits(ctx, p, sp, 2))
    return DT_ERR_NOMEM;
  if (!(s = cut(ctx, op, "input's split", call.rest < 0 ? NULL : &a->i[call.rest], p, out->dim[di],
                unit_of(out, di, -1), &sp[0])) &&
      !(s = cut(ctx, op, "output's split", &a->i[3], p, x->dim[dout], unit_of(x, dout, -1),
                &sp[1]))) {
    if (x->dim[di] != sp[0].len[me] || out->dim[dout] != sp[1].len[me])
      s = dtrt_fail(ctx, DT_ERR_ARG,
                    "%s: member %d has %lld along dim %d and %lld along dim %d, its blocks are "
                    "%lld and %lld",
                    op, me, (long long)x->dim[di], di, (long long)out->dim[dout], dout,
                    (long long)sp[0].len[me], (long long)sp[1].len[me]);
    else if (p == 1)
      s = copy(x, out);
    else
      s = exchange(ctx, op, &call.g, call.method, x, out, di, dout, sp);
  }
  free_splits(ctx, sp);
  return s;
}

/* shard_slice: attributes axis, dim, p block lengths. in: the whole tensor;
 * out: this member's block along dim, cut locally (no communication); f32 or
 * i32. */
DTRT_TRACED(shard_slice, DTRT_TID_COMM) {
  Call call;
  Split sp;
  int d;
  DtStatus s = begin_moved(ctx, &shard_slice_l, in, nin, out, a, false, &call, &d, &sp);
  if (s)
    return s;
  slab(in[0].data, &in[0], d, sp.off[call.g.me], sp.len[call.g.me], out->data, true);
  free_splits(ctx, &sp);
  return DT_OK;
}

/* The group and the members named by a point-to-point kernel's attributes:
 * axis, then nmem member indices, each of the group. */
static DtStatus begin_p2p(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin,
                          const DtTensor *out, const DtAttrs *a, int nmem, DtGroup *g) {
  DtStatus s;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, DTRT_MAX_IATTRS, 0)))
    return s;
  if (dtrt_ni(a) != 1 + nmem)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d int attributes; it takes %d", op, dtrt_ni(a),
                     1 + nmem);
  if ((s = dtrt_group(ctx, op, a->i[0], g)) || (s = dtrt_check(ctx, op, "input", &in[0], 0)) ||
      (s = dtrt_check_as(ctx, op, "output", out, in[0].dtype, in[0].dim, in[0].rank)))
    return s;
  for (int k = 1; k <= nmem; k++)
    if (a->i[k] < 0 || a->i[k] >= g->size)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: member %lld is not one of the group's %d", op,
                       (long long)a->i[k], g->size);
  return DT_OK;
}

/* send: attributes axis, from, to. Member `from` of the group hands in to
 * member `to` (MPI_Send, MPI_Recv in pieces of at most INT_MAX elements);
 * out is in on `from`, what arrived on `to`. Only those two members call it;
 * from != to. f32 or i32. */
DTRT_TRACED(send, DTRT_TID_COMM) {
  const char *op = "send";
  DtGroup g;
  DtStatus s = begin_p2p(ctx, op, in, nin, out, a, 2, &g);
  if (s)
    return s;
  int from = (int)a->i[1], to = (int)a->i[2];
  if (from == to || (g.me != from && g.me != to))
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: from member %d to %d, called on member %d", op, from,
                     to, g.me);
  int64_t n = dtrt_numel(out);
  MPI_Datatype type = mpi_type(in[0].dtype);
  for (int64_t at = 0; !s && at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    if (g.me == from)
      s = dtrt_mpi(ctx, MPI_Send((uint32_t *)in[0].data + at, k, type, to, TAG, g.comm), op,
                   "MPI_Send");
    else
      s = dtrt_mpi(ctx, MPI_Recv((uint32_t *)out->data + at, k, type, from, TAG, g.comm,
                                 MPI_STATUS_IGNORE),
                   op, "MPI_Recv");
  }
  if (!s && g.me == from)
    s = copy(&in[0], out);
  return s;
}

/* bcast: attributes axis, from. Every member of the group gets member
 * from's in as out (MPI_Bcast in pieces of at most INT_MAX elements); other
 * members' in gives only the shape. f32 or i32. */
DTRT_TRACED(bcast, DTRT_TID_COMM) {
  const char *op = "bcast";
  DtGroup g;
  DtStatus s = begin_p2p(ctx, op, in, nin, out, a, 1, &g);
  if (s)
    return s;
  int from = (int)a->i[1];
  if (g.me == from && (s = copy(&in[0], out)))
    return s;
  if (g.size == 1)
    return DT_OK;
  int64_t n = dtrt_numel(out);
  MPI_Datatype type = mpi_type(in[0].dtype);
  for (int64_t at = 0; !s && at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    s = dtrt_mpi(ctx, MPI_Bcast((uint32_t *)out->data + at, k, type, from, g.comm), op,
                 "MPI_Bcast");
  }
  return s;
}

/* fold_all: attributes axis, c_0..c_{p-1}. A chain in chunks of at most
 * FOLD_CHUNK elements: member 0 folds its pieces, each next member adds its
 * own onto what arrives from the one before and sends that on, so the
 * chunks flow down the chain at once; then member p-1 broadcasts the sum.
 * Every element is added in the order of one process's fold. */
#define FOLD_CHUNK ((int64_t)1 << 16)
DTRT_TRACED(fold_all, DTRT_TID_COMM) {
  const char *op = "fold_all";
  DtStatus s;
  DtGroup g;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 1, 1, out, a, DTRT_MAX_IATTRS, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_group(ctx, op, dtrt_ai(a, 0, 0), &g)))
    return s;
  if (dtrt_ni(a) != 1 + g.size)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d int attributes for a group of %d", op, dtrt_ni(a),
                     g.size);
  if (in[0].rank < 1 || in[0].dim[0] != a->i[1 + g.me] || in[0].dim[0] < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: member %d holds %lld pieces, not %lld", op, g.me,
                     in[0].rank ? (long long)in[0].dim[0] : 0LL, (long long)a->i[1 + g.me]);
  if ((s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[0].dim + 1, in[0].rank - 1)))
    return s;
  int64_t n = dtrt_numel(out), pieces = in[0].dim[0];
  const float *x = in[0].data;
  float *y = out->data;
  int nreq = 0, me = g.me, last = g.size - 1;
  MPI_Request req[64];
  for (int64_t lo = 0; !s && lo < n; lo += FOLD_CHUNK) {
    int64_t len = n - lo < FOLD_CHUNK ? n - lo : FOLD_CHUNK, q = 1;
    if (me == 0)
      memcpy(y + lo, x + lo, sizeof(float) * (size_t)len);
    else if ((s = dtrt_mpi(ctx, MPI_Recv(y + lo, (int)len, MPI_FLOAT, me - 1, TAG, g.comm,
                                         MPI_STATUS_IGNORE), op, "MPI_Recv")))
      break;
    else
      q = 0;
    for (; q < pieces; q++)
      for (int64_t j = 0; j < len; j++)
        y[lo + j] += x[q * n + lo + j];
    if (me < last) {
      if (nreq == (int)(sizeof req / sizeof req[0])) {
        if ((s = dtrt_mpi(ctx, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), op, "MPI_Waitall")))
          break;
        nreq = 0;
      }
      s = dtrt_mpi(ctx, MPI_Isend(y + lo, (int)len, MPI_FLOAT, me + 1, TAG, g.comm, &req[nreq++]),
                   op, "MPI_Isend");
    }
  }
  if (nreq) {
    DtStatus w = dtrt_mpi(ctx, MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE), op, "MPI_Waitall");
    s = s ? s : w;
  }
  for (int64_t at = 0; !s && g.size > 1 && at < n; at += INT_MAX) {
    int k = n - at < INT_MAX ? (int)(n - at) : INT_MAX;
    s = dtrt_mpi(ctx, MPI_Bcast(y + at, k, MPI_FLOAT, last, g.comm), op, "MPI_Bcast");
  }
  return s;
}

/* The split dim `axis` of a tensor of rank r as the kernels take it (from
 * the end when negative); -1: none. */
static int dim_of(int64_t axis, int r) {
  int64_t d = axis < 0 ? axis + r : axis;
  return d >= 0 && d < r ? (int)d : -1;
}

/* dtrt_staged_bytes of the collectives, by the sizes the kernels above give
 * their blocks: the split tables, then what the method packs. */
int64_t dtrt_comm_staged(DtStaged k, const DtTensor *in, const DtTensor *out, const DtAttrs *a,
                         int p) {
  static const Layout *const layout[] = {
    [DT_STAGED_ALL_REDUCE] = &all_reduce_l, [DT_STAGED_ALL_GATHER] = &all_gather_l,
    [DT_STAGED_REDUCE_SCATTER] = &reduce_scatter_l, [DT_STAGED_ALL_TO_ALL] = &all_to_all_l,
    [DT_STAGED_SHARD_SLICE] = &shard_slice_l};
  const Layout *l = layout[k];
  int need = l->fixed + (l->listed ? p : 0);
  if (p < 1 || need > DTRT_MAX_IATTRS || a->ni < need)
    return 0;
  int64_t method = l->coll >= 0 && a->ni > need ? a->i[need] : DTRT_COMM_MPI;
  bool bf16 = l->wire && a->ni == need + 2 && a->i[need + 1] == DT_WIRE_BF16;
  if (k == DT_STAGED_ALL_REDUCE)
    return p > 1 ? (method == DTRT_COMM_RING ? (int64_t)table_bytes(p) : 0) +
                       reduce_bytes(dtrt_numel(out), p, (int)method, bf16)
                 : 0;
  int64_t tables = (int64_t)table_bytes(p) * (k == DT_STAGED_ALL_TO_ALL ? 2 : 1);
  if (k == DT_STAGED_ALL_TO_ALL) {
    int di = dim_of(a->i[1], in->rank), dout = dim_of(a->i[2], in->rank);
    if (di < 0 || dout < 0 || di == dout)
      return 0;
    return tables + (p > 1 ? pack_bytes(in, dout) + pack_bytes(out, di) : 0);
  }
  const DtTensor *whole = k == DT_STAGED_ALL_GATHER ? out : in;
  int d = dim_of(a->i[1], whole->rank);
  if (d < 0)
    return 0;
  if (p == 1 || k == DT_STAGED_SHARD_SLICE)
    return tables;
  int64_t most = 0, unit = unit_of(whole, d, -1);
  for (int m = 0; m < p; m++)
    most = a->i[2 + m] * unit > most ? a->i[2 + m] * unit : most;
  if (k == DT_STAGED_ALL_GATHER)
    return tables + pack_bytes(out, d) + (method == DTRT_COMM_PADDED ? padded_bytes(most, p) : 0);
  return tables + scatter_bytes(in, d, method == DTRT_COMM_RING, most, bf16);
}
