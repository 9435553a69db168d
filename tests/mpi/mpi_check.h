/* mpi_check.h: checks for the MPI tests. A failed check records and goes on,
 * so that every rank makes the same collective calls; each failure is one
 * line on stderr naming the rank, the file and the line. Header only. */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <mpi.h>

static int passed, failed, me, np;

static inline void check_at(int ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    passed++;
    return;
  }
  failed++;
  char text[1024];
  int n = snprintf(text, sizeof text, "rank %d: %s:%d: ", me, file, line);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", text); /* one write, so that ranks do not interleave */
}
#define CHECK(ok, ...) check_at((ok), __FILE__, __LINE__, __VA_ARGS__)

static inline bool mpi_up(void) {
  int up, down;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  return up && !down;
}

/* The passed and failed counts summed over all ranks. */
static inline void mpi_totals(int total[2]) {
  int counts[2] = {passed, failed};
  total[0] = passed, total[1] = failed;
  if (mpi_up()) {
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Allreduce(counts, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  }
}

/* A test's end, after mpi_totals and freeing its context: a leak named on
 * stderr, the counts on rank 0's stdout; the exit status. */
static inline int mpi_report(const int total[2], long allocs, long frees) {
  bool ok = allocs == frees;
  if (!ok)
    fprintf(stderr, "rank %d: allocations %ld, frees %ld\n", me, allocs, frees);
  if (me == 0)
    printf("%d passed, %d failed\n", total[0], total[1]);
  return total[1] || !ok;
}

static inline void remove_dir(const char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd))
    fprintf(stderr, "could not remove %s\n", dir);
}

#endif
