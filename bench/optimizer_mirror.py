#!/usr/bin/python3
"""The server's optimizers against the frameworks' own, each case's figure in one file.

Runs python/tests/test_optimizer_mirror.py on a torch and python/tests_tf/
test_keras_optimizer_mirror.py on a Keras (each through server/checkpoint/optimizer_replay:
60 steps on the same gradients, a rate change at step 30, a server restart after step 40)
and writes each case's largest difference from the framework, as a fraction of the largest
weight, to bench/results/optimizer_mirror.json (docs/optimizer.md's table).

    bazel build //server/checkpoint:optimizer_replay
    bench/optimizer_mirror.py --torch_python=VENV/bin/python --keras_python=VENV/bin/python
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITES = (("torch_python", "tests/test_optimizer_mirror.py"), ("keras_python", "tests_tf/test_keras_optimizer_mirror.py"))


def run_suite(python, test, record):
    """The suite's cases, each appending its figure to `record`; exits on a failure."""
    env = dict(os.environ, OMNILEARN_MIRROR_RECORD=record, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", test], cwd=os.path.join(ROOT, "python"),
                          env=env, timeout=1200)
    if done.returncode != 0:
        sys.exit(f"optimizer_mirror: {test} failed on {python}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for flag, _ in SUITES:
        parser.add_argument(f"--{flag}", required=True)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "optimizer_mirror.json"))
    args = parser.parse_args()
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as record:
        for flag, test in SUITES:
            run_suite(getattr(args, flag), test, record.name)
        rows = [json.loads(line) for line in record if line.strip()]
    result = {"benchmark": "optimizer_mirror",
              "command": "bench/optimizer_mirror.py --torch_python=VENV/bin/python --keras_python=VENV/bin/python",
              "machine": f"{os.cpu_count()}-core {platform.machine()} VM, Debian 12",
              "date": datetime.date.today().isoformat(), "rows": rows}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"optimizer_mirror: {len(rows)} cases -> {args.out}")


if __name__ == "__main__":
    main()
