#!/usr/bin/python3
"""peers: OmniLearn beside what users run today, PyTorch DDP, on the emulated cluster
(tests/cluster.sh: every host behind a link of --link, both ways), in one run, with the same
models, data, emulated devices and links:

  ddp                  --workers gloo ranks (4), equal batches (B/N each); after each rank's
                       emulated step one all_reduce of the whole flat gradient (like for like with the
                       emulated OmniLearn workers, which push whole after their step; DDP's
                       bucketed all-reduce during backward cannot overlap a wait that comes after
                       the real backward), then SGD on every rank
  ddp-balanced         the same with per-rank batches proportional to each device's speed and
                       gradients scaled by b_k/B before the sum (the paper's own BSP code,
                       Cannikin); the split is the oracle's (the devices' known speeds), the
                       best this peer can do
  omnilearn-1server    one omnilearn_server on a host of its own, the controller on (sync)
  omnilearn-colocated  a server on every worker host: the coordinator on w0's, a shard on each
                       other (--shards=N), the workers' default deployment on several hosts
  omnilearn-1server-fat  (only with --systems) one server whose link is 4 x a worker's
  omnilearn-fat-slices   (only with --systems) the same host and link serving the model as
                       --fat_slices slices (8: a coordinator and 7 shard servers on it), which
                       workers push one after the other (--push_slices_in_order): a slice's
                       model comes back while the next slice's gradient goes out
  omnilearn-local      (only with --systems) servers as omnilearn-colocated, with local steps
                       (--local_steps): each worker takes H steps of the same SGD on its share
                       of H global batches, then pushes the pseudo-gradient; the servers' outer
                       Nesterov SGD (--outer_lr, --outer_momentum) steps the model, the round's
                       pseudo-gradients on the wire as --local_wire says. Its iteration is an
                       inner step, its time the mean (a round's push included)
  local-blind          (only with --systems) the same with --controller=off: equal batches and
                       the same H for every worker, as DiLoCo runs (the heterogeneity-blind peer)

Devices at the paper's levels (core counts 12,12,12,12 / 9,9,6,24 / 6,6,4,32 for HL1/4/8) and
the dynamic schedule HL1 -> HL2 -> HL4 -> HL8 -> HL4 -> HL1, emulated (omnilearn.emulation:
FIXED + MS_PER_SAMPLE x batch, waited out after the real step). Each model's device time per
sample is scaled so that the balanced compute of one iteration equals the ring's wire time at
the link's rate (--compute_ratio): compute and communication of the same order, as on a GPU
cluster with 10-25 Gbit/s links. Models: mlp4 and mlp40 (parametric MLPs of 4 and 40 MB on a
synthetic teacher task), resnet18 (torchvision, 1-channel 28x28 input, about 45 MB) and gpt2
(a GPT-2-style decoder of about 100 MB). Gradients are the real models' on real data; mlp4
computes its whole batch (and so gives the time to a target loss), the larger models a
micro-batch (their real compute on 2 cores would outlast the emulated device's time) while
the device's time is that of the planned batch.

Per (model, level, system): the median iteration time, the median communication after a rank's
step (DDP: its all_reduce; OmniLearn: from the push to the model back; the sync barrier's wait
included), the wire-time bound of its layout per
iteration (ring: 2(N-1)/N x M per host; one server: N x M into its link, then N x M out;
servers on the worker hosts: 2(N-1)/N x M per host, the ring's), the batches at the end, emulation overruns; mlp4:
the time to the target loss (the highest final loss among the systems, so that every one
reaches it). Writes bench/results/peers.json, peers.md and peers.png.

--workers=N runs N hosts (the levels' four devices repeated; bench/scaling.py); --load=R:P puts P
busy loops beside worker R (a loaded host, for the controller's StepFilter).

    bazel build -c opt //server:omnilearn_server //python:omnilearn
    /usr/bin/python3 bench/peers.py                  the matrix (docs/performance.md)
    /usr/bin/python3 bench/peers.py --quick          mlp4 at HL8, 4 systems (the test command)
Needs root (network namespaces); resnet18 needs python3-torchvision.
"""

import argparse
import json
import math
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))  # the checkout's library
sys.path.insert(0, os.path.join(ROOT, "bench"))
import build_check  # noqa: E402
import cpu_profile  # noqa: E402
import link_profile  # noqa: E402
from heterogeneity import LEVELS, Cluster, rate_bytes  # noqa: E402
from link_model import wire_seconds  # noqa: E402
import timeline  # noqa: E402

PORT = 50051
DDP_PORT = 29500
SYSTEMS = ("ddp", "ddp-balanced", "omnilearn-1server", "omnilearn-colocated")
# Not in the default matrix (--systems=...): one server whose link is N times a worker's.
EXTRA_SYSTEMS = ("omnilearn-1server-fat", "omnilearn-fat-slices", "omnilearn-local", "local-blind")
LOCAL_SYSTEMS = ("omnilearn-local", "local-blind")  # local steps (--local_steps): rounds of H inner steps
DYNAMIC = ("HL1", "HL2", "HL4", "HL8", "HL4", "HL1")
# name: (real samples per step, 0 = the whole batch; description)
MODELS = {"mlp4": (0, "MLP, 4 MB"), "mlp40": (16, "MLP, 40 MB"), "resnet18": (2, "ResNet-18, 45 MB"),
          "gpt2": (1, "GPT-2-style, 100 MB")}
FIXED_MS = 2.0
JITTER = 0.02
LR, MOMENTUM = 0.05, 0.9


# ------------------------------------------------------------------ models and data

def build(name):
    """(model, batch(indices) -> (inputs, targets)), the same on every process (seed 0)."""
    import torch
    torch.manual_seed(0)
    if name.startswith("mlp"):
        return build_mlp(float(name[3:]))
    if name == "resnet18":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = torch.nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
        images = lambda idx: torch.randn(len(idx), 1, 28, 28, generator=seeded(idx))  # noqa: E731
        return model, lambda idx: (images(idx), torch.as_tensor(idx) % 10)
    if name == "gpt2":
        return build_gpt(), lambda idx: tokens(idx)
    raise ValueError(f"unknown model {name}")


def seeded(idx):
    import torch
    return torch.Generator().manual_seed(int(idx[0]) if len(idx) else 0)


def build_mlp(megabytes):
    """256 -> h -> h -> 10 with h such that the parameters take `megabytes`; a fixed random
    linear teacher labels Gaussian inputs (learnable: the loss falls)."""
    import torch
    floats = megabytes * (1 << 20) / 4
    h = int((-(256 + 10 + 2) + math.sqrt((256 + 10 + 2) ** 2 + 4 * floats)) / 2)
    model = torch.nn.Sequential(torch.nn.Linear(256, h), torch.nn.ReLU(), torch.nn.Linear(h, h), torch.nn.ReLU(),
                                torch.nn.Linear(h, 10))
    teacher = torch.randn(256, 10, generator=torch.Generator().manual_seed(1))

    def batch(idx):
        x = torch.stack([torch.randn(256, generator=torch.Generator().manual_seed(int(i))) for i in idx])
        return x, (x @ teacher).argmax(dim=1)
    return model, batch


def build_gpt(vocab=256, dim=512, layers=8, heads=8, context=64):
    """A GPT-2-style decoder (pre-norm blocks, causal attention, tied embeddings): 25M
    parameters, about 100 MB."""
    import torch
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
            self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1),
                                 persistent=False)

        def forward(self, x):
            t = x.shape[1]
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=self.mask[:t, :t], need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.ln = nn.LayerNorm(dim)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            return self.ln(self.blocks(x)) @ self.tok.weight.t()

    return Gpt()


def tokens(idx, length=16):
    """Sequences of `length` tokens; the target is the next token."""
    import torch
    seq = torch.randint(0, 256, (len(idx), length + 1), generator=seeded(idx))
    return seq[:, :-1], seq[:, 1:]


def stages_of(name, model):
    """The modules whose outputs mark the emulated device's progress through a step (--timing=layers)."""
    if name.startswith("mlp"):
        return [m for m in model if hasattr(m, "weight")]
    if name == "resnet18":
        return [model.conv1, model.layer1, model.layer2, model.layer3, model.layer4, model.fc]
    return list(model.blocks)


class Pacer:
    """--timing=layers: the emulated device's step spread over the model's stages. After stage
    k's forward the step waits until k+1 of K shares of the forward time have passed since it
    began, and in backward, before stage k's gradients are computed, until K-k shares of the
    backward time have (forward a third of the step, backward two thirds): gradients become
    final stage by stage, last first, as on a device, and the communication that can overlap
    them does. Real compute is absorbed in the waits; so are waits for a model still arriving
    (`arrival`: seconds waited so far), which move the deadlines."""

    def __init__(self, model, stages, arrival=lambda: 0.0):
        import torch
        pacer = self

        class Delay(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.k = k
                pacer.wait(pacer.t0 + (k + 1) / pacer.k * pacer.forward_s)
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                pacer.wait(pacer.tb + (pacer.k - ctx.k) / pacer.k * pacer.backward_s)
                return g, None

        self.k, self.arrival = len(stages), arrival
        self.t0 = self.tb = self.forward_s = self.backward_s = self.waited0 = 0.0
        for k, stage in enumerate(stages):
            stage.register_forward_hook(lambda _m, _i, out, k=k: Delay.apply(out, k))

    def wait(self, deadline):
        late = deadline + self.arrival() - self.waited0 - time.perf_counter()
        if late > 0:
            time.sleep(late)

    def forward(self, seconds):
        """A step of `seconds` begins (its forward now)."""
        self.t0, self.waited0 = time.perf_counter(), self.arrival()
        self.forward_s, self.backward_s = seconds / 3, 2 * seconds / 3

    def backward(self):
        self.tb, self.waited0 = time.perf_counter(), self.arrival()


def loss_of(model, x, y):
    import torch
    out = model(x)
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def model_bytes(name):
    model, _ = build(name)
    return 4 * sum(p.numel() for p in model.parameters())


# ------------------------------------------------------------------ devices

def level_at(args, iteration):
    """The level in force at an iteration (the dynamic schedule moves every --step_iterations)."""
    if args.level != "dynamic":
        return args.level
    return DYNAMIC[min(len(DYNAMIC) - 1, iteration // args.step_iterations)]


def rank_cores(level, rank):
    """The cores of rank's device at a level: the paper's four hosts, repeated."""
    return LEVELS[level][rank % len(LEVELS[level])]


def cores_of(level, workers):
    return [rank_cores(level, rank) for rank in range(workers)]


def profile(args, level, rank):
    cores = rank_cores(level, rank)
    return f"{FIXED_MS:g}:{args.ms_per_sample_1core / cores:.6g}:{JITTER:g}"


def device_text(args, rank):
    """The rank's emulate_device text: one profile, or EPOCH@PROFILE with an epoch of
    --step_iterations iterations."""
    if args.level != "dynamic":
        return profile(args, args.level, rank)
    return ",".join(f"{i}@{profile(args, lvl, rank)}" for i, lvl in enumerate(DYNAMIC))


def balanced_batches(level, global_batch, workers):
    """Batches proportional to the devices' speeds (cores), largest remainder to sum B."""
    cores = cores_of(level, workers)
    exact = [global_batch * c / sum(cores) for c in cores]
    out = [int(e) for e in exact]
    for k in sorted(range(len(out)), key=lambda k: exact[k] - out[k], reverse=True)[:global_batch - sum(out)]:
        out[k] += 1
    return out


# ------------------------------------------------------------------ workers (inside a host)

def real_indices(samples, batch, cap, offset):
    idx = samples if samples is not None else list(range(offset, offset + batch))
    return [int(i) for i in idx][:cap or batch]


def ddp_batches(args, level):
    if args.system == "ddp-balanced":
        return balanced_batches(level, args.global_batch, args.workers)
    return [args.global_batch // args.workers] * args.workers


def ddp_step_data(args, it, batch_of):
    """A DDP rank's iteration: its batch at the level in force, its samples (the ranks'
    batches tile the global one)."""
    level = level_at(args, it)
    batches = ddp_batches(args, level)
    b = batches[args.rank]
    first = (it * args.global_batch + sum(batches[:args.rank])) % args.dataset
    x, y = batch_of(real_indices(None, b, MODELS[args.model][0], first))
    return b, x, y


def ddp_main(args):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{args.master}:{DDP_PORT}", rank=args.rank,
                            world_size=args.workers)
    if args.timing == "layers":
        return ddp_layers(args)
    from omnilearn.emulation import EmulatedDevice
    model, batch_of = build(args.model)
    params = [p for p in model.parameters()]
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    device = EmulatedDevice(device_text(args, args.rank), seed=args.rank)
    flat = torch.zeros(sum(p.numel() for p in params) + 1)  # the gradient and the weighted loss
    rows = []
    for it in range(args.iterations):
        t0 = time.perf_counter()
        b, x, y = ddp_step_data(args, it, batch_of)
        loss = loss_of(model, x, y)
        loss.backward()
        _, real = device.pace(t0, b, it / args.step_iterations)
        scale = b / args.global_batch
        torch.cat([p.grad.reshape(-1) for p in params], out=flat[:-1])
        flat[:-1] *= scale
        flat[-1] = loss.item() * scale
        t_comm = time.perf_counter()
        dist.all_reduce(flat)
        comm = time.perf_counter() - t_comm
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        opt.step()
        opt.zero_grad(set_to_none=False)
        rows.append({"start": t0, "batch": b, "loss": float(flat[-1]), "real": real, "comm_s": comm})
    dist.destroy_process_group()
    return rows, device.overruns, (model, batch_of)


def ddp_layers(args):
    """DistributedDataParallel itself (its buckets all-reduced while backward runs), the
    device's time paced over the model's stages; balanced batches weight each rank's loss by
    b_k N / B, so that DDP's mean of the gradients is the global batch's."""
    import torch
    import torch.distributed as dist
    from omnilearn.emulation import EmulatedDevice
    model, batch_of = build(args.model)
    pacer = Pacer(model, stages_of(args.model, model))
    device = EmulatedDevice(device_text(args, args.rank), seed=args.rank)  # the step timing's devices
    # Constant buffers of a type gloo cannot broadcast (gpt2's causal masks, bool): every rank
    # builds the same, so DDP leaves them alone.
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, [n for n, b in model.named_buffers() if b.dtype == torch.bool])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    rows = []
    for it in range(args.iterations):
        t0 = time.perf_counter()
        b, x, y = ddp_step_data(args, it, batch_of)
        pacer.forward(device.step_seconds(b, it / args.step_iterations))
        loss = loss_of(ddp, x, y)
        pacer.backward()
        (loss * (b * args.workers / args.global_batch)).backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        rows.append({"start": t0, "batch": b, "loss": loss.item()})
    dist.destroy_process_group()
    return rows, 0, (model, batch_of)


def omnilearn_main(args):
    import torch
    from omnilearn.worker import Worker
    torch.set_num_threads(1)
    model, batch_of = build(args.model)
    cap = MODELS[args.model][0]
    rows = []
    layers = args.timing == "layers"
    from omnilearn.emulation import EmulatedDevice
    device = EmulatedDevice(device_text(args, args.rank), seed=args.rank) if layers else None
    local = args.system in LOCAL_SYSTEMS  # the same SGD as DDP's, stepped by the worker; rounds of H steps
    inner = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM) if local else None
    rounds = math.ceil(args.iterations / args.local_steps) if local else args.iterations
    with Worker(args.server, model, name=f"w{args.rank}", max_iterations=rounds, optimizer=inner,
                dataset_size=args.dataset, emulate_device=None if layers else device_text(args, args.rank),
                rpc_timeout=300, connect_timeout=120, bucket_mb=args.bucket_mb, overlap_pull=bool(args.overlap_pull),
                log=lambda line: print(line, file=sys.stderr, flush=True)) as w:
        pacer = Pacer(model, stages_of(args.model, model), lambda: w.arrival_wait_seconds) if layers else None
        for step in w:
            t0 = time.perf_counter()
            samples = step.samples.tolist() if step.samples is not None else None
            x, y = batch_of(real_indices(samples, step.batch_size, cap, 0))
            if pacer is not None:
                pacer.forward(device.step_seconds(step.batch_size, step.epoch))
            loss = loss_of(model, x, y)
            if pacer is not None:
                pacer.backward()
            loss.backward()
            t1 = time.perf_counter()
            w.push(loss)
            rows.append({"start": t0, "batch": step.batch_size, "loss": loss.item(), "round": w.iteration,
                         "push_s": time.perf_counter() - t1, "comm_s": w.communication_seconds})
        overruns = w.emulation.overruns if w.emulation is not None else 0
    return rows, overruns, (model, batch_of)  # the job's final model: the server's last


HELD_OUT = 1 << 24  # the validation samples' first id: no job trains on it (--dataset is far below)


def validation_loss(model, batch_of, n=256):
    """The final model's loss on n held-out samples (ids from HELD_OUT), in eval mode."""
    import torch
    model.eval()
    with torch.no_grad():
        losses = [loss_of(model, *batch_of(list(range(i, i + 32)))).item() for i in range(HELD_OUT, HELD_OUT + n, 32)]
    return statistics.mean(losses)


def worker_main(args):
    rows, overruns, (model, batch_of) = (ddp_main if args.system.startswith("ddp") else omnilearn_main)(args)
    validation = validation_loss(model, batch_of) if args.rank == 0 else None
    print(json.dumps({"rows": rows, "overruns": overruns, "validation": validation}))


# ------------------------------------------------------------------ one run

def server_command(args, cluster, host, extra, port=PORT):
    return cluster.command(host, [
        f"{args.bin_dir}/server/omnilearn_server", f"--port={port}", "--metrics_port=0", "--quiet",
        "--progress_every_s=0", f"--advertise={cluster.addr[host]}:{port}", *extra])


def start_servers(args, cluster, system, log):
    """The system's servers; returns (processes, the workers' server address)."""
    job = ["--mode=sync", f"--num_workers={args.workers}", f"--global_batch={args.global_batch}", f"--lr={LR}",
           f"--momentum={MOMENTUM}", "--adjust_every=5", "--exit_when_done", *args.server_flags.split()]
    if system in LOCAL_SYSTEMS:  # a round is H global batches; the servers' optimizer is the outer one
        steps = f"--local_batch={args.local_batch}" if args.local_batch else f"--local_steps={args.local_steps}"
        job[2:5] = [f"--global_batch={args.local_steps * args.global_batch}", steps,
                    "--optimizer=sgd", f"--lr={args.outer_lr}", f"--momentum={args.outer_momentum}",
                    f"--wire_dtype={args.local_wire}"]
        if args.outer_momentum > 0:
            job.append("--optimizer_options=nesterov=1")
        if system == "local-blind":
            job.append("--controller=off")
        job += ["--round_timeout_s=600", "--lease_s=900"]  # a round is H steps (a slow device's, unbalanced)
    if system.startswith("omnilearn-1server"):
        return [subprocess.Popen(server_command(args, cluster, "ps", job), stdout=log("ps"),
                                 stderr=subprocess.STDOUT)], f"{cluster.addr['ps']}:{PORT}"
    # The slices' hosts: one each on the worker hosts, or all on the fat server host.
    if system == "omnilearn-fat-slices":
        hosts = [("ps", PORT + i) for i in range(args.fat_slices)]
    else:
        hosts = [(f"w{i}", PORT) for i in range(args.workers)]
    coordinator = f"{cluster.addr[hosts[0][0]]}:{hosts[0][1]}"
    peer = os.path.join(args.work, "peer-token")  # the servers' own secret (they listen beyond loopback)
    with open(peer, "w") as f:
        f.write(secrets.token_hex(16))
    sharded = [f"--shards={len(hosts)}", f"--peer_token_file={peer}"]
    if args.partition_mb:
        sharded.append(f"--partition_mb={args.partition_mb:g}")  # every server of the job cuts the same map
    order = ["--push_slices_in_order"] if system == "omnilearn-fat-slices" else []
    procs = [subprocess.Popen(server_command(args, cluster, hosts[0][0], sharded + order + job, hosts[0][1]),
                              stdout=log("s0"), stderr=subprocess.STDOUT)]
    for i in range(1, len(hosts)):
        procs.append(subprocess.Popen(server_command(args, cluster, hosts[i][0], sharded + [
            f"--coordinator={coordinator}"], hosts[i][1]), stdout=log(f"s{i}"), stderr=subprocess.STDOUT))
    return procs, coordinator


def host_load(args, hogs):
    """--load=RANK:PROCS: PROCS busy loops (appended to `hogs`) on the machine's last core,
    and worker RANK's process pinned there with them (its host's CPU taken by others: its
    real compute slows and its emulated steps overrun). Returns argv -> argv for worker r."""
    if not args.load:
        return lambda r, argv: argv
    rank, procs = (int(v) for v in args.load.split(":"))
    core = str(os.cpu_count() - 1)
    for _ in range(procs):
        hogs.append(subprocess.Popen(["taskset", "-c", core, sys.executable, "-c", "while True: pass"]))
    return lambda r, argv: ["taskset", "-c", core, *argv] if r == rank else argv


def one_run(args, model, level, system):
    """Every rank's rows and overruns for one (model, level, system), and the run's samplers
    ({"cpu": bench/cpu_profile's, "links": bench/link_profile's}, as --cpu_profile and
    --link_profile ask)."""
    hosts = {f"w{i}": args.link for i in range(args.workers)}
    if system == "omnilearn-1server":
        hosts["ps"] = args.link
    elif system in ("omnilearn-1server-fat", "omnilearn-fat-slices"):
        hosts["ps"] = f"{float(args.link[:-4]) * args.workers:g}{args.link[-4:]}"
    cluster = Cluster(hosts)
    servers, workers, hogs, samplers = [], [], [], {}
    tag = f"{model}.{level}.{system}"
    log = lambda name: open(os.path.join(args.work, f"{tag}.{name}.log"), "w")  # noqa: E731
    try:
        if args.link_profile:
            samplers["links"] = link_profile.Sampler(f"{cluster.prefix}-lan", list(hosts),
                                                     [rate_bytes(rate) for rate in hosts.values()])
        target = None
        pin = host_load(args, hogs)
        if not system.startswith("ddp"):
            servers, target = start_servers(args, cluster, system, log)
        common = [f"--model={model}", f"--level={level}", f"--system={system}", f"--iterations={args.iterations}",
                  f"--timing={args.timing}", f"--bucket_mb={args.bucket_mb}",
                  f"--overlap_pull={args.overlap_pull}",
                  f"--global_batch={args.global_batch}", f"--ms_per_sample_1core={args.ms_per_sample_1core}",
                  f"--step_iterations={args.step_iterations}", f"--dataset={args.dataset}",
                  f"--workers={args.workers}", f"--local_steps={args.local_steps}"]
        for r in range(args.workers):
            where = [f"--master={cluster.addr['w0']}"] if target is None else [f"--server={target}"]
            env = dict(os.environ, GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")
            if args.timeline and target is not None:
                env["OMNILEARN_TIMELINE"] = os.path.join(args.work, f"{tag}.w{r}.timeline")
                if os.path.exists(env["OMNILEARN_TIMELINE"]):
                    os.remove(env["OMNILEARN_TIMELINE"])
            workers.append(subprocess.Popen(pin(r, cluster.command(f"w{r}", [
                sys.executable, os.path.abspath(__file__), "--worker", f"--rank={r}", *where, *common])),
                stdout=subprocess.PIPE, stderr=log(f"w{r}"), text=True, env=env))
        if args.cpu_profile:
            samplers["cpu"] = cpu_profile.Sampler({"worker": [p.pid for p in workers],
                                                   "server": [p.pid for p in servers]}).start()
        results = []
        deadline = time.monotonic() + args.timeout
        for r, p in enumerate(workers):
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"{tag}: worker {r} failed ({p.returncode}); see {args.work}/{tag}.w{r}.log")
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results, samplers
    finally:
        for p in workers + servers + hogs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in workers + servers + hogs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        try:
            for sampler in samplers.values():  # the link sampler lives in the cluster's bridge namespace
                sampler.stop()
        finally:
            cluster.close()


# ------------------------------------------------------------------ figures

def timeline_phases(args, tag):
    """--timeline: the median phases of the run's rounds after --skip (bench/timeline.py), or
    None, saying why, when its timelines hold no whole round (--timing=step's runs), so that
    the benchmark goes on."""
    import glob
    try:
        _, phases = timeline.summary(timeline.read(sorted(glob.glob(os.path.join(args.work, f"{tag}.w*.timeline")))),
                                     args.skip)
    except timeline.NoRounds as e:
        print(f"  timeline: {e}", flush=True)
        return None
    return phases


def children_cpu():
    import resource
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def profiles(args, r, results, samplers):
    """The samplers' figures over the iterations after --skip (rank 0's), into row r."""
    starts = [row["start"] for row in results[0]["rows"]][args.skip:]
    if "cpu" in samplers:
        r["cpu_profile"] = samplers["cpu"].window(starts[0], starts[-1], len(starts) - 1)
        print("  " + cpu_profile.describe(r["cpu_profile"]), flush=True)
    if "links" in samplers:
        r["link_profile"] = samplers["links"].window(starts[0], starts[-1])
        workers = [h for h in samplers["links"].hosts if h.startswith("w")]
        r["link_phases"] = samplers["links"].by_phase(starts, workers)
        print("  " + link_profile.describe(r["link_profile"], workers), flush=True)
        for direction, shares in r["link_phases"].items():
            print(f"  {direction}links busy by tenth of rank 0's iteration: "
                  + " ".join(f"{100 * s:.0f}" for s in shares) + " %", flush=True)


def by_rounds(args, results):
    """--local_batch: the workers take different numbers of steps a round. The job's H
    inner-step-equivalents a round (its samples over the global batch): each takes the
    round's time over H (rank 0's rounds) and carries the round's loss (every worker's steps,
    by their samples). Returns (starts, losses) of those steps."""
    rounds = sorted({row["round"] for row in results[0]["rows"]})
    begin = {k: min(row["start"] for row in results[0]["rows"] if row["round"] == k) for k in rounds}
    starts, losses = [], []
    for k, end in zip(rounds, rounds[1:]):
        rows = [row for r in results for row in r["rows"] if row["round"] == k]
        loss = sum(row["loss"] * row["batch"] for row in rows) / sum(row["batch"] for row in rows)
        step = (begin[end] - begin[k]) / args.local_steps
        starts += [begin[k] + j * step for j in range(args.local_steps)]
        losses += [loss] * args.local_steps
    return starts, losses


def summarize(args, model, level, system, results, mbytes):
    starts = [r["start"] for r in results[0]["rows"]]
    local = system in LOCAL_SYSTEMS
    losses = None
    if local and args.local_batch:
        starts, losses = by_rounds(args, results)
    iterations = [b - a for a, b in zip(starts, starts[1:])][args.skip:]
    if local:  # the inner steps' mean: a round's push amortized over its H steps
        iterations = [statistics.mean(iterations)]
    # The job's loss per iteration: every rank's loss weighted by its batch (DDP's rows carry
    # the all-reduced one already).
    n = min(len(r["rows"]) for r in results)
    if system.startswith("ddp") and args.timing == "step":
        losses = [results[0]["rows"][i]["loss"] for i in range(n)]  # all-reduced with the gradient
    elif losses is None:
        losses = [sum(r["rows"][i]["loss"] * r["rows"][i]["batch"] for r in results) /
                  sum(r["rows"][i]["batch"] for r in results) for i in range(n)]
    rate = rate_bytes(args.link)
    # Ring: each host sends and receives 2(N-1)/N x M at once. One server: N gradients in,
    # then N models out, on its one link (a sync round's phases cannot overlap). Servers on
    # the worker hosts: (N-1)/N x M each way per phase, the ring's total.
    w = args.workers
    wire = {"ddp": wire_seconds(w, mbytes, rate), "omnilearn-1server": 2 * w * mbytes / rate}
    wire["ddp-balanced"] = wire["omnilearn-colocated"] = wire["ddp"]
    wire["omnilearn-1server-fat"] = 2 * mbytes / rate  # each worker's gradient up, then the model down
    # The slices one after the other: slice s's model comes down while slice s+1's gradient
    # goes up, so a worker's link carries M each way at once, plus the last slice's model.
    wire["omnilearn-fat-slices"] = (1 + 1 / args.fat_slices) * mbytes / rate
    wire["omnilearn-local"] = wire["local-blind"] = wire["ddp"] / args.local_steps  # a round's, over its H steps
    # What a worker host sends per trained sample: 2(N-1)/N x M a ring's (or colocated
    # servers') iteration, 2 x M a push and pull to one server, over B samples (local: H x B).
    sent = {"omnilearn-1server": 2 * mbytes, "omnilearn-1server-fat": 2 * mbytes,
            "omnilearn-fat-slices": 2 * mbytes}.get(system, 2 * (w - 1) / w * mbytes)
    if local and args.local_wire == "bf16":
        sent /= 2
    per_sample = w * sent / (args.global_batch * (args.local_steps if local else 1))
    pushes = [r.get("push_s") for r in results[0]["rows"][args.skip:]]
    # Communication per rank after its step (DDP: the all_reduce; OmniLearn: push to model
    # back), the sync barrier's wait included: the median over every rank's iterations.
    comms = [row["comm_s"] for r in results for row in r["rows"][args.skip:] if "comm_s" in row]
    return {"model": model, "level": level, "system": system, "iteration_s": statistics.median(iterations),
            "push_s": statistics.median(pushes) if None not in pushes and pushes else None,
            "comm_s": statistics.median(comms) if comms else None,
            "wire_s": wire[system], "bytes_per_sample": per_sample,
            "batches": [r["rows"][-1]["batch"] for r in results],
            "overruns": sum(r["overruns"] for r in results), "elapsed": [b - starts[0] for b in starts[1:]],
            "losses": losses, "validation_loss": results[0].get("validation")}


def smoothed(losses, window=5):
    return [statistics.mean(losses[max(0, i - window + 1):i + 1]) for i in range(len(losses))]


def add_time_to_target(rows):
    """mlp4: seconds until the smoothed loss first reaches the highest final smoothed loss
    among the systems of the same level (every system reaches it)."""
    for level in {r["level"] for r in rows if r["model"] == "mlp4"}:
        group = [r for r in rows if r["model"] == "mlp4" and r["level"] == level]
        target = max(smoothed(r["losses"])[-1] for r in group)
        for r in group:
            s = smoothed(r["losses"])
            i = next(i for i, v in enumerate(s) if v <= target)
            r["target_loss"] = target
            r["time_to_target_s"] = r["elapsed"][min(i, len(r["elapsed"]) - 1)]


def table(rows):
    lines = ["| model | level | system | iteration | x ddp | x ddp-balanced | wire bound | x its wire | "
             "communication (x wire) | time to target | x ddp | MB sent per sample | batches at the end | overruns |",
             "|---" * 14 + "|"]
    for r in rows:
        peers = {p["system"]: p for p in rows if p["model"] == r["model"] and p["level"] == r["level"]}
        ratio = lambda key, system: (f"{r[key] / peers[system][key]:.2f}"  # noqa: E731
                                     if system in peers and key in r and key in peers[system] else "")
        ttt = f"{r['time_to_target_s']:.1f} s" if "time_to_target_s" in r else ""
        comm = f"{1000 * r['comm_s']:.0f} ms ({r['comm_s'] / r['wire_s']:.2f})" if r.get("comm_s") else ""
        lines.append(f"| {r['model']} | {r['level']} | {r['system']} | {1000 * r['iteration_s']:.0f} ms | "
                     f"{ratio('iteration_s', 'ddp')} | {ratio('iteration_s', 'ddp-balanced')} | "
                     f"{1000 * r['wire_s']:.0f} ms | {r['iteration_s'] / r['wire_s']:.2f} | {comm} | {ttt} | "
                     f"{ratio('time_to_target_s', 'ddp')} | {r.get('bytes_per_sample', 0) / 1e6:.3f} | "
                     f"{','.join(map(str, r['batches']))} | {r['overruns']} |")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cases = sorted({(r["model"], r["level"]) for r in rows}, key=lambda c: (list(MODELS).index(c[0]), c[1]))
    fig, (bars, curves) = plt.subplots(1, 2, figsize=(14, 5))
    systems = [s for s in SYSTEMS + EXTRA_SYSTEMS if any(r["system"] == s for r in rows)]
    width = 0.8 / len(systems)
    for k, system in enumerate(systems):
        ys = []
        for case in cases:
            base = next((r for r in rows if (r["model"], r["level"]) == case and r["system"] == "ddp-balanced"), None)
            mine = next((r for r in rows if (r["model"], r["level"]) == case and r["system"] == system), None)
            ys.append(mine["iteration_s"] / base["iteration_s"] if mine and base else 0)
        bars.bar([i + k * width for i in range(len(cases))], ys, width, label=system)
    bars.axhline(1.0, color="k", lw=0.5)
    bars.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))])
    bars.set_xticklabels([f"{m}\n{lvl}" for m, lvl in cases], fontsize=7)
    bars.set_ylabel("iteration time / ddp-balanced's")
    bars.legend(fontsize=7)
    for r in rows:
        if r["model"] == "mlp4" and r["level"] == "HL8":
            curves.plot(r["elapsed"][:len(r["losses"])], smoothed(r["losses"])[:len(r["elapsed"])],
                        label=r["system"])
    curves.set_xlabel("seconds")
    curves.set_ylabel("training loss (mlp4, HL8, smoothed)")
    if curves.lines:
        curves.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# ------------------------------------------------------------------ main

def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for hidden in ("--worker", ):
        ap.add_argument(hidden, action="store_true", help=argparse.SUPPRESS)
    for hidden, kind in (("--rank", int), ("--master", str), ("--server", str), ("--model", str),
                         ("--level", str), ("--system", str), ("--ms_per_sample_1core", float)):
        ap.add_argument(hidden, type=kind, help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="mlp4 at HL8, every system, few iterations")
    ap.add_argument("--models", default="mlp4,mlp40,resnet18,gpt2")
    ap.add_argument("--levels", default="HL1,HL4,HL8,dynamic")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--timing", choices=("step", "layers"), default="step",
                    help="step: the device's time waited out after the real step, gradients sent whole "
                         "after it (DDP: one all_reduce); layers: the time spread over the model's stages, "
                         "so that DDP all-reduces its buckets during backward and OmniLearn pushes during "
                         "backward and receives the model during the next forward")
    ap.add_argument("--compute_ratio", type=float, default=1.0,
                    help="balanced compute per iteration over the ring's wire time")
    ap.add_argument("--bucket_mb", type=float, default=4.0, help="OmniLearn workers' push buckets (layers)")
    ap.add_argument("--overlap_pull", type=int, default=1, help="OmniLearn workers: the model arrives during forward")
    ap.add_argument("--compute_s", type=float, help="the balanced compute of one iteration, in seconds "
                    "(default: --compute_ratio x the ring's wire time)")
    ap.add_argument("--workers", type=int, default=4, help="worker hosts (the levels' four devices repeated)")
    ap.add_argument("--global_batch", type=int, help="default: 32 per worker")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--step_iterations", type=int, default=8, help="dynamic: iterations per level")
    ap.add_argument("--dataset", type=int, default=1 << 16)
    ap.add_argument("--skip", type=int, default=10, help="first iterations left out (joins, the controller's start)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    ap.add_argument("--fat_slices", type=int, default=8, help="omnilearn-fat-slices: the slices on the server host")
    ap.add_argument("--local_steps", type=int, default=8, help="omnilearn-local: inner steps a round")
    ap.add_argument("--local_batch", type=int, help="omnilearn-local, local-blind: steps of this many samples "
                    "(the servers' --local_batch) instead of --local_steps; a round stays --local_steps global "
                    "batches, so a worker given more samples takes more steps")
    ap.add_argument("--outer_lr", type=float, default=0.7, help="omnilearn-local: the outer SGD's rate (DiLoCo's)")
    ap.add_argument("--outer_momentum", type=float, default=0.9,
                    help="omnilearn-local: the outer SGD's Nesterov momentum (DiLoCo's; 0: plain averaging)")
    ap.add_argument("--local_wire", choices=("f32", "bf16"), default="f32",
                    help="omnilearn-local: the pseudo-gradients' and models' values on the wire")
    ap.add_argument("--server_flags", default="", help="more flags for every OmniLearn job's coordinator or "
                    "server (e.g. --clip_grad_norm=1); DDP's ranks clip nothing")
    ap.add_argument("--partition_mb", type=float, help="OmniLearn's sharded servers: the model's partitions "
                    "hold at most this many MB (default: the server's)")
    ap.add_argument("--load", help="RANK:PROCS: that worker's host loaded by PROCS busy loops on its core")
    ap.add_argument("--timeline", action="store_true",
                    help="OmniLearn workers write their iterations' events (OMNILEARN_TIMELINE) beside their "
                         "logs, and each run prints their phases (bench/timeline.py)")
    ap.add_argument("--cpu_profile", action="store_true",
                    help="every run's processes sampled (bench/cpu_profile.py): workers' and servers' CPU time "
                         "and time waiting for a core per iteration, over the iterations after --skip")
    ap.add_argument("--link_profile", action="store_true",
                    help="every run's links sampled (bench/link_profile.py): the worker hosts' down- and uplinks, "
                         "how busy and how often at their rate, over the iterations after --skip")
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    if args.global_batch is None:
        args.global_batch = 32 * args.workers
    if args.workers < 2 or args.global_batch < args.workers:
        ap.error("--workers must be 2 or more, with a global batch of at least one sample each")
    load = re.fullmatch(r"(\d+):(\d+)", args.load or "0:0")
    if not load or int(load.group(1)) >= args.workers:
        ap.error(f"--load={args.load}: RANK:PROCS with a rank below --workers ({args.workers})")
    if args.quick:
        args.models, args.levels, args.iterations, args.skip = "mlp4", "HL8", 24, 10
    return args


def write_json(args, rows):
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump({"link": args.link, "global_batch": args.global_batch, "iterations": args.iterations,
                   "compute_ratio": args.compute_ratio, "rows": rows}, f, indent=1)


def main():
    args = parse()
    if args.worker:
        return worker_main(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the runs' finally blocks stop what they started
    if any(not s.startswith("ddp") for s in args.systems.split(",")):
        build_check.check(args.bin_dir, ["server/omnilearn_server"], "omnilearn")
    os.makedirs(args.out, exist_ok=True)
    args.work = os.path.join(args.out, "peers-logs")
    os.makedirs(args.work, exist_ok=True)
    rows = []
    for model in args.models.split(","):
        mbytes = model_bytes(model)
        ring_s = wire_seconds(args.workers, mbytes, rate_bytes(args.link))
        # The balanced compute of an iteration (B samples over the levels' cores; every level
        # has as many) equals the ring's wire time, or --compute_s.
        compute_s = args.compute_s if args.compute_s is not None else args.compute_ratio * ring_s
        args.ms_per_sample_1core = 1000 * compute_s * sum(cores_of("HL1", args.workers)) / args.global_batch
        for level in args.levels.split(","):
            # Dynamic: every level of the schedule for --step_iterations, a global epoch each.
            run = argparse.Namespace(**vars(args))
            if level == "dynamic":
                run.iterations = len(DYNAMIC) * args.step_iterations
                run.dataset = args.global_batch * args.step_iterations
            for system in args.systems.split(","):
                t, cpu = time.monotonic(), children_cpu()
                results, samplers = one_run(run, model, level, system)
                r = summarize(run, model, level, system, results, mbytes)
                # What the run's processes (servers and workers, all reaped) used of the machine's cores.
                r["cpu_busy"] = (children_cpu() - cpu) / ((time.monotonic() - t) * os.cpu_count())
                r["compute_s"], r["model_bytes"] = compute_s, mbytes
                rows.append(r)
                print(f"{model:>8} {level:>7} {system:<20} iteration {1000 * r['iteration_s']:7.0f} ms "
                      f"(wire bound {1000 * r['wire_s']:.0f} ms, communication "
                      f"{1000 * (r['comm_s'] or 0):.0f} ms) batches {r['batches']} overruns {r['overruns']} "
                      f"cpu {100 * r['cpu_busy']:.0f}% "
                      f"[{time.monotonic() - t:.0f} s]", flush=True)
                profiles(run, r, results, samplers)
                if args.timeline and not system.startswith("ddp"):
                    r["timeline"] = timeline_phases(run, f"{model}.{level}.{system}")
                    if r["timeline"] is not None:
                        print("  " + ", ".join(f"{k} {v['median']:.0f} ms" for k, v in r["timeline"].items()),
                              flush=True)
                write_json(args, rows)  # each row as it comes: a later run's failure keeps it
    add_time_to_target(rows)
    write_json(args, rows)
    text = table(rows)
    with open(os.path.join(args.out, "peers.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    plot(rows, os.path.join(args.out, "peers.png"))
    print(f"results: {args.out}/peers.json, peers.md, peers.png")


if __name__ == "__main__":
    sys.exit(main())
