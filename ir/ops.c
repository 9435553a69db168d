/* ops.c: the op table, built from ops.def. Shape rules live in shape.c,
 * FLOP counts in cost.c; the passes keep their own per-op tables built from
 * ops.def (derivatives in passes/autodiff.c, sharding forms in
 * passes/forms.c). */
#include <string.h>

#include "dtrt.h"
#include "ir.h"

#define OP(id, name, minin, maxin, kind, attrs) \
  bool shape_##id(Inst *, char *, size_t); \
  double flops_##id(const Inst *);
#include "ops.def"
#undef OP

const OpInfo ir_ops[OP_COUNT] = {
#define OP(id, name, minin, maxin, kind, attrs) \
  [OP_##id] = {name, minin, maxin, kind, attrs, shape_##id, flops_##id},
#include "ops.def"
#undef OP
};

Op ir_op_lookup(const char *name) {
  for (int k = 0; k < OP_COUNT; k++)
    if (!strcmp(ir_ops[k].name, name))
      return (Op)k;
  return OP_COUNT;
}

/* The collectives that take a method, in libdtrt's order (DtColl). */
static_assert(OP_all_gather == OP_all_reduce + DT_COLL_ALL_GATHER &&
              OP_reduce_scatter == OP_all_reduce + DT_COLL_REDUCE_SCATTER &&
              OP_all_to_all == OP_all_reduce + DT_COLL_ALL_TO_ALL,
              "collective ops in DtColl order");

bool ir_has_method(Op op, int method) {
  return op >= OP_all_reduce && op <= OP_all_to_all &&
         dtrt_coll_has_method((DtColl)(op - OP_all_reduce), method);
}
