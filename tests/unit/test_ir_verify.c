/* test_ir_verify.c: the verifier accepts a well-formed module and reports each
 * broken invariant, with its message, at the culprit's location. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ir.h"
#include "ir_arena_test.h"

static const char *good_text =
    "module v\n"                                                    /* 1 */
    "cluster c {\n"                                                 /* 2 */
    "  node a\n"                                                    /* 3 */
    "  device a0 on a {kind = \"cpu\", gflops = 1.0, mem = 1}\n"    /* 4 */
    "  device a1 on a {kind = \"cpu\", gflops = 1.0, mem = 1}\n"    /* 5 */
    "}\n"                                                           /* 6 */
    "mesh m[dp = 2] on [a0, a1]\n"                                  /* 7 */
    "mesh g[dp = 1, mp = 2] on [a0, a1]\n"                          /* 8 */
    "train {loss = \"loss\", opt = \"sgd\", lr = 0.1}\n"            /* 9 */
    "input x : f32[4,3] shard m[dp(0.75, 0.25), *]\n"               /* 10 */
    "input y : i32[4]\n"                                            /* 11 */
    "param w : f32[3,5] {init = \"glorot\"}\n"                      /* 12 */
    "func @forward {\n"                                             /* 13 */
    "  %x = load {global = \"x\"} : f32[4,3]\n"                     /* 14 */
    "  %y = load {global = \"y\"} : i32[4]\n"                       /* 15 */
    "  %w = load {global = \"w\"} : f32[3,5]\n"                     /* 16 */
    "  %h = matmul %x, %w : f32[4,5] shard g[dp, mp]\n"             /* 17 */
    "  %loss = cross_entropy %h, %y : f32[]\n"                      /* 18 */
    "  output %loss {name = \"loss\"}\n"                            /* 19 */
    "  output %h {name = \"h\"}\n"                                  /* 20 */
    "  store %w {global = \"w\"}\n"                                 /* 21 */
    "}\n";

static Module *good(void) {
  Diag d;
  diag_init(&d, stderr);
  Module *m = ir_parse(arena, src_from_string(arena, "v.ir", good_text), &d);
  assert_non_null(m);
  return m;
}

static Func *fwd(Module *m) { return m->func.a[0]; }
static Inst *inst(Module *m, const char *name) { return ir_find_inst(fwd(m), name); }
static Inst *at(Module *m, int k) { return fwd(m)->inst.a[k]; }

/* ir_verify reports nerr errors, the first of which is the line `want`. */
static void expect(const Module *m, int nerr, const char *want) {
  char *msg;
  size_t len;
  FILE *f = open_memstream(&msg, &len);
  Diag d;
  diag_init(&d, f);
  bool ok = ir_verify(m, &d);
  fclose(f);
  char *nl = strchr(msg, '\n');
  size_t n = nl ? (size_t)(nl - msg) : strlen(msg);
  if (ok != (nerr == 0) || d.nerr != nerr || (want && (n != strlen(want) || strncmp(msg, want, n))))
    fail_msg("wanted %d error(s), first:\n%s\ngot %d:\n%s", nerr, want ? want : "", d.nerr, msg);
  free(msg);
}

static void test_good(void **state) {
  (void)state;
  expect(good(), 0, NULL);
}

static void test_ssa_order(void **state) {
  (void)state;
  Module *m = good();
  Func *f = fwd(m);
  Inst *h = f->inst.a[3];
  f->inst.a[3] = f->inst.a[2];
  f->inst.a[2] = h;
  expect(m, 2, "v.ir:17:3: error: instruction 2 of @forward has id 3 (ir_renumber was not called)");
  ir_renumber(f);
  expect(m, 1, "v.ir:17:3: error: operand 2 of 'matmul' is not defined before its use");

  m = good();
  Func *g = ir_add_func(m, "g", (Loc){0});
  Inst *x = inst(m, "x");
  Inst *n = ir_new(g, OP_neg, x->loc, 1, &x);
  n->type = x->type;
  expect(m, 1, "v.ir:14:3: error: operand 1 of 'neg' belongs to function @forward");

  m = good();
  Inst *st = at(m, 7);
  Inst *bad = ir_new(fwd(m), OP_neg, st->loc, 1, &st);
  bad->type = (Type){DT_F32, 0, {0}};
  expect(m, 1, "v.ir:21:3: error: operand 1 of 'neg' has no value");

  m = good();
  inst(m, "h")->in[1] = NULL;
  expect(m, 1, "v.ir:17:3: error: operand 2 of 'matmul' is missing");
}

static void test_operand_counts(void **state) {
  (void)state;
  Module *m = good();
  inst(m, "h")->nin = 1;
  expect(m, 1, "v.ir:17:3: error: 'matmul' takes 2 operands, but has 1");
  m = good();
  Inst *c = at(m, 0);
  Inst *cc = ir_new(fwd(m), OP_concat, c->loc, 0, NULL);
  ir_set_int(cc, "axis", 0);
  cc->type = c->type;
  expect(m, 1, "v.ir:14:3: error: 'concat' takes 1 to 16 operands, but has 0");
}

static void test_attrs(void **state) {
  (void)state;
  Module *m = good();
  at(m, 5)->nattr = 0;
  expect(m, 2, "v.ir:19:3: error: 'output' needs attribute 'name' (str)");
  m = good();
  ir_set_int(inst(m, "h"), "foo", 1);
  expect(m, 1, "v.ir:17:3: error: 'matmul' has no attribute 'foo' (it has ta, tb, kblock, kfold)");
  m = good();
  ir_set_float(inst(m, "h"), "ta", 1.0);
  expect(m, 1, "v.ir:17:3: error: attribute 'ta' of 'matmul' must be int, not float");
  m = good();
  ir_set_str(inst(m, "loss"), "mode", "mean");
  expect(m, 1, "v.ir:18:3: error: 'cross_entropy' takes no attributes, but 'mode' is given");
  m = good();
  Inst *o = at(m, 6);
  o->attr = arena_realloc(arena, o->attr, sizeof(Attr), 2 * sizeof(Attr));
  o->attr[1] = o->attr[0];
  o->nattr = 2;
  expect(m, 1, "v.ir:20:3: error: attribute 'name' is given twice");
}

/* An lr's schedule is one libdtrt knows, its accumulation window positive. */
static void test_schedule(void **state) {
  (void)state;
  Module *m = good();
  Inst *l = ir_new(fwd(m), OP_lr, (Loc){0}, 0, NULL);
  ir_set_float(l, "base", 0.1);
  ir_set_str(l, "schedule", "cosine");
  ir_set_int(l, "warmup", 0);
  ir_set_int(l, "total", 10);
  ir_set_float(l, "beta1", 0);
  ir_set_float(l, "beta2", 0);
  ir_finish(l);
  expect(m, 0, NULL);
  ir_set_str(l, "schedule", "cyclic");
  expect(m, 1, "dtc: error: 'lr' has schedule 'cyclic', not constant, warmup, cosine, linear or step");
  /* gradient accumulation: a window of 1 to IR_MAX_ACCUMULATE calls */
  ir_set_str(l, "schedule", "cosine");
  ir_set_int(l, "accumulate", 3);
  ir_set_float(l, "idle", 1);
  expect(m, 0, NULL);
  ir_set_int(l, "accumulate", 0);
  expect(m, 1, "dtc: error: 'lr' has accumulate 0, not between 1 and 65536");
  ir_set_int(l, "accumulate", IR_MAX_ACCUMULATE + 1);
  expect(m, 1, "dtc: error: 'lr' has accumulate 65537, not between 1 and 65536");
}

static void test_types(void **state) {
  (void)state;
  Module *m = good();
  inst(m, "h")->type.dim[1] = 6;
  expect(m, 1, "v.ir:17:3: error: 'matmul' has type f32[4,6], but its operands give f32[4,5]");
  m = good();
  inst(m, "y")->type.dtype = DT_F32;
  m->global.a[1].type.dtype = DT_F32;
  expect(m, 1, "v.ir:18:3: error: 'cross_entropy' needs labels i32[N], got f32[4]");
  m = good();
  ir_set_int(inst(m, "h"), "kblock", 2);   /* k is 3 */
  expect(m, 1, "v.ir:17:3: error: 'matmul': kblock 2 does not cut k = 3 into whole blocks");
  m = good();
  ir_set_int(inst(m, "h"), "kblock", 0);
  expect(m, 1, "v.ir:17:3: error: 'matmul': kblock 0 does not cut k = 3 into whole blocks");
  m = good();
  ir_set_int(inst(m, "h"), "kfold", 1);   /* a product of matrices has no dims to fold */
  expect(m, 1, "v.ir:17:3: error: 'matmul': kfold 1 needs ta, no tb, and operands of rank 3 "
               "alike in their first 2 dims, got f32[4,3] and f32[3,5]");
}

static void test_globals(void **state) {
  (void)state;
  Module *m = good();
  ir_set_str(inst(m, "x"), "global", "nope");
  expect(m, 1, "v.ir:14:3: error: 'load' names unknown global 'nope'");
  m = good();
  m->global.a[0].type.dim[0] = 8;
  expect(m, 1, "v.ir:14:3: error: 'load' moves f32[4,3], but global 'x' is f32[8,3]");
  m = good();
  at(m, 7)->in[0] = inst(m, "x");
  expect(m, 1, "v.ir:21:3: error: 'store' moves f32[4,3], but global 'w' is f32[3,5]");
  m = good();
  m->global.a[1].type = (Type){DT_VOID, 0, {0}};
  expect(m, 2, "v.ir:11:1: error: global 'y' has no element type");
  m = good();
  m->global.a[2].type.dim[0] = 0;
  expect(m, 3, "v.ir:12:1: error: global 'w' has a rank or a dimension out of range");
  m = good();
  m->global.a[2].fan_in = -9;
  expect(m, 1, "v.ir:12:1: error: global 'w' has fans -9 and 0, outside 0 to 2^40");
  m = good();
  m->global.a[2].name = "x";
  expect(m, 3, "v.ir:12:1: error: global 'x' is defined twice");
}

static void test_names(void **state) {
  (void)state;
  Module *m = good();
  ir_set_str(at(m, 6), "name", "loss");
  expect(m, 1, "v.ir:20:3: error: output 'loss' is defined twice");
  m = good();
  inst(m, "h")->name = "x";
  expect(m, 1, "v.ir:17:3: error: value 'x' is defined twice");
  m = good();
  ir_add_func(m, "forward", (Loc){0});
  expect(m, 1, "dtc: error: function 'forward' is defined twice");
  m = good();
  m->mesh.a[1].name = "m";
  expect(m, 1, "v.ir:8:1: error: mesh 'm' is defined twice");
  m = good();
  m->cluster->dev.a[1].name = "a0";
  expect(m, 1, "v.ir:5:3: error: device 'a0' is defined twice");
}

static void test_shardings(void **state) {
  (void)state;
  Module *m = good();
  m->global.a[0].shard->mesh = 5;
  expect(m, 1, "v.ir:10:1: error: sharding of x names mesh 5 of 2");
  m = good();
  inst(m, "h")->shard->axis[1] = 2;
  expect(m, 1, "v.ir:17:3: error: sharding of h: dimension 1 is split over axis 2, but mesh 'g' has 2");
  m = good();
  double *r = m->global.a[0].shard->ratio[0];
  r[0] = 1.5, r[1] = -0.5;
  expect(m, 1, "v.ir:10:1: error: sharding of x: ratio 1 of dimension 0 is -0.5; ratios must be "
               "positive (or one 1, the rest 0)");
  r[0] = 1, r[1] = 0;   /* a placement: dim 0 whole on device 0, empty on 1 */
  expect(m, 0, NULL);
  r[0] = 1, r[1] = 1e-9;
  expect(m, 0, NULL);
  r[0] = 0.5, r[1] = 0;
  expect(m, 2, "v.ir:10:1: error: sharding of x: ratio 1 of dimension 0 is 0; ratios must be "
               "positive (or one 1, the rest 0)");
  r[0] = 0.5, r[1] = 0.4;
  expect(m, 1, "v.ir:10:1: error: sharding of x: the ratios of dimension 0 sum to 0.9, not 1");
  r[0] = 0.5, r[1] = 0.5000009;
  expect(m, 0, NULL);
  r[0] = NAN, r[1] = 0.5;
  expect(m, 2, "v.ir:10:1: error: sharding of x: ratio 0 of dimension 0 is nan; ratios must be "
               "positive (or one 1, the rest 0)");
  m = good();
  Sharding *s = inst(m, "h")->shard;
  s->axis[0] = 1;
  expect(m, 1, "v.ir:17:3: error: sharding of h splits two dimensions over mesh axis 'mp'");
  m = good();
  s = m->global.a[0].shard;
  s->ratio[1] = s->ratio[0];
  expect(m, 1, "v.ir:10:1: error: sharding of x: dimension 1 is whole but has ratios");
  /* an unnamed value is called by its number */
  m = good();
  Inst *h = inst(m, "h");
  h->name = NULL;
  h->shard->mesh = -1;
  expect(m, 1, "v.ir:17:3: error: sharding of %3 names mesh -1 of 2");
}

static void test_cluster_and_meshes(void **state) {
  (void)state;
  Module *m = good();
  m->mesh.a[0].dev[1] = 7;
  expect(m, 1, "v.ir:7:1: error: mesh 'm' places device 7, but there are 2");
  m = good();
  m->mesh.a[1].axis_size[1] = 0;
  expect(m, 1, "v.ir:8:1: error: axis 'mp' of mesh 'g' has size 0");
  m = good();
  m->mesh.a[1].axis_name[1] = "dp";
  expect(m, 1, "v.ir:8:1: error: mesh 'g' names axis 'dp' twice");
  m = good();
  m->mesh.a[1].naxis = 4;
  expect(m, 1, "v.ir:8:1: error: mesh 'g' has 4 axes (at most 3)");
  m = good();
  m->cluster->dev.a[0].node = 3;
  expect(m, 1, "v.ir:4:3: error: device 'a0' is on node 3 of 1");
  m = good();
  m->cluster = NULL;
  expect(m, 2, "v.ir:7:1: error: mesh 'm' places device 1, but there are 1");
}

static void test_train(void **state) {
  (void)state;
  Module *m = good();
  m->train.loss = "nope";
  expect(m, 1, "v.ir:9:1: error: the loss 'nope' is not an output of @forward");
  m = good();
  fwd(m)->name = "fwd";
  expect(m, 1, "v.ir:9:1: error: the loss 'loss' is not an output of @forward");
  m = good();
  m->train.loss = NULL;
  expect(m, 0, NULL);
}

/* Every broken invariant is reported, not only the first. */
static void test_many(void **state) {
  (void)state;
  Module *m = good();
  ir_set_str(inst(m, "x"), "global", "nope");
  inst(m, "h")->type.dim[1] = 6;
  m->train.loss = "nope";
  m->mesh.a[0].dev[0] = -1;
  expect(m, 4, "v.ir:7:1: error: mesh 'm' places device -1, but there are 2");
}

/* ir_check_attrs puts each problem at its attribute when told where they are. */
static void test_check_attrs_locations(void **state) {
  (void)state;
  Module *m = good();
  Inst *h = inst(m, "h");
  ir_set_int(h, "tb", 0);
  ir_set_str(h, "ta", "no");
  SrcFile *src = src_from_string(arena, "a.ir", "line\n");
  Loc locs[] = {{src, 1, 2}, {src, 1, 4}};
  char out[512];
  FILE *f = fmemopen(out, sizeof out, "w");
  Diag d;
  diag_init(&d, f);
  assert_false(ir_check_attrs(h, &d, (Loc){src, 1, 1}, locs));
  fclose(f);
  assert_string_equal(out, "a.ir:1:4: error: attribute 'ta' of 'matmul' must be int, not str\n"
                           "line\n   ^\n");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good),         cmocka_unit_test(test_ssa_order),
      cmocka_unit_test(test_operand_counts), cmocka_unit_test(test_attrs),
      cmocka_unit_test(test_schedule),
      cmocka_unit_test(test_types),        cmocka_unit_test(test_globals),
      cmocka_unit_test(test_names),        cmocka_unit_test(test_shardings),
      cmocka_unit_test(test_cluster_and_meshes), cmocka_unit_test(test_train),
      cmocka_unit_test(test_many),         cmocka_unit_test(test_check_attrs_locations),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
