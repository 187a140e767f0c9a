"""Tensor files (safetensors) and the Fashion-MNIST reader."""

import json
import os
import struct
import tempfile
import unittest

import numpy as np
import torch

from omnilearn import data


class TensorFileTest(unittest.TestCase):
    def test_one_dtype_table_for_cpp_numpy_and_torch(self):
        from omnilearn import tensor_files
        from omnilearn.flat_model import DTYPE_NAMES
        names = [name for name, _, _ in tensor_files.DTYPE_TABLE]
        self.assertEqual(names[:4], ["F32", "F64", "F16", "BF16"])  # the proto's TensorDtype order
        self.assertEqual(sorted(DTYPE_NAMES.values()), sorted(names))  # every type has its torch type
        for name, width, framework in tensor_files.DTYPE_TABLE:
            torch_type = getattr(torch, framework)
            self.assertEqual(DTYPE_NAMES[torch_type], name)
            self.assertEqual(torch.empty(0, dtype=torch_type).element_size(), width, name)
            if name != "BF16":
                self.assertEqual(tensor_files.DTYPES[name].itemsize, width, name)

    def test_round_trip_of_every_dtype(self):
        tensors = {
            "train_x": torch.randn(5, 3, 4, 4), "train_y": torch.tensor([0, 4, 2, 1, 3]),
            "f64": torch.randn(2, dtype=torch.float64), "u8": torch.tensor([1, 255], dtype=torch.uint8),
            "i32": torch.tensor([-7], dtype=torch.int32), "f16": torch.tensor([0.5], dtype=torch.float16),
            "flags": torch.tensor([True, False]), "scalar": torch.tensor(2.5),
        }
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            data.save_tensors(path, tensors, metadata={"classes": 5})
            raw = open(path, "rb").read()
            (n,) = struct.unpack("<Q", raw[:8])
            self.assertEqual(n % 8, 0)  # the data section starts aligned
            header = json.loads(raw[8:8 + n])
            self.assertEqual(header["train_y"]["dtype"], "I64")
            self.assertEqual(header["__metadata__"]["classes"], "5")
            self.assertRegex(header["__metadata__"]["omnilearn.crc32"], "^[0-9a-f]{8}$")  # the C++ writer's
            back = data.load_tensors(path)
            self.assertFalse(os.path.exists(path + ".tmp"))
        self.assertEqual(set(back), set(tensors))
        for name, t in tensors.items():
            self.assertEqual(back[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(back[name], t), name)

    def test_unsupported_dtype_and_truncated_files_are_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.safetensors")
            with self.assertRaisesRegex(ValueError, "dtype complex64"):
                data.save_tensors(path, {"z": np.zeros(2, np.complex64)})
            data.save_tensors(path, {"x": torch.zeros(4)})
            raw = open(path, "rb").read()
            open(path, "wb").write(raw[:6])
            with self.assertRaisesRegex(ValueError, "shorter than 8 bytes"):
                data.load_tensors(path)
            open(path, "wb").write(struct.pack("<Q", 1 << 20) + raw[8:])
            with self.assertRaisesRegex(ValueError, "header length past the end"):
                data.load_tensors(path)
            open(path, "wb").write(raw[:-1] + bytes([raw[-1] ^ 1]))
            with self.assertRaisesRegex(ValueError, "checksum"):
                data.load_tensors(path)
            with self.assertRaises(FileNotFoundError):
                data.load_tensors(os.path.join(d, "none.safetensors"))
            with self.assertRaisesRegex(ValueError, "reserved"):
                data.save_tensors(path, {"x": torch.zeros(1)}, metadata={"omnilearn.crc32": "0"})


@unittest.skipUnless(os.path.exists(os.path.join(data.FASHION_MNIST_DIR, "t10k-images-idx3-ubyte.gz")),
                     "Debian's dataset-fashion-mnist is not installed")
class FashionMnistTest(unittest.TestCase):
    def test_test_split_is_normalized_like_the_cpp_worker(self):
        x, y = data.fashion_mnist(train=False)
        self.assertEqual(tuple(x.shape), (10000, 1, 28, 28))
        self.assertEqual(x.dtype, torch.float32)
        self.assertEqual(int(y.max()), 9)
        self.assertAlmostEqual(float(x.mean()), 0.0, delta=0.05)  # the training set's mean and std
        self.assertAlmostEqual(float(x.std()), 1.0, delta=0.05)


if __name__ == "__main__":
    unittest.main()
