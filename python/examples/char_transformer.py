"""A GPT-style character transformer trained as OmniLearn workers: pre-norm blocks with a
causal mask held as a non-persistent buffer (not model state: it never travels), AdamW and
gradient clipping on the server. Run it with the launcher:

    python -m omnilearn.run --nproc 2 \\
      --server_args="--optimizer=adamw --lr=0.003 --weight_decay=0.01 --clip_grad_norm=1 --global_batch=64 \\
                     --export=model.safetensors" \\
      python/examples/char_transformer.py --text=corpus.txt --epochs=1 --devices=0:3,0:12

With --mode=async in --server_args, give AdamW 1.25x the sync rate (--lr=0.00375; docs/optimizer.md's
optimizer table). Each copy is a worker (OMNILEARN_RANK tells them apart); `--devices` gives
each rank an emulated device (FIXED_MS:MS_PER_SAMPLE, omnilearn.emulation), here 4x apart.
Then:

    python3 python/examples/char_transformer.py --text=corpus.txt --evaluate=model.safetensors

loads the export strictly into a fresh model and prints the validation loss (the last 10%
of the text). Without --text the corpus is Python's own standard library sources.
"""

import argparse
import glob
import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

import omnilearn


class Block(nn.Module):
    def __init__(self, dim, heads, context):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        # Not model state: each worker builds its own, nothing of it is pushed or exported.
        self.register_buffer("mask", torch.ones(context, context, dtype=torch.bool).tril(), persistent=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class CharGpt(nn.Module):
    def __init__(self, vocab=256, dim=128, layers=2, heads=4, context=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Parameter(torch.zeros(context, dim))
        self.blocks = nn.ModuleList(Block(dim, heads, context) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def corpus(path, max_bytes, context):
    """(training windows [N, context + 1], validation windows): bytes of the text, the last
    10% held out."""
    if path:
        with open(path, "rb") as f:
            data = f.read(max_bytes)
    else:
        data = b""
        for name in sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py"))):
            with open(name, "rb") as f:
                data += f.read()
            if len(data) >= max_bytes:
                break
        data = data[:max_bytes]
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    n = (len(t) - 1) // context
    windows = torch.stack([t[i * context:i * context + context + 1] for i in range(n)])
    split = int(n * 0.9)
    return windows[:split], windows[split:]


def loss_of(model, windows):
    return F.cross_entropy(model(windows[:, :-1]).reshape(-1, 256), windows[:, 1:].reshape(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="", help="a text file (default: Python's standard library sources)")
    p.add_argument("--max_bytes", type=int, default=2 << 20)
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--devices", default="", help="an emulated device per rank, comma-separated (FIXED:PER_SAMPLE)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--evaluate", default="", help="an export: load it strictly and print the validation loss")
    p.add_argument("--compile", action="store_true", help="train the torch.compile'd model (torch 2.x)")
    p.add_argument("--autocast", choices=["", "bf16"], default="", help="forward and loss under bf16 autocast")
    a = p.parse_args()
    torch.set_num_threads(1)
    train, valid = corpus(a.text, a.max_bytes, a.context)
    torch.manual_seed(a.seed)  # every worker starts from the same model
    model = CharGpt(context=a.context)
    if a.evaluate:
        model.load_state_dict(omnilearn.load_state_dict(a.evaluate))  # strict
        model.eval()
        with torch.no_grad():
            print(f"validation loss {float(loss_of(model, valid[:512])):.4f}", flush=True)
        return
    rank = int(os.environ.get("OMNILEARN_RANK", "0"))
    devices = [d for d in a.devices.split(",") if d]
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"--compile needs torch 2.0 or newer; this is torch {torch.__version__}")
    # The batch changes at each re-plan: compiled for dynamic batch sizes from the start
    # (else torch.compile recompiles at the second size, then goes dynamic).
    net = torch.compile(model, dynamic=True) if a.compile else model
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast == "bf16")
    with omnilearn.Worker(None, net, dataset_size=len(train), epochs=a.epochs,
                          emulate_device=devices[rank % len(devices)] if devices else None) as w:
        for step in w:
            with autocast:  # the gradients stay float32: the parameters are
                loss = loss_of(net, train[step.samples])
            loss.backward()
            w.push(loss)
        print(f"{w.name}: {w.iteration} steps, {w.samples_seen} samples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
