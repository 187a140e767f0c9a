"""Files of named arrays, in numpy and no framework: safetensors (the server's exports
and checkpoints, the C++ worker's --dataset=tensors:PATH), read and written by the C++
reader and writer the server uses (common/safetensors, bound in omnilearn._core), and
Fashion-MNIST's IDX files. omnilearn.data gives them to PyTorch, omnilearn.keras to
TensorFlow."""

import gzip
import os
import struct

import numpy as np

from omnilearn._native import core

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530  # the C++ worker's normalization (worker/trainer/dataset.cc)

# The one dtype table (common/tensor_dtype.h, through omnilearn._core): each safetensors
# name's bytes per element and the name numpy, PyTorch and TensorFlow give the type.
DTYPE_TABLE = core.tensor_dtypes()  # [(name, bytes per element, framework name)]
FRAMEWORK_NAMES = {name: framework for name, _, framework in DTYPE_TABLE}
# numpy's type of each, little-endian. BF16 has none: read() widens it to float32.
DTYPES = {name: np.dtype(framework).newbyteorder("<") for name, _, framework in DTYPE_TABLE if framework != "bfloat16"}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_NOT_FOUND = 5  # absl's (and gRPC's) NOT_FOUND


def fashion_mnist_raw(train: bool, directory: str = FASHION_MNIST_DIR):
    """(images [N, 28, 28] uint8, labels [N] uint8) of the training or the test set."""
    prefix = os.path.join(directory, "train" if train else "t10k")
    with gzip.open(prefix + "-images-idx3-ubyte.gz") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803:
            raise ValueError(f"{prefix}-images-idx3-ubyte.gz is not an IDX3 image file")
        images = np.frombuffer(f.read(), dtype=np.uint8)
    with gzip.open(prefix + "-labels-idx1-ubyte.gz") as f:
        magic, m = struct.unpack(">II", f.read(8))
        if magic != 0x801:
            raise ValueError(f"{prefix}-labels-idx1-ubyte.gz is not an IDX1 label file")
        labels = np.frombuffer(f.read(), dtype=np.uint8)
    if images.size != n * rows * cols or labels.size != n or m != n:
        raise ValueError(f"inconsistent sizes in {prefix}-*.gz")
    return images.reshape(n, rows, cols), labels


def normalize_fashion_mnist(images: np.ndarray) -> np.ndarray:
    """uint8 images as the workers train on them: float32, scaled, centred, standardized."""
    return ((images.astype(np.float32) / 255 - FASHION_MNIST_MEAN) / FASHION_MNIST_STD).astype(np.float32)


def write(path: str, arrays: dict, metadata: dict = None) -> None:
    """Writes `arrays` (name -> numpy array) as a safetensors file with common/safetensors's
    writer: atomically (a reader never sees half a file), with the data's CRC-32 in the
    metadata. ValueError for a dtype outside DTYPES, a bad name or reserved metadata."""
    tensors = []
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a.astype(a.dtype.newbyteorder("<"), copy=False) if a.dtype.itemsize > 1 else a
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor '{name}': dtype {a.dtype} is not one of {sorted(DTYPES)}")
        tensors.append((name, _NAMES[a.dtype], np.require(a, requirements="C")))  # 0-d stays 0-d
    _call(core.write_safetensors, path, tensors, {str(k): str(v) for k, v in (metadata or {}).items()})


def read(path: str):
    """(name -> numpy array, name -> its dtype name in the file, the __metadata__ dict) of a
    safetensors file, read and checked by common/safetensors's reader (offsets, sizes, the
    checksum when present); a BF16 tensor comes as float32 (its bits are a float32's upper
    half). FileNotFoundError for no file, ValueError for a corrupt or unsupported one."""
    data, entries, metadata = _call(core.read_safetensors, path)
    arrays, dtypes = {}, {}
    for name, dtype, shape, offset, size in entries:
        dtypes[name] = dtype
        if dtype == "BF16":
            bits = np.frombuffer(data, "<u2", size // 2, offset).astype(np.uint32) << 16
            arrays[name] = bits.view(np.float32).reshape(shape)
        else:
            arrays[name] = np.frombuffer(data, DTYPES[dtype], size // DTYPES[dtype].itemsize, offset).reshape(shape)
    return arrays, dtypes, metadata


def _call(function, path, *args):
    """`function(path, *args)`, the core's errors as Python's."""
    try:
        return function(os.fspath(path), *args)
    except core.Error as e:
        code, message = e.args
        raise (FileNotFoundError if code == _NOT_FOUND else ValueError)(message) from None
