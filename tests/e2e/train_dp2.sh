#!/bin/sh
# train_dp2.sh TRAIN_MLP TRAIN_MLP_DP2 MPIEXEC...: the example application
# data parallel out of the box. train_mlp_dp2 (examples/mlp_dp2.dt, each
# rank passing only its own rows) under MPIEXEC on 2 ranks trains 8 steps as
# train_mlp does in one process: the same losses within 1e-4 relative, only
# rank 0 printing; --last-batch keep pads the short last batch (100 images:
# two steps an epoch), which mlp_dp2.dt's loss skips and mlp.dt's refuses
# with a message; --last-batch drop takes one step an epoch.
set -u
one=$1
two=$2
shift 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "train_dp2: $*"; exit 1; }
"$one" --max-steps 8 --print-loss --quiet >"$tmp/one" || fail "train_mlp failed"
"$@" "$two" --max-steps 8 --print-loss --quiet >"$tmp/two" || fail "train_mlp_dp2 failed"
[ "$(grep -c '^step ' "$tmp/two")" -eq 8 ] || fail "rank 1 printed too, or steps are missing:
$(cat "$tmp/two")"
paste "$tmp/one" "$tmp/two" | awk '
  /^step/ { d = $4 - $8; if (d < 0) d = -d; if (d > 1e-4 * ($4 < 0 ? -$4 : $4)) bad = 1; n++ }
  END { exit bad || n != 8 }' || fail "the losses differ:
$(paste "$tmp/one" "$tmp/two")"
"$@" "$two" --limit 100 --epochs 2 --last-batch keep --print-loss --quiet >"$tmp/keep" ||
  fail "--last-batch keep failed"
[ "$(grep -c '^step ' "$tmp/keep")" -eq 4 ] || fail "--last-batch keep: $(cat "$tmp/keep")"
"$@" "$two" --limit 100 --epochs 2 --last-batch drop --print-loss --quiet >"$tmp/drop" ||
  fail "--last-batch drop failed"
[ "$(grep -c '^step ' "$tmp/drop")" -eq 2 ] || fail "--last-batch drop: $(cat "$tmp/drop")"
if "$one" --limit 100 --last-batch keep --quiet >/dev/null 2>"$tmp/err" ||
   ! grep -q "label -100 in row 36 is outside \[0, 10).*--last-batch keep pads" "$tmp/err"; then
  fail "train_mlp --last-batch keep on mlp.dt: $(cat "$tmp/err")"
fi
echo "train_dp2: 2 ranks train as 1 process; --last-batch keep and drop: ok"
