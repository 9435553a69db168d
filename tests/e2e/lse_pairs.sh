#!/bin/sh
# lse_pairs.sh DTC SRC: an attention's forward writes its rows' log-sum-exp
# for the backward (ir_lse_partner), so no step computes them again: the
# generated code calls dtrt_k_sdpa_with_lse (ring_sdpa_with_lse on a split
# sequence) and never dtrt_k_sdpa_lse (ring_sdpa_lse). Checked on gpt.dt
# (a loop: the forward's body saves the rows) on one process, its sequence
# split over three devices as a ring (tests/mpi/deep_cp3.dt) and by heads
# (tests/mpi/long_heads3.dt), and on a model of no loop (the forward and
# the backward in one function) with a mask and dropout
# (tests/mpi/attn_drop.dt). Before the pairing each called the lse kernel
# once per attention.
set -u
dtc=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# calls NAME: the calls of dtrt_k_NAME in $tmp/m.ll
calls() { grep -c "call .*@dtrt_k_$1(" "$tmp/m.ll"; }
check() {   # check WHAT PAIRED ALONE DTC-ARGS...: dtc's module calls PAIRED, never ALONE
  what=$1 paired=$2 alone=$3
  shift 3
  if ! "$dtc" -O0 --emit=llvm "$@" -o "$tmp/m.ll" 2> "$tmp/err"; then
    echo "FAIL $what: dtc failed"; cat "$tmp/err"; fail=1; return
  fi
  p=$(calls "$paired") a=$(calls "$alone")
  if [ "$p" -lt 1 ] || [ "$a" -ne 0 ]; then
    echo "FAIL $what: $p calls of $paired, $a of $alone (want at least 1 and 0)"; fail=1
  else
    echo "ok $what: $p calls of $paired, none of $alone"
  fi
}
check "gpt.dt" sdpa_with_lse sdpa_lse "$src/examples/gpt.dt"
check "ring over 3" ring_sdpa_with_lse ring_sdpa_lse "$src/tests/mpi/deep_cp3.dt"
check "heads over 3" sdpa_with_lse sdpa_lse "$src/tests/mpi/long_heads3.dt"
check "mask and dropout" sdpa_with_lse sdpa_lse "$src/tests/mpi/attn_drop.dt"
exit $fail
