#!/bin/sh
# probe_counts.sh DTC SRC: dtc-probe fits its figures by taking from each
# timed step what the simulator charges beside the figure it fits, counts
# it holds as constants (tools/probe.c). The simulator must charge those
# steps as much: here on a device of no FLOP cost with one figure alone,
# within 1%:
# - tools/probe/attn16.dt, attn64.dt and attn32.dt (attention's `attn`,
#   `score` and `attn_block`): 21 tensors of x's shape of bytes (ATTN; the
#   rows' lse and the scalars are the bytes beyond them) and 11 kernels'
#   fixed costs (ATTN_STEP_KERNELS);
# - tools/probe/sparse.dt (a sparse table's `entry`): SPARSE_STEP_BYTES,
#   SPARSE_STEP_KERNELS, SPARSE_STEP_LINES at `row` and SPARSE_STEP_ENTRIES
#   at `entry`.
# Each figure at 1 ms (bytes at 1 GB/s: 1 ns a byte), so the step in ns
# over 1e6 is the count.
set -u
dtc=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
none="lat = 0.000001us"
# model | figure | device figures | the count the probe takes
while IFS='|' read -r model what dev want; do
  cat > "$tmp/p.dt" <<DT
import "$src/tools/probe/$model.dt"
cluster c { node n { device d0: cpu(gflops = 1e9, $dev, mem = 1GiB) } }
parallel probe_$model on c {
  mesh m[dp = 1] over d0
  plan explicit
}
DT
  ms=$("$dtc" --emit=sim "$tmp/p.dt" | sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p')
  got=$(awk -v ms="$ms" 'BEGIN { printf "%.1f", ms * 1e6 }')
  if [ -z "$ms" ] || awk -v g="$got" -v w="$want" 'BEGIN { exit !(g < w * 0.99 || g > w * 1.01) }'; then
    echo "FAIL $model $what: the simulator charges $got, dtc-probe takes $want"; fail=1
  else
    echo "ok $model $what: $got"
  fi
done <<CASES
attn16|bytes|bw = 1GB/s, $none|$((21 * 4 * 65536))
attn16|kernels|bw = 1e9GB/s, lat = 1000us|11000000
attn64|bytes|bw = 1GB/s, $none|$((21 * 4 * 65536))
attn64|kernels|bw = 1e9GB/s, lat = 1000us|11000000
attn32|bytes|bw = 1GB/s, $none|$((21 * 4 * 65536))
attn32|kernels|bw = 1e9GB/s, lat = 1000us|11000000
sparse|bytes|bw = 1GB/s, $none|279567
sparse|kernels|bw = 1e9GB/s, lat = 1000us|8000000
sparse|lines|bw = 1e9GB/s, $none, row = 1000us|$((2 * 384 * 1000000))
sparse|entries|bw = 1e9GB/s, $none, entry = 1000us|$(awk 'BEGIN { printf "%.0f", 384 * (1 + 20 / 13 + 14 / 13) * 1e6 }')
CASES
exit $fail
