"""Local steps (the server's --local_steps) with the program's own optimizer: each worker takes
H steps of its AdamW on a round's samples, then pushes the round's pseudo-gradient, and the
server's outer optimizer (DiLoCo's Nesterov SGD) steps the job's model.

    python -m omnilearn.run --nproc N --server_args="--global_batch=32 --local_steps=8 --optimizer=sgd \\
        --lr=LR --momentum=M --optimizer_options=nesterov=1" tests/local_steps_job.py LR M

One worker: the job's weights must be those of the same DiLoCo written out in one process
(the inner AdamW on the same batches, torch.optim.SGD(nesterov) on the pseudo-gradients).
Every run: the validation loss must fall to half of the untrained model's. Prints "local: ..."
and exits non-zero on a mismatch.
"""

import os
import sys

import torch
from torch import nn
from torch.nn import functional as F

import omnilearn


def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(640, 20, generator=g)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    return x[:512], y[:512], x[512:], y[512:]


def build():
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=0.01)


def validation(model, vx, vy):
    with torch.no_grad():
        return float(F.cross_entropy(model(vx), vy))


def single_process(rounds, x, y, lr, momentum):
    """DiLoCo in one process on the job's rounds (each a list of inner batches)."""
    model, inner = build()
    outer_model, _ = build()
    outer = torch.optim.SGD(outer_model.parameters(), lr=lr, momentum=momentum, nesterov=True)
    for batches in rounds:
        for samples in batches:
            inner.zero_grad()
            F.cross_entropy(model(x[samples]), y[samples]).backward()
            inner.step()
        with torch.no_grad():
            for p, q in zip(model.parameters(), outer_model.parameters()):
                q.grad = q - p  # the pseudo-gradient: the round's start less its end
        outer.step()
        with torch.no_grad():
            for p, q in zip(model.parameters(), outer_model.parameters()):
                p.copy_(q)
    return model


def main():
    x, y, vx, vy = data()
    model, opt = build()
    untrained = validation(model, vx, vy)
    rounds, batches = [], []
    with omnilearn.Worker(None, model, dataset_size=len(x), epochs=4, optimizer=opt) as w:
        for step in w:
            batches.append(step.samples.tolist())
            loss = F.cross_entropy(model(x[step.samples]), y[step.samples])
            loss.backward()
            before = w.iteration
            w.push(loss)
            if w.iteration != before:  # the round's push went: its batches are one round
                rounds.append(batches)
                batches = []
                print(f"local: round {len(rounds)} pushed", flush=True)
        w.wait_model()
        local_steps, local_batch = w.local_steps, w.local_batch
    trained = validation(model, vx, vy)
    steps = sorted({len(r) for r in rounds})
    print(f"local: {len(rounds)} rounds of {','.join(map(str, steps))} steps, "
          f"{sum(len(b) for r in rounds for b in r)} samples, validation loss {untrained:.4f} -> {trained:.4f}",
          flush=True)
    # --local_steps: H steps a round (a round of fewer samples, a step a sample); --local_batch:
    # a round of b samples is ceil(b / local_batch) steps.
    def wanted(n):
        return -(-n // local_batch) if local_batch > 0 else min(local_steps, n)
    if (local_steps < 2 and local_batch <= 0) or any(len(r) != wanted(sum(map(len, r))) for r in rounds):
        sys.exit("local: the rounds are not of the server's --local_steps or --local_batch")
    if os.environ.get("OMNILEARN_WORLD_SIZE", "1") == "1":
        ref = single_process(rounds, x, y, float(sys.argv[1]), float(sys.argv[2]))
        worst = max(float((a - b).abs().max()) for a, b in zip(model.parameters(), ref.parameters()))
        print(f"local: largest weight difference from DiLoCo in one process {worst:.2e}", flush=True)
        if worst > 1e-4:
            sys.exit("local: the job's weights are not DiLoCo's in one process")
    if trained > 0.5 * untrained:
        sys.exit("local: the job did not train")
    return 0


if __name__ == "__main__":
    sys.exit(main())
