#!/bin/sh
# cluster.sh [BUILD] [REPS]: dtc and libdtrt on a cluster of two nodes of two
# ranks made on this machine by tools/netns-cluster.sh (network namespaces,
# 1 Gbit/s and 100 us between the nodes; as root). Run from anywhere, after
# building (cmake --build BUILD):
#
#     bench/cluster.sh build 20
#
# It makes the cluster, then:
#  1. probes it with dtc-probe (REPS repetitions) into a cluster file;
#  2. times the 16 MiB all-reduce by each method of libdtrt (BUILD/bench/cluster,
#     bench/cluster.c) and prints its line: {"bench": "cluster_all_reduce",
#     "mpi_ms", "ring_ms", "grouped_ms", "hierarchical_ms",
#     "flat_over_hierarchical", "same", ..};
#  3. compiles bench/cluster_mlp.dt (mlp_big, plan auto on 4 devices) twice:
#     for the probed file, and for a flat one (the same devices and intra link
#     on one node, no inter link and no collective lines), builds
#     bench/hetero.c against each object with mpicc, times each step on the
#     cluster (median over REPS after 3 warm-up steps), and prints
#     {"bench": "cluster_mlp", "planned_ms", "flat_plan_ms",
#     "flat_plan_over_planned", "predicted_ms", "measured_over_predicted"}
#     where predicted_ms is dtc --emit=sim of the planned model on the probed
#     file;
# and removes the cluster (also on failure). The probed file and the
# device plans go to stderr as comments. Every rank runs one thread
# (DTRT_NUM_THREADS=1). Environment: MPIRUN (Open MPI's
# mpirun, default the one BUILD was configured with), MPICC (likewise),
# CLUSTER_DIR (work files, default a fresh mktemp -d, removed at the end
# unless given). Exits 77 when the cluster cannot be made here.
set -e
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-build}" && pwd)
reps=${2:-20}
cached() {   # cached VAR: VAR's value in BUILD's CMake cache, if any
  sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null
}
MPIRUN=${MPIRUN:-$(cached MPIEXEC_EXECUTABLE)}
export MPIRUN
mpicc=${MPICC:-$(cached MPI_C_COMPILER)}
mpicc=${mpicc:-mpicc}
cluster="$src/tools/netns-cluster.sh -p dtcbench"
if [ -n "${CLUSTER_DIR:-}" ]; then
  dir=$CLUSTER_DIR
  mkdir -p "$dir"
  trap '$cluster down' EXIT
else
  dir=$(mktemp -d)
  trap '$cluster down; rm -rf "$dir"' EXIT
fi
trap 'exit 130' INT
trap 'exit 143' TERM
export DTRT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

echo "# $(date -u '+%F %T') UTC; load:$(uptime | sed 's/.*load average://')" >&2
$cluster down 2>/dev/null
rc=0
$cluster up || rc=$?
[ $rc -eq 0 ] || exit $rc
run() { $cluster mpirun "$@"; }

num() {   # num KEY: the number after "KEY": on stdin
  sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"
}

# 1. the probe
run "$build/dtc-probe" --reps "$reps" -o "$dir/probe.dt" --name netns
sed 's/^/# /' "$dir/probe.dt" >&2

# 2. the all-reduce by each method
run "$build/bench/cluster" "$reps"

# 3. the MLP step, planned for the probed cluster and for a flat one
awk '/^  node /||/^  }$/||/^  link inter/||/^  collective /||/^  # collectives/ {next}
     /^cluster / {print; print "  node n0 {    # every device of the probed cluster"; next}
     /^  link intra/ {print "  }"}
     {print}' "$dir/probe.dt" > "$dir/flat.dt"
for plan in planned flat; do
  if [ $plan = planned ]; then c=$dir/probe.dt; else c=$dir/flat.dt; fi
  mkdir -p "$dir/$plan"
  "$build/dtc" --cluster="$c" "$src/bench/cluster_mlp.dt" -o "$dir/$plan/model.o"
  "$build/dtc" --cluster="$c" --emit=plan "$src/bench/cluster_mlp.dt" |
    sed -n "1,/predicted step/s/^/# $plan: /p" >&2
  "$mpicc" -O2 -DHETERO_MLP -I "$src/runtime" -I "$dir/$plan" "$src/bench/hetero.c" \
    "$dir/$plan/model.o" "$build/libdtrt.a" -lopenblas -lcjson -lz -lm -o "$dir/$plan/bench"
  ms=$(run "$dir/$plan/bench" "$reps" "cluster_mlp_$plan" | num step_ms)
  if [ $plan = planned ]; then planned_ms=$ms; else flat_ms=$ms; fi
done
pred=$("$build/dtc" --emit=sim --cluster="$dir/probe.dt" "$src/bench/cluster_mlp.dt" |
  sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p')
awk -v a="$planned_ms" -v f="$flat_ms" -v p="$pred" 'BEGIN {
  printf "{\"bench\": \"cluster_mlp\", \"ranks\": 4, \"nodes\": 2, \"planned_ms\": %.3f, " \
         "\"flat_plan_ms\": %.3f, \"flat_plan_over_planned\": %.3f, \"predicted_ms\": %.3f, " \
         "\"measured_over_predicted\": %.3f}\n", a, f, f / a, p, a / p
}'
