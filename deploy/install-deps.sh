#!/usr/bin/env bash
# Installs, with apt, exactly what building, running and testing OmniLearn need on Debian 12.
# Idempotent: packages already present are skipped; safe to re-run. Exits non-zero with a clear
# message when something cannot be installed.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap            # Bazel 4.2.3 (offline build)
  g++ cmake ninja-build      # compilers; CMake build for GPU hosts
  ccache                     # the test command's CMake builds of a fresh clone, cached
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev
  catch2
  libtorch-dev               # CPU LibTorch 1.13
  libopenblas0-pthread       # without it LibTorch falls back to reference BLAS (30x slower)
  libcivetweb-dev            # HTTP server for /metrics
  nlohmann-json3-dev         # JSON of safetensors headers (checkpoints, exports)
  python3-numpy              # the numpy safetensors reader in the tests and README
  python3-matplotlib         # bench/plot_scale.py
  python3-protobuf python3-torch  # the Python worker library (python/)
  python3-torchvision        # the ResNet-18 example and bench/peers.py --models=resnet18
  pybind11-dev python3-pybind11 python3-dev pkg-config  # its C++ worker core (omnilearn._core)
  python3-grpcio             # the Python tests' fake server, the stubs' generator
  python3-pytest python3-venv python3-pip python3-setuptools  # its tests and `pip install ./python`
  dataset-fashion-mnist      # the real data set (IDX .gz files)
  prometheus                 # promtool and a real Prometheus for the metrics tests
  iproute2                   # network namespaces for the separate-hosts test
  etcd-server                # the coordinator election (its tests start their own etcd)
  slurm-wlm munge            # the Slurm test: a three-node cluster on this machine
  systemd                    # systemd-analyze verify of the units
  python3-yaml               # the offline check of the Kubernetes manifests
  clang-14 libfuzzer-14-dev  # the thread-safety build and the fuzzers (tests/fuzz_test.sh)
  clang-format               # tests/format_check.sh
  python3 curl ca-certificates openssl
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
else
  SUDO=
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get update -qq; then
  echo "install-deps: apt-get update failed (is Debian's archive reachable?)" >&2
  exit 1
fi
if ! $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
  echo "install-deps: apt-get install failed for: ${missing[*]}" >&2
  exit 1
fi
echo "install-deps: done"
