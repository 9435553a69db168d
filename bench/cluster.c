/* cluster.c: the all-reduce of bench/cluster.sh: 16 MiB of f32 summed over
 * every rank by each method of libdtrt's all_reduce kernel (mpi, ring,
 * grouped, hierarchical), measured in the same run, the methods taking turns.
 * Each time is the slowest rank's, after a barrier; the median over REPS
 * (default 20) after two untimed rounds. Rank 0 prints one JSON line, with
 * flat_over_hierarchical the fastest of the flat methods (mpi, ring,
 * grouped) over hierarchical, and "same": true when every method gave every
 * rank the same sum (small integers: exact in any order):
 *
 *     tools/netns-cluster.sh run build/bench/cluster [REPS]
 *     {"bench": "cluster_all_reduce", "bytes": 16777216, "ranks": 4, "nodes": 2,
 *      "mpi_ms": .., "ring_ms": .., "grouped_ms": .., "hierarchical_ms": ..,
 *      "flat_over_hierarchical": .., "same": true} */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench.h"
#include "dtrt.h"

enum { NMETHOD = 4, BYTES = 16 << 20 };
static const int methods[NMETHOD] = {DTRT_COMM_MPI, DTRT_COMM_RING, DTRT_COMM_GROUPED,
                                     DTRT_COMM_HIER};

/* Seconds of one all-reduce of x into y by method on the slowest rank. */
static double timed(DtrtCtx *ctx, int method, float *x, float *y, int64_t n) {
  DtTensor in = {.data = x, .dtype = DTRT_F32, .rank = 1, .dim = {n}};
  DtTensor out = {.data = y, .dtype = DTRT_F32, .rank = 1, .dim = {n}};
  DtAttrs a = {.i = {0, method}, .ni = 2};
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  if (dtrt_k_all_reduce(ctx, &in, 1, &out, &a)) {
    fprintf(stderr, "cluster: %s: %s\n", dtrt_comm_method_names[method], dtrt_errmsg(ctx));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  t = MPI_Wtime() - t;
  double slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char **argv) {
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx || dtrt_comm_init(ctx)) {
    fprintf(stderr, "cluster: %s\n", ctx ? dtrt_errmsg(ctx) : "no memory");
    return 1;
  }
  int np = dtrt_nranks(ctx), me = dtrt_rank(ctx);
  int reps = argc > 1 ? atoi(argv[1]) : 20;
  reps = reps < 1 ? 1 : reps > 1000 ? 1000 : reps;
  if (np < 2) {
    fprintf(stderr, "cluster: run me on 2 or more ranks (tools/netns-cluster.sh run %s)\n",
            argv[0]);
    dtrt_ctx_free(ctx);
    return 1;
  }
  MPI_Comm node;
  int node_rank, nnodes;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_free(&node);
  int leader = node_rank == 0;
  MPI_Allreduce(&leader, &nnodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);

  int64_t n = BYTES / 4;
  float *x = malloc((size_t)BYTES), *y = malloc((size_t)BYTES * (NMETHOD + 1));
  double *t = malloc(sizeof *t * (size_t)reps * NMETHOD);
  if (!x || !y || !t) {
    fprintf(stderr, "cluster: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (int64_t k = 0; k < n; k++)
    x[k] = (float)((k * 31 + me * 7) % 13 - 6);
  for (int i = -2; i < reps; i++)
    for (int j = 0; j < NMETHOD; j++) {
      double s = timed(ctx, methods[j], x, y + n * j, n);
      if (i >= 0)
        t[j * reps + i] = s;
    }
  int same = 1, all;
  for (int j = 1; j < NMETHOD; j++)
    same &= !memcmp(y, y + n * j, (size_t)BYTES);
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  double ms[NMETHOD];
  for (int j = 0; j < NMETHOD; j++)
    ms[j] = median(t + j * reps, reps) * 1e3;
  double flat = ms[0] < ms[1] ? ms[0] : ms[1];
  flat = flat < ms[2] ? flat : ms[2];
  if (me == 0)
    printf("{\"bench\": \"cluster_all_reduce\", \"bytes\": %d, \"ranks\": %d, \"nodes\": %d, "
           "\"mpi_ms\": %.3f, \"ring_ms\": %.3f, \"grouped_ms\": %.3f, \"hierarchical_ms\": %.3f, "
           "\"flat_over_hierarchical\": %.3f, \"same\": %s}\n", BYTES, np, nnodes, ms[0], ms[1],
           ms[2], ms[3], flat / ms[3], all ? "true" : "false");
  free(x), free(y), free(t);
  dtrt_ctx_free(ctx);
  return 0;
}
