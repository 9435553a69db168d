/* conv_grads.c: one expression of the language over params of given shapes,
 * run through the reference interpreter with its derivatives, printed as
 * text for an independent implementation to redo: each param's values, the
 * result y, and d loss / d param for loss = sum(y * y) / 2. Used by
 * conv_torch.sh against PyTorch, which evaluates the same expression text.
 * A name given as NAME:f32:DIMS or NAME:i32:DIMS is an input instead, which
 * gets no derivative: f32 values in [-1, 1) or, one in ten, -inf; i32 ones
 * 0 (one in four) or 1. Forward and derivatives store nothing, so both
 * run at step 0 and draw the same dropout masks.
 *
 *     conv_grads 'x:2,3,7,8 w:4,3,3,3' 'conv2d(x, w, stride = 2, padding = 1)'
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { MAXP = 4 };

static void print(const char *what, const float *v, int64_t n) {
  printf("%s", what);
  for (int64_t k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: conv_grads 'NAME:D,D,.. ...' EXPR\n");
    return 2;
  }
  Arena *a = arena_new();
  Diag d;
  diag_init(&d, stderr);
  char *spec = arena_strdup(a, argv[1]), *decls = "", *inputs = "", *name[MAXP], *iname[MAXP];
  int np = 0, ni = 0;
  bool i32[MAXP] = {false};
  for (char *tok = strtok(spec, " "); tok; tok = strtok(NULL, " ")) {
    char *colon = strchr(tok, ':');
    if (!colon || np == MAXP || ni == MAXP) {
      fprintf(stderr, "conv_grads: bad param '%s'\n", tok);
      return 2;
    }
    *colon = 0;
    if (!strncmp(colon + 1, "f32:", 4) || !strncmp(colon + 1, "i32:", 4)) {
      i32[ni] = colon[1] == 'i';
      iname[ni++] = tok;
      inputs = arena_printf(a, "%s  input %s: %.3s[%s]\n", inputs, tok, colon + 1, colon + 5);
      continue;
    }
    name[np++] = tok;
    decls = arena_printf(a, "%s  param %s: f32[%s] init zeros\n", decls, tok, colon + 1);
  }
  decls = arena_printf(a, "%s%s", decls, inputs);
  const char *text = arena_printf(a,
                                  "model q(batch B = 1) {\n"
                                  "%s"
                                  "  y = %s\n"
                                  "  loss = sum(y * y) * 0.5\n"
                                  "  output y\n"
                                  "  output loss\n"
                                  "}\n",
                                  decls, argv[2]);
  Module *m = fe_compile(a, src_from_string(a, "q.dt", text), NULL, 0, &d);
  if (!m)
    return 1;
  Func *fwd = ir_find_func(m, "forward");
  m->train.loss = "loss";
  Func *g = fwd ? autodiff_grads(m, fwd, "grads", &d) : NULL;
  if (!g)
    return 1;
  Interp *it = interp_new(m);
  void *out[1 + MAXP] = {NULL};
  float loss;
  out[0] = &loss;
  uint64_t s = 12345;
  for (int p = 0; p < np; p++) {
    const Global *gl = ir_find_global(m, name[p]);
    int64_t n = type_elems(&gl->type);
    float *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t k = 0; k < n; k++) {
      s = s * 6364136223846793005u + 1442695040888963407u;
      v[k] = (float)((double)(s >> 11) / 9007199254740992.0 * 2 - 1);
    }
    interp_set_global(it, name[p], v);
    print(arena_printf(a, "param %s", name[p]), v, n);
    free(v);
    out[1 + p] = malloc(sizeof(float) * (size_t)n);
  }
  for (int p = 0; p < ni; p++) {
    const Global *gl = ir_find_global(m, iname[p]);
    int64_t n = type_elems(&gl->type);
    float *v = malloc(sizeof(float) * (size_t)n);
    int32_t *w = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t k = 0; k < n; k++) {
      s = s * 6364136223846793005u + 1442695040888963407u;
      double u = (double)(s >> 11) / 9007199254740992.0;
      w[k] = u >= 0.25;
      v[k] = i32[p] ? (float)w[k] : u < 0.1 ? -INFINITY : (float)(u * 2 - 1);
    }
    interp_set_global(it, iname[p], i32[p] ? (void *)w : (void *)v);
    print(arena_printf(a, "input %s", iname[p]), v, n);
    free(v);
    free(w);
  }
  Inst *y = NULL;
  for (int k = 0; k < fwd->inst.n; k++)
    if (fwd->inst.a[k]->op == OP_output && !strcmp(ir_get_str(fwd->inst.a[k], "name", ""), "y"))
      y = fwd->inst.a[k]->in[0];
  int64_t ny = type_elems(&y->type);
  float *yv = malloc(sizeof(float) * (size_t)ny);
  if (!interp_run(it, "forward", (void *[]){yv, NULL}) || !interp_run(it, "grads", out)) {
    fprintf(stderr, "conv_grads: %s\n", interp_error(it));
    return 1;
  }
  printf("shape");
  for (int k = 0; k < y->type.rank; k++)
    printf(" %lld", (long long)y->type.dim[k]);
  printf("\n");
  print("y", yv, ny);
  for (int p = 0; p < np; p++) {
    print(arena_printf(a, "grad %s", name[p]), out[1 + p],
          type_elems(&ir_find_global(m, name[p])->type));
    free(out[1 + p]);
  }
  free(yv);
  interp_free(it);
  arena_free(a);
  return 0;
}
