/* demo.c: examples/gpt.dt (B 8, T 32, D 64, L 2, V 96) trained STEPS steps
 * (default 300) as a byte-level language model on the text of the docs
 * (every .md of docs/, a token a byte modulo V; each step B windows of T + 1
 * bytes at offsets drawn from a fixed seed, the same for every build), on
 * the ranks it is launched with, by the optimizer it was compiled with
 * (bench/demo.sh builds it with AdamW and with DeMo, data parallel on two
 * ranks). Rank 0 prints one JSON object: the optimizer, the steps, the loss
 * of the first step, the mean loss of the last 20 (final_loss) and its
 * step's time (step_ms: the median over the steps after the first 3, with
 * their range; each rank's own, the data not counted).
 *
 *     mpiexec -n 2 build/bench/demo_adamw [STEPS]
 */
#include <glob.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "dtrt.h"
#include "gpt.h"

enum { B = GPT_IDS_DIM0, T = GPT_IDS_DIM1, V = GPT_DIM_V, LAST = 20, WARM = 3 };

/* Every .md of the docs, in the order of their names. */
static unsigned char *read_docs(size_t *n) {
  glob_t g;
  unsigned char *text = NULL;
  *n = 0;
  if (glob(DTC_BENCH_DOCS "/*.md", 0, NULL, &g))
    return NULL;
  for (size_t k = 0; k < g.gl_pathc; k++) {
    FILE *f = fopen(g.gl_pathv[k], "rb");
    if (!f)
      continue;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = len > 0 ? realloc(text, *n + (size_t)len) : NULL;
    if (p && fread(p + *n, 1, (size_t)len, f) == (size_t)len)
      text = p, *n += (size_t)len;
    else if (p)
      text = p;
    fclose(f);
  }
  globfree(&g);
  return text;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 300;
  size_t n;
  unsigned char *text = read_docs(&n);
  if (steps < LAST || !text || n < T + 2) {
    fprintf(stderr, "usage: demo [STEPS >= %d]; needs the text of %s/*.md\n", LAST, DTC_BENCH_DOCS);
    return 2;
  }
  gpt *m;
  if (gpt_create(&m, 1)) {
    fprintf(stderr, "demo: %s\n", gpt_error(NULL));
    return 1;
  }
  int me = dtrt_model_rank((DtModel *)m);
  static int32_t ids[B * T], next[B * T];
  uint32_t seed = 1;
  double first = 0, last = 0, *ms = malloc(sizeof *ms * (size_t)steps);
  if (!ms)
    return 1;
  for (int s = 0; s < steps; s++) {
    for (int b = 0; b < B; b++) {
      seed = seed * 1664525u + 1013904223u;
      size_t at = (seed >> 4) % (n - T - 1);
      for (int k = 0; k < T; k++) {
        ids[b * T + k] = text[at + k] % V;
        next[b * T + k] = text[at + k + 1] % V;
      }
    }
    float loss;
    double t0 = now_ms();
    int bad = gpt_train_step(m, ids, B * T, next, B * T, &loss);
    ms[s] = now_ms() - t0;
    if (bad) {
      fprintf(stderr, "demo: rank %d: step %d: %s\n", me, s, gpt_error(m));
      return 1;
    }
    if (!s)
      first = loss;
    if (s >= steps - LAST)
      last += loss / LAST;
  }
  double step = median(ms + WARM, steps - WARM);
  if (!me)
    printf("{\"bench\": \"demo_run\", \"optimizer\": \"%s\", \"steps\": %d, \"first_loss\": %.6f, "
           "\"final_loss\": %.6f, \"step_ms\": %.3f, \"step_ms_min\": %.3f, \"step_ms_max\": %.3f}\n",
           OPTIMIZER, steps, first, last, step, ms[WARM], ms[steps - 1]);
  free(ms);
  gpt_destroy(m);
  free(text);
  return 0;
}
