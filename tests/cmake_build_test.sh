#!/usr/bin/env bash
# The CMake build (for GPU hosts without Bazel), built here against Debian's LibTorch so
# it cannot rot: configure, build, then a server and two workers from it train a few
# iterations and the worker's /metrics answers. Run by tests/run.sh, outside Bazel.
#   tests/cmake_build_test.sh [BUILD_DIR]    (default build/cmake, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/cmake}
mkdir -p "$(dirname "$BUILD")"

# A LibTorch of the pre-C++11 ABI is refused at configure time, with the reason.
FAKE=$(mktemp -d)
cat > "$FAKE/TorchConfig.cmake" <<'EOF2'
set(Torch_FOUND TRUE)
set(TORCH_LIBRARIES "")
set(TORCH_INCLUDE_DIRS "")
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")
EOF2
if cmake -S . -B "$FAKE/build" -G Ninja -DTorch_DIR="$FAKE" > "$FAKE/log" 2>&1; then
  echo "FAIL: a pre-C++11-ABI LibTorch was accepted"; exit 1
fi
grep -q "built with the pre-C++11 ABI" "$FAKE/log" || { tail -20 "$FAKE/log"; echo "FAIL: no clear ABI refusal"; exit 1; }
echo "cmake: a pre-C++11-ABI LibTorch is refused at configure time"
rm -rf "$FAKE"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$BUILD.configure.log" 2>&1 ||
  { tail -20 "$BUILD.configure.log"; echo "FAIL: cmake configure"; exit 1; }
ninja -C "$BUILD" -j"$(nproc)" > "$BUILD.build.log" 2>&1 || { grep -A5 error "$BUILD.build.log" | head -40; echo "FAIL: build"; exit 1; }

export TEST_SRCDIR=$PWD/.cmake-runfiles TEST_TMPDIR
TEST_TMPDIR=$(mktemp -d)
mkdir -p "$TEST_SRCDIR/omnilearn/server" "$TEST_SRCDIR/omnilearn/worker"
ln -sf "$PWD/$BUILD/server/omnilearn_server" "$TEST_SRCDIR/omnilearn/server/"
ln -sf "$PWD/$BUILD/worker/omnilearn_worker" "$TEST_SRCDIR/omnilearn/worker/"
source tests/e2e_lib.sh
trap 'stop_all; rm -rf "$TEST_SRCDIR" "$TEST_TMPDIR"' EXIT
WORKER_PIDS=()
start_server cmake --num_workers=2 --global_batch=32
MP=$(free_port)
start_worker w0 "$WORK/w0.log" --epochs=0 --max_iterations=30 --metrics_port="$MP" --metrics_bind=127.0.0.1
# The job takes well under a second once both workers are in: w0 is scraped before w1
# starts, while its join waits at the start barrier for the second worker (--num_workers=2).
wait_for_line "$WORK/w0.log" "joining the server" 300 || { cat "$WORK/w0.log"; fail "w0 did not start"; }
scraped=false
for _ in $(seq 50); do  # the endpoint may not be up yet: bounded, about 10 s
  if curl -sf --max-time 5 "http://127.0.0.1:$MP/metrics" | grep -q '^omnilearn_trainer_iterations_total'; then
    scraped=true
    break
  fi
  sleep 0.2
done
$scraped || fail "the CMake-built worker serves no metrics"
start_worker w1 "$WORK/w1.log" --epochs=0 --max_iterations=30 --slowdown=2
wait_workers || { tail -n 5 "$WORK"/w*.log; fail "a CMake-built worker failed"; }
grep -q "it=5 " "$WORK/w0.log" || { cat "$WORK/w0.log"; fail "the CMake-built worker did not train"; }
stop_server
[ "$(json "sum(w['iterations'] for w in s['workers'])")" = 60 ] || fail "workers did not finish"
echo "cmake build: server and workers trained; batches $(json "[w['final_batch'] for w in s['workers']]")"
echo "PASS"
