#!/usr/bin/env bash
# bench/build_check.py's rules (bench/build_check_test.py), with Debian's Python.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/build_check_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/build_check_test.py"
