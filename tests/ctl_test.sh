#!/usr/bin/env bash
# omnilearn_ctl against a live, token-protected server with two training workers: the
# table, --json for scripts, --watch, and a clear refusal without the token. w1's emulated
# device is far faster than its real steps (every step overruns): the table, the JSON and
# the server's /metrics count them.
source "$(dirname "$0")/e2e_lib.sh"
CTL=$RUNFILES/tools/omnilearn_ctl
WORKER_PIDS=()
echo "ctl-test-token" > "$WORK/token"
MP=$(free_port)
start_server ctl --mode=sync --num_workers=2 --global_batch=64 --auth_token_file="$WORK/token" --metrics_port="$MP" \
  --metrics_bind=127.0.0.1
start_worker w0 "$WORK/w0.log" --epochs=0 --max_iterations=100000 --slowdown=3 --auth_token_file="$WORK/token"
start_worker w1 "$WORK/w1.log" --epochs=0 --max_iterations=100000 --emulate_device=0.01:0.0001 \
  --auth_token_file="$WORK/token"
wait_for_line "$WORK/w1.log" "it=5 " 300 || fail "the workers did not train"

if out=$("$CTL" status --server="127.0.0.1:$PORT" 2>&1); then fail "status without the token succeeded"; fi
grep -q "no bearer token" <<<"$out" || fail "no clear refusal without the token: $out"

table=$("$CTL" status --server="127.0.0.1:$PORT" --auth_token_file="$WORK/token") || fail "status failed"
echo "$table"
grep -q "^job 1  sync  controller omnilearn" <<<"$table" || fail "no job line"
grep -q "^epoch [0-9.]* (" <<<"$table" || fail "no epoch"
for w in w0 w1; do grep -q "^$w .* active " <<<"$table" || fail "$w is not listed as active"; done
grep -q "^w1 .* [1-9][0-9]*$" <<<"$table" || fail "w1's overruns are not in the table"
grep -q "^w0 .* 0$" <<<"$table" || fail "w0 has overruns, or none are shown"
# Read whole first: `grep -q` quits at its match, and curl, cut off, would fail the pipeline.
metrics=$(curl -sf "http://127.0.0.1:$MP/metrics") || fail "the server's /metrics did not answer"
grep -q '^omnilearn_worker_emulation_overruns{worker="w1"} [1-9]' <<<"$metrics" ||
  fail "the server's /metrics has no overruns of w1"

"$CTL" status --server="127.0.0.1:$PORT" --auth_token_file="$WORK/token" --json > "$WORK/status.json" || fail "--json failed"
python3 - "$WORK/status.json" <<'PY' || fail "the JSON status is not what the server holds"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["mode"] == "MODE_SYNC", s["mode"]
assert sorted(w["name"] for w in s["workers"]) == ["w0", "w1"], s["workers"]
assert int(s["model_version"]) > 0 and int(s["dataset_size"]) == 20000
assert all(int(w["iterations"]) > 0 and float(w["mean_compute_seconds"]) > 0 for w in s["workers"])
overruns = {w["name"]: int(w.get("emulation_overruns", 0)) for w in s["workers"]}
assert overruns["w1"] > 0 and overruns["w0"] == 0, overruns
PY

views=$(timeout 2 "$CTL" status --server="127.0.0.1:$PORT" --auth_token_file="$WORK/token" --watch=0.3 | grep -c "^WORKER" || true)
[ "$views" -ge 2 ] || fail "--watch printed $views views in 2 s"
if "$CTL" status --watch=-1 2>/dev/null; then fail "--watch=-1 was accepted"; fi
if "$CTL" statuz 2>/dev/null; then fail "an unknown command was accepted"; fi

stop_server
wait_workers || fail "the workers did not stop with the server"
echo PASS
