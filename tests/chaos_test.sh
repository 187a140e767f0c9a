#!/bin/bash
# Chaos: a sharded sync job (a coordinator and two shard servers, each writing checkpoints,
# and three workers) under faults on a schedule of its own, drawn from a seed it prints
# (CHAOS_SEED=N replays one): every few seconds of training one process, a worker, a
# shard or the coordinator, is SIGKILLed and restarted with its own flags (same port,
# same checkpoint directory, same name), or SIGSTOPped for 2-7 s (longer than the round
# timeout: it is dropped and comes back). Asserted: the job finishes; it trained exactly
# its samples (2 epochs of Fashion-MNIST: the server hands out none past them, whatever rounds the faults
# cut short); every process that was not killed exits 0; the export holds every tensor
# whole and evaluates to the job's accuracy. Bounded: faults only in the job's first half
# (a worker killed later could find the job over, and its server gone, when its old
# session's lease lets it back), each wait has a deadline that fails the test.
source "$(dirname "$0")/e2e_lib.sh"
SEED=${CHAOS_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
FAULTS=${CHAOS_FAULTS:-8}
RANDOM=$SEED
echo "chaos: seed $SEED, $FAULTS faults"
JOB=120000  # two epochs of Fashion-MNIST's 60,000
BATCH=96
CKPT=(--checkpoint_every_s=1 --checkpoint_keep=4)
SERVER_FLAGS=("${SGD_FLAGS[@]}" --num_workers=3 --global_batch=$BATCH --lr=0.05 --exit_when_done --round_timeout_s=2 --lease_s=10
              --shards=3 --partition_mb=0.25 --metrics_port=0 --quiet "${CKPT[@]}")
# Devices emulated at 30 ms + 0.3 ms per sample: steps of a known time whatever the load,
# about a minute of training undisturbed.
WORKER_FLAGS=(--device=cpu --dataset=fashion-mnist --model=mlp --epochs=2 --log_every=5 --emulate_device=30:0.3
              --reconnect_timeout=150 --connect_timeout=60)
PORT=$(free_port)
SHARD_PORT=([1]=$(free_port) [2]=$(free_port))
SUMMARY=$WORK/chaos.json
EXPORT=$WORK/chaos.safetensors
declare -A PID  # role -> the live incarnation's `timeout` wrapper (the process is its child)
KILLED=()       # wrappers of killed incarnations: reaped, their status not asserted

launch() {  # launch ROLE: starts the role's process, its output appended to ROLE.log
  local role=$1
  case $role in
    coordinator)
      timeout 600 "$SERVER" --bind=127.0.0.1 --port="$PORT" "${SERVER_FLAGS[@]}" --summary_json="$SUMMARY" \
        --checkpoint_dir="$WORK/coordinator.ckpt" --export="$EXPORT" >> "$WORK/$role.log" 2>&1 & ;;
    shard1 | shard2)
      local i=${role#shard}
      timeout 600 "$SERVER" --bind=127.0.0.1 --port="${SHARD_PORT[$i]}" --coordinator="127.0.0.1:$PORT" \
        --shards=3 --partition_mb=0.25 --shard_index="$i" --metrics_port=0 "${CKPT[@]}" \
        --checkpoint_dir="$WORK/$role.ckpt" >> "$WORK/$role.log" 2>&1 & ;;
    w0) timeout 600 "$WORKER" --server="127.0.0.1:$PORT" --name=w0 "${WORKER_FLAGS[@]}" --evaluate \
          >> "$WORK/$role.log" 2>&1 & ;;
    w*) timeout 600 "$WORKER" --server="127.0.0.1:$PORT" --name="$role" "${WORKER_FLAGS[@]}" --evaluate=false \
          >> "$WORK/$role.log" 2>&1 & ;;
  esac
  PID[$role]=$!
  STARTED+=($!)
}

child() { pgrep -P "${PID[$1]}"; }  # the role's process (the wrapper's child)

finished() { grep -q "training finished" "$WORK/coordinator.log"; }

# The job's progress: the highest model version a worker printed, against the job's rounds.
progress_pct() {
  local v
  v=$(cat "$WORK"/w*.log | sed -n 's/.* version=\([0-9]*\).*/\1/p' | sort -n | tail -1)
  echo $(( ${v:-0} * BATCH * 100 / JOB ))
}

# Training is going on: two more checkpoints of the coordinator than when asked.
await_training() {
  local before after
  before=$(grep -c "checkpoint .*ckpt-" "$WORK/coordinator.log" || true)
  for _ in $(seq 900); do
    finished && return 0
    after=$(grep -c "checkpoint .*ckpt-" "$WORK/coordinator.log" || true)
    [ "$after" -ge $((before + 2)) ] && return 0
    sleep 0.1
  done
  tail -n 15 "$WORK"/*.log >&2
  fail "no training for 90 s after the last fault (seed $SEED)"
}

start=$(date +%s)
launch coordinator
wait_for_line "$WORK/coordinator.log" "listening" 300 || { cat "$WORK/coordinator.log" >&2; fail "no coordinator"; }
for role in shard1 shard2 w0 w1 w2; do launch "$role"; done

roles=(w0 w1 w2 shard1 shard2 coordinator)
done_faults=0
for n in $(seq "$FAULTS"); do
  await_training
  sleep "$((1 + RANDOM % 4)).$((RANDOM % 10))"
  finished && break
  [ "$(progress_pct)" -lt 50 ] || break
  role=${roles[RANDOM % ${#roles[@]}]}
  proc=$(child "$role") || fail "$role is not running before fault $n (seed $SEED)"
  if ((RANDOM % 2)); then
    echo "fault $n: SIGKILL $role at $(progress_pct)% of the job, restarted"
    kill -KILL "$proc"
    wait "${PID[$role]}" 2>/dev/null || true
    KILLED+=("${PID[$role]}")
    sleep "0.$((RANDOM % 10))"
    launch "$role"
  else
    pause=$((2 + RANDOM % 6))
    echo "fault $n: SIGSTOP $role for $pause s at $(progress_pct)% of the job"
    kill -STOP "$proc"
    sleep "$pause"
    kill -CONT "$proc"
  fi
  done_faults=$n
done

# Every live incarnation ends by itself, with status 0.
for role in w0 w1 w2 coordinator shard1 shard2; do
  if ! wait "${PID[$role]}"; then
    tail -n 20 "$WORK/$role.log" >&2
    fail "$role exited with an error (seed $SEED, $done_faults faults)"
  fi
done
line=$(grep "training finished" "$WORK/coordinator.log" | tail -1)
samples=$(sed -n 's/.*training finished: model version [0-9]*, \([0-9]*\) samples.*/\1/p' <<<"$line")
[ "$samples" = "$JOB" ] || fail "the job trained ${samples:-no} samples, not its $JOB (seed $SEED): $line"
accuracy=$(json "round(100 * s['test_accuracy'], 2)")
evaluated=$(check_export chaos "$EXPORT" "$accuracy" --dataset=fashion-mnist)
rejoins=$(cat "$WORK"/w*.log | grep -c "rejoined as worker" || true)
rollbacks=$(grep -c "went back to its checkpoint" "$WORK/coordinator.log" || true)
echo "chaos: seed $SEED, $done_faults faults, $rejoins rejoins, $rollbacks rollbacks; $samples samples of $JOB;" \
  "accuracy ${accuracy}%, the export evaluates to ${evaluated}%; $(( $(date +%s) - start )) s"
echo PASS
