/* bn_ckpt.c: batch norm's buffers in checkpoints, over tests/e2e/bn_model.dt
 * compiled by dtc (and, with -DBN_INFER, its inference build
 * bn_model_infer.dt):
 *
 *     bn_ckpt DIR     trains 20 steps, checks the running statistics moved,
 *                     saves DIR/ckpt, exports DIR/export.safetensors, writes
 *                     a batch (DIR/x.bin) and the forward's logits on it
 *                     (DIR/logits.bin); a fresh model that loads DIR/ckpt
 *                     must give the same logits, one that does not other ones
 *     bn_ckpt_infer DIR   the inference build loads DIR/ckpt: the same logits
 *
 * Exit 0 when every check holds. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bnck.h"
#include "dtrt.h"

#ifndef BN_INFER
static uint64_t rng = 0x9e3779b97f4a7c15u;
static float next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)(rng >> 40) / (float)(1 << 24);
}
#endif

static const char *at(const char *dir, const char *name) {
  static char buf[4][4096];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static int fail(const char *what, bnck *m) {
  fprintf(stderr, "bn_ckpt: %s: %s\n", what, m ? bnck_error(m) : "");
  return 1;
}

static bool io(const char *path, void *p, size_t n, bool write) {
  FILE *f = fopen(path, write ? "wb" : "rb");
  bool ok = f && (write ? fwrite(p, 1, n, f) : fread(p, 1, n, f)) == n;
  if (f && fclose(f))
    ok = false;
  if (!ok)
    fprintf(stderr, "bn_ckpt: cannot %s %s\n", write ? "write" : "read", path);
  return ok;
}

static double max_diff(const float *a, const float *b, int n) {
  double d = 0;
  for (int k = 0; k < n; k++)
    d = fmax(d, fabs((double)a[k] - b[k]));
  return d;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: bn_ckpt DIR\n");
    return 2;
  }
  const char *dir = argv[1];
  static float x[BNCK_X_ELEMS], want[BNCK_LOGITS_ELEMS], got[BNCK_LOGITS_ELEMS];
  bnck *m;
#ifdef BN_INFER
  if (bnck_create(&m, 7) || !io(at(dir, "x.bin"), x, sizeof x, false) ||
      !io(at(dir, "logits.bin"), want, sizeof want, false))
    return fail("create", NULL);
  if (bnck_load(m, at(dir, "ckpt")) || bnck_forward(m, x, BNCK_X_ELEMS, got, BNCK_LOGITS_ELEMS))
    return fail("load", m);
  double d = max_diff(got, want, BNCK_LOGITS_ELEMS);
  printf("bn_ckpt: the inference build's logits after load: max |diff| %g\n", d);
  bnck_destroy(m);
  return d != 0;
#else
  static int32_t y[BNCK_Y_ELEMS];
  if (bnck_create(&m, 7))
    return fail("create", NULL);
  float loss;
  for (int s = 0; s < 20; s++) {
    for (int k = 0; k < BNCK_X_ELEMS; k++)
      x[k] = next() * 2 + (float)(k % 7);
    for (int k = 0; k < BNCK_Y_ELEMS; k++)
      y[k] = (int32_t)(rng % 4);
    if (bnck_train_step(m, x, BNCK_X_ELEMS, y, BNCK_Y_ELEMS, &loss))
      return fail("train_step", m);
  }
  const float *rm = dtrt_model_tensor((DtModel *)m, "bn1.running_mean");
  const float *rv = dtrt_model_tensor((DtModel *)m, "bn1.running_var");
  if (!rm || !rv || fabsf(rm[0]) < 1e-3f || fabsf(rv[0] - 1) < 1e-3f) {
    fprintf(stderr, "bn_ckpt: the running statistics did not move: %g %g\n", rm ? rm[0] : 0,
            rv ? rv[0] : 0);
    return 1;
  }
  printf("bn_ckpt: after 20 steps bn1.running_mean[0] %g, bn1.running_var[0] %g\n", rm[0], rv[0]);
  if (bnck_forward(m, x, BNCK_X_ELEMS, want, BNCK_LOGITS_ELEMS) || bnck_save(m, at(dir, "ckpt")) ||
      bnck_export(m, at(dir, "export.safetensors")))
    return fail("forward, save or export", m);
  bnck_destroy(m);
  if (!io(at(dir, "x.bin"), x, sizeof x, true) ||
      !io(at(dir, "logits.bin"), want, sizeof want, true))
    return 1;
  /* a fresh model: other logits until it loads the checkpoint */
  if (bnck_create(&m, 7) || bnck_forward(m, x, BNCK_X_ELEMS, got, BNCK_LOGITS_ELEMS))
    return fail("create", m);
  double before = max_diff(got, want, BNCK_LOGITS_ELEMS);
  if (bnck_load(m, at(dir, "ckpt")) || bnck_forward(m, x, BNCK_X_ELEMS, got, BNCK_LOGITS_ELEMS))
    return fail("load", m);
  double after = max_diff(got, want, BNCK_LOGITS_ELEMS);
  printf("bn_ckpt: logits of a fresh model: max |diff| %g; after load %g\n", before, after);
  bnck_destroy(m);
  return !(before > 1e-3 && after == 0);
#endif
}
