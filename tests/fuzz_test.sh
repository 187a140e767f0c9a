#!/usr/bin/env bash
# A clang-14 build of the server and the libFuzzer targets with AddressSanitizer,
# UndefinedBehaviorSanitizer and -Werror=thread-safety (clang checks the ABSL_GUARDED_BY /
# ABSL_EXCLUSIVE_LOCKS_REQUIRED annotations that GCC ignores), then each fuzz target runs
# for FUZZ_SECONDS (default 60), as many at a time as there are cores, from the committed
# seed corpus (fuzz/corpus/). Fails on a thread-safety warning, a crash, a leak or a
# sanitizer report. Run by tests/run.sh, outside Bazel.   tests/fuzz_test.sh [BUILD_DIR]   (default build/clang, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/clang}
SECONDS_EACH=${FUZZ_SECONDS:-60}
mkdir -p "$(dirname "$BUILD")"
FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link -fno-omit-frame-pointer"
FLAGS="$FLAGS -g -O1 -Wthread-safety -Werror=thread-safety"
CC=clang-14 CXX=clang++-14 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=None -DOMNILEARN_WORKER=OFF \
  -DOMNILEARN_FUZZ=ON -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  > "$BUILD.configure.log" 2>&1 || { tail -20 "$BUILD.configure.log"; echo "FAIL: clang configure"; exit 1; }
if ! ninja -C "$BUILD" -j"$(nproc)" omnilearn_server codec_fuzzer safetensors_fuzzer service_fuzzer shard_fuzzer \
    > "$BUILD.build.log" 2>&1; then
  grep -E "error|warning" "$BUILD.build.log" | head -40
  echo "FAIL: the clang build (thread-safety analysis or compile error)"
  exit 1
fi
echo "clang-14 build with -Werror=thread-safety, ASan and UBSan: clean"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
REPORT=${FUZZ_REPORT:-$BUILD/fuzz-report.txt}
: > "$REPORT"
fuzz() {  # fuzz TARGET: one libFuzzer run from a copy of the seed corpus; its line in $BUILD/TARGET.line
  local target=$1 corpus log=$BUILD/$1.fuzz.log runs cov ft failed=0
  corpus=$(mktemp -d)
  cp fuzz/corpus/"$target"/* "$corpus"/
  if timeout $((SECONDS_EACH + 120)) "$BUILD/fuzz/${target}_fuzzer" "$corpus" -max_total_time="$SECONDS_EACH" \
      -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$BUILD/$target-" \
      > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1)
    echo "$target: ${runs:-?} executions in ${SECONDS_EACH} s, $cov, $ft, corpus $(ls "$corpus" | wc -l) inputs" \
      > "$BUILD/$target.line"
  else
    { grep -E "ERROR|SUMMARY|==[0-9]+==|runtime error|deadly signal" "$log" | head -20
      ls "$BUILD/$target"-* 2>/dev/null | head  # the input that failed: rerun the fuzzer on it
      echo "FAIL: $target fuzzer (log: $log)"; } > "$BUILD/$target.line"
    failed=1
  fi
  rm -rf "$corpus"
  return "$failed"
}
# Each target is one single-threaded process: as many at a time as there are cores.
targets=(codec safetensors service shard)
jobs=$(nproc)
status=0
for ((i = 0; i < ${#targets[@]}; i += jobs)); do
  pids=()
  for target in "${targets[@]:i:jobs}"; do
    fuzz "$target" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
done
for target in "${targets[@]}"; do cat "$BUILD/$target.line"; done | tee -a "$REPORT"
[ "$status" -eq 0 ] && echo "PASS"
exit "$status"
