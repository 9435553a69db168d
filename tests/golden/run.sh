#!/bin/sh
# run.sh: golden-file tests. For each NAME.dt here:
#   NAME.err  expected diagnostics of `dtc --emit=ir NAME.dt` (exit status 1)
#   NAME.ir   expected IR (exit status 0); the IR must also parse back to itself
# A first line "# args: ..." in NAME.dt adds driver arguments.
# usage: run.sh DTC [NAME...]
dtc=$1
shift
cd "$(dirname "$0")" || exit 2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
pass=0
fail=0
names=$*
[ -n "$names" ] || names=$(ls *.dt | sed 's/\.dt$//')
for n in $names; do
  args=$(sed -n '1s/^# args: //p' "$n.dt")
  if [ -f "$n.err" ]; then
    # shellcheck disable=SC2086
    "$dtc" --verify-each --emit=ir $args "$n.dt" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 1 ]; then
      echo "FAIL $n: exit status $rc, expected 1"; fail=$((fail + 1)); continue
    fi
    if ! diff -u "$n.err" "$tmp/err"; then
      echo "FAIL $n: diagnostics differ"; fail=$((fail + 1)); continue
    fi
  elif [ -f "$n.ir" ]; then
    # shellcheck disable=SC2086
    "$dtc" --verify-each --emit=ir $args "$n.dt" >"$tmp/out.ir" 2>"$tmp/err"
    rc=$?
    if [ $rc -ne 0 ]; then
      echo "FAIL $n: exit status $rc"; cat "$tmp/err"; fail=$((fail + 1)); continue
    fi
    if ! diff -u "$n.ir" "$tmp/out.ir"; then
      echo "FAIL $n: IR differs"; fail=$((fail + 1)); continue
    fi
    if ! "$dtc" --emit=ir "$tmp/out.ir" >"$tmp/again.ir" 2>"$tmp/err" ||
       ! diff -u "$tmp/out.ir" "$tmp/again.ir"; then
      cat "$tmp/err"
      echo "FAIL $n: printed IR does not parse back to itself"; fail=$((fail + 1)); continue
    fi
  else
    echo "FAIL $n: neither $n.err nor $n.ir"; fail=$((fail + 1)); continue
  fi
  pass=$((pass + 1))
done
echo "golden: $pass passed, $fail failed"
[ $fail -eq 0 ]
