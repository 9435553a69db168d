#!/bin/sh
# loss_torch.sh LOSS_STEPS: cross_entropy with ignore_index and
# label_smoothing, and bce_with_logits (with pos_weight: per column, a number,
# per element), against torch.nn.functional: values
# and gradients on the same logits and labels (loss_torch.py). Skipped
# (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "loss_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # DTC_LOSS TORCH_LOSS [LABELS]
  "$run" "$1" ${3:-} | "$py" "$dir/loss_torch.py" "$2" || fail=1
}
check "cross_entropy(z, y)" "F.cross_entropy(z, y)"
check "cross_entropy(z, y, ignore_index = -100)" "F.cross_entropy(z, y)" "1,-100,3,-100,0,2"
check "cross_entropy(z, y, ignore_index = 3)" "F.cross_entropy(z, y, ignore_index=3)"
check "cross_entropy(z, y, label_smoothing = 0.2)" "F.cross_entropy(z, y, label_smoothing=0.2)"
check "cross_entropy(z, y, ignore_index = 1, label_smoothing = 0.3)" \
      "F.cross_entropy(z, y, ignore_index=1, label_smoothing=0.3)"
check "cross_entropy(z, y, label_smoothing = 1)" "F.cross_entropy(z, y, label_smoothing=1.0)" \
      "2,-100,0,1,-100,3"
# every label ignored: NaN, and a zero gradient, as PyTorch gives
check "cross_entropy(z, y, label_smoothing = 0.1)" "F.cross_entropy(z, y, label_smoothing=0.1)" \
      "-100,-100,-100,-100,-100,-100"
check "bce_with_logits(z, t)" "F.binary_cross_entropy_with_logits(z, t)"
check "bce_with_logits(z * 20, t)" "F.binary_cross_entropy_with_logits(z * 20, t)"
check "bce_with_logits(z, t, pos_weight = exp(sum(t, axis = 0) * 0.3))" \
      "F.binary_cross_entropy_with_logits(z, t, pos_weight=torch.exp(t.sum(0) * 0.3))"
check "bce_with_logits(z * 200, t, pos_weight = 3)" \
      "F.binary_cross_entropy_with_logits(z * 200, t, pos_weight=torch.tensor(3.0, dtype=t.dtype))"
check "bce_with_logits(z, t, pos_weight = t * 2 + 0.5)" \
      "F.binary_cross_entropy_with_logits(z, t, pos_weight=t * 2 + 0.5)"
# a label outside [0, C) that is not ignore_index: a runtime error
if ! "$run" "cross_entropy(z, y, ignore_index = -1)" "0,1,2,4,-1,0" |
     grep -q "^error .*label 4 in row 3 is outside \[0, 4) and not ignore_index"; then
  echo "loss_torch: label 4 was not refused"
  fail=1
fi
exit $fail
