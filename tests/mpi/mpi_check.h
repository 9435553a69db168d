/* mpi_check.h: checks for the MPI tests. A failed check records and goes on,
 * so that every rank makes the same collective calls; each failure is one
 * line on stderr naming the rank, the file and the line. Header only. */
#ifndef MPI_CHECK_H
#define MPI_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

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

#endif
