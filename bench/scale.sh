#!/bin/sh
# scale.sh [BUILD] [REPS] [SIZES]: dtc's time and peak memory as programs
# grow. Cases: `dtc -o` of examples/gpt.dt on 1024 devices of one axis (64
# nodes of 16 equal CPUs, the batch split evenly, plan explicit); plan auto
# of gpt.dt at L = 96, B = 512 on the same devices as a 64 x 16 mesh
# (plan2d: dtc up to the plan pass, nothing written by the block); the
# elastic build --devices=1..64 over the same cluster (plan auto: uneven
# splits where 1024 rows do not divide); and chained training models of N
# statements h_k = tanh(h_{k-1} * 1.01 + 0.5) on f32[8,16] (autodiff doubles
# them) for each N of SIZES (default "2500 5000 10000 20000 50000 100000").
# Prints one JSON line per case with the median wall time, the median CPU
# time (user + system: steadier on a shared machine) and the largest peak
# RSS of REPS runs (GNU time's, the child's getrusage), a chain's with
# us_per_statement (its median CPU time over N); then a line with
# elastic_over_mesh1024, the ratio of those medians, and, when 2500 and
# 100000 both ran, per_statement_100k_over_2500 (1: time linear in N).
# CASES (environment) picks cases: any of mesh, plan2d, elastic, chain
# (default all).
build=${1:-build}
reps=${2:-3}
sizes=${3:-2500 5000 10000 20000 50000 100000}
cases=${CASES:-mesh plan2d elastic chain}
dtc=$build/dtc
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=$(dirname "$0")/../examples/gpt.dt
# cluster PLAN [MESH]: gpt.dt over 64 x 16 devices, mesh m[dp = 1024] with
# the batch split over it, or MESH with nothing written
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
  if [ -n "$2" ]; then
    printf 'parallel gpt on big {\n  mesh %s\n  plan %s\n}\n' "$2" "$1"
    return
  fi
  printf 'parallel gpt on big {\n  mesh m[dp = 1024]\n  shard ids: [dp, *]\n'
  printf '  shard next: [dp, *]\n  plan %s\n}\n' "$1"
}
cluster explicit >"$tmp/mesh.dt"
cluster auto >"$tmp/elastic.dt"
cluster auto 'm[dp = 64, tp = 16]' >"$tmp/plan2d.dt"
# run NAME ARGS...: REPS runs of dtc ARGS; one JSON line (with
# us_per_statement when $statements is set); the median into $med
run() {
  name=$1
  shift
  : >"$tmp/runs"
  for r in $(seq 1 "$reps"); do
    if ! /usr/bin/time -f '%e %M %U %S' -o "$tmp/time" "$dtc" "$@" -o "$tmp/out.o" 2>"$tmp/err"; then
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
  cpu=$(awk '{print ($3 + $4) * 1000}' "$tmp/runs" | sort -n | awk '{t[NR] = $1} END {print t[int((NR + 1) / 2)]}')
  more=
  if [ -n "$statements" ]; then
    us=$(awk -v t="$cpu" -v n="$statements" 'BEGIN {printf "%.1f", t * 1000 / n}')
    more=", \"statements\": $statements, \"us_per_statement\": $us"
  fi
  printf '{"bench": "scale", "case": "%s", "median_ms": %s, "min_ms": %s, "max_ms": %s, "cpu_ms": %s, "peak_rss_mib": %s, "reps": %d%s}\n' \
    "$name" "$med" "$min" "$max" "$cpu" "$rss" "$reps" "$more"
}
# chain N: the chained model of N statements
chain() {
  awk -v n="$1" 'BEGIN {
    print "model chain(batch B = 8) {"
    print "  input x: f32[B, 16]"
    print "  param w: f32[16, 16] init glorot"
    print "  h0 = x @ w"
    for (k = 1; k <= n; k++)
      printf "  h%d = tanh(h%d * 1.01 + 0.5)\n", k, k - 1
    printf "  loss = mean(h%d * h%d)\n", n, n
    print "  minimize loss with sgd(lr = 0.01)"
    print "}"
  }'
}
want() { case " $cases " in *" $1 "*) return 0 ;; esac; return 1; }
mesh= elastic= first= last= statements=
if want mesh; then
  run mesh1024 -D B=1024 "$tmp/mesh.dt"
  mesh=$med
fi
if want plan2d; then
  run plan2d_64x16 -D L=96 -D B=512 --emit=ir --stop-after=plan "$tmp/plan2d.dt"
fi
if want elastic; then
  run elastic1_64 -D B=1024 --devices=1..64 "$tmp/elastic.dt"
  elastic=$med
fi
if [ -n "$mesh" ] && [ -n "$elastic" ]; then
  printf '{"bench": "scale", "mesh1024_ms": %s, "elastic1_64_ms": %s, "elastic_over_mesh1024": %s}\n' \
    "$mesh" "$elastic" "$(awk -v a="$elastic" -v b="$mesh" 'BEGIN {printf "%.3f", a / b}')"
fi
if want chain; then
  for n in $sizes; do
    chain "$n" >"$tmp/chain.dt"
    statements=$n
    run "chain$n" "$tmp/chain.dt"
    statements=
    [ "$n" = 2500 ] && first=$us
    [ "$n" = 100000 ] && last=$us
  done
fi
if [ -n "$first" ] && [ -n "$last" ]; then
  printf '{"bench": "scale", "us_per_statement_2500": %s, "us_per_statement_100k": %s, "per_statement_100k_over_2500": %s}\n' \
    "$first" "$last" "$(awk -v a="$last" -v b="$first" 'BEGIN {printf "%.3f", a / b}')"
fi
