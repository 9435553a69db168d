/* test_dlrm_metrics.c: examples/dlrm's ROC AUC (by sorting, ties at their
 * mean rank) against the count over every pair of a positive and a negative
 * (a tie one half), and its log loss against the sum written out, on random
 * scores with many ties and on the edge cases. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "metrics.h"

static uint64_t state = 88172645463325252u;

static uint64_t next(void) {
  state ^= state << 13;
  state ^= state >> 7;
  state ^= state << 17;
  return state;
}

/* The AUC by its definition: O(n^2) pairs. */
static double pairs(const double *s, const float *y, int n) {
  double wins = 0, count = 0;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (y[i] == 1 && y[j] == 0) {
        wins += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
        count++;
      }
  return wins / count;
}

static void test_auc(void **st) {
  (void)st;
  enum { N = 700 };
  double s[N];
  float y[N];
  for (int trial = 0; trial < 40; trial++) {
    int n = 2 + (int)(next() % (N - 1)), levels = 1 + (int)(next() % 50);
    for (int i = 0; i < n; i++) {
      y[i] = (float)(next() % 3 == 0);
      /* scores on few levels make ties; leaning with the label makes AUC > 1/2 */
      s[i] = (double)(next() % (uint64_t)levels) + (trial % 2 ? 3.0 * y[i] : 0);
    }
    y[0] = 1;
    y[1] = 0;
    double want = pairs(s, y, n), got = roc_auc(s, y, n);
    /* both are (integer + half-integer count) / (P N): equal to rounding */
    if (fabs(got - want) > 1e-12)
      fail_msg("n %d levels %d: auc %.15g, pairs %.15g", n, levels, got, want);
  }
  double a[4] = {0.1, 0.2, 0.3, 0.4};
  float ya[4] = {0, 0, 1, 1}, yb[4] = {1, 1, 0, 0}, yc[4] = {1, 1, 1, 1};
  assert_true(roc_auc(a, ya, 4) == 1);
  assert_true(roc_auc(a, yb, 4) == 0);
  assert_true(isnan(roc_auc(a, yc, 4))); /* no negatives */
  double same[4] = {5, 5, 5, 5};
  assert_true(roc_auc(same, ya, 4) == 0.5);
}

static void test_log_loss(void **st) {
  (void)st;
  double p[3] = {0.9, 0.2, 0.5};
  float y[3] = {1, 0, 1};
  double want = -(log(0.9) + log(0.8) + log(0.5)) / 3;
  assert_true(fabs(log_loss(p, y, 3) - want) < 1e-15);
  double edge[2] = {0, 1};
  float wrong[2] = {1, 0};
  /* each label's probability kept at 1e-15: -log(1e-15) each, about 34.54 */
  assert_true(fabs(log_loss(edge, wrong, 2) + log(1e-15)) < 1e-9);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_auc),
      cmocka_unit_test(test_log_loss),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
