"""pip install ./python: the omnilearn package, with its gRPC stubs generated from
../proto/omnilearn.proto and its C++ worker core (omnilearn._core: python/src/core.cc over
worker/client/session and the gRPC client of the checkout) compiled at build time against the
system's gRPC, protobuf and Abseil (pkg-config), pybind11 (a build requirement in
pyproject.toml) and the Python headers.

Into any virtual environment, with pip's build isolation (pip fetches setuptools and pybind11
for the build; offline, from a folder of wheels with --no-index --find-links DIR):
    python3 -m venv ENV && ENV/bin/pip install ./python

The source tree stays as it was: the build goes to a temporary folder (OMNILEARN_BUILD_DIR
to keep it somewhere), and no bytecode is written beside the sources.
"""

import atexit
import concurrent.futures
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
ROOT = pathlib.Path(os.environ.get("OMNILEARN_SOURCE", HERE.parent))  # the checkout
sys.path.insert(0, str(HERE / "omnilearn"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import _stubs  # noqa: E402  (the generator only: it imports nothing of the package)

# setuptools builds in ./build and writes ./omnilearn.egg-info beside the sources: both go
# to a folder of their own (pip builds in place, from the checkout).
BUILD_DIR = os.environ.get("OMNILEARN_BUILD_DIR", "")
if not BUILD_DIR:
    BUILD_DIR = tempfile.mkdtemp(prefix="omnilearn-build-")
    atexit.register(shutil.rmtree, BUILD_DIR, ignore_errors=True)

# What the core is built from: python/core_sources.txt, the sources of Bazel's
# //python:omnilearn/_core.so (tests/sources_check.sh keeps the two one list).
def _core_files():
    listed = ROOT / "python" / "core_sources.txt"
    if not listed.is_file():
        raise SystemExit(f"no {listed}: build from an OmniLearn checkout (or set OMNILEARN_SOURCE)")
    return [line.strip() for line in listed.read_text().splitlines() if line.strip() and not line.startswith("#")]


CORE_FILES = _core_files()
CORE_SOURCES = [f for f in CORE_FILES if f.endswith(".cc")]
PKG_CONFIG = ["grpc++", "protobuf", "absl_statusor", "absl_synchronization", "absl_str_format", "absl_time",
              "absl_strings"]


def _proto() -> pathlib.Path:
    proto = pathlib.Path(os.environ.get("OMNILEARN_PROTO", ROOT / "proto" / "omnilearn.proto"))
    if not proto.is_file():
        raise SystemExit(f"no {proto}: build from an OmniLearn checkout (or set OMNILEARN_SOURCE)")
    return proto


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        _stubs.generate(_proto(), pathlib.Path(self.build_lib) / "omnilearn" / "_generated")


def _compile_in_parallel(compiler, jobs: int) -> None:
    """The compiler's sources compiled `jobs` at a time (distutils compiles one after another)."""
    one_by_one = compiler.compile

    def compile_all(sources, *args, **kwargs):
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            objects = pool.map(lambda source: one_by_one([source], *args, **kwargs), sources)
            return [o for objs in objects for o in objs]
    compiler.compile = compile_all


class BuildCore(build_ext):
    """Generates the proto's C++ (protoc, grpc_cpp_plugin), then compiles the core, one source per
    core at a time (OMNILEARN_BUILD_JOBS to choose)."""

    def build_extension(self, ext):
        missing = [s for s in CORE_FILES if not (ROOT / s).is_file()]
        if missing:
            raise SystemExit(f"{ROOT} is not an OmniLearn checkout (no {missing[0]}): set OMNILEARN_SOURCE")
        gen = pathlib.Path(self.build_temp).resolve() / "gen"
        (gen / "proto").mkdir(parents=True, exist_ok=True)
        proto = _proto()
        # omnilearn.proto and, beside it, etcd.proto (the coordinator's lookup in etcd: --server=etcd://...).
        for name in (proto.name, "etcd.proto"):
            subprocess.run(["protoc", f"--proto_path={proto.parent.parent}", "--plugin=protoc-gen-grpc=" +
                            "/usr/bin/grpc_cpp_plugin", f"--cpp_out={gen}", f"--grpc_out={gen}",
                            str(proto.parent.name + "/" + name)], cwd=proto.parent.parent, check=True)
        try:
            flags = subprocess.run(["pkg-config", "--cflags", "--libs", *PKG_CONFIG], check=True,
                                   capture_output=True, text=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise SystemExit(f"pkg-config could not find gRPC, protobuf and Abseil ({e}): "
                             "apt install libgrpc++-dev libprotobuf-dev libabsl-dev pkg-config") from e
        import pybind11
        ext.sources = [str(ROOT / s) for s in CORE_SOURCES] + [
            str(gen / "proto" / f"{name}{kind}.pb.cc") for name in ("omnilearn", "etcd") for kind in ("", ".grpc")]
        ext.include_dirs += [str(ROOT), str(gen), pybind11.get_include()]
        args = shlex.split(flags)
        ext.extra_compile_args += ["-std=c++17", "-O2", "-fvisibility=hidden"] + [a for a in args if a.startswith("-I")]
        ext.extra_link_args += [a for a in args if not a.startswith("-I")] + ["-lz"]
        jobs = os.environ.get("OMNILEARN_BUILD_JOBS", "")
        if jobs and not (jobs.isdigit() and int(jobs) > 0):
            raise SystemExit(f"OMNILEARN_BUILD_JOBS={jobs!r}: a number of parallel compiles, 1 or more")
        _compile_in_parallel(self.compiler, int(jobs) if jobs else len(os.sched_getaffinity(0)))
        super().build_extension(ext)


# The package's metadata is pyproject.toml's; the build's steps are these.
setup(
    ext_modules=[Extension("omnilearn._core", sources=["python/src/core.cc"], language="c++")],
    cmdclass={"build_py": BuildWithStubs, "build_ext": BuildCore},
    options={"build": {"build_base": BUILD_DIR}, "egg_info": {"egg_base": BUILD_DIR}},
)
