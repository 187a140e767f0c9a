"""A training loop of one's own, as an OmniLearn worker.

    with omnilearn.Worker("ps-host:50051", model, dataset_size=len(train_x), epochs=2) as w:
        for step in w:
            x, y = train_x[step.samples], train_y[step.samples]
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            w.push(loss)

The worker joins (sending its parameters only to a server without a model), pulls, times
forward + loss + backward itself (from the model's first forward call of a step to
push(), synchronizing CUDA when the model is on a GPU; see start_compute), pushes the gradients and receives
the new model in the same call (PushPull), follows the server's actions (continue, pull,
rejoin, stop), sends heartbeats, and rides out server restarts.

The protocol is the C++ worker's own: omnilearn._core (python/src/core.cc) runs
worker/client/session.h (join, rejoin, capped and jittered backoff for up to `reconnect_timeout`
seconds per outage, heartbeats) over the C++ gRPC client. omnilearn.session keeps the
training loop's side that no framework changes (steps, timing, emulated devices, pushes);
this module adds PyTorch's: the model's flat storage (FlatStorage), which the core sends
from and receives into while the GIL is released, the hooks that time a step and stream
its gradient, and the torch.optim object the server runs.
"""

import time
import warnings
from typing import Optional

import torch

from omnilearn import optim
from omnilearn.flat_model import FlatModel, FlatStorage
from omnilearn.loader import StepBatchSampler, concat
from omnilearn.session import ServerError, Step, WorkerSession

__all__ = ["ServerError", "Step", "Worker"]


def _uncompiled(model: torch.nn.Module) -> torch.nn.Module:
    """The module a torch.compile'd model wraps (its tensors and names: no '_orig_mod.'
    prefix, so the layout and the export are the plain model's); any other model itself."""
    return getattr(model, "_orig_mod", model) if type(model).__name__ == "OptimizedModule" else model


class Worker(WorkerSession):
    """A PyTorch training loop as an OmniLearn worker (see the module's doc). The session's
    options (name, dataset_size, epochs, TLS, timeouts, emulate_device, metrics...) are
    omnilearn.WorkerOptions' fields, given as keywords.

    Communication off the critical path: the gradient leaves in buckets of about `bucket_mb`
    MB while backward runs (0: whole, at push()), and with `overlap_pull` (CPU models) push()
    returns with the server's reply while the new model still arrives into the parameters:
    each module's forward waits for its own tensors only. Read parameters outside a forward
    (a state_dict of your own) after wait_model().

    `optimizer`: a torch.optim object built over the model's parameters (any that
    omnilearn.optim runs, with param groups; or [Muon, AdamW], torch's Muon recipe): the job
    runs it when this worker brings the job's model, and
    its schedulers' rates reach the server with the next push (omnilearn.optim). Do not
    call its step(): the server steps. Left out, the job runs the server's --optimizer flags.
    """

    def __init__(self, server, model: torch.nn.Module, *, bucket_mb: float = 4.0, overlap_pull: bool = True,
                 optimizer=None, **options):
        if not 0 <= bucket_mb <= 1 << 20:
            raise ValueError(f"bucket_mb={bucket_mb} is not in [0, {1 << 20}]")
        self.model = model
        inner = _uncompiled(model)
        self.flat = FlatModel(inner)
        spec = self._init_optimizer(optimizer, inner)
        self._device = self.flat.device
        self._pulled_versions = None  # the parameters' version counters when the model last arrived
        self._warned_changed = False
        super().__init__(server, FlatStorage(self.flat), self.flat.tensors(),
                         device="cuda" if self._device.type == "cuda" else "cpu", optimizer_spec=spec, **options)
        try:
            self._hook = model.register_forward_pre_hook(self._on_forward)
        except RuntimeError:  # a TorchScript module takes no hooks: steps are timed from their start
            self._hook = None
        self._times_forward = self._hook is not None
        # A compiled model's modules run inside its graph, where a hook cannot wait for a
        # tensor: its model arrives whole before the next forward.
        self._setup_overlap(inner, bucket_mb if self.options.streams_gradients else 0.0, overlap_pull and inner is model)

    def _init_optimizer(self, optimizer, model):
        """The user's torch.optim object: its description for the join (None without one)."""
        self.optimizer = optimizer
        if optimizer is None:
            return None
        self._sent_rates = (optim.rates(optimizer), 0)  # the rates the server has, at this many rejoins
        return optim.describe(optimizer, model)

    def _setup_overlap(self, model, bucket_mb, overlap_pull):
        """Communication during compute. Pushes during backward: buckets of about bucket_mb
        leave as autograd finishes them (0: whole, at push(); the caller passes 0 for an
        emulated device or a slowdown, whose wait comes after the real backward: a gradient
        leaving before it would hide the link behind a wait no real device makes). The model's
        way back during the next forward (overlap_pull): each module waits for its own tensors
        only; for CPU models (the values land in the parameters themselves; a tensor of
        another dtype, such as num_batches_tracked, is copied in once its module's tensors
        arrived), with module hooks (not TorchScript)."""
        self._bucket_bytes = int(bucket_mb * (1 << 20))
        if self._bucket_bytes > 0:
            self.storage.watch_gradients(lambda i: self._core.ready(i), self._on_repeated_backward)
        self._overlap = bool(overlap_pull and self._bucket_bytes > 0 and self.storage.in_place
                             and self._hook is not None)
        self._to_copy = set()  # of a model arriving: the tensors kept apart not copied in yet
        self._module_hooks = self._watch_modules(model) if self._overlap else []

    def close(self):
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        for h in self._module_hooks:
            h.remove()
        self._module_hooks = []
        super().close()

    def _samples(self, ids):
        return torch.from_numpy(ids)

    def _on_repeated_backward(self, i):
        """A second backward in one step (gradient accumulation): what left is not the step's
        gradient. The push is given up and the step's gradient goes whole at push(); so do
        the following steps'."""
        if not self._open_push:
            return
        self._cancel_push()
        self._bucket_bytes = 0
        self._log("several backward passes in one step (accumulated gradients): the gradient now leaves whole "
                  "at push(), not during backward")

    def _watch_modules(self, model):
        """A forward pre-hook on every module holding tensors of its own: it waits until
        those have arrived (the GIL released), so a forward runs while later layers arrive."""
        hooks = []
        for prefix, module in model.named_modules():
            names = [n for n, t in list(module._parameters.items()) + list(module._buffers.items()) if t is not None]
            tensors = [self.flat.index(f"{prefix}.{n}" if prefix else n) for n in names]
            tensors = [t for t in tensors if t >= 0]
            if tensors:
                hooks.append(module.register_forward_pre_hook(self._arrival_hook(tensors)))
        return hooks

    def _arrival_hook(self, tensors):
        def hook(module, inputs):
            if self._arriving:
                t = time.perf_counter()
                self._core.await_tensors(tensors)
                waited = time.perf_counter() - t
                # The model's transfer, not compute: taken out of the step's compute time and
                # reported as communication with the next push.
                self._step_arrival_wait += waited
                self.arrival_wait_seconds += waited
                self._copy_in(tensors)
        return hook

    def _copy_in(self, tensors):
        """The tensors kept apart among `tensors` (num_batches_tracked), copied in from the model
        that arrived, once each: the forward then changes them (a BatchNorm counts its batch)."""
        mine = self._to_copy.intersection(tensors)
        if mine:
            self.storage.received(mine)
            self._to_copy -= mine

    def _received(self):
        if self._arriving:  # the tensors kept apart are copied in as they arrive (_copy_in)
            self._to_copy = set(self.storage.copied_indices)
        else:
            super()._received()

    def _arrived(self):
        self._copy_in(self._to_copy)  # those no forward reached

    def _on_forward(self, module, inputs):
        if self._step is not None and self._t0 is None and torch.is_grad_enabled():
            self.start_compute()

    def start_compute(self):
        """Marks the start of the step's compute time (forward + loss + backward). Called by
        the model's first forward of a step; call it yourself for a TorchScript model (which
        takes no hooks: its steps are otherwise timed from the moment they are handed out)."""
        super().start_compute()

    def _synchronize(self):
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)

    def push(self, loss, test_accuracy: Optional[float] = None):
        """Sends the step's gradients (after loss.backward()) and loads the new model.

        Returns the server's reply, or None when the step was dropped (the session was
        re-established: the next step trains again on the new model) or the server stopped.
        """
        loss = float(loss.detach()) if isinstance(loss, torch.Tensor) else float(loss)
        return self._push_step(loss, test_accuracy)

    def _before_send(self):
        self._note_server_step()
        self._check_parameters_unchanged()

    def _begin_local_steps(self):
        if self.optimizer is None:
            raise ValueError("the server runs local steps (--local_steps or --local_batch): each worker steps the "
                             "program's own optimizer, so pass it: Worker(..., optimizer=opt)")
        super()._begin_local_steps()
        self._log(f"local steps: {self.local_steps} steps of the program's optimizer a round, then the round's "
                  "pseudo-gradient to the server (its optimizer is the outer one)")

    def _local_step(self):
        for opt in self.optimizer if isinstance(self.optimizer, (list, tuple)) else [self.optimizer]:
            opt.step()

    def _note_pulled(self):
        """Remembers the parameters' version counters as the model arrived (until warned)."""
        if not self._warned_changed:
            self._pulled_versions = self.storage.versions()

    def _optimizer_rates(self) -> Optional[list]:
        return None if self.optimizer is None else optim.rates(self.optimizer)

    def _note_server_step(self):
        """The server steps the optimizer's parameters: a scheduler that checks that
        optimizer.step() ran before scheduler.step() (torch.optim.lr_scheduler warns
        otherwise, on every step) is told it did, in the attributes it reads."""
        if self.optimizer is None:
            return
        for opt in self.optimizer if isinstance(self.optimizer, (list, tuple)) else [self.optimizer]:
            opt._opt_called = True  # torch 2.x
            opt._step_count = getattr(opt, "_step_count", 0) + 1  # torch 1.x

    def _check_parameters_unchanged(self):
        """The server owns the optimizer: a step of one's own (opt.step() after backward)
        changes the model just pulled, and the server never sees it. Warns once."""
        if self._warned_changed or self._pulled_versions is None:
            return
        if self.storage.versions() != self._pulled_versions:
            self._warned_changed = True
            message = ("the model's parameters changed between the pull and push() (an optimizer step of your "
                       "own?): the server runs the optimizer, so that change is overwritten by the next model; "
                       "drop opt.step() and set the optimizer on the server (docs/optimizer.md)")
            warnings.warn(message, RuntimeWarning, stacklevel=5)
            self._log(f"warning: {message}")

    # ------------------------------------------------------------------ DataLoader
    def batch_sampler(self, parts: int = 1) -> StepBatchSampler:
        """The server's assignment as a DataLoader batch sampler (omnilearn.loader): each pass
        of the loader loads the current step's samples, in `parts` pieces."""
        if not self.dataset_size:
            raise ValueError("a batch sampler needs the Worker's dataset_size=len(dataset): the server assigns "
                             "samples only to workers that say how many there are")
        return StepBatchSampler(self, parts)

    def batches(self, loader):
        """Steps with their batches: `for step, batch in worker.batches(loader)`, the loader's
        batch_sampler being this worker's batch_sampler()."""
        sampler = getattr(loader, "batch_sampler", None)
        if not isinstance(sampler, StepBatchSampler) or sampler.worker is not self:
            raise ValueError("the loader's batch_sampler must be this worker's: "
                             "DataLoader(dataset, batch_sampler=worker.batch_sampler(), ...)")
        for step in self:
            yield step, concat(list(loader))
