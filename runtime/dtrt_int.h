/* dtrt_int.h: what the files of libdtrt share and applications never see.
 * Sections are named after the file that owns them. */
#ifndef DTRT_INT_H
#define DTRT_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <mpi.h>

#include "dtrt.h"

/* ---- tensor.c --------------------------------------------------------- */

/* Largest element count of one tensor: its bytes must fit in int64_t. */
#define DTRT_MAX_ELEMS (INT64_MAX / 8)

/* *r = a * b for a, b >= 0; false on overflow past DTRT_MAX_ELEMS. */
bool dtrt_mul(int64_t a, int64_t b, int64_t *r);
/* Product of dim[0..rank); -1 when a dim is negative or the product too large. */
int64_t dtrt_elems(const int64_t *dim, int rank);
/* Element count of a tensor that passed dtrt_check. */
static inline int64_t dtrt_numel(const DtTensor *t) { return dtrt_elems(t->dim, t->rank); }
const char *dtrt_dtype_name(int dtype);
/* "f32[2,3]" into buf (at least 128 bytes); dtrt_dims_str: "[2,3]". */
const char *dtrt_type_str(int dtype, const int64_t *dim, int rank, char *buf, size_t n);
const char *dtrt_dims_str(const int64_t *dim, int rank, char *buf, size_t n);
/* Checks t is non-null, of dtype (0: f32 or i32), of rank 0..DT_MAX_RANK with
 * sane dims, and has data unless empty. Messages read "OP: WHAT ...". */
DtStatus dtrt_check(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *t,
                    int dtype);
/* dtrt_check plus t's shape against dim[0..rank). */
DtStatus dtrt_check_as(DtrtCtx *ctx, const char *op, const char *what, const DtTensor *t,
                       int dtype, const int64_t *dim, int rank);
/* Common entry of every kernel: in/out non-null, nin in [minin, maxin], attribute
 * counts (a may be NULL: no attributes) in [0, maxi] ints and [0, maxf] floats. */
DtStatus dtrt_kbegin(DtrtCtx *ctx, const char *op, const DtTensor *in, int nin, int minin,
                     int maxin, const DtTensor *out, const DtAttrs *a, int maxi, int maxf);
/* Blocks of larger tensors (DtGlobalDesc, DtBlock): full[0..rank) all zero
 * means whole. dtrt_block sets full and begin to the explicit block. */
bool dtrt_whole(const int64_t *full, int rank);
void dtrt_block(const int64_t *dim, const int64_t *full, const int64_t *begin, int rank,
                int64_t *full_out, int64_t *begin_out);
/* Checks that the block dim[0..rank) at begin lies within full (whole: begin is
 * all zero). Messages read "OP: WHAT ...". */
DtStatus dtrt_check_block(DtrtCtx *ctx, const char *op, const char *what, const int64_t *dim,
                          const int64_t *full, const int64_t *begin, int rank);
/* Normalises a possibly negative axis against rank into *ax. */
DtStatus dtrt_axis(DtrtCtx *ctx, const char *op, int64_t axis, int rank, int *ax);

static inline int64_t dtrt_ai(const DtAttrs *a, int k, int64_t dflt) {
  return a && k < a->ni ? a->i[k] : dflt;
}
static inline double dtrt_af(const DtAttrs *a, int k, double dflt) {
  return a && k < a->nf ? a->f[k] : dflt;
}
static inline int dtrt_ni(const DtAttrs *a) { return a ? a->ni : 0; }
static inline int dtrt_nf(const DtAttrs *a) { return a ? a->nf : 0; }

/* Starts loading the first 256 bytes at x (a table row about to be read or
 * written): kernels that visit rows scattered over a table larger than the
 * caches fetch a few rows ahead, so that the loads overlap. */
static inline void dtrt_prefetch(const void *x, int64_t bytes) {
#if defined(__GNUC__)
  for (int64_t b = 0; b < bytes && b < 256; b += 64)
    __builtin_prefetch((const char *)x + b);
#else
  (void)x, (void)bytes;
#endif
}

/* ---- kernels_nn.c ---------------------------------------------------- */

/* sum over j < n of x[j] y[j], in 8 float partial sums then added in
 * double: a fixed order the compiler vectorises (kernels_nn.c). */
double dtrt_dot_lanes(const float *x, const float *y, int64_t n);

/* A row kernel built twice, for AVX2 and for the baseline, the first the
 * CPU runs chosen when the program loads (GCC's target_clones): its loops
 * vectorise eight lanes wide where the baseline's are four. No multiply
 * and add is fused either way (-std=c17), and the lanes' order of sums is
 * the code's, so both give the same bits. */
#if defined(__x86_64__) && defined(__GNUC__)
#define DTRT_WIDE __attribute__((target_clones("avx2", "default")))
#else
#define DTRT_WIDE
#endif

/* e^c within 2e-7 relative for c in [-87, 88], branch-free so that loops
 * of it vectorise, which calls to expf do not (its callers clamp c and
 * give 0 below -87, so masked entries leave no denormals behind, and NaN
 * for NaN): c = n ln2 + r with |r| <= ln2 / 2 (n rounded by adding 1.5 * 2^23; ln2 in
 * two parts, Cody and Waite), e^r by its Taylor polynomial of degree 7, 2^n
 * added to the exponent bits. */
static inline __attribute__((always_inline)) float dtrt_exp_core(float c) {
  float t = c * 1.44269504088896341f + 12582912.0f;
  float n = t - 12582912.0f;
  int32_t ni;
  memcpy(&ni, &t, sizeof ni);
  ni -= 0x4B400000;
  float r = c - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits;
  memcpy(&bits, &p, sizeof bits);
  bits += (int32_t)((uint32_t)ni << 23);
  memcpy(&p, &bits, sizeof p);
  return p;
}

/* e^x: 0 below -87, NaN for NaN, x clamped at 88 (dtrt_exp_core's range). */
static inline __attribute__((always_inline)) float dtrt_exp_fast(float x) {
  float p = dtrt_exp_core(x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x);
  return x < -87.0f ? 0.0f : x == x ? p : x;
}

/* ---- init.c ----------------------------------------------------------- */

/* Counter-based generator: 64 random bits for (seed, stream, counter), the
 * same on every machine: dtrt_rand_at(dtrt_rand_key(seed, stream), counter).
 * dtrt_rand_at is inline: dropout draws one per element. */
uint64_t dtrt_rand_key(uint64_t seed, uint64_t stream);

/* The splitmix64 finaliser: a bijection on 64 bits with full avalanche. */
static inline uint64_t dtrt_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static inline uint64_t dtrt_rand_at(uint64_t key, uint64_t counter) {
  return dtrt_mix(key + (counter + 1) * 0x9e3779b97f4a7c15u);
}

/* ---- safetensors.c ---------------------------------------------------- */

/* The largest header read (the limit of the safetensors reference reader);
 * the hex digits of a "crc32:" checksum; the suffix of a temporary file. */
#define DTRT_ST_MAX_HEADER (100 << 20)
#define DTRT_ST_DIGITS 8
#define DTRT_ST_TMP ".tmp.XXXXXX"

struct cJSON;

/* A tensor of a safetensors file: its name, dtype, dims and bytes [begin,
 * end) of the data section. The rest is its readers' and writers' own. */
typedef struct DtStEntry {
  const char *name;
  int dtype, rank;
  int64_t dim[DT_MAX_RANK];
  int64_t begin, end;
  bool block;                    /* tensor_file.c: a block of the tensor of */
  int64_t full[DT_MAX_RANK];     /* shape full, from start on */
  int64_t start[DT_MAX_RANK];
  int kind;                      /* model_ckpt.c: DtGlobalKind, -1: not known */
  int local;                     /* model_ckpt.c: the caller's tensor, -1: none */
} DtStEntry;

/* A file's header as read: text (hl bytes from byte 8 on, NUL after), its
 * JSON, its tensors, its __metadata__ (NULL: none). Free with
 * dtrt_st_header_free. */
typedef struct DtStHeader {
  char *text;
  int64_t hl, datalen;
  struct cJSON *root;
  DtStEntry *e;
  int ne;
  const struct cJSON *meta;
} DtStHeader;

/* Reads the header of the file fd (size bytes) into h: the length, the JSON
 * object and nothing after it, each tensor entry (dtype F32 or I32, rank,
 * shape, offsets within the data section and matching the shape), one
 * __metadata__. model: a model checkpoint's messages for a malformed entry
 * or __metadata__, else a named-tensor file's (which takes any __metadata__
 * here). Messages read "load: PATH...". */
DtStatus dtrt_st_read_header(DtrtCtx *ctx, const char *path, int fd, int64_t size, bool model,
                             DtStHeader *h);
/* Sorts h's entries in data order and checks they cover the data section
 * without hole or overlap (more: added to the message of a short cover). */
DtStatus dtrt_st_check_layout(DtrtCtx *ctx, const char *path, DtStHeader *h, const char *more);
/* Sorts h's entries by name and checks no name appears twice. */
DtStatus dtrt_st_check_names(DtrtCtx *ctx, const char *path, DtStHeader *h);
void dtrt_st_header_free(DtrtCtx *ctx, DtStHeader *h);
/* qsort orders of entries: by name; in data order (empty ones by name). */
int dtrt_st_by_name(const void *a, const void *b);
int dtrt_st_by_begin(const void *a, const void *b);
/* The entry named name among e[0..n) sorted by name, or NULL. */
DtStEntry *dtrt_st_find(const DtStEntry *e, int n, const char *name);
/* Strict decimal int64 (a sign allowed, nothing after); "crc32:" and
 * exactly 8 lowercase hex digits. */
bool dtrt_st_parse_i64(const char *s, int64_t *v);
bool dtrt_st_parse_crc(const char *s, unsigned long *v);
/* zlib's CRC-32 of n bytes at p continuing crc (0 to start); p may be NULL
 * when n is 0. */
unsigned long dtrt_st_crc(unsigned long crc, const void *p, int64_t n);
/* A JSON number that is a whole number in [0, 2^53]; an array of rank of them. */
bool dtrt_json_whole(const struct cJSON *j, int64_t *v);
bool dtrt_json_dims(const struct cJSON *j, int rank, int64_t *v);
/* A header's JSON object with an empty __metadata__ (*meta); NULL on no
 * memory. */
struct cJSON *dtrt_st_new_header(struct cJSON **meta);
/* Adds tensor e (dtype, shape, data_offsets) to the header root. */
bool dtrt_st_add_entry(struct cJSON *root, const DtStEntry *e);
/* The bytes of the file before the data: the length, json, spaces to a
 * multiple of 8; *size of them. NULL on no memory. */
char *dtrt_st_frame(DtrtCtx *ctx, const char *json, int64_t *size);

/* Positioned I/O of n bytes at off: 0, or -1 with errno set; a read gives
 * -2 at the end of the file. */
int dtrt_st_pread(int fd, void *p, int64_t n, int64_t off);
int dtrt_st_pwrite(int fd, const void *p, int64_t n, int64_t off);
/* Opens path for a load (dtrt_open_input); a failure is the message
 * "load: PATH is not a regular file", "... more than the read limit" or
 * "load: cannot open PATH". */
DtStatus dtrt_st_open(DtrtCtx *ctx, const char *path, int *fd, int64_t *size);
/* PATH.tmp.XXXXXX for mkstemp (free with dtrt_free); NULL on no memory. */
char *dtrt_st_tmp_name(DtrtCtx *ctx, const char *path);
/* Starts an atomic save of path: removes the temporary files of path that
 * saves killed before their end left (unlocked regular files of this user
 * named PATH.tmp.XXXXXX), then creates tmp (from dtrt_st_tmp_name, its
 * XXXXXX replaced), mode 0644, locked until the save ends. Returns its
 * descriptor, and in *lock a second one that holds the lock after the first
 * is closed, for dtrt_st_replace (or for closing after unlink(tmp)); -1
 * with errno on failure. */
int dtrt_st_create_tmp(DtrtCtx *ctx, const char *path, char *tmp, int *lock);
/* Ends an atomic save: renames the written and synced tmp over path if path
 * is still a regular file or nothing, then syncs the directory; on a failure
 * before the rename tmp is removed. Closes lock (dtrt_st_create_tmp's)
 * after the rename or the removal. Messages read "save: ...". */
DtStatus dtrt_st_replace(DtrtCtx *ctx, const char *tmp, const char *path, int lock);
/* fsync of the directory holding path; -1 with errno on failure. */
int dtrt_sync_dir(DtrtCtx *ctx, const char *path);
/* Whether libdtrt may write the file path names: only a regular file or
 * nothing (then it is created). Anything else (a device, a directory, a FIFO)
 * is DT_ERR_IO with "OP: PATH is not a regular file; not writing it", and so
 * is a path that cannot be looked up; nothing is created. */
DtStatus dtrt_check_output(DtrtCtx *ctx, const char *op, const char *path);
/* Opens path for reading if it is a regular file of at most the context's
 * read limit, without blocking (as a FIFO would) and with O_NONBLOCK cleared
 * again; *size is its size. -1 with errno set otherwise: EINVAL when it is not
 * a regular file, EFBIG when it is larger than the limit. */
int dtrt_open_input(const DtrtCtx *ctx, const char *path, int64_t *size);

/* ---- tensor_file.c ---------------------------------------------------- */

/* Where a file's tensor lies in a larger tensor: from begin on in every
 * dim of the tensor of shape full; full all zero: it is whole. */
typedef struct DtBlock {
  int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
} DtBlock;

/* dtrt_save and dtrt_load of tensors t[k] that are blocks b[k] (b NULL: all
 * whole). A block is recorded as the metadata key "block:NAME" valued
 * {"full":[..],"begin":[..]} (JSON text), and loads only into the same block
 * (a tensor without the key being whole). */
DtStatus dtrt_save_blocks(DtrtCtx *ctx, const char *path, const DtNamed *t, const DtBlock *b,
                          int n, const char *model_hash, int64_t step);
DtStatus dtrt_load_blocks(DtrtCtx *ctx, const char *path, DtNamed *t, const DtBlock *b, int n,
                          const char *model_hash, int64_t *step);

/* ---- model_ckpt.c ----------------------------------------------------- */

/* Calls fn(arg, whole, local, n) for each run of elements contiguous both in
 * the block dim[0..r) at begin and in the whole tensor of dims full: its
 * first element's index in the whole tensor and in the block, its length.
 * Stops at fn's first non-zero return, which it returns. */
typedef int (*DtRunFn)(void *arg, int64_t whole, int64_t local, int64_t n);
int dtrt_for_runs(const int64_t *full, const int64_t *begin, const int64_t *dim, int r,
                  DtRunFn fn, void *arg);
/* A checkpoint's model_hash (params false) or params_hash of the entries
 * e[0..n), sorted by name, with their kinds: "" when params and a kind is
 * not known. */
void dtrt_ckpt_hash(const DtStEntry *e, int n, bool params, char out[17]);
/* dtrt_ckpt_load, and *old (may be NULL) set when path is a safetensors file
 * of the per-rank format (no "format" in its metadata; DT_ERR_FORMAT). */
DtStatus dtrt_ckpt_load_as(DtrtCtx *ctx, const char *path, DtCkptTensor *t, int n,
                           bool params_only, int64_t *step, bool *old);

/* ---- ctx.c ------------------------------------------------------------ */

typedef struct DtComm DtComm;
typedef struct DtTrace DtTrace;
typedef struct DtPool DtPool;

/* The context's scratch blocks: the generated GEMM's (dtrt_scratch), and a
 * kernel's that calls the GEMM while it holds its own (a convolution's
 * im2col columns). */
enum { DTRT_SCRATCH_GEMM, DTRT_SCRATCH_KERNEL, DTRT_SCRATCH_COUNT };

typedef struct DtDct DtDct;

struct DtrtCtx {
  DtAllocator a;
  char err[512];
  DtComm *comm;
  DtTrace *trace;   /* NULL unless DTRT_TRACE was set when the model was made */
  DtPool *pool;     /* dtrt_parallel_for's threads; NULL: none (yet) */
  bool pool_tried;  /* the pool was made, or found not to be needed */
  bool blas_called; /* OpenBLAS ran here: its threads spin after a call, so
                       the pool's must not watch beside them */
  void *scratch[DTRT_SCRATCH_COUNT];   /* dtrt_scratch_of's blocks; NULL: none yet */
  size_t scratch_bytes[DTRT_SCRATCH_COUNT];
  int64_t read_limit;   /* dtrt_ctx_set_read_limit; 0: DTRT_READ_LIMIT */
  double lr;            /* dtrt_model_set_lr's, when lr_set */
  bool lr_set;
  DtDct *dct;           /* DeMo's DCT matrices by size (kernels_demo.c); NULL: none yet */
  int64_t bytes;        /* held in dtrt_alloc's blocks now (their sizes as asked) */
  int64_t peak_bytes;   /* the most held at once */
};

/* The context's read limit (dtrt_ctx_set_read_limit). */
static inline int64_t dtrt_read_limit(const DtrtCtx *ctx) {
  return ctx->read_limit > 0 ? ctx->read_limit : DTRT_READ_LIMIT;
}

/* dtrt_alloc without the clearing, for a block that is written whole before
 * it is read. */
void *dtrt_alloc_raw(DtrtCtx *ctx, size_t n);

/* The ranks of the context's job on this node, this one included: 1 in a
 * single process or before dtrt_comm_init. */
int dtrt_local_ranks(const DtrtCtx *ctx);
/* This rank shares its cores with others of the job, and yields its core
 * after each collective (comm.c, crowded; DTRT_COMM_YIELD). */
bool dtrt_comm_crowded(const DtrtCtx *ctx);

/* The context's communication state: NULL until dtrt_comm_init. */
DtComm **dtrt_ctx_comm(DtrtCtx *ctx);
/* Whether the CPU runs AVX-512F, for the kernels that have such a path. */
bool dtrt_avx512(void);
/* The bytes of that state (comm.c). */
size_t dtrt_comm_bytes(void);

/* ---- parallel.c ------------------------------------------------------- */

/* Joins the context's pool and releases it and the scratch blocks
 * (dtrt_ctx_free). */
void dtrt_pool_free(DtrtCtx *ctx);
/* dtrt_scratch for scratch block `which` (DTRT_SCRATCH_*). */
void *dtrt_scratch_of(DtrtCtx *ctx, int which, size_t n);
/* The signals that end a job and that a save holds off: SIGHUP, SIGINT,
 * SIGTERM (docs/RUNTIME.md, "Threads"). The runtime's own threads never
 * take them. */
void dtrt_held_signals(sigset_t *set);
/* Blocks the held signals in the calling thread; *old is its mask before,
 * for dtrt_release_signals, which restores it (a held signal that came
 * meanwhile then acts as the application has it act). */
void dtrt_hold_signals(sigset_t *old);
void dtrt_release_signals(const sigset_t *old);
/* dtrt_hold_signals for a save, and while any save runs a held signal
 * whose action is the default taken by a thread that does not block it (one
 * the runtime did not start) is noted instead of ending the process; the
 * last save's dtrt_undefer_signals restores the default and sends the
 * signals noted to the process again. */
void dtrt_defer_signals(sigset_t *old);
void dtrt_undefer_signals(const sigset_t *old);
/* pthread_create of a thread that starts with the held signals blocked. */
int dtrt_thread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *),
                       void *arg);

/* ---- comm.c ----------------------------------------------------------- */

/* The group of ranks along one mesh axis, as the collective kernels see it. */
typedef struct DtGroup {
  MPI_Comm comm;   /* MPI_COMM_NULL in a single process */
  int size, me;    /* me: this rank's index in the group (its coordinate) */
  MPI_Datatype bf16; /* one bf16 value, and the sum of them (bf16.c); */
  MPI_Op bf16_sum;   /* MPI_DATATYPE_NULL, MPI_OP_NULL in a single process */
} DtGroup;

/* The group of mesh axis `axis`, joining the job first if need be. */
DtStatus dtrt_group(DtrtCtx *ctx, const char *op, int64_t axis, DtGroup *g);
/* DT_OK if err is MPI_SUCCESS, else DT_ERR_MPI with "OP: CALL: <MPI's text>". */
DtStatus dtrt_mpi(DtrtCtx *ctx, int err, const char *op, const char *call);
/* Releases the communication state (dtrt_ctx_free): the communicators, and MPI
 * itself if this context initialised it. */
void dtrt_comm_free(DtrtCtx *ctx);
/* The watchdog of a job of several ranks: a call that communicates runs
 * between enter and leave (nested pairs count once), and when it waits longer
 * than DTRT_COMM_TIMEOUT seconds (default DTRT_COMM_TIMEOUT_DEFAULT; 0: no
 * watchdog) a thread of the context says so on stderr, naming CALL, and ends
 * the process. Both are no-ops in a single process and on a NULL ctx. */
enum { DTRT_COMM_TIMEOUT_DEFAULT = 300 };
void dtrt_comm_enter(DtrtCtx *ctx, const char *call);
void dtrt_comm_leave(DtrtCtx *ctx);
/* (collective, over every rank of the job; plain copies in a single process)
 * Small tables between ranks, under the watchdog, named OP in messages.
 * allgather: n bytes of every rank into all (nranks * n, in rank order).
 * allgatherv: every rank's n bytes (n may differ) into *all, allocated (free
 * with dtrt_free; *count bytes in all). bcast: root's n bytes at p to all. */
DtStatus dtrt_comm_allgather(DtrtCtx *ctx, const char *op, const void *mine, int n, void *all);
DtStatus dtrt_comm_allgatherv(DtrtCtx *ctx, const char *op, const void *mine, int n, void **all,
                              int *count);
DtStatus dtrt_comm_bcast(DtrtCtx *ctx, const char *op, void *p, int n, int root);

/* ---- bf16.c ------------------------------------------------------------ */

/* n values rounded to bf16 (dtrt_bf16_from_f32), and back. */
void dtrt_bf16_pack(const float *x, uint16_t *h, int64_t n);
void dtrt_bf16_unpack(const uint16_t *h, float *x, int64_t n);
/* Makes the MPI datatype of one bf16 (2 bytes) and the MPI_Op summing them
 * (unpack, add in f32, round to nearest-even); an MPI error code, nothing
 * made on failure. Free both with MPI_Type_free and MPI_Op_free. */
int dtrt_bf16_mpi_new(MPI_Datatype *type, MPI_Op *sum);

/* ---- kernels_attn.c: one step of ring attention (kernels_ring.c) ------ */

/* Queries q [B, H, tq, D] (positions qoff ..) against keys k and v [B, H,
 * tk, D] (positions koff ..) of one block of the sequence. Forward: m, l
 * [B H tq], the rows' running maximum and sum, and acc [B H tq D], their
 * unnormalised output, move on by the block (acc NULL: the log-sum-exp's
 * m and l only). Backward (dout set, with o and lse, whole rows): dq (in
 * [B, 3, H, tq, D], sdpa_grad's stacked layout), dk and dv ([B, H, tk,
 * D]; g) get the block's parts added. whole
 * and at: the whole [B, H, Tq, Tk] and this block's place, for dropout of
 * p under seed at step (dtrt_k_sdpa's). */
typedef struct DtAttnStep {
  const float *q, *k, *v, *o, *lse, *dout;
  int64_t b, h, tq, tk, d, qoff, koff;
  bool causal;
  float scale;
  double p;
  int64_t seed, step;
  float *m, *l, *acc, *g[3];
  int64_t whole[4], at[4];
  const void *mask;     /* NULL, or f32 added (i32 kept where nonzero) along [B, H, tq, the whole
                           sequence] by strides ms (0 where broadcast), key koff + j at column
                           koff + j */
  bool mask_i32;
  int64_t ms[4];
} DtAttnStep;
DtStatus dtrt_attn_step(DtrtCtx *ctx, const char *op, const DtAttnStep *st);
/* Checks mask m, broadcast (right-aligned) to full ([B, H, Tq, Tk]): f32 or
 * i32, each dim 1 or whole; its strides along full (0 where broadcast) into ms. */
DtStatus dtrt_attn_mask(DtrtCtx *ctx, const char *op, const DtTensor *m, const int64_t full[4],
                        int64_t ms[4]);

/* ---- kernels: dtrt_staged_bytes by kernel file (names.c dispatches) ---- */

int64_t dtrt_comm_staged(DtStaged k, const DtTensor *in, const DtTensor *out, const DtAttrs *a,
                         int p);                                               /* kernels_comm.c */
int64_t dtrt_reduce_staged(DtStaged k, const DtTensor *in, int nin, const DtTensor *out);
                                                                               /* kernels_reduce.c */
int64_t dtrt_nn_staged(const DtTensor *in, int nin);                           /* kernels_nn.c */
int64_t dtrt_bag_staged(const DtTensor *in, int nin, const DtAttrs *a);       /* kernels_bag.c */
int64_t dtrt_demo_staged(const DtTensor *in, int nin, const DtTensor *out,
                         const DtAttrs *a);                                     /* kernels_demo.c */
int64_t dtrt_sparse_staged(const DtTensor *in, int nin, bool values);         /* kernels_sparse.c */

/* ---- kernels_demo.c ---------------------------------------------------- */

/* The orthonormal DCT-II matrix of size n (d[k n + j]) the DeMo kernels use,
 * the context's cached copy, made at the first call for n; NULL on no
 * memory or n < 1. Freed by dtrt_demo_free (dtrt_ctx_free). */
const double *dtrt_demo_dct(DtrtCtx *ctx, int64_t n);
void dtrt_demo_free(DtrtCtx *ctx);
int64_t dtrt_ring_staged(const DtTensor *in, int nin, const DtTensor *out, const DtAttrs *a,
                         int p);                                                /* kernels_ring.c */

/* ---- trace.c ---------------------------------------------------------- */

/* The measured timeline (DTRT_TRACE=FILE): spans of kernels (tid 0), of
 * collectives (tid 1) and of whole steps (tid 2), written as a Chrome trace at
 * dtrt_model_destroy. */
enum { DTRT_TID_KERNEL, DTRT_TID_COMM, DTRT_TID_STEP };

/* Starts tracing into the file named by DTRT_TRACE, if set (FILE.rankR when
 * the job has several ranks); DT_OK and nothing when it is not. */
DtStatus dtrt_trace_open(DtrtCtx *ctx);
/* Writes the trace (a failure is reported on stderr) and stops tracing. */
void dtrt_trace_close(DtrtCtx *ctx);
/* Seconds on a monotonic clock. */
double dtrt_trace_clock(void);
/* Records span [t0, t1] of name (a string that outlives the trace) on tid. */
void dtrt_trace_add(DtrtCtx *ctx, const char *name, int tid, double t0, double t1);
/* Records the model's memory (dtrt_model_memory), written as a counter
 * "memory" at the end of the trace. */
void dtrt_trace_memory(DtrtCtx *ctx, int64_t peak_bytes, int64_t rss_growth);
/* Runs kernel fn and records its span. */
DtStatus dtrt_trace_kernel(DtrtCtx *ctx, const char *name, int tid, DtKernelFn fn,
                           const DtTensor *in, int nin, DtTensor *out, const DtAttrs *a);

/* Defines kernel dtrt_k_NAME with the body that follows as k_NAME: when the
 * context traces, the call goes through dtrt_trace_kernel; otherwise the cost
 * is one predictable branch. A collective (tid DTRT_TID_COMM) runs under the
 * watchdog (dtrt_comm_enter). DTRT_TRACED_AS names the span and the
 * watchdog's call label instead of NAME (a kernel that is another's with a
 * further output). */
#define DTRT_TRACED(name, tid) DTRT_TRACED_AS(name, #name, tid)
#define DTRT_TRACED_AS(name, label, tid) \
  static DtStatus k_##name(DtrtCtx *ctx, const DtTensor *in, int nin, DtTensor *out, \
                           const DtAttrs *a); \
  DTRT_KERNEL(name) { \
    if (tid == DTRT_TID_COMM) \
      dtrt_comm_enter(ctx, label); \
    DtStatus s_ = __builtin_expect(ctx != NULL && ctx->trace != NULL, 0) \
                      ? dtrt_trace_kernel(ctx, label, tid, k_##name, in, nin, out, a) \
                      : k_##name(ctx, in, nin, out, a); \
    if (tid == DTRT_TID_COMM) \
      dtrt_comm_leave(ctx); \
    return s_; \
  } \
  static DtStatus k_##name(DtrtCtx *ctx, const DtTensor *in, int nin, DtTensor *out, \
                           const DtAttrs *a)

#endif
