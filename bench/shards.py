#!/usr/bin/python3
"""shards: what sharding the data plane buys when the servers' links are the limit, on the
emulated cluster (tests/cluster.sh). S server hosts (the coordinator and S-1 shard servers),
each behind a link of RATE; 4 worker hosts behind 4 x RATE (BytePS's rule: the servers get
at least the workers' bandwidth, so the servers' links are what limits); sync, a model of
M MB (bench/overlap.py's Linear layers, no emulated compute), whole pushes (bucket_mb=0)
and the model received whole.

Per S: seconds per round (the mean of the workers' iterations, the first ones left out: a
worker's iterations add up to the time its rounds took, however the round's transfers are
ordered among the workers),
rounds per second, and the bytes per second all servers move (every worker's gradient in
and the model out); the ratio is against S=1 measured in the same run, and the target is at
least 0.85 x S.

    bazel build -c opt //server:omnilearn_server //python:omnilearn
    /usr/bin/python3 bench/shards.py [--shards=1,2,4] [--rate=200mbit] [--megabytes=100]
Needs root (network namespaces).
"""

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from heterogeneity import Cluster  # noqa: E402
from overlap import add_run_args, rate_bytes, times4  # noqa: E402

WORKERS = 4
PORT = 50051


def one_run(args, shards):
    """Seconds per round of every worker's measured iterations, with S servers."""
    hosts = {f"ps{i}": args.rate for i in range(shards)}
    hosts.update({f"w{i}": times4(args.rate) for i in range(WORKERS)})
    cluster = Cluster(hosts)
    servers = []
    try:
        server = f"{args.bin_dir}/server/omnilearn_server"
        coordinator = f"{cluster.addr['ps0']}:{PORT}"
        peer = os.path.join(args.work, "peer-token")  # the servers' own secret (they listen beyond loopback)
        with open(peer, "w") as f:
            f.write(secrets.token_hex(16))
        common = [f"--port={PORT}", f"--shards={shards}", "--metrics_port=0", f"--peer_token_file={peer}"]
        log = lambda name: open(os.path.join(args.work, f"s{shards}.{name}.log"), "w")  # noqa: E731
        servers.append(subprocess.Popen(cluster.command("ps0", [
            server, *common, "--mode=sync", f"--num_workers={WORKERS}", f"--global_batch={4 * WORKERS}",
            "--controller=off", "--lr=0.001", "--momentum=0", "--progress_every_s=0", f"--advertise={coordinator}"]),
            stdout=log("ps0"), stderr=subprocess.STDOUT))
        for i in range(1, shards):
            servers.append(subprocess.Popen(cluster.command(f"ps{i}", [
                server, *common, f"--coordinator={coordinator}", f"--advertise={cluster.addr[f'ps{i}']}:{PORT}"]),
                stdout=log(f"ps{i}"), stderr=subprocess.STDOUT))
        workers = [subprocess.Popen(cluster.command(f"w{i}", [
            sys.executable, os.path.join(ROOT, "bench", "overlap.py"), "--worker", f"--server={coordinator}",
            f"--name=w{i}", f"--megabytes={args.megabytes}", f"--layers={args.layers}",
            f"--iterations={args.iterations}", "--bucket_mb=0", "--overlap_pull=0", "--forward_s=0",
            "--backward_s=0"]), stdout=subprocess.PIPE, stderr=log(f"w{i}"), text=True) for i in range(WORKERS)]
        rounds = []
        for p in workers:
            out, _ = p.communicate(timeout=args.timeout)
            if p.returncode != 0:
                raise RuntimeError(f"a worker failed ({p.returncode}) with {shards} shards")
            rounds += [r["iteration_s"] for r in json.loads(out.strip().splitlines()[-1])[args.skip:]]
        return rounds
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
        for s in servers:
            try:
                s.wait(timeout=60)
            except subprocess.TimeoutExpired:
                s.kill()
        cluster.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--rate", default="200mbit", help="each server host's link (tc's form)")
    add_run_args(ap, iterations=5, timeout=900, out="shards.json")
    ap.add_argument("--work", default=None, help="where the servers' and workers' logs go (default: a new folder)")
    args = ap.parse_args()
    args.work = args.work or tempfile.mkdtemp(prefix="omnilearn-shards-")
    print(f"logs: {args.work}", flush=True)
    model_bytes = args.megabytes * (1 << 20)
    results, base = [], None
    for shards in (int(s) for s in args.shards.split(",")):
        rounds = one_run(args, shards)
        round_s = statistics.mean(rounds)
        per_s = 1 / round_s
        moved = 2 * WORKERS * model_bytes / round_s  # every gradient in, the model out to every worker
        base = base or per_s
        # What S links of RATE allow: each server's link carries 1/S of every push and pull.
        wire_s = 2 * WORKERS * model_bytes / shards / rate_bytes(args.rate)
        results.append({"shards": shards, "round_s": round_s, "rounds_per_s": per_s, "bytes_per_s": moved,
                        "speedup": per_s / base, "wire_round_s": wire_s, "rounds": rounds})
        print(f"{shards} shard(s): {round_s:6.2f} s per round ({min(rounds):.2f}-{max(rounds):.2f}), "
              f"{per_s:.3f} rounds/s, {moved / 1e6:7.1f} MB/s through the servers, {per_s / base:4.2f}x one "
              f"(target {0.85 * shards:.2f}x); the links' bound {wire_s:.2f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump({"rate": args.rate, "megabytes": args.megabytes, "workers": WORKERS, "results": results}, f,
                  indent=1)
    print(f"results: {args.out}")


if __name__ == "__main__":
    sys.exit(main())
