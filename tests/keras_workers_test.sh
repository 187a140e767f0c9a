#!/usr/bin/env bash
# TensorFlow/Keras workers (python/omnilearn/keras.py) on the TensorFlow venv of
# deploy/install-venv.sh (OMNILEARN_TF_PYTHON; tests/run.sh sets it): a Keras CNN with
# BatchNormalization on Fashion-MNIST (tests/keras_job.py), three workers on emulated devices
# 4x apart (one through omnilearn.keras.fit, two in a tf.GradientTape loop), sync then
# async, against keras.Model.fit in one process for the same epochs and optimizer (and ssp
# for a quarter epoch: its samples and export only):
# - each job's accuracy is the single process's within a point;
# - every sample of every epoch was trained once (the ids the workers' steps took);
# - the export loads into the Keras model (omnilearn.keras.load_weights) and gives the job's
#   accuracy again, its BatchNormalization statistics carried (moved off their start);
# - the model's own weights file (save_weights) loads back to the same accuracy;
# - the server ran the compiled model's keras.optimizers.SGD (the join's optimizer), in async
#   at 1.4x the sync rate (each push steps lr x b/B, momentum lowered by 1 - 1/n; the rates
#   measured are in docs/keras.md).
# omnilearn.keras's unit tests (python/tests_tf) run first, on the same venv.
#   keras_workers_test.sh [MODE...]   the modes named (default: sync async ssp); the gate runs
#                                     sync alone (//tests:keras_quick_test)
source "$(dirname "$0")/e2e_lib.sh"
select_parts "sync async ssp" "$@"
PY=${OMNILEARN_TF_PYTHON:?this test runs on the TensorFlow venv: run tests/run.sh, or set OMNILEARN_TF_PYTHON to \
the python of deploy/install-venv.sh tensorflow}
export PYTHONPATH=$RUNFILES/python
export TF_CPP_MIN_LOG_LEVEL=2 OMP_NUM_THREADS=1
JOB=$RUNFILES/tests/keras_job.py
EPOCHS=${KERAS_TEST_EPOCHS:-2}
"$PY" -c 'import sys, omnilearn.keras, tensorflow, keras
assert "torch" not in sys.modules
print(f"keras_workers_test: {sys.executable}, tensorflow {tensorflow.__version__}, keras {keras.__version__}, no torch")' ||
  fail "$PY cannot import omnilearn.keras"
# omnilearn.keras's unit tests (layout, storage, optimizer, files, fit's arguments), fit's with
# jobs of this checkout's server, Keras's optimizers against the server's (optimizer_replay).
(cd "$WORK" && OMNILEARN_SERVER_BIN=$SERVER \
  OMNILEARN_OPTIMIZER_REPLAY=$RUNFILES/server/checkpoint/optimizer_replay timeout 600 "$PY" -m pytest -q \
  -p no:cacheprovider "$RUNFILES/python/tests_tf") ||
  fail "omnilearn.keras's unit tests failed"

KERAS_JOB_THREADS=2 timeout 600 "$PY" "$JOB" reference --epochs="$EPOCHS" --out="$WORK/reference.json" \
  > "$WORK/reference.log" 2>&1 || { tail -n 20 "$WORK/reference.log" >&2; fail "the single-process fit failed"; }
grep "^reference:" "$WORK/reference.log"

for mode in "${PARTS[@]}"; do
  lr=0.05 epochs=$EPOCHS
  [ "$mode" != sync ] && lr=0.07
  [ "$mode" = ssp ] && epochs=0.25  # ssp: the protocol only (a quarter epoch): samples, export
  start_server "keras_$mode" --mode="$mode" --num_workers=3 --global_batch=96 --exit_when_done \
    --export="$WORK/$mode.safetensors"
  WORKER_PIDS=()
  devices=(0:1 0:2 0:4)  # ms per sample: 4x apart
  for i in 0 1 2; do
    loop=tape
    [ "$i" -eq 0 ] && loop=fit
    timeout 900 "$PY" "$JOB" worker --server="127.0.0.1:$PORT" --name="k$i" --loop=$loop --device="${devices[$i]}" \
      --epochs="$epochs" --lr=$lr --ids="$WORK/$mode.k$i.ids" > "$WORK/$mode.k$i.log" 2>&1 &
    WORKER_PIDS+=($!)
    STARTED+=($!)
  done
  wait_workers || { tail -n 20 "$WORK/$mode".k*.log >&2; fail "$mode: a Keras worker failed"; }
  wait "$SERVER_PID" || fail "$mode: the server exited with an error"
  grep -h "steps,\|history" "$WORK/$mode".k*.log
  grep -q "the job runs k[0-9]'s optimizer: SGD(lr=$lr, momentum=0.9" "$WORK/keras_$mode.server.log" ||
    { grep -i optimizer "$WORK/keras_$mode.server.log" >&2; fail "$mode: the server did not run the model's SGD"; }
  timeout 300 "$PY" "$JOB" evaluate --export="$WORK/$mode.safetensors" --out="$WORK/$mode.eval.json" \
    > "$WORK/$mode.eval.log" 2>&1 || { tail -n 20 "$WORK/$mode.eval.log" >&2; fail "$mode: the export does not load"; }
  grep "^evaluate:" "$WORK/$mode.eval.log"
  python3 - "$mode" "$WORK" "$SUMMARY" "$epochs" <<'PY' || fail "$mode: the job is off"
import json, sys
import numpy as np
mode, work, summary, epochs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
s = json.load(open(summary))
ref = json.load(open(f"{work}/reference.json"))["accuracy"]
ev = json.load(open(f"{work}/{mode}.eval.json"))
ids = np.concatenate([np.fromfile(f"{work}/{mode}.k{i}.ids", dtype=np.int64) for i in range(3)])
counts = np.bincount(ids, minlength=60000)
steps = {w["name"]: w["iterations"] for w in s["workers"]}
# fit() reports its validation_data's accuracy (here the test set's), which the summary names so.
assert s["test_accuracy"] is None and s["validation_accuracy"] is not None, \
    (s["test_accuracy"], s["validation_accuracy"])
job = s["validation_accuracy"]
print(f"{mode}: job {job:.4f}, export {ev['accuracy']:.4f}, single process {ref:.4f}; "
      f"{len(ids)} samples trained, each {counts.min()}-{counts.max()} times; steps {steps}")
if epochs >= 1:
    assert len(counts) == 60000 and counts.min() == counts.max() == epochs, "every sample once per epoch"
else:  # a part of the first epoch: that many distinct samples, none twice
    assert len(ids) == int(epochs * 60000) and counts.max() == 1, (len(ids), counts.max())
assert ev["variables_loaded"] == 14, ev  # every variable of the model came from the export
assert ev["bn1_moving_var_mean"] != 1.0, "BatchNormalization's statistics were not carried"
assert abs(ev["saved_and_loaded_accuracy"] - ev["accuracy"]) < 1e-6, ev
tolerance = 0.002 if mode == "sync" else 0.01  # async: the job's last report may precede a late push
assert abs(ev["accuracy"] - job) <= tolerance, "the export gives the job's accuracy"
if epochs >= 1:
    assert job >= ref - 0.01, f"{mode}: more than a point under the single process"
PY
done
echo "keras_workers_test: OK (${PARTS[*]})"
