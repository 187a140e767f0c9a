"""The launcher (python -m omnilearn.run) stops what it started when it is itself stopped."""

import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest


def _read_lines(fd, count, seconds=30.0):
    """`count` lines from the pipe `fd`, each as it arrives; fewer when `seconds` run out."""
    deadline = time.monotonic() + seconds
    data = b""
    while data.count(b"\n") < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.decode().split()


def _gone_within(pids, seconds=30.0):
    """The pids (not this process's children) that still run after `seconds`: a wait on each
    one's exit (pidfd), bounded."""
    deadline = time.monotonic() + seconds
    left = []
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone already
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                left.append(pid)
        finally:
            os.close(fd)
    return left


class LauncherTest(unittest.TestCase):
    def test_sigterm_stops_the_server_and_the_copies(self):
        with tempfile.TemporaryDirectory() as d:
            # The stand-ins write their pid to one FIFO once up, then wait for a signal.
            fifo = os.path.join(d, "started")
            os.mkfifo(fifo)
            server = os.path.join(d, "server")
            with open(server, "w") as f:
                f.write(textwrap.dedent(f"""\
                    #!{sys.executable}
                    import os, signal, socket, sys
                    port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
                    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen()
                    with open({fifo!r}, "w") as out:
                        out.write(f"{{os.getpid()}}\\n")
                    signal.pause()
                    """))
            os.chmod(server, 0o755)
            script = os.path.join(d, "job.py")
            with open(script, "w") as f:
                f.write(f"import os, signal\nwith open({fifo!r}, 'w') as out:\n"
                        "    out.write(f'{os.getpid()}\\n')\nsignal.pause()\n")
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # before any writer opens it
            keep = os.open(fifo, os.O_WRONLY)  # so the reader sees no end between the writers
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
            launcher = subprocess.Popen([sys.executable, "-m", "omnilearn.run", "--nproc", "2",
                                         f"--server_bin={server}", script], env=env)
            left = []  # what this test started that still runs
            try:
                pids = [int(p) for p in _read_lines(reader, 3)]
                left = pids
                self.assertEqual(len(pids), 3, "the server and both copies did not start")
                launcher.send_signal(signal.SIGTERM)
                self.assertEqual(launcher.wait(timeout=60), 128 + signal.SIGTERM)
                left = _gone_within(pids)
                self.assertEqual(left, [], f"still running after the launcher's SIGTERM: {left}")
            finally:
                os.close(reader)
                os.close(keep)
                if launcher.poll() is None:
                    launcher.kill()
                    launcher.wait(timeout=60)
                for pid in left:  # what this test started, should the launcher have left it
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


if __name__ == "__main__":
    unittest.main()
