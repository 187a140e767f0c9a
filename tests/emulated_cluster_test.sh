#!/usr/bin/env bash
# The emulated cluster (tests/cluster.sh) under real jobs: a server host and two worker
# hosts, one worker behind a 200 Mbit/s link. Checks: the measured link rate is near its cap
# in both directions; with emulated devices 1:3 per sample and compute balanced, the batches
# settle near the devices' ratio (3:1); with equal devices and whole iterations balanced
# (the default), the worker behind the slow link gets the smaller batch; a cluster whose
# set-up fails, or whose user fails, leaves nothing behind; every host has the TCP congestion
# control asked for (cubic unless OMNILEARN_CLUSTER_TCP_CC says otherwise), whatever the
# machine's default, and one the kernel lacks is refused; likewise slow start after idle
# (OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE: 1 unless told 0, anything else refused). Needs root.
source "$(dirname "$0")/e2e_lib.sh"
use_cluster olc x  # and a second cluster, ${P}x, for the bad rate and the failing user
namespaces() { ip netns list | awk '{print $1}' | grep -c "^$1-" || true; }

# A set-up that fails half way (a bad rate for the second host) removes the first host.
if "$CLUSTER" up "${P}x" a=100mbit b=fast 2>"$WORK/bad.log"; then fail "a bad rate was accepted"; fi
grep -q "is not like 10gbit" "$WORK/bad.log" || fail "no clear message for a bad rate: $(cat "$WORK/bad.log")"
[ "$(namespaces "${P}x")" = 0 ] || fail "a failed set-up left namespaces behind"
# A user that fails after the set-up: its trap takes the cluster down.
if bash -c "trap '\"$CLUSTER\" down ${P}x' EXIT; \"$CLUSTER\" up ${P}x a=100mbit b=100mbit >/dev/null; false"; then
  fail "the failing user did not fail"
fi
[ "$(namespaces "${P}x")" = 0 ] || fail "a failed run left namespaces behind"
# The hosts' congestion control: one the kernel lacks is refused before anything is made.
if OMNILEARN_CLUSTER_TCP_CC=nosuchcc "$CLUSTER" up "${P}x" a=100mbit 2>"$WORK/cc.log"; then
  fail "an unknown congestion control was accepted"
fi
grep -q "is not one of this kernel's" "$WORK/cc.log" || fail "no clear message for a bad congestion control"
[ "$(namespaces "${P}x")" = 0 ] || fail "a refused congestion control left namespaces behind"
if OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE=yes "$CLUSTER" up "${P}x" a=100mbit 2>"$WORK/ssai.log"; then
  fail "slow start after idle 'yes' was accepted"
fi
grep -q "want 1 (Linux's default) or 0" "$WORK/ssai.log" || fail "no clear message for a bad slow start after idle"
[ "$(namespaces "${P}x")" = 0 ] || fail "a refused slow start after idle left namespaces behind"
OMNILEARN_CLUSTER_TCP_CC=reno OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE=0 "$CLUSTER" up "${P}x" a=100mbit >/dev/null
cc_reno=$("$CLUSTER" exec "${P}x" a cat /proc/sys/net/ipv4/tcp_congestion_control)
ssai_0=$("$CLUSTER" exec "${P}x" a cat /proc/sys/net/ipv4/tcp_slow_start_after_idle)
"$CLUSTER" down "${P}x"
[ "$cc_reno" = reno ] || fail "OMNILEARN_CLUSTER_TCP_CC=reno gave the host $cc_reno"
[ "$ssai_0" = 0 ] || fail "OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE=0 gave the host $ssai_0"

"$CLUSTER" up "$P" ps=1gbit fast=1gbit slow=200mbit
[ "$(namespaces "$P")" = 4 ] || fail "expected 3 hosts and the bridge"
cc=$("$CLUSTER" exec "$P" slow cat /proc/sys/net/ipv4/tcp_congestion_control)
[ "$cc" = "${OMNILEARN_CLUSTER_TCP_CC:-cubic}" ] || fail "a host's congestion control is $cc"
ssai=$("$CLUSTER" exec "$P" slow cat /proc/sys/net/ipv4/tcp_slow_start_after_idle)
[ "$ssai" = "${OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE:-1}" ] || fail "a host's slow start after idle is $ssai"
up_rate=$("$CLUSTER" probe "$P" slow ps 20)
down_rate=$("$CLUSTER" probe "$P" ps slow 20)
echo "200 Mbit/s link: upload $up_rate, download $down_rate Mbit/s"
python3 -c "import sys; sys.exit(0 if all(150 <= float(r) <= 210 for r in sys.argv[1:]) else 1)" \
  "$up_rate" "$down_rate" || fail "the capped link ran at $up_rate / $down_rate Mbit/s, not near 200"

PS=$("$CLUSTER" addr "$P" ps)
# run_job NAME BALANCE FAST_DEVICE SLOW_DEVICE: a sync job of 150 rounds, the server on "ps",
# worker "fast" on its 1 Gbit/s host, worker "slow" behind the 200 Mbit/s link.
run_job() {
  local job=$1 balance=$2
  SUMMARY=$WORK/$job.json
  timeout 200 "$CLUSTER" exec "$P" ps "$SERVER" --bind="$PS" --port=50051 --metrics_port=0 --mode=sync "${SGD_FLAGS[@]}" \
    --num_workers=2 --global_batch=64 --adjust_every=5 --balance="$balance" --summary_json="$SUMMARY" --quiet \
    > "$WORK/$job.server.log" 2>&1 &
  SERVER_PID=$!
  STARTED+=("$SERVER_PID")
  wait_for_line "$WORK/$job.server.log" listening || { cat "$WORK/$job.server.log" >&2; fail "server did not start"; }
  WORKER_PIDS=()
  for spec in "fast:$3" "slow:$4"; do
    name=${spec%%:*}
    timeout 200 "$CLUSTER" exec "$P" "$name" "$WORKER" --server="$PS:50051" --name="$name" --device=cpu \
      --dataset=synthetic --model=mlp --epochs=0 --max_iterations=150 --log_every=50 \
      --emulate_device="${spec#*:}" > "$WORK/$job.$name.log" 2>&1 &
    WORKER_PIDS+=($!)
    STARTED+=($!)
  done
  wait_workers || { tail -n 5 "$WORK"/$job.*.log >&2; fail "$job: a worker failed"; }
  stop_server
  fast=$(json "[w['final_batch'] for w in s['workers'] if w['name'] == 'fast'][0]")
  slow=$(json "[w['final_batch'] for w in s['workers'] if w['name'] == 'slow'][0]")
  overruns=$(cat "$WORK/$job.fast.log" "$WORK/$job.slow.log" | grep -c "took longer than its emulated time" || true)
  echo "$job: batches after 150 rounds: fast $fast, slow $slow; workers whose real step overran: $overruns"
}

# Devices 1:3 per sample, compute balanced: 1 + 0.5 b_fast = 1 + 1.5 b_slow, b_fast + b_slow = 64.
run_job devices compute 1:0.5:0.05 1:1.5:0.05
grep -q "emulated device 1 ms + 1.5 ms/sample, jitter 0.05" "$WORK/devices.slow.log" || fail "no profile logged"
[ "$fast" -ge 42 ] && [ "$fast" -le 52 ] || fail "the fast device's batch $fast is not near 48"

# Equal devices, whole iterations balanced: the worker behind the slow link (about 80 ms of
# link per iteration against 16) gets the smaller batch, near 2 b_fast - 2 b_slow = 64.
run_job links iteration 1:2:0.05 1:2:0.05
[ "$slow" -le 24 ] && [ "$fast" -ge 40 ] || fail "the slow link's worker got $slow of 64 (fast: $fast)"
echo "PASS"
