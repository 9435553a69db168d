/* parallel.c: dtrt_parallel_for, the thread pool that runs the large fused
 * loops and the matmuls of generated code, and the scratch block those
 * matmuls pack their panels in. The pool belongs to the context: made on
 * first use, joined by dtrt_ctx_free.
 * A job is nthread fixed chunks of [0, n), chunk k worker k's. Each chunk is
 * claimed before it runs (a compare-and-swap of the job's number into the
 * chunk's word), so it runs exactly once, whoever runs it: the caller runs
 * its own, then any a worker has not started, and a worker that is done
 * takes any another has not started. So a step never waits for a worker
 * that is asleep or off its CPU (another process holds it) to begin; it
 * waits only for chunks under way. Results do not depend on who runs a
 * chunk: the ranges are the same.
 * A step posts many short jobs one after another, and a wake-up through the
 * kernel costs about as much as a small job. So a worker that finishes a job
 * watches for the next one before it sleeps on a condition variable, and the
 * caller watches for the chunks under way the same way, each for up to
 * DTRT_SPIN_US microseconds (SPIN_US by default) and less as it learns:
 * each thread keeps an average of its recent waits (from when it was ready
 * to when the job was posted, or the last chunk finished: the wait itself,
 * not its wake-up) and watches for twice that (not at all when the average
 * exceeds the limit: watching would not pay); and a thread that finds its
 * CPU was taken while it watched (two looks at the clock LATE_NS apart)
 * sleeps at once and through its next waits, BACKOFF_MIN of them, twice as
 * many each time it happens again (up to BACKOFF_MAX) until a watch keeps
 * its CPU. Watching a core that another process keeps busy only spends
 * this thread's share of it, and the chunk waits the longer for it. The
 * worker pinned to the caller's CPU neither watches nor runs chunks, or it
 * would take turns with the caller there.
 * Nobody watches when the node's ranks have more threads in all than this
 * process has CPUs (ranks sharing cores), under DTRT_SPIN_US=0, or once
 * OpenBLAS has run in the context.
 * Each worker is pinned to a CPU of the affinity mask; the caller runs the
 * chunk of the CPU it is on and wakes the others. A woken worker left to the
 * scheduler lands beside its waker when the other CPUs are busy (as with
 * OpenBLAS's threads, which spin after a call) and preempts it, so the
 * chunks would run one after the other.
 * A worker runs each job's chunks in the floating-point mode of the thread
 * that posted it (fp.c), so a step's loops flush denormals on every thread
 * or on none. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrt_int.h"

enum { SPIN_US = 100, WATCH = 256 };

/* A thread's watch, learnt from its waits (the thread's own). */
enum {
  LATE_NS = 30000,    /* two looks at the clock this far apart: the CPU was taken */
  SPIN_MIN_NS = 2000, /* watched for at least, when watching */
  BACKOFF_MIN = 8,    /* waits slept through after the CPU was found taken */
  BACKOFF_MAX = 4096
};
typedef struct Spin {
  int64_t wait_ns; /* recent waits, averaged (each counted up to twice the limit) */
  int skip;        /* waits to sleep through before watching again */
  int backoff;     /* skip's next value once the CPU is found taken */
} Spin;

/* Each on a line of its own: the claim word is written at every job, by
 * the worker or a thief, and the watch by the worker. */
typedef struct DtWorker {
  _Alignas(64) _Atomic uint64_t taken; /* the last job that claimed chunk index */
  DtPool *pool;
  int index;        /* its chunk */
  int cpu;          /* the CPU it is pinned to; -1: none */
  pthread_t th;
  Spin spin;
} DtWorker;

/* The job's fields are written before job is advanced (release) and read
 * after it is seen advanced (acquire) and a chunk claimed under its number.
 * The caller does not post again before pending is back to 0, after every
 * chunk of the job was claimed and run; so a field is never read while it
 * is rewritten: a worker that sees a job late finds every chunk claimed and
 * reads none. The one that sits the job out (its chunk is the caller's)
 * learns so from the job word itself. */
struct DtPool {
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  int nthread;      /* chunks of a job, one per worker */
  int nworker;      /* workers started */
  DtWorker *w;
  int64_t spin_ns;      /* the most a thread watches before sleeping; 0: never */
  Spin spin;            /* the caller's */
  _Atomic uint64_t job; /* jobs posted << 9 | WATCH if workers may watch
                            for the next | the chunk the caller runs */
  atomic_int pending;   /* chunks other than the caller's own not yet run */
  atomic_bool quit;
  _Atomic int64_t posted;   /* when the job was posted, for the workers' waits */
  _Atomic int64_t finished; /* when pending reached 0, for the caller's */
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

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

/* How long to watch now, given the limit max: 0 while sleeping through
 * waits, or when the waits are longer than max on average; else twice the
 * average wait, within [SPIN_MIN_NS, max]. */
static int64_t spin_budget(const Spin *s, int64_t max) {
  if (max <= 0 || s->skip > 0 || s->wait_ns > max)
    return 0;
  int64_t b = 2 * s->wait_ns + SPIN_MIN_NS;
  return b < max ? b : max;
}

/* Learns from a wait of waited ns (the time the thread would have had to
 * watch) after watching for budget ns (0: it slept at once); late: it lost
 * its CPU while it watched. */
static void spin_learn(Spin *s, int64_t waited, int64_t budget, bool late, int64_t max) {
  if (s->skip > 0)
    s->skip--;
  if (late) {
    s->skip = s->backoff;
    s->backoff = s->backoff < BACKOFF_MAX / 2 ? 2 * s->backoff : BACKOFF_MAX;
  } else if (budget > 0) {
    s->backoff = BACKOFF_MIN;
  }
  int64_t w = waited < 0 ? 0 : waited > 2 * max ? 2 * max : waited;
  s->wait_ns += (w - s->wait_ns) / 8;
}

/* Watches for done(p, arg) for up to budget ns; true once it holds. Gives up
 * early, with *late set, when two looks at the clock are more than LATE_NS
 * apart: the thread lost its CPU, and watching on would take it again from
 * whoever holds it. */
static bool spin_until(DtPool *p, int64_t budget, bool (*done)(DtPool *, void *), void *arg,
                       bool *late) {
  int64_t end = 0, last = 0;
  for (int i = 0;; i++) {
    if (done(p, arg)) {
      *late = last && dtrt_now_ns() - last > LATE_NS;
      return true;
    }
    cpu_relax();
    if ((i & 63) == 63) {
      int64_t t = dtrt_now_ns();
      if (last && t - last > LATE_NS) {
        *late = true;
        return false;
      }
      if (!end)
        end = t + budget;
      else if (t > end)
        return false;
      last = t;
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

/* Claims chunk k for job number job (jobs posted): true for exactly one
 * thread per chunk and job. The claim word only grows, so a thread that
 * still thinks an older job current claims nothing. */
static bool claim(DtPool *p, int k, uint64_t job) {
  _Atomic uint64_t *t = &p->w[k].taken;
  uint64_t v = atomic_load_explicit(t, memory_order_relaxed);
  return v < job && atomic_compare_exchange_strong_explicit(t, &v, job, memory_order_relaxed,
                                                            memory_order_relaxed);
}

/* Runs chunk k of the current job, claimed by this thread. */
static void run_chunk(DtPool *p, int k) {
  int64_t begin, end;
  chunk(p->n, p->nthread, k, &begin, &end);
  if (begin < end)
    p->body(p->env, begin, end);
}

/* Counts a chunk other than the caller's own as run; true for the last. */
static bool chunk_done(DtPool *p) {
  atomic_store_explicit(&p->finished, dtrt_now_ns(), memory_order_relaxed);
  return atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1;
}

static void *worker(void *arg) {
  DtWorker *w = arg;
  DtPool *p = w->pool;
  uint64_t seen = 0, fp = dtrt_fp_mode();
  bool watch = false; /* not while the caller runs on this worker's CPU */
  int64_t ready = 0;  /* when it was done with the job it saw last */
  for (;;) {
    int64_t budget = watch ? spin_budget(&w->spin, p->spin_ns) : 0;
    bool late = false;
    if (!budget || !spin_until(p, budget, job_posted, &seen, &late)) {
      pthread_mutex_lock(&p->mu);
      while (!job_posted(p, &seen))
        pthread_cond_wait(&p->go, &p->mu);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->quit))
      break;
    seen = atomic_load_explicit(&p->job, memory_order_acquire);
    if (watch)
      spin_learn(&w->spin, atomic_load_explicit(&p->posted, memory_order_relaxed) - ready, budget,
                 late, p->spin_ns);
    int mine = (int)(seen & 255);
    watch = (seen & WATCH) && mine != w->index;
    if (mine == w->index)
      continue;
    if (p->fp != fp)
      dtrt_fp_set_mode(fp = p->fp);
    /* its own chunk first, then any other not yet begun */
    bool last = false;
    for (int i = 0; i < p->nthread; i++) {
      int k = (w->index + i) % p->nthread;
      if (k != mine && claim(p, k, seen >> 9)) {
        run_chunk(p, k);
        last = chunk_done(p);
      }
    }
    if (last) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
    if (watch)
      ready = dtrt_now_ns();
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

int64_t dtrt_pool_bytes(int nthread) {
  return nthread < 2 ? 0 : (int64_t)(sizeof(DtPool) + sizeof(DtWorker) * (size_t)nthread);
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
  /* at first a thread watches for as long as it may */
  Spin fresh = {p->spin_ns / 2, 0, BACKOFF_MIN};
  p->spin = fresh;
  atomic_init(&p->job, 0);
  atomic_init(&p->pending, 0);
  atomic_init(&p->quit, false);
  atomic_init(&p->posted, 0);
  atomic_init(&p->finished, 0);
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  for (int k = 0; k < nthread; k++) {
    DtWorker *w = &p->w[k];
    atomic_init(&w->taken, 0);
    w->pool = p;
    w->index = k;
    w->cpu = nthread <= ncpu && ncpu <= 256 ? cpu[k] : -1;
    w->spin = fresh;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (w->cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(w->cpu, &one);
      pthread_attr_setaffinity_np(&attr, sizeof one, &one);
    }
    int err = dtrt_thread_create(&w->th, &attr, worker, w);
    pthread_attr_destroy(&attr);
    if (err) {
      pool_stop(ctx, p);
      return NULL;
    }
    p->nworker++;
  }
  return p;
}

void dtrt_held_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGHUP);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
}

void dtrt_hold_signals(sigset_t *old) {
  sigset_t held;
  dtrt_held_signals(&held);
  pthread_sigmask(SIG_BLOCK, &held, old);
}

void dtrt_release_signals(const sigset_t *old) { pthread_sigmask(SIG_SETMASK, old, NULL); }

/* A save's deferral of the held signals whose action is the default (to end
 * the process): while any save runs, a handler that notes them, since a
 * thread the runtime did not start (OpenBLAS starts its own as it is
 * loaded, before anything of the runtime runs) may take one. The one
 * process-wide state of libdtrt, as signal actions are the process's. */
static const int held_sig[3] = {SIGHUP, SIGINT, SIGTERM};
static pthread_mutex_t defer_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int defer_depth;
static bool defer_ours[3];
static struct sigaction defer_old[3];
static atomic_int defer_caught[3];

/* Notes sig; once the last save has returned (and put the default action
 * back) it acts at once, so a signal that arrives as the save ends is not
 * lost between the save's look at defer_caught and this handler's note. */
static void defer_catch(int sig) {
  for (int k = 0; k < 3; k++)
    if (held_sig[k] == sig) {
      atomic_store(&defer_caught[k], 1);
      if (!atomic_load(&defer_depth))
        raise(sig);
    }
}

void dtrt_defer_signals(sigset_t *old) {
  pthread_mutex_lock(&defer_mu);
  for (int k = 0; k < 3 && atomic_load(&defer_depth) == 0; k++) {
    struct sigaction sa = {.sa_handler = defer_catch, .sa_flags = SA_RESTART};
    sigfillset(&sa.sa_mask);
    defer_ours[k] = !sigaction(held_sig[k], NULL, &defer_old[k]) &&
                    !(defer_old[k].sa_flags & SA_SIGINFO) &&
                    defer_old[k].sa_handler == SIG_DFL && !sigaction(held_sig[k], &sa, NULL);
  }
  atomic_fetch_add(&defer_depth, 1);
  pthread_mutex_unlock(&defer_mu);
  dtrt_hold_signals(old);
}

void dtrt_undefer_signals(const sigset_t *old) {
  dtrt_release_signals(old);   /* one pending that this thread takes is noted now */
  pthread_mutex_lock(&defer_mu);
  bool last = atomic_load(&defer_depth) == 1;
  for (int k = 0; k < 3 && last; k++) {
    struct sigaction now;
    /* the application's own action, if it set one meanwhile, stays */
    if (defer_ours[k] && !sigaction(held_sig[k], NULL, &now) && !(now.sa_flags & SA_SIGINFO) &&
        now.sa_handler == defer_catch)
      sigaction(held_sig[k], &defer_old[k], NULL);
  }
  atomic_fetch_sub(&defer_depth, 1);
  for (int k = 0; k < 3 && last; k++) {
    if (defer_ours[k] && atomic_exchange(&defer_caught[k], 0))
      kill(getpid(), held_sig[k]);   /* it acts now, as it would have */
    defer_ours[k] = false;
  }
  pthread_mutex_unlock(&defer_mu);
}

int dtrt_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg) {
  sigset_t old;
  dtrt_hold_signals(&old);   /* a new thread inherits its creator's mask */
  int err = pthread_create(th, attr, fn, arg);
  dtrt_release_signals(&old);
  return err;
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
  uint64_t job = (atomic_load_explicit(&p->job, memory_order_relaxed) >> 9) + 1;
  atomic_store_explicit(&p->w[mine].taken, job, memory_order_relaxed);
  atomic_store_explicit(&p->posted, dtrt_now_ns(), memory_order_relaxed);
  bool watch = p->spin_ns > 0 && !ctx->blas_called;
  pthread_mutex_lock(&p->mu);
  atomic_store_explicit(&p->job, job << 9 | (watch ? WATCH : 0) | (uint64_t)mine,
                        memory_order_release);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  run_chunk(p, mine);
  /* then the chunks no worker has begun: a worker asleep or off its CPU
   * would keep the step waiting */
  for (int i = 1; i < p->nthread; i++) {
    int k = (mine + i) % p->nthread;
    if (claim(p, k, job)) {
      run_chunk(p, k);
      atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
  }
  int64_t ready = watch ? dtrt_now_ns() : 0;
  int64_t budget = watch ? spin_budget(&p->spin, p->spin_ns) : 0;
  bool late = false;
  if (!budget || !spin_until(p, budget, job_done, NULL, &late)) {
    pthread_mutex_lock(&p->mu);
    while (!job_done(p, NULL))
      pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
  }
  if (watch)
    spin_learn(&p->spin, atomic_load_explicit(&p->finished, memory_order_relaxed) - ready, budget,
               late, p->spin_ns);
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
