/* eval.c: @forward in evaluation mode, as torch's model.eval(): dropout is
 * the identity there (an attention's dropout too, as torch models pass
 * dropout_p only when training) and batch norm normalises by its running
 * statistics, which only a training step updates. NAME_forward evaluates;
 * NAME_train_step trains.
 *
 * Requires: autodiff done (@train_step, which trains with dropout and batch
 * statistics, is built from @forward before this). Guarantees: @forward and
 * the bodies its loops run hold no dropout (each of its users reads the
 * dropout's operand instead; an sdpa's p is 0), no store to a buffer and nothing that only
 * such a store needed, and read the running operand of each batch_stat;
 * every other function reads the batch operand. No batch_stat is left; a
 * body that @forward and another function run is copied first. */
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

static bool buffer_store(const Inst *i) {
  return i->op == OP_store && ir_global_of(i)->kind == G_BUFFER;
}

/* What evaluation keeps: outputs, stores and a body's args. */
static bool eval_root(const Inst *i) {
  return i->op == OP_output || i->op == OP_store || i->op == OP_arg;
}

static void evaluate(Module *m, Func *f) {
  ir_renumber(f);
  int n = 0;
  bool dropped = false;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      while (i->in[j]->op == OP_dropout || i->in[j]->op == OP_batch_stat)
        i->in[j] = i->in[j]->in[i->in[j]->op == OP_batch_stat];
    if (i->op == OP_repeat) {
      Func *b = ir_repeat_body(i);
      if (shared(m, f, b)) {
        b = ir_copy_body(m, b, "eval");
        ir_set_str(i, "body", b->name);
      }
      evaluate(m, b);
    }
    if (i->op == OP_sdpa && ir_get_float(i, "p", 0) > 0)
      ir_set_float(i, "p", 0);
    if (buffer_store(i))
      dropped = true;
    else if (i->op != OP_dropout && i->op != OP_batch_stat)
      f->inst.a[n++] = i;
  }
  f->inst.n = n;
  ir_renumber(f);
  if (dropped)
    ir_drop_unneeded(f, eval_root);
}

/* A training function reads each batch_stat's batch operand. */
static void train(Func *f) {
  int n = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      while (i->in[j]->op == OP_batch_stat)
        i->in[j] = i->in[j]->in[0];
    if (i->op != OP_batch_stat)
      f->inst.a[n++] = i;
  }
  if (n < f->inst.n) {
    f->inst.n = n;
    ir_renumber(f);
  }
}

bool pass_eval(Module *m, Diag *d, PassRun *run) {
  (void)d, (void)run;
  Func *f = ir_find_func(m, "forward");
  if (f)
    evaluate(m, f);
  for (int k = 0; k < m->func.n; k++)
    train(m->func.a[k]);
  return true;
}
