/* denormals.c: the pool's workers run a job in the floating-point mode of
 * the thread that posted it; a step of tests/e2e/denormals.dt flushes
 * denormals, results and operands, on every thread of the pool, and gives
 * the caller back its own mode; built with -fdenormals=ieee (DTC_IEEE) it
 * keeps them. Column j of x is 1e-30 and s[j] 1e-10 for even j (a denormal
 * result), 1e-40 (a denormal operand) and 1e10 for odd j. Exits 77 where
 * libdtrt has no mode to set. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "denormals.h"
#include "dtrt.h"

enum { COLS = DENORMALS_S_ELEMS };

typedef struct Job {
  const float *x, *s;
  float *y;
} Job;

static void product(void *env, int64_t begin, int64_t end) {
  Job *j = env;
  for (int64_t i = begin; i < end; i++)
    j->y[i] = j->x[i] * j->s[i % COLS];
}

/* The pool's workers, made while the caller keeps IEEE denormals, flush in
 * the jobs of a caller that does, and keep them again after. Every result
 * of x s is nonzero with IEEE denormals (a denormal, or the product of one)
 * and zero when they are flushed. */
static int pool_follows(const float *x, const float *s, float *y, int64_t n) {
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx || dtrt_threads(ctx) < 2) {
    fprintf(stderr, "denormals: no pool of 2 threads\n");
    return 1;
  }
  Job j = {x, s, y};
  int bad = 0;
  for (int r = 0; r < 3; r++) {
    bool flush = r == 1;
    uint64_t saved = dtrt_fp_enter(flush ? DT_DENORMALS_FLUSH : DT_DENORMALS_IEEE);
    dtrt_parallel_for(ctx, n, product, &j);
    dtrt_fp_leave(saved);
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++)
      nonzero += y[i] != 0;
    if (flush ? nonzero != 0 : nonzero != n) {
      fprintf(stderr, "denormals: the pool's job %s left %lld of %lld results nonzero\n",
              flush ? "flushing" : "in IEEE mode", (long long)nonzero, (long long)n);
      bad = 1;
    }
  }
  dtrt_ctx_free(ctx);
  return bad;
}

int main(void) {
  setenv("DTRT_NUM_THREADS", "2", 1);
  uint64_t caller = dtrt_fp_mode();
  uint64_t probe = dtrt_fp_enter(DT_DENORMALS_FLUSH);
  bool can_flush = dtrt_fp_mode() != probe;
  dtrt_fp_leave(probe);
  if (!can_flush) {
    puts("denormals: skipped: no floating-point mode to set on this CPU");
    return 77;
  }
  static float x[DENORMALS_X_ELEMS], s[COLS], y[DENORMALS_Y_ELEMS];
  volatile float tiny = 1e-30f, denormal = 1e-40f, down = 1e-10f, up = 1e10f;
  for (int j = 0; j < COLS; j++)
    s[j] = j % 2 ? up : down;
  for (int i = 0; i < DENORMALS_X_ELEMS; i++)
    x[i] = i % COLS % 2 ? denormal : tiny;
  /* in the caller's (IEEE) mode */
  float ieee[2] = {tiny * down, denormal * up};
  if (!(ieee[0] > 0 && ieee[0] < 1.17549435e-38f && ieee[1] > 1e-31f)) {
    fprintf(stderr, "denormals: the caller's own mode flushes\n");
    return 1;
  }
  if (pool_follows(x, s, y, DENORMALS_Y_ELEMS))
    return 1;
  denormals *m;
  if (denormals_create(&m, 1)) {
    fprintf(stderr, "denormals: create failed\n");
    return 1;
  }
  int bad = 0;
  for (int rep = 0; rep < 3; rep++) {
    if (denormals_forward(m, x, DENORMALS_X_ELEMS, s, COLS, y, DENORMALS_Y_ELEMS)) {
      fprintf(stderr, "denormals: %s\n", denormals_error(m));
      return 1;
    }
    if (dtrt_fp_mode() != caller) {
      fprintf(stderr, "denormals: the step left mode %#llx, the caller had %#llx\n",
              (unsigned long long)dtrt_fp_mode(), (unsigned long long)caller);
      return 1;
    }
    for (int i = 0; i < DENORMALS_Y_ELEMS; i++) {
#ifdef DTC_IEEE
      float want = ieee[i % COLS % 2];
#else
      float want = 0.0f;
#endif
      if (y[i] != want && bad++ < 5)
        fprintf(stderr, "denormals: y[%d] (row %d, column %d) is %g, expected %g\n", i, i / COLS,
                i % COLS, y[i], want);
    }
  }
  denormals_destroy(m);
  if (bad)
    return 1;
  puts("denormals: ok");
  return 0;
}
