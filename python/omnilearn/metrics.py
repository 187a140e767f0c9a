"""A Python worker's Prometheus series, the C++ worker's own (omnilearn_trainer_*, label
worker), served at /metrics by Worker(metrics_port=PORT). A figure that does not exist yet
(the test accuracy before any report, the loss before the first push) is absent, not 0."""

import http.server
import threading

from omnilearn._native import core as _core


class WorkerMetrics:
    """The worker's series: the C++ worker's own (worker/trainer/trainer_metrics.h, bound as
    omnilearn._core.WorkerMetrics), fed by the Python worker and served by `serve`."""

    def __init__(self, name: str):
        self.name = name
        self._series = _core.WorkerMetrics(name)

    def step(self, compute_seconds: float, loss: float) -> None:
        self._series.step(compute_seconds, loss)

    def communication(self, seconds: float) -> None:
        self._series.communication(seconds)

    def pushed(self, batch: int, out_of_memory: bool = False) -> None:
        """An iteration pushed at `batch` (its samples trained unless it ran out of memory)."""
        self._series.pushed(batch, out_of_memory)

    def accuracy(self, value: float) -> None:
        self._series.accuracy(value)

    def totals(self, emulation_overruns: int, rejoins: int) -> None:
        """The worker's running totals: the series follow them."""
        self._series.emulation_overruns(emulation_overruns)
        self._series.rejoins(rejoins)

    def exposition(self) -> str:
        """The series in Prometheus' text format."""
        return self._series.exposition()

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
