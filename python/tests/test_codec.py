"""FlatModel and the chunk format: the layout, values and gradients in layout order,
chunks split and reassembled, every malformed chunk refused."""

import os
import tempfile
import unittest

import numpy as np
import torch

import omnilearn
from omnilearn import _stubs, models
from fake_codec import Assembler, chunks
from omnilearn.flat_model import FlatModel

pb2, _ = _stubs.load()


class _Masked(torch.nn.Module):
    """A causal-mask holder: a bool buffer that is not model state, an int64 one that is."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("mask", torch.ones(4, 4, dtype=torch.bool).tril(), persistent=False)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        return self.fc(x).masked_fill(~self.mask[: x.shape[0], : x.shape[1]], 0.0)


class FlatModelTest(unittest.TestCase):
    def test_layout_lists_parameters_then_buffers_like_the_cpp_worker(self):
        flat = FlatModel(models.make("cnn_bn"))
        layout = flat.layout(pb2)
        names = [t.name for t in layout.tensors]
        self.assertEqual(names[:2], ["conv1.weight", "bn1.weight"])
        self.assertEqual([t.name for t in layout.tensors if t.buffer],
                         ["bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked",
                          "bn2.running_mean", "bn2.running_var", "bn2.num_batches_tracked"])
        self.assertEqual(list(layout.tensors[0].shape), [8, 1, 5, 5])
        self.assertEqual(flat.total, sum(t.numel() for t in models.make("cnn_bn").state_dict().values()))

    def test_non_persistent_buffers_stay_local_also_through_torchscript(self):
        model = _Masked()
        flat = FlatModel(model)
        self.assertEqual([(name, dtype) for name, _, is_buffer, dtype in flat.tensors() if is_buffer], [("steps", "I64")])
        self.assertEqual(flat.total, sum(t.numel() for t in model.state_dict().values()))
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "model.ts")
            omnilearn.save_torchscript(model, path)
            self.assertEqual(torch.jit.load(path).state_dict().keys(), {"fc.weight", "fc.bias", "steps", "mask"})
            loaded = omnilearn.load_torchscript(path)  # what TorchScript forgot, back
            self.assertEqual(loaded.state_dict().keys(), model.state_dict().keys())
            self.assertEqual(FlatModel(loaded).tensors(), flat.tensors())

    def test_update_is_gradients_then_buffer_values_and_load_round_trips(self):
        model = models.make("cnn_bn")
        flat = FlatModel(model)
        model(torch.randn(4, 1, 28, 28)).sum().backward()
        update = flat.update()
        self.assertTrue(np.array_equal(update[:200], model.conv1.weight.grad.reshape(-1).numpy()))
        off = flat.offsets[flat.index("bn1.running_var")]
        self.assertTrue(np.array_equal(update[off:off + 8], model.bn1.running_var.numpy()))
        target = np.arange(flat.total, dtype=np.float32) / flat.total
        target[flat.offsets[flat.index("bn2.num_batches_tracked")]] = 6.6  # an average of counts
        flat.load(target)
        self.assertEqual(int(model.bn2.num_batches_tracked), 7)  # rounded, not truncated
        expected = target.copy()
        for name in ("bn1.num_batches_tracked", "bn2.num_batches_tracked"):
            i = flat.offsets[flat.index(name)]
            expected[i] = np.round(expected[i])
        self.assertTrue(np.allclose(flat.values(), expected))
        flat.zero_grad()
        self.assertIsNone(model.conv1.weight.grad)
        self.assertTrue(np.array_equal(flat.update()[:200], np.zeros(200, np.float32)))

    def test_a_model_without_trainable_parameters_is_refused(self):
        frozen = torch.nn.Linear(2, 2).requires_grad_(False)
        with self.assertRaisesRegex(ValueError, "no trainable parameters"):
            FlatModel(frozen)


class ChunkTest(unittest.TestCase):
    def setUp(self):
        self.flat = FlatModel(models.make("mlp"))
        self.values = np.random.default_rng(3).standard_normal(self.flat.total).astype(np.float32)

    def test_chunks_are_bounded_and_reassemble_in_any_tensor_order(self):
        cs = list(chunks(self.flat, self.values, pb2, max_bytes=4096))
        self.assertTrue(all(len(c.data) <= 4096 for c in cs))
        self.assertEqual(sum(len(c.data) for c in cs), 4 * self.flat.total)
        by_tensor = {}
        for c in cs:
            by_tensor.setdefault(c.name, []).append(c)
        a = Assembler(self.flat)
        for name in reversed(list(by_tensor)):  # another worker's tensor order
            for c in by_tensor[name]:
                a.add(c)
        self.assertTrue(np.array_equal(a.finish(), self.values))

    def test_malformed_chunks_are_refused(self):
        good = next(chunks(self.flat, self.values, pb2, max_bytes=64))
        cases = {
            "unknown tensor": pb2.TensorChunk(name="nope", shape=good.shape, data=good.data),
            "has shape": pb2.TensorChunk(name=good.name, shape=[1], data=good.data),
            "whole float32": pb2.TensorChunk(name=good.name, shape=good.shape, data=good.data[:5]),
            "does not continue": pb2.TensorChunk(name=good.name, shape=good.shape, offset=16, data=good.data),
        }
        for message, chunk in cases.items():
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    Assembler(self.flat).add(chunk)
        a = Assembler(self.flat)
        a.add(good)
        with self.assertRaisesRegex(ValueError, "incomplete"):
            a.finish()


if __name__ == "__main__":
    unittest.main()
