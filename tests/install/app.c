/* app.c: the application of the install test's outside projects: trains
 * blobs (tests/e2e/blobs.dt) and, with WITH_NET, net (project/linear.dt) a
 * few steps on three clusters of points, and prints each model's batch and
 * whether its loss fell. */
#include <stdint.h>
#include <stdio.h>

#include "blobs.h"
#ifdef WITH_NET
#include "net.h"
#endif

enum { STEPS = 20 };

/* n points, y[i] of three classes, x[2i..2i+1] near that class's centre. */
static void points(unsigned *s, float *x, int32_t *y, int n) {
  static const float cx[3] = {2, -2, 0}, cy[3] = {0, 0, 3};
  for (int i = 0; i < n; i++) {
    *s = *s * 1103515245u + 12345u;
    int c = (int)(*s >> 16) % 3;
    float e = (float)((*s >> 4) & 255) / 512.0f - 0.25f;
    y[i] = c;
    x[2 * i] = cx[c] + e;
    x[2 * i + 1] = cy[c] - e;
  }
}

/* Prints "NAME: batch B, STEPS steps, loss fell" (or "did not fall"); 0 if
 * it fell. */
static int report(const char *name, int b, float first, float last) {
  printf("%s: batch %d, %d steps, loss %s\n", name, b, STEPS,
         last < first ? "fell" : "did not fall");
  return last < first ? 0 : 1;
}

static int train_blobs(void) {
  enum { B = BLOBS_BATCH };
  blobs *m;
  if (blobs_create(&m, 1)) {
    fprintf(stderr, "app: %s\n", blobs_error(NULL));
    return 1;
  }
  float x[2 * B], loss, first = 0;
  int32_t y[B];
  unsigned s = 7;
  for (int k = 0; k < STEPS; k++) {
    points(&s, x, y, B);
    if (blobs_train_step(m, x, 2 * B, y, B, &loss)) {
      fprintf(stderr, "app: %s\n", blobs_error(m));
      blobs_destroy(m);
      return 1;
    }
    first = k ? first : loss;
  }
  blobs_destroy(m);
  return report("blobs", B, first, loss);
}

#ifdef WITH_NET
static int train_net(void) {
  enum { B = NET_BATCH };
  net *m;
  if (net_create(&m, 1)) {
    fprintf(stderr, "app: %s\n", net_error(NULL));
    return 1;
  }
  float x[2 * B], loss, first = 0;
  int32_t y[B];
  unsigned s = 11;
  for (int k = 0; k < STEPS; k++) {
    points(&s, x, y, B);
    if (net_train_step(m, x, 2 * B, y, B, &loss)) {
      fprintf(stderr, "app: %s\n", net_error(m));
      net_destroy(m);
      return 1;
    }
    first = k ? first : loss;
  }
  net_destroy(m);
  return report("net", B, first, loss);
}
#endif

int main(void) {
  int rc = train_blobs();
#ifdef WITH_NET
  rc |= train_net();
#endif
  return rc;
}
