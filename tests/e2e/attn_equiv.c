/* attn_equiv.c: a GPT block (examples/gpt.dt's, inline) written with
 * scaled_dot_product_attention and written out (softmax(causal_mask(q k /
 * sqrt(Dh))) v, the [B, H, T, T] scores stored) computes the same loss and
 * the same gradients: three SGD steps, each from the same state (the written
 * out model's gradients make the step of both), through the reference
 * interpreter. Tolerance, relative to each tensor's largest magnitude:
 * 8 (T + Dh + B T + 4 D + 16) 2^-24, what sums of the attention's and the
 * weight gradients' lengths in float can do. Exit 0 when all agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"
#include "ir.h"
#include "passes.h"

enum { B = 2, T = 70, D = 32, H = 4, V = 24, STEPS = 3, MAXG = 32 };

static const char *const model_text =
    "model gpt(batch B = %d, T = %d, D = %d, H = %d, V = %d) {\n"
    "  input  ids:  i32[B, T]\n"
    "  input  next: i32[B, T]\n"
    "  param  tok:  f32[V, D]\n"
    "  param  pos:  f32[T, D]\n"
    "  param  g1:   f32[D]\n"
    "  param  c1:   f32[D]\n"
    "  param  wq:   f32[D, D]\n"
    "  param  wk:   f32[D, D]\n"
    "  param  wv:   f32[D, D]\n"
    "  param  wo:   f32[D, D]\n"
    "  param  w_up: f32[D, 4 * D]\n"
    "  param  w_dn: f32[4 * D, D]\n"
    "  param  w_out: f32[D, V]\n"
    "  x      = embedding(tok, ids) + pos\n"
    "  a      = layer_norm(x, g1, c1)\n"
    "  q      = transpose(reshape(a @ wq, [B, T, H, D / H]), [0, 2, 1, 3])\n"
    "  v      = transpose(reshape(a @ wv, [B, T, H, D / H]), [0, 2, 1, 3])\n"
    "%s"
    "  x2     = x + reshape(transpose(o, [0, 2, 1, 3]), [B, T, D]) @ wo\n"
    "  x3     = x2 + gelu(layer_norm(x2) @ w_up) @ w_dn\n"
    "  logits = reshape(layer_norm(x3) @ w_out, [B * T, V])\n"
    "  loss   = cross_entropy(logits, reshape(next, [-1]))\n"
    "  output loss\n"
    "}\n";

static const char *const by_op =
    "  k      = transpose(reshape(a @ wk, [B, T, H, D / H]), [0, 2, 1, 3])\n"
    "  o      = scaled_dot_product_attention(q, k, v, is_causal = true)\n";

static const char *const written_out =
    "  k      = transpose(reshape(a @ wk, [B, T, H, D / H]), [0, 2, 3, 1])\n"
    "  o      = softmax(causal_mask(q @ k / sqrt(D / H)), axis = -1) @ v\n";

typedef struct Model {
  Arena *a;
  Module *m;
  Interp *it;
  int np;
  const char *name[MAXG];
  int64_t n[MAXG];
} Model;

static bool build(Model *md, const char *attention) {
  Diag d;
  diag_init(&d, stderr);
  md->a = arena_new();
  const char *text = arena_printf(md->a, model_text, B, T, D, H, V, attention);
  md->m = fe_compile(md->a, src_from_string(md->a, "attn.dt", text), NULL, 0, &d);
  if (!md->m)
    return false;
  md->m->train.loss = "loss";
  if (!autodiff_grads(md->m, ir_find_func(md->m, "forward"), "grads", &d))
    return false;
  md->it = interp_new(md->m);
  md->np = 0;
  for (int k = 0; k < md->m->global.n; k++) {
    const Global *g = &md->m->global.a[k];
    if (g->kind == G_PARAM && md->np < MAXG) {
      md->name[md->np] = g->name;
      md->n[md->np++] = type_elems(&g->type);
    }
  }
  return true;
}

static uint64_t rng = 12345;

static float uniform(double scale) {
  rng = rng * 6364136223846793005u + 1442695040888963407u;
  return (float)(((double)(rng >> 11) / 9007199254740992.0 * 2 - 1) * scale);
}

/* Largest |got - want| over largest |want|. */
static double rel_diff(const float *got, const float *want, int64_t n) {
  double diff = 0, mag = 1e-30;
  for (int64_t k = 0; k < n; k++) {
    diff = fmax(diff, fabs((double)got[k] - want[k]));
    mag = fmax(mag, fabs(want[k]));
  }
  return diff / mag;
}

int main(void) {
  Model op, ref;
  if (!build(&op, by_op) || !build(&ref, written_out))
    return 1;
  if (op.np != ref.np) {
    fprintf(stderr, "attn_equiv: %d params against %d\n", op.np, ref.np);
    return 1;
  }
  int32_t ids[B * T], next[B * T];
  for (int k = 0; k < B * T; k++)
    ids[k] = (int32_t)(k * 7 % V), next[k] = (int32_t)((k * 7 + 3) % V);
  float *p[MAXG], *g_op[MAXG], *g_ref[MAXG];
  for (int j = 0; j < op.np; j++) {
    p[j] = malloc(sizeof(float) * (size_t)op.n[j]);
    g_op[j] = malloc(sizeof(float) * (size_t)op.n[j]);
    g_ref[j] = malloc(sizeof(float) * (size_t)op.n[j]);
    bool gain = op.name[j][0] == 'g';
    for (int64_t k = 0; k < op.n[j]; k++)
      p[j][k] = gain ? 1 + uniform(0.1) : uniform(0.5);
  }
  double tol = 8.0 * (T + D / H + B * T + 4 * D + 16) * 0x1p-24, worst = 0;
  bool ok = true;
  for (int step = 0; step < STEPS; step++) {
    float loss_op, loss_ref;
    void *out_op[1 + MAXG] = {&loss_op}, *out_ref[1 + MAXG] = {&loss_ref};
    for (int j = 0; j < op.np; j++) {
      out_op[1 + j] = g_op[j], out_ref[1 + j] = g_ref[j];
      interp_set_global(op.it, op.name[j], p[j]);
      interp_set_global(ref.it, op.name[j], p[j]);
    }
    Model *both[2] = {&op, &ref};
    for (int m = 0; m < 2; m++) {
      interp_set_global(both[m]->it, "ids", ids);
      interp_set_global(both[m]->it, "next", next);
      if (!interp_run(both[m]->it, "grads", m ? out_ref : out_op)) {
        fprintf(stderr, "attn_equiv: %s\n", interp_error(both[m]->it));
        return 1;
      }
    }
    double dl = fabs(loss_op - loss_ref) / fabs(loss_ref);
    printf("step %d: loss %.7g and %.7g (written out), relative difference %.2g\n", step,
           loss_op, loss_ref, dl);
    ok &= dl <= tol;
    for (int j = 0; j < op.np; j++) {
      double r = rel_diff(g_op[j], g_ref[j], op.n[j]);
      worst = fmax(worst, r);
      if (!(r <= tol)) {
        printf("  d%s differs: %.3g of its largest magnitude\n", op.name[j], r);
        ok = false;
      }
      for (int64_t k = 0; k < op.n[j]; k++)
        p[j][k] -= 0.5f * g_ref[j][k];
    }
  }
  printf("attn_equiv: gradients within %.2g of their largest magnitude (tolerance %.2g): %s\n",
         worst, tol, ok ? "agree" : "DIFFER");
  for (int j = 0; j < op.np; j++)
    free(p[j]), free(g_op[j]), free(g_ref[j]);
  Model *both[2] = {&op, &ref};
  for (int m = 0; m < 2; m++) {
    interp_free(both[m]->it);
    arena_free(both[m]->a);
  }
  return ok ? 0 : 1;
}
