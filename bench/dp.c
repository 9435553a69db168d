/* dp.c: one training step of the 784-1024-1024-10 MLP at batch 256 compiled
 * by dtc, data parallel on two ranks (bench/dp.dt: each rank computes on 128
 * rows, one OpenBLAS thread each, and the gradients are all-reduced) against
 * the same step in one process (examples/mlp_big.dt, OpenBLAS on every
 * core). The source builds both: dp, from the two-device model, and
 * dp_single; bench/dp.sh runs them in one go and dp prints the result line:
 *
 *     bench/dp.sh [BUILD] [REPS]
 *     {"bench": "dp", "ranks": 2, "dp_ms": .., "single_ms": .., "single_over_dp": ..}
 *
 * which is, by hand:
 *
 *     build/bench/dp_single [REPS]              (prints single_ms)
 *     mpiexec -n 2 build/bench/dp [REPS [SINGLE_MS]]
 *
 * Times are medians over REPS steps after three warm-up steps, taken on rank
 * 0 (every step ends with an all-reduce, so the ranks finish together). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "dtrt.h"
#include "mlp_big.h"

void openblas_set_num_threads(int n);

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  double single = argc > 2 ? atof(argv[2]) : 0;
  if (reps < 3)
    reps = 3;
  if (MLP_BIG_DEVICES > 1)
    openblas_set_num_threads(1);
  static float x[MLP_BIG_X_ELEMS];
  static int32_t y[MLP_BIG_Y_ELEMS];
  unsigned s = 1;
  for (int i = 0; i < MLP_BIG_X_ELEMS; i++)
    x[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (float)(1u << 24);
  for (int i = 0; i < MLP_BIG_Y_ELEMS; i++)
    y[i] = (int32_t)((s = s * 1103515245u + 12345u) >> 16) % 10;

  mlp_big *m;
  if (mlp_big_create(&m, 1)) {
    fprintf(stderr, "dp: %s\n", mlp_big_error(NULL));
    return 1;
  }
  double *t = malloc(sizeof *t * (size_t)reps);
  float loss;
  for (int k = -3; k < reps; k++) {
    double t0 = now_ms();
    if (mlp_big_train_step(m, x, MLP_BIG_X_ELEMS, y, MLP_BIG_Y_ELEMS, &loss)) {
      fprintf(stderr, "dp: %s\n", mlp_big_error(m));
      mlp_big_destroy(m);
      return 1;
    }
    if (k >= 0)
      t[k] = now_ms() - t0;
  }
  int rank = dtrt_model_rank((DtModel *)m);
  mlp_big_destroy(m);
  double ms = median(t, reps);
  free(t);
  if (rank)
    return 0;
  if (MLP_BIG_DEVICES == 1)
    printf("{\"bench\": \"dp_single\", \"ranks\": 1, \"single_ms\": %.3f}\n", ms);
  else if (single > 0)
    printf("{\"bench\": \"dp\", \"ranks\": %d, \"dp_ms\": %.3f, \"single_ms\": %.3f, "
           "\"single_over_dp\": %.3f}\n", MLP_BIG_DEVICES, ms, single, single / ms);
  else
    printf("{\"bench\": \"dp\", \"ranks\": %d, \"dp_ms\": %.3f}\n", MLP_BIG_DEVICES, ms);
  return 0;
}
