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

/* ---- sharding.c ------------------------------------------------------- */

/* Chooses the sharding of every value of @train_step and @forward and of
 * every global (Inst.shard, Global.shard) when the module has a mesh. */
bool pass_sharding(Module *m, Diag *d);
#define SHARD_MAX_AXIS 64   /* devices along one mesh axis */
/* The form of inst that yields result sharding r: what each operand must be
 * (req[k]), given what they are (cur[k]; NULL: not decided). False when no
 * form of the op yields r. */
bool shard_form(const Module *m, const Inst *inst, const Sharding *r, const Sharding *const *cur,
                Sharding *req);
/* Same splits (axes and block lengths) and partial axes, for type t. */
bool shard_same(const Module *m, const Type *t, const Sharding *a, const Sharding *b);

/* One collective of a reshard: op over mesh axis `axis` on dimension `dim`
 * (all_to_all: from `dim` to `to`), taking the value from `before` to `after`. */
typedef struct ShardStep {
  Op op;
  int axis, dim, to;
  Sharding before, after;
} ShardStep;
#define SHARD_MAX_STEPS (3 * IR_MAX_MESH_AXES)
/* The collectives that turn a value of global type t sharded by s into r, in
 * order, into st; their count, or -1 when r is a partial sum s is not. */
int shard_plan(const Module *m, const Type *t, const Sharding *s, const Sharding *r,
               ShardStep *st);
/* Bytes each device sends for one step (ring algorithms, blocks taken as even):
 * all_reduce 2(k-1)/k of the block, all_gather (k-1)/k of the gathered
 * block, reduce_scatter and all_to_all (k-1)/k of the block, shard_slice 0. */
double shard_step_bytes(const Module *m, const Type *t, const ShardStep *st);

/* ---- spmd.c ----------------------------------------------------------- */

/* Replaces @train_step and @forward by per-device copies @F.D (Func.device
 * = D, local shapes, explicit collectives). */
bool pass_spmd(Module *m, Diag *d);
/* Bytes each device sends for collective c of a per-device function, from its
 * local types (the formulas of shard_step_bytes); 0 for shard_slice. */
double spmd_comm_bytes(const Inst *c);
/* The sharding plan (--emit=plan): every global's sharding and blocks, every
 * device's memory, every step's collectives with their source lines. */
void spmd_report(FILE *out, const Module *m);

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
