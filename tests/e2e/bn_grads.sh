#!/bin/sh
# bn_grads.sh BN_GRADS: batch_norm's derivatives (input, weight, bias, through
# the batch's statistics) against central finite differences, over [N, C],
# [N, C, L] and [N, C, H, W] inputs, with and without an affine part.
set -u
run=$1
fail=0
check() {   # PARAMS EXPR
  "$run" --fd "$1" "$2" || fail=1
}
check "x:6,4 r:6,4 @rm:4 @rv:4" "batch_norm(x, rm, rv) * r"
check "x:5,3,4 r:5,3,4 g:3 b:3 @rm:3 @rv:3" "batch_norm(x, rm, rv, g, b, momentum = 0.3, eps = 0.01) * r"
check "x:3,2,4,5 r:3,2,4,5 g:2 b:2 @rm:2 @rv:2" "batch_norm(x, rm, rv, weight = g, bias = b) * r"
check "x:2,3,5,4 k:4,3,3,3 r:2,4,3,2 g:4 @rm:4 @rv:4" "relu(batch_norm(conv2d(x, k), rm, rv, weight = g)) * r"
exit $fail
