/* group_steps.c: trains y = x @ w + b (mse) with the optimizer written on the
 * command line, through the reference interpreter, and prints as text what
 * an independent implementation needs to redo it: the data, the initial
 * params and the params after every step. Used by group_torch.sh against
 * torch.optim with two param groups (w, rank 2; b, rank 1) and
 * torch.optim.lr_scheduler.
 *
 *     group_steps STEPS 'adamw(lr = 0.01, no_decay = [b])'
 */
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
  int steps = argc == 3 ? atoi(argv[1]) : 0;
  if (steps < 1) {
    fprintf(stderr, "usage: group_steps STEPS OPTIMIZER\n");
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
                                  "  param  b: f32[%d] init zeros\n"
                                  "  loss   = mse(x @ w + b, y)\n"
                                  "  minimize loss with %s\n"
                                  "}\n",
                                  B, I, O, I, O, O, argv[2]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m || !passes_run(m, &d, &(PassOptions){.stop_after = "autodiff", .verify_each = true}, NULL))
    return 1;
  Interp *it = interp_new(m);
  float x[B * I], y[B * O], w[I * O], b[O] = {0.75f, -1.25f};
  for (int k = 0; k < B * I; k++)
    x[k] = (float)((k * 7 % 11) - 5) / 4;
  for (int k = 0; k < B * O; k++)
    y[k] = (float)((k * 5 % 7) - 3) / 2;
  for (int k = 0; k < I * O; k++)
    w[k] = (float)((k * 3 % 5) - 2) / 3 + 0.1f;
  interp_set_global(it, "x", x);
  interp_set_global(it, "y", y);
  interp_set_global(it, "w", w);
  interp_set_global(it, "b", b);
  print("x", x, B * I);
  print("y", y, B * O);
  print("w0", w, I * O);
  print("b0", b, O);
  for (int s = 0; s < steps; s++) {
    float loss;
    if (!interp_run(it, "train_step", (void *[]){&loss})) {
      fprintf(stderr, "group_steps: %s\n", interp_error(it));
      return 1;
    }
    printf("loss %.9g\n", loss);
    print("w", interp_global(it, "w"), I * O);
    print("b", interp_global(it, "b"), O);
  }
  interp_free(it);
  arena_free(a);
  return 0;
}
