/* schedule.c: learning-rate schedules, with Adam's bias correction folded in
 * (dtrt.h states the formulas). */
#include <math.h>

#include "dtrt_int.h"

float dtrt_lr(int kind, double base, int64_t warmup, int64_t total, double arg, double beta1,
              double beta2, int64_t step) {
  if (step < 0)
    step = 0;
  double lr = base, t = (double)step + 1;
  bool warms = kind > DT_SCHED_CONSTANT && kind < DT_SCHED_COUNT;
  if (warms && step < warmup) {
    lr = base * t / (double)warmup;
  } else if (kind == DT_SCHED_COSINE || kind == DT_SCHED_LINEAR) {
    double f = total > warmup ? (double)(step - warmup) / (double)(total - warmup) : 1;
    f = f < 1 ? f : 1;
    if (kind == DT_SCHED_COSINE)
      lr = arg + (base - arg) * 0.5 * (1 + cos(3.14159265358979323846 * f));
    else
      lr = base * (1 + (arg - 1) * f);
  } else if (kind == DT_SCHED_STEP && total > 0) {
    lr = base * pow(arg, (double)((step - warmup) / total));
  }
  if (beta2 > 0)
    lr *= sqrt(1 - pow(beta2, t));
  if (beta1 > 0)
    lr /= 1 - pow(beta1, t);
  return (float)lr;
}

float dtrt_step_lr(const DtrtCtx *ctx, int kind, double base, int64_t warmup, int64_t total,
                   double arg, double beta1, double beta2, int64_t step) {
  return dtrt_lr(kind, ctx && ctx->lr_set ? ctx->lr : base, warmup, total, arg, beta1, beta2,
                 step);
}
