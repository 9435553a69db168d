/* interp_mesh.c: the mesh interpreter, for tests: the per-device functions
 * of a module after spmd run for every device of its mesh in one process,
 * each device with its own interpreter holding its blocks of the globals;
 * collectives, in a function or in the body of a loop, are exchanges
 * between their buffers. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "interp_int.h"

struct InterpMesh {
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

InterpMesh *interp_mesh_new(Module *m) {
  DTC_ASSERT(m->mesh.n == 1);
  InterpMesh *s = calloc(1, sizeof *s);
  DTC_ASSERT(s);
  s->m = m;
  s->mesh = &m->mesh.a[0];
  s->ndev = ir_mesh_devices(m);
  s->dev = calloc((size_t)s->ndev, sizeof *s->dev);
  DTC_ASSERT(s->dev);
  for (int d = 0; d < s->ndev; d++)
    s->dev[d] = interp_new_device(m, d);
  return s;
}

void interp_mesh_free(InterpMesh *s) {
  if (!s)
    return;
  for (int d = 0; d < s->ndev; d++)
    interp_free(s->dev[d]);
  free(s->dev);
  free(s);
}

int interp_mesh_devices(const InterpMesh *s) { return s->ndev; }
Interp *interp_mesh_device(InterpMesh *s, int device) { return s->dev[device]; }
const char *interp_mesh_error(const InterpMesh *s) { return s->err; }

static const Global *sim_global(InterpMesh *s, const char *name) {
  const Global *g = ir_find_global(s->m, name);
  if (!g)
    snprintf(s->err, sizeof s->err, "no global '%s'", name);
  return g;
}

bool interp_mesh_set_global(InterpMesh *s, const char *name, const void *full) {
  const Global *g = sim_global(s, name);
  int64_t zero[IR_MAX_RANK] = {0}, begin[IR_MAX_RANK];
  for (int d = 0; g && d < s->ndev; d++) {
    Type t;
    ir_local_type(s->m, g->shard, &g->type, d, &t, begin);
    box_copy(interp_global(s->dev[d], name), &t, zero, full, &g->type, begin, t.dim);
  }
  return g != NULL;
}

bool interp_mesh_get_global(InterpMesh *s, const char *name, void *full) {
  const Global *g = sim_global(s, name);
  int64_t zero[IR_MAX_RANK] = {0}, begin[IR_MAX_RANK];
  for (int d = 0; g && d < s->ndev; d++) {
    Type t;
    ir_local_type(s->m, g->shard, &g->type, d, &t, begin);
    box_copy(full, &g->type, begin, interp_global(s->dev[d], name), &t, zero, t.dim);
  }
  return g != NULL;
}

static bool sim_fail(InterpMesh *s, const char *fmt, ...) {
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

static size_t value_bytes(const Type *t) { return (size_t)type_elems(t) * 4; }

static bool same_attrs(const Inst *a, const Inst *b) {
  if (a->op != b->op || ir_get_int(a, "axis", -1) != ir_get_int(b, "axis", -1) ||
      ir_get_int(a, "dim", -1) != ir_get_int(b, "dim", -1) ||
      ir_get_int(a, "to", -1) != ir_get_int(b, "to", -1) ||
      ir_get_int(a, "from", -1) != ir_get_int(b, "from", -1))
    return false;
  int na, nb;
  const int64_t *sa = ir_get_ints(a, "sizes", &na), *sb = ir_get_ints(b, "sizes", &nb);
  return na == nb && (!na || !memcmp(sa, sb, sizeof *sa * (size_t)na));
}

/* Runs the collective every member of a group stands at: at[members[c]] is
 * the run (innermost: perhaps a loop's body) of the device at coordinate c
 * along the collective's axis. */
static void collective(Run **at, const int *members, int k) {
  const Inst *c0 = at[members[0]]->f->inst.a[at[members[0]]->pc];
  if (c0->op == OP_send || c0->op == OP_bcast) {   /* members[0] is the sender (send) */
    const Run *from = at[members[c0->op == OP_send ? 0 : ir_get_int(c0, "from", 0)]];
    const void *x = from->val[from->f->inst.a[from->pc]->in[0]->id];
    for (int c = 0; c < k; c++) {
      Run *r = at[members[c]];
      const Inst *ci = r->f->inst.a[r->pc];
      r->val[ci->id] = interp_zalloc(type_elems(&ci->type));
      memcpy(r->val[ci->id], x, value_bytes(&ci->type));
    }
    for (int c = 0; c < k; c++)
      at[members[c]]->pc++;
    return;
  }
  if (c0->op == OP_fold_all) {   /* members' pieces in member order, added in turn */
    int64_t e = type_elems(&c0->type);
    float *sum = interp_zalloc(e);
    bool first = true;
    for (int c = 0; c < k; c++) {
      const Run *r = at[members[c]];
      const Inst *ci = r->f->inst.a[r->pc];
      const float *x = r->val[ci->in[0]->id];
      for (int64_t q = 0; q < ci->in[0]->type.dim[0]; q++, first = false)
        for (int64_t j = 0; j < e; j++)
          sum[j] = first ? x[q * e + j] : sum[j] + x[q * e + j];
    }
    for (int c = 0; c < k; c++) {
      Run *r = at[members[c]];
      const Inst *ci = r->f->inst.a[r->pc];
      r->val[ci->id] = interp_zalloc(e);
      memcpy(r->val[ci->id], sum, value_bytes(&ci->type));
      r->pc++;
    }
    free(sum);
    return;
  }
  int n;
  const int64_t *sizes = ir_get_ints(c0, "sizes", &n);
  int dim = (int)ir_get_int(c0, "dim", 0), to = (int)ir_get_int(c0, "to", 0);
  float *sum = NULL;
  if (c0->op == OP_all_reduce || c0->op == OP_reduce_scatter) {
    /* in bf16 on the wire: each member's input rounded, the sum in member
     * order in f32, rounded (within libdtrt's bound for every method) */
    bool bf16 = ir_get_int(c0, "wire", DT_WIRE_F32) == DT_WIRE_BF16;
    int64_t e = type_elems(&c0->in[0]->type);
    sum = interp_zalloc(e);
    for (int c = 0; c < k; c++) {
      const Run *r = at[members[c]];
      const float *x = r->val[r->f->inst.a[r->pc]->in[0]->id];
      for (int64_t q = 0; q < e; q++)
        sum[q] += bf16 && k > 1 ? dtrt_bf16_to_f32(dtrt_bf16_from_f32(x[q])) : x[q];
    }
    for (int64_t q = 0; bf16 && k > 1 && q < e; q++)
      sum[q] = dtrt_bf16_to_f32(dtrt_bf16_from_f32(sum[q]));
  }
  for (int c = 0; c < k; c++) {
    Run *r = at[members[c]];
    const Inst *ci = r->f->inst.a[r->pc];
    const Type *ot = &ci->type;
    void *out = interp_zalloc(type_elems(ot));
    int64_t ob[IR_MAX_RANK] = {0}, ib[IR_MAX_RANK] = {0}, ext[IR_MAX_RANK];
    if (c0->op == OP_all_reduce) {
      memcpy(out, sum, (size_t)type_elems(ot) * 4);
    } else if (c0->op == OP_reduce_scatter) {
      ib[dim] = block_start(sizes, c);
      box_copy(out, ot, ob, sum, &ci->in[0]->type, ib, ot->dim);
    } else {
      int64_t pos = 0;
      for (int j = 0; j < k; j++) {
        const Run *rj = at[members[j]];
        const Inst *cj = rj->f->inst.a[rj->pc];
        const Type *it = &cj->in[0]->type;
        memcpy(ext, it->dim, sizeof ext);
        memset(ib, 0, sizeof ib);
        ob[dim] = pos;
        pos += it->dim[dim];
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
    at[members[c]]->pc++;
}

/* A device's block of a whole value: local, no communication. */
static void shard_slice(InterpMesh *s, Run *r) {
  const Inst *c = r->f->inst.a[r->pc];
  int n, coord[IR_MAX_MESH_AXES];
  const int64_t *sizes = ir_get_ints(c, "sizes", &n);
  ir_mesh_coords(s->mesh, r->f->device, coord);
  int64_t ob[IR_MAX_RANK] = {0}, ib[IR_MAX_RANK] = {0};
  int dim = (int)ir_get_int(c, "dim", 0);
  ib[dim] = block_start(sizes, coord[ir_get_int(c, "axis", 0)]);
  void *out = interp_zalloc(type_elems(&c->type));
  box_copy(out, &c->type, ob, r->val[c->in[0]->id], &c->in[0]->type, ib, c->type.dim);
  r->val[c->id] = out;
  r->pc++;
}

/* Every device runs to its next collective, which may lie in a loop's body
 * (its innermost run stands there, and resumes there after it); a
 * collective runs once every member of its axis group stands at one over
 * that axis (the order MPI gives collectives on one communicator); a send
 * once its two members stand at it, the others meanwhile at anything. */
static bool sim_steps(InterpMesh *s, Run *runs) {
  int *members = calloc((size_t)s->ndev, sizeof *members);
  Run **at = calloc((size_t)s->ndev, sizeof *at);
  DTC_ASSERT(members && at);
  bool ok = true;
  for (;;) {
    for (int d = 0; ok && d < s->ndev; d++) {
      if (!interp_to_comm(&runs[d]))
        ok = sim_fail(s, "device %d: %s", d, interp_error(s->dev[d]));
      at[d] = interp_innermost(&runs[d]);
    }
    bool done = true, progress = false;
    for (int d = 0; ok && d < s->ndev; d++) {
      Run *r = at[d];
      if (r->pc == r->f->inst.n)
        continue;
      done = false;
      const Inst *c = r->f->inst.a[r->pc];
      if (ir_ops[c->op].kind != K_COMM)   /* moved past a send this round */
        continue;
      if (c->op == OP_shard_slice) {
        shard_slice(s, r);
        progress = true;
        continue;
      }
      int axis = (int)ir_get_int(c, "axis", 0), k = s->mesh->axis_size[axis];
      ir_mesh_group(s->mesh, d, axis, members);
      if (c->op == OP_send) {   /* its two members only, the sender first */
        int from = members[ir_get_int(c, "from", 0)], to = members[ir_get_int(c, "to", 0)];
        members[0] = from;
        members[1] = to;
        k = 2;
      }
      if (members[0] != d)
        continue;
      bool ready = true;
      for (int j = 0; j < k && ready; j++) {
        const Run *rj = at[members[j]];
        const Inst *cj = rj->pc < rj->f->inst.n ? rj->f->inst.a[rj->pc] : NULL;
        ready = cj && ir_ops[cj->op].kind == K_COMM && cj->op != OP_shard_slice &&
                ir_get_int(cj, "axis", -1) == axis;
        if (ready && (c->op == OP_send || cj->op == OP_send) && !same_attrs(c, cj))
          ready = false;   /* a member on its way: a send between two others */
        if (ready && !same_attrs(c, cj))
          ok = ready = sim_fail(s, "devices %d and %d disagree at '%s' over axis %d", d,
                                members[j], ir_ops[c->op].name, axis);
      }
      if (ready) {
        collective(at, members, k);
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
  free(at);
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
static void gather_output(InterpMesh *s, Run *runs, int k, void ***bufs, void *full) {
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

bool interp_mesh_run(InterpMesh *s, const char *func, void *const *outputs) {
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
      bufs[d][k] = interp_zalloc(type_elems(&output_value(f, k)->type));
    interp_begin(&runs[d], s->dev[d], f, bufs[d]);
  }
  if (ok)
    ok = sim_steps(s, runs);
  for (int k = 0; ok && outputs && k < nout; k++)
    if (outputs[k])
      gather_output(s, runs, k, bufs, outputs[k]);
  for (int d = 0; d < s->ndev; d++) {
    if (runs[d].f)
      interp_end(&runs[d], ok);
    for (int k = 0; bufs[d] && k < nout; k++)
      free(bufs[d][k]);
    free(bufs[d]);
  }
  free(bufs);
  free(runs);
  return ok;
}
