/* ir_build_util.h: what the IR-building test helpers (test_autodiff_util.c,
 * test_codegen_util.c) share: types by their dims, and ops whose inputs come
 * from a va_list. */
#ifndef IR_BUILD_UTIL_H
#define IR_BUILD_UTIL_H

#include <stdarg.h>

#include "ir.h"

Type ty(DType dt, int rank, ...);
/* ir_new with its nin inputs (Inst *) taken from ap; at most 16. */
Inst *ir_new_va(Func *f, Op op, Loc loc, int nin, va_list ap);

#endif
