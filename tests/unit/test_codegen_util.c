/* test_codegen_util.c: the helpers of test_codegen.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_codegen.h"

void ct_init(CT *t, const char *model) {
  memset(t, 0, sizeof *t);
  t->a = arena_new();
  t->m = ir_module_new(t->a, model);
  t->f = ir_add_func(t->m, "forward", (Loc){0});
  FILE *out = open_memstream(&t->log, &t->loglen);
  assert_non_null(out);
  diag_init(&t->d, out);
  snprintf(t->dir, sizeof t->dir, "/tmp/dtc-cg-XXXXXX");
  assert_non_null(mkdtemp(t->dir));
}

void ct_free(CT *t) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
  assert_int_equal(system(cmd), 0);
  fclose(t->d.out);
  free(t->log);
  arena_free(t->a);
}

const char *ct_log(CT *t) {
  fflush(t->d.out);
  return t->log ? t->log : "";
}

Inst *ct_load(CT *t, Func *f, const char *name) {
  (void)t;
  Inst *l = ir_new(f, OP_load, (Loc){0}, 0, NULL);
  ir_set_str(l, "global", name);
  if (!ir_find_inst(f, name))
    l->name = ir_find_global(f->mod, name)->name;
  return ir_finish(l);
}

Inst *ct_global(CT *t, const char *name, GlobalKind kind, Type type, const char *init) {
  Global *g = ir_add_global(t->m, name, kind, type, (Loc){0});
  if (kind != G_INPUT)
    g->init = dtrt_name_index(dtrt_init_names, DT_INIT_COUNT, init);
  return ct_load(t, t->f, name);
}

static Inst *vnew(CT *t, Op op, int nin, va_list ap) {
  return ir_new_va(t->f, op, (Loc){0}, nin, ap);
}

Inst *ct_new(CT *t, Op op, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = vnew(t, op, nin, ap);
  va_end(ap);
  return i;
}

Inst *ct_op(CT *t, Op op, int nin, ...) {
  va_list ap;
  va_start(ap, nin);
  Inst *i = vnew(t, op, nin, ap);
  va_end(ap);
  return ir_finish(i);
}

Inst *ct_const(CT *t, double v) {
  Inst *c = ir_new(t->f, OP_const, (Loc){0}, 0, NULL);
  ir_set_float(c, "value", v);
  return ir_finish(c);
}

void ct_output(CT *t, Inst *x, const char *name) {
  Inst *o = ir_new(t->f, OP_output, (Loc){0}, 1, &x);
  ir_set_str(o, "name", name);
  ir_finish(o);
}

void ct_train(CT *t, const char *opt, double lr) {
  Train *tr = &t->m->train;
  tr->loss = "loss";
  tr->opt = dtrt_name_index(ir_opt_names, OPT_COUNT, opt);
  tr->lr = lr;
  tr->schedule = DT_SCHED_CONSTANT;
  if (!strcmp(opt, "sgd")) {
    tr->momentum = 0.9;
  } else {
    tr->beta1 = 0.9;
    tr->beta2 = 0.999;
    tr->eps = 1e-8;
  }
}

void ct_check_groups(Func *f) {
  for (int i = 0; i < f->inst.n; i++) {
    Inst *x = f->inst.a[i];
    if (ir_ops[x->op].kind == K_ELEM)
      assert_true(x->fuse > 0);
    if (!x->fuse)
      continue;
    for (int j = i + 2; j < f->inst.n; j++)
      if (f->inst.a[j]->fuse == x->fuse)
        assert_int_equal(f->inst.a[j - 1]->fuse, x->fuse);
  }
}

void ct_check_plan(Func *f) {
  int n = f->inst.n, step = -1;
  int *pos = calloc((size_t)n, sizeof(int)), *last = calloc((size_t)n, sizeof(int));
  int *root = calloc((size_t)n, sizeof(int));
  for (int i = 0; i < n; i++) {
    Inst *x = f->inst.a[i];
    assert_int_equal(x->id, i);
    if (!x->fuse || i == 0 || f->inst.a[i - 1]->fuse != x->fuse)
      step++;
    pos[i] = last[i] = step;
    root[i] = x->op == OP_reshape ? root[x->in[0]->id] : i;
    for (int k = 0; k < x->nin; k++)
      if (last[root[x->in[k]->id]] < step)
        last[root[x->in[k]->id]] = step;
  }
  for (int i = 0; i < n; i++) {
    Inst *a = f->inst.a[i];
    if (a->offset < 0)
      continue;
    int64_t sa = type_elems(&a->type) * 4;
    assert_int_equal(a->offset % 64, 0);
    assert_true(a->offset + sa <= f->work_bytes);
    for (int j = i + 1; j < n; j++) {
      Inst *b = f->inst.a[j];
      if (b->offset < 0 || pos[j] > last[i] || pos[i] > last[j])
        continue;
      int64_t sb = type_elems(&b->type) * 4;
      if (!(a->offset + sa <= b->offset || b->offset + sb <= a->offset))
        fail_msg("@%s: %%%d [%lld,+%lld) and %%%d [%lld,+%lld) overlap while both live",
                 f->name, i, (long long)a->offset, (long long)sa, j, (long long)b->offset,
                 (long long)sb);
    }
  }
  free(pos);
  free(last);
  free(root);
}

void ct_passes(CT *t) {
  assert_true(ir_verify(t->m, &t->d));
  assert_true(passes_run(t->m, &t->d, NULL, NULL));
  for (int k = 0; k < t->m->func.n; k++) {
    ct_check_groups(t->m->func.a[k]);
    ct_check_plan(t->m->func.a[k]);
  }
}

const char *ct_emit(CT *t, const char *emit, const char *target, const char *cpu, int opt) {
  const char *ext = !strcmp(emit, "llvm") ? "ll" : !strcmp(emit, "asm") ? "s" : "o";
  CgOptions o = {.emit = emit, .target = target, .cpu = cpu, .opt_level = opt};
  o.output = arena_printf(t->a, "%s/%s.%s", t->dir, t->m->name, ext);
  return cg_emit(t->m, &o, &t->d) ? o.output : NULL;
}

char *ct_read(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;)
    if ((n += got) == cap) {
      char *nb = realloc(buf, 2 * cap + 1);
      if (!nb)
        free(buf);
      buf = nb;
      cap *= 2;
    }
  fclose(f);
  if (buf)
    buf[n] = 0;
  if (len)
    *len = n;
  return buf;
}

int ct_sh(const char *fmt, ...) {
  char cmd[8192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  return system(cmd);
}

void ct_close_to(const float *got, const float *want, int64_t n, const char *what) {
  ct_close_tol(got, want, n, what, CT_RTOL);
}

void ct_close_tol(const float *got, const float *want, int64_t n, const char *what, double rtol) {
  double scale = 0, worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; i++)
    scale = fmax(scale, fmax(fabs(got[i]), fabs(want[i])));
  for (int64_t i = 0; i < n; i++) {
    double err = scale > 0 ? fabs(got[i] - (double)want[i]) / scale : 0;
    if (!(err <= worst))
      worst = err, at = i;
  }
  if (!(worst <= rtol))
    fail_msg("%s: element %lld is %.9g, the interpreter says %.9g (error %.3g of the largest "
             "magnitude %.3g)", what, (long long)at, got[at], want[at], worst, scale);
}
