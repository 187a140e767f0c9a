"""An LSTM language model over a token stream, trained as OmniLearn workers: the model of
pytorch/examples' word_language_model (embedding, a 2-layer LSTM, a linear decoder; plain
SGD at lr 20 with the gradient's norm clipped to 0.25, both on the server). Run it with the
launcher:

    python -m omnilearn.run --nproc 2 \\
      --server_args="--lr=20 --momentum=0 --weight_decay=0 --clip_grad_norm=0.25 --global_batch=40 \\
                     --export=lstm.safetensors" \\
      python/examples/lstm_language_model.py --text=corpus.txt --epochs=1 --devices=0:2,0:8

Then `python3 python/examples/lstm_language_model.py --text=corpus.txt --evaluate=lstm.safetensors`
loads the export strictly and prints the validation perplexity (the last 10% of the stream).

What a sample is for a token stream: a window. The stream is cut into non-overlapping
windows of --bptt + 1 tokens (inputs, and the same shifted by one as targets); sample i is
window i, so the server's sample ids, its epochs and its exactly-once accounting work as for
images. Each step starts its LSTM from a fresh (zero) hidden state. The single-process
program carries the hidden state from one batch to the next (truncated BPTT across batches):
that needs batch row r of step t+1 to continue batch row r of step t, which cannot hold
here: the server shuffles the windows, each worker's batch size changes at every re-plan,
and consecutive windows go to different workers. A window long enough for the context the
model needs (--bptt) replaces the carried state. Without --text the stream is the bytes of
Python's standard library sources (a character model, 256 tokens).
"""

import argparse
import math
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

import omnilearn
from char_transformer import corpus  # the same stream, cut into windows of bptt + 1 tokens (beside this file)


class LstmLm(nn.Module):
    def __init__(self, vocab=256, dim=128, layers=2, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(dim, vocab)

    def forward(self, tokens):
        # No hidden state in or out: each window starts from zeros (see the module's doc).
        out, _ = self.rnn(self.drop(self.encoder(tokens)))
        return self.decoder(self.drop(out))


def loss_of(model, batch):
    return F.cross_entropy(model(batch[:, :-1]).reshape(-1, 256), batch[:, 1:].reshape(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--text", default="", help="a text file (default: Python's standard library sources)")
    p.add_argument("--max_bytes", type=int, default=2 << 20)
    p.add_argument("--bptt", type=int, default=35, help="tokens per window (a sample)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--devices", default="", help="an emulated device per rank, comma-separated (FIXED:PER_SAMPLE)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--evaluate", default="", help="an export: load it strictly and print the validation perplexity")
    a = p.parse_args()
    torch.set_num_threads(1)
    train, valid = corpus(a.text, a.max_bytes, a.bptt)
    torch.manual_seed(a.seed)  # every worker starts from the same model
    model = LstmLm()
    if a.evaluate:
        model.load_state_dict(omnilearn.load_state_dict(a.evaluate))  # strict
        model.eval()
        with torch.no_grad():
            print(f"validation perplexity {math.exp(float(loss_of(model, valid[:512]))):.2f}", flush=True)
        return 0
    rank = int(os.environ.get("OMNILEARN_RANK", "0"))
    devices = [d for d in a.devices.split(",") if d]
    with omnilearn.Worker(None, model, dataset_size=len(train), epochs=a.epochs,
                          emulate_device=devices[rank % len(devices)] if devices else None) as w:
        for step in w:
            loss = loss_of(model, train[step.samples])
            loss.backward()
            w.push(loss)
        print(f"{w.name}: {w.iteration} steps, {w.samples_seen} samples", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
