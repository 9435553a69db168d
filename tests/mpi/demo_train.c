/* demo_train.c: trains tests/mpi/demo_mlp.dt (DeMo, compiled by dtc for one
 * device or for a data-parallel mesh) for STEPS steps on batches made here
 * from a fixed seed, and prints on rank 0, as text, what an independent
 * implementation needs to redo the run (tests/e2e/demo_torch.py): the rank
 * count, the initial params, then per step the batch, the loss and the
 * params after it. Every rank holds the params whole; rank 0 checks that
 * the others' are the same bits after every step (exit 1 if not).
 *
 *     demo_train            (alone, or under mpiexec with the mesh's ranks)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "demo.h"
#include "dtrt.h"

#define STEPS 10
#define SEED 7

static const char *const params[] = {"w1", "b1", "w2", "b2"};
enum { NPARAM = sizeof params / sizeof params[0] };

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* Uniform in [-1, 1). */
static float uniform(void) { return (float)(next() >> 40) / (float)(1 << 23) - 1.0f; }

static void print(const char *what, const float *v, int64_t n) {
  printf("%s %lld", what, (long long)n);
  for (int64_t k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

/* Rank 0 prints the params and checks the other ranks hold the same bits. */
static bool params_out(demo *m, int me, int np, const char *tag) {
  bool ok = true;
  for (int k = 0; k < NPARAM; k++) {
    DtTensor t;
    if (dtrt_model_tensor_block((DtModel *)m, params[k], &t, NULL, NULL)) {
      fprintf(stderr, "demo_train: %s\n", demo_error(m));
      exit(1);
    }
    int64_t n = 1;
    for (int d = 0; d < t.rank; d++)
      n *= t.dim[d];
    if (me) {
      MPI_Send(t.data, (int)n, MPI_FLOAT, 0, k, MPI_COMM_WORLD);
      continue;
    }
    for (int r = 1; r < np; r++) {
      float *v = malloc(sizeof *v * (size_t)n);
      MPI_Recv(v, (int)n, MPI_FLOAT, r, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (memcmp(v, t.data, sizeof *v * (size_t)n)) {
        fprintf(stderr, "demo_train: %s: rank %d's '%s' differs from rank 0's\n", tag, r,
                params[k]);
        ok = false;
      }
      free(v);
    }
    char what[64];
    snprintf(what, sizeof what, "param %s", params[k]);
    print(what, t.data, n);
  }
  return ok;
}

int main(void) {
  demo *m;
  if (demo_create(&m, SEED)) {
    fprintf(stderr, "demo_train: create: %s\n", demo_error(NULL));
    return 1;
  }
  int me = dtrt_model_rank((DtModel *)m), np = 1, up;
  MPI_Initialized(&up);
  if (up)
    MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (!me)
    printf("ranks %d\n", np);
  bool ok = true, same = params_out(m, me, np, "initial");
  static float x[DEMO_X_ELEMS], y[DEMO_Y_ELEMS];
  for (int s = 0; s < STEPS && ok; s++) {
    for (int k = 0; k < DEMO_X_ELEMS; k++)
      x[k] = uniform();
    for (int k = 0; k < DEMO_Y_ELEMS; k++)
      y[k] = uniform();
    float loss;
    if (demo_train_step(m, x, DEMO_X_ELEMS, y, DEMO_Y_ELEMS, &loss)) {
      fprintf(stderr, "demo_train: rank %d: step %d: %s\n", me, s, demo_error(m));
      ok = false;
      break;
    }
    if (!me) {
      printf("step %d\n", s);
      print("x", x, DEMO_X_ELEMS);
      print("y", y, DEMO_Y_ELEMS);
      print("loss", &loss, 1);
    }
    char tag[32];
    snprintf(tag, sizeof tag, "step %d", s);
    same = params_out(m, me, np, tag) && same;
  }
  demo_destroy(m);
  return ok && same ? 0 : 1;
}
