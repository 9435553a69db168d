/* memory.c: what libdtrt allocates for a compiled model on each device, as
 * the generated code and the runtime ask for it, against the devices'
 * memory: --emit=plan's "memory per device" and the warning of a plan that
 * does not fit. Requires: memplan (Func.work_bytes, staged_bytes), the
 * targets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

/* The largest work arena (staged: the most staged bytes) of device dev's
 * functions; a body's lies in its caller's. */
static int64_t most_of(const Module *m, int dev, bool staged) {
  int64_t most = 0;
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    int64_t v = staged ? f->staged_bytes : f->work_bytes;
    if (f->device == dev && !f->body && v > most)
      most = v;
  }
  return most;
}

int64_t cg_work_bytes(const Module *m, int dev) { return most_of(m, dev, false); }

int64_t cg_staged_bytes(const Module *m, int dev) { return most_of(m, dev, true); }

CgMemory cg_memory(const Module *m, int dev, const CgTargets *ts, CgMatmul how) {
  const CgDevice *cd = &ts->dev[dev < 0 ? 0 : dev];
  CgMemory r = {.state = cg_state_layout(m, dev, NULL), .work = cg_work_bytes(m, dev),
                .staged = cg_staged_bytes(m, dev)};
  const Func *train = cg_device_func(m, "train_step", dev), *fwd = cg_device_func(m, "forward", dev);
  r.train = train ? train->work_bytes : 0;
  r.forward = fwd ? fwd->work_bytes : 0;
  int64_t slot = cg_gemm_scratch(m, dev, how, ts->t[cd->target].triple, cd->cpu, cd->features);
  r.scratch = slot + cg_conv_scratch(m, dev, how);
  r.thread = slot + dtrt_pool_bytes(2);
  int nin = 0;
  for (int k = 0; k < m->global.n; k++)
    nin += m->global.a[k].kind == G_INPUT;
  int nout = 0;
  if (fwd) {
    const Inst **outs = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(fwd->inst.n + 1));
    nout = cg_func_outputs(fwd, cg_live(fwd), outs);
  }
  r.tables = dtrt_model_table_bytes(nin, m->global.n + nout, dev >= 0);
  r.total = r.state + r.work + r.scratch + r.staged + r.tables;
  return r;
}

/* Onto out, as ir_bytes_str writes it. */
static void print_size(FILE *out, double b) {
  char buf[32];
  fputs(ir_bytes_str(b, buf, sizeof buf), out);
}

static const char *size_str(Arena *a, double b) {
  char buf[32];
  return arena_strdup(a, ir_bytes_str(b, buf, sizeof buf));
}

/* The cluster's device at mesh position pos; NULL: none. */
static const Device *device_at(const Module *m, int pos) {
  int dv = m->mesh.n ? m->mesh.a[0].dev[pos] : -1;
  return m->cluster && dv >= 0 && dv < m->cluster->dev.n ? &m->cluster->dev.a[dv] : NULL;
}

void cg_memory_report(FILE *out, const Module *m, const CgTargets *ts, CgMatmul how) {
  int ndev = cg_devices(m);
  fputs("memory per device (what libdtrt allocates for the model: the state block of params "
        "and optimizer state; one work block, the larger of the arenas of train_step and "
        "forward; the scratch blocks of dtc's GEMM on one thread and of the convolutions' "
        "columns; the most one kernel allocates while it runs, a collective's packed copy or "
        "a large sum's partial rows; the total adds libdtrt's tables for the model; a further "
        "thread adds at most its own GEMM scratch and its place in the pool):\n", out);
  for (int dev = ndev ? 0 : -1; dev < ndev; dev++) {
    CgMemory r = cg_memory(m, dev, ts, how);
    const Device *dv = dev >= 0 ? device_at(m, dev) : NULL;
    char num[16];
    snprintf(num, sizeof num, "%d", dev < 0 ? 0 : dev);
    fprintf(out, "  %s %-8s state ", num, dv ? dv->name : "-");
    print_size(out, (double)r.state);
    fputs(", work ", out);
    print_size(out, (double)r.train);
    fputs(" / ", out);
    print_size(out, (double)r.forward);
    fputs(", scratch ", out);
    print_size(out, (double)r.scratch);
    fputs(", staged ", out);
    print_size(out, (double)r.staged);
    fputs(", total ", out);
    print_size(out, (double)r.total);
    fprintf(out, " (%lld B)", (long long)r.total);
    if (dv && dv->mem > 0) {
      fputs(" of ", out);
      print_size(out, (double)dv->mem);
      fprintf(out, " (%.0f%%)", 100.0 * (double)r.total / (double)dv->mem);
      if (r.total > dv->mem) {
        fputs(": OVER by ", out);
        print_size(out, (double)(r.total - dv->mem));
      }
    }
    fputs("; each further thread up to ", out);
    print_size(out, (double)r.thread);
    fprintf(out, " (%lld B)\n", (long long)r.thread);
  }
}

int cg_memory_check(const Module *m, const CgTargets *ts, CgMatmul how, Diag *d) {
  int ndev = cg_devices(m), over = 0;
  for (int dev = 0; dev < ndev; dev++) {
    const Device *dv = device_at(m, dev);
    CgMemory r = cg_memory(m, dev, ts, how);
    if (!dv || dv->mem <= 0 || r.total <= dv->mem)
      continue;
    Arena *a = m->arena;
    diag_warn(d, m->mesh.a[0].loc,
              "device '%s' needs %s for model '%s' (state %s, work %s, scratch %s, staged %s), "
              "%s more than its memory of %s",
              dv->name, size_str(a, (double)r.total), m->name, size_str(a, (double)r.state),
              size_str(a, (double)r.work), size_str(a, (double)r.scratch),
              size_str(a, (double)r.staged),
              size_str(a, (double)(r.total - dv->mem)), size_str(a, (double)dv->mem));
    over++;
  }
  return over;
}
