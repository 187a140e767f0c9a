# Shared helpers for the multi-process tests: a server and workers on 127.0.0.1,
# every process ours, every wait bounded, everything stopped on exit.
set -euo pipefail

RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin}/omnilearn
SERVER=$RUNFILES/server/omnilearn_server
WORKER=$RUNFILES/worker/omnilearn_worker
WORK=${TEST_TMPDIR:-$(mktemp -d)}
export OMP_NUM_THREADS=1
STARTED=()
# The suite's SGD jobs train with momentum 0.9 and weight decay 1e-4, the server's defaults
# until they became torch.optim.SGD's (0 and 0): their accuracy bounds were set with these.
SGD_FLAGS=(--momentum=0.9 --weight_decay=1e-4)

stop_all() {
  for p in "${STARTED[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
}
trap stop_all EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# select_parts "PART..." ARG...: the parts of a test that its arguments name, all of them
# when none (the full tier runs all, the gate one), into PARTS; a part the test lacks fails it.
# wanted PART: whether PART is one of PARTS.
select_parts() {
  local all=($1) part
  shift
  PARTS=("$@")
  [ ${#PARTS[@]} -gt 0 ] || PARTS=("${all[@]}")
  for part in "${PARTS[@]}"; do
    [[ " ${all[*]} " == *" $part "* ]] || fail "no part '$part' (this test's parts: ${all[*]})"
  done
}
wanted() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }

# use_cluster NAME [SUFFIX...]: this test runs on the emulated cluster (tests/cluster.sh; needs
# root). Sets CLUSTER (the script) and P (NAME and this shell's pid: the hosts' prefix); at
# exit the processes started are stopped and the hosts of P (and of P followed by each SUFFIX)
# taken down.
use_cluster() {
  CLUSTER=$RUNFILES/tests/cluster.sh
  [ "$(id -u)" = 0 ] || fail "needs root (network namespaces)"
  P=$1$$
  sweep_stale_hosts "$1"
  CLUSTER_PREFIXES=("$P")
  local suffix
  for suffix in "${@:2}"; do CLUSTER_PREFIXES+=("$P$suffix"); done
  trap cluster_cleanup EXIT
}
# sweep_stale_hosts NAME: takes down the hosts an earlier run of the test NAME left behind
# (killed before its trap ran): a prefix NAME<pid>[suffix] whose shell is gone. Only
# namespaces go; no process is signalled.
sweep_stale_hosts() {
  local ns prefix owner
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    prefix=${ns%%-*}
    [[ "$prefix" == "$1"[0-9]* ]] || continue
    owner=${prefix#"$1"}
    owner=${owner%%[!0-9]*}
    kill -0 "$owner" 2>/dev/null && continue
    echo "taking down $prefix's hosts: left by a run of $1 whose shell ($owner) is gone" >&2
    "$CLUSTER" down "$prefix"
  done
}
# on HOST CMD...: (after use_cluster) runs CMD inside HOST, bounded (300 s), in the background;
# its pid in PID, appended to PIDS and STARTED.
on() {
  local host=$1; shift
  timeout 300 "$CLUSTER" exec "$P" "$host" "$@" &
  PID=$!
  PIDS+=($!)
  STARTED+=($!)
}
# events CASE: each of CASE's logs ($WORK/CASE.*.log) without its per-iteration lines (the
# cuts, the drops, the rejoins, the rollbacks), its last 40 lines each, with the time the log
# was last written.
events() {
  local log
  for log in "$WORK/$1".*.log; do
    echo "==> $log (last written $(date -r "$log" +%T)) <=="
    grep -v " it=[0-9]" "$log" | tail -n 40
  done
}
cluster_cleanup() {
  stop_all
  local prefix
  for prefix in "${CLUSTER_PREFIXES[@]}"; do "$CLUSTER" down "$prefix"; done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# launch_server NAME [flags...]: a server on $PORT in the background, its output in
# NAME.server.log; sets SERVER_PID and SUMMARY (start_server and restart_server wait for it).
launch_server() {
  local name=$1; shift
  SUMMARY=$WORK/$name.json
  timeout 300 "$SERVER" --bind=127.0.0.1 --port="$PORT" --summary_json="$SUMMARY" --quiet --metrics_port=0 "${SGD_FLAGS[@]}" "$@" \
    > "$WORK/$name.server.log" 2>&1 &
  SERVER_PID=$!
  STARTED+=("$SERVER_PID")
}

# start_server NAME [flags...]: sets SERVER_PID, PORT, SUMMARY.
start_server() {
  local name=$1 attempt; shift
  for attempt in 1 2 3; do
    PORT=$(free_port)
    launch_server "$name" "$@"
    # Up to 30 s: a loaded machine can take seconds to start a process that loads LibTorch.
    wait_for_line "$WORK/$name.server.log" "listening\|cannot listen on 127.0.0.1:$PORT" 300 || break
    grep -q listening "$WORK/$name.server.log" && return 0
    # free_port's port was taken by another process (a test beside this one) before the
    # server bound it: the server exits; try another port.
    wait "$SERVER_PID" 2>/dev/null || true
    echo "start_server $name: port $PORT was taken meanwhile (attempt $attempt); another port" >&2
  done
  cat "$WORK/$name.server.log" >&2
  fail "server $name did not start"
}

# restart_server NAME [flags...]: a server again on $PORT, where its workers (and shards)
# reconnect; sets SERVER_PID and SUMMARY.
restart_server() {
  local name=$1; shift
  launch_server "$name" "$@"
  wait_for_line "$WORK/$name.server.log" "listening" 300 ||
    { cat "$WORK/$name.server.log" >&2; fail "server $name did not start again on port $PORT"; }
}

# start_worker NAME LOG [flags...]: appends to WORKER_PIDS. The server is up when this runs
# (start_server waited for it), so a slow first handshake on a loaded machine is waited out
# (--connect_timeout=60) instead of ending the worker; a later flag overrides it.
start_worker() {
  local name=$1 log=$2; shift 2
  timeout 240 "$WORKER" --server="127.0.0.1:$PORT" --name="$name" --device=cpu --dataset=synthetic \
    --model=mlp --log_every=1 --connect_timeout=60 "$@" > "$log" 2>&1 &
  WORKER_PIDS+=($!)
  STARTED+=($!)
}

# wait_for_line FILE PATTERN [TENTHS]: until PATTERN shows in FILE (default 10 s).
wait_for_line() {
  for _ in $(seq "${3:-100}"); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# wait_until TENTHS WHAT COMMAND...: until COMMAND succeeds, every 0.1 s; past TENTHS
# tenths of a second the test fails, saying it waited for WHAT.
wait_until() {
  local tenths=$1 what=$2
  shift 2
  for _ in $(seq "$tenths"); do
    "$@" && return 0
    sleep 0.1
  done
  fail "waited $((tenths / 10)) s for $what"
}

# stop_server: SIGTERM, wait, the summary must exist.
stop_server() {
  kill -TERM "$SERVER_PID"
  wait "$SERVER_PID" || fail "server exited with an error"
  [ -s "$SUMMARY" ] || fail "no summary JSON at $SUMMARY"
}

wait_workers() {
  local rc=0
  for p in "${WORKER_PIDS[@]}"; do wait "$p" || rc=1; done
  WORKER_PIDS=()
  return $rc
}

# json EXPR: evaluates a Python expression over the summary `s`.
json() { python3 -c "import json,sys; s=json.load(open('$SUMMARY')); print($1)"; }

# first_and_last_loss LOG: "first last" losses a worker printed.
first_and_last_loss() {
  python3 - "$1" <<'PY'
import re, sys
losses = [float(m.group(1)) for m in re.finditer(r"loss=([0-9.]+)", open(sys.argv[1]).read())]
if len(losses) < 10: sys.exit(f"only {len(losses)} losses logged")
k = 5
print(sum(losses[:k]) / k, sum(losses[-k:]) / k)
PY
}

# check_export RUN FILE ACCURACY [DATA FLAGS...]: FILE (an export of the MLP) holds every
# tensor at its full shape, and the worker's evaluation of it (on the data the flags name)
# is the job's ACCURACY to 0.1 point (ACCURACY "-": the job measured none on the exported
# version, nothing to compare); prints that evaluation.
check_export() {
  local run=$1 file=$2 accuracy=$3; shift 3
  PYTHONPATH=$RUNFILES/tools /usr/bin/python3 - "$file" <<'PY' || fail "$run: the export is not the whole model"
import sys
from load_safetensors import load
t, meta = load(sys.argv[1])
want = {"fc1.weight": (256, 784), "fc1.bias": (256,), "fc2.weight": (128, 256), "fc2.bias": (128,),
        "fc3.weight": (10, 128), "fc3.bias": (10,)}
assert {k: v.shape for k, v in t.items()} == want, {k: v.shape for k, v in t.items()}
assert meta["format"] == "omnilearn.model.v1", meta
PY
  local line again
  line=$(timeout 120 "$WORKER" --evaluate_only --init_from="$file" --model=mlp --device=cpu "$@")
  again=$(grep -o 'test accuracy [0-9.]*' <<<"$line" | grep -o '[0-9.]*$')
  [ "$accuracy" = - ] || python3 -c "import sys; sys.exit(0 if abs($again - $accuracy) <= 0.1 else 1)" ||
    fail "$run: the export evaluates to ${again}%, the job reported $accuracy%"
  echo "$again"
}
