/* header.c: NAME.h, the C interface of a compiled model: valid C and C++,
 * every shape as macros, every function documented with its arguments'
 * shapes and its return codes. The interface of a model compiled for
 * several devices is the same, with whole shapes: each rank of the job
 * makes the same calls on the whole batch, or (the _local calls) on its own
 * rows of it. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"

static const char *upper(Arena *a, const char *s) {
  char *u = arena_strdup(a, s);
  for (char *p = u; *p; p++)
    *p = *p == '.' ? '_' : (char)toupper((unsigned char)*p);
  return u;
}

/* A parameter name for global or output `name`: C and C++ keywords, the
 * model's own parameter and names already taken get a trailing '_'. */
static const char *param_name(Arena *a, const char *name, const char **taken, int ntaken) {
  static const char *reserved[] = {
      "m", "loss", "auto", "bool", "break", "case", "catch", "char", "class", "const",
      "continue", "default", "delete", "do", "double", "else", "enum", "explicit", "export",
      "extern", "false", "float", "for", "friend", "goto", "if", "inline", "int", "long",
      "mutable", "namespace", "new", "noexcept", "operator", "private", "protected", "public",
      "register", "restrict", "return", "short", "signed", "sizeof", "static", "struct",
      "switch", "template", "this", "throw", "true", "try", "typedef", "typename", "union",
      "unsigned", "using", "virtual", "void", "volatile", "while", "and", "or", "not", "xor"};
  char *s = arena_strdup(a, name);
  for (char *p = s; *p; p++)
    if (*p == '.')
      *p = '_';
  for (bool again = true; again;) {
    again = false;
    for (int k = 0; k < COUNTOF(reserved) && !again; k++)
      again = !strcmp(s, reserved[k]);
    for (int k = 0; k < ntaken && !again; k++)
      again = !strcmp(s, taken[k]);
    if (again)
      s = arena_printf(a, "%s_", s);
  }
  return s;
}

static const char *ctype(const Type *t) { return t->dtype == DT_I32 ? "int32_t" : "float"; }

static void shape_macros(FILE *out, const char *stem, const char *what, const Type *t) {
  char ts[128];
  fprintf(out, "/* %s: %s */\n", what, type_str(t, ts, sizeof ts));
  fprintf(out, "#define %s_RANK %d\n", stem, t->rank);
  if (t->rank) {
    fprintf(out, "#define %s_DIMS {", stem);
    for (int d = 0; d < t->rank; d++)
      fprintf(out, "%s%lld", d ? ", " : "", (long long)t->dim[d]);
    fputs("}\n", out);
  }
  for (int d = 0; d < t->rank; d++)
    fprintf(out, "#define %s_DIM%d %lld\n", stem, d, (long long)t->dim[d]);
  fprintf(out, "#define %s_ELEMS %lld\n\n", stem, (long long)type_elems(t));
}

typedef struct Arg {
  const char *name;     /* parameter name */
  const char *stem;     /* macro stem */
  const Type *type;
} Arg;

static void doc_args(FILE *out, const Arg *a, int n, const char *dir) {
  for (int k = 0; k < n; k++) {
    char ts[128];
    fprintf(out, " *   %-10s %s %s, %s_elems == %s_ELEMS\n", a[k].name, dir,
            type_str(a[k].type, ts, sizeof ts), a[k].name, a[k].stem);
  }
}

static void proto_args(FILE *out, const Arg *a, int n, bool in) {
  for (int k = 0; k < n; k++)
    fprintf(out, ", %s%s *%s, int64_t %s_elems", in ? "const " : "", ctype(a[k].type),
            a[k].name, a[k].name);
}

/* The inputs f loads, as arguments. */
static int input_args(Arena *a, const Module *m, const char *prefix, const Func *f,
                      const bool *live, Arg *arg, const char **taken, int *ntaken) {
  int *in = arena_alloc(a, sizeof(int) * (size_t)(m->global.n + 1));
  int n = cg_func_inputs(f, live, in);
  for (int k = 0; k < n; k++) {
    const Global *g = &m->global.a[in[k]];
    arg[k] = (Arg){param_name(a, g->name, taken, *ntaken),
                   arena_printf(a, "%s_%s", prefix, upper(a, g->name)), &g->type};
    taken[(*ntaken)++] = arg[k].name;
  }
  return n;
}

/* The leading dimension all inputs share, or 0. */
static int64_t batch_size(const Module *m) {
  int64_t b = 0;
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    if (g->kind != G_INPUT)
      continue;
    if (!g->type.rank || (b && g->type.dim[0] != b))
      return 0;
    b = g->type.dim[0];
  }
  return b;
}

void cg_plan_memory(const Module *m, int64_t *state, int64_t *work) {
  int ndev = cg_devices(m);
  for (int dev = ndev ? 0 : -1; dev < ndev; dev++) {
    int64_t s = cg_state_layout(m, dev, NULL);
    *state = s > *state ? s : *state;
  }
  for (int k = 0; k < m->func.n; k++)   /* a body's arena lies in its caller's */
    if (!m->func.a[k]->body && m->func.a[k]->work_bytes > *work)
      *work = m->func.a[k]->work_bytes;
}

/* nplan > 0: an elastic build, plans for devices[k] devices (m the first),
 * whose ranks need at most most[0] of state and most[1] of work. */
static void write_header(FILE *out, const Module *m, const CgTargets *ts, const char *base,
                         const int64_t *most, const int *devices, int nplan) {
  Arena *a = m->arena;
  const char *P = upper(a, m->name), *n = m->name;
  int ndev = cg_devices(m);
  const Func *fwd = cg_device_func(m, "forward", ndev ? 0 : -1);
  const Func *train = cg_device_func(m, "train_step", ndev ? 0 : -1);
  int cap = m->global.n + fwd->inst.n + 1;
  const char **taken = arena_alloc(a, sizeof(char *) * (size_t)(2 * cap));
  int ntaken = 0;
  Arg *fin = arena_alloc(a, sizeof(Arg) * (size_t)cap);
  Arg *tin = arena_alloc(a, sizeof(Arg) * (size_t)cap);
  Arg *fout = arena_alloc(a, sizeof(Arg) * (size_t)cap);
  const bool *live = cg_live(fwd);
  int nfin = input_args(a, m, P, fwd, live, fin, taken, &ntaken);
  ntaken = 0;
  int ntin = train ? input_args(a, m, P, train, NULL, tin, taken, &ntaken) : 0;
  ntaken = 0;
  for (int k = 0; k < nfin; k++)
    taken[ntaken++] = fin[k].name;
  const Inst **outs = arena_alloc(a, sizeof(Inst *) * (size_t)cap);
  int nfout = cg_func_outputs(fwd, live, outs);
  for (int k = 0; k < nfout; k++) {
    const char *name = ir_get_str(outs[k], "name", "out");
    const char *stem = arena_printf(a, "%s_%s", P, upper(a, name));
    if (ir_find_global(m, name))
      stem = arena_printf(a, "%s_OUT", stem);
    fout[k] = (Arg){param_name(a, name, taken, ntaken), stem, &outs[k]->in[0]->type};
    taken[ntaken++] = fout[k].name;
  }
  int64_t state = 0, work = 0;
  cg_plan_memory(m, &state, &work);
  if (most) {
    state = most[0] > state ? most[0] : state;
    work = most[1] > work ? most[1] : work;
  }

  fprintf(out,
          "/* %s: the interface of model %s, generated by dtc %s. Do not edit.\n"
          " *\n"
          " * Link the object file dtc wrote beside this header with libdtrt (and\n"
          " * OpenBLAS and libm, which libdtrt needs). A model (%s *) holds the params,\n"
          " * the optimizer state and a step counter. Functions that return int\n"
          " * return 0 on success, otherwise a DtStatus code of dtrt.h (1 bad argument,\n"
          " * 2 out of memory, 3 I/O, 4 malformed file, 5 file does not fit the model,\n"
          " * 6 checksum, 7 communication, 8 internal); %s_error() tells why.\n"
          " * Buffers are row-major; each comes with its element count, which must\n"
          " * equal the _ELEMS macro of its shape. */\n",
          base, n, DTC_VERSION, n, n);
  if (nplan) {
    char list[256] = "";
    for (int k = 0, at = 0; k < nplan && at < 200; k++)
      at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", k ? ", " : "", devices[k]);
    fprintf(out,
            "\n/* Elastic: %s is compiled for jobs of %s ranks (dtc --devices), a plan\n"
            " * for each (%s_PLAN_DEVICES), and %s_create takes the plan of the job's\n"
            " * rank count (its MPI_COMM_WORLD size; 1 when no MPI launcher started the\n"
            " * process), or fails on every rank for any other count. Every rank runs the\n"
            " * same program and makes the same calls, in the same order, with the whole\n"
            " * batch (or, the _local calls, its own rows of it: %s_input_rows). The\n"
            " * functions below are collective, and when one rank fails, all return its\n"
            " * error. %s_save writes one file of whole tensors in a directory every rank\n"
            " * sees, which %s_load reads under any plan: a job saved on 3 ranks resumes\n"
            " * on 2. Shapes are those of whole tensors; memory sizes are per rank, for\n"
            " * the rank and plan that need most. */\n",
            n, list, P, n, n, n, n);
  } else if (ndev)
    fprintf(out,
            "\n/* SPMD: %s is compiled for a job of %s_DEVICES ranks, one per device of\n"
            " * its mesh, started by an MPI launcher (mpirun -np %d ./app, or srun).\n"
            " * Every rank runs the same program and makes the same calls, in the same\n"
            " * order, with the whole batch: each rank computes on its own part of it and\n"
            " * of the params, and every rank gets the whole outputs and the loss of the\n"
            " * whole batch. A rank that reads only its own rows of the batch passes\n"
            " * those to %s_train_step_local and %s_forward_local instead\n"
            " * (%s_input_rows says which rows are its). The functions below are\n"
            " * collective, and when one rank\n"
            " * fails, all return its error. %s_create fails on every rank unless the\n"
            " * job has exactly %s_DEVICES ranks. %s_save writes one file of whole\n"
            " * tensors, each rank its own part, in a directory every rank sees; any\n"
            " * build of %s (any plan or rank count) loads it. Shapes are those of whole\n"
            " * tensors; memory sizes are per rank, for the rank that needs most. */\n",
            n, P, ndev, n, n, n, n, P, n, n);
  fprintf(out, "#ifndef %s_H\n#define %s_H\n\n#include <stddef.h>\n#include <stdint.h>\n\n", P, P);
  fputs("#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n", out);

  if (m->dim.n) {
    fputs("/* The model's dimensions (set with dtc -D NAME=VALUE). */\n", out);
    for (int k = 0; k < m->dim.n; k++)
      fprintf(out, "#define %s_DIM_%s %lld\n", P, upper(a, m->dim.a[k].name),
              (long long)m->dim.a[k].value);
    fputs("\n", out);
  }
  int64_t batch = batch_size(m);
  if (batch > 0)
    fprintf(out, "/* The batch size: the leading dimension of every input. */\n"
                 "#define %s_BATCH %lld\n\n", P, (long long)batch);
  if (nplan) {
    fprintf(out, "/* The rank counts the model has plans for (an initialiser), how many,\n"
                 " * and the largest. */\n#define %s_PLAN_DEVICES {", P);
    for (int k = 0; k < nplan; k++)
      fprintf(out, "%s%d", k ? ", " : "", devices[k]);
    fprintf(out, "}\n#define %s_PLANS %d\n#define %s_DEVICES %d\n\n", P, nplan, P,
            devices[nplan - 1]);
  } else {
    fprintf(out, "/* The number of devices (ranks) the model is compiled for. */\n"
                 "#define %s_DEVICES %d\n\n", P, ndev ? ndev : 1);
  }
  fputs("/* Shapes: NAME_RANK, NAME_DIMS (an initialiser), NAME_DIMi, NAME_ELEMS. */\n\n", out);
  for (int k = 0; k < m->global.n; k++) {
    const Global *g = &m->global.a[k];
    static const char *kind[] = {"input", "param", "buffer", "optimizer state"};
    static_assert(COUNTOF(kind) == G_STATE + 1, "global kinds");
    const char *what = arena_printf(a, "%s %s", kind[g->kind], g->name);
    shape_macros(out, arena_printf(a, "%s_%s", P, upper(a, g->name)), what, &g->type);
  }
  for (int k = 0; k < nfout; k++)
    shape_macros(out, fout[k].stem,
                 arena_printf(a, "output %s of %s_forward", ir_get_str(outs[k], "name", "out"), n),
                 fout[k].type);
  fprintf(out, "/* Memory a model takes: params and optimizer state, activations. */\n");
  fprintf(out, "#define %s_STATE_BYTES %lld\n#define %s_WORK_BYTES %lld\n\n", P,
          (long long)state, P, (long long)work);
  int mr, nr;
  cg_gemm_tile(ts, 0, &mr, &nr);
  fprintf(out, "/* The micro-tile of dtc's GEMM on device 0's target: the rows and columns of\n"
               " * a product it computes at once (dtc-probe writes them as tile_m, tile_n). */\n"
               "#define %s_GEMM_TILE_M %d\n#define %s_GEMM_TILE_N %d\n\n", P, mr, P, nr);

  fprintf(out, "/* A model. */\ntypedef struct %s %s;\n\n", n, n);
  fprintf(out,
          "/* Creates a model: params drawn from their initialisers with seed (the same\n"
          " * seed gives the same values on every machine), optimizer state zero, step 0.\n"
          " * On failure *m is NULL and %s_error(NULL) tells why. */\n"
          "int %s_create(%s **m, uint64_t seed);\n\n",
          n, n, n);
  if (train) {
    fprintf(out, "/* One training step on a batch: forward, backward and the %s update of\n"
                 " * every param; the step counter then advances by one.\n",
            m->train.opt >= 0 ? ir_opt_names[m->train.opt] : "optimizer");
    doc_args(out, tin, ntin, "in ");
    fprintf(out, " *   %-10s out f32[]: the batch's %s before the update */\n", "loss",
            m->train.loss ? m->train.loss : "loss");
    fprintf(out, "int %s_train_step(%s *m", n, n);
    proto_args(out, tin, ntin, true);
    fputs(", float *loss);\n\n", out);

    /* the learning rate from C */
    char lr[64];
    snprintf(lr, sizeof lr, "%.9g", m->train.lr);
    fprintf(out,
            "/* The base learning rate of the steps that follow: lr (finite, >= 0) in\n"
            " * place of the compiled %s. It is the rate the schedule scales (%s):\n"
            " * warm-up and cosine decay go on from the current step with the new\n"
            " * base, as torch.optim's param_groups' lr with a constant schedule.\n"
            " * Only the rate changes: momentum and Adam's moments are kept. It is not\n"
            " * saved in checkpoints: set it again after %s_load.%s */\n"
            "int %s_set_lr(%s *m, double lr);\n\n"
            "/* The base learning rate: the last one %s_set_lr set, else %s. */\n"
            "double %s_get_lr(const %s *m);\n\n",
            lr, m->train.schedule >= 0 ? dtrt_schedule_names[m->train.schedule] : "constant", n,
            ndev ? " Every rank\n * sets the same rate." : "", n, n, n, lr, n, n);
  }
  fputs("/* Runs the model on a batch without changing it, in evaluation mode\n"
        " * (dropout is the identity).\n", out);
  doc_args(out, fin, nfin, "in ");
  doc_args(out, fout, nfout, "out");
  fputs(" */\n", out);
  fprintf(out, "int %s_forward(%s *m", n, n);
  proto_args(out, fin, nfin, true);
  proto_args(out, fout, nfout, false);
  fputs(");\n\n", out);

  /* this rank's rows of the batch */
  fprintf(out,
          "/* Rows [*begin, *begin + *count) of input's first dimension (the batch)\n"
          " * are this rank's: all of them for an input not split over ranks, or a\n"
          " * model for one device. Either pointer may be NULL; 1 if the model has no\n"
          " * input of that name. */\n"
          "int %s_input_rows(const %s *m, const char *input, int64_t *begin, int64_t *count);\n\n"
          "/* This process's rank in the job (0 for a model of one device): the one\n"
          " * to print from is rank 0. */\n"
          "int %s_rank(const %s *m);\n\n"
          "/* This rank's memory for the model, in bytes (either pointer may be\n"
          " * NULL): the most libdtrt held at once for it since %s_create, and how\n"
          " * much the process's peak resident set grew from just before the\n"
          " * model's blocks were allocated (-1 if unknown). dtc --emit=plan\n"
          " * predicts the first for each device. */\n"
          "int %s_memory(const %s *m, int64_t *peak_bytes, int64_t *rss_growth);\n\n",
          n, n, n, n, n, n, n);
  if (train) {
    fprintf(out,
            "/* %s_train_step on this rank's rows of each input alone (%s_input_rows;\n"
            " * each x_elems is count times the elements of a row, and a rank with no\n"
            " * rows of an input may pass NULL). The loss is the whole batch's. */\n"
            "int %s_train_step_local(%s *m",
            n, n, n, n);
    proto_args(out, tin, ntin, true);
    fputs(", float *loss);\n\n", out);
  }
  fprintf(out,
          "/* %s_forward on this rank's rows of each input alone; the outputs are\n"
          " * whole, as %s_forward's. */\n"
          "int %s_forward_local(%s *m",
          n, n, n, n);
  proto_args(out, fin, nfin, true);
  proto_args(out, fout, nfout, false);
  fputs(");\n\n", out);
  fprintf(out,
          "/* Writes params, optimizer state and step counter to path: one\n"
          " * safetensors file of whole tensors, checksummed, replaced atomically\n"
          " * (dtc-ckpt lists and verifies it). */\n"
          "int %s_save(%s *m, const char *path);\n\n"
          "/* Reads a checkpoint that %s_save wrote for this model in any build of\n"
          " * it (one process or any plan; an inference build takes the params and\n"
          " * skips the optimizer state); on failure the model is unchanged. */\n"
          "int %s_load(%s *m, const char *path);\n\n"
          "/* Writes the params alone to path as a plain safetensors file, named as\n"
          " * in the model (for PyTorch and other tools; inference builds load it). */\n"
          "int %s_export(%s *m, const char *path);\n\n"
          "/* Starts from other weights (PyTorch's): reads the params and buffers\n"
          " * from a plain safetensors file named as the model names them (a repeated\n"
          " * block's stacked param B.p [N, ...] also from its slices B.0.p ...), each f32\n"
          " * (or i32) of the declared shape: torch's nn.Linear weight [out, in] is\n"
          " * exported transposed, w.t(), for a model's x @ w. The optimizer state\n"
          " * starts fresh and the step counter at 0. A missing, extra or mistyped\n"
          " * tensor refuses the whole file (%s_error counts them and names the\n"
          " * first few), and the model is unchanged. */\n"
          "int %s_load_params(%s *m, const char *path);\n\n"
          "/* The number of training steps taken. */\n"
          "int64_t %s_step(const %s *m);\n\n"
          "/* The message of the last failure of m, \"\" if none; with m NULL, why\n"
          " * this thread's last %s_create failed (\"\" if it did not). */\n"
          "const char *%s_error(const %s *m);\n\n"
          "/* Frees the model; m may be NULL. */\n"
          "void %s_destroy(%s *m);\n\n",
          n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n, n);
  fprintf(out, "#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

bool cg_write_header(const Module *m, const CgTargets *ts, const char *path, Diag *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  DTC_ASSERT(out);
  const char *base = strrchr(path, '/');
  write_header(out, m, ts, base ? base + 1 : path, NULL, NULL, 0);
  fclose(out);
  bool ok = cg_write_file(path, text, len, d);
  free(text);
  return ok;
}

bool cg_write_header_plans(const Module *m, const CgTargets *ts, const int *devices, int n,
                           const int64_t most[2], const char *path, Diag *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  DTC_ASSERT(out);
  const char *base = strrchr(path, '/');
  write_header(out, m, ts, base ? base + 1 : path, most, devices, n);
  fclose(out);
  bool ok = cg_write_file(path, text, len, d);
  free(text);
  return ok;
}
