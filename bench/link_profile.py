#!/usr/bin/python3
"""link_profile: how busy the emulated cluster's links were during a run. Every host's link is a
port of the cluster's bridge (tests/cluster.sh: port pI toward host I, in the order the hosts
were made); the port's transmitted bytes are what reached the host (its downlink), its received
bytes what the host sent (its uplink, after the host's own cap). A sampler runs inside the
bridge's namespace (where the ports' counters are), reads every port's two counters every
`interval_s` on the workers' clock (CLOCK_MONOTONIC) and hands the series over when stopped.

window() gives, per host and direction, the bytes over an interval of the run, the share of the
interval the link's rate needed for them (busy), and the share of the samples in which the link
ran at 90% of its rate or more (full): a link busy 60% and full 55% of the time carried its bytes
at the rate and idled otherwise; busy 60% and full 10%, it trickled."""

import json
import os
import subprocess
import sys
import threading
import time

from counters import value_at

FULL = 0.9  # a sample in which the link moved at least this share of its rate counts as full


def sample(ports, interval_s, limit_s, sysfs="/sys/class/net", clock=time.perf_counter, out=sys.stdout,
           stop=None):
    """Inside the bridge's namespace: rows of [t, tx0, rx0, tx1, rx1, ...] until stdin closes
    (or `stop` is set), `limit_s` at most, then written to `out` as JSON."""
    if stop is None:
        stop = threading.Event()
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    files = [open(os.path.join(sysfs, p, "statistics", f"{d}_bytes")) for p in ports for d in ("tx", "rx")]
    rows = []
    end = clock() + limit_s
    try:
        while not stop.is_set() and clock() < end:
            row = [clock()]
            for f in files:
                f.seek(0)
                row.append(int(f.read()))
            rows.append(row)
            stop.wait(interval_s)
    finally:
        for f in files:
            f.close()
    json.dump(rows, out)
    out.flush()


def series(rows):
    """The rows as counters.value_at takes them: (t, (tx0, rx0, tx1, rx1, ...)); the column of
    host i's downlink is 2i, its uplink's 2i + 1."""
    return [(row[0], tuple(row[1:])) for row in rows]


def window(rows, hosts, rates, t0, t1):
    """{host: {"down"/"up": {"mb", "busy", "full"}}} over [t0, t1] (seconds on the rows' clock);
    `hosts` in port order, `rates` in bytes per second per host."""
    out = {}
    inside = [r for r in rows if t0 <= r[0] <= t1]
    counters = series(rows)
    first, last = value_at(counters, t0), value_at(counters, t1)
    for i, host in enumerate(hosts):
        out[host] = {}
        for k, direction in enumerate(("down", "up")):
            column = 1 + 2 * i + k  # in rows; in counters, column - 1
            moved = last[column - 1] - first[column - 1]
            steps = [(b[column] - a[column]) / (b[0] - a[0]) for a, b in zip(inside, inside[1:]) if b[0] > a[0]]
            out[host][direction] = {"mb": moved / 1e6, "busy": moved / (rates[i] * (t1 - t0)),
                                    "full": sum(s >= FULL * rates[i] for s in steps) / len(steps) if steps else 0.0}
    return out


def by_phase(rows, hosts, rates, starts, bins=10):
    """{"down"/"up": [busy share per bin]}: each iteration [starts[k], starts[k + 1]] cut into
    `bins` equal parts, the links of `hosts` (indices into the ports, rates per port) averaged
    over the hosts and the iterations: where in an iteration the links carry bytes."""
    counters = series(rows)
    shares = {"down": [0.0] * bins, "up": [0.0] * bins}
    for a, b in zip(starts, starts[1:]):
        for j in range(bins):
            t0, t1 = a + (b - a) * j / bins, a + (b - a) * (j + 1) / bins
            first, last = value_at(counters, t0), value_at(counters, t1)
            for k, direction in enumerate(("down", "up")):
                shares[direction][j] += sum((last[2 * i + k] - first[2 * i + k]) / (rates[i] * (t1 - t0))
                                            for i in hosts) / len(hosts)
    return {direction: [s / (len(starts) - 1) for s in bins_] for direction, bins_ in shares.items()}


def describe(links, hosts):
    """One line: the hosts' mean busy and full shares, per direction."""
    def mean(direction, key):
        return 100 * sum(links[h][direction][key] for h in hosts) / len(hosts)
    return (f"links of {', '.join(hosts)}: down {mean('down', 'busy'):.0f}% busy, {mean('down', 'full'):.0f}% of the "
            f"time full; up {mean('up', 'busy'):.0f}% busy, {mean('up', 'full'):.0f}% full")


class Sampler:
    """The sampler process inside the cluster's bridge namespace, for `hosts` (every host of
    the cluster, in the order it was made) and their links' `rates` (bytes per second)."""

    def __init__(self, namespace, hosts, rates, interval_s=0.01, limit_s=3600):
        ports = [f"p{i + 1}" for i in range(len(hosts))]
        self.hosts, self.rates = list(hosts), list(rates)
        self.rows = None
        self._proc = subprocess.Popen(
            ["ip", "netns", "exec", namespace, sys.executable, os.path.abspath(__file__), "--interval_s",
             str(interval_s), "--limit_s", str(limit_s), *ports],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def stop(self):
        """The series (closing the sampler's stdin ends it); an error when it failed."""
        if self.rows is None:
            try:
                out, _ = self._proc.communicate(input="", timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                raise RuntimeError("link_profile: the sampler did not stop within 60 s") from None
            if self._proc.returncode != 0:
                raise RuntimeError(f"link_profile: the sampler failed ({self._proc.returncode})")
            self.rows = json.loads(out)
        return self.rows

    def window(self, t0, t1):
        """window() of the series (the sampler stopped)."""
        return window(self.stop(), self.hosts, self.rates, t0, t1)

    def by_phase(self, starts, hosts):
        """by_phase() of the series for the named hosts."""
        return by_phase(self.stop(), [self.hosts.index(h) for h in hosts], self.rates, starts)


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval_s", type=float, default=0.01)
    ap.add_argument("--limit_s", type=float, default=3600)
    ap.add_argument("ports", nargs="+")
    args = ap.parse_args()
    sample(args.ports, args.interval_s, args.limit_s)


if __name__ == "__main__":
    main()
