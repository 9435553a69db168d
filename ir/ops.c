/* ops.c: the op table, built from ops.def. Shape rules live in shape.c,
 * derivatives in passes/autodiff.c, FLOP counts in cost.c. */
#include <string.h>

#include "ir.h"

#define OP(id, name, minin, maxin, kind, attrs) \
  bool shape_##id(Inst *, char *, size_t); \
  void grad_##id(GradCtx *, Inst *); \
  double flops_##id(const Inst *);
#include "ops.def"
#undef OP

const OpInfo ir_ops[OP_COUNT] = {
#define OP(id, name, minin, maxin, kind, attrs) \
  [OP_##id] = {name, minin, maxin, kind, attrs, shape_##id, grad_##id, flops_##id},
#include "ops.def"
#undef OP
};

Op ir_op_lookup(const char *name) {
  for (int k = 0; k < OP_COUNT; k++)
    if (!strcmp(ir_ops[k].name, name))
      return (Op)k;
  return OP_COUNT;
}
