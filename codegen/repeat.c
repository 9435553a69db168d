/* repeat.c: a repeat (docs/IR.md, "Loops") as a loop in its caller over the
 * iterations i = 0 .. n-1 (n-1 .. 0 with reverse), each a call of the body's
 * function, which is lowered once whatever n is (func.c); the loop is marked
 * not to be unrolled. A call takes step ir_loop_step(s, first + i) and two pointer
 * arrays on the stack: inputs[k], where the body's arg k lies (a carried
 * value: the operand in the first iteration, then the buffer the previous
 * one wrote; a whole operand; row i of a stacked one), and outputs[k], where
 * the body writes its output k (a carried value: iteration i's buffer; a
 * stacked output: row i of its repeat_out, or a row nothing reads when no
 * repeat_out takes it). A device's body gets its caller's failure status in
 * inputs[nin]. After the last iteration the carried values are copied to the
 * repeat and its repeat_outs.
 * Requires: memplan's `scratch` region, at that offset of the caller's
 * arena: two 64-byte aligned buffers per carried value in order (iteration
 * i writes the first when i is even, the second when odd), the body's arena,
 * then one row for each stacked output no repeat_out takes. */
#include <llvm-c/DebugInfo.h>

#include "codegen.h"

static int64_t bytes_of(const Type *t) { return type_elems(t) * (int64_t)dtype_size(t->dtype); }

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

/* Whether u is a repeat_out giving output k of r. */
static bool out_of(const Inst *u, const Inst *r, int k) {
  return u->op == OP_repeat_out && u->in[0] == r && ir_get_int(u, "index", 0) == k;
}

/* The first repeat_out giving output k of r, NULL if none. */
static const Inst *first_out(const CgFn *fn, const Inst *r, int k) {
  for (int j = fn->use.off[r->id]; j < fn->use.off[r->id + 1]; j++)
    if (out_of(fn->use.u[j], r, k))
      return fn->use.u[j];
  return NULL;
}

static LLVMValueRef slot(Cg *c, LLVMValueRef array, int k) {
  LLVMValueRef idx = cg_i64(c, k);
  return LLVMBuildInBoundsGEP2(c->b, c->ptr, array, &idx, 1, "");
}

/* base + i * bytes */
static LLVMValueRef row(Cg *c, LLVMValueRef base, LLVMValueRef i, int64_t bytes) {
  LLVMValueRef off = LLVMBuildNSWMul(c->b, i, cg_i64(c, bytes), "");
  return LLVMBuildInBoundsGEP2(c->b, c->i8, base, &off, 1, "");
}

static void copy(Cg *c, LLVMValueRef dst, LLVMValueRef src, const Type *t) {
  LLVMBuildMemCpy(c->b, dst, 4, src, 4, cg_i64(c, bytes_of(t)));
}

/* Copies src to each live repeat_out of r that gives output k, but skip. */
static void copy_outs(CgFn *fn, const Inst *r, int k, const Inst *skip, LLVMValueRef src) {
  for (int j = fn->use.off[r->id]; j < fn->use.off[r->id + 1]; j++) {
    const Inst *u = fn->use.u[j];
    if (u != skip && out_of(u, r, k) && (!fn->live || fn->live[u->id]))
      copy(fn->c, cg_addr(fn, u), src, &u->type);
  }
}

/* !{!self, !{!"llvm.loop.unroll.disable"}}: n stays a trip count. */
static LLVMValueRef no_unroll(Cg *c) {
  static const char key[] = "llvm.loop.unroll.disable";
  LLVMMetadataRef self = LLVMTemporaryMDNode(c->ctx, NULL, 0);
  LLVMMetadataRef dis = LLVMMDStringInContext2(c->ctx, key, sizeof key - 1);
  LLVMMetadataRef ops[] = {self, LLVMMDNodeInContext2(c->ctx, &dis, 1)};
  LLVMMetadataRef loop = LLVMMDNodeInContext2(c->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(self, loop);
  return LLVMMetadataAsValue(c->ctx, loop);
}

void cg_repeat(CgFn *fn, const Inst *r) {
  Cg *c = fn->c;
  LLVMBuilderRef b = c->b;
  Arena *a = c->m->arena;
  Func *body = ir_repeat_body(r);
  DTC_ASSERT(body && body->body && body->device == fn->f->device && ir_attr(r, "scratch"));
  int64_t n = ir_get_int(r, "n", 1);
  int carry = (int)ir_get_int(r, "carry", 1), nin = r->nin, nout = ir_func_noutputs(body);
  bool reverse = ir_get_int(r, "reverse", 0);
  DTC_ASSERT(!ir_func_arg(body, nin));   /* an arg for each operand, no more */
  LLVMValueRef callee = cg_func_decl(c, body);

  LLVMValueRef scratch = cg_gep(fn, fn->work, ir_get_int(r, "scratch", 0));
  LLVMValueRef(*buf)[2] = arena_alloc(a, sizeof *buf * (size_t)carry);
  int64_t at = 0;
  for (int k = 0; k < carry; k++) {
    int64_t size = round64(bytes_of(&r->in[k]->type));
    buf[k][0] = cg_gep(fn, scratch, at);
    buf[k][1] = cg_gep(fn, scratch, at + size);
    at += 2 * size;
  }
  LLVMValueRef work = cg_gep(fn, scratch, at);
  at += round64(body->work_bytes);
  /* stacked output k goes to dst[k] + i * stride[k] */
  LLVMValueRef *dst = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(nout + 1));
  int64_t *stride = arena_alloc(a, sizeof(int64_t) * (size_t)(nout + 1));
  for (int k = carry; k < nout; k++) {
    const Inst *o = first_out(fn, r, k);
    stride[k] = bytes_of(&ir_func_output(body, k)->in[0]->type);
    if (o) {
      dst[k] = cg_addr(fn, o);
    } else {
      dst[k] = cg_gep(fn, scratch, at);
      at += round64(stride[k]);
      stride[k] = 0;
    }
  }

  LLVMValueRef ins = cg_alloca(fn, LLVMArrayType(c->ptr, (unsigned)nin + 1), "repeat.in");
  LLVMValueRef outs = cg_alloca(fn, LLVMArrayType(c->ptr, (unsigned)nout), "repeat.out");
  for (int k = carry; k < nin; k++)
    if (ir_repeat_operand_kind(r, k) == 1)
      LLVMBuildStore(b, cg_addr(fn, r->in[k]), slot(c, ins, k));
  if (fn->err)
    LLVMBuildStore(b, fn->err, slot(c, ins, nin));

  /* for t = 0 .. n-1: i = t, or n-1-t with reverse */
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "repeat");
  LLVMBuildBr(b, head);
  LLVMPositionBuilderAtEnd(b, head);
  LLVMValueRef zero = cg_i64(c, 0), one = cg_i64(c, 1);
  LLVMValueRef t = LLVMBuildPhi(b, c->i64, "t");
  LLVMAddIncoming(t, &zero, &pre, 1);
  LLVMValueRef i = reverse ? LLVMBuildSub(b, cg_i64(c, n - 1), t, "i") : t;
  LLVMValueRef odd = LLVMBuildTrunc(b, i, c->i1, "odd");
  LLVMValueRef first = LLVMBuildICmp(b, LLVMIntEQ, t, zero, "first");
  for (int k = 0; k < carry; k++) {
    LLVMValueRef prev = LLVMBuildSelect(b, odd, buf[k][0], buf[k][1], "");
    LLVMBuildStore(b, LLVMBuildSelect(b, first, cg_addr(fn, r->in[k]), prev, ""), slot(c, ins, k));
    LLVMBuildStore(b, LLVMBuildSelect(b, odd, buf[k][1], buf[k][0], ""), slot(c, outs, k));
  }
  for (int k = carry; k < nin; k++)
    if (ir_repeat_operand_kind(r, k) == 2)
      LLVMBuildStore(b, row(c, cg_addr(fn, r->in[k]), i, bytes_of(&r->in[k]->type) / n),
                     slot(c, ins, k));
  for (int k = carry; k < nout; k++)
    LLVMBuildStore(b, stride[k] ? row(c, dst[k], i, stride[k]) : dst[k], slot(c, outs, k));
  LLVMValueRef mixed = LLVMBuildMul(b, fn->step, LLVMConstInt(c->i64, IR_LOOP_MIX, 0), "");
  LLVMValueRef first1 = cg_i64(c, ir_get_int(r, "first", 0) + 1);
  LLVMValueRef step = LLVMBuildAdd(b, mixed, LLVMBuildAdd(b, i, first1, ""), "step");
  LLVMValueRef arg[] = {fn->ctx, fn->state, work, ins, outs, step};
  cg_check(fn, LLVMBuildCall2(b, c->step_fn, callee, arg, COUNTOF(arg), ""));
  LLVMValueRef next = LLVMBuildNUWAdd(b, t, one, "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, fn->fn, "repeated");
  LLVMValueRef more = LLVMBuildICmp(b, LLVMIntULT, next, cg_i64(c, n), "");
  LLVMValueRef br = LLVMBuildCondBr(b, more, head, done);
  LLVMSetMetadata(br, LLVMGetMDKindIDInContext(c->ctx, "llvm.loop", 9), no_unroll(c));
  LLVMAddIncoming(t, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(b, done);

  /* the last iteration ran i = n-1, or 0 with reverse */
  int last = reverse ? 0 : (int)((n - 1) & 1);
  copy(c, cg_addr(fn, r), buf[0][last], &r->type);
  for (int k = 1; k < carry; k++)
    copy_outs(fn, r, k, NULL, buf[k][last]);
  for (int k = carry; k < nout; k++)
    if (stride[k])
      copy_outs(fn, r, k, first_out(fn, r, k), dst[k]);
}
