#!/usr/bin/env bash
# The two architectures a new user brought (issue 39), in a small form, each as docs/python.md
# runs it (`python -m omnilearn.run`), each export loaded strictly into a fresh model:
# 1. python/examples/char_transformer.py: a GPT-style character model with a non-persistent
#    causal mask, AdamW and clipping on the server, two workers on emulated devices 4x
#    apart, sync then async (the square-root rule: the sync rate).
#    On torch 2.x it also trains torch.compile'd under bf16 autocast (on 1.13 --compile is
#    refused, naming the version).
# 2. python/examples/resnet18_fashion.py: torchvision's ResNet-18 (BatchNorm) on
#    Fashion-MNIST through a map-style Dataset and a DataLoader with worker processes and
#    pinned memory, three workers, sync then async; num_batches_tracked comes back as int64.
# 3. python/examples/lstm_language_model.py: an LSTM language model over windows of a token
#    stream (plain SGD at lr 20, clipping 0.25), a fresh hidden state each step.
# 4. tests/optimizer_mirror_job.py: the user's torch.optim.AdamW (two param groups) and its
#    ReduceLROnPlateau, run by a server started with other flags, against torch.optim in one
#    process on the same batches; on a torch with Muon, torch's Muon recipe ([Muon, AdamW]) too,
#    on one server and over two (--shards 2: the map cuts no tensor).
# 5. tests/mnist_port_job.py: pytorch/examples' mnist/main.py ported as docs/python.md shows, its
#    own Adadelta and StepLR run by the server, two workers, against the program in one process.
# The workers run on OMNILEARN_PYTHON (Debian's /usr/bin/python3 and its torch 1.13 unless
# set: tests/run.sh runs this test again on the pip venv of deploy/install-venv.sh torch).
source "$(dirname "$0")/e2e_lib.sh"
PY=${OMNILEARN_PYTHON:-/usr/bin/python3}
torch_version=$("$PY" -c 'import torch; print(torch.__version__)') || fail "$PY has no torch"
echo "users_models_test: $PY, torch $torch_version"
export TORCHINDUCTOR_CACHE_DIR=$WORK/inductor  # torch.compile's files stay in the test's folder
PY_RUNFILES=$RUNFILES/python
EXAMPLES=$PY_RUNFILES/examples
export PYTHONPATH=$PY_RUNFILES
mkdir -p "$WORK/prefix/bin"
install -m 0755 "$SERVER" "$WORK/prefix/bin/"  # where deploy/install.sh --prefix puts it
export PATH=$WORK/prefix/bin:$PATH

# ---- 1. the character transformer (128 KiB of text, a tenth of an epoch)
for mode in sync async; do
  lr=0.003
  if [ "$mode" = async ]; then lr=0.00375; fi  # docs/optimizer.md's rate for async Adam: 1.25x the sync one
  timeout 300 "$PY" -m omnilearn.run --nproc 2 \
    --server_args="--mode=$mode --optimizer=adamw --lr=$lr --weight_decay=0.01 --clip_grad_norm=1 \
    --global_batch=32 --quiet --export=$WORK/gpt_$mode.safetensors" \
    "$EXAMPLES/char_transformer.py" --max_bytes=131072 --epochs=0.5 --devices=0:2,0:8 > "$WORK/gpt_$mode.log" 2>&1 ||
    { tail -n 20 "$WORK/gpt_$mode.log" >&2; fail "gpt $mode: the launcher failed"; }
  out=$(timeout 120 "$PY" "$EXAMPLES/char_transformer.py" --max_bytes=131072 \
    --evaluate="$WORK/gpt_$mode.safetensors") || fail "gpt $mode: the export does not load strictly"
  echo "gpt $mode: $out"
  # Untrained, the loss is ln(256) = 5.55; a few dozen AdamW steps take it well below 4.
  "$PY" -c "import sys; loss = float(sys.argv[1].split()[-1]); assert loss < 4.0, loss" "$out" ||
    fail "gpt $mode: the model did not train ($out)"
done
"$PY" - "$WORK/gpt_sync.safetensors" <<'PY' || fail "gpt: the mask travelled"
import sys, omnilearn
state = omnilearn.load_state_dict(sys.argv[1])
assert not [k for k in state if k.endswith(".mask")], list(state)
print(f"gpt: {len(state)} tensors exported, no mask")
PY

# torch.compile'd (dynamic batch sizes) under bf16 autocast: the export is the plain model's.
if "$PY" -c 'import sys, torch; sys.exit(not hasattr(torch, "compile"))'; then
  timeout 600 "$PY" -m omnilearn.run --nproc 2 \
    --server_args="--optimizer=adamw --lr=0.003 --weight_decay=0.01 --clip_grad_norm=1 \
    --global_batch=32 --quiet --export=$WORK/gpt_compiled.safetensors" \
    "$EXAMPLES/char_transformer.py" --max_bytes=131072 --epochs=0.5 --devices=0:2,0:8 --compile --autocast=bf16 \
    > "$WORK/gpt_compiled.log" 2>&1 ||
    { tail -n 20 "$WORK/gpt_compiled.log" >&2; fail "gpt compiled: the launcher failed"; }
  out=$(timeout 120 "$PY" "$EXAMPLES/char_transformer.py" --max_bytes=131072 \
    --evaluate="$WORK/gpt_compiled.safetensors") || fail "gpt compiled: the export does not load strictly"
  echo "gpt torch.compile + bf16 autocast: $out"
  "$PY" -c "import sys; loss = float(sys.argv[1].split()[-1]); assert loss < 4.0, loss" "$out" ||
    fail "gpt compiled: the model did not train ($out)"
else
  out=$("$PY" "$EXAMPLES/char_transformer.py" --compile 2>&1) && fail "--compile ran on torch $torch_version"
  echo "$out" | grep -q "needs torch 2.0 or newer; this is torch" || fail "--compile refused without a reason: $out"
  echo "gpt: --compile on torch $torch_version: $out"
fi

# ---- 2. ResNet-18 (3 workers, 3 iterations each on 960 images), sync and async
for mode in sync async; do
  timeout 300 "$PY" -m omnilearn.run --nproc 3 \
    --server_args="--mode=$mode --lr=0.05 --global_batch=48 --quiet --export=$WORK/resnet_$mode.safetensors" \
    "$EXAMPLES/resnet18_fashion.py" --limit=960 --max_iterations=3 > "$WORK/resnet_$mode.log" 2>&1 ||
    { tail -n 20 "$WORK/resnet_$mode.log" >&2; fail "resnet18 $mode: the launcher failed"; }
  out=$(timeout 120 "$PY" "$EXAMPLES/resnet18_fashion.py" --evaluate="$WORK/resnet_$mode.safetensors" \
    --test_limit=500) || fail "resnet18 $mode: the export does not load strictly"
  echo "resnet18 $mode: $out"
  # Sync: every round's count; async: the count of the last push's worker (at least its own step).
  least=3
  if [ "$mode" = async ]; then least=1; fi
  "$PY" - "$WORK/resnet_$mode.safetensors" "$least" <<'PY' || fail "resnet18 $mode: the BatchNorm counter is not an int64 count"
import sys, torch, omnilearn
t = omnilearn.load_state_dict(sys.argv[1])["bn1.num_batches_tracked"]
assert t.dtype == torch.int64 and t.item() >= int(sys.argv[2]), t
print(f"resnet18: bn1.num_batches_tracked = {t.item()} (int64)")
PY
done

# ---- 3. The LSTM language model (one epoch of 128 KiB; untrained, perplexity 256)
timeout 300 "$PY" -m omnilearn.run --nproc 2 \
  --server_args="--lr=20 --momentum=0 --weight_decay=0 --clip_grad_norm=0.25 --global_batch=32 --quiet \
  --export=$WORK/lstm.safetensors" \
  "$EXAMPLES/lstm_language_model.py" --max_bytes=131072 --epochs=1 --devices=0:2,0:8 > "$WORK/lstm.log" 2>&1 ||
  { tail -n 20 "$WORK/lstm.log" >&2; fail "lstm: the launcher failed"; }
out=$(timeout 120 "$PY" "$EXAMPLES/lstm_language_model.py" --max_bytes=131072 --evaluate="$WORK/lstm.safetensors") ||
  fail "lstm: the export does not load strictly"
echo "lstm: $out"
"$PY" -c "import sys; ppl = float(sys.argv[1].split()[-1]); assert ppl < 20, ppl" "$out" ||
  fail "lstm: the model did not train ($out)"
# ---- 4. The user's optimizer, mirrored (the server's flags say SGD: the worker's AdamW replaces them)
timeout 300 "$PY" -m omnilearn.run --nproc 1 --server_args="--global_batch=32 --optimizer=sgd --lr=0.1" \
  "$(dirname "$0")/optimizer_mirror_job.py" > "$WORK/mirror.log" 2>&1 ||
  { tail -n 20 "$WORK/mirror.log" >&2; fail "optimizer mirror: the job failed"; }
grep "^mirror:" "$WORK/mirror.log"
grep -q "the job runs worker0's optimizer: AdamW(lr=0.01, betas=(0.9, 0.99)" "$WORK/mirror.log" ||
  fail "optimizer mirror: the server did not say it runs the worker's AdamW"
grep -q "worker0's scheduler set the learning rate to 0.005, 0.002" "$WORK/mirror.log" ||
  fail "optimizer mirror: the scheduler's first rates did not reach the server"
# torch's Muon recipe, [Muon, AdamW], run as one (torch 2.9 and later have Muon)
if "$PY" -c 'import sys, torch; sys.exit(not hasattr(torch.optim, "Muon"))'; then
  timeout 300 "$PY" -m omnilearn.run --nproc 1 --server_args="--global_batch=32 --optimizer=sgd --lr=0.1" \
    "$(dirname "$0")/optimizer_mirror_job.py" muon > "$WORK/muon.log" 2>&1 ||
    { tail -n 20 "$WORK/muon.log" >&2; fail "muon mirror: the job failed"; }
  grep "^mirror:" "$WORK/muon.log"
  grep -q "the job runs worker0's optimizer: Muon(lr=0.02" "$WORK/muon.log" ||
    fail "muon mirror: the server did not say it runs the worker's Muon"
  # Sharded: Muon reads whole matrices, so the job's map cuts no tensor (each on one server).
  timeout 300 "$PY" -m omnilearn.run --nproc 1 --shards 2 \
    --server_args="--global_batch=32 --optimizer=sgd --lr=0.1" "$(dirname "$0")/optimizer_mirror_job.py" muon \
    > "$WORK/muon_sharded.log" 2>&1 || { tail -n 20 "$WORK/muon_sharded.log" >&2; fail "muon mirror: sharded"; }
  grep "^mirror:" "$WORK/muon_sharded.log"
  grep -q "shard 1 registered" "$WORK/muon_sharded.log" || fail "muon mirror: no shard registered with --shards 2"
fi
# ---- 5. pytorch/examples' mnist program with its own Adadelta and StepLR (the flags say SGD)
timeout 600 "$PY" -m omnilearn.run --nproc 2 --server_args="--global_batch=64 --optimizer=sgd --quiet" \
  "$(dirname "$0")/mnist_port_job.py" > "$WORK/mnist.log" 2>&1 ||
  { tail -n 20 "$WORK/mnist.log" >&2; fail "mnist port: the job failed"; }
grep "^mnist_port:" "$WORK/mnist.log"
grep -q "the job runs worker[0-9]'s optimizer: Adadelta(lr=1, rho=0.9" "$WORK/mnist.log" ||
  fail "mnist port: the server did not say it runs the program's Adadelta"
grep -q "scheduler set the learning rate to 0.7" "$WORK/mnist.log" ||
  fail "mnist port: StepLR's rate did not reach the server"
echo "users_models_test: OK"
