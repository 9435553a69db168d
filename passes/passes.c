/* passes.c: the pass table. The driver runs these in order; each can be
 * printed after (--print-after=NAME) and timed (--time-passes). */
#include <string.h>

#include "ir.h"
#include "passes.h"

const Pass pass_table[] = {
  {"autodiff", pass_autodiff, "training step: forward, backward, optimizer update"},
  {"plan", pass_plan, "forms of inputs and params and per-device ratios: a search, an LP"},
  {"sharding", pass_sharding, "how every tensor lies on the mesh: annotations, propagation"},
  {"spmd", pass_spmd, "per-device functions: local shapes and collectives"},
  {"comm", pass_comm, "the method of every collective, cheapest by the links' cost model"},
  {"fusion", pass_fusion, "group elementwise chains into single loops"},
  {"memplan", pass_memplan, "static liveness-based offsets in one arena per function"},
};
const int pass_count = COUNTOF(pass_table);

const Pass *pass_lookup(const char *name) {
  for (int k = 0; k < pass_count; k++)
    if (!strcmp(pass_table[k].name, name))
      return &pass_table[k];
  return NULL;
}
