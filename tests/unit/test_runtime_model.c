/* test_runtime_model.c: the model API over a hand-written DtModelDesc whose
 * steps are C functions here: linear regression trained with momentum SGD. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtrt.h"

typedef struct Count {
  long allocs, frees, limit;
} Count;

static void *count_alloc(void *u, size_t n) {
  Count *c = u;
  void *p;
  if (c->limit >= 0 && c->allocs >= c->limit)
    return NULL;
  if (posix_memalign(&p, 64, n))
    return NULL;
  c->allocs++;
  return p;
}

static void count_free(void *u, void *p) {
  ((Count *)u)->frees++;
  free(p);
}

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

static DtGlobalDesc globals[] = {
    {"x", DT_G_INPUT, DTRT_F32, 2, {B, F}, 0, 0, 0, 0, -1},
    {"y", DT_G_INPUT, DTRT_F32, 1, {B}, 0, 0, 0, 0, -1},
    {"w", DT_G_PARAM, DTRT_F32, 1, {F}, DT_INIT_GLOROT, 0, F, 1, W},
    {"b", DT_G_PARAM, DTRT_F32, 1, {1}, DT_INIT_ZEROS, 0, 0, 0, BIAS},
    {"w.vel", DT_G_STATE, DTRT_F32, 1, {F}, DT_INIT_ZEROS, 0, 0, 0, VEL},
    {"seen", DT_G_STATE, DTRT_I32, 0, {0}, DT_INIT_ONES, 0, 0, 0, SEEN},
    {"pred", DT_G_OUTPUT, DTRT_F32, 1, {B}, 0, 0, 0, 0, -1},
};
static const int32_t train_in[] = {0, 1}, fwd_in[] = {0}, fwd_out[] = {6};

static DtModelDesc desc(void) {
  return (DtModelDesc){"linreg", "linreg-hash-1", 7, globals, 64, 16, train, 2, train_in,
                       forward, 1, 1, fwd_in, fwd_out, 0, NULL, NULL};
}

static char dir[256];

static int group_setup(void **state) {
  (void)state;
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/dtrt-model-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  return mkdtemp(dir) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd);
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
  Count c = {0, 0, -1};
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
  DtModelDesc d2 = desc();
  d2.hash = "linreg-hash-2";
  DtModel *m2;
  assert_int_equal(dtrt_model_create(&d2, 1, &m2), DT_OK);
  assert_int_equal(dtrt_model_save(m2, other), DT_OK);
  assert_int_equal(dtrt_model_load(m, other), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_model_error(m), "linreg-hash-2"));
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
  Count c = {0, 0, -1};
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
    Count c = {0, 0, limit};
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_train),         cmocka_unit_test(test_checkpoint),
      cmocka_unit_test(test_bad_desc),      cmocka_unit_test(test_inference_only),
      cmocka_unit_test(test_out_of_memory),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
