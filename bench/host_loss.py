#!/usr/bin/python3
"""host_loss: the goodput of a sharded job while a server host is lost for good, again and
again (docs/reliability.md, "A host lost for good").

One sync job per schedule, on 127.0.0.1: Fashion-MNIST's MLP, 2 C++ workers, a coordinator
and 2 shard servers (3 slices), checkpoints in memory only (no --checkpoint_dir: a lost
host's disk holds nothing), each slice's checkpoint kept also by the next server
(--replicate_slices, every --memory_checkpoint_every_s=2). Every INTERVAL seconds after the
job began training (and after the last loss came back), a server is SIGKILLed:
  --lose=shard        a shard server, its slice 2 then 1 then 2 ..., and a new shard server for
                      that slice starts at once on a new port, as an orchestrator would start
                      one on another node;
  --lose=coordinator  the coordinator, elected through a local etcd (--election, TTL
                      --election_ttl_s) among two candidates: the other takes over, and a new
                      candidate starts at once on a new port to stand by.

Per schedule: the job's wall time (the same epochs, every sample once), goodput (the
fault-free run's time over this run's, measured in the same run), and per loss: the seconds
until the job went back to its replica's version, until the model moved again, and the
versions redone (the coordinator's version at the kill minus the version it went back to).
The replicas' bytes are given beside the workers' own (gradients in, models out, every server).

    bazel build -c opt //server:omnilearn_server //worker:omnilearn_worker
    /usr/bin/python3 bench/host_loss.py [--epochs=6] [--every=60,15] [--lose=shard|coordinator]
        [--election_ttl_s=4] [--out=bench/results/host_loss.json (coordinator: host_loss_coordinator.json)]
"""

import argparse
import json
import os
import re
import shutil
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
    def __init__(self, binaries, work, epochs, election_ttl_s=None):
        self.bin = binaries
        self.work = work
        self.epochs = epochs
        self.procs = []
        self.ttl = election_ttl_s  # None: one coordinator at a fixed address, no election
        self.coordinators = []  # (process, port, metrics port, log), in the order started
        self.current = 0  # the elected one's index
        self.shards = {}  # slice -> (process, metrics port)
        self.counters = {}  # metrics port -> (worker bytes, replica bytes, replicas sent), as last scraped

    @property
    def metrics(self):
        return self.coordinators[self.current][2]

    def scrape(self):
        """Every live server's bytes, kept per server: a server's last scrape stands for it once it is gone."""
        ports = [c[2] for c in self.coordinators] + [port for _, port in self.shards.values()]
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

    def start_etcd(self):
        """A one-member etcd in the work folder; sets self.address to the election's etcd:// address."""
        client, peer = free_port(), free_port()
        self.etcd = subprocess.Popen([
            shutil.which("etcd") or "etcd", "--name", "bench", "--data-dir", os.path.join(self.work, "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}", "--advertise-client-urls",
            f"http://127.0.0.1:{client}", "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}", "--initial-cluster",
            f"bench=http://127.0.0.1:{peer}"], stdout=open(os.path.join(self.work, "etcd.log"), "ab"),
            stderr=subprocess.STDOUT)
        self.address = f"etcd://127.0.0.1:{client}/omnilearn/bench"

    def start_coordinator(self):
        """A coordinator, or with an election a candidate, on a new port."""
        port, metrics, log = free_port(), free_port(), f"coordinator{len(self.coordinators)}.log"
        election = [f"--election={self.address}", f"--election_ttl_s={self.ttl}"] if self.ttl else []
        p = self.spawn(log, [
            f"{self.bin}/server/omnilearn_server", "--bind=127.0.0.1", f"--port={port}", "--shards=3",
            "--partition_mb=0.25", "--num_workers=2", "--global_batch=96", "--lr=0.05", "--momentum=0.9",
            "--weight_decay=1e-4", "--exit_when_done", "--round_timeout_s=10", "--lease_s=30",
            "--metrics_bind=127.0.0.1", f"--metrics_port={metrics}"] + election)
        self.coordinators.append((p, port, metrics, log))
        if not self.ttl:
            self.address = f"127.0.0.1:{port}"

    def start(self):
        if self.ttl:
            self.start_etcd()
            self.start_coordinator()
            self.await_elected()
        self.start_coordinator()
        for s in (1, 2):
            self.start_shard(s)
        for w in ("w0", "w1"):
            self.spawn(f"{w}.log", [
                f"{self.bin}/worker/omnilearn_worker", f"--server={self.address}", f"--name={w}",
                "--device=cpu", "--dataset=fashion-mnist", "--model=mlp", f"--epochs={self.epochs}",
                "--evaluate=false", "--log_every=50", "--connect_timeout=60", "--reconnect_timeout=120"])

    def start_shard(self, index):
        port = free_port()
        p = self.spawn(f"shard{index}.log", [
            f"{self.bin}/server/omnilearn_server", "--bind=127.0.0.1", f"--port={free_port()}",
            f"--coordinator={self.address}", "--shards=3", "--partition_mb=0.25", f"--shard_index={index}",
            "--metrics_bind=127.0.0.1", f"--metrics_port={port}"])
        self.shards[index] = (p, port)

    def version(self):
        return metric(scraped(self.metrics), "omnilearn_model_version")

    def log(self, index=None):
        log = self.coordinators[self.current if index is None else index][3]
        return open(os.path.join(self.work, log), errors="replace").read()

    def await_elected(self):
        """Until a live candidate says it was elected (the one standing by longest, or the newest)."""
        t0 = time.monotonic()
        while True:
            for i, (p, _, _, _) in enumerate(self.coordinators):
                if p.poll() is None and "elected at" in self.log(i):
                    self.current = i
                    return
            if time.monotonic() - t0 > 120:
                raise SystemExit(f"no candidate was elected within 120 s: see {self.work}")
            time.sleep(0.02)

    def lose(self, index):
        """Kills shard `index` (0: the coordinator) and starts its replacement; the loss's figures
        (None: the job ended meanwhile)."""
        p = self.coordinators[self.current][0] if index == 0 else self.shards[index][0]
        self.scrape()
        backs = self.log().count("every slice is back at version")
        at_kill = self.version()
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        p.wait()
        if index == 0:  # the standing-by candidate takes over; a new one stands by
            self.start_coordinator()
            self.await_elected()
            backs = 0
        else:
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
        return self.coordinators[self.current][0].poll() is None

    def finish(self):
        """The processes' exit codes, and the sums over every server of what scrape() keeps."""
        shards = [p for p, _ in self.shards.values()]
        rc = [p.wait(timeout=600) for p in self.procs if p not in shards]
        if self.ttl:
            self.etcd.terminate()
            self.etcd.wait(timeout=60)
        for p in shards:  # a replacement started as the job ended waits for a coordinator that is gone
            try:
                rc.append(p.wait(timeout=60))
            except subprocess.TimeoutExpired:
                p.kill()
                rc.append(p.wait())
        return rc, [sum(c[i] for c in self.counters.values()) for i in range(3)]


def run(binaries, epochs, every, lose, election_ttl_s):
    work = tempfile.mkdtemp(prefix="host_loss.")
    job = Job(binaries, work, epochs, election_ttl_s if lose == "coordinator" else None)
    start = time.monotonic()
    job.start()
    losses = []
    try:
        while job.version() < 10 and job.running():
            time.sleep(0.05)
        trained_at = time.monotonic()
        next_loss = trained_at + every if every else None
        slice_next = 0 if lose == "coordinator" else 2
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
                slice_next = 3 - slice_next if slice_next else 0
                next_loss = time.monotonic() + every
            time.sleep(0.05)
        wall = time.monotonic() - start
        rc, (worker_bytes, replica_bytes, replicas) = job.finish()
    finally:
        for p in job.procs + ([job.etcd] if job.ttl else []):
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
    ap.add_argument("--lose", choices=("shard", "coordinator"), default="shard")
    ap.add_argument("--election_ttl_s", type=float, default=4, help="--lose=coordinator: the candidates' lease")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or os.path.join(ROOT, "bench/results",
                                "host_loss.json" if a.lose == "shard" else "host_loss_coordinator.json")
    runs = []
    for every in [0] + [float(x) for x in a.every.split(",")]:
        print(f"{'fault-free' if every == 0 else f'a {a.lose} host lost every {every:g} s'}:", flush=True)
        runs.append(run(a.bin, a.epochs, every, a.lose, a.election_ttl_s))
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
              "machine": f"{os.cpu_count()} cores, 127.0.0.1", "epochs": a.epochs, "lose": a.lose, "runs": runs}
    if a.lose == "coordinator":
        result["election_ttl_s"] = a.election_ttl_s
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
