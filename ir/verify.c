/* verify.c: checks the invariants every pass may rely on and must keep: the
 * cluster and meshes, shardings, globals, SSA order, op arity, attribute
 * schemas and types. Each violation is an error at the culprit's location. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* ---- attribute schemas ---- */

static const char *kind_names[] = {"int", "ints", "float", "str"};
static_assert(COUNTOF(kind_names) == A_STR + 1, "attribute kind names");

/* One entry "name:kind" or "name:kind?" of a schema from ops.def; a flag is
 * an int that must be 0 or 1. */
typedef struct Slot { const char *name; int len; AttrKind kind; bool opt, flag; } Slot;

/* Reads the entry at *s and moves past it; false at the end. */
static bool schema_next(const char **s, Slot *e) {
  const char *p = *s;
  if (!*p)
    return false;
  const char *colon = strchr(p, ':');
  DTC_ASSERT(colon);
  const char *end = colon + strcspn(colon, ",");
  int klen = (int)(end - colon - 1);
  e->name = p;
  e->len = (int)(colon - p);
  e->opt = end[-1] == '?';
  klen -= e->opt;
  e->flag = klen == 4 && !strncmp(colon + 1, "flag", 4);
  int k = e->flag ? A_INT : 0;
  while (!e->flag && k < COUNTOF(kind_names) &&
         !((int)strlen(kind_names[k]) == klen && !strncmp(colon + 1, kind_names[k], (size_t)klen)))
    k++;
  DTC_ASSERT(k < COUNTOF(kind_names));
  e->kind = (AttrKind)k;
  *s = *end ? end + 1 : end;
  return true;
}

static bool slot_is(const Slot *e, const char *name) {
  return (int)strlen(name) == e->len && !strncmp(e->name, name, (size_t)e->len);
}

/* Finds attribute `name` in a schema. */
static bool schema_find(const char *schema, const char *name, Slot *e) {
  while (schema_next(&schema, e))
    if (slot_is(e, name))
      return true;
  return false;
}

bool ir_check_attrs(const Inst *inst, Diag *d, Loc loc, const Loc *at) {
  const OpInfo *oi = &ir_ops[inst->op];
  int nerr = d->nerr;
  Slot e;
  for (int k = 0; k < inst->nattr; k++) {
    const Attr *a = &inst->attr[k];
    Loc l = at ? at[k] : loc;
    bool twice = false;
    for (int j = 0; j < k; j++)
      twice |= !strcmp(inst->attr[j].name, a->name);
    if (twice) {
      diag_error(d, l, "attribute '%s' is given twice", a->name);
    } else if (!strcmp(a->name, "pieces")) {   /* any op's (ir_pieces); ir_infer checks it */
      if (a->kind != A_INTS)
        diag_error(d, l, "attribute 'pieces' must be ints, not %s",
                   (unsigned)a->kind <= A_STR ? kind_names[a->kind] : "?");
    } else if (!*oi->attrs) {
      diag_error(d, l, "'%s' takes no attributes, but '%s' is given", oi->name, a->name);
    } else if (!schema_find(oi->attrs, a->name, &e)) {
      char list[256] = "";
      for (const char *s = oi->attrs; schema_next(&s, &e);)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%.*s", *list ? ", " : "",
                 e.len, e.name);
      diag_error(d, l, "'%s' has no attribute '%s' (it has %s)", oi->name, a->name, list);
    } else if (e.kind != a->kind) {
      diag_error(d, l, "attribute '%s' of '%s' must be %s, not %s", a->name, oi->name,
                 kind_names[e.kind], (unsigned)a->kind <= A_STR ? kind_names[a->kind] : "?");
    } else if (e.flag && a->i != 0 && a->i != 1) {
      diag_error(d, l, "attribute '%s' of '%s' is a flag: 0 or 1, not %lld", a->name, oi->name,
                 (long long)a->i);
    }
  }
  for (const char *s = oi->attrs; schema_next(&s, &e);) {
    bool have = false;
    for (int k = 0; k < inst->nattr && !have; k++)
      have = slot_is(&e, inst->attr[k].name);
    if (!have && !e.opt)
      diag_error(d, loc, "'%s' needs attribute '%.*s' (%s)", oi->name, e.len, e.name,
                 kind_names[e.kind]);
  }
  return d->nerr == nerr;
}

/* ---- names ---- */

typedef struct Named { const char *name; Loc loc; int order; } Named;
typedef VEC(Named) Names;

static int by_name(const void *x, const void *y) {
  const Named *a = x, *b = y;
  int c = strcmp(a->name, b->name);
  return c ? c : a->order - b->order;
}

static void name_add(Names *v, const char *name, Loc loc) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 16;
    v->a = realloc(v->a, sizeof(Named) * (size_t)v->cap);
    if (!v->a)
      dtc_die(__FILE__, __LINE__, "out of memory");
  }
  v->a[v->n] = (Named){name ? name : "", loc, v->n};
  v->n++;
}

/* Reports each repeat after the first, then empties v. */
static void names_unique(Names *v, Diag *d, const char *what) {
  if (v->n > 1)
    qsort(v->a, (size_t)v->n, sizeof(Named), by_name);
  for (int k = 1; k < v->n; k++)
    if (!strcmp(v->a[k].name, v->a[k - 1].name))
      diag_error(d, v->a[k].loc, "%s '%s' is defined twice", what, v->a[k].name);
  v->n = 0;
}

/* ---- types, cluster, meshes, shardings ---- */

/* The limits of ir.h: rank, each dimension positive, element count. */
static bool shape_ok(const Type *t) {
  if (t->rank < 0 || t->rank > IR_MAX_RANK)
    return false;
  int64_t n = 1;
  for (int d = 0; d < t->rank; d++) {
    if (t->dim[d] < 1 || t->dim[d] > IR_MAX_DIM || n > IR_MAX_ELEMS / t->dim[d])
      return false;
    n *= t->dim[d];
  }
  return true;
}

static void verify_cluster(const Cluster *c, Diag *d, Names *names) {
  for (int k = 0; k < c->node.n; k++)
    name_add(names, c->node.a[k].name, c->node.a[k].loc);
  names_unique(names, d, "node");
  for (int k = 0; k < c->dev.n; k++) {
    const Device *dv = &c->dev.a[k];
    if (dv->node < 0 || dv->node >= c->node.n)
      diag_error(d, dv->loc, "device '%s' is on node %d of %d", dv->name, dv->node, c->node.n);
    name_add(names, dv->name, dv->loc);
  }
  names_unique(names, d, "device");
}

static void verify_mesh(const Module *m, const Mesh *mh, Diag *d) {
  int ndev = m->cluster ? m->cluster->dev.n : 1;
  if (mh->naxis < 0 || mh->naxis > IR_MAX_MESH_AXES) {
    diag_error(d, mh->loc, "mesh '%s' has %d axes (at most %d)", mh->name, mh->naxis,
               IR_MAX_MESH_AXES);
    return;
  }
  int64_t n = 1;
  for (int a = 0; a < mh->naxis; a++) {
    if (mh->axis_size[a] < 1) {
      diag_error(d, mh->loc, "axis '%s' of mesh '%s' has size %d", mh->axis_name[a], mh->name,
                 mh->axis_size[a]);
      return;
    }
    n *= mh->axis_size[a];
    for (int b = 0; b < a; b++)
      if (!strcmp(mh->axis_name[a], mh->axis_name[b]))
        diag_error(d, mh->loc, "mesh '%s' names axis '%s' twice", mh->name, mh->axis_name[a]);
  }
  for (int64_t k = 0; mh->dev && k < n; k++)
    if (mh->dev[k] < 0 || mh->dev[k] >= ndev)
      diag_error(d, mh->loc, "mesh '%s' places device %d, but there are %d", mh->name, mh->dev[k],
                 ndev);
  if (!mh->dev)
    diag_error(d, mh->loc, "mesh '%s' has no devices", mh->name);
}

static void verify_shard(const Module *m, const Sharding *s, int rank, Loc loc, Diag *d,
                         const char *what) {
  if (s->mesh < 0 || s->mesh >= m->mesh.n) {
    diag_error(d, loc, "sharding of %s names mesh %d of %d", what, s->mesh, m->mesh.n);
    return;
  }
  const Mesh *mh = &m->mesh.a[s->mesh];
  int used[IR_MAX_MESH_AXES] = {0};
  for (int dim = 0; dim < rank && dim < IR_MAX_RANK; dim++) {
    int ax = s->axis[dim];
    if (ax < 0) {
      if (s->ratio[dim])
        diag_error(d, loc, "sharding of %s: dimension %d is whole but has ratios", what, dim);
      continue;
    }
    if (ax >= mh->naxis) {
      diag_error(d, loc, "sharding of %s: dimension %d is split over axis %d, but mesh '%s' has %d",
                 what, dim, ax, mh->name, mh->naxis);
      continue;
    }
    if (used[ax]++)
      diag_error(d, loc, "sharding of %s splits two dimensions over mesh axis '%s'", what,
                 mh->axis_name[ax]);
    const double *r = s->ratio[dim];
    double sum = 0;
    for (int k = 0; r && k < mh->axis_size[ax]; k++) {
      if (!(r[k] > 0) && ir_placed(r, mh->axis_size[ax]) < 0)
        diag_error(d, loc,
                   "sharding of %s: ratio %d of dimension %d is %g; ratios must be positive "
                   "(or one 1, the rest 0)", what,
                   k, dim, r[k]);
      sum += r[k];
    }
    if (r && !(fabs(sum - 1) <= 1e-6))
      diag_error(d, loc, "sharding of %s: the ratios of dimension %d sum to %.9g, not 1", what, dim,
                 sum);
  }
  for (int ax = 0; ax < 8; ax++) {
    if (!(s->partial_axes & (1u << ax)))
      continue;
    if (!s->partial || ax >= mh->naxis)
      diag_error(d, loc, "sharding of %s: partial over axis %d, but %s", what, ax,
                 s->partial ? "the mesh has no such axis" : "it is not partial");
    else if (ax < IR_MAX_MESH_AXES && used[ax])
      diag_error(d, loc, "sharding of %s is split and partial over mesh axis '%s'", what,
                 mh->axis_name[ax]);
  }
}

/* ---- functions ---- */

static bool operands_ok(const Func *f, const Inst *in, int pos, Diag *d) {
  const OpInfo *oi = &ir_ops[in->op];
  bool ok = true;
  if (in->nin < oi->minin || in->nin > oi->maxin) {
    if (oi->minin == oi->maxin)
      diag_error(d, in->loc, "'%s' takes %d operand%s, but has %d", oi->name, oi->minin,
                 oi->minin == 1 ? "" : "s", in->nin);
    else
      diag_error(d, in->loc, "'%s' takes %d to %d operands, but has %d", oi->name, oi->minin,
                 oi->maxin, in->nin);
    ok = false;
  }
  for (int k = 0; k < in->nin; k++) {
    const Inst *x = in->in[k];
    if (!x) {
      diag_error(d, in->loc, "operand %d of '%s' is missing", k + 1, oi->name);
      ok = false;
    } else if (x->fn != f) {
      diag_error(d, in->loc, "operand %d of '%s' belongs to function @%s", k + 1, oi->name,
                 x->fn ? x->fn->name : "?");
      ok = false;
    } else if (x->id < 0 || x->id >= pos || f->inst.a[x->id] != x) {
      diag_error(d, in->loc, "operand %d of '%s' is not defined before its use", k + 1, oi->name);
      ok = false;
    } else if (x->type.dtype == DT_VOID) {
      diag_error(d, in->loc, "operand %d of '%s' has no value", k + 1, oi->name);
      ok = false;
    }
  }
  return ok;
}

/* load and store: the global exists and has the value's type. */
static bool global_ok(const Module *m, const Inst *in, Diag *d) {
  char b1[128], b2[128];
  const char *name = ir_get_str(in, "global", "");
  const Global *g = ir_find_global(m, name);
  const Type *t = in->op == OP_load ? &in->type : &in->in[0]->type;
  if (!g) {
    diag_error(d, in->loc, "'%s' names unknown global '%s'", ir_ops[in->op].name, name);
    return false;
  }
  Type want = ir_global_type_on(m, g, in->fn->device);
  if (!type_eq(t, &want)) {
    diag_error(d, in->loc, "'%s' moves %s, but global '%s' is %s%s", ir_ops[in->op].name,
               type_str(t, b1, 128), name, type_str(&want, b2, 128),
               in->fn->device >= 0 ? " on this device" : "");
    return false;
  }
  return true;
}

/* Attributes that name a fact shared with libdtrt: an lr's schedule, a
 * collective's method and wire format. */
static bool named_ok(const Inst *in, Diag *d) {
  if (in->op == OP_lr) {
    const char *s = ir_get_str(in, "schedule", "");
    if (dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, s) < 0) {
      diag_error(d, in->loc, "'lr' has schedule '%s', not constant, warmup, cosine, linear or step",
                 s);
      return false;
    }
    int64_t k = ir_get_int(in, "accumulate", 1);
    if (k < 1 || k > IR_MAX_ACCUMULATE) {
      diag_error(d, in->loc, "'lr' has accumulate %lld, not between 1 and %d", (long long)k,
                 IR_MAX_ACCUMULATE);
      return false;
    }
  }
  if (ir_attr(in, "method") && !ir_has_method(in->op, (int)ir_get_int(in, "method", 0)) &&
      ir_get_int(in, "method", 0) != DTRT_COMM_MPI) {
    diag_error(d, in->loc, "'%s' has method %lld, which its kernel does not implement",
               ir_ops[in->op].name, (long long)ir_get_int(in, "method", 0));
    return false;
  }
  int64_t w = ir_get_int(in, "wire", DT_WIRE_F32);
  if (w < 0 || w >= DT_WIRE_COUNT) {
    diag_error(d, in->loc, "'%s' has wire %lld, not 0 (f32) or 1 (bf16)", ir_ops[in->op].name,
               (long long)w);
    return false;
  }
  return true;
}

/* A body reads its args 0 .. n-1, each once, and no global; it has an
 * output. */
static void body_ok(const Func *f, Diag *d) {
  int nargs = 0, nout = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *in = f->inst.a[k];
    nargs += in->op == OP_arg;
    nout += in->op == OP_output;
    if (in->op == OP_load || in->op == OP_store || in->op == OP_lr)
      diag_error(d, in->loc, "'%s' in body function @%s: a body reads its args only",
                 ir_ops[in->op].name, f->name);
  }
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *in = f->inst.a[k];
    int64_t i = ir_get_int(in, "index", -1);
    if (in->op == OP_arg && (i >= nargs || ir_func_arg(f, (int)i) != in))
      diag_error(d, in->loc, "arg %lld of @%s: the %d args of a body are numbered 0 to %d, each once",
                 (long long)i, f->name, nargs, nargs - 1);
  }
  if (!nout)
    diag_error(d, f->loc, "body function @%s has no output", f->name);
}

/* True when running f's repeats can reach f again (depth: the functions
 * left to visit). */
static bool calls(const Func *from, const Func *f, int depth) {
  for (int k = 0; depth > 0 && k < from->inst.n; k++) {
    const Func *b = from->inst.a[k]->op == OP_repeat ? ir_repeat_body(from->inst.a[k]) : NULL;
    if (b && (b == f || calls(b, f, depth - 1)))
      return true;
  }
  return false;
}

/* Operand order is checked through ids, so they are checked first. */
static void verify_func(const Module *m, const Func *f, Diag *d, Names *names) {
  bool ids_ok = true;
  if (f->device >= 0) {
    const Mesh *mh = m->mesh.n ? &m->mesh.a[0] : NULL;
    int64_t n = 1;
    for (int a = 0; mh && a < mh->naxis; a++)
      n *= mh->axis_size[a];
    if (!mh || f->device >= n) {
      diag_error(d, f->loc, "@%s runs on device %d, but %s", f->name, f->device,
                 mh ? "the mesh has fewer" : "there is no mesh");
      return;
    }
  }
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *in = f->inst.a[k];
    if (in->fn != f)
      diag_error(d, in->loc, "instruction %d of @%s belongs to @%s", k, f->name,
                 in->fn ? in->fn->name : "?");
    else if (in->id != k)
      diag_error(d, in->loc, "instruction %d of @%s has id %d (ir_renumber was not called)", k,
                 f->name, in->id);
    else if ((unsigned)in->op >= OP_COUNT)
      diag_error(d, in->loc, "instruction %d of @%s has no op (%d)", k, f->name, (int)in->op);
    else
      continue;
    ids_ok = false;
  }
  if (!ids_ok)
    return;
  if (f->body)
    body_ok(f, d);
  if (calls(f, f, m->func.n))
    diag_error(d, f->loc, "@%s repeats itself: a body cannot run, directly or not, the function "
               "that runs it", f->name);
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *in = f->inst.a[k];
    char err[256], b1[128], b2[128], what[32];
    if (in->name)
      name_add(names, in->name, in->loc);
    if (in->shard && !in->name)
      snprintf(what, sizeof what, "%%%d", in->id);
    if (in->shard)
      verify_shard(m, in->shard, in->type.rank, in->loc, d, in->name ? in->name : what);
    bool ok = operands_ok(f, in, k, d);
    if (!ir_check_attrs(in, d, in->loc, NULL) || !ok || !named_ok(in, d))
      continue;
    if ((in->op == OP_load || in->op == OP_store) && !global_ok(m, in, d))
      continue;
    Inst tmp = *in;
    if (!ir_infer(&tmp, err, sizeof err))
      diag_error(d, in->loc, "%s", err);
    else if (!type_eq(&tmp.type, &in->type))
      diag_error(d, in->loc, "'%s' has type %s, but its operands give %s", ir_ops[in->op].name,
                 type_str(&in->type, b1, 128), type_str(&tmp.type, b2, 128));
  }
  names_unique(names, d, "value");
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_output)
      name_add(names, ir_get_str(f->inst.a[k], "name", ""), f->inst.a[k]->loc);
  names_unique(names, d, "output");
}

static bool is_output(const Func *f, const char *name) {
  for (int k = 0; f && k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_output && !strcmp(ir_get_str(f->inst.a[k], "name", ""), name))
      return true;
  return false;
}

/* The loss is an output of @forward, or after spmd of each of its per-device
 * copies @forward.N. */
static bool loss_ok(const Module *m) {
  const Func *fwd = ir_find_func(m, "forward");
  if (fwd)
    return is_output(fwd, m->train.loss);
  int copies = 0;
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    if (f->device >= 0 && !strncmp(f->name, "forward.", 8)) {
      if (!is_output(f, m->train.loss))
        return false;
      copies++;
    }
  }
  return copies > 0;
}

bool ir_verify(const Module *m, Diag *d) {
  int nerr = d->nerr;
  Names names = {0};
  if (m->cluster)
    verify_cluster(m->cluster, d, &names);
  for (int k = 0; k < m->mesh.n; k++) {
    verify_mesh(m, &m->mesh.a[k], d);
    name_add(&names, m->mesh.a[k].name, m->mesh.a[k].loc);
  }
  names_unique(&names, d, "mesh");
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    name_add(&names, g->name, g->loc);
    if (g->type.dtype == DT_VOID || (unsigned)g->type.dtype >= DT_COUNT)
      diag_error(d, g->loc, "global '%s' has no element type", g->name);
    else if (!shape_ok(&g->type))
      diag_error(d, g->loc, "global '%s' has a rank or a dimension out of range", g->name);
    if (g->fan_in < 0 || g->fan_out < 0 || g->fan_in > IR_MAX_ELEMS || g->fan_out > IR_MAX_ELEMS)
      diag_error(d, g->loc, "global '%s' has fans %lld and %lld, outside 0 to 2^40", g->name,
                 (long long)g->fan_in, (long long)g->fan_out);
    if (g->sparse && (g->sparse != 1 || g->kind != G_PARAM || g->type.rank != 2))
      diag_error(d, g->loc,
                 "global '%s' has sparse = %lld; only a param of rank 2 may be sparse (1)", g->name,
                 (long long)g->sparse);
    if (g->shard)
      verify_shard(m, g->shard, g->type.rank, g->loc, d, g->name);
  }
  names_unique(&names, d, "global");
  for (int k = 0; k < m->func.n; k++)
    verify_func(m, m->func.a[k], d, &names);
  for (int k = 0; k < m->func.n; k++)
    name_add(&names, m->func.a[k]->name, m->func.a[k]->loc);
  names_unique(&names, d, "function");
  if (m->train.loss && !loss_ok(m))
    diag_error(d, m->train.loc, "the loss '%s' is not an output of @forward", m->train.loss);
  free(names.a);
  return d->nerr == nerr;
}
