#!/bin/sh
# install.sh BUILD SRC WORK LIBDIR MANDIR DOCDIR: installs BUILD to a
# temporary prefix and checks what an outside project gets from it: the man
# page dtc(1) (rendered by groff or man when there is one) and the docs; a
# CMake project (tests/install/project: find_package(dtc), dtc_add_model of
# two models into one target, one with --cluster=FILE and one named unlike
# its file, and of the first again with another batch into another target)
# builds, a second build runs dtc no more, and both apps train; a NAME unlike
# the model's is an error at configure time; a Makefile project using
# pkg-config (tests/install/Makefile) builds and trains. LIBDIR, MANDIR and
# DOCDIR are the install dirs relative to the prefix. The prefix is removed.
# DTC_INSTALL_LDFLAGS: link flags the outside projects add (a sanitized
# build's libdtrt needs the sanitizers' runtimes).
set -u
build=$1 src=$2 work=$3 libdir=$4 mandir=$5 docdir=$6
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
rm -rf "$work"
mkdir -p "$work"
fail=0
# check WHAT [LOG]: the last command's status was 0, or WHAT failed (and LOG
# is shown)
check() {
  [ $? -eq 0 ] && return 0
  echo "FAIL $1"
  [ $# -lt 2 ] || head -c 4000 "$2"
  fail=1
  return 1
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1
check "cmake --install" "$work/install.log" || exit 1
for f in bin/dtc bin/dtc-ckpt bin/dtc-elastic "$libdir/libdtrt.a" include/dtrt.h "$libdir/pkgconfig/dtrt.pc" \
         "$libdir/cmake/dtc/dtcConfig.cmake" "$mandir/man1/dtc.1" "$mandir/man1/dtc-ckpt.1"; do
  [ -f "$prefix/$f" ]; check "installed $f"
done
for f in "$src"/../../docs/*.md; do
  doc=$docdir/${f##*/}
  [ -f "$prefix/$doc" ]; check "installed $doc"
done

# the man page: a man(7) page of dtc(1) that renders without warnings and
# lists every option of dtc --help
man1=$prefix/$mandir/man1/dtc.1
head -n 5 "$man1" | grep -q '^\.TH DTC 1 '; check "dtc.1 starts with .TH DTC 1"
version=$("$prefix/bin/dtc" --version)
grep -q "^\.TH DTC 1 .* \"$version\"" "$man1"; check "dtc.1 is of $version" "$man1"
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -P-cbou "$man1" >"$work/dtc.txt" 2>"$work/groff.err" &&
    [ ! -s "$work/groff.err" ]
  check "groff renders dtc.1 without warnings" "$work/groff.err"
elif command -v man >/dev/null; then
  MANWIDTH=80 MANPAGER=cat man -l "$man1" 2>/dev/null | sed 's/.\x08//g' >"$work/dtc.txt"
  [ -s "$work/dtc.txt" ]; check "man -l dtc.1"
fi
if [ -s "$work/dtc.txt" ]; then
  for o in $("$prefix/bin/dtc" --help | grep -o '^  --*[a-zA-Z][a-zA-Z-]*' ); do
    grep -q -- "$o" "$work/dtc.txt"; check "dtc.1 documents $o"
  done
fi
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -P-cbou "$prefix/$mandir/man1/dtc-ckpt.1" >/dev/null 2>"$work/groff.err" &&
    [ ! -s "$work/groff.err" ]
  check "groff renders dtc-ckpt.1 without warnings" "$work/groff.err"
fi
"$prefix/bin/dtc-ckpt" --help | grep -q "^usage: dtc-ckpt list FILE"; check "dtc-ckpt --help"

# the CMake project
cmake -S "$src/project" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_EXE_LINKER_FLAGS="${DTC_INSTALL_LDFLAGS:-}" \
      -DBLOBS="$src/../e2e/blobs.dt" >"$work/cmake.log" 2>&1 &&
  cmake --build "$work/cmake" >>"$work/cmake.log" 2>&1
check "the CMake project builds" "$work/cmake.log"
cmake --build "$work/cmake" >"$work/rebuild.log" 2>&1 && ! grep -q 'dtc .*\.dt$' "$work/rebuild.log"
check "a second build of the CMake project runs dtc again" "$work/rebuild.log"
"$work/cmake/app" >"$work/app.out" 2>&1
printf 'blobs: batch 32, 20 steps, loss fell\nnet: batch 16, 20 steps, loss fell\n' |
  diff -u - "$work/app.out"; check "app" "$work/cmake.log"
"$work/cmake/app8" >"$work/app8.out" 2>&1
echo 'blobs: batch 8, 20 steps, loss fell' | diff -u - "$work/app8.out"; check "app8"

# NAME unlike the model's name: a configure error naming both
mkdir -p "$work/badname"
cat >"$work/badname/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(badname LANGUAGES C)
find_package(dtc REQUIRED)
add_executable(app $src/app.c)
dtc_add_model(app $src/project/linear.dt NAME linear)
CM
cmake -S "$work/badname" -B "$work/badname/build" -DCMAKE_PREFIX_PATH="$prefix" \
      >"$work/badname.log" 2>&1
# (CMake breaks the message's lines)
[ $? -ne 0 ] && tr -s ' \n' '  ' <"$work/badname.log" |
  grep -q "linear.dt declares model 'net', not 'linear'"
check "NAME linear for model net" "$work/badname.log"

# the pkg-config project
mkdir -p "$work/make"
PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" make -C "$work/make" -f "$src/Makefile" \
  SRC="$src" BLOBS="$src/../e2e/blobs.dt" DTC="$prefix/bin/dtc" \
  LDFLAGS="${DTC_INSTALL_LDFLAGS:-}" >"$work/make.log" 2>&1
check "the Makefile project builds" "$work/make.log"
"$work/make/app" >"$work/make.out" 2>&1
echo 'blobs: batch 32, 20 steps, loss fell' | diff -u - "$work/make.out"; check "make app"

[ $fail -eq 0 ] && echo "install: the CMake and pkg-config projects build and train"
exit $fail
