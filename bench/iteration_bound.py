#!/usr/bin/python3
"""iteration_bound: the links' lower bound on one iteration of bench/peers.py --timing=layers,
for DDP and for servers on the worker hosts, from the model's tensors, the devices' pacing and
the links' rate: what each layout could reach if every link ran at its rate whenever it had
bytes to carry, and nothing else cost time. Beside a peers.json it gives each system's
measured iteration over its bound (how far from its links' best the run was).

The pacing is bench/peers.py's Pacer: a step of C seconds, the forward a third of it over the
model's K stages, backward two thirds. Stage k's gradients (and those of the modules between
stage k-1's output and its own: "group k") are final K-k K-ths into backward; the modules after
the last stage ("the tail") are final as backward begins. In the next forward, stage k takes its
K-th of the forward once its group's weights are in (a wait moves the deadlines, as the Pacer's
arrival wait does). Every worker is paced as the slowest device of the level (a sync round waits
for it).

- **ddp**: DistributedDataParallel's buckets (the parameters last first, the first bucket 1 MiB,
  then 25 MiB, each closed once it reaches its cap), each all-reduced by the ring in order
  once all its gradients are final, 2 (N-1)/N of its bytes over the rate; then the next forward
  (the weights are local).
- **omnilearn-colocated**: a server on every worker host, slice h on host h (the coordinator's on
  host 0); the model cut into partitions of at most --partition_mb (0: the servers' automatic
  size), partition j on slice j mod N (common/shard_map.h). A worker's push buckets (worker/client/push_buckets.h: about
  --bucket_mb, last first; the buffers are never final, so theirs leaves at backward's end)
  leave once final: the bytes of other slices on its uplink, first in first out; each host's
  downlink carries the other workers' bytes of its slice the same way. A slice steps once every
  byte is in (the round's last byte anywhere; a step costs nothing here). Then each server sends
  its slice to every other host in ModelLayout::SendOrder (small buffers first, then the layout's
  order); a byte arrives no sooner than its server's uplink (N-1 copies) and its host's downlink
  (every server's bytes in send order) let it.

    /usr/bin/python3 bench/iteration_bound.py --models=resnet18 --levels=HL1
    /usr/bin/python3 bench/iteration_bound.py --results=bench/results/peers.json   # measured over bound
"""

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heterogeneity import LEVELS, rate_bytes  # noqa: E402
from link_model import wire_seconds  # noqa: E402

MIB = 1 << 20
DDP_FIRST_BUCKET, DDP_BUCKET = 1 * MIB, 25 * MIB  # torch's defaults
FLOAT = 4
AUTO_PER_SHARD, AUTO_MIN, AUTO_MAX = 16, 64 << 10, 4 * MIB  # common/shard_map.h

# A tensor of the layout: bytes, its group (0..K-1: a stage's; K: the tail), a buffer or not.
Tensor = collections.namedtuple("Tensor", "name nbytes group buffer")


# ------------------------------------------------------------------ the model's tensors

def model_tensors(name):
    """(tensors in the Python worker's layout order: the parameters, then the buffers; K)."""
    import peers
    import torch
    model, batch_of = peers.build(name)
    stages = peers.stages_of(name, model)
    group_of, seen = {}, [0]
    for k, stage in enumerate(stages):
        stage.register_forward_hook(lambda *_, k=k: seen.__setitem__(0, k + 1))

    def enter(module, _inputs):  # returns None: the inputs stay as they are
        group_of.setdefault(module, seen[0])

    for module in model.modules():
        if not list(module.children()):
            module.register_forward_pre_hook(enter)
    with torch.no_grad():
        model(batch_of([0, 1])[0])
    owner = {}
    for module in model.modules():
        for p in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
            owner.setdefault(id(p), group_of.get(module, len(stages)))
    tensors = [Tensor(n, p.numel() * FLOAT, owner[id(p)], False) for n, p in model.named_parameters()]
    tensors += [Tensor(n, b.numel() * FLOAT, owner[id(b)], True) for n, b in model.named_buffers()
                if b.dtype != torch.bool]  # peers' DDP leaves the bool masks alone; every rank builds them
    return tensors, len(stages)


# ------------------------------------------------------------------ the pacing

def phases(compute_s):
    """(forward, backward) seconds of a step: a third and two thirds (bench/peers.py's Pacer)."""
    return compute_s / 3, 2 * compute_s / 3


def final_at(group, k, backward_s):
    """Seconds into backward at which a group's gradients are final."""
    return (k - group) / k * backward_s


def forward_end(start, arrivals, k, forward_s):
    """The forward's end, begun at `start`, stage g waiting for arrivals[g] (the tail, g = K,
    takes no paced time)."""
    t = start
    for g in range(k):
        t = max(t, arrivals.get(g, start)) + forward_s / k
    return max(t, arrivals.get(k, start))


def fifo(items, rate, start=0.0):
    """A link first in first out: items (time available, bytes) in the order they queue (a
    caller sorts them by time); each one's end."""
    t, out = start, []
    for at, nbytes in items:
        t = max(t, at) + nbytes / rate
        out.append(t)
    return out


# ------------------------------------------------------------------ DDP

def ddp_buckets(tensors):
    """torch's bucket assignment: the parameters last first, a bucket closed once it reaches its
    cap (1 MiB for the first, then 25 MiB). Lists of tensor indices."""
    buckets, current, size = [], [], 0
    for i in reversed([i for i, t in enumerate(tensors) if not t.buffer]):
        current.append(i)
        size += tensors[i].nbytes
        if size >= (DDP_FIRST_BUCKET if not buckets else DDP_BUCKET):
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def ddp_iteration(tensors, k, workers, rate, compute_s):
    """DDP's bound: backward's start to the next one's."""
    forward_s, backward_s = phases(compute_s)
    items = [(max(final_at(tensors[i].group, k, backward_s) for i in b),
              2 * (workers - 1) / workers * sum(tensors[i].nbytes for i in b)) for b in ddp_buckets(tensors)]
    reduced = max([backward_s] + fifo(items, rate))
    return reduced + forward_s


# ------------------------------------------------------------------ servers on the worker hosts

def partition_floats(total, shards, partition_bytes):
    """Floats a partition may hold: partition_bytes's, or with 0 (the servers' default) the
    model over AUTO_PER_SHARD partitions a shard, within [AUTO_MIN, AUTO_MAX] bytes
    (common/shard_map.cc)."""
    if partition_bytes > 0:
        return max(1, int(partition_bytes) // FLOAT)
    return min(AUTO_MAX // FLOAT, max(AUTO_MIN // FLOAT, total // (shards * AUTO_PER_SHARD)))


def owners(tensors, shards, partition_bytes):
    """Per tensor: {slice: bytes} by common/shard_map's rule (k x shards near-equal partitions
    of the flat order, k the fewest that keeps a partition within partition_floats)."""
    total = sum(t.nbytes for t in tensors) // FLOAT
    per = partition_floats(total, shards, partition_bytes)
    parts = min(total, shards * max(1, -(-total // (shards * per))))
    bounds = [j * total // parts for j in range(parts + 1)]
    out, offset, j = [], 0, 0
    for t in tensors:
        n, end, pieces = t.nbytes // FLOAT, offset + t.nbytes // FLOAT, collections.Counter()
        while offset < end:
            while bounds[j + 1] <= offset:
                j += 1
            cut = min(end, bounds[j + 1])
            pieces[j % shards] += (cut - offset) * FLOAT
            offset = cut
        out.append(pieces)
        assert sum(pieces.values()) == n * FLOAT
    return out


def push_buckets(tensors, bucket_bytes):
    """worker/client/push_buckets.cc: the layout last first, cut into buckets of about
    bucket_bytes (a larger tensor alone). Lists of tensor indices."""
    buckets, filled = [], 0
    for i in reversed(range(len(tensors))):
        if not buckets or (filled > 0 and filled + tensors[i].nbytes > bucket_bytes):
            buckets.append([])
            filled = 0
        buckets[-1].append(i)
        filled += tensors[i].nbytes
    return buckets


def send_order(tensors):
    """common/model_layout.cc SendOrder: the buffers first when they hold at most 1/32 of the
    model, then the rest in the layout's order."""
    buffered = sum(t.nbytes for t in tensors if t.buffer)
    if 0 < buffered * 32 <= sum(t.nbytes for t in tensors):
        return [i for i, t in enumerate(tensors) if t.buffer] + [i for i, t in enumerate(tensors) if not t.buffer]
    return list(range(len(tensors)))


def pushes_in(tensors, k, workers, rate, backward_s, bucket_bytes, owned):
    """Seconds into backward at which the round's last pushed byte is in."""
    leave = []  # per bucket: when it leaves, its bytes per slice
    for b in push_buckets(tensors, bucket_bytes):
        at = max(backward_s if tensors[i].buffer else final_at(tensors[i].group, k, backward_s) for i in b)
        leave.append((at, sum((owned[i] for i in b), collections.Counter())))
    ends = [backward_s]
    for h in range(workers):
        up = sorted((at, sum(v for s, v in per.items() if s != h)) for at, per in leave)
        down = sorted((at, (workers - 1) * per[h]) for at, per in leave)  # every other worker's part
        ends += fifo(up, rate) + fifo(down, rate)
    return max(ends)


def model_arrivals(tensors, workers, rate, start, owned):
    """Per host: {group: when its last remote byte is in}, the servers sending from `start`."""
    order = send_order(tensors)
    sent = collections.Counter()  # per slice: bytes its server has sent each peer so far
    up_done = {}  # (slice, tensor) -> when the slice's uplink has sent its part of the tensor
    for i in order:
        for s, nbytes in owned[i].items():
            sent[s] += nbytes
            up_done[(s, i)] = start + (workers - 1) * sent[s] / rate
    arrivals = []
    for h in range(workers):
        down, groups = 0, {}
        for i in order:
            for s, nbytes in owned[i].items():
                if s == h:
                    continue
                down += nbytes
                done = max(up_done[(s, i)], start + down / rate)
                groups[tensors[i].group] = max(groups.get(tensors[i].group, start), done)
        arrivals.append(groups)
    return arrivals


def colocated_iteration(tensors, k, workers, rate, compute_s, bucket_bytes, partition_bytes):
    """Servers on the worker hosts' bound: backward's start to the next one's (the slowest host's)."""
    forward_s, backward_s = phases(compute_s)
    owned = owners(tensors, workers, partition_bytes)
    stepped = pushes_in(tensors, k, workers, rate, backward_s, bucket_bytes, owned)
    return max(forward_end(stepped, a, k, forward_s) for a in model_arrivals(tensors, workers, rate, stepped, owned))


# ------------------------------------------------------------------ the levels

def level_compute(level, system, workers, global_batch, compute_s, fixed_s):
    """The slowest device's step at a level: equal batches for ddp, the oracle's split for
    the others (bench/peers.py's devices: fixed + seconds per sample on one core / cores x batch)."""
    import peers
    per_sample_1core = compute_s * sum(peers.cores_of("HL1", workers)) / global_batch
    cores = peers.cores_of(level, workers)
    batches = ([global_batch // workers] * workers if system == "ddp"
               else peers.balanced_batches(level, global_batch, workers))
    return max(fixed_s + per_sample_1core / c * b for c, b in zip(cores, batches))


def bounds(args, model):
    tensors, k = model_tensors(model)
    rate = rate_bytes(args.link)
    mbytes = sum(t.nbytes for t in tensors if not t.buffer)
    compute_s = args.compute_ratio * wire_seconds(args.workers, mbytes, rate)
    rows = []
    for level in args.levels.split(","):
        c = {s: level_compute(level, s, args.workers, args.global_batch, compute_s, args.fixed_ms / 1000)
             for s in ("ddp", "ddp-balanced")}
        iteration = {s: ddp_iteration(tensors, k, args.workers, rate, c[s]) for s in c}
        iteration["omnilearn-colocated"] = colocated_iteration(
            tensors, k, args.workers, rate, c["ddp-balanced"], args.bucket_mb * MIB, args.partition_mb * MIB)
        for system, seconds in iteration.items():
            rows.append({"model": model, "level": level, "system": system, "bound_s": seconds,
                         "compute_s": c.get(system, c["ddp-balanced"])})
    return rows


def measured(path):
    """A bench/peers.py results file: ({(model, level, system): iteration seconds}, the run's
    settings that the bound takes: link, global_batch, compute_ratio, workers)."""
    with open(path) as f:
        run = json.load(f)
    rows = run["rows"]
    settings = {k: run[k] for k in ("link", "global_batch", "compute_ratio")}
    settings["workers"] = len(rows[0]["batches"]) if rows else None
    return {(r["model"], r["level"], r["system"]): r["iteration_s"] for r in rows}, settings


def table(rows, runs):
    lines = ["| model | level | system | compute | bound | x ddp's bound | measured | measured / bound |",
             "|---" * 8 + "|"]
    ddp = {(r["model"], r["level"]): r["bound_s"] for r in rows if r["system"] == "ddp"}
    for r in rows:
        key = (r["model"], r["level"], r["system"])
        got = runs.get(key)
        lines.append(f"| {r['model']} | {r['level']} | {r['system']} | {1000 * r['compute_s']:.0f} ms | "
                     f"{1000 * r['bound_s']:.0f} ms | {r['bound_s'] / ddp[key[:2]]:.2f} | "
                     + (f"{1000 * got:.0f} ms | {got / r['bound_s']:.2f} |" if got else " | |"))
    return "\n".join(lines)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", help="default: the results' models, or resnet18")
    ap.add_argument("--levels", help="default: the results' levels, or HL1")
    ap.add_argument("--results", help="a bench/peers.py --timing=layers peers.json: each system's measured "
                    "iteration, and the run's link, global batch, compute ratio and workers")
    ap.add_argument("--link", help="default: the results', or 1gbit")
    ap.add_argument("--workers", type=int, help="default: the results', or 4")
    ap.add_argument("--global_batch", type=int, help="default: the results', or 32 per worker (bench/peers.py's)")
    ap.add_argument("--compute_ratio", type=float, help="as bench/peers.py's; default: the results', or 1")
    ap.add_argument("--fixed_ms", type=float, default=2.0, help="the devices' fixed time per step (bench/peers.py's)")
    ap.add_argument("--bucket_mb", type=float, default=4.0, help="OmniLearn workers' push buckets")
    ap.add_argument("--partition_mb", type=float, default=0.0,
                    help="the servers' partitions; 0 (the servers' default): the automatic size")
    args = ap.parse_args(argv)
    runs, settings = measured(args.results) if args.results else ({}, {})
    for name, default in (("link", "1gbit"), ("workers", 4), ("compute_ratio", 1.0)):
        if getattr(args, name) is None:
            setattr(args, name, settings.get(name) or default)
    args.global_batch = args.global_batch or settings.get("global_batch") or 32 * args.workers
    args.models = args.models or ",".join(sorted({m for m, _, _ in runs})) or "resnet18"
    args.levels = args.levels or ",".join(sorted({lv for _, lv, _ in runs} - {"dynamic"})) or "HL1"
    bad = [lv for lv in args.levels.split(",") if lv not in LEVELS]
    if bad:
        ap.error(f"--levels: {bad} are not among {sorted(LEVELS)}")
    if args.workers < 2 or args.global_batch < args.workers:
        ap.error("--workers must be 2 or more, with a global batch of at least one sample each")
    return args, runs


def main():
    args, runs = parse()
    rows = [r for model in args.models.split(",") for r in bounds(args, model)]
    print(table(rows, runs))


if __name__ == "__main__":
    sys.exit(main())
