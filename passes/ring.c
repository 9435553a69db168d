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
#include <math.h>

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

int ring_axis(const Inst *i) {
  if (ring_op(i->op) == OP_COUNT || !i->shard || i->type.rank < 3 ||
      (i->op == OP_sdpa_grad && i->type.rank != 5))
    return -1;
  return i->shard->axis[i->type.rank == 5 ? 3 : 2];   /* after sdpa_grad's stacking dim */
}

bool ring_lower(const Module *m, const Inst *i, Inst *x) {
  int axis = ring_axis(i);
  if (axis < 0)
    return false;
  int t = i->type.rank == 5 ? 3 : 2, k = m->mesh.a[0].axis_size[axis];
  int64_t *sizes = arena_alloc(m->arena, sizeof *sizes * (size_t)k);
  ir_dim_blocks(m, i->type.dim[t], i->shard->ratio[t], k, sizes);
  x->op = ring_op(i->op);
  ir_set_int(x, "axis", axis);
  ir_set_ints(x, "sizes", sizes, k);
  return true;
}

int64_t ring_most(const int64_t *len, int k, bool causal) {
  int64_t most = 0;
  for (int j = 0; j < k; j++) {
    int64_t off, n0, n1;
    dtrt_ring_piece(len, k, j, causal && k > 1, 0, &off, &n0);
    dtrt_ring_piece(len, k, j, causal && k > 1, 1, &off, &n1);
    most = n0 + n1 > most ? n0 + n1 : most;
  }
  return most;
}

/* Each hop moves the most a hop carries of the keys (sdpa_lse), of the keys
 * and values (sdpa), or of both and their adjoints (sdpa_grad, whose
 * adjoints take one hop more, home); the members send at once, so a hop
 * takes the slowest neighbour's send. Causal, the zig-zag's partners swap
 * their late halves before the ring and the results' after it: of q, k and
 * v and then out (sdpa), q and k (sdpa_lse), q, k, v, out and dout and then
 * dq, dk and dv (sdpa_grad), about as many bytes as a hop, taken here as
 * one send on the slowest pair. */
double ring_time(const Module *m, Op op, bool causal, double block, const int *members, int k) {
  bool lse = op == OP_sdpa_lse || op == OP_ring_sdpa_lse;
  bool grad = op == OP_sdpa_grad || op == OP_ring_sdpa_grad;
  double per = lse ? 1 : grad ? 4 : 2, hop = 0, home = 0, swap = 0;
  for (int j = 0; k > 1 && j < k; j++) {
    int pair[2] = {members[j], members[(j + 1) % k]}, zig[2] = {members[j], members[k - 1 - j]};
    hop = fmax(hop, comm_cost(m, OP_send, per * block, NULL, pair, 2, 0));
    home = fmax(home, comm_cost(m, OP_send, 2 * block, NULL, pair, 2, 0));
    if (causal && zig[0] != zig[1])
      swap = fmax(swap, comm_cost(m, OP_send, per * block, NULL, zig, 2, 0));
  }
  return k > 1 ? (k - 1) * hop + (grad ? home : 0) + swap : 0;
}
