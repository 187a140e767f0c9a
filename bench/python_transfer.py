#!/usr/bin/python3
"""python_transfer: a Python worker (omnilearn.Worker on the C++ worker core) against the C++
worker (bench/worker_transfer.cc, the core's Session as the C++ trainer uses it), each
alone against its own omnilearn_server on 127.0.0.1 (async: a push is applied on arrival),
with a model of one Linear layer of S MB. Per repetition: a push, a pull of the model the
push moved, and a round (push + the new model, the worker's one call per iteration).
The two alternate (C++, Python, C++, Python) and the medians of all repetitions are
compared: the Python worker's rate as a fraction of the C++ worker's, per direction.

    bazel build -c opt //server:omnilearn_server //bench:worker_transfer //python:omnilearn
    /usr/bin/python3 bench/python_transfer.py [--sizes=16,100,256] [--reps=5] [--rounds=2]
"""

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from omnilearn.run import free_port, wait_listening  # noqa: E402  (the checkout's library)


class Server:
    def __init__(self, bin_dir):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [f"{bin_dir}/server/omnilearn_server", "--bind=127.0.0.1", f"--port={self.port}", "--mode=async",
             "--num_workers=1", "--global_batch=32", "--momentum=0", "--lr=0.001", "--metrics_port=0", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.address = f"127.0.0.1:{self.port}"
        wait_listening(self.port, self.proc, seconds=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def cpp_run(bin_dir, address, megabytes, reps):
    out = subprocess.run([f"{bin_dir}/bench/worker_transfer", f"--server={address}", f"--megabytes={megabytes}",
                          f"--reps={reps}"], check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out)


def python_run(address, megabytes, reps):
    import torch
    from omnilearn import worker as worker_mod
    torch.manual_seed(0)
    model = torch.nn.Linear(1024, megabytes * 256)
    times = {"push_s": [], "pull_s": [], "round_s": []}
    # Whole pushes (bucket_mb=0), as the C++ side sends them: no stream holds the session's push slot.
    with worker_mod.Worker(address, model, name="py", max_iterations=reps, bucket_mb=0, log=lambda _: None) as w:
        core, storage = w._core, w.storage
        for step in w:
            report = worker_mod._core.StepReport(batch_size=step.batch_size,
                                                 end=worker_mod._core.StepEnd(compute_seconds=0.01))
            start = time.perf_counter()
            core.push(report, storage.prepare_update(), storage.weights_host)  # as push() sends
            times["push_s"].append(time.perf_counter() - start)
            start = time.perf_counter()
            w.pull()  # the push moved the model
            times["pull_s"].append(time.perf_counter() - start)
            w.start_compute()
            start = time.perf_counter()
            w.push(torch.tensor(0.0))
            times["round_s"].append(time.perf_counter() - start)
    return times


LEGACY = """
import json, sys, time, torch
from omnilearn import worker as worker_mod
address, mb, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Linear(1024, mb * 256)
rounds = []
with worker_mod.Worker(address, model, name="legacy", max_iterations=reps, log=lambda _: None) as w:
    for step in w:
        w.start_compute()
        start = time.perf_counter()
        w.push(torch.tensor(0.0))
        rounds.append(time.perf_counter() - start)
print(json.dumps({"round_s": rounds}))
"""


def legacy_run(path, address, megabytes, reps):
    """An older Python worker (a checkout's python/ at `path`): its round (public API only)."""
    out = subprocess.run([sys.executable, "-c", LEGACY, address, str(megabytes), str(reps)], check=True,
                         capture_output=True, text=True, timeout=900, env=dict(os.environ, PYTHONPATH=path)).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="16,100,256")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two workers per size")
    p.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "python_transfer.json"))
    p.add_argument("--legacy_python", default="",
                   help="also time the round of the Python worker at this python/ folder (e.g. of an older commit)")
    args = p.parse_args()
    rows = []
    print("python_transfer: the Python worker against the C++ worker, each alone on its own server (async);")
    print("rates in GB/s of model bytes (a round moves the model both ways), medians of all repetitions")
    print(f"{'MB':>5} | {'push C++':>8} {'Python':>7} {'ratio':>6} | {'pull C++':>8} {'Python':>7} {'ratio':>6} | "
          f"{'round C++':>9} {'Python':>7} {'ratio':>6}")
    for mb in [int(s) for s in args.sizes.split(",")]:
        runs = {"cpp": {"push_s": [], "pull_s": [], "round_s": []}, "python": {"push_s": [], "pull_s": [], "round_s": []}}
        if args.legacy_python:
            runs["legacy"] = {"round_s": []}
        for _ in range(args.rounds):
            for who in runs:
                with Server(args.bin_dir) as s:
                    if who == "cpp":
                        got = cpp_run(args.bin_dir, s.address, mb, args.reps)
                    elif who == "python":
                        got = python_run(s.address, mb, args.reps)
                    else:
                        got = legacy_run(args.legacy_python, s.address, mb, args.reps)
                for k, v in got.items():
                    runs[who][k].extend(v)
        gb = (mb * 256 * 1025 * 4) / 1e9  # weight and bias
        row = {"megabytes": mb, "bytes": int(gb * 1e9)}
        for k, ways in (("push", 1), ("pull", 1), ("round", 2)):
            for who in ("cpp", "python"):
                row[f"{k}_{who}_gbps"] = ways * gb / statistics.median(runs[who][f"{k}_s"])
            row[f"{k}_ratio"] = row[f"{k}_python_gbps"] / row[f"{k}_cpp_gbps"]
        if "legacy" in runs:
            row["round_legacy_gbps"] = 2 * gb / statistics.median(runs["legacy"]["round_s"])
            row["round_legacy_ratio"] = row["round_legacy_gbps"] / row["round_cpp_gbps"]
        row["seconds"] = runs
        rows.append(row)
        print(f"{mb:5d} | {row['push_cpp_gbps']:8.2f} {row['push_python_gbps']:7.2f} {row['push_ratio']:6.2f} | "
              f"{row['pull_cpp_gbps']:8.2f} {row['pull_python_gbps']:7.2f} {row['pull_ratio']:6.2f} | "
              f"{row['round_cpp_gbps']:9.2f} {row['round_python_gbps']:7.2f} {row['round_ratio']:6.2f}" +
              (f" | before: round {row['round_legacy_gbps']:.2f} GB/s, {row['round_legacy_ratio']:.2f} of C++"
               if "legacy" in runs else ""), flush=True)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"benchmark": "python_transfer", "machine": f"{os.cpu_count()} cores, {socket.gethostname()}",
                   "reps": args.reps, "rounds": args.rounds, "rows": rows}, f, indent=1)
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
