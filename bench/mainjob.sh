#!/bin/sh
# mainjob.sh [BUILD] [CNN_STEPS] [RUNS]: the main job as its users run it,
# against PyTorch in the same run. examples/train_mlp --epochs 3 (the README's
# job: examples/mlp.dt on Fashion-MNIST, batch 64, Adam, a fresh model) from the
# first epoch to the last, each epoch's samples/s and wall time, then the same
# job in PyTorch on 2 threads (bench/mainjob_torch.py: the same layers,
# initialisers, optimizer, batches in the same order, and test set). Then the
# same for examples/cnn.dt (train_cnn) against its PyTorch twin, on the first
# CNN_STEPS steps of the three epochs for both (default 937, the first epoch: a
# CNN epoch takes about 25 s a side on 2 cores; 0 runs all three). Each job runs
# RUNS times (default 1), dtc's and torch's alike; an epoch's samples/s is then
# the best of its runs and its wall time the least (both jobs are seeded: every
# run computes the same numbers, and other load only slows a run down). Prints
# one JSON line (docs/BENCHMARKS.md lists its keys). Without torch the torch
# keys are left out and "torch" says why. PYTHON names the interpreter (default
# /usr/bin/python3, Debian's, which has python3-torch).
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
cnn_steps=${2:-937}
runs=${3:-1}
case $cnn_steps in
  '' | *[!0-9]*)
    echo "mainjob.sh: CNN_STEPS must be a whole number, not '$cnn_steps'" >&2
    exit 2 ;;
esac
case $runs in
  '' | *[!0-9]* | 0*)
    echo "mainjob.sh: RUNS must be a whole number from 1, not '$runs'" >&2
    exit 2 ;;
esac
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
script=$src/bench/mainjob_torch.py
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

load() {   # the 1-minute load average
  cut -d ' ' -f 1 /proc/loadavg 2>/dev/null || echo -1
}

# dtc PROGRAM OUT [ARGS...]: PROGRAM's epoch lines and accuracy of RUNS runs
# into OUT
dtc() {
  prog=$1 out=$2
  shift 2
  : >"$out"
  i=0
  while [ "$i" -lt "$runs" ]; do
    if ! "$build/examples/$prog" --epochs 3 --epoch-json "$@" >>"$out" 2>"$dir/err"; then
      tr '\r' '\n' <"$dir/err" | tail -n 3 >&2
      echo "mainjob.sh: $build/examples/$prog failed" >&2
      exit 1
    fi
    i=$((i + 1))
  done
}

# torch KIND OUT [MAX_STEPS]: the script's lines of RUNS runs into OUT, empty
# if one failed
torch() {
  : >"$2"
  i=0
  while [ "$i" -lt "$runs" ]; do
    if ! "$python" "$script" "$1" 3 "${3:-0}" >>"$2" 2>"$dir/err"; then
      : >"$2"
      return
    fi
    i=$((i + 1))
  done
}

# keys PREFIX DTC_OUT TORCH_OUT: the JSON keys of one model's two jobs, each
# epoch the best of its runs
keys() {
  awk -v p="$1" '
    function field(name,   s) {
      s = $0; sub(".*\"" name "\": ", "", s); return s + 0
    }
    /^\{"epoch"/ {
      k = FILENAME == ARGV[1] ? "dtc" : "torch"
      e = field("epoch"); ms = field("ms"); rate = field("samples_per_s")
      if (!((k, e) in t) || ms < t[k, e]) t[k, e] = ms
      if (rate > r[k, e]) r[k, e] = rate
      st[k, e] = field("steps")
      if (e > n[k]) n[k] = e
    }
    /^test accuracy / {
      k = FILENAME == ARGV[1] ? "dtc" : "torch"
      a = $3; sub(/%/, "", a); acc[k] = a / 100
    }
    function list(k, a,   i, s) {
      for (i = 1; i <= n[k]; i++) s = s (i > 1 ? ", " : "") sprintf("%.1f", a[k, i])
      return "[" s "]"
    }
    END {
      for (j = 0; j < 2; j++) {
        k = j ? "torch" : "dtc"
        if (!n[k]) continue
        for (i = 1; i <= n[k]; i++) { total[k] += t[k, i]; steps[k] += st[k, i] }
        printf "%s\"%s%s_samples_per_s\": %s, \"%s%s_epoch_ms\": %s, \"%s%s_ms\": %.1f, " \
               "\"%s%s_steps\": %d, \"%s%s_accuracy\": %.4f", j ? ", " : "", p, k, list(k, r),
               p, k, list(k, t), p, k, total[k], p, k, steps[k], p, k, acc[k]
      }
      if (n["dtc"] == 3) printf ", \"%sepoch3_over_epoch1\": %.3f", p, r["dtc", 3] / r["dtc", 1]
      if (n["torch"] == 3)
        printf ", \"%storch_epoch3_over_epoch1\": %.3f", p, r["torch", 3] / r["torch", 1]
      if (n["dtc"] && n["torch"]) printf ", \"%sdtc_over_torch\": %.3f", p, total["dtc"] / total["torch"]
    }' "$2" "$3"
}

: >"$dir/cnn_torch"
load0=$(load)
dtc train_mlp "$dir/mlp_dtc"
torch mlp "$dir/mlp_torch"
if [ "$cnn_steps" = 0 ]; then
  dtc train_cnn "$dir/cnn_dtc"
else
  dtc train_cnn "$dir/cnn_dtc" --max-steps "$cnn_steps"
fi
[ -s "$dir/mlp_torch" ] && torch cnn "$dir/cnn_torch" "$cnn_steps"
load1=$(load)
printf '{"bench": "mainjob", "epochs": 3, "batch": 64, "runs": %d, "torch_threads": 2, %s, ' \
  "$runs" "$(keys "" "$dir/mlp_dtc" "$dir/mlp_torch")"
printf '"cnn_max_steps": %d, %s' "$cnn_steps" "$(keys cnn_ "$dir/cnn_dtc" "$dir/cnn_torch")"
if [ ! -s "$dir/mlp_torch" ] || [ ! -s "$dir/cnn_torch" ]; then
  printf ', "torch": "%s did not run: is python3-torch installed?"' "$script"
fi
printf ', "load_before": %s, "load_after": %s}\n' "$load0" "$load1"
