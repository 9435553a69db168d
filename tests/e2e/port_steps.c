/* port_steps.c: examples/nanogpt.dt and examples/resnet.dt started from
 * weights in a safetensors file (their NAME_load_params), for
 * tests/e2e/nanogpt_torch.py and resnet_torch.py: the forward's logits on
 * batch 0, STEPS training steps, step s on batch s mod S, then the
 * forward's logits on batch 0 again. Prints "logits0 v0 v1 ...", one line
 * "loss S VALUE" a step, then "logits1 ...".
 *
 *   port_steps nanogpt|resnet WEIGHTS DIR STEPS
 *
 * DIR holds S batches: for nanogpt idx.npy and targets.npy, i32[S, B, T];
 * for resnet x.npy f32[S, B, 3, H, W] and y.npy i32[S, B]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "nanogpt.h"
#include "resnet.h"

static int fail(const char *what, const char *why) {
  fprintf(stderr, "port_steps: %s: %s\n", what, why);
  return 1;
}

static void print(const char *name, const float *v, int64_t n) {
  printf("%s", name);
  for (int64_t k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

/* DIR/NAME.npy into d: batches of `elems` elements of dtype, *nb of them. */
static int read_batches(DtrtCtx *ctx, const char *dir, const char *name, int dtype,
                        int64_t elems, DtData *d, int64_t *nb) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  if (dtrt_read_npy(ctx, path, d))
    return fail(path, dtrt_errmsg(ctx));
  int64_t n = 1;
  for (int k = 0; k < d->t.rank; k++)
    n *= d->t.dim[k];
  if (d->t.dtype != dtype || d->t.rank < 1 || n != d->t.dim[0] * elems)
    return fail(path, "not batches of the model's input");
  if (*nb && *nb != d->t.dim[0])
    return fail(path, "another count of batches than the other input's");
  *nb = d->t.dim[0];
  return 0;
}

static int run_nanogpt(DtrtCtx *ctx, const char *weights, const char *dir, int steps) {
  enum { NI = NANOGPT_IDX_ELEMS, NT = NANOGPT_TARGETS_ELEMS, NL = NANOGPT_LOGITS_ELEMS };
  DtData idx = {0}, tgt = {0};
  static float logits[NL];
  int64_t nb = 0;
  nanogpt *m = NULL;
  int rc = read_batches(ctx, dir, "idx", DTRT_I32, NI, &idx, &nb) ||
           read_batches(ctx, dir, "targets", DTRT_I32, NT, &tgt, &nb);
  if (!rc && nanogpt_create(&m, 1))
    rc = fail("create", nanogpt_error(NULL));
  if (!rc && nanogpt_load_params(m, weights))
    rc = fail("load_params", nanogpt_error(m));
  const int32_t *ids = idx.t.data, *next = tgt.t.data;
  if (!rc && nanogpt_forward(m, ids, NI, logits, NL))
    rc = fail("forward", nanogpt_error(m));
  if (!rc)
    print("logits0", logits, NL);
  for (int s = 0; !rc && s < steps; s++) {
    float loss;
    int64_t b = s % nb;
    if (nanogpt_train_step(m, ids + b * NI, NI, next + b * NT, NT, &loss))
      rc = fail("train_step", nanogpt_error(m));
    else
      printf("loss %d %.9g\n", s, loss);
  }
  if (!rc && nanogpt_forward(m, ids, NI, logits, NL))
    rc = fail("forward", nanogpt_error(m));
  if (!rc)
    print("logits1", logits, NL);
  nanogpt_destroy(m);
  dtrt_data_free(ctx, &idx);
  dtrt_data_free(ctx, &tgt);
  return rc;
}

static int run_resnet(DtrtCtx *ctx, const char *weights, const char *dir, int steps) {
  enum { NX = RESNET_X_ELEMS, NY = RESNET_Y_ELEMS, NL = RESNET_LOGITS_ELEMS };
  DtData x = {0}, y = {0};
  static float logits[NL];
  int64_t nb = 0;
  resnet *m = NULL;
  int rc = read_batches(ctx, dir, "x", DTRT_F32, NX, &x, &nb) ||
           read_batches(ctx, dir, "y", DTRT_I32, NY, &y, &nb);
  if (!rc && resnet_create(&m, 1))
    rc = fail("create", resnet_error(NULL));
  if (!rc && resnet_load_params(m, weights))
    rc = fail("load_params", resnet_error(m));
  const float *xs = x.t.data;
  const int32_t *ys = y.t.data;
  if (!rc && resnet_forward(m, xs, NX, logits, NL))
    rc = fail("forward", resnet_error(m));
  if (!rc)
    print("logits0", logits, NL);
  for (int s = 0; !rc && s < steps; s++) {
    float loss;
    int64_t b = s % nb;
    if (resnet_train_step(m, xs + b * NX, NX, ys + b * NY, NY, &loss))
      rc = fail("train_step", resnet_error(m));
    else
      printf("loss %d %.9g\n", s, loss);
  }
  if (!rc && resnet_forward(m, xs, NX, logits, NL))
    rc = fail("forward", resnet_error(m));
  if (!rc)
    print("logits1", logits, NL);
  resnet_destroy(m);
  dtrt_data_free(ctx, &x);
  dtrt_data_free(ctx, &y);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[1], "nanogpt") && strcmp(argv[1], "resnet"))) {
    fputs("usage: port_steps nanogpt|resnet WEIGHTS DIR STEPS\n", stderr);
    return 2;
  }
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx)
    return fail("context", "out of memory");
  int steps = atoi(argv[4]);
  int rc = !strcmp(argv[1], "nanogpt") ? run_nanogpt(ctx, argv[2], argv[3], steps)
                                       : run_resnet(ctx, argv[2], argv[3], steps);
  dtrt_ctx_free(ctx);
  return rc;
}
