#!/usr/bin/env bash
# bench/cpu_profile.py's rules (bench/cpu_profile_test.py), with Debian's Python.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/cpu_profile_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/cpu_profile_test.py"
