"""Tests of bench/link_model.py: the order statistic, the bytes per host, a fit that recovers
known parameters from points they made, and the crossing of two layouts."""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import link_model  # noqa: E402
import numpy as np  # noqa: E402

RATE = 125e6  # 1 Gbit/s in bytes per second
SIZES = (4.2e6, 42e6)


def points_of(params, jitter, noise=0.0, workers=(2, 4, 8, 16), seed=0):
    rng = random.Random(seed)
    out = []
    for m in SIZES:
        for n in workers:
            t = link_model.predict(params, n, m, RATE, 0.5, jitter)
            out.append({"workers": n, "model_bytes": m, "rate": RATE, "compute_s": 0.5,
                        "iteration_s": t * (1 + rng.uniform(-noise, noise))})
    return out


class LinkModelTest(unittest.TestCase):
    def test_expected_max_of_normals(self):
        self.assertAlmostEqual(link_model.expected_max_normal(1), 0.0, places=4)
        self.assertAlmostEqual(link_model.expected_max_normal(2), 0.5642, places=3)  # 1/sqrt(pi)
        self.assertAlmostEqual(link_model.expected_max_normal(4), 1.0294, places=3)
        self.assertAlmostEqual(link_model.expected_max_normal(256), 2.8, delta=0.05)
        with self.assertRaises(ValueError):
            link_model.expected_max_normal(0)

    def test_local_steps_spread_the_exchange_over_the_rounds_steps(self):
        params = {"k": 1.2, "a": 0.002, "o": 0.1}
        sync = link_model.predict(params, 16, 42e6, RATE, 0.5, 0.02)
        compute = link_model.compute_seconds(16, 0.5, 0.02)
        self.assertAlmostEqual(link_model.predict_local(params, 16, 42e6, RATE, 0.5, 0.02, 1), sync)
        self.assertAlmostEqual(link_model.predict_local(params, 16, 42e6, RATE, 0.5, 0.02, 8) - compute,
                               (sync - compute) / 8)
        halved = link_model.predict_local(params, 16, 42e6, RATE, 0.5, 0.02, 8, wire_scale=0.5)
        wire = 1.2 * link_model.wire_seconds(16, 42e6, RATE)
        self.assertAlmostEqual(link_model.predict_local(params, 16, 42e6, RATE, 0.5, 0.02, 8) - halved, wire / 16)

    def test_bytes_per_host_are_the_rings(self):
        self.assertAlmostEqual(link_model.wire_seconds(2, 1e6, 1e6), 1.0)
        self.assertAlmostEqual(link_model.wire_seconds(4, 1e6, 1e6), 1.5)
        self.assertAlmostEqual(link_model.wire_seconds(256, 1e6, 1e6), 2 * 255 / 256)

    def test_fit_recovers_the_parameters_that_made_the_points(self):
        truth = {"k": 1.25, "a": 0.004, "o": 0.3}
        got = link_model.fit(points_of(truth, jitter=0.02), jitter=0.02)
        for key, value in truth.items():
            self.assertAlmostEqual(got[key], value, places=6, msg=key)
        noisy = link_model.fit(points_of(truth, jitter=0.02, noise=0.01), jitter=0.02)
        self.assertAlmostEqual(noisy["k"], 1.25, delta=0.1)

    def test_fit_refuses_points_that_cannot_separate_the_parameters(self):
        with self.assertRaises(ValueError):
            link_model.fit(points_of({"k": 1, "a": 0, "o": 0}, 0.0)[:2], 0.0)
        one_size = [p for p in points_of({"k": 1, "a": 0.01, "o": 0}, 0.0, workers=(4, 4, 4))]
        with self.assertRaises(ValueError):
            link_model.fit(one_size, 0.0)

    def test_fit_keeps_every_parameter_at_or_above_zero(self):
        # Points a free fit explains with a negative cost per peer: a ring whose iteration
        # falls as hosts are added. The fit holds a at 0 and explains them with k alone.
        points = points_of({"k": 1.2, "a": 0.0, "o": 0.0}, 0.0)
        for p in points:
            p["iteration_s"] -= 0.003 * (p["workers"] - 1)
        free, _, _, _ = np.linalg.lstsq(
            [link_model._row(p["workers"], p["model_bytes"], p["rate"]) for p in points],
            [p["iteration_s"] - p["compute_s"] for p in points], rcond=None)
        self.assertLess(free[1], 0)
        got = link_model.fit(points, 0.0)
        self.assertTrue(all(v >= 0 for v in got.values()), got)
        self.assertEqual(got["a"], 0.0)
        self.assertGreater(link_model.predict(got, 256, 4.2e6, RATE, 0.5, 0.0),
                           link_model.predict(got, 16, 4.2e6, RATE, 0.5, 0.0))

    def test_crossing(self):
        ring = {"k": 1.1, "a": 0.002, "o": 0.0}
        servers = {"k": 1.3, "a": 0.0005, "o": 0.0}
        n = link_model.crossing(ring, servers, 4.2e6, RATE, 0.0, 0.0, range(2, 1025))
        self.assertIsNotNone(n)
        before, at = n - 1, n
        self.assertGreater(link_model.predict(servers, before, 4.2e6, RATE, 0, 0),
                           link_model.predict(ring, before, 4.2e6, RATE, 0, 0))
        self.assertLessEqual(link_model.predict(servers, at, 4.2e6, RATE, 0, 0),
                             link_model.predict(ring, at, 4.2e6, RATE, 0, 0))
        self.assertIsNone(link_model.crossing(ring, servers, 4.2e6, RATE, 0.0, 0.0, range(2, 5)))


if __name__ == "__main__":
    unittest.main()
