#!/bin/sh
# run.sh SOURCE_DIR BUILD_DIR [SECONDS]: the fuzz targets for a bounded time.
# Builds them with clang (libFuzzer, ASan, UBSan) in BUILD_DIR, then runs
# fuzz_frontend on the .dt seeds (tests/fuzz/corpus/dt, the examples, the
# golden sources), fuzz_irparse on the .ir seeds (tests/fuzz/corpus/ir,
# the golden IR) and fuzz_criteo on lines of Criteo's text format written
# here, SECONDS each (default 60; DTC_FUZZ_SECONDS overrides). A crash, a leak or a sanitizer report fails the test, and the input that
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
   ! cmake --build "$build" -j "$(nproc)" --target fuzz_frontend fuzz_irparse fuzz_criteo \
       >"$build/build.log" 2>&1; then
  tail -30 "$build/configure.log" "$build/build.log"
  echo "fuzz: the targets did not build"
  exit 1
fi
seeds=$build/seeds
rm -rf "$seeds"
mkdir -p "$seeds/dt" "$seeds/ir" "$seeds/criteo" "$build/work-dt" "$build/work-ir" \
  "$build/work-criteo"
cp "$src"/tests/fuzz/corpus/dt/* "$src"/examples/*.dt "$src"/tests/golden/*.dt "$seeds/dt/"
cp "$src"/tests/fuzz/corpus/ir/* "$src"/tests/golden/*.ir "$seeds/ir/"
# Criteo's lines: every field given; most missing, upper-case hex, "\r\n"
printf '1\t5\t-1\t0\t12\t3\t44\t1\t0\t9\t2\t7\t1\t300\t68fd1e64\t80e26c9b\tfb936136'\
'\t7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504'\
'\tb2cb9c98\t37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672'\
'\tf54016b9\t21ddcdc9\tb1252a9d\t07b5194c\t0b153874\t3a171ecb\tc5c50484'\
'\te8b83407\t9727dd16\n'\
'0\t\t2\t\t\t\t\t\t\t\t\t\t\t\t05DB9164'\
'\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\r\n' >"$seeds/criteo/lines.txt"
fail=0
for t in frontend:dt irparse:ir criteo:criteo; do
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
