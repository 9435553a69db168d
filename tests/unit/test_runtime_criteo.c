/* test_runtime_criteo.c: the Criteo text reader on lines written here: the
 * values against the documented transform and hash computed anew, batches,
 * rewinding, gzip, every kind of malformed line refused with its line
 * number, and truncated or garbled files read without a crash. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include <cmocka.h>

#include "dtrt.h"
#include "rt_test.h"

enum { ND = DTRT_CRITEO_DENSE, NC = DTRT_CRITEO_CATS };

static int64_t rows[NC];

static int group_setup(void **state) {
  (void)state;
  for (int k = 0; k < NC; k++)
    rows[k] = k == 0 ? 1 : k == 1 ? 2 : 1000 + 37 * k;
  return rt_make_dir("dtrt-criteo");
}

static int group_teardown(void **state) {
  (void)state;
  return rt_remove_dir(0);
}

/* Writes n bytes to dir/name, gzip-compressed when gz; returns the path. */
static const char *put(const char *name, const char *p, size_t n, int gz) {
  const char *path = rt_at(name);
  if (gz) {
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    if (n)
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

/* The documented hash, written out again from dtrt.h's words. */
static int32_t row_of(uint32_t v, int64_t r) {
  if (r == 1)
    return 0;
  uint64_t z = v;
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9u;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebu;
  z ^= z >> 31;
  return (int32_t)(1 + z % (uint64_t)(r - 1));
}

/* A line: label, integers ints[13] (INT64_MIN: empty), categories cats[26]
 * (-1: empty), appended to out. */
static void line(char *out, int label, const int64_t *ints, const int64_t *cats) {
  char *p = out + strlen(out);
  p += sprintf(p, "%d", label);
  for (int k = 0; k < ND; k++)
    p += ints[k] == INT64_MIN ? sprintf(p, "\t") : sprintf(p, "\t%lld", (long long)ints[k]);
  for (int k = 0; k < NC; k++)
    p += cats[k] < 0 ? sprintf(p, "\t") : sprintf(p, "\t%08llx", (long long)cats[k]);
  strcpy(p, "\n");
}

typedef struct Sample {
  int label;
  int64_t ints[ND], cats[NC];
} Sample;

static void random_sample(Sample *s) {
  s->label = (int)(rt_next() & 1);
  for (int k = 0; k < ND; k++) {
    uint64_t u = rt_next();
    s->ints[k] = u % 5 == 0   ? INT64_MIN
                 : u % 5 == 1 ? -(int64_t)(u >> 60)
                              : (int64_t)((u >> 8) % (k == 3 ? 4000000000000ull : 5000));
  }
  for (int k = 0; k < NC; k++) {
    uint64_t u = rt_next();
    s->cats[k] = u % 7 == 0 ? -1 : (int64_t)(u >> 32);
  }
}

/* Asserts row i of a batch against sample s. */
static void check_row(const Sample *s, const float *dense, const int32_t *ids, float label) {
  assert_true(label == (float)s->label);
  for (int k = 0; k < ND; k++) {
    double x = s->ints[k] == INT64_MIN || s->ints[k] < 0 ? 0 : (double)s->ints[k];
    /* one rounding of log1p to f32: within half an ulp, 2^-24 relative */
    double want = log1p(x);
    if (fabs(dense[k] - want) > want * 0x1p-24)
      fail_msg("I%d of %lld: %.9g, want %.9g", k + 1, (long long)s->ints[k], dense[k], want);
  }
  for (int k = 0; k < NC; k++) {
    int32_t want = s->cats[k] < 0 ? 0 : row_of((uint32_t)s->cats[k], rows[k]);
    assert_int_equal(ids[k], want);
    assert_true(ids[k] >= 0 && ids[k] < rows[k]);
  }
}

enum { N = 7 };

static void write_samples(Sample *s, char *text) {
  text[0] = 0;
  for (int i = 0; i < N; i++) {
    random_sample(&s[i]);
    line(text, s[i].label, s[i].ints, s[i].cats);
  }
}

/* Reads path in batches of b and checks every row against s. */
static void read_all(const char *path, const Sample *s, int b) {
  DtCriteo *r;
  assert_int_equal(dtrt_criteo_open(ctx, path, rows, &r), DT_OK);
  float dense[N * ND], labels[N];
  int32_t ids[N * NC];
  for (int pass = 0; pass < 2; pass++) {
    int64_t got = 0, n;
    do {
      assert_int_equal(dtrt_criteo_read(r, b, dense, ids, labels, &n), DT_OK);
      assert_true(n == b || got + n == N);
      for (int64_t i = 0; i < n; i++)
        check_row(&s[got + i], dense + i * ND, ids + i * NC, labels[i]);
      got += n;
    } while (n);
    assert_int_equal(got, N);
    assert_int_equal(dtrt_criteo_line(r), N);
    assert_int_equal(dtrt_criteo_rewind(r), DT_OK);
  }
  dtrt_criteo_close(r);
}

static void test_values(void **state) {
  (void)state;
  Sample s[N];
  static char text[N * 600];
  write_samples(s, text);
  for (int b = 1; b <= N + 1; b++)
    read_all(put("a.txt", text, strlen(text), 0), s, b);
  read_all(put("a.txt.gz", text, strlen(text), 1), s, 3);
  /* "\r\n" ends a line too; the last may lack its end; upper-case hex */
  size_t n = strlen(text);
  text[n - 1] = 0;
  char *crlf = malloc(2 * n);
  assert_non_null(crlf);
  char *q = crlf;
  for (const char *p = text; *p; p++) {
    if (*p == '\n')
      *q++ = '\r';
    *q++ = *p >= 'a' && *p <= 'f' ? (char)(*p - 'a' + 'A') : *p;
  }
  *q = 0;
  read_all(put("crlf.txt", crlf, strlen(crlf), 0), s, 2);
  free(crlf);
  /* the hash spreads: a table of 2 rows puts everything in row 1; log1p exact at 0 */
  assert_int_equal(dtrt_criteo_row(0, 1), 0);
  assert_int_equal(dtrt_criteo_row(0xffffffffu, 2), 1);
  int count[5] = {0};
  for (uint32_t v = 0; v < 4000; v++)
    count[dtrt_criteo_row(v * 2654435761u, 5)]++;
  assert_int_equal(count[0], 0);
  for (int k = 1; k < 5; k++) /* 1000 expected each, sd about 27 */
    assert_true(count[k] > 850 && count[k] < 1150);
}

/* Asserts that reading text fails at line want_line with status st and a
 * message holding "PATH:LINE:" and want, after want_line - 1 good lines. */
static void refuse(const char *name, const char *text, size_t n, DtStatus st, int want_line,
                   const char *want) {
  const char *path = put(name, text, n, 0);
  DtCriteo *r;
  assert_int_equal(dtrt_criteo_open(ctx, path, rows, &r), DT_OK);
  float dense[4 * ND], labels[4];
  int32_t ids[4 * NC];
  int64_t got = -1;
  DtStatus s = dtrt_criteo_read(r, 4, dense, ids, labels, &got);
  char at[600];
  snprintf(at, sizeof at, "%s:%d:", path, want_line);
  if (s != st || !strstr(dtrt_errmsg(ctx), at) || !strstr(dtrt_errmsg(ctx), want))
    fail_msg("status %d, message '%s'; wanted %d, '%s' and '%s'", s, dtrt_errmsg(ctx), st, at,
             want);
  assert_int_equal(got, want_line - 1);
  /* stuck until rewound */
  assert_int_equal(dtrt_criteo_read(r, 4, dense, ids, labels, &got), st);
  assert_int_equal(got, 0);
  assert_non_null(strstr(dtrt_errmsg(ctx), "rewind"));
  assert_int_equal(dtrt_criteo_rewind(r), DT_OK);
  assert_int_equal(dtrt_criteo_read(r, want_line - 1, dense, ids, labels, &got), DT_OK);
  assert_int_equal(got, want_line - 1);
  dtrt_criteo_close(r);
}

/* A good line with field f (0: the label) replaced by v, then a newline. */
static void with_field(char *out, int f, const char *v) {
  int64_t ints[ND], cats[NC];
  for (int k = 0; k < ND; k++)
    ints[k] = k;
  for (int k = 0; k < NC; k++)
    cats[k] = 0x1000 * k;
  char good[600] = "";
  line(good, 1, ints, cats);
  char *p = good;
  for (int k = 0; k < f; k++)
    p = strchr(p, '\t') + 1;
  size_t keep = (size_t)(p - good);
  char *end = p + strcspn(p, "\t\n");
  sprintf(out + strlen(out), "%.*s%s%s", (int)keep, good, v, end);
}

static void test_errors(void **state) {
  (void)state;
  char t[9000];
  const char *good =
      "0\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n";
  /* two good lines, then the bad one on line 3 */
#define BAD(name, field, value, want)                                                              \
  do {                                                                                             \
    snprintf(t, sizeof t, "%s%s", good, good);                                                     \
    with_field(t, field, value);                                                                   \
    refuse(name, t, strlen(t), DT_ERR_FORMAT, 3, want);                                            \
  } while (0)
  BAD("label2", 0, "2", ":3:1: label '2' is not 0 or 1");
  BAD("label_empty", 0, "", "label '' is not 0 or 1");
  BAD("label_long", 0, "01", "label '01' is not 0 or 1");
  BAD("int_alpha", 1, "12a", ":3:3: I1: '12a' is not an integer");
  BAD("int_minus", 4, "-", "I4: '-' is not an integer");
  BAD("int_plus", 13, "+5", "I13: '+5' is not an integer");
  BAD("int_space", 2, " 5", "I2: ' 5' is not an integer");
  BAD("int_over", 5, "9223372036854775808", "I5: '9223372036854775808' does not fit in 64 bits");
  BAD("int_under", 6, "-99999999999999999999", "I6: '-99999999999999999999' does not fit");
  BAD("cat_short", 14, "1234567", "C1: '1234567' is not 8 hexadecimal digits");
  BAD("cat_long", 39, "123456789", "C26: '123456789' is not 8 hexadecimal digits");
  BAD("cat_g", 20, "1234567g", "C7: '1234567g' is not 8 hexadecimal digits");
  BAD("cat_cr", 25, "1234\r678", "C12: '1234\\x0d678' is not 8 hexadecimal digits");
  /* the largest integer fits; a long field is shown cut */
  snprintf(t, sizeof t, "%s%s", good, good);
  with_field(t, 3, "9223372036854775807");
  with_field(t, 15, "0123456789abcdef0123456789abcdef");
  refuse("cut", t, strlen(t), DT_ERR_FORMAT, 4, "C2: '0123456789abcdef01234567...' is not 8");
  /* field counts */
  snprintf(t, sizeof t, "%s%s1\n", good, good);
  refuse("one_field", t, strlen(t), DT_ERR_FORMAT, 3, "1 tab-separated fields, expected 40");
  snprintf(t, sizeof t, "%s\n", good);
  refuse("blank", t, strlen(t), DT_ERR_FORMAT, 2, "1 tab-separated fields, expected 40");
  snprintf(t, sizeof t, "%s%.*s\n", good, 39, good);
  refuse("39", t, strlen(t), DT_ERR_FORMAT, 2, "39 tab-separated fields");
  snprintf(t, sizeof t, "%s\t%s", good, good);
  refuse("41", t, strlen(t), DT_ERR_FORMAT, 2, "41 tab-separated fields");
  /* a NUL byte is a bad character, not an end */
  snprintf(t, sizeof t, "%s", good);
  with_field(t, 1, "1x2");
  size_t n = strlen(t);
  *strchr(t, 'x') = 0;
  refuse("nul", t, n, DT_ERR_FORMAT, 2, "I1: '1\\x002' is not an integer");
  /* a line too long, refused before its end is read */
  static char big[3 * 65536];
  n = (size_t)snprintf(big, sizeof big, "%s", good);
  memset(big + n, '7', sizeof big - n - 1);
  refuse("long", big, sizeof big - 1, DT_ERR_FORMAT, 2, "line longer than 4096 bytes");
  /* the longest line accepted: 4096 bytes before its '\n' */
  n = 0;
  n += (size_t)sprintf(big, "1\t");
  size_t pad = DTRT_CRITEO_MAX_LINE - 2 - (strlen(good) - 3); /* I1 "000..." */
  memset(big + n, '0', pad);
  n += pad;
  n += (size_t)sprintf(big + n, "%s", good + 2);
  assert_int_equal(n, DTRT_CRITEO_MAX_LINE + 1);
  n += (size_t)sprintf(big + n, "%s", good);
  big[DTRT_CRITEO_MAX_LINE + 1 + 0] = '2'; /* the second line's label */
  refuse("longest", big, n, DT_ERR_FORMAT, 2, ":2:1: label '2'");
  /* truncated gzip data: the good lines, then the error */
  static char many[200 * 60];
  many[0] = 0;
  for (int i = 0; i < 200; i++)
    strcat(many, good);
  const char *path = put("cut.gz", many, strlen(many), 1);
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  long size = ftell(f);
  fclose(f);
  assert_int_equal(truncate(path, size - 10), 0);
  DtCriteo *r;
  assert_int_equal(dtrt_criteo_open(ctx, path, rows, &r), DT_OK);
  float dense[256 * ND], labels[256];
  int32_t ids[256 * NC];
  int64_t got;
  assert_int_equal(dtrt_criteo_read(r, 256, dense, ids, labels, &got), DT_ERR_FORMAT);
  assert_non_null(strstr(dtrt_errmsg(ctx), "truncated gzip data"));
  assert_true(got <= 200);
  dtrt_criteo_close(r);
  /* arguments and files */
  int64_t bad_rows[NC];
  memcpy(bad_rows, rows, sizeof rows);
  bad_rows[4] = 0;
  r = (DtCriteo *)&got;
  assert_int_equal(dtrt_criteo_open(ctx, path, bad_rows, &r), DT_ERR_ARG);
  assert_null(r);
  assert_non_null(strstr(dtrt_errmsg(ctx), "table 4 (C5) has 0 rows"));
  assert_int_equal(dtrt_criteo_open(ctx, dir, rows, &r), DT_ERR_IO);
  assert_non_null(strstr(dtrt_errmsg(ctx), "not a regular file"));
  assert_int_equal(dtrt_criteo_open(ctx, rt_at("absent"), rows, &r), DT_ERR_IO);
  assert_int_equal(dtrt_criteo_open(NULL, path, rows, &r), DT_ERR_ARG);
  assert_int_equal(dtrt_criteo_read(NULL, 1, dense, ids, labels, &got), DT_ERR_ARG);
  assert_int_equal(dtrt_criteo_rewind(NULL), DT_ERR_ARG);
  dtrt_criteo_close(NULL);
  /* an empty file has no lines */
  assert_int_equal(dtrt_criteo_open(ctx, put("empty", "", 0, 0), rows, &r), DT_OK);
  assert_int_equal(dtrt_criteo_read(r, 4, dense, ids, labels, &got), DT_OK);
  assert_int_equal(got, 0);
  assert_int_equal(dtrt_criteo_read(r, -1, dense, ids, labels, &got), DT_ERR_ARG);
  dtrt_criteo_close(r);
}

/* Truncated and garbled files, plain and gzip: every read ends in DT_OK or
 * DT_ERR_FORMAT with "PATH:LINE:" in its message, every id in its table,
 * no crash (the sanitizer build checks memory too), nothing leaked. */
static void test_garbage(void **state) {
  (void)state;
  Sample s[N];
  static char text[N * 600], g[N * 600 + 64];
  write_samples(s, text);
  size_t len = strlen(text);
  float dense[3 * ND], labels[3];
  int32_t ids[3 * NC];
  int bad = 0;
  for (int trial = 0; trial < 600; trial++) {
    size_t n = (size_t)(rt_next() % (len + 1));
    memcpy(g, text, n);
    int edits = trial % 3 == 0 ? 0 : (int)(rt_next() % 8);
    for (int e = 0; e < edits && n; e++) {
      uint64_t u = rt_next();
      const char pick[] = "\t\n\r\0-9afAFxz \xff";
      g[u % n] = (u >> 40) & 1 ? pick[(u >> 20) % (sizeof pick - 1)] : (char)(u >> 48);
    }
    const char *path = put(trial % 4 == 3 ? "g.gz" : "g.txt", g, n, trial % 4 == 3);
    if (trial % 8 == 7) { /* a gzip file cut short */
      path = put("g.gz", g, n, 1);
      FILE *f = fopen(path, "rb");
      assert_non_null(f);
      fseek(f, 0, SEEK_END);
      long size = ftell(f);
      fclose(f);
      assert_int_equal(truncate(path, (long)(rt_next() % (uint64_t)size)), 0);
    }
    DtCriteo *r;
    assert_int_equal(dtrt_criteo_open(ctx, path, rows, &r), DT_OK);
    int64_t got = 0;
    DtStatus st;
    while (!(st = dtrt_criteo_read(r, 3, dense, ids, labels, &got)) && got)
      for (int64_t i = 0; i < got * NC; i++)
        assert_true(ids[i] >= 0 && ids[i] < rows[i % NC]);
    if (st) {
      char at[600];
      snprintf(at, sizeof at, "%s:", path);
      assert_int_equal(st, DT_ERR_FORMAT);
      const char *m = dtrt_errmsg(ctx);
      assert_memory_equal(m, at, strlen(at));
      assert_true(m[strlen(at)] >= '1' && m[strlen(at)] <= '9');
      bad++;
    }
    dtrt_criteo_close(r);
  }
  assert_true(bad > 100); /* the garbling reached the checks */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_values, setup, teardown),
      cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
