#!/bin/sh
# read_limits.sh DTC MODEL.dt: dtc refuses, at once and naming the path, a
# model, IR or cluster file that is not a regular file (a device, a FIFO, a
# directory) or is larger than the 256 MiB it reads; an import of one too.
set -u
dtc=$1
model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
mkfifo "$tmp/fifo.dt"
ln -s /dev/zero "$tmp/zero.ir"
truncate -s 300M "$tmp/big.dt"
printf 'import "fifo.dt"\n' >"$tmp/imp.dt"
# expect WANT ARGS...: dtc ARGS must exit 1 within 10 s with WANT on stderr
expect() {
  want=$1
  shift
  timeout 10 "$dtc" --emit=ir "$@" >/dev/null 2>"$tmp/err"
  rc=$?
  if [ $rc -ne 1 ] || ! grep -qF -- "$want" "$tmp/err"; then
    echo "FAIL dtc $*: status $rc, wanted 1 and '$want':"; head -c 1000 "$tmp/err"; fail=1
  fi
}
expect "cannot read '/dev/zero': not a regular file" /dev/zero
expect "cannot read '$tmp/zero.ir': " "$tmp/zero.ir"
expect "cannot read '$tmp/fifo.dt': not a regular file" "$tmp/fifo.dt"
expect "cannot read '$tmp': Is a directory" "$tmp"
expect "cannot read '$tmp/big.dt': File too large" "$tmp/big.dt"
expect "cannot read '/dev/zero': " --cluster=/dev/zero "$model"
expect "cannot read '$tmp/fifo.dt': " --cluster="$tmp/fifo.dt" "$model"
expect "cannot read '$tmp/big.dt': File too large" --cluster="$tmp/big.dt" "$model"
expect "cannot open '$tmp/fifo.dt': not a regular file" "$tmp/imp.dt"
[ $fail -eq 0 ] && echo "read_limits: every file refused"
exit $fail
