/* ir.c: types and the construction of modules, functions and
 * instructions: finding a function, dropping what nothing needs. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

const char *const ir_opt_names[OPT_COUNT] = {"sgd",     "adam",        "adamw",          "demo",
                                             "adagrad", "sparse_adam", "rowwise_adagrad"};

/* ---- types ---- */

int64_t type_elems(const Type *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++)
    n *= t->dim[i];
  return n;
}

size_t dtype_size(DType dt) { return dt == DT_VOID ? 0 : 4; }

double type_bytes(const Type *t) { return (double)type_elems(t) * (double)dtype_size(t->dtype); }

TileRead type_tile_read(const Type *s, const Type *o) {
  int64_t n = s->rank ? s->dim[s->rank - 1] : 1, e = type_elems(o);
  if (e == 1)
    return TILE_ONE;
  if (e == type_elems(s))
    return TILE_FULL;
  return o->rank && o->dim[o->rank - 1] == n && e == n ? TILE_ROW : TILE_NONE;
}

const char *dtype_name(DType dt) {
  static const char *names[] = {"void", "f32", "i32"};
  static_assert(COUNTOF(names) == DT_COUNT, "dtype names");
  return (unsigned)dt < DT_COUNT ? names[dt] : "?";
}

bool type_eq(const Type *a, const Type *b) {
  if (a->dtype != b->dtype || a->rank != b->rank)
    return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dim[i] != b->dim[i])
      return false;
  return true;
}

const char *type_str(const Type *t, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s", dtype_name(t->dtype));
  if (t->dtype == DT_VOID)
    return buf;
  k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "[");
  for (int i = 0; i < t->rank; i++)
    k += (size_t)snprintf(buf + k, k < n ? n - k : 0, "%s%lld", i ? "," : "", (long long)t->dim[i]);
  snprintf(buf + k, k < n ? n - k : 0, "]");
  return buf;
}

/* ---- modules ---- */

/* Indices into Module.func by (name, device), open addressing; indexed:
 * the functions entered, func.a[0 .. indexed). Every hit is checked against
 * func.a, so passes may add, drop and reorder functions freely: a miss
 * enters the functions added since, and when that does not find it a scan
 * does, and rebuilds the table. */
struct FuncIndex {
  int *slot;   /* index + 1, 0 empty */
  int cap, used, indexed;
};


Module *ir_module_new(Arena *a, const char *name) {
  Module *m = arena_alloc(a, sizeof *m);
  m->arena = a;
  m->name = arena_strdup(a, name);
  m->func_index = arena_alloc(a, sizeof *m->func_index);
  m->train.opt = m->train.schedule = -1;
  return m;
}

Global *ir_add_global(Module *m, const char *name, GlobalKind kind, Type t, Loc loc) {
  Global g = {.name = arena_strdup(m->arena, name), .kind = kind, .type = t, .init = -1,
              .loc = loc};
  vec_push(m->arena, &m->global, g);
  return &m->global.a[m->global.n - 1];
}

Global *ir_find_global(const Module *m, const char *name) {
  for (int i = 0; i < m->global.n; i++)
    if (!strcmp(m->global.a[i].name, name))
      return &m->global.a[i];
  return NULL;
}

Func *ir_add_func(Module *m, const char *name, Loc loc) {
  Func *f = arena_alloc(m->arena, sizeof *f);
  f->name = arena_strdup(m->arena, name);
  f->mod = m;
  f->device = -1;
  f->work_bytes = -1;
  f->loc = loc;
  vec_push(m->arena, &m->func, f);
  return f;
}

Func *ir_find_func(const Module *m, const char *name) {
  for (int i = 0; i < m->func.n; i++)
    if (!strcmp(m->func.a[i]->name, name))
      return m->func.a[i];
  return NULL;
}

static unsigned func_key(const char *name, int device) {
  return (unsigned)ir_hash(name, strlen(name)) ^ (unsigned)device * 0x9e3779b9u;
}

static bool func_match(const Func *f, const char *name, int device) {
  return f->device == device && !strcmp(f->name, name);
}

static void index_enter(const Module *m, struct FuncIndex *x, int i) {
  const Func *f = m->func.a[i];
  unsigned s = func_key(f->name, f->device) & (unsigned)(x->cap - 1);
  while (x->slot[s])
    s = (s + 1) & (unsigned)(x->cap - 1);
  x->slot[s] = i + 1;
  x->used++;
}

/* The table emptied, at least twice `want` slots, and func.a[0 .. indexed)
 * entered again; the slots come from the module's arena and are reused
 * while large enough. */
static void index_rebuild(const Module *m, struct FuncIndex *x, int want) {
  if (x->cap < 2 * want) {
    int cap = 64;
    while (cap < 2 * want)
      cap *= 2;
    x->slot = arena_alloc(m->arena, sizeof *x->slot * (size_t)cap);
    x->cap = cap;
  } else {
    memset(x->slot, 0, sizeof *x->slot * (size_t)x->cap);
  }
  x->used = 0;
  for (int i = 0; i < x->indexed; i++)
    index_enter(m, x, i);
}

static void index_put(const Module *m, struct FuncIndex *x, int i) {
  if (2 * (x->used + 1) > x->cap)
    index_rebuild(m, x, x->used + 1);
  index_enter(m, x, i);
  x->indexed = i + 1;
}

static Func *index_get(const Module *m, const struct FuncIndex *x, const char *name, int device) {
  if (!x->cap)
    return NULL;
  unsigned s = func_key(name, device) & (unsigned)(x->cap - 1);
  for (; x->slot[s]; s = (s + 1) & (unsigned)(x->cap - 1)) {
    int i = x->slot[s] - 1;
    if (i < m->func.n && func_match(m->func.a[i], name, device))
      return m->func.a[i];
  }
  return NULL;
}

Func *ir_find_device_func(const Module *m, const char *name, int device) {
  struct FuncIndex *x = m->func_index;
  Func *f = index_get(m, x, name, device);
  if (f)
    return f;
  if (x->indexed < m->func.n) {   /* functions added since */
    for (int i = x->indexed; i < m->func.n; i++)
      index_put(m, x, i);
    if ((f = index_get(m, x, name, device)))
      return f;
  }
  for (int i = 0; i < m->func.n; i++)
    if (func_match(m->func.a[i], name, device)) {   /* the table is stale: rebuild */
      x->indexed = m->func.n;
      index_rebuild(m, x, m->func.n);
      return m->func.a[i];
    }
  return NULL;
}

bool ir_func_is(const Func *f, const char *base) {
  size_t n = strlen(base);
  if (strncmp(f->name, base, n))
    return false;
  if (!f->name[n])
    return true;
  char copy[32];
  snprintf(copy, sizeof copy, ".%d", f->device);
  return f->device >= 0 && !strcmp(f->name + n, copy);
}

Inst *ir_find_inst(const Func *f, const char *name) {
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->name && !strcmp(f->inst.a[i]->name, name))
      return f->inst.a[i];
  return NULL;
}

/* ---- loops ---- */

Func *ir_repeat_body(const Inst *r) {
  const char *b = ir_get_str(r, "body", NULL);
  if (!b)
    return NULL;
  const Module *m = r->fn->mod;
  if (r->fn->device < 0)
    return ir_find_func(m, b);
  char name[512];
  snprintf(name, sizeof name, "%s.%d", b, r->fn->device);
  return ir_find_device_func(m, name, r->fn->device);
}

int ir_func_noutputs(const Func *f) {
  int n = 0;
  for (int k = 0; k < f->inst.n; k++)
    n += f->inst.a[k]->op == OP_output;
  return n;
}

const Inst *ir_func_output(const Func *f, int k) {
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_output && k-- == 0)
      return f->inst.a[i];
  return NULL;
}

const Inst *ir_func_arg(const Func *f, int k) {
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_arg && ir_get_int(f->inst.a[i], "index", -1) == k)
      return f->inst.a[i];
  return NULL;
}

int ir_repeat_operand_kind(const Inst *r, int k) {
  if (k < ir_get_int(r, "carry", 1))
    return 0;
  return k >= r->nin - ir_get_int(r, "stacked", 0) ? 2 : 1;
}

int ir_repeat_first_stacked(const Inst *r) {
  int64_t carry = ir_get_int(r, "carry", 1), from = r->nin - ir_get_int(r, "stacked", 0);
  return (int)(from > carry ? from : carry);
}

Func *ir_add_body(Module *m, const char *base, const char *suffix, Loc loc) {
  char *name = arena_printf(m->arena, "%s.%s", base, suffix);
  for (int k = 2; ir_find_func(m, name); k++)
    name = arena_printf(m->arena, "%s.%s%d", base, suffix, k);
  Func *f = ir_add_func(m, name, loc);
  f->body = true;
  return f;
}

Inst *ir_copy_inst(Func *f, const Inst *i, Inst **in) {
  Inst *x = ir_new(f, i->op, i->loc, i->nin, in);
  x->name = i->name;
  x->shard = i->shard;
  ir_copy_attrs(x, i);
  if (i->op == OP_arg)
    x->type = i->type;
  return ir_finish(x);
}

Func *ir_copy_body(Module *m, Func *b, const char *suffix) {
  Func *c = ir_add_body(m, b->name, suffix, b->loc);
  ir_renumber(b);
  Inst **map = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(b->inst.n + 1));
  for (int k = 0; k < b->inst.n; k++) {
    Inst *i = b->inst.a[k];
    Inst **in = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(i->nin + 1));
    for (int j = 0; j < i->nin; j++)
      in[j] = map[i->in[j]->id];
    map[k] = ir_copy_inst(c, i, in);
  }
  return c;
}

bool ir_repeat_out_type(const Inst *r, int k, Type *t) {
  int64_t carry = ir_get_int(r, "carry", 1);
  if (k >= 0 && k < carry && k < r->nin) {
    *t = r->in[k]->type;
    return true;
  }
  const Func *body = ir_repeat_body(r);
  const Inst *o = body && k >= 0 ? ir_func_output(body, k) : NULL;
  if (!o || o->in[0]->type.rank >= IR_MAX_RANK)
    return false;
  const Type *y = &o->in[0]->type;
  *t = (Type){y->dtype, y->rank + 1, {ir_get_int(r, "n", 1)}};
  memcpy(t->dim + 1, y->dim, sizeof(int64_t) * (size_t)y->rank);
  return true;
}

/* ---- instructions ---- */

const char *const ir_pipe_schedules[2] = {"1f1b", "gpipe"};

Inst *ir_new(Func *f, Op op, Loc loc, int nin, Inst **in) {
  Arena *a = f->mod->arena;
  Inst *i = arena_alloc(a, sizeof *i);
  i->fn = f;
  i->op = op;
  i->loc = loc;
  i->nin = nin;
  i->offset = -1;
  i->in = arena_alloc(a, sizeof(Inst *) * (size_t)(nin ? nin : 1));
  for (int k = 0; k < nin; k++)
    i->in[k] = in[k];
  i->id = f->inst.n;
  vec_push(a, &f->inst, i);
  return i;
}

/* The shape of an op run piece by piece: its rule on one piece of every cut
 * operand, under a new leading dim of the pieces. */
static bool infer_pieces(Inst *inst, char *err, size_t errlen) {
  const char *op = ir_ops[inst->op].name;
  int n;
  const int64_t *pc = ir_get_ints(inst, "pieces", &n);
  OpKind kind = ir_ops[inst->op].kind;
  if (!pc || n < 2 || n % 2 || inst->nin > 16 || kind == K_META || kind == K_CALL ||
      kind == K_COMM) {
    snprintf(err, errlen, "'%s' cannot run in pieces (pieces = [operand, rows, ...])", op);
    return false;
  }
  Inst piece[16], *in[16], **had = inst->in;
  int64_t count = 0;
  unsigned seen = 0;
  ir_piece_operands(inst, piece, in);
  for (int j = 0; j < n; j += 2) {
    int64_t k = pc[j], rows = pc[j + 1];
    if (k < 0 || k >= inst->nin || (seen >> k & 1u) || inst->in[k]->type.rank < 1 || rows < 1 ||
        inst->in[k]->type.dim[0] % rows) {
      snprintf(err, errlen, "'%s': pieces entry %d (operand %lld in blocks of %lld rows) does not "
               "cut an operand's dim 0 into whole blocks", op, j / 2, (long long)k, (long long)rows);
      return false;
    }
    int64_t c = inst->in[k]->type.dim[0] / rows;
    if (count && c != count) {
      snprintf(err, errlen, "'%s': its operands are cut into %lld and %lld pieces", op,
               (long long)count, (long long)c);
      return false;
    }
    count = c;
    seen |= 1u << k;
  }
  inst->in = in;
  bool ok = ir_ops[inst->op].shape(inst, err, errlen);
  inst->in = had;
  if (!ok)
    return false;
  if (inst->type.rank >= IR_MAX_RANK) {
    snprintf(err, errlen, "'%s' in pieces would have rank %d", op, inst->type.rank + 1);
    return false;
  }
  memmove(inst->type.dim + 1, inst->type.dim, sizeof(int64_t) * (size_t)inst->type.rank);
  inst->type.dim[0] = count;
  inst->type.rank++;
  return true;
}

void ir_piece_operands(const Inst *i, Inst *piece, Inst **in) {
  for (int k = 0; k < i->nin; k++) {
    piece[k] = *i->in[k], in[k] = &piece[k];
    if (ir_piece_rows(i, k) > 0)
      piece[k].type.dim[0] = ir_piece_rows(i, k);
  }
}

int ir_pieces(const Inst *i) {
  int n;
  const int64_t *pc = ir_get_ints(i, "pieces", &n);
  return pc && n >= 2 ? (int)i->type.dim[0] : 0;
}

int64_t ir_piece_rows(const Inst *i, int k) {
  int n;
  const int64_t *pc = ir_get_ints(i, "pieces", &n);
  for (int j = 0; pc && j + 1 < n; j += 2)
    if (pc[j] == k)
      return pc[j + 1];
  return 0;
}

bool ir_infer(Inst *inst, char *err, size_t errlen) {
  const OpInfo *oi = &ir_ops[inst->op];
  if (inst->nin < oi->minin || inst->nin > oi->maxin) {
    if (oi->minin == oi->maxin)
      snprintf(err, errlen, "'%s' takes %d operand%s, got %d", oi->name, oi->minin,
               oi->minin == 1 ? "" : "s", inst->nin);
    else
      snprintf(err, errlen, "'%s' takes %d to %d operands, got %d", oi->name, oi->minin,
               oi->maxin, inst->nin);
    return false;
  }
  for (int k = 0; k < inst->nin; k++)
    if (inst->in[k]->type.dtype == DT_VOID) {
      snprintf(err, errlen, "operand %d of '%s' has no value", k + 1, oi->name);
      return false;
    }
  if (ir_attr(inst, "pieces"))
    return infer_pieces(inst, err, errlen);
  return oi->shape(inst, err, errlen);
}

Inst *ir_finish(Inst *inst) {
  char err[256];
  if (!ir_infer(inst, err, sizeof err))
    dtc_die(__FILE__, __LINE__, "pass built an ill-typed '%s': %s", ir_ops[inst->op].name, err);
  return inst;
}

Inst *ir_make(Func *f, Op op, Loc loc, int nin, ...) {
  Inst *in[16];
  DTC_ASSERT(nin <= COUNTOF(in));
  va_list ap;
  va_start(ap, nin);
  for (int k = 0; k < nin; k++)
    in[k] = va_arg(ap, Inst *);
  va_end(ap);
  return ir_finish(ir_new(f, op, loc, nin, in));
}

void ir_renumber(Func *f) {
  for (int k = 0; k < f->inst.n; k++)
    f->inst.a[k]->id = k;
}

void ir_drop_unneeded(Func *f, bool (*root)(const Inst *)) {
  ir_renumber(f);
  int n = f->inst.n, kept = 0;
  bool *need = calloc((size_t)n + 1, sizeof *need);
  DTC_ASSERT(need);
  for (int k = n - 1; k >= 0; k--) {
    const Inst *i = f->inst.a[k];
    need[k] |= root(i);
    for (int j = 0; need[k] && j < i->nin; j++)
      need[i->in[j]->id] = true;
  }
  for (int k = 0; k < n; k++)
    if (need[k])
      f->inst.a[kept++] = f->inst.a[k];
  f->inst.n = kept;
  free(need);
  ir_renumber(f);
}

Uses ir_uses(Arena *a, const Func *f) {
  int n = f->inst.n, total = 0;
  Uses u = {arena_alloc(a, sizeof(int) * (size_t)(n + 1)), NULL};
  for (int i = 0; i < n; i++)
    for (int k = 0; k < f->inst.a[i]->nin; k++, total++)
      u.off[f->inst.a[i]->in[k]->id + 1]++;
  for (int i = 0; i < n; i++)
    u.off[i + 1] += u.off[i];
  u.u = arena_alloc(a, sizeof(Inst *) * (size_t)(total ? total : 1));
  int *fill = arena_alloc(a, sizeof(int) * (size_t)(n ? n : 1));
  for (int i = 0; i < n; i++)
    for (int k = 0; k < f->inst.a[i]->nin; k++) {
      int o = f->inst.a[i]->in[k]->id;
      u.u[u.off[o] + fill[o]++] = f->inst.a[i];
    }
  return u;
}

const Global *ir_global_of(const Inst *i) {
  return ir_find_global(i->fn->mod, ir_get_str(i, "global", ""));
}

/* @forward's training loss, which NAME_forward (and each device's copy of
 * @forward) leaves out: it needs the labels. */
static bool dropped(const Inst *out) {
  const char *loss = out->fn->mod->train.loss;
  return loss && ir_func_is(out->fn, "forward") && !strcmp(ir_get_str(out, "name", ""), loss);
}

/* Aliases, and a loop's outputs, which the loop keeps in its own buffers. */
static bool is_alias(const Inst *v) {
  return v->op == OP_reshape || v->op == OP_const || v->op == OP_lr || v->op == OP_load ||
         v->op == OP_arg || v->op == OP_repeat || v->op == OP_repeat_out;
}

bool ir_output_direct(const Inst *out) {
  const Inst *v = out->in[0];
  if (ir_ops[v->op].kind == K_ELEM)
    return true;
  if (is_alias(v) || dropped(out))
    return false;
  const Func *f = out->fn;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *o = f->inst.a[k];
    if (o->op == OP_output && o->in[0] == v && !dropped(o))
      return o == out;
  }
  return false;
}

bool ir_in_place(Op op) {
  return op == OP_sparse_sgd || op == OP_sparse_adagrad_sum || op == OP_sparse_adagrad ||
         op == OP_sparse_moment || op == OP_sparse_adam;
}

/* Whether sdpa (or ring_sdpa) s reads the queries, keys and mask that lse
 * (sdpa_lse, ring_sdpa_lse) reads, with the same attributes: s's kernel can
 * write lse's rows as it goes. */
static bool lse_matches(const Inst *s, const Inst *lse) {
  Op want = lse->op == OP_sdpa_lse ? OP_sdpa : OP_ring_sdpa;
  return s->op == want && s->nin == lse->nin + 1 && s->in[0] == lse->in[0] &&
         s->in[1] == lse->in[1] && (lse->nin < 3 || s->in[3] == lse->in[2]) && !ir_pieces(s) &&
         !ir_pieces(lse) && ir_same_attrs(s, lse);
}

bool ir_looks_up(const Func *f, const Global *g) {
  for (int k = 0; f && k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_embedding_bag && i->in[1]->op == OP_load &&
        !strcmp(ir_get_str(i->in[1], "global", ""), g->name))
      return true;
  }
  return false;
}

const Inst *ir_lse_partner(const Inst *lse) {
  if ((lse->op != OP_sdpa_lse && lse->op != OP_ring_sdpa_lse) || !lse->fn)
    return NULL;
  const Func *f = lse->fn;
  const Inst *s = NULL;
  int k = 0;
  for (; k < f->inst.n && f->inst.a[k] != lse; k++) {
    const Inst *x = f->inst.a[k];
    if (lse_matches(x, lse))
      s = x;
    else if (s && x->op == lse->op && lse_matches(s, x))
      s = NULL; /* an earlier one takes it */
  }
  for (k++; s && k < f->inst.n; k++)   /* read: it has a buffer */
    for (int j = 0; j < f->inst.a[k]->nin; j++)
      if (f->inst.a[k]->in[j] == lse)
        return s;
  return NULL;
}

const Inst *ir_lse_of(const Inst *s) {
  if (s->op != OP_sdpa && s->op != OP_ring_sdpa)
    return NULL;
  const Func *f = s->fn;
  Op lse = s->op == OP_sdpa ? OP_sdpa_lse : OP_ring_sdpa_lse;
  bool after = false;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *x = f->inst.a[k];
    after |= x == s;
    if (after && x->op == lse && lse_matches(s, x))
      return ir_lse_partner(x) == s ? x : NULL;
  }
  return NULL;
}

bool ir_joins_group(const Inst *x) {
  if (ir_ops[x->op].kind == K_COMM || x->op == OP_ring_sdpa || x->op == OP_ring_sdpa_lse ||
      x->op == OP_ring_sdpa_grad)
    return true;
  const Func *body = x->op == OP_repeat ? ir_repeat_body(x) : NULL;
  for (int k = 0; body && k < body->inst.n; k++)
    if (ir_joins_group(body->inst.a[k]))
      return true;
  return false;
}

/* Whether x is needed on its device, wanted: some needed inst reads it. */
static bool needed(const Inst *x, bool wanted) {
  if (x->op == OP_repeat || ir_joins_group(x))
    return true;
  if (x->op == OP_store || x->op == OP_output)
    return type_elems(&x->in[0]->type) != 0;
  return x->type.dtype == DT_VOID || (wanted && type_elems(&x->type) != 0);
}

void ir_idle(const Func *f, bool *idle) {
  int n = f->inst.n;
  for (int k = 0; k < n; k++) {
    DTC_ASSERT(f->inst.a[k]->id == k);
    idle[k] = true;   /* until a needed inst reads it */
  }
  for (int hi = n - 1, lo; hi >= 0; hi = lo - 1) {
    const Inst *x = f->inst.a[hi];
    for (lo = hi; x->fuse && lo > 0 && f->inst.a[lo - 1]->fuse == x->fuse;)
      lo--;
    bool need = false;
    for (int k = lo; k <= hi && !need; k++)
      need = needed(f->inst.a[k], !idle[k]);
    for (int k = lo; k <= hi; k++) {
      idle[k] = !need;
      for (int q = 0; need && q < f->inst.a[k]->nin; q++)
        idle[f->inst.a[k]->in[q]->id] = false;
      const Inst *s = need ? ir_lse_partner(f->inst.a[k]) : NULL;
      if (s)   /* its kernel writes this */
        idle[s->id] = false;
    }
  }
}

bool ir_dropout_whole(const Inst *i, Type *t) {
  if (i->op == OP_dropout || i->op == OP_dropout_grad) {
    *t = i->type;
    return true;
  }
  if (i->op == OP_sdpa_dmask && ir_get_float(i, "p", 0) > 0) {
    *t = i->type;
    return true;
  }
  if ((i->op != OP_sdpa && i->op != OP_sdpa_grad) || ir_get_float(i, "p", 0) <= 0)
    return false;
  *t = i->in[0]->type;
  t->dim[3] = i->in[1]->type.dim[2];
  return true;
}

uint64_t ir_hash_more(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3u;
  }
  return h;
}

uint64_t ir_hash(const void *p, size_t n) { return ir_hash_more(0xcbf29ce484222325u, p, n); }

/* ---- attributes ---- */

static Attr *attr_slot(Inst *i, const char *name, AttrKind kind, Arena *a) {
  for (int k = 0; k < i->nattr; k++)
    if (!strcmp(i->attr[k].name, name)) {
      i->attr[k].kind = kind;
      return &i->attr[k];
    }
  i->attr = arena_realloc(a, i->attr, sizeof(Attr) * (size_t)i->nattr,
                          sizeof(Attr) * (size_t)(i->nattr + 1));
  Attr *at = &i->attr[i->nattr++];
  at->name = arena_strdup(a, name);
  at->kind = kind;
  return at;
}

#define inst_arena (i->fn->mod->arena)

void ir_set_int(Inst *i, const char *name, int64_t v) {
  attr_slot(i, name, A_INT, inst_arena)->i = v;
}

void ir_set_ints(Inst *i, const char *name, const int64_t *v, int n) {
  Attr *at = attr_slot(i, name, A_INTS, inst_arena);
  at->ints = arena_alloc(inst_arena, sizeof(int64_t) * (size_t)(n ? n : 1));
  if (n)
    memcpy(at->ints, v, sizeof(int64_t) * (size_t)n);
  at->n = n;
}

void ir_set_float(Inst *i, const char *name, double v) {
  attr_slot(i, name, A_FLOAT, inst_arena)->f = v;
}

void ir_set_str(Inst *i, const char *name, const char *s) {
  attr_slot(i, name, A_STR, inst_arena)->s = arena_strdup(inst_arena, s);
}

void ir_copy_attrs(Inst *dst, const Inst *src) {
  Arena *a = dst->fn->mod->arena;
  if (!dst->nattr && src->nattr && a == src->fn->mod->arena) {
    /* in one arena: the copy shares the names, strings and int arrays,
     * which nothing writes once they are set (a device's copies of an op
     * hold one array of a thousand block lengths, not a thousand) */
    dst->attr = arena_alloc(a, sizeof(Attr) * (size_t)src->nattr);
    memcpy(dst->attr, src->attr, sizeof(Attr) * (size_t)src->nattr);
    dst->nattr = src->nattr;
    return;
  }
  for (int k = 0; k < src->nattr; k++) {
    const Attr *a = &src->attr[k];
    switch (a->kind) {
    case A_INT: ir_set_int(dst, a->name, a->i); break;
    case A_INTS: ir_set_ints(dst, a->name, a->ints, a->n); break;
    case A_FLOAT: ir_set_float(dst, a->name, a->f); break;
    case A_STR: ir_set_str(dst, a->name, a->s); break;
    }
  }
}

const Attr *ir_attr(const Inst *i, const char *name) {
  for (int k = 0; k < i->nattr; k++)
    if (!strcmp(i->attr[k].name, name))
      return &i->attr[k];
  return NULL;
}

static bool same_attr(const Attr *x, const Attr *y) {
  if (!y || x->kind != y->kind)
    return false;
  switch (x->kind) {
  case A_INT: return x->i == y->i;
  case A_INTS: return x->n == y->n && (!x->n || !memcmp(x->ints, y->ints, sizeof *x->ints * (size_t)x->n));
  case A_FLOAT: return !memcmp(&x->f, &y->f, sizeof x->f);
  case A_STR: return !strcmp(x->s, y->s);
  }
  return false;
}

bool ir_same_attrs(const Inst *a, const Inst *b) {
  if (a->nattr != b->nattr)
    return false;
  for (int k = 0; k < a->nattr; k++)
    if (!same_attr(&a->attr[k], ir_attr(b, a->attr[k].name)))
      return false;
  return true;
}

int64_t ir_get_int(const Inst *i, const char *name, int64_t dflt) {
  const Attr *a = ir_attr(i, name);
  return a && a->kind == A_INT ? a->i : dflt;
}

double ir_get_float(const Inst *i, const char *name, double dflt) {
  const Attr *a = ir_attr(i, name);
  if (a && a->kind == A_FLOAT)
    return a->f;
  return a && a->kind == A_INT ? (double)a->i : dflt;
}

const char *ir_get_str(const Inst *i, const char *name, const char *dflt) {
  const Attr *a = ir_attr(i, name);
  return a && a->kind == A_STR ? a->s : dflt;
}

const int64_t *ir_get_ints(const Inst *i, const char *name, int *n) {
  const Attr *a = ir_attr(i, name);
  if (!a || a->kind != A_INTS) {
    *n = 0;
    return NULL;
  }
  *n = a->n;
  return a->ints;
}

DtSchedule ir_schedule(const Inst *lr) {
  int k = dtrt_name_index(dtrt_schedule_names, DT_SCHED_COUNT, ir_get_str(lr, "schedule", ""));
  return k < 0 ? DT_SCHED_CONSTANT : (DtSchedule)k;
}
