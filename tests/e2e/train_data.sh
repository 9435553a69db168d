#!/bin/sh
# train_data.sh TRAIN_MLP DATA: train_mlp on test sets that do not fit the
# model (images of another shape or of i32, labels outside 0..9, bytes after
# the gzip data) must fail with status 1 and a message naming the file; it
# must not crash, nor leak (a sanitizer build exits 23 on a leak). A save cut
# off by a file size limit fails the same way and leaves no temporary file; a
# model that cannot be created fails with the runtime's message.
# DATA holds Fashion-MNIST's training files, which every case uses.
set -u
app=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

# be32 N: N as 4 big-endian bytes
be32() {
  printf "\\$(printf %03o $(($1 >> 24 & 255)))\\$(printf %03o $(($1 >> 16 & 255)))"
  printf "\\$(printf %03o $(($1 >> 8 & 255)))\\$(printf %03o $(($1 & 255)))"
}
# idx FILE TYPE N [DIM...]: an IDX header of element type TYPE (octal escape)
# and dims N DIM..., then zero data
idx() {
  f=$1 type=$2
  shift 2
  rank=$# count=1
  { printf '\000\000'; printf "\\$type"; printf "\\$(printf %03o "$rank")"
    for d in "$@"; do be32 "$d"; count=$((count * d)); done; } >"$f"
  size=1
  [ "$type" = 014 ] && size=4
  head -c $((count * size)) /dev/zero >>"$f"
}
# expect NAME WANT: train_mlp on $tmp/NAME must exit 1 with WANT in its message
expect() {
  "$app" --quiet --max-steps 1 --data "$tmp/$1" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$2" "$tmp/err"; then
    echo "FAIL $1: status $rc, wanted 1 and '$2':"; head -c 2000 "$tmp/err"; fail=1
  fi
}
# set NAME: a data directory with the real training files
set_up() {
  mkdir "$tmp/$1"
  ln -s "$data/train-images-idx3-ubyte.gz" "$data/train-labels-idx1-ubyte.gz" "$tmp/$1/"
  idx "$tmp/$1/t10k-labels-idx1-ubyte.gz" 010 100
}

set_up small
idx "$tmp/small/t10k-images-idx3-ubyte.gz" 010 100 10 10
expect small "small/t10k-images-idx3-ubyte.gz: the images are f32 [100,10,10], expected u8 images [N,28,28]"
set_up tiny
idx "$tmp/tiny/t10k-images-idx3-ubyte.gz" 010 100 1 1
expect tiny "the images are f32 [100,1,1], expected"
set_up ints
idx "$tmp/ints/t10k-images-idx3-ubyte.gz" 014 100 28 28
expect ints "ints/t10k-images-idx3-ubyte.gz: the images are i32 [100,28,28], expected"
set_up labels
idx "$tmp/labels/t10k-images-idx3-ubyte.gz" 010 100 28 28
printf 'c' | dd of="$tmp/labels/t10k-labels-idx1-ubyte.gz" bs=1 seek=50 conv=notrunc 2>/dev/null
expect labels "labels/t10k-labels-idx1-ubyte.gz: label 99 at index 42 is outside 0..9"
set_up count
idx "$tmp/count/t10k-images-idx3-ubyte.gz" 010 99 28 28
expect count "count/t10k-labels-idx1-ubyte.gz: expected 99 integer labels, one per image"
set_up tail
idx "$tmp/tail/t10k-images-idx3-ubyte.gz" 010 100 28 28
gzip -c "$tmp/tail/t10k-images-idx3-ubyte.gz" >"$tmp/tail/z"
printf 'junk' >>"$tmp/tail/z"
mv "$tmp/tail/z" "$tmp/tail/t10k-images-idx3-ubyte.gz"
expect tail "tail/t10k-images-idx3-ubyte.gz: 4 bytes after the gzip data"

# a save cut off by a file size limit (the checkpoint is some 2.4 MB)
set_up save
idx "$tmp/save/t10k-images-idx3-ubyte.gz" 010 100 28 28
(ulimit -f 1000 && exec "$app" --quiet --max-steps 1 --data "$tmp/save" \
  --save "$tmp/save/ck.st") >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -qF "cannot write $tmp/save/ck.st" "$tmp/err" ||
   ls "$tmp/save" | grep -q 'ck\.st'; then
  echo "FAIL save: status $rc, files $(ls "$tmp/save" | tr '\n' ' '):"; cat "$tmp/err"; fail=1
fi
# a model that cannot be created: the runtime's message (its trace file,
# DTRT_TRACE, is a directory)
set_up create
idx "$tmp/create/t10k-images-idx3-ubyte.gz" 010 100 28 28
DTRT_TRACE="$tmp/create" "$app" --quiet --max-steps 1 --data "$tmp/create" >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -qxF "train_mlp: cannot create the model: trace: $tmp/create is not \
a regular file; not writing it" "$tmp/err"; then
  echo "FAIL create: status $rc, wanted 1 and the runtime's message:"; cat "$tmp/err"; fail=1
fi
[ $fail -eq 0 ] && echo "train_data: every bad set refused"
exit $fail
