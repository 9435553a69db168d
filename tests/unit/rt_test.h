/* rt_test.h: the cmocka fixtures the runtime unit tests share: a context over
 * the counting allocator of rt_count.h for each test (teardown asserts every
 * allocation was freed), and a temporary directory for the group. Header only:
 * every function is static inline, so a test uses just what it needs. */
#ifndef RT_TEST_H
#define RT_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_count.h"

/* The context of the running test and its allocator's counts. */
static Count counts;
static DtrtCtx *ctx;

static inline int setup(void **state) {
  (void)state;
  counts = (Count){.limit = -1};
  DtAllocator a = {count_alloc, count_free, &counts};
  ctx = dtrt_ctx_new_with(&a);
  return ctx ? 0 : -1;
}

static inline int teardown(void **state) {
  (void)state;
  dtrt_ctx_free(ctx);
  assert_int_equal(counts.allocs, counts.frees);
  return 0;
}

/* The group's temporary directory, $TMPDIR/<name>-XXXXXX (or under /tmp). */
static char dir[256];

static inline int rt_make_dir(const char *name) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp", name);
  return mkdtemp(dir) ? 0 : -1;
}

/* dir/name, in one of four buffers used in turn (so a call may take two). */
static inline char *rt_at(const char *name) {
  static char p[4][512];
  static int k;
  k = (k + 1) % 4;
  snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
  return p[k];
}

/* Removes dir, first making it writable again when chmod. */
static inline int rt_remove_dir(int chmod) {
  char cmd[600];
  if (chmod)
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s'; rm -rf '%s'", dir, dir);
  else
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
}

/* The runtime tests' random numbers: xorshift64, one stream per test
 * program; rt_next its 64 bits, frand uniform in [-1, 1). */
static inline uint64_t rt_next(void) {
  static uint64_t r = 88172645463325252u;
  r ^= r << 13;
  r ^= r >> 7;
  r ^= r << 17;
  return r;
}

static inline float frand(void) {
  return (float)((double)(rt_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

#endif
