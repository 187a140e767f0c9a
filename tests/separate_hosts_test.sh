#!/usr/bin/env bash
# Separate hosts, for real: three hosts of the emulated cluster (tests/cluster.sh: network
# namespaces of our own on a private subnet, joined by veth pairs to a bridge that lives in
# a fourth namespace, so the machine's own network is never touched). The server listens
# on its host's address only, with a bearer token; the workers reach it across the
# bridge and train. Everything is removed on exit, failed or not. Needs root.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
command -v ip >/dev/null || fail "needs iproute2"
use_cluster ol
"$CLUSTER" up "$P" ps=10gbit w1=10gbit w2=10gbit >/dev/null || fail "cannot create network namespaces here"
echo "token-$RANDOM$RANDOM" > "$WORK/token"
PS=$("$CLUSTER" addr "$P" ps)
timeout 200 "$CLUSTER" exec "$P" ps "$SERVER" --bind="$PS" --port=50051 --metrics_port=9400 --metrics_bind="$PS" \
  --auth_token_file="$WORK/token" --mode=sync "${SGD_FLAGS[@]}" --num_workers=2 --global_batch=64 --adjust_every=3 \
  --summary_json="$WORK/hosts.json" --quiet > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
STARTED+=("$SERVER_PID")
SUMMARY=$WORK/hosts.json
wait_for_line "$WORK/server.log" listening || { cat "$WORK/server.log" >&2; fail "server did not start"; }
# The machine's own network cannot reach the server host: it really is elsewhere.
if timeout 3 bash -c "echo > /dev/tcp/$PS/50051" 2>/dev/null; then fail "the server host is reachable from outside"; fi

for i in 1 2; do
  timeout 200 "$CLUSTER" exec "$P" "w$i" "$WORKER" --server="$PS:50051" --auth_token_file="$WORK/token" \
    --name="w$i" --host="host$i" --device=cpu --dataset=synthetic --model=mlp --epochs=0 --max_iterations=40 \
    --slowdown="$i" --log_every=10 > "$WORK/w$i.log" 2>&1 &
  WORKER_PIDS+=($!)
  STARTED+=($!)
done
wait_workers || { tail -n 5 "$WORK"/w*.log >&2; fail "a worker on another host failed"; }
# Prometheus would scrape the server across the network: so does a worker host here.
"$CLUSTER" exec "$P" w1 curl -sf --max-time 5 "http://$PS:9400/metrics" > "$WORK/metrics.prom" ||
  fail "cannot scrape the server from a worker host"
grep -q '^omnilearn_rounds_total [1-9]' "$WORK/metrics.prom" || fail "no rounds in the server's metrics"
stop_server
hosts=$(json "' '.join(sorted(w['host'] for w in s['workers']))")
[ "$hosts" = "host1 host2" ] || fail "workers came from '$hosts'"
[ "$(json "sum(w['iterations'] for w in s['workers'])")" = 80 ] || fail "workers did not finish their iterations"
echo "trained across namespaces: $(json "[(w['name'], w['host'], w['final_batch']) for w in s['workers']]")"
echo "PASS"
