#!/usr/bin/env bash
# bench/link_model.py's rules (bench/link_model_test.py), with Debian's Python and numpy.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/link_model_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/link_model_test.py"
