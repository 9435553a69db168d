/* interp_int.h: what the interpreter (interp.c) shares with the mesh
 * interpreter (interp_mesh.c), which runs every device's interpreter in one
 * process. */
#ifndef DTC_INTERP_INT_H
#define DTC_INTERP_INT_H

#include "ir.h"

struct Interp {
  Module *m;
  DtrtCtx *ctx;
  void **buf;        /* by global index */
  int nbuf;
  int device;        /* mesh position whose blocks buf holds; -1: whole globals */
  int64_t step;
  char err[512];
};

typedef struct Loop Loop;

/* One function running on one interpreter. A loop under way at pc holds
 * the run of its body's current iteration, which may itself stand at a
 * collective: runs nest, and the innermost one is where the function is. */
typedef struct Run {
  Interp *it;
  Func *f;
  void **val;          /* by inst id */
  void *const *outputs;
  void *const *args;   /* a body's operands, by arg index */
  int pc, nout;
  bool stored;
  Loop *loop;          /* the repeat at pc, under way; NULL: none */
} Run;


/* Starts running f on it: outputs[k], when not NULL, receives output k. */
void interp_begin(Run *r, Interp *it, Func *f, void *const *outputs);
/* Evaluates up to the end of the function or its next collective, which may
 * lie in the body of a loop (then interp_innermost(r) stands at it, and the
 * next call resumes there). False with it->err set on a kernel error. */
bool interp_to_comm(Run *r);
/* The run that stands where r is: r, or the body run of its loop under way,
 * and so on down. */
Run *interp_innermost(Run *r);
/* Frees the values and any loop under way; a run that stored (ok) advances
 * the step. */
void interp_end(Run *r, bool ok);
/* The zeroed buffer of `elems` 4-byte elements (one at least). */
void *interp_zalloc(int64_t elems);

#endif
