/* busy.c: a training step on two threads of libdtrt's pool against the same
 * step on one, on a quiet machine and beside a busy loop, in one run. The
 * busy loop is another process (its own session, as another user's job
 * would be) spinning on one CPU, by default the last of this process's
 * affinity mask, where the pool pins its second worker; it is stopped
 * (SIGSTOP) between the busy phases. Two models of each kind are made, one
 * with DTRT_NUM_THREADS=2 and one with 1, and their steps alternate (in
 * both orders), in rounds of a quiet phase and a busy phase, so that every
 * series sees the same load. The models: examples/mlp_big.dt at batch 256
 * (bench/mlp), examples/gpt.dt at bench/gpt's sizes (B 16, T 128, D 256,
 * H 4, V 2048, L 4: large products) and the same model smaller, gpt_small
 * (B 8, T 128, D 128, H 4, V 1024, L 4: jobs of a few hundred microseconds
 * or less, where waiting for a worker weighs most).
 *
 * One JSON line per model: the median step in ms of each series with its
 * range (one, two, one_busy, two_busy), two_over_one (quiet) and
 * two_over_one_busy, each a ratio of medians, and the 1-minute load average
 * before and after. A pool that never makes a step slower than one thread
 * keeps both ratios at or below 1.
 *
 *     build/bench/busy [STEPS [CPU [MODEL...]]]
 *
 * STEPS per series (15), CPU of the loop (-1: the last), the models by name
 * (all).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "gpt.h"
#include "gpt_small.h"
#include "mlp_big.h"

enum { ROUND = 5 }; /* steps of each series per phase */

enum { MB = 256, MIN = 784, MOUT = 10 };

static float mlp_x[MB * MIN];
static int32_t mlp_y[MB], gpt_ids[GPT_IDS_ELEMS], gpt_next[GPT_NEXT_ELEMS],
    small_ids[GPT_SMALL_IDS_ELEMS], small_next[GPT_SMALL_NEXT_ELEMS];

static int create_mlp(void **m) { return mlp_big_create((mlp_big **)m, 1); }
static int step_mlp(void *m) {
  float loss;
  return mlp_big_train_step(m, mlp_x, MB * MIN, mlp_y, MB, &loss);
}
static void destroy_mlp(void *m) { mlp_big_destroy(m); }

static int create_gpt(void **m) { return gpt_create((gpt **)m, 1); }
static int step_gpt(void *m) {
  float loss;
  return gpt_train_step(m, gpt_ids, GPT_IDS_ELEMS, gpt_next, GPT_NEXT_ELEMS, &loss);
}
static void destroy_gpt(void *m) { gpt_destroy(m); }

static int create_small(void **m) { return gpt_small_create((gpt_small **)m, 1); }
static int step_small(void *m) {
  float loss;
  return gpt_small_train_step(m, small_ids, GPT_SMALL_IDS_ELEMS, small_next, GPT_SMALL_NEXT_ELEMS,
                              &loss);
}
static void destroy_small(void *m) { gpt_small_destroy(m); }

/* A kind of model: how to make, step and free one. */
typedef struct Kind {
  const char *name;
  int (*create)(void **m);
  int (*step)(void *m);
  void (*destroy)(void *m);
} Kind;

static const Kind kinds[] = {
    {"mlp", create_mlp, step_mlp, destroy_mlp},
    {"gpt", create_gpt, step_gpt, destroy_gpt},
    {"gpt_small", create_small, step_small, destroy_small},
};
enum { NKIND = sizeof kinds / sizeof kinds[0] };

static void fill(int32_t *p, int n, int v, unsigned *s) {
  for (int i = 0; i < n; i++)
    p[i] = (int32_t)(((*s = *s * 1664525u + 1013904223u) >> 8) % (unsigned)v);
}

/* A process spinning on cpu; its pid, or -1. */
static pid_t busy_start(int cpu) {
  pid_t pid = fork();
  if (pid)
    return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setsid();
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  sched_setaffinity(0, sizeof one, &one);
  for (volatile unsigned long i = 0;; i++)
    ;
}

static void series(const char *key, double *t, int n) {
  double m = median(t, n);
  printf(", \"%s_ms\": %.3f, \"%s_ms_min\": %.3f, \"%s_ms_max\": %.3f", key, m, key, t[0], key,
         t[n - 1]);
}

/* Times reps steps of each series of k's models m (m[0] on one thread, m[1]
 * on two) in rounds of a quiet phase and a busy one; prints its line. */
static int run(const Kind *k, void *m[2], pid_t busy, int cpu, int reps) {
  double *t[4]; /* one, two, one_busy, two_busy */
  for (int s = 0; s < 4; s++)
    t[s] = malloc(sizeof(double) * (size_t)reps);
  double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
  getloadavg(load0, 3);
  int err = 0;
  for (int done = 0; done < reps && !err;) {
    int n = reps - done < ROUND ? reps - done : ROUND;
    for (int phase = 0; phase < 2 && !err; phase++) {
      kill(busy, phase ? SIGCONT : SIGSTOP);
      usleep(20000);
      for (int r = 0; r < 2 * n && !err; r++) {
        int which = (r & 1) ^ ((r >> 1) & 1); /* 0 1 1 0 0 1 1 0 ... */
        double t0 = now_ms();
        err = k->step(m[which]);
        t[2 * phase + which][done + r / 2] = now_ms() - t0;
      }
    }
    kill(busy, SIGSTOP);
    done += n;
  }
  getloadavg(load1, 3);
  if (err) {
    fprintf(stderr, "busy: %s: the step failed\n", k->name);
  } else {
    double one = median(t[0], reps), two = median(t[1], reps);
    double one_busy = median(t[2], reps), two_busy = median(t[3], reps);
    printf("{\"bench\": \"busy\", \"model\": \"%s\", \"busy_cpu\": %d, \"steps\": %d", k->name, cpu,
           reps);
    series("one", t[0], reps);
    series("two", t[1], reps);
    series("one_busy", t[2], reps);
    series("two_busy", t[3], reps);
    printf(", \"two_over_one\": %.3f, \"two_over_one_busy\": %.3f, \"load_before\": %.2f, "
           "\"load_after\": %.2f}\n",
           two / one, two_busy / one_busy, load0[0], load1[0]);
    fflush(stdout);
  }
  for (int s = 0; s < 4; s++)
    free(t[s]);
  return err;
}

/* k's two models, each made and stepped twice under its thread count: the
 * pool is made at a context's first parallel loop, with the thread count of
 * the environment then. */
static int make(const Kind *k, void *m[2]) {
  m[0] = m[1] = NULL;
  for (int w = 0; w < 2; w++) {
    setenv("DTRT_NUM_THREADS", w ? "2" : "1", 1);
    if (k->create(&m[w]) || k->step(m[w]) || k->step(m[w])) {
      fprintf(stderr, "busy: %s: cannot make the model or step it\n", k->name);
      return 1;
    }
  }
  unsetenv("DTRT_NUM_THREADS");
  return 0;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  if (reps < 3)
    reps = 3;
  int cpu = argc > 2 ? atoi(argv[2]) : -1;
  cpu_set_t set;
  if (cpu < 0 && !sched_getaffinity(0, sizeof set, &set))
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set))
        cpu = c;
  if (cpu < 0) {
    fprintf(stderr, "busy: no CPU for the busy loop\n");
    return 1;
  }

  unsigned s = 1;
  for (int i = 0; i < MB * MIN; i++)
    mlp_x[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
  for (int i = 0; i < MB; i++)
    mlp_y[i] = i % MOUT;
  fill(gpt_ids, GPT_IDS_ELEMS, GPT_DIM_V, &s);
  fill(gpt_next, GPT_NEXT_ELEMS, GPT_DIM_V, &s);
  fill(small_ids, GPT_SMALL_IDS_ELEMS, GPT_SMALL_DIM_V, &s);
  fill(small_next, GPT_SMALL_NEXT_ELEMS, GPT_SMALL_DIM_V, &s);

  pid_t busy = busy_start(cpu);
  if (busy < 0) {
    fprintf(stderr, "busy: cannot start the busy loop\n");
    return 1;
  }
  kill(busy, SIGSTOP);
  int err = 0;
  for (int k = 0; k < NKIND && !err; k++) {
    bool chosen = argc <= 3;
    for (int a = 3; a < argc; a++)
      chosen |= !strcmp(argv[a], kinds[k].name);
    if (!chosen)
      continue;
    void *m[2];
    err = make(&kinds[k], m) || run(&kinds[k], m, busy, cpu, reps);
    for (int w = 0; w < 2; w++)
      if (m[w])
        kinds[k].destroy(m[w]);
  }
  kill(busy, SIGKILL);
  waitpid(busy, NULL, 0);
  return err;
}
