/* test_sim.c: the step simulator (passes/sim.c) against times worked out here
 * from the IR and the cluster: one device, data parallel with its all-reduces,
 * even against uneven splits on unequal devices, an embedding bag's gathered
 * bytes, DeMo's kernels at a fraction of the GEMM's speed, and the Chrome
 * trace. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

static const char *model =
    "model mlp(batch B = 96) {\n"
    "  input  x: f32[B, 64]\n"
    "  input  y: i32[B]\n"
    "  param  w1: f32[64, 32] init glorot\n"
    "  param  b1: f32[32]     init zeros\n"
    "  param  w2: f32[32, 10] init glorot\n"
    "  param  b2: f32[10]     init zeros\n"
    "  h      = relu(x @ w1 + b1)\n"
    "  logits = h @ w2 + b2\n"
    "  loss   = cross_entropy(logits, y)\n"
    "  minimize loss with sgd(lr = 0.1)\n"
    "}\n";

/* Two devices of 80 and 40 GFLOP/s: on one node, or on two. */
#define LINKS \
  "  link intra(bw = 1GB/s, lat = 2us)\n" \
  "  link inter(bw = 100MB/s, lat = 50us)\n" \
  "}\n"
static const char *one_node =
    "cluster c {\n"
    "  node a {\n"
    "    device d0: cpu(gflops = 80, mem = 1GiB)\n"
    "    device d1: cpu(gflops = 40, mem = 1GiB)\n"
    "  }\n" LINKS;
static const char *two_nodes =
    "cluster c {\n"
    "  node a { device d0: cpu(gflops = 80, mem = 1GiB) }\n"
    "  node b { device d1: cpu(gflops = 40, mem = 1GiB) }\n" LINKS;

/* text through every pass. */
static Module *compile_text(Arena *a, const char *text) {
  Diag d;
  diag_init(&d, stderr);
  Module *m = fe_compile(a, src_from_string(a, "t.dt", text), NULL, 0, &d);
  assert_non_null(m);
  m->no_coalesce = true;   /* a collective a value, as the counts below */
  assert_true(passes_run(m, &d, NULL, NULL));
  return m;
}

/* model, then extra (a cluster and parallel block), through every pass. */
static Module *compile(Arena *a, const char *extra) {
  return compile_text(a, arena_printf(a, "%s%s", model, extra));
}

static const Func *step_func(const Module *m, int device) {
  for (int k = 0; k < m->func.n; k++)
    if (ir_func_is(m->func.a[k], "train_step") && m->func.a[k]->device == device)
      return m->func.a[k];
  fail_msg("no train_step for device %d", device);
  return NULL;
}

/* Compute seconds of f on a device's roofline by the documented model
 * (passes/passes.h, sim_compute_time): lat per kernel; the op table's FLOP
 * counts at gflops; the bytes of every result and, but for elementwise ops,
 * of every operand at bw (5 FLOPs a byte when bw is 0); reshapes free; and for
 * the one kernel of this model with a per-element cost, cross entropy (170
 * FLOPs per element of the logits) and its gradient (110). */
static double roofline_time(const Func *f, double gflops, double bw, double lat) {
  double flops = 0, bytes = 0, fixed = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    OpKind kind = ir_ops[i->op].kind;
    if (kind == K_META || kind == K_COMM || i->op == OP_reshape)
      continue;
    fixed += lat;
    flops += ir_ops[i->op].flops(i);
    bytes += 4.0 * (double)type_elems(&i->type);
    for (int j = 0; kind != K_ELEM && j < i->nin; j++)
      bytes += 4.0 * (double)type_elems(&i->in[j]->type);
    if (i->op == OP_cross_entropy || i->op == OP_cross_entropy_grad)
      flops += (i->op == OP_cross_entropy ? 170.0 : 110.0) * (double)type_elems(&i->in[0]->type);
  }
  return fixed + flops / (gflops * 1e9) + bytes / (bw > 0 ? bw : gflops * 1e9 / 5);
}

static double compute_time(const Func *f, double gflops) { return roofline_time(f, gflops, 0, 0); }

static void test_single_device(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, "");
  SimResult r;
  double step = sim_step(m, &r);
  const Func *f = step_func(m, -1);
  double want = compute_time(f, 50);
  assert_int_equal(r.ndev, 1);
  assert_true(fabs(step - want) <= 1e-9 * want);
  assert_true(fabs(r.dev[0].compute - want) <= 1e-9 * want);
  assert_true(r.dev[0].comm == 0 && r.dev[0].idle == 0);
  /* the matmuls alone: x@w1, h@w2 forward; dw1, dh, dw2 backward */
  double mm = 2.0 * 96 * (64 * 32 + 32 * 10 + 64 * 32 + 32 * 10 + 32 * 10);
  assert_true(step > mm / 50e9);
  sim_step(m, NULL);
  arena_free(a);
}

/* Sum of lat * 2(k-1) + 2(k-1)/k * bytes / bw over the all-reduces of f, k = 2. */
static double allreduce_time(const Func *f, double bw, double lat, int *count) {
  double t = 0;
  *count = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    assert_true(i->op != OP_all_gather && i->op != OP_reduce_scatter);
    if (i->op != OP_all_reduce)
      continue;
    ++*count;
    t += lat * 2 + 2 * 0.5 * 4.0 * (double)type_elems(&i->in[0]->type) / bw;
  }
  return t;
}

static const char *dp_even =
    "parallel mlp on c {\n"
    "  mesh m[dp = 2] over d0, d1\n"
    "  shard x: [dp, *]\n"
    "  shard y: [dp]\n"
    "  plan explicit\n"
    "}\n";
static const char *dp_uneven =
    "parallel mlp on c {\n"
    "  mesh m[dp = 2] over d0, d1\n"
    "  shard x: [dp(0.6667, 0.3333), *]\n"
    "  shard y: [dp(0.6667, 0.3333)]\n"
    "  plan explicit\n"
    "}\n";

static void check_dp(const char *cluster, double bw, double lat) {
  Arena *a = arena_new();
  Module *m = compile(a, arena_printf(a, "%s%s", cluster, dp_even));
  SimResult r;
  double step = sim_step(m, &r);
  assert_int_equal(r.ndev, 2);
  int n0, n1;
  double comm = allreduce_time(step_func(m, 0), bw, lat, &n0);
  assert_true(fabs(allreduce_time(step_func(m, 1), bw, lat, &n1) - comm) <= 1e-12);
  assert_true(n0 >= 4 && n0 == n1);   /* the gradients of w1, b1, w2, b2 at least */
  for (int d = 0; d < 2; d++) {
    double c = compute_time(step_func(m, d), d ? 40 : 80);
    assert_true(fabs(r.dev[d].comm - comm) <= 1e-9 * comm);
    assert_true(fabs(r.dev[d].compute - c) <= 1e-9 * c);
    assert_true(fabs(r.dev[d].compute + r.dev[d].comm + r.dev[d].idle - step) <= 1e-9 * step);
  }
  assert_true(step >= (r.dev[1].compute + comm) * (1 - 1e-9));
  /* the slower device is the bottleneck: the faster one waits for it */
  assert_int_equal(r.bottleneck, 1);
  assert_true(r.dev[0].idle > 0);
  arena_free(a);
}

/* Devices given their rooflines (dtc-probe's bw and lat): the fixed cost of
 * every kernel and its bytes at the device's bandwidth, not at 5 FLOPs a
 * byte; each device its own. */
static void test_roofline(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, arena_printf(a, "cluster c {\n"
                                         "  node a {\n"
                                         "    device d0: cpu(gflops = 80, bw = 20GB/s, lat = 3us, "
                                         "mem = 1GiB)\n"
                                         "    device d1: cpu(gflops = 40, bw = 7GB/s, mem = 1GiB)\n"
                                         "  }\n" LINKS "%s", dp_even));
  SimResult r;
  sim_step(m, &r);
  double want[2] = {roofline_time(step_func(m, 0), 80, 20e9, 3e-6),
                    roofline_time(step_func(m, 1), 40, 7e9, 0)};
  for (int d = 0; d < 2; d++) {
    assert_true(fabs(r.dev[d].compute - want[d]) <= 1e-9 * want[d]);
    assert_true(fabs(r.dev[d].compute - compute_time(step_func(m, d), d ? 40 : 80)) >
                0.01 * want[d]);
  }
  arena_free(a);
}

/* An embedding bag reads the rows its ids gather, not its table: the
 * forward's bytes are its result, its ids and B K rows of D floats; the
 * weight's gradient also writes the whole dense gradient. */
/* text's @train_step after autodiff (no mesh). */
static Module *step_of(Arena *a, const char *text) {
  Diag d;
  diag_init(&d, stderr);
  Module *m = fe_compile(a, src_from_string(a, "t.dt", text), NULL, 0, &d);
  assert_non_null(m);
  assert_true(
      passes_run(m, &d, &(PassOptions){.stop_after = "autodiff", .verify_each = true}, NULL));
  return m;
}

static void test_embedding_bag_bytes(void **state) {
  (void)state;
  Arena *a = arena_new();
  const char *text = "model rec(batch B = 4) {\n"
                     "  input  ids: i32[B, 2]\n"
                     "  input  y: f32[B, 16]\n"
                     "  param  e: f32[100000, 16] init zeros\n"
                     "  loss   = mse(embedding_bag(ids, e, mode = \"sum\"), y)\n"
                     "  minimize loss with sgd(lr = 0.1)\n"
                     "}\n";
  Module *m = step_of(a, text);
  const Func *f = step_func(m, -1);
  double bw = SIM_DEFAULT_GFLOPS * 1e9 / SIM_BYTE_FLOPS, rows = 4.0 * 2 * 16 * 4;
  int seen = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    double want;
    if (i->op == OP_embedding_bag)
      want = 8 * 16 / (SIM_DEFAULT_GFLOPS * 1e9) + (4 * 16 * 4 + 4 * 2 * 4 + rows) / bw;
    else if (i->op == OP_embedding_bag_grad)
      want = 8 * 16 / (SIM_DEFAULT_GFLOPS * 1e9) +
             (100000.0 * 16 * 4 + 4 * 2 * 4 + rows + 4 * 16 * 4) / bw;
    else
      continue;
    seen++;
    double got = sim_compute_time(m, i, -1);
    if (!(fabs(got - want) <= 1e-9 * want))
      fail_msg("%s: %.6g s, want %.6g s", ir_ops[i->op].name, got, want);
  }
  assert_int_equal(seen, 2);
  arena_free(a);
}

/* A sparse table's update (SparseAdam here) moves the rows the batch
 * touches, 8 of 100000, of the table and its two moments, not the whole
 * [R, D]; a slice reads only what it copies, and spends SIM_RUN_FLOPS on
 * each of its runs (4 rows of y, a run each). */
static void test_sparse_update_bytes(void **state) {
  (void)state;
  Arena *a = arena_new();
  const char *text = "model rec(batch B = 4) {\n"
                     "  input  ids: i32[B, 2]\n"
                     "  input  y: f32[B, 16]\n"
                     "  param  e: f32[100000, 16] init zeros sparse\n"
                     "  loss   = mse(embedding_bag(ids, e, mode = \"sum\"), y) +"
                     " sum(slice(y, 1, 0, 4))\n"
                     "  minimize loss with sparse_adam(lr = 0.1)\n"
                     "}\n";
  Module *m = step_of(a, text);
  const Func *f = step_func(m, -1);
  double bw = SIM_DEFAULT_GFLOPS * 1e9 / SIM_BYTE_FLOPS, table = 100000.0 * 16 * 4;
  int sparse = 0, slices = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    double got = sim_compute_time(m, i, -1);
    if (i->op == OP_slice) {
      slices++;
      double runs = 4 * SIM_RUN_FLOPS / (SIM_DEFAULT_GFLOPS * 1e9);
      assert_true(fabs(got - 2 * 4.0 * 4 * 4 / bw - runs) <= 1e-9 * got);
    }
    if (i->op != OP_sparse_adam && i->op != OP_sparse_moment)
      continue;
    sparse++;
    /* the whole table once would be 0.64 ms; the rows each touched, 8 of 16 */
    printf("%s: %.3g s against %.3g s for one pass over the table\n", ir_ops[i->op].name, got,
           table / bw);
    assert_true(got > 0 && got < 0.01 * table / bw);
  }
  assert_true(sparse >= 2);
  assert_true(slices >= 1);
  arena_free(a);
}

/* A table larger than the caches: each cache line of a row that a bag or a
 * sparse update visits at random costs the device's `row` beyond its
 * bytes (the state an update reads was just written, and is not counted);
 * the sort and search of the ids cost alike with or without it. Rows of
 * 32 floats are two lines; 8 bags of 2 ids are 16 entries, all on each of
 * two devices. A block of rows of a table split in two, 500 of its 1000,
 * takes half of them. */
static double op_time(Module *m, int device, Op op) {
  const Func *f = step_func(m, device);
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == op)
      return sim_compute_time(m, f->inst.a[k], device);
  fail_msg("no %s", ir_ops[op].name);
  return 0;
}

/* A sparse table's model on two devices of 80 GFLOP/s: 8 bags of 2 ids
 * over a table of 1000 rows of 32 floats, trained by `opt`; `fig` the
 * devices' extra figures, `shard` lines for the parallel block. */
static Module *rec_model(Arena *a, const char *opt, const char *fig, const char *shard) {
  return compile_text(a, arena_printf(a,
      "model rec(batch B = 8) {\n"
      "  input  ids: i32[B, 2]\n"
      "  input  y: f32[B, 32]\n"
      "  param  e: f32[1000, 32] init zeros sparse\n"
      "  loss   = mse(embedding_bag(ids, e, mode = \"sum\"), y)\n"
      "  minimize loss with %s\n"
      "}\n"
      "cluster c {\n  node a {\n"
      "    device d0: cpu(gflops = 80, mem = 1GiB%s)\n"
      "    device d1: cpu(gflops = 80, mem = 1GiB%s)\n"
      "  }\n" LINKS
      "parallel rec on c {\n  mesh m[dp = 2] over d0, d1\n%s  plan explicit\n}\n",
      opt, fig, fig, shard));
}

static void test_random_rows(void **state) {
  (void)state;
  const Op ops[3] = {OP_embedding_bag, OP_sparse_moment, OP_sparse_adam};
  for (int blocks = 0; blocks < 2; blocks++) {
    Arena *a = arena_new();
    Module *m[2];
    for (int r = 0; r < 2; r++)
      m[r] = rec_model(a, "sparse_adam(lr = 0.1)", r ? ", row = 40ns" : "",
                       blocks ? "  shard e: [dp, *]\n" : "");
    int dev = 1;
    for (int k = 0; k < 3; k++) {
      double got = op_time(m[1], dev, ops[k]) - op_time(m[0], dev, ops[k]);
      double want = 16 * 2 * 40e-9 / (blocks ? 2 : 1);
      printf("%s%s: %.4g s more\n", ir_ops[ops[k]].name, blocks ? " (a block)" : "", got);
      assert_true(fabs(got - want) <= 1e-9 * want);
    }
    arena_free(a);
  }
}

/* A device that gives `entry` prices each id entry of sparse_rows at that
 * time, and those of sparse_values and sparse_sgd at 20/13 and 14/13 of it
 * (their FLOP-equivalents, 2000 and 1400 against 1300); one that does not,
 * each at its FLOP-equivalents over gflops. 8 bags of 2 ids: 16 entries,
 * all on each of two devices. */
static void test_sparse_entries(void **state) {
  (void)state;
  const Op ops[3] = {OP_sparse_rows, OP_sparse_values, OP_sparse_sgd};
  const double flops[3] = {1300, 2000, 1400}, weight[3] = {1, 20.0 / 13, 14.0 / 13};
  Arena *a = arena_new();
  Module *m[2];
  for (int e = 0; e < 2; e++)
    m[e] = rec_model(a, "sgd(lr = 0.1)", e ? ", entry = 10ns" : "", "");
  for (int k = 0; k < 3; k++) {
    double got = op_time(m[1], 1, ops[k]) - op_time(m[0], 1, ops[k]);
    double want = 16 * (weight[k] * 10e-9 - flops[k] / 80e9);
    printf("%s with entry = 10ns: %.4g s more, by the figures %.4g\n", ir_ops[ops[k]].name, got,
           want);
    assert_true(fabs(got - want) <= 1e-9 * fabs(want));
  }
  arena_free(a);
}

/* The seconds of the matmuls of device 0's step of text (a format taking
 * the device's extra figures), which must make n of them. */
static double matmul_time(Arena *a, const char *text, const char *extra, int n) {
  Module *m = compile_text(a, arena_printf(a, text, extra));
  const Func *f = step_func(m, 0);
  double t = 0;
  int products = 0;
  for (int k = 0; k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_matmul)
      t += sim_compute_time(m, f->inst.a[k], 0), products++;
  assert_int_equal(products, n);
  return t;
}

/* A device that gives its GEMM's micro-tile (tile_m x tile_n, as dtc-probe
 * writes them) has every product priced in whole tiles: x @ w of [20, 64]
 * by [64, 1] computes 2 x 14 rows by 32 columns of tiles over k = 64, and
 * the gradient of w, x^T dy, [64, 1] over k = 20, 5 x 14 rows by 32: by
 * hand, 114688 and 89600 FLOPs where the products have 2560 each. */
static void test_gemm_tiles(void **state) {
  (void)state;
  const char *text = "model lin(batch B = 20) {\n"
                     "  input  x: f32[B, 64]\n"
                     "  input  y: f32[B, 1]\n"
                     "  param  w: f32[64, 1] init zeros\n"
                     "  loss   = mse(x @ w, y)\n"
                     "  minimize loss with sgd(lr = 0.1)\n"
                     "}\n"
                     "cluster c {\n  node a { device d0: cpu(gflops = 80, mem = 1GiB%s) }\n}\n"
                     "parallel lin on c {\n  mesh m[dp = 1] over d0\n  plan explicit\n}\n";
  Arena *a = arena_new();
  double t[2];
  for (int tiled = 0; tiled < 2; tiled++)
    t[tiled] = matmul_time(a, text, tiled ? ", tile_m = 14, tile_n = 32" : "", 2);
  double want = (114688 - 2560 + 89600 - 2560) / 80e9;
  printf("products in whole tiles: %.4g s more, by hand %.4g s\n", t[1] - t[0], want);
  assert_true(fabs(t[1] - t[0] - want) <= 1e-9 * want);
  arena_free(a);
}

/* A device that gives `spill` and `l2` adds a product's right operand's
 * bytes at spill where they are more than l2, and one that gives `product`
 * adds that much a product of matrices. The step of (x @ w1) @ w2 makes
 * five products (two forward; the backward's dh = dp w2^T, dw2 = h^T dp,
 * dw1 = x^T dh), of which x @ w1 alone has a right operand beyond 1 MiB
 * (w1: 4 MiB; the others at most 32 KiB): by hand, spill 4 GB/s adds
 * 4 MiB / 4 GB/s, product 1 us adds 5 us. */
static void test_gemm_spill_product(void **state) {
  (void)state;
  const char *text = "model sp(batch B = 4) {\n"
                     "  input  x: f32[B, 1024]\n"
                     "  input  y: f32[B, 8]\n"
                     "  param  w1: f32[1024, 1024] init zeros\n"
                     "  param  w2: f32[1024, 8] init zeros\n"
                     "  loss   = mse((x @ w1) @ w2, y)\n"
                     "  minimize loss with sgd(lr = 0.1)\n"
                     "}\n"
                     "cluster c {\n  node a { device d0: cpu(gflops = 80, mem = 1GiB%s) }\n}\n"
                     "parallel sp on c {\n  mesh m[dp = 1] over d0\n  plan explicit\n}\n";
  const char *extra[3] = {"", ", spill = 4GB/s, l2 = 1MiB", ", product = 1us"};
  Arena *a = arena_new();
  double t[3];
  for (int c = 0; c < 3; c++)
    t[c] = matmul_time(a, text, extra[c], 5);
  double spilled = 4194304 / 4e9;
  printf("spill: %.4g s more, by hand %.4g s; product: %.4g s more\n", t[1] - t[0], spilled,
         t[2] - t[0]);
  assert_true(fabs(t[1] - t[0] - spilled) <= 1e-9 * spilled);
  assert_true(fabs(t[2] - t[0] - 5e-6) <= 1e-9 * 5e-6);
  arena_free(a);
}

/* A table-wise table's lookups and updates compute nothing on the device
 * not holding it, nor the sorting of its ids that only they read
 * (ir_idle): code generation skips them, and the simulator gives them no
 * time. Device 0 holds e: it runs them all. */
static void sparse_ops_on(const Module *m, int device, int *count) {
  const Func *f = step_func(m, device);
  bool *idle = arena_alloc(m->arena, sizeof(bool) * (size_t)(f->inst.n + 1));
  ir_idle(f, idle);
  count[0] = count[1] = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Op op = f->inst.a[k]->op;
    if (op == OP_embedding_bag || op == OP_sparse_rows || op == OP_sparse_values ||
        op == OP_sparse_adagrad_sum || op == OP_sparse_adagrad)
      count[idle[k]]++;
  }
}

typedef struct Seen { int ops[2]; } Seen;

static void count_sparse(void *user, int device, const Inst *i, bool comm, double start,
                         double dur) {
  (void)start, (void)dur;
  if (!comm && (i->op == OP_embedding_bag || i->op == OP_sparse_rows ||
                i->op == OP_sparse_values || i->op == OP_sparse_adagrad))
    ((Seen *)user)->ops[device]++;
}

static void test_table_wise_idle(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile_text(a, "model rec(batch B = 8) {\n"
                              "  input  ids: i32[B, 2]\n"
                              "  input  y: f32[B, 32]\n"
                              "  param  e: f32[1000, 32] init zeros sparse\n"
                              "  loss   = mse(embedding_bag(ids, e, mode = \"sum\"), y)\n"
                              "  minimize loss with adagrad(lr = 0.1)\n"
                              "}\n"
                              "cluster c {\n  node a {\n"
                              "    device d0: cpu(gflops = 80, mem = 1GiB)\n"
                              "    device d1: cpu(gflops = 80, mem = 1GiB)\n"
                              "  }\n" LINKS
                              "parallel rec on c {\n  mesh m[dp = 2] over d0, d1\n"
                              "  shard ids: [*, *]\n  shard e: on dp[0]\n  plan explicit\n}\n");
  int held[2], other[2];
  sparse_ops_on(m, 0, held);
  sparse_ops_on(m, 1, other);
  printf("device 0: %d run, %d idle; device 1: %d run, %d idle\n", held[0], held[1], other[0],
         other[1]);
  assert_int_equal(held[1], 0);
  assert_true(held[0] >= 5);   /* the bag, the rows, the values and the update's two */
  assert_int_equal(other[0], 0);
  assert_int_equal(other[1], held[0]);
  Seen seen = {{0, 0}};
  assert_true(sim_run(m, NULL, count_sparse, &seen) > 0);
  assert_true(seen.ops[0] >= 4);
  assert_int_equal(seen.ops[1], 0);
  arena_free(a);
}

/* A device's probed attention: given `attn`, attention's FLOPs run at that
 * fraction of gflops (else 1), and given `score`, each score a kernel makes
 * costs that time (else none), and given `attn_block`, each product of a
 * block of fewer than 64 queries or keys (4 blocks, one a head: sdpa 2
 * products, sdpa_grad 5) that time; given none, its FLOPs run at 0.65 of
 * gflops at heads of 16 (flop_slowness). Heads of 16, 2 of 48 causal
 * queries, a batch of 2, all on each device (no shardings): 4704 pairs
 * seen, of which the kernels make 9216 (a block of 48 queries, 3 vectors of
 * 16, against the 48 keys its last row sees, dtrt_sdpa_pairs), the count
 * priced; FLOPs a pair 4 D + 14 in sdpa, 14 D + 28 in sdpa_grad, scores a
 * pair 1 and 2 (ir/cost.c); sdpa_lse, which the forward's kernel writes
 * (ir_lse_partner), none. The rest of an op's price (its bytes, lat) is the
 * same with either. */
static void test_attn_probed(void **state) {
  (void)state;
  const char *model_text = "model att(batch B = 2, T = 48, H = 2, D = 16) {\n"
                           "  input  x: f32[B, H, T, D]\n"
                           "  param  w: f32[D, D] init glorot\n"
                           "  y    = scaled_dot_product_attention(x @ w, x, x, is_causal = true)\n"
                           "  loss = mean(y * y)\n"
                           "  minimize loss with sgd(lr = 0.1)\n"
                           "}\n";
  const char *cluster = "cluster c {\n  node a {\n"
                        "    device d0: cpu(gflops = 80, mem = 1GiB%s)\n"
                        "    device d1: cpu(gflops = 80, mem = 1GiB%s)\n"
                        "  }\n" LINKS;
  const char *par = "parallel att on c {\n  mesh m[dp = 2] over d0, d1\n  plan explicit\n}\n";
  const char *given[5] = {"", ", attn = 0.5", ", score = 1ns", ", attn = 0.5, score = 1ns",
                          ", attn = 0.5, score = 1ns, attn_block = 100ns"};
  const double attn[5] = {0, 0.5, 1, 0.5, 0.5}, score[5] = {0, 0, 1e-9, 1e-9, 1e-9};
  const double block[5] = {0, 0, 0, 0, 100e-9};
  const Op ops[3] = {OP_sdpa, OP_sdpa_lse, OP_sdpa_grad};
  /* sdpa_grad's one pass: 5 products of D, one exponential (ir/cost.c) */
  const double per_pair[3] = {4 * 16 + 14, 2 * 16 + 14, 10 * 16 + 14}, scores[3] = {1, 1, 1};
  const double products[3] = {2, 1, 5};
  double pairs = 2 * 2 * 48 * 48, blocks = 2 * 2, base[3] = {0};
  Arena *a = arena_new();
  for (int g = 0; g < 5; g++) {
    Module *m = compile_text(a, arena_printf(a, "%s%s%s", model_text,
                                             arena_printf(a, cluster, given[g], given[g]), par));
    for (int k = 0; k < 3; k++) {
      double t = op_time(m, 1, ops[k]), flops = pairs * per_pair[k];
      if (ops[k] == OP_sdpa_lse) {   /* its sdpa's kernel writes it: free */
        assert_true(t == 0);
        continue;
      }
      if (!g) {
        base[k] = t - flops / (0.65 * 80e9);
        continue;
      }
      double want = base[k] + flops / (attn[g] * 80e9) + pairs * scores[k] * score[g] +
                    blocks * products[k] * block[g];
      printf("%s%s: %.4g s, by the figures %.4g s\n", ir_ops[ops[k]].name, given[g], t, want);
      assert_true(fabs(t - want) <= 1e-9 * want);
    }
  }
  arena_free(a);
}

/* DeMo's kernels count their FLOPs at 1/9 (demo_compress), 1/17
 * (demo_residual) and 1/11 (demo_sign) of the GEMM's speed: transforms in
 * double (passes/sim.c, flop_slowness). */
static void test_demo_slowness(void **state) {
  (void)state;
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  const char *text = "model lin(batch B = 4) {\n"
                     "  input  x: f32[B, 64]\n"
                     "  input  y: f32[B, 64]\n"
                     "  param  w: f32[64, 64] init glorot\n"
                     "  loss   = mse(x @ w, y)\n"
                     "  minimize loss with demo(lr = 0.01)\n"
                     "}\n";
  Module *m = fe_compile(a, src_from_string(a, "t.dt", text), NULL, 0, &d);
  assert_non_null(m);
  assert_true(passes_run(m, &d, NULL, NULL));
  const Func *f = step_func(m, -1);
  double flops = SIM_DEFAULT_GFLOPS * 1e9, bw = flops / SIM_BYTE_FLOPS;
  int seen = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    double slow = i->op == OP_demo_compress   ? 9
                  : i->op == OP_demo_residual ? 17
                  : i->op == OP_demo_sign     ? 11
                                              : 0;
    if (!slow)
      continue;
    seen++;
    /* one 64 x 64 tile, 32 coefficients sent by one row: the forward's two
     * dense products, 2 (64 + 64) a element; an inverse's 2 (32 x 64) for
     * the first and 2 (32 x 64 x 64) for its 32 rows at most; 4 a element */
    double tile = i->op == OP_demo_compress ? 4096.0 * (2 * 128 + 4)
                                            : 2.0 * (32 * 64 + 32 * 4096) + 4 * 4096.0;
    assert_true(ir_ops[i->op].flops(i) == tile);
    double bytes = 4.0 * (double)type_elems(&i->type);
    for (int j = 0; j < i->nin; j++)
      bytes += 4.0 * (double)type_elems(&i->in[j]->type);
    double want = ir_ops[i->op].flops(i) * slow / flops + bytes / bw;
    double got = sim_compute_time(m, i, -1);
    assert_true(ir_ops[i->op].flops(i) > 0);
    if (!(fabs(got - want) <= 1e-9 * want))
      fail_msg("%s: %.6g s, want %.6g s", ir_ops[i->op].name, got, want);
  }
  assert_int_equal(seen, 3);
  arena_free(a);
}

static void test_data_parallel_intra(void **state) {
  (void)state;
  check_dp(one_node, 1e9, 2e-6);
}

static void test_data_parallel_inter(void **state) {
  (void)state;
  check_dp(two_nodes, 100e6, 50e-6);
}

/* Ring attention over two nodes behind a 100 MB/s link: its keys and values
 * (the blocks of 2 x 2 x 32 x 16 floats, 8 KiB each) take a hop of lat +
 * bytes / bw, two tensors a hop forward and four backward, whose adjoints
 * take one more hop home with two; the products, a few microseconds, run
 * beside them. The step is those hops, the rest of its compute and the one
 * collectives at most, and the hops at least. */
static void test_ring_transfers(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile_text(a, arena_printf(a, "%s%s",
      "model att(batch B = 2, T = 64, H = 2, D = 16) {\n"
      "  input  x: f32[B, H, T, D]\n"
      "  param  w: f32[D, D] init glorot\n"
      "  y    = scaled_dot_product_attention(x @ w, x, x)\n"
      "  loss = mean(y * y)\n"
      "  minimize loss with sgd(lr = 0.1)\n"
      "}\n", arena_printf(a, "%s%s", two_nodes,
      "parallel att on c {\n  mesh m[cp = 2] over d0, d1\n  shard x: [*, *, cp, *]\n"
      "  plan explicit\n}\n")));
  const Func *f = step_func(m, 1);
  double hops = 0, block = 2.0 * 2 * 32 * 16 * 4, lat = 50e-6, bw = 100e6;
  int rings = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_ring_sdpa || i->op == OP_ring_sdpa_lse)
      hops += lat + (i->op == OP_ring_sdpa ? 2 : 1) * block / bw, rings++;
    if (i->op == OP_ring_sdpa_grad)
      hops += lat + 4 * block / bw + lat + 2 * block / bw, rings++;
  }
  assert_true(rings >= 2);
  SimResult r;
  double step = sim_step(m, &r);
  double rest = compute_time(f, 40);
  for (int k = 0; k < f->inst.n; k++)   /* each other collective's two steps, at most */
    if (ir_ops[f->inst.a[k]->op].kind == K_COMM)
      rest += 2 * lat + 2 * 4.0 * (double)type_elems(&f->inst.a[k]->type) / bw;
  printf("ring over 100 MB/s: %d ring ops, their hops %.3f ms, step %.3f ms, compute %.3f ms\n",
         rings, hops * 1e3, step * 1e3, compute_time(f, 40) * 1e3);
  assert_true(step >= hops);
  assert_true(step <= hops + rest);
  assert_true(r.dev[1].comm >= hops - compute_time(f, 40));
  arena_free(a);
}

/* A causal ring's model on two equal devices, its sequence of T = 512 cut
 * as `split` says, the devices' figures ending in `fig`. */
static Module *causal_ring(Arena *a, const char *split, const char *fig) {
  return compile_text(a, arena_printf(a, "%s%s%s%s%s%s%s",
      "model att(batch B = 1, T = 512, H = 2, D = 16) {\n"
      "  input  x: f32[B, H, T, D]\n"
      "  param  w: f32[D, D] init glorot\n"
      "  y    = scaled_dot_product_attention(x @ w, x, x, is_causal = true)\n"
      "  loss = mean(y * y)\n"
      "  minimize loss with sgd(lr = 0.1)\n"
      "}\n"
      "cluster c {\n  node a {\n"
      "    device d0: cpu(gflops = 40, mem = 1GiB", fig, ")\n"
      "    device d1: cpu(gflops = 40, mem = 1GiB", fig, ")\n  }\n" LINKS
      "parallel att on c {\n  mesh m[cp = 2] over d0, d1\n  shard x: [*, *, ", split,
      ", *]\n  plan explicit\n}\n"));
}

/* What the ring ops took on each device beyond sim_compute_time's even
 * share, over the pairs of queries and keys that share counts. */
typedef struct RingSeen {
  const Module *m;
  double over[2], want[2];   /* by device: the extra seconds, the expected */
  double f[2];               /* by device: its pieces' pairs over its even share's */
  bool probed;               /* the devices give attn = 0.5 and score = 1ns */
  int rings;
} RingSeen;

static void ring_seen(void *user, int device, const Inst *i, bool comm, double start,
                      double dt) {
  (void)start;
  RingSeen *s = user;
  if (comm || (i->op != OP_ring_sdpa && i->op != OP_ring_sdpa_lse && i->op != OP_ring_sdpa_grad))
    return;
  assert_true(ir_get_int(i, "causal", 0));
  s->rings++;
  s->over[device] += dt - sim_compute_time(s->m, i, device);
  /* the blocks run at 0.65 of the GEMM's speed at heads of 16 (sim.c), or
   * at a probed half of it with 1 ns for each score (ir_attn_scores) */
  s->want[device] += (s->f[device] - 1) * (s->probed ? ir_flops(i) / (0.5 * 40e9) +
                                                           ir_attn_scores(i) * 1e-9
                                                     : ir_flops(i) / (0.65 * 40e9));
}

/* Causal ring attention on two equal devices. A query at position q sees q
 * + 1 keys, and ir/cost.c counts a device's even share of the triangle, n
 * (T + 1) / 2 pairs for its n queries. The ring runs in a zig-zag
 * (dtrt_ring_piece): device 0 works on the early half of its block and the
 * late half of device 1's, device 1 on the early half of its own and the
 * late half of device 0's.
 * - Halves, blocks [0, 256) and [256, 512): device 0 has [0, 128) and
 *   [384, 512), sum of q + 1 = 8256 + 57408 = 65664 pairs; device 1 has
 *   [256, 384) and [128, 256), 41024 + 24640 = 65664: balanced, each exactly
 *   its even share 256 * 513 / 2 = 65664 (f = 1), where blocks as they lie
 *   gave 32896 and 98432.
 * - 3:1, blocks [0, 384) and [384, 512): device 0 has [0, 192) and [448,
 *   512), 18528 + 30752 = 49280 pairs, f = 49280 / (384 * 513 / 2) =
 *   0.5003; device 1 has [384, 448) and [192, 384), 26656 + 55392 = 82048
 *   pairs, f = 82048 / (128 * 513 / 2) = 2.4990.
 * The simulator prices each ring op on each device at its even share's
 * time plus (f - 1) times its FLOPs at the blocks' speed, and its scores'
 * time when the devices give a probed `attn` and `score`. */
static void test_ring_causal_place(void **state) {
  (void)state;
  static const struct {
    const char *split;
    double f[2];
  } cases[] = {
    {"cp", {1, 1}},
    {"cp(0.75, 0.25)", {49280 / (384 * 513 / 2.0), 82048 / (128 * 513 / 2.0)}},
  };
  for (int c = 0; c < 2 * COUNTOF(cases); c++) {
    Arena *a = arena_new();
    bool probed = c >= COUNTOF(cases);
    Module *m = causal_ring(a, cases[c % COUNTOF(cases)].split,
                            probed ? ", attn = 0.5, score = 1ns" : "");
    RingSeen s = {.m = m, .f = {cases[c % COUNTOF(cases)].f[0], cases[c % COUNTOF(cases)].f[1]},
                  .probed = probed};
    SimResult r;
    assert_true(sim_run(m, &r, ring_seen, &s) > 0);
    printf("causal ring %s: ring ops over their even shares %.3f and %.3f ms, the pairs say "
           "%.3f and %.3f ms; compute %.3f and %.3f ms\n", cases[c % COUNTOF(cases)].split, s.over[0] * 1e3,
           s.over[1] * 1e3, s.want[0] * 1e3, s.want[1] * 1e3, r.dev[0].compute * 1e3,
           r.dev[1].compute * 1e3);
    assert_true(s.rings >= 4);   /* two ops or more on each device */
    for (int d = 0; d < 2; d++)
      assert_true(fabs(s.over[d] - s.want[d]) <= 1e-6 * r.dev[d].compute);
    if (c % COUNTOF(cases) == 0)   /* the rest of the step is the same on both */
      assert_true(fabs(r.dev[1].compute - r.dev[0].compute) <= 1e-6 * r.dev[0].compute);
    else
      assert_true(s.want[0] < 0 && s.want[1] > 0);
    arena_free(a);
  }
}

static void test_even_vs_uneven(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *even = compile(a, arena_printf(a, "%s%s", one_node, dp_even));
  Module *uneven = compile(a, arena_printf(a, "%s%s", one_node, dp_uneven));
  SimResult re, ru;
  double te = sim_step(even, &re), tu = sim_step(uneven, &ru);
  assert_true(te > 0 && tu > 0);
  assert_true(te > tu);
  /* even: the 40 GFLOP/s device computes as long as the other twice over */
  assert_true(re.dev[1].compute > 1.5 * re.dev[0].compute);
  /* 2:1: their compute times are close */
  assert_true(fabs(ru.dev[1].compute - ru.dev[0].compute) < 0.2 * ru.dev[0].compute);
  arena_free(a);
}

static void test_trace_json(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, arena_printf(a, "%s%s", two_nodes, dp_uneven));
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  SimResult r;
  double step = sim_trace_json(out, m, &r);
  fclose(out);
  assert_true(step > 0);
  cJSON *root = cJSON_Parse(buf);
  assert_non_null(root);
  const cJSON *ev = cJSON_GetObjectItem(root, "traceEvents");
  assert_true(cJSON_IsArray(ev));
  double busy[2][2] = {{0}}, end = 0;
  int comm[2] = {0}, meta = 0, nar;
  const cJSON *e;
  cJSON_ArrayForEach(e, ev) {
    const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
    int pid = cJSON_GetObjectItem(e, "pid")->valueint;
    assert_true(pid == 0 || pid == 1);
    if (!strcmp(ph, "M")) {
      meta++;
      continue;
    }
    assert_string_equal(ph, "X");
    int tid = cJSON_GetObjectItem(e, "tid")->valueint;
    double ts = cJSON_GetObjectItem(e, "ts")->valuedouble;
    double dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
    const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
    assert_true(tid == 0 || tid == 1);
    assert_non_null(strstr(name, " t.dt:"));
    if (tid == 1) {
      assert_true(!strncmp(name, "all_reduce", 10));
      comm[pid]++;
    }
    busy[pid][tid] += dur;
    end = fmax(end, ts + dur);
  }
  allreduce_time(step_func(m, 0), 1, 0, &nar);
  assert_int_equal(meta, 2);
  assert_int_equal(comm[0], nar);
  assert_int_equal(comm[1], nar);
  for (int d = 0; d < 2; d++) {
    assert_true(fabs(busy[d][0] - r.dev[d].compute * 1e6) < 0.1);
    assert_true(fabs(busy[d][1] - r.dev[d].comm * 1e6) < 0.1);
  }
  assert_true(fabs(end - step * 1e6) < 0.01);
  cJSON_Delete(root);
  free(buf);
  arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_device), cmocka_unit_test(test_embedding_bag_bytes),
      cmocka_unit_test(test_demo_slowness),
    cmocka_unit_test(test_roofline),
      cmocka_unit_test(test_data_parallel_intra),
      cmocka_unit_test(test_data_parallel_inter),
      cmocka_unit_test(test_even_vs_uneven),
    cmocka_unit_test(test_ring_transfers),
      cmocka_unit_test(test_ring_causal_place),
      cmocka_unit_test(test_sparse_update_bytes),
      cmocka_unit_test(test_random_rows),
      cmocka_unit_test(test_sparse_entries),
      cmocka_unit_test(test_table_wise_idle),
      cmocka_unit_test(test_attn_probed),
      cmocka_unit_test(test_trace_json),
      cmocka_unit_test(test_gemm_tiles),
      cmocka_unit_test(test_gemm_spill_product),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
