#!/bin/sh
# longctx.sh [BUILD] [REPS]: long-context training, examples/gpt.dt at a
# small width and a long sequence (LONGCTX_FLAGS, default -D B=1 -D T=3072
# -D D=64 -D H=4 -D L=2: 4 heads of 16) with its sequence split over three
# MPI ranks, pinned as bench/hetero.sh pins them (rank 0 alone on core 0,
# ranks 1 and 2 sharing core 1: speeds about 2:1:1). Run from anywhere,
# after building (cmake --build BUILD --target dtc dtc-probe bench_attention):
#
#     bench/longctx.sh build 5
#
#  1. probes the three pinned ranks with dtc-probe into a cluster file;
#  2. compiles examples/gpt.dt four ways with its sequence split over the
#     ranks (`shard pos: [cp, *]`: every activation split along T, causal
#     ring attention) on that cluster: in equal shares (`plan even`), as
#     the planner chooses (`plan auto`: the shares, and a ring or the heads
#     split; "auto"), in shares in proportion to the probed speeds
#     (`cp(r0, r1, r2)`, as hetero.sh sizes its pipeline stages; "speed"),
#     and in those shares with `attention = heads` (the heads split instead
#     around each attention, taking the same shares; left out, null, where
#     the shares are equal and 3 does not divide the heads), and builds
#     bench/hetero.c against each with mpicc;
#  3. times each on the three pinned ranks (median step over REPS), the four
#     in turn in LONGCTX_ROUNDS rounds (default 3; the machine's speed
#     drifts within minutes, and a drift then falls on all alike), each the
#     median over the rounds and even_over_auto the median of the rounds'
#     ratios, and takes each plan's predicted step from dtc --emit=sim;
#  4. times the attention kernel alone on one process (core 0, one thread):
#     build/bench/attention at the model's attention shape [B, H, T, D/H],
#     causal, against PyTorch's F.scaled_dot_product_attention and the FP32
#     peak (bench/peak.h), and prints one JSON line:
#     {"bench": "longctx", "b", "t", "d", "h", "l", "shares" (the auto plan's
#     positions per rank), "auto_ms", "even_ms", "even_over_auto",
#     "auto_predicted_ms", "measured_over_predicted", "even_predicted_ms",
#     "even_measured_over_predicted", "speed_ms", "speed_over_auto",
#     "speed_predicted_ms", "speed_measured_over_predicted", "heads_ms",
#     "even_over_heads",
#     "heads_predicted_ms", "heads_measured_over_predicted", "attn_dtc_ms",
#     "attn_torch_ms", "dtc_over_torch" (the median over rounds of dtc's time
#     over torch's: below 1, dtc's attention is faster),
#     "attn_dtc_over_peak" (its time over the FP32 peak's for its FLOPs),
#     "rounds", "load"}.
# Every rank runs one thread (DTRT_NUM_THREADS=1). Environment: MPIEXEC,
# MPICC (default those BUILD was configured with), PYTHON (default
# /usr/bin/python3; no torch: attn_torch_ms and dtc_over_torch are null),
# LONGCTX_FLAGS, LONGCTX_PROBE (a cluster file of an earlier probe of the
# same pinned ranks to use instead of probing), LONGCTX_DIR (work files,
# default a fresh mktemp -d, removed at the end unless given). Needs taskset (util-linux) and two cores.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
reps=${2:-5}
rounds=${LONGCTX_ROUNDS:-3}
flags=${LONGCTX_FLAGS:--D B=1 -D T=3072 -D D=64 -D H=4 -D L=2}
python=${PYTHON:-/usr/bin/python3}
if [ -n "$LONGCTX_DIR" ]; then
  dir=$LONGCTX_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

# shellcheck source=bench/pinned.sh
. "$src/bench/pinned.sh"
count LONGCTX_ROUNDS "$rounds"

# dim NAME: the value of -D NAME=... in $flags, else examples/gpt.dt's
dim() {
  v=$(echo "$flags" | sed -n "s/.*-D *$1=\([0-9]*\).*/\1/p")
  [ -n "$v" ] || v=$(sed -n "s/^model gpt(.*[( ]$1 = \([0-9]*\).*/\1/p" "$src/examples/gpt.dt")
  echo "$v"
}

# build_bench NAME DT: dtc the model into $dir/NAME/, then $dir/NAME/bench
build_bench() {
  name=$1 dt=$2
  rm -rf "${dir:?}/$name"
  mkdir -p "$dir/$name"
  # shellcheck disable=SC2086
  "$build/dtc" $flags "$dt" -o "$dir/$name/model.o" &&
    "$mpicc" -O2 -DHETERO_GPT -I "$src/runtime" -I "$dir/$name" "$src/bench/hetero.c" \
      "$dir/$name/model.o" "$build/libdtrt.a" -lopenblas -lcjson -lz -lm -o "$dir/$name/bench"
}

predicted() {   # dtc --emit=sim ARGS: the predicted step in ms
  # shellcheck disable=SC2086
  "$build/dtc" --emit=sim $flags "$@" 2>/dev/null |
    sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p'
}

load=$(uptime | sed 's/.*load average: *//; s/,.*//')
echo "# $(date -u '+%F %T') UTC; load:$(uptime | sed 's/.*load average://')" >&2

# 1. probe the pinned ranks
if [ -n "$LONGCTX_PROBE" ]; then
  cp "$LONGCTX_PROBE" "$dir/probe3.dt"
else
  run 3 "$dir/pin.sh" "$build/dtc-probe" -o "$dir/probe3.dt" --name hetero3
fi
sed 's/^/# /' "$dir/probe3.dt" >&2

# 2. the three plans: the shares of the sequence even, and in proportion to
# the probed speeds (hetero.sh's pipeline stages take theirs so), by a ring
# and by heads
ratios=$(sed -n 's/.*gflops = \([0-9.]*\).*/\1/p' "$dir/probe3.dt" |
  awk '{g[NR] = $1; s += $1} END {
    a = sprintf("%.4f", g[1] / s); b = sprintf("%.4f", g[2] / s)
    printf "%s, %s, %.4f", a, b, 1 - a - b }')
for plan in even auto speed heads; do
  split="cp($ratios)" mode=explicit opt=
  [ $plan = even ] && split=cp mode=even
  [ $plan = auto ] && split=cp mode=auto
  [ $plan = heads ] && opt="attention = heads"
  cat > "$dir/$plan.dt" <<PLAN
import "$src/examples/gpt.dt"
import "$dir/probe3.dt"

parallel gpt on hetero3 {
  mesh m[cp = 3]
  shard pos: [$split, *]
  $opt
  plan $mode
}
PLAN
  # a split the heads cannot take (equal shares of 4 heads) leaves heads out
  if build_bench "$plan" "$dir/$plan.dt"; then
    # shellcheck disable=SC2086
    "$build/dtc" --emit=plan $flags "$dir/$plan.dt" -o "$dir/$plan.plan"
  fi
done
shares=$(grep '^  param pos ' "$dir/auto.plan" | sed 's/.*m\[[^]]*\] *//; s/f32\[\([0-9]*\),[0-9]*\]/\1/g')
sed -n '/^collectives of @train_step/,/per step$/s/^/# /p' "$dir/heads.plan" 2>/dev/null |
  tail -n 1 | sed 's/^# /# heads: /' >&2

# 3. each on the pinned ranks, in turn in LONGCTX_ROUNDS rounds (each the
# median over the rounds; even_over_auto the median of the rounds' ratios),
# and its prediction
plans="even auto speed"
[ -x "$dir/heads/bench" ] && plans="$plans heads"
: > "$dir/rounds"
r=1
while [ "$r" -le "$rounds" ]; do
  line=
  for plan in $plans; do
    line="$line $(run 3 "$dir/pin.sh" "$dir/$plan/bench" "$reps" "longctx_$plan" | num step_ms)"
  done
  echo "$line" >> "$dir/rounds"
  r=$((r + 1))
done
# shellcheck disable=SC2046
set -- $(medians "$dir/rounds" 4 1 2)
even_ms=$1 auto_ms=$2 speed_ms=$3 heads_ms=$4 ratio=$5
even_pred=$(predicted "$dir/even.dt")
auto_pred=$(predicted "$dir/auto.dt")
speed_pred=$(predicted "$dir/speed.dt")
heads_pred=null
[ "$heads_ms" = null ] || heads_pred=$(predicted "$dir/heads.dt")

# 4. the attention alone, one process on core 0, one thread
b=$(dim B) t=$(dim T) d=$(dim D) h=$(dim H) l=$(dim L)
attn=$(PYTHON="$python" taskset -c 0 "$build/bench/attention" "$reps" "$src/bench" \
  "$b" "$h" "$t" $((d / h)) 1 | grep '"causal": true')
echo "# $attn" >&2
attn_ms=$(echo "$attn" | num dtc_ms)
attn_peak=$(echo "$attn" | num dtc_over_peak)
torch_ms=$(echo "$attn" | num torch_ms)
torch_ms=${torch_ms:-null}
over_torch=$(echo "$attn" | num dtc_over_torch)

awk -v b="$b" -v t="$t" -v d="$d" -v h="$h" -v l="$l" -v sh="$shares" -v a="$auto_ms" \
    -v e="$even_ms" -v sp="$speed_ms" -v spp="$speed_pred" -v hd="$heads_ms" -v ap="$auto_pred" -v ep="$even_pred" \
    -v hp="$heads_pred" -v am="$attn_ms" -v tm="$torch_ms" -v pk="$attn_peak" -v ot="$over_torch" \
    -v ld="$load" -v q="$ratio" -v rounds="$rounds" 'BEGIN {
  printf "{\"bench\": \"longctx\", \"b\": %d, \"t\": %d, \"d\": %d, \"h\": %d, \"l\": %d, " \
         "\"shares\": \"%s\", \"auto_ms\": %.3f, \"even_ms\": %.3f, \"even_over_auto\": %.3f, " \
         "\"auto_predicted_ms\": %.3f, \"measured_over_predicted\": %.3f, " \
         "\"even_predicted_ms\": %.3f, \"even_measured_over_predicted\": %.3f, " \
         "\"speed_ms\": %.3f, \"speed_over_auto\": %.3f, \"speed_predicted_ms\": %.3f, " \
         "\"speed_measured_over_predicted\": %.3f, " \
         "", b, t, d, h, l, sh, a, e, q, ap, a / ap, ep, e / ep, sp, sp / a, spp, sp / spp
  if (hd == "null")
    printf "\"heads_ms\": null, \"even_over_heads\": null, \"heads_predicted_ms\": null, " \
           "\"heads_measured_over_predicted\": null, "
  else
    printf "\"heads_ms\": %.3f, \"even_over_heads\": %.3f, \"heads_predicted_ms\": %.3f, " \
           "\"heads_measured_over_predicted\": %.3f, ", hd, e / hd, hp, hd / hp
  printf "\"attn_dtc_ms\": %.3f, ", am
  if (tm == "null")
    printf "\"attn_torch_ms\": null, \"dtc_over_torch\": null, "
  else
    printf "\"attn_torch_ms\": %.3f, \"dtc_over_torch\": %.3f, ", tm, ot
  printf "\"attn_dtc_over_peak\": %.2f, \"rounds\": %d, \"load\": %s}\n", pk, rounds, ld
}'
