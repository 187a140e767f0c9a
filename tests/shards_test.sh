#!/bin/bash
# A sharded job (docs/SHARDING.md): a coordinator and two shard servers (3 slices) train
# Fashion-MNIST's CNN with two workers to the accuracy one server reaches with the same
# workers and epochs, in sync and in async mode (within 1 point); omnilearn_ctl status
# lists the shards and a shard's /metrics counts its bytes and steps while it trains; the
# shards exit 0 when the coordinator's job ends. The sharded sync job again with bfloat16 on
# the wire reaches the float32 one's accuracy (within 1 point). With --clip_grad_norm the
# sharded sync job trains as one server does (the norm reduced over the slices), not as
# the unclipped job. Slices pushed one after the other (--push_slices_in_order) train as
# slices pushed at once, and slices stepped ahead of the coordinator's command
# (--shard_steps_ahead) as slices stepped at it. The first sync job's workers write their timelines
# (OMNILEARN_TIMELINE), which bench/timeline.py reads into rounds.
#
# The rate drops 10x at half the epoch (--lr_decay_epochs=0.5): at a constant rate the
# last async iterate's accuracy varied by 3.3 points between runs of one server (77.5-80.8%),
# more than the bound; after the drop, four pairs of runs were within 0.5 points (and one,
# on a fresh clone, 1.32 points apart: hence the means below).
source "$(dirname "$0")/e2e_lib.sh"
CTL=$RUNFILES/tools/omnilearn_ctl

# inspect LABEL METRICS_PORT: while the job trains, the coordinator's status and shard 1's
# /metrics show the shards at work.
inspect() {
  local label=$1 metrics_port=$2
  wait_for_line "$WORK/$label.w0.log" "it=5 " 600 || fail "$label: the workers did not train"
  local table
  table=$("$CTL" status --server="127.0.0.1:$PORT") || fail "$label: omnilearn_ctl status failed"
  echo "$table"
  for i in 1 2; do grep -q "^$i .* connected " <<<"$table" || fail "$label: shard $i is not listed as connected"; done
  python3 - "$metrics_port" <<'PY' || fail "$label: shard 1's /metrics does not show its work"
import re, sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode()
def value(name):
    m = re.search(rf"^{name} ([0-9.e+]+)$", text, re.M)
    assert m, f"no {name}"
    return float(m.group(1))
assert value("omnilearn_shard_push_bytes_total") > 0 and value("omnilearn_shard_pull_bytes_total") > 0
assert value("omnilearn_shard_slice_bytes") > 0 and value("omnilearn_shard_step_seconds_count") >= 1
assert value("omnilearn_shard_step_command_wait_seconds_count") >= 1
PY
}

# job LABEL MODE SHARDS [SERVER FLAGS...]: final test accuracy (percent) on stdout.
job() {
  local label=$1 mode=$2 shards=$3
  shift 3
  start_server "$label" --mode="$mode" --num_workers=2 --global_batch=256 --shards="$shards" --exit_when_done \
    --lr_decay_epochs=0.5 --summary_json="$WORK/$label.json" "$@"
  local shard_pids=() metrics_port
  metrics_port=$(free_port)
  for i in $(seq 1 $((shards - 1))); do
    timeout 300 "$SERVER" --bind=127.0.0.1 --port=0 --coordinator="127.0.0.1:$PORT" --shards="$shards" \
      --metrics_bind=127.0.0.1 --metrics_port=$([ "$i" = 1 ] && echo "$metrics_port" || echo 0) \
      > "$WORK/$label.shard$i.log" 2>&1 &
    shard_pids+=($!)
    STARTED+=($!)
  done
  WORKER_PIDS=()
  for n in w0 w1; do
    # The first sync job's workers record their iterations (worker/client/timeline.h).
    OMNILEARN_TIMELINE=$([ "$label" = sync-three-1 ] && echo "$WORK/$label.$n.timeline") \
      start_worker "$n" "$WORK/$label.$n.log" --dataset=fashion-mnist --model=cnn --epochs=1 --evaluate
  done
  if [ "$label" = sync-three-1 ]; then inspect "$label" "$metrics_port" >&2; fi
  for p in "${WORKER_PIDS[@]}"; do wait "$p" || { cat "$WORK/$label".*.log >&2; fail "$label: a worker failed"; }; done
  wait "$SERVER_PID" || fail "$label: the coordinator failed"
  for p in "${shard_pids[@]}"; do wait "$p" || { cat "$WORK/$label".shard*.log >&2; fail "$label: a shard failed"; }; done
  grep -o 'test accuracy [0-9.]*%' "$WORK/$label.w0.log" | tail -1 | grep -o '[0-9.]*'
}

# timelines: the first sync job's workers wrote a line per push with every slice's reply and
# model, which bench/timeline.py lines up into rounds.
timelines() {
  local f
  for f in "$WORK"/sync-three-1.w{0,1}.timeline; do
    python3 - "$f" <<'PY' || fail "$f: not a line per push with the three slices' replies and models"
import json, sys
lines = [json.loads(t) for t in open(sys.argv[1])]
assert len(lines) >= 20, len(lines)
for line in lines[1:-1]:  # the first push began before the model's values came, the last may be cut
    names = [e[0] for e in line["events"]]
    assert names[0] == "begin" and "finish" in names and "reply" in names, names
    assert sorted(e[2] for e in line["events"] if e[0] == "slice_reply") == [0, 1, 2], line
    assert names.count("model_in") == 3 and names.count("written") == 3, names
PY
  done
  local summary
  summary=$(python3 "$RUNFILES/bench/timeline.py" --json --skip=2 "$WORK"/sync-three-1.w{0,1}.timeline) ||
    fail "bench/timeline.py failed on the workers' timelines"
  echo "timeline: $summary"
  python3 -c "import json, sys; s = json.loads(sys.argv[1]); sys.exit(not (s['rounds'] >= 10 and
    s['phases']['compute']['median'] > 0 and 'to reply' in s['phases']))" "$summary" ||
    fail "bench/timeline.py: too few rounds or phases in $summary"
}

# Sync is deterministic: one pair. Async applies pushes in their arrival order, so one run
# differs from the next (a fresh clone saw 76.39% against 77.71%): when a pair is more
# than 1 point apart, up to two more pairs run and their means are compared.
for mode in sync async; do
  ones=() threes=()
  for pair in 1 2 3; do
    ones+=("$(job "$mode-one-$pair" "$mode" 1)")
    threes+=("$(job "$mode-three-$pair" "$mode" 3)")
    grep -q "registered" "$WORK/$mode-three-$pair.server.log" || fail "$mode: no shard registered"
    echo "$mode pair $pair: one server ${ones[-1]}%, three shards ${threes[-1]}%"
    verdict=$(python3 -c "
one, three = [$(IFS=,; echo "${ones[*]}")], [$(IFS=,; echo "${threes[*]}")]
m1, m3 = sum(one) / len(one), sum(three) / len(three)
print('close' if abs(m1 - m3) <= 1.0 else 'apart', round(m1, 2), round(m3, 2))")
    [ "${verdict%% *}" = close ] && break
    [ "$mode" = sync ] && break
  done
  read -r v m1 m3 <<<"$verdict"
  echo "$mode: one server ${m1}%, three shards ${m3}% (mean of ${#ones[@]} run(s) each)"
  [ "$v" = close ] || fail "$mode: three shards reached ${m3}%, one server ${m1}% (more than 1 point apart)"
  [ "$mode" = sync ] && sync_three=$m3
done
timelines
# bfloat16 on the wire, sharded: the coordinator's Join chooses it, every slice travels so.
bf16=$(job sync-bf16-three sync 3 --wire_dtype=bf16)
grep -q "wire=bfloat16" "$WORK/sync-bf16-three.server.log" || fail "bf16: the coordinator does not run bf16"
echo "sync, three shards, bfloat16 on the wire: ${bf16}% (float32: ${sync_three}%)"
python3 -c "import sys; sys.exit(abs($bf16 - $sync_three) > 1.0)" ||
  fail "bf16: three shards reached ${bf16}%, ${sync_three}% in float32 (more than 1 point apart)"

# --push_slices_in_order: the workers push the slices one after the other (slice 0 first,
# each with its trailer); sync sums the same gradients, so it reaches the same accuracy.
ordered=$(job sync-ordered-three sync 3 --push_slices_in_order)
grep -q "workers push the slices one after the other" "$WORK/sync-ordered-three.server.log" ||
  fail "ordered: the coordinator does not ask for ordered pushes"
echo "sync, three shards, slices pushed in order: ${ordered}% (at once: ${sync_three}%)"
python3 -c "import sys; sys.exit(abs($ordered - $sync_three) > 1.0)" ||
  fail "ordered: three shards in order reached ${ordered}%, ${sync_three}% at once (more than 1 point apart)"

# --shard_steps_ahead: each round's members and rate go to the shards as the round before
# closes, and a shard steps its slice once their slices are in, before the coordinator's
# command, which then confirms it. The rate drops at the same half epoch, counted in versions
# (a schedule in epochs is not decided ahead). The same accuracy; nearly every step taken
# ahead on both shards; no step refused, no rollback.
ahead=$(job sync-ahead-three sync 3 --shard_steps_ahead --lr_decay_epochs=0 --lr_decay_steps=117)
echo "sync, three shards, steps taken ahead: ${ahead}% (at the command: ${sync_three}%)"
for i in 1 2; do
  line=$(tail -n 1 "$WORK/sync-ahead-three.shard$i.log")
  echo "shard $i: $line"
  taken=$(grep -o '[0-9]* were taken ahead of it' <<<"$line" | grep -o '^[0-9]*')
  [ "${taken:-0}" -ge 100 ] || fail "ahead: shard $i took ${taken:-no} steps ahead of the coordinator's command"
done
if grep -q "goes back\|not confirm\|stepped ahead with" "$WORK"/sync-ahead-three.*.log; then
  fail "ahead: a step taken ahead was refused or the job went back to a checkpoint"
fi
python3 -c "import sys; sys.exit(abs($ahead - $sync_three) > 1.0)" ||
  fail "ahead: three shards stepping ahead reached ${ahead}%, ${sync_three}% at the command (more than 1 point apart)"

# --clip_grad_norm, sharded: every step clips by the whole model's norm, reduced over the
# slices (ServerPeers.StepNorm). The last round's loss of the three-shard job is nearer the
# one server's clipped job than its own unclipped job; accuracy within 1 point.
clip_one=$(job sync-clip-one sync 1 --clip_grad_norm=0.5)
clip_three=$(job sync-clip-three sync 3 --clip_grad_norm=0.5)
echo "sync, clipped at 0.5: one server ${clip_one}%, three shards ${clip_three}%"
python3 - "$WORK" "$clip_one" "$clip_three" <<'PY' || fail "clip: the sharded job does not train as one server does"
import json, sys
work, acc1, acc3 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
loss = lambda label: json.load(open(f"{work}/{label}.json"))["last_train_loss"]
c1, c3, u3 = loss("sync-clip-one"), loss("sync-clip-three"), loss("sync-three-1")
print(f"last loss: clipped one server {c1:.4f}, clipped three shards {c3:.4f}, unclipped three shards {u3:.4f}")
assert abs(acc1 - acc3) <= 1.0, (acc1, acc3)
assert abs(c3 - c1) < abs(c3 - u3), (c1, c3, u3)
PY

# --reset_when_done, sharded: a second job, with another model, on the same servers; the
# shard takes the new job's slice in place of the last job's.
start_server reset --mode=sync --num_workers=1 --global_batch=32 --shards=2 --reset_when_done
timeout 300 "$SERVER" --bind=127.0.0.1 --port=0 --coordinator="127.0.0.1:$PORT" --shards=2 --metrics_port=0 \
  > "$WORK/reset.shard1.log" 2>&1 &
reset_shard=$!
STARTED+=($reset_shard)
WORKER_PIDS=()
start_worker j1 "$WORK/reset.j1.log" --epochs=0.05
wait_workers || { tail -n 5 "$WORK/reset.j1.log" >&2; fail "reset: the first job's worker failed"; }
start_worker j2 "$WORK/reset.j2.log" --epochs=0.05 --model=cnn
wait_workers || { tail -n 5 "$WORK/reset.j2.log" "$WORK/reset.shard1.log" "$WORK/reset.server.log" >&2; fail "reset: the second job (another model) failed"; }
grep -q "a new job starts" "$WORK/reset.server.log" || fail "reset: the coordinator did not start a new job"
[ "$(grep -c "training finished" "$WORK/reset.server.log")" -eq 2 ] || fail "reset: two jobs should have finished"
grep -q "job 2 begins: the slice of job 1 is replaced" "$WORK/reset.shard1.log" ||
  { cat "$WORK/reset.shard1.log" >&2; fail "reset: the shard did not take the new job's slice"; }
stop_server
wait "$reset_shard" || { cat "$WORK/reset.shard1.log" >&2; fail "reset: the shard failed"; }
echo "sync, two shards, --reset_when_done: two jobs (mlp, then cnn) on the same servers"
echo PASS
