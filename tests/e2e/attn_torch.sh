#!/bin/sh
# attn_torch.sh CONV_GRADS: scaled_dot_product_attention and its derivatives
# (conv_grads.c: the interpreter on libdtrt's kernels) against PyTorch on the
# same params: torch.nn.functional.scaled_dot_product_attention where the
# installed torch has it (2.0 on), and always the same attention written out
# in torch (softmax of the masked scores, float64, autograd). Causal and not,
# Tq below, equal to and above Tk, odd sizes, several blocks of 64.
# Skipped (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "attn_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # PARAMS EXPR
  "$run" "$1" "$2" | "$py" "$dir/attn_torch.py" "$2" "$1" || fail=1
}
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13" "scaled_dot_product_attention(q, k, v)"
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13" "scaled_dot_product_attention(q, k, v, is_causal = true)"
check "q:1,2,13,5 k:1,2,37,5 v:1,2,37,5" "scaled_dot_product_attention(q, k, v, is_causal = true)"
check "q:1,2,13,5 k:1,2,37,5 v:1,2,37,5" "scaled_dot_product_attention(q, k, v, scale = 2.5)"
check "q:1,2,150,24 k:1,2,97,24 v:1,2,97,24" "scaled_dot_product_attention(q, k, v, is_causal = true, scale = 1.5)"
check "q:1,1,130,64 k:1,1,130,64 v:1,1,130,64" "scaled_dot_product_attention(q, k, v, is_causal = true)"
check "x:1,2,70,8" "scaled_dot_product_attention(x, x, x, is_causal = true)"
exit $fail
