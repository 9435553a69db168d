/* lower_tensor.c: the lowering of the built-in functions that reduce and
 * reshape tensors: sum, mean, max, reshape, transpose, slice, concat,
 * flatten, pad, matmul. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lower_int.h"

/* Axes of x: one (an int, unless only a list may stand) or the list e,
 * `what` in messages; negative ones count from the end; sorted, each once. */
bool axes_arg(Ctx *c, const Expr *e, const char *what, bool list, const Inst *x, int64_t *axes,
              int *n) {
  if (!list && e->kind != E_LIST) {
    *n = 1;
    return axis_arg(c, e, x, &axes[0]);
  }
  if (!ints_arg(c, e, what, axes, n))
    return false;
  for (int k = 0; k < *n; k++) {
    int64_t r = x->type.rank;
    if (axes[k] < -r || axes[k] >= r) {
      char buf[128];
      diag_error(c->d, e->args.a[k].loc, "axis %lld is out of range for %s", (long long)axes[k],
                 type_str(&x->type, buf, sizeof buf));
      return false;
    }
    axes[k] = axes[k] < 0 ? axes[k] + r : axes[k];
    for (int j = 0; j < k; j++)
      if (axes[j] == axes[k]) {
        diag_error(c->d, e->args.a[k].loc, "axis %lld appears twice", (long long)axes[k]);
        return false;
      }
  }
  for (int k = 1; k < *n; k++)
    for (int j = k; j > 0 && axes[j - 1] > axes[j]; j--) {
      int64_t t = axes[j];
      axes[j] = axes[j - 1];
      axes[j - 1] = t;
    }
  return true;
}

/* The axes of a reduction of x: `axis` (one), `axes` (a list) or torch's
 * `dim` (either), at most one of them; none: every axis. */
bool reduce_axes(Ctx *c, const Expr *axis, const Expr *axes, const Expr *dim, const Inst *x,
                 int64_t *out, int *n) {
  if (axis && axes) {
    diag_error(c->d, axes->loc, "give 'axis' or 'axes', not both");
    return false;
  }
  if (dim && (axis || axes)) {
    diag_error(c->d, dim->loc, "give 'dim' or '%s', not both", axis ? "axis" : "axes");
    return false;
  }
  *n = 1;
  if (axis)
    return axis_arg(c, axis, x, &out[0]);
  if (dim)
    return axes_arg(c, dim, "dim", false, x, out, n);
  if (axes)
    return axes_arg(c, axes, "axes", true, x, out, n);
  for (*n = 0; *n < x->type.rank; (*n)++)
    out[*n] = *n;
  return true;
}

/* sum, mean, max: over `axis`, the list `axes`, `dim` (either), or
 * everything. Reductions of i32 values are errors: torch's sum of int32
 * is int64, which an i32 sum would wrap past 2^31 and an f32 one round past
 * 2^24; torch's mean refuses integers; dtc's max reduces f32 values only. */
Inst *lower_reduce(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  Op op = b->op;
  Inst *x = in[0];
  int64_t axes[IR_MAX_RANK];
  int n = 0;
  bool keep = false;
  if (x->type.dtype == DT_I32) {
    char buf[128];
    if (op == OP_max)
      diag_error(c->d, arg[0]->loc, "'max' of %s: dtc's max reduces f32 values, where torch's "
                 "keeps int32; make it f32 first (y * 1.0: exact for integers within 2^24)",
                 type_str(&x->type, buf, sizeof buf));
    else if (op == OP_mean)
      diag_error(c->d, arg[0]->loc, "'mean' of %s: as torch's, it needs a floating-point input, "
                 "not an integer one; make it f32 first (y * 1.0)",
                 type_str(&x->type, buf, sizeof buf));
    else
      diag_error(c->d, arg[0]->loc, "'sum' of %s: torch's sum of int32 is int64, which dtc does "
                 "not have; make it f32 first (y * 1.0: exact while the sum stays within 2^24)",
                 type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if (!reduce_axes(c, arg[1], arg[2], arg[4], x, axes, &n))
    return NULL;
  if (arg[3] && !bool_arg(c, arg[3], "keepdim", &keep))
    return NULL;
  Inst *i = ir_new(c->f, op, e->loc, 1, &x);
  ir_set_ints(i, "axes", axes, n);
  if (keep)
    ir_set_int(i, "keepdim", 1);
  return finish(c, i);
}

/* reshape(x, [..]): one entry may be -1, inferred from the element count. */
Inst *lower_reshape(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  const Expr *shape = arg[1];
  int64_t dim[IR_MAX_RANK], known = 1;
  int n, infer = -1;
  if (!ints_arg(c, shape, "shape", dim, &n))
    return NULL;
  for (int k = 0; k < n; k++) {
    Loc at = shape->args.a[k].loc;
    if (dim[k] == -1 && infer < 0) {
      infer = k;
    } else if (dim[k] == -1) {
      diag_error(c->d, at, "only one entry of a shape can be -1");
      return NULL;
    } else if (!dim_ok(c, dim[k], at)) {
      return NULL;
    } else if (__builtin_mul_overflow(known, dim[k], &known) || known > IR_MAX_ELEMS) {
      diag_error(c->d, at, "shape has more than %lld elements", (long long)IR_MAX_ELEMS);
      return NULL;
    }
  }
  if (infer >= 0) {
    int64_t total = type_elems(&x->type);
    if (total % known) {
      char buf[128];
      diag_error(c->d, shape->args.a[infer].loc,
                 "cannot infer -1: %s has %lld elements, not a multiple of %lld",
                 type_str(&x->type, buf, sizeof buf), (long long)total, (long long)known);
      return NULL;
    }
    dim[infer] = total / known;
  }
  Inst *i = ir_new(c->f, OP_reshape, e->loc, 1, &x);
  ir_set_ints(i, "shape", dim, n);
  return finish(c, i);
}

/* transpose(x, perm): without perm, the last two axes swap. */
Inst *lower_transpose(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  const Expr *perm = arg[1];
  int64_t p[IR_MAX_RANK];
  int n, r = x->type.rank;
  char buf[128];
  if (!perm) {
    if (r < 2) {
      diag_error(c->d, e->loc, "transpose of %s needs a 'perm'", type_str(&x->type, buf, sizeof buf));
      return NULL;
    }
    for (n = 0; n < r; n++)
      p[n] = n;
    p[r - 2] = r - 1;
    p[r - 1] = r - 2;
  } else {
    if (!ints_arg(c, perm, "perm", p, &n))
      return NULL;
    bool seen[IR_MAX_RANK] = {0}, ok = n == r;
    for (int k = 0; ok && k < n; k++) {
      p[k] = p[k] < 0 ? p[k] + r : p[k];
      ok = p[k] >= 0 && p[k] < r && !seen[p[k]];
      if (ok)
        seen[p[k]] = true;
    }
    if (!ok) {
      diag_error(c->d, perm->loc, "'perm' must order all %d axes of %s", r,
                 type_str(&x->type, buf, sizeof buf));
      return NULL;
    }
  }
  Inst *i = ir_new(c->f, OP_transpose, e->loc, 1, &x);
  ir_set_ints(i, "perm", p, n);
  return finish(c, i);
}

/* slice(x, axis, begin, end): [begin, end) of one axis; negative indices
 * count from the end. */
Inst *lower_slice(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  int64_t axis = 0, begin = 0, end;
  char buf[128];
  if (x->type.rank == 0) {
    diag_error(c->d, e->loc, "cannot slice %s", type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if (arg[1] && !axis_arg(c, arg[1], x, &axis))
    return NULL;
  int64_t size = x->type.dim[axis];
  end = size;
  if ((arg[2] && !int_arg(c, arg[2], "'begin'", &begin)) || (arg[3] && !int_arg(c, arg[3], "'end'", &end)))
    return NULL;
  int64_t bg = begin + (begin < 0 ? size : 0), en = end + (end < 0 ? size : 0);
  if (bg < 0 || bg >= en || en > size) {
    diag_error(c->d, e->loc, "slice [%lld, %lld) of axis %lld is empty or outside %s",
               (long long)begin, (long long)end, (long long)axis, type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  begin = bg;
  end = en;
  Inst *i = ir_new(c->f, OP_slice, e->loc, 1, &x);
  ir_set_int(i, "axis", axis);
  ir_set_int(i, "begin", begin);
  ir_set_int(i, "end", end);
  return finish(c, i);
}

/* concat(a, b, ..., axis = k): any number of tensors, then the axis by name
 * (`axis`, or torch.cat's `dim`). */
Inst *lower_concat(Ctx *c, const Expr *e, const Builtin *b, Inst **none, Expr **unbound) {
  (void)b, (void)none, (void)unbound;
  Inst *in[16];
  int n = 0, max = ir_ops[OP_concat].maxin;
  const Expr *axis = NULL;
  const char *given = NULL;   /* the name axis was given by */
  bool ok = true;
  for (int k = 0; k < e->args.n; k++) {
    const Arg *arg = &e->args.a[k];
    bool named = arg->name && (!strcmp(arg->name, "axis") || !strcmp(arg->name, "dim"));
    if (named && !axis) {
      axis = arg->val;
      given = arg->name;
    } else if (named && !strcmp(arg->name, given)) {
      diag_error(c->d, arg->loc, "argument '%s' is given twice", given);
      ok = false;
    } else if (named) {
      diag_error(c->d, arg->loc, "give 'dim' or 'axis', not both");
      ok = false;
    } else if (arg->name) {
      diag_error(c->d, arg->loc, "unknown argument '%s' of 'concat'", arg->name);
      ok = false;
    } else if (n == max) {
      diag_error(c->d, arg->loc, "'concat' takes at most %d tensors", max);
      return NULL;
    } else {
      in[n] = lower_expr(c, arg->val);
      ok &= in[n++] != NULL;
    }
  }
  if (ok && n == 0) {
    diag_error(c->d, e->loc, "'concat' needs at least one tensor");
    return NULL;
  }
  int64_t ax = 0;
  if (!ok || (axis && !axis_arg(c, axis, in[0], &ax)))
    return NULL;
  Inst *i = ir_new(c->f, OP_concat, e->loc, n, in);
  ir_set_int(i, "axis", ax);
  return finish(c, i);
}

/* flatten(input, start_dim = 1, end_dim = -1): dims start_dim .. end_dim
 * made one. */
Inst *lower_flatten(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  int64_t lo = x->type.rank > 1 ? 1 : 0, hi = x->type.rank - 1;
  char buf[128];
  if (x->type.rank == 0) {
    diag_error(c->d, e->loc, "cannot flatten %s", type_str(&x->type, buf, sizeof buf));
    return NULL;
  }
  if ((arg[1] && !axis_arg(c, arg[1], x, &lo)) || (arg[2] && !axis_arg(c, arg[2], x, &hi)))
    return NULL;
  if (lo > hi) {
    diag_error(c->d, e->loc, "'start_dim' (%lld) comes after 'end_dim' (%lld)", (long long)lo,
               (long long)hi);
    return NULL;
  }
  int64_t dim[IR_MAX_RANK];
  int n = 0;
  for (int d = 0; d < x->type.rank; d++)
    if (d <= lo || d > hi)
      dim[n++] = x->type.dim[d];
    else
      dim[n - 1] *= x->type.dim[d];
  Inst *i = ir_new(c->f, OP_reshape, e->loc, 1, &x);
  ir_set_ints(i, "shape", dim, n);
  return finish(c, i);
}

/* The modes of pad: constant, then the ones that copy (their op, and the
 * ranks torch.nn.functional.pad takes for k padded dims: k + 1 and k + 2,
 * or only k + 2, for k from 1 to 3). */
static const struct {
  const char *name;
  Op op;
  int lead_lo;
} pad_modes[] = {
    {"constant", OP_pad, 0},
    {"reflect", OP_pad_reflect, 1},
    {"replicate", OP_pad_replicate, 1},
    {"circular", OP_pad_circular, 2},
};

/* One op on axis of x: slice [lo, hi) of it, or op (pad, pad_MODE) of it
 * at begin into size; pad's value v is its attribute unless it is +0, the
 * default. */
static Inst *pad_step(Ctx *c, Loc at, Inst *x, Op op, int64_t axis, int64_t lo, int64_t hi,
                      double v) {
  Inst *i = ir_new(c->f, op, at, 1, &x);
  ir_set_int(i, "axis", axis);
  ir_set_int(i, "begin", lo);
  ir_set_int(i, op == OP_slice ? "end" : "size", hi);
  if (op == OP_pad && (v != 0 || signbit(v)))
    ir_set_float(i, "value", v);
  return finish(c, i);
}

/* pad(input, pad, mode = "constant", value = 0), as F.pad: pad lists
 * (before, after) pairs from the last dim back; a negative one crops. The
 * constant mode fills with value, any f32 including -inf and inf (pad's
 * attribute). The other modes fill with copies of x's elements where F.pad
 * does: reflect and replicate pad x and then crop (a reflection is about x's
 * own end), circular crops first and wraps what is left. */
Inst *lower_pad(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  (void)b;
  Inst *x = in[0];
  int64_t p[2 * IR_MAX_RANK];
  double v = 0;
  char buf[128];
  const Expr *pe = arg[1];
  const Type xt = x->type;
  int mode = 0, rank = xt.rank;
  if (pe->kind != E_LIST || pe->args.n % 2 || pe->args.n > 2 * rank) {
    diag_error(c->d, pe->loc,
               "'pad' must be a list of (before, after) pairs, one pair per "
               "dimension from the last, at most %d entries for %s",
               2 * rank, type_str(&xt, buf, sizeof buf));
    return NULL;
  }
  for (int k = 0; k < pe->args.n; k++)
    if (!int_arg(c, pe->args.a[k].val, "an entry of 'pad'", &p[k]))
      return NULL;
  if (arg[2]) {
    const Expr *m = arg[2];
    bool named = m->kind == E_STR || m->kind == E_IDENT;
    while (named && mode < COUNTOF(pad_modes) && strcmp(m->s, pad_modes[mode].name))
      mode++;
    if (!named || mode == COUNTOF(pad_modes)) {
      diag_error(c->d, m->loc,
                 "'mode' must be \"constant\", \"reflect\", \"replicate\" or "
                 "\"circular\"");
      return NULL;
    }
  }
  if (arg[3] && !real_arg(c, arg[3], "'value'", &v))
    return NULL;
  if (xt.dtype == DT_I32 && !(v >= INT32_MIN && v <= INT32_MAX && v == floor(v))) {
    diag_error(c->d, arg[3]->loc, "'value' of a pad of %s must be a 32-bit integer, not %g",
               type_str(&xt, buf, sizeof buf), v);
    return NULL;
  }
  if (isfinite(v) && isinf((float)v)) {
    diag_error(c->d, arg[3]->loc,
               "'value' %g is beyond the range of f32 (%g in magnitude); an infinity is "
               "written -inf or inf",
               v, FLT_MAX);
    return NULL;
  }
  Op op = pad_modes[mode].op;
  int npad = pe->args.n / 2, lo_rank = npad + pad_modes[mode].lead_lo;
  if (mode && v != 0) {
    diag_error(c->d, arg[3]->loc, "mode \"%s\" takes no 'value' (only \"constant\" does)",
               pad_modes[mode].name);
    return NULL;
  }
  if (mode && (npad < 1 || npad > 3)) {
    diag_error(c->d, pe->loc, "mode \"%s\" pads 1, 2 or 3 dimensions, not %d", pad_modes[mode].name,
               npad);
    return NULL;
  }
  if (mode && (rank < lo_rank || rank > npad + 2)) {
    diag_error(c->d, pe->loc, "mode \"%s\" pads %d dimension%s of an input of rank %d%s, not %s",
               pad_modes[mode].name, npad, npad > 1 ? "s" : "", lo_rank,
               lo_rank < npad + 2 ? arena_printf(c->a, " or %d", npad + 2) : "",
               type_str(&xt, buf, sizeof buf));
    return NULL;
  }
  for (int k = 0; k < npad; k++) {
    int64_t axis = rank - 1 - k, n = x->type.dim[axis], lo = p[2 * k], hi = p[2 * k + 1];
    bool big = lo > IR_MAX_DIM || hi > IR_MAX_DIM || lo < -IR_MAX_DIM || hi < -IR_MAX_DIM;
    bool crop_first = op == OP_pad || op == OP_pad_circular;
    int64_t clo = !big && lo < 0 ? -lo : 0, chi = !big && hi < 0 ? -hi : 0,
            plo = !big && lo > 0 ? lo : 0, phi = !big && hi > 0 ? hi : 0;
    /* what the crop leaves: of x, or of x padded */
    if (big || (crop_first ? n - clo - chi : n + lo + hi) < 1) {
      diag_error(c->d, pe->args.a[2 * k].loc,
                 "padding (%lld, %lld) leaves nothing of dimension "
                 "%lld of %s",
                 (long long)lo, (long long)hi, (long long)axis, type_str(&xt, buf, sizeof buf));
      return NULL;
    }
    int64_t m = n - clo - chi;
    for (int side = 0; side < 2; side++) {
      int64_t q = side ? phi : plo;
      Loc at = pe->args.a[2 * k + side].loc;
      if (op == OP_pad_reflect && q >= n) {
        diag_error(c->d, at,
                   "reflect padding %lld of dimension %lld of %s must be less than its "
                   "size %lld",
                   (long long)q, (long long)axis, type_str(&xt, buf, sizeof buf), (long long)n);
        return NULL;
      }
      if (op == OP_pad_circular && q > m) {
        diag_error(c->d, at,
                   "circular padding %lld of dimension %lld of %s wraps around more "
                   "than once: at most %lld%s",
                   (long long)q, (long long)axis, type_str(&xt, buf, sizeof buf), (long long)m,
                   m < n ? ", the size the other side's crop leaves" : ", its size");
        return NULL;
      }
    }
    if (crop_first && (clo || chi) &&
        !(x = pad_step(c, e->loc, x, OP_slice, axis, clo, n - chi, 0)))
      return NULL;
    if ((plo || phi) &&
        !(x = pad_step(c, e->loc, x, op, axis, plo, x->type.dim[axis] + plo + phi, v)))
      return NULL;
    if (!crop_first && (clo || chi) &&
        !(x = pad_step(c, e->loc, x, OP_slice, axis, clo, x->type.dim[axis] - chi, 0)))
      return NULL;
  }
  return x;
}

/* matmul(a, b, ta = false, tb = false): a or b transposed in its last two
 * dims when asked. */
Inst *lower_matmul(Ctx *c, const Expr *e, const Builtin *b, Inst **in, Expr **arg) {
  bool ta = false, tb = false;
  if ((arg[2] && !bool_arg(c, arg[2], "ta", &ta)) || (arg[3] && !bool_arg(c, arg[3], "tb", &tb)))
    return NULL;
  Inst *i = ir_new(c->f, b->op, e->loc, 2, in);
  if (ta)
    ir_set_int(i, "ta", 1);
  if (tb)
    ir_set_int(i, "tb", 1);
  return finish(c, i);
}

/* One item of an index of x along axis: an integer i (-size <= i < size),
 * which keeps [i, i + 1), or a range begin:end, negative ends counting from
 * the end, each clamped to [0, size] as torch's; an empty range is an
 * error. *drop: the axis goes. */
static bool index_item(Ctx *c, const Expr *it, const Inst *x, int axis, int64_t *begin,
                       int64_t *end, bool *drop) {
  int64_t size = x->type.dim[axis], b = 0, e = size;
  char buf[128];
  *drop = it->kind != E_RANGE;
  if (*drop) {
    if (!int_arg(c, it, "an index", &b))
      return false;
    if (b < -size || b >= size) {
      diag_error(c->d, it->loc, "index %lld is out of range for dim %d of %s", (long long)b, axis,
                 type_str(&x->type, buf, sizeof buf));
      return false;
    }
    *begin = b < 0 ? b + size : b;
    *end = *begin + 1;
    return true;
  }
  if ((it->lhs && !int_arg(c, it->lhs, "a slice's start", &b)) ||
      (it->rhs && !int_arg(c, it->rhs, "a slice's end", &e)))
    return false;
  b = b < 0 ? b + size : b;
  e = e < 0 ? e + size : e;
  *begin = b < 0 ? 0 : b > size ? size : b;
  *end = e < 0 ? 0 : e > size ? size : e;
  if (*begin >= *end) {
    diag_error(c->d, it->loc, "the slice is empty: dim %d of %s keeps nothing of [%lld, %lld)",
               axis, type_str(&x->type, buf, sizeof buf), (long long)*begin, (long long)*end);
    return false;
  }
  return true;
}

Inst *lower_index(Ctx *c, const Expr *e) {
  Inst *in = lower_expr(c, e->lhs), *x = in;
  if (!x)
    return NULL;
  int n = e->args.n, dots = -1, rank = x->type.rank;
  char buf[128];
  for (int k = 0; k < n; k++)
    if (e->args.a[k].val->kind == E_DOTS) {
      if (dots >= 0) {
        diag_error(c->d, e->args.a[k].loc, "an index has at most one '...'");
        return NULL;
      }
      dots = k;
    }
  int items = n - (dots >= 0);
  if (items > rank) {
    diag_error(c->d, e->loc, "too many indices for %s: %d", type_str(&x->type, buf, sizeof buf),
               items);
    return NULL;
  }
  int64_t dim[IR_MAX_RANK];
  int nd = 0;
  bool dropped = false;
  for (int d = 0; d < rank; d++)
    dim[d] = x->type.dim[d];
  for (int k = 0, axis = 0; k < n; k++) {
    const Expr *it = e->args.a[k].val;
    if (it->kind == E_DOTS) {
      axis += rank - items;
      continue;
    }
    int64_t begin, end;
    bool drop;
    if (!index_item(c, it, in, axis, &begin, &end, &drop))
      return NULL;
    dim[axis] = drop ? -1 : end - begin;
    dropped |= drop;
    if (end - begin < x->type.dim[axis]) {
      Inst *s = ir_new(c->f, OP_slice, e->loc, 1, &x);
      ir_set_int(s, "axis", axis);
      ir_set_int(s, "begin", begin);
      ir_set_int(s, "end", end);
      if (!(x = finish(c, s)))
        return NULL;
    }
    axis++;
  }
  if (!dropped)
    return x;
  for (int d = 0; d < rank; d++)
    if (dim[d] >= 0)
      dim[nd++] = dim[d];
  Inst *r = ir_new(c->f, OP_reshape, e->loc, 1, &x);
  ir_set_ints(r, "shape", dim, nd);
  return finish(c, r);
}
