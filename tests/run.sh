#!/usr/bin/env bash
# The test command: installs what is missing, runs a tier of the tests, prints each phase's
# time, then "N passed, N failed" on a line of its own, and exits non-zero on any failure.
#   ./tests/run.sh                the gate (what CI runs on every change): every unit test, the
#                                 unit tests again under ASan+UBSan, one multi-process test of
#                                 each main path (Bazel tests not tagged "full"), the Python
#                                 library on today's torch from pip, a Keras job on TensorFlow
#                                 from pip, the CUDA build against pip's LibTorch, the format
#                                 and the layering
#   ./tests/run.sh --all          the full tier: the gate, and every test tagged "full" (the
#                                 chaos, partition, soak, Slurm, peers and long jobs), the users'
#                                 models on pip's torch, every Keras mode, the CMake build and the
#                                 fuzzers
#   ./tests/run.sh //server/...   a subset (Bazel target patterns only)
# docs/testing.md says what each tier holds and why, and what each phase costs.
set -uo pipefail
cd "$(dirname "$0")/.."

tier=gate
targets=()
for arg in "$@"; do
  case "$arg" in
    --all) tier=full ;;
    --gate) tier=gate ;;
    //* | :*) tier=subset; targets+=("$arg") ;;
    *) echo "run.sh: '$arg' is not --all, --gate or a Bazel target pattern" >&2; exit 2 ;;
  esac
done

passed=0
failed=0
phases=()
phase_start=$SECONDS
# phase_done NAME: the time since the last phase ended, under NAME, in the closing table.
phase_done() {
  phases+=("$(printf '%-34s %5d s' "$1" $((SECONDS - phase_start)))")
  echo "== phase $1: $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}
set_up_failed() { echo "$1"; echo; echo "0 passed, 1 failed"; exit 1; }

./deploy/install-deps.sh || set_up_failed "install-deps failed"
# Today's torch, and TensorFlow with Keras, from pip (pinned, cached: a second run downloads
# nothing), each in a venv of its own, beside Debian's torch 1.13.
venv=
tf_venv=
if [ "$tier" != subset ]; then
  venv=$(./deploy/install-venv.sh torch | tail -n 1) || set_up_failed "the torch venv failed"
  tf_venv=$(./deploy/install-venv.sh tensorflow | tail -n 1) || set_up_failed "the TensorFlow venv failed"
fi
# Every Python module the checkout imports is there and installed by the scripts above.
/usr/bin/python3 tests/preflight.py ${venv:+--venv "$venv/bin/python"} ${tf_venv:+--tf_venv "$tf_venv/bin/python"} ||
  set_up_failed "preflight failed"
phase_done "set-up (apt, venvs, preflight)"
# The venvs' wheel folder: the Python tests pip-install the package from it as a user does (with
# pip's build isolation), offline.
wheels=()
[ "$tier" != subset ] && wheels=(--test_env=OMNILEARN_WHEELS="${OMNILEARN_WHEELS:-$HOME/.cache/omnilearn-wheels}")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
count() { grep -cE "^//[^ ]+ +(\(cached\) )?($1)" "$log"; }
bazel_tests() {  # bazel_tests ARGS...: one `bazel test`; its counts in run_passed and run_failed, added to the totals
  # A fixed disk cache keeps repeated runs on one machine incremental.
  bazel test --disk_cache="$HOME/.cache/omnilearn-bazel-disk" --keep_going "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  run_passed=$(count PASSED)
  run_failed=$(count 'FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE')
  # A build failure fails no test by name: count it so it cannot read as green.
  if [ "$rc" -ne 0 ] && [ "$run_failed" -eq 0 ]; then run_failed=1; fi
  passed=$((passed + run_passed))
  failed=$((failed + run_failed))
}
step() {  # step NAME COMMAND...: one more passed or failed entry, with its time
  local start=$SECONDS
  if "${@:2}"; then
    echo "$1 PASSED in $((SECONDS - start)) s"; passed=$((passed + 1))
  else
    echo "$1 FAILED in $((SECONDS - start)) s"; failed=$((failed + 1))
  fi
}

case "$tier" in
  subset) bazel_tests "${targets[@]}"; phase_done "bazel test ${targets[*]}" ;;
  gate) bazel_tests "${wheels[@]}" --test_tag_filters=-full -- //...; phase_done "bazel test (gate: not tagged full)" ;;
  full) bazel_tests "${wheels[@]}" -- //...; phase_done "bazel test //... (all)" ;;
esac

if [ "$tier" != subset ]; then
  # The unit tests and a multi-process test (a server under ASan, Python clients on an
  # instrumented worker core) again under AddressSanitizer + UndefinedBehaviorSanitizer
  # (LibTorch-linked tests excepted: Debian's LibTorch is not instrumented).
  bazel_tests --config=asan -- //common/... //controller/... //server/... \
    //worker:session_test //tests:churn_test -//server/data:optimizer_torch_test
  echo "asan+ubsan: $run_passed passed, $run_failed failed"
  phase_done "asan+ubsan"
  # The Python library's tests (and in the full tier the users' models: CNN, transformer,
  # LSTM; sync and async; torch.compile and bf16 autocast) again, on the pip venv's torch,
  # protobuf and grpcio.
  pip_torch=(//python:python_test)
  [ "$tier" = full ] && pip_torch+=(//tests:users_models_test)
  bazel_tests "${wheels[@]}" --test_env=OMNILEARN_PYTHON="$venv/bin/python" -- "${pip_torch[@]}"
  echo "torch from pip ($venv): $run_passed passed, $run_failed failed"
  # The same tests as a user runs them: plain pytest in the checkout's python/ (pyproject.toml's
  # settings), on Debian's torch and the core Bazel built above.
  step pytest_in_checkout env -C python PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 -m pytest -q -p no:cacheprovider
  phase_done "torch from pip"
  # Keras workers (tagged manual: they need this venv) on TensorFlow and Keras from pip: a sync
  # job in the gate, every mode and the chaos schedule on local steps in the full tier.
  keras=(//tests:keras_quick_test)
  [ "$tier" = full ] && keras=(//tests:keras_workers_test //tests:chaos_local_keras_test)
  bazel_tests --test_env=OMNILEARN_TF_PYTHON="$tf_venv/bin/python" -- "${keras[@]}"
  echo "tensorflow from pip ($tf_venv): $run_passed passed, $run_failed failed"
  phase_done "tensorflow from pip"
  # The C++ worker built and linked against the CUDA LibTorch inside pip's wheel (no GPU needed).
  step cuda_build_test ./tests/cuda_build_test.sh "$venv"
  phase_done "cuda build"
  # The C++ sources as .clang-format lays them out; the build refuses an edge up the
  # server's layers (server/BUILD's package groups).
  step format_check ./tests/format_check.sh
  step layering_check ./tests/layering_check.sh
  step sources_check ./tests/sources_check.sh
  phase_done "format, layering"
fi
if [ "$tier" = full ]; then
  # The CMake build (GPU hosts) against Debian's LibTorch, with a short training run.
  step cmake_build_test ./tests/cmake_build_test.sh
  phase_done "cmake build"
  # clang-14 with -Werror=thread-safety, ASan, UBSan; each libFuzzer target for 60 s.
  step fuzz_test ./tests/fuzz_test.sh
  phase_done "fuzzers"
fi
echo
echo "tier $tier, phases:"
printf '  %s\n' "${phases[@]}"
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]  # a failed `bazel test` always counts at least one failure
