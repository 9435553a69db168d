#!/bin/sh
# probe_attn_counts.sh DTC SRC: dtc-probe fits attention's `attn`, `score`
# and `attn_block` by taking from each timed step of tools/probe/attn16.dt,
# attn64.dt and attn32.dt what the simulator charges beside the FLOPs: 21
# tensors of x's shape of bytes and 11 kernels' fixed costs (tools/probe.c, ATTN and
# ATTN_STEP_KERNELS). The simulator must charge those steps as much: here
# on a device of no FLOP cost, once with bytes alone (1 GB/s) and once with
# fixed costs alone (1 ms each), within 1% (the rows' lse and the scalars
# are the bytes beyond the 21 tensors).
set -u
dtc=$1
src=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for d in 16 64 32; do
  elems=65536   # x: [1, 4, 1024, 16], [1, 1, 1024, 64] and [16, 4, 32, 32]
  for what in bytes kernels; do
    if [ $what = bytes ]; then dev="bw = 1GB/s, lat = 0.000001us" want=$((21 * 4 * elems))
    else dev="bw = 1e9GB/s, lat = 1000us" want=11000000; fi
    cat > "$tmp/p.dt" <<DT
import "$src/tools/probe/attn$d.dt"
cluster c { node n { device d0: cpu(gflops = 1e9, $dev, mem = 1GiB) } }
parallel probe_attn$d on c {
  mesh m[dp = 1] over d0
  plan explicit
}
DT
    ms=$("$dtc" --emit=sim "$tmp/p.dt" | sed -n 's/^predicted step: \([0-9.]*\) ms.*/\1/p')
    # the step in ns: bytes at 1 GB/s, or ns of fixed costs
    got=$(awk -v ms="$ms" 'BEGIN { printf "%.0f", ms * 1e6 }')
    if awk -v g="$got" -v w="$want" 'BEGIN { exit !(g < w * 0.99 || g > w * 1.01) }'; then
      echo "FAIL attn$d $what: the simulator charges $got, dtc-probe takes $want"; fail=1
    else
      echo "ok attn$d $what: $got"
    fi
  done
done
exit $fail
