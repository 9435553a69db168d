/* test_codegen_loop.c: loops (repeat, docs/IR.md "Loops") compiled to
 * objects, linked with test_codegen_harness.c and libdtrt, and run. Each
 * looped program is checked against the same program written out by hand
 * (unrolled into plain insts, its stacked params cut by slice), compiled and
 * run alike: their outputs must be equal bit for bit. A dropout in a body
 * is checked against dtrt_k_dropout called here with each iteration's step
 * ir_loop_step(s, i). The LLVM module of a loop must not grow with n.
 * Per-device loops with collectives in their bodies run on a mesh of one
 * device against the global program, and under mpiexec on two ranks, also
 * with a kernel failing on one rank inside a body or before a loop, which
 * must not leave the other rank waiting in a collective; likewise a
 * pipeline stage failing inside its loop between its send and bcast. The
 * same again with every function, bodies too, cut into parts of one
 * statement (CgOptions.part_ops). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test_codegen.h"

static void w32(FILE *f, int32_t v) { assert_int_equal(fwrite(&v, 4, 1, f), 1); }
static void w64(FILE *f, int64_t v) { assert_int_equal(fwrite(&v, 8, 1, f), 1); }

/* The data of input global k: the same in every program that declares it
 * at the same index. */
static void input_data(int k, float *x, int64_t n) {
  uint64_t r = 88172645463325252u ^ (uint64_t)(k + 1) * 0x9e3779b97f4a7c15u;
  for (int64_t i = 0; i < n; i++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    x[i] = (float)((double)(r >> 11) / 9007199254740992.0 * 2 - 1);
  }
}

/* Parses IR text into t (its module replaces ct_init's), runs the
 * pipeline and checks groups and plans; fails the test with the
 * diagnostics otherwise. */
static void parse_ir(CT *t, const char *name, const char *ir) {
  ct_init(t, name);
  const SrcFile *src = src_from_string(t->a, arena_printf(t->a, "%s.ir", name), ir);
  t->m = ir_parse(t->a, src, &t->d);
  if (!t->m || !ir_verify(t->m, &t->d) || !passes_run(t->m, &t->d, NULL, NULL))
    fail_msg("%s:\n%s\n%s", name, ct_log(t), ir);
  for (int k = 0; k < t->m->func.n; k++) {
    ct_check_groups(t->m->func.a[k]);
    ct_check_plan(t->m->func.a[k]);
  }
}

/* A program compiled and linked with the harness, its input file written. */
typedef struct Prog {
  CT t;
  const char *exe, *in, *out;
} Prog;

/* The parts' size every program is compiled with (0: CG_PART_OPS). */
static int part_ops;

/* Compiles IR text at -O2, links it with the harness and writes the input
 * file for its forward, then `steps` training steps, on input_data. */
static void build(Prog *p, const char *name, const char *ir, int steps) {
  CT *t = &p->t;
  parse_ir(t, name, ir);
  t->part_ops = part_ops;
  Module *m = t->m;
  const char *obj = ct_emit(t, "obj", NULL, NULL, 2);
  if (!obj)
    fail_msg("cg_emit: %s", ct_log(t));
  p->exe = arena_printf(t->a, "%s/run", t->dir);
  if (ct_sh("%s -O1 %s -DCREATE=%s_create -I%s %s %s -o %s %s", DTC_TEST_CC, DTC_TEST_CFLAGS,
            m->name, DTC_TEST_RUNTIME, DTC_TEST_HARNESS, obj, p->exe, DTC_TEST_LIBS))
    fail_msg("cannot link the harness");

  int ndev = cg_devices(m);
  Func *fwd = cg_device_func(m, "forward", ndev ? 0 : -1);
  Func *train = cg_device_func(m, "train_step", ndev ? 0 : -1);
  const bool *live = cg_live(fwd);
  int ng = m->global.n;
  int *in = calloc((size_t)ng + 1, sizeof *in);
  const Inst **outs = calloc((size_t)fwd->inst.n + 1, sizeof *outs);
  p->in = arena_printf(t->a, "%s/in.bin", t->dir);
  p->out = arena_printf(t->a, "%s/out.bin", t->dir);
  FILE *f = fopen(p->in, "wb");
  assert_non_null(f);
  w32(f, steps);
  for (int pass = 0; pass < 2; pass++) {
    int nin = pass ? (train ? cg_func_inputs(train, NULL, in) : 0) : cg_func_inputs(fwd, live, in);
    w32(f, nin);
    for (int k = 0; k < nin; k++) {
      const Global *g = &m->global.a[in[k]];
      int64_t n = type_elems(&g->type);
      float *x = calloc((size_t)n + 1, 4);
      if (g->type.dtype == DT_I32)
        for (int64_t i = 0; i < n; i++)
          ((int32_t *)x)[i] = (int32_t)(i * 7 % 3);
      else
        input_data(in[k], x, n);
      w64(f, n);
      assert_int_equal(fwrite(x, 4, (size_t)n, f), (size_t)n);
      free(x);
    }
    if (pass)
      break;
    int nout = cg_func_outputs(fwd, live, outs);
    w32(f, nout);
    for (int k = 0; k < nout; k++)
      w64(f, type_elems(&outs[k]->in[0]->type));
  }
  int nstored = 0;
  for (int k = 0; k < ng; k++)
    nstored += m->global.a[k].kind != G_INPUT;
  w32(f, nstored);
  for (int k = 0; k < ng; k++) {
    const Global *g = &m->global.a[k];
    if (g->kind == G_INPUT)
      continue;
    w32(f, (int32_t)strlen(g->name));
    assert_int_equal(fwrite(g->name, 1, strlen(g->name), f), strlen(g->name));
    w64(f, type_elems(&g->type));
  }
  assert_int_equal(fclose(f), 0);
  free(in);
  free(outs);
}

/* What the harness wrote to path (free with free), its length in *len. */
static char *result(const char *path, size_t *len) {
  char *res = ct_read(path, len);
  if (!res)
    fail_msg("the harness wrote no %s", path);
  return res;
}

/* Compiles and runs IR text in the harness (see build); returns what the
 * harness wrote. */
static char *run_ir(const char *name, const char *ir, int steps, size_t *len) {
  Prog p;
  build(&p, name, ir, steps);
  if (ct_sh("%s %s %s", p.exe, p.in, p.out))
    fail_msg("%s: the harness failed", name);
  char *res = result(p.out, len);
  ct_free(&p.t);
  return res;
}

/* The two runs wrote the same bytes. */
static void same_bits(const char *what, const char *a, size_t na, const char *b, size_t nb) {
  if (na != nb)
    fail_msg("%s: %zu bytes looped, %zu unrolled", what, na, nb);
  for (size_t k = 0; k + 4 <= na; k += 4)
    if (memcmp(a + k, b + k, 4)) {
      float x, y;
      memcpy(&x, a + k, 4);
      memcpy(&y, b + k, 4);
      fail_msg("%s: float %zu of the harness's output is %.9g looped, %.9g unrolled", what, k / 4,
               x, y);
    }
}

/* Runs both forms of a program (gen(n, looped)) and compares them. */
static void looped_as_unrolled(const char *name, char *(*gen)(int, bool), int n) {
  char *lt = gen(n, true), *ut = gen(n, false);
  size_t ln, un;
  char *l = run_ir(name, lt, 0, &ln), *u = run_ir(name, ut, 0, &un);
  same_bits(name, l, ln, u, un);
  free(l);
  free(u);
  free(lt);
  free(ut);
}

/* %dst = row i of %src, a stacked value of rows f32[dims]. */
static void slice_row(FILE *f, const char *dst, const char *src, int i, const char *dims) {
  fprintf(f, "  %%%s.s = slice %%%s {axis = 0, begin = %d, end = %d} : f32[1,%s]\n", dst, src, i,
          i + 1, dims);
  fprintf(f, "  %%%s = reshape %%%s.s {shape = [%s]} : f32[%s]\n", dst, dst, dims, dims);
}

/* ---- (a), (e): carried values only, a stacked param ---- */

/* The batch and width of residual's x. */
static int res_rows = 4, res_width = 8;

/* x + relu(x @ w[i]) for i < n: a residual layer, its weights stacked. */
static char *residual(int n, bool looped) {
  char *s, x[32], w[32];
  size_t len;
  FILE *f = open_memstream(&s, &len);
  snprintf(x, sizeof x, "f32[%d,%d]", res_rows, res_width);
  snprintf(w, sizeof w, "%d,%d", res_width, res_width);
  fprintf(f,
          "module res\n\ninput x : %s\n"
          "param w : f32[%d,%s] {init = \"normal\", init_arg = 0.5}\n\n",
          x, n, w);
  if (looped)
    fprintf(f,
            "func @layer body {\n"
            "  %%x = arg {index = 0} : %s\n"
            "  %%w = arg {index = 1} : f32[%s]\n"
            "  %%h = matmul %%x, %%w : %s\n"
            "  %%r = relu %%h : %s\n"
            "  %%y = add %%x, %%r : %s\n"
            "  output %%y {name = \"x\"}\n"
            "}\n\n",
            x, w, x, x, x);
  fprintf(f,
          "func @forward {\n"
          "  %%x0 = load {global = \"x\"} : %s\n"
          "  %%w = load {global = \"w\"} : f32[%d,%s]\n",
          x, n, w);
  if (looped) {
    fprintf(f,
            "  %%x%d = repeat %%x0, %%w {body = \"layer\", n = %d, carry = 1, stacked = 1} "
            ": %s\n",
            n, n, x);
  } else {
    for (int i = 0; i < n; i++) {
      char wi[16];
      snprintf(wi, sizeof wi, "w%d", i);
      slice_row(f, wi, "w", i, w);
      fprintf(f, "  %%h%d = matmul %%x%d, %%w%d : %s\n", i, i, i, x);
      fprintf(f, "  %%r%d = relu %%h%d : %s\n", i, i, x);
      fprintf(f, "  %%x%d = add %%x%d, %%r%d : %s\n", i + 1, i, i, x);
    }
  }
  fprintf(f, "  output %%x%d {name = \"y\"}\n}\n", n);
  fclose(f);
  return s;
}

static void carry_only(void **state) {
  (void)state;
  looped_as_unrolled("residual", residual, 3);
}

static void one_iteration(void **state) {
  (void)state;
  looped_as_unrolled("residual1", residual, 1);
}

/* A body's fusion group large enough to run on the context's threads. */
static void parallel_group(void **state) {
  (void)state;
  res_rows = res_width = 256;
  looped_as_unrolled("residual256", residual, 2);
  res_rows = 4, res_width = 8;
}

/* ---- (b): reverse, a whole operand, a stacked input and output ---- */

/* h = tanh(h @ w + xs[i]) for i = n-1 down to 0, and ys[i] = 2 h. */
static char *recurrent(int n, bool looped) {
  char *s;
  size_t len;
  FILE *f = open_memstream(&s, &len);
  fprintf(f,
          "module rnn\n\ninput h0 : f32[4,8]\ninput xs : f32[%d,4,8]\n"
          "param w : f32[8,8] {init = \"glorot\"}\n\n",
          n);
  if (looped)
    fputs("func @cell body {\n"
          "  %h = arg {index = 0} : f32[4,8]\n"
          "  %w = arg {index = 1} : f32[8,8]\n"
          "  %x = arg {index = 2} : f32[4,8]\n"
          "  %m = matmul %h, %w : f32[4,8]\n"
          "  %s = add %m, %x : f32[4,8]\n"
          "  %h2 = tanh %s : f32[4,8]\n"
          "  %two = const {value = 2.0} : f32[]\n"
          "  %y = mul %h2, %two : f32[4,8]\n"
          "  output %h2 {name = \"h\"}\n"
          "  output %y {name = \"y\"}\n"
          "}\n\n",
          f);
  fprintf(f,
          "func @forward {\n"
          "  %%hin = load {global = \"h0\"} : f32[4,8]\n"
          "  %%w = load {global = \"w\"} : f32[8,8]\n"
          "  %%xs = load {global = \"xs\"} : f32[%d,4,8]\n",
          n);
  if (looped) {
    fprintf(f,
            "  %%h = repeat %%hin, %%w, %%xs {body = \"cell\", n = %d, carry = 1, stacked = 1, "
            "reverse = 1} : f32[4,8]\n"
            "  %%ys = repeat_out %%h {index = 1} : f32[%d,4,8]\n",
            n, n);
  } else {
    const char *prev = "hin";
    char h[16][16];
    for (int i = n - 1; i >= 0; i--) {
      char x[16];
      snprintf(x, sizeof x, "x%d", i);
      slice_row(f, x, "xs", i, "4,8");
      fprintf(f, "  %%m%d = matmul %%%s, %%w : f32[4,8]\n", i, prev);
      fprintf(f, "  %%s%d = add %%m%d, %%x%d : f32[4,8]\n", i, i, i);
      snprintf(h[i], sizeof h[i], "h%d", i);
      fprintf(f, "  %%h%d = tanh %%s%d : f32[4,8]\n", i, i);
      fprintf(f, "  %%two%d = const {value = 2.0} : f32[]\n", i);
      fprintf(f, "  %%y%d = mul %%h%d, %%two%d : f32[4,8]\n", i, i, i);
      fprintf(f, "  %%y%d.r = reshape %%y%d {shape = [1,4,8]} : f32[1,4,8]\n", i, i);
      prev = h[i];
    }
    fputs("  %ys = concat ", f);
    for (int i = 0; i < n; i++)
      fprintf(f, "%s%%y%d.r", i ? ", " : "", i);
    fprintf(f, " {axis = 0} : f32[%d,4,8]\n", n);
    fprintf(f, "  %%h = reshape %%h0 {shape = [4,8]} : f32[4,8]\n");
  }
  fputs("  output %h {name = \"h\"}\n  output %ys {name = \"ys\"}\n}\n", f);
  fclose(f);
  return s;
}

static void reverse_stacked(void **state) {
  (void)state;
  looped_as_unrolled("recurrent", recurrent, 4);
}

/* ---- (c): two carried values, a whole operand, an output no repeat_out
 * takes, two repeat_outs of one output ---- */

/* a = a + relu(b @ w), b = tanh(a), n times; the body's stacked output
 * sigmoid(b) is dropped. */
static char *pair(int n, bool looped) {
  char *s;
  size_t len;
  FILE *f = open_memstream(&s, &len);
  fputs("module pair\n\ninput a0 : f32[4,8]\ninput b0 : f32[4,8]\n"
        "param w : f32[8,8] {init = \"glorot\"}\n\n",
        f);
  if (looped)
    fputs("func @pair body {\n"
          "  %a = arg {index = 0} : f32[4,8]\n"
          "  %b = arg {index = 1} : f32[4,8]\n"
          "  %w = arg {index = 2} : f32[8,8]\n"
          "  %m = matmul %b, %w : f32[4,8]\n"
          "  %r = relu %m : f32[4,8]\n"
          "  %a2 = add %a, %r : f32[4,8]\n"
          "  %b2 = tanh %a2 : f32[4,8]\n"
          "  %s = sigmoid %b2 : f32[4,8]\n"
          "  output %a2 {name = \"a\"}\n"
          "  output %b2 {name = \"b\"}\n"
          "  output %s {name = \"s\"}\n"
          "}\n\n",
          f);
  fputs("func @forward {\n"
        "  %a0 = load {global = \"a0\"} : f32[4,8]\n"
        "  %b0 = load {global = \"b0\"} : f32[4,8]\n"
        "  %w = load {global = \"w\"} : f32[8,8]\n",
        f);
  if (looped) {
    fprintf(f,
            "  %%a = repeat %%a0, %%b0, %%w {body = \"pair\", n = %d, carry = 2, stacked = 0} "
            ": f32[4,8]\n"
            "  %%b = repeat_out %%a {index = 1} : f32[4,8]\n"
            "  %%b.again = repeat_out %%a {index = 1} : f32[4,8]\n",
            n);
  } else {
    for (int i = 0; i < n; i++) {
      fprintf(f, "  %%m%d = matmul %%b%d, %%w : f32[4,8]\n", i, i);
      fprintf(f, "  %%r%d = relu %%m%d : f32[4,8]\n", i, i);
      fprintf(f, "  %%a%d = add %%a%d, %%r%d : f32[4,8]\n", i + 1, i, i);
      fprintf(f, "  %%b%d = tanh %%a%d : f32[4,8]\n", i + 1, i + 1);
    }
    fprintf(f,
            "  %%a = reshape %%a%d {shape = [4,8]} : f32[4,8]\n"
            "  %%b = reshape %%b%d {shape = [4,8]} : f32[4,8]\n"
            "  %%b.again = reshape %%b%d {shape = [4,8]} : f32[4,8]\n",
            n, n, n);
  }
  fputs("  output %a {name = \"a\"}\n  output %b {name = \"b\"}\n"
        "  output %b.again {name = \"b2\"}\n}\n",
        f);
  fclose(f);
  return s;
}

static void two_carries(void **state) {
  (void)state;
  looped_as_unrolled("pair", pair, 4);
}

/* ---- (d): a loop in a loop ---- */

/* Outer iteration i runs the inner loop over w[i][j], j < 3: x = x +
 * relu(x @ w[i][j]), z[i][j] = x / 2; then x = tanh(x). */
static char *nested(int n, bool looped) {
  char *s;
  size_t len;
  FILE *f = open_memstream(&s, &len);
  fprintf(f,
          "module nest\n\ninput x : f32[4,8]\n"
          "param w : f32[%d,3,8,8] {init = \"normal\", init_arg = 0.4}\n\n",
          n);
  if (looped)
    fputs("func @inner body {\n"
          "  %x = arg {index = 0} : f32[4,8]\n"
          "  %w = arg {index = 1} : f32[8,8]\n"
          "  %h = matmul %x, %w : f32[4,8]\n"
          "  %r = relu %h : f32[4,8]\n"
          "  %y = add %x, %r : f32[4,8]\n"
          "  %half = const {value = 0.5} : f32[]\n"
          "  %z = mul %y, %half : f32[4,8]\n"
          "  output %y {name = \"x\"}\n"
          "  output %z {name = \"z\"}\n"
          "}\n\n"
          "func @outer body {\n"
          "  %x = arg {index = 0} : f32[4,8]\n"
          "  %w = arg {index = 1} : f32[3,8,8]\n"
          "  %r = repeat %x, %w {body = \"inner\", n = 3, carry = 1, stacked = 1} : f32[4,8]\n"
          "  %z = repeat_out %r {index = 1} : f32[3,4,8]\n"
          "  %y = tanh %r : f32[4,8]\n"
          "  output %y {name = \"x\"}\n"
          "  output %z {name = \"z\"}\n"
          "}\n\n",
          f);
  fprintf(f,
          "func @forward {\n"
          "  %%x = load {global = \"x\"} : f32[4,8]\n"
          "  %%w = load {global = \"w\"} : f32[%d,3,8,8]\n",
          n);
  if (looped) {
    fprintf(f,
            "  %%y = repeat %%x, %%w {body = \"outer\", n = %d, carry = 1, stacked = 1} "
            ": f32[4,8]\n"
            "  %%z = repeat_out %%y {index = 1} : f32[%d,3,4,8]\n",
            n, n);
  } else {
    fputs("  %x0.0 = reshape %x {shape = [4,8]} : f32[4,8]\n", f);
    for (int i = 0; i < n; i++) {
      char wi[16], wij[16];
      snprintf(wi, sizeof wi, "w%d", i);
      slice_row(f, wi, "w", i, "3,8,8");
      for (int j = 0; j < 3; j++) {
        snprintf(wij, sizeof wij, "w%d.%d", i, j);
        slice_row(f, wij, wi, j, "8,8");
        fprintf(f, "  %%h%d.%d = matmul %%x%d.%d, %%w%d.%d : f32[4,8]\n", i, j, i, j, i, j);
        fprintf(f, "  %%r%d.%d = relu %%h%d.%d : f32[4,8]\n", i, j, i, j);
        fprintf(f, "  %%x%d.%d = add %%x%d.%d, %%r%d.%d : f32[4,8]\n", i, j + 1, i, j, i, j);
        fprintf(f, "  %%half%d.%d = const {value = 0.5} : f32[]\n", i, j);
        fprintf(f, "  %%z%d.%d = mul %%x%d.%d, %%half%d.%d : f32[4,8]\n", i, j, i, j + 1, i, j);
        fprintf(f, "  %%z%d.%d.r = reshape %%z%d.%d {shape = [1,4,8]} : f32[1,4,8]\n", i, j, i, j);
      }
      fprintf(f, "  %%x%d.0 = tanh %%x%d.3 : f32[4,8]\n", i + 1, i);
    }
    fputs("  %zs = concat ", f);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < 3; j++)
        fprintf(f, "%s%%z%d.%d.r", i || j ? ", " : "", i, j);
    fprintf(f,
            " {axis = 0} : f32[%d,4,8]\n"
            "  %%z = reshape %%zs {shape = [%d,3,4,8]} : f32[%d,3,4,8]\n"
            "  %%y = reshape %%x%d.0 {shape = [4,8]} : f32[4,8]\n",
            3 * n, n, n, n);
  }
  fputs("  output %y {name = \"y\"}\n  output %z {name = \"z\"}\n}\n", f);
  fclose(f);
  return s;
}

static void loop_in_loop(void **state) {
  (void)state;
  looped_as_unrolled("nested", nested, 2);
}

/* ---- (f): dropout in a body: a new mask each iteration ---- */

/* c = x, then c = c + dropout(x) three times, the dropouts stacked into ys;
 * @train_step stores both, so the harness reads them after each step. */
static const char dropout_ir[] =
    "module drop\n\n"
    "train {loss = \"loss\", opt = \"sgd\", lr = 0.1, schedule = \"constant\"}\n\n"
    "input x : f32[16,16]\n"
    "state c : f32[16,16] {init = \"zeros\"}\n"
    "state ys : f32[3,16,16] {init = \"zeros\"}\n\n"
    "func @drop body {\n"
    "  %c = arg {index = 0} : f32[16,16]\n"
    "  %x = arg {index = 1} : f32[16,16]\n"
    "  %d = dropout %x {p = 0.5, seed = 7} : f32[16,16]\n"
    "  %c2 = add %c, %d : f32[16,16]\n"
    "  output %c2 {name = \"c\"}\n"
    "  output %d {name = \"d\"}\n"
    "}\n\n"
    "func @forward {\n"
    "  %l = const {value = 0.0} : f32[]\n"
    "  output %l {name = \"loss\"}\n"
    "}\n\n"
    "func @train_step {\n"
    "  %x = load {global = \"x\"} : f32[16,16]\n"
    "  %c = repeat %x, %x {body = \"drop\", n = 3, carry = 1, stacked = 0} : f32[16,16]\n"
    "  %ys = repeat_out %c {index = 1} : f32[3,16,16]\n"
    "  store %c {global = \"c\"}\n"
    "  store %ys {global = \"ys\"}\n"
    "  %l = const {value = 0.0} : f32[]\n"
    "  output %l {name = \"loss\"}\n"
    "}\n";

enum { DN = 256 };

/* dtrt_k_dropout(x) {p = 0.5, seed = 7} at step `step`, into y. */
static void dropout_ref(DtrtCtx *ctx, const float *x, float *y, int64_t step) {
  DtTensor in = {.data = (void *)x, .dtype = DTRT_F32, .rank = 2, .dim = {16, 16}};
  DtTensor out = {.data = y, .dtype = DTRT_F32, .rank = 2, .dim = {16, 16}};
  DtAttrs a = {.i = {7}, .f = {0.5}, .ni = 1, .nf = 1, .step = step};
  assert_int_equal(dtrt_k_dropout(ctx, &in, 1, &out, &a), DT_OK);
}

static bool same_mask(const float *a, const float *b) {
  for (int k = 0; k < DN; k++)
    if ((a[k] == 0) != (b[k] == 0))
      return false;
  return true;
}

static void dropout_steps(void **state) {
  (void)state;
  size_t len;
  char *res = run_ir("drop", dropout_ir, 2, &len);
  /* the globals as created, then per step the loss and the globals (c, ys) */
  assert_int_equal(len, 4 * (4 * DN + 2 * (1 + 4 * DN)));
  const float *got = (const float *)res + 4 * DN;
  float x[DN], d[2][3][DN];
  input_data(0, x, DN);
  DtrtCtx *ctx = dtrt_ctx_new();
  assert_non_null(ctx);
  for (int64_t s = 0; s < 2; s++) {
    float c[DN];
    memcpy(c, x, sizeof c);
    for (int64_t i = 0; i < 3; i++) {
      dropout_ref(ctx, x, d[s][i], ir_loop_step(s, i));
      for (int k = 0; k < DN; k++)
        c[k] += d[s][i][k];
    }
    const float *gc = got + 1, *gys = gc + DN;
    if (memcmp(gc, c, sizeof c))
      fail_msg("step %lld: c is not x + the three dropouts of dtrt_k_dropout", (long long)s);
    for (int i = 0; i < 3; i++)
      if (memcmp(gys + i * DN, d[s][i], sizeof d[s][i]))
        fail_msg("step %lld: ys[%d] is not dtrt_k_dropout at step ir_loop_step(s, %d)", (long long)s,
                 i, i);
    got += 1 + 4 * DN;
  }
  assert_false(same_mask(d[0][0], d[0][1]));
  assert_false(same_mask(d[0][1], d[0][2]));
  assert_false(same_mask(d[0][0], d[1][0]));
  dtrt_ctx_free(ctx);
  free(res);
}

/* ---- compile time does not grow with n ---- */

/* The LLVM IR text of ir at -O`opt`, every run of digits as one '#' and the
 * model's hash, 16 hex digits, as one '#' too. */
static char *llvm_text(const char *name, const char *ir, int opt) {
  CT t;
  parse_ir(&t, name, ir);
  const char *path = ct_emit(&t, "llvm", NULL, NULL, opt);
  if (!path)
    fail_msg("cg_emit: %s", ct_log(&t));
  char *s = ct_read(path, NULL);
  assert_non_null(s);
  for (char *h = s; (h = strstr(h, "c\"")); h++)
    if (strspn(h + 2, "0123456789abcdef") == 16 && !strncmp(h + 18, "\\00\"", 4))
      memset(h + 2, '0', 16);
  char *w = s;
  bool digits = false;
  for (const char *r = s; *r; r++) {
    bool d = isdigit((unsigned char)*r);
    if (!d || !digits)
      *w++ = d ? '#' : *r;
    digits = d;
  }
  *w = 0;
  ct_free(&t);
  return s;
}

static void size_of_n(void **state) {
  (void)state;
  /* n, n, -O: odd trip counts, whose last iteration writes the same
   * buffer; -O2 folds a loop of one iteration (or two: its parity) away */
  static const int n[][3] = {{1, 1001, 0}, {3, 1001, 2}};
  for (int k = 0; k < COUNTOF(n); k++) {
    char *a = residual(n[k][0], true), *b = residual(n[k][1], true);
    char *la = llvm_text("res", a, n[k][2]), *lb = llvm_text("res", b, n[k][2]);
    size_t at = 0, line = 1;
    for (; la[at] && la[at] == lb[at]; at++)
      line += la[at] == '\n';
    if (la[at] || lb[at])
      fail_msg("-O%d: the LLVM IR for n = %d and for n = %d differ beyond the digits, from line "
               "%zu:\n%.300s\n----\n%.300s",
               n[k][2], n[k][0], n[k][1], line, la + at, lb + at);
    free(la);
    free(lb);
    free(a);
    free(b);
  }
}

/* A body is one internal function, never an entry: NAME.h says nothing of
 * it, and the work arena is the entry's, which holds the body's. */
static void body_not_entry(void **state) {
  (void)state;
  char *ir = residual(5, true);
  CT t;
  parse_ir(&t, "res", ir);
  const char *ll = ct_emit(&t, "llvm", NULL, NULL, 0);
  assert_non_null(ll);
  char *text = ct_read(ll, NULL), *h = ct_read(arena_printf(t.a, "%s/res.h", t.dir), NULL);
  assert_non_null(text);
  assert_non_null(h);
  const char *def = "define internal i32 @res.layer(";
  const char *at = strstr(text, def);
  assert_non_null(at);
  assert_null(strstr(at + 1, def));
  assert_null(strstr(h, "layer"));
  Func *fwd = ir_find_func(t.m, "forward"), *body = ir_find_func(t.m, "layer");
  assert_true(body->work_bytes > 0 && fwd->work_bytes > body->work_bytes);
  char want[64];
  snprintf(want, sizeof want, "#define RES_WORK_BYTES %lld\n", (long long)fwd->work_bytes);
  assert_non_null(strstr(h, want));
  free(text);
  free(h);
  ct_free(&t);
  free(ir);
}

/* ---- per-device loops (after spmd): collectives in a body ---- */

/* y = tanh(x + relu(x @ w[i]) * tanh(s)) for i < 3, s the column sums of
 * relu(x @ w[i]) over the whole batch of 4 rows: on ndev devices (1 or 2,
 * its rows split over them) with an all_reduce in the body, or the global
 * program (ndev 0). fail 1: the body first adds embedding(e, ids), whose
 * ids (0, 1, 2, 0) have one out of range [0, 2) on the last device; fail
 * 2: the caller does, before the loop. */
static char *dp_residual(int ndev, int fail) {
  char *s;
  size_t len;
  FILE *f = open_memstream(&s, &len);
  int b = ndev ? 4 / ndev : 4;
  const char *sh[] = {"",
                      " shard m[dp, *]",
                      " shard m[*, *, *]",
                      " shard m[*, *]",
                      " shard m[*]",
                      " shard m[*] partial",
                      " shard m[dp]"};
  if (!ndev)
    for (int k = 0; k < COUNTOF(sh); k++)
      sh[k] = "";
  fputs("module dpres\n\n", f);
  if (ndev == 2)
    fputs("cluster two {\n  node a\n"
          "  device a0 on a {kind = \"cpu\", gflops = 10.0, mem = 1073741824}\n"
          "  device a1 on a {kind = \"cpu\", gflops = 10.0, mem = 1073741824}\n"
          "  link intra {bw = 10000000000.0, lat = 1e-06}\n}\n\n",
          f);
  if (ndev)
    fprintf(f, "mesh m[dp = %d] on [%s]\nplan explicit\n\n", ndev, ndev == 2 ? "a0, a1" : "0");
  fprintf(f, "input x : f32[4,8]%s\n", sh[1]);
  if (fail)
    fprintf(f, "input ids : i32[4]%s\nparam e : f32[2,8] {init = \"normal\"}%s\n", sh[6], sh[3]);
  fprintf(f, "param w : f32[3,8,8] {init = \"normal\", init_arg = 0.5}%s\n", sh[2]);
  for (int d = 0; d < (ndev ? ndev : 1); d++) {
    char at[32] = "";
    if (ndev)
      snprintf(at, sizeof at, ".%d device %d", d, d);
    fprintf(f, "\nfunc @layer%s body {\n  %%x = arg {index = 0} : f32[%d,8]%s\n", at, b, sh[1]);
    if (fail == 1)
      fprintf(f,
              "  %%e = arg {index = 1} : f32[2,8]%s\n"
              "  %%ids = arg {index = 2} : i32[%d]%s\n"
              "  %%emb = embedding %%e, %%ids : f32[%d,8]%s\n"
              "  %%x2 = add %%x, %%emb : f32[%d,8]%s\n",
              sh[3], b, sh[6], b, sh[1], b, sh[1]);
    else
      fprintf(f, "  %%x2 = reshape %%x {shape = [%d,8]} : f32[%d,8]%s\n", b, b, sh[1]);
    fprintf(f,
            "  %%w = arg {index = %d} : f32[8,8]%s\n"
            "  %%h = matmul %%x2, %%w : f32[%d,8]%s\n"
            "  %%r = relu %%h : f32[%d,8]%s\n"
            "  %%p = sum %%r {axes = [0]} : f32[8]%s\n",
            fail == 1 ? 3 : 1, sh[3], b, sh[1], b, sh[1], sh[5]);
    if (ndev)
      fprintf(f, "  %%s = all_reduce %%p {axis = 0, method = 0} : f32[8]%s\n", sh[4]);
    else
      fputs("  %s = reshape %p {shape = [8]} : f32[8]\n", f);
    fprintf(f,
            "  %%t = tanh %%s : f32[8]%s\n"
            "  %%q = mul %%r, %%t : f32[%d,8]%s\n"
            "  %%u = add %%x2, %%q : f32[%d,8]%s\n"
            "  %%y = tanh %%u : f32[%d,8]%s\n"
            "  output %%y {name = \"x\"}\n}\n",
            sh[4], b, sh[1], b, sh[1], b, sh[1]);
    fprintf(f,
            "\nfunc @forward%s {\n"
            "  %%x = load {global = \"x\"} : f32[%d,8]%s\n"
            "  %%w = load {global = \"w\"} : f32[3,8,8]%s\n",
            at, b, sh[1], sh[2]);
    if (fail)
      fprintf(f,
              "  %%e = load {global = \"e\"} : f32[2,8]%s\n"
              "  %%ids = load {global = \"ids\"} : i32[%d]%s\n",
              sh[3], b, sh[6]);
    if (fail == 2)
      fprintf(f,
              "  %%emb = embedding %%e, %%ids : f32[%d,8]%s\n"
              "  %%x1 = add %%x, %%emb : f32[%d,8]%s\n",
              b, sh[1], b, sh[1]);
    else
      fprintf(f, "  %%x1 = reshape %%x {shape = [%d,8]} : f32[%d,8]%s\n", b, b, sh[1]);
    fprintf(f,
            "  %%y = repeat %%x1, %s%%w {body = \"layer\", n = 3, carry = 1, stacked = 1} "
            ": f32[%d,8]%s\n",
            fail == 1 ? "%e, %ids, " : "", b, sh[1]);
    if (ndev)
      fprintf(f,
              "  %%g = all_gather %%y {axis = 0, dim = 0, sizes = [%s], method = 0} "
              ": f32[4,8]%s\n  output %%g {name = \"y\"}\n}\n",
              ndev == 2 ? "2, 2" : "4", sh[3]);
    else
      fputs("  output %y {name = \"y\"}\n}\n", f);
  }
  fclose(f);
  return s;
}

/* A mesh of one device: its functions, bodies and collectives, run alone,
 * give the global program's bits. */
static void device_loop(void **state) {
  (void)state;
  char *dt = dp_residual(1, 0), *gt = dp_residual(0, 0);
  size_t dn, gn;
  char *d = run_ir("dpres1", dt, 0, &dn), *g = run_ir("dpres", gt, 0, &gn);
  same_bits("dpres on one device", d, dn, g, gn);
  free(d);
  free(g);
  free(dt);
  free(gt);
}

/* mpiexec -n 2 of p's harness, rank R writing OUT.R and its stderr to
 * OUT.R.err, in `timeout 60`; returns the exit status of timeout. */
static int mpirun2(const Prog *p) {
  return ct_sh("timeout 60 %s -n 2 %s sh -c 'r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; "
               "exec %s %s %s.$r 2> %s.$r.err' > %s.log 2>&1",
               DTC_TEST_MPIEXEC, DTC_TEST_MPIEXEC_FLAGS, p->exe, p->in, p->out, p->out, p->out);
}

/* On two ranks (under mpiexec, when there is one) against the global
 * program, within the tolerance of sums in another order. */
static void device_loop_np2(void **state) {
  (void)state;
  if (!DTC_TEST_MPIEXEC[0])
    skip();
  char *dt = dp_residual(2, 0), *gt = dp_residual(0, 0);
  size_t gn;
  char *g = run_ir("dpres", gt, 0, &gn);
  Prog p;
  build(&p, "dpres2", dt, 0);
  int st = mpirun2(&p);
  if (st) {
    char *log = ct_read(arena_printf(p.t.a, "%s.log", p.out), NULL);
    fail_msg("mpiexec: status %d\n%s", st, log ? log : "");
  }
  for (int r = 0; r < 2; r++) {
    size_t n;
    char *d = result(arena_printf(p.t.a, "%s.%d", p.out, r), &n);
    assert_int_equal(n, gn);
    ct_close_to((const float *)d, (const float *)g, (int64_t)(n / 4),
                r ? "dpres rank 1" : "dpres rank 0");
    free(d);
  }
  ct_free(&p.t);
  free(g);
  free(dt);
  free(gt);
}

/* A kernel failing on rank 1 inside the body, or in the caller before the
 * loop: rank 1 still makes the body's collectives in every iteration and
 * the caller's after the loop, so no rank waits for ever, and both return
 * rank 1's error. */
static void device_loop_fails(void **state) {
  (void)state;
  if (!DTC_TEST_MPIEXEC[0])
    skip();
  for (int fail = 1; fail <= 2; fail++) {
    char *dt = dp_residual(2, fail);
    Prog p;
    build(&p, fail == 1 ? "dpbody" : "dpcaller", dt, 0);
    int st = mpirun2(&p);
    char *log = ct_read(arena_printf(p.t.a, "%s.log", p.out), NULL);
    if (!st || WEXITSTATUS(st) == 124)
      fail_msg("fail %d: mpiexec %s\n%s", fail, st ? "timed out" : "succeeded", log ? log : "");
    for (int r = 0; r < 2; r++) {
      char *err = ct_read(arena_printf(p.t.a, "%s.%d.err", p.out, r), NULL);
      if (!err || !strstr(err, "rank 1 failed: embedding: id 2 at index 0 is outside [0, 2)"))
        fail_msg("fail %d: rank %d said: %s\n%s", fail, r, err ? err : "(nothing)", log ? log : "");
      free(err);
    }
    free(log);
    ct_free(&p.t);
    free(dt);
  }
}

/* Pipeline stages on two ranks, layers 1:2: x <- tanh((x + embedding(e[i],
 * ids[i])) @ w[i]) for i < 3, each layer its own table of 2 rows; the ids
 * (i * 7 % 3: rows (0, 1), (2, 0), (1, 2)) are out of range in layers 1 and
 * 2, which rank 1 runs. Rank 1 fails inside its loop but still makes its
 * sends and broadcasts, so rank 0 waits for nothing, and both return rank
 * 1's error. */
static char *pp_embed(void) {
  char *s;
  size_t len;
  FILE *f = open_memstream(&s, &len);
  const char *pp = "pp(0.333333, 0.666667)", *w = " shard m[*, *]";
  fputs("module ppemb\n\ncluster two {\n  node a\n"
        "  device a0 on a {kind = \"cpu\", gflops = 10.0, mem = 1073741824}\n"
        "  device a1 on a {kind = \"cpu\", gflops = 10.0, mem = 1073741824}\n"
        "  link intra {bw = 10000000000.0, lat = 1e-06}\n}\n\n"
        "mesh m[pp = 2] on [a0, a1]\nplan explicit\n\n", f);
  fprintf(f, "input x : f32[2,8]%s\ninput ids : i32[3,2] shard m[%s, *]\n", w, pp);
  fprintf(f, "param e : f32[3,2,8] {init = \"normal\"} shard m[%s, *, *]\n", pp);
  fprintf(f, "param w : f32[3,8,8] {init = \"normal\", init_arg = 0.5} shard m[%s, *, *]\n", pp);
  for (int d = 0; d < 2; d++) {
    int n = d ? 2 : 1;
    fprintf(f,
            "\nfunc @layer.%d device %d body {\n"
            "  %%x = arg {index = 0} : f32[2,8]%s\n"
            "  %%e = arg {index = 1} : f32[2,8]%s\n"
            "  %%ids = arg {index = 2} : i32[2] shard m[*]\n"
            "  %%w = arg {index = 3} : f32[8,8]%s\n"
            "  %%emb = embedding %%e, %%ids : f32[2,8]%s\n"
            "  %%x2 = add %%x, %%emb : f32[2,8]%s\n"
            "  %%h = matmul %%x2, %%w : f32[2,8]%s\n"
            "  %%y = tanh %%h : f32[2,8]%s\n"
            "  output %%y {name = \"x\"}\n}\n",
            d, d, w, w, w, w, w, w, w);
    fprintf(f,
            "\nfunc @forward.%d device %d {\n"
            "  %%x = load {global = \"x\"} : f32[2,8]%s\n"
            "  %%e = load {global = \"e\"} : f32[%d,2,8] shard m[%s, *, *]\n"
            "  %%ids = load {global = \"ids\"} : i32[%d,2] shard m[%s, *]\n"
            "  %%w = load {global = \"w\"} : f32[%d,8,8] shard m[%s, *, *]\n",
            d, d, w, n, pp, n, pp, n, pp);
    if (d)
      fprintf(f, "  %%r = send %%x {axis = 0, from = 0, to = 1} : f32[2,8]%s\n"
                 "  %%y = repeat %%r, %%e, %%ids, %%w {body = \"layer\", n = 2, carry = 1, "
                 "stacked = 3, first = 1} : f32[2,8]%s\n", w, w);
    else
      fprintf(f, "  %%y = repeat %%x, %%e, %%ids, %%w {body = \"layer\", n = 1, carry = 1, "
                 "stacked = 3} : f32[2,8]%s\n"
                 "  %%s = send %%y {axis = 0, from = 0, to = 1} : f32[2,8]%s\n", w, w);
    fprintf(f, "  %%b = bcast %%y {axis = 0, from = 1} : f32[2,8]%s\n"
               "  output %%b {name = \"y\"}\n}\n", w);
  }
  fclose(f);
  return s;
}

static void stage_fails(void **state) {
  (void)state;
  if (!DTC_TEST_MPIEXEC[0])
    skip();
  char *dt = pp_embed();
  Prog p;
  build(&p, "ppemb", dt, 0);
  int st = mpirun2(&p);
  char *log = ct_read(arena_printf(p.t.a, "%s.log", p.out), NULL);
  if (!st || WEXITSTATUS(st) == 124)
    fail_msg("mpiexec %s\n%s", st ? "timed out" : "succeeded", log ? log : "");
  for (int r = 0; r < 2; r++) {
    char *err = ct_read(arena_printf(p.t.a, "%s.%d.err", p.out, r), NULL);
    if (!err || !strstr(err, "rank 1 failed: embedding: id 2 at index 0 is outside [0, 2)"))
      fail_msg("rank %d said: %s\n%s\n%s", r, err ? err : "(nothing)", log ? log : "", dt);
    free(err);
  }
  free(log);
  ct_free(&p.t);
  free(dt);
}

/* ---- every function in parts of one statement ---- */

static int parts_of_one(void **state) {
  (void)state;
  part_ops = 1;
  return 0;
}

static int parts_default(void **state) {
  (void)state;
  part_ops = 0;
  return 0;
}

/* A body is cut too: its parts are called from its function. */
static void body_in_parts(void **state) {
  (void)state;
  CT t;
  char *ir = residual(2, true);
  parse_ir(&t, "res", ir);
  t.part_ops = 1;
  const char *ll = ct_emit(&t, "llvm", NULL, NULL, 0);
  char *text = ll ? ct_read(ll, NULL) : NULL;
  assert_non_null(text);
  assert_non_null(strstr(text, "@res.layer.part2("));
  assert_non_null(strstr(text, "@res.forward.part1("));
  free(text);
  free(ir);
  ct_free(&t);
}

#define IN_PARTS(test) cmocka_unit_test_setup_teardown(test, parts_of_one, parts_default)

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(carry_only),      cmocka_unit_test(one_iteration),
      cmocka_unit_test(parallel_group),  cmocka_unit_test(reverse_stacked),
      cmocka_unit_test(two_carries),     cmocka_unit_test(loop_in_loop),
      cmocka_unit_test(dropout_steps),   cmocka_unit_test(size_of_n),
      cmocka_unit_test(body_not_entry),  cmocka_unit_test(device_loop),
      cmocka_unit_test(device_loop_np2), cmocka_unit_test(device_loop_fails),
      cmocka_unit_test(stage_fails),     cmocka_unit_test(body_in_parts),
      IN_PARTS(carry_only),              IN_PARTS(reverse_stacked),
      IN_PARTS(two_carries),             IN_PARTS(loop_in_loop),
      IN_PARTS(dropout_steps),           IN_PARTS(device_loop),
      IN_PARTS(device_loop_np2),         IN_PARTS(device_loop_fails),
      IN_PARTS(stage_fails),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
