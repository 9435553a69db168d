/* finetune_load.c: examples/finetune/finetune.dt's params from a safetensors
 * file that libdtrt's own writer (dtrt_save) makes here, without PyTorch:
 * layers.w given as its slices layers.0.w .., layers.b stacked. The logits
 * of finetune_forward are checked against a plain loop in double over the
 * file's values, within (n + 2) 2^-23 times the same network run on absolute
 * values (n: the length of the longest chain of sums, inputs to logits). A
 * file missing a tensor is then refused and the logits stay the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "finetune.h"

enum {
  B = FINETUNE_BATCH,
  I = FINETUNE_DIM_I,
  H = FINETUNE_DIM_H,
  C = FINETUNE_DIM_C,
  L = FINETUNE_DIM_L
};

static float x[B * I], w_in[I * H], b_in[H], w[L][H * H], b[L * H], w_out[H * C], b_out[C];

/* Values from a fixed sequence of both signs, scaled as torch's init would. */
static void fill(float *p, int n, float scale, unsigned *s) {
  for (int k = 0; k < n; k++) {
    *s = *s * 1664525u + 1013904223u;
    p[k] = scale * ((float)(*s >> 8) / 8388608.0f - 1.0f);
  }
}

/* out[r, j] = sum_i in[r, i] w[i, j] + b[j] in double; with abs, of the
 * absolute values. */
static void linear(const double *in, const float *wt, const float *bias, int k, int n, double *out,
                   bool abs_) {
  for (int r = 0; r < B; r++)
    for (int j = 0; j < n; j++) {
      double v = abs_ ? fabs(bias[j]) : bias[j];
      for (int i = 0; i < k; i++)
        v += in[r * k + i] * (abs_ ? fabs(wt[i * n + j]) : wt[i * n + j]);
      out[r * n + j] = v;
    }
}

/* The network in double (abs_: on absolute values, relu as identity). */
static void reference(bool abs_, double *logits) {
  static double in[B * I], h[B * H], t[B * H];
  for (int k = 0; k < B * I; k++)
    in[k] = abs_ ? fabs(x[k]) : x[k];
  linear(in, w_in, b_in, I, H, h, abs_);
  for (int k = 0; k < B * H; k++)
    h[k] = h[k] > 0 || abs_ ? h[k] : 0;
  for (int l = 0; l < L; l++) {
    linear(h, w[l], b + l * H, H, H, t, abs_);
    for (int k = 0; k < B * H; k++)
      h[k] += t[k] > 0 || abs_ ? t[k] : 0;
  }
  linear(h, w_out, b_out, H, C, logits, abs_);
}

static int check(const float *got, const double *want, const double *mag) {
  const double n = I + L * (H + 2) + H + 2, u = ldexp(1.0, -23);
  int bad = 0;
  for (int k = 0; k < B * C; k++)
    if (!(fabs(got[k] - want[k]) <= (n + 2) * u * mag[k]) && bad++ < 5)
      fprintf(stderr, "logit %d: %.9g, the loop gives %.9g\n", k, got[k], want[k]);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fputs("usage: finetune_load DIR\n", stderr);
    return 2;
  }
  unsigned s = 7;
  fill(x, B * I, 1.0f, &s);
  fill(w_in, I * H, 0.35f, &s);
  fill(b_in, H, 0.35f, &s);
  for (int l = 0; l < L; l++)
    fill(w[l], H * H, 0.25f, &s);
  fill(b, L * H, 0.25f, &s);
  fill(w_out, H * C, 0.25f, &s);
  fill(b_out, C, 0.25f, &s);

  char path[512], bad[512], names[L][32];
  snprintf(path, sizeof path, "%s/finetune_load.st", argv[1]);
  snprintf(bad, sizeof bad, "%s/finetune_load_bad.st", argv[1]);
  DtNamed t[4 + L + 1] = {{"w_in", {w_in, DTRT_F32, 2, {I, H}}},
                          {"b_in", {b_in, DTRT_F32, 1, {H}}},
                          {"w_out", {w_out, DTRT_F32, 2, {H, C}}},
                          {"b_out", {b_out, DTRT_F32, 1, {C}}},
                          {"layers.b", {b, DTRT_F32, 2, {L, H}}}};
  for (int l = 0; l < L; l++) {
    snprintf(names[l], sizeof names[l], "layers.%d.w", l);
    t[5 + l] = (DtNamed){names[l], {w[l], DTRT_F32, 2, {H, H}}};
  }
  DtrtCtx *ctx = dtrt_ctx_new();
  finetune *m = NULL;
  int rc = 1;
  if (!ctx || dtrt_save(ctx, path, t, 5 + L, NULL, 0) ||
      dtrt_save(ctx, bad, t + 1, 4 + L, NULL, 0)) {
    fprintf(stderr, "finetune_load: cannot write the files: %s\n", ctx ? dtrt_errmsg(ctx) : "");
    goto done;
  }
  if (finetune_create(&m, 3) || finetune_load_params(m, path)) {
    fprintf(stderr, "finetune_load: %s\n", finetune_error(m));
    goto done;
  }
  float logits[B * C], again[B * C];
  double want[B * C], mag[B * C];
  if (finetune_forward(m, x, B * I, logits, B * C)) {
    fprintf(stderr, "finetune_load: forward: %s\n", finetune_error(m));
    goto done;
  }
  reference(false, want);
  reference(true, mag);
  if (check(logits, want, mag))
    goto done;
  /* w_in missing: refused, named, the model unchanged */
  if (finetune_load_params(m, bad) != 5 ||
      !strstr(finetune_error(m), "1 missing: w_in f32[8,16]")) {
    fprintf(stderr, "finetune_load: a file without w_in: %s\n", finetune_error(m));
    goto done;
  }
  if (finetune_forward(m, x, B * I, again, B * C) || memcmp(again, logits, sizeof again)) {
    fprintf(stderr, "finetune_load: the refused file changed the model\n");
    goto done;
  }
  printf("finetune_load: %d logits of the loaded params agree with the loop; a file "
         "without w_in refused\n",
         B * C);
  rc = 0;
done:
  finetune_destroy(m);
  dtrt_ctx_free(ctx);
  return rc;
}
