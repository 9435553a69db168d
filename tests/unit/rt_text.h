/* rt_text.h: a file's text, for the runtime tests that read what libdtrt
 * wrote (a trace), unit and MPI alike. Header only. */
#ifndef RT_TEXT_H
#define RT_TEXT_H

#include <stdio.h>
#include <stdlib.h>

/* The first 64 KiB of file path, a new string ("" if it cannot be read). */
static inline char *rt_slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  char *text = calloc(1 << 16, 1);
  if (f && text) {
    size_t n = fread(text, 1, (1 << 16) - 1, f);
    text[n] = 0;
  }
  if (f)
    fclose(f);
  return text;
}

#endif
