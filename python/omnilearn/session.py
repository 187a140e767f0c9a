"""What every OmniLearn worker of a Python framework shares, whatever the framework:
the session with the server (omnilearn._core: join, rejoin, backoff, heartbeats, stop),
the steps the server hands out, their timing and emulated devices, pushes and the model's
way back, metrics. A framework's worker (omnilearn.worker.Worker for PyTorch,
omnilearn.keras.Worker for TensorFlow/Keras) gives it a storage of the model's values
(see WorkerSession) and the framework's side of a step. Imports no framework.
"""

import atexit
import logging
import os
import socket
import sys
import threading
import time
import weakref
import zlib
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from omnilearn._native import core as _core
from omnilearn.emulation import EmulatedDevice
from omnilearn.metrics import WorkerMetrics
from omnilearn.options import WorkerOptions, check_keywords, from_env

_NO_VERSION = (1 << 64) - 1  # "holds no model yet"


def _status_code(code: int):
    """absl's status code (the same numbers as gRPC's) as a grpc.StatusCode when grpcio is
    installed, else as the number."""
    try:
        import grpc
    except ImportError:
        return code
    return next((c for c in grpc.StatusCode if c.value[0] == code), code)


class ServerError(RuntimeError):
    """The server refused a call for good (another model, a name in use, bad credentials...),
    or did not come back within reconnect_timeout."""

    def __init__(self, error):
        code, message = error.args
        self.code = _status_code(code)
        name = getattr(self.code, "name", str(code))
        call, sep, details = message.partition(": ")
        if sep and call in ("Join", "Pull", "Push", "PushPull", "Heartbeat", "Leave"):
            super().__init__(f"{call}: {name}: {details}")
        else:
            super().__init__(f"{name}: {message}")


@dataclass
class Step:
    """One iteration to train: a mini-batch of `batch_size` samples (`samples`, when the
    worker gave a dataset_size: the ids the server assigned, in order) of epoch `epoch`.
    `epoch_end` turns True in push() when the job's epoch ended with this step (every sample
    of `epoch` trained, across the workers): the place for an epoch's scheduler step,
    evaluation or checkpoint. It needs a dataset_size; the job's last step ends its last epoch."""
    iteration: int
    batch_size: int
    samples: Optional[Any]  # the framework's integer tensor of ids (numpy for numpy's)
    epoch: int
    model_version: int
    epoch_end: bool = False


@dataclass
class _LocalRound:
    """A round of local steps (the server's --local_steps): the batch the server gave, split in
    `steps` steps of the program's own optimizer; their compute and loss so far, and the
    weights the round started from (the pseudo-gradient's base)."""
    steps: int
    samples: int
    done: int = 0
    compute: float = 0.0
    loss: float = 0.0
    start: Any = None


_live_cores = weakref.WeakSet()  # closed at exit, before the interpreter goes


def _close_live_cores():
    for core in list(_live_cores):
        core.close()


atexit.register(_close_live_cores)


class _Logger:
    """A worker's lines through the logging module ("omnilearn" logger, INFO). When nothing
    configured logging (no handler anywhere), they go to stdout as "[name] line"."""

    def __init__(self, name):
        self.name = name
        self.logger = logging.getLogger("omnilearn.worker")
        root, ours = logging.getLogger(), logging.getLogger("omnilearn")
        if not root.handlers and not ours.handlers:
            handler = logging.StreamHandler(sys.stdout)
            handler.setFormatter(logging.Formatter("%(message)s"))
            ours.addHandler(handler)
            ours.setLevel(logging.INFO)
            ours.propagate = False

    def __call__(self, line):
        self.logger.info("[%s] %s", self.name, line)


class WorkerSession:
    """A worker's session and steps, for any framework (see the module's doc).

    `storage` holds the model's values as the core sends and receives them: `weights_host`
    and `update_host` (numpy float32 vectors in layout order: the model; the gradients then
    the buffers' values), prepare_weights() (the model's values, for a join that brings the
    model), prepare_update(streamed) (the push's payload), received() (the core wrote a new
    model into weights_host), zero_grad() and new_step(). `tensors`: (name, shape,
    is_buffer, dtype name) in layout order. `device`: "cuda" or "cpu".

    `server` left out comes from OMNILEARN_SERVER. The other keywords are WorkerOptions'
    (omnilearn.options: the job, the connection, emulated devices, metrics and logs).
    """

    def __init__(self, server: Optional[str], storage, tensors, *, device: str = "cpu", optimizer_spec=None,
                 **options):
        server = from_env(server, "OMNILEARN_SERVER")
        if not server:
            raise ValueError("no server address: pass Worker(server='HOST:PORT', ...) or set OMNILEARN_SERVER")
        check_keywords(options, type(self).__name__,
                       "the worker's options are omnilearn.WorkerOptions' fields (docs/python.md)")
        o = self.options = WorkerOptions(**options).resolved()
        self.storage = storage
        self.name = o.name or f"{socket.gethostname()}-{os.getpid()}"
        self.epochs, self.max_iterations, self.dataset_size = o.epochs, o.max_iterations, o.dataset_size
        self.slowdown = o.slowdown
        # Its clock is this module's (looked up at each call), so a test's fake time drives both.
        self.emulation = EmulatedDevice(o.emulate_device, seed=zlib.crc32(self.name.encode()),
                                        now=lambda: time.perf_counter(),
                                        sleep=lambda s: time.sleep(s)) if o.emulate_device else None
        self._profile = None  # the emulated profile last logged
        self._log = o.log or _Logger(self.name)
        self._device_kind = device
        # The session, its backoff on this module's clock (a test's fake time drives it).
        self._core = _core.Core(
            target=server, tensors=tensors, name=self.name, host=o.host or socket.gethostname(),
            device=device, max_batch_size=o.max_batch_size, dataset_size=o.dataset_size,
            rpc_timeout=o.rpc_timeout, reconnect_timeout=o.reconnect_timeout, connect_timeout=o.connect_timeout,
            server_hint=f"server '{server}': Worker's server argument or OMNILEARN_SERVER",
            auth_token=o.token() or "", tls_ca=o.tls_ca or "", tls_cert=o.tls_cert or "", tls_key=o.tls_key or "",
            tls_server_name=o.tls_server_name or "", now=lambda: time.monotonic(), sleep=lambda s: time.sleep(s),
            log=self._log, epochs=float(o.epochs or 0), optimizer=optimizer_spec)
        _live_cores.add(self._core)
        self._init_progress()
        self._bucket_bytes = 0  # the gradient leaves whole at push() unless a framework streams it
        self._open_push = False  # a push begun for the step yielded
        self._overlap = False  # the model arrives during the next forward (a framework's hooks wait)
        self._arriving = False  # a model is still arriving into the parameters
        self._step_arrival_wait = 0.0  # this step's forward waiting for the model to arrive
        self._round = None  # the local round under way (--local_steps), or None
        self.arrival_wait_seconds = 0.0  # all steps
        self._times_forward = False  # the framework marks a step's start (start_compute) itself
        self.metrics = WorkerMetrics(self.name)
        self._metrics_server = self.metrics.serve(o.metrics_bind, o.metrics_port) if o.metrics_port else None

    def _init_progress(self):
        """Where the worker stands: nothing trained, nothing pushed yet."""
        self.iteration = 0
        self.samples_seen = 0
        self.finished = False
        self._stop_seen = threading.Event()  # the job ended for this worker (the server said stop)
        self._step = None  # the step yielded and not yet pushed
        self._t0 = None
        self._last_comm_seconds = 0.0  # the last iteration's, from push() to the reply
        self.last_reply = None

    # ------------------------------------------------------------------ session
    # The session's state lives in the core: join, rejoin, backoff, heartbeats, stop.
    @property
    def worker_id(self) -> int:
        return self._core.worker_id

    @property
    def batch_size(self) -> int:
        return self._core.batch

    @property
    def communication_seconds(self) -> float:
        """The last push's communication: from sending the gradient (after the step, and
        after an emulated device's wait) until the reply and the model were back."""
        return self._last_comm_seconds

    @property
    def model_version(self) -> Optional[int]:
        """The version of the model this worker holds (None before it has one)."""
        v = self._core.model_version
        return None if v == _NO_VERSION else v

    @property
    def global_samples(self) -> int:
        return self._core.global_samples

    @property
    def local_steps(self) -> int:
        """The job's local steps (the server's --local_steps): each batch the server gives is
        split in that many steps of the program's own optimizer, and the round's
        pseudo-gradient is pushed after the last; 1: every step is pushed (but see local_batch)."""
        return self._core.local_steps

    @property
    def local_batch(self) -> int:
        """The server's --local_batch: > 0, each batch the server gives is split in steps of
        about this many samples (a faster worker, given more, takes more steps)."""
        return self._core.local_batch

    @property
    def local(self) -> bool:
        """The job runs local steps (--local_steps or --local_batch)."""
        return self.local_steps > 1 or self.local_batch > 0

    def _begin_local_steps(self):
        """The framework checks it can step the program's optimizer; gradients leave whole."""
        self._bucket_bytes = 0

    def _local_step(self):
        """One step of the program's own optimizer on the gradients in the storage."""
        raise NotImplementedError

    @property
    def mode(self) -> str:
        """The server's mode: "sync", "async" or "ssp"."""
        return self._core.mode

    @property
    def rejoins(self) -> int:
        return self._core.rejoins

    @property
    def stopped(self) -> threading.Event:
        """Set once the server said stop (in a reply or a heartbeat)."""
        if self._core.stop_requested:
            self._stop_seen.set()
        return self._stop_seen

    def _call(self, method, *args):
        try:
            return method(*args)
        except _core.Error as e:
            raise ServerError(e) from None

    def pull(self):
        """Brings the model to the server's current version."""
        self.wait_model()
        if self._call(self._core.pull, self.storage.weights_host):
            self._received()
        self._note_pulled()

    def join(self):
        self._log("joining the server (the first round waits until the server's --num_workers have joined)")
        self._call(self._core.join, self.storage.prepare_weights())
        if self.stopped.is_set():
            self._log("the server said stop: nothing to train")
            return
        self._log(f"joined as worker {self.worker_id}: device={self._device_kind} batch={self.batch_size} "
                  f"mode={self.mode} samples so far={self.global_samples}")
        if self.local:
            try:
                self._begin_local_steps()
            except Exception:
                self.leave()
                raise
        self.pull()

    def leave(self, finished: bool = False):
        """Best effort: tells the server this worker is gone (finished: it completed its training)."""
        try:
            self.wait_model()  # what was trained is whole in the parameters
        except ServerError:
            pass
        self._cancel_push()
        self._core.leave(finished)

    def close(self):
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
            self._metrics_server = None
        self._core.close()

    def __enter__(self):
        try:
            self.join()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self.leave(finished=self.finished and exc_type is None)
        self.close()
        return False

    # ------------------------------------------------------------------ steps
    def _done(self) -> bool:
        """The C++ worker's end rule (worker/client/ps_types.h's TrainingDone)."""
        return _core.training_done(self.global_samples, float(self.epochs or 0), self.dataset_size, self.iteration,
                                   self.max_iterations)

    @property
    def epoch(self) -> int:
        return self.global_samples // self.dataset_size if self.dataset_size else 0

    def _samples(self, ids: np.ndarray):
        """The step's sample ids in the framework's type (numpy int64 here)."""
        return ids

    def __iter__(self):
        while not self.stopped.is_set():
            if self._done():
                self.finished = True
                self.wait_model()  # the loop's end: the parameters hold the last model
                return
            if self._step is not None:
                raise RuntimeError("call push() (or report_out_of_memory()) for each step before the next")
            if self._core.is_idle:  # the job's samples are all handed out, none is ours
                self._idle()
                continue
            raw, first_epoch = self._core.samples()
            ids = np.frombuffer(raw, dtype="<i8").astype(np.int64) if raw else np.empty(0, dtype=np.int64)
            if len(ids) and self.dataset_size and int(ids.max()) >= self.dataset_size:
                raise ValueError(f"the server assigned sample {int(ids.max())} of a data set of {self.dataset_size}")
            epoch = first_epoch if first_epoch >= 0 else self.epoch
            parts = self._round_parts(ids)
            local = self._round is not None
            for part, size in parts:
                self.storage.zero_grad()
                self._step = Step(self.iteration, size, self._samples(part) if len(part) else None, epoch,
                                  self.model_version)
                self._begin_push(self._step)
                self._t0 = None if self._times_forward else time.perf_counter()
                yield self._step
                if self._step is not None:
                    raise RuntimeError("the loop body must call push() (or report_out_of_memory()) for each step")
                if self.stopped.is_set() or (local and self._round is None):  # the round ended (or was given up)
                    break

    def _round_parts(self, ids: np.ndarray) -> list:
        """The steps of the batch the server gave, (sample ids, size) each: the batch whole, or
        with local steps split in near-equal parts (--local_steps of them, or of about
        --local_batch samples; no more than it has samples)."""
        n = len(ids) if len(ids) else self.batch_size
        if not self.local:
            self._round = None
            return [(ids, n)]
        steps = -(-n // self.local_batch) if self.local_batch > 0 else self.local_steps
        positions = np.array_split(np.arange(n), max(1, min(steps, n)))
        self._round = _LocalRound(steps=len(positions), samples=n)
        return [(ids[p] if len(ids) else ids, len(p)) for p in positions]

    def _idle(self):
        """One wait with the server while this worker holds no samples: it may hand out
        samples a lost worker left; the model comes as it moved meanwhile."""
        self.wait_model()
        outcome, _, changed = self._call(self._core.idle, self.storage.weights_host)
        if outcome == "stop":
            self.stopped.set()
            self._log("the server stopped the job")
        elif outcome == "rejoined":
            self.pull()
        elif changed:
            self._received()
            self._note_pulled()

    def _begin_push(self, step: Step):
        """Opens the step's push before its backward when the framework streams the gradient
        (bucket bytes > 0): buckets leave as the framework marks tensors ready
        (self._core.ready), and push() sends the rest with the trailer."""
        self._last_comm_seconds += self._step_arrival_wait  # the last model's arrival, seen late
        self._step_arrival_wait = 0.0
        self.storage.new_step()
        self._open_push = False
        if self._bucket_bytes <= 0:
            return
        report = _core.StepReport(batch_size=step.batch_size, communication_seconds=self._last_comm_seconds,
                                  emulation_overruns=self._overruns())
        self._core.begin_push(report, self.storage.update_host, self._bucket_bytes)
        self._open_push = True

    def _cancel_push(self):
        if self._open_push:
            self._core.cancel_push()
            self._open_push = False

    def wait_model(self):
        """Waits for a model still arriving (see overlap_pull): call it before reading the
        parameters outside a forward pass (a state_dict, your own evaluation code without
        calling the model). The Worker's own calls and every forward wait by themselves."""
        if self._arriving:
            self._arriving = False
            self._call(self._core.await_model)
            self._arrived()

    def _synchronize(self):
        """Waits for the device's queued work (a GPU framework's); nothing on the CPU."""

    def start_compute(self):
        """Marks the start of the step's compute time (forward + loss + backward)."""
        self._synchronize()
        self._t0 = time.perf_counter()

    def _compute_seconds(self) -> float:
        if self._t0 is None:
            raise RuntimeError("push() without a forward pass of the model in this step")
        self._synchronize()
        if self.emulation is not None:
            return self._emulated_seconds()
        real = time.perf_counter() - self._t0 - self._step_arrival_wait
        if self.slowdown > 1.0:
            time.sleep((self.slowdown - 1.0) * real)
        return real * self.slowdown

    def _overruns(self) -> int:
        """Emulated steps so far whose real compute outlasted their time (sent with each push)."""
        return self.emulation.overruns if self.emulation is not None else 0

    def _emulated_seconds(self) -> float:
        epoch = self.global_samples / self.dataset_size if self.dataset_size else 0.0
        profile = self.emulation.at(epoch)
        if profile != self._profile:
            self._profile = profile
            self._log(f"emulated device {profile.fixed_ms:g} ms + {profile.ms_per_sample:g} ms/sample, "
                      f"jitter {profile.jitter:g}, from epoch {epoch:.2f}")
        overruns = self.emulation.overruns
        reported, real = self.emulation.pace(self._t0 + self._step_arrival_wait, self._step.batch_size, epoch)
        if self.emulation.overruns == 1 and overruns == 0:
            self._log(f"warning: the real compute of a step ({1000 * real:.1f} ms at batch {self._step.batch_size}) "
                      f"took longer than its emulated time: the emulation is not faithful for such steps "
                      f"(counted in Worker.emulation.overruns); give the device a larger time per sample")
        return reported

    # ------------------------------------------------------------------ pushes
    def _push_step(self, loss: float, test_accuracy: Optional[float]):
        """The step's end: its times and loss, then its gradients and the new model (see push())."""
        step = self._require_step()
        if self._round is not None:
            return self._push_local(step, loss, test_accuracy)
        if test_accuracy is not None:
            self._check_accuracy(test_accuracy)
        end = _core.StepEnd(compute_seconds=self._compute_seconds(), train_loss=loss, test_accuracy=test_accuracy,
                            group_lr=self._changed_rates(),
                            emulation_overruns=self._overruns() if self.emulation is not None else None)
        self._before_send()
        if test_accuracy is not None:
            self.metrics.accuracy(test_accuracy)
        self.metrics.step(end.compute_seconds, loss)
        update = self.storage.prepare_update(streamed=self._open_push)
        if self._open_push:
            return self._send(None, update, step, end)
        return self._send(_core.StepReport(batch_size=step.batch_size, end=end), update, step)

    def _push_local(self, step: Step, loss: float, test_accuracy: Optional[float]):
        """A local step: the program's optimizer steps; after the round's last, its
        pseudo-gradient goes to the server as the round's update, and the new model comes."""
        r = self._round
        if r.done == 0:
            self.wait_model()  # the round starts from the model the server gave, whole
            r.start = self.storage.snapshot()
        seconds = self._compute_seconds()
        r.compute += seconds
        r.loss += loss * step.batch_size
        self.metrics.step(seconds, loss)
        self._local_step()
        r.done += 1
        if r.done < r.steps:
            self._step = None
            return None
        self._round = None
        if test_accuracy is not None:
            self._check_accuracy(test_accuracy)
            self.metrics.accuracy(test_accuracy)
        end = _core.StepEnd(compute_seconds=r.compute, train_loss=r.loss / r.samples, test_accuracy=test_accuracy,
                            emulation_overruns=self._overruns() if self.emulation is not None else None)
        whole = replace(step, batch_size=r.samples)  # the round, as the server counts it
        version = self._core.model_version
        reply = self._send(_core.StepReport(batch_size=r.samples, end=end), self.storage.prepare_difference(r.start),
                           whole)
        if self._core.model_version == version and not self.stopped.is_set():
            self._restore(r.start)  # no new model (the push not applied): the next round starts from the server's
        step.epoch_end = whole.epoch_end
        return reply

    def _restore(self, start):
        """A local round's steps undone: the model it started from, the server's."""
        self.storage.weights_host[:] = start.cpu().numpy() if hasattr(start, "cpu") else start
        self._received()

    def _optimizer_rates(self) -> Optional[list]:
        """The program's optimizer's param-group rates now (None: the job runs the server's)."""
        return None

    def _changed_rates(self) -> list:
        """The optimizer's param-group rates when a scheduler changed them since they last went
        to the server, or the session was established again since (a restarted server lost
        them); else [] (unchanged). The framework's worker sets _sent_rates at construction."""
        rates = self._optimizer_rates()
        if rates is None:
            return []
        now = (rates, self.rejoins)
        if now == self._sent_rates:
            return []
        self._sent_rates = now
        return rates

    def _before_send(self):
        """The framework's checks of a step about to be pushed."""

    def _received(self):
        """The core wrote a new model into weights_host (or is writing it, while _arriving)."""
        self.storage.received()

    def _arrived(self):
        """A model that was arriving is whole."""

    def _note_pulled(self):
        """A model arrived (the framework may note the parameters' state)."""

    def report_out_of_memory(self):
        """The step ran out of memory: no gradient; the server lowers this worker's batch."""
        step = self._require_step()
        if self._round is not None:  # a local round is given up whole: the server lowers its batch
            step = replace(step, batch_size=self._round.samples)
            if self._round.start is not None:  # the round's steps are undone: the model it was given
                self._restore(self._round.start)
            self._round = None
        self._cancel_push()  # the server changes nothing for it
        self.storage.zero_grad()
        report = _core.StepReport(batch_size=step.batch_size, out_of_memory=True)
        return self._send(report, None, step)

    def report(self, test_accuracy: float, loss: float = 0.0, validation: bool = False):
        """Reports a test accuracy measured on the model this worker holds (nothing trained);
        `validation`: measured on validation data, not a test set (the server's summary says
        validation_accuracy)."""
        self._check_accuracy(test_accuracy)
        if self.stopped.is_set() or not self.worker_id:
            return None
        self.wait_model()
        self._cancel_push()  # one push at a time per session: the step's gradient goes whole
        end = _core.StepEnd(train_loss=loss, test_accuracy=test_accuracy, accuracy_is_validation=validation)
        report = _core.StepReport(report_only=True, end=end)
        self.metrics.accuracy(test_accuracy)
        outcome, reply = self._call(self._core.push, report, None, self.storage.weights_host)
        if outcome == "rejoined":
            self.pull()
        return reply if outcome == "replied" else None

    @staticmethod
    def _check_accuracy(a):
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"test_accuracy {a} is not in [0, 1]")

    def _require_step(self) -> Step:
        if self._step is None:
            raise RuntimeError("push() outside a step: iterate over the worker first")
        return self._step

    def _send(self, report, update, step: Step, end=None):
        """The step's push: whole (`report`), or the end of the one begun (`end`)."""
        self._step = None
        if self.stopped.is_set():
            self._cancel_push()
            return None
        comm_start = time.perf_counter()
        if end is not None:
            self._open_push = False
            outcome, reply, changed = self._call(self._core.finish_push, end, self.storage.weights_host,
                                                 self._overlap)
            self._arriving = self._overlap and outcome == "replied"
        else:
            self._cancel_push()
            # The previous iteration's communication: the server takes out its own wait and
            # the controller learns this worker's link time from the rest.
            report.communication_seconds = self._last_comm_seconds
            report.emulation_overruns = self._overruns()
            outcome, reply, changed = self._call(self._core.push_pull, report, update, self.storage.weights_host)
        if outcome == "rejoined":  # the step's gradient was of an old session: train it again
            self.pull()
            self._last_comm_seconds = 0.0
            return None
        self._last_comm_seconds = time.perf_counter() - comm_start
        self.metrics.communication(self._last_comm_seconds)
        step.epoch_end = bool(self.dataset_size) and self.epoch > step.epoch
        if outcome == "stop":
            self.stopped.set()
            self._log("the server stopped the job")
            return reply
        if changed:
            self._received()
        self._note_pulled()
        self.last_reply = reply
        out_of_memory = report is not None and report.out_of_memory
        if not out_of_memory:
            self.samples_seen += step.batch_size
        self.iteration += 1
        self.metrics.pushed(step.batch_size, out_of_memory)
        self.metrics.totals(self._overruns(), self.rejoins)
        return reply
