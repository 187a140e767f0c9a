#!/usr/bin/env bash
# bench/timeline.py's phases (bench/timeline_test.py), with Debian's Python.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/timeline_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/timeline_test.py"
