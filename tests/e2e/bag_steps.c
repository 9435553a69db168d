/* bag_steps.c: an embedding_bag call written on the command line, run
 * through the reference interpreter on fixed tables and ids, printed as text
 * for bag_torch.py: the operands, the result y and the gradients of
 * sum(y * g) in w, sw and sw2, read off one sgd(lr = 1) step. With a third
 * argument, id 9 (outside w's 7 rows) in batch row 2 of ids and of flat's
 * bags, and the error printed.
 *
 *     bag_steps 'embedding_bag(ids, w, mode = "max")' [bad]
 *
 * ids: i32[4, 3]; flat: i32[10] with offs: i32[4] (bags 0-2, none, 3-6,
 * 7-9); w: f32[7, 5], its row 4 a copy of row 3 (ties for max); sw: f32[10]
 * and sw2: f32[4, 3] per-sample weights. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { B = 4, K = 3, N = 10, R = 7, D = 5 };

static void print(const char *what, const float *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

static void print_ids(const char *what, const int32_t *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %d", (int)v[k]);
  printf("\n");
}

/* p0 - p1 of param name after the step: its gradient for lr = 1. */
static void grad(Interp *it, const char *name, const float *p0, int n) {
  const float *p1 = interp_global(it, name);
  float *g = malloc(sizeof(float) * (size_t)n);
  for (int k = 0; k < n; k++)
    g[k] = p0[k] - p1[k];
  printf("d%s", name);
  for (int k = 0; k < n; k++)
    printf(" %.9g", g[k]);
  printf("\n");
  free(g);
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: bag_steps CALL [bad]\n");
    return 2;
  }
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const char *text = arena_printf(a,
                                  "model q() {\n"
                                  "  input  ids: i32[%d, %d]\n"
                                  "  input  flat: i32[%d]\n"
                                  "  input  offs: i32[%d]\n"
                                  "  input  g: f32[%d, %d]\n"
                                  "  param  w: f32[%d, %d]\n"
                                  "  param  sw: f32[%d]\n"
                                  "  param  sw2: f32[%d, %d]\n"
                                  "  y      = %s\n"
                                  "  output y\n"
                                  "  loss   = sum(y * g) + 0 * (sum(w) + sum(sw) + sum(sw2))\n"
                                  "  minimize loss with sgd(lr = 1)\n"
                                  "}\n",
                                  B, K, N, B, B, D, R, D, N, B, K, argv[1]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m || !passes_run(m, &d, &(PassOptions){.stop_after = "autodiff", .verify_each = true}, NULL))
    return 1;
  Interp *it = interp_new(m);
  int32_t ids[B * K] = {1, 0, 2, 2, 2, 2, 6, 1, 1, 3, 4, 0};
  int32_t flat[N] = {5, 1, 2, 0, 6, 2, 3, 3, 4, 1}, offs[B] = {0, 3, 3, 7};
  if (argc == 3)
    ids[7] = flat[5] = 9;
  float w[R * D], sw[N], sw2[B * K], g[B * D], y[B * D], loss;
  for (int k = 0; k < R * D; k++)
    w[k] = (float)(1.5 * sin(0.37 * k + 0.1));
  memcpy(w + 4 * D, w + 3 * D, sizeof(float) * D);
  for (int k = 0; k < N; k++)
    sw[k] = (float)(k % 4) / 2 - 0.7f;
  for (int k = 0; k < B * K; k++)
    sw2[k] = (float)(k % 5) / 3 - 0.5f;
  for (int k = 0; k < B * D; k++)
    g[k] = (float)cos(0.9 * k);
  interp_set_global(it, "ids", ids);
  interp_set_global(it, "flat", flat);
  interp_set_global(it, "offs", offs);
  interp_set_global(it, "g", g);
  interp_set_global(it, "w", w);
  interp_set_global(it, "sw", sw);
  interp_set_global(it, "sw2", sw2);
  print_ids("ids", ids, B * K);
  print_ids("flat", flat, N);
  print_ids("offs", offs, B);
  print("g", g, B * D);
  print("w", w, R * D);
  print("sw", sw, N);
  print("sw2", sw2, B * K);
  if (!interp_run(it, "forward", (void *[]){y, &loss})) {
    printf("error %s\n", interp_error(it));
  } else if (!interp_run(it, "train_step", (void *[]){&loss})) {
    printf("error %s\n", interp_error(it));
  } else {
    print("y", y, B * D);
    grad(it, "w", w, R * D);
    grad(it, "sw", sw, N);
    grad(it, "sw2", sw2, B * K);
  }
  interp_free(it);
  arena_free(a);
  return 0;
}
