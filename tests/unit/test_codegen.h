/* test_codegen.h: what the fusion, memplan and codegen tests share: modules
 * built with the IR builder, a scratch directory, and running cg_emit. */
#ifndef TEST_CODEGEN_H
#define TEST_CODEGEN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codegen.h"
#include "ir.h"
#include "ir_build_util.h"
#include "passes.h"

typedef struct CT {
  Arena *a;
  Module *m;
  Func *f;            /* @forward */
  Diag d;             /* writes into log */
  char *log;
  size_t loglen;
  char dir[64];       /* scratch directory, removed by ct_free */
  int part_ops;       /* ct_emit's CgOptions.part_ops (0: CG_PART_OPS) */
} CT;

void ct_init(CT *t, const char *model);
void ct_free(CT *t);
/* The diagnostics so far. */
const char *ct_log(CT *t);

/* Adds a global (params and state start with `init`) and loads it in @forward. */
Inst *ct_global(CT *t, const char *name, GlobalKind kind, Type type, const char *init);
Inst *ct_load(CT *t, Func *f, const char *name);
/* An op of @forward: ct_new leaves it open for attributes (then ir_finish). */
Inst *ct_new(CT *t, Op op, int nin, ...);
Inst *ct_op(CT *t, Op op, int nin, ...);
Inst *ct_const(CT *t, double v);
void ct_output(CT *t, Inst *x, const char *name);
/* Makes @forward's output `loss` the training objective of optimizer opt
 * ("sgd" with momentum 0.9, or "adam"). */
void ct_train(CT *t, const char *opt, double lr);

/* Every elementwise op is in a group; each group is contiguous. */
void ct_check_groups(Func *f);
/* A buffer of f's plan: a value with an offset (id >= 0) or the scratch of
 * repeat -1 - id, live from step def to step last, at [off, off + size). */
typedef struct CtBuf {
  int id, def, last;
  int64_t off, size;
} CtBuf;
/* The plan's buffers (free with free), with lives and sizes computed here,
 * independently of memplan.c: a group is one step; a reshape extends the
 * life of what it aliases; a repeat_out lives from its repeat's step; a
 * repeat's scratch lives at its step, sized as docs/IR.md says. The size
 * is the value's bytes, not rounded. */
CtBuf *ct_plan_bufs(Func *f, int *nbuf, int *nstep);
/* Two buffers live at the same step never overlap; each is 64-byte aligned
 * and inside the arena. A sweep over the steps with the live addresses in a
 * segment tree: n log n, for plans of any length. */
void ct_check_plan(Func *f);
/* Runs autodiff (when the module trains), fusion and memplan, verifying the
 * IR and checking groups and plan after each; asserts. */
void ct_passes(CT *t);
/* cg_emit into t->dir/NAME.EXT; returns the path, or NULL when cg_emit
 * failed (the reason is in ct_log). */
const char *ct_emit(CT *t, const char *emit, const char *target, const char *cpu, int opt);
/* A whole file, NUL-terminated (free with free); NULL if unreadable. */
char *ct_read(const char *path, size_t *len);
/* system() of the command formatted from fmt. */
int ct_sh(const char *fmt, ...);

/* Compiles t's module, links it with test_codegen_harness.c, runs it for
 * `steps` training steps and runs the interpreter alike, and compares
 * forward outputs, losses, params and state (ct_close_to), each step from
 * the harness's state. fill_input, if not NULL, chooses the f32 inputs;
 * check_output(k, first input, output k, its length), if not NULL, checks
 * each forward output besides. */
void ct_run(CT *t, int steps, void (*fill_input)(float *x, int64_t n),
            void (*check_output)(int k, const float *x, const float *got, int64_t n));

/* Every |got - want| <= CT_RTOL times the tensor's largest finite
 * magnitude: relative error in the max norm. (Per element it would fail on
 * values that come out of cancellation, where fused multiply-adds round
 * differently.) An infinity must be matched exactly. Fails the test naming
 * `what` and the worst element otherwise. */
#define CT_RTOL 1e-5
void ct_close_to(const float *got, const float *want, int64_t n, const char *what);
/* The same with tolerance rtol in place of CT_RTOL. */
void ct_close_tol(const float *got, const float *want, int64_t n, const char *what, double rtol);

#endif
