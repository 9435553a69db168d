/* ckpt_dlrm.c: tests/mpi/dlrm_sparse.dt (sparse tables, Adagrad) under a
 * plan (one process, or mpiexec with the plan's rank count), for the
 * checkpoints of table-wise tables (tests/mpi/tw_resume.sh). The batch of
 * step s is made from s alone, so a run resumed on any layout trains on
 * the batches an uninterrupted run would:
 *
 *     ckpt_dlrm train N OUT        from seed 42, N steps, save OUT
 *     ckpt_dlrm resume IN N OUT    load IN, train up to step N, save OUT
 *     ckpt_dlrm compare A B        (one process) load A and B into two
 *                                  models: every param and Adagrad sum
 *                                  within TOL of its largest element, the
 *                                  same step */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlrm.h"
#include "dtrt.h"

#define TOL 1e-4
#define SEED 42

static int32_t items[DLRM_ITEMS_ELEMS], tags[DLRM_TAGS_ELEMS], cats[DLRM_CATS_ELEMS];
static int32_t offs[DLRM_OFFS_ELEMS];
static float x[DLRM_X_ELEMS], y[DLRM_Y_ELEMS];
static int me;

/* The batch of step s: ids over each table (a tag of 0, padding, about one
 * in three), bags of 0 to 4 categories, clicks 0 or 1. */
static void batch(int64_t s) {
  uint64_t r = 0x9e3779b97f4a7c15u ^ (uint64_t)(s + 1) * 0xbf58476d1ce4e5b9u;
#define NEXT (r ^= r << 13, r ^= r >> 7, r ^= r << 17, r)
  for (int k = 0; k < DLRM_ITEMS_ELEMS; k++)
    items[k] = (int32_t)(NEXT % 100);
  for (int k = 0; k < DLRM_TAGS_ELEMS; k++)
    tags[k] = NEXT % 3 ? (int32_t)(NEXT % 30) : 0;
  for (int k = 0; k < DLRM_CATS_ELEMS; k++)
    cats[k] = (int32_t)(NEXT % 20);
  offs[0] = 0;
  for (int k = 1; k < DLRM_OFFS_ELEMS; k++) {
    int32_t end = offs[k - 1] + (int32_t)(NEXT % 5);
    offs[k] = end > DLRM_CATS_ELEMS ? DLRM_CATS_ELEMS : end;
  }
  for (int k = 0; k < DLRM_X_ELEMS; k++)
    x[k] = (float)(NEXT >> 40) / (float)(1 << 24);
  for (int k = 0; k < DLRM_Y_ELEMS; k++)
    y[k] = (float)(NEXT % 2);
#undef NEXT
}

static int fail(dlrm *m, const char *what, const char *path) {
  fprintf(stderr, "ckpt_dlrm: rank %d: %s %s: %s\n", me, what, path ? path : "", dlrm_error(m));
  return 1;
}

static int train_to(dlrm *m, int64_t n) {
  while (dlrm_step(m) < n) {
    float loss;
    batch(dlrm_step(m));
    if (dlrm_train_step(m, items, DLRM_ITEMS_ELEMS, tags, DLRM_TAGS_ELEMS, cats, DLRM_CATS_ELEMS,
                        offs, DLRM_OFFS_ELEMS, x, DLRM_X_ELEMS, y, DLRM_Y_ELEMS, &loss) ||
        !isfinite(loss))
      return fail(m, "train", NULL);
  }
  return 0;
}

static const char *const names[] = {"e_item", "e_tag", "e_cat", "w0", "w1", "b1", "w2",
                                    "e_item__sum", "e_tag__sum", "e_cat__sum"};
enum { NNAMES = sizeof names / sizeof *names };

/* Every param and sum of a and b (whole, one process) within tol of the
 * largest element of a's. */
static int compare(dlrm *a, dlrm *b, double tol) {
  int bad = 0;
  for (int k = 0; k < NNAMES; k++) {
    DtTensor ta, tb;
    if (dtrt_model_tensor_block((DtModel *)a, names[k], &ta, NULL, NULL) ||
        dtrt_model_tensor_block((DtModel *)b, names[k], &tb, NULL, NULL)) {
      fprintf(stderr, "ckpt_dlrm: no tensor '%s'\n", names[k]);
      return 1;
    }
    int64_t n = 1;
    for (int d = 0; d < ta.rank; d++)
      n *= ta.dim[d];
    double max = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
      max = fmax(max, fabs(((float *)ta.data)[i]));
      diff = fmax(diff, fabs((double)((float *)ta.data)[i] - ((float *)tb.data)[i]));
    }
    printf("%-12s max |diff| %.3g, %.3g of its largest element\n", names[k], diff,
           max > 0 ? diff / max : diff);
    if (diff > tol * max) {
      fprintf(stderr, "ckpt_dlrm: '%s' differs by %g (largest element %g)\n", names[k], diff,
              max);
      bad = 1;
    }
  }
  if (dlrm_step(a) != dlrm_step(b)) {
    fprintf(stderr, "ckpt_dlrm: steps %lld and %lld\n", (long long)dlrm_step(a),
            (long long)dlrm_step(b));
    bad = 1;
  }
  return bad;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  dlrm *m = NULL, *m2 = NULL;
  if (dlrm_create(&m, SEED)) {
    fprintf(stderr, "ckpt_dlrm: create: %s\n", dlrm_error(NULL));
    return 1;
  }
  me = dtrt_model_rank((DtModel *)m);
  int rc = 2;
  if (!strcmp(cmd, "train") && argc == 4) {
    rc = train_to(m, atol(argv[2]));
    if (!rc && dlrm_save(m, argv[3]))
      rc = fail(m, "save", argv[3]);
  } else if (!strcmp(cmd, "resume") && argc == 5) {
    rc = dlrm_load(m, argv[2]) ? fail(m, "load", argv[2]) : train_to(m, atol(argv[3]));
    if (!rc && dlrm_save(m, argv[4]))
      rc = fail(m, "save", argv[4]);
  } else if (!strcmp(cmd, "compare") && argc == 4) {
    rc = 1;
    if (dlrm_create(&m2, SEED))
      fprintf(stderr, "ckpt_dlrm: create: %s\n", dlrm_error(NULL));
    else if (dlrm_load(m, argv[2]))
      fail(m, "load", argv[2]);
    else if (dlrm_load(m2, argv[3]))
      fail(m2, "load", argv[3]);
    else
      rc = compare(m, m2, TOL);
  } else {
    fprintf(stderr, "usage: ckpt_dlrm train N OUT | resume IN N OUT | compare A B\n");
  }
  dlrm_destroy(m2);
  dlrm_destroy(m);
  return rc;
}
