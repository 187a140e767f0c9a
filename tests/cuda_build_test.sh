#!/usr/bin/env bash
# The CUDA build in CI, without a GPU: the C++ worker (CMake) compiled and linked against the
# CUDA LibTorch inside pip's torch wheel (deploy/requirements-torch.txt), with this machine's
# CUDA toolkit (nvcc); then `--check_device=cuda` says there is no GPU and `--check_device=cpu`
# works. Run by tests/run.sh, outside Bazel.
#   tests/cuda_build_test.sh VENV [BUILD_DIR]   (VENV from deploy/install-venv.sh torch;
#                                               BUILD_DIR default build/cuda, git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:?usage: $0 VENV [BUILD_DIR]}
BUILD=${2:-build/cuda}
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  fail "no nvcc: the CUDA toolkit is needed to configure against a CUDA LibTorch (docs/gpu.md)"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TORCH=$SITE/torch
"$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else "pip torch is not a CUDA build")'
# Debian's libtorch-dev would shadow the wheel (its Torch and Caffe2 configs, /usr/lib's
# libraries): every place CMake looks is pointed at the wheel. The wheel's CUDA libraries
# (NCCL, cuBLAS, ...) come from its nvidia-* packages, newer than the toolkit's: linked there.
nvidia_libs=$(find "$SITE/nvidia" -maxdepth 3 -type d -name lib | sort | paste -sd:)
link_flags="-Wl,-rpath-link,$TORCH/lib:$nvidia_libs -Wl,-rpath,$TORCH/lib:$nvidia_libs"
mkdir -p "$(dirname "$BUILD")"
start=$(date +%s)
# Unoptimized, without debug info: the point is that it compiles and links, and -O0 is fastest.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCMAKE_PREFIX_PATH="$TORCH/share/cmake" -DTorch_DIR="$TORCH/share/cmake/Torch" \
  -DCaffe2_DIR="$TORCH/share/cmake/Caffe2" -DCMAKE_LIBRARY_PATH="$TORCH/lib" \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$NVCC")")" \
  -DCMAKE_EXE_LINKER_FLAGS="$link_flags" -DCMAKE_SHARED_LINKER_FLAGS="$link_flags" \
  > "$BUILD.configure.log" 2>&1 || { tail -30 "$BUILD.configure.log"; fail "cmake configure against pip's CUDA LibTorch"; }
grep -q "CUDA" "$BUILD.configure.log" || fail "the configure did not find CUDA"
ninja -C "$BUILD" -j"$(nproc)" omnilearn_worker > "$BUILD.build.log" 2>&1 ||
  { grep -B2 -A8 -m3 "error" "$BUILD.build.log" | head -60; fail "the worker did not build against pip's CUDA LibTorch"; }
echo "cuda build: omnilearn_worker built against $VENV's torch $("$VENV/bin/python" -c \
  'import torch; print(torch.__version__)') in $(( $(date +%s) - start )) s"
WORKER=$BUILD/worker/omnilearn_worker
# It links the wheel's libraries, not Debian's. (ldd's output is read whole first: `ldd | grep -q`
# fails under pipefail whenever grep's early exit kills ldd with SIGPIPE.)
libs=$(ldd "$WORKER")
grep -q "libtorch_cuda.so => $TORCH/lib" <<< "$libs" || { grep torch <<< "$libs"; fail "not linked to the wheel's libtorch_cuda"; }
grep -q "not found" <<< "$libs" && { grep "not found" <<< "$libs"; fail "unresolved libraries"; }
out=$("$WORKER" --check_device=cuda 2>&1) && fail "--check_device=cuda succeeded on a machine without a GPU: $out"
echo "$out" | grep -q "LibTorch with CUDA: yes; CUDA devices visible: 0" || fail "--check_device=cuda: $out"
echo "cuda build: --check_device=cuda says: $(echo "$out" | tr '\n' ' ')"
out=$("$WORKER" --check_device=cpu 2>&1) || fail "--check_device=cpu failed: $out"
echo "PASS"
