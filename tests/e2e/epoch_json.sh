#!/bin/sh
# epoch_json.sh: train_mlp --epoch-json prints one JSON line per epoch on
# stdout (epoch, steps, ms, samples_per_s, loss: the mean of the epoch's
# --print-loss losses) before the accuracy line, and without it stdout is
# the accuracy line alone. No timing is checked but that it is positive.
# usage: epoch_json.sh TRAIN_MLP
set -eu
app=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }
"$app" --quiet --limit 640 --epochs 2 >"$tmp/out"
[ "$(wc -l <"$tmp/out")" = 1 ] && grep -q '^test accuracy ' "$tmp/out" ||
  fail "without --epoch-json stdout is not the accuracy line alone"
"$app" --quiet --limit 640 --epochs 2 --epoch-json --print-loss >"$tmp/out"
awk '
  /^step / { sum += $4; n++; next }
  /^\{"epoch": [0-9]+, "steps": [0-9]+, "ms": [0-9.]+, "samples_per_s": [0-9.]+, "loss": [0-9.]+\}$/ {
    split($0, f, /[:,}] */)
    epoch = f[2] + 0; steps = f[4] + 0; ms = f[6] + 0; rate = f[8] + 0; loss = f[10] + 0
    if (epoch != ++e || steps != 10 || steps != n || ms <= 0 || rate <= 0) exit 1
    if (loss - sum / n > 1e-4 || sum / n - loss > 1e-4) exit 1
    sum = 0; n = 0; next
  }
  /^test accuracy / { done = e == 2; next }
  { exit 1 }
  END { exit !done }' "$tmp/out" || fail "unexpected --epoch-json output"
echo "epoch_json: one line per epoch, its loss the mean of the epoch's steps"
