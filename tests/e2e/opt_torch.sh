#!/bin/sh
# opt_torch.sh OPT_STEPS [OPT_SET_LR]: dtc's optimizers against torch.optim for
# 10 steps on the same weights and data (opt_torch.py). Skipped (status 77) when Debian's
# python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "opt_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # DTC_OPTIMIZER TORCH_OPTIMIZER [CLIP]
  "$run" 10 "$1" | "$py" "$dir/opt_torch.py" 10 "$2" ${3:-} || fail=1
}
check "sgd(lr = 0.1)" "SGD(lr=0.1)"
check "sgd(lr = 0.1, momentum = 0.9, weight_decay = 0.01)" \
      "SGD(lr=0.1, momentum=0.9, weight_decay=0.01)"
check "sgd(lr = 0.1, momentum = 0.9, nesterov = true)" "SGD(lr=0.1, momentum=0.9, nesterov=True)"
check "sgd(lr = 0.1, momentum = 0.9, dampening = 0.5)" "SGD(lr=0.1, momentum=0.9, dampening=0.5)"
check "sgd(lr = 0.1, momentum = 0.8, dampening = 0.3, weight_decay = 0.01, clip_norm = 0.5)" \
      "SGD(lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.01)" 0.5
check "sgd(lr = 0.1, dampening = 0.5)" "SGD(lr=0.1, dampening=0.5)"
check "adam(lr = 0.01)" "Adam(lr=0.01)"
check "adam(lr = 0.01, eps = 0.01, weight_decay = 0.1)" "Adam(lr=0.01, eps=0.01, weight_decay=0.1)"
check "adam(lr = 0.01, beta1 = 0, beta2 = 0.9)" "Adam(lr=0.01, betas=(0, 0.9))"
check "adamw(lr = 0.01, weight_decay = 0.1, eps = 0.01)" "AdamW(lr=0.01, weight_decay=0.1, eps=0.01)"
check "adagrad(lr = 0.1, weight_decay = 0.01, initial_accumulator_value = 0.1)" \
      "Adagrad(lr=0.1, weight_decay=0.01, initial_accumulator_value=0.1)"
check "adam(lr = 0.01, clip_norm = 0.5)" "Adam(lr=0.01)" 0.5
check "sgd(lr = 0.1, momentum = 0.9, clip_norm = 0.5)" "SGD(lr=0.1, momentum=0.9)" 0.5
# gradient accumulation over 3 micro-batches of their own, 12 calls (4 updates)
accum() {   # DTC_OPTIMIZER TORCH_OPTIMIZER CLIP [WARMUP]
  "$run" 12 "$1" vary | "$py" "$dir/opt_torch.py" 12 "$2" "$3" 3 ${4:-} || fail=1
}
accum "sgd(lr = 0.1, momentum = 0.9, accumulate = 3)" "SGD(lr=0.1, momentum=0.9)" 0
accum "sgd(lr = 0.1, momentum = 0.8, dampening = 0.3, weight_decay = 0.01, clip_norm = 0.5, accumulate = 3)" \
      "SGD(lr=0.1, momentum=0.8, dampening=0.3, weight_decay=0.01)" 0.5
accum "sgd(lr = 0.1, momentum = 0.9, nesterov = true, accumulate = 3)" \
      "SGD(lr=0.1, momentum=0.9, nesterov=True)" 0
accum "adam(lr = 0.01, accumulate = 3)" "Adam(lr=0.01)" 0
accum "adam(lr = 0.01, eps = 0.01, weight_decay = 0.1, clip_norm = 0.5, accumulate = 3)" \
      "Adam(lr=0.01, eps=0.01, weight_decay=0.1)" 0.5
accum "adamw(lr = 0.01, weight_decay = 0.1, accumulate = 3)" "AdamW(lr=0.01, weight_decay=0.1)" 0
accum "adam(lr = 0.01, accumulate = 3, schedule = warmup(steps = 3))" "Adam(lr=0.01)" 0 3
# the learning rate set from C between steps of a compiled model (opt_set_lr,
# tests/e2e/lsq.dt), SGD with momentum and dampening
if [ -n "${2:-}" ]; then
  "$2" >"${TMPDIR:-/tmp}/opt_set_lr.$$" || fail=1
  "$py" "$dir/opt_torch.py" 10 "SGD(lr=0.1, momentum=0.9, dampening=0.5)" \
    <"${TMPDIR:-/tmp}/opt_set_lr.$$" || fail=1
  rm -f "${TMPDIR:-/tmp}/opt_set_lr.$$"
fi
exit $fail
