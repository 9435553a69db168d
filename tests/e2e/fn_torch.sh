#!/bin/sh
# fn_torch.sh LOSS_STEPS: the functions PyTorch users reach for (silu, abs,
# leaky_relu, var, std, rms_norm, pow, expand, `dim` and `keepdim` for `axis`,
# comparisons, where, clamp, hardtanh, relu6, maximum, minimum, indexing and
# slicing, integer arithmetic, where of i32 values, i32 values through relu,
# abs, clamp, pow, hardtanh, relu6, maximum and minimum, gather, one_hot,
# arange, cumsum, tril, triu, pow with tensor exponents, clamp of f32
# values with i32 tensor bounds)
# against torch, value and gradient: dtc's loss sum(f(z) * t) through the
# interpreter (loss_steps) against torch's terms f(z) * t in float64
# (fn_torch.py). Skipped (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "fn_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # DTC_LOSS TORCH_TERMS
  "$run" "$1" | "$py" "$dir/fn_torch.py" "$2" || fail=1
}
check "sum(silu(z) * t)" "F.silu(z) * t"
check "sum(silu(z * 8) * t)" "F.silu(z * 8) * t"
check "sum(abs(z) * t)" "z.abs() * t"
# z + 0.25 is never 0, where dtc's derivative (0) and torch's (the slope) differ
check "sum(leaky_relu(z + 0.25) * t)" "F.leaky_relu(z + 0.25) * t"
check "sum(leaky_relu(z + 0.25, negative_slope = 0.2) * t)" "F.leaky_relu(z + 0.25, 0.2) * t"
check "sum(var(z, dim = 1) * sum(t, dim = 1))" "z.var(1) * t.sum(1)"
check "sum(var(z, 1, keepdim = true) * t)" "z.var(1, keepdim=True) * t"
check "sum(var(z, dim = 0, unbiased = false, keepdim = true) * t)" \
      "z.var(0, unbiased=False, keepdim=True) * t"
check "var(z)" "z.var().reshape(1)"
check "var(z, correction = 0) + std(z, [0, 1], correction = 2)" \
      "(z.var(unbiased=False) + (((z - z.mean()) ** 2).sum() / 22).sqrt()).reshape(1)"
check "sum(std(z, 1, keepdim = true) * t)" "z.std(1, keepdim=True) * t"
check "sum(rms_norm(z, [4]) * t)" "rms_norm(z, [4]) * t"
check "sum(rms_norm(z, 4, sum(t, dim = 0), eps = 0.001) * t)" \
      "rms_norm(z, [4], t.sum(0), 0.001) * t"
check "sum(rms_norm(z, [6, 4]) * t)" "rms_norm(z, [6, 4]) * t"
check "sum(pow(z, 2) * t)" "torch.pow(z, 2) * t"
check "sum(pow(z, 3) * t)" "torch.pow(z, 3) * t"
check "sum(pow(z * z + 1, 0.5) * t)" "torch.pow(z * z + 1, 0.5) * t"
check "sum(pow(z * z + 1, -0.5) * t)" "torch.pow(z * z + 1, -0.5) * t"
check "sum(pow(z + 0.25, -1) * t)" "torch.pow(z + 0.25, -1) * t"
check "sum(pow(z + 0.25, -2) * t)" "torch.pow(z + 0.25, -2) * t"
check "sum(pow(z, exponent = 1) * t)" "torch.pow(z, 1) * t"
check "sum(expand(sum(z, dim = 0, keepdim = true), [6, 4]) * t)" \
      "z.sum(0, keepdim=True).expand(6, 4) * t"
check "sum(expand(z, [2, -1, 4]) * expand(t, [2, 6, 4]))" \
      "z.expand(2, 6, 4) * t.expand(2, 6, 4)"
check "sum(softmax(z, dim = 0) * t)" "F.softmax(z, dim=0) * t"
check "sum(log_softmax(z, dim = -1) * t)" "F.log_softmax(z, dim=-1) * t"
check "sum(mean(z, dim = [0, 1], keepdim = true) * t)" "z.mean((0, 1), keepdim=True) * t"
check "sum(max(z, dim = 1) * sum(t, dim = 1))" "z.max(1).values * t.sum(1)"
# comparisons give masks (1 and 0 in f32); where takes them, and numbers
# (-inf among them); z holds 0.5 and -1 themselves, so ties count
check "sum(where(z > 0, z * t, -z))" "torch.where(z > 0, z * t, -z)"
check "sum((z >= t) * z + (z < t) * z * z)" "(z >= t) * z + (z < t) * z * z"
check "sum((z == 0.5) * t + (z != 0.5) * z * t)" "(z == 0.5) * t + (z != 0.5) * z * t"
check "sum(where(z <= -1, t, 2) * z)" "torch.where(z <= -1, t, 2.0) * z"
check "sum(softmax(where(z != 0.5, z, -inf), dim = 1) * t)" \
      "F.softmax(torch.where(z != 0.5, z, float('-inf')), dim=1) * t"
check "sum(where(sum(t, dim = 1, keepdim = true) > 2, z, 0) * t)" \
      "torch.where(t.sum(1, keepdim=True) > 2, z, 0.0) * t"
# z holds -1, 0.5 and 1 themselves: the derivative at a bound is 1 for
# clamp, 0 for hardtanh and relu6, as torch's
check "sum(clamp(z, -1, 1) * t)" "torch.clamp(z, -1, 1) * t"
check "sum(clamp(z, min = 0.5) * t)" "torch.clamp(z, min=0.5) * t"
check "sum(clamp(z, max = -1) * t)" "torch.clamp(z, max=-1) * t"
check "sum(clamp(z, 1, -1) * t)" "torch.clamp(z, 1, -1) * t"
check "sum(clamp(z, -inf, 0.1) * t)" "torch.clamp(z, float('-inf'), 0.1) * t"
check "sum(hardtanh(z) * t)" "F.hardtanh(z) * t"
check "sum(hardtanh(z, min_val = -0.5, max_val = 2) * t)" "F.hardtanh(z, -0.5, 2) * t"
check "sum(relu6(z * 4) * t)" "F.relu6(z * 4) * t"
# indexing and slicing: integers drop their dim, ranges clamp as Python's
check "sum(z[1] * t[2])" "z[1] * t[2]"
check "sum(z[:, 1:3] * t[:, 0:2])" "z[:, 1:3] * t[:, 0:2]"
check "sum(z[..., -1] * t[..., 0])" "z[..., -1] * t[..., 0]"
check "sum(z[2:] * t[:-2])" "z[2:] * t[:-2]"
check "z[1, 2] * t[0, -1]" "(z[1, 2] * t[0, -1]).reshape(1)"
check "sum(z[-2:100, ...] * -t[0])" "z[-2:100, ...] * -t[0]"
check "sum(softmax(z, dim = 1)[:, 0] * t[:, 1])" "F.softmax(z, dim=1)[:, 0] * t[:, 1]"
# integers as torch computes them (y: the labels 0 3 1 2 3 1): i32 with
# integers stays i32, `/` and f32 operands make f32
check "sum((y - 1) * z[:, 0] + (2 * y + 1) * t[:, 1])" "(y - 1) * z[:, 0] + (2 * y + 1) * t[:, 1]"
check "sum(where(y * 2 - 1 > 4, z[:, 1], t[:, 2]) + (y == 3) * z[:, 2])" \
      "torch.where(y * 2 - 1 > 4, z[:, 1], t[:, 2]) + (y == 3) * z[:, 2]"
check "sum(y / 2 * z[:, 2] + (y + 0.5) * z[:, 3] + -y * t[:, 0])" \
      "y / 2 * z[:, 2] + (y + 0.5) * z[:, 3] + -y * t[:, 0]"
check "sum(floor_divide(y - 2, 2) * z[:, 0] + remainder(y - 2, -3) * z[:, 1])" \
      "torch.floor_divide(y - 2, 2) * z[:, 0] + torch.remainder(y - 2, -3) * z[:, 1]"
check "sum(remainder(7 - y, y + 1) * z[:, 3])" "torch.remainder(7 - y, y + 1) * z[:, 3]"
# where of i32 values: i32 with i32 or integers (floor_divide takes only
# i32), f32 with f32 values or other numbers; broadcasting the three
check "sum(where(z[:, 0] > 0, y, -1) * z[:, 1] + where(z[:, 1] > 0, 2 * y, y - 3) * t[:, 0])" \
      "torch.where(z[:, 0] > 0, y, -1) * z[:, 1] + torch.where(z[:, 1] > 0, 2 * y, y - 3) * t[:, 0]"
check "sum(floor_divide(where(z[:, 2] <= 0, y, -7), 2) * z[:, 3] + where(t[:, 1] > 0.5, 3, y) * t[:, 2])" \
      "torch.floor_divide(torch.where(z[:, 2] <= 0, y, -7), 2) * z[:, 3] + torch.where(t[:, 1] > 0.5, 3, y) * t[:, 2]"
check "sum(where(z[:, 2] > 0, y, z[:, 3]) * t[:, 0] + where(z[:, 0] > 0, 0.5, y) * z[:, 1])" \
      "torch.where(z[:, 2] > 0, y, z[:, 3]) * t[:, 0] + torch.where(z[:, 0] > 0, 0.5, y) * z[:, 1]"
check "sum(where(z > 0, reshape(y, [6, 1]), 1) * z) + sum(where(t[:, 0] < 0.5, -2, y * 3) * t[:, 1])" \
      "torch.where(z > 0, y.view(6, 1), 1) * z + (torch.where(t[:, 0] < 0.5, -2, y * 3) * t[:, 1]).view(6, 1) / 4"
# gather, one_hot, arange (i32 for integers, f32 otherwise)
check "sum(gather(z, 1, reshape(y, [6, 1])) * t[:, 0:1])" "z.gather(1, y.view(6, 1)) * t[:, 0:1]"
check "sum(gather(z, 0, remainder(reshape(arange(8), [2, 4]) * 5, 6)) * t[:2])" \
      "z.gather(0, (torch.arange(8).reshape(2, 4) * 5) % 6) * t[:2]"
check "sum(gather(z, dim = -1, index = reshape(arange(5, 2, -1), [1, 3]) - 2) * t[0, :3])" \
      "z.gather(-1, torch.arange(5, 2, -1).reshape(1, 3) - 2) * t[0, :3]"
check "sum(one_hot(y, num_classes = 4) * z * t)" "F.one_hot(y, 4) * z * t"
check "sum(arange(0.5, 2.5, 0.5) * z * t)" "torch.arange(0.5, 2.5, 0.5, dtype=torch.float64) * z * t"
# cumsum, tril and triu
check "sum(cumsum(z, 1) * t)" "z.cumsum(1) * t"
check "sum(cumsum(z, dim = 0) * t)" "z.cumsum(0) * t"
check "sum(cumsum(y, 0) * z[:, 1])" "y.cumsum(0) * z[:, 1]"
check "sum(tril(z) * t + triu(z, 1) * z)" "z.tril() * t + z.triu(1) * z"
check "sum(tril(z, diagonal = -2) * t + triu(z, -1) * t)" "z.tril(-2) * t + z.triu(-1) * t"
# clamp with tensor bounds: z below, between and above; the bound z itself
check "sum(clamp(z, min = t - 0.5, max = t + 0.5) * t)" "torch.clamp(z, t - 0.5, t + 0.5) * t"
check "sum(clamp(z, t - 0.25) * t + clamp(z, max = sum(t, dim = 0)) * t)" \
      "torch.clamp(z, min=t - 0.25) * t + torch.clamp(z, max=t.sum(0)) * t"
check "sum(clamp(t, min = z) * t + clamp(z, min = 1, max = t) * t)" \
      "torch.clamp(t, min=z) * t + torch.clamp(z, min=torch.ones_like(t), max=t) * t"
# i32 values as torch keeps them (y - 2: -2 1 -1 0 1 -1): relu, abs, clamp
# with integer or i32 bounds, pow to an integer power (y.int(): int32 in
# torch too, wrapping as dtc's i32 at 3000^3), hardtanh (bounds made
# integers toward 0), relu6, maximum and minimum stay i32; an f32 bound,
# operand or a real power make them f32
check "sum(relu(y - 2) * z[:, 0] + abs(y - 2) * z[:, 1] + clamp(y, 1, 2) * z[:, 2] + clamp(y - 2, max = 0) * z[:, 3])" \
      "F.relu(y - 2) * z[:, 0] + (y - 2).abs() * z[:, 1] + torch.clamp(y, 1, 2) * z[:, 2] + torch.clamp(y - 2, max=0) * z[:, 3]"
check "sum(pow(y - 2, 3) * z[:, 0] + pow(y, 0) * z[:, 1] + pow(y * 1000, 3) * z[:, 2] + pow(y, exponent = 2.0) * z[:, 3])" \
      "torch.pow(y - 2, 3) * z[:, 0] + torch.pow(y, 0) * z[:, 1] + torch.pow(y.int() * 1000, 3) * z[:, 2] + torch.pow(y, 2.0) * z[:, 3]"
check "sum(hardtanh(y - 2) * z[:, 0] + hardtanh(y, -1.5, 2.7) * z[:, 1] + relu6(y * 3 - 2) * z[:, 2] + pow(y, 0.5) * z[:, 3])" \
      "F.hardtanh(y - 2) * z[:, 0] + F.hardtanh(y, -1.5, 2.7) * z[:, 1] + F.relu6(y * 3 - 2) * z[:, 2] + torch.pow(y, 0.5) * z[:, 3]"
check "sum(clamp(y * 2 - 3, min = y - 2, max = 3 - y) * z[:, 0] + sum(clamp(reshape(y, [6, 1]), max = reshape(y[0:4], [1, 4])) * z, dim = 1))" \
      "torch.clamp(y * 2 - 3, y - 2, 3 - y) * z[:, 0] + (torch.clamp(y.view(6, 1), max=y[0:4].view(1, 4)) * z).sum(1)"
check "sum(clamp(y - 1, min = z[:, 0]) * t[:, 0] + clamp(y, min = y - 1, max = z[:, 1] * 2) * t[:, 1])" \
      "torch.clamp(y - 1, min=z[:, 0]) * t[:, 0] + torch.clamp(y, y - 1, z[:, 1] * 2) * t[:, 1]"
# pow with a tensor exponent, broadcasting, and a number base: the
# derivative with respect to base and exponent; z (-3 to 3) to integer
# powers t * 8 (0 to 7: 0^0 = 1 and its derivative 0); t (0 and 1 among
# them) to relu(z) (0^0 and 0^3: their derivative with respect to the
# exponent 0, as torch's, not 0 log 0)
check "sum(pow(z * z + 1, t * 3 - 1) * t)" "torch.pow(z * z + 1, t * 3 - 1) * t"
check "sum(pow(t + 0.5, z) * t + pow(t[0] + 0.25, z) * z)" \
      "torch.pow(t + 0.5, z) * t + torch.pow(t[0] + 0.25, z) * z"
check "sum(pow(z, t * 8) * t)" "torch.pow(z, t * 8) * t"
check "sum(pow(t, relu(z)) * t)" "torch.pow(t, F.relu(z)) * t"
check "sum(pow(2, z) * t + pow(0.5, z[0]) * t + pow(z * z + 0.5, 1.7) * t)" \
      "torch.pow(2, z) * t + torch.pow(0.5, z[0]) * t + torch.pow(z * z + 0.5, 1.7) * t"
# i32 to i32 powers stay i32 (0 to the power -1 is 0, as torch's int pow);
# an f32 operand makes them f32; clamp of f32 values with i32 tensor bounds
check "sum(pow(y, y - 1) * z[:, 0] + pow(2, y) * z[:, 1] + pow(z[:, 2], y) * t[:, 0] + pow(y, t[:, 1]) * z[:, 3])" \
      "torch.pow(y, y - 1) * z[:, 0] + torch.pow(2, y) * z[:, 1] + torch.pow(z[:, 2], y) * t[:, 0] + torch.pow(y, t[:, 1]) * z[:, 3]"
check "sum(clamp(z, min = reshape(y, [6, 1]) - 2) * t + clamp(z, y[0:4] - 3, t + y[0:4] - 2) * t)" \
      "torch.clamp(z, min=y.view(6, 1) - 2) * t + torch.clamp(z, y[0:4] - 3, t + y[0:4] - 2) * t"
# maximum and minimum: z and t tie at 0, 0.5 and 1, z and 0.5 z + 0.25 at
# 0.5, where each side takes half the gradient, as torch's
check "sum(maximum(z, t) * t + minimum(z, t[0]) * z + minimum(z, 0.5 * z + 0.25) * t)" \
      "torch.maximum(z, t) * t + torch.minimum(z, t[0]) * z + torch.minimum(z, 0.5 * z + 0.25) * t"
check "sum(maximum(y, 3 - y) * z[:, 0] + minimum(y - 1, y[0:1]) * z[:, 1] + maximum(y, z[:, 2]) * t[:, 0] + minimum(z[:, 3] * 2, y) * t[:, 1])" \
      "torch.maximum(y, 3 - y) * z[:, 0] + torch.minimum(y - 1, y[0:1]) * z[:, 1] + torch.maximum(y, z[:, 2]) * t[:, 0] + torch.minimum(z[:, 3] * 2, y) * t[:, 1]"
check "sum(maximum(reshape(y, [6, 1]), y[0:4]) * z + minimum(reshape(y, [6, 1]), t) * z)" \
      "torch.maximum(y.view(6, 1), y[0:4]) * z + torch.minimum(y.view(6, 1), t) * z"
exit $fail
