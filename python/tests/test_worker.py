"""The Worker against an in-process fake server (a Python gRPC servicer on 127.0.0.1):
join, one round trip per step, the server's actions, faults, and misuse. The clock the
worker times steps and backs off with is a fake one, driven by the tests."""

import os
import subprocess
import tempfile
import threading
import unittest
import warnings
from concurrent import futures
from unittest import mock

import grpc
import numpy as np
import torch
from torch.nn import functional as F

import fake_codec as codec
from omnilearn import flat_model, models
from omnilearn.run import free_port
from omnilearn import _stubs, session as session_mod, worker as worker_mod
from omnilearn.worker import ServerError, Worker

pb2, pb2_grpc = _stubs.load()
SECRET = b"s3cret"


class FakeTime:
    """perf_counter/monotonic that move only when sleep() or the test moves them."""

    def __init__(self):
        self.now = 100.0
        self.slept = []

    def perf_counter(self):
        return self.now

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


class FakeServer(pb2_grpc.ParameterServerServicer):
    """A tiny parameter server: w -= 0.5 * grad per push, 4 samples per batch."""

    def __init__(self, model):
        self.flat = flat_model.FlatModel(model)  # the server's copy, same layout
        self.have_model = False
        self.version = 0
        self.next_id = 1
        self.joins, self.pushes, self.leaves, self.calls = [], [], [], []
        self.faults = {}  # call name -> list of (code, message[, then]) to answer, in order (then() runs first)
        self.on_push = None  # called (on the server's thread) as a push arrives
        self.before_last_chunk = None  # PushPull: called before the model's last chunk is sent
        self.push_actions = {}  # push number (1-based) -> action to reply with
        self.token = None
        self.lock = threading.Lock()
        self.sample = 0
        self.trailers = False  # announce push trailers (pushes during backward)
        self.arrivals = []     # per push: the tensor names of its chunks in order, then "<trailer>"
        self.on_chunk = None   # called (on the server's thread) with each chunk's tensor name
        self.gradients = []    # per applied push: the gradient assembled
        self.abandoned = []    # headers of streamed pushes the worker gave up before their trailer
        self.idle_replies = set()  # push numbers (1-based) answered "idle": the job's samples all handed out
        self.global_at = {}        # push number -> global_samples of its reply (default 4 per push)
        self.dataset = 0           # a data set's size: the samples' epochs follow global_samples
        self.local_steps = 0       # JoinResponse.local_steps (the server's --local_steps)
        self.not_applied = set()   # push numbers (1-based) answered "not applied", the model unchanged

    def _check(self, name, context, worker_id=None, secret=None):
        self.calls.append(name)
        if self.token and ("authorization", f"Bearer {self.token}") not in context.invocation_metadata():
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        if self.faults.get(name):
            code, message, *then = self.faults[name].pop(0)
            for f in then:
                f()
            context.abort(code, message)
        if worker_id is not None and (worker_id != self.next_id - 1 or secret != SECRET + bytes([worker_id])):
            context.abort(grpc.StatusCode.PERMISSION_DENIED, "wrong session")

    def _samples(self, n=4, global_samples=0):
        ids = list(range(self.sample, self.sample + n))
        self.sample += n
        # With a data set's size: the epoch the job is in once global_samples are trained.
        return [pb2.SampleSpan(epoch=global_samples // self.dataset if self.dataset else 0, ids=ids)]

    def Join(self, request_iterator, context):
        with self.lock:
            header = next(request_iterator).header
            self._check("Join", context)
            if not self.have_model and not header.has_initial_parameters:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the server has no model yet")
            if header.has_initial_parameters:
                a = codec.Assembler(self.flat)
                for m in request_iterator:
                    a.add(m.chunk)
                self.flat.load(a.finish())
                self.have_model = True
            self.joins.append(header)
            wid = self.next_id
            self.next_id += 1
            return pb2.JoinResponse(worker_id=wid, lease_seconds=60, mode=pb2.MODE_ASYNC, batch_size=4,
                                    samples=self._samples(),
                                    session_secret=SECRET + bytes([wid]), action=pb2.ACTION_CONTINUE,
                                    push_trailer=self.trailers, local_steps=self.local_steps)

    def _model(self, have_version):
        if have_version == self.version:
            yield pb2.PullHeader(model_version=self.version, up_to_date=True)
            return
        yield pb2.PullHeader(model_version=self.version)
        yield from codec.chunks(self.flat, self.flat.values(), pb2, max_bytes=1 << 16)

    def Pull(self, request, context):
        with self.lock:
            self._check("Pull", context, request.worker_id, request.session_secret)
            out = [pb2.PullResponse(header=m) if isinstance(m, pb2.PullHeader) else pb2.PullResponse(chunk=m)
                   for m in self._model(request.have_version)]
        yield from out

    def _push(self, request_iterator, context, name):
        header = next(request_iterator).header
        self._check(name, context, header.worker_id, header.session_secret)
        if self.on_push:
            self.on_push()
        a = codec.Assembler(self.flat)
        arrived = []
        for m in request_iterator:
            if m.HasField("trailer"):
                arrived.append("<trailer>")
                header.compute_seconds, header.train_loss = m.trailer.compute_seconds, m.trailer.train_loss
                break
            arrived.append(m.chunk.name)
            if self.on_chunk:
                self.on_chunk(m.chunk.name)
            a.add(m.chunk)
        if header.trailer and arrived[-1:] != ["<trailer>"]:
            # A streamed push given up by the worker (cancelled before its trailer): as the
            # real server, the fake takes nothing of it. Whether its header got here before
            # the cancel is a race the tests must not depend on.
            self.abandoned.append(header)
            context.abort(grpc.StatusCode.CANCELLED, "the push stream ended before its trailer")
        self.arrivals.append(arrived)
        self.pushes.append(header)
        action = self.push_actions.get(len(self.pushes), pb2.ACTION_CONTINUE)
        applied = action == pb2.ACTION_CONTINUE and not header.idle and len(self.pushes) not in self.not_applied
        if applied and not (header.out_of_memory or header.report_only):
            grad = a.finish()
            self.gradients.append(grad)
            self.flat.load(self.flat.values() - 0.5 * grad)
            self.version += 1
        batch = 2 if header.out_of_memory else 4
        n = len(self.pushes)
        idle = n in self.idle_replies
        done = self.global_at.get(n, 4 * n)
        return pb2.PushResponse(action=action, next_batch_size=batch, model_version=self.version,
                                applied=applied, global_samples=done,
                                samples=[] if idle else self._samples(batch, done), idle=idle), header

    def Push(self, request_iterator, context):
        with self.lock:
            return self._push(request_iterator, context, "Push")[0]

    def PushPull(self, request_iterator, context):
        with self.lock:
            reply, header = self._push(request_iterator, context, "PushPull")
            out = [pb2.PushPullResponse(reply=reply)]
            if reply.action == pb2.ACTION_CONTINUE:
                for m in self._model(header.model_version):
                    out.append(pb2.PushPullResponse(header=m) if isinstance(m, pb2.PullHeader)
                               else pb2.PushPullResponse(chunk=m))
        for i, m in enumerate(out):
            if i == len(out) - 1 and m.HasField("chunk") and self.before_last_chunk:
                self.before_last_chunk()
            yield m

    def Heartbeat(self, request, context):
        self._check("Heartbeat", context)
        return pb2.HeartbeatResponse(action=pb2.ACTION_CONTINUE)

    def Leave(self, request, context):
        self._check("Leave", context, request.worker_id, request.session_secret)
        self.leaves.append(request)
        return pb2.LeaveResponse()


class Pairs(torch.utils.data.Dataset):
    """A map-style data set that is not a TensorDataset."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.model = models.make("mlp", seed=1)
        self.fake = FakeServer(models.make("mlp", seed=2))
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb2_grpc.add_ParameterServerServicer_to_server(self.fake, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()
        self.clock = FakeTime()
        for module in (session_mod, worker_mod):  # the session's clock, and the arrival hooks'
            patcher = mock.patch.object(module, "time", self.clock)
            patcher.start()
            self.addCleanup(patcher.stop)
        self.addCleanup(self.server.stop, None)
        self.x = torch.randn(64, 1, 28, 28)
        self.y = torch.randint(0, 10, (64,))

    def make_worker(self, **kw):
        kw.setdefault("max_iterations", 3)
        return Worker(self.address, self.model, name="py0", dataset_size=64, rpc_timeout=30,
                      log=lambda line: None, **kw)

    def train(self, w, data_seconds=0.0, compute_seconds=0.25):
        steps = []
        for step in w:
            steps.append(step)
            self.clock.now += data_seconds  # loading the batch: not the worker's compute time
            loss = F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples])
            loss.backward()
            self.clock.now += compute_seconds
            w.push(loss)
        return steps

    def assert_same_model(self):
        self.assertTrue(np.array_equal(flat_model.FlatModel(self.model).values(), self.fake.flat.values()))

    def test_a_worker_without_samples_idles_until_the_job_count_is_reached(self):
        self.fake.idle_replies = {3, 4}  # the third step's reply hands out nothing more
        self.fake.global_at = {3: 12, 4: 12, 5: 16}  # the others train the last samples meanwhile
        with self.make_worker(max_iterations=0, epochs=0.25) as w:  # 16 of 64 samples
            steps = self.train(w)
            self.assertTrue(w.finished)
        self.assertEqual(self.fake.joins[0].job_samples, 16)
        self.assertEqual(len(steps), 3)
        self.assertEqual([p.idle for p in self.fake.pushes], [False, False, False, True, True])
        self.assertEqual([p.batch_size for p in self.fake.pushes[3:]], [0, 0])
        self.assertEqual(len(self.fake.gradients), 3)

    def test_local_steps_step_the_programs_optimizer_and_push_the_rounds_pseudo_gradient(self):
        """--local_steps=2: each batch of 4 is two steps of 2 samples with the program's own
        SGD, then one push of the round's pseudo-gradient (its start less its end)."""
        self.fake.local_steps = 2
        ref = models.make("mlp", seed=1)  # the same program in one process
        ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.5)
        start = torch.cat([p.detach().reshape(-1) for p in ref.parameters()]).clone()
        for ids in ([0, 1], [2, 3]):
            ref_opt.zero_grad()
            F.cross_entropy(ref(self.x[ids]), self.y[ids]).backward()
            ref_opt.step()
        expected = (start - torch.cat([p.detach().reshape(-1) for p in ref.parameters()])).numpy()
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.5)
        with self.make_worker(max_iterations=2, optimizer=opt) as w:
            self.assertEqual(w.local_steps, 2)
            steps = self.train(w)
        self.assertEqual([s.samples.tolist() for s in steps], [[0, 1], [2, 3], [4, 5], [6, 7]])
        self.assertEqual([s.batch_size for s in steps], [2, 2, 2, 2])
        self.assertEqual([p.batch_size for p in self.fake.pushes], [4, 4])  # a round's samples each
        self.assertEqual(len(self.fake.gradients), 2)
        np.testing.assert_allclose(self.fake.gradients[0][:len(expected)], expected, rtol=1e-5, atol=1e-7)
        self.assert_same_model()  # the round's end: the server's model, loaded

    def test_out_of_memory_in_a_local_round_gives_it_up_and_undoes_its_steps(self):
        self.fake.local_steps = 2
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        with self.make_worker(max_iterations=1, optimizer=opt) as w:
            for i, step in enumerate(w):
                if i == 0:  # the round's first step: stepped locally
                    F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples]).backward()
                    w.push(1.0)
                    changed = flat_model.FlatModel(self.model).values().copy()
                else:  # its second runs out of memory: the round is given up whole
                    w.report_out_of_memory()
                    break
        oom = self.fake.pushes[-1]
        self.assertTrue(oom.out_of_memory)
        self.assertEqual(oom.batch_size, 4)  # the round's samples, as the server gave them
        self.assertEqual(len(self.fake.gradients), 0)
        self.assertFalse(np.array_equal(changed, self.fake.flat.values()))
        self.assert_same_model()  # the first step undone: the model the server gave

    def test_a_local_round_not_applied_is_undone_the_next_starts_from_the_servers_model(self):
        self.fake.local_steps = 2
        self.fake.not_applied = {1}  # the first round's push: not applied, no new model
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        with self.make_worker(max_iterations=1, optimizer=opt) as w:
            self.train(w)
        self.assertEqual(len(self.fake.pushes), 1)
        self.assertEqual(len(self.fake.gradients), 0)
        self.assert_same_model()  # its two steps undone: the model the server holds

    def test_local_steps_need_the_programs_optimizer(self):
        self.fake.local_steps = 4
        with self.assertRaisesRegex(ValueError, "--local_steps or --local_batch.*pass it: Worker\\(..., optimizer=opt\\)"):
            with self.make_worker():
                pass
        self.assertEqual(len(self.fake.leaves), 1)  # it told the server it left

    def test_a_step_that_ends_the_jobs_epoch_says_so_after_its_push(self):
        # A data set of 16: the pushes' replies put the job at 8, 16 (epoch 0 ends: another
        # worker's samples were in the same round), 20, 32 (epoch 1 and the job end).
        self.fake.global_at = {1: 8, 2: 16, 3: 20, 4: 32}
        self.fake.dataset = 16
        ends = []
        with Worker(self.address, self.model, name="py0", dataset_size=16, epochs=2, rpc_timeout=30,
                    log=lambda line: None) as w:
            for step in w:
                self.assertFalse(step.epoch_end)  # known only once the push's reply is in
                F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples]).backward()
                w.push(0.5)
                ends.append((step.epoch, step.epoch_end))
        self.assertEqual(ends, [(0, False), (0, True), (1, False), (1, True)])

    def test_joins_with_its_model_then_trains_the_assigned_samples_in_one_round_trip_each(self):
        with self.make_worker() as w:
            steps = self.train(w, data_seconds=3.0)
            self.assertTrue(w.finished)
        self.assertEqual([j.has_initial_parameters for j in self.fake.joins], [True])
        self.assertEqual(self.fake.calls.count("Join"), 2)  # asked without parameters first
        self.assertEqual([s.samples.tolist() for s in steps], [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
        self.assertEqual([p.compute_seconds for p in self.fake.pushes], [0.25] * 3)  # data loading untimed
        self.assertEqual([p.model_version for p in self.fake.pushes], [0, 1, 2])
        self.assertEqual([p.batch_size for p in self.fake.pushes], [4, 4, 4])
        self.assertEqual(self.fake.calls.count("PushPull"), 3)
        self.assertEqual(self.fake.calls.count("Push") + self.fake.calls.count("Pull"), 1)  # the first pull
        self.assert_same_model()
        self.assertEqual([(l.worker_id, l.finished) for l in self.fake.leaves], [(1, True)])

    def test_a_second_worker_does_not_send_parameters_and_takes_the_servers_model(self):
        self.fake.have_model = True
        with self.make_worker(max_iterations=1) as w:
            self.assert_same_model()
            self.train(w)
        self.assertEqual([j.has_initial_parameters for j in self.fake.joins], [False])

    def test_rejoin_action_rejoins_with_its_secret_and_trains_the_step_again(self):
        self.fake.push_actions[2] = pb2.ACTION_REJOIN
        with self.make_worker() as w:
            steps = self.train(w)
        self.assertEqual([s.iteration for s in steps], [0, 1, 1, 2])
        second = self.fake.joins[-1]
        self.assertEqual((second.resume_worker_id, second.resume_secret), (1, SECRET + bytes([1])))
        self.assertEqual(w.rejoins, 1)
        self.assert_same_model()

    def test_a_lost_session_or_an_outage_is_ridden_out(self):
        self.fake.faults["PushPull"] = [(grpc.StatusCode.NOT_FOUND, "no such worker"),
                                        (grpc.StatusCode.UNAVAILABLE, "restarting")]
        self.fake.faults["Join"] = [(grpc.StatusCode.UNAVAILABLE, "down")] * 3
        with self.make_worker() as w:
            self.train(w)
        self.assertEqual(len(self.fake.joins), 3)
        self.assertGreaterEqual(len(self.clock.slept), 3)  # backed off on the fake clock
        self.assertTrue(all(s <= 2.0 for s in self.clock.slept))
        self.assert_same_model()

    def test_the_outage_gives_up_after_reconnect_timeout(self):
        # A server lost after the join (one never reached gives up sooner: see below).
        with self.assertRaisesRegex(ServerError, "did not come back within 5 s"):
            with self.make_worker(reconnect_timeout=5) as w:
                self.fake.faults["PushPull"] = [(grpc.StatusCode.UNAVAILABLE, "down")]
                self.fake.faults["Join"] = [(grpc.StatusCode.UNAVAILABLE, "down")] * 1000
                self.train(w)

    def test_stop_ends_the_loop_without_finishing(self):
        self.fake.push_actions[2] = pb2.ACTION_STOP
        with self.make_worker(max_iterations=10) as w:
            steps = self.train(w)
            self.assertFalse(w.finished)
        self.assertEqual(len(steps), 2)
        self.assertEqual([l.finished for l in self.fake.leaves], [False])

    def test_a_server_without_pushpull_is_named_as_too_old(self):
        self.fake.faults["PushPull"] = [(grpc.StatusCode.UNIMPLEMENTED, "unknown method")]
        with self.assertRaisesRegex(ServerError, "older than this worker's, upgrade it"):
            with self.make_worker() as w:
                self.train(w)
        self.assertEqual(self.fake.calls.count("Push"), 0)

    def test_refusals_are_errors_with_the_servers_reason(self):
        # A name held by another live session is waited out within the reconnect window;
        # one that stays taken is an error with the server's reason.
        self.fake.faults["Join"] = [(grpc.StatusCode.ALREADY_EXISTS, "a live worker is named py0")] * 1000
        with self.assertRaisesRegex(ServerError, "a live worker is named py0.*two workers share a --name"):
            with self.make_worker(reconnect_timeout=1.0):
                pass
        self.fake.faults["Join"] = [(grpc.StatusCode.INVALID_ARGUMENT, "another model")]
        with self.assertRaisesRegex(ServerError, "INVALID_ARGUMENT: another model"):
            with self.make_worker():
                pass

    def test_a_restarted_worker_waits_until_its_old_session_ends(self):
        self.fake.faults["Join"] = [(grpc.StatusCode.ALREADY_EXISTS, "a live worker is named py0")] * 2
        with self.make_worker(reconnect_timeout=30.0) as w:
            self.assertEqual(len(self.train(w)), 3)

    def test_token_is_sent_with_every_call(self):
        self.fake.token = "tok"
        with self.assertRaisesRegex(ServerError, "UNAUTHENTICATED"):
            with self.make_worker():
                pass
        with self.make_worker(auth_token="tok") as w:
            self.train(w)
        self.assert_same_model()

    def test_out_of_memory_report_and_accuracy_report(self):
        with self.make_worker(max_iterations=3) as w:  # an OOM report counts as an iteration
            for step in w:
                if step.batch_size == 4 and step.iteration == 0 and not self.fake.pushes:
                    w.report_out_of_memory()
                    continue
                self.model(self.x[:2]).sum().backward()
                w.push(torch.tensor(1.5), test_accuracy=0.5)
            w.report(0.75)
            w.report(0.625, validation=True)  # a validation accuracy, named apart by the server
        oom, first, second, report, validation = self.fake.pushes
        self.assertTrue(oom.out_of_memory)
        self.assertEqual((first.batch_size, first.train_loss, first.test_accuracy), (2, 1.5, 0.5))
        self.assertTrue(report.report_only and report.test_accuracy == 0.75)
        self.assertFalse(report.accuracy_is_validation or first.accuracy_is_validation)
        self.assertEqual(report.model_version, 2)
        self.assertTrue(validation.report_only and validation.accuracy_is_validation)
        self.assertEqual(validation.test_accuracy, 0.625)

    def test_an_emulated_device_sets_the_step_time_and_reports_it(self):
        # 10 ms + 5 ms per sample: 30 ms for the fake server's 4-sample batches.
        with self.make_worker(emulate_device="10:5") as w:
            self.train(w, compute_seconds=0.002)
            self.assertEqual([round(p.compute_seconds, 9) for p in self.fake.pushes], [0.030] * 3)
            self.assertEqual([round(s, 9) for s in self.clock.slept if round(s, 9) == 0.028], [0.028] * 3)
            self.assertEqual(w.emulation.overruns, 0)
        # Real compute longer than the emulated time: counted, and the real time is reported.
        self.fake.pushes.clear()
        with self.make_worker(emulate_device="10:5", max_iterations=2) as w:
            self.train(w, compute_seconds=0.050)
            self.assertEqual(w.emulation.overruns, 2)
            self.assertIn('omnilearn_trainer_emulation_overruns_total{worker="py0"} 2', w.metrics.exposition())
        self.assertEqual([round(p.compute_seconds, 9) for p in self.fake.pushes], [0.050] * 2)
        # Each push tells the server the overruns so far, its own step's included (a whole push).
        self.assertEqual([p.emulation_overruns for p in self.fake.pushes], [1, 2])
        with self.assertRaisesRegex(ValueError, "leave slowdown"):
            self.make_worker(emulate_device="10:5", slowdown=2)
        with self.assertRaisesRegex(ValueError, "is not FIXED_MS:MS_PER_SAMPLE"):
            self.make_worker(emulate_device="fast")

    def test_python_threads_run_while_a_push_is_in_flight(self):
        in_flight, ticked = threading.Event(), threading.Event()
        ran = []

        def ticker():  # a Python thread (a DataLoader's, say): it needs the GIL to run
            if in_flight.wait(30):
                for _ in range(1000):
                    pass
                ticked.set()
        # The server holds the push until the ticker has run: with the GIL held by the
        # pushing thread it never would.
        self.fake.on_push = lambda: (in_flight.set(), ran.append(ticked.wait(30)))
        t = threading.Thread(target=ticker)
        t.start()
        with self.make_worker(max_iterations=1) as w:
            self.train(w)
        t.join(30)
        self.assertEqual(ran, [True])

    def test_a_dataloader_with_worker_processes_loads_each_steps_assigned_samples(self):
        with self.make_worker() as w:
            loader = torch.utils.data.DataLoader(Pairs(self.x, self.y), batch_sampler=w.batch_sampler(parts=2),
                                                 num_workers=2, persistent_workers=True)
            seen = []
            for step, (x, y) in w.batches(loader):
                self.assertTrue(torch.equal(x, self.x[step.samples]) and torch.equal(y, self.y[step.samples]))
                seen.append(step.samples.tolist())
                loss = F.cross_entropy(self.model(x), y)
                loss.backward()
                w.push(loss)
        self.assertEqual(seen, [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
        self.assert_same_model()
        with self.make_worker() as w:
            with self.assertRaisesRegex(ValueError, "batch_sampler must be this worker's"):
                next(w.batches(torch.utils.data.DataLoader(Pairs(self.x, self.y), batch_size=4)))
        with self.assertRaisesRegex(ValueError, "dataset_size=len"):
            Worker(self.address, self.model, log=lambda _: None).batch_sampler()

    def test_a_step_of_ones_own_optimizer_is_warned_about_once(self):
        opt = torch.optim.SGD(self.model.parameters(), lr=0.1)
        with self.make_worker() as w, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for step in w:
                F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples]).backward()
                opt.step()  # the server runs the optimizer: this step is lost
                w.push(torch.tensor(0.0))
        changed = [c for c in caught if "parameters changed between the pull and push()" in str(c.message)]
        self.assertEqual(len(changed), 1)
        with self.make_worker() as w, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.train(w)  # no optimizer of one's own: no warning
        self.assertFalse([c for c in caught if "parameters changed" in str(c.message)])

    def test_the_environment_configures_a_worker_left_without_arguments(self):
        with mock.patch.dict(os.environ, {"OMNILEARN_SERVER": self.address, "OMNILEARN_NAME": "from-env"}):
            w = Worker(None, self.model, dataset_size=64, max_iterations=1, log=lambda _: None)
            self.assertIsNone(w.model_version)  # no model yet: no version
            with w:
                self.train(w)
                self.assertEqual(w.model_version, 1)
        self.assertEqual([j.name for j in self.fake.joins], ["from-env"])
        with mock.patch.dict(os.environ, {"OMNILEARN_SERVER": ""}):
            with self.assertRaisesRegex(ValueError, "OMNILEARN_SERVER"):
                Worker(None, self.model)

    def test_a_server_never_reached_is_an_error_within_the_short_window(self):
        with self.assertRaisesRegex(ServerError, r"never reached the server within 10 s.*server '127.0.0.1:1'"):
            with Worker("127.0.0.1:1", self.model, rpc_timeout=5, log=lambda _: None):
                pass
        self.assertLess(sum(self.clock.slept), 12)  # the short window, not reconnect_timeout's 300 s

    def test_metrics_are_served_and_absent_figures_are_absent(self):
        import urllib.request
        port = free_port()
        with self.make_worker(max_iterations=1, metrics_port=port, metrics_bind="127.0.0.1") as w:
            self.train(w)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            self.assertIn('omnilearn_trainer_iterations_total{worker="py0"} 1', text)
            self.assertIn('omnilearn_trainer_samples_total{worker="py0"} 4', text)
            self.assertNotIn("omnilearn_trainer_test_accuracy{", text)  # no series: nothing reported yet
            w.report(0.5)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            self.assertIn('omnilearn_trainer_test_accuracy{worker="py0"} 0.5', text)

    def test_misuse_is_refused_clearly(self):
        with self.assertRaisesRegex(ValueError, "needs dataset_size"):
            Worker(self.address, self.model, epochs=1)
        with self.assertRaisesRegex(ValueError, "slowdown"):
            Worker(self.address, self.model, slowdown=0.5)
        with self.make_worker() as w:
            with self.assertRaisesRegex(RuntimeError, "outside a step"):
                w.push(torch.tensor(0.0))
            with self.assertRaisesRegex(RuntimeError, "must call push"):
                for _ in w:
                    pass
            with self.assertRaisesRegex(ValueError, r"not in \[0, 1\]"):
                w.report(1.5)


def make_pki(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, by openssl."""
    def run(*args, ext=None):
        if ext:
            with open(os.path.join(d, "ext"), "w") as f:
                f.write(ext)
            args += ("-extfile", os.path.join(d, "ext"))
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ca", "-keyout", "ca.key",
        "-out", "ca.pem")
    for name, ext in (("server", "subjectAltName=DNS:ps.example"), ("client", "extendedKeyUsage=clientAuth")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out",
            f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days",
            "2", "-out", f"{name}.pem", ext=ext)
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d) if n.endswith((".pem", ".key"))}


class _Gate(torch.autograd.Function):
    """Identity; its backward (the last of a step, at the model's input) waits until
    `event` is set, at most 20 s, and records whether it was."""

    @staticmethod
    def forward(ctx, x, event, seen):
        ctx.event, ctx.seen = event, seen
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.seen.append(ctx.event.wait(20))
        return g, None, None


class _Gated(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner, self.event, self.seen = inner, threading.Event(), []

    def forward(self, x):
        x = x.detach().requires_grad_()  # so that backward reaches the gate, last
        return self.inner(_Gate.apply(x, self.event, self.seen))


class PushDuringBackwardTest(unittest.TestCase):
    """Against a fake server that reads push trailers (WorkerTest's fixture)."""
    make_worker = WorkerTest.make_worker
    train = WorkerTest.train

    def setUp(self):
        WorkerTest.setUp(self)
        self.fake.trailers = True
        self.model = _Gated(models.make("mlp", seed=1))
        self.model.event.set()  # backward runs through unless a test holds it
        self.fake.flat = flat_model.FlatModel(_Gated(models.make("mlp", seed=2)))

    def test_the_last_layers_gradient_leaves_while_backward_still_runs(self):
        self.model.event.clear()
        last = self.fake.flat.entries[-1][0]  # the output layer's bias: backward's first
        self.fake.on_chunk = lambda name: name == last and self.model.event.set()
        with self.make_worker(max_iterations=1, bucket_mb=0.001) as w:  # about a tensor a bucket
            self.train(w)
            update = np.array(w.storage.update_host)
        # Backward reached the model's input only after the server had the last layer's chunk.
        self.assertEqual(self.model.seen, [True])
        arrived = self.fake.arrivals[0]
        self.assertEqual(arrived[-1], "<trailer>")
        names = [e[0] for e in self.fake.flat.entries]
        self.assertEqual(arrived[0], names[-1])  # last layer first
        self.assertTrue(self.fake.pushes[0].trailer)
        self.assertEqual(self.fake.pushes[0].compute_seconds, 0.25)  # the trailer's, on the fake clock
        np.testing.assert_array_equal(self.fake.gradients[0], update)  # exactly the step's gradient

    def test_accumulated_backward_passes_send_the_whole_gradient_at_push(self):
        lines = []
        with Worker(self.address, self.model, name="py0", dataset_size=64, max_iterations=2, rpc_timeout=30,
                    log=lines.append) as w:
            for step in w:
                for half in (step.samples[:2], step.samples[2:]):
                    F.cross_entropy(self.model(self.x[half]), self.y[half]).backward()
                grads = np.array(w.storage.update_host)
                w.push(torch.tensor(1.0))
                np.testing.assert_array_equal(self.fake.gradients[-1][:grads.size], grads)
        self.assertEqual([h.trailer for h in self.fake.pushes], [False, False])
        self.assertTrue(any("several backward passes" in line for line in lines))

    def test_bucket_mb_zero_pushes_whole_after_backward(self):
        with self.make_worker(max_iterations=2, bucket_mb=0) as w:
            self.train(w)
        self.assertEqual([h.trailer for h in self.fake.pushes], [False, False])
        self.assertTrue(all("<trailer>" not in a for a in self.fake.arrivals))

    def test_out_of_memory_cancels_the_push_begun(self):
        with self.make_worker(max_iterations=1) as w:
            for step in w:
                F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples]).backward()
                w.report_out_of_memory()
                break
        # (The fake may see the cancelled stream's start; it never completes.)
        self.assertTrue(self.fake.pushes[-1].out_of_memory)
        self.assertEqual(self.fake.version, 0)
        self.assertEqual(self.fake.gradients, [])


class _Mark(torch.nn.Module):
    """Sets `event` when a forward reaches it."""

    def __init__(self):
        super().__init__()
        self.event = threading.Event()

    def forward(self, x):
        self.event.set()
        return x


def _small_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), _Mark(), torch.nn.ReLU(), torch.nn.Linear(16, 4))


class PullDuringForwardTest(unittest.TestCase):
    """The model of a streamed push arrives while the next forward runs (overlap_pull)."""
    make_worker = WorkerTest.make_worker

    def setUp(self):
        WorkerTest.setUp(self)
        self.fake.trailers = True
        self.model = _small_model(1)
        self.fake.flat = flat_model.FlatModel(_small_model(2))
        self.x, self.y = torch.randn(64, 8), torch.randint(0, 4, (64,))

    def run_steps(self, **kw):
        with self.make_worker(max_iterations=3, **kw) as w:
            for step in w:
                F.cross_entropy(self.model(self.x[step.samples]), self.y[step.samples]).backward()
                self.model[1].event.clear()  # set again by the next forward
                w.push(torch.tensor(1.0))
            overlapping = bool(w._module_hooks)
            weights = np.array(w.storage.weights_host)
        return overlapping, weights

    def test_the_next_forward_starts_before_the_model_is_whole(self):
        seen = []  # per model sent: whether a forward had passed the first layer before its last chunk
        self.fake.before_last_chunk = lambda: len(seen) < 2 and seen.append(self.model[1].event.wait(20))
        overlapping, weights = self.run_steps()
        self.assertTrue(overlapping)
        # The first two models: the next step's forward passed the first layer before the
        # last layer had been sent. (Nothing trains after the third; the loop's end waits.)
        self.assertEqual(seen, [True, True])
        np.testing.assert_array_equal(weights, self.fake.flat.values())

    def test_overlap_pull_off_receives_the_model_whole_first(self):
        overlapping, weights = self.run_steps(overlap_pull=False)
        self.assertFalse(overlapping)
        np.testing.assert_array_equal(weights, self.fake.flat.values())


def _bn_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), _Mark(), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4))


class PullDuringForwardBatchNormTest(PullDuringForwardTest):
    """A model with a tensor of another dtype (BatchNorm's num_batches_tracked, kept apart from
    the flat storage) also takes the model during the next forward: the count is copied in as
    its module's tensors arrive, before that module's forward counts the step's batch."""

    def setUp(self):
        super().setUp()
        self.model = _bn_model(1)
        self.fake.flat = flat_model.FlatModel(_bn_model(2))

    def test_the_count_pushed_is_the_servers_plus_the_steps_batch(self):
        seen = []
        self.fake.before_last_chunk = lambda: len(seen) < 2 and seen.append(self.model[1].event.wait(20))
        overlapping, _ = self.run_steps()
        self.assertTrue(overlapping)
        self.assertEqual(seen, [True, True])
        at = self.fake.flat.offsets[[n for n, _, _ in self.fake.flat.entries].index("2.num_batches_tracked")]
        pushed = [g[at] for g in self.fake.gradients]
        server = 0.0  # the fake's count: 0.5 x each push's value off, rounded (FakeServer._push)
        for k, value in enumerate(pushed):
            if k > 0:  # the count the server sent before this step, plus this step's batch
                self.assertEqual(value, server + 1, f"push {k + 1}: {pushed}")
            server = float(np.round(server - 0.5 * value))


class TlsTest(unittest.TestCase):
    def test_mutual_tls_with_a_server_name_override(self):
        with tempfile.TemporaryDirectory() as d:
            pki = make_pki(d)
            fake = FakeServer(models.make("mlp", seed=2))
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            pb2_grpc.add_ParameterServerServicer_to_server(fake, server)
            creds = grpc.ssl_server_credentials([(pki["server.key"], pki["server.pem"])],
                                                root_certificates=pki["ca.pem"], require_client_auth=True)
            port = server.add_secure_port("127.0.0.1:0", creds)
            server.start()
            self.addCleanup(server.stop, None)
            address = f"127.0.0.1:{port}"
            model = models.make("mlp")
            tls = dict(tls_ca=f"{d}/ca.pem", tls_server_name="ps.example")
            with self.assertRaises(ServerError):  # no client certificate: the handshake fails
                with Worker(address, model, rpc_timeout=5, reconnect_timeout=0, log=lambda _: None, **tls):
                    pass
            with Worker(address, model, max_iterations=1, dataset_size=64, rpc_timeout=30, log=lambda _: None,
                        tls_cert=f"{d}/client.pem", tls_key=f"{d}/client.key", **tls) as w:
                for _ in w:
                    model(torch.zeros(1, 784)).sum().backward()
                    w.push(torch.tensor(0.0))
            self.assertEqual(len(fake.pushes), 1)
            with self.assertRaisesRegex(ValueError, "go together"):
                Worker(address, model, tls_cert=f"{d}/client.pem")


if __name__ == "__main__":
    unittest.main()
