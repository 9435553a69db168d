/* test_comm_bf16.c: libdtrt's summing collectives with bf16 on the wire
 * (all_reduce, reduce_scatter; every method) on as many ranks as it is
 * started with (1 to 4), on sizes that are not multiples of the group,
 * against references computed from every rank's deterministic inputs:
 *
 *   - the ring, bit for bit, against a loop rounding where kernels_comm.c
 *     says it does: chunk c's running sum starts at member c+1, each hop
 *     rounds what it forwards and the receiver adds its own unrounded value
 *     in f32, the owner rounds the final sum;
 *   - every method on two members, bit for bit, where there is one order:
 *     bf16(bf16(x0) + bf16(x1));
 *   - every method within the documented bound gamma(2p-1) sum |x| of the
 *     exact sum (gamma(n) = n u / (1 - n u), u = 2^-8 + 2^-24), its result
 *     a bf16 value, the same on every member (all_reduce);
 *   - what each call allocates against dtrt_staged_bytes.
 *
 * Checks record and go on, so every rank makes the same calls; rank 0
 * prints "N passed, M failed", the exit status says if any rank failed. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "dtrt.h"
#include "../unit/rt_count.h"
#include "mpi_check.h"

static Count *counted;

/* Member r's element k: magnitudes from 2^-4 to 2^4 of both signs, with
 * every bit of an f32's mantissa in use, so rounding matters. */
static float value(int r, int64_t k) {
  uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(k * 40503u + 0x9e3779b9u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12, h *= 0x297a2d39u, h ^= h >> 15;
  float m = 1.0f + (float)(h & 0x7fffffu) * 0x1p-23f;
  return ldexpf(h >> 31 ? -m : m, (int)(h >> 23 & 7u) - 4);
}

static float round_bf16(float x) { return dtrt_bf16_to_f32(dtrt_bf16_from_f32(x)); }

static const char *methods[] = {"mpi", "ring", "grouped", "hierarchical"};

/* The ring's sum of element k of chunk c (members' chunks as kernels_comm.c
 * cuts them): from member c+1 around to c, rounding each forwarded sum. */
static float ring_reference(int c, int64_t k) {
  float s = value((c + 1) % np, k);
  for (int j = 2; j <= np; j++)
    s = round_bf16(s) + value((c + j) % np, k);
  return round_bf16(s);
}

/* Whether got is within the bound of every method of the exact sum of
 * element k, gamma(2p-1) sum |x| (kernels_comm.c), and a bf16 value. */
static bool within(float got, int64_t k) {
  double exact = 0, abs = 0;
  for (int r = 0; r < np; r++)
    exact += value(r, k), abs += fabs(value(r, k));
  double u = ldexp(1, -8) + ldexp(1, -24), nu = (2 * np - 1) * u, bound = nu / (1 - nu) * abs;
  uint32_t bits;
  memcpy(&bits, &got, sizeof bits);
  return fabs(got - exact) <= bound && !(bits & 0xffffu);
}

/* Kernel k's call; what it held while it ran must be dtrt_staged_bytes and
 * libdtrt's 64-byte header for each of its blocks (at most three at once). */
static DtStatus staged(DtrtCtx *ctx, DtKernelFn kfn, DtStaged which, const DtTensor *in,
                       DtTensor *out, const DtAttrs *a, const char *what) {
  long long before = counted->bytes;
  counted->peak = before;
  DtStatus s = kfn(ctx, in, 1, out, a);
  long long held = counted->peak - before, want = dtrt_staged_bytes(which, in, 1, out, a, np);
  CHECK(s || (held >= want && held <= want + 3 * 64),
        "%s: held %lld bytes while it ran; dtrt_staged_bytes: %lld", what, held, want);
  return s;
}

/* Element k's chunk among np near-even chunks of n (the first n % np one
 * more): the ring all_reduce's cut. */
static int chunk_of(int64_t n, int64_t k) {
  int64_t q = n / np, rem = n % np, big = rem * (q + 1);
  return k < big ? (int)(k / (q + 1)) : (int)(rem + (k - big) / q);
}

static void test_all_reduce(DtrtCtx *ctx) {
  static const int64_t sizes[] = {0, 1, 2, 5, 7, 1001, 12347};
  for (int method = 0; method <= DTRT_COMM_HIER; method++)
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
      int64_t n = sizes[z];
      float *x = malloc((size_t)n * 4 + 4), *first = malloc((size_t)n * 4 + 4);
      for (int64_t k = 0; k < n; k++)
        x[k] = value(me, k);
      DtTensor t = {.dtype = DTRT_F32, .rank = 1, .dim = {n}, .data = x};
      DtAttrs a = {.i = {0, method, DT_WIRE_BF16}, .ni = 3};
      DtStatus s = staged(ctx, dtrt_k_all_reduce, DT_STAGED_ALL_REDUCE, &t, &t, &a, "all_reduce");
      CHECK(s == DT_OK, "all_reduce bf16 %s n=%lld: %s", methods[method], (long long)n,
            dtrt_errmsg(ctx));
      memcpy(first, x, (size_t)n * 4);
      MPI_Bcast(first, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
      int64_t bad = -1, apart = -1, off = -1;
      for (int64_t k = 0; k < n; k++) {
        float want = np == 1                    ? value(0, k)
                     : method == DTRT_COMM_RING ? ring_reference(chunk_of(n, k), k)
                     : np == 2 ? round_bf16(round_bf16(value(0, k)) + round_bf16(value(1, k)))
                               : x[k];
        if (bad < 0 && memcmp(&x[k], &want, 4))
          bad = k;
        if (apart < 0 && memcmp(&x[k], &first[k], 4))
          apart = k;
        if (off < 0 && np > 1 && !within(x[k], k))
          off = k;
      }
      CHECK(bad < 0, "all_reduce bf16 %s n=%lld: element %lld is %a, the reference %s",
            methods[method], (long long)n, (long long)bad, bad < 0 ? 0 : x[bad],
            method == DTRT_COMM_RING ? "ring's" : "pair's");
      CHECK(apart < 0, "all_reduce bf16 %s n=%lld: element %lld differs from rank 0's",
            methods[method], (long long)n, (long long)apart);
      CHECK(off < 0, "all_reduce bf16 %s n=%lld: element %lld (%a) beyond the bound",
            methods[method], (long long)n, (long long)off, off < 0 ? 0 : x[off]);
      free(x), free(first);
    }
}

/* Uneven blocks of the split dim for np members, one empty when np > 2. */
static void blocks(int64_t *len, int64_t *total) {
  *total = 0;
  for (int m = 0; m < np; m++)
    *total += len[m] = np == 1 ? 5 : (m * 5 + 3) % 7;
}

/* reduce_scatter over [outer, total, inner] split along dim 1 (outer > 1:
 * the blocks are packed first). */
static void test_reduce_scatter(DtrtCtx *ctx) {
  static const int64_t shapes[][2] = {{1, 1}, {1, 3}, {3, 1}, {2, 7}};
  for (int method = 0; method <= DTRT_COMM_GROUPED; method++)
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
      int64_t len[16], total, outer = shapes[sh][0], inner = shapes[sh][1];
      blocks(len, &total);
      int64_t at = 0;
      for (int m = 0; m < me; m++)
        at += len[m];
      int64_t n = outer * total * inner, mine = outer * len[me] * inner;
      float *x = malloc((size_t)n * 4 + 4), *y = malloc((size_t)mine * 4 + 4);
      for (int64_t k = 0; k < n; k++)
        x[k] = value(me, k);
      DtTensor in = {.dtype = DTRT_F32, .rank = 3, .dim = {outer, total, inner}, .data = x};
      DtTensor out = {.dtype = DTRT_F32, .rank = 3, .dim = {outer, len[me], inner}, .data = y};
      DtAttrs a = {.i = {0, 1}, .ni = 2};
      for (int m = 0; m < np; m++)
        a.i[a.ni++] = len[m];
      a.i[a.ni++] = method;
      a.i[a.ni++] = DT_WIRE_BF16;
      DtStatus s = staged(ctx, dtrt_k_reduce_scatter, DT_STAGED_REDUCE_SCATTER, &in, &out, &a,
                          "reduce_scatter");
      CHECK(s == DT_OK, "reduce_scatter bf16 %s shape %zu: %s", methods[method], sh,
            dtrt_errmsg(ctx));
      /* the ring works on the blocks packed member after member: element
       * (o, at + i, j) of member me's block is element k of the whole */
      int64_t bad = -1, off = -1, pos = 0;
      for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < len[me]; i++)
          for (int64_t j = 0; j < inner; j++, pos++) {
            int64_t k = (o * total + at + i) * inner + j;
            float want = np == 1                    ? value(0, k)
                         : method == DTRT_COMM_RING ? ring_reference(me, k)
                         : np == 2 ? round_bf16(round_bf16(value(0, k)) + round_bf16(value(1, k)))
                                   : y[pos];
            if (bad < 0 && memcmp(&y[pos], &want, 4))
              bad = pos;
            if (off < 0 && np > 1 && !within(y[pos], k))
              off = pos;
          }
      CHECK(bad < 0, "reduce_scatter bf16 %s shape %zu: element %lld is %a", methods[method], sh,
            (long long)bad, bad < 0 ? 0 : y[bad]);
      CHECK(off < 0, "reduce_scatter bf16 %s shape %zu: element %lld beyond the bound",
            methods[method], sh, (long long)off);
      free(x), free(y);
    }
}

/* A wire format the kernels do not know, and one on a collective that does
 * not sum: errors, not crashes. */
static void test_errors(DtrtCtx *ctx) {
  float x[4] = {1, 2, 3, 4};
  DtTensor t = {.dtype = DTRT_F32, .rank = 1, .dim = {4}, .data = x};
  DtAttrs a = {.i = {0, DTRT_COMM_RING, 7}, .ni = 3};
  CHECK(dtrt_k_all_reduce(ctx, &t, 1, &t, &a) == DT_ERR_ARG &&
            strstr(dtrt_errmsg(ctx), "wire format 7"),
        "all_reduce with wire 7: %s", dtrt_errmsg(ctx));
  int64_t len[16] = {0}, total = 4;
  for (int m = 0; m < np; m++)
    len[m] = total / np + (m < total % np);
  float y[4];
  DtTensor part = {.dtype = DTRT_F32, .rank = 1, .dim = {len[me]}, .data = y};
  DtAttrs g = {.i = {0, 0}, .ni = 2};
  for (int m = 0; m < np; m++)
    g.i[g.ni++] = len[m];
  g.i[g.ni++] = DTRT_COMM_MPI;
  g.i[g.ni++] = DT_WIRE_BF16;
  CHECK(dtrt_k_all_gather(ctx, &part, 1, &t, &g) == DT_ERR_ARG, "all_gather with a wire format");
}

int main(void) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  counted = &c;
  DtrtCtx *ctx = dtrt_ctx_new_with(&al);
  DtStatus s = dtrt_comm_init(ctx);
  CHECK(s == DT_OK, "comm_init: %s", dtrt_errmsg(ctx));
  me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  if (np > 1) {
    test_all_reduce(ctx);
    test_reduce_scatter(ctx);
  } else { /* one rank: no MPI to broadcast with; the copies only */
    float x[3] = {1.1f, 2.2f, 3.3f}, y[3];
    DtTensor t = {.dtype = DTRT_F32, .rank = 1, .dim = {3}, .data = x};
    DtTensor u = {.dtype = DTRT_F32, .rank = 1, .dim = {3}, .data = y};
    DtAttrs a = {.i = {0, DTRT_COMM_RING, DT_WIRE_BF16}, .ni = 3};
    CHECK(dtrt_k_all_reduce(ctx, &t, 1, &u, &a) == DT_OK && !memcmp(x, y, sizeof x),
          "all_reduce bf16 over one member copies: %s", dtrt_errmsg(ctx));
  }
  test_errors(ctx);
  int total[2];
  mpi_totals(total);
  dtrt_ctx_free(ctx);
  return mpi_report(total, c.allocs, c.frees);
}
