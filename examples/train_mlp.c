/* train_mlp.c: trains examples/mlp.dt on Fashion-MNIST with the object dtc
 * compiled from it, reports test accuracy, saves and resumes checkpoints.
 * Built the same for a data-parallel model (examples/mlp_dp2.dt, the
 * train_mlp_dp2 target): each rank then copies only its own rows of every
 * batch (mlp_input_rows, mlp_train_step_local) and rank 0 alone prints. The
 * training set is shuffled each epoch from --seed; a short last batch is
 * dropped, or with --last-batch keep padded to the compiled batch with rows
 * labelled -100, which a loss with ignore_index = -100 skips (mlp_dp2.dt's;
 * mlp.dt's refuses them). With --elastic (a model compiled with dtc
 * --devices, examples/mlp_elastic.dt: the train_mlp_elastic target) it
 * resumes from the --save file when it exists, saves it every --save-every
 * steps, and when a rank fails every rank says so and exits, for
 * tools/dtc-elastic to restart the job on the ranks that remain. With
 * --epoch-json it also prints, after each epoch, one JSON line on stdout:
 * {"epoch": 1, "steps": 937, "ms": ..., "samples_per_s": ..., "loss": ...}, the
 * epoch's steps, its wall time (the steps and the copies of their batches,
 * as the progress bar's rate), samples per second and mean loss (bench/mainjob
 * reads them). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrt.h"
#ifdef DTC_MODEL_H
#include DTC_MODEL_H   /* another model under mlp's names (examples/cnn_as_mlp.h) */
#else
#include "mlp.h"
#endif

enum { B = MLP_BATCH, PIXELS = 784, CLASSES = 10 };

typedef struct Args {
  const char *data;
  const char *save;
  const char *resume;
  int epochs;
  uint64_t seed;
  int64_t max_steps;   /* stop after this many steps in all (0: no limit) */
  int quiet;
  int keep;            /* --last-batch keep: pad the short last batch */
  int64_t limit;       /* train on the first this many images (0: all) */
  int print_loss;      /* print every step's loss on stdout */
  int epoch_json;      /* print a JSON line per epoch on stdout: steps, ms, samples/s, loss */
  int elastic;         /* resume from save when it exists; every rank reports failures */
  int64_t save_every;  /* save after every this many steps (0: after each epoch only) */
} Args;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t next_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The order of the training set in epoch `epoch`: a seeded Fisher-Yates, so
 * a resumed run sees the same batches as a straight one. */
static void shuffle(int32_t *idx, int64_t n, uint64_t seed, int epoch) {
  uint64_t s = seed * 1000003u + (uint64_t)epoch;
  for (int64_t i = 0; i < n; i++)
    idx[i] = (int32_t)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)(next_rand(&s) % (uint64_t)(i + 1));
    int32_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
  }
}

static void progress(int epoch, int64_t done, int64_t total, double loss, double rate) {
  int width = 30, filled = (int)(width * done / (total ? total : 1));
  fprintf(stderr, "\repoch %d [", epoch + 1);
  for (int i = 0; i < width; i++)
    fputc(i < filled ? '=' : (i == filled ? '>' : ' '), stderr);
  fprintf(stderr, "] %5.1f%%  loss %.4f  %7.0f samples/s", 100.0 * done / (total ? total : 1),
          loss, rate);
}

/* This rank's rows of a batch: [begin, begin + count) of the B rows. */
typedef struct Rows {
  int64_t begin, count;
} Rows;

/* This rank's rows of the batch that starts at row `at` of order (NULL: the
 * data in its order) into x and y, rows past n padded (x 0, label -100). */
static void fill(const Rows *rx, const Rows *ry, const DtData *img, const DtData *lab,
                 const int32_t *order, int64_t at, int64_t n, float *x, int32_t *y) {
  const float *px = img->t.data;
  const int32_t *py = lab->t.data;
  for (int64_t i = 0; i < rx->count; i++) {
    int64_t r = at + rx->begin + i;
    if (r < n)
      memcpy(x + i * PIXELS, px + (order ? order[r] : r) * PIXELS, sizeof(float) * PIXELS);
    else
      memset(x + i * PIXELS, 0, sizeof(float) * PIXELS);
  }
  for (int64_t i = 0; y && i < ry->count; i++) {
    int64_t r = at + ry->begin + i;
    y[i] = r < n ? py[order ? order[r] : r] : -100;
  }
}

static double accuracy(mlp *m, const Rows *rx, const DtData *img, const DtData *lab, int *err) {
  static float x[B * PIXELS], logits[B * CLASSES];
  int64_t n = img->t.dim[0], correct = 0;
  const int32_t *py = lab->t.data;
  for (int64_t at = 0; at < n; at += B) {
    int64_t k = n - at < B ? n - at : B;
    fill(rx, rx, img, lab, NULL, at, n, x, NULL);
    if ((*err = mlp_forward_local(m, x, rx->count * PIXELS, logits, B * CLASSES)))
      return 0;
    for (int64_t i = 0; i < k; i++) {
      int best = 0;
      for (int c = 1; c < CLASSES; c++)
        if (logits[i * CLASSES + c] > logits[i * CLASSES + best])
          best = c;
      correct += best == py[at + i];
    }
  }
  return (double)correct / (double)n;
}

static int usage(void) {
  fprintf(stderr,
          "usage: train_mlp [--epochs N] [--data DIR] [--seed S] [--save FILE]\n"
          "                 [--resume FILE] [--max-steps N] [--last-batch drop|keep]\n"
          "                 [--limit N] [--print-loss] [--epoch-json] [--quiet]\n"
          "                 [--elastic] [--save-every N]\n");
  return 2;
}

static int parse(Args *a, int argc, char **argv) {
  *a = (Args){"/usr/share/datasets/fashion-mnist", NULL, NULL, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    char *end = NULL;
    int *flag = !strcmp(o, "--quiet")        ? &a->quiet
                : !strcmp(o, "--print-loss") ? &a->print_loss
                : !strcmp(o, "--elastic")    ? &a->elastic
                : !strcmp(o, "--epoch-json") ? &a->epoch_json
                                             : NULL;
    if (flag) {
      *flag = 1;
      continue;
    }
    if (!v)
      return usage();
    i++;
    if (!strcmp(o, "--epochs"))
      a->epochs = (int)strtol(v, &end, 10);
    else if (!strcmp(o, "--seed"))
      a->seed = strtoull(v, &end, 10);
    else if (!strcmp(o, "--max-steps"))
      a->max_steps = strtoll(v, &end, 10);
    else if (!strcmp(o, "--data"))
      a->data = v;
    else if (!strcmp(o, "--save"))
      a->save = v;
    else if (!strcmp(o, "--resume"))
      a->resume = v;
    else if (!strcmp(o, "--limit"))
      a->limit = strtoll(v, &end, 10);
    else if (!strcmp(o, "--save-every"))
      a->save_every = strtoll(v, &end, 10);
    else if (!strcmp(o, "--last-batch") && (!strcmp(v, "drop") || !strcmp(v, "keep")))
      a->keep = v[0] == 'k';
    else
      return usage();
    if (end && (*end || a->epochs < 0 || a->max_steps < 0 || a->limit < 0 ||
                a->save_every < 0))
      return usage();
  }
  if ((a->elastic || a->save_every) && !a->save) {
    fprintf(stderr, "train_mlp: %s needs --save FILE\n", a->elastic ? "--elastic" : "--save-every");
    return 2;
  }
  if (a->elastic && a->resume) {
    fprintf(stderr, "train_mlp: --elastic resumes from the --save file: no --resume\n");
    return 2;
  }
  return 0;
}

/* Checks images (f32 [N,28,28], as u8 IDX images load) and their labels
 * (i32 [N], each 0..9) against the model; at least min images. */
static int check_set(const char *ipath, const DtData *img, const char *lpath, const DtData *lab,
                     int64_t min) {
  const DtTensor *x = &img->t, *y = &lab->t;
  if (x->dtype != DTRT_F32 || x->rank != 3 || x->dim[1] != 28 || x->dim[2] != 28) {
    char shape[160] = "";
    for (int d = 0, at = 0; d < x->rank && at < 140; d++)
      at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", d ? "," : "",
                     (long long)x->dim[d]);
    fprintf(stderr, "train_mlp: %s: the images are %s [%s], expected u8 images [N,28,28]\n",
            ipath, x->dtype == DTRT_F32 ? "f32" : "i32", shape);
    return 1;
  }
  if (x->dim[0] < min) {
    fprintf(stderr, "train_mlp: %s: %lld images, at least %lld needed\n", ipath,
            (long long)x->dim[0], (long long)min);
    return 1;
  }
  if (y->dtype != DTRT_I32 || y->rank != 1 || y->dim[0] != x->dim[0]) {
    fprintf(stderr, "train_mlp: %s: expected %lld integer labels, one per image of %s\n", lpath,
            (long long)x->dim[0], ipath);
    return 1;
  }
  const int32_t *v = y->data;
  for (int64_t k = 0; k < y->dim[0]; k++)
    if (v[k] < 0 || v[k] >= CLASSES) {
      fprintf(stderr, "train_mlp: %s: label %d at index %lld is outside 0..%d\n", lpath,
              (int)v[k], (long long)k, CLASSES - 1);
      return 1;
    }
  return 0;
}

/* Saves; a SIGINT or SIGTERM that comes meanwhile acts after it, whichever
 * thread takes it (mlp_save holds them off until it is over), so it cannot
 * stop the save half way and leave its temporary file behind. */
static int save(mlp *m, const char *path, int lead) {
  int rc = mlp_save(m, path);
  if (rc && lead)
    fprintf(stderr, "train_mlp: %s\n", mlp_error(m));
  return rc;
}

int main(int argc, char **argv) {
  Args a;
  if (parse(&a, argc, argv))
    return 2;
  /* a write past a file size limit fails (and the save cleans up) instead of
   * killing the process with the temporary file left behind */
  signal(SIGXFSZ, SIG_IGN);
  DtrtCtx *ctx = dtrt_ctx_new();
  if (!ctx) {
    fprintf(stderr, "train_mlp: out of memory\n");
    return 1;
  }
  DtData tr_x = {0}, tr_y = {0}, te_x = {0}, te_y = {0};
  char path[4][1024];
  const char *files[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  DtData *dst[4] = {&tr_x, &tr_y, &te_x, &te_y};
  mlp *m = NULL;
  int32_t *order = NULL;
  float *x = NULL;
  int rc = 1;
  for (int k = 0; k < 4; k++) {
    snprintf(path[k], sizeof path[k], "%s/%s", a.data, files[k]);
    if (dtrt_read_idx(ctx, path[k], dst[k])) {
      fprintf(stderr, "train_mlp: %s\n", dtrt_errmsg(ctx));
      goto done;
    }
  }
  if (check_set(path[0], &tr_x, path[1], &tr_y, a.keep ? 1 : B) ||
      check_set(path[2], &te_x, path[3], &te_y, 1))
    goto done;
  int64_t n = tr_x.t.dim[0];
  if (a.limit && a.limit < n) {
    if (a.limit < (a.keep ? 1 : B)) {
      fprintf(stderr, "train_mlp: --limit %lld leaves no whole batch of %d\n",
              (long long)a.limit, B);
      goto done;
    }
    n = a.limit;
  }

  /* A dead peer can leave a rank waiting in a collective: under --elastic
   * the watchdog ends it after a minute unless told otherwise. */
  if (a.elastic)
    setenv("DTRT_COMM_TIMEOUT", "60", 0);
  if ((rc = mlp_create(&m, a.seed))) {
    fprintf(stderr, "train_mlp: cannot create the model: %s\n", mlp_error(NULL));
    goto done;
  }
  /* every rank makes the same calls and fails alike: rank 0 speaks */
  int lead = mlp_rank(m) == 0;
  if (!lead)
    a.quiet = 1;
  /* under --elastic rank 0 may be the one that failed: every rank speaks */
  int speak = lead || a.elastic;
  if (a.elastic && !access(a.save, F_OK))
    a.resume = a.save;
  Rows rx, ry;
  if ((rc = mlp_input_rows(m, "x", &rx.begin, &rx.count)) ||
      (rc = mlp_input_rows(m, "y", &ry.begin, &ry.count))) {
    fprintf(stderr, "train_mlp: %s\n", mlp_error(m));
    goto done;
  }
  if (a.resume && (rc = mlp_load(m, a.resume))) {
    if (speak)
      fprintf(stderr, "train_mlp: rank %d: %s\n", mlp_rank(m), mlp_error(m));
    goto done;
  }
  int64_t per_epoch = a.keep ? (n + B - 1) / B : n / B;
  int64_t start = mlp_step(m);
  if (start < 0) {
    fprintf(stderr, "train_mlp: %s: step %lld is negative\n", a.resume, (long long)start);
    rc = 1;
    goto done;
  }
  if (lead && start && (!a.quiet || a.elastic))
    fprintf(stderr, "resumed from %s at step %lld\n", a.resume, (long long)start);

  order = malloc(sizeof(int32_t) * (size_t)n);
  x = malloc(sizeof(float) * (size_t)(rx.count ? rx.count : 1) * PIXELS);
  if (!order || !x) {
    fprintf(stderr, "train_mlp: out of memory\n");
    rc = 1;
    goto done;
  }
  int32_t y[B];
  int64_t end_step = (int64_t)a.epochs * per_epoch;
  if (a.max_steps && a.max_steps < end_step)
    end_step = a.max_steps;
  for (int64_t step = start; step < end_step && !rc;) {
    int epoch = (int)(step / per_epoch);
    shuffle(order, n, a.seed, epoch);
    double t0 = now_s(), sum = 0;
    int64_t count = 0;
    for (int64_t b = step % per_epoch; b < per_epoch && step < end_step; b++, step++) {
      fill(&rx, &ry, &tr_x, &tr_y, order, b * B, n, x, y);
      float loss;
      if ((rc = mlp_train_step_local(m, x, rx.count * PIXELS, y, ry.count, &loss))) {
        if (a.elastic)
          fprintf(stderr, "\ntrain_mlp: rank %d: step %lld failed: %s; the last checkpoint is "
                  "%s (restart on the ranks that remain to resume from it)\n", mlp_rank(m),
                  (long long)step + 1, mlp_error(m), a.save);
        else if (lead)
          fprintf(stderr, "\ntrain_mlp: %s%s\n", mlp_error(m),
                  a.keep && b * B + B > n ? " (--last-batch keep pads with label -100, which "
                                            "the model's loss must ignore)" : "");
        break;
      }
      if (a.print_loss && lead)
        printf("step %lld loss %.7g\n", (long long)step + 1, loss);
      sum += loss;
      count++;
      if (!a.quiet && (b % 20 == 0 || b == per_epoch - 1))
        progress(epoch, b + 1, per_epoch, sum / count, count * B / (now_s() - t0));
      if (a.save_every && (step + 1) % a.save_every == 0 && (rc = save(m, a.save, speak)))
        break;
    }
    double secs = now_s() - t0;
    if (rc)
      break;
    if (!a.quiet)
      fputc('\n', stderr);
    if (a.epoch_json && lead && count) {
      printf("{\"epoch\": %d, \"steps\": %lld, \"ms\": %.3f, \"samples_per_s\": %.1f, "
             "\"loss\": %.5f}\n",
             epoch + 1, (long long)count, secs * 1e3, (double)(count * B) / secs,
             sum / (double)count);
      fflush(stdout);
    }
    if (a.save && !(a.save_every && step % a.save_every == 0))
      rc = save(m, a.save, speak);
  }
  if (!rc) {
    int err = 0;
    double acc = accuracy(m, &rx, &te_x, &te_y, &err);
    if (err) {
      if (lead)
        fprintf(stderr, "train_mlp: %s\n", mlp_error(m));
      rc = err;
    } else if (lead) {
      printf("test accuracy %.2f%% after %lld steps\n", 100 * acc, (long long)mlp_step(m));
    }
  }
done:
  free(order);
  free(x);
  mlp_destroy(m);
  for (int k = 0; k < 4; k++)
    dtrt_data_free(ctx, dst[k]);
  dtrt_ctx_free(ctx);
  return rc ? 1 : 0;
}
