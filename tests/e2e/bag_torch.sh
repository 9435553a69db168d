#!/bin/sh
# bag_torch.sh BAG_STEPS: embedding_bag in every mode, both input forms, with
# per_sample_weights and padding_idx, against torch.nn.functional.embedding_bag:
# values and gradients on the same tables (bag_torch.py); a bad id refused
# naming the table, the batch row and the id. Skipped (status 77) when
# Debian's python3 has no torch.
set -u
run=$1
py=/usr/bin/python3
dir=$(dirname "$0")
if ! "$py" -c "import torch" 2>/dev/null; then
  echo "bag_torch: skipped: $py cannot import torch (Debian's python3-torch)"
  exit 77
fi
fail=0
check() {   # DTC_CALL TORCH_CALL
  "$run" "$1" 2>/dev/null | "$py" "$dir/bag_torch.py" "$2" || fail=1
}
for mode in sum mean max; do
  check "embedding_bag(ids, w, mode = \"$mode\")" "F.embedding_bag(ids, w, mode=\"$mode\")"
  check "embedding_bag(ids, w, mode = \"$mode\", padding_idx = 2)" \
        "F.embedding_bag(ids, w, mode=\"$mode\", padding_idx=2)"
  check "embedding_bag(flat, w, offs, \"$mode\")" "F.embedding_bag(flat, w, offs, mode=\"$mode\")"
  check "embedding_bag(flat, w, offs, \"$mode\", padding_idx = -5)" \
        "F.embedding_bag(flat, w, offs, mode=\"$mode\", padding_idx=2)"
done
check "embedding_bag(ids, w)" "F.embedding_bag(ids, w)"
check "embedding_bag(ids, w, mode = \"sum\", per_sample_weights = sw2, padding_idx = 0)" \
      "F.embedding_bag(ids, w, mode=\"sum\", per_sample_weights=sw2, padding_idx=0)"
check "embedding_bag(flat, w, offs, \"sum\", sw)" \
      "F.embedding_bag(flat, w, offs, mode=\"sum\", per_sample_weights=sw)"
# ids outside the table: a runtime error naming it, the batch row and the id
for call in "embedding_bag(ids, w, mode = \"max\")" "embedding_bag(flat, w, offs, \"sum\", sw)"; do
  if ! "$run" "$call" bad 2>/dev/null |
       grep -q "^error .*embedding_bag: table 'w': batch row 2 has id 9 .*outside \[0, 7)"; then
    echo "bag_torch: id 9 was not refused in $call"
    fail=1
  fi
done
exit $fail
