/* matmul.c: dense products against the machine's peak. The FP32 peak
 * (peak.h) and OpenBLAS sgemm on the shapes of bench/matmul_shapes.h (the
 * MLP and GPT training steps, 2048^3), in one run; each shape's time against
 * the time its FLOPs take at the peak. One JSON line for the peak, one per
 * shape, one per training step (its shapes times their counts); medians in
 * ms with their range, ratios A_over_B of times.
 *
 *     build/bench/matmul [REPS] [--alt-core=NAME|none]
 *
 * OpenBLAS picks its kernels by the CPU it recognises, and may fall back to
 * old ones (openblas_core says which it runs). Beside it, a child process
 * with OPENBLAS_CORETYPE=NAME (default: SkylakeX on AVX-512, Haswell on AVX2)
 * times the same shapes with that kernel set: the alt_* keys. */
#define _GNU_SOURCE
#include "peak.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *openblas_get_corename(void);   /* OpenBLAS: the kernel set in use */

typedef struct Shape {
  const char *id, *step;
  int count, batch, m, n, k, ta, tb;
} Shape;

static const Shape shapes[] = {
#define SHAPE(id, step, count, batch, m, n, k, ta, tb) {#id, #step, count, batch, m, n, k, ta, tb},
#include "matmul_shapes.h"
#undef SHAPE
};
enum { NSHAPE = sizeof shapes / sizeof shapes[0] };

/* A shape's operands and result. */
typedef struct Data {
  float *a, *b, *c;
  int64_t na, nb, nc;
} Data;

static float *randn(int64_t n, unsigned *s) {
  float *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++)
    p[i] = (float)((*s = *s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
  return p;
}

static Data data_new(const Shape *s, unsigned *seed) {
  Data d;
  d.na = (int64_t)s->batch * s->m * s->k;
  d.nb = (int64_t)s->batch * s->k * s->n;
  d.nc = (int64_t)s->batch * s->m * s->n;
  d.a = randn(d.na, seed);
  d.b = randn(d.nb, seed);
  d.c = randn(d.nc, seed);
  return d;
}

static void data_free(Data *d) {
  free(d->a);
  free(d->b);
  free(d->c);
}

static double gflop(const Shape *s) { return 2.0 * s->batch * s->m * s->n * (double)s->k / 1e9; }

static void sgemm(const Shape *s, const Data *d) {
  int64_t sa = (int64_t)s->m * s->k, sb = (int64_t)s->k * s->n, sc = (int64_t)s->m * s->n;
  for (int i = 0; i < s->batch; i++)
    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                s->tb ? CblasTrans : CblasNoTrans, s->m, s->n, s->k, 1, d->a + i * sa,
                s->ta ? s->m : s->k, d->b + i * sb, s->tb ? s->k : s->n, 0, d->c + i * sc, s->n);
}

/* Timings of one implementation on one shape. */
typedef struct Times {
  double med, min, max;
} Times;

static Times times_of(double *t, int n) {
  Times r;
  r.med = median(t, n);
  r.min = t[0];
  r.max = t[n - 1];
  return r;
}

/* Repetitions for a shape whose first run took ms: about 300 ms of runs,
 * between 3 and max. */
static int reps_for(double ms, int max) {
  int r = ms > 0 ? (int)(300 / ms) : max;
  return r < 3 ? 3 : r > max ? max : r;
}

static Times time_sgemm(const Shape *s, const Data *d, int max) {
  sgemm(s, d);
  double t0 = now_ms();
  sgemm(s, d);
  int reps = reps_for(now_ms() - t0, max);
  double t[256];
  for (int r = 0; r < reps; r++) {
    t0 = now_ms();
    sgemm(s, d);
    t[r] = now_ms() - t0;
  }
  return times_of(t, reps);
}

/* The child of --alt-core: sgemm on every shape, one line "ID MED MIN MAX". */
static int sgemm_only(int max) {
  unsigned seed = 1;
  printf("core %s\n", openblas_get_corename());
  for (int i = 0; i < NSHAPE; i++) {
    Data d = data_new(&shapes[i], &seed);
    Times t = time_sgemm(&shapes[i], &d, max);
    printf("%s %.6f %.6f %.6f\n", shapes[i].id, t.med, t.min, t.max);
    data_free(&d);
  }
  return 0;
}

/* Runs this program as the child with OPENBLAS_CORETYPE=core; fills alt[]
 * (med < 0: not measured) and the kernel set the child ran into got. */
static void alt_sgemm(const char *core, int max, Times *alt, char *got, size_t len) {
  for (int i = 0; i < NSHAPE; i++)
    alt[i].med = -1;
  snprintf(got, len, "?");
  char cmd[4200], exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return;
  exe[n] = 0;
  snprintf(cmd, sizeof cmd, "'%s' --sgemm-only %d", exe, max);
  setenv("OPENBLAS_CORETYPE", core, 1);
  FILE *p = popen(cmd, "r");
  unsetenv("OPENBLAS_CORETYPE");
  if (!p)
    return;
  char line[512], id[128];
  Times t;
  while (fgets(line, sizeof line, p)) {
    char name[128];
    if (sscanf(line, "core %127s", name) == 1) {
      snprintf(got, len, "%s", name);
      continue;
    }
    if (sscanf(line, "%127s %lf %lf %lf", id, &t.med, &t.min, &t.max) != 4)
      continue;
    for (int i = 0; i < NSHAPE; i++)
      if (!strcmp(shapes[i].id, id))
        alt[i] = t;
  }
  pclose(p);
}

static const char *default_alt_core(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2"))
    return "Haswell";
#endif
  return "none";
}

int main(int argc, char **argv) {
  int max = 15;
  const char *alt_core = default_alt_core();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sgemm-only"))
      return sgemm_only(i + 1 < argc ? atoi(argv[i + 1]) : max);
    if (!strncmp(argv[i], "--alt-core=", 11))
      alt_core = argv[i] + 11;
    else
      max = atoi(argv[i]);
  }
  if (max < 3)
    max = 3;
  if (max > 256)
    max = 256;

  /* The peak is sampled between the shapes, so it sees the same load. */
  Peak p = peak_measure(3);
  double psample[NSHAPE + 8];
  int np = 0;
  psample[np++] = p.best;
  Times sg[NSHAPE], alt[NSHAPE];
  unsigned seed = 1;
  for (int i = 0; i < NSHAPE; i++) {
    Data d = data_new(&shapes[i], &seed);
    sg[i] = time_sgemm(&shapes[i], &d, max);
    data_free(&d);
    if (i % 4 == 3)
      psample[np++] = peak_measure(1).best;
  }
  char got[128];
  bool with_alt = strcmp(alt_core, "none") != 0;
  if (with_alt)
    alt_sgemm(alt_core, max, alt, got, sizeof got);
  psample[np++] = peak_measure(3).best;
  double pmed = median(psample, np);
  double peak = psample[np - 1];   /* the best sample */

  printf("{\"bench\": \"matmul_peak\", \"isa\": \"%s\", \"lanes\": %d, \"threads\": %d, "
         "\"samples\": %d, \"peak_gflops\": %.2f, \"peak_median_gflops\": %.2f, "
         "\"peak_min_gflops\": %.2f}\n",
         p.isa, p.lanes, p.threads, np, peak, pmed, psample[0]);
  const char *steps[] = {"mlp", "gpt"};
  double step_gflop[2] = {0}, step_sgemm[2] = {0}, step_alt[2] = {0};
  bool step_alt_ok[2] = {true, true};
  for (int i = 0; i < NSHAPE; i++) {
    const Shape *s = &shapes[i];
    double g = gflop(s), peak_ms = g / peak * 1e3;
    printf("{\"bench\": \"matmul\", \"shape\": \"%s\", \"step\": \"%s\", \"count\": %d, "
           "\"batch\": %d, \"m\": %d, \"n\": %d, \"k\": %d, \"ta\": %d, \"tb\": %d, "
           "\"gflop\": %.4f, \"peak_ms\": %.4f, \"openblas_core\": \"%s\", \"sgemm_ms\": %.4f, "
           "\"sgemm_min_ms\": %.4f, \"sgemm_max_ms\": %.4f, \"sgemm_gflops\": %.2f, "
           "\"sgemm_over_peak\": %.3f",
           s->id, s->step, s->count, s->batch, s->m, s->n, s->k, s->ta, s->tb, g, peak_ms,
           openblas_get_corename(), sg[i].med, sg[i].min, sg[i].max, g / sg[i].med * 1e3,
           sg[i].med / peak_ms);
    if (with_alt && alt[i].med > 0)
      printf(", \"alt_core\": \"%s\", \"alt_sgemm_ms\": %.4f, \"alt_sgemm_min_ms\": %.4f, "
             "\"alt_sgemm_max_ms\": %.4f, \"alt_sgemm_gflops\": %.2f, "
             "\"alt_sgemm_over_peak\": %.3f",
             got, alt[i].med, alt[i].min, alt[i].max, g / alt[i].med * 1e3,
             alt[i].med / peak_ms);
    printf("}\n");
    for (int k = 0; k < 2; k++)
      if (!strcmp(s->step, steps[k])) {
        step_gflop[k] += s->count * g;
        step_sgemm[k] += s->count * sg[i].med;
        step_alt[k] += s->count * alt[i].med;
        step_alt_ok[k] &= with_alt && alt[i].med > 0;
      }
  }
  for (int k = 0; k < 2; k++) {
    double peak_ms = step_gflop[k] / peak * 1e3;
    printf("{\"bench\": \"matmul_step\", \"step\": \"%s\", \"gflop\": %.4f, \"peak_ms\": %.4f, "
           "\"sgemm_ms\": %.4f, \"sgemm_over_peak\": %.3f",
           steps[k], step_gflop[k], peak_ms, step_sgemm[k], step_sgemm[k] / peak_ms);
    if (step_alt_ok[k])
      printf(", \"alt_core\": \"%s\", \"alt_sgemm_ms\": %.4f, \"alt_sgemm_over_peak\": %.3f", got,
             step_alt[k], step_alt[k] / peak_ms);
    printf("}\n");
  }
  return 0;
}
