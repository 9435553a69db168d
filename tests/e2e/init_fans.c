/* init_fans.c: the initial params of tests/e2e/init_fans.dt, compiled by dtc,
 * lie within glorot's bound sqrt(6 / (fan_in + fan_out)) with fans as
 * torch.nn.init.xavier_uniform_ takes them, and reach to within 10% of it
 * (so a bound from other fans, larger or smaller, fails). Exit 1 with a
 * message when they do not. */
#include <math.h>
#include <stdio.h>

#include "dtrt.h"
#include "init_fans.h"

/* 0 when every value of name's n lies within bound and the largest is over
 * 0.9 bound. */
static int check(init_fans *m, const char *name, int64_t n, double fan_in, double fan_out) {
  const float *p = dtrt_model_tensor((DtModel *)m, name);
  if (!p) {
    fprintf(stderr, "init_fans: no param %s\n", name);
    return 1;
  }
  double bound = sqrt(6.0 / (fan_in + fan_out)), top = 0;
  for (int64_t k = 0; k < n; k++)
    top = fmax(top, fabs(p[k]));
  if (top > bound || top < 0.9 * bound) {
    fprintf(stderr, "init_fans: %s: largest |value| %.6f, glorot's bound %.6f\n", name, top,
            bound);
    return 1;
  }
  return 0;
}

int main(void) {
  init_fans *m;
  if (init_fans_create(&m, 1)) {
    fprintf(stderr, "init_fans: cannot create the model\n");
    return 1;
  }
  int bad = check(m, "w", 8 * 4 * 9, 4 * 9, 8 * 9) + check(m, "v", 288 * 10, 288, 10) +
            check(m, "layers.k", 2 * 4 * 4 * 9, 4 * 9, 4 * 9);
  init_fans_destroy(m);
  return bad != 0;
}
