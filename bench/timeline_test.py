"""Tests of bench/timeline.py: two workers' lines of three rounds, the phases they make, a
round a worker left out, and a line that is not a timeline's."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timeline  # noqa: E402


def line(pid, push, start, finish, written, reply, model_in, forward_wait=0.0):
    events = [["begin", 0.0, -1], ["bucket", 5.0, -1], ["finish", finish, -1], ["written", written, 1],
              ["written", written - 2, 0], ["slice_reply", reply - 1, 1], ["reply", reply, -1],
              ["model_in", model_in, 0]]
    return {"pid": pid, "iteration": push, "start_ms": start, "events": events,
            "totals": {"forward_wait": forward_wait} if forward_wait else {}}


class TimelineTest(unittest.TestCase):
    def write(self, lines):
        f = tempfile.NamedTemporaryFile("w", suffix=".timeline", delete=False)
        self.addCleanup(os.remove, f.name)
        f.write("".join(json.dumps(x) + "\n" for x in lines))
        f.close()
        return f.name

    def test_phases_of_two_workers(self):
        # Worker 1 finishes its backward 10 ms after worker 2; the round's reply comes 30 ms
        # after the last finish, the model 40 ms after that.
        a = [line(1, p, 1000 * p, 100, 104, 130, 170, 7.0 * p) for p in (1, 2, 3)]
        b = [line(2, p, 1000 * p + 5, 85, 90, 125, 160) for p in (1, 2, 3)]
        n, phases = timeline.summary(timeline.read([self.write(a), self.write(b)]), skip=0)
        self.assertEqual(n, 2)  # rounds 1 and 2: round 3 has no next begin
        self.assertAlmostEqual(phases["compute"]["median"], 100)  # worker 1's begin to its finish
        self.assertAlmostEqual(phases["skew"]["median"], 10)
        self.assertAlmostEqual(phases["push tail"]["median"], 4)
        self.assertAlmostEqual(phases["to reply"]["median"], 30)
        self.assertAlmostEqual(phases["model tail"]["median"], 40)
        self.assertAlmostEqual(phases["forward wait"]["median"], 17.5)  # 14 and 21: the next push's
        self.assertAlmostEqual(phases["iteration"]["median"], 1000)
        n, _ = timeline.summary(timeline.read([self.write(a), self.write(b)]), skip=1)
        self.assertEqual(n, 1)

    def test_a_round_without_every_worker_is_left_out(self):
        a = [line(1, p, 1000 * p, 100, 104, 130, 170) for p in (1, 2, 3, 4)]
        b = [line(2, p, 1000 * p, 85, 90, 125, 160) for p in (1, 3, 4)]  # rejoined: no push 2
        n, _ = timeline.summary(timeline.read([self.write(a + b)]), skip=0)
        self.assertEqual(n, 1)  # round 3 only: rounds 1 and 2 lack worker 2, round 4 a next begin
        with self.assertRaises(timeline.NoRounds):
            timeline.summary(timeline.read([self.write(a[:2] + b[:1])]), skip=0)

    def test_not_a_timeline(self):
        with self.assertRaises(SystemExit) as e:
            timeline.read([self.write_text("not json\n")])
        self.assertIn("not a timeline line", str(e.exception))

    def write_text(self, text):
        f = tempfile.NamedTemporaryFile("w", delete=False)
        self.addCleanup(os.remove, f.name)
        f.write(text)
        f.close()
        return f.name


if __name__ == "__main__":
    unittest.main()
