/* fault_train.c: the training job of the fault tests (tests/mpi/faults.sh),
 * tests/mpi/mlp_dp4.dt on 4 ranks. It trains on fixed pseudo-random
 * batches and saves a checkpoint after every step, so that a fault finds a
 * save under way most of the time:
 *
 *     fault_train DIR STEPS [STALL] train STEPS steps; after step S save DIR/ck.S
 *                                   (one file, every rank writing its part), then
 *                                   rank 0 removes ck.S-2;
 *                                   rank 0 prints "saved S" once every rank has saved S;
 *                                   the last rank first sleeps STALL seconds (default 0)
 *     fault_train --resume DIR MIN  load the newest checkpoint of DIR (its step at
 *                                   least MIN), check its step, train one step
 *
 * The last two checkpoints are kept, and a rank starts save S+1 only after
 * all have finished save S (the save shares the status), so a fault during
 * save S+1 always leaves checkpoint S complete (its temporary file, never
 * renamed, is all a fault leaves of S+1). Each rank
 * prints its own errors, prefixed "fault_train: rank R:". */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "dtrt.h"
#include "mlp.h"

static float x[MLP_X_ELEMS];
static int32_t y[MLP_Y_ELEMS];

static void batch(unsigned *s) {
  for (int k = 0; k < MLP_X_ELEMS; k++) {
    *s = *s * 1103515245u + 12345u;
    x[k] = (float)(*s >> 8) / (float)(1u << 24);
  }
  for (int k = 0; k < MLP_Y_ELEMS; k++) {
    *s = *s * 1103515245u + 12345u;
    y[k] = (int32_t)((*s >> 16) % 10);
  }
}

/* The newest step S of the DIR/ck.S files; -1 when none. */
static long newest(const char *dir) {
  DIR *d = opendir(dir);
  long best = -1;
  struct dirent *e;
  while (d && (e = readdir(d))) {
    long s;
    int n = 0;
    if (sscanf(e->d_name, "ck.%ld%n", &s, &n) == 1 && !e->d_name[n] && s > best)
      best = s;
  }
  if (d)
    closedir(d);
  return best;
}

static int resume(mlp *m, int me, const char *dir, long min) {
  long mine = newest(dir), set;
  MPI_Allreduce(&mine, &set, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  if (set < min) {
    fprintf(stderr, "fault_train: rank %d: the newest checkpoint is step %ld, not %ld "
            "or later\n", me, set, min);
    return 1;
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/ck.%ld", dir, set);
  if (mlp_load(m, path)) {
    fprintf(stderr, "fault_train: rank %d: load %s: %s\n", me, path, mlp_error(m));
    return 1;
  }
  if (mlp_step(m) != set) {
    fprintf(stderr, "fault_train: rank %d: %s holds step %lld\n", me, path,
            (long long)mlp_step(m));
    return 1;
  }
  unsigned s = (unsigned)set;
  float loss;
  batch(&s);
  if (mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, &loss) || !isfinite(loss)) {
    fprintf(stderr, "fault_train: rank %d: the step after loading: %s\n", me, mlp_error(m));
    return 1;
  }
  if (me == 0)
    printf("fault_train: resumed from step %ld, loss %.4f\n", set, loss);
  return 0;
}

static int train(mlp *m, int me, const char *dir, long steps, int stall) {
  char path[4096], old[4200];
  unsigned s = 0;
  int np;
  MPI_Comm_size(MPI_COMM_WORLD, &np);
  if (me == np - 1 && stall > 0)
    sleep((unsigned)stall);
  for (long k = 1; k <= steps; k++) {
    float loss;
    batch(&s);
    if (mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, &loss)) {
      fprintf(stderr, "fault_train: rank %d: step %ld: %s\n", me, k, mlp_error(m));
      return 1;
    }
    s = (unsigned)k;
    snprintf(path, sizeof path, "%s/ck.%ld", dir, k);
    if (mlp_save(m, path)) {
      fprintf(stderr, "fault_train: rank %d: save %s: %s\n", me, path, mlp_error(m));
      return 1;
    }
    snprintf(old, sizeof old, "%s/ck.%ld", dir, k - 2);
    if (me == 0)
      remove(old);
    if (me == 0) {
      printf("saved %ld\n", k);
      fflush(stdout);
    }
  }
  if (me == 0)
    printf("fault_train: all %ld steps done\n", steps);
  return 0;
}

int main(int argc, char **argv) {
  int again = argc == 4 && !strcmp(argv[1], "--resume");
  if ((argc != 3 && argc != 4) || (argc == 4 && !again && atoi(argv[3]) < 0)) {
    fprintf(stderr, "usage: fault_train DIR STEPS [STALL] | fault_train --resume DIR MIN\n");
    return 2;
  }
  mlp *m;
  if (mlp_create(&m, 7)) {
    fprintf(stderr, "fault_train: create: %s\n", mlp_error(NULL));
    return 1;
  }
  int me = dtrt_model_rank((DtModel *)m);
  /* every failure below is shared by all ranks, so all of them destroy */
  int rc = again ? resume(m, me, argv[2], atol(argv[3]))
                 : train(m, me, argv[1], atol(argv[2]), argc == 4 ? atoi(argv[3]) : 0);
  mlp_destroy(m);
  return rc;
}
