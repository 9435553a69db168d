#!/bin/sh
# conv_torch.sh CONV_GRADS: conv2d, max_pool2d, avg_pool2d (ceil_mode, dilation,
# count_include_pad, divisor_override), flatten and pad (every mode; values,
# -inf before a max pooling), and their derivatives, against
# torch.nn.functional on the same params: the same
# expression text evaluated by both (conv_grads.c, conv_torch.py).
# Skipped (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "conv_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # PARAMS EXPR
  "$run" "$1" "$2" | "$py" "$dir/conv_torch.py" "$2" "$1" || fail=1
}
check "x:2,3,5,6 w:4,3,3,2 b:4" "conv2d(x, w, b)"
check "x:2,3,9,7 w:5,3,3,3" "conv2d(x, w, stride = 2, padding = 1)"
check "x:2,3,11,10 w:2,3,3,2" "conv2d(x, w, stride = [1, 2], padding = [2, 0], dilation = 2)"
check "x:2,4,7,8 w:6,2,3,3 b:6" "conv2d(x, w, b, stride = [2, 1], padding = [1, 2], dilation = [1, 2], groups = 2)"
check "x:1,2,6,5 w:4,2,3,3" "conv2d(x, w, padding = \"same\")"
check "x:2,3,7,9" "max_pool2d(x, 2)"
check "x:2,2,9,8" "max_pool2d(x, 3, stride = 2, padding = 1)"
check "x:2,2,9,8" "max_pool2d(x, kernel_size = [3, 2], stride = [1, 2], padding = [1, 0])"
check "x:2,3,7,9" "avg_pool2d(x, 2)"
check "x:2,2,9,8" "avg_pool2d(x, [3, 2], stride = [2, 1], padding = 1)"
check "x:2,3,7,9" "max_pool2d(x, 2, ceil_mode = true)"
check "x:2,2,6,5" "max_pool2d(x, [3, 2], stride = [2, 3], padding = 1, ceil_mode = true)"
check "x:1,2,3,3" "max_pool2d(x, 4, stride = 2, ceil_mode = true)"
check "x:2,2,9,8" "max_pool2d(x, 3, stride = [1, 2], padding = 1, dilation = 2)"
check "x:1,2,11,10" "max_pool2d(x, [3, 2], stride = [2, 1], padding = 1, dilation = [2, 3], ceil_mode = true)"
check "x:2,3,7,9" "avg_pool2d(x, 2, ceil_mode = true)"
check "x:2,2,6,5" "avg_pool2d(x, [3, 2], stride = [2, 3], padding = 1, ceil_mode = true)"
check "x:2,2,6,5" "avg_pool2d(x, [3, 2], stride = [2, 3], padding = 1, ceil_mode = true, count_include_pad = false)"
check "x:2,2,7,6" "avg_pool2d(x, 3, stride = 2, padding = 1, count_include_pad = false)"
check "x:2,2,7,6" "avg_pool2d(x, [3, 2], stride = 2, padding = 1, ceil_mode = true, divisor_override = 5)"
check "x:1,2,3,3" "avg_pool2d(x, 4, stride = 2, padding = 1, ceil_mode = true, divisor_override = none)"
check "x:2,3,4,5" "flatten(x)"
check "x:2,3,4,5" "flatten(x, 0, 2)"
check "x:2,3,4,5" "pad(x, [1, 2, 0, 1])"
check "x:2,3,4,5" "pad(x, [2, -1, -1, 0, 1, 1], value = 0.5)"
check "x:2,3,4,5" "pad(x, [1, 2, 0, 1], value = 1.2)"
check "x:2,3,5,6" "max_pool2d(pad(x, [0, 1, 0, 1], value = -inf), 2, stride = 1)"
check "x:2,3,5,6" "max_pool2d(pad(x, [1, 1, 1, 1], value = -inf), 3, stride = 2)"
check "x:3,6" "pad(x, [2, 5], mode = \"reflect\")"
check "x:2,3,4,5" "pad(x, [2, 3, 1, 3], mode = \"reflect\", value = 0)"
check "x:2,3,5" "pad(x, [-1, 4], mode = \"reflect\")"
check "x:2,3,4,5" "pad(x, [1, -2, 3, -4], mode = \"reflect\")"
check "x:2,3,4,5" "pad(x, [1, 1, 2, 1, 1, 2], mode = \"reflect\")"
check "x:1,2,3,4,5" "pad(x, [1, 2, 2, 1, 1, 2], mode = \"reflect\")"
check "x:4,7" "pad(x, [6, 9], mode = \"replicate\")"
check "x:2,3,4,5" "pad(x, [3, 7, 0, 2], mode = \"replicate\")"
check "x:2,3,4,5" "pad(x, [-2, 4, 5, -3], mode = \"replicate\")"
check "x:1,2,3,4,5" "pad(x, [2, 1, 1, 2, 3, 3], mode = \"replicate\")"
check "x:2,3,5" "pad(x, [2, 5], mode = \"circular\")"
check "x:2,3,4,5" "pad(x, [2, 5, 4, 1], mode = \"circular\")"
check "x:2,3,4,5" "pad(x, [-1, 4, 1, -2], mode = \"circular\")"
check "x:1,2,3,4,5" "pad(x, [1, 1, 2, 2, 3, 3], mode = \"circular\")"
check "x:2,2,6,6 k:3,2,3,3" "conv2d(pad(x, [1, 1, 1, 1], mode = \"reflect\"), k)"
check "x:2,1,8,8 k:4,1,3,3 c:4 w:64,3" "flatten(max_pool2d(relu(conv2d(x, k, c, padding = 1)), 2)) @ w"
exit $fail
