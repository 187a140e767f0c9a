#!/usr/bin/env bash
# Separate hosts, for real: three network namespaces of our own (a server host and two
# worker hosts) on a private subnet, joined by veth pairs to a bridge that lives in a
# fourth namespace, so the machine's own network is never touched. The server listens
# on its host's address only, with a bearer token; the workers reach it across the
# bridge and train. Everything is removed on exit, failed or not. Needs root.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
[ "$(id -u)" = 0 ] || fail "needs root (network namespaces)"
command -v ip >/dev/null || fail "needs iproute2"

TAG=ol$$
LAN=$TAG-lan
HOSTS=("$TAG-ps" "$TAG-w1" "$TAG-w2")
ADDRS=(10.213.7.1 10.213.7.2 10.213.7.3)
cleanup() {
  stop_all
  for ns in "${HOSTS[@]}" "$LAN"; do ip netns del "$ns" 2>/dev/null || true; done
}
trap cleanup EXIT

ip netns add "$LAN" || fail "cannot create network namespaces here"
ip -n "$LAN" link add br0 type bridge
ip -n "$LAN" link set br0 up
for i in 0 1 2; do
  ns=${HOSTS[$i]}
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$TAG-v$i" netns "$ns" type veth peer name "port$i" netns "$LAN"
  ip -n "$ns" link set "$TAG-v$i" name eth0
  ip -n "$ns" addr add "${ADDRS[$i]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$LAN" link set "port$i" master br0 up
done
echo "token-$RANDOM$RANDOM" > "$WORK/token"
PS=${ADDRS[0]}
timeout 200 ip netns exec "${HOSTS[0]}" "$SERVER" --bind="$PS" --port=50051 --metrics_port=9400 --metrics_bind="$PS" \
  --auth_token_file="$WORK/token" --mode=sync --num_workers=2 --global_batch=64 --adjust_every=3 \
  --summary_json="$WORK/hosts.json" --quiet > "$WORK/server.log" 2>&1 &
SERVER_PID=$!
STARTED+=("$SERVER_PID")
SUMMARY=$WORK/hosts.json
wait_for_line "$WORK/server.log" listening || { cat "$WORK/server.log" >&2; fail "server did not start"; }
# The machine's own network cannot reach the server host: it really is elsewhere.
if timeout 3 bash -c "echo > /dev/tcp/$PS/50051" 2>/dev/null; then fail "the server host is reachable from outside"; fi

for i in 1 2; do
  timeout 200 ip netns exec "${HOSTS[$i]}" "$WORKER" --server="$PS:50051" --auth_token_file="$WORK/token" \
    --name="w$i" --host="host$i" --device=cpu --dataset=synthetic --model=mlp --epochs=0 --max_iterations=40 \
    --slowdown="$i" --log_every=10 > "$WORK/w$i.log" 2>&1 &
  WORKER_PIDS+=($!)
  STARTED+=($!)
done
wait_workers || { tail -n 5 "$WORK"/w*.log >&2; fail "a worker on another host failed"; }
# Prometheus would scrape the server across the network: so does a worker host here.
ip netns exec "${HOSTS[1]}" curl -sf --max-time 5 "http://$PS:9400/metrics" > "$WORK/metrics.prom" ||
  fail "cannot scrape the server from a worker host"
grep -q '^omnilearn_rounds_total [1-9]' "$WORK/metrics.prom" || fail "no rounds in the server's metrics"
stop_server
hosts=$(json "' '.join(sorted(w['host'] for w in s['workers']))")
[ "$hosts" = "host1 host2" ] || fail "workers came from '$hosts'"
[ "$(json "sum(w['iterations'] for w in s['workers'])")" = 80 ] || fail "workers did not finish their iterations"
echo "trained across namespaces: $(json "[(w['name'], w['host'], w['final_batch']) for w in s['workers']]")"
echo "PASS"
