/* schedule.c: the order of a pipeline's micro-batches on each stage. Under
 * `schedule = 1f1b` (Module.schedule), each device's @train_step.D, whose
 * micro-batches spmd emitted in GPipe's order (every forward loop, then
 * every backward one), is reordered so that stage s runs min(stages - s - 1,
 * M) forward micro-batches, then alternates one forward and one backward,
 * then the backward ones left: at most min(stages - s, M) micro-batches'
 * saved activations are live on stage s, where GPipe keeps M.
 *
 * The order comes from a timeline: with a forward loop costing 1 and a
 * backward 2, every stage's 1F1B sequence is laid out in time, each loop
 * starting once its stage is free and its input has arrived. Every
 * instruction gets a key: a staged loop its start, a send or receive (one
 * `send` on both devices) the end of the loop that sends, a broadcast the
 * step's end (what it feeds waits for the update; see order_step), an output
 * or store later still, any other instruction the largest key of its
 * operands. The step is then sorted
 * by (key, old position).
 *
 * Why it cannot deadlock: every device computes the same timeline, so a
 * send, receive or broadcast has one key on every device that takes part in
 * it, and any two events that two devices share keep their old relative
 * order on both at equal keys (the old program's order, consistent on every
 * device, breaks ties). So each device meets its events in the order of one
 * total order E over all events (key, then GPipe's order). Take the first
 * event of E not yet done: every device in it has done all of its own
 * earlier events and only local work lies between them and it, so all of
 * them reach it and it completes; by induction every event does. Sends and
 * receives between two stages therefore match in order, as MPI's
 * point-to-point calls and the mesh interpreter require. Keys never
 * decrease along an operand (checked), so the sorted order computes every
 * value before it is read; the arithmetic is GPipe's, op for op.
 *
 * Requires: spmd (per-device functions; the staged loops' sends and
 * broadcasts), comm (the collectives' methods, for the simulator), microbatch (each micro-batch's backward reads only its own
 * forward's results). Guarantees: with micro-batches over pipeline stages and
 * schedule 1f1b, every @train_step.D is in 1F1B order, or else every one is
 * in GPipe's and Module.schedule says gpipe (see pass_schedule). A step it cannot order (a collective over the stages' axis other
 * than theirs, loops it does not pair) keeps GPipe's order, with a warning. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define COST_F 1.0
#define COST_B 2.0
#define END_OF_STEP 1e300

/* The 1F1B timeline of p stages and n micro-batches: start times tf, tb
 * (by stage * n + micro-batch). */
static void timeline(int p, int n, double *tf, double *tb) {
  int seq[64][2 * IR_MAX_MICROBATCHES];   /* by stage: j for a forward, -1 - j a backward */
  int len[64] = {0}, at[64] = {0};
  double free_at[64] = {0};
  DTC_ASSERT(p <= 64);
  for (int s = 0; s < p; s++) {
    int warm = p - s - 1 < n ? p - s - 1 : n, f = 0;
    while (f < warm)
      seq[s][len[s]++] = f++;
    for (int b = 0; b < n; b++) {
      if (f < n)
        seq[s][len[s]++] = f++;
      seq[s][len[s]++] = -1 - b;
    }
  }
  for (int k = 0; k < p * n; k++)
    tf[k] = tb[k] = -1;
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; s++) {
      if (at[s] == len[s])
        continue;
      int e = seq[s][at[s]], j = e >= 0 ? e : -1 - e;
      double ready;
      if (e >= 0)
        ready = s == 0 ? 0 : tf[(s - 1) * n + j] < 0 ? -1 : tf[(s - 1) * n + j] + COST_F;
      else if (s == p - 1)
        ready = tf[s * n + j] < 0 ? -1 : tf[s * n + j] + COST_F;
      else
        ready = tb[(s + 1) * n + j] < 0 ? -1 : tb[(s + 1) * n + j] + COST_B;
      if (ready < 0)
        continue;
      double t = ready > free_at[s] ? ready : free_at[s];
      if (e >= 0)
        tf[s * n + j] = t;
      else
        tb[s * n + j] = t;
      free_at[s] = t + (e >= 0 ? COST_F : COST_B);
      at[s]++;
      moved = true;
    }
  }
  for (int s = 0; s < p; s++)
    DTC_ASSERT(at[s] == len[s]);   /* 1F1B's order of loops cannot wait on itself */
}

typedef struct Ord {
  double key;
  int pos;
  Inst *x;
} Ord;

static int by_key(const void *a, const void *b) {
  const Ord *x = a, *y = b;
  if (x->key != y->key)
    return x->key < y->key ? -1 : 1;
  return x->pos - y->pos;
}

/* The staged loop whose result (or a repeat_out of it) x is, or NULL. */
static const Inst *loop_of(const Inst *x) {
  if (x->op == OP_repeat_out)
    x = x->in[0];
  return x->op == OP_repeat ? x : NULL;
}

/* Operand q of x with sub applied: a receive's own entry (its new
 * operand), else its operand's (the value it stands for). */
static Inst *operand(const Inst *x, int q, Inst *const *sub) {
  if (x->op == OP_send && sub[x->id] && x->fn->inst.a[x->id] == x)
    return sub[x->id];
  Inst *v = x->in[q];
  return v->op == OP_bcast && sub[v->id] ? sub[v->id] : v;
}

/* Reorders f, a device's step, when apply; false (f unchanged) when it
 * cannot. */
static bool order_step(Module *m, Func *f, int n, bool apply) {
  const Mesh *mesh = &m->mesh.a[0];
  ir_renumber(f);
  int ni = f->inst.n, axis = -1, nf = 0, nb = 0;
  /* by id: micro-batch j of a forward loop (j), a backward one (-1 - j), else INT_MIN */
  int *mb = arena_alloc(m->arena, sizeof(int) * (size_t)(ni + 1));
  for (int k = 0; k < ni; k++) {
    const Inst *x = f->inst.a[k];
    mb[k] = -1 - 2 * IR_MAX_MICROBATCHES;
    if (x->op != OP_repeat)
      continue;
    const Sharding *cur[SHARD_MAX_IN];
    for (int q = 0; q < x->nin; q++)
      cur[q] = x->in[q]->shard;
    double *ratio;
    int a = shard_pipe_axis(x, cur, &ratio);
    if (a < 0)
      continue;
    if (axis >= 0 && a != axis)
      return false;
    axis = a;
    mb[k] = ir_get_int(x, "reverse", 0) ? -1 - nb++ : nf++;
  }
  if (axis < 0 || nf != n || nb != n)
    return false;
  /* backward j reads forward j's saved stacks */
  for (int k = 0; k < ni; k++) {
    const Inst *x = f->inst.a[k];
    for (int q = 0; mb[k] < 0 && mb[k] >= -n && q < x->nin; q++) {
      const Inst *l = loop_of(x->in[q]);
      if (l && l != x && mb[l->id] >= 0 && mb[l->id] != -1 - mb[k])
        return false;
    }
  }
  int p = mesh->axis_size[axis], coord[IR_MAX_MESH_AXES];
  ir_mesh_coords(mesh, f->device, coord);
  int s = coord[axis];
  double *tf = arena_alloc(m->arena, sizeof(double) * (size_t)(p * n));
  double *tb = arena_alloc(m->arena, sizeof(double) * (size_t)(p * n));
  timeline(p, n, tf, tb);
  /* The broadcasts of the forward loops wait for the update too, so that
   * the stages meet there once, not once per micro-batch: on the last stage,
   * the root, what reads a broadcast reads its operand (the same value);
   * elsewhere the head it feeds is needed only by the update and by the
   * receive of the backward loop's carry, whose operand gives only the shape
   * (the runtime's and the interpreter's `send` on its receiver), so the
   * receive takes a value of that type forward loop j has made. */
  Inst **sub = arena_alloc(m->arena, sizeof(Inst *) * (size_t)(ni + 1));
  for (int k = 0; k < ni; k++) {
    Inst *x = f->inst.a[k];
    if (ir_ops[x->op].kind != K_COMM || ir_get_int(x, "axis", -1) != axis)
      continue;
    const Inst *l = loop_of(x->in[0]);
    if (x->op == OP_bcast && s == p - 1 && l && mb[l->id] >= 0)
      sub[k] = x->in[0];
    if (x->op != OP_send || ir_get_int(x, "to", -1) != s)
      continue;
    int j = -1;
    for (int u = k + 1; u < ni && j < 0; u++)
      for (int q = 0; q < f->inst.a[u]->nin; q++)
        if (f->inst.a[u]->in[q] == x && mb[u] < 0 && mb[u] >= -n)
          j = -1 - mb[u];
    for (int u = 0; j >= 0 && u < ni && !sub[k]; u++) {
      Inst *v = f->inst.a[u];
      if (loop_of(v) && mb[loop_of(v)->id] == j && type_eq(&v->type, &x->in[0]->type))
        sub[k] = v;
    }
    if (j >= 0 && !sub[k])
      return false;
  }
  Ord *o = arena_alloc(m->arena, sizeof(Ord) * (size_t)(ni + 1));
  for (int k = 0; k < ni; k++) {
    Inst *x = f->inst.a[k];
    double in = 0, key;
    for (int q = 0; q < x->nin; q++) {
      const Inst *v = operand(x, q, sub);
      in = o[v->id].key > in ? o[v->id].key : in;
    }
    key = in;
    bool pipe_comm = ir_ops[x->op].kind == K_COMM && ir_get_int(x, "axis", -1) == axis;
    if (mb[k] >= 0) {
      key = tf[s * n + mb[k]];
    } else if (mb[k] >= -n) {
      key = tb[s * n + (-1 - mb[k])];
    } else if (x->op == OP_output || x->op == OP_store) {
      key = END_OF_STEP;
    } else if (pipe_comm && x->op == OP_send && ir_get_int(x, "to", -1) == s) {
      /* a receive: the loop that reads it, as its stage before ends it */
      const Inst *l = NULL;
      for (int u = k + 1; u < ni && !l; u++)
        for (int q = 0; q < f->inst.a[u]->nin && !l; q++)
          if (f->inst.a[u]->in[q] == x && mb[u] >= -n)
            l = f->inst.a[u];
      if (!l)
        return false;
      int j = mb[l->id];
      key = j >= 0 ? tf[(s - 1) * n + j] + COST_F : tb[(s + 1) * n + (-1 - j)] + COST_B;
    } else if (pipe_comm && (x->op == OP_send || x->op == OP_bcast)) {
      const Inst *l = loop_of(x->in[0]);
      if (!l || mb[l->id] < -n)
        return false;
      int j = mb[l->id], at = x->op == OP_send ? s : j >= 0 ? p - 1 : 0;
      key = j >= 0 ? tf[at * n + j] + COST_F : tb[at * n + (-1 - j)] + COST_B;
      /* a broadcast meets every stage: in the steady state it would stop
       * the stages ahead until the others caught up; what it feeds (the
       * head's and the embedding's gradients) waits for the update */
      if (x->op == OP_bcast)
        key = END_OF_STEP / 2;
    } else if (pipe_comm) {
      return false;
    }
    if (key < in)
      return false;
    o[k] = (Ord){key, k, x};
  }
  if (!apply)
    return true;
  for (int k = 0; k < ni; k++) {
    Inst *x = f->inst.a[k];
    Inst *in[SHARD_MAX_IN];
    for (int q = 0; q < x->nin; q++)
      in[q] = operand(x, q, sub);
    for (int q = 0; q < x->nin; q++)
      x->in[q] = in[q];
  }
  qsort(o, (size_t)ni, sizeof *o, by_key);
  for (int k = 0; k < ni; k++)
    f->inst.a[k] = o[k].x;
  ir_renumber(f);
  return true;
}

static bool staged(const Func *f) {
  if (f->device < 0 || f->body || strncmp(f->name, "train_step.", 11))
    return false;
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_send || f->inst.a[i]->op == OP_bcast)
      return true;
  return false;
}

/* Every device's step or none: a stage in 1F1B's order beside one in GPipe's
 * would wait for each other. Unless the option was written, 1F1B stays only
 * if the simulator (passes/sim.c, which walks each device's program in its
 * order) predicts a step no slower than GPipe's: a broadcast from the last
 * stage per micro-batch, with the head every stage computes after it, can
 * hold the stages back more than GPipe's waves do. */
bool pass_schedule(Module *m, Diag *d, PassRun *run) {
  (void)run;
  if (m->mesh.n == 0 || m->microbatches < 2 || m->schedule != PIPE_1F1B)
    return true;
  int nf = 0;
  for (int k = 0; k < m->func.n; k++)
    if (staged(m->func.a[k])) {
      nf++;
      if (order_step(m, m->func.a[k], m->microbatches, false))
        continue;
      if (m->schedule_loc.file)   /* asked for: say why not */
        diag_warn(d, m->schedule_loc, "the pipeline's micro-batches keep GPipe's order: the "
                  "training step has stages 1F1B does not pair");
      m->schedule = PIPE_GPIPE;
      return true;
    }
  if (!nf)
    return true;
  bool chosen = m->schedule_loc.file;
  double gpipe = chosen ? 0 : sim_step(m, NULL);
  Inst ***was = arena_alloc(m->arena, sizeof(Inst **) * (size_t)m->func.n);
  for (int k = 0; k < m->func.n; k++) {
    Func *f = m->func.a[k];
    if (!staged(f))
      continue;
    was[k] = arena_alloc(m->arena, sizeof(Inst *) * (size_t)f->inst.n);
    memcpy(was[k], f->inst.a, sizeof(Inst *) * (size_t)f->inst.n);
    order_step(m, f, m->microbatches, true);
  }
  if (chosen || sim_step(m, NULL) <= gpipe)
    return true;
  for (int k = 0; k < m->func.n; k++)
    if (staged(m->func.a[k])) {
      memcpy(m->func.a[k]->inst.a, was[k], sizeof(Inst *) * (size_t)m->func.a[k]->inst.n);
      ir_renumber(m->func.a[k]);
    }
  m->schedule = PIPE_GPIPE;
  return true;
}
