/* loss_steps.c: the value and the gradient of a loss written on the command
 * line, through the reference interpreter, on logits z f32[6, 4] (a param),
 * labels y i32[6] and targets t f32[6, 4], printed as text for
 * loss_torch.py: z, y, t, the loss and dz. The gradient is read off one
 * sgd(lr = 1) step. LABELS, if given, is six comma-separated labels.
 *
 *     loss_steps 'cross_entropy(z, y, ignore_index = 2)' [LABELS]
 */
#include <stdio.h>
#include <stdlib.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { N = 6, C = 4 };

static void print(const char *what, const float *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: loss_steps LOSS [LABELS]\n");
    return 2;
  }
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const char *text = arena_printf(a,
                                  "model q() {\n"
                                  "  input  y: i32[%d]\n"
                                  "  input  t: f32[%d, %d]\n"
                                  "  param  z: f32[%d, %d]\n"
                                  "  loss   = %s\n"
                                  "  minimize loss with sgd(lr = 1)\n"
                                  "}\n",
                                  N, N, C, N, C, argv[1]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m || !passes_run(m, &d, &(PassOptions){.stop_after = "autodiff", .verify_each = true}, NULL))
    return 1;
  Interp *it = interp_new(m);
  int32_t y[N] = {0, 3, 1, 2, 3, 1};
  if (argc == 3) {
    char *p = argv[2];
    for (int k = 0; k < N; k++, p++)
      y[k] = (int32_t)strtol(p, &p, 10);
  }
  float z[N * C], t[N * C], g[N * C];
  for (int k = 0; k < N * C; k++) {
    z[k] = (float)((k * 7 % 13) - 6) / 2;   /* logits up to +-3 */
    t[k] = (float)(k * 5 % 9) / 8;          /* targets in [0, 1] */
  }
  float y_f[N];
  for (int k = 0; k < N; k++)
    y_f[k] = (float)y[k];
  interp_set_global(it, "y", y);
  interp_set_global(it, "t", t);
  interp_set_global(it, "z", z);
  print("z", z, N * C);
  print("y", y_f, N);
  print("t", t, N * C);
  float loss;
  if (interp_run(it, "train_step", (void *[]){&loss})) {
    const float *z1 = interp_global(it, "z");
    for (int k = 0; k < N * C; k++)
      g[k] = z[k] - z1[k];
    printf("loss %.9g\n", loss);
    print("dz", g, N * C);
  } else {
    printf("error %s\n", interp_error(it));
  }
  interp_free(it);
  arena_free(a);
  return 0;
}
