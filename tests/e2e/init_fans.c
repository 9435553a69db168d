/* init_fans.c: the initial params of tests/e2e/init_fans.dt, compiled by dtc,
 * lie within glorot's bound sqrt(6 / (fan_in + fan_out)) with fans as
 * torch.nn.init.xavier_uniform_ takes them, and reach to within 10% of it
 * (so a bound from other fans, larger or smaller, fails); and so do those
 * of kaiming_uniform, gain sqrt(2 / (1 + a^2)) times sqrt(3 / fan_in), its
 * fan_in torch.nn.init.kaiming_uniform_'s. Exit 1 with a message when they
 * do not. */
#include <math.h>
#include <stdio.h>

#include "dtrt.h"
#include "init_fans.h"

/* 0 when every value of name's n lies within bound and the largest is over
 * 0.9 bound. */
static int within(init_fans *m, const char *name, int64_t n, double bound) {
  const float *p = dtrt_model_tensor((DtModel *)m, name);
  if (!p) {
    fprintf(stderr, "init_fans: no param %s\n", name);
    return 1;
  }
  double top = 0;
  for (int64_t k = 0; k < n; k++)
    top = fmax(top, fabs(p[k]));
  if (top > bound || top < 0.9 * bound) {
    fprintf(stderr, "init_fans: %s: largest |value| %.6f, the bound %.6f\n", name, top, bound);
    return 1;
  }
  return 0;
}

static int check(init_fans *m, const char *name, int64_t n, double fan_in, double fan_out) {
  return within(m, name, n, sqrt(6.0 / (fan_in + fan_out)));
}

static int kaiming(init_fans *m, const char *name, int64_t n, double fan_in, double a) {
  return within(m, name, n, sqrt(2.0 / (1 + a * a)) * sqrt(3.0 / fan_in));
}

int main(void) {
  init_fans *m;
  if (init_fans_create(&m, 1)) {
    fprintf(stderr, "init_fans: cannot create the model\n");
    return 1;
  }
  int bad = check(m, "w", 8 * 4 * 9, 4 * 9, 8 * 9) + check(m, "v", 288 * 10, 288, 10) +
            check(m, "layers.k", 2 * 4 * 4 * 9, 4 * 9, 4 * 9) +
            kaiming(m, "ku", 8 * 4 * 9, 4 * 9, sqrt(5.0)) + kaiming(m, "kv", 100, 10, 0);
  init_fans_destroy(m);
  return bad != 0;
}
