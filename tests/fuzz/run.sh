#!/bin/sh
# run.sh SOURCE_DIR BUILD_DIR [SECONDS]: the fuzz targets for a bounded time.
# Builds them with clang (libFuzzer, ASan, UBSan) in BUILD_DIR, then runs
# fuzz_frontend on the .dt seeds (tests/fuzz/corpus/dt, the examples, the
# golden sources) and fuzz_irparse on the .ir seeds (tests/fuzz/corpus/ir,
# the golden IR), SECONDS each (default 60; DTC_FUZZ_SECONDS overrides). A
# crash, a leak or a sanitizer report fails the test, and the input that
# caused it is left in BUILD_DIR. Exits 77 (skipped) without clang and its
# libFuzzer runtime (Debian's clang and libclang-rt-dev).
set -u
src=$1
build=$2
secs=${DTC_FUZZ_SECONDS:-${3:-60}}
cc=$(command -v clang-16 || command -v clang || true)
if [ -z "$cc" ] || ! printf 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }\n' |
    "$cc" -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null; then
  echo "fuzz: skipped: no clang with libFuzzer (Debian's clang, libclang-rt-dev)"
  exit 77
fi
mkdir -p "$build"
if ! CC=$cc cmake -S "$src" -B "$build" -DDTC_FUZZ=ON -DDTC_TESTS=OFF \
       -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
   ! cmake --build "$build" -j "$(nproc)" --target fuzz_frontend fuzz_irparse \
       >"$build/build.log" 2>&1; then
  tail -30 "$build/configure.log" "$build/build.log"
  echo "fuzz: the targets did not build"
  exit 1
fi
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds/dt" "$seeds/ir" "$build/work-dt" "$build/work-ir"
cp "$src"/tests/fuzz/corpus/dt/* "$src"/examples/*.dt "$src"/tests/golden/*.dt "$seeds/dt/"
cp "$src"/tests/fuzz/corpus/ir/* "$src"/tests/golden/*.ir "$seeds/ir/"
fail=0
for t in frontend:dt irparse:ir; do
  name=${t%%:*} kind=${t##*:}
  (cd "$build" && "./tests/fuzz/fuzz_$name" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 "work-$kind" "seeds/$kind") \
      >"$build/fuzz_$name.log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/fuzz_$name.log")
  if [ $rc -ne 0 ]; then
    tail -40 "$build/fuzz_$name.log"
    echo "fuzz_$name: FAILED (status $rc) after ${runs:-?} inputs"
    fail=1
  else
    echo "fuzz_$name: ${runs:-?} inputs in ${secs} s, nothing found"
  fi
done
exit $fail
