#!/bin/bash
# A sharded job survives a shard's crash (docs/SHARDING.md, "Faults"), and its export is
# the whole model. Three runs of the same sync job (Fashion-MNIST, MLP, 2 workers, 1 epoch):
# - one server: the reference accuracy;
# - three slices (a coordinator and two shard servers, each with --checkpoint_dir) and
#   --export: the export holds every tensor at its full shape, and `omnilearn_worker
#   --evaluate_only --init_from` on it reproduces the job's accuracy (to 0.1 point) and is
#   within 1 point of one server's;
# - the same, with shard 2 SIGKILLed after its first checkpoint and restarted on the same
#   port and directory, and later the coordinator SIGKILLed and restarted on its own; the
#   workers are not touched: they wait, join again and finish. Asserted: the coordinator
#   reported the shard's loss, every slice went back to a checkpoint version shard 2 had
#   written, then (after the coordinator's restart) to a newer one the coordinator had
#   written, the workers rejoined twice, the epoch was trained exactly once (60,000 samples), everything
#   exited 0, and the accuracy is within 1 point of one server's.
source "$(dirname "$0")/e2e_lib.sh"
FLAGS=(--num_workers=2 --global_batch=96 --lr=0.05 --lr_decay_epochs=0.5 --exit_when_done --round_timeout_s=10
       --lease_s=30)
SHARD_FLAGS=(--shards=3 --partition_mb=0.25 --checkpoint_every_s=1)

start_workers() {  # start_workers RUN
  WORKER_PIDS=()
  start_worker w0 "$WORK/$1.w0.log" --dataset=fashion-mnist --model=mlp --epochs=1 --evaluate --log_every=10 \
    --reconnect_timeout=120
  start_worker w1 "$WORK/$1.w1.log" --dataset=fashion-mnist --model=mlp --epochs=1 --evaluate=false --log_every=10 \
    --reconnect_timeout=120
}

# start_shard RUN INDEX PORT: SHARD_PID is the `timeout` wrapper (the server is its child).
start_shard() {
  local run=$1 i=$2 port=$3
  timeout 300 "$SERVER" --bind=127.0.0.1 --port="$port" --coordinator="127.0.0.1:$PORT" "${SHARD_FLAGS[@]}" \
    --shard_index="$i" --checkpoint_dir="$WORK/$run.shard$i.ckpt" --metrics_port=0 >> "$WORK/$run.shard$i.log" 2>&1 &
  SHARD_PID=$!
  STARTED+=($!)
}

accuracy() { json "round(100 * s['test_accuracy'], 2)"; }

finish() {  # finish RUN PIDS...: every worker, the coordinator and the shards exit 0
  local run=$1; shift
  wait_workers || { tail -n 5 "$WORK/${run%%-*}".w*.log >&2; fail "$run: a worker failed"; }
  wait "$SERVER_PID" || { tail -n 20 "$WORK/$run.server.log" >&2; fail "$run: the coordinator failed"; }
  for p in "$@"; do wait "$p" || { tail -n 20 "$WORK/$run".shard*.log >&2; fail "$run: a shard failed"; }; done
}

# One server.
start_server one "${FLAGS[@]}"
start_workers one
finish one
ref=$(accuracy)

# Three slices, uninterrupted, exported.
start_server three "${FLAGS[@]}" "${SHARD_FLAGS[@]}" --checkpoint_dir="$WORK/three.ckpt" --export="$WORK/three.safetensors"
shard_pids=()
for i in 1 2; do start_shard three "$i" "$(free_port)"; shard_pids+=("$SHARD_PID"); done
start_workers three
finish three "${shard_pids[@]}"
three=$(accuracy)
evaluated=$(check_export three "$WORK/three.safetensors" "$three" --dataset=fashion-mnist)
python3 -c "import sys; sys.exit(0 if abs($evaluated - $ref) <= 1.0 else 1)" ||
  fail "the sharded export evaluates to ${evaluated}%, one server reached ${ref}%"

# Three slices; shard 2 is killed and restarted.
start_server fault "${FLAGS[@]}" "${SHARD_FLAGS[@]}" --checkpoint_dir="$WORK/fault.ckpt" --export="$WORK/fault.safetensors"
port2=$(free_port)
start_shard fault 1 "$(free_port)"
pid1=$SHARD_PID
start_shard fault 2 "$port2"
start_workers fault
# A checkpoint after training began (the one of version 0 comes with the slice).
wait_for_line "$WORK/fault.shard2.log" "checkpoint .*ckpt-0*[1-9]" 900 || fail "fault: shard 2 wrote no checkpoint in 90 s"
before=$(grep -c " it=" "$WORK/fault.w0.log" || true)
w0_trained() { [ "$(grep -c " it=" "$WORK/fault.w0.log" || true)" -ge $((before + 3)) ]; }
wait_until 600 "fault: 3 iterations of w0 after shard 2's checkpoint" w0_trained
pkill -KILL -P "$SHARD_PID" || fail "fault: shard 2 was not running at the kill (the job ended first?)"
wait "$SHARD_PID" 2>/dev/null || true
written=$(grep -o 'ckpt-[0-9]*' "$WORK/fault.shard2.log" | sed 's/ckpt-0*\([0-9]\)/\1/' | sort -n | uniq | tr '\n' ' ')
wait_for_line "$WORK/fault.server.log" "shard 2 .* disconnected: pushes are refused" 300 ||
  fail "fault: the coordinator did not report shard 2's loss"
both_waiting() { [ "$(grep -l "waiting for the server" "$WORK"/fault.w*.log | wc -l)" = 2 ]; }
wait_until 600 "fault: both workers to wait for shard 2" both_waiting
start_shard fault 2 "$port2"
pid2=$SHARD_PID
wait_for_line "$WORK/fault.server.log" "every slice is back at version" 600 ||
  { tail -n 20 "$WORK"/fault.*.log >&2; fail "fault: the job did not go back to a common checkpoint"; }
back=$(sed -n 's/.*every slice is back at version \([0-9]*\).*/\1/p' "$WORK/fault.server.log" | tail -1)
[[ " $written" == *" $back "* ]] || fail "fault: the job went back to version $back, shard 2 wrote only [$written]"

# Then the coordinator: lost once it wrote two checkpoints after the rollback, and
# restarted on the same port and directory. The shards and the workers are not touched:
# the shards register again, the workers join again, and every server goes back to the
# newest checkpoint all of them hold.
after=$(grep -c "omnilearn_server: checkpoint" "$WORK/fault.server.log" || true)
two_more_checkpoints() { [ "$(grep -c "omnilearn_server: checkpoint" "$WORK/fault.server.log" || true)" -ge $((after + 2)) ]; }
wait_until 900 "fault: two checkpoints of the coordinator after the rollback" two_more_checkpoints
# First as a host lost without closing its connections: stopped (SIGSTOP), it answers
# nothing, and only the shards' keepalive pings (every 5 s) can tell. Killed once both
# shards noticed.
coordinator=$(pgrep -P "$SERVER_PID") || fail "fault: the coordinator was not running (the job ended first?)"
kill -STOP "$coordinator"
for i in 1 2; do
  wait_for_line "$WORK/fault.shard$i.log" "lost the link to the coordinator.*registering again" 600 ||
    fail "fault: shard $i did not notice in 60 s that its coordinator stopped answering"
done
kill -KILL "$coordinator"
wait "$SERVER_PID" 2>/dev/null || true
coordinator_wrote=$(grep -o 'ckpt-[0-9]*' "$WORK/fault.server.log" | sed 's/ckpt-0*\([0-9]\)/\1/' | sort -n | uniq |
  tr '\n' ' ')
restart_server fault-resumed "${FLAGS[@]}" "${SHARD_FLAGS[@]}" --checkpoint_dir="$WORK/fault.ckpt" \
  --export="$WORK/fault.safetensors"
wait_for_line "$WORK/fault-resumed.server.log" "every slice is back at version" 600 ||
  { tail -n 20 "$WORK"/fault*.log >&2; fail "fault: the restarted coordinator's shards did not come back"; }
back2=$(sed -n 's/.*every slice is back at version \([0-9]*\).*/\1/p' "$WORK/fault-resumed.server.log")
[[ " $coordinator_wrote" == *" $back2 "* ]] && [ "$back2" -gt "$back" ] ||
  fail "fault: the restarted job went back to version $back2 (the coordinator wrote [$coordinator_wrote], the first" \
    "rollback was to $back)"
finish fault-resumed "$pid1" "$pid2"
for w in w0 w1; do
  [ "$(grep -c "rejoined as worker" "$WORK/fault.$w.log")" -ge 2 ] || fail "fault: $w did not rejoin twice"
done
# Every sample once: the rollbacks' epoch positions, and the server handing out no sample
# past the job's epoch, make the count exact whatever rounds the faults cut short.
finished=$(sed -n 's/.*training finished: model version \([0-9]*\), \([0-9]*\) samples.*/\1 \2/p' \
  "$WORK/fault-resumed.server.log")
read -r _ samples <<<"$finished"
[ "${samples:-0}" = 60000 ] ||
  fail "fault: the epoch was not trained once: $(grep 'training finished' "$WORK/fault-resumed.server.log")"
fault=$(accuracy)
check_export fault "$WORK/fault.safetensors" "$fault" --dataset=fashion-mnist > /dev/null
python3 -c "import sys; sys.exit(0 if abs($fault - $ref) <= 1.0 else 1)" ||
  fail "after a shard's crash the job reached ${fault}%, one server ${ref}%"
# A sharded job's checkpoints are resumed only by a coordinator of that cut.
refused() {  # refused WANT [flags...]: the server exits 2 at start, saying WANT
  local want=$1 out rc=0; shift
  out=$(timeout 60 "$SERVER" --bind=127.0.0.1 --port=0 --metrics_port=0 --checkpoint_dir="$WORK/fault.ckpt" "$@" 2>&1) ||
    rc=$?
  [ "$rc" = 2 ] && grep -q -- "$want" <<<"$out" || fail "a server with [$*] on the sharded job's checkpoints: rc $rc, $out"
}
refused "start it with --shards=3 --partition_mb=0.25"
refused "cut into 3 shards of 262144-byte partitions" --shards=2 --partition_mb=0.25 --checkpoint_keep=2
echo "one server ${ref}%; three slices ${three}% (export evaluates to ${evaluated}%);" \
  "shard 2 killed after its checkpoints [${written% }], back at version $back;" \
  "the coordinator killed after its checkpoints [${coordinator_wrote% }], back at version $back2; final ${fault}%"
echo PASS
