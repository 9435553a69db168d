#!/bin/sh
# gemm.sh DTC SOURCE WORK: dtc's generated matmul for aarch64 (the NEON
# micro-kernel), run under qemu-aarch64 against a plain loop. For each shape
# below it writes module mm (c = matmul(a, b) with the case's ta and tb) as
# IR, compiles it with DTC --target=aarch64-linux-gnu -mcpu=cortex-a72
# -fmatmul=dtc, links tests/cross/gemm_check.c with libdtrt built for
# aarch64 under WORK, and runs it: every element within (k + 2) 2^-23 sum
# |a b| of the double reference, the same bits on 1 and 3 threads.
# Exits 77 (skipped) without the packages of `tools/setup.sh cross`.
set -u
dtc=$1 src=$2 work=$3
me=gemm.sh
. "$src/tests/cross/aarch64.sh"
mkdir -p "$work"
build_dtrt "$work/dtrt"

# dims A B C: the IR type's dims of a shape written with x (3x17x63 -> 3,17,63)
dims() { echo "$1" | tr x ,; }

# case NAME A B C TA TB: a = f32[A], b = f32[B], c = f32[C]
case_run() {
  name=$1 a=$2 b=$3 c=$4 ta=$5 tb=$6
  d=$work/$name
  mkdir -p "$d"
  cat >"$d/mm.ir" <<IR
module mm
input a : f32[$(dims "$a")]
input b : f32[$(dims "$b")]
func @forward {
  %a = load {global = "a"} : f32[$(dims "$a")]
  %b = load {global = "b"} : f32[$(dims "$b")]
  %c = matmul %a, %b {ta = $ta, tb = $tb} : f32[$(dims "$c")]
  output %c {name = "c"}
}
IR
  "$dtc" "$d/mm.ir" --target=aarch64-linux-gnu -mcpu=cortex-a72 -fmatmul=dtc -o "$d/mm.o" ||
    fail "$name: dtc failed"
  aarch64-linux-gnu-nm "$d/mm.o" | grep -q 'dtc\.gemm_kernel' ||
    fail "$name: no generated GEMM in $d/mm.o"
  $cc -O2 -std=c17 -Wall -Wextra -Werror -DTA="$ta" -DTB="$tb" -I"$d" -I"$src/runtime" \
      "$src/tests/cross/gemm_check.c" "$d/mm.o" "$work/dtrt/libdtrt.a" \
      -L"$ompi/openmpi/lib" -lmpi -lopenblas -lcjson -lz -lm -lpthread \
      -Wl,-rpath-link,"$ompi" -o "$d/check" || fail "$name: cannot link for aarch64"
  qemu-aarch64 -L "$sysroot" "$d/check" || fail "$name: the aarch64 run failed"
}

#        name        a            b            c             ta tb
case_run one         1x1          1x1          1x1           0  0
case_run odd         17x63        63x33        17x33         0  0
case_run ta          255x63       255x17       63x17         1  0
case_run tb          255x17       63x17        255x63        0  1
case_run ta_tb       17x3         1023x17      3x1023        1  1
case_run tall        1023x63      63x3         1023x3        0  0
case_run job_fwd     64x784       784x256      64x256        0  0
case_run job_dw1     64x784       64x256       784x256       1  0
case_run shared_b    3x17x63      63x33        3x17x33       0  0
case_run batched_ta  4x33x17      4x33x63      4x17x63       1  0
case_run batched_tb  2x3x5x63     2x3x17x63    2x3x5x17      0  1
case_run big         255x1023     1023x1023    255x1023      0  0
echo "gemm.sh: ok"
