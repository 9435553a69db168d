# pinned.sh: what bench/hetero.sh and bench/dlrm.sh share, sourced (`.`)
# after they set build (the build folder) and dir (their work files):
# mpiexec and mpicc (MPIEXEC and MPICC, else those BUILD was configured
# with, else mpiexec and mpicc), one thread a rank, Open MPI's flags for an
# oversubscribed, yielding run, $dir/pin.sh (rank 0 alone on core 0, every
# other rank on core 1: speeds about 2:1:1 for three ranks), and:
#   run N PROGRAM ARGS...   PROGRAM on N ranks
#   num KEY                 the number after "KEY": on stdin
#   count NAME VALUE        exits (2) with a message unless VALUE, the
#                           environment's NAME, is a whole number from 1
#   medians FILE N A B      FILE's rounds, a line each: the median of each
#                           of its first N columns (null where a line has
#                           fewer) and of column A over column B
# shellcheck shell=sh disable=SC2154   # build and dir: the caller's
cached() {   # cached VAR: VAR's value in BUILD's CMake cache, if any
  sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt" 2>/dev/null
}
mpiexec=${MPIEXEC:-$(cached MPIEXEC_EXECUTABLE)}
mpiexec=${mpiexec:-mpiexec}
mpicc=${MPICC:-$(cached MPI_C_COMPILER)}
mpicc=${mpicc:-mpicc}

export DTRT_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpiflags=
if "$mpiexec" --version 2>&1 | grep -q -e 'Open MPI' -e OpenRTE; then
  export OMPI_MCA_mpi_yield_when_idle=1
  mpiflags="--oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
  [ "$(id -u)" = 0 ] && mpiflags="$mpiflags --allow-run-as-root"
fi

cat > "$dir/pin.sh" <<'PIN'
#!/bin/sh
rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-0}}}
if [ "$rank" = 0 ]; then core=0; else core=1; fi
exec taskset -c "$core" "$@"
PIN
chmod +x "$dir/pin.sh"

run() {
  n=$1
  shift
  # shellcheck disable=SC2086
  "$mpiexec" $mpiflags -n "$n" "$@"
}

num() {
  sed -n "s/.*\"$1\": \([0-9.]*\).*/\1/p"
}

count() {
  case $2 in
    '' | *[!0-9]* | 0*)
      echo "$(basename "$0"): $1 must be a whole number from 1, not '$2'" >&2
      exit 2 ;;
  esac
}

medians() {
  awk -v ncol="$2" -v a="$3" -v b="$4" '
    function med(v, n,   i, j, t) {
      for (i = 2; i <= n; i++)
        for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
      return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
    }
    { n++; for (k = 1; k <= NF; k++) x[k, n] = $k; q[n] = $a / $b; w = NF }
    END {
      for (k = 1; k <= ncol; k++) {
        for (i = 1; i <= n; i++) c[i] = x[k, i]
        printf "%s ", k <= w ? sprintf("%.6f", med(c, n)) : "null"
      }
      printf "%.6f\n", med(q, n)
    }' "$1"
}
