#!/bin/bash
# A shard's host lost for good, disk and all, twice in one job (docs/SHARDING.md, "A host
# lost for good"). A sync job (Fashion-MNIST, MLP, 2 workers, 2 epochs) over 3 slices, every
# server with its own --checkpoint_dir: each slice's checkpoint also goes to the next
# server's memory (--replicate_slices, on by default). Shard 2 is SIGKILLed, its directory
# deleted, and a new shard is started for slice 2 on another port with an empty directory,
# as Slurm or Kubernetes would start one on another node; later shard 1 likewise (its
# replica then lives on shard 2's replacement); last the coordinator, its directory deleted
# too, started again at its address (a Kubernetes Service's) on an empty directory: it takes
# the job from slice 0's replicas on shard 1. No person rolls anything back: asserted, each
# slice came back from its replica at a version the replica held, the workers followed the
# new addresses and finished, every sample was trained once an epoch (120,000 samples), every
# process exited 0, the export is the job's model and it learnt (above 80%). Prints the time
# from each loss to the first iteration after it.
source "$(dirname "$0")/e2e_lib.sh"
FLAGS=(--num_workers=2 --global_batch=96 --lr=0.05 --lr_decay_epochs=0.5 --exit_when_done --round_timeout_s=10
       --lease_s=30)
SHARD_FLAGS=(--shards=3 --partition_mb=0.25 --checkpoint_every_s=1)

# start_shard NAME INDEX: a shard server for slice INDEX on a new port with an empty
# directory; SHARD_PID is the `timeout` wrapper (the server is its child).
start_shard() {
  local name=$1 i=$2
  timeout 300 "$SERVER" --bind=127.0.0.1 --port="$(free_port)" --coordinator="127.0.0.1:$PORT" "${SHARD_FLAGS[@]}" \
    --shard_index="$i" --checkpoint_dir="$WORK/$name.ckpt" --metrics_port=0 > "$WORK/$name.log" 2>&1 &
  SHARD_PID=$!
  STARTED+=($!)
}

iterations() { grep -c " it=" "$WORK/w0.log" || true; }
checkpoints() { grep -c "omnilearn_server: checkpoint" "$WORK/job.server.log" || true; }
back_lines() { grep -c "every slice is back at version" "$WORK/job.server.log" || true; }

# two_checkpoints WHAT: waits until the coordinator wrote two more checkpoints (each slice's
# replica then holds one of them).
two_checkpoints() {
  local c0
  c0=$(checkpoints)
  two_more() { [ "$(checkpoints)" -ge $((c0 + 2)) ]; }
  wait_until 900 "two checkpoints before $1" two_more
}

# trained_again WHAT AT: waits until w0 logs another iteration; prints the seconds since AT.
trained_again() {
  local it0
  it0=$(iterations)
  trains() { [ "$(iterations)" -gt "$it0" ]; }
  wait_until 600 "w0 to train after $1" trains
  python3 -c "import time; print(round(time.time() - $2, 1))"
}

# lose NAME INDEX: the shard NAME is killed and its disk deleted once the coordinator wrote
# two more checkpoints (each slice's replica then holds one of them); a new shard for slice
# INDEX starts; waits until the job trains again. LOST_FOR: seconds from the kill to w0's next
# logged iteration; SHARD_PID: the new shard's.
lose() {
  local name=$1 i=$2 pid=$3 at backs
  two_checkpoints "$name's loss"
  backs=$(back_lines)
  at=$(date +%s.%N)
  pkill -KILL -P "$pid" || fail "$name was not running at the kill (the job ended first?)"
  wait "$pid" 2>/dev/null || true
  rm -rf "$WORK/$name.ckpt"
  start_shard "$name-new" "$i"
  came_back() { [ "$(back_lines)" -gt "$backs" ]; }
  wait_until 600 "every slice back after $name's loss" came_back
  grep -q "slice $i comes back from its replica of version" "$WORK/job.server.log" ||
    { tail -n 20 "$WORK/job.server.log" >&2; fail "slice $i did not come back from its replica"; }
  LOST_FOR=$(trained_again "$name's loss" "$at")
}

start_server job "${FLAGS[@]}" "${SHARD_FLAGS[@]}" --checkpoint_dir="$WORK/job.ckpt" --export="$WORK/job.safetensors"
start_shard shard1 1
pid1=$SHARD_PID
start_shard shard2 2
pid2=$SHARD_PID
WORKER_PIDS=()
for w in w0 w1; do
  start_worker "$w" "$WORK/$w.log" --dataset=fashion-mnist --model=mlp --epochs=2 --evaluate=$([ $w = w0 ] &&
    echo true || echo false) --log_every=5 --reconnect_timeout=120
done
three_iterations() { [ "$(iterations)" -ge 3 ]; }
wait_until 900 "w0 to train" three_iterations

lose shard2 2 "$pid2"
pid2=$SHARD_PID
first=$LOST_FOR
lose shard1 1 "$pid1"
pid1=$SHARD_PID
second=$LOST_FOR

# The coordinator, once shard 1's replacement keeps slice 0's replicas of two checkpoints.
two_checkpoints "the coordinator's loss"
coordinator=$(pgrep -P "$SERVER_PID") || fail "the coordinator was not running (the job ended first?)"
at=$(date +%s.%N)
kill -KILL "$coordinator"
wait "$SERVER_PID" 2>/dev/null || true
rm -rf "$WORK/job.ckpt"
restart_server job-new "${FLAGS[@]}" "${SHARD_FLAGS[@]}" --checkpoint_dir="$WORK/job-new.ckpt" \
  --export="$WORK/job.safetensors"
wait_for_line "$WORK/job-new.server.log" "resumed from slice 0's replica of version" 600 ||
  { tail -n 20 "$WORK"/job-new.server.log >&2; fail "the new coordinator did not take the job from slice 0's replica"; }
wait_for_line "$WORK/job-new.server.log" "every slice is back at version" 600 ||
  { tail -n 20 "$WORK"/job-new.server.log >&2; fail "the shards did not come back to the new coordinator"; }
third=$(trained_again "the coordinator's loss" "$at")

wait_workers || { tail -n 5 "$WORK"/w*.log >&2; fail "a worker failed"; }
wait "$SERVER_PID" || { tail -n 20 "$WORK/job-new.server.log" >&2; fail "the coordinator failed"; }
for p in "$pid1" "$pid2"; do wait "$p" || { tail -n 20 "$WORK"/shard*.log >&2; fail "a shard failed"; }; done
for w in w0 w1; do
  [ "$(grep -c "rejoined as worker" "$WORK/$w.log")" -ge 3 ] || fail "$w did not rejoin after each loss"
done
read -r _ samples <<<"$(sed -n 's/.*training finished: model version \([0-9]*\), \([0-9]*\) samples.*/\1 \2/p' \
  "$WORK/job-new.server.log")"
[ "${samples:-0}" = 120000 ] || fail "the epochs were not trained once each: $(grep 'training finished' "$WORK/job-new.server.log")"
accuracy=$(json "round(100 * s['test_accuracy'], 2)")
check_export job "$WORK/job.safetensors" "$accuracy" --dataset=fashion-mnist > /dev/null
python3 -c "import sys; sys.exit(0 if $accuracy > 80 else 1)" || fail "the job reached only ${accuracy}%"
echo "$(grep -o 'slice [0-9] comes back from its replica of version [0-9]* at [^ ]*' "$WORK/job.server.log" |
  tr '\n' ';') $(grep -o "resumed from slice 0's replica of version [0-9]*" "$WORK/job-new.server.log");" \
  "trained again ${first} s, ${second} s and ${third} s after each loss; 120000 samples; ${accuracy}%"
echo PASS
