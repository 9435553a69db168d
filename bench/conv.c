/* conv.c: the training steps of two convolutional networks compiled by dtc,
 * against the machine's FP32 peak (peak.h) and the same networks in
 * PyTorch, in one run: examples/cnn.dt (two 3x3 convolutions 1->16->32 on
 * 28x28 with max pooling, a linear head; Adam) against cnn_torch.py, and
 * bench/resnet.dt (ResNet-20 of BasicBlocks with batch norm; SGD with
 * momentum) against resnet_torch.py, both at batch 64 on random images and
 * labels, torch on as many threads as libdtrt's pool has.
 *
 * The torch scripts run beside the bench, served (torch_steps.py): each
 * round takes one step of each of the four (dtc's CNN, torch's, dtc's
 * ResNet, torch's; the other way round every second round) with a peak
 * sample between each two, so that all see the same load. dtc_over_torch
 * is the median over the rounds of dtc's step over torch's of that round,
 * with its range; dtc_over_peak, as in bench/gpt, the median of each step
 * over the time of its convolutions' FLOPs at the better of the peak
 * samples just before and after it. The FLOPs are the convolutions' of
 * @train_step after autodiff as the compiler counts them (ir/cost.c, 2
 * multiply-adds per output element and kernel element, forward, input and
 * weight gradient), which must equal conv_shapes.h's formula; the
 * matmuls' and the rest's counts are given for information.
 *
 * Before the rounds, once: dtc's ResNet exports its initial params, takes
 * two steps on one batch, and resnet_torch.py loads the export and takes
 * the same two steps: the first losses must be equal (loss_dtc,
 * loss_torch) and the second (loss2_*, after one update) apart by float32's
 * rounding only (3e-5 of the loss when measured, as far as torch's own
 * float32 step is from its float64 one: the gradients of twenty layers of
 * batch norm at initialisation are that sensitive); and torch's count of
 * the convolutions' FLOPs from its own layers must equal dtc's
 * (conv_gflop_torch).
 *
 * Then each convolution of conv_shapes.h alone: its forward, input gradient
 * (not for a model's input) and weight gradient, each through a model of
 * that one op (cv_ID_KIND, bench/CMakeLists.txt), against torch's conv2d
 * and the call its autograd makes (conv_torch.py), in turns: one
 * conv_layer line per shape and kind. Last, per network, a conv_parts line
 * splits dtc's step, for information, as bench/gpt's gpt_parts: three
 * steps of a second model traced (DTRT_TRACE), step_ms their time per
 * step, the libdtrt kernels' in them, the convolutions' (conv2d and its
 * two derivatives) and the largest by name; rest_ms, the step less all
 * kernels (generated loops: batch norm's arithmetic, ReLU, the
 * optimizer); and the step's convolutions timed alone, summed, dtc's and
 * torch's. On a loaded machine the medians wander far from the least
 * disturbed samples: dtc_over_torch_best sets dtc's shortest time against
 * torch's. Every line but conv_layer's carries the 1-minute load average
 * before and after.
 *
 *     build/bench/conv [REPS] [DIR]     (DIR holds the torch scripts; default the source's bench/)
 */
#define _GNU_SOURCE
#include "peak.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "torch.h"
#include "cnn.h"
#include "dtrt.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"
#include "resnet.h"
#include "trace.h"

_Static_assert(CNN_DIM_B == 64 && RESNET_DIM_B == 64, "conv_shapes.h is for batch 64");

#define CONV(id, cnn, resnet, first, n, c, h, w, o, k, stride, pad)                                \
  int cv_##id##_fwd_create(DtModel **, uint64_t);                                                  \
  int cv_##id##_dx_create(DtModel **, uint64_t);                                                   \
  int cv_##id##_dw_create(DtModel **, uint64_t);
#include "conv_shapes.h"
#undef CONV

enum { FWD, DX, DW, NKIND };
static const char *kind_name[NKIND] = {"fwd", "dx", "dw"};

typedef struct Shape {
  const char *id;
  int count[2]; /* in one step of the CNN, of the ResNet */
  int first;
  struct {
    int n, c, h, w, o, k, stride, pad;
  };
  int (*create[NKIND])(DtModel **, uint64_t);
} Shape;

static const Shape shapes[] = {
#define CONV(id, cnn, resnet, first, ...)                                                          \
  {#id,                                                                                            \
   {cnn, resnet},                                                                                  \
   first,                                                                                          \
   {__VA_ARGS__},                                                                                  \
   {cv_##id##_fwd_create, cv_##id##_dx_create, cv_##id##_dw_create}},
#include "conv_shapes.h"
#undef CONV
};
enum { NSHAPE = sizeof shapes / sizeof shapes[0] };

enum { CNN, RESNET, NNET };
static const char *net_name[NNET] = {"cnn", "resnet"};

static int out_len(const Shape *s, int in) { return (in + 2 * s->pad - s->k) / s->stride + 1; }

/* FLOPs of one product of shape s: forward, input or weight gradient. */
static double shape_flops(const Shape *s) {
  return 2.0 * s->n * s->o * out_len(s, s->h) * out_len(s, s->w) * s->c * s->k * s->k;
}

/* conv_shapes.h's count of a step's convolution FLOPs. */
static double formula_flops(int net) {
  double f = 0;
  for (int i = 0; i < NSHAPE; i++)
    f += shapes[i].count[net] * (shapes[i].first ? 2 : 3) * shape_flops(&shapes[i]);
  return f;
}

typedef struct Count {
  double conv, matmul, rest;
} Count;

/* FLOPs of f's instructions by the cost model, a loop's body times its
 * count. */
static void count_flops(const Func *f, double times, Count *c) {
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_repeat) {
      const Func *body = ir_repeat_body(i);
      if (body)
        count_flops(body, times * (double)ir_get_int(i, "n", 1), c);
    } else if (i->op == OP_conv2d || i->op == OP_conv2d_grad_input ||
               i->op == OP_conv2d_grad_weight) {
      c->conv += times * ir_flops(i);
    } else {
      *(i->op == OP_matmul ? &c->matmul : &c->rest) += times * ir_flops(i);
    }
  }
}

/* The compiler's count of the training step's FLOPs of the model at path,
 * through the passes up to autodiff. false when it cannot be had. */
static bool compiler_flops(const char *path, Count *c) {
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const SrcFile *src = src_read(a, path);
  Module *m = src ? fe_compile(a, src, NULL, 0, &d) : NULL;
  PassRun run;
  bool ok = m && !d.nerr && passes_run(m, &d, &(PassOptions){.stop_after = "autodiff"}, &run);
  const Func *f = ok ? ir_find_func(m, "train_step") : NULL;
  *c = (Count){0};
  if (f)
    count_flops(f, 1, c);
  arena_free(a);
  return f != NULL;
}

static void fill_uniform(float *p, int64_t n, unsigned *seed, float lo, float hi) {
  for (int64_t i = 0; i < n; i++)
    p[i] =
        lo + (hi - lo) * (float)((*seed = *seed * 1103515245u + 12345u) >> 8) / (float)(1u << 24);
}

static void fill_labels(int32_t *p, int n, unsigned *seed) {
  for (int i = 0; i < n; i++)
    p[i] = (int32_t)(((*seed = *seed * 1103515245u + 12345u) >> 8) % 10);
}

/* ---- the torch scripts, served ---- */

/* Time in ms of one run of the server's step i; NAN when it failed. */
static double torch_once(Torch *t, int i) {
  double ms;
  if (!t->to || fprintf(t->to, "1 %d\n", i) < 0 || fflush(t->to) ||
      fscanf(t->from, "%lf", &ms) != 1)
    return NAN;
  return ms;
}

/* ---- the steps ---- */

typedef struct Nets {
  cnn *cnn;
  resnet *res;
  float *x;   /* images: [64, 784] is [64, 1, 28, 28] */
  int32_t *y; /* labels */
} Nets;

static bool dtc_step(Nets *n, int net) {
  float loss;
  int rc = net == CNN
               ? cnn_train_step(n->cnn, n->x, CNN_X_ELEMS, n->y, CNN_Y_ELEMS, &loss)
               : resnet_train_step(n->res, n->x, RESNET_X_ELEMS, n->y, RESNET_Y_ELEMS, &loss);
  if (rc)
    fprintf(stderr, "conv: %s\n", net == CNN ? cnn_error(n->cnn) : resnet_error(n->res));
  return !rc;
}

/* The check: dtc's ResNet exports its params and takes two steps on the
 * batch, resnet_torch.py the same from the export. v: dtc's two losses,
 * torch's two, torch's conv GFLOP; false when torch's did not run (dtc's
 * steps are taken anyway). */
static bool check(Nets *n, const char *dir, double v[5]) {
  char ex[] = "/tmp/dtc_bench_conv_st_XXXXXX", xp[] = "/tmp/dtc_bench_conv_x_XXXXXX",
       yp[] = "/tmp/dtc_bench_conv_y_XXXXXX";
  int fe = mkstemp(ex), fx = mkstemp(xp), fy = mkstemp(yp);
  bool ok = fe >= 0 && fx >= 0 && fy >= 0 && !resnet_export(n->res, ex);
  ok = ok && write(fx, n->x, sizeof(float) * RESNET_X_ELEMS) == sizeof(float) * RESNET_X_ELEMS;
  ok = ok && write(fy, n->y, sizeof(int32_t) * RESNET_Y_ELEMS) == sizeof(int32_t) * RESNET_Y_ELEMS;
  for (int s = 0; s < 2; s++) {
    float loss = NAN;
    resnet_train_step(n->res, n->x, RESNET_X_ELEMS, n->y, RESNET_Y_ELEMS, &loss);
    v[s] = loss;
  }
  if (ok) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s '%s/resnet_torch.py' check %s %s %s 2>/dev/null", python(), dir,
             ex, xp, yp);
    FILE *p = popen(cmd, "r");
    ok = p && fscanf(p, "%lf %lf %lf", &v[2], &v[3], &v[4]) == 3;
    ok = p && !pclose(p) && ok;
  }
  int fds[3] = {fe, fx, fy};
  const char *paths[3] = {ex, xp, yp};
  for (int k = 0; k < 3; k++)
    if (fds[k] >= 0) {
      close(fds[k]);
      remove(paths[k]);
    }
  return ok;
}

/* a range of values: the median, least and greatest */
typedef struct Range {
  double mid, lo, hi;
} Range;

/* The range of the n values of v (NAN ones left out); v is not changed. */
static Range range_of(const double *v, int n) {
  double *t = malloc(sizeof(double) * (size_t)n);
  int m = 0;
  for (int k = 0; k < n; k++)
    if (!isnan(v[k]))
      t[m++] = v[k];
  Range r = {NAN, NAN, NAN};
  if (m) {
    r.mid = median(t, m);
    r.lo = t[0];
    r.hi = t[m - 1];
  }
  free(t);
  return r;
}

/* ", KEY: V" with V to 3 decimals, null when it is not a number */
static void print_num(const char *key, const char *suffix, double v) {
  if (isnan(v))
    printf(", \"%s%s\": null", key, suffix);
  else
    printf(", \"%s%s\": %.3f", key, suffix, v);
}

static void print_range(const char *key, Range r) {
  print_num(key, "", r.mid);
  print_num(key, "_min", r.lo);
  print_num(key, "_max", r.hi);
}

/* ---- the parts of a step ---- */

/* Kernel times per step, by name, of a model of net made with DTRT_TRACE
 * set, over 3 steps on n's batch; the kernels' total into *total, the
 * convolutions' into *conv and the steps' own time, per step, into *step.
 * The number of names in part. */
static int traced(const Nets *n, int net, Part *part, int max, double *total, double *conv,
                  double *step) {
  char path[] = "/tmp/dtc_bench_conv_trace_XXXXXX";
  int fd = mkstemp(path), np = 0, steps = 3;
  memset(part, 0, sizeof *part * (size_t)max);
  *total = *conv = *step = 0;
  if (fd < 0)
    return 0;
  close(fd);
  Nets tn = *n;
  tn.cnn = NULL, tn.res = NULL;
  setenv("DTRT_TRACE", path, 1);
  bool made = net == CNN ? !cnn_create(&tn.cnn, 1) : !resnet_create(&tn.res, 1);
  unsetenv("DTRT_TRACE");
  double t0 = now_ms();
  for (int s = 0; made && s < steps; s++)
    made = dtc_step(&tn, net);
  *step = (now_ms() - t0) / steps;
  if (net == CNN)
    cnn_destroy(tn.cnn);
  else
    resnet_destroy(tn.res);
  if (made)
    np = read_trace(path, steps, part, max, total);
  remove(path);
  qsort(part, (size_t)np, sizeof *part, part_by_ms);
  for (int k = 0; k < np; k++)
    if (!strncmp(part[k].name, "conv2d", 6))
      *conv += part[k].ms;
  return np;
}

/* ---- each convolution alone ---- */

/* Time in ms of one run of model m on inputs a, b into r. */
static double model_once(DtModel *m, const float *a, int64_t na, const float *b, int64_t nb,
                         float *r, int64_t nr) {
  const void *in[] = {a, b};
  int64_t nin[] = {na, nb}, nout[] = {nr};
  void *out[] = {r};
  double t0 = now_ms();
  return dtrt_model_forward(m, in, nin, out, nout) ? NAN : now_ms() - t0;
}

/* Times kind of shape s through its model and torch's, reps turns of one
 * each: into dtc[] and torch[]. false when the model failed. */
static bool time_alone(const Shape *s, int kind, Torch *t, int reps, double *dtc, double *torch) {
  int64_t nx = (int64_t)s->n * s->c * s->h * s->w, nw = (int64_t)s->o * s->c * s->k * s->k;
  int64_t ny = (int64_t)s->n * s->o * out_len(s, s->h) * out_len(s, s->w);
  /* the inputs and the result: fwd (x, w) -> y, dx (w, dy) -> x, dw (x, dy) -> w */
  int64_t na = kind == DX ? nw : nx, nb = kind == FWD ? nw : ny;
  int64_t nr = kind == FWD ? ny : kind == DX ? nx : nw;
  float *buf = malloc(sizeof(float) * (size_t)(na + nb + nr));
  unsigned seed = 7;
  fill_uniform(buf, na + nb, &seed, -0.5f, 0.5f);
  DtModel *m = NULL;
  bool ok = buf && !s->create[kind](&m, 1);
  for (int r = -1; ok && r < reps; r++) {
    double td = model_once(m, buf, na, buf + na, nb, buf + na + nb, nr);
    double tt = torch_once(t, (int)(s - shapes) * NKIND + kind);
    ok = !isnan(td);
    if (r >= 0)
      dtc[r] = td, torch[r] = tt;
  }
  if (m)
    dtrt_model_destroy(m);
  free(buf);
  return ok;
}

/* The rounds: reps of dtc's CNN step, torch's, dtc's ResNet step, torch's
 * (the other way round every second round), a peak sample between each two.
 * t[task][r]: the time of task 2 net (dtc's) or 2 net + 1 (torch's) in
 * round r (NAN without torch); near[task][r]: the better peak sample beside
 * it; the best sample of all into *best. false when a dtc step failed. */
enum { NTASK = 2 * NNET };
static bool rounds(Nets *n, Torch *torch, const bool *with_torch, Peak *pk, int reps, double **t,
                   double **near, double *best) {
  double before = peak_again(pk);
  for (int r = 0; r < reps; r++)
    for (int j = 0; j < NTASK; j++) {
      int task = r % 2 ? NTASK - 1 - j : j, net = task / 2;
      if (task % 2 == 0) {
        double t0 = now_ms();
        if (!dtc_step(n, net))
          return false;
        t[task][r] = now_ms() - t0;
      } else {
        t[task][r] = with_torch[net] ? torch_once(&torch[net], 0) : NAN;
      }
      double after = peak_again(pk);
      near[task][r] = before > after ? before : after;
      *best = after > *best ? after : *best;
      before = after;
    }
  return true;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 10;
  if (reps < 3)
    reps = 3;
  const char *dir = argc > 2 ? argv[2] : DTC_BENCH_DIR;
  signal(SIGPIPE, SIG_IGN); /* a torch server that died: its write fails instead */

  Count count[NNET];
  double formula[NNET];
  const char *path[NNET] = {DTC_BENCH_EXAMPLES "/cnn.dt", DTC_BENCH_DIR "/resnet.dt"};
  for (int k = 0; k < NNET; k++) {
    if (!compiler_flops(path[k], &count[k])) {
      fprintf(stderr, "conv: cannot count the FLOPs of %s\n", path[k]);
      return 1;
    }
    formula[k] = formula_flops(k);
    if (count[k].conv < formula[k] * (1 - 1e-9) || count[k].conv > formula[k] * (1 + 1e-9))
      fprintf(stderr,
              "conv: the compiler counts %.6f GFLOP of %s's convolutions, conv_shapes.h %.6f\n",
              count[k].conv / 1e9, net_name[k], formula[k] / 1e9);
  }

  Nets n = {0};
  n.x = malloc(sizeof(float) * RESNET_X_ELEMS);
  n.y = malloc(sizeof(int32_t) * RESNET_Y_ELEMS);
  unsigned seed = 1;
  fill_uniform(n.x, RESNET_X_ELEMS, &seed, 0, 1);
  fill_labels(n.y, RESNET_Y_ELEMS, &seed);
  if (cnn_create(&n.cnn, 1) || resnet_create(&n.res, 1)) {
    fprintf(stderr, "conv: cannot create the models\n");
    return 1;
  }
  double chk[5];
  bool checked = check(&n, dir, chk);
  for (int w = 0; w < 2; w++)
    if (!dtc_step(&n, CNN) || !dtc_step(&n, RESNET))
      return 1;
  DtrtCtx *probe = dtrt_ctx_new();
  int threads = probe ? dtrt_threads(probe) : 1; /* the pool the models' contexts make */
  dtrt_ctx_free(probe);

  char args[8192];
  Torch torch[NNET];
  bool with_torch[NNET];
  snprintf(args, sizeof args, "%d %d %d serve", reps, threads, CNN_DIM_B);
  with_torch[CNN] = torch_start(&torch[CNN], dir, "cnn_torch.py", args);
  with_torch[RESNET] = torch_start(&torch[RESNET], dir, "resnet_torch.py", args);
  double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
  getloadavg(load0, 3);
  Peak pk = peak_measure(15);
  double peak = pk.best, *t[NTASK], *near[NTASK];
  for (int j = 0; j < NTASK; j++) {
    t[j] = malloc(sizeof(double) * (size_t)reps);
    near[j] = malloc(sizeof(double) * (size_t)reps);
  }
  if (!rounds(&n, torch, with_torch, &pk, reps, t, near, &peak))
    return 1;
  getloadavg(load1, 3);
  for (int k = 0; k < NNET; k++)
    torch_stop(&torch[k]);

  Range step[NNET][2]; /* dtc's step, torch's */
  double *ratio = malloc(sizeof(double) * (size_t)reps);
  for (int k = 0; k < NNET; k++) {
    double *td = t[2 * k], *tt = t[2 * k + 1], gflop = count[k].conv / 1e9;
    step[k][0] = range_of(td, reps), step[k][1] = range_of(tt, reps);
    printf("{\"bench\": \"conv_%s\", \"batch\": %d, \"threads\": %d", net_name[k], CNN_DIM_B,
           threads);
    print_range("dtc_ms", step[k][0]);
    printf(", \"conv_gflop\": %.4f, \"conv_gflop_formula\": %.4f, \"matmul_gflop\": %.4f, "
           "\"gflop_rest\": %.4f, \"peak_isa\": \"%s\", \"peak_gflops\": %.2f, \"peak_ms\": %.3f",
           gflop, formula[k] / 1e9, count[k].matmul / 1e9, count[k].rest / 1e9, pk.isa, peak,
           gflop / peak * 1e3);
    for (int r = 0; r < reps; r++)
      ratio[r] = td[r] / (gflop / near[2 * k][r] * 1e3);
    print_range("dtc_over_peak", range_of(ratio, reps));
    printf(", \"dtc_over_best_peak\": %.3f", step[k][0].mid / (gflop / peak * 1e3));
    if (with_torch[k]) {
      print_range("torch_ms", step[k][1]);
      for (int r = 0; r < reps; r++)
        ratio[r] = td[r] / tt[r];
      print_range("dtc_over_torch", range_of(ratio, reps));
      printf(", \"dtc_over_torch_best\": %.3f", step[k][0].lo / step[k][1].lo);
      if (k == RESNET)
        printf(", \"dtc_over_torch_target\": 1.0");
      for (int r = 0; r < reps; r++)
        ratio[r] = tt[r] / (gflop / near[2 * k + 1][r] * 1e3);
      print_range("torch_over_peak", range_of(ratio, reps));
    } else {
      printf(", \"torch\": \"%s/%s_torch.py did not run: is python3-torch installed?\"", dir,
             net_name[k]);
    }
    if (k == RESNET && checked)
      printf(", \"loss_dtc\": %.6f, \"loss_torch\": %.6f, \"loss2_dtc\": %.6f, "
             "\"loss2_torch\": %.6f, \"conv_gflop_torch\": %.4f",
             chk[0], chk[2], chk[1], chk[3], chk[4]);
    else if (k == RESNET)
      printf(", \"loss_dtc\": %.6f, \"loss_torch\": \"the check did not run\"", chk[0]);
    printf(", \"load_before\": %.2f, \"load_after\": %.2f}\n", load0[0], load1[0]);
  }
  fflush(stdout);

  /* the parts of each step, from a trace */
  enum { NPART = 64 };
  Part part[NNET][NPART];
  int np[NNET];
  double kern[NNET], conv[NNET], traced_ms[NNET];
  for (int k = 0; k < NNET; k++)
    np[k] = traced(&n, k, part[k], NPART, &kern[k], &conv[k], &traced_ms[k]);
  cnn_destroy(n.cnn);
  resnet_destroy(n.res);

  /* each convolution alone, against torch's */
  getloadavg(load0, 3);
  char *a = args;
  a += snprintf(a, sizeof args, "%d %d serve", reps, threads);
  for (int i = 0; i < NSHAPE; i++) {
    const Shape *s = &shapes[i];
    a += snprintf(a, sizeof args - (size_t)(a - args), " %d,%d,%d,%d,%d,%d,%d,%d", s->n, s->c, s->h,
                  s->w, s->o, s->k, s->stride, s->pad);
  }
  Torch tl;
  bool with_tl = torch_start(&tl, dir, "conv_torch.py", args);
  double alone[NNET][2] = {{0}}; /* each step's convolutions timed alone: dtc's, torch's */
  double *td = malloc(sizeof(double) * (size_t)reps), *tt = malloc(sizeof(double) * (size_t)reps);
  for (int i = 0; i < NSHAPE; i++) {
    const Shape *s = &shapes[i];
    for (int kind = 0; kind < NKIND; kind++) {
      if (kind == DX && s->first)
        continue;
      if (!time_alone(s, kind, &tl, reps, td, tt)) {
        fprintf(stderr, "conv: cannot run cv_%s_%s\n", s->id, kind_name[kind]);
        return 1;
      }
      double gflop = shape_flops(s) / 1e9;
      Range dtc = range_of(td, reps), tor = range_of(tt, reps);
      printf("{\"bench\": \"conv_layer\", \"id\": \"%s\", \"kind\": \"%s\", \"n\": %d, \"c\": %d, "
             "\"h\": %d, \"w\": %d, \"o\": %d, \"k\": %d, \"stride\": %d, \"padding\": %d, "
             "\"cnn_count\": %d, \"resnet_count\": %d, \"gflop\": %.4f",
             s->id, kind_name[kind], s->n, s->c, s->h, s->w, s->o, s->k, s->stride, s->pad,
             s->count[CNN], s->count[RESNET], gflop);
      print_range("dtc_ms", dtc);
      printf(", \"dtc_over_best_peak\": %.3f", dtc.mid / (gflop / peak * 1e3));
      if (with_tl) {
        print_range("torch_ms", tor);
        for (int r = 0; r < reps; r++)
          ratio[r] = td[r] / tt[r];
        print_range("dtc_over_torch", range_of(ratio, reps));
        printf(", \"dtc_over_torch_best\": %.3f", dtc.lo / tor.lo);
        printf(", \"torch_over_best_peak\": %.3f", tor.mid / (gflop / peak * 1e3));
      }
      printf("}\n");
      fflush(stdout);
      for (int k = 0; k < NNET; k++) {
        alone[k][0] += s->count[k] * dtc.mid;
        alone[k][1] += s->count[k] * tor.mid;
      }
    }
  }
  torch_stop(&tl);
  getloadavg(load1, 3);

  for (int k = 0; k < NNET; k++) {
    double ms = traced_ms[k], peak_ms = count[k].conv / 1e9 / peak * 1e3;
    printf("{\"bench\": \"conv_parts\", \"net\": \"%s\", \"step_ms\": %.3f, \"conv_ms\": %.3f, "
           "\"conv_share\": %.3f, \"conv_over_peak\": %.3f, \"kernels_ms\": %.3f, "
           "\"kernels_share\": %.3f, \"rest_ms\": %.3f, \"rest_share\": %.3f, \"kernels\": {",
           net_name[k], ms, conv[k], conv[k] / ms, conv[k] / peak_ms, kern[k], kern[k] / ms,
           ms - kern[k], (ms - kern[k]) / ms);
    for (int p = 0; p < np[k] && p < 8; p++)
      printf("%s\"%s\": %.3f", p ? ", " : "", part[k][p].name, part[k][p].ms);
    printf("}, \"alone_conv_ms\": %.3f, \"alone_conv_over_peak\": %.3f", alone[k][0],
           alone[k][0] / peak_ms);
    if (with_tl)
      printf(", \"alone_torch_conv_ms\": %.3f, \"alone_conv_over_torch\": %.3f", alone[k][1],
             alone[k][0] / alone[k][1]);
    printf(", \"load_before\": %.2f, \"load_after\": %.2f}\n", load0[0], load1[0]);
  }
  for (int j = 0; j < NTASK; j++) {
    free(t[j]);
    free(near[j]);
  }
  free(ratio);
  free(td);
  free(tt);
  free(n.x);
  free(n.y);
  return 0;
}
