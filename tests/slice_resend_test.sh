#!/bin/bash
# A connection to a shard server that breaks under a push costs neither a join nor a rollback
# (docs/reliability.md, "A slice sent again"): the worker sends that slice again on the same
# session, and the shard does not take a slice twice. A sync job of two slices (a coordinator
# and one shard server on 127.0.0.1), two workers, Fashion-MNIST, the MLP, one epoch. While it
# trains, the workers' TCP connections to the shard are destroyed (`ss -K`, both ends reset),
# 20 times, 0.3 s apart; the workers must have sent a slice again after at least three.
# Asserted: the job finished, every process exited 0, the epoch was trained once (60,000
# samples), no worker joined again, no slice went back to a checkpoint, and the accuracy is
# within a point of the same job uncut. Needs root (ss -K: CAP_NET_ADMIN).
source "$(dirname "$0")/e2e_lib.sh"
FLAGS=(--num_workers=2 --global_batch=96 --lr=0.05 --exit_when_done --round_timeout_s=30 --lease_s=60
       --shards=2 --partition_mb=0.25)
command -v ss > /dev/null || fail "no ss (iproute2)"

run() {  # run NAME CUT: the job; CUT=1 destroys the workers' connections to the shard as it trains
  local name=$1 cut=$2 shard_port shard_pid
  start_server "$name" "${FLAGS[@]}" --checkpoint_dir="$WORK/$name.ckpt" --checkpoint_every_s=1
  shard_port=$(free_port)
  timeout 300 "$SERVER" --bind=127.0.0.1 --port="$shard_port" --coordinator="127.0.0.1:$PORT" --shards=2 \
    --partition_mb=0.25 --shard_index=1 --checkpoint_every_s=1 --checkpoint_dir="$WORK/$name.shard.ckpt" --metrics_port=0 \
    > "$WORK/$name.shard.log" 2>&1 &
  shard_pid=$!
  STARTED+=($!)
  WORKER_PIDS=()
  for w in w0 w1; do
    start_worker "$w" "$WORK/$name.$w.log" --dataset=fashion-mnist --epochs=1 --log_every=20 --evaluate="$([ $w = w0 ] &&
      echo true || echo false)" --reconnect_timeout=120
  done
  if [ "$cut" = 1 ]; then
    wait_for_line "$WORK/$name.w0.log" " it=20 " 900 || fail "$name: w0 did not train"
    local cuts=0
    resent() { cat "$WORK/$name".w*.log | grep -c "sent again on the same session" || true; }
    # Each cut resets whatever the workers had open to the shard; one that lands between
    # their pushes costs nothing and is not counted by them. 20 cuts, 0.3 s apart, unless the
    # job ends first.
    while [ "$cuts" -lt 20 ] && kill -0 "$shard_pid" 2>/dev/null; do
      ss -K -t state established dst 127.0.0.1 dport = ":$shard_port" > /dev/null 2>&1 || true
      cuts=$((cuts + 1))
      sleep 0.3
    done
    [ "$(resent)" -ge 3 ] || fail "$name: after $cuts cuts the workers sent $(resent) slices again (3 wanted)"
    echo "$name: $cuts cuts, $(resent) slices sent again: $(grep -h "sent again" "$WORK/$name".w*.log | head -3 |
      sed 's/.*after a transport error: //' | tr '\n' ';')"
  fi
  wait_workers || { tail -n 5 "$WORK/$name".w*.log >&2; fail "$name: a worker failed"; }
  wait "$SERVER_PID" || { tail -n 20 "$WORK/$name.server.log" >&2; fail "$name: the coordinator failed"; }
  wait "$shard_pid" || { tail -n 20 "$WORK/$name.shard.log" >&2; fail "$name: the shard failed"; }
  local samples
  samples=$(sed -n 's/.*training finished: model version [0-9]*, \([0-9]*\) samples.*/\1/p' "$WORK/$name.server.log")
  [ "$samples" = 60000 ] || fail "$name: the epoch was not trained once: $samples samples"
  ! grep -h "rejoined as worker" "$WORK/$name".w*.log || fail "$name: a worker joined again"
  ! grep -h "every slice is back at version\|goes back to" "$WORK/$name.server.log" ||
    fail "$name: the job went back to a checkpoint"
}

run whole 0
whole=$(json "round(100 * s['test_accuracy'], 2)")
run cut 1
cut=$(json "round(100 * s['test_accuracy'], 2)")
python3 -c "import sys; sys.exit(0 if abs($cut - $whole) <= 1.0 else 1)" ||
  fail "cut, the job reached ${cut}%; uncut ${whole}%"
echo "uncut ${whole}%, cut ${cut}%"
echo PASS
