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
 * body that @forward and another function run is copied first, and its
 * loops stack no output that nothing reads (a body's buffer updates). */
#include <stdlib.h>
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

/* The repeats of m that run body b. */
static int runners(const Module *m, const Func *b) {
  int n = 0;
  for (int k = 0; k < m->func.n; k++)
    for (int i = 0; i < m->func.a[k]->inst.n; i++)
      n += m->func.a[k]->inst.a[i]->op == OP_repeat && ir_repeat_body(m->func.a[k]->inst.a[i]) == b;
  return n;
}

/* Drops the stacked outputs of f's loops that nothing reads, in evaluation
 * the running statistics a body updates (their stores are gone), and what
 * only they needed in the body, whose loops then lose theirs in turn. */
static void prune(Module *m, Func *f) {
  for (int k = 0; k < f->inst.n; k++) {
    Inst *r = f->inst.a[k];
    if (r->op != OP_repeat || runners(m, ir_repeat_body(r)) != 1)
      continue;
    Func *b = ir_repeat_body(r);
    int nout = ir_func_noutputs(b), keep = (int)ir_get_int(r, "carry", 1);
    int *to = calloc((size_t)nout + 1, sizeof *to);
    DTC_ASSERT(to);
    for (int j = 0; j < nout; j++)
      to[j] = j < keep || j == 0 ? 0 : -1;
    for (int i = k + 1; i < f->inst.n; i++)
      if (f->inst.a[i]->op == OP_repeat_out && f->inst.a[i]->in[0] == r)
        to[ir_get_int(f->inst.a[i], "index", 0)] = 0;
    int n = 0, out = 0, dropped = 0;
    for (int j = 0; j < nout; j++)
      if (to[j] == 0)
        to[j] = n++;
    for (int i = 0; i < b->inst.n; i++) {
      Inst *x = b->inst.a[i];
      if (x->op != OP_output || to[out++] >= 0)
        b->inst.a[i - dropped] = x;
      else
        dropped++;
    }
    b->inst.n -= dropped;
    for (int i = k + 1; dropped && i < f->inst.n; i++)
      if (f->inst.a[i]->op == OP_repeat_out && f->inst.a[i]->in[0] == r)
        ir_set_int(f->inst.a[i], "index", to[ir_get_int(f->inst.a[i], "index", 0)]);
    free(to);
    if (dropped) {
      ir_renumber(b);
      ir_drop_unneeded(b, eval_root);
    }
    prune(m, b);
  }
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
  if (f) {
    evaluate(m, f);
    prune(m, f);
  }
  for (int k = 0; k < m->func.n; k++)
    train(m->func.a[k]);
  return true;
}
