"""Async training with Adam/AdamW at the sync learning rate: the server's async rules for
Adam (a push is its b/B share of a global-batch step by the square-root rule,
--adam_sqrt_scaling; workers given the weights stepped ahead by the other workers' steps
their gradient will meet, in those workers' step sizes and paces, --adam_weight_prediction,
with beta1 as configured; without the prediction beta1 is lowered by the momentum asynchrony
adds, 1 - 1/n, as SGD's momentum is, with --staleness_damping) against each left out and
against what earlier releases did (a full Adam step at lr * b/B, beta1 as configured), at the
sync rate, at 1.25x it (docs/optimizer.md's rule for Adam's async rate) and at twice it, beside sync
itself.

The job is python/examples/char_transformer.py (a GPT-style character model, 2 blocks, dim
128, context 64, AdamW, clipping; 2 MB of text) with two Python workers on emulated devices
4x apart, the same samples in every run (one epoch), through `python -m omnilearn.run`. The
validation loss of each run's export (loaded strictly into a fresh model) is the result.

    bazel build -c opt //server:omnilearn_server //python:omnilearn
    /usr/bin/python3 bench/async_adam.py [--seeds 1 2] [--epochs 1] [--out bench/results/async_adam.md]  # and .json
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "python", "examples", "char_transformer.py")
BEFORE = "--adam_weight_prediction=off --adam_sqrt_scaling=off --staleness_damping=off"
RUNS = [  # (label, mode, lr multiple, more server flags)
    ("sync", "sync", 1, ""),
    ("async: the rules at 1.25x the sync rate (docs/optimizer.md's rate)", "async", 1.25, ""),
    ("async: the rules (square-root share, weights predicted, beta1 as configured)", "async", 1, ""),
    ("async: the rules without the weight prediction (beta1 lowered by 1 - 1/n)", "async", 1,
     "--adam_weight_prediction=off"),
    ("async: beta1 lowered, full Adam steps at lr * b/B", "async", 1,
     "--adam_weight_prediction=off --adam_sqrt_scaling=off"),
    ("async as before: full steps, beta1 as configured", "async", 1, BEFORE),
    ("async as before, 2x lr (the issue's try)", "async", 2, BEFORE),
]


def run_one(mode, lr, flags, seed, epochs, work):
    export = os.path.join(work, f"run-{time.monotonic_ns()}.safetensors")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), OMP_NUM_THREADS="1")
    server_args = (f"--mode={mode} --optimizer=adamw --lr={lr} --weight_decay=0.01 --clip_grad_norm=1 "
                   f"--global_batch=64 --data_seed={seed} --quiet --export={export} {flags}").strip()
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "omnilearn.run", "--nproc", "2",
                    f"--server_bin={ROOT}/bazel-bin/server/omnilearn_server", f"--server_args={server_args}",
                    EXAMPLE, f"--epochs={epochs}", "--devices=0:3,0:12", f"--seed={seed}"],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=1200)
    seconds = time.monotonic() - start
    out = subprocess.run([sys.executable, EXAMPLE, f"--evaluate={export}", f"--seed={seed}"], env=env, check=True,
                         capture_output=True, text=True, timeout=300).stdout
    return float(re.search(r"validation loss ([0-9.]+)", out).group(1)), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "async_adam.md"))
    ap.add_argument("--runs", type=int, default=len(RUNS),
                    help="the first N rows only (2: sync and docs/optimizer.md's rate; 3: and the sync rate)")
    a = ap.parse_args()
    runs = RUNS[:max(1, a.runs)]
    losses = {label: [] for label, *_ in runs}
    with tempfile.TemporaryDirectory() as work:
        for seed in a.seeds:
            for label, mode, multiple, flags in runs:
                loss, seconds = run_one(mode, a.lr * multiple, flags, seed, a.epochs, work)
                losses[label].append(loss)
                print(f"seed {seed}: {label}: validation loss {loss:.4f} ({seconds:.0f} s)", flush=True)
    sync = statistics.mean(losses["sync"])
    lines = [f"Validation loss after {a.epochs:g} epoch(s) (the same samples), AdamW lr {a.lr:g} (sync rate), "
             f"seeds {', '.join(map(str, a.seeds))}; `{' '.join(['bench/async_adam.py'] + sys.argv[1:])}`", "",
             "| run | " + " | ".join(f"seed {s}" for s in a.seeds) + " | mean | minus sync |",
             "|---|" + "---|" * (len(a.seeds) + 2)]
    for label, *_ in runs:
        mean = statistics.mean(losses[label])
        lines.append(f"| {label} | " + " | ".join(f"{x:.4f}" for x in losses[label]) +
                     f" | {mean:.4f} | {mean - sync:+.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(a.out, "w") as f:
        f.write(text)
    write_json(a, runs, losses)


def write_json(a, runs, losses):
    """The losses per seed beside the table (tools/docs_gen.py reads this form: a key per run)."""
    keys = {"sync": "sync", RUNS[1][0]: "async_rate_1.25x"}
    rows = [{"seed": seed, **{keys.get(label, label): [losses[label][i]] for label, *_ in runs}}
            for i, seed in enumerate(a.seeds)]
    doc = {"benchmark": "async_adam", "command": " ".join(["bench/async_adam.py"] + sys.argv[1:]),
           "job": __doc__.split("\n\n")[1].replace("\n", " "), "rows": rows}
    with open(os.path.splitext(a.out)[0] + ".json", "w") as f:
        json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
