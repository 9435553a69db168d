/* test_runtime_parallel.c: dtrt_parallel_for visits every index of [0, n)
 * exactly once, with one thread and with four, and the context's pool is
 * released with the context. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_count.h"

/* Runs on the pool's threads, so it records and never asserts: cmocka's
 * failures belong to the test's thread. */
typedef struct Visits {
  unsigned char *seen;   /* by index: how many times visited */
} Visits;

static void mark(void *env, int64_t begin, int64_t end) {
  Visits *v = env;
  for (int64_t i = begin; i < end; i++)
    v->seen[i]++;
}

static void run(const char *threads) {
  assert_int_equal(setenv("DTRT_NUM_THREADS", threads, 1), 0);
  Count c = {0, 0, -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtrtCtx *ctx = dtrt_ctx_new_with(&a);
  assert_non_null(ctx);
  const int64_t sizes[] = {0, 1, 7, 1000000};
  for (int rep = 0; rep < 3; rep++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      int64_t n = sizes[k];
      Visits v = {calloc((size_t)n + 1, 1)};
      assert_non_null(v.seen);
      dtrt_parallel_for(ctx, n, mark, &v);
      for (int64_t i = 0; i < n; i++)
        if (v.seen[i] != 1)
          fail_msg("%s threads, n %lld: index %lld visited %d times", threads, (long long)n,
                   (long long)i, v.seen[i]);
      free(v.seen);
    }
  dtrt_ctx_free(ctx);
  assert_int_equal(c.allocs, c.frees);
  unsetenv("DTRT_NUM_THREADS");
}

static void one_thread(void **state) {
  (void)state;
  run("1");
}

static void four_threads(void **state) {
  (void)state;
  run("4");
}

/* A context that never ran a parallel loop frees nothing more; a NULL one
 * runs the body on the caller's thread. */
static void no_pool(void **state) {
  (void)state;
  Count c = {0, 0, -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtrtCtx *ctx = dtrt_ctx_new_with(&a);
  assert_non_null(ctx);
  dtrt_ctx_free(ctx);
  assert_int_equal(c.allocs, 1);
  assert_int_equal(c.frees, 1);
  unsigned char seen[5] = {0};
  Visits v = {seen};
  dtrt_parallel_for(NULL, 5, mark, &v);
  for (int i = 0; i < 5; i++)
    assert_int_equal(seen[i], 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_thread),
      cmocka_unit_test(four_threads),
      cmocka_unit_test(no_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
