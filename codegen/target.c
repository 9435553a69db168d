/* target.c: the target machine (triple, CPU, features), checked before any
 * code is generated; the targets of a model whose devices name their own
 * (one output file per triple); and the writing of a module as an object,
 * assembly or LLVM IR after the optimisation pipeline.
 *
 * Checking a CPU name: LLVM's C API has no query for it (MCSubtargetInfo's
 * isCPUStringValid is C++ only), and an unknown name is not an error there:
 * when a target machine is created, its MC subtarget looks the name up in the
 * target's processor table and, if it is missing, prints "'NAME' is not a
 * recognized processor for this target (ignoring processor)" to stderr and
 * goes on with the generic CPU. So we create the target machine with stderr
 * (fd 2) pointed at a temporary file and turn that report into a diagnostic;
 * any other text LLVM printed is passed on unchanged. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen.h"
#include "dtrt.h"

static void init_targets(void) {
  static bool done;
  if (done)
    return;
  done = true;
  LLVMInitializeX86TargetInfo();
  LLVMInitializeX86Target();
  LLVMInitializeX86TargetMC();
  LLVMInitializeX86AsmPrinter();
  LLVMInitializeX86AsmParser();
  LLVMInitializeAArch64TargetInfo();
  LLVMInitializeAArch64Target();
  LLVMInitializeAArch64TargetMC();
  LLVMInitializeAArch64AsmPrinter();
  LLVMInitializeAArch64AsmParser();
}

/* Runs LLVMCreateTargetMachine with fd 2 captured; *said gets what LLVM
 * printed (caller frees with free), or NULL when capturing was impossible. */
static LLVMTargetMachineRef create_captured(LLVMTargetRef t, const char *triple,
                                            const char *cpu, const char *features,
                                            LLVMCodeGenOptLevel level, char **said) {
  *said = NULL;
  fflush(stderr);
  FILE *tmp = tmpfile();
  int saved = tmp ? dup(2) : -1;
  if (saved < 0 || dup2(fileno(tmp), 2) < 0) {
    if (saved >= 0)
      close(saved);
    if (tmp)
      fclose(tmp);
    return LLVMCreateTargetMachine(t, triple, cpu, features, level, LLVMRelocPIC,
                                   LLVMCodeModelDefault);
  }
  LLVMTargetMachineRef tm = LLVMCreateTargetMachine(t, triple, cpu, features, level,
                                                    LLVMRelocPIC, LLVMCodeModelDefault);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  long n = ftell(tmp);
  if (n < 0)
    n = 0;
  char *text = calloc(1, (size_t)n + 1);
  rewind(tmp);
  if (text && fread(text, 1, (size_t)n, tmp) != (size_t)n)
    text[0] = 0;
  fclose(tmp);
  *said = text;
  return tm;
}

static LLVMCodeGenOptLevel cg_level(int opt_level) {
  return opt_level <= 0   ? LLVMCodeGenLevelNone
         : opt_level == 1 ? LLVMCodeGenLevelLess
         : opt_level == 2 ? LLVMCodeGenLevelDefault
                          : LLVMCodeGenLevelAggressive;
}

/* The target machine of triple (NULL: the host) and cpu (NULL or "native":
 * the host's CPU and features on the host, else generic), or NULL after a
 * diagnostic at loc that starts with who. *cpu_out and *features_out (when
 * not NULL) get the CPU and features used, in arena a. */
static LLVMTargetMachineRef machine(const char *target, const char *want, int opt_level,
                                    Loc loc, const char *who, Arena *a, const char **cpu_out,
                                    const char **features_out, Diag *d) {
  init_targets();
  char *host = LLVMGetDefaultTargetTriple();
  char *triple = LLVMNormalizeTargetTriple(target ? target : host);
  bool is_host = !strcmp(triple, host) || !target;
  LLVMDisposeMessage(host);

  LLVMTargetRef t;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(triple, &t, &err)) {
    diag_error(d, loc, "%sunknown target '%s' (dtc generates code for x86_64 and aarch64)", who,
               target ? target : triple);
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  bool native = !want || !strcmp(want, "native");
  char *cpu = NULL, *features = NULL;
  if (native && is_host) {
    cpu = LLVMGetHostCPUName();
    features = LLVMGetHostCPUFeatures();
  } else {
    cpu = LLVMCreateMessage(native ? "generic" : want);
    features = LLVMCreateMessage("");
  }

  char *said;
  LLVMTargetMachineRef tm =
      create_captured(t, triple, cpu, features, cg_level(opt_level), &said);
  bool bad_cpu = said && strstr(said, "is not a recognized processor");
  if (said && !bad_cpu)
    fputs(said, stderr);
  if (!tm)
    diag_error(d, loc, "%scannot create a target machine for '%s'", who, triple);
  else if (bad_cpu)
    diag_error(d, loc, "%sunknown CPU '%s' for target %s", who, cpu, triple);
  else if (!strcmp(cpu, "help"))
    diag_error(d, loc, "%s-mcpu=help: the CPUs of target %s are listed above", who, triple);
  if (tm && (bad_cpu || !strcmp(cpu, "help"))) {
    LLVMDisposeTargetMachine(tm);
    tm = NULL;
  }
  if (tm && cpu_out)
    *cpu_out = arena_strdup(a, cpu);
  if (tm && features_out)
    *features_out = arena_strdup(a, features);
  free(said);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  LLVMDisposeMessage(triple);
  return tm;
}

LLVMTargetMachineRef cg_target_machine(const CgOptions *opt, Diag *d) {
  Loc none = {0};
  return machine(opt->target, opt->cpu, opt->opt_level, none, "", NULL, NULL, NULL, d);
}

bool cg_check_target(const CgOptions *opt, Diag *d) {
  LLVMTargetMachineRef tm = cg_target_machine(opt, d);
  if (tm)
    LLVMDisposeTargetMachine(tm);
  return tm != NULL;
}

/* The normalized form of triple (NULL: the host's), in a. */
static const char *normalized(Arena *a, const char *triple) {
  char *host = LLVMGetDefaultTargetTriple();
  char *n = LLVMNormalizeTargetTriple(triple ? triple : host);
  const char *s = arena_strdup(a, n);
  LLVMDisposeMessage(n);
  LLVMDisposeMessage(host);
  return s;
}

/* Two normalized triples name the same target when all but their vendors
 * agree (x86_64-pc-linux-gnu, the host's, and x86_64-unknown-linux-gnu). */
static bool same_target(const char *a, const char *b) {
  const char *va = strchr(a, '-'), *vb = strchr(b, '-');
  if (!va || !vb)
    return !strcmp(a, b);
  const char *ra = strchr(va + 1, '-'), *rb = strchr(vb + 1, '-');
  return va - a == vb - b && !strncmp(a, b, (size_t)(va - a)) &&
         !strcmp(ra ? ra : "", rb ? rb : "");
}

/* Both NULL, or equal strings. */
static bool same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* output with ".tag" before its suffix: model.o -> model.aarch64-linux-gnu.o;
 * characters of tag that could leave the file name become '_'. */
static const char *tagged_output(Arena *a, const char *output, const char *tag) {
  const char *base = strrchr(output, '/');
  base = base ? base + 1 : output;
  const char *dot = strrchr(base, '.');
  if (!dot || dot == base)
    dot = base + strlen(base);
  char *safe = arena_strdup(a, tag);
  for (char *p = safe; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
          *p == '_' || *p == '-' || *p == '.'))
      *p = '_';
  return arena_printf(a, "%.*s.%s%s", (int)(dot - output), output, safe, dot);
}

bool cg_targets(Module *m, const CgOptions *opt, int ndev, CgTargets *ts, Diag *d) {
  Arena *a = m->arena;
  int n = ndev ? ndev : 1;
  *ts = (CgTargets){.dev = arena_alloc(a, sizeof(CgDevice) * (size_t)n),
                    .t = arena_alloc(a, sizeof(CgTarget) * (size_t)n)};
  const char *deflt = normalized(a, opt->target);
  const Device **dv = arena_alloc(a, sizeof(Device *) * (size_t)n);
  const char **norm = arena_alloc(a, sizeof(char *) * (size_t)n);
  bool any_default = false;
  for (int k = 0; k < n; k++) {
    int i = ndev && m->cluster && m->mesh.n ? m->mesh.a[0].dev[k] : -1;
    dv[k] = i >= 0 && i < m->cluster->dev.n ? &m->cluster->dev.a[i] : NULL;
    norm[k] = dv[k] && dv[k]->target ? normalized(a, dv[k]->target) : deflt;
    if (same_target(norm[k], deflt))
      norm[k] = deflt;
    any_default |= norm[k] == deflt;
  }
  /* The first target: the default one, or device 0's when no device has it. */
  const char *first = any_default ? deflt : norm[0];
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < n; k++) {
      if ((pass == 0) != same_target(norm[k], first))
        continue;
      int t = 0;
      while (t < ts->n && !same_target(ts->t[t].norm, norm[k]))
        t++;
      CgDevice *cd = &ts->dev[k];
      cd->name = dv[k] ? dv[k]->name : NULL;
      cd->target = t;
      if (t == ts->n) {
        bool own = dv[k] && dv[k]->target && !(norm[k] == deflt && opt->target);
        const char *written = own ? dv[k]->target : opt->target ? opt->target : norm[k];
        ts->t[ts->n++] = (CgTarget){.norm = norm[k], .triple = written,
                                    .output = t ? tagged_output(a, opt->output, written)
                                                : opt->output};
      }
    }
  /* A device's CPU: its own, else -mcpu on the default target, else generic.
   * A machine is created once for each distinct triple and CPU, which checks
   * them (for the first device that names them); the devices that name them
   * again take its CPU and features. */
  bool ok = true;
  int *seen = arena_alloc(a, sizeof(int) * (size_t)n), nseen = 0;
  const char **seen_triple = arena_alloc(a, sizeof(char *) * (size_t)n);
  const char **seen_cpu = arena_alloc(a, sizeof(char *) * (size_t)n);
  for (int k = 0; k < n; k++) {
    CgDevice *cd = &ts->dev[k];
    CgTarget *t = &ts->t[cd->target];
    bool own = dv[k] && (dv[k]->target || dv[k]->cpu);
    bool on_default = t->norm == deflt;
    const char *cpu = dv[k] && dv[k]->cpu ? dv[k]->cpu : on_default ? opt->cpu : NULL;
    const char *triple = on_default ? opt->target : t->triple;
    int j = 0;
    while (j < nseen && !(same_str(seen_triple[j], triple) && same_str(seen_cpu[j], cpu)))
      j++;
    if (j < nseen) {
      if (seen[j] < 0) {
        ok = false;
      } else {
        cd->cpu = ts->dev[seen[j]].cpu;
        cd->features = ts->dev[seen[j]].features;
      }
      continue;
    }
    seen_triple[nseen] = triple, seen_cpu[nseen] = cpu, seen[nseen++] = k;
    const char *who = own ? arena_printf(a, "device '%s': ", dv[k]->name) : "";
    Loc loc = own ? dv[k]->loc : (Loc){0};
    LLVMTargetMachineRef tm =
        machine(triple, cpu, opt->opt_level, loc, who, a, &cd->cpu, &cd->features, d);
    if (!tm) {
      seen[nseen - 1] = -1;
      ok = false;
      continue;
    }
    if (!t->tm) {
      t->tm = tm;
      t->cpu = cd->cpu;
      t->features = cd->features;
    } else {
      LLVMDisposeTargetMachine(tm);
    }
  }
  for (int i = 0; ok && i < ts->n; i++)
    for (int j = 0; j < i; j++)
      if (!strcmp(ts->t[i].output, ts->t[j].output)) {
        diag_error(d, (Loc){0}, "the code for %s and for %s would both go to '%s'",
                   ts->t[j].triple, ts->t[i].triple, ts->t[i].output);
        ok = false;
      }
  if (!ok)
    cg_targets_free(ts);
  return ok;
}

void cg_targets_free(CgTargets *ts) {
  for (int i = 0; i < ts->n; i++)
    if (ts->t[i].tm)
      LLVMDisposeTargetMachine(ts->t[i].tm);
  ts->n = 0;
}

bool cg_write(LLVMModuleRef mod, LLVMTargetMachineRef tm, const CgOptions *opt, Diag *d) {
  char pipeline[32];
  snprintf(pipeline, sizeof pipeline, "default<O%d>", opt->opt_level < 0 ? 0
                                                      : opt->opt_level > 3 ? 3
                                                                          : opt->opt_level);
  LLVMPassBuilderOptionsRef po = LLVMCreatePassBuilderOptions();
  LLVMPassBuilderOptionsSetLoopVectorization(po, opt->opt_level >= 2);
  LLVMPassBuilderOptionsSetSLPVectorization(po, opt->opt_level >= 2);
  LLVMPassBuilderOptionsSetLoopUnrolling(po, opt->opt_level >= 2);
  LLVMErrorRef e = LLVMRunPasses(mod, pipeline, tm, po);
  LLVMDisposePassBuilderOptions(po);
  if (e) {
    char *msg = LLVMGetErrorMessage(e);
    dtc_die(__FILE__, __LINE__, "LLVM pipeline %s failed: %s", pipeline, msg);
  }

  char *err = NULL, *text = NULL;
  LLVMMemoryBufferRef buf = NULL;
  const char *bytes;
  size_t len;
  if (!strcmp(opt->emit, "llvm")) {
    text = LLVMPrintModuleToString(mod);
    bytes = text;
    len = strlen(text);
  } else {
    LLVMCodeGenFileType kind = !strcmp(opt->emit, "asm") ? LLVMAssemblyFile : LLVMObjectFile;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, kind, &err, &buf))
      dtc_die(__FILE__, __LINE__, "LLVM code generation failed: %s", err ? err : "?");
    bytes = LLVMGetBufferStart(buf);
    len = LLVMGetBufferSize(buf);
  }
  bool ok = cg_write_file(opt->output, bytes, len, d);
  LLVMDisposeMessage(text);
  if (buf)
    LLVMDisposeMemoryBuffer(buf);
  return ok;
}

bool cg_write_file(const char *path, const void *bytes, size_t len, Diag *d) {
  bool to_stdout = !strcmp(path, "-");
  FILE *f = to_stdout ? stdout : dtrt_open_output(path);
  if (!f) {
    diag_error(d, (Loc){0}, "cannot write '%s': %s", path,
               errno == EINVAL ? "not a regular file" : strerror(errno));
    return false;
  }
  bool ok = fwrite(bytes, 1, len, f) == len;
  ok &= to_stdout ? fflush(f) == 0 : fclose(f) == 0;
  if (!ok) {
    diag_error(d, (Loc){0}, "cannot write '%s': %s", path, strerror(errno ? errno : EIO));
    if (!to_stdout)
      remove(path);
  }
  return ok;
}
