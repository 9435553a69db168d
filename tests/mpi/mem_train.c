/* mem_train.c: trains examples/gpt.dt, compiled by dtc into gpt.o and gpt.h
 * for some plan, for two steps on batches made here, then prints this
 * rank's memory for the model (gpt_memory), one line per rank:
 *
 *     mem_train
 *     rank R peak_bytes B rss_growth G
 *
 * tests/mpi/memory.sh compares them with the plan's prediction. */
#include <inttypes.h>
#include <stdio.h>

#include "gpt.h"

static int32_t ids[GPT_IDS_ELEMS], nxt[GPT_NEXT_ELEMS];

int main(void) {
  gpt *m;
  if (gpt_create(&m, 42)) {
    fprintf(stderr, "mem_train: create: %s\n", gpt_error(NULL));
    return 1;
  }
  uint64_t r = 0x9e3779b97f4a7c15u;
  int rank = gpt_rank(m);
  for (int step = 0; step < 2; step++) {
    for (int k = 0; k < GPT_IDS_ELEMS; k++) {
      r ^= r << 13, r ^= r >> 7, r ^= r << 17;
      ids[k] = (int32_t)(r % GPT_DIM_V);
    }
    for (int k = 0; k < GPT_IDS_ELEMS; k++)
      nxt[k] = ids[(k + 1) % GPT_IDS_ELEMS];
    float loss;
    if (gpt_train_step(m, ids, GPT_IDS_ELEMS, nxt, GPT_NEXT_ELEMS, &loss)) {
      fprintf(stderr, "mem_train: rank %d: step %d: %s\n", rank, step, gpt_error(m));
      gpt_destroy(m);
      return 1;
    }
  }
  int64_t bytes, rss;
  if (gpt_memory(m, &bytes, &rss)) {
    fprintf(stderr, "mem_train: rank %d: memory: %s\n", rank, gpt_error(m));
    gpt_destroy(m);
    return 1;
  }
  printf("rank %d peak_bytes %" PRId64 " rss_growth %" PRId64 "\n", rank, bytes, rss);
  gpt_destroy(m);
  return 0;
}
