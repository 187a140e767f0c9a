"""Files of named arrays, in numpy and no framework: safetensors (the server's exports
and checkpoints, the C++ worker's --dataset=tensors:PATH) and Fashion-MNIST's IDX files.
omnilearn.data gives them to PyTorch, omnilearn.keras to TensorFlow."""

import gzip
import json
import os
import struct

import numpy as np

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
FASHION_MNIST_MEAN, FASHION_MNIST_STD = 0.2860, 0.3530  # the C++ worker's normalization (worker/dataset.cc)

# safetensors dtype names <-> numpy (little-endian). BF16 has no numpy type: read() widens it.
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "BOOL": "?"}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}


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
    """Writes `arrays` (name -> numpy array) as a safetensors file, to PATH.tmp and then
    renamed: a reader never sees half a file."""
    header, blobs, offset = {}, [], 0
    for name, a in arrays.items():
        a = np.asarray(a)
        a = a.astype(a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype, order="C", copy=False)
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor '{name}': dtype {a.dtype} is not one of {sorted(DTYPES)}")
        blob = a.tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read(path: str):
    """(name -> numpy array, name -> its dtype name in the file, the __metadata__ dict) of a
    safetensors file; a BF16 tensor comes as float32 (its bits are a float32's upper half)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header of {n} bytes runs past the file")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    arrays, dtypes = {}, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dtypes[name] = e["dtype"]
        if e["dtype"] == "BF16":
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            arrays[name] = bits.view(np.float32).reshape(e["shape"])
            continue
        if e["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {e['dtype']}")
        arrays[name] = np.frombuffer(data[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"]).copy()
    return arrays, dtypes, header.get("__metadata__", {})
