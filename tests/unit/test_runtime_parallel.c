/* test_runtime_parallel.c: dtrt_parallel_for visits every index of [0, n)
 * exactly once, with one thread and with four, job after job with workers
 * that watch for the next and with workers that sleep, and with workers held
 * up so that their chunks are taken by other threads; and the context's pool
 * is released with the context. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
  Count c = {.limit = -1};
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

/* Many short jobs back to back, one thread per CPU: a worker that missed a
 * job, ran one twice, or ran into the next one shows in the counts (or hangs
 * the test). Under DTRT_SPIN_US 0 workers sleep between jobs; under 3 they
 * watch briefly and often sleep; under 100 they mostly watch. */
static void back_to_back(void **state) {
  (void)state;
  cpu_set_t set;
  int ncpu = sched_getaffinity(0, sizeof set, &set) ? 2 : CPU_COUNT(&set);
  char threads[16];
  snprintf(threads, sizeof threads, "%d", ncpu < 2 ? 2 : ncpu);
  const char *spins[] = {"0", "3", "100"};
  enum { JOBS = 20000, N = 67 };
  for (size_t s = 0; s < sizeof spins / sizeof spins[0]; s++) {
    assert_int_equal(setenv("DTRT_NUM_THREADS", threads, 1), 0);
    assert_int_equal(setenv("DTRT_SPIN_US", spins[s], 1), 0);
    DtrtCtx *ctx = dtrt_ctx_new();
    assert_non_null(ctx);
    unsigned count[N] = {0};
    unsigned char seen[N];
    Visits v = {seen};
    for (int j = 0; j < JOBS; j++) {
      int64_t n = j % 3 == 0 ? 2 : j % 3 == 1 ? 5 : N;
      memset(seen, 0, sizeof seen);
      dtrt_parallel_for(ctx, n, mark, &v);
      for (int64_t i = 0; i < n; i++)
        count[i] += seen[i];
      for (int64_t i = 0; i < n; i++)
        if (seen[i] != 1)
          fail_msg("spin %s, job %d of n %lld: index %lld visited %d times", spins[s], j,
                   (long long)n, (long long)i, seen[i]);
    }
    assert_int_equal(count[0], JOBS);
    assert_int_equal(count[N - 1], JOBS / 3);
    dtrt_ctx_free(ctx);
  }
  unsetenv("DTRT_SPIN_US");
  unsetenv("DTRT_NUM_THREADS");
}

/* Jobs whose chunks run late on the workers: a worker sleeps in some of its
 * chunks (before it counts them), so it comes late to the next job, whose
 * chunks the caller and the other workers take; the caller sleeps in some of
 * its own, so the workers go to sleep. Each index is counted atomically,
 * with nothing left over past n, so a chunk run twice (even at once), one
 * skipped, or one that runs into the next job shows. The caller running
 * more than one chunk of a job shows that chunks were taken. */
typedef struct Late {
  atomic_int count[1000];
  pthread_t caller;
  int job;          /* set by the caller before each job */
  atomic_int calls; /* the caller's body calls in this job */
} Late;

static void late_mark(void *env, int64_t begin, int64_t end) {
  Late *l = env;
  bool caller = pthread_equal(pthread_self(), l->caller);
  if (caller)
    atomic_fetch_add(&l->calls, 1);
  if (caller ? l->job % 29 == 3 : (l->job + begin) % 11 == 0)
    nanosleep(&(struct timespec){0, 50000}, NULL);
  for (int64_t i = begin; i < end; i++)
    atomic_fetch_add_explicit(&l->count[i], 1, memory_order_relaxed);
}

static void late_workers(void **state) {
  (void)state;
  cpu_set_t set;
  int ncpu = sched_getaffinity(0, sizeof set, &set) ? 2 : CPU_COUNT(&set);
  char cpus[16];
  snprintf(cpus, sizeof cpus, "%d", ncpu < 2 ? 2 : ncpu);
  /* one per CPU, pinned and watching; four, neither when CPUs are fewer */
  const char *threads[] = {cpus, "4"}, *spins[] = {"0", "3", "100"};
  enum { JOBS = 3000 };
  static Late l;
  long taken = 0;
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++)
    for (size_t s = 0; s < sizeof spins / sizeof spins[0]; s++) {
      assert_int_equal(setenv("DTRT_NUM_THREADS", threads[t], 1), 0);
      assert_int_equal(setenv("DTRT_SPIN_US", spins[s], 1), 0);
      DtrtCtx *ctx = dtrt_ctx_new();
      assert_non_null(ctx);
      int nthread = dtrt_threads(ctx);
      const int64_t sizes[] = {nthread, 2 * nthread + 1, 67, 1000};
      l.caller = pthread_self();
      for (int i = 0; i < 1000; i++)
        atomic_init(&l.count[i], 0);
      for (int j = 0; j < JOBS; j++) {
        int64_t n = sizes[j % 4];
        l.job = j;
        atomic_store(&l.calls, 0);
        dtrt_parallel_for(ctx, n, late_mark, &l);
        taken += atomic_load(&l.calls) > 1;
        for (int64_t i = 0; i < 1000; i++) {
          int c = atomic_exchange(&l.count[i], 0);
          if (c != (i < n))
            fail_msg("%s threads, spin %s, job %d of n %lld: index %lld counted %d times",
                     threads[t], spins[s], j, (long long)n, (long long)i, c);
        }
      }
      dtrt_ctx_free(ctx);
    }
  /* a worker woken from its sleep comes after the caller's small chunks */
  print_message("jobs with chunks taken by the caller: %ld\n", taken);
  assert_true(taken > 0);
  unsetenv("DTRT_SPIN_US");
  unsetenv("DTRT_NUM_THREADS");
}

/* A context that never ran a parallel loop frees nothing more; a NULL one
 * runs the body on the caller's thread. */
static void no_pool(void **state) {
  (void)state;
  Count c = {.limit = -1};
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
      cmocka_unit_test(back_to_back),
      cmocka_unit_test(late_workers),
      cmocka_unit_test(no_pool),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
