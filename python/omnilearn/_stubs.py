"""The protocol's Python stubs, generated from proto/omnilearn.proto, never checked in.

Three ways they come to be, all by `generate` (Debian's protoc and grpc_python_plugin):
- the Bazel build (//python:stubs) writes them into the package's _generated/;
- `pip install ./python` writes them there at build time (setup.py);
- in a source checkout used through PYTHONPATH they are generated on first import into a
  cache folder keyed by the proto's hash, so they can never drift from the proto.

Run as a script (`python3 _stubs.py --proto P --out DIR`) to generate into DIR.
"""

import argparse
import hashlib
import importlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

PROTOC = os.environ.get("OMNILEARN_PROTOC", "/usr/bin/protoc")
PLUGIN = os.environ.get("OMNILEARN_GRPC_PYTHON_PLUGIN", "/usr/bin/grpc_python_plugin")
_HERE = pathlib.Path(__file__).resolve().parent


def generate(proto: pathlib.Path, out: pathlib.Path) -> None:
    """Writes omnilearn_pb2.py, omnilearn_pb2_grpc.py and __init__.py into `out`.

    The gRPC module's top-level `import omnilearn_pb2` becomes a relative import, so the
    stubs live inside a package and nothing is added to sys.path.
    """
    for tool in (PROTOC, PLUGIN):
        if not os.access(tool, os.X_OK):
            raise RuntimeError(f"{tool} is missing: install Debian's protobuf-compiler and "
                               "protobuf-compiler-grpc (deploy/install-deps.sh does)")
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([PROTOC, f"--proto_path={proto.parent}", f"--python_out={out}",
                    f"--grpc_python_out={out}", f"--plugin=protoc-gen-grpc_python={PLUGIN}",
                    str(proto)], check=True)
    grpc_module = out / "omnilearn_pb2_grpc.py"
    text = grpc_module.read_text()
    fixed = text.replace("import omnilearn_pb2 as omnilearn__pb2",
                         "from . import omnilearn_pb2 as omnilearn__pb2")
    if fixed == text:
        raise RuntimeError(f"unexpected output of {PLUGIN}: no 'import omnilearn_pb2' line")
    grpc_module.write_text(fixed)
    (out / "__init__.py").write_text("# Generated from omnilearn.proto; do not edit.\n")


def _source_proto() -> pathlib.Path:
    path = os.environ.get("OMNILEARN_PROTO")
    if path:
        return pathlib.Path(path)
    return _HERE.parent.parent / "proto" / "omnilearn.proto"


def _cached_stubs():
    proto = _source_proto()
    if not proto.is_file():
        raise ImportError(f"omnilearn: no generated stubs and no proto at {proto} (install the package "
                          "with pip, build //python:stubs, or set OMNILEARN_PROTO)")
    digest = hashlib.sha256(proto.read_bytes()).hexdigest()[:16]
    cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "omnilearn"
    package = f"omnilearn_stubs_{digest}"
    target = cache / package
    if not (target / "__init__.py").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = pathlib.Path(tempfile.mkdtemp(dir=cache, prefix=".gen-"))
        try:
            generate(proto, tmp)
            try:
                os.rename(tmp, target)  # atomic: concurrent importers see all or nothing
            except OSError:
                if not (target / "__init__.py").is_file():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if str(cache) not in sys.path:
        sys.path.append(str(cache))
    return importlib.import_module(package)


def load():
    """Returns (omnilearn_pb2, omnilearn_pb2_grpc)."""
    try:
        from omnilearn._generated import omnilearn_pb2, omnilearn_pb2_grpc  # build or pip install
        return omnilearn_pb2, omnilearn_pb2_grpc
    except ImportError:
        pass
    pkg = _cached_stubs()
    return (importlib.import_module(pkg.__name__ + ".omnilearn_pb2"),
            importlib.import_module(pkg.__name__ + ".omnilearn_pb2_grpc"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--proto", required=True, type=pathlib.Path)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    args = parser.parse_args()
    generate(args.proto, args.out)
