/* shape.c: type inference, one shape_<op> rule per op of ops.def. A rule sets
 * inst->type from its operands and attributes, or explains a user error. */
#include <math.h>
#include <string.h>

#include "ir.h"

#define FAIL(...) return snprintf(err, errlen, __VA_ARGS__), false
#define IN(k) (&inst->in[k]->type)
#define NAME (ir_ops[inst->op].name)

static const char *ts(const Type *t, char buf[static 128]) { return type_str(t, buf, 128); }

/* Whether inst may have empty dimensions: in a device's copy, whose blocks
 * of a table-wise table's values are empty on the devices not holding it
 * (ir_placed). */
static bool may_be_empty(const Inst *inst) { return inst->fn && inst->fn->device >= 0; }

/* Checks dimension and element-count limits on the result. */
static bool check_out(Inst *inst, char *err, size_t errlen) {
  Type *t = &inst->type;
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) {
    if (t->dim[d] < 1 && !(t->dim[d] == 0 && may_be_empty(inst)))
      FAIL("'%s' yields dimension %d of size %lld; sizes must be positive", NAME, d,
           (long long)t->dim[d]);
    if (t->dim[d] > IR_MAX_DIM || (t->dim[d] && n > IR_MAX_ELEMS / t->dim[d]))
      FAIL("'%s' yields a tensor too large (more than %lld elements)", NAME,
           (long long)IR_MAX_ELEMS);
    n *= t->dim[d];
  }
  return true;
}

static bool need_f32(Inst *inst, int k, char *err, size_t errlen) {
  char b[128];
  if (IN(k)->dtype != DT_F32)
    FAIL("operand %d of '%s' must be f32, got %s", k + 1, NAME, ts(IN(k), b));
  return true;
}

static bool same_type(Inst *inst, int a, int b, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!type_eq(IN(a), IN(b)))
    FAIL("operands of '%s' must have the same type: %s and %s", NAME, ts(IN(a), b1), ts(IN(b), b2));
  return true;
}

/* Normalises an axis that may count from the end; false when out of range. */
static bool axis_ok(int64_t *ax, int rank) {
  if (*ax < 0)
    *ax += rank;
  return *ax >= 0 && *ax < rank;
}

static bool get_axis(Inst *inst, const char *attr, int64_t dflt, int rank, int64_t *out,
                     char *err, size_t errlen) {
  int64_t ax = ir_get_int(inst, attr, dflt);
  *out = ax;
  if (!axis_ok(out, rank))
    FAIL("'%s': axis %lld is out of range for rank %d", NAME, (long long)ax, rank);
  return true;
}

/* ---- module plumbing ---- */

bool shape_load(Inst *inst, char *err, size_t errlen) {
  const char *g = ir_get_str(inst, "global", NULL);
  if (!g)
    FAIL("'load' needs a global");
  const Global *gl = ir_find_global(inst->fn->mod, g);
  if (!gl)
    FAIL("'load' of unknown global '%s'", g);
  inst->type = ir_global_type_on(inst->fn->mod, gl, inst->fn->device);
  return true;
}

bool shape_store(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const char *g = ir_get_str(inst, "global", NULL);
  if (!g)
    FAIL("'store' needs a global");
  const Global *gl = ir_find_global(inst->fn->mod, g);
  if (!gl)
    FAIL("'store' to unknown global '%s'", g);
  Type t = ir_global_type_on(inst->fn->mod, gl, inst->fn->device);
  if (!type_eq(&t, IN(0)))
    FAIL("'store' of %s into global '%s' of type %s", ts(IN(0), b1), g, ts(&t, b2));
  inst->type = (Type){DT_VOID, 0, {0}};
  return true;
}

bool shape_output(Inst *inst, char *err, size_t errlen) {
  (void)err, (void)errlen;
  inst->type = (Type){DT_VOID, 0, {0}};
  return true;
}

bool shape_const(Inst *inst, char *err, size_t errlen) {
  (void)err, (void)errlen;
  inst->type = (Type){DT_F32, 0, {0}};
  return true;
}

/* Its type is written where it is made (the frontend, the text form). */
bool shape_arg(Inst *inst, char *err, size_t errlen) {
  if (!inst->fn->body)
    FAIL("'arg' appears only in a body function (func @NAME body)");
  if (ir_get_int(inst, "index", -1) < 0)
    FAIL("'arg' needs an index of 0 or more");
  if (inst->type.dtype == DT_VOID)
    FAIL("'arg' needs its type");
  return check_out(inst, err, errlen);
}

bool shape_repeat(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const char *name = ir_get_str(inst, "body", "");
  const Func *body = ir_repeat_body(inst);
  if (!body || !body->body)
    FAIL("'repeat' of @%s, which is not a body function", name);
  if (body == inst->fn)
    FAIL("'repeat' of @%s inside @%s itself", name, name);
  int64_t n = ir_get_int(inst, "n", 0), carry = ir_get_int(inst, "carry", 0),
          stacked = ir_get_int(inst, "stacked", 0);
  if (n < 1)
    FAIL("'repeat' needs n of 1 or more, got %lld", (long long)n);
  if (carry < 1 || stacked < 0 || carry + stacked > inst->nin)
    FAIL("'repeat' of %d operands cannot carry %lld and stack %lld", inst->nin, (long long)carry,
         (long long)stacked);
  for (int k = 0; k < inst->nin; k++) {
    const Inst *a = ir_func_arg(body, k);
    if (!a)
      FAIL("@%s has no arg %d for operand %d of 'repeat'", name, k, k + 1);
    Type want = *IN(k);
    if (ir_repeat_operand_kind(inst, k) == 2) {
      if (want.rank < 1 || want.dim[0] != n)
        FAIL("stacked operand %d of 'repeat' must have a leading dimension of %lld, got %s", k + 1,
             (long long)n, ts(IN(k), b1));
      want.rank--;
      memmove(want.dim, want.dim + 1, sizeof(int64_t) * (size_t)want.rank);
      want.dim[want.rank] = 0;
    }
    if (!type_eq(&want, &a->type))
      FAIL("operand %d of 'repeat' gives @%s's arg %d %s where it takes %s", k + 1, name, k,
           ts(&want, b1), ts(&a->type, b2));
  }
  if (ir_func_arg(body, inst->nin))
    FAIL("@%s reads arg %d, but 'repeat' gives it %d operand%s", name, inst->nin, inst->nin,
         inst->nin == 1 ? "" : "s");
  int nout = ir_func_noutputs(body);
  if (nout < carry)
    FAIL("@%s has %d outputs, fewer than the %lld carried values", name, nout, (long long)carry);
  for (int k = 0; k < carry; k++) {
    const Type *o = &ir_func_output(body, k)->in[0]->type;
    if (!type_eq(o, IN(k)))
      FAIL("@%s's output %d is %s, but carried value %d is %s", name, k, ts(o, b1), k + 1,
           ts(IN(k), b2));
  }
  for (int k = carry; k < nout; k++)
    if (ir_func_output(body, k)->in[0]->type.rank >= IR_MAX_RANK)
      FAIL("@%s's output %d has rank %d: stacked it would pass %d", name, k, IR_MAX_RANK, IR_MAX_RANK);
  inst->type = *IN(0);
  return true;
}

bool shape_repeat_out(Inst *inst, char *err, size_t errlen) {
  const Inst *r = inst->in[0];
  int64_t k = ir_get_int(inst, "index", 0);
  if (r->op != OP_repeat)
    FAIL("'repeat_out' takes a repeat, got '%s'", ir_ops[r->op].name);
  if (k < 1 || k > INT32_MAX || !ir_repeat_out_type(r, (int)k, &inst->type))
    FAIL("'repeat_out': the loop has no output %lld", (long long)k);
  return check_out(inst, err, errlen);
}

bool shape_lr(Inst *inst, char *err, size_t errlen) {
  const char *s = ir_get_str(inst, "schedule", "constant");
  if (dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, s) < 0)
    FAIL("unknown learning-rate schedule '%s' (constant, warmup, cosine, linear, step)", s);
  inst->type = (Type){DT_F32, 0, {0}};
  return true;
}

/* ---- elementwise ---- */

/* numpy broadcasting of a and b into out. */
static bool broadcast2(const Type *a, const Type *b, Type *out) {
  int r = a->rank > b->rank ? a->rank : b->rank;
  out->rank = r;
  for (int d = 0; d < r; d++) {
    int da = d - (r - a->rank), db = d - (r - b->rank);
    int64_t x = da >= 0 ? a->dim[da] : 1, y = db >= 0 ? b->dim[db] : 1;
    if (x != y && x != 1 && y != 1)
      return false;
    out->dim[d] = x == 1 ? y : x;
  }
  return true;
}

static bool binary(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (IN(0)->dtype != IN(1)->dtype)
    FAIL("operands of '%s' have different element types: %s and %s", NAME, ts(IN(0), b1),
         ts(IN(1), b2));
  if (!need_f32(inst, 0, err, errlen))
    return false;
  if (!broadcast2(IN(0), IN(1), &inst->type))
    FAIL("shape mismatch in '%s': %s and %s do not broadcast", NAME, ts(IN(0), b1), ts(IN(1), b2));
  inst->type.dtype = IN(0)->dtype;
  return check_out(inst, err, errlen);
}

static bool unary(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

bool shape_add(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_sub(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_mul(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_div(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_relu_grad(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_gelu_grad(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_gelu_tanh_grad(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_gt(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_ge(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_eq(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_ne(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_where_true(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_where_false(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_maximum(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_pow(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_minimum(Inst *i, char *e, size_t n) { return binary(i, e, n); }
bool shape_clamp_grad(Inst *i, char *e, size_t n) { return binary(i, e, n); }
/* bn_center and bn_scale: x [N, C, ...] and a statistic of its rank, each
 * dim x's or 1 (the dims it reduces); bn_scale's x a bn_center. */
static bool stat(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *x = IN(0), *s = IN(1);
  bool ok = s->rank == x->rank;
  for (int d = 0; ok && d < x->rank; d++)
    ok = s->dim[d] == x->dim[d] || s->dim[d] == 1;
  if (!ok)
    FAIL("'%s' needs a statistic of %s with its dims or 1, not %s", NAME, ts(x, b1), ts(s, b2));
  return binary(inst, err, errlen);
}

bool shape_bn_center(Inst *i, char *e, size_t n) { return stat(i, e, n); }
bool shape_bn_scale(Inst *inst, char *err, size_t errlen) {
  if (inst->in[0]->op != OP_bn_center)
    FAIL("the first operand of 'bn_scale' must be a bn_center, not a %s",
         ir_ops[inst->in[0]->op].name);
  return stat(inst, err, errlen);
}

bool shape_neg(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_exp(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_log(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_sqrt(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_tanh(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_sigmoid(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_relu(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_gelu(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_gelu_tanh(Inst *i, char *e, size_t n) { return unary(i, e, n); }
bool shape_clamp(Inst *i, char *e, size_t n) { return unary(i, e, n); }

/* ---- reductions ---- */

static bool reduce(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen))
    return false;
  const Type *x = IN(0);
  int n;
  const int64_t *axes = ir_get_ints(inst, "axes", &n);
  if (!axes)
    FAIL("'%s' needs the axes to reduce", NAME);
  bool red[IR_MAX_RANK] = {0};
  for (int k = 0; k < n; k++) {
    int64_t ax = axes[k];
    if (!axis_ok(&ax, x->rank))
      FAIL("'%s': axis %lld is out of range for rank %d", NAME, (long long)axes[k], x->rank);
    if (red[ax])
      FAIL("'%s': axis %lld is listed twice", NAME, (long long)axes[k]);
    red[ax] = true;
  }
  bool keep = ir_get_int(inst, "keepdim", 0) != 0;
  Type t = {DT_F32, 0, {0}};
  for (int d = 0; d < x->rank; d++)
    if (!red[d])
      t.dim[t.rank++] = x->dim[d];
    else if (keep)
      t.dim[t.rank++] = 1;
  inst->type = t;
  return true;
}

bool shape_sum(Inst *i, char *e, size_t n) { return reduce(i, e, n); }
bool shape_mean(Inst *i, char *e, size_t n) { return reduce(i, e, n); }

static bool reduce_mul(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!type_eq(IN(0), IN(1)))
    FAIL("the operands of '%s' must have one type, not %s and %s", NAME, ts(IN(0), b1),
         ts(IN(1), b2));
  return reduce(inst, err, errlen);
}
bool shape_sum_mul(Inst *i, char *e, size_t n) { return reduce_mul(i, e, n); }
bool shape_mean_mul(Inst *i, char *e, size_t n) { return reduce_mul(i, e, n); }
bool shape_max(Inst *i, char *e, size_t n) { return reduce(i, e, n); }

bool shape_fold(Inst *inst, char *err, size_t errlen) {
  const Type *x = &inst->in[0]->type;
  if (x->dtype != DT_F32 || x->rank < 1) {
    snprintf(err, errlen, "'fold' needs an f32 operand with a leading dim of pieces");
    return false;
  }
  inst->type = *x;
  inst->type.rank--;
  memmove(inst->type.dim, x->dim + 1, sizeof(int64_t) * (size_t)inst->type.rank);
  return true;
}

bool shape_max_grad(Inst *inst, char *err, size_t errlen) {
  Type y;
  Inst tmp = *inst;
  tmp.in = inst->in;
  if (!reduce(&tmp, err, errlen))
    return false;
  y = tmp.type;
  char b1[128], b2[128];
  if (!type_eq(&y, IN(1)) || !type_eq(&y, IN(2)))
    FAIL("'max_grad': result and its adjoint must be %s, got %s", ts(&y, b1), ts(IN(2), b2));
  inst->type = *IN(0);
  return true;
}

/* ---- dense ---- */

bool shape_matmul(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *a = IN(0), *b = IN(1);
  if (!need_f32(inst, 0, err, errlen) || !need_f32(inst, 1, err, errlen))
    return false;
  if (a->rank < 2 || b->rank < 2)
    FAIL("'@' needs operands of rank 2 or more, got %s and %s", ts(a, b1), ts(b, b2));
  bool ta = ir_get_int(inst, "ta", 0), tb = ir_get_int(inst, "tb", 0);
  int ra = a->rank, rb = b->rank;
  int64_t m = a->dim[ra - (ta ? 1 : 2)], ka = a->dim[ra - (ta ? 2 : 1)];
  int64_t kb = b->dim[rb - (tb ? 1 : 2)], n = b->dim[rb - (tb ? 2 : 1)];
  if (ka != kb)
    FAIL("shape mismatch in '@': %s @ %s: inner dimensions %lld and %lld differ", ts(a, b1),
         ts(b, b2), (long long)ka, (long long)kb);
  int64_t kfold = ir_get_int(inst, "kfold", 0);
  if (ir_attr(inst, "kfold")) {   /* [F.., k, m]^T @ [F.., k, n]: the F dims summed with k */
    bool same = ta && !tb && kfold >= 1 && ra == kfold + 2 && rb == ra;
    for (int d = 0; same && d < kfold; d++) {
      same = a->dim[d] == b->dim[d];
      ka *= a->dim[d];
    }
    if (!same)
      FAIL("'matmul': kfold %lld needs ta, no tb, and operands of rank %lld alike in their first "
           "%lld dims, got %s and %s", (long long)kfold, (long long)kfold + 2,
           (long long)kfold + 1, ts(a, b1), ts(b, b2));
  }
  int64_t kblock = ir_get_int(inst, "kblock", 1);
  if (ir_attr(inst, "kblock") && (kblock < 1 || ka % kblock))
    FAIL("'matmul': kblock %lld does not cut k = %lld into whole blocks", (long long)kblock,
         (long long)ka);
  if (kfold) {
    inst->type = (Type){.dtype = a->dtype, .rank = 2, .dim = {m, n}};
    return check_out(inst, err, errlen);
  }
  if (rb > 2) {
    bool same = ra == rb;
    for (int d = 0; same && d < ra - 2; d++)
      same = a->dim[d] == b->dim[d];
    if (!same)
      FAIL("shape mismatch in '@': %s @ %s: batch dimensions differ", ts(a, b1), ts(b, b2));
  }
  Type t = *a;
  t.dim[ra - 2] = m;
  t.dim[ra - 1] = n;
  inst->type = t;
  return check_out(inst, err, errlen);
}

/* ---- other kernels ---- */

static bool along_axis(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen))
    return false;
  int64_t ax;
  if (!get_axis(inst, "axis", -1, IN(0)->rank, &ax, err, errlen))
    return false;
  if (IN(0)->rank == 0)
    FAIL("'%s' needs a tensor of rank 1 or more", NAME);
  if (inst->nin == 2 && !same_type(inst, 0, 1, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

bool shape_softmax(Inst *i, char *e, size_t n) { return along_axis(i, e, n); }
bool shape_log_softmax(Inst *i, char *e, size_t n) { return along_axis(i, e, n); }
bool shape_softmax_grad(Inst *i, char *e, size_t n) { return along_axis(i, e, n); }
bool shape_log_softmax_grad(Inst *i, char *e, size_t n) { return along_axis(i, e, n); }

static bool ce_operands(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *l = IN(0), *y = IN(1);
  if (l->dtype != DT_F32 || l->rank != 2)
    FAIL("'cross_entropy' needs logits f32[N,C], got %s", ts(l, b1));
  if (y->dtype != DT_I32 || y->rank != 1)
    FAIL("'cross_entropy' needs labels i32[N], got %s", ts(y, b1));
  if (l->dim[0] != y->dim[0])
    FAIL("shape mismatch in 'cross_entropy': %s logits but %s labels", ts(l, b1), ts(y, b2));
  return true;
}

bool shape_cross_entropy(Inst *inst, char *err, size_t errlen) {
  if (!ce_operands(inst, err, errlen))
    return false;
  inst->type = (Type){DT_F32, 0, {0}};
  return true;
}

bool shape_cross_entropy_grad(Inst *inst, char *err, size_t errlen) {
  if (!ce_operands(inst, err, errlen))
    return false;
  if (IN(2)->dtype != DT_F32 || IN(2)->rank != 0)
    FAIL("'cross_entropy_grad' needs a scalar adjoint");
  inst->type = *IN(0);
  return true;
}

bool shape_mse(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen) || !same_type(inst, 0, 1, err, errlen))
    return false;
  inst->type = (Type){DT_F32, 0, {0}};
  return true;
}

/* ---- PyTorch's losses (cross_entropy with ignore_index or label_smoothing,
 * bce_with_logits) ---- */

bool shape_cross_entropy_sum(Inst *inst, char *err, size_t errlen) {
  double e = ir_get_float(inst, "smoothing", 0);
  if (!(e >= 0 && e <= 1))
    FAIL("'%s' needs smoothing in [0, 1], got %g", NAME, e);
  return shape_cross_entropy(inst, err, errlen);
}

bool shape_cross_entropy_sum_grad(Inst *inst, char *err, size_t errlen) {
  return shape_cross_entropy_sum(inst, err, errlen) &&
         shape_cross_entropy_grad(inst, err, errlen);
}

bool shape_label_count(Inst *inst, char *err, size_t errlen) {
  char b[128];
  if (IN(0)->dtype != DT_I32 || IN(0)->rank != 1)
    FAIL("'%s' needs labels i32[N], got %s", NAME, ts(IN(0), b));
  inst->type = (Type){DT_F32, 0, {0}};
  return true;
}

bool shape_bce_with_logits(Inst *inst, char *err, size_t errlen) { return shape_mse(inst, err, errlen); }

bool shape_bce_with_logits_grad(Inst *inst, char *err, size_t errlen) {
  if (!shape_mse(inst, err, errlen))
    return false;
  if (IN(2)->dtype != DT_F32 || IN(2)->rank != 0)
    FAIL("'%s' needs a scalar adjoint", NAME);
  inst->type = *IN(0);
  return true;
}

static bool last_axis(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen))
    return false;
  if (IN(0)->rank == 0)
    FAIL("'%s' needs a tensor of rank 1 or more", NAME);
  if (ir_get_float(inst, "eps", 1e-5) <= 0)
    FAIL("'%s': eps must be positive", NAME);
  if (inst->nin == 2 && !same_type(inst, 0, 1, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

bool shape_normalize(Inst *i, char *e, size_t n) { return last_axis(i, e, n); }
bool shape_normalize_grad(Inst *i, char *e, size_t n) { return last_axis(i, e, n); }

bool shape_embedding(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  const Type *tab = IN(0), *ids = IN(1);
  if (tab->dtype != DT_F32 || tab->rank != 2)
    FAIL("'embedding' needs a table f32[V,D], got %s", ts(tab, b1));
  if (ids->dtype != DT_I32)
    FAIL("'embedding' needs i32 ids, got %s", ts(ids, b1));
  if (ids->rank + 1 > IR_MAX_RANK)
    FAIL("'embedding' result would have rank %d (at most %d)", ids->rank + 1, IR_MAX_RANK);
  Type t = *ids;
  t.dtype = DT_F32;
  t.dim[t.rank++] = tab->dim[1];
  inst->type = t;
  return check_out(inst, err, errlen);
}

bool shape_embedding_grad(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *ids = IN(0), *dy = IN(1);
  bool ok = ids->dtype == DT_I32 && dy->dtype == DT_F32 && dy->rank == ids->rank + 1;
  for (int d = 0; ok && d < ids->rank; d++)
    ok = ids->dim[d] == dy->dim[d];
  if (!ok)
    FAIL("'embedding_grad': ids %s do not match adjoint %s", ts(ids, b1), ts(dy, b2));
  int64_t rows = ir_get_int(inst, "rows", 0);
  inst->type = (Type){DT_F32, 2, {rows, dy->dim[dy->rank - 1]}};
  return check_out(inst, err, errlen);
}

static bool shape_attr(Inst *inst, Type *t, char *err, size_t errlen);

/* DeMo's tiles of a tensor of type x (dtrt_demo_tiles), from the op's chunk
 * and topk. */
static bool demo_tiles(Inst *inst, const Type *x, DtDemoTiles *t, char *err, size_t errlen) {
  int64_t chunk = ir_get_int(inst, "chunk", 0), topk = ir_get_int(inst, "topk", 0);
  if (chunk < 1 || topk < 1)
    FAIL("'%s' needs chunk and topk of at least 1, got %lld and %lld", NAME, (long long)chunk,
         (long long)topk);
  bool stacked = ir_get_int(inst, "stacked", 0) != 0;
  if (x->dtype != DT_F32 || !dtrt_demo_tiles(x->dim, x->rank, stacked, chunk, topk, t))
    FAIL("'%s' needs an f32 tensor%s", NAME, stacked ? " of rank 1 or more" : "");
  return true;
}

/* (delta, g, lr[]): g of delta's type, lr an f32 scalar. */
static bool demo_momentum(Inst *inst, DtDemoTiles *t, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!type_eq(IN(0), IN(1)))
    FAIL("'%s': gradient %s does not match momentum %s", NAME, ts(IN(1), b1), ts(IN(0), b2));
  if (IN(2)->dtype != DT_F32 || IN(2)->rank != 0)
    FAIL("'%s' needs a scalar learning rate, got %s", NAME, ts(IN(2), b1));
  return demo_tiles(inst, IN(0), t, err, errlen);
}

/* A packed tensor of rows rows (0: any) for tiles t. */
static bool demo_packed(Inst *inst, const Type *p, const DtDemoTiles *t, int64_t rows, char *err,
                        size_t errlen) {
  char b[128];
  if (p->dtype != DT_F32 || p->rank != 2 || p->dim[1] != 2 * t->tiles * t->k ||
      (rows && p->dim[0] != rows))
    FAIL("'%s' needs packed coefficients f32[%s, %lld], got %s", NAME, rows ? "1" : "R",
         (long long)(2 * t->tiles * t->k), ts(p, b));
  return true;
}

bool shape_demo_compress(Inst *inst, char *err, size_t errlen) {
  DtDemoTiles t;
  if (!demo_momentum(inst, &t, err, errlen))
    return false;
  inst->type = (Type){DT_F32, 2, {1, 2 * t.tiles * t.k}};
  return check_out(inst, err, errlen);
}

bool shape_demo_residual(Inst *inst, char *err, size_t errlen) {
  DtDemoTiles t;
  if (!demo_momentum(inst, &t, err, errlen) || !demo_packed(inst, IN(3), &t, 1, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

bool shape_demo_sign(Inst *inst, char *err, size_t errlen) {
  Type y = {DT_F32, 0, {0}};
  DtDemoTiles t;
  return shape_attr(inst, &y, err, errlen) && demo_tiles(inst, &y, &t, err, errlen) &&
         demo_packed(inst, IN(0), &t, 0, err, errlen);
}

/* `at`, when present, places the operand in a larger tensor: its rank dims,
 * then the block's first index along each. */
static bool dropout_like(Inst *inst, char *err, size_t errlen) {
  double p = ir_get_float(inst, "p", -1);
  if (!(p >= 0 && p < 1))
    FAIL("'%s': p must be in [0, 1), got %g", NAME, p);
  int n;
  const int64_t *at = ir_get_ints(inst, "at", &n);
  const Type *x = &inst->in[0]->type;
  if (at && n != 2 * x->rank)
    FAIL("'%s': 'at' has %d entries; a block of rank %d needs %d (the whole dims, then the "
         "block's first indices)", NAME, n, x->rank, 2 * x->rank);
  for (int d = 0; at && d < x->rank; d++)
    if (at[x->rank + d] < 0 || at[x->rank + d] > at[d] - x->dim[d])
      FAIL("'%s': a block of %lld from %lld does not fit dimension %d of length %lld", NAME,
           (long long)x->dim[d], (long long)at[x->rank + d], d, (long long)at[d]);
  return unary(inst, err, errlen);
}

bool shape_dropout(Inst *i, char *e, size_t n) { return dropout_like(i, e, n); }
bool shape_dropout_grad(Inst *i, char *e, size_t n) { return dropout_like(i, e, n); }

bool shape_causal_mask(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  const Type *x = IN(0);
  if (!need_f32(inst, 0, err, errlen))
    return false;
  if (x->rank < 2 || x->dim[x->rank - 1] != x->dim[x->rank - 2])
    FAIL("'causal_mask' needs square trailing dimensions [...,T,T], got %s", ts(x, b1));
  inst->type = *x;
  return true;
}

/* embedding_bag's operands (ir/ops.def): input, weight, offsets when input
 * has rank 1, per_sample_weights when there is one more before `extra`
 * trailing ones (the adjoint [B, D]); *b: the number of bags, *psw: where
 * per_sample_weights are (0: none; need_psw: required). */
static bool bag_operands(Inst *inst, int extra, bool need_psw, int64_t *b, int *psw, char *err,
                         size_t errlen) {
  char b1[128], b2[128];
  const Type *x = IN(0), *w = IN(1);
  if (x->dtype != DT_I32 || (x->rank != 1 && x->rank != 2))
    FAIL("'%s' needs input i32[B, K], or i32[N] with offsets; got %s", NAME, ts(x, b1));
  if (w->dtype != DT_F32 || w->rank != 2)
    FAIL("'%s' needs a weight f32[R, D], got %s", NAME, ts(w, b1));
  int base = x->rank == 2 ? 2 : 3, n = inst->nin - extra - base;
  if (n < 0)
    FAIL("'%s' with input %s needs offsets i32[B]", NAME, ts(x, b1));
  const Type *o = x->rank == 1 ? IN(2) : NULL;
  if (o && (o->dtype != DT_I32 || o->rank != 1))
    FAIL("'%s' needs offsets i32[B], got %s", NAME, ts(o, b1));
  *b = o ? o->dim[0] : x->dim[0];
  if (n > 1 || n < need_psw)
    FAIL("'%s' has %d operands, which do not fit input %s", NAME, inst->nin, ts(x, b1));
  int64_t mode = ir_get_int(inst, "mode", -1), pad = ir_get_int(inst, "padding_idx", 0);
  int nat;
  const int64_t *at = ir_get_ints(inst, "at", &nat);
  int64_t rows = at && nat == 2 ? at[0] : w->dim[0];
  if (mode < 0 || mode >= DT_BAG_COUNT)
    FAIL("'%s': mode %lld is not sum (0), mean (1) or max (2)", NAME, (long long)mode);
  if (at && (nat != 2 || at[1] < 0 || at[1] + w->dim[0] > at[0]))
    FAIL("'%s': at must be [R, lo] with the weight's %lld rows from lo within R", NAME,
         (long long)w->dim[0]);
  if (at && mode == DT_BAG_MAX)
    FAIL("'%s': a block of rows (at) needs mode \"sum\" or \"mean\", not \"max\"", NAME);
  if (pad < (at ? -1 : 0) || pad >= rows)
    FAIL("'%s': padding_idx %lld is outside the weight's rows [0, %lld)", NAME, (long long)pad,
         (long long)rows);
  *psw = n ? base : 0;
  Type want = *x;
  want.dtype = DT_F32;
  if (n && !type_eq(IN(base), &want))
    FAIL("'%s': per_sample_weights %s must be f32 of the input's shape, %s", NAME,
         ts(IN(base), b1), ts(&want, b2));
  if (n && mode != DT_BAG_SUM)
    FAIL("'%s': per_sample_weights need mode \"sum\", not \"%s\"", NAME,
         dtrt_bag_mode_names[mode]);
  Type dy = {DT_F32, 2, {*b, w->dim[1]}};
  if (extra && !type_eq(IN(inst->nin - 1), &dy))
    FAIL("'%s': adjoint %s is not %s", NAME, ts(IN(inst->nin - 1), b1), ts(&dy, b2));
  return true;
}

bool shape_embedding_bag(Inst *inst, char *err, size_t errlen) {
  int64_t b;
  int psw;
  if (!bag_operands(inst, 0, false, &b, &psw, err, errlen))
    return false;
  inst->type = (Type){DT_F32, 2, {b, IN(1)->dim[1]}};
  return check_out(inst, err, errlen);
}

bool shape_embedding_bag_grad(Inst *inst, char *err, size_t errlen) {
  int64_t b;
  int psw;
  if (!bag_operands(inst, 1, false, &b, &psw, err, errlen))
    return false;
  inst->type = *IN(1);
  return true;
}

bool shape_embedding_bag_psw_grad(Inst *inst, char *err, size_t errlen) {
  int64_t b;
  int psw;
  if (!bag_operands(inst, 1, true, &b, &psw, err, errlen))
    return false;
  inst->type = *IN(psw);
  return true;
}

/* ---- sparse tables ---- */

bool shape_sparse_rows(Inst *inst, char *err, size_t errlen) {
  int64_t b;
  int psw;
  if (!bag_operands(inst, 0, false, &b, &psw, err, errlen))
    return false;
  if (ir_get_int(inst, "mode", -1) == DT_BAG_MAX)
    FAIL("'%s': a sparse gradient needs mode \"sum\" or \"mean\", not \"max\"", NAME);
  inst->type = *IN(0);
  return true;
}

bool shape_sparse_values(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  int64_t b;
  int psw;
  inst->nin--; /* the rows last, after the adjoint */
  bool ok = bag_operands(inst, 1, false, &b, &psw, err, errlen);
  inst->nin++;
  if (!ok)
    return false;
  if (ir_get_int(inst, "mode", -1) == DT_BAG_MAX)
    FAIL("'%s': a sparse gradient needs mode \"sum\" or \"mean\", not \"max\"", NAME);
  if (!type_eq(IN(inst->nin - 1), IN(0)))
    FAIL("'%s': rows %s are not of the input's type %s", NAME, ts(IN(inst->nin - 1), b1),
         ts(IN(0), b2));
  if (IN(0)->rank + 1 > IR_MAX_RANK)
    FAIL("'%s': input %s leaves no room for D", NAME, ts(IN(0), b1));
  inst->type = *IN(0);
  inst->type.dtype = DT_F32;
  inst->type.dim[inst->type.rank++] = IN(1)->dim[1];
  return true;
}

/* An update's first operand (the table [R, D], or with rank1 also [R]), the
 * rows (i32) and, when values, the values f32 [rows' dims..., D]. */
static bool sparse_update(Inst *inst, bool values, bool rank1, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *p = IN(0), *r = IN(1);
  if (p->dtype != DT_F32 || (p->rank != 2 && !(rank1 && p->rank == 1)))
    FAIL("'%s' needs a table f32[R, D]%s, got %s", NAME, rank1 ? " or f32[R]" : "", ts(p, b1));
  if (r->dtype != DT_I32 || r->rank + 1 > IR_MAX_RANK)
    FAIL("'%s' needs rows i32[...], got %s", NAME, ts(r, b1));
  if (values) {
    const Type *v = IN(2);
    Type want = *r;
    want.dtype = DT_F32;
    want.dim[want.rank++] = p->rank == 2 ? p->dim[1] : v->rank ? v->dim[v->rank - 1] : 0;
    if (!type_eq(v, &want))
      FAIL("'%s': values %s do not match rows %s (want %s)", NAME, ts(v, b1), ts(r, b2),
           ts(&want, b2));
  }
  inst->type = *p;
  return true;
}

/* Operand k a scalar f32 (a learning rate). */
static bool scalar_at(Inst *inst, int k, char *err, size_t errlen) {
  char b1[128];
  if (IN(k)->dtype != DT_F32 || IN(k)->rank != 0)
    FAIL("'%s' needs a learning rate f32[] as operand %d, got %s", NAME, k + 1, ts(IN(k), b1));
  return true;
}

bool shape_sparse_sgd(Inst *inst, char *err, size_t errlen) {
  return sparse_update(inst, true, false, err, errlen) && scalar_at(inst, 3, err, errlen);
}

bool shape_sparse_adagrad_sum(Inst *inst, char *err, size_t errlen) {
  return sparse_update(inst, true, true, err, errlen);
}

bool shape_sparse_adagrad(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!sparse_update(inst, true, false, err, errlen) || !scalar_at(inst, 4, err, errlen))
    return false;
  const Type *p = IN(0), *s = IN(3);
  Type rows = {DT_F32, 1, {p->dim[0]}};
  if (!type_eq(s, p) && !type_eq(s, &rows))
    FAIL("'%s': sums %s are neither the table's %s nor one per row", NAME, ts(s, b1), ts(p, b2));
  return true;
}

bool shape_sparse_moment(Inst *inst, char *err, size_t errlen) {
  return sparse_update(inst, true, false, err, errlen);
}

bool shape_sparse_adam(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!sparse_update(inst, false, false, err, errlen) || !scalar_at(inst, 4, err, errlen))
    return false;
  for (int k = 2; k < 4; k++)
    if (!type_eq(IN(k), IN(0)))
      FAIL("'%s': moment %s is not the table's %s", NAME, ts(IN(k), b1), ts(IN(0), b2));
  return true;
}

/* ---- attention ---- */

/* q [B,H,Tq,D] and, after it, n operands [B,H,Tk,D] (k, v) of one Tk. The
 * forward's messages name the function the user wrote. */
static bool attn_qkv(Inst *inst, int n, char *err, size_t errlen) {
  static const char *const role[] = {"query", "key", "value"};
  const char *who = inst->op == OP_sdpa ? "scaled_dot_product_attention" : NAME;
  char b1[128], b2[128];
  for (int k = 0; k <= n; k++) {
    if (!need_f32(inst, k, err, errlen))
      return false;
    if (IN(k)->rank != 4)
      FAIL("'%s': %s must be [B, H, T, D] (rank 4), got %s", who, role[k], ts(IN(k), b1));
  }
  const int64_t *q = IN(0)->dim;
  for (int k = 1; k <= n; k++) {
    const int64_t *x = IN(k)->dim;
    if (x[0] != q[0] || x[1] != q[1] || x[3] != q[3])
      FAIL("'%s': %s %s does not match query %s in B, H or D", who, role[k], ts(IN(k), b1),
           ts(IN(0), b2));
    if (x[2] != IN(1)->dim[2])
      FAIL("'%s': key %s and value %s differ in length", who, ts(IN(1), b1), ts(IN(k), b2));
  }
  double scale = ir_get_float(inst, "scale", 1);
  if (!isfinite(scale))
    FAIL("'%s': scale must be finite, not %g", who, scale);
  return true;
}

/* The optional mask after the first `base` operands, broadcast (right-aligned)
 * to [B,H,Tq,Tk]: f32 or i32, rank at most 4, each dim 1 or whole. */
static bool attn_mask(Inst *inst, int base, char *err, size_t errlen) {
  const char *who = inst->op == OP_sdpa ? "scaled_dot_product_attention" : NAME;
  char b1[128];
  if (inst->nin <= base)
    return true;
  const Type *m = IN(base), *q = IN(0);
  int64_t full[4] = {q->dim[0], q->dim[1], q->dim[2], IN(1)->dim[2]};
  if (inst->op == OP_ring_sdpa || inst->op == OP_ring_sdpa_lse || inst->op == OP_ring_sdpa_grad) {
    int n;   /* a ring's mask: every query's, over the whole sequence */
    const int64_t *sizes = ir_get_ints(inst, "sizes", &n);
    full[2] = 1, full[3] = 0;
    for (int k = 0; k < n; k++)
      full[3] += sizes[k];
  }
  if ((m->dtype != DT_F32 && m->dtype != DT_I32) || m->rank > 4)
    FAIL("'%s': attn_mask must be f32 or i32 (bool) of rank at most 4, got %s", who, ts(m, b1));
  for (int d = 0; d < m->rank; d++) {
    int64_t want = full[4 - m->rank + d];
    if (m->dim[d] != 1 && m->dim[d] != want)
      FAIL("'%s': attn_mask %s does not broadcast to [%lld, %lld, %lld, %lld] (dim %d is "
           "neither 1 nor %lld)", who, ts(m, b1), (long long)full[0], (long long)full[1],
           (long long)full[2], (long long)full[3], d, (long long)want);
  }
  return true;
}

/* Dropout's attributes: p in [0, 1); at, when present, the whole [B,H,Tq,Tk]
 * then the block's first indices, the block's [B,H,Tq,Tk] lying within. */
static bool attn_dropout(Inst *inst, char *err, size_t errlen) {
  double p = ir_get_float(inst, "p", 0);
  if (!(p >= 0 && p < 1))
    FAIL("'%s': dropout p must be in [0, 1), got %g", NAME, p);
  int n;
  const int64_t *at = ir_get_ints(inst, "at", &n);
  int64_t block[4] = {IN(0)->dim[0], IN(0)->dim[1], IN(0)->dim[2], IN(1)->dim[2]};
  if (at && n != 8)
    FAIL("'%s': 'at' has %d entries; it needs 8 (the whole [B,H,Tq,Tk], then the block's "
         "first indices)", NAME, n);
  for (int d = 0; at && d < 4; d++)
    if (at[4 + d] < 0 || at[4 + d] > at[d] - block[d])
      FAIL("'%s': a block of %lld from %lld does not fit dimension %d of length %lld", NAME,
           (long long)block[d], (long long)at[4 + d], d, (long long)at[d]);
  return true;
}

/* q, k (and v), then the mask after base operands, then dropout's attrs. */
static bool attn_operands(Inst *inst, int n, int base, char *err, size_t errlen) {
  return attn_qkv(inst, n, err, errlen) && attn_mask(inst, base, err, errlen) &&
         attn_dropout(inst, err, errlen);
}

bool shape_sdpa(Inst *inst, char *err, size_t errlen) {
  if (!attn_operands(inst, 2, 3, err, errlen))
    return false;
  inst->type = *IN(0);
  return check_out(inst, err, errlen);
}

bool shape_sdpa_lse(Inst *inst, char *err, size_t errlen) {
  if (!attn_operands(inst, 1, 2, err, errlen))
    return false;
  inst->type = *IN(0);
  inst->type.rank = 3;
  return check_out(inst, err, errlen);
}

/* The backward's operands (q, k, v, out, lse, dout, mask?): out and dout as
 * q, lse [B,H,Tq]. */
static bool attn_backward(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  if (!attn_operands(inst, 2, 6, err, errlen))
    return false;
  Type lse = *IN(0);
  lse.rank = 3;
  for (int k = 3; k < 6; k++)
    if (!type_eq(IN(k), k == 4 ? &lse : IN(0)))
      FAIL("'%s': operand %d is %s, expected %s", NAME, k + 1, ts(IN(k), b1),
           ts(k == 4 ? &lse : IN(0), b2));
  return true;
}

/* (q, k, v, out, lse, dout, mask) -> [B,H,Tq,Tk], the mask f32 */
bool shape_sdpa_dmask(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  if (!attn_backward(inst, err, errlen))
    return false;
  if (IN(6)->dtype != DT_F32)
    FAIL("'%s': the mask must be f32, got %s", NAME, ts(IN(6), b1));
  inst->type = *IN(0);
  inst->type.dim[3] = IN(1)->dim[2];
  return check_out(inst, err, errlen);
}

/* [B,H,T,D] -> [B,3,H,T,D]: dq, dk and dv stacked after the batch. */
static void stacked(Type *t) {
  t->rank = 5;
  for (int d = 4; d >= 2; d--)
    t->dim[d] = t->dim[d - 1];
  t->dim[1] = 3;
}

/* (q, k, v, out, lse, dout, mask?) -> [B,3,H,T,D] (dq, dk, dv stacked)
 * when Tq = Tk = T, else [B,H,Tq+2Tk,D] (along dim 2) */
bool shape_sdpa_grad(Inst *inst, char *err, size_t errlen) {
  if (!attn_backward(inst, err, errlen))
    return false;
  inst->type = *IN(0);
  if (IN(0)->dim[2] == IN(1)->dim[2])
    stacked(&inst->type);
  else
    inst->type.dim[2] = IN(0)->dim[2] + 2 * IN(1)->dim[2];
  return check_out(inst, err, errlen);
}

/* Ring attention: a device's blocks, as sdpa's (a mask whole along Tk,
 * which the ring's total, not the block's, is); sizes: the block lengths
 * of the axis group, the device's among them. */
static bool ring_sizes(Inst *inst, char *err, size_t errlen) {
  int n;
  const int64_t *sizes = ir_get_ints(inst, "sizes", &n);
  bool mine = false;
  for (int k = 0; k < n; k++) {
    if (sizes[k] < 1)
      FAIL("'%s': block %d of the sequence has length %lld", NAME, k, (long long)sizes[k]);
    mine |= sizes[k] == IN(0)->dim[2];
  }
  if (!mine)
    FAIL("'%s': no block of the sequence has the query's length %lld", NAME,
         (long long)IN(0)->dim[2]);
  if (IN(1)->dim[2] != IN(0)->dim[2])
    FAIL("'%s': the key's block has length %lld, the query's %lld", NAME,
         (long long)IN(1)->dim[2], (long long)IN(0)->dim[2]);
  return true;
}

bool shape_ring_sdpa(Inst *inst, char *err, size_t errlen) {
  if (!attn_operands(inst, 2, 3, err, errlen) || !ring_sizes(inst, err, errlen))
    return false;
  inst->type = *IN(0);
  return check_out(inst, err, errlen);
}

bool shape_ring_sdpa_lse(Inst *inst, char *err, size_t errlen) {
  if (!attn_operands(inst, 1, 2, err, errlen) || !ring_sizes(inst, err, errlen))
    return false;
  inst->type = *IN(0);
  inst->type.rank = 3;
  return check_out(inst, err, errlen);
}

bool shape_ring_sdpa_grad(Inst *inst, char *err, size_t errlen) {
  if (!attn_backward(inst, err, errlen) || !ring_sizes(inst, err, errlen))
    return false;
  inst->type = *IN(0);
  stacked(&inst->type);
  return check_out(inst, err, errlen);
}

/* ---- convolution and pooling ---- */

/* Attribute `name`: two ints [height, width], each from lo to IR_MAX_DIM. */
static bool pair(Inst *inst, const char *name, int64_t lo, int64_t v[2], char *err,
                 size_t errlen) {
  int n;
  const int64_t *p = ir_get_ints(inst, name, &n);
  if (!p || n != 2)
    FAIL("'%s' needs '%s' as two ints [height, width]", NAME, name);
  for (int k = 0; k < 2; k++) {
    if (p[k] < lo || p[k] > IR_MAX_DIM)
      FAIL("'%s': %s %lld is out of range (%lld to %lld)", NAME, name, (long long)p[k],
           (long long)lo, (long long)IR_MAX_DIM);
    v[k] = p[k];
  }
  return true;
}

static bool need_nchw(Inst *inst, int k, const char *what, char *err, size_t errlen) {
  char b[128];
  if (IN(k)->dtype != DT_F32 || IN(k)->rank != 4)
    FAIL("'%s' needs %s as f32[N,C,H,W], got %s", NAME, what, ts(IN(k), b));
  return true;
}

/* The output length along one spatial dim: (in + 2p - (d (k - 1) + 1)) / s + 1,
 * when the dilated kernel fits the padded input; with ceil (a pooling's
 * ceil_mode) rounded up, less a last window that would start in the right
 * padding, and the kernel may reach past the padded input by less than s. */
static bool out_len(Inst *inst, int dim, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                    bool ceil, int64_t *out, char *err, size_t errlen) {
  const char *along = dim ? "width" : "height";
  char dil[48] = "", by[64] = "";
  int64_t span;
  if (d != 1)
    snprintf(dil, sizeof dil, ", dilation %lld", (long long)d);
  if (ceil)
    snprintf(by, sizeof by, " by more than the stride less one (%lld)", (long long)(s - 1));
  if (__builtin_mul_overflow(d, k - 1, &span) || span + 1 > in + 2 * p + (ceil ? s - 1 : 0))
    FAIL("'%s': the kernel's %s (%lld%s) is larger than the padded input's (%lld + 2 * %lld)%s",
         NAME, along, (long long)k, dil, (long long)in, (long long)p, by);
  *out = (in + 2 * p - span - 1 + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (*out - 1) * s >= in + p)
    --*out;
  return true;
}

/* conv2d's result for x [N,C,H,W] and w [O,C/groups,kh,kw], or an error. */
static bool conv_out(Inst *inst, const Type *x, const Type *w, Type *y, char *err,
                     size_t errlen) {
  char b1[128], b2[128];
  int64_t st[2], pd[2], dl[2];
  if (!pair(inst, "stride", 1, st, err, errlen) || !pair(inst, "padding", 0, pd, err, errlen) ||
      !pair(inst, "dilation", 1, dl, err, errlen))
    return false;
  int64_t g = ir_get_int(inst, "groups", 1);
  if (g < 1)
    FAIL("'%s': groups must be positive, got %lld", NAME, (long long)g);
  if (x->dim[1] % g || w->dim[0] % g)
    FAIL("'%s': groups (%lld) must divide the input's channels (%lld) and the output's "
         "(%lld)", NAME, (long long)g, (long long)x->dim[1], (long long)w->dim[0]);
  if (w->dim[1] != x->dim[1] / g)
    FAIL("'%s': weight %s has %lld input channels per group; input %s with groups %lld "
         "needs %lld", NAME, ts(w, b1), (long long)w->dim[1], ts(x, b2), (long long)g,
         (long long)(x->dim[1] / g));
  *y = (Type){DT_F32, 4, {x->dim[0], w->dim[0], 0, 0}};
  for (int d = 0; d < 2; d++)
    if (!out_len(inst, d, x->dim[2 + d], w->dim[2 + d], st[d], pd[d], dl[d], false, &y->dim[2 + d],
                 err, errlen))
      return false;
  return true;
}

bool shape_conv2d(Inst *inst, char *err, size_t errlen) {
  if (!need_nchw(inst, 0, "the input", err, errlen) ||
      !need_nchw(inst, 1, "the weight [O,C/groups,kh,kw]", err, errlen) ||
      !conv_out(inst, IN(0), IN(1), &inst->type, err, errlen))
    return false;
  return check_out(inst, err, errlen);
}

/* A derivative's operand dy against the conv2d of x and w it comes from. */
static bool conv_adjoint(Inst *inst, const Type *x, const Type *w, char *err, size_t errlen) {
  char b1[128], b2[128];
  Type y;
  if (!conv_out(inst, x, w, &y, err, errlen))
    return false;
  if (!type_eq(&y, IN(1)))
    FAIL("'%s': adjoint %s does not match the convolution's result %s", NAME, ts(IN(1), b1),
         ts(&y, b2));
  return true;
}

bool shape_conv2d_grad_input(Inst *inst, char *err, size_t errlen) {
  int64_t size[2];
  if (!need_nchw(inst, 0, "the weight [O,C/groups,kh,kw]", err, errlen) ||
      !need_nchw(inst, 1, "the adjoint", err, errlen) || !pair(inst, "size", 1, size, err, errlen))
    return false;
  int64_t g = ir_get_int(inst, "groups", 1);
  const Type *w = IN(0);
  if (g < 1 || w->dim[1] > IR_MAX_DIM / g)
    FAIL("'%s': groups %lld is out of range (1 to %lld for %lld input channels per group)",
         NAME, (long long)g, (long long)(IR_MAX_DIM / w->dim[1]), (long long)w->dim[1]);
  Type x = {DT_F32, 4, {IN(1)->dim[0], w->dim[1] * g, size[0], size[1]}};
  if (!conv_adjoint(inst, &x, w, err, errlen))
    return false;
  inst->type = x;
  return check_out(inst, err, errlen);
}

bool shape_conv2d_grad_weight(Inst *inst, char *err, size_t errlen) {
  int64_t k[2];
  if (!need_nchw(inst, 0, "the input", err, errlen) ||
      !need_nchw(inst, 1, "the adjoint", err, errlen) || !pair(inst, "kernel", 1, k, err, errlen))
    return false;
  int64_t g = ir_get_int(inst, "groups", 1);
  const Type *x = IN(0);
  if (g < 1)
    FAIL("'%s': groups must be positive, got %lld", NAME, (long long)g);
  Type w = {DT_F32, 4, {IN(1)->dim[1], x->dim[1] / g, k[0], k[1]}};
  if (!conv_adjoint(inst, x, &w, err, errlen))
    return false;
  inst->type = w;
  return check_out(inst, err, errlen);
}

/* A pooling's result for x [N,C,H,W]: padding at most half the kernel (so
 * that, undilated, every window holds some of x), PyTorch's ceil_mode and
 * dilation (max), a positive divisor_override (avg). */
static bool pool_out(Inst *inst, const Type *x, Type *y, char *err, size_t errlen) {
  int64_t k[2], st[2], pd[2], dl[2] = {1, 1};
  if (!pair(inst, "kernel", 1, k, err, errlen) || !pair(inst, "stride", 1, st, err, errlen) ||
      !pair(inst, "padding", 0, pd, err, errlen) ||
      (ir_attr(inst, "dilation") && !pair(inst, "dilation", 1, dl, err, errlen)))
    return false;
  int64_t div = ir_get_int(inst, "divisor_override", 1);
  if (div < 1 || div > IR_MAX_DIM)
    FAIL("'%s': divisor_override %lld is out of range (1 to %lld)", NAME, (long long)div,
         (long long)IR_MAX_DIM);
  for (int d = 0; d < 2; d++)
    if (pd[d] > k[d] / 2)
      FAIL("'%s': padding %lld is more than half the kernel (%lld)", NAME, (long long)pd[d],
           (long long)k[d]);
  bool ceil = ir_get_int(inst, "ceil_mode", 0) != 0;
  *y = (Type){DT_F32, 4, {x->dim[0], x->dim[1], 0, 0}};
  for (int d = 0; d < 2; d++)
    if (!out_len(inst, d, x->dim[2 + d], k[d], st[d], pd[d], dl[d], ceil, &y->dim[2 + d], err,
                 errlen))
      return false;
  return true;
}

bool shape_max_pool2d(Inst *inst, char *err, size_t errlen) {
  if (!need_nchw(inst, 0, "the input", err, errlen) || !pool_out(inst, IN(0), &inst->type, err, errlen))
    return false;
  return check_out(inst, err, errlen);
}

bool shape_avg_pool2d(Inst *i, char *e, size_t n) { return shape_max_pool2d(i, e, n); }

/* A pooling's adjoint dy (operand k) against the pooling of x it comes from. */
static bool pool_adjoint(Inst *inst, const Type *x, int k, char *err, size_t errlen) {
  char b1[128], b2[128];
  Type y;
  if (!need_nchw(inst, k, "the adjoint", err, errlen) || !pool_out(inst, x, &y, err, errlen))
    return false;
  if (!type_eq(&y, IN(k)))
    FAIL("'%s': adjoint %s does not match the pooling's result %s", NAME, ts(IN(k), b1),
         ts(&y, b2));
  inst->type = *x;
  return check_out(inst, err, errlen);
}

bool shape_max_pool2d_grad(Inst *inst, char *err, size_t errlen) {
  return need_nchw(inst, 0, "the input", err, errlen) && pool_adjoint(inst, IN(0), 1, err, errlen);
}

bool shape_avg_pool2d_grad(Inst *inst, char *err, size_t errlen) {
  int64_t size[2];
  if (!need_nchw(inst, 0, "the adjoint", err, errlen) || !pair(inst, "size", 1, size, err, errlen))
    return false;
  Type x = {DT_F32, 4, {IN(0)->dim[0], IN(0)->dim[1], size[0], size[1]}};
  return pool_adjoint(inst, &x, 0, err, errlen);
}

/* ---- data movement ---- */

static bool shape_attr(Inst *inst, Type *t, char *err, size_t errlen) {
  int n;
  const int64_t *s = ir_get_ints(inst, "shape", &n);
  if (!s)
    FAIL("'%s' needs a shape", NAME);
  if (n > IR_MAX_RANK)
    FAIL("'%s': rank %d is more than %d", NAME, n, IR_MAX_RANK);
  t->rank = n;
  for (int d = 0; d < n; d++) {
    if (s[d] < 1 && !(s[d] == 0 && may_be_empty(inst)))
      FAIL("'%s': dimension %d of the shape is %lld; sizes must be positive", NAME, d,
           (long long)s[d]);
    t->dim[d] = s[d];
  }
  inst->type = *t;
  return check_out(inst, err, errlen);
}

bool shape_reshape(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  Type t = {IN(0)->dtype, 0, {0}};
  if (!shape_attr(inst, &t, err, errlen))
    return false;
  if (type_elems(&t) != type_elems(IN(0)))
    FAIL("'reshape' of %s to %s changes the number of elements", ts(IN(0), b1), ts(&t, b2));
  return true;
}

bool shape_broadcast(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  Type t = {IN(0)->dtype, 0, {0}}, u;
  if (!shape_attr(inst, &t, err, errlen))
    return false;
  bool ok = broadcast2(IN(0), &t, &u) && u.rank == t.rank;
  for (int d = 0; ok && d < t.rank; d++)
    ok = u.dim[d] == t.dim[d];
  if (!ok)
    FAIL("'broadcast' of %s to %s is not possible", ts(IN(0), b1), ts(&t, b2));
  return true;
}

bool shape_transpose(Inst *inst, char *err, size_t errlen) {
  const Type *x = IN(0);
  int n;
  const int64_t *p = ir_get_ints(inst, "perm", &n);
  if (!p)
    FAIL("'transpose' needs a permutation");
  if (n != x->rank)
    FAIL("'transpose': permutation of %d axes for a tensor of rank %d", n, x->rank);
  bool seen[IR_MAX_RANK] = {0};
  Type t = *x;
  for (int d = 0; d < n; d++) {
    if (p[d] < 0 || p[d] >= n || seen[p[d]])
      FAIL("'transpose': [perm] is not a permutation of 0..%d", n - 1);
    seen[p[d]] = true;
    t.dim[d] = x->dim[p[d]];
  }
  inst->type = t;
  return true;
}

bool shape_slice(Inst *inst, char *err, size_t errlen) {
  const Type *x = IN(0);
  int64_t ax;
  if (!get_axis(inst, "axis", 0, x->rank, &ax, err, errlen))
    return false;
  int64_t b = ir_get_int(inst, "begin", 0), e = ir_get_int(inst, "end", x->dim[ax]);
  if (b < 0 || e > x->dim[ax] || b > e || (b == e && !may_be_empty(inst)))
    FAIL("'slice' [%lld, %lld) of axis %lld is empty or outside [0, %lld)", (long long)b,
         (long long)e, (long long)ax, (long long)x->dim[ax]);
  inst->type = *x;
  inst->type.dim[ax] = e - b;
  return check_out(inst, err, errlen);
}

bool shape_pad(Inst *inst, char *err, size_t errlen) {
  const Type *x = IN(0);
  int64_t ax;
  if (!get_axis(inst, "axis", 0, x->rank, &ax, err, errlen))
    return false;
  int64_t b = ir_get_int(inst, "begin", 0), size = ir_get_int(inst, "size", 0);
  if (b < 0 || size > IR_MAX_DIM || b > size - x->dim[ax])
    FAIL("'pad': %lld elements at %lld do not fit in %lld", (long long)x->dim[ax], (long long)b,
         (long long)size);
  double v = ir_get_float(inst, "value", 0);
  if (x->dtype == DT_I32 && !(v >= INT32_MIN && v <= INT32_MAX && v == floor(v)))
    FAIL("'pad' fills an i32 tensor with a 32-bit integer, not %g", v);
  inst->type = *x;
  inst->type.dim[ax] = size;
  return check_out(inst, err, errlen);
}

/* pad_reflect, pad_replicate, pad_circular: x's axis of length n extended to
 * size as pad's, and (grad) their _grad ops from dy back to size n: the
 * limits of each mode. */
static bool copy_pad(Inst *inst, bool grad, char *err, size_t errlen) {
  const Type *in = IN(0);
  int64_t ax;
  if ((grad && !need_f32(inst, 0, err, errlen)) ||
      !get_axis(inst, "axis", 0, in->rank, &ax, err, errlen))
    return false;
  int64_t attr = ir_get_int(inst, "size", 0), n = grad ? attr : in->dim[ax],
          size = grad ? in->dim[ax] : attr, b = ir_get_int(inst, "begin", 0);
  if (n < 1 || n > IR_MAX_DIM || size < 1 || size > IR_MAX_DIM || b < 0 || b > size - n)
    FAIL("'%s': %lld elements at %lld do not fit in %lld", NAME, (long long)n, (long long)b,
         (long long)size);
  int64_t after = size - n - b;
  bool reflect = inst->op == OP_pad_reflect || inst->op == OP_pad_reflect_grad;
  bool circular = inst->op == OP_pad_circular || inst->op == OP_pad_circular_grad;
  if (reflect && (b >= n || after >= n))
    FAIL("'%s': padding (%lld, %lld) of a dimension of %lld must be less than it", NAME,
         (long long)b, (long long)after, (long long)n);
  if (circular && (b > n || after > n))
    FAIL("'%s': padding (%lld, %lld) of a dimension of %lld wraps around more than once", NAME,
         (long long)b, (long long)after, (long long)n);
  inst->type = *in;
  inst->type.dim[ax] = grad ? n : size;
  return check_out(inst, err, errlen);
}

bool shape_pad_reflect(Inst *i, char *e, size_t n) { return copy_pad(i, false, e, n); }
bool shape_pad_replicate(Inst *i, char *e, size_t n) { return copy_pad(i, false, e, n); }
bool shape_pad_circular(Inst *i, char *e, size_t n) { return copy_pad(i, false, e, n); }
bool shape_pad_reflect_grad(Inst *i, char *e, size_t n) { return copy_pad(i, true, e, n); }
bool shape_pad_replicate_grad(Inst *i, char *e, size_t n) { return copy_pad(i, true, e, n); }
bool shape_pad_circular_grad(Inst *i, char *e, size_t n) { return copy_pad(i, true, e, n); }

bool shape_concat(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  const Type *x = IN(0);
  int64_t ax;
  if (!get_axis(inst, "axis", 0, x->rank, &ax, err, errlen))
    return false;
  Type t = *x;
  for (int k = 1; k < inst->nin; k++) {
    const Type *y = IN(k);
    bool ok = y->dtype == x->dtype && y->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++)
      ok = d == ax || y->dim[d] == x->dim[d];
    if (!ok)
      FAIL("shape mismatch in 'concat' on axis %lld: %s and %s", (long long)ax, ts(x, b1), ts(y, b2));
    if (t.dim[ax] > IR_MAX_DIM - y->dim[ax])
      FAIL("'concat' result is too large");
    t.dim[ax] += y->dim[ax];
  }
  inst->type = t;
  return check_out(inst, err, errlen);
}

/* ---- indices and integers ---- */

bool shape_int_elem(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  int64_t fn = ir_get_int(inst, "fn", -1), k = ir_get_int(inst, "k", 0);
  if (fn < 0 || fn >= DT_INT_COUNT)
    FAIL("'int_elem': fn %lld is not a function (0 to %d)", (long long)fn, DT_INT_COUNT - 1);
  if (k < INT32_MIN || k > INT32_MAX)
    FAIL("'int_elem': k = %lld does not fit in i32", (long long)k);
  for (int j = 0; j < inst->nin; j++)
    if (IN(j)->dtype != DT_I32)
      FAIL("operand %d of 'int_elem' must be i32, got %s", j + 1, ts(IN(j), b1));
  if (inst->nin == 1)
    inst->type = *IN(0);
  else if (!broadcast2(IN(0), IN(1), &inst->type))
    FAIL("shape mismatch in 'int_elem': %s and %s do not broadcast", ts(IN(0), b1), ts(IN(1), b2));
  inst->type.dtype = dtrt_int_compares((int)fn) ? DT_F32 : DT_I32;
  return check_out(inst, err, errlen);
}

bool shape_to_f32(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  if (IN(0)->dtype != DT_I32)
    FAIL("'to_f32' takes an i32 value, not %s", ts(IN(0), b1));
  inst->type = *IN(0);
  inst->type.dtype = DT_F32;
  return true;
}

bool shape_int_where(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128], b3[128];
  Type t;
  if (IN(0)->dtype != DT_F32 || IN(1)->dtype != DT_I32 || IN(2)->dtype != DT_I32)
    FAIL("'int_where' takes an f32 mask and two i32 values, not %s, %s and %s", ts(IN(0), b1),
         ts(IN(1), b2), ts(IN(2), b3));
  if (!broadcast2(IN(0), IN(1), &t) || !broadcast2(&t, IN(2), &inst->type))
    FAIL("shape mismatch in 'int_where': %s, %s and %s do not broadcast", ts(IN(0), b1),
         ts(IN(1), b2), ts(IN(2), b3));
  inst->type.dtype = DT_I32;
  return check_out(inst, err, errlen);
}

/* index i32 of x's rank, no dim longer than x's but along axis. */
static bool index_fits(Inst *inst, const Type *x, const Type *idx, int64_t *ax, char *err,
                       size_t errlen) {
  char b1[128], b2[128];
  if (idx->dtype != DT_I32 || idx->rank != x->rank)
    FAIL("'%s' needs an i32 index of rank %d, got %s", NAME, x->rank, ts(idx, b1));
  if (!get_axis(inst, "axis", 0, x->rank, ax, err, errlen))
    return false;
  for (int d = 0; d < x->rank; d++)
    if (d != *ax && idx->dim[d] > x->dim[d])
      FAIL("'%s': index %s is longer than %s in dimension %d", NAME, ts(idx, b1), ts(x, b2), d);
  return true;
}

bool shape_gather(Inst *inst, char *err, size_t errlen) {
  int64_t ax;
  if (!need_f32(inst, 0, err, errlen) || !index_fits(inst, IN(0), IN(1), &ax, err, errlen))
    return false;
  inst->type = *IN(1);
  inst->type.dtype = DT_F32;
  return true;
}

bool shape_gather_grad(Inst *inst, char *err, size_t errlen) {
  char b1[128], b2[128];
  Type t = {DT_F32, 0, {0}};
  int64_t ax;
  if (!shape_attr(inst, &t, err, errlen) || !index_fits(inst, &t, IN(0), &ax, err, errlen))
    return false;
  Type dy = *IN(0);
  dy.dtype = DT_F32;
  if (!type_eq(&dy, IN(1)))
    FAIL("'gather_grad' needs an adjoint f32 of the index's shape %s, got %s", ts(IN(0), b1),
         ts(IN(1), b2));
  return true;
}

bool shape_one_hot(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  const Type *x = IN(0);
  int64_t c = ir_get_int(inst, "classes", 0);
  if (x->dtype != DT_I32 || x->rank >= IR_MAX_RANK)
    FAIL("'one_hot' takes i32 ids of rank below %d, not %s", IR_MAX_RANK, ts(x, b1));
  if (c < 1)
    FAIL("'one_hot' needs classes of 1 or more, got %lld", (long long)c);
  inst->type = *x;
  inst->type.dtype = DT_F32;
  inst->type.dim[inst->type.rank++] = c;
  return check_out(inst, err, errlen);
}

bool shape_arange(Inst *inst, char *err, size_t errlen) {
  int64_t n = ir_get_int(inst, "size", 0);
  bool i32 = ir_get_int(inst, "i32", 0) != 0;
  double start = ir_get_float(inst, "start", 0), step = ir_get_float(inst, "step", 1);
  if (n < 1)
    FAIL("'arange' needs a size of 1 or more, got %lld", (long long)n);
  if (i32 && (start != floor(start) || step != floor(step) ||
              fabs(start) > INT32_MAX || fabs(start + (double)(n - 1) * step) > INT32_MAX))
    FAIL("'arange' of i32 needs integers start and step whose values fit in i32");
  inst->type = (Type){i32 ? DT_I32 : DT_F32, 1, {n}};
  return check_out(inst, err, errlen);
}

bool shape_cumsum(Inst *inst, char *err, size_t errlen) {
  int64_t ax;
  if (!get_axis(inst, "axis", 0, IN(0)->rank, &ax, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

static bool tri(Inst *inst, char *err, size_t errlen) {
  char b1[128];
  if (IN(0)->rank < 2)
    FAIL("'%s' needs a tensor of rank 2 or more, got %s", NAME, ts(IN(0), b1));
  inst->type = *IN(0);
  return true;
}
bool shape_tril(Inst *i, char *e, size_t n) { return tri(i, e, n); }
bool shape_triu(Inst *i, char *e, size_t n) { return tri(i, e, n); }

/* ---- communication (per-device functions) ---- */

/* This device's position along mesh axis `axis` of the module's mesh; false
 * when the function is not a per-device copy or the axis does not exist. */
static bool mesh_coord(const Inst *inst, int64_t axis, int *coord, int *size) {
  const Module *m = inst->fn->mod;
  int dev = inst->fn->device;
  if (dev < 0 || m->mesh.n < 1)
    return false;
  const Mesh *me = &m->mesh.a[0];
  if (axis < 0 || axis >= me->naxis)
    return false;
  int stride = 1;
  for (int k = me->naxis - 1; k > axis; k--)
    stride *= me->axis_size[k];
  *size = me->axis_size[axis];
  *coord = dev / stride % *size;
  return true;
}

/* Checks `sizes` against the axis group and returns this device's block and
 * the sum of all blocks. */
static bool comm_blocks(Inst *inst, int *coord, int64_t *mine, int64_t *total, char *err,
                        size_t errlen) {
  *mine = *total = 0;
  int64_t axis = ir_get_int(inst, "axis", -1);
  int size, n;
  if (!mesh_coord(inst, axis, coord, &size))
    FAIL("'%s' over mesh axis %lld outside a per-device function of a mesh", NAME, (long long)axis);
  const int64_t *s = ir_get_ints(inst, "sizes", &n);
  if (inst->op == OP_all_reduce)
    return true;
  if (n != size)
    FAIL("'%s': %d block sizes for a mesh axis of %d devices", NAME, n, size);
  *total = 0;
  for (int k = 0; k < n; k++) {
    if (s[k] < 0 || s[k] > IR_MAX_DIM)
      FAIL("'%s': block size %lld out of range", NAME, (long long)s[k]);
    *total += s[k];
  }
  *mine = s[*coord];
  return true;
}

bool shape_all_reduce(Inst *inst, char *err, size_t errlen) {
  int coord;
  int64_t mine, total;
  if (!need_f32(inst, 0, err, errlen) || !comm_blocks(inst, &coord, &mine, &total, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

/* all_gather: block -> whole; reduce_scatter: whole -> block; shard_slice:
 * whole -> block; all_to_all: block on dim -> block on `to`. */
static bool resize_dim(Inst *inst, bool gather, char *err, size_t errlen) {
  int coord;
  int64_t mine, total, dim;
  if (!comm_blocks(inst, &coord, &mine, &total, err, errlen) ||
      !get_axis(inst, "dim", 0, IN(0)->rank, &dim, err, errlen))
    return false;
  int64_t have = IN(0)->dim[dim], want = gather ? mine : total;
  if (have != want)
    FAIL("'%s': dimension %lld is %lld, expected %lld", NAME, (long long)dim, (long long)have,
         (long long)want);
  inst->type = *IN(0);
  inst->type.dim[dim] = gather ? total : mine;
  return check_out(inst, err, errlen);
}

bool shape_all_gather(Inst *i, char *e, size_t n) { return resize_dim(i, true, e, n); }
bool shape_fold_all(Inst *i, char *e, size_t n) { return shape_fold(i, e, n); }
bool shape_reduce_scatter(Inst *i, char *e, size_t n) {
  return need_f32(i, 0, e, n) && resize_dim(i, false, e, n);
}
bool shape_shard_slice(Inst *i, char *e, size_t n) { return resize_dim(i, false, e, n); }

/* all_to_all: `dim` is this device's (even) block on input and whole on
 * output; `to` is whole on input and this device's block of `sizes` on output. */
bool shape_all_to_all(Inst *inst, char *err, size_t errlen) {
  int coord, n;
  int64_t mine, total, dim, to;
  if (!comm_blocks(inst, &coord, &mine, &total, err, errlen) ||
      !get_axis(inst, "dim", 0, IN(0)->rank, &dim, err, errlen) ||
      !get_axis(inst, "to", 0, IN(0)->rank, &to, err, errlen))
    return false;
  if (dim == to)
    FAIL("'all_to_all': dim and to are the same axis");
  if (IN(0)->dim[to] != total)
    FAIL("'all_to_all': dimension %lld is %lld, expected %lld", (long long)to,
         (long long)IN(0)->dim[to], (long long)total);
  ir_get_ints(inst, "sizes", &n);
  inst->type = *IN(0);
  inst->type.dim[to] = mine;
  inst->type.dim[dim] = IN(0)->dim[dim] * n;
  int nd;
  const int64_t *from = ir_get_ints(inst, "dim_sizes", &nd);
  if (from) { /* uneven blocks along dim: their lengths */
    if (nd != n)
      FAIL("'all_to_all': dim_sizes has %d lengths for a group of %d", nd, n);
    if (from[coord] != IN(0)->dim[dim])
      FAIL("'all_to_all': dimension %lld is %lld, but dim_sizes gives member %d %lld",
           (long long)dim, (long long)IN(0)->dim[dim], coord, (long long)from[coord]);
    inst->type.dim[dim] = 0;
    for (int k = 0; k < nd; k++)
      inst->type.dim[dim] += from[k];
  }
  return check_out(inst, err, errlen);
}

/* send: between two members of the axis group, this device one of them;
 * bcast: from a member. Both keep the operand's type. */
static bool member_ok(Inst *inst, const char *attr, int size, char *err, size_t errlen) {
  int64_t v = ir_get_int(inst, attr, -1);
  if (v < 0 || v >= size)
    FAIL("'%s': %s = %lld is not a member of a mesh axis of %d devices", NAME, attr,
         (long long)v, size);
  return true;
}

bool shape_send(Inst *inst, char *err, size_t errlen) {
  int coord, size;
  int64_t axis = ir_get_int(inst, "axis", -1);
  if (!mesh_coord(inst, axis, &coord, &size))
    FAIL("'%s' over mesh axis %lld outside a per-device function of a mesh", NAME, (long long)axis);
  if (!member_ok(inst, "from", size, err, errlen) || !member_ok(inst, "to", size, err, errlen))
    return false;
  int64_t from = ir_get_int(inst, "from", 0), to = ir_get_int(inst, "to", 0);
  if (from == to)
    FAIL("'send' from member %lld to itself", (long long)from);
  if (coord != from && coord != to)
    FAIL("'send' from member %lld to %lld on member %d, which is neither", (long long)from,
         (long long)to, coord);
  inst->type = *IN(0);
  return true;
}

bool shape_bcast(Inst *inst, char *err, size_t errlen) {
  int coord, size;
  int64_t axis = ir_get_int(inst, "axis", -1);
  if (!mesh_coord(inst, axis, &coord, &size))
    FAIL("'%s' over mesh axis %lld outside a per-device function of a mesh", NAME, (long long)axis);
  if (!member_ok(inst, "from", size, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}

/* ---- batch norm ---- */

bool shape_batch_stat(Inst *inst, char *err, size_t errlen) {
  if (!need_f32(inst, 0, err, errlen) || !same_type(inst, 0, 1, err, errlen))
    return false;
  inst->type = *IN(0);
  return true;
}
