/* cost.c: floating-point operations per op, flops_<id> for the op table; the
 * planner divides them by a device's speed. Conventions:
 *
 *   matmul          2*m*n*k per batch element (a multiply-add is 2 flops)
 *   conv2d          2*(C/groups)*kh*kw per output element, so its derivatives
 *                   per adjoint element; pooling 1 per window position
 *   elementwise     1 per output element: add sub mul div neg relu relu_grad sqrt;
 *                   transcendentals count the arithmetic of a vectorised
 *                   polynomial: exp log 10, tanh sigmoid 12, gelu_tanh 16,
 *                   gelu_tanh_grad 24, gelu (erf: a rational term and an exp) 20,
 *                   gelu_grad 28
 *   reductions      1 per input element; mean adds 1 per output element
 *   kernels         per element of their largest operand, with the steps listed
 *                   at each below; a per-row step is folded into the per-element
 *                   count when the row is long
 *   demo_*          a tile's two products with the DCT matrices: dense for
 *                   demo_compress (2 (c1 + c2) per element); an inverse's
 *                   over the m coefficients sent, m c2 for the first and c1
 *                   c2 for each of at most min(m, c1) rows for the second
 *                   (m = topk; R topk for demo_sign of R rows), twice that;
 *                   and 4 per element (the momentum, the selection's keys
 *                   and heap, the residual, the sign)
 *   data movement   0: reshape transpose slice pad (its fill too, whatever the
 *                   value) concat broadcast embedding to_f32 int_where gather
 *                   one_hot arange tril triu; embedding_bag adds its pooling
 *   plumbing        0: load store output const lr arg repeat_out batch_stat
 *   repeat          n times the sum over its body's insts
 *
 * Counts are estimates of work, not of time: memory traffic is the planner's
 * other term (bytes moved). */
#include <math.h>
#include <string.h>

#include "ir.h"

enum {
  F_EXP = 10, F_LOG = 10, F_TANH = 12, F_SIGMOID = 12, F_GELU_TANH = 16, F_GELU_TANH_GRAD = 24,
  F_GELU = 20, F_GELU_GRAD = 28
};

static double out_elems(const Inst *i) { return (double)type_elems(&i->type); }
static double in_elems(const Inst *i, int k) {
  return k < i->nin && i->in[k] ? (double)type_elems(&i->in[k]->type) : 0;
}

#define ZERO(id) \
  double flops_##id(const Inst *i) { (void)i; return 0; }
#define PER_OUT(id, n) \
  double flops_##id(const Inst *i) { return (n) * out_elems(i); }
#define PER_IN(id, n) \
  double flops_##id(const Inst *i) { return (n) * in_elems(i, 0); }

ZERO(load)
ZERO(arg)
ZERO(repeat_out)

double ir_flops(const Inst *i) {
  int p = ir_pieces(i);
  if (!p || i->nin > 16)
    return ir_ops[i->op].flops(i);
  /* one piece's: its rule on a piece of every cut operand, and its result */
  Inst piece[16], *in[16], one = *i;
  ir_piece_operands(i, piece, in);
  one.in = in;
  one.type.rank--;
  memmove(one.type.dim, i->type.dim + 1, sizeof(int64_t) * (size_t)one.type.rank);
  return p * ir_ops[i->op].flops(&one);
}

double flops_repeat(const Inst *i) {
  const Func *body = ir_repeat_body(i);
  double s = 0;
  for (int k = 0; body && k < body->inst.n; k++)
    s += ir_flops(body->inst.a[k]);
  return s * (double)ir_get_int(i, "n", 1);
}
ZERO(store)
ZERO(output)
ZERO(const)
ZERO(lr)

PER_OUT(add, 1)
PER_OUT(sub, 1)
PER_OUT(mul, 1)
PER_OUT(bn_center, 1)
PER_OUT(bn_scale, 1)
PER_OUT(div, 1)
PER_OUT(neg, 1)
PER_OUT(sqrt, 1)
PER_OUT(relu, 1)
PER_OUT(relu_grad, 1)
PER_OUT(exp, F_EXP)
PER_OUT(log, F_LOG)
PER_OUT(tanh, F_TANH)
PER_OUT(sigmoid, F_SIGMOID)
PER_OUT(gelu, F_GELU)
PER_OUT(gelu_grad, F_GELU_GRAD)
PER_OUT(gelu_tanh, F_GELU_TANH)
PER_OUT(gelu_tanh_grad, F_GELU_TANH_GRAD)
PER_OUT(gt, 1)
PER_OUT(ge, 1)
PER_OUT(eq, 1)
PER_OUT(ne, 1)
PER_OUT(where_true, 1)
PER_OUT(where_false, 1)
PER_OUT(maximum, 1)
PER_OUT(minimum, 1)
PER_OUT(pow, F_LOG + F_EXP + 4)
PER_OUT(clamp, 2)
PER_OUT(clamp_grad, 2)

PER_IN(sum, 1)
PER_IN(fold, 1)
PER_IN(max, 1)
double flops_mean(const Inst *i) { return in_elems(i, 0) + out_elems(i); }
PER_IN(sum_mul, 2)
double flops_mean_mul(const Inst *i) { return 2 * in_elems(i, 0) + out_elems(i); }
/* compare with the maximum, select the adjoint */
PER_IN(max_grad, 2)

double flops_matmul(const Inst *i) {
  if (i->nin < 1 || !i->in[0])
    return 0;
  const Type *a = &i->in[0]->type;
  int64_t k = 0;
  if (a->rank >= 2)
    k = a->dim[a->rank - (ir_get_int(i, "ta", 0) ? 2 : 1)];
  for (int d = 0; d < ir_get_int(i, "kfold", 0) && d < a->rank; d++)   /* summed with k */
    k *= a->dim[d];
  return 2 * out_elems(i) * (double)k;
}

/* max, subtract, exp, sum, scale */
PER_IN(softmax, 4 + F_EXP)
/* max, subtract, exp, sum, subtract the log of the sum */
PER_IN(log_softmax, 4 + F_EXP)
/* y*dy, sum, subtract, multiply */
PER_IN(softmax_grad, 4)
/* exp(y), sum dy, multiply, subtract */
PER_IN(log_softmax_grad, 3 + F_EXP)
/* log_softmax of the logits, then one pick per row */
double flops_cross_entropy(const Inst *i) {
  return (4 + F_EXP) * in_elems(i, 0) + in_elems(i, 1);
}
/* softmax of the logits, subtract the one-hot label, scale by dloss/N */
PER_IN(cross_entropy_grad, 6 + F_EXP)
/* subtract, square, sum */
PER_IN(mse, 3)
/* PyTorch's losses: cross_entropy's work plus the smoothing sum per logit */
double flops_cross_entropy_sum(const Inst *i) {
  return (5 + F_EXP) * in_elems(i, 0) + in_elems(i, 1);
}
/* softmax, subtract the smoothed one-hot label, scale */
PER_IN(cross_entropy_sum_grad, 7 + F_EXP)
/* compare, add */
PER_IN(label_count, 2)
/* max(x, 0) - x t + log(1 + exp(-|x|)), summed */
PER_IN(bce_with_logits, 6 + F_EXP)
/* sigmoid, subtract, scale */
PER_IN(bce_with_logits_grad, 4 + F_EXP)
/* mean, subtract, square and sum, scale */
PER_IN(normalize, 5)
/* normalise again, two sums, combine */
PER_IN(normalize_grad, 10)
ZERO(embedding)
/* scatter-add of the adjoint rows */
double flops_embedding_grad(const Inst *i) { return in_elems(i, 1); }
/* embedding bags, per entry of the input and column of the weight: an add
 * (and a multiply with per_sample_weights, max's compare instead); the
 * backward's adds, the per-sample weights' multiply-adds. The bytes of the
 * rows gathered, not the table, are passes/sim.c's. */
static double bag_columns(const Inst *i) {
  return i->nin > 1 && i->in[1] ? in_elems(i, 0) * (double)i->in[1]->type.dim[1] : 0;
}
static bool bag_psw(const Inst *i, int extra) {
  return i->nin - extra > (i->in[0]->type.rank == 2 ? 2 : 3);
}
double flops_embedding_bag(const Inst *i) { return (bag_psw(i, 0) ? 2 : 1) * bag_columns(i); }
double flops_embedding_bag_grad(const Inst *i) { return (bag_psw(i, 1) ? 2 : 1) * bag_columns(i); }
double flops_embedding_bag_psw_grad(const Inst *i) { return 2 * bag_columns(i); }
/* sparse tables: a sort of the ids; per value, the bag's adds; per touched
 * value (as many as the rows hold, at most), the update's few flops */
double flops_sparse_rows(const Inst *i) { return in_elems(i, 0); }
double flops_sparse_values(const Inst *i) { return bag_columns(i); }
double flops_sparse_sgd(const Inst *i) { return 2 * in_elems(i, 2); }
double flops_sparse_adagrad_sum(const Inst *i) { return 2 * in_elems(i, 2); }
double flops_sparse_adagrad(const Inst *i) { return 5 * in_elems(i, 2); }
double flops_sparse_moment(const Inst *i) { return 3 * in_elems(i, 2); }
double flops_sparse_adam(const Inst *i) { return 5 * in_elems(i, 1) * i->type.dim[1]; }
/* a counter-based hash per element, compare, scale */
PER_IN(dropout, 8)
PER_IN(dropout_grad, 8)
/* compare and select */
PER_IN(causal_mask, 1)

/* Attention: products of 2 D flops per (query, key) pair seen (about half
 * the pairs when causal), and the softmax's exponential with a few steps per
 * pair. The forward makes two products (q k^T, p v), sdpa_lse one (none
 * when the forward writes its rows: ir_lse_partner), sdpa_grad
 * five (q k^T, dout v^T, p^T dout, ds^T q, ds k: its one pass, which a
 * device with about as many threads as (batch, head) pairs or fewer takes,
 * dtrt_sdpa_grad_passes; seven in two, q k^T and dout v^T in both), a ring's
 * steps alike. */
double ir_attn_pairs(const Inst *i) {
  if (i->nin < 2 || !i->in[0] || !i->in[1] || i->in[0]->type.rank != 4)
    return 0;
  const Type *q = &i->in[0]->type;
  double tq = (double)q->dim[2], tk = (double)i->in[1]->type.dim[2];
  double seen = tq * tk;
  if (ir_get_int(i, "causal", 0))   /* tril(ones(tq, tk)) */
    seen = tq <= tk ? tq * (tq + 1) / 2 : tk * (tk + 1) / 2 + (tq - tk) * tk;
  return (double)q->dim[0] * (double)q->dim[1] * seen;
}
/* FLOPs a pair seen: a mask operand (after the base operands) adds one flop
 * a pair each time the scores are made (exps), dropout 8 a draw (drops, as
 * dropout's). */
static double attn_per_pair(const Inst *i, int products, int exps, int base, int drops) {
  const Type *q = &i->in[0]->type;
  double extra = (i->nin > base ? exps : 0) + (ir_get_float(i, "p", 0) > 0 ? 8.0 * drops : 0);
  return 2.0 * (double)q->dim[3] * products + exps * (4 + F_EXP) + extra;
}
static double attn_flops(const Inst *i, int products, int exps, int base, int drops) {
  return i->in[0]->type.rank != 4
             ? 0
             : ir_attn_pairs(i) * attn_per_pair(i, products, exps, base, drops);
}
double flops_sdpa(const Inst *i) { return attn_flops(i, 2, 1, 3, 1); }
double flops_sdpa_lse(const Inst *i) { return ir_lse_partner(i) ? 0 : attn_flops(i, 1, 1, 2, 0); }
double flops_sdpa_grad(const Inst *i) { return attn_flops(i, 5, 1, 6, 2); }
double flops_sdpa_dmask(const Inst *i) { return attn_flops(i, 2, 1, 6, 2); }
/* a ring's device meets every block of keys: its queries' pairs with the
 * whole sequence (causal: its share of the triangle, counted as an even
 * one's) */
static double ring_flops(const Inst *i, int products, int exps, int base, int drops) {
  int n;
  const int64_t *sizes = ir_get_ints(i, "sizes", &n);
  double t = 0, tq = (double)i->in[0]->type.dim[2];
  for (int k = 0; k < n; k++)
    t += (double)sizes[k];
  double f = attn_flops(i, products, exps, base, drops);
  if (!(tq > 0) || !(t > 0))
    return f;
  double per = f / (ir_get_int(i, "causal", 0) ? tq * (tq + 1) / 2 : tq * tq);
  return per * (ir_get_int(i, "causal", 0) ? tq * (t + 1) / 2 : tq * t);
}
double flops_ring_sdpa(const Inst *i) { return ring_flops(i, 2, 1, 3, 1); }
double flops_ring_sdpa_lse(const Inst *i) {
  return ir_lse_partner(i) ? 0 : ring_flops(i, 1, 1, 2, 0);
}
double flops_ring_sdpa_grad(const Inst *i) { return ring_flops(i, 5, 1, 6, 2); }

/* The scores attention kernel i makes: its pairs seen, each as many times
 * as it makes them (exps), as its FLOPs count them (pieces, a ring's
 * blocks); 0 for other ops. */
double ir_attn_scores(const Inst *i) {
  int products, exps, base, drops;
  switch (i->op) {
  case OP_sdpa: case OP_ring_sdpa: products = 2, exps = 1, base = 3, drops = 1; break;
  case OP_sdpa_lse: case OP_ring_sdpa_lse: products = 1, exps = 1, base = 2, drops = 0; break;
  case OP_sdpa_grad: case OP_ring_sdpa_grad: products = 5, exps = 1, base = 6, drops = 2; break;
  case OP_sdpa_dmask: products = 2, exps = 1, base = 6, drops = 2; break;
  default: return 0;
  }
  if (!i->nin || !i->in[0] || i->in[0]->type.rank != 4 || ir_lse_partner(i))
    return 0;
  return ir_flops(i) * exps / attn_per_pair(i, products, exps, base, drops);
}

/* A convolution is a matmul per group: 2 * (C/groups * kh * kw) flops per
 * element of y, and its two derivatives as many (per element of dy); col2im,
 * im2col and the bias are data movement. */
static double conv_macs(const Inst *i, const Type *y) {
  if (i->nin < 2 || !i->in[0] || !i->in[1])
    return 0;
  const Type *w = i->op == OP_conv2d ? &i->in[1]->type
                  : i->op == OP_conv2d_grad_input ? &i->in[0]->type : &i->type;
  return w->rank != 4 ? 0 : 2 * (double)type_elems(y) * (double)(w->dim[1] * w->dim[2] * w->dim[3]);
}
double flops_conv2d(const Inst *i) { return conv_macs(i, &i->type); }
double flops_conv2d_grad_input(const Inst *i) {
  return i->nin < 2 || !i->in[1] ? 0 : conv_macs(i, &i->in[1]->type);
}
double flops_conv2d_grad_weight(const Inst *i) {
  return i->nin < 2 || !i->in[1] ? 0 : conv_macs(i, &i->in[1]->type);
}
/* a compare (max) or an add (avg) per kernel position of each window */
static double pool_windows(const Inst *i, const Type *y) {
  int n;
  const int64_t *k = ir_get_ints(i, "kernel", &n);
  return n == 2 ? (double)type_elems(y) * (double)(k[0] * k[1]) : 0;
}
double flops_max_pool2d(const Inst *i) { return pool_windows(i, &i->type); }
double flops_avg_pool2d(const Inst *i) { return pool_windows(i, &i->type) + out_elems(i); }
/* the compares again, then one add per window */
double flops_max_pool2d_grad(const Inst *i) {
  return i->nin < 2 || !i->in[1] ? 0 : pool_windows(i, &i->in[1]->type) + in_elems(i, 1);
}
/* one scaled add per kernel position of each window */
double flops_avg_pool2d_grad(const Inst *i) {
  return i->nin < 1 || !i->in[0] ? 0 : pool_windows(i, &i->in[0]->type);
}

ZERO(reshape)
ZERO(transpose)
ZERO(slice)
ZERO(pad)
ZERO(pad_reflect)
ZERO(pad_replicate)
ZERO(pad_circular)
/* an add per element of dy */
PER_IN(pad_reflect_grad, 1)
PER_IN(pad_replicate_grad, 1)
PER_IN(pad_circular_grad, 1)
ZERO(concat)
ZERO(broadcast)

/* indices and integers: one operation per result element (int_elem's
 * arithmetic or compare, cumsum's add, gather_grad's add per adjoint
 * element); the others move data */
PER_OUT(int_elem, 1)
ZERO(to_f32)
ZERO(int_where)
ZERO(gather)
PER_IN(gather_grad, 1)
ZERO(one_hot)
ZERO(arange)
PER_OUT(cumsum, 1)
ZERO(tril)
ZERO(triu)

/* Collectives move bytes; their cost is communication, not FLOPs (an
 * all-reduce's additions are counted with the bytes by the comm model). */
double flops_all_reduce(const Inst *i) { (void)i; return 0; }
double flops_all_gather(const Inst *i) { (void)i; return 0; }
double flops_reduce_scatter(const Inst *i) { (void)i; return 0; }
double flops_all_to_all(const Inst *i) { (void)i; return 0; }
double flops_shard_slice(const Inst *i) { (void)i; return 0; }
double flops_send(const Inst *i) { (void)i; return 0; }
double flops_bcast(const Inst *i) { (void)i; return 0; }
/* the adds of a member's pieces */
PER_IN(fold_all, 1)

/* batch norm: the eval pass replaces batch_stat by an operand */
ZERO(batch_stat)

/* DeMo (runtime/kernels_demo.c): a tile's forward transform dense, an
 * inverse's over the rows with a coefficient among the `sent` ones; rows:
 * the packed rows of demo_sign, 0 for the forward transform. */
static double demo_flops(const Inst *i, const Type *x, double rows) {
  DtDemoTiles t;
  if (!dtrt_demo_tiles(x->dim, x->rank, ir_get_int(i, "stacked", 0) != 0, ir_get_int(i, "chunk", 1),
                       ir_get_int(i, "topk", 1), &t))
    return 0;
  double c1 = (double)t.c1, c2 = (double)t.c2, per = c1 * c2, n = (double)type_elems(x);
  if (rows == 0)
    return n * (2.0 * (c1 + c2) + 4.0);
  double m = fmin(rows * (double)t.k, per);
  return (double)t.tiles * 2.0 * (m * c2 + fmin(m, c1) * per) + n * 4.0;
}
double flops_demo_compress(const Inst *i) { return demo_flops(i, &i->in[0]->type, 0); }
double flops_demo_residual(const Inst *i) { return demo_flops(i, &i->in[0]->type, 1); }
double flops_demo_sign(const Inst *i) {
  return demo_flops(i, &i->type, fmax(1.0, (double)i->in[0]->type.dim[0]));
}
