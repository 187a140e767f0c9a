"""The launcher (python -m omnilearn.run) stops what it started when it is itself stopped, and
when one of its copies fails."""

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


def _stand_ins(d, copy_source):
    """A server stand-in (listens on --port, writes its pid to the FIFO `started`, waits for a
    signal) and a script of `copy_source`, in folder d: (fifo, server, script)."""
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
        f.write(copy_source.replace("FIFO", repr(fifo)))
    return fifo, server, script


def _clean_up(launcher, fds, left):
    """What a test started, should the launcher have left it: the FIFO's ends, the launcher, the
    pids still running."""
    for fd in fds:
        os.close(fd)
    if launcher.poll() is None:
        launcher.kill()
        launcher.wait(timeout=60)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# A copy that writes its pid to the FIFO once up, then waits for a signal.
WAITING_COPY = "import os, signal\nwith open(FIFO, 'w') as out:\n    out.write(f'{os.getpid()}\\n')\nsignal.pause()\n"


class LauncherTest(unittest.TestCase):
    def test_a_failed_copy_ends_the_job_at_once(self):
        # worker0 fails before it could join (a refused optimizer, a typo); worker1 waits on.
        failing = "import os, sys\nif os.environ['OMNILEARN_RANK'] == '0':\n    sys.exit(3)\n" + WAITING_COPY
        with tempfile.TemporaryDirectory() as d:
            fifo, server, script = _stand_ins(d, failing)
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
            keep = os.open(fifo, os.O_WRONLY)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
            launcher = subprocess.Popen([sys.executable, "-m", "omnilearn.run", "--nproc", "2",
                                         f"--server_bin={server}", script], env=env, stderr=subprocess.PIPE,
                                        text=True)
            left = []
            try:
                left = [int(p) for p in _read_lines(reader, 2)]
                self.assertEqual(len(left), 2, "the server and worker1 did not start")
                # Bounded: before, the launcher waited for worker1, which waits for ever.
                _, err = launcher.communicate(timeout=60)
                self.assertEqual(launcher.returncode, 3)
                self.assertIn("worker0 exited with status 3: the job was stopped", err)
                left = _gone_within(left)
                self.assertEqual(left, [], f"still running after worker0 failed: {left}")
            finally:
                _clean_up(launcher, (reader, keep), left)

    def test_sigterm_stops_the_server_and_the_copies(self):
        with tempfile.TemporaryDirectory() as d:
            fifo, server, script = _stand_ins(d, WAITING_COPY)
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
                _clean_up(launcher, (reader, keep), left)


if __name__ == "__main__":
    unittest.main()
