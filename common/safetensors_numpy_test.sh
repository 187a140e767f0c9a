#!/usr/bin/env bash
# A reader independent of common/safetensors (Python's json, zlib and numpy, written here)
# checks a file our writer made: the header's structure, offsets, dtype, shapes, values and
# checksum. The product's Python reader is that C++ reader (omnilearn.tensor_files).
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin}/omnilearn
out=${TEST_TMPDIR:-$(mktemp -d)}/sample.safetensors
"$RUNFILES/common/safetensors_sample" "$out"
/usr/bin/python3 - "$out" <<'PY'
import json, struct, sys, zlib
import numpy as np

path = sys.argv[1]
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert n % 8 == 0, f"header length {n} not 8-aligned"
header = json.loads(raw[8:8 + n])
meta = header["__metadata__"]
assert all(isinstance(v, str) for v in meta.values()), meta
spans = sorted(tuple(t["data_offsets"]) for k, t in header.items() if k != "__metadata__")
at = 0
for b, e in spans:
    assert b == at, f"hole or overlap at {b}"
    at = e
assert at == len(raw) - 8 - n, "tensors do not cover the data exactly"
data = raw[8 + n:]
metadata = header.pop("__metadata__")
assert metadata["omnilearn.crc32"] == f"{zlib.crc32(data):08x}", "checksum"
assert all(t["dtype"] == "F32" for t in header.values()), header
tensors = {k: np.frombuffer(data[t["data_offsets"][0]:t["data_offsets"][1]], "<f4").reshape(t["shape"])
           for k, t in header.items()}
w = tensors["conv.weight"]
assert w.shape == (2, 3, 4) and w.dtype == np.float32, (w.shape, w.dtype)
assert np.array_equal(w.ravel(), np.arange(24, dtype=np.float32) * 0.5 - 3)
assert np.array_equal(tensors["conv.bias"], np.array([0.5, -0.25], dtype=np.float32))
assert tensors["scalar"].shape == () and tensors["scalar"] == 0.5
assert tensors["empty"].shape == (0, 3)
assert metadata["omnilearn.version"] == "7"
assert metadata["text"] == "ünïcode \"quoted\"", metadata["text"]
print("independent reader: OK", sorted(tensors))
PY
