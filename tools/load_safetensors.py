"""Loads a safetensors file (an OmniLearn checkpoint or export) with numpy alone.

    from load_safetensors import load
    tensors, metadata = load("model.safetensors")   # {name: np.ndarray}, {key: str}

With the safetensors package installed, safetensors.torch.load_file(path) reads the
same file into torch tensors.
"""
import json
import struct
import sys
import zlib

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def load(path, verify_checksum=True):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    if verify_checksum and "omnilearn.crc32" in metadata:
        if f"{zlib.crc32(data):08x}" != metadata["omnilearn.crc32"]:
            raise ValueError(f"{path}: checksum mismatch")
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        dtype = np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(t["shape"])
    return tensors, metadata


if __name__ == "__main__":
    tensors, metadata = load(sys.argv[1])
    for name, a in tensors.items():
        print(f"{name} {list(a.shape)} {a.dtype}")
    print(json.dumps(metadata))
