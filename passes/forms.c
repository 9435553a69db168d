/* forms.c: each op's sharding rule, one shard_<id> per op of ops.def: how
 * the dimensions of its operands map to those of its result (DimMap). The
 * sharding pass derives from it both directions it needs: the result
 * sharding an operand's split leads to (sharding.c's fwd_dim) and what each
 * operand must be for a given result sharding (shard_form). */
#include <string.h>

#include "passes.h"

#define OP(id, name, minin, maxin, kind, attrs) static bool shard_##id(const Inst *, DimMap *);
#include "ops.def"
#undef OP

/* Every operand dimension starts whole and every result dimension free. */
static void map_init(const Inst *i, DimMap *m) {
  memset(m->res_whole, 0, sizeof m->res_whole);
  memset(m->own, 0, sizeof m->own);
  m->linear = false;
  m->nsum = 0;
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; j < i->in[k]->type.rank; j++) {
      m->to[k][j] = FORM_WHOLE;
      m->mul[k][j] = m->div[k][j] = 1;
    }
}

static int64_t norm_axis(int64_t ax, int rank) { return ax < 0 ? ax + rank : ax; }

/* Operand dims map to the result's, aligned at the end (numpy broadcasting:
 * a dimension that broadcasts stays whole). */
static void aligned(const Inst *i, DimMap *m) {
  const Type *y = &i->type;
  for (int k = 0; k < i->nin; k++) {
    const Type *x = &i->in[k]->type;
    int lead = y->rank - x->rank;
    for (int j = 0; j < x->rank; j++)
      m->to[k][j] = x->dim[j] == y->dim[j + lead] ? j + lead : FORM_WHOLE;
  }
}

/* Every operand dim maps to the same result dim, except dims lo..hi, which
 * stay whole on both sides. */
static void same_but(const Inst *i, DimMap *m, int64_t lo, int64_t hi) {
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; j < i->in[k]->type.rank; j++)
      m->to[k][j] = j >= lo && j <= hi ? FORM_WHOLE : j;
  for (int64_t d = lo; d <= hi && d >= 0; d++)
    m->res_whole[d] = true;
}

/* ---- module plumbing ---- */

static bool shard_load(const Inst *i, DimMap *m) { return map_init(i, m), true; }
/* An arg is what its loop passes in, a partial sum too (a loop's sum). */
static bool shard_arg(const Inst *i, DimMap *m) {
  map_init(i, m);
  m->linear = true;
  return true;
}
/* A loop's forms come from its body's shardings, not from a map of its
 * dimensions: sharding.c's shard_form reads them (its section "loops"). */
static bool shard_repeat(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_repeat_out(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_store(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_output(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }

static bool whole(const Inst *i, DimMap *m) {
  map_init(i, m);
  for (int d = 0; d < i->type.rank; d++)
    m->res_whole[d] = true;
  return true;
}
static bool shard_const(const Inst *i, DimMap *m) { return whole(i, m); }
static bool shard_lr(const Inst *i, DimMap *m) { return whole(i, m); }

/* ---- elementwise: add, sub and neg of partial sums are partial sums ---- */

static bool elem(const Inst *i, DimMap *m, bool linear) {
  map_init(i, m);
  aligned(i, m);
  m->linear = linear;
  return true;
}
static bool shard_add(const Inst *i, DimMap *m) { return elem(i, m, true); }
static bool shard_sub(const Inst *i, DimMap *m) { return elem(i, m, true); }
static bool shard_neg(const Inst *i, DimMap *m) { return elem(i, m, true); }
static bool shard_mul(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_bn_center(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_bn_scale(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_div(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_exp(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_log(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_sqrt(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_tanh(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_sigmoid(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_relu(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_gelu(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_relu_grad(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_gelu_grad(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_gelu_tanh(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_gelu_tanh_grad(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_gt(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_ge(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_eq(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_ne(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_where_true(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_where_false(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_maximum(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_minimum(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_pow(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_clamp(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_clamp_grad(const Inst *i, DimMap *m) { return elem(i, m, false); }

/* ---- reductions ---- */

/* Which dimensions of x a reduction sums over, and where the others go. */
static void reduced(const Inst *i, bool *red, int *to) {
  int rank = i->in[0]->type.rank, n;
  const int64_t *axes = ir_get_ints(i, "axes", &n);
  bool keep = ir_get_int(i, "keepdim", 0) != 0;
  memset(red, 0, sizeof(bool) * IR_MAX_RANK);
  for (int k = 0; k < n; k++)
    red[norm_axis(axes[k], rank)] = true;
  for (int j = 0, d = 0; j < rank; j++)
    to[j] = red[j] && !keep ? -1 : d++;
}

/* A split of a summed dim makes a partial sum; a partial operand stays one. */
static bool sum_like(const Inst *i, DimMap *m) {
  bool red[IR_MAX_RANK];
  int to[IR_MAX_RANK];
  map_init(i, m);
  reduced(i, red, to);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[0][j] = red[j] ? FORM_SUM(m->nsum++) : to[j];
  m->linear = true;
  return true;
}
static bool shard_sum(const Inst *i, DimMap *m) { return sum_like(i, m); }
/* The pieces' sum in order: their dim stays whole (gathered), the others
 * carry over. */
static bool shard_fold(const Inst *i, DimMap *m) {
  map_init(i, m);
  for (int j = 1; j < i->in[0]->type.rank; j++)
    m->to[0][j] = j - 1;
  return true;
}
static bool shard_mean(const Inst *i, DimMap *m) { return sum_like(i, m); }
/* both factors as sum's operand: a split dim of both is a split of the
 * products */
static bool mul_like(const Inst *i, DimMap *m) {
  sum_like(i, m);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[1][j] = m->to[0][j];
  m->linear = false;
  return true;
}
static bool shard_sum_mul(const Inst *i, DimMap *m) { return mul_like(i, m); }
static bool shard_mean_mul(const Inst *i, DimMap *m) { return mul_like(i, m); }

static bool shard_max(const Inst *i, DimMap *m) {
  bool red[IR_MAX_RANK];
  int to[IR_MAX_RANK];
  map_init(i, m);
  reduced(i, red, to);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[0][j] = red[j] ? FORM_WHOLE : to[j];
  return true;
}

/* (x, y, dy) -> dx: x's reduced dims stay whole; y's and dy's dims are x's
 * others. */
static bool shard_max_grad(const Inst *i, DimMap *m) {
  bool red[IR_MAX_RANK];
  int to[IR_MAX_RANK];
  map_init(i, m);
  reduced(i, red, to);
  for (int j = 0; j < i->type.rank; j++) {
    m->res_whole[j] = red[j];
    m->to[0][j] = red[j] ? FORM_WHOLE : j;
    if (!red[j] && to[j] >= 0)
      m->to[1][to[j]] = m->to[2][to[j]] = j;
  }
  return true;
}

/* ---- dense ---- */

/* [..,m,k] @ [..,k,n]: batch dims carry over, m and n to the result's last
 * two, k split in both makes a partial sum. With kfold ([F..,k,m]^T @
 * [F..,k,n]) each F dim, like k, split alike in both makes a partial sum:
 * a device's block of the operands is its own rows of the flattened
 * product. */
static bool shard_matmul(const Inst *i, DimMap *m) {
  int ra = i->in[0]->type.rank, rb = i->in[1]->type.rank, rr = i->type.rank;
  bool ta = ir_get_int(i, "ta", 0), tb = ir_get_int(i, "tb", 0);
  int fold = (int)ir_get_int(i, "kfold", 0);
  map_init(i, m);
  if (fold) {
    for (int d = 0; d <= fold; d++)
      m->to[0][d] = m->to[1][d] = FORM_SUM(d);
    m->to[0][fold + 1] = 0;
    m->to[1][fold + 1] = 1;
    m->nsum = fold + 1;
    return true;
  }
  for (int d = 0; d < rr - 2; d++) {
    m->to[0][d] = d;
    if (rb > 2)
      m->to[1][d] = d;
  }
  m->to[0][ta ? ra - 1 : ra - 2] = rr - 2;
  m->to[1][tb ? rb - 2 : rb - 1] = rr - 1;
  m->to[0][ta ? ra - 2 : ra - 1] = m->to[1][tb ? rb - 1 : rb - 2] = FORM_SUM(0);
  m->nsum = 1;
  return true;
}

/* ---- other kernels ---- */

static bool along(const Inst *i, DimMap *m) {
  map_init(i, m);
  int64_t ax = norm_axis(ir_get_int(i, "axis", -1), i->type.rank);
  same_but(i, m, ax, ax);
  return true;
}
static bool shard_softmax(const Inst *i, DimMap *m) { return along(i, m); }
static bool shard_log_softmax(const Inst *i, DimMap *m) { return along(i, m); }
static bool shard_softmax_grad(const Inst *i, DimMap *m) { return along(i, m); }
static bool shard_log_softmax_grad(const Inst *i, DimMap *m) { return along(i, m); }

static bool last(const Inst *i, DimMap *m, int n) {
  map_init(i, m);
  same_but(i, m, i->type.rank - n, i->type.rank - 1);
  return true;
}
static bool shard_normalize(const Inst *i, DimMap *m) { return last(i, m, 1); }
/* Attention: B and H (dims 0, 1) of every operand map to the result's
 * (around sdpa_grad's dim 1 of dq, dk and dv, stacked); D stays whole.
 * With Tq = Tk and no mask or one the same for every query (broadcast
 * along Tq), T (dim 2) of every operand maps to the result's: a sequence
 * split over an axis, which spmd lowers to ring attention (passes/ring.c);
 * the mask stays whole along Tk. Otherwise T stays whole, and so it does in
 * deterministic mode but under `attention = heads`: the ring merges its
 * blocks of keys in an order its split gives, heads.c computes every head
 * whole as one process does. The mask (operand
 * `base`, broadcast right-aligned to [B,H,Tq,Tk]) maps its B and H where it
 * has them whole; where it broadcasts, it stays whole. */
static bool heads(const Inst *i, DimMap *m, int base) {
  int lead = i->type.rank == 5;
  const Type *mt = i->nin > base ? &i->in[base]->type : NULL;
  const Module *mod = i->fn ? i->fn->mod : NULL;
  bool seq = i->in[0]->type.dim[2] == i->in[1]->type.dim[2] &&
             (!mt || mt->rank < 2 || mt->dim[mt->rank - 2] == 1) && i->op != OP_sdpa_dmask &&
             !(mod && mod->det_pieces > 1 && !mod->attn_heads);
  map_init(i, m);
  for (int k = 0; k < i->nin && k < base; k++)
    for (int j = 0; j < (seq ? 3 : 2) && j < i->in[k]->type.rank; j++)
      m->to[k][j] = j + (j > 0) * lead;
  if (i->nin > base) {
    const Type *mk = &i->in[base]->type;
    for (int j = 0; j < mk->rank; j++) {
      int full = 4 - mk->rank + j, to = full + (full > 0) * lead;
      if (full < 2 && mk->dim[j] == i->type.dim[to] && mk->dim[j] > 1)
        m->to[base][j] = to;
    }
  }
  for (int d = 0; d < i->type.rank; d++)
    m->res_whole[d] = (lead && d == 1) || d >= lead + (seq ? 3 : 2);
  return true;
}
static bool shard_sdpa(const Inst *i, DimMap *m) { return heads(i, m, 3); }
static bool shard_sdpa_lse(const Inst *i, DimMap *m) { return heads(i, m, 2); }
static bool shard_sdpa_grad(const Inst *i, DimMap *m) { return heads(i, m, 6); }
static bool shard_sdpa_dmask(const Inst *i, DimMap *m) { return heads(i, m, 6); }
/* made by spmd, per device */
static bool shard_ring_sdpa(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_ring_sdpa_lse(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_ring_sdpa_grad(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_normalize_grad(const Inst *i, DimMap *m) { return last(i, m, 1); }
static bool shard_causal_mask(const Inst *i, DimMap *m) { return last(i, m, 2); }

/* A block's mask is its share of the whole tensor's (its `at`). */
static bool shard_dropout(const Inst *i, DimMap *m) { return last(i, m, 0); }
static bool shard_dropout_grad(const Inst *i, DimMap *m) { return last(i, m, 0); }

/* (logits[N,C], labels[N]) -> the mean: N split in both makes a partial sum. */
static bool shard_cross_entropy(const Inst *i, DimMap *m) {
  map_init(i, m);
  m->to[0][0] = m->to[1][0] = FORM_SUM(0);
  m->nsum = 1;
  return true;
}

/* (logits, labels, dloss) -> dlogits[N,C]: N carries over, C stays whole. */
static bool shard_cross_entropy_grad(const Inst *i, DimMap *m) {
  map_init(i, m);
  m->to[0][0] = m->to[1][0] = 0;
  m->res_whole[1] = true;
  return true;
}

/* (pred, target) -> the mean: any dim split in both makes a partial sum. */
static bool shard_mse(const Inst *i, DimMap *m) {
  map_init(i, m);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[0][j] = m->to[1][j] = FORM_SUM(m->nsum++);
  return true;
}

/* PyTorch's losses: the sum over kept rows and their count as cross_entropy,
 * bce_with_logits as mse, its gradient elementwise. */
static bool shard_cross_entropy_sum(const Inst *i, DimMap *m) { return shard_cross_entropy(i, m); }
static bool shard_cross_entropy_sum_grad(const Inst *i, DimMap *m) {
  return shard_cross_entropy_grad(i, m);
}
static bool shard_label_count(const Inst *i, DimMap *m) {
  map_init(i, m);
  m->to[0][0] = FORM_SUM(0);
  m->nsum = 1;
  return true;
}
static bool shard_bce_with_logits(const Inst *i, DimMap *m) { return shard_mse(i, m); }
static bool shard_bce_with_logits_grad(const Inst *i, DimMap *m) {
  map_init(i, m);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[0][j] = m->to[1][j] = j;
  return true;
}

/* (table[V,D], ids[...]) -> [..., D]: D and ids' dims carry over. */
static bool shard_embedding(const Inst *i, DimMap *m) {
  map_init(i, m);
  m->to[0][1] = i->type.rank - 1;
  for (int j = 0; j < i->in[1]->type.rank; j++)
    m->to[1][j] = j;
  return true;
}

/* (ids, dy) -> [rows, D]: D carries over from dy; the positions (ids' dims,
 * dy's others) are summed; rows stay whole. */
/* DeMo's kernels work on whole tensors: a rank's packed coefficients are its
 * own (the exchange pass gathers them, passes/exchange.c). */
static bool shard_demo_compress(const Inst *i, DimMap *m) { return whole(i, m); }
static bool shard_demo_residual(const Inst *i, DimMap *m) { return whole(i, m); }
static bool shard_demo_sign(const Inst *i, DimMap *m) { return whole(i, m); }

static bool shard_embedding_grad(const Inst *i, DimMap *m) {
  int ri = i->in[0]->type.rank;
  map_init(i, m);
  for (int j = 0; j < ri; j++)
    m->to[0][j] = m->to[1][j] = FORM_SUM(m->nsum++);
  m->to[1][i->in[1]->type.rank - 1] = 1;
  m->res_whole[0] = true;
  return true;
}

/* Embedding bags: with input [B, K], the bags (dim 0 of input,
 * per_sample_weights and dy) are the batch rows, split or not; to (the
 * result dim they map to) or FORM_SUM(0) for the weight's gradient, a sum
 * over the bags. Every dim of a flat input with offsets stays whole: no
 * block of the input holds a block of bags. The weight is whole here;
 * table_rows says how its rows split. */
static bool bag_rows(const Inst *i, DimMap *m, int to) {
  map_init(i, m);
  for (int d = 0; d < i->type.rank; d++)
    m->res_whole[d] = true;
  if (i->in[0]->type.rank != 2)
    return true;
  for (int k = 0; k < i->nin; k++)
    if (k != 1)
      m->to[k][0] = to;
  if (to >= 0)
    m->res_whole[to] = false;
  else
    m->nsum = 1;
  return true;
}

/* A row-wise table (docs/IR.md, "Row-wise tables"): the weight's rows split
 * over an axis, each device looks up the ids in its block (spmd's `at`),
 * the others count as zero rows, so a pooled sum or mean (not max) is a
 * partial sum over the rows (to: FORM_SUM), the weight's gradient splits
 * with them (to: 0), and a sparse gradient is each device's own rows (own).
 * The bags then stay whole over that axis (an axis splits one thing). */
static void table_rows(const Inst *i, DimMap *m, int to) {
  if (ir_get_int(i, "mode", 0) == DT_BAG_MAX)
    return;
  if (to == FORM_SUM(0))
    to = FORM_SUM(m->nsum++);
  if (to == FORM_WHOLE)
    m->own[1][0] = true;
  else
    m->to[1][0] = to;
  if (to >= 0)
    m->res_whole[to] = false;
}

/* A column-wise table: the weight's columns (D) split over an axis, each
 * device pools its columns of every bag: they map to the result's dim to
 * (with the D of operand dy, the adjoint; -1: none), or sum under a label
 * (FORM_SUM: the per-sample weights' gradient, a dot over D), or
 * (FORM_WHOLE) leave the result alone (own: sparse_rows, the same rows on
 * every device). */
static void table_cols(DimMap *m, int to, int dy) {
  if (to == FORM_SUM(0))
    to = FORM_SUM(m->nsum++);
  if (to == FORM_WHOLE) {
    m->own[1][1] = true;
    return;
  }
  m->to[1][1] = to;
  if (dy >= 0)
    m->to[dy][1] = to;
  if (to >= 0)
    m->res_whole[to] = false;
}

static bool shard_embedding_bag(const Inst *i, DimMap *m) {
  bag_rows(i, m, 0);
  table_rows(i, m, FORM_SUM(0));
  table_cols(m, 1, -1);
  return true;
}
static bool shard_embedding_bag_grad(const Inst *i, DimMap *m) {
  bag_rows(i, m, FORM_SUM(0));
  table_rows(i, m, 0);
  table_cols(m, 1, i->nin - 1);
  return true;
}
static bool shard_embedding_bag_psw_grad(const Inst *i, DimMap *m) {
  bag_rows(i, m, 0);
  table_rows(i, m, FORM_SUM(0));
  table_cols(m, FORM_SUM(0), i->nin - 1);
  return true;
}
/* A sparse gradient's rows and values lie as the bags do (each device's
 * its own bags' rows), or of a row-wise table, each device's own rows of
 * every bag. An update reads them whole (under data parallelism gathered
 * from every device, whose rows it merges) and its table and state split
 * by rows as the table is, each device updating its block's rows. */
static bool shard_sparse_rows(const Inst *i, DimMap *m) {
  bag_rows(i, m, 0);
  table_rows(i, m, FORM_WHOLE);
  table_cols(m, FORM_WHOLE, -1);
  return true;
}
static bool shard_sparse_values(const Inst *i, DimMap *m) {
  bag_rows(i, m, 0);
  table_rows(i, m, FORM_WHOLE);
  table_cols(m, i->in[0]->type.rank, i->nin - 2);
  return true;
}
/* Operands tables (the updated tensor and its state) split by rows with
 * the result, and by columns with the values' last dim (operand values;
 * -1: none); the others whole. A state of one value a row ([R]) reads whole
 * values: its mean over D needs every column. */
static bool sparse_update(const Inst *i, DimMap *m, int tables, int values) {
  whole(i, m);
  m->res_whole[0] = false;
  m->res_whole[1] = i->type.rank < 2;
  for (int k = 0; k < i->nin; k++)
    if (tables & (1 << k)) {
      m->to[k][0] = 0;
      if (i->in[k]->type.rank == 2)
        m->to[k][1] = 1;
    }
  if (values >= 0 && i->type.rank == 2)
    m->to[values][i->in[values]->type.rank - 1] = 1;
  return true;
}
static bool shard_sparse_sgd(const Inst *i, DimMap *m) { return sparse_update(i, m, 1, 2); }
static bool shard_sparse_adagrad_sum(const Inst *i, DimMap *m) { return sparse_update(i, m, 1, 2); }
static bool shard_sparse_adagrad(const Inst *i, DimMap *m) {
  return sparse_update(i, m, 1 | 1 << 3, 2);
}
static bool shard_sparse_moment(const Inst *i, DimMap *m) { return sparse_update(i, m, 1, 2); }
static bool shard_sparse_adam(const Inst *i, DimMap *m) {
  return sparse_update(i, m, 1 | 1 << 2 | 1 << 3, -1);
}

/* ---- convolution and pooling: N carries over, H and W stay whole ---- */

/* The batch dim of operands ks (a -1 ends the list) maps to result dim to
 * (FORM_SUM: summed over), and the result's spatial dims stay whole. */
static void conv_common(const Inst *i, DimMap *m, const int *ks, int to) {
  map_init(i, m);
  for (int k = 0; ks[k] >= 0; k++)
    m->to[ks[k]][0] = to;
  if (to < 0)
    m->nsum = 1;
  m->res_whole[2] = m->res_whole[3] = true;
}

/* (x[N,C,H,W], w[O,C,kh,kw]) -> [N,O,Ho,Wo]: O carries over from w and C,
 * split in both, makes a partial sum; with groups, the channels stay whole. */
static bool shard_conv2d(const Inst *i, DimMap *m) {
  conv_common(i, m, (int[]){0, -1}, 0);
  if (ir_get_int(i, "groups", 1) != 1)
    return m->res_whole[1] = true, true;
  m->to[1][0] = 1;
  m->to[0][1] = m->to[1][1] = FORM_SUM(0);
  m->nsum = 1;
  return true;
}

/* (w, dy) -> dx: C carries over from w; O, split in w and dy, is summed. */
static bool shard_conv2d_grad_input(const Inst *i, DimMap *m) {
  conv_common(i, m, (int[]){1, -1}, 0);
  if (ir_get_int(i, "groups", 1) != 1)
    return m->res_whole[1] = true, true;
  m->to[0][1] = 1;
  m->to[0][0] = m->to[1][1] = FORM_SUM(0);
  m->nsum = 1;
  return true;
}

/* (x, dy) -> dw[O,C,kh,kw]: N, split in both, is summed; O carries over from
 * dy, C from x. */
static bool shard_conv2d_grad_weight(const Inst *i, DimMap *m) {
  conv_common(i, m, (int[]){0, 1, -1}, FORM_SUM(0));
  if (ir_get_int(i, "groups", 1) != 1)
    return m->res_whole[0] = m->res_whole[1] = true, true;
  m->to[1][1] = 0;
  m->to[0][1] = 1;
  return true;
}

/* Every operand is [N,C,H,W] or its result's shape: N and C carry over. */
static bool pool(const Inst *i, DimMap *m, bool linear) {
  map_init(i, m);
  for (int k = 0; k < i->nin; k++)
    m->to[k][0] = 0, m->to[k][1] = 1;
  m->res_whole[2] = m->res_whole[3] = true;
  m->linear = linear;
  return true;
}
static bool shard_max_pool2d(const Inst *i, DimMap *m) { return pool(i, m, false); }
static bool shard_max_pool2d_grad(const Inst *i, DimMap *m) { return pool(i, m, false); }
static bool shard_avg_pool2d(const Inst *i, DimMap *m) { return pool(i, m, true); }
static bool shard_avg_pool2d_grad(const Inst *i, DimMap *m) { return pool(i, m, true); }

/* ---- data movement: partial sums stay partial ---- */

typedef struct Group { int i0, i1, o0, o1; } Group;

/* x's and y's dimensions in groups of equal products (dims of length 1
 * alone). */
static int groups(const Type *x, const Type *y, Group *g) {
  int i = 0, o = 0, n = 0;
  while (i < x->rank || o < y->rank) {
    if (i < x->rank && x->dim[i] == 1) {
      g[n++] = (Group){i, i + 1, o, o};
      i++;
      continue;
    }
    if (o < y->rank && y->dim[o] == 1) {
      g[n++] = (Group){i, i, o, o + 1};
      o++;
      continue;
    }
    Group gr = {i, i, o, o};
    int64_t pi = 1, po = 1;
    do {
      if (pi <= po && i < x->rank)
        pi *= x->dim[i++];
      else if (o < y->rank)
        po *= y->dim[o++];
      else
        break;
    } while (pi != po);
    gr.i1 = i;
    gr.o1 = o;
    g[n++] = gr;
  }
  return n;
}

static int64_t prod(const Type *t, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++)
    p *= t->dim[d];
  return p;
}

/* Only the first dimension of a group carries a split across a reshape, its
 * blocks scaled by the rest of the group. */
static bool shard_reshape(const Inst *i, DimMap *m) {
  const Type *x = &i->in[0]->type, *y = &i->type;
  Group g[2 * IR_MAX_RANK];
  int n = groups(x, y, g);
  map_init(i, m);
  for (int d = 0; d < y->rank; d++)
    m->res_whole[d] = true;
  for (int q = 0; q < n; q++) {
    if (g[q].i1 == g[q].i0 || g[q].o1 == g[q].o0)
      continue;
    m->to[0][g[q].i0] = g[q].o0;
    m->mul[0][g[q].i0] = prod(x, g[q].i0 + 1, g[q].i1);
    m->div[0][g[q].i0] = prod(y, g[q].o0 + 1, g[q].o1);
    m->res_whole[g[q].o0] = false;
  }
  m->linear = true;
  return true;
}

static bool shard_transpose(const Inst *i, DimMap *m) {
  int n;
  const int64_t *perm = ir_get_ints(i, "perm", &n);
  map_init(i, m);
  for (int d = 0; d < n; d++)
    m->to[0][perm[d]] = d;
  m->linear = true;
  return true;
}

static bool on_axis(const Inst *i, DimMap *m) {
  int64_t ax = norm_axis(ir_get_int(i, "axis", 0), i->type.rank);
  map_init(i, m);
  same_but(i, m, ax, ax);
  m->linear = true;
  return true;
}
static bool shard_slice(const Inst *i, DimMap *m) { return on_axis(i, m); }
/* A pad with a value is not linear: each partial sum's pad would add it. */
static bool shard_pad(const Inst *i, DimMap *m) {
  on_axis(i, m);
  m->linear = ir_get_float(i, "value", 0) == 0;
  return true;
}
static bool shard_pad_reflect(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_pad_replicate(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_pad_circular(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_pad_reflect_grad(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_pad_replicate_grad(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_pad_circular_grad(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_concat(const Inst *i, DimMap *m) { return on_axis(i, m); }
static bool shard_broadcast(const Inst *i, DimMap *m) { return elem(i, m, true); }

/* ---- indices and integers ---- */

static bool shard_int_elem(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_to_f32(const Inst *i, DimMap *m) { return elem(i, m, false); }
static bool shard_int_where(const Inst *i, DimMap *m) { return elem(i, m, false); }
/* Made whole on every device: a block would count from 0 */
static bool shard_arange(const Inst *i, DimMap *m) { return whole(i, m); }
/* The classes stay whole; the ids' dims carry over. */
static bool shard_one_hot(const Inst *i, DimMap *m) {
  map_init(i, m);
  for (int j = 0; j < i->in[0]->type.rank; j++)
    m->to[0][j] = j;
  m->res_whole[i->type.rank - 1] = true;
  return true;
}
/* (x, index) -> index's shape: x stays whole along axis (an index points
 * anywhere in it); a split of index along axis splits the result. Another
 * dim splits in x, index and the result together where x and index have
 * one length there, else it stays whole (a block of index would read x at
 * its own coordinates). */
static bool shard_gather(const Inst *i, DimMap *m) {
  const Type *x = &i->in[0]->type, *ix = &i->in[1]->type;
  int64_t ax = norm_axis(ir_get_int(i, "axis", 0), x->rank);
  map_init(i, m);
  for (int j = 0; j < x->rank; j++) {
    bool same = j != ax && x->dim[j] == ix->dim[j];
    m->to[0][j] = same ? j : FORM_WHOLE;
    m->to[1][j] = same || j == ax ? j : FORM_WHOLE;
    m->res_whole[j] = !same && j != ax;
  }
  return true;
}
/* (index, dy) -> dx: dx stays whole along axis, where a split of index and
 * dy makes a partial sum; the other dims as gather's. */
static bool shard_gather_grad(const Inst *i, DimMap *m) {
  const Type *ix = &i->in[0]->type;
  int64_t ax = norm_axis(ir_get_int(i, "axis", 0), ix->rank);
  map_init(i, m);
  for (int j = 0; j < ix->rank; j++) {
    bool same = j != ax && ix->dim[j] == i->type.dim[j];
    m->to[0][j] = m->to[1][j] = j == ax ? FORM_SUM(0) : same ? j : FORM_WHOLE;
    m->res_whole[j] = !same;
  }
  m->nsum = 1;
  return true;
}
/* along the axis each element adds all before it: that dim stays whole */
static bool shard_cumsum(const Inst *i, DimMap *m) { return along(i, m); }
static bool shard_tril(const Inst *i, DimMap *m) { return last(i, m, 2); }
static bool shard_triu(const Inst *i, DimMap *m) { return last(i, m, 2); }

/* ---- collectives: made by spmd, never sharded ---- */

static bool shard_all_reduce(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_all_gather(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_reduce_scatter(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_all_to_all(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_shard_slice(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_send(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_bcast(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }
static bool shard_fold_all(const Inst *i, DimMap *m) { return (void)i, (void)m, false; }

/* ---- batch norm: the eval pass, before sharding, leaves no batch_stat ---- */

static bool shard_batch_stat(const Inst *i, DimMap *m) { return elem(i, m, false); }

static const ShardRule shard_rules[OP_COUNT] = {
#define OP(id, name, minin, maxin, kind, attrs) [OP_##id] = shard_##id,
#include "ops.def"
#undef OP
};

/* An op in pieces: its result gains the leading dim of the pieces, which
 * the cut operands' dim 0 maps to (a block of a piece's rows each); the sum
 * over those dims is no longer one. */
static void in_pieces(const Inst *i, DimMap *m) {
  int rank = i->type.rank, gone[16], ngone = 0;
  for (int k = 0; k < i->nin; k++)
    for (int j = 0; j < i->in[k]->type.rank; j++)
      if (m->to[k][j] >= 0)
        m->to[k][j]++;
  memmove(m->res_whole + 1, m->res_whole, sizeof(bool) * (size_t)(rank - 1));
  m->res_whole[0] = false;
  for (int k = 0; k < i->nin; k++) {
    int64_t rows = ir_piece_rows(i, k);
    if (!rows)
      continue;
    if (m->to[k][0] <= FORM_SUM(0))
      gone[ngone++] = FORM_SUM(0) - m->to[k][0];
    m->to[k][0] = 0;
    m->mul[k][0] = 1, m->div[k][0] = rows;
  }
  for (int c = m->nsum - 1; c >= 0; c--) {
    bool cut = false;
    for (int q = 0; q < ngone; q++)
      cut |= gone[q] == c;
    if (!cut)
      continue;
    for (int k = 0; k < i->nin; k++)
      for (int j = 0; j < i->in[k]->type.rank; j++) {
        DTC_ASSERT(m->to[k][j] != FORM_SUM(c));   /* determinize cuts every dim of the sum */
        if (m->to[k][j] < FORM_SUM(c))
          m->to[k][j]++;
      }
    m->nsum--;
  }
}

bool shard_map(const Inst *i, DimMap *m) {
  if (!ir_pieces(i))
    return shard_rules[i->op](i, m);
  /* the op's rule on one piece of every cut operand, then the pieces' dim */
  Inst one = *i, piece[16], *in[16];
  DTC_ASSERT(i->nin <= 16);
  ir_piece_operands(i, piece, in);
  one.in = in;
  one.type.rank--;
  memmove(one.type.dim, one.type.dim + 1, sizeof(int64_t) * (size_t)one.type.rank);
  if (!shard_rules[i->op](&one, m))
    return false;
  in_pieces(i, m);
  return true;
}
