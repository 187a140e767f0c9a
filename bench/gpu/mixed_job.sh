#!/bin/bash
# Builds the server and the worker with CMake against the CUDA PyTorch of this host and runs
# three 2-epoch Fashion-MNIST jobs (sync, global batch 1024): one CUDA worker + two CPU workers,
# three CPU workers, the CUDA worker alone. Logs and summaries go to $OUT (default
# /tmp/omnilearn-gpu). Offline hosts: DEBS_DIR holds Debian 12 .debs of gRPC, protobuf, Abseil,
# civetweb, re2, c-ares, zlib and OpenSSL (apt-get download), unpacked into DEPS_PREFIX.
# DATA_DIR: the Fashion-MNIST .gz files. See docs/gpu.md.
set -uo pipefail  # a failed configure fails its pipe into tail
OUT=${OUT:-/tmp/omnilearn-gpu}; mkdir -p $OUT; LOGS=$(mktemp -d); exec > >(tee $OUT/log.txt) 2>&1
echo "== machine"; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; head -2 /etc/os-release; nproc; g++ --version | head -1; cmake --version | head -1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch.compiled_with_cxx11_abi(), torch.cuda.get_arch_list())'
D=${DEPS_PREFIX:-/opt/deps}; mkdir -p $D; for f in ${DEBS_DIR:-.gpu/debs}/*.deb; do [ -e "$f" ] && dpkg-deb -x $f $D; done
export LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu PATH=$D/usr/bin:$PATH LD_LIBRARY_PATH=$D/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
TP=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
TL=$(python3 -c 'import torch,os; print(os.path.join(os.path.dirname(torch.__file__),"lib"))')
export LD_LIBRARY_PATH=$TL:$LD_LIBRARY_PATH
echo "== configure"; t0=$(date +%s)
PB=()  # protobuf from the unpacked .debs, when there are any
[ -x $D/usr/bin/protoc ] && PB=(-DProtobuf_PROTOC_EXECUTABLE=$D/usr/bin/protoc -DProtobuf_INCLUDE_DIR=$D/usr/include
  -DProtobuf_LIBRARY=$D/usr/lib/x86_64-linux-gnu/libprotobuf.so)
cmake -S . -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TP;$D/usr" "${PB[@]}" 2>&1 | tail -25 || exit 1
echo "== build"; ninja -C build/cuda omnilearn_server omnilearn_worker 2>&1 | tail -15
echo "build seconds $(( $(date +%s) - t0 ))"
S=build/cuda/server/omnilearn_server; W=build/cuda/worker/omnilearn_worker
[ -x $W ] || exit 1
$W --check_device=cuda; echo "check_device rc $?"
DATA=${DATA_DIR:-/usr/share/datasets/fashion-mnist}
run_job() {  # $1 label, $2 port, then worker specs "name:device:threads"
  local label=$1 port=$2; shift 2
  timeout 240 $S --bind=127.0.0.1 --port=$port --num_workers=$# --mode=sync --global_batch=1024 --max_batch=1024 \
    --adjust_every=5 --exit_when_done --metrics_port=0 --summary_json=$OUT/$label.json > $LOGS/$label-server.log 2>&1 &
  local sp=$!; sleep 2; local pids=()
  for spec in "$@"; do IFS=: read n dev th <<< "$spec"
    timeout 230 $W --server=127.0.0.1:$port --name=$n --device=$dev --threads=$th --model=cnn --epochs=2 \
      --evaluate --data_dir=$DATA --connect_timeout=60 > $LOGS/$label-$n.log 2>&1 & pids+=($!); done
  for p in "${pids[@]}"; do wait $p; echo "$label worker rc $?"; done
  wait $sp; echo "$label server rc $?"
}
echo "== mixed: gpu0 + cpu0 + cpu1"; t0=$(date +%s); run_job mixed 50071 gpu0:cuda:1 cpu0:cpu:4 cpu1:cpu:4; echo "mixed seconds $(( $(date +%s) - t0 ))"
echo "== cpu only: cpu0 + cpu1 + cpu2"; t0=$(date +%s); run_job cpuonly 50072 cpu0:cpu:4 cpu1:cpu:4 cpu2:cpu:4; echo "cpuonly seconds $(( $(date +%s) - t0 ))"
echo "== gpu only: gpu0"; t0=$(date +%s); run_job gpuonly 50073 gpu0:cuda:1; echo "gpuonly seconds $(( $(date +%s) - t0 ))"
for f in $LOGS/*.log; do echo "--- $f"; grep -v "it=[0-9]*0 " $f | tail -12; done
cp $LOGS/mixed-gpu0.log $LOGS/mixed-server.log $OUT/
