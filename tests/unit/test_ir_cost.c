/* test_ir_cost.c: FLOP counts of the op table (ir/cost.c) and the Graphviz
 * output (ir/dot.c). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ir.h"

static const char *text =
    "module c\n"
    "input a : f32[2,4,3]\ninput b : f32[2,3,5]\ninput p : f32[3,4]\ninput q : f32[3,5]\n"
    "input r : f32[5]\ninput l : i32[4]\ninput c : f32[2,4,5]\n"
    "func @f {\n"
    "  %a = load {global = \"a\"} : f32[2,4,3]\n"
    "  %b = load {global = \"b\"} : f32[2,3,5]\n"
    "  %p = load {global = \"p\"} : f32[3,4]\n"
    "  %q = load {global = \"q\"} : f32[3,5]\n"
    "  %r = load {global = \"r\"} : f32[5]\n"
    "  %l = load {global = \"l\"} : i32[4]\n"
    "  %c = load {global = \"c\"} : f32[2,4,5]\n"
    "  %bmm = matmul %a, %b : f32[2,4,5]\n"
    "  %tmm = matmul %p, %q {ta = 1} : f32[4,5]\n"
    "  %fmm = matmul %a, %c {ta = 1, kfold = 1} : f32[3,5]\n"
    "  %add = add %tmm, %r : f32[4,5]\n"
    "  %exp = exp %add : f32[4,5]\n"
    "  %sum = sum %exp {axes = [1]} : f32[4]\n"
    "  %mean = mean %exp {axes = [1]} : f32[4]\n"
    "  %sm = softmax %add : f32[4,5]\n"
    "  %ce = cross_entropy %add, %l : f32[]\n"
    "  %rs = reshape %add {shape = [20]} : f32[20]\n"
    "  %tr = transpose %add {perm = [1, 0]} : f32[5,4]\n"
    "  output %ce {name = \"ce\"}\n"
    "}\n";

static Module *parse(Arena *a, const char *src) {
  Diag d;
  diag_init(&d, stderr);
  Module *m = ir_parse(a, src_from_string(a, "c.ir", src), &d);
  assert_non_null(m);
  return m;
}

static double flops(const Module *m, const char *name) {
  const Inst *i = ir_find_inst(m->func.a[0], name);
  assert_non_null(i);
  return ir_ops[i->op].flops(i);
}

static void test_counts(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = parse(a, text);
  assert_true(flops(m, "bmm") == 2.0 * 2 * 4 * 5 * 3);
  assert_true(flops(m, "tmm") == 2.0 * 4 * 5 * 3);
  assert_true(flops(m, "fmm") == 2.0 * 3 * 5 * (2 * 4));   /* as [8,3]^T @ [8,5] */
  assert_true(flops(m, "add") == 20);
  assert_true(flops(m, "exp") == 10 * 20);
  assert_true(flops(m, "sum") == 20);
  assert_true(flops(m, "mean") == 20 + 4);
  assert_true(flops(m, "sm") == 14 * 20);
  assert_true(flops(m, "ce") == 14 * 20 + 4);
  assert_true(flops(m, "rs") == 0);
  assert_true(flops(m, "tr") == 0);
  assert_true(flops(m, "a") == 0);
  arena_free(a);
}

/* Every op has a count, finite and not negative, on operands of any shape. */
static void test_every_op(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = ir_module_new(a, "all");
  Func *f = ir_add_func(m, "f", (Loc){0});
  Inst x = {.fn = f, .type = {DT_F32, 2, {8, 8}}};
  Inst *ins[16];
  for (int k = 0; k < COUNTOF(ins); k++)
    ins[k] = &x;
  for (int op = 0; op < OP_COUNT; op++) {
    Inst i = {.fn = f, .op = (Op)op, .in = ins, .nin = ir_ops[op].maxin, .type = x.type};
    double n = ir_ops[op].flops(&i);
    if (!(isfinite(n) && n >= 0))
      fail_msg("flops of '%s' is %g", ir_ops[op].name, n);
    int kind = ir_ops[op].kind;
    if (kind == K_META || kind == K_SHAPE)
      assert_true(n == 0);
    if (kind == K_ELEM || kind == K_REDUCE || kind == K_MATMUL)
      assert_true(n >= 64);
  }
  arena_free(a);
}

static void test_dot(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = parse(a, "module \"a \\\"q\\\"\"\ninput x : f32[2]\nstate s : f32[2]\n"
                       "func @\"f\\\\g\" {\n"
                       "  %x = load {global = \"x\"} : f32[2]\n"
                       "  %1 = neg %x : f32[2]\n"
                       "  store %1 {global = \"s\"}\n"
                       "  output %1 {name = \"o\\\"\\n\"}\n"
                       "}\n");
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  ir_print_dot(f, m);
  fclose(f);
  const char *want =
      "digraph \"a \\\"q\\\"\" {\n"
      "  node [fontname=\"monospace\", fontsize=10];\n"
      "  g0 [shape=box, label=\"input x\\nf32[2]\"];\n"
      "  g1 [shape=box, label=\"state s\\nf32[2]\"];\n"
      "  subgraph cluster_0 {\n"
      "    label=\"@f\\\\g\";\n"
      "    f0_0 [label=\"%x\\nload\\nf32[2]\"];\n"
      "    f0_1 [label=\"%1\\nneg\\nf32[2]\"];\n"
      "    f0_2 [label=\"%2\\nstore\"];\n"
      "    f0_3 [label=\"%3\\noutput o\\\" \"];\n"
      "    f0_0 -> f0_1;\n"
      "    f0_1 -> f0_2;\n"
      "    f0_1 -> f0_3;\n"
      "  }\n"
      "  g0 -> f0_0;\n"
      "  f0_2 -> g1;\n"
      "}\n";
  assert_string_equal(buf, want);
  /* Graphviz itself, where installed, accepts it */
  if (system("command -v dot >/dev/null 2>&1") == 0) {
    char path[] = "/tmp/dtc_test_dot_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, len), (ssize_t)len);
    close(fd);
    char *cmd = arena_printf(a, "dot -Tsvg %s >/dev/null", path);
    assert_int_equal(system(cmd), 0);
    remove(path);
  }
  free(buf);
  arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_every_op),
      cmocka_unit_test(test_dot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
