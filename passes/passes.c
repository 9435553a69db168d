/* passes.c: the pass table and the one function that runs it. The driver,
 * the tests and the benchmarks all run the pipeline through passes_run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

const Pass pass_table[] = {
  {"autodiff", pass_autodiff, "training step: forward, backward, optimizer update"},
  {"eval", pass_eval, "@forward in evaluation mode: dropout is the identity"},
  {"cse", pass_cse, "an elementwise, reduction or data-movement op computed twice computed once"},
  {"determinize", pass_determinize, "deterministic mode: sums over the batch in fixed pieces, in order"},
  {"plan", pass_plan, "forms of inputs and params and per-device ratios: a search, an LP"},
  {"microbatch", pass_microbatch, "@train_step's loops cut into micro-batches, as many as asked or planned"},
  {"sharding", pass_sharding, "how every tensor lies on the mesh: annotations, propagation"},
  {"spmd", pass_spmd, "per-device functions: local shapes and collectives"},
  {"exchange", pass_exchange, "DeMo: each rank's own gradient, its compressed momentum all-gathered"},
  {"coalesce", pass_coalesce, "independent collectives over an axis as one: all_to_alls, gathers, buckets of sums"},
  {"comm", pass_comm, "the method of every collective, cheapest by the links' cost model"},
  {"schedule", pass_schedule, "a pipeline's micro-batches in 1F1B order on every stage"},
  {"fusion", pass_fusion, "group elementwise chains into single loops"},
  {"memplan", pass_memplan, "static liveness-based offsets in one arena per function"},
};
const int pass_count = COUNTOF(pass_table);
static_assert(COUNTOF(pass_table) <= COUNTOF(((PassRun *)0)->ms), "a time slot per pass");

const Pass *pass_lookup(const char *name) {
  for (int k = 0; k < pass_count; k++)
    if (!strcmp(pass_table[k].name, name))
      return &pass_table[k];
  return NULL;
}

static bool prints_after(const PassOptions *o, const char *pass) {
  if (o->print_all)
    return true;
  for (int k = 0; k < o->nprint_after; k++)
    if (!strcmp(o->print_after[k], pass))
      return true;
  return false;
}

/* The module as its IR text, for a second run; NULL when the planner has
 * nothing to ask of one (no plan auto, or no loop to recompute). */
static char *snapshot(const Module *m) {
  bool loop = false;
  for (int k = 0; k < m->func.n && !loop; k++)
    for (int i = 0; i < m->func.a[k]->inst.n && !loop; i++)
      loop = m->func.a[k]->inst.a[i]->op == OP_repeat;
  return m->plan == PLAN_AUTO && m->mesh.n && loop ? ir_print_string(m) : NULL;
}

static bool same_loc(Loc a, Loc b) {
  return a.file && b.file && a.line == b.line && a.col == b.col &&
         !strcmp(a.file->name, b.file->name);
}

/* m again from its text, the loops at loc[0 .. n) recomputing their forward
 * in the backward (`remat`), as the planner asked when nothing fit without. */
static void with_remat(Module *m, const char *text, const Loc *loc, int n) {
  Module *again = ir_parse_string(m->arena, m->name, text);
  DTC_ASSERT(again);
  again->no_coalesce = m->no_coalesce;   /* a driver's flag the text does not hold */
  *m = *again;
  for (int k = 0; k < m->func.n; k++) {
    m->func.a[k]->mod = m;
    for (int i = 0; i < m->func.a[k]->inst.n; i++) {
      Inst *r = m->func.a[k]->inst.a[i];
      for (int j = 0; r->op == OP_repeat && j < n; j++)
        if (same_loc(r->loc, loc[j]))
          ir_set_int(r, "remat", 1);
    }
  }
  m->remat_planned = loc;
  m->nremat_planned = n;
}

/* Whether the planner's loop is new to the n at loc. */
static bool new_loop(Loc want, const Loc *loc, int n) {
  if (!want.file)
    return false;
  for (int j = 0; j < n; j++)
    if (same_loc(want, loc[j]))
      return false;
  return true;
}

bool passes_run(Module *m, Diag *d, const PassOptions *o, PassRun *run) {
  static const PassOptions all = {.verify_each = true};
  PassRun local;
  o = o ? o : &all;
  run = run ? run : &local;
  memset(run, 0, sizeof *run);
  run->extra_memory = o->extra_memory;
  run->extra_arg = o->extra_arg;
  DTC_ASSERT(!o->stop_after || pass_lookup(o->stop_after));
  char *text = snapshot(m);
  Loc *remat = NULL;
  int nremat = 0;
  for (int k = 0; k < pass_count; k++) {
    const Pass *p = &pass_table[k];
    double t0 = dtrt_now_ns() / 1e6;
    bool ok = p->run(m, d, run);
    run->ms[k] = dtrt_now_ns() / 1e6 - t0;
    run->ran = k + 1;
    /* a loop asked for is found again by its location, so it is never
     * asked for twice */
    DTC_ASSERT(ok || !run->want_remat.file || (text && new_loop(run->want_remat, remat, nremat)));
    if (!ok && run->want_remat.file) {
      Loc *more = arena_alloc(m->arena, sizeof *more * (size_t)(nremat + 1));
      if (nremat)
        memcpy(more, remat, sizeof *more * (size_t)nremat);
      more[nremat++] = run->want_remat;
      remat = more;
      with_remat(m, text, remat, nremat);   /* and from the start */
      run->want_remat = (Loc){0};
      k = -1;
      continue;
    }
    if (!ok || d->nerr) {
      free(text);
      return false;
    }
    t0 = dtrt_now_ns() / 1e6;
    if (o->verify_each && !ir_verify(m, d))
      dtc_die(__FILE__, __LINE__, "IR does not verify after pass '%s'", p->name);
    run->verify_ms += dtrt_now_ns() / 1e6 - t0;
    if (prints_after(o, p->name)) {
      FILE *out = o->print_to ? o->print_to : stderr;
      fprintf(out, "; IR after %s\n", p->name);
      ir_print(out, m);
    }
    if (o->stop_after && !strcmp(o->stop_after, p->name))
      break;
  }
  free(text);
  return true;
}
