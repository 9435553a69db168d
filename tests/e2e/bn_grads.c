/* bn_grads.c: one expression of the language over params and buffers (batch
 * norm's running statistics) of given shapes, through the reference
 * interpreter: the training forward, d loss / d param for loss =
 * sum(y * y) / 2, the buffers after that step, and the evaluation forward
 * (the eval pass) on the buffers after a second step. Prints it all as text
 * for bn_torch.py to redo with PyTorch; with --fd instead checks each
 * derivative against central finite differences of the training forward.
 *
 *     bn_grads [--fd] 'x:4,3,5,5 r:4,3,5,5 @rm:3 @rv:3' 'batch_norm(x, rm, rv) * r'
 *
 * A name with '@' is a buffer; rm-like buffers start uniform in [-1, 1],
 * those named rv* in [0.5, 2] (variances). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { MAXP = 8 };

static bool quiet;   /* --fd: only the verdicts */

static void print(const char *what, const float *v, int64_t n) {
  if (quiet)
    return;
  printf("%s", what);
  for (int64_t k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

static uint64_t rng = 12345;
static double uniform(double lo, double hi) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return lo + (double)(rng >> 11) / 9007199254740992.0 * (hi - lo);
}

static float loss_of(Interp *it) {
  float loss;
  if (!interp_run(it, "forward", (void *[]){NULL, &loss})) {
    fprintf(stderr, "bn_grads: %s\n", interp_error(it));
    exit(1);
  }
  return loss;
}

int main(int argc, char **argv) {
  bool fd = argc == 4 && !strcmp(argv[1], "--fd");
  quiet = fd;
  if (argc != 3 + fd) {
    fprintf(stderr, "usage: bn_grads [--fd] 'NAME:D,D,.. @BUF:C ...' EXPR\n");
    return 2;
  }
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  char *spec = arena_strdup(a, argv[1 + fd]), *decls = "", *name[MAXP];
  bool buffer[MAXP];
  int np = 0;
  for (char *tok = strtok(spec, " "); tok; tok = strtok(NULL, " ")) {
    char *colon = strchr(tok, ':');
    if (!colon || np == MAXP) {
      fprintf(stderr, "bn_grads: bad param '%s'\n", tok);
      return 2;
    }
    *colon = 0;
    buffer[np] = tok[0] == '@';
    name[np] = tok + buffer[np];
    decls = arena_printf(a, "%s  %s %s: f32[%s] init zeros\n", decls,
                         buffer[np] ? "buffer" : "param", name[np], colon + 1);
    np++;
  }
  const char *text = arena_printf(a,
                                  "model q(batch B = 1) {\n"
                                  "%s"
                                  "  y = %s\n"
                                  "  loss = sum(y * y) * 0.5\n"
                                  "  output y\n"
                                  "  output loss\n"
                                  "}\n",
                                  decls, argv[2 + fd]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m)
    return 1;
  Func *fwd = ir_find_func(m, "forward");
  m->train.loss = "loss";
  Func *g = fwd ? autodiff_grads(m, fwd, "grads", &d) : NULL;
  if (!g)
    return 1;
  Interp *it = interp_new(m);
  float *val[MAXP], *grad[MAXP];
  int64_t n[MAXP];
  void *out[1 + MAXP] = {NULL};
  float loss;
  out[0] = &loss;
  for (int p = 0, k = 1; p < np; p++) {
    n[p] = type_elems(&ir_find_global(m, name[p])->type);
    val[p] = malloc(sizeof(float) * (size_t)n[p]);
    grad[p] = malloc(sizeof(float) * (size_t)n[p]);
    bool var = buffer[p] && !strncmp(name[p], "rv", 2);
    for (int64_t j = 0; j < n[p]; j++)
      val[p][j] = (float)(var ? uniform(0.5, 2) : uniform(-1, 1));
    interp_set_global(it, name[p], val[p]);
    print(arena_printf(a, "%s %s", buffer[p] ? "buffer" : "param", name[p]), val[p], n[p]);
    if (!buffer[p])
      out[k++] = grad[p];
  }
  Inst *y = NULL;
  for (int k = 0; k < fwd->inst.n; k++)
    if (fwd->inst.a[k]->op == OP_output && !strcmp(ir_get_str(fwd->inst.a[k], "name", ""), "y"))
      y = fwd->inst.a[k]->in[0];
  int64_t ny = type_elems(&y->type);
  float *yv = malloc(sizeof(float) * (size_t)ny);
  if (!interp_run(it, "forward", (void *[]){yv, NULL})) {
    fprintf(stderr, "bn_grads: %s\n", interp_error(it));
    return 1;
  }
  for (int k = 0; !fd && k <= y->type.rank; k++)
    printf(k == y->type.rank ? "\n" : k ? " %lld" : "shape %lld", (long long)y->type.dim[k]);
  print("y", yv, ny);
  for (int p = 0; p < np; p++)
    if (buffer[p])
      print(arena_printf(a, "stats %s", name[p]), interp_global(it, name[p]), n[p]);
  if (!interp_run(it, "grads", out)) {
    fprintf(stderr, "bn_grads: %s\n", interp_error(it));
    return 1;
  }
  int bad = 0;
  for (int p = 0; p < np; p++) {
    if (buffer[p])
      continue;
    if (!fd) {
      print(arena_printf(a, "grad %s", name[p]), grad[p], n[p]);
      continue;
    }
    /* central differences of the training loss, against the largest adjoint */
    double worst = 0, scale = 1e-6;
    for (int64_t j = 0; j < n[p]; j++)
      scale = fmax(scale, fabs(grad[p][j]));
    float *v = interp_global(it, name[p]);
    for (int64_t j = 0; j < n[p]; j++) {
      const float h = 1e-2f, v0 = v[j];
      v[j] = v0 + h;
      double up = loss_of(it);
      v[j] = v0 - h;
      double down = loss_of(it);
      v[j] = v0;
      worst = fmax(worst, fabs((up - down) / (2.0 * h) - grad[p][j]));
    }
    bool ok = worst <= 5e-3 * scale;
    printf("%s: d loss / d %s against finite differences: worst %.3g of %.3g: %s\n", argv[3],
           name[p], worst, scale, ok ? "agree" : "DIFFER");
    bad |= !ok;
  }
  if (!fd) {
    /* evaluation: the running statistics after the two training runs */
    if (!pass_eval(m, &d, NULL) || !interp_run(it, "forward", (void *[]){yv, NULL})) {
      fprintf(stderr, "bn_grads: %s\n", interp_error(it));
      return 1;
    }
    for (int p = 0; p < np; p++)
      if (buffer[p])
        print(arena_printf(a, "running %s", name[p]), interp_global(it, name[p]), n[p]);
    print("yeval", yv, ny);
  }
  for (int p = 0; p < np; p++)
    free(val[p]), free(grad[p]);
  free(yv);
  interp_free(it);
  arena_free(a);
  return bad;
}
