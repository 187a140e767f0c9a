"""A user's own torch.optim.AdamW with two param groups (no weight decay on biases, a lower
rate for them) and a ReduceLROnPlateau scheduler on a validation loss, run by the server
(Worker(..., optimizer=opt)), against the same program trained in one process with
torch.optim on the same batches: the weights must agree to float tolerance.

    python -m omnilearn.run --nproc 1 --server_args="--global_batch=32 ..." tests/optimizer_mirror_job.py

The server is started with other optimizer flags (SGD): the worker's optimizer replaces them.
With the argument `muon`: torch's Muon recipe instead, [Muon over the weight matrices, AdamW
over the biases] (the scheduler on Muon's rate); the single process runs torch's Muon with
its Newton-Schulz iteration in float32, as the server does (torch's own is bfloat16).
Prints "mirror: ..." and exits non-zero on a mismatch.
"""

import sys

import torch
from torch import nn
from torch.nn import functional as F

import omnilearn

EVAL_EVERY = 4  # steps between validations (and scheduler steps)


def data():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(640, 20, generator=g)
    y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()
    return x[:512], y[:512], x[512:], y[512:]


MUON = sys.argv[1:] == ["muon"]


class _Float32Torch:
    """torch, but its bfloat16 is float32 (torch.optim.Muon's iteration in float32)."""

    def __getattr__(self, name):
        return torch.float32 if name == "bfloat16" else getattr(torch, name)


def build():
    """(model, the optimizer the worker passes, its groups' rates, the scheduler)."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    if MUON:
        muon = torch.optim.Muon(decay, lr=0.02, weight_decay=0.05)
        opt = [muon, torch.optim.AdamW(no_decay, lr=0.004, weight_decay=0.0)]
        scheduled = muon
    else:
        opt = scheduled = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                                             {"params": no_decay, "weight_decay": 0.0, "lr": 0.004}],
                                            lr=0.01, betas=(0.9, 0.99))
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(scheduled, factor=0.5, patience=0, threshold=0.1, min_lr=1e-3)
    return model, opt, sched


def rates_of(opt):
    return [g["lr"] for o in (opt if isinstance(opt, list) else [opt]) for g in o.param_groups]


def validation(model, vx, vy):
    with torch.no_grad():
        return float(F.cross_entropy(model(vx), vy))


def main():
    x, y, vx, vy = data()
    model, opt, sched = build()
    batches, rates = [], []
    with omnilearn.Worker(None, model, dataset_size=len(x), epochs=3, optimizer=opt) as w:
        for step in w:
            batches.append(list(step.samples))
            loss = F.cross_entropy(model(x[step.samples]), y[step.samples])
            loss.backward()
            w.push(loss)
            if len(batches) % EVAL_EVERY == 0:
                w.wait_model()
                sched.step(validation(model, vx, vy))
            rates.append(rates_of(opt))
        w.wait_model()
    job = {n: t.detach().clone() for n, t in model.state_dict().items()}

    # The same program in one process: torch.optim steps, on the job's batches.
    if MUON:
        import torch.optim._muon as muon_module
        muon_module.torch = _Float32Torch()
    ref, ref_opt, ref_sched = build()
    ref_opts = ref_opt if isinstance(ref_opt, list) else [ref_opt]
    for i, samples in enumerate(batches):
        for o in ref_opts:
            o.zero_grad()
        F.cross_entropy(ref(x[samples]), y[samples]).backward()
        for o in ref_opts:
            o.step()
        if (i + 1) % EVAL_EVERY == 0:
            ref_sched.step(validation(ref, vx, vy))
        assert rates_of(ref_opt) == rates[i], (i, rates[i], rates_of(ref_opt))
    worst = max(float((job[n] - t).abs().max()) for n, t in ref.state_dict().items())
    lowered = sorted({r[0] for r in rates}, reverse=True)
    print(f"mirror: {len(batches)} steps, group-0 rates {lowered}, validation loss job "
          f"{validation(model, vx, vy):.5f} single process {validation(ref, vx, vy):.5f}, largest weight "
          f"difference {worst:.2e}", flush=True)
    if len(lowered) < 2:
        sys.exit("mirror: the scheduler never lowered the rate: the test would not show it reaching the server")
    if worst > 1e-4:
        sys.exit("mirror: the job's weights are not the single-process run's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
