/* sparse_steps.c: trains a small model of two sparse tables and a dense
 * layer through the reference interpreter, with the optimizer and the first
 * table's embedding_bag call written on the command line, and prints as text
 * what sparse_torch.py needs to redo it: each step's batch (other ids every
 * step, so rows are touched and left alone in turn), the initial weights and
 * the weights after every step.
 *
 *     sparse_steps STEPS 'sparse_adam(lr = 0.01)' \
 *                  'embedding_bag(ids, e1, mode = "sum", per_sample_weights = sw)'
 *
 * ids: i32[4, 3] into e1: f32[9, 5] (sparse); flat: i32[10] cut by offs:
 * i32[4] into e2: f32[7, 5] (sparse, mode mean, padding_idx 1); sw: f32[4, 3];
 * w: f32[10, 1]; loss = mse(concat(a, c) @ w, y). With `plan`, prints the
 * memory plan's buffers of @train_step instead ("buf TYPE"), for the check
 * that no [R, D] gradient of a sparse table is made. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { B = 4, K = 3, N = 10, R1 = 9, R2 = 7, D = 5 };

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

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint32_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (uint32_t)(rng >> 11);
}
static float frand(void) { return (float)(next() % 20001) / 10000.0f - 1.0f; }

/* Step s's batch: ids from a part of each table that moves with s. */
static void batch(int s, int32_t *ids, int32_t *flat, int32_t *offs, float *sw, float *y) {
  for (int j = 0; j < B * K; j++)
    ids[j] = (int32_t)((next() % 6 + (unsigned)s) % R1);
  for (int j = 0; j < N; j++)
    flat[j] = (int32_t)((next() % 5 + 2 * (unsigned)s) % R2);
  int32_t o[B] = {0, 3, 3, 6}; /* bag 1 empty */
  memcpy(offs, o, sizeof o);
  for (int j = 0; j < B * K; j++)
    sw[j] = frand();
  for (int b = 0; b < B; b++)
    y[b] = frand();
}

int main(int argc, char **argv) {
  int steps = argc >= 4 ? atoi(argv[1]) : 0;
  bool plan = argc == 5 && !strcmp(argv[4], "plan");
  if (steps < 1 || argc > 5 || (argc == 5 && !plan)) {
    fprintf(stderr, "usage: sparse_steps STEPS OPTIMIZER CALL [plan]\n");
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
                                  "  input  sw: f32[%d, %d]\n"
                                  "  input  y: f32[%d, 1]\n"
                                  "  param  e1: f32[%d, %d] init normal(std = 0.5) sparse\n"
                                  "  param  e2: f32[%d, %d] init normal(std = 0.5) sparse\n"
                                  "  param  w: f32[%d, 1] init normal(std = 0.5)\n"
                                  "  a      = %s\n"
                                  "  c      = embedding_bag(flat, e2, offs, \"mean\", "
                                  "padding_idx = 1)\n"
                                  "  loss   = mse(concat(a, c, axis = 1) @ w, y)\n"
                                  "  minimize loss with %s\n"
                                  "}\n",
                                  B, K, N, B, B, K, B, R1, D, R2, D, 2 * D, argv[3], argv[2]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m ||
      !passes_run(m, &d,
                  &(PassOptions){.stop_after = plan ? "memplan" : "autodiff", .verify_each = true},
                  NULL))
    return 1;
  if (plan) {
    Func *f = ir_find_func(m, "train_step");
    for (int k = 0; k < f->inst.n; k++)
      if (f->inst.a[k]->offset >= 0) {
        char t[128];
        printf("buf %s %s\n", type_str(&f->inst.a[k]->type, t, sizeof t),
               ir_ops[f->inst.a[k]->op].name);
      }
    arena_free(a);
    return 0;
  }
  Interp *it = interp_new(m);
  float e1[R1 * D], e2[R2 * D], w[2 * D], sw[B * K], y[B];
  int32_t ids[B * K], flat[N], offs[B];
  for (int k = 0; k < R1 * D; k++)
    e1[k] = frand();
  for (int k = 0; k < R2 * D; k++)
    e2[k] = frand();
  for (int k = 0; k < 2 * D; k++)
    w[k] = frand();
  interp_set_global(it, "e1", e1);
  interp_set_global(it, "e2", e2);
  interp_set_global(it, "w", w);
  print("e1", e1, R1 * D);
  print("e2", e2, R2 * D);
  print("w", w, 2 * D);
  for (int s = 0; s < steps; s++) {
    batch(s, ids, flat, offs, sw, y);
    interp_set_global(it, "ids", ids);
    interp_set_global(it, "flat", flat);
    interp_set_global(it, "offs", offs);
    interp_set_global(it, "sw", sw);
    interp_set_global(it, "y", y);
    print_ids("ids", ids, B * K);
    print_ids("flat", flat, N);
    print_ids("offs", offs, B);
    print("sw", sw, B * K);
    print("y", y, B);
    float loss;
    if (!interp_run(it, "train_step", (void *[]){&loss})) {
      fprintf(stderr, "sparse_steps: %s\n", interp_error(it));
      return 1;
    }
    printf("loss %.9g\n", loss);
    print("e1", interp_global(it, "e1"), R1 * D);
    print("e2", interp_global(it, "e2"), R2 * D);
    print("w", interp_global(it, "w"), 2 * D);
  }
  interp_free(it);
  arena_free(a);
  return 0;
}
