#!/bin/sh
# dtc_outputs.sh DTC MODEL.dt: dtc writes only regular files or new paths,
# reports a failed write as a dtc error (never LLVM's), and a failed
# compilation leaves no object behind: not when the header cannot be
# written, not half an object when the disk (here a file-size limit) is full.
set -u
dtc=$1
model=$2
name=$(basename "$model" .dt)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
# expect WANT ARGS...: dtc ARGS must exit 1 with WANT on stderr
expect() {
  want=$1
  shift
  timeout 60 "$dtc" "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$want" "$tmp/err" || grep -q "LLVM ERROR" "$tmp/err"; then
    echo "FAIL dtc $*: status $rc, wanted 1 and '$want':"; head -c 1000 "$tmp/err"; fail=1
  fi
}
gone() {   # the path must not exist
  if [ -e "$1" ]; then echo "FAIL: $1 was left behind"; fail=1; fi
}

expect "cannot write '/dev/full': not a regular file" "$model" -o /dev/full
[ -c /dev/full ] || { echo "FAIL: /dev/full is no longer a device"; fail=1; }
expect "cannot write '/dev/null': not a regular file" --emit=ir "$model" -o /dev/null
expect "cannot write '/dev/null': not a regular file" --emit=llvm "$model" -o /dev/null
mkdir "$tmp/dir.ll"
expect "cannot write '$tmp/dir.ll': " --emit=llvm "$model" -o "$tmp/dir.ll"
[ -d "$tmp/dir.ll" ] || { echo "FAIL: the directory was replaced"; fail=1; }

mkdir "$tmp/fifo"
mkfifo "$tmp/fifo/$name.h"
expect "cannot write '$tmp/fifo/$name.h': not a regular file" "$model" -o "$tmp/fifo/m.o"
gone "$tmp/fifo/m.o"
[ -p "$tmp/fifo/$name.h" ] || { echo "FAIL: the FIFO was replaced"; fail=1; }

mkdir "$tmp/full"
(ulimit -f 1; "$dtc" "$model" -o "$tmp/full/m.o") >/dev/null 2>"$tmp/err"
rc=$?
if [ $rc -ne 1 ] || ! grep -qF "cannot write '$tmp/full/m.o': File too large" "$tmp/err"; then
  echo "FAIL: a write past the file-size limit: status $rc:"; head -c 1000 "$tmp/err"; fail=1
fi
gone "$tmp/full/m.o"
gone "$tmp/full/$name.h"

"$dtc" "$model" -o "$tmp/ok.o" || { echo "FAIL: a good compilation failed"; fail=1; }
[ -s "$tmp/ok.o" ] && [ -s "$tmp/$name.h" ] || { echo "FAIL: no object or header"; fail=1; }
[ $fail -eq 0 ] && echo "dtc_outputs: every bad output refused, nothing left behind"
exit $fail
