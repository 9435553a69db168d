/* func.c: lowers one IR function to an internal LLVM function of DtStepFn's
 * type. Fusion groups become loops (loop.c), repeats loops calling their
 * body's function (repeat.c), matmuls calls of the generated GEMM where its
 * rule takes them (gemm.c); every other computing op is a call to the
 * libdtrt kernel dtrt_k_<op> on DtTensor descriptors built on the stack,
 * whose status is returned at once when not 0. Loads, reshapes and a body's
 * args are addresses; stores and outputs copy unless the producer already
 * wrote there. A device's function (after spmd) reads its block of each
 * input where the runtime points it (model.c), and after a failure skips the
 * rest of its compute but still makes its collectives (and runs the loops
 * that make some), which the other ranks wait for, before it returns the
 * first failure's status. A device's body keeps that status in its caller's
 * variable, whose address follows its operands in `inputs`.
 * A function of more than CG_PART_OPS statements (a fusion group, a call of
 * its loop, counting as one) is cut into parts, internal
 * functions MODEL.F.partK of about that many each, which the function calls
 * in order with its own parameters (and where a device's keeps its status);
 * nothing is kept in a register across a cut: a part makes again in its entry
 * block the addresses and scalars it reads, from its parameters.
 * Requires: memplan's offsets; fusion groups contiguous (or none). */
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "codegen.h"

LLVMValueRef cg_i32(Cg *c, int64_t v) { return LLVMConstInt(c->i32, (unsigned long long)v, 1); }
LLVMValueRef cg_i64(Cg *c, int64_t v) { return LLVMConstInt(c->i64, (unsigned long long)v, 1); }

LLVMValueRef cg_gep(CgFn *fn, LLVMValueRef base, int64_t off) {
  if (!off)
    return base;
  LLVMValueRef idx = cg_i64(fn->c, off);
  return LLVMBuildInBoundsGEP2(fn->c->b, fn->c->i8, base, &idx, 1, "");
}

LLVMValueRef cg_state_addr(CgFn *fn, const Global *g) {
  int64_t off = fn->c->state_off[g - fn->c->m->global.a];
  DTC_ASSERT(off >= 0);
  return cg_gep(fn, fn->state, off);
}

/* Values kept for later use are made in the entry block, which dominates
 * every use: enter, build, then leave to where the builder was. */
static LLVMBasicBlockRef enter(CgFn *fn) {
  LLVMBasicBlockRef here = LLVMGetInsertBlock(fn->c->b);
  LLVMPositionBuilderAtEnd(fn->c->b, fn->entry);
  return here;
}

static void leave(CgFn *fn, LLVMBasicBlockRef here) { LLVMPositionBuilderAtEnd(fn->c->b, here); }

/* *slot = v until the end of the part being built. */
static LLVMValueRef keep(CgFn *fn, LLVMValueRef *slot, LLVMValueRef v) {
  if (fn->nkept == fn->capkept) {
    fn->capkept = fn->capkept ? 2 * fn->capkept : 64;
    fn->kept = realloc(fn->kept, sizeof *fn->kept * (size_t)fn->capkept);
    DTC_ASSERT(fn->kept);
  }
  fn->kept[fn->nkept++] = slot;
  return *slot = v;
}

LLVMValueRef cg_alloca(CgFn *fn, LLVMTypeRef t, const char *name) {
  LLVMBasicBlockRef here = enter(fn);
  LLVMValueRef a = LLVMBuildAlloca(fn->c->b, t, name);
  leave(fn, here);
  return a;
}

LLVMValueRef cg_scalar(CgFn *fn, const Inst *i) {
  Cg *c = fn->c;
  if (fn->val[i->id])
    return fn->val[i->id];
  LLVMBasicBlockRef here = enter(fn);
  LLVMValueRef v;
  if (i->op == OP_const) {
    v = LLVMConstReal(c->f32, (double)(float)ir_get_float(i, "value", 0));
  } else {
    DTC_ASSERT(i->op == OP_lr);
    /* the learning rate itself through dtrt_step_lr, which takes the one
     * NAME_set_lr set on the context; a fixed one through dtrt_lr */
    bool fixed = ir_get_int(i, "fixed", 0);
    /* with accumulate K, update step / K on the calls that end a window of K
     * (step % K == K - 1), idle on the others; the step is the same on every
     * rank, so every rank takes the same value */
    int64_t k = ir_get_int(i, "accumulate", 1);
    LLVMValueRef update = fn->step, due = NULL;
    if (k > 1) {
      update = LLVMBuildUDiv(c->b, fn->step, cg_i64(c, k), "update");
      LLVMValueRef r = LLVMBuildURem(c->b, fn->step, cg_i64(c, k), "");
      due = LLVMBuildICmp(c->b, LLVMIntEQ, r, cg_i64(c, k - 1), "due");
    }
    LLVMTypeRef pt[] = {c->ptr, c->i32, c->f64, c->i64, c->i64, c->f64, c->f64, c->f64, c->i64};
    LLVMTypeRef ft = LLVMFunctionType(c->f32, pt + fixed, COUNTOF(pt) - fixed, 0);
    LLVMValueRef arg[] = {
        fn->ctx,
        LLVMConstInt(c->i32, (unsigned)ir_schedule(i), 0),
        LLVMConstReal(c->f64, ir_get_float(i, "base", 0)),
        LLVMConstInt(c->i64, (unsigned long long)ir_get_int(i, "warmup", 0), 1),
        LLVMConstInt(c->i64, (unsigned long long)ir_get_int(i, "total", 0), 1),
        LLVMConstReal(c->f64, ir_get_float(i, "arg", 0)),
        LLVMConstReal(c->f64, ir_get_float(i, "beta1", 0)),
        LLVMConstReal(c->f64, ir_get_float(i, "beta2", 0)),
        update};
    v = LLVMBuildCall2(c->b, ft, cg_extern(c, fixed ? "dtrt_lr" : "dtrt_step_lr", ft),
                       arg + fixed, COUNTOF(arg) - fixed, "lr");
    if (ir_attr(i, "first")) {
      LLVMValueRef first = LLVMConstReal(c->f32, (double)(float)ir_get_float(i, "first", 0));
      LLVMValueRef at0 = LLVMBuildICmp(c->b, LLVMIntEQ, update, cg_i64(c, 0), "");
      v = LLVMBuildSelect(c->b, at0, first, v, "lr");
    }
    if (due) {
      LLVMValueRef idle = LLVMConstReal(c->f32, (double)(float)ir_get_float(i, "idle", 0));
      v = LLVMBuildSelect(c->b, due, v, idle, "lr");
    }
  }
  leave(fn, here);
  return keep(fn, &fn->val[i->id], v);
}

/* The output inst whose buffer holds kernel result v, or NULL. */
static const Inst *home_output(CgFn *fn, const Inst *v) {
  for (int k = fn->use.off[v->id]; k < fn->use.off[v->id + 1]; k++) {
    const Inst *u = fn->use.u[k];
    if (u->op == OP_output && ir_output_direct(u) && (!fn->live || fn->live[u->id]))
      return u;
  }
  return NULL;
}

LLVMValueRef cg_addr(CgFn *fn, const Inst *i) {
  if (fn->addr[i->id])
    return fn->addr[i->id];
  LLVMBasicBlockRef here = enter(fn);
  LLVMValueRef a;
  if (i->op == OP_reshape) {
    a = cg_addr(fn, i->in[0]);
  } else if (i->op == OP_const || i->op == OP_lr) {
    a = cg_alloca(fn, fn->c->f32, "scalar");
    LLVMBuildStore(fn->c->b, cg_scalar(fn, i), a);
  } else if (i->offset >= 0) {
    a = cg_gep(fn, fn->work, i->offset);
  } else if (i->op == OP_arg) {
    LLVMValueRef idx = cg_i64(fn->c, ir_get_int(i, "index", 0));
    LLVMValueRef p = LLVMBuildInBoundsGEP2(fn->c->b, fn->c->ptr, fn->inputs, &idx, 1, "");
    a = LLVMBuildLoad2(fn->c->b, fn->c->ptr, p, i->name ? i->name : "arg");
  } else if (i->op == OP_load && ir_global_of(i)->kind == G_INPUT) {
    const Global *g = ir_global_of(i);
    LLVMValueRef idx = cg_i64(fn->c, fn->input_index[g - fn->c->m->global.a]);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(fn->c->b, fn->c->ptr, fn->inputs, &idx, 1, "");
    a = LLVMBuildLoad2(fn->c->b, fn->c->ptr, p, g->name);
  } else if (i->op == OP_load) {
    a = cg_state_addr(fn, ir_global_of(i));
  } else if (ir_in_place(i->op)) { /* memplan: over the state it updates */
    a = cg_addr(fn, i->in[0]);
  } else {
    const Inst *o = home_output(fn, i);
    DTC_ASSERT(o);
    a = cg_output(fn, o);
  }
  leave(fn, here);
  return keep(fn, &fn->addr[i->id], a);
}

LLVMValueRef cg_output(CgFn *fn, const Inst *o) {
  Cg *c = fn->c;
  int k = fn->out_index[o->id];
  if (fn->out_ptr[k])
    return fn->out_ptr[k];
  LLVMBasicBlockRef here = enter(fn);
  LLVMValueRef idx = cg_i64(c, k);
  LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->ptr, fn->outputs, &idx, 1, "");
  LLVMValueRef v = LLVMBuildLoad2(c->b, c->ptr, p, ir_get_str(o, "name", "out"));
  leave(fn, here);
  return keep(fn, &fn->out_ptr[k], v);
}

static LLVMValueRef field(CgFn *fn, LLVMTypeRef t, LLVMValueRef p, int a, int b) {
  LLVMValueRef idx[] = {cg_i32(fn->c, 0), cg_i32(fn->c, a), cg_i32(fn->c, b)};
  return LLVMBuildInBoundsGEP2(fn->c->b, t, p, idx, b < 0 ? 2 : 3, "");
}

/* The DtTensors of x's operands and result, and of `also`, a second result
 * (or NULL), data pointers null: one constant [x->nin + 1 (+ 1) x DtTensor]
 * shared by every call alike. */
static LLVMValueRef tensors_const(Cg *c, const Inst *x, const Inst *also) {
  int n = x->nin + 1 + (also != NULL);
  size_t len = sizeof(int64_t) * (2 + DT_MAX_RANK) * (size_t)n;
  int64_t *key = calloc(1, len + 1);
  LLVMValueRef *t = malloc(sizeof(LLVMValueRef) * (size_t)n);
  DTC_ASSERT(key && t);
  for (int k = 0; k < n; k++) {
    const Type *ty = k < x->nin ? &x->in[k]->type : k == x->nin ? &x->type : &also->type;
    int64_t *w = key + k * (2 + DT_MAX_RANK);
    LLVMValueRef dim[DT_MAX_RANK];
    w[0] = ty->dtype == DT_I32 ? DTRT_I32 : DTRT_F32;
    w[1] = ty->rank;
    for (int d = 0; d < DT_MAX_RANK; d++) {
      w[2 + d] = d < ty->rank ? ty->dim[d] : 0;
      dim[d] = cg_i64(c, w[2 + d]);
    }
    LLVMValueRef f[] = {LLVMConstNull(c->ptr), cg_i32(c, (int)w[0]), cg_i32(c, ty->rank),
                        LLVMConstArray(c->i64, dim, DT_MAX_RANK)};
    t[k] = LLVMConstNamedStruct(c->tensor, f, COUNTOF(f));
  }
  ((char *)key)[len] = 't';
  LLVMValueRef v = cg_shared_const(c, (char *)key, len + 1, c->tensor, t, n, "tensors");
  free(t);
  return v;
}

void cg_check(CgFn *fn, LLVMValueRef s) {
  Cg *c = fn->c;
  if (fn->err) {
    LLVMValueRef e = LLVMBuildLoad2(c->b, c->i32, fn->err, "");
    LLVMValueRef first = LLVMBuildICmp(c->b, LLVMIntEQ, e, cg_i32(c, 0), "");
    LLVMBuildStore(c->b, LLVMBuildSelect(c->b, first, s, e, ""), fn->err);
    return;
  }
  LLVMBasicBlockRef here = LLVMGetInsertBlock(c->b);
  LLVMBasicBlockRef ok = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "ok");
  LLVMValueRef bad = LLVMBuildICmp(c->b, LLVMIntNE, s, cg_i32(c, 0), "");
  LLVMBuildCondBr(c->b, bad, fn->fail, ok);
  LLVMAddIncoming(fn->fail_phi, &s, &here, 1);
  LLVMPositionBuilderAtEnd(c->b, ok);
}

static void kernel(CgFn *fn, const Inst *x) {
  Cg *c = fn->c;
  LLVMTypeRef tt = LLVMArrayType(c->tensor, 17);
  if (!fn->tin) {
    fn->tin = cg_alloca(fn, tt, "tensors");
    fn->tattr = cg_alloca(fn, c->attrs, "attrs");
  }
  /* the operands in tin[0..nin), the result in tin[nin] (and an attention's
   * rows' log-sum-exp, its lse op's, in tin[nin + 1]: ir_lse_of): copied
   * whole from one constant, then their data pointers */
  const Inst *lse = ir_lse_of(x);
  DTC_ASSERT(x->nin + (lse != NULL) <= 16);
  LLVMBuildMemCpy(c->b, fn->tin, 8, tensors_const(c, x, lse), 8,
                  cg_i64(c, (int64_t)sizeof(DtTensor) * (x->nin + 1 + (lse != NULL))));
  LLVMValueRef out = NULL;
  for (int k = 0; k <= x->nin + (lse != NULL); k++) {
    LLVMValueRef idx[] = {cg_i32(c, 0), cg_i32(c, k)};
    LLVMValueRef t = LLVMBuildInBoundsGEP2(c->b, tt, fn->tin, idx, 2, "");
    const Inst *v = k < x->nin ? x->in[k] : k == x->nin ? x : lse;
    LLVMBuildStore(c->b, cg_addr(fn, v), field(fn, c->tensor, t, 0, -1));
    out = k == x->nin ? t : out;
  }
  DtAttrs a;
  ir_kernel_attrs(x, &a);
  LLVMValueRef ni = cg_i32(c, a.ni);
  if (cg_varying(x)) {   /* the device's own, from its row: the count, the ints */
    LLVMValueRef p = cg_vary_ints(fn, x), one = cg_i64(c, 1);
    LLVMValueRef n = LLVMBuildLoad2(c->b, c->i64, p, "ni");
    LLVMBuildMemCpy(c->b, field(fn, c->attrs, fn->tattr, 0, 0), 8,
                    LLVMBuildInBoundsGEP2(c->b, c->i64, p, &one, 1, ""), 8,
                    LLVMBuildMul(c->b, n, cg_i64(c, (int64_t)sizeof(int64_t)), ""));
    ni = LLVMBuildTrunc(c->b, n, c->i32, "");
  } else if (a.ni > 2) {
    LLVMBuildMemCpy(c->b, fn->tattr, 8, cg_ints_const(c, a.i, a.ni), 8,
                    cg_i64(c, (int64_t)sizeof(int64_t) * a.ni));
  } else {
    for (int k = 0; k < a.ni; k++)
      LLVMBuildStore(c->b, cg_i64(c, a.i[k]), field(fn, c->attrs, fn->tattr, 0, k));
  }
  for (int k = 0; k < a.nf; k++)
    LLVMBuildStore(c->b, LLVMConstReal(c->f64, a.f[k]), field(fn, c->attrs, fn->tattr, 1, k));
  LLVMBuildStore(c->b, ni, field(fn, c->attrs, fn->tattr, 2, -1));
  LLVMBuildStore(c->b, cg_i32(c, a.nf), field(fn, c->attrs, fn->tattr, 3, -1));
  LLVMBuildStore(c->b, fn->step, field(fn, c->attrs, fn->tattr, 4, -1));
  LLVMValueRef gemm = cg_conv_gemm(c->matmul, x) ? cg_gemm_entry(c) : LLVMConstNull(c->ptr);
  LLVMBuildStore(c->b, gemm, field(fn, c->attrs, fn->tattr, 5, -1));
  LLVMValueRef str = a.s ? LLVMBuildGlobalStringPtr(c->b, a.s, "attr") : LLVMConstNull(c->ptr);
  LLVMBuildStore(c->b, str, field(fn, c->attrs, fn->tattr, 6, -1));
  char name[64];
  snprintf(name, sizeof name, "dtrt_k_%s%s", ir_ops[x->op].name, lse ? "_with_lse" : "");
  LLVMValueRef k = cg_extern(c, name, c->kernel_fn);
  uint32_t cut = 0;
  for (int j = 0; j < x->nin; j++)
    cut |= (ir_piece_rows(x, j) > 0) << j;
  if (cut) {
    LLVMValueRef arg[] = {fn->ctx, k, fn->tin, cg_i32(c, x->nin), out, fn->tattr,
                          cg_i32(c, cut)};
    cg_check(fn, LLVMBuildCall2(c->b, c->pieces_fn, cg_extern(c, "dtrt_pieces", c->pieces_fn), arg,
                                7, ""));
    return;
  }
  LLVMValueRef arg[] = {fn->ctx, fn->tin, cg_i32(c, x->nin), out, fn->tattr};
  cg_check(fn, LLVMBuildCall2(c->b, c->kernel_fn, k, arg, 5, ""));
}

/* dst <- the value of v (a scalar or a buffer of v's type). */
static void copy(CgFn *fn, LLVMValueRef dst, const Inst *v) {
  Cg *c = fn->c;
  if (v->op == OP_const || v->op == OP_lr) {
    LLVMBuildStore(c->b, cg_scalar(fn, v), dst);
    return;
  }
  LLVMValueRef src = cg_addr(fn, v);
  if (src == dst)
    return;
  int64_t bytes = type_elems(&v->type) * (int64_t)dtype_size(v->type.dtype);
  LLVMBuildMemCpy(c->b, dst, 4, src, 4, cg_i64(c, bytes));
}

static void lower(CgFn *fn, const Inst *x) {
  Cg *c = fn->c;
  switch (x->op) {
  case OP_load: {
    const Global *g = ir_global_of(x);
    if (g->kind == G_INPUT) {
      cg_addr(fn, x);
    } else if (x->offset >= 0) {
      int64_t bytes = type_elems(&x->type) * (int64_t)dtype_size(x->type.dtype);
      LLVMBuildMemCpy(c->b, cg_addr(fn, x), 64, cg_state_addr(fn, g), 64, cg_i64(c, bytes));
    }
    return;
  }
  case OP_store:
    if (ir_in_place(x->in[0]->op) && x->in[0]->offset < 0)
      return; /* updated in place */
    copy(fn, cg_state_addr(fn, ir_global_of(x)), x->in[0]);
    return;
  case OP_output:
    if (!ir_output_direct(x))
      copy(fn, cg_output(fn, x), x->in[0]);
    return;
  case OP_const:
  case OP_lr:
    cg_scalar(fn, x);
    return;
  case OP_reshape:
  case OP_repeat_out:   /* written by its loop */
    return;
  case OP_sdpa_lse:
  case OP_ring_sdpa_lse:
    if (ir_lse_partner(x))
      return;   /* written by its partner's kernel */
    kernel(fn, x);
    return;
  case OP_arg:
    cg_addr(fn, x);
    return;
  case OP_repeat:
    cg_repeat(fn, x);
    return;
  default:
    if (x->op == OP_matmul && cg_gemm_wanted(c, x))
      cg_check(fn, cg_gemm(fn, x, NULL, 0));
    else
      kernel(fn, x);
  }
}

/* noalias state and work, nounwind: a step function's and its parts'. And
 * optnone (with noinline, which it needs): a step function only fills
 * tensors and attributes and calls the loops, kernels and GEMM, which LLVM
 * optimises apart, so its optimisation bought nothing at run time but cost
 * most of an elastic build's time (one step function per local batch). */
static void step_attrs(Cg *c, LLVMValueRef fn) {
  LLVMSetLinkage(fn, LLVMInternalLinkage);
  unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (unsigned p = 2; p <= 3; p++)
    LLVMAddAttributeAtIndex(fn, p, LLVMCreateEnumAttribute(c->ctx, noalias, 0));
  static const char *attr[] = {"nounwind", "noinline", "optnone"};
  for (int k = 0; k < (int)COUNTOF(attr); k++)
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(c->ctx, LLVMGetEnumAttributeKindForName(
                                                                attr[k], strlen(attr[k])), 0));
}

LLVMValueRef cg_func_decl(Cg *c, const Func *f) {
  const char *name = arena_printf(c->m->arena, "%s.%s", c->sym, f->name);
  LLVMValueRef fn = LLVMGetNamedFunction(c->mod, name);
  if (fn)
    return fn;
  fn = LLVMAddFunction(c->mod, name, c->step_fn);
  step_attrs(c, fn);
  return fn;
}

/* Lowers the live insts [from, to) of fn->f where the builder stands; a
 * fusion group is lowered whole, and one computing nothing needed
 * (ir_idle) not at all. */
static void lower_insts(CgFn *fn, int from, int to) {
  Cg *c = fn->c;
  Func *f = fn->f;
  for (int i = from; i < to;) {
    Inst *x = f->inst.a[i];
    int j = i + 1;
    if (x->fuse)
      while (j < to && f->inst.a[j]->fuse == x->fuse)
        j++;
    if ((fn->live && !fn->live[i]) || fn->idle[i]) {
      i = j;
      continue;
    }
    /* after a failure a device's function runs its collectives only */
    LLVMBasicBlockRef next = NULL, run = NULL, here = LLVMGetInsertBlock(c->b);
    if (fn->err && !ir_joins_group(x)) {
      run = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "run");
      next = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "next");
      LLVMValueRef e = LLVMBuildLoad2(c->b, c->i32, fn->err, "");
      LLVMBuildCondBr(c->b, LLVMBuildICmp(c->b, LLVMIntEQ, e, cg_i32(c, 0), ""), run, next);
      LLVMPositionBuilderAtEnd(c->b, run);
    }
    if (x->op == OP_matmul && x->fuse && cg_gemm_wanted(c, x)) {
      cg_check(fn, cg_gemm(fn, x, &f->inst.a[i + 1], j - i - 1));
    } else if (x->op == OP_matmul && x->fuse) {   /* a product and its epilogue, apart */
      lower(fn, x);
      cg_group(fn, &f->inst.a[i + 1], j - i - 1);
    } else if (x->fuse || ir_ops[x->op].kind == K_ELEM)
      cg_group(fn, &f->inst.a[i], j - i);
    else
      lower(fn, x);
    if (next && LLVMGetInsertBlock(c->b) == run && !LLVMGetFirstInstruction(run)) {
      /* x made no code (a view, a value kept in place): no check for it */
      for (int k = 0; k < 3; k++)   /* the branch, the compare, the load */
        LLVMInstructionEraseFromParent(LLVMGetLastInstruction(here));
      LLVMDeleteBasicBlock(run);
      LLVMDeleteBasicBlock(next);
      LLVMPositionBuilderAtEnd(c->b, here);
    } else if (next) {
      LLVMBuildBr(c->b, next);
      LLVMPositionBuilderAtEnd(c->b, next);
    }
    i = j;
  }
}

/* The parts of fn->f: part k lowers insts [start[k], start[k + 1]), at most
 * limit statements (a live fusion group, which is one call, or one other
 * live inst). Returns their count (start[count] is the end). */
static int plan_parts(const CgFn *fn, int limit, int *start) {
  const Func *f = fn->f;
  int n = f->inst.n, count = 0, size = 0;
  for (int i = 0; i < n;) {
    int j = i + 1;
    if (f->inst.a[i]->fuse)
      while (j < n && f->inst.a[j]->fuse == f->inst.a[i]->fuse)
        j++;
    bool live = !fn->live || fn->live[i];
    if (live && (!count || size + 1 > limit)) {
      start[count++] = i;
      size = 0;
    }
    size += live;
    i = j;
  }
  start[0] = 0;
  start[count > 0 ? count : 1] = n;
  return count > 0 ? count : 1;
}

/* Starts the body of fn->fn, whose first parameters are DtStepFn's: names
 * them, makes the entry, body and fail blocks, and leaves the builder in
 * the entry block. Returns the body block. */
static LLVMBasicBlockRef begin(CgFn *fn) {
  Cg *c = fn->c;
  fn->ctx = LLVMGetParam(fn->fn, 0);
  fn->state = LLVMGetParam(fn->fn, 1);
  fn->work = LLVMGetParam(fn->fn, 2);
  fn->inputs = LLVMGetParam(fn->fn, 3);
  fn->outputs = LLVMGetParam(fn->fn, 4);
  fn->step = LLVMGetParam(fn->fn, 5);
  LLVMSetValueName2(fn->ctx, "ctx", 3);
  LLVMSetValueName2(fn->state, "state", 5);
  LLVMSetValueName2(fn->work, "work", 4);
  LLVMSetValueName2(fn->inputs, "inputs", 6);
  LLVMSetValueName2(fn->outputs, "outputs", 7);
  LLVMSetValueName2(fn->step, "step", 4);
  fn->tin = fn->tattr = NULL;
  fn->entry = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "entry");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "body");
  fn->fail = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "fail");
  LLVMPositionBuilderAtEnd(c->b, fn->fail);
  fn->fail_phi = LLVMBuildPhi(c->b, c->i32, "status");
  LLVMBuildRet(c->b, fn->fail_phi);
  LLVMPositionBuilderAtEnd(c->b, fn->entry);
  return body;
}

/* Returns the status where the builder stands, closes the entry block and
 * forgets what was kept for this function. */
static void finish(CgFn *fn, LLVMBasicBlockRef body) {
  Cg *c = fn->c;
  LLVMBuildRet(c->b, fn->err ? LLVMBuildLoad2(c->b, c->i32, fn->err, "") : cg_i32(c, 0));
  LLVMPositionBuilderAtEnd(c->b, fn->entry);
  LLVMBuildBr(c->b, body);
  if (!LLVMCountIncoming(fn->fail_phi))
    LLVMDeleteBasicBlock(fn->fail);
  else
    LLVMMoveBasicBlockAfter(fn->fail, LLVMGetLastBasicBlock(fn->fn));
  for (int k = 0; k < fn->nkept; k++)
    *fn->kept[k] = NULL;
  fn->nkept = 0;
}

/* Part k of top, insts [from, to): an internal function of DtStepFn's
 * parameters and top's status pointer (NULL but on a device), called where
 * the builder stands in top, which returns its failure. */
static void lower_part(CgFn *top, int k, int from, int to) {
  Cg *c = top->c;
  LLVMTypeRef pt[] = {c->ptr, c->ptr, c->ptr, c->ptr, c->ptr, c->i64, c->ptr};
  LLVMTypeRef ft = LLVMFunctionType(c->i32, pt, COUNTOF(pt), 0);
  const char *name = arena_printf(c->m->arena, "%s.part%d", LLVMGetValueName(top->fn), k);
  LLVMValueRef pf = LLVMAddFunction(c->mod, name, ft);
  step_attrs(c, pf);   /* noinline: called once, it would be inlined back */
  LLVMValueRef err = top->err ? top->err : LLVMConstNull(c->ptr);
  LLVMValueRef arg[] = {top->ctx, top->state, top->work, top->inputs, top->outputs, top->step, err};
  cg_check(top, LLVMBuildCall2(c->b, ft, pf, arg, COUNTOF(arg), ""));
  LLVMBasicBlockRef here = LLVMGetInsertBlock(c->b);

  CgFn part = *top;
  part.fn = pf;
  LLVMBasicBlockRef body = begin(&part);
  if (top->err)
    part.err = LLVMGetParam(pf, 6);
  LLVMPositionBuilderAtEnd(c->b, body);
  lower_insts(&part, from, to);
  finish(&part, body);
  top->kept = part.kept;
  top->capkept = part.capkept;
  LLVMPositionBuilderAtEnd(c->b, here);
}

LLVMValueRef cg_func(Cg *c, Func *f, const bool *live) {
  Module *m = c->m;
  Arena *a = m->arena;
  ir_renumber(f);
  int n = f->inst.n;
  CgFn fnv = {.c = c, .f = f, .live = live}, *fn = &fnv;
  fn->use = ir_uses(a, f);
  fn->addr = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(n + 1));
  fn->val = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(n + 1));
  fn->idle = arena_alloc(a, sizeof(bool) * (size_t)(n + 1));
  ir_idle(f, fn->idle);
  fn->out_index = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
  fn->input_index = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  const Inst **outs = arena_alloc(a, sizeof(Inst *) * (size_t)(n + 1));
  int nout = cg_func_outputs(f, live, outs);
  fn->out_ptr = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(nout + 1));
  for (int k = 0; k < nout; k++)
    fn->out_index[outs[k]->id] = k;
  int *ins = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  int nin = cg_func_inputs(f, live, ins);
  for (int k = 0; k < nin; k++)
    fn->input_index[ins[k]] = k;

  fn->fn = cg_func_decl(c, f);
  DTC_ASSERT(!LLVMCountBasicBlocks(fn->fn));   /* lowered once */
  LLVMBasicBlockRef body = begin(fn);
  if (f->device >= 0 && f->body) {
    int nargs = 0;
    for (int i = 0; i < n; i++)
      nargs += f->inst.a[i]->op == OP_arg;
    LLVMValueRef idx = cg_i64(c, nargs);
    LLVMValueRef p = LLVMBuildInBoundsGEP2(c->b, c->ptr, fn->inputs, &idx, 1, "");
    fn->err = LLVMBuildLoad2(c->b, c->ptr, p, "err");
  } else if (f->device >= 0) {
    fn->err = LLVMBuildAlloca(c->b, c->i32, "err");
    LLVMBuildStore(c->b, cg_i32(c, 0), fn->err);
  }
  LLVMPositionBuilderAtEnd(c->b, body);
  int *start = arena_alloc(a, sizeof(int) * (size_t)(n + 2));
  int nparts = plan_parts(fn, c->part_ops > 0 ? c->part_ops : CG_PART_OPS, start);
  if (nparts == 1)
    lower_insts(fn, 0, n);
  for (int k = 0; nparts > 1 && k < nparts; k++)
    lower_part(fn, k, start[k], start[k + 1]);
  finish(fn, body);
  free(fn->kept);
  return fn->fn;
}
