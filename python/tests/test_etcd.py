"""A worker given etcd://HOST:PORT/KEY joins the coordinator elected there (the servers'
--election): a real etcd (Debian's etcd-server) on 127.0.0.1 holds KEY, written through etcd's
JSON gateway as a coordinator would hold it, and the fake server of test_worker answers."""

import base64
import json
import shutil
import subprocess
import tempfile
import threading
import unittest
import urllib.request
from concurrent import futures

import grpc
import torch
from torch.nn import functional as F

import test_worker
from omnilearn import models
from omnilearn.run import free_port
from omnilearn.worker import ServerError, Worker

KEY = "/omnilearn/py"


@unittest.skipUnless(shutil.which("etcd"), "etcd is not installed (deploy/install-deps.sh installs etcd-server)")
class EtcdWorkerTest(unittest.TestCase):
    def setUp(self):
        self.model = models.make("mlp", seed=1)
        self.fake = test_worker.FakeServer(models.make("mlp", seed=2))
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        test_worker.pb2_grpc.add_ParameterServerServicer_to_server(self.fake, server)
        self.address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        server.start()
        self.addCleanup(server.stop, None)
        data = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, data, True)
        client, peer = free_port(), free_port()
        self.etcd_address = f"127.0.0.1:{client}"
        etcd = subprocess.Popen(
            ["etcd", "--name", "t", "--data-dir", data, "--listen-client-urls", f"http://{self.etcd_address}",
             "--advertise-client-urls", f"http://{self.etcd_address}", "--listen-peer-urls",
             f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
             "--initial-cluster", f"t=http://127.0.0.1:{peer}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(etcd.wait, 30)
        ready = threading.Event()

        def read_log():  # the whole log, so etcd never blocks on a full pipe
            for line in etcd.stderr:
                if "ready to serve client requests" in line:
                    ready.set()

        reader = threading.Thread(target=read_log, daemon=True)
        reader.start()
        self.addCleanup(reader.join, 30)
        self.addCleanup(etcd.terminate)  # first: the reader ends with etcd's log
        self.assertTrue(ready.wait(60), "etcd did not say it serves clients within 60 s")

    def put(self, key, value):
        """KEY = VALUE in etcd, through its JSON gateway (/v3/kv/put, base64 bytes)."""
        b64 = lambda s: base64.b64encode(s.encode()).decode()
        body = json.dumps({"key": b64(key), "value": b64(value)}).encode()
        with urllib.request.urlopen(f"http://{self.etcd_address}/v3/kv/put", body, timeout=5) as r:
            r.read()

    def make_worker(self):
        return Worker(f"etcd://{self.etcd_address}{KEY}", self.model, name="py0", dataset_size=64, rpc_timeout=30,
                      reconnect_timeout=2, max_iterations=3, log=lambda line: None)

    def test_the_worker_joins_the_coordinator_etcd_names_and_stops_once_its_job_finished(self):
        self.put(KEY, self.address)
        x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
        with self.make_worker() as w:
            steps = 0
            for step in w:
                loss = F.cross_entropy(self.model(x[step.samples]), y[step.samples])
                loss.backward()
                w.push(loss)
                steps += 1
        self.assertEqual(steps, 3)
        self.assertIn("Join", self.fake.calls)  # the server etcd named (first without a model, then with it)
        # A finished job's key: the worker is told so, and never calls a server.
        self.put(KEY, "finished")
        calls = len(self.fake.calls)
        with self.assertRaisesRegex(ServerError, "the job of the etcd key /omnilearn/py is finished"):
            with self.make_worker():
                pass
        self.assertEqual(len(self.fake.calls), calls)


if __name__ == "__main__":
    unittest.main()
