#!/bin/sh
# sparse_torch.sh SPARSE_STEPS: sparse tables against torch for 10 steps on
# the same weights and data (sparse_torch.py): embedding_bag with sparse=True
# in modes sum and mean, with per_sample_weights and padding_idx, trained by
# SGD, Adagrad, SparseAdam (beside Adam for the dense param; also with two
# param groups) and row-wise Adagrad (a plain loop); then the memory plan of
# a sparse model, which must hold no [R, D] buffer for a table (the tables
# are [9, 5] and [7, 5]).
# Skipped (status 77) when Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
fail=0
# the plan first: it needs no torch
for opt in "sgd(lr = 0.1)" "adagrad(lr = 0.1)" "sparse_adam(lr = 0.01)" \
           "rowwise_adagrad(lr = 0.1)"; do
  out=$("$run" 1 "$opt" "embedding_bag(ids, e1, mode = \"sum\")" plan) || fail=1
  if [ -z "$out" ] || printf '%s\n' "$out" | grep -q "^buf f32\[9,5\]\|^buf f32\[7,5\]"; then
    echo "sparse_torch: $opt: the plan holds a table-sized buffer (or none at all):"
    printf '%s\n' "$out"
    fail=1
  fi
done
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "sparse_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  [ $fail = 0 ] && exit 77
  exit 1
fi
check() {   # DTC_OPTIMIZER DENSE SPARSE DTC_CALL TORCH_CALL
  "$run" 10 "$1" "$4" | "$py" "$dir/sparse_torch.py" 10 "$2" "$3" "$5" || fail=1
}
sum='embedding_bag(ids, e1, mode = "sum", per_sample_weights = sw, padding_idx = 2)'
tsum='F.embedding_bag(ids, e1, mode="sum", per_sample_weights=sw, padding_idx=2, sparse=True)'
mean='embedding_bag(ids, e1, mode = "mean")'
tmean='F.embedding_bag(ids, e1, mode="mean", sparse=True)'
check "sgd(lr = 0.1)" "SGD(lr=0.1)" "SGD(lr=0.1)" "$sum" "$tsum"
check "sgd(lr = 0.1)" "SGD(lr=0.1)" "SGD(lr=0.1)" "$mean" "$tmean"
check "adagrad(lr = 0.1)" "Adagrad(lr=0.1)" "Adagrad(lr=0.1)" "$sum" "$tsum"
check "adagrad(lr = 0.1, initial_accumulator_value = 0.5, eps = 1e-3)" \
      "Adagrad(lr=0.1, initial_accumulator_value=0.5, eps=1e-3)" \
      "Adagrad(lr=0.1, initial_accumulator_value=0.5, eps=1e-3)" "$mean" "$tmean"
check "sparse_adam(lr = 0.01)" "Adam(lr=0.01)" "SparseAdam(lr=0.01)" "$sum" "$tsum"
check "sparse_adam(lr = 0.02, beta1 = 0.5, beta2 = 0.9, eps = 1e-4)" \
      "Adam(lr=0.02, betas=(0.5, 0.9), eps=1e-4)" "SparseAdam(lr=0.02, betas=(0.5, 0.9), eps=1e-4)" \
      "$mean" "$tmean"
check "rowwise_adagrad(lr = 0.1)" "Adagrad(lr=0.1)" "rowwise_adagrad(lr=0.1)" "$sum" "$tsum"
# param groups: SparseAdam's two groups of their own lr, Adam's w in one
check "sparse_adam(lr = 0.01, groups = [group([e2], lr = 0.05)])" "Adam(lr=0.01)" \
      "SparseAdam([{'params': [p['e1']]}, {'params': [p['e2']], 'lr': 0.05}], lr=0.01)" "$sum" "$tsum"
check "sparse_adam(lr = 0.02, beta2 = 0.9, groups = [group([e1, w], lr = 0.005)])" \
      "Adam(lr=0.005, betas=(0.9, 0.9))" \
      "SparseAdam([{'params': [p['e1']], 'lr': 0.005}, {'params': [p['e2']]}], lr=0.02, betas=(0.9, 0.9))" \
      "$mean" "$tmean"
exit $fail
