/* fuzz_irparse.c: libFuzzer target: any bytes, as IR text, must give a module
 * or located errors; a module must print, parse back and print the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

static char *print(const Module *m, size_t *len) {
  char *buf;
  FILE *f = open_memstream(&buf, len);
  if (!f)
    abort();
  ir_print(f, m);
  fclose(f);
  return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *null;
  if (!null && !(null = fopen("/dev/null", "w")))
    return 0;
  Arena *a = arena_new();
  char *text = arena_alloc(a, size + 1);
  memcpy(text, data, size);
  SrcFile src = {.name = "fuzz.ir", .text = text, .len = size};
  Diag d;
  diag_init(&d, null);
  Module *m = ir_parse(a, &src, &d);
  if (m) {
    size_t n1, n2;
    char *t1 = print(m, &n1);
    Module *m2 = ir_parse(a, src_from_string(a, "print1.ir", t1), &d);
    if (!m2) {
      fprintf(stderr, "printed module does not parse:\n%s", t1);
      abort();
    }
    char *t2 = print(m2, &n2);
    if (n1 != n2 || memcmp(t1, t2, n1)) {
      fprintf(stderr, "print(parse(print(m))) != print(m):\n%s\n----\n%s", t1, t2);
      abort();
    }
    free(t1);
    free(t2);
  }
  arena_free(a);
  return 0;
}
