#!/usr/bin/env bash
# bench/revert_cluster.sh (root, iproute2; bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker first)
# The controller's revert on the emulated cluster (network namespaces, 1 Gbit/s links) with a
# loaded host: a server host and two worker hosts; the fast worker's device 3x slower for three
# short bursts; a busy loop beside the job the whole time. One run with the revert, one without.
set -uo pipefail
cd "$(dirname "$0")/.."
C=tests/cluster.sh; P=rv$$
BIN=bazel-bin
trap '$C down $P >/dev/null 2>&1' EXIT
$C up $P ps=1gbit fast=1gbit slow=1gbit > /tmp/revert_demo_hosts.txt || exit 1
PS=$($C addr $P ps)
FAST='0@2:3:0.05,0.15@2:9:0.05,0.1516@2:3:0.05,0.25@2:9:0.05,0.2516@2:3:0.05,0.35@2:9:0.05,0.3516@2:3:0.05'
for revert in true false; do
  HOGS=()
  for i in 1; do python3 -c 'while True: pass' & HOGS+=($!); done
  start=$(date +%s.%N)
  timeout 300 $C exec $P ps $BIN/server/omnilearn_server --bind=$PS --port=50051 --metrics_port=0 --mode=sync \
    --num_workers=2 --global_batch=32 --adjust_every=5 --revert_worse_plans=$revert --exit_when_done \
    > /tmp/revert_$revert.server.log 2>&1 &
  SP=$!
  sleep 2
  timeout 300 $C exec $P fast $BIN/worker/omnilearn_worker --server=$PS:50051 --name=fast --model=mlp --epochs=0.5 \
    --emulate_device=$FAST > /tmp/revert_$revert.fast.log 2>&1 &
  F=$!
  timeout 300 $C exec $P slow $BIN/worker/omnilearn_worker --server=$PS:50051 --name=slow --model=mlp --epochs=0.5 \
    --emulate_device=2:13:0.05 > /tmp/revert_$revert.slow.log 2>&1 &
  S=$!
  wait $F $S $SP
  end=$(date +%s.%N)
  kill "${HOGS[@]}"; wait "${HOGS[@]}" 2>/dev/null
  echo "revert=$revert: $(python3 -c "print(f'{$end-$start:.1f} s')"), reverts: $(grep -c 'reverted' /tmp/revert_$revert.server.log)"
done
