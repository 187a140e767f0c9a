"""Data sets as tensors: Fashion-MNIST's IDX files (normalized as the C++ worker does,
worker/dataset.cc), and files of named tensors (safetensors) that the C++ worker reads
with --dataset=tensors:PATH."""

import gzip
import json
import os
import struct

import numpy as np
import torch

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
_MEAN, _STD = 0.2860, 0.3530


def fashion_mnist(train: bool, directory: str = FASHION_MNIST_DIR):
    """(images [N,1,28,28] float32 normalized, labels [N] int64)."""
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
    x = torch.from_numpy(images.copy()).reshape(n, 1, rows, cols).float().div_(255).sub_(_MEAN).div_(_STD)
    return x, torch.from_numpy(labels.astype(np.int64))


# safetensors dtype names <-> numpy (little-endian).
_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?"}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def save_tensors(path: str, tensors: dict, metadata: dict = None) -> None:
    """Writes `tensors` (name -> torch tensor or numpy array) as a safetensors file, e.g.
    {"train_x": ..., "train_y": ..., "test_x": ..., "test_y": ...} for --dataset=tensors:PATH.
    Written to PATH.tmp, then renamed: a reader never sees half a file."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        a = a.astype(a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype, order="C", copy=False)
        if a.dtype not in _NAMES:
            raise ValueError(f"tensor '{name}': dtype {a.dtype} is not one of {sorted(_DTYPES)}")
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


def load_tensors(path: str) -> dict:
    """The tensors of a safetensors file (name -> torch tensor)."""
    return read_safetensors(path)[0]


def read_safetensors(path: str):
    """(the tensors of a safetensors file, name -> torch tensor; its __metadata__ dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: not a safetensors file (too short)")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header of {n} bytes runs past the file")
    header = json.loads(raw[8:8 + n])
    data = memoryview(raw)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        if e["dtype"] == "BF16":  # numpy has no bfloat16: its bits are a float32's upper half
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = torch.from_numpy(bits.view(np.float32).reshape(e["shape"])).to(torch.bfloat16)
            continue
        if e["dtype"] not in _DTYPES:
            raise ValueError(f"{path}: tensor '{name}' has unsupported dtype {e['dtype']}")
        a = np.frombuffer(data[begin:end], dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, header.get("__metadata__", {})
