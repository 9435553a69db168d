/* emit.c: the LLVM module of a dtc module: one step function per IR function
 * (func.c), the constant DtModelDesc the runtime reads, and the public
 * wrappers NAME_create, NAME_train_step, ... over dtrt_model_*; then the
 * check, the optimisation pipeline, the output file and NAME.h. NAME_forward
 * is inference: @forward without the training loss, so it needs no labels.
 * After the spmd pass each device D gets its own DtModelDesc, over
 * @forward.D and @train_step.D and its blocks of the params and state, and
 * NAME_create hands the array of them to dtrt_model_create_spmd; an elastic
 * build (cg_plans_add) holds such arrays for several plans, NAME_create
 * choosing by the job's size.
 * Requires: @forward (and @train_step, whose one output is the loss, when the
 * model trains), or their copies for every device; memplan's offsets (run
 * here when missing). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Analysis.h>

#include "dtrt.h"
#include "codegen.h"

LLVMValueRef cg_extern(Cg *c, const char *name, LLVMTypeRef type) {
  LLVMValueRef f = LLVMGetNamedFunction(c->mod, name);
  return f ? f : LLVMAddFunction(c->mod, name, type);
}

static bool is_loss(const Inst *i) {
  const char *loss = i->fn->mod->train.loss;
  return i->op == OP_output && loss && !strcmp(ir_get_str(i, "name", ""), loss);
}

bool *cg_live(const Func *f) {
  int n = f->inst.n;
  bool has_loss = false;
  for (int i = 0; i < n; i++)
    has_loss |= is_loss(f->inst.a[i]);
  if (!has_loss)
    return NULL;
  bool *live = arena_alloc(f->mod->arena, sizeof(bool) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    const Inst *x = f->inst.a[i];
    /* a pipeline stage's send is needed by its receiver */
    live[i] = (x->op == OP_output && !is_loss(x)) || x->op == OP_store || x->op == OP_send ||
              x->op == OP_bcast;
  }
  /* A group runs whole: one live member makes all live. */
  for (bool changed = true; changed;) {
    changed = false;
    for (int i = n - 1; i >= 0; i--) {
      const Inst *x = f->inst.a[i];
      bool l = live[i];
      for (int j = i + 1; !l && x->fuse && j < n && f->inst.a[j]->fuse == x->fuse; j++)
        l = live[j];
      for (int j = i - 1; !l && x->fuse && j >= 0 && f->inst.a[j]->fuse == x->fuse; j--)
        l = live[j];
      changed |= l != live[i];
      live[i] = l;
      for (int k = 0; l && k < x->nin; k++)
        if (!live[x->in[k]->id])
          live[x->in[k]->id] = changed = true;
    }
  }
  return live;
}

static bool loads(const Func *f, const bool *live, const char *global) {
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_load && (!live || live[i]) &&
        !strcmp(ir_get_str(f->inst.a[i], "global", ""), global))
      return true;
  return false;
}

int cg_func_inputs(const Func *f, const bool *live, int *in) {
  const Module *m = f->mod;
  int n = 0;
  for (int k = 0; k < m->global.n; k++)
    if (m->global.a[k].kind == G_INPUT && loads(f, live, m->global.a[k].name))
      in[n++] = k;
  return n;
}

int cg_func_outputs(const Func *f, const bool *live, const Inst **out) {
  int n = 0;
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_output && (!live || live[i]))
      out[n++] = f->inst.a[i];
  return n;
}

/* The LLVM struct t must lay out as the C struct of dtrt.h on the target:
 * a mismatch means the runtime ABI changed under the code generator. */
static void check_layout(Cg *c, LLVMTypeRef t, size_t size, const size_t *off, int n) {
  LLVMTargetDataRef td = LLVMGetModuleDataLayout(c->mod);
  DTC_ASSERT(LLVMABISizeOfType(td, t) == size);
  for (int k = 0; k < n; k++)
    DTC_ASSERT(LLVMOffsetOfElement(td, t, (unsigned)k) == off[k]);
}

static void make_types(Cg *c) {
  LLVMContextRef x = c->ctx;
  c->i1 = LLVMInt1TypeInContext(x);
  c->i8 = LLVMInt8TypeInContext(x);
  c->i32 = LLVMInt32TypeInContext(x);
  c->i64 = LLVMInt64TypeInContext(x);
  c->f32 = LLVMFloatTypeInContext(x);
  c->f64 = LLVMDoubleTypeInContext(x);
  c->ptr = LLVMPointerTypeInContext(x, 0);
  c->voidt = LLVMVoidTypeInContext(x);
  LLVMTypeRef tensor[] = {c->ptr, c->i32, c->i32, LLVMArrayType(c->i64, DT_MAX_RANK)};
  c->tensor = LLVMStructCreateNamed(x, "DtTensor");
  LLVMStructSetBody(c->tensor, tensor, COUNTOF(tensor), 0);
  LLVMTypeRef attrs[] = {LLVMArrayType(c->i64, DTRT_MAX_IATTRS), LLVMArrayType(c->f64, 8),
                         c->i32, c->i32, c->i64, c->ptr, c->ptr};
  c->attrs = LLVMStructCreateNamed(x, "DtAttrs");
  LLVMStructSetBody(c->attrs, attrs, COUNTOF(attrs), 0);
  static const size_t toff[] = {offsetof(DtTensor, data), offsetof(DtTensor, dtype),
                                offsetof(DtTensor, rank), offsetof(DtTensor, dim)};
  static const size_t aoff[] = {offsetof(DtAttrs, i), offsetof(DtAttrs, f),
                                offsetof(DtAttrs, ni), offsetof(DtAttrs, nf),
                                offsetof(DtAttrs, step), offsetof(DtAttrs, gemm),
                                offsetof(DtAttrs, s)};
  static_assert(COUNTOF(toff) == COUNTOF(tensor) && COUNTOF(aoff) == COUNTOF(attrs), "fields");
  check_layout(c, c->tensor, sizeof(DtTensor), toff, COUNTOF(toff));
  check_layout(c, c->attrs, sizeof(DtAttrs), aoff, COUNTOF(aoff));
  LLVMTypeRef step[] = {c->ptr, c->ptr, c->ptr, c->ptr, c->ptr, c->i64};
  c->step_fn = LLVMFunctionType(c->i32, step, COUNTOF(step), 0);
  LLVMTypeRef kern[] = {c->ptr, c->ptr, c->i32, c->ptr, c->ptr};
  c->kernel_fn = LLVMFunctionType(c->i32, kern, COUNTOF(kern), 0);
  LLVMTypeRef pieces[] = {c->ptr, c->ptr, c->ptr, c->i32, c->ptr, c->ptr, c->i32};
  c->pieces_fn = LLVMFunctionType(c->i32, pieces, COUNTOF(pieces), 0);
}

int cg_devices(const Module *m) {
  bool spmd = false;
  for (int k = 0; k < m->func.n; k++)
    spmd |= m->func.a[k]->device >= 0;
  if (!spmd)
    return 0;
  return ir_mesh_devices(m);
}

Func *cg_device_func(const Module *m, const char *name, int dev) {
  char full[256];
  if (dev >= 0) {
    snprintf(full, sizeof full, "%s.%d", name, dev);
    name = full;
  }
  Func *f = ir_find_device_func(m, name, dev);
  return f && !f->body ? f : NULL;
}

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

int64_t cg_state_layout(const Module *m, int dev, int64_t *off) {
  int64_t at = 0;
  for (int k = 0; off && k < m->global.n; k++)
    off[k] = -1;
  for (GlobalKind kind = G_PARAM; kind <= G_STATE; kind++)
    for (int k = 0; k < m->global.n; k++) {
      const Global *g = &m->global.a[k];
      if (g->kind != kind)
        continue;
      Type t = ir_global_type_on(m, g, dev);
      if (off)
        off[k] = at;
      at += round64(type_elems(&t) * (int64_t)dtype_size(t.dtype));
    }
  return at;
}

/* The one constant string s (names and hashes repeat in every device's
 * description). */
static LLVMValueRef cstr(Cg *c, const char *s) {
  size_t len = strlen(s);
  char *key = malloc(len + 2);
  DTC_ASSERT(key);
  memcpy(key, s, len + 1);
  key[len + 1] = 's';
  LLVMValueRef *e = cg_table_find(&c->consts, key, len + 2);
  if (!*e)
    *e = cg_private_const(c, LLVMConstStringInContext(c->ctx, s, (unsigned)len, 0), ".str");
  return *e;
}


static LLVMValueRef i32_array(Cg *c, const int *v, int n, const char *name) {
  if (!n)
    return LLVMConstNull(c->ptr);
  LLVMValueRef *e = arena_alloc(c->m->arena, sizeof(LLVMValueRef) * (size_t)n);
  for (int k = 0; k < n; k++)
    e[k] = cg_i32(c, v[k]);
  return cg_private_const(c, LLVMConstArray(c->i32, e, (unsigned)n), name);
}

/* The reading end of a pipe, hashed as it is read (ir_hash_more) on a
 * thread of its own while the printer writes the other end. */
typedef struct PipeHash {
  int fd;
  uint64_t h;
} PipeHash;

static void *hash_pipe(void *arg) {
  PipeHash *p = arg;
  unsigned char buf[1 << 16];
  for (;;) {
    ssize_t n = read(p->fd, buf, sizeof buf);
    DTC_ASSERT(n >= 0 || errno == EINTR);   /* a pipe's read fails no other way */
    if (!n)
      return NULL;
    if (n > 0)
      p->h = ir_hash_more(p->h, buf, (size_t)n);
  }
}

/* The hash of what print writes about m: of the module's text form without
 * source locations (checkpoints must match it, wherever the source was
 * compiled from), of its sharding plan (every rank must run the same). The
 * text streams through a pipe, so a long module's is never held whole;
 * without a pipe or a thread (no descriptors left), it is hashed whole. */
static const char *text_hash(Module *m, void (*print)(FILE *, const Module *)) {
  PipeHash p = {.h = ir_hash("", 0)};
  int fd[2];
  pthread_t reader;
  bool streamed = false;
  if (!pipe(fd)) {
    p.fd = fd[0];
    bool thread = !pthread_create(&reader, NULL, hash_pipe, &p);
    FILE *out = thread ? fdopen(fd[1], "w") : NULL;
    if (out) {
      setvbuf(out, NULL, _IOFBF, 1 << 16);
      print(out, m);
      DTC_ASSERT(!fclose(out));   /* the reader drains it to the end */
      streamed = true;
    } else {
      close(fd[1]);
    }
    if (thread)
      pthread_join(reader, NULL);
    close(fd[0]);
  }
  if (!streamed) {
    size_t n;
    char *text = ir_string_of(print, m, &n);
    p.h = ir_hash(text, n);
    free(text);
  }
  return arena_printf(m->arena, "%016llx", (unsigned long long)p.h);
}

/* The sharding plan: the mesh, its devices, and every global's sharding. */
static void print_plan(FILE *out, const Module *m) {
  const Mesh *mesh = &m->mesh.a[0];
  int ndev = 1;
  fprintf(out, "mesh %s", mesh->name);
  for (int a = 0; a < mesh->naxis; a++) {
    fprintf(out, " %s=%d", mesh->axis_name[a], mesh->axis_size[a]);
    ndev *= mesh->axis_size[a];
  }
  for (int k = 0; k < ndev; k++)
    fprintf(out, " %d", mesh->dev[k]);
  char b[256];
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    fprintf(out, "\n%s %s", gl->name,
            gl->shard ? ir_shard_str(m, gl->shard, gl->type.rank, b, sizeof b) : "whole");
  }
}

static LLVMTypeRef global_desc_type(Cg *c) {
  LLVMTypeRef dims = LLVMArrayType(c->i64, DT_MAX_RANK);
  LLVMTypeRef f[] = {c->ptr, c->i32, c->i32, c->i32, dims, c->i32,
                     c->f64, c->i64, c->i64, c->i64, dims, dims};
  LLVMTypeRef t = LLVMStructCreateNamed(c->ctx, "DtGlobalDesc");
  LLVMStructSetBody(t, f, COUNTOF(f), 0);
  static const size_t off[] = {
      offsetof(DtGlobalDesc, name),    offsetof(DtGlobalDesc, kind),
      offsetof(DtGlobalDesc, dtype),   offsetof(DtGlobalDesc, rank),
      offsetof(DtGlobalDesc, dim),     offsetof(DtGlobalDesc, init),
      offsetof(DtGlobalDesc, init_arg), offsetof(DtGlobalDesc, fan_in),
      offsetof(DtGlobalDesc, fan_out), offsetof(DtGlobalDesc, offset),
      offsetof(DtGlobalDesc, full),    offsetof(DtGlobalDesc, begin)};
  static_assert(COUNTOF(off) == COUNTOF(f), "DtGlobalDesc fields");
  check_layout(c, t, sizeof(DtGlobalDesc), off, COUNTOF(off));
  return t;
}

/* One DtGlobalDesc: the block ty of a tensor of shape full (NULL: ty itself)
 * from begin on (NULL: 0), name not set. Glorot's fans are gl's, or (when gl
 * gives none) those of the whole tensor's trailing matrix: [..., fan_in,
 * fan_out]. Bytes not in a field are zero, so two alike compare equal. */
static void global_desc(DtGlobalDesc *g, int kind, const Type *ty, const int64_t *full,
                        const int64_t *at, const Global *gl, int64_t off) {
  if (!full)
    full = ty->dim;
  memset(g, 0, sizeof *g);
  int r = ty->rank;
  for (int d = 0; d < r; d++) {
    g->dim[d] = ty->dim[d];
    g->full[d] = full[d];
    g->begin[d] = at ? at[d] : 0;
  }
  g->fan_in = r >= 2 ? full[r - 2] : r == 1 ? full[0] : 1;
  g->fan_out = r >= 1 ? full[r - 1] : 1;
  if (gl && gl->fan_in + gl->fan_out > 0) {
    g->fan_in = gl->fan_in;
    g->fan_out = gl->fan_out;
  }
  g->kind = kind;
  g->dtype = ty->dtype == DT_I32 ? DTRT_I32 : DTRT_F32;
  g->rank = r;
  g->init = gl && gl->init >= 0 ? gl->init : DT_INIT_ZEROS;
  g->init_arg = gl ? gl->init_arg : 0;
  g->offset = off;
}

static LLVMValueRef i64s(Cg *c, const int64_t *v) {
  LLVMValueRef e[DT_MAX_RANK];
  for (int d = 0; d < DT_MAX_RANK; d++)
    e[d] = cg_i64(c, v[d]);
  return LLVMConstArray(c->i64, e, DT_MAX_RANK);
}

/* g, named name, as a constant of type t (global_desc_type). */
static LLVMValueRef global_const(Cg *c, LLVMTypeRef t, const DtGlobalDesc *g, const char *name) {
  LLVMValueRef f[] = {cstr(c, name),
                      cg_i32(c, g->kind),
                      cg_i32(c, g->dtype),
                      cg_i32(c, g->rank),
                      i64s(c, g->dim),
                      cg_i32(c, g->init),
                      LLVMConstReal(c->f64, g->init_arg),
                      cg_i64(c, g->fan_in),
                      cg_i64(c, g->fan_out),
                      cg_i64(c, g->offset),
                      i64s(c, g->full),
                      i64s(c, g->begin)};
  return LLVMConstNamedStruct(t, f, COUNTOF(f));
}

/* What the tables g[0..n) (named name[0..n)) of the devices sharing one
 * must be alike in: all but the blocks (dim, begin, offset). Malloc'd. */
static char *table_key(const DtGlobalDesc *g, const char *const *name, int n, size_t *len) {
  char *text = NULL;
  FILE *out = open_memstream(&text, len);
  DTC_ASSERT(out);
  for (int k = 0; k < n; k++) {
    DtGlobalDesc y = g[k];
    memset(y.dim, 0, sizeof y.dim);
    memset(y.begin, 0, sizeof y.begin);
    y.offset = 0;
    fwrite(&y, sizeof y, 1, out);
    fwrite(name[k], strlen(name[k]) + 1, 1, out);
  }
  fclose(out);
  return text;
}

/* The global table g[0..n) (named name[0..n)) of device dev as a
 * constant. A single-device model's (dev -1) holds its blocks (*blocks
 * null). A device of a mesh gets its blocks apart (*blocks, as
 * DtModelDesc.blocks) and the table of its plan's first device, when the
 * two differ only in their blocks (else its own), so the runtime copies
 * every mesh device's table alike (dtrt_model_table_bytes). */
static LLVMValueRef global_table(Cg *c, int dev, const DtGlobalDesc *g, const char *const *name,
                                 int n, LLVMValueRef *blocks) {
  *blocks = LLVMConstNull(c->ptr);
  size_t len = 0;
  char *key = NULL;
  if (dev >= 0) {
    key = table_key(g, name, n, &len);
    int64_t *v = arena_alloc(c->m->arena, sizeof(int64_t) * (2 * DT_MAX_RANK + 1) * (size_t)n);
    int nv = 0;
    for (int k = 0; k < n; k++) {
      for (int d = 0; d < g[k].rank; d++)
        v[nv++] = g[k].dim[d];
      for (int d = 0; d < g[k].rank; d++)
        v[nv++] = g[k].begin[d];
      v[nv++] = g[k].offset;
    }
    *blocks = cg_ints_const(c, v, nv);
    if (c->globals0 && len == c->globals0_len && !memcmp(key, c->globals0_key, len)) {
      free(key);
      return c->globals0;
    }
  }
  LLVMTypeRef gt = global_desc_type(c);
  LLVMValueRef *e = arena_alloc(c->m->arena, sizeof(LLVMValueRef) * (size_t)(n + 1));
  for (int k = 0; k < n; k++)
    e[k] = global_const(c, gt, &g[k], name[k]);
  LLVMValueRef t = cg_private_const(c, LLVMConstArray(gt, e, (unsigned)n), "globals");
  if (key && !c->globals0) {
    c->globals0 = t;
    c->globals0_key = key;
    c->globals0_len = len;
  } else {
    free(key);
  }
  return t;
}

/* The wrappers pack the inputs device 0's function loads (the header's
 * arguments); every device's function must load the same ones: in[0..n)
 * of device dev, its forward's (which 0) or its train step's (1), kept
 * for device 0 (the first lowered) and checked against it for the others. */
static void same_inputs(Cg *c, int dev, int which, const int *in, int n) {
  if (dev <= 0) {
    c->inputs0[which] = arena_alloc(c->m->arena, sizeof(int) * (size_t)(n + 1));
    memcpy(c->inputs0[which], in, sizeof(int) * (size_t)n);
    c->ninputs0[which] = n;
    return;
  }
  DTC_ASSERT(c->ninputs0[which] == n &&
             !memcmp(c->inputs0[which], in, sizeof(int) * (size_t)n));
}

/* The DtModelDesc of device dev (-1: the one of a single-device model):
 * globals in the order inputs, params, state, then the outputs of @forward;
 * params and state as the device's blocks, inputs and outputs whole. Global k
 * draws its initial values from stream k, so every device lists them alike. */
static LLVMValueRef model_desc(Cg *c, int dev, Func *fwd, const bool *live, Func *train,
                               LLVMValueRef fwd_fn, LLVMValueRef train_fn, const char *device,
                               const char *target, const char *object) {
  Module *m = c->m;
  Arena *a = m->arena;
  const Inst **outs = arena_alloc(a, sizeof(Inst *) * (size_t)(fwd->inst.n + 1));
  int nout = cg_func_outputs(fwd, live, outs);
  int ng = m->global.n + nout, n = 0;
  DtGlobalDesc *g = arena_alloc(a, sizeof(DtGlobalDesc) * (size_t)ng);
  const char **gname = arena_alloc(a, sizeof(char *) * (size_t)ng);
  int *index = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  for (GlobalKind kind = G_INPUT; kind <= G_STATE; kind++)
    for (int k = 0; k < m->global.n; k++) {
      const Global *gl = &m->global.a[k];
      if (gl->kind != kind)
        continue;
      static const int dk[] = {DT_G_INPUT, DT_G_PARAM, DT_G_PARAM, DT_G_STATE};   /* buffers as params */
      static_assert(COUNTOF(dk) == G_STATE + 1, "global kinds");
      Type block;
      int64_t begin[IR_MAX_RANK];
      ir_local_type(m, dev < 0 ? NULL : gl->shard, &gl->type, dev, &block, begin);
      index[k] = n;
      gname[n] = gl->name;
      global_desc(&g[n++], dk[kind], &block, gl->type.dim, begin, gl, c->state_off[k]);
    }
  int *fwd_out = arena_alloc(a, sizeof(int) * (size_t)(nout + 1));
  for (int k = 0; k < nout; k++) {
    const char *name = ir_get_str(outs[k], "name", "out");
    if (ir_find_global(m, name))
      name = arena_printf(a, "%s.out", name);
    const Inst *v = outs[k]->in[0];
    for (int d = 0; dev >= 0 && d < v->type.rank; d++)
      DTC_ASSERT(v->shard->axis[d] < 0 && !v->shard->partial);   /* whole on every device */
    fwd_out[k] = n;
    gname[n] = name;
    global_desc(&g[n++], DT_G_OUTPUT, &v->type, NULL, NULL, NULL, -1);
  }
  int *in = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  int nfwd_in = cg_func_inputs(fwd, live, in);
  same_inputs(c, dev, 0, in, nfwd_in);
  for (int k = 0; k < nfwd_in; k++)
    in[k] = index[in[k]];
  LLVMValueRef fwd_in = i32_array(c, in, nfwd_in, "fwd_in");
  int ntrain_in = train ? cg_func_inputs(train, NULL, in) : 0;
  same_inputs(c, dev, 1, in, ntrain_in);
  for (int k = 0; k < ntrain_in; k++)
    in[k] = index[in[k]];
  LLVMValueRef train_in = i32_array(c, in, ntrain_in, "train_in");

  int64_t work = cg_work_bytes(m, dev);
  LLVMValueRef mesh = LLVMConstNull(c->ptr), plan = LLVMConstNull(c->ptr);
  int naxis = dev >= 0 ? m->mesh.a[0].naxis : 0;
  if (naxis) {
    mesh = i32_array(c, m->mesh.a[0].axis_size, naxis, "mesh");
    plan = cstr(c, c->plan_hash);
  }
  LLVMValueRef blocks;
  LLVMValueRef globals = global_table(c, dev, g, gname, ng, &blocks);
  LLVMTypeRef ft[] = {c->ptr, c->ptr, c->i32, c->ptr, c->i64, c->i64, c->ptr, c->i32, c->ptr, c->ptr,
                      c->i32, c->i32, c->ptr, c->ptr, c->i32, c->ptr, c->ptr, c->ptr, c->ptr, c->ptr,
                      c->i32, c->ptr};
  LLVMTypeRef dt = LLVMStructCreateNamed(c->ctx, "DtModelDesc");
  LLVMStructSetBody(dt, ft, COUNTOF(ft), 0);
  static const size_t doff[] = {
      offsetof(DtModelDesc, name),       offsetof(DtModelDesc, hash),
      offsetof(DtModelDesc, nglobal),    offsetof(DtModelDesc, global),
      offsetof(DtModelDesc, state_bytes), offsetof(DtModelDesc, work_bytes),
      offsetof(DtModelDesc, train_step), offsetof(DtModelDesc, ntrain_in),
      offsetof(DtModelDesc, train_in),   offsetof(DtModelDesc, forward),
      offsetof(DtModelDesc, nfwd_in),    offsetof(DtModelDesc, nfwd_out),
      offsetof(DtModelDesc, fwd_in),     offsetof(DtModelDesc, fwd_out),
      offsetof(DtModelDesc, nmesh_axis), offsetof(DtModelDesc, mesh_axis_size),
      offsetof(DtModelDesc, plan_hash),  offsetof(DtModelDesc, device),
      offsetof(DtModelDesc, target),     offsetof(DtModelDesc, object),
      offsetof(DtModelDesc, denormals),  offsetof(DtModelDesc, blocks)};
  static_assert(COUNTOF(doff) == COUNTOF(ft), "DtModelDesc fields");
  check_layout(c, dt, sizeof(DtModelDesc), doff, COUNTOF(doff));
  LLVMValueRef f[] = {cstr(c, m->name),
                      cstr(c, c->hash),
                      cg_i32(c, ng),
                      globals,
                      cg_i64(c, c->state_bytes),
                      cg_i64(c, work),
                      train_fn ? train_fn : LLVMConstNull(c->ptr),
                      cg_i32(c, ntrain_in),
                      train_in,
                      fwd_fn ? fwd_fn : LLVMConstNull(c->ptr),
                      cg_i32(c, nfwd_in),
                      cg_i32(c, nout),
                      fwd_in,
                      i32_array(c, fwd_out, nout, "fwd_out"),
                      cg_i32(c, naxis),
                      mesh,
                      plan,
                      device ? cstr(c, device) : LLVMConstNull(c->ptr),
                      target ? cstr(c, target) : LLVMConstNull(c->ptr),
                      object ? cstr(c, object) : LLVMConstNull(c->ptr),
                      cg_i32(c, c->denormals),
                      blocks};
  return cg_private_const(c, LLVMConstNamedStruct(dt, f, COUNTOF(f)), "desc");
}

/* ---- the public wrappers ---- */

static LLVMValueRef wrapper(Cg *c, const char *what, LLVMTypeRef ret, LLVMTypeRef *param,
                            int n) {
  const char *name = arena_printf(c->m->arena, "%s_%s", c->m->name, what);
  LLVMValueRef f = LLVMAddFunction(c->mod, name, LLVMFunctionType(ret, param, (unsigned)n, 0));
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(c->ctx, nounwind, 0));
  LLVMPositionBuilderAtEnd(c->b, LLVMAppendBasicBlockInContext(c->ctx, f, "entry"));
  return f;
}

static LLVMValueRef call(Cg *c, const char *callee, LLVMTypeRef ret, LLVMTypeRef *param,
                         LLVMValueRef *arg, int n) {
  LLVMTypeRef t = LLVMFunctionType(ret, param, (unsigned)n, 0);
  return LLVMBuildCall2(c->b, t, cg_extern(c, callee, t), arg, (unsigned)n, "");
}

/* Stores params first..first+2n (pointer, count pairs) into two stack arrays. */
static void pack(Cg *c, LLVMValueRef f, int first, int n, LLVMValueRef *ptrs,
                 LLVMValueRef *counts) {
  if (!n) {
    *ptrs = *counts = LLVMConstNull(c->ptr);
    return;
  }
  LLVMTypeRef pa = LLVMArrayType(c->ptr, (unsigned)n), ca = LLVMArrayType(c->i64, (unsigned)n);
  *ptrs = LLVMBuildAlloca(c->b, pa, "");
  *counts = LLVMBuildAlloca(c->b, ca, "");
  for (int k = 0; k < n; k++) {
    LLVMValueRef idx[] = {cg_i32(c, 0), cg_i32(c, k)};
    LLVMBuildStore(c->b, LLVMGetParam(f, (unsigned)(first + 2 * k)),
                   LLVMBuildInBoundsGEP2(c->b, pa, *ptrs, idx, 2, ""));
    LLVMBuildStore(c->b, LLVMGetParam(f, (unsigned)(first + 2 * k + 1)),
                   LLVMBuildInBoundsGEP2(c->b, ca, *counts, idx, 2, ""));
  }
}

/* desc[0..ndev) are the devices' descriptions; ndev 0: desc[0] is the
 * model's only one. fwd, live and train are those of device 0. NAME_create
 * leaves its message (empty on success) in a buffer of the calling thread,
 * which NAME_error(NULL) returns. */
static void wrappers(Cg *c, LLVMValueRef *desc, int ndev, Func *fwd, const bool *live,
                     Func *train, const CgPlans *plans) {
  Module *m = c->m;
  LLVMTypeRef p = c->ptr, i64 = c->i64, i32 = c->i32;
  LLVMValueRef f, r;
  enum { ERRLEN = 1024 };
  LLVMTypeRef et = LLVMArrayType(c->i8, ERRLEN);
  LLVMValueRef err = LLVMAddGlobal(c->mod, et, arena_printf(m->arena, "%s.create_error", m->name));
  LLVMSetInitializer(err, LLVMConstNull(et));
  LLVMSetLinkage(err, LLVMInternalLinkage);
  LLVMSetThreadLocal(err, 1);

  LLVMTypeRef create[] = {p, i64};
  f = wrapper(c, "create", i32, create, 2);
  LLVMValueRef seed = LLVMGetParam(f, 1), out = LLVMGetParam(f, 0), none = LLVMConstNull(p);
  LLVMValueRef errlen = cg_i64(c, ERRLEN);
  if (plans) {
    LLVMTypeRef rt[] = {p, p, i32, i64, p, p, i64, p};
    LLVMValueRef arg[] = {plans->desc, plans->count, cg_i32(c, plans->n), seed, none, err,
                          errlen, out};
    LLVMBuildRet(c->b, call(c, "dtrt_model_create_plans_with", i32, rt, arg, 8));
  } else if (ndev) {
    LLVMValueRef dev = cg_private_const(c, LLVMConstArray(p, desc, (unsigned)ndev), "devices");
    LLVMTypeRef rt[] = {p, i32, i64, p, p, i64, p};
    LLVMValueRef arg[] = {dev, cg_i32(c, ndev), seed, none, err, errlen, out};
    LLVMBuildRet(c->b, call(c, "dtrt_model_create_spmd_with", i32, rt, arg, 7));
  } else {
    LLVMTypeRef rt[] = {p, i64, p, p, i64, p};
    LLVMValueRef arg[] = {desc[0], seed, none, err, errlen, out};
    LLVMBuildRet(c->b, call(c, "dtrt_model_create_with", i32, rt, arg, 6));
  }

  int *in = arena_alloc(m->arena, sizeof(int) * (size_t)(m->global.n + 1));
  size_t npt = (size_t)(2 * (m->global.n + fwd->inst.n) + 2);
  LLVMTypeRef *pt = arena_alloc(m->arena, sizeof(LLVMTypeRef) * npt);
  LLVMValueRef ins, counts, outs, ocounts;
  if (train) {
    int n = cg_func_inputs(train, NULL, in);
    pt[0] = p;
    for (int k = 0; k < n; k++)
      pt[1 + 2 * k] = p, pt[2 + 2 * k] = i64;
    pt[1 + 2 * n] = p;
    for (int local = 0; local < 2; local++) {
      f = wrapper(c, local ? "train_step_local" : "train_step", i32, pt, 2 + 2 * n);
      pack(c, f, 1, n, &ins, &counts);
      LLVMTypeRef rt[] = {p, p, p, p};
      LLVMValueRef arg[] = {LLVMGetParam(f, 0), ins, counts,
                            LLVMGetParam(f, (unsigned)(1 + 2 * n))};
      LLVMBuildRet(c->b, call(c, local ? "dtrt_model_train_step_local" : "dtrt_model_train_step",
                              i32, rt, arg, 4));
    }

    /* NAME_set_lr, NAME_get_lr: the base learning rate, the compiled one
     * until set */
    LLVMTypeRef pd[] = {p, c->f64};
    f = wrapper(c, "set_lr", i32, pd, 2);
    LLVMValueRef sa[] = {LLVMGetParam(f, 0), LLVMGetParam(f, 1)};
    LLVMBuildRet(c->b, call(c, "dtrt_model_set_lr", i32, pd, sa, 2));
    f = wrapper(c, "get_lr", c->f64, pd, 1);
    LLVMValueRef ga[] = {LLVMGetParam(f, 0), LLVMConstReal(c->f64, m->train.lr)};
    LLVMBuildRet(c->b, call(c, "dtrt_model_lr", c->f64, pd, ga, 2));
  }

  int nin = cg_func_inputs(fwd, live, in);
  const Inst **o = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(fwd->inst.n + 1));
  int nout = cg_func_outputs(fwd, live, o);
  pt[0] = p;
  for (int k = 0; k < nin + nout; k++)
    pt[1 + 2 * k] = p, pt[2 + 2 * k] = i64;
  for (int local = 0; local < 2; local++) {
    f = wrapper(c, local ? "forward_local" : "forward", i32, pt, 1 + 2 * (nin + nout));
    pack(c, f, 1, nin, &ins, &counts);
    pack(c, f, 1 + 2 * nin, nout, &outs, &ocounts);
    LLVMTypeRef fwd_rt[] = {p, p, p, p, p};
    LLVMValueRef fwd_arg[] = {LLVMGetParam(f, 0), ins, counts, outs, ocounts};
    LLVMBuildRet(c->b, call(c, local ? "dtrt_model_forward_local" : "dtrt_model_forward", i32,
                            fwd_rt, fwd_arg, 5));
  }

  /* this rank's rows of the inputs */
  LLVMTypeRef rows[] = {p, p, p, p};
  f = wrapper(c, "input_rows", i32, rows, 4);
  LLVMValueRef ra[] = {LLVMGetParam(f, 0), LLVMGetParam(f, 1), LLVMGetParam(f, 2),
                       LLVMGetParam(f, 3)};
  LLVMBuildRet(c->b, call(c, "dtrt_model_input_rows", i32, rows, ra, 4));
  f = wrapper(c, "rank", i32, &p, 1);
  r = LLVMGetParam(f, 0);
  LLVMBuildRet(c->b, call(c, "dtrt_model_rank", i32, &p, &r, 1));
  LLVMTypeRef mem[] = {p, p, p};
  f = wrapper(c, "memory", i32, mem, 3);
  LLVMValueRef ma[] = {LLVMGetParam(f, 0), LLVMGetParam(f, 1), LLVMGetParam(f, 2)};
  LLVMBuildRet(c->b, call(c, "dtrt_model_memory", i32, mem, ma, 3));

  static const char *io[][2] = {
      {"save", "dtrt_model_save"}, {"load", "dtrt_model_load"}, {"export", "dtrt_model_export"},
      {"load_params", "dtrt_model_load_params"}};
  for (size_t k = 0; k < COUNTOF(io); k++) {
    LLVMTypeRef pp[] = {p, p};
    f = wrapper(c, io[k][0], i32, pp, 2);
    LLVMValueRef arg[] = {LLVMGetParam(f, 0), LLVMGetParam(f, 1)};
    LLVMBuildRet(c->b, call(c, io[k][1], i32, pp, arg, 2));
  }
  f = wrapper(c, "step", i64, &p, 1);
  r = LLVMGetParam(f, 0);
  LLVMBuildRet(c->b, call(c, "dtrt_model_step", i64, &p, &r, 1));
  f = wrapper(c, "error", p, &p, 1);
  r = LLVMGetParam(f, 0);
  LLVMBasicBlockRef some = LLVMAppendBasicBlockInContext(c->ctx, f, "model");
  LLVMBasicBlockRef nil = LLVMAppendBasicBlockInContext(c->ctx, f, "none");
  LLVMBuildCondBr(c->b, LLVMBuildIsNull(c->b, r, ""), nil, some);
  LLVMPositionBuilderAtEnd(c->b, some);
  LLVMBuildRet(c->b, call(c, "dtrt_model_error", p, &p, &r, 1));
  LLVMPositionBuilderAtEnd(c->b, nil);
  LLVMBuildRet(c->b, err);
  f = wrapper(c, "destroy", c->voidt, &p, 1);
  r = LLVMGetParam(f, 0);
  call(c, "dtrt_model_destroy", c->voidt, &p, &r, 1);
  LLVMBuildRetVoid(c->b);
}

static const char *header_path(Arena *a, const char *output, const char *name) {
  const char *slash = strrchr(output, '/');
  int dir = slash ? (int)(slash - output + 1) : 0;
  return arena_printf(a, "%.*s%s.h", dir, output, name);
}

/* LLVM's remarks and warnings (a loop it could not vectorise) are not the
 * user's business; an error is a bug in dtc. */
static void on_llvm_diag(LLVMDiagnosticInfoRef di, void *unused) {
  (void)unused;
  if (LLVMGetDiagInfoSeverity(di) != LLVMDSError)
    return;
  char *s = LLVMGetDiagInfoDescription(di);
  dtc_die(__FILE__, __LINE__, "LLVM: %s", s);
}

static bool c_identifier(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_'))
      return false;
  return true;
}

/* A rank reads its block of each input as a run of whole rows: in place in
 * the whole batch, or passed alone (NAME_train_step_local). */
static bool check_inputs(const Module *m, int ndev, Diag *d) {
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    for (int dev = 0; g->kind == G_INPUT && dev < ndev; dev++) {
      Type block;
      ir_local_type(m, g->shard, &g->type, dev, &block, NULL);
      for (int i = 1; i < g->type.rank; i++)
        if (block.dim[i] != g->type.dim[i]) {
          diag_error(d, g->loc, "input '%s' is split on dimension %d; inputs may be split on "
                     "their first dimension only", g->name, i);
          return false;
        }
    }
  }
  return true;
}

/* Gives the functions of mod after `after` (NULL: all) that have bodies the
 * CPU and features of a device that differ from its target machine's. */
static void device_cpu(Cg *c, LLVMValueRef after, const CgDevice *cd, const CgTarget *t) {
  if (!strcmp(cd->cpu, t->cpu) && !strcmp(cd->features, t->features))
    return;
  LLVMValueRef f = after ? LLVMGetNextFunction(after) : LLVMGetFirstFunction(c->mod);
  for (; f; f = LLVMGetNextFunction(f)) {
    if (LLVMIsDeclaration(f))
      continue;
    static const char *key[] = {"target-cpu", "target-features"};
    const char *val[] = {cd->cpu, cd->features};
    for (int k = 0; k < 2; k++)
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(c->ctx, key[k], (unsigned)strlen(key[k]),
                                                        val[k], (unsigned)strlen(val[k])));
  }
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* A new LLVM module for target machine tm in c. */
static void cg_open(Cg *c, const char *name, LLVMTargetMachineRef tm) {
  c->ctx = LLVMContextCreate();
  LLVMContextSetDiagnosticHandler(c->ctx, on_llvm_diag, NULL);
  c->mod = LLVMModuleCreateWithNameInContext(name, c->ctx);
  c->b = LLVMCreateBuilderInContext(c->ctx);
  char *triple = LLVMGetTargetMachineTriple(tm);
  LLVMSetTarget(c->mod, triple);
  LLVMDisposeMessage(triple);
  LLVMTargetDataRef td = LLVMCreateTargetDataLayout(tm);
  LLVMSetModuleDataLayout(c->mod, td);
  LLVMDisposeTargetData(td);
  make_types(c);
}

/* Tells LLVM that every function of c's module with a body runs with
 * denormals flushed, results and operands, as dtrt_fp_enter sets the
 * thread for the step (the attribute only informs the optimizer). */
static void flush_denormals(Cg *c) {
  static const char *key[] = {"denormal-fp-math", "denormal-fp-math-f32"};
  const char *val = "preserve-sign,preserve-sign";
  for (LLVMValueRef f = LLVMGetFirstFunction(c->mod); f; f = LLVMGetNextFunction(f))
    for (int k = 0; !LLVMIsDeclaration(f) && k < 2; k++)
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(c->ctx, key[k], (unsigned)strlen(key[k]),
                                                        val, (unsigned)strlen(val)));
}

/* Frees c's module and what its lowering kept. */
static void cg_dispose(Cg *c) {
  cg_table_free(&c->loops);
  cg_table_free(&c->packs);
  LLVMDisposeBuilder(c->b);
  LLVMDisposeModule(c->mod);
  LLVMContextDispose(c->ctx);
}

/* Verifies c's module where opt asks, writes it by tm to output and
 * disposes of it. */
static bool cg_close(Cg *c, LLVMTargetMachineRef tm, const CgOptions *opt, const char *output,
                     Diag *d) {
  if (c->denormals == DT_DENORMALS_FLUSH)
    flush_denormals(c);
  char *msg = NULL;
  if (opt->verify && LLVMVerifyModule(c->mod, LLVMReturnStatusAction, &msg))
    dtc_die(__FILE__, __LINE__, "generated LLVM module does not verify: %s", msg);
  LLVMDisposeMessage(msg);
  CgOptions o = *opt;
  o.output = output;
  bool ok = cg_write(c->mod, tm, &o, d);
  cg_dispose(c);
  return ok;
}

/* A set of a device's functions as lowered once: the text that decides
 * their code (see device_key), its hash, and the LLVM functions of its roots
 * (@forward, @train_step: either or both). */
typedef struct Lowered {
  uint64_t hash;
  char *key;
  size_t len;
  LLVMValueRef fwd, train;
} Lowered;

/* The sets lowered so far, by distinct key; one list per object. */
typedef struct LoweredSet {
  Lowered *a;
  int n;
} LoweredSet;

static void lowered_free(LoweredSet *s) {
  for (int k = 0; k < s->n; k++)
    free(s->a[k].key);
  free(s->a);
}

/* Inst x as its code sees it: the attributes its code reads from the
 * device's row at run time empty (cg_varying_attr, consts.c), and its
 * sharding without the ratios of uneven blocks: code reads a block's
 * extent from local types and attrs, which the text holds, so devices of
 * two plans whose blocks are alike share code. */
static void print_inst_key(FILE *out, const Inst *x) {
  Inst y = *x;
  Sharding shard;
  if (x->shard) {
    shard = *x->shard;
    memset(shard.ratio, 0, sizeof shard.ratio);
    y.shard = &shard;
  }
  if (!cg_varying(x)) {
    ir_print_inst(out, &y);
    return;
  }
  Attr attr[16];
  DTC_ASSERT(x->nattr <= (int)COUNTOF(attr));
  memcpy(attr, x->attr, sizeof(Attr) * (size_t)x->nattr);
  y.attr = attr;
  for (int k = 0; k < x->nattr; k++)
    if (cg_varying_attr(x, attr[k].name)) {
      DTC_ASSERT(attr[k].kind == A_INTS);
      static int64_t zeros[1];   /* read only */
      attr[k].ints = zeros;
      attr[k].n = 0;   /* a plan's group sizes too */
    }
  ir_print_inst(out, &y);
}

/* What the code of the functions f[0..n) of device dev (a set whose roots
 * are named by roots) is made of: the target, cpu and features, the offsets
 * of the state's globals, and the functions as the IR printer writes them
 * (print_inst_key), each under its name without the device's suffix. A
 * repeat names its body without the suffix too, so devices whose functions
 * differ only in their number get the same text; a peer, a block offset or a
 * local shape that differs changes it. */
static char *device_key(const CgDevice *cd, const char *triple, int dev, const Module *m,
                        const int64_t *state_off, const char *roots, Func *const *f, int n,
                        size_t *len) {
  char *text = NULL;
  FILE *out = open_memstream(&text, len);
  DTC_ASSERT(out);
  fprintf(out, "%s %s %s %d %s\n", triple, cd->cpu ? cd->cpu : "", cd->features ? cd->features : "",
          dev >= 0, roots);
  for (int k = 0; k < m->global.n; k++)
    fprintf(out, "%s %lld\n", m->global.a[k].name, (long long)state_off[k]);
  for (int j = 0; j < n; j++) {
    ir_renumber(f[j]);
    const char *dot = dev >= 0 ? strrchr(f[j]->name, '.') : NULL;
    int len1 = dot ? (int)(dot - f[j]->name) : (int)strlen(f[j]->name);
    fprintf(out, "@%.*s %d %lld\n", len1, f[j]->name, f[j]->body, (long long)f[j]->work_bytes);
    for (int i = 0; i < f[j]->inst.n; i++)
      print_inst_key(out, f[j]->inst.a[i]);
  }
  fclose(out);
  return text;
}

/* The earlier set of s whose key is key's; NULL: none, and then key is s's
 * (which frees it) with the LLVM functions to come. */
static Lowered *lowered_find(LoweredSet *s, char *key, size_t len) {
  uint64_t h = ir_hash(key, len);
  for (int k = 0; k < s->n; k++)
    if (s->a[k].hash == h && s->a[k].len == len && !memcmp(s->a[k].key, key, len)) {
      free(key);
      return &s->a[k];
    }
  Lowered *a = realloc(s->a, sizeof *a * (size_t)(s->n + 1));
  DTC_ASSERT(a);
  s->a = a;
  a[s->n++] = (Lowered){h, key, len, NULL, NULL};
  return NULL;
}

/* The functions root runs, root first and then the bodies of its repeats
 * and theirs, into out[0..); returns their count. */
static int reached(Func *root, Func **out) {
  int n = 0;
  out[n++] = root;
  for (int k = 0; k < n; k++)
    for (int i = 0; i < out[k]->inst.n; i++) {
      Func *b = out[k]->inst.a[i]->op == OP_repeat ? ir_repeat_body(out[k]->inst.a[i]) : NULL;
      int j = 0;
      while (b && j < n && out[j] != b)
        j++;
      if (b && j == n)
        out[n++] = b;
    }
  return n;
}

/* Device dev's functions into all[0..), in the module's order; the set of
 * @forward's into set[0] and @train_step's into set[1] when the two run
 * none in common and hold all of them between them, and otherwise all into
 * set[0] (nset[1] 0). Two sets: a device shares each with any other device
 * whose set is alike, as a forward without its plan's training may. */
static void device_sets(Module *m, int dev, Func *fw, Func *tr, Func **all, Func **set[2],
                        int nset[2]) {
  int n = 0;
  for (int j = 0; j < m->func.n; j++)
    if (m->func.a[j]->device == dev)
      all[n++] = m->func.a[j];
  nset[0] = reached(fw, set[0]);
  nset[1] = tr ? reached(tr, set[1]) : 0;
  bool apart = nset[0] + nset[1] == n;
  for (int i = 0; apart && i < nset[0]; i++)
    for (int j = 0; apart && j < nset[1]; j++)
      apart = set[0][i] != set[1][j];
  if (!apart) {
    memcpy(set[0], all, sizeof *all * (size_t)n);
    nset[0] = n;
    nset[1] = 0;
  }
}

/* Lowers the step functions of c->m's devices of target t of ts into c's
 * module and makes every device's DtModelDesc (a device of another target
 * with its object's name and no functions) into desc[0..max(ndev, 1)); the
 * live insts of device 0's @forward into *live0. A device's @forward and
 * @train_step, with the bodies each runs, are two sets (one when they share
 * a body); a set that would lower alike (device_key) to one lowered here or
 * earlier in done shares its functions. */
static void lower_devices(Cg *c, const CgTargets *ts, int t, int ndev, LLVMValueRef *desc,
                          bool **live0, LoweredSet *done) {
  Module *m = c->m;
  const CgTarget *tg = &ts->t[t];
  Func *train = cg_device_func(m, "train_step", ndev ? 0 : -1);
  size_t nf = (size_t)m->func.n + 1;
  Func **all = arena_alloc(m->arena, sizeof(Func *) * nf);
  Func **set[2] = {arena_alloc(m->arena, sizeof(Func *) * nf),
                   arena_alloc(m->arena, sizeof(Func *) * nf)};
  for (int k = 0; k < (ndev ? ndev : 1); k++) {
    int dev = ndev ? k : -1;
    const CgDevice *cd = &ts->dev[k];
    c->state_off = arena_alloc(m->arena, sizeof(int64_t) * (size_t)(m->global.n + 1));
    c->state_bytes = cg_state_layout(m, dev, c->state_off);
    Func *fw = cg_device_func(m, "forward", dev), *tr = cg_device_func(m, "train_step", dev);
    DTC_ASSERT(fw && !tr == !train);
    LLVMValueRef fwd_fn = NULL, train_fn = NULL;
    bool *live = cg_live(fw);
    int nset[2];
    device_sets(m, dev, fw, tr, all, set, nset);
    for (int s = 0; cd->target == t && s < 2 && nset[s]; s++) {
      bool both = !nset[1];
      const char *roots = both ? "forward train_step" : s ? "train_step" : "forward";
      size_t len = strlen(roots);
      /* one device: nothing to share, no key to print */
      char *key = ndev ? device_key(cd, tg->norm, dev, m, c->state_off, roots, set[s], nset[s],
                                    &len)
                       : strdup(roots);
      DTC_ASSERT(key);
      for (int j = 0; !ndev && j < nset[s]; j++)
        ir_renumber(set[s][j]);
      Lowered *same = lowered_find(done, key, len);
      if (!same) {
        same = &done->a[done->n - 1];
        LLVMValueRef last = LLVMGetLastFunction(c->mod);
        c->cpu = cd->cpu;
        c->features = cd->features;
        cg_vary_begin(c, set[s], nset[s], !both && s);
        for (int j = 0; j < nset[s]; j++) {
          Func *f = set[s][j];
          LLVMValueRef fn = cg_func(c, f, f == fw ? live : NULL);
          if (f == fw)
            same->fwd = fn;
          if (f == tr)
            same->train = fn;
        }
        device_cpu(c, last, cd, tg);
      }
      if (ndev)
        cg_vary_row(c, set[s], nset[s], c->dev_base + k, !both && s);
      if (both || !s)
        fwd_fn = same->fwd;
      if (both || s)
        train_fn = same->train;
    }
    const char *object = cd->target == t ? NULL : base_name(ts->t[cd->target].output);
    desc[k] = model_desc(c, dev, fw, live, tr, fwd_fn, train_fn, ndev ? cd->name : NULL,
                         ndev ? ts->t[cd->target].triple : NULL, object);
    if (!k)
      *live0 = live;
  }
  free(c->globals0_key);
  c->globals0 = NULL;
  c->globals0_key = NULL;
}

/* Lowers and writes the object of target t of ts: the step functions of its
 * devices, every device's DtModelDesc and the wrappers. */
static bool emit_target(Module *m, const CgOptions *opt, const CgTargets *ts, int t, int ndev,
                        const char *hash, const char *plan_hash, Diag *d) {
  Func *fwd = cg_device_func(m, "forward", ndev ? 0 : -1);
  Func *train = cg_device_func(m, "train_step", ndev ? 0 : -1);
  Cg cg = {.m = m, .sym = m->name, .hash = hash, .plan_hash = plan_hash, .matmul = opt->matmul,
            .denormals = opt->denormals, .part_ops = opt->part_ops};
  Cg *c = &cg;
  cg_open(c, m->name, ts->t[t].tm);
  LLVMValueRef *desc = arena_alloc(m->arena, sizeof(LLVMValueRef) * (size_t)(ndev + 1));
  bool *live0 = NULL;
  LoweredSet done = {0};
  int zero = 0;
  cg_rows_begin(c, ndev, &ndev, &zero, 1);
  lower_devices(c, ts, t, ndev, desc, &live0, &done);
  lowered_free(&done);
  wrappers(c, desc, ndev, fwd, live0, train, NULL);
  cg_rows_end(c);
  return cg_close(c, ts->t[t].tm, opt, ts->t[t].output, d);
}

/* What code generation needs of m, checked. */
static bool check_module(Module *m, int ndev, Diag *d) {
  Loc none = {0};
  Func *fwd = cg_device_func(m, "forward", ndev ? 0 : -1);
  Func *train = cg_device_func(m, "train_step", ndev ? 0 : -1);
  if (!c_identifier(m->name)) {
    diag_error(d, none, "model name '%s' cannot name C functions (%s_create, ...)", m->name,
               m->name);
    return false;
  }
  if (!fwd) {
    diag_error(d, m->loc, "module '%s' has no @forward to generate code for", m->name);
    return false;
  }
  if (train) {
    const Inst **outs = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(train->inst.n + 1));
    DTC_ASSERT(cg_func_outputs(train, NULL, outs) == 1);   /* the loss, all DtStepFn takes */
  }
  if (!check_inputs(m, ndev, d))
    return false;
  for (int k = 0; k < m->func.n; k++)
    DTC_ASSERT(m->func.a[k]->work_bytes >= 0);   /* the pipeline ran memplan */
  return true;
}

bool cg_emit(Module *m, const CgOptions *opt, Diag *d) {
  Loc none = {0};
  int ndev = cg_devices(m);
  if (!check_module(m, ndev, d))
    return false;
  CgTargets ts;
  if (!cg_targets(m, opt, ndev, &ts, d))
    return false;
  cg_memory_check(m, &ts, opt->matmul, d);
  if (ts.n > 1 && !strcmp(opt->output, "-")) {
    diag_error(d, none, "the devices of model '%s' run code for %d targets (%s and %s%s), one "
               "file each: give -o FILE, not -o -", m->name, ts.n, ts.t[0].triple,
               ts.t[1].triple, ts.n > 2 ? ", ..." : "");
    cg_targets_free(&ts);
    return false;
  }

  const char *hash = text_hash(m, ir_print_structure);
  const char *plan_hash = ndev ? text_hash(m, print_plan) : NULL;
  bool ok = true, to_stdout = !strcmp(opt->output, "-");
  int written = 0;   /* the targets whose files this run wrote (regular files) */
  while (ok && written < ts.n) {
    ok = emit_target(m, opt, &ts, written, ndev, hash, plan_hash, d);
    written += ok;
  }
  if (ok && !to_stdout)
    ok = cg_write_header(m, &ts, header_path(m->arena, opt->output, m->name), d);
  /* A failed compilation leaves none of the objects it wrote behind, so no
   * object stands without its header. */
  for (int t = 0; !ok && !to_stdout && t < written; t++)
    remove(ts.t[t].output);
  cg_targets_free(&ts);
  return ok;
}

/* The plans of an elastic build into one object: each plan's functions and
 * descriptions under NAME.nN, the wrappers (alike for every plan, which
 * share the model's interface) once, NAME_create choosing among the plans
 * by the job's size (dtrt_model_create_plans_with). Lowered as each plan
 * comes, so the driver frees a plan's IR before compiling the next. */
struct CgElastic {
  const CgOptions *opt;
  int n, added;   /* plans, and those added */
  int devices[CG_MAX_PLANS], base[CG_MAX_PLANS], all;
  Module *m0;     /* the first plan: the wrappers', the header's */
  CgTargets ts0;  /* its targets: the object's */
  Cg cg;
  LLVMValueRef list[CG_MAX_PLANS];   /* each plan's array of device descriptions */
  int count[CG_MAX_PLANS];
  bool *live0, ok;
  LoweredSet done;   /* devices of different plans share alike */
  int64_t most[2];   /* the most state and work of any plan's rank */
};

CgElastic *cg_plans_begin(const int *devices, int n, const CgOptions *opt) {
  DTC_ASSERT(n >= 1 && n <= CG_MAX_PLANS);
  CgElastic *e = calloc(1, sizeof *e);
  DTC_ASSERT(e);
  e->opt = opt;
  e->n = n;
  e->ok = true;
  for (int k = 0; k < n; k++) {
    e->devices[k] = devices[k];
    e->base[k] = e->all;
    e->all += devices[k];
  }
  return e;
}

bool cg_plans_add(CgElastic *e, Module *m, Diag *d) {
  DTC_ASSERT(e->ok && e->added < e->n);
  Loc none = {0};
  const CgOptions *opt = e->opt;
  int k = e->added, ndev = cg_devices(m);
  DTC_ASSERT((!k || !strcmp(m->name, e->m0->name)) && (ndev ? ndev : 1) == e->devices[k]);
  CgTargets ts;
  if (!check_module(m, ndev, d) || !cg_targets(m, opt, ndev, &ts, d))
    return e->ok = false;
  cg_memory_check(m, &ts, opt->matmul, d);
  if (ts.n > 1) {
    diag_error(d, none, "the devices of model '%s' in its plan for %d devices run code for %d "
               "targets (%s and %s%s); a build for several device counts (--devices) has one "
               "object, for one target", m->name, e->devices[k], ts.n, ts.t[0].triple,
               ts.t[1].triple, ts.n > 2 ? ", ..." : "");
    cg_targets_free(&ts);
    return e->ok = false;
  }
  Cg *c = &e->cg;
  if (!k) {
    e->m0 = m;
    e->ts0 = ts;
    *c = (Cg){.m = m, .matmul = opt->matmul, .denormals = opt->denormals,
              .part_ops = opt->part_ops};
    cg_open(c, m->name, ts.t[0].tm);
    cg_rows_begin(c, e->all, e->devices, e->base, e->n);
  }
  int nd = ndev ? ndev : 1;
  c->m = m;
  c->dev_base = e->base[k];
  c->sym = arena_printf(m->arena, "%s.n%d", m->name, e->devices[k]);
  c->hash = text_hash(m, ir_print_structure);
  c->plan_hash = ndev ? text_hash(m, print_plan) : NULL;
  LLVMValueRef *desc = arena_alloc(m->arena, sizeof(LLVMValueRef) * (size_t)nd);
  bool *live = NULL;
  lower_devices(c, &ts, 0, ndev, desc, &live, &e->done);
  e->list[k] = cg_private_const(c, LLVMConstArray(c->ptr, desc, (unsigned)nd), "devices");
  e->count[k] = nd;
  if (!k)
    e->live0 = live;
  else
    cg_targets_free(&ts);
  cg_plan_memory(m, &e->most[0], &e->most[1]);
  c->m = e->m0;
  e->added++;
  return true;
}

bool cg_plans_end(CgElastic *e, Diag *d) {
  const CgOptions *opt = e->opt;
  Cg *c = &e->cg;
  bool ok = e->ok && e->added == e->n;
  lowered_free(&e->done);
  if (ok) {
    Module *m0 = e->m0;
    int ndev0 = cg_devices(m0);
    CgPlans plans = {e->n, cg_private_const(c, LLVMConstArray(c->ptr, e->list, (unsigned)e->n),
                                            "plans"),
                     i32_array(c, e->count, e->n, "plan_devices")};
    wrappers(c, NULL, 0, cg_device_func(m0, "forward", ndev0 ? 0 : -1), e->live0,
             cg_device_func(m0, "train_step", ndev0 ? 0 : -1), &plans);
    cg_rows_end(c);
    ok = cg_close(c, e->ts0.t[0].tm, opt, e->ts0.t[0].output, d);
    if (ok && strcmp(opt->output, "-")) {
      ok = cg_write_header_plans(m0, &e->ts0, e->devices, e->n, e->most,
                                 header_path(m0->arena, opt->output, m0->name), d);
      if (!ok)
        remove(e->ts0.t[0].output);
    }
  } else if (e->added) {
    cg_rows_end(c);
    cg_dispose(c);
  }
  if (e->added)
    cg_targets_free(&e->ts0);
  free(e);
  return ok;
}
