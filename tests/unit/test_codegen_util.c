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

static int64_t round64(int64_t n) { return (n + 63) / 64 * 64; }

static int64_t value_bytes(const Type *t) { return type_elems(t) * (int64_t)dtype_size(t->dtype); }

/* A repeat's scratch as docs/IR.md lays it out: two buffers per carried
 * value, the body's arena, a row per stacked output no repeat_out takes. */
static int64_t scratch_size(const Inst *r) {
  const Func *body = ir_repeat_body(r), *f = r->fn;
  int64_t carry = ir_get_int(r, "carry", 1), s = round64(body->work_bytes);
  for (int k = 0; k < carry; k++)
    s += 2 * round64(value_bytes(&r->in[k]->type));
  for (int k = (int)carry; k < ir_func_noutputs(body); k++) {
    bool taken = false;
    for (int i = 0; i < f->inst.n; i++) {
      const Inst *x = f->inst.a[i];
      taken |= x->op == OP_repeat_out && x->in[0] == r && ir_get_int(x, "index", 0) == k;
    }
    if (!taken)
      s += round64(value_bytes(&ir_func_output(body, k)->in[0]->type));
  }
  return s;
}

CtBuf *ct_plan_bufs(Func *f, int *nbuf, int *nstep) {
  int n = f->inst.n, step = -1, nb = 0;
  int *pos = calloc((size_t)n + 1, sizeof(int)), *last = calloc((size_t)n + 1, sizeof(int));
  int *root = calloc((size_t)n + 1, sizeof(int));
  CtBuf *b = calloc(2 * (size_t)n + 1, sizeof *b);
  for (int i = 0; i < n; i++) {
    Inst *x = f->inst.a[i];
    assert_int_equal(x->id, i);
    if (!x->fuse || i == 0 || f->inst.a[i - 1]->fuse != x->fuse)
      step++;
    pos[i] = last[i] = step;
    if (x->op == OP_repeat_out)   /* written by its repeat */
      pos[i] = pos[x->in[0]->id];
    root[i] = x->op == OP_reshape ? root[x->in[0]->id] : i;
    for (int k = 0; k < x->nin; k++)
      if (last[root[x->in[k]->id]] < step)
        last[root[x->in[k]->id]] = step;
  }
  for (int i = 0; i < n; i++) {
    Inst *x = f->inst.a[i];
    if (x->offset >= 0)
      b[nb++] = (CtBuf){i, pos[i], last[i], x->offset, value_bytes(&x->type)};
    if (x->op == OP_repeat)
      b[nb++] = (CtBuf){-1 - i, pos[i], pos[i], ir_get_int(x, "scratch", -1), scratch_size(x)};
  }
  free(pos);
  free(last);
  free(root);
  *nbuf = nb;
  *nstep = step + 1;
  return b;
}

/* A segment tree over the plan's distinct addresses: add to a range, the
 * largest count in a range. */
typedef struct Cover {
  int n;
  int *max, *add;
} Cover;

static void cover_add(Cover *c, int v, int lo, int hi, int a, int b, int d) {
  if (b <= lo || hi <= a)
    return;
  if (a <= lo && hi <= b) {
    c->max[v] += d;
    c->add[v] += d;
    return;
  }
  int mid = (lo + hi) / 2;
  cover_add(c, 2 * v, lo, mid, a, b, d);
  cover_add(c, 2 * v + 1, mid, hi, a, b, d);
  int l = c->max[2 * v], r = c->max[2 * v + 1];
  c->max[v] = (l > r ? l : r) + c->add[v];
}

static int cover_max(const Cover *c, int v, int lo, int hi, int a, int b) {
  if (b <= lo || hi <= a)
    return 0;
  if (a <= lo && hi <= b)
    return c->max[v];
  int mid = (lo + hi) / 2, l = cover_max(c, 2 * v, lo, mid, a, b);
  int r = cover_max(c, 2 * v + 1, mid, hi, a, b);
  return (l > r ? l : r) + c->add[v];
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static int coord(const int64_t *c, int n, int64_t v) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (c[mid] < v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static void name_buf(const CtBuf *b, char *s, size_t n) {
  if (b->id >= 0)
    snprintf(s, n, "%%%d [%lld,+%lld)", b->id, (long long)b->off, (long long)b->size);
  else
    snprintf(s, n, "the scratch of %%%d [%lld,+%lld)", -1 - b->id, (long long)b->off,
             (long long)b->size);
}

/* Fails naming x and a buffer it overlaps in time and space (found by a plain
 * search: only a failing test pays for it). */
static void overlap_fail(const Func *f, const CtBuf *b, int nb, const CtBuf *x) {
  char s[96], t[96] = "?";
  for (int j = 0; j < nb; j++)
    if (&b[j] != x && b[j].def <= x->last && x->def <= b[j].last &&
        b[j].off < x->off + x->size && x->off < b[j].off + b[j].size)
      name_buf(&b[j], t, sizeof t);
  name_buf(x, s, sizeof s);
  fail_msg("@%s: %s and %s overlap while both live", f->name, s, t);
}

/* Steps in order: the buffers defined at a step are added to the cover, each
 * first checked to find its addresses free, then those whose life ends there
 * are taken out. */
void ct_check_plan(Func *f) {
  int nb, nstep;
  CtBuf *b = ct_plan_bufs(f, &nb, &nstep);
  int64_t *c = calloc(2 * (size_t)nb + 1, sizeof *c);
  int nc = 0;
  for (int k = 0; k < nb; k++) {
    assert_true(b[k].off >= 0 && b[k].size > 0);
    assert_int_equal(b[k].off % 64, 0);
    assert_true(b[k].off + b[k].size <= f->work_bytes);
    c[nc++] = b[k].off;
    c[nc++] = b[k].off + b[k].size;
  }
  qsort(c, (size_t)nc, sizeof *c, cmp_i64);
  int u = 0;
  for (int k = 0; k < nc; k++)
    if (!u || c[k] != c[u - 1])
      c[u++] = c[k];
  /* buffers by the step they start and by the step they end */
  int *start = calloc((size_t)nstep + 2, sizeof(int)), *stop = calloc((size_t)nstep + 2, sizeof(int));
  int *by_def = calloc((size_t)nb + 1, sizeof(int)), *by_last = calloc((size_t)nb + 1, sizeof(int));
  for (int k = 0; k < nb; k++) {
    assert_true(0 <= b[k].def && b[k].def <= b[k].last && b[k].last < nstep);
    start[b[k].def + 1]++;
    stop[b[k].last + 1]++;
  }
  for (int s = 0; s < nstep; s++) {
    start[s + 1] += start[s];
    stop[s + 1] += stop[s];
  }
  int *fs = calloc((size_t)nstep + 1, sizeof(int)), *fl = calloc((size_t)nstep + 1, sizeof(int));
  for (int k = 0; k < nb; k++) {
    by_def[start[b[k].def] + fs[b[k].def]++] = k;
    by_last[stop[b[k].last] + fl[b[k].last]++] = k;
  }
  Cover cv = {u > 1 ? u - 1 : 1, NULL, NULL};
  cv.max = calloc(4 * (size_t)cv.n, sizeof(int));
  cv.add = calloc(4 * (size_t)cv.n, sizeof(int));
  for (int s = 0; s < nstep; s++) {
    for (int k = start[s]; k < start[s + 1]; k++) {
      const CtBuf *x = &b[by_def[k]];
      int lo = coord(c, u, x->off), hi = coord(c, u, x->off + x->size);
      if (cover_max(&cv, 1, 0, cv.n, lo, hi) > 0)
        overlap_fail(f, b, nb, x);
      cover_add(&cv, 1, 0, cv.n, lo, hi, 1);
    }
    for (int k = stop[s]; k < stop[s + 1]; k++) {
      const CtBuf *x = &b[by_last[k]];
      cover_add(&cv, 1, 0, cv.n, coord(c, u, x->off), coord(c, u, x->off + x->size), -1);
    }
  }
  free(cv.max);
  free(cv.add);
  free(fs);
  free(fl);
  free(start);
  free(stop);
  free(by_def);
  free(by_last);
  free(c);
  free(b);
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
  CgOptions o = {.emit = emit, .target = target, .cpu = cpu, .opt_level = opt,
                 .part_ops = t->part_ops, .verify = true};
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
    if (isfinite(got[i]) && isfinite(want[i]))
      scale = fmax(scale, fmax(fabs(got[i]), fabs(want[i])));
  for (int64_t i = 0; i < n; i++) {
    double err = got[i] == want[i] ? 0
                 : scale > 0       ? fabs(got[i] - (double)want[i]) / scale
                                   : INFINITY;
    if (!(err <= worst))
      worst = err, at = i;
  }
  if (!(worst <= rtol))
    fail_msg("%s: element %lld is %.9g, the interpreter says %.9g (error %.3g of the largest "
             "magnitude %.3g)", what, (long long)at, got[at], want[at], worst, scale);
}

/* ---- running a model: the harness against the interpreter ---- */

static uint64_t rng = 88172645463325252u;

static float uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 2 - 1);
}

static void w32(FILE *f, int32_t v) { assert_int_equal(fwrite(&v, 4, 1, f), 1); }
static void w64(FILE *f, int64_t v) { assert_int_equal(fwrite(&v, 8, 1, f), 1); }

static int64_t elems(const Type *t) { return type_elems(t); }

void ct_run(CT *t, int steps, void (*fill_input)(float *x, int64_t n),
            void (*check_output)(int k, const float *x, const float *got, int64_t n)) {
  Module *m = t->m;
  ct_passes(t);
  const char *obj = ct_emit(t, "obj", NULL, NULL, 2);
  if (!obj)
    fail_msg("cg_emit: %s", ct_log(t));
  const char *exe = arena_printf(t->a, "%s/run", t->dir);
  if (ct_sh("%s -O1 %s -DCREATE=%s_create -I%s %s %s -o %s %s", DTC_TEST_CC, DTC_TEST_CFLAGS,
         m->name, DTC_TEST_RUNTIME, DTC_TEST_HARNESS, obj, exe, DTC_TEST_LIBS))
    fail_msg("cannot link the harness");

  Func *fwd = ir_find_func(m, "forward"), *train = ir_find_func(m, "train_step");
  assert_true(!steps || train);
  const bool *live = cg_live(fwd);
  int ng = m->global.n;
  float **data = calloc((size_t)ng, sizeof *data);
  for (int k = 0; k < ng; k++) {
    const Global *g = &m->global.a[k];
    int64_t n = elems(&g->type);
    data[k] = calloc((size_t)n + 1, 4);
    for (int64_t i = 0; g->kind == G_INPUT && i < n; i++)
      if (g->type.dtype == DT_I32)
        ((int32_t *)data[k])[i] = (int32_t)(i * 7 % 3);
      else
        data[k][i] = uniform();
    if (g->kind == G_INPUT && g->type.dtype == DT_F32 && fill_input)
      fill_input(data[k], n);
  }
  int *in = calloc((size_t)ng + 1, sizeof *in);
  const Inst **outs = calloc((size_t)fwd->inst.n + 1, sizeof *outs);
  int nout = cg_func_outputs(fwd, live, outs);

  const char *inpath = arena_printf(t->a, "%s/in.bin", t->dir);
  const char *outpath = arena_printf(t->a, "%s/out.bin", t->dir);
  FILE *f = fopen(inpath, "wb");
  assert_non_null(f);
  w32(f, steps);
  int nin = cg_func_inputs(fwd, live, in);
  w32(f, nin);
  for (int k = 0; k < nin; k++) {
    int64_t n = elems(&m->global.a[in[k]].type);
    w64(f, n);
    assert_int_equal(fwrite(data[in[k]], 4, (size_t)n, f), (size_t)n);
  }
  w32(f, nout);
  for (int k = 0; k < nout; k++)
    w64(f, elems(&outs[k]->in[0]->type));
  nin = train ? cg_func_inputs(train, NULL, in) : 0;
  w32(f, nin);
  for (int k = 0; k < nin; k++) {
    int64_t n = elems(&m->global.a[in[k]].type);
    w64(f, n);
    assert_int_equal(fwrite(data[in[k]], 4, (size_t)n, f), (size_t)n);
  }
  int nstored = 0;
  for (int k = 0; k < ng; k++)
    nstored += m->global.a[k].kind != G_INPUT;
  w32(f, nstored);
  for (int k = 0; k < ng; k++) {
    const Global *g = &m->global.a[k];
    if (g->kind == G_INPUT)
      continue;
    w32(f, (int32_t)strlen(g->name));
    assert_int_equal(fwrite(g->name, 1, strlen(g->name), f), strlen(g->name));
    w64(f, elems(&g->type));
  }
  assert_int_equal(fclose(f), 0);
  if (ct_sh("%s %s %s", exe, inpath, outpath))
    fail_msg("the harness failed");

  size_t len;
  char *res = ct_read(outpath, &len), *p = res;
  assert_non_null(res);
  Interp *it = interp_new(m);
  for (int k = 0; k < ng; k++) {
    const Global *g = &m->global.a[k];
    if (g->kind != G_INPUT) {
      assert_true(interp_set_global(it, g->name, p));
      p += elems(&g->type) * 4;
    } else {
      assert_true(interp_set_global(it, g->name, data[k]));
    }
  }

  const Inst **all = calloc((size_t)fwd->inst.n + 1, sizeof *all);
  int nall = cg_func_outputs(fwd, NULL, all);
  void **want = calloc((size_t)nall + 1, sizeof *want);
  for (int k = 0; k < nall; k++)
    want[k] = calloc((size_t)elems(&all[k]->in[0]->type) + 1, 4);
  if (!interp_run(it, "forward", want))
    fail_msg("interpreter: %s", interp_error(it));
  for (int k = 0; k < nout; k++) {
    int j = 0;
    while (all[j] != outs[k])
      j++;
    int64_t n = elems(&outs[k]->in[0]->type);
    ct_close_to((float *)p, want[j], n, arena_printf(t->a, "%s forward output %s", m->name,
                                                     ir_get_str(outs[k], "name", "")));
    if (check_output)
      check_output(k, data[in[0]], (float *)p, n);
    p += n * 4;
  }
  char *prev = res;   /* the harness's state each step starts from */
  for (int s = 0; s < steps; s++) {
    for (int k = 0; k < ng; k++) {
      const Global *g = &m->global.a[k];
      if (g->kind != G_INPUT) {
        assert_true(interp_set_global(it, g->name, prev));
        prev += elems(&g->type) * 4;
      }
    }
    prev = p + 4;
    float loss, *lp = &loss;
    if (!interp_run(it, "train_step", (void *const *)&lp))
      fail_msg("interpreter: %s", interp_error(it));
    ct_close_to((float *)p, &loss, 1, arena_printf(t->a, "%s loss of step %d", m->name, s));
    p += 4;
    for (int k = 0; k < ng; k++) {
      const Global *g = &m->global.a[k];
      if (g->kind == G_INPUT)
        continue;
      ct_close_to((float *)p, interp_global(it, g->name), elems(&g->type),
                  arena_printf(t->a, "%s %s after step %d", m->name, g->name, s));
      p += elems(&g->type) * 4;
    }
  }
  assert_int_equal((size_t)(p - res), len);
  for (int k = 0; k < nall; k++)
    free(want[k]);
  free(want);
  free(all);
  interp_free(it);
  free(res);
  free(outs);
  free(in);
  for (int k = 0; k < ng; k++)
    free(data[k]);
  free(data);
}
