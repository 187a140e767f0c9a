#!/usr/bin/env bash
# bench/iteration_bound.py's rules (bench/iteration_bound_test.py), with Debian's Python and torch.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/bench/iteration_bound_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/bench/iteration_bound_test.py"
