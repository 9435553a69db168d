/* matmul.c: dense products against the machine's peak. The FP32 peak
 * (peak.h), OpenBLAS sgemm and dtc's generated matmul (each shape a model
 * mm_ID of one matmul, compiled with -fmatmul=dtc, run through
 * dtrt_model_forward; the two interleaved) on the shapes of
 * bench/matmul_shapes.h (the MLP and GPT training steps, 2048^3), in one run;
 * each shape's times against the time its FLOPs take at the peak. One JSON
 * line for the peak, one per shape, one per training step (its shapes times
 * their counts); medians in ms with their range, ratios A_over_B of times;
 * dtc_err is the largest difference between dtc's and sgemm's results,
 * relative to the largest magnitude; load_before and load_after the
 * machine's 1-minute load average (other processes skew every time).
 *
 *     build/bench/matmul [REPS] [--alt-core=NAME|none] [--only=PREFIX]
 *
 * --only=PREFIX measures the shapes whose ID starts with PREFIX (gpt_, rule_, job_).
 * OpenBLAS picks its kernels by the CPU it recognises, and may fall back to
 * old ones (openblas_core says which it runs). Beside it, a child process
 * with OPENBLAS_CORETYPE=NAME (default: SkylakeX on AVX-512, Haswell on AVX2)
 * times the same shapes with that kernel set, each interleaved with dtc's
 * again, before and after the rest, each shape keeping the pair with the
 * lower sgemm median: the alt_* keys; dtc_over_alt_sgemm is of that pair. */
#define _GNU_SOURCE
#include "peak.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrt.h"

char *openblas_get_corename(void);   /* OpenBLAS: the kernel set in use */

/* The models' NAME_create, each taking its own mm_ID ** (a DtModel). */
#define SHAPE(id, step, count, batch, m, n, k, ta, tb) int mm_##id##_create(DtModel **, uint64_t);
#include "matmul_shapes.h"
#undef SHAPE

typedef struct Shape {
  const char *id, *step;
  int count, batch, m, n, k, ta, tb;
  int (*create)(DtModel **, uint64_t);
} Shape;

static const Shape shapes[] = {
#define SHAPE(id, step, count, batch, m, n, k, ta, tb) \
  {#id, #step, count, batch, m, n, k, ta, tb, mm_##id##_create},
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

/* The model's product of d's operands into d->c. */
static void dtc(DtModel *m, const Data *d) {
  const void *in[] = {d->a, d->b};
  int64_t nin[] = {d->na, d->nb}, nout[] = {d->nc};
  void *out[] = {d->c};
  if (dtrt_model_forward(m, in, nin, out, nout)) {
    fprintf(stderr, "matmul: %s\n", dtrt_model_error(m));
    exit(1);
  }
}

/* dtc's and sgemm's results apart, relative to the largest magnitude. */
static double difference(const Shape *s, const Data *d, DtModel *m) {
  float *ref = malloc((size_t)d->nc * sizeof *ref);
  sgemm(s, d);
  memcpy(ref, d->c, (size_t)d->nc * sizeof *ref);
  dtc(m, d);
  double big = 0, diff = 0;
  for (int64_t i = 0; i < d->nc; i++) {
    big = fmax(big, fabs(ref[i]));
    diff = fmax(diff, fabs(ref[i] - d->c[i]));
  }
  free(ref);
  return big > 0 ? diff / big : diff;
}

/* sgemm and dtc, interleaved so that both see the same load. */
static void time_both(const Shape *s, const Data *d, DtModel *m, int max, Times *ts, Times *td) {
  sgemm(s, d);
  dtc(m, d);
  double t0 = now_ms();
  sgemm(s, d);
  double t1 = now_ms();
  dtc(m, d);
  double t2 = now_ms();
  int reps = reps_for(t1 - t0 > t2 - t1 ? t1 - t0 : t2 - t1, max);
  double a[256], b[256];
  for (int r = 0; r < reps; r++) {
    t0 = now_ms();
    sgemm(s, d);
    t1 = now_ms();
    dtc(m, d);
    t2 = now_ms();
    a[r] = t1 - t0;
    b[r] = t2 - t1;
  }
  *ts = times_of(a, reps);
  *td = times_of(b, reps);
}

static const char *only = "";   /* --only */

static bool chosen(const Shape *s) { return !strncmp(s->id, only, strlen(only)); }

/* The child of --alt-core: sgemm and dtc, interleaved, on every shape; one
 * line "ID SGEMM_MED MIN MAX DTC_MED MIN MAX". */
static int pairs_only(int max) {
  unsigned seed = 1;
  printf("core %s\n", openblas_get_corename());
  for (int i = 0; i < NSHAPE; i++) {
    if (!chosen(&shapes[i]))
      continue;
    Data d = data_new(&shapes[i], &seed);
    DtModel *m;
    if (shapes[i].create(&m, 1))
      return 1;
    Times ts, td;
    time_both(&shapes[i], &d, m, max, &ts, &td);
    printf("%s %.6f %.6f %.6f %.6f %.6f %.6f\n", shapes[i].id, ts.med, ts.min, ts.max, td.med,
           td.min, td.max);
    dtrt_model_destroy(m);
    data_free(&d);
  }
  return 0;
}

/* Runs this program as the child with OPENBLAS_CORETYPE=core; fills alt[]
 * with its sgemm times and dtc[] with dtc's beside them (med < 0: not
 * measured), and got with the kernel set the child ran. */
static void alt_pairs(const char *core, int max, Times *alt, Times *dtc, char *got, size_t len) {
  for (int i = 0; i < NSHAPE; i++)
    alt[i].med = dtc[i].med = -1;
  snprintf(got, len, "?");
  char cmd[4200], exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return;
  exe[n] = 0;
  snprintf(cmd, sizeof cmd, "'%s' --only='%s' --pairs-only %d", exe, only, max);
  setenv("OPENBLAS_CORETYPE", core, 1);
  FILE *p = popen(cmd, "r");
  unsetenv("OPENBLAS_CORETYPE");
  if (!p)
    return;
  char line[512], id[128];
  Times t, u;
  while (fgets(line, sizeof line, p)) {
    char name[128];
    if (sscanf(line, "core %127s", name) == 1) {
      snprintf(got, len, "%s", name);
      continue;
    }
    if (sscanf(line, "%127s %lf %lf %lf %lf %lf %lf", id, &t.med, &t.min, &t.max, &u.med, &u.min,
               &u.max) != 7)
      continue;
    for (int i = 0; i < NSHAPE; i++)
      if (!strcmp(shapes[i].id, id))
        alt[i] = t, dtc[i] = u;
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
    if (!strcmp(argv[i], "--pairs-only"))
      return pairs_only(i + 1 < argc ? atoi(argv[i + 1]) : max);
    if (!strncmp(argv[i], "--alt-core=", 11))
      alt_core = argv[i] + 11;
    else if (!strncmp(argv[i], "--only=", 7))
      only = argv[i] + 7;
    else
      max = atoi(argv[i]);
  }
  if (max < 3)
    max = 3;
  if (max > 256)
    max = 256;

  /* The peak is sampled between the shapes, so it sees the same load. */
  double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
  getloadavg(load0, 3);
  Peak p = peak_measure(15);
  double psample[NSHAPE / 4 + 8];
  int np = 0;
  psample[np++] = p.best;
  Times sg[NSHAPE], alt[NSHAPE], dt[NSHAPE], adt[NSHAPE];
  double err[NSHAPE];
  unsigned seed = 1;
  char got[128];
  bool with_alt = strcmp(alt_core, "none") != 0;
  if (with_alt)
    alt_pairs(alt_core, max, alt, adt, got, sizeof got);
  for (int i = 0; i < NSHAPE; i++) {
    if (!chosen(&shapes[i]))
      continue;
    Data d = data_new(&shapes[i], &seed);
    DtModel *m;
    if (shapes[i].create(&m, 1)) {
      fprintf(stderr, "matmul: cannot create model mm_%s\n", shapes[i].id);
      return 1;
    }
    err[i] = difference(&shapes[i], &d, m);
    time_both(&shapes[i], &d, m, max, &sg[i], &dt[i]);
    dtrt_model_destroy(m);
    data_free(&d);
    if (i % 4 == 3)
      psample[np++] = peak_measure(5).best;
  }
  if (with_alt) {
    /* twice, before and after, each shape keeping the lower median */
    Times again[NSHAPE], dagain[NSHAPE];
    alt_pairs(alt_core, max, again, dagain, got, sizeof got);
    for (int i = 0; i < NSHAPE; i++)
      if (again[i].med > 0 && (alt[i].med < 0 || again[i].med < alt[i].med))
        alt[i] = again[i], adt[i] = dagain[i];
  }
  psample[np++] = peak_measure(15).best;
  getloadavg(load1, 3);
  double pmed = median(psample, np);
  double peak = psample[np - 1];   /* the best sample */

  printf("{\"bench\": \"matmul_peak\", \"isa\": \"%s\", \"lanes\": %d, \"threads\": %d, "
         "\"samples\": %d, \"peak_gflops\": %.2f, \"peak_median_gflops\": %.2f, "
         "\"peak_min_gflops\": %.2f, \"load_before\": %.2f, \"load_after\": %.2f}\n",
         p.isa, p.lanes, p.threads, np, peak, pmed, psample[0], load0[0], load1[0]);
  enum { NSTEP = 3 };
  const char *steps[NSTEP] = {"mlp", "gpt", "job"};
  double step_gflop[NSTEP] = {0}, step_sgemm[NSTEP] = {0}, step_alt[NSTEP] = {0};
  double step_dtc[NSTEP] = {0}, step_adt[NSTEP] = {0};
  bool step_alt_ok[NSTEP] = {true, true, true}, step_whole[NSTEP] = {true, true, true};
  for (int i = 0; i < NSHAPE; i++) {
    const Shape *s = &shapes[i];
    for (int k = 0; k < NSTEP; k++)
      step_whole[k] &= chosen(s) || strcmp(s->step, steps[k]);
    if (!chosen(s))
      continue;
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
    printf(", \"dtc_ms\": %.4f, \"dtc_min_ms\": %.4f, \"dtc_max_ms\": %.4f, "
           "\"dtc_gflops\": %.2f, \"dtc_over_peak\": %.3f, \"dtc_over_sgemm\": %.3f",
           dt[i].med, dt[i].min, dt[i].max, g / dt[i].med * 1e3, dt[i].med / peak_ms,
           dt[i].med / sg[i].med);
    if (with_alt && alt[i].med > 0)
      printf(", \"alt_dtc_ms\": %.4f, \"dtc_over_alt_sgemm\": %.3f", adt[i].med,
             adt[i].med / alt[i].med);
    printf(", \"dtc_err\": %.2g}\n", err[i]);
    for (int k = 0; k < NSTEP; k++)
      if (!strcmp(s->step, steps[k])) {
        step_gflop[k] += s->count * g;
        step_dtc[k] += s->count * dt[i].med;
        step_sgemm[k] += s->count * sg[i].med;
        step_alt[k] += s->count * alt[i].med;
        step_adt[k] += s->count * adt[i].med;
        step_alt_ok[k] &= with_alt && alt[i].med > 0;
      }
  }
  for (int k = 0; k < NSTEP; k++) {
    if (!step_whole[k])
      continue;
    double peak_ms = step_gflop[k] / peak * 1e3;
    printf("{\"bench\": \"matmul_step\", \"step\": \"%s\", \"gflop\": %.4f, \"peak_ms\": %.4f, "
           "\"sgemm_ms\": %.4f, \"sgemm_over_peak\": %.3f",
           steps[k], step_gflop[k], peak_ms, step_sgemm[k], step_sgemm[k] / peak_ms);
    if (step_alt_ok[k])
      printf(", \"alt_core\": \"%s\", \"alt_sgemm_ms\": %.4f, \"alt_sgemm_over_peak\": %.3f", got,
             step_alt[k], step_alt[k] / peak_ms);
    printf(", \"dtc_ms\": %.4f, \"dtc_over_peak\": %.3f, \"dtc_over_sgemm\": %.3f", step_dtc[k],
           step_dtc[k] / peak_ms, step_dtc[k] / step_sgemm[k]);
    if (step_alt_ok[k])
      printf(", \"alt_dtc_ms\": %.4f, \"dtc_over_alt_sgemm\": %.3f", step_adt[k],
             step_adt[k] / step_alt[k]);
    printf("}\n");
  }
  return 0;
}
