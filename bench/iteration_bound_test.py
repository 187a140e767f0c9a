"""Tests of bench/iteration_bound.py: the links, the buckets and partitions it mirrors, and both
layouts' bounds on a model small enough to work out by hand."""

import contextlib
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iteration_bound as ib  # noqa: E402

T = ib.Tensor
# Two stages: `a` (group 0, 250 floats) and `b` (group 1, 750 floats); no buffers.
TOY = [T("a", 1000, 0, False), T("b", 3000, 1, False)]
RATE = 1000.0  # bytes per second


class IterationBoundTest(unittest.TestCase):
    def test_a_link_carries_its_items_in_turn(self):
        self.assertEqual(ib.fifo([(0, 1000), (0.5, 1000), (5, 500)], RATE), [1.0, 2.0, 5.5])
        self.assertEqual(ib.fifo([], RATE), [])

    def test_the_pacing(self):
        # Stage k's gradients are final K-k K-ths into backward; the tail's as it begins.
        self.assertEqual([ib.final_at(g, 3, 3.0) for g in range(4)], [3.0, 2.0, 1.0, 0.0])
        # A stage waits for its weights, then takes its share; a wait moves what follows.
        self.assertEqual(ib.forward_end(0.0, {}, 2, 1.0), 1.0)
        self.assertEqual(ib.forward_end(0.0, {0: 2.0}, 2, 1.0), 3.0)
        self.assertEqual(ib.forward_end(0.0, {1: 0.2}, 2, 1.0), 1.0)
        self.assertEqual(ib.forward_end(0.0, {2: 4.0}, 2, 1.0), 4.0)  # the tail's weights

    def test_ddp_buckets_close_at_their_caps(self):
        mib = ib.MIB
        tensors = [T(f"t{i}", n, 0, False) for i, n in enumerate((mib, 20 * mib, 6 * mib, mib // 2))]
        tensors.append(T("buf", 8, 0, True))
        # Last first: 0.5 MiB + 6 MiB closes the 1 MiB first bucket; then 20 + 1 MiB, below 25.
        self.assertEqual(ib.ddp_buckets(tensors), [[3, 2], [1, 0]])

    def test_push_buckets_as_the_worker_cuts_them(self):
        tensors = [T("w1", 3000, 0, False), T("b1", 500, 0, False), T("w2", 500, 1, False),
                   T("big", 9000, 1, False), T("buf", 100, 1, True)]
        # Last first, about 1000 bytes each, a larger tensor alone (push_buckets.cc).
        self.assertEqual(ib.push_buckets(tensors, 1000), [[4], [3], [2, 1], [0]])

    def test_partitions_dealt_over_the_slices(self):
        # 1000 floats, partitions of at most 250: 4 of them, partition j on slice j mod 2.
        owned = ib.owners(TOY, 2, 1000)
        self.assertEqual(owned[0], {0: 1000})
        self.assertEqual(owned[1], {1: 2000, 0: 1000})
        # Bigger partitions than the model: still one per slice, near-equal.
        self.assertEqual(ib.owners(TOY, 2, 1 << 20), [{0: 1000}, {0: 1000, 1: 2000}])

    def test_the_automatic_partition_size(self):
        # As common/shard_map_test: 16 partitions a shard, within 64 KiB and 4 MiB.
        self.assertEqual(ib.partition_floats(11_200_000, 4, 0), 11_200_000 // 64)
        self.assertEqual(ib.partition_floats(1 << 28, 4, 0), (4 << 20) // 4)
        self.assertEqual(ib.partition_floats(1 << 18, 4, 0), (64 << 10) // 4)
        self.assertEqual(ib.partition_floats(1 << 18, 4, 4096), 1024)
        model = [T("w", 11_200_000 * 4, 0, False)]
        self.assertEqual(len({s for piece in ib.owners(model, 4, 0) for s in piece}), 4)

    def test_small_buffers_are_sent_first(self):
        small = [T("w", 3200, 0, False), T("buf", 100, 0, True)]
        self.assertEqual(ib.send_order(small), [1, 0])
        large = [T("w", 3000, 0, False), T("buf", 200, 0, True)]
        self.assertEqual(ib.send_order(large), [0, 1])

    def test_ddp_on_the_toy(self):
        # One bucket (4000 bytes, under 1 MiB), ready when `a` is final at 2 s of backward
        # (C = 3 s: forward 1 s, backward 2 s); the ring: 2 (N-1)/N x 4000 / 1000 = 4 s; then the forward.
        self.assertAlmostEqual(ib.ddp_iteration(TOY, 2, 2, RATE, 3.0), 2 + 4 + 1)

    def test_servers_on_the_toy(self):
        # b final at 1 s: host 0 sends slice 1's 2000 bytes (to 3 s), host 1 slice 0's 1000; a at
        # 2 s: host 1 sends its 1000 (to 3 s). Every slice steps at 3 s. Models: slice 0 sends a
        # (4 s) then its part of b (5 s); slice 1 its part of b (5 s). Host 0 needs only b from
        # slice 1 (5 s): stage 0 by 3.5 s, stage 1 from 5 to 5.5 s. Host 1: a at 4 s, stage 0 to
        # 4.5 s, b at 5 s, stage 1 to 5.5 s.
        self.assertAlmostEqual(ib.colocated_iteration(TOY, 2, 2, RATE, 3.0, 2000, 1000), 5.5)

    def test_links_without_limit_leave_the_compute(self):
        for workers in (2, 4, 7):
            self.assertAlmostEqual(ib.ddp_iteration(TOY, 2, workers, 1e18, 3.0), 3.0)
            self.assertAlmostEqual(ib.colocated_iteration(TOY, 2, workers, 1e18, 3.0, 2000, 1000), 3.0)

    def test_the_benchs_mlp(self):
        # bench/peers.py's 4 MB MLP: three Linear stages, each its own group, no tail.
        tensors, k = ib.model_tensors("mlp4")
        self.assertEqual(k, 3)
        self.assertEqual([(t.name, t.group) for t in tensors],
                         [("0.weight", 0), ("0.bias", 0), ("2.weight", 1), ("2.bias", 1),
                          ("4.weight", 2), ("4.bias", 2)])
        args, _ = ib.parse(["--models=mlp4", "--levels=HL1,HL8"])
        rows = ib.bounds(args, "mlp4")
        self.assertEqual(len(rows), 6)
        wire = ib.wire_seconds(4, sum(t.nbytes for t in tensors), 125e6)
        for r in rows:  # the compute is the balanced one (the ring's wire time) or the slowest device's
            self.assertGreaterEqual(r["bound_s"], r["compute_s"])
            self.assertGreaterEqual(r["compute_s"], wire)
        bound = {(r["level"], r["system"]): r["bound_s"] for r in rows}
        self.assertLess(bound[("HL8", "ddp-balanced")], bound[("HL8", "ddp")])
        self.assertLess(bound[("HL8", "omnilearn-colocated")], bound[("HL8", "ddp")])

    def test_bad_levels_are_refused(self):
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
            ib.parse(["--levels=HL3"])
        self.assertIn("HL3", err.getvalue())


if __name__ == "__main__":
    unittest.main()
