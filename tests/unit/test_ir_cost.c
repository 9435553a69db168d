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

/* The rows' log-sum-exp an attention's forward writes (ir_lse_partner):
 * the nearest earlier sdpa of the same queries, keys, mask and attributes
 * takes an sdpa_lse that something reads, one lse op each; such an lse op
 * costs nothing, the others their products. */
static void test_lse_partner(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = parse(a,
                    "module c\n"
                    "input q : f32[1,2,8,4]\ninput k : f32[1,2,8,4]\ninput v : f32[1,2,8,4]\n"
                    "input mk : f32[8,8]\n"
                    "func @f {\n"
                    "  %q = load {global = \"q\"} : f32[1,2,8,4]\n"
                    "  %k = load {global = \"k\"} : f32[1,2,8,4]\n"
                    "  %v = load {global = \"v\"} : f32[1,2,8,4]\n"
                    "  %mk = load {global = \"mk\"} : f32[8,8]\n"
                    "  %s1 = sdpa %q, %k, %v {causal = 1, scale = 0.5} : f32[1,2,8,4]\n"
                    "  %l1 = sdpa_lse %q, %k {causal = 1, scale = 0.5} : f32[1,2,8]\n"
                    "  %l2 = sdpa_lse %q, %k {causal = 1, scale = 0.5} : f32[1,2,8]\n"
                    "  %l3 = sdpa_lse %q, %k {scale = 0.5} : f32[1,2,8]\n"
                    "  %l4 = sdpa_lse %k, %q {causal = 1, scale = 0.5} : f32[1,2,8]\n"
                    "  %s2 = sdpa %q, %k, %v, %mk {scale = 0.5} : f32[1,2,8,4]\n"
                    "  %l5 = sdpa_lse %q, %k {scale = 0.5} : f32[1,2,8]\n"
                    "  %l6 = sdpa_lse %q, %k, %mk {scale = 0.5} : f32[1,2,8]\n"
                    "  %s3 = sdpa %q, %k, %v {scale = 0.25} : f32[1,2,8,4]\n"
                    "  %l7 = sdpa_lse %q, %k {scale = 0.25} : f32[1,2,8]\n"
                    "  %u = add %l1, %l2 : f32[1,2,8]\n"
                    "  %u2 = add %l3, %l4 : f32[1,2,8]\n"
                    "  %u3 = add %l5, %l6 : f32[1,2,8]\n"
                    "  %u4 = add %u, %u2 : f32[1,2,8]\n"
                    "  %u5 = add %u4, %u3 : f32[1,2,8]\n"
                    "  output %u5 {name = \"u\"}\n"
                    "  output %s1 {name = \"s1\"}\n"
                    "  output %s2 {name = \"s2\"}\n"
                    "  output %s3 {name = \"s3\"}\n"
                    "}\n");
  const Func *f = m->func.a[0];
  const Inst *s1 = ir_find_inst(f, "s1"), *s2 = ir_find_inst(f, "s2"), *s3 = ir_find_inst(f, "s3");
  const char *none[] = {"l2", "l3", "l4", "l5", "l7"};
  assert_ptr_equal(ir_lse_partner(ir_find_inst(f, "l1")), s1);
  assert_ptr_equal(ir_lse_of(s1), ir_find_inst(f, "l1"));
  assert_ptr_equal(ir_lse_partner(ir_find_inst(f, "l6")), s2);   /* the mask's */
  assert_ptr_equal(ir_lse_of(s2), ir_find_inst(f, "l6"));
  for (size_t k = 0; k < sizeof none / sizeof *none; k++)   /* taken, other attributes or */
    assert_null(ir_lse_partner(ir_find_inst(f, none[k])));  /* operands, unread (l7) */
  assert_null(ir_lse_of(s3));
  assert_true(ir_flops(ir_find_inst(f, "l1")) == 0);
  assert_true(ir_attn_scores(ir_find_inst(f, "l1")) == 0);
  assert_true(ir_flops(ir_find_inst(f, "l2")) > 0);
  arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_counts),
      cmocka_unit_test(test_lse_partner),
      cmocka_unit_test(test_every_op),
      cmocka_unit_test(test_dot),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
