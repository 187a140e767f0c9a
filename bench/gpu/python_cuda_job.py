#!/usr/bin/python3
"""The Python worker's CUDA path on a GPU host: one omnilearn_server on 127.0.0.1 and two
Python workers of the same model, one with its model on the GPU (`model.cuda()`), one on the
CPU (4 threads), sync, the controller on. A ResNet-18 (torchvision, 1-channel 28x28 input) on a
synthetic teacher task (fixed random images, labels from a fixed random linear map), so the
loss falls. Prints each worker's batches, step times and losses, and the server's summary.

    python3 bench/gpu/python_cuda_job.py --server_bin PATH [--iterations 60]
The checkout's python/ must hold an importable omnilearn (its _core built for this Python).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATASET = 8192


def data():
    import torch
    g = torch.Generator().manual_seed(0)
    x = torch.randn(DATASET, 1, 28, 28, generator=g)
    teacher = torch.randn(28 * 28, 10, generator=g)
    return x, (x.reshape(DATASET, -1) @ teacher).argmax(1)


def model():
    import torch
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    return m


def worker(args):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from omnilearn.worker import Worker
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    x, y = data()
    if device.type == "cuda":
        x, y = x.pin_memory(), y.pin_memory()
    m = model().to(device)
    rows = []
    with Worker(args.server, m, name=args.name, max_iterations=args.iterations, dataset_size=DATASET,
                connect_timeout=60, log=lambda _: None) as w:
        for step in w:
            t0 = time.perf_counter()
            idx = step.samples
            xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
            loss = torch.nn.functional.cross_entropy(m(xb), yb)
            loss.backward()
            if device.type == "cuda":
                torch.cuda.synchronize()
            step_s = time.perf_counter() - t0
            w.push(loss)
            rows.append({"batch": step.batch_size, "step_s": step_s, "loss": loss.item()})
    print(json.dumps({"name": args.name, "device": str(device), "rows": rows}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server_bin", required=True)
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--global_batch", type=int, default=512)
    ap.add_argument("--port", type=int, default=50091)
    ap.add_argument("--gpu", default="cuda", help="the first worker's device (cpu: a dry run without a GPU)")
    for hidden in ("--device", "--name", "--server"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device:
        return worker(args)
    work = tempfile.mkdtemp(prefix="omnilearn-cuda-")
    summary = os.path.join(work, "summary.json")
    server = subprocess.Popen([args.server_bin, "--bind=127.0.0.1", f"--port={args.port}", "--num_workers=2",
                               "--mode=sync", f"--global_batch={args.global_batch}",
                               f"--max_batch={args.global_batch}", "--adjust_every=5", "--lr=0.05",
                               "--weight_decay=1e-4",
                               "--momentum=0.9", "--exit_when_done", "--metrics_port=0", "--quiet",
                               f"--summary_json={summary}"])
    common = [sys.executable, os.path.abspath(__file__), f"--server_bin={args.server_bin}",
              f"--iterations={args.iterations}", f"--server=127.0.0.1:{args.port}"]
    procs = [subprocess.Popen(common + [f"--device={args.gpu}", "--name=gpu0"], stdout=subprocess.PIPE, text=True),
             subprocess.Popen(common + ["--device=cpu", "--name=cpu0"], stdout=subprocess.PIPE, text=True)]
    ok = True
    for p in procs:
        out, _ = p.communicate(timeout=400)
        ok &= p.returncode == 0
        if p.returncode != 0:
            print(f"worker failed: rc {p.returncode}")
            continue
        r = json.loads(out.strip().splitlines()[-1])
        rows = r["rows"]
        tail = rows[len(rows) // 2:]
        print(f"{r['name']} ({r['device']}): {len(rows)} steps, batches {rows[0]['batch']} -> {rows[-1]['batch']}, "
              f"median step {1000 * sorted(t['step_s'] for t in tail)[len(tail) // 2]:.1f} ms "
              f"(second half), loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}")
        print("  batches:", ",".join(str(t["batch"]) for t in rows))
    if not ok:
        server.terminate()
    server.wait(timeout=120)
    with open(summary) as f:
        print("server summary:", f.read()[:3000])
    return 0 if ok and server.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
