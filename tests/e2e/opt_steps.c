/* opt_steps.c: trains a small least-squares model (y = x @ w, mse) with the
 * optimizer written on the command line, through the reference interpreter,
 * and prints as text what an independent implementation needs to redo it:
 * the data, the initial weights and the weights after every step. Used by
 * opt_torch.sh against torch.optim. With `vary`, each step trains on a
 * batch of its own, printed before it (gradient accumulation's micro-batches).
 *
 *     opt_steps STEPS 'adam(lr = 0.01, eps = 1e-3)' [vary]
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { B = 4, I = 3, O = 2 };

static void print(const char *what, const float *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

/* Step s's batch (s = 0 the fixed one). */
static void batch(float *x, float *y, int s) {
  for (int k = 0; k < B * I; k++)
    x[k] = (float)(((k + 5 * s) * 7 % 11) - 5) / 4;
  for (int k = 0; k < B * O; k++)
    y[k] = (float)(((k + 3 * s) * 5 % 7) - 3) / 2;
}

int main(int argc, char **argv) {
  int steps = argc == 3 || argc == 4 ? atoi(argv[1]) : 0;
  bool vary = argc == 4 && !strcmp(argv[3], "vary");
  if (steps < 1 || (argc == 4 && !vary)) {
    fprintf(stderr, "usage: opt_steps STEPS OPTIMIZER [vary]\n");
    return 2;
  }
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const char *text = arena_printf(a,
                                  "model q(batch B = %d) {\n"
                                  "  input  x: f32[B, %d]\n"
                                  "  input  y: f32[B, %d]\n"
                                  "  param  w: f32[%d, %d] init normal(std = 0.5)\n"
                                  "  loss   = mse(x @ w, y)\n"
                                  "  minimize loss with %s\n"
                                  "}\n",
                                  B, I, O, I, O, argv[2]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m || !passes_run(m, &d, &(PassOptions){.stop_after = "autodiff", .verify_each = true}, NULL))
    return 1;
  Interp *it = interp_new(m);
  float x[B * I], y[B * O], w[I * O];
  batch(x, y, 0);
  for (int k = 0; k < I * O; k++)   /* near-zero and large gradients alike */
    w[k] = (float)((k * 3 % 5) - 2) / 3;
  interp_set_global(it, "x", x);
  interp_set_global(it, "y", y);
  interp_set_global(it, "w", w);
  print("x", x, B * I);
  print("y", y, B * O);
  print("w0", w, I * O);
  for (int s = 0; s < steps; s++) {
    float loss;
    if (vary && s > 0) {
      batch(x, y, s);
      interp_set_global(it, "x", x);
      interp_set_global(it, "y", y);
      print("x", x, B * I);
      print("y", y, B * O);
    }
    if (!interp_run(it, "train_step", (void *[]){&loss})) {
      fprintf(stderr, "opt_steps: %s\n", interp_error(it));
      return 1;
    }
    printf("loss %.9g\n", loss);
    print("w", interp_global(it, "w"), I * O);
  }
  interp_free(it);
  arena_free(a);
  return 0;
}
