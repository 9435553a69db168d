/* seqflat.c: a split past a tensor's first dimension (the sequence's, dim 1
 * of [B, T, D]) kept through the flattening reshapes that would gather it.
 * A reshape [B, T, D] -> [B*T, D] carries only a split of its group's first
 * dimension (forms.c), so with T split the sharding pass gathers T there.
 * Two users of such a flattening need only that both operands' rows agree,
 * not their order, and are rewritten:
 *  - a weight's gradient, x^T @ dy with x and dy flattened
 *    ([B*T, D]^T @ [B*T, D']): the product of the unflattened operands
 *    with B folded into its k (`kfold`, [B, T, D]^T @ [B, T, D'] -> [D, D'],
 *    summed over B and T); T split alike in both makes it a partial sum,
 *    all-reduced as under data parallelism, each device's share one GEMM
 *    on its own rows ([B, T_local, D] lies in memory as [B*T_local, D]);
 *  - cross_entropy (and its gradient, the _sum forms) of flattened logits
 *    and labels: both flattened with the split dimension moved to the front
 *    ([T, B, V] -> [T*B, V]), which the split passes; the gradient's
 *    reshape back to [B, T, V] goes through the inverse transpose.
 * Called by pass_sharding on its propagated shardings (which it then derives
 * again). Requires: shardings propagated (Inst.shard). Guarantees: the same
 * values (sums in another order), fewer reshapes that gather a split;
 * nothing in deterministic mode, whose sums keep their fixed pieces. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

/* New instructions and the instruction each goes before. */
typedef struct Ins { Inst *inst, *before; } Ins;
typedef struct Edit { Func *f; VEC(Ins) ins; } Edit;

static Inst *add(Edit *e, Inst *before, Inst *i) {
  vec_push(e->f->mod->arena, &e->ins, ((Ins){ir_finish(i), before}));
  return i;
}

static Inst *reshape_to(Edit *e, Inst *before, Inst *x, const Type *t) {
  Inst *r = ir_new(e->f, OP_reshape, before->loc, 1, &x);
  ir_set_ints(r, "shape", t->dim, t->rank);
  return add(e, before, r);
}

static Inst *transpose_by(Edit *e, Inst *before, Inst *x, const int64_t *perm) {
  Inst *r = ir_new(e->f, OP_transpose, before->loc, 1, &x);
  ir_set_ints(r, "perm", perm, x->type.rank);
  return add(e, before, r);
}

static int64_t prod(const Type *t, int from, int to) {
  int64_t p = 1;
  for (int d = from; d < to; d++)
    p *= t->dim[d];
  return p;
}

/* The dimension j of x's leading dims 0..lead-1 that a split of x lies on
 * behind a dimension longer than 1 (which a reshape merging them cannot
 * carry), -1 when none does. */
static int split_behind(const Inst *x, int lead) {
  const Sharding *s = x->shard;
  for (int j = 1; s && j < lead; j++)
    if (s->axis[j] >= 0 && prod(&x->type, 0, j) > 1)
      return j;
  return -1;
}

/* Whether r is a reshape merging its operand's dims 0..rank-2 into one and
 * keeping the last ([.., D] -> [N, D]); with all, merging every dim ([N]). */
static bool flattens(const Inst *r, bool all) {
  if (r->op != OP_reshape)
    return false;
  const Type *x = &r->in[0]->type, *y = &r->type;
  if (all)
    return y->rank == 1 && x->rank >= 2;
  return x->rank >= 3 && y->rank == 2 && y->dim[1] == x->dim[x->rank - 1] &&
         y->dim[0] == prod(x, 0, x->rank - 1);
}

/* matmul(flat x, flat y){ta} -> matmul(x, y){ta, kfold}: the same sum over
 * the rows, which a device holding its block of x and y makes of its own. */
static bool weight_grad(Edit *e, Inst *mm, Inst **repl) {
  if (ir_get_int(mm, "ta", 0) != 1 || ir_get_int(mm, "tb", 0) != 0 || ir_attr(mm, "kblock") ||
      ir_pieces(mm) || !flattens(mm->in[0], false) || !flattens(mm->in[1], false))
    return false;
  Inst *x = mm->in[0]->in[0], *y = mm->in[1]->in[0];
  int r = x->type.rank;
  if (y->type.rank != r || memcmp(x->type.dim, y->type.dim, sizeof(int64_t) * (size_t)(r - 1)))
    return false;
  if (split_behind(x, r - 1) < 0 && split_behind(y, r - 1) < 0)
    return false;
  Inst *b = ir_new(e->f, OP_matmul, mm->loc, 2, (Inst *[]){x, y});
  ir_set_int(b, "ta", 1);
  ir_set_int(b, "kfold", r - 2);
  repl[mm->id] = add(e, mm, b);
  return true;
}

static bool is_ce(Op op) {
  return op == OP_cross_entropy || op == OP_cross_entropy_grad || op == OP_cross_entropy_sum ||
         op == OP_cross_entropy_sum_grad;
}
static bool is_ce_grad(Op op) {
  return op == OP_cross_entropy_grad || op == OP_cross_entropy_sum_grad;
}

/* cross_entropy* (flat z, flat labels) with z split behind its first dim:
 * both flattened from the split dim first; each gradient's reshape back to
 * z's shape through the inverse transpose. */
static bool loss_rows(Edit *e, const Uses *u, Inst *ce, Inst **repl) {
  Inst *lz = ce->in[0], *ll = ce->in[1];
  if (ir_pieces(ce) || !flattens(lz, false) || !flattens(ll, true))
    return false;
  Inst *z = lz->in[0], *lab = ll->in[0];
  int r = z->type.rank;
  if (lab->type.rank != r - 1 ||
      memcmp(lab->type.dim, z->type.dim, sizeof(int64_t) * (size_t)(r - 1)))
    return false;
  int j = split_behind(z, r - 1);
  if (j < 0)
    return false;
  /* every user of the flattened pair a loss of this pair, every gradient's
   * user a reshape back to z's shape */
  Inst *users[64];
  int nu = 0;
  for (int k = u->off[lz->id]; k < u->off[lz->id + 1]; k++) {
    Inst *c = u->u[k];
    if (!is_ce(c->op) || c->in[0] != lz || c->in[1] != ll || nu == 64)
      return false;
    for (int q = 0; q < nu; q++)
      if (users[q] == c)
        goto seen;
    users[nu++] = c;
    if (is_ce_grad(c->op))
      for (int g = u->off[c->id]; g < u->off[c->id + 1]; g++) {
        const Inst *b = u->u[g];
        if (b->op != OP_reshape || b->type.rank != r ||
            memcmp(b->type.dim, z->type.dim, sizeof(int64_t) * (size_t)r))
          return false;
      }
  seen:;
  }
  int64_t perm[IR_MAX_RANK], inv[IR_MAX_RANK];
  perm[0] = j;
  for (int d = 0, k = 1; d < r; d++)
    if (d != j)
      perm[k++] = d;
  for (int d = 0; d < r; d++)
    inv[perm[d]] = d;
  if (!nu)   /* never: ce reads lz */
    return false;
  Inst *first = users[0];
  for (int q = 1; q < nu; q++)
    if (users[q]->id < first->id)
      first = users[q];
  Inst *nz = reshape_to(e, first, transpose_by(e, first, z, perm), &lz->type);
  Inst *nl = reshape_to(e, first, transpose_by(e, first, lab, perm), &ll->type);
  Type zt = z->type;
  for (int d = 0; d < r; d++)
    zt.dim[d] = z->type.dim[perm[d]];
  for (int q = 0; q < nu; q++) {
    Inst *c = users[q];
    c->in[0] = nz;
    c->in[1] = nl;
    if (!is_ce_grad(c->op))
      continue;
    for (int g = u->off[c->id]; g < u->off[c->id + 1]; g++) {
      Inst *b = u->u[g];
      if (repl[b->id])
        continue;
      Inst *back = reshape_to(e, b, c, &zt);
      repl[b->id] = transpose_by(e, b, back, inv);
    }
  }
  return true;
}

/* Users' operands moved to their replacements, the new instructions put in
 * place, what nothing reads any more of the replaced dropped. */
static void apply(Edit *e, Inst **repl, int n) {
  Func *f = e->f;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *i = f->inst.a[k];
    for (int j = 0; j < i->nin; j++)
      if (i->in[j]->id < n && i->in[j]->fn == f && repl[i->in[j]->id] && repl[i->in[j]->id] != i)
        i->in[j] = repl[i->in[j]->id];
  }
  Inst **old = malloc(sizeof *old * (size_t)n);
  DTC_ASSERT(old);
  memcpy(old, f->inst.a, sizeof *old * (size_t)n);
  f->inst.n = 0;
  for (int k = 0; k < n; k++) {
    for (int q = 0; q < e->ins.n; q++)
      if (e->ins.a[q].before == old[k])
        vec_push(f->mod->arena, &f->inst, e->ins.a[q].inst);
    vec_push(f->mod->arena, &f->inst, old[k]);
  }
  free(old);
  ir_renumber(f);
  /* the replaced and the reshapes only they read go, when nothing else reads them */
  Uses u = ir_uses(f->mod->arena, f);
  bool *drop = calloc((size_t)f->inst.n + 1, sizeof *drop);
  DTC_ASSERT(drop);
  for (int k = f->inst.n - 1; k >= 0; k--) {
    Inst *i = f->inst.a[k];
    if (!(i->op == OP_reshape || i->op == OP_matmul || i->op == OP_transpose))
      continue;
    bool used = false;
    for (int q = u.off[k]; q < u.off[k + 1]; q++)
      used |= !drop[u.u[q]->id];
    drop[k] = !used;
  }
  int kept = 0;
  for (int k = 0; k < f->inst.n; k++)
    if (!drop[k])
      f->inst.a[kept++] = f->inst.a[k];
  f->inst.n = kept;
  free(drop);
  ir_renumber(f);
}

static bool rewrite(Func *f) {
  ir_renumber(f);
  int n = f->inst.n;
  Edit e = {.f = f};
  Uses u = ir_uses(f->mod->arena, f);
  Inst **repl = calloc((size_t)n + 1, sizeof *repl);
  DTC_ASSERT(repl);
  bool done = false;
  for (int k = 0; k < n; k++) {
    Inst *i = f->inst.a[k];
    if (i->op == OP_matmul)
      done |= weight_grad(&e, i, repl);
    else if (is_ce(i->op) && !repl[i->id])
      done |= loss_rows(&e, &u, i, repl);
  }
  if (done)
    apply(&e, repl, n);
  free(repl);
  return done;
}

bool shard_seq_flatten(Module *m) {
  bool done = false;
  if (m->det_pieces >= 2)   /* sums in fixed pieces (determinize.c): left as they are */
    return false;
  for (int k = 0; k < m->func.n; k++)
    if (m->func.a[k]->device < 0)
      done |= rewrite(m->func.a[k]);
  return done;
}

bool shard_seq_flat_split(const Inst *r) {
  return r->fn->mod->det_pieces < 2 && (flattens(r, false) || flattens(r, true)) &&
         split_behind(r->in[0], r->in[0]->type.rank - 1) >= 0;
}
