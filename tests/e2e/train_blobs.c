/* train_blobs.c: end-to-end test. Trains tests/e2e/blobs.dt, compiled by dtc,
 * on three Gaussian blobs (blobs_batch.h), and checks that the loss falls below a
 * stated bound and the model classifies held-out points. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blobs.h"
#include "blobs_batch.h"

enum { B = BLOBS_BATCH, STEPS = 300 };

/* Three blobs centred on the vertices of a triangle, stddev 0.5. */
static void batch(unsigned long long *s, float *x, int32_t *y) { batch_of(s, x, y, B); }

int main(void) {
  blobs *m;
  if (blobs_create(&m, 7)) {
    fprintf(stderr, "cannot create the model\n");
    return 1;
  }
  unsigned long long s = 42;
  float x[B * 2], logits[B * 3], loss = 0, first = 0;
  int32_t y[B];
  for (int step = 0; step < STEPS; step++) {
    batch(&s, x, y);
    if (blobs_train_step(m, x, B * 2, y, B, &loss)) {
      fprintf(stderr, "train_step: %s\n", blobs_error(m));
      return 1;
    }
    if (step == 0)
      first = loss;
  }
  int correct = 0, total = 0;
  for (int k = 0; k < 10; k++) {
    batch(&s, x, y);
    if (blobs_forward(m, x, B * 2, logits, B * 3)) {
      fprintf(stderr, "forward: %s\n", blobs_error(m));
      return 1;
    }
    for (int i = 0; i < B; i++, total++) {
      int best = 0;
      for (int c = 1; c < 3; c++)
        best = logits[3 * i + c] > logits[3 * i + best] ? c : best;
      correct += best == y[i];
    }
  }
  double acc = (double)correct / total;
  printf("loss %.4f -> %.4f, held-out accuracy %.3f\n", first, loss, acc);
  blobs_destroy(m);
  /* Bayes error of these blobs is under 1%; a working trainer gets near it. */
  if (!(first > 0.5 && loss < 0.15 && acc > 0.95)) {
    fprintf(stderr, "FAIL: expected first loss > 0.5, final < 0.15, accuracy > 0.95\n");
    return 1;
  }
  return 0;
}
