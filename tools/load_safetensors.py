"""Prints, or loads, a safetensors file (an OmniLearn checkpoint or export) with the reader
the server uses (common/safetensors, through omnilearn.tensor_files): offsets, sizes and
the checksum checked; BF16 tensors widened to float32.

    python3 tools/load_safetensors.py model.safetensors    # each tensor's name, shape, type; the metadata
    from load_safetensors import load
    tensors, metadata = load("model.safetensors")            # {name: np.ndarray}, {key: str}

It needs the omnilearn package: installed (pip install ./python), or this checkout's after
`bazel build //python:omnilearn`. Without it, safetensors.torch.load_file(path) reads the
same file into torch tensors.
"""
import json
import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from omnilearn import tensor_files  # noqa: E402  (after the checkout's python/ is on the path)


def load(path):
    tensors, _, metadata = tensor_files.read(path)
    return tensors, metadata


if __name__ == "__main__":
    tensors, metadata = load(sys.argv[1])
    for name, a in tensors.items():
        print(f"{name} {list(a.shape)} {a.dtype}")
    print(json.dumps(metadata))
