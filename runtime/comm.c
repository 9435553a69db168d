/* comm.c: SPMD over MPI: launch detection and start-up, the mesh and the group
 * of each of its axes, agreement between ranks and sharing of failures, the
 * watchdog that ends a rank whose collective waits too long, and the yield
 * after a collective of a rank that shares its cores. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrt_int.h"

struct DtComm {
  bool mpi;                        /* one rank of an MPI job; else rank 0 of 1 */
  bool owner;                      /* this context started MPI: it finalises it */
  int rank, nranks;
  int local;                       /* the job's ranks on this node, this one included */
  bool crowded;                    /* yields its core after each collective (crowded()) */
  MPI_Comm world;                  /* dtrt's own copy of MPI_COMM_WORLD */
  int naxis;                       /* 0 until dtrt_mesh_init */
  int size[DTRT_MAX_MESH], coord[DTRT_MAX_MESH];
  MPI_Comm axis[DTRT_MAX_MESH];    /* the group of each mesh axis */
  MPI_Datatype bf16;               /* the bf16 wire format's type and sum */
  MPI_Op bf16_sum;                 /* (bf16.c), made at start-up */
  /* the watchdog (dtrt_comm_enter): a thread that wakes every `period` ns */
  double timeout;                  /* seconds; 0: no watchdog */
  bool watching;                   /* its thread runs */
  bool quit;                       /* under mu: the thread must end */
  int depth;                       /* nested dtrt_comm_enter calls */
  _Atomic long long since;         /* when the outermost call began (ns); 0: none */
  _Atomic(const char *) call;      /* its name */
  long long period;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t wake;
};

/* What launchers set in every process they start: a process in which one of
 * these is set (with its companion, if any) is one rank of a job. */
static const struct {
  const char *var, *with, *launcher;
} launch_env[] = {
    {"PMI_RANK", "PMI_SIZE", "MPICH's hydra or Intel MPI"},
    {"PMI_PORT", "PMI_ID", "MPICH's hydra with -pmi-port"},
    {"PMIX_RANK", NULL, "a PMIx launcher (Open MPI 5, srun --mpi=pmix)"},
    {"OMPI_COMM_WORLD_SIZE", NULL, "Open MPI's mpirun"},
    {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
};

static const char *launcher(void) {
  for (size_t k = 0; k < sizeof launch_env / sizeof launch_env[0]; k++)
    if (getenv(launch_env[k].var) && (!launch_env[k].with || getenv(launch_env[k].with)))
      return launch_env[k].launcher;
  return NULL;
}

DtStatus dtrt_mpi(DtrtCtx *ctx, int err, const char *op, const char *call) {
  if (err == MPI_SUCCESS)
    return DT_OK;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  if (MPI_Error_string(err, text, &n) == MPI_SUCCESS && n >= 0 && n < MPI_MAX_ERROR_STRING)
    text[n] = 0;
  else
    snprintf(text, sizeof text, "MPI error code %d", err);
  return dtrt_fail(ctx, DT_ERR_MPI, "%s: %s: %s", op, call, text);
}

static DtComm *comm_of(const DtrtCtx *ctx) {
  return ctx ? *dtrt_ctx_comm((DtrtCtx *)ctx) : NULL;
}

/* ---- the watchdog ------------------------------------------------------ */

/* A TCP connection whose peer is gone, or whose link is cut, keeps a rank
 * waiting in MPI for many minutes (retransmissions) or forever (a receive
 * that no one will send to). So, in a job of several ranks, every call of
 * dtrt that communicates runs between dtrt_comm_enter and dtrt_comm_leave,
 * and a thread of the context checks every `period` that the call it is in
 * has not waited longer than the timeout. When it has, the thread says so
 * on stderr and ends the process with _exit(DTRT_TIMEOUT_EXIT): dtrt asks
 * for MPI_THREAD_FUNNELED, so the thread makes no MPI call (MPI_Abort
 * included), and every launcher ends the job when a rank exits with a
 * failure status before MPI_Finalize. */
enum { DTRT_TIMEOUT_EXIT = 3 };

/* DTRT_COMM_TIMEOUT in seconds, else DTRT_COMM_TIMEOUT_DEFAULT; 0 or less: none. */
static double comm_timeout(void) {
  const char *s = getenv("DTRT_COMM_TIMEOUT");
  char *end;
  double v = s && *s ? strtod(s, &end) : DTRT_COMM_TIMEOUT_DEFAULT;
  if (s && *s && (end == s || *end))
    v = DTRT_COMM_TIMEOUT_DEFAULT;
  return v > 0 ? v : 0;
}

static void *watchdog(void *arg) {
  DtComm *c = arg;
  pthread_mutex_lock(&c->mu);
  while (!c->quit) {
    long long t = dtrt_now_ns() + c->period;
    struct timespec until = {t / 1000000000LL, t % 1000000000LL};
    pthread_cond_timedwait(&c->wake, &c->mu, &until);
    long long since = atomic_load(&c->since);
    if (c->quit || !since || dtrt_now_ns() - since < (long long)(c->timeout * 1e9))
      continue;
    fprintf(stderr,
            "dtrt: rank %d of %d: %s has waited %.0f s for the other ranks "
            "(DTRT_COMM_TIMEOUT=%g): a rank has ended or the network between the ranks has "
            "failed; ending rank %d\n",
            c->rank, c->nranks, atomic_load(&c->call), (double)(dtrt_now_ns() - since) / 1e9,
            c->timeout, c->rank);
    _exit(DTRT_TIMEOUT_EXIT);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* Starts the watchdog of a job of several ranks, unless the timeout is 0. */
static void watch_start(DtComm *c) {
  c->timeout = comm_timeout();
  if (!c->timeout || c->nranks < 2)
    return;
  double p = c->timeout / 4 < 0.1 ? c->timeout / 4 : 0.1;
  c->period = (long long)(p * 1e9);
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr))
    return;
  bool ok = !pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) &&
            !pthread_cond_init(&c->wake, &attr);
  pthread_condattr_destroy(&attr);
  if (!ok)
    return;
  if (pthread_mutex_init(&c->mu, NULL)) {
    pthread_cond_destroy(&c->wake);
    return;
  }
  if (dtrt_thread_create(&c->thread, NULL, watchdog, c)) {
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wake);
    return;
  }
  c->watching = true;
}

static void watch_stop(DtComm *c) {
  if (!c->watching)
    return;
  pthread_mutex_lock(&c->mu);
  c->quit = true;
  pthread_cond_signal(&c->wake);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->wake);
  c->watching = false;
}

void dtrt_comm_enter(DtrtCtx *ctx, const char *call) {
  DtComm *c = ctx ? *dtrt_ctx_comm(ctx) : NULL;
  if (!c || c->depth++ || !c->watching)
    return;
  atomic_store(&c->call, call);
  atomic_store(&c->since, dtrt_now_ns());
}

/* A rank that leaves a collective first and goes on computing keeps the
 * core from the ranks that share it, which still have their part of the
 * collective to do (to pass on a block, to receive one): the others wait
 * for the scheduler to take the core from it, a time slice of milliseconds.
 * A crowded rank yields it once as it leaves. */
void dtrt_comm_leave(DtrtCtx *ctx) {
  DtComm *c = ctx ? *dtrt_ctx_comm(ctx) : NULL;
  if (!c || c->depth == 0 || --c->depth)
    return;
  if (c->watching)
    atomic_store(&c->since, 0);
  if (c->crowded)
    sched_yield();
}

/* ---- start-up and meshes ------------------------------------------------ */

static void free_axes(DtComm *c) {
  for (int k = 0; k < DTRT_MAX_MESH; k++)
    if (c->axis[k] != MPI_COMM_NULL)
      MPI_Comm_free(&c->axis[k]);
  c->naxis = 0;
}

void dtrt_comm_free(DtrtCtx *ctx) {
  DtComm **slot = dtrt_ctx_comm(ctx), *c = *slot;
  if (!c)
    return;
  int ended = 1;
  if (c->mpi)
    MPI_Finalized(&ended);
  watch_stop(c);
  if (!ended) {
    free_axes(c);
    if (c->bf16_sum != MPI_OP_NULL)
      MPI_Op_free(&c->bf16_sum);
    if (c->bf16 != MPI_DATATYPE_NULL)
      MPI_Type_free(&c->bf16);
    if (c->world != MPI_COMM_NULL)
      MPI_Comm_free(&c->world);
    if (c->owner)
      MPI_Finalize();
  }
  *slot = NULL;
  dtrt_free(ctx, c);
}

size_t dtrt_comm_bytes(void) { return sizeof(DtComm); }

/* Whether this rank shares its cores with others of the job: each rank of
 * this node spreads its threads over the CPUs it may run on, and the CPUs
 * this one may run on hold more threads than their number. DTRT_COMM_YIELD=1
 * says yes, 0 no. Collective over the node's ranks. */
static bool crowded(DtrtCtx *ctx, MPI_Comm node) {
  double load[CPU_SETSIZE];   /* by CPU: the threads it holds */
  cpu_set_t set;
  bool known = !sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0;
  double mine = known ? (double)dtrt_threads(ctx) / CPU_COUNT(&set) : 0;
  for (int k = 0; k < CPU_SETSIZE; k++)
    load[k] = known && CPU_ISSET(k, &set) ? mine : 0;
  double held = 0;
  if (MPI_Allreduce(MPI_IN_PLACE, load, CPU_SETSIZE, MPI_DOUBLE, MPI_SUM, node) == MPI_SUCCESS)
    for (int k = 0; known && k < CPU_SETSIZE; k++)
      held += CPU_ISSET(k, &set) ? load[k] : 0;
  const char *e = getenv("DTRT_COMM_YIELD");
  if (e && (!strcmp(e, "0") || !strcmp(e, "1")))
    return *e == '1';
  return known && held > CPU_COUNT(&set) + 1e-6;
}

/* A failure here leaves MPI started but not finalised: a rank that gives up
 * then ends without MPI_Finalize, which makes the launcher end the whole job
 * rather than leave the other ranks waiting in a collective. */
DtStatus dtrt_comm_init(DtrtCtx *ctx) {
  const char *op = "comm_init";
  if (!ctx)
    return DT_ERR_ARG;
  DtComm **slot = dtrt_ctx_comm(ctx);
  if (*slot)
    return DT_OK;
  int started, ended;
  MPI_Initialized(&started);
  MPI_Finalized(&ended);
  if (ended)
    return dtrt_fail(ctx, DT_ERR_MPI,
                     "%s: MPI was finalised in this process (the context that started it was "
                     "freed) and cannot start again",
                     op);
  const char *by = started ? NULL : launcher();
  if (started || by) {   /* a peer that dies mid-message is an error to report, not a
                            SIGPIPE that ends this rank without a word */
    struct sigaction sa;
    if (!sigaction(SIGPIPE, NULL, &sa) && sa.sa_handler == SIG_DFL)
      signal(SIGPIPE, SIG_IGN);
  }
  DtComm *c = dtrt_alloc(ctx, sizeof *c);
  if (!c)
    return DT_ERR_NOMEM;
  *c = (DtComm){.nranks = 1,
                .local = 1,
                .world = MPI_COMM_NULL,
                .bf16 = MPI_DATATYPE_NULL,
                .bf16_sum = MPI_OP_NULL};
  for (int k = 0; k < DTRT_MAX_MESH; k++)
    c->axis[k] = MPI_COMM_NULL;
  if (by) {
    int provided;
    sigset_t old;   /* the threads MPI starts inherit the held signals blocked */
    dtrt_hold_signals(&old);
    int err = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    dtrt_release_signals(&old);
    if (err != MPI_SUCCESS) {
      dtrt_free(ctx, c);
      dtrt_mpi(ctx, err, op, "MPI_Init_thread");
      char why[512];
      snprintf(why, sizeof why, "%s", dtrt_errmsg(ctx));
      return dtrt_fail(ctx, DT_ERR_MPI, "%s (started by %s)", why, by);
    }
    c->owner = true;
  }
  if (started || by) {
    c->mpi = true;
    DtStatus s;
    if ((s = dtrt_mpi(ctx, MPI_Comm_dup(MPI_COMM_WORLD, &c->world), op, "MPI_Comm_dup")) ||
        (s = dtrt_mpi(ctx, MPI_Comm_set_errhandler(c->world, MPI_ERRORS_RETURN), op,
                      "MPI_Comm_set_errhandler")) ||
        (s = dtrt_mpi(ctx, MPI_Comm_rank(c->world, &c->rank), op, "MPI_Comm_rank")) ||
        (s = dtrt_mpi(ctx, MPI_Comm_size(c->world, &c->nranks), op, "MPI_Comm_size")) ||
        (s = dtrt_mpi(ctx, dtrt_bf16_mpi_new(&c->bf16, &c->bf16_sum), op, "MPI_Op_create"))) {
      c->bf16 = MPI_DATATYPE_NULL, c->bf16_sum = MPI_OP_NULL;
      if (c->world != MPI_COMM_NULL)
        MPI_Comm_free(&c->world);
      dtrt_free(ctx, c);
      return s;
    }
    MPI_Comm node;
    if (MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
      MPI_Comm_size(node, &c->local);
      c->crowded = crowded(ctx, node);
      MPI_Comm_free(&node);
    }
    watch_start(c);
  }
  *slot = c;
  return DT_OK;
}

bool dtrt_comm_crowded(const DtrtCtx *ctx) {
  const DtComm *c = comm_of(ctx);
  return c && c->crowded;
}

int dtrt_local_ranks(const DtrtCtx *ctx) {
  const DtComm *c = comm_of(ctx);
  return c ? c->local : 1;
}

int dtrt_rank(const DtrtCtx *ctx) {
  const DtComm *c = comm_of(ctx);
  return c ? c->rank : 0;
}

int dtrt_nranks(const DtrtCtx *ctx) {
  const DtComm *c = comm_of(ctx);
  return c ? c->nranks : 1;
}

int dtrt_mesh_coord(const DtrtCtx *ctx, int axis) {
  const DtComm *c = comm_of(ctx);
  if (!c || !c->naxis)
    return axis == 0 ? dtrt_rank(ctx) : -1;
  return axis >= 0 && axis < c->naxis ? c->coord[axis] : -1;
}

/* "2x3" */
static const char *shape_str(int naxis, const int *size, char *buf, size_t n) {
  size_t k = 0;
  buf[0] = 0;
  for (int i = 0; i < naxis && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%d", i ? "x" : "", size[i]);
  return buf;
}

DtStatus dtrt_mesh_init(DtrtCtx *ctx, int naxis, const int *axis_size) {
  const char *op = "mesh_init";
  if (!ctx)
    return DT_ERR_ARG;
  if (naxis < 1 || naxis > DTRT_MAX_MESH || !axis_size)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: %d axes at %p (1 to %d axes expected)", op, naxis,
                     (const void *)axis_size, DTRT_MAX_MESH);
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return s;
  DtComm *c = comm_of(ctx);
  char shape[96];
  shape_str(naxis, axis_size, shape, sizeof shape);
  int64_t devices = 1;
  for (int k = 0; k < naxis; k++) {
    if (axis_size[k] < 1)
      return dtrt_fail(ctx, DT_ERR_ARG, "%s: axis %d of the %s mesh has size %d", op, k, shape,
                       axis_size[k]);
    if (!dtrt_mul(devices, axis_size[k], &devices))
      devices = INT64_MAX;
  }
  if (devices != c->nranks)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: the %s mesh has %lld devices, the job has %d rank%s",
                     op, shape, (long long)devices, c->nranks, c->nranks == 1 ? "" : "s");
  free_axes(c);
  int stride[DTRT_MAX_MESH], rest = c->rank;
  for (int k = naxis - 1; k >= 0; k--) {
    stride[k] = k == naxis - 1 ? 1 : stride[k + 1] * axis_size[k + 1];
    c->size[k] = axis_size[k];
    c->coord[k] = rest % axis_size[k];
    rest /= axis_size[k];
  }
  /* the group of axis k: the ranks whose coordinates differ only in k, ordered
   * by their coordinate on k */
  dtrt_comm_enter(ctx, op);
  for (int k = 0; c->mpi && k < naxis; k++) {
    int others = c->rank - c->coord[k] * stride[k];
    if ((s = dtrt_mpi(ctx, MPI_Comm_split(c->world, others, c->coord[k], &c->axis[k]), op,
                      "MPI_Comm_split")) ||
        (s = dtrt_mpi(ctx, MPI_Comm_set_errhandler(c->axis[k], MPI_ERRORS_RETURN), op,
                      "MPI_Comm_set_errhandler"))) {
      dtrt_comm_leave(ctx);
      free_axes(c);
      return s;
    }
  }
  dtrt_comm_leave(ctx);
  c->naxis = naxis;
  return DT_OK;
}

DtStatus dtrt_group(DtrtCtx *ctx, const char *op, int64_t axis, DtGroup *g) {
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return s;
  const DtComm *c = comm_of(ctx);
  int naxis = c->naxis ? c->naxis : 1;
  if (axis < 0 || axis >= naxis)
    return dtrt_fail(ctx, DT_ERR_ARG, "%s: mesh axis %lld out of range (the mesh has %d)", op,
                     (long long)axis, naxis);
  int ended = 0;
  if (c->mpi)
    MPI_Finalized(&ended);
  if (ended)
    return dtrt_fail(ctx, DT_ERR_MPI,
                     "%s: MPI was finalised (the context that started it was freed)", op);
  if (c->naxis)
    *g = (DtGroup){c->mpi ? c->axis[axis] : MPI_COMM_NULL, c->size[axis], c->coord[axis], c->bf16,
                   c->bf16_sum};
  else
    *g = (DtGroup){c->world, c->nranks, c->rank, c->bf16, c->bf16_sum};
  return DT_OK;
}

/* Rank 0's value goes to every rank in pieces of PIECE bytes, so that
 * agreement needs no allocation (and cannot fail on one rank alone). */
enum { PIECE = 256, SHOWN = 120 };

static DtStatus comm_agree(DtrtCtx *ctx, const char *what, const char *value) {
  const char *op = "comm_agree";
  if (!ctx)
    return DT_ERR_ARG;
  what = what ? what : "value";
  value = value ? value : "";
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return s;
  const DtComm *c = comm_of(ctx);
  if (!c->mpi || c->nranks == 1)
    return DT_OK;
  long long len = (long long)strlen(value), len0 = len;
  if ((s = dtrt_mpi(ctx, MPI_Bcast(&len0, 1, MPI_LONG_LONG, 0, c->world), op, "MPI_Bcast")))
    return s;
  int differs = len != len0;
  char head0[PIECE + 1] = {0}, head[PIECE + 1] = {0};
  for (long long at = 0; at < len0; at += PIECE) {
    char piece[PIECE];
    int n = len0 - at < PIECE ? (int)(len0 - at) : PIECE;
    if (c->rank == 0)
      memcpy(piece, value + at, (size_t)n);
    if ((s = dtrt_mpi(ctx, MPI_Bcast(piece, n, MPI_CHAR, 0, c->world), op, "MPI_Bcast")))
      return s;
    if (at == 0)
      memcpy(head0, piece, (size_t)n);
    differs = differs || memcmp(piece, value + at, (size_t)n);
  }
  int ndiff, mine = differs ? c->rank : c->nranks, first;
  if ((s = dtrt_mpi(ctx, MPI_Allreduce(&differs, &ndiff, 1, MPI_INT, MPI_SUM, c->world), op,
                    "MPI_Allreduce")))
    return s;
  if (!ndiff)
    return DT_OK;
  if ((s = dtrt_mpi(ctx, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->world), op,
                    "MPI_Allreduce")))
    return s;
  if (c->rank == first)
    memcpy(head, value, (size_t)(len < PIECE ? len : PIECE));
  if ((s = dtrt_mpi(ctx, MPI_Bcast(head, PIECE, MPI_CHAR, first, c->world), op, "MPI_Bcast")))
    return s;
  return dtrt_fail(ctx, DT_ERR_MISMATCH,
                   "%s differs between ranks: rank 0 has \"%.*s%s\", rank %d has \"%.*s%s\" "
                   "(%d of %d ranks differ from rank 0)",
                   what, SHOWN, head0, strlen(head0) > SHOWN ? "..." : "", first, SHOWN, head,
                   strlen(head) > SHOWN ? "..." : "", ndiff, c->nranks);
}

static DtStatus comm_status(DtrtCtx *ctx, DtStatus local) {
  const char *op = "comm_status";
  if (!ctx)
    return DT_ERR_ARG;
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return local ? local : s;
  const DtComm *c = comm_of(ctx);
  if (!c->mpi || c->nranks == 1)
    return local;
  int mine = local ? c->rank : c->nranks, first;
  if ((s = dtrt_mpi(ctx, MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, c->world), op,
                    "MPI_Allreduce")))
    return s;
  if (first == c->nranks)
    return DT_OK;
  int code = (int)local;
  char msg[512] = {0};
  if (c->rank == first)
    snprintf(msg, sizeof msg, "%s", dtrt_errmsg(ctx));
  if ((s = dtrt_mpi(ctx, MPI_Bcast(&code, 1, MPI_INT, first, c->world), op, "MPI_Bcast")) ||
      (s = dtrt_mpi(ctx, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, c->world), op,
                    "MPI_Bcast")))
    return s;
  msg[sizeof msg - 1] = 0;
  if (code <= DT_OK || code > DT_ERR_INTERNAL)
    code = DT_ERR_INTERNAL;
  return dtrt_fail(ctx, (DtStatus)code, "rank %d failed: %s", first,
                   msg[0] ? msg : dtrt_status_name((DtStatus)code));
}

/* agreement and status under the watchdog */
DtStatus dtrt_comm_agree(DtrtCtx *ctx, const char *what, const char *value) {
  if (ctx && !dtrt_comm_init(ctx))
    dtrt_comm_enter(ctx, "comm_agree");
  DtStatus s = comm_agree(ctx, what, value);
  dtrt_comm_leave(ctx);
  return s;
}

DtStatus dtrt_comm_status(DtrtCtx *ctx, DtStatus local) {
  if (ctx && !dtrt_comm_init(ctx))
    dtrt_comm_enter(ctx, "comm_status");
  DtStatus s = comm_status(ctx, local);
  dtrt_comm_leave(ctx);
  return s;
}

/* ---- moving small tables between ranks (checkpoints) ------------------- */

/* The world of a job of several ranks; NULL in a single process (or before
 * dtrt_comm_init). */
static const DtComm *job(const DtrtCtx *ctx) {
  const DtComm *c = comm_of(ctx);
  return c && c->mpi && c->nranks > 1 ? c : NULL;
}

DtStatus dtrt_comm_allgather(DtrtCtx *ctx, const char *op, const void *mine, int n, void *all) {
  const DtComm *c = job(ctx);
  if (!c) {
    if (n > 0)
      memmove(all, mine, (size_t)n);
    return DT_OK;
  }
  dtrt_comm_enter(ctx, op);
  DtStatus s = dtrt_mpi(ctx, MPI_Allgather(mine, n, MPI_BYTE, all, n, MPI_BYTE, c->world), op,
                        "MPI_Allgather");
  dtrt_comm_leave(ctx);
  return s;
}

DtStatus dtrt_comm_allgatherv(DtrtCtx *ctx, const char *op, const void *mine, int n, void **all,
                              int *count) {
  const DtComm *c = job(ctx);
  int np = c ? c->nranks : 1;
  *all = NULL;
  int *cnt = dtrt_alloc(ctx, 2 * (size_t)np * sizeof *cnt), *at = cnt ? cnt + np : NULL;
  if (!cnt)
    return DT_ERR_NOMEM;
  DtStatus s = dtrt_comm_allgather(ctx, op, &n, sizeof n, cnt);
  long long total = 0;
  for (int r = 0; !s && r < np; r++)
    at[r] = (int)total, total += cnt[r];
  if (!s && total > INT32_MAX)
    s = dtrt_fail(ctx, DT_ERR_INTERNAL, "%s: %lld bytes to gather, more than MPI counts", op,
                  total);
  if (!s && !(*all = dtrt_alloc(ctx, (size_t)total + 1)))
    s = DT_ERR_NOMEM;
  if (!s && !c && n > 0)
    memcpy(*all, mine, (size_t)n);
  if (!s && c) {
    dtrt_comm_enter(ctx, op);
    s = dtrt_mpi(ctx, MPI_Allgatherv(mine, n, MPI_BYTE, *all, cnt, at, MPI_BYTE, c->world), op,
                 "MPI_Allgatherv");
    dtrt_comm_leave(ctx);
  }
  if (s) {
    dtrt_free(ctx, *all);
    *all = NULL;
  }
  *count = (int)total;
  dtrt_free(ctx, cnt);
  return s;
}

DtStatus dtrt_comm_bcast(DtrtCtx *ctx, const char *op, void *p, int n, int root) {
  const DtComm *c = job(ctx);
  if (!c)
    return DT_OK;
  dtrt_comm_enter(ctx, op);
  DtStatus s = dtrt_mpi(ctx, MPI_Bcast(p, n, MPI_BYTE, root, c->world), op, "MPI_Bcast");
  dtrt_comm_leave(ctx);
  return s;
}
