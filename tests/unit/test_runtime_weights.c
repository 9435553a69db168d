/* test_runtime_weights.c: a model's params from a plain safetensors file
 * written here by hand (dtrt_model_load_params, dtrt_weights_load): whole
 * tensors and a stacked param's slices, the optimizer state and the step
 * reset; every bad file refused with the model unchanged; dtrt_ckpt_import's
 * checkpoint of step 0 loaded by dtrt_model_load. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

enum { B = 2, I = 4, O = 3, L = 3, D = 2 };
enum { FCW = 0, FCB = 48, WQ = 64, CNT = 112, MOM = 128, STATE = 176 };

/* One step: the momentum of fc.w grows by x's sum, so it is not zero. */
static DtStatus train(DtrtCtx *ctx, unsigned char *state, unsigned char *work, void *const *in,
                      void *const *out, int64_t step) {
  (void)ctx, (void)work, (void)step;
  const float *x = in[0];
  float *m = (float *)(state + MOM), sum = 0;
  for (int k = 0; k < B * I; k++)
    sum += x[k];
  for (int k = 0; k < I * O; k++)
    m[k] += sum;
  *(float *)out[0] = sum;
  return DT_OK;
}

static DtStatus forward(DtrtCtx *ctx, unsigned char *state, unsigned char *work, void *const *in,
                        void *const *out, int64_t step) {
  (void)ctx, (void)work, (void)step, (void)state, (void)in;
  memset(out[0], 0, B * O * sizeof(float));
  return DT_OK;
}

static DtGlobalDesc globals[] = {
    {"x", DT_G_INPUT, DTRT_F32, 2, {B, I}, 0, 0, 0, 0, -1, {0}, {0}},
    {"fc.w", DT_G_PARAM, DTRT_F32, 2, {I, O}, DT_INIT_GLOROT, 0, I, O, FCW, {0}, {0}},
    {"fc.b", DT_G_PARAM, DTRT_F32, 1, {O}, DT_INIT_UNIFORM, 0.5, 0, 0, FCB, {0}, {0}},
    {"layers.wq", DT_G_PARAM, DTRT_F32, 3, {L, D, D}, DT_INIT_NORMAL, 1, 0, 0, WQ, {0}, {0}},
    {"cnt", DT_G_PARAM, DTRT_I32, 1, {2}, DT_INIT_ONES, 0, 0, 0, CNT, {0}, {0}},
    {"fc.w__m", DT_G_STATE, DTRT_F32, 2, {I, O}, DT_INIT_ZEROS, 0, 0, 0, MOM, {0}, {0}},
    {"y", DT_G_OUTPUT, DTRT_F32, 2, {B, O}, 0, 0, 0, 0, -1, {0}, {0}},
};
static const int32_t train_in[] = {0}, fwd_in[] = {0}, fwd_out[] = {6};

static DtModelDesc desc(void) {
  return (DtModelDesc){"tiny", "tiny-hash-1", 7,       globals, STATE, 64,     train,
                       1,      train_in,      forward, 1,       1,     fwd_in, fwd_out,
                       0,      NULL,          NULL,    NULL,    NULL,  NULL,   DT_DENORMALS_FLUSH, NULL};
}

/* ---- a safetensors writer of its own, independent of libdtrt's ---- */

typedef struct T {
  const char *name, *dtype;
  int rank;
  int64_t dim[4];
  const void *data;
  int64_t bytes;
} T;

/* Writes t[0..n) to path; cut > 0: only the first cut bytes of the file. */
static void write_st(const char *path, const T *t, int n, int64_t cut) {
  char json[4096];
  size_t at = (size_t)snprintf(json, sizeof json, "{\"__metadata__\":{\"by\":\"hand\"}");
  int64_t off = 0;
  for (int k = 0; k < n; k++) {
    at += (size_t)snprintf(json + at, sizeof json - at, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[",
                           t[k].name, t[k].dtype);
    for (int d = 0; d < t[k].rank; d++)
      at += (size_t)snprintf(json + at, sizeof json - at, "%s%lld", d ? "," : "",
                             (long long)t[k].dim[d]);
    at += (size_t)snprintf(json + at, sizeof json - at, "],\"data_offsets\":[%lld,%lld]}",
                           (long long)off, (long long)(off + t[k].bytes));
    off += t[k].bytes;
  }
  at += (size_t)snprintf(json + at, sizeof json - at, "}");
  while (at % 8)
    json[at++] = ' ';
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char len8[8];
  for (int k = 0; k < 8; k++)
    len8[k] = (unsigned char)((uint64_t)at >> 8 * k);
  int64_t total = 8 + (int64_t)at + off, written = 0;
  for (int k = 0; k < 8 && (!cut || written < cut); k++, written++)
    fputc(len8[k], f);
  for (size_t k = 0; k < at && (!cut || written < cut); k++, written++)
    fputc(json[k], f);
  for (int k = 0; k < n; k++)
    for (int64_t b = 0; b < t[k].bytes && (!cut || written < cut); b++, written++)
      fputc(((const unsigned char *)t[k].data)[b], f);
  (void)total;
  assert_int_equal(fclose(f), 0);
}

/* The weights a test loads: values no initialiser gives. */
static float w[I * O], bias[O], wq[L * D * D];
static int32_t cnt[2] = {7, -3};

static void fill(void) {
  for (int k = 0; k < I * O; k++)
    w[k] = 0.25f * (float)k - 1.0f;
  for (int k = 0; k < O; k++)
    bias[k] = 10.0f + (float)k;
  for (int k = 0; k < L * D * D; k++)
    wq[k] = -0.5f * (float)k;
}

static T t_w(void) { return (T){"fc.w", "F32", 2, {I, O}, w, sizeof w}; }
static T t_b(void) { return (T){"fc.b", "F32", 1, {O}, bias, sizeof bias}; }
static T t_wq(void) { return (T){"layers.wq", "F32", 3, {L, D, D}, wq, sizeof wq}; }
static T t_cnt(void) { return (T){"cnt", "I32", 1, {2}, cnt, sizeof cnt}; }
static T t_slice(int i) {
  static char names[L][32];
  snprintf(names[i], sizeof names[i], "layers.%d.wq", i);
  return (T){names[i], "F32", 2, {D, D}, wq + i * D * D, D * D * sizeof(float)};
}

static int group_setup(void **state) {
  (void)state;
  fill();
  return rt_make_dir("dtrt-weights");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

/* A model after one training step: momentum not zero, step 1. */
static DtModel *trained(void) {
  static DtModelDesc d; /* kept by the model */
  d = desc();
  DtModel *m;
  assert_int_equal(dtrt_model_create(&d, 9, &m), DT_OK);
  float x[B * I] = {1, 2, 3, 4, 5, 6, 7, 8}, loss;
  const void *in[1] = {x};
  int64_t elems[1] = {B * I};
  assert_int_equal(dtrt_model_train_step(m, in, elems, &loss), DT_OK);
  assert_int_equal(dtrt_model_step(m), 1);
  return m;
}

static void assert_loaded(DtModel *m) {
  assert_memory_equal(dtrt_model_tensor(m, "fc.w"), w, sizeof w);
  assert_memory_equal(dtrt_model_tensor(m, "fc.b"), bias, sizeof bias);
  assert_memory_equal(dtrt_model_tensor(m, "layers.wq"), wq, sizeof wq);
  assert_memory_equal(dtrt_model_tensor(m, "cnt"), cnt, sizeof cnt);
  const float *mom = dtrt_model_tensor(m, "fc.w__m");
  for (int k = 0; k < I * O; k++)
    assert_true(mom[k] == 0.0f);
  assert_int_equal(dtrt_model_step(m), 0);
}

static void test_whole(void **state) {
  (void)state;
  T t[] = {t_w(), t_b(), t_wq(), t_cnt()};
  write_st(rt_at("whole.st"), t, 4, 0);
  DtModel *m = trained();
  assert_int_equal(dtrt_model_load_params(m, rt_at("whole.st")), DT_OK);
  assert_loaded(m);
  dtrt_model_destroy(m);
}

/* layers.wq [L, D, D] from layers.0.wq .. layers.2.wq, in any file order. */
static void test_slices(void **state) {
  (void)state;
  T t[] = {t_slice(2), t_w(), t_slice(0), t_b(), t_cnt(), t_slice(1)};
  write_st(rt_at("slices.st"), t, 6, 0);
  DtModel *m = trained();
  assert_int_equal(dtrt_model_load_params(m, rt_at("slices.st")), DT_OK);
  assert_loaded(m);
  dtrt_model_destroy(m);
}

/* The file is refused with status s and a message holding each of want[];
 * the model is as it was. */
static void refused(const char *path, DtStatus s, const char *const *want, int nwant) {
  DtModel *m = trained();
  unsigned char before[STATE];
  memcpy(before, dtrt_model_tensor(m, "fc.w"), STATE); /* the whole state block */
  assert_int_equal(dtrt_model_load_params(m, path), s);
  const char *msg = dtrt_model_error(m);
  for (int k = 0; k < nwant; k++)
    if (!strstr(msg, want[k]))
      fail_msg("'%s' not in: %s", want[k], msg);
  assert_memory_equal(dtrt_model_tensor(m, "fc.w"), before, STATE);
  assert_int_equal(dtrt_model_step(m), 1);
  dtrt_model_destroy(m);
}

static void test_missing_extra_shape(void **state) {
  (void)state;
  float big[O * I];
  memset(big, 0, sizeof big);
  T extra = {"fc.extra", "F32", 1, {O}, bias, sizeof bias};
  T t[] = {{"fc.w", "F32", 2, {O, I}, big, sizeof big}, t_wq(), t_cnt(), extra};
  write_st(rt_at("bad.st"), t, 4, 0);
  const char *want[] = {"bad.st does not fit the model", "1 missing: fc.b f32[3]",
                        "1 extra: fc.extra f32[3]",
                        "1 of another type: fc.w: f32[3,4], the model's f32[4,3]"};
  refused(rt_at("bad.st"), DT_ERR_MISMATCH, want, 4);
}

static void test_dtype(void **state) {
  (void)state;
  T t[] = {{"fc.w", "I32", 2, {I, O}, w, sizeof w}, t_b(), t_wq(), t_cnt()};
  write_st(rt_at("i32.st"), t, 4, 0);
  const char *want[] = {"1 of another type: fc.w: i32[4,3], the model's f32[4,3]"};
  refused(rt_at("i32.st"), DT_ERR_MISMATCH, want, 1);
  /* f16 is refused, not converted */
  uint16_t half[I * O] = {0};
  T h[] = {{"fc.w", "F16", 2, {I, O}, half, sizeof half}, t_b(), t_wq(), t_cnt()};
  write_st(rt_at("f16.st"), h, 4, 0);
  const char *want16[] = {"tensor 'fc.w' has dtype F16"};
  refused(rt_at("f16.st"), DT_ERR_MISMATCH, want16, 1);
}

/* Two slices of three: all or nothing; a slice of another shape named. */
static void test_slices_partial(void **state) {
  (void)state;
  T t[] = {t_w(), t_b(), t_cnt(), t_slice(0), t_slice(2)};
  write_st(rt_at("part.st"), t, 5, 0);
  const char *want[] = {"1 missing: layers.wq (1 of its 3 slices, as layers.1.wq)"};
  refused(rt_at("part.st"), DT_ERR_MISMATCH, want, 1);
  T odd = t_slice(1);
  odd.rank = 1, odd.dim[0] = D * D;
  T u[] = {t_w(), t_b(), t_cnt(), t_slice(0), odd, t_slice(2)};
  write_st(rt_at("odd.st"), u, 6, 0);
  const char *want2[] = {"of another type: layers.1.wq: f32[4], a row of layers.wq"};
  refused(rt_at("odd.st"), DT_ERR_MISMATCH, want2, 1);
  /* a slice past the stack's depth is extra */
  T x3 = t_slice(0);
  x3.name = "layers.3.wq";
  T v[] = {t_w(), t_b(), t_cnt(), t_slice(0), t_slice(1), t_slice(2), x3};
  write_st(rt_at("deep.st"), v, 7, 0);
  const char *want3[] = {"1 extra: layers.3.wq f32[2,2]"};
  refused(rt_at("deep.st"), DT_ERR_MISMATCH, want3, 1);
}

/* More differences than are shown: counted, the first few named. */
static void test_many(void **state) {
  (void)state;
  T t[8];
  char names[8][16];
  for (int k = 0; k < 8; k++) {
    snprintf(names[k], sizeof names[k], "junk%d", k);
    t[k] = (T){names[k], "F32", 1, {O}, bias, sizeof bias};
  }
  write_st(rt_at("junk.st"), t, 8, 0);
  const char *want[] = {"4 missing: ", "8 extra: junk0 f32[3], junk1", ", ..."};
  refused(rt_at("junk.st"), DT_ERR_MISMATCH, want, 3);
}

static void test_corrupt(void **state) {
  (void)state;
  T t[] = {t_w(), t_b(), t_wq(), t_cnt()};
  write_st(rt_at("cut.st"), t, 4, 300); /* the data cut short */
  const char *want[] = {"tensor 'fc.w' has data_offsets outside the"};
  refused(rt_at("cut.st"), DT_ERR_FORMAT, want, 1);
  write_st(rt_at("long.st"), t, 4, 0); /* a byte too many */
  FILE *g = fopen(rt_at("long.st"), "ab");
  assert_non_null(g);
  fputc(0, g);
  fclose(g);
  const char *want1[] = {"(truncated or extended?)"};
  refused(rt_at("long.st"), DT_ERR_FORMAT, want1, 1);
  write_st(rt_at("cut2.st"), t, 4, 40); /* the header cut short */
  const char *want2[] = {"does not fit a 40-byte file"};
  refused(rt_at("cut2.st"), DT_ERR_FORMAT, want2, 1);
  FILE *f = fopen(rt_at("garbage.st"), "wb");
  assert_non_null(f);
  static const char junk[] = "\x10\0\0\0\0\0\0\0{not json at all";
  fwrite(junk, 1, sizeof junk - 1, f);
  fclose(f);
  const char *want3[] = {"not a JSON object"};
  refused(rt_at("garbage.st"), DT_ERR_FORMAT, want3, 1);
  assert_int_equal(mkdir(rt_at("adir.st"), 0755), 0);
  const char *want4[] = {"adir.st is not a regular file"};
  refused(rt_at("adir.st"), DT_ERR_IO, want4, 1);
  const char *want5[] = {"cannot open"};
  refused(rt_at("none.st"), DT_ERR_IO, want5, 1);
}

/* dtrt_ckpt_import: a template saved after creation, the weights as slices;
 * the output loads into a fresh model as its params, state zero, step 0. */
static void test_import(void **state) {
  (void)state;
  DtModel *m = trained();
  assert_int_equal(dtrt_model_save(m, rt_at("tpl.st")), DT_OK);
  T t[] = {t_w(), t_b(), t_cnt(), t_slice(0), t_slice(1), t_slice(2)};
  write_st(rt_at("imp.w.st"), t, 6, 0);
  assert_int_equal(dtrt_ckpt_import(ctx, rt_at("imp.st"), rt_at("tpl.st"), rt_at("imp.w.st")),
                   DT_OK);
  int64_t step = -1;
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("imp.st"), &step), DT_OK);
  assert_int_equal(step, 0);
  assert_int_equal(dtrt_model_load(m, rt_at("imp.st")), DT_OK);
  assert_loaded(m);
  /* a weights file that does not fit: nothing written */
  T bad[] = {t_w(), t_cnt(), t_wq()};
  write_st(rt_at("imp.bad.st"), bad, 3, 0);
  assert_int_equal(dtrt_ckpt_import(ctx, rt_at("imp2.st"), rt_at("tpl.st"), rt_at("imp.bad.st")),
                   DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "1 missing: fc.b"));
  struct stat st;
  assert_int_equal(stat(rt_at("imp2.st"), &st), -1);
  /* a template that is not a checkpoint */
  assert_int_equal(dtrt_ckpt_import(ctx, rt_at("imp3.st"), rt_at("imp.w.st"), rt_at("imp.w.st")),
                   DT_ERR_FORMAT);
  assert_int_equal(stat(rt_at("imp3.st"), &st), -1);
  dtrt_model_destroy(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_whole, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slices, setup, teardown),
      cmocka_unit_test_setup_teardown(test_missing_extra_shape, setup, teardown),
      cmocka_unit_test_setup_teardown(test_dtype, setup, teardown),
      cmocka_unit_test_setup_teardown(test_slices_partial, setup, teardown),
      cmocka_unit_test_setup_teardown(test_many, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corrupt, setup, teardown),
      cmocka_unit_test_setup_teardown(test_import, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
