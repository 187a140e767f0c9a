"""A worker's options (omnilearn.options.WorkerOptions): declared once, filled from the
environment, checked."""

import os
import tempfile
import unittest
from unittest import mock

from omnilearn.options import WorkerOptions


class WorkerOptionsTest(unittest.TestCase):
    def test_an_unknown_keyword_is_a_type_error(self):
        with self.assertRaises(TypeError):
            WorkerOptions(epoch=2)

    def test_left_out_values_come_from_the_environment_given_ones_win(self):
        env = {"OMNILEARN_NAME": "env-name", "OMNILEARN_TLS_CA": "/ca.pem", "OMNILEARN_AUTH_TOKEN_FILE": "/tok"}
        with mock.patch.dict(os.environ, env):
            o = WorkerOptions().resolved()
            self.assertEqual((o.name, o.tls_ca, o.auth_token_file), ("env-name", "/ca.pem", "/tok"))
            o = WorkerOptions(name="given", auth_token="secret").resolved()
            self.assertEqual(o.name, "given")
            self.assertIsNone(o.auth_token_file)  # a given token is not overridden by the environment's file
            self.assertEqual(o.token(), "secret")

    def test_values_that_cannot_go_together_are_refused(self):
        for bad, message in (({"epochs": 1}, "dataset_size"), ({"max_iterations": -1}, ">= 0"),
                             ({"slowdown": 0.5}, "slowdown"),
                             ({"emulate_device": "k80", "slowdown": 2.0}, "whole step time"),
                             ({"tls_cert": "/c.pem"}, "go together")):
            with self.subTest(bad=bad), mock.patch.dict(os.environ, {}, clear=True):
                with self.assertRaisesRegex(ValueError, message):
                    WorkerOptions(**bad).resolved()

    def test_the_token_file_is_read_and_an_empty_one_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write("  abc\n")
            self.assertEqual(WorkerOptions(auth_token_file=path).token(), "abc")
            open(path, "w").close()
            with self.assertRaisesRegex(ValueError, "holds no token"):
                WorkerOptions(auth_token_file=path).token()

    def test_gradients_stream_only_on_real_unstretched_compute(self):
        self.assertTrue(WorkerOptions().streams_gradients)
        self.assertFalse(WorkerOptions(slowdown=2.0).streams_gradients)
        self.assertFalse(WorkerOptions(emulate_device="k80").streams_gradients)


if __name__ == "__main__":
    unittest.main()
