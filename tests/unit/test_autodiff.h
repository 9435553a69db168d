/* test_autodiff.h: what the autodiff tests share: small modules built by hand,
 * deterministic random data, and gradient checks through the interpreter. */
#ifndef TEST_AUTODIFF_H
#define TEST_AUTODIFF_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ir.h"
#include "ir_build_util.h"
#include "passes.h"

#define TM_MAXVAL 32

/* A module with an empty @forward, and the values its globals start with. */
typedef struct TM {
  Arena *a;
  Module *m;
  Func *f;
  SrcFile *src;           /* a fake source so every op has a location */
  Diag d;
  char *log;              /* diagnostics written to d */
  size_t loglen;
  int nval;
  struct { const char *name; void *data; } val[TM_MAXVAL];
} TM;

void tm_init(TM *t);
void tm_free(TM *t);
/* The text of the diagnostics so far. */
const char *tm_log(TM *t);
Loc tm_loc(TM *t, int line);
/* The pipeline up to and including autodiff; false after errors. */
bool tm_autodiff(TM *t);

/* Adds a global and a load of it to @forward. Its values start uniform in
 * [-1, 1] (f32) or 0 (i32); tm_data gives them to change. */
Inst *tm_global(TM *t, const char *name, GlobalKind kind, Type type);
Inst *tm_param(TM *t, const char *name, Type type);
Inst *tm_input(TM *t, const char *name, Type type);
void *tm_data(TM *t, const char *name);
/* An op of @forward; attributes may follow before ir_finish for tm_new. */
Inst *tm_new(TM *t, Op op, int nin, ...);
Inst *tm_op(TM *t, Op op, int nin, ...);
Inst *tm_const(TM *t, double v);
void tm_output(TM *t, Inst *x, const char *name);
/* An interpreter over t->m holding the values of tm_data. */
Interp *tm_interp(TM *t);

/* The module of the running test, and cmocka fixtures that tm_init it before
 * each test and tm_free it after. */
extern TM t;
int tm_setup(void **state);
int tm_teardown(void **state);

/* Deterministic uniform numbers. */
void rng_seed(uint64_t s);
double rng_uniform(double lo, double hi);
void fill_uniform(float *p, int64_t n, double lo, double hi);
/* p[0..n) a shuffle of lo, lo+step, ... plus noise below step/4: distinct
 * values (no ties for max) that keep their order under small perturbations. */
void fill_distinct(float *p, int64_t n, double lo, double step);
/* Values in +-[lo, hi]: away from the kink of relu at 0. */
void fill_away_from_zero(float *p, int64_t n, double lo, double hi);

/* Makes the loss sum(y * w) with fixed random w, builds d loss / d param for
 * every param with autodiff_grads, and compares each with central finite
 * differences of the forward (loss accumulated in double):
 * |ad - fd| <= GC_ATOL + GC_RTOL |fd|. Prints the worst error and fails the
 * test beyond the tolerance. */
#define GC_H 1e-2
#define GC_ATOL 1e-3
#define GC_RTOL 1e-2
void gradcheck(TM *t, Inst *y, const char *label);

#endif
