"""Draws bench/results/scale.json as scale.png beside it: rate and push latency (p50,
p99) against the number of workers, sync and async. Uses Debian's python3-matplotlib.

    /usr/bin/python3 bench/plot_scale.py [bench/results/scale.json]
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(path):
    doc = json.load(open(path))
    fig, (rate_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, color in (("sync", "tab:blue"), ("async", "tab:orange")):
        rows = sorted((r for r in doc["rows"] if r["mode"] == mode), key=lambda r: r["workers"])
        if not rows:
            continue
        n = [r["workers"] for r in rows]
        unit = rows[0]["unit"]
        rate_ax.plot(n, [r["rate_per_second"] for r in rows], "o-", color=color, label=f"{mode} ({unit}/s)")
        lat_ax.plot(n, [r["push_p50_ms"] for r in rows], "o-", color=color, label=f"{mode} p50")
        lat_ax.plot(n, [r["push_p99_ms"] for r in rows], "s--", color=color, label=f"{mode} p99")
    for ax in (rate_ax, lat_ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("workers")
        ax.grid(True, alpha=0.3)
        ax.legend()
    rate_ax.set_ylabel("rounds or pushes per second")
    lat_ax.set_ylabel("push latency (ms)")
    lat_ax.set_yscale("log")
    fig.suptitle(f"scale: 1 MB model, zero compute ({doc.get('machine', '')})")
    fig.tight_layout()
    out = os.path.splitext(path)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/scale.json")
