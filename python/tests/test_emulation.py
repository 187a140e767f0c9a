"""omnilearn.emulation: the same device profiles, schedules and errors as the C++ worker's
--emulate_device (worker/devices/emulated_device_test.cc), paced on a fake clock."""

import statistics
import unittest

from omnilearn.emulation import DeviceProfile, EmulatedDevice, parse


class FakeClock:
    def __init__(self):
        self.t = 10.0

    def now(self):
        return self.t

    def sleep(self, s):
        self.t += s


class EmulationTest(unittest.TestCase):
    def test_a_step_takes_fixed_plus_per_sample_times_batch(self):
        d = EmulatedDevice("2:0.5")
        self.assertAlmostEqual(d.step_seconds(8, 0), 0.006)
        self.assertAlmostEqual(d.step_seconds(100, 7), 0.052)

    def test_pacing_waits_out_what_compute_left_and_counts_overruns(self):
        clock = FakeClock()
        d = EmulatedDevice("10:1", now=clock.now, sleep=clock.sleep)
        start = clock.t
        clock.t += 0.005
        reported, real = d.pace(start, 20, 0)
        self.assertAlmostEqual(reported, 0.030)
        self.assertAlmostEqual(real, 0.005)
        self.assertAlmostEqual(clock.t - start, 0.030)
        start = clock.t
        clock.t += 0.050
        reported, real = d.pace(start, 20, 0)
        self.assertAlmostEqual(reported, 0.050)
        self.assertEqual(d.overruns, 1)
        self.assertAlmostEqual(clock.t - start, 0.050)

    def test_jitter_is_a_seeded_normal_factor(self):
        d = EmulatedDevice("0:1:0.05", seed=7)
        xs = [d.step_seconds(1000, 0) for _ in range(20000)]
        self.assertAlmostEqual(statistics.mean(xs), 1.0, delta=0.005)
        self.assertAlmostEqual(statistics.pstdev(xs), 0.05, delta=0.0025)
        a, b, c = (EmulatedDevice("0:1:0.05", seed=s) for s in (3, 3, 4))
        x = a.step_seconds(100, 0)
        self.assertEqual(x, b.step_seconds(100, 0))
        self.assertNotEqual(x, c.step_seconds(100, 0))

    def test_a_schedule_changes_the_profile_with_the_global_epoch(self):
        d = EmulatedDevice("0@2:0.5,1.5@2:4:0.05,3@1:1")
        self.assertEqual(d.at(0), DeviceProfile(2, 0.5, 0))
        self.assertEqual(d.at(1.49), DeviceProfile(2, 0.5, 0))
        self.assertEqual(d.at(1.5), DeviceProfile(2, 4, 0.05))
        self.assertEqual(d.at(100), DeviceProfile(1, 1, 0))
        self.assertAlmostEqual(d.step_seconds(10, 3.2), 0.011)

    def test_malformed_devices_are_refused_with_the_expected_form(self):
        for bad in ["", "2", "2:x", "2:0.5:0.05:1", "-1:0.5", "0:0", "1:1:0.5", "1:1:-0.1", "inf:1",
                    "1@2:0.5", "0@2:0.5,0@2:1", "0@2:0.5,1@", "0@2:0.5,x@1:1", "0@2:0.5,", "nan:1"]:
            with self.subTest(bad=bad), self.assertRaisesRegex(ValueError, "emulate_device"):
                parse(bad)


if __name__ == "__main__":
    unittest.main()
