/* test_autodiff_util.c: the helpers of test_autodiff.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_autodiff.h"

static const char *fake_src =
    "line one of a model\nline two\nline three\nline four\nline five\n";

void tm_init(TM *t) {
  memset(t, 0, sizeof *t);
  t->a = arena_new();
  t->m = ir_module_new(t->a, "t");
  t->src = src_from_string(t->a, "t.dt", fake_src);
  t->f = ir_add_func(t->m, "forward", tm_loc(t, 1));
  FILE *out = open_memstream(&t->log, &t->loglen);
  assert_non_null(out);
  diag_init(&t->d, out);
  rng_seed(12345);
}

void tm_free(TM *t) {
  fclose(t->d.out);
  free(t->log);
  for (int k = 0; k < t->nval; k++)
    free(t->val[k].data);
  arena_free(t->a);
}

const char *tm_log(TM *t) {
  fflush(t->d.out);
  return t->log ? t->log : "";
}

Loc tm_loc(TM *t, int line) { return (Loc){t->src, line, 1}; }

bool tm_autodiff(TM *t) {
  return passes_run(t->m, &t->d, &(PassOptions){.stop_after = "autodiff", .verify_each = true},
                    NULL);
}

Inst *tm_global(TM *t, const char *name, GlobalKind kind, Type type) {
  Global *g = ir_add_global(t->m, name, kind, type, tm_loc(t, 2));
  if (kind != G_INPUT)
    g->init = DT_INIT_ZEROS;
  assert_true(t->nval < TM_MAXVAL);
  int64_t n = type_elems(&type);
  float *data = calloc((size_t)(n ? n : 1), 4);
  if (type.dtype == DT_F32)
    fill_uniform(data, n, -1, 1);
  t->val[t->nval].name = g->name;
  t->val[t->nval++].data = data;
  Inst *l = ir_new(t->f, OP_load, tm_loc(t, 2), 0, NULL);
  ir_set_str(l, "global", name);
  l->name = g->name;
  return ir_finish(l);
}

Inst *tm_param(TM *t, const char *name, Type type) { return tm_global(t, name, G_PARAM, type); }
Inst *tm_input(TM *t, const char *name, Type type) { return tm_global(t, name, G_INPUT, type); }

void *tm_data(TM *t, const char *name) {
  for (int k = 0; k < t->nval; k++)
    if (!strcmp(t->val[k].name, name))
      return t->val[k].data;
  fail_msg("no global %s", name);
  return NULL;
}

static Inst *vnew(TM *t, Op op, int nin, va_list ap) {
  return ir_new_va(t->f, op, tm_loc(t, 3), nin, ap);
}

Inst *tm_new(TM *t, Op op, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = vnew(t, op, nin, ap);
  va_end(ap);
  return i;
}

Inst *tm_op(TM *t, Op op, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = vnew(t, op, nin, ap);
  va_end(ap);
  return ir_finish(i);
}

Inst *tm_const(TM *t, double v) {
  Inst *c = tm_new(t, OP_const, 0);
  ir_set_float(c, "value", v);
  return ir_finish(c);
}

void tm_output(TM *t, Inst *x, const char *name) {
  Inst *o = ir_new(t->f, OP_output, tm_loc(t, 4), 1, &x);
  ir_set_str(o, "name", name);
  ir_finish(o);
}

Interp *tm_interp(TM *t) {
  Interp *it = interp_new(t->m);
  for (int k = 0; k < t->nval; k++)
    assert_true(interp_set_global(it, t->val[k].name, t->val[k].data));
  return it;
}

TM t;

int tm_setup(void **state) {
  (void)state;
  tm_init(&t);
  return 0;
}

int tm_teardown(void **state) {
  (void)state;
  tm_free(&t);
  return 0;
}

/* ---- random numbers (splitmix64) ---- */

static uint64_t rng_state;

void rng_seed(uint64_t s) { rng_state = s; }

static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double rng_uniform(double lo, double hi) {
  return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

void fill_uniform(float *p, int64_t n, double lo, double hi) {
  for (int64_t k = 0; k < n; k++)
    p[k] = (float)rng_uniform(lo, hi);
}

void fill_distinct(float *p, int64_t n, double lo, double step) {
  for (int64_t k = 0; k < n; k++)
    p[k] = (float)(lo + step * (double)k + rng_uniform(0, step / 4));
  for (int64_t k = n - 1; k > 0; k--) {
    int64_t j = (int64_t)(rng_next() % (uint64_t)(k + 1));
    float tmp = p[k];
    p[k] = p[j];
    p[j] = tmp;
  }
}

void fill_away_from_zero(float *p, int64_t n, double lo, double hi) {
  for (int64_t k = 0; k < n; k++)
    p[k] = (float)(rng_uniform(lo, hi) * (rng_next() & 1 ? 1 : -1));
}

/* ---- gradient checks ---- */

static double weighted(const float *y, const float *w, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; k++)
    s += (double)y[k] * (double)w[k];
  return s;
}

void gradcheck(TM *t, Inst *y, const char *label) {
  Type yt = y->type;
  int64_t ny = type_elems(&yt);
  Inst *w = tm_input(t, "gc__w", yt);
  const float *wv = tm_data(t, "gc__w");
  int64_t all[IR_MAX_RANK];
  for (int d = 0; d < yt.rank; d++)
    all[d] = d;
  Inst *prod = tm_op(t, OP_mul, 2, y, w), *loss = prod;
  if (yt.rank) {
    loss = tm_new(t, OP_sum, 1, prod);
    ir_set_ints(loss, "axes", all, yt.rank);
    ir_finish(loss);
  }
  tm_output(t, y, "y");
  tm_output(t, loss, "loss");
  t->m->train.loss = "loss";

  Func *g = autodiff_grads(t->m, t->f, "grads", &t->d);
  assert_non_null(g);
  if (!ir_verify(t->m, &t->d))
    fail_msg("%s: %s", label, tm_log(t));

  int np = 0, nout = 0;
  int64_t total = 0;
  for (int k = 0; k < t->m->global.n; k++)
    if (t->m->global.a[k].kind == G_PARAM)
      np++, total += type_elems(&t->m->global.a[k].type);
  for (int k = 0; k < g->inst.n; k++)
    nout += g->inst.a[k]->op == OP_output;
  assert_int_equal(nout, 1 + np);
  for (int k = 0; k < g->inst.n; k++)
    if (g->inst.a[k]->op != OP_output && g->inst.a[k]->op != OP_load)
      assert_non_null(g->inst.a[k]->loc.file);

  float *grad = calloc((size_t)total + 1, 4), *ybuf = calloc((size_t)ny + 1, 4), loss_ad;
  void *outs[1 + TM_MAXVAL] = {&loss_ad};
  int64_t off = 0;
  for (int k = 0, j = 1; k < t->m->global.n; k++)
    if (t->m->global.a[k].kind == G_PARAM) {
      outs[j++] = grad + off;
      off += type_elems(&t->m->global.a[k].type);
    }
  Interp *it = tm_interp(t);
  if (!interp_run(it, "grads", outs))
    fail_msg("%s: %s", label, interp_error(it));
  void *fouts[2] = {ybuf, NULL};   /* y, loss */
  assert_true(interp_run(it, "forward", fouts));
  assert_float_equal(loss_ad, weighted(ybuf, wv, ny), 1e-4 * (1 + fabs(loss_ad)));

  double worst = 0, worst_abs = 0;
  off = 0;
  for (int k = 0; k < t->m->global.n; k++) {
    const Global *gl = &t->m->global.a[k];
    if (gl->kind != G_PARAM)
      continue;
    float *p = interp_global(it, gl->name);
    for (int64_t e = 0; e < type_elems(&gl->type); e++) {
      float orig = p[e], hi = (float)(orig + GC_H), lo = (float)(orig - GC_H);
      p[e] = hi;
      assert_true(interp_run(it, "forward", fouts));
      double lp = weighted(ybuf, wv, ny);
      p[e] = lo;
      assert_true(interp_run(it, "forward", fouts));
      double lm = weighted(ybuf, wv, ny);
      p[e] = orig;
      double fd = (lp - lm) / ((double)hi - (double)lo), ad = grad[off + e];
      double err = fabs(ad - fd), ratio = err / (GC_ATOL + GC_RTOL * fabs(fd));
      if (ratio > worst)
        worst = ratio;
      if (err > worst_abs)
        worst_abs = err;
      if (ratio > 1)
        print_error("%s: d loss / d %s[%lld]: autodiff %.6g, finite differences %.6g\n", label,
                    gl->name, (long long)e, ad, fd);
    }
    off += type_elems(&gl->type);
  }
  print_message("gradcheck %-26s %4lld elems  max |ad-fd| %.2e  max err/tol %.3f\n", label,
                (long long)total, worst_abs, worst);
  interp_free(it);
  free(grad);
  free(ybuf);
  assert_true(worst <= 1);
}
