#!/bin/sh
# demo_torch.sh COMMAND...: runs COMMAND (tests/mpi/demo_train.c, alone or
# under mpiexec) and checks its DeMo run against tests/e2e/demo_torch.py,
# a PyTorch reference written from the paper. Skipped (status 77) when
# Debian's python3 has no torch.
set -u
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "demo_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
out=${TMPDIR:-/tmp}/demo_torch.$$
trap 'rm -f "$out"' EXIT
"$@" >"$out" || { echo "demo_torch: the run failed: $*"; exit 1; }
"$py" "$dir/demo_torch.py" <"$out"
