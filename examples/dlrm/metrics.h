/* metrics.h: the held-out measures of examples/dlrm: ROC AUC computed exactly
 * by sorting (ties share their mean rank) and the log loss. */
#ifndef DLRM_METRICS_H
#define DLRM_METRICS_H

#include <stdint.h>

/* The area under the ROC curve of scores s[0..n) for labels y[0..n) (0 or
 * 1): the probability that a random positive scores above a random
 * negative, a tie counting one half (Mann-Whitney's U over the counts of
 * both). NaN when a class is absent; -1 when out of memory. */
double roc_auc(const double *s, const float *y, int64_t n);

/* The mean of -log p(y) for probabilities p[0..n) of label 1, the
 * probability of each label kept at 1e-15 or more (scikit-learn's log_loss
 * clips likewise). */
double log_loss(const double *p, const float *y, int64_t n);

#endif
