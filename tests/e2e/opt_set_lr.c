/* opt_set_lr.c: trains tests/e2e/lsq.dt, compiled by dtc, for 10 steps on a
 * new batch each step, setting the learning rate with lsq_set_lr before
 * steps 3 and 6, and prints what opt_torch.py needs to redo it with
 * torch.optim: the initial weights, each step's batch and learning rate, the
 * loss and the weights after it. Checks lsq_get_lr and lsq_set_lr's refusals
 * on the way (exit 1 with a message when they fail). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtrt.h"
#include "lsq.h"

enum { B = LSQ_BATCH, I = 3, O = 2, STEPS = 10 };

static void print(const char *what, const float *v, int n) {
  printf("%s", what);
  for (int k = 0; k < n; k++)
    printf(" %.9g", v[k]);
  printf("\n");
}

static int fail(const char *what, lsq *m) {
  fprintf(stderr, "opt_set_lr: %s%s%s\n", what, m ? ": " : "", m ? lsq_error(m) : "");
  return 1;
}

int main(void) {
  lsq *m;
  if (lsq_create(&m, 3))
    return fail("cannot create the model", NULL);
  float *w = dtrt_model_tensor((DtModel *)m, "w");
  if (!w)
    return fail("no param w", m);
  for (int k = 0; k < I * O; k++)
    w[k] = (float)((k * 3 % 5) - 2) / 3;
  print("w0", w, I * O);
  if (lsq_get_lr(m) != 0.1)
    return fail("lsq_get_lr is not the compiled 0.1", NULL);
  if (!lsq_set_lr(m, -1) || !strstr(lsq_error(m), "finite and >= 0, not -1") ||
      !lsq_set_lr(m, NAN) || lsq_get_lr(m) != 0.1)
    return fail("lsq_set_lr takes a negative or NaN rate", m);
  const double rate[STEPS] = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.2, 0.2, 0.2, 0.2};
  for (int s = 0; s < STEPS; s++) {
    float x[B * I], y[B * O], loss;
    for (int k = 0; k < B * I; k++)
      x[k] = (float)(((k + 5 * s) * 7 % 11) - 5) / 4;
    for (int k = 0; k < B * O; k++)
      y[k] = (float)(((k + 3 * s) * 5 % 7) - 3) / 2;
    if (rate[s] != lsq_get_lr(m) && lsq_set_lr(m, rate[s]))
      return fail("lsq_set_lr", m);
    if (lsq_get_lr(m) != rate[s])
      return fail("lsq_get_lr is not the rate just set", NULL);
    print("x", x, B * I);
    print("y", y, B * O);
    printf("lr %.9g\n", rate[s]);
    if (lsq_train_step(m, x, B * I, y, B * O, &loss))
      return fail("lsq_train_step", m);
    printf("loss %.9g\n", loss);
    print("w", w, I * O);
  }
  lsq_destroy(m);
  return 0;
}
