/* test_spmd_train.c: SPMD programs against the single-device program. Each model is
 * compiled twice from the same source: once through autodiff only (the global
 * @train_step, run by the interpreter) and once through the whole pipeline
 * (sharding, spmd, fusion, memplan: per-device functions, run by the SPMD
 * simulator). Both start from the same params and see the same batches; after
 * every step the losses agree, and at the end every param and optimizer state,
 * put together from the devices' blocks, agrees:
 *
 *   loss:          |a - b| <= 1e-5 (1 + |b|)
 *   each tensor:   max |a - b| <= 1e-4 max |b|      (state __m is the gradient's
 *                                                   running mean: a gradient check)
 *
 * and every replicated global is bit-identical on all devices. Models: an MLP
 * data parallel over 2 and 3 devices, even and uneven; Megatron tensor
 * parallel over 2 (even and uneven, one with a reduce_scatter); conflicting
 * layouts (all_to_all); table-wise tables (empty blocks off their
 * devices); dp x tp on a 2x2 mesh, even and uneven; the
 * transformer example with its attention heads split over a mesh axis, and
 * data parallel; pads with values (-inf, 0.75, and 0.5 after a partial sum)
 * tensor and data parallel; the optimizer state split over dp (shard_state:
 * SGD with momentum, Adam and AdamW on 2, 3 uneven and 4 devices, with
 * clipping and with accumulation). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

#define LOSS_TOL 1e-5
#define TENSOR_TOL 1e-4

static const char *mlp_src =
    "model mlp(batch B = 12) {\n"
    "  input  x: f32[B, 8]\n"
    "  input  y: i32[B]\n"
    "  param  w1: f32[8, 16]\n"
    "  param  b1: f32[16]\n"
    "  param  w2: f32[16, 5]\n"
    "  param  b2: f32[5]\n"
    "  h      = relu(x @ w1 + b1)\n"
    "  logits = h @ w2 + b2\n"
    "  loss   = cross_entropy(logits, y)\n"
    "  output logits\n"
    "  minimize loss with %s\n"
    "}\n";

static const char *cluster_src =
    "cluster c {\n"
    "  node a {\n"
    "    device a0: cpu(gflops = 80, mem = 1GiB)\n"
    "    device a1: cpu(gflops = 80, mem = 1GiB)\n"
    "  }\n"
    "  node b {\n"
    "    device b0: cpu(gflops = 40, mem = 1GiB)\n"
    "    device b1: cpu(gflops = 40, mem = 1GiB)\n"
    "  }\n"
    "  link intra(bw = 20GB/s, lat = 1us)\n"
    "  link inter(bw = 1GB/s, lat = 50us)\n"
    "}\n";

/* ---- compiling ---- */

typedef struct Pair {
  Arena *a;
  Module *g, *s;       /* global program; per-device program */
  Interp *it;
  InterpMesh *sim;
  char *log;
  size_t loglen;
  FILE *out;
} Pair;

/* Frontend, then the pipeline up to and including pass `last`. */
static Module *compile(Pair *p, const char *text, const char *const *defs, int ndefs,
                       const char *last) {
  Diag d;
  diag_init(&d, p->out);
  d.wflags = 0;
  Module *m = fe_compile(p->a, src_from_string(p->a, "t.dt", text), defs, ndefs, &d);
  assert_non_null(m);
  bool ok = passes_run(m, &d, &(PassOptions){.stop_after = last, .verify_each = true}, NULL);
  fflush(p->out);
  if (!ok)
    fail_msg("the pipeline failed:\n%s", p->log);
  return m;
}

static void pair_init(Pair *p, const char *text, const char *const *defs, int ndefs) {
  memset(p, 0, sizeof *p);
  p->a = arena_new();
  p->out = open_memstream(&p->log, &p->loglen);
  assert_non_null(p->out);
  p->g = compile(p, text, defs, ndefs, "autodiff");
  p->s = compile(p, text, defs, ndefs, "memplan");
  p->it = interp_new(p->g);
  p->sim = interp_mesh_new(p->s);
}

static void pair_free(Pair *p) {
  interp_free(p->it);
  interp_mesh_free(p->sim);
  fclose(p->out);
  free(p->log);
  arena_free(p->a);
}

/* The model, the cluster and the parallel block, whose layouts are the ones
 * it writes: `plan explicit` unless it names its plan. */
static char *cat(const char *model, const char *parallel) {
  size_t lp = strlen(parallel), n = strlen(model) + strlen(cluster_src) + lp + 32;
  char *s = malloc(n);
  assert_non_null(s);
  if (!strstr(parallel, " plan ") && lp >= 2 && !strcmp(parallel + lp - 2, "}\n"))
    snprintf(s, n, "%s%s%.*s plan explicit\n}\n", model, cluster_src, (int)(lp - 2), parallel);
  else
    snprintf(s, n, "%s%s%s", model, cluster_src, parallel);
  return s;
}

static char *mlp_with(const char *opt, const char *parallel) {
  char model[1024];
  snprintf(model, sizeof model, mlp_src, opt);
  return cat(model, parallel);
}

/* ---- data ---- */

static uint64_t rng = 88172645463325252ull;

static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* Fresh values for every global of `kind`: f32 uniform in [-r, r], i32 in
 * [0, hi) where hi is the largest dimension of the module named V or the
 * second dimension of the first f32 output (class count). */
static void feed(Pair *p, GlobalKind kind, double r, int hi) {
  for (int k = 0; k < p->g->global.n; k++) {
    const Global *gl = &p->g->global.a[k];
    if (gl->kind != kind)
      continue;
    int64_t n = type_elems(&gl->type);
    void *buf = malloc((size_t)n * 4);
    assert_non_null(buf);
    for (int64_t e = 0; e < n; e++)
      if (gl->type.dtype == DT_F32)
        ((float *)buf)[e] = (float)((2 * uniform() - 1) * r);
      else
        ((int32_t *)buf)[e] = (int32_t)(uniform() * hi);
    assert_true(interp_set_global(p->it, gl->name, buf));
    assert_true(interp_mesh_set_global(p->sim, gl->name, buf));
    free(buf);
  }
}

/* ---- comparing ---- */

static void check_tensors(Pair *p, const char *label) {
  double worst = 0;
  const char *worst_name = "";
  for (int k = 0; k < p->g->global.n; k++) {
    const Global *gl = &p->g->global.a[k];
    if (gl->kind == G_INPUT)
      continue;
    int64_t n = type_elems(&gl->type);
    float *a = calloc((size_t)n, 4);
    assert_non_null(a);
    assert_true(interp_mesh_get_global(p->sim, gl->name, a));
    const float *b = interp_global(p->it, gl->name);
    double diff = 0, mag = 0;
    for (int64_t e = 0; e < n; e++) {
      diff = fmax(diff, fabs((double)a[e] - b[e]));
      mag = fmax(mag, fabs((double)b[e]));
    }
    double rel = mag > 0 ? diff / mag : diff;
    if (rel > worst)
      worst = rel, worst_name = gl->name;
    if (rel > TENSOR_TOL)
      fail_msg("%s: %s differs: max |spmd - global| = %g, max |global| = %g", label, gl->name,
               diff, mag);
    free(a);
  }
  print_message("%s: worst tensor difference %.2e (%s)\n", label, worst, worst_name);
}

/* Replicated globals are the same, bit for bit, on every device. */
static void check_replicas(Pair *p) {
  Module *m = p->s;
  for (int k = 0; k < m->global.n; k++) {
    const Global *gl = &m->global.a[k];
    bool whole = true;
    for (int d = 0; d < gl->type.rank; d++)
      whole &= gl->shard->axis[d] < 0;
    if (!whole)
      continue;
    const void *d0 = interp_global(interp_mesh_device(p->sim, 0), gl->name);
    for (int dev = 1; dev < interp_mesh_devices(p->sim); dev++)
      if (memcmp(d0, interp_global(interp_mesh_device(p->sim, dev), gl->name),
                 (size_t)type_elems(&gl->type) * 4))
        fail_msg("replicated %s differs between devices 0 and %d", gl->name, dev);
  }
}

/* Trains both programs `steps` steps on the same batches. */
static void train(Pair *p, int steps, int classes, const char *label) {
  rng = 88172645463325252ull;
  feed(p, G_PARAM, 0.5, 1);
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    feed(p, G_INPUT, 1.0, classes);
    float lg = 0, ls = 0;
    if (!interp_run(p->it, "train_step", (void *[]){&lg}))
      fail_msg("%s: global step %d: %s", label, s, interp_error(p->it));
    if (!interp_mesh_run(p->sim, "train_step", (void *[]){&ls}))
      fail_msg("%s: spmd step %d: %s", label, s, interp_mesh_error(p->sim));
    double e = fabs((double)ls - lg);
    worst = fmax(worst, e / (1 + fabs(lg)));
    if (e > LOSS_TOL * (1 + fabs(lg)))
      fail_msg("%s: step %d: loss %.9g on the mesh, %.9g on one device", label, s, ls, lg);
  }
  print_message("%s: %d steps, worst loss difference %.2e\n", label, steps, worst);
  check_tensors(p, label);
  check_replicas(p);
}

/* Collectives of op `op` in a function. */
static int count(const Module *m, const char *func, Op op) {
  const Func *f = ir_find_func(m, func);
  assert_non_null(f);
  int n = 0;
  for (int k = 0; k < f->inst.n; k++)
    n += f->inst.a[k]->op == op;
  return n;
}

static int count_comm(const Module *m, const char *func) {
  return count(m, func, OP_all_reduce) + count(m, func, OP_all_gather) +
         count(m, func, OP_reduce_scatter) + count(m, func, OP_all_to_all) +
         count(m, func, OP_shard_slice);
}

/* The forward of the mesh gives the global logits, put together. */
static void check_forward(Pair *p, int64_t rows, int64_t cols, const char *label) {
  float *a = calloc((size_t)(rows * cols), 4), *b = calloc((size_t)(rows * cols), 4);
  assert_true(a && b);
  assert_true(interp_run(p->it, "forward", (void *[]){b, NULL}));
  if (!interp_mesh_run(p->sim, "forward", (void *[]){a, NULL}))
    fail_msg("%s: forward: %s", label, interp_mesh_error(p->sim));
  double diff = 0;
  for (int64_t e = 0; e < rows * cols; e++)
    diff = fmax(diff, fabs((double)a[e] - b[e]));
  if (diff > 1e-5)
    fail_msg("%s: forward logits differ by %g", label, diff);
  free(a);
  free(b);
}

/* ---- data parallel ---- */

static void dp(const char *parallel, const char *opt, const char *const *defs, int ndefs,
               int64_t batch, const char *label) {
  char *text = mlp_with(opt, parallel);
  Pair p;
  pair_init(&p, text, defs, ndefs);
  train(&p, 6, 5, label);
  check_forward(&p, batch, 5, label);
  /* the four param gradients' all_reduces in one bucket (passes/coalesce.c),
   * one for the loss; nothing else */
  assert_int_equal(count(p.s, "train_step.0", OP_all_reduce), 2);
  assert_int_equal(count_comm(p.s, "train_step.0"), 2);
  pair_free(&p);
  free(text);
}

static void test_dp2(void **state) {
  (void)state;
  dp("parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n shard y: [dp]\n}\n",
     "adam(lr = 0.05)", NULL, 0, 12, "dp2 even");
}

static void test_dp3(void **state) {
  (void)state;
  dp("parallel mlp on c {\n mesh m[dp = 3] over a0, a1, b0\n shard x: [dp, *]\n"
     " shard y: [dp]\n}\n",
     "sgd(lr = 0.2, momentum = 0.9, weight_decay = 0.01)", NULL, 0, 12, "dp3 even sgd");
}

static void test_dp3_uneven(void **state) {
  (void)state;
  const char *defs[] = {"B=10"};
  dp("parallel mlp on c {\n mesh m[dp = 3] over a0, a1, b0\n shard x: [dp(0.5, 0.3, 0.2), *]\n"
     " shard y: [dp(0.5, 0.3, 0.2)]\n}\n",
     "adam(lr = 0.05)", defs, 1, 10, "dp3 uneven 5:3:2");
}

static void test_dp2_uneven(void **state) {
  (void)state;
  const char *defs[] = {"B=11"};
  dp("parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp(0.7, 0.3), *]\n"
     " shard y: [dp(0.7, 0.3)]\n}\n",
     "adamw(lr = 0.05)", defs, 1, 11, "dp2 uneven 8:3");
}

/* ---- optimizer state split over dp (shard_state = dp, ZeRO) ---- */

/* Device dev's share of the optimizer state, in elements. */
static int64_t state_on(const Module *m, int dev) {
  int64_t n = 0;
  for (int k = 0; k < m->global.n; k++)
    if (m->global.a[k].kind == G_STATE) {
      Type t = ir_global_type_on(m, &m->global.a[k], dev);
      n += type_elems(&t);
    }
  return n;
}

/* Trains a model whose state is split over dp against one device; each
 * param's gradient is reduce-scattered (none all-reduced: the loss alone),
 * its update all-gathered, and device dev holds share[dev] of the state
 * (the batch's ratio) within a row of each of the 8 state tensors. */
static void zero(const char *parallel, const char *opt, const char *const *defs, int ndefs,
                 int64_t batch, const double *share, int ndev, const char *label) {
  char *text = mlp_with(opt, parallel);
  Pair p;
  pair_init(&p, text, defs, ndefs);
  train(&p, 6, 5, label);
  check_forward(&p, batch, 5, label);
  /* the loss; the four gradients and the four params each in a bucket */
  assert_int_equal(count(p.s, "train_step.0", OP_all_reduce), 1);
  assert_int_equal(count(p.s, "train_step.0", OP_reduce_scatter), 1);
  assert_int_equal(count(p.s, "train_step.0", OP_all_gather), 1);
  int64_t total = 0;
  for (int dev = 0; dev < ndev; dev++)
    total += state_on(p.s, dev);
  for (int dev = 0; dev < ndev; dev++)
    if (fabs((double)state_on(p.s, dev) - share[dev] * (double)total) > 8 * 16)
      fail_msg("%s: device %d holds %lld of %lld state elements, not about %g of them", label,
               dev, (long long)state_on(p.s, dev), (long long)total, share[dev]);
  pair_free(&p);
  free(text);
}

static void test_zero_dp2(void **state) {
  (void)state;
  zero("parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n shard y: [dp]\n"
       " shard_state = dp\n}\n",
       "adam(lr = 0.05)", NULL, 0, 12, (double[]){0.5, 0.5}, 2, "zero dp2 even adam");
}

static void test_zero_dp3_uneven(void **state) {
  (void)state;
  const char *defs[] = {"B=10"};
  zero("parallel mlp on c {\n mesh m[dp = 3] over a0, a1, b0\n shard x: [dp(0.5, 0.3, 0.2), *]\n"
       " shard y: [dp(0.5, 0.3, 0.2)]\n shard_state = dp\n}\n",
       "sgd(lr = 0.2, momentum = 0.9, weight_decay = 0.01)", defs, 1, 10,
       (double[]){0.5, 0.3, 0.2}, 3, "zero dp3 uneven 5:3:2 sgd momentum");
}

static void test_zero_dp4(void **state) {
  (void)state;
  zero("parallel mlp on c {\n mesh m[dp = 4]\n shard x: [dp, *]\n shard y: [dp]\n"
       " shard_state = dp\n}\n",
       "adamw(lr = 0.05, weight_decay = 0.1)", NULL, 0, 12, (double[]){0.25, 0.25, 0.25, 0.25},
       4, "zero dp4 even adamw");
}

/* Clipping (a norm over every gradient) and accumulation (a state of the
 * gradient's own) under the split: the same training as one device. */
static void test_zero_clip_accumulate(void **state) {
  (void)state;
  const char *opts[] = {"adam(lr = 0.05, clip_norm = 0.5)", "adam(lr = 0.05, accumulate = 2)"};
  for (int k = 0; k < COUNTOF(opts); k++) {
    char *text = mlp_with(opts[k], "parallel mlp on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n"
                                   " shard y: [dp]\n shard_state = dp\n}\n");
    Pair p;
    pair_init(&p, text, NULL, 0);
    train(&p, 6, 5, opts[k]);
    pair_free(&p);
    free(text);
  }
}

/* dp x tp: Megatron's split params keep their tp split, their state split
 * over dp as well (w1__m [dp, tp], w2__m [tp, dp]), and their gradients,
 * with b2's, reduce-scattered over dp; b1 [tp] has no dim left to split, so
 * its state stays as b1 and its gradient is all-reduced (beside the loss's
 * and the forward's over tp). */
static void test_zero_2d(void **state) {
  (void)state;
  char *text = mlp_with("adam(lr = 0.05)",
                        "parallel mlp on c {\n mesh m[dp = 2, tp = 2]\n shard x: [dp, *]\n"
                        " shard y: [dp]\n shard w1: [*, tp]\n shard b1: [tp]\n"
                        " shard w2: [tp, *]\n shard_state = dp\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  train(&p, 6, 5, "zero 2x2 dp x tp");
  const Global *w2m = ir_find_global(p.s, "w2__m");
  assert_true(w2m->shard->axis[0] == 1 && w2m->shard->axis[1] == 0);
  assert_int_equal(count(p.s, "train_step.3", OP_reduce_scatter), 1);   /* a bucket */
  assert_int_equal(count(p.s, "train_step.3", OP_all_reduce), 3);
  pair_free(&p);
  free(text);
}

/* ---- tensor parallel (Megatron) ---- */

static void tp(const char *parallel, const char *label, int forward_reduces) {
  char *text = mlp_with("adam(lr = 0.05)", parallel);
  Pair p;
  pair_init(&p, text, NULL, 0);
  train(&p, 6, 5, label);
  check_forward(&p, 12, 5, label);
  /* one all_reduce per block in the forward: h @ w2 before + b2 */
  assert_int_equal(count(p.s, "forward.0", OP_all_reduce), forward_reduces);
  assert_int_equal(count_comm(p.s, "forward.0"), forward_reduces);
  pair_free(&p);
  free(text);
}

static void test_tp2(void **state) {
  (void)state;
  tp("parallel mlp on c {\n mesh m[tp = 2]\n shard w1: [*, tp]\n shard b1: [tp]\n"
     " shard w2: [tp, *]\n}\n", "tp2 megatron", 1);
}

/* Clipping by the global norm on split gradients: each device's sum of
 * squares is a partial sum, reduced before the norm, so every device scales
 * by the whole gradient's norm, as one device does. */
static void test_tp2_clip(void **state) {
  (void)state;
  char *text = mlp_with("adam(lr = 0.05, clip_norm = 0.05)",
                        "parallel mlp on c {\n mesh m[tp = 2]\n shard w1: [*, tp(0.75, 0.25)]\n"
                        " shard b1: [tp(0.75, 0.25)]\n shard w2: [tp(0.75, 0.25), *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  train(&p, 6, 5, "tp2 megatron uneven, clipped");
  pair_free(&p);
  free(text);
}

static void test_tp2_uneven(void **state) {
  (void)state;
  tp("parallel mlp on c {\n mesh m[tp = 2]\n shard w1: [*, tp(0.75, 0.25)]\n"
     " shard b1: [tp(0.75, 0.25)]\n shard w2: [tp(0.75, 0.25), *]\n}\n",
     "tp2 megatron uneven 12:4", 1);
}

/* Unannotated b1 and w2 follow w1's split: b1 split like w1's columns, w2 by
 * rows (the k-split form keeps h's split), so the forward again needs only
 * its one all_reduce. */
static void test_tp2_inferred(void **state) {
  (void)state;
  char *text = mlp_with("adam(lr = 0.05)",
                        "parallel mlp on c {\n mesh m[tp = 2]\n shard w1: [*, tp]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  const Global *b1 = ir_find_global(p.s, "b1"), *w2 = ir_find_global(p.s, "w2");
  assert_int_equal(b1->shard->axis[0], 0);
  assert_int_equal(w2->shard->axis[0], 0);
  assert_int_equal(w2->shard->axis[1], -1);
  assert_int_equal(count_comm(p.s, "forward.1"), 1);
  train(&p, 4, 5, "tp2 inferred");
  pair_free(&p);
  free(text);
}

/* b2 split too, 3:2: the partial h @ w2 meets the split b2, so it is
 * reduce-scattered to b2's uneven columns, then gathered whole for
 * cross_entropy. */
static void test_tp2_reduce_scatter(void **state) {
  (void)state;
  char *text = mlp_with("adam(lr = 0.05)",
                        "parallel mlp on c {\n mesh m[tp = 2]\n shard w1: [*, tp]\n"
                        " shard w2: [tp, *]\n shard b2: [tp(0.6, 0.4)]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  assert_int_equal(count(p.s, "forward.0", OP_reduce_scatter), 1);
  assert_int_equal(count(p.s, "forward.0", OP_all_gather), 1);
  train(&p, 6, 5, "tp2 reduce_scatter");
  check_forward(&p, 12, 5, "tp2 reduce_scatter");
  pair_free(&p);
  free(text);
}

/* pad with values across devices: h split by columns is padded along them
 * (gathered first: the padded axis is whole) with -inf for a max and 0.75;
 * the partial h @ w2 is padded with 0.5 only once it is reduced (each
 * device's partial pad would add its own 0.5), then meets the split b2.
 * Tensor parallel, then data parallel (each device pads its rows). */
static const char *pad_src =
    "model padnet(batch B = 12) {\n"
    "  input  x: f32[B, 8]\n"
    "  input  y: i32[B]\n"
    "  param  w1: f32[8, 16]\n"
    "  param  b1: f32[16]\n"
    "  param  w2: f32[16, 5]\n"
    "  param  w3: f32[19, 7]\n"
    "  param  b2: f32[7]\n"
    "  h      = relu(x @ w1 + b1)\n"
    "  top    = max(pad(h, [2, 1], value = -inf), axis = -1, keepdim = true)\n"
    "  logits = pad(h @ w2, [1, 1], value = 0.5) + b2 + pad(h, [1, 2], value = 0.75) @ w3 + top\n"
    "  loss   = cross_entropy(logits, y)\n"
    "  output logits\n"
    "  minimize loss with adam(lr = 0.05)\n"
    "}\n";

static void pad_values(const char *parallel, const char *label) {
  char *text = cat(pad_src, parallel);
  Pair p;
  pair_init(&p, text, NULL, 0);
  /* partial sums pass a pad of 0 (slice's derivative) only */
  const Func *f = ir_find_func(p.g, "train_step");
  int pads = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    DimMap dm;
    if (i->op != OP_pad)
      continue;
    assert_true(shard_map(i, &dm));
    assert_int_equal(dm.linear, ir_get_float(i, "value", 0) == 0);
    pads += !dm.linear;
  }
  assert_int_equal(pads, 3);
  train(&p, 6, 7, label);
  check_forward(&p, 12, 7, label);
  pair_free(&p);
  free(text);
}

static void test_pad_values_tp2(void **state) {
  (void)state;
  pad_values("parallel padnet on c {\n mesh m[tp = 2]\n shard w1: [*, tp]\n shard b1: [tp]\n"
             " shard w2: [tp, *]\n shard b2: [tp(0.6, 0.4)]\n}\n",
             "pad values tp2");
}

static void test_pad_values_dp2(void **state) {
  (void)state;
  pad_values("parallel padnet on c {\n mesh m[dp = 2]\n shard x: [dp(0.6, 0.4), *]\n"
             " shard y: [dp(0.6, 0.4)]\n}\n",
             "pad values dp2 uneven");
}

/* Layouts that disagree: x split by rows, c by columns (an all_to_all each
 * way), w by rows against x * c's rows (gathered in the forward, the one
 * all_gather: the backward reshards nothing the forward or the update's
 * forms do not ask for). */
static void test_all_to_all(void **state) {
  (void)state;
  char *text = cat("model z(batch B = 4) {\n"
                   "  input  x: f32[B, 6]\n"
                   "  input  t: f32[B, 6]\n"
                   "  param  c: f32[B, 6]\n"
                   "  param  w: f32[6, 6]\n"
                   "  loss   = mse((x * c) @ w, t)\n"
                   "  minimize loss with adam(lr = 0.05)\n"
                   "}\n",
                   "parallel z on c {\n mesh m[dp = 2]\n shard x: [dp, *]\n shard t: [dp, *]\n"
                   " shard c: [*, dp]\n shard w: [dp, *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  assert_int_equal(count(p.s, "train_step.1", OP_all_to_all), 2);
  assert_int_equal(count(p.s, "train_step.1", OP_all_gather), 1);
  assert_true(count(p.s, "train_step.1", OP_shard_slice) >= 1);
  train(&p, 6, 1, "all_to_all, gathers, slices");
  pair_free(&p);
  free(text);
}

/* Two column splits in a row (w1 and w2 by columns, w3 by rows, uneven):
 * the forward gathers h1 whole for h1 @ w2, and w2's gradient h1^T @ dh2
 * takes dh2's split of columns, w2's own, so that nothing is moved for it
 * (it once took h1's, a gather of dh2 and an all_to_all into w2's form). */
static void test_column_chain(void **state) {
  (void)state;
  char *text = cat("model cc(batch B = 6) {\n"
                   "  input  x: f32[B, 5]\n"
                   "  input  y: i32[B]\n"
                   "  param  w1: f32[5, 8]\n"
                   "  param  w2: f32[8, 8]\n"
                   "  param  w3: f32[8, 3]\n"
                   "  h1     = relu(x @ w1)\n"
                   "  h2     = relu(h1 @ w2)\n"
                   "  loss   = cross_entropy(h2 @ w3, y)\n"
                   "  minimize loss with sgd(lr = 0.1, momentum = 0.9)\n"
                   "}\n",
                   "parallel cc on c {\n mesh m[tp = 2]\n shard w1: [*, tp(0.75, 0.25)]\n"
                   " shard w2: [*, tp(0.75, 0.25)]\n shard w3: [tp(0.75, 0.25), *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  for (int d = 0; d < 2; d++) {
    const char *f = d ? "train_step.1" : "train_step.0";
    assert_int_equal(count(p.s, f, OP_all_to_all), 0);
    assert_int_equal(count(p.s, f, OP_all_gather), 1);
  }
  train(&p, 6, 1, "column splits in a row");
  pair_free(&p);
  free(text);
}

/* Table-wise tables: e (sparse, Adagrad's rows) whole on a1, f whole on a0,
 * the rest split by batch; the devices not holding a table hold empty
 * blocks of it, its state and its pooled value, and the pooled values of
 * both go to the batch's split by one all_to_all each way (coalesced). */
static void test_table_wise(void **state) {
  (void)state;
  char *text = cat("model t(batch B = 4) {\n"
                   "  input  ids: i32[B, 3]\n"
                   "  input  cats: i32[B, 2]\n"
                   "  input  x: f32[B, 2]\n"
                   "  input  y: f32[B, 1]\n"
                   "  param  e: f32[10, 4] sparse\n"
                   "  param  f: f32[10, 4]\n"
                   "  param  w: f32[10, 1]\n"
                   "  a      = embedding_bag(ids, e, mode = \"mean\")\n"
                   "  c      = embedding_bag(cats, f)\n"
                   "  loss   = mse(concat(x, a, c, axis = 1) @ w, y)\n"
                   "  minimize loss with adagrad(lr = 0.1)\n"
                   "}\n",
                   "parallel t on c {\n mesh m[dp = 2]\n shard e: on dp[1]\n shard f: on dp[0]\n"
                   " shard x: [dp, *]\n shard y: [dp, *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  assert_int_equal(count(p.s, "train_step.0", OP_all_to_all), 2);
  Type t = ir_global_type_on(p.s, ir_find_global(p.s, "e"), 0);
  assert_int_equal(t.dim[1], 0);
  t = ir_global_type_on(p.s, ir_find_global(p.s, "e__sum"), 1);
  assert_int_equal(t.dim[1], 4);
  train(&p, 6, 10, "table-wise");
  pair_free(&p);
  free(text);
}

/* ---- 2-D: data parallel across nodes, tensor parallel inside ---- */

static void test_2d(void **state) {
  (void)state;
  char *text = mlp_with("adam(lr = 0.05)",
                        "parallel mlp on c {\n mesh m[dp = 2, tp = 2]\n shard x: [dp, *]\n"
                        " shard y: [dp]\n shard w1: [*, tp]\n shard b1: [tp]\n"
                        " shard w2: [tp, *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  train(&p, 6, 5, "2x2 dp x tp");
  check_forward(&p, 12, 5, "2x2 dp x tp");
  /* forward: the tp all_reduce; train step: that, four gradients over dp in
   * one bucket (passes/coalesce.c), the loss */
  assert_int_equal(count(p.s, "forward.3", OP_all_reduce), 2);
  assert_int_equal(count(p.s, "train_step.3", OP_all_reduce), 3);
  assert_int_equal(count_comm(p.s, "train_step.3"), 3);
  pair_free(&p);
  free(text);
}

static void test_2d_uneven(void **state) {
  (void)state;
  char *text = mlp_with("sgd(lr = 0.1, momentum = 0.5)",
                        "parallel mlp on c {\n mesh m[dp = 2, tp = 2]\n"
                        " shard x: [dp(0.75, 0.25), *]\n shard y: [dp(0.75, 0.25)]\n"
                        " shard w1: [*, tp(0.625, 0.375)]\n shard b1: [tp(0.625, 0.375)]\n"
                        " shard w2: [tp(0.625, 0.375), *]\n}\n");
  Pair p;
  pair_init(&p, text, NULL, 0);
  train(&p, 6, 5, "2x2 uneven 9:3 x 10:6");
  pair_free(&p);
  free(text);
}

/* ---- the transformer example ---- */

static char *read_example(const char *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", DTC_TEST_EXAMPLES, name);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  assert_non_null(s);
  assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return s;
}

static const char *gpt_defs[] = {"B=4", "T=8", "D=16", "H=4", "V=12"};

static void test_transformer_heads(void **state) {
  (void)state;
  char *model = read_example("transformer.dt");
  char *text = cat(model, "parallel gpt on c {\n mesh m[tp = 2]\n"
                          " shard wq: [*, tp]\n shard wk: [*, tp]\n shard wv: [*, tp]\n"
                          " shard wo: [tp, *]\n shard w_up: [*, tp]\n shard b_up: [tp]\n"
                          " shard w_dn: [tp, *]\n}\n");
  Pair p;
  pair_init(&p, text, gpt_defs, COUNTOF(gpt_defs));
  /* the attention reshapes [B, T, D] -> [B, T, H, D/H] of q, k, v split the heads */
  const Func *f = ir_find_func(p.s, "forward.0");
  int heads = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_reshape && i->type.rank == 4 && i->shard->axis[2] == 0) {
      assert_int_equal(i->type.dim[2], 2);
      heads++;
    }
  }
  assert_int_equal(heads, 3);
  /* Megatron: one all_reduce after attention, one after the MLP; in the
   * backward one at each block's input */
  assert_int_equal(count(p.s, "forward.0", OP_all_reduce), 2);
  assert_int_equal(count_comm(p.s, "forward.0"), 2);
  assert_int_equal(count(p.s, "train_step.1", OP_all_reduce), 4);
  assert_int_equal(count_comm(p.s, "train_step.1"), 4);
  train(&p, 4, 12, "transformer, heads over tp = 2");
  pair_free(&p);
  free(text);
  free(model);
}

static void test_transformer_dp(void **state) {
  (void)state;
  char *model = read_example("transformer.dt");
  char *text = cat(model, "parallel gpt on c {\n mesh m[dp = 2]\n shard ids: [dp, *]\n"
                          " shard next: [dp, *]\n}\n");
  Pair p;
  pair_init(&p, text, gpt_defs, COUNTOF(gpt_defs));
  train(&p, 4, 12, "transformer, batch over dp = 2");
  pair_free(&p);
  free(text);
  free(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp2),           cmocka_unit_test(test_dp3),
      cmocka_unit_test(test_dp3_uneven),    cmocka_unit_test(test_dp2_uneven),
      cmocka_unit_test(test_tp2),           cmocka_unit_test(test_tp2_clip), cmocka_unit_test(test_tp2_uneven),
      cmocka_unit_test(test_tp2_inferred),  cmocka_unit_test(test_tp2_reduce_scatter),
      cmocka_unit_test(test_all_to_all),    cmocka_unit_test(test_column_chain),
      cmocka_unit_test(test_table_wise),
      cmocka_unit_test(test_2d),
      cmocka_unit_test(test_2d_uneven),     cmocka_unit_test(test_transformer_heads),
      cmocka_unit_test(test_transformer_dp),
      cmocka_unit_test(test_pad_values_tp2), cmocka_unit_test(test_pad_values_dp2),
      cmocka_unit_test(test_zero_dp2),      cmocka_unit_test(test_zero_dp3_uneven),
      cmocka_unit_test(test_zero_dp4),      cmocka_unit_test(test_zero_clip_accumulate),
      cmocka_unit_test(test_zero_2d),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
