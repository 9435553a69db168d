/* memplan.c: the static memory plan: one work arena per function, offsets
 * chosen by liveness over the instruction order, best fit, reused after a
 * value's last use.
 *
 * Requires: each fusion group contiguous (passes/fusion.c), or no groups.
 * Guarantees: Inst.offset >= 0 (64-byte aligned) exactly for the values that
 * need memory, and -1 for the others: values used only inside their group,
 * consts and learning rates (immediates), reshapes (alias their operand),
 * loads of inputs (alias the caller's buffer), loads of params and state
 * (alias the state block, unless a store to the global comes before their
 * last use: those are copied), and kernel results that go to an output
 * (written into the caller's buffer). Two values live at the same step never
 * overlap; Func.work_bytes covers every offset. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define ALIGN 64

const Global *memplan_global(const Inst *i) {
  return ir_find_global(i->fn->mod, ir_get_str(i, "global", ""));
}

static int64_t round_up(int64_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static int64_t bytes_of(const Type *t) { return type_elems(t) * (int64_t)dtype_size(t->dtype); }

static bool is_alias(const Inst *i) {
  return i->op == OP_reshape || i->op == OP_const || i->op == OP_lr || i->op == OP_load ||
         i->op == OP_store || i->op == OP_output;
}

/* The training loss leaves @forward's generated code (codegen/emit.c's
 * cg_live), so it cannot hold a value there. */
static bool dropped(const Inst *out) {
  const char *loss = out->fn->mod->train.loss;
  return loss && !strcmp(out->fn->name, "forward") && !strcmp(ir_get_str(out, "name", ""), loss);
}

bool memplan_output_direct(const Inst *out) {
  const Inst *v = out->in[0];
  if (ir_ops[v->op].kind == K_ELEM)
    return true;
  if (is_alias(v) || dropped(out))
    return false;
  const Func *f = out->fn;
  for (int k = 0; k < f->inst.n; k++) {
    const Inst *o = f->inst.a[k];
    if (o->op == OP_output && o->in[0] == v && !dropped(o))
      return o == out;
  }
  return false;
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
      if (x->op == OP_output && memplan_output_direct(x))
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
  Uses u = uses_build(a, f);
  Life *l = arena_alloc(a, sizeof(Life) * (size_t)(n + 1));
  int *root = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
  int step = -1;
  for (int i = 0; i < n; i++) {
    const Inst *x = f->inst.a[i];
    if (!x->fuse || i == 0 || f->inst.a[i - 1]->fuse != x->fuse)
      step++;
    l[i].def = l[i].last = step;
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
  /* A load of a param or state read after a store to its global is a copy. */
  for (int s = 0; s < n; s++) {
    const Inst *st = f->inst.a[s];
    if (st->op != OP_store)
      continue;
    for (int i = 0; i < s; i++) {
      const Inst *ld = f->inst.a[i];
      if (ld->op == OP_load && memplan_global(ld) == memplan_global(st) &&
          l[i].def < l[s].def && l[i].last > l[s].def)
        l[i].size = round_up(bytes_of(&ld->type));
    }
  }
  return l;
}

typedef struct Block { int64_t off, size; } Block;
typedef struct Pool {
  Arena *a;
  VEC(Block) free;     /* sorted by offset, never adjacent */
  int64_t top;
} Pool;

static void del(Pool *p, int k) {
  memmove(&p->free.a[k], &p->free.a[k + 1], sizeof(Block) * (size_t)(p->free.n - k - 1));
  p->free.n--;
}

/* Best fit; grows the arena (through a free block at its end, if any) when
 * nothing fits. */
static int64_t take(Pool *p, int64_t size) {
  int best = -1;
  for (int k = 0; k < p->free.n; k++)
    if (p->free.a[k].size >= size && (best < 0 || p->free.a[k].size < p->free.a[best].size))
      best = k;
  if (best >= 0) {
    Block *b = &p->free.a[best];
    int64_t off = b->off;
    b->off += size;
    b->size -= size;
    if (!b->size)
      del(p, best);
    return off;
  }
  int64_t off = p->top;
  Block *end = p->free.n ? &p->free.a[p->free.n - 1] : NULL;
  if (end && end->off + end->size == p->top) {
    off = end->off;
    del(p, p->free.n - 1);
  }
  p->top = off + size;
  return off;
}

static void give(Pool *p, int64_t off, int64_t size) {
  int k = 0;
  while (k < p->free.n && p->free.a[k].off < off)
    k++;
  vec_push(p->a, &p->free, ((Block){0, 0}));
  memmove(&p->free.a[k + 1], &p->free.a[k], sizeof(Block) * (size_t)(p->free.n - 1 - k));
  p->free.a[k] = (Block){off, size};
  if (k + 1 < p->free.n && off + size == p->free.a[k + 1].off) {
    p->free.a[k].size += p->free.a[k + 1].size;
    del(p, k + 1);
  }
  if (k > 0 && p->free.a[k - 1].off + p->free.a[k - 1].size == off) {
    p->free.a[k - 1].size += p->free.a[k].size;
    del(p, k);
  }
}

static void plan_func(Func *f) {
  Arena *a = f->mod->arena;
  int nstep, n = f->inst.n;
  Life *l = lifetimes(a, f, &nstep);
  int *head = arena_alloc(a, sizeof(int) * (size_t)(nstep + 1));
  int *next = arena_alloc(a, sizeof(int) * (size_t)(n + 1));
  for (int s = 0; s < nstep; s++)
    head[s] = -1;
  for (int i = n - 1; i >= 0; i--)
    if (l[i].size) {
      next[i] = head[l[i].last];
      head[l[i].last] = i;
    }
  Pool p = {.a = a};
  int i = 0;
  for (int s = 0; s < nstep; s++) {
    for (; i < n && l[i].def == s; i++)
      f->inst.a[i]->offset = l[i].size ? take(&p, l[i].size) : -1;
    for (int k = head[s]; k >= 0; k = next[k])
      give(&p, f->inst.a[k]->offset, l[k].size);
  }
  f->work_bytes = p.top;
}

bool pass_memplan(Module *m, Diag *d) {
  (void)d;
  for (int k = 0; k < m->func.n; k++)
    plan_func(m->func.a[k]);
  return true;
}

/* ---- the report ---- */

static void print_size(FILE *out, int64_t b) {
  if (b >= 1 << 20)
    fprintf(out, "%.2f MiB", (double)b / (1 << 20));
  else if (b >= 1 << 10)
    fprintf(out, "%.1f KiB", (double)b / (1 << 10));
  else
    fprintf(out, "%lld B", (long long)b);
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
    for (int s = l[i].def; s <= l[i].last; s++)
      live[s] += l[i].size;
  }
  for (int s = 0; s < nstep; s++)
    peak = live[s] > peak ? live[s] : peak;
  fprintf(out, "@%s: work arena ", f->name);
  print_size(out, f->work_bytes);
  fputs(", peak live ", out);
  print_size(out, peak);
  fprintf(out, ", %d buffer%s (", nbuf, nbuf == 1 ? "" : "s");
  print_size(out, total);
  fprintf(out, " without reuse), %d steps\n", nstep);
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
  int64_t bytes[3] = {0, 0, 0};
  for (int k = 0; k < m->global.n; k++)
    bytes[m->global.a[k].kind] += round_up(bytes_of(&m->global.a[k].type));
  fprintf(out, "memory plan of %s (64-byte aligned, best fit, reused after last use)\n",
          m->name);
  fputs("state: params ", out);
  print_size(out, bytes[G_PARAM]);
  fputs(", optimizer state ", out);
  print_size(out, bytes[G_STATE]);
  fputs("; inputs ", out);
  print_size(out, bytes[G_INPUT]);
  fputs(" (caller's buffers)\n", out);
  for (int k = 0; k < m->func.n; k++)
    report_func(out, m->func.a[k]);
}
