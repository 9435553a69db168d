/* test_comm_choice.c: the comm pass (passes/comm.c): every collective's method
 * against the cheapest by the documented formulas, computed here on their own
 * from the links; hierarchical for a large gradient over two nodes, the
 * latency-cheaper method for small tensors on one node, variable-count,
 * padded and grouped all-gathers of uneven blocks, the same method on every
 * member, determinism, the simulator costing the chosen method,
 * measured collectives (cluster `collective` lines) replacing the model for
 * their group size only, and the gradient exchange in bf16 (which
 * collectives carry it, and its price: half the bytes plus the packing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

/* w1's gradient is 2 MiB, b1's 4 KiB, b2's 40 bytes. */
static const char model[] =
  "model mlp(batch B = 96) {\n"
  "  input  x: f32[B, 512]\n"
  "  input  y: i32[B]\n"
  "  param  w1: f32[512, 1024]\n"
  "  param  b1: f32[1024]\n"
  "  param  w2: f32[1024, 10]\n"
  "  param  b2: f32[10]\n"
  "  loss   = cross_entropy(relu(x @ w1 + b1) @ w2 + b2, y)\n"
  "  minimize loss with sgd(lr = 0.1)\n"
  "}\n";

#define LINKS \
  "  link intra(bw = 100GB/s, lat = 1us)\n" \
  "  link inter(bw = 1GB/s, lat = 20us)\n" \
  "}\n" \
  "parallel mlp on c {\n" \
  "  mesh m[dp = 4]\n" \
  "  shard x: [dp, *]\n" \
  "  shard y: [dp]\n" \
  "  plan explicit\n" \
  "}\n"
#define DEV(n) "    device " n ": cpu(gflops = 50, mem = 1GiB)\n"
static const char two_nodes[] = "cluster c {\n"
                                "  node a {\n" DEV("a0") DEV("a1") "  }\n"
                                "  node b {\n" DEV("b0") DEV("b1") "  }\n" LINKS;
static const char one_node[] = "cluster c {\n"
                               "  node a {\n" DEV("a0") DEV("a1") DEV("a2") DEV("a3") "  }\n" LINKS;

/* model + cluster through every pass up to and including comm. */
static Module *compile(Arena *a, const char *cluster) {
  Diag d;
  diag_init(&d, stderr);
  char *text = arena_printf(a, "%s%s", model, cluster);
  Module *m = fe_compile(a, src_from_string(a, "t.dt", text), NULL, 0, &d);
  assert_non_null(m);
  m->no_coalesce = true;   /* each tensor's own collective, its size's method */
  assert_true(passes_run(m, &d, &(PassOptions){.stop_after = "comm", .verify_each = true}, NULL));
  return m;
}

static Func *step_func(const Module *m, int device) {
  for (int k = 0; k < m->func.n; k++)
    if (ir_func_is(m->func.a[k], "train_step") && m->func.a[k]->device == device)
      return m->func.a[k];
  fail_msg("no train_step for device %d", device);
  return NULL;
}

static void link_named(const Module *m, const char *name, double *lat, double *bw) {
  for (int k = 0; k < m->cluster->link.n; k++)
    if (!strcmp(m->cluster->link.a[k].name, name)) {
      *lat = m->cluster->link.a[k].lat;
      *bw = m->cluster->link.a[k].bw;
      return;
    }
  fail_msg("no link %s", name);
}

static double clog2(int k) { return ceil(log2((double)k)); }

/* The cheapest of cost[0..n), the first on a tie. */
static int argmin(const double *cost, int n) {
  int best = 0;
  for (int j = 1; j < n; j++)
    if (cost[j] < cost[best])
      best = j;
  return best;
}

/* The method the formulas of comm.c give collective c of a dp group of 4 on
 * `nodes` nodes of 4 / nodes devices each. */
static int expected(const Module *m, const Inst *c, int nodes) {
  const int k = 4, g = k / nodes;
  double ai = 0, bi = 0, ae = 0, be = 0;   /* fail_msg returns no value */
  link_named(m, "intra", &ai, &bi);
  link_named(m, "inter", &ae, &be);
  double a = nodes > 1 ? ae : ai, bw = nodes > 1 ? be : bi;
  double cost[5] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
  if (c->op == OP_all_reduce) {
    double b = 4.0 * (double)type_elems(&c->in[0]->type);
    cost[0] = cost[1] = 2 * (k - 1) * a + 2.0 * (k - 1) / k * b / bw;
    cost[2] = 2 * clog2(k) * (a + b / bw);
    if (nodes > 1)
      cost[3] = 2 * clog2(g) * (ai + b / bi) + 2 * (nodes - 1) * ae +
                2.0 * (nodes - 1) / nodes * b / be;
    return argmin(cost, 5);
  }
  const Type *whole = c->op == OP_all_gather ? &c->type : &c->in[0]->type;
  int n;
  const int64_t *len = ir_get_ints(c, "sizes", &n);
  int64_t dim = ir_get_int(c, "dim", 0);
  double unit = 4.0 * (double)type_elems(whole) / (double)whole->dim[dim];
  double sum = 0, lo = INFINITY, hi = 0, full = 0;
  for (int j = 0; j < n; j++) {
    double b = (double)len[j] * unit;
    sum += b, lo = fmin(lo, b), hi = fmax(hi, b), full += b > 0;
  }
  cost[0] = (k - 1) * a + (sum - lo) / bw;
  cost[1] = (k - 1) * (a + hi / bw);
  cost[2] = full * clog2(k) * a + clog2(k) * sum / bw;
  if (c->op == OP_all_gather)
    cost[4] = clog2(k) * a + (k - 1) * hi / bw;
  return argmin(cost, 5);
}

/* The method of c, which must carry one. */
static int method_of(const Inst *c) {
  assert_non_null(ir_attr(c, "method"));
  int64_t v = ir_get_int(c, "method", -1);
  assert_true(v >= 0 && v < DTRT_COMM_COUNT);
  return (int)v;
}

/* The all_reduce of device 0 whose input has `elems` elements. */
static const Inst *all_reduce_of(const Module *m, int64_t elems) {
  const Func *f = step_func(m, 0);
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *c = f->inst.a[k];
    if (c->op == OP_all_reduce && type_elems(&c->in[0]->type) == elems)
      return c;
  }
  fail_msg("no all_reduce of %lld elements", (long long)elems);
  return NULL;
}

/* Every collective of every device: the expected method, and the same one
 * on every member (dp: the same list on every device). */
static void check_all(const Module *m, int nodes) {
  const Func *f0 = step_func(m, 0);
  int count = 0;
  for (int dev = 0; dev < 4; dev++) {
    const Func *f = step_func(m, dev);
    assert_int_equal(f->inst.n, f0->inst.n);
    for (int k = 0; k < f->inst.n; k++) {
      const Inst *c = f->inst.a[k];
      if (ir_ops[c->op].kind != K_COMM || c->op == OP_shard_slice)
        continue;
      assert_int_equal(method_of(c), expected(m, c, nodes));
      assert_int_equal(method_of(c), method_of(f0->inst.a[k]));
      count++;
    }
  }
  assert_true(count >= 4 * 4);   /* the gradients of w1, b1, w2, b2 at least */
}

static void test_two_nodes(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, two_nodes);
  check_all(m, 2);
  assert_int_equal(method_of(all_reduce_of(m, 512 * 1024)), DTRT_COMM_HIER);
  /* the plan names it */
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  spmd_report(out, m);
  fclose(out);
  assert_non_null(strstr(buf, "by hierarchical"));
  free(buf);
  arena_free(a);
}

static void test_one_node(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, one_node);
  check_all(m, 1);
  /* small: two binomial trees (4 latencies) beat the ring (6); large: the ring */
  assert_int_equal(method_of(all_reduce_of(m, 10)), DTRT_COMM_GROUPED);
  assert_int_equal(method_of(all_reduce_of(m, 1024)), DTRT_COMM_GROUPED);
  assert_int_equal(method_of(all_reduce_of(m, 512 * 1024)), DTRT_COMM_MPI);
  /* no hierarchical method on one node */
  int members[] = {0, 1, 2, 3};
  assert_true(isinf(comm_time(m, all_reduce_of(m, 10), members, 4, DTRT_COMM_HIER)));
  arena_free(a);
}

/* An all_gather over dp on device 0 of v (device 0's block of v.dim[0] rows)
 * with blocks len, its method chosen as pass_comm does. */
static int gather_method(Module *m, Inst *v, const int64_t *len, int nodes) {
  Func *f = step_func(m, 0);
  Inst *in = v;
  Inst *c = ir_new(f, OP_all_gather, v->loc, 1, &in);
  ir_set_int(c, "axis", 0);
  ir_set_int(c, "dim", 0);
  ir_set_ints(c, "sizes", len, 4);
  assert_non_null(ir_finish(c));
  int members[] = {0, 1, 2, 3};
  int got = comm_choose(m, c, members, 4);
  assert_int_equal(got, comm_choose(m, c, members, 4));
  ir_set_int(c, "method", got);
  assert_int_equal(got, expected(m, c, nodes));
  return got;
}

static void test_uneven_all_gather(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, one_node);
  Inst *small = (Inst *)all_reduce_of(m, 1024), *large = (Inst *)all_reduce_of(m, 512 * 1024);
  /* one owner of a small tensor: one broadcast */
  assert_int_equal(gather_method(m, small, (int64_t[]){1024, 0, 0, 0}, 1), DTRT_COMM_GROUPED);
  /* near-even small blocks: log2 k latencies of recursive doubling */
  assert_int_equal(gather_method(m, small, (int64_t[]){1024, 1000, 1000, 1000}, 1),
                   DTRT_COMM_PADDED);
  /* large, two empty blocks: padding would move 3x the largest */
  assert_int_equal(gather_method(m, large, (int64_t[]){512, 0, 0, 512}, 1), DTRT_COMM_MPI);
  /* even blocks over two nodes: the same bytes, 2 latencies instead of 3 */
  Arena *b = arena_new();
  Module *m2 = compile(b, two_nodes);
  Inst *v = (Inst *)all_reduce_of(m2, 512 * 1024);
  assert_int_equal(gather_method(m2, v, (int64_t[]){512, 512, 512, 512}, 2), DTRT_COMM_PADDED);
  arena_free(b);
  arena_free(a);
}

static void test_deterministic(void **state) {
  (void)state;
  Arena *a = arena_new(), *b = arena_new();
  Module *m1 = compile(a, two_nodes), *m2 = compile(b, two_nodes);
  for (int dev = 0; dev < 4; dev++) {
    const Func *f1 = step_func(m1, dev), *f2 = step_func(m2, dev);
    assert_int_equal(f1->inst.n, f2->inst.n);
    for (int k = 0; k < f1->inst.n; k++)
      if (ir_attr(f1->inst.a[k], "method"))
        assert_int_equal(method_of(f1->inst.a[k]), method_of(f2->inst.a[k]));
  }
  /* running the pass again changes nothing */
  Diag d;
  diag_init(&d, stderr);
  const Inst *w = all_reduce_of(m1, 512 * 1024);
  assert_true(pass_comm(m1, &d, NULL));
  assert_int_equal(method_of(w), DTRT_COMM_HIER);
  arena_free(b);
  arena_free(a);
}

/* The simulator costs a collective by its chosen method. */
static void test_sim_uses_method(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile(a, two_nodes);
  const Inst *w = all_reduce_of(m, 512 * 1024);
  int members[] = {0, 1, 2, 3};
  double t = sim_comm_time(m, w, members, 4);
  assert_true(t == comm_time(m, w, members, 4, DTRT_COMM_HIER));
  assert_true(t < comm_time(m, w, members, 4, DTRT_COMM_MPI));
  arena_free(a);
}

/* exchange = bf16: the gradients' all_reduces carry wire 1, the loss's
 * (forward) keeps f32; the hierarchical formula at 2 bytes an element plus
 * the packing pass, 12 bytes an element at the devices' 50 GFLOP/s over
 * SIM_BYTE_FLOPS bytes; the plan names the format. */
static void test_bf16_exchange(void **state) {
  (void)state;
  Arena *a = arena_new();
  const char *at = strstr(two_nodes, "  plan explicit\n");
  assert_non_null(at);
  char *cluster = arena_printf(a, "%.*s  exchange = bf16\n%s", (int)(at - two_nodes), two_nodes,
                               at);
  Module *m = compile(a, cluster);
  int wired = 0, f32 = 0;
  for (int d = 0; d < 4; d++) {
    const Func *f = step_func(m, d);
    for (int k = 0; k < f->inst.n; k++) {
      const Inst *c = f->inst.a[k];
      if (c->op != OP_all_reduce)
        continue;
      bool loss = c->in[0]->type.rank == 0;
      assert_int_equal(ir_get_int(c, "wire", 0), loss ? DT_WIRE_F32 : DT_WIRE_BF16);
      wired += !loss, f32 += loss;
    }
  }
  assert_int_equal(wired, 4 * 4);
  assert_int_equal(f32, 4);
  const Inst *w = all_reduce_of(m, 512 * 1024);
  int members[] = {0, 1, 2, 3};
  double ai = 0, bi = 1, ae = 0, be = 1, n = 512.0 * 1024, b = 2 * n;
  link_named(m, "intra", &ai, &bi);
  link_named(m, "inter", &ae, &be);
  double want = 2 * clog2(2) * (ai + b / bi) + 2 * ae + b / be + 12 * n / (50e9 / SIM_BYTE_FLOPS);
  double got = comm_time(m, w, members, 4, DTRT_COMM_HIER);
  assert_true(fabs(got - want) <= 1e-12 * want);
  assert_true(sim_comm_time(m, w, members, 4) == comm_time(m, w, members, 4, method_of(w)));
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  spmd_report(out, m);
  fclose(out);
  assert_non_null(strstr(buf, "1.50 MiB by "));   /* 2 (k-1)/k of 1 MiB */
  assert_non_null(strstr(buf, " in bf16"));
  free(buf);
  arena_free(a);
}

/* The one-node cluster with measured collectives over groups of 4 (and one
 * figure over 2, which a group of 4 must ignore) before its links. */
static Module *compile_measured(Arena *a, const char *figures) {
  char *cluster = arena_printf(a, "cluster c {\n  node a {\n" DEV("a0") DEV("a1") DEV("a2")
                               DEV("a3") "  }\n%s" LINKS, figures);
  return compile(a, cluster);
}

/* A measured all_reduce: its figure replaces the model for its method, the
 * chosen method follows, and a figure for another group size is ignored. */
static void test_measured_all_reduce(void **state) {
  (void)state;
  Arena *a = arena_new(), *b = arena_new();
  Module *plain = compile(b, one_node);
  /* grouped measured slow, ring fast; mpi measured over 2 ranks only */
  Module *m = compile_measured(a,
    "  collective all_reduce(method = grouped, ranks = 4, lat = 1ms, bw = 100MB/s)\n"
    "  collective all_reduce(method = ring, ranks = 4, lat = 2us, bw = 200GB/s)\n"
    "  collective all_reduce(method = mpi, ranks = 2, lat = 1ns, bw = 1TB/s)\n");
  int members[] = {0, 1, 2, 3};
  const Inst *small = all_reduce_of(m, 10), *large = all_reduce_of(m, 512 * 1024);
  const Inst *psmall = all_reduce_of(plain, 10), *plarge = all_reduce_of(plain, 512 * 1024);
  /* the figures, B = the buffer */
  assert_true(fabs(comm_time(m, small, members, 4, DTRT_COMM_GROUPED) - (1e-3 + 40 / 100e6)) <
              1e-15);
  double ring = 2e-6 + 4.0 * 512 * 1024 / 200e9;
  assert_true(fabs(comm_time(m, large, members, 4, DTRT_COMM_RING) - ring) < 1e-15);
  /* mpi's figure is for 2 ranks: the model, as without figures */
  assert_true(comm_time(m, large, members, 4, DTRT_COMM_MPI) ==
              comm_time(plain, plarge, members, 4, DTRT_COMM_MPI));
  assert_true(comm_time(m, large, members, 4, DTRT_COMM_MPI) > ring);
  /* the model chose grouped for small gradients, mpi for large; the figures
   * make ring the cheapest for both */
  assert_int_equal(method_of(psmall), DTRT_COMM_GROUPED);
  assert_int_equal(method_of(plarge), DTRT_COMM_MPI);
  assert_int_equal(method_of(small), DTRT_COMM_RING);
  assert_int_equal(method_of(large), DTRT_COMM_RING);
  /* comm_best over raw bytes agrees, and sees the measured time */
  int method;
  double t = comm_best(m, OP_all_reduce, 4.0 * 512 * 1024, NULL, members, 4, &method);
  assert_int_equal(method, DTRT_COMM_RING);
  assert_true(t == ring);
  /* over a group of 2 (members 0 and 1) only mpi's figure applies */
  double two = comm_best(m, OP_all_reduce, 4.0 * 512 * 1024, NULL, members, 2, &method);
  assert_int_equal(method, DTRT_COMM_MPI);
  assert_true(fabs(two - (1e-9 + 4.0 * 512 * 1024 / 1e12)) < 1e-15);
  arena_free(b);
  arena_free(a);
}

/* Measured all_gather, reduce_scatter and all_to_all: V as comm.c defines
 * it, and a measured hierarchical all_reduce on one node is taken as
 * measured. */
static void test_measured_bytes(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = compile_measured(a,
    "  collective all_gather(method = mpi, ranks = 4, lat = 10us, bw = 1.5GB/s)\n"
    "  collective all_gather(method = ring, ranks = 4, lat = 20us, bw = 1GB/s)\n"
    "  collective all_gather(method = grouped, ranks = 4, lat = 50us, bw = 1GB/s)\n"
    "  collective all_gather(method = padded, ranks = 4, lat = 5us, bw = 2GB/s)\n"
    "  collective reduce_scatter(method = ring, ranks = 4, lat = 7us, bw = 4GB/s)\n"
    "  collective all_to_all(method = ring, ranks = 4, lat = 3us, bw = 8GB/s)\n"
    "  collective all_reduce(method = hierarchical, ranks = 4, lat = 1us, bw = 1TB/s)\n");
  int members[] = {0, 1, 2, 3};
  double even[4] = {1e6, 1e6, 1e6, 1e6}, uneven[4] = {2e6, 1e6, 1e6, 0};
  /* mpi: the whole tensor T; padded and ring: k times the largest block */
  assert_true(fabs(comm_cost(m, OP_all_gather, 0, even, members, 4, DTRT_COMM_MPI) -
                   (10e-6 + 4e6 / 1.5e9)) < 1e-15);
  assert_true(fabs(comm_cost(m, OP_all_gather, 0, uneven, members, 4, DTRT_COMM_MPI) -
                   (10e-6 + 4e6 / 1.5e9)) < 1e-15);
  assert_true(fabs(comm_cost(m, OP_all_gather, 0, even, members, 4, DTRT_COMM_PADDED) -
                   (5e-6 + 4e6 / 2e9)) < 1e-15);
  assert_true(fabs(comm_cost(m, OP_all_gather, 0, uneven, members, 4, DTRT_COMM_PADDED) -
                   (5e-6 + 8e6 / 2e9)) < 1e-15);
  /* even blocks: padded is the cheapest; uneven, its padding makes mpi so */
  int method;
  comm_best(m, OP_all_gather, 0, even, members, 4, &method);
  assert_int_equal(method, DTRT_COMM_PADDED);
  comm_best(m, OP_all_gather, 0, uneven, members, 4, &method);
  assert_int_equal(method, DTRT_COMM_MPI);
  assert_true(fabs(comm_cost(m, OP_reduce_scatter, 0, uneven, members, 4, DTRT_COMM_RING) -
                   (7e-6 + 8e6 / 4e9)) < 1e-15);
  /* all_to_all: comm_cost takes the bytes a member sends, (k-1)/k of its input */
  assert_true(fabs(comm_cost(m, OP_all_to_all, 3e6, NULL, members, 4, DTRT_COMM_RING) -
                   (3e-6 + 4e6 / 8e9)) < 1e-15);
  /* hierarchical on one node: measured, so no longer infinite */
  const Inst *large = all_reduce_of(m, 512 * 1024);
  double hier = comm_time(m, large, members, 4, DTRT_COMM_HIER);
  assert_true(fabs(hier - (1e-6 + 4.0 * 512 * 1024 / 1e12)) < 1e-15);
  assert_int_equal(method_of(large), DTRT_COMM_HIER);
  /* a figure for a method the kernel lacks (IR text can hold one) is ignored */
  Collective bad = {.op = OP_reduce_scatter, .method = DTRT_COMM_PADDED, .ranks = 4, .bw = 1e15};
  vec_push(a, &m->cluster->coll, bad);
  assert_false(ir_has_method(OP_reduce_scatter, DTRT_COMM_PADDED));
  assert_true(isinf(comm_cost(m, OP_reduce_scatter, 0, even, members, 4, DTRT_COMM_PADDED)));
  comm_best(m, OP_reduce_scatter, 0, even, members, 4, &method);
  assert_true(ir_has_method(OP_reduce_scatter, method));
  arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_nodes),
      cmocka_unit_test(test_one_node),
      cmocka_unit_test(test_uneven_all_gather),
      cmocka_unit_test(test_deterministic),
      cmocka_unit_test(test_sim_uses_method),
      cmocka_unit_test(test_measured_all_reduce),
      cmocka_unit_test(test_measured_bytes),
      cmocka_unit_test(test_bf16_exchange),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
