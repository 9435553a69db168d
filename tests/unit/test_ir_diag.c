/* test_ir_diag.c: what a diagnostic echoes (ir/diag.c): a huge token, quoted
 * in the message or on the source line, is cut to a sane width, and the caret
 * still points at the token's first byte; from .dt source and from IR text. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "frontend.h"
#include "ir.h"
#include "ir_arena_test.h"

enum { BIG = 1 << 20 };

/* The diagnostics of compiling (dt) or parsing (IR) text named t.dt/t.ir. */
static char *diagnose(const char *text, bool dt) {
  char *out;
  size_t n;
  FILE *f = open_memstream(&out, &n);
  Diag d;
  diag_init(&d, f);
  const SrcFile *src = src_from_string(arena, dt ? "t.dt" : "t.ir", text);
  Module *m = dt ? fe_compile(arena, src, NULL, 0, &d) : ir_parse(arena, src, &d);
  assert_null(m);
  assert_true(d.nerr >= 1);
  fclose(f);
  return out;
}

/* Every line of out is at most width bytes; the first diagnostic's caret
 * (line 3) is under byte c of its source line (line 2), where `at` starts. */
static void expect_short(const char *out, size_t width, const char *at) {
  const char *line[3] = {out, NULL, NULL};
  for (int k = 1; k < 3; k++) {
    const char *nl = strchr(line[k - 1], '\n');
    assert_non_null(nl);
    line[k] = nl + 1;
  }
  for (const char *p = out; *p;) {
    size_t n = strcspn(p, "\n");
    if (n > width)
      fail_msg("a line of %zu bytes: %.200s...", n, p);
    p += n + (p[n] == '\n');
  }
  const char *caret = strchr(line[2], '^');
  assert_non_null(caret);
  size_t col = (size_t)(caret - line[2]);
  if (strncmp(line[1] + col, at, strlen(at)))
    fail_msg("the caret is under '%.20s', not '%s':\n%s", line[1] + col, at, out);
}

static char *big_name(char c) {
  char *s = arena_alloc(arena, BIG + 1);
  memset(s, c, BIG);
  s[BIG] = 0;
  return s;
}

static void test_dt_token(void **state) {
  (void)state;
  char *q = big_name('q');
  /* an unknown 1 MB name, quoted in the message and shown on its line */
  char *out = diagnose(arena_printf(arena, "model m() {\n  input x: f32[4]\n  h = x + %s\n"
                                    "  output h\n}\n", q), true);
  expect_short(out, 200, "qqqq");
  assert_non_null(strstr(out, "t.dt:3:11: error: unknown name 'qqqq"));
  assert_non_null(strstr(out, "qqq...qqqqqqq'\n"));
  free(out);
  /* a 1 MB number */
  char *nine = big_name('9');
  out = diagnose(arena_printf(arena, "model m() {\n  input x: f32[%s]\n  output x\n}\n", nine),
                 true);
  expect_short(out, 200, "9999");
  assert_non_null(strstr(out, "t.dt:2:16: error: integer literal '9999"));
  free(out);
  /* a token far into a long line: the window keeps the caret on it */
  out = diagnose(arena_printf(arena, "model m() {\n  input x: f32[4]\n  h = %s + x + %s\n"
                              "  output h\n}\n", big_name('a'), q), true);
  expect_short(out, 200, "aaaa");
  free(out);
}

static void test_ir_token(void **state) {
  (void)state;
  char *n = big_name('n');
  char *out = diagnose(arena_printf(arena, "module m\ninput a : f32[2]\nfunc @f {\n"
                                    "  %%v = neg %%%s : f32[2]\n}\n", n), false);
  expect_short(out, 200, "%nnn");
  free(out);
}

/* Multi-byte characters are not cut in half, in the message or the line. */
static void test_utf8(void **state) {
  (void)state;
  Arena *a = arena;
  char *s = arena_alloc(a, 3 * 1000 + 1);
  for (int k = 0; k < 1000; k++)
    memcpy(s + 3 * k, "\xe2\x82\xac", 3);   /* the euro sign */
  s[3000] = 0;
  char *out;
  size_t n;
  FILE *f = open_memstream(&out, &n);
  Diag d;
  diag_init(&d, f);
  const SrcFile *src = src_from_string(a, "u.dt", arena_printf(a, "x = %s\n", s));
  diag_error(&d, (Loc){src, 1, 5}, "bad name '%s'", s);
  fclose(f);
  for (const char *p = out; *p; p++)
    if ((unsigned char)*p >= 0xc0) {
      assert_true(((unsigned char)p[1] & 0xc0) == 0x80 && ((unsigned char)p[2] & 0xc0) == 0x80);
      p += 2;
    } else {
      assert_false(((unsigned char)*p & 0xc0) == 0x80);
    }
  assert_true(strlen(out) < 1000);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dt_token),
      cmocka_unit_test(test_ir_token),
      cmocka_unit_test(test_utf8),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
