/* loop.c: one fusion group as one loop nest. Dimensions of size 1 are
 * dropped and neighbours broadcast alike in every operand merge, so a group
 * over equal shapes is a single loop; operands index with numpy broadcasting
 * (stride 0 along broadcast dimensions). The innermost loop is contiguous and
 * carries llvm.loop.vectorize.enable; a product feeding only an add or sub
 * becomes llvm.fmuladd. Each element is computed with the formulas of
 * ir/elem.c, tanh (and so gelu_tanh) by its own polynomial and exponential
 * (tanh_poly), and erf for gelu likewise (phi_cdf), rather than calls to
 * tanhf and erff, which would keep the loop scalar.
 * Every member with memory, every output of a member and every store in the
 * group is written from the loop. A group of PAR_MIN elements or
 * more is outlined into an internal function MODEL.parN(env, begin, end)
 * running the outermost loop over [begin, end), which dtrt_parallel_for
 * spreads over the context's threads; env holds the pointers and scalars the
 * loop reads from the step function. Groups alike share their function
 * (loop_key), the outermost loop's length aside for MODEL.parN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/DebugInfo.h>

#include "codegen.h"

#define PAR_MIN 65536

typedef struct Operand {
  const Inst *v;
  LLVMValueRef base;
  bool full[IR_MAX_RANK];        /* by group dim: not broadcast */
  int64_t stride[IR_MAX_RANK];   /* by loop dim, in elements */
  LLVMValueRef off, loaded;      /* in the loop body */
} Operand;

typedef struct Group {
  CgFn *fn;
  Inst **member;
  int n;
  const Type *shape;
  Operand *op;                   /* the operands read from memory */
  int nop;
  int nloop;
  int64_t len[IR_MAX_RANK];      /* loop trip counts, outermost first */
  int64_t ostride[IR_MAX_RANK];
  LLVMValueRef *v;               /* by member index: its value in the body */
  LLVMValueRef (*arg)[2];        /* by member index: its operands' values */
  LLVMValueRef llfn;             /* the function the loop nest is built in */
  LLVMValueRef begin, end;       /* outlined: the outermost loop's range */
  LLVMValueRef cbegin, cend;     /* a product's tiles: the inner loop's range */
  LLVMValueRef *from, *to;       /* outlined: step-function values, their loads */
  int nmap;
} Group;

static bool member(const Group *g, const Inst *i) {
  return i->fn == g->member[0]->fn && i->id >= g->member[0]->id &&
         i->id <= g->member[g->n - 1]->id;
}

static bool is_scalar(const Inst *i) { return i->op == OP_const || i->op == OP_lr; }

/* Whether a and b are one value: the same, or address computations alike
 * (cg_state_addr makes a new one at each call). The outlined loop must see one
 * pointer where the step function had one address, or the vectoriser's
 * run-time alias check fails on every in-place update. */
static bool same(LLVMValueRef a, LLVMValueRef b) {
  if (a == b)
    return true;
  if (!LLVMIsAGetElementPtrInst(a) || !LLVMIsAGetElementPtrInst(b))
    return false;
  int n = LLVMGetNumOperands(a);
  if (n != LLVMGetNumOperands(b) ||
      LLVMGetGEPSourceElementType(a) != LLVMGetGEPSourceElementType(b) ||
      !same(LLVMGetOperand(a, 0), LLVMGetOperand(b, 0)))
    return false;
  for (int k = 1; k < n; k++)
    if (LLVMGetOperand(a, (unsigned)k) != LLVMGetOperand(b, (unsigned)k) ||
        !LLVMIsConstant(LLVMGetOperand(a, (unsigned)k)))
      return false;
  return true;
}

/* Value v of the step function as the loop nest sees it. */
static LLVMValueRef local(const Group *g, LLVMValueRef v) {
  for (int k = 0; k < g->nmap; k++)
    if (same(g->from[k], v))
      return g->to[k];
  return v;
}

/* Gathers the operands read from memory; all others are members or scalars. */
static void gather(Group *g) {
  Arena *a = g->fn->f->mod->arena;
  Operand *all = calloc((size_t)(2 * g->n + 1), sizeof(Operand));   /* at most */
  DTC_ASSERT(all);
  g->op = all;
  for (int k = 0; k < g->n; k++) {
    const Inst *x = g->member[k];
    if (ir_ops[x->op].kind != K_ELEM)
      continue;
    for (int j = 0; j < x->nin; j++) {
      const Inst *o = x->in[j];
      bool seen = member(g, o) || is_scalar(o);
      for (int p = 0; p < g->nop && !seen; p++)
        seen = g->op[p].v == o;
      if (seen)
        continue;
      Operand *op = &g->op[g->nop++];
      op->v = o;
      op->base = cg_addr(g->fn, o);
      int lead = g->shape->rank - o->type.rank;
      for (int d = 0; d < g->shape->rank; d++)
        op->full[d] = d >= lead && o->type.dim[d - lead] != 1;
    }
  }
  /* kept for the group's lowering: as many as there are (a long program's
   * groups are most of its insts) */
  g->op = arena_alloc(a, sizeof(Operand) * (size_t)(g->nop + 1));
  memcpy(g->op, all, sizeof(Operand) * (size_t)g->nop);
  free(all);
}

/* Merges dimensions into loops: drops size-1 dims, joins neighbours that
 * every operand reads alike, and sets the strides of each loop. */
static void plan_loops(Group *g) {
  int keep[IR_MAX_RANK], nk = 0;
  const Type *t = g->shape;
  g->nloop = 0;
  for (int d = 0; d < t->rank; d++) {
    if (t->dim[d] == 1)
      continue;
    bool alike = nk > 0;
    for (int p = 0; p < g->nop && alike; p++)
      alike = g->op[p].full[d] == g->op[p].full[keep[nk - 1]];
    if (alike) {
      g->len[g->nloop - 1] *= t->dim[d];
    } else {
      g->len[g->nloop++] = t->dim[d];
      keep[nk++] = d;
    }
  }
  if (!g->nloop)
    g->len[g->nloop++] = 1;
  for (int p = 0; p < g->nop; p++) {
    int64_t s = 1;
    for (int l = g->nloop - 1; l >= 0; l--) {
      bool full = nk > 0 && g->op[p].full[keep[l]];
      g->op[p].stride[l] = full ? s : 0;
      s *= full ? g->len[l] : 1;
    }
  }
  int64_t s = 1;
  for (int l = g->nloop - 1; l >= 0; l--) {
    g->ostride[l] = s;
    s *= g->len[l];
  }
}

/* The loops of a product's epilogue: rows and columns of the group's shape
 * seen as a matrix [R, N], each operand read as type_tile_read says. */
static void tile_loops(Group *g) {
  const Type *t = g->shape;
  int64_t n = t->dim[t->rank - 1];
  g->nloop = 2;
  g->len[0] = type_elems(t) / n;
  g->len[1] = n;
  g->ostride[0] = n;
  g->ostride[1] = 1;
  for (int p = 0; p < g->nop; p++) {
    TileRead r = type_tile_read(t, &g->op[p].v->type);
    DTC_ASSERT(r != TILE_NONE);   /* fusion joins a product to such groups only */
    g->op[p].stride[0] = r == TILE_FULL ? n : 0;
    g->op[p].stride[1] = r == TILE_ONE ? 0 : 1;
  }
}

/* The intrinsic name overloaded on its first argument's type (f32, f64). */
static LLVMValueRef intrinsic(Cg *c, const char *name, LLVMValueRef *arg, int n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  DTC_ASSERT(id);
  LLVMTypeRef ty = LLVMTypeOf(arg[0]);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(c->mod, id, &ty, 1);
  LLVMTypeRef t = LLVMIntrinsicGetType(c->ctx, id, &ty, 1);
  return LLVMBuildCall2(c->b, t, f, arg, (unsigned)n, "");
}

static LLVMValueRef fconst(Cg *c, float v) { return LLVMConstReal(c->f32, v); }

/* x * y + z, one rounding where the target fuses. */
static LLVMValueRef mad(Cg *c, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  LLVMValueRef arg[] = {x, y, z};
  return intrinsic(c, "llvm.fmuladd", arg, 3);
}

/* e^r of e^y = 2^n e^r, in plain arithmetic so the loop vectorises: n =
 * rint(y / ln2) into *n and |r| <= ln2 / 2 (ln2 in two parts, Cody and
 * Waite); e^r by its Taylor polynomial of degree 7 (truncation below 3e-9
 * relative). */
static LLVMValueRef exp_reduced(Cg *c, LLVMValueRef y, LLVMValueRef *n) {
  LLVMValueRef t = LLVMBuildFMul(c->b, y, fconst(c, 1.44269504088896341f), "");
  *n = intrinsic(c, "llvm.rint", &t, 1);
  LLVMValueRef r = mad(c, *n, fconst(c, -0.693145751953125f), y);
  r = mad(c, *n, fconst(c, -1.42860682030941723212e-6f), r);
  LLVMValueRef p = fconst(c, 1.0f / 5040);
  static const float coef[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1, 1};
  for (int k = 0; k < COUNTOF(coef); k++)
    p = mad(c, p, r, fconst(c, coef[k]));
  return p;
}

/* e^y for |y| <= 18: exp_reduced, 2^n added to the exponent bits. */
static LLVMValueRef exp_poly(Cg *c, LLVMValueRef y) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef n, p = exp_reduced(c, y, &n);
  LLVMValueRef e = LLVMBuildShl(b, LLVMBuildFPToSI(b, n, c->i32, ""), cg_i32(c, 23), "");
  e = LLVMBuildAdd(b, LLVMBuildBitCast(b, p, c->i32, ""), e, "");
  return LLVMBuildBitCast(b, e, c->f32, "");
}

/* 2^n for an integer-valued float n in [-252, 254], as the product of two
 * normal powers of 2 (exponent bits each), so results below FLT_MIN round
 * to denormals as a product would. */
static LLVMValueRef pow2_scale(Cg *c, LLVMValueRef x, LLVMValueRef n) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef ni = LLVMBuildFPToSI(b, n, c->i32, "");
  LLVMValueRef n1 = LLVMBuildAShr(b, ni, cg_i32(c, 1), ""), n2 = LLVMBuildSub(b, ni, n1, "");
  LLVMValueRef bias = cg_i32(c, 127), sh = cg_i32(c, 23);
  LLVMValueRef p1 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n1, bias, ""), sh, ""),
                                     c->f32, "");
  LLVMValueRef p2 = LLVMBuildBitCast(b, LLVMBuildShl(b, LLVMBuildAdd(b, n2, bias, ""), sh, ""),
                                     c->f32, "");
  return LLVMBuildFMul(b, LLVMBuildFMul(b, x, p1, ""), p2, "");
}

/* e^y over all floats, vectorisable (libm's expf is a call per element):
 * exp_poly's reduction and polynomial on y clamped to [-104, 88.73], scaled
 * by pow2_scale; inf above ln FLT_MAX, NaN kept. */
static LLVMValueRef exp_full(Cg *c, LLVMValueRef y) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef hi = fconst(c, 88.7228394f), lo = fconst(c, -104.0f);
  LLVMValueRef cy = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, y, hi, ""), hi, y, "");
  cy = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, cy, lo, ""), lo, cy, "");
  cy = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, y, y, ""), fconst(c, 0), cy, "");
  LLVMValueRef n, p = exp_reduced(c, cy, &n);
  LLVMValueRef e = pow2_scale(c, p, n);
  e = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, y, hi, ""), fconst(c, INFINITY), e, "");
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, y, y, ""), y, e, "");
}

/* x = 2^e m, x positive and finite, m in [sqrt(1/2), sqrt 2) returned, e
 * (i32) into *e, in integer steps: e is the top bits of x's bits less
 * those of sqrt(1/2), m x's bits less e in the exponent; a denormal x
 * scaled by 2^23 first. */
static LLVMValueRef log_split(Cg *c, LLVMValueRef x, LLVMValueRef *e) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef tiny = LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(c, 1.17549435e-38f), "");
  LLVMValueRef xs = LLVMBuildSelect(b, tiny, LLVMBuildFMul(b, x, fconst(c, 8388608.0f), ""), x, "");
  LLVMValueRef bits = LLVMBuildBitCast(b, xs, c->i32, "");
  LLVMValueRef k = LLVMBuildAShr(b, LLVMBuildSub(b, bits, cg_i32(c, 0x3f3504f3), ""),
                                 cg_i32(c, 23), "");
  LLVMValueRef mb = LLVMBuildSub(b, bits, LLVMBuildShl(b, k, cg_i32(c, 23), ""), "");
  *e = LLVMBuildSelect(b, tiny, LLVMBuildSub(b, k, cg_i32(c, 23), ""), k, "");
  return LLVMBuildBitCast(b, mb, c->f32, "");
}

/* ln x over all floats, vectorisable: x = 2^e m (log_split), ln m = 2
 * atanh s with s = (m - 1) / (m + 1), |s| <= 0.172, by its odd series to
 * s^13 (truncation below 5e-11 relative); -inf at 0, NaN below, inf and NaN
 * kept. */
static LLVMValueRef log_full(Cg *c, LLVMValueRef x) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef e, m = log_split(c, x, &e);
  LLVMValueRef one = fconst(c, 1);
  LLVMValueRef sv = LLVMBuildFDiv(b, LLVMBuildFSub(b, m, one, ""), LLVMBuildFAdd(b, m, one, ""), "");
  LLVMValueRef s2 = LLVMBuildFMul(b, sv, sv, "");
  static const float coef[] = {1.0f / 11, 1.0f / 9, 1.0f / 7, 1.0f / 5, 1.0f / 3, 1};
  LLVMValueRef p = fconst(c, 1.0f / 13);
  for (int k = 0; k < COUNTOF(coef); k++)
    p = mad(c, p, s2, fconst(c, coef[k]));
  LLVMValueRef lm = LLVMBuildFMul(b, LLVMBuildFMul(b, sv, fconst(c, 2), ""), p, "");
  LLVMValueRef ef = LLVMBuildSIToFP(b, e, c->f32, "");
  LLVMValueRef r = mad(c, ef, fconst(c, 1.42860682030941723212e-6f), lm);
  r = mad(c, ef, fconst(c, 0.693145751953125f), r);
  r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, x, fconst(c, INFINITY), ""), x, r, "");
  r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, x, fconst(c, 0), ""),
                      fconst(c, -INFINITY), r, "");
  r = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(c, 0), ""), fconst(c, NAN), r, "");
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNO, x, x, ""), x, r, "");
}

static LLVMValueRef dconst(Cg *c, double v) { return LLVMConstReal(c->f64, v); }

/* |x|^y = 2^(y log2|x|) in double, rounded once to float (within an ulp of
 * powf, vectorisable): |x| = 2^e m by log_split, log2 m = (2 / ln 2) atanh
 * s with s = (m - 1) / (m + 1), |s| <= 0.172, by its odd series to s^13
 * (truncation below 2e-12 relative); t = y log2|x| clamped to [-200, 200]
 * (beyond float's range either way, a NaN t to 200), 2^t = 2^n 2^r with n
 * = rint t and |r| <= 1/2, 2^r by the Taylor polynomial of e^(r ln 2) of
 * degree 8 (truncation below 3e-10 relative), 2^n added to the exponent
 * bits; so t is within 2^-31 of y log2|x| and the power within 0.51 ulp
 * of the true one. Then powf's special values: 1 where y is 0 or x is 1,
 * or |x| is 1 and y infinite; a negative x (-0 included) to an odd
 * integer y negated, a finite negative x to a finite y that is not an
 * integer NaN. */
static LLVMValueRef pow_full(Cg *c, LLVMValueRef x, LLVMValueRef y) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef ax = intrinsic(c, "llvm.fabs", &x, 1), e, m = log_split(c, ax, &e);
  LLVMValueRef one = dconst(c, 1), md = LLVMBuildFPExt(b, m, c->f64, "");
  LLVMValueRef s = LLVMBuildFDiv(b, LLVMBuildFSub(b, md, one, ""), LLVMBuildFAdd(b, md, one, ""), "");
  LLVMValueRef s2 = LLVMBuildFMul(b, s, s, "");
  const double log2e2 = 2 * 1.4426950408889634074;
  LLVMValueRef p = dconst(c, log2e2 / 13);
  for (int k = 11; k >= 1; k -= 2)
    p = mad(c, p, s2, dconst(c, log2e2 / k));
  LLVMValueRef l = mad(c, s, p, LLVMBuildSIToFP(b, e, c->f64, ""));
  l = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOEQ, ax, fconst(c, 0), ""), dconst(c, -INFINITY),
                      l, "");
  l = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUEQ, ax, fconst(c, INFINITY), ""),
                      LLVMBuildFPExt(b, ax, c->f64, ""), l, "");   /* inf or NaN */
  LLVMValueRef t = LLVMBuildFMul(b, LLVMBuildFPExt(b, y, c->f64, ""), l, "");
  LLVMValueRef nan = LLVMBuildFCmp(b, LLVMRealUNO, t, t, ""), lim = dconst(c, 200);
  LLVMValueRef ct = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLE, t, lim, ""), t, lim, "");
  lim = dconst(c, -200);
  ct = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, ct, lim, ""), lim, ct, "");
  LLVMValueRef n = intrinsic(c, "llvm.rint", &ct, 1);
  LLVMValueRef r = LLVMBuildFSub(b, ct, n, "");
  double coef[9] = {1};
  for (int k = 1; k < COUNTOF(coef); k++)
    coef[k] = coef[k - 1] * 0.69314718055994530942 / k;
  LLVMValueRef q = dconst(c, coef[8]);
  for (int k = 7; k >= 0; k--)
    q = mad(c, q, r, dconst(c, coef[k]));
  LLVMValueRef bits = LLVMBuildShl(b, LLVMBuildFPToSI(b, n, c->i64, ""),
                                   LLVMConstInt(c->i64, 52, 0), "");
  bits = LLVMBuildAdd(b, LLVMBuildBitCast(b, q, c->i64, ""), bits, "");
  LLVMValueRef v = LLVMBuildFPTrunc(b, LLVMBuildBitCast(b, bits, c->f64, ""), c->f32, "");
  v = LLVMBuildSelect(b, nan, fconst(c, NAN), v, "");
  /* the sign: y an odd integer (|y| < 2^24; all larger floats are even) */
  LLVMValueRef ay = intrinsic(c, "llvm.fabs", &y, 1);
  LLVMValueRef whole = LLVMBuildFCmp(b, LLVMRealOEQ, intrinsic(c, "llvm.rint", &y, 1), y, "");
  LLVMValueRef small = LLVMBuildFCmp(b, LLVMRealOLT, ay, fconst(c, 16777216.0f), "");
  LLVMValueRef yi = LLVMBuildFPToSI(b, LLVMBuildSelect(b, small, y, fconst(c, 0), ""), c->i32, "");
  LLVMValueRef odd = LLVMBuildAnd(b, whole, LLVMBuildTrunc(b, yi, c->i1, ""), "");
  LLVMValueRef sx = LLVMBuildICmp(b, LLVMIntSLT, LLVMBuildBitCast(b, x, c->i32, ""), cg_i32(c, 0), "");
  v = LLVMBuildSelect(b, LLVMBuildAnd(b, sx, odd, ""), LLVMBuildFNeg(b, v, ""), v, "");
  LLVMValueRef neg = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOLT, x, fconst(c, 0), ""),
                                  LLVMBuildFCmp(b, LLVMRealONE, ax, fconst(c, INFINITY), ""), "");
  neg = LLVMBuildAnd(b, neg, LLVMBuildFCmp(b, LLVMRealONE, ay, fconst(c, INFINITY), ""), "");
  neg = LLVMBuildAnd(b, neg, LLVMBuildNot(b, whole, ""), "");
  v = LLVMBuildSelect(b, neg, fconst(c, NAN), v, "");
  LLVMValueRef unit = LLVMBuildOr(b, LLVMBuildFCmp(b, LLVMRealOEQ, y, fconst(c, 0), ""),
                                  LLVMBuildFCmp(b, LLVMRealOEQ, x, fconst(c, 1), ""), "");
  LLVMValueRef pm1 = LLVMBuildAnd(b, LLVMBuildFCmp(b, LLVMRealOEQ, ax, fconst(c, 1), ""),
                                  LLVMBuildFCmp(b, LLVMRealOEQ, ay, fconst(c, INFINITY), ""), "");
  return LLVMBuildSelect(b, LLVMBuildOr(b, unit, pm1, ""), fconst(c, 1), v, "");
}

/* tanh x, within 3e-7 relative of tanh (tests/unit/test_codegen_run.c) and
 * vectorisable: for |x| < 1/4 the odd Taylor polynomial to x^11 (truncation
 * below 1e-9 relative); above, (e - 1) / (e + 1) with e = e^(2x), x clamped
 * to [-9, 9], where tanh is 1 in float. */
static LLVMValueRef tanh_poly(Cg *c, LLVMValueRef x) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef lim = fconst(c, 9);
  LLVMValueRef cx = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, x, lim, ""), lim, x, "");
  lim = fconst(c, -9);
  cx = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, cx, lim, ""), lim, cx, "");
  LLVMValueRef e = exp_poly(c, LLVMBuildFAdd(b, cx, cx, ""));
  LLVMValueRef one = fconst(c, 1);
  LLVMValueRef big =
      LLVMBuildFDiv(b, LLVMBuildFSub(b, e, one, ""), LLVMBuildFAdd(b, e, one, ""), "");
  LLVMValueRef x2 = LLVMBuildFMul(b, x, x, "");
  static const float coef[] = {-1382.0f / 155925, 62.0f / 2835, -17.0f / 315, 2.0f / 15,
                               -1.0f / 3};
  LLVMValueRef p = fconst(c, 21844.0f / 6081075);
  for (int k = 0; k < COUNTOF(coef); k++)
    p = mad(c, p, x2, fconst(c, coef[k]));
  LLVMValueRef small = mad(c, LLVMBuildFMul(b, p, x2, ""), x, x);
  LLVMValueRef ax = intrinsic(c, "llvm.fabs", &x, 1);
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOLT, ax, fconst(c, 0.25f), ""), small, big,
                         "");
}

/* The normal distribution's Phi(a) = (1 + erf(a / sqrt 2)) / 2 and, into
 * *pdf, phi(a) = e^(-a^2/2) / sqrt(2 pi), vectorisable: with z = |a| / sqrt 2
 * clamped to 4.2 (where erfc is 3e-9) and t = 1 / (1 + p z), erfc z = q(t)
 * e^(-z^2) by Abramowitz and Stegun 7.1.26 (within 1.5e-7), and Phi(a) =
 * 1 - erfc(z) / 2 for a >= 0, erfc(z) / 2 below, so no cancellation in the
 * tail. */
static LLVMValueRef phi_cdf(Cg *c, LLVMValueRef a, LLVMValueRef *pdf) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef z = LLVMBuildFMul(b, intrinsic(c, "llvm.fabs", &a, 1), fconst(c, 0.70710678f), "");
  LLVMValueRef lim = fconst(c, 4.2f);
  z = LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, z, lim, ""), lim, z, "");
  LLVMValueRef e = exp_poly(c, LLVMBuildFNeg(b, LLVMBuildFMul(b, z, z, ""), ""));
  LLVMValueRef one = fconst(c, 1);
  LLVMValueRef t = LLVMBuildFDiv(b, one, mad(c, fconst(c, 0.3275911f), z, one), "");
  static const float coef[] = {1.421413741f, -0.284496736f, 0.254829592f};
  LLVMValueRef q = mad(c, fconst(c, 1.061405429f), t, fconst(c, -1.453152027f));
  for (int k = 0; k < COUNTOF(coef); k++)
    q = mad(c, q, t, fconst(c, coef[k]));
  q = LLVMBuildFMul(b, LLVMBuildFMul(b, q, t, ""), e, "");
  LLVMValueRef half_q = LLVMBuildFMul(b, q, fconst(c, 0.5f), "");
  if (pdf)
    *pdf = LLVMBuildFMul(b, e, fconst(c, 0.39894228f), "");
  return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGE, a, fconst(c, 0), ""),
                         LLVMBuildFSub(b, one, half_q, ""), half_q, "");
}

static LLVMValueRef tanh_gelu(Cg *c, LLVMValueRef a) {
  LLVMBuilderRef b = c->b;
  LLVMValueRef a3 = LLVMBuildFMul(b, fconst(c, IR_GELU_A), a, "");
  a3 = LLVMBuildFMul(b, LLVMBuildFMul(b, a3, a, ""), a, "");
  LLVMValueRef u = LLVMBuildFMul(b, fconst(c, IR_GELU_C), LLVMBuildFAdd(b, a, a3, ""), "");
  return tanh_poly(c, u);
}

/* The product feeding x as operand k, when it feeds nothing else. */
static int lone_mul(const Group *g, const Inst *x, int k) {
  const Inst *o = x->in[k];
  const Uses *u = &g->fn->use;
  if (o->op != OP_mul || !member(g, o) || u->off[o->id + 1] - u->off[o->id] != 1)
    return -1;
  return o->id - g->member[0]->id;
}

/* (-)x*y + c for the product member m. */
static LLVMValueRef fmuladd(Group *g, int m, bool neg, LLVMValueRef c) {
  LLVMValueRef x = g->arg[m][0];
  if (neg)
    x = LLVMBuildFNeg(g->fn->c->b, x, "");
  LLVMValueRef arg[] = {x, g->arg[m][1], c};
  return intrinsic(g->fn->c, "llvm.fmuladd", arg, 3);
}

/* 1 where a and y compare by pred, else 0. */
static LLVMValueRef mask(Cg *c, LLVMRealPredicate pred, LLVMValueRef a, LLVMValueRef y) {
  LLVMValueRef t = LLVMBuildFCmp(c->b, pred, a, y, "");
  return LLVMBuildSelect(c->b, t, fconst(c, 1), fconst(c, 0), "");
}

/* min(max(a, lo), hi) as clamp x has it; NaN stays NaN. */
static LLVMValueRef clamp(Cg *c, const Inst *x, LLVMValueRef a) {
  float lo, hi;
  ir_clamp_bounds(x, &lo, &hi);
  LLVMValueRef l = fconst(c, lo), h = fconst(c, hi);
  LLVMValueRef v = LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOLT, a, l, ""), l, a, "");
  return LLVMBuildSelect(c->b, LLVMBuildFCmp(c->b, LLVMRealOGT, v, h, ""), h, v, "");
}

/* maximum (minimum) of a and y as torch's: a where a >= y (a <= y) or a is
 * NaN, else y (which is NaN when y is). */
static LLVMValueRef extremum(Cg *c, LLVMRealPredicate keep, LLVMValueRef a, LLVMValueRef y) {
  LLVMValueRef t = LLVMBuildOr(c->b, LLVMBuildFCmp(c->b, keep, a, y, ""),
                               LLVMBuildFCmp(c->b, LLVMRealUNO, a, a, ""), "");
  return LLVMBuildSelect(c->b, t, a, y, "");
}

/* Whether a is inside clamp_grad x's bounds: closed, or open (hardtanh's). */
static LLVMValueRef inside(Cg *c, const Inst *x, LLVMValueRef a) {
  float lo, hi;
  ir_clamp_bounds(x, &lo, &hi);
  LLVMValueRef l = fconst(c, lo), h = fconst(c, hi);
  if (ir_get_int(x, "open", 0)) {
    LLVMValueRef out = LLVMBuildOr(c->b, LLVMBuildFCmp(c->b, LLVMRealOLE, a, l, ""),
                                   LLVMBuildFCmp(c->b, LLVMRealOGE, a, h, ""), "");
    return LLVMBuildNot(c->b, out, "");
  }
  return LLVMBuildAnd(c->b, LLVMBuildFCmp(c->b, LLVMRealOGE, a, l, ""),
                      LLVMBuildFCmp(c->b, LLVMRealOLE, a, h, ""), "");
}

static LLVMValueRef elem(Group *g, const Inst *x, LLVMValueRef a, LLVMValueRef y) {
  Cg *c = g->fn->c;
  LLVMBuilderRef b = c->b;
  LLVMValueRef zero = fconst(c, 0), one = fconst(c, 1), half = fconst(c, 0.5f);
  int m;
  switch (x->op) {
  case OP_add:
    if ((m = lone_mul(g, x, 0)) >= 0)
      return fmuladd(g, m, false, y);
    if ((m = lone_mul(g, x, 1)) >= 0)
      return fmuladd(g, m, false, a);
    return LLVMBuildFAdd(b, a, y, "");
  case OP_sub:
    if ((m = lone_mul(g, x, 1)) >= 0)
      return fmuladd(g, m, true, a);
    if ((m = lone_mul(g, x, 0)) >= 0)
      return fmuladd(g, m, false, LLVMBuildFNeg(b, y, ""));
    return LLVMBuildFSub(b, a, y, "");
  case OP_mul: case OP_bn_scale: return LLVMBuildFMul(b, a, y, "");
  case OP_bn_center: return LLVMBuildFSub(b, a, y, "");
  case OP_div: return LLVMBuildFDiv(b, a, y, "");
  case OP_neg: return LLVMBuildFNeg(b, a, "");
  case OP_exp: return exp_full(c, a);
  case OP_log: return log_full(c, a);
  case OP_sqrt: return intrinsic(c, "llvm.sqrt", &a, 1);
  case OP_tanh: return tanh_poly(c, a);
  case OP_sigmoid: {
    LLVMValueRef e = LLVMBuildFNeg(b, a, "");
    e = exp_full(c, e);
    return LLVMBuildFDiv(b, one, LLVMBuildFAdd(b, one, e, ""), "");
  }
  case OP_relu:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, a, zero, ""), a, zero, "");
  case OP_relu_grad:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealOGT, a, zero, ""), y, zero, "");
  case OP_gt: return mask(c, LLVMRealOGT, a, y);
  case OP_ge: return mask(c, LLVMRealOGE, a, y);
  case OP_eq: return mask(c, LLVMRealOEQ, a, y);
  case OP_ne: return mask(c, LLVMRealUNE, a, y);
  case OP_where_true:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNE, a, zero, ""), y, fconst(c, -0.0f), "");
  case OP_where_false:
    return LLVMBuildSelect(b, LLVMBuildFCmp(b, LLVMRealUNE, a, zero, ""), fconst(c, -0.0f), y, "");
  case OP_maximum: return extremum(c, LLVMRealOGE, a, y);
  case OP_minimum: return extremum(c, LLVMRealOLE, a, y);
  case OP_pow: return pow_full(c, a, y);
  case OP_clamp: return clamp(c, x, a);
  case OP_clamp_grad: return LLVMBuildSelect(b, inside(c, x, a), y, zero, "");
  case OP_gelu: return LLVMBuildFMul(b, a, phi_cdf(c, a, NULL), "");
  case OP_gelu_grad: {
    LLVMValueRef pdf, cdf = phi_cdf(c, a, &pdf);
    return LLVMBuildFMul(b, y, mad(c, a, pdf, cdf), "");
  }
  case OP_gelu_tanh: {
    LLVMValueRef th = tanh_gelu(c, a);
    return LLVMBuildFMul(b, LLVMBuildFMul(b, half, a, ""), LLVMBuildFAdd(b, one, th, ""), "");
  }
  case OP_gelu_tanh_grad: {
    LLVMValueRef th = tanh_gelu(c, a);
    LLVMValueRef du = LLVMBuildFMul(b, LLVMBuildFMul(b, fconst(c, 3.0f * IR_GELU_A), a, ""), a, "");
    du = LLVMBuildFMul(b, fconst(c, IR_GELU_C), LLVMBuildFAdd(b, one, du, ""), "");
    LLVMValueRef l = LLVMBuildFMul(b, half, LLVMBuildFAdd(b, one, th, ""), "");
    LLVMValueRef r = LLVMBuildFMul(b, half, a, "");
    r = LLVMBuildFMul(b, r, LLVMBuildFSub(b, one, LLVMBuildFMul(b, th, th, ""), ""), "");
    r = LLVMBuildFMul(b, r, du, "");
    return LLVMBuildFMul(b, y, LLVMBuildFAdd(b, l, r, ""), "");
  }
  default:
    DTC_UNREACHABLE();
  }
}

static LLVMValueRef at(Cg *c, LLVMValueRef base, LLVMValueRef off) {
  return LLVMBuildInBoundsGEP2(c->b, c->f32, base, &off, 1, "");
}

static LLVMValueRef value(Group *g, const Inst *o) {
  if (member(g, o))
    return g->v[o->id - g->member[0]->id];
  if (is_scalar(o))
    return local(g, cg_scalar(g->fn, o));
  for (int p = 0; p < g->nop; p++)
    if (g->op[p].v == o) {
      Operand *op = &g->op[p];
      Cg *c = g->fn->c;
      if (!op->loaded)
        op->loaded = LLVMBuildLoad2(c->b, c->f32, at(c, op->base, op->off), "");
      return op->loaded;
    }
  DTC_UNREACHABLE();
}

/* Where member x is written: its work slot, the stores of it in the group,
 * its outputs. */
static int dests(Group *g, const Inst *x, LLVMValueRef *d) {
  CgFn *fn = g->fn;
  int n = 0;
  if (x->offset >= 0)
    d[n++] = cg_addr(fn, x);
  for (int k = fn->use.off[x->id]; k < fn->use.off[x->id + 1]; k++) {
    const Inst *u = fn->use.u[k];
    if (u->op == OP_store && member(g, u))
      d[n++] = cg_state_addr(fn, ir_global_of(u));
    else if (u->op == OP_output && (!fn->live || fn->live[u->id]))
      d[n++] = cg_output(fn, u);
  }
  return n;
}

static void body(Group *g, LLVMValueRef off, LLVMValueRef **dst, const int *ndst) {
  Cg *c = g->fn->c;
  for (int p = 0; p < g->nop; p++)
    g->op[p].loaded = NULL;
  for (int k = 0; k < g->n; k++) {
    const Inst *x = g->member[k];
    if (ir_ops[x->op].kind != K_ELEM)
      continue;
    g->arg[k][0] = value(g, x->in[0]);
    g->arg[k][1] = x->nin > 1 ? value(g, x->in[1]) : NULL;
    g->v[k] = elem(g, x, g->arg[k][0], g->arg[k][1]);
    for (int j = 0; j < ndst[k]; j++)
      LLVMBuildStore(c->b, g->v[k], at(c, dst[k][j], off));
  }
}

static LLVMValueRef vectorize_md(Cg *c) {
  static const char key[] = "llvm.loop.vectorize.enable";
  LLVMMetadataRef self = LLVMTemporaryMDNode(c->ctx, NULL, 0);
  LLVMMetadataRef en[] = {LLVMMDStringInContext2(c->ctx, key, sizeof key - 1),
                          LLVMValueAsMetadata(LLVMConstInt(c->i1, 1, 0))};
  LLVMMetadataRef ops[] = {self, LLVMMDNodeInContext2(c->ctx, en, 2)};
  LLVMMetadataRef loop = LLVMMDNodeInContext2(c->ctx, ops, 2);
  LLVMMetadataReplaceAllUsesWith(self, loop);
  return LLVMMetadataAsValue(c->ctx, loop);
}

static LLVMValueRef scaled(Cg *c, LLVMValueRef i, int64_t stride) {
  return LLVMBuildNSWMul(c->b, i, cg_i64(c, stride), "");
}

/* Loop l of the nest, with the operands' and the output's offsets so far. */
static void nest(Group *g, int l, LLVMValueRef out_off, LLVMValueRef **dst, const int *ndst) {
  Cg *c = g->fn->c;
  LLVMBuilderRef b = c->b;
  if (l == g->nloop) {
    body(g, out_off, dst, ndst);
    return;
  }
  LLVMValueRef fnv = g->llfn;
  bool outer = l == 0 && g->begin, cols = l == 1 && g->cbegin;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, fnv, "loop");
  LLVMBuildBr(b, head);
  LLVMPositionBuilderAtEnd(b, head);
  LLVMValueRef i = LLVMBuildPhi(b, c->i64, "i");
  LLVMValueRef first = outer ? g->begin : cols ? g->cbegin : cg_i64(c, 0);
  LLVMAddIncoming(i, &first, &pre, 1);

  Arena *a = g->fn->f->mod->arena;
  LLVMValueRef *saved = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(g->nop + 1));
  for (int p = 0; p < g->nop; p++) {
    Operand *op = &g->op[p];
    saved[p] = op->off;
    if (op->stride[l])
      op->off = LLVMBuildNSWAdd(b, op->off, scaled(c, i, op->stride[l]), "");
  }
  LLVMValueRef o = LLVMBuildNSWAdd(b, out_off, scaled(c, i, g->ostride[l]), "");
  nest(g, l + 1, o, dst, ndst);
  for (int p = 0; p < g->nop; p++)
    g->op[p].off = saved[p];

  LLVMValueRef next = LLVMBuildNUWAdd(b, i, cg_i64(c, 1), "");
  LLVMValueRef last = outer ? g->end : cols ? g->cend : cg_i64(c, g->len[l]);
  LLVMValueRef more = LLVMBuildICmp(b, LLVMIntULT, next, last, "");
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(b);
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(c->ctx, fnv, "done");
  LLVMValueRef br = LLVMBuildCondBr(b, more, head, done);
  if (l == g->nloop - 1)
    LLVMSetMetadata(br, LLVMGetMDKindIDInContext(c->ctx, "llvm.loop", 9), vectorize_md(c));
  LLVMAddIncoming(i, &next, &latch, 1);
  LLVMPositionBuilderAtEnd(b, done);
}

/* Adds step-function value v to the values the outlined nest reads. */
static void need(Group *g, LLVMValueRef v) {
  if (!v || LLVMIsConstant(v))
    return;
  for (int k = 0; k < g->nmap; k++)
    if (same(g->from[k], v))
      return;
  g->from[g->nmap] = v;
  g->to[g->nmap++] = v;
}

/* How many values g's nest may read from the step function: at most. */
static int need_cap(const Group *g, const int *ndst) {
  int cap = g->nop + 2 * g->n + 1;
  for (int k = 0; k < g->n; k++)
    cap += ir_ops[g->member[k]->op].kind == K_ELEM ? ndst[k] : 0;
  return cap;
}

/* The step-function values g's nest reads (need): its operands' bases,
 * scalar members, elementwise members' destinations and scalar operands. */
static void need_all(Group *g, LLVMValueRef **dst, const int *ndst) {
  for (int p = 0; p < g->nop; p++)
    need(g, g->op[p].base);
  for (int k = 0; k < g->n; k++) {
    const Inst *x = g->member[k];
    if (is_scalar(x))
      need(g, g->v[k]);
    if (ir_ops[x->op].kind != K_ELEM)
      continue;
    for (int j = 0; j < ndst[k]; j++)
      need(g, dst[k][j]);
    for (int j = 0; j < x->nin; j++)
      if (is_scalar(x->in[j]) && !member(g, x->in[j]))
        need(g, cg_scalar(g->fn, x->in[j]));
  }
}

/* need_all's values, in the nest's function: its copies (local). */
static void localize(Group *g, LLVMValueRef **dst, const int *ndst) {
  for (int p = 0; p < g->nop; p++)
    g->op[p].base = local(g, g->op[p].base);
  for (int k = 0; k < g->n; k++) {
    if (is_scalar(g->member[k]))
      g->v[k] = local(g, g->v[k]);
    if (ir_ops[g->member[k]->op].kind != K_ELEM)
      continue;
    for (int j = 0; j < ndst[k]; j++)
      dst[k][j] = local(g, dst[k][j]);
  }
}

static char *loop_key(const Group *g, LLVMValueRef **dst, const int *ndst, char kind,
                      size_t *len);

/* Builds the loop nest in an internal function MODEL.parN(env, begin, end)
 * or, with tiles, MODEL.tilesN(env, begin, end, cbegin, cend) (rows and
 * columns), and stores env, the step-function values it reads, where the
 * builder stands; *envp is env. The outermost loop's range is the
 * function's parameters, so groups alike but in its length (the local batch
 * of devices of uneven blocks) share the function, as shared_nest's do. */
static LLVMValueRef outline_fn(Group *g, LLVMValueRef **dst, const int *ndst, bool tiles,
                               LLVMValueRef *envp) {
  CgFn *fn = g->fn;
  Cg *c = fn->c;
  LLVMBuilderRef b = c->b;
  Arena *a = fn->f->mod->arena;
  int cap = need_cap(g, ndst);
  g->from = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)cap);
  g->to = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)cap);
  need_all(g, dst, ndst);
  size_t klen;
  char *key = loop_key(g, dst, ndst, tiles ? 't' : 'p', &klen);
  LLVMValueRef *e = cg_table_find(&c->loops, key, klen);   /* takes key */
  LLVMTypeRef *ft = arena_alloc(a, sizeof(LLVMTypeRef) * (size_t)(g->nmap + 1));
  for (int k = 0; k < g->nmap; k++)
    ft[k] = LLVMTypeOf(g->from[k]);
  LLVMTypeRef envt = LLVMStructTypeInContext(c->ctx, ft, (unsigned)g->nmap, 0);

  /* the call, in the step function */
  LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
  LLVMPositionBuilderAtEnd(b, fn->entry);
  LLVMValueRef env = LLVMBuildAlloca(b, envt, "env");
  LLVMPositionBuilderAtEnd(b, here);
  for (int k = 0; k < g->nmap; k++)
    LLVMBuildStore(b, g->from[k], LLVMBuildStructGEP2(b, envt, env, (unsigned)k, ""));
  *envp = env;
  if (*e)
    return *e;
  LLVMTypeRef pt[] = {c->ptr, c->i64, c->i64, c->i64, c->i64};
  LLVMTypeRef bodyt = LLVMFunctionType(c->voidt, pt, tiles ? 5 : 3, 0);
  const char *name = arena_printf(a, "%s.%s%d", c->m->name, tiles ? "tiles" : "par",
                                  cg_table_count(c->loops) - 1);
  LLVMValueRef f = *e = LLVMAddFunction(c->mod, name, bodyt);
  LLVMSetLinkage(f, LLVMInternalLinkage);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(c->ctx, nounwind, 0));

  /* the body: load env, skip an empty range, run the nest */
  LLVMBasicBlockRef entry = LLVMAppendBasicBlockInContext(c->ctx, f, "entry");
  LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->ctx, f, "run");
  LLVMPositionBuilderAtEnd(b, entry);
  LLVMValueRef envf = LLVMGetParam(f, 0);
  for (int k = 0; k < g->nmap; k++)
    g->to[k] = LLVMBuildLoad2(b, ft[k], LLVMBuildStructGEP2(b, envt, envf, (unsigned)k, ""), "");
  localize(g, dst, ndst);
  g->begin = LLVMGetParam(f, 1);
  g->end = LLVMGetParam(f, 2);
  if (tiles) {
    g->cbegin = LLVMGetParam(f, 3);
    g->cend = LLVMGetParam(f, 4);
  }
  LLVMBasicBlockRef ret = LLVMAppendBasicBlockInContext(c->ctx, f, "ret");
  LLVMBuildCondBr(b, LLVMBuildICmp(b, LLVMIntULT, g->begin, g->end, ""), run, ret);
  LLVMPositionBuilderAtEnd(b, run);
  g->llfn = f;
  LLVMValueRef zero = cg_i64(c, 0);
  nest(g, 0, zero, dst, ndst);
  LLVMBuildBr(b, ret);
  LLVMMoveBasicBlockAfter(ret, LLVMGetInsertBlock(b));
  LLVMPositionBuilderAtEnd(b, ret);
  LLVMBuildRetVoid(b);
  LLVMPositionBuilderAtEnd(b, here);
  return f;
}

/* Builds the loop nest in an internal function body(env, begin, end) and
 * calls dtrt_parallel_for(ctx, len[0], body, &env) in its place. */
static void outline(Group *g, LLVMValueRef **dst, const int *ndst) {
  Cg *c = g->fn->c;
  LLVMValueRef env, f = outline_fn(g, dst, ndst, false, &env);
  LLVMTypeRef qt[] = {c->ptr, c->i64, c->ptr, c->ptr};
  LLVMTypeRef part = LLVMFunctionType(c->voidt, qt, 4, 0);
  LLVMValueRef arg[] = {g->fn->ctx, cg_i64(c, g->len[0]), f, env};
  LLVMBuildCall2(c->b, part, cg_extern(c, "dtrt_parallel_for", part), arg, 4, "");
}

/* The members' destinations, the operands and the group's shape. */
static Group group(CgFn *fn, Inst **mem, int n, LLVMValueRef ***dstp, int **ndstp) {
  Arena *a = fn->f->mod->arena;
  Group g = {.fn = fn, .member = mem, .n = n, .llfn = fn->fn};
  for (int k = 0; k < n && !g.shape; k++)
    if (ir_ops[mem[k]->op].kind == K_ELEM)
      g.shape = &mem[k]->type;
  DTC_ASSERT(g.shape);
  g.v = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)n);
  g.arg = arena_alloc(a, sizeof(*g.arg) * (size_t)n);
  LLVMValueRef **dst = arena_alloc(a, sizeof(LLVMValueRef *) * (size_t)n);
  int *ndst = arena_alloc(a, sizeof(int) * (size_t)n);
  for (int k = 0; k < n; k++) {
    const Inst *x = mem[k];
    DTC_ASSERT(x->op != OP_matmul);   /* a product heads its group, run apart */
    if (is_scalar(x))
      g.v[k] = cg_scalar(fn, x);
    if (ir_ops[x->op].kind != K_ELEM)
      continue;
    const Uses *u = &fn->use;
    int nuse = u->off[x->id + 1] - u->off[x->id];
    dst[k] = arena_alloc(a, sizeof(LLVMValueRef) * (size_t)(nuse + 1));
    ndst[k] = dests(&g, x, dst[k]);
  }
  gather(&g);
  LLVMValueRef zero = cg_i64(fn->c, 0);
  for (int p = 0; p < g.nop; p++)
    g.op[p].off = zero;
  *dstp = dst;
  *ndstp = ndst;
  return g;
}

/* The slot of step-function value v among g's from[] (-1: a constant). */
static int slot(const Group *g, LLVMValueRef v) {
  for (int k = 0; k < g->nmap; k++)
    if (same(g->from[k], v))
      return k;
  DTC_ASSERT(LLVMIsConstant(v));
  return -1;
}

/* A scalar as the key spells it: its slot, or its constant's bits. */
static void key_scalar(FILE *out, const Group *g, LLVMValueRef v) {
  int s = slot(g, v);
  if (s >= 0) {
    fprintf(out, " s%d", s);
    return;
  }
  LLVMBool lost;
  fprintf(out, " c%a", LLVMConstRealGetDouble(v, &lost));
}

/* What decides the code of g's nest, outlined with the step-function values
 * it reads (from[], in order) as parameters: its kind (s: shared_nest's, p
 * and t: outline_fn's, which take the outermost loop's range and so leave
 * its length out), the CPU, the loops, each operand's parameter and
 * strides, each member's op, attributes, operands, destinations and whether
 * it has one use (a product then joins its add). */
static char *loop_key(const Group *g, LLVMValueRef **dst, const int *ndst, char kind,
                      size_t *len) {
  const Cg *c = g->fn->c;
  const Uses *u = &g->fn->use;
  char *text = NULL;
  FILE *out = open_memstream(&text, len);
  DTC_ASSERT(out);
  fprintf(out, "%c %s %s %d", kind, c->cpu ? c->cpu : "", c->features ? c->features : "",
          g->nloop);
  for (int l = kind == 's' ? 0 : 1; l < g->nloop; l++)
    fprintf(out, " %lld", (long long)g->len[l]);
  for (int k = 0; k < g->nmap; k++)
    fprintf(out, " %c", LLVMGetTypeKind(LLVMTypeOf(g->from[k])) == LLVMPointerTypeKind ? 'p' : 'f');
  for (int p = 0; p < g->nop; p++) {
    fprintf(out, "\no s%d", slot(g, g->op[p].base));
    for (int l = 0; l < g->nloop; l++)
      fprintf(out, " %lld", (long long)g->op[p].stride[l]);
  }
  for (int k = 0; k < g->n; k++) {
    const Inst *x = g->member[k];
    fprintf(out, "\n%s %d", ir_ops[x->op].name, u->off[x->id + 1] - u->off[x->id] == 1);
    for (int a = 0; a < x->nattr; a++) {
      const Attr *t = &x->attr[a];
      fprintf(out, " %s=", t->name);
      if (t->kind == A_INT)
        fprintf(out, "%lld", (long long)t->i);
      else if (t->kind == A_FLOAT)
        fprintf(out, "%a", t->f);
      else if (t->kind == A_STR)
        fprintf(out, "%s", t->s);
      else
        for (int i = 0; i < t->n; i++)
          fprintf(out, "%lld,", (long long)t->ints[i]);
    }
    if (is_scalar(x))
      key_scalar(out, g, g->v[k]);
    if (ir_ops[x->op].kind != K_ELEM)
      continue;
    for (int j = 0; j < x->nin; j++) {
      const Inst *o = x->in[j];
      if (member(g, o)) {
        fprintf(out, " m%d", o->id - g->member[0]->id);
      } else if (is_scalar(o)) {
        key_scalar(out, g, cg_scalar(g->fn, o));
      } else {
        int p = 0;
        while (g->op[p].v != o)
          p++;
        fprintf(out, " o%d", p);
      }
    }
    fprintf(out, " >");
    for (int j = 0; j < ndst[k]; j++)
      fprintf(out, " s%d", slot(g, dst[k][j]));
  }
  fclose(out);
  return text;
}

/* The base of step-function value v, 'w' (work) or 's' (state), and its
 * offset from it in bytes into *off; 0: neither, nor a constant offset from
 * one. */
static char based(const CgFn *fn, LLVMValueRef v, int64_t *off) {
  *off = 0;
  if (LLVMIsAGetElementPtrInst(v) && LLVMGetNumOperands(v) == 2 &&
      LLVMGetGEPSourceElementType(v) == fn->c->i8 && LLVMIsAConstantInt(LLVMGetOperand(v, 1))) {
    *off = LLVMConstIntGetSExtValue(LLVMGetOperand(v, 1));
    v = LLVMGetOperand(v, 0);
  }
  return v == fn->work ? 'w' : v == fn->state ? 's' : 0;
}

/* A call of loop function f (of type t) with g's from[]. Where more than
 * PACK_MIN of them are addresses in work or state, the step calls instead
 * an internal MODEL.loopN.pK(work, state, offsets, others...) with a
 * constant table of their offsets, which makes the addresses and calls f:
 * the step's code then grows by three or so arguments a group rather than
 * by one a buffer (LLVM's back end works per argument), and f keeps its
 * noalias parameters, so its loops vectorise without run-time checks. */
#define PACK_MIN 4
static void call_loop(Group *g, LLVMValueRef f, LLVMTypeRef t) {
  CgFn *fn = g->fn;
  Cg *c = fn->c;
  LLVMBuilderRef b = c->b;
  int n = g->nmap, npack = 0, nrest = 0;
  const char *fname = LLVMGetValueName(f);
  int at = (int)strlen(fname) + 1;
  char *kind = malloc((size_t)(at + n + 1));   /* the key: f's name, then each slot's base */
  int64_t *off = malloc(sizeof(int64_t) * (size_t)(n + 1));
  LLVMValueRef *arg = malloc(sizeof(LLVMValueRef) * (size_t)(n + 3));
  DTC_ASSERT(kind && off && arg);
  memcpy(kind, fname, (size_t)at);   /* and its NUL, the separator */
  for (int k = 0; k < n; k++) {
    char base = based(fn, g->from[k], &off[npack]);
    kind[at + k] = base ? base : '-';
    if (base)
      npack++;
    else
      arg[3 + nrest++] = g->from[k];
  }
  if (npack <= PACK_MIN) {
    LLVMBuildCall2(b, t, f, g->from, (unsigned)n, "");
    free(kind), free(off), free(arg);
    return;
  }
  LLVMTypeRef *pt = malloc(sizeof(LLVMTypeRef) * (size_t)(nrest + 3));
  DTC_ASSERT(pt);
  pt[0] = pt[1] = pt[2] = c->ptr;
  for (int k = 0; k < nrest; k++)
    pt[3 + k] = LLVMTypeOf(arg[3 + k]);
  LLVMTypeRef packt = LLVMFunctionType(c->voidt, pt, (unsigned)(nrest + 3), 0);
  LLVMValueRef *e = cg_table_find(&c->packs, kind, (size_t)(at + n));   /* takes kind */
  if (!*e) {
    LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
    const char *name = arena_printf(fn->f->mod->arena, "%s.p%d", LLVMGetValueName(f),
                                    cg_table_count(c->packs) - 1);
    LLVMValueRef p = LLVMAddFunction(c->mod, name, packt);
    LLVMSetLinkage(p, LLVMInternalLinkage);
    static const char *attr[] = {"nounwind", "noinline"};
    for (int k = 0; k < 2; k++)
      LLVMAddAttributeAtIndex(p, LLVMAttributeFunctionIndex,
                              LLVMCreateEnumAttribute(c->ctx, LLVMGetEnumAttributeKindForName(
                                                                  attr[k], strlen(attr[k])), 0));
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c->ctx, p, "entry"));
    LLVMValueRef *all = malloc(sizeof(LLVMValueRef) * (size_t)(n + 1));
    DTC_ASSERT(all);
    for (int k = 0, j = 0, r = 0; k < n; k++) {
      char base = kind[at + k];
      if (base == '-') {
        all[k] = LLVMGetParam(p, (unsigned)(3 + r++));
        continue;
      }
      LLVMValueRef idx = cg_i64(c, j++);
      LLVMValueRef o = LLVMBuildLoad2(
          b, c->i64, LLVMBuildInBoundsGEP2(b, c->i64, LLVMGetParam(p, 2), &idx, 1, ""), "");
      all[k] = LLVMBuildInBoundsGEP2(b, c->i8, LLVMGetParam(p, base == 'w' ? 0 : 1), &o, 1, "");
    }
    LLVMBuildCall2(b, t, f, all, (unsigned)n, "");
    LLVMBuildRetVoid(b);
    LLVMPositionBuilderAtEnd(b, here);
    free(all);
    *e = p;
  }
  LLVMValueRef *v = malloc(sizeof(LLVMValueRef) * (size_t)npack);
  DTC_ASSERT(v);
  for (int k = 0; k < npack; k++)
    v[k] = cg_i64(c, off[k]);
  arg[0] = fn->work, arg[1] = fn->state;
  arg[2] = cg_private_const(c, LLVMConstArray(c->i64, v, (unsigned)npack), "offsets");
  LLVMBuildCall2(b, packt, *e, arg, (unsigned)(nrest + 3), "");
  free(v), free(pt), free(off), free(arg);
}

/* Runs g's nest as a call of an internal function MODEL.loopN(values...)
 * taking the step-function values it reads, each pointer noalias (the
 * values are distinct blocks, or one value where they are one); groups
 * whose key is alike call one function, so code grows with the distinct
 * groups, not with the program. Not inlined: a step of many alike groups
 * stays a list of calls. */
static void shared_nest(Group *g, LLVMValueRef **dst, const int *ndst) {
  CgFn *fn = g->fn;
  Cg *c = fn->c;
  LLVMBuilderRef b = c->b;
  Arena *a = fn->f->mod->arena;
  int cap = need_cap(g, ndst);
  g->from = malloc(sizeof(LLVMValueRef) * (size_t)cap);   /* freed below */
  g->to = malloc(sizeof(LLVMValueRef) * (size_t)cap);
  DTC_ASSERT(g->from && g->to);
  need_all(g, dst, ndst);
  size_t len;
  char *key = loop_key(g, dst, ndst, 's', &len);
  LLVMValueRef *e = cg_table_find(&c->loops, key, len);
  LLVMTypeRef *ft = arena_alloc(a, sizeof(LLVMTypeRef) * (size_t)(g->nmap + 1));
  for (int k = 0; k < g->nmap; k++)
    ft[k] = LLVMTypeOf(g->from[k]);
  LLVMTypeRef type = LLVMFunctionType(c->voidt, ft, (unsigned)g->nmap, 0);
  if (!*e) {
    LLVMBasicBlockRef here = LLVMGetInsertBlock(b);
    const char *name = arena_printf(a, "%s.loop%d", c->m->name, cg_table_count(c->loops) - 1);
    LLVMValueRef f = LLVMAddFunction(c->mod, name, type);
    LLVMSetLinkage(f, LLVMInternalLinkage);
    static const char *attr[] = {"nounwind", "noinline"};
    for (int k = 0; k < 2; k++)
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateEnumAttribute(c->ctx, LLVMGetEnumAttributeKindForName(
                                                                  attr[k], strlen(attr[k])), 0));
    unsigned noalias = LLVMGetEnumAttributeKindForName("noalias", 7);
    for (int k = 0; k < g->nmap; k++) {
      g->to[k] = LLVMGetParam(f, (unsigned)k);
      if (LLVMGetTypeKind(ft[k]) == LLVMPointerTypeKind)
        LLVMAddAttributeAtIndex(f, (unsigned)k + 1, LLVMCreateEnumAttribute(c->ctx, noalias, 0));
    }
    localize(g, dst, ndst);
    LLVMPositionBuilderAtEnd(b, LLVMAppendBasicBlockInContext(c->ctx, f, "entry"));
    g->llfn = f;
    nest(g, 0, cg_i64(c, 0), dst, ndst);
    LLVMBuildRetVoid(b);
    LLVMPositionBuilderAtEnd(b, here);
    *e = f;
  }
  call_loop(g, *e, type);
  free(g->from);
  free(g->to);
  g->from = g->to = NULL;
}

void cg_group(CgFn *fn, Inst **mem, int n) {
  LLVMValueRef **dst;
  int *ndst;
  Group g = group(fn, mem, n, &dst, &ndst);
  plan_loops(&g);
  int64_t elems = 1;
  for (int l = 0; l < g.nloop; l++)
    elems *= g.len[l];
  if (elems >= PAR_MIN && g.len[0] > 1)
    outline(&g, dst, ndst);
  else
    shared_nest(&g, dst, ndst);
}

LLVMValueRef cg_group_tiles(CgFn *fn, Inst **mem, int n, LLVMValueRef *env) {
  LLVMValueRef **dst;
  int *ndst;
  Group g = group(fn, mem, n, &dst, &ndst);
  tile_loops(&g);
  return outline_fn(&g, dst, ndst, true, env);
}
