#!/usr/bin/python3
"""overlap: how much of an iteration's communication backward hides, on the emulated
cluster (tests/cluster.sh: a server host and 4 worker hosts, each worker behind a link of
RATE, the server behind 4 x RATE so that its own link is not what limits). Sync, a model of
M MB (L Linear layers), equal batches; every layer's forward and backward take an emulated
time (a sleep inside autograd, so backward finishes the layers one by one, last first, as a
device does): backward as long as the push's wire time, forward half of it.

Per iteration and worker: the iteration runs from one step's start to the next's; compute =
forward + loss + backward, less the forward's waits for a model still arriving; exposed
communication = iteration - compute. The figure is exposed / wire, wire being the time the
link needs for the iteration's bytes (the gradient up and the model down). Each rate runs
three ways: bucket_mb=0 (the gradient leaves whole after backward, the model is received
whole before the next step: the baseline), buckets during backward, and buckets with the
model arriving during the next forward (overlap_pull, the default).

    bazel build -c opt //server:omnilearn_server //python:omnilearn
    /usr/bin/python3 bench/overlap.py [--rates=1gbit,10gbit] [--megabytes=100] [--iterations=8]
Needs root (network namespaces).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the checkout's library
sys.path.insert(0, os.path.join(ROOT, "bench"))
import build_check  # noqa: E402
from heterogeneity import Cluster  # noqa: E402

WORKERS = 4
PORT = 50051
# (bucket_mb, overlap_pull, label): the baseline first.
MODES = ((0, 0, "whole, after backward"), (4, 0, "push during backward"),
         (4, 1, "+ pull during forward"))


def rate_bytes(rate):
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}[rate[-4]]
    return float(rate[:-4]) * scale / 8


def times4(rate):
    return f"{float(rate[:-4]) * 4:g}{rate[-4:]}"


def worker_main(args):
    """One worker process: trains --iterations steps, prints per-step times as JSON."""
    import torch
    from omnilearn.worker import Worker

    class Delay(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, fwd, bwd):
            ctx.bwd = bwd
            time.sleep(fwd)
            return x.view_as(x)

        @staticmethod
        def backward(ctx, g):
            time.sleep(ctx.bwd)
            return g, None, None

    class Layer(torch.nn.Module):
        def __init__(self, d, fwd, bwd):
            super().__init__()
            self.linear, self.fwd, self.bwd = torch.nn.Linear(d, d), fwd, bwd

        def forward(self, x):
            return self.linear(Delay.apply(x, self.fwd, self.bwd))

    layers = args.layers
    d = int((args.megabytes * (1 << 20) / 4 / layers) ** 0.5)
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Layer(d, args.forward_s / layers, args.backward_s / layers)
                                  for _ in range(layers)])
    x, y = torch.randn(64, d), torch.randint(0, d, (64,))
    starts, computes = [], []
    with Worker(args.server, model, name=args.name, max_iterations=args.iterations, bucket_mb=args.bucket_mb,
                overlap_pull=args.overlap_pull, rpc_timeout=120, connect_timeout=60, log=lambda _: None) as w:
        for step in w:
            t0, waited = time.perf_counter(), w.arrival_wait_seconds
            xb = x[:step.batch_size].detach().requires_grad_()  # backward reaches the first layer's delay
            loss = torch.nn.functional.cross_entropy(model(xb), y[:step.batch_size])
            loss.backward()
            # Compute without the forward's waits for the model still arriving (communication).
            computes.append(time.perf_counter() - t0 - (w.arrival_wait_seconds - waited))
            starts.append(t0)
            w.push(loss)
    # An iteration: from one step's start to the next's (the last step has no next).
    print(json.dumps([{"compute_s": c, "iteration_s": b - a} for c, a, b in zip(computes, starts, starts[1:])]))


def one_run(args, rate, bucket_mb, overlap_pull, push_wire_s):
    cluster = Cluster({"ps": times4(rate), **{f"w{i}": rate for i in range(WORKERS)}})
    server = None
    try:
        server = subprocess.Popen(cluster.command("ps", [
            f"{args.bin_dir}/server/omnilearn_server", f"--port={PORT}", "--mode=sync", f"--num_workers={WORKERS}",
            f"--global_batch={4 * WORKERS}", "--controller=off", "--lr=0.001", "--momentum=0", "--metrics_port=0",
            "--quiet"]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        workers = [subprocess.Popen(cluster.command(f"w{i}", [
            sys.executable, os.path.abspath(__file__), "--worker", f"--server={cluster.addr['ps']}:{PORT}",
            f"--name=w{i}", f"--megabytes={args.megabytes}", f"--layers={args.layers}",
            f"--iterations={args.iterations}", f"--bucket_mb={bucket_mb}", f"--overlap_pull={overlap_pull}",
            f"--forward_s={push_wire_s / 2}", f"--backward_s={push_wire_s}"]), stdout=subprocess.PIPE, text=True)
            for i in range(WORKERS)]
        rows = []
        for p in workers:
            out, _ = p.communicate(timeout=args.timeout)
            if p.returncode != 0:
                raise RuntimeError(f"a worker failed ({p.returncode})")
            rows += json.loads(out.strip().splitlines()[-1])[args.skip:]
        return rows
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        cluster.close()


def add_run_args(ap, iterations, timeout, out):
    """The flags of a run of this file's workers (the model, the iterations measured) and
    of its results, shared with bench/shards.py."""
    ap.add_argument("--megabytes", type=float, default=100)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=iterations)
    ap.add_argument("--skip", type=int, default=2, help="first iterations left out (joins, first pulls)")
    ap.add_argument("--timeout", type=float, default=timeout)
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--server", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--forward_s", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--backward_s", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--bucket_mb", type=float, default=4.0, help=argparse.SUPPRESS)
    ap.add_argument("--overlap_pull", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--rates", default="1gbit,10gbit")
    add_run_args(ap, iterations=8, timeout=600, out="overlap.json")
    args = ap.parse_args()
    if args.worker:
        return worker_main(args)
    build_check.check(args.bin_dir, ["server/omnilearn_server"], "omnilearn")
    results = []
    for rate in args.rates.split(","):
        model_bytes = args.megabytes * (1 << 20)
        push_wire_s = model_bytes / rate_bytes(rate)
        wire_s = 2 * push_wire_s  # the gradient up, the model down
        for bucket_mb, overlap_pull, label in MODES:
            rows = one_run(args, rate, bucket_mb, overlap_pull, push_wire_s)
            compute = statistics.median(r["compute_s"] for r in rows)
            iteration = statistics.median(r["iteration_s"] for r in rows)
            exposed = statistics.median(r["iteration_s"] - r["compute_s"] for r in rows)
            results.append({"rate": rate, "mode": label, "bucket_mb": bucket_mb, "overlap_pull": overlap_pull,
                            "wire_s": wire_s,
                            "compute_s": compute, "iteration_s": iteration, "exposed_s": exposed,
                            "exposed_over_wire": exposed / wire_s, "samples": len(rows)})
            print(f"{rate:>7} {label:<22} compute {compute:6.3f} s  iteration {iteration:6.3f} s  "
                  f"exposed {exposed:6.3f} s = {exposed / wire_s:4.2f} of the wire ({wire_s:.3f} s)", flush=True)
    with open(args.out, "w") as f:
        json.dump({"megabytes": args.megabytes, "workers": WORKERS, "results": results}, f, indent=1)
    print(f"results: {args.out}")


if __name__ == "__main__":
    sys.exit(main())
