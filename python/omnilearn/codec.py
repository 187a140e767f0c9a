"""A PyTorch model as the server sees it, and the chunked tensor format of the wire.

The model is an ordered list of named float32 tensors: the trainable parameters (a push
carries their gradients), then the buffers (BatchNorm statistics: a push carries their
values). Chunks name their tensor, so the order may differ from other workers'; names
and shapes must match. The same rules as the C++ worker's FlatModel (worker/trainer.cc)
and common/tensor_codec.cc.
"""

import numpy as np
import torch

MAX_CHUNK_BYTES = 4 << 20  # kMaxChunkBytes in common/tensor_codec.h
_FLOAT = np.dtype("<f4")


class FlatModel:
    """The model's tensors in layout order, flattened into one float32 vector and back."""

    def __init__(self, model: torch.nn.Module):
        self.entries = []  # (name, tensor, is_buffer)
        for name, p in model.named_parameters():
            if p.requires_grad:
                self.entries.append((name, p, False))
        for name, b in model.named_buffers():
            self.entries.append((name, b, True))
        if not any(not is_buffer for _, _, is_buffer in self.entries):
            raise ValueError("the model has no trainable parameters")
        self.offsets = []
        total = 0
        for _, t, _ in self.entries:
            self.offsets.append(total)
            total += t.numel()
        self.total = total
        self._index = {name: i for i, (name, _, _) in enumerate(self.entries)}

    def layout(self, pb2):
        out = pb2.ModelLayout()
        for name, t, is_buffer in self.entries:
            out.tensors.add(name=name, shape=list(t.shape), buffer=is_buffer)
        return out

    def _flatten(self, pick) -> np.ndarray:
        out = np.empty(self.total, dtype=_FLOAT)
        with torch.no_grad():
            for (name, t, is_buffer), off in zip(self.entries, self.offsets):
                src = pick(t, is_buffer)
                out[off:off + t.numel()] = src.detach().reshape(-1).to("cpu", torch.float32).numpy()
        return out

    def values(self) -> np.ndarray:
        return self._flatten(lambda t, _: t)

    def update(self) -> np.ndarray:
        """The parameters' gradients (zeros where none) and the buffers' values."""
        def pick(t, is_buffer):
            if is_buffer:
                return t
            return t.grad if t.grad is not None else torch.zeros_like(t)
        return self._flatten(pick)

    def load(self, flat: np.ndarray) -> None:
        if flat.size != self.total:
            raise ValueError(f"model of {flat.size} values, this one has {self.total}")
        with torch.no_grad():
            for (name, t, _), off in zip(self.entries, self.offsets):
                src = torch.from_numpy(flat[off:off + t.numel()]).reshape(t.shape)
                if not t.is_floating_point():  # num_batches_tracked arrives as an average
                    src = src.round()
                t.copy_(src)

    def zero_grad(self) -> None:
        for _, t, is_buffer in self.entries:
            if not is_buffer:
                t.grad = None

    def index(self, name: str) -> int:
        return self._index.get(name, -1)


def chunks(flat_model: FlatModel, flat: np.ndarray, pb2, max_bytes: int = MAX_CHUNK_BYTES):
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

    def __init__(self, flat_model: FlatModel):
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
