# aarch64.sh: sourced by the cross tests (qemu.sh, gemm.sh) after they set
# me (their name) and src (the source tree). It exits 77 (skipped) without
# the packages of `tools/setup.sh cross`, and defines skip, fail, the cross
# compiler cc, the sysroot, ompi (arm64 Open MPI's libraries) and
# build_dtrt DIR (libdtrt for aarch64, built under DIR).
skip() { echo "$me: SKIP: $* (tools/setup.sh cross installs it)"; exit 77; }
fail() { echo "$me: FAIL: $*" >&2; exit 1; }
sysroot=${DTC_CROSS_SYSROOT:-/opt/dtc-cross/aarch64-linux-gnu}
cc=aarch64-linux-gnu-gcc
lib=/usr/lib/aarch64-linux-gnu
ompi=$sysroot/usr/lib/aarch64-linux-gnu
command -v $cc >/dev/null || skip "no cross compiler $cc"
command -v qemu-aarch64 >/dev/null || skip "no qemu-aarch64 (qemu-user)"
for f in $lib/libopenblas.so $lib/libcjson.so $lib/libz.so /lib/ld-linux-aarch64.so.1 \
         "$ompi/openmpi/include/mpi.h"; do
  [ -e "$f" ] || skip "no $f"
done

build_dtrt() {
  cmake -S "$src" -B "$1" -DCMAKE_TOOLCHAIN_FILE="$src/cmake/aarch64-linux-gnu.cmake" \
        -DDTC_RUNTIME_ONLY=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDTC_CROSS_SYSROOT="$sysroot" \
        >"$1.log" 2>&1 &&
    cmake --build "$1" -j 2 >>"$1.log" 2>&1 ||
    { cat "$1.log"; fail "cannot build libdtrt for aarch64"; }
}
