#!/usr/bin/python3
"""scaling: iteration time against the number of workers, for a ring all-reduce (PyTorch DDP's
gloo all_reduce) and for servers on the worker hosts (omnilearn-colocated), measured with
bench/peers.py on the emulated cluster and fitted by bench/link_model.py, which then predicts
them to --predict_to workers and says where the two cross, when the points it was not given
confirm it.

Weak scaling on equal devices (HL1): 32 samples per worker, the balanced compute of an
iteration fixed per model (--compute_ratio x the ring's wire time at 4 workers), gradients
sent whole after the step (--timing=step). The links are slowed (--link) so that N workers
and N servers on this machine's cores stay bound by their links, not by the CPU; each
point's CPU share and emulation overruns are printed beside it, so a point the machine
bounds is seen as such. The largest worker count (--hold_out) is left out of the fit and
predicted, which is the model's check.

    bazel build -c opt //server:omnilearn_server //python:omnilearn
    /usr/bin/python3 bench/scaling.py                       measure, fit, predict (docs/performance.md)
    /usr/bin/python3 bench/scaling.py --report_only          fit the runs already made again
    /usr/bin/python3 bench/scaling.py --workers=16 --models=mlp40    one point again (its directory
                                                             is replaced), then --report_only
Each run's table and logs stay in bench/results/scaling-runs/MODEL-N/; writes
bench/results/scaling.json, scaling.md and scaling.png. Needs root (network namespaces).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import link_model  # noqa: E402
from heterogeneity import rate_bytes  # noqa: E402
from peers import JITTER  # noqa: E402  (the emulated devices' jitter)

RING, SERVERS = "ddp", "omnilearn-colocated"


def run_dir(args, model, n):
    return os.path.join(args.out, "scaling-runs", f"{model}-{n}")


def measure(args):
    """One bench/peers.py run per (workers, model), in a directory of its own (an earlier
    one's removed first); a run that fails keeps the rows it finished (peers.py writes each
    as it comes) and is reported."""
    import peers
    for n in args.workers:
        for model in args.models:
            compute_s = args.compute_ratio * link_model.wire_seconds(4, peers.model_bytes(model),
                                                                     rate_bytes(args.link))
            out = run_dir(args, model, n)
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, os.path.join(ROOT, "bench", "peers.py"), f"--workers={n}", f"--models={model}",
                   "--levels=HL1", f"--systems={RING},{SERVERS}", f"--link={args.link}",
                   f"--iterations={args.iterations}", f"--skip={args.skip}", f"--compute_s={compute_s}",
                   f"--timeout={args.timeout}", f"--bin_dir={args.bin_dir}", f"--out={out}"]
            print("+", " ".join(cmd[1:]), flush=True)
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
            if rc != 0:
                print(f"  failed (exit {rc}): the systems it finished are kept; the logs are in {out}/peers-logs",
                      flush=True)


def collect(args):
    """The points of every (workers, model) run directory there is (each with the link, model
    size and compute its run had), and the systems missing."""
    points, missing = [], []
    for n in args.workers:
        for model in args.models:
            path = os.path.join(run_dir(args, model, n), "peers.json")
            doc = json.load(open(path)) if os.path.exists(path) else {"rows": []}
            for system in (RING, SERVERS):
                row = next((r for r in doc["rows"] if r["system"] == system), None)
                if row is None:
                    missing.append(f"{model} {system} at {n} workers")
                    continue
                points.append({"workers": n, "model": model, "system": system, "model_bytes": row["model_bytes"],
                               "rate": rate_bytes(doc["link"]), "compute_s": row["compute_s"],
                               "iteration_s": row["iteration_s"], "comm_s": row["comm_s"],
                               "cpu_busy": row["cpu_busy"], "overruns": row["overruns"]})
    with open(os.path.join(args.out, "scaling.json"), "w") as f:
        json.dump({"link": args.link, "compute_ratio": args.compute_ratio, "iterations": args.iterations,
                   "skip": args.skip, "points": points, "missing": missing}, f, indent=1)
    return points, missing


def fits(points, hold_out):
    """Per system: the fit without the held-out worker count (the check) and with every point."""
    out = {}
    for system in (RING, SERVERS):
        mine = [p for p in points if p["system"] == system]
        out[system] = {"check": link_model.fit([p for p in mine if p["workers"] != hold_out], JITTER),
                       "all": link_model.fit(mine, JITTER)}
    return out


def models_by_size(points):
    return sorted({p["model"] for p in points}, key=lambda m: next(p["model_bytes"] for p in points
                                                                    if p["model"] == m))


def measured_table(points, params, hold_out):
    lines = ["| model | workers | system | measured | predicted (fit without the held-out point) | error | "
             "communication | CPU of the machine | overruns |", "|---" * 9 + "|"]
    for p in sorted(points, key=lambda p: (p["model_bytes"], p["workers"], p["system"])):
        guess = link_model.predict(params[p["system"]]["check"], p["workers"], p["model_bytes"], p["rate"],
                                   p["compute_s"], JITTER)
        held = " (held out)" if p["workers"] == hold_out else ""
        lines.append(f"| {p['model']} | {p['workers']} | {p['system']} | {1000 * p['iteration_s']:.0f} ms | "
                     f"{1000 * guess:.0f} ms{held} | {100 * (guess / p['iteration_s'] - 1):+.1f}% | "
                     f"{1000 * (p['comm_s'] or 0):.0f} ms | {100 * p['cpu_busy']:.0f}% | {p['overruns']} |")
    return "\n".join(lines)


def prediction_table(points, params, predict_to):
    counts = [2 ** i for i in range(1, predict_to.bit_length()) if 2 ** i <= predict_to]
    lines = ["| model | " + " | ".join(f"{n}" for n in counts) + " | servers no slower from |",
             "|---" * (len(counts) + 2) + "|"]
    for model in models_by_size(points):
        p = next(p for p in points if p["model"] == model)
        at = lambda system, n: link_model.predict(params[system]["all"], n, p["model_bytes"], p["rate"],  # noqa
                                                  p["compute_s"], JITTER)
        cross = link_model.crossing(params[RING]["all"], params[SERVERS]["all"], p["model_bytes"], p["rate"],
                                    p["compute_s"], JITTER, range(2, predict_to + 1))
        cells = [f"{1000 * at(RING, n):.0f} / {1000 * at(SERVERS, n):.0f} ({at(SERVERS, n) / at(RING, n):.2f})"
                 for n in counts]
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {cross if cross else 'never, to ' + str(predict_to)} |")
    return "\n".join(lines)


def params_text(params):
    return "\n".join(f"- {system}: k = {f['all']['k']:.3f}, a = {1000 * f['all']['a']:.2f} ms per peer, "
                     f"o = {f['all']['o']:.3f} (without the held-out point: k = {f['check']['k']:.3f}, "
                     f"a = {1000 * f['check']['a']:.2f} ms, o = {f['check']['o']:.3f})"
                     for system, f in params.items())


def plot(points, params, predict_to, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = models_by_size(points)
    fig, axes = plt.subplots(1, len(models), figsize=(6 * len(models), 4.5), squeeze=False)
    ns = list(range(2, predict_to + 1))
    for ax, model in zip(axes[0], models):
        mine = [p for p in points if p["model"] == model]
        ref = mine[0]
        for system, color in ((RING, "tab:blue"), (SERVERS, "tab:orange")):
            xs = sorted(p["workers"] for p in mine if p["system"] == system)
            ys = [next(p["iteration_s"] for p in mine if p["system"] == system and p["workers"] == n) for n in xs]
            ax.plot(xs, ys, "o-", color=color, label=f"{system}, measured")
            if params is None:  # the model is not validated by these points: none drawn
                continue
            ax.plot(ns, [link_model.predict(params[system]["all"], n, ref["model_bytes"], ref["rate"],
                                            ref["compute_s"], JITTER) for n in ns], "-", color=color,
                    label=f"{system}, model")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.set_ylabel("iteration (s)")
        ax.set_title(f"{model}, HL1, {ref['rate'] * 8 / 1e6:.0f} Mbit/s links")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def check_error(points, params, hold_out):
    """The largest relative miss of the fit without `hold_out` on the points of `hold_out`."""
    held = [p for p in points if p["workers"] == hold_out]
    return max((abs(link_model.predict(params[p["system"]]["check"], p["workers"], p["model_bytes"], p["rate"],
                                       p["compute_s"], JITTER) / p["iteration_s"] - 1) for p in held), default=None)


def report(args, points, missing):
    params = fits(points, args.hold_out)
    gaps = "Not measured (the run failed; its logs say why): " + "; ".join(missing) if missing else ""
    miss = check_error(points, params, args.hold_out)
    validated = miss is not None and miss <= args.tolerance
    if validated:
        prediction = (f"The fit predicts the held-out {args.hold_out} workers within {100 * miss:.1f}%. "
                      "Predicted iteration, ring / servers (ratio), ms:\n\n" +
                      prediction_table(points, params, args.predict_to))
    else:
        prediction = (f"No prediction: the fit without {args.hold_out} workers misses them by up to "
                      f"{100 * (miss or 0):.0f}% (more than --tolerance {100 * args.tolerance:.0f}%, or none "
                      "measured): the model is not validated by these points.")
    text = "\n\n".join(part for part in [
        measured_table(points, params, args.hold_out), gaps, params_text(params), prediction] if part)
    with open(os.path.join(args.out, "scaling.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    plot(points, params if validated else None, args.predict_to, os.path.join(args.out, "scaling.png"))
    print(f"results: {args.out}/scaling.json, scaling.md, scaling.png")


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="2,4,8,16")
    ap.add_argument("--models", default="mlp4,mlp40")
    ap.add_argument("--link", default="200mbit", help="every host's link (slow: the machine's cores stay out)")
    ap.add_argument("--compute_ratio", type=float, default=1.0,
                    help="an iteration's balanced compute over the ring's wire time at 4 workers")
    ap.add_argument("--iterations", type=int, default=16)
    ap.add_argument("--skip", type=int, default=6)
    ap.add_argument("--hold_out", type=int, help="the worker count left out of the fit (default: the largest)")
    ap.add_argument("--predict_to", type=int, default=256)
    ap.add_argument("--tolerance", type=float, default=0.1,
                    help="the largest miss on the held-out points for which the model's prediction is given")
    ap.add_argument("--report_only", action="store_true", help="fit and report the runs already in --out")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one system's run may take")
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "bazel-bin"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    args.workers = sorted(int(n) for n in args.workers.split(","))
    args.models = args.models.split(",")
    if args.hold_out is None:
        args.hold_out = args.workers[-1]
    return args


def main():
    args = parse()
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        measure(args)
    try:
        report(args, *collect(args))
    except ValueError as e:  # too few points to fit
        sys.exit(f"scaling: {e}; the runs are kept: add more worker counts, or --report_only over all of them")


if __name__ == "__main__":
    sys.exit(main())
