"""A Python worker's Prometheus series, as the C++ worker's (omnilearn_trainer_*, label
worker), served at /metrics by Worker(metrics_port=PORT). A figure that does not exist yet
(the test accuracy before any report, the loss before the first push) is absent, not 0."""

import http.server
import threading
from typing import Optional


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class WorkerMetrics:
    def __init__(self, name: str):
        self.name = name
        self.iterations = 0
        self.samples = 0
        self.out_of_memory = 0
        self.rejoins = 0
        self.emulation_overruns = 0
        self.batch_size: Optional[int] = None
        self.train_loss: Optional[float] = None
        self.test_accuracy: Optional[float] = None
        self._step = [0, 0.0]  # count, sum of seconds
        self._comm = [0, 0.0]
        self._lock = threading.Lock()

    def step(self, compute_seconds: float, loss: float) -> None:
        with self._lock:
            self._step[0] += 1
            self._step[1] += compute_seconds
            self.train_loss = loss

    def communication(self, seconds: float) -> None:
        with self._lock:
            self._comm[0] += 1
            self._comm[1] += seconds

    def exposition(self) -> str:
        """The series in Prometheus' text format."""
        label = f'{{worker="{_escape(self.name)}"}}'
        out = []

        def series(name, kind, help_text, value):
            if value is None:
                return
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            if kind == "summary":
                count, total = value
                out.append(f"{name}_count{label} {count}\n{name}_sum{label} {total!r}\n")
            else:
                out.append(f"{name}{label} {value!r}\n")
        with self._lock:
            series("omnilearn_trainer_iterations_total", "counter", "Iterations pushed.", self.iterations)
            series("omnilearn_trainer_samples_total", "counter", "Samples trained on.", self.samples)
            series("omnilearn_trainer_out_of_memory_total", "counter", "Iterations that ran out of device memory.",
                   self.out_of_memory)
            series("omnilearn_trainer_rejoins_total", "counter", "Sessions joined again.", self.rejoins)
            series("omnilearn_trainer_emulation_overruns_total", "counter",
                   "Emulated steps whose real compute took longer than their emulated time.", self.emulation_overruns)
            series("omnilearn_trainer_batch_size", "gauge", "Mini-batch size in use.", self.batch_size)
            series("omnilearn_trainer_train_loss", "gauge", "Loss of the last mini-batch.", self.train_loss)
            series("omnilearn_trainer_test_accuracy", "gauge", "Last test accuracy (0..1).", self.test_accuracy)
            series("omnilearn_trainer_step_seconds", "summary", "Compute time of a step as reported.",
                   tuple(self._step))
            series("omnilearn_trainer_communication_seconds", "summary",
                   "Push to reply (the new model in), per iteration.", tuple(self._comm))
        return "".join(out)

    def serve(self, bind: str, port: int) -> http.server.ThreadingHTTPServer:
        """Serves /metrics on a daemon thread; the caller shuts the server down."""
        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                body = metrics.exposition().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer((bind, port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True, name=f"omnilearn-metrics-{self.name}").start()
        return server
