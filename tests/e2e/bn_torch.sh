#!/bin/sh
# bn_torch.sh BN_GRADS: batch_norm against torch.nn.functional.batch_norm on
# the same values: the training forward and its derivatives, the running
# statistics after one and two steps, the evaluation forward on them
# (bn_grads.c, bn_torch.py). A factor r makes d/dx more than rounding: the
# derivative of sum(y * y) through batch statistics alone is near zero.
# Skipped (status 77) when Debian's python3 has no
# torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "bn_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # PARAMS EXPR
  "$run" "$1" "$2" | "$py" "$dir/bn_torch.py" "$2" "$1" || fail=1
}
check "x:6,4 r:6,4 @rm:4 @rv:4" "batch_norm(x, rm, rv) * r"
check "x:5,3,4 r:5,3,4 g:3 b:3 @rm:3 @rv:3" "batch_norm(x, rm, rv, g, b, momentum = 0.3, eps = 0.01) * r"
check "x:3,2,4,5 r:3,2,4,5 g:2 b:2 @rm:2 @rv:2" "batch_norm(x, rm, rv, weight = g, bias = b) * r"
check "x:2,3,5,4 k:4,3,3,3 g:4 b:4 @rm:4 @rv:4" "relu(batch_norm(conv2d(x, k), rm, rv, weight = g, bias = b))"
exit $fail
