#!/bin/sh
# resume.sh: training 40 steps straight and training 20, saving, resuming from
# the checkpoint and training 20 more must give the same checkpoint, bit for
# bit. A corrupted checkpoint must be refused and leave the good one alone.
# usage: resume.sh TRAIN_MLP
set -eu
app=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$app" --quiet --max-steps 40 --save "$tmp/straight.st" >/dev/null
"$app" --quiet --max-steps 20 --save "$tmp/split.st" >/dev/null
"$app" --quiet --max-steps 40 --resume "$tmp/split.st" --save "$tmp/split.st" >/dev/null
cmp "$tmp/straight.st" "$tmp/split.st"
cp "$tmp/split.st" "$tmp/bad.st"
size=$(wc -c <"$tmp/bad.st")
printf '\377' | dd of="$tmp/bad.st" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
cp "$tmp/bad.st" "$tmp/bad.orig"
if "$app" --quiet --max-steps 41 --resume "$tmp/bad.st" --save "$tmp/bad.st" 2>"$tmp/err"; then
  echo "FAIL: a corrupted checkpoint was accepted"; exit 1
fi
grep -qi checksum "$tmp/err" || { echo "FAIL: no checksum message:"; cat "$tmp/err"; exit 1; }
cmp "$tmp/bad.st" "$tmp/bad.orig"
echo "resume: straight and resumed checkpoints are identical; corrupt file refused"
