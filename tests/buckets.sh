#!/bin/sh
# buckets.sh DTC SRC: the sums and gathers of a step in buckets
# (passes/coalesce.c). For each plan, @train_step's reduce_scatters,
# all_reduces and all_gathers with -fno-coalesce and without, as dtc
# --emit=plan counts them; the bytes per step stay as they were:
#   tests/mpi/zero_dp3.dt     the optimizer state split (shard_state = dp,
#                             0.5/0.25/0.25): 4 gradients reduce-scattered
#                             and 4 params all-gathered: w1 (784 KiB, above
#                             a bucket's 256 KiB) alone, the other 3 in one
#   tests/mpi/dlrm_rw3.dt     tables row-wise, uneven: 3 pooled sums
#                             reduce-scattered, 5 all-reduced (4 gradients and
#                             the loss), 3 gathers: 1, 2 (the loss alone), 1
#   bench/dlrm_rw.dt          26 tables row-wise under plan auto: 16, 9, 26
#                             become 3, 2, 1 (the second concat's 11 pooled
#                             sums concatenated partial and reduce-scattered
#                             as one, the first's 15 each)
#   tests/mpi/demo_dp2.dt     DeMo: each param's packed row gathered, 4
#                             gathers become 1
#   tests/mpi/mlp_bf16_dp2.dt exchange = bf16: the gradients' bucket (and w1
#                             alone) sent in bf16, the loss's all_reduce f32
#   tests/mpi/zero_det_dp3.dt deterministic mode: the gradients' fold_alls
#                             stay one per param (no sum is bucketed there),
#                             the params' gathers (exact) become 2
dtc=$1 src=$2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# counts FILE FLAG: "RS AR AG FOLD BYTES" of @train_step
counts() {
  # shellcheck disable=SC2086
  "$dtc" $2 --emit=plan "$src/$1" -o "$tmp/plan" 2>/dev/null || fail "dtc --emit=plan $2 $1"
  sed -n '/^collectives of @train_step/,/ per step$/p' "$tmp/plan" >"$tmp/step"
  echo "$(grep -c '^  reduce_scatter ' "$tmp/step") $(grep -c '^  all_reduce ' "$tmp/step")" \
       "$(grep -c '^  all_gather ' "$tmp/step") $(grep -c '^  fold_all ' "$tmp/step")" \
       "$(sed -n 's/^  [0-9]* collectives, \(.*\) per step/\1/p' "$tmp/step" | tr ' ' _)"
}

# check FILE "RS AR AG FOLD" off, then on
check() {
  off=$(counts "$1" -fno-coalesce)
  on=$(counts "$1" "")
  echo "$1: reduce_scatter all_reduce all_gather fold_all bytes: -fno-coalesce $off; buckets $on"
  set -- "$1" "$2" "$3" "$off" "$on"
  [ "${4% *}" = "$2" ] || fail "$1: expected $2 with -fno-coalesce, got ${4% *}"
  [ "${5% *}" = "$3" ] || fail "$1: expected $3 in buckets, got ${5% *}"
  [ "${4##* }" = "${5##* }" ] || fail "$1: bytes per step ${4##* } became ${5##* }"
}

check tests/mpi/zero_dp3.dt "4 1 4 0" "2 1 2 0"
check tests/mpi/dlrm_rw3.dt "3 5 3 0" "1 2 1 0"
check bench/dlrm_rw.dt "16 9 26 0" "3 2 1 0"
check tests/mpi/demo_dp2.dt "0 1 4 0" "0 1 1 0"
check tests/mpi/mlp_bf16_dp2.dt "0 5 0 0" "0 3 0 0"
check tests/mpi/zero_det_dp3.dt "0 0 4 5" "0 0 2 5"
"$dtc" --emit=plan "$src/tests/mpi/mlp_bf16_dp2.dt" -o "$tmp/plan" 2>/dev/null || fail "dtc"
grep -q '^  all_reduce  *over dp  *f32\[\]  .* by [a-z]*$' "$tmp/plan" ||
  fail "mlp_bf16_dp2.dt: the loss's all_reduce is no longer f32 alone"
grep -q '^  all_reduce  *over dp  *f32\[2826\] .* in bf16$' "$tmp/plan" ||
  fail "mlp_bf16_dp2.dt: the gradients' bucket (2826 elements) is not sent in bf16"
echo "buckets: ok"
