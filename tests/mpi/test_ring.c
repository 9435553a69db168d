/* test_ring.c: ring attention's forward with its rows' log-sum-exp
 * (ring_sdpa_with_lse) on as many ranks as it is started with (alone, or
 * under mpiexec -n 2 or -n 3), every rank holding its block of one
 * sequence of uneven blocks: out[0] has the bits of ring_sdpa's and out[1]
 * those of ring_sdpa_lse's (memcmp: one ulp off fails), causal (the
 * zig-zag, with pieces of one row and of none) and not, with an f32 and an
 * i32 mask, with dropout and a place in a larger whole; an out[1] of the
 * wrong shape is refused on every rank, naming the op and lse; traced, its
 * span is ring_sdpa's. Checks record and go on, as in test_comm.c. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "dtrt.h"
#include "dtrt_int.h" /* dtrt_trace_open */
#include "../unit/rt_count.h"
#include "../unit/rt_text.h"
#include "mpi_check.h"

enum { NONE, F32, I32 };

typedef struct Case {
  int64_t b, h, d;
  int64_t len[3];    /* the members' blocks, the first np of them */
  bool causal;
  int mask;          /* NONE, F32 [T] or I32 [B, 1, 1, T] */
  double p;          /* dropout */
  bool place;        /* a place in a whole of B + 1 batches, this block at batch 1 */
} Case;

/* Element k of tensor `which` of the whole: a fixed hash, in [-2, 2). */
static float value(int which, int64_t k) {
  uint32_t h = (uint32_t)(which * 2654435761u) ^ (uint32_t)(k * 40503u + 0x9e3779b9u);
  h ^= h >> 15, h *= 0x2c1b3c6du, h ^= h >> 12, h *= 0x297a2d39u, h ^= h >> 15;
  return (float)h * 0x1p-30f - 2.0f;
}

/* This member's rows [off, off + n) of each head of tensor `which`, of a
 * whole [B, H, T, D]. */
static float *block(const Case *c, int which, int64_t t, int64_t off, int64_t n) {
  float *x = malloc(sizeof(float) * (size_t)(c->b * c->h * n * c->d));
  for (int64_t bh = 0; bh < c->b * c->h; bh++)
    for (int64_t e = 0; e < n * c->d; e++)
      x[bh * n * c->d + e] = value(which, (bh * t + off) * c->d + e);
  return x;
}

static DtTensor t4(float *data, int64_t b, int64_t h, int64_t t, int64_t d) {
  return (DtTensor){.data = data, .dtype = DTRT_F32, .rank = 4, .dim = {b, h, t, d}};
}

/* ring_sdpa, ring_sdpa_lse and ring_sdpa_with_lse of c on this member's
 * block: the last's two outputs the first two's bits. */
static void one_case(DtrtCtx *ctx, const Case *c, int n) {
  int64_t t = 0, off = 0;
  for (int m = 0; m < np; m++)
    off += m < me ? c->len[m] : 0, t += c->len[m];
  int64_t nr = c->len[me], no = c->b * c->h * nr * c->d, nl = c->b * c->h * nr;
  float *q = block(c, 0, t, off, nr), *k = block(c, 1, t, off, nr), *v = block(c, 2, t, off, nr);
  int32_t *mask = malloc(sizeof(int32_t) * (size_t)(c->b * t));
  for (int64_t e = 0; e < c->b * t; e++) {
    float u = value(3, e);
    if (c->mask == I32)
      mask[e] = e == 0 ? 0 : e % t == 0 || u >= -1.5f;   /* batch 0's row 0 sees no key */
    else
      ((float *)mask)[e] = u < -1.8f ? -INFINITY : u;
  }
  DtTensor mk = t4((float *)mask, 1, 1, 1, t);
  if (c->mask == I32)
    mk.dtype = DTRT_I32, mk.dim[0] = c->b;
  DtTensor in[4] = {t4(q, c->b, c->h, nr, c->d), t4(k, c->b, c->h, nr, c->d),
                    t4(v, c->b, c->h, nr, c->d), mk};
  DtTensor two[3] = {in[0], in[1], mk};
  int nm = c->mask != NONE;
  DtAttrs a = {.ni = 1, .nf = 2, .f = {0.3, c->p}, .step = 5};
  for (int m = 0; m < np; m++)
    a.i[a.ni++] = c->len[m];
  a.i[a.ni++] = c->causal;
  a.i[a.ni++] = 77;
  if (c->place) {
    int64_t at[8] = {c->b + 1, c->h, t, t, 1, 0, off, 0};
    memcpy(&a.i[a.ni], at, sizeof at);
    a.ni += 8;
  }
  float *o1 = malloc(sizeof(float) * (size_t)no), *o2 = malloc(sizeof(float) * (size_t)no);
  float *l1 = malloc(sizeof(float) * (size_t)nl), *l2 = malloc(sizeof(float) * (size_t)nl);
  memset(o2, 0xff, sizeof(float) * (size_t)no);
  memset(l2, 0xff, sizeof(float) * (size_t)nl);
  DtTensor out = t4(o1, c->b, c->h, nr, c->d);
  DtTensor lse = {.data = l1, .dtype = DTRT_F32, .rank = 3, .dim = {c->b, c->h, nr}};
  DtTensor both[2] = {t4(o2, c->b, c->h, nr, c->d), lse};
  both[1].data = l2;
  DtStatus s1 = dtrt_k_ring_sdpa(ctx, in, 3 + nm, &out, &a);
  CHECK(!s1, "case %d: ring_sdpa: %s", n, dtrt_errmsg(ctx));
  DtStatus s2 = dtrt_k_ring_sdpa_lse(ctx, two, 2 + nm, &lse, &a);
  CHECK(!s2, "case %d: ring_sdpa_lse: %s", n, dtrt_errmsg(ctx));
  DtStatus s3 = dtrt_k_ring_sdpa_with_lse(ctx, in, 3 + nm, both, &a);
  CHECK(!s3, "case %d: ring_sdpa_with_lse: %s", n, dtrt_errmsg(ctx));
  CHECK(!memcmp(o1, o2, sizeof(float) * (size_t)no), "case %d: out[0] is not ring_sdpa's", n);
  CHECK(!memcmp(l1, l2, sizeof(float) * (size_t)nl), "case %d: out[1] is not ring_sdpa_lse's",
        n);
  int64_t finite = 0;
  for (int64_t e = 0; e < nl; e++)
    finite += isfinite(l1[e]);
  CHECK(finite > 0, "case %d: no finite lse", n);
  void *all[] = {q, k, v, mask, o1, o2, l1, l2};
  for (size_t e = 0; e < sizeof all / sizeof all[0]; e++)
    free(all[e]);
}

/* An out[1] not f32 [B, H, n_r] is refused on every rank before any
 * message, naming the op and lse; traced, the kernel's span is
 * "ring_sdpa" on the communication thread. */
static void test_refusals_trace(DtrtCtx *ctx) {
  enum { B = 1, H = 2, N = 3, D = 4 };
  float x[B * H * N * D] = {0}, o[B * H * N * D], l[B * H * (N + 1)];
  DtAttrs a = {.ni = 1, .nf = 1, .f = {0.5}};
  for (int m = 0; m < np; m++)
    a.i[a.ni++] = N;
  DtTensor in[3] = {t4(x, B, H, N, D), t4(x, B, H, N, D), t4(x, B, H, N, D)};
  DtTensor good = {.data = l, .dtype = DTRT_F32, .rank = 3, .dim = {B, H, N}};
  DtTensor bad[3] = {good, good, good};
  bad[0].dim[2] = N + 1;
  bad[1].rank = 2;
  bad[2].dtype = DTRT_I32;
  for (int n = 0; n < 3; n++) {
    DtTensor both[2] = {t4(o, B, H, N, D), bad[n]};
    DtStatus s = dtrt_k_ring_sdpa_with_lse(ctx, in, 3, both, &a);
    CHECK(s == DT_ERR_ARG && strstr(dtrt_errmsg(ctx), "ring_sdpa_with_lse: lse "),
          "bad lse %d: status %d, '%s'", n, s, dtrt_errmsg(ctx));
  }
  char path[300], file[320];
  const char *tmp = getenv("TMPDIR");
  int pid = (int)getpid();
  if (mpi_up())   /* one name, rank 0's, for the ranks' files */
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  snprintf(path, sizeof path, "%s/ring_trace_%d.json", tmp && tmp[0] ? tmp : "/tmp", pid);
  if (np > 1)
    snprintf(file, sizeof file, "%s.rank%d", path, me);
  else
    snprintf(file, sizeof file, "%s", path);
  setenv("DTRT_TRACE", path, 1);
  CHECK(dtrt_trace_open(ctx) == DT_OK, "trace_open: %s", dtrt_errmsg(ctx));
  unsetenv("DTRT_TRACE");
  DtTensor both[2] = {t4(o, B, H, N, D), good};
  DtStatus s = dtrt_k_ring_sdpa_with_lse(ctx, in, 3, both, &a);
  CHECK(!s, "ring_sdpa_with_lse traced: %s", dtrt_errmsg(ctx));
  dtrt_trace_close(ctx);
  char *text = rt_slurp(file);
  CHECK(strstr(text, "{\"name\":\"ring_sdpa\",\"cat\":\"comm\"") && !strstr(text, "with_lse"),
        "the trace lacks a ring_sdpa span: %s", text);
  free(text);
  remove(file);
}

int main(void) {
  Count c = {.limit = -1};
  DtAllocator al = {count_alloc, count_free, &c};
  setenv("DTRT_NUM_THREADS", "1", 1);   /* ranks share the cores */
  DtrtCtx *ctx = dtrt_ctx_new_with(&al);
  DtStatus s = dtrt_comm_init(ctx);
  CHECK(s == DT_OK, "comm_init: %s", dtrt_errmsg(ctx));
  me = dtrt_rank(ctx), np = dtrt_nranks(ctx);
  static const Case cases[] = {
    {1, 2, 13, {70, 37, 19}, true, NONE, 0, false},
    {1, 2, 13, {70, 37, 19}, false, F32, 0.3, false},
    {2, 1, 5, {1, 4, 3}, true, I32, 0.5, false},
    {1, 2, 7, {37, 70, 21}, true, F32, 0.2, true},
    {2, 3, 9, {5, 12, 9}, false, I32, 0, false},
  };
  if (np > 3)
    CHECK(false, "the cases are for 1 to 3 ranks, not %d", np);
  for (int n = 0; np <= 3 && n < (int)(sizeof cases / sizeof cases[0]); n++)
    one_case(ctx, &cases[n], n);
  if (np <= 3)
    test_refusals_trace(ctx);
  int total[2];
  mpi_totals(total);
  dtrt_ctx_free(ctx);
  return mpi_report(total, c.allocs, c.frees);
}
