/* plan.c: the planner's own speed. Plans examples/transformer.dt (batch 512)
 * on a 64-device cluster of three kinds (24 x 160, 24 x 80 and 16 x 40
 * GFLOP/s in eight nodes of eight; 20 GB/s inside a node, 10 GB/s between)
 * with `plan auto` (forms and ratios searched) and `plan even` (the parallel
 * block's data-parallel forms, even) in the same run, and prints one JSON
 * line: the median planning time of each, and the predicted step of each
 * plan with their ratio.
 *
 *     build/bench/plan [REPS] [examples/transformer.dt]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

static char *cluster_text(Arena *a, const char *src, const char *plan) {
  static const double speed[] = {160, 160, 160, 80, 80, 80, 40, 40};
  char *t = arena_printf(a, "%s\ncluster big {\n", src);
  for (int node = 0; node < 8; node++) {
    t = arena_printf(a, "%s  node n%d {\n", t, node);
    for (int d = 0; d < 8; d++)
      t = arena_printf(a, "%s    device d%d_%d: cpu(gflops = %g, mem = 4GiB)\n", t, node, d,
                       speed[node]);
    t = arena_printf(a, "%s  }\n", t);
  }
  return arena_printf(a,
                      "%s  link intra(bw = 20GB/s, lat = 1us)\n"
                      "  link inter(bw = 10GB/s, lat = 5us)\n}\n"
                      "parallel gpt on big {\n  mesh m[dp = 64]\n"
                      "  shard ids: [dp, *]\n  shard next: [dp, *]\n  plan %s\n}\n",
                      t, plan);
}

/* Compiles the model through autodiff, then times the plan pass; the
 * predicted step into *step (the plan's) and *block (the parallel block's,
 * even). Negative after an error. */
static double plan_once(const char *src, const char *plan, double *step, double *block) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const char *defs[] = {"B=512"};
  Module *m = fe_compile(a, src_from_string(a, "transformer64.dt", cluster_text(a, src, plan)),
                         defs, 1, &d);
  double ms = -1;
  PassRun run;
  if (m && !d.nerr && passes_run(m, &d, &(PassOptions){.stop_after = "plan"}, &run) && run.plan) {
    ms = run.ms[pass_lookup("plan") - pass_table];
    *step = run.plan->step, *block = run.plan->block;
  }
  arena_free(a);
  return ms;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  const char *path = argc > 2 ? argv[2] : DTC_BENCH_EXAMPLES "/transformer.dt";
  if (reps < 1) {
    fprintf(stderr, "usage: plan [REPS] [transformer.dt]\n");
    return 1;
  }
  FILE *f = fopen(path, "r");
  static char src[1 << 16];
  size_t n = f ? fread(src, 1, sizeof src - 1, f) : 0;
  if (!f || n == 0 || n == sizeof src - 1) {
    fprintf(stderr, "plan: cannot read '%s'\n", path);
    return 1;
  }
  fclose(f);
  src[n] = 0;
  double *ta = malloc(sizeof *ta * (size_t)reps), *te = malloc(sizeof *te * (size_t)reps);
  double step = 0, block = 0, even_step = 0, unused = 0;
  for (int r = 0; r < reps; r++) {
    ta[r] = plan_once(src, "auto", &step, &block);
    te[r] = plan_once(src, "even", &even_step, &unused);
    if (ta[r] < 0 || te[r] < 0) {
      fprintf(stderr, "plan: planning failed\n");
      return 1;
    }
  }
  double ma = median(ta, reps), me = median(te, reps);
  printf("{\"bench\": \"plan64\", \"devices\": 64, \"auto_plan_ms\": %.3f, \"even_plan_ms\": %.3f, "
         "\"auto_over_even_plan_time\": %.2f, \"predicted_auto_ms\": %.4f, "
         "\"predicted_even_ms\": %.4f, \"even_over_auto\": %.3f}\n",
         ma, me, ma / me, step * 1e3, even_step * 1e3, even_step / step);
  free(ta);
  free(te);
  return 0;
}
