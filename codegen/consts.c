/* consts.c: what devices' code differs in, read at run time. A kernel's
 * integer attributes that hold a device's place (dropout's `at`, the block
 * origin of its mask) or its plan's blocks (a collective's `sizes`,
 * `dim_sizes`) are not baked into the code: the code reads them from a table
 * by the device it runs on, so devices whose code differs only there share
 * one function (emit.c's keys leave them out). The table: dtc.rows, two
 * pointers per device of every plan in the object (its @forward's set and
 * its @train_step's, emit.c), each to a row of pointers, one per such kernel
 * of the set in the order of its functions and insts, each to that kernel's
 * DtAttrs.ni and DtAttrs.i for the device (the count first, as an i64); rows and attribute arrays alike are one constant
 * each. A device's index among the object's: dtc.plan_base[nranks] + rank
 * (the model takes the plan of the job's rank count, rank = device).
 * Also a table of byte strings (CgTable) for the sharing of loops and
 * constants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

typedef struct CgEntry {
  uint64_t hash;
  char *key;
  size_t len;
  LLVMValueRef v;
} CgEntry;

struct CgTable {
  CgEntry *a;
  int n, cap;   /* cap: a power of 2, at most half full */
};

void cg_table_free(CgTable **tp) {
  CgTable *t = *tp;
  for (int k = 0; t && k < t->cap; k++)
    free(t->a[k].key);
  if (t)
    free(t->a);
  free(t);
  *tp = NULL;
}

int cg_table_count(const CgTable *t) { return t ? t->n : 0; }

LLVMValueRef *cg_table_find(CgTable **tp, char *key, size_t len) {
  CgTable *t = *tp;
  if (!t) {
    t = *tp = calloc(1, sizeof *t);
    DTC_ASSERT(t);
  }
  if (2 * (t->n + 1) > t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    CgEntry *a = calloc((size_t)cap, sizeof *a);
    DTC_ASSERT(a);
    for (int k = 0; k < t->cap; k++) {
      if (!t->a[k].key)
        continue;
      int j = (int)(t->a[k].hash & (uint64_t)(cap - 1));
      while (a[j].key)
        j = (j + 1) & (cap - 1);
      a[j] = t->a[k];
    }
    free(t->a);
    t->a = a;
    t->cap = cap;
  }
  uint64_t h = ir_hash(key, len);
  int j = (int)(h & (uint64_t)(t->cap - 1));
  for (; t->a[j].key; j = (j + 1) & (t->cap - 1))
    if (t->a[j].hash == h && t->a[j].len == len && !memcmp(t->a[j].key, key, len)) {
      free(key);
      return &t->a[j].v;
    }
  t->n++;
  t->a[j] = (CgEntry){h, key, len, NULL};
  return &t->a[j].v;
}

bool cg_varying_attr(const Inst *x, const char *name) {
  if (x->fn->device < 0 || x->op == OP_matmul ||
      (ir_ops[x->op].kind != K_KERNEL && ir_ops[x->op].kind != K_COMM))
    return false;
  return !strcmp(name, "at") || !strcmp(name, "sizes") || !strcmp(name, "dim_sizes");
}

bool cg_varying(const Inst *x) {
  for (int k = 0; k < x->nattr; k++)
    if (cg_varying_attr(x, x->attr[k].name))
      return true;
  return false;
}

LLVMValueRef cg_private_const(Cg *c, LLVMValueRef init, const char *name) {
  LLVMValueRef g = LLVMAddGlobal(c->mod, LLVMTypeOf(init), name);
  LLVMSetInitializer(g, init);
  LLVMSetGlobalConstant(g, 1);
  LLVMSetLinkage(g, LLVMPrivateLinkage);
  LLVMSetUnnamedAddress(g, LLVMGlobalUnnamedAddr);
  return g;
}

LLVMValueRef cg_shared_const(Cg *c, char *key, size_t len, LLVMTypeRef t, LLVMValueRef *v,
                             int n, const char *name) {
  LLVMValueRef *e = cg_table_find(&c->consts, key, len);
  if (!*e)
    *e = cg_private_const(c, LLVMConstArray(t, v, (unsigned)n), name);
  return *e;
}

LLVMValueRef cg_ints_const(Cg *c, const int64_t *a, int n) {
  size_t len = sizeof(int64_t) * (size_t)n;
  char *key = malloc(len + 1);
  LLVMValueRef *v = malloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
  DTC_ASSERT(key && v);
  memcpy(key, a, len);
  key[len] = 'a';
  for (int k = 0; k < n; k++)
    v[k] = cg_i64(c, a[k]);
  LLVMValueRef g = cg_shared_const(c, key, len + 1, c->i64, v, n, "ints");
  free(v);
  return g;
}

void cg_rows_begin(Cg *c, int ndev_all, const int *devices, const int *base, int nplan) {
  c->ndev_all = ndev_all;
  int most = 0;
  for (int k = 0; k < nplan; k++)
    most = devices[k] > most ? devices[k] : most;
  c->nplan_base = most + 1;
  c->plan_base = calloc((size_t)c->nplan_base, sizeof(int));
  c->row = calloc((size_t)(2 * ndev_all + 1), sizeof(LLVMValueRef));
  DTC_ASSERT(c->plan_base && c->row);
  for (int k = 0; k < nplan; k++)
    c->plan_base[devices[k]] = base[k];
}

void cg_vary_begin(Cg *c, Func *const *set, int n, int s) {
  Arena *a = c->m->arena;
  c->set = s;
  c->nvary_fn = n;
  c->vary_fn = arena_alloc(a, sizeof(Func *) * (size_t)(n + 1));
  c->vary_slot = arena_alloc(a, sizeof(int *) * (size_t)(n + 1));
  int slot = 0;
  for (int j = 0; j < n; j++) {
    Func *f = set[j];
    c->vary_fn[j] = f;
    c->vary_slot[j] = arena_alloc(a, sizeof(int) * (size_t)(f->inst.n + 1));
    for (int i = 0; i < f->inst.n; i++) {
      bool vary = cg_varying(f->inst.a[i]);
      DTC_ASSERT(!vary || f->inst.a[i]->id == i);   /* emit.c's keys renumbered them */
      c->vary_slot[j][i] = vary ? slot++ : -1;
    }
  }
}

void cg_vary_row(Cg *c, Func *const *set, int n, int g, int s) {
  int count = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < set[j]->inst.n; i++)
      count += cg_varying(set[j]->inst.a[i]);
  if (!count)
    return;
  LLVMValueRef *ptr = arena_alloc(c->m->arena, sizeof(LLVMValueRef) * (size_t)count);
  int k = 0;
  for (int j = 0; j < n; j++)
    for (int i = 0; i < set[j]->inst.n; i++) {
      const Inst *x = set[j]->inst.a[i];
      if (!cg_varying(x))
        continue;
      DtAttrs a;
      ir_kernel_attrs(x, &a);
      size_t len = sizeof(int64_t) * (size_t)a.ni;
      char *key = malloc(len + 1);
      DTC_ASSERT(key);
      memcpy(key, a.i, len);
      key[len] = 'i';
      LLVMValueRef v[DTRT_MAX_IATTRS + 1];
      v[0] = cg_i64(c, a.ni);
      for (int e = 0; e < a.ni; e++)
        v[e + 1] = cg_i64(c, a.i[e]);
      ptr[k++] = cg_shared_const(c, key, len + 1, c->i64, v, a.ni + 1, "attrs.i");
    }
  size_t len = sizeof(LLVMValueRef) * (size_t)count;
  char *key = malloc(len + 1);
  DTC_ASSERT(key);
  memcpy(key, ptr, len);
  key[len] = 'r';
  c->row[2 * g + s] = cg_shared_const(c, key, len + 1, c->ptr, ptr, count, "row");
}

/* dtc.row(ctx, set): the row of the device the job's rank runs, made
 * once per module over the tables cg_rows_end fills. */
static LLVMValueRef row_fn(Cg *c) {
  if (c->row_fn)
    return c->row_fn;
  LLVMBuilderRef b = c->b;
  LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
  c->rows = LLVMAddGlobal(c->mod, LLVMArrayType(c->ptr, (unsigned)(2 * c->ndev_all)), "dtc.rows");
  c->bases = LLVMAddGlobal(c->mod, LLVMArrayType(c->i32, (unsigned)c->nplan_base),
                           "dtc.plan_base");
  LLVMValueRef glob[] = {c->rows, c->bases};
  for (int k = 0; k < 2; k++) {
    LLVMSetGlobalConstant(glob[k], 1);
    LLVMSetLinkage(glob[k], LLVMPrivateLinkage);
  }
  LLVMTypeRef pt[] = {c->ptr, c->i32};
  LLVMTypeRef ft = LLVMFunctionType(c->ptr, pt, 2, 0);
  LLVMValueRef f = c->row_fn = LLVMAddFunction(c->mod, "dtc.row", ft);
  LLVMSetLinkage(f, LLVMInternalLinkage);
  LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c->ctx, f, "entry"));
  LLVMTypeRef rt = LLVMFunctionType(c->i32, pt, 1, 0);
  LLVMValueRef ctx = LLVMGetParam(f, 0);
  LLVMValueRef n = LLVMBuildCall2(b, rt, cg_extern(c, "dtrt_nranks", rt), &ctx, 1, "n");
  LLVMValueRef r = LLVMBuildCall2(b, rt, cg_extern(c, "dtrt_rank", rt), &ctx, 1, "rank");
  LLVMValueRef at = LLVMBuildSExt(b, n, c->i64, "");
  LLVMValueRef base = LLVMBuildLoad2(b, c->i32, LLVMBuildInBoundsGEP2(b, c->i32, c->bases, &at, 1, ""),
                                     "base");
  LLVMValueRef dev = LLVMBuildSExt(b, LLVMBuildAdd(b, base, r, ""), c->i64, "");
  at = LLVMBuildAdd(b, LLVMBuildMul(b, dev, cg_i64(c, 2), ""),
                    LLVMBuildZExt(b, LLVMGetParam(f, 1), c->i64, ""), "");
  LLVMValueRef p = LLVMBuildInBoundsGEP2(b, c->ptr, c->rows, &at, 1, "");
  LLVMBuildRet(b, LLVMBuildLoad2(b, c->ptr, p, "row"));
  LLVMPositionBuilderAtEnd(b, here);
  return f;
}

LLVMValueRef cg_vary_ints(CgFn *fn, const Inst *x) {
  Cg *c = fn->c;
  int j = 0;
  while (j < c->nvary_fn && c->vary_fn[j] != x->fn)
    j++;
  DTC_ASSERT(j < c->nvary_fn && c->vary_slot[j][x->id] >= 0);
  LLVMTypeRef pt[] = {c->ptr, c->i32};
  LLVMTypeRef ft = LLVMFunctionType(c->ptr, pt, 2, 0);
  LLVMValueRef arg[] = {fn->ctx, cg_i32(c, c->set)};
  LLVMValueRef row = LLVMBuildCall2(c->b, ft, row_fn(c), arg, 2, "row");
  LLVMValueRef at = cg_i64(c, c->vary_slot[j][x->id]);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->ptr, row, &at, 1, "");
  return LLVMBuildLoad2(c->b, c->ptr, p, "ints");
}

void cg_rows_end(Cg *c) {
  if (c->row_fn) {
    LLVMValueRef *v = arena_alloc(c->m->arena, sizeof(LLVMValueRef) * (size_t)(2 * c->ndev_all));
    for (int k = 0; k < 2 * c->ndev_all; k++)
      v[k] = c->row[k] ? c->row[k] : LLVMConstNull(c->ptr);
    LLVMSetInitializer(c->rows, LLVMConstArray(c->ptr, v, (unsigned)(2 * c->ndev_all)));
    LLVMValueRef *b = arena_alloc(c->m->arena, sizeof(LLVMValueRef) * (size_t)c->nplan_base);
    for (int k = 0; k < c->nplan_base; k++)
      b[k] = cg_i32(c, c->plan_base[k]);
    LLVMSetInitializer(c->bases, LLVMConstArray(c->i32, b, (unsigned)c->nplan_base));
  }
  free(c->row);
  free(c->plan_base);
  c->row = NULL;
  c->plan_base = NULL;
  c->row_fn = NULL;
  cg_table_free(&c->consts);
}
