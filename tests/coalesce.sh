#!/bin/sh
# coalesce.sh DTC SRC: the collectives of bench/dlrm_tw.dt (26 tables, each
# whole on one of 3 devices) exchanged as one each way. With -fno-coalesce
# @train_step runs 41 all_to_alls and 11 all_gathers (a table's pooled rows
# forward, to the batch's split or gathered whole, and their adjoint
# backward), coalesced 2 and 1, and 9 all_reduces (the loss and the 8
# dense gradients), 2 (the loss alone and the gradients' bucket); the
# shard_slice stays, the bytes per step stay as they were, and the
# simulator, pricing fewer, predicts less time in collectives on every
# device.
dtc=$1 src=$2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for v in on off; do
  flag=
  [ $v = off ] && flag=-fno-coalesce
  # shellcheck disable=SC2086
  "$dtc" $flag --emit=plan "$src/bench/dlrm_tw.dt" -o "$tmp/$v.plan" 2>/dev/null ||
    fail "dtc --emit=plan $flag"
  # shellcheck disable=SC2086
  "$dtc" $flag --emit=sim "$src/bench/dlrm_tw.dt" >"$tmp/$v.sim" 2>/dev/null ||
    fail "dtc --emit=sim $flag"
  # "  61 collectives, 1.4 MiB per step" after "collectives of @train_step"
  sed -n '/^collectives of @train_step/,/ per step$/p' "$tmp/$v.plan" >"$tmp/$v.step"
  eval "${v}_n=\$(sed -n 's/^  \([0-9]*\) collectives, .*/\1/p' \"$tmp/$v.step\")"
  eval "${v}_bytes=\$(sed -n 's/^  [0-9]* collectives, \(.*\) per step/\1/p' \"$tmp/$v.step\")"
  eval "${v}_a2a=\$(grep -c '^  all_to_all ' \"$tmp/$v.step\")"
  eval "${v}_ag=\$(grep -c '^  all_gather ' \"$tmp/$v.step\")"
  eval "${v}_ar=\$(grep -c '^  all_reduce ' \"$tmp/$v.step\")"
  eval "${v}_comm=\$(awk '\$1 ~ /^[0-9]+\$/ && NF == 7 {print \$5}' \"$tmp/$v.sim\" | tr '\n' ' ')"
done
echo "@train_step: -fno-coalesce $off_n collectives ($off_a2a all_to_all, $off_ag all_gather," \
     "$off_ar all_reduce), $off_bytes; coalesced $on_n ($on_a2a all_to_all, $on_ag all_gather," \
     "$on_ar all_reduce), $on_bytes"
echo "predicted ms in collectives per device: $off_comm-> $on_comm"
[ "$off_a2a $off_ag" = "41 11" ] ||
  fail "expected 41 all_to_alls and 11 all_gathers without coalescing, got $off_a2a and $off_ag"
[ "$on_a2a $on_ag" = "2 1" ] ||
  fail "expected 2 all_to_alls and 1 all_gather coalesced, got $on_a2a and $on_ag"
[ "$off_ar $on_ar" = "9 2" ] ||
  fail "expected 9 all_reduces without coalescing and 2 with, got $off_ar and $on_ar"
[ "$on_n" = $((off_n - 56)) ] || fail "expected $((off_n - 56)) collectives, got $on_n"
[ "$on_bytes" = "$off_bytes" ] || fail "bytes per step $off_bytes became $on_bytes"
set -- $off_comm
for c in $on_comm; do
  awk -v a="$c" -v b="$1" 'BEGIN { exit !(a < b) }' ||
    fail "predicted time in collectives $1 ms became $c ms"
  shift
done
echo "coalesce: ok"
