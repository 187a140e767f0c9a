#!/usr/bin/env bash
# The daemon behaves like one (multi-process, 127.0.0.1, every wait bounded):
# - --help lists each binary's own flags; out-of-range numbers and unknown names are
#   refused with a message naming the flag and the valid range or names; a mistyped flag
#   with the nearest one; a server never reached within seconds, naming --server;
# - a second server on a busy port fails instead of sharing it;
# - joins, leaves and the wait for missing workers are logged;
# - a second worker under a live worker's name is refused (ALREADY_EXISTS);
# - Ctrl-C on a worker tells the server it left: the sync round goes on at once;
# - SIGTERM on the server tells every worker to stop: they exit 0;
# - a finished job refuses new joins, unless --reset_when_done starts a new job (with
#   another model) on the same daemon.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()

# ---- flags
help=$("$SERVER" --help 2>&1 || true)
for f in --num_workers --exit_when_done --optimizer --lr_schedule --checkpoint_dir; do
  grep -q -- "$f" <<<"$help" || fail "server --help does not list $f"
done
whelp=$("$WORKER" --help 2>&1 || true)
for f in --server --log_samples --reconnect_timeout; do grep -q -- "$f" <<<"$whelp" || fail "worker --help lacks $f"; done
grep -q "No flags matched" <<<"$help$whelp" && fail "--help printed 'No flags matched'"
expect_refusal() {  # expect_refusal PATTERN COMMAND...: exits non-zero, stderr names the problem
  local pattern=$1 out; shift
  if out=$("$@" 2>&1); then fail "accepted: $*"; fi
  grep -q -- "$pattern" <<<"$out" || fail "'$*' said: $out (want: $pattern)"
}
expect_refusal "--port must be in \[0, 65535\], got 99999" "$SERVER" --port=99999
expect_refusal "--lr must be in" "$SERVER" --lr=-1
expect_refusal "unknown optimizer 'lbfgs' (want one of sgd, adam, adamw, adadelta" "$SERVER" --optimizer=lbfgs
expect_refusal "round_timeout must be shorter than the lease" "$SERVER" --port=0 --metrics_port=0 --round_timeout_s=90 --lease_s=60
# The names of the previous release still work, for one release, with a warning.
expect_refusal "round_timeout must be shorter than the lease" "$SERVER" --port=0 --metrics_port=0 --round_timeout=90 --lease_s=120 --lease=60
expect_refusal "warning: --lease is deprecated and goes in the next release: use --lease_s" "$SERVER" --port=0 --metrics_port=0 --round_timeout=90 --lease=60
expect_refusal "--epochs must be in \[0, 1e+06\], got -1" "$WORKER" --epochs=-1
expect_refusal "want mlp, cnn, cnn_bn" "$WORKER" --model=resnet --server=127.0.0.1:1 --reconnect_timeout=0
expect_refusal "want fashion-mnist, synthetic or tensors:PATH" "$WORKER" --dataset=imagenet --server=127.0.0.1:1 --reconnect_timeout=0
# A typo gets the nearest flag; a server never reached is an error within seconds, naming --server.
expect_refusal "Unknown command line flag 'epoch'. Did you mean '--epochs'?" "$WORKER" --epoch=1
expect_refusal "Did you mean '--num_workers'?" "$SERVER" --num_worker=2
expect_refusal "never reached the server within 1 s.*(--server=127.0.0.1:1)" timeout 60 "$WORKER" --server=127.0.0.1:1 \
  --connect_timeout=1 --dataset=synthetic --model=mlp
expect_refusal "the server's address does not resolve.*(--server=omnilearn-no-such-host.invalid:1)" timeout 60 \
  "$WORKER" --server=omnilearn-no-such-host.invalid:1 --dataset=synthetic --model=mlp

# ---- busy port, logs, names, Ctrl-C on a worker
# Not quiet, equal static batches: a plan line only when membership changes the plan (not
# at every adjustment), and progress lines every second.
start_server sync --mode=sync --num_workers=2 --global_batch=64 --round_timeout_s=100 --lease_s=120 --controller=off \
  --quiet=false --progress_every_s=1
if timeout 20 "$SERVER" --bind=127.0.0.1 --port="$PORT" --metrics_port=0 > "$WORK/second.log" 2>&1; then
  fail "a second server started on the busy port $PORT"
fi
grep -q "cannot listen" "$WORK/second.log" || fail "the second server did not say why it stopped"
start_worker a "$WORK/a.log" --epochs=0 --max_iterations=100000 --slowdown=3 --log_every=1
wait_for_line "$WORK/sync.server.log" "waiting for 1 of 2 workers" 100 || fail "no 'waiting for' line"
wait_for_line "$WORK/a.log" "joining the server" 100 || fail "the worker did not say it is joining"
start_worker b "$WORK/b.log" --epochs=0 --max_iterations=100000 --slowdown=3 --log_every=1
b_pid=${WORKER_PIDS[1]}
wait_for_line "$WORK/b.log" "it=5 " 300 || fail "b did not train"
# The same name again, while b is alive: it waits (a restarted b would, for its old session's
# end) within its reconnect window, saying why, then is refused; b untouched.
timeout 60 "$WORKER" --server="127.0.0.1:$PORT" --name=b --device=cpu --dataset=synthetic --model=mlp --epochs=0 \
  --max_iterations=5 --reconnect_timeout=3 > "$WORK/b2.log" 2>&1 && fail "a second worker named b was admitted"
grep -q "our name is still another session's" "$WORK/b2.log" || { cat "$WORK/b2.log" >&2; fail "the duplicate did not say why it waits"; }
grep -q "ALREADY_EXISTS" "$WORK/b2.log" || { cat "$WORK/b2.log" >&2; fail "the duplicate name was not refused with ALREADY_EXISTS"; }
# Ctrl-C on b: it leaves, and a's rounds go on without waiting 100 s for it.
before=$(grep -c "it=" "$WORK/a.log")
pkill -INT -P "$b_pid"
wait "$b_pid" && fail "b exited 0 after SIGINT"
wait_for_line "$WORK/sync.server.log" "worker b left (interrupted)" 100 || fail "the server did not hear b leave"
WORKER_PIDS=("${WORKER_PIDS[0]}")
a_goes_on() { [ "$(grep -c "it=" "$WORK/a.log")" -gt $((before + 20)) ]; }
wait_until 300 "a's rounds after b left (stalled?)" a_goes_on
# SIGTERM on the server: a is told to stop and exits 0.
kill -TERM "$SERVER_PID"
wait_workers || { tail -3 "$WORK/a.log" >&2; fail "the worker did not exit 0 when the server stopped"; }
grep -q "the server stopped the job" "$WORK/a.log" || fail "a did not say the server stopped the job"
wait "$SERVER_PID" || fail "the server exited with an error on SIGTERM"
for line in "worker a joined" "worker b joined" "all 2 workers joined" "refused a join" "worker a left (told to stop)" \
    "progress: epoch"; do
  grep -q "$line" "$WORK/sync.server.log" || fail "the server log lacks '$line'"
done
plans=$(grep -c "^plan " "$WORK/sync.server.log" || true)
adjustments=$(sed -n 's/^final: plan [0-9]* (adj \([0-9]*\)).*/\1/p' "$WORK/sync.server.log")
echo "plan lines: $plans for $adjustments adjustments"
# Four membership changes (a, b join; b, a leave) re-plan; the adjustments in between do not.
[ "$plans" -le 4 ] && [ "${adjustments:-0}" -gt 5 ] || fail "$plans plan lines for $adjustments adjustments"

# ---- a finished job tells a late worker so (it exits 0: nothing to train)...
start_server done --mode=async --num_workers=1 --global_batch=32
# No --name: the worker is <hostname>-<pid>.
timeout 60 "$WORKER" --server="127.0.0.1:$PORT" --device=cpu --dataset=synthetic --model=mlp --epochs=0.05 \
  > "$WORK/d0.log" 2>&1 &
d0=$!
STARTED+=("$d0")
wait "$d0" || fail "d0 failed"
grep -q "worker $(hostname)-[0-9]* joined" "$WORK/done.server.log" || fail "the default name is not <hostname>-<pid>"
wait_for_line "$WORK/done.server.log" "training finished" 100 || fail "no 'training finished' line"
timeout 30 "$WORKER" --server="127.0.0.1:$PORT" --name=late --device=cpu --dataset=synthetic --model=mlp \
  > "$WORK/late.log" 2>&1 || { cat "$WORK/late.log" >&2; fail "a worker joining a finished job failed"; }
grep -q "the job on this server is finished (model version [0-9]*, [0-9]* samples trained): nothing to train" \
  "$WORK/late.log" || { cat "$WORK/late.log" >&2; fail "no clear answer"; }
grep -q "worker late joined" "$WORK/done.server.log" && fail "a worker joined a finished job"
stop_server

# ---- ...unless --reset_when_done: a second job, with another model, on the same daemon.
start_server daemon --mode=sync --num_workers=1 --global_batch=32 --reset_when_done
start_worker j1 "$WORK/j1.log" --epochs=0.05
wait_workers || fail "the first job's worker failed"
start_worker j2 "$WORK/j2.log" --epochs=0.05 --model=cnn
wait_workers || { tail -3 "$WORK/j2.log" >&2; fail "the second job (another model) failed"; }
grep -q "a new job starts" "$WORK/daemon.server.log" || fail "the daemon did not start a new job"
[ "$(grep -c "training finished" "$WORK/daemon.server.log")" -eq 2 ] || fail "two jobs should have finished"
stop_server
echo PASS
