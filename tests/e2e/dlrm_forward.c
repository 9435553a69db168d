/* dlrm_forward.c: examples/dlrm.dt's logits against DLRM written out as
 * plain loops in double: params from a file libdtrt's writer (dtrt_save)
 * makes here, read by dlrm_load_params, a batch of random dense features and
 * ids, and the reference computing the bottom MLP, each table's row, every
 * dot product of a pair i < j of the 27 vectors (in the order DLRM's
 * interaction lists them: by i, then j) and the top MLP. Each logit must be
 * within (n + 2) 2^-23 of the same network run on absolute values (n: the
 * longest chain of sums from the inputs to a logit), the bound of float
 * sums in any order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm.h"
#include "dtrt.h"

enum {
  B = DLRM_BATCH,
  R = DLRM_DIM_R,
  D = DLRM_DIM_D,
  H = DLRM_DIM_H,
  ND = 13,
  NC = 26,
  F = NC + 1,
  PAIRS = F * (F - 1) / 2,
  BOT = 32,
  TOP = D + PAIRS,
  CHAIN = ND + BOT + D + TOP + H, /* the sums from an input to a logit */
};
_Static_assert(DLRM_TW0_DIM0 == TOP && DLRM_BW0_DIM1 == BOT, "dlrm.dt's shapes");

static float bw0[ND * BOT], bb0[BOT], bw1[BOT * D], bb1[D], tw0[TOP * H], tb0[H], tw1[H], tb1[1];
static float table[NC][R * D];
static float dense[B * ND], logit[B];
static int32_t ids[B * NC];

static unsigned state = 12345;

/* Uniform in [-scale, scale). */
static void fill(float *p, int n, float scale) {
  for (int k = 0; k < n; k++) {
    state = state * 1664525u + 1013904223u;
    p[k] = scale * ((float)(state >> 8) / 8388608.0f - 1.0f);
  }
}

/* y[o] = act(b[o] + sum_i x[i] w[i, o]); with abs, every value made
 * positive first (the bound's network). */
static void layer(const double *x, int in, const float *w, const float *b, int out, int relu,
                  int abs_, double *y) {
  for (int o = 0; o < out; o++) {
    double s = abs_ ? fabs(b[o]) : b[o];
    for (int i = 0; i < in; i++)
      s += x[i] * (abs_ ? fabs(w[i * out + o]) : w[i * out + o]);
    y[o] = relu && s < 0 ? 0 : s;
  }
}

/* The logit of row r, of the absolute network when abs_. */
static double reference(int r, int abs_) {
  double x[ND], h0[BOT], z[F][D], t[TOP], h[H], out;
  for (int k = 0; k < ND; k++)
    x[k] = abs_ ? fabs(dense[r * ND + k]) : dense[r * ND + k];
  layer(x, ND, bw0, bb0, BOT, 1, abs_, h0);
  layer(h0, BOT, bw1, bb1, D, 1, abs_, z[0]);
  for (int k = 0; k < NC; k++)
    for (int d = 0; d < D; d++) {
      float v = table[k][ids[r * NC + k] * D + d];
      z[1 + k][d] = abs_ ? fabs(v) : v;
    }
  for (int d = 0; d < D; d++)
    t[d] = z[0][d];
  int at = D;
  for (int i = 0; i < F; i++)
    for (int j = i + 1; j < F; j++) {
      double s = 0;
      for (int d = 0; d < D; d++)
        s += z[i][d] * z[j][d];
      t[at++] = s;
    }
  layer(t, TOP, tw0, tb0, H, 1, abs_, h);
  layer(h, H, tw1, tb1, 1, 0, abs_, &out);
  return out;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "dlrm_forward.st";
  fill(bw0, ND * BOT, 0.5f);
  fill(bb0, BOT, 0.1f);
  fill(bw1, BOT * D, 0.5f);
  fill(bb1, D, 0.1f);
  fill(tw0, TOP * H, 0.2f);
  fill(tb0, H, 0.1f);
  fill(tw1, H, 0.5f);
  fill(tb1, 1, 0.1f);
  for (int k = 0; k < NC; k++)
    fill(table[k], R * D, 0.5f);
  fill(dense, B * ND, 2.0f);
  for (int k = 0; k < B * NC; k++) {
    state = state * 1664525u + 1013904223u;
    ids[k] = (int32_t)((state >> 8) % R);
  }
  /* the params by their names in the model, in the file dtrt_save writes */
  static char names[NC][16];
  DtNamed t[8 + NC] = {
      {"bw0", {bw0, DTRT_F32, 2, {ND, BOT}}}, {"bb0", {bb0, DTRT_F32, 1, {BOT}}},
      {"bw1", {bw1, DTRT_F32, 2, {BOT, D}}},  {"bb1", {bb1, DTRT_F32, 1, {D}}},
      {"tw0", {tw0, DTRT_F32, 2, {TOP, H}}},  {"tb0", {tb0, DTRT_F32, 1, {H}}},
      {"tw1", {tw1, DTRT_F32, 2, {H, 1}}},    {"tb1", {tb1, DTRT_F32, 1, {1}}},
  };
  for (int k = 0; k < NC; k++) {
    snprintf(names[k], sizeof names[k], "c%d.w", k + 1);
    t[8 + k] = (DtNamed){names[k], {table[k], DTRT_F32, 2, {R, D}}};
  }
  DtrtCtx *ctx = dtrt_ctx_new();
  dlrm *m = NULL;
  int rc = 1;
  if (!ctx || dtrt_save(ctx, path, t, 8 + NC, NULL, 0)) {
    fprintf(stderr, "dlrm_forward: cannot write %s: %s\n", path, ctx ? dtrt_errmsg(ctx) : "");
    goto done;
  }
  if (dlrm_create(&m, 1) || dlrm_load_params(m, path) ||
      dlrm_forward(m, dense, B * ND, ids, B * NC, logit, B)) {
    fprintf(stderr, "dlrm_forward: %s\n", dlrm_error(m));
    goto done;
  }
  double worst = 0;
  int bad = 0;
  for (int r = 0; r < B; r++) {
    double want = reference(r, 0), tol = (CHAIN + 2) * 0x1p-23 * reference(r, 1);
    double err = fabs(logit[r] - want);
    if (err > tol && bad++ < 5)
      fprintf(stderr, "dlrm_forward: row %d: logit %.9g, reference %.9g, tolerance %.3g\n", r,
              logit[r], want, tol);
    worst = err / tol > worst ? err / tol : worst;
  }
  if (!bad) {
    printf("dlrm_forward: %d logits within their bounds (the largest error %.2g of its bound)\n", B,
           worst);
    rc = 0;
  }
done:
  remove(path);
  dlrm_destroy(m);
  dtrt_ctx_free(ctx);
  return rc;
}
