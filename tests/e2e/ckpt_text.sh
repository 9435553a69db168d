#!/bin/sh
# ckpt_text.sh: dtc-ckpt prints a checkpoint's text escaped (tests/e2e/
# ckpt_text.py makes the files): a model name with a newline makes no line
# of its own, escape sequences reach the terminal as text, a file without a
# model name lists "(none)", never "(null)"; a tensor name holding \u0000 is
# refused by list and verify with the file and the byte named.
# usage: ckpt_text.sh DTC_CKPT SRCDIR WORKDIR (skipped without python3)
set -u
tool=$1 here=$2 dir=$3
fail() { echo "FAIL: $*"; exit 1; }
command -v python3 > /dev/null || { echo "skipped: no python3"; exit 77; }
rm -rf "$dir" && mkdir -p "$dir" && cd "$dir" || fail "no $dir"
python3 "$here/ckpt_text.py" . || fail "ckpt_text.py"
esc=$(printf '\033') cr=$(printf '\r')

"$tool" list forged.st > out || fail "list forged.st: $(cat out)"
cat out
[ "$(grep -c '^step ' out)" -eq 1 ] || fail "a forged step line"
grep -q '^step        7$' out || fail "no step 7"
grep -q '^model       mlp\\nstep        999$' out || fail "the model not escaped"

"$tool" list clear.st > out || fail "list clear.st"
cat -v out
grep -q "[$esc$cr]" out && fail "an escape sequence printed raw"
grep -q '^model       \\x1b\[2J\\x1b\[Hmlp$' out || fail "the model's escapes"
grep -q '^  w\\x1b\[31m  *F32' out || fail "the tensor name's escapes"
grep -q '^  b\\xe2\\x80\\xaeb  *F32' out || fail "a right-to-left override printed raw"
grep -q '^            w: r0 \\x1b\[2J$' out || fail "the plan's escapes"

"$tool" list nomodel.st > out || fail "list nomodel.st"
grep -q "(null)" out && fail "(null) printed"
grep -q '^model       (none)$' out || fail "no (none) for the model"
grep -q "^  bé  *F32" out || fail "UTF-8 escaped"

for cmd in list verify; do
  "$tool" $cmd nul.st > out 2> err && fail "$cmd took a NUL in a name"
  grep -q "^dtc-ckpt: load: nul.st: the header holds a NUL (\\\\u0000) at byte [0-9]*$" err ||
    fail "$cmd: $(cat err)"
done
echo "ckpt_text: file text printed escaped, NUL in names refused"
