#!/bin/sh
# gpt_depth.sh DTC GPT.dt [PASS]: examples/gpt.dt is one loop whatever its
# depth. With -D L=96, the IR after the frontend (or after --stop-after=PASS)
# holds a body function and a repeat of n = 96, and, numbers aside, is the
# IR of -D L=2 line for line. After PASS, exits 77 (skipped) while autodiff
# reports that a repeat is not differentiated yet.
set -u
dtc=$1 model=$2
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
for L in 2 96; do
  if ! "$dtc" "$model" --emit=ir ${3:+--stop-after=$3} -D L=$L >"$tmp/$L.ir" 2>"$tmp/err"; then
    if grep -q "error: 'repeat' is not differentiated yet" "$tmp/err"; then
      echo "gpt_depth: skipped: autodiff does not differentiate repeat yet"
      exit 77
    fi
    cat "$tmp/err"
    exit 1
  fi
done
fail() { echo "gpt_depth: $*"; exit 1; }
bodies=$(grep -c '^func @[^ ]* body' "$tmp/96.ir")
[ -n "${3:-}" ] || [ "$bodies" -eq 1 ] || fail "$bodies body functions after the frontend, not 1"
[ "$bodies" -ge 1 ] || fail "no body function"
grep -q ' = repeat .*{body = "layers", n = 96,' "$tmp/96.ir" || fail "no repeat of @layers with n = 96"
! grep ' = repeat ' "$tmp/96.ir" | grep -v 'n = 96,' | grep -q . || fail "a repeat whose n is not 96"
sed -E 's/[0-9]+/N/g' "$tmp/2.ir" >"$tmp/2.shape"
sed -E 's/[0-9]+/N/g' "$tmp/96.ir" >"$tmp/96.shape"
diff -u "$tmp/2.shape" "$tmp/96.shape" || fail "the IR of L = 96 is not the IR of L = 2"
echo "gpt_depth: $(wc -l <"$tmp/96.ir") lines of IR at L = 2 and L = 96"
