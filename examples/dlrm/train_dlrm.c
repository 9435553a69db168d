/* train_dlrm.c: trains examples/dlrm.dt on a file of Criteo's display-
 * advertising text format (criteo_gen's synthetic data, or Criteo's own) and
 * prints, after each epoch, the training loss and the log loss and ROC AUC
 * of the held-out split, the file's last --holdout lines (a fifth by
 * default). The file is read by libdtrt's Criteo reader in batches, each
 * category hashed into its table's DLRM_DIM_R rows; a malformed line stops
 * the run with the reader's message, which names the file and the line.
 * Training batches are drawn in a seeded shuffle each epoch; a short last
 * batch is dropped. Epoch e (from 0) trains at the rate --lr (the model's,
 * 0.002, by default) times --decay^e (0.3 by default): the later epochs'
 * smaller steps settle what the first learnt. The held-out lines are scored
 * by dlrm_forward, the last batch padded with zero rows whose scores are
 * ignored.
 *
 *     criteo_gen -o synth.txt --lines 100000 --holdout 20000 --vocab 10 --seed 7
 *     train_dlrm --data synth.txt --holdout 20000
 *
 * criteo_gen prints the ceiling, then train_dlrm each epoch (4 by default):
 *
 *     held-out 20000 of 100000 lines: ceiling auc 0.813787 log loss 0.452916
 *     epoch 1: train loss 0.500978, held-out log loss 0.463699 auc 0.804307
 *     epoch 2: train loss 0.456076, held-out log loss 0.459204 auc 0.807857
 *     epoch 3: train loss 0.451313, held-out log loss 0.458704 auc 0.808011
 *     epoch 4: train loss 0.449800, held-out log loss 0.458730 auc 0.808038 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm.h"
#include "dtrt.h"
#include "metrics.h"

enum { B = DLRM_BATCH, ND = DTRT_CRITEO_DENSE, NC = DTRT_CRITEO_CATS, CHUNK = 4096 };
_Static_assert(DLRM_DENSE_DIM1 == ND && DLRM_IDS_DIM1 == NC, "dlrm.dt takes Criteo's fields");

typedef struct Args {
  const char *data;
  int64_t holdout; /* -1: a fifth of the lines */
  int epochs;
  uint64_t seed;
  double lr;    /* 0: the model's */
  double decay; /* the rate is multiplied by this after each epoch */
} Args;

/* The lines of a file: dense [n, 13], ids [n, 26], labels [n]. */
typedef struct Set {
  float *dense, *labels;
  int32_t *ids;
  int64_t n, cap;
} Set;

static int usage(void) {
  fprintf(stderr, "usage: train_dlrm --data FILE [--holdout N] [--epochs N] [--seed S] [--lr LR]\n"
                  "                  [--decay F]\n");
  return 2;
}

static int parse(Args *a, int argc, char **argv) {
  *a = (Args){NULL, -1, 4, 1, 0, 0.3};
  for (int i = 1; i < argc; i += 2) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    if (!v)
      return usage();
    if (!strcmp(o, "--data"))
      a->data = v;
    else if (!strcmp(o, "--holdout"))
      a->holdout = strtoll(v, &end, 10);
    else if (!strcmp(o, "--epochs"))
      a->epochs = (int)strtol(v, &end, 10);
    else if (!strcmp(o, "--seed"))
      a->seed = strtoull(v, &end, 10);
    else if (!strcmp(o, "--lr"))
      a->lr = strtod(v, &end);
    else if (!strcmp(o, "--decay"))
      a->decay = strtod(v, &end);
    else
      return usage();
    if (end && (*end || end == v || a->epochs < 0 || a->holdout < -1 || !(a->lr >= 0) ||
                !(a->decay > 0 && a->decay <= 1)))
      return usage();
  }
  return a->data ? 0 : usage();
}

static int grow(Set *s) {
  int64_t cap = s->cap ? 2 * s->cap : CHUNK;
  float *d = realloc(s->dense, sizeof *d * (size_t)(cap * ND));
  if (d)
    s->dense = d;
  int32_t *i = realloc(s->ids, sizeof *i * (size_t)(cap * NC));
  if (i)
    s->ids = i;
  float *l = realloc(s->labels, sizeof *l * (size_t)cap);
  if (l)
    s->labels = l;
  if (!d || !i || !l)
    return 1;
  s->cap = cap;
  return 0;
}

/* Reads the whole file into s, CHUNK lines a call of the reader. */
static int load(DtrtCtx *ctx, const char *path, Set *s) {
  int64_t rows[NC];
  for (int k = 0; k < NC; k++)
    rows[k] = DLRM_DIM_R;
  DtCriteo *r;
  if (dtrt_criteo_open(ctx, path, rows, &r)) {
    fprintf(stderr, "train_dlrm: %s\n", dtrt_errmsg(ctx));
    return 1;
  }
  int64_t got;
  do {
    if (s->cap - s->n < CHUNK && grow(s)) {
      fprintf(stderr, "train_dlrm: out of memory\n");
      dtrt_criteo_close(r);
      return 1;
    }
    if (dtrt_criteo_read(r, CHUNK, s->dense + s->n * ND, s->ids + s->n * NC, s->labels + s->n,
                         &got)) {
      fprintf(stderr, "train_dlrm: %s\n", dtrt_errmsg(ctx));
      dtrt_criteo_close(r);
      return 1;
    }
    s->n += got;
  } while (got);
  dtrt_criteo_close(r);
  return 0;
}

static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

/* The order of the training lines in epoch `epoch`: a seeded Fisher-Yates. */
static void shuffle(int64_t *idx, int64_t n, uint64_t seed, int epoch) {
  uint64_t s = seed * 1000003u + (uint64_t)epoch;
  for (int64_t i = 0; i < n; i++)
    idx[i] = i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(next_rand(&s) % (uint64_t)(i + 1)), t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

/* Copies lines order[0..k) (NULL: lines at, at + 1, ...) of s into a batch,
 * rows past k zero. */
static void batch(const Set *s, const int64_t *order, int64_t at, int64_t k, float *dense,
                  int32_t *ids, float *y) {
  memset(dense, 0, sizeof *dense * B * ND);
  memset(ids, 0, sizeof *ids * B * NC);
  memset(y, 0, sizeof *y * B);
  for (int64_t i = 0; i < k; i++) {
    int64_t r = order ? order[at + i] : at + i;
    memcpy(dense + i * ND, s->dense + r * ND, sizeof *dense * ND);
    memcpy(ids + i * NC, s->ids + r * NC, sizeof *ids * NC);
    y[i] = s->labels[r];
  }
}

/* The held-out lines [first, s->n) scored into p: the click probability. */
static int score(dlrm *m, const Set *s, int64_t first, double *p) {
  static float dense[B * ND], y[B], logit[B];
  static int32_t ids[B * NC];
  for (int64_t at = first; at < s->n; at += B) {
    int64_t k = s->n - at < B ? s->n - at : B;
    batch(s, NULL, at, k, dense, ids, y);
    int rc = dlrm_forward(m, dense, B * ND, ids, B * NC, logit, B);
    if (rc)
      return rc;
    for (int64_t i = 0; i < k; i++)
      p[at - first + i] = 1 / (1 + exp(-(double)logit[i]));
  }
  return 0;
}

int main(int argc, char **argv) {
  Args a;
  if (parse(&a, argc, argv))
    return 2;
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx) {
    fprintf(stderr, "train_dlrm: out of memory\n");
    return 1;
  }
  Set s = {0};
  dlrm *m = NULL;
  int64_t *order = NULL;
  double *p = NULL;
  int rc = 1;
  if (load(ctx, a.data, &s))
    goto done;
  int64_t held = a.holdout < 0 ? s.n / 5 : a.holdout, n = s.n - held;
  if (held < 1 || n < B) {
    fprintf(stderr,
            "train_dlrm: %s: %lld lines leave %lld to train on and %lld held out; at least "
            "%d and 1 are needed\n",
            a.data, (long long)s.n, (long long)(n > 0 ? n : 0), (long long)held, B);
    goto done;
  }
  if ((rc = dlrm_create(&m, a.seed))) {
    fprintf(stderr, "train_dlrm: cannot create the model: %s\n", dlrm_error(NULL));
    goto done;
  }
  order = malloc(sizeof *order * (size_t)n);
  p = malloc(sizeof *p * (size_t)held);
  if (!order || !p) {
    fprintf(stderr, "train_dlrm: out of memory\n");
    rc = 1;
    goto done;
  }
  static float dense[B * ND], y[B];
  static int32_t ids[B * NC];
  double lr0 = a.lr > 0 ? a.lr : dlrm_get_lr(m);
  for (int e = 0; e < a.epochs && !rc; e++) {
    if ((rc = dlrm_set_lr(m, lr0 * pow(a.decay, e))))
      break;
    shuffle(order, n, a.seed, e);
    double sum = 0;
    int64_t steps = n / B;
    for (int64_t b = 0; b < steps; b++) {
      float loss;
      batch(&s, order, b * B, B, dense, ids, y);
      if ((rc = dlrm_train_step(m, dense, B * ND, ids, B * NC, y, B, &loss)))
        break;
      sum += loss;
    }
    if (rc || (rc = score(m, &s, n, p)))
      break;
    printf("epoch %d: train loss %.6f, held-out log loss %.6f auc %.6f\n", e + 1,
           sum / (double)steps, log_loss(p, s.labels + n, held), roc_auc(p, s.labels + n, held));
    fflush(stdout);
  }
  if (rc)
    fprintf(stderr, "train_dlrm: %s\n", dlrm_error(m));
done:
  free(order);
  free(p);
  free(s.dense);
  free(s.ids);
  free(s.labels);
  dlrm_destroy(m);
  dtrt_ctx_free(ctx);
  return rc ? 1 : 0;
}
