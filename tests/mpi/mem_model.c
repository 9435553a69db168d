/* mem_model.c: trains any model dtc compiled (MODEL, its header MODEL.h) for
 * two steps and runs its forward once, on inputs built from the model's
 * description (floats in [-1, 1), integers 0: a valid label and id in every
 * model), then prints this rank's memory for it, one line per rank:
 *
 *     mem_model
 *     rank R peak_bytes B rss_growth G
 *
 * tests/mpi/memory.sh compares them with the plan's "memory per device". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtrt.h"

#define STR_(x) #x
#define STR(x) STR_(x)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#include STR(MODEL.h)

/* Elements of the whole tensor g (a rank holds a block of it: the steps take
 * whole inputs and pick their rows). */
static int64_t elems(const DtGlobalDesc *g) {
  int64_t n = 1;
  for (int k = 0; k < g->rank; k++)
    n *= g->full[k] ? g->full[k] : g->dim[k];
  return n;
}

/* A buffer for global g, filled as the header comment says; NULL: no memory. */
static void *input(const DtGlobalDesc *g, uint64_t *r) {
  int64_t n = elems(g);
  if (g->dtype == DTRT_I32)
    return calloc((size_t)n + 1, sizeof(int32_t));
  float *v = malloc(sizeof *v * (size_t)(n + 1));
  for (int64_t k = 0; v && k < n; k++) {
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    v[k] = (float)(*r >> 40) / (float)(1 << 23) - 1.0f;
  }
  return v;
}

/* The buffers of the nin globals idx names, with their element counts. */
static int inputs(const DtModelDesc *d, int nin, const int32_t *idx, void **in,
                  int64_t *n, uint64_t *r) {
  for (int k = 0; k < nin; k++) {
    in[k] = input(&d->global[idx[k]], r);
    n[k] = elems(&d->global[idx[k]]);
    if (!in[k])
      return 1;
  }
  return 0;
}

int main(void) {
  MODEL *m;
  if (CAT(MODEL, _create)(&m, 42)) {
    fprintf(stderr, "mem_model: create: %s\n", CAT(MODEL, _error)(NULL));
    return 1;
  }
  DtModel *dm = (DtModel *)m;
  const DtModelDesc *d = dtrt_model_desc(dm);
  int rank = dtrt_model_rank(dm), nin = d->ntrain_in > d->nfwd_in ? d->ntrain_in : d->nfwd_in;
  void **in = calloc((size_t)nin + 1, sizeof *in), **out = calloc((size_t)d->nfwd_out + 1, sizeof *out);
  int64_t *n = calloc((size_t)nin + 1, sizeof *n), *on = calloc((size_t)d->nfwd_out + 1, sizeof *on);
  uint64_t r = 0x9e3779b97f4a7c15u;
  int bad = !in || !out || !n || !on;
  float loss;
  for (int step = 0; !bad && d->train_step && step < 2; step++) {
    bad = inputs(d, d->ntrain_in, d->train_in, in, n, &r) ||
          dtrt_model_train_step(dm, (const void *const *)in, n, &loss);
    for (int k = 0; k < d->ntrain_in; k++)
      free(in[k]), in[k] = NULL;
  }
  if (!bad && d->forward) {
    bad = inputs(d, d->nfwd_in, d->fwd_in, in, n, &r) ||
          inputs(d, d->nfwd_out, d->fwd_out, out, on, &r) ||
          dtrt_model_forward(dm, (const void *const *)in, n, out, on);
    for (int k = 0; k < d->nfwd_in; k++)
      free(in[k]);
    for (int k = 0; k < d->nfwd_out; k++)
      free(out[k]);
  }
  int64_t bytes, rss;
  if (!bad)
    bad = dtrt_model_memory(dm, &bytes, &rss);
  if (bad)
    fprintf(stderr, "mem_model: rank %d: %s\n", rank,
            *dtrt_model_error(dm) ? dtrt_model_error(dm) : "out of memory");
  else
    printf("rank %d peak_bytes %lld rss_growth %lld\n", rank, (long long)bytes, (long long)rss);
  CAT(MODEL, _destroy)(m);
  free(in), free(out), free(n), free(on);
  return bad;
}
