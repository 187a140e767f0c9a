#!/usr/bin/env bash
# bench/link_profile.py's rules (bench/link_profile_test.py), with Debian's Python.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/link_profile_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/link_profile_test.py"
