#!/usr/bin/env bash
# Churn: 200 join/train/leave cycles of short-lived workers (python/omnilearn, in one
# client process) against one server process on 127.0.0.1. Afterwards the worker table
# (GetStatus), the /metrics exposition and the server's memory are back to their size
# after the first cycle of each name: nothing grows with every join. Then 300 distinct
# names: the table keeps at most 256 departed workers.
source "$(dirname "$0")/e2e_lib.sh"
export PYTHONPATH=$RUNFILES/python
MPORT=$(free_port)
start_server churn --mode=async --num_workers=1 --global_batch=8 --metrics_port="$MPORT" --metrics_bind=127.0.0.1
SERVER_PROCESS=$(pgrep -P "$SERVER_PID" | head -n 1)  # SERVER_PID is its timeout wrapper
# Under --config=asan the Python workers' core (omnilearn._core) is instrumented as well:
# the interpreter needs the sanitizer runtimes loaded first; what CPython and LibTorch
# leave allocated at exit is not this project's leak.
PYTHON=(/usr/bin/python3)
sanitizers=$(ldd "$RUNFILES/python/omnilearn/_core.so" | awk '/libasan|libubsan/ {print $3}' | paste -sd: -)
if [ -n "$sanitizers" ]; then
  PYTHON=(env LD_PRELOAD="$sanitizers" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:alloc_dealloc_mismatch=0
          /usr/bin/python3)
  echo "the worker core is instrumented: $sanitizers preloaded"
fi
timeout 240 "${PYTHON[@]}" - "$PORT" "$MPORT" "$SERVER_PROCESS" <<'PY' || fail "churn"
import sys, urllib.request
import grpc, torch
import omnilearn
from omnilearn import _stubs

port, mport, server_pid = sys.argv[1], sys.argv[2], sys.argv[3]
address = f"127.0.0.1:{port}"
pb2, pb2_grpc = _stubs.load()
stub = pb2_grpc.ParameterServerStub(grpc.insecure_channel(address))
model = torch.nn.Linear(4, 2)


def cycle(name):
    with omnilearn.Worker(address, model, name=name, max_iterations=2, log=lambda _: None) as w:
        for step in w:
            loss = model(torch.zeros(step.batch_size, 4)).sum()
            loss.backward()
            w.push(loss)
    assert w.finished, name


def sizes():
    workers = len(stub.GetStatus(pb2.GetStatusRequest()).workers)
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
    series = [l for l in text.splitlines() if l and not l.startswith("#") and not l.startswith("process_")]
    rss_kb = int([l for l in open(f"/proc/{server_pid}/status") if l.startswith("VmRSS")][0].split()[1])
    return workers, len(series), sum('worker="' in l for l in series), rss_kb


# A resident worker keeps the job open (it ends when every worker has left and one finished).
resident = omnilearn.Worker(address, model, name="resident", log=lambda _: None)
resident.join()
names = [f"w{i}" for i in range(8)]
for n in names:  # every name once: its departed record and its series exist
    cycle(n)
before = sizes()
for i in range(200):
    cycle(names[i % 8])
after = sizes()
print(f"after 8 workers: {before[0]} in GetStatus, {before[1]} series ({before[2]} per-worker), RSS {before[3]} kB")
print(f"after 200 more cycles: {after[0]} in GetStatus, {after[1]} series ({after[2]} per-worker), RSS {after[3]} kB")
assert after[:3] == before[:3], (before, after)
assert after[3] < before[3] + 50 * 1024, "the server's memory grew by more than 50 MB"
for i in range(300):
    cycle(f"d{i}")
final = sizes()
print(f"after 300 distinct names: {final[0]} in GetStatus, {final[1]} series ({final[2]} per-worker), RSS {final[3]} kB")
assert final[0] <= 256 + 1, final  # the departed ones and the resident
resident.leave()
resident.close()
PY
stop_server
echo "churn_test: OK"
