#!/usr/bin/env bash
# The one test command: installs what is missing, runs every test, prints
# "N passed, N failed" on a line of its own and exits non-zero on any failure.
#   ./tests/run.sh            all tests
#   ./tests/run.sh //server/...   a subset (Bazel target patterns; skips the CMake build)
set -uo pipefail
cd "$(dirname "$0")/.."

./deploy/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(//...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# A fixed disk cache keeps repeated runs on one machine incremental.
bazel test --disk_cache="$HOME/.cache/omnilearn-bazel-disk" --keep_going "${targets[@]}" 2>&1 | tee "$log"
bazel_rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)' "$log")
# A build failure fails no test by name: count it so it cannot read as green.
if [ "$bazel_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi

# The CMake build (GPU hosts) against Debian's LibTorch, with a short training run.
if [ $# -eq 0 ]; then
  if ./tests/cmake_build_test.sh; then
    echo "cmake_build_test PASSED"; passed=$((passed + 1))
  else
    echo "cmake_build_test FAILED"; failed=$((failed + 1))
  fi
fi
echo
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ] && [ "$bazel_rc" -eq 0 ]
