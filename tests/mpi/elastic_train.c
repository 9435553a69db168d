/* elastic_train.c: the job of the elastic fault test (tests/mpi/elastic.sh):
 * examples/mlp.dt built for several rank counts (dtc --devices), trained
 * on the batches of tests/mpi/ckpt_train.c (the batch of step s made from s
 * alone, seed 42), so that its checkpoints compare with ckpt_train's:
 *
 *     elastic_train CKPT STEPS EVERY [KILL_AT]
 *
 * resumes from CKPT when it exists, trains up to step STEPS, saving CKPT
 * after every step that is a multiple of EVERY and after the last. Each rank
 * first appends "RANK PID" to CKPT.pids.N (N: the job's rank count). With
 * KILL_AT, a job that did not resume ends its last rank with SIGKILL at the
 * start of step KILL_AT, once it has written the time (CLOCK_REALTIME,
 * seconds) to CKPT.killed. Rank 0 prints "elastic_train: resumed at step S on
 * N ranks" and "elastic_train: N ranks trained to step S"; every rank prints
 * its own errors. */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "dtrt.h"
#include "mlp.h"

#define SEED 42

static float x[MLP_X_ELEMS];
static int32_t y[MLP_BATCH];

/* The batch of step s, as tests/mpi/ckpt_train.c makes it. */
static void batch(int64_t s) {
  uint64_t r = 0x9e3779b97f4a7c15u ^ (uint64_t)(s + 1) * 0xbf58476d1ce4e5b9u;
  for (int k = 0; k < MLP_X_ELEMS + MLP_BATCH; k++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    if (k < MLP_X_ELEMS)
      x[k] = (float)(r >> 40) / (float)(1 << 24);
    else
      y[k - MLP_X_ELEMS] = (int32_t)(r % 10);
  }
}

static int append(const char *path, const char *fmt, long a, double b) {
  FILE *f = fopen(path, "a");
  if (!f)
    return 1;
  fprintf(f, fmt, a, b);
  return fclose(f) ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: elastic_train CKPT STEPS EVERY [KILL_AT]\n");
    return 2;
  }
  const char *ckpt = argv[1];
  long steps = atol(argv[2]), every = atol(argv[3]), kill_at = argc == 5 ? atol(argv[4]) : 0;
  if (steps < 1 || every < 1) {
    fprintf(stderr, "elastic_train: STEPS and EVERY must be positive\n");
    return 2;
  }
  mlp *m;
  if (mlp_create(&m, SEED)) {
    fprintf(stderr, "elastic_train: create: %s\n", mlp_error(NULL));
    return 1;
  }
  int me = mlp_rank(m), np = 1, started;
  MPI_Initialized(&started);   /* by mlp_create, under a launcher */
  if (started)
    MPI_Comm_size(MPI_COMM_WORLD, &np);
  char path[4200];
  snprintf(path, sizeof path, "%s.pids.%d", ckpt, np);
  if (append(path, "%ld %.0f\n", me, (double)getpid())) {
    fprintf(stderr, "elastic_train: rank %d: cannot write %s\n", me, path);
    mlp_destroy(m);
    return 1;
  }
  int rc = 0;
  bool resumed = !access(ckpt, F_OK);
  if (resumed && (rc = mlp_load(m, ckpt)))
    fprintf(stderr, "elastic_train: rank %d: load %s: %s\n", me, ckpt, mlp_error(m));
  if (!rc && resumed && me == 0)
    printf("elastic_train: resumed at step %lld on %d ranks\n", (long long)mlp_step(m), np);
  fflush(stdout);
  while (!rc && mlp_step(m) < steps) {
    int64_t s = mlp_step(m);
    if (!resumed && s + 1 == kill_at && me == np - 1) {
      struct timespec t;
      clock_gettime(CLOCK_REALTIME, &t);
      snprintf(path, sizeof path, "%s.killed", ckpt);
      append(path, "%ld.%09.0f\n", (long)t.tv_sec, (double)t.tv_nsec);
      kill(getpid(), SIGKILL);
    }
    float loss;
    batch(s);
    if ((rc = mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, &loss)) || !isfinite(loss)) {
      fprintf(stderr, "elastic_train: rank %d: step %lld: %s\n", me, (long long)s + 1,
              mlp_error(m));
      rc = 1;
    } else if ((mlp_step(m) % every == 0 || mlp_step(m) == steps) &&
               (rc = mlp_save(m, ckpt))) {
      fprintf(stderr, "elastic_train: rank %d: save %s: %s\n", me, ckpt, mlp_error(m));
    }
  }
  if (!rc && me == 0)
    printf("elastic_train: %d ranks trained to step %lld\n", np, (long long)mlp_step(m));
  mlp_destroy(m);
  return rc ? 1 : 0;
}
