/* model.c: a model compiled by dtc at run time: its state and work blocks,
 * initialisation, checked training and inference steps, and checkpoints of its
 * params and state; for SPMD models, joining the job and sharing failures.
 * Each model owns its context. */
#include <float.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dtrt_int.h"

struct DtModel {
  const DtModelDesc *d;
  DtrtCtx *ctx;
  unsigned char *state, *work;
  int64_t step;
  uint64_t seed;     /* of the initialisers, for state set fresh again */
  const void **in;   /* the step's inputs: this rank's rows (input_rows) */
  int64_t rss0;      /* the process's peak resident set before the blocks, -1: unknown */
  DtModelDesc *own;  /* d with its blocks written in (DtModelDesc.blocks), or NULL */
};

/* The process's peak resident set in bytes (getrusage), -1 if unknown. */
static int64_t peak_rss(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) ? -1 : (int64_t)u.ru_maxrss * 1024;
}

static bool stored(const DtGlobalDesc *g) { return g->kind == DT_G_PARAM || g->kind == DT_G_STATE; }

/* Checks a list of global indices that must all be of kind. */
static DtStatus check_list(DtrtCtx *ctx, const DtModelDesc *d, const char *what, int n,
                           const int32_t *idx, int kind) {
  if (n < 0 || (n > 0 && !idx))
    return dtrt_fail(ctx, DT_ERR_ARG, "model %s: %d %s at %p", d->name, n, what,
                     (const void *)idx);
  for (int k = 0; k < n; k++)
    if (idx[k] < 0 || idx[k] >= d->nglobal || d->global[idx[k]].kind != kind)
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: %s %d is global %d, not an %s", d->name, what,
                       k, (int)idx[k], kind == DT_G_INPUT ? "input" : "output");
  return DT_OK;
}

static DtStatus check_desc(DtrtCtx *ctx, const DtModelDesc *d) {
  if (!d->name || !d->hash)
    return dtrt_fail(ctx, DT_ERR_ARG, "model: description lacks a name or hash");
  if (d->nglobal < 0 || (d->nglobal > 0 && !d->global) || d->state_bytes < 0 ||
      d->work_bytes < 0)
    return dtrt_fail(ctx, DT_ERR_ARG, "model %s: bad global table or block sizes", d->name);
  if (d->denormals < 0 || d->denormals >= DT_DENORMALS_COUNT)
    return dtrt_fail(ctx, DT_ERR_ARG, "model %s: denormal mode %d (0 to %d)", d->name,
                     (int)d->denormals, DT_DENORMALS_COUNT - 1);
  for (int k = 0; k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!g->name || !g->name[0])
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: global %d has no name", d->name, k);
    if (g->kind < DT_G_INPUT || g->kind > DT_G_OUTPUT)
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: global '%s' has kind %d", d->name, g->name,
                       (int)g->kind);
    char any;
    DtTensor t = {.data = &any, .dtype = g->dtype, .rank = g->rank};
    if (g->rank >= 0 && g->rank <= DT_MAX_RANK)
      memcpy(t.dim, g->dim, (size_t)g->rank * sizeof *t.dim);
    DtStatus s = dtrt_check(ctx, d->name, g->name, &t, 0);
    if (!s)
      s = dtrt_check_block(ctx, d->name, g->name, g->dim, g->full, g->begin, g->rank);
    if (s)
      return s;
    /* params and state share the checkpoint's names; inputs and outputs each
     * their own */
    for (int j = 0; j < k; j++) {
      const DtGlobalDesc *h = &d->global[j];
      if (!strcmp(h->name, g->name) && (h->kind == g->kind || (stored(h) && stored(g))))
        return dtrt_fail(ctx, DT_ERR_ARG, "model %s: two globals named '%s'", d->name, g->name);
    }
    for (int j = 1; g->kind == DT_G_INPUT && j < g->rank && !dtrt_whole(g->full, g->rank); j++)
      if (g->dim[j] != g->full[j])
        return dtrt_fail(ctx, DT_ERR_ARG, "model %s: input '%s' is split on dimension %d, not "
                         "in rows", d->name, g->name, j);
    if (!stored(g))
      continue;
    int64_t bytes = dtrt_numel(&t) * 4;
    if (g->offset < 0 || g->offset % 4 || g->offset > d->state_bytes - bytes)
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "model %s: '%s' at offset %lld (%lld bytes) does not fit the %lld-byte "
                       "state block",
                       d->name, g->name, (long long)g->offset, (long long)bytes,
                       (long long)d->state_bytes);
    if (g->init < DT_INIT_ZEROS || g->init >= DT_INIT_COUNT ||
        (g->dtype == DTRT_I32 && g->init != DT_INIT_ZEROS && g->init != DT_INIT_ONES))
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: '%s' has initialiser %d, unusable for %s",
                       d->name, g->name, (int)g->init, dtrt_dtype_name(g->dtype));
  }
  if (d->nmesh_axis < 0 || d->nmesh_axis > DTRT_MAX_MESH ||
      (d->nmesh_axis > 0 && !d->mesh_axis_size))
    return dtrt_fail(ctx, DT_ERR_ARG, "model %s: %d mesh axes at %p (0 to %d expected)", d->name,
                     (int)d->nmesh_axis, (const void *)d->mesh_axis_size, DTRT_MAX_MESH);
  for (int k = 0; k < d->nmesh_axis; k++)
    if (d->mesh_axis_size[k] < 1)
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: mesh axis %d has size %d", d->name, k,
                       (int)d->mesh_axis_size[k]);
  DtStatus s;
  if ((s = check_list(ctx, d, "training input", d->ntrain_in, d->train_in, DT_G_INPUT)) ||
      (s = check_list(ctx, d, "forward input", d->nfwd_in, d->fwd_in, DT_G_INPUT)) ||
      (s = check_list(ctx, d, "forward output", d->nfwd_out, d->fwd_out, DT_G_OUTPUT)))
    return s;
  return DT_OK;
}

/* Fills p with the block of g: the values g's initialiser gives the whole
 * tensor there, one dtrt_init_range per run of elements contiguous in both. */
typedef struct Init {
  DtrtCtx *ctx;
  float *p;
  const DtGlobalDesc *g;
  uint64_t seed, stream;
} Init;

static int init_run(void *arg, int64_t whole, int64_t local, int64_t n) {
  const Init *in = arg;
  const DtGlobalDesc *g = in->g;
  return (int)dtrt_init_range(in->ctx, in->p + local, n, g->init, g->init_arg, g->fan_in,
                              g->fan_out, in->seed, in->stream, whole);
}

static DtStatus init_block(DtrtCtx *ctx, float *p, const DtGlobalDesc *g, uint64_t seed,
                           uint64_t stream) {
  int64_t full[DT_MAX_RANK], begin[DT_MAX_RANK];
  dtrt_block(g->dim, g->full, g->begin, g->rank, full, begin);
  Init in = {ctx, p, g, seed, stream};
  return (DtStatus)dtrt_for_runs(full, begin, g->dim, g->rank, init_run, &in);
}

/* Fills the params and state (only the state: state_only) in the state
 * block at base: global k draws from stream k. */
static DtStatus init_state(DtModel *m, unsigned char *base, uint64_t seed, bool state_only) {
  const DtModelDesc *d = m->d;
  for (int k = 0; k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!stored(g) || (state_only && g->kind != DT_G_STATE))
      continue;
    int64_t n = dtrt_elems(g->dim, g->rank);
    void *p = base + g->offset;
    if (g->dtype == DTRT_I32) {
      for (int64_t j = 0; j < n; j++)
        ((int32_t *)p)[j] = g->init == DT_INIT_ONES;
      continue;
    }
    DtStatus s = init_block(m->ctx, p, g, seed, (uint64_t)k);
    if (s) {
      char why[512];
      snprintf(why, sizeof why, "%s", dtrt_errmsg(m->ctx));
      return dtrt_fail(m->ctx, s, "model %s: initialising '%s': %s", d->name, g->name, why);
    }
  }
  return DT_OK;
}

static bool spmd(const DtModel *m) { return m->d->nmesh_axis > 0; }

/* Joins the job of an SPMD model: the same model, plan and mesh on every rank
 * (agreed before the mesh is built, so that ranks running different programs
 * stop here rather than wait in different collectives), then the mesh. */
static DtStatus join(DtrtCtx *ctx, const DtModelDesc *d) {
  int size[DTRT_MAX_MESH];
  char shape[96] = "";
  size_t n = 0;
  for (int k = 0; k < d->nmesh_axis; k++) {
    size[k] = d->mesh_axis_size[k];
    n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%d", k ? "x" : "", size[k]);
  }
  DtStatus s;
  if ((s = dtrt_comm_init(ctx)) || (s = dtrt_comm_agree(ctx, "model hash", d->hash)) ||
      (s = dtrt_comm_agree(ctx, "plan hash", d->plan_hash)) ||
      (s = dtrt_comm_agree(ctx, "mesh", shape)) ||
      (s = dtrt_mesh_init(ctx, d->nmesh_axis, size))) {
    char why[512];
    snprintf(why, sizeof why, "%s", dtrt_errmsg(ctx));
    return dtrt_fail(ctx, s, "model %s: %s", d->name, why);
  }
  return DT_OK;
}

void dtrt_model_destroy(DtModel *m) {
  if (!m)
    return;
  DtrtCtx *ctx = m->ctx;
  int64_t bytes, rss;
  dtrt_model_memory(m, &bytes, &rss);
  dtrt_trace_memory(ctx, bytes, rss);
  dtrt_trace_close(ctx);
  dtrt_free(ctx, m->state);
  dtrt_free(ctx, m->work);
  dtrt_free(ctx, m->in);
  dtrt_free(ctx, m->own);
  dtrt_free(ctx, m);
  dtrt_ctx_free(ctx);
}

/* d is checked and its step functions are in this binary (not in the object
 * of another target). */
static DtStatus check_code(DtrtCtx *ctx, const DtModelDesc *d, int rank) {
  if (!d->object)
    return check_desc(ctx, d);
  const char *name = d->name ? d->name : "?", *dev = d->device ? d->device : "?";
  if (!d->target)
    return dtrt_fail(ctx, DT_ERR_MISMATCH,
                     "model %s: device '%s' (rank %d) has its code in %s, not in this binary",
                     name, dev, rank, d->object);
  return dtrt_fail(ctx, DT_ERR_MISMATCH,
                   "model %s: device '%s' (rank %d) runs %s code, which is in %s, not in this "
                   "binary",
                   name, dev, rank, d->target, d->object);
}

/* *d with its blocks written into a copy of its global table (*own, the
 * description and the table in one allocation), where it gives them. */
static DtStatus with_blocks(DtrtCtx *ctx, const DtModelDesc **d, DtModelDesc **own) {
  const DtModelDesc *b = *d;
  if (!b || !b->blocks)
    return DT_OK;
  if (b->nglobal < 0 || (b->nglobal > 0 && !b->global))
    return dtrt_fail(ctx, DT_ERR_ARG, "model %s: bad global table", b->name ? b->name : "?");
  DtModelDesc *c = dtrt_alloc(ctx, sizeof *c + sizeof(DtGlobalDesc) * (size_t)b->nglobal);
  if (!c)
    return DT_ERR_NOMEM;
  *c = *b;
  DtGlobalDesc *g = (DtGlobalDesc *)(c + 1);
  const int64_t *p = b->blocks;
  for (int k = 0; k < b->nglobal; k++) {
    g[k] = b->global[k];
    int r = g[k].rank;
    if (r < 0 || r > DT_MAX_RANK) {
      dtrt_free(ctx, c);
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: global %d has rank %d", b->name ? b->name : "?",
                       k, r);
    }
    memcpy(g[k].dim, p, sizeof(int64_t) * (size_t)r);
    memcpy(g[k].begin, p + r, sizeof(int64_t) * (size_t)r);
    g[k].offset = p[2 * r];
    p += 2 * r + 1;
  }
  c->global = g;
  c->blocks = NULL;
  *own = c;
  *d = c;
  return DT_OK;
}

/* This rank's description, checked: dev[0] when there is one device, else
 * dev[rank] in a job of exactly ndev ranks. The descriptions of devices
 * differ, so one may fail its check alone: every rank learns of it before
 * the agreement that would wait for it. */
static DtStatus pick(DtrtCtx *ctx, const DtModelDesc *const *dev, int ndev,
                     const DtModelDesc **d, DtModelDesc **own) {
  if (!dev || ndev < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "model: %d device descriptions at %p", ndev,
                     (const void *)dev);
  if (ndev == 1) {
    *d = dev[0];
    DtStatus s = !*d ? dtrt_fail(ctx, DT_ERR_ARG, "model: no description")
                     : with_blocks(ctx, d, own);
    return s ? s : check_code(ctx, *d, 0);
  }
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return s;
  int rank = dtrt_rank(ctx), nranks = dtrt_nranks(ctx);
  bool named = dev[0] && dev[0]->name;
  if (nranks != ndev)
    return dtrt_fail(ctx, DT_ERR_ARG,
                     "%s%s was compiled for %d devices but runs on %d rank%s; launch it with "
                     "mpirun -np %d",
                     named ? "model " : "the model", named ? dev[0]->name : "", ndev, nranks,
                     nranks == 1 ? "" : "s", ndev);
  *d = dev[rank];
  if (!*d)
    s = dtrt_fail(ctx, DT_ERR_ARG, "model: no description for device %d", rank);
  else if (!(s = with_blocks(ctx, d, own)) && !(s = check_code(ctx, *d, rank)) &&
           (*d)->nmesh_axis == 0)
    s = dtrt_fail(ctx, DT_ERR_ARG, "model %s: device %d of %d has no mesh", (*d)->name, rank,
                  ndev);
  return dtrt_comm_status(ctx, s);
}

/* The plan of an elastic build for the job's rank count: plan[k], of
 * count[k] devices. The rank count is the same on every rank, and so is
 * the choice, or the failure. */
static DtStatus pick_plan(DtrtCtx *ctx, const DtModelDesc *const *const *plan,
                          const int32_t *count, int nplan, const DtModelDesc *const **dev,
                          int *ndev) {
  if (!plan || !count || nplan < 1)
    return dtrt_fail(ctx, DT_ERR_ARG, "model: %d plans at %p", nplan, (const void *)plan);
  DtStatus s = dtrt_comm_init(ctx);
  if (s)
    return s;
  int nranks = dtrt_nranks(ctx);
  for (int k = 0; k < nplan; k++)
    if (count[k] == nranks) {
      *dev = plan[k];
      *ndev = count[k];
      return DT_OK;
    }
  char list[256] = "";
  for (int k = 0, at = 0; k < nplan && at < 200; k++)
    at += snprintf(list + at, sizeof list - (size_t)at, "%s%d",
                   !k ? "" : k == nplan - 1 ? " or " : ", ", (int)count[k]);
  const char *name = plan[0] && plan[0][0] && plan[0][0]->name ? plan[0][0]->name : "?";
  return dtrt_fail(ctx, DT_ERR_ARG,
                   "model %s was compiled for %s rank%s (dtc --devices) but runs on %d; launch "
                   "it with mpirun -np %s",
                   name, list, nplan == 1 && count[0] == 1 ? "" : "s", nranks, list);
}

/* plan NULL: the one plan dev[0..ndev); else the one of plan[0..nplan) for
 * the job's rank count. */
static DtStatus create(const DtModelDesc *const *const *plan, const int32_t *count, int nplan,
                       const DtModelDesc *const *dev, int ndev, uint64_t seed,
                       const DtAllocator *a, char *err, size_t errlen, DtModel **out) {
  if (err && errlen)
    err[0] = 0;
  if (out)
    *out = NULL;
  DtrtCtx *ctx = dtrt_ctx_new_with(a);
  if (!ctx) {
    if (err && errlen)
      strncpy(err, "model: cannot create a context", errlen - 1)[errlen - 1] = 0;
    return a && (!a->alloc || !a->free) ? DT_ERR_ARG : DT_ERR_NOMEM;
  }
  DtStatus s = DT_OK;
  const DtModelDesc *d = NULL;
  DtModelDesc *own = NULL;
  DtModel *m = NULL;
  if (!out)
    s = dtrt_fail(ctx, DT_ERR_ARG, "model: no output pointer");
  else if ((!plan || !(s = pick_plan(ctx, plan, count, nplan, &dev, &ndev))) &&
           !(s = pick(ctx, dev, ndev, &d, &own)) && !(d->nmesh_axis > 0 && (s = join(ctx, d)))) {
    if ((m = dtrt_alloc(ctx, sizeof *m))) {
      *m = (DtModel){.d = d, .ctx = ctx, .seed = seed, .rss0 = peak_rss(), .own = own};
      m->state = dtrt_alloc(ctx, (size_t)d->state_bytes);
      m->work = m->state ? dtrt_alloc(ctx, (size_t)d->work_bytes) : NULL;
      int nin = d->ntrain_in > d->nfwd_in ? d->ntrain_in : d->nfwd_in;
      m->in = m->work ? dtrt_alloc(ctx, sizeof *m->in * (size_t)(nin + 1)) : NULL;
      s = m->in ? init_state(m, m->state, seed, false) : DT_ERR_NOMEM;
      if (!s)
        s = dtrt_trace_open(ctx);
    } else {
      s = DT_ERR_NOMEM;
    }
    if (d->nmesh_axis > 0)
      s = dtrt_comm_status(ctx, s);
  }
  if (s) {
    if (err && errlen)
      strncpy(err, dtrt_errmsg(ctx), errlen - 1)[errlen - 1] = 0;
    if (m) {
      dtrt_model_destroy(m);
    } else {
      dtrt_free(ctx, own);
      dtrt_ctx_free(ctx);
    }
    return s;
  }
  *out = m;
  return DT_OK;
}

DtStatus dtrt_model_create_spmd_with(const DtModelDesc *const *dev, int ndev, uint64_t seed,
                                     const DtAllocator *a, char *err, size_t errlen,
                                     DtModel **out) {
  return create(NULL, NULL, 0, dev, ndev, seed, a, err, errlen, out);
}

DtStatus dtrt_model_create_plans_with(const DtModelDesc *const *const *plan,
                                      const int32_t *count, int nplan, uint64_t seed,
                                      const DtAllocator *a, char *err, size_t errlen,
                                      DtModel **out) {
  return create(plan, count, nplan, NULL, 0, seed, a, err, errlen, out);
}

DtStatus dtrt_model_create_spmd(const DtModelDesc *const *dev, int ndev, uint64_t seed,
                                DtModel **out) {
  return dtrt_model_create_spmd_with(dev, ndev, seed, NULL, NULL, 0, out);
}

DtStatus dtrt_model_create_with(const DtModelDesc *d, uint64_t seed, const DtAllocator *a,
                                char *err, size_t errlen, DtModel **out) {
  return dtrt_model_create_spmd_with(&d, 1, seed, a, err, errlen, out);
}

DtStatus dtrt_model_create(const DtModelDesc *d, uint64_t seed, DtModel **out) {
  return dtrt_model_create_with(d, seed, NULL, NULL, 0, out);
}

const char *dtrt_model_error(const DtModel *m) { return m ? dtrt_errmsg(m->ctx) : "no model"; }

int64_t dtrt_model_step(const DtModel *m) { return m ? m->step : 0; }

int dtrt_model_rank(const DtModel *m) { return m ? dtrt_rank(m->ctx) : 0; }

const DtModelDesc *dtrt_model_desc(const DtModel *m) { return m ? m->d : NULL; }

int64_t dtrt_model_table_bytes(int nin, int nglobal, bool mesh) {
  return (int64_t)(sizeof(DtModel) + sizeof(const void *) * (size_t)(nin + 1) +
                   (mesh ? dtrt_comm_bytes() + sizeof(DtModelDesc) +
                               sizeof(DtGlobalDesc) * (size_t)nglobal
                         : 0));
}

DtStatus dtrt_model_memory(const DtModel *m, int64_t *peak_bytes, int64_t *rss_growth) {
  if (!m)
    return DT_ERR_ARG;
  int64_t now = peak_rss();
  if (peak_bytes)
    *peak_bytes = m->ctx->peak_bytes;
  if (rss_growth)
    *rss_growth = now < 0 || m->rss0 < 0 ? -1 : now - m->rss0;
  return DT_OK;
}

DtStatus dtrt_model_set_lr(DtModel *m, double lr) {
  if (!m)
    return DT_ERR_ARG;
  if (!m->d->train_step)
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s set_lr: the model was compiled for inference only",
                     m->d->name);
  if (!(lr >= 0 && lr <= DBL_MAX))
    return dtrt_fail(m->ctx, DT_ERR_ARG,
                     "%s set_lr: the learning rate must be finite and >= 0, not %g", m->d->name,
                     lr);
  m->ctx->lr = lr;
  m->ctx->lr_set = true;
  return DT_OK;
}

double dtrt_model_lr(const DtModel *m, double compiled) {
  return m && m->ctx->lr_set ? m->ctx->lr : compiled;
}

/* Checks caller buffers against the globals idx[0..n): present, right size. */
static DtStatus check_bufs(DtModel *m, const char *op, const char *what, int n,
                           const int32_t *idx, const void *const *p, const int64_t *elems) {
  const DtModelDesc *d = m->d;
  if (n > 0 && (!p || !elems))
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s %s: %ss or their element counts are NULL",
                     d->name, op, what);
  for (int k = 0; k < n; k++) {
    const DtGlobalDesc *g = &d->global[idx[k]];
    int64_t want = dtrt_elems(g->dim, g->rank);
    char ty[128];
    if (!p[k])
      return dtrt_fail(m->ctx, DT_ERR_ARG, "%s %s: %s '%s' is NULL", d->name, op, what, g->name);
    if (elems[k] != want)
      return dtrt_fail(m->ctx, DT_ERR_ARG,
                       "%s %s: %s '%s' has %lld elements, the model expects %lld (%s)", d->name,
                       op, what, g->name, (long long)elems[k], (long long)want,
                       dtrt_type_str(g->dtype, g->dim, g->rank, ty, sizeof ty));
  }
  return DT_OK;
}

/* ---- this rank's rows of the inputs ---- */

/* Input g's rows on this rank: [*begin, *begin + *count) of its first
 * dimension (all of them for an input not split, or a model not SPMD). */
static void rows_of(const DtGlobalDesc *g, int64_t *begin, int64_t *count, int64_t *row_elems) {
  int64_t full[DT_MAX_RANK], at[DT_MAX_RANK];
  dtrt_block(g->dim, g->full, g->begin, g->rank, full, at);
  *begin = g->rank ? at[0] : 0;
  *count = g->rank ? g->dim[0] : 1;
  *row_elems = g->rank ? dtrt_elems(full + 1, g->rank - 1) : 1;
}

DtStatus dtrt_model_input_rows(const DtModel *m, const char *name, int64_t *begin,
                               int64_t *count) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  for (int k = 0; name && k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (g->kind != DT_G_INPUT || strcmp(g->name, name))
      continue;
    int64_t b, c, row;
    rows_of(g, &b, &c, &row);
    if (begin)
      *begin = b;
    if (count)
      *count = c;
    return DT_OK;
  }
  return dtrt_fail(m->ctx, DT_ERR_ARG, "%s input_rows: the model has no input '%s'", d->name,
                   name ? name : "(null)");
}

/* Checks the caller's inputs idx[0..n) and points m->in at the rows the step
 * reads: each the whole batch, at this rank's first row, or (local) this
 * rank's rows alone, which may be NULL when there are none. */
static DtStatus check_inputs(DtModel *m, const char *op, int n, const int32_t *idx,
                             const void *const *p, const int64_t *elems, bool local) {
  const DtModelDesc *d = m->d;
  if (n > 0 && (!p || !elems))
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s %s: inputs or their element counts are NULL",
                     d->name, op);
  for (int k = 0; k < n; k++) {
    const DtGlobalDesc *g = &d->global[idx[k]];
    int64_t begin, count, row;
    rows_of(g, &begin, &count, &row);
    const int64_t *whole = dtrt_whole(g->full, g->rank) ? g->dim : g->full;
    int64_t want = dtrt_elems(local ? g->dim : whole, g->rank);
    (void)count;
    char ty[128];
    if (!p[k] && !(local && want == 0))
      return dtrt_fail(m->ctx, DT_ERR_ARG, "%s %s: input '%s' is NULL", d->name, op, g->name);
    if (elems[k] != want)
      return dtrt_fail(m->ctx, DT_ERR_ARG,
                       "%s %s: input '%s' has %lld elements, the model expects %lld (%s%s)",
                       d->name, op, g->name, (long long)elems[k], (long long)want,
                       local ? "this rank's rows of " : "",
                       dtrt_type_str(g->dtype, whole, g->rank, ty, sizeof ty));
    m->in[k] = local || !p[k] ? p[k] : (const unsigned char *)p[k] + begin * row * 4;
  }
  return DT_OK;
}

/* A step function's failure, with a message even when it left none. */
static DtStatus said(DtModel *m, const char *op, DtStatus s) {
  if (!dtrt_errmsg(m->ctx)[0])
    dtrt_fail(m->ctx, s, "%s %s failed: %s", m->d->name, op, dtrt_status_name(s));
  return s;
}

/* Every rank of an SPMD model learns of a failure on any rank, both before the
 * step (bad buffers) and after it. A step function that fails must still
 * make the collectives it shares with other ranks, or they wait for it. */
static DtStatus shared(DtModel *m, DtStatus s) { return spmd(m) ? dtrt_comm_status(m->ctx, s) : s; }

static DtStatus train_step(DtModel *m, const void *const *inputs, const int64_t *elems,
                           float *loss, bool local) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  DtStatus s = DT_OK;
  if (!d->train_step)
    s = dtrt_fail(m->ctx, DT_ERR_ARG, "%s train_step: the model was compiled for inference only",
                  d->name);
  else if (!loss)
    s = dtrt_fail(m->ctx, DT_ERR_ARG, "%s train_step: loss pointer is NULL", d->name);
  else
    s = check_inputs(m, local ? "train_step_local" : "train_step", d->ntrain_in, d->train_in,
                     inputs, elems, local);
  if ((s = shared(m, s)))
    return s;
  void *outs[1] = {loss};
  dtrt_fail(m->ctx, DT_OK, "%s", "");
  double t0 = m->ctx->trace ? dtrt_trace_clock() : 0;
  uint64_t fp = dtrt_fp_enter(d->denormals);
  s = d->train_step(m->ctx, m->state, m->work, (void *const *)m->in, outs, m->step);
  dtrt_fp_leave(fp);
  if (m->ctx->trace)
    dtrt_trace_add(m->ctx, "train_step", DTRT_TID_STEP, t0, dtrt_trace_clock());
  if ((s = shared(m, s ? said(m, "train_step", s) : DT_OK)))
    return s;
  m->step++;
  return DT_OK;
}

DtStatus dtrt_model_train_step(DtModel *m, const void *const *inputs, const int64_t *elems,
                               float *loss) {
  return train_step(m, inputs, elems, loss, false);
}

DtStatus dtrt_model_train_step_local(DtModel *m, const void *const *inputs,
                                     const int64_t *elems, float *loss) {
  return train_step(m, inputs, elems, loss, true);
}

static DtStatus forward(DtModel *m, const void *const *inputs, const int64_t *elems,
                        void *const *outputs, const int64_t *out_elems, bool local) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  DtStatus s = DT_OK;
  if (!d->forward)
    s = dtrt_fail(m->ctx, DT_ERR_ARG, "%s forward: the model has no forward function", d->name);
  else if (!(s = check_inputs(m, local ? "forward_local" : "forward", d->nfwd_in, d->fwd_in,
                              inputs, elems, local)))
    s = check_bufs(m, "forward", "output", d->nfwd_out, d->fwd_out,
                   (const void *const *)outputs, out_elems);
  if ((s = shared(m, s)))
    return s;
  dtrt_fail(m->ctx, DT_OK, "%s", "");
  double t0 = m->ctx->trace ? dtrt_trace_clock() : 0;
  uint64_t fp = dtrt_fp_enter(d->denormals);
  s = d->forward(m->ctx, m->state, m->work, (void *const *)m->in, outputs, m->step);
  dtrt_fp_leave(fp);
  if (m->ctx->trace)
    dtrt_trace_add(m->ctx, "forward", DTRT_TID_STEP, t0, dtrt_trace_clock());
  return shared(m, s ? said(m, "forward", s) : DT_OK);
}

DtStatus dtrt_model_forward(DtModel *m, const void *const *inputs, const int64_t *elems,
                            void *const *outputs, const int64_t *out_elems) {
  return forward(m, inputs, elems, outputs, out_elems, false);
}

DtStatus dtrt_model_forward_local(DtModel *m, const void *const *inputs, const int64_t *elems,
                                  void *const *outputs, const int64_t *out_elems) {
  return forward(m, inputs, elems, outputs, out_elems, true);
}

/* The params and state as named tensors over the state block at base, and
 * their blocks (in the same allocation, after the tensors); *n of them. */
static DtNamed *named(DtModel *m, unsigned char *base, DtBlock **b, int *n) {
  const DtModelDesc *d = m->d;
  DtNamed *t = dtrt_alloc(m->ctx, (size_t)d->nglobal * (sizeof *t + sizeof **b));
  *b = t ? (DtBlock *)(t + d->nglobal) : NULL;
  *n = 0;
  for (int k = 0; t && k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!stored(g))
      continue;
    DtNamed *e = &t[*n];
    *e = (DtNamed){.name = g->name,
                   .t = {.data = base + g->offset, .dtype = g->dtype, .rank = g->rank}};
    memcpy(e->t.dim, g->dim, (size_t)g->rank * sizeof *g->dim);
    memcpy((*b)[*n].full, g->full, sizeof g->full);
    memcpy((*b)[*n].begin, g->begin, sizeof g->begin);
    ++*n;
  }
  return t;
}

/* The params (and, unless params_only, the state) over the state block at
 * base, as checkpoint tensors: this rank's blocks; *n of them. */
static DtCkptTensor *ckpt_tensors(DtModel *m, unsigned char *base, bool params_only, int *n) {
  const DtModelDesc *d = m->d;
  DtCkptTensor *t = dtrt_alloc(m->ctx, (size_t)(d->nglobal + 1) * sizeof *t);
  *n = 0;
  for (int k = 0; t && k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!stored(g) || (params_only && g->kind != DT_G_PARAM))
      continue;
    DtCkptTensor *e = &t[(*n)++];
    *e = (DtCkptTensor){.name = g->name, .kind = g->kind,
                        .t = {.data = base + g->offset, .dtype = g->dtype, .rank = g->rank}};
    memcpy(e->t.dim, g->dim, (size_t)g->rank * sizeof *g->dim);
    memcpy(e->full, g->full, sizeof g->full);
    memcpy(e->begin, g->begin, sizeof g->begin);
  }
  return t;
}

/* The plan a checkpoint records, for people: the mesh and the plan's hash. */
static void plan_text(const DtModel *m, char *buf, size_t n) {
  const DtModelDesc *d = m->d;
  if (!spmd(m)) {
    snprintf(buf, n, "one process");
    return;
  }
  size_t at = (size_t)snprintf(buf, n, "mesh ");
  for (int k = 0; k < d->nmesh_axis && at < n; k++)
    at += (size_t)snprintf(buf + at, n - at, "%s%d", k ? "x" : "", (int)d->mesh_axis_size[k]);
  if (at < n)
    snprintf(buf + at, n - at, " (%d ranks), plan %s", dtrt_nranks(m->ctx),
             d->plan_hash ? d->plan_hash : "");
}

static DtStatus save_as(DtModel *m, const char *path, bool params_only) {
  if (!m)
    return DT_ERR_ARG;
  int n;
  char plan[160];
  DtCkptTensor *t = ckpt_tensors(m, m->state, params_only, &n);
  DtStatus s = shared(m, t ? DT_OK : DT_ERR_NOMEM);
  plan_text(m, plan, sizeof plan);
  if (!s)
    s = dtrt_ckpt_save(m->ctx, path, t, n, m->d->name, plan, m->step);
  dtrt_free(m->ctx, t);
  return s;
}

DtStatus dtrt_model_save(DtModel *m, const char *path) { return save_as(m, path, false); }

DtStatus dtrt_model_export(DtModel *m, const char *path) { return save_as(m, path, true); }

/* Where an SPMD model's rank kept its checkpoint in the per-rank format
 * (PATH.rankR, or PATH in a job of one rank) and the hash that stamps it;
 * *file to free with dtrt_free. */
static DtStatus rank_file(DtModel *m, const char *path, char **file, const char **hash) {
  const DtModelDesc *d = m->d;
  int rank = dtrt_rank(m->ctx), nranks = dtrt_nranks(m->ctx);
  const char *plan = d->plan_hash ? d->plan_hash : "";
  size_t np = strlen(path) + 32, nh = strlen(d->hash) + strlen(plan) + 64;
  if (!(*file = dtrt_alloc(m->ctx, np + nh)))
    return DT_ERR_NOMEM;
  char *h = *file + np;
  if (nranks == 1) {
    snprintf(*file, np, "%s", path);
    snprintf(h, nh, "%s", d->hash);
  } else {
    snprintf(*file, np, "%s.rank%d", path, rank);
    snprintf(h, nh, "%s plan %s rank %d of %d", d->hash, plan, rank, nranks);
  }
  *hash = h;
  return DT_OK;
}

/* A checkpoint of the per-rank format (one file per rank, stamped with the
 * model, the plan and the rank) into the state block at base: loads only into
 * the plan that wrote it. */
static DtStatus load_old(DtModel *m, const char *path, unsigned char *base, int64_t *step) {
  int n;
  char *file = NULL;
  const char *hash = m->d->hash;
  DtStatus s = DT_OK;
  if (spmd(m))
    s = rank_file(m, path, &file, &hash);
  DtBlock *b;
  DtNamed *t = s ? NULL : named(m, base, &b, &n);
  if (!s && !t)
    s = DT_ERR_NOMEM;
  if (!s)
    s = dtrt_load_blocks(m->ctx, file ? file : path, t, b, n, hash, step);
  if (!(s = shared(m, s)) && spmd(m)) {
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)*step);
    s = dtrt_comm_agree(m->ctx, "checkpoint step", text);
  }
  if (s && spmd(m)) {
    char why[512];
    snprintf(why, sizeof why, "%s", dtrt_errmsg(m->ctx));
    s = dtrt_fail(m->ctx, s,
                  "%s (a checkpoint of the per-rank format loads only into the plan that wrote "
                  "it; make one file of it with: dtc-ckpt convert %s %s.rank0 %s.rank1 ..., "
                  "every rank's file of the job that saved it)",
                  why, path, path, path);
  }
  dtrt_free(m->ctx, file);
  dtrt_free(m->ctx, t);
  return s;
}

static bool exists(const char *path) { return !access(path, F_OK); }

/* (collective) Whether v holds on every rank; false if that cannot be told. */
static bool all_ranks(DtModel *m, bool v) {
  int np = dtrt_nranks(m->ctx);
  char mine = v, *all = dtrt_alloc(m->ctx, (size_t)np);
  bool ok = all && !dtrt_comm_allgather(m->ctx, "load", &mine, 1, all);
  for (int r = 0; ok && r < np; r++)
    ok = all[r];
  dtrt_free(m->ctx, all);
  return ok;
}

/* Loads into a scratch copy of the state, committed only when every rank has
 * read its blocks. An inference build (no train_step, no state) loads the
 * params of a training build's checkpoint. */
DtStatus dtrt_model_load(DtModel *m, const char *path) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  bool params_only = !d->train_step, old = false;
  for (int k = 0; k < d->nglobal; k++)
    params_only = params_only && d->global[k].kind != DT_G_STATE;
  int n;
  int64_t step = 0;
  unsigned char *base = dtrt_alloc(m->ctx, (size_t)d->state_bytes + 1);
  DtCkptTensor *t = base ? ckpt_tensors(m, base, false, &n) : NULL;
  DtStatus s = t ? DT_OK : DT_ERR_NOMEM;
  if (!s && base)
    memcpy(base, m->state, (size_t)d->state_bytes);
  /* no PATH but PATH.rankR: a set of per-rank files */
  char rank0[4096];
  snprintf(rank0, sizeof rank0, "%s.rank%d", path ? path : "", dtrt_rank(m->ctx));
  bool set = !s && path && !exists(path) && exists(rank0);
  if (!s && set && !spmd(m))
    s = dtrt_fail(m->ctx, DT_ERR_IO,
                  "load: %s does not exist, but %s does: a per-rank checkpoint of an SPMD job; "
                  "make one file of it with: dtc-ckpt convert %s %s.rank0 %s.rank1 ...",
                  path, rank0, path, path, path);
  if ((s = shared(m, s)))
    goto done;
  if (spmd(m) &&
      (s = dtrt_comm_agree(m->ctx, "the checkpoint's format", set ? "per-rank" : "one file")))
    goto done;
  if (!set) {
    s = dtrt_ckpt_load_as(m->ctx, path, t, n, params_only, &step, &old);
    if (s && spmd(m))
      old = all_ranks(m, old);
  }
  if (set || old)
    s = load_old(m, path, base, &step);
  if (!s) {
    memcpy(m->state, base, (size_t)d->state_bytes);
    m->step = step;
  }
done:
  dtrt_free(m->ctx, base);
  dtrt_free(m->ctx, t);
  return s;
}

/* Into a scratch copy of the state, committed only when every rank has read
 * its blocks: the params from the file, the state as at creation. */
DtStatus dtrt_model_load_params(DtModel *m, const char *path) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  int n;
  unsigned char *base = dtrt_alloc(m->ctx, (size_t)d->state_bytes + 1);
  DtCkptTensor *t = base ? ckpt_tensors(m, base, true, &n) : NULL;
  DtStatus s = shared(m, t ? DT_OK : DT_ERR_NOMEM);
  if (!s)
    memcpy(base, m->state, (size_t)d->state_bytes);
  if (!s)
    s = dtrt_weights_load(m->ctx, path, t, n);
  if (!s)
    s = shared(m, init_state(m, base, m->seed, true));
  if (!s) {
    memcpy(m->state, base, (size_t)d->state_bytes);
    m->step = 0;
  }
  dtrt_free(m->ctx, base);
  dtrt_free(m->ctx, t);
  return s;
}

static const DtGlobalDesc *stored_named(const DtModel *m, const char *name) {
  for (int k = 0; m && name && k < m->d->nglobal; k++) {
    const DtGlobalDesc *g = &m->d->global[k];
    if (stored(g) && !strcmp(g->name, name))
      return g;
  }
  return NULL;
}

void *dtrt_model_tensor(DtModel *m, const char *name) {
  const DtGlobalDesc *g = stored_named(m, name);
  return g ? m->state + g->offset : NULL;
}

DtStatus dtrt_model_tensor_block(DtModel *m, const char *name, DtTensor *t, int64_t *full,
                                 int64_t *begin) {
  if (!m)
    return DT_ERR_ARG;
  const DtGlobalDesc *g = stored_named(m, name);
  if (!g)
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s: no param or state named '%s'", m->d->name,
                     name ? name : "(null)");
  int64_t f[DT_MAX_RANK] = {0}, b[DT_MAX_RANK] = {0};
  dtrt_block(g->dim, g->full, g->begin, g->rank, f, b);
  if (t) {
    *t = (DtTensor){.data = m->state + g->offset, .dtype = g->dtype, .rank = g->rank};
    memcpy(t->dim, g->dim, (size_t)g->rank * sizeof *g->dim);
  }
  if (full)
    memcpy(full, f, sizeof f);
  if (begin)
    memcpy(begin, b, sizeof b);
  return DT_OK;
}
