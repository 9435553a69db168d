/* memplan.c: the static memory plan: one work arena per function. Lives come
 * from the instruction order (a fusion group is one step); offsets are placed
 * greedily, largest buffer first, into the best fitting gap among the buffers
 * live at the same time, so memory is reused after a value's last use.
 *
 * Requires: each fusion group contiguous (passes/fusion.c), or no groups.
 * Guarantees: Inst.offset >= 0 (64-byte aligned) exactly for the values that
 * need memory, and -1 for the others: values used only inside their group,
 * consts and learning rates (immediates), reshapes (alias their operand),
 * loads of inputs (alias the caller's buffer), loads of params and state
 * (alias the state block, unless a store to the global comes before their
 * last use: those are copied), and kernel results that go to an output
 * (written into the caller's buffer), and args (the caller's). A repeat also
 * gets a scratch region, live at its own step only, at offset `scratch`: two
 * buffers for each carried value, then the body's work arena, then a row for
 * each stacked output that no repeat_out takes. A
 * repeat_out lives from its repeat's step, which writes it. Two values live
 * at the same step never overlap; Func.work_bytes covers every offset.
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

/* Greedy by size: the largest buffers are placed first, each at the best
 * fitting gap among the buffers already placed that live at the same time
 * (the lowest offset past all of them when no gap fits). The placed buffers
 * are kept in offset order, so finding the gaps is one pass over them, with
 * no sort: quadratic still when every buffer lives with every other (a
 * training step's activations), but a pass of compares. */
/* Whether a repeat_out of r gives its output k. */
static bool has_out(const Inst *r, int k) {
  const Func *f = r->fn;
  for (int i = 0; i < f->inst.n; i++) {
    const Inst *x = f->inst.a[i];
    if (x->op == OP_repeat_out && x->in[0] == r && ir_get_int(x, "index", 0) == k)
      return true;
  }
  return false;
}

/* Two buffers per carried value, the body's arena, then a row for each
 * stacked output no repeat_out takes (the body writes it every iteration). */
static int64_t scratch_bytes(const Inst *r) {
  const Func *body = ir_repeat_body(r);
  DTC_ASSERT(body && body->work_bytes >= 0);
  int64_t s = round_up(body->work_bytes);
  int64_t carry = ir_get_int(r, "carry", 1);
  for (int k = 0; k < carry; k++)
    s += 2 * round_up(bytes_of(&r->in[k]->type));
  for (int k = (int)carry; k < ir_func_noutputs(body); k++)
    if (!has_out(r, k))
      s += round_up(bytes_of(&ir_func_output(body, k)->in[0]->type));
  return round_up(s);
}

static void plan_func(Func *f) {
  if (f->work_bytes >= 0)
    return;
  for (int i = 0; i < f->inst.n; i++)
    if (f->inst.a[i]->op == OP_repeat)
      plan_func(ir_repeat_body(f->inst.a[i]));
  Arena *a = f->mod->arena;
  int nstep, n = f->inst.n, nb = 0;
  Life *l = lifetimes(a, f, &nstep);
  Buf *buf = arena_alloc(a, sizeof(Buf) * (size_t)(2 * n + 1));
  Buf **placed = arena_alloc(a, sizeof(Buf *) * (size_t)(2 * n + 1));
  for (int i = 0; i < n; i++) {
    f->inst.a[i]->offset = -1;
    if (l[i].size)
      buf[nb++] = (Buf){i, 0, l[i].size, l[i].def, l[i].last};
    if (f->inst.a[i]->op == OP_repeat)
      buf[nb++] = (Buf){-1 - i, 0, scratch_bytes(f->inst.a[i]), l[i].def, l[i].def};
  }
  qsort(buf, (size_t)nb, sizeof *buf, by_size_desc);
  int64_t top = 0;
  for (int k = 0; k < nb; k++) {
    Buf *b = &buf[k];
    int64_t at = -1, gap = INT64_MAX, end = 0;
    for (int j = 0; j < k; j++) {
      const Buf *x = placed[j];
      if (x->def > b->last || b->def > x->last)
        continue;
      int64_t room = x->off - end;
      if (room >= b->size && room < gap)
        at = end, gap = room;
      end = x->off + x->size > end ? x->off + x->size : end;
    }
    b->off = at >= 0 ? at : end;
    top = b->off + b->size > top ? b->off + b->size : top;
    if (b->i >= 0)
      f->inst.a[b->i]->offset = b->off;
    else
      ir_set_int(f->inst.a[-1 - b->i], "scratch", b->off);
    insert_by_offset(placed, k, b);
  }
  f->work_bytes = top;
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
