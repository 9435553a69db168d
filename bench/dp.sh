#!/bin/sh
# dp.sh [BUILD] [REPS]: bench/dp.c in one go: the step in one process, then
# on two ranks under the mpiexec BUILD was configured with (MPIEXEC overrides
# it), which prints the line with both medians and their ratio.
build=${1:-build}
reps=${2:-20}
mpiexec=${MPIEXEC:-$(sed -n 's/^MPIEXEC_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)}
mpiexec=${mpiexec:-mpiexec}
mpiflags=
if [ "$(id -u)" = 0 ] && "$mpiexec" --version 2>&1 | grep -q -e 'Open MPI' -e OpenRTE; then
  mpiflags=--allow-run-as-root
fi
line=$("$build/bench/dp_single" "$reps") || exit 1
single=$(printf '%s\n' "$line" | sed -n 's/.*"single_ms": \([0-9.]*\).*/\1/p')
# shellcheck disable=SC2086
exec "$mpiexec" $mpiflags -n 2 "$build/bench/dp" "$reps" "$single"
