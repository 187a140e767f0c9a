"""The Python Worker and the C++ worker core's session (worker/client/session_driver.cc, the loop
the C++ trainer runs) through the same scripted faults of the same fake server: the
same calls, in the same order, and the same outcomes."""

import os
import subprocess
import unittest
from concurrent import futures

import grpc
import torch

from omnilearn import _stubs
from omnilearn.worker import ServerError, Worker
from test_worker import FakeServer

pb2, pb2_grpc = _stubs.load()
# The C++ worker's session driver: python_test.sh names it; from a checkout, Bazel's build of it
# (`bazel build //worker:session_driver`).
_BUILT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bazel-bin", "worker", "session_driver")
DRIVER = os.environ.get("OMNILEARN_SESSION_DRIVER") or (os.path.realpath(_BUILT) if os.path.isfile(_BUILT) else None)
LAYOUT = "weight:2x3,bias:2"  # torch.nn.Linear(3, 2)


def python_run(address, iterations, oom_at, token):
    model = torch.nn.Linear(3, 2)
    outcomes = []
    try:
        with Worker(address, model, name="w0", dataset_size=1000, max_iterations=iterations, rpc_timeout=30,
                    reconnect_timeout=30, auth_token=token, log=lambda _: None) as w:
            for step in w:
                if step.iteration == oom_at:
                    reply = w.report_out_of_memory()
                else:
                    model(torch.ones(1, 3)).sum().backward()
                    reply = w.push(torch.tensor(0.0))
                if reply is None:
                    outcomes.append("stop" if w.stopped.is_set() else "rejoined")
                else:
                    outcomes.append("stop" if reply.action == "stop" else "replied")
    except ServerError as e:
        outcomes.append(f"error {e.code.name}")
    return outcomes


def cpp_run(address, iterations, oom_at, token):
    r = subprocess.run([DRIVER, f"--server={address}", "--name=w0", f"--layout={LAYOUT}", "--dataset_size=1000",
                        f"--iterations={iterations}", f"--oom_at={oom_at}", f"--auth_token={token or ''}",
                        "--reconnect_timeout=30"], capture_output=True, text=True, timeout=120)
    return r.stdout.split("\n")[:-1]


@unittest.skipIf(DRIVER is None and "TEST_SRCDIR" not in os.environ,
                 "needs the C++ session driver: bazel build //worker:session_driver")
class ConformanceTest(unittest.TestCase):
    def run_both(self, script, iterations=3, oom_at=-1, token=None):
        """Runs each worker against a fresh fake server set up by script(fake); returns
        what each saw and what each server saw."""
        seen = []
        for run in (python_run, cpp_run):
            fake = FakeServer(torch.nn.Linear(3, 2))
            script(fake)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            pb2_grpc.add_ParameterServerServicer_to_server(fake, server)
            address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
            server.start()
            try:
                outcomes = run(address, iterations, oom_at, token)
            finally:
                server.stop(None)
            calls = [c for c in fake.calls if c != "Heartbeat"]
            joins = [(j.has_initial_parameters, j.resume_worker_id, j.resume_secret) for j in fake.joins]
            pushes = [(p.out_of_memory, p.model_version, p.batch_size) for p in fake.pushes]
            leaves = [(l.worker_id, l.finished) for l in fake.leaves]
            seen.append(dict(outcomes=outcomes, calls=calls, joins=joins, pushes=pushes, leaves=leaves))
        python, cpp = seen
        self.assertEqual(python, cpp)
        return python

    def test_a_clean_run(self):
        seen = self.run_both(lambda fake: None)
        self.assertEqual(seen["outcomes"], ["replied"] * 3)
        self.assertEqual(seen["calls"], ["Join", "Join", "Pull", "PushPull", "PushPull", "PushPull", "Leave"])

    def test_a_server_restart_that_lost_the_model(self):
        def script(fake):
            fake.faults["PushPull"] = [(grpc.StatusCode.UNAVAILABLE, "restarting",
                                        lambda: setattr(fake, "have_model", False))]
        seen = self.run_both(script)
        self.assertEqual(seen["outcomes"], ["rejoined", "replied", "replied", "replied"])
        self.assertEqual([j[0] for j in seen["joins"]], [True, True])  # the model came back with the worker

    def test_an_expired_lease(self):
        seen = self.run_both(lambda fake: fake.faults.update(PushPull=[(grpc.StatusCode.NOT_FOUND, "no such worker")]))
        self.assertEqual(seen["outcomes"], ["rejoined", "replied", "replied", "replied"])

    def test_the_server_asks_to_rejoin_then_stops(self):
        def script(fake):
            fake.push_actions[2] = pb2.ACTION_REJOIN
            fake.push_actions[4] = pb2.ACTION_STOP
        seen = self.run_both(script, iterations=5)
        self.assertEqual(seen["outcomes"], ["replied", "rejoined", "replied", "stop"])
        self.assertEqual(seen["leaves"][-1][1], False)

    def test_out_of_memory(self):
        seen = self.run_both(lambda fake: None, oom_at=1)
        self.assertEqual([p[0] for p in seen["pushes"]], [False, True, False])

    def test_a_wrong_token(self):
        seen = self.run_both(lambda fake: setattr(fake, "token", "right"), token="wrong")
        self.assertEqual(seen["outcomes"], ["error UNAUTHENTICATED"])


if __name__ == "__main__":
    unittest.main()
