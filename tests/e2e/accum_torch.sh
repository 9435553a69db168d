#!/bin/sh
# accum_torch.sh ACCUM_STEPS: compiled models accumulating their gradient
# over 3 calls (tests/e2e/accum_adam.dt, accum_momentum.dt) against
# torch.optim with (loss / 3).backward() per call and a step every third, for
# 12 calls (opt_torch.py). Skipped (status 77) when Debian's python3 has no
# torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "accum_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
"$run" torch adam | "$py" "$dir/opt_torch.py" 12 "Adam(lr=0.01)" 0.5 3 || fail=1
"$run" torch momentum | "$py" "$dir/opt_torch.py" 12 "SGD(lr=0.1, momentum=0.9)" 0 3 || fail=1
exit $fail
