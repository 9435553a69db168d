/* eval.c: @forward in evaluation mode, as torch's model.eval(): dropout is
 * the identity there. NAME_forward evaluates; NAME_train_step trains.
 *
 * Requires: autodiff done (@train_step, which trains with dropout, is built
 * from @forward before this). Guarantees: @forward and the bodies its loops
 * run hold no dropout, each of its users reads the dropout's operand
 * instead; @train_step and the bodies it runs are untouched (a body both
 * run is copied first). */
#include <string.h>

#include "passes.h"

/* Whether a function other than f runs body b. */
static bool shared(const Module *m, const Func *f, const Func *b) {
  for (int k = 0; k < m->func.n; k++) {
    const Func *g = m->func.a[k];
    for (int i = 0; g != f && i < g->inst.n; i++)
      if (g->inst.a[i]->op == OP_repeat && ir_repeat_body(g->inst.a[i]) == b)
        return true;
  }
  return false;
}

static void evaluate(Module *m, Func *f) {
  ir_renumber(f);
  int n = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      while (i->in[j]->op == OP_dropout)
        i->in[j] = i->in[j]->in[0];
    if (i->op == OP_repeat) {
      Func *b = ir_repeat_body(i);
      if (shared(m, f, b)) {
        b = ir_copy_body(m, b, "eval");
        ir_set_str(i, "body", b->name);
      }
      evaluate(m, b);
    }
    if (i->op != OP_dropout)
      f->inst.a[n++] = i;
  }
  f->inst.n = n;
  ir_renumber(f);
}

bool pass_eval(Module *m, Diag *d, PassRun *run) {
  (void)d, (void)run;
  Func *f = ir_find_func(m, "forward");
  if (f)
    evaluate(m, f);
  return true;
}
