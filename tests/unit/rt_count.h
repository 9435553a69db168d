/* rt_count.h: a counting allocator for libdtrt contexts, shared by the runtime
 * unit tests and tests/mpi/test_comm.c: every allocation and free is counted,
 * so a test can check nothing leaked; limit (when >= 0) is how many
 * allocations succeed; bytes is what is held now (as asked of the hook,
 * libdtrt's headers included), peak the most held since a test last set it.
 * Header only: every function is static inline. */
#ifndef RT_COUNT_H
#define RT_COUNT_H

#include <stdlib.h>

#include "dtrt.h"

typedef struct Count {
  long allocs, frees, limit; /* limit: allocations that succeed; -1: all */
  long long bytes, peak;
} Count;

/* Each block's size sits in 64 bytes of the hook's own before it. */
static inline void *count_alloc(void *u, size_t n) {
  Count *c = u;
  void *p;
  if (c->limit >= 0 && c->allocs >= c->limit)
    return NULL;
  if (n > (size_t)-1 - 64 || posix_memalign(&p, 64, n + 64))
    return NULL;
  c->allocs++;
  *(size_t *)p = n;
  c->bytes += (long long)n;
  c->peak = c->bytes > c->peak ? c->bytes : c->peak;
  return (char *)p + 64;
}

static inline void count_free(void *u, void *p) {
  Count *c = u;
  c->frees++;
  if (!p)
    return;
  char *q = (char *)p - 64;
  c->bytes -= (long long)*(size_t *)q;
  free(q);
}

#endif
