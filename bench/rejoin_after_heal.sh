#!/usr/bin/env bash
# bench/rejoin_after_heal.sh [RUNS] (root, iproute2; bazel build //server:omnilearn_server
# //worker:omnilearn_worker first; BIN=another bazel-bin to measure other binaries;
# JOB_FLAGS=more coordinator flags, e.g. --clip_grad_norm=1; CUT_S=the cut's seconds, 30)
# How soon a worker cut off by a partition trains again once the partition heals. The
# emulated cluster (tests/cluster.sh, 1 Gbit/s links), as tests/partition_test.sh lays a job out:
# three hosts, each with a server (h0 the coordinator, h1 and h2 shards) and a C++ worker; sync
# MLP, --lease_s=10. Once w0 trained 100 iterations, h2 is cut silently from both other hosts
# for CUT_S s, then healed. Per run: the seconds from the heal until shard h2 registered again and
# until w2 joined again, and how many times the job went back to a checkpoint.
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
C=tests/cluster.sh
P=rh$$
BIN=${BIN:-bazel-bin}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  $C down $P > /dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT
$C up $P h0=1gbit h1=1gbit h2=1gbit > /dev/null || exit 1
H0=$($C addr $P h0)
H2=$($C addr $P h2)
head -c 32 /dev/urandom | base64 > "$WORK/peer.token"
SHARD=(--peer_token_file="$WORK/peer.token" --shards=3 --partition_mb=0.25 --metrics_port=0 --port=50051)
JOB=(--mode=sync --num_workers=3 --global_batch=96 --lr=0.05 --round_timeout_s=5 --lease_s=10 --exit_when_done
     --memory_checkpoint_every_s=2 --checkpoint_every_s=2 ${JOB_FLAGS:-})
on() {  # on HOST LOG CMD...: runs CMD inside HOST, bounded, in the background
  local host=$1 log=$2
  shift 2
  timeout 300 $C exec $P "$host" "$@" > "$log" 2>&1 &
  PIDS+=($!)
}
wait_for() {  # wait_for FILE PATTERN COUNT: up to 300 s for COUNT lines matching PATTERN
  local i
  for i in $(seq 1 3000); do
    [ "$(grep -c "$2" "$1" 2> /dev/null)" -ge "$3" ] && return 0
    sleep 0.1
  done
  echo "gave up waiting for '$2' in $1" >&2
  exit 1
}
for run in $(seq 1 "$RUNS"); do
  PIDS=()
  L=$WORK/$run
  on h0 "$L.h0" $BIN/server/omnilearn_server --bind="$H0" "${JOB[@]}" "${SHARD[@]}"
  wait_for "$L.h0" "listening" 1
  for h in h1 h2; do on $h "$L.$h" $BIN/server/omnilearn_server --bind="$($C addr $P $h)" --coordinator="$H0:50051" "${SHARD[@]}"; done
  for h in h0 h1 h2; do
    on $h "$L.w${h#h}" $BIN/worker/omnilearn_worker --server="$H0:50051" --name="w${h#h}" --device=cpu --dataset=synthetic \
      --model=mlp --epochs=2 --emulate_device=20:0.5:0 --log_every=1 --connect_timeout=60 --reconnect_timeout=120 --evaluate=false
  done
  wait_for "$L.w0" " it=" 100
  registered=$(grep -c "registered from $H2" "$L.h0")
  rejoined=$(grep -c "rejoined as worker" "$L.w2")
  $C cut $P h2 h0
  $C cut $P h2 h1
  sleep "${CUT_S:-30}"
  $C heal $P h2 h0
  $C heal $P h2 h1
  healed=$(date +%s.%N)
  since_heal() { awk -v a="$(date +%s.%N)" -v b="$healed" 'BEGIN { printf "%.1f", a - b }'; }
  # Polled every 0.1 s for up to 120 s: h2's shard registered again (one more line), w2 joined again.
  shard=none worker=none
  for i in $(seq 1 1200); do
    [ "$shard" = none ] && [ "$(grep -c "registered from $H2" "$L.h0")" -gt "$registered" ] && shard=$(since_heal)
    [ "$worker" = none ] && [ "$(grep -c "rejoined as worker" "$L.w2")" -gt "$rejoined" ] && worker=$(since_heal)
    [ "$shard" != none ] && [ "$worker" != none ] && break
    sleep 0.1
  done
  echo "run $run: after the heal, h2's shard registered in $shard s, w2 joined in $worker s" \
    "($(grep -o 'rejoined as worker [0-9]* after [0-9.]* s' "$L.w2" | tail -n 1))"
  for p in "${PIDS[@]}"; do wait "$p" || echo "run $run: a process exited $?" >&2; done
  echo "run $run: the job went back to a checkpoint $(grep -c "the job went back to its checkpoint" "$L.h0") times"
done
