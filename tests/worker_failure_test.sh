#!/usr/bin/env bash
# A worker killed mid-run in sync mode does not stop the others: its rounds time out,
# it is dropped, its share goes to the survivors, and they finish.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
start_server failure --mode=sync --num_workers=3 --global_batch=96 --round_timeout_s=2 --adjust_every=5
start_worker w0 "$WORK/w0.log" --epochs=0 --max_iterations=80
start_worker w1 "$WORK/w1.log" --epochs=0 --max_iterations=80
start_worker victim "$WORK/victim.log" --epochs=0 --max_iterations=100000
victim=${WORKER_PIDS[2]}
WORKER_PIDS=("${WORKER_PIDS[@]:0:2}")
victim_trained() { [ "$(grep -c 'loss=' "$WORK/victim.log" || true)" -ge 10 ]; }
wait_until 300 "the victim's first 10 iterations" victim_trained
# $victim is our `timeout` wrapper: kill the worker it started, then the wrapper.
pkill -KILL -P "$victim" || true
kill -KILL "$victim" 2>/dev/null || true
start=$(date +%s)
wait_workers || { tail -5 "$WORK"/w*.log >&2; fail "a surviving worker failed"; }
echo "survivors finished $(( $(date +%s) - start )) s after the kill"
stop_server
[ "$(json "sum(1 for w in s['workers'] if w['name'] in ('w0','w1') and w['iterations'] == 80)")" -eq 2 ] \
  || fail "survivors did not complete their iterations"
[ "$(json "[w['state'] for w in s['workers'] if w['name'] == 'victim'][0]")" = dropped ] \
  || fail "the killed worker was not dropped"
echo "PASS"
