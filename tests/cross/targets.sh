#!/bin/sh
# targets.sh DTC TESTS WORK: dtc's objects for models whose devices name their
# targets (tests/cross/*.dt), written under WORK. A mesh over an x86-64 and an
# aarch64 device gives two objects, each of its target's ELF machine (62,
# 183) holding the step functions of its own device only and the public
# NAME_* functions; two aarch64 devices give one aarch64 object; a mesh on
# the default target gives one object as before; -o - with two targets, an
# unknown device CPU and an unknown device target are errors (exit 1).
# x86-64 hosts only (elsewhere the default target differs): exit 77, skipped.
set -u
dtc=$1 tests=$2 work=$3
fail() { echo "targets.sh: FAIL: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || { echo "targets.sh: SKIP: the host is not x86-64"; exit 77; }
command -v nm >/dev/null || { echo "targets.sh: SKIP: no nm (binutils)"; exit 77; }
rm -rf "$work"
mkdir -p "$work/mixed" "$work/asm" "$work/arm" "$work/dp2"

machine() { od -An -tu2 -j18 -N2 "$1" | tr -d ' '; }   # ELF e_machine
# has OBJ SYMBOL: OBJ's symbol table defines SYMBOL
has() { nm "$1" | awk '{ print $NF }' | grep -qxF "$2"; }
files() { (cd "$1" && ls | tr '\n' ' '); }

"$dtc" "$tests/cross/arm_x86.dt" -o "$work/mixed/blobs.o" || fail "dtc arm_x86.dt failed"
[ "$(files "$work/mixed")" = "blobs.aarch64-linux-gnu.o blobs.h blobs.o " ] ||
  fail "arm_x86.dt wrote: $(files "$work/mixed")"
x86=$work/mixed/blobs.o arm=$work/mixed/blobs.aarch64-linux-gnu.o
[ "$(machine "$x86")" = 62 ] || fail "blobs.o has e_machine $(machine "$x86"), not 62 (x86-64)"
[ "$(machine "$arm")" = 183 ] || fail "the aarch64 object has e_machine $(machine "$arm"), not 183"
for f in train_step forward; do
  has "$x86" "blobs.$f.0" || fail "blobs.o lacks device 0's blobs.$f.0"
  has "$x86" "blobs.$f.1" && fail "blobs.o holds device 1's blobs.$f.1"
  has "$arm" "blobs.$f.1" || fail "the aarch64 object lacks device 1's blobs.$f.1"
  has "$arm" "blobs.$f.0" && fail "the aarch64 object holds device 0's blobs.$f.0"
done
for f in create train_step forward save load step error destroy; do
  has "$x86" "blobs_$f" && has "$arm" "blobs_$f" || fail "an object lacks blobs_$f"
done

"$dtc" "$tests/cross/arm_x86.dt" --emit=asm -o "$work/asm/blobs.s" || fail "--emit=asm failed"
[ "$(files "$work/asm")" = "blobs.aarch64-linux-gnu.s blobs.h blobs.s " ] ||
  fail "--emit=asm wrote: $(files "$work/asm")"

"$dtc" "$tests/cross/arm_only.dt" -o "$work/arm/blobs.o" || fail "dtc arm_only.dt failed"
[ "$(files "$work/arm")" = "blobs.h blobs.o " ] || fail "arm_only.dt wrote: $(files "$work/arm")"
[ "$(machine "$work/arm/blobs.o")" = 183 ] || fail "arm_only.dt's object is not aarch64"
has "$work/arm/blobs.o" blobs.train_step.0 && has "$work/arm/blobs.o" blobs.train_step.1 ||
  fail "arm_only.dt's object lacks a device's step"

"$dtc" "$tests/mpi/mlp_dp2.dt" -o "$work/dp2/mlp.o" || fail "dtc mlp_dp2.dt failed"
[ "$(files "$work/dp2")" = "mlp.h mlp.o " ] || fail "mlp_dp2.dt wrote: $(files "$work/dp2")"
[ "$(machine "$work/dp2/mlp.o")" = 62 ] || fail "mlp_dp2.dt's object is not x86-64"

# expect STATUS TEXT CMD...: CMD exits with STATUS and its stderr holds TEXT
expect() {
  want=$1 text=$2
  shift 2
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  [ "$rc" = "$want" ] || fail "exit status $rc, not $want: $*"
  printf '%s\n' "$err" | grep -qF -- "$text" || fail "no '$text' in: $err"
}
expect 1 "dtc: error: the devices of model 'blobs' run code for 2 targets (x86_64-linux-gnu and aarch64-linux-gnu), one file each: give -o FILE, not -o -" \
  "$dtc" "$tests/cross/arm_x86.dt" -o -
expect 1 "bad_cpu.dt:9:12: error: device 'd1': unknown CPU 'cortex-z9' for target aarch64-unknown-linux-gnu" \
  "$dtc" "$tests/cross/bad_cpu.dt" -o "$work/bad.o"
expect 1 "bad_target.dt:9:12: error: device 'd1': unknown target 'riscv64-linux-gnu' (dtc generates code for x86_64 and aarch64)" \
  "$dtc" "$tests/cross/bad_target.dt" -o "$work/bad.o"
[ ! -e "$work/bad.o" ] || fail "a failed compilation wrote bad.o"
echo "targets.sh: ok"
