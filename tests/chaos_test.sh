#!/bin/bash
# Chaos: a sharded sync job (a coordinator and two shard servers, each writing checkpoints,
# and three workers) on the emulated cluster (tests/cluster.sh), every process on a host of
# its own (c, s1, s2, w0, w1, w2), under faults on a schedule of its own, drawn from a seed
# it prints (CHAOS_SEED=N replays one), over the whole job: every few seconds of training
# one process, a worker, a shard or the coordinator, is SIGKILLed and restarted with its own
# flags (same address, same checkpoint directory, same name), a server's host is lost for
# good (SIGKILLed, its checkpoint directory deleted, a new server started for its slice on an
# empty disk: the slice comes back from its replica on the next server), or SIGSTOPped for 2-7 s
# (longer than the round timeout: it is dropped and comes back); or a link is cut silently
# for 2-12 s (past the lease, at times) and healed: a worker's to one shard, a shard's to
# the coordinator, or a whole host's to every other. Asserted: the job finishes; it
# trained exactly its samples (2 epochs of Fashion-MNIST: the server hands out none past
# them, whatever rounds the faults cut short); every process that was not killed exits 0
# (but a worker restarted so late that the job ended before it joined: it finds no server);
# no slice took a step without a member another slice took, and every slice's step history
# equals slice 0's at every checkpoint and at the end (one model across slices); the
# export is of the job's final version, holds every tensor whole and evaluates to the job's
# accuracy (when that was measured on the final version: a late fault can kill the
# evaluating worker after its last evaluation). Each wait has a deadline that fails the
# test. Needs root (network namespaces). `chaos_test.sh local`: the same with local steps,
# each worker taking 4 steps of its own SGD a round, the servers' Nesterov SGD the outer
# optimizer (DiLoCo's). `chaos_test.sh local-python`: local steps with w1 and w2 Python
# workers (python/examples/train.py, the program's own torch.optim.SGD) beside the C++ w0.
# `chaos_test.sh local-keras`: local steps with three Keras workers (tests/keras_job.py: a
# CNN, w0 through omnilearn.keras.fit, w1 and w2 a tf.GradientTape loop, each stepping the
# compiled keras.optimizers.SGD) on 18,000 samples, on the TensorFlow venv (OMNILEARN_TF_PYTHON).
source "$(dirname "$0")/e2e_lib.sh"
MODE=${1:-steps}
[[ " steps local local-python local-keras " == *" $MODE "* ]] ||
  fail "no mode '$MODE' (steps, local, local-python, local-keras)"
use_cluster och
HOSTS=(c s1 s2 w0 w1 w2)
"$CLUSTER" up "$P" c=1gbit s1=1gbit s2=1gbit w0=1gbit w1=1gbit w2=1gbit > /dev/null
C=$("$CLUSTER" addr "$P" c)
head -c 32 /dev/urandom | base64 > "$WORK/peer.token"
SEED=${CHAOS_SEED:-$(( $(date +%s%N) / 1000 % 1000000 ))}
FAULTS=${CHAOS_FAULTS:-10}
RANDOM=$SEED
echo "chaos ($MODE): seed $SEED, $FAULTS faults"
JOB=120000  # two epochs of Fashion-MNIST's 60,000
KERAS_SAMPLES=18000
[ "$MODE" = local-keras ] && JOB=$((2 * KERAS_SAMPLES))
BATCH=96
CKPT=(--checkpoint_every_s=1 --checkpoint_keep=4)
SERVER_FLAGS=("${SGD_FLAGS[@]}" --num_workers=3 --global_batch=$BATCH --lr=0.05 --exit_when_done --round_timeout_s=2 --lease_s=10
              --shards=3 --partition_mb=0.25 --metrics_port=0 --quiet "${CKPT[@]}" --peer_token_file="$WORK/peer.token")
# Devices emulated at 30 ms + 0.3 ms per sample: steps of a known time whatever the load,
# about a minute of training undisturbed.
WORKER_FLAGS=(--dataset=fashion-mnist --model=mlp --epochs=2 --log_every=5 --emulate_device=30:0.3
              --reconnect_timeout=150 --connect_timeout=60)
# Local steps: rounds of 4 steps of ~8 samples (about 130 ms of emulated compute). Plain
# inner SGD: with the outer Nesterov momentum on 4 steps, inner momentum diverged (10%).
if [ "$MODE" != steps ]; then
  SERVER_FLAGS+=(--local_steps=4 --lr=0.7 --optimizer_options=nesterov=1)
  WORKER_FLAGS+=(--optimizer=sgd --lr=0.05)
fi
# The Python workers take the C++ workers' flags (train.py names them alike).
PY_WORKER=(/usr/bin/python3 "$RUNFILES/python/examples/train.py" "${WORKER_FLAGS[@]}")
python_worker() { [ "$MODE" = local-python ] && [ "$1" != w0 ]; }
if [ "$MODE" = local-keras ]; then
  TF_PY=${OMNILEARN_TF_PYTHON:?local-keras runs on the TensorFlow venv: run tests/run.sh --all, or set \
OMNILEARN_TF_PYTHON to the python of deploy/install-venv.sh tensorflow}
  KERAS_JOB=$RUNFILES/tests/keras_job.py
  # Plain inner SGD (the compiled optimizer, stepped by each worker), as the C++ workers'.
  KERAS_WORKER=(env PYTHONPATH="$RUNFILES/python" TF_CPP_MIN_LOG_LEVEL=2 OMP_NUM_THREADS=1 "$TF_PY" "$KERAS_JOB"
                worker --epochs=2 --limit=$KERAS_SAMPLES --device=30:0.3 --lr=0.05 --momentum=0 --log_every=20
                --reconnect_timeout=150 --connect_timeout=60)
fi
SUMMARY=$WORK/chaos.json
EXPORT=$WORK/chaos.safetensors
declare -A PID  # role -> the live incarnation's `timeout` wrapper (the process is its child)
declare -A FROM # role -> the line of its log where its live incarnation's output begins
KILLED=()       # wrappers of killed incarnations: reaped, their status not asserted

# launch_worker ROLE: the worker of ROLE (w0 evaluates, but with Keras: fit's validation).
launch_worker() {
  local role=$1
  if [ "$MODE" = local-keras ]; then
    exec timeout 600 "$CLUSTER" exec "$P" "$role" "${KERAS_WORKER[@]}" --server="$C:50051" --name="$role" \
      --loop="$([ "$role" = w0 ] && echo fit || echo tape)" --ids="$WORK/$role.$(date +%s%N).ids"
  elif python_worker "$role"; then
    exec timeout 600 "$CLUSTER" exec "$P" "$role" env PYTHONPATH="$RUNFILES/python" OMP_NUM_THREADS=1 \
      "${PY_WORKER[@]}" --server="$C:50051" --name="$role"
  fi
  exec timeout 600 "$CLUSTER" exec "$P" "$role" "$WORKER" --server="$C:50051" --name="$role" --device=cpu \
    "${WORKER_FLAGS[@]}" --evaluate="$([ "$role" = w0 ] && echo true || echo false)"
}

launch() {  # launch ROLE: starts the role's process, its output appended to ROLE.log
  local role=$1
  touch "$WORK/$role.log"
  FROM[$role]=$(( $(wc -l < "$WORK/$role.log") + 1 ))
  case $role in
    coordinator)
      timeout 600 "$CLUSTER" exec "$P" c "$SERVER" --bind="$C" --port=50051 "${SERVER_FLAGS[@]}" \
        --summary_json="$SUMMARY" --checkpoint_dir="$WORK/coordinator.ckpt" --export="$EXPORT" >> "$WORK/$role.log" 2>&1 & ;;
    shard1 | shard2)
      local i=${role#shard}
      timeout 600 "$CLUSTER" exec "$P" "s$i" "$SERVER" --bind="$("$CLUSTER" addr "$P" "s$i")" --port=50051 \
        --coordinator="$C:50051" --shards=3 --partition_mb=0.25 --shard_index="$i" --metrics_port=0 "${CKPT[@]}" \
        --peer_token_file="$WORK/peer.token" --checkpoint_dir="$WORK/$role.ckpt" >> "$WORK/$role.log" 2>&1 & ;;
    w*) launch_worker "$role" >> "$WORK/$role.log" 2>&1 & ;;
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

# cut_links N: cuts, for 2-12 s, a worker's link to one shard, a shard's to the coordinator,
# or a whole host's to every other; then heals them.
cut_links() {
  local n=$1 seconds=$((2 + RANDOM % 11)) what h pair pairs=()
  case $((RANDOM % 3)) in
    0) h=w$((RANDOM % 3)) && pair="$h s$((1 + RANDOM % 2))" && pairs=("$pair") && what="${pair/ / from }" ;;
    1) pair="s$((1 + RANDOM % 2)) c" && pairs=("$pair") && what="${pair% c} from the coordinator" ;;
    2)
      h=${HOSTS[RANDOM % ${#HOSTS[@]}]}
      for pair in "${HOSTS[@]}"; do [ "$pair" = "$h" ] || pairs+=("$h $pair"); done
      what="host $h from every other" ;;
  esac
  echo "fault $n: cut $what for $seconds s at $(progress_pct)% of the job"
  for pair in "${pairs[@]}"; do "$CLUSTER" cut "$P" $pair; done
  sleep "$seconds"
  for pair in "${pairs[@]}"; do "$CLUSTER" heal "$P" $pair; done
}

start=$(date +%s)
launch coordinator
wait_for_line "$WORK/coordinator.log" "listening" 300 || { cat "$WORK/coordinator.log" >&2; fail "no coordinator"; }
for role in shard1 shard2 w0 w1 w2; do launch "$role"; done

roles=(w0 w1 w2 shard1 shard2 coordinator)
done_faults=0
for n in $(seq "$FAULTS"); do
  await_training
  sleep "$((2 + RANDOM % 8)).$((RANDOM % 10))"  # the schedule spans the whole job
  finished && break
  done_faults=$n
  if ((RANDOM % 3 == 2)); then
    cut_links "$n"
    continue
  fi
  role=${roles[RANDOM % ${#roles[@]}]}
  # Late in the job a worker may have finished its training and exited (0, asserted below).
  proc=$(child "$role") || { echo "fault $n: $role already ended"; continue; }
  if ((RANDOM % 2)); then
    lost=""
    if [[ $role != w* ]] && ((RANDOM % 2)); then lost=1; fi
    if [ -n "$lost" ]; then
      echo "fault $n: $role's host lost for good at $(progress_pct)% of the job (SIGKILL, its checkpoints" \
        "deleted), a new $role started on an empty disk"
    else
      echo "fault $n: SIGKILL $role at $(progress_pct)% of the job, restarted"
    fi
    kill -KILL "$proc"
    wait "${PID[$role]}" 2>/dev/null || true
    KILLED+=("${PID[$role]}")
    [ -z "$lost" ] || rm -rf "$WORK/$role.ckpt"
    sleep "0.$((RANDOM % 10))"
    launch "$role"
  else
    pause=$((2 + RANDOM % 6))
    echo "fault $n: SIGSTOP $role for $pause s at $(progress_pct)% of the job"
    kill -STOP "$proc"
    sleep "$pause"
    kill -CONT "$proc"
  fi
done

# A worker restarted so late that the job ended before it could join finds no server (the
# coordinator exits when done) and says so: that incarnation trained nothing, so the job's
# counts below stand. A worker that joined, or one that failed otherwise, fails the test.
too_late() {  # too_late ROLE: its live incarnation never joined and never reached a finished job's server
  local out
  out=$(tail -n "+${FROM[$1]}" "$WORK/$1.log")
  [[ $1 == w* ]] && finished && ! grep -q "joined as worker" <<<"$out" && grep -q "never reached the server" <<<"$out"
}

# Every live incarnation ends by itself, with status 0 (or, a worker restarted after the
# job's end, too late).
for role in w0 w1 w2 coordinator shard1 shard2; do
  if ! wait "${PID[$role]}"; then
    too_late "$role" && { echo "chaos: $role was restarted after the job's end and found no server"; continue; }
    tail -n 20 "$WORK/$role.log" >&2
    fail "$role exited with an error (seed $SEED, $done_faults faults)"
  fi
done
line=$(grep "training finished" "$WORK/coordinator.log" | tail -1)
samples=$(sed -n 's/.*training finished: model version [0-9]*, \([0-9]*\) samples.*/\1/p' <<<"$line")
[ "$samples" = "$JOB" ] || fail "the job trained ${samples:-no} samples, not its $JOB (seed $SEED): $line"
# One model across slices: no shard took a sync step without a member the others took.
! grep -h "taken without it" "$WORK"/shard*.log || fail "a slice stepped without a member (seed $SEED)"
final=$(json "s['model_version']")
exported=$(PYTHONPATH=$RUNFILES/tools /usr/bin/python3 -c \
  "from load_safetensors import load; print(load('$EXPORT')[1]['omnilearn.version'])")
[ "$exported" = "$final" ] || fail "the export is of version $exported, the job ended at $final (seed $SEED)"
# Every slice's step history (a digest of each step's members, chained) equals slice 0's at
# the final version, so at every version: the export checks it, and each shard checked its
# own at every checkpoint.
grep -q "every slice's step history at version $final is slice 0's" "$WORK/coordinator.log" ||
  fail "the export did not find every slice's step history equal to slice 0's (seed $SEED)"
! grep -h "step history at version" "$WORK"/shard*.log || fail "a slice's history left slice 0's (seed $SEED)"
# A late fault can kill the evaluating worker after its last evaluation: the job's accuracy
# is then of an earlier version, and the export (the final one) is evaluated, not compared.
if [ "$MODE" = local-keras ]; then
  # The export loads into the Keras model (fit's validation is of an earlier version).
  accuracy=-
  env PYTHONPATH="$RUNFILES/python" TF_CPP_MIN_LOG_LEVEL=2 timeout 300 "$TF_PY" "$KERAS_JOB" evaluate \
    --export="$EXPORT" --out="$WORK/evaluate.json" > "$WORK/evaluate.log" 2>&1 ||
    { tail -n 20 "$WORK/evaluate.log" >&2; fail "the export does not load into the Keras model (seed $SEED)"; }
  evaluated=$(/usr/bin/python3 -c "import json; print(round(100 * json.load(open('$WORK/evaluate.json'))['accuracy'], 2))")
else
  # None when no evaluation reached the coordinator's last incarnation (it restarted before the
  # first epoch's end, and w0 was killed before each of its evaluations).
  accuracy=$(json "'-' if s.get('test_accuracy') is None else round(100 * s['test_accuracy'], 2)")
  measured=$(json "s.get('test_accuracy_version')")
  if [ "$accuracy" = - ]; then
    echo "chaos: no worker's evaluation reached the coordinator's last incarnation"
  elif [ "$measured" != "$final" ]; then
    echo "chaos: the job's accuracy is of version $measured, not the final $final"
  fi
  evaluated=$(check_export chaos "$EXPORT" "$([ "$measured" = "$final" ] && echo "$accuracy" || echo -)" \
    --dataset=fashion-mnist)
fi
# The job learnt: 2 epochs of this MLP reach over 80% undisturbed (the Keras CNN's of 18,000
# samples too); chance is 10%.
python3 -c "import sys; sys.exit(0 if $evaluated > 60 else 1)" ||
  fail "the job's export evaluates to ${evaluated}%: it did not learn (seed $SEED)"
rejoins=$(cat "$WORK"/w*.log | grep -c "rejoined as worker" || true)
rollbacks=$(grep -c "went back to its checkpoint" "$WORK/coordinator.log" || true)
replicas=$(grep -c "comes back from its replica\|resumed from slice 0's replica" "$WORK/coordinator.log" || true)
echo "chaos: seed $SEED, $done_faults faults, $rejoins rejoins, $rollbacks rollbacks ($replicas from a replica);" \
  "$samples samples of $JOB;" \
  "$([ "$accuracy" = - ] || echo "accuracy ${accuracy}%, ")the export evaluates to ${evaluated}%; $(( $(date +%s) - start )) s"
echo PASS
