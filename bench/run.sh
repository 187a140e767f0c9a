#!/usr/bin/env bash
# Every benchmark, each against its baseline measured in the same run; tables on stdout,
# JSON (and the scale plot) in bench/results/. About 8 minutes on 2 cores (root: overlap.py
# runs on the emulated cluster's network namespaces).
#   ./bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
./deploy/install-deps.sh
bazel build -c opt //bench:transfer //bench:aggregate //bench:capture //bench:round //bench:scale //bench:shard_step //bench:worker_transfer \
  //server:omnilearn_server //python:omnilearn
for b in transfer aggregate capture round scale shard_step; do
  echo
  bazel run -c opt --ui_event_filters=-info,-stdout,-stderr --noshow_progress "//bench:$b"
done
/usr/bin/python3 bench/plot_scale.py bench/results/scale.json
echo
/usr/bin/python3 bench/python_transfer.py
echo
/usr/bin/python3 bench/overlap.py
