"""The C++ worker core (python/src/core.cc, omnilearn._core), loaded once for the
package: the installed one, or, in a checkout used through PYTHONPATH=python, Bazel's
build of it. No slow fallback: without it the package stops at import and says why."""

import importlib
import importlib.util
import os
import pathlib
import sys


class _OwnLibraries:
    """Within it, a library loaded binds to its own dependencies first (RTLD_DEEPBIND) when
    TensorFlow is already loaded: TensorFlow makes its copies of gRPC, protobuf and Abseil
    global (RTLD_GLOBAL), and the core, built against Debian's, would otherwise call into
    them and crash. Without TensorFlow nothing changes (a sanitizer's runtime refuses
    RTLD_DEEPBIND)."""

    def __enter__(self):
        self.flags = sys.getdlopenflags()
        if "tensorflow" in sys.modules and hasattr(os, "RTLD_DEEPBIND"):
            sys.setdlopenflags(self.flags | os.RTLD_DEEPBIND)

    def __exit__(self, *exc):
        sys.setdlopenflags(self.flags)


def _load_core():
    """The C++ worker core (python/src/core.cc): the installed one, or, in a checkout used
    through PYTHONPATH=python, Bazel's build of it. No slow fallback: a worker without it
    stops here and says why (the loader's error names a missing library)."""
    try:
        return importlib.import_module("omnilearn._core")
    except ImportError as e:
        error = e
    built = pathlib.Path(__file__).resolve().parents[2] / "bazel-bin" / "python" / "omnilearn" / "_core.so"
    if built.is_file():
        spec = importlib.util.spec_from_file_location("omnilearn._core", built)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            sys.modules["omnilearn._core"] = module
            return module
        except ImportError as e:
            error = e
    raise ImportError(
        f"omnilearn's C++ worker core (omnilearn._core) cannot be loaded: {error}. Install the package with "
        "`pip install ./python` (it compiles the core against Debian's libgrpc++-dev, libprotobuf-dev, "
        "libabsl-dev, pybind11-dev and python3-dev; deploy/install-deps.sh installs them), or, in a checkout, "
        "`bazel build //python:omnilearn`. A shared library the error names as missing comes from those packages."
    ) from error


with _OwnLibraries():
    core = _load_core()
