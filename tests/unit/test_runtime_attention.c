/* test_runtime_attention.c: the attention kernels (runtime/kernels_attn.c)
 * against a plain loop in double over the whole [Tq, Tk] scores, causal and
 * not, masked (f32, i32) and not, with dropout (its mask from dtrt_k_dropout
 * of ones) and without, on sizes that are not multiples of the blocks; a
 * block's dropout the block of the whole's; the same bits on one thread and
 * several; sdpa_with_lse's two outputs sdpa's and sdpa_lse's bits; their
 * refusals; ring attention's zig-zag pieces. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"
#include "dtrt_int.h" /* dtrt_attn_step, dtrt_trace_open */
#include "rt_test.h"
#include "rt_text.h"

static float *randv(int64_t n, double mag) {
  float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
  for (int64_t k = 0; k < n; k++)
    p[k] = (float)(frand() * mag);
  return p;
}

static DtTensor t4(float *data, int64_t b, int64_t h, int64_t t, int64_t d) {
  return (DtTensor){.data = data, .dtype = DTRT_F32, .rank = 4, .dim = {b, h, t, d}};
}

enum { NO_MASK, F32_MASK, I32_MASK };

typedef struct Case {
  int64_t b, h, tq, tk, d;
  bool causal;
  double scale;      /* 0: 1/sqrt(d) */
  int mask;          /* NO_MASK, or the mask's type */
  int64_t mdim[4];   /* the mask's dims, each 1 or [B, H, Tq, Tk]'s */
  double p;          /* dropout */
} Case;

/* One case's operands, the kernels' results and the reference's, with the
 * reference's bound on each element's rounding error. keep [B, H, Tq, Tk]:
 * dtrt_k_dropout of ones with the case's p, seed and step (1 without). */
typedef struct Run {
  Case c;
  double scale;
  float *q, *k, *v, *dout, *out, *lse, *grad, *keep, *ds;
  void *mask;
  double *rout, *rlse, *rgrad, *tout, *tlse, *tgrad, *rds, *tds;
} Run;

enum { SEED = 1234, STEP = 17 };

/* The mask's value at (batch-head bh, query i, key j), broadcast: f32's, or
 * 0 and -inf for i32's nonzero and zero. */
static double mask_at(const Run *r, int64_t bh, int64_t i, int64_t j) {
  const Case *c = &r->c;
  if (c->mask == NO_MASK)
    return 0;
  int64_t idx[4] = {bh / c->h, bh % c->h, i, j}, o = 0;
  for (int d = 0; d < 4; d++)
    o = o * c->mdim[d] + (c->mdim[d] == 1 ? 0 : idx[d]);
  if (c->mask == I32_MASK)
    return ((const int32_t *)r->mask)[o] ? 0 : -INFINITY;
  return ((const float *)r->mask)[o];
}

static const double U = 0x1p-24;

/* The reference: scores, softmax, output, lse and the three gradients, in
 * double over whole rows, with bounds derived from the sums' lengths: a
 * score's error is at most (D + 2) u scale sum |q k|, a probability's
 * relative error rho (twice the row's largest score error, plus the
 * exponential's and the logarithm's 1e-6), a sum of n terms n u of the sum of
 * their magnitudes; each bound taken four times. The mask is added to the
 * scores; a kept probability is times its keep factor (0 or 1 / (1 - p)),
 * and so is its adjoint; a row that sees no key is zeros, lse -inf. */
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
      const float *kp = r->keep + (bh * tq + i) * tk;
      double mx = -INFINITY, l = 0, es = 0;
      for (int64_t j = 0; j < seen; j++) {
        double s = 0, a = 0;
        for (int64_t e = 0; e < d; e++) {
          s += (double)q[i * d + e] * k[j * d + e];
          a += fabs((double)q[i * d + e] * k[j * d + e]);
        }
        p[j] = s * r->scale + mask_at(r, bh, i, j);
        es = fmax(es, (d + 2) * U * fabs(r->scale) * a);
        mx = fmax(mx, p[j]);
      }
      for (int64_t j = 0; j < seen; j++)
        l += p[j] = mx == -INFINITY ? 0 : exp(p[j] - mx);
      for (int64_t j = 0; j < seen; j++)
        p[j] = l > 0 ? p[j] / l : 0;
      rho[i] = 2 * es + 1e-6;
      rho_max = fmax(rho_max, rho[i]);
      double n = (double)(tk + d + 16);
      r->rlse[bh * tq + i] = l > 0 ? mx + log(l) : -INFINITY;
      r->tlse[bh * tq + i] = l > 0 ? 4 * (rho[i] + n * U + U * fabs(mx + log(l))) : 0;
      double di = 0, dia = 0;
      for (int64_t e = 0; e < d; e++) {
        double o = 0, oa = 0;
        for (int64_t j = 0; j < seen; j++) {
          o += p[j] * kp[j] * v[j * d + e];
          oa += p[j] * kp[j] * fabs(v[j * d + e]);
        }
        r->rout[(bh * tq + i) * d + e] = o;
        r->tout[(bh * tq + i) * d + e] = 4 * (rho[i] + n * U) * oa + 1e-30;
        di += (double)dy[i * d + e] * o;
        dia += fabs(dy[i * d + e] * o);
      }
      /* dp, ds = p (dp keep - D_i) and their magnitudes m */
      for (int64_t j = 0; j < seen; j++) {
        double s = 0, a = 0;
        for (int64_t e = 0; e < d; e++) {
          s += (double)dy[i * d + e] * v[j * d + e];
          a += fabs((double)dy[i * d + e] * v[j * d + e]);
        }
        m[j] = p[j] * ((fabs(s) + a) * kp[j] + fabs(di) + dia);
        dp[j] = p[j] * (s * kp[j] - di);
        r->rds[(bh * tq + i) * tk + j] = dp[j];
        r->tds[(bh * tq + i) * tk + j] = 4 * (rho[i] + (tk + d + 20) * U) * m[j] + 1e-30;
      }
      double nn = (double)(tk + 2 * d + 20);
      for (int64_t e = 0; e < d; e++) {
        double g = 0, ga = 0;
        for (int64_t j = 0; j < seen; j++) {
          g += dp[j] * k[j * d + e];
          ga += m[j] * fabs(k[j * d + e]);
          dk[j * d + e] += r->scale * dp[j] * q[i * d + e];
          tdk[j * d + e] += fabs(r->scale) * m[j] * fabs(q[i * d + e]);
          dv[j * d + e] += p[j] * kp[j] * dy[i * d + e];
          tdv[j * d + e] += p[j] * kp[j] * fabs(dy[i * d + e]);
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
    if (!(fabs(got[e] - want[e]) <= tol[e]) && !(isinf(want[e]) && got[e] == want[e]))
      fail_msg("%s[%lld]: got %.9g, want %.9g (tolerance %.3g)", what, (long long)e, got[e],
               want[e], tol[e]);
}

/* The kernels' attributes: causal, scale, and with dropout p, the seed and
 * the step. */
static DtAttrs attrs(const Case *c, double scale) {
  DtAttrs a = {.ni = 1, .nf = 1, .step = STEP};
  a.i[0] = c->causal;
  a.f[0] = scale;
  if (c->p > 0) {
    a.ni = a.nf = 2;
    a.i[1] = SEED;
    a.f[1] = c->p;
  }
  return a;
}

/* The mask operand of c over data m. */
static DtTensor mask_tensor(const Case *c, void *m) {
  DtTensor t = t4(m, c->mdim[0], c->mdim[1], c->mdim[2], c->mdim[3]);
  t.dtype = c->mask == I32_MASK ? DTRT_I32 : DTRT_F32;
  return t;
}

/* sdpa_grad into r->grad as [B, H, Tq + 2 Tk, D], dq, dk and dv along dim
 * 2: the kernel's own layout, or its stacked one ([B, 3, H, T, D], when Tq
 * = Tk) repacked so. */
static DtStatus grad_packed(DtrtCtx *x, const DtTensor *in, int nin, Run *r, const DtAttrs *a) {
  const Case *c = &r->c;
  DtTensor grad = t4(r->grad, c->b, c->h, c->tq + 2 * c->tk, c->d);
  if (c->tq != c->tk)
    return dtrt_k_sdpa_grad(x, in, nin, &grad, a);
  int64_t n = c->b * 3 * c->h * c->tq * c->d, row = c->tq * c->d;
  float *st = malloc(sizeof(float) * (size_t)n);
  DtTensor s = {.data = st, .dtype = DTRT_F32, .rank = 5,
                .dim = {c->b, 3, c->h, c->tq, c->d}};
  DtStatus rc = dtrt_k_sdpa_grad(x, in, nin, &s, a);
  for (int64_t b = 0; b < c->b; b++)
    for (int64_t h = 0; h < c->h; h++)
      for (int w = 0; w < 3; w++)
        memcpy(r->grad + ((b * c->h + h) * 3 + w) * row, st + ((b * 3 + w) * c->h + h) * row,
               sizeof(float) * (size_t)row);
  free(st);
  return rc;
}

/* Runs the three kernels of c on context x into r, with the attributes a. */
static void kernels_with(DtrtCtx *x, Run *r, const DtAttrs *a) {
  const Case *c = &r->c;
  int nm = c->mask != NO_MASK;
  DtTensor in[7] = {t4(r->q, c->b, c->h, c->tq, c->d), t4(r->k, c->b, c->h, c->tk, c->d),
                    t4(r->v, c->b, c->h, c->tk, c->d), t4(r->out, c->b, c->h, c->tq, c->d),
                    t4(r->lse, c->b, c->h, c->tq, 0), t4(r->dout, c->b, c->h, c->tq, c->d)};
  in[4].rank = 3;
  DtTensor out = in[3], lse = in[4];
  DtTensor mk = mask_tensor(c, r->mask), fwd[4] = {in[0], in[1], in[2], mk};
  DtTensor two[3] = {in[0], in[1], mk};
  in[6] = mk;
  DtTensor ds = t4(r->ds, c->b, c->h, c->tq, c->tk);
  if (dtrt_k_sdpa(x, fwd, 3 + nm, &out, a) || dtrt_k_sdpa_lse(x, two, 2 + nm, &lse, a) ||
      grad_packed(x, in, 6 + nm, r, a) ||
      (c->mask == F32_MASK && dtrt_k_sdpa_dmask(x, in, 7, &ds, a)))
    fail_msg("kernel failed: %s", dtrt_errmsg(x));
}

static void kernels(DtrtCtx *x, Run *r) {
  DtAttrs a = attrs(&r->c, r->scale);
  kernels_with(x, r, &a);
}

/* keep = dtrt_k_dropout of ones [B, H, Tq, Tk] under c's p, SEED and STEP,
 * the factor each attention probability is kept with (all 1 when p = 0). */
static float *keep_factors(const Case *c) {
  int64_t n = c->b * c->h * c->tq * c->tk;
  float *ones = malloc(sizeof(float) * (size_t)n), *keep = malloc(sizeof(float) * (size_t)n);
  for (int64_t e = 0; e < n; e++)
    ones[e] = 1;
  DtAttrs a = {.ni = 1, .nf = 1, .i = {SEED}, .f = {c->p}, .step = STEP};
  DtTensor x = t4(ones, c->b, c->h, c->tq, c->tk), y = t4(keep, c->b, c->h, c->tq, c->tk);
  if (dtrt_k_dropout(ctx, &x, 1, &y, &a))
    fail_msg("dropout failed: %s", dtrt_errmsg(ctx));
  free(ones);
  return keep;
}

/* The mask of c: f32 in [-2, 2) or, one in ten, -inf; i32 0 one in four. */
static void *mask_values(const Case *c) {
  int64_t n = c->mdim[0] * c->mdim[1] * c->mdim[2] * c->mdim[3];
  float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
  int32_t *w = (int32_t *)f;
  for (int64_t e = 0; e < n; e++) {
    double u = frand() * 0.5 + 0.5;   /* frand: [-1, 1) */
    if (c->mask == I32_MASK)
      w[e] = u >= 0.25;
    else
      f[e] = u < 0.1 ? -INFINITY : (float)(4 * u - 2);
  }
  return f;
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
  int64_t ns = bh * c.tq * c.tk;
  r.ds = malloc(sizeof(float) * (size_t)ns);
  r.rds = calloc((size_t)ns, sizeof(double)), r.tds = calloc((size_t)ns, sizeof(double));
  r.keep = keep_factors(&c);
  r.mask = c.mask != NO_MASK ? mask_values(&c) : NULL;
  return r;
}

static void free_run(Run *r) {
  void *p[] = {r->q, r->k, r->v, r->dout, r->out, r->lse, r->grad, r->keep, r->mask, r->ds,
               r->rout, r->rlse, r->rgrad, r->tout, r->tlse, r->tgrad, r->rds, r->tds};
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
  if (c.mask == F32_MASK)   /* the scores' adjoint: an f32 mask's gradient */
    check_near("dmask", r.ds, r.rds, r.tds, bh * c.tq * c.tk);
  free_run(&r);
}

/* Odd sizes, one block and several (64 queries and 64 keys a block), Tq
 * below, equal to and above Tk, causal and not, another scale; D below,
 * at and above the 64 columns of a register tile. */
static void test_against_loop(void **state) {
  (void)state;
  static const Case cases[] = {
    {1, 1, 1, 1, 1, false, 0, NO_MASK, {0}, 0},      {1, 1, 1, 1, 1, true, 0, NO_MASK, {0}, 0},
    {2, 3, 37, 13, 13, false, 0, NO_MASK, {0}, 0},   {2, 3, 37, 13, 13, true, 0, NO_MASK, {0}, 0},
    {1, 2, 13, 37, 5, true, 0, NO_MASK, {0}, 0},     {1, 2, 13, 37, 5, false, 0.7, NO_MASK, {0}, 0},
    {1, 2, 150, 97, 24, false, 0, NO_MASK, {0}, 0},  {1, 2, 150, 97, 24, true, 0, NO_MASK, {0}, 0},
    {1, 1, 130, 200, 64, true, 0, NO_MASK, {0}, 0},
    {2, 1, 129, 129, 33, true, -0.3, NO_MASK, {0}, 0},
    {1, 2, 70, 90, 100, true, 0, NO_MASK, {0}, 0},   {1, 1, 65, 66, 130, false, 0, NO_MASK, {0}, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    one_case(cases[k]);
}

/* Masks f32 and i32 of every rank's broadcast, rows that see no key (Tk 2
 * with an i32 mask, -inf rows of an f32 one), dropout with and without a
 * mask and causal, over one block and several. */
static void test_mask_dropout(void **state) {
  (void)state;
  static const Case cases[] = {
    {2, 3, 37, 13, 13, false, 0, F32_MASK, {1, 1, 37, 13}, 0},
    {2, 3, 37, 13, 13, false, 0.6, I32_MASK, {2, 1, 37, 13}, 0},
    {1, 3, 13, 37, 5, false, 0, I32_MASK, {1, 3, 1, 37}, 0},
    {2, 3, 5, 2, 4, false, 0, I32_MASK, {2, 3, 5, 2}, 0},
    {1, 2, 150, 97, 24, false, 0, F32_MASK, {1, 2, 150, 97}, 0},
    {1, 2, 130, 140, 20, false, 0, I32_MASK, {1, 1, 130, 140}, 0},
    {2, 3, 37, 13, 13, false, 0, NO_MASK, {0}, 0.3},
    {1, 2, 150, 97, 24, true, 0, NO_MASK, {0}, 0.5},
    {1, 1, 130, 130, 64, false, 0, F32_MASK, {1, 1, 1, 130}, 0.2},
    {2, 1, 129, 129, 33, true, -0.3, I32_MASK, {1, 1, 129, 129}, 0.9},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    one_case(cases[k]);
}

/* The [lo, hi) block of x [dim[0..4)], a new copy. */
static float *block4(const float *x, const int64_t dim[4], const int64_t lo[4],
                     const int64_t hi[4]) {
  int64_t n = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]) * (hi[3] - lo[3]), e = 0;
  float *y = malloc(sizeof(float) * (size_t)n);
  for (int64_t a = lo[0]; a < hi[0]; a++)
    for (int64_t b = lo[1]; b < hi[1]; b++)
      for (int64_t c = lo[2]; c < hi[2]; c++)
        for (int64_t d = lo[3]; d < hi[3]; d++)
          y[e++] = x[((a * dim[1] + b) * dim[2] + c) * dim[3] + d];
  return y;
}

/* Asserts that got (the block [lo, hi) of a result of dims dim) has the
 * bits of that block of whole. */
static void same_block(const char *what, const float *got, const float *whole,
                       const int64_t dim[4], const int64_t lo[4], const int64_t hi[4]) {
  float *want = block4(whole, dim, lo, hi);
  int64_t n = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]) * (hi[3] - lo[3]);
  for (int64_t e = 0; e < n; e++)
    if (memcmp(&got[e], &want[e], sizeof(float)))
      fail_msg("%s[%lld]: the block gives %.9g, the whole %.9g", what, (long long)e, got[e],
               want[e]);
  free(want);
}

/* A block of the attention of c, with dropout placed by `at`: heads
 * [h0, h1) and queries [i0, Tq) of every batch; its results are the bits of
 * the whole's: the same dropout mask whatever the layout. With queries cut,
 * dk and dv are partial sums, so only dq is compared. */
static void block_case(Case c, int64_t h0, int64_t h1, int64_t i0) {
  Run w = make_run(c);
  kernels(ctx, &w);
  Case bc = c;
  bc.h = h1 - h0, bc.tq = c.tq - i0;
  if (c.mask != NO_MASK)
    bc.mdim[1] = c.mdim[1] == 1 ? 1 : bc.h;
  Run r = make_run(bc);
  int64_t qd[4] = {c.b, c.h, c.tq, c.d}, kd[4] = {c.b, c.h, c.tk, c.d};
  int64_t qlo[4] = {0, h0, i0, 0}, qhi[4] = {c.b, h1, c.tq, c.d};
  int64_t klo[4] = {0, h0, 0, 0}, khi[4] = {c.b, h1, c.tk, c.d};
  float *fresh[] = {block4(w.q, qd, qlo, qhi), block4(w.k, kd, klo, khi),
                    block4(w.v, kd, klo, khi), block4(w.dout, qd, qlo, qhi)};
  float **to[] = {&r.q, &r.k, &r.v, &r.dout};
  for (int k = 0; k < 4; k++)
    free(*to[k]), *to[k] = fresh[k];
  if (c.mask != NO_MASK) {
    assert_int_equal(i0, 0);
    assert_true(c.mdim[1] == 1 && c.mask == F32_MASK);
    memcpy(r.mask, w.mask, sizeof(float) * (size_t)(c.mdim[0] * c.mdim[2] * c.mdim[3]));
  }
  DtAttrs a = attrs(&bc, w.scale);
  int64_t at[8] = {c.b, c.h, c.tq, c.tk, 0, h0, i0, 0};
  memcpy(&a.i[2], at, sizeof at);
  a.ni = 10;
  kernels_with(ctx, &r, &a);
  same_block("out", r.out, w.out, qd, qlo, qhi);
  int64_t ld[4] = {c.b, c.h, c.tq, 1}, llo[4] = {0, h0, i0, 0}, lhi[4] = {c.b, h1, c.tq, 1};
  same_block("lse", r.lse, w.lse, ld, llo, lhi);
  int64_t nq = c.tq + 2 * c.tk, gd[4] = {c.b, c.h, nq, c.d};
  int64_t glo[4] = {0, h0, i0, 0}, ghi[4] = {c.b, h1, i0 ? c.tq : nq, c.d};
  if (i0 == 0) {
    same_block("grad", r.grad, w.grad, gd, glo, ghi);
  } else {   /* dq: the first Tq - i0 rows of each block's grad */
    int64_t bd[4] = {bc.b, bc.h, bc.tq + 2 * bc.tk, bc.d}, blo[4] = {0, 0, 0, 0};
    int64_t bhi[4] = {bc.b, bc.h, bc.tq, bc.d};
    float *dq = block4(r.grad, bd, blo, bhi);
    same_block("dq", dq, w.grad, gd, glo, ghi);
    free(dq);
  }
  free_run(&w);
  free_run(&r);
}

/* Blocks of heads (a head split) with an f32 mask broadcast over them, and
 * of queries (a sequence split) not causal, each with dropout. */
static void test_dropout_blocks(void **state) {
  (void)state;
  block_case((Case){2, 3, 70, 90, 8, false, 0, F32_MASK, {2, 1, 70, 90}, 0.3}, 1, 3, 0);
  block_case((Case){2, 3, 70, 90, 8, true, 0, NO_MASK, {0}, 0.3}, 2, 3, 0);
  block_case((Case){1, 2, 150, 97, 16, false, 0, NO_MASK, {0}, 0.5}, 0, 2, 37);
}

/* Contexts of one thread and of three: the pool is made, and
 * DTRT_NUM_THREADS read, at a context's first use. */
static void one_and_three(DtrtCtx **one, DtrtCtx **three) {
  setenv("DTRT_NUM_THREADS", "1", 1);
  *one = dtrt_ctx_new();
  assert_int_equal(dtrt_threads(*one), 1);
  setenv("DTRT_NUM_THREADS", "3", 1);
  *three = dtrt_ctx_new();
  assert_int_equal(dtrt_threads(*three), 3);
  unsetenv("DTRT_NUM_THREADS");
}

/* c's kernels on one thread and on three: the same bits. */
static void same_on_threads(Case c, DtrtCtx *one, DtrtCtx *three) {
  Run a = make_run(c), b = make_run(c);
  int64_t bh = c.b * c.h, ng = bh * (c.tq + 2 * c.tk) * c.d;
  memcpy(b.q, a.q, sizeof(float) * (size_t)(bh * c.tq * c.d));
  memcpy(b.k, a.k, sizeof(float) * (size_t)(bh * c.tk * c.d));
  memcpy(b.v, a.v, sizeof(float) * (size_t)(bh * c.tk * c.d));
  memcpy(b.dout, a.dout, sizeof(float) * (size_t)(bh * c.tq * c.d));
  if (c.mask != NO_MASK)
    memcpy(b.mask, a.mask, sizeof(float) * (size_t)(c.mdim[0] * c.mdim[1] * c.mdim[2] * c.mdim[3]));
  kernels(one, &a);
  kernels(three, &b);
  assert_memory_equal(a.out, b.out, sizeof(float) * (size_t)(bh * c.tq * c.d));
  assert_memory_equal(a.lse, b.lse, sizeof(float) * (size_t)(bh * c.tq));
  assert_memory_equal(a.grad, b.grad, sizeof(float) * (size_t)ng);
  kernels(three, &b);
  assert_memory_equal(a.grad, b.grad, sizeof(float) * (size_t)ng);
  free_run(&a);
  free_run(&b);
}

/* One backward step of a ring (adding to dq, dk and dv, the queries at
 * positions 70.. against keys 0..89, causal, with dropout) the same bits on
 * one thread, one pass, as on three, two. */
static void test_step_threads(void **state) {
  (void)state;
  DtrtCtx *one, *three;
  one_and_three(&one, &three);
  enum { B = 1, H = 2, TQ = 100, TK = 90, D = 16 };
  int64_t nq = B * H * TQ * D, nk = B * H * TK * D;
  float *q = randv(nq, 2), *k = randv(nk, 2), *v = randv(nk, 1), *o = randv(nq, 1);
  float *dout = randv(nq, 1), *lse = randv(B * H * TQ, 1);
  float *g0 = randv(nq + 2 * nk, 1), *g[2];
  for (int r = 0; r < 2; r++) {
    g[r] = malloc(sizeof(float) * (size_t)(nq + 2 * nk));
    memcpy(g[r], g0, sizeof(float) * (size_t)(nq + 2 * nk));
    DtAttnStep st = {.q = q, .k = k, .v = v, .o = o, .lse = lse, .dout = dout, .b = B, .h = H,
                     .tq = TQ, .tk = TK, .d = D, .qoff = 70, .koff = 0, .causal = true,
                     .scale = 0.25f, .p = 0.2, .seed = SEED, .step = STEP,
                     .g = {g[r], g[r] + nq, g[r] + nq + nk},
                     .whole = {B, H, 170, 170}, .at = {0, 0, 70, 0}};
    assert_int_equal(dtrt_attn_step(r ? three : one, "ring_sdpa_grad", &st), DT_OK);
  }
  assert_int_equal(dtrt_sdpa_grad_passes(B * H, 1), 1);
  assert_int_equal(dtrt_sdpa_grad_passes(B * H, 3), 2);
  assert_memory_not_equal(g[0], g0, sizeof(float) * (size_t)(nq + 2 * nk));
  assert_memory_equal(g[0], g[1], sizeof(float) * (size_t)(nq + 2 * nk));
  float *all[] = {q, k, v, o, dout, lse, g0, g[0], g[1]};
  for (size_t n = 0; n < sizeof all / sizeof all[0]; n++)
    free(all[n]);
  dtrt_ctx_free(one);
  dtrt_ctx_free(three);
}

/* sdpa_with_lse of c on one thread and on three: out[0] the bits of sdpa's
 * on one thread, out[1] those of sdpa_lse's, compared with memcmp (one ulp
 * off fails). */
static void with_lse_case(Case c, DtrtCtx *one, DtrtCtx *three) {
  Run r = make_run(c);
  int64_t bh = c.b * c.h, no = bh * c.tq * c.d, nl = bh * c.tq;
  int nm = c.mask != NO_MASK;
  DtAttrs a = attrs(&c, r.scale);
  DtTensor in[4] = {t4(r.q, c.b, c.h, c.tq, c.d), t4(r.k, c.b, c.h, c.tk, c.d),
                    t4(r.v, c.b, c.h, c.tk, c.d), mask_tensor(&c, r.mask)};
  DtTensor two[3] = {in[0], in[1], in[3]}, out = t4(r.out, c.b, c.h, c.tq, c.d);
  DtTensor lse = {.data = r.lse, .dtype = DTRT_F32, .rank = 3, .dim = {c.b, c.h, c.tq}};
  if (dtrt_k_sdpa(one, in, 3 + nm, &out, &a) || dtrt_k_sdpa_lse(one, two, 2 + nm, &lse, &a))
    fail_msg("kernel failed: %s", dtrt_errmsg(one));
  float *o = malloc(sizeof(float) * (size_t)no), *l = malloc(sizeof(float) * (size_t)nl);
  DtrtCtx *on[2] = {one, three};
  for (int k = 0; k < 2; k++) {
    memset(o, 0xff, sizeof(float) * (size_t)no);
    memset(l, 0xff, sizeof(float) * (size_t)nl);
    DtTensor both[2] = {out, lse};
    both[0].data = o, both[1].data = l;
    if (dtrt_k_sdpa_with_lse(on[k], in, 3 + nm, both, &a))
      fail_msg("sdpa_with_lse failed: %s", dtrt_errmsg(on[k]));
    assert_memory_equal(o, r.out, sizeof(float) * (size_t)no);
    assert_memory_equal(l, r.lse, sizeof(float) * (size_t)nl);
  }
  free(o);
  free(l);
  free_run(&r);
}

/* sdpa_with_lse against sdpa and sdpa_lse, bit for bit, on one thread and
 * three: causal and not, f32 and i32 masks (rows that see no key: lse
 * -inf), dropout, Tq below and above Tk, odd sizes and D, one block and
 * several. */
static void test_with_lse(void **state) {
  (void)state;
  DtrtCtx *one, *three;
  one_and_three(&one, &three);
  const Case cases[] = {{2, 3, 37, 13, 13, false, 0, NO_MASK, {0}, 0},
                        {1, 1, 1, 1, 1, true, 0, NO_MASK, {0}, 0},
                        {1, 2, 150, 97, 17, true, 0, NO_MASK, {0}, 0.5},
                        {1, 2, 97, 150, 17, true, 0, F32_MASK, {1, 2, 97, 150}, 0.2},
                        {2, 1, 129, 129, 33, true, -0.3, I32_MASK, {1, 1, 129, 129}, 0.9},
                        {2, 3, 5, 2, 4, false, 0, I32_MASK, {2, 3, 5, 2}, 0},
                        {1, 2, 65, 131, 67, false, 0, F32_MASK, {1, 1, 1, 131}, 0.3}};
  for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++)
    with_lse_case(cases[n], one, three);
  dtrt_ctx_free(one);
  dtrt_ctx_free(three);
}

/* sdpa_with_lse refuses an out[1] not f32 [B, H, Tq], naming the op and
 * "lse", and leaves out[0] as it was; traced, its span is sdpa's. */
static void test_with_lse_refusals(void **state) {
  (void)state;
  float q[2 * 3 * 4] = {0}, k[2 * 5 * 4] = {0}, o[2 * 3 * 4], l[16];
  DtAttrs a = {.ni = 1, .nf = 1, .f = {0.5}};
  DtTensor in[3] = {t4(q, 1, 2, 3, 4), t4(k, 1, 2, 5, 4), t4(k, 1, 2, 5, 4)};
  DtTensor good = {.data = l, .dtype = DTRT_F32, .rank = 3, .dim = {1, 2, 3}};
  DtTensor bad[] = {good, good, good, good, good};
  bad[0].dim[2] = 4;                     /* Tq + 1 */
  bad[1].dim[1] = 1;                     /* a head short */
  bad[2].rank = 4, bad[2].dim[3] = 1;    /* rank 4 */
  bad[3].dtype = DTRT_I32;
  bad[4].data = NULL;
  for (size_t n = 0; n < sizeof bad / sizeof bad[0]; n++) {
    for (int e = 0; e < 24; e++)
      o[e] = 7;
    DtTensor both[2] = {t4(o, 1, 2, 3, 4), bad[n]};
    assert_int_equal(dtrt_k_sdpa_with_lse(ctx, in, 3, both, &a), DT_ERR_ARG);
    const char *msg = dtrt_errmsg(ctx);
    if (!strstr(msg, "sdpa_with_lse: lse "))
      fail_msg("case %zu: message '%s' names neither the op nor lse", n, msg);
    for (int e = 0; e < 24; e++)
      assert_true(o[e] == 7);
  }
  DtTensor both[2] = {t4(o, 1, 2, 4, 4), good};   /* out[0] wrong: sdpa's message */
  assert_int_equal(dtrt_k_sdpa_with_lse(ctx, in, 3, both, &a), DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), "sdpa_with_lse: output"))
    fail_msg("message '%s' lacks the output", dtrt_errmsg(ctx));
  both[0] = t4(o, 1, 2, 3, 4);
  char path[300];
  snprintf(path, sizeof path, "%s/with_lse.json", dir);
  setenv("DTRT_TRACE", path, 1);
  assert_int_equal(dtrt_trace_open(ctx), DT_OK);
  unsetenv("DTRT_TRACE");
  assert_int_equal(dtrt_k_sdpa_with_lse(ctx, in, 3, both, &a), DT_OK);
  dtrt_trace_close(ctx);
  char *text = rt_slurp(path);
  if (!strstr(text, "{\"name\":\"sdpa\",\"cat\":\"kernel\"") || strstr(text, "with_lse"))
    fail_msg("the trace lacks an sdpa span: %s", text);
  free(text);
  remove(path);
}

/* Every result the same bits on one thread as on three, and again on a
 * second run: of 6 (batch, head) pairs, the backward in one pass both
 * times; of 2 (with a mask and dropout, or Tq above or below Tk), in one
 * pass on one thread and in two on three. */
static void test_threads(void **state) {
  (void)state;
  DtrtCtx *one, *three;
  one_and_three(&one, &three);
  assert_int_equal(dtrt_sdpa_grad_passes(6, 1), 1);
  assert_int_equal(dtrt_sdpa_grad_passes(6, 3), 1);
  assert_int_equal(dtrt_sdpa_grad_passes(2, 1), 1);
  assert_int_equal(dtrt_sdpa_grad_passes(2, 3), 2);
  const Case cases[] = {{2, 3, 150, 140, 20, true, 0, NO_MASK, {0}, 0},
                        {1, 2, 150, 150, 20, true, 0, F32_MASK, {1, 2, 150, 150}, 0.2},
                        {2, 1, 150, 97, 16, true, 0, NO_MASK, {0}, 0},
                        {1, 2, 97, 150, 16, false, 0, NO_MASK, {0}, 0.3}};
  for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++)
    same_on_threads(cases[n], one, three);
  dtrt_ctx_free(one);
  dtrt_ctx_free(three);
}

/* On one thread the kernels hold what dtrt_sdpa_scratch_bytes says, which
 * dtc's memory report counts: up to the allocator's own header; the
 * forward with its lse (kind 1) as the forward (kind 0). */
static void test_scratch_bytes(void **state) {
  (void)state;
  static const Case cases[] = {{2, 3, 37, 130, 13, true, 0, NO_MASK, {0}, 0},
                               {1, 2, 150, 64, 24, false, 0, NO_MASK, {0}, 0}};
  for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++)
    for (int kind = 0; kind < 3; kind++) {
      Case c = cases[n];
      bool grad = kind == 2;
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
      assert_int_equal(grad        ? dtrt_k_sdpa_grad(one, in, 6, &grad_t, &a)
                       : kind == 1 ? dtrt_k_sdpa_with_lse(one, in, 3, &in[3], &a) /* in[4]: lse */
                                   : dtrt_k_sdpa(one, in, 3, &in[3], &a), DT_OK);
      long long held = cnt.bytes - before, want = dtrt_sdpa_scratch_bytes(&in[0], &in[1], grad);
      if (held < want || held > want + 256)
        fail_msg("kind %d: held %lld bytes, dtrt_sdpa_scratch_bytes %lld", kind, held, want);
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
  DtTensor in[4] = {q, k, k};
  assert_int_equal(dtrt_k_sdpa(ctx, in, 2, &out, &a), DT_ERR_ARG);
  /* masks: a dim neither 1 nor whole, a rank above 4 */
  struct {
    DtTensor mask;
    const char *want;
  } masks[] = {
    {t4(buf, 1, 2, 3, 4), "dim 3 of length 4 is neither 1 nor 5"},
    {{.data = buf, .dtype = DTRT_F32, .rank = 5, .dim = {1, 1, 2, 3, 5}}, "rank 0 to 4"},
  };
  for (size_t n = 0; n < sizeof masks / sizeof masks[0]; n++) {
    in[3] = masks[n].mask;
    assert_int_equal(dtrt_k_sdpa(ctx, in, 4, &out, &a), DT_ERR_ARG);
    if (!strstr(dtrt_errmsg(ctx), masks[n].want))
      fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), masks[n].want);
  }
  /* dropout: p = 1, a place of 3 ints, a block past the whole's end */
  DtAttrs drop = {.ni = 2, .nf = 2, .f = {0.5, 1}};
  assert_int_equal(dtrt_k_sdpa(ctx, in, 3, &out, &drop), DT_ERR_ARG);
  drop.f[1] = 0.5, drop.ni = 5;
  assert_int_equal(dtrt_k_sdpa(ctx, in, 3, &out, &drop), DT_ERR_ARG);
  int64_t at[8] = {1, 2, 3, 5, 0, 1, 0, 0};
  memcpy(&drop.i[2], at, sizeof at);
  drop.ni = 10;
  assert_int_equal(dtrt_k_sdpa(ctx, in, 3, &out, &drop), DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), "does not fit dimension 1"))
    fail_msg("message '%s' lacks the dimension", dtrt_errmsg(ctx));
  /* sdpa_dmask: the mask required, and f32 */
  DtTensor lse = {.data = buf, .dtype = DTRT_F32, .rank = 3, .dim = {1, 2, 3}};
  float dsbuf[30];
  DtTensor six[7] = {q, k, k, q, lse, q, t4(buf, 1, 1, 3, 5)}, ds = t4(dsbuf, 1, 2, 3, 5);
  assert_int_equal(dtrt_k_sdpa_dmask(ctx, six, 6, &ds, &a), DT_ERR_ARG);
  six[6].dtype = DTRT_I32;
  assert_int_equal(dtrt_k_sdpa_dmask(ctx, six, 7, &ds, &a), DT_ERR_ARG);
  if (!strstr(dtrt_errmsg(ctx), "must be f32"))
    fail_msg("message '%s' lacks the mask's type", dtrt_errmsg(ctx));
  six[6].dtype = DTRT_F32;
  assert_int_equal(dtrt_k_sdpa_dmask(ctx, six, 7, &ds, &a), DT_OK);
  a.f[0] = INFINITY;
  assert_int_equal(dtrt_k_sdpa(ctx, in, 3, &out, &a), DT_ERR_ARG);
}

/* Ring attention's zig-zag (dtrt_ring_piece): blocks of 5, 3 and 4
 * (positions 0, 5 and 8 on): causal, member 0 works on [0, 3) (the early
 * half of 5 takes the odd row) and [10, 12) (the late half of member 2's
 * block); member 1, the middle, on its own [5, 7) and [7, 8); member 2 on
 * [8, 10) and [3, 5). Not causal, each keeps its block. On other lengths and
 * groups of 1 to 5, the pieces of the members cover the sequence once, and
 * piece 0 is the early half of the member's block, piece 1 the late half of
 * its partner's. */
static void test_ring_pieces(void **state) {
  (void)state;
  static const int64_t len[] = {5, 3, 4};
  static const int64_t zig[3][4] = {{0, 3, 10, 2}, {5, 2, 7, 1}, {8, 2, 3, 2}};
  static const int64_t whole[3][4] = {{0, 5, 5, 0}, {5, 3, 8, 0}, {8, 4, 12, 0}};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 2; k++) {
      int64_t off, n;
      dtrt_ring_piece(len, 3, r, true, k, &off, &n);
      assert_int_equal(off, zig[r][2 * k]);
      assert_int_equal(n, zig[r][2 * k + 1]);
      dtrt_ring_piece(len, 3, r, false, k, &off, &n);
      assert_int_equal(off, whole[r][2 * k]);
      assert_int_equal(n, whole[r][2 * k + 1]);
    }
  for (int p = 1; p <= 5; p++)
    for (int trial = 0; trial < 20; trial++) {
      int64_t lens[5], at[6] = {0}, t;
      for (int m = 0; m < p; m++)
        lens[m] = 1 + (int64_t)((frand() + 1) * 4), at[m + 1] = at[m] + lens[m];
      t = at[p];
      int seen[64] = {0};
      for (int r = 0; r < p; r++) {
        int64_t off[2], n[2];
        for (int k = 0; k < 2; k++) {
          dtrt_ring_piece(lens, p, r, true, k, &off[k], &n[k]);
          for (int64_t q = off[k]; q < off[k] + n[k]; q++)
            seen[q]++;
        }
        int o = p - 1 - r;
        assert_int_equal(off[0], at[r]);
        assert_int_equal(n[0], (lens[r] + 1) / 2);
        assert_int_equal(off[1], at[o] + (lens[o] + 1) / 2);
        assert_int_equal(off[1] + n[1], at[o + 1]);
      }
      for (int64_t q = 0; q < t; q++)
        assert_int_equal(seen[q], 1);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_ring_pieces),
    cmocka_unit_test_setup_teardown(test_against_loop, setup, teardown),
    cmocka_unit_test_setup_teardown(test_mask_dropout, setup, teardown),
    cmocka_unit_test_setup_teardown(test_dropout_blocks, setup, teardown),
    cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
    cmocka_unit_test_setup_teardown(test_step_threads, setup, teardown),
    cmocka_unit_test_setup_teardown(test_with_lse, setup, teardown),
    cmocka_unit_test_setup_teardown(test_with_lse_refusals, setup, teardown),
    cmocka_unit_test_setup_teardown(test_scratch_bytes, setup, teardown),
    cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
  };
  if (rt_make_dir("attention"))
    return 1;
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  rt_remove_dir(0);
  return failed;
}
