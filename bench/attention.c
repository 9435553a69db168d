/* attention.c: scaled dot-product attention by blocks (libdtrt's
 * sdpa_with_lse, the forward writing its rows' log-sum-exp, and sdpa_grad,
 * as a training step calls them) against PyTorch
 * (attention_torch.py: F.scaled_dot_product_attention where the installed
 * torch has it, else the attention written out, its [T, T] scores stored)
 * and the FP32 peak (peak.h), at B 1, H 4, T 2048 and heads of D 16, 32 and
 * 64 (the small heads of long-context models), causal and not, on two
 * threads each. Each round takes one forward and backward of dtc, one of
 * torch (the other way round every second round), then a peak sample, so
 * that all see the same load.
 *
 * FLOPs are the products an attention must make, 2 D per (query, key) pair
 * seen and product (half the pairs, plus the diagonal, when causal): 2 in
 * the forward, 5 in the backward (q k^T again, dout v^T, p^T dout, ds^T q,
 * ds k), 7 in all, as dtc makes them (the backward's one pass on these
 * shapes, dtrt_sdpa_grad_passes). One JSON line a
 * shape: medians in ms (dtc's forward, backward and both; torch's both),
 * dtc_over_torch (the median over rounds of dtc's time over torch's),
 * dtc_over_peak (dtc's time over peak_ms, the time of the 7 products' FLOPs
 * at the median of the peak samples) and the 1-minute load average before
 * and after. The machine is shared: read
 * the load beside the figures.
 *
 *     build/bench/attention [REPS] [DIR [B H T D [THREADS]]]
 *         (DIR holds attention_torch.py, default the source's bench/;
 *         a shape given runs that D alone; bench/longctx.sh gives its
 *         model's shape on one thread)
 */
#define _GNU_SOURCE /* getloadavg, pipe2, CPU affinity */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "torch.h"
#include "dtrt.h"
#include "peak.h"

/* the shape and threads, or those of the command line */
static int B = 1, H = 4, T = 2048, D = 64, THREADS = 2;

static float *randv(int64_t n, uint64_t *s) {
  float *p = malloc(sizeof(float) * (size_t)n);
  for (int64_t k = 0; k < n; k++) {
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    p[k] = (float)((double)(*s >> 11) / 9007199254740992.0 * 2 - 1);
  }
  return p;
}

/* ---- torch, served (bench/torch_steps.py) ---- */

static double torch_once(Torch *t) {
  double ms;
  if (!t->to || fprintf(t->to, "1\n") < 0 || fflush(t->to) || fscanf(t->from, "%lf", &ms) != 1)
    return NAN;
  return ms;
}

/* ---- dtc ---- */

typedef struct Attn {
  DtrtCtx *ctx;
  DtTensor in[6], out[2], grad;   /* out: the forward's result and lse */
  DtAttrs a;
} Attn;

static bool dtc_fwd(Attn *x) {
  if (dtrt_k_sdpa_with_lse(x->ctx, x->in, 3, x->out, &x->a) == DT_OK)
    return true;
  fprintf(stderr, "attention: %s\n", dtrt_errmsg(x->ctx));
  return false;
}

static bool dtc_bwd(Attn *x) {
  if (dtrt_k_sdpa_grad(x->ctx, x->in, 6, &x->grad, &x->a) == DT_OK)
    return true;
  fprintf(stderr, "attention: %s\n", dtrt_errmsg(x->ctx));
  return false;
}

/* The CPU time of the process (all its threads) in ms. */
static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static double pairs(bool causal) {
  return causal ? (double)T * (T + 1) / 2 : (double)T * T;
}

static int bench(int reps, bool causal, const char *dir, Attn *x) {
  x->a.i[0] = causal;
  char args[128];
  snprintf(args, sizeof args, "%d %d %d %d %d %d", B, H, T, D, causal, THREADS);
  Torch t;
  bool have_torch = torch_start(&t, dir, "attention_torch.py", args);
  double load0[1] = {0}, load1[1] = {0};
  getloadavg(load0, 1);
  Peak p = peak_measure(5);
  double *fwd = malloc(sizeof(double) * (size_t)reps), *bwd = malloc(sizeof(double) * (size_t)reps);
  double *both = malloc(sizeof(double) * (size_t)reps), *tor = malloc(sizeof(double) * (size_t)reps);
  double *ratio = malloc(sizeof(double) * (size_t)reps), *peak = malloc(sizeof(double) * (size_t)reps);
  double *cpu = malloc(sizeof(double) * (size_t)reps);
  for (int w = 0; w < 2; w++)
    if (!dtc_fwd(x) || !dtc_bwd(x))
      return 1;
  int nt = 0;
  for (int r = 0; r < reps; r++) {
    double tt = NAN;
    if (have_torch && r % 2)
      tt = torch_once(&t);
    double c0 = cpu_ms(), t0 = now_ms();
    if (!dtc_fwd(x))
      return 1;
    double t1 = now_ms();
    if (!dtc_bwd(x))
      return 1;
    double t2 = now_ms();
    cpu[r] = cpu_ms() - c0;
    if (have_torch && !(r % 2))
      tt = torch_once(&t);
    fwd[r] = t1 - t0, bwd[r] = t2 - t1, both[r] = t2 - t0;
    if (tt == tt)
      tor[nt] = tt, ratio[nt++] = both[r] / tt;
    peak[r] = peak_again(&p);
  }
  torch_stop(&t);
  getloadavg(load1, 1);
  double gflop = 14.0 * B * H * pairs(causal) * D / 1e9;
  double ms = median(both, reps), pk = median(peak, reps);
  double fwd_ms = median(fwd, reps), bwd_ms = median(bwd, reps), cpu_med = median(cpu, reps);
  double peak_ms = gflop / pk * 1e3;
  printf("{\"bench\": \"attention\", \"b\": %d, \"h\": %d, \"t\": %d, \"d\": %d, \"causal\": %s, "
         "\"threads\": %d, \"reps\": %d, \"gflop\": %.3f, \"dtc_fwd_ms\": %.3f, "
         "\"dtc_bwd_ms\": %.3f, \"dtc_ms\": %.3f, \"dtc_fwd_gflops\": %.2f, "
         "\"dtc_bwd_gflops\": %.2f, \"dtc_gflops\": %.2f, \"peak_gflops\": %.2f, "
         "\"peak_ms\": %.3f, \"dtc_over_peak\": %.2f",
         B, H, T, D, causal ? "true" : "false", THREADS, reps, gflop, fwd_ms, bwd_ms, ms,
         gflop * 2 / 7 / fwd_ms * 1e3, gflop * 5 / 7 / bwd_ms * 1e3, gflop / ms * 1e3, pk, peak_ms,
         ms / peak_ms);
  if (nt)
    printf(", \"torch\": \"%s\", \"torch_ms\": %.3f, \"dtc_over_torch\": %.3f", t.said,
           median(tor, nt), median(ratio, nt));
  else
    printf(", \"torch\": null");
  printf(", \"dtc_cpu_ms\": %.3f, \"dtc_gflops_per_core\": %.2f, \"core_peak_gflops\": %.2f",
         cpu_med, gflop / cpu_med * 1e3, p.best / p.threads);
  printf(", \"load_before\": %.2f, \"load_after\": %.2f}\n", load0[0], load1[0]);
  free(fwd), free(bwd), free(both), free(tor), free(ratio), free(peak), free(cpu);
  return 0;
}

/* One shape, B H T D: causal, then not. */
static int run_shape(int reps, const char *dir) {
  Attn x = {.ctx = dtrt_ctx_new(), .a = {.ni = 1, .nf = 1, .f = {1 / sqrt((double)D)}}};
  if (!x.ctx)
    return 1;
  uint64_t s = 7;
  int64_t n = (int64_t)B * H * T * D;
  DtTensor q = {.data = randv(n, &s), .dtype = DTRT_F32, .rank = 4, .dim = {B, H, T, D}};
  x.in[0] = q;
  x.in[1] = q, x.in[1].data = randv(n, &s);
  x.in[2] = q, x.in[2].data = randv(n, &s);
  x.in[3] = q, x.in[3].data = malloc(sizeof(float) * (size_t)n);
  x.in[4] = q, x.in[4].rank = 3, x.in[4].data = malloc(sizeof(float) * (size_t)(B * H * T));
  x.in[5] = q, x.in[5].data = randv(n, &s);
  x.out[0] = x.in[3], x.out[1] = x.in[4];
  /* dq, dk and dv stacked, [B, 3, H, T, D] (Tq = Tk) */
  x.grad = (DtTensor){.data = malloc(sizeof(float) * (size_t)(3 * n)), .dtype = DTRT_F32,
                      .rank = 5, .dim = {B, 3, H, T, D}};
  int rc = bench(reps, true, dir, &x) || bench(reps, false, dir, &x);
  for (int k = 0; k < 6; k++)
    free(x.in[k].data);
  free(x.grad.data);
  dtrt_ctx_free(x.ctx);
  return rc;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 15;
  const char *dir = argc > 2 ? argv[2] : DTC_BENCH_DIR;
  int *shape[] = {&B, &H, &T, &D, &THREADS};
  for (int k = 0; k < 5 && argc > 3 + k; k++)
    *shape[k] = atoi(argv[3 + k]);
  if (reps < 1 || B < 1 || H < 1 || T < 1 || D < 1 || THREADS < 1 || (argc > 3 && argc < 7) ||
      argc > 8) {
    fprintf(stderr, "usage: attention [REPS] [DIR [B H T D [THREADS]]]\n");
    return 2;
  }
  char threads[16];
  snprintf(threads, sizeof threads, "%d", THREADS);
  setenv("DTRT_NUM_THREADS", threads, argc > 7);
  /* without a shape, the heads of 16, 32 and 64 in turn */
  static const int heads[] = {16, 32, 64};
  int rc = 0;
  for (int k = 0; k < (argc > 3 ? 1 : 3) && !rc; k++) {
    if (argc <= 3)
      D = heads[k];
    rc = run_shape(reps, dir);
  }
  return rc;
}
