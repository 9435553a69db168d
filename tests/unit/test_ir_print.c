/* test_ir_print.c: modules built with the builder API print, parse back and
 * print again to the same bytes, for every field, attribute kind and sharding. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "frontend.h"
#include "ir.h"

static char *print_with(const Module *m, void (*print)(FILE *, const Module *)) {
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  print(f, m);
  fclose(f);
  return buf;
}

static char *print_module(const Module *m) { return print_with(m, ir_print); }

/* Parses text, failing the test with the diagnostics when it does not parse. */
static Module *parse_ok(Arena *a, const char *text) {
  char *msg;
  size_t len;
  FILE *f = open_memstream(&msg, &len);
  Diag d;
  diag_init(&d, f);
  Module *m = ir_parse(a, src_from_string(a, "rt.ir", text), &d);
  fclose(f);
  if (!m)
    fail_msg("parse failed:\n%s\nof:\n%s", msg, text);
  free(msg);
  return m;
}

/* print(parse(print(m))) == print(m); returns the text for further checks. */
static char *round_trip(const Module *m) {
  char *t1 = print_module(m);
  Arena *a = arena_new();
  char *t2 = print_module(parse_ok(a, t1));
  assert_string_equal(t1, t2);
  free(t2);
  arena_free(a);
  return t1;
}

static Type ty(DType dt, int rank, ...) {
  Type t = {dt, rank, {0}};
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++)
    t.dim[d] = va_arg(ap, int);
  va_end(ap);
  return t;
}

static Inst *load(Func *f, const char *global, Loc loc) {
  Inst *i = ir_new(f, OP_load, loc, 0, NULL);
  ir_set_str(i, "global", global);
  i->name = global;
  return ir_finish(i);
}

static Inst *output(Func *f, Inst *x, const char *name) {
  Inst *o = ir_new(f, OP_output, x->loc, 1, &x);
  ir_set_str(o, "name", name);
  return ir_finish(o);
}

static Sharding *shard(Arena *a, int mesh, const int8_t *axis, int rank) {
  Sharding *s = arena_alloc(a, sizeof *s);
  s->mesh = mesh;
  for (int d = 0; d < IR_MAX_RANK; d++)
    s->axis[d] = d < rank ? axis[d] : -1;
  return s;
}

/* A two-node cluster, a 1-D and a 2-D mesh, globals, and a training step. */
static Module *build_mlp(Arena *a) {
  SrcFile *src = src_from_string(a, "mlp.dt", "model mlp\n  h = relu(x @ w1)\n");
  Module *m = ir_module_new(a, "mlp");
  Dim dim = {"B", 256, {src, 1, 11}};
  vec_push(a, &m->dim, dim);

  Cluster *c = arena_alloc(a, sizeof *c);
  c->name = "lab";
  Node na = {"a", {0}}, nb = {"b", {src, 2, 3}};
  vec_push(a, &c->node, na);
  vec_push(a, &c->node, nb);
  Device d0 = {.name = "a0", .node = 0, .kind = "cpu", .gflops = 80, .mem = (int64_t)16 << 30};
  Device d1 = {.name = "b0", .node = 1, .kind = "cpu", .gflops = 40.5, .mem = (int64_t)8 << 30,
               .target = "aarch64-linux-gnu", .cpu = "cortex-a72"};
  Device d2 = {.name = "b1", .node = 1, .kind = "cpu", .gflops = 1e-3, .mem = 1};
  vec_push(a, &c->dev, d0);
  vec_push(a, &c->dev, d1);
  vec_push(a, &c->dev, d2);
  Link l0 = {"intra", 20e9, 1e-6, 0, {0}}, l1 = {"inter", 1.25e9, 50e-6, 0.125, {src, 3, 1}};
  vec_push(a, &c->link, l0);
  vec_push(a, &c->link, l1);
  m->cluster = c;

  static int dev1[] = {0, 1, 2}, dev2[] = {2, 1, 0, 1};
  Mesh m1 = {.name = "m", .naxis = 1, .axis_name = {"dp"}, .axis_size = {3}, .dev = dev1};
  Mesh m2 = {.name = "grid", .naxis = 2, .axis_name = {"dp", "mp"}, .axis_size = {2, 2},
             .dev = dev2, .loc = {src, 1, 1}};
  vec_push(a, &m->mesh, m1);
  vec_push(a, &m->mesh, m2);
  m->plan = PLAN_AUTO;
  m->train = (Train){.loss = "loss", .opt = OPT_ADAMW, .lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999,
                     .eps = 1e-8, .weight_decay = 0.01, .schedule = DT_SCHED_COSINE, .warmup = 100,
                     .total = 10000, .loc = {src, 1, 1}};

  Global *x = ir_add_global(m, "x", G_INPUT, ty(DT_F32, 2, 6, 4), (Loc){src, 1, 1});
  x->shard = shard(a, 0, (int8_t[]){0, -1}, 2);
  x->shard->ratio[0] = arena_alloc(a, 3 * sizeof(double));
  memcpy(x->shard->ratio[0], (double[]){0.5, 0.25, 0.25}, 3 * sizeof(double));
  ir_add_global(m, "y", G_INPUT, ty(DT_I32, 1, 6), (Loc){0});
  Global *w1 = ir_add_global(m, "w1", G_PARAM, ty(DT_F32, 2, 4, 8), (Loc){0});
  w1->init = DT_INIT_GLOROT;
  w1->shard = shard(a, 1, (int8_t[]){1, 0}, 2);
  Global *w2 = ir_add_global(m, "w2", G_PARAM, ty(DT_F32, 2, 8, 3), (Loc){0});
  w2->init = DT_INIT_NORMAL;
  w2->init_arg = 0.02;
  Global *mom = ir_add_global(m, "w1.m", G_STATE, ty(DT_F32, 2, 4, 8), (Loc){0});
  mom->init = DT_INIT_ZEROS;
  mom->shard = shard(a, 0, (int8_t[]){-1, -1}, 2);
  mom->shard->partial = true;

  Func *f = ir_add_func(m, "forward", (Loc){src, 1, 1});
  Loc here = {src, 2, 12};
  Inst *lx = load(f, "x", here), *ly = load(f, "y", (Loc){0}), *lw1 = load(f, "w1", (Loc){0});
  Inst *lw2 = load(f, "w2", (Loc){0});
  Inst *h = ir_make(f, OP_matmul, here, 2, lx, lw1);
  h->shard = shard(a, 0, (int8_t[]){0, -1}, 2);
  h->fuse = 2;
  h->offset = 4096;
  Inst *r = ir_make(f, OP_relu, (Loc){src, 2, 7}, 1, h);
  r->name = "h";
  r->fuse = 2;
  r->offset = 0;
  Inst *logits = ir_make(f, OP_matmul, (Loc){0}, 2, r, lw2);
  logits->name = "logits";
  Inst *loss = ir_make(f, OP_cross_entropy, (Loc){0}, 2, logits, ly);
  loss->name = "loss";
  loss->shard = shard(a, 0, NULL, 0);
  loss->shard->partial = true;
  output(f, loss, "loss");
  output(f, logits, "logits");
  Inst *st = ir_new(f, OP_store, (Loc){0}, 1, &lw1);
  ir_set_str(st, "global", "w1.m");
  ir_finish(st);
  return m;
}

static void test_mlp_round_trip(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = build_mlp(a);
  char err[4096];
  FILE *ef = fmemopen(err, sizeof err, "w");
  Diag d;
  diag_init(&d, ef);
  bool ok = ir_verify(m, &d);
  fclose(ef);
  if (!ok)
    fail_msg("%s", err);
  char *text = round_trip(m);
  const char *expect =
      "module mlp\n"
      "\n"
      "dim B = 256 loc \"mlp.dt\":1:11\n"
      "\n"
      "cluster lab {\n"
      "  node a\n"
      "  node b loc \"mlp.dt\":2:3\n"
      "  device a0 on a {kind = \"cpu\", gflops = 80.0, mem = 17179869184}\n"
      "  device b0 on b {kind = \"cpu\", gflops = 40.5, mem = 8589934592, target = "
      "\"aarch64-linux-gnu\", cpu = \"cortex-a72\"}\n"
      "  device b1 on b {kind = \"cpu\", gflops = 0.001, mem = 1}\n"
      "  link intra {bw = 20000000000.0, lat = 1e-06}\n"
      "  link inter {bw = 1250000000.0, lat = 5e-05, spread = 0.125} loc \"mlp.dt\":3:1\n"
      "}\n"
      "\n"
      "mesh m[dp = 3] on [a0, b0, b1]\n"
      "mesh grid[dp = 2, mp = 2] on [b1, b0, a0, b0] loc \"mlp.dt\":1:1\n"
      "plan auto\n"
      "\n"
      "train {loss = \"loss\", opt = \"adamw\", lr = 0.0003, weight_decay = 0.01, beta1 = 0.9, "
      "beta2 = 0.999, eps = 1e-08, schedule = \"cosine\", warmup = 100, total = 10000} loc "
      "\"mlp.dt\":1:1\n"
      "\n"
      "input x : f32[6,4] shard m[dp(0.5, 0.25, 0.25), *] loc \"mlp.dt\":1:1\n"
      "input y : i32[6]\n"
      "param w1 : f32[4,8] {init = \"glorot\"} shard grid[mp, dp]\n"
      "param w2 : f32[8,3] {init = \"normal\", init_arg = 0.02}\n"
      "state w1.m : f32[4,8] {init = \"zeros\"} shard m[*, *] partial\n"
      "\n"
      "func @forward loc \"mlp.dt\":1:1 {\n"
      "  %x = load {global = \"x\"} : f32[6,4] loc \"mlp.dt\":2:12\n"
      "  %y = load {global = \"y\"} : i32[6]\n"
      "  %w1 = load {global = \"w1\"} : f32[4,8]\n"
      "  %w2 = load {global = \"w2\"} : f32[8,3]\n"
      "  %4 = matmul %x, %w1 : f32[6,8] shard m[dp, *] fuse 2 offset 4096 loc \"mlp.dt\":2:12\n"
      "  %h = relu %4 : f32[6,8] fuse 2 offset 0 loc \"mlp.dt\":2:7\n"
      "  %logits = matmul %h, %w2 : f32[6,3]\n"
      "  %loss = cross_entropy %logits, %y : f32[] shard m[] partial\n"
      "  output %loss {name = \"loss\"}\n"
      "  output %logits {name = \"logits\"}\n"
      "  store %w1 {global = \"w1.m\"}\n"
      "}\n";
  assert_string_equal(text, expect);
  free(text);
  arena_free(a);
}

/* Builds @f { %x = load x; ...; } around one instruction made by `make`. */
static Module *one_inst(Arena *a, Type xt, Inst *(*make)(Func *, Inst *)) {
  Module *m = ir_module_new(a, "t");
  ir_add_global(m, "x", G_INPUT, xt, (Loc){0});
  Func *f = ir_add_func(m, "f", (Loc){0});
  Inst *x = load(f, "x", (Loc){0});
  make(f, x);
  return m;
}

static const double floats[] = {
    0.0, -0.0, 0.1, 1.0 / 3, -2.5, 80, 1e15, 1e16, 123456789012345678.0, 1e-300, 5e-324,
    DBL_MIN, DBL_MAX, -DBL_MAX, 1e-7, 0.3, 2.0 / 3, 1e21, 4.35, INFINITY, -INFINITY, NAN};

static int float_k;
static Inst *make_mask(Func *f, Inst *x) {
  Inst *i = ir_new(f, OP_causal_mask, (Loc){0}, 1, &x);
  ir_set_float(i, "fill", floats[float_k]);
  return ir_finish(i);
}

static void test_float_attrs(void **state) {
  (void)state;
  for (float_k = 0; float_k < COUNTOF(floats); float_k++) {
    Arena *a = arena_new();
    Module *m = one_inst(a, ty(DT_F32, 2, 3, 3), make_mask);
    free(round_trip(m));
    Arena *b = arena_new();
    char *text = print_module(m);
    Module *m2 = parse_ok(b, text);
    double got = ir_get_float(m2->func.a[0]->inst.a[1], "fill", 7);
    if (isnan(floats[float_k]))
      assert_true(isnan(got));
    else
      assert_memory_equal(&got, &floats[float_k], sizeof got);
    free(text);
    arena_free(b);
    arena_free(a);
  }
}

static void test_float_spelling(void **state) {
  (void)state;
  const char *want[] = {"0.0", "-0.0", "0.1", "0.3333333333333333", "-2.5", "80.0", "1e+15",
                        "1e+16", "1.2345678901234568e+17", "1e-300", "5e-324"};
  for (int k = 0; k < COUNTOF(want); k++) {
    Arena *a = arena_new();
    float_k = k;
    char *text = print_module(one_inst(a, ty(DT_F32, 2, 3, 3), make_mask));
    char expect[64];
    snprintf(expect, sizeof expect, "{fill = %s}", want[k]);
    if (!strstr(text, expect))
      fail_msg("expected %s in\n%s", expect, text);
    free(text);
    arena_free(a);
  }
}

/* The shortest spelling of v that reads back, as a plain loop finds it. */
static void shortest(double v, char *buf, size_t n) {
  int exp10 = v == 0 ? 0 : (int)floor(log10(fabs(v)));
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, n, "%.*g", exp10 >= prec && exp10 < 15 ? exp10 + 1 : prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  if (!strpbrk(buf, ".e"))
    strcat(buf, ".0");
}

static double spelled[600];
static Inst *make_masks(Func *f, Inst *x) {
  for (int k = 0; k < COUNTOF(spelled); k++) {
    Inst *i = ir_new(f, OP_causal_mask, (Loc){0}, 1, &x);
    ir_set_float(i, "fill", spelled[k]);
    x = ir_finish(i);
  }
  return x;
}

/* The printer keeps the spellings it found: many values, each twice and
 * in another order (so values that share a place in what it keeps follow
 * one another), each spelled as the plain loop spells it. */
static void test_float_spelling_repeated(void **state) {
  (void)state;
  for (int k = 0; k < COUNTOF(spelled) / 2; k++)
    spelled[k] = spelled[COUNTOF(spelled) - 1 - k] = (k % 2 ? -1 : 1) * (k + 1) / 7.0 * pow(10, k % 9 - 4);
  Arena *a = arena_new();
  char *text = print_module(one_inst(a, ty(DT_F32, 2, 3, 3), make_masks));
  const char *p = text;
  for (int k = 0; k < COUNTOF(spelled); k++) {
    char want[64], expect[80];
    shortest(spelled[k], want, sizeof want);
    snprintf(expect, sizeof expect, "{fill = %s}", want);
    const char *at = strstr(p, "{fill = ");
    if (!at || strncmp(at, expect, strlen(expect)))
      fail_msg("value %d: expected %s at\n%.80s", k, expect, at ? at : "(end)");
    p = at + strlen(expect);
  }
  free(text);
  arena_free(a);
}

static Inst *make_ints(Func *f, Inst *x) {
  Inst *s = ir_new(f, OP_sum, (Loc){0}, 1, &x);
  ir_set_int(s, "keepdim", 1);
  ir_set_ints(s, "axes", (int64_t[]){-1, 0}, 2);
  ir_finish(s);
  Inst *e = ir_new(f, OP_sum, (Loc){0}, 1, &x);
  ir_set_ints(e, "axes", (int64_t[]){0}, 0);
  ir_finish(e);
  Inst *r = ir_new(f, OP_reshape, (Loc){0}, 1, &x);
  ir_set_ints(r, "shape", (int64_t[]){2, 1, 3}, 3);
  ir_finish(r);
  Inst *d = ir_new(f, OP_dropout, (Loc){0}, 1, &x);
  ir_set_int(d, "seed", INT64_MIN);
  ir_set_float(d, "p", 0.125);
  ir_finish(d);
  Inst *d2 = ir_new(f, OP_dropout, (Loc){0}, 1, &d);
  ir_set_float(d2, "p", 0);
  ir_set_int(d2, "seed", INT64_MAX);
  return ir_finish(d2);
}

static void test_int_attrs(void **state) {
  (void)state;
  Arena *a = arena_new();
  char *text = round_trip(one_inst(a, ty(DT_F32, 2, 2, 3), make_ints));
  assert_non_null(strstr(text, "%1 = sum %x {keepdim = 1, axes = [-1, 0]} : f32[1,1]\n"));
  assert_non_null(strstr(text, "%2 = sum %x {axes = []} : f32[2,3]\n"));
  assert_non_null(strstr(text, "{shape = [2, 1, 3]} : f32[2,1,3]\n"));
  assert_non_null(strstr(text, "{seed = -9223372036854775808, p = 0.125}"));
  assert_non_null(strstr(text, "{p = 0.0, seed = 9223372036854775807}"));
  free(text);
  arena_free(a);
}

static const char *weird = "a \"quoted\"\\ name\n\twith\x01 bytes \x7f and \xc3\x9f";

static Inst *make_strs(Func *f, Inst *x) {
  x->name = weird;
  Inst *o = output(f, x, weird);
  o->name = "1st";
  output(f, x, "");
  Inst *n = ir_make(f, OP_neg, (Loc){0}, 1, x);
  n->name = "";
  return ir_make(f, OP_neg, (Loc){0}, 1, n);
}

static void test_names_and_strings(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = one_inst(a, ty(DT_F32, 1, 2), make_strs);
  m->name = "my module";
  m->func.a[0]->name = "f g";
  m->global.a[0].name = "x-1";
  ir_set_str(m->func.a[0]->inst.a[0], "global", "x-1");
  char *text = round_trip(m);
  assert_non_null(strstr(text, "module \"my module\"\n"));
  assert_non_null(strstr(text, "input \"x-1\" : f32[2]\n"));
  assert_non_null(strstr(text, "func @\"f g\" {\n"));
  assert_non_null(strstr(text, "  %\"a \\\"quoted\\\"\\\\ name\\n\\twith\\x01 bytes \\x7f and \xc3\x9f\" ="));
  assert_non_null(strstr(text, "  %\"1st\" = output %\"a "));
  assert_non_null(strstr(text, "  output %\"a "));
  assert_non_null(strstr(text, "{name = \"\"}\n"));
  assert_non_null(strstr(text, "  %\"\" = neg %\"a "));
  assert_non_null(strstr(text, "  %4 = neg %\"\" : f32[2]\n"));
  free(text);
  /* the parsed names are the same bytes */
  Arena *b = arena_new();
  char *t1 = print_module(m);
  Module *m2 = parse_ok(b, t1);
  assert_string_equal(m2->func.a[0]->inst.a[0]->name, weird);
  assert_string_equal(ir_get_str(m2->func.a[0]->inst.a[1], "name", NULL), weird);
  assert_null(m2->func.a[0]->inst.a[4]->name);
  free(t1);
  arena_free(b);
  arena_free(a);
}

/* Every sharding form: whole, even split, ratios, two mesh axes, partial, scalar. */
static void test_shardings(void **state) {
  (void)state;
  const char *text =
      "module s\n"
      "\n"
      "mesh one[d = 1] on [0]\n"
      "mesh flat[] on [0]\n"
      "mesh sq[r = 1, c = 1] on [0]\n"
      "\n"
      "input a : f32[4,4] shard one[d, *]\n"
      "input b : f32[4,4] shard one[*, d(1.0)]\n"
      "input c : f32[4,4] shard sq[c, r] partial\n"
      "input d : f32[4,4] shard sq[*, *]\n"
      "input e : f32[] shard flat[] partial\n"
      "input f : f32[2,2,2,2,2,2] shard sq[*, r(1.0), *, *, c, *]\n"
      "\n"
      "func @f {\n"
      "  %a = load {global = \"a\"} : f32[4,4] shard sq[r, c(1.0)] partial\n"
      "  %e = load {global = \"e\"} : f32[] shard one[]\n"
      "  output %a {name = \"a\"} shard one[]\n"
      "}\n";
  Arena *a = arena_new();
  Module *m = parse_ok(a, text);
  char *t1 = print_module(m);
  assert_string_equal(t1, text);
  const Sharding *s = m->global.a[1].shard;
  assert_int_equal(s->mesh, 0);
  assert_int_equal(s->axis[0], -1);
  assert_int_equal(s->axis[1], 0);
  assert_null(s->ratio[0]);
  assert_true(s->ratio[1][0] == 1.0);
  s = m->global.a[2].shard;
  assert_int_equal(s->mesh, 2);
  assert_int_equal(s->axis[0], 1);
  assert_int_equal(s->axis[1], 0);
  assert_true(s->partial);
  for (int d = 2; d < IR_MAX_RANK; d++)
    assert_int_equal(s->axis[d], -1);
  free(t1);
  arena_free(a);
}

/* Without a loc clause, positions are those of the IR text: diagnostics point
 * there, and printing leaves them out. */
static void test_positions_and_locs(void **state) {
  (void)state;
  const char *text = "module p\ninput x : f32[2]\nfunc @f {\n"
                     "  %x = load {global = \"x\"} : f32[2]\n"
                     "  %y = neg %x : f32[2] loc \"m.dt\":7:9\n"
                     "  %z = neg %y : f32[2] loc \"m.dt\":8:1\n"
                     "}\n";
  Arena *a = arena_new();
  Module *m = parse_ok(a, text);
  Func *f = m->func.a[0];
  Loc lx = f->inst.a[0]->loc, ly = f->inst.a[1]->loc, lz = f->inst.a[2]->loc;
  assert_true(lx.file->ir_text);
  assert_string_equal(lx.file->name, "rt.ir");
  assert_int_equal(lx.line, 4);
  assert_int_equal(lx.col, 3);
  assert_int_equal(m->global.a[0].loc.line, 2);
  assert_int_equal(f->loc.line, 3);
  assert_false(ly.file->ir_text);
  assert_string_equal(ly.file->name, "m.dt");
  assert_null(ly.file->text);
  assert_int_equal(ly.line, 7);
  assert_int_equal(ly.col, 9);
  assert_ptr_equal(ly.file, lz.file);
  char *t1 = round_trip(m);
  assert_null(strstr(t1, "rt.ir"));
  assert_non_null(strstr(t1, "  %y = neg %x : f32[2] loc \"m.dt\":7:9\n"));
  free(t1);
  arena_free(a);
}

/* A loc naming a readable file reads it, so diagnostics show the line. */
static void test_loc_reads_source(void **state) {
  (void)state;
  char path[] = "/tmp/dtc_test_ir_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  FILE *sf = fdopen(fd, "w");
  fputs("first line\n  h = relu(x)\n", sf);
  fclose(sf);
  Arena *a = arena_new();
  char *text = arena_printf(a,
                            "module p\ninput x : f32[2]\nfunc @f {\n"
                            "  %%x = load {global = \"x\"} : f32[2] loc \"%s\":2:7\n}\n",
                            path);
  Module *m = parse_ok(a, text);
  Loc l = m->func.a[0]->inst.a[0]->loc;
  assert_non_null(l.file->text);
  char out[512];
  FILE *f = fmemopen(out, sizeof out, "w");
  Diag d;
  diag_init(&d, f);
  diag_error(&d, l, "here");
  fclose(f);
  char expect[256];
  snprintf(expect, sizeof expect, "%s:2:7: error: here\n  h = relu(x)\n      ^\n", path);
  assert_string_equal(out, expect);
  remove(path);
  arena_free(a);
}

static void test_empty_and_minimal(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = ir_module_new(a, "e");
  free(round_trip(m));
  ir_add_func(m, "empty", (Loc){0});
  char *text = round_trip(m);
  assert_string_equal(text, "module e\n\nfunc @empty {\n}\n");
  free(text);
  /* comments, blank lines and spacing are free */
  Module *p = parse_ok(a, "; header\n\n  module   e ; name\n\n\nfunc @empty{ ; open\n\n}\n; end");
  text = print_module(p);
  assert_string_equal(text, "module e\n\nfunc @empty {\n}\n");
  free(text);
  arena_free(a);
}

/* Unnamed values print as their position; the text's numbers are only labels. */
static void test_numbering(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = parse_ok(a, "module n\nfunc @f {\n"
                          "  %7 = const {value = 1.0} : f32[]\n"
                          "  %3 = neg %7 : f32[]\n"
                          "  %x = add %3, %7 : f32[]\n"
                          "}\n");
  char *text = print_module(m);
  assert_string_equal(text, "module n\n\nfunc @f {\n"
                            "  %0 = const {value = 1.0} : f32[]\n"
                            "  %1 = neg %0 : f32[]\n"
                            "  %x = add %1, %0 : f32[]\n"
                            "}\n");
  free(text);
  arena_free(a);
}

static void test_print_func(void **state) {
  (void)state;
  Arena *a = arena_new();
  Module *m = build_mlp(a);
  char *buf;
  size_t len;
  FILE *f = open_memstream(&buf, &len);
  ir_print_func(f, m->func.a[0]);
  fclose(f);
  const char *head = "func @forward loc \"mlp.dt\":1:1 {\n  %x = load";
  assert_true(!strncmp(buf, head, strlen(head)));
  assert_string_equal(buf + len - 2, "}\n");
  free(buf);
  arena_free(a);
}

/* The same model compiled from two places: its text forms differ in their
 * locations, its structure (the model hash's input) does not. */
static void test_structure_without_locs(void **state) {
  (void)state;
  static const char src[] = "model m(batch B = 4) {\n  input x: f32[B, 3]\n"
                            "  param w: f32[3, 2]\n  output y = x @ w\n}\n";
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  Module *m1 = fe_compile(a, src_from_string(a, "here/m.dt", src), NULL, 0, &d);
  Module *m2 = fe_compile(a, src_from_string(a, "/elsewhere/m.dt", src), NULL, 0, &d);
  assert_non_null(m1);
  assert_non_null(m2);
  char *p1 = print_with(m1, ir_print), *p2 = print_with(m2, ir_print);
  char *s1 = print_with(m1, ir_print_structure), *s2 = print_with(m2, ir_print_structure);
  assert_non_null(strstr(p1, "loc \"here/m.dt\":"));
  assert_string_not_equal(p1, p2);
  assert_string_equal(s1, s2);
  assert_null(strstr(s1, " loc "));
  assert_non_null(strstr(s1, "param w : f32[3,2]"));
  free(p1);
  free(p2);
  free(s1);
  free(s2);
  arena_free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mlp_round_trip),   cmocka_unit_test(test_float_attrs),
      cmocka_unit_test(test_float_spelling),   cmocka_unit_test(test_float_spelling_repeated),   cmocka_unit_test(test_int_attrs),
      cmocka_unit_test(test_names_and_strings), cmocka_unit_test(test_shardings),
      cmocka_unit_test(test_positions_and_locs), cmocka_unit_test(test_loc_reads_source),
      cmocka_unit_test(test_empty_and_minimal), cmocka_unit_test(test_numbering),
      cmocka_unit_test(test_print_func), cmocka_unit_test(test_structure_without_locs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
