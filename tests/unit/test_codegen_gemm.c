/* test_codegen_gemm.c: the generated matmul (codegen/gemm.c) against a plain
 * triple loop accumulating in double. Each module is IR text, one output per
 * matmul of its inputs, parsed and taken through the whole pipeline
 * (passes_run, cg_emit with -fmatmul=dtc), linked with
 * test_codegen_harness.c and libdtrt and run, so the code tested is the code
 * dtc generates. Shapes: every m, n, k of 1, 3, 17, 63 and larger ones up to
 * 1023 (past each of the block sizes KC, MC and NC), non-square, under each
 * ta and tb; batched products, 4-D ones, a 2-D right operand shared by a
 * batch; for this machine's CPU (on the default number of threads, on 1, 3
 * and 7, which must all give the same bits) and, on x86, for the 256-bit and
 * 128-bit micro-kernels (-mcpu=haswell, -mcpu=x86-64). An element
 * may differ from the reference by (k + 2) 2^-23 sum_p |a_ip b_pj|, a small
 * multiple of float's rounding over k terms. A product with `kblock` (k
 * summed in blocks of that length, deterministic mode's) must equal, bit
 * for bit where the micro-kernel fuses multiply-adds, a float loop that sums
 * each block from zero with fmaf in order of p and adds the blocks in order.
 * A product with `kfold` ([F, k, m]^T @ [F, k, n]) against the same loop
 * over its F k rows.
 * Also: which matmuls -fmatmul sends where, and code for AArch64. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_codegen.h"

enum { MAX_CASES = 64, MAX_INPUTS = 96 };

/* One matmul: op(A) [..., m, k] times op(B) [..., k, n]; B has batch dims
 * only when bbatch (else it is 2-D and shared by A's batch). */
typedef struct Case {
  int nb, batch[2];       /* A's (and C's) batch dims */
  bool bbatch;
  int m, n, k, ta, tb;
  int kblock;             /* > 0: the matmul's kblock */
  int fold;               /* > 0: A [fold, k/fold, m] and B [fold, k/fold, n], kfold = 1 */
  int ep;                 /* the output: 0 the product C; EP_BIAS_RELU relu(C + e[n]);
                             EP_SCALE C * e - 0.5, e of C's shape */
} Case;

enum { EP_BIAS_RELU = 1, EP_SCALE };

/* A module of cases, its inputs shared by shape. */
typedef struct Mod {
  Case c[MAX_CASES];
  int n;
  char shape[MAX_INPUTS][64];   /* of each input, "5,17,63" */
  int ninput;
  int a[MAX_CASES], b[MAX_CASES];   /* input index of each case's operands */
  int e[MAX_CASES];                 /* and of its epilogue's, when it has one */
} Mod;

static uint64_t rng = 0x2545f4914f6cdd1du;

static float uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static int64_t dims_elems(const char *shape) {
  int64_t n = 1;
  for (const char *p = shape; *p;) {
    n *= strtoll(p, (char **)&p, 10);
    if (*p == ',')
      p++;
  }
  return n;
}

static int input(Mod *md, const char *shape) {
  for (int k = 0; k < md->ninput; k++)
    if (!strcmp(md->shape[k], shape))
      return k;
  assert_true(md->ninput < MAX_INPUTS);
  snprintf(md->shape[md->ninput], sizeof md->shape[0], "%s", shape);
  return md->ninput++;
}

static void batch_prefix(const Case *c, char *buf, size_t len) {
  buf[0] = 0;
  for (int d = 0; d < c->nb; d++)
    snprintf(buf + strlen(buf), len - strlen(buf), "%d,", c->batch[d]);
}

static void add_case(Mod *md, Case c) {
  assert_true(md->n < MAX_CASES);
  char lead[32], s[64];
  batch_prefix(&c, lead, sizeof lead);
  snprintf(s, sizeof s, "%s%d,%d", lead, c.ta ? c.k : c.m, c.ta ? c.m : c.k);
  if (c.fold)   /* the same rows in memory, k's split over the first dim */
    snprintf(s, sizeof s, "%d,%d,%d", c.fold, c.k / c.fold, c.m);
  md->a[md->n] = input(md, s);
  snprintf(s, sizeof s, "%s%d,%d", c.bbatch ? lead : "", c.tb ? c.n : c.k, c.tb ? c.k : c.n);
  if (c.fold)
    snprintf(s, sizeof s, "%d,%d,%d", c.fold, c.k / c.fold, c.n);
  md->b[md->n] = input(md, s);
  if (c.ep == EP_BIAS_RELU)
    snprintf(s, sizeof s, "%d", c.n);
  else
    snprintf(s, sizeof s, "%s%d,%d", lead, c.m, c.n);
  md->e[md->n] = c.ep ? input(md, s) : -1;
  md->c[md->n++] = c;
}

static Case plain(int m, int n, int k, int ta, int tb) {
  return (Case){.m = m, .n = n, .k = k, .ta = ta, .tb = tb};
}

static const char *ir_text(const Mod *md, const char *name) {
  static char text[1 << 16];
  size_t at = 0;
  at += (size_t)snprintf(text + at, sizeof text - at, "module %s\n", name);
  for (int k = 0; k < md->ninput; k++)
    at += (size_t)snprintf(text + at, sizeof text - at, "input x%d : f32[%s]\n", k, md->shape[k]);
  at += (size_t)snprintf(text + at, sizeof text - at, "func @forward {\n");
  for (int k = 0; k < md->ninput; k++)
    at += (size_t)snprintf(text + at, sizeof text - at,
                           "  %%x%d = load {global = \"x%d\"} : f32[%s]\n", k, k, md->shape[k]);
  for (int i = 0; i < md->n; i++) {
    const Case *c = &md->c[i];
    char lead[32];
    batch_prefix(c, lead, sizeof lead);
    char kb[32] = "";
    if (c->kblock)
      snprintf(kb, sizeof kb, ", kblock = %d", c->kblock);
    if (c->fold)
      snprintf(kb, sizeof kb, ", kfold = 1");
    at += (size_t)snprintf(text + at, sizeof text - at,
                           "  %%c%d = matmul %%x%d, %%x%d {ta = %d, tb = %d%s} : f32[%s%d,%d]\n", i,
                           md->a[i], md->b[i], c->ta, c->tb, kb, lead, c->m, c->n);
    const char *out = "c";
    if (c->ep == EP_BIAS_RELU)
      at += (size_t)snprintf(text + at, sizeof text - at,
                             "  %%s%d = add %%c%d, %%x%d : f32[%s%d,%d]\n"
                             "  %%r%d = relu %%s%d : f32[%s%d,%d]\n",
                             i, i, md->e[i], lead, c->m, c->n, i, i, lead, c->m, c->n);
    else if (c->ep == EP_SCALE)
      at += (size_t)snprintf(text + at, sizeof text - at,
                             "  %%s%d = mul %%c%d, %%x%d : f32[%s%d,%d]\n"
                             "  %%h%d = const {value = 0.5} : f32[]\n"
                             "  %%r%d = sub %%s%d, %%h%d : f32[%s%d,%d]\n",
                             i, i, md->e[i], lead, c->m, c->n, i, i, i, i, lead, c->m, c->n);
    if (c->ep)
      out = "r";
    at += (size_t)snprintf(text + at, sizeof text - at, "  output %%%s%d {name = \"c%d\"}\n",
                           out, i, i);
  }
  at += (size_t)snprintf(text + at, sizeof text - at, "}\n");
  assert_true(at < sizeof text);
  return text;
}

/* Parses text and runs the pipeline into t (ct_init's module replaced). */
static void parse_into(CT *t, const char *text) {
  t->m = ir_parse(t->a, src_from_string(t->a, "gemm.ir", text), &t->d);
  if (!t->m)
    fail_msg("ir_parse: %s", ct_log(t));
  t->m->epilogues = true;   /* dtc -fepilogue: the epilogues() cases */
  ct_passes(t);
}

static const char *emit(CT *t, const char *emit, const char *target, const char *cpu,
                        CgMatmul how) {
  const char *ext = !strcmp(emit, "llvm") ? "ll" : "o";
  CgOptions o = {.emit = emit, .target = target, .cpu = cpu, .opt_level = 2, .matmul = how,
                 .verify = true};
  o.output = arena_printf(t->a, "%s/%s.%s", t->dir, t->m->name, ext);
  if (!cg_emit(t->m, &o, &t->d))
    fail_msg("cg_emit: %s", ct_log(t));
  return o.output;
}

static void w32(FILE *f, int32_t v) { assert_int_equal(fwrite(&v, 4, 1, f), 1); }
static void w64(FILE *f, int64_t v) { assert_int_equal(fwrite(&v, 8, 1, f), 1); }

/* Element (i, j) of product q of case c as the generated GEMM sums it with
 * kblock: each block from zero by fused multiply-adds in order of p, the
 * blocks added in order. */
static float blocked(const Case *c, const float *aq, const float *bq, int64_t i, int64_t j) {
  int64_t m = c->m, n = c->n, k = c->k;
  float sum = 0;
  for (int64_t p0 = 0; p0 < k; p0 += c->kblock) {
    float acc = 0;
    for (int64_t p = p0; p < p0 + c->kblock; p++)
      acc = fmaf(c->ta ? aq[p * m + i] : aq[i * k + p], c->tb ? bq[j * k + p] : bq[p * n + j], acc);
    sum = p0 ? sum + acc : acc;
  }
  return sum;
}

/* The worst |got - ref| / tolerance of case c; with a kblock on a target
 * that fuses multiply-adds (fused), any difference from blocked() is
 * infinitely many tolerances. */
static double check_case(const Case *c, const float *a, const float *b, const float *e,
                         const float *got, bool fused) {
  int64_t nbatch = 1;
  for (int d = 0; d < c->nb; d++)
    nbatch *= c->batch[d];
  int64_t m = c->m, n = c->n, k = c->k, sa = m * k, sb = c->bbatch ? k * n : 0;
  double worst = 0;
  for (int64_t q = 0; q < nbatch; q++) {
    const float *aq = a + q * sa, *bq = b + q * sb;
    const float *gq = got + q * m * n, *eq = c->ep == EP_SCALE ? e + q * m * n : e;
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        double s = 0, abs = 0;
        for (int64_t p = 0; p < k; p++) {
          double x = c->ta ? aq[p * m + i] : aq[i * k + p];
          double y = c->tb ? bq[j * k + p] : bq[p * n + j];
          s += x * y;
          abs += fabs(x * y);
        }
        double tol = (double)(k + 2) * ldexp(1, -23) * abs + 1e-30;
        if (c->ep == EP_BIAS_RELU) {   /* one more rounding, and relu's kink */
          tol += ldexp(1, -23) * (fabs(s) + fabs(eq[j]));
          s = fmax(s + eq[j], 0);
        } else if (c->ep == EP_SCALE) {
          double x = eq[i * n + j];
          tol = tol * fabs(x) + ldexp(1, -22) * (fabs(s * x) + 0.5) + 1e-30;
          s = s * x - 0.5;
        }
        double r = fabs(gq[i * n + j] - s) / tol;
        if (c->kblock && fused && gq[i * n + j] != blocked(c, aq, bq, i, j))
          r = INFINITY;
        if (!(r <= worst))
          worst = r;
      }
  }
  return worst;
}

/* Whether the micro-kernel for cpu (NULL: this machine's) fuses its
 * multiply-adds: AArch64's and x86's with FMA, not x86-64's 128-bit one. */
static bool fuses(const char *cpu) {
#if defined(__x86_64__)
  if (cpu)
    return !strcmp(cpu, "haswell");
  __builtin_cpu_init();
  return __builtin_cpu_supports("fma");
#else
  (void)cpu;
  return true;
#endif
}

/* Compiles module md for cpu (NULL: this machine's), runs it under each
 * thread count of threads (a list of DTRT_NUM_THREADS values, "" for the
 * default) and checks every output. */
static void run_mod(const Mod *md, const char *name, const char *cpu, const char *const *threads,
                    int nthreads) {
  CT t;
  ct_init(&t, name);
  parse_into(&t, ir_text(md, name));
  /* each epilogue joined its product: the GEMM runs it on C's strips */
  Func *fwd = ir_find_func(t.m, "forward");
  for (int k = 0; k < fwd->inst.n; k++) {
    const Inst *x = fwd->inst.a[k];
    if (x->op == OP_matmul && md->c[atoi(x->name + 1)].ep && !x->fuse)
      fail_msg("%s: matmul %%%s heads no group", name, x->name);
  }
  const char *obj = emit(&t, "obj", NULL, cpu, CG_MATMUL_DTC);
  const char *exe = arena_printf(t.a, "%s/run", t.dir);
  if (ct_sh("%s -O1 %s -DCREATE=%s_create -I%s %s %s -o %s %s", DTC_TEST_CC, DTC_TEST_CFLAGS, name,
            DTC_TEST_RUNTIME, DTC_TEST_HARNESS, obj, exe, DTC_TEST_LIBS))
    fail_msg("cannot link the harness");

  float *data[MAX_INPUTS];
  const char *inpath = arena_printf(t.a, "%s/in.bin", t.dir);
  const char *outpath = arena_printf(t.a, "%s/out.bin", t.dir);
  FILE *f = fopen(inpath, "wb");
  assert_non_null(f);
  w32(f, 0);
  w32(f, md->ninput);
  for (int k = 0; k < md->ninput; k++) {
    int64_t n = dims_elems(md->shape[k]);
    data[k] = malloc((size_t)n * sizeof(float) + 4);
    for (int64_t i = 0; i < n; i++)
      data[k][i] = uniform();
    w64(f, n);
    assert_int_equal(fwrite(data[k], 4, (size_t)n, f), (size_t)n);
  }
  w32(f, md->n);
  int64_t out_elems[MAX_CASES];
  for (int i = 0; i < md->n; i++) {
    const Case *c = &md->c[i];
    out_elems[i] = (int64_t)c->m * c->n;
    for (int d = 0; d < c->nb; d++)
      out_elems[i] *= c->batch[d];
    w64(f, out_elems[i]);
  }
  w32(f, 0);
  w32(f, 0);
  assert_int_equal(fclose(f), 0);

  char *first = NULL;
  size_t first_len = 0;
  for (int r = 0; r < nthreads; r++) {
    const char *env = *threads[r] ? arena_printf(t.a, "DTRT_NUM_THREADS=%s ", threads[r]) : "";
    if (ct_sh("%s%s %s %s", env, exe, inpath, outpath))
      fail_msg("%s: the harness failed", name);
    size_t len;
    char *res = ct_read(outpath, &len), *p = res;
    assert_non_null(res);
    if (!first) {
      first = res;
      first_len = len;
    } else if (len != first_len || memcmp(res, first, len)) {
      fail_msg("%s: the results on %s threads differ from those on %s", name, threads[r],
               *threads[0] ? threads[0] : "the default number of");
    }
    double worst = 0;
    for (int i = 0; i < md->n; i++) {
      const Case *c = &md->c[i];
      double e = check_case(c, data[md->a[i]], data[md->b[i]], c->ep ? data[md->e[i]] : NULL,
                            (const float *)p, fuses(cpu));
      if (e > 1)
        fail_msg("%s (cpu %s, threads %s): case %d, batch %d [x%d] m %d n %d k %d ta %d tb %d: "
                 "an element is %.3g tolerances off", name, cpu ? cpu : "host",
                 *threads[r] ? threads[r] : "default", i, c->nb ? c->batch[0] : 1,
                 c->nb > 1 ? c->batch[1] : 1, c->m, c->n, c->k, c->ta, c->tb, e);
      worst = fmax(worst, e);
      p += out_elems[i] * 4;
    }
    assert_int_equal((size_t)(p - res), len);
    printf("%s: cpu %s, threads %s: %d matmuls, worst error %.3g of the tolerance\n", name,
           cpu ? cpu : "host", *threads[r] ? threads[r] : "default", md->n, worst);
    if (res != first)
      free(res);
  }
  free(first);
  for (int k = 0; k < md->ninput; k++)
    free(data[k]);
  ct_free(&t);
}

/* The CPUs whose code this machine runs: its own, and on x86 the 256-bit
 * (when it has AVX2 and FMA) and 128-bit micro-kernels. */
static int cpus(const char **cpu) {
  int n = 0;
  cpu[n++] = NULL;
#if defined(__x86_64__)
  cpu[n++] = "x86-64";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    cpu[n++] = "haswell";
#endif
  return n;
}

static const char *const host_threads[] = {"", "1", "3", "7"};
static const char *const one_run[] = {""};

static void run_all_cpus(const Mod *md, const char *name) {
  const char *cpu[4];
  int n = cpus(cpu);
  for (int k = 0; k < n; k++)
    run_mod(md, name, cpu[k], cpu[k] ? one_run : host_threads, cpu[k] ? 1 : 4);
}

/* Every m, n, k of 1, 3, 17, 63, one module per ta and tb. */
static void small_shapes(void **state) {
  (void)state;
  static const int dim[] = {1, 3, 17, 63};
  for (int t = 0; t < 4; t++) {
    static Mod md;
    memset(&md, 0, sizeof md);
    for (int i = 0; i < 4; i++)
      for (int j = 0; j < 4; j++)
        for (int p = 0; p < 4; p++)
          add_case(&md, plain(dim[i], dim[j], dim[p], t & 1, t >> 1));
    char name[32];
    snprintf(name, sizeof name, "small%d", t);
    run_all_cpus(&md, name);
  }
}

/* Larger and non-square, past KC (k 1023), MC (m 1023) and NC (n 4111). */
static void large_shapes(void **state) {
  (void)state;
  static const int shape[][3] = {{255, 1023, 17}, {1023, 255, 63}, {63, 17, 1023},
                                 {1023, 3, 255},  {17, 1023, 1023}, {255, 255, 1023},
                                 {1, 1023, 1023}, {1023, 1, 255},  {3, 4111, 5}};
  static Mod md;
  memset(&md, 0, sizeof md);
  for (int s = 0; s < COUNTOF(shape); s++)
    for (int t = 0; t < 4; t++)
      add_case(&md, plain(shape[s][0], shape[s][1], shape[s][2], t & 1, t >> 1));
  run_all_cpus(&md, "large");
}

/* Batched products (3-D, 4-D, attention's 64 of 128 x 128 x 64), and a 2-D
 * right operand shared by a batch, under each ta and tb. */
static void batched(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  for (int t = 0; t < 4; t++) {
    add_case(&md, (Case){.nb = 1, .batch = {5}, .bbatch = true, .m = 17, .n = 33, .k = 63,
                         .ta = t & 1, .tb = t >> 1});
    add_case(&md, (Case){.nb = 2, .batch = {2, 3}, .bbatch = true, .m = 15, .n = 29, .k = 255,
                         .ta = t & 1, .tb = t >> 1});
    add_case(&md, (Case){.nb = 2, .batch = {3, 4}, .bbatch = false, .m = 17, .n = 255, .k = 63,
                         .ta = t & 1, .tb = t >> 1});
    add_case(&md, (Case){.nb = 1, .batch = {1}, .bbatch = false, .m = 3, .n = 5, .k = 7,
                         .ta = t & 1, .tb = t >> 1});
  }
  add_case(&md, (Case){.nb = 1, .batch = {64}, .bbatch = true, .m = 128, .n = 128, .k = 64});
  add_case(&md, (Case){.nb = 1, .batch = {64}, .bbatch = true, .m = 128, .n = 64, .k = 128,
                       .ta = 1});
  run_all_cpus(&md, "batched");
}

/* k in blocks of kblock (deterministic mode's folds of pieces as one
 * product): blocks not a multiple of 4, past KC (500 and one block of 700),
 * of the batch's rows (ta), under each ta and tb, and in a batch. */
static void kblocks(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  for (int t = 0; t < 4; t++) {
    add_case(&md, (Case){.m = 17, .n = 33, .k = 4 * 98, .ta = t & 1, .tb = t >> 1, .kblock = 98});
    add_case(&md, (Case){.m = 64, .n = 40, .k = 3 * 500, .ta = t & 1, .tb = t >> 1, .kblock = 500});
    add_case(&md, (Case){.m = 30, .n = 70, .k = 700, .ta = t & 1, .tb = t >> 1, .kblock = 700});
  }
  add_case(&md, (Case){.m = 256, .n = 200, .k = 8 * 32, .ta = 1, .kblock = 32});
  add_case(&md, (Case){.nb = 1, .batch = {3}, .bbatch = true, .m = 9, .n = 20, .k = 6 * 7,
                       .kblock = 7});
  run_all_cpus(&md, "kblock");
}

/* kfold: [F, k, m]^T @ [F, k, n], the rows of every F summed with k, as one
 * product of [F k, m]^T @ [F k, n] (a weight's gradient over a split
 * sequence, passes/seqflat.c): edge tiles, F k past KC, F of 1. */
static void folded(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  add_case(&md, (Case){.m = 64, .n = 96, .k = 8 * 32, .ta = 1, .fold = 8});
  add_case(&md, (Case){.m = 5, .n = 7, .k = 3 * 17, .ta = 1, .fold = 3});
  add_case(&md, (Case){.m = 33, .n = 40, .k = 2 * 500, .ta = 1, .fold = 2});
  add_case(&md, (Case){.m = 17, .n = 3, .k = 63, .ta = 1, .fold = 1});
  run_all_cpus(&md, "kfold");
}

/* Epilogues run by the GEMM on each strip of C: a bias and relu, and an
 * elementwise product with a tensor of C's shape and a constant, on edge
 * tiles, past MC and NC, split over threads (by rows and by columns), on
 * batches and on the batch's rows made one matrix, under each ta and tb. */
static void epilogues(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  for (int t = 0; t < 4; t++)
    for (int ep = EP_BIAS_RELU; ep <= EP_SCALE; ep++) {
      add_case(&md, (Case){.m = 17, .n = 33, .k = 63, .ta = t & 1, .tb = t >> 1, .ep = ep});
      add_case(&md, (Case){.m = 300, .n = 70, .k = 129, .ta = t & 1, .tb = t >> 1, .ep = ep});
      add_case(&md, (Case){.m = 40, .n = 4111, .k = 20, .ta = t & 1, .tb = t >> 1, .ep = ep});
      add_case(&md, (Case){.nb = 1, .batch = {3}, .bbatch = true, .m = 15, .n = 29, .k = 31,
                           .ta = t & 1, .tb = t >> 1, .ep = ep});
      add_case(&md, (Case){.nb = 1, .batch = {5}, .m = 37, .n = 45, .k = 50, .ep = ep});
    }
  add_case(&md, (Case){.m = 1, .n = 1, .k = 7, .ep = EP_BIAS_RELU});
  add_case(&md, (Case){.m = 3, .n = 5, .k = 1, .ep = EP_SCALE});
  run_all_cpus(&md, "epilogue");
}

static bool has(const char *text, const char *what) { return strstr(text, what) != NULL; }

/* -fmatmul=dtc (the default) makes every matmul a call of the generated
 * GEMM, =blas one of dtrt_k_matmul; a small product calls the serial entry,
 * which never mentions the thread pool. */
static void lowering_choice(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  add_case(&md, plain(256, 1024, 784, 0, 0));
  add_case(&md, plain(6, 7, 5, 0, 1));
  const char *text = ir_text(&md, "choice");
  static const CgMatmul how[] = {CG_MATMUL_DTC, CG_MATMUL_BLAS};
  for (int h = 0; h < 2; h++) {
    CT t;
    ct_init(&t, "choice");
    parse_into(&t, text);
    char *ir = ct_read(emit(&t, "llvm", NULL, NULL, how[h]), NULL);
    assert_non_null(ir);
    bool gemm = has(ir, "@dtc.gemm_kernel."), blas = has(ir, "@dtrt_k_matmul(");
    if (how[h] == CG_MATMUL_DTC)
      assert_true(gemm && !blas);
    else
      assert_true(blas && !gemm && !has(ir, "dtc.gemm"));
    free(ir);
    ct_free(&t);
  }
  memset(&md, 0, sizeof md);
  add_case(&md, plain(6, 7, 5, 0, 1));
  CT t;
  ct_init(&t, "small");
  parse_into(&t, ir_text(&md, "small"));
  char *ir = ct_read(emit(&t, "llvm", NULL, NULL, CG_MATMUL_DTC), NULL);
  assert_true(has(ir, "@dtc.gemm_kernel.") && !has(ir, "dtrt_parallel_for"));
  free(ir);
  ct_free(&t);
}

/* Each micro-kernel verifies and compiles for its targets, AArch64's too. */
static void other_targets(void **state) {
  (void)state;
  static Mod md;
  memset(&md, 0, sizeof md);
  add_case(&md, plain(100, 70, 300, 1, 1));
  add_case(&md, (Case){.nb = 1, .batch = {4}, .bbatch = true, .m = 9, .n = 40, .k = 3});
  static const struct {
    const char *target, *cpu, *tile;
  } tg[] = {
      {"aarch64-unknown-linux-gnu", NULL, "@llvm.fma.v4f32("},
      {"aarch64-unknown-linux-gnu", "neoverse-n1", "@llvm.fma.v4f32("},
      {"x86_64-unknown-linux-gnu", "skylake-avx512", "@llvm.fma.v16f32("},
      {"x86_64-unknown-linux-gnu", "znver3", "@llvm.fma.v8f32("},
      {"x86_64-unknown-linux-gnu", "sandybridge", "@llvm.fmuladd.v8f32("},
      {"x86_64-unknown-linux-gnu", "x86-64", "@llvm.fmuladd.v4f32("},
  };
  for (int k = 0; k < COUNTOF(tg); k++) {
    CT t;
    ct_init(&t, "tgt");
    parse_into(&t, ir_text(&md, "tgt"));
    char *ir = ct_read(emit(&t, "llvm", tg[k].target, tg[k].cpu, CG_MATMUL_DTC), NULL);
    if (!has(ir, tg[k].tile))
      fail_msg("%s %s: no '%s' in the generated GEMM", tg[k].target, tg[k].cpu, tg[k].tile);
    free(ir);
    emit(&t, "obj", tg[k].target, tg[k].cpu, CG_MATMUL_DTC);
    ct_free(&t);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(small_shapes),    cmocka_unit_test(large_shapes),
      cmocka_unit_test(batched),         cmocka_unit_test(kblocks),
      cmocka_unit_test(folded),
      cmocka_unit_test(lowering_choice), cmocka_unit_test(epilogues),
      cmocka_unit_test(other_targets),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
