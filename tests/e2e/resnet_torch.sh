#!/bin/sh
# resnet_torch.sh PORT_STEPS WORK: examples/resnet.dt against the same
# ResNet of torchvision's BasicBlocks in PyTorch, from torch's initial
# weights, 20 steps (tests/e2e/resnet_torch.py). Skipped (status 77) when Debian's
# python3 has no torch.
set -u
py=/usr/bin/python3
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "resnet_torch: skipped: $py cannot import torch and numpy (Debian's python3-torch)"
  exit 77
fi
exec "$py" "$(dirname "$0")/resnet_torch.py" "$1" "$2" 20
