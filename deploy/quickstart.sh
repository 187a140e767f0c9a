#!/usr/bin/env bash
# The README's run command: a local OmniLearn server and 4 heterogeneous CPU workers
# (slowdowns 1, 1, 2, 4) training the small CNN on Fashion-MNIST. The server assigns every
# worker its samples (each epoch visits the training set once across all of them), prints
# a line when the batch plan changes and a progress line every 10 s, and exits by itself
# when the workers have finished (--exit_when_done); worker0's test accuracy is shown at
# every epoch end. Logs, checkpoints, the summary and the trained model go to one folder
# under /tmp, named at the start.
#   ./deploy/quickstart.sh                    sync mode, OmniLearn controller
#   ./deploy/quickstart.sh --mode=async       asynchronous
#   ./deploy/quickstart.sh --mode=ssp         stale-synchronous (bound 4)
#   ./deploy/quickstart.sh --controller=off   the baseline: equal static batches
# Other options: --epochs=N (3), --global_batch=N (256), --port=N (50051), --model=mlp|cnn|cnn_bn,
#   --lr=X (0.05 sync, 0.1 async and ssp; x0.2 after two thirds of the run),
#   --metrics_port=N (9400; Prometheus text at http://127.0.0.1:N/metrics; 0 = off),
#   --wire_dtype=f32|bf16 (f32; bf16 halves the bytes of every push and pull)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=sync controller=omnilearn epochs=3 global_batch=256 port=50051 model=cnn lr= metrics_port=9400 wire_dtype=f32
for arg in "$@"; do
  case "$arg" in
    --mode=*) mode=${arg#*=} ;;
    --controller=*) controller=${arg#*=} ;;
    --epochs=*) epochs=${arg#*=} ;;
    --global_batch=*) global_batch=${arg#*=} ;;
    --port=*) port=${arg#*=} ;;
    --model=*) model=${arg#*=} ;;
    --lr=*) lr=${arg#*=} ;;
    --metrics_port=*) metrics_port=${arg#*=} ;;
    --wire_dtype=*) wire_dtype=${arg#*=} ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown option $arg" >&2; exit 2 ;;
  esac
done

# Async and ssp lower the explicit momentum (asynchrony adds its own), so they take a
# larger step. Every mode steps the rate down x0.2 after two thirds of the run: versions
# per epoch are 60000/B in sync, and about 4 x 60000/B (one per push) otherwise.
if [ "$mode" = sync ]; then versions_per_epoch=$((60000 / global_batch)); else versions_per_epoch=$((240000 / global_batch)); fi
[ -n "$lr" ] || { if [ "$mode" = sync ]; then lr=0.05; else lr=0.1; fi; }
decay_steps=$(python3 -c "print(max(1, int($versions_per_epoch * $epochs * 2 / 3)))")

./deploy/install-deps.sh
echo "quickstart: building (optimized)..."
bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker
bin=$(bazel info -c opt bazel-bin 2>/dev/null)

out=$(mktemp -d /tmp/omnilearn-quickstart.XXXXXX)
summary="$out/summary.json"
echo "quickstart: logs in $out (server.log, worker0.log .. worker3.log)"
export OMP_NUM_THREADS=1
pids=()
server_pid=""
follow_pid=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  [ -n "$follow_pid" ] && kill "$follow_pid" 2>/dev/null || true
}
trap cleanup EXIT

# The server's own lines (joins, plan changes, progress, the end of the job) show here
# and go to server.log.
"$bin/server/omnilearn_server" --bind=127.0.0.1 --port="$port" --mode="$mode" --controller="$controller" \
  --num_workers=4 --global_batch="$global_batch" --summary_json="$summary" --lr="$lr" --momentum=0.9 --weight_decay=1e-4 \
  --lr_decay_steps="$decay_steps" --lr_decay=0.2 --metrics_port="$metrics_port" --metrics_bind=127.0.0.1 \
  --wire_dtype="$wire_dtype" --checkpoint_dir="$out/checkpoints" --export="$out/model.safetensors" --exit_when_done \
  > >(tee "$out/server.log") 2>&1 &
server_pid=$!
for _ in $(seq 50); do grep -q listening "$out/server.log" 2>/dev/null && break; sleep 0.1; done
kill -0 "$server_pid" 2>/dev/null || { echo "quickstart: the server did not start (port $port or $metrics_port busy?)" >&2; exit 1; }
[ "$metrics_port" = 0 ] || echo "quickstart: metrics at http://127.0.0.1:$metrics_port/metrics while it trains"

slowdowns=(1 1 2 4)
for i in 0 1 2 3; do
  evaluate=false
  [ "$i" -eq 0 ] && evaluate=true
  timeout 1800 "$bin/worker/omnilearn_worker" --server="127.0.0.1:$port" --name="worker$i" --device=cpu \
    --model="$model" --slowdown="${slowdowns[$i]}" --epochs="$epochs" --evaluate="$evaluate" \
    --log_every=0 > "$out/worker$i.log" 2>&1 &
  pids+=($!)
done
# worker0's accuracy at each epoch end, as it happens.
tail -n +1 -F "$out/worker0.log" 2>/dev/null | grep --line-buffered "test accuracy" &
follow_pid=$!
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
pids=()
# The server exits by itself once every worker finished; bounded, in case one failed.
for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server_pid" 2>/dev/null; then kill -TERM "$server_pid"; fi
wait "$server_pid" || failed=1
server_pid=""
kill "$follow_pid" 2>/dev/null || true
follow_pid=""
if [ "$failed" -ne 0 ]; then
  echo "quickstart: a worker or the server failed; logs in $out" >&2
  tail -5 "$out"/worker*.log >&2
  exit 1
fi

python3 - "$summary" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print()
print(f"== summary ({s['mode']}, controller={s['controller']}) ==")
print(f"wall time      {s['wall_seconds']:.1f} s")
acc = s['test_accuracy']
print(f"test accuracy  {100 * acc:.2f}%" if acc is not None else "test accuracy  (not reported)")
print(f"model version  {s['model_version']}   global batch {s['global_batch']}")
for w in sorted(s['workers'], key=lambda w: w['name']):
    print(f"  {w['name']:8s} final batch {w['final_batch']:4d}   mean compute {1000 * w['mean_compute_seconds']:6.1f} ms"
          f"   iterations {w['iterations']:5d}   samples {w['samples']}")
PY
echo "logs:         $out/server.log, $out/worker0.log .. worker3.log"
echo "summary JSON: $summary"
echo "checkpoints:  $out/checkpoints   trained model: $out/model.safetensors"
echo "  check it:   $bin/worker/omnilearn_worker --evaluate_only --init_from=$out/model.safetensors --model=$model"
