/* plan_int.h: the planner's two halves, for plan.c (the layout families, the
 * search and the choice) and plan_cost.c (the estimate of one choice). Not
 * for other passes: passes.h has the planner's interface. */
#ifndef DTC_PLAN_INT_H
#define DTC_PLAN_INT_H

#include "ir.h"
#include "passes.h"

/* Ratios are written in millionths, so their %g text parses back exactly and
 * sums to 1. */
#define RATIO_UNITS 1000000
/* A set of mesh axes (bit x: axis x): the axes a share of work or memory is
 * split over. Mask 0 is what every device does or holds whole. */
#define NMASK (1 << IR_MAX_MESH_AXES)
static_assert(NMASK <= 32, "a segment's masks in one word (Est.used)");

/* The estimate of one choice of forms (propagated): per segment (the work
 * between two collectives, every device waiting at the collective), each
 * device class's seconds by the axes they are split over; the collectives'
 * seconds; each memory point's bytes by the axes they are split over. */
/* Seconds of segment seg that only the devices at index i of axis x spend
 * (a table placed there whole), scaling with the ratios of the axes in M. */
typedef struct Placed {
  int seg, x, i;
  unsigned M;
  double *t;        /* [nclass] */
} Placed;

typedef struct Est {
  int nseg;
  double *t;        /* [nseg][NMASK][nclass]: t[s][M][q] seconds that scale with the
                       product of the ratios of the axes in M (M = 0: whole) */
  double *w;        /* [nseg] the weight of the slowest device: 1, or (M - 1) / M in a
                       pipeline's loop over M micro-batches, whose other 1 / M is the
                       slowest device of each stage in turn */
  int *pipe;        /* [nseg] that loop's stage axis; -1: none */
  double comm;      /* seconds of collectives */
  int ncoll;
  int nmem;
  double *mem;      /* [nmem][NMASK] bytes at each memory point */
  int64_t min_len[IR_MAX_MESH_AXES];  /* the shortest dimension split over each axis; 0: none */
  int64_t layers;   /* a pipeline's layers: its loop's trip count; 0: none */
  int pipe_axis;    /* its stage axis; -1: none */
  int ring;         /* an axis some attention's sequence is split over, as a ring; -1 */
  int heads_axis;   /* ... as heads (attention = heads); -1: none */
  int64_t heads;    /* those attentions' heads (the fewest) */
  bool heads_taken; /* ... some of them split over another axis already */
  const uint32_t *used;  /* [nseg] the masks a segment's times use (bit M) */
  int nplaced;
  const Placed *placed;
  const double *placed_mem;  /* [ndev] bytes of globals placed whole on each device */
} Est;

typedef struct Planner {
  Module *m;
  Func *step;
  const Mesh *mesh;
  int ndev, naxis;
  int size[IR_MAX_MESH_AXES];
  int *coord;                   /* [ndev][IR_MAX_MESH_AXES] */
  int nclass;
  int *cls;                     /* [ndev] device -> its class (equal speed and memory) */
  int *rep;                     /* [nclass] class -> its first device */
  Sharding **user;              /* by global: the parallel block's sharding */
  int *var, nvar;               /* the globals whose forms the search chooses */
  bool *stacked;                /* by global: a stacked operand of a loop of the step */
  bool *table;                  /* by global: the table of an embedding bag of the step */
  int mb;                       /* micro-batches a pipeline's loop runs in */
  int state, user_state;        /* the axis the optimizer state is split over (passes/zero.c)
                                   in the forms evaluated, and in the parallel block's; -1: none */
  unsigned placed_axes;         /* the axes some table is placed whole over (Placed) */
  bool user_heads, heads_open;  /* the block's `attention = heads`; whether it leaves that open */
  int user_wire;                /* the block's exchange format (Module.exchange) ... */
  bool exchange_open;           /* ... and whether it leaves it to the planner (exchange = auto) */
  const unsigned char *reach;   /* by id: what the step's values reach (comm_reach); NULL: no
                                   training step */
  const Inst *remat;            /* a forward loop of the step the estimate counts as
                                   recomputing its forward in the backward; NULL: none */
  VEC(double) t, w, mem;
  VEC(Placed) placed;
  VEC(uint32_t) used;
  double *placed_mem;           /* [ndev] */
  VEC(int) pipe;
  VEC(Sharding) memo;           /* reshards costed in this walk ... */
  VEC(const Inst *) memo_x;     /* ... and of which value */
  /* one-axis meshes: earlier plans' memory plans bound the ratios of the
   * forms they had (Trial), and the model's shortfall on each device */
  struct Trial *trial;          /* [room] */
  int ntrial, room;
  double *under;                /* [ndev] >= 1 */
  int evals;
  bool propagated;              /* the last plan_evaluate's forms propagated */
  Diag quiet;
} Planner;

typedef struct Trial {
  const Sharding **forms;
  double *cap;                  /* [ndev] the largest ratio; 1: no bound */
} Trial;

/* Ratios per axis: R[x][i] for index i of axis x, each axis's summing to 1. */
typedef double *Ratios[IR_MAX_MESH_AXES];

/* A planner for m's mesh 0 (any number of axes); false when m cannot be
 * planned (no cluster or mesh, no step, too many devices). */
bool plan_init(Planner *p, Module *m);
/* Globals take forms A (NULL: open) and the step's shardings are cleared. */
void plan_apply(Planner *p, Sharding **A);
/* Device d's share of what is split over the axes in mask, under R. */
double plan_share(const Planner *p, int d, unsigned mask, const Ratios R);
/* Forms A propagated and estimated into e: the predicted step with the
 * linear programs' ratios (into R, allocated), or even ones; INFINITY when
 * the forms do not propagate or no ratios fit in memory. */
double plan_evaluate(Planner *p, Sharding **A, bool even, Ratios R, Est *e);
/* The step e predicts with ratios R; each device's busy seconds into busy
 * (may be NULL). */
double plan_step(const Planner *p, const Est *e, const Ratios R, double *busy);
/* Device d's bytes at the fullest memory point of e under R. */
double plan_memory(const Planner *p, const Est *e, const Ratios R, int d);
/* The bounds of axis x's ratios under the other axes' R: at least *lo (one
 * element of the shortest split each), at most hi[i] (what memory holds). */
void plan_bounds(const Planner *p, const Est *e, const Ratios R, int x, double *lo, double *hi);
/* Axis x's ratios r rounded to millionths within hi (a pipeline's axis to
 * whole layers first); NULL when even. */
double *plan_round(Planner *p, const Est *e, int x, const double *r, const double *hi);

#endif
