/* print.c: writes a module in the text form of docs/IR.md. Every field a later
 * stage reads is printed, so parse.c rebuilds the module and prints it again
 * byte for byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

const IrRange ir_positive = {0, INFINITY, true, true, "positive"};
const IrRange ir_nonnegative = {0, INFINITY, false, true, "non-negative"};
const IrRange ir_unit = {0, 1, false, false, "in [0, 1]"};
const IrRange ir_unit_open = {0, 1, false, true, "in [0, 1)"};
static const IrRange unit_above0 = {0, 1, true, false, "in (0, 1]"};
const IrRange ir_quantity = {0, IR_QUANTITY_MAX, true, false, "positive and at most 9e18"};
const IrRange ir_mem = {1, IR_QUANTITY_MAX, false, false, "from 1 byte to 9e18"};
const IrRange ir_tile = {1, 64, false, false, "from 1 to 64"};

bool ir_in_range(const IrRange *r, double x) {
  return isfinite(x) && (x > r->lo || (!r->lo_open && x == r->lo)) &&
         (x < r->hi || (!r->hi_open && x == r->hi));
}

const IrField *ir_field(const IrField *fields, const char *name) {
  for (const IrField *f = fields; f->name; f++)
    if (!strcmp(f->name, name))
      return f;
  return NULL;
}

#define FIELD(T, f, k) {#f, k, offsetof(T, f), NULL, 0, NULL}
#define RANGED(T, f, k, r) {#f, k, offsetof(T, f), NULL, 0, &r}
#define ENUM(T, f, names, n) {#f, 'e', offsetof(T, f), names, n, NULL}
const IrField ir_device_fields[] = {
    FIELD(Device, kind, 's'),   RANGED(Device, gflops, 'f', ir_positive),
    RANGED(Device, bw, 'f', ir_quantity), RANGED(Device, lat, 'f', ir_quantity),
    RANGED(Device, row, 'f', ir_quantity), RANGED(Device, entry, 'f', ir_quantity),
    RANGED(Device, attn, 'f', ir_positive),
    RANGED(Device, score, 'f', ir_quantity), RANGED(Device, attn_block, 'f', ir_quantity),
    RANGED(Device, product, 'f', ir_quantity),
    RANGED(Device, spill, 'f', ir_quantity), RANGED(Device, l2, 'i', ir_mem),
    RANGED(Device, tile_m, 'i', ir_tile),
    RANGED(Device, tile_n, 'i', ir_tile),
    RANGED(Device, mem, 'i', ir_mem), FIELD(Device, target, 's'),
    FIELD(Device, cpu, 's'),    FIELD(Device, spread, 'f'), {0}};
const IrField ir_link_fields[] = {RANGED(Link, bw, 'f', ir_quantity),
                                  RANGED(Link, lat, 'f', ir_quantity), FIELD(Link, spread, 'f'),
                                  {0}};
const IrField ir_collective_fields[] = {FIELD(Collective, method, 'i'),
                                        FIELD(Collective, ranks, 'i'),
                                        RANGED(Collective, bw, 'f', ir_quantity),
                                        RANGED(Collective, lat, 'f', ir_quantity),
                                        FIELD(Collective, spread, 'f'),
                                        {0}};
const IrField ir_train_fields[] = {
    FIELD(Train, loss, 's'),
    ENUM(Train, opt, ir_opt_names, OPT_COUNT),
    RANGED(Train, lr, 'f', ir_positive),
    RANGED(Train, momentum, 'f', ir_unit_open),
    RANGED(Train, weight_decay, 'f', ir_nonnegative),
    RANGED(Train, beta1, 'f', ir_unit_open),
    RANGED(Train, beta2, 'f', ir_unit_open),
    RANGED(Train, eps, 'f', ir_positive),
    ENUM(Train, schedule, dtrt_schedule_names, DT_SCHED_COUNT),
    FIELD(Train, warmup, 'i'),
    FIELD(Train, total, 'i'),
    FIELD(Train, nesterov, 'i'),
    FIELD(Train, eps_kingma, 'i'),
    RANGED(Train, clip_norm, 'f', ir_positive),
    RANGED(Train, dampening, 'f', ir_unit),
    FIELD(Train, accumulate, 'i'),
    RANGED(Train, beta, 'f', ir_unit_open),
    FIELD(Train, topk, 'i'),
    FIELD(Train, chunk, 'i'),
    RANGED(Train, lr_decay, 'f', ir_nonnegative),
    RANGED(Train, initial_accumulator_value, 'f', ir_nonnegative),
    RANGED(Train, min_lr, 'f', ir_nonnegative),
    RANGED(Train, end_factor, 'f', ir_unit),
    RANGED(Train, gamma, 'f', unit_above0),
    FIELD(Train, step_size, 'i'),
    FIELD(Train, decay_min_rank, 'i'),
    {0}};
const IrField ir_global_fields[] = {ENUM(Global, init, dtrt_init_names, DT_INIT_COUNT),
                                    FIELD(Global, init_arg, 'f'),
                                    FIELD(Global, fan_in, 'i'),
                                    FIELD(Global, fan_out, 'i'),
                                    FIELD(Global, sparse, 'i'),
                                    FIELD(Global, no_decay, 'i'),
                                    RANGED(Global, lr, 'f', ir_nonnegative),
                                    RANGED(Global, weight_decay, 'f', ir_nonnegative),
                                    {0}};

static bool is_ident(const char *s) {
  if (!s || !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_'))
    return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '.'))
      return false;
  return true;
}

/* s quoted, its plain characters written a run at a time (IR text holds a
 * source location, its file's name, on every instruction). */
static void print_str(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    size_t run = 0;
    while (p[run] >= 0x20 && p[run] != 0x7f && p[run] != '"' && p[run] != '\\')
      run++;
    if (run) {
      fwrite(p, 1, run, out);
      p += run - 1;
    } else if (*p == '"' || *p == '\\') {
      fprintf(out, "\\%c", *p);
    } else if (*p == '\n') {
      fputs("\\n", out);
    } else if (*p == '\t') {
      fputs("\\t", out);
    } else {
      fprintf(out, "\\x%02x", *p);
    }
  }
  fputc('"', out);
}

/* Bare when it lexes as an identifier, quoted otherwise. */
static void print_name(FILE *out, const char *s) {
  if (is_ident(s))
    fputs(s, out);
  else
    print_str(out, s ? s : "");
}

/* v in decimal, without printf: IR text holds millions of ids, dims and
 * offsets (a mesh of 1024 devices prints each device's functions). */
static void put_int(FILE *out, long long v) {
  char buf[24], *p = buf + sizeof buf;
  unsigned long long u = v < 0 ? 0 - (unsigned long long)v : (unsigned long long)v;
  *--p = 0;
  do
    *--p = (char)('0' + u % 10);
  while (u /= 10);
  if (v < 0)
    *--p = '-';
  fputs(p, out);
}

/* The shortest text that reads back as exactly v, always with a '.' or an
 * exponent so that it reads back as a float. Whole numbers below 1e15 keep
 * their digits (80.0, not 8e+01). The search takes up to 17 snprintf and
 * strtod, so the last values found are kept (a module repeats few floats,
 * once per device). */
static void print_float(FILE *out, double v) {
  if (isnan(v)) {
    fputs("nan", out);
    return;
  }
  if (isinf(v)) {
    fputs(v < 0 ? "-inf" : "inf", out);
    return;
  }
  static struct {
    double v;
    char text[40];
  } seen[64];
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  unsigned slot = (unsigned)((bits * 0x9e3779b97f4a7c15ull) >> 58);
  if (seen[slot].text[0] && !memcmp(&seen[slot].v, &v, sizeof v)) {
    fputs(seen[slot].text, out);
    return;
  }
  char buf[40];
  int exp10 = v == 0 ? 0 : (int)floor(log10(fabs(v)));
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", exp10 >= prec && exp10 < 15 ? exp10 + 1 : prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  if (!strpbrk(buf, ".e"))
    strcat(buf, ".0");
  seen[slot].v = v;
  memcpy(seen[slot].text, buf, sizeof buf);
  fputs(buf, out);
}

/* False while ir_print_structure runs. */
static bool with_locs = true;

static void print_loc(FILE *out, Loc loc) {
  if (!with_locs || !loc.file || loc.file->ir_text)
    return;
  fputs(" loc ", out);
  print_str(out, loc.file->name ? loc.file->name : "");
  fputc(':', out);
  put_int(out, loc.line);
  fputc(':', out);
  put_int(out, loc.col);
}

/* As type_str writes it: f32[2,3]. */
static void print_type(FILE *out, const Type *t) {
  fputs(dtype_name(t->dtype), out);
  if (t->dtype == DT_VOID)
    return;
  fputc('[', out);
  for (int i = 0; i < t->rank; i++) {
    if (i)
      fputc(',', out);
    put_int(out, (long long)t->dim[i]);
  }
  fputc(']', out);
}

static bool field_zero(const void *rec, const IrField *f) {
  const char *p = (const char *)rec + f->off;
  const char *s;
  int64_t i;
  int e;
  double v;
  switch (f->kind) {
  case 's': memcpy(&s, p, sizeof s); return !s;
  case 'e': memcpy(&e, p, sizeof e); return e < 0;
  case 'i': memcpy(&i, p, sizeof i); return i == 0;
  default: memcpy(&v, p, sizeof v); return v == 0 && !signbit(v);
  }
}

/* Fields at their zero value (0, +0.0, NULL) are left out. */
static void print_fields(FILE *out, const void *rec, const IrField *f) {
  bool any = false;
  for (; f->name; f++) {
    if (field_zero(rec, f))
      continue;
    const char *p = (const char *)rec + f->off;
    fprintf(out, "%s%s = ", any ? ", " : " {", f->name);
    any = true;
    if (f->kind == 's') {
      const char *s;
      memcpy(&s, p, sizeof s);
      print_str(out, s);
    } else if (f->kind == 'e') {
      int e;
      memcpy(&e, p, sizeof e);
      print_str(out, e < f->n ? f->names[e] : "?");
    } else if (f->kind == 'f') {
      double v;
      memcpy(&v, p, sizeof v);
      print_float(out, v);
    } else {
      int64_t i;
      memcpy(&i, p, sizeof i);
      put_int(out, (long long)i);
    }
  }
  if (any)
    fputc('}', out);
}

static void print_attrs(FILE *out, const Inst *in) {
  for (int k = 0; k < in->nattr; k++) {
    const Attr *a = &in->attr[k];
    fputs(k ? ", " : " {", out);
    print_name(out, a->name);
    fputs(" = ", out);
    switch (a->kind) {
    case A_INT: put_int(out, (long long)a->i); break;
    case A_FLOAT: print_float(out, a->f); break;
    case A_STR: print_str(out, a->s ? a->s : ""); break;
    case A_INTS:
      fputc('[', out);
      for (int j = 0; j < a->n; j++) {
        if (j)
          fputs(", ", out);
        put_int(out, (long long)a->ints[j]);
      }
      fputc(']', out);
      break;
    }
  }
  if (in->nattr)
    fputc('}', out);
}

/* Broken references print with a '?' so that the text does not parse. */
static void print_shard(FILE *out, const Module *m, const Sharding *s, int rank) {
  if (!s)
    return;
  const Mesh *mesh = s->mesh >= 0 && s->mesh < m->mesh.n ? &m->mesh.a[s->mesh] : NULL;
  fputs(" shard ", out);
  if (mesh)
    print_name(out, mesh->name);
  else
    fprintf(out, "?%d", s->mesh);
  fputc('[', out);
  for (int d = 0; d < rank && d < IR_MAX_RANK; d++) {
    int ax = s->axis[d];
    fputs(d ? ", " : "", out);
    if (ax < 0) {
      fputc('*', out);
      continue;
    }
    if (!mesh || ax >= mesh->naxis) {
      fprintf(out, "?%d", ax);
      continue;
    }
    print_name(out, mesh->axis_name[ax]);
    for (int k = 0; s->ratio[d] && k < mesh->axis_size[ax]; k++) {
      fputs(k ? ", " : "(", out);
      print_float(out, s->ratio[d][k]);
    }
    if (s->ratio[d] && mesh->axis_size[ax] > 0)
      fputc(')', out);
  }
  fputc(']', out);
  if (s->partial)
    fputs(" partial", out);
  for (int a = 0, first = 1; s->partial && s->partial_axes && a < 8; a++) {
    if (!(s->partial_axes & (1u << a)))
      continue;
    fputs(first ? "(" : ", ", out);
    first = 0;
    if (mesh && a < mesh->naxis)
      print_name(out, mesh->axis_name[a]);
    else
      fprintf(out, "?%d", a);
  }
  if (s->partial && s->partial_axes)
    fputc(')', out);
}

static void print_value(FILE *out, const Inst *i) {
  if (!i) {
    fputs("%?", out);
    return;
  }
  fputc('%', out);
  if (i->name)
    print_name(out, i->name);
  else
    put_int(out, i->id);
}

void ir_print_inst(FILE *out, const Inst *in) {
  bool has_value = in->type.dtype != DT_VOID;
  fputs("  ", out);
  if (in->name || has_value) {
    print_value(out, in);
    fputs(" = ", out);
  }
  fputs((unsigned)in->op < OP_COUNT ? ir_ops[in->op].name : "?", out);
  for (int k = 0; k < in->nin; k++) {
    fputs(k ? ", " : " ", out);
    print_value(out, in->in[k]);
  }
  print_attrs(out, in);
  if (has_value) {
    fputs(" : ", out);
    print_type(out, &in->type);
  }
  print_shard(out, in->fn->mod, in->shard, in->type.rank);
  if (in->fuse) {
    fputs(" fuse ", out);
    put_int(out, in->fuse);
  }
  if (in->offset != -1) {
    fputs(" offset ", out);
    put_int(out, (long long)in->offset);
  }
  print_loc(out, in->loc);
  fputc('\n', out);
}

/* Function k after the bodies its repeats run, so that the text reads top
 * to bottom; state[k]: 0 not yet, 1 under way, 2 printed. */
static void print_after_bodies(FILE *out, const Module *m, int k, char *state) {
  if (state[k])
    return;
  state[k] = 1;
  const Func *f = m->func.a[k];
  for (int i = 0; i < f->inst.n; i++) {
    const Func *b = f->inst.a[i]->op == OP_repeat ? ir_repeat_body(f->inst.a[i]) : NULL;
    for (int j = 0; b && j < m->func.n; j++)
      if (m->func.a[j] == b)
        print_after_bodies(out, m, j, state);
  }
  state[k] = 2;
  fputc('\n', out);
  ir_print_func(out, f);
}

void ir_print_func(FILE *out, const Func *f) {
  fputs("func @", out);
  print_name(out, f->name);
  if (f->device >= 0)
    fprintf(out, " device %d", f->device);
  if (f->body)
    fputs(" body", out);
  print_loc(out, f->loc);
  fputs(" {\n", out);
  for (int k = 0; k < f->inst.n; k++)
    ir_print_inst(out, f->inst.a[k]);
  fputs("}\n", out);
}

static void print_cluster(FILE *out, const Cluster *c) {
  fputs("\ncluster ", out);
  print_name(out, c->name);
  print_loc(out, c->loc);
  fputs(" {\n", out);
  for (int k = 0; k < c->node.n; k++) {
    fputs("  node ", out);
    print_name(out, c->node.a[k].name);
    print_loc(out, c->node.a[k].loc);
    fputc('\n', out);
  }
  for (int k = 0; k < c->dev.n; k++) {
    const Device *dv = &c->dev.a[k];
    fputs("  device ", out);
    print_name(out, dv->name);
    fputs(" on ", out);
    if (dv->node >= 0 && dv->node < c->node.n)
      print_name(out, c->node.a[dv->node].name);
    else
      fprintf(out, "?%d", dv->node);
    print_fields(out, dv, ir_device_fields);
    print_loc(out, dv->loc);
    fputc('\n', out);
  }
  for (int k = 0; k < c->link.n; k++) {
    fputs("  link ", out);
    print_name(out, c->link.a[k].name);
    print_fields(out, &c->link.a[k], ir_link_fields);
    print_loc(out, c->link.a[k].loc);
    fputc('\n', out);
  }
  for (int k = 0; k < c->coll.n; k++) {
    fputs("  collective ", out);
    print_name(out, ir_ops[c->coll.a[k].op].name);
    print_fields(out, &c->coll.a[k], ir_collective_fields);
    print_loc(out, c->coll.a[k].loc);
    fputc('\n', out);
  }
  fputs("}\n", out);
}

static void print_mesh(FILE *out, const Module *m, const Mesh *mesh) {
  fputs("mesh ", out);
  print_name(out, mesh->name);
  fputc('[', out);
  int64_t n = 1;
  for (int a = 0; a < mesh->naxis && a < IR_MAX_MESH_AXES; a++) {
    fputs(a ? ", " : "", out);
    print_name(out, mesh->axis_name[a]);
    fprintf(out, " = %d", mesh->axis_size[a]);
    n *= mesh->axis_size[a] > 0 ? mesh->axis_size[a] : 0;
  }
  fputs("] on [", out);
  for (int64_t k = 0; mesh->dev && k < n; k++) {
    int d = mesh->dev[k];
    fputs(k ? ", " : "", out);
    if (m->cluster && d >= 0 && d < m->cluster->dev.n)
      print_name(out, m->cluster->dev.a[d].name);
    else
      fprintf(out, "%d", d);
  }
  fputc(']', out);
  print_loc(out, mesh->loc);
  fputc('\n', out);
}

static bool train_set(const Train *t) {
  for (const IrField *f = ir_train_fields; f->name; f++)
    if (!field_zero(t, f))
      return true;
  return t->loc.file && !t->loc.file->ir_text;
}

void ir_print(FILE *out, const Module *m) {
  static const char *plans[] = {"none", "auto", "even", "explicit"};
  static const char *kinds[] = {"input", "param", "buffer", "state"};
  static_assert(COUNTOF(plans) == PLAN_EXPLICIT + 1, "plan names");
  static_assert(COUNTOF(kinds) == G_STATE + 1, "global kinds");

  fputs("module ", out);
  print_name(out, m->name);
  fputc('\n', out);
  if (m->dim.n)
    fputc('\n', out);
  for (int k = 0; k < m->dim.n; k++) {
    fputs("dim ", out);
    print_name(out, m->dim.a[k].name);
    fprintf(out, " = %lld", (long long)m->dim.a[k].value);
    print_loc(out, m->dim.a[k].loc);
    fputc('\n', out);
  }
  if (m->cluster)
    print_cluster(out, m->cluster);
  if (m->mesh.n || m->plan != PLAN_NONE)
    fputc('\n', out);
  for (int k = 0; k < m->mesh.n; k++)
    print_mesh(out, m, &m->mesh.a[k]);
  if (m->plan != PLAN_NONE) {
    fprintf(out, "plan %s", (unsigned)m->plan <= PLAN_EXPLICIT ? plans[m->plan] : "?");
    if (m->microbatches > 1) {
      fprintf(out, " microbatches %d", m->microbatches);
      print_loc(out, m->microbatches_loc);
      fprintf(out, " schedule \"%s\"", ir_pipe_schedules[m->schedule]);
      if (m->schedule_loc.file)
        print_loc(out, m->schedule_loc);
    }
    fputc('\n', out);
  }
  if (m->det_pieces > 1) {
    fprintf(out, "deterministic %d batch %lld", m->det_pieces, (long long)m->batch);
    print_loc(out, m->det_loc);
    fputc('\n', out);
  }
  if (m->exchange != DT_WIRE_F32 || m->exchange_auto) {
    fprintf(out, "exchange %s", m->exchange_auto ? "auto" : dtrt_wire_names[m->exchange]);
    print_loc(out, m->exchange_loc);
    fputc('\n', out);
  }
  if ((m->state_sharded || m->state_whole) && m->mesh.n) {
    fprintf(out, "shard_state %s",
            m->state_whole ? "none" : m->mesh.a[0].axis_name[m->state_axis]);
    print_loc(out, m->state_loc);
    fputc('\n', out);
  }
  if (m->attn_heads) {
    fputs("attention heads", out);
    print_loc(out, m->attn_loc);
    fputc('\n', out);
  }
  if (train_set(&m->train)) {
    fputs("\ntrain", out);
    print_fields(out, &m->train, ir_train_fields);
    print_loc(out, m->train.loc);
    fputc('\n', out);
  }
  if (m->global.n)
    fputc('\n', out);
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    fprintf(out, "%s ", (unsigned)g->kind <= G_STATE ? kinds[g->kind] : "?");
    print_name(out, g->name);
    fputs(" : ", out);
    print_type(out, &g->type);
    print_fields(out, g, ir_global_fields);
    print_shard(out, m, g->shard, g->type.rank);
    print_loc(out, g->loc);
    fputc('\n', out);
  }
  char *state = calloc((size_t)m->func.n + 1, 1);
  DTC_ASSERT(state);
  for (int k = 0; k < m->func.n; k++)
    print_after_bodies(out, m, k, state);
  free(state);
}

void ir_print_structure(FILE *out, const Module *m) {
  with_locs = false;
  ir_print(out, m);
  with_locs = true;
}

char *ir_string_of(void (*print)(FILE *, const Module *), const Module *m, size_t *len) {
  char *text = NULL;
  size_t n = 0;
  FILE *out = open_memstream(&text, &n);
  DTC_ASSERT(out);
  print(out, m);
  fclose(out);
  if (len)
    *len = n;
  return text;
}

char *ir_print_string(const Module *m) {
  return ir_string_of(ir_print, m, NULL);
}

const char *ir_bytes_str(double b, char *buf, size_t n) {
  if (b >= 1 << 30)
    snprintf(buf, n, "%.2f GiB", b / (1 << 30));
  else if (b >= 1 << 20)
    snprintf(buf, n, "%.2f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    snprintf(buf, n, "%.1f KiB", b / (1 << 10));
  else
    snprintf(buf, n, "%.0f B", b);
  return buf;
}
