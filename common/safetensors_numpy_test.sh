#!/usr/bin/env bash
# An independent reader (Python's json + numpy, tools/load_safetensors.py) checks a file
# our writer made: the header's structure, offsets, dtype, shapes, values and checksum.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin}/omnilearn
out=${TEST_TMPDIR:-$(mktemp -d)}/sample.safetensors
"$RUNFILES/common/safetensors_sample" "$out"
PYTHONPATH="$RUNFILES/tools" /usr/bin/python3 - "$out" <<'PY'
import json, struct, sys
import numpy as np
from load_safetensors import load

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

tensors, metadata = load(path)
w = tensors["conv.weight"]
assert w.shape == (2, 3, 4) and w.dtype == np.float32, (w.shape, w.dtype)
assert np.array_equal(w.ravel(), np.arange(24, dtype=np.float32) * 0.5 - 3)
assert np.array_equal(tensors["conv.bias"], np.array([0.5, -0.25], dtype=np.float32))
assert tensors["scalar"].shape == () and tensors["scalar"] == 0.5
assert tensors["empty"].shape == (0, 3)
assert metadata["omnilearn.version"] == "7"
assert metadata["text"] == "ünïcode \"quoted\"", metadata["text"]
print("numpy reader: OK", sorted(tensors))
PY
