/* accum_steps.c: gradient accumulation in compiled models (tests/e2e/
 * accum_*.dt, least squares y = x @ w by mse, 3 calls per update).
 *
 *     accum_steps exact          plain SGD over 3 calls of 4 rows against one
 *                                step on the 12 rows (accum_sgd_big.dt), for
 *                                4 windows: within 1e-6 of the largest weight
 *                                after each window; the calls inside a window
 *                                leave w as it was, bit for bit, and the
 *                                accumulator holds their gradients' sum
 *     accum_steps torch adam|momentum
 *                                12 calls printed for opt_torch.py (the initial
 *                                weights, each call's batch, its loss and the
 *                                weights after it)
 *     accum_steps resume DIR     Adam: 9 calls against 2 calls, a save (inside
 *                                the first window), a fresh model loading it
 *                                and 7 more calls: params and every state
 *                                alike bit for bit, the call counter restored
 *
 * Exit 0 when the checks hold, 1 with a message otherwise. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dtrt.h"
#include "lsqa.h"
#include "lsqm.h"
#include "lsqn.h"
#include "lsqw.h"

enum { B = 4, K = 3, I = 3, O = 2, W = I * O };

static int fail(const char *what) {
  fprintf(stderr, "accum_steps: %s\n", what);
  return 1;
}

static void print(const char *what, const float *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

/* n rows of micro-batch s: x [n, I], y [n, O]. */
static void batch(float *x, float *y, int s, int n) {
  for (int k = 0; k < n * I; k++)
    x[k] = (float)(((k + 5 * s) * 7 % 11) - 5) / 4;
  for (int k = 0; k < n * O; k++)
    y[k] = (float)(((k + 3 * s) * 5 % 7) - 3) / 2;
}

static void init(float *w) {
  for (int k = 0; k < W; k++)
    w[k] = (float)((k * 3 % 5) - 2) / 3;
}

static float *tensor(void *m, const char *name) { return dtrt_model_tensor((DtModel *)m, name); }

/* K calls of B rows equal one step on their K B rows. */
static int exact(void) {
  lsqa *a;
  lsqw *big;
  if (lsqa_create(&a, 1) || lsqw_create(&big, 1))
    return fail("cannot create the models");
  float *wa = tensor(a, "w"), *acc = tensor(a, "w__acc"), *ww = tensor(big, "w");
  if (!wa || !acc || !ww)
    return fail("no w or w__acc");
  init(wa);
  init(ww);
  double worst = 0;
  for (int win = 0; win < 4; win++) {
    float xb[K * B * I], yb[K * B * O], loss, sum[W] = {0};
    batch(xb, yb, win, K * B);
    for (int j = 0; j < K; j++) {
      float before[W], lb;
      memcpy(before, wa, sizeof before);
      if (lsqa_train_step(a, xb + j * B * I, B * I, yb + j * B * O, B * O, &lb))
        return fail(lsqa_error(a));
      if (j < K - 1 && memcmp(before, wa, sizeof before))
        return fail("a call inside a window moved w");
      /* mse's gradient of the call's rows: 2 x^T (x w - y) / (B O) */
      for (int r = 0; r < B; r++)
        for (int o = 0; o < O; o++) {
          const float *xr = xb + (j * B + r) * I;
          double e = -yb[(j * B + r) * O + o];
          for (int i = 0; i < I; i++)
            e += (double)xr[i] * before[i * O + o];
          for (int i = 0; i < I; i++)
            sum[i * O + o] += (float)(2 * xr[i] * e / (B * O));
        }
      for (int k = 0; k < W && j < K - 1; k++)
        if (fabsf(acc[k] - sum[k]) > 1e-5f * (1 + fabsf(sum[k])))
          return fail("w__acc is not the sum of the window's gradients");
    }
    for (int k = 0; k < W; k++)
      if (acc[k] != 0)
        return fail("the update left w__acc set");
    if (lsqw_train_step(big, xb, K * B * I, yb, K * B * O, &loss))
      return fail(lsqw_error(big));
    double big_w = 0, d = 0;
    for (int k = 0; k < W; k++) {
      big_w = fmax(big_w, fabs(ww[k]));
      d = fmax(d, fabs((double)wa[k] - ww[k]));
    }
    worst = fmax(worst, d / big_w);
  }
  if (lsqa_step(a) != 4 * K || lsqw_step(big) != 4)
    return fail("the step counters do not count calls");
  printf("exact: 4 windows of %d calls against 4 steps on %d rows: w within %.2g of the "
         "largest weight\n", K, K * B, worst);
  lsqa_destroy(a);
  lsqw_destroy(big);
  return worst <= 1e-6 ? 0 : fail("the accumulated steps differ from the whole-batch ones");
}

#define TRACE(M)                                                          \
  static int trace_##M(int calls) {                                       \
    M *m;                                                                 \
    if (M##_create(&m, 1))                                                \
      return fail("cannot create the model");                             \
    float *w = tensor(m, "w");                                            \
    init(w);                                                              \
    print("w0", w, W);                                                    \
    for (int s = 0; s < calls; s++) {                                     \
      float x[B * I], y[B * O], loss;                                     \
      batch(x, y, s, B);                                                  \
      print("x", x, B * I);                                               \
      print("y", y, B * O);                                               \
      if (M##_train_step(m, x, B * I, y, B * O, &loss))                   \
        return fail(M##_error(m));                                        \
      printf("loss %.9g\n", loss);                                        \
      print("w", w, W);                                                   \
    }                                                                     \
    M##_destroy(m);                                                       \
    return 0;                                                             \
  }
TRACE(lsqm)
TRACE(lsqn)

static const char *const state[] = {"w", "w__m", "w__v", "w__acc"};

/* Calls [from, to) of lsqm on their batches. */
static int run(lsqm *m, int from, int to) {
  for (int s = from; s < to; s++) {
    float x[B * I], y[B * O], loss;
    batch(x, y, s, B);
    if (lsqm_train_step(m, x, B * I, y, B * O, &loss))
      return fail(lsqm_error(m));
  }
  return 0;
}

/* A checkpoint saved after call 2 of a window of 3, resumed by another model. */
static int resume(const char *dir) {
  char path[4096];
  snprintf(path, sizeof path, "%s/accum.safetensors", dir);
  lsqm *ref, *a, *b;
  if (lsqm_create(&ref, 1) || lsqm_create(&a, 1) || lsqm_create(&b, 7))
    return fail("cannot create the models");
  init(tensor(ref, "w"));
  init(tensor(a, "w"));
  if (run(ref, 0, 9) || run(a, 0, 2))
    return 1;
  float held[W];
  memcpy(held, tensor(a, "w__acc"), sizeof held);
  bool any = false;
  for (int k = 0; k < W; k++)
    any |= held[k] != 0;
  if (!any)
    return fail("no gradient accumulated after 2 calls");
  if (lsqm_save(a, path))
    return fail(lsqm_error(a));
  lsqm_destroy(a);
  if (lsqm_load(b, path))
    return fail(lsqm_error(b));
  if (lsqm_step(b) != 2 || memcmp(held, tensor(b, "w__acc"), sizeof held))
    return fail("the load did not restore the call counter and the accumulator");
  if (run(b, 2, 9))
    return 1;
  for (int k = 0; k < (int)(sizeof state / sizeof state[0]); k++)
    if (memcmp(tensor(ref, state[k]), tensor(b, state[k]), sizeof(float) * W)) {
      fprintf(stderr, "accum_steps: %s differs after the resume\n", state[k]);
      return 1;
    }
  printf("resume: saved after call 2 of 3, resumed for calls 3 to 9: w, w__m, w__v and "
         "w__acc equal the uninterrupted run's bit for bit\n");
  lsqm_destroy(ref);
  lsqm_destroy(b);
  remove(path);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "exact"))
    return exact();
  if (argc == 3 && !strcmp(argv[1], "torch") && !strcmp(argv[2], "adam"))
    return trace_lsqm(12);
  if (argc == 3 && !strcmp(argv[1], "torch") && !strcmp(argv[2], "momentum"))
    return trace_lsqn(12);
  if (argc == 3 && !strcmp(argv[1], "resume"))
    return resume(argv[2]);
  fprintf(stderr, "usage: accum_steps exact | torch adam|momentum | resume DIR\n");
  return 2;
}
