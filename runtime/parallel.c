/* parallel.c: dtrt_parallel_for, the thread pool that runs the large fused
 * loops and the matmuls of generated code, and the scratch block those
 * matmuls pack their panels in. The pool belongs to the context: made on
 * first use, joined by dtrt_ctx_free.
 * A step posts many short jobs one after another, and a wake-up through the
 * kernel costs about as much as a small job. So a worker that finishes a job
 * watches for the next one for a short while (DTRT_SPIN_US microseconds,
 * SPIN_US by default) before it sleeps on a condition variable, and the
 * caller watches for its workers the same way. The worker pinned to the
 * caller's CPU does not watch, or it would take turns with the caller there.
 * Nobody watches when the node's ranks have more threads in all than this
 * process has CPUs (ranks sharing cores), under DTRT_SPIN_US=0, or once
 * OpenBLAS has run in the context.
 * Each chunk has a worker pinned to a CPU of the affinity mask; the caller
 * runs the chunk of the CPU it is on and wakes the others. A woken worker left
 * to the scheduler lands beside its waker when the other CPUs are busy (as
 * with OpenBLAS's threads, which spin after a call) and preempts it, so the
 * chunks would run one after the other.
 * A worker runs each job in the floating-point mode of the thread that posted
 * it (fp.c), so a step's loops flush denormals on every thread or on none. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrt_int.h"

typedef struct DtWorker {
  DtPool *pool;
  int index;        /* its chunk */
  int cpu;          /* the CPU it is pinned to; -1: none */
  pthread_t th;
} DtWorker;

enum { SPIN_US = 100, WATCH = 256 };

/* The job's fields are written before job is advanced (release) and read
 * after it is seen advanced (acquire). The caller does not post again before
 * pending is back to 0, so no worker that counts in pending reads a field
 * being rewritten; the one that sits the job out (its chunk is the caller's)
 * learns so from the job word itself. */
struct DtPool {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int nthread;      /* chunks of a job, one per worker */
  int nworker;      /* workers started */
  DtWorker *w;
  int64_t spin_ns;  /* how long to watch before sleeping; 0: never */
  _Atomic uint64_t job; /* jobs posted << 9 | WATCH if workers may watch
                            for the next | the chunk the caller runs */
  atomic_int pending;   /* workers still running the current job */
  atomic_bool quit;
  int64_t n;
  uint64_t fp;      /* the caller's floating-point mode (dtrt_fp_mode) */
  void (*body)(void *env, int64_t begin, int64_t end);
  void *env;
};

/* Threads to use: DTRT_NUM_THREADS, else 1 under OPENBLAS_NUM_THREADS=1 (MPI
 * ranks pinned one per core), else the CPUs this process may run on. */
static int thread_count(const cpu_set_t *set) {
  const char *s = getenv("DTRT_NUM_THREADS");
  if (s && *s) {
    long v = strtol(s, NULL, 10);
    return v < 1 ? 1 : v > 256 ? 256 : (int)v;
  }
  s = getenv("OPENBLAS_NUM_THREADS");
  if (s && !strcmp(s, "1"))
    return 1;
  int n = CPU_COUNT(set);
  return n < 1 ? 1 : n > 256 ? 256 : n;
}

static int64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* Watches for done(p, arg) for up to p->spin_ns; true once it holds. */
static bool spin_until(DtPool *p, bool (*done)(DtPool *, void *), void *arg) {
  if (p->spin_ns <= 0)
    return done(p, arg);
  int64_t end = 0;
  for (int i = 0;; i++) {
    if (done(p, arg))
      return true;
    cpu_relax();
    if ((i & 63) == 63) {
      int64_t t = now_ns();
      if (!end)
        end = t + p->spin_ns;
      else if (t > end)
        return false;
    }
  }
}

static bool job_posted(DtPool *p, void *seen) {
  return atomic_load_explicit(&p->job, memory_order_acquire) != *(uint64_t *)seen ||
         atomic_load_explicit(&p->quit, memory_order_relaxed);
}

static bool job_done(DtPool *p, void *unused) {
  (void)unused;
  return atomic_load_explicit(&p->pending, memory_order_acquire) == 0;
}

/* Chunk k of nthread equal contiguous chunks of [0, n). */
static void chunk(int64_t n, int nthread, int k, int64_t *begin, int64_t *end) {
  int64_t q = n / nthread, r = n % nthread;
  *begin = q * k + (k < r ? k : r);
  *end = *begin + q + (k < r);
}

static void *worker(void *arg) {
  DtWorker *w = arg;
  DtPool *p = w->pool;
  uint64_t seen = 0, fp = dtrt_fp_mode();
  bool watch = false; /* not while the caller runs on this worker's CPU */
  for (;;) {
    if (!watch || !spin_until(p, job_posted, &seen)) {
      pthread_mutex_lock(&p->mu);
      while (!job_posted(p, &seen))
        pthread_cond_wait(&p->go, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->quit))
      break;
    seen = atomic_load_explicit(&p->job, memory_order_acquire);
    bool sits_out = (int)(seen & 255) == w->index;
    watch = (seen & WATCH) && !sits_out;
    if (sits_out)
      continue;
    if (p->fp != fp)
      dtrt_fp_set_mode(fp = p->fp);
    int64_t begin, end;
    chunk(p->n, p->nthread, w->index, &begin, &end);
    if (begin < end)
      p->body(p->env, begin, end);
    if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

static void pool_stop(DtrtCtx *ctx, DtPool *p) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->quit, true);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int k = 0; k < p->nworker; k++)
    pthread_join(p->w[k].th, NULL);
  pthread_cond_destroy(&p->done);
  pthread_cond_destroy(&p->go);
  pthread_mutex_destroy(&p->mu);
  dtrt_free(ctx, p->w);
  dtrt_free(ctx, p);
}

/* The context's pool, made with the thread count of the environment; NULL
 * when one thread is all there is (or the pool could not be made). */
static DtPool *pool_start(DtrtCtx *ctx) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set))
    CPU_ZERO(&set);
  int nthread = thread_count(&set);
  if (nthread < 2)
    return NULL;
  int ncpu = CPU_COUNT(&set), cpu[256];
  for (int c = 0, k = 0; c < CPU_SETSIZE && k < 256; c++)
    if (CPU_ISSET(c, &set))
      cpu[k++] = c;
  DtPool *p = dtrt_alloc(ctx, sizeof *p);
  if (!p)
    return NULL;
  p->w = dtrt_alloc(ctx, sizeof *p->w * (size_t)nthread);
  if (!p->w) {
    dtrt_free(ctx, p);
    return NULL;
  }
  p->nthread = nthread;
  const char *spin = getenv("DTRT_SPIN_US");
  long us = spin && *spin ? strtol(spin, NULL, 10) : SPIN_US;
  p->spin_ns = nthread * dtrt_local_ranks(ctx) <= ncpu && us > 0
                  ? (us > 1000000 ? 1000000 : us) * 1000 : 0;
  atomic_init(&p->job, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->quit, false);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  for (int k = 0; k < nthread; k++) {
    DtWorker *w = &p->w[k];
    w->pool = p;
    w->index = k;
    w->cpu = nthread <= ncpu && ncpu <= 256 ? cpu[k] : -1;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (w->cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(w->cpu, &one);
      pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    int err = pthread_create(&w->th, &attr, worker, w);
    pthread_attr_destroy(&attr);
    if (err) {
      pool_stop(ctx, p);
      return NULL;
    }
    p->nworker++;
  }
  return p;
}

static DtPool *pool_of(DtrtCtx *ctx) {
  if (ctx && !ctx->pool_tried) {
    ctx->pool_tried = true;
    ctx->pool = pool_start(ctx);
  }
  return ctx ? ctx->pool : NULL;
}

int dtrt_threads(DtrtCtx *ctx) {
  DtPool *p = pool_of(ctx);
  return p ? p->nthread : 1;
}

void *dtrt_scratch_of(DtrtCtx *ctx, int which, size_t n) {
  if (!ctx)
    return NULL;
  if (n <= ctx->scratch_bytes[which])
    return ctx->scratch[which];
  /* exactly n: a model asks for a fixed set of sizes, so after its first
   * step the block is the largest of them, which dtc --emit=plan predicts */
  dtrt_free(ctx, ctx->scratch[which]);
  ctx->scratch_bytes[which] = 0;
  if (!(ctx->scratch[which] = dtrt_alloc(ctx, n)))
    return NULL;
  ctx->scratch_bytes[which] = n;
  return ctx->scratch[which];
}

void *dtrt_scratch(DtrtCtx *ctx, size_t n) { return dtrt_scratch_of(ctx, DTRT_SCRATCH_GEMM, n); }

void dtrt_parallel_for(DtrtCtx *ctx, int64_t n, void (*body)(void *env, int64_t begin, int64_t end),
                       void *env) {
  if (n <= 0)
    return;
  DtPool *p = pool_of(ctx);
  if (!p || n < 2) {
    body(env, 0, n);
    return;
  }
  int here = sched_getcpu(), mine = 0;
  for (int k = 0; k < p->nthread; k++)
    if (here >= 0 && p->w[k].cpu == here)
      mine = k;
  p->n = n;
  p->fp = dtrt_fp_mode();
  p->body = body;
  p->env = env;
  atomic_store_explicit(&p->pending, p->nthread - 1, memory_order_relaxed);
  pthread_mutex_lock(&p->mu);
  uint64_t job = atomic_load_explicit(&p->job, memory_order_relaxed);
  bool watch = p->spin_ns > 0 && !ctx->blas_called;
  atomic_store_explicit(&p->job, ((job >> 9) + 1) << 9 | (watch ? WATCH : 0) | (uint64_t)mine,
                        memory_order_release);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  int64_t begin, end;
  chunk(n, p->nthread, mine, &begin, &end);
  body(env, begin, end);
  if (!watch || !spin_until(p, job_done, NULL)) {
    pthread_mutex_lock(&p->mu);
    while (!job_done(p, NULL))
      pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
}

void dtrt_pool_free(DtrtCtx *ctx) {
  if (ctx->pool)
    pool_stop(ctx, ctx->pool);
  ctx->pool = NULL;
  ctx->pool_tried = false;
  for (int k = 0; k < DTRT_SCRATCH_COUNT; k++) {
    dtrt_free(ctx, ctx->scratch[k]);
    ctx->scratch[k] = NULL;
    ctx->scratch_bytes[k] = 0;
  }
}
