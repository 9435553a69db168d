#!/bin/sh
# finetune_torch.sh FINETUNE WORK: examples/finetune started from PyTorch's
# weights and trained 5 steps, the losses against torch's own 5 steps
# (examples/finetune/finetune_torch.py). Skipped (status 77) when Debian's
# python3 has no torch.
set -u
py=/usr/bin/python3
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "finetune_torch: skipped: $py cannot import torch and numpy (Debian's python3-torch)"
  exit 77
fi
exec "$py" "$(dirname "$0")/../../examples/finetune/finetune_torch.py" "$1" "$2" 5
