/* mlp.c: one training step of the 784-1024-1024-10 MLP at batch 256 compiled by
 * dtc, against the same eight sgemm calls made directly through OpenBLAS (the
 * lower bound) and PyTorch (when python3-torch is installed), and against the
 * machine's FP32 peak (peak.h), in one run. The step's FLOPs are its eight
 * matmuls' (the rest is a few Mflop); peak_ms is their time at the best
 * peak sample of the run. dtc_over_peak is the median over the steps of
 * each step against the peak sampled beside it (the better of the samples
 * just before and after), with its range: on a shared machine the share of
 * it a run gets drifts, and the best sample may come from a quieter moment
 * than the median step (dtc_over_best_peak).
 *
 * Then the same step from trained weights, as a real run takes it: a new model
 * of the same seed trains TRAIN_STEPS steps (default 1000; 0 leaves this phase
 * out) on Fashion-MNIST (Debian's dataset-fashion-mnist, whose images have
 * this MLP's 784 inputs and 10 classes), batch after batch in the file's
 * order, then REPS more steps on the batches that follow are timed against the
 * peak beside each as above: trained_dtc_ms, trained_dtc_over_peak with its
 * range, and trained_over_fresh (trained_dtc_over_peak over dtc_over_peak).
 * Real images matter: a pixel that is zero in nearly every image gets a zero
 * gradient in its weights step after step, their momentum decays by 0.9 a step
 * and after about 750 steps it is subnormal, which a core without
 * flush-to-zero computes with slowly; the fixed random batch of the fresh
 * steps, trained on, leaves almost none. trained_subnormals is the share of
 * params and optimizer state that are subnormal after training.
 *
 * Prints one JSON line with the medians, the range of dtc's steps, the
 * ratios and the machine's 1-minute load average before and after.
 *
 *     build/bench/mlp [REPS] [bench/mlp_torch.py] [TRAIN_STEPS] */
#define _GNU_SOURCE
#include "peak.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "dtrt.h"
#include "mlp_big.h"

enum { B = 256, IN = 784, H = 1024, O = 10 };

#define DATA "/usr/share/datasets/fashion-mnist"

char *openblas_get_corename(void);   /* OpenBLAS: the kernel set in use */

static float *randn(size_t n, unsigned *s) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++)
    p[i] = (float)((*s = *s * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
  return p;
}

/* Forward x@w1, h1@w2, h2@w3; backward dW3, dH2, dW2, dH1, dW1. */
static void sgemm_step(float **buf) {
  float *x = buf[0], *w1 = buf[1], *w2 = buf[2], *w3 = buf[3], *h1 = buf[4], *h2 = buf[5],
        *o = buf[6], *dw1 = buf[7], *dw2 = buf[8], *dw3 = buf[9], *dh1 = buf[10], *dh2 = buf[11];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, IN, 1, x, IN, w1, H, 0, h1, H);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, H, 1, h1, H, w2, H, 0, h2, H);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, O, H, 1, h2, H, w3, O, 0, o, O);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, O, B, 1, h2, H, o, O, 0, dw3, O);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, O, 1, o, O, w3, O, 0, dh2, H);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, H, B, 1, h1, H, dh2, H, 0, dw2, H);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, H, 1, dh2, H, w2, H, 0, dh1, H);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, H, B, 1, x, IN, dh1, H, 0, dw1, H);
}

/* Debian's python3-torch belongs to /usr/bin/python3, which may not be the
 * first python3 on PATH. */
static double torch_ms(const char *script, int reps) {
  const char *python = getenv("PYTHON");
  if (!python)
    python = access("/usr/bin/python3", X_OK) ? "python3" : "/usr/bin/python3";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s '%s' %d 2>/dev/null", python, script, reps);
  FILE *p = popen(cmd, "r");
  double ms = -1;
  if (p) {
    if (fscanf(p, "%lf", &ms) != 1)
      ms = -1;
    if (pclose(p))
      ms = -1;
  }
  return ms;
}

/* The share of the model's params and optimizer state that is subnormal. */
static double subnormal_state(mlp_big *m) {
  static const char *const name[] = {"w1", "b1", "w2", "b2", "w3", "b3"};
  static const char *const part[] = {"", "__m"};
  return subnormal_share((DtModel *)m, name, 6, part, 2);
}

typedef struct Trained {
  double ms, ms_min, ms_max;                  /* the timed steps */
  double over_peak, over_peak_min, over_peak_max;
  double loss;                                /* of the last step */
  double subnormals;                          /* share, after training */
} Trained;

/* The trained phase: a new model of the same seed as the fresh steps' (so
 * that what it learns does not depend on how many fresh steps there were)
 * trains steps steps on Fashion-MNIST's training set, then reps more on the
 * batches that follow are timed, each against the better of the peak
 * samples beside it, as the fresh steps (*peak: the best sample yet). false
 * when the data cannot be read or a step fails. */
static bool train_then_time(int steps, int reps, const Peak *pk, double flop, double *peak,
                            Trained *out) {
  mlp_big *m = NULL;
  if (mlp_big_create(&m, 1))
    return false;
  DtrtCtx *ctx = dtrt_ctx_new();
  DtData img = {0}, lab = {0};
  bool ok = ctx && !dtrt_read_idx(ctx, DATA "/train-images-idx3-ubyte.gz", &img) &&
            !dtrt_read_idx(ctx, DATA "/train-labels-idx1-ubyte.gz", &lab) &&
            img.t.dtype == DTRT_F32 && img.t.rank == 3 && img.t.dim[1] * img.t.dim[2] == IN &&
            lab.t.dtype == DTRT_I32 && lab.t.rank == 1 && lab.t.dim[0] == img.t.dim[0] &&
            img.t.dim[0] >= B;
  float *x = malloc(sizeof(float) * B * IN);
  int32_t y[B];
  double *td = malloc(sizeof(double) * (size_t)reps), *rd = malloc(sizeof(double) * (size_t)reps);
  ok = ok && x && td && rd;
  int64_t batches = ok ? img.t.dim[0] / B : 1;
  double before = 0;
  float loss = 0;
  for (int s = 0; ok && s < steps + reps; s++) {
    int64_t b = s % batches;
    memcpy(x, (const float *)img.t.data + b * B * IN, sizeof(float) * B * IN);
    memcpy(y, (const int32_t *)lab.t.data + b * B, sizeof y);
    if (s == steps)
      before = peak_again(pk);
    double t0 = now_ms();
    ok = !mlp_big_train_step(m, x, B * IN, y, B, &loss);
    if (s < steps)
      continue;
    int r = s - steps;
    td[r] = now_ms() - t0;
    double after = peak_again(pk), near = before > after ? before : after;
    rd[r] = td[r] / (flop / (near * 1e6));
    *peak = near > *peak ? near : *peak;
    before = peak_again(pk);
  }
  if (ok) {
    out->ms = median(td, reps);
    out->ms_min = td[0];
    out->ms_max = td[reps - 1];
    out->over_peak = median(rd, reps);
    out->over_peak_min = rd[0];
    out->over_peak_max = rd[reps - 1];
    out->loss = loss;
    out->subnormals = subnormal_state(m);
  }
  mlp_big_destroy(m);
  free(x);
  free(td);
  free(rd);
  if (ctx) {
    dtrt_data_free(ctx, &img);
    dtrt_data_free(ctx, &lab);
    dtrt_ctx_free(ctx);
  }
  return ok;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 30;
  if (reps < 3)
    reps = 3;
  const char *script = argc > 2 ? argv[2] : "mlp_torch.py";
  int train_steps = argc > 3 ? atoi(argv[3]) : 1000;
  unsigned seed = 1;
  size_t sizes[12] = {B * IN, IN * H, H * H, H * O, B * H, B * H, B * O,
                      IN * H, H * H, H * O, B * H, B * H};
  float *buf[12];
  for (int k = 0; k < 12; k++)
    buf[k] = randn(sizes[k], &seed);
  int32_t *y = malloc(B * sizeof *y);
  for (int i = 0; i < B; i++)
    y[i] = i % O;

  mlp_big *m;
  if (mlp_big_create(&m, 1)) {
    fprintf(stderr, "mlp: cannot create the model\n");
    return 1;
  }
  double *td = malloc(sizeof(double) * (size_t)reps), *ts = malloc(sizeof(double) * (size_t)reps);
  float loss;
  for (int w = 0; w < 3; w++) {
    sgemm_step(buf);
    if (mlp_big_train_step(m, buf[0], B * IN, y, B, &loss)) {
      fprintf(stderr, "mlp: %s\n", mlp_big_error(m));
      return 1;
    }
  }
  /* Interleaved so that both see the same machine load. */
  double load0[3] = {-1, -1, -1}, load1[3] = {-1, -1, -1};
  getloadavg(load0, 3);
  /* the eight products of sgemm_step */
  double flop = 2.0 * B * ((double)IN * H + (double)H * H + (double)H * O) * 2 +
                2.0 * B * ((double)H * O + (double)H * H);
  Peak pk = peak_measure(15);
  double peak = pk.best;
  /* dtc's step over the peak beside it: the time of the step's FLOPs at the
   * better of the peak samples just before and just after the step, so
   * that both see the same share of the machine */
  double *rd = malloc(sizeof(double) * (size_t)reps), before = peak_again(&pk);
  for (int r = 0; r < reps; r++) {
    double t0 = now_ms();
    mlp_big_train_step(m, buf[0], B * IN, y, B, &loss);
    double t1 = now_ms();
    double after = peak_again(&pk);
    double t2 = now_ms();
    sgemm_step(buf);
    double t3 = now_ms();
    td[r] = t1 - t0;
    ts[r] = t3 - t2;
    double near = before > after ? before : after;
    rd[r] = td[r] / (flop / (near * 1e6));
    peak = near > peak ? near : peak;
    before = peak_again(&pk);
  }
  double dtc = median(td, reps), sgemm = median(ts, reps), ratio = median(rd, reps);
  mlp_big_destroy(m);
  Trained tr = {0};
  bool trained = train_steps > 0 && train_then_time(train_steps, reps, &pk, flop, &peak, &tr);
  getloadavg(load1, 3);
  double peak_ms = flop / (peak * 1e6);
  double torch = torch_ms(script, reps);
  printf("{\"bench\": \"mlp\", \"batch\": %d, \"openblas_core\": \"%s\", \"dtc_ms\": %.3f, "
         "\"dtc_min_ms\": %.3f, \"dtc_max_ms\": %.3f, \"sgemm_ms\": %.3f, "
         "\"dtc_over_sgemm\": %.3f, \"gflop\": %.4f, \"peak_gflops\": %.2f, \"peak_ms\": %.3f, "
         "\"dtc_over_peak\": %.3f, \"dtc_over_peak_min\": %.3f, \"dtc_over_peak_max\": %.3f, "
         "\"dtc_over_best_peak\": %.3f, \"sgemm_over_best_peak\": %.3f, "
         "\"load_before\": %.2f, \"load_after\": %.2f",
         B, openblas_get_corename(), dtc, td[0], td[reps - 1], sgemm, dtc / sgemm, flop / 1e9,
         peak, peak_ms, ratio, rd[0], rd[reps - 1], dtc / peak_ms, sgemm / peak_ms, load0[0],
         load1[0]);
  if (trained)
    printf(", \"trained_steps\": %d, \"trained_loss\": %.4f, \"trained_subnormals\": %.6f, "
           "\"trained_dtc_ms\": %.3f, \"trained_dtc_min_ms\": %.3f, \"trained_dtc_max_ms\": %.3f, "
           "\"trained_dtc_over_peak\": %.3f, \"trained_dtc_over_peak_min\": %.3f, "
           "\"trained_dtc_over_peak_max\": %.3f, \"trained_over_fresh\": %.3f",
           train_steps, tr.loss, tr.subnormals, tr.ms, tr.ms_min, tr.ms_max, tr.over_peak,
           tr.over_peak_min, tr.over_peak_max, tr.over_peak / ratio);
  else if (train_steps > 0)
    printf(", \"trained\": \"did not run: cannot read %s (dataset-fashion-mnist) or a step "
           "failed\"",
           DATA);
  if (torch > 0)
    printf(", \"torch_ms\": %.3f, \"dtc_over_torch\": %.3f", torch, dtc / torch);
  printf("}\n");
  for (int k = 0; k < 12; k++)
    free(buf[k]);
  free(y);
  free(td);
  free(ts);
  free(rd);
  return 0;
}
