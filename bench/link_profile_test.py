"""Tests of bench/link_profile.py: a port's counters sampled until stopped, and a window's bytes,
busy and full shares per host and direction."""

import io
import json
import os
import shutil
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import link_profile  # noqa: E402


class LinkProfileTest(unittest.TestCase):
    def test_samples_every_port_until_stopped(self):
        root = tempfile.mkdtemp()
        try:
            for port, tx, rx in (("p1", 100, 7), ("p2", 5, 9)):
                os.makedirs(os.path.join(root, port, "statistics"))
                for d, v in (("tx", tx), ("rx", rx)):
                    with open(os.path.join(root, port, "statistics", f"{d}_bytes"), "w") as f:
                        f.write(f"{v}\n")
            stop, now, out = threading.Event(), [0.0], io.StringIO()

            def clock():
                now[0] += 1.0
                if now[0] > 3.5:
                    stop.set()  # three samples, then the caller closes the sampler's stdin
                return now[0]

            link_profile.sample(["p1", "p2"], 0.0, 100, sysfs=root, clock=clock, out=out, stop=stop)
            rows = json.loads(out.getvalue())
            self.assertEqual(len(rows), 2)
            self.assertEqual(rows[0][1:], [100, 7, 5, 9])
        finally:
            shutil.rmtree(root)

    def test_window_busy_and_full(self):
        rate = 100.0  # bytes per second
        # Host a: down at the full rate for the first two seconds, then idle; up at 30% throughout.
        # Host b: nothing down, up at the rate.
        rows = [[t, min(t, 2) * rate, 30 * t, 0, rate * t] for t in range(0, 5)]
        w = link_profile.window(rows, ["a", "b"], [rate, rate], 0, 4)
        self.assertAlmostEqual(w["a"]["down"]["busy"], 0.5)
        self.assertAlmostEqual(w["a"]["down"]["full"], 0.5)
        self.assertAlmostEqual(w["a"]["down"]["mb"], 200 / 1e6)
        self.assertAlmostEqual(w["a"]["up"]["busy"], 0.3)
        self.assertEqual(w["a"]["up"]["full"], 0.0)  # it trickled
        self.assertEqual(w["b"]["down"]["busy"], 0.0)
        self.assertAlmostEqual(w["b"]["up"]["full"], 1.0)
        # Ends between samples are interpolated.
        self.assertAlmostEqual(link_profile.window(rows, ["a", "b"], [rate, rate], 0.5, 1.5)["a"]["down"]["busy"], 1.0)
        self.assertIn("down 25% busy, 25% of the time full; up 65% busy, 50% full",
                      link_profile.describe(w, ["a", "b"]))

    def test_by_phase(self):
        rate = 100.0
        # Two iterations of 4 s; host 0's downlink full in each one's first half, idle in the
        # second; its uplink idle, then full.
        rows = [[t, rate * (min(t, 2) + max(0, min(t, 6) - 4)), rate * (max(0, min(t, 4) - 2) + max(0, t - 6)), 0, 0]
                for t in range(0, 9)]
        p = link_profile.by_phase(rows, [0], [rate, rate], [0, 4, 8], bins=4)
        for got, want in zip(p["down"], [1, 1, 0, 0]):
            self.assertAlmostEqual(got, want)
        for got, want in zip(p["up"], [0, 0, 1, 1]):
            self.assertAlmostEqual(got, want)


if __name__ == "__main__":
    unittest.main()
