"""The stubs are generated from proto/omnilearn.proto (never checked in) and match it."""

import os
import pathlib
import re
import sys
import tempfile
import unittest

from omnilearn import _stubs

PROTO = pathlib.Path(os.environ.get("OMNILEARN_PROTO", pathlib.Path(__file__).resolve().parents[2] /
                                    "proto" / "omnilearn.proto"))


class StubsTest(unittest.TestCase):
    def test_generated_stubs_import_as_a_package_and_carry_every_field(self):
        with tempfile.TemporaryDirectory() as d:
            out = pathlib.Path(d) / "gen_pkg"
            _stubs.generate(PROTO, out)
            self.assertIn("from . import omnilearn_pb2", (out / "omnilearn_pb2_grpc.py").read_text())
            sys.path.insert(0, d)
            try:
                import gen_pkg.omnilearn_pb2 as fresh  # preflight: generated just above
            finally:
                sys.path.remove(d)
        pb2, pb2_grpc = _stubs.load()
        proto = PROTO.read_text()
        for message, body in re.findall(r"^message (\w+) \{(?:\}|(.*?)^\})", proto, re.S | re.M):
            fields = set(re.findall(r"^\s+(?:repeated |optional )?(?:map<[\w.]+, [\w.]+>|[\w.]+) (\w+) = \d+(?: \[[^\]]*\])?;",
                                    body, re.M))
            for m in (getattr(pb2, message), getattr(fresh, message)):
                self.assertEqual(set(m.DESCRIPTOR.fields_by_name), fields, message)
        self.assertTrue(hasattr(pb2_grpc.ParameterServerStub, "__init__"))
        self.assertIn("PushPull", pb2.DESCRIPTOR.services_by_name["ParameterServer"].methods_by_name)


if __name__ == "__main__":
    unittest.main()
