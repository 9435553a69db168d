#!/bin/sh
# dlrm.sh [BUILD] [REPS]: a DLRM's sharded tables on a heterogeneous cluster
# made on this machine, and its step on one process against PyTorch's. Run
# from anywhere, after building (cmake --build BUILD):
#
#     bench/dlrm.sh build 20
#
# bench/dlrm.dt: examples/dlrm.dt's network, 26 sparse tables of 20000 rows
# of 16 (33 MB), batch 384, Adagrad. As bench/hetero.sh, it pins rank 0
# alone to core 0 and ranks 1 and 2 together to core 1 (real speeds about
# 2:1:1; a `taskset` wrapper per rank), then:
#  1. probes the three pinned ranks with dtc-probe into a cluster file;
#  2. compiles bench/dlrm_auto.dt (the ids whole, `plan auto` choosing
#     each table's form, whole, by rows, by columns or whole on one device,
#     the batch's split and the axis's ratios) and
#     bench/dlrm_tw.dt (every table whole on one device, 9, 9 and 8 of them,
#     the batch even: Neo's table-wise, even) with --cluster=<that file>,
#     and builds bench/dlrm.c against each with mpicc;
#  3. times each on the three pinned ranks (median step over REPS), and
#     takes each plan's predicted step from dtc --emit=sim; then both again
#     compiled with -fno-coalesce (a collective per table and direction
#     where by default the independent all_to_alls and all_gathers of an
#     axis go as one, passes/coalesce.c), with their collectives a step
#     (dtc --emit=plan's count for @train_step);
#  4. times bench/dlrm.dt on one process (core 0 alone, one thread) and
#     bench/dlrm_torch.py, the same network in PyTorch with
#     nn.EmbeddingBag(sparse=True) and Adagrad, on the same core and one
#     thread; 3 and 4 in turn in DLRM_ROUNDS rounds (default 3; the
#     machine's speed drifts by up to 1.5x within minutes when other
#     tenants share its cores, and a drift then falls on all alike), each
#     time the median over the rounds and even_over_auto the median of the
#     rounds' ratios, and prints one JSON line:
#     {"bench": "dlrm", "batch", "auto_ms", "auto_samples_per_s", "even_ms",
#     "even_samples_per_s", "even_over_auto" (the table-wise even step over
#     the planned row-wise one), "auto_predicted_ms",
#     "measured_over_predicted" (auto), "even_predicted_ms",
#     "even_measured_over_predicted", "auto_collectives", "even_collectives",
#     "auto_nc_ms", "even_nc_ms" (-fno-coalesce), "auto_nc_collectives",
#     "even_nc_collectives", "auto_nc_over_auto", "even_nc_over_even" (the
#     step without coalescing over the step with: above 1, coalescing is
#     faster), "auto_nc_predicted_ms", "even_nc_predicted_ms",
#     "one_ms", "torch_ms", "dtc_over_torch"
#     (one_ms over torch_ms: below 1, dtc trains faster), "rounds", "load"}.
# Every rank runs one thread (DTRT_NUM_THREADS=1). Environment: MPIEXEC,
# MPICC (default those BUILD was configured with), PYTHON (default
# /usr/bin/python3; no torch: torch_ms and dtc_over_torch are null),
# DLRM_DIR (work files, default a fresh mktemp -d, removed at the end unless
# given). Needs taskset (util-linux) and two cores.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
reps=${2:-20}
rounds=${DLRM_ROUNDS:-3}
python=${PYTHON:-/usr/bin/python3}
if [ -n "$DLRM_DIR" ]; then
  dir=$DLRM_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

# shellcheck source=bench/pinned.sh
. "$src/bench/pinned.sh"
count DLRM_ROUNDS "$rounds"

# build_bench NAME DT [dtc args...]: dtc the model into $dir/NAME/, then
# $dir/NAME/bench from dlrm.c.
build_bench() {
  name=$1 dt=$2
  shift 2
  mkdir -p "$dir/$name"
  "$build/dtc" "$@" "$dt" -o "$dir/$name/model.o"
  "$mpicc" -O2 -I "$src/runtime" -I "$src/bench" -I "$dir/$name" "$src/bench/dlrm.c" \
    "$dir/$name/model.o" "$build/libdtrt.a" -lopenblas -lcjson -lz -lm -o "$dir/$name/bench"
}

predicted() {   # dtc --emit=sim ARGS: the predicted step in ms
  "$build/dtc" --emit=sim "$@" 2>/dev/null | sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p'
}

load=$(uptime | sed 's/.*load average: *//; s/,.*//')
echo "# $(date -u '+%F %T') UTC; load:$(uptime | sed 's/.*load average://')" >&2

# 1. probe the pinned ranks
run 3 "$dir/pin.sh" "$build/dtc-probe" -o "$dir/probe3.dt" --name hetero3
sed 's/^/# /' "$dir/probe3.dt" >&2

collectives() {   # PLAN: the collectives of @train_step a step, from --emit=plan
  sed -n '/^collectives of @train_step/,/ per step$/s/^  \([0-9]*\) collectives, .*/\1/p' "$1"
}

# 2-3. the planned row-wise tables against even table-wise ones, each
# coalesced (the default) and not (-fno-coalesce: suffix nc)
for plan in auto tw autonc twnc; do
  dt=$src/bench/dlrm_${plan%nc}.dt
  flags=
  [ "$plan" = "${plan%nc}" ] || flags=-fno-coalesce
  # shellcheck disable=SC2086
  build_bench "$plan" "$dt" --cluster="$dir/probe3.dt" $flags 2>/dev/null
  # shellcheck disable=SC2086
  "$build/dtc" --emit=plan --cluster="$dir/probe3.dt" $flags "$dt" -o "$dir/$plan.plan" 2>/dev/null
  sed -n '/^  device  /,/^  predicted step/s/^/# /p' "$dir/$plan.plan" >&2
done
build_bench one "$src/bench/dlrm.dt"
# 3-4. the four plans on the pinned ranks, one process (core 0 alone, one
# thread) and PyTorch (the same), in turn in DLRM_ROUNDS rounds: each the
# median over the rounds, even_over_auto the median of the rounds' ratios
: > "$dir/rounds"
r=1
while [ "$r" -le "$rounds" ]; do
  line=
  for plan in auto tw autonc twnc; do
    line="$line $(run 3 "$dir/pin.sh" "$dir/$plan/bench" "$reps" "dlrm_$plan" | num step_ms)"
  done
  line="$line $(taskset -c 0 "$dir/one/bench" "$reps" dlrm_one | num step_ms)"
  if "$python" -c 'import torch' 2>/dev/null; then
    line="$line $(taskset -c 0 "$python" "$src/bench/dlrm_torch.py" "$reps" 1)"
  fi
  echo "$line" >> "$dir/rounds"
  r=$((r + 1))
done
# shellcheck disable=SC2046
set -- $(medians "$dir/rounds" 6 2 1)
auto_ms=$1 even_ms=$2 auto_nc_ms=$3 even_nc_ms=$4 one_ms=$5 torch_ms=$6 ratio=$7
auto_pred=$(predicted --cluster="$dir/probe3.dt" "$src/bench/dlrm_auto.dt")
even_pred=$(predicted --cluster="$dir/probe3.dt" "$src/bench/dlrm_tw.dt")
auto_nc_pred=$(predicted --cluster="$dir/probe3.dt" -fno-coalesce "$src/bench/dlrm_auto.dt")
even_nc_pred=$(predicted --cluster="$dir/probe3.dt" -fno-coalesce "$src/bench/dlrm_tw.dt")
counts="$(collectives "$dir/auto.plan") $(collectives "$dir/tw.plan")"
counts="$counts $(collectives "$dir/autonc.plan") $(collectives "$dir/twnc.plan")"

batch=$(sed -n 's/^#define DLRM_DIM_B \([0-9]*\)/\1/p' "$dir/one/dlrm.h")

awk -v b="$batch" -v a="$auto_ms" -v e="$even_ms" -v ap="$auto_pred" -v ep="$even_pred" \
    -v q="$ratio" -v rounds="$rounds" \
    -v an="$auto_nc_ms" -v en="$even_nc_ms" -v anp="$auto_nc_pred" -v enp="$even_nc_pred" \
    -v c="$counts" -v o="$one_ms" -v t="$torch_ms" -v l="$load" 'BEGIN {
  split(c, n, " ")
  printf "{\"bench\": \"dlrm\", \"batch\": %d, \"auto_ms\": %.3f, \"auto_samples_per_s\": %.0f, " \
         "\"even_ms\": %.3f, \"even_samples_per_s\": %.0f, \"even_over_auto\": %.3f, " \
         "\"auto_predicted_ms\": %.3f, \"measured_over_predicted\": %.3f, " \
         "\"even_predicted_ms\": %.3f, \"even_measured_over_predicted\": %.3f, ", \
         b, a, b / a * 1e3, e, b / e * 1e3, q, ap, a / ap, ep, e / ep
  printf "\"auto_collectives\": %d, \"even_collectives\": %d, \"auto_nc_ms\": %.3f, " \
         "\"even_nc_ms\": %.3f, \"auto_nc_collectives\": %d, \"even_nc_collectives\": %d, " \
         "\"auto_nc_over_auto\": %.3f, \"even_nc_over_even\": %.3f, " \
         "\"auto_nc_predicted_ms\": %.3f, \"even_nc_predicted_ms\": %.3f, ", \
         n[1], n[2], an, en, n[3], n[4], an / a, en / e, anp, enp
  printf "\"one_ms\": %.3f, ", o
  if (t == "null")
    printf "\"torch_ms\": null, \"dtc_over_torch\": null, "
  else
    printf "\"torch_ms\": %.3f, \"dtc_over_torch\": %.3f, ", t, o / t
  printf "\"rounds\": %d, \"load\": %s}\n", rounds, l
}'
