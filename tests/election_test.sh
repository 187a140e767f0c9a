#!/usr/bin/env bash
# No single coordinator (docs/reliability.md, "No single coordinator"): the coordinator's
# role moves to a candidate on another host, decided by etcd. On the emulated cluster
# (tests/cluster.sh), three hosts at 1 Gbit/s: h0 holds candidate A, h1 candidate B, shard 1
# and worker w1, h2 etcd, shard 2 and worker w2. Every server finds the coordinator at
# etcd://h2/<key> (--election for the candidates, --coordinator for the shards, --server for
# the workers); A is started first and elected. Sync, MLP, 2 epochs of 20,000 synthetic
# samples, B=96, memory checkpoints every 2 s, --election_ttl_s=4.
#   lost   h0 lost for good once w1 trained 100 iterations: A SIGKILLed, its disk deleted,
#          never restarted. B is elected once A's lease ran out and takes the job from
#          shard 1's replica of slice 0.
#   cut    h0 cut from both other hosts (etcd's included) once w1 trained 100 iterations:
#          A stops by itself (exit 3) before B is elected (their logged times), B takes the
#          job, then h0 is healed: A stays stopped, and no second coordinator appears.
# Each: every other process exits 0, exactly 40,000 samples were trained, every slice's step
# history equals slice 0's (one model), the export evaluates to the job's accuracy, and etcd
# says the job is finished (a candidate started after the end exits at once, 0). Needs root.
#   election_test.sh [CASE...]   the cases named (default: both)
source "$(dirname "$0")/e2e_lib.sh"
select_parts "lost cut" "$@"
command -v etcd > /dev/null || fail "etcd is not installed (deploy/install-deps.sh installs etcd-server)"
use_cluster oel
"$CLUSTER" up "$P" h0=1gbit h1=1gbit h2=1gbit > /dev/null
H0=$("$CLUSTER" addr "$P" h0)
H1=$("$CLUSTER" addr "$P" h1)
H2=$("$CLUSTER" addr "$P" h2)
head -c 32 /dev/urandom | base64 > "$WORK/peer.token"
SHARD_FLAGS=(--peer_token_file="$WORK/peer.token" --shards=3 --partition_mb=0.25)
JOB_FLAGS=(--mode=sync --num_workers=2 --global_batch=96 --lr=0.05 --round_timeout_s=5 --lease_s=10 --exit_when_done
           --memory_checkpoint_every_s=2 --election_ttl_s=4)

# etcd_on_h2 CASE: a one-member etcd on h2 with its data in WORK; sets ETCD_PID.
etcd_on_h2() {
  on h2 etcd --name "$1" --data-dir "$WORK/$1.etcd" --listen-client-urls "http://$H2:2379" \
    --advertise-client-urls "http://$H2:2379" --listen-peer-urls "http://$H2:2380" \
    --initial-advertise-peer-urls "http://$H2:2380" --initial-cluster "$1=http://$H2:2380"
  ETCD_PID=$PID
}

# candidate CASE NAME HOST ADDR: a candidate coordinator on HOST; sets PID.
candidate() {
  local case=$1 name=$2 host=$3 addr=$4
  on "$host" "$SERVER" --bind="$addr" --port=50051 --metrics_port=0 --quiet "${SGD_FLAGS[@]}" "${JOB_FLAGS[@]}" \
    "${SHARD_FLAGS[@]}" --election="$ELECTION" --summary_json="$WORK/$case.$name.json" \
    --export="$WORK/$case.safetensors" > "$WORK/$case.$name.log" 2>&1
}

# run CASE: etcd, A (elected), B (standing by), the shards and the workers; returns once w1
# trained 100 iterations. Sets A_PID, B_PID and OTHERS (every pid but A's).
run() {
  local case=$1 h
  ELECTION="etcd://$H2:2379/omnilearn/$case"
  etcd_on_h2 "$case" > "$WORK/$case.etcd.log" 2>&1
  OTHERS=("$ETCD_PID")
  wait_for_line "$WORK/$case.etcd.log" "ready to serve client requests" 300 || fail "$case: etcd did not start"
  candidate "$case" a h0 "$H0"
  A_PID=$PID
  wait_for_line "$WORK/$case.a.log" "^omnilearn_server: elected at" 300 || fail "$case: A was not elected"
  candidate "$case" b h1 "$H1"
  B_PID=$PID
  OTHERS+=("$PID")
  wait_for_line "$WORK/$case.b.log" "standing by: the coordinator is $H0:50051" 300 || fail "$case: B did not stand by"
  for h in h1 h2; do
    on "$h" "$SERVER" --bind="$("$CLUSTER" addr "$P" "$h")" --port=50052 --metrics_port=0 \
      --coordinator="$ELECTION" --shard_index="${h#h}" "${SHARD_FLAGS[@]}" > "$WORK/$case.shard${h#h}.log" 2>&1
    OTHERS+=("$PID")
  done
  for h in h1 h2; do
    on "$h" "$WORKER" --server="$ELECTION" --name="w${h#h}" --device=cpu --dataset=synthetic --model=mlp --epochs=2 \
      --emulate_device=20:0.5:0 --log_every=1 --connect_timeout=60 --reconnect_timeout=120 \
      --evaluate="$([ "$h" = h1 ] && echo true || echo false)" > "$WORK/$case.w${h#h}.log" 2>&1
    OTHERS+=("$PID")
  done
  trained() { [ "$(grep -c " it=" "$WORK/$case.w1.log" || true)" -ge 100 ]; }
  wait_until 1200 "$case: 100 iterations of w1" trained
}

# finish CASE: B took the job from slice 0's replica and finished it; every process but A
# and etcd exits 0; the count is exact; one model; the export is the job; etcd says finished.
finish() {
  local case=$1 p samples accuracy
  wait_for_line "$WORK/$case.b.log" "resumed from slice 0's replica of version" 1200 ||
    { events "$case" >&2; fail "$case: B did not take the job from slice 0's replica"; }
  for p in "${OTHERS[@]:1}"; do
    wait "$p" || { events "$case" >&2; fail "$case: a process failed"; }
  done
  samples=$(sed -n 's/.*training finished: model version [0-9]*, \([0-9]*\) samples.*/\1/p' "$WORK/$case.b.log")
  [ "${samples:-0}" = 40000 ] || { events "$case" >&2; fail "$case: trained ${samples:-no} samples, not 40000"; }
  grep -q "every slice's step history at version [0-9]* is slice 0's" "$WORK/$case.b.log" ||
    fail "$case: the export did not find every slice's step history equal to slice 0's"
  grep -q "etcd says the job is finished" "$WORK/$case.b.log" || fail "$case: etcd was not told the job finished"
  SUMMARY=$WORK/$case.b.json
  accuracy=$(json "round(100 * s['test_accuracy'], 2)")
  check_export "$case" "$WORK/$case.safetensors" "$accuracy" --dataset=synthetic > /dev/null
  # A candidate started after the end finds the job finished and exits 0 at once.
  candidate "$case" late h1 "$H1"
  wait "$PID" || fail "$case: a candidate started after the job's end did not exit 0"
  grep -q "is finished: nothing to coordinate" "$WORK/$case.late.log" || fail "$case: the late candidate did not say why"
  kill "$ETCD_PID" 2>/dev/null || true
  wait "$ETCD_PID" 2>/dev/null || true
  echo "$case: 40000 samples, $accuracy%; $(grep -o "resumed from slice 0's replica of version [0-9]*" \
    "$WORK/$case.b.log"); $(grep -o "elected at [^:]*:[^:]*:[^:]*" "$WORK/$case.b.log")"
}

if wanted lost; then
  run lost
  kill -KILL "$(pgrep -P "$A_PID")" || fail "lost: A was not running"
  wait "$A_PID" 2>/dev/null || true
  echo "lost: h0 lost for good at $(date -u +%T.%3N)"
  # omnilearn_ctl finds the coordinator elected after it in etcd too.
  wait_for_line "$WORK/lost.b.log" "all 2 workers joined: training starts" 1200 ||
    { events lost >&2; fail "lost: training did not start again under B"; }
  "$CLUSTER" exec "$P" h2 "$RUNFILES/tools/omnilearn_ctl" status --server="$ELECTION" > "$WORK/lost.ctl" 2>&1 ||
    { cat "$WORK/lost.ctl" >&2; fail "lost: omnilearn_ctl status --server=$ELECTION failed"; }
  grep -q "^job 1  sync" "$WORK/lost.ctl" || { cat "$WORK/lost.ctl" >&2; fail "lost: omnilearn_ctl showed no job"; }
  finish lost
fi

if wanted cut; then
  run cut
  "$CLUSTER" cut "$P" h0 h1
  "$CLUSTER" cut "$P" h0 h2
  echo "cut: h0 cut at $(date -u +%T.%3N)"
  wait_for_line "$WORK/cut.b.log" "resumed from slice 0's replica of version" 1200 ||
    { events cut >&2; fail "cut: B did not take the job while h0 was cut off"; }
  rc=0
  wait "$A_PID" || rc=$?
  [ "$rc" = 3 ] || { events cut >&2; fail "cut: A exited $rc, not 3 (stopped for its lease)"; }
  stopped=$(sed -n 's/.*the coordinator stops at once at \([^ ]*\):.*/\1/p' "$WORK/cut.a.log")
  elected=$(sed -n 's/.*elected at \([^ ]*\): this server.*/\1/p' "$WORK/cut.b.log")
  [ -n "$stopped" ] && [ -n "$elected" ] && [[ "$stopped" < "$elected" ]] ||
    { events cut >&2; fail "cut: A stopped at '${stopped}', B elected at '${elected}': not one after the other"; }
  "$CLUSTER" heal "$P" h0 h1
  "$CLUSTER" heal "$P" h0 h2
  echo "cut: A stopped at $stopped, B elected at $elected; h0 healed at $(date -u +%T.%3N)"
  finish cut
fi
echo "PASS (${PARTS[*]})"
