#!/bin/sh
# bn_ckpt.sh BN_CKPT BN_CKPT_INFER DIR: batch norm's buffers saved, loaded by
# a fresh training build and by the inference build (bn_ckpt.c), and the
# export read by PyTorch (bn_export_torch.py, skipped without torch).
set -u
dir=$3
rm -rf "$dir" && mkdir -p "$dir" || exit 1
"$1" "$dir" || exit 1
"$2" "$dir" || exit 1
py=/usr/bin/python3
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "bn_ckpt: the export's check skipped: $py cannot import torch"
  exit 0
fi
"$py" "$(dirname "$0")/bn_export_torch.py" "$dir/export.safetensors" "$dir/x.bin" "$dir/logits.bin"
