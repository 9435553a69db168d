/* ir_build_util.c: the helpers of ir_build_util.h. */
#include "ir_build_util.h"

Type ty(DType dt, int rank, ...) {
  Type r = {dt, rank, {0}};
  va_list ap;
  va_start(ap, rank);
  for (int d = 0; d < rank; d++)
    r.dim[d] = va_arg(ap, int);
  va_end(ap);
  return r;
}

Inst *ir_new_va(Func *f, Op op, Loc loc, int nin, va_list ap) {
  Inst *in[16];
  for (int k = 0; k < nin; k++)
    in[k] = va_arg(ap, Inst *);
  return ir_new(f, op, loc, nin, in);
}
