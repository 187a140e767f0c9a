"""A PyTorch model as the server sees it.

The model is an ordered list of named float32 tensors: the trainable parameters (a push
carries their gradients), then the persistent buffers (BatchNorm statistics: a push
carries their values). A non-persistent buffer (register_buffer(..., persistent=False),
e.g. a causal mask) is not model state, as state_dict() says: it stays with each worker.
Names and shapes must match the other workers'. The same rules as the C++ worker's
FlatModel (worker/trainer/trainer.cc).

FlatModel describes the model and copies its values in and out; FlatStorage makes the
model's tensors views of one flat vector (and their gradients views of another), so the
worker core (omnilearn._core) sends the gradient from where backward left it and
receives the model straight into the parameters' storage.
"""

import numpy as np
import torch

from omnilearn.tensor_files import FRAMEWORK_NAMES

_FLOAT = np.dtype("<f4")
# A tensor's type as the layout names it (safetensors' names; the proto's TensorDtype):
# the server computes in float32 and its export writes each tensor back in this type.
DTYPE_NAMES = {getattr(torch, framework): name for name, framework in FRAMEWORK_NAMES.items()}


def dtype_name(name: str, t: torch.Tensor) -> str:
    if t.dtype not in DTYPE_NAMES:
        raise ValueError(f"tensor '{name}' is {t.dtype}; a model's tensors must be one of "
                         f"{', '.join(str(d) for d in DTYPE_NAMES)}")
    return DTYPE_NAMES[t.dtype]


class FlatModel:
    """The model's tensors in layout order, flattened into one float32 vector and back."""

    def __init__(self, model: torch.nn.Module):
        self.entries = []  # (name, tensor, is_buffer)
        for name, p in model.named_parameters():
            if p.requires_grad:
                self.entries.append((name, p, False))
        persistent = model.state_dict(keep_vars=True).keys()
        for name, b in model.named_buffers():
            if name in persistent:
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
        self.dtypes = [dtype_name(name, t) for name, t, _ in self.entries]

    @property
    def device(self) -> torch.device:
        return next(t.device for _, t, is_buffer in self.entries if not is_buffer)

    def tensors(self):
        """(name, shape, is_buffer, dtype name) in layout order."""
        return [(name, list(t.shape), is_buffer, dtype)
                for (name, t, is_buffer), dtype in zip(self.entries, self.dtypes)]

    def layout(self, pb2):
        out = pb2.ModelLayout()
        for (name, t, is_buffer), dtype in zip(self.entries, self.dtypes):
            out.tensors.add(name=name, shape=list(t.shape), buffer=is_buffer,
                            dtype=pb2.TensorDtype.Value(f"TENSOR_DTYPE_{dtype}"))
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


class FlatStorage:
    """The model's tensors as views of one flat float32 vector (`weights`), its parameters'
    gradients as views of another (`update`, which also carries the buffers' values for a
    push), in layout order. A tensor of another dtype (num_batches_tracked) is copied in
    and out instead. On a GPU the flat vectors live on the device and the core reads and
    writes pinned host copies (`host_weights`, `host_update`); on the CPU they are the same
    memory. Build it after the model is on its device, and before an optimizer of one's own."""

    def __init__(self, flat: FlatModel):
        self.flat = flat
        device = flat.device
        self.weights = torch.empty(flat.total, dtype=torch.float32, device=device)
        self.update = torch.zeros(flat.total, dtype=torch.float32, device=device)
        self._grads = []  # (parameter, its gradient's view of update)
        self._copied = []  # (tensor, offset, is_buffer): kept apart, copied in and out
        self.copied_indices = []  # their layout indices, in the same order
        viewed_buffers = []
        with torch.no_grad():
            for i, ((name, t, is_buffer), off) in enumerate(zip(flat.entries, flat.offsets)):
                w = self.weights[off:off + t.numel()]
                w.copy_(t.detach().reshape(-1))
                if t.dtype != torch.float32 or t.device != device:
                    self._copied.append((t, off, is_buffer))
                    self.copied_indices.append(i)
                    continue
                t.data = w.view_as(t)
                if is_buffer:
                    viewed_buffers.append((off, t.numel()))
                else:
                    g = self.update[off:off + t.numel()].view_as(t)
                    t.grad = g
                    self._grads.append((t, g))
        # The buffers (after every parameter in the layout): one copy per push when they
        # are all views and adjacent.
        self._buffer_spans = viewed_buffers
        if viewed_buffers and all(a[0] + a[1] == b[0] for a, b in zip(viewed_buffers, viewed_buffers[1:])):
            self._buffer_spans = [(viewed_buffers[0][0], sum(n for _, n in viewed_buffers))]
        self._cuda = device.type == "cuda"
        self._ready = [False] * len(flat.entries)  # per tensor: backward finished it this step
        if self._cuda:
            self.host_weights = torch.empty(flat.total, dtype=torch.float32, pin_memory=True)
            self.host_update = torch.empty(flat.total, dtype=torch.float32, pin_memory=True)
        else:
            self.host_weights, self.host_update = self.weights, self.update
        # Whether the core's writes land in the model's tensors themselves (CPU): a model may
        # then arrive while a forward runs on the layers already in. A tensor kept apart (another
        # dtype: BatchNorm's num_batches_tracked) is copied in once it arrived (received(tensors)).
        self.in_place = not self._cuda
        # numpy views (no copies) of the host memory: what the core is handed.
        self.weights_host = self.host_weights.numpy()
        self.update_host = self.host_update.numpy()

    # ------------------------------------------------------------ pushes during backward
    def watch_gradients(self, ready, repeated) -> None:
        """Calls ready(i) as backward finishes parameter i's gradient (layout index), its
        values by then in the push's host memory; repeated(i) when a step's backward reaches
        a parameter a second time (gradients accumulated over several backward passes: what
        was sent is not the step's whole gradient). Hooks on the parameters' gradient
        accumulators, run after each accumulation (torch 1.13 has no post-accumulate hook
        on tensors; DDP hooks the same nodes). Call once."""
        self._accumulators = []  # kept alive: a node dropped would take its hook along
        for i, ((name, t, is_buffer), off) in enumerate(zip(self.flat.entries, self.flat.offsets)):
            if is_buffer:
                continue
            node = t.expand_as(t).grad_fn.next_functions[0][0]
            node.register_hook(self._accumulated_hook(i, t, off, ready, repeated))
            self._accumulators.append(node)

    def _accumulated_hook(self, i, t, off, ready, repeated):
        n = t.numel()

        def hook(grad_inputs, grad_outputs):
            if self._ready[i]:
                repeated(i)
                return
            with torch.no_grad():
                g = self.update[off:off + n]
                if t.grad is not None and t.grad.data_ptr() != g.data_ptr():
                    g.copy_(t.grad.detach().reshape(-1))  # a gradient of its own (set_to_none...)
                if self._cuda:
                    self.host_update[off:off + n].copy_(g)
            self._ready[i] = True
            ready(i)
        return hook

    def new_step(self) -> None:
        """Nothing of the next backward has been seen."""
        self._ready = [False] * len(self.flat.entries)

    def versions(self) -> tuple:
        """The parameters' version counters (an in-place change of a parameter, such as an
        optimizer step, moves its counter; the core's writes do not)."""
        return tuple(t._version for t, _ in self._grads)

    def zero_grad(self) -> None:
        self.update.zero_()
        for t, g in self._grads:
            if t.grad is None or t.grad.data_ptr() != g.data_ptr():
                t.grad = g
        for t, _, is_buffer in self._copied:
            if not is_buffer:
                t.grad = None

    def prepare_update(self, streamed: bool = False) -> np.ndarray:
        """The push's payload, in host memory: the gradients (zeros where none) and the
        buffers' values. `streamed`: the gradients backward finished (watch_gradients) are
        in place already (and may be on the wire): only the rest is written."""
        done = set()
        if streamed:
            done = {id(t) for (_, t, _), r in zip(self.flat.entries, self._ready) if r}
        with torch.no_grad():
            for t, g in self._grads:  # a gradient the user replaced (zero_grad(set_to_none)...)
                if id(t) in done:
                    continue
                if t.grad is None:
                    g.zero_()
                    t.grad = g
                elif t.grad.data_ptr() != g.data_ptr():
                    g.copy_(t.grad)
                    t.grad = g
            for off, n in self._buffer_spans:
                self.update[off:off + n].copy_(self.weights[off:off + n])
            rest = []  # (offset, size) of what this call wrote
            for t, off, is_buffer in self._copied:
                if id(t) in done:
                    continue
                src = t if is_buffer else (t.grad if t.grad is not None else torch.zeros_like(t))
                self.update[off:off + t.numel()].copy_(src.detach().reshape(-1))
                rest.append((off, t.numel()))
            if self._cuda and not streamed:
                self.host_update.copy_(self.update)
            elif self._cuda:
                rest += self._buffer_spans
                rest += [(off, t.numel()) for (_, t, b), off in zip(self.flat.entries, self.flat.offsets)
                         if not b and id(t) not in done and t.dtype == torch.float32]
                for off, n in rest:
                    self.host_update[off:off + n].copy_(self.update[off:off + n])
        return self.update_host

    def snapshot(self) -> torch.Tensor:
        """The model's values now, flat (a local round's start)."""
        self.prepare_weights()
        return self.weights.clone()

    def prepare_difference(self, start: torch.Tensor) -> np.ndarray:
        """A local round's push, in host memory: `start` less the values now for the
        parameters (the round's pseudo-gradient), the buffers' values."""
        self.prepare_update()
        self.prepare_weights()
        with torch.no_grad():
            for (_, t, is_buffer), off in zip(self.flat.entries, self.flat.offsets):
                if not is_buffer:
                    n = t.numel()
                    torch.sub(start[off:off + n], self.weights[off:off + n], out=self.update[off:off + n])
            if self._cuda:
                self.host_update.copy_(self.update)
        return self.update_host

    def prepare_weights(self) -> np.ndarray:
        """The model's values in host memory (a join that brings the model)."""
        with torch.no_grad():
            for t, off, _ in self._copied:
                self.weights[off:off + t.numel()].copy_(t.detach().reshape(-1))
            if self._cuda:
                self.host_weights.copy_(self.weights)
        return self.weights_host

    def received(self, tensors=None) -> None:
        """The core wrote a new model into host_weights: bring it to the tensors. `tensors`
        (layout indices, CPU): only those of the tensors kept apart (a model arriving during a
        forward, copied in as each module's own tensors arrive)."""
        with torch.no_grad():
            if self._cuda:
                self.weights.copy_(self.host_weights, non_blocking=True)
            for (t, off, _), i in zip(self._copied, self.copied_indices):
                if tensors is not None and i not in tensors:
                    continue
                src = self.weights[off:off + t.numel()].view_as(t)
                if not t.is_floating_point():  # num_batches_tracked arrives as an average
                    src = src.round()
                t.copy_(src)
