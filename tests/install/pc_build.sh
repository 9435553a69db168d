#!/bin/sh
# pc_build.sh BUILD SRC WORK: the build tree's dtrt.pc, before any install:
# every folder it names exists, dtrt.h is in its include folder, and the
# pkg-config Makefile project (tests/install/Makefile) builds against it
# with the build's dtc and trains. DTC_INSTALL_LDFLAGS: as in install.sh.
set -u
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
export PKG_CONFIG_PATH="$build"
fail=0
for v in prefix libdir includedir; do
  dir=$(pkg-config --variable=$v dtrt)
  [ -d "$dir" ] || { echo "FAIL dtrt.pc: $v $dir is not a folder"; fail=1; }
done
inc=$(pkg-config --variable=includedir dtrt)
[ -f "$inc/dtrt.h" ] || { echo "FAIL dtrt.pc: no dtrt.h in $inc"; fail=1; }
lib=$(pkg-config --variable=libdir dtrt)
[ -f "$lib/libdtrt.a" ] || [ -f "$lib/libdtrt.so" ] ||
  { echo "FAIL dtrt.pc: no libdtrt in $lib"; fail=1; }
make -C "$work" -f "$src/Makefile" SRC="$src" BLOBS="$src/../e2e/blobs.dt" \
  DTC="$build/dtc" LDFLAGS="${DTC_INSTALL_LDFLAGS:-}" >"$work/make.log" 2>&1 ||
  { echo "FAIL the Makefile project does not build against the build tree"; cat "$work/make.log"; exit 1; }
"$work/app" >"$work/app.out" 2>&1
echo 'blobs: batch 32, 20 steps, loss fell' | diff -u - "$work/app.out" || fail=1
[ $fail -eq 0 ] && echo "pc_build: the build tree's dtrt.pc builds and trains"
exit $fail
