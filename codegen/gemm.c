/* gemm.c: the generated matmul. Once per module and per target CPU (the
 * function attributes target-cpu and target-features of the device's code)
 * it emits an internal GEMM, C[b] = op(A[b]) op(B[b]) for b < batch, C
 * row-major [m, n], element (i, p) of op(A) at A + i rs_a + p cs_a and (p, j)
 * of op(B) at B + p rs_b + j cs_b (so ta and tb are strides), and a call of
 * it replaces libdtrt's dtrt_k_matmul where cg_gemm_wanted says so.
 *
 * The loops are BLIS's (Van Zee and van de Geijn, "BLIS: A Framework for
 * Rapidly Instantiating BLAS Functionality", 2015):
 *
 *   for jc < n step NC:                    B block KC x NC, packed
 *     for pc < k step KC:                  into NR-wide micro-panels
 *       for ic < m step MC:                A block MC x KC, packed
 *         for jr < nc step NR:             into MR-tall micro-panels
 *           for ir < mc step MR:
 *             micro-kernel: C[MR, NR] (+)= Apanel[MR, KC] Bpanel[KC, NR]
 *
 * The micro-kernel keeps the MR x NR tile of C in MR x NR/VL vector
 * registers (VL floats each) for the whole KC loop: each step loads NR/VL
 * vectors of the B panel, broadcasts MR values of the A panel and makes
 * MR x NR/VL fused multiply-adds; the KC loop runs 4 steps at a time. A
 * tile over the edge of C (m or n not a multiple of MR or NR) is computed
 * whole from zero-padded panels and stored through masked stores, so every
 * m, n and k works. The first KC block writes C, the others add to it.
 *
 * Micro-tiles by the target's vector registers (blocking()):
 *   512-bit (AVX-512, 32 registers)    14 x 32: 28 accumulators, 2 of B
 *   256-bit with FMA (AVX2, 16)          6 x 16: 12 accumulators, 2 of B, 1 of A
 *   256-bit without FMA (AVX, 16)        4 x 16
 *   128-bit (SSE, 16 registers)          4 x 8
 *   128-bit NEON (32 registers)          8 x 8
 * The vector width comes from the target features when they say (the host's
 * list, or an explicit +avx512f), else from the CPU's name (x86_cpus), else
 * 128 bits.
 *
 * Block sizes: the B micro-panel (KC x NR) is reused from L1 by every
 * micro-tile of an A block, the A block (MC x KC) from L2 by every B
 * micro-panel, and the B block (KC x NC) from L3 or memory. With a typical
 * L1D of L1 bytes and L2 of L2 bytes for the vector width (caches()):
 *   KC = 2/3 L1 / (4 NR), rounded down to a multiple of 8, at most 512:
 *        the B micro-panel takes two thirds of L1, the streaming A
 *        micro-panel and the C tile the rest. Each k is cut into blocks as
 *        equal as multiples of 4 allow (784: 4 x 196, not 3 x 256 + 16);
 *   MC = L2 / 2 / (4 KC), rounded down to a multiple of MR: half of L2,
 *        the rows of a piece cut as equally (512: 2 x 252, not 504 + 8);
 *   NC = 4096 rounded down to a multiple of NR: B is packed in blocks of
 *        4096 columns, so A is packed once for every 4096 of them.
 * So KC x MC x NC is 256 x 504 x 4096 for 512-bit vectors, 336 x 96 x
 * 4096 for AVX2, 512 x 256 x 4096 for NEON. On the Xeon of bench/matmul
 * (Sapphire Rapids, 48 KiB L1D, 2 MiB L2) one thread of 1008 x 1024 x 1024
 * ran at 126, 131, 138 and 142 GFLOP/s with KC 128, 192, 256 and 384 (176
 * is its peak): past a B micro-panel of the whole L1 (384) the gain is
 * small, and KC of 256 keeps it to two thirds. The micro-kernel alone, its
 * panels in L1, runs at 99% of the peak (172-176 GFLOP/s for KC 64-384);
 * in the blocked loops it waits on L2 for the A micro-panels and on the C
 * tile: the C tile is prefetched when the kernel starts, prefetching A and B
 * further ahead gained nothing.
 *
 * Threads: the call asks the runtime for its thread count T
 * (dtrt_threads) and a scratch block of T parts (dtrt_scratch), and runs T
 * slots through dtrt_parallel_for, each on one thread with its own part, in
 * which it packs its own panels. The work is batch x G items, G = T /
 * gcd(batch, T) pieces of each product, cut along n when m < n (each piece
 * then packs all of A and its share of B) and along m otherwise, at
 * micro-tile boundaries; slot s takes items [s batch G / T, (s+1) batch G /
 * T). So a batch of 64 small products on 2 threads is 32 whole products
 * each, and a single product is halved. A product of fewer than PAR_FLOPS
 * calls the serial entry instead, one slot on the calling thread. */
#include <string.h>

#include "dtrt.h"
#include "codegen.h"

typedef struct Blocking {
  int vl;            /* floats per vector register */
  int mr, nv, nr;    /* micro-tile: mr rows of nv vectors, nr = nv * vl columns */
  int kc, mc, nc;
  bool fma;          /* fused multiply-add in hardware */
} Blocking;

/* The functions made for one CPU. */
typedef struct CgGemm {
  const char *cpu, *features;
  LLVMValueRef slot;
  LLVMValueRef fn[2];   /* the entries (emit_entry), serial and parallel; NULL: not yet */
  LLVMTypeRef type;     /* theirs */
  struct CgGemm *next;
} CgGemm;

/* What emitting one CPU's functions shares. */
typedef struct Gen {
  Cg *c;
  LLVMBuilderRef b;
  Blocking k;
  LLVMTypeRef vec, mask, ivec;   /* <vl x float>, <vl x i1>, <vl x i32> */
  LLVMValueRef fn;               /* being built */
  const char *cpu, *features;
} Gen;

/* ---- the target ---- */

/* x86 CPUs by LLVM's names: the widest vectors they have and whether they
 * fuse multiply-adds. Any other is taken for 128-bit SSE (x86-64's base). */
static const struct {
  const char *name;
  int bits;
  bool fma;
} x86_cpus[] = {
    {"knl", 512, 1},           {"knm", 512, 1},            {"skylake-avx512", 512, 1},
    {"skx", 512, 1},           {"cascadelake", 512, 1},    {"cooperlake", 512, 1},
    {"cannonlake", 512, 1},    {"icelake-client", 512, 1}, {"icelake-server", 512, 1},
    {"tigerlake", 512, 1},     {"rocketlake", 512, 1},     {"sapphirerapids", 512, 1},
    {"emeraldrapids", 512, 1}, {"graniterapids", 512, 1},  {"graniterapids-d", 512, 1},
    {"diamondrapids", 512, 1}, {"x86-64-v4", 512, 1},      {"znver4", 512, 1},
    {"znver5", 512, 1},        {"haswell", 256, 1},        {"broadwell", 256, 1},
    {"skylake", 256, 1},       {"core-avx2", 256, 1},      {"alderlake", 256, 1},
    {"raptorlake", 256, 1},    {"meteorlake", 256, 1},     {"arrowlake", 256, 1},
    {"arrowlake-s", 256, 1},   {"lunarlake", 256, 1},      {"pantherlake", 256, 1},
    {"gracemont", 256, 1},     {"sierraforest", 256, 1},   {"grandridge", 256, 1},
    {"clearwaterforest", 256, 1}, {"x86-64-v3", 256, 1},   {"znver1", 256, 1},
    {"znver2", 256, 1},        {"znver3", 256, 1},         {"bdver2", 256, 1},
    {"bdver3", 256, 1},        {"bdver4", 256, 1},         {"sandybridge", 256, 0},
    {"ivybridge", 256, 0},     {"corei7-avx", 256, 0},     {"core-avx-i", 256, 0},
    {"bdver1", 256, 0},        {"btver2", 256, 0},
};

/* Whether the feature list (LLVM's "+avx2,-avx512f,...") says sign name. */
static bool says(const char *features, char sign, const char *name) {
  size_t n = strlen(name);
  for (const char *p = features; p && *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n + 1 && p[0] == sign && !strncmp(p + 1, name, n))
      return true;
    p = end ? end + 1 : NULL;
  }
  return false;
}

/* Typical data caches, in bytes, of CPUs with vectors of this many bits:
 * AVX-512 servers 48 KiB L1D (Ice Lake-SP, Sapphire Rapids; 32 KiB before)
 * and 1 to 2 MiB L2 (1 MiB taken); AVX2 and older x86 32 KiB and 256 KiB
 * to 1 MiB (256 KiB taken); AArch64 cores 64 KiB and 1 MiB (Neoverse N1,
 * N2, V1). */
static void caches(bool arm, int bits, int *l1, int *l2) {
  *l1 = arm ? 65536 : bits == 512 ? 49152 : 32768;
  *l2 = arm || bits == 512 ? 1 << 20 : 1 << 18;
}

/* The blocking for a CPU (NULL: generic) with features f of target triple. */
static Blocking blocking_for(const char *triple, const char *cpu, const char *f) {
  cpu = cpu ? cpu : "generic";
  f = f ? f : "";
  bool arm = !strncmp(triple, "aarch64", 7) || !strncmp(triple, "arm64", 5);
  int bits = 128;
  bool fma = arm;
  if (!arm) {
    for (int i = 0; i < COUNTOF(x86_cpus); i++)
      if (!strcmp(cpu, x86_cpus[i].name))
        bits = x86_cpus[i].bits, fma = x86_cpus[i].fma;
    if (says(f, '+', "avx512f"))
      bits = 512, fma = true;
    else if (bits == 512 && says(f, '-', "avx512f"))
      bits = 256;
    if (bits < 512 && says(f, '+', "avx"))
      bits = 256;
    if (bits == 256 && says(f, '-', "avx"))
      bits = 128;
    if (says(f, '+', "fma"))
      fma = true;
    else if (says(f, '-', "fma"))
      fma = false;
  }
  Blocking k = {.vl = bits / 32, .nv = 2, .fma = fma};
  k.mr = arm ? 8 : bits == 512 ? 14 : bits == 256 && fma ? 6 : 4;
  k.nr = k.nv * k.vl;
  int l1, l2;
  caches(arm, bits, &l1, &l2);
  k.kc = l1 * 2 / 3 / (4 * k.nr) / 8 * 8;
  if (k.kc > 512)
    k.kc = 512;
  k.mc = l2 / 2 / (4 * k.kc) / k.mr * k.mr;
  k.nc = 4096 / k.nr * k.nr;
  return k;
}

static Blocking blocking(const Cg *c) {
  return blocking_for(LLVMGetTarget(c->mod), c->cpu, c->features);
}

/* ---- building blocks ---- */

static LLVMValueRef ci(Gen *g, int64_t v) { return cg_i64(g->c, v); }

static LLVMValueRef add(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildNSWAdd(g->b, a, b, "");
}

static LLVMValueRef sub(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildNSWSub(g->b, a, b, "");
}

static LLVMValueRef mul(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildNSWMul(g->b, a, b, "");
}

static LLVMValueRef smin(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "");
}

static LLVMValueRef sdiv(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSDiv(g->b, a, b, "");
}

/* a / b rounded up, for a >= 0 and b > 0. */
static LLVMValueRef ceil_div(Gen *g, LLVMValueRef a, LLVMValueRef b) {
  return sdiv(g, sub(g, add(g, a, b), ci(g, 1)), b);
}

/* a rounded up to a multiple of w. */
static LLVMValueRef round_up(Gen *g, LLVMValueRef a, int64_t w) {
  return mul(g, ceil_div(g, a, ci(g, w)), ci(g, w));
}

/* &base[i], floats; wrap: a C address that may lie past the tensor (an edge
 * tile's rows beyond m, never accessed). */
static LLVMValueRef at(Gen *g, LLVMValueRef base, LLVMValueRef i) {
  return LLVMBuildInBoundsGEP2(g->b, g->c->f32, base, &i, 1, "");
}

static LLVMValueRef at_wrap(Gen *g, LLVMValueRef base, LLVMValueRef i) {
  return LLVMBuildGEP2(g->b, g->c->f32, base, &i, 1, "");
}

static LLVMValueRef load(Gen *g, LLVMTypeRef t, LLVMValueRef p, unsigned align) {
  LLVMValueRef v = LLVMBuildLoad2(g->b, t, p, "");
  LLVMSetAlignment(v, align);
  return v;
}

static void store(Gen *g, LLVMValueRef v, LLVMValueRef p, unsigned align) {
  LLVMSetAlignment(LLVMBuildStore(g->b, v, p), align);
}

static LLVMValueRef call_intrinsic(Gen *g, const char *name, LLVMTypeRef *over, int nover,
                                   LLVMValueRef *arg, int n) {
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  DTC_ASSERT(id);
  LLVMValueRef f = LLVMGetIntrinsicDeclaration(g->c->mod, id, over, (size_t)nover);
  LLVMTypeRef t = LLVMIntrinsicGetType(g->c->ctx, id, over, (size_t)nover);
  return LLVMBuildCall2(g->b, t, f, arg, (unsigned)n, "");
}

static LLVMValueRef masked_load(Gen *g, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef over[] = {g->vec, g->c->ptr};
  LLVMValueRef arg[] = {p, cg_i32(g->c, 4), mask, LLVMConstNull(g->vec)};
  return call_intrinsic(g, "llvm.masked.load", over, 2, arg, 4);
}

static void masked_store(Gen *g, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask) {
  LLVMTypeRef over[] = {g->vec, g->c->ptr};
  LLVMValueRef arg[] = {v, p, cg_i32(g->c, 4), mask};
  call_intrinsic(g, "llvm.masked.store", over, 2, arg, 4);
}

/* Lanes l of a vector with first + l < limit (i64 values). */
static LLVMValueRef lanes_below(Gen *g, int64_t first, LLVMValueRef limit) {
  LLVMValueRef idx[64];
  for (int l = 0; l < g->k.vl; l++)
    idx[l] = cg_i32(g->c, first + l);
  LLVMValueRef lim = LLVMBuildTrunc(g->b, limit, g->c->i32, "");
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetPoison(g->ivec), lim, cg_i32(g->c, 0), "");
  v = LLVMBuildShuffleVector(g->b, v, LLVMGetPoison(g->ivec), LLVMConstNull(g->ivec), "");
  return LLVMBuildICmp(g->b, LLVMIntSLT, LLVMConstVector(idx, (unsigned)g->k.vl), v, "");
}

static LLVMValueRef splat(Gen *g, LLVMValueRef s) {
  LLVMValueRef v = LLVMBuildInsertElement(g->b, LLVMGetPoison(g->vec), s, cg_i32(g->c, 0), "");
  return LLVMBuildShuffleVector(g->b, v, LLVMGetPoison(g->vec), LLVMConstNull(g->ivec), "");
}

/* x * y + z, fused where the target can. */
static LLVMValueRef fma_v(Gen *g, LLVMValueRef x, LLVMValueRef y, LLVMValueRef z) {
  LLVMValueRef arg[] = {x, y, z};
  return call_intrinsic(g, g->k.fma ? "llvm.fma" : "llvm.fmuladd", &g->vec, 1, arg, 3);
}

/* for (i = from; i < to; i += step): loop_open returns i and leaves the
 * builder in the body; loop_close ends it and leaves the builder after. */
typedef struct Loop {
  LLVMValueRef i, step;
  LLVMBasicBlockRef head, exit;
} Loop;

static LLVMValueRef loop_open(Gen *g, Loop *l, LLVMValueRef from, LLVMValueRef to,
                              LLVMValueRef step) {
  LLVMContextRef x = g->c->ctx;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  l->head = LLVMAppendBasicBlockInContext(x, g->fn, "loop");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(x, g->fn, "body");
  l->exit = LLVMAppendBasicBlockInContext(x, g->fn, "done");
  l->step = step;
  LLVMBuildBr(g->b, l->head);
  LLVMPositionBuilderAtEnd(g->b, l->head);
  l->i = LLVMBuildPhi(g->b, g->c->i64, "i");
  LLVMAddIncoming(l->i, &from, &pre, 1);
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, l->i, to, ""), body, l->exit);
  LLVMPositionBuilderAtEnd(g->b, body);
  return l->i;
}

static void loop_close(Gen *g, Loop *l) {
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMValueRef next = add(g, l->i, l->step);
  LLVMBuildBr(g->b, l->head);
  LLVMAddIncoming(l->i, &next, &latch, 1);
  LLVMMoveBasicBlockAfter(l->exit, LLVMGetLastBasicBlock(g->fn));
  LLVMPositionBuilderAtEnd(g->b, l->exit);
}

/* An internal function of the CPU, named NAME.CPU, its entry block current. */
static LLVMValueRef function(Gen *g, const char *name, LLVMTypeRef t) {
  Cg *c = g->c;
  const char *full = arena_printf(c->m->arena, "dtc.%s.%s", name, *g->cpu ? g->cpu : "default");
  LLVMValueRef f = LLVMAddFunction(c->mod, full, t);
  LLVMSetLinkage(f, LLVMInternalLinkage);
  unsigned nounwind = LLVMGetEnumAttributeKindForName("nounwind", 8);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(c->ctx, nounwind, 0));
  static const char *key[] = {"target-cpu", "target-features"};
  const char *val[] = {g->cpu, g->features};
  for (int k = 0; k < 2; k++)
    if (*val[k])
      LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                              LLVMCreateStringAttribute(c->ctx, key[k], (unsigned)strlen(key[k]),
                                                        val[k], (unsigned)strlen(val[k])));
  g->fn = f;
  LLVMPositionBuilderAtEnd(g->b, LLVMAppendBasicBlockInContext(c->ctx, f, "entry"));
  return f;
}

/* Kept out of line: one copy of each, and profiles that tell them apart. */
static void noinline(Gen *g, LLVMValueRef f) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noinline", 8);
  LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex,
                          LLVMCreateEnumAttribute(g->c->ctx, kind, 0));
}

static void noalias(Gen *g, LLVMValueRef f, const int *params, int n) {
  unsigned kind = LLVMGetEnumAttributeKindForName("noalias", 7);
  for (int k = 0; k < n; k++)
    LLVMAddAttributeAtIndex(f, (unsigned)params[k] + 1,
                            LLVMCreateEnumAttribute(g->c->ctx, kind, 0));
}

/* ---- the micro-kernel ---- */

/* One step p of the KC loop: acc[i][v] += a[p][i] * b[p][v]. */
static void kernel_step(Gen *g, LLVMValueRef a, LLVMValueRef b, LLVMValueRef p,
                        LLVMValueRef *acc) {
  const Blocking *k = &g->k;
  LLVMValueRef bp = at(g, b, mul(g, p, ci(g, k->nr))), ap = at(g, a, mul(g, p, ci(g, k->mr)));
  LLVMValueRef bv[8];
  for (int v = 0; v < k->nv; v++)
    bv[v] = load(g, g->vec, at(g, bp, ci(g, v * k->vl)), (unsigned)(4 * k->vl));
  for (int i = 0; i < k->mr; i++) {
    LLVMValueRef s = splat(g, load(g, g->c->f32, at(g, ap, ci(g, i)), 4));
    for (int v = 0; v < k->nv; v++)
      acc[i * k->nv + v] = fma_v(g, s, bv[v], acc[i * k->nv + v]);
  }
}

/* The tile's stores: full (mr == MR, nr == NR) plain, else masked; acc adds
 * to C, else writes it. */
static void kernel_store(Gen *g, LLVMValueRef c, LLVMValueRef ldc, LLVMValueRef mr,
                         LLVMValueRef nr, bool full, bool accumulate, LLVMValueRef *acc) {
  const Blocking *k = &g->k;
  LLVMValueRef lane[8];
  for (int v = 0; !full && v < k->nv; v++)
    lane[v] = lanes_below(g, (int64_t)v * k->vl, nr);
  LLVMValueRef none = LLVMConstNull(g->mask);
  for (int i = 0; i < k->mr; i++) {
    LLVMValueRef off = mul(g, ci(g, i), ldc);
    LLVMValueRef row = full ? at(g, c, off) : at_wrap(g, c, off);
    LLVMValueRef in = full ? NULL : LLVMBuildICmp(g->b, LLVMIntSLT, ci(g, i), mr, "");
    for (int v = 0; v < k->nv; v++) {
      LLVMValueRef p = full ? at(g, row, ci(g, v * k->vl)) : at_wrap(g, row, ci(g, v * k->vl));
      LLVMValueRef x = acc[i * k->nv + v];
      if (full) {
        if (accumulate)
          x = LLVMBuildFAdd(g->b, load(g, g->vec, p, 4), x, "");
        store(g, x, p, 4);
      } else {
        LLVMValueRef m = LLVMBuildSelect(g->b, in, lane[v], none, "");
        if (accumulate)
          x = LLVMBuildFAdd(g->b, masked_load(g, p, m), x, "");
        masked_store(g, x, p, m);
      }
    }
  }
}

/* void kernel(i64 kc, ptr a, ptr b, ptr c, i64 ldc, i64 mr, i64 nr, i32 acc):
 * C[mr, nr] (+= when acc) A[MR, kc] B[kc, NR], the panels as packed. */
static LLVMValueRef emit_kernel(Gen *g) {
  Cg *c = g->c;
  const Blocking *k = &g->k;
  LLVMTypeRef pt[] = {c->i64, c->ptr, c->ptr, c->ptr, c->i64, c->i64, c->i64, c->i32};
  LLVMValueRef f = function(g, "gemm_kernel", LLVMFunctionType(c->voidt, pt, 8, 0));
  static const int na[] = {1, 2, 3};
  noalias(g, f, na, 3);
  noinline(g, f);
  LLVMValueRef kc = LLVMGetParam(f, 0), a = LLVMGetParam(f, 1), b = LLVMGetParam(f, 2);
  LLVMValueRef cp = LLVMGetParam(f, 3), ldc = LLVMGetParam(f, 4), mr = LLVMGetParam(f, 5);
  LLVMValueRef nr = LLVMGetParam(f, 6), accf = LLVMGetParam(f, 7);
  int nacc = k->mr * k->nv;
  LLVMValueRef acc[64], phi[64], p4[64];
  /* C's tile, to be read or written after the loop: fetched now, so its
   * misses (C's rows lie far apart when n is large) overlap the loop */
  for (int i = 0; i < k->mr; i++)
    for (int l = 0; l < k->nr; l += 16) {
      LLVMValueRef arg[] = {at_wrap(g, cp, add(g, mul(g, ci(g, i), ldc), ci(g, l))),
                            cg_i32(c, 1), cg_i32(c, 3), cg_i32(c, 1)};
      call_intrinsic(g, "llvm.prefetch", &c->ptr, 1, arg, 4);
    }
  LLVMBasicBlockRef entry = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(c->ctx, f, "k4");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(c->ctx, f, "k4.body");
  LLVMBasicBlockRef rhead = LLVMAppendBasicBlockInContext(c->ctx, f, "k1");
  LLVMBasicBlockRef rbody = LLVMAppendBasicBlockInContext(c->ctx, f, "k1.body");
  LLVMBasicBlockRef st = LLVMAppendBasicBlockInContext(c->ctx, f, "store");
  LLVMBuildBr(g->b, head);

  /* four steps at a time */
  LLVMPositionBuilderAtEnd(g->b, head);
  LLVMValueRef p = LLVMBuildPhi(g->b, c->i64, "p");
  LLVMValueRef zero = ci(g, 0), vzero = LLVMConstNull(g->vec);
  LLVMAddIncoming(p, &zero, &entry, 1);
  for (int j = 0; j < nacc; j++) {
    phi[j] = LLVMBuildPhi(g->b, g->vec, "acc");
    LLVMAddIncoming(phi[j], &vzero, &entry, 1);
  }
  LLVMValueRef more = LLVMBuildICmp(g->b, LLVMIntSLE, add(g, p, ci(g, 4)), kc, "");
  LLVMBuildCondBr(g->b, more, body, rhead);
  LLVMPositionBuilderAtEnd(g->b, body);
  memcpy(acc, phi, sizeof(LLVMValueRef) * (size_t)nacc);
  for (int u = 0; u < 4; u++)
    kernel_step(g, a, b, add(g, p, ci(g, u)), acc);
  LLVMValueRef pn = add(g, p, ci(g, 4));
  LLVMAddIncoming(p, &pn, &body, 1);
  for (int j = 0; j < nacc; j++)
    LLVMAddIncoming(phi[j], &acc[j], &body, 1);
  LLVMBuildBr(g->b, head);

  /* the rest, one at a time */
  LLVMPositionBuilderAtEnd(g->b, rhead);
  LLVMValueRef q = LLVMBuildPhi(g->b, c->i64, "p");
  LLVMAddIncoming(q, &p, &head, 1);
  for (int j = 0; j < nacc; j++) {
    p4[j] = LLVMBuildPhi(g->b, g->vec, "acc");
    LLVMAddIncoming(p4[j], &phi[j], &head, 1);
  }
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, q, kc, ""), rbody, st);
  LLVMPositionBuilderAtEnd(g->b, rbody);
  memcpy(acc, p4, sizeof(LLVMValueRef) * (size_t)nacc);
  kernel_step(g, a, b, q, acc);
  LLVMValueRef qn = add(g, q, ci(g, 1));
  LLVMAddIncoming(q, &qn, &rbody, 1);
  for (int j = 0; j < nacc; j++)
    LLVMAddIncoming(p4[j], &acc[j], &rbody, 1);
  LLVMBuildBr(g->b, rhead);

  /* the tile to C */
  LLVMPositionBuilderAtEnd(g->b, st);
  LLVMValueRef full = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntEQ, mr, ci(g, k->mr), ""),
                                   LLVMBuildICmp(g->b, LLVMIntEQ, nr, ci(g, k->nr), ""), "");
  LLVMValueRef adds = LLVMBuildICmp(g->b, LLVMIntNE, accf, cg_i32(c, 0), "");
  LLVMBasicBlockRef blk[4], done = LLVMAppendBasicBlockInContext(c->ctx, f, "ret");
  LLVMBasicBlockRef fb = LLVMAppendBasicBlockInContext(c->ctx, f, "full");
  LLVMBasicBlockRef eb = LLVMAppendBasicBlockInContext(c->ctx, f, "edge");
  LLVMBuildCondBr(g->b, full, fb, eb);
  static const char *names[] = {"full.set", "full.add", "edge.set", "edge.add"};
  for (int j = 0; j < 4; j++)
    blk[j] = LLVMAppendBasicBlockInContext(c->ctx, f, names[j]);
  LLVMPositionBuilderAtEnd(g->b, fb);
  LLVMBuildCondBr(g->b, adds, blk[1], blk[0]);
  LLVMPositionBuilderAtEnd(g->b, eb);
  LLVMBuildCondBr(g->b, adds, blk[3], blk[2]);
  for (int j = 0; j < 4; j++) {
    LLVMPositionBuilderAtEnd(g->b, blk[j]);
    kernel_store(g, cp, ldc, mr, nr, j < 2, j % 2, p4);
    LLVMBuildBr(g->b, done);
  }
  LLVMPositionBuilderAtEnd(g->b, done);
  LLVMBuildRetVoid(g->b);
  return f;
}

/* ---- packing ---- */

/* Transposes the n x n block whose row r is vector v[r] (n a power of 2):
 * log2 n rounds of interleaving row r with row r + n/2, a shuffle each. */
static void transpose(Gen *g, LLVMValueRef *v, int n) {
  LLVMValueRef lo[64], hi[64], t[64];
  for (int l = 0; l < n / 2; l++) {
    lo[2 * l] = cg_i32(g->c, l), lo[2 * l + 1] = cg_i32(g->c, n + l);
    hi[2 * l] = cg_i32(g->c, n / 2 + l), hi[2 * l + 1] = cg_i32(g->c, n + n / 2 + l);
  }
  LLVMValueRef mlo = LLVMConstVector(lo, (unsigned)n), mhi = LLVMConstVector(hi, (unsigned)n);
  for (int round = 1; round < n; round *= 2) {
    for (int r = 0; r < n / 2; r++) {
      t[2 * r] = LLVMBuildShuffleVector(g->b, v[r], v[r + n / 2], mlo, "");
      t[2 * r + 1] = LLVMBuildShuffleVector(g->b, v[r], v[r + n / 2], mhi, "");
    }
    memcpy(v, t, sizeof(LLVMValueRef) * (size_t)n);
  }
}

/* void pack(ptr src, i64 sq, i64 sp, i64 q, i64 kc, ptr dst): the q x kc
 * matrix with element (i, p) at src[i sq + p sp] into micro-panels of w
 * rows (w = MR for A, NR for B): panel t holds rows [t w, t w + w), each
 * column p of it w floats at dst[t w kc + p w]; a panel's rows past q hold
 * values whose products the micro-kernel never stores. Either sq is 1 (the
 * w values of a column are contiguous: vector loads and stores) or sp is 1
 * (rows are contiguous: VL x VL blocks loaded by rows and transposed in
 * registers), as every matmul's strides are. */
static LLVMValueRef emit_pack(Gen *g, const char *name, int w) {
  Cg *c = g->c;
  const Blocking *k = &g->k;
  int vl = k->vl;
  LLVMTypeRef pt[] = {c->ptr, c->i64, c->i64, c->i64, c->i64, c->ptr};
  LLVMValueRef f = function(g, name, LLVMFunctionType(c->voidt, pt, 6, 0));
  static const int na[] = {0, 5};
  noalias(g, f, na, 2);
  noinline(g, f);
  LLVMValueRef src = LLVMGetParam(f, 0), sq = LLVMGetParam(f, 1), sp = LLVMGetParam(f, 2);
  LLVMValueRef q = LLVMGetParam(f, 3), kc = LLVMGetParam(f, 4), dst = LLVMGetParam(f, 5);
  Loop lt;
  LLVMValueRef t = loop_open(g, &lt, ci(g, 0), q, ci(g, w));
  LLVMValueRef rows = smin(g, ci(g, w), sub(g, q, t));
  LLVMValueRef s0 = at(g, src, mul(g, t, sq)), d0 = at(g, dst, mul(g, t, kc));
  LLVMValueRef isfull = LLVMBuildICmp(g->b, LLVMIntEQ, rows, ci(g, w), "");
  LLVMValueRef contig = LLVMBuildICmp(g->b, LLVMIntEQ, sq, ci(g, 1), "");
  LLVMBasicBlockRef next = LLVMAppendBasicBlockInContext(c->ctx, f, "panel.done");
  LLVMBasicBlockRef kind[2];
  static const char *names[] = {"contig.full", "contig.edge"};
  for (int j = 0; j < 2; j++)
    kind[j] = LLVMAppendBasicBlockInContext(c->ctx, f, names[j]);
  LLVMBasicBlockRef sb = LLVMAppendBasicBlockInContext(c->ctx, f, "strided");
  LLVMBasicBlockRef cb = LLVMAppendBasicBlockInContext(c->ctx, f, "contig");
  LLVMBuildCondBr(g->b, contig, cb, sb);
  LLVMPositionBuilderAtEnd(g->b, cb);
  LLVMBuildCondBr(g->b, isfull, kind[0], kind[1]);

  /* columns contiguous: each a few vectors, masked past q and past w */
  int nvec = (w + vl - 1) / vl;
  unsigned dalign = w % vl ? 4 : (unsigned)(4 * vl);
  for (int j = 0; j < 2; j++) {
    bool full = j == 0;
    LLVMPositionBuilderAtEnd(g->b, kind[j]);
    LLVMValueRef lmask[8], smask[8];
    for (int v = 0; v < nvec; v++) {
      lmask[v] = full ? NULL : lanes_below(g, (int64_t)v * vl, rows);
      smask[v] = (v + 1) * vl <= w ? NULL : lanes_below(g, (int64_t)v * vl, ci(g, w));
      if (lmask[v] && smask[v])
        lmask[v] = LLVMBuildAnd(g->b, lmask[v], smask[v], "");
      else if (!lmask[v] && smask[v])
        lmask[v] = smask[v];
    }
    Loop lp;
    LLVMValueRef p = loop_open(g, &lp, ci(g, 0), kc, ci(g, 1));
    LLVMValueRef s = at(g, s0, mul(g, p, sp)), d = at(g, d0, mul(g, p, ci(g, w)));
    for (int v = 0; v < nvec; v++) {
      LLVMValueRef sv = at(g, s, ci(g, v * vl)), dv = at(g, d, ci(g, v * vl));
      LLVMValueRef x = lmask[v] ? masked_load(g, sv, lmask[v]) : load(g, g->vec, sv, 4);
      if (smask[v])
        masked_store(g, x, dv, smask[v]);
      else
        store(g, x, dv, dalign);
    }
    loop_close(g, &lp);
    LLVMBuildBr(g->b, next);
  }

  /* rows contiguous (sp is 1): VL x VL blocks, rows past q read as the last */
  LLVMPositionBuilderAtEnd(g->b, sb);
  int nblk = (w + vl - 1) / vl;
  LLVMValueRef row[64];
  for (int r = 0; r < nblk * vl; r++)
    row[r] = at(g, s0, mul(g, smin(g, ci(g, r), sub(g, rows, ci(g, 1))), sq));
  LLVMValueRef bmask[8];
  for (int rb = 0; rb < nblk; rb++)
    bmask[rb] = (rb + 1) * vl <= w ? NULL : lanes_below(g, (int64_t)rb * vl, ci(g, w));
  Loop lp;
  LLVMValueRef p0 = loop_open(g, &lp, ci(g, 0), sub(g, kc, ci(g, vl - 1)), ci(g, vl));
  for (int rb = 0; rb < nblk; rb++) {
    LLVMValueRef v[64];
    for (int l = 0; l < vl; l++)
      v[l] = load(g, g->vec, at(g, row[rb * vl + l], p0), 4);
    transpose(g, v, vl);
    for (int l = 0; l < vl; l++) {
      LLVMValueRef d = at(g, d0, add(g, mul(g, add(g, p0, ci(g, l)), ci(g, w)), ci(g, rb * vl)));
      if (bmask[rb])
        masked_store(g, v[l], d, bmask[rb]);
      else
        store(g, v[l], d, dalign);
    }
  }
  loop_close(g, &lp);
  Loop lr;
  LLVMValueRef p = loop_open(g, &lr, mul(g, sdiv(g, kc, ci(g, vl)), ci(g, vl)), kc, ci(g, 1));
  LLVMValueRef d = at(g, d0, mul(g, p, ci(g, w)));
  for (int i = 0; i < w; i++)
    store(g, load(g, c->f32, at(g, row[i], p), 4), at(g, d, ci(g, i)), 4);
  loop_close(g, &lr);
  LLVMBuildBr(g->b, next);

  LLVMPositionBuilderAtEnd(g->b, next);
  loop_close(g, &lt);
  LLVMBuildRetVoid(g->b);
  return f;
}

/* ---- the slots and the entry ---- */

/* The fields of the environment the entry hands each slot. */
enum {
  E_A, E_B, E_C, E_BATCH, E_M, E_N, E_K, E_ARS, E_ACS, E_ABS, E_BRS, E_BCS, E_BBS, E_KBLOCK,
  E_EP, E_EPENV, E_PIECES, E_SPLITN, E_SLOTS, E_SCRATCH, E_SLOT_BYTES, E_APACK, E_KC, E_COUNT
};

static bool env_ptr(int k) {
  return k == E_A || k == E_B || k == E_C || k == E_EP || k == E_EPENV || k == E_SCRATCH;
}

static LLVMTypeRef env_type(Cg *c) {
  LLVMTypeRef ft[E_COUNT];
  for (int k = 0; k < E_COUNT; k++)
    ft[k] = env_ptr(k) ? c->ptr : c->i64;
  return LLVMStructTypeInContext(c->ctx, ft, E_COUNT, 0);
}

/* void slot(ptr env, i64 begin, i64 end): slots [begin, end) of the work. */
static LLVMValueRef emit_slot(Gen *g, LLVMValueRef kern, LLVMValueRef pack_a,
                              LLVMValueRef pack_b) {
  Cg *c = g->c;
  const Blocking *k = &g->k;
  LLVMTypeRef pt[] = {c->ptr, c->i64, c->i64};
  LLVMValueRef f = function(g, "gemm_slot", LLVMFunctionType(c->voidt, pt, 3, 0));
  LLVMTypeRef et = env_type(c);
  LLVMValueRef e[E_COUNT];
  for (int j = 0; j < E_COUNT; j++)
    e[j] = LLVMBuildLoad2(g->b, LLVMStructGetTypeAtIndex(et, (unsigned)j),
                          LLVMBuildStructGEP2(g->b, et, LLVMGetParam(f, 0), (unsigned)j, ""), "");
  LLVMValueRef m = e[E_M], n = e[E_N], kk = e[E_K], pieces = e[E_PIECES];
  LLVMValueRef items = mul(g, e[E_BATCH], pieces);
  LLVMValueRef split_n = LLVMBuildICmp(g->b, LLVMIntNE, e[E_SPLITN], ci(g, 0), "");
  LLVMValueRef len = LLVMBuildSelect(g->b, split_n, n, m, "");
  LLVMValueRef wq = LLVMBuildSelect(g->b, split_n, ci(g, k->nr), ci(g, k->mr), "");
  LLVMValueRef tiles = ceil_div(g, len, wq);

  Loop ls;
  LLVMValueRef s = loop_open(g, &ls, LLVMGetParam(f, 1), LLVMGetParam(f, 2), ci(g, 1));
  LLVMValueRef lo = sdiv(g, mul(g, s, items), e[E_SLOTS]);
  LLVMValueRef hi = sdiv(g, mul(g, add(g, s, ci(g, 1)), items), e[E_SLOTS]);
  LLVMValueRef part = mul(g, s, e[E_SLOT_BYTES]);
  LLVMValueRef bpack = LLVMBuildInBoundsGEP2(g->b, c->i8, e[E_SCRATCH], &part, 1, "");
  LLVMValueRef apack = LLVMBuildInBoundsGEP2(g->b, c->i8, bpack, &e[E_APACK], 1, "");
  Loop li;
  LLVMValueRef it = loop_open(g, &li, lo, hi, ci(g, 1));
  LLVMValueRef bi = sdiv(g, it, pieces);
  LLVMValueRef piece = sub(g, it, mul(g, bi, pieces));
  LLVMValueRef q0 = mul(g, sdiv(g, mul(g, piece, tiles), pieces), wq);
  LLVMValueRef q1 = mul(g, sdiv(g, mul(g, add(g, piece, ci(g, 1)), tiles), pieces), wq);
  q0 = smin(g, q0, len);
  q1 = smin(g, q1, len);
  LLVMValueRef m0 = LLVMBuildSelect(g->b, split_n, ci(g, 0), q0, "");
  LLVMValueRef m1 = LLVMBuildSelect(g->b, split_n, m, q1, "");
  LLVMValueRef n0 = LLVMBuildSelect(g->b, split_n, q0, ci(g, 0), "");
  LLVMValueRef n1 = LLVMBuildSelect(g->b, split_n, q1, n, "");
  LLVMValueRef a = at(g, e[E_A], mul(g, bi, e[E_ABS]));
  LLVMValueRef b = at(g, e[E_B], mul(g, bi, e[E_BBS]));
  LLVMValueRef cm = at(g, e[E_C], mul(g, bi, mul(g, m, n)));

  /* m0..m1 in blocks of at most MC, as equal as multiples of MR allow (512:
   * 2 x 252, not 504 + 8) */
  LLVMValueRef mlen = sub(g, m1, m0);
  LLVMValueRef mblk = ceil_div(g, mlen, ci(g, k->mc));
  mblk = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, mblk, ci(g, 0), ""), mblk,
                         ci(g, 1), "");
  LLVMValueRef mcs = round_up(g, ceil_div(g, mlen, mblk), k->mr);
  Loop ljc, lpc, lic, ljr, lir;
  LLVMValueRef jc = loop_open(g, &ljc, n0, n1, ci(g, k->nc));
  LLVMValueRef nc = smin(g, ci(g, k->nc), sub(g, n1, jc));
  LLVMValueRef pc = loop_open(g, &lpc, ci(g, 0), kk, e[E_KC]);
  LLVMValueRef kc = smin(g, e[E_KC], sub(g, kk, pc));
  LLVMValueRef boff = add(g, mul(g, pc, e[E_BRS]), mul(g, jc, e[E_BCS]));
  LLVMTypeRef packt = LLVMGlobalGetValueType(pack_b);
  LLVMValueRef pbarg[] = {at(g, b, boff), e[E_BCS], e[E_BRS], nc, kc, bpack};
  LLVMBuildCall2(g->b, packt, pack_b, pbarg, 6, "");
  LLVMValueRef ic = loop_open(g, &lic, m0, m1, mcs);
  LLVMValueRef mc = smin(g, mcs, sub(g, m1, ic));
  LLVMValueRef aoff = add(g, mul(g, ic, e[E_ARS]), mul(g, pc, e[E_ACS]));
  LLVMValueRef paarg[] = {at(g, a, aoff), e[E_ARS], e[E_ACS], mc, kc, apack};
  LLVMBuildCall2(g->b, packt, pack_a, paarg, 6, "");
  LLVMValueRef adds = LLVMBuildZExt(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, pc, ci(g, 0), ""),
                                    c->i32, "");
  LLVMValueRef jr = loop_open(g, &ljr, ci(g, 0), nc, ci(g, k->nr));
  LLVMValueRef nr = smin(g, ci(g, k->nr), sub(g, nc, jr));
  LLVMValueRef ir = loop_open(g, &lir, ci(g, 0), mc, ci(g, k->mr));
  LLVMValueRef mr = smin(g, ci(g, k->mr), sub(g, mc, ir));
  LLVMValueRef cij = at(g, cm, add(g, mul(g, add(g, ic, ir), n), add(g, jc, jr)));
  LLVMValueRef karg[] = {kc, at(g, apack, mul(g, ir, kc)), at(g, bpack, mul(g, jr, kc)), cij, n,
                         mr, nr, adds};
  LLVMBuildCall2(g->b, LLVMGlobalGetValueType(kern), kern, karg, 8, "");
  loop_close(g, &lir);
  /* the strip of C is whole after the last k block: its epilogue, while the
   * strip is in cache */
  LLVMValueRef whole = LLVMBuildICmp(g->b, LLVMIntSGE, add(g, pc, kc), kk, "");
  LLVMValueRef ep = LLVMBuildAnd(g->b, whole, LLVMBuildIsNotNull(g->b, e[E_EP], ""), "");
  LLVMBasicBlockRef epb = LLVMAppendBasicBlockInContext(c->ctx, f, "epilogue");
  LLVMBasicBlockRef epd = LLVMAppendBasicBlockInContext(c->ctx, f, "epilogue.done");
  LLVMBuildCondBr(g->b, ep, epb, epd);
  LLVMPositionBuilderAtEnd(g->b, epb);
  LLVMValueRef row = add(g, mul(g, bi, m), ic), col = add(g, jc, jr);
  LLVMTypeRef ept[] = {c->ptr, c->i64, c->i64, c->i64, c->i64};
  LLVMValueRef earg[] = {e[E_EPENV], row, add(g, row, mc), col, add(g, col, nr)};
  LLVMBuildCall2(g->b, LLVMFunctionType(c->voidt, ept, 5, 0), e[E_EP], earg, 5, "");
  LLVMBuildBr(g->b, epd);
  LLVMPositionBuilderAtEnd(g->b, epd);
  loop_close(g, &ljr);
  loop_close(g, &lic);
  loop_close(g, &lpc);
  loop_close(g, &ljc);
  loop_close(g, &li);
  loop_close(g, &ls);
  LLVMBuildRetVoid(g->b);
  return f;
}

/* i32 gemm(ptr ctx, ptr a, ptr b, ptr c, i64 batch, i64 m, i64 n, i64 k,
 *          i64 rs_a, i64 cs_a, i64 bs_a, i64 rs_b, i64 cs_b, i64 bs_b,
 *          i64 kblock, ptr ep, ptr ep_env):
 * the batch of products (bs_*: batch strides, 0 for an operand shared by
 * all); k in blocks of exactly kblock when it is positive, else of at most
 * KC (each block's products summed in registers from zero, then written to
 * C or added to it, in order); when ep is not null, ep(ep_env, r0, r1, c0,
 * c1) on each strip of rows [r0, r1) and columns [c0, c1) of C (the batch's
 * rows one after the other) once it is whole; returns a DtStatus. The parallel entry runs dtrt_threads(ctx) slots
 * through dtrt_parallel_for, the serial one a single slot on this thread
 * (and makes no reference to the pool). */
static LLVMValueRef emit_entry(Gen *g, const CgGemm *e, bool parallel) {
  Cg *c = g->c;
  const Blocking *k = &g->k;
  LLVMValueRef f = function(g, parallel ? "gemm" : "gemm_serial", e->type);
  LLVMValueRef ctx = LLVMGetParam(f, 0);
  LLVMValueRef batch = LLVMGetParam(f, 4), m = LLVMGetParam(f, 5), n = LLVMGetParam(f, 6);
  LLVMValueRef kk = LLVMGetParam(f, 7);
  LLVMTypeRef et = env_type(c);
  LLVMValueRef env = LLVMBuildAlloca(g->b, et, "env");
  LLVMValueRef slots = ci(g, 1), pieces = ci(g, 1);
  if (parallel) {
    LLVMTypeRef tt = LLVMFunctionType(c->i32, &c->ptr, 1, 0);
    LLVMValueRef nthr = LLVMBuildCall2(g->b, tt, cg_extern(c, "dtrt_threads", tt), &ctx, 1, "");
    slots = LLVMBuildSExt(g->b, nthr, c->i64, "");
    /* pieces = slots / gcd(batch, slots), by Euclid */
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
    LLVMBasicBlockRef eh = LLVMAppendBasicBlockInContext(c->ctx, f, "gcd");
    LLVMBasicBlockRef eb = LLVMAppendBasicBlockInContext(c->ctx, f, "gcd.step");
    LLVMBasicBlockRef ed = LLVMAppendBasicBlockInContext(c->ctx, f, "gcd.done");
    LLVMBuildBr(g->b, eh);
    LLVMPositionBuilderAtEnd(g->b, eh);
    LLVMValueRef x = LLVMBuildPhi(g->b, c->i64, "x"), y = LLVMBuildPhi(g->b, c->i64, "y");
    LLVMAddIncoming(x, &batch, &pre, 1);
    LLVMAddIncoming(y, &slots, &pre, 1);
    LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntNE, y, ci(g, 0), ""), eb, ed);
    LLVMPositionBuilderAtEnd(g->b, eb);
    LLVMValueRef r = LLVMBuildSRem(g->b, x, y, "");
    LLVMAddIncoming(x, &y, &eb, 1);
    LLVMAddIncoming(y, &r, &eb, 1);
    LLVMBuildBr(g->b, eh);
    LLVMPositionBuilderAtEnd(g->b, ed);
    pieces = sdiv(g, slots, x);
  }
  /* k in blocks of at most KC, as equal as multiples of 4 allow: 784 is
   * 4 x 196, not 3 x 256 + 16 */
  LLVMValueRef kce = round_up(g, ceil_div(g, kk, ceil_div(g, kk, ci(g, k->kc))), 4);
  LLVMValueRef kblock = LLVMGetParam(f, 1 + E_KBLOCK);
  kce = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, kblock, ci(g, 0), ""), kblock, kce,
                        "");
  /* a slot's panels: of a piece's share of the dimension cut, the whole
   * other one, at most a block of each */
  LLVMValueRef split_n = LLVMBuildICmp(g->b, LLVMIntSLT, m, n, "");
  LLVMValueRef len = LLVMBuildSelect(g->b, split_n, n, m, "");
  LLVMValueRef wq = LLVMBuildSelect(g->b, split_n, ci(g, k->nr), ci(g, k->mr), "");
  LLVMValueRef width = mul(g, ceil_div(g, ceil_div(g, len, wq), pieces), wq);
  LLVMValueRef mce = round_up(g, smin(g, ci(g, k->mc), m), k->mr);
  LLVMValueRef nce = round_up(g, smin(g, ci(g, k->nc), n), k->nr);
  mce = LLVMBuildSelect(g->b, split_n, mce, smin(g, ci(g, k->mc), width), "");
  nce = LLVMBuildSelect(g->b, split_n, smin(g, ci(g, k->nc), width), nce, "");
  LLVMValueRef bbytes = round_up(g, mul(g, mul(g, kce, nce), ci(g, 4)), 64);
  LLVMValueRef abytes = round_up(g, mul(g, mul(g, kce, mce), ci(g, 4)), 64);
  LLVMValueRef slot_bytes = add(g, bbytes, abytes);
  LLVMTypeRef st[] = {c->ptr, c->i64};
  LLVMTypeRef sft = LLVMFunctionType(c->ptr, st, 2, 0);
  LLVMValueRef sarg[] = {ctx, mul(g, slots, slot_bytes)};
  LLVMValueRef scratch = LLVMBuildCall2(g->b, sft, cg_extern(c, "dtrt_scratch", sft), sarg, 2, "");
  LLVMBasicBlockRef nomem = LLVMAppendBasicBlockInContext(c->ctx, f, "nomem");
  LLVMBasicBlockRef run = LLVMAppendBasicBlockInContext(c->ctx, f, "run");
  LLVMBuildCondBr(g->b, LLVMBuildIsNull(g->b, scratch, ""), nomem, run);
  LLVMPositionBuilderAtEnd(g->b, nomem);
  LLVMBuildRet(g->b, cg_i32(c, DT_ERR_NOMEM));
  LLVMPositionBuilderAtEnd(g->b, run);
  LLVMValueRef val[E_COUNT];
  for (int j = 0; j < E_PIECES; j++)
    val[j] = LLVMGetParam(f, (unsigned)j + 1);   /* the entry's params after ctx */
  val[E_PIECES] = pieces;
  val[E_SPLITN] = LLVMBuildZExt(g->b, split_n, c->i64, "");
  val[E_SLOTS] = slots;
  val[E_SCRATCH] = scratch;
  val[E_SLOT_BYTES] = slot_bytes;
  val[E_APACK] = bbytes;
  val[E_KC] = kce;
  for (int j = 0; j < E_COUNT; j++)
    LLVMBuildStore(g->b, val[j], LLVMBuildStructGEP2(g->b, et, env, (unsigned)j, ""));
  if (parallel) {
    LLVMTypeRef qt[] = {c->ptr, c->i64, c->ptr, c->ptr};
    LLVMTypeRef pft = LLVMFunctionType(c->voidt, qt, 4, 0);
    LLVMValueRef parg[] = {ctx, slots, e->slot, env};
    LLVMBuildCall2(g->b, pft, cg_extern(c, "dtrt_parallel_for", pft), parg, 4, "");
  } else {
    LLVMValueRef sl[] = {env, ci(g, 0), ci(g, 1)};
    LLVMBuildCall2(g->b, LLVMGlobalGetValueType(e->slot), e->slot, sl, 3, "");
  }
  LLVMBuildRet(g->b, cg_i32(c, 0));
  return f;
}

static Gen gen(Cg *c, CgGemm *e) {
  Gen g = {.c = c, .b = c->b, .cpu = e->cpu, .features = e->features};
  g.k = blocking(c);
  g.vec = LLVMVectorType(c->f32, (unsigned)g.k.vl);
  g.mask = LLVMVectorType(c->i1, (unsigned)g.k.vl);
  g.ivec = LLVMVectorType(c->i32, (unsigned)g.k.vl);
  return g;
}

/* The entry for the CPU of the device being lowered, serial or parallel,
 * made with the rest of its functions at first use. */
static LLVMValueRef entry(Cg *c, bool parallel, LLVMTypeRef *type) {
  const char *cpu = c->cpu ? c->cpu : "", *features = c->features ? c->features : "";
  CgGemm *e = c->gemm;
  while (e && (strcmp(e->cpu, cpu) || strcmp(e->features, features)))
    e = e->next;
  LLVMBasicBlockRef here = LLVMGetInsertBlock(c->b);
  if (!e) {
    e = arena_alloc(c->m->arena, sizeof *e);
    *e = (CgGemm){.cpu = cpu, .features = features, .next = c->gemm};
    c->gemm = e;
    Gen g = gen(c, e);
    LLVMValueRef kern = emit_kernel(&g);
    LLVMValueRef pack_a = emit_pack(&g, "gemm_pack_a", g.k.mr);
    LLVMValueRef pack_b = emit_pack(&g, "gemm_pack_b", g.k.nr);
    e->slot = emit_slot(&g, kern, pack_a, pack_b);
    LLVMTypeRef pt[1 + E_PIECES] = {c->ptr};
    for (int j = 0; j < E_PIECES; j++)
      pt[j + 1] = env_ptr(j) ? c->ptr : c->i64;
    e->type = LLVMFunctionType(c->i32, pt, COUNTOF(pt), 0);
  }
  if (!e->fn[parallel]) {
    Gen g = gen(c, e);
    e->fn[parallel] = emit_entry(&g, e, parallel);
  }
  LLVMPositionBuilderAtEnd(c->b, here);
  *type = e->type;
  return e->fn[parallel];
}

/* ---- the call ---- */

/* Products of fewer flops run on the calling thread: waking the pool costs
 * more than it saves. Cubes on 2 threads against 1 (the Xeon of
 * bench/matmul, best of 2000): 80^3 (1.0 Mflop) 12 us against 11 us, 96^3
 * (1.8 Mflop) 13 against 16, 112^3 (2.8 Mflop) 19 against 26, 128^3 24
 * against 36. */
#define PAR_FLOPS 2e6

/* Every matmul is the generated GEMM's unless -fmatmul=blas: a default
 * build's results and speed then do not depend on the kernels OpenBLAS
 * picks from its table of CPUs (Debian's 0.3.21 falls back to its Prescott
 * kernels on CPUs it does not know, five times slower than its SkylakeX
 * ones on an Emerald Rapids, with other roundings). Against OpenBLAS on the
 * Xeon above (bench/matmul's rule_* shapes, dtc's median time over
 * OpenBLAS's with the kernels it picks there, Prescott, and with its
 * SkylakeX kernels, 20 runs):
 *
 *   m x n x k            flops   dtc/Prescott  dtc/SkylakeX
 *   4 x 4 x 4              128       1.79          3.14
 *   6 x 7 x 5 (tb)         420       1.37          1.55
 *   8 x 8 x 8               1K       1.45          3.28
 *   12 x 12 x 12           3.5K      0.98          3.20
 *   16 x 16 x 16            8K       0.81          2.91
 *   24 x 24 x 24           28K       0.47          1.61
 *   64 x 64 x 64          0.5M       0.26          1.37
 *   128 x 128 x 128       4.2M       0.30          1.02
 *   1024 x 1 x 1024         2M       0.98          1.77
 *   1024 x 2 x 1024         4M       0.98          1.61
 *   1024 x 4 x 1024         8M       0.51          0.85
 *   1 x 1024 x 1024         2M       1.24          1.17
 *   2 x 1024 x 1024         4M       0.97          0.98
 *   64 x (16 x 16 x 16)   0.5M       0.49          2.70
 *   (the MLP's and GPT's products: 0.15-0.3 and 0.9-1.2, attention's 0.4-0.6)
 *
 * What OpenBLAS wins with good kernels (products under 16K flops, which take
 * under a microsecond either way, matrix-vector products, small cubes) it
 * loses with the kernels it picks for itself on a CPU it does not know. */
bool cg_gemm_wanted(const Cg *c, const Inst *x) { return cg_gemm_chosen(c->m, c->matmul, x); }

bool cg_gemm_chosen(const Module *mod, CgMatmul how, const Inst *x) {
  DTC_ASSERT(x->op == OP_matmul);
  if (ir_pieces(x))   /* a batch of the pieces, on matrices */
    return x->in[0]->type.rank == 2 && x->in[1]->type.rank == 2;
  if (mod->det_pieces > 1)
    return true;   /* the same bits on any thread count and any block of rows */
  return how == CG_MATMUL_DTC;
}

/* The length of the blocks k is summed in: the op's kblock; in
 * deterministic mode one block for a k of at most IR_DET_KBLOCK, whatever
 * the target's KC (a fold of pieces, fused or not, then adds the same
 * numbers in the same order); else 0, the target's blocking. */
static int64_t kblock(const Module *m, const Inst *x, int64_t k) {
  if (ir_attr(x, "kblock"))
    return ir_get_int(x, "kblock", 0);
  return m->det_pieces > 1 && k <= IR_DET_KBLOCK ? k : 0;
}

/* The products matmul x makes: batch of them, m x k by k x n each (the
 * rows of a batch folded into one matrix where they can be, a kfold's
 * leading dims into k), the operands' strides between products bs_a and
 * bs_b, and a and b their types (of a piece's block when x is in pieces). */
typedef struct Shape {
  Type a, b;
  int64_t batch, m, n, k, bs_a, bs_b, pieces;
} Shape;

static Shape shape_of(const Inst *x) {
  /* in pieces: a batch of the pieces, each on its block of the cut operands */
  Shape s = {.a = x->in[0]->type, .b = x->in[1]->type, .pieces = ir_pieces(x)};
  if (ir_piece_rows(x, 0))
    s.a.dim[0] = ir_piece_rows(x, 0);
  if (ir_piece_rows(x, 1))
    s.b.dim[0] = ir_piece_rows(x, 1);
  bool ta = ir_get_int(x, "ta", 0) != 0, tb = ir_get_int(x, "tb", 0) != 0;
  int ra = s.a.rank, rb = s.b.rank;
  s.m = s.a.dim[ra - 2 + ta], s.k = s.a.dim[ra - 1 - ta], s.n = s.b.dim[rb - 1 - tb];
  s.batch = s.pieces ? s.pieces : 1;
  if (ir_attr(x, "kfold")) {   /* [F.., k, m]^T @ [F.., k, n]: the rows F.. x k are k */
    for (int d = 0; d < ra - 2; d++)
      s.k *= s.a.dim[d];
    return s;
  }
  for (int d = 0; d < ra - 2; d++)
    s.batch *= s.a.dim[d];
  if (!s.batch || !s.m || !s.n || !s.k)
    return s;
  s.bs_a = ra > 2 ? s.m * s.k : 0, s.bs_b = rb > 2 ? s.k * s.n : 0;
  if (s.pieces) {
    DTC_ASSERT(ra == 2 && rb == 2);   /* determinize cuts the rows of matrices */
    s.bs_a = ir_piece_rows(x, 0) ? s.m * s.k : 0;
    s.bs_b = ir_piece_rows(x, 1) ? s.k * s.n : 0;
  } else if (rb == 2 && !ta) {   /* the batch's rows are one matrix */
    s.m *= s.batch;
    s.batch = 1;
    s.bs_a = 0;
  }
  return s;
}

static int64_t up(int64_t v, int64_t q) { return (v + q - 1) / q * q; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The scratch of one slot of a GEMM call of m x k by k x n products, k in
 * blocks of kc (0: the target's) on one thread (one piece): a block of B and
 * one of A, as the entry computes them. */
static int64_t slot_bytes(const Blocking *bk, int64_t m, int64_t n, int64_t k, int64_t kc) {
  if (!m || !n || !k)
    return 0;
  if (kc <= 0) {   /* k in blocks as equal as multiples of 4 allow */
    int64_t nblock = (k + bk->kc - 1) / bk->kc;
    kc = up((k + nblock - 1) / nblock, 4);
  }
  int64_t mc = up(min64(bk->mc, m), bk->mr), nc = up(min64(bk->nc, n), bk->nr);
  return up(kc * nc * 4, 64) + up(kc * mc * 4, 64);
}

bool cg_conv_gemm(CgMatmul how, const Inst *x) {
  return (x->op == OP_conv2d || x->op == OP_conv2d_grad_input ||
          x->op == OP_conv2d_grad_weight) &&
         how != CG_MATMUL_BLAS;
}

/* The dims of operand k of x (-1: its result). */
static DtTensor dims_of(const Inst *x, int k) {
  const Type *t = k < 0 ? &x->type : &x->in[k]->type;
  DtTensor r = {.rank = t->rank};
  for (int d = 0; d < t->rank; d++)
    r.dim[d] = t->dim[d];
  return r;
}

/* which operand (-1: the result) is x, w and y of each convolution's products */
static const struct {
  int op;
  DtConvKind kind;
  int x, w, y;
} conv[] = {{OP_conv2d, DT_CONV_FWD, 0, 1, -1},
            {OP_conv2d_grad_input, DT_CONV_DX, -1, 0, 1},
            {OP_conv2d_grad_weight, DT_CONV_DW, 0, -1, 1}};

/* The convolution x as the runtime sees it: its kind, the dims of its x, w
 * and y, its int attributes; false when x is not one of conv[]. */
static bool conv_of(const Inst *x, DtConvKind *kind, DtTensor t[3], DtAttrs *a) {
  for (int c = 0; c < COUNTOF(conv); c++)
    if ((int)x->op == conv[c].op) {
      *kind = conv[c].kind;
      t[0] = dims_of(x, conv[c].x), t[1] = dims_of(x, conv[c].w), t[2] = dims_of(x, conv[c].y);
      ir_kernel_attrs(x, a);
      return true;
    }
  return false;
}

/* Whether convolution x runs directly on this CPU: no products, no GEMM
 * scratch (dtrt_conv_direct). */
static bool conv_direct(const Inst *x) {
  DtConvKind kind;
  DtTensor t[3];
  DtAttrs a;
  return conv_of(x, &kind, t, &a) && dtrt_conv_direct(kind, &t[0], &t[1], &t[2], &a);
}

/* The most scratch a slot of convolution x's products takes: as
 * kernels_conv.c makes them, per group, on the columns of a chunk of the
 * batch (at most all of it, which bounds the chunk's), or without groups
 * the forward ones and dx's as a batch of one product per sample; none
 * when it runs directly. */
static int64_t conv_slot_bytes(const Blocking *bk, const Inst *x) {
  if (conv_direct(x))
    return 0;
  const Type *w = x->op == OP_conv2d ? &x->in[1]->type
                  : x->op == OP_conv2d_grad_input ? &x->in[0]->type : &x->type;
  const Type *y = x->op == OP_conv2d ? &x->type : &x->in[1]->type;
  int64_t groups = ir_get_int(x, "groups", 1);
  int64_t og = w->dim[0] / (groups > 0 ? groups : 1), k = w->dim[1] * w->dim[2] * w->dim[3];
  bool per_sample = groups == 1 && x->op != OP_conv2d_grad_weight;
  int64_t cols = (per_sample ? 1 : y->dim[0]) * y->dim[2] * y->dim[3];
  if (x->op == OP_conv2d)
    return slot_bytes(bk, og, cols, k, 0);
  if (x->op == OP_conv2d_grad_input)
    return slot_bytes(bk, k, cols, og, 0);
  return slot_bytes(bk, og, k, cols, 0);
}

void cg_gemm_tile(const CgTargets *ts, int dev, int *mr, int *nr) {
  const CgDevice *cd = &ts->dev[dev];
  Blocking bk = blocking_for(ts->t[cd->target].triple, cd->cpu, cd->features);
  *mr = bk.mr, *nr = bk.nr;
}

int64_t cg_gemm_scratch(const Module *m, int dev, CgMatmul how, const char *triple,
                        const char *cpu, const char *features) {
  Blocking bk = blocking_for(triple, cpu, features);
  int64_t most = 0;
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    if (f->device != dev)
      continue;
    for (int i = 0; i < f->inst.n; i++) {
      const Inst *x = f->inst.a[i];
      int64_t b = 0;
      if (x->op == OP_matmul && cg_gemm_chosen(m, how, x)) {
        Shape s = shape_of(x);
        b = s.batch ? slot_bytes(&bk, s.m, s.n, s.k, kblock(m, x, s.k)) : 0;
      } else if (cg_conv_gemm(how, x)) {
        b = conv_slot_bytes(&bk, x);
      }
      most = b > most ? b : most;
    }
  }
  return most;
}

int64_t cg_conv_scratch(const Module *m, int dev, CgMatmul how) {
  int64_t most = 0;
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    for (int i = 0; f->device == dev && i < f->inst.n; i++) {
      const Inst *x = f->inst.a[i];
      DtConvKind kind;
      DtTensor t[3];
      DtAttrs a;
      if (conv_of(x, &kind, t, &a)) {
        int64_t b = dtrt_conv_scratch_bytes(kind, &t[0], &t[1], &t[2], &a, cg_conv_gemm(how, x));
        most = b > most ? b : most;
      }
      bool ring = x->op == OP_ring_sdpa || x->op == OP_ring_sdpa_lse || x->op == OP_ring_sdpa_grad;
      if (x->op == OP_sdpa || x->op == OP_sdpa_lse || x->op == OP_sdpa_grad ||
          x->op == OP_sdpa_dmask || ring) {
        DtTensor q = dims_of(x, 0), kv = dims_of(x, 1);
        bool grad = x->op == OP_sdpa_grad || x->op == OP_sdpa_dmask || x->op == OP_ring_sdpa_grad;
        int n;
        const int64_t *sizes = ring ? ir_get_ints(x, "sizes", &n) : NULL;
        bool zig = ring && n > 1 && ir_get_int(x, "causal", 0);
        for (int k = 0; sizes && k < n; k++) {   /* a ring's steps meet every member's block */
          kv.dim[2] = sizes[k] > kv.dim[2] ? sizes[k] : kv.dim[2];
          for (int w = 0; zig && w < 2; w++) {   /* its zig-zag's pieces of queries */
            int64_t off, rows;
            dtrt_ring_piece(sizes, n, k, true, w, &off, &rows);
            q.dim[2] = k + w ? (rows > q.dim[2] ? rows : q.dim[2]) : rows;
          }
        }
        int64_t b = dtrt_sdpa_scratch_bytes(&q, &kv, grad);
        most = b > most ? b : most;
      }
    }
  }
  return most;
}

LLVMValueRef cg_gemm_entry(Cg *c) {
  LLVMTypeRef type;
  return entry(c, true, &type);
}

LLVMValueRef cg_gemm(CgFn *fn, const Inst *x, Inst **ep, int nep) {
  Cg *c = fn->c;
  Shape s = shape_of(x);
  bool ta = ir_get_int(x, "ta", 0) != 0, tb = ir_get_int(x, "tb", 0) != 0;
  int64_t batch = s.batch, m = s.m, n = s.n, k = s.k, bs_a = s.bs_a, bs_b = s.bs_b;
  LLVMValueRef out = cg_addr(fn, x);
  if (!batch || !m || !n || !k) {
    if (k == 0)
      LLVMBuildMemSet(c->b, out, LLVMConstInt(c->i8, 0, 0), cg_i64(c, batch * m * n * 4), 4);
    if (nep)
      cg_group(fn, ep, nep);
    return cg_i32(c, 0);
  }
  double flops = 2.0 * (double)batch * (double)m * (double)n * (double)k;
  LLVMValueRef epf = LLVMConstNull(c->ptr), epenv = LLVMConstNull(c->ptr);
  if (nep)
    epf = cg_group_tiles(fn, ep, nep, &epenv);
  LLVMTypeRef type;
  LLVMValueRef f = entry(c, flops >= PAR_FLOPS, &type);
  LLVMValueRef arg[] = {fn->ctx,
                        cg_addr(fn, x->in[0]),
                        cg_addr(fn, x->in[1]),
                        out,
                        cg_i64(c, batch),
                        cg_i64(c, m),
                        cg_i64(c, n),
                        cg_i64(c, k),
                        cg_i64(c, ta ? 1 : k),
                        cg_i64(c, ta ? m : 1),
                        cg_i64(c, bs_a),
                        cg_i64(c, tb ? 1 : n),
                        cg_i64(c, tb ? k : 1),
                        cg_i64(c, bs_b),
                        cg_i64(c, kblock(c->m, x, k)),
                        epf,
                        epenv};
  return LLVMBuildCall2(c->b, type, f, arg, COUNTOF(arg), "");
}

/* ---- the report ---- */

void cg_matmul_report(FILE *out, const Module *m, CgMatmul how) {
  static const char *const names[] = {"dtc", "blas"};
  static_assert(COUNTOF(names) == CG_MATMUL_BLAS + 1, "-fmatmul values");
  fprintf(out, "matmuls (-fmatmul=%s)\n", names[how]);
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    if (f->device > 0)   /* the other devices' copies lower alike */
      continue;
    for (int i = 0; i < f->inst.n; i++) {
      const Inst *x = f->inst.a[i];
      if (x->op != OP_matmul)
        continue;
      char a[128], b[128];
      bool dtc = cg_gemm_chosen(m, how, x);
      fprintf(out, "  @%s: %s%s x %s%s%s, %.3g MFLOP: %s", f->name,
              type_str(&x->in[0]->type, a, sizeof a), ir_get_int(x, "ta", 0) ? "^T" : "",
              type_str(&x->in[1]->type, b, sizeof b), ir_get_int(x, "tb", 0) ? "^T" : "",
              ir_attr(x, "kfold") ? " (leading dims folded into k)" : "", ir_flops(x) / 1e6,
              dtc ? "dtc" : "OpenBLAS");
      const char *sep = dtc ? ", epilogue " : ", then ";
      for (int j = i + 1; x->fuse && j < f->inst.n && f->inst.a[j]->fuse == x->fuse; j++)
        if (ir_ops[f->inst.a[j]->op].kind == K_ELEM) {
          fprintf(out, "%s%s", sep, ir_ops[f->inst.a[j]->op].name);
          sep = " ";
        }
      if (x->loc.file)
        fprintf(out, " (%s:%d:%d)", x->loc.file->name, x->loc.line, x->loc.col);
      fputc('\n', out);
    }
  }
}
