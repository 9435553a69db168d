/* init.c: the counter-based random generator and the parameter initialisers.
 * Value k of stream s under seed depends on (seed, s, k) alone, never on the
 * order of calls, the thread count or the machine. */
#include <math.h>

#include "dtrt_int.h"

/* The key selects one splitmix64 sequence per (seed, stream); counter indexes
 * it (dtrt_rand_at, dtrt_int.h). */
uint64_t dtrt_rand_key(uint64_t seed, uint64_t stream) {
  return dtrt_mix(dtrt_mix(seed) ^ (stream * 0xd1b54a32d192ed03u + 0x8bb84b93962eacc9u));
}

/* Uniform in [0, 1) with 53 bits. */
static double unit(uint64_t r) { return (double)(r >> 11) * 0x1p-53; }

/* Value k under key: uniform in [-lim, lim), or N(0, lim^2). Box-Muller: values
 * 2j and 2j+1 share the draws 2j, 2j+1, the even one taking the cosine and the
 * odd one the sine, so each value is the same in every range that holds it.
 * In double and rounded to float once, so a last-bit difference between libm
 * implementations almost never shows. */
static float value(bool normal, uint64_t key, double lim, uint64_t k) {
  if (!normal)
    return (float)(lim * (2.0 * unit(dtrt_rand_at(key, k)) - 1.0));
  uint64_t j = k & ~(uint64_t)1;
  double u1 = 1.0 - unit(dtrt_rand_at(key, j));
  double u2 = unit(dtrt_rand_at(key, j + 1));
  double r = sqrt(-2.0 * log(u1)), t = 2.0 * 3.14159265358979323846 * u2;
  return (float)(lim * r * (k & 1 ? sin(t) : cos(t)));
}

DtStatus dtrt_init_range(DtrtCtx *ctx, float *p, int64_t n, int kind, double arg,
                         int64_t fan_in, int64_t fan_out, uint64_t seed, uint64_t stream,
                         int64_t first) {
  if (n < 0 || (n > 0 && !p))
    return dtrt_fail(ctx, DT_ERR_ARG, "init: %lld elements at %p", (long long)n, (void *)p);
  if (first < 0 || first > INT64_MAX - n)
    return dtrt_fail(ctx, DT_ERR_ARG, "init: range of %lld elements from %lld", (long long)n,
                     (long long)first);
  double lim = arg;
  switch (kind) {
  case DT_INIT_ZEROS:
  case DT_INIT_ONES:
    for (int64_t k = 0; k < n; k++)
      p[k] = kind == DT_INIT_ONES ? 1.0f : 0.0f;
    return DT_OK;
  case DT_INIT_GLOROT:
    if (fan_in < 0 || fan_out < 0 || fan_in + fan_out <= 0)
      return dtrt_fail(ctx, DT_ERR_ARG, "init: glorot needs positive fans, got %lld and %lld",
                       (long long)fan_in, (long long)fan_out);
    lim = sqrt(6.0 / (double)(fan_in + fan_out));
    break;
  case DT_INIT_NORMAL:
  case DT_INIT_UNIFORM:
    if (!(arg >= 0 && arg <= 1e30))
      return dtrt_fail(ctx, DT_ERR_ARG, "init: scale %g must be finite and 0 or more", arg);
    break;
  case DT_INIT_KAIMING_UNIFORM:
  case DT_INIT_KAIMING_NORMAL:
    if (fan_in <= 0 || !(fabs(arg) <= 1e30))
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "init: kaiming needs a positive fan_in and a finite slope, got %lld and %g",
                       (long long)fan_in, arg);
    lim = sqrt(2.0 / (1.0 + arg * arg)) / sqrt((double)fan_in);   /* the std */
    if (kind == DT_INIT_KAIMING_UNIFORM)
      lim *= sqrt(3.0);
    break;
  default:
    return dtrt_fail(ctx, DT_ERR_ARG, "init: unknown kind %d", kind);
  }
  uint64_t key = dtrt_rand_key(seed, stream);
  bool normal = kind == DT_INIT_NORMAL || kind == DT_INIT_KAIMING_NORMAL;
  for (int64_t k = 0; k < n; k++)
    p[k] = value(normal, key, lim, (uint64_t)(first + k));
  return DT_OK;
}

DtStatus dtrt_init(DtrtCtx *ctx, float *p, int64_t n, int kind, double arg, int64_t fan_in,
                   int64_t fan_out, uint64_t seed, uint64_t stream) {
  return dtrt_init_range(ctx, p, n, kind, arg, fan_in, fan_out, seed, stream, 0);
}
