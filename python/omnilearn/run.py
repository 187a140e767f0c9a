"""Try a training script on one machine, torchrun-style: a local OmniLearn server and N
copies of the script as its workers.

    python -m omnilearn.run --nproc 2 [--shards 2] [--server_args="--mode=async --lr=0.05"] train.py [ARGS...]

Each copy runs with OMNILEARN_SERVER (the server's address), OMNILEARN_NAME (worker0,
worker1, ...), OMNILEARN_RANK and OMNILEARN_WORLD_SIZE set, so `omnilearn.Worker(None,
model, ...)` needs no address. The server (`--server_bin`, else $OMNILEARN_SERVER_BIN,
omnilearn_server on PATH or beside this Python (a virtual environment's bin, where
`deploy/install.sh --prefix=ENV` puts it), or a checkout's bazel-bin) listens on 127.0.0.1,
waits for the N workers, and exits when they are done. A copy that fails ends the job at once
(the other copies and the servers are stopped), and the launcher exits with its status.
`--shards S` runs the layout of a job on several hosts (a server beside every worker, each
holding a slice of the model) on this one: the coordinator and S - 1 shard servers, all on
127.0.0.1; on one host it buys no bandwidth, it shows the layout.
"""

import argparse
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time


def find_server(given: str) -> str:
    candidates = [given, os.environ.get("OMNILEARN_SERVER_BIN", ""), shutil.which("omnilearn_server") or "",
                  str(pathlib.Path(sys.executable).parent / "omnilearn_server"),
                  str(pathlib.Path(__file__).resolve().parents[2] / "bazel-bin" / "server" / "omnilearn_server")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise SystemExit("omnilearn.run: no omnilearn_server: install it (./deploy/install.sh puts the server, the "
                     "worker and omnilearn_ctl in /usr/local/bin; --prefix=ENV in a virtual environment's bin), "
                     "or pass --server_bin, or set OMNILEARN_SERVER_BIN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, server: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if server.poll() is not None:
                raise SystemExit(f"omnilearn.run: the server exited with status {server.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"omnilearn.run: the server did not listen on 127.0.0.1:{port} within {seconds:.0f} s")
            time.sleep(0.05)


def wait_workers(workers, poll_seconds: float = 0.1):
    """(None, 0) once every copy exited 0; else, as soon as one fails, (its rank, its status): the
    others and the servers are then stopped (a copy that failed before it joined would leave the
    job waiting for it)."""
    running = dict(enumerate(workers))
    while running:
        for rank, w in list(running.items()):
            rc = w.poll()
            if rc is None:
                continue
            del running[rank]
            if rc:
                return rank, rc
        if running:
            time.sleep(poll_seconds)
    return None, 0


def stop(procs) -> None:
    """SIGTERM to those still running, then a bounded wait (SIGKILL past it)."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m omnilearn.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=2, help="workers (copies of the script)")
    p.add_argument("--server_bin", default="", help="the omnilearn_server binary")
    p.add_argument("--server_args", default="", help="more flags for the server, e.g. \"--mode=async\"")
    p.add_argument("--shards", type=int, default=1, help="servers, each holding a slice of the model")
    p.add_argument("script")
    p.add_argument("args", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    if a.nproc < 1:
        p.error("--nproc must be at least 1")
    if a.shards < 1:
        p.error("--shards must be at least 1")
    # SIGTERM (a scheduler, `kill`) ends the job as Ctrl-C does: the copies and the servers
    # started here are stopped below, not left running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    binary, port = find_server(a.server_bin), free_port()
    sharded = [f"--shards={a.shards}", f"--advertise=127.0.0.1:{port}"] if a.shards > 1 else []
    server = subprocess.Popen([binary, "--bind=127.0.0.1", f"--port={port}", "--metrics_port=0",
                               f"--num_workers={a.nproc}", "--exit_when_done", *sharded, *a.server_args.split()])
    workers, shards = [], []
    try:
        wait_listening(port, server)
        for _ in range(1, a.shards):  # each exits once the coordinator's job is done
            shard_port = free_port()
            shards.append(subprocess.Popen([binary, "--bind=127.0.0.1", f"--port={shard_port}", "--metrics_port=0",
                                            f"--coordinator=127.0.0.1:{port}", f"--shards={a.shards}",
                                            f"--advertise=127.0.0.1:{shard_port}"]))
        for rank in range(a.nproc):
            env = dict(os.environ, OMNILEARN_SERVER=f"127.0.0.1:{port}", OMNILEARN_NAME=f"worker{rank}",
                       OMNILEARN_RANK=str(rank), OMNILEARN_WORLD_SIZE=str(a.nproc))
            workers.append(subprocess.Popen([sys.executable, a.script, *a.args], env=env))
        failed, status = wait_workers(workers)
        if status:  # a failed copy ends the job at once; its status is the launcher's last word
            stop(workers + shards + [server])
            print(f"omnilearn.run: worker{failed} exited with status {status}: the job was stopped", file=sys.stderr)
            return status
        try:
            for proc in [server] + shards:
                proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print("omnilearn.run: a server did not exit 60 s after its workers: stopping it", file=sys.stderr)
        return status or (server.returncode or 0)
    except KeyboardInterrupt:
        return 130
    finally:
        stop(workers + shards + [server])


if __name__ == "__main__":
    sys.exit(main())
