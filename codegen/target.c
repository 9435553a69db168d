/* target.c: the target machine (triple, CPU, features), checked before any
 * code is generated, and the writing of a module as an object, assembly or
 * LLVM IR after the optimisation pipeline.
 *
 * Checking a CPU name: LLVM's C API has no query for it (MCSubtargetInfo's
 * isCPUStringValid is C++ only), and an unknown name is not an error there:
 * when a target machine is created, its MC subtarget looks the name up in the
 * target's processor table and, if it is missing, prints "'NAME' is not a
 * recognized processor for this target (ignoring processor)" to stderr and
 * goes on with the generic CPU. So we create the target machine with stderr
 * (fd 2) pointed at a temporary file and turn that report into a diagnostic;
 * any other text LLVM printed is passed on unchanged. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <llvm-c/Error.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "codegen.h"

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

LLVMTargetMachineRef cg_target_machine(const Options *opt, Diag *d) {
  init_targets();
  Loc none = {0};
  char *host = LLVMGetDefaultTargetTriple();
  char *triple = LLVMNormalizeTargetTriple(opt->target ? opt->target : host);
  bool is_host = !strcmp(triple, host) || !opt->target;
  LLVMDisposeMessage(host);

  LLVMTargetRef t;
  char *err = NULL;
  if (LLVMGetTargetFromTriple(triple, &t, &err)) {
    diag_error(d, none, "unknown target '%s' (dtc generates code for x86_64 and aarch64)",
               opt->target ? opt->target : triple);
    LLVMDisposeMessage(err);
    LLVMDisposeMessage(triple);
    return NULL;
  }
  const char *want = opt->cpu;
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
      create_captured(t, triple, cpu, features, cg_level(opt->opt_level), &said);
  bool bad_cpu = said && strstr(said, "is not a recognized processor");
  if (said && !bad_cpu)
    fputs(said, stderr);
  if (!tm)
    diag_error(d, none, "cannot create a target machine for '%s'", triple);
  else if (bad_cpu)
    diag_error(d, none, "unknown CPU '%s' for target %s", cpu, triple);
  else if (!strcmp(cpu, "help"))
    diag_error(d, none, "-mcpu=help: the CPUs of target %s are listed above", triple);
  if (tm && (bad_cpu || !strcmp(cpu, "help"))) {
    LLVMDisposeTargetMachine(tm);
    tm = NULL;
  }
  free(said);
  LLVMDisposeMessage(cpu);
  LLVMDisposeMessage(features);
  LLVMDisposeMessage(triple);
  return tm;
}

bool cg_check_target(const Options *opt, Diag *d) {
  LLVMTargetMachineRef tm = cg_target_machine(opt, d);
  if (tm)
    LLVMDisposeTargetMachine(tm);
  return tm != NULL;
}

bool cg_write(LLVMModuleRef mod, LLVMTargetMachineRef tm, const Options *opt, Diag *d) {
  Loc none = {0};
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

  char *err = NULL;
  const char *out = opt->output;
  bool failed;
  if (!strcmp(opt->emit, "llvm")) {
    if (!strcmp(out, "-")) {
      char *s = LLVMPrintModuleToString(mod);
      failed = fputs(s, stdout) < 0;
      LLVMDisposeMessage(s);
    } else {
      failed = LLVMPrintModuleToFile(mod, out, &err);
    }
  } else {
    LLVMCodeGenFileType kind = !strcmp(opt->emit, "asm") ? LLVMAssemblyFile : LLVMObjectFile;
    failed = LLVMTargetMachineEmitToFile(tm, mod, (char *)out, kind, &err);
  }
  if (failed)
    diag_error(d, none, "cannot write '%s': %s", out, err ? err : "write error");
  LLVMDisposeMessage(err);
  return !failed;
}
