#!/usr/bin/env bash
# The gRPC benchmarks and the shard's step, briefly (their figures are not kept): each exits non-zero when a
# call failed, as `round` and `scale` did when their join helper misread the Join answer.
set -euo pipefail
bin="$PWD/bench"
cd "${TEST_TMPDIR:-$(mktemp -d)}"  # their JSON goes to ./bench/results here
"$bin/round" --sizes=1 --latency_ms=0 --trials=1 --seconds=0.2
"$bin/scale" --workers=1,4 --seconds=0.3
"$bin/transfer" --sizes=1 --seconds=0.2
"$bin/shard_step" --megabytes=0.5 --reps=2
