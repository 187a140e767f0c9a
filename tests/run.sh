#!/usr/bin/env bash
# The one test command: installs what is missing, runs every test, prints
# "N passed, N failed" on a line of its own and exits non-zero on any failure.
#   ./tests/run.sh                all tests: Bazel (unit, multi-process, Slurm, soak), the unit
#                                 tests and a multi-process test again under ASan+UBSan, the Python
#                                 library and the users' models again on today's torch from pip, the
#                                 Keras workers on TensorFlow from pip, the CMake build, the CUDA build against pip's LibTorch, the clang
#                                 thread-safety build and the fuzzers
#   ./tests/run.sh //server/...   a subset (Bazel target patterns only)
set -uo pipefail
cd "$(dirname "$0")/.."

./deploy/install-deps.sh || { echo "0 passed, 1 failed"; exit 1; }
# Today's torch, and TensorFlow with Keras, from pip (pinned, cached: a second run downloads
# nothing), each in a venv of its own, beside Debian's torch 1.13.
venv=
tf_venv=
if [ $# -eq 0 ]; then
  venv=$(./deploy/install-venv.sh torch | tail -n 1) || { echo "0 passed, 1 failed"; exit 1; }
  tf_venv=$(./deploy/install-venv.sh tensorflow | tail -n 1) || { echo "0 passed, 1 failed"; exit 1; }
fi
# Every Python module the checkout imports is there and installed by the scripts above.
/usr/bin/python3 tests/preflight.py ${venv:+--venv "$venv/bin/python"} ${tf_venv:+--tf_venv "$tf_venv/bin/python"} ||
  { echo "0 passed, 1 failed"; exit 1; }

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(//...)

log=$(mktemp)
trap 'rm -f "$log"' EXIT
passed=0
failed=0
count() { grep -cE "^//[^ ]+ +(\(cached\) )?($1)" "$log"; }
bazel_tests() {  # bazel_tests ARGS...: one `bazel test`; its counts in run_passed and run_failed, added to the totals
  local start=$SECONDS
  # A fixed disk cache keeps repeated runs on one machine incremental.
  bazel test --disk_cache="$HOME/.cache/omnilearn-bazel-disk" --keep_going "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "bazel test $*: $((SECONDS - start)) s"
  run_passed=$(count PASSED)
  run_failed=$(count 'FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE')
  # A build failure fails no test by name: count it so it cannot read as green.
  if [ "$rc" -ne 0 ] && [ "$run_failed" -eq 0 ]; then run_failed=1; fi
  passed=$((passed + run_passed))
  failed=$((failed + run_failed))
}

bazel_tests "${targets[@]}"

step() {  # step NAME COMMAND...: one more passed or failed entry, with its time
  local start=$SECONDS
  if "${@:2}"; then
    echo "$1 PASSED in $((SECONDS - start)) s"; passed=$((passed + 1))
  else
    echo "$1 FAILED in $((SECONDS - start)) s"; failed=$((failed + 1))
  fi
}

if [ $# -eq 0 ]; then
  # The unit tests and a multi-process test (a server under ASan, Python clients on an
  # instrumented worker core) again
  # under AddressSanitizer + UndefinedBehaviorSanitizer (LibTorch-linked tests excepted:
  # Debian's LibTorch is not instrumented).
  bazel_tests --config=asan -- //common/... //controller/... //server/... \
    //worker:session_test //tests:churn_test -//server/data:optimizer_torch_test
  echo "asan+ubsan: $run_passed passed, $run_failed failed"
  # The Python library's tests and the users' models (CNN, transformer, LSTM; sync and async;
  # torch.compile and bf16 autocast) again, on the pip venv's torch, protobuf and grpcio.
  bazel_tests --test_env=OMNILEARN_PYTHON="$venv/bin/python" -- //python:python_test //tests:users_models_test
  echo "torch from pip ($venv): $run_passed passed, $run_failed failed"
  # Keras workers (tagged manual: they need this venv) on TensorFlow and Keras from pip.
  bazel_tests --test_env=OMNILEARN_TF_PYTHON="$tf_venv/bin/python" -- //tests:keras_workers_test
  echo "tensorflow from pip ($tf_venv): $run_passed passed, $run_failed failed"
  # The C++ worker built and linked against the CUDA LibTorch inside pip's wheel (no GPU needed).
  step cuda_build_test ./tests/cuda_build_test.sh "$venv"
  # The CMake build (GPU hosts) against Debian's LibTorch, with a short training run.
  step cmake_build_test ./tests/cmake_build_test.sh
  # The C++ sources as .clang-format lays them out.
  step format_check ./tests/format_check.sh
  # The build refuses an edge up the server's layers (server/BUILD's package groups).
  step layering_check ./tests/layering_check.sh
  # clang-14 with -Werror=thread-safety, ASan, UBSan; each libFuzzer target for 60 s.
  step fuzz_test ./tests/fuzz_test.sh
fi
echo
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]  # a failed `bazel test` always counts at least one failure
