/* test_runtime_bf16.c: the bf16 wire format's rounding (dtrt_bf16_from_f32)
 * against a reference that rounds by comparing distances in double, on every
 * bf16 interval at the low halves where rounding turns (ties, one either side
 * of them, the ends), and the cases named in dtrt.h: ties to even, NaN,
 * infinities, values that round up to inf, denormals, signed zeros. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "dtrt.h"

static float f_of(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

static uint32_t u_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

/* The value of the bf16 whose magnitude bits are h (inf as 2^128, where
 * round to nearest puts the boundary of overflow). */
static double mag(uint32_t h) { return h == 0x7f80u ? ldexp(1, 128) : (double)f_of(h << 16); }

/* Round to nearest, ties to even, by distance: the bf16 below |x| (its upper
 * half) and the one above, whichever is nearer, the even one on a tie. */
static uint16_t reference(float x) {
  uint32_t u = u_of(x), sign = u >> 31;
  if (isnan(x))
    return (uint16_t)(u >> 16 | 0x40u);
  if (isinf(x))
    return (uint16_t)(u >> 16);
  uint32_t lo = (u & 0x7fffffffu) >> 16, hi = lo + 1;
  double a = fabs((double)x), dlo = a - mag(lo), dhi = mag(hi) - a;
  uint32_t h = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u) ? hi : lo;
  return (uint16_t)(sign << 15 | h);
}

static void test_rounding_sweep(void **state) {
  (void)state;
  static const uint32_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000,
                                  0x8001, 0xbfff, 0xfffe, 0xffff, 0x1234, 0xedcb};
  long bad = 0;
  for (uint32_t top = 0; top < 0x10000u; top++)
    for (size_t k = 0; k < sizeof lows / sizeof *lows; k++) {
      uint32_t u = top << 16 | lows[k];
      float x = f_of(u);
      uint16_t got = dtrt_bf16_from_f32(x), want = reference(x);
      if (got != want && bad++ < 5)
        print_error("0x%08x: 0x%04x, want 0x%04x\n", u, got, want);
    }
  assert_int_equal(bad, 0);
}

static void test_rounding_cases(void **state) {
  (void)state;
  /* ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to 1 (even) */
  assert_int_equal(dtrt_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);
  /* 1 + 3 2^-8 between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one */
  assert_int_equal(dtrt_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);
  /* just above a tie goes up, just below goes down */
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x3f808001)), 0x3f81);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x3f817fff)), 0x3f81);
  /* the largest f32 and anything from the midpoint above the largest bf16
   * (0x7f7f8000) round up to inf; just below it stays finite */
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7f7fffff)), 0x7f80);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7f7f8000)), 0x7f80);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0xff7f8000)), 0xff80);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7f7f7fff)), 0x7f7f);
  assert_int_equal(dtrt_bf16_from_f32(INFINITY), 0x7f80);
  assert_int_equal(dtrt_bf16_from_f32(-INFINITY), 0xff80);
  /* NaNs stay NaNs of their sign, made quiet, even when the payload lies in
   * the dropped half alone */
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7fc00000)), 0x7fc0);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0xffc00000)), 0xffc0);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7f800001)), 0x7fc0);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x7fffffff)), 0x7fff);
  assert_true(isnan(dtrt_bf16_to_f32(dtrt_bf16_from_f32(f_of(0xff800001)))));
  /* denormals round as any value: the smallest f32 denormals to zero, half
   * the smallest bf16 denormal (a tie) to zero (even), above it up */
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x00000001)), 0x0000);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x00008000)), 0x0000);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x00008001)), 0x0001);
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x80018000)), 0x8002);
  /* the largest denormal rounds up to the smallest normal */
  assert_int_equal(dtrt_bf16_from_f32(f_of(0x007fffff)), 0x0080);
  assert_int_equal(dtrt_bf16_from_f32(0.0f), 0x0000);
  assert_int_equal(dtrt_bf16_from_f32(-0.0f), 0x8000);
}

/* Every bf16 but a signalling NaN comes back as itself; the relative error
 * of a normal value's rounding is at most 2^-8 (half the spacing 2^-7 of
 * bf16's 8-bit significands at 1). */
static void test_round_trip(void **state) {
  (void)state;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    float x = dtrt_bf16_to_f32((uint16_t)h);
    assert_int_equal(u_of(x), h << 16);
    uint16_t back = dtrt_bf16_from_f32(x);
    if (isnan(x))
      assert_int_equal(back, h | 0x40u);
    else
      assert_int_equal(back, h);
  }
  for (uint32_t u = 0x00800000u; u < 0x7f7f8000u; u += 0x00012345u) {
    float x = f_of(u), r = dtrt_bf16_to_f32(dtrt_bf16_from_f32(x));
    assert_true(fabs((double)r - x) <= ldexp(fabs((double)x), -8));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rounding_sweep),
      cmocka_unit_test(test_rounding_cases),
      cmocka_unit_test(test_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
