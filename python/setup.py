"""pip install ./python: the omnilearn package, with its gRPC stubs generated from
../proto/omnilearn.proto at build time (Debian's protoc and grpc_python_plugin).

Debian 12's pip installs into a virtual environment (PEP 668); one that sees Debian's
python3-grpcio, python3-protobuf and python3-torch, offline:
    /usr/bin/python3 -m venv --system-site-packages ENV
    ENV/bin/pip install --no-build-isolation ./python
"""

import os
import pathlib
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "omnilearn"))
import _stubs  # noqa: E402  (the generator only: it imports nothing of the package)


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        proto = pathlib.Path(os.environ.get("OMNILEARN_PROTO", HERE.parent / "proto" / "omnilearn.proto"))
        if not proto.is_file():
            raise SystemExit(f"no {proto}: build from an OmniLearn checkout (or set OMNILEARN_PROTO)")
        _stubs.generate(proto, pathlib.Path(self.build_lib) / "omnilearn" / "_generated")


setup(
    name="omnilearn",
    version="0.1.0",
    description="Python worker library for the OmniLearn parameter server",
    packages=["omnilearn"],
    python_requires=">=3.9",
    cmdclass={"build_py": BuildWithStubs},
)
