#!/usr/bin/env bash
# Data-parallel correctness, multi-process:
# 1. Three workers of different (emulated) speeds (the controller gives them different,
#    changing batches) train one epoch in sync mode: the samples they trained in epoch 0, taken
#    together, are the whole training set, each exactly once. The server exits by itself
#    when the job is done (--exit_when_done).
# 2. A BatchNorm CNN trains on Fashion-MNIST in sync mode; the server's export carries
#    the running statistics (averaged over the workers) and evaluates as the workers'
#    model does, above the accuracy bar.
source "$(dirname "$0")/e2e_lib.sh"

# ---- 1. every sample of the epoch exactly once
start_server epoch --mode=sync --num_workers=3 --global_batch=96 --lr=0.05 --adjust_every=5 --exit_when_done
WORKER_PIDS=()
# Emulated devices of 4:2:1 speed per sample: their step times are what the controller
# plans on, whatever the machine's load (a --slowdown multiplies the real compute time,
# which a loaded machine makes noisy enough for the controller to hold still: seen once).
per_sample_ms=(0.5 1 2)
for i in 0 1 2; do
  # w2 runs the GPU workers' untimed warm-up step (after joining and after each batch
  # change) on the CPU: the device-generic path, and the samples must still come out right.
  # It logs every iteration's batch, so the test knows how many changes it saw.
  warm=off every=0
  [ $i -eq 2 ] && warm=on every=1
  start_worker "w$i" "$WORK/epoch.w$i.log" --emulate_device="2:${per_sample_ms[$i]}" --epochs=1 --log_every=$every \
    --log_samples="$WORK/epoch.w$i.samples" --warmup=$warm
done
wait_workers || { tail -5 "$WORK"/epoch.w*.log >&2; fail "a worker failed"; }
warmups=$(grep -c "untimed warm-up step at batch" "$WORK/epoch.w2.log" || true)
# One at the first step and one per change of batch (how many the controller made depends on
# the machine's load; the count must match them whatever they were).
changes=$(grep -o " it=[0-9]* batch=[0-9]*" "$WORK/epoch.w2.log" | sed 's/.*batch=//' | uniq | wc -l)
[ "$changes" -ge 1 ] || fail "w2 logged no iteration"
# A last step answered with stop (the job over) logs no iteration line: it may add one.
[ "$warmups" -ge "$changes" ] && [ "$warmups" -le $((changes + 1)) ] ||
  fail "w2 ran $warmups warm-up steps for $changes batch sizes in a row; want one at join and one per batch change"
! grep -q "warm-up" "$WORK/epoch.w0.log" || fail "--warmup=off ran a warm-up step"
echo "w2: $warmups untimed warm-up steps ($changes batch sizes in a row: the join's and each change)"
# The server leaves on its own once every worker finished (bounded: 30 s).
server_gone() { ! kill -0 "$SERVER_PID" 2>/dev/null; }
wait_until 300 "the server to exit when the job was done" server_gone
wait "$SERVER_PID" || fail "the server exited with an error after the job"
grep -q "training finished" "$WORK/epoch.server.log" || fail "no 'training finished' in the server log"
[ -s "$SUMMARY" ] || fail "no summary after --exit_when_done"
python3 - "$WORK" <<'PY' || fail "epoch 0 did not visit every sample exactly once"
import collections, sys
work = sys.argv[1]
per_worker, epoch0 = {}, collections.Counter()
for i in range(3):
    n = 0
    for line in open(f"{work}/epoch.w{i}.samples"):
        epoch, sid = map(int, line.split())
        if epoch == 0:
            epoch0[sid] += 1
            n += 1
    per_worker[i] = n
size = 20000  # the synthetic training set
dupes = sum(1 for c in epoch0.values() if c > 1)
missing = size - len(epoch0)
print(f"epoch 0: {sum(epoch0.values())} samples trained, {len(epoch0)} distinct, {dupes} twice or more, "
      f"{missing} missing; per worker {per_worker}")
assert dupes == 0 and missing == 0 and max(epoch0) == size - 1
assert len(set(per_worker.values())) == 3, "the workers should have trained different amounts"
PY

# ---- 2. BatchNorm statistics travel with the weights
start_server bn --mode=sync --num_workers=2 --global_batch=64 --lr=0.05 --exit_when_done --export="$WORK/bn.safetensors"
WORKER_PIDS=()
start_worker b0 "$WORK/bn.b0.log" --model=cnn_bn --dataset=fashion-mnist --epochs=0.5 --evaluate --log_every=0
start_worker b1 "$WORK/bn.b1.log" --model=cnn_bn --dataset=fashion-mnist --epochs=0.5 --slowdown=2 --log_every=0
wait_workers || { tail -5 "$WORK"/bn.b*.log >&2; fail "a BatchNorm worker failed"; }
wait "$SERVER_PID" || fail "the BatchNorm server exited with an error"
trained=$(sed -n 's/.*done:.*test accuracy \([0-9.]*\)%.*/\1/p' "$WORK/bn.b0.log")
[ -n "$trained" ] || fail "the evaluating worker reported no accuracy"
python3 "$RUNFILES/tools/load_safetensors.py" "$WORK/bn.safetensors" > "$WORK/bn.tensors" || fail "unreadable export"
grep -q "bn1.running_var" "$WORK/bn.tensors" || fail "the export lacks the BatchNorm running statistics"
exported=$("$WORKER" --evaluate_only --init_from="$WORK/bn.safetensors" --model=cnn_bn --dataset=fashion-mnist --device=cpu \
  | sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p')
echo "BatchNorm CNN: the worker measured ${trained}%, the exported model ${exported}%"
python3 -c "import sys; t, e = $trained, $exported; sys.exit(0 if e >= 80 and abs(t - e) < 0.5 else 1)" \
  || fail "the exported BatchNorm model evaluates at ${exported}% against the worker's ${trained}%"
echo PASS
