#!/bin/sh
# scale.sh [BUILD] [REPS]: dtc's time and peak memory for examples/gpt.dt on
# many devices: `dtc -o` on 1024 devices of one axis (64 nodes of 16 equal
# CPUs, the batch split evenly, plan explicit), and the elastic build
# --devices=1..64 over the same cluster (plan auto: uneven splits where 1024
# rows do not divide). Prints one JSON line per case with the median and
# the largest peak RSS of REPS runs (GNU time's, the child's getrusage), and
# a last line with elastic_over_mesh1024, the ratio of their medians.
build=${1:-build}
reps=${2:-3}
dtc=$build/dtc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$(dirname "$0")/../examples/gpt.dt
# cluster PLAN: gpt.dt over 64 x 16 devices, mesh m[dp = 1024]
cluster() {
  cat "$src"
  printf 'cluster big {\n'
  for n in $(seq 0 63); do
    printf '  node n%d {\n' "$n"
    for d in $(seq 0 15); do
      printf '    device d%d_%d: cpu(gflops = 100, mem = 16GiB)\n' "$n" "$d"
    done
    printf '  }\n'
  done
  printf '  link intra(bw = 20GB/s, lat = 1us)\n  link inter(bw = 10GB/s, lat = 5us)\n}\n'
  printf 'parallel gpt on big {\n  mesh m[dp = 1024]\n  shard ids: [dp, *]\n'
  printf '  shard next: [dp, *]\n  plan %s\n}\n' "$1"
}
cluster explicit >"$tmp/mesh.dt"
cluster auto >"$tmp/elastic.dt"
# run NAME ARGS...: REPS runs of dtc ARGS; one JSON line; the median into $med
run() {
  name=$1
  shift
  : >"$tmp/runs"
  for r in $(seq 1 "$reps"); do
    if ! /usr/bin/time -f '%e %M' -o "$tmp/time" "$dtc" "$@" -o "$tmp/out.o" 2>"$tmp/err"; then
      echo "scale: dtc $* failed:" >&2
      head -c 2000 "$tmp/err" >&2
      exit 1
    fi
    cat "$tmp/time" >>"$tmp/runs"
  done
  med=$(sort -n "$tmp/runs" | awk '{t[NR] = $1 * 1000} END {print t[int((NR + 1) / 2)]}')
  rss=$(sort -n -k2 "$tmp/runs" | awk 'END {printf "%.1f", $2 / 1024}')
  min=$(sort -n "$tmp/runs" | awk 'NR == 1 {print $1 * 1000}')
  max=$(sort -n "$tmp/runs" | awk 'END {print $1 * 1000}')
  printf '{"bench": "scale", "case": "%s", "median_ms": %s, "min_ms": %s, "max_ms": %s, "peak_rss_mib": %s, "reps": %d}\n' \
    "$name" "$med" "$min" "$max" "$rss" "$reps"
}
run mesh1024 -D B=1024 "$tmp/mesh.dt"
mesh=$med
run elastic1_64 -D B=1024 --devices=1..64 "$tmp/elastic.dt"
printf '{"bench": "scale", "mesh1024_ms": %s, "elastic1_64_ms": %s, "elastic_over_mesh1024": %s}\n' \
  "$mesh" "$med" "$(awk -v a="$med" -v b="$mesh" 'BEGIN {printf "%.3f", a / b}')"
