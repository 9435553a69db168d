#!/bin/sh
# setup.sh: install what is missing (Debian 12), build, then train the example
# model or run the tests. `cross` also installs what building and running
# aarch64 code needs (cross GCC, qemu-user, arm64 OpenBLAS, cJSON and zlib,
# arm64 Open MPI unpacked under /opt/dtc-cross) and runs the cross tests.
# usage: tools/setup.sh train|test|cross [BUILD_DIR]
set -eu
what=${1:-train}
top=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$top/build}

pkgs="build-essential cmake pkg-config flex bison llvm-16-dev libopenblas-dev
  libcmocka-dev libopenmpi-dev openmpi-bin libcjson-dev zlib1g-dev libglpk-dev
  dataset-fashion-mnist iproute2"
# the tests also run the fuzz targets for a bounded time (tests/fuzz/run.sh),
# render the manual page (tests/install/install.sh) and compare training
# with PyTorch (Debian's python3-torch, under /usr/bin/python3)
[ "$what" = test ] && pkgs="$pkgs clang libclang-rt-dev groff-base python3-torch"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "installing:$missing"
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
fi

# cross: arm64 multiarch packages (dpkg --add-architecture arm64) and Debian's
# arm64 Open MPI, which cannot be installed beside the host's (libmunge2 is not
# multiarch), so its libraries are unpacked into a directory of their own.
if [ "$what" = cross ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  sysroot=${DTC_CROSS_SYSROOT:-/opt/dtc-cross/aarch64-linux-gnu}
  cross="gcc-aarch64-linux-gnu qemu-user libc6:arm64 libopenblas-dev:arm64 libcjson-dev:arm64
    zlib1g-dev:arm64"
  mpi="libopenmpi3 libopenmpi-dev libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1"
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
    $sudo apt-get update -qq
  fi
  missing=""
  for p in $cross; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
  done
  if [ -n "$missing" ]; then
    echo "installing:$missing"
    $sudo apt-get update -qq
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing
  fi
  if [ ! -e "$sysroot/usr/lib/aarch64-linux-gnu/openmpi/include/mpi.h" ]; then
    echo "unpacking arm64 Open MPI into $sysroot"
    debs=$(mktemp -d)
    chmod 777 "$debs"   # apt downloads as the _apt user
    # shellcheck disable=SC2046
    (cd "$debs" && apt-get download -qq $(for p in $mpi; do printf '%s:arm64 ' "$p"; done))
    $sudo mkdir -p "$sysroot"
    for f in "$debs"/*.deb; do $sudo dpkg-deb -x "$f" "$sysroot"; done
    rm -rf "$debs"
  fi
fi

cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)"

case $what in
  train)
    "$build/examples/train_mlp" --epochs 3 ;;
  test)
    cd "$build" && ctest --output-on-failure -j "$(nproc)" ;;
  cross)
    cd "$build" && ctest --output-on-failure -R '^cross_' ;;
  *)
    echo "usage: $0 train|test|cross [BUILD_DIR]" >&2; exit 2 ;;
esac
