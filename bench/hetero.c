/* hetero.c: the training-step timing loop of bench/hetero.sh, over a model
 * that the script compiles with dtc --cluster=<probed file> and then builds
 * this file against (bench/dp.c's loop, for either model):
 *
 *     mpicc -O2 -DHETERO_MLP -I runtime -I DIR bench/hetero.c DIR/mlp_big.o \
 *           build/libdtrt.a -lopenblas -lcjson -lz -lm      (mlp_big.h in DIR)
 *     mpicc -O2 -DHETERO_GPT ... DIR/gpt.o ...              (gpt.h in DIR)
 *     mpiexec -n 3 ./hetero_mlp [REPS [NAME [SAVE_PATH]]]
 *     {"bench": "NAME", "ranks": 3, "step_ms": .. [, "save_ms": ..]}
 *
 * The inputs are fixed pseudo-random data of the model's whole batch (every
 * rank passes the whole batch; the compiled model takes its rows). One
 * OpenBLAS thread per rank, as dtc-probe times them. The time is the median
 * over REPS steps after three warm-up steps, taken on rank 0, which prints
 * it (every step ends with an all-reduce, so the ranks finish together).
 * With SAVE_PATH it then times REPS checkpoint saves there (NAME_save: the
 * ranks write their own blocks of the one file; each save returns on every
 * rank after the file is renamed into place), median in "save_ms". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "dtrt.h"

#if defined(HETERO_MLP)
#include "mlp_big.h"
#define MODEL mlp_big
#define NDEV MLP_BIG_DEVICES
#define IN0_T float
#define IN0_N MLP_BIG_X_ELEMS
#define IN1_N MLP_BIG_Y_ELEMS
#define IN0_VAL(s) ((float)((s) >> 8) / (float)(1u << 24))
#define IN1_VAL(s) ((int32_t)(((s) >> 16) % 10))
#elif defined(HETERO_GPT)
#include "gpt.h"
#define MODEL gpt
#define NDEV GPT_DEVICES
#define IN0_T int32_t
#define IN0_N GPT_IDS_ELEMS
#define IN1_N GPT_NEXT_ELEMS
#define IN0_VAL(s) ((int32_t)(((s) >> 16) % 96))
#define IN1_VAL(s) ((int32_t)(((s) >> 16) % 96))
#else
#error "define HETERO_MLP or HETERO_GPT"
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(suffix) CAT(MODEL, suffix)

void openblas_set_num_threads(int n);

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  const char *name = argc > 2 ? argv[2] : "hetero";
  const char *save = argc > 3 ? argv[3] : NULL;
  if (reps < 3)
    reps = 3;
  openblas_set_num_threads(1);
  static IN0_T in0[IN0_N];
  static int32_t in1[IN1_N];
  unsigned s = 1;
  for (int i = 0; i < IN0_N; i++) {
    s = s * 1103515245u + 12345u;
    in0[i] = IN0_VAL(s);
  }
  for (int i = 0; i < IN1_N; i++) {
    s = s * 1103515245u + 12345u;
    in1[i] = IN1_VAL(s);
  }

  MODEL *m;
  if (FN(_create)(&m, 1)) {
    fprintf(stderr, "hetero: %s\n", FN(_error)(NULL));
    return 1;
  }
  double *t = malloc(sizeof *t * (size_t)reps);
  if (!t) {
    fprintf(stderr, "hetero: out of memory\n");
    FN(_destroy)(m);
    return 1;
  }
  float loss;
  for (int k = -3; k < reps; k++) {
    double t0 = now_ms();
    if (FN(_train_step)(m, in0, IN0_N, in1, IN1_N, &loss)) {
      fprintf(stderr, "hetero: %s\n", FN(_error)(m));
      FN(_destroy)(m);
      free(t);
      return 1;
    }
    if (k >= 0)
      t[k] = now_ms() - t0;
  }
  double ms = median(t, reps), save_ms = 0;
  for (int k = 0; save && k < reps; k++) {
    double t0 = now_ms();
    if (FN(_save)(m, save)) {
      fprintf(stderr, "hetero: %s\n", FN(_error)(m));
      FN(_destroy)(m);
      free(t);
      return 1;
    }
    t[k] = now_ms() - t0;
  }
  if (save)
    save_ms = median(t, reps);
  int rank = dtrt_model_rank((DtModel *)m);
  FN(_destroy)(m);
  free(t);
  if (rank == 0 && save)
    printf("{\"bench\": \"%s\", \"ranks\": %d, \"step_ms\": %.3f, \"save_ms\": %.3f}\n", name,
           NDEV, ms, save_ms);
  else if (rank == 0)
    printf("{\"bench\": \"%s\", \"ranks\": %d, \"step_ms\": %.3f}\n", name, NDEV, ms);
  return 0;
}
