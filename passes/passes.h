/* passes.h: the pass pipeline (passes.c), its passes and the helpers they
 * share. The layer above the IR: it includes ir.h and the runtime's dtrt.h,
 * nothing of the frontend or of code generation. Sections are named after
 * the file that owns them. */
#ifndef DTC_PASSES_H
#define DTC_PASSES_H

#include "ir.h"

/* ---- passes.c --------------------------------------------------------- */

typedef struct PlanInfo PlanInfo;

/* What one run of the pipeline leaves beside the module. */
typedef struct PassRun {
  double ms[16];         /* by pass_table index: its time, 0 when it did not run */
  double verify_ms;      /* the checks after the passes (PassOptions.verify_each) */
  int ran;               /* the passes that ran */
  PlanInfo *plan;        /* the planner's record (plan.c); NULL when it did not plan */
  /* plan: nothing fits unless one more loop recomputes its forward: that
   * loop's location (its forward repeat's); no file: none */
  Loc want_remat;
  /* From PassOptions: what each device of a compiled module needs beyond
   * its state and work arenas (into bytes[device]), which the passes
   * cannot know (the scratch blocks of the GEMM for its CPU and of the
   * convolutions, libdtrt's tables: codegen/memory.c); NULL: nothing. plan
   * auto's memory check adds it. */
  void (*extra_memory)(Module *m, double *bytes, void *arg);
  void *extra_arg;
} PassRun;

/* Every pass: requires what its file header says, guarantees what it says;
 * false after reporting errors to d. It may leave results in run. */
typedef bool (*PassFn)(Module *m, Diag *d, PassRun *run);

typedef struct Pass { const char *name; PassFn run; const char *what; } Pass;
extern const Pass pass_table[];
extern const int pass_count;
const Pass *pass_lookup(const char *name);

typedef struct PassOptions {
  const char *stop_after;          /* the last pass to run; NULL: all */
  const char *const *print_after;  /* print the IR after these passes */
  int nprint_after;
  bool print_all;                  /* print the IR after every pass */
  FILE *print_to;                  /* where printed IR goes; NULL: stderr */
  bool verify_each;                /* verify the IR after every pass (--verify-each) */
  void (*extra_memory)(Module *m, double *bytes, void *arg);   /* PassRun's */
  void *extra_arg;
} PassOptions;

/* Runs the passes of pass_table in order up to o->stop_after (every pass
 * when o is NULL), verifying the IR after each where o->verify_each asks (o
 * NULL: verified; a failure is a bug in dtc) and printing it where o asks. run, when not NULL, receives each pass's
 * time and results (zeroed first). False after a pass reported errors. */
bool passes_run(Module *m, Diag *d, const PassOptions *o, PassRun *run);

/* ---- autodiff.c ------------------------------------------------------- */

/* Builds @train_step: forward, backward and optimizer update. */
bool pass_autodiff(Module *m, Diag *d, PassRun *run);
/* Builds @name from src (which outputs m->train.loss): the forward, then
 * `output "loss"`, then one output per param the loss depends on, in global
 * order, named after the param and holding d loss / d param. No update. NULL
 * after reporting errors to d. For tests and debugging. */
Func *autodiff_grads(Module *m, Func *src, const char *name, Diag *d);

/* ---- eval.c ----------------------------------------------------------- */

/* @forward in evaluation mode: every dropout of it is the identity. */
bool pass_eval(Module *m, Diag *d, PassRun *run);

/* ---- cse.c ------------------------------------------------------------ */

/* Every function: an elementwise, reduction or data-movement op that
 * another before it computes already reads that one, and unused ones go. */
bool pass_cse(Module *m, Diag *d, PassRun *run);

/* ---- microbatch.c ----------------------------------------------------- */

/* With Module.microbatches > 1: each loop of @train_step as that many loops
 * on consecutive blocks of rows of its carried values (see the file). */
bool pass_microbatch(Module *m, Diag *d, PassRun *run);
/* Whether @train_step's loops can be cut into n micro-batches: the cut tried
 * on a copy of m (its IR text parsed back), which m does not see. */
bool microbatch_fits(const Module *m, int n);

/* ---- determinize.c ---------------------------------------------------- */

/* With Module.det_pieces > 1: every sum over the batch in @train_step and
 * @forward run in that many pieces of rows and folded in order (see the file). */
bool pass_determinize(Module *m, Diag *d, PassRun *run);

/* ---- optimizer.c ------------------------------------------------------ */

/* Appends to f the update of m->train.opt for every global k with grad[k] set
 * (value[k]: the param as loaded in f) and stores the results. False after
 * reporting errors to d. */
bool opt_emit(Module *m, Func *f, Inst *const *value, Inst *const *grad, Diag *d);

/* ---- plan.c ----------------------------------------------------------- */

/* `plan auto`: chooses the forms of inputs and params and the per-device
 * ratios of their splits by the predicted step (a search over forms, a linear
 * program over ratios), unless it gains no more than the probe's noise over
 * a simpler plan: data parallel with the program's ratios, or even data
 * parallel, which it then keeps; `plan even`: the parallel block's forms,
 * even. */
bool pass_plan(Module *m, Diag *d, PassRun *run);
/* A plan simulated with one gradient exchange (`exchange = auto`). */
#define PLAN_EXCHANGES 4
typedef struct PlanExchange {
  int wire;              /* DtWire of the gradients' sums */
  int state;             /* the axis the optimizer state is split over; -1: whole */
  double step;           /* simulated seconds; INFINITY: the passes failed */
  double bytes;          /* device 0 sends in a step's collectives */
  bool over;             /* a device's memory plan exceeds its memory */
} PlanExchange;
/* What the planner chose and predicted, for the report. */
struct PlanInfo {
  int k;                 /* devices on the mesh axis */
  double *ratio;         /* [k] the ratios of every split (1/k each: even) */
  double *busy;          /* [k] seconds computing */
  double *mem;           /* [k] bytes at the device's fullest point, as the planner counts */
  double step, even;     /* predicted step of the plan, of its forms with even ratios */
  double block;          /* predicted step of the parallel block's forms, even */
  /* plan auto only: how sure the choice is (docs/ARCHITECTURE.md, Planner) */
  double best;           /* predicted step of the best plan the search found */
  bool simple_ruled_out; /* even data parallel's forms do not propagate */
  double simple;         /* of even data parallel: the block's shards, every other input
                            split along its first dimension, params open, even ratios;
                            INFINITY: it does not fit, or (simple_ruled_out) its forms
                            do not propagate with the parallel block's */
  double runner_up;      /* of the best plan of other forms (as propagated) the search
                            costed; INFINITY: none */
  const char *runner_up_how;  /* its first global of another form: "w1 m[*, dp] instead
                                 of m[*, *]" */
  double dev_spread;     /* the largest spread of the mesh's devices' gflops */
  double comm_spread;    /* of the links and the collectives measured over the mesh's size */
  const char *dev_spread_of, *comm_spread_of;  /* whose ("r1", "link intra", "all_reduce by
                                                  ring"); NULL: no spread given */
  double dp;             /* of data parallel (those forms) with the linear program's
                            ratios; INFINITY: it does not fit, or the best plan is it */
  double noise;          /* the gain over a simpler plan a plan must exceed */
  bool simulated;        /* best, simple and dp are simulated steps (the contenders were
                            within PRUNE of each other), not estimates */
  bool kept_dp;          /* the best gained no more over data parallel with the planned
                            ratios, which gained more over even: the plan is that */
  bool kept_simple;      /* neither gained more over even data parallel: the plan is that */
  double comm;           /* seconds of collectives */
  double flops;          /* of the whole step on one device */
  int ncoll, bottleneck, evals;
  int mb;                /* the micro-batches a pipeline's loops were costed in */
  int remat;             /* loops the planner made recompute their forward (Module.remat_planned) */
  bool planned_mb;       /* ... chosen by the planner, not the parallel block */
  /* exchange = auto: the plan kept, simulated with each format of the
   * gradient exchange, and where the planner chose how the optimizer state
   * is kept (state_open), with the state split over the batch's axis and
   * whole; in the order the choice prefers (the plan as its layout was
   * chosen first, f32 before bf16); nexchange 0: not chosen here */
  PlanExchange exchange[PLAN_EXCHANGES];
  int nexchange, exchange_kept;  /* how many; which the plan is */
  bool state_open;       /* plan auto left the state's split to the planner and the plan
                            kept splits the batch over state_rows */
  int state_rows;
  Sharding **user;       /* by global: the parallel block's forms, NULL: open */
  Sharding **chosen;     /* by global: the plan's forms */
  /* plan auto on a mesh of two or three axes: the candidates simulated and
   * the one kept, as --emit=plan prints them, and how many there were; the
   * confidence fields are unset. NULL on a one-axis mesh. */
  const char *mesh_report;
  int candidates;
};
/* The device plan (--emit=plan): the forms of the parallel block and of the
 * plan, every device's ratio and busy time, the collectives, the predicted
 * step against the even plan's, and the bottleneck device, and for plan auto
 * the best plan's margins over even data parallel and the runner-up, the
 * probe's spreads, the noise and which plan was kept, from the planner's
 * record pi; nothing when pi is NULL (the planner ran for plan
 * auto or even on a one-axis mesh with a cluster). */
void plan_report(FILE *out, const Module *m, const PlanInfo *pi);
/* What each device of the planned module m needs, as the runtime will
 * allocate it (need[device], by flat mesh index): its blocks of the params,
 * state and buffers, its work arena (the largest of its functions'), the
 * most one of its kernels allocates while it runs (Func.staged_bytes) and
 * what run's extra_memory adds; and, when step is not NULL, the simulator's
 * step, when bytes is not NULL, what device 0 sends in the step's
 * collectives (spmd_step_bytes). From the passes after plan run on a copy of
 * m (its IR text parsed back); false when they fail. */
bool plan_trial(const Module *m, const PassRun *run, double *need, double *step, double *bytes);

/* ---- forms.c ---------------------------------------------------------- */

/* How an op's dimensions map, its sharding rule: for operand k's dimension
 * j, to[k][j] is the result dimension it becomes (a split there carries
 * over, its block lengths times mul/div, which must divide exactly),
 * FORM_WHOLE (it is never split), or FORM_SUM(c) (the op sums over it: the
 * dims of label c, split together over one mesh axis, make the result a
 * partial sum over that axis; nsum labels). A result dimension with
 * res_whole is never split; one no operand dim maps to may be (each device
 * makes its own block, as broadcast does). With linear, partial operands
 * give a partial result: every operand partial over the same axes. An
 * operand dim marked own may keep its split while the result does not see
 * it: each device works on its own block (a row-wise table's rows, which
 * sparse_rows gives as rows of the block); the result then neither splits
 * nor sums over that axis. */
typedef struct DimMap {
  int to[16][IR_MAX_RANK];
  bool own[16][IR_MAX_RANK];
  int64_t mul[16][IR_MAX_RANK], div[16][IR_MAX_RANK];
  bool res_whole[IR_MAX_RANK];
  bool linear;
  int nsum;
} DimMap;
#define FORM_WHOLE (-1)
#define FORM_SUM(c) (-2 - (c))
/* Fills m for inst; false when the op has no form at all (store, output,
 * collectives). One shard_<id> per op of ops.def, and the pieces of an op
 * run in pieces (ir_pieces). */
typedef bool (*ShardRule)(const Inst *inst, DimMap *m);
bool shard_map(const Inst *inst, DimMap *m);

/* ---- sharding.c ------------------------------------------------------- */

/* Chooses the sharding of every value of @train_step and @forward, of the
 * bodies their loops run, and of every global (Inst.shard, Global.shard)
 * when the module has a mesh. A body's shardings are derived on every run
 * (those it had are dropped), so a planner may run it again and again. */
bool pass_sharding(Module *m, Diag *d, PassRun *run);
#define SHARD_MAX_AXIS 1024   /* devices along one mesh axis */
#define SHARD_MAX_IN 1024     /* operands of one op: a repeat's maxin in ir/ops.def */
/* The form of inst that yields result sharding r: what each operand must be
 * (req[k]), given what they are (cur[k]; NULL: not decided). False when no
 * form of the op yields r. A repeat's form is its body's: each operand as
 * its arg reads it (a stacked one behind a whole leading dim, or one split
 * as the loop's pipeline stages are), its result carry 0's; a repeat_out
 * takes its loop as it is (false while the body is open). */
bool shard_form(const Module *m, const Inst *inst, const Sharding *r, const Sharding *const *cur,
                Sharding *req);
/* Whether x is zeros (a const 0, or a broadcast of one), which are a partial
 * sum as they are, in any sharding: a loop's sum may start from them. */
bool shard_zero(const Inst *x);
/* Loop r's pipeline stages: the mesh axis that splits the leading (layer) dim
 * of its stacked operands (cur[k], or r's operands' shardings when cur is
 * NULL; the first split one decides) and its ratios (NULL: even); -1 when
 * none does. Every stacked operand and output of r is then split so. */
int shard_pipe_axis(const Inst *r, const Sharding *const *cur, double **ratio);
/* Same splits (axes and block lengths) and partial axes, for type t. */
bool shard_same(const Module *m, const Type *t, const Sharding *a, const Sharding *b);

/* One collective of a reshard: op over mesh axis `axis` on dimension `dim`
 * (all_to_all: from `dim` to `to`), taking the value from `before` to `after`. */
typedef struct ShardStep {
  Op op;
  int axis, dim, to;
  Sharding before, after;
} ShardStep;
#define SHARD_MAX_STEPS (3 * IR_MAX_MESH_AXES)
/* The collectives that turn a value of global type t sharded by s into r, in
 * order, into st; their count, or -1 when r is a partial sum s is not. */
int shard_plan(const Module *m, const Type *t, const Sharding *s, const Sharding *r,
               ShardStep *st);
/* Bytes each device sends for one step (ring algorithms, blocks taken as even):
 * all_reduce 2(k-1)/k of the block, all_gather (k-1)/k of the gathered
 * block, reduce_scatter and all_to_all (k-1)/k of the block, shard_slice 0. */
double shard_step_bytes(const Module *m, const Type *t, const ShardStep *st);

/* ---- seqflat.c -------------------------------------------------------- */

/* On propagated shardings: each weight gradient x^T @ dy of flattened
 * [.., T, D] values whose split lies behind their first dim, and each
 * cross_entropy of flattened logits and labels so split, rewritten so the
 * split survives (a batched product summed over the batch: a partial sum;
 * the rows flattened from the split dim first). True when it rewrote any:
 * the shardings are then to be derived again. */
bool shard_seq_flatten(Module *m);
/* Whether r is a flattening reshape shard_seq_flatten may rewrite: its
 * operand's split lies behind its first dimension. */
bool shard_seq_flat_split(const Inst *r);

/* ---- zero.c ----------------------------------------------------------- */

/* Under `shard_state = AXIS`: splits each dense param's optimizer state over
 * the axis (Global.shard; an open param made whole) and makes the state its
 * own owner in owner[] (by global: whose sharding it shares); false after
 * located errors. Nothing without the option. */
bool zero_seed(Module *m, Diag *d, int *owner);
/* Under `shard_state`, once f's shardings are decided: an elementwise value
 * that every user (elementwise) takes split one way, along a dim it keeps
 * whole, is computed split so, from the last such value back, so the
 * update of a split state reduce-scatters the gradient instead of
 * all-reducing it and slicing the sum. */
void zero_sink(Module *m, Func *f);

/* ---- spmd.c ----------------------------------------------------------- */

/* Replaces @train_step and @forward, and the bodies their loops run, by
 * per-device copies @F.D (Func.device = D, local shapes, explicit
 * collectives, in bodies too). */
bool pass_spmd(Module *m, Diag *d, PassRun *run);
/* Bytes each device sends for collective c of a per-device function, from its
 * local types (the formulas of shard_step_bytes); 0 for shard_slice; a send's
 * and a bcast's whole operand (what the sender or the root sends); a ring
 * attention's blocks around the ring, as if even. */
double spmd_comm_bytes(const Inst *c);
/* The sharding plan (--emit=plan): every global's sharding and blocks, the
 * pipeline stages, every step's collectives with their source lines (each
 * device's memory is codegen's: cg_memory_report). */
void spmd_report(FILE *out, const Module *m);
/* The bytes device 0 sends in the collectives of a training step (as
 * spmd_report's total for @train_step); 0 without one. */
double spmd_step_bytes(const Module *m);
/* Into buf: the name of the device at mesh position pos (its number
 * without a cluster). */
const char *spmd_device_name(const Module *m, int pos, char *buf, size_t n);

/* ---- spmd_tables.c ---------------------------------------------------- */

/* The operand of op that is an embedding table: 1 for a lookup, 0 for a
 * sparse update; -1 for other ops. */
int spmd_table_operand(Op op);
/* Table operand k of global i, split as cur, needed as req[k] by the form
 * spmd emits: false with a located error at i (unless *failed, then set)
 * when that would gather it; else, for a lookup in a block of rows, device
 * dev's op x given `at` = [R, lo]. */
bool spmd_table_block(Module *m, Diag *d, int dev, const Inst *i, int k, const Sharding *cur,
                      const Sharding *req, Inst *x, bool *failed);
/* The embedding tables the per-device step (or, without one, forward) of
 * position 0 looks up: each one's form and its bytes with its optimizer
 * state on every device. */
void spmd_report_tables(FILE *out, const Module *m, const Func *step, const Func *fwd, int ndev);

/* ---- ring.c ---------------------------------------------------------- */

/* Makes x, spmd's device copy of attention op i (sdpa, sdpa_lse,
 * sdpa_grad), ring attention over the axis that splits i's sequence;
 * false, x untouched, when none does. */
bool ring_lower(const Module *m, const Inst *i, Inst *x);
/* The mesh axis attention op i (sdpa, sdpa_lse, sdpa_grad) splits its
 * sequence over by its sharding, -1 when none. */
int ring_axis(const Inst *i);
/* The most rows of keys a hop of a ring over blocks of lengths len[k]
 * carries: the longest block, or causal the longest pair of the zig-zag's
 * pieces (dtrt_ring_piece). */
int64_t ring_most(const int64_t *len, int k, bool causal);
/* Seconds the transfers of ring attention op `op` (sdpa, sdpa_lse,
 * sdpa_grad, or their ring ops; causal or not) take around the k mesh
 * positions `members`, the most a hop carries of one of its keys' tensors
 * (ring_most) being `block` bytes. */
double ring_time(const Module *m, Op op, bool causal, double block, const int *members, int k);

/* ---- heads.c --------------------------------------------------------- */

/* Under `attention = heads`, device dev's value of attention op i (sdpa,
 * sdpa_lse, sdpa_grad) whose sequence is split, emitted into f from its
 * operands `in` (in i's form): the sequence swapped for the heads, the op,
 * and back; NULL, nothing emitted, when it does not apply. */
Inst *heads_lower(Module *m, Func *f, const Inst *i, Inst **in, int dev);
/* Located errors where `attention = heads` cannot split an attention of
 * fns (heads already split, fewer heads than devices, heads an even split
 * does not divide), a warning when it splits none; false on an error. */
bool heads_check(const Module *m, Diag *d, Func *const *fns, int nf);
/* Drops from device function f the swaps back of head-split attention
 * results that nothing reads (sdpa_lse's rows, which sdpa_grad reads before
 * the swap). */
void heads_prune(Module *m, Func *f);
/* For --emit=plan: each head-split attention's heads and positions on every
 * device of its axis group (device 0's). */
void heads_report(FILE *out, const Module *m);

/* ---- exchange.c ------------------------------------------------------ */

/* DeMo's exchange: each rank's momentum takes its own gradient, and the
 * compressed momenta are all-gathered (the file's header). */
bool pass_exchange(Module *m, Diag *d, PassRun *run);

/* ---- coalesce.c ------------------------------------------------------- */

/* Independent all_to_alls and all_gathers over one axis exchanged as one,
 * reduce_scatters and all_reduces in buckets (the file's header): the pooled
 * embeddings of all tables, the gradients of a step, in one collective. */
bool pass_coalesce(Module *m, Diag *d, PassRun *run);

/* ---- comm.c ----------------------------------------------------------- */

/* Sets `method` on every collective of every per-device function but
 * shard_slice, send and bcast (which have none): the cheapest by comm_time,
 * the lowest number on a tie. */
bool pass_comm(Module *m, Diag *d, PassRun *run);
/* What each instruction of device function f (ids current) reaches through
 * its users, by id: COMM_REACH_LOSS (the training loss's output),
 * COMM_REACH_UPDATE (a store of a param or optimizer state), both or
 * neither. A gradient exchange is a collective that reaches an update only;
 * collectives coalesced alike keep that class (passes/coalesce.c). The
 * result and its work are allocated in a. */
enum { COMM_REACH_LOSS = 1, COMM_REACH_UPDATE = 2 };
unsigned char *comm_reach(Arena *a, const Module *m, Func *f);

/* ---- schedule.c ------------------------------------------------------- */

/* Under schedule 1f1b, each device's step in 1F1B order (see the file). */
bool pass_schedule(Module *m, Diag *d, PassRun *run);
/* Seconds collective c takes by `method` (DTRT_COMM_*) over the k mesh
 * positions `members` (its axis group), by the model documented in comm.c;
 * INFINITY for a method c's kernel does not have or, for hierarchical, a
 * group on one node. A send's cost is between its two members of the group,
 * whatever the method. */
double comm_time(const Module *m, const Inst *c, const int *members, int k, int method);
/* The same for a collective not yet in the IR: op's bytes per member (an
 * all_reduce's whole buffer, an all_to_all's spmd_comm_bytes) or, for an
 * all_gather or reduce_scatter, the bytes of each member's block in b[k]. */
double comm_cost(const Module *m, Op op, double bytes, const double *b, const int *members,
                 int k, int method);
/* The least comm_cost over the methods, its method into *method (may be
 * NULL), the lowest number on a tie. */
double comm_best(const Module *m, Op op, double bytes, const double *b, const int *members,
                 int k, int *method);
/* The method of the least comm_time, the lowest number on a tie. */
int comm_choose(const Module *m, const Inst *c, const int *members, int k);
/* The mesh axes that split some input's first dimension, its batch (bit a
 * for axis a): those a gradient exchange sums over. */
unsigned comm_batch_axes(const Module *m);
/* Seconds of bf16's packing pass over n elements on the slowest of the k
 * members: what a bf16 exchange adds to its halved bytes. */
double comm_pack_time(const Module *m, double n, const int *members, int k);

/* ---- fusion.c --------------------------------------------------------- */

/* Groups elementwise chains into loops (Inst.fuse) and reschedules each
 * function so a group's members are contiguous. */
bool pass_fusion(Module *m, Diag *d, PassRun *run);

/* ---- memplan.c -------------------------------------------------------- */

/* Gives every value that needs memory an offset in its function's work arena
 * (Inst.offset) and sets Func.work_bytes. */
bool pass_memplan(Module *m, Diag *d, PassRun *run);
/* Peak memory and the largest buffers of every function (--emit=plan). */
void memplan_report(FILE *out, const Module *m);
/* ---- sim.c ------------------------------------------------------------ */

/* The step simulator (--emit=sim): one training step of a module after spmd
 * (or of a module without a mesh, on one device: the cluster's first device,
 * or SIM_DEFAULT_GFLOPS without a cluster). Each device walks @train_step.D
 * (@forward.D when there is no training step) in order: an op takes
 * sim_compute_time, a collective waits for its whole axis group, then takes
 * sim_comm_time on every member. Times are in seconds. */
#define SIM_DEFAULT_GFLOPS 50.0  /* a device without a cluster */
#define SIM_BYTE_FLOPS 5.0       /* FLOPs a byte written by elementwise and data movement
                                    ops costs: 10 GB/s at SIM_DEFAULT_GFLOPS */
#define SIM_RUN_FLOPS 170.0      /* FLOPs a contiguous run a copy kernel (slice, pad, concat)
                                    moves costs beyond its bytes (sim.c, copy_runs) */
#define SIM_DEFAULT_BW 10e9      /* bytes/s of a collective when the cluster has no link */
#define SIM_DEFAULT_LAT 10e-6    /* seconds per step of such a collective */

typedef struct SimDev {
  double compute;     /* busy computing */
  double comm;        /* in collectives, from the group's start to the end */
  double idle;        /* step - compute - comm: waiting for the group, or for the step */
  double finish;      /* when its last op ends */
} SimDev;

typedef struct SimResult {
  int ndev;
  SimDev *dev;        /* ndev entries, in the module's arena */
  double step;        /* predicted step time: the latest finish */
  int bottleneck;     /* the device that finishes last (ties: the busier one) */
} SimResult;

/* The predicted step time in seconds, and per device times into r (may be
 * NULL); -1 when the module has no step function for some device or its
 * devices' collectives do not match. Cheap enough for a planner's inner loop:
 * one pass over the per-device functions, memory only for r. */
double sim_step(const Module *m, SimResult *r);
/* sim_step, calling ev (when not NULL) for every op that takes time. */
typedef void (*SimEventFn)(void *user, int device, const Inst *i, bool comm, double start,
                           double dur);
double sim_run(const Module *m, SimResult *r, SimEventFn ev, void *user);
/* Device speed (GFLOP/s) of mesh position `device` (0 without a mesh). */
double sim_gflops(const Module *m, int device);
/* Its elementwise loops' bytes per second: the cluster's bw, else
 * sim_gflops / SIM_BYTE_FLOPS. */
double sim_bw(const Module *m, int device);
/* Seconds every kernel of it takes beyond its work (the cluster's lat, or 0). */
double sim_lat(const Module *m, int device);
/* Seconds a kernel takes for each cache line of a table row it visits at
 * random (Device.row; 0 when not given: such rows cost their bytes alone). */
double sim_row(const Module *m, int device);
/* Seconds of compute op i on `device`: sim_lat, its FLOPs and a per-element
 * cost of kernels built on exponentials or random numbers over sim_gflops
 * (attention's FLOPs over Device.attn of it and Device.score a score where
 * the cluster gives them), and the bytes of its result (and of its operands
 * unless elementwise) over sim_bw; 0 for K_META, K_COMM and reshape (an
 * alias). */
double sim_compute_time(const Module *m, const Inst *i, int device);
/* sim_compute_time of an op of the global step whose values are split over
 * the devices: the seconds that scale with a device's share (its FLOPs and
 * per-element cost when work_split, the bytes of its result when out_split,
 * of operand k when in_split[k]; in_split may be NULL) into *share, the rest
 * into *whole (the planner's cost model, passes/plan.c). */
void sim_compute_parts(const Module *m, const Inst *i, const bool *in_split, bool out_split,
                       bool work_split, int device, double *whole, double *share);
/* Seconds of collective c over the k devices members[]: lat * steps + bytes /
 * bw, steps 2(k-1) for all_reduce and k-1 otherwise, bytes spmd_comm_bytes(c),
 * link `intra` when every member is on one node, else `inter` (either when
 * only one exists; SIM_DEFAULT_* when none). 0 for shard_slice or k < 2.
 * When c carries `method` (passes/comm.c), comm_time of that method; a send
 * and a bcast always comm_time (members: the whole axis group). */
double sim_comm_time(const Module *m, const Inst *c, const int *members, int k);
/* The per-device summary: compute, comm, idle ms, the step, the bottleneck. */
void sim_report(FILE *out, const Module *m, const SimResult *r);
/* sim_step writing a Chrome trace (JSON, viewable in Perfetto): one "X" event
 * per op, ts and dur in microseconds, pid the device, tid 0 compute, 1 comm,
 * named "op file:line". */
double sim_trace_json(FILE *out, const Module *m, SimResult *r);

#endif
