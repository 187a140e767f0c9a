#!/usr/bin/env bash
# Python workers (python/omnilearn) in one job with C++ workers, multi-process:
# 1. Own data and model: a tensors file and a TorchScript CNN written from Python (3x8x8
#    inputs, 5 classes, float16 images, uint8 labels). Files that do not fit are refused
#    by the C++ worker with a clear error. Then a C++ worker (--dataset=tensors:PATH) and
#    a Python worker train it together to the accuracy bar. The model holds a non-persistent
#    bool mask (both workers keep it out of the layout, or their joins would not agree) and
#    an int64 buffer; its export loads strictly into the model (docs/python.md's line) and gives
#    the job's accuracy again. The same data in async and in ssp: both workers finish and
#    the epoch's samples are trained exactly once between them.
# 2. Fashion-MNIST with the CNN: one Python and two C++ workers reach the accuracy of an
#    all-C++ run of the same job (within 1.5 points, and at least 85%).
source "$(dirname "$0")/e2e_lib.sh"
PY_RUNFILES=$RUNFILES/python
TRAIN_PY=$PY_RUNFILES/examples/train.py
export PYTHONPATH=$PY_RUNFILES

# start_py_worker NAME LOG [flags...]: a Python worker (python/examples/train.py).
start_py_worker() {
  local name=$1 log=$2; shift 2
  timeout 240 /usr/bin/python3 "$TRAIN_PY" --server="127.0.0.1:$PORT" --name="$name" --log_every=50 "$@" \
    > "$log" 2>&1 &
  WORKER_PIDS+=($!)
  STARTED+=($!)
}

expect_refusal() {  # expect_refusal FILE MESSAGE: the C++ worker refuses the data before joining
  local out
  if out=$(timeout 60 "$WORKER" --dataset="tensors:$WORK/$1" --model_file="$WORK/model.pt" --device=cpu \
      --server=127.0.0.1:1 --reconnect_timeout=0 2>&1); then
    fail "$1 was accepted"
  fi
  grep -q -- "$2" <<<"$out" || { echo "$out" >&2; fail "$1: no '$2' in the error"; }
  echo "refused $1: $(echo "$out" | tail -n 1)"
}

# ---- 1. own data and model
/usr/bin/python3 "$RUNFILES/tests/make_tensor_job.py" "$WORK"
expect_refusal bad_labels.safetensors "train_y must hold integer class indices"
expect_refusal bad_shape.safetensors "does not take this data's samples of shape \[4,8,8\]"
expect_refusal bad_classes.safetensors "C >= 6"
expect_refusal missing.safetensors "no file"

WORKER_PIDS=()
start_server tensors --mode=sync --num_workers=2 --global_batch=64 --lr=0.05 --exit_when_done \
  --export="$WORK/tensors.safetensors"
start_worker c0 "$WORK/tensors.c0.log" --dataset="tensors:$WORK/data.safetensors" --model_file="$WORK/model.pt" \
  --epochs=3 --evaluate --log_every=50
# The Python worker records its timeline (worker/client/timeline.h): slowed, it pushes each
# gradient whole after its step (push_pull), and each line still holds the push's begin, its
# finish and its reply; the line begins when the step's compute began, so its finish comes
# after its begin (bench/timeline.py's compute phase).
OMNILEARN_TIMELINE=$WORK/tensors.py0.timeline start_py_worker py0 "$WORK/tensors.py0.log" \
  --dataset="tensors:$WORK/data.safetensors" --model_file="$WORK/model.pt" --epochs=3 --slowdown=2
wait_workers || { tail -n 5 "$WORK"/tensors.*.log >&2; fail "tensors: a worker failed"; }
python3 - "$WORK/tensors.py0.timeline" <<'PY' || fail "tensors: the Python worker's timeline lacks its whole pushes or their compute"
import json, sys
lines = [json.loads(t) for t in open(sys.argv[1])]
assert len(lines) > 10, len(lines)
for line in lines[:-1]:  # the last may be cut by the job's end
    names = [e[0] for e in line["events"]]
    assert names[:2] == ["begin", "finish"] and "reply" in names, names
    assert line["events"][1][1] > 0, line  # the step's compute, before the push
print(f"tensors: the Python worker's timeline holds {len(lines)} pushes, each begun, finished and replied; "
      f"compute {sorted(line['events'][1][1] for line in lines)[len(lines) // 2]:.1f} ms (median)")
PY
wait "$SERVER_PID" || fail "tensors: the server exited with an error"
python3 - "$SUMMARY" <<'PY' || fail "tensors: the job's summary is wrong"
import json, sys
s = json.load(open(sys.argv[1]))
names = sorted((w["name"], w["state"]) for w in s["workers"])
print(f"tensors job: accuracy {s['test_accuracy']:.4f}, version {s['model_version']}, workers {names}")
assert names == [("c0", "left"), ("py0", "left")], names
assert all(w["iterations"] > 10 for w in s["workers"]), s["workers"]
assert s["test_accuracy"] >= 0.80, "5 classes: chance is 0.20"
PY
PYTHONPATH=$PY_RUNFILES:$RUNFILES/tests /usr/bin/python3 - "$WORK" "$SUMMARY" <<'PY' ||
import json, sys
import torch
import omnilearn
from make_tensor_job import Net
work, summary = sys.argv[1], sys.argv[2]
net = Net()
net.load_state_dict(omnilearn.load_state_dict(f"{work}/tensors.safetensors"))  # strict
assert net.steps.dtype == torch.int64 and net.steps.item() > 10, net.steps
exported = omnilearn.load_state_dict(f"{work}/tensors.safetensors")
assert "mask" not in exported
assert exported["steps"].dtype == torch.int64, "the export keeps the model's integer buffer as I64"
data = omnilearn.load_tensors(f"{work}/data.safetensors")
net.eval()
with torch.no_grad():
    accuracy = (net(data["test_x"].float()).argmax(1) == data["test_y"].long()).float().mean().item()
want = json.load(open(summary))["test_accuracy"]
print(f"tensors export: loaded strictly, steps={net.steps.item()}, accuracy {accuracy:.4f} (the job's {want:.4f})")
assert abs(accuracy - want) < 0.002, (accuracy, want)
PY
  fail "tensors: the export does not load strictly into the model, or does not give the job's accuracy"

# ---- 1b. The same data in async and ssp: a Python worker (slowed 2x) beside a C++ worker for
# one epoch; both finish, and the epoch's 6,000 samples are trained exactly once between them.
for mode in async ssp; do
  WORKER_PIDS=()
  start_server "tensors_$mode" --mode=$mode --num_workers=2 --global_batch=64 --lr=0.05 --exit_when_done
  start_worker c0 "$WORK/$mode.c0.log" --dataset="tensors:$WORK/data.safetensors" --model_file="$WORK/model.pt" \
    --epochs=1 --evaluate --log_every=50
  start_py_worker py0 "$WORK/$mode.py0.log" --dataset="tensors:$WORK/data.safetensors" --model_file="$WORK/model.pt" \
    --epochs=1 --slowdown=2
  wait_workers || { tail -n 5 "$WORK/$mode".*.log >&2; fail "tensors $mode: a worker failed"; }
  wait "$SERVER_PID" || fail "tensors $mode: the server exited with an error"
  python3 - "$SUMMARY" "$mode" <<'PY' || fail "tensors $mode: the job's summary is wrong"
import json, sys
s, mode = json.load(open(sys.argv[1])), sys.argv[2]
workers = {w["name"]: w for w in s["workers"]}
samples = sum(w["samples"] for w in workers.values())
print(f"tensors {mode}: accuracy {s['test_accuracy']:.4f}, samples {samples}, "
      f"iterations {({n: w['iterations'] for n, w in workers.items()})}")
assert sorted((n, w["state"]) for n, w in workers.items()) == [("c0", "left"), ("py0", "left")], workers
assert all(w["iterations"] > 5 for w in workers.values()), workers
assert samples == 6000, f"{samples} samples trained, not the epoch's 6000"
assert s["test_accuracy"] >= 0.5, "5 classes: chance is 0.20"
PY
done

# ---- 2. Fashion-MNIST: one Python and two C++ workers against three C++ workers
FLAGS=(--mode=sync --num_workers=3 --global_batch=96 --lr=0.05 --exit_when_done)
run_job() {  # run_job NAME PYTHON(true|false): prints the final accuracy
  local name=$1 python=$2
  start_server "$name" "${FLAGS[@]}" >&2
  WORKER_PIDS=()
  start_worker c0 "$WORK/$name.c0.log" --dataset=fashion-mnist --model=cnn --epochs=1 --evaluate --log_every=100
  start_worker c1 "$WORK/$name.c1.log" --dataset=fashion-mnist --model=cnn --epochs=1 --slowdown=2 --log_every=100
  if $python; then
    start_py_worker py2 "$WORK/$name.py2.log" --model=cnn --epochs=1
  else
    start_worker c2 "$WORK/$name.c2.log" --dataset=fashion-mnist --model=cnn --epochs=1 --log_every=100
  fi
  wait_workers || { tail -n 5 "$WORK/$name".*.log >&2; fail "$name: a worker failed"; }
  wait "$SERVER_PID" || fail "$name: the server exited with an error"
  python3 -c "import json; s = json.load(open('$SUMMARY')); print(s['test_accuracy'])"
}
ref=$(run_job cpp false)
mixed=$(run_job mixed true)
grep -q "joined as worker" "$WORK/mixed.py2.log" || fail "the Python worker did not join"
python3 - "$ref" "$mixed" "$WORK/mixed.json" <<'PY' || fail "the mixed job's accuracy is off"
import json, sys
ref, mixed = float(sys.argv[1]), float(sys.argv[2])
s = json.load(open(sys.argv[3]))
py = [w for w in s["workers"] if w["name"] == "py2"][0]
print(f"Fashion-MNIST, 1 epoch: all C++ {100 * ref:.2f}%, one Python worker {100 * mixed:.2f}% "
      f"(the Python worker: {py['iterations']} iterations, {py['samples']} samples)")
assert py["samples"] > 5000, py
assert mixed >= 0.85 and mixed >= ref - 0.03
PY
# ---- 3. A PyTorch user's habits: `python -m omnilearn.run` starts a local server and two
# copies of a script that takes its address and name from the environment and reads a
# map-style Dataset through a DataLoader with worker processes; the export and a
# checkpoint load strictly into a fresh model, and as a torch.save file. The launcher finds
# the server where deploy/install.sh puts it: a prefix's bin on PATH.
mkdir -p "$WORK/prefix/bin"
install -m 0755 "$SERVER" "$WORK/prefix/bin/"
PATH=$WORK/prefix/bin:$PATH timeout 240 /usr/bin/python3 -m omnilearn.run --nproc 2 \
  --server_args="--mode=sync --global_batch=32 --lr=0.05 ${SGD_FLAGS[*]} --quiet --export=$WORK/habits.safetensors \
  --checkpoint_dir=$WORK/habits_ckpt" "$RUNFILES/tests/pytorch_habits_job.py" 2 > "$WORK/habits.log" 2>&1 ||
  { tail -n 20 "$WORK/habits.log" >&2; fail "habits: the launcher failed"; }
grep -q "worker0: .* steps" "$WORK/habits.log" && grep -q "worker1: .* steps" "$WORK/habits.log" ||
  { tail -n 20 "$WORK/habits.log" >&2; fail "habits: a worker did not finish"; }
# The same job in the several-host layout (`--shards 2`: a coordinator and a shard server),
# its export loaded below with the others.
PATH=$WORK/prefix/bin:$PATH timeout 240 /usr/bin/python3 -m omnilearn.run --nproc 2 --shards 2 \
  --server_args="--mode=sync --global_batch=32 --lr=0.05 ${SGD_FLAGS[*]} --quiet --export=$WORK/habits_sharded.safetensors" \
  "$RUNFILES/tests/pytorch_habits_job.py" 2 > "$WORK/habits_sharded.log" 2>&1 ||
  { tail -n 20 "$WORK/habits_sharded.log" >&2; fail "habits: the launcher failed with --shards 2"; }
grep -q "shard 1 registered" "$WORK/habits_sharded.log" ||
  { tail -n 20 "$WORK/habits_sharded.log" >&2; fail "habits: no shard registered with --shards 2"; }
# A worker's own optimizer in a sharded job: AdamW with two param groups and ReduceLROnPlateau
# (the flags say SGD), every shard stepping its pieces in their tensor's group at the
# scheduler's rates, against torch.optim in one process on the same batches.
PATH=$WORK/prefix/bin:$PATH timeout 240 /usr/bin/python3 -m omnilearn.run --nproc 1 --shards 2 \
  --server_args="--global_batch=32 --optimizer=sgd --lr=0.1" "$RUNFILES/tests/optimizer_mirror_job.py" \
  > "$WORK/mirror_sharded.log" 2>&1 || { tail -n 20 "$WORK/mirror_sharded.log" >&2; fail "sharded optimizer mirror"; }
grep "^mirror:" "$WORK/mirror_sharded.log"
grep -q "the job runs worker0's optimizer: AdamW" "$WORK/mirror_sharded.log" ||
  fail "sharded optimizer mirror: the coordinator did not take the worker's AdamW"
# Local steps (--local_steps=8): each worker steps the program's AdamW on a round's samples and
# pushes the pseudo-gradient; the server's Nesterov SGD is the outer optimizer. One worker: the
# job is DiLoCo written out in one process; two, sync and async: the job trains.
# --local_batch=4: each worker's steps a round are its batch over 4 (a faster one takes more).
OUTER="--global_batch=32 --optimizer=sgd --lr=0.7 --momentum=0.5 --optimizer_options=nesterov=1"
for run in "1 sync --local_steps=8" "2 sync --local_steps=8" "2 async --local_steps=8" "2 sync --local_batch=4"; do
  set -- $run
  log=$WORK/local_$1_$2_${3#--}.log
  PATH=$WORK/prefix/bin:$PATH timeout 240 /usr/bin/python3 -m omnilearn.run --nproc "$1" \
    --server_args="--mode=$2 $3 $OUTER" "$RUNFILES/tests/local_steps_job.py" 0.7 0.5 \
    > "$log" 2>&1 || { tail -n 20 "$log" >&2; fail "local steps: $1 worker(s), $2, $3"; }
  grep "^local: [0-9]" "$log" | sort -u
done
# A worker killed mid-round (--local_steps=4, three workers, sync): it costs its own steps only;
# the others' rounds close without it at the round timeout, its samples are handed out again,
# and the job trains exactly its samples (4 epochs of 512).
start_server local_fault --mode=sync --num_workers=3 --round_timeout_s=2 --local_steps=4 $OUTER
WORKER_PIDS=()
for r in 0 1 2; do
  OMNILEARN_SERVER=127.0.0.1:$PORT OMNILEARN_NAME=l$r OMNILEARN_WORLD_SIZE=3 timeout 240 /usr/bin/python3 \
    "$RUNFILES/tests/local_steps_job.py" 0.7 0.5 > "$WORK/local_fault_l$r.log" 2>&1 &
  WORKER_PIDS+=($!)
  STARTED+=($!)
done
wait_until 1200 "the victim's third round" grep -q "round 3 pushed" "$WORK/local_fault_l2.log"
pkill -KILL -P "${WORKER_PIDS[2]}" || true  # the worker (our `timeout` wrapper's child), then the wrapper
kill -KILL "${WORKER_PIDS[2]}" 2>/dev/null || true
WORKER_PIDS=("${WORKER_PIDS[@]:0:2}")
wait_workers || { tail -n 5 "$WORK"/local_fault_l*.log >&2; fail "local steps: a survivor failed"; }
stop_server
[ "$(json "s['global_samples']")" -eq 2048 ] || fail "local steps: the job did not train exactly its samples"
victim_state=$(json "[w['state'] for w in s['workers'] if w['name'] == 'l2']")
[ "$victim_state" = "['dropped']" ] || fail "local steps: the killed worker was not dropped: $victim_state"
grep -h "^local: [0-9]" "$WORK"/local_fault_l[01].log
/usr/bin/python3 - "$WORK" <<'PY' || fail "habits: the trained model does not load back"
import glob, os, sys, torch, omnilearn
from omnilearn import models
work = sys.argv[1]
checkpoint = sorted(glob.glob(f"{work}/habits_ckpt/*.safetensors"))[-1]
for path in (f"{work}/habits.safetensors", checkpoint, f"{work}/habits_sharded.safetensors"):
    model = models.make("cnn_bn")
    state = omnilearn.load_state_dict(path)  # without the model: the types the file names
    assert state["bn1.num_batches_tracked"].dtype == torch.int64, (path, state["bn1.num_batches_tracked"])
    model.load_state_dict(state, strict=True)
    omnilearn.save_state_dict(path, f"{work}/model.pt")
    models.make("cnn_bn").load_state_dict(torch.load(f"{work}/model.pt"), strict=True)
    print(f"habits: {os.path.basename(path)} loads strictly, and as a torch.save file")
PY
echo "python_worker_test: OK"
