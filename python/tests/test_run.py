"""The launcher (python -m omnilearn.run) stops what it started when it is itself stopped."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest


def _wait_for(predicate, seconds=30.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A child that exited but was not yet reaped by the launcher is a zombie: gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0] != "Z"


class LauncherTest(unittest.TestCase):
    def test_sigterm_stops_the_server_and_the_copies(self):
        with tempfile.TemporaryDirectory() as d:
            # A stand-in server: listens on --port, writes its pid, waits to be stopped.
            server = os.path.join(d, "server")
            with open(server, "w") as f:
                f.write(textwrap.dedent(f"""\
                    #!{sys.executable}
                    import os, socket, sys, time
                    port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
                    s = socket.socket(); s.bind(("127.0.0.1", port)); s.listen()
                    open(os.path.join({d!r}, "server.pid"), "w").write(str(os.getpid()))
                    time.sleep(300)
                    """))
            os.chmod(server, 0o755)
            script = os.path.join(d, "job.py")
            with open(script, "w") as f:
                f.write("import os, sys, time\n"
                        f"open(os.path.join({d!r}, 'worker' + os.environ['OMNILEARN_RANK']), 'w')"
                        ".write(str(os.getpid()))\n"
                        "time.sleep(300)\n")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
            launcher = subprocess.Popen([sys.executable, "-m", "omnilearn.run", "--nproc", "2",
                                         f"--server_bin={server}", script], env=env)
            pids = []
            try:
                names = ["server.pid", "worker0", "worker1"]
                paths = [os.path.join(d, n) for n in names]
                self.assertTrue(_wait_for(lambda: all(os.path.exists(p) and os.path.getsize(p) for p in paths)),
                                "the server and both copies did not start")
                pids = [int(open(p).read()) for p in paths]
                launcher.send_signal(signal.SIGTERM)
                self.assertEqual(launcher.wait(timeout=60), 128 + signal.SIGTERM)
                self.assertTrue(_wait_for(lambda: not any(_alive(p) for p in pids)),
                                f"still running after the launcher's SIGTERM: {[p for p in pids if _alive(p)]}")
            finally:
                if launcher.poll() is None:
                    launcher.kill()
                for pid in pids:  # what this test started, should the launcher have left it
                    if _alive(pid):
                        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    unittest.main()
