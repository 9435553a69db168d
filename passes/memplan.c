/* memplan.c: the static memory plan: one work arena per function. Lives come
 * from the instruction order (a fusion group is one step); offsets are placed
 * greedily, largest buffer first, into the best fitting gap among the buffers
 * live at the same time, so memory is reused after a value's last use. The
 * placed buffers are kept in a segment tree over the steps whose nodes hold
 * unions of address ranges, so the addresses taken during a life are found
 * from O(log steps) unions rather than from every placed buffer (near n log n
 * when lives nest, as a training step's activations do); where the unions
 * are fragmented a scan of the placed buffers in offset order gives the same
 * answer, so the plan does not depend on which is used.
 *
 * Requires: each fusion group contiguous (passes/fusion.c), or no groups.
 * Guarantees: Inst.offset >= 0 (64-byte aligned) exactly for the values that
 * need memory, and -1 for the others: values used only inside their group,
 * consts and learning rates (immediates), reshapes (alias their operand),
 * loads of inputs (alias the caller's buffer), loads of params and state
 * (alias the state block, unless a store to the global comes before their
 * last use: those are copied), and kernel results that go to an output
 * (written into the caller's buffer), args (the caller's), and updates in
 * place (ir_in_place) of a load of the global they are stored to that is
 * the load's last reader, no other load of the global read after them (they
 * alias the state block). A repeat also
 * gets a scratch region, live at its own step only, at offset `scratch`: two
 * buffers for each carried value, then the body's work arena, then a row for
 * each stacked output that no repeat_out takes. A
 * repeat_out lives from its repeat's step, which writes it, and an lse op
 * from its partner's (ir_lse_partner), whose kernel writes it. Two values live
 * at the same step never overlap; Func.work_bytes covers every offset.
 * Func.staged_bytes is the most one kernel allocates beside the arena while
 * it runs (a collective's packed copy, a large sum's partial rows: libdtrt's
 * own sizes, ir_staged_bytes), a loop's body's included; as kernels run one
 * at a time, the arena and it bound the function's memory.
 * Bodies are planned before the functions that run them. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN 64

static int64_t round_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t bytes_of(const Type *t) { return type_elems(t) * (int64_t)dtype_size(t->dtype); }

static bool is_alias(const Inst *i) {
  return i->op == OP_reshape || i->op == OP_const || i->op == OP_lr || i->op == OP_load ||
         i->op == OP_store || i->op == OP_output || i->op == OP_arg;
}

/* A value's life in steps (a fusion group is one step). */
typedef struct Life {
  int def, last;
  int64_t size;     /* 0: needs no memory */
} Life;

static bool needs_memory(const Inst *i, const Uses *u) {
  if (is_alias(i))
    return false;
  for (int k = u->off[i->id]; k < u->off[i->id + 1]; k++) {
    const Inst *x = u->u[k];
    if (ir_ops[i->op].kind != K_ELEM) {
      if (x->op == OP_output && ir_output_direct(x))
        return false;
    } else if (x->op != OP_output && (!i->fuse || x->fuse != i->fuse)) {
      return true;
    }
  }
  return ir_ops[i->op].kind != K_ELEM;
}

static Life *lifetimes(Arena *a, Func *f, int *nstep) {
  ir_renumber(f);
  int n = f->inst.n;
  Uses u = ir_uses(a, f);
  Life *l = arena_alloc(a, sizeof(Life) * (size_t)(n + 1));
  int *root = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
  int step = -1;
  for (int i = 0; i < n; i++) {
    const Inst *x = f->inst.a[i];
    if (!x->fuse || i == 0 || f->inst.a[i - 1]->fuse != x->fuse)
      step++;
    l[i].def = l[i].last = step;
    if (x->op == OP_repeat_out)
      l[i].def = l[x->in[0]->id].def;
    const Inst *s = ir_lse_partner(x);
    if (s)
      l[i].def = l[s->id].def;
    root[i] = x->op == OP_reshape ? root[x->in[0]->id] : i;
    for (int k = 0; k < x->nin; k++) {
      Life *r = &l[root[x->in[k]->id]];
      r->last = r->last > step ? r->last : step;
    }
  }
  *nstep = step + 1;
  for (int i = 0; i < n; i++)
    if (needs_memory(f->inst.a[i], &u))
      l[i].size = round_up(bytes_of(&f->inst.a[i]->type));
  /* A load of a param or state read after a store to its global is a copy:
   * each store looks at the loads of its global before it. */
  const Module *m = f->mod;
  typedef VEC(int) Ints;
  Ints *loads = arena_alloc(a, sizeof(Ints) * (size_t)(m->global.n + 1));
  for (int s = 0; s < n; s++) {
    const Inst *x = f->inst.a[s];
    if (x->op != OP_load && x->op != OP_store)
      continue;
    Ints *v = &loads[ir_global_of(x) - m->global.a];
    if (x->op == OP_load) {
      vec_push(a, v, s);
      continue;
    }
    for (int k = 0; k < v->n; k++) {
      int i = v->a[k];
      if (l[i].def < l[s].def && l[i].last > l[s].def)
        l[i].size = round_up(bytes_of(&f->inst.a[i]->type));
    }
  }
  for (int s = 0; s < n; s++) {
    const Inst *x = f->inst.a[s], *p = x->nin ? x->in[0] : NULL;
    if (!ir_in_place(x->op) || p->op != OP_load || l[p->id].size || l[p->id].last != l[s].def)
      continue;
    const Global *g = ir_global_of(p);
    bool stored = false, ok = g->kind != G_INPUT;
    for (int k = u.off[s]; k < u.off[s + 1]; k++)
      stored |= u.u[k]->op == OP_store && ir_global_of(u.u[k]) == g;
    const Ints *v = &loads[g - m->global.a];
    for (int k = 0; ok && k < v->n; k++)
      ok = l[v->a[k]].last <= l[s].def;
    if (stored && ok)
      l[s].size = 0;
  }
  return l;
}

typedef struct Buf {
  int i;               /* inst id; -1 - id: the scratch of repeat id */
  int64_t off, size;
  int def, last;
} Buf;

static int by_size_desc(const void *x, const void *y) {
  const Buf *a = x, *b = y;
  if (a->size != b->size)
    return a->size < b->size ? 1 : -1;
  return a->def != b->def ? a->def - b->def : a->i - b->i;
}

/* ---- the placed buffers: unions of address ranges over a tree of steps ---- */

/* Disjoint address ranges [lo, hi) in order, touching ones merged. */
typedef struct Span {
  int64_t lo, hi;
} Span;
typedef VEC(Span) Spans;

/* Adds [lo, hi) to s, merging it with the ranges it meets. */
static void spans_add(Arena *a, Spans *s, int64_t lo, int64_t hi) {
  int i = 0, j = s->n;
  while (i < j) {   /* i: the first range that ends at or past lo */
    int mid = i + (j - i) / 2;
    if (s->a[mid].hi < lo)
      i = mid + 1;
    else
      j = mid;
  }
  for (j = i; j < s->n && s->a[j].lo <= hi; j++) {
    lo = s->a[j].lo < lo ? s->a[j].lo : lo;
    hi = s->a[j].hi > hi ? s->a[j].hi : hi;
  }
  if (i == j) {   /* meets none: a new range at i */
    vec_push(a, s, ((Span){0, 0}));
    memmove(s->a + i + 1, s->a + i, sizeof *s->a * (size_t)(s->n - 1 - i));
  } else {        /* replaces ranges i..j-1 */
    memmove(s->a + i + 1, s->a + j, sizeof *s->a * (size_t)(s->n - j));
    s->n -= j - i - 1;
  }
  s->a[i] = (Span){lo, hi};
}

/* A segment tree over the steps (node 1 the root, leaf of step s at
 * leaves + s). A buffer placed with life [d, l] is stored in the nodes that
 * cover [d, l] exactly (at most two per level): own[v] is the union of the
 * ranges of the buffers stored at v, sub[v] that of those stored at v or
 * below it. The buffers whose life meets [d, l] are then those of own[v] for
 * v above a covering node and of sub[c] for the covering nodes c: the
 * addresses they take during [d, l] are the union of O(log steps) unions,
 * however many buffers live there. */
typedef struct Tree {
  int leaves;          /* a power of two, at least the step count */
  Spans *own, *sub;    /* by node */
} Tree;

/* Whether node v's steps all lie in [d, l]. */
static bool inside(const Tree *t, int v, int d, int l) {
  int h = 0;
  while ((v << h) < t->leaves)
    h++;
  int lo = (v << h) - t->leaves;
  return d <= lo && lo + (1 << h) - 1 <= l;
}

/* The nodes that cover [d, l] exactly into cover, those above one of them
 * into above, each once; returns their counts in *nc and *na. */
enum { MAX_NODES = 64 };   /* two per level of a tree of up to 2^31 leaves */
static void nodes(const Tree *t, int d, int l, int *cover, int *nc, int *above, int *na) {
  *nc = *na = 0;
  for (int x = d + t->leaves, y = l + t->leaves + 1; x < y; x >>= 1, y >>= 1) {
    if (x & 1)
      cover[(*nc)++] = x++;
    if (y & 1)
      cover[(*nc)++] = --y;
  }
  for (int x = (d + t->leaves) >> 1, y = (l + t->leaves) >> 1; x; x >>= 1, y >>= 1) {
    if (!inside(t, x, d, l))
      above[(*na)++] = x;
    if (y != x && !inside(t, y, d, l))
      above[(*na)++] = y;
  }
}

static void tree_add(Arena *a, Tree *t, const Buf *b) {
  int cover[MAX_NODES], above[MAX_NODES], nc, na;
  nodes(t, b->def, b->last, cover, &nc, above, &na);
  for (int k = 0; k < nc; k++) {
    spans_add(a, &t->own[cover[k]], b->off, b->off + b->size);
    spans_add(a, &t->sub[cover[k]], b->off, b->off + b->size);
  }
  for (int k = 0; k < na; k++)
    spans_add(a, &t->sub[above[k]], b->off, b->off + b->size);
}

/* Inserts b into placed[0..n), kept in offset order (ties: inst id). */
static void insert_by_offset(Buf **placed, int n, Buf *b) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const Buf *x = placed[mid];
    if (x->off < b->off || (x->off == b->off && x->i < b->i))
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(placed + lo + 1, placed + lo, sizeof *placed * (size_t)(n - lo));
  placed[lo] = b;
}

/* Where b goes, found by one pass over the n placed buffers in offset order,
 * skipping those not live with it: the same answer as tree_place, which
 * calls it when the unions to sort hold more than one range for every
 * sixteen placed buffers. */
static int64_t scan_place(Buf *const *placed, int n, const Buf *b) {
  int64_t at = -1, gap = INT64_MAX, end = 0;
  for (int j = 0; j < n; j++) {
    const Buf *x = placed[j];
    if (x->def > b->last || b->def > x->last)
      continue;
    int64_t room = x->off - end;
    if (room >= b->size && room < gap)
      at = end, gap = room;
    end = x->off + x->size > end ? x->off + x->size : end;
  }
  return at >= 0 ? at : end;
}

static int by_lo(const void *x, const void *y) {
  const Span *a = x, *b = y;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Where b goes: the best fitting gap (the lowest of equal ones) among the
 * ranges taken during its life, or past all of them. The unions are sorted
 * together into address order; when they hold more ranges than a sort
 * beats a scan of the placed buffers, that scan decides instead (the same
 * answer). */
static int64_t tree_place(Arena *a, const Tree *t, const Buf *b, Spans *all, Buf *const *placed,
                          int nplaced) {
  int cover[MAX_NODES], above[MAX_NODES], nc, na;
  nodes(t, b->def, b->last, cover, &nc, above, &na);
  int64_t ranges = 0;
  for (int k = 0; k < nc; k++)
    ranges += t->sub[cover[k]].n;
  for (int k = 0; k < na; k++)
    ranges += t->own[above[k]].n;
  if (ranges * 16 > nplaced)
    return scan_place(placed, nplaced, b);
  all->n = 0;
  for (int k = 0; k < nc + na; k++) {
    const Spans *x = k < nc ? &t->sub[cover[k]] : &t->own[above[k - nc]];
    for (int j = 0; j < x->n; j++)
      vec_push(a, all, x->a[j]);
  }
  if (all->n > 1)
    qsort(all->a, (size_t)all->n, sizeof *all->a, by_lo);
  int64_t at = -1, gap = INT64_MAX, end = 0;
  for (int k = 0; k < all->n; k++) {
    int64_t room = all->a[k].lo - end;
    if (room >= b->size && room < gap)
      at = end, gap = room;
    end = all->a[k].hi > end ? all->a[k].hi : end;
  }
  return at >= 0 ? at : end;
}

/* Two buffers per carried value, the body's arena, then a row for each
 * stacked output no repeat_out takes (the body writes it every iteration);
 * the repeat_outs are among r's users. */
static int64_t scratch_bytes(const Inst *r, const Uses *u) {
  const Func *body = ir_repeat_body(r);
  DTC_ASSERT(body && body->work_bytes >= 0);
  int64_t s = round_up(body->work_bytes);
  int64_t carry = ir_get_int(r, "carry", 1);
  for (int k = 0; k < carry; k++)
    s += 2 * round_up(bytes_of(&r->in[k]->type));
  for (int k = (int)carry; k < ir_func_noutputs(body); k++) {
    bool taken = false;
    for (int j = u->off[r->id]; j < u->off[r->id + 1]; j++)
      taken |= u->u[j]->op == OP_repeat_out && ir_get_int(u->u[j], "index", 0) == k;
    if (!taken)
      s += round_up(bytes_of(&ir_func_output(body, k)->in[0]->type));
  }
  return round_up(s);
}

/* Greedy by size: the largest buffers are placed first, each into the best
 * fitting gap among the buffers already placed that live at the same time
 * (the lowest offset past all of them when no gap fits). The tree's scratch
 * lives in an arena of its own, freed when the function is planned. */
static void plan_func(Func *f) {
  if (f->work_bytes >= 0)
    return;
  f->staged_bytes = 0;
  for (int i = 0; i < f->inst.n; i++) {
    const Inst *x = f->inst.a[i];
    int64_t b = ir_staged_bytes(f->mod, x);
    if (x->op == OP_repeat) {
      plan_func(ir_repeat_body(x));
      b = ir_repeat_body(x)->staged_bytes;
    }
    f->staged_bytes = b > f->staged_bytes ? b : f->staged_bytes;
  }
  Arena *tmp = arena_new();
  int nstep, n = f->inst.n, nb = 0;
  Life *l = lifetimes(tmp, f, &nstep);
  Uses u = ir_uses(tmp, f);
  Buf *buf = arena_alloc(tmp, sizeof(Buf) * (size_t)(2 * n + 1));
  for (int i = 0; i < n; i++) {
    f->inst.a[i]->offset = -1;
    if (l[i].size)
      buf[nb++] = (Buf){i, 0, l[i].size, l[i].def, l[i].last};
    if (f->inst.a[i]->op == OP_repeat)
      buf[nb++] = (Buf){-1 - i, 0, scratch_bytes(f->inst.a[i], &u), l[i].def, l[i].def};
  }
  qsort(buf, (size_t)nb, sizeof *buf, by_size_desc);
  Tree t = {1, NULL, NULL};
  while (t.leaves < nstep)
    t.leaves *= 2;
  t.own = arena_alloc(tmp, sizeof(Spans) * 2 * (size_t)t.leaves);
  t.sub = arena_alloc(tmp, sizeof(Spans) * 2 * (size_t)t.leaves);
  Spans all = {0};
  Buf **placed = arena_alloc(tmp, sizeof(Buf *) * (size_t)(nb + 1));
  int64_t top = 0;
  for (int k = 0; k < nb; k++) {
    Buf *b = &buf[k];
    b->off = tree_place(tmp, &t, b, &all, placed, k);
    top = b->off + b->size > top ? b->off + b->size : top;
    if (b->i >= 0)
      f->inst.a[b->i]->offset = b->off;
    else
      ir_set_int(f->inst.a[-1 - b->i], "scratch", b->off);
    tree_add(tmp, &t, b);
    insert_by_offset(placed, k, b);
  }
  /* an empty block (of a table-wise table, on a device not holding it)
   * takes no bytes but has an address */
  for (int i = 0; i < n; i++)
    if (f->inst.a[i]->offset < 0 && !l[i].size && type_elems(&f->inst.a[i]->type) == 0 &&
        needs_memory(f->inst.a[i], &u))
      f->inst.a[i]->offset = 0;
  f->work_bytes = top;
  arena_free(tmp);
}

bool pass_memplan(Module *m, Diag *d, PassRun *run) {
  (void)run;
  (void)d;
  for (int k = 0; k < m->func.n; k++)
    m->func.a[k]->work_bytes = -1;
  for (int k = 0; k < m->func.n; k++)
    plan_func(m->func.a[k]);
  return true;
}

/* ---- the report ---- */

/* Onto out, as ir_bytes_str writes it. */
static void print_size(FILE *out, double b) {
  char buf[32];
  fputs(ir_bytes_str(b, buf, sizeof buf), out);
}

static int by_size(const void *x, const void *y) {
  const Inst *a = *(Inst *const *)x, *b = *(Inst *const *)y;
  int64_t sa = bytes_of(&a->type), sb = bytes_of(&b->type);
  return sa != sb ? (sa < sb ? 1 : -1) : a->id - b->id;
}

static void report_func(FILE *out, Func *f) {
  Arena *a = f->mod->arena;
  int nstep, n = f->inst.n, nbuf = 0;
  Life *l = lifetimes(a, f, &nstep);
  int64_t *live = arena_alloc(a, sizeof(int64_t) * (size_t)(nstep + 1));
  int64_t total = 0, peak = 0;
  Inst **buf = arena_alloc(a, sizeof(Inst *) * (size_t)(n + 1));
  for (int i = 0; i < n; i++) {
    if (!l[i].size)
      continue;
    buf[nbuf++] = f->inst.a[i];
    total += l[i].size;
    live[l[i].def] += l[i].size;   /* live[s] - live[s - 1], summed below */
    live[l[i].last + 1] -= l[i].size;
  }
  int64_t sum = 0;
  for (int s = 0; s < nstep; s++) {
    live[s] = sum += live[s];
    peak = live[s] > peak ? live[s] : peak;
  }
  fprintf(out, "@%s: work arena ", f->name);
  print_size(out, f->work_bytes);
  fputs(", peak live ", out);
  print_size(out, peak);
  fprintf(out, ", %d buffer%s (", nbuf, nbuf == 1 ? "" : "s");
  print_size(out, total);
  fprintf(out, " without reuse), %d steps", nstep);
  if (f->staged_bytes > 0) {
    fputs("; its kernels allocate up to ", out);
    print_size(out, (double)f->staged_bytes);
    fputs(" beside it while they run", out);
  }
  fputc('\n', out);
  qsort(buf, (size_t)nbuf, sizeof *buf, by_size);
  for (int k = 0; k < nbuf && k < 5; k++) {
    const Inst *x = buf[k];
    char t[128], id[16];
    snprintf(id, sizeof id, "%d", x->id);
    fprintf(out, "  %%%-14s %-20s offset %-10lld steps %d..%d\n", x->name ? x->name : id,
            type_str(&x->type, t, sizeof t), (long long)x->offset, l[x->id].def,
            l[x->id].last);
  }
}

void memplan_report(FILE *out, const Module *m) {
  int64_t bytes[G_STATE + 1] = {0};
  for (int k = 0; k < m->global.n; k++)
    bytes[m->global.a[k].kind] += round_up(bytes_of(&m->global.a[k].type));
  fprintf(out, "memory plan of %s (64-byte aligned, largest first into the best fit)\n",
          m->name);
  fputs("state: params ", out);
  print_size(out, bytes[G_PARAM] + bytes[G_BUFFER]);   /* buffers with the params */
  fputs(", optimizer state ", out);
  print_size(out, bytes[G_STATE]);
  fputs("; inputs ", out);
  print_size(out, bytes[G_INPUT]);
  fputs(" (caller's buffers)\n", out);
  for (int k = 0; k < m->func.n; k++)
    report_func(out, m->func.a[k]);
}
