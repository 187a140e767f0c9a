#!/bin/bash
# Alternates the benches of the code before issue 40 (7d8b236~1) and HEAD, three times.
cd /tmp/benchrun
for rep in 1 2 3; do
  for side in before after; do
    if [ $side = before ]; then bin=/tmp/before40/bazel-bin/bench; else bin=/work/main/bazel-bin/bench; fi
    echo "=== $side rep $rep"
    $bin/round --sizes=1,100 --latency_ms=0 --trials=3 --seconds=2 2>&1 | grep -v "^results"
    $bin/scale --workers=1,4,16 --seconds=2 2>&1 | grep -v "^results"
    $bin/transfer --sizes=16,100 --seconds=3 2>&1 | grep -v "^results"
  done
done
echo done
