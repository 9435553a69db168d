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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blobs.h"
#include "../e2e/blobs_batch.h"

enum { B = BLOBS_BATCH };

/* Three blobs centred on the vertices of a triangle, stddev 0.5. */
static void batch(unsigned long long *s, float *x, int32_t *y) { batch_of(s, x, y, B); }

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
