/* bn_repeat.c: batch norm inside a repeated block (tests/e2e/bn_repeat.dt,
 * its params and buffers stacked along the loop's count) and inside a loop
 * in a loop (bn_repeat_nested.dt: three stages of a loop of one layer)
 * against the same layers applied one by one (bn_repeat_unrolled.dt), all
 * started from one set of weights and running statistics (safetensors
 * files written here: the loop's read from the slices layers.L.NAME,
 * torch's names of a stacked layer; the nested loops' as whole stacked
 * tensors outer.inner.NAME; the unrolled model's as layers_L.NAME):
 *
 *     bn_repeat DIR
 *
 * checks the forward in evaluation mode before training (it normalises by
 * the running statistics as loaded), the losses of STEPS training steps,
 * the forward after them (by the statistics the steps updated), and the
 * exported params and running statistics: row l of the loop's stacked
 * buffer against layer l's own, each moved from its start. The inference
 * build (bn_repeat_infer.dt) loads the loop's checkpoint and must give its
 * forward. Exit 0 when every check holds.
 *
 * Tolerance: the two programs compute the same operations in the same
 * order within a layer; a body compiled once for the loop may still fuse
 * and vectorise differently from the inlined layers, so values may differ
 * by rounding. A batch statistic is a sum of N = B S S = 288 products
 * (error within N 2^-24 relative, ~2e-5), a convolution one of 9 C = 36;
 * three layers and ten steps of SGD at lr 0.05 compound them by less than
 * ten times: 2e-4 relative to the largest magnitude bounds every compared
 * value (the runs below agree far closer; bits when the code is alike). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bnnest.h"
#include "bnrep.h"
#include "bnrepi.h"
#include "bnunr.h"
#include "dtrt.h"

enum {
  L = 3, C = BNREP_DIM_C, STEPS = 10, BATCHES = 4,
  NX = BNREP_X_ELEMS, NW = C * C * 9, NT = 5 /* tensors a layer */
};
static const double TOL = 2e-4;

static const char *const field[NT] = {"conv.weight", "bn.weight", "bn.bias", "bn.running_mean",
                                      "bn.running_var"};

static uint64_t rng = 0x9e3779b97f4a7c15u;
static float uniform(void) { /* in [-1, 1) */
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 23) - 1;
}

static int64_t elems(int t) { return t == 0 ? NW : C; }

static const char *at(const char *dir, const char *name) {
  static char buf[4][4096];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static int failed(const char *what, const char *why) {
  fprintf(stderr, "bn_repeat: %s: %s\n", what, why);
  return 1;
}

/* The largest difference of a and b relative to the largest magnitude of b. */
static double rel(const float *a, const float *b, int64_t n) {
  double d = 0, m = 1e-30;
  for (int64_t k = 0; k < n; k++) {
    d = fmax(d, fabs((double)a[k] - b[k]));
    m = fmax(m, fabs((double)b[k]));
  }
  return d / m;
}

static bool agree(const char *what, const float *a, const float *b, int64_t n, double *worst) {
  double e = rel(a, b, n);
  *worst = fmax(*worst, e);
  if (e > TOL || isnan(e)) {
    fprintf(stderr, "bn_repeat: %s: loop and layers differ by %.3g relative > %g\n", what, e, TOL);
    return false;
  }
  return true;
}

/* The tensors of the L layers, value[l][t] of field t, named with `fmt`
 * ("layers.%d.%s" or "layers_%d.%s"). */
static DtNamed *named(float *value[L][NT], const char *fmt, char names[L][NT][64]) {
  static DtNamed t[2][L * NT];
  static int use;
  DtNamed *n = t[use++ % 2];
  for (int l = 0; l < L; l++)
    for (int k = 0; k < NT; k++) {
      snprintf(names[l][k], sizeof names[l][k], fmt, l, field[k]);
      DtTensor x = {.data = value[l][k], .dtype = DTRT_F32, .rank = k ? 1 : 4,
                    .dim = {C, C, 3, 3}};
      n[l * NT + k] = (DtNamed){names[l][k], x};
    }
  return n;
}

int main(int argc, char **argv) {
  if (argc != 2)
    return failed("usage", "bn_repeat DIR");
  const char *dir = argv[1];
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx)
    return failed("context", "out of memory");
  static float w[L][NT][NW], xs[BATCHES][NX], ys[BATCHES][NX];
  float *value[L][NT];
  for (int l = 0; l < L; l++)
    for (int k = 0; k < NT; k++) {
      value[l][k] = w[l][k];
      for (int64_t i = 0; i < elems(k); i++) {
        float u = uniform();
        w[l][k][i] = k == 0 ? 0.3f * u : k == 1 ? 1 + 0.2f * u : k == 4 ? 1 + 0.5f * u : 0.2f * u;
      }
    }
  for (int b = 0; b < BATCHES; b++)
    for (int i = 0; i < NX; i++)
      xs[b][i] = uniform(), ys[b][i] = uniform();
  char na[L][NT][64], nu[L][NT][64];
  if (dtrt_save(ctx, at(dir, "loop.safetensors"), named(value, "layers.%d.%s", na), L * NT, NULL,
                0) ||
      dtrt_save(ctx, at(dir, "layers.safetensors"), named(value, "layers_%d.%s", nu), L * NT, NULL,
                0))
    return failed("save", dtrt_errmsg(ctx));

  /* the nested loops' file: each field stacked [L, 1, dims] */
  static float packed[NT][L * NW];
  static char pname[NT][64];
  DtNamed pn[NT];
  for (int k = 0; k < NT; k++) {
    for (int l = 0; l < L; l++)
      memcpy(packed[k] + l * elems(k), w[l][k], sizeof(float) * (size_t)elems(k));
    snprintf(pname[k], sizeof pname[k], "outer.inner.%s", field[k]);
    pn[k] = (DtNamed){pname[k], {.data = packed[k], .dtype = DTRT_F32, .rank = k ? 3 : 6,
                                 .dim = {L, 1, C, C, 3, 3}}};
  }
  if (dtrt_save(ctx, at(dir, "nested.safetensors"), pn, NT, NULL, 0))
    return failed("save", dtrt_errmsg(ctx));

  bnrep *a = NULL;
  bnunr *u = NULL;
  bnnest *nn = NULL;
  if (bnrep_create(&a, 1) || bnunr_create(&u, 2) || bnnest_create(&nn, 4))
    return failed("create", "cannot create the models");
  if (bnnest_load_params(nn, at(dir, "nested.safetensors")))
    return failed("nested: load_params", bnnest_error(nn));
  if (bnrep_load_params(a, at(dir, "loop.safetensors")))
    return failed("loop: load_params", bnrep_error(a));
  if (bnunr_load_params(u, at(dir, "layers.safetensors")))
    return failed("layers: load_params", bnunr_error(u));

  static float ha[NX], hu[NX], hn[NX];
  bool ok = true;
  double worst = 0;
  if (bnrep_forward(a, xs[0], NX, ha, NX) || bnunr_forward(u, xs[0], NX, hu, NX) ||
      bnnest_forward(nn, xs[0], NX, hn, NX))
    return failed("forward", "failed");
  ok &= agree("forward before training", ha, hu, NX, &worst);
  ok &= agree("nested: forward before training", hn, hu, NX, &worst);
  for (int s = 0; s < STEPS; s++) {
    float la, lu, ln;
    const float *x = xs[s % BATCHES], *y = ys[s % BATCHES];
    if (bnrep_train_step(a, x, NX, y, NX, &la))
      return failed("loop: train_step", bnrep_error(a));
    if (bnunr_train_step(u, x, NX, y, NX, &lu))
      return failed("layers: train_step", bnunr_error(u));
    if (bnnest_train_step(nn, x, NX, y, NX, &ln))
      return failed("nested: train_step", bnnest_error(nn));
    char what[40];
    snprintf(what, sizeof what, "loss of step %d", s);
    ok &= agree(what, &la, &lu, 1, &worst);
    snprintf(what, sizeof what, "nested: loss of step %d", s);
    ok &= agree(what, &ln, &lu, 1, &worst);
  }
  if (bnrep_forward(a, xs[0], NX, ha, NX) || bnunr_forward(u, xs[0], NX, hu, NX) ||
      bnnest_forward(nn, xs[0], NX, hn, NX))
    return failed("forward", "failed");
  ok &= agree("forward after training", ha, hu, NX, &worst);
  ok &= agree("nested: forward after training", hn, hu, NX, &worst);

  /* the exports: the loop's stacked tensors against the layers' own */
  if (bnrep_export(a, at(dir, "loop.export")) || bnunr_export(u, at(dir, "layers.export")))
    return failed("export", "failed");
  static float sa[NT][L * NW], su[L][NT][NW];
  DtCkptTensor ta[NT], tu[L * NT];
  for (int k = 0; k < NT; k++) {
    static char stacked[NT][64];
    snprintf(stacked[k], sizeof stacked[k], "layers.%s", field[k]);
    ta[k] = (DtCkptTensor){.name = stacked[k], .kind = -1};
    ta[k].t = (DtTensor){.data = sa[k], .dtype = DTRT_F32, .rank = k ? 2 : 5,
                         .dim = {L, C, C, 3, 3}};
    for (int l = 0; l < L; l++) {
      tu[l * NT + k] = (DtCkptTensor){.name = nu[l][k], .kind = -1};
      tu[l * NT + k].t = (DtTensor){.data = su[l][k], .dtype = DTRT_F32, .rank = k ? 1 : 4,
                                    .dim = {C, C, 3, 3}};
    }
  }
  if (dtrt_weights_load(ctx, at(dir, "loop.export"), ta, NT) ||
      dtrt_weights_load(ctx, at(dir, "layers.export"), tu, L * NT))
    return failed("read the exports", dtrt_errmsg(ctx));
  /* the nested loops' export, each field [L, 1, dims]: the loop's layout */
  static float sn[NT][L * NW];
  DtCkptTensor tn[NT];
  for (int k = 0; k < NT; k++) {
    tn[k] = (DtCkptTensor){.name = pname[k], .kind = -1};
    tn[k].t = (DtTensor){.data = sn[k], .dtype = DTRT_F32, .rank = k ? 3 : 6,
                         .dim = {L, 1, C, C, 3, 3}};
  }
  if (bnnest_export(nn, at(dir, "nested.export")) ||
      dtrt_weights_load(ctx, at(dir, "nested.export"), tn, NT))
    return failed("nested: export", dtrt_errmsg(ctx));
  for (int k = 0; k < NT; k++) {
    char what[64];
    snprintf(what, sizeof what, "nested: %s", field[k]);
    ok &= agree(what, sn[k], sa[k], L * elems(k), &worst);
  }
  for (int l = 0; l < L; l++)
    for (int k = 0; k < NT; k++) {
      const float *row = sa[k] + l * elems(k);
      char what[64];
      snprintf(what, sizeof what, "layer %d's %s", l, field[k]);
      ok &= agree(what, row, su[l][k], elems(k), &worst);
      if (rel(row, w[l][k], elems(k)) < 1e-3) {
        fprintf(stderr, "bn_repeat: %s did not move in %d steps\n", what, STEPS);
        ok = false;
      }
    }

  /* the inference build reads the stacked buffers of the loop's checkpoint */
  bnrepi *e = NULL;
  static float he[NX];
  if (bnrep_save(a, at(dir, "loop.ckpt")))
    return failed("save", bnrep_error(a));
  if (bnrepi_create(&e, 3) || bnrepi_load(e, at(dir, "loop.ckpt")))
    return failed("inference build: load", e ? bnrepi_error(e) : "create");
  if (bnrepi_forward(e, xs[0], NX, he, NX))
    return failed("inference build: forward", bnrepi_error(e));
  if (memcmp(he, ha, sizeof ha)) {
    fprintf(stderr, "bn_repeat: the inference build's forward differs from the training "
                    "build's by %.3g relative\n", rel(he, ha, NX));
    ok = false;
  }
  printf("bn_repeat: %d steps, losses, forwards, params and running statistics of the loop "
         "and the nested loops within %.3g relative of the layers'%s\n", STEPS, worst,
         ok ? "" : ": FAIL");
  bnrep_destroy(a);
  bnunr_destroy(u);
  bnrepi_destroy(e);
  bnnest_destroy(nn);
  dtrt_ctx_free(ctx);
  return ok ? 0 : 1;
}
