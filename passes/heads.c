/* heads.c: head-parallel attention (DeepSpeed-Ulysses), spmd's other
 * lowering of an attention whose sequence is split over a mesh axis, under
 * `attention = heads`. Around the op, an all_to_all over the axis swaps the
 * sequence split of every operand for a split of its heads (q, k, v, and in
 * the backward out, lse and dout: [B, H, T/p, D] -> [B, H/p, T, D]); the
 * device runs the plain op on whole sequences of its heads, and an
 * all_to_all swaps the result back (split H -> split T). The heads take the
 * ratios of the sequence's split, so a device with a longer block of the
 * sequence computes more heads; uneven blocks on either side travel as the
 * all_to_all's `sizes` and `dim_sizes`. An operand that is itself the
 * swap back of a head-split value (the forward's out, sdpa_lse's rows) is
 * taken before the swap, and an operand swapped once in a function is not
 * swapped again.
 *
 * Requires: the sharding pass done (the op's Inst.shard splits its T as
 * forms.c's attention forms allow), the device copy's operands resharded
 * to the op's form. Guarantees: the device value of the op, as the ring
 * would give it (the same block of the sequence), made of all_to_all, the
 * plain op and all_to_all; or NULL where it does not apply. */
#include <string.h>

#include "passes.h"

/* The dims of T and H in a result of op: sdpa_grad's stacks dq, dk, dv at 1. */
static int t_dim(const Inst *i) { return i->type.rank == 5 ? 3 : 2; }
static int h_dim(const Inst *i) { return i->type.rank == 5 ? 2 : 1; }

static bool is_attention(const Inst *i) {
  return (i->op == OP_sdpa || i->op == OP_sdpa_lse ||
          (i->op == OP_sdpa_grad && i->type.rank == 5)) &&
         i->type.rank >= 3 && i->shard;
}

/* The axis that splits i's sequence, -1 when none does. */
static int seq_axis(const Inst *i) { return is_attention(i) ? i->shard->axis[t_dim(i)] : -1; }

/* How an attention op splits: the axis, its size, and the blocks of the
 * sequence and of the heads (H as the device sees it, whole over the axis). */
typedef struct Split {
  int axis, k, me;
  int64_t *tb, *hb;
} Split;

static void split_of(Module *m, const Inst *i, int dev, Split *s) {
  const Mesh *mesh = &m->mesh.a[0];
  int coord[IR_MAX_MESH_AXES];
  s->axis = seq_axis(i);
  s->k = mesh->axis_size[s->axis];
  ir_mesh_coords(mesh, dev, coord);
  s->me = coord[s->axis];
  s->tb = arena_alloc(m->arena, sizeof *s->tb * (size_t)s->k);
  s->hb = arena_alloc(m->arena, sizeof *s->hb * (size_t)s->k);
  const double *r = i->shard->ratio[t_dim(i)];
  ir_dim_blocks(m, i->type.dim[t_dim(i)], r, s->k, s->tb);
  ir_dim_blocks(m, i->type.dim[h_dim(i)], r, s->k, s->hb);
}

static bool even(const int64_t *b, int k) {
  for (int c = 1; c < k; c++)
    if (b[c] != b[0])
      return false;
  return true;
}

static bool same_blocks(const Inst *x, const char *attr, const int64_t *b, int k) {
  int n;
  const int64_t *had = ir_get_ints(x, attr, &n);
  if (!had)
    return even(b, k);
  for (int c = 0; c < n && n == k; c++)
    if (had[c] != b[c])
      return false;
  return n == k;
}

/* v's sharding with dim `from` whole and dim `to` split over the axis. */
static Sharding *moved(Module *m, const Sharding *of, int from, int to, const double *ratio,
                       int axis) {
  Sharding *s = arena_alloc(m->arena, sizeof *s);
  *s = *of;
  s->axis[from] = -1, s->ratio[from] = NULL;
  s->axis[to] = (int8_t)axis, s->ratio[to] = (double *)ratio;
  return s;
}

/* v's blocks along `dim` (of `from`) swapped for blocks along `to` (of
 * `sizes`) over the split's axis. */
static Inst *swap(Func *f, Inst *v, const Split *s, int dim, int to, const int64_t *from,
                  const int64_t *sizes, Loc loc, Sharding *sh) {
  Inst *x = ir_new(f, OP_all_to_all, loc, 1, &v);
  ir_set_int(x, "axis", s->axis);
  ir_set_int(x, "dim", dim);
  ir_set_int(x, "to", to);
  ir_set_ints(x, "sizes", sizes, s->k);
  if (!even(from, s->k))
    ir_set_ints(x, "dim_sizes", from, s->k);
  ir_finish(x);
  x->shard = sh;
  return x;
}

/* Operand v ([B, H, T/p, D] or [B, H, T/p]) with its heads split instead. */
static Inst *to_heads(Module *m, Func *f, Inst *v, const Split *s, const Sharding *gsh,
                      const double *ratio, Loc loc) {
  if (v->op == OP_all_to_all && ir_get_int(v, "axis", -1) == s->axis &&
      ir_get_int(v, "dim", -1) == 1 && ir_get_int(v, "to", -1) == 2 &&
      same_blocks(v, "dim_sizes", s->hb, s->k) && same_blocks(v, "sizes", s->tb, s->k))
    return v->in[0]; /* the swap back of a head-split value */
  for (int k = 0; k < f->inst.n; k++) {
    Inst *a = f->inst.a[k];
    if (a->op == OP_all_to_all && a->in[0] == v && ir_get_int(a, "axis", -1) == s->axis &&
        ir_get_int(a, "dim", -1) == 2 && ir_get_int(a, "to", -1) == 1 &&
        same_blocks(a, "sizes", s->hb, s->k))
      return a;
  }
  return swap(f, v, s, 2, 1, s->tb, s->hb, loc, moved(m, gsh, 2, 1, ratio, s->axis));
}

/* Attention x, device dev's copy of i on heads hb[me] of the whole mask: its
 * place in the whole dropout mask [B, H, Tq, Tk] (`at`), as spmd's
 * place_dropout gives a block's. */
static void place(Module *m, const Inst *i, Inst *x, int dev, const Split *s) {
  Type whole, local;
  int64_t at[2 * IR_MAX_RANK] = {0}, begin[IR_MAX_RANK] = {0};
  if (!ir_dropout_whole(i, &whole))
    return;
  int r = whole.rank, n;
  const int64_t *had = ir_get_ints(i, "at", &n);
  ir_local_type(m, i->shard, &i->type, dev, &local, begin);
  int64_t b0 = begin[0], h0 = 0;
  for (int c = 0; c < s->me; c++)
    h0 += s->hb[c];
  memset(begin, 0, sizeof begin);
  begin[0] = b0, begin[1] = h0;
  for (int d = 0; d < r; d++)
    at[d] = n ? had[d] : whole.dim[d], at[r + d] = (n ? had[r + d] : 0) + begin[d];
  ir_set_ints(x, "at", at, 2 * r);
}

Inst *heads_lower(Module *m, Func *f, const Inst *i, Inst **in, int dev) {
  if (!m->attn_heads || seq_axis(i) < 0)
    return NULL;
  Split s;
  split_of(m, i, dev, &s);
  const double *ratio = i->shard->ratio[t_dim(i)];
  int base = i->op == OP_sdpa ? 3 : i->op == OP_sdpa_lse ? 2 : 6;
  Inst *ops[8];
  DTC_ASSERT(i->nin <= 8);
  for (int k = 0; k < i->nin; k++) {
    if (k < base) {
      ops[k] = to_heads(m, f, in[k], &s, i->in[k]->shard, ratio, i->loc);
      continue;
    }
    /* the mask: whole along Tk; its heads, where it has them, sliced */
    const Type *mt = &in[k]->type;
    int jh = mt->rank - 3;
    ops[k] = in[k];
    if (jh >= 0 && mt->dim[jh] > 1) {
      Inst *sl = ir_new(f, OP_shard_slice, i->loc, 1, &in[k]);
      ir_set_int(sl, "axis", s.axis);
      ir_set_int(sl, "dim", jh);
      ir_set_ints(sl, "sizes", s.hb, s.k);
      ir_finish(sl)->shard = moved(m, i->in[k]->shard, jh, jh, ratio, s.axis);
      ops[k] = sl;
    }
  }
  Inst *x = ir_new(f, i->op, i->loc, i->nin, ops);
  ir_copy_attrs(x, i);
  place(m, i, x, dev, &s);
  ir_finish(x);
  int t = t_dim(i), h = h_dim(i);
  x->shard = moved(m, i->shard, t, h, ratio, s.axis);
  DTC_ASSERT(x->type.dim[h] == s.hb[s.me] && x->type.dim[t] == i->type.dim[t]);
  return swap(f, x, &s, h, t, s.hb, s.tb, i->loc, i->shard);
}

/* ---- the checks, before any copy ---- */

static void check_func(const Module *m, Diag *d, const Func *f, int *found, Loc *seen, int *nseen) {
  const Mesh *mesh = &m->mesh.a[0];
  for (int j = 0; j < f->inst.n; j++) {
    const Inst *i = f->inst.a[j];
    int a = seq_axis(i);
    if (a < 0)
      continue;
    ++*found;
    bool again = false;
    for (int q = 0; q < *nseen; q++)
      again |=
          seen[q].file == i->loc.file && seen[q].line == i->loc.line && seen[q].col == i->loc.col;
    if (again)
      continue;
    if (*nseen < 64)
      seen[(*nseen)++] = i->loc;
    int h = h_dim(i), k = mesh->axis_size[a];
    int64_t nh = i->type.dim[h];
    const double *r = i->shard->ratio[t_dim(i)];
    const char *an = mesh->axis_name[a];
    if (i->shard->axis[h] >= 0) {
      diag_error(d, i->loc,
                 "attention = heads splits the heads of this attention over axis "
                 "'%s', but they are split over '%s' already",
                 an, mesh->axis_name[i->shard->axis[h]]);
      continue;
    }
    if (nh < k) {
      diag_error(d, i->loc,
                 "attention = heads: %lld head%s cannot be split over the %d devices "
                 "of axis '%s', which splits the sequence; each needs at least one",
                 (long long)nh, nh == 1 ? "" : "s", k, an);
      continue;
    }
    int64_t hb[SHARD_MAX_AXIS], tb[SHARD_MAX_AXIS];
    ir_dim_blocks(m, i->type.dim[t_dim(i)], r, k, tb);
    if (!r && nh % k && even(tb, k)) {
      diag_error(d, i->loc,
                 "attention = heads: %lld heads do not split evenly over the %d "
                 "devices of axis '%s', which split the sequence evenly; give the sequence's "
                 "split ratios, which the heads take",
                 (long long)nh, k, an);
      continue;
    }
    ir_dim_blocks(m, nh, r, k, hb);
    for (int c = 0; c < k; c++)
      if (hb[c] == 0) {
        diag_error(d, i->loc,
                   "attention = heads: the ratios of axis '%s' give device %d "
                   "none of the %lld heads; each needs at least one",
                   an, c, (long long)nh);
        break;
      }
  }
}

/* Deterministic mode without `attention = heads`: each attention whose
 * queries' sequence is split keeps it whole (forms.c), said once at it. */
static void warn_whole(const Module *m, Diag *d, Func *const *fns, int nf) {
  Loc seen[64];
  int nseen = 0;
  for (int k = 0; k < nf; k++)
    for (int j = 0; j < fns[k]->inst.n; j++) {
      const Inst *i = fns[k]->inst.a[j];
      const Sharding *q = i->nin ? i->in[0]->shard : NULL;
      if (!is_attention(i) || !q || i->in[0]->type.rank != 4 || q->axis[2] < 0 ||
          i->shard->axis[t_dim(i)] >= 0)
        continue;
      bool again = false;
      for (int s = 0; s < nseen; s++)
        again |= seen[s].file == i->loc.file && seen[s].line == i->loc.line &&
                 seen[s].col == i->loc.col;
      if (again || nseen == 64)
        continue;
      seen[nseen++] = i->loc;
      diag_warn(d, i->loc,
                "deterministic mode keeps this attention's sequence whole: every device of "
                "axis '%s' gathers it and computes the attention as one process does (a ring "
                "would add its keys' blocks in an order the split gives); 'attention = heads' "
                "keeps it split",
                m->mesh.a[0].axis_name[q->axis[2]]);
    }
}

bool heads_check(const Module *m, Diag *d, Func *const *fns, int nf) {
  int nerr = d->nerr, found = 0, nseen = 0;
  Loc seen[64];
  if (m->det_pieces > 1 && !m->attn_heads)
    warn_whole(m, d, fns, nf);
  if (!m->attn_heads)
    return true;
  for (int k = 0; k < nf; k++)
    check_func(m, d, fns[k], &found, seen, &nseen);
  if (!found)
    diag_warn(d, m->attn_loc,
              "'attention = heads' has no effect: no attention's sequence is "
              "split over a mesh axis");
  return d->nerr == nerr;
}

/* ---- the swaps back that nothing reads ---- */

static bool read_by(const Func *f, const Inst *x) {
  for (int k = 0; k < f->inst.n; k++)
    for (int j = 0; j < f->inst.a[k]->nin; j++)
      if (f->inst.a[k]->in[j] == x)
        return true;
  return false;
}

void heads_prune(Module *m, Func *f) {
  if (!m->attn_heads)
    return;
  int n = 0;
  for (int k = 0; k < f->inst.n; k++) {
    Inst *x = f->inst.a[k];
    bool back = x->op == OP_all_to_all && (x->in[0]->op == OP_sdpa || x->in[0]->op == OP_sdpa_lse);
    if (!back || read_by(f, x))
      f->inst.a[n++] = x;
  }
  if (n < f->inst.n) {
    f->inst.n = n;
    ir_renumber(f);
  }
}

/* ---- the plan report ---- */

/* The heads device dev holds of the attention x of device 0's function f:
 * its own copy's (the same op at the same place in its copy of f). */
static int64_t heads_on(const Module *m, const Func *f, const Inst *x, int dev) {
  size_t n = strlen(f->name);
  while (n && f->name[n - 1] != '.')
    n--;
  for (int k = 0; n && k < m->func.n; k++) {
    const Func *g = m->func.a[k];
    if (g->device != dev || strncmp(g->name, f->name, n) || strchr(g->name + n, '.'))
      continue;
    for (int j = 0; j < g->inst.n; j++) {
      const Inst *y = g->inst.a[j];
      if (y->op == x->op && y->loc.file == x->loc.file && y->loc.line == x->loc.line &&
          y->loc.col == x->loc.col)
        return y->type.dim[1];
    }
  }
  return 0;
}

void heads_report(FILE *out, const Module *m) {
  if (!m->attn_heads || !m->mesh.n)
    return;
  const Mesh *mesh = &m->mesh.a[0];
  Loc seen[16];
  int nseen = 0;
  for (int k = 0; k < m->func.n; k++) {
    const Func *f = m->func.a[k];
    for (int j = 0; f->device == 0 && j < f->inst.n; j++) {
      const Inst *x = f->inst.a[j];
      int axis = x->op == OP_sdpa && x->shard && x->type.rank == 4 ? x->shard->axis[1] : -1;
      if (axis < 0)
        continue;
      bool again = false;
      for (int q = 0; q < nseen; q++)
        again |=
            seen[q].file == x->loc.file && seen[q].line == x->loc.line && seen[q].col == x->loc.col;
      if (again || nseen == 16)
        continue;
      seen[nseen++] = x->loc;
      int n = mesh->axis_size[axis], members[SHARD_MAX_AXIS];
      int64_t tb[SHARD_MAX_AXIS], h0 = 0, t0 = 0;
      ir_mesh_group(mesh, 0, axis, members);
      ir_dim_blocks(m, x->type.dim[2], x->shard->ratio[1], n, tb);
      fprintf(out, "attention by heads over %s", mesh->axis_name[axis]);
      if (x->loc.file)
        fprintf(out, " at %s:%d", x->loc.file->name, x->loc.line);
      fputc(':', out);
      for (int c = 0; c < n; c++) {
        char dn[64];
        int64_t h = heads_on(m, f, x, members[c]);
        fprintf(out, "%s %s heads %lld-%lld, positions %lld-%lld", c ? "," : "",
                spmd_device_name(m, members[c], dn, sizeof dn), (long long)h0,
                (long long)(h0 + h - 1), (long long)t0, (long long)(t0 + tb[c] - 1));
        h0 += h, t0 += tb[c];
      }
      fputc('\n', out);
    }
  }
}
