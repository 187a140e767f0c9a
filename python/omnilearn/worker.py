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
rejoin, stop), sends heartbeats, and rides out server restarts like the C++ worker
(worker/session.h): transient errors are retried with capped, jittered backoff for up to
`reconnect_timeout` seconds; an expired session joins again under the same name.
"""

import os
import random
import socket
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Optional

import grpc
import numpy as np
import torch

from omnilearn import _stubs
from omnilearn.codec import Assembler, FlatModel, chunks
from omnilearn.emulation import EmulatedDevice

pb2, pb2_grpc = _stubs.load()

_TRANSIENT = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
_NO_VERSION = (1 << 64) - 1  # "holds no model yet"


class ServerError(RuntimeError):
    """The server refused a call for good (another model, a name in use, bad credentials...)."""

    def __init__(self, call: str, error: grpc.RpcError):
        self.code = error.code()
        super().__init__(f"{call}: {self.code.name}: {error.details()}")


class _Rejoined(Exception):
    """The session was re-established: the step's gradient is of an old model."""


@dataclass
class Step:
    """One iteration to train: a mini-batch of `batch_size` samples (`samples`, when the
    worker gave a dataset_size: the ids the server assigned, in order)."""
    iteration: int
    batch_size: int
    samples: Optional[torch.Tensor]
    epoch: int
    model_version: int


class Worker:
    def __init__(self, server: str, model: torch.nn.Module, *, name: Optional[str] = None,
                 host: Optional[str] = None, dataset_size: int = 0, epochs: float = 0.0,
                 max_iterations: int = 0, max_batch_size: int = 0, slowdown: float = 1.0,
                 auth_token: Optional[str] = None, auth_token_file: Optional[str] = None,
                 tls_ca: Optional[str] = None, tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None, rpc_timeout: float = 600.0,
                 reconnect_timeout: float = 300.0, emulate_device: Optional[str] = None, log=None):
        if epochs > 0 and dataset_size <= 0:
            raise ValueError("epochs needs dataset_size (the training set's sample count)")
        if epochs < 0 or max_iterations < 0 or dataset_size < 0 or max_batch_size < 0:
            raise ValueError("epochs, max_iterations, dataset_size and max_batch_size must be >= 0")
        if not slowdown >= 1.0:
            raise ValueError("slowdown must be >= 1")
        # An emulated device (omnilearn.emulation) sets the whole step time; slowdown is for real compute.
        if emulate_device and slowdown != 1.0:
            raise ValueError("emulate_device sets the whole step time: leave slowdown (real compute) out")
        self.model = model
        self.flat = FlatModel(model)
        self.name = name or f"{socket.gethostname()}-{os.getpid()}"
        self.epochs = epochs
        self.max_iterations = max_iterations
        self.dataset_size = dataset_size
        self.slowdown = slowdown
        # Its clock is this module's (looked up at each call), so a test's fake time drives both.
        self.emulation = EmulatedDevice(emulate_device, seed=zlib.crc32(self.name.encode()),
                                        now=lambda: time.perf_counter(),
                                        sleep=lambda s: time.sleep(s)) if emulate_device else None
        self._profile = None  # the emulated profile last logged
        self.rpc_timeout = rpc_timeout
        self.reconnect_timeout = reconnect_timeout
        self._log = log or (lambda line: print(f"[{self.name}] {line}", flush=True))
        self._device = next(p.device for _, p, b in self.flat.entries if not b)
        self._header = pb2.JoinHeader(name=self.name, host=host or socket.gethostname(),
                                      layout=self.flat.layout(pb2), max_batch_size=max_batch_size,
                                      dataset_size=dataset_size)
        if self._device.type == "cuda":
            self._header.device = pb2.DEVICE_CUDA
            self._header.device_memory_bytes = torch.cuda.get_device_properties(self._device).total_memory
        else:
            self._header.device = pb2.DEVICE_CPU
        token = auth_token
        if auth_token_file:
            with open(auth_token_file) as f:
                token = f.read().strip()
            if not token:
                raise ValueError(f"{auth_token_file} holds no token")
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        if tls_ca or tls_cert or tls_key:
            if bool(tls_cert) != bool(tls_key):
                raise ValueError("tls_cert and tls_key go together")
            read = lambda p: open(p, "rb").read() if p else None  # noqa: E731
            creds = grpc.ssl_channel_credentials(read(tls_ca), read(tls_key), read(tls_cert))
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(server, creds, options)
        else:
            self._channel = grpc.insecure_channel(server, options)
        self._stub = pb2_grpc.ParameterServerStub(self._channel)
        self._push_pull = True  # until a server answers UNIMPLEMENTED

        self.worker_id = 0
        self._secret = b""
        self._lease = 60.0
        self.batch_size = 0
        self._samples = []
        self.model_version = _NO_VERSION
        self.global_samples = 0
        self.mode = pb2.MODE_UNSPECIFIED
        self.rejoins = 0
        self.iteration = 0
        self.samples_seen = 0
        self.finished = False
        self.stopped = threading.Event()  # the server said stop
        self._rejoin = threading.Event()  # a heartbeat learnt the session is gone
        self._closing = threading.Event()
        self._heartbeat = None
        self._step = None  # the step yielded and not yet pushed
        self._t0 = None
        self._last_comm_seconds = 0.0  # the last iteration's, from push() to the reply
        try:
            self._hook = model.register_forward_pre_hook(self._on_forward)
        except RuntimeError:  # a TorchScript module takes no hooks: steps are timed from their start
            self._hook = None
        self.last_reply = None

    # ------------------------------------------------------------------ session
    def _call(self, method, request, **kw):
        return method(request, timeout=self.rpc_timeout, metadata=self._metadata, **kw)

    def _join_once(self):
        header = pb2.JoinHeader()
        header.CopyFrom(self._header)
        header.resume_worker_id = self.worker_id
        header.resume_secret = self._secret

        def requests(with_params):
            header.has_initial_parameters = with_params
            yield pb2.JoinRequest(header=header)
            if with_params:
                for c in chunks(self.flat, self.flat.values(), pb2):
                    yield pb2.JoinRequest(chunk=c)
        try:
            r = self._call(self._stub.Join, requests(False))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            r = self._call(self._stub.Join, requests(True))  # the server has no model yet: ours
        if r.action == pb2.ACTION_STOP:
            self.stopped.set()
            return
        self.worker_id, self._secret = r.worker_id, r.session_secret
        self._lease = max(0.1, r.lease_seconds)
        self.batch_size, self._samples = r.batch_size, list(r.samples)
        self.global_samples, self.mode = r.global_samples, r.mode
        self.model_version = _NO_VERSION
        self._rejoin.clear()

    def _join_until_back(self, cause: Optional[grpc.RpcError] = None):
        start = time.monotonic()
        next_note, backoff, last = start, 0.2, cause
        first = self.worker_id == 0
        attempt = 0
        while True:
            if attempt > 0 or (cause is not None and cause.code() in _TRANSIENT):
                now = time.monotonic()
                if now - start >= self.reconnect_timeout:
                    raise ServerError("the server did not come back within "
                                      f"{self.reconnect_timeout:.0f} s; last error", last)
                if now >= next_note:
                    self._log(f"waiting for the server ({last.code().name}: {last.details()}): "
                              f"retrying for up to {self.reconnect_timeout - (now - start):.0f} s more")
                    next_note = now + 10
                time.sleep(backoff * random.uniform(0.5, 1.0))
                backoff = min(2.0, backoff * 2)
            attempt += 1
            try:
                self._join_once()
                break
            except grpc.RpcError as e:
                if e.code() not in _TRANSIENT:
                    raise ServerError("Join", e) from None
                last = e
        if self.stopped.is_set():
            return
        if not first:
            self.rejoins += 1
            self._log(f"rejoined as worker {self.worker_id} after {time.monotonic() - start:.1f} s: "
                      f"batch {self.batch_size}, {self.global_samples} samples trained so far")
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(target=self._heartbeat_loop, daemon=True,
                                               name=f"omnilearn-heartbeat-{self.name}")
            self._heartbeat.start()

    def _heartbeat_loop(self):
        while not self._closing.wait(self._lease / 3):
            wid = self.worker_id
            try:
                r = self._call(self._stub.Heartbeat,
                               pb2.HeartbeatRequest(worker_id=wid, session_secret=self._secret))
            except grpc.RpcError:
                continue  # outages are the training thread's to handle
            if r.action == pb2.ACTION_STOP:
                self.stopped.set()
            elif r.action == pb2.ACTION_REJOIN and self.worker_id == wid:
                self._rejoin.set()

    def _receive_model(self, messages):
        """Reads a PullHeader and its chunks (of Pull's or PushPull's stream); loads the
        model when it moved."""
        assembler, version = None, None
        for m in messages:
            kind = m.WhichOneof("kind")
            if kind == "reply":
                raise ValueError("PushPull sent a second reply")
            if kind == "header":
                version = m.header.model_version
                if not m.header.up_to_date:
                    assembler = Assembler(self.flat)
            elif kind == "chunk":
                if assembler is None:
                    raise ValueError("a model chunk before the model's header")
                assembler.add(m.chunk)
        if assembler is not None:
            self.flat.load(assembler.finish())
        if version is not None:
            self.model_version = version

    def _retry(self, what, call):
        """Runs call() until it works, rejoining on NOT_FOUND and transient errors."""
        while True:
            try:
                return call()
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND and e.code() not in _TRANSIENT:
                    raise ServerError(what, e) from None
                self._join_until_back(e)
                if self.stopped.is_set():
                    return None
                raise _Rejoined() from None

    def pull(self):
        """Brings the model to the server's current version."""
        while not self.stopped.is_set():
            try:
                return self._retry("Pull", lambda: self._receive_model(self._call(
                    self._stub.Pull, pb2.PullRequest(worker_id=self.worker_id, have_version=self.model_version,
                                                      session_secret=self._secret))))
            except _Rejoined:
                continue

    def join(self):
        self._log("joining the server (the first round waits until the server's --num_workers have joined)")
        self._join_until_back()
        if self.stopped.is_set():
            self._log("the server is shutting down: nothing to train")
            return
        self._log(f"joined as worker {self.worker_id}: device={self._device.type} batch={self.batch_size} "
                  f"mode={pb2.Mode.Name(self.mode)} samples so far={self.global_samples}")
        self.pull()

    def leave(self, finished: bool = False):
        """Best effort: tells the server this worker is gone (finished: it completed its training)."""
        self._closing.set()
        if self.worker_id:
            try:
                self._call(self._stub.Leave, pb2.LeaveRequest(worker_id=self.worker_id, finished=finished,
                                                              session_secret=self._secret))
            except grpc.RpcError:
                pass

    def close(self):
        self._closing.set()
        if self._hook is not None:
            self._hook.remove()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)
        self._channel.close()

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

    # ------------------------------------------------------------------ training
    def _done(self) -> bool:
        if self.max_iterations and self.iteration >= self.max_iterations:
            return True
        return bool(self.epochs) and self.global_samples >= self.epochs * self.dataset_size

    @property
    def epoch(self) -> int:
        return self.global_samples // self.dataset_size if self.dataset_size else 0

    def __iter__(self):
        while not self.stopped.is_set():
            if self._done():
                self.finished = True
                return
            if self._step is not None:
                raise RuntimeError("call push() (or report_out_of_memory()) for each step before the next")
            if self._rejoin.is_set():
                self._join_until_back()
                self.pull()
                continue
            ids = [i for span in self._samples for i in span.ids]
            if ids and any(i >= self.dataset_size for i in ids):
                raise ValueError(f"the server assigned sample {max(ids)} of a data set of {self.dataset_size}")
            samples = torch.tensor(ids, dtype=torch.int64) if ids else None
            epoch = self._samples[0].epoch if self._samples else self.epoch
            self.flat.zero_grad()
            self._step = Step(self.iteration, len(ids) if ids else self.batch_size, samples, epoch,
                              self.model_version)
            self._t0 = None if self._hook is not None else time.perf_counter()
            yield self._step
            if self._step is not None:
                raise RuntimeError("the loop body must call push() (or report_out_of_memory()) for each step")

    def _on_forward(self, module, inputs):
        if self._step is not None and self._t0 is None and torch.is_grad_enabled():
            self.start_compute()

    def start_compute(self):
        """Marks the start of the step's compute time (forward + loss + backward). Called by
        the model's first forward of a step; call it yourself for a TorchScript model (which
        takes no hooks: its steps are otherwise timed from the moment they are handed out)."""
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        self._t0 = time.perf_counter()

    def _compute_seconds(self) -> float:
        if self._t0 is None:
            raise RuntimeError("push() without a forward pass of the model in this step")
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        if self.emulation is not None:
            return self._emulated_seconds()
        real = time.perf_counter() - self._t0
        if self.slowdown > 1.0:
            time.sleep((self.slowdown - 1.0) * real)
        return real * self.slowdown

    def _emulated_seconds(self) -> float:
        epoch = self.global_samples / self.dataset_size if self.dataset_size else 0.0
        profile = self.emulation.at(epoch)
        if profile != self._profile:
            self._profile = profile
            self._log(f"emulated device {profile.fixed_ms:g} ms + {profile.ms_per_sample:g} ms/sample, "
                      f"jitter {profile.jitter:g}, from epoch {epoch:.2f}")
        overruns = self.emulation.overruns
        reported, real = self.emulation.pace(self._t0, self._step.batch_size, epoch)
        if self.emulation.overruns == 1 and overruns == 0:
            self._log(f"warning: the real compute of a step ({1000 * real:.1f} ms at batch {self._step.batch_size}) "
                      f"took longer than its emulated time: the emulation is not faithful for such steps "
                      f"(counted in Worker.emulation.overruns); give the device a larger time per sample")
        return reported

    def push(self, loss, test_accuracy: Optional[float] = None):
        """Sends the step's gradients (after loss.backward()) and loads the new model.

        Returns the server's reply, or None when the step was dropped (the session was
        re-established: the next step trains again on the new model) or the server stopped.
        """
        step = self._require_step()
        header = pb2.PushHeader(batch_size=step.batch_size, compute_seconds=self._compute_seconds(),
                                iteration=step.iteration, train_loss=float(loss),
                                samples_seen=self.samples_seen + step.batch_size)
        if test_accuracy is not None:
            self._check_accuracy(test_accuracy)
            header.has_test_accuracy, header.test_accuracy = True, test_accuracy
        return self._send(header, self.flat.update(), step)

    def report_out_of_memory(self):
        """The step ran out of memory: no gradient; the server lowers this worker's batch."""
        step = self._require_step()
        self.flat.zero_grad()
        header = pb2.PushHeader(batch_size=step.batch_size, out_of_memory=True, iteration=step.iteration,
                                samples_seen=self.samples_seen)
        return self._send(header, None, step)

    def report(self, test_accuracy: float, loss: float = 0.0):
        """Reports a test accuracy measured on the model this worker holds (nothing trained)."""
        self._check_accuracy(test_accuracy)
        if self.stopped.is_set() or not self.worker_id:
            return None
        header = pb2.PushHeader(report_only=True, has_test_accuracy=True, test_accuracy=test_accuracy,
                                train_loss=loss, worker_id=self.worker_id, model_version=self.model_version,
                                session_secret=self._secret, iteration=self.iteration)
        try:
            return self._retry("Push", lambda: self._call(self._stub.Push, iter([pb2.PushRequest(header=header)])))
        except _Rejoined:
            return None

    @staticmethod
    def _check_accuracy(a):
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"test_accuracy {a} is not in [0, 1]")

    def _require_step(self) -> Step:
        if self._step is None:
            raise RuntimeError("push() outside a step: iterate over the worker first")
        return self._step

    def _send(self, header, update: Optional[np.ndarray], step: Step):
        self._step = None
        if self.stopped.is_set():
            return None
        header.worker_id, header.model_version, header.session_secret = (self.worker_id, self.model_version,
                                                                         self._secret)
        # The previous iteration's communication: the server takes out its own wait and the
        # controller learns this worker's link time from the rest.
        header.communication_seconds = self._last_comm_seconds
        comm_start = time.perf_counter()

        def requests():
            yield pb2.PushRequest(header=header)
            if update is not None:
                for c in chunks(self.flat, update, pb2):
                    yield pb2.PushRequest(chunk=c)

        def push_pull():
            if self._push_pull:
                try:
                    responses = self._call(self._stub.PushPull, requests())
                    first = next(responses)
                    if first.WhichOneof("kind") != "reply":
                        raise ValueError("PushPull answered without a reply first")
                    if first.reply.action == pb2.ACTION_CONTINUE or first.reply.action == pb2.ACTION_PULL:
                        self._receive_model(responses)  # the rest: a PullHeader and its chunks
                    return first.reply
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    self._push_pull = False  # an older server: Push, then Pull
            reply = self._call(self._stub.Push, requests())
            if reply.action in (pb2.ACTION_CONTINUE, pb2.ACTION_PULL):
                self._receive_model(self._call(self._stub.Pull, pb2.PullRequest(
                    worker_id=self.worker_id, have_version=self.model_version, session_secret=self._secret)))
            return reply

        try:
            reply = self._retry("Push", push_pull)
        except _Rejoined:
            self.pull()
            self._last_comm_seconds = 0.0
            return None
        self._last_comm_seconds = time.perf_counter() - comm_start
        if reply is None:  # stopped while rejoining
            return None
        self.last_reply = reply
        self.global_samples = max(self.global_samples, reply.global_samples)
        if reply.action == pb2.ACTION_STOP:
            self.stopped.set()
            self._log("the server stopped the job")
            return reply
        if reply.action == pb2.ACTION_REJOIN:
            self._join_until_back()
            self.pull()
            return None
        if reply.next_batch_size > 0:
            self.batch_size = reply.next_batch_size
        if reply.samples:
            self._samples = list(reply.samples)
        if not header.out_of_memory:
            self.samples_seen += step.batch_size
        self.iteration += 1
        return reply

