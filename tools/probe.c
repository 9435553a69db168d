/* probe.c: dtc-probe, run under mpirun, measures every rank's speed at the
 * kernels a step runs (dtc's GEMM, its elementwise loops, its embedding bag
 * and attention) and its memory, the
 * links between ranks and every collective method of libdtrt over all ranks,
 * and writes them as a dtc cluster block: each figure the median of repeated
 * timings, with their spread. */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dtrt.h"

static const char usage[] =
  "usage: mpirun -n N dtc-probe [options]\n"
  "\n"
  "Measures each rank's speed at the kernels of a step, as dtc generates them for\n"
  "the CPU dtc-probe was built on, on the rank's threads: the GEMM (1024 x 128\n"
  "x 128 and 128 x 128 x 1536: its speed; 128 x 1024 x 1024: the rate at which\n"
  "it streams a weight that spills out of the L2 cache; 192 products of 32^3: a\n"
  "time per product), an elementwise loop (16K and 1M elements: a fixed cost\n"
  "and a bandwidth), an embedding bag reading rows at random from a table of\n"
  "64 MiB (the time of a row beyond its bytes), a training step of a sparse\n"
  "table of that size (a time per id sorted or found) and training steps through a\n"
  "causal attention of 1024 queries at heads of 16 and of 64 and of 32 queries\n"
  "at heads of 32 (attention's speed as a fraction of the GEMM's, a time per\n"
  "score and a time per product of a short block); its memory; groups ranks\n"
  "into nodes by host name, times ping-pong between two ranks of a\n"
  "node and between two nodes, times every collective method of libdtrt over\n"
  "all ranks at 64 KiB and 4 MiB, and writes a cluster block for dtc --cluster.\n"
  "Each figure is the median of --reps samples, written with its spread: how far\n"
  "that median may be off (the interquartile range of the medians of 1000\n"
  "resamples of the samples, over the median; a device's, of its kernels' times\n"
  "over all ranks' taken at the same moments); a device whose spread is above\n"
  "5% gets --reps more samples of each kernel, at most twice; a spread still\n"
  "above 5% is warned about.\n"
  "\n"
  "options:\n"
  "  -o FILE      write the cluster to FILE (default: stdout)\n"
  "  --name NAME  name of the cluster (default: probed)\n"
  "  --reps N     timed repetitions of each measurement (default 20; the kernels'\n"
  "               half at the start, half at the end of the probe)\n"
  "  --help       this text\n";

enum { LAT_BYTES = 8, LAT_TRIPS = 100, BW_BYTES = 4 << 20, BW_TRIPS = 4 };

/* The two sizes every collective is timed at (an all_reduce's buffer, an
 * all_gather's or reduce_scatter's whole tensor, a member's all_to_all input),
 * as bytes and as written in the file's comment. */
static const double coll_bytes[2] = {64 << 10, 4 << 20};
static const char *const coll_size_text[2] = {"64KiB", "4MiB"};

/* At most every method of every collective (dtrt_coll_has_method). */
enum { MAX_COLLS = DT_COLL_COUNT * DTRT_COMM_COUNT };

/* A spread above this is warned about on stderr: the machine was busy, and
 * the planner takes it as noise above its floor (passes/plan.c). */
#define SPREAD_WARN 0.05
/* Rounds of more kernel samples a probe takes while a device's spread is
 * above SPREAD_WARN. */
enum { MORE_ROUNDS = 2 };

typedef struct ProbeLink {
  bool present;
  int a, b;        /* the ranks that measured it */
  double bw, lat;  /* bytes per second, seconds */
  double spread;   /* the larger of the two figures' spreads */
} ProbeLink;

/* A collective timed over all ranks: the median times at coll_bytes and the
 * line t = lat + bytes / bw fitted to them. */
typedef struct ProbeColl {
  int op;          /* DtColl */
  int method;      /* DTRT_COMM_* */
  double t[2];     /* seconds */
  double lat, bw;  /* seconds, bytes per second */
  double spread;   /* the larger of the two sizes' spreads */
} ProbeColl;

/* A rank's roofline: its GEMM's speed, its elementwise loops' fixed cost and
 * bandwidth, and how far its kernels' figures may be off against the other
 * ranks' (relative_spreads). */
typedef struct ProbeSpeed {
  double gflops;   /* FLOPs per second / 1e9 */
  double lat, bw;  /* seconds, bytes read and written per second */
  double spread;
  double row;      /* seconds beyond its bytes for a table row read at random */
  double entry;    /* seconds a sparse kernel takes beyond its rows and bytes for each
                      id sparse_rows sorts (the others' in proportion) */
  double attn;     /* attention's FLOPs' speed over gflops */
  double score;    /* seconds an attention kernel takes beyond its FLOPs a score */
  double attn_block; /* ... and beyond its scores a product of a block not whole */
  int tile_m, tile_n;   /* the micro-tile of the GEMM this rank's build runs */
  double product;  /* seconds a GEMM takes beyond its FLOPs a product of matrices */
  double spill;    /* bytes per second at which a GEMM streams a right operand that
                      spills out of the L2 cache, beyond its FLOPs, 0: not measured */
  int64_t l2;      /* bytes of L2 cache the rank has (a core's, shared by the ranks
                      pinned to it), 0: not known */
} ProbeSpeed;

/* What the writer needs: per rank its speed, memory and node; per node a host. */
typedef struct Probe {
  const char *name;
  int nranks, nnodes, reps;
  int kernel_reps;          /* the kernels' samples, more than reps after extra rounds */
  const ProbeSpeed *speed;  /* [nranks] */
  const double *mem;        /* [nranks], bytes */
  const int *node;          /* [nranks], index into host */
  const char *const *host;  /* [nnodes] */
  ProbeLink intra, inter;
  int ncoll;                /* collectives timed over all nranks ranks */
  const ProbeColl *coll;    /* [ncoll] */
} Probe;

static const char *const reserved[] = {
  "model", "cluster", "parallel", "import", "input", "param", "output", "minimize",
  "with", "init", "node", "device", "link", "collective", "mesh", "shard", "plan", "on",
  "over",
};

/* A cluster name must be a dtc name and not a reserved word. */
static bool probe_valid_name(const char *s) {
  if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
    return false;
  for (const char *p = s; *p; p++)
    if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
          (*p >= '0' && *p <= '9')))
      return false;
  for (size_t i = 0; i < sizeof reserved / sizeof *reserved; i++)
    if (!strcmp(s, reserved[i]))
      return false;
  return true;
}

/* The spread of n sorted samples: the interquartile range over the median,
 * quartiles interpolated between the samples (0 for one sample). Robust to a
 * single outlier, but a shift of half the samples shows in full. */
static double probe_spread(const double *v, int n) {
  double q[3];
  for (int k = 0; k < 3; k++) {
    double at = (n - 1) * (k + 1) / 4.0;
    int lo = (int)at;
    q[k] = lo + 1 < n ? v[lo] + (at - lo) * (v[lo + 1] - v[lo]) : v[lo];
  }
  return q[1] > 0 ? (q[2] - q[0]) / q[1] : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The k-th smallest (from 0) of the sorted samples v taken count[i] times
 * each. */
static double kth_counted(const double *v, const int *count, int k) {
  int i = 0;
  for (int seen = count[0]; seen <= k; seen += count[++i]) {}
  return v[i];
}

/* How far the median of n samples may be off: probe_spread of the medians of
 * MEDIAN_RESAMPLES resamples of the samples (drawn with replacement, by a
 * fixed generator, so the same samples give the same spread). The samples'
 * own spread shrinks about as 1 / sqrt(n) in it; a shift of half the
 * samples, which leaves the median anywhere between the two, does not. */
enum { MEDIAN_RESAMPLES = 1000 };
static double median_spread(const double *v, int n) {
  if (n < 2)
    return 0;
  double *sorted = malloc(sizeof *sorted * n), *med = malloc(sizeof *med * MEDIAN_RESAMPLES);
  int *count = malloc(sizeof *count * n);
  if (!sorted || !med || !count) {  /* no memory for it: the samples' own spread, a bound */
    free(sorted), free(med), free(count);
    return probe_spread(v, n);
  }
  memcpy(sorted, v, sizeof *sorted * n);
  qsort(sorted, n, sizeof *sorted, cmp_double);
  uint64_t x = 0x9e3779b97f4a7c15u;
  for (int b = 0; b < MEDIAN_RESAMPLES; b++) {
    memset(count, 0, sizeof *count * n);
    for (int i = 0; i < n; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;   /* xorshift64 */
      count[x % (uint64_t)n]++;
    }
    double hi = kth_counted(sorted, count, n / 2);
    med[b] = n % 2 ? hi : (kth_counted(sorted, count, n / 2 - 1) + hi) / 2;
  }
  qsort(med, MEDIAN_RESAMPLES, sizeof *med, cmp_double);
  double s = probe_spread(med, MEDIAN_RESAMPLES);
  free(sorted), free(med), free(count);
  return s;
}

/* How far each of nranks ranks' kernel figures may be off against the
 * others': t[(r * nk + k) * reps + i] is rank r's sample i of kernel k, and
 * the ranks take sample i together (between barriers), so each sample's
 * time over the geometric mean of the ranks' times of that sample cancels a
 * drift of the whole machine's speed, which moves every figure alike and no
 * plan's balance; out[r] is the largest over the kernels of median_spread of
 * those quotients. With one rank, its own times' spread. */
static void relative_spreads(const double *t, int nranks, int nk, int reps, double *out) {
  /* q: a rank's quotients; gm: each sample's geometric mean over the ranks
   * (without memory for them, or with one rank, its own times) */
  double *q = nranks > 1 ? malloc(sizeof *q * (size_t)reps * 2) : NULL, *gm = q ? q + reps : NULL;
  for (int r = 0; r < nranks; r++)
    out[r] = 0;
  for (int k = 0; k < nk; k++) {
    for (int i = 0; gm && i < reps; i++) {
      double lg = 0;
      for (int r = 0; r < nranks; r++)
        lg += log(t[((size_t)r * nk + k) * reps + i]);
      gm[i] = exp(lg / nranks);
    }
    for (int r = 0; r < nranks; r++) {
      const double *v = t + ((size_t)r * nk + k) * reps;
      for (int i = 0; q && i < reps; i++)
        q[i] = v[i] / gm[i];
      out[r] = fmax(out[r], median_spread(q ? q : v, reps));
    }
  }
  free(q);
}

/* Values are printed with fixed decimals; a floor keeps each one positive, as
 * the language requires. */
static double at_least(double v, double floor) { return v > floor ? v : floor; }

/* Fits t = lat + bytes / bw to the medians t[k] at bytes[k]: the line
 * through both points. When timing noise makes that meaningless, the line
 * keeps the large size's time: a time that does not grow with the bytes
 * gives lat = t[0] and bw = bytes[1] / t[1] (a bound from above), a
 * negative latency gives lat = 0 and the line through the origin. */
static void probe_fit(const double bytes[2], const double t[2], double *lat, double *bw) {
  double db = bytes[1] - bytes[0], dt = t[1] - t[0];
  if (!(dt > 0)) {
    *lat = t[0];
    *bw = bytes[1] / t[1];
    return;
  }
  *bw = db / dt;
  *lat = t[0] - bytes[0] / *bw;
  if (*lat < 0) {
    *lat = 0;
    *bw = bytes[1] / t[1];
  }
}

/* Fits attention's figures to three kernels' seconds beyond their bytes and
 * fixed costs, t[k] = flops[k] / (attn * gflops) + scores[k] * score +
 * blocks[k] * block: two head sizes at a long sequence, whose blocks are all
 * whole (blocks 0), fix *attn, the fraction of gflops (GFLOP/s), and *score
 * (seconds); where timing noise makes that meaningless (a score or a speed
 * below 0), score is 0 and attn such that the two take their times in all.
 * A short sequence's blocks, none whole, then take what is left of its
 * time, *block (seconds, at least 0). */
static void probe_attn_fit(const double flops[3], const double scores[3], const double blocks[3],
                           const double t[3], double gflops, double *attn, double *score,
                           double *block) {
  double det = flops[0] * scores[1] - flops[1] * scores[0];
  double per_flop = (t[0] * scores[1] - t[1] * scores[0]) / det;  /* seconds */
  *score = (flops[0] * t[1] - flops[1] * t[0]) / det;
  if (!(per_flop > 0) || !(*score >= 0)) {
    per_flop = (t[0] + t[1]) / (flops[0] + flops[1]);
    *score = 0;
  }
  *attn = 1 / (per_flop * gflops * 1e9);
  *block = blocks[2] > 0 ? fmax(0, (t[2] - flops[2] * per_flop - scores[2] * *score) / blocks[2])
                         : 0;
}

/* A bandwidth in GB/s as the file writes it, into buf: with `decimals`
 * decimals from 1 GB/s up, with three significant digits below (0.0119, not
 * 0.01, for a 100 Mbit/s link, which two decimals would round by 20%). */
static const char *gbps_text(char buf[32], double gbps, int decimals) {
  if (gbps >= 1)
    snprintf(buf, 32, "%.*f", decimals, gbps);
  else
    snprintf(buf, 32, "%.3g", gbps);
  return buf;
}

/* Writes the cluster block: nodes in order of their first rank, each rank a
 * device rK; intra and inter links when measured; the collectives timed over
 * all ranks, each with its two median times; every line with its spread.
 * Returns 0, or -1 when the stream fails. */
static int probe_write(FILE *f, const Probe *p) {
  fprintf(f, "# dtc-probe: %d rank%s on %d node%s; dtc's GEMM and elementwise loops on "
          "each rank's threads, and ping-pong, median of %d", p->nranks,
          p->nranks == 1 ? "" : "s", p->nnodes, p->nnodes == 1 ? "" : "s", p->reps);
  if (p->kernel_reps > p->reps)
    fprintf(f, " (the kernels' of %d)", p->kernel_reps);
  fprintf(f, ", spread = (Q3 - Q1) / median of %d resampled medians\n", MEDIAN_RESAMPLES);
  fprintf(f, "cluster %s {\n", p->name);
  for (int n = 0; n < p->nnodes; n++) {
    fprintf(f, "  node n%d {    # host %s\n", n, p->host[n]);
    for (int r = 0; r < p->nranks; r++) {
      const ProbeSpeed *s = &p->speed[r];
      if (p->node[r] != n)
        continue;
      fprintf(f, "    device r%d: cpu(gflops = %.1f, bw = %.2fGB/s, lat = %.2fus, mem = %.2fGiB, "
              "spread = %.3f, row = %.1fns, attn = %.3f, score = %.3fns, product = %.1fns", r,
              at_least(s->gflops, 0.1), at_least(s->bw / 1e9, 0.01), at_least(s->lat * 1e6, 0.01),
              at_least(p->mem[r] / (1 << 30), 0.01), s->spread, at_least(s->row * 1e9, 0.1),
              at_least(s->attn, 0.001), at_least(s->score * 1e9, 0.001),
              at_least(s->product * 1e9, 0.1));
      if (s->attn_block > 0)
        fprintf(f, ", attn_block = %.1fns", s->attn_block * 1e9);
      if (s->entry > 0)
        fprintf(f, ", entry = %.1fns", s->entry * 1e9);
      if (s->spill > 0 && s->l2 > 0)
        fprintf(f, ", spill = %.2fGB/s, l2 = %lldKiB", at_least(s->spill / 1e9, 0.01),
                (long long)(s->l2 + 1023) / 1024);
      if (s->tile_m > 0 && s->tile_n > 0)
        fprintf(f, ", tile_m = %d, tile_n = %d", s->tile_m, s->tile_n);
      fputs(")\n", f);
    }
    fputs("  }\n", f);
  }
  const ProbeLink *links[2] = {&p->intra, &p->inter};
  char buf[32];
  const char *kind[2] = {"intra", "inter"};
  for (int i = 0; i < 2; i++)
    if (links[i]->present)
      fprintf(f, "  link %s(bw = %sGB/s, lat = %.2fus, spread = %.3f)    # ranks %d and %d\n",
              kind[i], gbps_text(buf, at_least(links[i]->bw / 1e9, 0.001), 2),
              at_least(links[i]->lat * 1e6, 0.01), links[i]->spread, links[i]->a, links[i]->b);
  if (p->ncoll)
    fprintf(f, "  # collectives over all %d ranks by libdtrt's methods, t = lat + bytes / bw "
            "fitted to the medians at %s and %s\n", p->nranks, coll_size_text[0],
            coll_size_text[1]);
  for (int k = 0; k < p->ncoll; k++) {
    const ProbeColl *c = &p->coll[k];
    fprintf(f, "  collective %s(method = %s, ranks = %d, lat = %.2fus, bw = %sGB/s, "
            "spread = %.3f)    # %.3fms, %.3fms\n", dtrt_coll_names[c->op],
            dtrt_comm_method_names[c->method], p->nranks, at_least(c->lat * 1e6, 0.01),
            gbps_text(buf, at_least(c->bw / 1e9, 0.001), 3), c->spread, c->t[0] * 1e3,
            c->t[1] * 1e3);
  }
  fputs("}\n", f);
  return ferror(f) ? -1 : 0;
}

/* One warning on f when spread is above SPREAD_WARN; 1 when written, else 0. */
static int warn_spread(FILE *f, const char *what, double spread) {
  if (!(spread > SPREAD_WARN))
    return 0;
  fprintf(f, "dtc-probe: warning: the median of %s spread by %.1f%% (over resamples); the "
          "planner takes that as noise: probe a quieter machine, or with more --reps\n", what,
          spread * 100);
  return 1;
}

/* Warns on f of every figure whose spread is above SPREAD_WARN; returns how
 * many. */
static int probe_warn(FILE *f, const Probe *p) {
  char what[128];
  int n = 0;
  for (int r = 0; r < p->nranks; r++) {
    snprintf(what, sizeof what, "the kernel times of r%d", r);
    n += warn_spread(f, what, p->speed[r].spread);
  }
  const ProbeLink *links[2] = {&p->intra, &p->inter};
  const char *kind[2] = {"intra", "inter"};
  for (int i = 0; i < 2; i++) {
    snprintf(what, sizeof what, "the ping-pong times of link %s", kind[i]);
    n += links[i]->present ? warn_spread(f, what, links[i]->spread) : 0;
  }
  for (int k = 0; k < p->ncoll; k++) {
    snprintf(what, sizeof what, "the times of collective %s by %s", dtrt_coll_names[p->coll[k].op],
             dtrt_comm_method_names[p->coll[k].method]);
    n += warn_spread(f, what, p->coll[k].spread);
  }
  return n;
}

/* A GEMM timed: its median time less its fixed cost and bytes, its FLOPs
 * in whole tiles, the bytes of its right operand (a product's) and its
 * products. */
typedef struct ProbeGemm {
  double left, flops, wbytes;
  int64_t products;
} ProbeGemm;

/* s's GEMM figures from the n timed GEMMs g, as the simulator prices a
 * matmul: its FLOPs at gflops, its right operand's bytes at spill where
 * they are more than l2, and product for each product it makes. gflops
 * such that each single product whose right operand fits takes its time on
 * average over them, the harmonic mean of their FLOPs over their times
 * (their one product each is a few hundred ns against a ms); spill the
 * bytes of the right operands of those that spill over what their times
 * take beyond their FLOPs at gflops (none when l2 is 0, no product fits or
 * none takes longer); product what the batched products take beyond their
 * FLOPs at gflops, a product, 0 or more. */
static void probe_gemm_fit(const ProbeGemm *g, int n, int64_t l2, ProbeSpeed *s) {
  double per_flop = 0;          /* seconds per FLOP, summed over the products that fit */
  double bytes = 0, beyond = 0;  /* the spilling ones' right operands and extra seconds */
  double fixed = 0;
  int singles = 0, batches = 0;
  bool fits = false;
  for (int k = 0; k < n; k++)
    fits |= g[k].products == 1 && g[k].wbytes <= (double)l2;
  if (!fits)   /* no product fits, or no L2 known: one speed for all */
    l2 = 0;
  for (int k = 0; k < n; k++)
    if (g[k].products == 1 && (l2 <= 0 || g[k].wbytes <= (double)l2))
      per_flop += g[k].left / g[k].flops, singles++;
  s->gflops = singles / per_flop / 1e9;
  for (int k = 0; l2 > 0 && k < n; k++)
    if (g[k].products == 1 && g[k].wbytes > (double)l2)
      bytes += g[k].wbytes, beyond += g[k].left - g[k].flops / (s->gflops * 1e9);
  s->spill = beyond > 0 ? bytes / beyond : 0;
  s->l2 = beyond > 0 ? l2 : 0;
  for (int k = 0; k < n; k++)
    if (g[k].products > 1)
      fixed += fmax(0, g[k].left - g[k].flops / (s->gflops * 1e9)) / g[k].products, batches++;
  s->product = batches ? fixed / batches : 0;
}

/* The L2 bytes rank me of n has of a core's l2: shared with every rank of
 * its node pinned to the same one CPU (cpu[r], -1: not pinned to one), as
 * ranks that take turns on a core share its cache; a rank not pinned to
 * one CPU has it all. */
static int64_t shared_l2(int64_t l2, const int *cpu, const int *node, int n, int me) {
  int sharing = 0;
  for (int r = 0; cpu[me] >= 0 && r < n; r++)
    sharing += node[r] == node[me] && cpu[r] == cpu[me];
  return sharing > 1 ? l2 / sharing : l2;
}

#ifndef DTC_PROBE_NO_MAIN

#include "probe_gemm_batched.h"
#include "probe_gemm_deep.h"
#include "probe_gemm_layer.h"
#include "probe_gemm_thin.h"
#include "probe_rows.h"
#include "probe_rows_small.h"
#include "probe_bag.h"
#include "probe_sparse.h"
#include "probe_attn16.h"
#include "probe_attn64.h"
#include "probe_attn32.h"

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The kernels a step runs, each the forward of a model of tools/probe/ that
 * dtc compiled for this machine: one input x, one output y; its FLOPs and
 * the bytes the simulator charges it (passes/sim.c: a product's operands and
 * result, an elementwise loop's results, which are the bytes it reads and
 * writes). */
typedef struct Kernel {
  int (*create)(void **m);
  int (*run)(void *m, const float *x, float *y);
  void (*destroy)(void *m);
  int64_t nx, ny;
  double flops, bytes;
  double scores;   /* an attention's (ir/cost.c) */
  int64_t bh, t, d; /* an attention's batch x heads, sequence and head size: its
                       flops and scores are a pair's, of the pairs its kernels
                       make, sdpa_grad's left out (attn_grad) */
  int64_t m, n, k, products; /* a GEMM's rows, columns and sum of each product, and
                                 its products */
} Kernel;

/* sdpa_grad's FLOPs and scores a pair, as ir/cost.c counts them, in the
 * passes it makes over bh (batch, head) pairs on `threads`: 10 D + 14 and
 * one score in one pass (5 products of D), 14 D + 28 and two in two (7). */
static void attn_grad(const Kernel *k, int threads, double *flops, double *scores,
                      double *products) {
  bool one = dtrt_sdpa_grad_passes(k->bh, threads) == 1;
  *flops = (one ? 10.0 : 14.0) * (double)k->d + (one ? 14 : 28);
  *scores = one ? 1 : 2;
  *products = one ? 5 : 7;
}

#define KERNEL_FNS(name, NAME)                                                 \
  static int name##_make(void **m) { return name##_create((name **)m, 1); }     \
  static int name##_go(void *m, const float *x, float *y) {                     \
    return name##_forward(m, x, NAME##_X_ELEMS, y, NAME##_Y_ELEMS);             \
  }                                                                             \
  static void name##_free(void *m) { name##_destroy(m); }
KERNEL_FNS(probe_gemm_layer, PROBE_GEMM_LAYER)
KERNEL_FNS(probe_gemm_thin, PROBE_GEMM_THIN)
KERNEL_FNS(probe_gemm_deep, PROBE_GEMM_DEEP)
KERNEL_FNS(probe_gemm_batched, PROBE_GEMM_BATCHED)
KERNEL_FNS(probe_rows, PROBE_ROWS)
KERNEL_FNS(probe_rows_small, PROBE_ROWS_SMALL)
/* The ids of the bag and of the sparse step: a pool far larger than one
 * call's, of rows of their tables (of one size), taken in turn, so that each
 * call reads rows the calls before did not leave in the caches. Made by the
 * first kernel that takes it, freed by the last. */
enum { ID_POOL = 1 << 22 };
_Static_assert(PROBE_SPARSE_DIM_R == PROBE_BAG_DIM_R, "the bag's and the sparse step's tables");
static int32_t *id_pool;
static int64_t id_at;
static int id_users;

static int ids_take(void) {
  if (!id_pool) {
    if (!(id_pool = malloc(sizeof *id_pool * ID_POOL)))
      return -1;
    uint64_t x = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < ID_POOL; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      id_pool[i] = (int32_t)(x % PROBE_BAG_DIM_R);
    }
  }
  id_users++;
  return 0;
}
static void ids_drop(void) {
  if (id_users > 0 && !--id_users) {
    free(id_pool);
    id_pool = NULL;
  }
}
static const int32_t *ids_next(int64_t n) {
  if (id_at + n > ID_POOL)
    id_at = 0;
  id_at += n;
  return id_pool + id_at - n;
}

#define POOLED_FNS(name)                                                                    static int name##_make(void **m) {                                                          if (ids_take())                                                                             return -1;                                                                              int rc = name##_create((name **)m, 1);                                                    if (rc)                                                                                     ids_drop();                                                                             return rc;                                                                              }                                                                                         static void name##_free(void *m) {                                                          name##_destroy(m);                                                                        ids_drop();                                                                             }
POOLED_FNS(probe_bag)
POOLED_FNS(probe_sparse)
static int probe_bag_go(void *m, const float *x, float *y) {
  (void)x;
  return probe_bag_forward(m, ids_next(PROBE_BAG_DIM_B), PROBE_BAG_DIM_B, y, PROBE_BAG_Y_ELEMS);
}
/* A step of the sparse table: x its targets y, y its loss. */
static int probe_sparse_go(void *m, const float *x, float *y) {
  return probe_sparse_train_step(m, ids_next(PROBE_SPARSE_IDS_ELEMS), PROBE_SPARSE_IDS_ELEMS, x,
                                 PROBE_SPARSE_Y_ELEMS, y);
}
/* A training step of an attention model: x is its inputs x and y, y its loss. */
#define TRAIN_FNS(name, NAME)                                                          \
  static int name##_make(void **m) { return name##_create((name **)m, 1); }             \
  static int name##_go(void *m, const float *x, float *y) {                             \
    return name##_train_step(m, x, NAME##_X_ELEMS, x + NAME##_X_ELEMS, NAME##_Y_ELEMS, y); \
  }                                                                                     \
  static void name##_free(void *m) { name##_destroy(m); }
TRAIN_FNS(probe_attn16, PROBE_ATTN16)
TRAIN_FNS(probe_attn64, PROBE_ATTN64)
TRAIN_FNS(probe_attn32, PROBE_ATTN32)
#define KERNEL(name, NAME, flops, bytes) \
  {name##_make, name##_go, name##_free, NAME##_X_ELEMS, NAME##_Y_ELEMS, flops, bytes}
#define GEMM(name, NAME, count)                                                   \
  {name##_make, name##_go, name##_free, NAME##_X_ELEMS, NAME##_Y_ELEMS,           \
   2.0 * NAME##_Y_ELEMS * NAME##_DIM_K,                                           \
   4.0 * (NAME##_X_ELEMS + NAME##_W_ELEMS + NAME##_Y_ELEMS),                      \
   .m = NAME##_DIM_M, .n = NAME##_DIM_N, .k = NAME##_DIM_K, .products = count}
#define ROWS(name, NAME) KERNEL(name, NAME, 0, 8.0 * NAME##_X_ELEMS)
/* A causal attention's step, as ir/cost.c counts it a pair: 4 D + 14 FLOPs
 * and a score in sdpa (which writes the rows' lse the backward reads:
 * ir_lse_partner), of the pairs the kernels make (dtrt_sdpa_pairs: blocks
 * of 64 whole), as the simulator counts them, and sdpa_grad's (attn_grad:
 * its passes on the probe's threads); and the bytes the simulator charges
 * the step's kernels (dtc --emit=sim with bytes alone: 21 tensors of x's
 * shape). */
#define ATTN(name, NAME)                                                                \
  {name##_make, name##_go, name##_free, 2 * NAME##_X_ELEMS, 1, 4.0 * NAME##_DIM_D + 14, \
   4.0 * 21 * NAME##_X_ELEMS, 1, (int64_t)NAME##_DIM_B * NAME##_DIM_H, NAME##_DIM_T,    \
   NAME##_DIM_D}
/* the kernels of that step (dtc --emit=sim), each a fixed cost */
enum { ATTN_STEP_KERNELS = 11 };
/* The sparse step as the simulator prices it (dtc --emit=sim of sparse.dt:
 * tests/e2e/probe_counts.sh): 8 kernels, each a fixed cost; the bytes they
 * read and write; the rows they visit at random, the bag's and the update's,
 * a cache line each; and the ids they sort or find, weighed as the
 * simulator weighs them against sparse_rows' (entry_cost in passes/sim.c):
 * sparse_rows 1, sparse_values 20/13 and sparse_sgd 14/13 an id. */
enum { SPARSE_STEP_KERNELS = 8, SPARSE_STEP_BYTES = 279567 };
#define SPARSE_STEP_LINES (2.0 * PROBE_SPARSE_DIM_B)
#define SPARSE_STEP_ENTRIES (PROBE_SPARSE_DIM_B * (1 + 20.0 / 13 + 14.0 / 13))

/* The products first, then the loops, then the bag, the attentions and the
 * sparse table. */
enum {
  K_LAYER, K_THIN, K_DEEP, K_BATCHED, K_GEMMS, K_ROWS_SMALL = K_GEMMS, K_ROWS, K_BAG,
  K_ATTN16, K_ATTN64, K_ATTN32, K_SPARSE, K_COUNT
};
static const Kernel kernels[K_COUNT] = {
  [K_LAYER] = GEMM(probe_gemm_layer, PROBE_GEMM_LAYER, 1),
  [K_THIN] = GEMM(probe_gemm_thin, PROBE_GEMM_THIN, 1),
  [K_DEEP] = GEMM(probe_gemm_deep, PROBE_GEMM_DEEP, 1),
  [K_BATCHED] = GEMM(probe_gemm_batched, PROBE_GEMM_BATCHED, PROBE_GEMM_BATCHED_DIM_BH),
  [K_ROWS_SMALL] = ROWS(probe_rows_small, PROBE_ROWS_SMALL),
  [K_ROWS] = ROWS(probe_rows, PROBE_ROWS),
  /* the simulator's bytes of a bag: its ids, the rows it reads and its result */
  [K_BAG] = {probe_bag_make, probe_bag_go, probe_bag_free, 1, PROBE_BAG_Y_ELEMS, 0,
             4.0 * PROBE_BAG_DIM_B * (1 + 2 * PROBE_BAG_DIM_D)},
  [K_ATTN16] = ATTN(probe_attn16, PROBE_ATTN16),
  [K_ATTN64] = ATTN(probe_attn64, PROBE_ATTN64),
  [K_ATTN32] = ATTN(probe_attn32, PROBE_ATTN32),
  [K_SPARSE] = {probe_sparse_make, probe_sparse_go, probe_sparse_free, PROBE_SPARSE_Y_ELEMS, 1,
                0, SPARSE_STEP_BYTES},
};

/* The seconds of a timed sample: ranks that share a core take turns in
 * slices of a few ms, and a sample must span many of them to show it. */
#define WINDOW_S 50e-3
/* How long after the barrier a sample's window starts: every rank of the
 * node runs the kernel by then. */
#define LEAD_S 10e-3
/* The least time between two readings of the clocks in a sample. */
#define BATCH_S 20e-6

/* A kernel's model and its buffers. */
typedef struct Bench {
  void *m;
  float *x, *y;
} Bench;

/* Makes kernel k's model and buffers and runs it once; 0, or -1. */
static int bench_make(const Kernel *k, Bench *b) {
  *b = (Bench){0};
  if (k->create(&b->m) || !(b->x = malloc((size_t)(k->nx + k->ny) * sizeof *b->x)))
    return -1;
  b->y = b->x + k->nx;
  for (int64_t i = 0; i < k->nx; i++)
    b->x[i] = (float)(i % 17) / 17 - 0.5f;
  return k->run(b->m, b->x, b->y) ? -1 : 0;
}

static void bench_free(const Kernel *k, Bench *b) {
  if (b->m)
    k->destroy(b->m);
  free(b->x);
}

static double seconds(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* This thread's CPU time at wall time at, between two readings (w0, c0)
 * and (w1, c1) taken after runs: spread evenly over the run between them. */
static double cpu_at(double at, double w0, double c0, double w1, double c1) {
  return at <= w0 || w1 <= w0 ? c0 : at >= w1 ? c1 : c0 + (c1 - c0) * (at - w0) / (w1 - w0);
}

/* Runs of kernel k between two readings of the clocks: enough to take
 * BATCH_S, so that reading this thread's CPU time (a system call) adds
 * little to a short kernel's time; from the shortest of three runs. */
static int64_t batch_of(const Bench *b, int k) {
  double shortest = INFINITY;
  for (int i = 0; i < 3; i++) {
    double t0 = seconds(CLOCK_MONOTONIC);
    kernels[k].run(b[k].m, b[k].x, b[k].y);
    shortest = fmin(shortest, seconds(CLOCK_MONOTONIC) - t0);
  }
  return shortest >= BATCH_S ? 1 : (int64_t)ceil(BATCH_S / fmax(shortest, 1e-9));
}

/* (collective) n samples of every kernel into t[k * stride + i], each the
 * seconds of one run; 0, or -1 when a run failed on some rank. A sample is
 * a window of WINDOW_S that begins at the same moment on every rank of the
 * node, on CLOCK_MONOTONIC, which the node's processes share; every rank
 * runs the kernel from the barrier before it until every rank is past it,
 * so ranks that share a core share it for the whole window. The runs the
 * window holds are counted by this thread's CPU time: the CPU time it got
 * in the window over the CPU time of a run (the clocks are read after each
 * batch of runs). A rank that has no core when the window opens gets no
 * CPU time until it has, so its count starts when the window does and not
 * when the rank first runs, as a count of the runs it ends would (the rank
 * that had the core would then count the slice it ran alone, and the ranks
 * of one core together more than the core does). */
static int measure_kernels(Bench *b, int n, double *t, int stride, MPI_Comm node) {
  int ok = 1, all_ok;
  for (int k = 0; k < K_COUNT; k++) {
    int64_t batch = batch_of(b, k);
    for (int i = 0; i < n; i++) {
      MPI_Barrier(MPI_COMM_WORLD);
      double open = seconds(CLOCK_MONOTONIC) + LEAD_S;
      MPI_Allreduce(MPI_IN_PLACE, &open, 1, MPI_DOUBLE, MPI_MAX, node);
      double shut = open + WINDOW_S, w0 = seconds(CLOCK_MONOTONIC), w1;
      double c0 = seconds(CLOCK_THREAD_CPUTIME_ID), c1, c_open = -1, c_shut = 0;
      double c_runs = 0, last = 0;   /* CPU time: of the runs in whole batches in the window; of
                                        the last batch */
      int64_t runs = 0;
      do {
        for (int64_t j = 0; j < batch; j++)
          ok &= !kernels[k].run(b[k].m, b[k].x, b[k].y);
        w1 = seconds(CLOCK_MONOTONIC), c1 = seconds(CLOCK_THREAD_CPUTIME_ID);
        if (c_open < 0 && w1 >= open)
          c_open = cpu_at(open, w0, c0, w1, c1);
        if (w1 >= shut)
          c_shut = cpu_at(shut, w0, c0, w1, c1);
        else if (w0 >= open)
          runs += batch, c_runs += c1 - c0;
        last = c1 - c0;
        w0 = w1, c0 = c1;
      } while (w1 < shut);
      double per_run = runs ? c_runs / (double)runs : last / (double)batch;
      t[k * stride + i] = c_shut > c_open ? WINDOW_S * per_run / (c_shut - c_open)
                                          : (w1 - open) / (double)batch;
      MPI_Request all_done;
      int done = 0;
      MPI_Ibarrier(MPI_COMM_WORLD, &all_done);
      while (MPI_Test(&all_done, &done, MPI_STATUS_IGNORE), !done)
        ok &= !kernels[k].run(b[k].m, b[k].x, b[k].y);
    }
  }
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  return all_ok ? 0 : -1;
}

/* GEMM k's FLOPs in whole tiles of tile_m x tile_n, as the simulator counts
 * them (tile_flops in passes/sim.c). */
static double tiled_flops(const Kernel *k, int tile_m, int tile_n) {
  double m = (double)k->m, n = (double)k->n;
  if (tile_m <= 0 || tile_n <= 0)
    return k->flops;
  return k->flops * (ceil(m / tile_m) * tile_m) * (ceil(n / tile_n) * tile_n) / (m * n);
}

/* The one CPU this rank may run on, -1 when it may run on several (or the
 * system does not say). */
static int pinned_cpu(void) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) || CPU_COUNT(&set) != 1)
    return -1;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set))
      return c;
  return -1;
}

/* The bytes of the L2 cache of a core, 0 when the system does not say. */
static int64_t core_l2(void) {
  long n = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (n > 0)
    return n;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index2/size", "r");
  long long kib = 0;
  char unit = 0;
  if (f && fscanf(f, "%lld%c", &kib, &unit) == 2 && unit == 'K' && kib > 0)
    n = (long)(kib * 1024);
  if (f)
    fclose(f);
  return n > 0 ? n : 0;
}

/* The roofline of reps samples of each kernel in t[k * reps + i], as the
 * simulator prices a kernel, lat + FLOPs / gflops + bytes / bw: lat and bw
 * the line through the elementwise loop's two sizes; the GEMMs' figures
 * from what is left of their median times (probe_gemm_fit), their FLOPs in
 * whole tiles. */
static ProbeSpeed roofline(double *t, int reps, int threads, int64_t l2) {
  ProbeSpeed s = {.tile_m = PROBE_GEMM_LAYER_GEMM_TILE_M, .tile_n = PROBE_GEMM_LAYER_GEMM_TILE_N};
  double med[K_COUNT];
  for (int k = 0; k < K_COUNT; k++)
    med[k] = median(t + k * reps, reps);
  double bytes[2] = {kernels[K_ROWS_SMALL].bytes, kernels[K_ROWS].bytes};
  probe_fit(bytes, (double[]){med[K_ROWS_SMALL], med[K_ROWS]}, &s.lat, &s.bw);
  ProbeGemm g[K_GEMMS];
  for (int k = 0; k < K_GEMMS; k++) {
    const Kernel *kn = &kernels[k];
    g[k] = (ProbeGemm){fmax(med[k] - s.lat - kn->bytes / s.bw, med[k] / 2),
                       tiled_flops(kn, s.tile_m, s.tile_n),
                       (double)kn->k * (double)kn->n * sizeof(float), kn->products};
  }
  probe_gemm_fit(g, K_GEMMS, l2, &s);
  s.row = fmax(0, med[K_BAG] - s.lat - kernels[K_BAG].bytes / s.bw) / PROBE_BAG_DIM_B;
  s.entry = fmax(0, med[K_SPARSE] - SPARSE_STEP_KERNELS * s.lat - kernels[K_SPARSE].bytes / s.bw -
                        SPARSE_STEP_LINES * s.row) /
            SPARSE_STEP_ENTRIES;
  double aflops[3], scores[3], blocks[3], aleft[3];
  for (int j = 0; j < 3; j++) {
    const Kernel *kn = &kernels[K_ATTN16 + j];
    double pairs = (double)kn->bh * dtrt_sdpa_pairs(kn->t, kn->t, true);
    double gf, gs, gp;
    attn_grad(kn, threads, &gf, &gs, &gp);
    aflops[j] = pairs * (kn->flops + gf), scores[j] = pairs * (kn->scores + gs);
    blocks[j] = (double)kn->bh * dtrt_sdpa_blocks(kn->t, kn->t, true) * (2 + gp);
    aleft[j] = fmax(med[K_ATTN16 + j] - ATTN_STEP_KERNELS * s.lat - kn->bytes / s.bw,
                    med[K_ATTN16 + j] / 2);
  }
  probe_attn_fit(aflops, scores, blocks, aleft, s.gflops, &s.attn, &s.score, &s.attn_block);
  return s;
}

/* This node's available memory in bytes: MemAvailable, else physical pages. */
static double node_memory(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  unsigned long long kib = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
      break;
  if (f)
    fclose(f);
  if (kib)
    return (double)kib * 1024;
  long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  return pages > 0 && size > 0 ? (double)pages * size : 0;
}

/* (collective) Ping-pong between ranks x and y; the others only wait. Sets the
 * one-way latency of an 8-byte message and the bandwidth of 4 MiB messages,
 * each the median of reps samples, and the larger of their spreads. */
static int measure_link(int x, int y, int reps, double *t, ProbeLink *out) {
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  char *buf = malloc(BW_BYTES);
  int ok = buf != NULL, all_ok;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all_ok) {
    free(buf);
    return -1;
  }
  memset(buf, 1, BW_BYTES);
  double res[3] = {0, 0, 0};
  if (me == x || me == y) {
    int peer = me == x ? y : x;
    int sizes[2] = {LAT_BYTES, BW_BYTES}, trips[2] = {LAT_TRIPS, BW_TRIPS};
    for (int k = 0; k < 2; k++) {
      for (int i = -1; i < reps; i++) {  /* sample -1 warms up */
        double t0 = MPI_Wtime();
        for (int j = 0; j < trips[k]; j++) {
          if (me == x) {
            MPI_Send(buf, sizes[k], MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, sizes[k], MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          } else {
            MPI_Recv(buf, sizes[k], MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, sizes[k], MPI_BYTE, peer, 0, MPI_COMM_WORLD);
          }
        }
        if (i >= 0)
          t[i] = (MPI_Wtime() - t0) / trips[k];  /* one round trip */
      }
      res[k] = median(t, reps);
      res[2] = fmax(res[2], median_spread(t, reps));
    }
  }
  free(buf);
  MPI_Bcast(res, 3, MPI_DOUBLE, x, MPI_COMM_WORLD);
  *out = (ProbeLink){.present = true, .a = x, .b = y, .lat = res[0] / 2,
                     .bw = 2.0 * BW_BYTES / res[1], .spread = res[2]};
  return 0;
}

/* The most ranks whose collectives the probe times: an all_to_all's
 * attributes (axis, din, dout, a block length per member, the method) must
 * fit DtAttrs. */
enum { MAX_COLL_RANKS = DTRT_MAX_IATTRS - 4 };

/* (collective) One call of collective op by method over all k ranks through
 * libdtrt's kernel, on `bytes` as coll_bytes defines them (rounded down to a
 * multiple of 4k), even blocks; x and y hold coll_bytes[1] bytes each. */
static DtStatus coll_call(DtrtCtx *ctx, int op, int method, double bytes, int k, float *x,
                          float *y) {
  int64_t n = (int64_t)bytes / 4 / k * k, part = n / k;
  DtTensor whole = {.dtype = DTRT_F32, .rank = 1, .dim = {n}};
  DtTensor block = {.dtype = DTRT_F32, .rank = 1, .dim = {part}};
  DtAttrs a = {.i = {0, 0}, .ni = op == DT_COLL_ALL_REDUCE ? 1 : 2};  /* axis 0, dim (din) 0 */
  if (op == DT_COLL_ALL_TO_ALL)
    a.i[a.ni++] = 1;  /* dout */
  for (int m = 0; op != DT_COLL_ALL_REDUCE && m < k; m++)
    a.i[a.ni++] = part;
  a.i[a.ni++] = method;
  switch (op) {
  case DT_COLL_ALL_REDUCE:
    whole.data = x, block = whole, block.data = y;
    return dtrt_k_all_reduce(ctx, &whole, 1, &block, &a);
  case DT_COLL_ALL_GATHER:
    block.data = x, whole.data = y;
    return dtrt_k_all_gather(ctx, &block, 1, &whole, &a);
  case DT_COLL_REDUCE_SCATTER:
    whole.data = x, block.data = y;
    return dtrt_k_reduce_scatter(ctx, &whole, 1, &block, &a);
  default: {
    /* f32[k, n] split by rows in, by columns out: a member sends its row */
    DtTensor in = {.data = x, .dtype = DTRT_F32, .rank = 2, .dim = {1, n}};
    DtTensor out = {.data = y, .dtype = DTRT_F32, .rank = 2, .dim = {k, part}};
    return dtrt_k_all_to_all(ctx, &in, 1, &out, &a);
  }
  }
}

/* (collective) The median over reps of the slowest rank's time of one call,
 * after one untimed call, and their spread into *spread; -1 when a call failed
 * on any rank (each failing rank reports its error). */
static double time_coll(DtrtCtx *ctx, int op, int method, double bytes, float *x, float *y,
                        int reps, double *t, double *spread) {
  int k = dtrt_nranks(ctx);
  for (int i = -1; i < reps; i++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    DtStatus s = coll_call(ctx, op, method, bytes, k, x, y);
    double mine[2] = {MPI_Wtime() - t0, s != DT_OK}, all[2];
    if (s)
      fprintf(stderr, "dtc-probe: error: rank %d: %s\n", dtrt_rank(ctx), dtrt_errmsg(ctx));
    MPI_Allreduce(mine, all, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (all[1] > 0)
      return -1;
    if (i >= 0)
      t[i] = all[0];
  }
  double med = median(t, reps);
  *spread = median_spread(t, reps);
  return med;
}

/* (collective) Times every method of every collective over all ranks at
 * both sizes and fits each, into out[MAX_COLLS]. Returns how many, or -1
 * (out of memory, a kernel's error). */
static int measure_colls(DtrtCtx *ctx, int reps, double *t, ProbeColl *out) {
  size_t n = (size_t)coll_bytes[1] / 4;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  int ok = x && y, all_ok;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  int nc = all_ok ? 0 : -1;
  for (size_t i = 0; all_ok && i < n; i++)
    x[i] = (float)(i % 13) - 6;  /* small integers: no overflow, no denormals */
  for (int op = 0; nc >= 0 && op < DT_COLL_COUNT; op++)
    for (int j = 0; nc >= 0 && j < DTRT_COMM_COUNT; j++) {
      if (!dtrt_coll_has_method((DtColl)op, j))
        continue;
      ProbeColl c = {.op = op, .method = j};
      for (int z = 0; z < 2 && nc >= 0; z++) {
        double spread;
        if ((c.t[z] = time_coll(ctx, op, c.method, coll_bytes[z], x, y, reps, t, &spread)) < 0)
          nc = -1;
        c.spread = fmax(c.spread, spread);
      }
      if (nc >= 0) {
        probe_fit(coll_bytes, c.t, &c.lat, &c.bw);
        out[nc++] = c;
      }
    }
  free(x), free(y);
  return nc;
}

typedef struct Args {
  const char *out, *name;
  int reps;
  bool help;
} Args;

/* Parses argv into *a; returns an error message or NULL. */
static const char *parse_args(int argc, char **argv, Args *a, char *msg, size_t cap) {
  *a = (Args){.name = "probed", .reps = 20};
  for (int i = 1; i < argc; i++) {
    const char *s = argv[i];
    bool has_value = i + 1 < argc;
    if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
      a->help = true;
    } else if (!strcmp(s, "-o") || !strcmp(s, "--name") || !strcmp(s, "--reps")) {
      if (!has_value) {
        snprintf(msg, cap, "option '%s' needs a value", s);
        return msg;
      }
      const char *v = argv[++i];
      if (!strcmp(s, "-o")) {
        a->out = v;
      } else if (!strcmp(s, "--name")) {
        if (!probe_valid_name(v)) {
          snprintf(msg, cap, "cluster name '%s' is not a dtc name (letters, digits, '_'; "
                   "not a reserved word)", v);
          return msg;
        }
        a->name = v;
      } else {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || *end || end == v || n < 1 || n > 10000) {
          snprintf(msg, cap, "--reps takes a whole number from 1 to 10000, not '%s'", v);
          return msg;
        }
        a->reps = (int)n;
      }
    } else {
      snprintf(msg, cap, "unknown argument '%s' (see --help)", s);
      return msg;
    }
  }
  return NULL;
}

/* Ends the run: finalizes MPI and gives the exit status. */
static int finish(int status) {
  MPI_Finalize();
  return status;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int me, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  Args args;
  char msg[256];
  if (parse_args(argc, argv, &args, msg, sizeof msg)) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: %s\n", msg);
    return finish(1);
  }
  if (args.help) {
    if (me == 0)
      fputs(usage, stdout);
    return finish(0);
  }
  /* Rank 0 opens the output first, so a bad path fails before the measuring. */
  FILE *out = stdout;
  int opened = 1;
  if (me == 0 && args.out && !(out = dtrt_open_output(args.out))) {
    fprintf(stderr, "dtc-probe: error: cannot write '%s': %s\n", args.out,
            errno == EINVAL ? "not a regular file" : strerror(errno));
    opened = 0;
  }
  MPI_Bcast(&opened, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!opened)
    return finish(1);

  int reps = args.reps;
  char (*hosts)[MPI_MAX_PROCESSOR_NAME] = calloc(nranks, sizeof *hosts);
  ProbeSpeed *speed = calloc(nranks, sizeof *speed);
  double *mem = calloc(nranks, sizeof *mem);
  /* the kernels' samples, cap a kernel: reps, and MORE_ROUNDS more rounds of
   * reps where a device's spread stays above SPREAD_WARN */
  int cap = (1 + MORE_ROUNDS) * reps;
  double *t = calloc(reps, sizeof *t), *tk = calloc((size_t)K_COUNT * cap, sizeof *tk);
  int *node = calloc(nranks, sizeof *node);
  const char **host = calloc(nranks, sizeof *host);
  int *cpus = calloc(nranks, sizeof *cpus);
  Bench bench[K_COUNT] = {0};
  int ok = hosts && speed && mem && t && tk && node && host && cpus, all_ok;
  for (int k = 0; ok && k < K_COUNT; k++)
    ok = !bench_make(&kernels[k], &bench[k]);
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all_ok) {
    fprintf(stderr, "dtc-probe: error: rank %d: the kernels could not be made or run: %s\n", me,
            ok ? "on another rank" : probe_rows_error(NULL));
    return finish(1);
  }

  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len;
  MPI_Get_processor_name(name, &len);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  int nnodes = 0;
  for (int r = 0; r < nranks; r++) {
    int n = 0;
    while (n < nnodes && strcmp(host[n], hosts[r]))
      n++;
    if (n == nnodes)
      host[nnodes++] = hosts[r];
    node[r] = n;
  }
  int on_my_node = 0;
  for (int r = 0; r < nranks; r++)
    on_my_node += node[r] == node[me];
  /* libdtrt's hierarchical all-reduce takes its nodes from MPI, not from the
   * host names: say so when the two differ. */
  MPI_Comm shared;
  int shared_rank, shared_nodes;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &shared);
  MPI_Comm_rank(shared, &shared_rank);
  int leader = shared_rank == 0;
  MPI_Allreduce(&leader, &shared_nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0 && shared_nodes != nnodes)
    fprintf(stderr, "dtc-probe: warning: the host names make %d node%s, MPI_COMM_TYPE_SHARED "
            "makes %d; libdtrt's hierarchical all-reduce takes the nodes of "
            "MPI_COMM_TYPE_SHARED\n", nnodes, nnodes == 1 ? "" : "s", shared_nodes);

  /* The kernels' samples in two halves, at the start and at the end of the
   * probe, so a speed that drifts while it runs widens the spread. */
  int half = (reps + 1) / 2;
  if (measure_kernels(bench, half, tk, cap, shared)) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: a kernel failed\n");
    return finish(1);
  }
  double my_mem = node_memory() / on_my_node;
  MPI_Allgather(&my_mem, 1, MPI_DOUBLE, mem, 1, MPI_DOUBLE, MPI_COMM_WORLD);
  for (int r = 0; r < nranks; r++)  /* one reading per node: its first rank's */
    for (int s = 0; s < r; s++)
      if (node[s] == node[r]) {
        mem[r] = mem[s];
        break;
      }

  /* intra: the first two ranks of the first node holding two; inter: the
   * first ranks of nodes 0 and 1. Every rank picks the same pairs. */
  Probe p = {.name = args.name, .nranks = nranks, .nnodes = nnodes, .reps = reps,
             .speed = speed, .mem = mem, .node = node, .host = host};
  int x = -1, y = -1;
  for (int r = 0; r < nranks && y < 0; r++)
    for (int s = r + 1; s < nranks && y < 0; s++)
      if (node[r] == node[s])
        x = r, y = s;
  int status = 0;
  if (y >= 0)
    status |= measure_link(x, y, reps, t, &p.intra);
  if (nnodes > 1) {
    int first1 = 0;
    while (node[first1] != 1)
      first1++;
    status |= measure_link(0, first1, reps, t, &p.inter);
  }
  if (status) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: out of memory for the link buffers\n");
    return finish(1);
  }

  /* libdtrt joins the MPI this program started and leaves it running. */
  DtrtCtx *ctx = dtrt_ctx_new();
  ok = ctx && !dtrt_comm_init(ctx);
  if (!ok)
    fprintf(stderr, "dtc-probe: error: rank %d: %s\n", me,
            ctx ? dtrt_errmsg(ctx) : "out of memory");
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all_ok)
    return finish(1);
  ProbeColl coll[MAX_COLLS];
  if (nranks > MAX_COLL_RANKS && me == 0)
    fprintf(stderr, "dtc-probe: warning: collectives are timed on at most %d ranks, not %d; "
            "the file has none\n", MAX_COLL_RANKS, nranks);
  bool timed = nranks >= 2 && nranks <= MAX_COLL_RANKS;
  if (timed && (p.ncoll = measure_colls(ctx, reps, t, coll)) < 0) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: the collectives could not be timed\n");
    return finish(1);
  }
  p.coll = coll;
  if (measure_kernels(bench, reps - half, tk + half, cap, shared)) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: a kernel failed\n");
    return finish(1);
  }
  double *all = malloc(sizeof *all * (size_t)nranks * K_COUNT * cap), *spreads = malloc(
      sizeof *spreads * (size_t)nranks), *mine = malloc(sizeof *mine * (size_t)K_COUNT * cap);
  int have = all && spreads && mine, all_have;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  if (!all_have) {
    if (me == 0)
      fprintf(stderr, "dtc-probe: error: out of memory\n");
    free(all), free(spreads), free(mine);
    return finish(1);
  }
  /* A device whose times spread above SPREAD_WARN against the others' (a
   * passing disturbance, most often) gets reps more samples of every
   * kernel on every rank, at most MORE_ROUNDS times; the figures are taken
   * over all of them. Every rank decides on the same gathered times. */
  int n = reps;
  for (int round = 0;; round++) {
    for (int k = 0; k < K_COUNT; k++)
      memcpy(mine + (size_t)k * n, tk + (size_t)k * cap, sizeof *mine * (size_t)n);
    MPI_Allgather(mine, K_COUNT * n, MPI_DOUBLE, all, K_COUNT * n, MPI_DOUBLE, MPI_COMM_WORLD);
    relative_spreads(all, nranks, K_COUNT, n, spreads);
    int worst = 0;
    for (int r = 1; r < nranks; r++)
      worst = spreads[r] > spreads[worst] ? r : worst;
    if (round == MORE_ROUNDS || !(spreads[worst] > SPREAD_WARN))
      break;
    if (me == 0)
      fprintf(stderr, "dtc-probe: the kernel times of r%d spread by %.1f%% against the other "
              "ranks'; timing %d more samples of each kernel\n", worst, 100 * spreads[worst],
              reps);
    if (measure_kernels(bench, reps, tk + n, cap, shared)) {
      if (me == 0)
        fprintf(stderr, "dtc-probe: error: a kernel failed\n");
      return finish(1);
    }
    n += reps;
  }
  p.kernel_reps = n;
  int my_cpu = pinned_cpu();
  MPI_Allgather(&my_cpu, 1, MPI_INT, cpus, 1, MPI_INT, MPI_COMM_WORLD);
  int64_t l2 = shared_l2(core_l2(), cpus, node, nranks, me);
  ProbeSpeed my = roofline(mine, n, dtrt_threads(ctx), l2); /* the models' pool, shared */
  my.spread = spreads[me];
  free(mine);
  free(all), free(spreads);
  MPI_Allgather(&my, sizeof my, MPI_BYTE, speed, sizeof my, MPI_BYTE, MPI_COMM_WORLD);

  if (me == 0) {
    probe_warn(stderr, &p);
    for (int r = 1; r < nranks; r++)
      if (node[r] < node[r - 1]) {
        fprintf(stderr, "dtc-probe: warning: ranks are not grouped by node (rank %d on '%s' "
                "follows rank %d on '%s'), so the devices are not listed in rank order; "
                "name them in a mesh's 'over' list\n", r, hosts[r], r - 1, hosts[r - 1]);
        break;
      }
    if (probe_write(out, &p) || (out != stdout ? fclose(out) : fflush(out))) {
      fprintf(stderr, "dtc-probe: error: cannot write '%s': %s\n",
              args.out ? args.out : "stdout", strerror(errno));
      status = 1;
    }
  }
  MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Comm_free(&shared);
  dtrt_ctx_free(ctx);
  for (int k = 0; k < K_COUNT; k++)
    bench_free(&kernels[k], &bench[k]);
  free(hosts), free(speed), free(mem), free(t), free(tk), free(node), free(host), free(cpus);
  return finish(status ? 1 : 0);
}

#endif
