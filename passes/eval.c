/* eval.c: @forward in evaluation mode, as torch's model.eval(): dropout is
 * the identity there. NAME_forward evaluates; NAME_train_step trains.
 *
 * Requires: autodiff done (@train_step, which trains with dropout, is built
 * from @forward before this). Guarantees: @forward holds no dropout, each of
 * its users reads the dropout's operand instead; @train_step is untouched. */
#include "passes.h"

bool pass_eval(Module *m, Diag *d, PassRun *run) {
  (void)d, (void)run;
  Func *f = ir_find_func(m, "forward");
  if (!f)
    return true;
  int n = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      while (i->in[j]->op == OP_dropout)
        i->in[j] = i->in[j]->in[0];
    if (i->op != OP_dropout)
      f->inst.a[n++] = i;
  }
  f->inst.n = n;
  ir_renumber(f);
  return true;
}
