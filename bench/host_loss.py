#!/usr/bin/python3
"""host_loss: the goodput of a sharded job while a server host is lost for good, again and
again (docs/reliability.md, "A host lost for good").

One sync job per schedule, on 127.0.0.1: Fashion-MNIST's MLP, 2 C++ workers, a coordinator
and 2 shard servers (3 slices), checkpoints in memory only (no --checkpoint_dir: a lost
host's disk holds nothing), each slice's checkpoint kept also by the next server
(--replicate_slices, every --memory_checkpoint_every_s=2). Every INTERVAL seconds after the
job began training (and after the last loss came back), a shard server is SIGKILLed, its
slice 2 then 1 then 2 ..., and a new shard server for that slice starts at once on a new
port, as an orchestrator would start one on another node.

Per schedule: the job's wall time (the same epochs, every sample once), goodput (the
fault-free run's time over this run's, measured in the same run), and per loss: the seconds
until the job went back to its replica's version, until the model moved again, and the
versions redone (the coordinator's version at the kill minus the version it went back to).
The replicas' bytes are given beside the workers' own (gradients in, models out, every server).

    bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker
    /usr/bin/python3 bench/host_loss.py [--epochs=6] [--every=60,15] [--out=bench/results/host_loss.json]
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scraped(port):
    """The server's /metrics ("" when it does not answer)."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return ""


def metric(text, name):
    """The sum of `name`'s samples in a /metrics text (0 when it is not there)."""
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


class Job:
    def __init__(self, binaries, work, epochs):
        self.bin = binaries
        self.work = work
        self.epochs = epochs
        self.procs = []
        self.port = free_port()
        self.metrics = free_port()
        self.shards = {}  # slice -> (process, metrics port)
        self.counters = {}  # metrics port -> (worker bytes, replica bytes, replicas sent), as last scraped

    def scrape(self):
        """Every live server's bytes, kept per server: a server's last scrape stands for it once it is gone."""
        ports = [self.metrics] + [port for _, port in self.shards.values()]
        for port in ports:
            text = scraped(port)  # once per server: every counter from one scrape
            moved = sum(metric(text, n) for n in ("omnilearn_push_bytes_total", "omnilearn_pull_bytes_total",
                                                  "omnilearn_shard_push_bytes_total",
                                                  "omnilearn_shard_pull_bytes_total"))
            if moved > 0:
                self.counters[port] = (moved, metric(text, "omnilearn_replica_sent_bytes_total"),
                                       metric(text, "omnilearn_replicas_sent_total"))

    def spawn(self, log, args):
        p = subprocess.Popen(args, stdout=open(os.path.join(self.work, log), "ab"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def start(self):
        self.spawn("coordinator.log", [
            f"{self.bin}/server/omnilearn_server", "--bind=127.0.0.1", f"--port={self.port}", "--shards=3",
            "--partition_mb=0.25", "--num_workers=2", "--global_batch=96", "--lr=0.05", "--momentum=0.9",
            "--weight_decay=1e-4", "--exit_when_done", "--round_timeout_s=10", "--lease_s=30",
            "--metrics_bind=127.0.0.1", f"--metrics_port={self.metrics}"])
        for s in (1, 2):
            self.start_shard(s)
        for w in ("w0", "w1"):
            self.spawn(f"{w}.log", [
                f"{self.bin}/worker/omnilearn_worker", f"--server=127.0.0.1:{self.port}", f"--name={w}",
                "--device=cpu", "--dataset=fashion-mnist", "--model=mlp", f"--epochs={self.epochs}",
                "--evaluate=false", "--log_every=50", "--connect_timeout=60", "--reconnect_timeout=120"])

    def start_shard(self, index):
        port = free_port()
        p = self.spawn(f"shard{index}.log", [
            f"{self.bin}/server/omnilearn_server", "--bind=127.0.0.1", f"--port={free_port()}",
            f"--coordinator=127.0.0.1:{self.port}", "--shards=3", "--partition_mb=0.25", f"--shard_index={index}",
            "--metrics_bind=127.0.0.1", f"--metrics_port={port}"])
        self.shards[index] = (p, port)

    def version(self):
        return metric(scraped(self.metrics), "omnilearn_model_version")

    def log(self):
        return open(os.path.join(self.work, "coordinator.log"), errors="replace").read()

    def lose(self, index):
        """Kills shard `index` and starts its replacement; the loss's figures (None: the job ended meanwhile)."""
        p, port = self.shards[index]
        self.scrape()
        backs = self.log().count("every slice is back at version")
        at_kill = self.version()
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.start_shard(index)
        back = None
        while time.monotonic() - t0 < 120 and self.running():
            found = re.findall(r"every slice is back at version (\d+)", self.log())
            if len(found) > backs:
                back = int(found[-1])
                break
            time.sleep(0.02)
        if back is None and not self.running():
            return None  # the loss came as the job ended: nothing to go back to
        if back is None:
            raise SystemExit(f"slice {index} did not come back within 120 s: see {self.work}")
        t_back = time.monotonic() - t0
        while self.version() <= back and time.monotonic() - t0 < 120:
            time.sleep(0.02)
        return {"slice": index, "back_s": round(t_back, 2), "training_s": round(time.monotonic() - t0, 2),
                "versions_redone": int(at_kill - back), "version_at_kill": int(at_kill), "went_back_to": back}

    def running(self):
        return self.procs[0].poll() is None

    def finish(self):
        """The processes' exit codes, and the sums over every server of what scrape() keeps."""
        shards = [p for p, _ in self.shards.values()]
        rc = [p.wait(timeout=600) for p in self.procs if p not in shards]
        for p in shards:  # a replacement started as the job ended waits for a coordinator that is gone
            try:
                rc.append(p.wait(timeout=60))
            except subprocess.TimeoutExpired:
                p.kill()
                rc.append(p.wait())
        return rc, [sum(c[i] for c in self.counters.values()) for i in range(3)]


def run(binaries, epochs, every):
    work = tempfile.mkdtemp(prefix="host_loss.")
    job = Job(binaries, work, epochs)
    start = time.monotonic()
    job.start()
    losses = []
    try:
        while job.version() < 10 and job.running():
            time.sleep(0.05)
        trained_at = time.monotonic()
        next_loss = trained_at + every if every else None
        slice_next = 2
        scraped = 0.0
        while job.running():
            if time.monotonic() - scraped >= 1:
                job.scrape()
                scraped = time.monotonic()
            if next_loss is not None and time.monotonic() >= next_loss:
                loss = job.lose(slice_next)
                if loss is None:
                    break
                losses.append(loss)
                print(f"  every {every} s: {losses[-1]}", flush=True)
                slice_next = 3 - slice_next
                next_loss = time.monotonic() + every
            time.sleep(0.05)
        wall = time.monotonic() - start
        rc, (worker_bytes, replica_bytes, replicas) = job.finish()
    finally:
        for p in job.procs:
            if p.poll() is None:
                p.kill()
    bad = [r for r in rc if r not in (0, -9)]
    if bad:
        raise SystemExit(f"a process failed ({rc}): see {work}")
    finished = re.search(r"training finished: model version (\d+), (\d+) samples", job.log())
    samples = int(finished.group(2)) if finished else 0
    versions = int(finished.group(1)) if finished else 0
    if samples != 60000 * epochs:
        raise SystemExit(f"{samples} samples trained, not {60000 * epochs}: see {work}")
    return {"every_s": every, "wall_s": round(wall, 1), "losses": losses, "samples": samples,
            "versions": versions, "worker_bytes": worker_bytes, "replica_bytes": replica_bytes,
            "replicas_sent": int(replicas)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--every", default="60,15", help="seconds between losses, one run each (0: none)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/host_loss.json"))
    a = ap.parse_args()
    runs = []
    for every in [0] + [float(x) for x in a.every.split(",")]:
        print(f"{'fault-free' if every == 0 else f'a shard host lost every {every:g} s'}:", flush=True)
        runs.append(run(a.bin, a.epochs, every))
        print(f"  {runs[-1]['wall_s']} s", flush=True)
    free = runs[0]["wall_s"]
    for r in runs:
        r["goodput"] = round(free / r["wall_s"], 3)
        r["replica_share"] = round(r["replica_bytes"] / max(r["worker_bytes"], 1), 4)
        # A replica at every step instead: the same replica's bytes once per version.
        per_replica = r["replica_bytes"] / max(r["replicas_sent"], 1)
        r["per_step_share"] = round(per_replica * r["versions"] / max(r["worker_bytes"], 1), 4)
        back = [x["training_s"] for x in r["losses"]]
        redone = [x["versions_redone"] for x in r["losses"]]
        r["training_s_max"] = max(back) if back else 0
        r["versions_redone_max"] = max(redone) if redone else 0
        print(f"every {r['every_s']:g} s: {len(r['losses'])} losses, goodput {r['goodput']:.1%}, back to training in "
              f"at most {r['training_s_max']} s, at most {r['versions_redone_max']} versions redone; replicas "
              f"{r['replica_share']:.1%} of the workers' bytes (at every step: {r['per_step_share']:.1%})")
    result = {"command": "/usr/bin/python3 bench/host_loss.py " + " ".join(sys.argv[1:]),
              "machine": f"{os.cpu_count()} cores, 127.0.0.1", "epochs": a.epochs, "runs": runs}
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
