/* criteo_gen.c: writes synthetic data in Criteo's display-advertising text
 * format (a label, 13 integers, 26 categories a line; libdtrt's
 * dtrt_criteo_read reads it) drawn from a known model, and prints the
 * Bayes-optimal ROC AUC and log loss on the held-out lines (the last
 * --holdout ones): the measures of the true click probability itself, the
 * ceiling a trained model approaches.
 *
 * The model, drawn from --seed: integer k of a line is missing with
 * probability 5%, -1 with 2%, else floor(e^(4u) - 1) for u uniform in [0, 1)
 * (0 to 53); its feature is t_k = log(1 + max(x, 0)), 0 when missing, as the
 * reader computes it. Category k takes one of --vocab values, value v with
 * probability proportional to 1 / (v + 2), or is missing with probability 5%;
 * each value (and missing) has an effect a_k[v] ~ N(0, 0.25^2) and, for
 * --pairwise S > 0, a vector u_k[v] ~ N(0, S^2 I) of 2 elements. The click
 * logit is
 *
 *     -1 + sum_k w_k (t_k - 2) + sum_k a_k[v_k] + sum_{k < l} <u_k[v_k], u_l[v_l]>
 *
 * with w_k ~ N(0, 0.3^2), and the label is 1 with probability sigmoid(logit).
 * Each value is written as 8 hexadecimal digits drawn at random among those
 * dtrt_criteo_row puts in a row of its own of a table of --rows rows (never
 * row 0, the missing one's), so nothing collides: the true probability is a
 * function of what the reader gives a model, and its AUC is the ceiling.
 *
 *     criteo_gen -o synth.txt [--lines N] [--holdout H] [--rows R]
 *                [--vocab V] [--pairwise S] [--seed S]
 *
 * prints: held-out 20000 of 100000 lines: ceiling auc 0.843210 log loss 0.442104 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrt.h"
#include "metrics.h"

enum { ND = DTRT_CRITEO_DENSE, NC = DTRT_CRITEO_CATS, LATENT = 2 };

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static double uniform(uint64_t *s) { return (double)(next(s) >> 11) * 0x1p-53; }

static double gauss(uint64_t *s) {
  double u = uniform(s), v = uniform(s);
  return sqrt(-2 * log(1 - u)) * cos(6.283185307179586 * v);
}

typedef struct Args {
  const char *out;
  int64_t lines, holdout, rows, vocab;
  double pairwise;
  uint64_t seed;
} Args;

static int usage(void) {
  fprintf(stderr, "usage: criteo_gen -o FILE [--lines N] [--holdout H] [--rows R] [--vocab V]\n"
                  "                  [--pairwise S] [--seed S]\n");
  return 2;
}

static int parse(Args *a, int argc, char **argv) {
  *a = (Args){NULL, 100000, -1, 64, 40, 0, 1};
  for (int i = 1; i < argc; i += 2) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!v)
      return usage();
    if (!strcmp(o, "-o"))
      a->out = v;
    else if (!strcmp(o, "--lines"))
      a->lines = strtoll(v, &end, 10);
    else if (!strcmp(o, "--holdout"))
      a->holdout = strtoll(v, &end, 10);
    else if (!strcmp(o, "--rows"))
      a->rows = strtoll(v, &end, 10);
    else if (!strcmp(o, "--vocab"))
      a->vocab = strtoll(v, &end, 10);
    else if (!strcmp(o, "--pairwise"))
      a->pairwise = strtod(v, &end);
    else if (!strcmp(o, "--seed"))
      a->seed = strtoull(v, &end, 10);
    else
      return usage();
    if (end && (*end || end == v))
      return usage();
  }
  if (a->holdout < 0)
    a->holdout = a->lines / 5;
  if (!a->out || a->lines < 1 || a->holdout < 1 || a->holdout > a->lines) {
    fprintf(stderr, "criteo_gen: need -o FILE, and 1 <= --holdout <= --lines\n");
    return 2;
  }
  if (a->rows < 2 || a->rows > INT32_MAX || a->vocab < 1 || a->vocab > a->rows - 1 ||
      a->vocab > 1 << 20 || !(a->pairwise >= 0)) {
    fprintf(stderr, "criteo_gen: need 1 <= --vocab <= --rows - 1 (and at most 2^20), "
                    "--rows <= 2^31 - 1, --pairwise >= 0\n");
    return 2;
  }
  return 0;
}

/* The model: per table the values' tokens, cumulative probabilities,
 * effects and vectors, index vocab being "missing". */
typedef struct Model {
  double w[ND];
  uint32_t *token; /* [NC][vocab] */
  double *cum;     /* [NC][vocab] */
  double *effect;  /* [NC][vocab + 1] */
  double *vec;     /* [NC][vocab + 1][LATENT] */
} Model;

static int make_model(Model *m, const Args *a, uint64_t *s) {
  int64_t V = a->vocab;
  m->token = malloc(sizeof *m->token * NC * (size_t)V);
  m->cum = malloc(sizeof *m->cum * NC * (size_t)V);
  m->effect = malloc(sizeof *m->effect * NC * (size_t)(V + 1));
  m->vec = malloc(sizeof *m->vec * NC * (size_t)(V + 1) * LATENT);
  char *taken = calloc((size_t)a->rows, 1);
  if (!m->token || !m->cum || !m->effect || !m->vec || !taken) {
    free(taken);
    return 1;
  }
  for (int k = 0; k < ND; k++)
    m->w[k] = 0.3 * gauss(s);
  for (int k = 0; k < NC; k++) {
    memset(taken, 0, (size_t)a->rows);
    double total = 0;
    for (int64_t v = 0; v < V; v++)
      total += 1.0 / (double)(v + 2);
    for (int64_t v = 0, row; v < V; v++) {
      uint32_t t;
      do { /* a row of its own, not row 0: rows - 1 - v of rows are */
        t = (uint32_t)next(s);
        row = dtrt_criteo_row(t, a->rows);
      } while (taken[row] || row == 0);
      taken[row] = 1;
      m->token[k * V + v] = t;
      m->cum[k * V + v] = (v ? m->cum[k * V + v - 1] : 0) + 1.0 / (double)(v + 2) / total;
    }
    for (int64_t v = 0; v <= V; v++) {
      m->effect[k * (V + 1) + v] = 0.25 * gauss(s);
      for (int j = 0; j < LATENT; j++)
        m->vec[(k * (V + 1) + v) * LATENT + j] = a->pairwise * gauss(s);
    }
  }
  free(taken);
  return 0;
}

int main(int argc, char **argv) {
  Args a;
  if (parse(&a, argc, argv))
    return 2;
  uint64_t s = a.seed * 0x2545f4914f6cdd1du + 1;
  Model m = {0};
  double *p = malloc(sizeof *p * (size_t)a.holdout);
  float *y = malloc(sizeof *y * (size_t)a.holdout);
  FILE *f = NULL;
  int rc = 1;
  if (!p || !y || make_model(&m, &a, &s)) {
    fprintf(stderr, "criteo_gen: out of memory\n");
    goto done;
  }
  if (!(f = fopen(a.out, "w"))) {
    perror(a.out);
    goto done;
  }
  int64_t V = a.vocab;
  for (int64_t i = 0; i < a.lines; i++) {
    char line[600], *q = line;
    double logit = -1;
    int ints[ND];
    for (int k = 0; k < ND; k++) {
      double u = uniform(&s);
      int x = u < 0.05 ? -2 : u < 0.07 ? -1 : (int)floor(exp(4 * uniform(&s)) - 1);
      ints[k] = x;
      logit += m.w[k] * (log1p(x > 0 ? x : 0) - 2);
    }
    int64_t val[NC];
    double sum[LATENT] = {0}, sq = 0;
    for (int k = 0; k < NC; k++) {
      double u = uniform(&s);
      int64_t v = V; /* missing */
      if (u >= 0.05) {
        double c = uniform(&s);
        for (v = 0; v < V - 1 && m.cum[k * V + v] <= c; v++)
          ;
      }
      val[k] = v;
      logit += m.effect[k * (V + 1) + v];
      /* sum over pairs k < l of <u_k, u_l> = (|sum u|^2 - sum |u|^2) / 2 */
      for (int j = 0; j < LATENT; j++) {
        double e = m.vec[(k * (V + 1) + v) * LATENT + j];
        sum[j] += e;
        sq += e * e;
      }
    }
    for (int j = 0; j < LATENT; j++)
      logit += sum[j] * sum[j] / 2;
    logit -= sq / 2;
    double prob = 1 / (1 + exp(-logit));
    int label = uniform(&s) < prob;
    q += sprintf(q, "%d", label);
    for (int k = 0; k < ND; k++)
      q += ints[k] == -2 ? sprintf(q, "\t") : sprintf(q, "\t%d", ints[k]);
    for (int k = 0; k < NC; k++)
      q += val[k] == V ? sprintf(q, "\t") : sprintf(q, "\t%08x", (unsigned)m.token[k * V + val[k]]);
    *q++ = '\n';
    if (fwrite(line, 1, (size_t)(q - line), f) != (size_t)(q - line)) {
      perror(a.out);
      goto done;
    }
    int64_t h = i - (a.lines - a.holdout);
    if (h >= 0) {
      p[h] = prob;
      y[h] = (float)label;
    }
  }
  if (fclose(f)) {
    f = NULL;
    perror(a.out);
    goto done;
  }
  f = NULL;
  printf("held-out %lld of %lld lines: ceiling auc %.6f log loss %.6f\n", (long long)a.holdout,
         (long long)a.lines, roc_auc(p, y, a.holdout), log_loss(p, y, a.holdout));
  rc = 0;
done:
  if (f)
    fclose(f);
  free(p);
  free(y);
  free(m.token);
  free(m.cum);
  free(m.effect);
  free(m.vec);
  return rc;
}
