#!/bin/sh
# rnn_torch.sh RNN_STEPS WORK: examples/lstm.dt and examples/gru.dt against
# torch's nn.LSTM and nn.GRU on the same weights, outputs and the losses of
# 20 SGD steps (tests/e2e/rnn_torch.py). Skipped (status 77) when Debian's
# python3 has no torch.
set -u
py=/usr/bin/python3
if ! "$py" -c "import torch, numpy" 2>/dev/null; then
  echo "rnn_torch: skipped: $py cannot import torch and numpy (Debian's python3-torch)"
  exit 77
fi
exec "$py" "$(dirname "$0")/rnn_torch.py" "$1" "$2" 20
