/* test_deep.c: a looped model against the same model written out layer by
 * layer (tests/deep/unroll.c): the same params, the same batches, several
 * training steps through the reference interpreter, on one device and on a
 * mesh of two with the batch split; losses, logits and params must be equal
 * bit for bit. Dropout is taken out of both (unroll --no-dropout): a loop
 * draws iteration i's masks with the step mixed with i (docs/IR.md, Loops),
 * so the masks of a looped model are not those of its written-out layers.
 *
 * And a recurrent model (RNN.dt: a cell repeated over time steps, its
 * inputs cut by step, its weights shared by every step): the gradient of
 * the loss against central finite differences of the forward.
 *
 *     test_deep LOOPED.dt UNROLLED.dt RNN.dt    (both at L = 3)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { LAYERS = 3, STEPS = 3 };

static const char *looped_path, *unrolled_path, *rnn_path;

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char buf[2][1 << 17];
  static int which;
  char *b = buf[which++ % 2];
  size_t n = fread(b, 1, sizeof buf[0] - 1, f);
  fclose(f);
  assert_true(n > 0 && n < sizeof buf[0] - 1);
  b[n] = 0;
  return b;
}

static const char *mesh_text =
    "\nparallel gpt on two {\n  mesh m[dp = 2]\n  shard ids: [dp, *]\n  shard next: [dp, *]\n"
    "  plan explicit\n}\n"
    "cluster two {\n  node a { device a0: cpu(gflops = 50, mem = 4GiB) }\n"
    "  node b { device b0: cpu(gflops = 50, mem = 4GiB) }\n"
    "  link intra(bw = 20GB/s, lat = 1us)\n  link inter(bw = 10GB/s, lat = 5us)\n}\n";

/* The model of file path (its `model` renamed gpt), through `stop`. */
static Module *compile(Arena *a, const char *path, bool mesh, const char *stop) {
  Diag d;
  diag_init(&d, stderr);
  char *text = read_file(path);
  char *m = strstr(text, "model gptu");
  if (m)
    memcpy(m, "model gpt ", 10);
  const char *defs[] = {"L=3"};
  const char *src = mesh ? arena_printf(a, "%s%s", text, mesh_text) : text;
  Module *mod = fe_compile(a, src_from_string(a, path, src), defs, 1, &d);
  assert_non_null(mod);
  assert_true(passes_run(mod, &d, &(PassOptions){.stop_after = stop, .verify_each = true}, NULL));
  return mod;
}

static uint32_t rng = 12345;
static float uniform(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 65536.0f * 0.2f - 0.1f;
}

/* "layers.wq" of the looped model is layers_I_wq of the unrolled one. */
static const char *unrolled_name(Arena *a, const char *name, int i) {
  const char *dot = strchr(name, '.');
  return dot ? arena_printf(a, "%.*s_%d_%s", (int)(dot - name), name, i, dot + 1) : name;
}

/* The two models, one interpreter (or mesh) each. */
typedef struct Pair {
  Module *m[2];
  Interp *it[2];
  InterpMesh *mesh[2];
} Pair;

static void set_global(Pair *p, int k, const char *name, const void *v) {
  if (p->mesh[k])
    assert_true(interp_mesh_set_global(p->mesh[k], name, v));
  else
    assert_true(interp_set_global(p->it[k], name, v));
}

static void get_global(Pair *p, int k, const char *name, void *v) {
  if (p->mesh[k]) {
    assert_true(interp_mesh_get_global(p->mesh[k], name, v));
  } else {
    const Global *g = ir_find_global(p->m[k], name);
    assert_non_null(g);
    memcpy(v, interp_global(p->it[k], name), (size_t)type_elems(&g->type) * 4);
  }
}

static bool run(Pair *p, int k, const char *fn, void *const *outs) {
  return p->mesh[k] ? interp_mesh_run(p->mesh[k], fn, outs) : interp_run(p->it[k], fn, outs);
}

/* Every param of the looped model, and its rows as the unrolled one's. */
static void same_params(Arena *a, Pair *p) {
  const Module *m = p->m[0];
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind != G_PARAM)
      continue;
    int64_t n = type_elems(&gl->type);
    float *v = malloc((size_t)n * 4);
    for (int64_t e = 0; e < n; e++)
      v[e] = uniform();
    set_global(p, 0, gl->name, v);
    if (strchr(gl->name, '.')) {
      assert_int_equal(gl->type.dim[0], LAYERS);
      for (int i = 0; i < LAYERS; i++)
        set_global(p, 1, unrolled_name(a, gl->name, i), v + i * (n / LAYERS));
    } else {
      set_global(p, 1, gl->name, v);
    }
    free(v);
  }
}

static void params_equal(Arena *a, Pair *p) {
  const Module *m = p->m[0];
  int checked = 0;
  for (int g = 0; g < m->global.n; g++) {
    const Global *gl = &m->global.a[g];
    if (gl->kind != G_PARAM)
      continue;
    int64_t n = type_elems(&gl->type);
    float *v = malloc((size_t)n * 4), *u = malloc((size_t)n * 4);
    get_global(p, 0, gl->name, v);
    bool stacked = strchr(gl->name, '.') != NULL;
    for (int i = 0; i < (stacked ? LAYERS : 1); i++) {
      int64_t rows = stacked ? n / LAYERS : n;
      get_global(p, 1, stacked ? unrolled_name(a, gl->name, i) : gl->name, u);
      if (memcmp(v + i * rows, u, (size_t)rows * 4))
        fail_msg("param %s (layer %d) differs after %d steps", gl->name, i, STEPS);
      checked++;
    }
    free(v);
    free(u);
  }
  assert_true(checked > 3 * LAYERS);
}

static void train_both(bool mesh) {
  Arena *a = arena_new();
  Pair p = {0};
  for (int k = 0; k < 2; k++) {
    p.m[k] = compile(a, k ? unrolled_path : looped_path, mesh, mesh ? "spmd" : "eval");
    if (mesh)
      p.mesh[k] = interp_mesh_new(p.m[k]);
    else
      p.it[k] = interp_new(p.m[k]);
  }
  rng = 12345;
  same_params(a, &p);
  const Global *ids = ir_find_global(p.m[0], "ids");
  assert_non_null(ids);
  int64_t nid = type_elems(&ids->type);
  int32_t *tok = malloc((size_t)nid * 4), *next = malloc((size_t)nid * 4);
  const Dim *v = NULL;
  for (int k = 0; k < p.m[0]->dim.n; k++)
    if (!strcmp(p.m[0]->dim.a[k].name, "V"))
      v = &p.m[0]->dim.a[k];
  assert_non_null(v);
  for (int s = 0; s < STEPS; s++) {
    for (int64_t e = 0; e < nid; e++) {
      rng = rng * 1664525u + 1013904223u;
      tok[e] = (int32_t)((rng >> 8) % (uint32_t)v->value);
      next[e] = (int32_t)((rng >> 16) % (uint32_t)v->value);
    }
    float loss[2];
    for (int k = 0; k < 2; k++) {
      set_global(&p, k, "ids", tok);
      set_global(&p, k, "next", next);
      if (!run(&p, k, "train_step", (void *[]){&loss[k]}))
        fail_msg("%s", mesh ? interp_mesh_error(p.mesh[k]) : interp_error(p.it[k]));
    }
    printf("%s step %d: loss %.9g (looped) %.9g (written out)\n", mesh ? "dp = 2" : "one device",
           s, loss[0], loss[1]);
    assert_memory_equal(&loss[0], &loss[1], sizeof loss[0]);
  }
  params_equal(a, &p);
  for (int k = 0; k < 2; k++) {
    if (mesh)
      interp_mesh_free(p.mesh[k]);
    else
      interp_free(p.it[k]);
  }
  free(tok);
  free(next);
  arena_free(a);
}

static void one_device(void **state) {
  (void)state;
  train_both(false);
}

static void two_devices(void **state) {
  (void)state;
  train_both(true);
}

/* d loss / d param of the RNN (autodiff_grads, then the interpreter) against
 * central differences of @forward, accumulated in double. */
static void rnn_gradients(void **state) {
  (void)state;
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  Module *m = fe_compile(a, src_from_string(a, rnn_path, read_file(rnn_path)), NULL, 0, &d);
  assert_non_null(m);
  Func *g = autodiff_grads(m, ir_find_func(m, "forward"), "grads", &d);
  assert_non_null(g);
  assert_true(ir_verify(m, &d));
  Interp *it = interp_new(m);
  rng = 777;
  for (int k = 0; k < m->global.n; k++) {
    const Global *gl = &m->global.a[k];
    int64_t n = type_elems(&gl->type);
    float *v = malloc((size_t)n * 4);
    for (int64_t e = 0; e < n; e++)
      v[e] = 10 * uniform();   /* in [-1, 1] */
    assert_true(interp_set_global(it, gl->name, v));
    free(v);
  }
  float grad[4][64], loss;
  void *outs[5] = {&loss};
  const char *names[4];
  int np = 0;
  for (int k = 0; k < m->global.n; k++)
    if (m->global.a[k].kind == G_PARAM) {
      assert_true(type_elems(&m->global.a[k].type) <= 64 && np < 4);
      names[np] = m->global.a[k].name;
      outs[1 + np] = grad[np];
      np++;
    }
  assert_int_equal(np, 4);
  if (!interp_run(it, "grads", outs))
    fail_msg("%s", interp_error(it));
  double worst = 0;
  for (int q = 0; q < np; q++) {
    float *p = interp_global(it, names[q]);
    int64_t n = type_elems(&ir_find_global(m, names[q])->type);
    for (int64_t e = 0; e < n; e++) {
      float orig = p[e], lo, hi;
      const float h = 1e-2f;
      p[e] = orig + h;
      assert_true(interp_run(it, "forward", (void *[]){&hi}));
      p[e] = orig - h;
      assert_true(interp_run(it, "forward", (void *[]){&lo}));
      p[e] = orig;
      double fd = ((double)hi - (double)lo) / (2.0 * h), err = fabs(fd - grad[q][e]);
      if (err > 1e-3 + 1e-2 * fabs(fd))
        fail_msg("d loss / d %s[%lld]: autodiff %g, finite differences %g", names[q],
                 (long long)e, grad[q][e], fd);
      worst = err > worst ? err : worst;
    }
  }
  printf("rnn over 6 steps: every gradient within %.2g of finite differences\n", worst);
  interp_free(it);
  arena_free(a);
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: test_deep LOOPED.dt UNROLLED.dt RNN.dt\n");
    return 2;
  }
  looped_path = argv[1];
  unrolled_path = argv[2];
  rnn_path = argv[3];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_device),
      cmocka_unit_test(two_devices),
      cmocka_unit_test(rnn_gradients),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
