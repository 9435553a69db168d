/* test_runtime_model.c: the model API over a hand-written DtModelDesc whose
 * steps are C functions here: linear regression trained with momentum SGD. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

enum { B = 4, F = 3 };
enum { W = 0, BIAS = 16, VEL = 32, SEEN = 48 };

/* pred[i] = x[i,:] . w + b */
static void predict(const unsigned char *state, const float *x, float *pred) {
  const float *w = (const float *)(state + W), *b = (const float *)(state + BIAS);
  for (int i = 0; i < B; i++) {
    pred[i] = b[0];
    for (int j = 0; j < F; j++)
      pred[i] += x[i * F + j] * w[j];
  }
}

static DtStatus train(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                      void *const *in, void *const *out, int64_t step) {
  const float *x = in[0], *y = in[1];
  float *w = (float *)(state + W), *b = (float *)(state + BIAS), *v = (float *)(state + VEL);
  int32_t *seen = (int32_t *)(state + SEEN);
  float *pred = (float *)work;
  if (isnan(x[0]))
    return dtrt_fail(ctx, DT_ERR_ARG, "NaN in the input");
  if (isinf(x[0]))
    return DT_ERR_INTERNAL;
  if (*seen - 1 != step)
    return dtrt_fail(ctx, DT_ERR_INTERNAL, "step %lld, seen %d", (long long)step, (int)*seen);
  predict(state, x, pred);
  float loss = 0, gw[F] = {0}, gb = 0;
  for (int i = 0; i < B; i++) {
    float e = pred[i] - y[i];
    loss += e * e / B;
    gb += 2 * e / B;
    for (int j = 0; j < F; j++)
      gw[j] += 2 * e * x[i * F + j] / B;
  }
  for (int j = 0; j < F; j++) {
    v[j] = 0.9f * v[j] + gw[j];
    w[j] -= 0.05f * v[j];
  }
  b[0] -= 0.05f * gb;
  ++*seen;
  *(float *)out[0] = loss;
  return DT_OK;
}

static DtStatus forward(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                        void *const *in, void *const *out, int64_t step) {
  (void)ctx, (void)work, (void)step;
  predict(state, in[0], out[0]);
  return DT_OK;
}

/* Whole tensors: full and begin all zero. */
static DtGlobalDesc globals[] = {
    {"x", DT_G_INPUT, DTRT_F32, 2, {B, F}, 0, 0, 0, 0, -1, {0}, {0}},
    {"y", DT_G_INPUT, DTRT_F32, 1, {B}, 0, 0, 0, 0, -1, {0}, {0}},
    {"w", DT_G_PARAM, DTRT_F32, 1, {F}, DT_INIT_GLOROT, 0, F, 1, W, {0}, {0}},
    {"b", DT_G_PARAM, DTRT_F32, 1, {1}, DT_INIT_ZEROS, 0, 0, 0, BIAS, {0}, {0}},
    {"w.vel", DT_G_STATE, DTRT_F32, 1, {F}, DT_INIT_ZEROS, 0, 0, 0, VEL, {0}, {0}},
    {"seen", DT_G_STATE, DTRT_I32, 0, {0}, DT_INIT_ONES, 0, 0, 0, SEEN, {0}, {0}},
    {"pred", DT_G_OUTPUT, DTRT_F32, 1, {B}, 0, 0, 0, 0, -1, {0}, {0}},
};
static const int32_t train_in[] = {0, 1}, fwd_in[] = {0}, fwd_out[] = {6};

static DtModelDesc desc(void) {
  return (DtModelDesc){"linreg", "linreg-hash-1", 7, globals, 64, 16, train, 2, train_in,
                       forward, 1, 1, fwd_in, fwd_out, 0, NULL, NULL, NULL, NULL, NULL,
                       DT_DENORMALS_FLUSH, NULL};
}

static int group_setup(void **state) {
  (void)state;
  return rt_make_dir("dtrt-model");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

/* A batch from y = 2 x0 - x1 + 0.5 x2 + 1. */
static void batch(int k, float *x, float *y) {
  for (int i = 0; i < B; i++) {
    for (int j = 0; j < F; j++)
      x[i * F + j] = sinf((float)(k * 13 + i * 7 + j * 3));
    y[i] = 2 * x[i * F] - x[i * F + 1] + 0.5f * x[i * F + 2] + 1;
  }
}

static void test_train(void **state) {
  (void)state;
  Count c = {.limit = -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtModelDesc d = desc();
  DtModel *m;
  char err[256];
  assert_int_equal(dtrt_model_create_with(&d, 42, &a, err, sizeof err, &m), DT_OK);
  float *w = dtrt_model_tensor(m, "w"), *b = dtrt_model_tensor(m, "b");
  int32_t *seen = dtrt_model_tensor(m, "seen");
  assert_non_null(w);
  assert_null(dtrt_model_tensor(m, "x"));
  assert_null(dtrt_model_tensor(m, "nope"));
  float lim = sqrtf(6.0f / (F + 1)), w0[F];
  for (int j = 0; j < F; j++)
    assert_true(fabsf(w[j]) <= lim && w[j] != 0);
  assert_true(b[0] == 0 && *seen == 1);
  memcpy(w0, w, sizeof w0);
  /* the same seed gives the same params, another seed others */
  DtModel *m2;
  assert_int_equal(dtrt_model_create(&d, 42, &m2), DT_OK);
  assert_memory_equal(dtrt_model_tensor(m2, "w"), w0, sizeof w0);
  dtrt_model_destroy(m2);
  assert_int_equal(dtrt_model_create(&d, 43, &m2), DT_OK);
  assert_memory_not_equal(dtrt_model_tensor(m2, "w"), w0, sizeof w0);
  dtrt_model_destroy(m2);

  float x[B * F], y[B], loss = 0, first = 0;
  const void *in[2] = {x, y};
  int64_t elems[2] = {B * F, B};
  for (int k = 0; k < 300; k++) {
    batch(k, x, y);
    DtStatus s = dtrt_model_train_step(m, in, elems, &loss);
    if (s)
      fail_msg("%s", dtrt_model_error(m));
    if (k == 0)
      first = loss;
  }
  assert_true(dtrt_model_step(m) == 300);
  assert_true(*seen == 301);
  /* the peak holds the state and work blocks and the model's small tables */
  int64_t peak = 0, rss = -2;
  assert_int_equal(dtrt_model_memory(m, &peak, &rss), DT_OK);
  assert_true(peak >= 64 + 16 && peak < 64 + 16 + 4096);
  assert_true(rss >= 0);
  assert_int_equal(dtrt_model_memory(m, NULL, NULL), DT_OK);
  assert_int_equal(dtrt_model_memory(NULL, &peak, &rss), DT_ERR_ARG);
  assert_true(loss < first * 1e-3);
  assert_true(fabsf(w[0] - 2) < 0.05f && fabsf(w[1] + 1) < 0.05f && fabsf(b[0] - 1) < 0.05f);

  float pred[B], want[B];
  void *out[1] = {pred};
  int64_t oel[1] = {B};
  assert_int_equal(dtrt_model_forward(m, in, elems, out, oel), DT_OK);
  for (int i = 0; i < B; i++) {
    want[i] = b[0] + x[i * F] * w[0] + x[i * F + 1] * w[1] + x[i * F + 2] * w[2];
    assert_true(fabsf(pred[i] - want[i]) < 1e-5f);
  }

  /* wrong sizes and pointers are refused with the input's name and both counts */
  elems[1] = 5;
  assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "input 'y' has 5 elements, the model expects 4"));
  elems[1] = B;
  oel[0] = 3;
  assert_int_equal(dtrt_model_forward(m, in, elems, out, oel), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "output 'pred' has 3 elements"));
  const void *nul[2] = {x, NULL};
  assert_int_equal(dtrt_model_train_step(m, nul, elems, &loss), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "input 'y' is NULL"));
  assert_int_equal(dtrt_model_train_step(m, NULL, elems, &loss), DT_ERR_ARG);
  assert_int_equal(dtrt_model_train_step(m, in, elems, NULL), DT_ERR_ARG);
  assert_int_equal(dtrt_model_train_step(NULL, in, elems, &loss), DT_ERR_ARG);
  /* a failing step does not advance the counter */
  x[0] = NAN;
  assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m), "NaN in the input");
  assert_true(dtrt_model_step(m) == 300);
  x[0] = INFINITY;
  assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_ERR_INTERNAL);
  assert_string_equal(dtrt_model_error(m), "linreg train_step failed: internal error");
  assert_true(dtrt_model_step(m) == 300);
  dtrt_model_destroy(m);
  dtrt_model_destroy(NULL);
  assert_int_equal(c.allocs, c.frees);
}

static void test_checkpoint(void **state) {
  (void)state;
  char path[512], other[512];
  snprintf(path, sizeof path, "%s/linreg.safetensors", dir);
  snprintf(other, sizeof other, "%s/other.safetensors", dir);
  DtModelDesc d = desc();
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  float x[B * F], y[B], loss;
  const void *in[2] = {x, y};
  int64_t elems[2] = {B * F, B};
  for (int k = 0; k < 10; k++) {
    batch(k, x, y);
    assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_OK);
  }
  assert_int_equal(dtrt_model_save(m, path), DT_OK);
  unsigned char saved[64];
  memcpy(saved, dtrt_model_tensor(m, "w"), 64);
  for (int k = 10; k < 15; k++) {
    batch(k, x, y);
    assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_OK);
  }
  assert_memory_not_equal(saved, dtrt_model_tensor(m, "w"), 64);
  assert_int_equal(dtrt_model_load(m, path), DT_OK);
  assert_memory_equal(saved, dtrt_model_tensor(m, "w"), 64);
  assert_true(dtrt_model_step(m) == 10);
  /* training goes on from the restored step (the step fn checks it) */
  assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_OK);

  /* a corrupt file and another model's file leave the model as it was */
  unsigned char now[64];
  memcpy(now, dtrt_model_tensor(m, "w"), 64);
  FILE *f = fopen(path, "r+b");
  fseek(f, -3, SEEK_END);
  fputc(0x55, f);
  fclose(f);
  assert_int_equal(dtrt_model_load(m, path), DT_ERR_CHECKSUM);
  assert_memory_equal(now, dtrt_model_tensor(m, "w"), 64);
  assert_true(dtrt_model_step(m) == 11);
  /* the checkpoint's model is its tensors: another module hash (another
   * plan) loads, another shape does not */
  DtModelDesc d2 = desc();
  d2.hash = "linreg-hash-2";
  DtModel *m2;
  assert_int_equal(dtrt_model_create(&d2, 1, &m2), DT_OK);
  assert_int_equal(dtrt_model_save(m2, other), DT_OK);
  dtrt_model_destroy(m2);
  DtGlobalDesc g2[7];
  d2 = desc();
  memcpy(g2, d2.global, sizeof g2);
  g2[3].dim[0] = 1;   /* b: [1] -> [1, 1] */
  g2[3].rank = 2;
  g2[3].dim[1] = 1;
  d2.global = g2;
  assert_int_equal(dtrt_model_create(&d2, 1, &m2), DT_OK);
  assert_int_equal(dtrt_model_load(m2, other), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_model_error(m2), "tensor 'b' is f32[1], this model's is f32[1,1]"));
  assert_int_equal(dtrt_model_save(m2, other), DT_OK);
  assert_int_equal(dtrt_model_load(m, other), DT_ERR_MISMATCH);
  assert_memory_equal(now, dtrt_model_tensor(m, "w"), 64);
  dtrt_model_destroy(m2);
  dtrt_model_destroy(m);
}

/* Creation with desc changed by edit fails with a message containing want. */
static void bad_desc(void (*edit)(DtModelDesc *, DtGlobalDesc *), const char *want) {
  DtGlobalDesc g[7];
  memcpy(g, globals, sizeof g);
  DtModelDesc d = desc();
  d.global = g;
  edit(&d, g);
  Count c = {.limit = -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtModel *m = (DtModel *)&c;
  char err[256];
  assert_int_equal(dtrt_model_create_with(&d, 0, &a, err, sizeof err, &m), DT_ERR_ARG);
  if (!strstr(err, want))
    fail_msg("message '%s' lacks '%s'", err, want);
  assert_null(m);
  assert_int_equal(c.allocs, c.frees);
}

static void e_offset(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[4].offset = 56; }
static void e_align(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[4].offset = 2; }
static void e_dup(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[4].name = "w"; }
static void e_kind(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[3].kind = 9; }
static void e_dtype(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[3].dtype = 0; }
static void e_rank(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[0].rank = 9; }
static void e_dim(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[0].dim[1] = -3; }
static void e_init(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[5].init = DT_INIT_GLOROT; }
static void e_glorot(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[2].fan_in = 0, g[2].fan_out = 0; }
static void e_in(DtModelDesc *d, DtGlobalDesc *g) { (void)g, d->train_in = fwd_out; }
static void e_out(DtModelDesc *d, DtGlobalDesc *g) { (void)g, d->fwd_out = fwd_in; }
static void e_nglobal(DtModelDesc *d, DtGlobalDesc *g) { (void)g, d->nglobal = -1; }
static void e_name(DtModelDesc *d, DtGlobalDesc *g) { (void)g, d->hash = NULL; }
static void e_block(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[2].full[0] = 4, g[2].begin[0] = 2; }
static void e_begin(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[2].begin[0] = 1; }
static void e_full(DtModelDesc *d, DtGlobalDesc *g) { (void)d, g[0].full[0] = -1; }

/* A device whose code dtc put in another target's object. */
static void test_code_elsewhere(void **state) {
  (void)state;
  DtModelDesc d = desc();
  d.device = "d1";
  d.target = "aarch64-linux-gnu";
  d.object = "linreg.aarch64-linux-gnu.o";
  d.train_step = d.forward = NULL;
  Count c = {.limit = -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtModel *m = (DtModel *)&c;
  char err[256];
  assert_int_equal(dtrt_model_create_with(&d, 0, &a, err, sizeof err, &m), DT_ERR_MISMATCH);
  assert_string_equal(err, "model linreg: device 'd1' (rank 0) runs aarch64-linux-gnu code, "
                           "which is in linreg.aarch64-linux-gnu.o, not in this binary");
  assert_null(m);
  assert_int_equal(c.allocs, c.frees);
  d.target = NULL;
  assert_int_equal(dtrt_model_create_with(&d, 0, &a, err, sizeof err, &m), DT_ERR_MISMATCH);
  assert_string_equal(err, "model linreg: device 'd1' (rank 0) has its code in "
                           "linreg.aarch64-linux-gnu.o, not in this binary");
  /* the same device with its code here */
  d = desc();
  d.device = "d1";
  d.target = "aarch64-linux-gnu";
  assert_int_equal(dtrt_model_create_with(&d, 0, &a, err, sizeof err, &m), DT_OK);
  dtrt_model_destroy(m);
  assert_int_equal(c.allocs, c.frees);
}

static void test_bad_desc(void **state) {
  (void)state;
  bad_desc(e_offset, "'w.vel' at offset 56 (12 bytes) does not fit the 64-byte state block");
  bad_desc(e_align, "'w.vel' at offset 2");
  bad_desc(e_dup, "two globals named 'w'");
  /* an output may share a param's name: they never meet in one namespace */
  DtGlobalDesc g[7];
  memcpy(g, globals, sizeof g);
  g[6].name = "w";
  DtModelDesc ok = desc();
  ok.global = g;
  DtModel *mo;
  assert_int_equal(dtrt_model_create(&ok, 0, &mo), DT_OK);
  assert_non_null(dtrt_model_tensor(mo, "w"));
  dtrt_model_destroy(mo);
  bad_desc(e_kind, "'b' has kind 9");
  bad_desc(e_dtype, "unknown dtype");
  bad_desc(e_rank, "rank 9");
  bad_desc(e_dim, "negative dimension");
  bad_desc(e_init, "'seen' has initialiser 2, unusable for i32");
  bad_desc(e_glorot, "initialising 'w': init: glorot");
  bad_desc(e_in, "training input 0 is global 6, not an input");
  bad_desc(e_out, "forward output 0 is global 0, not an output");
  bad_desc(e_nglobal, "bad global table");
  bad_desc(e_name, "lacks a name or hash");
  bad_desc(e_block, "linreg: w: a block of [3] at [2] does not fit in [4]");
  bad_desc(e_begin, "linreg: w begins at [1] but has no full shape");
  bad_desc(e_full, "linreg: x: a block of [4,3] at [0,0] does not fit in [-1,0]");
  DtModel *m;
  assert_int_equal(dtrt_model_create(NULL, 0, &m), DT_ERR_ARG);
  assert_null(m);
  DtModelDesc d = desc();
  assert_int_equal(dtrt_model_create(&d, 0, NULL), DT_ERR_ARG);
  DtAllocator half = {count_alloc, NULL, NULL};
  assert_int_equal(dtrt_model_create_with(&d, 0, &half, NULL, 0, &m), DT_ERR_ARG);
}

static void test_inference_only(void **state) {
  (void)state;
  DtModelDesc d = desc();
  d.train_step = NULL;
  d.ntrain_in = 0;
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 0, &m), DT_OK);
  float loss;
  assert_int_equal(dtrt_model_train_step(m, NULL, NULL, &loss), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "inference only"));
  dtrt_model_destroy(m);
}

/* Every allocation failure during creation is reported and leaks nothing. */
static void test_out_of_memory(void **state) {
  (void)state;
  DtModelDesc d = desc();
  for (long limit = 0; limit < 5; limit++) {
    Count c = {.limit = limit};
    DtAllocator a = {count_alloc, count_free, &c};
    DtModel *m;
    char err[256];
    DtStatus s = dtrt_model_create_with(&d, 0, &a, err, sizeof err, &m);
    if (s == DT_OK) {
      dtrt_model_destroy(m);
    } else {
      assert_int_equal(s, DT_ERR_NOMEM);
      assert_null(m);
      assert_true(limit == 0 || strstr(err, "out of memory"));
    }
    assert_int_equal(c.allocs, c.frees);
  }
}

/* ---- SPMD: one description per device ---------------------------------- */

/* dtrt_init_range is the slice of dtrt_init, from any start and of any length. */
static void test_init_range(void **state) {
  (void)state;
  DtrtCtx *ctx = dtrt_ctx_new();
  static const int kinds[] = {DT_INIT_GLOROT, DT_INIT_NORMAL, DT_INIT_UNIFORM, DT_INIT_ONES};
  static const int64_t firsts[] = {0, 1, 2, 5, 36}, lens[] = {0, 1, 2, 7};
  float whole[37], part[8];
  for (int k = 0; k < 4; k++) {
    assert_int_equal(dtrt_init(ctx, whole, 37, kinds[k], 0.5, 7, 5, 9, 3), DT_OK);
    for (int i = 0; i < 5; i++)
      for (int j = 0; j < 4; j++) {
        int64_t first = firsts[i], n = first + lens[j] > 37 ? 37 - first : lens[j];
        memset(part, 0x55, sizeof part);
        assert_int_equal(dtrt_init_range(ctx, part, n, kinds[k], 0.5, 7, 5, 9, 3, first), DT_OK);
        assert_memory_equal(part, whole + first, (size_t)n * sizeof *part);
      }
  }
  assert_int_equal(dtrt_init_range(ctx, part, 1, DT_INIT_NORMAL, 1, 0, 0, 9, 3, -1), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "range of 1 elements from -1"));
  assert_int_equal(dtrt_init_range(ctx, part, 2, DT_INIT_NORMAL, 1, 0, 0, 9, 3, INT64_MAX - 1),
                   DT_ERR_ARG);
  dtrt_ctx_free(ctx);
}

/* A model compiled for two devices, each with its own blocks:
 *   v  f32[10]     uniform  split 7 | 3
 *   w  f32[5,4]    glorot   rows 2 | 3
 *   u  f32[3,7]    normal   columns 3 | 4 (strided, odd starts)
 *   e  f32[2,5,3]  normal   the middle dim 2 | 3
 *   g  f32[4,6]    uniform  a block in both dims on each device (no tiling)
 *   b  f32[4]      uniform  replicated (full = dim)
 *   w.m  state like w, zeros; seen  i32 scalar, ones
 * Offsets are set by lay_out. */
enum { TP_PARAMS = 6, TP_GLOBALS = 8 };
#define F32P(n, r, ...) .name = n, .kind = DT_G_PARAM, .dtype = DTRT_F32, .rank = r, __VA_ARGS__
static DtGlobalDesc tp_global[2][TP_GLOBALS] = {
    {
        {F32P("v", 1, .dim = {7}, .full = {10}, .init = DT_INIT_UNIFORM, .init_arg = 0.5)},
        {F32P("w", 2, .dim = {2, 4}, .full = {5, 4}, .init = DT_INIT_GLOROT, .fan_in = 5,
              .fan_out = 4)},
        {F32P("u", 2, .dim = {3, 3}, .full = {3, 7}, .init = DT_INIT_NORMAL, .init_arg = 0.02)},
        {F32P("e", 3, .dim = {2, 2, 3}, .full = {2, 5, 3}, .init = DT_INIT_NORMAL,
              .init_arg = 1)},
        {F32P("g", 2, .dim = {2, 3}, .full = {4, 6}, .begin = {1, 1}, .init = DT_INIT_UNIFORM,
              .init_arg = 1)},
        {F32P("b", 1, .dim = {4}, .full = {4}, .init = DT_INIT_UNIFORM, .init_arg = 0.1)},
        {.name = "w.m", .kind = DT_G_STATE, .dtype = DTRT_F32, .rank = 2, .dim = {2, 4},
         .full = {5, 4}},
        {.name = "seen", .kind = DT_G_STATE, .dtype = DTRT_I32, .init = DT_INIT_ONES},
    },
    {
        {F32P("v", 1, .dim = {3}, .full = {10}, .begin = {7}, .init = DT_INIT_UNIFORM,
              .init_arg = 0.5)},
        {F32P("w", 2, .dim = {3, 4}, .full = {5, 4}, .begin = {2, 0}, .init = DT_INIT_GLOROT,
              .fan_in = 5, .fan_out = 4)},
        {F32P("u", 2, .dim = {3, 4}, .full = {3, 7}, .begin = {0, 3}, .init = DT_INIT_NORMAL,
              .init_arg = 0.02)},
        {F32P("e", 3, .dim = {2, 3, 3}, .full = {2, 5, 3}, .begin = {0, 2, 0},
              .init = DT_INIT_NORMAL, .init_arg = 1)},
        {F32P("g", 2, .dim = {2, 3}, .full = {4, 6}, .begin = {2, 3}, .init = DT_INIT_UNIFORM,
              .init_arg = 1)},
        {F32P("b", 1, .dim = {4}, .full = {4}, .init = DT_INIT_UNIFORM, .init_arg = 0.1)},
        {.name = "w.m", .kind = DT_G_STATE, .dtype = DTRT_F32, .rank = 2, .dim = {3, 4},
         .full = {5, 4}, .begin = {2, 0}},
        {.name = "seen", .kind = DT_G_STATE, .dtype = DTRT_I32, .init = DT_INIT_ONES},
    },
};
#undef F32P
static const int32_t tp_mesh[] = {2};

/* Offsets of the globals g[0..n) (all stored), 64-byte aligned; d over them. */
static void lay_out(DtGlobalDesc *g, int n, DtModelDesc *d) {
  int64_t at = 0;
  for (int k = 0; k < n; k++) {
    int64_t elems = 1;
    for (int j = 0; j < g[k].rank; j++)
      elems *= g[k].dim[j];
    g[k].offset = at;
    at += (elems * 4 + 63) / 64 * 64;
  }
  *d = (DtModelDesc){.name = "tp", .hash = "tp-hash", .nglobal = n, .global = g,
                     .state_bytes = at, .nmesh_axis = 1, .mesh_axis_size = tp_mesh};
}

static DtModelDesc tp_desc(int dev) {
  DtModelDesc d;
  lay_out(tp_global[dev], TP_GLOBALS, &d);
  return d;
}

/* A model of device dev alone: its description d, over globals g, without
 * the mesh. */
static DtModel *tp_alone(int dev, DtGlobalDesc *g, DtModelDesc *d, uint64_t seed) {
  memcpy(g, tp_global[dev], sizeof tp_global[dev]);
  lay_out(g, TP_GLOBALS, d);
  d->nmesh_axis = 0;
  const DtModelDesc *one[] = {d};
  DtModel *m;
  char err[256];
  if (dtrt_model_create_spmd_with(one, 1, seed, NULL, err, sizeof err, &m))
    fail_msg("device %d alone: %s", dev, err);
  return m;
}

/* The element of the whole tensor of shape full at the local index k of the
 * block dim at begin, by coordinates. */
static int64_t whole_index(int rank, const int64_t *dim, const int64_t *full,
                           const int64_t *begin, int64_t k) {
  int64_t at = 0, stride = 1;
  for (int j = rank - 1; j >= 0; j--) {
    at += (begin[j] + k % dim[j]) * stride;
    k /= dim[j];
    stride *= full[j];
  }
  return at;
}

/* Each device's block of each param is that block of the single-process
 * param, and the devices' blocks together make the whole tensor. */
static void test_block_init(void **state) {
  (void)state;
  DtrtCtx *ctx = dtrt_ctx_new();
  DtGlobalDesc g[2][TP_GLOBALS];
  DtModelDesc d[2];
  DtModel *m[2] = {tp_alone(0, g[0], &d[0], 77), tp_alone(1, g[1], &d[1], 77)};
  for (int k = 0; k < TP_PARAMS; k++) {
    const DtGlobalDesc *p = &tp_global[0][k];
    int64_t n = 1;
    for (int j = 0; j < p->rank; j++)
      n *= p->full[j];
    float whole[64], built[64];
    bool covered[64] = {false};
    assert_true(n <= 64);
    assert_int_equal(dtrt_init(ctx, whole, n, p->init, p->init_arg, p->fan_in, p->fan_out, 77,
                               (uint64_t)k),
                     DT_OK);
    for (int dev = 0; dev < 2; dev++) {
      DtTensor t;
      int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
      assert_int_equal(dtrt_model_tensor_block(m[dev], p->name, &t, full, begin), DT_OK);
      assert_ptr_equal(t.data, dtrt_model_tensor(m[dev], p->name));
      assert_int_equal(t.rank, p->rank);
      assert_memory_equal(full, p->full, (size_t)p->rank * sizeof *full);
      assert_memory_equal(t.dim, tp_global[dev][k].dim, (size_t)p->rank * sizeof *t.dim);
      assert_memory_equal(begin, tp_global[dev][k].begin, (size_t)p->rank * sizeof *begin);
      int64_t nb = 1;
      for (int j = 0; j < t.rank; j++)
        nb *= t.dim[j];
      for (int64_t i = 0; i < nb; i++) {
        int64_t at = whole_index(t.rank, t.dim, full, begin, i);
        float got = ((float *)t.data)[i];
        if (memcmp(&got, &whole[at], sizeof got))
          fail_msg("'%s' on device %d: element %lld is %g, the whole tensor has %g there",
                   p->name, dev, (long long)i, got, whole[at]);
        built[at] = got;
        covered[at] = true;
      }
    }
    if (strcmp(p->name, "g")) {   /* the blocks of g overlap and leave holes */
      for (int64_t i = 0; i < n; i++)
        assert_true(covered[i]);
      assert_memory_equal(built, whole, (size_t)n * sizeof *built);
    }
  }
  const float *wm = dtrt_model_tensor(m[1], "w.m");
  for (int i = 0; i < 12; i++)
    assert_true(wm[i] == 0);
  assert_int_equal(*(int32_t *)dtrt_model_tensor(m[1], "seen"), 1);
  dtrt_model_destroy(m[0]);
  dtrt_model_destroy(m[1]);
  dtrt_ctx_free(ctx);
}

/* Device 1's description as dtc writes it for a device of a mesh: device
 * 0's table and device 1's blocks apart (DtModelDesc.blocks). The model
 * holds device 1's blocks, initialised as from device 1's own table, and
 * libdtrt counts the table it writes them into. */
static void test_shared_table(void **state) {
  (void)state;
  DtGlobalDesc g0[TP_GLOBALS], g1[TP_GLOBALS];
  DtModelDesc d0, d1;
  DtModel *own = tp_alone(1, g1, &d1, 77);
  memcpy(g0, tp_global[0], sizeof g0);
  lay_out(g0, TP_GLOBALS, &d0);
  int64_t blocks[TP_GLOBALS * (2 * DT_MAX_RANK + 1)], *p = blocks;
  for (int k = 0; k < TP_GLOBALS; k++) {
    memcpy(p, g1[k].dim, sizeof(int64_t) * (size_t)g1[k].rank);
    memcpy(p + g1[k].rank, g1[k].begin, sizeof(int64_t) * (size_t)g1[k].rank);
    p[2 * g1[k].rank] = g1[k].offset;
    p += 2 * g1[k].rank + 1;
  }
  DtModelDesc d = d1;
  d.global = g0;
  d.blocks = blocks;
  const DtModelDesc *one[] = {&d};
  DtModel *m;
  char err[256];
  if (dtrt_model_create_spmd_with(one, 1, 77, NULL, err, sizeof err, &m))
    fail_msg("device 1 over device 0's table: %s", err);
  for (int k = 0; k < TP_GLOBALS; k++) {
    const DtGlobalDesc *w = &g1[k];
    DtTensor a, b;
    int64_t fa[DT_MAX_RANK], fb[DT_MAX_RANK], ba[DT_MAX_RANK], bb[DT_MAX_RANK];
    assert_int_equal(dtrt_model_tensor_block(m, w->name, &a, fa, ba), DT_OK);
    assert_int_equal(dtrt_model_tensor_block(own, w->name, &b, fb, bb), DT_OK);
    assert_int_equal(a.rank, w->rank);
    assert_memory_equal(a.dim, w->dim, sizeof(int64_t) * (size_t)w->rank);
    assert_memory_equal(ba, w->begin, sizeof(int64_t) * (size_t)w->rank);
    assert_int_equal((unsigned char *)a.data - (unsigned char *)dtrt_model_tensor(m, g1[0].name),
                     w->offset - g1[0].offset);
    int64_t n = 1;
    for (int j = 0; j < w->rank; j++)
      n *= w->dim[j];
    assert_memory_equal(a.data, b.data, (size_t)n * 4);
  }
  int64_t peak, peak_own;
  assert_int_equal(dtrt_model_memory(m, &peak, NULL), DT_OK);
  assert_int_equal(dtrt_model_memory(own, &peak_own, NULL), DT_OK);
  assert_int_equal(peak - peak_own,
                   (int64_t)(sizeof(DtModelDesc) + sizeof(DtGlobalDesc) * TP_GLOBALS));
  dtrt_model_destroy(m);
  dtrt_model_destroy(own);
}

static void test_spmd_create(void **state) {
  (void)state;
  Count c = {.limit = -1};
  DtAllocator a = {count_alloc, count_free, &c};
  DtModelDesc d0 = tp_desc(0), d1 = tp_desc(1);
  const DtModelDesc *dev[] = {&d0, &d1};
  DtModel *m = (DtModel *)&c;
  char err[256];
  /* no launcher: one rank, for a model of two devices */
  assert_int_equal(dtrt_model_create_spmd_with(dev, 2, 1, &a, err, sizeof err, &m), DT_ERR_ARG);
  assert_string_equal(err, "model tp was compiled for 2 devices but runs on 1 rank; launch it "
                           "with mpirun -np 2");
  assert_null(m);
  assert_int_equal(c.allocs, c.frees);
  assert_int_equal(dtrt_model_create_spmd(dev, 2, 1, &m), DT_ERR_ARG);
  assert_null(m);

  /* one device: exactly dtrt_model_create */
  DtModelDesc lin = desc();
  const DtModelDesc *one[] = {&lin};
  DtModel *m1, *m2;
  assert_int_equal(dtrt_model_create_spmd_with(one, 1, 42, &a, err, sizeof err, &m1), DT_OK);
  assert_int_equal(dtrt_model_create(&lin, 42, &m2), DT_OK);
  assert_memory_equal(dtrt_model_tensor(m1, "w"), dtrt_model_tensor(m2, "w"), 64);
  assert_int_equal(dtrt_model_rank(m1), 0);
  dtrt_model_destroy(m1);
  dtrt_model_destroy(m2);
  assert_int_equal(c.allocs, c.frees);
  /* device 0 alone still wants its mesh of two */
  assert_int_equal(dtrt_model_create_spmd_with(dev, 1, 1, &a, err, sizeof err, &m), DT_ERR_ARG);
  assert_non_null(strstr(err, "mesh has 2 devices, the job has 1 rank"));

  const DtModelDesc *none[] = {NULL};
  assert_int_equal(dtrt_model_create_spmd_with(none, 1, 1, &a, err, sizeof err, &m), DT_ERR_ARG);
  assert_string_equal(err, "model: no description");
  assert_int_equal(dtrt_model_create_spmd_with(NULL, 2, 1, &a, err, sizeof err, &m), DT_ERR_ARG);
  assert_int_equal(dtrt_model_create_spmd_with(dev, 0, 1, &a, err, sizeof err, &m), DT_ERR_ARG);
  assert_non_null(strstr(err, "0 device descriptions"));
  assert_int_equal(dtrt_model_create_spmd(dev, 2, 1, NULL), DT_ERR_ARG);
  assert_int_equal(c.allocs, c.frees);
}

static void test_tensor_block(void **state) {
  (void)state;
  DtModelDesc d = desc();
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  DtTensor t;
  int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
  memset(begin, 0x55, sizeof begin);
  assert_int_equal(dtrt_model_tensor_block(m, "w.vel", &t, full, begin), DT_OK);
  assert_true(t.data == dtrt_model_tensor(m, "w.vel") && t.dtype == DTRT_F32 && t.rank == 1 &&
              t.dim[0] == F && full[0] == F && begin[0] == 0);
  assert_int_equal(dtrt_model_tensor_block(m, "seen", NULL, NULL, NULL), DT_OK);
  assert_int_equal(dtrt_model_tensor_block(m, "x", &t, full, begin), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m), "linreg: no param or state named 'x'");
  assert_int_equal(dtrt_model_tensor_block(m, NULL, &t, full, begin), DT_ERR_ARG);
  assert_int_equal(dtrt_model_tensor_block(NULL, "w", &t, full, begin), DT_ERR_ARG);
  dtrt_model_destroy(m);
}

/* Whether the file at path contains text. */
static bool file_has(const char *path, const char *text) {
  char buf[4096] = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f), len = strlen(text);
  fclose(f);
  for (size_t at = 0; at + len <= n; at++)
    if (!memcmp(buf + at, text, len))
      return true;
  return false;
}

/* A checkpoint holds whole tensors: a process that holds blocks of them alone
 * cannot save one, and reads its own blocks out of the whole tensors. */
static void test_block_checkpoint(void **state) {
  (void)state;
  char path[512];
  snprintf(path, sizeof path, "%s/tp1.safetensors", dir);
  remove(path);
  DtGlobalDesc g[TP_GLOBALS], h[TP_GLOBALS];
  DtModelDesc d, e;
  DtModel *m = tp_alone(1, g, &d, 5);
  assert_int_equal(dtrt_model_save(m, path), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m),
                      "checkpoint: the ranks hold 18 of the 30 elements of 'e'");
  struct stat st;
  assert_int_not_equal(stat(path, &st), 0);

  /* the same model with whole tensors saves them; the blocks load from it */
  memcpy(h, g, sizeof h);
  for (int k = 0; k < TP_GLOBALS; k++) {
    if (h[k].rank > 0 && h[k].full[0])
      memcpy(h[k].dim, h[k].full, sizeof h[k].dim);
    memset(h[k].full, 0, sizeof h[k].full);
    memset(h[k].begin, 0, sizeof h[k].begin);
  }
  lay_out(h, TP_GLOBALS, &e);
  e.nmesh_axis = 0;
  DtModel *all;
  assert_int_equal(dtrt_model_create(&e, 9, &all), DT_OK);
  assert_int_equal(dtrt_model_save(all, path), DT_OK);
  assert_int_equal(dtrt_model_load(m, path), DT_OK);
  for (int k = 0; k < TP_GLOBALS; k++) {
    DtTensor t;
    int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK], nb = 1;
    assert_int_equal(dtrt_model_tensor_block(m, g[k].name, &t, full, begin), DT_OK);
    const unsigned char *src = dtrt_model_tensor(all, g[k].name);
    for (int j = 0; j < t.rank; j++)
      nb *= t.dim[j];
    for (int64_t i = 0; i < nb; i++)
      if (memcmp((const unsigned char *)t.data + 4 * i,
                 src + 4 * whole_index(t.rank, t.dim, full, begin, i), 4))
        fail_msg("'%s': element %lld of the block is not the whole tensor's", g[k].name,
                 (long long)i);
  }
  dtrt_model_destroy(all);

  /* empty blocks load alike */
  memcpy(h, g, sizeof h);
  h[1].dim[0] = 0, h[1].begin[0] = 5;
  h[2].dim[1] = 0, h[2].begin[1] = 7;
  lay_out(h, TP_GLOBALS, &e);
  e.nmesh_axis = 0;
  DtModel *m2;
  assert_int_equal(dtrt_model_create(&e, 5, &m2), DT_OK);
  assert_int_equal(dtrt_model_load(m2, path), DT_OK);
  dtrt_model_destroy(m2);
  dtrt_model_destroy(m);
}

/* DTRT_TRACE naming something other than a regular file (a directory, a
 * symlink to a device, a FIFO) fails the model's creation with a message
 * naming it, and leaves it as it was; a regular file is written. */
static void test_trace_target(void **state) {
  (void)state;
  DtModelDesc d = desc();
  DtModel *m;
  char err[256], sub[300], link[300], fifo[300], file[300];
  snprintf(sub, sizeof sub, "%s/trace.d", dir);
  snprintf(link, sizeof link, "%s/trace.null", dir);
  snprintf(fifo, sizeof fifo, "%s/trace.fifo", dir);
  snprintf(file, sizeof file, "%s/trace.json", dir);
  assert_int_equal(mkdir(sub, 0755), 0);
  assert_int_equal(symlink("/dev/null", link), 0);
  assert_int_equal(mkfifo(fifo, 0644), 0);
  const char *bad[] = {sub, link, fifo};
  for (int k = 0; k < 3; k++) {
    setenv("DTRT_TRACE", bad[k], 1);
    DtStatus s = dtrt_model_create_with(&d, 1, NULL, err, sizeof err, &m);
    char want[400];
    snprintf(want, sizeof want, "trace: %s is not a regular file", bad[k]);
    if (s != DT_ERR_IO || !strstr(err, want))
      fail_msg("status %d, message '%s'; wanted %d and '%s'", s, err, DT_ERR_IO, want);
  }
  struct stat st;
  assert_true(!lstat(sub, &st) && S_ISDIR(st.st_mode));
  assert_true(!lstat(link, &st) && S_ISLNK(st.st_mode));
  assert_true(!lstat(fifo, &st) && S_ISFIFO(st.st_mode));
  setenv("DTRT_TRACE", file, 1);
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  dtrt_model_destroy(m);
  unsetenv("DTRT_TRACE");
  assert_true(file_has(file, "traceEvents"));
}

/* ---- a rank's own rows of the inputs, the learning rate from C ---- */

static const void *seen_in[2];   /* what the step last read */

static DtStatus record(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                       void *const *in, void *const *out, int64_t step) {
  (void)ctx, (void)state, (void)work, (void)step;
  seen_in[0] = in[0];
  seen_in[1] = in[1];
  *(float *)out[0] = 0;
  return DT_OK;
}

static DtStatus record_fwd(DtrtCtx *ctx, unsigned char *state, unsigned char *work,
                           void *const *in, void *const *out, int64_t step) {
  (void)ctx, (void)state, (void)work, (void)step, (void)out;
  seen_in[0] = in[0];
  return DT_OK;
}

/* Inputs that are rows [1, 3) of the batch of 4 (x) and rows [3, 4) (y):
 * the whole batch is read at those rows, the local rows where they are;
 * counts that do not fit are refused naming the rows. */
static void test_input_rows(void **state) {
  (void)state;
  DtGlobalDesc g[7];
  memcpy(g, globals, sizeof g);
  g[0].dim[0] = 2, g[0].full[0] = B, g[0].full[1] = F, g[0].begin[0] = 1;
  g[1].dim[0] = 1, g[1].full[0] = B, g[1].begin[0] = 3;
  DtModelDesc d = desc();
  d.global = g;
  d.train_step = record;
  d.forward = record_fwd;
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  int64_t begin = -1, count = -1;
  assert_int_equal(dtrt_model_input_rows(m, "x", &begin, &count), DT_OK);
  assert_true(begin == 1 && count == 2);
  assert_int_equal(dtrt_model_input_rows(m, "y", &begin, NULL), DT_OK);
  assert_true(begin == 3);
  assert_int_equal(dtrt_model_input_rows(m, "w", &begin, &count), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m), "linreg input_rows: the model has no input 'w'");
  float x[B * F], y[B], loss, pred[B];
  const void *in[2] = {x, y};
  int64_t whole[2] = {B * F, B}, local[2] = {2 * F, 1};
  assert_int_equal(dtrt_model_train_step(m, in, whole, &loss), DT_OK);
  assert_ptr_equal(seen_in[0], x + F);
  assert_ptr_equal(seen_in[1], y + 3);
  assert_int_equal(dtrt_model_train_step_local(m, in, local, &loss), DT_OK);
  assert_ptr_equal(seen_in[0], x);
  assert_ptr_equal(seen_in[1], y);
  assert_int_equal(dtrt_model_train_step_local(m, in, whole, &loss), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m),
                      "linreg train_step_local: input 'x' has 12 elements, the model expects 6 "
                      "(this rank's rows of f32[4,3])");
  assert_int_equal(dtrt_model_train_step(m, in, local, &loss), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "input 'x' has 6 elements, the model expects 12"));
  int64_t po = B;
  void *outs[1] = {pred};
  assert_int_equal(dtrt_model_forward_local(m, in, local, outs, &po), DT_OK);
  assert_ptr_equal(seen_in[0], x);
  assert_int_equal(dtrt_model_forward(m, in, whole, outs, &po), DT_OK);
  assert_ptr_equal(seen_in[0], x + F);
  assert_int_equal(dtrt_model_step(m), 2);
  dtrt_model_destroy(m);
  /* an input split on a later dimension is refused */
  g[0].dim[0] = B, g[0].dim[1] = 1, g[0].begin[0] = 0;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_ERR_ARG);
}

static void test_set_lr(void **state) {
  (void)state;
  DtModelDesc d = desc();
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  assert_true(dtrt_model_lr(m, 0.25) == 0.25);
  assert_int_equal(dtrt_model_set_lr(m, 0.125), DT_OK);
  assert_true(dtrt_model_lr(m, 0.25) == 0.125);
  assert_int_equal(dtrt_model_set_lr(m, -1), DT_ERR_ARG);
  assert_string_equal(dtrt_model_error(m),
                      "linreg set_lr: the learning rate must be finite and >= 0, not -1");
  assert_int_equal(dtrt_model_set_lr(m, INFINITY), DT_ERR_ARG);
  assert_true(dtrt_model_lr(m, 0.25) == 0.125);
  assert_int_equal(dtrt_model_set_lr(NULL, 1), DT_ERR_ARG);
  dtrt_model_destroy(m);
  d.train_step = NULL;
  assert_int_equal(dtrt_model_create(&d, 1, &m), DT_OK);
  assert_int_equal(dtrt_model_set_lr(m, 1), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_model_error(m), "inference only"));
  dtrt_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_train),         cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_bad_desc),      cmocka_unit_test(test_code_elsewhere),
      cmocka_unit_test(test_inference_only),
      cmocka_unit_test(test_out_of_memory), cmocka_unit_test(test_init_range),
      cmocka_unit_test(test_block_init),    cmocka_unit_test(test_spmd_create),
      cmocka_unit_test(test_tensor_block),  cmocka_unit_test(test_block_checkpoint),
      cmocka_unit_test(test_trace_target),  cmocka_unit_test(test_input_rows),
      cmocka_unit_test(test_set_lr),        cmocka_unit_test(test_shared_table),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
