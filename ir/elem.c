/* elem.c: the value of one element of every elementwise op (K_ELEM), the
 * reference for the interpreter and for tests of generated loops. */
#include <math.h>

#include "ir.h"

/* clamp's bounds in f32: -inf and inf when absent. */
void ir_clamp_bounds(const Inst *i, float *lo, float *hi) {
  *lo = (float)ir_get_float(i, "min", -INFINITY);
  *hi = (float)ir_get_float(i, "max", INFINITY);
}

/* clamp_grad's test: x inside the bounds (closed, or open for hardtanh). */
static bool inside(const Inst *i, float x) {
  float lo, hi;
  ir_clamp_bounds(i, &lo, &hi);
  return ir_get_int(i, "open", 0) ? !(x <= lo || x >= hi) : x >= lo && x <= hi;
}

/* Unary ops ignore b; relu_grad and gelu_grad take (x, dy). */
float ir_elem_eval(const Inst *inst, float a, float b) {
  switch (inst->op) {
  case OP_add: return a + b;
  case OP_sub: case OP_bn_center: return a - b;
  case OP_mul: case OP_bn_scale: return a * b;
  case OP_div: return a / b;
  case OP_neg: return -a;
  case OP_exp: return expf(a);
  case OP_log: return logf(a);
  case OP_sqrt: return sqrtf(a);
  case OP_tanh: return tanhf(a);
  case OP_sigmoid: return 1.0f / (1.0f + expf(-a));
  case OP_relu: return a > 0 ? a : 0.0f;
  case OP_gelu: return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
  case OP_gelu_tanh:
    return 0.5f * a * (1.0f + tanhf(IR_GELU_C * (a + IR_GELU_A * a * a * a)));
  case OP_relu_grad: return a > 0 ? b : 0.0f;
  case OP_gelu_grad: {   /* Phi(x) + x phi(x) */
    float cdf = 0.5f * (1.0f + erff(a * 0.70710678118654752f));
    return b * (cdf + a * 0.39894228040143268f * expf(-0.5f * a * a));
  }
  case OP_gelu_tanh_grad: {
    float th = tanhf(IR_GELU_C * (a + IR_GELU_A * a * a * a));
    float du = IR_GELU_C * (1.0f + 3.0f * IR_GELU_A * a * a);
    return b * (0.5f * (1.0f + th) + 0.5f * a * (1.0f - th * th) * du);
  }
  case OP_gt: return a > b ? 1.0f : 0.0f;
  case OP_ge: return a >= b ? 1.0f : 0.0f;
  case OP_eq: return a == b ? 1.0f : 0.0f;
  case OP_ne: return a != b ? 1.0f : 0.0f;
  case OP_where_true: return a != 0 ? b : -0.0f;
  case OP_where_false: return a != 0 ? -0.0f : b;
  case OP_maximum: return a >= b || a != a ? a : b;
  case OP_minimum: return a <= b || a != a ? a : b;
  case OP_pow: return powf(a, b);
  case OP_clamp: {
    float lo, hi;
    ir_clamp_bounds(inst, &lo, &hi);
    float v = a < lo ? lo : a;
    return v > hi ? hi : v;
  }
  case OP_clamp_grad: return inside(inst, a) ? b : 0.0f;
  default: DTC_UNREACHABLE();
  }
}
