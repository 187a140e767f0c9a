#!/usr/bin/env bash
# bench/peers.py --quick: OmniLearn beside PyTorch DDP on the emulated cluster (hosts in
# network namespaces, 1 Gbit/s links, emulated devices at HL8, the 4 MB MLP): DDP with equal
# and with speed-balanced batches, OmniLearn with one server and with a server on every
# worker host. Asserted: every system trained and reached the target loss; balancing pays
# for DDP at HL8; OmniLearn's controller found the equal-time split with servers on the
# worker hosts, and that layout beats one server's; every run's processes and links were
# profiled (--cpu_profile: workers, and OmniLearn's servers, on a core; --link_profile: every
# worker host's links carried bytes, within their rate). Ratios of one run, no absolute times.
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/tests/peers_quick_test.runfiles}/omnilearn
WORK=${TEST_TMPDIR:-$(mktemp -d)}
timeout 600 /usr/bin/python3 "$RUNFILES/bench/peers.py" --quick --cpu_profile --link_profile --bin_dir="$RUNFILES" --out="$WORK/out"
/usr/bin/python3 - "$WORK/out/peers.json" <<'PY'
import json, sys
rows = {r["system"]: r for r in json.load(open(sys.argv[1]))["rows"]}
assert sorted(rows) == ["ddp", "ddp-balanced", "omnilearn-1server", "omnilearn-colocated"], sorted(rows)
for name, r in rows.items():
    assert r["time_to_target_s"] > 0 and r["iteration_s"] > 0, (name, r)
    profile = r["cpu_profile"]
    assert sorted(profile) == (["worker"] if name.startswith("ddp") else ["server", "worker"]), (name, profile)
    assert all(p["cpu_ms"] > 0 and p["wait_ms"] >= 0 for p in profile.values()), (name, profile)
    links = [r["link_profile"][f"w{i}"][d] for i in range(4) for d in ("down", "up")]
    assert all(0 < link["busy"] <= 1.05 and link["mb"] > 0 for link in links), (name, links)
ratio = lambda a, b: rows[a]["iteration_s"] / rows[b]["iteration_s"]
print(f"HL8, iteration: ddp-balanced {ratio('ddp-balanced', 'ddp'):.2f}x ddp; servers on the worker hosts "
      f"{ratio('omnilearn-colocated', 'ddp-balanced'):.2f}x ddp-balanced, {ratio('omnilearn-colocated', 'ddp'):.2f}x "
      f"ddp, {ratio('omnilearn-colocated', 'omnilearn-1server'):.2f}x one server; batches "
      f"{rows['omnilearn-colocated']['batches']} (the equal-time split: 16,16,11,85)")
assert ratio("ddp-balanced", "ddp") < 0.85
b = rows["omnilearn-colocated"]["batches"]
assert b[3] >= 70 and min(b[:3]) >= 6, b  # the fastest device (32 cores) gets most of the 128
assert ratio("omnilearn-colocated", "omnilearn-1server") < 0.7
PY
echo "peers_quick_test: OK"
