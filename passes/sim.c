/* sim.c: the cost model and step simulator (--emit=sim): predicts the time of
 * one training step from FLOPs, bytes and the cluster's speeds and links.
 * Requires: a verified module, after spmd when it has a mesh. Changes nothing.
 *
 * Every device walks its @train_step.D (or the one @train_step, on one device)
 * in order. A compute op takes the device's roofline, as dtc-probe measures
 * it: a fixed lat, its FLOPs over the GEMM's speed (a matmul's in whole tiles
 * of the GEMM where the device gives them: tile_flops; the bytes of its
 * right operand at `spill` where they spill out of the L2 cache; and a fixed
 * time for each product of matrices it makes: `product`), and the bytes it moves
 * over the elementwise loops' bandwidth (its result, and for any op but an
 * elementwise one, which fusion keeps in registers, its operands; of an
 * embedding bag's table, the rows it gathers), and for
 * kernels built on exponentials or random numbers a cost per element
 * (elem_cost) at the GEMM's speed; DeMo's and attention's kernels count
 * their FLOPs at a fraction of that speed (flop_slowness), attention's at
 * the fraction the cluster gives (`attn`), a time per score (`score`) and
 * a time per product of a short block (`attn_block`) where it gives them
 * (work_time). A device given no bandwidth moves a byte
 * for SIM_BYTE_FLOPS FLOPs, so one that is slower at math, such as one
 * sharing its core, is as much slower at moving data. A collective waits for
 * every member of its axis group (start = the latest member's ready time) and
 * then takes lat * steps + bytes / bw, with bytes from spmd_comm_bytes and the
 * link `intra` when the whole group lies on one node, else `inter`; or, when
 * passes/comm.c chose its method, comm_time of that method; a send waits for
 * its two members only, and it and a bcast take comm.c's cost. Ring
 * attention waits for its axis group as a collective does, then takes the
 * longer of each member's products (of its own block of queries; a causal
 * one's by the places of its zig-zag's two pieces, ring_busy) and the
 * ring's transfers (ring_time);
 * every member finishes with the slowest, as the blocks' hops tie them. A repeat costs
 * its body n times, its ops and its collectives: the device walks the body
 * (@B.D) once per iteration. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "passes.h"

/* The function a device runs: @train_step.D, else @forward.D (or unsuffixed). */
static const Func *dev_func(const Module *m, int device) {
  static const char *const base[] = {"train_step", "forward"};
  for (int b = 0; b < COUNTOF(base); b++)
    for (int k = 0; k < m->func.n; k++) {
      const Func *f = m->func.a[k];
      if (ir_func_is(f, base[b]) && f->device == device)
        return f;
    }
  return NULL;
}

/* The cluster device of mesh position d; NULL without a cluster. */
static const Device *cluster_dev(const Module *m, int d) {
  if (!m->cluster || !m->cluster->dev.n)
    return NULL;
  int k = m->mesh.n ? m->mesh.a[0].dev[d] : 0;
  return k >= 0 && k < m->cluster->dev.n ? &m->cluster->dev.a[k] : NULL;
}

double sim_gflops(const Module *m, int device) {
  const Device *dv = cluster_dev(m, device);
  return dv && dv->gflops > 0 ? dv->gflops : SIM_DEFAULT_GFLOPS;
}

double sim_bw(const Module *m, int device) {
  const Device *dv = cluster_dev(m, device);
  return dv && dv->bw > 0 ? dv->bw : sim_gflops(m, device) * 1e9 / SIM_BYTE_FLOPS;
}

double sim_lat(const Module *m, int device) {
  const Device *dv = cluster_dev(m, device);
  return dv ? dv->lat : 0;
}

double sim_row(const Module *m, int device) {
  const Device *dv = cluster_dev(m, device);
  return dv ? dv->row : 0;
}

/* FLOP-equivalents per element (of the larger of the first operand and the
 * result) that a kernel spends beyond its FLOPs and bytes, at the speed of
 * dtc's GEMM: an exponential or logarithm per element, a random number per
 * element, a division and square root per row, a strided walk. Measured on
 * an AVX-512 Xeon (docs/PERFORMANCE.md, "The probe of dtc's own kernels"):
 * libdtrt's kernels with DTRT_TRACE, the generated loops (polynomials that
 * vectorise) one op a model, against relu. The softmax family's and cross
 * entropy's, whose exponentials run eight lanes wide on AVX2 (DTRT_WIDE),
 * measured again so on a Zen 4 (examples/transformer.dt, one process,
 * traced against --emit=sim: "Exponentials eight lanes wide"); so were
 * normalize_grad, its sums' lanes now one vector, and gelu and its
 * derivative, the generated loops against relu's on [1536, 256] ("The
 * simulator against the trace, op by op"). */
static double elem_cost(Op op) {
  switch (op) {
  case OP_softmax: case OP_log_softmax: case OP_cross_entropy: case OP_cross_entropy_sum:
    return 170;
  case OP_cross_entropy_grad: case OP_cross_entropy_sum_grad: return 110;
  case OP_bce_with_logits: case OP_bce_with_logits_grad: return 80;
  case OP_dropout: case OP_dropout_grad: return 300;
  case OP_normalize: return 40;
  case OP_normalize_grad: return 35;
  case OP_softmax_grad: case OP_log_softmax_grad: return 40;
  case OP_transpose: return 20;
  case OP_tanh: case OP_gelu_tanh: return 80;
  case OP_gelu_tanh_grad: return 120;
  case OP_gelu: return 32;
  case OP_gelu_grad: return 40;
  case OP_exp: case OP_log: return 80;
  case OP_sigmoid: return 90;
  default: return 0;
  }
}

/* How many times slower than dtc's GEMM a kernel runs its FLOPs (ir/cost.c's
 * count): DeMo's tile transforms are products in double (a quarter of the
 * GEMM's f32 lanes, a multiply and an add where it fuses them), with the
 * DCT matrices made (cosines) and the scratch cleared on each call, and the
 * inverses' short sparse rows. Measured on the AVX-512 Xeon
 * (docs/PERFORMANCE.md, "DeMo's kernels vectorised"): bench/demo_kernels'
 * best times against the probe's 150 GFLOP/s of the same CPU. Attention's
 * blocks run at 0.65, 0.74 and 0.82 of the GEMM's speed at heads of 16, 32
 * and 64 (docs/PERFORMANCE.md, "Attention kernels at heads of 16, 32 and
 * 64"), the rest being the online softmax's exponentials: 0.57 + 0.08
 * log2(D / 8), within [0.5, 0.9]; a device that gives `attn` or `score`
 * prices attention by them instead (work_time). */
static double flop_slowness(const Inst *i) {
  switch (i->op) {
  case OP_demo_compress: return 9;
  case OP_demo_residual: return 17;
  case OP_demo_sign: return 11;
  case OP_sdpa: case OP_sdpa_lse: case OP_sdpa_grad: case OP_sdpa_dmask:
  case OP_ring_sdpa: case OP_ring_sdpa_lse: case OP_ring_sdpa_grad: {
    double d = i->nin && i->in[0]->type.rank == 4 ? (double)i->in[0]->type.dim[3] : 64;
    return 1 / fmin(0.9, fmax(0.5, 0.57 + 0.08 * log2(fmax(d, 1) / 8)));
  }
  default: return 1;
  }
}

/* The FLOPs a matmul's product takes on a device whose GEMM computes tiles
 * of tile_m x tile_n of the result at once (dtc-probe writes them): every
 * tile whole, those over the result's edge too (codegen/gemm.c), so a
 * product of [384, 64] by [64, 1] takes 32 times its FLOPs on a tile 32
 * wide. The rows of a batch times one matrix fold into one product, as
 * the GEMM folds them. Other ops, products in deterministic mode's pieces,
 * and devices that give no tile: ir_flops. */
static double tile_flops(const Inst *i, const Device *dv) {
  double f = ir_flops(i);
  const Type *y = &i->type;
  if (i->op != OP_matmul || !dv || dv->tile_m <= 0 || dv->tile_n <= 0 || ir_pieces(i) ||
      y->rank < 2 || !(f > 0))
    return f;
  double m = (double)y->dim[y->rank - 2], n = (double)y->dim[y->rank - 1];
  if (i->in[1]->type.rank == 2)
    m = (double)type_elems(y) / n;
  double tm = (double)dv->tile_m, tn = (double)dv->tile_n;
  return f * (ceil(m / tm) * tm) * (ceil(n / tn) * tn) / (m * n);
}

/* How many times the pairs an attention kernel sees it makes scores of:
 * its blocks of up to 64 queries in whole vectors of 16, against whole
 * blocks of 64 keys (dtrt_sdpa_pairs): 1.9 at T = 32, causal; 1.06 at
 * T = 1024, at which dtc-probe fits `attn` and `score` by the same count.
 * In *blocks, the products they make of blocks of fewer than 64 queries or
 * keys, a time `attn_block` each (short tiles, which the probe's sequence of
 * 32 shows): such blocks (dtrt_sdpa_blocks) by the products of a block, 2
 * in sdpa (the scores and their sum of values), 1 in sdpa_lse, 5 in
 * sdpa_grad (ir/cost.c's count). 1 and 0 for a ring's kernels (their pieces)
 * and other ops. */
static double attn_blocks(const Inst *i, double *blocks) {
  bool sdpa = i->op == OP_sdpa || i->op == OP_sdpa_lse || i->op == OP_sdpa_grad ||
              i->op == OP_sdpa_dmask;
  double seen = sdpa ? ir_attn_pairs(i) : 0;
  *blocks = 0;
  if (!(seen > 0) || i->nin < 2 || i->in[1]->type.rank != 4)
    return 1;
  const Type *q = &i->in[0]->type;
  double bh = (double)q->dim[0] * (double)q->dim[1];
  int64_t tk = i->in[1]->type.dim[2];
  bool causal = ir_get_int(i, "causal", 0);
  *blocks = bh * dtrt_sdpa_blocks(q->dim[2], tk, causal) *
            (i->op == OP_sdpa_lse ? 1 : i->op == OP_sdpa_grad ? 5 : 2);
  return bh * dtrt_sdpa_pairs(q->dim[2], tk, causal) / seen;
}

/* How many products of matrices matmul i makes: a batch's count, its
 * pieces', or 1 (rows flattened into one product by a 2-D weight). */
static double products(const Inst *i) {
  const Type *y = &i->type;
  if (ir_pieces(i))
    return ir_pieces(i);
  if (i->in[1]->type.rank <= 2 || y->rank < 2)
    return 1;
  return (double)type_elems(y) / ((double)y->dim[y->rank - 2] * (double)y->dim[y->rank - 1]);
}

/* The seconds matmul i takes on dv to stream its right operands (K x N,
 * each product's) where they hold more bytes than dv's L2 cache: their bytes
 * at `spill`, where dv gives it and `l2`. Its packing streams the whole
 * operand once a product, whatever the rows, so the fewer a product's rows
 * the larger its share. */
static double spilled(const Inst *i, const Device *dv) {
  const Type *w = &i->in[1]->type;
  if (!dv || !(dv->spill > 0) || dv->l2 <= 0 || w->rank < 2)
    return 0;
  double bytes = (double)w->dim[w->rank - 2] * (double)w->dim[w->rank - 1] *
                 (double)dtype_size(w->dtype);
  return bytes > (double)dv->l2 ? products(i) * bytes / dv->spill : 0;
}

/* Seconds of op i's FLOPs on `device`: at its speed over flop_slowness, and
 * for a matmul the right operands it streams (spilled) and `product` for
 * each product it makes; an
 * attention kernel on a device that gives `attn` or `score` (dtc-probe
 * measures both on dtc's attention) at attn of its speed (1 when not
 * given), score for each score it makes and attn_block for each product of
 * a block not whole (0 when not given). */
static double work_time(const Module *m, const Inst *i, int device) {
  double flops = sim_gflops(m, device) * 1e9, scores = ir_attn_scores(i), blocks;
  double made = attn_blocks(i, &blocks);
  const Device *dv = cluster_dev(m, device);
  if (scores > 0 && dv && (dv->attn > 0 || dv->score > 0))
    return made * (ir_flops(i) / (flops * (dv->attn > 0 ? dv->attn : 1)) + scores * dv->score) +
           blocks * dv->attn_block;
  double t = tile_flops(i, dv) * made * flop_slowness(i) / flops;
  if (i->op == OP_matmul && dv && ir_flops(i) > 0)
    t += spilled(i, dv) + products(i) * dv->product;
  return t;
}

/* The bytes of v, of b in all, that op i moves: a sparse update's table and
 * state ([R, ...], in place: ir_in_place) only in the rows it touches (operand 1's
 * entries, when fewer than R). */
static double touched_bytes(const Inst *i, const Inst *v, double b) {
  if (!ir_in_place(i->op) || v == i->in[1] || v->type.rank < 1 || !(v->type.dim[0] > 0))
    return b;
  double rows = (double)type_elems(&i->in[1]->type), all = (double)v->type.dim[0];
  return rows < all ? b * rows / all : b;
}

/* The bytes op i reads of its operand k: an embedding bag's weight as the
 * rows its entries gather (input's elements times D), when fewer than the
 * table; a sparse update's table and state as the rows it touches; a
 * slice's operand as much as it copies. */
static double operand_bytes(const Inst *i, int k) {
  if (i->op == OP_slice)   /* reads what it copies */
    return type_bytes(&i->type);
  if ((i->op == OP_sparse_rows || i->op == OP_sparse_values) && k == 1)
    return 0;   /* the table's shape alone */
  double b = touched_bytes(i, i->in[k], type_bytes(&i->in[k]->type));
  bool bag = i->op == OP_embedding_bag || i->op == OP_embedding_bag_grad ||
             i->op == OP_embedding_bag_psw_grad;
  if (!bag || k != 1)
    return b;
  double rows = (double)type_elems(&i->in[0]->type) * (double)i->in[1]->type.dim[1] * 4;
  return rows < b ? rows : b;
}

/* A table's rows in all, of v, a block of them or the whole table: an
 * `at` of [R, lo] says R; the rows an update takes come from sparse_rows,
 * which carries it too. */
static double table_rows(const Inst *i, const Inst *v) {
  for (int depth = 0; i && depth < 8; depth++) {
    int n;
    const int64_t *at = ir_get_ints(i, "at", &n);
    if (at && n >= 1 && at[0] > 0)
      return (double)at[0];
    if (ir_ops[i->op].kind != K_COMM && i->op != OP_concat)
      break;
    i = i->nin ? i->in[0] : NULL;
  }
  return v->type.rank ? (double)v->type.dim[0] : 1;
}

/* FLOP-equivalents per id entry (see elem_cost) that the sparse kernels
 * spend beyond their rows: sparse_rows sorts the ids, sparse_values finds
 * each id's place among the rows twice (a check, then its sum), and an
 * update sorts and sums its rows' values. Measured on a Zen 4 core (probed
 * at 81.6 GFLOP/s) by DTRT_TRACE of bench/dlrm.dt: 16, 25 and 17 ns. A
 * device that gives `entry` (dtc-probe times sparse kernels themselves)
 * prices an entry of sparse_rows at that, the others in proportion
 * (entry_time). */
static double entry_cost(Op op) {
  switch (op) {
  case OP_sparse_rows: return 1300;
  case OP_sparse_values: return 2000;
  case OP_sparse_sgd: case OP_sparse_adagrad_sum: case OP_sparse_adagrad:
  case OP_sparse_moment: case OP_sparse_adam: return 1400;
  default: return 0;
  }
}

/* Seconds of an id entry of op i on dv: its entry_cost at dv's `entry` for
 * sparse_rows' where dv gives it, else at its speed. */
static double entry_time(const Inst *i, const Device *dv, double flops) {
  if (dv && dv->entry > 0)
    return entry_cost(i->op) / entry_cost(OP_sparse_rows) * dv->entry;
  return entry_cost(i->op) / flops;
}

/* The id entries op i takes (the operand *ids), and in *lines the cache
 * lines it visits at scattered rows of a table larger than the caches for
 * them (an embedding bag's weight or dense gradient, a sparse update's
 * table; the state an update reads was written by the update before it,
 * for the same rows, and is in the cache). A block of rows takes a share of
 * the ids, as many as it has of the table. 0 for other ops. */
static double id_entries(const Inst *i, int *ids, double *lines) {
  const Inst *t = NULL;
  *ids = 0, *lines = 0;
  switch (i->op) {
  case OP_embedding_bag: case OP_embedding_bag_psw_grad: t = i->in[1]; break;
  case OP_embedding_bag_grad: t = i; break;
  case OP_sparse_rows: case OP_sparse_values: break;
  case OP_sparse_sgd: case OP_sparse_adagrad_sum: case OP_sparse_moment:
  case OP_sparse_adagrad: case OP_sparse_adam: t = i->in[0], *ids = 1; break;
  default: return 0;
  }
  const Inst *x = i->in[*ids];
  double entries = (double)type_elems(&x->type);
  if (t && t->type.rank) {
    const Type *ty = &t->type;
    double row = ty->dim[0] > 0 ? (double)type_elems(ty) / (double)ty->dim[0] : 0;
    double all = table_rows(*ids ? x : i, t), held = (double)ty->dim[0];
    *lines = entries * ceil(row * dtype_size(ty->dtype) / 64) * (held < all ? held / all : 1);
  }
  return entries;
}

/* The contiguous runs op i moves, on each of which a copy kernel spends
 * SIM_RUN_FLOPS FLOP-equivalents (see elem_cost) beyond the run's bytes:
 * a slice or pad one a row of the dims before its axis, a concat one for
 * each operand a row. Measured on a Zen 4 core (probed at 94.9 GFLOP/s) by
 * DTRT_TRACE of bench/dlrm.dt, whose slices, pads and concats of the
 * interaction move runs of 1 to 27 floats: 1.7, 2.3 and 1.8 ns a run
 * (SIM_RUN_FLOPS). */
static double copy_runs(const Inst *i) {
  if ((i->op != OP_slice && i->op != OP_pad && i->op != OP_concat) || !i->nin)
    return 0;
  const Type *t = &i->in[0]->type;
  int64_t ax = ir_get_int(i, "axis", 0);
  ax = ax < 0 ? ax + t->rank : ax;
  double outer = 1;
  for (int d = 0; d < ax && d < t->rank; d++)
    outer *= (double)t->dim[d];
  return outer * (i->op == OP_concat ? i->nin : 1);
}

void sim_compute_parts(const Module *m, const Inst *i, const bool *in_split, bool out_split,
                       bool work_split, int device, double *whole, double *share) {
  const OpInfo *op = &ir_ops[i->op];
  *whole = *share = 0;
  if (op->kind == K_COMM || op->kind == K_META || i->op == OP_reshape || ir_lse_partner(i))
    return;   /* an lse op with a partner: its kernel writes it */
  double n = (double)type_elems(&i->type);
  if (i->nin && (double)type_elems(&i->in[0]->type) > n)
    n = (double)type_elems(&i->in[0]->type);
  double flops = sim_gflops(m, device) * 1e9, bw = sim_bw(m, device);
  double w = sim_lat(m, device), sh = 0;
  *(work_split ? &sh : &w) +=
      work_time(m, i, device) + (elem_cost(i->op) * n + SIM_RUN_FLOPS * copy_runs(i)) / flops;
  *(out_split ? &sh : &w) += touched_bytes(i, i, type_bytes(&i->type)) / bw;
  for (int k = 0; op->kind != K_ELEM && k < i->nin; k++)
    *(in_split && in_split[k] ? &sh : &w) += operand_bytes(i, k) / bw;
  int ids;
  double lines, entries = id_entries(i, &ids, &lines);
  *(in_split && in_split[ids] ? &sh : &w) +=
      entries * entry_time(i, cluster_dev(m, device), flops) + lines * sim_row(m, device);
  *whole = w;
  *share = sh;
}

double sim_compute_time(const Module *m, const Inst *i, int device) {
  double whole, share;
  sim_compute_parts(m, i, NULL, false, false, device, &whole, &share);
  return whole;
}

/* The link named `name`, else the other one, else NULL. */
static const Link *find_link(const Module *m, const char *name) {
  const Link *any = NULL;
  for (int k = 0; m->cluster && k < m->cluster->link.n; k++) {
    const Link *l = &m->cluster->link.a[k];
    if (!strcmp(l->name, name))
      return l;
    any = l;
  }
  return any;
}

double sim_comm_time(const Module *m, const Inst *c, const int *members, int k) {
  if (c->op == OP_shard_slice || k < 2)
    return 0;
  bool one_node = true;
  for (int j = 1; j < k; j++) {
    const Device *a = cluster_dev(m, members[0]), *b = cluster_dev(m, members[j]);
    one_node &= a && b && a->node == b->node;
  }
  if (ir_attr(c, "method") || c->op == OP_send || c->op == OP_bcast)   /* comm.c's model */
    return comm_time(m, c, members, k, (int)ir_get_int(c, "method", 0));
  const Link *l = find_link(m, one_node ? "intra" : "inter");
  double bw = l && l->bw > 0 ? l->bw : SIM_DEFAULT_BW, lat = l ? l->lat : SIM_DEFAULT_LAT;
  int steps = c->op == OP_all_reduce || c->op == OP_fold_all ? 2 * (k - 1) : k - 1;
  return lat * steps + spmd_comm_bytes(c) / bw;
}

/* Where a device is: frames fr[0 .. depth) from its step function down to
 * the body of the innermost loop under way, which runs iteration iter of n. */
typedef struct Frame {
  const Func *f;
  int pc;            /* next inst; a frame's repeat stays at pc while its body runs */
  int64_t iter, n;
  bool *idle;        /* by inst: computes nothing the device needs (ir_idle) */
} Frame;

/* The frame of f, to run n times. */
static Frame frame(const Func *f, int64_t n) {
  Frame t = {f, 0, 0, n, malloc(sizeof(bool) * (size_t)(f->inst.n + 1))};
  DTC_ASSERT(t.idle);
  ir_idle(f, t.idle);
  return t;
}

typedef struct Walker {
  Frame *fr;
  int depth;
  double clock;
} Walker;

/* The inst the device stands at; NULL when it has finished. */
static const Inst *at(const Walker *w) {
  const Frame *t = &w->fr[w->depth - 1];
  return t->pc < t->f->inst.n ? t->f->inst.a[t->pc] : NULL;
}

static bool ring(const Inst *i) {
  return i->op == OP_ring_sdpa || i->op == OP_ring_sdpa_lse || i->op == OP_ring_sdpa_grad;
}

/* Whether a device waits at i for the rest of its axis group: a collective,
 * or ring attention, whose blocks pass around the group. */
static bool waits(const Inst *i) {
  return (ir_ops[i->op].kind == K_COMM && i->op != OP_shard_slice) ||
         (ring(i) && !ir_lse_partner(i));
}

/* Runs devices to their next collective, adding compute time and events; a
 * repeat runs its body n times, each time with its ops and collectives. */
static void run_compute(const Module *m, Walker *w, int d, SimDev *sd, SimEventFn ev,
                        void *user) {
  for (;;) {
    Frame *t = &w->fr[w->depth - 1];
    if (t->pc == t->f->inst.n) {
      if (w->depth == 1)
        return;
      if (++t->iter < t->n) {
        t->pc = 0;
      } else {
        free(w->fr[--w->depth].idle);
        w->fr[w->depth - 1].pc++;
      }
      continue;
    }
    const Inst *i = t->f->inst.a[t->pc];
    if (waits(i))
      return;
    if (i->op == OP_repeat) {
      w->fr[w->depth++] = frame(ir_repeat_body(i), ir_get_int(i, "n", 1));
      continue;
    }
    if (t->idle[t->pc++])
      continue;
    double dt = sim_compute_time(m, i, d);
    if (dt <= 0)
      continue;
    if (ev)
      ev(user, d, i, false, w->clock, dt);
    w->clock += dt;
    sd->compute += dt;
  }
}

/* Member j's products in ring attention i. A causal one's member works on
 * two pieces of queries (dtrt_ring_piece's zig-zag: the early half of its
 * block and the late half of member k - 1 - j's), each meeting the keys up
 * to its end: a piece [S, S + n) sees n S + n (n + 1) / 2 pairs, where
 * ir/cost.c counts the even share N (T + 1) / 2 of the triangle for the N
 * queries of j's block, so its FLOPs scale by the pieces' pairs over that. */
static double ring_busy(const Module *m, const Inst *i, int d, int j) {
  double t = sim_compute_time(m, i, d);
  int nz;
  const int64_t *len = ir_get_ints(i, "sizes", &nz);
  if (!ir_get_int(i, "causal", 0) || !len || j >= nz)
    return t;
  double pairs = 0, all = 0;
  for (int q = 0; q < nz; q++)
    all += (double)len[q];
  for (int k = 0; k < 2; k++) {
    int64_t s, n;
    dtrt_ring_piece(len, nz, j, nz > 1, k, &s, &n);
    pairs += (double)n * (double)s + (double)n * (double)(n + 1) / 2;
  }
  double f = pairs / ((double)len[j] * (all + 1) / 2);
  return t + (f - 1) * work_time(m, i, d);
}

static bool same_collective(const Inst *a, const Inst *b) {
  return a->op == b->op && ir_get_int(a, "axis", 0) == ir_get_int(b, "axis", 0) &&
         ir_get_int(a, "from", 0) == ir_get_int(b, "from", 0) &&
         ir_get_int(a, "to", 0) == ir_get_int(b, "to", 0);
}

double sim_run(const Module *m, SimResult *r, SimEventFn ev, void *user) {
  int n = ir_mesh_devices(m);
  Walker *w = calloc((size_t)n, sizeof *w);
  SimDev *sd = r ? arena_alloc(m->arena, (size_t)n * sizeof *sd) : calloc((size_t)n, sizeof *sd);
  int members[SHARD_MAX_AXIS];
  double step = -1;
  DTC_ASSERT(w && sd);
  for (int d = 0; d < n; d++) {
    const Func *f = dev_func(m, m->mesh.n ? d : -1);
    if (!f && !(f = dev_func(m, d)))
      goto done;
    /* a loop nests at most as deep as there are functions */
    w[d].fr = calloc((size_t)m->func.n + 1, sizeof *w[d].fr);
    DTC_ASSERT(w[d].fr);
    w[d].fr[0] = frame(f, 1);
    w[d].depth = 1;
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < n; d++)
      run_compute(m, &w[d], d, &sd[d], ev, user);
    /* every device now waits at a collective or has finished */
    for (int d = 0; d < n; d++) {
      const Inst *c = at(&w[d]);
      if (!c || !waits(c))   /* finished, or moved past one this round */
        continue;
      int axis = (int)ir_get_int(c, "axis", 0), k = m->mesh.a[0].axis_size[axis];
      ir_mesh_group(&m->mesh.a[0], d, axis, members);
      int group[SHARD_MAX_AXIS];
      memcpy(group, members, sizeof group);
      if (c->op == OP_send) {   /* its two members only */
        members[0] = group[ir_get_int(c, "from", 0)];
        members[1] = group[ir_get_int(c, "to", 0)];
        k = 2;
      }
      double start = 0;
      bool ready = true;
      for (int j = 0; j < k && ready; j++) {
        const Walker *o = &w[members[j]];
        const Inst *oc = at(o);
        ready = oc && same_collective(c, oc);
        if (ready && o->clock > start)
          start = o->clock;
      }
      if (!ready)
        continue;
      double t, busy[SHARD_MAX_AXIS];
      for (int j = 0; j < k; j++)
        busy[j] = ring(c) ? ring_busy(m, at(&w[members[j]]), members[j], j) : 0;
      if (ring(c)) {   /* every member's products beside the ring's transfers */
        int nz;
        const int64_t *len = ir_get_ints(c, "sizes", &nz);
        bool causal = ir_get_int(c, "causal", 0);
        int64_t own = c->in[1]->type.rank == 4 ? c->in[1]->type.dim[2] : 0;
        double most = len ? (double)ring_most(len, nz, causal) : 0;
        t = own ? ring_time(m, c->op, causal, type_bytes(&c->in[1]->type) / (double)own * most,
                            members, k) : 0;
        for (int j = 0; j < k; j++)
          t = fmax(t, busy[j]);
      } else {
        t = sim_comm_time(m, c, c->op == OP_send ? group : members,
                          c->op == OP_send ? m->mesh.a[0].axis_size[axis] : k);
      }
      for (int j = 0; j < k; j++) {
        Walker *o = &w[members[j]];
        if (ev && busy[j] > 0)
          ev(user, members[j], at(o), false, start, busy[j]);
        if (ev && t > busy[j])
          ev(user, members[j], at(o), true, start + busy[j], t - busy[j]);
        o->clock = start + t;
        o->fr[o->depth - 1].pc++;
        sd[members[j]].compute += busy[j];
        sd[members[j]].comm += t - busy[j];
      }
      progress = true;
    }
  }
  step = 0;
  for (int d = 0; d < n; d++) {
    if (at(&w[d])) {   /* collectives that never match */
      step = -1;
      goto done;
    }
    sd[d].finish = w[d].clock;
    if (w[d].clock > step)
      step = w[d].clock;
  }
  if (r) {
    *r = (SimResult){.ndev = n, .dev = sd, .step = step};
    for (int d = 0; d < n; d++) {
      sd[d].idle = fmax(0, step - sd[d].compute - sd[d].comm);
      if (sd[d].finish > sd[r->bottleneck].finish ||
          (sd[d].finish == sd[r->bottleneck].finish &&
           sd[d].compute + sd[d].comm > sd[r->bottleneck].compute + sd[r->bottleneck].comm))
        r->bottleneck = d;
    }
  }
done:
  if (r && step < 0)
    *r = (SimResult){.ndev = 0};
  for (int d = 0; d < n; d++) {
    for (int k = 0; k < w[d].depth; k++)
      free(w[d].fr[k].idle);
    free(w[d].fr);
  }
  free(w);
  if (!r)
    free(sd);
  return step;
}

double sim_step(const Module *m, SimResult *r) { return sim_run(m, r, NULL, NULL); }

void sim_report(FILE *out, const Module *m, const SimResult *r) {
  fprintf(out, "predicted step of module %s on %d device%s\n", m->name, r->ndev,
          r->ndev == 1 ? "" : "s");
  fprintf(out, "%-8s %-10s %8s %12s %12s %12s %12s\n", "device", "name", "GFLOP/s", "compute ms",
          "comm ms", "idle ms", "finish ms");
  for (int d = 0; d < r->ndev; d++) {
    const Device *dv = cluster_dev(m, d);
    const SimDev *s = &r->dev[d];
    fprintf(out, "%-8d %-10s %8.1f %12.3f %12.3f %12.3f %12.3f\n", d, dv ? dv->name : "host",
            sim_gflops(m, d), s->compute * 1e3, s->comm * 1e3, s->idle * 1e3, s->finish * 1e3);
  }
  fprintf(out, "predicted step: %.3f ms (bottleneck: device %d)\n", r->step * 1e3, r->bottleneck);
}

typedef struct Trace {
  FILE *out;
  int n;
} Trace;

static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(out, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(out, "\\u%04x", *s);
    else
      fputc(*s, out);
  }
  fputc('"', out);
}

static void trace_event(void *user, int device, const Inst *i, bool comm, double start,
                        double dur) {
  Trace *t = user;
  char name[256];
  const char *file = i->loc.file ? i->loc.file->name : NULL;
  if (file && i->loc.line > 0)
    snprintf(name, sizeof name, "%s %s:%d", ir_ops[i->op].name, file, i->loc.line);
  else
    snprintf(name, sizeof name, "%s", ir_ops[i->op].name);
  fprintf(t->out, "%s\n{\"name\":", t->n++ ? "," : "");
  json_str(t->out, name);
  fprintf(t->out, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%d}",
          comm ? "comm" : "compute", start * 1e6, dur * 1e6, device, comm ? 1 : 0);
}

double sim_trace_json(FILE *out, const Module *m, SimResult *r) {
  Trace t = {out, 0};
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", out);
  double step = sim_run(m, r, trace_event, &t);
  int n = ir_mesh_devices(m);
  for (int d = 0; d < n; d++) {
    const Device *dv = cluster_dev(m, d);
    char name[160];
    snprintf(name, sizeof name, "device %d %s (predicted)", d, dv ? dv->name : "host");
    fprintf(out, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":",
            t.n++ ? "," : "", d);
    json_str(out, name);
    fputs("}}", out);
  }
  fputs("\n]}\n", out);
  return step;
}
