#!/usr/bin/env bash
# A real Slurm cluster on this machine (Debian's slurm-wlm and munge; ../shared/SLURM.md):
# one slurmctld and three slurmd (nodes n1..n3, all on 127.0.0.1, their own ports), then
# `OMNILEARN_SHARDS=1 sbatch --nodes=3 deploy/slurm/omnilearn.sbatch` (one server), the
# script unchanged, trains Fashion-MNIST with workers of different --slowdown
# (OMNILEARN_SLOWDOWNS). Asserted: the
# job exits 0; the summary and the exported model are where the script says; three
# workers named after their nodes finished; accuracy above the bar; the server took the
# address and ports the script derived from Slurm. Then a job with --gres on binaries
# without CUDA is refused with a clear message. The same job as the script runs it by default
# (a server on every node: the coordinator and two shard servers) reaches the same bar. Every daemon this test started is stopped.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/tests/slurm_test.runfiles}/omnilearn
WORK=${TEST_TMPDIR:-$(mktemp -d)}
SBATCH_SCRIPT=$RUNFILES/deploy/slurm/omnilearn.sbatch
# Slurm's unix sockets live under the spool folder and must stay under 108 bytes: a
# short folder of our own, not the test's long temporary path.
CLUSTER=$(mktemp -d /tmp/omnilearn-slurm.XXXXXX)
export SLURM_CONF=$CLUSTER/slurm.conf
STARTED_MUNGED=""
MADE=()  # what this test made outside its folders (the munge key, munged's run folder): removed at its end
fail() { echo "FAIL: $*" >&2; exit 1; }

teardown() {
  /usr/bin/scontrol shutdown >/dev/null 2>&1 || true
  for f in "$CLUSTER"/*.pid; do  # whatever did not stop by itself: ours, by pid
    [ -f "$f" ] || continue
    local pid
    pid=$(cat "$f")
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill "$pid" 2>/dev/null || true
  done
  if [ -n "$STARTED_MUNGED" ]; then
    kill "$STARTED_MUNGED" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$STARTED_MUNGED" 2>/dev/null || break; sleep 0.1; done
  fi
  local made
  for made in "${MADE[@]}"; do rm -rf "$made"; done
  [ -d "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ] && cp -r "$CLUSTER/log" "$TEST_UNDECLARED_OUTPUTS_DIR/slurm-logs" 2>/dev/null
  rm -rf "$CLUSTER"
}
trap teardown EXIT

[ "$(id -u)" -eq 0 ] || fail "the Slurm test runs slurmd as root (as SlurmUser=root)"
for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/sbin/munged; do
  [ -x "$b" ] || fail "$b missing: deploy/install-deps.sh installs slurm-wlm and munge"
done

# ---- munge: a key if there is none; our own munged unless one runs
if [ ! -s /etc/munge/munge.key ]; then
  MADE+=(/etc/munge/munge.key)
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
fi
[ -d /run/munge ] || MADE+=(/run/munge)
mkdir -p /run/munge && chown munge:munge /run/munge
if ! /usr/bin/munge -n >/dev/null 2>&1; then
  su -s /bin/sh munge -c /usr/sbin/munged
  for _ in $(seq 50); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  STARTED_MUNGED=$(cat /run/munge/munged.pid)
fi
/usr/bin/munge -n | /usr/bin/unmunge >/dev/null || fail "munge does not work"

# ---- the cluster: free ports, a configuration of our own, the daemons
read -r CTLD_PORT NODE_PORT < <(/usr/bin/python3 - <<'PY'
import socket
def free(n, start):  # the first of n consecutive free ports from start
    for base in range(start, 40000):
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
ctld = free(1, 16817)
print(ctld, free(3, ctld + 1))
PY
)
HOST=$(hostname -s)
mkdir -p "$CLUSTER/state" "$CLUSTER/log" "$CLUSTER/spool/n1" "$CLUSTER/spool/n2" "$CLUSTER/spool/n3"
cat > "$SLURM_CONF" <<CONF
ClusterName=olt
SlurmctldHost=$HOST
SlurmUser=root
SlurmctldPort=$CTLD_PORT
StateSaveLocation=$CLUSTER/state
SlurmdSpoolDir=$CLUSTER/spool/%n
SlurmctldPidFile=$CLUSTER/slurmctld.pid
SlurmdPidFile=$CLUSTER/slurmd-%n.pid
SlurmctldLogFile=$CLUSTER/log/ctld.log
SlurmdLogFile=$CLUSTER/log/d-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AuthType=auth/munge
MpiDefault=none
ReturnToService=2
NodeName=n[1-3] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$NODE_PORT-$((NODE_PORT + 2)) CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
/usr/sbin/slurmctld -f "$SLURM_CONF"
for n in n1 n2 n3; do /usr/sbin/slurmd -f "$SLURM_CONF" -N "$n"; done
for _ in $(seq 300); do
  [ "$(/usr/bin/sinfo -h -o '%D %t' 2>/dev/null)" = "3 idle" ] && break
  sleep 0.1
done
[ "$(/usr/bin/sinfo -h -o '%D %t')" = "3 idle" ] || { cat "$CLUSTER"/log/*.log >&2; fail "the cluster did not come up"; }
echo "slurm: 3 idle nodes (slurmctld on $CTLD_PORT, slurmd on $NODE_PORT-$((NODE_PORT + 2)))"

# ---- the job on one server, by the deploy script as it is
cd "$WORK"
export OMNILEARN_BIN=$RUNFILES OMNILEARN_EPOCHS=1 OMNILEARN_MODEL=cnn OMNILEARN_GLOBAL_BATCH=96
export OMNILEARN_SLOWDOWNS="1 2 1" OMNILEARN_SERVER_FLAGS="--lr=0.05 --momentum=0.9 --weight_decay=1e-4" OMP_NUM_THREADS=1
rc=0
OMNILEARN_SHARDS=1 timeout 240 /usr/bin/sbatch --wait --nodes=3 --cpus-per-task=1 --time=6 "$SBATCH_SCRIPT" || rc=$?
JOB=$(ls omnilearn-*.out 2>/dev/null | sed -n 's/omnilearn-\([0-9]*\)\.out/\1/p' | head -n 1 || true)
[ -n "$JOB" ] && cat "omnilearn-$JOB.out"
if [ "$rc" -ne 0 ] || [ -z "$JOB" ]; then
  /usr/bin/squeue >&2 || true
  tail -n 30 "$CLUSTER"/log/*.log >&2
  fail "the job exited $rc"
fi
OUT=$WORK/omnilearn-$JOB
[ -s "$OUT/summary.json" ] || fail "no summary at $OUT/summary.json"
[ -s "$OUT/model.safetensors" ] || fail "no exported model at $OUT/model.safetensors"
PORT=$((20000 + (JOB % 600) * 64))
grep -q "server on n1 (127.0.0.1:$PORT)" "omnilearn-$JOB.out" || fail "the server's address is not Slurm's NodeAddr"
/usr/bin/python3 - "$OUT/summary.json" <<'PY' || fail "the job's summary is wrong"
import json, sys
s = json.load(open(sys.argv[1]))
names = sorted(w["name"] for w in s["workers"] if w["state"] == "left")
samples = {w["name"]: w["samples"] for w in s["workers"]}
print(f"slurm job: accuracy {s['test_accuracy']:.4f}, version {s['model_version']}, workers {names}, "
      f"samples trained {samples}")
assert names == ["n1-0", "n2-0", "n3-0"], names
# n2-0 runs at --slowdown=2 (OMNILEARN_SLOWDOWNS): the controller gave it less to train.
assert samples["n2-0"] < 0.8 * min(samples["n1-0"], samples["n3-0"]), samples
assert s["test_accuracy"] >= 0.84, s["test_accuracy"]
PY

# ---- the same job as the script runs it by default: the coordinator on n1, shard servers on n2 and n3
rc=0
timeout 240 /usr/bin/sbatch --wait --nodes=3 --cpus-per-task=1 --time=6 --output=sharded-%j.out \
  "$SBATCH_SCRIPT" || rc=$?
SJOB=$(ls sharded-*.out 2>/dev/null | sed -n 's/sharded-\([0-9]*\)\.out/\1/p' | head -n 1 || true)
[ -n "$SJOB" ] && cat "sharded-$SJOB.out"
[ "$rc" -eq 0 ] && [ -n "$SJOB" ] || { tail -n 30 "$CLUSTER"/log/*.log >&2; fail "the sharded job exited $rc"; }
SPORT=$((20000 + (SJOB % 600) * 64))
for k in 1 2; do
  grep -q "shard $k registered from 127.0.0.1:$((SPORT + 64 - 2 * k))" "sharded-$SJOB.out" ||
    fail "shard $k did not register from the port the script gave it"
done
/usr/bin/python3 - "$WORK/omnilearn-$SJOB/summary.json" <<'PY' || fail "the sharded job's summary is wrong"
import json, sys
s = json.load(open(sys.argv[1]))
print(f"sharded slurm job: accuracy {s['test_accuracy']:.4f}, version {s['model_version']}")
assert sorted(w["name"] for w in s["workers"] if w["state"] == "left") == ["n1-0", "n2-0", "n3-0"]
assert s["test_accuracy"] >= 0.84, s["test_accuracy"]
PY
# Every server kept its slice's checkpoints; the coordinator exported the whole model.
for d in checkpoints shard-1/checkpoints shard-2/checkpoints; do
  ls "$WORK/omnilearn-$SJOB/$d"/ckpt-*.safetensors > /dev/null 2>&1 || fail "the sharded job wrote no checkpoint in $d"
done
[ -s "$WORK/omnilearn-$SJOB/model.safetensors" ] || fail "the sharded job exported no model"
grep -q "to restart it: srun --jobid=$SJOB" "sharded-$SJOB.out" || fail "the script did not print how to restart a shard"
grep -q "to restart the server: srun --jobid=$SJOB .*--shards=3" "sharded-$SJOB.out" ||
  fail "the script did not print how to restart the coordinator"

# ---- GPUs asked of binaries without CUDA: refused before anything starts
cat > gres.sh <<'EOF2'
#!/bin/bash
export SLURM_GPUS_ON_NODE=1  # what Slurm sets for --gres=gpu:1 (no GPUs are configured here)
exec bash "$1"
EOF2
rc=0
timeout 60 /usr/bin/sbatch --wait --nodes=1 --cpus-per-task=1 --time=2 --output=gres-%j.out gres.sh "$SBATCH_SCRIPT" || rc=$?
[ "$rc" -ne 0 ] || fail "a GPU job with CPU-only binaries was not refused"
grep -q "cannot use them; build it against a CUDA LibTorch" gres-*.out || { cat gres-*.out >&2; fail "no clear refusal"; }
echo "refused: $(grep 'GPUs were allocated' gres-*.out)"
echo "slurm_test: OK"
