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

# An export writes each tensor in the model's type (integer and bool buffers too).
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32,
          "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


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
        if t["dtype"] == "BF16":  # numpy has no bfloat16: a float32's upper half
            bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
            tensors[name] = bits.view(np.float32).reshape(t["shape"])
            continue
        dtype = np.dtype(DTYPES[t["dtype"]]).newbyteorder("<")
        tensors[name] = np.frombuffer(data[begin:end], dtype=dtype).reshape(t["shape"])
    return tensors, metadata


if __name__ == "__main__":
    tensors, metadata = load(sys.argv[1])
    for name, a in tensors.items():
        print(f"{name} {list(a.shape)} {a.dtype}")
    print(json.dumps(metadata))
