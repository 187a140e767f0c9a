#!/usr/bin/env bash
# The C++ worker's own optimizer (--optimizer and its flags, torch.optim's defaults): the
# job runs it when that worker brings the model, though the server's flags say SGD; a
# later worker with another optimizer is refused, naming both; one with the same joins.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()
start_server optimizer --mode=sync --num_workers=2 --global_batch=32 --optimizer=sgd --lr=0.1
adamw=(--optimizer=adamw --lr=0.002 --weight_decay=0.05 --no_decay=bias)
start_worker w0 "$WORK/w0.log" --epochs=0 --max_iterations=20 "${adamw[@]}"
wait_for_line "$WORK/optimizer.server.log" "runs w0's optimizer" 300 ||
  { cat "$WORK/optimizer.server.log" "$WORK/w0.log"; fail "the server did not take w0's optimizer"; }
grep "runs w0's optimizer" "$WORK/optimizer.server.log"
grep -q "AdamW(lr=0.002, betas=(0.9, 0.999), eps=1e-08, amsgrad=False, maximize=False, weight_decay=0.05), param groups: 0: 3 tensors lr=0.002 \
weight_decay=0.05; 1: 3 tensors lr=0.002 weight_decay=0" "$WORK/optimizer.server.log" ||
  fail "the job does not run w0's AdamW with its two groups"
# Another optimizer: refused at join (the worker exits with the server's reason).
timeout 120 "$WORKER" --server="127.0.0.1:$PORT" --name=other --device=cpu --dataset=synthetic --model=mlp \
  --connect_timeout=60 --epochs=0 --max_iterations=5 --optimizer=sgd --lr=0.1 > "$WORK/other.log" 2>&1 &&
  fail "a worker with another optimizer joined"
grep -q "this worker's optimizer is SGD(lr=0.1, momentum=0, .*weight_decay=0).*the job runs AdamW" "$WORK/other.log" ||
  { cat "$WORK/other.log"; fail "the refusal does not name both optimizers"; }
start_worker w1 "$WORK/w1.log" --epochs=0 --max_iterations=20 "${adamw[@]}"
wait_workers || { tail -5 "$WORK"/w*.log >&2; fail "a worker with the job's optimizer failed"; }
read -r first last <<< "$(first_and_last_loss "$WORK/w0.log")"
echo "w0 loss $first -> $last under the workers' AdamW"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "the loss did not fall"
stop_server
echo "PASS"
