#!/bin/sh
# hetero.sh [BUILD] [REPS]: dtc's planner on a heterogeneous cluster made on
# this machine. Run from anywhere, after building (cmake --build BUILD):
#
#     bench/hetero.sh build 30
#     HETERO_RUNS=5 bench/hetero.sh build 30    # five comparisons in a row
#
# It pins rank 0 alone to core 0 and ranks 1 and 2 together to core 1 (real
# speeds about 2:1:1; a `taskset` wrapper per rank), then:
#  1. probes the three pinned ranks with dtc-probe into a cluster file;
#  2. compiles bench/hetero_{mlp,gpt}_{auto,even}.dt with --cluster=<that
#     file> (it replaces the stand-in cluster the parallel blocks name) and
#     builds bench/hetero.c against each object with mpicc;
#  3. times each on the three pinned ranks (median step over REPS);
#  4. times the same step on one device (rank 0 alone on core 0), 3 and 4
#     in turn in HETERO_ROUNDS rounds (default 3: auto, even, one, auto,
#     ...; the machine's speed drifts by up to 1.5x within minutes when
#     other tenants share its cores, and a drift then falls on all three
#     alike), each the median over the rounds and even_over_auto the
#     median of the rounds' ratios; takes two
#     ideal steps: the step's FLOPs (dtc --emit=plan) over the sum of the
#     probed GFLOP/s (ideal_ms), and the one-device step's time spread over
#     the three ranks, one_ms x (rank 0's GFLOP/s) / (the sum) (ideal_work_ms:
#     the work as the kernels really do it, not as FLOPs), and the predicted
#     step of the auto plan (dtc --emit=sim), and prints one JSON line per
#     model: {"bench": "hetero_mlp", "auto_ms", "even_ms", "even_over_auto",
#     "ideal_ms", "auto_over_ideal", "one_ms", "ideal_work_ms",
#     "auto_over_ideal_work", "predicted_ms", "measured_over_predicted",
#     "one_predicted_ms", "one_measured_over_predicted",
#     "relative_measured_over_predicted", "kept_even", "run", "rounds"}
#     (kept_even: the planner kept even data parallel, its best plan
#     gaining less than the probe's noise; one_predicted_ms the one-device
#     step the simulator predicts on rank 0's probed figures, and
#     relative_measured_over_predicted the measured auto_ms / one_ms over
#     the predicted: the simulator's error on the ranks together, apart from
#     a drift of the machine's speed since the probe, which falls on
#     one_measured_over_predicted alike);
#  with HETERO_RUNS=N, runs 1-4 N times in a row, each with its own probe,
#  then prints one summary line per model over the runs' even_over_auto:
#     {"bench": "hetero_mlp_runs", "runs", "min", "median", "max",
#     "auto_ever_slower" (even_over_auto below 1 in some run), "kept_even"
#     (in how many runs), and the min, median and max of
#     measured_over_predicted, auto_over_ideal_work and
#     relative_measured_over_predicted ("..._min" and so on)};
#  6. (after 5) the deep model, examples/gpt.dt at L = 12 (HETERO_DEEP_FLAGS,
#     default -D L=12 -D B=48 -D T=32 -D D=128), on the pinned ranks of the
#     last probe: even data parallelism (bench/hetero_deep_even.dt), plan
#     auto (bench/hetero_deep_auto.dt: the inputs open, so the planner
#     weighs data and tensor parallelism and pipeline stages; "plan" names
#     what it kept), three pipeline stages written with layer ratios from
#     the probed speeds and HETERO_DEEP_MB micro-batches (default 4), and
#     the same step on rank 0 alone, the four in turn in HETERO_ROUNDS
#     rounds as in 2-4 (each time the median over the rounds, each ratio
#     the median of the rounds' ratios): {"bench":
#     "hetero_deep", "auto_ms", "even_ms", "even_over_auto", "one_ms",
#     "ideal_work_ms", "auto_over_ideal_work", "plan", "pp_ms",
#     "even_over_pp", "pp_predicted_ms", "pp_measured_over_predicted",
#     "pp_plan", "rounds"}. Then the simulator's check on pipelines whose
#     devices do not share a core: a probe of two ranks, one per core, and
#     gpt.dt as 2 even stages in HETERO_DEEP_MB micro-batches on them: {"bench":
#     "hetero_deep_pp2", "pp2_ms", "pp2_predicted_ms",
#     "pp2_measured_over_predicted"}. (On the 2:1:1 set-up ranks 1 and 2
#     take turns on core 1, so one runs at twice its probed speed while the
#     other waits in the bubble; the simulator's devices keep their speed.)
#     HETERO_DEEP_ONLY=1 runs the probe and this step alone.
#  7. (after 6) deterministic mode on the MLP, pinned as in 1-4 on the last
#     probe: hetero_mlp_even.dt and hetero_mlp_auto.dt each compiled as it is
#     and with -fdeterministic (8 pieces of the batch) and -fdeterministic=4,
#     run in HETERO_DET_ROUNDS rounds (default 5), the five builds in turn in
#     each round; the median over rounds of each run's median step, and the
#     range of the ratio over rounds: {"bench": "hetero_det", "rounds",
#     "default_ms", "deterministic_ms", "deterministic_over_default",
#     "deterministic_over_default_min", "deterministic_over_default_max",
#     "deterministic4_ms", "deterministic4_over_default", "auto_default_ms",
#     "auto_deterministic_ms", "auto_deterministic_over_default"}.
#     HETERO_DET_ONLY=1 runs the probe and steps 7 and 8 alone.
#  8. (after 7) the checkpoint save of the MLP (params and momentum): the
#     even plan's 3 pinned ranks, each writing its blocks into the one file,
#     against one process (examples/mlp_big.dt on core 0), REPS saves each
#     per round, the same rounds: {"bench": "hetero_save", "rounds",
#     "one_ms", "three_ms", "three_over_one", "three_over_one_min",
#     "three_over_one_max"}.
#  5. checks the simulator on the MLP unpinned: 1 rank (examples/mlp_big.dt),
#     2 ranks (hetero_mlp_dp2.dt) and 3 ranks (hetero_mlp_even.dt), each
#     compiled for its own probe of that many unpinned ranks, timed in
#     HETERO_ROUNDS rounds (the median of the rounds' medians: one run's
#     median moves by a sixth between runs on this kind of machine), one
#     JSON line per rank count: {"bench": "hetero_sim", "ranks",
#     "predicted_ms", "measured_ms", "measured_over_predicted"}.
# Every rank runs one thread (DTRT_NUM_THREADS=1; the probe and the runs
# share it). Environment: MPIEXEC and MPICC
# (default those BUILD was configured with, else mpiexec and mpicc; both must
# be of the MPI libdtrt was built with), HETERO_GPT_B (the transformer's
# batch, default 48), HETERO_RUNS (default 1), HETERO_DIR (work files, default a fresh mktemp -d,
# removed at the end unless given). Needs taskset (util-linux) and two cores.
# Open MPI's mpiexec gets --oversubscribe, --bind-to none and, as root,
# --allow-run-as-root; MPICH's needs none of them.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
reps=${2:-20}
gpt_b=${HETERO_GPT_B:-48}
runs=${HETERO_RUNS:-1}
rounds=${HETERO_ROUNDS:-3}
if [ -n "$HETERO_DIR" ]; then
  dir=$HETERO_DIR
  mkdir -p "$dir"
else
  dir=$(mktemp -d)
  trap 'rm -rf "$dir"' EXIT
fi

# shellcheck source=bench/pinned.sh
. "$src/bench/pinned.sh"
count HETERO_ROUNDS "$rounds"
count HETERO_RUNS "$runs"

# build NAME DT DEFINE [dtc args...]: dtc the model into $dir/NAME/, then
# $dir/NAME/bench from hetero.c.
build_bench() {
  name=$1 dt=$2 def=$3
  shift 3
  mkdir -p "$dir/$name"
  "$build/dtc" "$@" "$dt" -o "$dir/$name/model.o"
  "$mpicc" -O2 "-D$def" -I "$src/runtime" -I "$dir/$name" "$src/bench/hetero.c" \
    "$dir/$name/model.o" "$build/libdtrt.a" -lopenblas -lcjson -lz -lm -o "$dir/$name/bench"
}

gflops_sum() {   # the sum of the probed GFLOP/s in cluster file $1
  sed -n 's/.*gflops = \([0-9.]*\).*/\1/p' "$1" | awk '{s += $1} END {printf "%.4f", s}'
}

predicted() {   # dtc --emit=sim ARGS: the predicted step in ms
  "$build/dtc" --emit=sim "$@" | sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p'
}

echo "# $(date -u '+%F %T') UTC; load:$(uptime | sed 's/.*load average://')" >&2

# compare RUN: steps 1-4 with a probe of their own; each model's
# even_over_auto and whether the plan kept even data parallel (1 or 0) are
# appended to $dir/runs_MODEL.
compare() {
  k=$1
  # 1. probe the pinned ranks
  run 3 "$dir/pin.sh" "$build/dtc-probe" -o "$dir/probe3.dt" --name hetero3
  sed 's/^/# /' "$dir/probe3.dt" >&2
  total=$(gflops_sum "$dir/probe3.dt")
  first=$(sed -n 's/.*gflops = \([0-9.]*\).*/\1/p' "$dir/probe3.dt" | head -n 1)

  # 2-4. auto against even on the pinned ranks, and the same step on one
  # device, rank 0 alone on core 0: the three in turn, HETERO_ROUNDS times,
  # so that a drift of the machine's speed falls on all three alike
  for model in mlp gpt; do
    if [ $model = mlp ]; then def=HETERO_MLP dflags=; else def=HETERO_GPT dflags="-D B=$gpt_b"; fi
    for plan in auto even; do
      # shellcheck disable=SC2086
      build_bench "${model}_$plan" "$src/bench/hetero_${model}_$plan.dt" $def \
        --cluster="$dir/probe3.dt" $dflags
    done
    if [ $model = mlp ]; then one=$src/examples/mlp_big.dt; else one=$src/examples/transformer.dt; fi
    # shellcheck disable=SC2086
    build_bench "${model}_one" "$one" $def --cluster="$dir/probe3.dt" $dflags
    : > "$dir/rounds_$model"
    r=1
    while [ "$r" -le "$rounds" ]; do
      a=$(run 3 "$dir/pin.sh" "$dir/${model}_auto/bench" "$reps" "hetero_${model}_auto" |
        num step_ms)
      e=$(run 3 "$dir/pin.sh" "$dir/${model}_even/bench" "$reps" "hetero_${model}_even" |
        num step_ms)
      o=$(run 1 "$dir/pin.sh" "$dir/${model}_one/bench" "$reps" "hetero_${model}_one" |
        num step_ms)
      echo "$a $e $o" >> "$dir/rounds_$model"
      r=$((r + 1))
    done
    # each the median over the rounds; even_over_auto the median of the
    # rounds' ratios
    # shellcheck disable=SC2046
    set -- $(medians "$dir/rounds_$model" 3 2 1)
    auto_ms=$1 even_ms=$2 one_ms=$3 ratio=$4
    # shellcheck disable=SC2086
    "$build/dtc" --emit=plan --cluster="$dir/probe3.dt" $dflags \
      "$src/bench/hetero_${model}_auto.dt" > "$dir/${model}_plan.txt"
    sed -n '/^  best plan found/,/^  kept /s/^/# /p' "$dir/${model}_plan.txt" >&2
    gflop=$(sed -n 's/.*: \([0-9.e+-]*\) GFLOP per step.*/\1/p' "$dir/${model}_plan.txt")
    kept=0
    grep -q '^  kept even data parallel' "$dir/${model}_plan.txt" && kept=1
    # shellcheck disable=SC2086
    pred=$(predicted --cluster="$dir/probe3.dt" $dflags "$src/bench/hetero_${model}_auto.dt")
    # shellcheck disable=SC2086
    one_pred=$(predicted --cluster="$dir/probe3.dt" $dflags "$one")
    awk -v m="hetero_$model" -v a="$auto_ms" -v e="$even_ms" -v g="$gflop" -v s="$total" \
        -v p="$pred" -v o="$one_ms" -v op="$one_pred" -v g0="$first" -v kept="$kept" -v k="$k" \
        -v q="$ratio" -v rounds="$rounds" 'BEGIN {
      ideal = g / s * 1e3
      work = o * g0 / s
      printf "{\"bench\": \"%s\", \"auto_ms\": %.3f, \"even_ms\": %.3f, \"even_over_auto\": %.3f, " \
             "\"ideal_ms\": %.3f, \"auto_over_ideal\": %.3f, \"one_ms\": %.3f, " \
             "\"ideal_work_ms\": %.3f, \"auto_over_ideal_work\": %.3f, \"predicted_ms\": %.3f, " \
             "\"measured_over_predicted\": %.3f, \"one_predicted_ms\": %.3f, " \
             "\"one_measured_over_predicted\": %.3f, \"relative_measured_over_predicted\": %.3f, " \
             "\"kept_even\": %s, \"run\": %d, \"rounds\": %d}\n", m, a, e, q, ideal, a / ideal,
             o, work, a / work, p, a / p, op, o / op, (a / o) / (p / op),
             kept ? "true" : "false", k, rounds
    }'
    awk -v q="$ratio" -v a="$auto_ms" -v kept="$kept" -v p="$pred" -v o="$one_ms" \
        -v op="$one_pred" -v g0="$first" -v s="$total" 'BEGIN {
      printf "%.6f %d %.6f %.6f %.6f\n", q, kept, a / p, a / (o * g0 / s), (a / o) / (p / op)
    }' >> "$dir/runs_$model"
  done
}

summary() {   # summary MODEL: the line over the runs of $dir/runs_MODEL
  stats() {   # stats COLUMN NAME: "NAME_min": .., "NAME_median": .., "NAME_max": ..
    cut -d' ' -f"$1" "$dir/runs_$model" | sort -n | awk -v n="$2" '{v[NR] = $1} END {
      med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf ", \"%s_min\": %.3f, \"%s_median\": %.3f, \"%s_max\": %.3f", n, v[1], n, med, n, v[NR]
    }'
  }
  model=$1
  sort -n "$dir/runs_$1" | awk -v m="hetero_$1" '{v[NR] = $1; kept += $2} END {
    med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "{\"bench\": \"%s_runs\", \"runs\": %d, \"min\": %.3f, \"median\": %.3f, " \
           "\"max\": %.3f, \"auto_ever_slower\": %s, \"kept_even\": %d", m, NR, v[1], med,
           v[NR], v[1] < 1 ? "true" : "false", kept
  }'
  stats 3 measured_over_predicted
  stats 4 auto_over_ideal_work
  stats 5 relative_measured_over_predicted
  echo "}"
}

rm -f "$dir/runs_mlp" "$dir/runs_gpt"
if [ "${HETERO_DEEP_ONLY:-0}" = 1 ] || [ "${HETERO_DET_ONLY:-0}" = 1 ]; then
  run 3 "$dir/pin.sh" "$build/dtc-probe" -o "$dir/probe3.dt" --name hetero3
  sed 's/^/# /' "$dir/probe3.dt" >&2
  runs=0
fi
i=1
while [ "$i" -le "$runs" ]; do
  compare "$i"
  i=$((i + 1))
done
if [ "$runs" -gt 0 ]; then
  summary mlp
  summary gpt
fi

# 5. the simulator against measurement, unpinned, even plan, 1 to 3 ranks
for n in 1 2 3; do
  [ "${HETERO_DEEP_ONLY:-0}" = 1 ] || [ "${HETERO_DET_ONLY:-0}" = 1 ] && break
  case $n in
    1) dt=$src/examples/mlp_big.dt ;;
    2) dt=$src/bench/hetero_mlp_dp2.dt ;;
    3) dt=$src/bench/hetero_mlp_even.dt ;;
  esac
  run "$n" "$build/dtc-probe" -o "$dir/probe${n}u.dt" --name hetero$n
  sed 's/^/# /' "$dir/probe${n}u.dt" >&2
  build_bench "sim$n" "$dt" HETERO_MLP --cluster="$dir/probe${n}u.dt"
  : > "$dir/rounds_sim$n"
  r=1
  while [ "$r" -le "$rounds" ]; do   # the median of the rounds' medians
    run "$n" "$dir/sim$n/bench" "$reps" "hetero_sim$n" | num step_ms >> "$dir/rounds_sim$n"
    r=$((r + 1))
  done
  ms=$(sort -n "$dir/rounds_sim$n" | awk '{v[NR] = $1} END {
    print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
  pred=$(predicted --cluster="$dir/probe${n}u.dt" "$dt")
  awk -v n="$n" -v m="$ms" -v p="$pred" 'BEGIN {
    printf "{\"bench\": \"hetero_sim\", \"ranks\": %d, \"predicted_ms\": %.3f, " \
           "\"measured_ms\": %.3f, \"measured_over_predicted\": %.3f}\n", n, p, m, m / p
  }'
done

# 6. the deep model: even and auto data parallel, and pipeline stages sized
# by the last probe's speeds, pinned as in 1-4
deep_step() {
deep_flags=${HETERO_DEEP_FLAGS:--D L=12 -D B=48 -D T=32 -D D=128}
mb=${HETERO_DEEP_MB:-4}
ratios=$(sed -n 's/.*gflops = \([0-9.]*\).*/\1/p' "$dir/probe3.dt" |
  awk '{g[NR] = $1; s += $1} END {
    a = sprintf("%.4f", g[1] / s); b = sprintf("%.4f", g[2] / s)
    printf "%s, %s, %.4f", a, b, 1 - a - b }')
cat > "$dir/deep_pp.dt" <<DEEP
import "$src/examples/gpt.dt"
import "$dir/probe3.dt"

parallel gpt on hetero3 {
  mesh m[pp = 3]
  shard layers.wq: [pp($ratios), *, *]
  microbatches = $mb
  plan explicit
}
DEEP
for plan in even auto; do
  # shellcheck disable=SC2086
  build_bench "deep_$plan" "$src/bench/hetero_deep_$plan.dt" HETERO_GPT \
    --cluster="$dir/probe3.dt" $deep_flags
done
# shellcheck disable=SC2086
build_bench deep_pp "$dir/deep_pp.dt" HETERO_GPT $deep_flags
# shellcheck disable=SC2086
build_bench deep_one "$src/examples/gpt.dt" HETERO_GPT --cluster="$dir/probe3.dt" $deep_flags
# the four in turn, HETERO_ROUNDS times, as in 2-4: each the median over
# the rounds, and each ratio the median of the rounds' ratios
: > "$dir/rounds_deep"
r=1
while [ "$r" -le "$rounds" ]; do
  e=$(run 3 "$dir/pin.sh" "$dir/deep_even/bench" "$reps" hetero_deep_even | num step_ms)
  a=$(run 3 "$dir/pin.sh" "$dir/deep_auto/bench" "$reps" hetero_deep_auto | num step_ms)
  q=$(run 3 "$dir/pin.sh" "$dir/deep_pp/bench" "$reps" hetero_deep_pp | num step_ms)
  o=$(run 1 "$dir/pin.sh" "$dir/deep_one/bench" "$reps" hetero_deep_one | num step_ms)
  echo "$e $a $q $o" >> "$dir/rounds_deep"
  r=$((r + 1))
done
# shellcheck disable=SC2046
set -- $(medians "$dir/rounds_deep" 4 1 2)
even_ms=$1 auto_ms=$2 pp_ms=$3 one_ms=$4 even_auto=$5
auto_one=$(medians "$dir/rounds_deep" 0 2 4)
even_pp=$(medians "$dir/rounds_deep" 0 1 3)
first=$(sed -n 's/.*gflops = \([0-9.]*\).*/\1/p' "$dir/probe3.dt" | head -n 1)
total=$(gflops_sum "$dir/probe3.dt")
# shellcheck disable=SC2086
pred=$(predicted $deep_flags "$dir/deep_pp.dt")
# shellcheck disable=SC2086
auto_plan=$("$build/dtc" --emit=plan --cluster="$dir/probe3.dt" $deep_flags \
  "$src/bench/hetero_deep_auto.dt" | awk '
  /^  ids / && ids == "" && match($0, /m\[[^]]*\]$/) { ids = substr($0, RSTART) }
  /^  pipeline stages in / { mb = $4 }
  /recomputes its forward/ { remat = ", recomputing" }
  /^pipeline stages over / && pp == "" { sub(/^pipeline stages over [^ ]* loop at [^ ]* /, ""); pp = $0 }
  END {
    if (pp != "") printf "pipeline stages (%s), %s micro-batches%s", pp, mb, remat
    else printf "ids %s%s", ids, remat
  }')
# shellcheck disable=SC2086
stages=$("$build/dtc" --emit=plan $deep_flags "$dir/deep_pp.dt" |
  sed -n 's/^pipeline stages over pp, loop at [^ ]* //p' | sed 's/ layers /:/g')
awk -v a="$auto_ms" -v e="$even_ms" -v q="$pp_ms" -v o="$one_ms" -v g0="$first" -v s="$total" \
    -v p="$pred" -v ap="$auto_plan" -v st="$stages" -v mb="$mb" -v ea="$even_auto" \
    -v ao="$auto_one" -v ep="$even_pp" -v rounds="$rounds" 'BEGIN {
  work = o * g0 / s
  printf "{\"bench\": \"hetero_deep\", \"auto_ms\": %.3f, \"even_ms\": %.3f, " \
         "\"even_over_auto\": %.3f, \"one_ms\": %.3f, \"ideal_work_ms\": %.3f, " \
         "\"auto_over_ideal_work\": %.3f, \"plan\": \"%s\", \"pp_ms\": %.3f, " \
         "\"even_over_pp\": %.3f, \"pp_predicted_ms\": %.3f, " \
         "\"pp_measured_over_predicted\": %.3f, \"pp_plan\": \"pp 3 (%s), %d micro-batches\", " \
         "\"rounds\": %d}\n",
         a, e, ea, o, work, ao * s / g0, ap, q, ep, p, q / p, st, mb, rounds
}'
}

# 6b. pipeline stages on two ranks with a core each: predicted against measured
pp2_step() {
cat > "$dir/pin2.sh" <<'PIN'
#!/bin/sh
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
exec taskset -c "$rank" "$@"
PIN
chmod +x "$dir/pin2.sh"
run 2 "$dir/pin2.sh" "$build/dtc-probe" -o "$dir/probe2.dt" --name duo
cat > "$dir/deep_pp2.dt" <<DEEP
import "$src/examples/gpt.dt"
import "$dir/probe2.dt"

parallel gpt on duo {
  mesh m[pp = 2]
  shard layers.wq: [pp(0.5, 0.5), *, *]
  microbatches = $mb
  plan explicit
}
DEEP
# shellcheck disable=SC2086
build_bench deep_pp2 "$dir/deep_pp2.dt" HETERO_GPT $deep_flags
pp2_ms=$(run 2 "$dir/pin2.sh" "$dir/deep_pp2/bench" "$reps" hetero_deep_pp2 | num step_ms)
# shellcheck disable=SC2086
pred2=$(predicted $deep_flags "$dir/deep_pp2.dt")
awk -v q="$pp2_ms" -v p="$pred2" 'BEGIN {
  printf "{\"bench\": \"hetero_deep_pp2\", \"pp2_ms\": %.3f, \"pp2_predicted_ms\": %.3f, " \
         "\"pp2_measured_over_predicted\": %.3f}\n", q, p, q / p
}'
}
if [ "${HETERO_DET_ONLY:-0}" != 1 ]; then
  deep_step
  pp2_step
fi
[ "${HETERO_DEEP_ONLY:-0}" = 1 ] && exit 0

# 7. deterministic mode against the default, on the MLP, pinned as in 1-4;
# 8. the checkpoint save on 3 ranks against one process
rounds=${HETERO_DET_ROUNDS:-5}
for plan in even auto; do
  build_bench "det_${plan}_def" "$src/bench/hetero_mlp_$plan.dt" HETERO_MLP --cluster="$dir/probe3.dt"
  build_bench "det_${plan}_det" "$src/bench/hetero_mlp_$plan.dt" HETERO_MLP --cluster="$dir/probe3.dt" \
    -fdeterministic
done
build_bench det_even_det4 "$src/bench/hetero_mlp_even.dt" HETERO_MLP --cluster="$dir/probe3.dt" \
  -fdeterministic=4
build_bench save_one "$src/examples/mlp_big.dt" HETERO_MLP
dets="det_even_def det_even_det det_even_det4 det_auto_def det_auto_det"
for b in $dets save_one save_three; do rm -f "$dir/$b.ms"; done
r=1
while [ "$r" -le "$rounds" ]; do
  for b in $dets; do
    run 3 "$dir/pin.sh" "$dir/$b/bench" "$reps" "hetero_$b" | num step_ms >> "$dir/$b.ms"
  done
  taskset -c 0 "$dir/save_one/bench" "$reps" hetero_save_one "$dir/save.st" | num save_ms \
    >> "$dir/save_one.ms"
  run 3 "$dir/pin.sh" "$dir/det_even_def/bench" "$reps" hetero_save_three "$dir/save.st" |
    num save_ms >> "$dir/save_three.ms"
  r=$((r + 1))
done
# the rounds side by side, one line each: default det det4 auto_def auto_det one three
paste "$dir/det_even_def.ms" "$dir/det_even_det.ms" "$dir/det_even_det4.ms" \
      "$dir/det_auto_def.ms" "$dir/det_auto_det.ms" "$dir/save_one.ms" "$dir/save_three.ms" |
awk -v rounds="$rounds" '
  function med(a, n,   i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++)
      for (j = i; j > 1 && b[j - 1] > b[j]; j--) { t = b[j]; b[j] = b[j - 1]; b[j - 1] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
  }
  function lo(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] < m) m = a[i]; return m }
  function hi(a, n,   i, m) { m = a[1]; for (i = 2; i <= n; i++) if (a[i] > m) m = a[i]; return m }
  { n++; d[n] = $1; t[n] = $2; f[n] = $3; ad[n] = $4; at[n] = $5; o[n] = $6; h[n] = $7
    rt[n] = $2 / $1; rs[n] = $7 / $6 }
  END {
    printf "{\"bench\": \"hetero_det\", \"rounds\": %d, \"default_ms\": %.3f, " \
           "\"deterministic_ms\": %.3f, \"deterministic_over_default\": %.3f, " \
           "\"deterministic_over_default_min\": %.3f, \"deterministic_over_default_max\": %.3f, " \
           "\"deterministic4_ms\": %.3f, \"deterministic4_over_default\": %.3f, " \
           "\"auto_default_ms\": %.3f, \"auto_deterministic_ms\": %.3f, " \
           "\"auto_deterministic_over_default\": %.3f}\n", n, med(d, n), med(t, n),
           med(t, n) / med(d, n), lo(rt, n), hi(rt, n), med(f, n), med(f, n) / med(d, n),
           med(ad, n), med(at, n), med(at, n) / med(ad, n)
    printf "{\"bench\": \"hetero_save\", \"rounds\": %d, \"one_ms\": %.3f, \"three_ms\": %.3f, " \
           "\"three_over_one\": %.3f, \"three_over_one_min\": %.3f, \"three_over_one_max\": %.3f}\n",
           n, med(o, n), med(h, n), med(h, n) / med(o, n), lo(rs, n), hi(rs, n)
  }'
