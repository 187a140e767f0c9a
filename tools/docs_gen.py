#!/usr/bin/python3
"""docs_gen: the tables of README.md and docs/ made from their sources, and the rules every page
keeps. One script, so that a figure is written once: in the JSON a benchmark or a test wrote under
bench/results/, or in a program's --helpfull.

A generated table sits in a page between two comments, and nothing else writes there:

    <!-- table: peers_layers -->
    ... (made by this script: the table, then its command, machine and date) ...
    <!-- /table -->

    tools/docs_gen.py --write SERVER WORKER CTL   # remake every table (the three binaries, built)
    tools/docs_gen.py --check SERVER WORKER CTL   # what --write would change, and the rules below

Rules each page keeps (tests/docs_test.py runs --check):
- every generated table is what its source makes now;
- a figure in the prose (a ratio 0.85x, a share 88.80%, a decimal time or rate 1.4 s) is one of
  the generated tables' cells, so a figure lives in one place;
- README.md at most 150 lines, a page of docs/ at most 400;
- no dates outside the tables' captions, no commit hashes, no issue numbers;
- no paragraph starts mid-sentence (a lowercase word or a comma: a fragment left by a move);
- a section another page names (`docs/x.md, "Heading"`, or a link to `docs/x.md#anchor`) exists."""

import functools
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
RESULTS = os.path.join(ROOT, "bench", "results")
VM = "2-core x86_64 VM, Debian 12, -c opt"
BLOCK_RE = re.compile(r"(<!-- table: (\w+) -->\n)(.*?)(<!-- /table -->)", re.S)
PAGE_LIMITS = {"README.md": 150}
DOCS_LIMIT = 400


def load(name):
    with open(os.path.join(RESULTS, name)) as f:
        return json.load(f)


def ms(seconds):
    return f"{1000 * seconds:.0f} ms" if seconds is not None else ""


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else ""


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


class Source:
    """A results file, the command that wrote it, where and when it ran."""

    def __init__(self, path, command, date, machine=VM):
        self.path, self.command, self.date, self.machine = path, command, date, machine

    def caption(self):
        return f"`{self.command}` ({self.machine}, {self.date}; bench/results/: `{self.path}`)"


def caption(sources):
    if len(sources) == 1:
        return sources[0].caption()
    return "\n".join(f"- {s.caption()}" for s in sources)


# ------------------------------------------------------------------ bench/peers.py

PEERS = Source("peers.json", "bench/peers.py --models=mlp4,mlp40 --levels=HL1,HL4,HL8,dynamic --iterations=24 "
               "--skip=8` and `bench/peers.py --models=resnet18,gpt2 --levels=HL1,HL8 --iterations=20 --skip=8",
               "2026-11-25")
LAYERS = [
    Source("peers_layers_resnet18_auto_2026-12-03.json",
           "bench/peers.py --timing=layers --models=resnet18 --levels=HL1", "2026-12-03"),
    Source("peers_layers_hl48_auto_2026-12-03.json",
           "bench/peers.py --timing=layers --models=resnet18,mlp40 --levels=HL4,HL8", "2026-12-03"),
    Source("peers_layers_gpt2_2026-12-03b.json",
           "bench/peers.py --timing=layers --models=gpt2 --levels=HL1 --systems=ddp,omnilearn-colocated",
           "2026-12-03"),
    Source("peers_layers_resnet18_w2_2026-12-03.json",
           "bench/peers.py --timing=layers --models=resnet18 --levels=HL1 --workers=2", "2026-12-03"),
    Source("peers_profiles_gpt2_w2_2026-12-03.json",
           "bench/peers.py --timing=layers --models=gpt2 --levels=HL1 --workers=2 --cpu_profile --link_profile",
           "2026-12-03"),
]


def groups(rows):
    """{(model, level, workers): {system: row}} in the order the rows came."""
    out = {}
    for r in rows:
        out.setdefault((r["model"], r["level"], len(r["batches"])), {})[r["system"]] = r
    return out


def peers_whole():
    rows = []
    for (model, level, _), s in groups(load(PEERS.path)["rows"]).items():
        ddp, bal, one, col = (s.get(k) for k in ("ddp", "ddp-balanced", "omnilearn-1server", "omnilearn-colocated"))
        it = lambda r: r and r["iteration_s"]  # noqa: E731
        ttt = lambda r: r and r.get("time_to_target_s")  # noqa: E731
        rows.append([model, level, ms(it(ddp)), ms(it(bal)), ms(it(col)), ratio(it(col), it(ddp)),
                     ratio(it(col), it(bal)), ratio(it(one), it(ddp)), ratio(ttt(col), ttt(ddp))])
    header = ["model", "level", "DDP", "DDP, balanced", "OmniLearn", "x DDP", "x balanced DDP",
              "one server x DDP", "time to target x DDP"]
    return table(header, rows), [PEERS]


def peers_layers():
    rows = []
    for source in LAYERS:
        for (model, level, workers), s in groups(load(source.path)["rows"]).items():
            ddp, bal, col = s.get("ddp"), s.get("ddp-balanced"), s["omnilearn-colocated"]
            rows.append([model, workers, level, ms(ddp["iteration_s"]), ms(bal and bal["iteration_s"]),
                         ms(col["iteration_s"]), ratio(col["iteration_s"], ddp["iteration_s"]),
                         ratio(col["iteration_s"], bal and bal["iteration_s"]), ms(col["wire_s"]),
                         f"{ms(col['comm_s'])} ({col['comm_s'] / col['wire_s']:.2f})"])
    header = ["model", "workers", "level", "DDP", "DDP, balanced", "OmniLearn", "x DDP", "x balanced DDP",
              "wire bound", "exposed communication (x wire)"]
    return table(header, rows), LAYERS


FAT = Source("peers_fat.json", "bench/peers.py --systems=ddp,ddp-balanced,omnilearn-1server-fat,omnilearn-fat-slices "
             "--levels=HL1,HL8", "2026-11-27")


def peers_fat():
    rows = []
    for (model, level, _), s in groups(load(FAT.path)["rows"]).items():
        bal = s["ddp-balanced"]["iteration_s"]
        rows.append([model, level, ms(bal)] + sum(([ms(s[k]["iteration_s"]), ratio(s[k]["iteration_s"], bal)]
                                                   for k in ("omnilearn-1server-fat", "omnilearn-fat-slices")), []))
    header = ["model", "level", "DDP, balanced", "one server", "x balanced DDP", "8 slices in order",
              "x balanced DDP"]
    return table(header, rows), [FAT]


# ------------------------------------------------------------------ bench/scaling.py

SCALING = Source("scaling-50mbit/scaling.json",
                 "bench/scaling.py --link=50mbit --workers=2,4,8,12,16 --models=mlp4", "2026-12-02")
SCALING_BBR = Source("scaling-50mbit-bbr/scaling.json", "the same on BBR hosts", "2026-12-02")
RING, SERVERS = "ddp", "omnilearn-colocated"


def iterations(source):
    out = {}
    for p in load(source.path)["points"]:
        out.setdefault(p["workers"], {})[p["system"]] = p["iteration_s"]
    return out


def scaling_measured():
    cubic, bbr = iterations(SCALING), iterations(SCALING_BBR)
    rows = [[n, ms(t[RING]), ms(t[SERVERS]), ratio(t[SERVERS], t[RING]),
             ratio(bbr[n][SERVERS], t[SERVERS]) if n in bbr else ""] for n, t in sorted(cubic.items())]
    header = ["workers", "ring (DDP)", "servers on the worker hosts", "servers x ring", "servers on BBR x CUBIC"]
    return table(header, rows), [SCALING, SCALING_BBR]


def scaling_predicted():
    import link_model
    from peers import JITTER
    points = load(SCALING.path)["points"]
    fit = {s: link_model.fit([p for p in points if p["system"] == s], JITTER) for s in (RING, SERVERS)}
    p = points[0]
    at = lambda s, n: link_model.predict(fit[s], n, p["model_bytes"], p["rate"], p["compute_s"], JITTER)  # noqa
    counts = [2, 4, 8, 16, 32, 64, 128, 256]
    rows = [["ring (DDP)"] + [ms(at(RING, n)) for n in counts],
            ["servers"] + [ms(at(SERVERS, n)) for n in counts],
            ["servers x ring"] + [ratio(at(SERVERS, n), at(RING, n)) for n in counts]]
    return table(["workers"] + [str(n) for n in counts], rows), [SCALING]


LOCAL_COMMAND = ("bench/peers.py --models={model} --levels=HL1,HL8 --link={link} --systems=ddp,ddp-balanced,"
                 "omnilearn-colocated,omnilearn-local,local-blind --local_steps={h} --local_wire=bf16 "
                 "--iterations={n} --skip={skip} --out=bench/results/local_steps_{out}")
LOCAL_RUNS = [Source(f"local_steps_{link}/peers.json",
                     LOCAL_COMMAND.format(model="mlp4", link=link, h=32, n=256, skip=16, out=link), "2026-12-07")
              for link in ("100mbit", "1gbit")]
LOCAL_RUNS += [
    # Steps of 32 samples each (--local_batch): a worker given more samples takes more steps.
    Source("local_steps_dlu_1gbit/peers.json",
           LOCAL_COMMAND.format(model="mlp4", link="1gbit", h=32, n=256, skip=16, out="dlu_1gbit").replace(
               "HL1,HL8", "HL8") + " --local_batch=32", "2026-12-07"),
    Source("local_steps_resnet18_1gbit/peers.json",
           LOCAL_COMMAND.format(model="resnet18", link="1gbit", h=8, n=64, skip=8, out="resnet18_1gbit") +
           " --timing=layers", "2026-12-07"),
    Source("local_steps_gpt2_1gbit/peers.json",
           LOCAL_COMMAND.format(model="gpt2", link="1gbit", h=8, n=32, skip=8, out="gpt2_1gbit") +
           " --timing=layers", "2026-12-07")]
BY_H = [(8, 0.9, "h8"), (8, 0.5, "h8_m5"), (16, 0.9, "h16"), (16, 0.5, "h16_m5"), (32, 0.9, "h32")]
LOCAL_BY_H = [Source(f"local_steps_{out}/peers.json",
                     f"bench/peers.py --models=mlp4 --levels=HL1 --link=1gbit --systems=ddp,omnilearn-colocated,"
                     f"omnilearn-local --local_steps={h} --outer_momentum={m} --local_wire=bf16 --iterations=256 "
                     f"--skip=16 --out=bench/results/local_steps_{out}", "2026-12-07") for h, m, out in BY_H]


def vs(r, base):
    """r's validation loss against base's, in percent."""
    return f"{100 * (r['validation_loss'] / base['validation_loss'] - 1):+.1f}%"


def local_peers():
    rows = []
    for source in LOCAL_RUNS:
        data = load(source.path)
        steps, h = re.search(r"--local_batch=(\d+)", source.command), re.search(r"--local_steps=(\d+)", source.command)
        round_of = f"steps of {steps[1]}" if steps else f"H = {h[1]}"
        for (model, level, _), by in groups(data["rows"]).items():
            ddp, sync = by["ddp"], by["omnilearn-colocated"]
            target = lambda r: r.get("time_to_target_s")  # noqa: E731  (mlp4's only, as its quality)
            for system, r in by.items():
                rows.append([model, data["link"], level, system + (f" ({round_of})" if "local" in system else ""),
                             ms(r["iteration_s"]),
                             ratio(r["iteration_s"], ddp["iteration_s"]),
                             f"{target(r):.1f} s" if target(r) else "", ratio(target(r), target(ddp)),
                             f"{r['bytes_per_sample'] / 1e3:.1f} kB", ratio(ddp["bytes_per_sample"], r["bytes_per_sample"]),
                             *([f"{r['validation_loss']:.3f}", vs(r, sync)] if model == "mlp4" else ["", ""]),
                             ",".join(str(b) for b in r["batches"])])
    header = ["model", "link", "devices", "system", "iteration (local: an inner step)", "x DDP",
              "time to target (training loss)", "x DDP", "sent per sample", "DDP's bytes over these",
              "validation loss, final model", "x sync (OmniLearn)", "a step's batches at the end"]
    return table(header, rows), LOCAL_RUNS


def local_by_h():
    rows = []
    for (h, momentum, _), source in zip(BY_H, LOCAL_BY_H):
        by = groups(load(source.path)["rows"])[("mlp4", "HL1", 4)]
        ddp, sync, local = by["ddp"], by["omnilearn-colocated"], by["omnilearn-local"]
        rows.append([h, momentum, ms(local["iteration_s"]), ratio(local["iteration_s"], ddp["iteration_s"]),
                     ratio(ddp["bytes_per_sample"], local["bytes_per_sample"]), f"{local['validation_loss']:.3f}",
                     f"{sync['validation_loss']:.3f}", vs(local, sync), f"{ddp['validation_loss']:.3f}", vs(local, ddp)])
    header = ["H", "outer momentum", "inner step", "x DDP", "DDP's bytes over these", "validation loss, final model",
              "sync's (same run)", "x sync", "DDP's (same run)", "x DDP"]
    return table(header, rows), LOCAL_BY_H


def local_predicted():
    import link_model
    from peers import JITTER
    points = load(SCALING.path)["points"]
    fit = {s: link_model.fit([p for p in points if p["system"] == s], JITTER) for s in (RING, SERVERS)}
    p = points[0]
    args = (p["model_bytes"], p["rate"], p["compute_s"], JITTER)
    ring = lambda n: link_model.predict(fit[RING], n, *args)  # noqa: E731
    counts = [2, 4, 8, 16, 32, 64, 128, 256]
    layouts = [("servers (sync)", lambda n: link_model.predict(fit[SERVERS], n, *args)),
               ("local steps, H = 8", lambda n: link_model.predict_local(fit[SERVERS], n, *args, 8)),
               ("local steps, H = 32, bf16", lambda n: link_model.predict_local(fit[SERVERS], n, *args, 32, 0.5))]
    rows = [["ring (DDP)"] + [ms(ring(n)) for n in counts]]
    rows += [[name + " x ring"] + [ratio(f(n), ring(n)) for n in counts] for name, f in layouts]
    return table(["workers"] + [str(n) for n in counts], rows), [SCALING]


# ------------------------------------------------------------------ the server's own benchmarks

def bench_source(name, command):
    data = load(name)
    return Source(name, command, BENCH_DATES[name], "VM: " + data["machine"] + ", -c opt"), data["rows"]


BENCH_DATES = {"transfer.json": "2026-11-23", "aggregate.json": "2026-11-23", "round.json": "2026-11-22",
               "scale.json": "2026-11-22", "shard_step.json": "2026-12-02", "python_transfer.json": "2026-11-23"}


def transfer():
    source, rows = bench_source("transfer.json", "bazel run -c opt //bench:transfer -- --sizes=100,256")
    out = [[f"{r['megabytes']:.0f} MB", f"{r['pull_ratio']:.2f}x", f"{r['push_ratio']:.2f}x",
            f"{r['pull_gbps']:.2f} GB/s", f"{r['push_gbps']:.2f} GB/s", f"{r['tcp_gbps']:.2f} GB/s"] for r in rows]
    return table(["model", "pull x TCP", "push x TCP", "pull", "push", "one TCP stream"], out), [source]


def aggregate():
    source, rows = bench_source("aggregate.json", "bazel run -c opt //bench:aggregate")
    out = [[r["pushes"], f"{r['megabytes']:.0f} MB", ms(r["server_seconds"]), ms(r["memcpy_seconds"]),
            f"{r['ratio']:.2f}x"] for r in rows]
    return table(["pushes", "gradient", "server", "memcpy of the same bytes", "memcpy x server"], out), [source]


def round_trip():
    source, rows = bench_source("round.json", "bazel run -c opt //bench:round")
    ms1 = lambda seconds: f"{1000 * seconds:.1f} ms"  # noqa: E731
    out = [[f"{r['megabytes']:.0f} MB", f"{r['one_way_latency_ms']:.0f} ms", ms1(r["push_then_pull_seconds"]),
            ms1(r["push_pull_seconds"]), ms1(r["pure_transfer_seconds"]), ms1(r["overhead_seconds"])] for r in rows]
    header = ["model", "one-way latency", "Push then Pull", "PushPull", "pure transfer", "PushPull's overhead"]
    return table(header, out), [source]


def scale():
    source, rows = bench_source("scale.json", "bazel run -c opt //bench:scale")
    by = {}
    for r in rows:
        by.setdefault(r["workers"], {})[r["mode"]] = r
    out = [[n] + sum(([f"{m[k]['rate_per_second']:.0f}", f"{m[k]['push_p50_ms']:.1f} / {m[k]['push_p99_ms']:.1f} ms",
                       m[k]["errors"]] for k in ("sync", "async")), []) for n, m in sorted(by.items())]
    header = ["workers", "sync rounds/s", "sync p50 / p99", "errors", "async pushes/s", "async p50 / p99", "errors"]
    return table(header, out), [source]


def shard_step():
    source, rows = bench_source("shard_step.json", "bazel run -c opt //bench:shard_step")
    out = [[f"{r['megabytes']:.1f} MB", r["members"], f"{r['summed_at_command_ms']:.1f} ms",
            f"{r['summed_on_arrival_ms']:.1f} ms", f"{r['ratio']:.2f}x"] for r in rows]
    header = ["slice", "members", "summed at the command", "summed as slices arrive", "ratio"]
    return table(header, out), [source]


def python_transfer():
    source, rows = bench_source("python_transfer.json", "/usr/bin/python3 bench/python_transfer.py")
    out = [[f"{r['megabytes']} MB", f"{r['push_ratio']:.2f}x", f"{r['pull_ratio']:.2f}x", f"{r['round_ratio']:.2f}x"]
           for r in rows]
    return table(["model", "push x C++", "pull x C++", "round x C++"], out), [source]


def overlap():
    source = Source("overlap.json", "/usr/bin/python3 bench/overlap.py", "2026-11-23")
    rows = [[r["rate"], r["mode"], ms(r["iteration_s"]), ms(r["exposed_s"]), f"{r['exposed_over_wire']:.2f}x"]
            for r in load(source.path)["results"]]
    return table(["links", "communication", "iteration", "exposed communication", "exposed x wire"], rows), [source]


def shards():
    source = Source("shards.json", "/usr/bin/python3 bench/shards.py", "2026-11-24")
    rows = [[r["shards"], f"{r['round_s']:.1f} s", f"{r['wire_round_s']:.1f} s", f"{r['speedup']:.2f}x"]
            for r in load(source.path)["results"]]
    return table(["servers", "round", "wire time of the round", "rounds/s x one server"], rows), [source]


def wire_dtype():
    source = Source("wire_dtype.json", "/usr/bin/python3 bench/wire_dtype.py --repeats=3 --accuracy_repeats=2",
                    "2026-11-23")
    data = load(source.path)
    f32 = statistics.mean(data["seconds_per_round"]["f32"])
    rows = [[dtype, ms(statistics.mean(s)), ratio(statistics.mean(s), f32),
             ", ".join(f"{a:.2f}%" for a in data["quickstart_accuracy"][dtype])]
            for dtype, s in data["seconds_per_round"].items()]
    return table(["--wire_dtype", "round", "x f32", "quickstart test accuracy"], rows), [source]


# ------------------------------------------------------------------ bench/heterogeneity.py

HET = Source("heterogeneity.json", "/usr/bin/python3 bench/heterogeneity.py --repeats 2", "2026-11-22")
HET_EMULATED = Source("heterogeneity_emulated.json", "/usr/bin/python3 bench/heterogeneity.py --emulated --repeats 3",
                      "2026-11-23")
HET_SLOWLINK = Source("heterogeneity_emulated_slowlink.json",
                      "/usr/bin/python3 bench/heterogeneity.py --emulated --levels=HL1,HL8+slow --repeats 3",
                      "2026-11-23")
HET_ABLATION = Source("heterogeneity_ablation.json", "/usr/bin/python3 bench/heterogeneity.py --ablation --repeats 2",
                      "2026-11-22")


def runs_by(results, *keys):
    out = {}
    for r in results:
        out.setdefault(tuple(r[k] if not isinstance(r[k], list) else " ".join(r[k]) for k in keys), []).append(r)
    return out


def mean(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.mean(values) if values else None


def paper_table(source, mode, policies):
    data = load(source.path)
    results = [r for r in data["results"] if r["mode"] == mode]
    by = runs_by(results, "schedule", "policy")
    rows = []
    for level in dict.fromkeys(r["schedule"] for r in results):
        off = mean(by[(level, "off")], "wall_seconds")
        for policy in policies:
            runs = by.get((level, policy))
            if not runs:
                continue
            wall, ttt = mean(runs, "wall_seconds"), mean(runs, "time_to_target")
            rows.append([level, policy, f"{wall:.1f} s", f"{off / wall:.2f}x",
                         f"{ttt:.1f} s" if ttt else "-", f"{100 * mean(runs, 'final_accuracy'):.2f}%"])
    header = ["level", "controller", "training time", "speed-up over equal batches",
              f"time to {100 * data['args']['target']:g}% accuracy", "final accuracy"]
    return table(header, rows), [source]


def ablation():
    results = load(HET_ABLATION.path)["results"]
    rows = [[mode, policy, f"`{flags}`", f"{mean(runs, 'wall_seconds'):.1f} s",
             f"{100 * mean(runs, 'final_accuracy'):.2f}%"]
            for (mode, policy, flags), runs in runs_by(results, "mode", "policy", "server_flags").items()]
    return table(["mode", "controller", "server flags", "training time", "final accuracy"], rows), [HET_ABLATION]


ASYNC_ADAM = Source("async_adam_rate.json", "bench/async_adam.py --seeds 1 2 3 4 5 6 --runs 2", "2026-11-28")


def async_adam():
    rows, syncs, asyncs = [], [], []
    for r in load(ASYNC_ADAM.path)["rows"]:
        sync, fast = statistics.mean(r["sync"]), statistics.mean(r["async_rate_1.25x"])
        syncs.append(sync)
        asyncs.append(fast)
        runs = ", ".join(f"{x:.4f}" for x in r["async_rate_1.25x"])
        rows.append([r["seed"], f"{sync:.4f}", runs, f"{fast - sync:+.4f}"])
    rows.append(["mean", f"{statistics.mean(syncs):.4f}", f"{statistics.mean(asyncs):.4f}",
                 f"{statistics.mean(asyncs) - statistics.mean(syncs):+.4f}"])
    return table(["seed", "sync", "async at 1.25x the sync rate", "async minus sync"], rows), [ASYNC_ADAM]


def gpu_mixed():
    data = load("gpu_mixed_job.json")
    source = Source("gpu_mixed_job.json", data["command"], data["date"], data["machine"])
    rows = [[r["job"], f"{r['wall_s']:.2f} s", ", ".join(f"{w} {b}" for w, b in r["batches"].items()),
             ", ".join(f"{w} {t:.2f} ms" for w, t in r["compute_ms"].items()), f"{100 * r['test_accuracy']:.2f}%"]
            for r in data["rows"]]
    return table(["job", "wall time", "final batches", "mean compute per step", "test accuracy"], rows), [source]


KERAS = Source("keras_workers.json", "bazel test //tests:keras_workers_test",
               load("keras_workers.json")["date"])


def percents(values):
    return ", ".join(f"{100 * v:.2f}%" for v in values)


def keras_workers():
    rows = [[r["run"], percents(r["accuracy"]), f"{r['samples']:,}" if "samples" in r else ""]
            for r in load(KERAS.path)["runs"]]
    return table(["run", "test accuracy (each run)", "samples, each once per epoch"], rows), [KERAS]


def keras_async_rate():
    rate = load(KERAS.path)["async_rate"]
    rows = [["single process", "", percents([rate["single_process"]])]]
    rows += [["async", f"{r['lr']:g}", percents(r["accuracy"])] for r in rate["rows"]]
    return table(["run", "lr", "test accuracy, one epoch"], rows), [Source(KERAS.path, rate["command"], rate["date"])]


def keras_step():
    step = load(KERAS.path)["step"]
    rows = [[r["model"], f"{r['compute_ms']:.1f} ms", f"{r['out_ms']:.1f} ms", f"{r['wire_ms']:.1f} ms",
             f"{r['in_ms']:.1f} ms", f"{100 * r['copies_share']:.1f}%"] for r in step["rows"]]
    header = ["model", "compute", "gradients out (copy)", "wire, server step included", "model in (assign)",
              "copies' share of the step"]
    return table(header, rows), [Source(KERAS.path, step["command"], step["date"])]


def test_tiers():
    data = load("test_tiers.json")
    source = Source("test_tiers.json", data["command"], data["date"], data["machine"])
    secs = lambda v: f"{v} s" if v is not None else "full tier only"  # noqa: E731
    rows = [[p["phase"], p["checks"], secs(p["gate_s"]), secs(p["full_s"])] for p in data["phases"]]
    total = lambda t: f"{t['seconds']} s: {t['passed']} passed, {t['failed']} failed"  # noqa: E731
    rows.append(["whole command, after apt", "", total(data["totals"]["gate"]), total(data["totals"]["full"])])
    rows.append(["the gate again, on the caches the full tier left", "", total(data["warm_gate"]), ""])
    return table(["phase", "what it checks", "gate", "full tier"], rows), [source]


def host_loss_table(name, date, lost):
    """bench/host_loss.py's runs: `lost` names what each loss took (the first column's header)."""
    data = load(name)
    ttl = f", election TTL {data['election_ttl_s']:g} s" if "election_ttl_s" in data else ""
    source = Source(name, data["command"], date, data["machine"] + ", fastbuild" + ttl)
    rows = []
    for r in data["runs"]:
        back = [x["training_s"] for x in r["losses"]]
        rows.append([
            "none" if r["every_s"] == 0 else f"every {r['every_s']:g} s", len(r["losses"]), f"{r['wall_s']} s",
            f"{100 * r['goodput']:.1f}%",
            f"{sum(back) / len(back):.2f} s / {max(back):.2f} s" if back else "",
            r["versions_redone_max"] if back else "", f"{r['versions']} / {r['samples']}",
            f"{100 * r['replica_share']:.2f}%", f"{100 * r['per_step_share']:.1f}%"])
    header = [lost, "losses", "job", "goodput", "back to training (mean / max)",
              "versions redone (max)", "versions / samples", "replicas' bytes", "the same at every step"]
    return table(header, rows), [source]


def host_loss():
    return host_loss_table("host_loss.json", "2026-12-07", "a shard host lost")


def host_loss_coordinator():
    return host_loss_table("host_loss_coordinator.json", "2026-12-08", "the coordinator's host lost")


def optimizer_mirror():
    data = load("optimizer_mirror.json")
    rows = [[r["framework"], r["case"].replace("_", " "), f"{r['worst']:.1e}", f"{r['tolerance']:.0e}"]
            for r in data["rows"]]
    header = ["framework", "optimizer (case)", "largest difference over 60 steps", "bound"]
    return table(header, rows), [Source("optimizer_mirror.json", data["command"], data["date"], data["machine"])]


# ------------------------------------------------------------------ README: how it compares

LAYER_BY_LAYER = "[layer by layer](docs/performance.md#beside-ddp-communication-overlapped-with-compute)"
WHOLE_STEPS = "[whole steps](docs/performance.md#beside-ddp-whole-gradient-steps)"
HOW_IT_SCALES = "[how it scales](docs/performance.md#how-it-scales)"


def compare():
    whole = groups(load(PEERS.path)["rows"])
    layers = {k: v for s in LAYERS for k, v in groups(load(s.path)["rows"]).items()}
    scaling = iterations(SCALING)

    def vs(group, peer="ddp"):
        return ratio(group["omnilearn-colocated"]["iteration_s"], group[peer]["iteration_s"]) if peer in group else "-"

    def row(case, group, link):
        return [case, vs(group), vs(group, "ddp-balanced"), link]
    rows = [
        row("equal devices (HL1), ResNet-18", layers[("resnet18", "HL1", 4)], LAYER_BY_LAYER),
        row("equal devices (HL1), GPT-style model", layers[("gpt2", "HL1", 4)], LAYER_BY_LAYER),
        row("HL4, ResNet-18", layers[("resnet18", "HL4", 4)], LAYER_BY_LAYER),
        row("HL8, ResNet-18", layers[("resnet18", "HL8", 4)], LAYER_BY_LAYER),
        row("HL8, 40 MB MLP", layers[("mlp40", "HL8", 4)], LAYER_BY_LAYER),
        row("whole-gradient steps, HL1, 4 MB MLP (DDP wins)", whole[("mlp4", "HL1", 4)], WHOLE_STEPS),
        row("a new level every 8 iterations, 4 MB MLP (balanced DDP wins)", whole[("mlp4", "dynamic", 4)],
            WHOLE_STEPS),
        ["16 equal workers on 50 Mbit/s links (DDP wins)", ratio(scaling[16][SERVERS], scaling[16][RING]), "-",
         HOW_IT_SCALES],
    ]
    header = ["case (1 Gbit/s links unless named)", "iteration x DDP", "x DDP with balanced batches",
              "figures and commands"]
    sources = [LAYERS[0], LAYERS[1], LAYERS[2], PEERS, SCALING]
    return table(header, rows), [Source(", ".join(s.path for s in sources), "bench/peers.py, bench/scaling.py",
                                        "2026-11-25 to 2026-12-03")]


# ------------------------------------------------------------------ flags from --helpfull

@functools.lru_cache(maxsize=None)
def parse_helpfull(binary):
    """[(source, flag, default, meaning)] of every flag a binary lists in --helpfull (absl's own
    too), the binary run once (tests/docs_test.py reads the names, the flag tables the rest)."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    flags = []
    for block in re.split(r"\n(?=  Flags from )", out.stdout + out.stderr):
        head = re.match(r"  Flags from (\S+):", block)
        if not head:
            continue
        for entry in re.split(r"\n(?=    --)", block)[1:]:
            entry = entry.split("\n\n")[0]  # the last one is followed by absl's "Try --helpfull" lines
            m = re.fullmatch(r"--(\w+) \((.*)\); default: (.*?);", " ".join(entry.split()))
            if m:
                flags.append((head.group(1).lstrip("./"), m.group(1), m.group(3), m.group(2)))
    if not flags:
        raise SystemExit(f"{binary} --helpfull listed no flags")
    return flags


def helpfull_flags(binary, own=("controller/", "server/", "worker/", "tools/", "common/")):
    """[(flag, default, meaning)] of the flags a binary's own sources define."""
    flags = [(flag, default, meaning.replace("|", "\\|"))
             for source, flag, default, meaning in parse_helpfull(binary) if source.startswith(own)]
    if not flags:
        raise SystemExit(f"{binary} --helpfull listed no flags of OmniLearn's")
    return sorted(flags)


def flags_table(binary, name):
    rows = [[f"`--{f}`", f"`{d}`" if d else "", meaning] for f, d, meaning in helpfull_flags(binary)]
    return table(["flag", "default", "meaning"], rows), [Source("", f"{name} --helpfull", "the build")]


# ------------------------------------------------------------------ pages

TABLES = {
    "compare": compare, "peers_whole": peers_whole, "peers_layers": peers_layers, "peers_fat": peers_fat,
    "scaling_measured": scaling_measured, "scaling_predicted": scaling_predicted, "transfer": transfer,
    "aggregate": aggregate, "round": round_trip, "scale": scale, "shard_step": shard_step,
    "python_transfer": python_transfer, "overlap": overlap, "shards": shards, "wire_dtype": wire_dtype,
    "paper_sync": lambda: paper_table(HET, "sync", ("off", "paper", "omnilearn")),
    "paper_async": lambda: paper_table(HET, "async", ("off", "paper", "omnilearn")),
    "emulated_sync": lambda: paper_table(HET_EMULATED, "sync", ("off", "paper", "omnilearn")),
    "emulated_async": lambda: paper_table(HET_EMULATED, "async", ("off", "paper", "omnilearn", "plain", "plain+ours")),
    "slowlink_sync": lambda: paper_table(HET_SLOWLINK, "sync", ("off", "omnilearn", "omnilearn/compute")),
    "slowlink_async": lambda: paper_table(HET_SLOWLINK, "async", ("off", "omnilearn", "omnilearn/compute")),
    "ablation": ablation, "async_adam": async_adam, "gpu_mixed": gpu_mixed,
    "keras_workers": keras_workers, "keras_async_rate": keras_async_rate, "keras_step": keras_step,
    "test_tiers": test_tiers, "optimizer_mirror": optimizer_mirror, "local_peers": local_peers,
    "local_predicted": local_predicted, "local_by_h": local_by_h,
    "host_loss": host_loss,
    "host_loss_coordinator": host_loss_coordinator,
}
FLAG_TABLES = ("server_flags", "worker_flags", "ctl_flags")


def render(name, binaries):
    """A generated block's text, made once per run (the rules read every table, then compare it)."""
    return _render(name, tuple(binaries))


@functools.lru_cache(maxsize=None)
def _render(name, binaries):
    if name in FLAG_TABLES:
        index = FLAG_TABLES.index(name)
        text, sources = flags_table(binaries[index], ("omnilearn_server", "omnilearn_worker", "omnilearn_ctl")[index])
        return f"{text}\n\nMade from `{sources[0].command}`.\n"
    if name not in TABLES:
        raise KeyError(f"no table named {name}")
    text, sources = TABLES[name]()
    return f"{text}\n\n{caption(sources)}\n"


def pages(root=ROOT):
    out = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    return out + ["CHANGELOG.md", "deploy/README.md"]


def regenerate(text, binaries, problems, page):
    def one(m):
        try:
            return m.group(1) + render(m.group(2), binaries) + m.group(4)
        except (KeyError, OSError, ValueError) as e:
            problems.append(f"{page}: table {m.group(2)}: {e}")
            return m.group(0)
    return BLOCK_RE.sub(one, text)


# ------------------------------------------------------------------ the rules

NUMBER = r"\d+(?:\.\d+)?"
FIGURE_RE = re.compile(
    rf"(?<![\w.=/-])({NUMBER}(?:(?:-|–| to ){NUMBER})?)"
    r"(?:(x)\b|(%)|\s?(ms|s|GB/s|MB/s|Mbit/s)\b)")
DATE_RE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
HASH_RE = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/-])")
ISSUE_RE = re.compile(r"\b[Ii]ssues? #?\d+|(?<![\w&/])#\d+\b")


def prose_lines(text):
    """(line number, line) outside fenced code and generated tables, inline code removed."""
    fenced, generated = False, False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
            continue
        if line.startswith("<!-- table: "):
            generated = True
        if line.startswith("<!-- /table -->"):
            generated = False
            continue
        if not fenced and not generated:
            yield n, re.sub(r"`[^`\n]*`", "``", line)


def cells_numbers(tables):
    numbers = set()
    for text in tables:
        for line in text.split("\n"):
            if line.startswith("|"):
                numbers |= set(re.findall(NUMBER, re.sub(r"`[^`]*`", "", line)))
    return numbers


def figures_of(line):
    """The numbers of the figures a line of prose or of a hand-written table gives (a range gives
    both ends)."""
    out = []
    for m in FIGURE_RE.finditer(line):
        ends = re.findall(NUMBER, m.group(1))
        decimal = any("." in e for e in ends)
        if m.group(2) and decimal or m.group(3) or m.group(4) and decimal:
            out += ends
    return out


def check_figures(page, text, numbers, problems):
    for n, line in prose_lines(text):
        for figure in figures_of(line):
            if figure not in numbers:
                problems.append(f"{page}:{n}: the figure {figure} is in no generated table")


def check_bounds(page, text, problems):
    limit = PAGE_LIMITS.get(page, DOCS_LIMIT)
    lines = text.count("\n")
    if lines > limit:
        problems.append(f"{page}: {lines} lines, more than {limit}")


def check_history(page, text, problems):
    for n, line in prose_lines(text):
        for regex, what in ((DATE_RE, "a date"), (HASH_RE, "a commit hash"), (ISSUE_RE, "an issue number")):
            m = regex.search(line)
            if m and not (page == "CHANGELOG.md" and regex is DATE_RE and line.startswith("## ")):
                problems.append(f"{page}:{n}: {what} ({m.group(0)}): history belongs in git and CHANGELOG.md")


def check_fragments(page, text, problems):
    """A paragraph that begins with a lowercase word or a comma begins mid-sentence."""
    previous = ""
    for n, line in prose_lines(text):
        starts = previous.strip() == "" or previous.startswith("#")
        if starts and re.match(r"[a-z,;:)]", line):
            problems.append(f"{page}:{n}: a paragraph starts mid-sentence: {line[:60]!r}")
        previous = line


REFERENCE_RE = re.compile(r'(docs/\w+\.md)`?\)?,? "([^"]+)"|\]\((docs/\w+\.md)#([\w-]+)\)')


def headings(text):
    return [line.lstrip("#").strip() for line in text.split("\n") if line.startswith("#")]


def anchor(heading):
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def check_references(page, text, texts, problems):
    """A section named by another page's reference (`docs/x.md, "Heading"` or a link to
    `docs/x.md#anchor`) exists there: a section moved or renamed leaves no reference behind."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        fenced ^= line.startswith("```")
        for m in [] if fenced else REFERENCE_RE.finditer(line):
            target = m.group(1) or m.group(3)
            if target not in texts:
                problems.append(f"{page}:{n}: {target} is no page")
                continue
            names = headings(texts[target])
            if m.group(2) and not any(h.startswith(m.group(2)) for h in names):
                problems.append(f"{page}:{n}: {target} has no section \"{m.group(2)}\"")
            if m.group(4) and m.group(4) not in map(anchor, names):
                problems.append(f"{page}:{n}: {target} has no section #{m.group(4)}")


def check_page(page, text, binaries, numbers, problems):
    made = regenerate(text, binaries, problems, page)
    if made != text:
        problems.append(f"{page}: a generated table differs from its source: run tools/docs_gen.py --write")
    check_figures(page, text, numbers, problems)
    check_bounds(page, text, problems)
    check_history(page, text, problems)
    check_fragments(page, text, problems)


def read(page, root=ROOT):
    with open(os.path.join(root, page)) as f:
        return f.read()


def check(binaries, root=ROOT):
    """The problems of every page: [] when the docs keep every rule."""
    problems = []
    texts = {page: read(page, root) for page in pages(root)}
    generated = [render(m.group(2), binaries) for t in texts.values() for m in BLOCK_RE.finditer(t)
                 if m.group(2) not in FLAG_TABLES]
    numbers = cells_numbers(generated)
    for page, text in texts.items():
        check_page(page, text, binaries, numbers, problems)
        check_references(page, text, texts, problems)
    return problems


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("--write", "--check"):
        raise SystemExit(__doc__)
    binaries = sys.argv[2:5]
    if sys.argv[1] == "--write":
        problems = []
        for page in pages():
            text = read(page)
            made = regenerate(text, binaries, problems, page)
            if made != text:
                with open(os.path.join(ROOT, page), "w") as f:
                    f.write(made)
                print(f"wrote {page}")
        problems += check(binaries)
    else:
        problems = check(binaries)
    for problem in problems:
        print(problem)
    print(f"docs_gen: {len(pages())} pages, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
