/* trace.c: the measured timeline of a model (DTRT_TRACE=FILE): wall-clock
 * spans of every kernel, collective and step, kept in the context and written
 * as a Chrome trace (JSON, viewable in Perfetto) when the model is destroyed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrt_int.h"

typedef struct Span {
  const char *name;
  double t0, t1;
  int tid;
} Span;

struct DtTrace {
  char *path;
  double origin;     /* clock at dtrt_trace_open: ts 0 */
  Span *span;
  int64_t n, cap;
  int64_t peak_bytes, rss_growth;   /* dtrt_trace_memory's; -1: none */
};

double dtrt_trace_clock(void) { return (double)dtrt_now_ns() * 1e-9; }

DtStatus dtrt_trace_open(DtrtCtx *ctx) {
  const char *file = getenv("DTRT_TRACE");
  if (!file || !file[0] || ctx->trace)
    return DT_OK;
  size_t n = strlen(file) + 32;
  DtTrace *t = dtrt_alloc(ctx, sizeof *t);
  char *path = t ? dtrt_alloc(ctx, n) : NULL;
  if (!path) {
    dtrt_free(ctx, t);
    return DT_ERR_NOMEM;
  }
  if (dtrt_nranks(ctx) > 1)
    snprintf(path, n, "%s.rank%d", file, dtrt_rank(ctx));
  else
    snprintf(path, n, "%s", file);
  DtStatus s = dtrt_check_output(ctx, "trace", path);
  if (s) {
    dtrt_free(ctx, path);
    dtrt_free(ctx, t);
    return s;
  }
  *t = (DtTrace){.path = path, .origin = dtrt_trace_clock(), .peak_bytes = -1, .rss_growth = -1};
  ctx->trace = t;
  return DT_OK;
}

void dtrt_trace_add(DtrtCtx *ctx, const char *name, int tid, double t0, double t1) {
  DtTrace *t = ctx->trace;
  if (t->n == t->cap) {
    int64_t cap = t->cap ? 2 * t->cap : 1024;
    Span *s = dtrt_alloc(ctx, (size_t)cap * sizeof *s);
    if (!s)   /* out of memory: the span is lost, the run goes on */
      return;
    if (t->n)
      memcpy(s, t->span, (size_t)t->n * sizeof *s);
    dtrt_free(ctx, t->span);
    t->span = s;
    t->cap = cap;
  }
  t->span[t->n++] = (Span){name, t0, t1, tid};
}

void dtrt_trace_memory(DtrtCtx *ctx, int64_t peak_bytes, int64_t rss_growth) {
  if (ctx && ctx->trace) {
    ctx->trace->peak_bytes = peak_bytes;
    ctx->trace->rss_growth = rss_growth;
  }
}

DtStatus dtrt_trace_kernel(DtrtCtx *ctx, const char *name, int tid, DtKernelFn fn,
                           const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a) {
  double t0 = dtrt_trace_clock();
  DtStatus s = fn(ctx, in, nin, out, a);
  dtrt_trace_add(ctx, name, tid, t0, dtrt_trace_clock());
  return s;
}

static bool write_trace(const DtTrace *t, int rank) {
  FILE *f = dtrt_open_output(t->path);
  if (!f)
    return false;
  static const char *const thread[] = {"kernels", "collectives", "steps"};
  fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
  /* the clock's reading at ts 0 and the host: traces of one host share
   * the clock (CLOCK_MONOTONIC), so their spans line up across ranks */
  char host[256] = "";
  if (gethostname(host, sizeof host - 1))
    host[0] = 0;
  for (char *c = host; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == '"' || *c == '\\')
      *c = '?';
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
             "\"args\":{\"name\":\"rank %d (measured)\",\"clock_origin_us\":%.3f,"
             "\"host\":\"%s\"}}", rank, rank, t->origin * 1e6, host);
  for (int k = 0; k < 3; k++)
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
               "\"args\":{\"name\":\"%s\"}}", rank, k, thread[k]);
  for (int64_t k = 0; k < t->n; k++) {
    const Span *s = &t->span[k];
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
               "\"pid\":%d,\"tid\":%d}",
            s->name, s->tid == DTRT_TID_STEP ? "step" : s->tid ? "comm" : "kernel",
            (s->t0 - t->origin) * 1e6, (s->t1 - s->t0) * 1e6, rank, s->tid);
  }
  if (t->peak_bytes >= 0) {   /* a counter at the end of the last span */
    double end = t->n ? t->span[t->n - 1].t1 : t->origin;
    fprintf(f, ",\n{\"name\":\"memory\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":%d,"
               "\"args\":{\"peak_bytes\":%lld,\"rss_growth\":%lld}}",
            (end - t->origin) * 1e6, rank, (long long)t->peak_bytes, (long long)t->rss_growth);
  }
  fputs("\n]}\n", f);
  bool ok = !ferror(f);
  return fclose(f) == 0 && ok;
}

void dtrt_trace_close(DtrtCtx *ctx) {
  DtTrace *t = ctx ? ctx->trace : NULL;
  if (!t)
    return;
  ctx->trace = NULL;
  if (!write_trace(t, dtrt_rank(ctx)))
    fprintf(stderr, "dtrt: cannot write the trace '%s': %s\n", t->path,
            errno == EINVAL ? "not a regular file" : strerror(errno));
  dtrt_free(ctx, t->span);
  dtrt_free(ctx, t->path);
  dtrt_free(ctx, t);
}
