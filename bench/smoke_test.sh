#!/usr/bin/env bash
# The gRPC benchmarks and the shard's step, briefly (their figures are not kept): each exits non-zero when a
# call failed, as `round` and `scale` did when their join helper misread the Join answer.
set -euo pipefail
bin="$PWD/bench"
cd "${TEST_TMPDIR:-$(mktemp -d)}"  # their JSON goes to ./bench/results here
run() {  # each step named with its time, so a timed-out run shows which one did not end
  echo "smoke: $* ($(date +%T))"
  "$bin/$@"
}
run round --sizes=1 --latency_ms=0 --trials=1 --seconds=0.2
run scale --workers=1,4 --seconds=0.3
run transfer --sizes=1 --seconds=0.2
run shard_step --megabytes=0.5 --reps=2
