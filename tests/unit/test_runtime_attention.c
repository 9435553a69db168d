/* test_runtime_attention.c: the attention kernels (runtime/kernels_attn.c)
 * against a plain loop in double over the whole [Tq, Tk] scores, causal and
 * not, on sizes that are not multiples of the blocks; the same bits on one
 * thread and several; their refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

static float *randv(int64_t n, double mag) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t k = 0; k < n; k++)
    p[k] = (float)(frand() * mag);
  return p;
}

static DtTensor t4(float *data, int64_t b, int64_t h, int64_t t, int64_t d) {
  return (DtTensor){.data = data, .dtype = DTRT_F32, .rank = 4, .dim = {b, h, t, d}};
}

typedef struct Case {
  int64_t b, h, tq, tk, d;
  bool causal;
  double scale;      /* 0: 1/sqrt(d) */
} Case;

/* One case's operands, the kernels' results and the reference's, with the
 * reference's bound on each element's rounding error. */
typedef struct Run {
  Case c;
  double scale;
  float *q, *k, *v, *dout, *out, *lse, *grad;
  double *rout, *rlse, *rgrad, *tout, *tlse, *tgrad;
} Run;

static const double U = 0x1p-24;

/* The reference: scores, softmax, output, lse and the three gradients, in
 * double over whole rows, with bounds derived from the sums' lengths: a
 * score's error is at most (D + 2) u scale sum |q k|, a probability's
 * relative error rho (twice the row's largest score error, plus the
 * exponential's and the logarithm's 1e-6), a sum of n terms n u of the sum of
 * their magnitudes; each bound taken four times. */
static void reference(Run *r) {
  const Case *c = &r->c;
  int64_t d = c->d, tq = c->tq, tk = c->tk, nq = tq + 2 * tk;
  double *p = malloc(sizeof(double) * (size_t)tk), *dp = malloc(sizeof(double) * (size_t)tk);
  double *m = malloc(sizeof(double) * (size_t)tk);
  double *rho = malloc(sizeof(double) * (size_t)tq);
  for (int64_t bh = 0; bh < c->b * c->h; bh++) {
    const float *q = r->q + bh * tq * d, *k = r->k + bh * tk * d, *v = r->v + bh * tk * d;
    const float *dy = r->dout + bh * tq * d;
    double *dq = r->rgrad + bh * nq * d, *dk = dq + tq * d, *dv = dk + tk * d;
    double *tdq = r->tgrad + bh * nq * d, *tdk = tdq + tq * d, *tdv = tdk + tk * d;
    double rho_max = 0;
    for (int64_t i = 0; i < tq; i++) {
      int64_t seen = c->causal && i + 1 < tk ? i + 1 : tk;
      double mx = -INFINITY, l = 0, es = 0;
      for (int64_t j = 0; j < seen; j++) {
        double s = 0, a = 0;
        for (int64_t e = 0; e < d; e++) {
          s += (double)q[i * d + e] * k[j * d + e];
          a += fabs((double)q[i * d + e] * k[j * d + e]);
        }
        p[j] = s * r->scale;
        es = fmax(es, (d + 2) * U * fabs(r->scale) * a);
        mx = fmax(mx, p[j]);
      }
      for (int64_t j = 0; j < seen; j++)
        l += p[j] = exp(p[j] - mx);
      for (int64_t j = 0; j < seen; j++)
        p[j] /= l;
      rho[i] = 2 * es + 1e-6;
      rho_max = fmax(rho_max, rho[i]);
      double n = (double)(tk + d + 16);
      r->rlse[bh * tq + i] = mx + log(l);
      r->tlse[bh * tq + i] = 4 * (rho[i] + n * U + U * fabs(mx + log(l)));
      double di = 0, dia = 0;
      for (int64_t e = 0; e < d; e++) {
        double o = 0, oa = 0;
        for (int64_t j = 0; j < seen; j++) {
          o += p[j] * v[j * d + e];
          oa += p[j] * fabs(v[j * d + e]);
        }
        r->rout[(bh * tq + i) * d + e] = o;
        r->tout[(bh * tq + i) * d + e] = 4 * (rho[i] + n * U) * oa + 1e-30;
        di += (double)dy[i * d + e] * o;
        dia += fabs(dy[i * d + e] * o);
      }
      /* dp, ds = p (dp - D_i) and their magnitudes m */
      for (int64_t j = 0; j < seen; j++) {
        double s = 0, a = 0;
        for (int64_t e = 0; e < d; e++) {
          s += (double)dy[i * d + e] * v[j * d + e];
          a += fabs((double)dy[i * d + e] * v[j * d + e]);
        }
        m[j] = p[j] * (fabs(s) + fabs(di) + a + dia);
        dp[j] = p[j] * (s - di);
      }
      double nn = (double)(tk + 2 * d + 20);
      for (int64_t e = 0; e < d; e++) {
        double g = 0, ga = 0;
        for (int64_t j = 0; j < seen; j++) {
          g += dp[j] * k[j * d + e];
          ga += m[j] * fabs(k[j * d + e]);
          dk[j * d + e] += r->scale * dp[j] * q[i * d + e];
          tdk[j * d + e] += fabs(r->scale) * m[j] * fabs(q[i * d + e]);
          dv[j * d + e] += p[j] * dy[i * d + e];
          tdv[j * d + e] += p[j] * fabs(dy[i * d + e]);
        }
        dq[i * d + e] = r->scale * g;
        tdq[i * d + e] = 4 * (rho[i] + nn * U) * fabs(r->scale) * ga + 1e-30;
      }
    }
    double nk = (double)(tq + 2 * d + 20);
    for (int64_t e = 0; e < 2 * tk * d; e++)
      tdk[e] = 4 * (rho_max + nk * U) * tdk[e] + 1e-30;
  }
  free(p);
  free(dp);
  free(m);
  free(rho);
}

static void check_near(const char *what, const float *got, const double *want, const double *tol,
                       int64_t n) {
  for (int64_t e = 0; e < n; e++)
    if (!(fabs(got[e] - want[e]) <= tol[e]))
      fail_msg("%s[%lld]: got %.9g, want %.9g (tolerance %.3g)", what, (long long)e, got[e],
               want[e], tol[e]);
}

static DtAttrs attrs(const Case *c, double scale) {
  DtAttrs a = {.ni = 1, .nf = 1};
  a.i[0] = c->causal;
  a.f[0] = scale;
  return a;
}

/* Runs the three kernels of c on context x into r. */
static void kernels(DtrtCtx *x, Run *r) {
  const Case *c = &r->c;
  DtAttrs a = attrs(c, r->scale);
  DtTensor in[6] = {t4(r->q, c->b, c->h, c->tq, c->d), t4(r->k, c->b, c->h, c->tk, c->d),
                    t4(r->v, c->b, c->h, c->tk, c->d), t4(r->out, c->b, c->h, c->tq, c->d),
                    t4(r->lse, c->b, c->h, c->tq, 0), t4(r->dout, c->b, c->h, c->tq, c->d)};
  in[4].rank = 3;
  DtTensor out = in[3], lse = in[4], grad = t4(r->grad, c->b, c->h, c->tq + 2 * c->tk, c->d);
  if (dtrt_k_sdpa(x, in, 3, &out, &a) || dtrt_k_sdpa_lse(x, in, 2, &lse, &a) ||
      dtrt_k_sdpa_grad(x, in, 6, &grad, &a))
    fail_msg("kernel failed: %s", dtrt_errmsg(x));
}

static Run make_run(Case c) {
  Run r = {.c = c, .scale = c.scale ? c.scale : 1 / sqrt((double)c.d)};
  int64_t bh = c.b * c.h, nq = bh * c.tq * c.d, nk = bh * c.tk * c.d;
  int64_t ng = bh * (c.tq + 2 * c.tk) * c.d;
  r.q = randv(nq, 2), r.k = randv(nk, 2), r.v = randv(nk, 1), r.dout = randv(nq, 1);
  r.out = malloc(sizeof(float) * (size_t)nq);
  r.lse = malloc(sizeof(float) * (size_t)(bh * c.tq));
  r.grad = malloc(sizeof(float) * (size_t)ng);
  r.rout = calloc((size_t)nq, sizeof(double)), r.tout = calloc((size_t)nq, sizeof(double));
  r.rlse = calloc((size_t)(bh * c.tq), sizeof(double));
  r.tlse = calloc((size_t)(bh * c.tq), sizeof(double));
  r.rgrad = calloc((size_t)ng, sizeof(double)), r.tgrad = calloc((size_t)ng, sizeof(double));
  return r;
}

static void free_run(Run *r) {
  void *p[] = {r->q, r->k, r->v, r->dout, r->out, r->lse, r->grad,
               r->rout, r->rlse, r->rgrad, r->tout, r->tlse, r->tgrad};
  for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
    free(p[k]);
}

static void one_case(Case c) {
  Run r = make_run(c);
  int64_t bh = c.b * c.h;
  kernels(ctx, &r);
  reference(&r);
  check_near("out", r.out, r.rout, r.tout, bh * c.tq * c.d);
  check_near("lse", r.lse, r.rlse, r.tlse, bh * c.tq);
  check_near("grad", r.grad, r.rgrad, r.tgrad, bh * (c.tq + 2 * c.tk) * c.d);
  free_run(&r);
}

/* Odd sizes, one block and several (64 queries and 64 keys a block), Tq
 * below, equal to and above Tk, causal and not, another scale; D below,
 * at and above the 64 columns of a register tile. */
static void test_against_loop(void **state) {
  (void)state;
  static const Case cases[] = {
    {1, 1, 1, 1, 1, false, 0},      {1, 1, 1, 1, 1, true, 0},
    {2, 3, 37, 13, 13, false, 0},   {2, 3, 37, 13, 13, true, 0},
    {1, 2, 13, 37, 5, true, 0},     {1, 2, 13, 37, 5, false, 0.7},
    {1, 2, 150, 97, 24, false, 0},  {1, 2, 150, 97, 24, true, 0},
    {1, 1, 130, 200, 64, true, 0},  {2, 1, 129, 129, 33, true, -0.3},
    {1, 2, 70, 90, 100, true, 0},   {1, 1, 65, 66, 130, false, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    one_case(cases[k]);
}

/* Every result the same bits on one thread as on the context's threads, and
 * again on a second run. */
static void test_threads(void **state) {
  (void)state;
  /* the pool is made, and DTRT_NUM_THREADS read, at a context's first use */
  setenv("DTRT_NUM_THREADS", "1", 1);
  DtrtCtx *one = dtrt_ctx_new();
  assert_int_equal(dtrt_threads(one), 1);
  setenv("DTRT_NUM_THREADS", "3", 1);
  DtrtCtx *three = dtrt_ctx_new();
  assert_int_equal(dtrt_threads(three), 3);
  unsetenv("DTRT_NUM_THREADS");
  Case c = {2, 3, 150, 140, 20, true, 0};
  Run a = make_run(c), b = make_run(c);
  int64_t bh = c.b * c.h, ng = bh * (c.tq + 2 * c.tk) * c.d;
  memcpy(b.q, a.q, sizeof(float) * (size_t)(bh * c.tq * c.d));
  memcpy(b.k, a.k, sizeof(float) * (size_t)(bh * c.tk * c.d));
  memcpy(b.v, a.v, sizeof(float) * (size_t)(bh * c.tk * c.d));
  memcpy(b.dout, a.dout, sizeof(float) * (size_t)(bh * c.tq * c.d));
  kernels(one, &a);
  kernels(three, &b);
  assert_memory_equal(a.out, b.out, sizeof(float) * (size_t)(bh * c.tq * c.d));
  assert_memory_equal(a.lse, b.lse, sizeof(float) * (size_t)(bh * c.tq));
  assert_memory_equal(a.grad, b.grad, sizeof(float) * (size_t)ng);
  kernels(three, &b);
  assert_memory_equal(a.grad, b.grad, sizeof(float) * (size_t)ng);
  free_run(&a);
  free_run(&b);
  dtrt_ctx_free(one);
  dtrt_ctx_free(three);
}

/* On one thread the kernels hold what dtrt_sdpa_scratch_bytes says, which
 * dtc's memory report counts: up to the allocator's own header. */
static void test_scratch_bytes(void **state) {
  (void)state;
  static const Case cases[] = {{2, 3, 37, 130, 13, true, 0}, {1, 2, 150, 64, 24, false, 0}};
  for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++)
    for (int grad = 0; grad < 2; grad++) {
      Case c = cases[n];
      setenv("DTRT_NUM_THREADS", "1", 1);
      Count cnt = {.limit = -1};
      DtAllocator al = {count_alloc, count_free, &cnt};
      DtrtCtx *one = dtrt_ctx_new_with(&al);
      assert_non_null(one);
      assert_int_equal(dtrt_threads(one), 1);   /* the pool, made at first use */
      unsetenv("DTRT_NUM_THREADS");
      Run r = make_run(c);
      DtAttrs a = attrs(&c, r.scale);
      DtTensor in[6] = {t4(r.q, c.b, c.h, c.tq, c.d), t4(r.k, c.b, c.h, c.tk, c.d),
                        t4(r.v, c.b, c.h, c.tk, c.d), t4(r.out, c.b, c.h, c.tq, c.d),
                        t4(r.lse, c.b, c.h, c.tq, 0), t4(r.dout, c.b, c.h, c.tq, c.d)};
      in[4].rank = 3;
      DtTensor grad_t = t4(r.grad, c.b, c.h, c.tq + 2 * c.tk, c.d);
      long long before = cnt.bytes;
      assert_int_equal(grad ? dtrt_k_sdpa_grad(one, in, 6, &grad_t, &a)
                            : dtrt_k_sdpa(one, in, 3, &in[3], &a), DT_OK);
      long long held = cnt.bytes - before, want = dtrt_sdpa_scratch_bytes(&in[0], &in[1], grad);
      if (held < want || held > want + 256)
        fail_msg("%s: held %lld bytes, dtrt_sdpa_scratch_bytes %lld", grad ? "grad" : "forward",
                 held, want);
      free_run(&r);
      dtrt_ctx_free(one);
    }
}

/* Shapes the kernels refuse, each with a message naming what is wrong. */
static void test_refusals(void **state) {
  (void)state;
  float buf[4096] = {0};
  DtAttrs a = {.ni = 1, .nf = 1, .f = {0.5}};
  DtTensor q = t4(buf, 1, 2, 3, 4), k = t4(buf, 1, 2, 5, 4), out = q;
  struct {
    DtTensor in[3];
    DtTensor out;
    const char *want;
  } bad[] = {
    {{{.data = buf, .dtype = DTRT_F32, .rank = 3, .dim = {2, 3, 4}}, k, k}, out, "rank 3"},
    {{q, t4(buf, 1, 2, 5, 3), t4(buf, 1, 2, 5, 3)}, out, "key"},
    {{q, k, t4(buf, 1, 2, 6, 4)}, out, "value"},
    {{q, t4(buf, 2, 2, 5, 4), k}, out, "key"},
    {{q, k, k}, t4(buf, 1, 2, 5, 4), "output"},
  };
  for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
    assert_int_equal(dtrt_k_sdpa(ctx, bad[n].in, 3, &bad[n].out, &a), DT_ERR_ARG);
    if (!strstr(dtrt_errmsg(ctx), bad[n].want))
      fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), bad[n].want);
  }
  DtTensor in[3] = {q, k, k};
  assert_int_equal(dtrt_k_sdpa(ctx, in, 2, &out, &a), DT_ERR_ARG);
  a.f[0] = INFINITY;
  assert_int_equal(dtrt_k_sdpa(ctx, in, 3, &out, &a), DT_ERR_ARG);
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown(test_against_loop, setup, teardown),
    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
    cmocka_unit_test_setup_teardown(test_scratch_bytes, setup, teardown),
    cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
