/* arena.c: the per-compilation allocator; memory is released all at once. */
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct Block {
  struct Block *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
} Block;

struct Arena {
  Block *head;
};

_Noreturn void dtc_die(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "dtc: internal error at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

Arena *arena_new(void) {
  Arena *a = calloc(1, sizeof *a);
  if (!a)
    dtc_die(__FILE__, __LINE__, "out of memory");
  return a;
}

void arena_free(Arena *a) {
  if (!a)
    return;
  for (Block *b = a->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(a);
}

void *arena_alloc(Arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  Block *b = a->head;
  if (!b || b->size - b->used < n) {
    size_t size = n > 65536 ? n : 65536;
    b = malloc(sizeof *b + size);
    if (!b)
      dtc_die(__FILE__, __LINE__, "out of memory (%zu bytes)", n);
    b->size = size;
    b->used = 0;
    b->next = a->head;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

void *arena_realloc(Arena *a, void *p, size_t old, size_t n) {
  void *q = arena_alloc(a, n);
  if (p && old)
    memcpy(q, p, old < n ? old : n);
  return q;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  memcpy(p, s, n);
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap, ap2;
  va_start(ap, fmt);
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *p = arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return p;
}
