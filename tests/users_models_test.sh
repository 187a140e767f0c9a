#!/usr/bin/env bash
# The two architectures a new user brought (issue 39), in a small form, each as the README
# runs it (`python -m omnilearn.run`), each export loaded strictly into a fresh model:
# 1. python/examples/char_transformer.py: a GPT-style character model with a non-persistent
#    causal mask, AdamW and clipping on the server, two workers on emulated devices 4x
#    apart, sync then async (the square-root rule: the sync rate).
# 2. python/examples/resnet18_fashion.py: torchvision's ResNet-18 (BatchNorm) on
#    Fashion-MNIST through a map-style Dataset and a DataLoader with worker processes and
#    pinned memory, three workers; num_batches_tracked comes back as int64.
source "$(dirname "$0")/e2e_lib.sh"
PY_RUNFILES=$RUNFILES/python
EXAMPLES=$PY_RUNFILES/examples
export PYTHONPATH=$PY_RUNFILES
mkdir -p "$WORK/prefix/bin"
install -m 0755 "$SERVER" "$WORK/prefix/bin/"  # where deploy/install.sh --prefix puts it
export PATH=$WORK/prefix/bin:$PATH

# ---- 1. the character transformer (128 KiB of text, a tenth of an epoch)
for mode in sync async; do
  lr=0.003
  if [ "$mode" = async ]; then lr=0.00375; fi  # the README's rate for async Adam: 1.25x the sync one
  timeout 300 /usr/bin/python3 -m omnilearn.run --nproc 2 \
    --server_args="--mode=$mode --optimizer=adamw --lr=$lr --weight_decay=0.01 --clip_grad_norm=1 \
    --global_batch=32 --quiet --export=$WORK/gpt_$mode.safetensors" \
    "$EXAMPLES/char_transformer.py" --max_bytes=131072 --epochs=0.5 --devices=0:2,0:8 > "$WORK/gpt_$mode.log" 2>&1 ||
    { tail -n 20 "$WORK/gpt_$mode.log" >&2; fail "gpt $mode: the launcher failed"; }
  out=$(timeout 120 /usr/bin/python3 "$EXAMPLES/char_transformer.py" --max_bytes=131072 \
    --evaluate="$WORK/gpt_$mode.safetensors") || fail "gpt $mode: the export does not load strictly"
  echo "gpt $mode: $out"
  # Untrained, the loss is ln(256) = 5.55; a few dozen AdamW steps take it well below 4.
  /usr/bin/python3 -c "import sys; loss = float(sys.argv[1].split()[-1]); assert loss < 4.0, loss" "$out" ||
    fail "gpt $mode: the model did not train ($out)"
done
/usr/bin/python3 - "$WORK/gpt_sync.safetensors" <<'PY' || fail "gpt: the mask travelled"
import sys, omnilearn
state = omnilearn.load_state_dict(sys.argv[1])
assert not [k for k in state if k.endswith(".mask")], list(state)
print(f"gpt: {len(state)} tensors exported, no mask")
PY

# ---- 2. ResNet-18 (3 workers, 3 iterations each on 960 images)
timeout 300 /usr/bin/python3 -m omnilearn.run --nproc 3 \
  --server_args="--lr=0.05 --global_batch=48 --quiet --export=$WORK/resnet.safetensors" \
  "$EXAMPLES/resnet18_fashion.py" --limit=960 --max_iterations=3 > "$WORK/resnet.log" 2>&1 ||
  { tail -n 20 "$WORK/resnet.log" >&2; fail "resnet18: the launcher failed"; }
out=$(timeout 120 /usr/bin/python3 "$EXAMPLES/resnet18_fashion.py" --evaluate="$WORK/resnet.safetensors" \
  --test_limit=500) || fail "resnet18: the export does not load strictly"
echo "resnet18: $out"
/usr/bin/python3 - "$WORK/resnet.safetensors" <<'PY' || fail "resnet18: the BatchNorm counter is not an int64 count"
import sys, torch, omnilearn
t = omnilearn.load_state_dict(sys.argv[1])["bn1.num_batches_tracked"]
assert t.dtype == torch.int64 and t.item() >= 3, t
print(f"resnet18: bn1.num_batches_tracked = {t.item()} (int64)")
PY
echo "users_models_test: OK"
