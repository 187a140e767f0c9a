#!/usr/bin/env bash
# bench/heterogeneity.py --quick [--emulated]: HL4 sync with equal batches and with ours, and
# a two-step dynamic schedule (HL1 -> HL8). Asserts (in the script): the worker that becomes
# 8x slower at the change gets a smaller share of the global batch after it. With --emulated
# (hosts of the emulated cluster, emulated devices; needs root), also that ours is not slower
# than equal batches at HL4: real compute on shared cores cannot judge times.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/tests/heterogeneity_quick_test.runfiles}/omnilearn
WORK=${TEST_TMPDIR:-$(mktemp -d)}
timeout 600 /usr/bin/python3 "$RUNFILES/bench/heterogeneity.py" --quick "$@" --bin="$RUNFILES" --out="$WORK/out" \
  --work="$WORK/work"
echo "heterogeneity_quick_test $*: OK"
