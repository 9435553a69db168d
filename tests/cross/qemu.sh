#!/bin/sh
# qemu.sh DTC SOURCE WORK HOST_RUN: the aarch64 code of dtc, linked and run.
# Builds libdtrt for aarch64 (cmake/aarch64-linux-gnu.cmake, DTC_RUNTIME_ONLY)
# under WORK; links tests/cross/cross_train.c with tests/e2e/blobs.dt
# compiled by DTC for aarch64 into an aarch64 program, and with the aarch64
# object of tests/cross/arm_x86.dt (the code of its aarch64 device) into
# another, which must link; runs the first under qemu-aarch64 for STEPS
# training steps and compares its losses with HOST_RUN's (cross_train built
# for the host with the same model): per step |arm - host| <= 1e-4 max(1,
# |host|), and the loss must fall by half, so the run is not vacuous.
# Exits 77 (skipped) without the packages of `tools/setup.sh cross`.
set -u
dtc=$1 src=$2 work=$3 host_run=$4
steps=20
me=qemu.sh
. "$src/tests/cross/aarch64.sh"
mkdir -p "$work/single" "$work/mixed"

build_dtrt "$work/dtrt"

"$dtc" "$src/tests/e2e/blobs.dt" --target=aarch64-linux-gnu -mcpu=cortex-a72 \
  -o "$work/single/blobs.o" || fail "dtc --target=aarch64-linux-gnu failed"
"$dtc" "$src/tests/cross/arm_x86.dt" -o "$work/mixed/blobs.o" || fail "dtc arm_x86.dt failed"
# link DIR OBJ: DIR/cross_train, aarch64, from OBJ and DIR/blobs.h
link() {
  $cc -O2 -std=c17 -Wall -Wextra -I"$1" "$src/tests/cross/cross_train.c" "$2" \
      "$work/dtrt/libdtrt.a" -L"$ompi/openmpi/lib" -lmpi -lopenblas -lcjson -lz -lm -lpthread \
      -Wl,-rpath-link,"$ompi" -o "$1/cross_train" ||
    fail "cannot link $2 for aarch64"
  [ "$(od -An -tu2 -j18 -N2 "$1/cross_train" | tr -d ' ')" = 183 ] || fail "$1/cross_train is not aarch64"
}
link "$work/single" "$work/single/blobs.o"
link "$work/mixed" "$work/mixed/blobs.aarch64-linux-gnu.o"

"$host_run" $steps >"$work/host.txt" || fail "the host run failed"
# -L: the sysroot first (Open MPI's libraries, at the paths of an arm64
# system), then the host's / (the loader, OpenBLAS, cJSON, zlib, libc)
qemu-aarch64 -L "$sysroot" "$work/single/cross_train" $steps >"$work/arm.txt" || fail "the aarch64 run failed"
paste "$work/host.txt" "$work/arm.txt" | awk -v n=$steps '
  function abs(x) { return x < 0 ? -x : x }
  { printf "step %2d  host %.7f  aarch64 %.7f\n", NR - 1, $1, $2
    if (NR == 1) first = $1
    last = $1
    if (NF != 2 || abs($2 - $1) > 1e-4 * (abs($1) > 1 ? abs($1) : 1)) bad = bad " " NR - 1 }
  END { if (NR != n) { print "qemu.sh: FAIL: " NR " losses, not " n; exit 1 }
        if (bad != "") { print "qemu.sh: FAIL: the losses differ beyond 1e-4 at steps" bad; exit 1 }
        if (!(last < first / 2)) { print "qemu.sh: FAIL: the loss did not fall by half"; exit 1 }
        print "qemu.sh: ok" }'
