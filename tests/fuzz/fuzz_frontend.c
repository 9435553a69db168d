/* fuzz_frontend.c: libFuzzer target: any bytes, as a .dt file, must give a
 * module or located errors; never a crash, a hang or a failed assertion. */
#include <stdint.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *null;
  if (!null && !(null = fopen("/dev/null", "w")))
    return 0;
  Arena *a = arena_new();
  char *text = arena_alloc(a, size + 1);
  memcpy(text, data, size);
  SrcFile src = {.name = "fuzz.dt", .text = text, .len = size};
  Diag d;
  diag_init(&d, null);
  d.wflags = W_UNUSED;
  fe_compile(a, &src, NULL, 0, &d);
  arena_free(a);
  return 0;
}
