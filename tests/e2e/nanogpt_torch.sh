#!/bin/sh
# nanogpt_torch.sh PORT_STEPS WORK: examples/nanogpt.dt against nanoGPT's
# model and training loop in PyTorch, from torch's initial weights, 20
# steps (tests/e2e/nanogpt_torch.py). Skipped (status 77) when Debian's
# python3 has no torch.
set -u
py=/usr/bin/python3
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "nanogpt_torch: skipped: $py cannot import torch and numpy (Debian's python3-torch)"
  exit 77
fi
exec "$py" "$(dirname "$0")/nanogpt_torch.py" "$1" "$2" 20
