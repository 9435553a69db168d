/* ir.h: the IR layer's one header: arena, diagnostics, types, shardings, the
 * op table, modules, the text form, the verifier and the interpreter. It
 * knows nothing of the passes, the frontend or code generation. Sections are
 * named after the file that owns them. */
#ifndef DTC_IR_H
#define DTC_IR_H

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrt.h"   /* the facts the compiler shares with the runtime */

#define DTC_VERSION "0.1.0"

/* Internal invariants: a failure is a bug in dtc, never the user's fault. */
_Noreturn void dtc_die(const char *file, int line, const char *fmt, ...);
#define DTC_ASSERT(c) \
  do { if (!(c)) dtc_die(__FILE__, __LINE__, "assertion failed: %s", #c); } while (0)
#define DTC_UNREACHABLE() dtc_die(__FILE__, __LINE__, "unreachable")
#define COUNTOF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- arena.c ---------------------------------------------------------- */

/* One arena per compilation; everything is freed at once. */
typedef struct Arena Arena;
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n);          /* zeroed, 16-byte aligned */
void *arena_realloc(Arena *a, void *p, size_t old, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...);

/* Growable array of T in an arena: struct { T *a; int n, cap; }. */
#define VEC(T) struct { T *a; int n, cap; }
#define vec_push(arena, v, x) \
  do { \
    if ((v)->n == (v)->cap) { \
      int nc_ = (v)->cap ? 2 * (v)->cap : 8; \
      (v)->a = arena_realloc((arena), (v)->a, sizeof(*(v)->a) * (size_t)(v)->cap, \
                             sizeof(*(v)->a) * (size_t)nc_); \
      (v)->cap = nc_; \
    } \
    (v)->a[(v)->n++] = (x); \
  } while (0)

/* ---- diag.c ----------------------------------------------------------- */

typedef struct SrcFile {
  const char *name;   /* as given by the user */
  const char *text;   /* NUL-terminated contents, or NULL when unavailable */
  size_t len;
  bool ir_text;       /* IR text (parse.c): its positions are never printed as locs */
} SrcFile;

typedef struct Loc {
  const SrcFile *file;  /* NULL: no location */
  int line, col;        /* 1-based */
} Loc;

typedef struct Diag {
  FILE *out;            /* stderr by default */
  int nerr, nwarn;
  int max_errors;       /* stop reporting after this many (default 20) */
  bool werror;          /* warnings count as errors */
  bool color;
  unsigned wflags;      /* enabled optional warnings (W_*) */
  bool quiet;           /* count, print nothing (a planner's trial runs) */
  /* When set, called after each error and warning is printed, to add notes
   * of context (the frontend: where the block being lowered is applied). */
  void (*context)(struct Diag *d, void *arg);
  void *context_arg;
} Diag;

enum { W_UNUSED = 1u << 0, W_RESHARD = 1u << 1 };

void diag_init(Diag *d, FILE *out);
/* A Diag that counts errors and prints nothing, without a limit: for trials
 * whose failure is an answer, not a message. */
void diag_init_quiet(Diag *d);
/* file:line:col: error: msg, then the source line and a caret under col. */
void diag_error(Diag *d, Loc loc, const char *fmt, ...);
void diag_warn(Diag *d, Loc loc, const char *fmt, ...);
void diag_note(Diag *d, Loc loc, const char *fmt, ...);
void diag_verror(Diag *d, Loc loc, const char *fmt, va_list ap);
/* True once the error cap is reached: callers stop producing more. */
bool diag_full(const Diag *d);
/* Reads a whole regular file of at most 256 MiB into the arena, never
 * blocking on a FIFO; NULL and errno on failure: EISDIR for a directory,
 * EINVAL for anything else that is not a regular file, EFBIG when larger. */
SrcFile *src_read(Arena *a, const char *path);
SrcFile *src_from_string(Arena *a, const char *name, const char *text);

/* ---- types (ir.c) ----------------------------------------------------- */

typedef enum { DT_VOID, DT_F32, DT_I32, DT_COUNT } DType;

#define IR_MAX_RANK 6
#define IR_MAX_DIM ((int64_t)1 << 40)     /* any one dimension */
#define IR_MAX_ELEMS ((int64_t)1 << 40)   /* elements of one tensor */

typedef struct Type {
  DType dtype;
  int rank;                  /* 0: scalar */
  int64_t dim[IR_MAX_RANK];
} Type;

int64_t type_elems(const Type *t);
size_t dtype_size(DType dt);
/* t's bytes: its elements times its dtype's size, as a double. */
double type_bytes(const Type *t);
const char *dtype_name(DType dt);
bool type_eq(const Type *a, const Type *b);
/* "f32[256,784]"; buf of at least 128 bytes. */
const char *type_str(const Type *t, char *buf, size_t n);
/* How an operand of type o, broadcast to the result shape s of an
 * elementwise op, reads s seen as a matrix [R, N] (N the last dim of s):
 * every element (FULL), a row of N repeated (ROW), one value (ONE), or some
 * other way (NONE). The epilogue of a matrix product reads its tiles so. */
typedef enum { TILE_NONE = -1, TILE_FULL, TILE_ROW, TILE_ONE } TileRead;
TileRead type_tile_read(const Type *s, const Type *o);

/* ---- cluster, mesh, sharding (ir.c) ----------------------------------- */

/* Every op of ops.def (the table is in ops.c, below). */
typedef enum {
#define OP(id, name, minin, maxin, kind, attrs) OP_##id,
#include "ops.def"
#undef OP
  OP_COUNT
} Op;


typedef struct Device {
  const char *name;
  int node;                /* index into Cluster.node */
  const char *kind;        /* "cpu" */
  double gflops;           /* dense f32 speed: dtc's GEMM on the device's threads */
  double bw;               /* bytes/s an elementwise loop reads and writes, 0: not given */
  double lat;              /* seconds every kernel takes beyond its work, 0: not given */
  double row;              /* seconds a kernel takes beyond its bytes for each cache line
                              of a table row it visits at random, 0: not given */
  double entry;            /* seconds sparse_rows takes beyond its bytes for each id it
                              sorts, the other sparse kernels in proportion (entry_cost),
                              0: not given */
  double attn;             /* the fraction of gflops at which attention's kernels run their
                              FLOPs, 0: not given */
  double score;            /* seconds an attention kernel takes beyond its FLOPs for each
                              score it makes, 0: not given */
  double attn_block;       /* seconds it takes beyond its FLOPs and scores for each product
                              of a block of fewer than 64 queries or keys it makes
                              (dtrt_sdpa_blocks), 0: not given */
  double product;          /* seconds a matmul takes beyond its FLOPs for each product of
                              matrices it makes (one, or a batch's count), 0: not given */
  double spill;            /* bytes per second at which a matmul streams a right operand
                              (K x N, a product's) of more than l2 bytes, beyond its FLOPs,
                              0: not given */
  int64_t l2;              /* bytes of L2 cache the device has (of a core it may share), 0:
                              not given */
  int64_t tile_m, tile_n;  /* the micro-tile of dtc's GEMM on the device (rows x columns of
                              a product it computes at once), 0: not given */
  int64_t mem;             /* bytes */
  const char *target;      /* LLVM triple, NULL: host */
  const char *cpu;         /* LLVM cpu name, NULL: generic for target, host for host */
  double spread;           /* relative spread of the measured gflops (dtc-probe), 0: none given */
  Loc loc;
} Device;

typedef struct Node { const char *name; Loc loc; } Node;

typedef struct Link {
  const char *name;        /* "intra" (inside a node) or "inter" (between nodes) */
  double bw;               /* bytes per second */
  double lat;              /* seconds */
  double spread;           /* relative spread of the measured bw and lat, 0: none given */
  Loc loc;
} Link;

/* A collective timed over a group of `ranks` of the job's ranks (a
 * `collective` statement, written by dtc-probe): by method `method` it takes
 * lat + bytes / bw, bytes being an all_reduce's buffer, the whole tensor of an
 * all_gather or reduce_scatter, a member's input of an all_to_all. */
typedef struct Collective {
  Op op;                   /* OP_all_reduce, OP_all_gather, OP_reduce_scatter, OP_all_to_all */
  int64_t method;          /* DtCommMethod (dtrt.h) */
  int64_t ranks;           /* the group size it was timed on, at least 2 */
  double bw;               /* bytes per second */
  double lat;              /* seconds */
  double spread;           /* relative spread of the timings behind bw and lat, 0: none given */
  Loc loc;
} Collective;

typedef struct Cluster {
  const char *name;
  VEC(Node) node;
  VEC(Device) dev;
  VEC(Link) link;
  VEC(Collective) coll;    /* measured collectives; passes/comm.c prefers them */
  Loc loc;
} Cluster;

#define IR_MAX_MESH_AXES 3
typedef struct Mesh {
  const char *name;
  int naxis;
  const char *axis_name[IR_MAX_MESH_AXES];
  int axis_size[IR_MAX_MESH_AXES];
  int *dev;                /* product(axis_size) device indices, row-major */
  Loc loc;
} Mesh;

/* Per dimension: whole, or split over a mesh axis with optional per-device
 * ratios (axis_size entries summing to 1; NULL means even). */
typedef struct Sharding {
  int mesh;                          /* index into Module.mesh */
  int8_t axis[IR_MAX_RANK];          /* -1: whole on every device */
  double *ratio[IR_MAX_RANK];
  bool partial;                      /* value is a partial sum awaiting reduction */
  uint8_t partial_axes;              /* with partial: the mesh axes it sums over (bit a:
                                        axis a); 0: every axis that splits no dimension */
} Sharding;

typedef enum { PLAN_NONE, PLAN_AUTO, PLAN_EVEN, PLAN_EXPLICIT } PlanMode;

/* ---- ops (ops.c, shape.c, cost.c) ------------------------------------- */

typedef enum { K_ELEM, K_REDUCE, K_MATMUL, K_KERNEL, K_SHAPE, K_COMM, K_META, K_CALL } OpKind;

typedef enum { A_INT, A_INTS, A_FLOAT, A_STR } AttrKind;

typedef struct Attr {
  const char *name;
  AttrKind kind;
  int64_t i;          /* A_INT */
  int64_t *ints;      /* A_INTS */
  int n;              /* A_INTS: count */
  double f;           /* A_FLOAT */
  const char *s;      /* A_STR */
} Attr;

typedef struct Inst Inst;
typedef struct Func Func;
typedef struct Module Module;

typedef struct OpInfo {
  const char *name;
  int minin, maxin;
  OpKind kind;
  const char *attrs;     /* schema, see ops.def */
  /* Sets inst->type from operands and attributes; on a user error writes a
   * message (no location) into err and returns false. */
  bool (*shape)(Inst *inst, char *err, size_t errlen);
  /* Floating-point operations to compute inst once. */
  double (*flops)(const Inst *inst);
} OpInfo;

extern const OpInfo ir_ops[OP_COUNT];
/* Floating-point operations of inst: its op's rule, once per piece when it
 * runs in pieces. */
double ir_flops(const Inst *inst);
/* The scores (a query-key pair's product and exponential) attention op inst
 * makes, as ir_flops counts its work: sdpa_grad makes each twice; 0 for an
 * op other than the sdpa family. */
double ir_attn_scores(const Inst *inst);
/* The (query, key) pairs attention kernel inst sees: about half of them
 * when causal; 0 for other ops and operands not of rank 4. */
double ir_attn_pairs(const Inst *inst);
/* Op by its text name; OP_COUNT when unknown. */
Op ir_op_lookup(const char *name);
/* Whether libdtrt's kernel of collective op implements method (a
 * DtCommMethod of dtrt.h, whose dtrt_comm_method_names spell them). */
bool ir_has_method(Op op, int method);

/* ---- instructions, functions, modules (ir.c) -------------------------- */

struct Inst {
  int id;                /* position in its function, kept by ir_renumber */
  Func *fn;              /* owning function */
  Op op;
  const char *name;      /* printed as %name; NULL prints %id */
  Inst **in;
  int nin;
  Attr *attr;
  int nattr;
  Type type;             /* DT_VOID for store and output */
  Sharding *shard;       /* NULL until the sharding pass */
  Loc loc;               /* the source expression this op comes from */
  int fuse;              /* fusion group (passes/fusion.c), 0: none */
  int64_t offset;        /* arena offset (passes/memplan.c), -1: none */
};

struct Func {
  const char *name;
  VEC(Inst *) inst;      /* in order; operands precede their users */
  Module *mod;
  int64_t work_bytes;    /* scratch arena size (passes/memplan.c), -1: not planned */
  int64_t staged_bytes;  /* the most one of its kernels, or of its loops' bodies',
                            allocates while it runs (ir_staged_bytes; memplan.c) */
  int device;            /* after spmd: the mesh device (= rank) this copy runs on; -1: global */
  bool body;             /* a loop body: run by `repeat`, reading `arg`s, never an entry */
  Loc loc;
};

/* G_BUFFER: a tensor of the model the step updates itself, never the optimizer
 * (batch norm's running statistics): no gradient, saved, loaded and exported
 * as params are (the runtime describes it as DT_G_PARAM). */
typedef enum { G_INPUT, G_PARAM, G_BUFFER, G_STATE } GlobalKind;

typedef struct Global {
  const char *name;
  GlobalKind kind;
  Type type;
  int init;              /* DtInit (dtrt_init_names spell them); -1 for inputs */
  double init_arg;       /* normal: stddev; uniform: bound */
  int64_t fan_in, fan_out; /* glorot: its fans; 0: those of the trailing matrix [..., in, out] */
  Sharding *shard;       /* from the parallel block, or NULL */
  int64_t no_decay;      /* param: 1 when the optimizer's weight decay skips it */
  double lr, weight_decay; /* param: its group's, > 0; 0: the optimizer's */
  int64_t sparse;        /* param: 1 for an embedding table whose gradient is sparse
                            (touched rows only) and whose update touches only them */
  Loc loc;
} Global;

typedef struct Dim { const char *name; int64_t value; Loc loc; } Dim;

/* demo: DeMo (passes/optimizer.c); adagrad: torch.optim.Adagrad;
 * sparse_adam: torch.optim.Adam for dense params and torch.optim.SparseAdam
 * for sparse tables; rowwise_adagrad: adagrad for dense params, one
 * accumulator a row for sparse tables (FBGEMM's). */
typedef enum {
  OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_DEMO, OPT_ADAGRAD, OPT_SPARSE_ADAM, OPT_ROWWISE_ADAGRAD,
  OPT_COUNT
} OptKind;
extern const char *const ir_opt_names[OPT_COUNT];   /* "sgd", "adam", "adamw", ... */

/* The training objective: minimise output `loss` of @forward. */
typedef struct Train {
  const char *loss;      /* output name; NULL: inference only */
  int opt;               /* OptKind; -1: none */
  double lr, momentum, weight_decay, beta1, beta2, eps;
  int schedule;          /* DtSchedule (dtrt_schedule_names spell them); -1: none */
  int64_t nesterov;      /* sgd: 1 for Nesterov momentum (torch.optim.SGD's) */
  double clip_norm;      /* > 0: gradients scaled to at most this global 2-norm */
  int64_t eps_kingma;    /* adam, adamw: 1 for eps added to sqrt(v) with the bias
                            corrections folded into the step size (Kingma and
                            Ba's efficient form); 0: to the corrected sqrt(v),
                            as torch.optim.Adam */
  int64_t warmup, total;
  double dampening;      /* sgd: the momentum buffer takes (1 - dampening) g
                            after the first step (torch.optim.SGD's) */
  double lr_decay;       /* adagrad: lr / (1 + (t - 1) lr_decay) at step t */
  double initial_accumulator_value; /* adagrad: where the sums of g^2 start */
  int64_t accumulate;    /* > 1: the step adds its gradient to the state
                            "<param>__acc" and every accumulate-th call
                            updates with their mean; 0 or 1: every call */
  double beta;           /* demo: the momentum's decay */
  int64_t topk, chunk;   /* demo: coefficients sent per chunk, the chunk's
                            length (a 2-D tile's side) */
  double min_lr;         /* cosine: the learning rate it decays to */
  double end_factor;     /* linear: the factor of lr it decays to */
  double gamma;          /* step: the factor every step_size steps */
  int64_t step_size;     /* step: steps between two decays */
  int64_t decay_min_rank; /* > 0: params of a lower rank (a loop's stacked param:
                             its rank per iteration) take no weight decay */
  Loc loc;
} Train;
/* demo's largest chunk: a 2-D tile's coefficient index (below chunk^2) is
 * exact in f32, where the packed coefficients carry it. */
#define IR_DEMO_MAX_CHUNK 1024
/* Calls of the training step one update may average (Train.accumulate). */
#define IR_MAX_ACCUMULATE 65536

/* 1F1B (PipeDream-Flush): a stage warms up with (stages - s - 1) forward
 * micro-batches, then alternates one forward and one backward; GPipe: all
 * forward, then all backward. */
typedef enum { PIPE_1F1B, PIPE_GPIPE } PipeSchedule;
extern const char *const ir_pipe_schedules[2];   /* "1f1b", "gpipe" */

struct Module {
  const char *name;
  Loc loc;               /* the model's name, or the IR text's 'module' line */
  Arena *arena;
  VEC(Dim) dim;
  VEC(Global) global;
  VEC(Func *) func;
  /* ir_find_device_func's hash table of func by name and device (ir.c),
   * brought up to date as it finds it stale */
  struct FuncIndex *func_index;
  Train train;
  Cluster *cluster;      /* NULL: one local device */
  VEC(Mesh) mesh;
  PlanMode plan;
  /* > 1: @train_step's loops cut the batch into this many micro-batches
   * (passes/microbatch.c); 0 or 1: none. */
  int microbatches;
  Loc microbatches_loc;
  /* The order of a pipeline's micro-batches (passes/schedule.c); its loc
   * is the option's, none when it was not written. */
  PipeSchedule schedule;
  Loc schedule_loc;
  /* > 1: deterministic mode (passes/determinize.c): every sum over the batch
   * is one of this many fixed pieces of rows, added in piece order, so the
   * step's result does not depend on the layout; 0: off. */
  int det_pieces;
  /* DtWire of the gradient exchange (`exchange = bf16`, dtc -fexchange=):
   * passes/comm.c sets it as the `wire` of every all_reduce and
   * reduce_scatter that sums a param's gradient over the batch; its loc is
   * the option's, none when it was not written. */
  int exchange;
  Loc exchange_loc;
  /* `exchange = auto`: the plan pass chooses f32 or bf16 by the simulated
   * step, sets exchange to its choice and clears this. */
  bool exchange_auto;
  /* `shard_state = AXIS` (ZeRO stages 1 and 2): each param's optimizer
   * state is split over mesh axis state_axis, the data-parallel one, so
   * each device updates and keeps its share (passes/sharding.c); its loc
   * is the option's. */
  bool state_sharded;
  int state_axis;
  Loc state_loc;
  /* `shard_state = none`: each param's optimizer state stays as its param's,
   * plan auto never splits it (passes/plan.c); state_loc is the option's */
  bool state_whole;
  /* `attention = heads` (DeepSpeed-Ulysses): an attention whose sequence is
   * split over an axis swaps that split for a split of its heads around the
   * op (all_to_all, passes/heads.c) instead of running as a ring; its loc is
   * the option's, none when it was not written (ring attention). */
  bool attn_heads;
  Loc attn_loc;
  int64_t batch;         /* the model's batch dimension (`batch B`), 0: none */
  /* dtc -fepilogue: fusion makes a matmul the head of the group that reads
   * it, which the generated GEMM runs on its strips (passes/fusion.c) */
  bool epilogues;
  /* dtc -fno-coalesce: every collective stays on its own (passes/coalesce.c
   * exchanges independent ones of an axis as one); ir_copy keeps it */
  bool no_coalesce;
  Loc det_loc;
  /* The loops (their forward repeats' locations) the planner turned
   * recomputation on for, one at a time, since no plan fit without
   * (passes_run's later runs; not printed). */
  const Loc *remat_planned;
  int nremat_planned;
};
/* Micro-batches a step may be cut into (a join is one concat). */
#define IR_MAX_MICROBATCHES 16
/* Pieces a deterministic step may cut its batch into. */
#define IR_MAX_PIECES 256
/* In deterministic mode a product sums a k of at most this many in one
 * block of the generated GEMM, on every target (codegen/gemm.c), and a fold
 * of pieces of at most this many becomes one product (passes/fusion.c). */
#define IR_DET_KBLOCK 1024

Module *ir_module_new(Arena *a, const char *name);
Global *ir_add_global(Module *m, const char *name, GlobalKind kind, Type t, Loc loc);
Global *ir_find_global(const Module *m, const char *name);
Func *ir_add_func(Module *m, const char *name, Loc loc);
Func *ir_find_func(const Module *m, const char *name);
/* The function of that name among device's (-1: those of no device). */
Func *ir_find_device_func(const Module *m, const char *name, int device);
/* True for @base and for its per-device copies @base.D (after spmd). */
bool ir_func_is(const Func *f, const char *base);
Inst *ir_find_inst(const Func *f, const char *name);

/* Appends an op with operands; its type is unset until ir_infer or ir_finish. */
Inst *ir_new(Func *f, Op op, Loc loc, int nin, Inst **in);
/* Sets the type; false with a message for a user error (shape mismatch ...). */
bool ir_infer(Inst *inst, char *err, size_t errlen);
/* ir_infer for ops built by passes: a failure is a bug in dtc. */
Inst *ir_finish(Inst *inst);
/* ir_new + ir_finish for ops without attributes. */
Inst *ir_make(Func *f, Op op, Loc loc, int nin, ...);
/* Rebuilds f->inst from a new order/subset and renumbers. */
void ir_renumber(Func *f);
/* Drops the insts of f that no root (an inst root() says must stay) reads,
 * directly or through others, keeping order; ids renumbered. */
void ir_drop_unneeded(Func *f, bool (*root)(const Inst *));

/* The users of every inst of a function, by id (ids must be current). */
typedef struct Uses {
  int *off;       /* users of inst i: u[off[i] .. off[i+1]) */
  Inst **u;
} Uses;
Uses ir_uses(Arena *a, const Func *f);
/* The global a load or store names. */
const Global *ir_global_of(const Inst *i);
/* True when the producer of output inst out's operand writes straight into
 * the caller's output buffer, so `output` itself copies nothing: an
 * elementwise value, or the first output of a kernel's result that is not an
 * alias (reshape, load, const, lr, arg), not a loop's (repeat, repeat_out)
 * and not @forward's training loss (which
 * NAME_forward drops). The memory plan gives such a value no offset; code
 * generation writes it into the caller's buffer. */
bool ir_output_direct(const Inst *out);
/* Whether op may write its result over its first operand (the sparse_*
 * updates of ops.def): the memory plan gives such a result no offset when
 * its first operand is a load of the global the result is stored to, read
 * by nothing after it; code generation then updates the state in place. */
bool ir_in_place(Op op);
/* Whether x joins the other devices of a group: a collective or a send
 * (K_COMM), ring attention (its blocks pass around the axis), or a repeat
 * whose body holds one. Every member runs such an op, whatever it holds. */
bool ir_joins_group(const Inst *x);
/* Into idle[0..f->inst.n): whether each inst of f computes nothing its
 * device needs, so code generation and the simulator skip it. An inst is
 * needed when it joins a group, is a repeat, stores or outputs a value
 * with elements, has no value (an effect), or gives a value with elements
 * to a needed inst; a fusion group's insts are needed together. Idle: a
 * table-wise table's lookups and updates on the devices not holding it
 * (their values are empty) and the sorting of its ids only they read.
 * Requires: f's insts numbered in order (ir_renumber). */
void ir_idle(const Func *f, bool *idle);
/* The tensor whose elements a dropping op's mask covers, its `at` placing
 * a block there: dropout's own result, or the [B,H,Tq,Tk] scores of an
 * attention that drops (sdpa, sdpa_grad with p > 0), whose dims 0 and 1
 * are its result's (sdpa_dmask's result is those scores). False for every
 * other op. */
bool ir_dropout_whole(const Inst *i, Type *t);
/* 64-bit FNV-1a of n bytes. */
uint64_t ir_hash(const void *p, size_t n);
/* h, the ir_hash of some bytes, on to n more: ir_hash of all of them. */
uint64_t ir_hash_more(uint64_t h, const void *p, size_t n);

/* ---- loops (ir.c) ---- */

/* The body function a repeat runs: @body, or @body.D in device D's function;
 * NULL when there is none. */
Func *ir_repeat_body(const Inst *repeat);
/* The number of output insts of f, and the k-th of them (NULL past the end). */
int ir_func_noutputs(const Func *f);
const Inst *ir_func_output(const Func *f, int k);
/* The arg inst of body f with index k, NULL if none. */
const Inst *ir_func_arg(const Func *f, int k);
/* The type of output k of a repeat (0: the repeat itself, the last carry
 * 0): a carry's type, or a body output's stacked along a leading dim n;
 * false when the body has no output k. */
bool ir_repeat_out_type(const Inst *repeat, int k, Type *t);
/* The step iteration i of a loop runs with when its caller runs with step s:
 * s * IR_LOOP_MIX + i + 1 (mod 2^64), so every iteration, and every pair of
 * iterations of nested loops, draws its own dropout masks. */
#define IR_LOOP_MIX 0x9e3779b97f4a7c15u
static inline int64_t ir_loop_step(int64_t s, int64_t i) {
  return (int64_t)((uint64_t)s * IR_LOOP_MIX + (uint64_t)i + 1);
}
/* Operand k of repeat r: 0 carried, 1 read whole each iteration, 2 stacked. */
int ir_repeat_operand_kind(const Inst *r, int k);
/* The first stacked operand of repeat r (r->nin: none); the rest are too. */
int ir_repeat_first_stacked(const Inst *r);
/* A new, empty body function @base.suffix (then @base.suffix2, ... while
 * that is taken). */
Func *ir_add_body(Module *m, const char *base, const char *suffix, Loc loc);
/* A copy of inst i at the end of f, on operands in: its name, sharding,
 * attributes (and an arg's type). */
Inst *ir_copy_inst(Func *f, const Inst *i, Inst **in);
/* A copy of body b, instructions, shardings and all, named @B.suffix (then
 * @B.suffix2, ... while that is taken), for a loop of its own. */
Func *ir_copy_body(Module *m, Func *b, const char *suffix);

/* An op run piece by piece (deterministic mode): its `pieces` attribute
 * [k0, r0, k1, r1, ...] cuts dim 0 of each operand kj into blocks of rj rows;
 * the op runs once per piece p on block p of every cut operand and whole
 * others, and its result stacks those along a new leading dim. The number
 * of pieces (0: not run so), and the rows of operand k's block (0: whole). */
int ir_pieces(const Inst *i);
int64_t ir_piece_rows(const Inst *i, int k);
/* One piece's operands of i (at most 16): copies of its operands into piece,
 * each cut one's dim 0 its rows, and pointers to them into in. */
void ir_piece_operands(const Inst *i, Inst *piece, Inst **in);

/* Attention's rows' log-sum-exp written by its forward: an sdpa_lse (or
 * ring_sdpa_lse) whose queries, keys, mask and attributes are those of an
 * sdpa (ring_sdpa) before it in its function, the nearest such, is that
 * op's partner: the forward's kernel writes the rows as it goes
 * (dtrt_k_sdpa_with_lse, the same bits), and the lse op makes no code and
 * costs nothing. ir_lse_partner gives an lse op's sdpa, ir_lse_of an sdpa's
 * lse op; NULL when there is none. Neither in deterministic pieces. */
const Inst *ir_lse_partner(const Inst *lse);
const Inst *ir_lse_of(const Inst *s);
/* Whether a and b have the same attributes, of the same values. */
bool ir_same_attrs(const Inst *a, const Inst *b);
/* Whether global g is the table of a lookup in f (an embedding_bag's weight
 * loaded from it); false for a NULL f. */
bool ir_looks_up(const Func *f, const Global *g);

void ir_set_int(Inst *i, const char *name, int64_t v);
void ir_set_ints(Inst *i, const char *name, const int64_t *v, int n);
void ir_set_float(Inst *i, const char *name, double v);
void ir_set_str(Inst *i, const char *name, const char *s);
/* Copies every attribute of src onto dst (which may be in another module).
 * An attribute's name, string and int array are never written once set
 * (setting one again replaces it): copies in one arena share them. */
void ir_copy_attrs(Inst *dst, const Inst *src);
const Attr *ir_attr(const Inst *i, const char *name);
int64_t ir_get_int(const Inst *i, const char *name, int64_t dflt);
double ir_get_float(const Inst *i, const char *name, double dflt);
const char *ir_get_str(const Inst *i, const char *name, const char *dflt);
/* Returns the list (NULL, *n = 0 when absent). */
const int64_t *ir_get_ints(const Inst *i, const char *name, int *n);
/* The DtSchedule an `lr` inst names (its `schedule`); constant when unknown,
 * which the verifier refuses. */
DtSchedule ir_schedule(const Inst *lr);

/* ---- shard.c ---------------------------------------------------------- */

/* Block lengths of a dimension of length n split over k devices. With ratios
 * (k positive entries summing to 1): floor(ratio[c] n) each, then the remaining
 * elements one at a time to the device furthest below its target ratio[c] n,
 * ties to the lower index. NULL: even, n / k each and one more for the first
 * n % k (the same rule with equal ratios). */
void ir_blocks(int64_t n, const double *ratio, int k, int64_t *sizes);
/* s splitting nothing: every dimension whole, no ratios, no partial sum, mesh 0. */
void ir_shard_whole(Sharding *s);
/* Whether ratios of k devices place the whole dimension on one of them (1 on
 * it, 0 on the others: a table-wise table, docs/LANGUAGE.md): the one index
 * ratios may be 0 in, the others' blocks empty; -1 otherwise. */
int ir_placed(const double *ratio, int k);
/* The blocks of a tensor dimension of m: ir_blocks, except in deterministic
 * mode (m->det_pieces = G > 1) for n a multiple of G, where they are whole
 * pieces of n / G: ir_blocks of G pieces, each times n / G. */
void ir_dim_blocks(const Module *m, int64_t n, const double *ratio, int k, int64_t *sizes);
/* The default count of pieces of a deterministic step: the largest divisor
 * of the batch from 2 to 8; 0 when there is none. */
int ir_det_pieces(int64_t batch);
/* The devices of m's mesh: the product of its axes' sizes; 1 without a mesh. */
int ir_mesh_devices(const Module *m);
/* The coordinates of mesh position `device` (= rank; row-major, the last axis
 * varies fastest). */
void ir_mesh_coords(const Mesh *mesh, int device, int coord[IR_MAX_MESH_AXES]);
/* The members of device's group along `axis` (the positions that share its
 * other coordinates), in coordinate order, into members[axis_size]. */
void ir_mesh_group(const Mesh *mesh, int device, int axis, int *members);
/* Device's block of a tensor of type `global` sharded by s (NULL: whole): its
 * type and, when begin is not NULL, its first index along every dimension. */
void ir_local_type(const Module *m, const Sharding *s, const Type *global, int device,
                   Type *local, int64_t *begin);
/* What `load` of g yields in a function of device `device`: its block after
 * the spmd pass (device >= 0), its whole type in a global function (-1). */
Type ir_global_type_on(const Module *m, const Global *g, int device);
/* The mesh axes (bit a: axis a) partial sum s runs over; 0 when s is NULL or
 * not partial. */
unsigned ir_partial_axes(const Module *m, const Sharding *s, int rank);
/* s as the text form writes it, "m[dp(0.4, 0.6), *] partial(tp)"; ratios
 * with %g. */
const char *ir_shard_str(const Module *m, const Sharding *s, int rank, char *buf, size_t n);

/* ---- print.c, parse.c, verify.c --------------------------------------- */

/* The text form (docs/IR.md). print(parse(print(m))) == print(m). */
void ir_print(FILE *out, const Module *m);
/* ir_print without source locations: what the model is, wherever its source
 * lies (the model hash that checkpoints carry). */
void ir_print_structure(FILE *out, const Module *m);
void ir_print_func(FILE *out, const Func *f);
/* One instruction as a line of a function's text. */
void ir_print_inst(FILE *out, const Inst *in);
/* What print writes about m, in a malloc'd string the caller frees; its
 * length into *len when len is not NULL. */
char *ir_string_of(void (*print)(FILE *, const Module *), const Module *m, size_t *len);
/* m's text (ir_print) in a malloc'd string the caller frees. */
char *ir_print_string(const Module *m);
/* A size in bytes as the reports write it: "512 B", "12.5 KiB", "3.00 MiB",
 * "1.20 GiB"; into buf, which it returns. */
const char *ir_bytes_str(double bytes, char *buf, size_t n);
/* ir_print's text parsed quietly into a new module in arena a (a copy
 * the passes may change freely: a plan on trial); NULL when it does not
 * parse. */
Module *ir_parse_string(Arena *a, const char *name, const char *text);
/* m copied through its text (ir_print_string, ir_parse_string) into arena
 * a, with Module.no_coalesce; NULL when the text does not parse back. */
Module *ir_copy(Arena *a, const Module *m);
/* Parses IR text; reports located errors to d; NULL on error. */
Module *ir_parse(Arena *a, const SrcFile *src, Diag *d);
/* Checks every structural and type invariant; reports each violation as an
 * error at the inst's location; false when any. */
bool ir_verify(const Module *m, Diag *d);
/* Checks inst's attributes against its op's schema: required ones present,
 * none unknown or repeated, kinds as declared. Reports each at loc, or at
 * at[k] for attribute k when at is not NULL; false when any. */
bool ir_check_attrs(const Inst *inst, Diag *d, Loc loc, const Loc *at);
/* The values a numeric field may take, the same in the language (frontend)
 * and in the IR text: a finite number from lo to hi, an open end excluding its
 * bound; text says so in messages ("'lr' must be positive, not -1"). */
typedef struct IrRange {
  double lo, hi;
  bool lo_open, hi_open;
  const char *text;
} IrRange;
#define IR_QUANTITY_MAX 9e18 /* the largest memory size, bandwidth or time, in SI units */
extern const IrRange ir_positive, ir_nonnegative, ir_unit, ir_unit_open, ir_quantity, ir_mem,
    ir_tile;
bool ir_in_range(const IrRange *r, double x);
/* Scalar fields of records as the text form names them ("{gflops = 80.0}");
 * kind 'f' double, 'i' int64_t, 's' string, 'e' an int indexing names[0..n)
 * (written as its name; -1: absent); range, when not NULL, bounds a number
 * given; each table ends with a NULL name. */
typedef struct IrField {
  const char *name;
  char kind;
  size_t off;
  const char *const *names;
  int n;
  const IrRange *range;
} IrField;
extern const IrField ir_device_fields[], ir_link_fields[], ir_collective_fields[], ir_train_fields[],
    ir_global_fields[];
/* The field of the table named name; NULL when there is none. */
const IrField *ir_field(const IrField *fields, const char *name);

/* ---- dot.c ------------------------------------------------------------ */

void ir_print_dot(FILE *out, const Module *m);

/* ---- elem.c ----------------------------------------------------------- */

/* gelu is x Phi(x) = 0.5x(1 + erf(x / sqrt 2)); gelu_tanh its tanh
 * approximation 0.5x(1 + tanh(IR_GELU_C (x + IR_GELU_A x^3))), here and in
 * generated code. */
#define IR_GELU_C 0.7978845608028654f   /* sqrt(2/pi) */
#define IR_GELU_A 0.044715f

/* One element of elementwise inst (K_ELEM): a op b; unary ops ignore b;
 * relu_grad and gelu_grad take (x, dy). */
float ir_elem_eval(const Inst *inst, float a, float b);
/* clamp's (and clamp_grad's) bounds in f32: -inf and inf when absent. */
void ir_clamp_bounds(const Inst *i, float *lo, float *hi);

/* ---- interp.c, interp_mesh.c ------------------------------------------ */

/* The reference interpreter, for tests and debugging: runs a function of a
 * module on host buffers. It holds one buffer per global, zero-filled at first,
 * so params and optimizer state persist across runs and `store` updates them,
 * and the step counter read by `lr` and dropout. Elementwise ops go through
 * ir_elem_eval, every other op through the libdtrt kernel dtrt_k_<op>. */
typedef struct Interp Interp;
struct DtAttrs;

Interp *interp_new(Module *m);
/* An interpreter for the per-device functions of mesh position `device`
 * (after spmd): it holds that device's block of every global. */
Interp *interp_new_device(Module *m, int device);
void interp_free(Interp *it);
/* The buffer of a global: type_elems() f32 or i32 elements; NULL if none. */
void *interp_global(Interp *it, const char *name);
/* Copies type_elems() elements into a global; false if there is no such global. */
bool interp_set_global(Interp *it, const char *name, const void *data);
int64_t interp_step(const Interp *it);
void interp_set_step(Interp *it, int64_t step);
/* Runs @func; outputs[k], when outputs and outputs[k] are not NULL, receives a
 * copy of the k-th output. A run that stores into a global is a training step:
 * the step counter then advances. False with interp_error() set when there is
 * no such function or a kernel fails. */
bool interp_run(Interp *it, const char *func, void *const *outputs);
const char *interp_error(const Interp *it);
/* The attributes of a kernel op as libdtrt takes them: int and ints ones
 * flattened in schema order into a->i, float ones into a->f, a str one into
 * a->s (the IR's own string); an absent optional attribute is left out, or
 * passed as 0 when a later one of the same class is present. */
void ir_kernel_attrs(const Inst *inst, struct DtAttrs *a);
/* The bytes x's kernel allocates while it runs beside its operands and
 * result (dtrt_staged_bytes of its local shapes and attributes, its group
 * the mesh axis of m it names); 0 for an op whose kernel allocates none. */
int64_t ir_staged_bytes(const Module *m, const Inst *x);

/* The mesh interpreter (interp_mesh.c), for tests: the per-device functions @F.0 .. @F.N-1 of a
 * module after spmd run for every device of its mesh in one process, each
 * device with its own interpreter holding its blocks of the globals. Devices
 * run to their next collective, which may lie in the body of a loop (the
 * device's run then stands in that iteration and resumes there after the
 * collective); a collective runs once every member of its
 * axis group has reached one over that axis (members in coordinate order):
 * all_reduce sums, all_gather concatenates the blocks, reduce_scatter sums and
 * hands out the blocks, all_to_all exchanges them, bcast copies member
 * from's value to all, a send (which only its two members run) copies it
 * from one to the other; shard_slice takes the
 * device's block locally. */
typedef struct InterpMesh InterpMesh;

InterpMesh *interp_mesh_new(Module *m);
void interp_mesh_free(InterpMesh *s);
int interp_mesh_devices(const InterpMesh *s);
Interp *interp_mesh_device(InterpMesh *s, int device);
/* Cuts the whole value `full` of a global into every device's block. */
bool interp_mesh_set_global(InterpMesh *s, const char *name, const void *full);
/* Puts the devices' blocks of a global together into `full` (a dimension
 * that is whole comes from the last device holding it). */
bool interp_mesh_get_global(InterpMesh *s, const char *name, void *full);
/* Runs @func.D on every device D; outputs[k], when not NULL, receives the
 * whole value of the k-th output, assembled from the devices' blocks. False
 * with interp_mesh_error() set on a kernel error or when the devices' collectives
 * do not match. */
bool interp_mesh_run(InterpMesh *s, const char *func, void *const *outputs);
const char *interp_mesh_error(const InterpMesh *s);

#endif
