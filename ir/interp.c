/* interp.c: the reference interpreter. Runs a function one op at a time on
 * host buffers: elementwise ops through ir_elem_eval, the others through the
 * libdtrt kernels, so it checks the IR's meaning, not the code generator's. */
#include <stdlib.h>
#include <string.h>

#include "interp_int.h"

typedef DtStatus (*Kernel)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

static const Kernel kernels[OP_COUNT] = {
  [OP_sum] = dtrt_k_sum,
  [OP_fold] = dtrt_k_fold,
  [OP_mean] = dtrt_k_mean,
  [OP_sum_mul] = dtrt_k_sum_mul,
  [OP_mean_mul] = dtrt_k_mean_mul,
  [OP_max] = dtrt_k_max,
  [OP_max_grad] = dtrt_k_max_grad,
  [OP_matmul] = dtrt_k_matmul,
  [OP_softmax] = dtrt_k_softmax,
  [OP_log_softmax] = dtrt_k_log_softmax,
  [OP_softmax_grad] = dtrt_k_softmax_grad,
  [OP_log_softmax_grad] = dtrt_k_log_softmax_grad,
  [OP_cross_entropy] = dtrt_k_cross_entropy,
  [OP_cross_entropy_grad] = dtrt_k_cross_entropy_grad,
  [OP_mse] = dtrt_k_mse,
  [OP_cross_entropy_sum] = dtrt_k_cross_entropy_sum,
  [OP_cross_entropy_sum_grad] = dtrt_k_cross_entropy_sum_grad,
  [OP_label_count] = dtrt_k_label_count,
  [OP_bce_with_logits] = dtrt_k_bce_with_logits,
  [OP_bce_with_logits_grad] = dtrt_k_bce_with_logits_grad,
  [OP_normalize] = dtrt_k_normalize,
  [OP_normalize_grad] = dtrt_k_normalize_grad,
  [OP_embedding] = dtrt_k_embedding,
  [OP_embedding_grad] = dtrt_k_embedding_grad,
  [OP_embedding_bag] = dtrt_k_embedding_bag,
  [OP_embedding_bag_grad] = dtrt_k_embedding_bag_grad,
  [OP_embedding_bag_psw_grad] = dtrt_k_embedding_bag_psw_grad,
  [OP_demo_compress] = dtrt_k_demo_compress,
  [OP_demo_residual] = dtrt_k_demo_residual,
  [OP_demo_sign] = dtrt_k_demo_sign,
  [OP_sparse_rows] = dtrt_k_sparse_rows,
  [OP_sparse_values] = dtrt_k_sparse_values,
  [OP_sparse_sgd] = dtrt_k_sparse_sgd,
  [OP_sparse_adagrad_sum] = dtrt_k_sparse_adagrad_sum,
  [OP_sparse_adagrad] = dtrt_k_sparse_adagrad,
  [OP_sparse_moment] = dtrt_k_sparse_moment,
  [OP_sparse_adam] = dtrt_k_sparse_adam,
  [OP_dropout] = dtrt_k_dropout,
  [OP_dropout_grad] = dtrt_k_dropout_grad,
  [OP_causal_mask] = dtrt_k_causal_mask,
  [OP_sdpa] = dtrt_k_sdpa,
  [OP_sdpa_lse] = dtrt_k_sdpa_lse,
  [OP_sdpa_grad] = dtrt_k_sdpa_grad,
  [OP_sdpa_dmask] = dtrt_k_sdpa_dmask,
  [OP_ring_sdpa] = dtrt_k_ring_sdpa,
  [OP_ring_sdpa_lse] = dtrt_k_ring_sdpa_lse,
  [OP_ring_sdpa_grad] = dtrt_k_ring_sdpa_grad,
  [OP_conv2d] = dtrt_k_conv2d,
  [OP_conv2d_grad_input] = dtrt_k_conv2d_grad_input,
  [OP_conv2d_grad_weight] = dtrt_k_conv2d_grad_weight,
  [OP_max_pool2d] = dtrt_k_max_pool2d,
  [OP_max_pool2d_grad] = dtrt_k_max_pool2d_grad,
  [OP_avg_pool2d] = dtrt_k_avg_pool2d,
  [OP_avg_pool2d_grad] = dtrt_k_avg_pool2d_grad,
  [OP_reshape] = dtrt_k_reshape,
  [OP_transpose] = dtrt_k_transpose,
  [OP_slice] = dtrt_k_slice,
  [OP_pad] = dtrt_k_pad,
  [OP_pad_reflect] = dtrt_k_pad_reflect,
  [OP_pad_replicate] = dtrt_k_pad_replicate,
  [OP_pad_circular] = dtrt_k_pad_circular,
  [OP_pad_reflect_grad] = dtrt_k_pad_reflect_grad,
  [OP_pad_replicate_grad] = dtrt_k_pad_replicate_grad,
  [OP_pad_circular_grad] = dtrt_k_pad_circular_grad,
  [OP_concat] = dtrt_k_concat,
  [OP_broadcast] = dtrt_k_broadcast,
  [OP_int_elem] = dtrt_k_int_elem,
  [OP_to_f32] = dtrt_k_to_f32,
  [OP_int_where] = dtrt_k_int_where,
  [OP_gather] = dtrt_k_gather,
  [OP_gather_grad] = dtrt_k_gather_grad,
  [OP_one_hot] = dtrt_k_one_hot,
  [OP_arange] = dtrt_k_arange,
  [OP_cumsum] = dtrt_k_cumsum,
  [OP_tril] = dtrt_k_tril,
  [OP_triu] = dtrt_k_triu,
};


void *interp_zalloc(int64_t elems) {
  void *p = calloc((size_t)(elems > 0 ? elems : 1), 4);
  DTC_ASSERT(p);
  return p;
}

/* Globals added to the module since the last call (autodiff adds state) get
 * zeroed buffers. */
static void sync_globals(Interp *it) {
  int n = it->m->global.n;
  if (n <= it->nbuf)
    return;
  it->buf = realloc(it->buf, sizeof *it->buf * (size_t)n);
  DTC_ASSERT(it->buf);
  for (int k = it->nbuf; k < n; k++) {
    Type t = ir_global_type_on(it->m, &it->m->global.a[k], it->device);
    it->buf[k] = interp_zalloc(type_elems(&t));
  }
  it->nbuf = n;
}

/* Elements of global k as this interpreter holds it. */
static int64_t global_elems(const Interp *it, int k) {
  Type t = ir_global_type_on(it->m, &it->m->global.a[k], it->device);
  return type_elems(&t);
}

Interp *interp_new(Module *m) { return interp_new_device(m, -1); }

Interp *interp_new_device(Module *m, int device) {
  for (int k = 0; k < OP_COUNT; k++)
    DTC_ASSERT(ir_ops[k].kind == K_ELEM || ir_ops[k].kind == K_META || ir_ops[k].kind == K_CALL ||
               ir_ops[k].kind == K_COMM || kernels[k]);
  Interp *it = calloc(1, sizeof *it);
  DTC_ASSERT(it);
  it->m = m;
  it->device = device;
  it->ctx = dtrt_ctx_new();
  DTC_ASSERT(it->ctx);
  sync_globals(it);
  return it;
}

void interp_free(Interp *it) {
  if (!it)
    return;
  for (int k = 0; k < it->nbuf; k++)
    free(it->buf[k]);
  free(it->buf);
  dtrt_ctx_free(it->ctx);
  free(it);
}

static int global_index(Interp *it, const char *name) {
  sync_globals(it);
  const Global *g = ir_find_global(it->m, name);
  return g ? (int)(g - it->m->global.a) : -1;
}

void *interp_global(Interp *it, const char *name) {
  int k = global_index(it, name);
  return k < 0 ? NULL : it->buf[k];
}

bool interp_set_global(Interp *it, const char *name, const void *data) {
  int k = global_index(it, name);
  if (k < 0)
    return false;
  memcpy(it->buf[k], data, (size_t)global_elems(it, k) * 4);
  return true;
}

int64_t interp_step(const Interp *it) { return it->step; }
void interp_set_step(Interp *it, int64_t step) { it->step = step; }
const char *interp_error(const Interp *it) { return it->err; }

static void push_i(DtAttrs *a, int64_t v) {
  DTC_ASSERT(a->ni < COUNTOF(a->i));
  a->i[a->ni++] = v;
}

static void push_f(DtAttrs *a, double v) {
  DTC_ASSERT(a->nf < COUNTOF(a->f));
  a->f[a->nf++] = v;
}

void ir_kernel_attrs(const Inst *inst, DtAttrs *a) {
  memset(a, 0, sizeof *a);
  int skip_i = 0, skip_f = 0;   /* absent optional ones, pending */
  for (const char *s = ir_ops[inst->op].attrs; *s;) {
    const char *colon = strchr(s, ':'), *end = strchr(s, ',');
    if (!end)
      end = s + strlen(s);
    char name[32];
    DTC_ASSERT(colon && colon < end && colon - s < (long)sizeof name);
    memcpy(name, s, (size_t)(colon - s));
    name[colon - s] = 0;
    bool isf = !strncmp(colon + 1, "float", 5),
         isi = !strncmp(colon + 1, "int", 3) || !strncmp(colon + 1, "flag", 4);
    const Attr *at = ir_attr(inst, name);
    if (!at) {
      skip_i += isi;
      skip_f += isf;
    } else if (isi) {
      for (; skip_i; skip_i--)
        push_i(a, 0);
      if (at->kind == A_INTS)
        for (int k = 0; k < at->n; k++)
          push_i(a, at->ints[k]);
      else
        push_i(a, at->i);
    } else if (isf) {
      for (; skip_f; skip_f--)
        push_f(a, 0);
      push_f(a, at->kind == A_FLOAT ? at->f : (double)at->i);
    } else if (at->kind == A_STR) {
      a->s = at->s;
    }
    s = *end ? end + 1 : end;
  }
}

static DtTensor tensor(void *data, const Type *t) {
  DtTensor r = {.data = data, .dtype = t->dtype == DT_I32 ? DTRT_I32 : DTRT_F32, .rank = t->rank};
  for (int d = 0; d < t->rank; d++)
    r.dim[d] = t->dim[d];
  return r;
}

int64_t ir_staged_bytes(const Module *m, const Inst *x) {
  static const struct { int op; DtStaged k; } staged[] = {
    {OP_all_reduce, DT_STAGED_ALL_REDUCE}, {OP_all_gather, DT_STAGED_ALL_GATHER},
    {OP_reduce_scatter, DT_STAGED_REDUCE_SCATTER}, {OP_all_to_all, DT_STAGED_ALL_TO_ALL},
    {OP_shard_slice, DT_STAGED_SHARD_SLICE}, {OP_sum, DT_STAGED_SUM}, {OP_mean, DT_STAGED_SUM},
    {OP_sum_mul, DT_STAGED_SUM}, {OP_mean_mul, DT_STAGED_SUM},
    {OP_max_grad, DT_STAGED_MAX_GRAD}, {OP_cross_entropy, DT_STAGED_CROSS_ENTROPY},
    {OP_embedding_bag_grad, DT_STAGED_BAG_GRAD}, {OP_demo_compress, DT_STAGED_DEMO},
    {OP_demo_residual, DT_STAGED_DEMO}, {OP_demo_sign, DT_STAGED_DEMO}, {OP_sparse_sgd, DT_STAGED_SPARSE},
    {OP_sparse_adagrad_sum, DT_STAGED_SPARSE}, {OP_sparse_adagrad, DT_STAGED_SPARSE},
    {OP_sparse_moment, DT_STAGED_SPARSE}, {OP_sparse_adam, DT_STAGED_SPARSE_ROWS},
    {OP_ring_sdpa, DT_STAGED_RING}, {OP_ring_sdpa_lse, DT_STAGED_RING},
    {OP_ring_sdpa_grad, DT_STAGED_RING}};
  int k = 0, n = (int)(sizeof staged / sizeof staged[0]);
  while (k < n && staged[k].op != (int)x->op)
    k++;
  if (k == n || x->nin > 16)
    return 0;
  DtTensor in[16], out = tensor(NULL, &x->type);
  for (int j = 0; j < x->nin; j++)
    in[j] = tensor(NULL, &x->in[j]->type);
  DtAttrs a;
  ir_kernel_attrs(x, &a);
  int p = 1;
  if (ir_ops[x->op].kind == K_COMM || staged[k].k == DT_STAGED_RING) {
    int64_t axis = ir_get_int(x, "axis", 0);
    p = m->mesh.n && axis >= 0 && axis < m->mesh.a[0].naxis ? m->mesh.a[0].axis_size[axis] : 1;
  }
  return dtrt_staged_bytes(staged[k].k, in, x->nin, &out, &a, p);
}

/* Strides of operand type x read as the broadcast result type y (0 where x
 * is broadcast). */
static void bstrides(const Type *x, const Type *y, int64_t *st) {
  int lead = y->rank - x->rank;
  int64_t s = 1;
  for (int d = y->rank - 1; d >= 0; d--) {
    int dx = d - lead;
    st[d] = dx >= 0 && x->dim[dx] != 1 ? s : 0;
    if (dx >= 0)
      s *= x->dim[dx];
  }
}

static void elementwise(const Inst *inst, float *out, float *const *in) {
  const Type *t = &inst->type;
  int64_t st[2][IR_MAX_RANK], idx[IR_MAX_RANK] = {0}, pos[2] = {0, 0};
  for (int k = 0; k < inst->nin; k++)
    bstrides(&inst->in[k]->type, t, st[k]);
  int64_t n = type_elems(t);
  for (int64_t e = 0; e < n; e++) {
    out[e] = ir_elem_eval(inst, in[0][pos[0]], inst->nin > 1 ? in[1][pos[1]] : 0);
    for (int d = t->rank - 1; d >= 0; d--) {
      for (int k = 0; k < inst->nin; k++)
        pos[k] += st[k][d];
      if (++idx[d] < t->dim[d])
        break;
      for (int k = 0; k < inst->nin; k++)
        pos[k] -= st[k][d] * t->dim[d];
      idx[d] = 0;
    }
  }
}

static size_t value_bytes(const Type *t) { return (size_t)type_elems(t) * 4; }

/* A loop under way (docs/IR.md, "Loops"): iteration s of n (counted from the
 * first to run) is in `run` while `running`. out[k] is loop output k: a
 * carried value as the last iteration left it, a stacked one filled row by
 * row; next[k] is where the iteration writes output k (a carry's second
 * buffer, a row of a stacked output), cur[k] what it reads as arg k. */
struct Loop {
  const Inst *r;
  Func *body;
  int64_t n, carry, s, step;
  int nout;
  void **out, **cur, **next;
  Run run;
  bool running;
};

static Loop *loop_begin(Interp *it, const Inst *r) {
  Loop *L = calloc(1, sizeof *L);
  DTC_ASSERT(L);
  L->r = r;
  L->body = ir_repeat_body(r);
  L->n = ir_get_int(r, "n", 1);
  L->carry = ir_get_int(r, "carry", 1);
  L->step = it->step;
  L->nout = ir_func_noutputs(L->body);
  L->out = calloc((size_t)L->nout + 1, sizeof *L->out);
  L->cur = calloc((size_t)r->nin + 1, sizeof *L->cur);
  L->next = calloc((size_t)L->nout + 1, sizeof *L->next);
  DTC_ASSERT(L->out && L->cur && L->next);
  for (int k = 0; k < L->nout; k++) {
    Type t;
    DTC_ASSERT(ir_repeat_out_type(r, k, &t));
    L->out[k] = interp_zalloc(type_elems(&t));
    if (k < L->carry)
      L->next[k] = interp_zalloc(type_elems(&t));
  }
  return L;
}

static void loop_free(Loop *L) {
  if (!L)
    return;
  if (L->running)
    interp_end(&L->run, false);
  for (int k = 0; k < L->nout; k++) {
    free(L->out[k]);
    if (k < L->carry)
      free(L->next[k]);
  }
  free(L->out);
  free(L->cur);
  free(L->next);
  free(L);
}

/* Runs p's loop on: 1 when it has ended, 0 when its body stands at a
 * collective (the next call resumes it there), -1 on a failure. */
static int loop_run(Run *p) {
  Loop *L = p->loop;
  Interp *it = p->it;
  const Inst *r = L->r;
  while (L->s < L->n) {
    int64_t i = ir_get_int(r, "reverse", 0) ? L->n - 1 - L->s : L->s;
    it->step = ir_loop_step(L->step, ir_get_int(r, "first", 0) + i);
    if (!L->running) {
      for (int k = 0; k < r->nin; k++) {
        char *x = p->val[r->in[k]->id];
        int kind = ir_repeat_operand_kind(r, k);
        L->cur[k] = kind == 0 ? (L->s ? L->out[k] : x)
                    : kind == 1 ? x
                                : x + (size_t)i * value_bytes(&r->in[k]->type) / (size_t)L->n;
      }
      for (int k = (int)L->carry; k < L->nout; k++) {
        Type t;
        ir_repeat_out_type(r, k, &t);
        L->next[k] = (char *)L->out[k] + (size_t)i * value_bytes(&t) / (size_t)L->n;
      }
      interp_begin(&L->run, it, L->body, L->next);
      L->run.args = L->cur;
      L->running = true;
    }
    if (!interp_to_comm(&L->run)) {
      it->step = L->step;
      return -1;
    }
    if (L->run.pc < L->body->inst.n)
      return 0;
    interp_end(&L->run, true);
    L->running = false;
    for (int k = 0; k < L->carry; k++) {   /* the new carries become the current ones */
      void *t = L->out[k];
      L->out[k] = L->next[k];
      L->next[k] = t;
    }
    L->s++;
  }
  it->step = L->step;
  return 1;
}

/* The loop's outputs become the values of the repeat and its repeat_outs. */
static void loop_end(Run *p) {
  Loop *L = p->loop;
  const Inst *r = L->r;
  const Func *f = p->f;
  void **taken = calloc((size_t)L->nout + 1, sizeof *taken);
  DTC_ASSERT(taken);
  p->val[r->id] = taken[0] = L->out[0];
  L->out[0] = NULL;
  for (int j = r->id + 1; j < f->inst.n; j++) {
    const Inst *x = f->inst.a[j];
    if (x->op != OP_repeat_out || x->in[0] != r)
      continue;
    int64_t k = ir_get_int(x, "index", 0);
    if (!taken[k]) {
      p->val[x->id] = taken[k] = L->out[k];
      L->out[k] = NULL;
    } else {   /* a second repeat_out of the same output */
      p->val[x->id] = interp_zalloc(type_elems(&x->type));
      memcpy(p->val[x->id], taken[k], value_bytes(&x->type));
    }
  }
  free(taken);
  p->loop = NULL;
  loop_free(L);
}

/* Evaluates inst into val[inst->id]; false with it->err set on a kernel error. */
static bool eval(Interp *it, const Inst *inst, void **val, void *const *args,
                 void *const *outputs, int *nout, bool *stored) {
  size_t bytes = (size_t)type_elems(&inst->type) * 4;
  const Global *g;
  switch (inst->op) {
  case OP_arg:
    val[inst->id] = interp_zalloc(type_elems(&inst->type));
    memcpy(val[inst->id], args[ir_get_int(inst, "index", 0)], bytes);
    return true;
  case OP_repeat:   /* run by interp_to_comm, which may stop inside */
    DTC_UNREACHABLE();
  case OP_repeat_out:
    DTC_ASSERT(val[inst->id]);   /* made by its repeat */
    return true;
  case OP_load:
    g = ir_find_global(it->m, ir_get_str(inst, "global", ""));
    val[inst->id] = interp_zalloc(type_elems(&inst->type));
    memcpy(val[inst->id], it->buf[g - it->m->global.a], bytes);
    return true;
  case OP_store:
    g = ir_find_global(it->m, ir_get_str(inst, "global", ""));
    memcpy(it->buf[g - it->m->global.a], val[inst->in[0]->id],
           (size_t)type_elems(&inst->in[0]->type) * 4);
    *stored = true;
    return true;
  case OP_output:
    if (outputs && outputs[*nout])
      memcpy(outputs[*nout], val[inst->in[0]->id], (size_t)type_elems(&inst->in[0]->type) * 4);
    ++*nout;
    return true;
  default:
    break;
  }
  float *out = interp_zalloc(type_elems(&inst->type));
  val[inst->id] = out;
  if (inst->op == OP_const) {
    *out = (float)ir_get_float(inst, "value", 0);
  } else if (inst->op == OP_batch_stat) {   /* before the eval pass: training's */
    memcpy(out, val[inst->in[0]->id], bytes);
  } else if (inst->op == OP_lr) {
    /* with accumulate K, update s / K on the calls that end a window of K */
    int64_t k = ir_get_int(inst, "accumulate", 1), s = it->step < 0 ? 0 : it->step, u = s / k;
    *out = dtrt_lr(ir_schedule(inst),
                   ir_get_float(inst, "base", 0), ir_get_int(inst, "warmup", 0),
                   ir_get_int(inst, "total", 0), ir_get_float(inst, "arg", 0),
                   ir_get_float(inst, "beta1", 0),
                   ir_get_float(inst, "beta2", 0), u);
    if (ir_attr(inst, "first") && u == 0)
      *out = (float)ir_get_float(inst, "first", 0);
    if (s % k != k - 1)
      *out = (float)ir_get_float(inst, "idle", 0);
  } else if (ir_ops[inst->op].kind == K_ELEM) {
    float *in[2] = {val[inst->in[0]->id], inst->nin > 1 ? val[inst->in[1]->id] : NULL};
    elementwise(inst, out, in);
  } else if (!kernels[inst->op]) {
    snprintf(it->err, sizeof it->err, "%s: the interpreter runs global functions only",
             ir_ops[inst->op].name);
    return false;
  } else {
    DtTensor in[16];
    for (int k = 0; k < inst->nin; k++)
      in[k] = tensor(val[inst->in[k]->id], &inst->in[k]->type);
    DtTensor o = tensor(out, &inst->type);
    DtAttrs a;
    ir_kernel_attrs(inst, &a);
    a.step = it->step;
    uint32_t cut = 0;
    for (int k = 0; k < inst->nin; k++)
      cut |= (ir_piece_rows(inst, k) > 0) << k;
    DtStatus s = cut ? dtrt_pieces(it->ctx, kernels[inst->op], in, inst->nin, &o, &a, cut)
                     : kernels[inst->op](it->ctx, in, inst->nin, &o, &a);
    if (s) {   /* the op's name before the kernel's message, unless it starts so */
      const char *name = ir_ops[inst->op].name, *msg = dtrt_errmsg(it->ctx);
      size_t n = strlen(name);
      if (!strncmp(msg, name, n) && msg[n] == ':')
        snprintf(it->err, sizeof it->err, "%s", msg);
      else
        snprintf(it->err, sizeof it->err, "%s: %s", name, msg);
      return false;
    }
  }
  return true;
}

void interp_begin(Run *r, Interp *it, Func *f, void *const *outputs) {
  sync_globals(it);
  ir_renumber(f);
  *r = (Run){.it = it, .f = f, .outputs = outputs};
  r->val = calloc((size_t)f->inst.n + 1, sizeof *r->val);
  DTC_ASSERT(r->val);
}

/* Evaluates up to the end or the next collective, in f or in a loop's body. */
bool interp_to_comm(Run *r) {
  for (; r->pc < r->f->inst.n; r->pc++) {
    const Inst *i = r->f->inst.a[r->pc];
    if (ir_ops[i->op].kind == K_COMM)
      return true;
    if (i->op == OP_repeat) {
      if (!r->loop)
        r->loop = loop_begin(r->it, i);
      int st = loop_run(r);
      if (st <= 0)
        return st == 0;
      loop_end(r);
      continue;
    }
    if (!eval(r->it, i, r->val, r->args, r->outputs, &r->nout, &r->stored))
      return false;
  }
  return true;
}

Run *interp_innermost(Run *r) {
  while (r->loop && r->loop->running)
    r = &r->loop->run;
  return r;
}

void interp_end(Run *r, bool ok) {
  loop_free(r->loop);
  r->loop = NULL;
  for (int k = 0; k < r->f->inst.n; k++)
    free(r->val[k]);
  free(r->val);
  if (ok && r->stored)
    r->it->step++;
}

bool interp_run(Interp *it, const char *func, void *const *outputs) {
  Func *f = ir_find_func(it->m, func);
  if (!f) {
    snprintf(it->err, sizeof it->err, "no function @%s", func);
    return false;
  }
  Run r;
  interp_begin(&r, it, f, outputs);
  bool ok = interp_to_comm(&r);
  const Run *at = interp_innermost(&r);
  if (ok && at->pc < at->f->inst.n) {
    snprintf(it->err, sizeof it->err, "%s: the interpreter runs global functions only",
             ir_ops[at->f->inst.a[at->pc]->op].name);
    ok = false;
  }
  interp_end(&r, ok);
  return ok;
}

