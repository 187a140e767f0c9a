#!/bin/bash
# A sharded job (docs/SHARDING.md): a coordinator and two shard servers (3 slices) train
# Fashion-MNIST's CNN with two workers to the accuracy one server reaches with the same
# workers and epochs, in sync and in async mode (within 1 point); the shards exit 0 when
# the coordinator's job ends.
source "$(dirname "$0")/e2e_lib.sh"

# job LABEL MODE SHARDS: final test accuracy (percent) on stdout.
job() {
  local label=$1 mode=$2 shards=$3
  start_server "$label" --mode="$mode" --num_workers=2 --global_batch=256 --shards="$shards" --exit_when_done
  local shard_pids=()
  for i in $(seq 1 $((shards - 1))); do
    timeout 300 "$SERVER" --bind=127.0.0.1 --port=0 --coordinator="127.0.0.1:$PORT" --shards="$shards" \
      --metrics_port=0 > "$WORK/$label.shard$i.log" 2>&1 &
    shard_pids+=($!)
    STARTED+=($!)
  done
  WORKER_PIDS=()
  for n in w0 w1; do
    start_worker "$n" "$WORK/$label.$n.log" --dataset=fashion-mnist --model=cnn --epochs=1 --evaluate
  done
  for p in "${WORKER_PIDS[@]}"; do wait "$p" || { cat "$WORK/$label".*.log >&2; fail "$label: a worker failed"; }; done
  wait "$SERVER_PID" || fail "$label: the coordinator failed"
  for p in "${shard_pids[@]}"; do wait "$p" || { cat "$WORK/$label".shard*.log >&2; fail "$label: a shard failed"; }; done
  grep -o 'test accuracy [0-9.]*%' "$WORK/$label.w0.log" | tail -1 | grep -o '[0-9.]*'
}

for mode in sync async; do
  one=$(job "$mode-one" "$mode" 1)
  three=$(job "$mode-three" "$mode" 3)
  grep -q "registered" "$WORK/$mode-three.server.log" || fail "$mode: no shard registered"
  echo "$mode: one server ${one}%, three shards ${three}%"
  python3 -c "import sys; sys.exit(0 if abs($one - $three) <= 1.0 else 1)" ||
    fail "$mode: three shards reached ${three}%, one server ${one}% (more than 1 point apart)"
done
echo PASS
