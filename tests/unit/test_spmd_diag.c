/* test_spmd_diag.c: what the sharding and spmd passes promise besides
 * numerics: block lengths (ir/shard.c), the text form of per-device IR,
 * diagnostics (-Wreshard warnings, the note on conflicting annotations, user
 * errors), and modules without a mesh left alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

/* ---- block lengths ---- */

static void expect_blocks(int64_t n, const double *ratio, int k, const int64_t *want) {
  int64_t got[8];
  ir_blocks(n, ratio, k, got);
  for (int c = 0; c < k; c++)
    if (got[c] != want[c])
      fail_msg("blocks of %lld over %d: device %d gets %lld, expected %lld", (long long)n, k, c,
               (long long)got[c], (long long)want[c]);
}

static void test_blocks(void **state) {
  (void)state;
  expect_blocks(12, NULL, 3, (int64_t[]){4, 4, 4});
  expect_blocks(10, NULL, 3, (int64_t[]){4, 3, 3});
  expect_blocks(2, NULL, 3, (int64_t[]){1, 1, 0});
  /* floors 6, 3, 2; the one left goes to the device furthest below its target */
  expect_blocks(12, (double[]){0.5, 0.3, 0.2}, 3, (int64_t[]){6, 4, 2});
  expect_blocks(10, (double[]){0.5, 0.3, 0.2}, 3, (int64_t[]){5, 3, 2});
  /* floors 25, 25, 12; targets 25.6, 25.6, 12.8: device 2 first, then 0 */
  expect_blocks(64, (double[]){0.4, 0.4, 0.2}, 3, (int64_t[]){26, 25, 13});
  /* ties go to the lower index */
  expect_blocks(5, (double[]){0.5, 0.5}, 2, (int64_t[]){3, 2});
  expect_blocks(7, (double[]){0.25, 0.25, 0.25, 0.25}, 4, (int64_t[]){2, 2, 2, 1});
  /* ratios a little off 1 still give exactly n */
  expect_blocks(3000000000, (double[]){0.3333333, 0.3333333, 0.3333333}, 3,
                (int64_t[]){1000000000, 1000000000, 1000000000});
  expect_blocks(1000, (double[]){0.5000004, 0.5000004}, 2, (int64_t[]){500, 500});
}

static void test_local_type(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = ir_module_new(a, "t");
  static int dev[] = {0, 1, 2, 3};
  Mesh mh = {.name = "g", .naxis = 2, .axis_name = {"dp", "tp"}, .axis_size = {2, 2}, .dev = dev};
  vec_push(a, &m->mesh, mh);
  double r[] = {0.75, 0.25};
  Sharding s = {.mesh = 0, .axis = {0, 1, -1, -1, -1, -1}, .ratio = {r}};
  Type g = {DT_F32, 2, {8, 6}}, t;
  int64_t begin[2];
  int coord[IR_MAX_MESH_AXES], members[2];
  ir_mesh_coords(&m->mesh.a[0], 3, coord);
  assert_int_equal(coord[0], 1);
  assert_int_equal(coord[1], 1);
  ir_local_type(m, &s, &g, 3, &t, begin);
  assert_int_equal(t.dim[0], 2);
  assert_int_equal(t.dim[1], 3);
  assert_int_equal(begin[0], 6);
  assert_int_equal(begin[1], 3);
  ir_local_type(m, &s, &g, 1, &t, begin);
  assert_int_equal(t.dim[0], 6);
  assert_int_equal(begin[1], 3);
  ir_mesh_group(&m->mesh.a[0], 1, 0, members);
  assert_int_equal(members[0], 1);
  assert_int_equal(members[1], 3);
  ir_mesh_group(&m->mesh.a[0], 2, 1, members);
  assert_int_equal(members[0], 2);
  assert_int_equal(members[1], 3);
  s.partial = true;
  assert_int_equal(ir_partial_axes(m, &s, 2), 0);
  s.axis[1] = -1;
  assert_int_equal(ir_partial_axes(m, &s, 2), 2);
  s.partial_axes = 3;
  char buf[128];
  assert_string_equal(ir_shard_str(m, &s, 2, buf, sizeof buf),
                      "g[dp(0.75, 0.25), *] partial(dp, tp)");
  arena_free(a);
}

/* ---- compiling with diagnostics ---- */

typedef struct Run {
  Arena *a;
  Module *m;
  Diag d;
  char *log;
  size_t len;
} Run;

static const char *model =
    "model mlp(batch B = 4) {\n"
    "  input  x: f32[B, 3]\n"
    "  input  y: i32[B]\n"
    "  param  w: f32[3, 4]\n"
    "  param  b: f32[4]\n"
    "  logits = x @ w + b\n"
    "  loss   = cross_entropy(logits, y)\n"
    "  minimize loss with sgd(lr = 0.1)\n"
    "}\n"
    "cluster c {\n"
    "  node a {\n"
    "    device a0: cpu(gflops = 80, mem = 1GiB)\n"
    "    device a1: cpu(gflops = 80, mem = 1GiB)\n"
    "    device a2: cpu(gflops = 80, mem = 1GiB)\n"
    "    device a3: cpu(gflops = 80, mem = 1GiB)\n"
    "  }\n"
    "  link intra(bw = 20GB/s, lat = 1us)\n"
    "}\n";

/* The model with a parallel block, through the pipeline up to pass `last`;
 * false when a pass reported errors. */
static bool run(Run *r, const char *parallel, unsigned wflags, const char *last) {
  memset(r, 0, sizeof *r);
  r->a = arena_new();
  FILE *out = open_memstream(&r->log, &r->len);
  diag_init(&r->d, out);
  r->d.wflags = wflags;
  char *text = arena_printf(r->a, "%s%s", model, parallel);
  r->m = fe_compile(r->a, src_from_string(r->a, "t.dt", text), NULL, 0, &r->d);
  assert_non_null(r->m);
  bool ok = passes_run(r->m, &r->d, &(PassOptions){.stop_after = last, .verify_each = true}, NULL);
  fflush(r->d.out);
  return ok;
}

static void run_free(Run *r) {
  fclose(r->d.out);
  free(r->log);
  arena_free(r->a);
}

static void test_reshard_warnings(void **state) {
  (void)state;
  Run r;
  assert_true(run(&r, "parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n"
                      " shard y: [dp]\n}\n", W_RESHARD, "spmd"));
  assert_string_equal(
      r.log,
      "t.dt:7:12: warning: all_reduce over 'dp' (4 bytes per step): output 'loss' needs f32[] "
      "as m[], but %loss of 'cross_entropy' gives m[] partial\n"
      "  loss   = cross_entropy(logits, y)\n"
      "           ^\n"
      "t.dt:4:10: warning: all_reduce over 'dp' (48 bytes per step): operand 2 of 'mul' needs "
      "f32[3,4] as m[*, *], but 'matmul' at t.dt:6:14 gives m[*, *] partial\n"
      "  param  w: f32[3, 4]\n"
      "         ^\n"
      "t.dt:5:10: warning: all_reduce over 'dp' (16 bytes per step): operand 2 of 'mul' needs "
      "f32[4] as m[*], but 'sum' at t.dt:7:12 gives m[*] partial\n"
      "  param  b: f32[4]\n"
      "         ^\n"
      "t.dt:8:12: warning: all_reduce over 'dp' (4 bytes per step): output 'loss' needs f32[] "
      "as m[], but %loss of 'cross_entropy' at t.dt:7:12 gives m[] partial\n"
      "  minimize loss with sgd(lr = 0.1)\n"
      "           ^\n");
  assert_int_equal(r.d.nwarn, 4);
  run_free(&r);
  /* without -Wreshard: quiet */
  assert_true(run(&r, "parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n"
                      " shard y: [dp]\n}\n", 0, "spmd"));
  assert_string_equal(r.log, "");
  run_free(&r);
}

/* w's columns split evenly, b's unevenly: the add of x @ w and b cannot keep
 * both; reslicing b moves less than regathering x @ w. */
static void test_conflict_note(void **state) {
  (void)state;
  Run r;
  assert_true(run(&r, "parallel mlp on c {\n mesh m[tp = 2]\n shard w: [*, tp]\n"
                      " shard b: [tp(0.75, 0.25)]\n}\n", 0, "sharding"));
  assert_string_equal(
      r.log,
      "t.dt:6:18: note: operands of 'add' disagree (m[*, tp], m[tp(0.75, 0.25)]): chose m[*, tp], "
      "moving 8 bytes per step; m[*, tp(0.75, 0.25)] would move 32\n"
      "  logits = x @ w + b\n"
      "                 ^\n");
  assert_int_equal(r.d.nerr, 0);
  run_free(&r);
  /* the reshard the note announced */
  assert_true(run(&r, "parallel mlp on c {\n mesh m[tp = 2]\n shard w: [*, tp]\n"
                      " shard b: [tp(0.75, 0.25)]\n}\n", W_RESHARD, "spmd"));
  assert_non_null(strstr(r.log, "t.dt:6:18: warning: all_gather over 'tp' (8 bytes per step), "
                                "then shard_slice over 'tp' (0 bytes per step): operand 2 of "
                                "'add' needs f32[4] as m[tp], but %b of 'load' at t.dt:5:10 "
                                "gives m[tp(0.75, 0.25)]\n"));
  run_free(&r);
}

static void test_errors(void **state) {
  (void)state;
  Run r;
  assert_false(run(&r, "parallel mlp on c {\n mesh m[dp = 3] over a0, a1, a2\n"
                       " shard x: [dp(0.9, 0.05, 0.05), *]\n}\n", 0, "sharding"));
  assert_string_equal(r.log,
                      "t.dt:2:10: error: splitting dimension 0 of 'x' (4) over mesh axis 'dp' "
                      "leaves its device 1 no elements\n"
                      "  input  x: f32[B, 3]\n"
                      "         ^\n");
  run_free(&r);
  assert_false(run(&r, "parallel mlp on c {\n mesh m[dp = 1]\n mesh n[tp = 1]\n"
                       " shard x: [dp, *]\n shard w: [*, tp]\n}\n", 0, "sharding"));
  assert_string_equal(r.log,
                      "t.dt:21:7: error: dtc supports one mesh per model; 'n' is a second one\n"
                      " mesh n[tp = 1]\n"
                      "      ^\n");
  run_free(&r);
}

/* Without a mesh both passes leave the module as it was. */
static void test_no_mesh(void **state) {
  (void)state;
  Run r;
  assert_true(run(&r, "", 0, "spmd"));
  assert_non_null(ir_find_func(r.m, "train_step"));
  assert_non_null(ir_find_func(r.m, "forward"));
  for (int k = 0; k < r.m->func.n; k++) {
    const Func *f = r.m->func.a[k];
    assert_int_equal(f->device, -1);
    for (int j = 0; j < f->inst.n; j++)
      assert_null(f->inst.a[j]->shard);
  }
  assert_null(r.m->global.a[0].shard);
  run_free(&r);
}

/* Per-device IR prints, parses and prints the same; its functions keep
 * their devices and local types. */
static void test_text_form(void **state) {
  (void)state;
  Run r;
  assert_true(run(&r, "parallel mlp on c {\n mesh m[dp = 3] over a0, a1, a2\n shard x: [dp(0.5, 0.25, 0.25), *]\n"
                      " shard y: [dp(0.5, 0.25, 0.25)]\n}\n", 0, "memplan"));
  char *t1 = NULL, *t2 = NULL;
  size_t n1, n2;
  FILE *f = open_memstream(&t1, &n1);
  ir_print(f, r.m);
  fclose(f);
  assert_non_null(strstr(t1, "func @train_step.2 device 2 loc \"t.dt\":1:7 {\n"
                             "  %x = load {global = \"x\"} : f32[1,3] shard m[dp(0.5, 0.25, 0.25), *]"));
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  Module *m = ir_parse(a, src_from_string(a, "t.ir", t1), &d);
  assert_non_null(m);
  assert_true(ir_verify(m, &d));
  const Func *fn = ir_find_func(m, "train_step.1");
  assert_non_null(fn);
  assert_int_equal(fn->device, 1);
  f = open_memstream(&t2, &n2);
  ir_print(f, m);
  fclose(f);
  assert_string_equal(t1, t2);
  free(t1);
  free(t2);
  arena_free(a);
  run_free(&r);
}

static void test_text_errors(void **state) {
  (void)state;
  const char *bad[][2] = {
      {"module t\nmesh m[dp = 2] on [0, 0]\ninput e : f32[] shard m[] partial(tp)\n",
       "t.ir:3:35: error: mesh 'm' has no axis 'tp'\n"},
      {"module t\nmesh m[dp = 2] on [0, 0]\nfunc @f device 2 {\n}\n",
       "t.ir:3:1: error: @f runs on device 2, but the mesh has fewer\n"},
      {"module t\nfunc @f device 0 {\n}\n",
       "t.ir:2:1: error: @f runs on device 0, but there is no mesh\n"},
      {"module t\nmesh m[dp = 2, tp = 1] on [0, 0]\ninput e : f32[2] shard m[dp] partial(dp)\n",
       "t.ir:3:1: error: sharding of e is split and partial over mesh axis 'dp'\n"},
  };
  for (int k = 0; k < COUNTOF(bad); k++) {
    Arena *a = arena_new();
    char *log = NULL;
    size_t n;
    FILE *out = open_memstream(&log, &n);
    Diag d;
    diag_init(&d, out);
    Module *m = ir_parse(a, src_from_string(a, "t.ir", bad[k][0]), &d);
    if (m)
      ir_verify(m, &d);
    fclose(out);
    if (strncmp(log, bad[k][1], strlen(bad[k][1])))
      fail_msg("case %d: got\n%s", k, log);
    free(log);
    arena_free(a);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_blocks),          cmocka_unit_test(test_local_type),
      cmocka_unit_test(test_reshard_warnings), cmocka_unit_test(test_conflict_note),
      cmocka_unit_test(test_errors),          cmocka_unit_test(test_no_mesh),
      cmocka_unit_test(test_text_form),       cmocka_unit_test(test_text_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
