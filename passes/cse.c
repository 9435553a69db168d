/* cse.c: an op computed twice is computed once. Autodiff writes the sums
 * a derivative needs where it needs them: batch norm's weight gradient and
 * its input gradient both sum dy y, a square's two operands each get dy x.
 *
 * Requires: autodiff and eval. Guarantees: in every function, no two
 * elementwise, reduction or data-movement ops have the same op, operands
 * and attributes (the first stays and the later ones' users read it), and
 * no such op is left unused; every other op stays where it was. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

static bool pure(const Inst *i) {
  OpKind k = ir_ops[i->op].kind;
  return k == K_ELEM || k == K_REDUCE || k == K_SHAPE;
}

/* An op cse never drops: every one but the pure. */
static bool kept_op(const Inst *i) { return !pure(i); }

static bool same(const Inst *a, const Inst *b) {
  if (a->op != b->op || a->nin != b->nin)
    return false;
  for (int k = 0; k < a->nin; k++)
    if (a->in[k] != b->in[k])
      return false;
  return ir_same_attrs(a, b);
}

static uint64_t hash(const Inst *i) {
  uint64_t h = (uint64_t)i->op * 0x9e3779b97f4a7c15u;
  for (int k = 0; k < i->nin; k++)
    h = (h ^ (uint64_t)i->in[k]->id) * 0x100000001b3u;
  return h ^ h >> 29;
}

static void cse_func(Func *f) {
  ir_renumber(f);
  int n = f->inst.n, cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  Inst **repl = calloc((size_t)n + 1, sizeof *repl), **table = calloc((size_t)cap, sizeof *table);
  DTC_ASSERT(repl && table);
  bool merged = false;
  for (int k = 0; k < n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      if (repl[i->in[j]->id])
        i->in[j] = repl[i->in[j]->id];
    if (!pure(i))
      continue;
    size_t s = (size_t)hash(i) & (size_t)(cap - 1);
    while (table[s] && !same(table[s], i))
      s = (s + 1) & (size_t)(cap - 1);
    if (table[s])
      repl[k] = table[s], merged = true;
    else
      table[s] = i;
  }
  if (merged)   /* what no kept op reads goes */
    ir_drop_unneeded(f, kept_op);
  free(repl);
  free(table);
}

bool pass_cse(Module *m, Diag *d, PassRun *run) {
  (void)d, (void)run;
  for (int k = 0; k < m->func.n; k++)
    cse_func(m->func.a[k]);
  return true;
}
