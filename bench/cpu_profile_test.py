"""Tests of bench/cpu_profile.py: threads' schedstat read, summed per process (an exited thread's
last values kept), interpolated at a window's ends, and a real process's CPU time seen."""

import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_profile  # noqa: E402


class FakeProc:
    """A /proc of schedstat files only: set(pid, tid, cpu_ms, wait_ms), drop(pid, tid)."""

    def __init__(self):
        self.root = tempfile.mkdtemp()

    def set(self, pid, tid, cpu_ms, wait_ms):
        d = os.path.join(self.root, str(pid), "task", str(tid))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "schedstat"), "w") as f:
            f.write(f"{int(cpu_ms * 1e6)} {int(wait_ms * 1e6)} 7\n")

    def drop(self, pid, tid):
        shutil.rmtree(os.path.join(self.root, str(pid), "task", str(tid)))

    def close(self):
        shutil.rmtree(self.root)


class CpuProfileTest(unittest.TestCase):
    def setUp(self):
        self.proc = FakeProc()
        self.now = 0.0

    def tearDown(self):
        self.proc.close()

    def sampler(self, roles):
        return cpu_profile.Sampler(roles, proc=self.proc.root, clock=lambda: self.now)

    def test_reads_every_thread_and_nothing_of_a_process_gone(self):
        self.proc.set(10, 10, 30, 5)
        self.proc.set(10, 11, 2, 1)
        self.assertEqual(cpu_profile.read_threads(10, self.proc.root), {10: (0.03, 0.005), 11: (0.002, 0.001)})
        self.assertEqual(cpu_profile.read_threads(99, self.proc.root), {})

    def test_an_exited_thread_keeps_its_last_values(self):
        s = self.sampler({"server": [10]})
        self.proc.set(10, 10, 100, 10)
        self.proc.set(10, 11, 50, 20)
        s.sample()
        self.proc.drop(10, 11)
        self.proc.set(10, 10, 300, 30)
        self.now = 1.0
        s.sample()
        self.assertEqual(s.samples[-1][1][10], (0.35, 0.05))

    def test_window_interpolates_per_iteration_per_role(self):
        s = self.sampler({"worker": [1, 2], "server": [3]})
        for t, k in ((0.0, 0), (1.0, 1), (2.0, 2)):
            self.now = t
            self.proc.set(1, 1, 400 * k, 100 * k)   # per second: 400 ms on a core, 100 ms waiting
            self.proc.set(2, 2, 200 * k, 300 * k)
            self.proc.set(3, 3, 50 * k, 0)
            s.sample()
        p = s.window(0.5, 1.5, iterations=2)     # one second, two iterations
        self.assertAlmostEqual(p["worker"]["cpu_ms"], 150)   # (400 + 200) / 2 processes / 2 iterations
        self.assertAlmostEqual(p["worker"]["wait_ms"], 100)  # (100 + 300) / 2 / 2
        self.assertAlmostEqual(p["worker"]["max_wait_ms"], 150)
        self.assertAlmostEqual(p["server"]["cpu_ms"], 25)
        self.assertEqual(p["server"]["processes"], 1)
        self.assertIn("workers 150 ms on a core, 100 ms waiting for one (most 150)", cpu_profile.describe(p))
        # Outside the samples: the first or last sample.
        self.assertAlmostEqual(s.window(-5, 9, iterations=1)["server"]["cpu_ms"], 100)

    def test_a_busy_thread_of_this_process_is_seen(self):
        stop = threading.Event()

        def busy():
            while not stop.is_set():
                pass

        spin = threading.Thread(target=busy)
        s = cpu_profile.Sampler({"me": [os.getpid()]}, interval_s=0.05)
        s.start()
        t0 = time.perf_counter()
        spin.start()
        deadline = time.monotonic() + 30
        while s.samples[-1][1][os.getpid()][0] - s.samples[0][1][os.getpid()][0] < 0.1:
            self.assertLess(time.monotonic(), deadline, "no CPU time seen")
            time.sleep(0.05)
        stop.set()
        spin.join()
        s.stop()
        self.assertGreater(s.window(t0, time.perf_counter(), iterations=1)["me"]["cpu_ms"], 50)


if __name__ == "__main__":
    unittest.main()
