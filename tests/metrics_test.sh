#!/usr/bin/env bash
# Metrics end to end: promtool lints a live scrape of the server and of a worker; then
# Debian's Prometheus, run on loopback with deploy/prometheus.yml, scrapes a short
# training run, and its HTTP API must hold the batch-size series of every worker.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || fail "Debian's prometheus package is missing"

SMP=$(free_port)
start_server metrics --mode=sync --num_workers=2 --global_batch=64 --adjust_every=3 \
  --metrics_port="$SMP" --metrics_bind=127.0.0.1
declare -A WMP
for w in w0 w1; do
  WMP[$w]=$(free_port)
  start_worker "$w" "$WORK/$w.log" --epochs=0 --max_iterations=100000 \
    --slowdown=$([ "$w" = w0 ] && echo 1 || echo 3) --metrics_port="${WMP[$w]}" --metrics_bind=127.0.0.1
done
wait_for_line "$WORK/w1.log" "it=10 " 300 || fail "workers did not start training"

# Every server thread but main (civetweb's and gRPC's too) blocks SIGTERM, so that
# only main's sigwait takes it and the summary gets written.
srv=$(pgrep -P "$SERVER_PID")
for t in /proc/"$srv"/task/*/status; do
  [ "$t" = "/proc/$srv/task/$srv/status" ] && continue  # in sigwait, which unblocks it
  mask=$(awk '/^SigBlk/ {print $2}' "$t" 2>/dev/null) || true
  [ -n "$mask" ] || continue  # a thread that ended meanwhile
  (( 0x$mask & 0x4000 )) || fail "server thread $t does not block SIGTERM (SigBlk $mask)"
done

scrape() { curl -sf --max-time 5 "http://127.0.0.1:$1/metrics"; }
scrape "$SMP" > "$WORK/server.prom" || fail "no scrape from the server"
scrape "${WMP[w1]}" > "$WORK/worker.prom" || fail "no scrape from a worker"
for f in server worker; do
  promtool check metrics < "$WORK/$f.prom" || fail "promtool rejects the $f's metrics"
done
for series in omnilearn_worker_batch_size omnilearn_worker_compute_seconds_bucket omnilearn_rounds_total \
  omnilearn_pushes_total omnilearn_push_bytes_total omnilearn_pull_bytes_total omnilearn_model_version \
  omnilearn_round_wait_seconds_count omnilearn_staleness_count omnilearn_controller_adjustments_total \
  omnilearn_workers omnilearn_train_loss process_resident_memory_bytes \
  process_cpu_seconds_total process_start_time_seconds; do
  grep -q "^$series[ {]" "$WORK/server.prom" || fail "the server does not export $series"
done
for series in omnilearn_trainer_step_seconds_count omnilearn_trainer_batch_size omnilearn_trainer_iterations_total \
  process_cpu_seconds_total; do
  grep -q "^$series[ {]" "$WORK/worker.prom" || fail "the worker does not export $series"
done
# No worker evaluates here: the accuracy series are absent (not a made-up 0).
! grep -q "^omnilearn_test_accuracy" "$WORK/server.prom" || fail "the server exports an accuracy nobody reported"
! grep -q "^omnilearn_trainer_test_accuracy" "$WORK/worker.prom" || fail "a worker exports an accuracy it never measured"
echo "promtool: server and worker scrapes pass"
# Every series the Grafana dashboard draws exists in a live scrape (the accuracies once reported).
for name in $(grep -o '\(omnilearn\|process\)_[a-z_]*' "$TEST_SRCDIR/omnilearn/deploy/grafana/omnilearn-dashboard.json" | sort -u); do
  [[ $name == *_test_accuracy ]] && continue
  grep -q "^$name[ {]" "$WORK/server.prom" "$WORK/worker.prom" || fail "the dashboard uses $name, which nobody exports"
done

# Prometheus with the shipped configuration; targets from file discovery.
mkdir -p "$WORK/prom/targets"
cp "$TEST_SRCDIR/omnilearn/deploy/prometheus.yml" "$TEST_SRCDIR/omnilearn/deploy/omnilearn-alerts.yml" "$WORK/prom/"
echo "[{\"targets\": [\"127.0.0.1:$SMP\"]}]" > "$WORK/prom/targets/server.json"
echo "[{\"targets\": [\"127.0.0.1:${WMP[w0]}\", \"127.0.0.1:${WMP[w1]}\"]}]" > "$WORK/prom/targets/workers.json"
PP=$(free_port)
timeout 120 prometheus --config.file="$WORK/prom/prometheus.yml" --storage.tsdb.path="$WORK/prom/data" \
  --web.listen-address="127.0.0.1:$PP" > "$WORK/prometheus.log" 2>&1 &
STARTED+=($!)
PROM_PID=$!

query() { curl -sf --max-time 5 "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1"; }
# count_series QUERY: how many series the instant query returns.
count_series() {
  query "$1" | python3 -c 'import json,sys; r=json.load(sys.stdin); print(len(r["data"]["result"]) if r["status"]=="success" else -1)' \
    2>/dev/null || echo -1
}
ok=0
for _ in $(seq 60); do  # scrapes every 5 s: up to 30 s
  if [ "$(count_series 'up == 1')" = 3 ] && [ "$(count_series 'omnilearn_worker_batch_size')" = 2 ] &&
     [ "$(count_series 'omnilearn_trainer_batch_size')" = 2 ]; then ok=1; break; fi
  sleep 0.5
done
[ $ok = 1 ] || { tail -5 "$WORK/prometheus.log" >&2; query 'up' >&2; fail "Prometheus did not scrape all three targets"; }
workers=$(query 'omnilearn_worker_batch_size{job="omnilearn-server"}' |
  python3 -c 'import json,sys; print(" ".join(sorted(r["metric"]["worker"]+"="+r["value"][1] for r in json.load(sys.stdin)["data"]["result"])))')
echo "Prometheus has the batch sizes: $workers"
[[ "$workers" == "w0="*" w1="* ]] || fail "batch-size series of w0 and w1 expected, got: $workers"
sum=$(query 'sum(omnilearn_worker_batch_size)' | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["value"][1])')
[ "$sum" = 64 ] || fail "batch sizes sum to $sum, not the global batch 64"

kill "$PROM_PID"
for p in "${WORKER_PIDS[@]}"; do pkill -TERM -P "$p" || true; done
wait_workers || true
stop_server
echo "PASS"
