/* rnn_steps.c: examples/lstm.dt and examples/gru.dt from weights in a
 * safetensors file (their NAME_load_params), for tests/e2e/rnn_torch.py:
 * the forward's outputs on the inputs of DIR, then STEPS training steps on
 * them. Prints one line per output, "NAME v0 v1 ...", then "loss S VALUE"
 * for each step.
 *
 *   rnn_steps lstm|gru WEIGHTS DIR STEPS
 *
 * DIR holds xs.npy f32[T, B, F], h0.npy f32[B, H], y.npy f32[T, B, C] and,
 * for the LSTM, c0.npy f32[B, H]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "gru.h"
#include "lstm.h"

enum { MAXIN = 4 };

static int fail(const char *what, const char *why) {
  fprintf(stderr, "rnn_steps: %s: %s\n", what, why);
  return 1;
}

static void print(const char *name, const float *v, int64_t n) {
  printf("%s", name);
  for (int64_t k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

/* DIR/NAME.npy into d, f32 of `elems` elements. */
static int read_input(DtrtCtx *ctx, const char *dir, const char *name, int64_t elems, DtData *d) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.npy", dir, name);
  if (dtrt_read_npy(ctx, path, d))
    return fail(path, dtrt_errmsg(ctx));
  int64_t n = 1;
  for (int k = 0; k < d->t.rank; k++)
    n *= d->t.dim[k];
  if (d->t.dtype != DTRT_F32 || n != elems)
    return fail(path, "not f32 of the model's shape");
  return 0;
}

static const float *F(const DtData *d) { return d->t.data; }

static int run_lstm(DtrtCtx *ctx, const char *weights, const char *dir, int steps) {
  DtData in[MAXIN] = {0};
  static float ys[LSTM_YS_ELEMS], h[LSTM_H_ELEMS], c[LSTM_C_ELEMS];
  lstm *m = NULL;
  int rc = read_input(ctx, dir, "xs", LSTM_XS_ELEMS, &in[0]) ||
           read_input(ctx, dir, "h0", LSTM_H0_ELEMS, &in[1]) ||
           read_input(ctx, dir, "c0", LSTM_C0_ELEMS, &in[2]) ||
           read_input(ctx, dir, "y", LSTM_Y_ELEMS, &in[3]);
  if (!rc && lstm_create(&m, 1))
    rc = fail("create", lstm_error(NULL));
  if (!rc && lstm_load_params(m, weights))
    rc = fail("load_params", lstm_error(m));
  if (!rc && lstm_forward(m, F(&in[0]), LSTM_XS_ELEMS, F(&in[1]), LSTM_H0_ELEMS, F(&in[2]),
                          LSTM_C0_ELEMS, ys, LSTM_YS_ELEMS, h, LSTM_H_ELEMS, c, LSTM_C_ELEMS))
    rc = fail("forward", lstm_error(m));
  if (!rc) {
    print("ys", ys, LSTM_YS_ELEMS);
    print("h", h, LSTM_H_ELEMS);
    print("c", c, LSTM_C_ELEMS);
  }
  for (int s = 0; !rc && s < steps; s++) {
    float loss;
    if (lstm_train_step(m, F(&in[0]), LSTM_XS_ELEMS, F(&in[1]), LSTM_H0_ELEMS, F(&in[2]),
                        LSTM_C0_ELEMS, F(&in[3]), LSTM_Y_ELEMS, &loss))
      rc = fail("train_step", lstm_error(m));
    else
      printf("loss %d %.9g\n", s, loss);
  }
  lstm_destroy(m);
  for (int k = 0; k < MAXIN; k++)
    dtrt_data_free(ctx, &in[k]);
  return rc;
}

static int run_gru(DtrtCtx *ctx, const char *weights, const char *dir, int steps) {
  DtData in[MAXIN] = {0};
  static float ys[GRU_YS_ELEMS], h[GRU_H_ELEMS];
  gru *m = NULL;
  int rc = read_input(ctx, dir, "xs", GRU_XS_ELEMS, &in[0]) ||
           read_input(ctx, dir, "h0", GRU_H0_ELEMS, &in[1]) ||
           read_input(ctx, dir, "y", GRU_Y_ELEMS, &in[2]);
  if (!rc && gru_create(&m, 1))
    rc = fail("create", gru_error(NULL));
  if (!rc && gru_load_params(m, weights))
    rc = fail("load_params", gru_error(m));
  if (!rc && gru_forward(m, F(&in[0]), GRU_XS_ELEMS, F(&in[1]), GRU_H0_ELEMS, ys, GRU_YS_ELEMS,
                         h, GRU_H_ELEMS))
    rc = fail("forward", gru_error(m));
  if (!rc) {
    print("ys", ys, GRU_YS_ELEMS);
    print("h", h, GRU_H_ELEMS);
  }
  for (int s = 0; !rc && s < steps; s++) {
    float loss;
    if (gru_train_step(m, F(&in[0]), GRU_XS_ELEMS, F(&in[1]), GRU_H0_ELEMS, F(&in[2]),
                       GRU_Y_ELEMS, &loss))
      rc = fail("train_step", gru_error(m));
    else
      printf("loss %d %.9g\n", s, loss);
  }
  gru_destroy(m);
  for (int k = 0; k < MAXIN; k++)
    dtrt_data_free(ctx, &in[k]);
  return rc;
}

int main(int argc, char **argv) {
  if (argc != 5 || (strcmp(argv[1], "lstm") && strcmp(argv[1], "gru"))) {
    fputs("usage: rnn_steps lstm|gru WEIGHTS DIR STEPS\n", stderr);
    return 2;
  }
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx)
    return fail("context", "out of memory");
  int steps = atoi(argv[4]);
  int rc = !strcmp(argv[1], "lstm") ? run_lstm(ctx, argv[2], argv[3], steps)
                                    : run_gru(ctx, argv[2], argv[3], steps);
  dtrt_ctx_free(ctx);
  return rc;
}
