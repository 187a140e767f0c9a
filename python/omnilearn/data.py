"""Data sets as tensors: Fashion-MNIST's IDX files (normalized as the C++ worker does,
worker/trainer/dataset.cc), and files of named tensors (safetensors) that the C++ worker reads
with --dataset=tensors:PATH."""

import numpy as np
import torch

from omnilearn import tensor_files
from omnilearn.tensor_files import FASHION_MNIST_DIR


def fashion_mnist(train: bool, directory: str = FASHION_MNIST_DIR):
    """(images [N,1,28,28] float32 normalized, labels [N] int64)."""
    images, labels = tensor_files.fashion_mnist_raw(train, directory)
    x = torch.from_numpy(tensor_files.normalize_fashion_mnist(images)).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def save_tensors(path: str, tensors: dict, metadata: dict = None) -> None:
    """Writes `tensors` (name -> torch tensor or numpy array) as a safetensors file, e.g.
    {"train_x": ..., "train_y": ..., "test_x": ..., "test_y": ...} for --dataset=tensors:PATH.
    Written to PATH.tmp, then renamed: a reader never sees half a file."""
    arrays = {name: t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
              for name, t in tensors.items()}
    tensor_files.write(path, arrays, metadata)


def load_tensors(path: str) -> dict:
    """The tensors of a safetensors file (name -> torch tensor)."""
    return read_safetensors(path)[0]


def read_safetensors(path: str):
    """(the tensors of a safetensors file, name -> torch tensor; its __metadata__ dict)."""
    arrays, dtypes, metadata = tensor_files.read(path)
    out = {name: torch.from_numpy(a) for name, a in arrays.items()}
    for name, dtype in dtypes.items():
        if dtype == "BF16":
            out[name] = out[name].to(torch.bfloat16)
    return out, metadata
