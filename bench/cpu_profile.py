"""cpu_profile: what a benchmark run's processes used of the machine's cores, and how long their
threads waited for one. The kernel keeps, per thread, its time on a CPU and its time runnable but
waiting on a run queue (/proc/PID/task/TID/schedstat, in ns); a Sampler thread reads every
thread of the processes it is given every `interval_s`, and a thread that exits keeps its last
sampled values (what it did after that sample is lost). window() gives each role's processes'
time per iteration between two instants of the run, on the clock the workers stamp their
iterations with (CLOCK_MONOTONIC: time.perf_counter on Linux, any network namespace).

Where the processes wait for a core, the machine adds that wait to the figure; where they do not,
the cores did not bound it."""

import os
import statistics
import threading
import time

from counters import value_at


def read_threads(pid, proc="/proc"):
    """{tid: (cpu_s, wait_s)} of the process's live threads ({} once it has gone)."""
    base = os.path.join(proc, str(pid), "task")
    try:
        tids = os.listdir(base)
    except OSError:
        return {}
    out = {}
    for tid in tids:
        try:
            with open(os.path.join(base, tid, "schedstat")) as f:
                cpu, wait = f.read().split()[:2]
        except (OSError, ValueError):
            continue  # the thread exited between the listing and the read
        out[int(tid)] = (int(cpu) / 1e9, int(wait) / 1e9)
    return out


class Sampler:
    """Samples the threads of `roles` ({role: [pid, ...]}) until stop()."""

    def __init__(self, roles, interval_s=0.5, proc="/proc", clock=time.perf_counter):
        self.roles = {role: list(pids) for role, pids in roles.items()}
        self._interval, self._proc, self._clock = interval_s, proc, clock
        self._last = {}      # (pid, tid) -> (cpu_s, wait_s), the last values read
        self.samples = []    # (t, {pid: (cpu_s, wait_s)}), every thread seen so far summed
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self):
        t = self._clock()
        pids = [pid for pids in self.roles.values() for pid in pids]
        for pid in pids:
            for tid, values in read_threads(pid, self._proc).items():
                self._last[(pid, tid)] = values
        totals = {pid: (0.0, 0.0) for pid in pids}
        for (pid, _), (cpu, wait) in self._last.items():
            totals[pid] = (totals[pid][0] + cpu, totals[pid][1] + wait)
        self.samples.append((t, totals))

    def _run(self):
        while not self._stop.wait(self._interval):
            self.sample()

    def start(self):
        self.sample()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.sample()

    def at(self, t, pid):
        """The pid's (cpu_s, wait_s) so far at time t (counters.value_at)."""
        return value_at([(s, totals[pid]) for s, totals in self.samples], t)

    def window(self, t0, t1, iterations):
        """Per role, over [t0, t1] holding `iterations` iterations: the mean over its processes of
        their CPU time and run-queue wait per iteration (ms), and the largest process's wait."""
        out = {}
        for role, pids in self.roles.items():
            if not pids:
                continue
            per = [tuple(1000 * (b - a) / iterations for a, b in zip(self.at(t0, pid), self.at(t1, pid)))
                   for pid in pids]
            out[role] = {"processes": len(pids), "cpu_ms": statistics.mean(p[0] for p in per),
                         "wait_ms": statistics.mean(p[1] for p in per), "max_wait_ms": max(p[1] for p in per)}
        return out


def describe(profile):
    """One line: each role's CPU time and run-queue wait per iteration."""
    return "; ".join(f"{role}s {p['cpu_ms']:.0f} ms on a core, {p['wait_ms']:.0f} ms waiting for one "
                     f"(most {p['max_wait_ms']:.0f})" for role, p in profile.items()) + " per iteration"
