/* metrics.c: ROC AUC by sorting with ties at their mean rank, and log loss
 * (metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>

typedef struct Scored {
  double s;
  float y;
} Scored;

static int by_score(const void *a, const void *b) {
  double x = ((const Scored *)a)->s, z = ((const Scored *)b)->s;
  return (x > z) - (x < z);
}

double roc_auc(const double *s, const float *y, int64_t n) {
  Scored *v = malloc(sizeof *v * (size_t)(n ? n : 1));
  if (!v)
    return -1;
  double pos = 0;
  for (int64_t i = 0; i < n; i++) {
    v[i] = (Scored){s[i], y[i]};
    pos += y[i] != 0;
  }
  qsort(v, (size_t)n, sizeof *v, by_score);
  /* the ranks (1-based) of the positives, each group of equal scores at its
   * mean rank: exact in double while n < 2^26 */
  double rank_sum = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i, p = 0;
    for (; j < n && v[j].s == v[i].s; j++)
      p += v[j].y != 0;
    rank_sum += (double)p * (double)(i + 1 + j) / 2;
    i = j;
  }
  free(v);
  double neg = (double)n - pos;
  return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

double log_loss(const double *p, const float *y, int64_t n) {
  double sum = 0;
  for (int64_t i = 0; i < n; i++)
    sum -= log(fmax(y[i] != 0 ? p[i] : 1 - p[i], 1e-15));
  return sum / (double)n;
}
