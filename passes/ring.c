/* ring.c: ring attention, spmd's lowering of an attention whose sequence is
 * split over a mesh axis (context parallelism). forms.c lets sdpa, sdpa_lse
 * and sdpa_grad (stacked) split T (Tq = Tk, no mask) as they split B and H:
 * every operand and the result over the same axis. A device's block of
 * queries needs every key, so its copy becomes ring_sdpa, ring_sdpa_lse or
 * ring_sdpa_grad (runtime/kernels_ring.c), which pass the blocks of keys
 * and values around the axis group: the op names the axis and the block
 * lengths of its members (uneven ones as the split's ratios give them), and
 * each device finds its block's place in the sequence (causal) and in the
 * whole dropout mask (`at`) from them.
 *
 * Requires: the op's sharding (Inst.shard), its device copy not yet
 * finished. Guarantees: the copy is the ring op when T is split, else left
 * alone. */
#include "passes.h"

/* The ring op of an attention op, OP_COUNT when it has none. */
static Op ring_op(Op op) {
  switch (op) {
  case OP_sdpa: return OP_ring_sdpa;
  case OP_sdpa_lse: return OP_ring_sdpa_lse;
  case OP_sdpa_grad: return OP_ring_sdpa_grad;
  default: return OP_COUNT;
  }
}

bool ring_lower(const Module *m, const Inst *i, Inst *x) {
  Op op = ring_op(i->op);
  if (op == OP_COUNT || !i->shard)
    return false;
  int t = i->type.rank == 5 ? 3 : 2;   /* the result's T: after sdpa_grad's stacking dim */
  if (i->type.rank < 3 || (i->op == OP_sdpa_grad && i->type.rank != 5))
    return false;
  int axis = i->shard->axis[t];
  if (axis < 0)
    return false;
  int k = m->mesh.a[0].axis_size[axis];
  int64_t *sizes = arena_alloc(m->arena, sizeof *sizes * (size_t)k);
  ir_dim_blocks(m, i->type.dim[t], i->shard->ratio[t], k, sizes);
  x->op = op;
  ir_set_int(x, "axis", axis);
  ir_set_ints(x, "sizes", sizes, k);
  return true;
}
