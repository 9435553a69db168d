#!/bin/sh
# shared_loops.sh DTC: fusion groups alike in everything but their
# addresses share one loop function, so code grows with the distinct groups,
# not the program's length. A chained model of N statements h_k = tanh(h_{k-1}
# * 1.01 + 0.5) (bench/scale.sh's) has as many loop functions at 600 as at
# 300 statements, some, and its LLVM module at 600 is less than 1.3 times
# the one at 300 (each loop lowered in place, it was 1.8 times). Its groups
# are called through tables of offsets, and its loops vectorise with no
# run-time alias check.
set -u
dtc=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# chain N: the module of N statements, into $tmp/N.ll; prints its loop
# functions and lines
chain() {
  awk -v n="$1" 'BEGIN {
    print "model chain(batch B = 8) {"
    print "  input x: f32[B, 16]"
    print "  param w: f32[16, 16] init glorot"
    print "  h0 = x @ w"
    for (k = 1; k <= n; k++)
      printf "  h%d = tanh(h%d * 1.01 + 0.5)\n", k, k - 1
    printf "  loss = mean(h%d * h%d)\n", n, n
    print "  minimize loss with sgd(lr = 0.01)"
    print "}"
  }' >"$tmp/$1.dt"
  if ! timeout 300 "$dtc" -O0 --emit=llvm "$tmp/$1.dt" -o "$tmp/$1.ll" 2>"$tmp/err"; then
    echo "FAIL dtc of $1 statements:" >&2; head -c 2000 "$tmp/err" >&2; exit 1
  fi
  echo "$(grep -c '^define internal void @chain\.loop[0-9]*(' "$tmp/$1.ll") $(wc -l <"$tmp/$1.ll")"
}
set -- $(chain 300) $(chain 600)
echo "300 statements: $1 loop functions, $2 lines; 600: $3, $4"
if [ "$1" -lt 1 ] || [ "$1" -ne "$3" ]; then
  echo "FAIL loop functions: $1 at 300 statements, $3 at 600"; fail=1
fi
if [ $(($4 * 10)) -ge $(($2 * 13)) ]; then
  echo "FAIL the module grew from $2 to $4 lines"; fail=1
fi
# a group writing many buffers of the work block is called through a table
# of their offsets: the step passes work, state and the table
calls=$(grep -c 'call void @chain\.loop[0-9]*\.p[0-9]*(ptr %work, ptr %state, ptr @offsets' "$tmp/600.ll")
[ "$calls" -gt 0 ] || { echo "FAIL no group called through a table of offsets"; fail=1; }
# and its loop, whose parameters stay noalias, vectorises without run-time
# alias checks at -O2
if ! timeout 300 "$dtc" --emit=llvm "$tmp/300.dt" -o "$tmp/o2.ll" 2>"$tmp/err"; then
  echo "FAIL dtc -O2 of 300 statements:"; head -c 2000 "$tmp/err"; exit 1
fi
grep -q '^define internal fastcc void @chain\.loop[0-9]*(ptr noalias' "$tmp/o2.ll" ||
  { echo "FAIL a loop function lost its noalias parameters"; fail=1; }
grep -q 'x float>' "$tmp/o2.ll" || { echo "FAIL the loops are not vectorised"; fail=1; }
! grep -q 'memcheck' "$tmp/o2.ll" || { echo "FAIL a loop checks for overlap at run time"; fail=1; }
exit $fail
