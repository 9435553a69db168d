/* passes.c: how the pipeline's passes scale with the length of a model. For
 * each statement count N it compiles a generated training model of N
 * statements (a chain of matmul + relu and elementwise statements, one
 * weight), runs every pass through passes_run, and prints one JSON line: the
 * frontend's time and each pass's, in ms, with memplan_over_frontend and
 * fusion_over_frontend (a pass that grows faster than the frontend, which is
 * linear, shows as a ratio that grows with N).
 *
 *     build/bench/passes [N ...]        (default 2000 5000 20000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

static char *model_text(Arena *a, int n) {
  size_t cap = (size_t)n * 48 + 512, len = 0;
  char *t = arena_alloc(a, cap);
#define PUT(...) (len += (size_t)snprintf(t + len, cap - len, __VA_ARGS__))
  PUT("model chain(batch B = 8) {\n  input x: f32[B, 16]\n  input y: i32[B]\n"
      "  param w: f32[16, 16]\n  h0 = x @ w\n");
  for (int i = 1; i < n; i++)
    if (i % 3 == 0)
      PUT("  h%d = relu(h%d @ w)\n", i, i - 1);
    else
      PUT("  h%d = h%d * 0.5 + x\n", i, i - 1);
  PUT("  loss = cross_entropy(h%d, y)\n  minimize loss with sgd(lr = 0.1)\n}\n", n - 1);
#undef PUT
  return t;
}

static int run(int n) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  double t0 = now_ms();
  Module *m = fe_compile(a, src_from_string(a, "chain.dt", model_text(a, n)), NULL, 0, &d);
  double fe = now_ms() - t0;
  PassRun run;
  if (!m || !passes_run(m, &d, NULL, &run)) {
    arena_free(a);
    return 1;
  }
  int insts = 0;
  for (int k = 0; k < m->func.n; k++)
    insts += m->func.a[k]->inst.n;
  printf("{\"bench\": \"passes\", \"statements\": %d, \"insts\": %d, \"frontend_ms\": %.1f", n,
         insts, fe);
  for (int k = 0; k < pass_count; k++)
    printf(", \"%s_ms\": %.1f", pass_table[k].name, run.ms[k]);
  int fu = (int)(pass_lookup("fusion") - pass_table);
  int mp = (int)(pass_lookup("memplan") - pass_table);
  printf(", \"fusion_over_frontend\": %.2f, \"memplan_over_frontend\": %.2f}\n", run.ms[fu] / fe,
         run.ms[mp] / fe);
  fflush(stdout);
  arena_free(a);
  return 0;
}

int main(int argc, char **argv) {
  static const int dflt[] = {2000, 5000, 20000};
  int rc = 0;
  for (int k = 1; k < argc; k++) {
    int n = atoi(argv[k]);
    if (n < 1 || n > 10000000) {
      fprintf(stderr, "usage: passes [N ...] (statement counts, 1 to 10000000)\n");
      return 2;
    }
    rc |= run(n);
  }
  for (int k = 0; argc == 1 && k < COUNTOF(dflt); k++)
    rc |= run(dflt[k]);
  return rc;
}
