/* ir_arena_test.h: the cmocka group fixtures of test_ir_parse.c and
 * test_ir_verify.c: one arena for the whole group, made by setup and freed
 * by teardown. Header only: the functions are static inline. */
#ifndef IR_ARENA_TEST_H
#define IR_ARENA_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ir.h"

static Arena *arena;

static inline int setup(void **state) {
  (void)state;
  arena = arena_new();
  return 0;
}

static inline int teardown(void **state) {
  (void)state;
  arena_free(arena);
  return 0;
}

#endif
