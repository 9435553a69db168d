/* test_runtime_bag.c: libdtrt's embedding_bag kernels against a plain loop
 * written here (every mode, both input forms, per-sample weights,
 * padding_idx), their gradients against finite differences, the same bits
 * on any thread count, and the errors bad ids and offsets give; the sparse
 * gradient (touched rows and their values) against a plain loop's rows and
 * the dense gradient's; a table cut in blocks of rows (attribute at, a
 * row-wise split) against the whole table. */
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

typedef DtStatus (*Kern)(DtrtCtx *, const DtTensor *, int, DtTensor *, const DtAttrs *);

/* One problem: B bags over a table [R, D]; fixed K ids per bag, or N ids cut
 * by offsets. */
typedef struct Case {
  int mode, b, k, n, r, d;
  bool flat, psw;
  int pad; /* -1: none */
  int32_t *id, *off;
  float *w, *sw, *dy;
} Case;

static DtTensor t1(int dtype, void *p, int64_t a) {
  return (DtTensor){.data = p, .dtype = dtype, .rank = 1, .dim = {a}};
}
static DtTensor t2(int dtype, void *p, int64_t a, int64_t b) {
  return (DtTensor){.data = p, .dtype = dtype, .rank = 2, .dim = {a, b}};
}

/* The operands in the kernels' order; dy last when grad. */
static int operands(const Case *c, DtTensor *in, bool grad) {
  int n = 0;
  in[n++] = c->flat ? t1(DTRT_I32, c->id, c->n) : t2(DTRT_I32, c->id, c->b, c->k);
  in[n++] = t2(DTRT_F32, c->w, c->r, c->d);
  if (c->flat)
    in[n++] = t1(DTRT_I32, c->off, c->b);
  if (c->psw)
    in[n++] = c->flat ? t1(DTRT_F32, c->sw, c->n) : t2(DTRT_F32, c->sw, c->b, c->k);
  if (grad)
    in[n++] = t2(DTRT_F32, c->dy, c->b, c->d);
  return n;
}

static DtAttrs attrs(const Case *c, const char *table) {
  DtAttrs a = {.ni = c->pad >= 0 ? 2 : 1, .i = {c->mode, c->pad}, .s = table};
  return a;
}

static void lohi(const Case *c, int b, int *lo, int *hi) {
  *lo = c->flat ? c->off[b] : b * c->k;
  *hi = c->flat ? (b + 1 < c->b ? c->off[b + 1] : c->n) : *lo + c->k;
}

/* The reference: y [B, D] in double, and the error bound of each element
 * (a sum of m terms in float: (m + 2) 2^-24 sum |terms|, twice for a mean). */
static void ref_forward(const Case *c, double *y, double *bound) {
  for (int b = 0; b < c->b; b++) {
    int lo, hi, cnt = 0;
    lohi(c, b, &lo, &hi);
    for (int j = lo; j < hi; j++)
      cnt += c->id[j] != c->pad;
    for (int e = 0; e < c->d; e++) {
      double s = 0, mag = 0;
      bool any = false;
      for (int j = lo; j < hi; j++) {
        if (c->id[j] == c->pad)
          continue;
        double v = c->w[c->id[j] * c->d + e] * (c->psw ? (double)c->sw[j] : 1.0);
        if (c->mode == DT_BAG_MAX)
          s = !any || v > s ? v : s;
        else
          s += v;
        mag += fabs(v);
        any = true;
      }
      if (c->mode == DT_BAG_MEAN && cnt)
        s /= cnt, mag /= cnt;
      y[b * c->d + e] = s;
      bound[b * c->d + e] = c->mode == DT_BAG_MAX ? 0 : 2 * (cnt + 2) * ldexp(mag, -24);
    }
  }
}

/* The reference gradients: dw [R, D] and dsw (input's shape) for dy. */
static void ref_backward(const Case *c, double *dw, double *dsw) {
  memset(dw, 0, sizeof(double) * (size_t)(c->r * c->d));
  int n = c->flat ? c->n : c->b * c->k;
  memset(dsw, 0, sizeof(double) * (size_t)n);
  for (int b = 0; b < c->b; b++) {
    int lo, hi, cnt = 0;
    lohi(c, b, &lo, &hi);
    for (int j = lo; j < hi; j++)
      cnt += c->id[j] != c->pad;
    for (int e = 0; e < c->d; e++) {
      double g = c->dy[b * c->d + e];
      int best = -1;
      for (int j = lo; j < hi; j++) {
        if (c->id[j] == c->pad)
          continue;
        float v = c->w[c->id[j] * c->d + e];
        if (c->mode == DT_BAG_MAX) {
          if (best < 0 || v > c->w[c->id[best] * c->d + e])
            best = j;
          continue;
        }
        double s = c->psw ? c->sw[j] : c->mode == DT_BAG_MEAN ? 1.0 / cnt : 1.0;
        dw[c->id[j] * c->d + e] += s * g;
        dsw[j] += g * v;
      }
      if (best >= 0)
        dw[c->id[best] * c->d + e] += g;
    }
  }
}

/* ids from [0, r) with some padding_idx among them; offsets with an empty
 * bag, a one-entry bag and the rest at random. */
static Case make(int mode, bool flat, bool psw, int pad) {
  Case c = {
      .mode = mode, .b = 6, .k = 4, .n = 23, .r = 9, .d = 11, .flat = flat, .psw = psw, .pad = pad};
  int n = flat ? c.n : c.b * c.k;
  c.id = malloc(sizeof(int32_t) * (size_t)n);
  c.off = malloc(sizeof(int32_t) * (size_t)c.b);
  c.sw = malloc(sizeof(float) * (size_t)n);
  c.w = malloc(sizeof(float) * (size_t)(c.r * c.d));
  c.dy = malloc(sizeof(float) * (size_t)(c.b * c.d));
  for (int j = 0; j < n; j++) {
    c.id[j] = (int32_t)(rt_next() % (uint64_t)c.r);
    c.sw[j] = frand();
  }
  if (pad >= 0)
    c.id[1] = c.id[5] = pad;
  if (pad >= 0 && !flat)
    c.id[8] = c.id[9] = c.id[10] = c.id[11] = pad; /* bag 2: padding only */
  int off[6] = {0, 3, 3, 4, 10, 16};               /* bag 1 empty, bag 2 one entry */
  memcpy(c.off, off, sizeof off);
  for (int k = 0; k < c.r * c.d; k++) /* max: rows 0.08 apart in every column */
    c.w[k] = mode == DT_BAG_MAX
                 ? (float)((k / c.d * 7 + k % c.d * 5) % c.r) * 0.1f - 0.4f + 0.01f * frand()
                 : frand();
  for (int k = 0; k < c.b * c.d; k++)
    c.dy[k] = frand();
  return c;
}

static void drop(Case *c) {
  free(c->id);
  free(c->off);
  free(c->sw);
  free(c->w);
  free(c->dy);
}

static void run(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a) {
  if (k(ctx, in, nin, out, a))
    fail_msg("kernel failed: %s", dtrt_errmsg(ctx));
}

static void refuse(Kern k, const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a,
                   const char *want) {
  if (k(ctx, in, nin, out, a) != DT_ERR_ARG)
    fail_msg("no DT_ERR_ARG where '%s' was expected", want);
  if (!strstr(dtrt_errmsg(ctx), want))
    fail_msg("message '%s' lacks '%s'", dtrt_errmsg(ctx), want);
}

static void forward(const Case *c, float *y) {
  DtTensor in[5], out = t2(DTRT_F32, y, c->b, c->d);
  DtAttrs a = attrs(c, "t");
  run(dtrt_k_embedding_bag, in, operands(c, in, false), &out, &a);
}

/* L = sum(dy * y); its derivative in weight (and per_sample_weights) by
 * central differences against the kernels', for a mode of one case. */
static double loss(Case *c) {
  float *y = malloc(sizeof(float) * (size_t)(c->b * c->d));
  forward(c, y);
  double l = 0;
  for (int k = 0; k < c->b * c->d; k++)
    l += (double)c->dy[k] * y[k];
  free(y);
  return l;
}

/* h below max's gaps between rows; a step moves L by the rounding of the few
 * outputs it changes (sums of K + 1 terms of at most 1), over 2h. */
static void fd(Case *c, float *x, int64_t n, const float *grad) {
  const float h = 0.03f;
  for (int64_t k = 0; k < n; k++) {
    float x0 = x[k];
    x[k] = x0 + h;
    double up = loss(c);
    x[k] = x0 - h;
    double down = loss(c);
    x[k] = x0;
    double d = (up - down) / (2.0 * (double)h);
    if (!(fabs(d - grad[k]) <= 1e-3 * (1 + fabs(d))))
      fail_msg("element %lld: finite difference %.7g, kernel %.7g", (long long)k, d, grad[k]);
  }
}

static void check_case(Case *c) {
  int nb = c->b * c->d, nw = c->r * c->d, n = c->flat ? c->n : c->b * c->k;
  float *y = malloc(sizeof(float) * (size_t)nb), *dw = malloc(sizeof(float) * (size_t)nw);
  float *dsw = malloc(sizeof(float) * (size_t)n);
  double *ry = malloc(sizeof(double) * (size_t)nb), *bd = malloc(sizeof(double) * (size_t)nb);
  double *rdw = malloc(sizeof(double) * (size_t)nw), *rdsw = malloc(sizeof(double) * (size_t)n);
  forward(c, y);
  ref_forward(c, ry, bd);
  for (int k = 0; k < nb; k++)
    if (!(fabs(y[k] - ry[k]) <= bd[k]))
      fail_msg("y[%d]: got %.9g, want %.9g (bound %.3g)", k, y[k], ry[k], bd[k]);
  DtTensor in[5], out = t2(DTRT_F32, dw, c->r, c->d);
  DtAttrs a = attrs(c, "t");
  int nin = operands(c, in, true);
  run(dtrt_k_embedding_bag_grad, in, nin, &out, &a);
  ref_backward(c, rdw, rdsw);
  /* each dw element sums at most n terms |s dy| <= 1 */
  for (int k = 0; k < nw; k++)
    if (!(fabs(dw[k] - rdw[k]) <= (n + 2) * ldexp(1, -24) * (1 + fabs(rdw[k])) * 4))
      fail_msg("dw[%d]: got %.9g, want %.9g", k, dw[k], rdw[k]);
  fd(c, c->w, nw, dw);
  if (c->psw) {
    DtTensor o = in[nin - 2];
    o.data = dsw;
    run(dtrt_k_embedding_bag_psw_grad, in, nin, &o, &a);
    for (int k = 0; k < n; k++) /* a dot of D terms of magnitude <= 1 */
      if (!(fabs(dsw[k] - rdsw[k]) <= (c->d + 2) * ldexp(1, -24) * c->d))
        fail_msg("dsw[%d]: got %.9g, want %.9g", k, dsw[k], rdsw[k]);
    fd(c, c->sw, n, dsw);
  }
  free(y), free(dw), free(dsw), free(ry), free(bd), free(rdw), free(rdsw);
}

static void test_modes(void **state) {
  (void)state;
  for (int flat = 0; flat < 2; flat++)
    for (int mode = 0; mode < DT_BAG_COUNT; mode++)
      for (int pad = -1; pad < 4; pad += 4)
        for (int psw = 0; psw <= (mode == DT_BAG_SUM); psw++) {
          Case c = make(mode, flat, psw, pad);
          check_case(&c);
          drop(&c);
        }
}

/* Max: ties go to the first entry, a NaN wins and takes the gradient; an
 * all-padding bag gives zeros and no gradient. */
static void test_max_ties(void **state) {
  (void)state;
  float w[3 * 2] = {1, 5, 1, NAN, 0, 7};
  int32_t id[6] = {1, 0, 2, 2, 2, 2};
  float y[3 * 2], dy[3 * 2] = {1, 2, 3, 4, 5, 6}, dw[3 * 2];
  DtTensor in[3] = {t2(DTRT_I32, id, 3, 2), t2(DTRT_F32, w, 3, 2), t2(DTRT_F32, dy, 3, 2)};
  DtTensor out = t2(DTRT_F32, y, 3, 2), gout = t2(DTRT_F32, dw, 3, 2);
  DtAttrs a = {.ni = 2, .i = {DT_BAG_MAX, 2}};
  run(dtrt_k_embedding_bag, in, 2, &out, &a);
  assert_true(y[0] == 1 && isnan(y[1])); /* bag 0: rows 1, 0 */
  assert_true(y[2] == 0 && y[3] == 0);   /* bag 1: padding only */
  run(dtrt_k_embedding_bag_grad, in, 3, &gout, &a);
  float want[6] = {0, 0, 1, 2, 0, 0}; /* row 1 first on the tie, and its NaN */
  assert_memory_equal(dw, want, sizeof want);
  a.ni = 1; /* without padding: bag 1 reads row 2 */
  run(dtrt_k_embedding_bag, in, 2, &out, &a);
  assert_true(y[2] == 0 && y[3] == 7 && y[4] == 0 && y[5] == 7);
}

/* The same bits on 1, 2 and 3 threads, forward and backward, on a problem
 * large enough for the pool: many bags hitting few rows. */
static void test_threads(void **state) {
  (void)state;
  enum { B = 512, K = 16, R = 37, D = 64 };
  int32_t *id = malloc(sizeof(int32_t) * B * K);
  float *w = malloc(sizeof(float) * R * D), *dy = malloc(sizeof(float) * B * D);
  for (int j = 0; j < B * K; j++)
    id[j] = (int32_t)(rt_next() % R);
  for (int k = 0; k < R * D; k++)
    w[k] = frand();
  for (int k = 0; k < B * D; k++)
    dy[k] = frand();
  float *y[3][DT_BAG_COUNT], *g[3][DT_BAG_COUNT];
  for (int t = 0; t < 3; t++) {
    char n[8];
    snprintf(n, sizeof n, "%d", t + 1);
    setenv("DTRT_NUM_THREADS", n, 1); /* read when the new context makes its pool */
    DtrtCtx *c = dtrt_ctx_new();
    assert_int_equal(dtrt_threads(c), t + 1);
    unsetenv("DTRT_NUM_THREADS");
    for (int mode = 0; mode < DT_BAG_COUNT; mode++) {
      y[t][mode] = malloc(sizeof(float) * B * D);
      g[t][mode] = malloc(sizeof(float) * R * D);
      DtTensor in[3] = {t2(DTRT_I32, id, B, K), t2(DTRT_F32, w, R, D), t2(DTRT_F32, dy, B, D)};
      DtTensor yt = t2(DTRT_F32, y[t][mode], B, D), gt = t2(DTRT_F32, g[t][mode], R, D);
      DtAttrs a = {.ni = 1, .i = {mode}};
      assert_int_equal(dtrt_k_embedding_bag(c, in, 2, &yt, &a), DT_OK);
      assert_int_equal(dtrt_k_embedding_bag_grad(c, in, 3, &gt, &a), DT_OK);
      assert_memory_equal(y[t][mode], y[0][mode], sizeof(float) * B * D);
      assert_memory_equal(g[t][mode], g[0][mode], sizeof(float) * R * D);
    }
    dtrt_ctx_free(c);
  }
  for (int t = 0; t < 3; t++)
    for (int mode = 0; mode < DT_BAG_COUNT; mode++)
      free(y[t][mode]), free(g[t][mode]);
  free(id), free(w), free(dy);
}

/* A bad id names the table, the batch row and the id; bad offsets say
 * which; per_sample_weights need mode sum. */
static void test_errors(void **state) {
  (void)state;
  Case c = make(DT_BAG_SUM, false, false, -1);
  float y[6 * 11], dw[9 * 11];
  DtTensor in[5], out = t2(DTRT_F32, y, c.b, c.d), gout = t2(DTRT_F32, dw, c.r, c.d);
  DtAttrs a = attrs(&c, "emb_user");
  int nin = operands(&c, in, false);
  c.id[13] = 9;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a,
         "embedding_bag: table 'emb_user': batch row 3 has id 9 (input entry 13), outside [0, 9)");
  c.id[13] = -1;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a, "batch row 3 has id -1");
  in[nin] = t2(DTRT_F32, c.dy, c.b, c.d);
  refuse(dtrt_k_embedding_bag_grad, in, nin + 1, &gout, &a, "'emb_user': batch row 3 has id -1");
  c.id[13] = 0;
  drop(&c);

  c = make(DT_BAG_MEAN, true, false, -1);
  a = attrs(&c, "emb_item");
  nin = operands(&c, in, false);
  c.id[22] = 100;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a, "'emb_item': batch row 5 has id 100");
  c.id[22] = 0;
  c.off[3] = 2;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a,
         "offsets[3] = 2 is less than offsets[2] = 3; offsets must not decrease");
  c.off[3] = 4;
  c.off[5] = 24;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a, "offsets[5] = 24 is past the input's end, 23");
  c.off[5] = 16;
  c.off[0] = 1;
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a, "offsets[0] is 1; the first bag must start at 0");
  c.off[0] = 0;
  c.psw = true;
  nin = operands(&c, in, false);
  refuse(dtrt_k_embedding_bag, in, nin, &out, &a, "per_sample_weights need mode sum, not mean");
  c.psw = false;
  a.ni = 2, a.i[1] = 9;
  refuse(dtrt_k_embedding_bag, in, 3, &out, &a, "padding_idx 9 is outside [0, 9)");
  a.ni = 1, a.i[0] = 3;
  refuse(dtrt_k_embedding_bag, in, 3, &out, &a, "mode 3");
  a.i[0] = DT_BAG_SUM;
  refuse(dtrt_k_embedding_bag, in, 2, &out, &a, "2 operands do not fit an input of rank 1");
  drop(&c);
}

/* Max's backward holds an arg-max per (bag, column); the others nothing. */
static void test_staged(void **state) {
  (void)state;
  DtTensor in[3] = {t2(DTRT_I32, NULL, 6, 4), t2(DTRT_F32, NULL, 9, 11), t2(DTRT_F32, NULL, 6, 11)};
  DtTensor out = t2(DTRT_F32, NULL, 9, 11);
  DtAttrs a = {.ni = 1, .i = {DT_BAG_MAX}};
  assert_int_equal(dtrt_staged_bytes(DT_STAGED_BAG_GRAD, in, 3, &out, &a, 1), 6 * 11 * 8);
  a.i[0] = DT_BAG_SUM;
  assert_int_equal(dtrt_staged_bytes(DT_STAGED_BAG_GRAD, in, 3, &out, &a, 1), 0);
}

/* The sparse gradient: the rows are the ids but padding_idx, sorted, once
 * each (a plain loop's marks), then -1; the values are the dense gradient's
 * rows, the same bits (both sum in bag order), zeros after the rows; every
 * other row of the dense gradient is zero. Ids repeat (23 or 24 of 9 rows). */
static void test_sparse(void **state) {
  (void)state;
  for (int flat = 0; flat < 2; flat++)
    for (int mode = 0; mode < DT_BAG_MAX; mode++)
      for (int pad = -1; pad < 4; pad += 4)
        for (int psw = 0; psw <= (mode == DT_BAG_SUM); psw++) {
          Case c = make(mode, flat, psw, pad);
          int n = flat ? c.n : c.b * c.k, nw = c.r * c.d, u = 0;
          int32_t *rows = malloc(sizeof(int32_t) * (size_t)n);
          float *val = malloc(sizeof(float) * (size_t)(n * c.d)), *dw = malloc(sizeof(float) * nw);
          bool mark[9] = {0};
          for (int j = 0; j < n; j++)
            if (c.id[j] != c.pad)
              mark[c.id[j]] = true;
          DtTensor in[7], out = t2(DTRT_F32, dw, c.r, c.d);
          DtAttrs a = attrs(&c, "t");
          int nin = operands(&c, in, false);
          DtTensor ro = in[0];
          ro.data = rows;
          run(dtrt_k_sparse_rows, in, nin, &ro, &a);
          for (int r = 0; r < c.r; r++)
            if (mark[r])
              assert_int_equal(rows[u++], r);
          for (int j = u; j < n; j++)
            assert_int_equal(rows[j], -1);
          nin = operands(&c, in, true);
          run(dtrt_k_embedding_bag_grad, in, nin, &out, &a);
          in[nin] = ro;
          DtTensor vo = {.data = val, .dtype = DTRT_F32, .rank = ro.rank + 1};
          memcpy(vo.dim, ro.dim, sizeof ro.dim);
          vo.dim[ro.rank] = c.d;
          run(dtrt_k_sparse_values, in, nin + 1, &vo, &a);
          for (int k = 0; k < u; k++)
            assert_memory_equal(val + k * c.d, dw + rows[k] * c.d, sizeof(float) * c.d);
          for (int k = u * c.d; k < n * c.d; k++)
            assert_true(val[k] == 0);
          for (int r = 0; r < c.r; r++)
            for (int e = 0; !mark[r] && e < c.d; e++)
              assert_true(dw[r * c.d + e] == 0);
          /* values whose rows are not sparse_rows' are refused */
          if (u >= 2) {
            int32_t t = rows[0];
            rows[0] = rows[1];
            refuse(dtrt_k_sparse_values, in, nin + 1, &vo, &a, "the rows must be sparse_rows'");
            rows[0] = t;
          }
          free(rows), free(val), free(dw);
          drop(&c);
        }
  /* max has no sparse gradient; a bad id is refused as by the others */
  Case c = make(DT_BAG_MAX, false, false, -1);
  int32_t rows[24];
  DtTensor in[5], ro = t2(DTRT_I32, rows, c.b, c.k);
  DtAttrs a = attrs(&c, "emb");
  int nin = operands(&c, in, false);
  refuse(dtrt_k_sparse_rows, in, nin, &ro, &a, "'emb': a sparse gradient needs mode sum or mean");
  a.i[0] = DT_BAG_SUM;
  c.id[13] = 9;
  refuse(dtrt_k_sparse_rows, in, nin, &ro, &a,
         "sparse_rows: table 'emb': batch row 3 has id 9 (input entry 13), outside [0, 9)");
  drop(&c);
}

/* The kernels on blocks of rows [lo, hi) of the table (at = [R, lo]): the
 * pooled outputs of the blocks add up to the whole table's (within the
 * reference's bound: a sum in another order), each id in exactly one block,
 * so per_sample_weights' gradients add up bit for bit; each block's weight
 * gradient is the whole one's rows, and its sparse rows and values are the
 * whole one's in the block, the same bits. Blocks 4, 2 and 3 of 9 rows. */
static void test_row_blocks(void **state) {
  (void)state;
  enum { NB = 3 };
  const int cut[NB + 1] = {0, 4, 6, 9};
  for (int flat = 0; flat < 2; flat++)
    for (int mode = 0; mode < DT_BAG_MAX; mode++)
      for (int pad = -1; pad < 4; pad += 4)
        for (int psw = 0; psw <= (mode == DT_BAG_SUM); psw++) {
          Case c = make(mode, flat, psw, pad);
          int n = flat ? c.n : c.b * c.k, nb = c.b * c.d, nw = c.r * c.d;
          float *y = calloc((size_t)nb, sizeof(float)), *yb = malloc(sizeof(float) * nb);
          float *dw = malloc(sizeof(float) * nw), *gb = malloc(sizeof(float) * nw);
          float *dsw = calloc((size_t)n, sizeof(float)), *sb = malloc(sizeof(float) * n);
          float *val = malloc(sizeof(float) * (size_t)(n * c.d));
          float *vb = malloc(sizeof(float) * (size_t)(n * c.d));
          int32_t *rows = malloc(sizeof(int32_t) * n), *rb = malloc(sizeof(int32_t) * n);
          double *ry = malloc(sizeof(double) * nb), *bd = malloc(sizeof(double) * nb);
          DtTensor in[7];
          DtAttrs a = attrs(&c, "t");
          int nin = operands(&c, in, true);
          DtTensor go = t2(DTRT_F32, dw, c.r, c.d), ro = in[0], vo = ro;
          ro.data = rows;
          vo.dtype = DTRT_F32, vo.rank++, vo.dim[ro.rank] = c.d, vo.data = val;
          run(dtrt_k_embedding_bag_grad, in, nin, &go, &a);
          run(dtrt_k_sparse_rows, in, nin - 1, &ro, &a);
          in[nin] = ro;
          run(dtrt_k_sparse_values, in, nin + 1, &vo, &a);
          int u = 0;
          while (u < n && rows[u] >= 0)
            u++;
          for (int q = 0; q < NB; q++) {
            int lo = cut[q], m = cut[q + 1] - lo;
            DtAttrs ab = {.ni = 4, .i = {c.mode, c.pad, c.r, lo}, .s = "t"};
            in[1] = t2(DTRT_F32, c.w + lo * c.d, m, c.d);
            DtTensor yo = t2(DTRT_F32, yb, c.b, c.d), gbo = t2(DTRT_F32, gb, m, c.d);
            run(dtrt_k_embedding_bag, in, nin - 1, &yo, &ab);
            for (int k = 0; k < nb; k++)
              y[k] += yb[k];
            run(dtrt_k_embedding_bag_grad, in, nin, &gbo, &ab);
            assert_memory_equal(gb, dw + lo * c.d, sizeof(float) * (size_t)(m * c.d));
            if (psw) {
              DtTensor so = in[nin - 2];
              so.data = sb;
              run(dtrt_k_embedding_bag_psw_grad, in, nin, &so, &ab);
              for (int j = 0; j < n; j++)
                dsw[j] += sb[j];
            }
            DtTensor rbo = ro, vbo = vo;
            rbo.data = rb, vbo.data = vb;
            run(dtrt_k_sparse_rows, in, nin - 1, &rbo, &ab);
            in[nin] = rbo;
            run(dtrt_k_sparse_values, in, nin + 1, &vbo, &ab);
            int k = 0;
            for (int t = 0; t < u; t++)
              if (rows[t] >= lo && rows[t] < lo + m) {
                assert_int_equal(rb[k], rows[t] - lo);
                assert_memory_equal(vb + k * c.d, val + t * c.d, sizeof(float) * c.d);
                k++;
              }
            for (int t = k; t < n; t++)
              assert_int_equal(rb[t], -1);
            in[1] = t2(DTRT_F32, c.w, c.r, c.d);
          }
          ref_forward(&c, ry, bd);
          for (int k = 0; k < nb; k++)
            if (!(fabs(y[k] - ry[k]) <= 2 * bd[k]))
              fail_msg("y[%d]: blocks give %.9g, want %.9g (bound %.3g)", k, y[k], ry[k],
                       2 * bd[k]);
          if (psw) {
            DtTensor so = in[nin - 2];
            so.data = sb;
            run(dtrt_k_embedding_bag_psw_grad, in, nin, &so, &a);
            assert_memory_equal(dsw, sb, sizeof(float) * n);
          }
          free(y), free(yb), free(dw), free(gb), free(dsw), free(sb), free(val), free(vb);
          free(rows), free(rb), free(ry), free(bd);
          drop(&c);
        }
  /* a block past the table, max, and an id outside the whole table */
  Case c = make(DT_BAG_SUM, false, false, -1);
  float y[6 * 11];
  DtTensor in[5], out = t2(DTRT_F32, y, c.b, c.d);
  operands(&c, in, false);
  in[1] = t2(DTRT_F32, c.w, 4, c.d);
  DtAttrs a = {.ni = 4, .i = {DT_BAG_SUM, -1, 9, 6}, .s = "emb"};
  refuse(dtrt_k_embedding_bag, in, 2, &out, &a,
         "embedding_bag: table 'emb': rows [6, 10) are not a block of a table of 9");
  a.i[3] = 5;
  a.i[0] = DT_BAG_MAX;
  refuse(dtrt_k_embedding_bag, in, 2, &out, &a, "a block of rows needs mode sum or mean, not max");
  a.i[0] = DT_BAG_SUM;
  c.id[13] = 9;
  refuse(dtrt_k_embedding_bag, in, 2, &out, &a,
         "batch row 3 has id 9 (input entry 13), outside [0, 9)");
  drop(&c);
}

static int cmp_i32(const void *x, const void *y) {
  int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
  return (a > b) - (a < b);
}

/* sparse_rows sorts the ids by their bytes, the highest first: many ids
 * (runs of one byte longer and shorter than its insertion sort's), over
 * tables of 2^8, 2^16, 2^24 and 2^26 rows (one to four levels), repeated
 * and padded, come out as libc's qsort orders them: each once, in order,
 * then -1. The table is not read, only its shape; calloc leaves its pages
 * untouched. */
static void test_sparse_rows_many(void **state) {
  (void)state;
  const int64_t tables[4] = {1 << 8, 1 << 16, 1 << 24, 1 << 26};
  enum { N = 6000 };
  int32_t *id = malloc(sizeof(int32_t) * N), *rows = malloc(sizeof(int32_t) * N);
  int32_t *want = malloc(sizeof(int32_t) * N);
  uint64_t x = 88172645463325252u;
  for (int t = 0; t < 4; t++) {
    int64_t r = tables[t];
    float *w = calloc((size_t)r, sizeof(float));
    assert_non_null(w);
    for (int j = 0; j < N; j++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      /* a third of them among the first 40 rows: long runs of one byte */
      id[j] = (int32_t)(j % 3 ? x % (uint64_t)r : x % 40);
    }
    id[7] = 5; /* padding_idx */
    DtTensor in[2] = {t2(DTRT_I32, id, N / 4, 4), t2(DTRT_F32, w, r, 1)};
    DtTensor ro = t2(DTRT_I32, rows, N / 4, 4);
    DtAttrs a = {.ni = 2, .i = {DT_BAG_SUM, 5}};
    run(dtrt_k_sparse_rows, in, 2, &ro, &a);
    int u = 0; /* the ids but 5, by libc's qsort, each once */
    for (int j = 0; j < N; j++)
      if (id[j] != 5)
        want[u++] = id[j];
    qsort(want, (size_t)u, sizeof *want, cmp_i32);
    int once = 0;
    for (int j = 0; j < u; j++)
      if (!j || want[j] != want[once - 1])
        want[once++] = want[j];
    for (int k = 0; k < N; k++)
      assert_int_equal(rows[k], k < once ? want[k] : -1);
    free(w);
  }
  free(id), free(rows), free(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_modes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_max_ties, setup, teardown),
      cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_staged, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sparse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_sparse_rows_many, setup, teardown),
      cmocka_unit_test_setup_teardown(test_row_blocks, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
