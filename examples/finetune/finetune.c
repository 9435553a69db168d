/* finetune.c: fine-tunes examples/finetune/finetune.dt from PyTorch's
 * weights: finetune_load_params reads WEIGHTS (a safetensors file of the
 * model's names, written by finetune_torch.py), then STEPS training steps on
 * the rows of X.npy (f32 [n, I]) and Y.npy (i32 [n]), batch s taking rows
 * s*B .. s*B+B-1 (wrapping around), each step's loss printed as
 * "loss STEP VALUE".
 *
 *   finetune WEIGHTS X.npy Y.npy STEPS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "finetune.h"

enum { B = FINETUNE_BATCH, I = FINETUNE_DIM_I };

static int fail(const char *what, const char *why) {
  fprintf(stderr, "finetune: %s: %s\n", what, why);
  return 1;
}

/* The data: x f32[n, I], y i32[n] with the same n >= 1. */
static int read_data(DtrtCtx *ctx, const char *xp, const char *yp, DtData *x, DtData *y) {
  if (dtrt_read_npy(ctx, xp, x) || dtrt_read_npy(ctx, yp, y))
    return fail("data", dtrt_errmsg(ctx));
  if (x->t.dtype != DTRT_F32 || x->t.rank != 2 || x->t.dim[1] != I || x->t.dim[0] < 1 ||
      y->t.dtype != DTRT_I32 || y->t.rank != 1 || y->t.dim[0] != x->t.dim[0])
    return fail("data", "expected x f32[n, I] and y i32[n]");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fputs("usage: finetune WEIGHTS X.npy Y.npy STEPS\n", stderr);
    return 2;
  }
  int steps = atoi(argv[4]), rc = 0;
  DtrtCtx *ctx = dtrt_ctx_new();
  DtData x = {0}, y = {0};
  finetune *m = NULL;
  if (!ctx)
    return fail("context", "out of memory");
  if ((rc = read_data(ctx, argv[2], argv[3], &x, &y)))
    goto done;
  if (finetune_create(&m, 1)) {
    rc = fail("create", finetune_error(NULL));
    goto done;
  }
  if (finetune_load_params(m, argv[1])) {
    rc = fail("load_params", finetune_error(m));
    goto done;
  }
  int64_t n = x.t.dim[0];
  float xb[B * I];
  int32_t yb[B];
  for (int s = 0; s < steps; s++) {
    for (int r = 0; r < B; r++) {
      int64_t row = ((int64_t)s * B + r) % n;
      memcpy(xb + r * I, (const float *)x.t.data + row * I, sizeof(float) * I);
      yb[r] = ((const int32_t *)y.t.data)[row];
    }
    float loss;
    if (finetune_train_step(m, xb, B * I, yb, B, &loss)) {
      rc = fail("train_step", finetune_error(m));
      goto done;
    }
    printf("loss %d %.9g\n", s, loss);
  }
done:
  finetune_destroy(m);
  dtrt_data_free(ctx, &x);
  dtrt_data_free(ctx, &y);
  dtrt_ctx_free(ctx);
  return rc;
}
