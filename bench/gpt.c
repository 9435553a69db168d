/* gpt.c: one training step of examples/gpt.dt at B 16, T 128, D 256, H 4,
 * V 2048, L 4 compiled by dtc, against the machine's FP32 peak (peak.h) and
 * the same model in PyTorch (bench/gpt_torch.py, on as many threads as
 * libdtrt's pool has), in one run, on random token ids in [0, V).
 *
 * The step's FLOPs are its matmuls', counted by the compiler: the cost rule
 * of every matmul of @train_step after autodiff (ir/cost.c, 2 m n k), a
 * loop's body counted once per iteration. They must equal the formula
 * 3 (L (24 N D^2 + 4 N T D) + 2 N D V), N = B T: per layer the four D x D
 * projections (8 N D^2), the MLP's two D x 4D products (16 N D^2), the
 * attention scores and their product with the values (2 N T D each), then
 * the head (2 N D V); the backward makes two products of each forward one's
 * size. gflop_rest is the cost model's count of everything else
 * (elementwise, softmax, norms, the optimizer; exponentials weighted as
 * ir/cost.c says), for information. peak_ms is the matmuls' FLOPs at the
 * best peak sample of the run; dtc_over_peak is, as in bench/mlp, the median
 * over the steps of each step against the peak sampled beside it.
 *
 * Then the same step from trained weights, as a real run takes it: a new model
 * of the same seed trains TRAIN_STEPS steps (default 300, past the schedule's
 * warm-up of 100; 0 leaves this phase out) as a byte-level language model on
 * the text of the docs (every .md of docs/; a token is a byte, modulo V): each
 * step B windows of T + 1 bytes at pseudo-random offsets, next the bytes after
 * ids. Then REPS more steps on the windows that follow are timed against the
 * peak beside each as above: trained_dtc_ms, trained_dtc_over_peak with its
 * range, and trained_over_fresh (trained_dtc_over_peak over dtc_over_peak).
 * Random ids, the fresh steps' data, have nothing to learn but the batch
 * itself; on text the logits of bytes never seen fall, the attention sharpens
 * and the loss falls as in real training. trained_subnormals is the share of
 * params and optimizer state that are subnormal after training (AdamW's first
 * moment of a weight whose gradient stays zero decays by 0.9 a step, into
 * subnormals after about 750 steps: more than this phase's default).
 *
 * A second line, gpt_parts, splits the step, for information: matmul_ms,
 * the step's products timed alone (the models mm_gpt_* of bench/matmul:
 * each per-layer shape L times, the head's once), also against peak_ms;
 * kernels_ms, the libdtrt kernels (softmax, norms, cross entropy,
 * transposes, ...) from a trace (DTRT_TRACE) of a second model, the largest
 * by name; rest_ms, the step less both: generated elementwise loops (the
 * optimizer's among them) and whatever the products cost more inside the
 * step than alone (under load it can come out negative). Both lines carry
 * the 1-minute load average before and after: other processes skew every
 * time.
 *
 *     build/bench/gpt [REPS] [bench/gpt_torch.py] [TRAIN_STEPS]
 */
#define _GNU_SOURCE
#include "peak.h"

#include <glob.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "dtrt.h"
#include "frontend.h"
#include "gpt.h"
#include "ir.h"
#include "passes.h"
#include "trace.h"

enum { B = GPT_DIM_B, T = GPT_DIM_T, D = GPT_DIM_D, H = GPT_DIM_H, V = GPT_DIM_V, L = GPT_DIM_L };

/* The gpt shapes of bench/matmul_shapes.h, one model each (ONLY_STEP keeps
 * the lines of step gpt). */
#define ONLY_gpt(...) __VA_ARGS__
#define ONLY_mlp(...)
#define ONLY_none(...)
#define ONLY_rule(...)
#define ONLY_job(...)
#define SHAPE(id, step, count, batch, m, n, k, ta, tb)                                             \
  ONLY_##step(int mm_##id##_create(DtModel **, uint64_t);)
#include "matmul_shapes.h"
#undef SHAPE

typedef struct Shape {
  const char *id;
  int count, batch, m, n, k;
  int (*create)(DtModel **, uint64_t);
} Shape;

static const Shape shapes[] = {
#define SHAPE(id, step, count, batch, m, n, k, ta, tb)                                             \
  ONLY_##step({#id, count, batch, m, n, k, mm_##id##_create}, )
#include "matmul_shapes.h"
#undef SHAPE
};
enum { NSHAPE = sizeof shapes / sizeof shapes[0] };

typedef struct Text {
  unsigned char *p;
  size_t n;
  uint32_t seed;   /* of the windows' offsets */
} Text;

/* The bytes of every file matching pattern, in the order of their names;
 * false when there are fewer than T + 1. */
static bool read_text(const char *pattern, Text *t) {
  glob_t g;
  *t = (Text){NULL, 0, 1};
  if (glob(pattern, 0, NULL, &g))
    return false;
  for (size_t k = 0; k < g.gl_pathc; k++) {
    FILE *f = fopen(g.gl_pathv[k], "rb");
    if (!f)
      continue;
    char buf[65536];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
      unsigned char *p = realloc(t->p, t->n + got);
      if (!p)
        break;
      memcpy(p + t->n, buf, got);
      t->p = p, t->n += got;
    }
    fclose(f);
  }
  globfree(&g);
  return t->n > T + 1;
}

/* The next batch of text: B windows of T + 1 bytes at pseudo-random
 * offsets; ids the first T bytes of each, next the T after the first. */
static void fill_text(Text *t, int32_t *ids, int32_t *next) {
  for (int b = 0; b < B; b++) {
    t->seed = t->seed * 1664525u + 1013904223u;
    size_t at = (t->seed >> 4) % (t->n - T - 1);
    for (int k = 0; k < T; k++) {
      ids[b * T + k] = t->p[at + k] % V;
      next[b * T + k] = t->p[at + k + 1] % V;
    }
  }
}

/* The share of the model's params and optimizer state (AdamW's __m and __v
 * of each) that is subnormal. */
static double subnormal_state(gpt *m) {
  static const char *const param[] = {
      "tok",       "pos",         "g3",          "c3",          "w_out",      "layers.g1",
      "layers.c1", "layers.wq",   "layers.wk",   "layers.wv",   "layers.wo",  "layers.g2",
      "layers.c2", "layers.w_up", "layers.b_up", "layers.w_dn", "layers.b_dn"};
  static const char *const part[] = {"", "__m", "__v"};
  return subnormal_share((DtModel *)m, param, 17, part, 3);
}

/* reps timed training steps, td[r] in ms and rd[r] against the better of
 * the peak samples just before and after the step (*peak: the best sample
 * yet); with text each on its next batch, else on ids and next as they
 * are. false when a step fails. */
static bool time_steps(gpt *m, int reps, const Peak *pk, double gflop, double *peak, Text *text,
                       int32_t *ids, int32_t *next, double *td, double *rd, float *loss) {
  double before = peak_again(pk);
  for (int r = 0; r < reps; r++) {
    if (text)
      fill_text(text, ids, next);
    double t0 = now_ms();
    if (gpt_train_step(m, ids, GPT_IDS_ELEMS, next, GPT_NEXT_ELEMS, loss))
      return false;
    td[r] = now_ms() - t0;
    double after = peak_again(pk), near = before > after ? before : after;
    rd[r] = td[r] / (gflop / near * 1e3);
    *peak = near > *peak ? near : *peak;
    before = peak_again(pk);
  }
  return true;
}

static void fill_ids(int32_t *p, int n, uint32_t seed) {
  for (int k = 0; k < n; k++) {
    seed = seed * 1664525u + 1013904223u;
    p[k] = (int32_t)((seed >> 8) % V);
  }
}

/* FLOPs of f's instructions by the cost model, a loop's body times its
 * count: the matmuls' into *mm, the others' into *rest. */
static void count_flops(const Func *f, double times, double *mm, double *rest) {
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_repeat) {
      const Func *body = ir_repeat_body(i);
      if (body)
        count_flops(body, times * (double)ir_get_int(i, "n", 1), mm, rest);
    } else {
      *(i->op == OP_matmul ? mm : rest) += times * ir_flops(i);
    }
  }
}

/* The compiler's count of the step's FLOPs: gpt.dt at this bench's sizes
 * through the passes up to autodiff. false when it cannot be had. */
static bool compiler_flops(double *mm, double *rest) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  char defs[6][32];
  const char *def[6];
  const char *name[6] = {"B", "T", "D", "H", "V", "L"};
  int val[6] = {B, T, D, H, V, L};
  for (int k = 0; k < 6; k++) {
    snprintf(defs[k], sizeof defs[k], "%s=%d", name[k], val[k]);
    def[k] = defs[k];
  }
  const SrcFile *src = src_read(a, DTC_BENCH_EXAMPLES "/gpt.dt");
  Module *m = src ? fe_compile(a, src, def, 6, &d) : NULL;
  PassRun run;
  bool ok = m && !d.nerr && passes_run(m, &d, &(PassOptions){.stop_after = "autodiff"}, &run);
  const Func *f = ok ? ir_find_func(m, "train_step") : NULL;
  *mm = *rest = 0;
  if (f)
    count_flops(f, 1, mm, rest);
  arena_free(a);
  return f != NULL;
}

/* The median step of the torch script on `threads` threads, and its range;
 * false when it did not run (torch missing). */
static bool torch_ms(const char *script, int reps, int threads, double t[3]) {
  const char *python = getenv("PYTHON");
  if (!python)
    python = access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s '%s' %d %d %d %d %d %d %d %d 2>/dev/null", python, script, reps,
           threads, B, T, D, H, V, L);
  FILE *p = popen(cmd, "r");
  if (!p)
    return false;
  bool ok = fscanf(p, "%lf %lf %lf", &t[0], &t[1], &t[2]) == 3;
  return !pclose(p) && ok;
}

/* Time of one product of shape s through its model, the median of reps. */
static double matmul_ms(const Shape *s, int reps, unsigned *seed) {
  DtModel *m;
  if (s->create(&m, 1))
    return -1;
  int64_t na = (int64_t)s->batch * s->m * s->k, nb = (int64_t)s->batch * s->k * s->n;
  int64_t nc = (int64_t)s->batch * s->m * s->n;
  float *buf = malloc((size_t)(na + nb + nc) * sizeof *buf);
  for (int64_t i = 0; i < na + nb + nc; i++)
    buf[i] = (float)((*seed = *seed * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
  const void *in[] = {buf, buf + na};
  int64_t nin[] = {na, nb}, nout[] = {nc};
  void *out[] = {buf + na + nb};
  double t[64];
  reps = reps > 64 ? 64 : reps;
  for (int r = -1; r < reps; r++) {
    double t0 = now_ms();
    if (dtrt_model_forward(m, in, nin, out, nout))
      return -1;
    if (r >= 0)
      t[r] = now_ms() - t0;
  }
  free(buf);
  dtrt_model_destroy(m);
  return median(t, reps);
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 10;
  if (reps < 3)
    reps = 3;
  const char *script = argc > 2 ? argv[2] : "gpt_torch.py";
  int train_steps = argc > 3 ? atoi(argv[3]) : 300;

  double gflop, gflop_rest;
  if (!compiler_flops(&gflop, &gflop_rest)) {
    fprintf(stderr, "gpt: cannot count the step's FLOPs\n");
    return 1;
  }
  gflop /= 1e9, gflop_rest /= 1e9;
  double n = (double)B * T;
  double formula = 3 * (L * (24 * n * D * D + 4 * n * T * D) + 2 * n * D * V) / 1e9;
  if (gflop < formula * (1 - 1e-9) || gflop > formula * (1 + 1e-9))
    fprintf(stderr, "gpt: the compiler counts %.6f GFLOP of matmuls, the formula %.6f\n", gflop,
            formula);

  static int32_t ids[GPT_IDS_ELEMS], next[GPT_NEXT_ELEMS];
  fill_ids(ids, GPT_IDS_ELEMS, 1);
  fill_ids(next, GPT_NEXT_ELEMS, 2);
  gpt *m;
  if (gpt_create(&m, 1)) {
    fprintf(stderr, "gpt: cannot create the model\n");
    return 1;
  }
  DtrtCtx *probe = dtrt_ctx_new();
  int threads = probe ? dtrt_threads(probe) : 1; /* the pool the model's context makes */
  dtrt_ctx_free(probe);
  float loss;
  for (int w = 0; w < 2; w++)
    if (gpt_train_step(m, ids, GPT_IDS_ELEMS, next, GPT_NEXT_ELEMS, &loss)) {
      fprintf(stderr, "gpt: %s\n", gpt_error(m));
      return 1;
    }

  double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
  getloadavg(load0, 3);
  Peak pk = peak_measure(15);
  double peak = pk.best;
  double *td = malloc(sizeof(double) * (size_t)reps), *rd = malloc(sizeof(double) * (size_t)reps);
  double *tt = malloc(sizeof(double) * (size_t)reps), *rt = malloc(sizeof(double) * (size_t)reps);
  time_steps(m, reps, &pk, gflop, &peak, NULL, ids, next, td, rd, &loss);
  double dtc = median(td, reps), ratio = median(rd, reps);

  /* from trained weights: a new model of the same seed (what it learns does
   * not depend on how many fresh steps there were) trains train_steps on
   * the docs' text, then reps more are timed */
  gpt_destroy(m);
  m = NULL;
  Text text = {0};
  bool trained = train_steps > 0 && read_text(DTC_BENCH_DOCS "/*.md", &text) && !gpt_create(&m, 1);
  for (int s = 0; trained && s < train_steps; s++) {
    fill_text(&text, ids, next);
    trained = !gpt_train_step(m, ids, GPT_IDS_ELEMS, next, GPT_NEXT_ELEMS, &loss);
  }
  trained = trained && time_steps(m, reps, &pk, gflop, &peak, &text, ids, next, tt, rt, &loss);
  double trained_dtc = trained ? median(tt, reps) : 0,
         trained_ratio = trained ? median(rt, reps) : 0;
  double subnormal = trained ? subnormal_state(m) : 0;
  float trained_loss = loss;
  free(text.p);
  gpt_destroy(m);
  fill_ids(ids, GPT_IDS_ELEMS, 1);
  fill_ids(next, GPT_NEXT_ELEMS, 2);
  double peak_ms = gflop / peak * 1e3;
  double torch[3];
  bool with_torch = torch_ms(script, reps, threads, torch);
  getloadavg(load1, 3);
  printf("{\"bench\": \"gpt\", \"B\": %d, \"T\": %d, \"D\": %d, \"H\": %d, \"V\": %d, \"L\": %d, "
         "\"threads\": %d, \"dtc_ms\": %.3f, \"dtc_ms_min\": %.3f, \"dtc_ms_max\": %.3f, "
         "\"gflop\": %.4f, \"gflop_formula\": %.4f, \"gflop_rest\": %.4f, "
         "\"peak_isa\": \"%s\", \"peak_gflops\": %.2f, \"peak_ms\": %.3f, "
         "\"dtc_over_peak\": %.3f, \"dtc_over_peak_min\": %.3f, \"dtc_over_peak_max\": %.3f, "
         "\"dtc_over_best_peak\": %.3f, \"dtc_over_peak_target\": 2.5",
         B, T, D, H, V, L, threads, dtc, td[0], td[reps - 1], gflop, formula, gflop_rest, pk.isa,
         peak, peak_ms, ratio, rd[0], rd[reps - 1], dtc / peak_ms);
  if (trained)
    printf(", \"trained_steps\": %d, \"trained_loss\": %.4f, \"trained_subnormals\": %.6f, "
           "\"trained_dtc_ms\": %.3f, \"trained_dtc_ms_min\": %.3f, \"trained_dtc_ms_max\": %.3f, "
           "\"trained_dtc_over_peak\": %.3f, \"trained_dtc_over_peak_min\": %.3f, "
           "\"trained_dtc_over_peak_max\": %.3f, \"trained_over_fresh\": %.3f",
           train_steps, trained_loss, subnormal, trained_dtc, tt[0], tt[reps - 1], trained_ratio,
           rt[0], rt[reps - 1], trained_ratio / ratio);
  else if (train_steps > 0)
    printf(", \"trained\": \"did not run: no text in %s/*.md or a step failed\"", DTC_BENCH_DOCS);
  if (with_torch)
    printf(", \"torch_ms\": %.3f, \"torch_ms_min\": %.3f, \"torch_ms_max\": %.3f, "
           "\"dtc_over_torch\": %.3f, \"dtc_over_torch_target\": 0.25",
           torch[0], torch[1], torch[2], dtc / torch[0]);
  else
    printf(", \"torch\": \"%s did not run: is python3-torch installed?\"", script);
  printf(", \"load_before\": %.2f, \"load_after\": %.2f}\n", load0[0], load1[0]);
  fflush(stdout);

  /* the parts of the step, for information */
  getloadavg(load0, 3);
  unsigned seed = 1;
  double mm = 0;
  for (int i = 0; i < NSHAPE; i++) {
    const Shape *s = &shapes[i];
    double t = matmul_ms(s, 9, &seed);
    if (t < 0) {
      fprintf(stderr, "gpt: cannot time mm_%s\n", s->id);
      return 1;
    }
    mm += t * s->count * (strncmp(s->id, "gpt_logits", 10) ? L : 1);
  }
  char path[] = "/tmp/dtc_bench_gpt_XXXXXX";
  int fd = mkstemp(path);
  Part part[64];
  memset(part, 0, sizeof part);
  double kern = 0;
  int np = 0, steps = 3;
  if (fd >= 0) {
    close(fd);
    setenv("DTRT_TRACE", path, 1);
    bool made = !gpt_create(&m, 1);
    unsetenv("DTRT_TRACE");
    for (int s = 0; made && s < steps; s++)
      gpt_train_step(m, ids, GPT_IDS_ELEMS, next, GPT_NEXT_ELEMS, &loss);
    if (made)
      gpt_destroy(m);
    np = read_trace(path, steps, part, 64, &kern);
    remove(path);
  }
  qsort(part, (size_t)np, sizeof *part, part_by_ms);
  getloadavg(load1, 3);
  printf("{\"bench\": \"gpt_parts\", \"step_ms\": %.3f, \"matmul_ms\": %.3f, "
         "\"matmul_share\": %.3f, \"matmul_over_peak\": %.3f, \"kernels_ms\": %.3f, "
         "\"kernels_share\": %.3f, \"rest_ms\": %.3f, \"rest_share\": %.3f, \"kernels\": {",
         dtc, mm, mm / dtc, mm / peak_ms, kern, kern / dtc, dtc - mm - kern,
         (dtc - mm - kern) / dtc);
  for (int k = 0; k < np && k < 8; k++)
    printf("%s\"%s\": %.3f", k ? ", " : "", part[k].name, part[k].ms);
  printf("}, \"load_before\": %.2f, \"load_after\": %.2f}\n", load0[0], load1[0]);
  free(td);
  free(rd);
  free(tt);
  free(rt);
  return 0;
}
