/* passes.h: the passes of pass_table (passes.c) and the helpers they share.
 * Sections are named after the file that owns them. */
#ifndef DTC_PASSES_H
#define DTC_PASSES_H

#include "ir.h"

/* ---- autodiff.c ------------------------------------------------------- */

/* Builds @train_step: forward, backward and optimizer update. */
bool pass_autodiff(Module *m, Diag *d);
/* Builds @name from src (which outputs m->train.loss): the forward, then
 * `output "loss"`, then one output per param the loss depends on, in global
 * order, named after the param and holding d loss / d param. No update. NULL
 * after reporting errors to d. For tests and debugging. */
Func *autodiff_grads(Module *m, Func *src, const char *name, Diag *d);

/* ---- optimizer.c ------------------------------------------------------ */

/* Appends to f the update of m->train.opt for every global k with grad[k] set
 * (value[k]: the param as loaded in f) and stores the results. False after
 * reporting errors to d. */
bool opt_emit(Module *m, Func *f, Inst *const *value, Inst *const *grad, Diag *d);

/* ---- fusion.c --------------------------------------------------------- */

/* Groups elementwise chains into loops (Inst.fuse) and reschedules each
 * function so a group's members are contiguous. */
bool pass_fusion(Module *m, Diag *d);

/* The users of every inst of a function, by id (ids must be current). */
typedef struct Uses {
  int *off;       /* users of inst i: u[off[i] .. off[i+1]) */
  Inst **u;
} Uses;
Uses uses_build(Arena *a, const Func *f);

/* ---- memplan.c -------------------------------------------------------- */

/* Gives every value that needs memory an offset in its function's work arena
 * (Inst.offset) and sets Func.work_bytes. */
bool pass_memplan(Module *m, Diag *d);
/* Peak memory and the largest buffers of every function (--emit=plan). */
void memplan_report(FILE *out, const Module *m);
/* True when the producer of out's operand writes straight into the caller's
 * output buffer, so `output` itself copies nothing. */
bool memplan_output_direct(const Inst *out);
/* The global read or written by a load or store. */
const Global *memplan_global(const Inst *i);

#endif
