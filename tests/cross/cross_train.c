/* cross_train.c: trains tests/e2e/blobs.dt, compiled by dtc for one device or
 * for the devices of tests/cross/arm_x86.dt, for STEPS steps on batches made
 * here from a fixed seed, and prints the loss of every step, one per line.
 * The same source is built for the host and for aarch64 (tests/cross/qemu.sh
 * runs the latter under qemu-aarch64 and compares the losses).
 *
 *     cross_train [STEPS]
 *
 * Exits 1 with the runtime's message when the model cannot be created (on a
 * rank whose device has its code in another target's object). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "blobs.h"

enum { B = BLOBS_BATCH };

static double uniform(unsigned long long *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

/* Three blobs centred on the vertices of a triangle, stddev 0.5. */
static void batch(unsigned long long *s, float *x, int32_t *y) {
  static const double cx[3] = {2, -2, 0}, cy[3] = {0, 0, 3};
  for (int i = 0; i < B; i++) {
    int c = (int)(uniform(s) * 3);
    double u = uniform(s) + 1e-12, v = uniform(s);
    double r = sqrt(-2 * log(u)) * 0.5;
    x[2 * i] = (float)(cx[c] + r * cos(6.283185307179586 * v));
    x[2 * i + 1] = (float)(cy[c] + r * sin(6.283185307179586 * v));
    y[i] = c;
  }
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 20;
  if (argc > 2 || steps < 1 || steps > 100000) {
    fprintf(stderr, "usage: cross_train [STEPS (1 to 100000)]\n");
    return 2;
  }
  blobs *m;
  if (blobs_create(&m, 7)) {
    fprintf(stderr, "cross_train: create: %s\n", blobs_error(NULL));
    return 1;
  }
  unsigned long long s = 42;
  float x[B * 2], loss = 0;
  int32_t y[B];
  for (int step = 0; step < steps; step++) {
    batch(&s, x, y);
    if (blobs_train_step(m, x, B * 2, y, B, &loss)) {
      fprintf(stderr, "cross_train: step %d: %s\n", step, blobs_error(m));
      blobs_destroy(m);
      return 1;
    }
    printf("%.9g\n", loss);
  }
  blobs_destroy(m);
  return 0;
}
