#!/usr/bin/env bash
# tools/docs_gen.py's rules (tools/docs_gen_test.py), with Debian's Python and numpy.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/tools/docs_gen_test.runfiles}/omnilearn
exec /usr/bin/python3 "$RUNFILES/tools/docs_gen_test.py"
