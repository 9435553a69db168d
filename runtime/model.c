/* model.c: a model compiled by dtc at run time: its state and work blocks,
 * initialisation, checked training and inference steps, and checkpoints of its
 * params and state. Each model owns its context. */
#include <stdio.h>
#include <string.h>

#include "dtrt_int.h"

struct DtModel {
  const DtModelDesc *d;
  DtrtCtx *ctx;
  unsigned char *state, *work;
  int64_t step;
};

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
    if (s)
      return s;
    /* params and state share the checkpoint's names; inputs and outputs each
     * their own */
    for (int j = 0; j < k; j++) {
      const DtGlobalDesc *h = &d->global[j];
      if (!strcmp(h->name, g->name) && (h->kind == g->kind || (stored(h) && stored(g))))
        return dtrt_fail(ctx, DT_ERR_ARG, "model %s: two globals named '%s'", d->name, g->name);
    }
    if (!stored(g))
      continue;
    int64_t bytes = dtrt_numel(&t) * 4;
    if (g->offset < 0 || g->offset % 4 || g->offset > d->state_bytes - bytes)
      return dtrt_fail(ctx, DT_ERR_ARG,
                       "model %s: '%s' at offset %lld (%lld bytes) does not fit the %lld-byte "
                       "state block",
                       d->name, g->name, (long long)g->offset, (long long)bytes,
                       (long long)d->state_bytes);
    if (g->init < DT_INIT_ZEROS || g->init > DT_INIT_UNIFORM ||
        (g->dtype == DTRT_I32 && g->init != DT_INIT_ZEROS && g->init != DT_INIT_ONES))
      return dtrt_fail(ctx, DT_ERR_ARG, "model %s: '%s' has initialiser %d, unusable for %s",
                       d->name, g->name, (int)g->init, dtrt_dtype_name(g->dtype));
  }
  DtStatus s;
  if ((s = check_list(ctx, d, "training input", d->ntrain_in, d->train_in, DT_G_INPUT)) ||
      (s = check_list(ctx, d, "forward input", d->nfwd_in, d->fwd_in, DT_G_INPUT)) ||
      (s = check_list(ctx, d, "forward output", d->nfwd_out, d->fwd_out, DT_G_OUTPUT)))
    return s;
  return DT_OK;
}

/* Fills the params and state: global k draws from stream k. */
static DtStatus init_state(DtModel *m, uint64_t seed) {
  const DtModelDesc *d = m->d;
  for (int k = 0; k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!stored(g))
      continue;
    int64_t n = dtrt_elems(g->dim, g->rank);
    void *p = m->state + g->offset;
    if (g->dtype == DTRT_I32) {
      for (int64_t j = 0; j < n; j++)
        ((int32_t *)p)[j] = g->init == DT_INIT_ONES;
      continue;
    }
    DtStatus s = dtrt_init(m->ctx, p, n, g->init, g->init_arg, g->fan_in, g->fan_out, seed,
                           (uint64_t)k);
    if (s) {
      char why[512];
      snprintf(why, sizeof why, "%s", dtrt_errmsg(m->ctx));
      return dtrt_fail(m->ctx, s, "model %s: initialising '%s': %s", d->name, g->name, why);
    }
  }
  return DT_OK;
}

void dtrt_model_destroy(DtModel *m) {
  if (!m)
    return;
  DtrtCtx *ctx = m->ctx;
  dtrt_free(ctx, m->state);
  dtrt_free(ctx, m->work);
  dtrt_free(ctx, m);
  dtrt_ctx_free(ctx);
}

DtStatus dtrt_model_create_with(const DtModelDesc *d, uint64_t seed, const DtAllocator *a,
                                char *err, size_t errlen, DtModel **out) {
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
  DtModel *m = NULL;
  if (!out || !d)
    s = dtrt_fail(ctx, DT_ERR_ARG, "model: no %s", d ? "output pointer" : "description");
  else if (!(s = check_desc(ctx, d)) && (m = dtrt_alloc(ctx, sizeof *m))) {
    *m = (DtModel){.d = d, .ctx = ctx};
    m->state = dtrt_alloc(ctx, (size_t)d->state_bytes);
    m->work = m->state ? dtrt_alloc(ctx, (size_t)d->work_bytes) : NULL;
    s = m->work ? init_state(m, seed) : DT_ERR_NOMEM;
  } else if (!s) {
    s = DT_ERR_NOMEM;
  }
  if (s) {
    if (err && errlen)
      strncpy(err, dtrt_errmsg(ctx), errlen - 1)[errlen - 1] = 0;
    if (m)
      dtrt_model_destroy(m);
    else
      dtrt_ctx_free(ctx);
    return s;
  }
  *out = m;
  return DT_OK;
}

DtStatus dtrt_model_create(const DtModelDesc *d, uint64_t seed, DtModel **out) {
  return dtrt_model_create_with(d, seed, NULL, NULL, 0, out);
}

const char *dtrt_model_error(const DtModel *m) { return m ? dtrt_errmsg(m->ctx) : "no model"; }

int64_t dtrt_model_step(const DtModel *m) { return m ? m->step : 0; }

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

/* A step function's failure, with a message even when it left none. */
static DtStatus said(DtModel *m, const char *op, DtStatus s) {
  if (!dtrt_errmsg(m->ctx)[0])
    dtrt_fail(m->ctx, s, "%s %s failed: %s", m->d->name, op, dtrt_status_name(s));
  return s;
}

DtStatus dtrt_model_train_step(DtModel *m, const void *const *inputs, const int64_t *elems,
                               float *loss) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  DtStatus s;
  if (!d->train_step)
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s train_step: the model was compiled for inference only",
                     d->name);
  if (!loss)
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s train_step: loss pointer is NULL", d->name);
  if ((s = check_bufs(m, "train_step", "input", d->ntrain_in, d->train_in, inputs, elems)))
    return s;
  void *outs[1] = {loss};
  dtrt_fail(m->ctx, DT_OK, "%s", "");
  s = d->train_step(m->ctx, m->state, m->work, (void *const *)inputs, outs, m->step);
  if (s)
    return said(m, "train_step", s);
  m->step++;
  return DT_OK;
}

DtStatus dtrt_model_forward(DtModel *m, const void *const *inputs, const int64_t *elems,
                            void *const *outputs, const int64_t *out_elems) {
  if (!m)
    return DT_ERR_ARG;
  const DtModelDesc *d = m->d;
  DtStatus s;
  if (!d->forward)
    return dtrt_fail(m->ctx, DT_ERR_ARG, "%s forward: the model has no forward function",
                     d->name);
  if ((s = check_bufs(m, "forward", "input", d->nfwd_in, d->fwd_in, inputs, elems)) ||
      (s = check_bufs(m, "forward", "output", d->nfwd_out, d->fwd_out,
                      (const void *const *)outputs, out_elems)))
    return s;
  dtrt_fail(m->ctx, DT_OK, "%s", "");
  s = d->forward(m->ctx, m->state, m->work, (void *const *)inputs, outputs, m->step);
  return s ? said(m, "forward", s) : DT_OK;
}

/* The params and state as named tensors over the state block; *n of them. */
static DtNamed *named(DtModel *m, int *n) {
  const DtModelDesc *d = m->d;
  DtNamed *t = dtrt_alloc(m->ctx, (size_t)d->nglobal * sizeof *t);
  *n = 0;
  for (int k = 0; t && k < d->nglobal; k++) {
    const DtGlobalDesc *g = &d->global[k];
    if (!stored(g))
      continue;
    DtNamed *e = &t[(*n)++];
    *e = (DtNamed){.name = g->name,
                   .t = {.data = m->state + g->offset, .dtype = g->dtype, .rank = g->rank}};
    memcpy(e->t.dim, g->dim, (size_t)g->rank * sizeof *g->dim);
  }
  return t;
}

DtStatus dtrt_model_save(DtModel *m, const char *path) {
  if (!m)
    return DT_ERR_ARG;
  int n;
  DtNamed *t = named(m, &n);
  if (!t)
    return DT_ERR_NOMEM;
  DtStatus s = dtrt_save(m->ctx, path, t, n, m->d->hash, m->step);
  dtrt_free(m->ctx, t);
  return s;
}

DtStatus dtrt_model_load(DtModel *m, const char *path) {
  if (!m)
    return DT_ERR_ARG;
  int n;
  int64_t step;
  DtNamed *t = named(m, &n);
  if (!t)
    return DT_ERR_NOMEM;
  DtStatus s = dtrt_load(m->ctx, path, t, n, m->d->hash, &step);
  if (!s)
    m->step = step;
  dtrt_free(m->ctx, t);
  return s;
}

void *dtrt_model_tensor(DtModel *m, const char *name) {
  if (!m || !name)
    return NULL;
  for (int k = 0; k < m->d->nglobal; k++) {
    const DtGlobalDesc *g = &m->d->global[k];
    if (stored(g) && !strcmp(g->name, name))
      return m->state + g->offset;
  }
  return NULL;
}
