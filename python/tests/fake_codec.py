"""The chunked tensor format of the wire, in Python, for the tests' fake server (the
library itself speaks it through the C++ core, common/tensor_codec.cc)."""

import numpy as np

MAX_CHUNK_BYTES = 4 << 20  # kMaxChunkBytes in common/tensor_codec.h
_FLOAT = np.dtype("<f4")


def chunks(flat_model, flat: np.ndarray, pb2, max_bytes: int = MAX_CHUNK_BYTES):
    """TensorChunk messages covering `flat` (layout order), each at most max_bytes of data."""
    per_chunk = max(1, max_bytes // 4)
    data = np.ascontiguousarray(flat, dtype=_FLOAT)
    for (name, t, _), off in zip(flat_model.entries, flat_model.offsets):
        n = t.numel()
        shape = list(t.shape)
        for start in range(0, max(n, 1), per_chunk):
            end = min(n, start + per_chunk)
            yield pb2.TensorChunk(name=name, shape=shape, offset=start,
                                  data=data[off + start:off + end].tobytes())


class Assembler:
    """Collects chunks (any tensor order, each tensor's chunks in order) into a flat vector."""

    def __init__(self, flat_model):
        self.model = flat_model
        self.flat = np.empty(flat_model.total, dtype=_FLOAT)
        self.filled = [0] * len(flat_model.entries)

    def add(self, chunk) -> None:
        i = self.model.index(chunk.name)
        if i < 0:
            raise ValueError(f"unknown tensor '{chunk.name}' (the server's model is not this worker's)")
        name, t, _ = self.model.entries[i]
        if list(chunk.shape) != list(t.shape):
            raise ValueError(f"tensor '{name}' has shape {list(chunk.shape)}, expected {list(t.shape)}")
        if len(chunk.data) % 4:
            raise ValueError(f"chunk of '{name}' is not whole float32 values")
        n = len(chunk.data) // 4
        if chunk.offset != self.filled[i] or self.filled[i] + n > t.numel():
            raise ValueError(f"chunk of '{name}' at offset {chunk.offset} with {n} values does not continue "
                             f"at {self.filled[i]} of {t.numel()}")
        start = self.model.offsets[i] + self.filled[i]
        self.flat[start:start + n] = np.frombuffer(chunk.data, dtype=_FLOAT)
        self.filled[i] += n

    def finish(self) -> np.ndarray:
        for i, (name, t, _) in enumerate(self.model.entries):
            if self.filled[i] != t.numel():
                raise ValueError(f"tensor '{name}' incomplete: {self.filled[i]} of {t.numel()} values")
        return self.flat
