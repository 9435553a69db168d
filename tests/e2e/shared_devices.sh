#!/bin/sh
# shared_devices.sh DTC GPT.dt: devices with the same target and local
# shapes share one set of step functions. gpt.dt (with dropout, whose mask
# depends on where the device's block lies) on 8 equal devices has one
# @train_step, not 8; split 0.5, 0.25, 0.25 over 3 it has two: one for the
# block of 4 rows, one shared by the blocks of 2. An elastic build
# (--devices=1,2,4) has one for each plan, not 7. Devices of two plans
# whose blocks are alike (and whose collectives take the same methods)
# share a train step and a forward: 15 rows on 6 devices (3, 3, 3, 2, 2, 2)
# and on 7 (3, 2, 2, 2, 2, 2, 2), plan auto, make 2 train steps and 2
# forwards, one for the blocks of 3, one for those of 2, though the blocks
# of 2 lie at other origins in the two plans (which dropout reads) and the
# gather of the logits lists each plan's blocks: both are read at run time
# from the device's row (codegen/consts.c); before, 3 train steps and 4
# forwards. The loops of groups run on the thread pool (MODEL.parN, and a
# product's epilogue MODEL.tilesN) take their outermost loop's range, so
# they are shared by devices whose blocks differ in rows: 1025 rows at
# D=64 on 2 and 3 devices (513, 512; 342, 342, 341) make 4 train steps but
# as many such loops as the plan for 2 alone (before, one per step). A
# device's step checks for an earlier failure before each statement that
# makes code, and before no other (a view, a value kept in place): no block
# that only branches on (before, about 60% of the checks in gpt.dt's steps).
set -u
dtc=$1
model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
dims="-D T=8 -D D=16 -D H=2 -D L=1 -O0 --emit=llvm"
# mesh NDEV SHARD [PLAN]: the model on NDEV equal devices, ids and next split
# as SHARD, plan PLAN (default explicit)
mesh() {
  cat "$model"
  printf 'cluster c {\n  node n {\n'
  for k in $(seq 0 $(($1 - 1))); do
    printf '    device d%d: cpu(gflops = 100, mem = 1GiB)\n' "$k"
  done
  printf '  }\n  link intra(bw = 10GB/s, lat = 1us)\n}\n'
  printf 'parallel gpt on c {\n  mesh m[dp = %d]\n  shard ids: %s\n  shard next: %s\n' "$1" "$2" "$2"
  printf '  plan %s\n}\n' "${3:-explicit}"
}
# count WANT FILE ARGS...: the LLVM module of FILE has WANT train steps
# (FUNC, when set: WANT functions FUNC)
count() {
  want=$1
  file=$2
  shift 2
  func=${FUNC:-train_step}
  if ! timeout 120 "$dtc" $dims "$@" "$file" -o "$tmp/out.ll" 2>"$tmp/err"; then
    echo "FAIL dtc $* $file:"; head -c 2000 "$tmp/err"; fail=1; return
  fi
  got=$(grep -c "^define internal i32 @gpt[.a-z0-9]*\.$func\(\.[0-9]*\)\?(" "$tmp/out.ll")
  if [ "$got" -ne "$want" ]; then
    echo "FAIL dtc $* $(basename "$file"): $got functions $func, wanted $want"; fail=1
  fi
}
mesh 8 '[dp, *]' >"$tmp/even.dt"
count 1 "$tmp/even.dt" -D B=8
mesh 3 '[dp(0.5, 0.25, 0.25), *]' >"$tmp/uneven.dt"
count 2 "$tmp/uneven.dt" -D B=8
mesh 4 '[dp, *]' >"$tmp/elastic.dt"
count 3 "$tmp/elastic.dt" -D B=8 --devices=1,2,4
mesh 8 '[dp, *]' auto >"$tmp/auto.dt"
count 2 "$tmp/auto.dt" -D B=15 --devices=6,7
FUNC=forward count 2 "$tmp/auto.dt" -D B=15 --devices=6,7
# pool ARGS...: the loops on the thread pool of gpt.dt at D=64 over 3
# devices, plan auto, compiled with ARGS
pool() {
  if ! timeout 120 "$dtc" -D T=8 -D D=64 -D H=2 -D L=1 -D B=1025 -O0 --emit=llvm "$@" \
      "$tmp/big.dt" -o "$tmp/big.ll" 2>"$tmp/err"; then
    echo "FAIL dtc $* big.dt:" >&2; head -c 2000 "$tmp/err" >&2; echo 0; return
  fi
  grep -c '^define internal void @gpt\.\(par\|tiles\)[0-9]*(' "$tmp/big.ll"
}
mesh 3 '[dp, *]' auto >"$tmp/big.dt"
alone=$(pool --devices=2)
both=$(pool --devices=2,3)
steps=$(grep -c '^define internal i32 @gpt\.n[0-9]*\.train_step\(\.[0-9]*\)\?(' "$tmp/big.ll")
echo "loops on the pool: $alone for 2 devices, $both for 2 and 3 ($steps train steps)"
if [ "$alone" -lt 1 ] || [ "$both" -ne "$alone" ] || [ "$steps" -ne 4 ]; then
  echo "FAIL loops on the pool: $alone for --devices=2, $both for 2,3 ($steps train steps, wanted 4)"
  fail=1
fi
runs=$(grep -c '^run[0-9]*:' "$tmp/big.ll")
empty=$(grep -A1 '^run[0-9]*:' "$tmp/big.ll" | grep -c '^  br label %next[0-9]*$')
echo "checks before statements: $runs, of which run nothing: $empty"
if [ "$runs" -lt 1 ] || [ "$empty" -ne 0 ]; then
  echo "FAIL $empty of $runs checked statements run nothing"
  fail=1
fi
exit $fail
