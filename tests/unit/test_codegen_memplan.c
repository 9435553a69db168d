/* test_codegen_memplan.c: the memory plan on the examples and on long
 * generated models. Every plan is checked by ct_check_plan (no two live
 * buffers overlap, offsets aligned and inside the arena); its arena is at
 * most the one a plain greedy reference finds (largest first into the best
 * fitting gap, quadratic, here) and at most the arena recorded by hand from
 * `dtc X.dt --emit=plan` before memplan was rewritten. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "test_codegen.h"

/* ---- the reference: greedy by size into the best fit ---- */

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

static int by_size_desc(const void *x, const void *y) {
  const CtBuf *a = x, *b = y;
  int64_t sa = round64(a->size), sb = round64(b->size);
  if (sa != sb)
    return sa < sb ? 1 : -1;
  return a->def != b->def ? a->def - b->def : a->id - b->id;
}

static int by_offset(const void *x, const void *y) {
  const CtBuf *a = *(CtBuf *const *)x, *b = *(CtBuf *const *)y;
  return (a->off > b->off) - (a->off < b->off);
}

/* The arena of the greedy plan of b's lives and sizes: each buffer, largest
 * first, goes into the smallest gap that holds it (the lowest of equal ones)
 * among the placed buffers live with it, or past all of them. */
static int64_t reference_arena(const CtBuf *plan, int n) {
  CtBuf *b = malloc(sizeof *b * (size_t)(n + 1));
  CtBuf **live = malloc(sizeof *live * (size_t)(n + 1));
  memcpy(b, plan, sizeof *b * (size_t)n);
  qsort(b, (size_t)n, sizeof *b, by_size_desc);
  int64_t top = 0;
  for (int k = 0; k < n; k++) {
    int nl = 0;
    for (int j = 0; j < k; j++)
      if (b[j].def <= b[k].last && b[k].def <= b[j].last)
        live[nl++] = &b[j];
    qsort(live, (size_t)nl, sizeof *live, by_offset);
    int64_t size = round64(b[k].size), end = 0, at = -1, best = INT64_MAX;
    for (int j = 0; j < nl; j++) {
      int64_t room = live[j]->off - end;
      if (room >= size && room < best)
        at = end, best = room;
      if (live[j]->off + round64(live[j]->size) > end)
        end = live[j]->off + round64(live[j]->size);
    }
    b[k].off = at >= 0 ? at : end;
    top = b[k].off + size > top ? b[k].off + size : top;
  }
  free(b);
  free(live);
  return top;
}

/* ---- compiling ---- */

typedef struct Compiled {
  Arena *a;
  Module *m;
} Compiled;

static void compile(Compiled *c, const SrcFile *src) {
  Diag d;
  diag_init(&d, stderr);
  c->m = fe_compile(c->a, src, NULL, 0, &d);
  assert_non_null(c->m);
  assert_true(passes_run(c->m, &d, NULL, NULL));
}

/* Checks every function's plan; with ref, also against the reference. */
static void check_module(const Module *m, bool ref) {
  for (int k = 0; k < m->func.n; k++) {
    Func *f = m->func.a[k];
    ct_check_plan(f);
    if (!ref)
      continue;
    int nb, nstep;
    CtBuf *b = ct_plan_bufs(f, &nb, &nstep);
    int64_t r = reference_arena(b, nb);
    if (f->work_bytes > r)
      fail_msg("@%s: arena %lld bytes, the greedy reference %lld", f->name,
               (long long)f->work_bytes, (long long)r);
    free(b);
  }
}

/* ---- the examples ---- */

typedef struct Arena1 {
  const char *func;
  int64_t bytes;   /* work_bytes before the rewrite */
} Arena1;

typedef struct Example {
  const char *file;
  Arena1 arena[10];
} Example;

/* Recorded from `dtc examples/X.dt --emit=plan` (work arena) of the
 * quadratic greedy plan, in bytes. */
static const Example examples[] = {
    {"mlp.dt", {{"forward", 131072}, {"train_step", 868352}}},
    {"mlp_big.dt", {{"forward", 2097152}, {"train_step", 8388608}}},
    {"cnn.dt", {{"forward", 6422528}, {"train_step", 12845056}}},
    {"cnn_bn.dt", {{"forward", 6422656}, {"train_step", 22078016}}},
    {"transformer.dt", {{"forward", 589824}, {"train_step", 1729344}}},
    {"gpt.dt",
     {{"forward", 851968},
      {"layers", 589824},
      {"train_step", 3830912},
      {"layers.save", 786496},
      {"layers.grad", 524288}}},
    {"mlp_dp.dt",
     {{"forward.0", 53248},
      {"forward.1", 51200},
      {"forward.2", 26624},
      {"train_step.0", 1616960},
      {"train_step.1", 1616960},
      {"train_step.2", 1616960}}},
    {"mlp_tp.dt",
     {{"forward.0", 32768},
      {"forward.3", 32768},
      {"train_step.0", 808512},
      {"train_step.3", 808512}}},
    {"mlp_dp2.dt", {{"forward.0", 65536}, {"train_step.0", 1616960}, {"train_step.1", 1616960}}},
    {"mlp_elastic.dt", {{"forward.0", 32768}, {"train_step.0", 217088}, {"train_step.3", 217088}}},
};

static void plan_examples(void **state) {
  (void)state;
  for (size_t e = 0; e < sizeof examples / sizeof *examples; e++) {
    const Example *x = &examples[e];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", DTC_TEST_EXAMPLES, x->file);
    Compiled c = {arena_new(), NULL};
    compile(&c, src_read(c.a, path));
    check_module(c.m, true);
    for (int k = 0; k < 10 && x->arena[k].func; k++) {
      const Func *f = ir_find_func(c.m, x->arena[k].func);
      assert_non_null(f);
      print_message("%s @%s: work arena %lld bytes (before: %lld)\n", x->file, f->name,
                    (long long)f->work_bytes, (long long)x->arena[k].bytes);
      assert_true(f->work_bytes <= x->arena[k].bytes);
    }
    arena_free(c.a);
  }
}

/* ---- generated models ---- */

typedef struct Text {
  char *s;
  size_t n, cap;
} Text;

static void put(Text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (t->n + (size_t)k + 1 > t->cap) {
    t->cap = 2 * (t->n + (size_t)k + 1);
    t->s = realloc(t->s, t->cap);
    assert_non_null(t->s);
  }
  va_start(ap, fmt);
  vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
  va_end(ap);
  t->n += (size_t)k;
}

/* bench/passes's model: a chain of n statements, every third a matmul and
 * relu, the others elementwise; one weight. */
static char *chain_text(int n) {
  Text t = {0};
  put(&t, "model chain(batch B = 8) {\n  input x: f32[B, 16]\n  input y: i32[B]\n"
          "  param w: f32[16, 16]\n  h0 = x @ w\n");
  for (int i = 1; i < n; i++)
    if (i % 3 == 0)
      put(&t, "  h%d = relu(h%d @ w)\n", i, i - 1);
    else
      put(&t, "  h%d = h%d * 0.5 + x\n", i, i - 1);
  put(&t, "  loss = cross_entropy(h%d, y)\n  minimize loss with sgd(lr = 0.1)\n}\n", n - 1);
  return t.s;
}

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

/* n statements over four widths: each reads the one before and, often, a
 * random earlier value of its width (long lives of many sizes, so the plan
 * has gaps to fill). A matmul by p_J_K changes width J to K. */
static char *random_text(int n, uint64_t seed) {
  static const int width[] = {16, 48, 80, 200};
  Text body = {0}, t = {0};
  bool used[4][4] = {{false}};
  int *w = malloc(sizeof(int) * (size_t)n);
  w[0] = 0;
  put(&body, "  h0 = x\n");
  for (int i = 1; i < n; i++) {
    int k = i == n - 1 ? 0 : (int)(lcg(&seed) % 4), a = -1;
    for (int tries = 0; tries < 8 && a < 0; tries++) {
      int j = (int)(lcg(&seed) % (uint64_t)i);
      a = w[j] == k ? j : -1;
    }
    w[i] = k;
    if (k != w[i - 1] || lcg(&seed) % 4 == 0) {
      used[w[i - 1]][k] = true;
      put(&body, "  h%d = relu(h%d @ p%d_%d)", i, i - 1, w[i - 1], k);
    } else {
      put(&body, "  h%d = h%d * 0.5", i, i - 1);
    }
    put(&body, a >= 0 ? " + h%d\n" : "\n", a);
  }
  put(&t, "model rnd(batch B = 8) {\n  input x: f32[B, 16]\n  input y: i32[B]\n");
  for (int j = 0; j < 4; j++)
    for (int k = 0; k < 4; k++)
      if (used[j][k])
        put(&t, "  param p%d_%d: f32[%d, %d]\n", j, k, width[j], width[k]);
  put(&t, "%s  loss = cross_entropy(h%d, y)\n  minimize loss with sgd(lr = 0.1)\n}\n", body.s,
      n - 1);
  free(body.s);
  free(w);
  return t.s;
}

/* Every matmul's result (a kernel's, not an output) has memory. */
static void check_matmuls(const Func *f) {
  int nmm = 0;
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_matmul) {
      assert_true(f->inst.a[i]->offset >= 0);
      nmm++;
    }
  assert_true(nmm > 0);
}

static void compile_text(Compiled *c, const char *name, char *text) {
  c->a = arena_new();
  compile(c, src_from_string(c->a, name, text));
  free(text);
}

/* 20,000 statements: the plan is checked whole, and its arenas are no
 * larger than the quadratic plan's (with fusion's groups of at most 64 ops,
 * whose values read across a cut need memory: 512 bytes more). */
static void plan_long_chain(void **state) {
  (void)state;
  Compiled c;
  compile_text(&c, "chain.dt", chain_text(20000));
  check_module(c.m, false);
  const Func *fwd = ir_find_func(c.m, "forward"), *step = ir_find_func(c.m, "train_step");
  check_matmuls(fwd);
  check_matmuls(step);
  print_message("chain of 20000: @forward %lld bytes, @train_step %lld bytes\n",
                (long long)fwd->work_bytes, (long long)step->work_bytes);
  assert_true(fwd->work_bytes <= 1024);
  assert_true(step->work_bytes <= 6828032);
  arena_free(c.a);
}

static void plan_long_random(void **state) {
  (void)state;
  Compiled c;
  compile_text(&c, "rnd.dt", random_text(20000, 7));
  check_module(c.m, false);
  const Func *fwd = ir_find_func(c.m, "forward"), *step = ir_find_func(c.m, "train_step");
  check_matmuls(step);
  print_message("random 20000: @forward %lld bytes, @train_step %lld bytes\n",
                (long long)fwd->work_bytes, (long long)step->work_bytes);
  assert_true(fwd->work_bytes <= 12651520);
  assert_true(step->work_bytes <= 407031040);
  arena_free(c.a);
}

/* Shorter random models, each against the reference. */
static void plan_random_vs_reference(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    Compiled c;
    compile_text(&c, "rnd.dt", random_text(600, seed));
    check_module(c.m, true);
    arena_free(c.a);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(plan_examples),
      cmocka_unit_test(plan_random_vs_reference),
      cmocka_unit_test(plan_long_chain),
      cmocka_unit_test(plan_long_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
