#!/bin/sh
# verify_each.sh DTC BUILD_TYPE MODEL: the IR is checked after every pass
# where --verify-each asks (and in Debug builds, by default), which
# --time-passes reports as a row "verify"; the frontend's output is checked
# in every build, so a user's malformed IR text gets the same diagnostics
# with the flag or without.
set -u
dtc=$1 build=$2 model=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# rows ARGS...: the --time-passes rows of dtc ARGS named verify
rows() {
  if ! "$dtc" --time-passes "$@" --emit=plan "$model" -o "$tmp/plan" 2>"$tmp/err"; then
    echo "FAIL dtc $*:" >&2; cat "$tmp/err" >&2; exit 1
  fi
  grep -c '^verify ' "$tmp/err"
}
[ "$(rows --verify-each)" = 1 ] || { echo "FAIL --verify-each: no verify row"; fail=1; }
want=0
[ "$build" = Debug ] && want=1
[ "$(rows)" = $want ] || { echo "FAIL a $build build without --verify-each: verify rows not $want"; fail=1; }
cat >"$tmp/bad.ir" <<'IR'
module m

input x : f32[4,8]

func @forward {
  %x = load {global = "x"} : f32[4,8]
  %y = relu %x : f32[4,8]
  output %y {name = "y"}
  output %x {name = "y"}
}
IR
for flag in "" --verify-each; do
  # shellcheck disable=SC2086
  "$dtc" $flag "$tmp/bad.ir" -o "$tmp/bad.o" 2>"$tmp/err$flag"
  rc=$?
  [ $rc = 1 ] || { echo "FAIL dtc $flag bad.ir: exit status $rc, expected 1"; fail=1; }
  grep -q "bad.ir:9:3: error: output 'y' is defined twice" "$tmp/err$flag" ||
    { echo "FAIL dtc $flag bad.ir: no located error:"; cat "$tmp/err$flag"; fail=1; }
done
cmp -s "$tmp/err" "$tmp/err--verify-each" || { echo "FAIL diagnostics differ with --verify-each"; fail=1; }
[ $fail = 0 ] && echo "verify_each: ok"
exit $fail
