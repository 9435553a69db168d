/* test_probe.c: dtc-probe's cluster writer, its warnings, name check,
 * collective fit and spread (tools/probe.c, included without its main) on
 * fixed measurements, against hand-checked text and numbers. */
#define DTC_PROBE_NO_MAIN
#include "../../tools/probe.c"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

/* The writer's output for p, in a malloc'd string. */
static char *written(const Probe *p) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  assert_non_null(f);
  assert_int_equal(probe_write(f, p), 0);
  assert_int_equal(fclose(f), 0);
  return text;
}

/* Two nodes, ranks grouped by node, both links; rounding to the printed
 * decimals; attn_block, entry, spill and l2 only where measured. */
static void two_nodes(void **state) {
  (void)state;
  ProbeSpeed speed[3] = {
      {.gflops = 80.04, .lat = 1.234e-6, .bw = 20.456e9, .spread = 0.0123, .row = 21.46e-9,
       .attn = 0.7126, .score = 0.4567e-9, .tile_m = 14, .tile_n = 32, .product = 432.14e-9,
       .spill = 12.345e9, .l2 = 1 << 20, .attn_block = 494.66e-9, .entry = 14.54e-9},
      {.gflops = 40.06, .lat = 2e-6, .bw = 10e9, .spread = 0.25, .row = 40e-9, .attn = 1.25,
       .score = 1e-9, .tile_m = 6, .tile_n = 16},
      {.gflops = 39.95, .lat = 0.5e-6, .bw = 5.555e9}};
  double mem[3] = {8.0 * (1 << 30), 8.0 * (1 << 30), 3.5 * (1 << 30)};
  int node[3] = {0, 0, 1};
  const char *host[2] = {"ws", "pi.lan"};
  Probe p = {.name = "lab", .nranks = 3, .nnodes = 2, .reps = 20, .speed = speed,
             .mem = mem, .node = node, .host = host,
             .intra = {.present = true, .a = 0, .b = 1, .bw = 10.456e9, .lat = 0.414e-6,
                       .spread = 0.0456},
             .inter = {.present = true, .a = 0, .b = 2, .bw = 0.125e9, .lat = 50e-6,
                       .spread = 0.1}};
  char *text = written(&p);
  assert_string_equal(text,
    "# dtc-probe: 3 ranks on 2 nodes; dtc's GEMM and elementwise loops on each "
    "rank's threads, and ping-pong, median of 20, spread = (Q3 - Q1) / median of 1000 resampled medians\n"
    "cluster lab {\n"
    "  node n0 {    # host ws\n"
    "    device r0: cpu(gflops = 80.0, bw = 20.46GB/s, lat = 1.23us, mem = 8.00GiB, "
    "spread = 0.012, row = 21.5ns, attn = 0.713, score = 0.457ns, product = 432.1ns, "
    "attn_block = 494.7ns, entry = 14.5ns, spill = 12.35GB/s, l2 = 1024KiB, tile_m = 14, "
    "tile_n = 32)\n"
    "    device r1: cpu(gflops = 40.1, bw = 10.00GB/s, lat = 2.00us, mem = 8.00GiB, "
    "spread = 0.250, row = 40.0ns, attn = 1.250, score = 1.000ns, product = 0.1ns, "
    "tile_m = 6, tile_n = 16)\n"
    "  }\n"
    "  node n1 {    # host pi.lan\n"
    "    device r2: cpu(gflops = 40.0, bw = 5.55GB/s, lat = 0.50us, mem = 3.50GiB, "
    "spread = 0.000, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "  }\n"
    "  link intra(bw = 10.46GB/s, lat = 0.41us, spread = 0.046)    # ranks 0 and 1\n"
    "  link inter(bw = 0.125GB/s, lat = 50.00us, spread = 0.100)    # ranks 0 and 2\n"
    "}\n");
  free(text);
}

/* One rank: no links. Values too small to print become the smallest printed
 * value, so the file stays valid. Ranks interleaved over nodes are listed
 * node by node; kernels given more samples than --reps say how many. */
static void one_rank_and_floors(void **state) {
  (void)state;
  ProbeSpeed speed[1] = {{.gflops = 0.01, .bw = 1e6}};
  double mem[1] = {1000};
  int node[1] = {0};
  const char *host[1] = {"vm"};
  Probe p = {.name = "probed", .nranks = 1, .nnodes = 1, .reps = 1, .speed = speed,
             .mem = mem, .node = node, .host = host};
  char *text = written(&p);
  assert_string_equal(text,
    "# dtc-probe: 1 rank on 1 node; dtc's GEMM and elementwise loops on each "
    "rank's threads, and ping-pong, median of 1, spread = (Q3 - Q1) / median of 1000 resampled medians\n"
    "cluster probed {\n"
    "  node n0 {    # host vm\n"
    "    device r0: cpu(gflops = 0.1, bw = 0.01GB/s, lat = 0.01us, mem = 0.01GiB, "
    "spread = 0.000, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "  }\n"
    "}\n");
  free(text);

  ProbeSpeed s3[3] = {{.gflops = 10, .lat = 1e-6, .bw = 1e9, .spread = 0.1},
                      {.gflops = 20, .lat = 1e-6, .bw = 1e9, .spread = 0.2},
                      {.gflops = 30, .lat = 1e-6, .bw = 1e9, .spread = 0.3}};
  double m3[3] = {1 << 30, 1 << 30, 1 << 30};
  int n3[3] = {0, 1, 0};
  const char *h2[2] = {"a", "b"};
  Probe q = {.name = "mixed", .nranks = 3, .nnodes = 2, .reps = 5, .kernel_reps = 15,
             .speed = s3, .mem = m3,
             .node = n3, .host = h2,
             .intra = {.present = true, .a = 0, .b = 2, .bw = 1e9, .lat = 1e-9},
             .inter = {.present = true, .a = 0, .b = 1, .bw = 1e6, .lat = 1e-3}};
  text = written(&q);
  assert_string_equal(text,
    "# dtc-probe: 3 ranks on 2 nodes; dtc's GEMM and elementwise loops on each "
    "rank's threads, and ping-pong, median of 5 (the kernels' of 15), spread = (Q3 - Q1) / "
    "median of 1000 resampled medians\n"
    "cluster mixed {\n"
    "  node n0 {    # host a\n"
    "    device r0: cpu(gflops = 10.0, bw = 1.00GB/s, lat = 1.00us, mem = 1.00GiB, "
    "spread = 0.100, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "    device r2: cpu(gflops = 30.0, bw = 1.00GB/s, lat = 1.00us, mem = 1.00GiB, "
    "spread = 0.300, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "  }\n"
    "  node n1 {    # host b\n"
    "    device r1: cpu(gflops = 20.0, bw = 1.00GB/s, lat = 1.00us, mem = 1.00GiB, "
    "spread = 0.200, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "  }\n"
    "  link intra(bw = 1.00GB/s, lat = 0.01us, spread = 0.000)    # ranks 0 and 2\n"
    "  link inter(bw = 0.001GB/s, lat = 1000.00us, spread = 0.000)    # ranks 0 and 1\n"
    "}\n");
  free(text);
}

/* Collectives timed over all ranks: a comment line, then one line each with
 * the group size, the fitted figures and the two medians. */
static void collectives(void **state) {
  (void)state;
  ProbeSpeed speed[2] = {{.gflops = 80, .lat = 1e-6, .bw = 10e9, .spread = 0.01},
                         {.gflops = 40, .lat = 1e-6, .bw = 10e9, .spread = 0.02}};
  double mem[2] = {1 << 30, 1 << 30};
  int node[2] = {0, 0};
  const char *host[1] = {"vm"};
  ProbeColl coll[3] = {
    {.op = DT_COLL_ALL_REDUCE, .method = DTRT_COMM_HIER, .t = {51e-6, 2.713e-3}, .lat = 9.123e-6,
     .bw = 1.5512e9, .spread = 0.0314},
    {.op = DT_COLL_ALL_GATHER, .method = DTRT_COMM_PADDED, .t = {20e-6, 1e-3}, .lat = -1e-6,
     .bw = 4e5, .spread = 0.5},
    {.op = DT_COLL_ALL_TO_ALL, .method = DTRT_COMM_RING, .t = {18e-6, 1.315e-3}, .lat = 12e-6,
     .bw = 3.1886e9, .spread = 0.1001},
  };
  Probe p = {.name = "pair", .nranks = 2, .nnodes = 1, .reps = 20, .speed = speed,
             .mem = mem, .node = node, .host = host,
             .intra = {.present = true, .a = 0, .b = 1, .bw = 4.2e9, .lat = 1e-6},
             .ncoll = 3, .coll = coll};
  char *text = written(&p);
  assert_string_equal(text,
    "# dtc-probe: 2 ranks on 1 node; dtc's GEMM and elementwise loops on each "
    "rank's threads, and ping-pong, median of 20, spread = (Q3 - Q1) / median of 1000 resampled medians\n"
    "cluster pair {\n"
    "  node n0 {    # host vm\n"
    "    device r0: cpu(gflops = 80.0, bw = 10.00GB/s, lat = 1.00us, mem = 1.00GiB, "
    "spread = 0.010, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "    device r1: cpu(gflops = 40.0, bw = 10.00GB/s, lat = 1.00us, mem = 1.00GiB, "
    "spread = 0.020, row = 0.1ns, attn = 0.001, score = 0.001ns, product = 0.1ns)\n"
    "  }\n"
    "  link intra(bw = 4.20GB/s, lat = 1.00us, spread = 0.000)    # ranks 0 and 1\n"
    "  # collectives over all 2 ranks by libdtrt's methods, t = lat + bytes / bw fitted to "
    "the medians at 64KiB and 4MiB\n"
    "  collective all_reduce(method = hierarchical, ranks = 2, lat = 9.12us, bw = 1.551GB/s, "
    "spread = 0.031)    # 0.051ms, 2.713ms\n"
    "  collective all_gather(method = padded, ranks = 2, lat = 0.01us, bw = 0.001GB/s, "
    "spread = 0.500)    # 0.020ms, 1.000ms\n"
    "  collective all_to_all(method = ring, ranks = 2, lat = 12.00us, bw = 3.189GB/s, "
    "spread = 0.100)    # 0.018ms, 1.315ms\n"
    "}\n");
  free(text);

  /* Above 5% only: the padded all_gather and the all_to_all (0.1001), not
   * the devices, the link nor the all_reduce (0.031). */
  char *warn = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&warn, &len);
  assert_int_equal(probe_warn(f, &p), 2);
  fclose(f);
  assert_string_equal(warn,
    "dtc-probe: warning: the median of the times of collective all_gather by padded spread by "
    "50.0% (over resamples); the planner takes that as noise: probe a quieter machine, or "
    "with more --reps\n"
    "dtc-probe: warning: the median of the times of collective all_to_all by ring spread by "
    "10.0% (over resamples); the planner takes that as noise: probe a quieter machine, or "
    "with more --reps\n");
  free(warn);
}

/* Warnings name the rank and the link; a spread of exactly 5% is not one. */
static void warnings(void **state) {
  (void)state;
  ProbeSpeed speed[2] = {{.gflops = 80, .bw = 1e9, .spread = 0.05},
                         {.gflops = 40, .bw = 1e9, .spread = 0.35}};
  double mem[2] = {1 << 30, 1 << 30};
  int node[2] = {0, 1};
  const char *host[2] = {"a", "b"};
  Probe p = {.name = "pair", .nranks = 2, .nnodes = 2, .reps = 20, .speed = speed,
             .mem = mem, .node = node, .host = host,
             .inter = {.present = true, .a = 0, .b = 1, .bw = 1e9, .lat = 1e-6, .spread = 0.2}};
  char *warn = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&warn, &len);
  assert_int_equal(probe_warn(f, &p), 2);
  fclose(f);
  assert_non_null(strstr(warn, "dtc-probe: warning: the median of the kernel times of r1 "
                               "spread by 35.0% "));
  assert_non_null(strstr(warn, "dtc-probe: warning: the median of the ping-pong times of link "
                               "inter spread by 20.0% "));
  assert_null(strstr(warn, "r0"));
  free(warn);
}

/* The interquartile range over the median, quartiles interpolated: checked
 * against quartiles worked out by hand. */
static void spread(void **state) {
  (void)state;
  /* n = 5: Q1 = v[1], median v[2], Q3 = v[3] */
  assert_true(fabs(probe_spread((double[]){1, 2, 4, 6, 100}, 5) - (6.0 - 2) / 4) < 1e-12);
  /* n = 4: positions 0.75, 1.5, 2.25: Q1 = 1 + 0.75, median 2.5, Q3 = 3 + 0.25 * 4 */
  assert_true(fabs(probe_spread((double[]){1, 2, 3, 7}, 4) - (4.0 - 1.75) / 2.5) < 1e-12);
  /* a single outlier moves nothing; half the samples shifted shows in full */
  double calm[8] = {10, 10, 10, 10, 10, 10, 10, 50}, shifted[8] = {10, 10, 10, 10, 20, 20, 20, 20};
  assert_true(probe_spread(calm, 8) == 0);
  assert_true(probe_spread(shifted, 8) > 0.6);
  assert_true(probe_spread((double[]){3}, 1) == 0);
  assert_true(probe_spread((double[]){2, 4}, 2) == (3.5 - 2.5) / 3);
}

/* The median's spread over resamples: none where the samples agree (one
 * outlier or not), most of a half-and-half shift (the median may be either
 * half), and for samples evenly spread over +-10% of 100, about 1.35 (the
 * quartiles of a normal) times the median's standard error, 10 / sqrt(20)
 * here (1 / (2 f sqrt(n)) with density f = 1/20): 3%, a third of the
 * samples' own spread. */
static void spread_of_median(void **state) {
  (void)state;
  double calm[8] = {10, 10, 10, 10, 10, 10, 10, 50}, shifted[8] = {10, 10, 10, 10, 20, 20, 20, 20};
  assert_true(median_spread(calm, 8) == 0);
  assert_true(median_spread(shifted, 8) > 0.3);
  assert_true(median_spread((double[]){3}, 1) == 0);
  double even[20], reversed[20];
  for (int i = 0; i < 20; i++)
    even[i] = reversed[19 - i] = 90 + i * 20.0 / 19;
  double s = median_spread(reversed, 20);   /* unsorted: it sorts its own copy */
  double own = probe_spread(even, 20);      /* 0.1 */
  assert_true(s > 0.02 && s < 0.045);
  assert_true(s < own / 2);
}

/* A drift of the whole machine (every rank's samples slower alike) is no
 * spread of a rank's figures against the others'; a rank's own swings
 * are, and one rank alone keeps its own times' spread. */
static void spread_relative(void **state) {
  (void)state;
  enum { R = 8 };
  double t[2 * 1 * R], out[2];
  for (int i = 0; i < R; i++) {
    t[i] = i < R / 2 ? 10 : 20;          /* rank 0: the machine slows halfway */
    t[R + i] = 2 * t[i];                 /* rank 1: half rank 0's speed, alike */
  }
  relative_spreads(t, 2, 1, R, out);
  assert_true(out[0] < 1e-12 && out[1] < 1e-12);
  relative_spreads(t, 1, 1, R, out);
  assert_true(fabs(out[0] - median_spread(t, R)) < 1e-12 && out[0] > 0.3);
  for (int i = 0; i < R; i++)
    t[R + i] *= i % 2 ? 1.5 : 1;         /* rank 1 swings by itself */
  relative_spreads(t, 2, 1, R, out);
  assert_true(out[0] > 0.05 && out[1] > 0.05);
}

/* The line through both medians; a negative latency, or a time that does not
 * grow with the bytes, keeps the large size's time. */
static void fit(void **state) {
  (void)state;
  double lat, bw, b0 = coll_bytes[0], b1 = coll_bytes[1];
  probe_fit(coll_bytes, (double[]){10e-6 + b0 / 2e9, 10e-6 + b1 / 2e9}, &lat, &bw);
  assert_true(fabs(lat - 10e-6) < 1e-12 && fabs(bw - 2e9) < 1);
  probe_fit(coll_bytes, (double[]){b0 / 2e9 - 5e-6, b1 / 2e9 - 5e-6}, &lat, &bw);
  assert_true(lat == 0 && fabs(bw - b1 / (b1 / 2e9 - 5e-6)) < 1e-3);
  assert_true(fabs(lat + b1 / bw - (b1 / 2e9 - 5e-6)) < 1e-12);
  probe_fit(coll_bytes, (double[]){3e-3, 2e-3}, &lat, &bw);
  assert_true(lat == 3e-3 && bw == b1 / 2e-3);
  probe_fit(coll_bytes, (double[]){2e-3, 2e-3}, &lat, &bw);
  assert_true(lat == 2e-3 && bw == b1 / 2e-3);
}

/* Attention's fit: times made from attn 0.8 of 100 GFLOP/s, 0.3 ns a score
 * and 1 us a product of a block not whole, at the probe's three kernels'
 * FLOPs, scores and such products (heads of 16 and 64 at T = 1024, all of
 * whose blocks are whole, and 64 heads of 32 at T = 32, one short block a
 * head; the pairs and short blocks dtrt_sdpa_pairs and dtrt_sdpa_blocks
 * count, by sdpa's 2 products and sdpa_grad's 5 in one pass), give them
 * back. A short kernel as fast as the long ones' speed and scores make it
 * gives no cost a block; long times that would need a negative score (the
 * smaller head as fast a FLOP as the larger) give score 0 and the speed
 * that takes the two times in all, and the block what is left of the short
 * one's time. */
static void attn_fit(void **state) {
  (void)state;
  const double bh[3] = {4, 1, 64}, d[3] = {16, 64, 32};
  const int64_t t_of[3] = {1024, 1024, 32};
  double flops[3], scores[3], blocks[3], t[3], attn, score, block;
  for (int k = 0; k < 3; k++) {
    double pairs = bh[k] * dtrt_sdpa_pairs(t_of[k], t_of[k], true);
    flops[k] = pairs * (14 * d[k] + 28), scores[k] = 2 * pairs;
    blocks[k] = bh[k] * dtrt_sdpa_blocks(t_of[k], t_of[k], true) * (2 + 5);
    t[k] = flops[k] / (0.8 * 100e9) + scores[k] * 0.3e-9 + blocks[k] * 1e-6;
  }
  assert_true(blocks[0] == 0 && blocks[1] == 0 && blocks[2] == 64 * 7);
  assert_true(dtrt_sdpa_pairs(32, 32, true) == 32 * 32 && dtrt_sdpa_blocks(1000, 1000, true) == 16);
  probe_attn_fit(flops, scores, blocks, t, 100, &attn, &score, &block);
  assert_true(fabs(attn - 0.8) < 1e-9 && fabs(score - 0.3e-9) < 1e-15 &&
              fabs(block - 1e-6) < 1e-12);
  t[2] = flops[2] / (0.8 * 100e9) + scores[2] * 0.3e-9 - blocks[2] * 1e-7;
  probe_attn_fit(flops, scores, blocks, t, 100, &attn, &score, &block);
  assert_true(fabs(attn - 0.8) < 1e-9 && fabs(score - 0.3e-9) < 1e-15 && block == 0);
  for (int k = 0; k < 2; k++)
    t[k] = flops[k] / 80e9 * (k ? 1.2 : 1);
  t[2] = flops[2] / 50e9;
  probe_attn_fit(flops, scores, blocks, t, 100, &attn, &score, &block);
  assert_true(score == 0);
  double per_flop = (t[0] + t[1]) / (flops[0] + flops[1]);
  assert_true(fabs(attn - 1 / per_flop / 100e9) < 1e-12);
  assert_true(fabs(block - (t[2] - flops[2] * per_flop) / blocks[2]) < 1e-15);
}

/* The GEMMs' fit: times made from 100 GFLOP/s, 10 GB/s for the bytes of a
 * right operand that holds more than the L2 cache, and 200 ns a product,
 * at the probe's four GEMMs (a layer's, whose 4 MiB weight spills out of a
 * 1 MiB L2, a thin one, a weight's gradient of 768 KiB, 192 products of
 * 32^3), give them back; with an L2 of 512 KiB the gradient spills too,
 * and both give the rate; with no L2 known, or none that a product fits,
 * gflops is the harmonic mean of all single products and no spill is
 * given. */
static void gemm_fit(void **state) {
  (void)state;
  const double G = 100e9, spill = 10e9, product = 200e-9;
  ProbeGemm g[4] = {{.flops = 2.0 * 128 * 1024 * 1024, .wbytes = 4 << 20, .products = 1},
                    {.flops = 2.0 * 1024 * 128 * 128, .wbytes = 64 << 10, .products = 1},
                    {.flops = 2.0 * 128 * 128 * 1536, .wbytes = 768 << 10, .products = 1},
                    {.flops = 2.0 * 192 * 32 * 32 * 32, .wbytes = 4 << 10, .products = 192}};
  int64_t l2s[2] = {1 << 20, 512 << 10};
  for (int c = 0; c < 2; c++) {
    for (int k = 0; k < 4; k++)
      g[k].left = g[k].flops / G + (g[k].wbytes > l2s[c] ? g[k].wbytes / spill : 0) +
                  g[k].products * product;
    ProbeSpeed s = {0};
    probe_gemm_fit(g, 4, l2s[c], &s);
    /* the single products' one `product` each is in their times, at most 6e-4
     * of them (200 ns of the thin product's 335 us), and moves gflops that
     * much and the spilled seconds (0.4 ms a 4 MiB) by under 6e-4 of the
     * layer's 2.7 ms; the batch's 126 us of FLOPs so priced move its 200 ns
     * a product by under 0.5 ns */
    assert_true(fabs(s.gflops - G / 1e9) < 1e-3 * G / 1e9);
    assert_true(fabs(s.spill - spill) < 1e-2 * spill && s.l2 == l2s[c]);
    assert_true(fabs(s.product - product) < 1e-2 * product);
  }
  for (int c = 0; c < 2; c++) {   /* no L2 known; an L2 no product fits */
    ProbeSpeed s = {0};
    probe_gemm_fit(g, 4, c ? 1024 : 0, &s);
    double per_flop = 0;
    for (int k = 0; k < 3; k++)
      per_flop += g[k].left / g[k].flops;
    assert_true(fabs(s.gflops - 3 / per_flop / 1e9) < 1e-9 * s.gflops);
    assert_true(s.spill == 0 && s.l2 == 0 && s.product >= 0);
  }
}

/* A core's L2 is shared by the ranks of a node pinned to its one CPU: ranks
 * 1 and 2 on CPU 1 of node 0 have half of it each, rank 0 alone on CPU 0
 * all of it, and so do rank 3, on CPU 1 of another node, and rank 4, not
 * pinned to one CPU. */
static void l2_shared(void **state) {
  (void)state;
  int cpu[5] = {0, 1, 1, 1, -1}, node[5] = {0, 0, 0, 1, 0};
  int64_t want[5] = {1 << 20, 512 << 10, 512 << 10, 1 << 20, 1 << 20};
  for (int r = 0; r < 5; r++)
    assert_int_equal(shared_l2(1 << 20, cpu, node, 5, r), want[r]);
}

static void names(void **state) {
  (void)state;
  assert_true(probe_valid_name("probed"));
  assert_true(probe_valid_name("_lab2"));
  assert_false(probe_valid_name(""));
  assert_false(probe_valid_name("2lab"));
  assert_false(probe_valid_name("my-lab"));
  assert_false(probe_valid_name("cluster"));
  assert_false(probe_valid_name("over"));
  assert_false(probe_valid_name("collective"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(two_nodes),
    cmocka_unit_test(one_rank_and_floors),
    cmocka_unit_test(collectives),
    cmocka_unit_test(warnings),
    cmocka_unit_test(spread),
    cmocka_unit_test(spread_of_median),
    cmocka_unit_test(spread_relative),
    cmocka_unit_test(fit),
    cmocka_unit_test(attn_fit),
    cmocka_unit_test(gemm_fit),
    cmocka_unit_test(l2_shared),
    cmocka_unit_test(names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
