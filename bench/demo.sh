#!/bin/sh
# demo.sh [BUILD] [STEPS]: examples/gpt.dt trained STEPS steps (default 300)
# data parallel on two ranks by AdamW and by DeMo (bench/demo.c, built by
# bench/CMakeLists.txt with both optimizers), on the same text, under the
# mpiexec BUILD was configured with (MPIEXEC overrides it). Prints one JSON
# line: each run's final loss (the mean of its last 20 steps) and the bytes
# each rank sends per training step by the plan (dtc --emit=plan), and the
# ratios demo_over_adamw_loss and demo_over_adamw_bytes; and each run's
# median step in ms (rank 0's, after 3 warm-up steps) and
# demo_over_adamw_ms.
build=${1:-build}
steps=${2:-300}
mpiexec=${MPIEXEC:-$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)}
mpiexec=${mpiexec:-mpiexec}
mpiflags=
if "$mpiexec" --version 2>&1 | grep -q -e 'Open MPI' -e OpenRTE; then
  mpiflags=--oversubscribe
  [ "$(id -u)" = 0 ] && mpiflags="$mpiflags --allow-run-as-root"
fi
# the training step's bytes per step in a plan, in bytes
bytes() {
  awk '/^collectives of @train_step/ { on = 1; next }
       on && / collectives?, .* per step$/ {
         v = $(NF - 3); u = $(NF - 2)
         m = u == "KiB" ? 1024 : u == "MiB" ? 1048576 : u == "GiB" ? 1073741824 : 1
         printf "%.0f\n", v * m; exit }' "$1"
}
loss() { sed -n 's/.*"final_loss": \([0-9.]*\).*/\1/p'; }
step() { sed -n 's/.*"step_ms": \([0-9.]*\).*/\1/p'; }
for opt in adamw demo; do
  # shellcheck disable=SC2086
  line=$("$mpiexec" $mpiflags -n 2 "$build/bench/demo_$opt" "$steps") || exit 1
  eval "${opt}_loss=\$(printf '%s\n' \"\$line\" | loss)"
  eval "${opt}_ms=\$(printf '%s\n' \"\$line\" | step)"
  eval "${opt}_bytes=\$(bytes \"$build/bench/demo_gpt/$opt/plan.txt\")"
done
# shellcheck disable=SC2154
awk -v al="$adamw_loss" -v dl="$demo_loss" -v ab="$adamw_bytes" -v db="$demo_bytes" -v s="$steps" \
  -v am="$adamw_ms" -v dm="$demo_ms" \
  'BEGIN { printf "{\"bench\": \"demo\", \"steps\": %d, \"ranks\": 2, \"adamw_loss\": %.4f, " \
           "\"demo_loss\": %.4f, \"demo_over_adamw_loss\": %.4f, \"adamw_bytes\": %d, " \
           "\"demo_bytes\": %d, \"demo_over_adamw_bytes\": %.4f, \"adamw_ms\": %.3f, " \
           "\"demo_ms\": %.3f, \"demo_over_adamw_ms\": %.4f}\n", s, al, dl, dl / al, ab, db, db / ab, \
           am, dm, dm / am }'
