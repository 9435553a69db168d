/* rt_count.h: a counting allocator for libdtrt contexts, shared by the runtime
 * unit tests and tests/mpi/test_comm.c: every allocation and free is counted,
 * so a test can check nothing leaked; limit (when >= 0) is how many
 * allocations succeed. Header only: every function is static inline. */
#ifndef RT_COUNT_H
#define RT_COUNT_H

#include <stdlib.h>

#include "dtrt.h"

typedef struct Count {
  long allocs, frees, limit; /* limit: allocations that succeed; -1: all */
} Count;

static inline void *count_alloc(void *u, size_t n) {
  Count *c = u;
  void *p;
  if (c->limit >= 0 && c->allocs >= c->limit)
    return NULL;
  if (posix_memalign(&p, 64, n))
    return NULL;
  c->allocs++;
  return p;
}

static inline void count_free(void *u, void *p) {
  ((Count *)u)->frees++;
  free(p);
}

#endif
