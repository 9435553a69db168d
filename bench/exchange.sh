#!/bin/sh
# exchange.sh [BUILD] [REPS]: the gradient exchange's cost on a cluster of two
# nodes whose link is limited by tc, for the four ways dtc has of exchanging
# less or differently. Run as root from anywhere, after building
# (cmake --build BUILD):
#
#     bench/exchange.sh build 20
#     EXCH_RATES=100mbit bench/exchange.sh build 20     # one rate only
#
# For each rate of EXCH_RATES (default "100mbit 1gbit"):
#  1. makes a cluster of 2 network namespaces, one rank each
#     (tools/netns-cluster.sh -p exch -n 2 -r 1 --rate RATE), so every
#     collective crosses the shaped link;
#  2. probes it with dtc-probe (--reps EXCH_PROBE_REPS, default 10) into a
#     cluster file, printed as comment lines;
#  3. compiles examples/gpt.dt (EXCH_FLAGS, default -D L=2 -D D=128 -D B=16
#     -D T=32) with --cluster=<that file> and a parallel block `mesh m[dp =
#     2]`, the batch split over dp, in four variants: AdamW with its state
#     whole (`shard_state = none`), AdamW with `exchange = bf16`, AdamW with
#     `shard_state = dp`, and DeMo (gpt.dt's adamw( replaced by demo(, as
#     bench/CMakeLists.txt does for bench/demo.sh), and two under `plan
#     auto` with `exchange = auto`: `auto_dp` (the batch split over dp, no
#     shard_state line: the planner chooses whether to split the state and
#     the exchange's format) and `auto` (no shard line at all: the planner
#     chooses the whole layout and the format); builds bench/hetero.c
#     against each with mpicc;
#  4. times REPS steps of each on the cluster (median step after 3 warm-up
#     steps, DTRT_NUM_THREADS=1), takes the bytes each rank sends per
#     training step from dtc --emit=plan (the training step's collectives,
#     as bench/demo.sh reads them) and the predicted step from dtc --emit=sim,
#     and prints one JSON line per variant:
#       {"bench": "exchange", "rate", "variant", "step_ms", "bytes",
#        "predicted_ms", "measured_over_predicted"}
#     (the auto variants add "plan": the candidate the planner kept,
#     "state_split": whether the plan splits any optimizer state,
#     "exchange": the format it chose, and "simulated_ms": the plan's step
#     as --emit=plan simulated it with each format, and the state whole and
#     split where that was the planner's choice too), then one
#     line per rate:
#       {"bench": "exchange_ratios", "rate", "adamw_over_bf16",
#        "adamw_over_state", "adamw_over_demo" (step times),
#        "adamw_over_bf16_bytes", "adamw_over_demo_bytes",
#        "adamw_over_auto", "adamw_over_auto_dp", "auto_plan", "auto_dp_plan"}
# The cluster is removed on exit, also on failure or interrupt (trap).
# Needs root (network namespaces and tc: exits 2 with a message otherwise),
# iproute2, util-linux, Open MPI (mpirun and mpicc; MPICC overrides the
# compiler BUILD was configured with) and the packages libdtrt links
# (OpenBLAS, cJSON, zlib). EXCH_DIR keeps the work files (default a fresh
# mktemp -d, removed at the end unless given).
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
reps=${2:-20}
rates=${EXCH_RATES:-100mbit 1gbit}
probe_reps=${EXCH_PROBE_REPS:-10}
flags=${EXCH_FLAGS:--D L=2 -D D=128 -D B=16 -D T=32}
cluster="sh $src/tools/netns-cluster.sh -p exch -n 2 -r 1"
if [ "$(id -u)" != 0 ]; then
  echo "exchange.sh: needs root (network namespaces and tc shape the cluster's link)" >&2
  exit 2
fi
mpicc=${MPICC:-$(sed -n 's/^MPI_C_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)}
mpicc=${mpicc:-mpicc}
if [ -n "${EXCH_DIR:-}" ]; then
  dir=$EXCH_DIR
  mkdir -p "$dir"
  keep=1
else
  dir=$(mktemp -d)
  keep=0
fi
cleanup() {
  $cluster down 2>/dev/null || true
  [ "$keep" = 1 ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export DTRT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
grep -q '^flags.* avx512f' /proc/cpuinfo && cpu="$cpu (AVX-512)"
echo "# cpu: $cpu, $(nproc) cores; $(date -u '+%F %T') UTC; load:$(uptime | sed 's/.*load average://')"

num() {   # num KEY: the number after "KEY": on stdin
  sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"
}
# bytes PLAN: the training step's bytes per step in a plan, in bytes
bytes() {
  awk '/^collectives of @train_step/ { on = 1; next }
       on && / collectives?, .* per step$/ {
         v = $(NF - 3); u = $(NF - 2)
         m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1
         printf "%.0f\n", v * m; exit }' "$1"
}
predicted() {   # predicted ARGS: dtc --emit=sim's predicted step in ms
  # shellcheck disable=SC2086
  "$build/dtc" --emit=sim $flags "$@" | sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p'
}
# kept PLAN: the candidate the planner kept (its starred line's name), or
# the simple plan it fell back to
kept() {
  awk '/^  kept even data parallel/ { print "even data parallel"; exit }
       /^  \* / { sub(/^  \* /, ""); sub(/ +estimated .*/, ""); print; exit }' "$1"
}

# exchange = auto's alternatives in a plan report, as JSON members: "bf16,
# state whole": its simulated step in ms, ...
alternatives() {
  awk '/^  exchange = auto:/ { on = 1; next }
       on && /^  kept / { exit }
       on && match($0, / +[0-9.]+ ms /) {
         name = substr($0, 5, RSTART - 5); ms = substr($0, RSTART, RLENGTH)
         gsub(/[ ms]/, "", ms)
         printf "%s\"%s\": %s", sep, name, ms; sep = ", " }' "$1"
}

# The model as DeMo trains it, and the parallel blocks.
sed 's/^\( *minimize loss with \)adamw(/\1demo(/' "$src/examples/gpt.dt" > "$dir/gpt_demo.dt"
grep -q 'with demo(' "$dir/gpt_demo.dt" || { echo "exchange.sh: no adamw( in gpt.dt" >&2; exit 1; }
block() {   # block NAME MODEL LINES...: $dir/NAME.dt, gpt on cluster exch
  name=$1 model=$2
  shift 2
  {
    echo "import \"$model\""
    echo
    echo "# a stand-in: dtc --cluster=<the probe's file> replaces it"
    echo "cluster exch {"
    echo "  node n0 {"
    echo "    device r0: cpu(gflops = 50, mem = 4GiB)"
    echo "  }"
    echo "  node n1 {"
    echo "    device r1: cpu(gflops = 50, mem = 4GiB)"
    echo "  }"
    echo "  link inter(bw = 12.5MB/s, lat = 100us)"
    echo "}"
    echo
    echo "parallel gpt on exch {"
    echo "  mesh m[dp = 2]"
    for line in "$@"; do echo "  $line"; done
    echo "}"
  } > "$dir/$name.dt"
}
split="shard ids: [dp, *]|shard next: [dp, *]"
IFS='|'
# shellcheck disable=SC2086
block adamw "$src/examples/gpt.dt" $split "shard_state = none" "plan explicit"
# shellcheck disable=SC2086
block bf16 "$src/examples/gpt.dt" $split "shard_state = none" "exchange = bf16" "plan explicit"
# shellcheck disable=SC2086
block state "$src/examples/gpt.dt" $split "shard_state = dp" "plan explicit"
# shellcheck disable=SC2086
block demo "$dir/gpt_demo.dt" $split "plan explicit"
# shellcheck disable=SC2086
block auto_dp "$src/examples/gpt.dt" $split "exchange = auto" "plan auto"
block auto "$src/examples/gpt.dt" "exchange = auto" "plan auto"
unset IFS
variants="adamw bf16 state demo auto_dp auto"

for rate in $rates; do
  $cluster down 2>/dev/null || true
  $cluster --rate "$rate" up 2>&1 | sed 's/^/# /'
  ip netns list | grep -q '^exch-n1\b' || { echo "exchange.sh: no cluster at $rate" >&2; exit 1; }
  # 2. the probe
  $cluster mpirun "$build/dtc-probe" --reps "$probe_reps" -o "$dir/probe_$rate.dt" --name exch \
    2>&1 | grep -v -e 'setpgid' -e 'spread by' | sed 's/^/# /' || true
  [ -s "$dir/probe_$rate.dt" ] || { echo "exchange.sh: the probe at $rate failed" >&2; exit 1; }
  sed 's/^/# /' "$dir/probe_$rate.dt"
  # 3-4. each variant: compile, plan, predict, time
  for v in $variants; do
    mkdir -p "$dir/$rate/$v"
    # shellcheck disable=SC2086
    "$build/dtc" --cluster="$dir/probe_$rate.dt" $flags "$dir/$v.dt" -o "$dir/$rate/$v/gpt.o"
    # shellcheck disable=SC2086
    "$build/dtc" --emit=plan --cluster="$dir/probe_$rate.dt" $flags "$dir/$v.dt" \
      > "$dir/$rate/$v/plan.txt"
    "$mpicc" -O2 -DHETERO_GPT -I "$src/runtime" -I "$dir/$rate/$v" "$src/bench/hetero.c" \
      "$dir/$rate/$v/gpt.o" "$build/libdtrt.a" -lopenblas -lcjson -lz -lm -o "$dir/$rate/$v/bench"
    ms=$($cluster mpirun "$dir/$rate/$v/bench" "$reps" "exchange_$v" 2> "$dir/$rate/$v/err" |
      num step_ms)
    if [ -z "$ms" ]; then
      cat "$dir/$rate/$v/err" >&2
      echo "exchange.sh: $v at $rate did not run" >&2
      exit 1
    fi
    b=$(bytes "$dir/$rate/$v/plan.txt")
    p=$(predicted --cluster="$dir/probe_$rate.dt" "$dir/$v.dt")
    extra=
    case $v in
      auto*)
        sed -n '/^  candidates:/,/^  kept /s/^/# /p' "$dir/$rate/$v/plan.txt"
        split_state=false
        grep -q '^  state .* m\[dp' "$dir/$rate/$v/plan.txt" && split_state=true
        sed -n '/^  exchange = auto:/,/^  kept [bf]/s/^/# /p' "$dir/$rate/$v/plan.txt"
        format=f32
        grep -q '^  kept bf16' "$dir/$rate/$v/plan.txt" && format=bf16
        extra=", \"plan\": \"$(kept "$dir/$rate/$v/plan.txt")\", \"state_split\": $split_state, \"exchange\": \"$format\", \"simulated_ms\": {$(alternatives "$dir/$rate/$v/plan.txt")}" ;;
    esac
    line=$(awk -v r="$rate" -v v="$v" -v m="$ms" -v b="$b" -v p="$p" 'BEGIN {
      printf "{\"bench\": \"exchange\", \"rate\": \"%s\", \"variant\": \"%s\", \"step_ms\": %.3f, " \
             "\"bytes\": %d, \"predicted_ms\": %.3f, \"measured_over_predicted\": %.3f", r, v, m,
             b, p, m / p }')
    echo "$line$extra}"
    echo "$ms $b" > "$dir/$rate/$v/figures"
    [ -z "$extra" ] || kept "$dir/$rate/$v/plan.txt" > "$dir/$rate/$v/kept"
  done
  # the ratios of the rate
  # shellcheck disable=SC2046
  set -- $(cat "$dir/$rate/adamw/figures" "$dir/$rate/bf16/figures" "$dir/$rate/state/figures" \
               "$dir/$rate/demo/figures" "$dir/$rate/auto_dp/figures" "$dir/$rate/auto/figures")
  awk -v r="$rate" -v a="$1" -v ab="$2" -v f="$3" -v fb="$4" -v s="$5" -v d="$7" -v db="$8" \
      -v adp="$9" -v au="${11}" -v ap="$(cat "$dir/$rate/auto/kept")" \
      -v adpp="$(cat "$dir/$rate/auto_dp/kept")" 'BEGIN {
    printf "{\"bench\": \"exchange_ratios\", \"rate\": \"%s\", \"adamw_over_bf16\": %.3f, " \
           "\"adamw_over_state\": %.3f, \"adamw_over_demo\": %.3f, " \
           "\"adamw_over_bf16_bytes\": %.3f, \"adamw_over_demo_bytes\": %.3f, " \
           "\"adamw_over_auto\": %.3f, \"adamw_over_auto_dp\": %.3f, \"auto_plan\": \"%s\", " \
           "\"auto_dp_plan\": \"%s\"}\n", r, a / f, a / s, a / d, ab / fb, ab / db, a / au,
           a / adp, ap, adpp }'
  $cluster down
done
