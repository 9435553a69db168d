/* test_runtime_data.c: the IDX, .npy and CSV readers on files the test writes:
 * valid ones, gzip-compressed ones, and truncated, malformed or lying ones. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

static char path[512];

static int group_setup(void **state) {
  (void)state;
  return rt_make_dir("dtrt-data");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

/* Writes n bytes to dir/name (gzip-compressed when gz) and sets path. */
static const char *put(const char *name, const void *p, size_t n, int gz) {
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (gz) {
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, p, (unsigned)n), (int)n);
    assert_int_equal(gzclose(g), Z_OK);
  } else {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
  }
  return path;
}

static const char *puts_(const char *name, const char *text) {
  return put(name, text, strlen(text), 0);
}

/* Asserts reader fails with status s, a message naming the file and
 * containing want, and an empty result. */
static void refuse(DtStatus (*reader)(DtrtCtx *, const char *, DtData *), const char *file,
                   DtStatus s, const char *want) {
  DtData d;
  memset(&d, 0xab, sizeof d);
  DtStatus got = reader(ctx, file, &d);
  if (got != s || !strstr(dtrt_errmsg(ctx), want) || !strstr(dtrt_errmsg(ctx), file))
    fail_msg("status %d, message '%s'; wanted %d and '%s'", got, dtrt_errmsg(ctx), s, want);
  assert_null(d.t.data);
  dtrt_data_free(ctx, &d);
}

/* ---- IDX ---- */

static size_t idx_header(unsigned char *p, int type, int rank, const uint32_t *dim) {
  p[0] = p[1] = 0;
  p[2] = (unsigned char)type;
  p[3] = (unsigned char)rank;
  for (int k = 0; k < rank; k++)
    for (int b = 0; b < 4; b++)
      p[4 + 4 * k + b] = (unsigned char)(dim[k] >> (24 - 8 * b));
  return 4 + 4 * (size_t)rank;
}

static void test_idx(void **state) {
  (void)state;
  unsigned char buf[256] = {0};
  uint32_t dim[3] = {2, 3, 4};
  size_t h = idx_header(buf, 0x08, 3, dim);
  for (int k = 0; k < 24; k++)
    buf[h + k] = (unsigned char)(k * 11);
  for (int gz = 0; gz < 2; gz++) {
    DtData d;
    assert_int_equal(dtrt_read_idx(ctx, put(gz ? "img.gz" : "img", buf, h + 24, gz), &d), DT_OK);
    assert_int_equal(d.t.dtype, DTRT_F32);
    assert_int_equal(d.t.rank, 3);
    assert_true(d.t.dim[0] == 2 && d.t.dim[1] == 3 && d.t.dim[2] == 4);
    for (int k = 0; k < 24; k++)
      assert_true(((float *)d.t.data)[k] == (float)(k * 11) / 255.0f);
    dtrt_data_free(ctx, &d);
    assert_null(d.t.data);
  }
  /* labels: rank 1 u8 -> i32 */
  uint32_t n5 = 5;
  h = idx_header(buf, 0x08, 1, &n5);
  memcpy(buf + h, "\x07\x00\x09\x01\x02", 5);
  DtData d;
  assert_int_equal(dtrt_read_idx(ctx, put("lab.gz", buf, h + 5, 1), &d), DT_OK);
  assert_int_equal(d.t.dtype, DTRT_I32);
  int32_t want[5] = {7, 0, 9, 1, 2};
  assert_memory_equal(d.t.data, want, sizeof want);
  dtrt_data_free(ctx, &d);
  /* big-endian i32 and f32 */
  uint32_t n2 = 2;
  h = idx_header(buf, 0x0C, 1, &n2);
  memcpy(buf + h, "\xff\xff\xff\xfe\x00\x01\x00\x00", 8);
  assert_int_equal(dtrt_read_idx(ctx, put("i32", buf, h + 8, 0), &d), DT_OK);
  assert_true(((int32_t *)d.t.data)[0] == -2 && ((int32_t *)d.t.data)[1] == 65536);
  dtrt_data_free(ctx, &d);
  h = idx_header(buf, 0x0D, 1, &n2);
  memcpy(buf + h, "\x3f\x80\x00\x00\xc0\x20\x00\x00", 8);
  assert_int_equal(dtrt_read_idx(ctx, put("f32", buf, h + 8, 0), &d), DT_OK);
  assert_true(((float *)d.t.data)[0] == 1.0f && ((float *)d.t.data)[1] == -2.5f);
  dtrt_data_free(ctx, &d);

  h = idx_header(buf, 0x08, 3, dim);
  refuse(dtrt_read_idx, put("short", buf, h + 23, 0), DT_ERR_FORMAT, "promises more data");
  refuse(dtrt_read_idx, put("short.gz", buf, h + 23, 1), DT_ERR_FORMAT, "promises more data");
  refuse(dtrt_read_idx, put("long", buf, h + 25, 0), DT_ERR_FORMAT, "1 bytes after the data");
  refuse(dtrt_read_idx, put("hdr", buf, h - 2, 0), DT_ERR_FORMAT, "truncated IDX header");
  refuse(dtrt_read_idx, put("empty", buf, 0, 0), DT_ERR_FORMAT, "bad magic");
  buf[1] = 1;
  refuse(dtrt_read_idx, put("magic", buf, h + 24, 0), DT_ERR_FORMAT, "bad magic");
  buf[1] = 0;
  buf[2] = 0x07;
  refuse(dtrt_read_idx, put("type", buf, h + 24, 0), DT_ERR_FORMAT, "element type 0x07");
  buf[2] = 0x08;
  buf[3] = 7;
  refuse(dtrt_read_idx, put("rank", buf, h + 24, 0), DT_ERR_FORMAT, "rank 7");
  /* f8 data: a finite value beyond f32's range is an error, not inf; inf stays */
  uint32_t n3 = 3;
  double f8[3] = {-2.5, INFINITY, 1e39};
  h = idx_header(buf, 0x0E, 1, &n3);
  for (int k = 0; k < 3; k++) {
    uint64_t u;
    memcpy(&u, &f8[k], 8);
    for (int b = 0; b < 8; b++)
      buf[h + 8 * (size_t)k + (size_t)b] = (unsigned char)(u >> (56 - 8 * b));
  }
  refuse(dtrt_read_idx, put("f8big", buf, h + 24, 0), DT_ERR_FORMAT,
         "value 1e+39 at index 2 does not fit in f32");
  buf[h + 16] = 0x3F; /* 1e39's exponent made small: finite in f32 */
  DtData d8;
  assert_int_equal(dtrt_read_idx(ctx, put("f8ok", buf, h + 24, 0), &d8), DT_OK);
  float *v8 = d8.t.data;
  assert_true(d8.t.dtype == DTRT_F32 && v8[0] == -2.5f && isinf(v8[1]) && isfinite(v8[2]));
  dtrt_data_free(ctx, &d8);
  /* a header claiming 2^128 bytes is refused before anything is allocated */
  uint32_t huge[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  h = idx_header(buf, 0x0E, 4, huge);
  refuse(dtrt_read_idx, put("huge", buf, h + 16, 0), DT_ERR_FORMAT, "promises more data");
  /* a gzip stream cut short */
  unsigned char z[4096];
  uint32_t big[2] = {40, 50};
  h = idx_header(buf, 0x08, 2, big);
  unsigned char *img = calloc(1, h + 2000);
  memcpy(img, buf, h);
  for (int k = 0; k < 2000; k++)
    img[h + (size_t)k] = (unsigned char)(k * k % 251);
  put("full.gz", img, h + 2000, 1);
  FILE *f = fopen(path, "rb");
  size_t zn = fread(z, 1, sizeof z, f);
  fclose(f);
  refuse(dtrt_read_idx, put("cut.gz", z, zn / 2, 0), DT_ERR_FORMAT, "truncated gzip");
  z[zn / 2] ^= 0xff;
  z[zn / 2 + 1] ^= 0xff;
  refuse(dtrt_read_idx, put("bad.gz", z, zn, 0), DT_ERR_FORMAT, "gzip");
  free(img);

  snprintf(path, sizeof path, "%s/none", dir);
  refuse(dtrt_read_idx, path, DT_ERR_IO, "cannot open");
  refuse(dtrt_read_idx, dir, DT_ERR_IO, "not a regular file");
  assert_int_equal(dtrt_read_idx(ctx, NULL, &d), DT_ERR_ARG);
  assert_int_equal(dtrt_read_idx(ctx, path, NULL), DT_ERR_ARG);
  assert_int_equal(dtrt_read_idx(NULL, path, &d), DT_ERR_ARG);
}

/* Bytes after a gzip stream are refused; gzip members back to back are one
 * file. Readers refuse what is not a regular file and what is larger than the
 * read limit, stored or decompressed, before reading it whole. */
static void test_files(void **state) {
  (void)state;
  unsigned char buf[64], z[8192];
  uint32_t dim[1] = {3000};
  size_t h = idx_header(buf, 0x08, 1, dim);
  unsigned char *lab = calloc(1, h + 3000);
  memcpy(lab, buf, h);
  for (int k = 0; k < 3000; k++)
    lab[h + (size_t)k] = (unsigned char)(k % 10);
  put("lab.gz", lab, h + 3000, 1);
  FILE *f = fopen(path, "rb");
  size_t zn = fread(z, 1, sizeof z - 8, f);
  fclose(f);
  DtData d;
  assert_int_equal(dtrt_read_idx(ctx, path, &d), DT_OK);
  assert_true(d.t.rank == 1 && d.t.dim[0] == 3000 && ((int32_t *)d.t.data)[2999] == 9);
  dtrt_data_free(ctx, &d);
  memcpy(z + zn, "junk", 4);
  refuse(dtrt_read_idx, put("tail.gz", z, zn + 4, 0), DT_ERR_FORMAT,
         "4 bytes after the gzip data");
  memset(z + zn, 0, 8);
  refuse(dtrt_read_idx, put("zeros.gz", z, zn + 8, 0), DT_ERR_FORMAT,
         "8 bytes after the gzip data");
  /* the header in one member, the data in a second */
  put("m1.gz", lab, h, 1);
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "%s/m1.gz", dir);
  f = fopen(cmd, "rb");
  size_t m1 = fread(z, 1, sizeof z, f);
  fclose(f);
  put("m2.gz", lab + h, 3000, 1);
  f = fopen(path, "rb");
  size_t m2 = fread(z + m1, 1, sizeof z - m1, f);
  fclose(f);
  assert_int_equal(dtrt_read_idx(ctx, put("two.gz", z, m1 + m2, 0), &d), DT_OK);
  assert_true(d.t.dim[0] == 3000 && ((int32_t *)d.t.data)[2999] == 9);
  dtrt_data_free(ctx, &d);
  /* a large first member and a last one of 10 bytes, whose trailer's size
   * is all the reader knows at first: the buffer grows past it */
  enum { BIG = 200000 };
  dim[0] = BIG;
  h = idx_header(buf, 0x08, 1, dim);
  unsigned char *big = malloc(h + BIG), *zz = malloc(2 * BIG);
  assert_true(big && zz);
  memcpy(big, buf, h);
  for (int k = 0; k < BIG; k++)
    big[h + (size_t)k] = (unsigned char)(k * 7 % 10);
  put("b1.gz", big, h + BIG - 10, 1);
  f = fopen(path, "rb");
  size_t b1 = fread(zz, 1, 2 * BIG, f);
  fclose(f);
  put("b2.gz", big + h + BIG - 10, 10, 1);
  f = fopen(path, "rb");
  size_t b2 = fread(zz + b1, 1, 2 * BIG - b1, f);
  fclose(f);
  assert_int_equal(dtrt_read_idx(ctx, put("big2.gz", zz, b1 + b2, 0), &d), DT_OK);
  assert_true(d.t.dim[0] == BIG);
  for (int k = 0; k < BIG; k++)
    if (((int32_t *)d.t.data)[k] != k * 7 % 10)
      fail_msg("label %d is %d", k, ((int32_t *)d.t.data)[k]);
  dtrt_data_free(ctx, &d);
  free(big);
  free(zz);

  /* not regular files: a device, a FIFO (which must not block), a directory */
  snprintf(path, sizeof path, "%s/fifo", dir);
  assert_int_equal(mkfifo(path, 0644), 0);
  const char *odd[] = {"/dev/zero", path, dir};
  DtStatus (*readers[])(DtrtCtx *, const char *, DtData *) = {dtrt_read_idx, dtrt_read_npy,
                                                              dtrt_read_csv};
  for (int r = 0; r < 3; r++)
    for (int k = 0; k < 3; k++)
      refuse(readers[r], odd[k], DT_ERR_IO, "not a regular file");

  /* the read limit, on the file and on what it decompresses to */
  dtrt_ctx_set_read_limit(ctx, 2000);
  refuse(dtrt_read_idx, put("lab", lab, h + 3000, 0), DT_ERR_FORMAT,
         "3008 bytes, more than the read limit of 2000");
  refuse(dtrt_read_idx, put("lab.gz", lab, h + 3000, 1), DT_ERR_FORMAT,
         "decompresses to more than the read limit of 2000 bytes");
  dtrt_ctx_set_read_limit(ctx, 3008);
  assert_int_equal(dtrt_read_idx(ctx, path, &d), DT_OK);
  dtrt_data_free(ctx, &d);
  dtrt_ctx_set_read_limit(ctx, 0);
  /* a sparse file larger than the default limit is refused unread */
  snprintf(path, sizeof path, "%s/sparse.npy", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), DTRT_READ_LIMIT + 1), 0);
  fclose(f);
  refuse(dtrt_read_npy, path, DT_ERR_FORMAT, "more than the read limit");
  unlink(path);
  free(lab);
}

/* ---- npy ---- */

/* A .npy file of the given version with header dict text and n data bytes. */
static size_t npy(unsigned char *p, int major, const char *dict, const void *data, size_t n) {
  size_t at = major == 1 ? 10 : 12, hl = strlen(dict);
  memcpy(p, "\x93NUMPY", 6);
  p[6] = (unsigned char)major;
  p[7] = 0;
  for (size_t b = 0; b < at - 8; b++)
    p[8 + b] = (unsigned char)(hl >> 8 * b);
  memcpy(p + at, dict, hl);
  memcpy(p + at + hl, data, n);
  return at + hl + n;
}

static void test_npy(void **state) {
  (void)state;
  unsigned char buf[1024];
  float f[6] = {1.5f, -2, 3, 4, 5, 6.25f};
  DtData d;
  const char *d23 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }          \n";
  assert_int_equal(dtrt_read_npy(ctx, put("a.npy", buf, npy(buf, 1, d23, f, 24), 0), &d), DT_OK);
  assert_true(d.t.dtype == DTRT_F32 && d.t.rank == 2 && d.t.dim[0] == 2 && d.t.dim[1] == 3);
  assert_memory_equal(d.t.data, f, 24);
  dtrt_data_free(ctx, &d);
  assert_int_equal(dtrt_read_npy(ctx, put("a.npy.gz", buf, npy(buf, 1, d23, f, 24), 1), &d), DT_OK);
  assert_memory_equal(d.t.data, f, 24);
  dtrt_data_free(ctx, &d);

  int32_t iv[4] = {-1, 0, 7, 1 << 30};
  const char *d4 = "{\"shape\": (4,), \"fortran_order\": False, \"descr\": \"<i4\"}\n";
  assert_int_equal(dtrt_read_npy(ctx, put("b.npy", buf, npy(buf, 2, d4, iv, 16), 0), &d), DT_OK);
  assert_true(d.t.dtype == DTRT_I32 && d.t.rank == 1 && d.t.dim[0] == 4);
  assert_memory_equal(d.t.data, iv, 16);
  dtrt_data_free(ctx, &d);

  double dv = 0.1;
  const char *d0 = "{'descr': '<f8', 'fortran_order': False, 'shape': ()}\n";
  assert_int_equal(dtrt_read_npy(ctx, put("c.npy", buf, npy(buf, 3, d0, &dv, 8), 0), &d), DT_OK);
  assert_true(d.t.dtype == DTRT_F32 && d.t.rank == 0 && *(float *)d.t.data == 0.1f);
  dtrt_data_free(ctx, &d);

  int64_t lv[3] = {5, -6, 2147483647};
  const char *d3 = "{'descr': '<i8', 'fortran_order': False, 'shape': (3,)}\n";
  assert_int_equal(dtrt_read_npy(ctx, put("d.npy", buf, npy(buf, 1, d3, lv, 24), 0), &d), DT_OK);
  assert_true(((int32_t *)d.t.data)[1] == -6 && ((int32_t *)d.t.data)[2] == 2147483647);
  dtrt_data_free(ctx, &d);
  lv[2] = 2147483648;
  refuse(dtrt_read_npy, put("e.npy", buf, npy(buf, 1, d3, lv, 24), 0), DT_ERR_FORMAT,
         "value 2147483648 at index 2 does not fit");

  /* a finite f8 beyond f32's range is an error, not inf; inf and nan stay, and
   * a value too small for f32 becomes 0 or a subnormal, as in a CSV file */
  double big[4] = {1, HUGE_VAL, NAN, -1e-50};
  const char *d4f = "{'descr': '<f8', 'fortran_order': False, 'shape': (4,)}\n";
  assert_int_equal(dtrt_read_npy(ctx, put("g.npy", buf, npy(buf, 1, d4f, big, 32), 0), &d), DT_OK);
  float *g = d.t.data;
  assert_true(g[0] == 1 && isinf(g[1]) && isnan(g[2]) && g[3] == 0);
  dtrt_data_free(ctx, &d);
  big[2] = -3.5e38;
  refuse(dtrt_read_npy, put("h.npy", buf, npy(buf, 1, d4f, big, 32), 0), DT_ERR_FORMAT,
         "value -3.5e+38 at index 2 does not fit in f32");
  big[2] = 1e300;
  refuse(dtrt_read_npy, put("h.npy", buf, npy(buf, 1, d4f, big, 32), 0), DT_ERR_FORMAT,
         "at index 2 does not fit in f32");
  big[2] = (double)FLT_MAX;
  assert_int_equal(dtrt_read_npy(ctx, put("i.npy", buf, npy(buf, 1, d4f, big, 32), 0), &d), DT_OK);
  assert_true(((float *)d.t.data)[2] == FLT_MAX);
  dtrt_data_free(ctx, &d);

  unsigned char u[6] = {0, 1, 2, 253, 254, 255};
  const char *du = "{'descr': '|u1', 'fortran_order': False, 'shape': (1, 2, 3), }\n";
  assert_int_equal(dtrt_read_npy(ctx, put("f.npy", buf, npy(buf, 1, du, u, 6), 0), &d), DT_OK);
  assert_true(d.t.dtype == DTRT_I32 && d.t.rank == 3 && ((int32_t *)d.t.data)[5] == 255);
  dtrt_data_free(ctx, &d);

  struct {
    const char *dict, *why;
  } bad[] = {
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }\n", "Fortran"},
      {"{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }\n", "dtype '>f4'"},
      {"{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }\n", "dtype '<f2'"},
      {"{'descr': '<f4', 'shape': (2, 3), }\n", "lacks"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6), }\n", "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-6,), }\n", "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }\n", "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,6), }\n", "not a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}\n", "unknown key 'x'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\n", "twice"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} junk\n", "text after"},
      {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3)}\n", "True or False"},
      {"{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}\n", "malformed"},
      {"['descr', '<f4']\n", "not a dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\n", "data bytes"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }\n",
       "too many"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    refuse(dtrt_read_npy, put("bad.npy", buf, npy(buf, 1, bad[k].dict, f, 24), 0), DT_ERR_FORMAT,
           bad[k].why);
  size_t n = npy(buf, 1, d23, f, 24);
  refuse(dtrt_read_npy, put("trunc.npy", buf, n - 1, 0), DT_ERR_FORMAT, "data bytes");
  refuse(dtrt_read_npy, put("trail.npy", buf, n + 1, 0), DT_ERR_FORMAT, "data bytes");
  refuse(dtrt_read_npy, put("hdr.npy", buf, 40, 0), DT_ERR_FORMAT, "runs past the file");
  refuse(dtrt_read_npy, put("tiny.npy", buf, 9, 0), DT_ERR_FORMAT, "bad magic");
  buf[6] = 4;
  refuse(dtrt_read_npy, put("v4.npy", buf, n, 0), DT_ERR_FORMAT, "version 4.0");
  buf[6] = 1;
  buf[0] = 'x';
  refuse(dtrt_read_npy, put("magic.npy", buf, n, 0), DT_ERR_FORMAT, "bad magic");
}

/* ---- CSV ---- */

static void csv_ok(const char *text, int rows, int cols, const float *want) {
  DtData d;
  DtStatus s = dtrt_read_csv(ctx, puts_("ok.csv", text), &d);
  if (s)
    fail_msg("%s", dtrt_errmsg(ctx));
  assert_true(d.t.dtype == DTRT_F32 && d.t.rank == 2);
  assert_true(d.t.dim[0] == rows && d.t.dim[1] == cols);
  assert_memory_equal(d.t.data, want, (size_t)(rows * cols) * 4);
  dtrt_data_free(ctx, &d);
}

static void test_csv(void **state) {
  (void)state;
  float w[6] = {1, 2.5f, -3, 4e2f, 0.125f, 6};
  csv_ok("1,2.5,-3\n400,0.125,6\n", 2, 3, w);
  csv_ok("a,b,c\n1,2.5,-3\n400,0.125,6", 2, 3, w);
  csv_ok("\n  x , y,z\r\n 1 , 2.5 ,-3\r\n\r\n4e2,.125,+6\r\n\n", 2, 3, w);
  csv_ok("1\n2.5\n-3\n400\n0.125\n6\n", 6, 1, w);
  csv_ok("1,2.5,-3,400,0.125,6", 1, 6, w);

  refuse(dtrt_read_csv, puts_("h.csv", "a,b,c\n"), DT_ERR_FORMAT, "no data rows after the header");
  refuse(dtrt_read_csv, puts_("e.csv", ""), DT_ERR_FORMAT, "no data rows");
  refuse(dtrt_read_csv, puts_("b.csv", "\n \n"), DT_ERR_FORMAT, "no data rows");
  refuse(dtrt_read_csv, puts_("r.csv", "1,2,3\n4,5,6\n7,8\n"), DT_ERR_FORMAT,
         ":3: 2 fields, earlier rows have 3");
  refuse(dtrt_read_csv, puts_("r2.csv", "a,b\n1,2\n3,4,5\n"), DT_ERR_FORMAT, ":3: 3 fields");
  refuse(dtrt_read_csv, puts_("n.csv", "a,b\n1,2\n3,x\n"), DT_ERR_FORMAT,
         ":3: field 2 is not a number");
  refuse(dtrt_read_csv, puts_("n2.csv", "1,2\n3,4abc\n"), DT_ERR_FORMAT, ":2: field 2");
  refuse(dtrt_read_csv, puts_("n3.csv", "1,2\n3,\n"), DT_ERR_FORMAT, ":2: field 2");
  refuse(dtrt_read_csv, puts_("hw.csv", "a,b,c\n1,2\n"), DT_ERR_FORMAT,
         ":2: 2 fields, the header on line 1 has 3");
  refuse(dtrt_read_csv, put("z.csv", "1,2\n3\0,4\n", 9, 0), DT_ERR_FORMAT, ":2: NUL byte");
  /* a carriage return ends a line only before '\n' (or at the end) */
  float w2[2] = {1, 2};
  csv_ok("1,2\r", 1, 2, w2);
  refuse(dtrt_read_csv, puts_("cr.csv", "1,2\r9,3\n4,5,6\n"), DT_ERR_FORMAT,
         ":1:4: carriage return inside a line");
  refuse(dtrt_read_csv, puts_("cr2.csv", "a,b\n1,\r2\r\n"), DT_ERR_FORMAT,
         ":2:3: carriage return inside a line");
  /* a number too large for f32 is an error, not inf; a header stays one */
  refuse(dtrt_read_csv, puts_("big.csv", "1,2\n3, 1e39\n"), DT_ERR_FORMAT,
         ":2:4: field 2 does not fit in f32");
  refuse(dtrt_read_csv, puts_("big2.csv", "x,y\n-4e38,0\n"), DT_ERR_FORMAT,
         ":2:1: field 1 does not fit in f32");
  char *digits = malloc(100010);
  strcpy(digits, "1,");
  memset(digits + 2, '9', 100000);
  strcpy(digits + 100002, "\n");
  refuse(dtrt_read_csv, puts_("digits.csv", digits), DT_ERR_FORMAT,
         ":1:3: field 2 does not fit in f32");
  free(digits);
  float tiny[2] = {1e-30f, 0};
  csv_ok("1e-30,1e-50\n", 1, 2, tiny);
  /* a UTF-8 byte-order mark is skipped, before a header or a data row; a
   * UTF-16 or UTF-32 one is refused */
  csv_ok("\xEF\xBB\xBF" "1,2.5,-3\n400,0.125,6\n", 2, 3, w);
  csv_ok("\xEF\xBB\xBF" "a,b,c\n1,2.5,-3\n400,0.125,6\n", 2, 3, w);
  refuse(dtrt_read_csv, puts_("bom.csv", "\xEF\xBB\xBF" "1,2\n3,\r4\n"), DT_ERR_FORMAT,
         ":2:3: carriage return inside a line");
  refuse(dtrt_read_csv, puts_("bom2.csv", "\xEF\xBB\xBF"), DT_ERR_FORMAT, "no data rows");
  refuse(dtrt_read_csv, put("u16le.csv", "\xFF\xFE" "1\0,\0" "2\0\n\0", 10, 0), DT_ERR_FORMAT,
         "UTF-16LE byte-order mark");
  refuse(dtrt_read_csv, put("u16be.csv", "\xFE\xFF\0" "1\0,\0" "2\0\n", 10, 0), DT_ERR_FORMAT,
         "UTF-16BE byte-order mark");
  refuse(dtrt_read_csv, put("u32le.csv", "\xFF\xFE\0\0" "1\0\0\0", 8, 0), DT_ERR_FORMAT,
         "UTF-32LE byte-order mark");
  refuse(dtrt_read_csv, put("u32be.csv", "\0\0\xFE\xFF\0\0\0" "1", 8, 0), DT_ERR_FORMAT,
         "UTF-32BE byte-order mark");
  /* inf and nan are numbers, as strtof reads them */
  DtData d;
  assert_int_equal(dtrt_read_csv(ctx, puts_("inf.csv", "inf,-inf,nan\n"), &d), DT_OK);
  float *v = d.t.data;
  assert_true(isinf(v[0]) && v[0] > 0 && isinf(v[1]) && v[1] < 0 && isnan(v[2]));
  dtrt_data_free(ctx, &d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_idx, setup, teardown),
      cmocka_unit_test_setup_teardown(test_files, setup, teardown),
      cmocka_unit_test_setup_teardown(test_npy, setup, teardown),
      cmocka_unit_test_setup_teardown(test_csv, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
