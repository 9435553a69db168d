/* test_spmd_loop.c: loops on a mesh. Small looped models, built by hand,
 * go through the pipeline twice: through autodiff and eval only (the global
 * @train_step and @forward, run by the interpreter on one device) and through memplan
 * (per-device functions and bodies, run by the mesh interpreter). Both start
 * from the same params and see the same batches; after every step the losses
 * agree, and at the end every param and optimizer state, put together from
 * the devices' blocks:
 *
 *   loss:          |a - b| <= 1e-5 (1 + |b|)
 *   each tensor:   max |a - b| <= 1e-4 max |b|
 *
 * Models: residual layers over stacked params, data parallel even and
 * uneven (with dropout in the body); the same with the stacked weights
 * split Megatron style over tp, so the bodies hold all_reduces, and over a
 * 2x2 mesh with the batch over dp; a recurrent
 * loop whose weight is a whole operand, its gradient a partial sum carried
 * from zeros, and the same loop with that weight split by columns, so its
 * carry is gathered in every iteration; a loop in a loop; two loops of one
 * body; pipeline stages (the layers split over pp: 2 even, 3 as 2:2:1 with
 * dropout, pp x dp, an RNN over stages), a stage without layers and the batch
 * split over the stages' axis refused. Also: the IR after spmd prints and
 * parses back, and the simulator costs a loop n times its body. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ir.h"
#include "ir_build_util.h"
#include "passes.h"

#define LOSS_TOL 1e-5
#define TENSOR_TOL 1e-4

/* ---- building modules by hand ---- */

/* What a model is built with: the mesh axis, its size, the ratios of its
 * splits over it (NULL: even), the sizes, and a second mesh axis tp of k2
 * devices (0: none; its splits even). */
typedef struct Spec {
  const char *axis;
  int k;
  const double *ratio;
  int B, D, L;
  bool dropout;
  int k2;              /* named tp, or dp beside pp */
} Spec;

static bool REMAT;    /* residual_pp's loop recomputes its forward in the backward */
static int MICRO;     /* the module's micro-batches (0: none) */
static PipeSchedule SCHED;   /* their order over pipeline stages */

static Module *M;     /* the module being built */
static Func *F;       /* its @forward */
static SrcFile *SRC;

static Loc at(int line) { return (Loc){SRC, line, 1}; }

static Sharding *shard(const Spec *s, int split_dim, int axis) {
  Sharding *sh = arena_alloc(M->arena, sizeof *sh);
  for (int d = 0; d < IR_MAX_RANK; d++)
    sh->axis[d] = -1;
  if (split_dim >= 0) {
    sh->axis[split_dim] = (int8_t)axis;
    if (s->ratio && axis == 0) {
      sh->ratio[split_dim] = arena_alloc(M->arena, sizeof(double) * (size_t)s->k);
      memcpy(sh->ratio[split_dim], s->ratio, sizeof(double) * (size_t)s->k);
    }
  }
  return sh;
}

static void module_new(Arena *a, const Spec *s) {
  static int devs[8];
  M = ir_module_new(a, "loops");
  SRC = src_from_string(a, "loops.dt", "1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  Mesh mh = {.name = "m", .naxis = s->k2 ? 2 : 1, .axis_name = {s->axis, strcmp(s->axis, "pp") ? "tp" : "dp"},
             .axis_size = {s->k, s->k2}, .dev = devs, .loc = at(1)};
  vec_push(a, &M->mesh, mh);
  M->plan = PLAN_EXPLICIT;
  M->microbatches = MICRO;
  M->microbatches_loc = at(9);
  M->schedule = SCHED;
  M->schedule_loc = at(9);   /* as written: the pass keeps it */
  M->train = (Train){.loss = "loss", .opt = OPT_SGD, .lr = 0.1, .momentum = 0.5,
                     .schedule = -1, .loc = at(1)};
  F = ir_add_func(M, "forward", at(1));
}

/* A global split along split_dim over mesh axis `axis` (split_dim -1:
 * whole; -2: open, for a param), and its load in @forward. */
static Inst *global_on(const Spec *s, const char *name, GlobalKind kind, Type t, int split_dim,
                       int axis) {
  Global *g = ir_add_global(M, name, kind, t, at(2));
  g->init = kind == G_INPUT ? -1 : DT_INIT_ZEROS;
  if (split_dim > -2)
    g->shard = shard(s, split_dim, axis);
  Inst *l = ir_new(F, OP_load, at(2), 0, NULL);
  ir_set_str(l, "global", name);
  l->name = g->name;
  return ir_finish(l);
}

static Inst *global(const Spec *s, const char *name, GlobalKind kind, Type t, int split_dim) {
  return global_on(s, name, kind, t, split_dim, 0);
}

static Func *body(const char *name) {
  Func *f = ir_add_func(M, name, at(3));
  f->body = true;
  return f;
}

static Inst *arg(Func *f, int index, Type t) {
  Inst *a = ir_new(f, OP_arg, at(4), 0, NULL);
  ir_set_int(a, "index", index);
  a->type = t;
  return ir_finish(a);
}

static Inst *op(Func *f, Op o, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = ir_new_va(f, o, at(5), nin, ap);
  va_end(ap);
  return ir_finish(i);
}

static void out(Func *f, Inst *v, const char *name) {
  Inst *o = ir_new(f, OP_output, at(6), 1, &v);
  ir_set_str(o, "name", name);
  ir_finish(o);
}

static Inst *repeat(Func *f, Func *b, int64_t n, int64_t stacked, int nin, Inst **in) {
  Inst *r = ir_new(f, OP_repeat, at(7), nin, in);
  ir_set_str(r, "body", b->name);
  ir_set_int(r, "n", n);
  ir_set_int(r, "carry", 1);
  ir_set_int(r, "stacked", stacked);
  return ir_finish(r);
}

static Inst *dropout(Func *f, Inst *x, double p, int seed) {
  Inst *d = ir_new(f, OP_dropout, at(5), 1, &x);
  ir_set_float(d, "p", p);
  ir_set_int(d, "seed", seed);
  return ir_finish(d);
}

static void loss_of(Inst *pred, Inst *target) { out(F, op(F, OP_mse, 2, pred, target), "loss"); }

/* x <- x + tanh(x @ w + b) (dropout after tanh), n = L layers of stacked
 * params, the batch x and the target y split over the mesh. */
static void residual_dp(const Spec *s) {
  Type xt = ty(DT_F32, 2, s->B, s->D);
  Func *b = body("layers");
  Inst *x = arg(b, 0, xt), *w = arg(b, 1, ty(DT_F32, 2, s->D, s->D)),
       *c = arg(b, 2, ty(DT_F32, 1, s->D));
  Inst *h = op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, x, w), c));
  if (s->dropout)
    h = dropout(b, h, 0.25, 3);
  out(b, op(b, OP_add, 2, x, h), "x");
  Inst *in[3] = {global(s, "x", G_INPUT, xt, 0),
                 global(s, "layers.w", G_PARAM, ty(DT_F32, 3, s->L, s->D, s->D), -2),
                 global(s, "layers.b", G_PARAM, ty(DT_F32, 2, s->L, s->D), -2)};
  Inst *y = global(s, "y", G_INPUT, xt, 0);
  loss_of(repeat(F, b, s->L, 2, 3, in), y);
}

/* x <- x + tanh(x @ w1) @ w2, w1 [L, D, 2D] split on its columns and w2
 * [L, 2D, D] on its rows (Megatron): each iteration all-reduces its
 * partial sum, forward and backward. On a 2-D mesh the weights are split
 * over tp and the batch over the first axis. */
static void residual_tp(const Spec *s) {
  int D = s->D, F2 = 2 * s->D, tp = s->k2 ? 1 : 0, batch = s->k2 ? 0 : -1;
  Type xt = ty(DT_F32, 2, s->B, D);
  Func *b = body("mlp");
  Inst *x = arg(b, 0, xt), *w1 = arg(b, 1, ty(DT_F32, 2, D, F2)),
       *w2 = arg(b, 2, ty(DT_F32, 2, F2, D));
  Inst *h = op(b, OP_tanh, 1, op(b, OP_matmul, 2, x, w1));
  out(b, op(b, OP_add, 2, x, op(b, OP_matmul, 2, h, w2)), "x");
  Inst *in[3] = {global(s, "x", G_INPUT, xt, batch),
                 global_on(s, "mlp.w1", G_PARAM, ty(DT_F32, 3, s->L, D, F2), 2, tp),
                 global_on(s, "mlp.w2", G_PARAM, ty(DT_F32, 3, s->L, F2, D), 1, tp)};
  Inst *y = global(s, "y", G_INPUT, xt, batch);
  loss_of(repeat(F, b, s->L, 2, 3, in), y);
}

/* h <- tanh(h @ u + x_t) over L steps: u a whole operand (one weight for
 * every step), xs [L, B, D] stacked; the batch split along batch_dim of h0
 * and y (-1: whole) and u along u_dim (-2: open). */
static void rnn(const Spec *s, int batch_dim, int u_dim) {
  Type ht = ty(DT_F32, 2, s->B, s->D);
  Func *b = body("rnn");
  Inst *h = arg(b, 0, ht), *u = arg(b, 1, ty(DT_F32, 2, s->D, s->D)), *x = arg(b, 2, ht);
  out(b, op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, h, u), x)), "h");
  Inst *in[3] = {global(s, "h0", G_INPUT, ht, batch_dim),
                 global(s, "u", G_PARAM, ty(DT_F32, 2, s->D, s->D), u_dim),
                 global(s, "xs", G_INPUT, ty(DT_F32, 3, s->L, s->B, s->D),
                        batch_dim < 0 ? -1 : batch_dim + 1)};
  Inst *y = global(s, "y", G_INPUT, ht, batch_dim);
  loss_of(repeat(F, b, s->L, 1, 3, in), y);
}

static void recurrent(const Spec *s) { rnn(s, 0, -2); }

/* The batch whole, u's columns split: h @ u is split, but the carry h is
 * whole, so each iteration gathers its new h before its output. */
static void recurrent_cols(const Spec *s) { rnn(s, -1, 1); }

/* A loop of two residual layers inside a loop of L blocks, each block
 * scaling its input first: params [L, 2, ...] and [L, D]. */
static void nested(const Spec *s) {
  Type xt = ty(DT_F32, 2, s->B, s->D);
  Func *inner = body("blocks.layers");
  Inst *x = arg(inner, 0, xt), *w = arg(inner, 1, ty(DT_F32, 2, s->D, s->D));
  out(inner, op(inner, OP_add, 2, x, op(inner, OP_tanh, 1, op(inner, OP_matmul, 2, x, w))), "x");
  Func *b = body("blocks");
  Inst *bx = arg(b, 0, xt), *bw = arg(b, 1, ty(DT_F32, 3, 2, s->D, s->D)),
       *sc = arg(b, 2, ty(DT_F32, 1, s->D));
  Inst *iin[2] = {op(b, OP_mul, 2, bx, sc), bw};
  out(b, repeat(b, inner, 2, 1, 2, iin), "x");
  Inst *in[3] = {global(s, "x", G_INPUT, xt, 0),
                 global(s, "blocks.w", G_PARAM, ty(DT_F32, 4, s->L, 2, s->D, s->D), -2),
                 global(s, "blocks.s", G_PARAM, ty(DT_F32, 2, s->L, s->D), -2)};
  Inst *y = global(s, "y", G_INPUT, xt, 0);
  loss_of(repeat(F, b, s->L, 2, 3, in), y);
}

/* Two loops of one body, one over the split batch, one over a whole input:
 * the body's values would need two shardings, so the sharding pass gives the
 * second loop a copy of it. */
static void shared_body(const Spec *s) {
  Type xt = ty(DT_F32, 2, s->B, s->D);
  Func *b = body("layers");
  Inst *x = arg(b, 0, xt), *w = arg(b, 1, ty(DT_F32, 2, s->D, s->D));
  out(b, op(b, OP_add, 2, x, op(b, OP_tanh, 1, op(b, OP_matmul, 2, x, w))), "x");
  Inst *lw = global(s, "layers.w", G_PARAM, ty(DT_F32, 3, s->L, s->D, s->D), -2);
  Inst *in1[2] = {global(s, "x", G_INPUT, xt, 0), lw};
  Inst *in2[2] = {global(s, "z", G_INPUT, xt, -1), lw};
  Inst *y = global(s, "y", G_INPUT, xt, 0);
  Inst *a = op(F, OP_mse, 2, repeat(F, b, s->L, 1, 2, in1), y);
  Inst *c = op(F, OP_mse, 2, repeat(F, b, s->L, 1, 2, in2), y);
  out(F, op(F, OP_add, 2, a, c), "loss");
}

/* residual_dp's layers as pipeline stages: layers.w split by its layer dim
 * over the first axis (with the spec's ratios), layers.b open (it follows),
 * the batch whole, or over the second axis on a 2-D mesh. */
static void residual_pp(const Spec *s) {
  Type xt = ty(DT_F32, 2, s->B, s->D);
  int batch = s->k2 ? 0 : -1;
  Func *b = body("layers");
  Inst *x = arg(b, 0, xt), *w = arg(b, 1, ty(DT_F32, 2, s->D, s->D)),
       *c = arg(b, 2, ty(DT_F32, 1, s->D));
  Inst *h = op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, x, w), c));
  if (s->dropout)
    h = dropout(b, h, 0.25, 3);
  out(b, op(b, OP_add, 2, x, h), "x");
  Inst *in[3] = {global_on(s, "x", G_INPUT, xt, batch, 1),
                 global(s, "layers.w", G_PARAM, ty(DT_F32, 3, s->L, s->D, s->D), 0),
                 global(s, "layers.b", G_PARAM, ty(DT_F32, 2, s->L, s->D), -2)};
  Inst *y = global_on(s, "y", G_INPUT, xt, batch, 1);
  Inst *r = repeat(F, b, s->L, 2, 3, in);
  if (REMAT)
    ir_set_int(r, "remat", 1);
  loss_of(r, y);
}

/* rnn over stages: xs [L, B, D] split by its step dim, u a whole operand
 * read by every stage, its gradient a sum carried from zeros through the
 * stages of the backward loop. */
static void recurrent_pp(const Spec *s) {
  Type ht = ty(DT_F32, 2, s->B, s->D);
  Func *b = body("rnn");
  Inst *h = arg(b, 0, ht), *u = arg(b, 1, ty(DT_F32, 2, s->D, s->D)), *x = arg(b, 2, ht);
  out(b, op(b, OP_tanh, 1, op(b, OP_add, 2, op(b, OP_matmul, 2, h, u), x)), "h");
  Inst *in[3] = {global(s, "h0", G_INPUT, ht, -1),
                 global(s, "u", G_PARAM, ty(DT_F32, 2, s->D, s->D), -2),
                 global(s, "xs", G_INPUT, ty(DT_F32, 3, s->L, s->B, s->D), 0)};
  Inst *y = global(s, "y", G_INPUT, ht, -1);
  loss_of(repeat(F, b, s->L, 1, 3, in), y);
}

typedef void (*Build)(const Spec *);

/* ---- the two programs ---- */

typedef struct Pair {
  Arena *a;
  Module *g, *s;       /* global program; per-device program */
  Interp *it;
  InterpMesh *mesh;
  char *log;
  size_t loglen;
  FILE *out;
} Pair;

/* The model, through the pipeline up to and including pass `last`. */
static Module *compile(Pair *p, Build build, const Spec *s, const char *last) {
  Diag d;
  diag_init(&d, p->out);
  d.wflags = 0;
  module_new(p->a, s);
  build(s);
  M->no_coalesce = true;   /* the counts below are spmd's, a collective a value */
  if (!ir_verify(M, &d) ||
      !passes_run(M, &d, &(PassOptions){.stop_after = last, .verify_each = true}, NULL)) {
    fflush(p->out);
    fail_msg("the pipeline failed:\n%s", p->log);
  }
  return M;
}

static void pair_init(Pair *p, Build build, const Spec *s, const char *last) {
  memset(p, 0, sizeof *p);
  p->a = arena_new();
  p->out = open_memstream(&p->log, &p->loglen);
  assert_non_null(p->out);
  p->g = compile(p, build, s, "eval");
  p->s = compile(p, build, s, last);
  p->it = interp_new(p->g);
  p->mesh = interp_mesh_new(p->s);
}

static void pair_free(Pair *p) {
  interp_free(p->it);
  interp_mesh_free(p->mesh);
  fclose(p->out);
  free(p->log);
  arena_free(p->a);
}

static uint64_t rng = 88172645463325252ull;

static double uniform(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

/* Fresh values in [-r, r] for every global of `kind`, the same on both. */
static void feed(Pair *p, GlobalKind kind, double r) {
  for (int k = 0; k < p->g->global.n; k++) {
    const Global *gl = &p->g->global.a[k];
    if (gl->kind != kind)
      continue;
    int64_t n = type_elems(&gl->type);
    float *buf = malloc((size_t)n * 4);
    assert_non_null(buf);
    for (int64_t e = 0; e < n; e++)
      buf[e] = (float)((2 * uniform() - 1) * r);
    assert_true(interp_set_global(p->it, gl->name, buf));
    assert_true(interp_mesh_set_global(p->mesh, gl->name, buf));
    free(buf);
  }
}

static void check_tensors(Pair *p, const char *label) {
  double worst = 0;
  for (int k = 0; k < p->g->global.n; k++) {
    const Global *gl = &p->g->global.a[k];
    if (gl->kind == G_INPUT)
      continue;
    int64_t n = type_elems(&gl->type);
    float *a = calloc((size_t)n, 4);
    assert_non_null(a);
    assert_true(interp_mesh_get_global(p->mesh, gl->name, a));
    const float *b = interp_global(p->it, gl->name);
    double diff = 0, mag = 0;
    for (int64_t e = 0; e < n; e++) {
      diff = fmax(diff, fabs((double)a[e] - b[e]));
      mag = fmax(mag, fabs((double)b[e]));
    }
    double rel = mag > 0 ? diff / mag : diff;
    worst = fmax(worst, rel);
    if (rel > TENSOR_TOL)
      fail_msg("%s: %s differs: max |spmd - global| = %g, max |global| = %g", label, gl->name,
               diff, mag);
    free(a);
  }
  print_message("%s: worst tensor difference %.2e\n", label, worst);
}

/* Trains both programs `steps` steps on the same batches, then runs
 * @forward on both. */
static void train(Pair *p, int steps, const char *label) {
  rng = 88172645463325252ull;
  feed(p, G_PARAM, 0.5);
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    feed(p, G_INPUT, 1.0);
    float lg = 0, ls = 0;
    if (!interp_run(p->it, "train_step", (void *[]){&lg}))
      fail_msg("%s: global step %d: %s", label, s, interp_error(p->it));
    if (!interp_mesh_run(p->mesh, "train_step", (void *[]){&ls}))
      fail_msg("%s: spmd step %d: %s", label, s, interp_mesh_error(p->mesh));
    double e = fabs((double)ls - lg);
    worst = fmax(worst, e / (1 + fabs(lg)));
    if (e > LOSS_TOL * (1 + fabs(lg)))
      fail_msg("%s: step %d: loss %.9g on the mesh, %.9g on one device", label, s, ls, lg);
  }
  print_message("%s: %d steps, worst loss difference %.2e\n", label, steps, worst);
  check_tensors(p, label);
  float fg = 0, fs = 0;
  if (!interp_run(p->it, "forward", (void *[]){&fg}))
    fail_msg("%s: global forward: %s", label, interp_error(p->it));
  if (!interp_mesh_run(p->mesh, "forward", (void *[]){&fs}))
    fail_msg("%s: spmd forward: %s", label, interp_mesh_error(p->mesh));
  if (fabs((double)fs - fg) > LOSS_TOL * (1 + fabs(fg)))
    fail_msg("%s: forward: loss %.9g on the mesh, %.9g on one device", label, fs, fg);
}

/* Insts of op `o` in a function. */
static int count(const Module *m, const char *func, Op o) {
  const Func *f = ir_find_func(m, func);
  if (!f)
    fail_msg("no function @%s", func);
  int n = 0;
  for (int k = 0; k < f->inst.n; k++)
    n += f->inst.a[k]->op == o;
  return n;
}

/* Collectives in a function (shard_slice aside). */
static int count_comm(const Module *m, const char *func) {
  return count(m, func, OP_all_reduce) + count(m, func, OP_all_gather) +
         count(m, func, OP_reduce_scatter) + count(m, func, OP_all_to_all);
}

/* ---- data parallel ---- */

/* The batch split: the bodies compute on their blocks without a
 * collective; each stacked weight gradient is a stack of partial sums,
 * all-reduced once after the loop, with the loss: three per step. */
static void dp(const Spec *s, const char *label) {
  Pair p;
  pair_init(&p, residual_dp, s, "memplan");
  train(&p, 5, label);
  for (int d = 0; d < s->k; d++) {
    char save[32], grad[32], step[32];
    snprintf(save, sizeof save, "layers.save.%d", d);
    snprintf(grad, sizeof grad, "layers.grad.%d", d);
    snprintf(step, sizeof step, "train_step.%d", d);
    assert_int_equal(count_comm(p.s, save), 0);
    assert_int_equal(count_comm(p.s, grad), 0);
    assert_int_equal(count(p.s, step, OP_all_reduce), 3);
    assert_int_equal(count_comm(p.s, step), 3);
  }
  /* the arg's block: device 0 holds 4 of 8 rows evenly, 7 of 10 at 0.7 */
  const Func *b0 = ir_find_func(p.s, "layers.save.0");
  assert_non_null(b0);
  assert_true(b0->body);
  assert_int_equal(b0->device, 0);
  assert_int_equal(ir_func_arg(b0, 0)->type.dim[0], s->ratio ? 7 : 4);
  assert_null(ir_find_func(p.s, "layers.save"));
  pair_free(&p);
}

static void test_dp2(void **state) {
  (void)state;
  dp(&(Spec){"dp", 2, NULL, 8, 6, 3, false, 0}, "residual dp2");
}

static void test_dp2_uneven(void **state) {
  (void)state;
  dp(&(Spec){"dp", 2, (const double[]){0.7, 0.3}, 10, 6, 3, false, 0}, "residual dp2 uneven 7:3");
}

/* Dropout in the body: each device draws its block of the whole batch's
 * mask (`at`), iteration by iteration, forward and backward alike. */
static void test_dp3_dropout(void **state) {
  (void)state;
  Spec s = {"dp", 3, (const double[]){0.5, 0.3, 0.2}, 10, 6, 3, true, 0};
  Pair p;
  pair_init(&p, residual_dp, &s, "memplan");
  const Func *b = ir_find_func(p.s, "layers.save.1");
  assert_int_equal(count(p.s, "layers.save.1", OP_dropout), 1);
  assert_int_equal(count(p.s, "layers.grad.1", OP_dropout_grad), 1);
  for (int k = 0; k < b->inst.n; k++)
    if (b->inst.a[k]->op == OP_dropout) {
      int n;
      const int64_t *place = ir_get_ints(b->inst.a[k], "at", &n);
      assert_int_equal(n, 4);
      assert_int_equal(place[0], 10);   /* the whole batch, device 1's block from row 5 */
      assert_int_equal(place[2], 5);
    }
  train(&p, 4, "residual dp3 5:3:2, dropout");
  pair_free(&p);
}

/* ---- tensor parallel inside the body ---- */

static void tp(const Spec *s, const char *label) {
  Pair p;
  pair_init(&p, residual_tp, s, "memplan");
  /* Megatron: one all_reduce per iteration in the forward body (h @ w2),
   * one in the backward (the input's gradient); none left at the step's
   * level but the loss's (the weight gradients are split, not partial) */
  assert_int_equal(count(p.s, "mlp.save.0", OP_all_reduce), 1);
  assert_int_equal(count_comm(p.s, "mlp.save.0"), 1);
  assert_int_equal(count(p.s, "mlp.grad.1", OP_all_reduce), 1);
  assert_int_equal(count_comm(p.s, "mlp.grad.1"), 1);
  assert_int_equal(count(p.s, "mlp.0", OP_all_reduce), 1);
  assert_int_equal(count_comm(p.s, "train_step.0"), 0);
  const Func *b = ir_find_func(p.s, "mlp.save.0");
  assert_int_equal(ir_func_arg(b, 1)->type.dim[1], s->ratio ? 9 : 6);
  /* one device's interpreter alone stops at the body's collective */
  Interp *one = interp_new_device(p.s, 0);
  float loss;
  assert_false(interp_run(one, "forward.0", (void *[]){&loss}));
  assert_non_null(strstr(interp_error(one), "all_reduce"));
  interp_free(one);
  train(&p, 5, label);
  pair_free(&p);
}

static void test_tp2(void **state) {
  (void)state;
  tp(&(Spec){"tp", 2, NULL, 4, 6, 3, false, 0}, "residual tp2 megatron");
}

static void test_tp2_uneven(void **state) {
  (void)state;
  tp(&(Spec){"tp", 2, (const double[]){0.75, 0.25}, 4, 6, 3, false, 0}, "residual tp2 9:3");
}

/* dp x tp on a 2x2 mesh: all_reduces over tp in the bodies, the weight
 * gradients' over dp once after the loop, and the loss's. */
static void test_2d(void **state) {
  (void)state;
  Spec s = {"dp", 2, (const double[]){0.75, 0.25}, 8, 6, 3, false, 2};
  Pair p;
  pair_init(&p, residual_tp, &s, "memplan");
  const Func *b = ir_find_func(p.s, "mlp.save.3");
  for (int k = 0; k < b->inst.n; k++)
    if (b->inst.a[k]->op == OP_all_reduce)
      assert_int_equal(ir_get_int(b->inst.a[k], "axis", -1), 1);
  assert_int_equal(count(p.s, "mlp.save.3", OP_all_reduce), 1);
  assert_int_equal(count(p.s, "mlp.grad.2", OP_all_reduce), 1);
  assert_int_equal(ir_func_arg(b, 0)->type.dim[0], 2);   /* device 3: dp 1 holds 2 of 8 rows */
  assert_int_equal(count(p.s, "train_step.3", OP_all_reduce), 3);
  assert_int_equal(count_comm(p.s, "train_step.3"), 3);
  train(&p, 5, "residual dp 3:1 x tp 2");
  pair_free(&p);
}

/* ---- pipeline stages ---- */

/* The repeat of a function (the first), NULL if none. */
static const Inst *loop_in(const Module *m, const char *func, int which) {
  const Func *f = ir_find_func(m, func);
  for (int k = 0; f && k < f->inst.n; k++)
    if (f->inst.a[k]->op == OP_repeat && which-- == 0)
      return f->inst.a[k];
  return NULL;
}

/* Layers split over pp: device s runs its own layers (the loops' n), from
 * layer `first`; the carry comes by a send from the stage before and goes
 * to the stage after, forward and (reversed) backward, and the last stage
 * broadcasts it; the params' gradients stay on their stage, no all_reduce
 * anywhere (the batch is whole). */
static void pp(const Spec *s, const int64_t *layers, const char *label) {
  Pair p;
  pair_init(&p, residual_pp, s, "memplan");
  int dp = s->k2 ? s->k2 : 1;
  for (int d = 0; d < s->k * dp; d++) {
    int st = d / dp;   /* row-major: pp, then dp */
    int64_t first = 0;
    for (int k = 0; k < st; k++)
      first += layers[k];
    char step[32], fwd[32];
    snprintf(step, sizeof step, "train_step.%d", d);
    snprintf(fwd, sizeof fwd, "forward.%d", d);
    const Inst *f = loop_in(p.s, step, 0), *r = loop_in(p.s, step, 1);
    assert_non_null(f);
    assert_non_null(r);
    assert_int_equal(ir_get_int(f, "n", 0), layers[st]);
    assert_int_equal(ir_get_int(r, "n", 0), layers[st]);
    assert_int_equal(ir_get_int(f, "first", 0), first);
    assert_int_equal(ir_get_int(r, "first", 0), first);
    assert_int_equal(ir_get_int(r, "reverse", 0), 1);
    assert_int_equal(ir_get_int(loop_in(p.s, fwd, 0), "n", 0), layers[st]);
    /* a send in and out per loop but at the ends; a bcast of the forward's
     * result, and none of the backward's carried gradient, which nothing
     * reads (x is an input) */
    int ends = (st == 0) + (st == s->k - 1);
    assert_int_equal(count(p.s, step, OP_send), 2 * (2 - ends));
    assert_int_equal(count(p.s, step, OP_bcast), 1);
    assert_int_equal(count(p.s, fwd, OP_send), 2 - ends);
    assert_int_equal(count(p.s, fwd, OP_bcast), 1);
    /* over dp the loss's and the two gradients', each on its stage */
    assert_int_equal(count_comm(p.s, step), s->k2 ? 3 : 0);
    Type w = ir_global_type_on(p.s, ir_find_global(p.s, "layers.b"), d);
    assert_int_equal(w.dim[0], layers[st]);
  }
  /* the simulator matches each send by its pair: every device finishes,
   * and each waits while the other stages run their layers */
  SimResult r;
  assert_true(sim_run(p.s, &r, NULL, NULL) > 0);
  for (int d = 0; d < s->k * dp; d++)
    assert_true(r.dev[d].idle > 0);
  train(&p, 4, label);
  pair_free(&p);
}

static void test_pp2(void **state) {
  (void)state;
  pp(&(Spec){"pp", 2, NULL, 4, 6, 4, false, 0}, (const int64_t[]){2, 2}, "residual pp2");
}

/* 5 layers as 2:2:1, dropout in the body: a stage's iteration i draws the
 * masks of the whole loop's iteration first + i. */
static void test_pp3_uneven(void **state) {
  (void)state;
  pp(&(Spec){"pp", 3, (const double[]){0.4, 0.4, 0.2}, 4, 6, 5, true, 0},
     (const int64_t[]){2, 2, 1}, "residual pp3 2:2:1, dropout");
}

/* The same stages, each recomputing its layers' forward in the backward. */
static void test_pp3_remat(void **state) {
  (void)state;
  REMAT = true;
  pp(&(Spec){"pp", 3, (const double[]){0.4, 0.4, 0.2}, 4, 6, 5, true, 0},
     (const int64_t[]){2, 2, 1}, "residual pp3 2:2:1, dropout, remat");
  REMAT = false;
}

/* pp x dp on a 2x2 mesh: stages over pp, the batch over dp; the stages'
 * gradients are partial sums over dp, reduced on their stage. */
static void test_pp_dp(void **state) {
  (void)state;
  pp(&(Spec){"pp", 2, (const double[]){0.75, 0.25}, 8, 6, 4, true, 2},
     (const int64_t[]){3, 1}, "residual pp 3:1 x dp 2");
}

/* A whole operand's gradient, a sum from zeros, is carried through the
 * stages of the backward loop and broadcast by stage 0. */
static void test_pp_rnn(void **state) {
  (void)state;
  Pair p;
  pair_init(&p, recurrent_pp, &(Spec){"pp", 2, (const double[]){0.4, 0.6}, 4, 5, 5, false, 0},
            "memplan");
  const Inst *r = loop_in(p.s, "train_step.1", 1);
  assert_int_equal(ir_get_int(r, "n", 0), 3);
  assert_int_equal(ir_get_int(r, "carry", 0), 2);
  assert_int_equal(count(p.s, "train_step.1", OP_send), 1 + 2);   /* h in; dh, du out */
  assert_int_equal(count(p.s, "train_step.0", OP_send), 1 + 2);   /* h out; dh, du in */
  assert_int_equal(count(p.s, "train_step.0", OP_bcast), 1 + 2);
  train(&p, 4, "rnn pp 2:3");
  pair_free(&p);
}

/* The micro-batch (j) of a staged loop, from its body's name. */
static int mb_of(const Inst *r) {
  const char *b = strstr(ir_get_str(r, "body", ""), ".mb");
  return b ? atoi(b + 3) : -1;
}

/* Micro-batches over stages: every device runs n loops of its own layers
 * forward and n backward, one per block of rows; each sends its carry on
 * before the next runs. Under GPipe's order all forward loops come first and
 * the broadcast of the forward's result follows the last; under 1F1B's,
 * stage st runs min(stages - st - 1, n) forward loops, then one forward and
 * one backward in turn. The global program, uncut, is the reference for
 * both; the two orders compute the same ops, so their params after
 * training are bit for bit the same (tests/sched_memory.sh compares their
 * memory plans on examples/gpt.dt). */
static void pp_micro_one(Pair *p, const Spec *s, int n, const int64_t *layers, const char *label,
                         PipeSchedule sched) {
  MICRO = n;
  SCHED = sched;
  pair_init(p, residual_pp, s, "memplan");
  MICRO = 0;
  SCHED = PIPE_1F1B;
  int dp = s->k2 ? s->k2 : 1;
  for (int d = 0; d < s->k * dp; d++) {
    int st = d / dp;
    char step[32];
    snprintf(step, sizeof step, "train_step.%d", d);
    int warm = s->k - st - 1 < n ? s->k - st - 1 : n, f = 0, b = 0;
    for (int j = 0; j < 2 * n; j++) {
      const Inst *r = loop_in(p->s, step, j);
      assert_non_null(r);
      assert_int_equal(ir_get_int(r, "n", 0), layers[st]);
      /* 1F1B: the warm-up's forwards, then forward and backward in turn,
       * forwards first, until the forwards run out */
      bool fwd = sched == PIPE_GPIPE ? j < n : f < n && (f < warm || f - warm <= b);
      assert_int_equal(ir_get_int(r, "reverse", 0), !fwd);
      assert_int_equal(mb_of(r), fwd ? f++ : b++);
      /* a micro-batch's rows are whole over dp (see passes/microbatch.c) */
      assert_int_equal(ir_repeat_body(r)->inst.a[0]->type.dim[0], s->B / n);
    }
    assert_null(loop_in(p->s, step, 2 * n));
    int ends = (st == 0) + (st == s->k - 1);
    assert_int_equal(count(p->s, step, OP_send), 2 * n * (2 - ends));
    assert_int_equal(count(p->s, step, OP_bcast), n);   /* the forward's; nothing reads dx */
    const Func *fn = ir_find_func(p->s, step);
    int last_send = 0, first_bcast = fn->inst.n;
    for (int k = 0; k < fn->inst.n; k++) {
      if (fn->inst.a[k]->op == OP_send && ir_get_int(fn->inst.a[k], "to", 0) == st + 1)
        last_send = k;
      if (fn->inst.a[k]->op == OP_bcast && k < first_bcast)
        first_bcast = k;
    }
    if (sched == PIPE_GPIPE)
      assert_true(last_send < first_bcast);
  }
  /* --emit=plan names each stage's layers and the schedule */
  char *rep;
  size_t replen;
  FILE *o = open_memstream(&rep, &replen);
  spmd_report(o, p->s);
  fclose(o);
  char want[128], order[128];
  snprintf(want, sizeof want, "schedule: %d micro-batches of %d rows", n, s->B / n);
  snprintf(order, sizeof order, sched == PIPE_GPIPE ? "all forward then all backward; at most %d"
           : "1F1B: stage s runs stages - s - 1 forward ones, then one forward and one backward "
             "in turn; at most %d", sched == PIPE_GPIPE || n < s->k ? n : s->k);
  if (!strstr(rep, want) || !strstr(rep, order) ||
      !strstr(rep, "pipeline stages over pp, loop at loops.dt:7:"))
    fail_msg("expected \"%s\" and \"%s\" in:\n%s", want, order, rep);
  if (s->k == 3 && !strstr(rep, ": 0 layers 0-1, 0 layers 2-3, 0 layers 4-4\n"))
    fail_msg("expected the stages' layers in:\n%s", rep);
  free(rep);
  train(p, 4, label);
}

static void pp_micro(const Spec *s, int n, const int64_t *layers, const char *label) {
  Pair g, f;
  pp_micro_one(&g, s, n, layers, label, PIPE_GPIPE);
  pp_micro_one(&f, s, n, layers, label, PIPE_1F1B);
  for (int k = 0; k < g.g->global.n; k++) {
    const Global *gl = &g.g->global.a[k];
    int64_t e = type_elems(&gl->type);
    float *a = calloc((size_t)e, 4), *b = calloc((size_t)e, 4);
    assert_true(a && b);
    assert_true(interp_mesh_get_global(g.mesh, gl->name, a));
    assert_true(interp_mesh_get_global(f.mesh, gl->name, b));
    if (gl->kind != G_INPUT && memcmp(a, b, (size_t)e * 4))
      fail_msg("%s: %s differs between GPipe's order and 1F1B's", label, gl->name);
    free(a);
    free(b);
  }
  int dp = s->k2 ? s->k2 : 1;
  for (int d = 0; d < s->k * dp; d++) {
    char step[32];
    snprintf(step, sizeof step, "train_step.%d", d);
    int64_t wg = ir_find_func(g.s, step)->work_bytes, wf = ir_find_func(f.s, step)->work_bytes;
    print_message("%s: device %d work arena %lld B under GPipe, %lld B under 1F1B\n", label, d,
                  (long long)wg, (long long)wf);
  }
  pair_free(&g);
  pair_free(&f);
}

static void test_pp2_micro(void **state) {
  (void)state;
  pp_micro(&(Spec){"pp", 2, NULL, 4, 6, 4, false, 0}, 2, (const int64_t[]){2, 2},
           "residual pp2, 2 micro-batches");
}

/* Dropout in the body: micro-batch j draws rows j of the whole batch's masks. */
static void test_pp3_micro(void **state) {
  (void)state;
  pp_micro(&(Spec){"pp", 3, (const double[]){0.4, 0.4, 0.2}, 8, 6, 5, true, 0}, 4,
           (const int64_t[]){2, 2, 1}, "residual pp3 2:2:1, dropout, 4 micro-batches");
}

static void test_pp3_micro_remat(void **state) {
  (void)state;
  REMAT = true;
  pp_micro(&(Spec){"pp", 3, (const double[]){0.4, 0.4, 0.2}, 8, 6, 5, true, 0}, 2,
           (const int64_t[]){2, 2, 1}, "residual pp3 2:2:1, dropout, remat, 2 micro-batches");
  REMAT = false;
}

static void test_pp_dp_micro(void **state) {
  (void)state;
  pp_micro(&(Spec){"pp", 2, (const double[]){0.75, 0.25}, 8, 6, 4, true, 2}, 2,
           (const int64_t[]){3, 1}, "residual pp 3:1 x dp 2, 2 micro-batches");
}

/* The pipeline up to spmd fails on the model build makes (with `micro`
 * micro-batches, edited by `edit` when given) with message msg, its note
 * when given, and nerr errors when nerr > 0. */
static void refused(Build build, const Spec *s, int micro, void (*edit)(const Spec *),
                    const char *msg, const char *note, int nerr) {
  Arena *a = arena_new();
  char *log;
  size_t len;
  FILE *o = open_memstream(&log, &len);
  Diag d;
  diag_init(&d, o);
  MICRO = micro;
  module_new(a, s);
  MICRO = 0;
  build(s);
  if (edit)
    edit(s);
  assert_true(ir_verify(M, &d));
  assert_false(passes_run(M, &d, &(PassOptions){.stop_after = "spmd", .verify_each = true}, NULL));
  fclose(o);
  if (!strstr(log, msg) || (note && !strstr(log, note)))
    fail_msg("expected \"%s\"%s%s in:\n%s", msg, note ? " and " : "", note ? note : "", log);
  if (nerr > 0)
    assert_int_equal(d.nerr, nerr);
  free(log);
  arena_free(a);
}

/* What micro-batches cannot cut is refused where it is: the rnn's steps xs
 * hold the batch in their second dim, which a stacked operand is not cut by;
 * a batch that the count does not divide. */
static void test_micro_refused(void **state) {
  (void)state;
  const char *note = "loops.dt:9:1: note: micro-batches asked for here";
  refused(recurrent_pp, &(Spec){"pp", 2, NULL, 4, 5, 4, false, 0}, 2, NULL,
          "error: micro-batches: 'add' cannot take a micro-batch: ", note, 1);
  refused(residual_pp, &(Spec){"pp", 2, NULL, 4, 6, 4, false, 0}, 3, NULL,
          "error: micro-batches: the loop's carried value has 4 rows, which 3 "
          "micro-batches do not divide", note, 1);
}

/* A stage without layers is refused where the split is written. */
static void test_pp_empty_stage(void **state) {
  (void)state;
  refused(residual_pp, &(Spec){"pp", 3, NULL, 4, 6, 2, false, 0}, 0, NULL,
          "loops.dt:2:1: error: splitting dimension 0 of 'layers.w' (2) "
          "over mesh axis 'pp' leaves its device 2 no elements", NULL, 0);
}

static void split_batch(const Spec *s) {
  ir_find_global(M, "x")->shard = shard(s, 0, 0);
  ir_find_global(M, "y")->shard = shard(s, 0, 0);
}

/* The batch split over the axis of the stages is refused at the loop. */
static void test_pp_split_batch(void **state) {
  (void)state;
  refused(residual_pp, &(Spec){"pp", 2, NULL, 4, 6, 2, false, 0}, 0, split_batch,
          "loops.dt:7:1: error: the loop's layers are split over mesh axis "
          "'pp' (pipeline stages), so what an iteration reads cannot be "
          "split over it too, but its operand 1 is", NULL, 1);
}

/* ---- a recurrent loop with a whole operand ---- */

/* u is read whole by every step; its gradient is a sum the backward loop
 * carries from zeros. Each iteration's term is a partial sum over the
 * batch, and so is the carried sum: one all_reduce after the loop, none in
 * the body (train step: the loss's and u's). */
static void test_rnn_dp(void **state) {
  (void)state;
  Spec s = {"dp", 2, (const double[]){0.625, 0.375}, 8, 5, 4, false, 0};
  Pair p;
  pair_init(&p, recurrent, &s, "memplan");
  assert_int_equal(count_comm(p.s, "rnn.save.0"), 0);
  assert_int_equal(count_comm(p.s, "rnn.grad.0"), 0);
  assert_int_equal(count(p.s, "train_step.1", OP_all_reduce), 2);
  assert_int_equal(count_comm(p.s, "train_step.1"), 2);
  const Func *g = ir_find_func(p.s, "rnn.grad.0");
  assert_int_equal(ir_func_arg(g, 0)->type.dim[0], 5);   /* dh: device 0's 5 of 8 rows */
  assert_true(ir_func_arg(g, 1)->shard->partial);         /* the sum of u's terms */
  train(&p, 5, "rnn dp2 5:3");
  pair_free(&p);
}

/* A carried value whose body output comes out in another sharding than its
 * arg's: resharded before the output, in every iteration. */
static void test_rnn_carry_reshard(void **state) {
  (void)state;
  Spec s = {"dp", 2, (const double[]){0.6, 0.4}, 4, 5, 3, false, 0};
  Pair p;
  pair_init(&p, recurrent_cols, &s, "memplan");
  const Func *b = ir_find_func(p.s, "rnn.save.0");
  const Inst *o = ir_func_output(b, 0);
  assert_int_equal(ir_func_arg(b, 0)->shard->axis[1], -1);
  assert_int_equal(o->in[0]->op, OP_all_gather);
  assert_true(type_eq(&o->in[0]->type, &ir_func_arg(b, 0)->type));
  train(&p, 5, "rnn, u split by columns 3:2, carry gathered");
  pair_free(&p);
}

/* ---- a loop in a loop ---- */

static void test_nested_dp(void **state) {
  (void)state;
  Spec s = {"dp", 2, NULL, 6, 4, 3, false, 0};
  Pair p;
  pair_init(&p, nested, &s, "memplan");
  assert_non_null(ir_find_func(p.s, "blocks.layers.save.1"));
  train(&p, 4, "nested dp2");
  pair_free(&p);
}

/* ---- two loops of one body ---- */

static void test_shared_body(void **state) {
  (void)state;
  Spec s = {"dp", 2, NULL, 6, 4, 2, false, 0};
  Pair p;
  pair_init(&p, shared_body, &s, "memplan");
  /* @forward's second loop runs a copy; the first's body is split, the copy's whole */
  const Func *a = ir_find_func(p.s, "layers.0"), *b = ir_find_func(p.s, "layers.copy.0");
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(ir_func_arg(a, 0)->shard->axis[0], 0);
  assert_int_equal(ir_func_arg(b, 0)->shard->axis[0], -1);
  train(&p, 4, "two loops of one body");
  pair_free(&p);
}

/* ---- the text form ---- */

static char *print_module(const Module *m) {
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  assert_non_null(f);
  ir_print(f, m);
  fclose(f);
  return buf;
}

/* The IR after spmd, and after comm (methods), prints and parses back. */
static void round_trip(Build build, const Spec *s, const char *last) {
  Pair p;
  pair_init(&p, build, s, last);
  char *text = print_module(p.s);
  assert_non_null(strstr(text, " device 1 body"));
  Diag d;
  diag_init(&d, p.out);
  Module *back = ir_parse(p.a, src_from_string(p.a, "after.ir", text), &d);
  fflush(p.out);
  if (!back || !ir_verify(back, &d))
    fail_msg("%s\n%s", p.log, text);
  char *again = print_module(back);
  assert_string_equal(text, again);
  free(text);
  free(again);
  pair_free(&p);
}

static void test_round_trip(void **state) {
  (void)state;
  const double *r = (const double[]){0.75, 0.25};
  round_trip(residual_tp, &(Spec){"tp", 2, r, 4, 6, 3, false, 0}, "spmd");
  round_trip(nested, &(Spec){"dp", 2, NULL, 6, 4, 3, false, 0}, "spmd");
  round_trip(recurrent, &(Spec){"dp", 2, NULL, 8, 5, 4, false, 0}, "comm");
  round_trip(residual_pp, &(Spec){"pp", 3, (const double[]){0.4, 0.4, 0.2}, 4, 6, 5, true, 0},
             "spmd");
  round_trip(recurrent_pp, &(Spec){"pp", 2, NULL, 4, 5, 4, false, 0}, "comm");
}

/* ---- the simulator ---- */

typedef struct Tally {
  double compute[4];
  int comm[4];
} Tally;

static void tally(void *user, int device, const Inst *i, bool comm, double start, double dur) {
  (void)i, (void)start;
  Tally *t = user;
  if (comm)
    t->comm[device]++;
  else
    t->compute[device] += dur;
}

/* A function's compute on `device` and its collectives, each loop n times
 * its body. */
static double expect(const Module *m, const Func *f, int device, int *ncomm) {
  double c = 0;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *i = f->inst.a[k];
    if (i->op == OP_repeat) {
      int nb = 0;
      int64_t n = ir_get_int(i, "n", 1);
      c += (double)n * expect(m, ir_repeat_body(i), device, &nb);
      *ncomm += (int)n * nb;
    } else if (ir_ops[i->op].kind == K_COMM) {
      *ncomm += i->op != OP_shard_slice;
    } else {
      c += sim_compute_time(m, i, device);
    }
  }
  return c;
}

static void test_sim(void **state) {
  (void)state;
  Spec s = {"tp", 2, NULL, 4, 6, 3, false, 0};
  Pair p;
  pair_init(&p, residual_tp, &s, "comm");
  Tally t = {0};
  SimResult r;
  double step = sim_run(p.s, &r, tally, &t);
  assert_true(step > 0);
  for (int d = 0; d < 2; d++) {
    char name[32];
    snprintf(name, sizeof name, "train_step.%d", d);
    int ncomm = 0;
    double c = expect(p.s, ir_find_func(p.s, name), d, &ncomm);
    /* 3 iterations forward and backward, one all_reduce each (the loss is whole) */
    assert_int_equal(ncomm, 6);
    assert_int_equal(t.comm[d], ncomm);
    assert_true(fabs(r.dev[d].compute - c) <= 1e-12 * c);
    assert_true(fabs(t.compute[d] - c) <= 1e-12 * c);
    assert_true(r.dev[d].comm > 0);
  }
  pair_free(&p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp2),
      cmocka_unit_test(test_dp2_uneven),
      cmocka_unit_test(test_dp3_dropout),
      cmocka_unit_test(test_tp2),
      cmocka_unit_test(test_tp2_uneven),
      cmocka_unit_test(test_2d),
      cmocka_unit_test(test_pp2),
      cmocka_unit_test(test_pp3_remat),
      cmocka_unit_test(test_pp3_uneven),
      cmocka_unit_test(test_pp_dp),
      cmocka_unit_test(test_pp_rnn),
      cmocka_unit_test(test_pp2_micro),
      cmocka_unit_test(test_pp3_micro),
      cmocka_unit_test(test_pp3_micro_remat),
      cmocka_unit_test(test_pp_dp_micro),
      cmocka_unit_test(test_micro_refused),
      cmocka_unit_test(test_pp_empty_stage),
      cmocka_unit_test(test_pp_split_batch),
      cmocka_unit_test(test_rnn_dp),
      cmocka_unit_test(test_rnn_carry_reshard),
      cmocka_unit_test(test_nested_dp),
      cmocka_unit_test(test_shared_body),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_sim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
