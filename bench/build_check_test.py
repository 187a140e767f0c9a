"""Tests of bench/build_check.py: missing binaries and cores stop a benchmark, a build that is
not optimized is said."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_check  # noqa: E402


def make_bin(root, mode, name="server/omnilearn_server"):
    path = os.path.join(root, "bazel-out", f"k8-{mode}", "bin", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, 0o755)
    return os.path.join(root, "bazel-out", f"k8-{mode}", "bin")


class BuildCheckTest(unittest.TestCase):
    def test_mode_from_the_real_path(self):
        with tempfile.TemporaryDirectory() as d:
            opt = make_bin(d, "opt")
            link = os.path.join(d, "bazel-bin")
            os.symlink(opt, link)  # bazel-bin points at the last build's configuration
            self.assertEqual(build_check.build_mode(os.path.join(link, "server", "omnilearn_server")), "opt")
            self.assertEqual(build_check.build_mode(make_bin(d, "fastbuild")), "fastbuild")
            self.assertIsNone(build_check.build_mode(d))

    def test_missing_binary_stops_with_the_build_command(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(SystemExit) as e:
                build_check.check(d, ["server/omnilearn_server"])
            self.assertIn("server/omnilearn_server", str(e.exception))
            self.assertIn("bazel build", str(e.exception))

    def test_core_that_does_not_load_stops(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(SystemExit) as e:
                build_check.check(make_bin(d, "opt"), ["server/omnilearn_server"], "no_such_worker_core")
            self.assertIn("no_such_worker_core", str(e.exception))
            self.assertIn("bazel build", str(e.exception))

    def test_opt_passes_and_fastbuild_is_said(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertIsNone(build_check.check(make_bin(d, "opt"), ["server/omnilearn_server"], "os"))
            warning = build_check.check(make_bin(d, "fastbuild"), ["server/omnilearn_server"])
            self.assertIn("fastbuild", warning)
            self.assertIn("-c opt", warning)


if __name__ == "__main__":
    unittest.main()
