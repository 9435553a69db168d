/* codegen.h: the LLVM back end: IR to an LLVM module, written as an object,
 * assembly or LLVM IR, plus the C header NAME.h. It reads the IR and what the
 * pipeline left in it (shardings, collectives' methods, fusion groups, memory
 * offsets); it runs no pass. Sections are named after the file that owns
 * them. */
#ifndef DTC_CODEGEN_H
#define DTC_CODEGEN_H

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "ir.h"

/* How an IR matmul and a convolution's products are lowered (-fmatmul=): to
 * the generated GEMM (the default), or to libdtrt's dtrt_k_matmul and the
 * convolution kernels' own calls of OpenBLAS. */
typedef enum CgMatmul { CG_MATMUL_DTC, CG_MATMUL_BLAS } CgMatmul;

/* What the driver asks of code generation. */
typedef struct CgOptions {
  const char *output;      /* -o; "-": stdout */
  const char *emit;        /* "obj", "asm" or "llvm" */
  const char *target;      /* --target triple, NULL: host */
  const char *cpu;         /* -mcpu, NULL: host, or generic for another target */
  int opt_level;           /* -O0..-O3 */
  CgMatmul matmul;         /* -fmatmul= */
  int denormals;           /* -fdenormals=: DtDenormals, DT_DENORMALS_FLUSH by default */
  bool verify;             /* --verify-each: check the LLVM module before its passes */
  int part_ops;            /* internal, for tests: the most IR statements (a fusion group
                              one) in one part of a step function (func.c); 0: CG_PART_OPS */
} CgOptions;

/* ---- target.c --------------------------------------------------------- */

/* Checks the target triple and CPU of opt before any code is generated: an
 * unknown one is a diagnostic. */
bool cg_check_target(const CgOptions *opt, Diag *d);
/* The checked target machine of opt (host when opt->target is NULL), or NULL
 * after a diagnostic. */
LLVMTargetMachineRef cg_target_machine(const CgOptions *opt, Diag *d);
/* One target of a model's code: its devices' step functions go to one
 * output file, made by one target machine. */
typedef struct CgTarget {
  const char *norm;        /* the normalized triple */
  const char *triple;      /* as written (a device's target, --target), else the host's */
  const char *output;      /* -o for the first target, else -o with ".TRIPLE" before its suffix */
  LLVMTargetMachineRef tm; /* of the target's first device */
  const char *cpu, *features;   /* tm's */
} CgTarget;

/* Where a device's code goes: its target and the CPU and features it is
 * generated for (the function attributes target-cpu and target-features
 * where they differ from the target machine's). */
typedef struct CgDevice {
  const char *name;        /* the cluster device's name; NULL: none */
  int target;              /* index into CgTargets.t */
  const char *cpu, *features;
} CgDevice;

typedef struct CgTargets {
  int n;
  CgTarget *t;
  CgDevice *dev;           /* by mesh position; one entry for a single-device model */
} CgTargets;

/* The targets of m's ndev devices (see cg_devices; 0: one): a device's
 * `target` and `cpu` from the cluster, else --target and -mcpu. The first
 * target is the default one (--target, else the host), or device 0's when
 * no device has the default; it writes to opt->output. Each device's triple
 * and CPU are checked; a bad one is a diagnostic at the device. */
bool cg_targets(Module *m, const CgOptions *opt, int ndev, CgTargets *ts, Diag *d);
/* Disposes the target machines of ts. */
void cg_targets_free(CgTargets *ts);
/* Writes len bytes to path ("-": stdout): only a regular file or a new one;
 * a failure is a diagnostic and leaves no partial file. */
bool cg_write_file(const char *path, const void *bytes, size_t len, Diag *d);
/* Optimises mod at opt->opt_level and writes it as opt->emit to opt->output. */
bool cg_write(LLVMModuleRef mod, LLVMTargetMachineRef tm, const CgOptions *opt, Diag *d);

/* ---- emit.c ----------------------------------------------------------- */

/* Lowers every function of m, the model descriptor and the public wrappers
 * NAME_*, writes opt->output and NAME.h beside it. Requires the whole
 * pipeline run (passes_run): every function planned by memplan. */
bool cg_emit(Module *m, const CgOptions *opt, Diag *d);

/* The most plans of one elastic build (dtc --devices). */
#define CG_MAX_PLANS 64
/* cg_emit for several plans of one model (dtc --devices): the plan for
 * devices[k] devices (ascending), each through the whole pipeline, all into
 * the one object opt->output and one NAME.h; NAME_create takes the plan of
 * the job's rank count. Every plan's devices must run code of one target.
 * Plan by plan, so each plan's IR may be freed once lowered:
 * cg_plans_begin, then cg_plans_add with each plan in order (the first is
 * kept to the end, the others are not read after their call), then
 * cg_plans_end, which writes the files; after a failed add, cg_plans_end
 * only frees (and returns false). */
typedef struct CgElastic CgElastic;
CgElastic *cg_plans_begin(const int *devices, int n, const CgOptions *opt);
bool cg_plans_add(CgElastic *e, Module *plan, Diag *d);
bool cg_plans_end(CgElastic *e, Diag *d);

/* The plans NAME_create chooses among: n of them, desc a constant array of n
 * pointers to each plan's array of device descriptions, count (i32[n]) their
 * lengths. */
typedef struct CgPlans {
  int n;
  LLVMValueRef desc, count;
} CgPlans;

/* What the lowering of one module shares. */
typedef struct Cg {
  Module *m;
  const char *sym;         /* the stem of its functions' symbols: the model's name, or
                              NAME.nN for the plan of N devices of an elastic build */
  LLVMContextRef ctx;
  LLVMModuleRef mod;
  LLVMBuilderRef b;
  LLVMTypeRef i1, i8, i32, i64, f32, f64, ptr, voidt;
  LLVMTypeRef tensor;      /* DtTensor */
  LLVMTypeRef attrs;       /* DtAttrs */
  LLVMTypeRef step_fn;     /* DtStepFn */
  LLVMTypeRef kernel_fn;   /* dtrt_k_* */
  LLVMTypeRef pieces_fn;   /* dtrt_pieces */
  int64_t *state_off;      /* by global index: offset in the state block, -1 for inputs */
  int64_t state_bytes;     /* of the device being lowered */
  int *inputs0[2];         /* the globals device 0's forward and train step load, which
                              the wrappers pack; every device's must be the same */
  int ninputs0[2];
  /* the global table of the plan's first device, which the others whose
   * tables differ only in their blocks share (DtModelDesc.blocks), and what
   * those tables must be alike in (emit.c's table_key) */
  LLVMValueRef globals0;
  char *globals0_key;
  size_t globals0_len;
  const char *hash;        /* of the module's text form */
  const char *plan_hash;   /* of the sharding plan (mesh, global shardings); NULL: no mesh */
  CgMatmul matmul;         /* CgOptions.matmul */
  int denormals;           /* CgOptions.denormals */
  int part_ops;            /* CgOptions.part_ops */
  const char *cpu, *features;   /* of the device being lowered (its CgDevice) */
  struct CgGemm *gemm;     /* gemm.c's functions made so far, one set per CPU */
  struct CgTable *loops;   /* loop.c's shared loop functions, by key */
  struct CgTable *packs;   /* loop.c's calls of them through a table of offsets */
  /* consts.c: the per-device table of what code reads at run time */
  struct CgTable *consts;  /* attribute arrays and rows, by content */
  int ndev_all, dev_base;  /* devices of all plans in the object; the plan's first */
  int *plan_base, nplan_base;   /* by device count: its plan's first device */
  LLVMValueRef *row;       /* by 2 * device + set: its row (NULL: none) */
  LLVMValueRef row_fn, rows, bases;
  int set;                 /* of the set being lowered: 0 @forward's, 1 @train_step's */
  Func **vary_fn;          /* its functions, and by inst id their kernels' slots */
  int **vary_slot, nvary_fn;
} Cg;
typedef struct CgTable CgTable;

/* The number of devices with functions of their own (after the spmd pass:
 * the mesh's size); 0 when the functions are global. */
int cg_devices(const Module *m);
/* @name of device dev (@name.dev), or the global @name when dev < 0; NULL
 * when there is none or it is a body function, which is never an entry. */
Func *cg_device_func(const Module *m, const char *name, int dev);
/* Device dev's state block (dev < 0: the whole tensors'): params, then
 * optimizer state, each 64-byte aligned; their offsets by global index (-1
 * for inputs) into off when not NULL. Returns its size in bytes. */
int64_t cg_state_layout(const Module *m, int dev, int64_t *off);
/* Declares (once) and returns an external function. */
LLVMValueRef cg_extern(Cg *c, const char *name, LLVMTypeRef type);
/* The insts of f that NAME_forward runs, by id: @forward less the training
 * loss (which needs the labels) and what only the loss needs; NULL for f
 * whole (also when the model does not train). */
bool *cg_live(const Func *f);
/* The global indices of the inputs the live insts of f load, in global order,
 * into in[] (room for m->global.n); returns their count. */
int cg_func_inputs(const Func *f, const bool *live, int *in);
/* The live output insts of f, in order, into out[] (room for f->inst.n);
 * returns their count. */
int cg_func_outputs(const Func *f, const bool *live, const Inst **out);

/* ---- func.c ----------------------------------------------------------- */

/* The most IR statements (a fusion group, lowered to one call, or one other
 * inst) in one part of a step function: a longer function is cut into internal
 * functions of about this size called in order, so that LLVM, slower than
 * linear in a function's size, takes time linear in the program's. */
#define CG_PART_OPS 256

/* One function being lowered: the LLVM function and its parameters are
 * those of the part being built. */
typedef struct CgFn {
  Cg *c;
  Func *f;
  const bool *live;        /* by inst id; NULL: all */
  bool *idle;              /* by inst id: computes nothing needed (ir_idle) */
  LLVMValueRef fn, ctx, state, work, inputs, outputs, step;
  LLVMValueRef *addr;      /* by inst id: where its value lives, once known in this part */
  LLVMValueRef *val;       /* by inst id: the scalar of a const or lr */
  LLVMValueRef *out_ptr;   /* by output index: the caller's buffer (cg_output) */
  LLVMValueRef **kept;     /* the entries of addr, val and out_ptr set in this part */
  int nkept, capkept;
  int *out_index;          /* by inst id: index of an output inst */
  int *input_index;        /* by global index: position among f's inputs */
  Uses use;
  LLVMBasicBlockRef entry; /* allocas only */
  LLVMValueRef tin, tout, tattr;
  LLVMBasicBlockRef fail;  /* returns the status in fail_phi */
  LLVMValueRef fail_phi;
  LLVMValueRef err;        /* a device's function: where the first failure's status is
                              kept, 0 until then (a body's: its caller's) */
} CgFn;

/* Lowers the live insts of f (see cg_live) to an internal function of
 * DtStepFn's type. */
LLVMValueRef cg_func(Cg *c, Func *f, const bool *live);
/* The LLVM function of f, MODEL.FUNC: declared on first use (a repeat may
 * call its body before the body is lowered), defined by cg_func. */
LLVMValueRef cg_func_decl(Cg *c, const Func *f);
/* Returns status s from the function when it is not DT_OK; a device's
 * function keeps the first failure in fn->err and goes on. */
void cg_check(CgFn *fn, LLVMValueRef s);
/* An alloca in the entry block. */
LLVMValueRef cg_alloca(CgFn *fn, LLVMTypeRef t, const char *name);
/* Where the value of inst i lives (emitted at the current point if new). */
LLVMValueRef cg_addr(CgFn *fn, const Inst *i);
/* The caller's buffer of output inst o. */
LLVMValueRef cg_output(CgFn *fn, const Inst *o);
/* The state-block address of a param or state global. */
LLVMValueRef cg_state_addr(CgFn *fn, const Global *g);
/* The scalar value of a const or lr inst, emitted at the current point. */
LLVMValueRef cg_scalar(CgFn *fn, const Inst *i);
/* base + off bytes. */
LLVMValueRef cg_gep(CgFn *fn, LLVMValueRef base, int64_t off);
LLVMValueRef cg_i32(Cg *c, int64_t v);
LLVMValueRef cg_i64(Cg *c, int64_t v);

/* ---- loop.c ----------------------------------------------------------- */

/* Emits fusion group member[0..n) (contiguous in the function) as one loop
 * nest over the group's shape. */
void cg_group(CgFn *fn, Inst **member, int n);

/* ---- consts.c --------------------------------------------------------- */

/* A private, unnamed_addr constant global holding init. */
LLVMValueRef cg_private_const(Cg *c, LLVMValueRef init, const char *name);
/* The one constant array of the n values v of type t whose bytes, as a key,
 * are key[0..len) (taking key; its last byte tells its kind apart from other
 * arrays of the same bytes). */
LLVMValueRef cg_shared_const(Cg *c, char *key, size_t len, LLVMTypeRef t, LLVMValueRef *v,
                             int n, const char *name);
/* The one constant array of the i64s a[0..n). */
LLVMValueRef cg_ints_const(Cg *c, const int64_t *a, int n);
/* A table of byte strings: the slot of key[0..len) (NULL until set), taking
 * key (malloc'd; freed when it was there). */
LLVMValueRef *cg_table_find(CgTable **t, char *key, size_t len);
int cg_table_count(const CgTable *t);
void cg_table_free(CgTable **t);
/* Whether attribute name of x is read at run time from the device's row
 * (and left out of the keys by which devices share code): a device
 * kernel's `at`, `sizes`, `dim_sizes`. */
bool cg_varying_attr(const Inst *x, const char *name);
bool cg_varying(const Inst *x);   /* x has such an attribute */
/* Before lowering: ndev_all devices in the object, the plan of devices[k]
 * devices from device base[k]. */
void cg_rows_begin(Cg *c, int ndev_all, const int *devices, const int *base, int nplan);
/* Before lowering set[0..n) as set s (0 forward, 1 train step): the slots
 * of its varying kernels. */
void cg_vary_begin(Cg *c, Func *const *set, int n, int s);
/* Device g's row for its set s, set[0..n) (alike to the one lowered). */
void cg_vary_row(Cg *c, Func *const *set, int n, int g, int s);
/* Where varying kernel x's DtAttrs.ni (an i64) and DtAttrs.i lie for the device
 * running (consts.c). */
LLVMValueRef cg_vary_ints(CgFn *fn, const Inst *x);
/* After lowering: the tables' contents; frees what cg_rows_begin took. */
void cg_rows_end(Cg *c);
/* The epilogue of a product: group member[0..n), which reads the product
 * before it, as an internal function tiles(env, r0, r1, c0, c1) running the
 * group on rows [r0, r1) and columns [c0, c1) of its shape seen as a matrix
 * [R, N]; env, the step-function values it reads, is filled where the
 * builder stands and returned in *env. */
LLVMValueRef cg_group_tiles(CgFn *fn, Inst **member, int n, LLVMValueRef *env);

/* ---- repeat.c --------------------------------------------------------- */

/* Emits repeat r as a loop of n calls of its body's function. */
void cg_repeat(CgFn *fn, const Inst *r);
/* Whether running x makes collectives: x is one, or a repeat whose body (or
 * a loop in it) makes one. */

/* ---- memory.c --------------------------------------------------------- */

/* What libdtrt allocates for the model on one device (dev -1: a model of one
 * device), in bytes: the state block; the work block, the largest arena of
 * the device's functions (train: train_step's, forward: forward's); the
 * scratch blocks, the GEMM's on one thread and the convolutions' columns;
 * staged, the most one kernel allocates while it runs (Func.staged_bytes: a
 * collective's packed copy, a large sum's partial rows); tables, libdtrt's
 * for the model (dtrt_model_table_bytes); their sum, on one thread; thread,
 * the most each further thread of the device's pool adds to it (its own
 * GEMM slot, its place in the pool: dtrt_pool_bytes). */
typedef struct CgMemory {
  int64_t state, work, train, forward, scratch, staged, tables, total, thread;
} CgMemory;

/* The work block of device dev: the largest arena of its functions. */
int64_t cg_work_bytes(const Module *m, int dev);
/* The most one kernel of device dev's functions allocates while it runs. */
int64_t cg_staged_bytes(const Module *m, int dev);
CgMemory cg_memory(const Module *m, int dev, const CgTargets *ts, CgMatmul how);
/* --emit=plan's "memory per device": each device's CgMemory against its
 * cluster `mem`, saying OVER where the total exceeds it. */
void cg_memory_report(FILE *out, const Module *m, const CgTargets *ts, CgMatmul how);
/* A warning at the mesh for each device whose total exceeds its `mem`;
 * returns how many. */
int cg_memory_check(const Module *m, const CgTargets *ts, CgMatmul how, Diag *d);

/* ---- gemm.c ----------------------------------------------------------- */

/* Whether matmul x is lowered by cg_gemm (else by a call of dtrt_k_matmul):
 * -fmatmul=dtc (the default) or blas decides, but for deterministic mode's
 * products, which are always the GEMM's. */
bool cg_gemm_wanted(const Cg *c, const Inst *x);
/* The same choice for module m under -fmatmul=how. */
bool cg_gemm_chosen(const Module *m, CgMatmul how, const Inst *x);
/* Whether kernel x (a convolution or one of its derivatives) makes its
 * matrix products with the generated GEMM, passed in its attributes (else
 * OpenBLAS's): unless -fmatmul=blas. */
bool cg_conv_gemm(CgMatmul how, const Inst *x);
/* The module's parallel GEMM entry for the CPU of the device being lowered
 * (a DtGemmFn), made at its first use. */
LLVMValueRef cg_gemm_entry(Cg *c);
/* For --emit=plan: each matmul of m (one device's), its shapes and FLOPs,
 * who computes it under -fmatmul=how and its epilogue's ops. */
void cg_matmul_report(FILE *out, const Module *m, CgMatmul how);
/* The scratch block (dtrt_scratch) the GEMM calls of device dev's
 * functions ask for on one thread, for a CPU (NULL: generic) with features
 * of target triple: the largest of their panels; each further thread asks
 * for about as much again. */
/* The micro-tile of dtc's GEMM on device dev of ts (its index in ts->dev):
 * *mr rows and *nr columns of a product's result at once. */
void cg_gemm_tile(const CgTargets *ts, int dev, int *mr, int *nr);
int64_t cg_gemm_scratch(const Module *m, int dev, CgMatmul how, const char *triple,
                        const char *cpu, const char *features);
/* The kernels' scratch block device dev's convolutions keep their im2col
 * columns in (dtrt_conv_scratch_bytes), and its attention kernels their
 * transposed keys and values (dtrt_sdpa_scratch_bytes): the largest any of
 * them asks for. */
int64_t cg_conv_scratch(const Module *m, int dev, CgMatmul how);
/* Emits matmul x as a call of the module's generated GEMM for the CPU of the
 * device being lowered (made at its first use), with fusion group
 * ep[0..nep) that follows x as its epilogue (nep 0: none): the GEMM runs it
 * on each strip of C once the strip is whole, while it is in cache. Returns
 * the call's status (i32, a DtStatus). */
LLVMValueRef cg_gemm(CgFn *fn, const Inst *x, Inst **ep, int nep);

/* ---- header.c --------------------------------------------------------- */

/* Writes the C header of m's generated interface, for targets ts, to path. */
bool cg_write_header(const Module *m, const CgTargets *ts, const char *path, Diag *d);
/* The header of an elastic build: plans for devices[k] devices, n of
 * them, with the interface of m, the first, which every plan shares, and
 * most[0] and most[1] the most state and work any plan's rank needs
 * (cg_plan_memory over every plan). */
bool cg_write_header_plans(const Module *m, const CgTargets *ts, const int *devices, int n,
                           const int64_t most[2], const char *path, Diag *d);
/* The most state and work block a rank of m needs, into *state and *work
 * where larger. */
void cg_plan_memory(const Module *m, int64_t *state, int64_t *work);

#endif
