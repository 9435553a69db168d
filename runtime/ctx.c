/* ctx.c: the runtime context: allocation hook, last error message, status names.
 * There is no global state: everything lives in a DtrtCtx. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrt_int.h"

static void *sys_alloc(void *user, size_t n) {
  (void)user;
  void *p;
  return posix_memalign(&p, 64, n) ? NULL : p;
}

static void sys_free(void *user, void *p) {
  (void)user;
  free(p);
}

DtrtCtx *dtrt_ctx_new(void) { return dtrt_ctx_new_with(NULL); }

DtrtCtx *dtrt_ctx_new_with(const DtAllocator *a) {
  DtAllocator use = {sys_alloc, sys_free, NULL};
  if (a) {
    if (!a->alloc || !a->free)
      return NULL;
    use = *a;
  }
  DtrtCtx *ctx = use.alloc(use.user, sizeof *ctx);
  if (!ctx)
    return NULL;
  memset(ctx, 0, sizeof *ctx);
  ctx->a = use;
  return ctx;
}

void dtrt_ctx_free(DtrtCtx *ctx) {
  if (!ctx)
    return;
  dtrt_pool_free(ctx);
  dtrt_comm_free(ctx);
  dtrt_demo_free(ctx);
  DtAllocator a = ctx->a;
  a.free(a.user, ctx);
}

void dtrt_ctx_set_read_limit(DtrtCtx *ctx, int64_t bytes) {
  if (ctx)
    ctx->read_limit = bytes > 0 ? bytes : 0;
}

DtComm **dtrt_ctx_comm(DtrtCtx *ctx) { return &ctx->comm; }

const char *dtrt_errmsg(const DtrtCtx *ctx) { return ctx ? ctx->err : "no context"; }

const char *dtrt_status_name(DtStatus s) {
  static const char *const names[] = {"ok",        "bad argument", "out of memory",
                                      "i/o error", "bad format",   "mismatch",
                                      "checksum mismatch", "communication error",
                                      "internal error"};
  _Static_assert(sizeof names / sizeof names[0] == DT_ERR_INTERNAL + 1, "status names");
  return (unsigned)s <= DT_ERR_INTERNAL ? names[s] : "unknown status";
}

DtStatus dtrt_fail(DtrtCtx *ctx, DtStatus s, const char *fmt, ...) {
  if (ctx && fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err, sizeof ctx->err, fmt, ap);
    va_end(ap);
  }
  return s;
}

/* Each block carries its size in a 64-byte header before it, so that
 * dtrt_free knows what it gives back: ctx->bytes is what the context holds,
 * ctx->peak_bytes the most it held at once. */
enum { HEADER = 64 };

int64_t dtrt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void *dtrt_alloc(DtrtCtx *ctx, size_t n) {
  void *p = dtrt_alloc_raw(ctx, n);
  return p ? memset(p, 0, n) : NULL;
}

void *dtrt_alloc_raw(DtrtCtx *ctx, size_t n) {
  if (!ctx)
    return NULL;
  unsigned char *p = n <= SIZE_MAX - HEADER ? ctx->a.alloc(ctx->a.user, n + HEADER) : NULL;
  if (!p) {
    dtrt_fail(ctx, DT_ERR_NOMEM, "out of memory allocating %zu bytes", n);
    return NULL;
  }
  if ((uintptr_t)p % 64) {
    ctx->a.free(ctx->a.user, p);
    dtrt_fail(ctx, DT_ERR_INTERNAL, "allocator returned memory not 64-byte aligned");
    return NULL;
  }
  memcpy(p, &n, sizeof n);
  ctx->bytes += (int64_t)n;
  if (ctx->bytes > ctx->peak_bytes)
    ctx->peak_bytes = ctx->bytes;
  return p + HEADER;
}

void dtrt_free(DtrtCtx *ctx, void *p) {
  if (!ctx || !p)
    return;
  unsigned char *q = (unsigned char *)p - HEADER;
  size_t n;
  memcpy(&n, q, sizeof n);
  ctx->bytes -= (int64_t)n;
  ctx->a.free(ctx->a.user, q);
}

bool dtrt_avx512(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}
