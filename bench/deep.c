/* deep.c: what depth costs. For examples/gpt.dt at L = 1, 12, 48 and 96 it
 * times dtc compiling the model to an object, against L = 1 in the same run;
 * it times `plan auto` of the 96-layer model on 64 and on 1024 devices of
 * three kinds in two-level links; and it times the training step of the
 * looped model (gpt.dt at L = 4) against the same model written out layer by
 * layer (tests/deep/unroll.c), both compiled by dtc and linked here. One JSON
 * line per measurement, medians in ms with their range.
 *
 *     build/bench/deep [REPS]
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench.h"
#include "frontend.h"
#include "gpt.h"
#include "gptu.h"
#include "ir.h"
#include "passes.h"

extern char **environ;

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  static char src[1 << 16];
  size_t n = f ? fread(src, 1, sizeof src - 1, f) : 0;
  if (!f || n == 0 || n == sizeof src - 1) {
    fprintf(stderr, "deep: cannot read '%s'\n", path);
    exit(1);
  }
  fclose(f);
  src[n] = 0;
  return src;
}

/* Wall time of dtc compiling gpt.dt at `layers` to an object, in ms. */
static double compile_once(int layers) {
  char def[32], out[64];
  snprintf(def, sizeof def, "L=%d", layers);
  snprintf(out, sizeof out, "deep_gpt_%d.o", layers);
  char *argv[] = {DTC_BENCH_DTC, DTC_BENCH_EXAMPLES "/gpt.dt", "-D", def, "-o", out, NULL};
  double t0 = now_ms();
  pid_t pid;
  int st;
  if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) || waitpid(pid, &st, 0) != pid ||
      !WIFEXITED(st) || WEXITSTATUS(st)) {
    fprintf(stderr, "deep: dtc failed at L = %d\n", layers);
    exit(1);
  }
  double t = now_ms() - t0;
  remove(out);
  snprintf(out, sizeof out, "deep_gpt_%d.h", layers);
  remove(out);
  return t;
}

/* nodes of `per` devices, a third of the nodes at each speed */
static char *cluster_text(Arena *a, const char *src, int nodes, int per) {
  static const double speed[] = {160, 80, 40};
  int n = nodes * per;
  char *t = arena_printf(a, "%s\ncluster big {\n", src);
  for (int node = 0; node < nodes; node++) {
    t = arena_printf(a, "%s  node n%d {\n", t, node);
    for (int d = 0; d < per; d++)
      t = arena_printf(a, "%s    device d%d_%d: cpu(gflops = %g, mem = 16GiB)\n", t, node, d,
                       speed[node * 3 / nodes]);
    t = arena_printf(a, "%s  }\n", t);
  }
  return arena_printf(a,
                      "%s  link intra(bw = 20GB/s, lat = 1us)\n"
                      "  link inter(bw = 10GB/s, lat = 5us)\n}\n"
                      "parallel gpt on big {\n  mesh m[dp = %d]\n"
                      "  shard ids: [dp, *]\n  shard next: [dp, *]\n  plan auto\n}\n",
                      t, n);
}

/* The plan pass's time on gpt.dt of `layers` over nodes x per devices; the
 * predicted step into *step. */
static double plan_once(const char *src, int layers, int nodes, int per, double *step) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  char bdef[32], ldef[32];
  snprintf(bdef, sizeof bdef, "B=%d", nodes * per);
  snprintf(ldef, sizeof ldef, "L=%d", layers);
  const char *defs[] = {bdef, ldef};
  Module *m = fe_compile(a, src_from_string(a, "gpt.dt", cluster_text(a, src, nodes, per)), defs,
                         2, &d);
  double ms = -1;
  PassRun run;
  if (m && !d.nerr && passes_run(m, &d, &(PassOptions){.stop_after = "plan"}, &run) && run.plan) {
    ms = run.ms[pass_lookup("plan") - pass_table];
    *step = run.plan->step;
  }
  arena_free(a);
  return ms;
}

static void report(const char *what, double *t, int n, const char *extra) {
  double med = median(t, n);
  printf("{\"bench\": \"%s\", %s, \"%s\": %.3f, \"min_ms\": %.3f, \"max_ms\": %.3f}\n", "deep",
         extra, what, med, t[0], t[n - 1]);
}

static void fill_ids(int32_t *p, int n, uint32_t seed) {
  for (int k = 0; k < n; k++) {
    seed = seed * 1664525u + 1013904223u;
    p[k] = (int32_t)((seed >> 8) % GPT_DIM_V);
  }
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  if (reps < 1) {
    fprintf(stderr, "usage: deep [REPS]\n");
    return 1;
  }
  double *t = malloc(sizeof *t * (size_t)(reps > 20 ? reps : 20));

  /* compile time against depth */
  static const int depth[] = {1, 12, 48, 96};
  double base = 0;
  for (int k = 0; k < 4; k++) {
    for (int r = 0; r < reps; r++)
      t[r] = compile_once(depth[k]);
    double med = median(t, reps);
    base = k ? base : med;
    char extra[128];
    snprintf(extra, sizeof extra, "\"what\": \"compile\", \"layers\": %d, \"compile_L_over_1\": %.3f",
             depth[k], med / base);
    report("compile_ms", t, reps, extra);
  }

  /* planning time at L = 96 */
  const char *src = read_text(DTC_BENCH_EXAMPLES "/gpt.dt");
  static const int shape[][2] = {{8, 8}, {64, 16}};
  for (int k = 0; k < 2; k++) {
    double step = 0;
    int n = reps < 3 ? reps : 3;
    for (int r = 0; r < n; r++)
      if ((t[r] = plan_once(src, 96, shape[k][0], shape[k][1], &step)) < 0) {
        fprintf(stderr, "deep: planning failed\n");
        return 1;
      }
    char extra[160];
    snprintf(extra, sizeof extra,
             "\"what\": \"plan auto\", \"layers\": 96, \"devices\": %d, \"predicted_step_ms\": %.3f",
             shape[k][0] * shape[k][1], step * 1e3);
    report("plan_ms", t, n, extra);
  }

  /* the looped step against the unrolled one, alternating */
  gpt *lm;
  gptu *um;
  if (gpt_create(&lm, 1) || gptu_create(&um, 1)) {
    fprintf(stderr, "deep: %s\n", gpt_error(NULL));
    return 1;
  }
  static int32_t ids[GPT_IDS_ELEMS], next[GPT_NEXT_ELEMS];
  fill_ids(ids, GPT_IDS_ELEMS, 1);
  fill_ids(next, GPT_NEXT_ELEMS, 2);
  int steps = 5 * reps;
  double *tl = malloc(sizeof *tl * (size_t)steps), *tu = malloc(sizeof *tu * (size_t)steps);
  for (int s = -2; s < steps; s++) {   /* two warm-up steps each */
    float loss;
    double t0 = now_ms();
    if (gpt_train_step(lm, ids, GPT_IDS_ELEMS, next, GPT_NEXT_ELEMS, &loss)) {
      fprintf(stderr, "deep: %s\n", gpt_error(lm));
      return 1;
    }
    double t1 = now_ms();
    if (gptu_train_step(um, ids, GPTU_IDS_ELEMS, next, GPTU_NEXT_ELEMS, &loss)) {
      fprintf(stderr, "deep: %s\n", gptu_error(um));
      return 1;
    }
    double t2 = now_ms();
    if (s >= 0)
      tl[s] = t1 - t0, tu[s] = t2 - t1;
  }
  double ml = median(tl, steps), mu = median(tu, steps);
  printf("{\"bench\": \"deep\", \"what\": \"train step\", \"layers\": %d, \"looped_ms\": %.3f, "
         "\"looped_min_ms\": %.3f, \"looped_max_ms\": %.3f, \"unrolled_ms\": %.3f, "
         "\"unrolled_min_ms\": %.3f, \"unrolled_max_ms\": %.3f, \"looped_over_unrolled\": %.3f}\n",
         GPT_DIM_L, ml, tl[0], tl[steps - 1], mu, tu[0], tu[steps - 1], ml / mu);
  gpt_destroy(lm);
  gptu_destroy(um);
  free(t);
  free(tl);
  free(tu);
  return 0;
}
