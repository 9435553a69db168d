#!/bin/sh
# dp.sh [BUILD] [REPS]: bench/dp.c in one go: the step in one process, then
# on two ranks under mpiexec (MPIEXEC overrides it), which prints the line
# with both medians and their ratio.
build=${1:-build}
reps=${2:-20}
line=$("$build/bench/dp_single" "$reps") || exit 1
single=$(printf '%s\n' "$line" | sed -n 's/.*"single_ms": \([0-9.]*\).*/\1/p')
exec ${MPIEXEC:-mpiexec} -n 2 "$build/bench/dp" "$reps" "$single"
