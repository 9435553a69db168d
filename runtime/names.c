/* names.c: the spellings of the facts libdtrt shares with the compiler
 * (schedules, initialisers, collectives and their methods, embedding bags'
 * modes), which methods each collective kernel implements, and what a kernel
 * allocates while it runs (each kernel's file sizes its own). */
#include <string.h>

#include "dtrt_int.h"

const char *const dtrt_schedule_names[DT_SCHED_COUNT] = {"constant", "warmup", "cosine",
                                                          "linear", "step"};
const char *const dtrt_denormals_names[DT_DENORMALS_COUNT] = {"flush", "ieee"};
const char *const dtrt_init_names[DT_INIT_COUNT] = {
    "zeros", "ones", "glorot", "normal", "uniform", "kaiming_uniform", "kaiming_normal"};
const char *const dtrt_comm_method_names[DTRT_COMM_COUNT] = {"mpi", "ring", "grouped",
                                                             "hierarchical", "padded"};
const char *const dtrt_wire_names[DT_WIRE_COUNT] = {"f32", "bf16"};
const char *const dtrt_bag_mode_names[DT_BAG_COUNT] = {"sum", "mean", "max"};
const char *const dtrt_coll_names[DT_COLL_COUNT] = {"all_reduce", "all_gather",
                                                    "reduce_scatter", "all_to_all"};

#define BIT(m) (1u << DTRT_COMM_##m)
static const unsigned coll_methods[DT_COLL_COUNT] = {
  [DT_COLL_ALL_REDUCE] = BIT(MPI) | BIT(RING) | BIT(GROUPED) | BIT(HIER),
  [DT_COLL_ALL_GATHER] = BIT(MPI) | BIT(RING) | BIT(GROUPED) | BIT(PADDED),
  [DT_COLL_REDUCE_SCATTER] = BIT(MPI) | BIT(RING) | BIT(GROUPED),
  [DT_COLL_ALL_TO_ALL] = BIT(MPI) | BIT(RING),
};

bool dtrt_coll_has_method(DtColl c, int method) {
  return c >= 0 && c < DT_COLL_COUNT && method >= 0 && method < DTRT_COMM_COUNT &&
         (coll_methods[c] >> method & 1u);
}

int64_t dtrt_staged_bytes(DtStaged k, const DtTensor *in, int nin, const DtTensor *out,
                          const DtAttrs *a, int p) {
  if (!in || nin < 1 || !out || !a || k < 0 || k >= DT_STAGED_COUNT)
    return 0;
  if (k <= DT_STAGED_SHARD_SLICE)
    return dtrt_comm_staged(k, in, out, a, p);
  if (k == DT_STAGED_CROSS_ENTROPY)
    return dtrt_nn_staged(in, nin);
  if (k == DT_STAGED_BAG_GRAD)
    return dtrt_bag_staged(in, nin, a);
  if (k == DT_STAGED_DEMO)
    return dtrt_demo_staged(in, nin, out, a);
  if (k == DT_STAGED_RING)
    return dtrt_ring_staged(in, nin, out, a, p);
  if (k == DT_STAGED_SPARSE || k == DT_STAGED_SPARSE_ROWS)
    return dtrt_sparse_staged(in, nin, k == DT_STAGED_SPARSE);
  return dtrt_reduce_staged(k, in, nin, out);
}

int dtrt_name_index(const char *const *names, int n, const char *s) {
  for (int k = 0; s && k < n; k++)
    if (!strcmp(names[k], s))
      return k;
  return -1;
}
