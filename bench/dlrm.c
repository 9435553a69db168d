/* dlrm.c: the training-step timing loop of bench/dlrm.sh, over bench/dlrm.dt
 * (sparse tables, Adagrad) as the script compiles it, on one process or
 * sharded over ranks (bench/dlrm_tw.dt, dlrm_auto.dt), built against the
 * object with mpicc as bench/hetero.c is:
 *
 *     mpicc -O2 -I runtime -I DIR bench/dlrm.c DIR/model.o build/libdtrt.a \
 *           -lopenblas -lcjson -lz -lm                   (dlrm.h in DIR)
 *     mpiexec -n 3 ./dlrm [REPS [NAME]]
 *     {"bench": "NAME", "ranks": 3, "batch": B, "step_ms": .., "samples_per_s": ..}
 *
 * The inputs are 8 fixed pseudo-random batches taken in turn (every rank
 * passes the whole batch; the compiled model takes its rows): dense features
 * in [0, 4), each of the 26 ids uniform over its table's rows, clicks 0 or
 * 1. One OpenBLAS thread per rank. The time is the median over REPS steps
 * after three warm-up steps, taken on rank 0, which prints it (every step
 * ends with an all-reduce of the loss, so the ranks finish together). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "dlrm.h"
#include "dtrt.h"

#define NBATCH 8

void openblas_set_num_threads(int n);

static float dense[NBATCH][DLRM_DENSE_ELEMS], y[NBATCH][DLRM_Y_ELEMS];
static int32_t ids[NBATCH][DLRM_IDS_ELEMS];

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  const char *name = argc > 2 ? argv[2] : "dlrm";
  if (reps < 3)
    reps = 3;
  openblas_set_num_threads(1);
  uint64_t s = 0x9e3779b97f4a7c15u;
#define NEXT (s ^= s << 13, s ^= s >> 7, s ^= s << 17, s)
  for (int b = 0; b < NBATCH; b++) {
    for (int i = 0; i < DLRM_DENSE_ELEMS; i++)
      dense[b][i] = (float)(NEXT >> 40) / (float)(1 << 22);
    for (int i = 0; i < DLRM_IDS_ELEMS; i++)
      ids[b][i] = (int32_t)(NEXT % DLRM_T1_DIM0);
    for (int i = 0; i < DLRM_Y_ELEMS; i++)
      y[b][i] = (float)(NEXT % 2);
  }
#undef NEXT
  dlrm *m;
  if (dlrm_create(&m, 1)) {
    fprintf(stderr, "dlrm: %s\n", dlrm_error(NULL));
    return 1;
  }
  double *t = malloc(sizeof *t * (size_t)reps);
  if (!t) {
    fprintf(stderr, "dlrm: out of memory\n");
    dlrm_destroy(m);
    return 1;
  }
  float loss;
  for (int k = -3; k < reps; k++) {
    int b = (k + 3) % NBATCH;
    double t0 = now_ms();
    if (dlrm_train_step(m, dense[b], DLRM_DENSE_ELEMS, ids[b], DLRM_IDS_ELEMS, y[b],
                        DLRM_Y_ELEMS, &loss)) {
      fprintf(stderr, "dlrm: %s\n", dlrm_error(m));
      dlrm_destroy(m);
      free(t);
      return 1;
    }
    if (k >= 0)
      t[k] = now_ms() - t0;
  }
  double ms = median(t, reps);
  int rank = dtrt_model_rank((DtModel *)m);
  dlrm_destroy(m);
  free(t);
  if (rank == 0)
    printf("{\"bench\": \"%s\", \"ranks\": %d, \"batch\": %d, \"step_ms\": %.3f, "
           "\"samples_per_s\": %.0f}\n",
           name, DLRM_DEVICES, DLRM_DIM_B, ms, DLRM_DIM_B / ms * 1e3);
  return 0;
}
