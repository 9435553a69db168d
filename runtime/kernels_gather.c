/* kernels_gather.c: torch's gather and its scatter-add (gather_grad), near
 * the bandwidth of a copy. An index's rows (along its last dim) are checked
 * whole first, then read with AVX-512 gathers on Intel's CPUs (AMD's Zen 4
 * has them too, but as many micro-ops: scalar loads gather a row there in
 * two thirds of the time, bench/kernels --only=gather); a row
 * of one index along an axis before the last (an expanded index) is a
 * memcpy, or a vector add. The scatter-add splits its work by destination:
 * each part adds to its own elements of dx, in row-major order of dy, so
 * its result has the same bits on any number of threads. */
#include <string.h>

#include "dtrt_int.h"

enum {
  PARALLEL_ELEMS = 1 << 16, /* fewer elements: one thread */
  MIN_PART = 64,            /* a row split in parts of at least this many */
  LANES = 16,
  ZERO_BLOCK = 1 << 14 /* floats a part clears, when dx is cleared first */
};

typedef struct GatherJob {
  const float *x; /* gather: the source; gather_grad: dy */
  float *y;       /* gather: y; gather_grad: dx */
  const int32_t *idx;
  int r, axis;
  int64_t idim[DT_MAX_RANK]; /* index's dims (y's, dy's) */
  int64_t xs[DT_MAX_RANK];   /* strides of the whole (x, dx) */
  int64_t size;              /* the whole's length along axis */
  int64_t n;                 /* index's last dim */
  int64_t k, mid;            /* index's dim along axis; the product of those between */
  int64_t parts, part;       /* a unit's parts (columns; values for the last axis's
                                scatter-add) and their length */
  bool tiles;                /* index and whole agree but along axis: the parts clear dx */
  bool avx;                  /* AVX-512 stores */
  bool gathers;              /* AVX-512 gathers, where they are fast */
  bool vec;                  /* and their offsets along an axis before the last fit in int32 */
  int bad;
} GatherJob;

/* Where row p of index starts in the whole, its coordinate along axis
 * left out. */
static int64_t row_base(const GatherJob *g, int64_t p) {
  int64_t off = 0;
  for (int d = g->r - 2; d >= 0; d--) {
    int64_t c = p % g->idim[d];
    p /= g->idim[d];
    if (d != g->axis)
      off += c * g->xs[d];
  }
  return off;
}

/* Whether id[0..n) are all in [0, size): one pass the compiler vectorises. */
static bool in_range(const int32_t *id, int64_t n, int64_t size) {
  uint32_t lim = size > INT32_MAX ? (uint32_t)INT32_MAX + 1 : (uint32_t)size;
  unsigned out = 0;
  for (int64_t j = 0; j < n; j++)
    out |= (uint32_t)id[j] >= lim;
  return !out;
}

/* A row of index along an axis before the last, id[0..n): ROW_BAD when
 * one is not in [0, size), ROW_ONE when all are one index, else ROW_MANY;
 * one pass the compiler vectorises, for AVX-512 too (row_kind): with SSE's
 * four lanes it took a fifth of a gather along dim 0. */
enum { ROW_BAD, ROW_ONE, ROW_MANY };
static inline __attribute__((always_inline)) int row_kind_of(const int32_t *id, int64_t n,
                                                             int64_t size) {
  uint32_t lim = size > INT32_MAX ? (uint32_t)INT32_MAX + 1 : (uint32_t)size;
  unsigned out = 0, diff = 0;
  for (int64_t j = 0; j < n; j++) {
    out |= (uint32_t)id[j] >= lim;
    diff |= id[j] != id[0];
  }
  return out ? ROW_BAD : diff ? ROW_MANY : ROW_ONE;
}
static int row_kind_plain(const int32_t *id, int64_t n, int64_t size) {
  return row_kind_of(id, n, size);
}

static void add_run(float *restrict dx, const float *restrict dy, int64_t n) {
  for (int64_t j = 0; j < n; j++)
    dx[j] += dy[j];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))

static inline __mmask16 first_lanes(int64_t n) {
  return (__mmask16)(n >= LANES ? 0xffff : (1u << n) - 1);
}

/* y[j] = x[id[j]] */
AVX512 static void gather_last_avx512(const float *x, const int32_t *id, float *y, int64_t n) {
  for (int64_t j = 0; j < n; j += LANES) {
    __mmask16 m = first_lanes(n - j);
    __m512i v = _mm512_maskz_loadu_epi32(m, id + j);
    __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, v, x, 4);
    _mm512_mask_storeu_ps(y + j, m, g);
  }
}

/* The offsets j + id[j] as of lanes j0..j0+15. */
AVX512 static inline __m512i strided(__mmask16 m, const int32_t *id, int64_t j0, __m512i as) {
  __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i v = _mm512_maskz_loadu_epi32(m, id + j0);
  return _mm512_add_epi32(_mm512_mullo_epi32(v, as),
                          _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)j0)));
}

/* y[j] = x[j + id[j] as] */
AVX512 static void gather_strided_avx512(const float *x, const int32_t *id, float *y, int64_t n,
                                         int64_t as) {
  __m512i s = _mm512_set1_epi32((int32_t)as);
  for (int64_t j = 0; j < n; j += LANES) {
    __mmask16 m = first_lanes(n - j);
    __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, strided(m, id, j, s), x, 4);
    _mm512_mask_storeu_ps(y + j, m, g);
  }
}

/* dx[j + id[j] as] += dy[j]: the lanes' places differ (their j do), so a
 * gather, an add and a scatter do what the plain loop does. */
AVX512 static void scatter_strided_avx512(float *dx, const int32_t *id, const float *dy, int64_t n,
                                          int64_t as) {
  __m512i s = _mm512_set1_epi32((int32_t)as);
  for (int64_t j = 0; j < n; j += LANES) {
    __mmask16 m = first_lanes(n - j);
    __m512i off = strided(m, id, j, s);
    __m512 g = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, off, dx, 4);
    g = _mm512_add_ps(g, _mm512_maskz_loadu_ps(m, dy + j));
    _mm512_mask_i32scatter_ps(dx, m, off, g, 4);
  }
}
/* p[0..n) = 0 in vector stores: a row of the scatter-add is short, and
 * memset's string store takes long to start */
AVX512 static void zero_avx512(float *p, int64_t n) {
  for (int64_t j = 0; j < n; j += LANES)
    _mm512_mask_storeu_ps(p + j, first_lanes(n - j), _mm512_setzero_ps());
}
AVX512 static int row_kind_avx512(const int32_t *id, int64_t n, int64_t size) {
  return row_kind_of(id, n, size);
}
#define HAVE_AVX512 1
#else
#define HAVE_AVX512 0
#endif

static int row_kind(bool avx, const int32_t *id, int64_t n, int64_t size) {
#if HAVE_AVX512
  if (avx)
    return row_kind_avx512(id, n, size);
#endif
  (void)avx;
  return row_kind_plain(id, n, size);
}

static void gather_last(bool vec, const float *x, const int32_t *id, float *y, int64_t n) {
#if HAVE_AVX512
  if (vec) {
    gather_last_avx512(x, id, y, n);
    return;
  }
#endif
  (void)vec;
  for (int64_t j = 0; j < n; j++)
    y[j] = x[id[j]];
}

static void gather_strided(bool vec, const float *x, const int32_t *id, float *y, int64_t n,
                           int64_t as) {
#if HAVE_AVX512
  if (vec) {
    gather_strided_avx512(x, id, y, n, as);
    return;
  }
#endif
  (void)vec;
  for (int64_t j = 0; j < n; j++)
    y[j] = x[j + id[j] * as];
}

static void scatter_strided(bool vec, float *dx, const int32_t *id, const float *dy, int64_t n,
                            int64_t as) {
#if HAVE_AVX512
  if (vec) {
    scatter_strided_avx512(dx, id, dy, n, as);
    return;
  }
#endif
  (void)vec;
  for (int64_t j = 0; j < n; j++)
    dx[j + id[j] * as] += dy[j];
}

static void zero(bool vec, float *p, int64_t n) {
#if HAVE_AVX512
  if (vec && n <= 4096) {
    zero_avx512(p, n);
    return;
  }
#endif
  (void)vec;
  memset(p, 0, sizeof(float) * (size_t)n);
}

/* Whether the CPU's AVX-512 gathers beat scalar loads: Intel's. */
static bool fast_gathers(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

static void fail(GatherJob *g) { __atomic_store_n(&g->bad, 1, __ATOMIC_RELAXED); }

/* gather's units: parts of index's rows. */
static void gather_units(void *env, int64_t begin, int64_t end) {
  GatherJob *g = env;
  int64_t n = g->n, as = g->xs[g->axis];
  bool last = g->axis == g->r - 1;
  for (int64_t u = begin; u < end; u++) {
    int64_t p = u / g->parts, j0 = u % g->parts * g->part;
    int64_t m = n - j0 < g->part ? n - j0 : g->part;
    const int32_t *id = g->idx + p * n + j0;
    float *y = g->y + p * n + j0;
    int kind = last ? (in_range(id, m, g->size) ? ROW_MANY : ROW_BAD)
                    : row_kind(g->avx, id, m, g->size);
    if (kind == ROW_BAD) {
      fail(g);
      return;
    }
    const float *x = g->x + row_base(g, p) + (last ? 0 : j0);
    if (last)
      gather_last(g->gathers, x, id, y, m);
    else if (kind == ROW_ONE)
      memcpy(y, x + id[0] * as, sizeof(float) * (size_t)m);
    else
      gather_strided(g->vec, x, id, y, m, as);
  }
}

/* The scatter-add along an axis before the last: a unit is a part of the
 * columns of the rows that differ only along axis, which add to their own
 * columns of dx, row after row. */
static void scatter_units(void *env, int64_t begin, int64_t end) {
  GatherJob *g = env;
  int64_t n = g->n, as = g->xs[g->axis];
  for (int64_t u = begin; u < end; u++) {
    int64_t f = u / g->parts, j0 = u % g->parts * g->part;
    int64_t m = n - j0 < g->part ? n - j0 : g->part;
    int64_t p0 = f / g->mid * g->k * g->mid + f % g->mid;
    float *dx = g->y + row_base(g, p0) + j0;
    if (g->tiles)
      for (int64_t w = 0; w < g->size; w++)
        memset(dx + w * as, 0, sizeof(float) * (size_t)m);
    for (int64_t k = 0; k < g->k; k++) {
      int64_t p = p0 + k * g->mid;
      const int32_t *id = g->idx + p * n + j0;
      const float *dy = g->x + p * n + j0;
      int kind = row_kind(g->avx, id, m, g->size);
      if (kind == ROW_BAD) {
        fail(g);
        return;
      }
      if (kind == ROW_ONE)
        add_run(dx + id[0] * as, dy, m);
      else
        scatter_strided(g->vec, dx, id, dy, m, as);
    }
  }
}

/* Two rows' scatter-adds at once, each in its order, two places of each a
 * step: the chains of loads and stores of different rows overlap (a store
 * and a load of one place follow each other within a row). Indices in
 * range, read unsigned: no sign extension. */
static void add_rows2(float *restrict a, float *restrict b, const int32_t *restrict ia,
                      const int32_t *restrict ib, const float *restrict da,
                      const float *restrict db, int64_t n) {
  const uint32_t *pa = (const uint32_t *)ia, *pb = (const uint32_t *)ib;
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    float x0 = da[j], y0 = db[j], x1 = da[j + 1], y1 = db[j + 1];
    uint32_t p0 = pa[j], q0 = pb[j], p1 = pa[j + 1], q1 = pb[j + 1];
    a[p0] += x0;
    b[q0] += y0;
    a[p1] += x1;
    b[q1] += y1;
  }
  for (; j < n; j++) {
    a[pa[j]] += da[j];
    b[pb[j]] += db[j];
  }
}

/* The scatter-add along the last axis: a unit is a row of index adding to
 * its row of dx (two rows at a time), or (fewer rows than threads) to a
 * range of that row's values, each part reading the whole row. */
static void scatter_last_units(void *env, int64_t begin, int64_t end) {
  GatherJob *g = env;
  int64_t n = g->n;
  for (int64_t u = begin; u < end; u++) {
    if (g->parts == 1 && u + 1 < end) {
      const int32_t *id = g->idx + u * n;
      const float *dy = g->x + u * n;
      float *a = g->y + row_base(g, u), *b = g->y + row_base(g, u + 1);
      if (!in_range(id, 2 * n, g->size)) {
        fail(g);
        return;
      }
      if (g->tiles) {
        zero(g->avx, a, g->size);
        zero(g->avx, b, g->size);
      }
      add_rows2(a, b, id, id + n, dy, dy + n, n);
      u++;
      continue;
    }
    int64_t p = u / g->parts, v0 = u % g->parts * g->part;
    int64_t v1 = g->size - v0 < g->part ? g->size : v0 + g->part;
    const int32_t *restrict id = g->idx + p * n;
    const float *restrict dy = g->x + p * n;
    float *restrict dx = g->y + row_base(g, p);
    if (!in_range(id, n, g->size)) {
      fail(g);
      return;
    }
    if (g->tiles)
      memset(dx + v0, 0, sizeof(float) * (size_t)(v1 - v0));
    if (g->parts == 1)
      for (int64_t j = 0; j < n; j++)
        dx[id[j]] += dy[j];
    else
      for (int64_t j = 0; j < n; j++)
        if (id[j] >= v0 && id[j] < v1)
          dx[id[j]] += dy[j];
  }
}

typedef struct Zero {
  float *p;
  int64_t n;
} Zero;

static void zero_part(void *env, int64_t begin, int64_t end) {
  const Zero *z = env;
  int64_t lo = begin * ZERO_BLOCK, hi = end * ZERO_BLOCK < z->n ? end * ZERO_BLOCK : z->n;
  memset(z->p + lo, 0, sizeof(float) * (size_t)(hi - lo));
}

static void run_units(DtrtCtx *ctx, int64_t units, int64_t elems,
                      void (*body)(void *env, int64_t begin, int64_t end), void *env) {
  if (elems >= PARALLEL_ELEMS && units > 1)
    dtrt_parallel_for(ctx, units, body, env);
  else if (units > 0)
    body(env, 0, units);
}

/* Splits a length of n into parts of a multiple of LANES, at least
 * MIN_PART long, enough of them that units of them keep the threads busy. */
static void split(GatherJob *g, int64_t units, int64_t n, int threads) {
  int64_t want = units < 1 || units >= 4 * (int64_t)threads ? 1 : (4 * threads + units - 1) / units;
  int64_t most = n / MIN_PART > 1 ? n / MIN_PART : 1;
  g->parts = want < most ? want : most;
  g->part = (n + g->parts - 1) / g->parts;
  g->part = (g->part + LANES - 1) / LANES * LANES;
  g->parts = g->part ? (n + g->part - 1) / g->part : 1;
  if (g->parts < 1)
    g->parts = 1;
}

/* The first index out of [0, size), for the message. */
static DtStatus bad_index(DtrtCtx *ctx, const char *op, const DtTensor *idx, int axis,
                          int64_t size) {
  const int32_t *v = idx->data;
  int64_t n = dtrt_numel(idx), k = 0;
  while (k < n && v[k] >= 0 && v[k] < size)
    k++;
  return dtrt_fail(ctx, DT_ERR_ARG, "%s: index %d is out of bounds for dimension %d with size %lld",
                   op, k < n ? v[k] : -1, axis, (long long)size);
}

/* Checks index against the whole's dims whole[0..r): its rank, each dim no
 * longer but along axis; sets g's shapes. */
static DtStatus gather_setup(DtrtCtx *ctx, const char *op, const DtTensor *idx,
                             const int64_t *whole, int r, int64_t axis, GatherJob *g) {
  char b1[128], b2[128];
  DtStatus s;
  int ax;
  if ((s = dtrt_axis(ctx, op, axis, r, &ax)))
    return s;
  bool ok = idx->rank == r && r > 0;
  for (int d = 0; ok && d < r; d++)
    ok = d == ax || idx->dim[d] <= whole[d];
  if (!ok)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: index %s does not fit %s along dims other than %d", op,
                     dtrt_type_str(idx->dtype, idx->dim, idx->rank, b1, sizeof b1),
                     dtrt_dims_str(whole, r, b2, sizeof b2), ax);
  g->r = r;
  g->axis = ax;
  g->size = whole[ax];
  memcpy(g->idim, idx->dim, sizeof g->idim);
  g->tiles = true;
  int64_t st = 1;
  for (int d = r - 1; d >= 0; d--) {
    g->xs[d] = st;
    st *= whole[d];
    g->tiles &= d == ax || idx->dim[d] == whole[d];
  }
  g->n = idx->dim[r - 1];
  g->k = idx->dim[ax];
  g->mid = 1;
  for (int d = ax + 1; d < r - 1; d++)
    g->mid *= idx->dim[d];
  g->idx = idx->data;
  /* the offsets j + id[j] as of the gathers, in int32 */
  g->avx = dtrt_avx512();
  g->gathers = g->avx && fast_gathers();
  g->vec = g->gathers && g->size * g->xs[ax] + g->n <= INT32_MAX;
  return DT_OK;
}

/* gather(x, index){axis}: y of index's shape, y[p] = x[p with its
 * coordinate along axis replaced by index[p]]. */
DTRT_TRACED(gather, DTRT_TID_KERNEL) {
  const char *op = "gather";
  DtStatus s;
  GatherJob g = {0};
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 1, 0)) ||
      (s = dtrt_check(ctx, op, "input", &in[0], DTRT_F32)) ||
      (s = dtrt_check(ctx, op, "index", &in[1], DTRT_I32)) ||
      (s = gather_setup(ctx, op, &in[1], in[0].dim, in[0].rank, dtrt_ai(a, 0, 0), &g)) ||
      (s = dtrt_check_as(ctx, op, "output", out, DTRT_F32, in[1].dim, in[1].rank)))
    return s;
  int64_t n = dtrt_numel(out), rows = g.n ? n / g.n : 0;
  g.x = in[0].data;
  g.y = out->data;
  split(&g, rows, g.n, dtrt_threads(ctx));
  run_units(ctx, rows * g.parts, n, gather_units, &g);
  return g.bad ? bad_index(ctx, op, &in[1], g.axis, g.size) : DT_OK;
}

/* gather_grad(index, dy){axis, shape...}: dx of that shape, zeros with each
 * dy[p] added at the place gather read y[p] from; in row-major order of dy,
 * so the same on any number of threads (each part adds to its own elements
 * of dx, those of some places along dims other than axis or, along the
 * last, some values of a row). */
DTRT_TRACED(gather_grad, DTRT_TID_KERNEL) {
  const char *op = "gather_grad";
  DtStatus s;
  GatherJob g = {0};
  int r = out->rank;
  if ((s = dtrt_kbegin(ctx, op, in, nin, 2, 2, out, a, 1 + DT_MAX_RANK, 0)) ||
      (s = dtrt_check(ctx, op, "index", &in[0], DTRT_I32)) ||
      (s = dtrt_check_as(ctx, op, "dy", &in[1], DTRT_F32, in[0].dim, in[0].rank)) ||
      (s = dtrt_check(ctx, op, "output", out, DTRT_F32)))
    return s;
  if (dtrt_ni(a) != 1 + r)
    return dtrt_fail(ctx, DT_ERR_ARG, "gather_grad: %d shape attributes for an output of rank %d",
                     dtrt_ni(a) - 1, r);
  for (int d = 0; d < r; d++)
    if (a->i[1 + d] != out->dim[d])
      return dtrt_fail(ctx, DT_ERR_ARG, "gather_grad: output dim %d is %lld, shape says %lld", d,
                       (long long)out->dim[d], (long long)a->i[1 + d]);
  if ((s = gather_setup(ctx, op, &in[0], out->dim, r, a->i[0], &g)))
    return s;
  int64_t n = dtrt_numel(&in[0]), rows = g.n ? n / g.n : 0, threads = dtrt_threads(ctx);
  g.x = in[1].data;
  g.y = out->data;
  if (!rows || !g.size)
    g.tiles = false;
  if (!g.tiles) {
    Zero z = {out->data, dtrt_numel(out)};
    run_units(ctx, (z.n + ZERO_BLOCK - 1) / ZERO_BLOCK, z.n, zero_part, &z);
  }
  if (!rows)
    return DT_OK;
  if (g.axis == r - 1) {
    g.parts = rows < threads && g.size >= 2 * MIN_PART ? threads : 1;
    g.part = (g.size + g.parts - 1) / g.parts;
    run_units(ctx, rows * g.parts, n, scatter_last_units, &g);
  } else {
    int64_t fibres = rows / g.k;
    split(&g, fibres, g.n, (int)threads);
    run_units(ctx, fibres * g.parts, n, scatter_units, &g);
  }
  return g.bad ? bad_index(ctx, op, &in[0], g.axis, g.size) : DT_OK;
}
