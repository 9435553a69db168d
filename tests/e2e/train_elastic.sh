#!/bin/sh
# train_elastic.sh: examples/train_mlp --elastic over the object of
# examples/mlp_elastic.dt (dtc --devices=1..4): 10 steps on 3 ranks, saving
# every 5, then the same command on one process with --max-steps 20 resumes
# from the saved file at step 10; each step's loss within 1e-4 (relative) of
# 20 steps of train_mlp (examples/mlp.dt) on one process without a stop.
# --elastic without --save is refused.
# usage: train_elastic.sh TRAIN_MLP TRAIN_MLP_ELASTIC MPIEXEC MPIFLAGS...
set -u
one=$1 app=$2 mpiexec=$3
shift 3
fail() { echo "train_elastic.sh: FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
run="--elastic --save $tmp/ck.st --save-every 5 --quiet --print-loss"
timeout 120 "$one" --quiet --print-loss --max-steps 20 > "$tmp/ref" || fail "20 steps of train_mlp"
# shellcheck disable=SC2086
timeout 120 "$mpiexec" -n 3 "$@" "$app" $run --max-steps 10 > "$tmp/a" || fail "10 steps on 3 ranks"
# shellcheck disable=SC2086
timeout 120 "$app" $run --max-steps 20 > "$tmp/b" 2> "$tmp/err" || fail "the resumed run: $(cat "$tmp/err")"
grep -q "^resumed from $tmp/ck.st at step 10$" "$tmp/err" || fail "no resume at step 10: $(cat "$tmp/err")"
grep "^step" "$tmp/a" "$tmp/b" -h > "$tmp/run"
[ "$(wc -l < "$tmp/run")" -eq 20 ] || fail "not 20 steps: $(cat "$tmp/run")"
grep "^step" "$tmp/ref" | paste -d ' ' - "$tmp/run" | awk '
  $2 != $6 { print "step " $2 " against " $6; bad = 1 }
  { d = $4 - $8; if (d < 0) d = -d; m = $4 < 0 ? -$4 : $4
    if (d > 1e-4 * (m > 1 ? m : 1)) { print "step " $2 ": loss " $8 ", one process " $4; bad = 1 } }
  END { exit bad }' || fail "the losses differ"
"$app" --elastic --max-steps 2 2> "$tmp/err" && fail "--elastic without --save ran"
grep -q "needs --save FILE" "$tmp/err" || fail "no message for --elastic without --save"
echo "train_elastic.sh: 3 ranks then one process as one process"
