/* test_runtime_checkpoint.c: safetensors checkpoints: bit-exact round trips,
 * corruption and mismatch caught before the destination is touched, a
 * failed save leaving the previous file intact; whole-tensor checkpoints
 * (dtrt_ckpt_*) in one process. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <zlib.h>

#include "dtrt.h"
#include "rt_test.h"

static int group_setup(void **state) {
  (void)state;
  return rt_make_dir("dtrt-ckpt");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(1);
}

/* Three tensors: w f32[3,4], b f32[4], n i32[] (a scalar), plus an empty one
 * without data. */
typedef struct Set {
  float w[12], b[4];
  int32_t n;
  DtNamed t[4];
} Set;

static void make_set(Set *s, float base) {
  for (int k = 0; k < 12; k++)
    s->w[k] = base + (float)k / 7;
  for (int k = 0; k < 4; k++)
    s->b[k] = -base * (float)k;
  s->w[5] = -0.0f;
  s->b[3] = NAN;
  s->n = (int32_t)base * 1000;
  s->t[0] = (DtNamed){"layer1.w", {s->w, DTRT_F32, 2, {3, 4}}};
  s->t[1] = (DtNamed){"layer1.b", {s->b, DTRT_F32, 1, {4}}};
  s->t[2] = (DtNamed){"count", {&s->n, DTRT_I32, 0, {0}}};
  s->t[3] = (DtNamed){"empty", {NULL, DTRT_F32, 2, {0, 5}}};
}

static long file_size(const char *p) {
  struct stat st;
  return stat(p, &st) ? -1 : (long)st.st_size;
}

static unsigned char *slurp(const char *p, long *n) {
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  *n = file_size(p);
  unsigned char *b = malloc((size_t)*n + 1);
  assert_int_equal(fread(b, 1, (size_t)*n, f), (size_t)*n);
  fclose(f);
  return b;
}

static void spit(const char *p, const void *b, long n) {
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
}

/* No temporary files are left in dir. */
static void no_temps(void) {
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp."))
      fail_msg("temporary file %s left behind", e->d_name);
  closedir(d);
}

static void test_round_trip(void **state) {
  (void)state;
  Set a, b;
  make_set(&a, 1.5f);
  make_set(&b, 0);
  memset(b.w, 0, sizeof b.w);
  assert_int_equal(dtrt_save(ctx, rt_at("rt.safetensors"), a.t, 4, "hash-1", 1234567890123), DT_OK);
  int64_t step = -1;
  assert_int_equal(dtrt_load(ctx, rt_at("rt.safetensors"), b.t, 4, "hash-1", &step), DT_OK);
  assert_memory_equal(a.w, b.w, sizeof a.w);
  assert_memory_equal(a.b, b.b, sizeof a.b);
  assert_int_equal(a.n, b.n);
  assert_true(step == 1234567890123);
  /* load order need not be save order; NULL hash and step skip them */
  DtNamed rev[4] = {b.t[3], b.t[2], b.t[1], b.t[0]};
  assert_int_equal(dtrt_load(ctx, rt_at("rt.safetensors"), rev, 4, NULL, NULL), DT_OK);
  /* the file is safetensors: header length, JSON with the usual keys, 8-byte padding */
  long n;
  unsigned char *f = slurp(rt_at("rt.safetensors"), &n);
  uint64_t hl = 0;
  for (int k = 0; k < 8; k++)
    hl |= (uint64_t)f[k] << 8 * k;
  assert_int_equal(hl % 8, 0);
  assert_int_equal((long)(8 + hl + 48 + 16 + 4), n);
  f[8 + hl - 1] = 0;
  const char *json = (const char *)f + 8;
  assert_non_null(strstr(json, "\"layer1.w\":{\"dtype\":\"F32\",\"shape\":[3,4],\"data_offsets\":[0,48]}"));
  assert_non_null(strstr(json, "\"count\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[64,68]}"));
  assert_non_null(strstr(json, "\"step\":\"1234567890123\""));
  assert_non_null(strstr(json, "\"model_hash\":\"hash-1\""));
  assert_non_null(strstr(json, "\"checksum\":\"crc32:"));
  free(f);
  /* saving again replaces the file */
  make_set(&a, 2.5f);
  assert_int_equal(dtrt_save(ctx, rt_at("rt.safetensors"), a.t, 4, "hash-1", 7), DT_OK);
  assert_int_equal(dtrt_load(ctx, rt_at("rt.safetensors"), b.t, 4, "hash-1", &step), DT_OK);
  assert_memory_equal(a.w, b.w, sizeof a.w);
  assert_true(step == 7);
  /* zero tensors is a valid checkpoint */
  assert_int_equal(dtrt_save(ctx, rt_at("none.safetensors"), NULL, 0, "h", 0), DT_OK);
  assert_int_equal(dtrt_load(ctx, rt_at("none.safetensors"), NULL, 0, "h", &step), DT_OK);
  no_temps();
}

/* Loads path into a fresh set and asserts status s, a message containing
 * want, and the set and step untouched. */
static void refuse(const char *path, DtStatus s, const char *want, const char *hash) {
  Set d;
  make_set(&d, 9);
  Set keep = d;
  int64_t step = -77;
  DtStatus got = dtrt_load(ctx, path, d.t, 4, hash, &step);
  if (got != s || !strstr(dtrt_errmsg(ctx), want))
    fail_msg("status %d, message '%s'; wanted %d and '%s'", got, dtrt_errmsg(ctx), s, want);
  assert_memory_equal(d.w, keep.w, sizeof d.w);
  assert_memory_equal(d.b, keep.b, sizeof d.b);
  assert_int_equal(d.n, keep.n);
  assert_true(step == -77);
}

static void test_corruption(void **state) {
  (void)state;
  Set a;
  make_set(&a, 1.5f);
  char good[512], bad[512];
  snprintf(good, sizeof good, "%s", rt_at("good.safetensors"));
  snprintf(bad, sizeof bad, "%s", rt_at("bad.safetensors"));
  assert_int_equal(dtrt_save(ctx, good, a.t, 4, "hash-1", 42), DT_OK);
  long n;
  unsigned char *f = slurp(good, &n), *g = calloc(1, (size_t)n + 64);
  uint64_t hl = 0;
  for (int k = 0; k < 8; k++)
    hl |= (uint64_t)f[k] << 8 * k;

  /* every single data byte flipped is a checksum error */
  for (long k = 8 + (long)hl; k < n; k++) {
    memcpy(g, f, (size_t)n);
    g[k] ^= 0x10;
    spit(bad, g, n);
    refuse(bad, DT_ERR_CHECKSUM, "corrupt", "hash-1");
  }
  /* so is a changed step or hash in the header */
  struct {
    const char *from, *to;
    DtStatus s;
    const char *why;
  } edits[] = {
      {"\"step\":\"42\"", "\"step\":\"43\"", DT_ERR_CHECKSUM, "corrupt"},
      {"\"model_hash\":\"hash-1\"", "\"model_hash\":\"hash-2\"", DT_ERR_CHECKSUM, "corrupt"},
      {"\"step\":\"42\"", "\"step\":\"4x\"", DT_ERR_FORMAT, "step '4x'"},
      {"\"checksum\":\"crc32:", "\"checksum\":\"crc64:", DT_ERR_FORMAT, "not crc32"},
      {"\"checksum\"", "\"checksun\"", DT_ERR_FORMAT, "lacks"},
      {"[0,48]", "[0,44]", DT_ERR_FORMAT, "spans 44 bytes, its shape needs 48"},
      {"[0,48]", "[4,52]", DT_ERR_FORMAT, "leaves a hole at byte 4"},
      {"[64,68]", "[64,99]", DT_ERR_FORMAT, "outside the 68 data bytes"},
      {"[48,64]", "[44,60]", DT_ERR_FORMAT, "overlaps"},
      {"[3,4]", "[4,3]", DT_ERR_CHECKSUM, "corrupt"},
      {"\"F32\"", "\"F16\"", DT_ERR_MISMATCH, "dtype F16"},
      {"\"F32\"", "\"F3\\\"", DT_ERR_FORMAT, "not a JSON object"},
      {"layer1.b", "layer1.w", DT_ERR_FORMAT, "appears twice"},
      {"{\"__metadata__\"", "[\"__metadata__\"", DT_ERR_FORMAT, "not a JSON object"},
      {"\"shape\":[3,4]", "\"shape\":[-34]", DT_ERR_FORMAT, "bad shape"},
      {"\"shape\":[3,4]", "\"shape\":[1.5]", DT_ERR_FORMAT, "bad shape"},
  };
  for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
    memcpy(g, f, (size_t)n);
    char *p = strstr((char *)g + 8, edits[e].from);
    assert_non_null(p);
    assert_int_equal(strlen(edits[e].from), strlen(edits[e].to));
    memcpy(p, edits[e].to, strlen(edits[e].to));
    spit(bad, g, n);
    refuse(bad, edits[e].s, edits[e].why, "hash-1");
  }
  /* truncation anywhere is a format error */
  for (long cut = 0; cut < n; cut += 7) {
    spit(bad, f, cut);
    refuse(bad, DT_ERR_FORMAT, bad, "hash-1");
  }
  /* a header length past the file or absurdly large */
  memcpy(g, f, (size_t)n);
  g[7] = 0x40;
  spit(bad, g, n);
  refuse(bad, DT_ERR_FORMAT, "header length", "hash-1");
  memcpy(g, f, (size_t)n);
  g[0] = (unsigned char)(g[0] + 8);
  spit(bad, g, n);
  refuse(bad, DT_ERR_FORMAT, "", "hash-1");
  /* extra bytes after the data */
  memcpy(g, f, (size_t)n);
  spit(bad, g, n + 4);
  refuse(bad, DT_ERR_FORMAT, "tensors cover 68 of the 72 data bytes", "hash-1");
  /* text after the JSON, inside the header */
  memcpy(g, f, (size_t)n);
  g[8 + hl - 1] = 'x';
  spit(bad, g, n);
  refuse(bad, DT_ERR_FORMAT, "after the JSON", "hash-1");
  refuse(rt_at("missing"), DT_ERR_IO, "cannot open", "hash-1");
  /* not regular files, a FIFO included (opening one must not block); a file
   * larger than the read limit */
  assert_int_equal(mkfifo(rt_at("load.fifo"), 0644), 0);
  alarm(10);
  refuse(rt_at("load.fifo"), DT_ERR_IO, "not a regular file", "hash-1");
  alarm(0);
  refuse("/dev/zero", DT_ERR_IO, "/dev/zero is not a regular file", "hash-1");
  dtrt_ctx_set_read_limit(ctx, n - 1);
  char want[600];
  snprintf(want, sizeof want, "%s is %ld bytes, more than the read limit of %ld", good, n, n - 1);
  refuse(good, DT_ERR_FORMAT, want, "hash-1");
  dtrt_ctx_set_read_limit(ctx, n);
  Set ok;
  make_set(&ok, 0);
  assert_int_equal(dtrt_load(ctx, good, ok.t, 4, "hash-1", NULL), DT_OK);
  dtrt_ctx_set_read_limit(ctx, 0);
  refuse(dir, DT_ERR_IO, "not a regular file", "hash-1");
  free(f);
  free(g);
}

/* A checkpoint of no tensors whose step is the text step, with a correct
 * checksum: CRC-32 of the model hash (and its NUL), then the step as 8
 * little-endian bytes. */
static void write_step(const char *path, const char *hash, const char *step) {
  int64_t v = strtoll(step, NULL, 10);
  unsigned char b[8];
  for (int k = 0; k < 8; k++)
    b[k] = (unsigned char)((uint64_t)v >> 8 * k);
  uLong crc = crc32_z(crc32_z(0, (const Bytef *)hash, strlen(hash) + 1), b, 8);
  char json[256];
  int n = snprintf(json, sizeof json,
                   "{\"__metadata__\":{\"model_hash\":\"%s\",\"step\":\"%s\","
                   "\"checksum\":\"crc32:%08lx\"}}",
                   hash, step, (unsigned long)crc);
  while (n % 8)
    json[n++] = ' ';
  unsigned char file[8 + sizeof json] = {(unsigned char)n};
  memcpy(file + 8, json, (size_t)n);
  spit(path, file, 8 + n);
}

/* A step outside 0..DTRT_MAX_STEP neither loads nor saves. */
static void test_step_range(void **state) {
  (void)state;
  const char *p = rt_at("step.safetensors");
  int64_t step = -77;
  write_step(p, "h", "5");
  assert_int_equal(dtrt_load(ctx, p, NULL, 0, "h", &step), DT_OK);
  assert_true(step == 5);
  write_step(p, "h", "9007199254740992");
  assert_int_equal(dtrt_load(ctx, p, NULL, 0, "h", &step), DT_OK);
  assert_true(step == DTRT_MAX_STEP);
  const char *bad[] = {"-1", "-9223372036854775808", "9223372036854775807", "9007199254740993"};
  for (int k = 0; k < 4; k++) {
    write_step(p, "h", bad[k]);
    step = -77;
    char want[64];
    snprintf(want, sizeof want, "step %s is outside 0..9007199254740992", bad[k]);
    refuse(p, DT_ERR_FORMAT, want, "h");
    assert_int_equal(dtrt_load(ctx, p, NULL, 0, "h", &step), DT_ERR_FORMAT);
    assert_true(step == -77);
  }
  assert_int_equal(dtrt_save(ctx, p, NULL, 0, "h", -1), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "save: step -1 is outside 0..9007199254740992"));
  assert_int_equal(dtrt_save(ctx, p, NULL, 0, "h", DTRT_MAX_STEP + 1), DT_ERR_ARG);
  assert_int_equal(dtrt_save(ctx, p, NULL, 0, "h", DTRT_MAX_STEP), DT_OK);
  no_temps();
}

static void test_mismatch(void **state) {
  (void)state;
  Set a;
  make_set(&a, 1.5f);
  const char *p = rt_at("m.safetensors");
  assert_int_equal(dtrt_save(ctx, p, a.t, 4, "hash-1", 42), DT_OK);
  refuse(p, DT_ERR_MISMATCH, "saved by model 'hash-1', this is model 'hash-2'", "hash-2");

  Set d;
  make_set(&d, 9);
  int64_t step = -77;
  d.t[0].t.dim[0] = 4;
  d.t[0].t.dim[1] = 3;
  assert_int_equal(dtrt_load(ctx, p, d.t, 4, "hash-1", &step), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "tensor 'layer1.w' is f32[3,4], expected f32[4,3]"));
  make_set(&d, 9);
  d.t[2].t.dtype = DTRT_F32;
  assert_int_equal(dtrt_load(ctx, p, d.t, 4, "hash-1", &step), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "'count' is i32[], expected f32[]"));
  make_set(&d, 9);
  d.t[1].name = "layer2.b";
  assert_int_equal(dtrt_load(ctx, p, d.t, 4, "hash-1", &step), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "no tensor 'layer2.b'"));
  make_set(&d, 9);
  assert_int_equal(dtrt_load(ctx, p, d.t, 3, "hash-1", &step), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "tensor 'empty', which is not expected"));
  assert_true(step == -77);

  /* bad requests */
  make_set(&d, 9);
  d.t[1].name = "layer1.w";
  assert_int_equal(dtrt_load(ctx, p, d.t, 4, NULL, NULL), DT_ERR_ARG);
  assert_int_equal(dtrt_save(ctx, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "'layer1.w' appears twice"));
  d.t[1].name = "__metadata__";
  assert_int_equal(dtrt_save(ctx, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  d.t[1].name = NULL;
  assert_int_equal(dtrt_save(ctx, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  make_set(&d, 9);
  d.t[0].t.dtype = 9;
  assert_int_equal(dtrt_save(ctx, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  make_set(&d, 9);
  d.t[0].t.data = NULL;
  assert_int_equal(dtrt_save(ctx, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_save(ctx, NULL, d.t, 4, NULL, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_save(ctx, rt_at("x"), NULL, 4, NULL, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_save(NULL, rt_at("x"), d.t, 4, NULL, 0), DT_ERR_ARG);
  assert_int_equal(dtrt_load(ctx, NULL, d.t, 4, NULL, NULL), DT_ERR_ARG);
  assert_int_equal(file_size(rt_at("x")), -1);
}

/* A save that fails part way leaves the earlier file whole and no temporary. */
static void test_crash_safety(void **state) {
  (void)state;
  Set a, b;
  make_set(&a, 1.5f);
  const char *p = rt_at("safe.safetensors");
  assert_int_equal(dtrt_save(ctx, p, a.t, 4, "hash-1", 1), DT_OK);
  long n;
  unsigned char *before = slurp(p, &n);

  /* a file size limit makes the write fail after the temporary file exists
   * (this works for root too, which ignores permissions) */
  static float big[1 << 16];
  Set c;
  make_set(&c, 3);
  c.t[0] = (DtNamed){"layer1.w", {big, DTRT_F32, 1, {1 << 16}}};
  struct rlimit old, lim;
  getrlimit(RLIMIT_FSIZE, &old);
  lim = old;
  lim.rlim_cur = 4096;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
  DtStatus s = dtrt_save(ctx, p, c.t, 4, "hash-1", 2);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, prev);
  assert_int_equal(s, DT_ERR_IO);
  assert_non_null(strstr(dtrt_errmsg(ctx), "cannot write"));
  long m;
  unsigned char *after = slurp(p, &m);
  assert_int_equal(n, m);
  assert_memory_equal(before, after, (size_t)n);
  no_temps();
  make_set(&b, 0);
  int64_t step;
  assert_int_equal(dtrt_load(ctx, p, b.t, 4, "hash-1", &step), DT_OK);
  assert_true(step == 1);

  /* a directory that does not exist, and one that cannot be written */
  assert_int_equal(dtrt_save(ctx, rt_at("nodir/x.safetensors"), a.t, 4, "h", 0), DT_ERR_IO);
  assert_non_null(strstr(dtrt_errmsg(ctx), "cannot create a temporary file"));
  if (geteuid() != 0) {
    const char *ro = rt_at("ro");
    assert_int_equal(mkdir(ro, 0755), 0);
    char file[600];
    snprintf(file, sizeof file, "%s/c.safetensors", ro);
    assert_int_equal(dtrt_save(ctx, file, a.t, 4, "h", 0), DT_OK);
    unsigned char *b0 = slurp(file, &n);
    chmod(ro, 0555);
    assert_int_equal(dtrt_save(ctx, file, c.t, 4, "h", 5), DT_ERR_IO);
    unsigned char *b1 = slurp(file, &m);
    assert_int_equal(n, m);
    assert_memory_equal(b0, b1, (size_t)n);
    chmod(ro, 0755);
    free(b0);
    free(b1);
  }
  /* the target is a directory: rename fails, the temporary goes */
  assert_int_equal(mkdir(rt_at("adir"), 0755), 0);
  assert_int_equal(dtrt_save(ctx, rt_at("adir"), a.t, 4, "h", 0), DT_ERR_IO);
  no_temps();
  free(before);
  free(after);
}

/* A save writes only where its path is a regular file or nothing: a FIFO, a
 * device (through a symlink) and a directory are refused, named in the
 * message, and left as they were, with no temporary beside them. */
static void test_not_regular(void **state) {
  (void)state;
  Set a;
  make_set(&a, 1.5f);
  const char *fifo = rt_at("fifo"), *link = rt_at("null"), *sub = rt_at("sub");
  assert_int_equal(mkfifo(fifo, 0644), 0);
  assert_int_equal(symlink("/dev/null", link), 0);
  assert_int_equal(mkdir(sub, 0755), 0);
  const char *paths[] = {fifo, link, sub};
  for (int k = 0; k < 3; k++) {
    assert_int_equal(dtrt_save(ctx, paths[k], a.t, 4, "h", 0), DT_ERR_IO);
    char want[600];
    snprintf(want, sizeof want, "save: %s is not a regular file", paths[k]);
    if (!strstr(dtrt_errmsg(ctx), want))
      fail_msg("message '%s', wanted '%s'", dtrt_errmsg(ctx), want);
  }
  struct stat st;
  assert_int_equal(lstat(fifo, &st), 0);
  assert_true(S_ISFIFO(st.st_mode));
  assert_int_equal(lstat(link, &st), 0);
  assert_true(S_ISLNK(st.st_mode));
  assert_int_equal(stat("/dev/null", &st), 0);
  assert_true(S_ISCHR(st.st_mode));
  assert_int_equal(lstat(sub, &st), 0);
  assert_true(S_ISDIR(st.st_mode));
  no_temps();
  /* a symlink to a regular file is written through as before */
  assert_int_equal(dtrt_save(ctx, rt_at("real"), a.t, 4, "h", 0), DT_OK);
  assert_int_equal(symlink("real", rt_at("toreal")), 0);
  assert_int_equal(dtrt_save(ctx, rt_at("toreal"), a.t, 4, "h", 3), DT_OK);
  no_temps();
}

/* dtrt_ckpt_*: whole tensors; a block read out of them; every byte after the
 * first 8 under the checksum, the header's text too; the params of a file of
 * params and state; the per-rank format told apart and converted. */
static void test_whole_tensors(void **state) {
  (void)state;
  float w[12], m[12], blk[6], w2[12], m2[12];
  int32_t n = 7, n2 = 0;
  for (int k = 0; k < 12; k++)
    w[k] = (float)k + 0.5f, m[k] = -(float)k;
  DtCkptTensor t[3] = {
      {"w", DT_G_PARAM, {w, DTRT_F32, 2, {3, 4}}, {0}, {0}},
      {"w__m", DT_G_STATE, {m, DTRT_F32, 2, {3, 4}}, {0}, {0}},
      {"n", DT_G_STATE, {&n, DTRT_I32, 0, {0}}, {0}, {0}},
  };
  char path[512];
  snprintf(path, sizeof path, "%s", rt_at("w.st"));
  assert_int_equal(dtrt_ckpt_save(ctx, path, t, 3, "tiny", NULL, 12), DT_OK);
  int64_t step = 0;
  assert_int_equal(dtrt_ckpt_verify(ctx, path, &step), DT_OK);
  assert_true(step == 12);
  no_temps();

  /* columns 2..4 of w, the rest whole */
  DtCkptTensor c[3] = {
      {"w", DT_G_PARAM, {blk, DTRT_F32, 2, {3, 2}}, {3, 4}, {0, 2}},
      {"w__m", DT_G_STATE, {m2, DTRT_F32, 2, {3, 4}}, {0}, {0}},
      {"n", DT_G_STATE, {&n2, DTRT_I32, 0, {0}}, {0}, {0}},
  };
  assert_int_equal(dtrt_ckpt_load(ctx, path, c, 3, false, &step), DT_OK);
  for (int r = 0; r < 3; r++)
    for (int j = 0; j < 2; j++)
      assert_true(blk[r * 2 + j] == w[r * 4 + 2 + j]);
  assert_memory_equal(m2, m, sizeof m);
  assert_int_equal(n2, 7);

  /* the params alone (an inference build), and not without params_only */
  DtCkptTensor p = {"w", DT_G_PARAM, {w2, DTRT_F32, 2, {3, 4}}, {0}, {0}};
  assert_int_equal(dtrt_ckpt_load(ctx, path, &p, 1, true, NULL), DT_OK);
  assert_memory_equal(w2, w, sizeof w);
  memset(w2, 0, sizeof w2);
  assert_int_equal(dtrt_ckpt_load(ctx, path, &p, 1, false, NULL), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(ctx), "has tensor 'n', which this model does not have"));
  assert_true(w2[0] == 0);

  /* one byte changed in the header's text, then in the data */
  long len;
  unsigned char *f = slurp(path, &len);
  unsigned char *model = NULL;
  for (long k = 0; k + 6 <= len && !model; k++)
    if (!memcmp(f + k, "\"tiny\"", 6))
      model = f + k;
  assert_non_null(model);
  model[4] = 'x';
  spit(rt_at("bad.st"), f, len);
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("bad.st"), NULL), DT_ERR_CHECKSUM);
  assert_int_equal(dtrt_ckpt_load(ctx, rt_at("bad.st"), c, 3, false, NULL), DT_ERR_CHECKSUM);
  model[4] = 'y';
  f[len - 1] ^= 1;
  spit(rt_at("bad.st"), f, len);
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("bad.st"), NULL), DT_ERR_CHECKSUM);
  assert_non_null(strstr(dtrt_errmsg(ctx), "is corrupt: its checksum is"));
  free(f);

  /* a file of the per-rank format (a single one: one process) converts */
  Set a, b;
  make_set(&a, 2.5f);
  make_set(&b, 0);
  assert_int_equal(dtrt_save(ctx, rt_at("old.st"), a.t, 4, "h", 3), DT_OK);
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("old.st"), NULL), DT_ERR_FORMAT);
  assert_non_null(strstr(dtrt_errmsg(ctx), "has no \"format\" in its metadata"));
  const char *files[] = {path};
  assert_int_equal(dtrt_ckpt_convert(ctx, rt_at("c.st"), files, 1), DT_ERR_ARG);
  assert_non_null(strstr(dtrt_errmsg(ctx), "is a checkpoint of format dtc-1 already"));
  files[0] = rt_at("old.st");
  assert_int_equal(dtrt_ckpt_convert(ctx, rt_at("c.st"), files, 1), DT_OK);
  DtCkptTensor o[4];
  for (int k = 0; k < 4; k++)
    o[k] = (DtCkptTensor){b.t[k].name, -1, b.t[k].t, {0}, {0}};
  assert_int_equal(dtrt_ckpt_load(ctx, rt_at("c.st"), o, 4, false, &step), DT_OK);
  assert_true(step == 3);
  assert_memory_equal(b.w, a.w, sizeof a.w);
  assert_memory_equal(b.b, a.b, sizeof a.b);
  assert_int_equal(b.n, a.n);
  no_temps();
}

/* The first X of name in the file at path made a backslash. */
static void backslash_in(const char *path, const char *name) {
  long len;
  unsigned char *f = slurp(path, &len);
  size_t n = strlen(name);
  long k = 0;
  while (k + (long)n <= len && memcmp(f + k, name, n))
    k++;
  assert_true(k + (long)n <= len);
  *(unsigned char *)memchr(f + k, 'X', n) = '\\';
  spit(path, f, len);
  free(f);
}

/* A NUL in a name (\u0000, which cJSON would end the name at) is refused by
 * both readers with the file and the byte; an escaped backslash before
 * "u0000" is not a NUL. */
static void test_nul_names(void **state) {
  (void)state;
  float x[2] = {1, 2}, y[2] = {3, 4}, z[2];
  DtNamed t[2] = {{"b1Xu0000x", {x, DTRT_F32, 1, {2}}}, {"c\\u0000", {y, DTRT_F32, 1, {2}}}};
  assert_int_equal(dtrt_save(ctx, rt_at("nul.st"), t, 2, "h", 1), DT_OK);
  DtNamed u[2] = {{"b1Xu0000x", {z, DTRT_F32, 1, {2}}}, {"c\\u0000", {z, DTRT_F32, 1, {2}}}};
  assert_int_equal(dtrt_load(ctx, rt_at("nul.st"), u, 2, "h", NULL), DT_OK);
  backslash_in(rt_at("nul.st"), "b1Xu0000x");
  DtNamed b1 = {"b1", {z, DTRT_F32, 1, {2}}};
  assert_int_equal(dtrt_load(ctx, rt_at("nul.st"), &b1, 1, "h", NULL), DT_ERR_FORMAT);
  char want[600];
  snprintf(want, sizeof want, "load: %s: the header holds a NUL (\\u0000) at byte ", rt_at("nul.st"));
  assert_non_null(strstr(dtrt_errmsg(ctx), want));

  DtCkptTensor c = {"b1Xu0000x", DT_G_PARAM, {x, DTRT_F32, 1, {2}}, {0}, {0}};
  assert_int_equal(dtrt_ckpt_save(ctx, rt_at("nulc.st"), &c, 1, "m", NULL, 1), DT_OK);
  backslash_in(rt_at("nulc.st"), "b1Xu0000x");
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("nulc.st"), NULL), DT_ERR_FORMAT);
  snprintf(want, sizeof want, "load: %s: the header holds a NUL (\\u0000) at byte ", rt_at("nulc.st"));
  assert_non_null(strstr(dtrt_errmsg(ctx), want));
}

static uLong crc_i64(uLong crc, int64_t v) {
  unsigned char b[8];
  for (int k = 0; k < 8; k++)
    b[k] = (unsigned char)((uint64_t)v >> 8 * k);
  return crc32(crc, b, 8);
}

/* A per-rank file of the earlier format holding one f32 tensor "w" of dims
 * dim[0..r), the block at begin of a tensor of dims full (NULL: whole),
 * its elements 1, 2, ..., as an earlier dtc wrote them. */
static void write_old(const char *path, const char *hash, int r, const int64_t *dim,
                      const int64_t *full, const int64_t *begin) {
  int64_t n = 1;
  for (int d = 0; d < r; d++)
    n *= dim[d];
  float *data = malloc((size_t)n * 4 + 1);
  for (int64_t k = 0; k < n; k++)
    data[k] = (float)(k + 1);
  uLong crc = crc32(crc32(0, NULL, 0), (const Bytef *)data, (uInt)(n * 4));
  crc = crc32(crc, (const Bytef *)"w", 2);
  crc = crc_i64(crc_i64(crc, DTRT_F32), r);
  for (int d = 0; d < r; d++)
    crc = crc_i64(crc, dim[d]);
  crc = crc_i64(crc_i64(crc, 0), n * 4);
  for (int d = 0; full && d < r; d++)
    crc = crc_i64(crc_i64(crc, full[d]), begin[d]);
  crc = crc_i64(crc32(crc, (const Bytef *)hash, (uInt)strlen(hash) + 1), 5);
  char shape[128] = "[", fl[128] = "[", bg[128] = "[", block[400] = "", text[1024];
  for (int d = 0; d < r; d++) {
    snprintf(shape + strlen(shape), 32, "%s%lld", d ? "," : "", (long long)dim[d]);
    if (full) {
      snprintf(fl + strlen(fl), 32, "%s%lld", d ? "," : "", (long long)full[d]);
      snprintf(bg + strlen(bg), 32, "%s%lld", d ? "," : "", (long long)begin[d]);
    }
  }
  strcat(shape, "]"), strcat(fl, "]"), strcat(bg, "]");
  if (full)
    snprintf(block, sizeof block, ",\"block:w\":\"{\\\"full\\\":%s,\\\"begin\\\":%s}\"", fl,
             bg);
  int len = snprintf(text, sizeof text,
                     "{\"__metadata__\":{\"model_hash\":\"%s\",\"step\":\"5\","
                     "\"checksum\":\"crc32:%08lx\"%s},\"w\":{\"dtype\":\"F32\",\"shape\":%s,"
                     "\"data_offsets\":[0,%lld]}}",
                     hash, (unsigned long)crc, block, shape, (long long)(n * 4));
  while (len % 8)
    text[len++] = ' ';
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  unsigned char len8[8];
  for (int k = 0; k < 8; k++)
    len8[k] = (unsigned char)((uint64_t)len >> 8 * k);
  assert_int_equal(fwrite(len8, 1, 8, f), 8);
  assert_int_equal(fwrite(text, 1, (size_t)len, f), (size_t)len);
  assert_int_equal(fwrite(data, 4, (size_t)n, f), (size_t)n);
  fclose(f);
  free(data);
}

/* An allocator that refuses any block over 64 MiB, counting the others. */
static void *capped_alloc(void *u, size_t n) {
  return n > (64u << 20) ? NULL : count_alloc(u, n);
}

/* dtrt_ckpt_convert of per-rank files naming a rank beyond the file count
 * or beyond int: refused with the file and the value. */
static void test_convert_ranks(void **state) {
  (void)state;
  int64_t dim[2] = {2, 3}, full[2] = {4, 3}, b0[2] = {0, 0}, b1[2] = {2, 0};
  write_old(rt_at("r.0"), "h plan p rank 0 of 2", 2, dim, full, b0);
  write_old(rt_at("r.1"), "h plan p rank 1 of 2", 2, dim, full, b1);
  const char *files[] = {rt_at("r.0"), rt_at("r.1")};
  assert_int_equal(dtrt_ckpt_convert(ctx, rt_at("conv.st"), files, 2), DT_OK);
  assert_int_equal(dtrt_ckpt_verify(ctx, rt_at("conv.st"), NULL), DT_OK);

  static const char *const bad[] = {"rank 4294967297 of 2", "rank 1 of 4294967298",
                                    "rank 18446744073709551617 of 2", "rank 2 of 2"};
  for (int k = 0; k < 4; k++) {
    char hash[64];
    snprintf(hash, sizeof hash, "h plan p %s", bad[k]);
    write_old(rt_at("r.x"), hash, 2, dim, full, b1);
    const char *two[] = {rt_at("r.0"), rt_at("r.x")};
    assert_int_equal(dtrt_ckpt_convert(ctx, rt_at("refused.st"), two, 2), DT_ERR_FORMAT);
    const char *msg = dtrt_errmsg(ctx);
    assert_non_null(strstr(msg, rt_at("r.x")));
    assert_non_null(strstr(msg, bad[k]));
    assert_int_equal(access(rt_at("refused.st"), F_OK), -1);
  }
  no_temps();
}

/* dtrt_ckpt_convert of small per-rank files whose blocks claim to be of a
 * tensor far larger than the files hold: refused before the whole tensor
 * is allocated (no allocation over 64 MiB is asked for). */
static void test_convert_memory(void **state) {
  (void)state;
  int64_t dim[2] = {2, 3}, b0[2] = {0, 0};
  Count c = {.limit = -1};
  DtAllocator a = {capped_alloc, count_free, &c};
  DtrtCtx *cx = dtrt_ctx_new_with(&a);
  int64_t huge[2] = {1 << 20, 1 << 14}, hb[2] = {2, 0};
  write_old(rt_at("h.0"), "h plan p rank 0 of 2", 2, dim, huge, b0);
  write_old(rt_at("h.1"), "h plan p rank 1 of 2", 2, dim, huge, hb);
  char h0[512], h1[512];
  snprintf(h0, sizeof h0, "%s", rt_at("h.0"));
  snprintf(h1, sizeof h1, "%s", rt_at("h.1"));
  const char *hf[] = {h0, h1};
  assert_int_equal(dtrt_ckpt_convert(cx, rt_at("refused.st"), hf, 2), DT_ERR_MISMATCH);
  assert_non_null(strstr(dtrt_errmsg(cx), "says 'w' is a block of [1048576,16384], which the 2 "
                                          "files cannot cover: they hold 12 of its elements"));
  assert_int_equal(access(rt_at("refused.st"), F_OK), -1);
  /* and ones saying their tensor has more elements than int64 counts */
  int64_t over[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  write_old(rt_at("h.1"), "h plan p rank 1 of 2", 2, dim, over, hb);
  write_old(rt_at("h.0"), "h plan p rank 0 of 2", 2, dim, over, b0);
  assert_int_equal(dtrt_ckpt_convert(cx, rt_at("refused.st"), hf, 2), DT_ERR_FORMAT);
  assert_non_null(strstr(dtrt_errmsg(cx), "the block of 'w' is malformed"));
  assert_non_null(strstr(dtrt_errmsg(cx), h0));


  dtrt_ctx_free(cx);
  assert_int_equal(c.allocs, c.frees);
  no_temps();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_corruption, setup, teardown),
      cmocka_unit_test_setup_teardown(test_mismatch, setup, teardown),
      cmocka_unit_test_setup_teardown(test_crash_safety, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_regular, setup, teardown),
      cmocka_unit_test_setup_teardown(test_step_range, setup, teardown),
      cmocka_unit_test_setup_teardown(test_whole_tensors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_convert_ranks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_convert_memory, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nul_names, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
