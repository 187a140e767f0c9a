"""What a benchmark runs is built, and built to be timed: a missing binary or worker core
stops the benchmark before it starts anything, with the command that builds it, and a build
that is not optimized (a fastbuild `bazel test` since the `-c opt` build repoints bazel-bin)
is said before any figure is printed."""

import importlib
import os
import re

BUILD = ("bazel build --disk_cache=$HOME/.cache/omnilearn-bazel-disk -c opt "
         "//server:omnilearn_server //worker:omnilearn_worker //python:omnilearn")


def build_mode(path):
    """Bazel's compilation mode of a built file ('opt', 'fastbuild', 'dbg'), from the
    bazel-out/<cpu>-<mode>/bin directory its real path goes through, or None."""
    for part in reversed(os.path.realpath(path).split(os.sep)):
        m = re.fullmatch(r"[a-z0-9_]+-(opt|fastbuild|dbg)(-[a-zA-Z0-9_]+)?", part)
        if m:
            return m.group(1)
    return None


def check(bin_dir, binaries, core_module=None):
    """Raises SystemExit naming what is missing (`binaries`: paths under bin_dir; `core_module`:
    the Python worker's package, "omnilearn", which loads its C++ core when imported). When a
    binary is not from an optimized build, prints a warning line and returns it; else None."""
    missing = [b for b in binaries if not os.access(os.path.join(bin_dir, b), os.X_OK)]
    if missing:
        raise SystemExit(f"not built under {bin_dir}: {', '.join(missing)}; build them with: {BUILD}")
    if core_module is not None:
        try:
            importlib.import_module(core_module)
        except ImportError as e:
            raise SystemExit(f"the Python worker's core does not load ({e}); build it with: {BUILD}")
    modes = {build_mode(os.path.join(bin_dir, b)) for b in binaries} - {None, "opt"}
    if not modes:
        return None
    warning = (f"warning: {bin_dir} holds a {'/'.join(sorted(modes))} build, not -c opt: its timings are not "
               f"the product's (build with: {BUILD})")
    print(warning, flush=True)
    return warning
