/* comm.c: dtc's collective kernels against the plain MPI calls, measured in
 * the same run, for 4 KiB to 16 MiB: all_reduce (ring, and MPI through dtrt)
 * against MPI_Allreduce, all_gather (variable count, ring, grouped) against
 * MPI_Allgather, reduce_scatter (counts, ring, grouped) against
 * MPI_Reduce_scatter_block; then all_reduce by each method with the values in
 * bf16 on the wire against the same in f32 (comm_all_reduce_bf16,
 * bf16_over_f32). bytes is the size of the whole tensor (in f32); each time
 * is the slowest rank's, the median over REPS repetitions (by default from
 * 200 for small sizes down to 40), the two sides alternating. Rank 0 prints
 * one JSON object per line.
 *
 * Run: mpiexec -n 2 build/bench/comm [REPS]
 *      (Open MPI as root: mpiexec --allow-run-as-root -n 2 build/bench/comm) */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench.h"
#include "dtrt.h"

enum { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER };

typedef struct Case {
  int coll, method;
  const char *bench, *name;
} Case;

static const Case cases[] = {
    {ALL_REDUCE, DTRT_COMM_RING, "comm_all_reduce", "ring"},
    {ALL_REDUCE, DTRT_COMM_MPI, "comm_all_reduce", "mpi"},
    {ALL_GATHER, DTRT_COMM_MPI, "comm_all_gather", "variable_count"},
    {ALL_GATHER, DTRT_COMM_RING, "comm_all_gather", "ring"},
    {ALL_GATHER, DTRT_COMM_GROUPED, "comm_all_gather", "grouped"},
    {REDUCE_SCATTER, DTRT_COMM_MPI, "comm_reduce_scatter", "counts"},
    {REDUCE_SCATTER, DTRT_COMM_RING, "comm_reduce_scatter", "ring"},
    {REDUCE_SCATTER, DTRT_COMM_GROUPED, "comm_reduce_scatter", "grouped"},
};

typedef struct Run {
  DtrtCtx *ctx;
  const Case *c;
  int np;
  int64_t n;         /* elements of the whole tensor */
  float *x, *dtc, *mpi;
} Run;

static DtStatus dtc_call(Run *r) {
  int64_t n = r->n, part = n / r->np;
  DtTensor whole = {.dtype = DTRT_F32, .rank = 1, .dim = {n}};
  DtTensor block = {.dtype = DTRT_F32, .rank = 1, .dim = {part}};
  DtAttrs a = {.i = {0, 0}, .ni = 2}; /* axis 0, dim 0, the even blocks, the method */
  for (int m = 0; m < r->np; m++)
    a.i[a.ni++] = part;
  a.i[a.ni++] = r->c->method;
  switch (r->c->coll) {
  case ALL_REDUCE:
    whole.data = r->x;
    block = (DtTensor){.data = r->dtc, .dtype = DTRT_F32, .rank = 1, .dim = {n}};
    a = (DtAttrs){.i = {0, r->c->method}, .ni = 2};
    return dtrt_k_all_reduce(r->ctx, &whole, 1, &block, &a);
  case ALL_GATHER:
    block.data = r->x, whole.data = r->dtc;
    return dtrt_k_all_gather(r->ctx, &block, 1, &whole, &a);
  default:
    whole.data = r->x, block.data = r->dtc;
    return dtrt_k_reduce_scatter(r->ctx, &whole, 1, &block, &a);
  }
}

static int mpi_call(Run *r) {
  int part = (int)(r->n / r->np);
  switch (r->c->coll) {
  case ALL_REDUCE:
    return MPI_Allreduce(r->x, r->mpi, (int)r->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  case ALL_GATHER:
    return MPI_Allgather(r->x, part, MPI_FLOAT, r->mpi, part, MPI_FLOAT, MPI_COMM_WORLD);
  default:
    return MPI_Reduce_scatter_block(r->x, r->mpi, part, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
}

/* Seconds of one call on the slowest rank. */
static double timed(Run *r, bool dtc) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  int bad = dtc ? dtc_call(r) != DT_OK : mpi_call(r) != MPI_SUCCESS;
  t = MPI_Wtime() - t;
  if (bad) {
    fprintf(stderr, "%s %s: %s\n", r->c->bench, r->c->name,
            dtc ? dtrt_errmsg(r->ctx) : "MPI call failed");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

/* Seconds of one all_reduce of n elements by method in wire format `wire`
 * (DtWire), on the slowest rank. */
static double timed_wire(DtrtCtx *ctx, float *x, float *y, int64_t n, int method, int wire) {
  DtTensor in = {.dtype = DTRT_F32, .rank = 1, .dim = {n}, .data = x};
  DtTensor out = {.dtype = DTRT_F32, .rank = 1, .dim = {n}, .data = y};
  DtAttrs a = {.i = {0, method, wire}, .ni = 3};
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  DtStatus s = dtrt_k_all_reduce(ctx, &in, 1, &out, &a);
  t = MPI_Wtime() - t;
  if (s) {
    fprintf(stderr, "comm_all_reduce_bf16 %s: %s\n", dtrt_comm_method_names[method],
            dtrt_errmsg(ctx));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  double slowest;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char **argv) {
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx || dtrt_comm_init(ctx)) {
    fprintf(stderr, "comm: %s\n", ctx ? dtrt_errmsg(ctx) : "no memory");
    return 1;
  }
  int np = dtrt_nranks(ctx), me = dtrt_rank(ctx), reps_arg = argc > 1 ? atoi(argv[1]) : 0;
  if (np < 2) {
    fprintf(stderr, "comm: run me under mpiexec with 2 or more ranks (mpiexec -n 2 %s)\n",
            argv[0]);
    dtrt_ctx_free(ctx);
    return 1;
  }
  int64_t most = (16 << 20) / 4;
  float *x = malloc((size_t)most * 4), *y = malloc((size_t)most * 4), *z = malloc((size_t)most * 4);
  double *t = malloc(2 * 200 * sizeof *t);
  for (int64_t k = 0; k < most; k++)
    x[k] = (float)((k * 31 + me * 7) % 13 - 6); /* small integers: sums exact in any order */
  for (int64_t bytes = 4 << 10; bytes <= 16 << 20; bytes *= 4)
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
      Run r = {ctx, &cases[c], np, bytes / 4, x, y, z};
      r.n -= r.n % np;
      int reps = bytes <= (256 << 10) ? 200 : bytes <= (1 << 20) ? 100 : 40;
      reps = reps_arg > 0 ? (reps_arg < 200 ? reps_arg : 200) : reps;
      for (int k = 0; k < 3; k++)
        timed(&r, true), timed(&r, false);
      for (int k = 0; k < reps; k++) {
        t[k] = timed(&r, true);
        t[200 + k] = timed(&r, false);
      }
      int64_t out = cases[c].coll == REDUCE_SCATTER ? r.n / np : r.n;
      int same = !memcmp(y, z, (size_t)out * 4), all;
      MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      double dtc = median(t, reps) * 1e3, mpi = median(t + 200, reps) * 1e3;
      if (me == 0)
        printf("{\"bench\": \"%s\", \"method\": \"%s\", \"bytes\": %lld, \"ranks\": %d, "
               "\"dtc_ms\": %.4f, \"mpi_ms\": %.4f, \"dtc_over_mpi\": %.3f, \"same\": %s}\n",
               cases[c].bench, cases[c].name, (long long)(r.n * 4), np, dtc, mpi, dtc / mpi,
               all ? "true" : "false");
      fflush(stdout);
    }
  for (int64_t bytes = 4 << 10; bytes <= 16 << 20; bytes *= 4)
    for (int method = DTRT_COMM_MPI; method <= DTRT_COMM_HIER; method++) {
      int64_t n = bytes / 4;
      int reps = bytes <= (256 << 10) ? 200 : bytes <= (1 << 20) ? 100 : 40;
      reps = reps_arg > 0 ? (reps_arg < 200 ? reps_arg : 200) : reps;
      for (int k = 0; k < 3; k++)
        timed_wire(ctx, x, y, n, method, DT_WIRE_F32), timed_wire(ctx, x, z, n, method, DT_WIRE_BF16);
      for (int k = 0; k < reps; k++) {
        t[k] = timed_wire(ctx, x, y, n, method, DT_WIRE_F32);
        t[200 + k] = timed_wire(ctx, x, z, n, method, DT_WIRE_BF16);
      }
      /* small integers are bf16 values and their sums exact: the same result */
      int same = !memcmp(y, z, (size_t)n * 4), all;
      MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
      double f32 = median(t, reps) * 1e3, bf16 = median(t + 200, reps) * 1e3;
      if (me == 0)
        printf("{\"bench\": \"comm_all_reduce_bf16\", \"method\": \"%s\", \"bytes\": %lld, "
               "\"ranks\": %d, \"f32_ms\": %.4f, \"bf16_ms\": %.4f, \"bf16_over_f32\": %.3f, "
               "\"same\": %s}\n",
               dtrt_comm_method_names[method], (long long)bytes, np, f32, bf16, bf16 / f32,
               all ? "true" : "false");
      fflush(stdout);
    }
  free(x), free(y), free(z), free(t);
  dtrt_ctx_free(ctx);
  return 0;
}
