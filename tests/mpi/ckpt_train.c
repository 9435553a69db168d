/* ckpt_train.c: examples/mlp.dt under a plan (one process, or mpiexec with
 * the plan's rank count), for the checkpoint tests (tests/mpi/ckpt.sh). The
 * batch of step s is made from s alone, so a run resumed on any layout
 * trains on the batches an uninterrupted run would:
 *
 *     ckpt_train train N OUT        from seed 42, N steps, save OUT
 *     ckpt_train resume IN N OUT    load IN, train up to step N, save OUT
 *     ckpt_train compare A B        (one process) load A and B into two
 *                                   models: every param and state within TOL
 *                                   of its largest element, the same step
 *     ckpt_train same A B           as compare, bit for bit
 *     ckpt_train refuse FILE        the load of FILE fails on every rank and
 *                                   leaves the model as it was
 *     ckpt_train fail-save IN OUT   load IN, save OUT; a second save, whose
 *                                   writes fail on the last rank, fails on
 *                                   every rank and leaves OUT as it was
 *     ckpt_train die-save IN OUT    as fail-save, but the last rank dies of
 *                                   the failing write (SIGXFSZ) mid-save
 *     ckpt_train forward IN X OUT   load IN, run the forward on the batch of
 *                                   step 0 and write it (X) and the logits
 *                                   (OUT), raw f32
 *     ckpt_train export IN OUT      load IN, NAME_export to OUT
 *     ckpt_train params IN W N OUT  load IN (- : none), then the params of W
 *                                   (NAME_load_params: step 0 again, fresh
 *                                   optimizer state), train to step N, save
 *                                   OUT
 *     ckpt_train refuse-params FILE as refuse, of NAME_load_params
 *     ckpt_train close A B          raw f32 files A and B within TOL
 *
 * Built with -DCKPT_INFER for an inference build of the same model
 * (tests/mpi/mlp_infer.dt: no minimize), which has no train_step. Every
 * rank prints its own errors. */
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dtrt.h"
#include "mlp.h"

#define TOL 1e-4
#define SEED 42

static float x[MLP_X_ELEMS];
static int32_t y[MLP_BATCH];
static int me;

/* The batch of step s. */
static void batch(int64_t s) {
  uint64_t r = 0x9e3779b97f4a7c15u ^ (uint64_t)(s + 1) * 0xbf58476d1ce4e5b9u;
  for (int k = 0; k < MLP_X_ELEMS + MLP_BATCH; k++) {
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    if (k < MLP_X_ELEMS)
      x[k] = (float)(r >> 40) / (float)(1 << 24);
    else
      y[k - MLP_X_ELEMS] = (int32_t)(r % 10);
  }
}

static int fail(mlp *m, const char *what, const char *path) {
  fprintf(stderr, "ckpt_train: rank %d: %s %s: %s\n", me, what, path ? path : "",
          mlp_error(m));
  return 1;
}

static int train_to(mlp *m, int64_t n) {
#ifdef CKPT_INFER
  (void)n;
  fprintf(stderr, "ckpt_train: an inference build does not train\n");
  (void)m;
  return 1;
#else
  while (mlp_step(m) < n) {
    float loss;
    batch(mlp_step(m));
    if (mlp_train_step(m, x, MLP_X_ELEMS, y, MLP_Y_ELEMS, &loss) || !isfinite(loss))
      return fail(m, "train", NULL);
  }
  return 0;
#endif
}

static const char *const names[] = {"w1", "b1", "w2", "b2"};

/* The bytes of every stored tensor of m this rank holds, params first. */
static size_t snapshot(mlp *m, unsigned char *buf, size_t cap) {
  size_t at = 0;
  for (int k = 0; k < 4; k++) {
    DtTensor t;
    if (dtrt_model_tensor_block((DtModel *)m, names[k], &t, NULL, NULL))
      continue;
    size_t n = 4;
    for (int d = 0; d < t.rank; d++)
      n *= (size_t)t.dim[d];
    if (at + n <= cap)
      memcpy(buf + at, t.data, n);
    at += n;
  }
  return at;
}

/* Every param of a and b (whole, one process) within tol of the largest
 * element of a's. */
static int compare(mlp *a, mlp *b, double tol) {
  int bad = 0;
  for (int k = 0; k < 4; k++) {
    DtTensor ta, tb;
    dtrt_model_tensor_block((DtModel *)a, names[k], &ta, NULL, NULL);
    dtrt_model_tensor_block((DtModel *)b, names[k], &tb, NULL, NULL);
    int64_t n = 1;
    for (int d = 0; d < ta.rank; d++)
      n *= ta.dim[d];
    double max = 0, diff = 0;
    for (int64_t i = 0; i < n; i++) {
      max = fmax(max, fabs(((float *)ta.data)[i]));
      diff = fmax(diff, fabs((double)((float *)ta.data)[i] - ((float *)tb.data)[i]));
    }
    printf("%-3s max |diff| %.3g, %.3g of its largest element\n", names[k], diff,
           max > 0 ? diff / max : diff);
    if (diff > tol * max) {
      fprintf(stderr, "ckpt_train: '%s' differs by %g (largest element %g)\n", names[k], diff,
              max);
      bad = 1;
    }
  }
  if (mlp_step(a) != mlp_step(b)) {
    fprintf(stderr, "ckpt_train: steps %lld and %lld\n", (long long)mlp_step(a),
            (long long)mlp_step(b));
    bad = 1;
  }
  return bad;
}

static float *read_raw(const char *path, long n) {
  FILE *f = fopen(path, "rb");
  float *v = malloc(sizeof *v * (size_t)n);
  if (!f || !v || fread(v, sizeof *v, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "ckpt_train: cannot read %s\n", path);
    exit(1);
  }
  fclose(f);
  return v;
}

static int write_raw(const char *path, const float *v, size_t n) {
  FILE *f = fopen(path, "wb");
  bool ok = f && fwrite(v, sizeof *v, n, f) == n;
  if (f && fclose(f))
    ok = false;
  if (!ok)
    fprintf(stderr, "ckpt_train: cannot write %s\n", path);
  return !ok;
}

static bool same_file(const char *a, const char *b) {
  FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
  bool same = f && g;
  for (int c; same && (c = fgetc(f)) != EOF;)
    same = c == fgetc(g);
  same = same && fgetc(g) == EOF;
  if (f)
    fclose(f);
  if (g)
    fclose(g);
  return same;
}

int main(int argc, char **argv) {
  const char *cmd = argc > 1 ? argv[1] : "";
  if (!strcmp(cmd, "close") && argc == 4) {
    float *a = read_raw(argv[2], MLP_LOGITS_ELEMS), *b = read_raw(argv[3], MLP_LOGITS_ELEMS);
    double max = 0, diff = 0;
    for (int k = 0; k < MLP_LOGITS_ELEMS; k++)
      max = fmax(max, fabs(a[k])), diff = fmax(diff, fabs((double)a[k] - b[k]));
    printf("logits max |diff| %.3g (largest %.3g)\n", diff, max);
    free(a);
    free(b);
    return diff > TOL * fmax(1, max);
  }
  mlp *m = NULL, *m2 = NULL;
  if (mlp_create(&m, SEED)) {
    fprintf(stderr, "ckpt_train: create: %s\n", mlp_error(NULL));
    return 1;
  }
  me = dtrt_model_rank((DtModel *)m);
  int rc = 2;
  if (!strcmp(cmd, "train") && argc == 4) {
    rc = train_to(m, atol(argv[2]));
    if (!rc && mlp_save(m, argv[3]))
      rc = fail(m, "save", argv[3]);
  } else if (!strcmp(cmd, "resume") && argc == 5) {
    rc = mlp_load(m, argv[2]) ? fail(m, "load", argv[2]) : train_to(m, atol(argv[3]));
    if (!rc && mlp_save(m, argv[4]))
      rc = fail(m, "save", argv[4]);
  } else if ((!strcmp(cmd, "compare") || !strcmp(cmd, "same")) && argc == 4) {
    rc = 1;
    if (mlp_create(&m2, SEED))
      fprintf(stderr, "ckpt_train: create: %s\n", mlp_error(NULL));
    else if (mlp_load(m, argv[2]))
      fail(m, "load", argv[2]);
    else if (mlp_load(m2, argv[3]))
      fail(m2, "load", argv[3]);
    else
      rc = compare(m, m2, strcmp(cmd, "same") ? TOL : 0);
  } else if (!strcmp(cmd, "params") && argc == 6) {
    rc = strcmp(argv[2], "-") && mlp_load(m, argv[2]) ? fail(m, "load", argv[2]) : 0;
    if (!rc && mlp_load_params(m, argv[3]))
      rc = fail(m, "load_params", argv[3]);
    if (!rc && mlp_step(m) != 0)
      rc = fail(m, "load_params did not set the step to 0:", argv[3]);
    if (!rc)
      rc = train_to(m, atol(argv[4]));
    if (!rc && mlp_save(m, argv[5]))
      rc = fail(m, "save", argv[5]);
  } else if ((!strcmp(cmd, "refuse") || !strcmp(cmd, "refuse-params")) && argc == 3) {
    static unsigned char before[1 << 22], after[1 << 22];
    size_t n = snapshot(m, before, sizeof before);
    int64_t step = mlp_step(m);
    rc = 1;
    if (!(strcmp(cmd, "refuse") ? mlp_load_params(m, argv[2]) : mlp_load(m, argv[2])))
      fprintf(stderr, "ckpt_train: rank %d: %s loaded\n", me, argv[2]);
    else if (snapshot(m, after, sizeof after) != n || memcmp(before, after, n) ||
             mlp_step(m) != step)
      fprintf(stderr, "ckpt_train: rank %d: the refused load changed the model\n", me);
    else
      printf("ckpt_train: rank %d: refused: %s\n", me, mlp_error(m)), rc = 0;
  } else if ((!strcmp(cmd, "fail-save") || !strcmp(cmd, "die-save")) && argc == 4) {
    rc = 1;
    char copy[4200];
    snprintf(copy, sizeof copy, "%s.copy%d", argv[3], me);
    if (mlp_load(m, argv[2]))
      fail(m, "load", argv[2]);
    else if (mlp_save(m, argv[3]))
      fail(m, "save", argv[3]);
    else {
      int np = 1;
      const char *ranks = getenv("OMPI_COMM_WORLD_SIZE");
      if (ranks)
        np = atoi(ranks);
      FILE *from = fopen(argv[3], "rb"), *to = fopen(copy, "wb");
      for (int c; from && to && (c = fgetc(from)) != EOF;)
        fputc(c, to);
      if (from)
        fclose(from);
      if (to)
        fclose(to);
      struct rlimit was;
      getrlimit(RLIMIT_FSIZE, &was);
      if (me == np - 1) {   /* its writes fail: no file may grow past 8 bytes */
        struct rlimit none = {0, 0};
        if (strcmp(cmd, "die-save"))
          signal(SIGXFSZ, SIG_IGN);
        else
          setrlimit(RLIMIT_CORE, &none);
        struct rlimit small = {8, was.rlim_max};
        setrlimit(RLIMIT_FSIZE, &small);
      }
      int s = mlp_save(m, argv[3]);
      setrlimit(RLIMIT_FSIZE, &was);
      if (!s)
        fprintf(stderr, "ckpt_train: rank %d: the save succeeded\n", me);
      else if (!same_file(argv[3], copy))
        fprintf(stderr, "ckpt_train: rank %d: the failed save changed %s\n", me, argv[3]);
      else
        printf("ckpt_train: rank %d: save failed: %s\n", me, mlp_error(m)), rc = 0;
    }
    remove(copy);
  } else if (!strcmp(cmd, "forward") && argc == 5) {
    static float out[MLP_LOGITS_ELEMS];
    batch(0);
    if (mlp_load(m, argv[2]))
      rc = fail(m, "load", argv[2]);
    else if (mlp_forward(m, x, MLP_X_ELEMS, out, MLP_LOGITS_ELEMS))
      rc = fail(m, "forward", NULL);
    else
      rc = me == 0 && (write_raw(argv[3], x, MLP_X_ELEMS) ||
                       write_raw(argv[4], out, MLP_LOGITS_ELEMS));
  } else if (!strcmp(cmd, "export") && argc == 4) {
    if (mlp_load(m, argv[2]))
      rc = fail(m, "load", argv[2]);
    else
      rc = mlp_export(m, argv[3]) ? fail(m, "export", argv[3]) : 0;
  } else {
    fprintf(stderr, "usage: ckpt_train train N OUT | resume IN N OUT | compare A B | same A B "
                    "| refuse FILE | fail-save IN OUT | forward IN X OUT | export IN OUT | "
                    "params IN W N OUT | refuse-params FILE | close A B\n");
  }
  mlp_destroy(m2);
  mlp_destroy(m);
  return rc;
}
