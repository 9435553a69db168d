/* blobs_batch.h: the data of tests/e2e/blobs.dt for the programs that train
 * it (tests/e2e/train_blobs.c, tests/cross/cross_train.c): three Gaussian
 * blobs from a seeded generator. Header only; needs <math.h> and <stdint.h>. */
#ifndef BLOBS_BATCH_H
#define BLOBS_BATCH_H

static double uniform(unsigned long long *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(*s >> 11) / 9007199254740992.0;
}

/* n points of three blobs centred on the vertices of a triangle, stddev 0.5:
 * x[2i], x[2i+1] the point, y[i] its blob. */
static void batch_of(unsigned long long *s, float *x, int32_t *y, int n) {
  static const double cx[3] = {2, -2, 0}, cy[3] = {0, 0, 3};
  for (int i = 0; i < n; i++) {
    int c = (int)(uniform(s) * 3);
    double u = uniform(s) + 1e-12, v = uniform(s);
    double r = sqrt(-2 * log(u)) * 0.5;
    x[2 * i] = (float)(cx[c] + r * cos(6.283185307179586 * v));
    x[2 * i + 1] = (float)(cy[c] + r * sin(6.283185307179586 * v));
    y[i] = c;
  }
}

#endif
