#!/usr/bin/python3
"""bfloat16 on the wire against float32, measured in the same run.

1. Time: on the emulated cluster (tests/cluster.sh), a server host and four worker hosts
   behind links of --link (1gbit), a synchronous job of --rounds rounds with the MLP on
   Fashion-MNIST and fast emulated devices (the link is the limit), with --wire_dtype=f32
   and =bf16 alternately, --repeats times each: seconds per round and bytes moved.
2. Accuracy: the quickstart (deploy/quickstart.sh: 4 CPU workers, the CNN, 3 epochs) with
   each wire dtype, --accuracy_repeats times each (skip with --accuracy_repeats=0).

    bench/wire_dtype.py [--link=1gbit] [--repeats=3] [--accuracy_repeats=2]

Prints a markdown table; writes bench/results/wire_dtype.json. Needs root (namespaces) and
the -c opt binaries (bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from heterogeneity import MLP_BYTES, Cluster, Lines, rate_bytes  # noqa: E402


def timed_job(args, dtype, name):
    """One sync job on a fresh cluster: seconds per round, from the start barrier (the last
    worker's join) to the end of the job."""
    cluster = Cluster({h: args.link for h in ["ps", "w0", "w1", "w2", "w3"]})
    summary = os.path.join(args.work, f"{name}.json")
    procs, readers = [], []
    start = time.monotonic()
    try:
        ps = cluster.addr["ps"]
        server = cluster.command("ps", [
            f"{args.bin}/server/omnilearn_server", f"--bind={ps}", "--port=50051", "--mode=sync", "--num_workers=4",
            "--global_batch=128", "--controller=off", f"--wire_dtype={dtype}", "--metrics_port=0", "--exit_when_done",
            f"--summary_json={summary}", "--quiet"])
        for i, argv in enumerate([server] + [cluster.command(f"w{i}", [
                f"{args.bin}/worker/omnilearn_worker", f"--server={ps}:50051", f"--name=w{i}", "--device=cpu",
                "--dataset=fashion-mnist", "--model=mlp", "--epochs=0", f"--max_iterations={args.rounds}",
                "--log_every=0", f"--emulate_device={args.device}"]) for i in range(4)]):
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=dict(os.environ, OMP_NUM_THREADS="1")))
            readers.append(Lines(procs[-1], start, os.path.join(args.work, f"{name}.{i}.log")))
            readers[-1].start()
            if i == 0:
                time.sleep(0.5)  # the server listens before the workers dial
        for p in procs:
            if p.wait(timeout=600) != 0:
                raise RuntimeError(f"{name}: a process failed (logs in {args.work})")
        end = time.monotonic() - start
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        cluster.close()
    for r in readers:
        r.join()
    t0 = max(t for r in readers[1:] for t, line in r.lines if "joined as worker" in line)
    return (end - t0) / json.load(open(summary))["rounds"]


def quickstart_accuracy(dtype):
    out = subprocess.run([os.path.join(ROOT, "deploy", "quickstart.sh"), f"--wire_dtype={dtype}", "--metrics_port=0"],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"quickstart --wire_dtype={dtype} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    # The summary's lines (the last "test accuracy"; worker0's per-epoch lines come before).
    acc = re.findall(r"^test accuracy\s+([0-9.]+)%", out.stdout, re.M)[-1]
    wall = re.findall(r"^wall time\s+([0-9.]+) s", out.stdout, re.M)[-1]
    return float(acc), float(wall)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--device", default="2:0.05:0.05", help="every worker's --emulate_device (fast: the link rules)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--accuracy_repeats", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--work", default=f"/tmp/omnilearn-wire-dtype-{os.getpid()}")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    rounds = {"f32": [], "bf16": []}
    for r in range(args.repeats):
        for dtype in ("f32", "bf16"):
            per_round = timed_job(args, dtype, f"{dtype}-r{r}")
            rounds[dtype].append(per_round)
            print(f"{dtype} #{r}: {1000 * per_round:.1f} ms per round", flush=True)
    accuracy = {"f32": [], "bf16": []}
    for r in range(args.accuracy_repeats):
        for dtype in ("f32", "bf16"):
            acc, wall = quickstart_accuracy(dtype)
            accuracy[dtype].append(acc)
            print(f"quickstart {dtype} #{r}: {acc:.2f}% in {wall:.1f} s", flush=True)
    wire_ms = 1000 * 4 * MLP_BYTES / rate_bytes(args.link)  # four workers' pushes through the server's link
    lines = [f"| wire dtype | ms per round ({args.link} links, mean of {args.repeats} (range)) | ratio to f32 | "
             f"quickstart accuracy |", "|---|---|---|---|"]
    for dtype in ("f32", "bf16"):
        ms = [1000 * x for x in rounds[dtype]]
        ratio = statistics.mean(rounds[dtype]) / statistics.mean(rounds["f32"])
        acc = ", ".join(f"{a:.2f}%" for a in accuracy[dtype]) or "-"
        lines.append(f"| {dtype} | {statistics.mean(ms):.1f} ({min(ms):.1f}-{max(ms):.1f}) | {ratio:.2f} | {acc} |")
    text = "\n".join(lines) + (f"\n\nThe MLP moves {MLP_BYTES / 1e6:.2f} MB (float32) per push and per pull; four "
                               f"pushes through the server's {args.link} link take {wire_ms:.1f} ms each way. "
                               f"Devices {args.device}; {args.rounds} rounds per job. Command: {' '.join(sys.argv)}\n")
    print(text)
    json.dump({"args": vars(args), "seconds_per_round": rounds, "quickstart_accuracy": accuracy},
              open(os.path.join(args.out, "wire_dtype.json"), "w"), indent=1)
    open(os.path.join(args.out, "wire_dtype.md"), "w").write(text)


if __name__ == "__main__":
    main()
