#!/bin/sh
# attn_torch.sh CONV_GRADS: scaled_dot_product_attention and its derivatives
# (conv_grads.c: the interpreter on libdtrt's kernels) against PyTorch on the
# same params: torch.nn.functional.scaled_dot_product_attention where the
# installed torch has it (2.0 on), and always the same attention written out
# in torch (softmax of the masked scores, float64, autograd). Causal and not,
# Tq below, equal to and above Tk, odd sizes, several blocks of 64; masks
# f32 and i32 (bool), broadcast; dropout (the mask redrawn in Python).
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
# attn_mask: f32 added (some -inf), i32 as torch's bool, broadcast from
# ranks 2 to 4; Tk = 2 leaves some rows seeing no key (zeros)
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13 m:f32:37,13" "scaled_dot_product_attention(q, k, v, attn_mask = m)"
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13 m:i32:2,1,37,13" "scaled_dot_product_attention(q, k, v, m, scale = 0.7)"
check "q:1,3,13,5 k:1,3,37,5 v:1,3,37,5 m:i32:3,1,37" "scaled_dot_product_attention(q, k, v, attn_mask = m)"
check "q:2,3,5,4 k:2,3,2,4 v:2,3,2,4 m:i32:2,3,5,2" "scaled_dot_product_attention(q, k, v, attn_mask = m)"
check "q:1,2,150,24 k:1,2,97,24 v:1,2,97,24 m:f32:1,2,150,97" "scaled_dot_product_attention(q, k, v, attn_mask = m)"
# an f32 mask that is a param, and so has a derivative
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13 m:37,13" "scaled_dot_product_attention(q, k, v, attn_mask = m)"
check "q:1,2,150,24 k:1,2,97,24 v:1,2,97,24 m:2,1,97" "scaled_dot_product_attention(q, k, v, m, 0.3, seed = 5)"
# dropout_p: dtc's mask, redrawn by attn_torch.py
check "q:2,3,37,13 k:2,3,13,13 v:2,3,13,13" "scaled_dot_product_attention(q, k, v, dropout_p = 0.3, seed = 7)"
check "q:1,2,150,24 k:1,2,97,24 v:1,2,97,24" "scaled_dot_product_attention(q, k, v, dropout_p = 0.5, is_causal = true, seed = 11)"
check "q:1,2,130,16 k:1,2,130,16 v:1,2,130,16 m:i32:130,130" "scaled_dot_product_attention(q, k, v, m, 0.2, seed = 3)"
exit $fail
