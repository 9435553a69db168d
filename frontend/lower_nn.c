/* lower_nn.c: the lowering of the built-in functions of neural networks with
 * options to check: softmax, layer_norm, dropout, conv2d, pooling,
 * batch_norm, the losses with their options, embedding_bag,
 * scaled_dot_product_attention. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* softmax, log_softmax(x, axis = -1), or torch's `dim` for the axis. */
Inst *lower_softmax(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Inst *x = in[0];
  int64_t axis = x->type.rank - 1;
  if (arg[1] && arg[2]) {
    diag_error(c->d, arg[2]->loc, "give 'dim' or 'axis', not both");
    return NULL;
  }
  const Expr *ax = arg[1] ? arg[1] : arg[2];
  if (ax && !axis_arg(c, ax, x, &axis))
    return NULL;
  Inst *i = ir_new(c->f, b->op, e->loc, 1, &x);
  ir_set_int(i, "axis", axis);
  return finish(c, i);
}

/* layer_norm(x, gamma, beta, eps = 1e-5): normalize over the last dim, then
 * times gamma and plus beta when given. */
Inst *lower_layer_norm(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  double v = 1e-5;
  if (arg[3] && !real_in(c, arg[3], "eps", &ir_positive, &v))
    return NULL;
  Inst *i = ir_new(c->f, b->op, e->loc, 1, &in[0]);
  ir_set_float(i, "eps", v);
  if ((i = finish(c, i)) && in[1])
    i = op2(c, OP_mul, e->loc, i, in[1]);
  if (i && in[2])
    i = op2(c, OP_add, e->loc, i, in[2]);
  return i;
}

/* dropout(x, p = 0.1, seed): the seed from the call's place unless given. */
Inst *lower_dropout(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  double v = 0.1;
  int64_t seed = (int64_t)e->loc.line << 16 | (e->loc.col & 0xffff);
  if (c->path[0])   /* each application of a block draws its own masks */
    seed ^= (int64_t)(ir_hash(c->path, strlen(c->path)) & 0xffffffff00000000u);
  if (arg[1] && !real_in(c, arg[1], "p", &ir_unit_open, &v))
    return NULL;
  if (arg[2] && !int_arg(c, arg[2], "'seed'", &seed))
    return NULL;
  Inst *i = ir_new(c->f, b->op, e->loc, 1, &in[0]);
  ir_set_float(i, "p", v);
  ir_set_int(i, "seed", seed);
  return finish(c, i);
}

/* ---- convolutional networks ---- */

/* An int or a pair [height, width] of ints, each at least lo. */
static bool pair_arg(Ctx *c, const Expr *e, const char *what, int64_t lo, int64_t v[2]) {
  if (e->kind == E_LIST && e->args.n != 2) {
    diag_error(c->d, e->loc, "'%s' must be an int or a pair [height, width]", what);
    return false;
  }
  for (int k = 0; k < 2; k++) {
    const Expr *x = e->kind == E_LIST ? e->args.a[k].val : e;
    if (!int_arg(c, x, arena_printf(c->a, "'%s'", what), &v[k]))
      return false;
    if (v[k] < lo || v[k] > IR_MAX_DIM) {
      diag_error(c->d, x->loc, "'%s' must be %s, not %lld", what,
                 lo ? "positive" : "non-negative", (long long)v[k]);
      return false;
    }
  }
  return true;
}

/* A tensor of rank 4: [N, C, H, W] or, as layout says, a weight's. */
static bool nchw(Ctx *c, const Expr *e, const char *what, const char *layout, const Inst *x) {
  char buf[128];
  if (x->type.dtype == DT_F32 && x->type.rank == 4)
    return true;
  diag_error(c->d, e->loc, "%s must be f32[%s], not %s", what, layout ? layout : "N, C, H, W",
             type_str(&x->type, buf, sizeof buf));
  return false;
}

/* conv2d(input, weight, bias, stride = 1, padding = 0, dilation = 1,
 * groups = 1): padding may also be "valid" (0) or "same" (stride 1, an
 * even dilated kernel span); bias f32[O] is added over each channel. */
Inst *lower_conv2d(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  int64_t st[2] = {1, 1}, pd[2] = {0, 0}, dl[2] = {1, 1}, groups = 1;
  if (!nchw(c, arg[0], "the input of 'conv2d'", NULL, in[0]) ||
      !nchw(c, arg[1], "the weight of 'conv2d'", "out, in / groups, kh, kw", in[1]))
    return NULL;
  if ((arg[3] && !pair_arg(c, arg[3], "stride", 1, st)) ||
      (arg[5] && !pair_arg(c, arg[5], "dilation", 1, dl)))
    return NULL;
  const Expr *p = arg[4];
  if (p && (p->kind == E_STR || (p->kind == E_IDENT && !lookup(c, p->s)))) {
    bool same = !strcmp(p->s, "same");
    if (!same && strcmp(p->s, "valid")) {
      diag_error(c->d, p->loc, "'padding' must be an int, a pair, \"valid\" or \"same\"");
      return NULL;
    }
    for (int d = 0; same && d < 2; d++) {
      int64_t span = dl[d] * (in[1]->type.dim[2 + d] - 1);
      if (st[d] != 1) {
        diag_error(c->d, p->loc, "padding \"same\" needs stride 1, not %lld", (long long)st[d]);
        return NULL;
      }
      if (span % 2) {
        diag_error(c->d, p->loc, "padding \"same\" of a kernel of even span (%lld along the "
                   "%s) pads one side more; write the padding with pad()", (long long)span + 1,
                   d ? "width" : "height");
        return NULL;
      }
      pd[d] = span / 2;
    }
  } else if (p && !pair_arg(c, p, "padding", 0, pd)) {
    return NULL;
  }
  if (arg[6] && !int_arg(c, arg[6], "'groups'", &groups))
    return NULL;
  Inst *i = ir_new(c->f, OP_conv2d, e->loc, 2, in);
  ir_set_ints(i, "stride", st, 2);
  ir_set_ints(i, "padding", pd, 2);
  ir_set_ints(i, "dilation", dl, 2);
  ir_set_int(i, "groups", groups);
  if (!(i = finish(c, i)) || !in[2])
    return i;
  const Type *bt = &in[2]->type;
  char buf[128];
  if (bt->dtype != DT_F32 || bt->rank != 1 || bt->dim[0] != i->type.dim[1]) {
    diag_error(c->d, arg[2]->loc, "the bias of 'conv2d' must be f32[%lld], one per output "
               "channel, not %s", (long long)i->type.dim[1], type_str(bt, buf, sizeof buf));
    return NULL;
  }
  Inst *r = ir_new(c->f, OP_reshape, e->loc, 1, &in[2]);
  ir_set_ints(r, "shape", (int64_t[]){bt->dim[0], 1, 1}, 3);
  return (r = finish(c, r)) ? op2(c, OP_add, e->loc, i, r) : NULL;
}

/* max_pool2d(input, kernel_size, stride = kernel_size, padding = 0,
 * dilation = 1, ceil_mode = false), avg_pool2d(input, kernel_size, stride,
 * padding, ceil_mode = false, count_include_pad = true, divisor_override =
 * none): the options at their defaults are left out of the IR. */
Inst *lower_pool2d(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Op op = b->op;
  Inst *x = in[0];
  int64_t k[2], st[2], pd[2] = {0, 0}, dl[2] = {1, 1}, div = 0;
  bool max = op == OP_max_pool2d, ceil = false, with_pad = true;
  const Expr *ceil_arg = arg[max ? 5 : 4], *div_arg = max ? NULL : arg[6];
  if (!nchw(c, arg[0], arena_printf(c->a, "the input of '%s'", ir_ops[op].name), NULL, x) ||
      !pair_arg(c, arg[1], "kernel_size", 1, k))
    return NULL;
  st[0] = k[0], st[1] = k[1];
  if ((arg[2] && !pair_arg(c, arg[2], "stride", 1, st)) ||
      (arg[3] && !pair_arg(c, arg[3], "padding", 0, pd)) ||
      (max && arg[4] && !pair_arg(c, arg[4], "dilation", 1, dl)) ||
      (ceil_arg && !bool_arg(c, ceil_arg, "ceil_mode", &ceil)) ||
      (!max && arg[5] && !bool_arg(c, arg[5], "count_include_pad", &with_pad)))
    return NULL;
  bool none =
      div_arg && div_arg->kind == E_IDENT && !strcmp(div_arg->s, "none") && !lookup(c, div_arg->s);
  if (div_arg && !none) {
    if (!int_arg(c, div_arg, "'divisor_override'", &div))
      return NULL;
    if (div < 1 || div > IR_MAX_DIM) {
      diag_error(c->d, div_arg->loc, "'divisor_override' must be positive, not %lld",
                 (long long)div);
      return NULL;
    }
  }
  Inst *i = ir_new(c->f, op, e->loc, 1, &x);
  ir_set_ints(i, "kernel", k, 2);
  ir_set_ints(i, "stride", st, 2);
  ir_set_ints(i, "padding", pd, 2);
  if (ceil)
    ir_set_int(i, "ceil_mode", 1);
  if (dl[0] != 1 || dl[1] != 1)
    ir_set_ints(i, "dilation", dl, 2);
  if (div)
    ir_set_int(i, "divisor_override", div);
  if (!with_pad)
    ir_set_int(i, "count_include_pad", 0);
  return finish(c, i);
}

/* The global of the buffer argument `what` of batch_norm names, updated by
 * no other call: the model's, or in a repeat the stacked one whose row the
 * body reads as an arg; NULL after reporting. */
static const char *bn_buffer(Ctx *c, const Expr *e, const char *what, const Inst *x) {
  Name *n = e->kind == E_IDENT ? lookup(c, e->s) : NULL;
  Ctx *o = owner(c);
  const char *global = NULL;
  for (int k = 0; n && n->buffer && n->global < 0 && k < o->stacked.n; k++)
    if (o->stacked.a[k].arg == n->val)
      global = o->stacked.a[k].global;
  if (n && n->buffer && n->global >= 0)
    global = c->m->global.a[n->global].name;
  char buf[128];
  if (!global) {
    diag_error(c->d, e->loc, "'%s' of 'batch_norm' must name a buffer (declared 'buffer NAME: "
               "f32[%lld]'), which the training step updates", what, (long long)x->type.dim[1]);
    return NULL;
  }
  const Type *t = &n->val->type;
  if (t->dtype != DT_F32 || t->rank != 1 || t->dim[0] != x->type.dim[1]) {
    char b2[128];
    diag_error(c->d, e->loc, "'%s' of 'batch_norm' must be f32[%lld], one per channel of %s, "
               "not %s", what, (long long)x->type.dim[1], type_str(&x->type, buf, sizeof buf),
               type_str(t, b2, sizeof b2));
    return NULL;
  }
  int line = 0;
  for (int k = 0; k < o->updates.n; k++)
    if (!strcmp(o->updates.a[k].global, global))
      line = o->updates.a[k].loc.line;
  for (int k = 0; k < c->f->inst.n; k++) {
    const Inst *s = c->f->inst.a[k];
    if (s->op == OP_store && !strcmp(ir_global_of(s)->name, global))
      line = s->loc.line;
  }
  if (line) {
    diag_error(c->d, e->loc, "buffer '%s' is already updated by the batch_norm on line %d; "
               "each batch_norm needs buffers of its own", e->s, line);
    return NULL;
  }
  n->updated = true;
  return global;
}

/* v reshaped to shape [dim, n] (v itself when that is its shape). */
Inst *reshaped(Ctx *c, Loc at, Inst *v, const int64_t *dim, int n) {
  if (v->type.rank == n && !memcmp(v->type.dim, dim, sizeof *dim * (size_t)n))
    return v;
  Inst *r = ir_new(c->f, OP_reshape, at, 1, &v);
  ir_set_ints(r, "shape", dim, n);
  return finish(c, r);
}

/* batch_norm(input, running_mean, running_var, weight, bias, momentum = 0.1,
 * eps = 1e-5), as torch.nn.functional's over every dim but 1: the batch's
 * mean and biased variance (mean reductions, partial sums under a batch
 * split) normalise in training and update the buffers, (1 - m) r + m s with
 * the unbiased variance; batch_stat lets evaluation read the buffers
 * instead. y = bn_scale(bn_center(x, mean), 1 / sqrt(var + eps)) weight +
 * bias, whose derivative with respect to x is the whole statistic's in one
 * rule (passes/autodiff.c). */
Inst *lower_batch_norm(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  char buf[128];
  Loc at = e->loc;
  if (x->type.dtype != DT_F32 || x->type.rank < 2) {
    diag_error(c->d, arg[0]->loc, "the input of 'batch_norm' must be f32[N, C, ...], not %s",
               type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  const Type *xt = &x->type;
  int64_t C = xt->dim[1], count = type_elems(xt) / C;
  const char *rm = bn_buffer(c, arg[1], "running_mean", x);
  const char *rv = rm ? bn_buffer(c, arg[2], "running_var", x) : NULL;
  if (!rv)
    return NULL;
  if (!strcmp(rm, rv)) {
    diag_error(c->d, arg[2]->loc, "'running_mean' and 'running_var' of 'batch_norm' name the "
               "same buffer");
    return NULL;
  }
  for (int k = 3; k < 5; k++) {
    const Type *t = in[k] ? &in[k]->type : NULL;
    if (t && (t->dtype != DT_F32 || t->rank != 1 || t->dim[0] != C)) {
      diag_error(c->d, arg[k]->loc, "the %s of 'batch_norm' must be f32[%lld], one per channel, "
                 "not %s", k == 3 ? "weight" : "bias", (long long)C, type_str(t, buf, sizeof buf));
      return NULL;
    }
  }
  double mom = 0.1, eps = 1e-5;
  if ((arg[5] && !real_in(c, arg[5], "momentum", &ir_unit, &mom)) ||
      (arg[6] && !real_in(c, arg[6], "eps", &ir_positive, &eps)))
    return NULL;
  if (count < 2 && !c->prog->single.file)   /* refused if the model trains */
    c->prog->single = arg[0]->loc, c->prog->single_type = *xt;
  int64_t axes[IR_MAX_RANK], stat[IR_MAX_RANK];
  int na = 0;
  for (int d = 0; d < xt->rank; d++) {
    stat[d] = d == 1 ? C : 1;
    if (d != 1)
      axes[na++] = d;
  }
  Inst *mu = ir_new(c->f, OP_mean, at, 1, &x);
  ir_set_ints(mu, "axes", axes, na);
  ir_set_int(mu, "keepdim", 1);
  if (!(mu = finish(c, mu)))
    return NULL;
  Inst *rmv = in[1], *rvv = in[2];
  Inst *ms = op2(c, OP_batch_stat, at, mu, reshaped(c, at, rmv, stat, xt->rank));
  Inst *xc = op2(c, OP_bn_center, at, x, ms);
  Inst *sq = xc ? op2(c, OP_mul, at, xc, xc) : NULL;
  Inst *var = sq ? ir_new(c->f, OP_mean, at, 1, &sq) : NULL;
  if (!var)
    return NULL;
  ir_set_ints(var, "axes", axes, na);
  ir_set_int(var, "keepdim", 1);
  if (!(var = finish(c, var)))
    return NULL;
  Inst *vs = op2(c, OP_batch_stat, at, var, reshaped(c, at, rvv, stat, xt->rank));
  Inst *r = op2(c, OP_div, at, constant(c, 1, at),
                op1(c, OP_sqrt, at, op2(c, OP_add, at, vs, constant(c, eps, at))));
  Inst *y = op2(c, OP_bn_scale, at, xc, r);
  int64_t cw[IR_MAX_RANK];   /* [C, 1, ...]: a per-channel vector against [N, C, ...] */
  for (int d = 1; d < xt->rank; d++)
    cw[d - 1] = d == 1 ? C : 1;
  if (in[3])
    y = op2(c, OP_mul, at, y, reshaped(c, at, in[3], cw, xt->rank - 1));
  if (in[4])
    y = op2(c, OP_add, at, y, reshaped(c, at, in[4], cw, xt->rank - 1));
  /* the running statistics: (1 - m) r + m s, the variance unbiased */
  const char *g[2] = {rm, rv};
  Inst *s[2] = {mu, var}, *run[2] = {rmv, rvv};
  double f[2] = {mom, count > 1 ? mom * (double)count / (double)(count - 1) : mom};
  for (int k = 0; k < 2; k++) {
    Inst *v = op2(c, OP_add, at, op2(c, OP_mul, at, constant(c, 1 - mom, at), run[k]),
                  op2(c, OP_mul, at, constant(c, f[k], at), reshaped(c, at, s[k], &C, 1)));
    if (!v)
      return NULL;
    update_buffer(c, g[k], v, at);
  }
  return y;
}

/* cross_entropy(logits, labels, ignore_index, label_smoothing) as
 * torch.nn.functional's: without either keyword the op cross_entropy (the
 * mean over every row); with one, the sum over the rows whose label is not
 * ignore_index (-100 unless given) over their count, each a partial sum
 * under a batch split, so the mean is over the kept rows of the whole batch
 * (0/0, NaN, when every label is ignored, as PyTorch gives). */
Inst *lower_cross_entropy(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  if (!arg[2] && !arg[3])
    return finish(c, ir_new(c->f, OP_cross_entropy, e->loc, 2, in));
  int64_t ignore = -100;
  double eps = 0;
  if (arg[2] && !int_arg(c, arg[2], "'ignore_index'", &ignore))
    return NULL;
  if (arg[2] && (ignore < INT32_MIN || ignore > INT32_MAX)) {
    diag_error(c->d, arg[2]->loc, "'ignore_index' must fit a label (i32), not %lld",
               (long long)ignore);
    return NULL;
  }
  if (arg[3] && !real_in(c, arg[3], "label_smoothing", &ir_unit, &eps))
    return NULL;
  Inst *sum = ir_new(c->f, OP_cross_entropy_sum, e->loc, 2, in);
  ir_set_int(sum, "ignore_index", ignore);
  ir_set_float(sum, "smoothing", eps);
  if (!(sum = finish(c, sum)))
    return NULL;
  Inst *count = ir_new(c->f, OP_label_count, e->loc, 1, &in[1]);
  ir_set_int(count, "ignore_index", ignore);
  if (!(count = finish(c, count)))
    return NULL;
  return finish(c, ir_make(c->f, OP_div, e->loc, 2, sum, count));
}

/* bce_with_logits(logits, target, pos_weight) as torch.nn.functional's
 * binary_cross_entropy_with_logits: without pos_weight the op; with it, the
 * mean of (1 - t) x + (1 + (w - 1) t) softplus(-x), which is the op plus the
 * mean of (w - 1) t softplus(-x). softplus(-x) = -log sigmoid(x) is taken as
 * -log_softmax([x/2, -x/2])[0], exact for any x and smooth at 0. */
Inst *lower_bce(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Loc at = e->loc;
  Inst *base = finish(c, ir_new(c->f, OP_bce_with_logits, at, 2, in));
  if (!base || !in[2])
    return base;
  Inst *x = in[0], *t = in[1];
  const Type *xt = &x->type;
  int64_t dim[IR_MAX_RANK + 1];
  int r = xt->rank;
  if (r == IR_MAX_RANK) {
    diag_error(c->d, at, "'pos_weight' needs logits of at most %d dimensions", IR_MAX_RANK - 1);
    return NULL;
  }
  const Type *wt0 = &in[2]->type;
  bool fits = wt0->rank <= r;
  for (int d = 0; fits && d < wt0->rank; d++) {
    int64_t w = wt0->dim[wt0->rank - 1 - d];
    fits = w == 1 || w == xt->dim[r - 1 - d];
  }
  if (!fits) {
    char a[128], b[128];
    diag_error(c->d, arg[2]->loc, "'pos_weight' of %s does not broadcast to the logits' %s",
               type_str(wt0, a, sizeof a), type_str(xt, b, sizeof b));
    return NULL;
  }
  memcpy(dim, xt->dim, sizeof(int64_t) * (size_t)r);
  dim[r] = 1;
  Inst *half = op2(c, OP_mul, at, reshaped(c, at, x, dim, r + 1), constant(c, 0.5, at));
  Inst *pair[2] = {half, half ? op1(c, OP_neg, at, half) : NULL};
  if (!pair[1])
    return NULL;
  Inst *v = ir_new(c->f, OP_concat, at, 2, pair);
  ir_set_int(v, "axis", r);
  if (!(v = finish(c, v)))
    return NULL;
  v = ir_new(c->f, OP_log_softmax, at, 1, &v);
  ir_set_int(v, "axis", r);
  if (!(v = finish(c, v)))
    return NULL;
  v = ir_new(c->f, OP_slice, at, 1, &v);
  ir_set_int(v, "axis", r);
  ir_set_int(v, "begin", 0);
  ir_set_int(v, "end", 1);
  Inst *logsig = finish(c, v);   /* log sigmoid(x), [..., 1] */
  Inst *w1 = op2(c, OP_sub, at, in[2], constant(c, 1, at));
  Inst *wt = w1 ? op2(c, OP_mul, at, w1, t) : NULL;
  Inst *ls0 = logsig ? reshaped(c, at, logsig, xt->dim, r) : NULL;
  Inst *term = wt && ls0 ? op2(c, OP_mul, at, wt, ls0) : NULL;
  if (!term)
    return NULL;
  int64_t axes[IR_MAX_RANK];
  for (int d = 0; d < r; d++)
    axes[d] = d;
  Inst *mean = ir_new(c->f, OP_mean, at, 1, &term);
  ir_set_ints(mean, "axes", axes, r);
  mean = finish(c, mean);
  return mean ? op2(c, OP_sub, at, base, mean) : NULL;
}

/* embedding_bag(input, weight, offsets, mode, per_sample_weights,
 * padding_idx) as torch.nn.functional's (include_last_offset false): input
 * [B, K], or [N] with offsets [B]; mode "mean" unless given;
 * per_sample_weights with "sum" only; a negative padding_idx counts from the
 * weight's end. The weight's global names the table in runtime errors. */
Inst *lower_embedding_bag(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  char buf[128];
  Inst *ops[4] = {in[0], in[1]};
  int n = 2, mode = DT_BAG_MEAN;
  const Type *xt = &in[0]->type, *wt = &in[1]->type;
  if (arg[3]) {
    const Expr *m = arg[3];
    mode = m->kind == E_STR || m->kind == E_IDENT
               ? dtrt_name_index(dtrt_bag_mode_names, DT_BAG_COUNT, m->s)
               : -1;
    if (mode < 0) {
      diag_error(c->d, m->loc, "'mode' must be \"sum\", \"mean\" or \"max\"");
      return NULL;
    }
  }
  if (in[2] && xt->rank == 2) {
    diag_error(c->d, arg[2]->loc, "'offsets' go with a 1-D input; input %s is 2-D, a bag per row",
               type_str(xt, buf, sizeof buf));
    return NULL;
  }
  if (!in[2] && xt->rank == 1) {
    diag_error(c->d, arg[0]->loc, "a 1-D input (%s) needs 'offsets'", type_str(xt, buf, sizeof buf));
    return NULL;
  }
  if (in[2])
    ops[n++] = in[2];
  if (arg[4]) {
    if (mode != DT_BAG_SUM) {
      diag_error(c->d, arg[4]->loc, "'per_sample_weights' need mode \"sum\", not \"%s\"",
                 dtrt_bag_mode_names[mode]);
      return NULL;
    }
    if (!(ops[n++] = lower_expr(c, arg[4])))
      return NULL;
  }
  int64_t pad = 0, rows = wt->rank == 2 ? wt->dim[0] : 0;
  if (arg[5] && !int_arg(c, arg[5], "'padding_idx'", &pad))
    return NULL;
  if (arg[5] && rows && (pad < -rows || pad >= rows)) {
    diag_error(c->d, arg[5]->loc, "'padding_idx' %lld is outside [-%lld, %lld), the weight's rows",
               (long long)pad, (long long)rows, (long long)rows);
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_embedding_bag, e->loc, n, ops);
  ir_set_int(i, "mode", mode);
  if (arg[5])
    ir_set_int(i, "padding_idx", pad < 0 ? pad + rows : pad);
  if (in[1]->op == OP_load)
    ir_set_str(i, "table", ir_get_str(in[1], "global", ""));
  return finish(c, i);
}

/* Checks attn_mask m (argument e) of attention over query q and key k:
 * f32 (added to the scores) or i32 (torch's bool: true, nonzero, takes
 * part), of rank at most 4, broadcasting right-aligned to [B, H, Tq, Tk]. */
static bool sdpa_mask(Ctx *c, const Expr *e, const Inst *m, const Inst *q, const Inst *k) {
  char b1[128];
  const Type *t = &m->type;
  if ((t->dtype != DT_F32 && t->dtype != DT_I32) || t->rank > 4) {
    diag_error(c->d, e->loc, "'attn_mask' must be f32 (added to the scores) or i32 (a bool "
               "mask: nonzero takes part) of rank at most 4, got %s", type_str(t, b1, sizeof b1));
    return false;
  }
  if (q->type.rank != 4 || k->type.rank != 4)
    return true;   /* the op's shape rule reports it */
  int64_t full[4] = {q->type.dim[0], q->type.dim[1], q->type.dim[2], k->type.dim[2]};
  for (int d = 0; d < t->rank; d++) {
    int64_t want = full[4 - t->rank + d];
    if (t->dim[d] != 1 && t->dim[d] != want) {
      diag_error(c->d, e->loc, "'attn_mask' %s does not broadcast to the scores [%lld, %lld, "
                 "%lld, %lld]: its dim %d is neither 1 nor %lld", type_str(t, b1, sizeof b1),
                 (long long)full[0], (long long)full[1], (long long)full[2], (long long)full[3],
                 d, (long long)want);
      return false;
    }
  }
  return true;
}

/* scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
 * is_causal, scale, *, seed) as torch.nn.functional's, on [B, H, T, D]: the
 * op sdpa (by blocks, no [Tq, Tk] scores kept); scale defaults to 1/sqrt(D).
 * attn_mask f32 is added to the scores, i32 keeps those where it is nonzero
 * (torch's bool mask); as torch, not with is_causal. dropout_p drops
 * attention probabilities with a mask drawn as dropout's on the whole
 * [B, H, Tq, Tk], the seed from the call's place unless given. */
Inst *lower_sdpa(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  bool causal = false;
  double p = 0, scale = 1 / sqrt((double)in[0]->type.dim[in[0]->type.rank ? in[0]->type.rank - 1 : 0]);
  int64_t seed = (int64_t)e->loc.line << 16 | (e->loc.col & 0xffff);
  if (c->path[0])   /* each application of a block draws its own masks */
    seed ^= (int64_t)(ir_hash(c->path, strlen(c->path)) & 0xffffffff00000000u);
  if (arg[3] && !sdpa_mask(c, arg[3], in[3], in[0], in[1]))
    return NULL;
  if ((arg[4] && !real_in(c, arg[4], "dropout_p", &ir_unit_open, &p)) ||
      (arg[5] && !bool_arg(c, arg[5], "is_causal", &causal)) ||
      (arg[6] && !float_arg(c, arg[6], "'scale'", &scale)) ||
      (arg[7] && !int_arg(c, arg[7], "'seed'", &seed)))
    return NULL;
  if (arg[3] && causal) {
    diag_error(c->d, arg[3]->loc, "'attn_mask' cannot be given with is_causal = true (as torch)");
    return NULL;
  }
  Inst *i = ir_new(c->f, OP_sdpa, e->loc, arg[3] ? 4 : 3, in);
  if (causal)
    ir_set_int(i, "causal", 1);
  ir_set_float(i, "scale", scale);
  if (p > 0) {
    ir_set_float(i, "p", p);
    ir_set_int(i, "seed", seed);
  }
  return finish(c, i);
}

/* A reduction op of x over axes[0..n), keeping them as 1 when keep. */
static Inst *reduce(Ctx *c, Loc at, Op op, Inst *x, const int64_t *axes, int n, bool keep) {
  Inst *i = ir_new(c->f, op, at, 1, &x);
  ir_set_ints(i, "axes", axes, n);
  if (keep)
    ir_set_int(i, "keepdim", 1);
  return finish(c, i);
}

/* var, std(input, dim, unbiased = true, keepdim = false, correction) as
 * torch's: over `dim` (an int or a list; none: every dim) the sum of the
 * squared deviations from the mean over max(0, N - correction), correction
 * 1 when unbiased, else 0 (torch's NaN or inf where that is 0); std its
 * square root. */
Inst *lower_var(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Inst *x = in[0];
  int64_t axes[IR_MAX_RANK], corr = 1;
  int n;
  bool unbiased = true, keep = false;
  if (!reduce_axes(c, NULL, NULL, arg[1], x, axes, &n) ||
      (arg[2] && !bool_arg(c, arg[2], "unbiased", &unbiased)) ||
      (arg[3] && !bool_arg(c, arg[3], "keepdim", &keep)))
    return NULL;
  if (arg[2] && arg[4]) {
    diag_error(c->d, arg[4]->loc, "give 'unbiased' or 'correction', not both");
    return NULL;
  }
  if (arg[4] && !int_arg(c, arg[4], "'correction'", &corr))
    return NULL;
  if (arg[4] && corr < 0) {
    diag_error(c->d, arg[4]->loc, "'correction' must be 0 or more, not %lld", (long long)corr);
    return NULL;
  }
  if (!arg[4])
    corr = unbiased;
  int64_t count = 1;
  for (int k = 0; k < n; k++)
    count *= x->type.dim[axes[k]];
  Loc at = e->loc;
  Inst *m = reduce(c, at, OP_mean, x, axes, n, true);
  Inst *d = m ? op2(c, OP_sub, at, x, m) : NULL;
  Inst *sq = d ? op2(c, OP_mul, at, d, d) : NULL;
  Inst *s = sq ? reduce(c, at, OP_sum, sq, axes, n, keep) : NULL;
  Inst *v = s ? op2(c, OP_div, at, s, constant(c, (double)(count > corr ? count - corr : 0), at))
              : NULL;
  return v && !strcmp(b->name, "std") ? op1(c, OP_sqrt, at, v) : v;
}

/* rms_norm(input, normalized_shape, weight, eps) as torch's (2.4): over the
 * trailing dims normalized_shape names (an int or a list), x / sqrt(mean(x^2)
 * + eps), times weight (of normalized_shape) when given; eps defaults to
 * float32's machine epsilon, 2^-23, as torch's None. */
Inst *lower_rms_norm(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Inst *x = in[0];
  if (arg[2] && (!(in[2] = lower_expr(c, arg[2])) ||   /* after normalized_shape, a list */
                 !f32_arg(c, b->name, "'weight'", arg[2], in[2])))
    return NULL;
  int64_t shape[IR_MAX_RANK], axes[IR_MAX_RANK];
  int n = 1, r = x->type.rank;
  double eps = FLT_EPSILON;
  char buf[128];
  if (arg[1]->kind == E_LIST ? !ints_arg(c, arg[1], "normalized_shape", shape, &n)
                             : !int_arg(c, arg[1], "'normalized_shape'", &shape[0]))
    return NULL;
  bool fits = n >= 1 && n <= r;
  for (int k = 0; fits && k < n; k++)
    fits = shape[k] == x->type.dim[r - n + k];
  if (!fits) {
    diag_error(c->d, arg[1]->loc, "'normalized_shape' must be the trailing dims of the input %s",
               type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if (arg[3] && !real_in(c, arg[3], "eps", &ir_positive, &eps))
    return NULL;
  if (in[2] && (in[2]->type.rank != n ||
                memcmp(in[2]->type.dim, shape, sizeof(int64_t) * (size_t)n))) {
    diag_error(c->d, arg[2]->loc, "'weight' must have the normalized_shape, not %s",
               type_str(&in[2]->type, buf, sizeof buf));
    return NULL;
  }
  for (int k = 0; k < n; k++)
    axes[k] = r - n + k;
  Loc at = e->loc;
  Inst *sq = op2(c, OP_mul, at, x, x);
  Inst *ms = sq ? reduce(c, at, OP_mean, sq, axes, n, true) : NULL;
  Inst *den = ms ? op2(c, OP_add, at, ms, constant(c, eps, at)) : NULL;
  Inst *y = den && (den = op1(c, OP_sqrt, at, den)) ? op2(c, OP_div, at, x, den) : NULL;
  return y && in[2] ? op2(c, OP_mul, at, y, in[2]) : y;
}
