/* test_plan.c: the planner (passes/plan.c): ratios by device speed against the
 * closed form, integer blocks against an independent largest remainder, even
 * plans, user ratios kept, memory limits, the diagnostic for a device too small, the report's
 * predicted times, determinism, and the planning time of a 64-device cluster. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

/* A batch of 96 divides over three devices, as an even `dp` split needs. */
static const char model[] =
  "model mlp(batch B = 96) {\n"
  "  input  x: f32[B, 32]\n"
  "  input  y: i32[B]\n"
  "  param  w1: f32[32, 64]\n"
  "  param  b1: f32[64]\n"
  "  param  w2: f32[64, 10]\n"
  "  loss   = cross_entropy(relu(x @ w1 + b1) @ w2, y)\n"
  "  minimize loss with sgd(lr = 0.1)\n"
  "}\n";

/* Devices of 80, 40 and 40 GFLOP/s; the link is fast enough to neglect. */
static const char cluster3[] =
  "cluster c {\n"
  "  node a {\n"
  "    device a0: cpu(gflops = 80, mem = %s)\n"
  "    device a1: cpu(gflops = 40, mem = 1GiB)\n"
  "    device a2: cpu(gflops = 40, mem = %s)\n"
  "  }\n"
  "  link intra(bw = 1000TB/s, lat = 1ns)\n"
  "}\n"
  "parallel mlp on c {\n"
  "  mesh m[dp = 3]\n"
  "  shard x: [dp, *]\n"
  "  shard y: [dp]\n"
  "  plan %s\n"
  "}\n";

typedef struct Run {
  Arena *a;
  Diag d;
  char *log;
  size_t len;
  Module *m;
} Run;

/* Compiles text and runs the passes up to `last`; false when one reported
 * errors (the messages are in r->log). */
static bool run_text(Run *r, const char *text, const char *const *defs, int ndefs,
                     const char *last) {
  memset(r, 0, sizeof *r);
  r->a = arena_new();
  diag_init(&r->d, open_memstream(&r->log, &r->len));
  r->m = fe_compile(r->a, src_from_string(r->a, "t.dt", text), defs, ndefs, &r->d);
  assert_non_null(r->m);
  bool ok = true;
  for (int k = 0; ok && k < pass_count; k++) {
    ok = pass_table[k].run(r->m, &r->d) && !r->d.nerr;
    if (ok)
      assert_true(ir_verify(r->m, &r->d));
    if (!strcmp(pass_table[k].name, last))
      break;
  }
  fflush(r->d.out);
  return ok;
}

static bool run3(Run *r, const char *mem0, const char *mem2, const char *plan, const char *last) {
  Arena *t = arena_new();
  char *text = arena_printf(t, "%s%s", model, arena_printf(t, cluster3, mem0, mem2, plan));
  bool ok = run_text(r, text, NULL, 0, last);
  arena_free(t);
  return ok;
}

static void done(Run *r) {
  fclose(r->d.out);
  free(r->log);
  arena_free(r->a);
}

static char *report(const Module *m) {
  char *s = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&s, &n);
  plan_report(f, m);
  fclose(f);
  return s;
}

/* Largest remainder written out again: floors of r[c] n, then one element at a
 * time to the largest fractional part, ties to the lower index. */
static void largest_remainder(int64_t n, const double *r, int k, int64_t *out) {
  double frac[8];
  int64_t left = n;
  for (int c = 0; c < k; c++) {
    double want = r[c] * (double)n;
    out[c] = (int64_t)want;
    frac[c] = want - (double)out[c];
    left -= out[c];
  }
  for (; left > 0; left--) {
    int best = 0;
    for (int c = 1; c < k; c++)
      if (frac[c] > frac[best])
        best = c;
    out[best]++;
    frac[best] = -1;
  }
}

/* Memory the planner's model charges: whole globals, then split globals plus
 * the step's values (an independent count over @train_step). */
static void memory_terms(const Module *m, double *fixed, double *scaled) {
  *fixed = *scaled = 0;
  for (int i = 0; i < m->global.n; i++) {
    const Global *g = &m->global.a[i];
    double b = (double)type_elems(&g->type) * (double)dtype_size(g->type.dtype);
    if (!strcmp(g->name, "x") || !strcmp(g->name, "y"))
      *scaled += b;
    else
      *fixed += b;
  }
  const Func *f = ir_find_func(m, "train_step");
  for (int i = 0; i < f->inst.n; i++) {
    const Inst *x = f->inst.a[i];
    if (x->type.dtype != DT_VOID && x->op != OP_load && x->op != OP_const)
      *scaled += (double)type_elems(&x->type) * (double)dtype_size(x->type.dtype);
  }
}

static void test_auto_ratios(void **state) {
  (void)state;
  Run r;
  assert_true(run3(&r, "1GiB", "1GiB", "auto", "plan"));
  double lp[3];
  assert_true(plan_solve(r.m, lp));
  const double want[3] = {0.5, 0.25, 0.25};
  for (int c = 0; c < 3; c++)
    assert_true(fabs(lp[c] - want[c]) < 1e-6);
  const Global *x = ir_find_global(r.m, "x"), *y = ir_find_global(r.m, "y");
  assert_non_null(x->shard->ratio[0]);
  assert_ptr_equal(x->shard->ratio[0], y->shard->ratio[0]);
  const double *ratio = x->shard->ratio[0];
  for (int c = 0; c < 3; c++)
    assert_true(fabs(ratio[c] - want[c]) < 1e-6);

  int64_t got[3], ref[3];
  ir_blocks(64, ratio, 3, got);
  assert_int_equal(got[0], 32);
  assert_int_equal(got[1], 16);
  assert_int_equal(got[2], 16);
  ir_blocks(10, ratio, 3, got);
  largest_remainder(10, want, 3, ref);
  for (int c = 0; c < 3; c++)
    assert_int_equal(got[c], ref[c]);
  assert_int_equal(ref[0] + ref[1] + ref[2], 10);
  for (int c = 0; c < 3; c++) {
    Type t;
    ir_local_type(r.m, x->shard, &x->type, c, &t, NULL);
    assert_int_equal(t.dim[0], 96 * want[c]);
  }
  done(&r);
}

static void test_even(void **state) {
  (void)state;
  Run r;
  assert_true(run3(&r, "1GiB", "1GiB", "even", "spmd"));
  const Global *x = ir_find_global(r.m, "x");
  assert_null(x->shard->ratio[0]);
  for (int c = 0; c < 3; c++) {
    Type t;
    ir_local_type(r.m, x->shard, &x->type, c, &t, NULL);
    assert_int_equal(t.dim[0], 32);
  }
  char *s = report(r.m);
  assert_non_null(strstr(s, "(plan even)"));
  free(s);
  done(&r);
}

/* Under plan auto, ratios the annotations write are the user's: kept. */
static void test_user_ratios_kept(void **state) {
  (void)state;
  Run r;
  Arena *t = arena_new();
  char *text = arena_printf(t, "%s%s", model, arena_printf(t, cluster3, "1GiB", "1GiB", "auto"));
  char *x = strstr(text, "[dp, *]"), *y = strstr(text, "[dp]\n");
  *x = *y = 0;
  text = arena_printf(t, "%s[dp(0.2, 0.4, 0.4), *]%s[dp(0.2, 0.4, 0.4)]%s", text, x + 7, y + 4);
  assert_true(run_text(&r, text, NULL, 0, "plan"));
  const double *ratio = ir_find_global(r.m, "x")->shard->ratio[0];
  assert_non_null(ratio);
  assert_true(ratio[0] == 0.2 && ratio[1] == 0.4 && ratio[2] == 0.4);
  arena_free(t);
  done(&r);
}

/* a0 may hold only 0.4 of the split: it gets 0.4, the others share the rest. */
static void test_memory_limit(void **state) {
  (void)state;
  Run r;
  assert_true(run3(&r, "1GiB", "1GiB", "auto", "autodiff"));
  double fixed, scaled;
  memory_terms(r.m, &fixed, &scaled);
  done(&r);
  Arena *t = arena_new();
  const char *mem = arena_printf(t, "%.0fB", fixed + 0.4 * scaled + 1);
  assert_true(run3(&r, mem, "1GiB", "auto", "plan"));
  arena_free(t);
  const double *ratio = ir_find_global(r.m, "x")->shard->ratio[0];
  assert_non_null(ratio);
  assert_true(fabs(ratio[0] - 0.4) < 1e-5);
  assert_true(fabs(ratio[1] - 0.3) < 1e-5);
  assert_true(fabs(ratio[2] - 0.3) < 1e-5);
  assert_true(fixed + ratio[0] * scaled <= (double)r.m->cluster->dev.a[0].mem);
  done(&r);
}

static void test_memory_too_small(void **state) {
  (void)state;
  Run r;
  assert_false(run3(&r, "1GiB", "1KB", "auto", "plan"));
  assert_int_equal(r.d.nerr, 1);
  assert_non_null(strstr(r.log, "t.dt:19:8: error: device 'a2' has 1000 bytes of memory, "
                                "too few for any share of the step"));
  done(&r);
}

static double parse_times(const char *s, double *even) {
  const char *p = strstr(s, "predicted step: ");
  assert_non_null(p);
  double t;
  assert_int_equal(sscanf(p, "predicted step: %lf ms (even: %lf ms", &t, even), 2);
  return t;
}

static void test_report_and_determinism(void **state) {
  (void)state;
  Run r1, r2;
  assert_true(run3(&r1, "1GiB", "1GiB", "auto", "memplan"));
  assert_true(run3(&r2, "1GiB", "1GiB", "auto", "memplan"));
  char *s1 = report(r1.m), *s2 = report(r2.m);
  assert_string_equal(s1, s2);
  double even, t = parse_times(s1, &even);
  assert_true(t < even);
  assert_non_null(strstr(s1, "bottleneck a0"));

  char *p1 = NULL, *p2 = NULL;
  size_t n1 = 0, n2 = 0;
  FILE *f1 = open_memstream(&p1, &n1), *f2 = open_memstream(&p2, &n2);
  ir_print(f1, r1.m);
  ir_print(f2, r2.m);
  fclose(f1);
  fclose(f2);
  assert_string_equal(p1, p2);
  free(p1);
  free(p2);
  free(s1);
  free(s2);
  done(&r1);
  done(&r2);
}

/* examples/transformer.dt data parallel over 64 devices of three kinds in
 * eight nodes: the time to plan, and the predicted speed-up over even. */
static void test_transformer_64(void **state) {
  (void)state;
  FILE *f = fopen(DTC_TEST_EXAMPLES "/transformer.dt", "r");
  assert_non_null(f);
  static char src[1 << 16];
  size_t n = fread(src, 1, sizeof src - 1, f);
  fclose(f);
  src[n] = 0;
  Arena *t = arena_new();
  char *text = arena_printf(t, "%s\ncluster big {\n", src);
  static const double speed[] = {160, 160, 160, 80, 80, 80, 40, 40};
  for (int node = 0; node < 8; node++) {
    text = arena_printf(t, "%s  node n%d {\n", text, node);
    for (int d = 0; d < 8; d++)
      text = arena_printf(t, "%s    device d%d_%d: cpu(gflops = %g, mem = 4GiB)\n", text, node,
                          d, speed[node]);
    text = arena_printf(t, "%s  }\n", text);
  }
  text = arena_printf(t,
                      "%s  link intra(bw = 20GB/s, lat = 1us)\n"
                      "  link inter(bw = 10GB/s, lat = 5us)\n}\n"
                      "parallel gpt on big {\n  mesh m[dp = 64]\n"
                      "  shard ids: [dp, *]\n  shard next: [dp, *]\n}\n",
                      text);
  const char *defs[] = {"B=512"};
  Run r;
  assert_true(run_text(&r, text, defs, 1, "autodiff"));
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  assert_true(pass_plan(r.m, &r.d));
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
  char *s = report(r.m);
  double even, step = parse_times(s, &even);
  printf("transformer.dt, B=512 on 64 devices (24 x 160, 24 x 80, 16 x 40 GFLOP/s): "
         "planned in %.2f ms; predicted step %.4f ms, even %.4f ms, speed-up %.3fx\n",
         ms, step, even, even / step);
  assert_true(ms < 1000);
  assert_true(step < even);
  const double *ratio = ir_find_global(r.m, "ids")->shard->ratio[0];
  assert_non_null(ratio);
  assert_true(fabs(ratio[0] / ratio[63] - 4) < 1e-3);
  free(s);
  arena_free(t);
  done(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_auto_ratios),
    cmocka_unit_test(test_even),
    cmocka_unit_test(test_user_ratios_kept),
    cmocka_unit_test(test_memory_limit),
    cmocka_unit_test(test_memory_too_small),
    cmocka_unit_test(test_report_and_determinism),
    cmocka_unit_test(test_transformer_64),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
