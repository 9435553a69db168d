#!/bin/sh
# sched_memory.sh DTC MPIDIR: the memory plans of examples/gpt.dt at L=3 as
# three pipeline stages with 4 micro-batches (more than the stages), in 1F1B's
# order (tests/mpi/deep3_pp3_mb.dt) and GPipe's (deep3_pp3_gpipe.dt): every
# device's work arena for the training step is smaller under 1F1B, whose
# stages hold at most 3 micro-batches' saved activations where GPipe holds 4.
set -e
dtc=$1 dir=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "  0 c0       state 752.2 KiB, work 1.59 MiB / 832.0 KiB": device, bytes
work() {
  "$dtc" "$dir/$1.dt" -D L=3 --emit=plan >"$tmp/$1.plan"
  grep -q "$2" "$tmp/$1.plan" || { echo "no '$2' in the plan of $1:"; cat "$tmp/$1.plan"; exit 1; }
  awk '/^memory per device/ {on = 1; next}
       on && $3 == "state" {
         v = $7; u = $8; sub(",", "", u); sub(",", "", v)
         f = u == "MiB" ? 1048576 : u == "KiB" ? 1024 : 1
         print $1, v * f; next }
       on {exit}' "$tmp/$1.plan" >"$tmp/$1.work"
}
work deep3_pp3_mb "1F1B: stage s runs stages - s - 1 forward ones.*at most 3 micro-batches"
work deep3_pp3_gpipe "all forward then all backward; at most 4 micro-batches"
join "$tmp/deep3_pp3_mb.work" "$tmp/deep3_pp3_gpipe.work" >"$tmp/both"
[ "$(wc -l <"$tmp/both")" -eq 3 ] || { echo "expected 3 devices:"; cat "$tmp/both"; exit 1; }
cat "$tmp/both" | while read d f g; do
  echo "device $d: work arena $f B under 1F1B, $g B under GPipe"
  awk -v f="$f" -v g="$g" 'BEGIN { exit !(f < g) }' || { echo "device $d: 1F1B's arena is not smaller"; exit 1; }
done
