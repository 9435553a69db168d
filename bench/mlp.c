/* mlp.c: one training step of the 784-1024-1024-10 MLP at batch 256 compiled by
 * dtc, against the same eight sgemm calls made directly through OpenBLAS (the
 * lower bound) and PyTorch (when python3-torch is installed), and against the
 * machine's FP32 peak (peak.h), in one run. The step's FLOPs are its eight
 * matmuls' (the rest is a few Mflop); peak_ms is their time at the best
 * peak sample of the run. dtc_over_peak is the median over the steps of
 * each step against the peak sampled beside it (the better of the samples
 * just before and after), with its range: on a shared machine the share of
 * it a run gets drifts, and the best sample may come from a quieter moment
 * than the median step (dtc_over_best_peak). Prints one JSON line with the
 * medians, the range of dtc's steps, the ratios and the machine's 1-minute
 * load average before and after. */
#define _GNU_SOURCE
#include "peak.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "mlp_big.h"

enum { B = 256, IN = 784, H = 1024, O = 10 };

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

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 30;
  if (reps < 3)
    reps = 3;
  const char *script = argc > 2 ? argv[2] : "mlp_torch.py";
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
  getloadavg(load1, 3);
  double dtc = median(td, reps), sgemm = median(ts, reps), ratio = median(rd, reps);
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
  if (torch > 0)
    printf(", \"torch_ms\": %.3f, \"dtc_over_torch\": %.3f", torch, dtc / torch);
  printf("}\n");
  mlp_big_destroy(m);
  for (int k = 0; k < 12; k++)
    free(buf[k]);
  free(y);
  free(td);
  free(ts);
  free(rd);
  return 0;
}
