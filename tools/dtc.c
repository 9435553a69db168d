/* dtc.c: the compiler driver. Reads a .dt model (or IR text), runs the pass
 * pipeline of passes/passes.c, and emits IR, a graph, a plan, or code. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codegen.h"
#include "frontend.h"
#include "ir.h"
#include "passes.h"

static const char usage[] =
  "usage: dtc [options] FILE\n"
  "\n"
  "FILE is a model in the dtc language (.dt) or IR text (.ir).\n"
  "\n"
  "options:\n"
  "  -o FILE              write the output to FILE (default: stdout for text,\n"
  "                       NAME.o for objects); code also writes NAME.h beside it.\n"
  "                       When the mesh's devices name other targets (a device's\n"
  "                       target = \"TRIPLE\"), FILE holds the code of the devices\n"
  "                       of --target (or this machine), and FILE with .TRIPLE\n"
  "                       before its suffix that of each other target\n"
  "  --emit=KIND          ir     the IR after the frontend, or after --stop-after\n"
  "                       dot    a Graphviz graph of the model\n"
  "                       plan   planned forms and ratios, shardings, collectives,\n"
  "                              memory\n"
  "                       sim    predicted step time per device; with -o FILE,\n"
  "                              a Chrome trace (JSON) of the predicted step\n"
  "                       llvm   LLVM IR text (.ll)\n"
  "                       asm    assembly (.s)\n"
  "                       obj    object file (.o, the default)\n"
  "  -D NAME=VALUE        set a model dimension (batch B = 256 -> -D B=512)\n"
  "  -O0 -O1 -O2 -O3      optimisation level of generated code (default -O2)\n"
  "  --target=TRIPLE      generate code for TRIPLE (default: this machine)\n"
  "  -mcpu=CPU            generate code for CPU (default: host, or generic)\n"
  "  -fdeterministic[=N]  the same result on any layout: every sum over the\n"
  "                       batch in N fixed pieces (default 8 or the largest\n"
  "                       divisor of the batch below), added in order\n"
  "  -fexchange=FORMAT    the format of the data-parallel gradient exchange:\n"
  "                       f32 (the default), bf16 (rounded to nearest even,\n"
  "                       summed in f32) or auto (the planner's choice by\n"
  "                       the simulated step); as `exchange = FORMAT` in the\n"
  "                       parallel block\n"
  "  -fepilogue           run the elementwise ops that read a matmul's result\n"
  "                       on each strip of it inside dtc's GEMM (off: as loops\n"
  "                       of their own after it, measured as fast or faster)\n"
  "  -fno-coalesce        keep every all_to_all and all_gather on its own (by\n"
  "                       default the independent ones over a mesh axis, a\n"
  "                       table's pooled rows each, are exchanged as one)\n"
  "  -fmatmul=HOW         matmuls and convolutions' products by dtc's own\n"
  "                       generated kernel (dtc, the default) or by OpenBLAS\n"
  "                       through libdtrt (blas)\n"
  "  -fdenormals=MODE     how a step treats denormal floats: flush them to\n"
  "                       zero, results and operands (flush, the default:\n"
  "                       arithmetic on denormals runs tens of times slower),\n"
  "                       or keep IEEE gradual underflow (ieee)\n"
  "  --cluster=FILE       plan for the cluster block in FILE instead of the\n"
  "                       one the parallel block names\n"
  "  --devices=LIST       an elastic build: one plan for each device count of\n"
  "                       LIST (N, LO..HI or a comma list of them, e.g. 1..4 or\n"
  "                       1,2,4), each over the first N devices of the mesh\n"
  "                       resized to one axis of N, all in one object; the\n"
  "                       model's NAME_create takes the plan of the job's size\n"
  "  --stop-after=PASS    stop the pipeline after PASS (with --emit=ir)\n"
  "  --print-after=PASS   print the IR to stderr after PASS (repeatable)\n"
  "  --print-after-all    print the IR to stderr after every pass\n"
  "  --time-passes        report the time each pass took\n"
  "  --verify-each        check the IR after every pass and the generated LLVM\n"
  "                       module (a failure is a bug in dtc); on in Debug\n"
  "                       builds. The frontend's output is always checked\n"
  "  --list-passes        list the passes in pipeline order\n"
  "  --print-model-name   print the name of the model FILE declares (the NAME\n"
  "                       of NAME.h and NAME_create) and generate nothing\n"
  "  -Werror              treat warnings as errors\n"
  "  -Wno-unused          no warnings for unused parameters and annotations\n"
  "  -Wreshard            warn at every reshard the compiler inserts\n"
  "  -ferror-limit=N      stop after N errors (default 20, 0: no limit)\n"
  "  --help               this text\n"
  "  --version            the version\n";

typedef struct Driver {
  CgOptions opt;             /* -o, --emit, --target, -mcpu, -O */
  const char *input;         /* the source path */
  const char *cluster_file;  /* --cluster */
  bool time_passes;
  bool print_name;           /* --print-model-name */
  const char *defs[64];
  int ndefs;
  const char *print_after[32];
  int det;                   /* -fdeterministic: 0 off, -1 the default count, else the count */
  bool epilogue;             /* -fepilogue */
  bool no_coalesce;          /* -fno-coalesce */
  int exchange;              /* -fexchange: 1 + its DtWire, 0 not given */
  PassOptions pass;          /* --stop-after, --print-after, --print-after-all */
  PassRun run;
  int devices[CG_MAX_PLANS]; /* --devices, ascending; ndevices 0: none given */
  int ndevices;
  const char *devices_arg;
} Driver;

static int fail(const char *fmt, ...) {
  va_list ap;
  fputs("dtc: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

static bool has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), k = strlen(suf);
  return n >= k && !strcmp(s + n - k, suf);
}

/* Returns the value of "--name=VALUE" or "-xVALUE", or NULL. */
static const char *opt_value(const char *arg, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(arg, prefix, n) ? NULL : arg + n;
}

/* --devices=LIST: N, LO..HI, or a comma list of them, into dr->devices
 * ascending, each count once. */
static int parse_devices(Driver *dr, const char *v) {
  static const char expect[] = "expected device counts from 1 to 4096: N, LO..HI or a comma "
                               "list of them, e.g. 1..4 or 1,2,4";
  bool on[4097] = {0};
  const char *p = v;
  dr->devices_arg = v;
  for (;;) {
    char *end;
    long lo = 0, hi = 0;
    if (*p < '0' || *p > '9' || (lo = strtol(p, &end, 10)) < 1 || lo > 4096)
      return fail("invalid value '%s' in '--devices' (%s)", v, expect);
    hi = lo;
    p = end;
    if (p[0] == '.' && p[1] == '.') {
      p += 2;
      if (*p < '0' || *p > '9' || (hi = strtol(p, &end, 10)) < 1 || hi > 4096)
        return fail("invalid value '%s' in '--devices' (%s)", v, expect);
      p = end;
      if (hi < lo)
        return fail("invalid value '%s' in '--devices': the range %ld..%ld is empty (%s)", v,
                    lo, hi, expect);
    }
    for (long n = lo; n <= hi; n++) {
      if (on[n])
        return fail("invalid value '%s' in '--devices': %ld devices are listed twice", v, n);
      on[n] = true;
    }
    if (!*p)
      break;
    if (*p++ != ',')
      return fail("invalid value '%s' in '--devices' (%s)", v, expect);
  }
  dr->ndevices = 0;
  for (int n = 1; n <= 4096; n++)
    if (on[n] && dr->ndevices == CG_MAX_PLANS)
      return fail("'--devices=%s' asks for more than %d plans", v, CG_MAX_PLANS);
    else if (on[n])
      dr->devices[dr->ndevices++] = n;
  return 0;
}

/* plan auto's memory check (PassOptions.extra_memory): the scratch blocks
 * of the GEMM each device's CPU asks for and of the convolutions, and
 * libdtrt's tables, as --emit=plan counts them (codegen/memory.c); nothing
 * when the targets cannot be made (the pipeline reports that). */
static void runtime_memory(Module *m, double *bytes, void *arg) {
  const Driver *dr = arg;
  CgOptions o = dr->opt;
  o.output = o.output ? o.output : "-";
  Diag quiet;
  diag_init_quiet(&quiet);
  CgTargets ts;
  int ndev = cg_devices(m);
  if (!ndev || !cg_targets(m, &o, ndev, &ts, &quiet))
    return;
  for (int dev = 0; dev < ndev; dev++) {
    CgMemory r = cg_memory(m, dev, &ts, o.matmul);
    bytes[dev] = (double)(r.scratch + r.tables);
  }
  cg_targets_free(&ts);
}

static int parse_args(Driver *dr, Diag *d, int argc, char **argv) {
  CgOptions *o = &dr->opt;
  PassOptions *po = &dr->pass;
  po->print_after = dr->print_after;
  po->extra_memory = runtime_memory;
  po->extra_arg = dr;
  o->opt_level = 2;
  o->emit = "obj";
#ifndef NDEBUG
  po->verify_each = o->verify = true;   /* Debug builds check every step */
#endif
  const char *v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("dtc %s\n", DTC_VERSION);
      exit(0);
    } else if (!strcmp(a, "--list-passes")) {
      for (int k = 0; k < pass_count; k++)
        printf("%-10s %s\n", pass_table[k].name, pass_table[k].what);
      exit(0);
    } else if (!strcmp(a, "-o") || !strcmp(a, "-D")) {
      if (i + 1 >= argc)
        return fail("argument to '%s' is missing (expected 1 value)", a);
      if (a[1] == 'o')
        o->output = argv[++i];
      else if (dr->ndefs < COUNTOF(dr->defs))
        dr->defs[dr->ndefs++] = argv[++i];
      else
        return fail("too many -D options");
    } else if (!strncmp(a, "-D", 2)) {
      if (dr->ndefs == COUNTOF(dr->defs))
        return fail("too many -D options");
      dr->defs[dr->ndefs++] = a + 2;
    } else if ((v = opt_value(a, "--emit="))) {
      static const char *kinds[] = {"ir", "dot", "plan", "sim", "llvm", "asm", "obj"};
      bool ok = false;
      for (int k = 0; k < COUNTOF(kinds); k++)
        ok |= !strcmp(v, kinds[k]);
      if (!ok)
        return fail("invalid value '%s' in '--emit' (expected ir, dot, plan, sim, llvm, asm or obj)", v);
      o->emit = v;
    } else if (a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3' && !a[3]) {
      o->opt_level = a[2] - '0';
    } else if ((v = opt_value(a, "--target="))) {
      o->target = v;
    } else if ((v = opt_value(a, "-mcpu="))) {
      o->cpu = v;
    } else if ((v = opt_value(a, "-fmatmul="))) {
      static const char *how[] = {"dtc", "blas"};
      static_assert(COUNTOF(how) == CG_MATMUL_BLAS + 1, "-fmatmul values");
      int k = 0;
      while (k < COUNTOF(how) && strcmp(v, how[k]))
        k++;
      if (k == COUNTOF(how))
        return fail("invalid value '%s' in '-fmatmul' (expected dtc or blas)", v);
      o->matmul = (CgMatmul)k;
    } else if ((v = opt_value(a, "-fdenormals="))) {
      int k = dtrt_name_index(dtrt_denormals_names, DT_DENORMALS_COUNT, v);
      if (k < 0)
        return fail("invalid value '%s' in '-fdenormals' (expected flush or ieee)", v);
      o->denormals = k;
    } else if ((v = opt_value(a, "-fexchange="))) {
      int k = strcmp(v, "auto") ? dtrt_name_index(dtrt_wire_names, DT_WIRE_COUNT, v) : DT_WIRE_COUNT;
      if (k < 0)
        return fail("invalid value '%s' in '-fexchange' (expected f32, bf16 or auto)", v);
      dr->exchange = 1 + k;
    } else if (!strcmp(a, "-fepilogue")) {
      dr->epilogue = true;
    } else if (!strcmp(a, "-fno-coalesce")) {
      dr->no_coalesce = true;
    } else if (!strcmp(a, "-fdeterministic")) {
      dr->det = -1;
    } else if ((v = opt_value(a, "-fdeterministic="))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 2 || n > IR_MAX_PIECES)
        return fail("invalid value '%s' in '-fdeterministic' (expected a count of pieces, 2 to %d)",
                    v, IR_MAX_PIECES);
      dr->det = (int)n;
    } else if ((v = opt_value(a, "--cluster="))) {
      dr->cluster_file = v;
    } else if ((v = opt_value(a, "--devices="))) {
      if (dr->devices_arg)
        return fail("'--devices' given twice ('%s' and '%s'); list every device count in one, "
                    "e.g. --devices=%s,%s", dr->devices_arg, v, dr->devices_arg, v);
      if (parse_devices(dr, v))
        return 1;
    } else if ((v = opt_value(a, "--stop-after="))) {
      if (!pass_lookup(v))
        return fail("unknown pass '%s' in '--stop-after' (see --list-passes)", v);
      po->stop_after = v;
    } else if ((v = opt_value(a, "--print-after="))) {
      if (!pass_lookup(v))
        return fail("unknown pass '%s' in '--print-after' (see --list-passes)", v);
      if (po->nprint_after == COUNTOF(dr->print_after))
        return fail("too many --print-after options");
      dr->print_after[po->nprint_after++] = v;
    } else if (!strcmp(a, "--print-after-all")) {
      po->print_all = true;
    } else if (!strcmp(a, "--print-model-name")) {
      dr->print_name = true;
    } else if (!strcmp(a, "--time-passes")) {
      dr->time_passes = true;
    } else if (!strcmp(a, "--verify-each")) {
      po->verify_each = o->verify = true;
    } else if (!strcmp(a, "-Werror")) {
      d->werror = true;
    } else if (!strcmp(a, "-Wno-unused")) {
      d->wflags &= ~W_UNUSED;
    } else if (!strcmp(a, "-Wreshard")) {
      d->wflags |= W_RESHARD;
    } else if ((v = opt_value(a, "-ferror-limit="))) {
      char *end;
      long n = strtol(v, &end, 10);
      if (!*v || *end || n < 0 || n > 1000000)
        return fail("invalid value '%s' in '-ferror-limit'", v);
      d->max_errors = (int)n;
    } else if (a[0] == '-' && a[1]) {
      return fail("unknown argument: '%s' (see dtc --help)", a);
    } else if (dr->input) {
      return fail("more than one input file: '%s' and '%s'", dr->input, a);
    } else {
      dr->input = a;
    }
  }
  if (!dr->input)
    return fail("no input file (see dtc --help)");
  if (po->stop_after && strcmp(o->emit, "ir"))
    return fail("'--stop-after' needs '--emit=ir'");
  if (dr->ndevices && has_suffix(dr->input, ".ir"))
    return fail("'%s' is IR text: --devices applies to .dt sources only", dr->input);
  if (dr->ndevices && !strcmp(o->emit, "sim") && o->output)
    return fail("'--emit=sim' with --devices reports on stdout: no -o");
  return 0;
}

static void time_report(const Driver *dr, double fe_ms, double cg_ms) {
  fprintf(stderr, "%-10s %10s\n", "pass", "ms");
  fprintf(stderr, "%-10s %10.3f\n", "frontend", fe_ms);
  for (int k = 0; k < pass_count; k++)
    fprintf(stderr, "%-10s %10.3f\n", pass_table[k].name, dr->run.ms[k]);
  if (dr->pass.verify_each)
    fprintf(stderr, "%-10s %10.3f\n", "verify", dr->run.verify_ms);
  if (cg_ms >= 0)
    fprintf(stderr, "%-10s %10.3f\n", "codegen", cg_ms);
}

/* The default output name: the input's base name with a new suffix. */
static const char *default_output(Arena *a, const char *input, const char *suffix) {
  const char *base = strrchr(input, '/');
  base = base ? base + 1 : input;
  const char *dot = strrchr(base, '.');
  size_t n = dot ? (size_t)(dot - base) : strlen(base);
  return arena_printf(a, "%.*s%s", (int)n, base, suffix);
}

static FILE *open_text_output(const char *path) {
  if (!path || !strcmp(path, "-"))
    return stdout;
  return dtrt_open_output(path);
}

/* Why a file could not be opened: what is not a regular file is refused
 * with EINVAL by src_read and dtrt_open_output. */
static const char *why(int err) { return err == EINVAL ? "not a regular file" : strerror(err); }

/* -fdeterministic[=N] on module m: pieces of its batch, unless its parallel
 * block chose them. */
static bool set_deterministic(Module *m, int n) {
  if (m->det_pieces)
    return n < 0 || n == m->det_pieces ||
           (fail("-fdeterministic=%d: the parallel block of '%s' cuts the batch into %d pieces", n,
                 m->name, m->det_pieces), false);
  if (!m->batch)
    return fail("-fdeterministic: model '%s' declares no batch dimension (model %s(batch B = ...))",
                m->name, m->name), false;
  if (n < 0 && !(n = ir_det_pieces(m->batch)))
    return fail("-fdeterministic: a batch of %lld rows has no count of pieces from 2 to 8; give "
                "one: -fdeterministic=N", (long long)m->batch), false;
  if (m->batch % n)
    return fail("-fdeterministic=%d: a batch of %lld rows is not %d equal pieces", n,
                (long long)m->batch, n), false;
  m->det_pieces = n, m->det_loc = m->loc;
  return true;
}

/* -fexchange=FORMAT on module m (k: its DtWire, DT_WIRE_COUNT: auto),
 * unless its parallel block chose another; its errors then point at the
 * model's name. */
static bool set_exchange(Module *m, int k) {
  bool any = k == DT_WIRE_COUNT;
  const char *name = any ? "auto" : dtrt_wire_names[k];
  if (m->exchange_loc.file && (m->exchange_auto != any || (!any && m->exchange != k)))
    return fail("-fexchange=%s: the parallel block of '%s' sets exchange = %s", name, m->name,
                m->exchange_auto ? "auto" : dtrt_wire_names[m->exchange]), false;
  if (!m->exchange_loc.file)
    m->exchange = any ? DT_WIRE_F32 : k, m->exchange_auto = any, m->exchange_loc = m->loc;
  return true;
}

/* After a diagnostic in one plan of --devices: which. */
static void plan_note(Diag *d, void *arg) {
  diag_note(d, (Loc){0}, "in the plan for %d device%s (--devices)", *(int *)arg,
            *(int *)arg == 1 ? "" : "s");
}

/* --emit=plan's "memory per device" for m, on one device or many, and the
 * warning of a device that lacks it. false after a diagnostic (a target). */
static bool memory_text(FILE *out, Module *m, CgOptions o, Diag *d) {
  CgTargets ts;
  o.output = o.output ? o.output : "-";
  if (!cg_targets(m, &o, cg_devices(m), &ts, d))
    return false;
  cg_memory_report(out, m, &ts, o.matmul);
  cg_memory_check(m, &ts, o.matmul, d);
  cg_targets_free(&ts);
  return true;
}

/* --emit=plan's text for m: the device plan, the shardings, the memory per
 * device, the memory plan, the matmuls. false after a diagnostic. */
static bool plan_text(FILE *out, Module *m, Driver *dr, Diag *d) {
  plan_report(out, m, dr->run.plan);
  if (m->mesh.n)
    spmd_report(out, m);
  if (!memory_text(out, m, dr->opt, d))
    return false;
  memplan_report(out, m);
  cg_matmul_report(out, m, dr->opt.matmul);
  return true;
}

/* --devices: the model compiled once per device count through the whole
 * pipeline, each plan lowered into the one object as it comes and then
 * freed, all but the first (or reported plan by plan). The frontend's
 * warnings, alike in every plan, are given by the first alone. */
static int run_plans(Driver *dr, Arena *a, Diag *d, const SrcFile *src, Cluster *cluster) {
  CgOptions *o = &dr->opt;
  unsigned wflags = d->wflags;
  int n = dr->ndevices, rc = 1;
  bool text = !strcmp(o->emit, "ir") || !strcmp(o->emit, "dot");
  FILE *out = NULL;
  if (text || !strcmp(o->emit, "plan")) {
    if (!(out = open_text_output(o->output)))
      return fail("cannot write '%s': %s", o->output, why(errno));
  }
  CgElastic *emit = NULL;
  if (!out && strcmp(o->emit, "sim")) {
    if (!o->output) {
      const char *suffix = !strcmp(o->emit, "obj") ? ".o" : !strcmp(o->emit, "asm") ? ".s" : ".ll";
      o->output = default_output(a, dr->input, suffix);
    }
    emit = cg_plans_begin(dr->devices, n, o);
  }
  Arena *pa = a;   /* the plan's: the first's is a, kept to the end */
  for (int k = 0; k < n; k++) {
    int ndev = dr->devices[k];
    d->context = plan_note;
    d->context_arg = &ndev;
    if (k)
      pa = arena_new();
    double t0 = dtrt_now_ns() / 1e6;
    Module *m = fe_compile_for(pa, src, dr->defs, dr->ndefs, cluster, ndev, d);
    double fe_ms = dtrt_now_ns() / 1e6 - t0;
    if (m && !d->nerr && dr->det && !set_deterministic(m, dr->det))
      goto done;
    if (m && !d->nerr && dr->exchange && !set_exchange(m, dr->exchange - 1))
      goto done;
    if (m) {
      m->epilogues = dr->epilogue;
      m->no_coalesce = dr->no_coalesce;
    }
    d->wflags &= ~W_UNUSED;
    if (!m || d->nerr || !ir_verify(m, d))
      goto done;
    if (dr->print_name) {
      printf("%s\n", m->name);
      rc = 0;
      goto done;
    }
    bool pipeline = !text || dr->pass.stop_after;
    if (pipeline && !passes_run(m, d, &dr->pass, &dr->run))
      goto done;
    if (dr->time_passes) {
      fprintf(stderr, "the plan for %d device%s:\n", ndev, ndev == 1 ? "" : "s");
      time_report(dr, fe_ms, -1);
    }
    if (out)
      fprintf(out, "%s; the plan for %d device%s (--devices=%s)\n", k ? "\n" : "", ndev,
              ndev == 1 ? "" : "s", dr->devices_arg);
    if (text && !strcmp(o->emit, "ir")) {
      ir_print(out, m);
    } else if (text) {
      ir_print_dot(out, m);
    } else if (!strcmp(o->emit, "plan")) {
      if (!plan_text(out, m, dr, d))
        goto done;
    } else if (!strcmp(o->emit, "sim")) {
      SimResult r;
      if (sim_step(m, &r) < 0) {
        fail("cannot simulate module '%s' on %d devices: a device lacks a step function or its "
             "collectives do not match", m->name, ndev);
        goto done;
      }
      printf("%sthe plan for %d device%s (--devices=%s):\n", k ? "\n" : "", ndev,
             ndev == 1 ? "" : "s", dr->devices_arg);
      sim_report(stdout, m, &r);
    }
    d->context = NULL;   /* code generation's diagnostics speak of the object */
    if (emit && !cg_plans_add(emit, m, d))
      goto done;
    if (pa != a)
      arena_free(pa);
    pa = a;
  }
  d->context = NULL;
  if (emit) {
    bool ok = cg_plans_end(emit, d);
    emit = NULL;
    if (!ok || d->nerr)
      goto done;
  }
  rc = 0;
done:
  if (emit)
    cg_plans_end(emit, d);   /* frees */
  if (pa != a)
    arena_free(pa);
  d->context = NULL;
  d->wflags = wflags;
  if (out && out != stdout && fclose(out) && !rc)
    rc = fail("cannot write '%s': %s", o->output, why(errno));
  return rc;
}

static int run(Driver *dr, Arena *a, Diag *d) {
  CgOptions *o = &dr->opt;
  bool code = !strcmp(o->emit, "obj") || !strcmp(o->emit, "asm") || !strcmp(o->emit, "llvm");
  if (code && !cg_check_target(o, d))
    return 1;
  if (!strcmp(o->emit, "obj") && o->output && !strcmp(o->output, "-") && isatty(1))
    return fail("an object file is not written to a terminal: give -o FILE, or redirect "
                "stdout");
  SrcFile *src = src_read(a, dr->input);
  if (!src)
    return fail("cannot read '%s': %s", dr->input, why(errno));

  Cluster *cluster = NULL;
  if (dr->cluster_file) {
    SrcFile *cf = src_read(a, dr->cluster_file);
    if (!cf)
      return fail("cannot read '%s': %s", dr->cluster_file, why(errno));
    if (!(cluster = fe_cluster(a, cf, d)))
      return 1;
  }

  if (dr->ndevices)
    return run_plans(dr, a, d, src, cluster);
  double t0 = dtrt_now_ns() / 1e6;
  Module *m;
  if (has_suffix(dr->input, ".ir")) {
    if (cluster || dr->ndefs)
      return fail("'%s' is IR text: -D and --cluster apply to .dt sources only", dr->input);
    m = ir_parse(a, src, d);
  } else if (cluster) {
    m = fe_compile_on(a, src, dr->defs, dr->ndefs, cluster, d);
  } else {
    m = fe_compile(a, src, dr->defs, dr->ndefs, d);
  }
  double fe_ms = dtrt_now_ns() / 1e6 - t0;
  if (!m || d->nerr)
    return 1;
  if (dr->det && !set_deterministic(m, dr->det))
    return 1;
  if (dr->exchange && !set_exchange(m, dr->exchange - 1))
    return 1;
  m->epilogues = dr->epilogue;
  m->no_coalesce = dr->no_coalesce;
  if (!ir_verify(m, d))
    return 1;
  if (dr->print_name) {
    printf("%s\n", m->name);
    return 0;
  }

  if (!strcmp(o->emit, "ir") || !strcmp(o->emit, "dot")) {
    if (dr->pass.stop_after && !passes_run(m, d, &dr->pass, &dr->run))
      return 1;
    FILE *out = open_text_output(o->output);
    if (!out)
      return fail("cannot write '%s': %s", o->output, why(errno));
    if (!strcmp(o->emit, "ir"))
      ir_print(out, m);
    else
      ir_print_dot(out, m);
    if (out != stdout && fclose(out))
      return fail("cannot write '%s': %s", o->output, why(errno));
    if (dr->time_passes)
      time_report(dr, fe_ms, -1);
    return 0;
  }

  if (!passes_run(m, d, &dr->pass, &dr->run))
    return 1;
  if (!strcmp(o->emit, "plan")) {
    FILE *out = open_text_output(o->output);
    if (!out)
      return fail("cannot write '%s': %s", o->output, why(errno));
    bool ok = plan_text(out, m, dr, d);
    if (out != stdout && fclose(out) && ok)
      return fail("cannot write '%s': %s", o->output, why(errno));
    if (dr->time_passes)
      time_report(dr, fe_ms, -1);
    return ok ? 0 : 1;
  }

  if (!strcmp(o->emit, "sim")) {
    SimResult r;
    FILE *out = o->output ? open_text_output(o->output) : NULL;
    if (o->output && !out)
      return fail("cannot write '%s': %s", o->output, why(errno));
    double step = out ? sim_trace_json(out, m, &r) : sim_step(m, &r);
    if (out && out != stdout && fclose(out))
      return fail("cannot write '%s': %s", o->output, why(errno));
    if (step < 0)
      return fail("cannot simulate module '%s': a device lacks a step function or its collectives do not match",
                  m->name);
    sim_report(stdout, m, &r);
    if (dr->time_passes)
      time_report(dr, fe_ms, -1);
    return 0;
  }

  if (!o->output) {
    const char *suffix = !strcmp(o->emit, "obj") ? ".o" : !strcmp(o->emit, "asm") ? ".s" : ".ll";
    o->output = default_output(a, dr->input, suffix);
  }
  t0 = dtrt_now_ns() / 1e6;
  bool ok = cg_emit(m, o, d);
  if (dr->time_passes)
    time_report(dr, fe_ms, dtrt_now_ns() / 1e6 - t0);
  return ok && !d->nerr ? 0 : 1;
}

int main(int argc, char **argv) {
  Driver dr = {0};
  Diag d;
  /* A file-size limit makes a write fail (EFBIG, a diagnostic), not kill dtc. */
  signal(SIGXFSZ, SIG_IGN);
  diag_init(&d, stderr);
  d.wflags = W_UNUSED;
  if (parse_args(&dr, &d, argc, argv))
    return 1;
  Arena *a = arena_new();
  int rc = run(&dr, a, &d);
  arena_free(a);
  return rc;
}
