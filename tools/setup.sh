#!/bin/sh
# setup.sh: install what is missing (Debian 12), build, then train the example
# model or run the tests.
# usage: tools/setup.sh train|test [BUILD_DIR]
set -eu
what=${1:-train}
top=$(cd "$(dirname "$0")/.." && pwd)
build=${2:-$top/build}

pkgs="build-essential cmake pkg-config flex bison llvm-16-dev libopenblas-dev
  libcmocka-dev libopenmpi-dev openmpi-bin libcjson-dev zlib1g-dev libglpk-dev
  dataset-fashion-mnist"
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

cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)"

case $what in
  train)
    "$build/examples/train_mlp" --epochs 3 ;;
  test)
    cd "$build" && ctest --output-on-failure -j "$(nproc)" ;;
  *)
    echo "usage: $0 train|test [BUILD_DIR]" >&2; exit 2 ;;
esac
