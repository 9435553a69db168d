/* interp.c: the reference interpreter. Runs a function one op at a time on
 * host buffers: elementwise ops through ir_elem_eval, the others through the
 * libdtrt kernels, so it checks the IR's meaning, not the code generator's. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "../runtime/dtrt.h"

typedef DtStatus (*Kernel)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

static const Kernel kernels[OP_COUNT] = {
  [OP_sum] = dtrt_k_sum,
  [OP_mean] = dtrt_k_mean,
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
  [OP_normalize] = dtrt_k_normalize,
  [OP_normalize_grad] = dtrt_k_normalize_grad,
  [OP_embedding] = dtrt_k_embedding,
  [OP_embedding_grad] = dtrt_k_embedding_grad,
  [OP_dropout] = dtrt_k_dropout,
  [OP_dropout_grad] = dtrt_k_dropout_grad,
  [OP_causal_mask] = dtrt_k_causal_mask,
  [OP_reshape] = dtrt_k_reshape,
  [OP_transpose] = dtrt_k_transpose,
  [OP_slice] = dtrt_k_slice,
  [OP_pad] = dtrt_k_pad,
  [OP_concat] = dtrt_k_concat,
  [OP_broadcast] = dtrt_k_broadcast,
};

struct Interp {
  Module *m;
  DtrtCtx *ctx;
  void **buf;        /* by global index */
  int nbuf;
  int device;        /* mesh position whose blocks buf holds; -1: whole globals */
  int64_t step;
  char err[512];
};

static void *zalloc(int64_t elems) {
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
    it->buf[k] = zalloc(type_elems(&t));
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
    DTC_ASSERT(ir_ops[k].kind == K_ELEM || ir_ops[k].kind == K_META ||
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
    out[e] = ir_elem_eval(inst->op, in[0][pos[0]], inst->nin > 1 ? in[1][pos[1]] : 0);
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

static int schedule_kind(const char *s) {
  return !strcmp(s, "warmup") ? 1 : !strcmp(s, "cosine") ? 2 : 0;
}

/* Evaluates inst into val[inst->id]; false with it->err set on a kernel error. */
static bool eval(Interp *it, const Inst *inst, void **val, void *const *outputs, int *nout,
                 bool *stored) {
  size_t bytes = (size_t)type_elems(&inst->type) * 4;
  const Global *g;
  switch (inst->op) {
  case OP_load:
    g = ir_find_global(it->m, ir_get_str(inst, "global", ""));
    val[inst->id] = zalloc(type_elems(&inst->type));
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
  float *out = zalloc(type_elems(&inst->type));
  val[inst->id] = out;
  if (inst->op == OP_const) {
    *out = (float)ir_get_float(inst, "value", 0);
  } else if (inst->op == OP_lr) {
    *out = dtrt_lr(schedule_kind(ir_get_str(inst, "schedule", "constant")),
                   ir_get_float(inst, "base", 0), ir_get_int(inst, "warmup", 0),
                   ir_get_int(inst, "total", 0), ir_get_float(inst, "beta1", 0),
                   ir_get_float(inst, "beta2", 0), it->step);
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
    DtStatus s = kernels[inst->op](it->ctx, in, inst->nin, &o, &a);
    if (s) {
      snprintf(it->err, sizeof it->err, "%s: %s", ir_ops[inst->op].name, dtrt_errmsg(it->ctx));
      return false;
    }
  }
  return true;
}

/* One function running on one interpreter. */
typedef struct Run {
  Interp *it;
  Func *f;
  void **val;          /* by inst id */
  void *const *outputs;
  int pc, nout;
  bool stored;
} Run;

static void run_begin(Run *r, Interp *it, Func *f, void *const *outputs) {
  sync_globals(it);
  ir_renumber(f);
  *r = (Run){.it = it, .f = f, .outputs = outputs};
  r->val = calloc((size_t)f->inst.n + 1, sizeof *r->val);
  DTC_ASSERT(r->val);
}

/* Evaluates up to the end or the next collective. */
static bool run_to_comm(Run *r) {
  for (; r->pc < r->f->inst.n; r->pc++) {
    const Inst *i = r->f->inst.a[r->pc];
    if (ir_ops[i->op].kind == K_COMM)
      return true;
    if (!eval(r->it, i, r->val, r->outputs, &r->nout, &r->stored))
      return false;
  }
  return true;
}

static void run_end(Run *r, bool ok) {
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
  run_begin(&r, it, f, outputs);
  bool ok = run_to_comm(&r);
  if (ok && r.pc < f->inst.n) {
    snprintf(it->err, sizeof it->err, "%s: the interpreter runs global functions only",
             ir_ops[f->inst.a[r.pc]->op].name);
    ok = false;
  }
  run_end(&r, ok);
  return ok;
}

/* ---- SPMD simulation: every device of the mesh in one process ---- */

struct Spmd {
  Module *m;
  const Mesh *mesh;
  int ndev;
  Interp **dev;
  char err[512];
};

/* Copies the box of extents ext at sb in src (type st) to db in dst (type dt);
 * elements are 4 bytes. */
static void box_copy(void *dst, const Type *dt, const int64_t *db, const void *src,
                     const Type *st, const int64_t *sb, const int64_t *ext) {
  int rank = dt->rank;
  int64_t ds[IR_MAX_RANK + 1], ss[IR_MAX_RANK + 1], idx[IR_MAX_RANK] = {0};
  ds[rank] = ss[rank] = 1;
  for (int d = rank - 1; d >= 0; d--) {
    ds[d] = ds[d + 1] * dt->dim[d];
    ss[d] = ss[d + 1] * st->dim[d];
    if (ext[d] == 0)
      return;
  }
  int64_t run = rank ? ext[rank - 1] : 1;
  for (;;) {
    int64_t o = 0, i = 0;
    for (int d = 0; d < rank; d++) {
      o += (db[d] + idx[d]) * ds[d + 1];
      i += (sb[d] + idx[d]) * ss[d + 1];
    }
    memcpy((char *)dst + o * 4, (const char *)src + i * 4, (size_t)run * 4);
    int d = rank - 2;
    for (; d >= 0 && ++idx[d] == ext[d]; d--)
      idx[d] = 0;
    if (d < 0)
      return;
  }
}

Spmd *spmd_sim_new(Module *m) {
  DTC_ASSERT(m->mesh.n == 1);
  Spmd *s = calloc(1, sizeof *s);
  DTC_ASSERT(s);
  s->m = m;
  s->mesh = &m->mesh.a[0];
  s->ndev = 1;
  for (int a = 0; a < s->mesh->naxis; a++)
    s->ndev *= s->mesh->axis_size[a];
  s->dev = calloc((size_t)s->ndev, sizeof *s->dev);
  DTC_ASSERT(s->dev);
  for (int d = 0; d < s->ndev; d++)
    s->dev[d] = interp_new_device(m, d);
  return s;
}

void spmd_sim_free(Spmd *s) {
  if (!s)
    return;
  for (int d = 0; d < s->ndev; d++)
    interp_free(s->dev[d]);
  free(s->dev);
  free(s);
}

int spmd_sim_devices(const Spmd *s) { return s->ndev; }
Interp *spmd_sim_device(Spmd *s, int device) { return s->dev[device]; }
const char *spmd_sim_error(const Spmd *s) { return s->err; }

static const Global *sim_global(Spmd *s, const char *name) {
  const Global *g = ir_find_global(s->m, name);
  if (!g)
    snprintf(s->err, sizeof s->err, "no global '%s'", name);
  return g;
}

bool spmd_sim_set_global(Spmd *s, const char *name, const void *full) {
  const Global *g = sim_global(s, name);
  int64_t zero[IR_MAX_RANK] = {0}, begin[IR_MAX_RANK];
  for (int d = 0; g && d < s->ndev; d++) {
    Type t;
    ir_local_type(s->m, g->shard, &g->type, d, &t, begin);
    box_copy(interp_global(s->dev[d], name), &t, zero, full, &g->type, begin, t.dim);
  }
  return g != NULL;
}

bool spmd_sim_get_global(Spmd *s, const char *name, void *full) {
  const Global *g = sim_global(s, name);
  int64_t zero[IR_MAX_RANK] = {0}, begin[IR_MAX_RANK];
  for (int d = 0; g && d < s->ndev; d++) {
    Type t;
    ir_local_type(s->m, g->shard, &g->type, d, &t, begin);
    box_copy(full, &g->type, begin, interp_global(s->dev[d], name), &t, zero, t.dim);
  }
  return g != NULL;
}

static bool sim_fail(Spmd *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return false;
}

/* Start of each member's block along a dimension cut into `sizes`. */
static int64_t block_start(const int64_t *sizes, int member) {
  int64_t at = 0;
  for (int c = 0; c < member; c++)
    at += sizes[c];
  return at;
}

static bool same_attrs(const Inst *a, const Inst *b) {
  if (a->op != b->op || ir_get_int(a, "axis", -1) != ir_get_int(b, "axis", -1) ||
      ir_get_int(a, "dim", -1) != ir_get_int(b, "dim", -1) ||
      ir_get_int(a, "to", -1) != ir_get_int(b, "to", -1))
    return false;
  int na, nb;
  const int64_t *sa = ir_get_ints(a, "sizes", &na), *sb = ir_get_ints(b, "sizes", &nb);
  return na == nb && (!na || !memcmp(sa, sb, sizeof *sa * (size_t)na));
}

/* Runs the collective every member of a group stands at: members[c] is the
 * device at coordinate c along the collective's axis. */
static void collective(Run *runs, const int *members, int k) {
  const Inst *c0 = runs[members[0]].f->inst.a[runs[members[0]].pc];
  int n;
  const int64_t *sizes = ir_get_ints(c0, "sizes", &n);
  int dim = (int)ir_get_int(c0, "dim", 0), to = (int)ir_get_int(c0, "to", 0);
  float *sum = NULL;
  if (c0->op == OP_all_reduce || c0->op == OP_reduce_scatter) {
    int64_t e = type_elems(&c0->in[0]->type);
    sum = zalloc(e);
    for (int c = 0; c < k; c++) {
      const Run *r = &runs[members[c]];
      const float *x = r->val[r->f->inst.a[r->pc]->in[0]->id];
      for (int64_t q = 0; q < e; q++)
        sum[q] += x[q];
    }
  }
  for (int c = 0; c < k; c++) {
    Run *r = &runs[members[c]];
    const Inst *ci = r->f->inst.a[r->pc];
    const Type *ot = &ci->type;
    void *out = zalloc(type_elems(ot));
    int64_t ob[IR_MAX_RANK] = {0}, ib[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
    if (c0->op == OP_all_reduce) {
      memcpy(out, sum, (size_t)type_elems(ot) * 4);
    } else if (c0->op == OP_reduce_scatter) {
      ib[dim] = block_start(sizes, c);
      box_copy(out, ot, ob, sum, &ci->in[0]->type, ib, ot->dim);
    } else {
      int64_t at = 0;
      for (int j = 0; j < k; j++) {
        const Run *rj = &runs[members[j]];
        const Inst *cj = rj->f->inst.a[rj->pc];
        const Type *it = &cj->in[0]->type;
        memcpy(ext, it->dim, sizeof ext);
        memset(ib, 0, sizeof ib);
        ob[dim] = at;
        at += it->dim[dim];
        if (c0->op == OP_all_to_all) {
          ext[to] = sizes[c];
          ib[to] = block_start(sizes, c);
        }
        box_copy(out, ot, ob, rj->val[cj->in[0]->id], it, ib, ext);
      }
    }
    r->val[ci->id] = out;
  }
  free(sum);
  for (int c = 0; c < k; c++)
    runs[members[c]].pc++;
}

/* A device's block of a whole value: local, no communication. */
static void shard_slice(Spmd *s, Run *r) {
  const Inst *c = r->f->inst.a[r->pc];
  int n, coord[IR_MAX_MESH_AXES];
  const int64_t *sizes = ir_get_ints(c, "sizes", &n);
  ir_mesh_coords(s->mesh, r->f->device, coord);
  int64_t ob[IR_MAX_RANK] = {0}, ib[IR_MAX_RANK] = {0};
  int dim = (int)ir_get_int(c, "dim", 0);
  ib[dim] = block_start(sizes, coord[ir_get_int(c, "axis", 0)]);
  void *out = zalloc(type_elems(&c->type));
  box_copy(out, &c->type, ob, r->val[c->in[0]->id], &c->in[0]->type, ib, c->type.dim);
  r->val[c->id] = out;
  r->pc++;
}

/* Every device runs to its next collective; a collective runs once every
 * member of its axis group stands at one over that axis (the order MPI
 * gives collectives on one communicator). */
static bool sim_steps(Spmd *s, Run *runs) {
  int *members = calloc((size_t)s->ndev, sizeof *members);
  DTC_ASSERT(members);
  bool ok = true;
  for (;;) {
    for (int d = 0; ok && d < s->ndev; d++)
      if (!run_to_comm(&runs[d]))
        ok = sim_fail(s, "device %d: %s", d, interp_error(s->dev[d]));
    bool done = true, progress = false;
    for (int d = 0; ok && d < s->ndev; d++) {
      Run *r = &runs[d];
      if (r->pc == r->f->inst.n)
        continue;
      done = false;
      const Inst *c = r->f->inst.a[r->pc];
      if (c->op == OP_shard_slice) {
        shard_slice(s, r);
        progress = true;
        continue;
      }
      int axis = (int)ir_get_int(c, "axis", 0), k = s->mesh->axis_size[axis];
      ir_mesh_group(s->mesh, d, axis, members);
      if (members[0] != d)
        continue;
      bool ready = true;
      for (int j = 0; j < k && ready; j++) {
        const Run *rj = &runs[members[j]];
        const Inst *cj = rj->pc < rj->f->inst.n ? rj->f->inst.a[rj->pc] : NULL;
        ready = cj && ir_ops[cj->op].kind == K_COMM && cj->op != OP_shard_slice &&
                ir_get_int(cj, "axis", -1) == axis;
        if (ready && !same_attrs(c, cj))
          ok = ready = sim_fail(s, "devices %d and %d disagree at '%s' over axis %d", d,
                                members[j], ir_ops[c->op].name, axis);
      }
      if (ready) {
        collective(runs, members, k);
        progress = true;
      }
    }
    if (!ok || done)
      break;
    if (!progress) {
      ok = sim_fail(s, "the devices wait for each other (deadlock)");
      break;
    }
  }
  free(members);
  return ok;
}

/* The value of the k-th output of f. */
static const Inst *output_value(const Func *f, int k) {
  for (int j = 0, seen = 0; j < f->inst.n; j++)
    if (f->inst.a[j]->op == OP_output && seen++ == k)
      return f->inst.a[j]->in[0];
  DTC_UNREACHABLE();
}

/* The whole value of output k from every device's block (bufs[d][k]). */
static void gather_output(Spmd *s, Run *runs, int k, void ***bufs, void *full) {
  const Inst *o0 = output_value(runs[0].f, k);
  const Sharding *sh = o0->shard;
  Type global = o0->type;
  int *members = calloc((size_t)s->ndev, sizeof *members);
  DTC_ASSERT(members);
  for (int d = 0; sh && d < global.rank; d++) {
    int a = sh->axis[d];
    if (a < 0)
      continue;
    ir_mesh_group(s->mesh, 0, a, members);
    global.dim[d] = 0;
    for (int c = 0; c < s->mesh->axis_size[a]; c++)
      global.dim[d] += output_value(runs[members[c]].f, k)->type.dim[d];
  }
  free(members);
  int64_t zero[IR_MAX_RANK] = {0}, begin[IR_MAX_RANK];
  for (int d = 0; d < s->ndev; d++) {
    Type t;
    ir_local_type(s->m, sh, &global, d, &t, begin);
    box_copy(full, &global, begin, bufs[d][k], &t, zero, t.dim);
  }
}

bool spmd_sim_run(Spmd *s, const char *func, void *const *outputs) {
  Run *runs = calloc((size_t)s->ndev, sizeof *runs);
  void ***bufs = calloc((size_t)s->ndev, sizeof *bufs);
  DTC_ASSERT(runs && bufs);
  bool ok = true;
  int nout = 0;
  for (int d = 0; d < s->ndev && ok; d++) {
    Func *f = ir_find_func(s->m, arena_printf(s->m->arena, "%s.%d", func, d));
    if (!f || f->device != d) {
      ok = sim_fail(s, "no per-device function @%s.%d", func, d);
      break;
    }
    nout = 0;
    for (int j = 0; j < f->inst.n; j++)
      nout += f->inst.a[j]->op == OP_output;
    bufs[d] = calloc((size_t)nout + 1, sizeof **bufs);
    DTC_ASSERT(bufs[d]);
    for (int k = 0; k < nout; k++)
      bufs[d][k] = zalloc(type_elems(&output_value(f, k)->type));
    run_begin(&runs[d], s->dev[d], f, bufs[d]);
  }
  if (ok)
    ok = sim_steps(s, runs);
  for (int k = 0; ok && outputs && k < nout; k++)
    if (outputs[k])
      gather_output(s, runs, k, bufs, outputs[k]);
  for (int d = 0; d < s->ndev; d++) {
    if (runs[d].f)
      run_end(&runs[d], ok);
    for (int k = 0; bufs[d] && k < nout; k++)
      free(bufs[d][k]);
    free(bufs[d]);
  }
  free(bufs);
  free(runs);
  return ok;
}
