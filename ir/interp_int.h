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

/* One function running on one interpreter. */
typedef struct Run {
  Interp *it;
  Func *f;
  void **val;          /* by inst id */
  void *const *outputs;
  void *const *args;   /* a body's operands, by arg index */
  int pc, nout;
  bool stored;
} Run;


/* Starts running f on it: outputs[k], when not NULL, receives output k. */
void interp_begin(Run *r, Interp *it, Func *f, void *const *outputs);
/* Evaluates up to the end of the function or its next collective. False
 * with it->err set on a kernel error. */
bool interp_to_comm(Run *r);
/* Frees the values; a run that stored (ok) advances the step. */
void interp_end(Run *r, bool ok);
/* The zeroed buffer of `elems` 4-byte elements (one at least). */
void *interp_zalloc(int64_t elems);

#endif
