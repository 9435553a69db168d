/* passes.c: how the pipeline's passes scale with the length of a model. For
 * each statement count N it compiles generated training models of N
 * statements, runs every pass through passes_run, ROUNDS times each, and
 * prints one JSON line per model and N: the median over the rounds of the
 * frontend's time and of each pass's, in ms, the range of the frontend's and
 * memplan's, and memplan_over_frontend and fusion_over_frontend (the median
 * of the rounds' ratios; memplan's with its min and max). A pass that grows
 * faster than the frontend, which is linear, shows as a ratio that grows
 * with N. The models:
 *   chain   a chain of matmul + relu and elementwise statements, one weight
 *           (every activation lives until the backward reads it);
 *   random  statements over four widths, each reading the one before and
 *           often a random earlier value of its width (lives of many
 *           lengths and sizes: a plan with gaps to fill).
 *
 *     build/bench/passes [-r ROUNDS] [-m chain|random] [N ...]
 *                                   (default 3 rounds, both models, 20000 100000)
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

#define MAX_ROUNDS 50

typedef struct Text {
  char *s;
  size_t n, cap;
} Text;

static void put(Text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->n + (size_t)k + 1 > t->cap) {
    t->cap = 2 * (t->n + (size_t)k + 1);
    t->s = realloc(t->s, t->cap);
    if (!t->s) {
      fprintf(stderr, "passes: out of memory\n");
      exit(1);
    }
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n += (size_t)k;
}

static char *chain_text(int n) {
  Text t = {0};
  put(&t, "model chain(batch B = 8) {\n  input x: f32[B, 16]\n  input y: i32[B]\n"
          "  param w: f32[16, 16]\n  h0 = x @ w\n");
  for (int i = 1; i < n; i++)
    if (i % 3 == 0)
      put(&t, "  h%d = relu(h%d @ w)\n", i, i - 1);
    else
      put(&t, "  h%d = h%d * 0.5 + x\n", i, i - 1);
  put(&t, "  loss = cross_entropy(h%d, y)\n  minimize loss with sgd(lr = 0.1)\n}\n", n - 1);
  return t.s;
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* A matmul by p_J_K changes width J to K; the last statement has width 16. */
static char *random_text(int n) {
  static const int width[] = {16, 48, 80, 200};
  Text body = {0}, t = {0};
  bool used[4][4] = {{false}};
  int *w = malloc(sizeof(int) * (size_t)n);
  uint64_t seed = 7;
  w[0] = 0;
  put(&body, "  h0 = x\n");
  for (int i = 1; i < n; i++) {
    int k = i == n - 1 ? 0 : (int)(lcg(&seed) % 4), a = -1;
    for (int tries = 0; tries < 8 && a < 0; tries++) {
      int j = (int)(lcg(&seed) % (uint64_t)i);
      a = w[j] == k ? j : -1;
    }
    w[i] = k;
    if (k != w[i - 1] || lcg(&seed) % 4 == 0) {
      used[w[i - 1]][k] = true;
      put(&body, "  h%d = relu(h%d @ p%d_%d)", i, i - 1, w[i - 1], k);
    } else {
      put(&body, "  h%d = h%d * 0.5", i, i - 1);
    }
    put(&body, a >= 0 ? " + h%d\n" : "\n", a);
  }
  put(&t, "model rnd(batch B = 8) {\n  input x: f32[B, 16]\n  input y: i32[B]\n");
  for (int j = 0; j < 4; j++)
    for (int k = 0; k < 4; k++)
      if (used[j][k])
        put(&t, "  param p%d_%d: f32[%d, %d]\n", j, k, width[j], width[k]);
  put(&t, "%s  loss = cross_entropy(h%d, y)\n  minimize loss with sgd(lr = 0.1)\n}\n", body.s,
      n - 1);
  free(body.s);
  free(w);
  return t.s;
}

/* One compilation: the frontend's time and each pass's into fe and ms. */
static int compile_once(const char *name, const char *text, double *fe, double *ms, int *insts,
                        int64_t *arena) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  double t0 = now_ms();
  Module *m = fe_compile(a, src_from_string(a, name, text), NULL, 0, &d);
  *fe = now_ms() - t0;
  PassRun run;
  if (!m || !passes_run(m, &d, NULL, &run)) {
    arena_free(a);
    return 1;
  }
  *insts = 0;
  *arena = 0;
  for (int k = 0; k < m->func.n; k++) {
    *insts += m->func.a[k]->inst.n;
    *arena = m->func.a[k]->work_bytes > *arena ? m->func.a[k]->work_bytes : *arena;
  }
  memcpy(ms, run.ms, sizeof(double) * (size_t)pass_count);
  arena_free(a);
  return 0;
}

static double lowest(const double *t, int n) {
  double x = t[0];
  for (int k = 1; k < n; k++)
    x = t[k] < x ? t[k] : x;
  return x;
}

static double highest(const double *t, int n) {
  double x = t[0];
  for (int k = 1; k < n; k++)
    x = t[k] > x ? t[k] : x;
  return x;
}

static int run(const char *model, int n, int rounds) {
  char *text = !strcmp(model, "chain") ? chain_text(n) : random_text(n);
  static double fe[MAX_ROUNDS], ms[MAX_ROUNDS][64], col[MAX_ROUNDS], mp[MAX_ROUNDS],
      mp_ratio[MAX_ROUNDS], fu_ratio[MAX_ROUNDS];
  int insts = 0, fu = (int)(pass_lookup("fusion") - pass_table);
  int mpi = (int)(pass_lookup("memplan") - pass_table);
  int64_t arena = 0;
  for (int r = 0; r < rounds; r++) {
    if (compile_once(model, text, &fe[r], ms[r], &insts, &arena)) {
      free(text);
      return 1;
    }
    mp[r] = ms[r][mpi];
    mp_ratio[r] = ms[r][mpi] / fe[r];
    fu_ratio[r] = ms[r][fu] / fe[r];
  }
  free(text);
  printf("{\"bench\": \"passes\", \"model\": \"%s\", \"statements\": %d, \"insts\": %d, "
         "\"rounds\": %d, \"largest_arena_bytes\": %lld",
         model, n, insts, rounds, (long long)arena);
  printf(", \"frontend_ms\": %.1f, \"frontend_min_ms\": %.1f, \"frontend_max_ms\": %.1f",
         median(fe, rounds), lowest(fe, rounds), highest(fe, rounds));
  for (int k = 0; k < pass_count; k++) {
    for (int r = 0; r < rounds; r++)
      col[r] = ms[r][k];
    printf(", \"%s_ms\": %.1f", pass_table[k].name, median(col, rounds));
  }
  printf(", \"memplan_min_ms\": %.1f, \"memplan_max_ms\": %.1f", lowest(mp, rounds),
         highest(mp, rounds));
  printf(", \"fusion_over_frontend\": %.2f, \"memplan_over_frontend\": %.2f"
         ", \"memplan_over_frontend_min\": %.2f, \"memplan_over_frontend_max\": %.2f}\n",
         median(fu_ratio, rounds), median(mp_ratio, rounds), lowest(mp_ratio, rounds),
         highest(mp_ratio, rounds));
  fflush(stdout);
  return 0;
}

static int usage(void) {
  fprintf(stderr, "usage: passes [-r ROUNDS] [-m chain|random] [N ...] (rounds 1 to %d, "
                  "statement counts 2 to 10000000)\n",
          MAX_ROUNDS);
  return 2;
}

int main(int argc, char **argv) {
  static const int dflt[] = {20000, 100000};
  int rounds = 3, ns[64], nn = 0, rc = 0;
  const char *only = NULL;
  for (int k = 1; k < argc; k++) {
    if (!strcmp(argv[k], "-r") && k + 1 < argc) {
      rounds = atoi(argv[++k]);
      if (rounds < 1 || rounds > MAX_ROUNDS)
        return usage();
    } else if (!strcmp(argv[k], "-m") && k + 1 < argc) {
      only = argv[++k];
      if (strcmp(only, "chain") && strcmp(only, "random"))
        return usage();
    } else {
      int n = atoi(argv[k]);
      if (n < 2 || n > 10000000 || nn == COUNTOF(ns))
        return usage();
      ns[nn++] = n;
    }
  }
  for (int k = 0; !nn && k < COUNTOF(dflt); k++)
    ns[nn++] = dflt[k];
  static const char *const models[] = {"chain", "random"};
  for (int j = 0; j < COUNTOF(models); j++)
    for (int k = 0; k < nn; k++)
      if (!only || !strcmp(only, models[j]))
        rc |= run(models[j], ns[k], rounds);
  return rc;
}
