#!/usr/bin/env bash
# Disk faults are seen by operators (issue 52): a checkpoint that fails does not stop
# training, and /metrics, `omnilearn_ctl status` and the log say so, for the coordinator
# and every shard.
# - A sharded sync job on loopback (a coordinator and one shard server, two workers, MLP,
#   4 epochs of 20,000 synthetic samples, checkpoints every second). The coordinator's
#   checkpoint directory is a 256 KiB tmpfs: every checkpoint fails (ENOSPC). The shard's
#   is a 64 MiB tmpfs, read-only while the job runs (EROFS), then writable again, as the
#   coordinator's grows to 64 MiB. Asserted, each state waited for (bounded): the
#   coordinator's omnilearn_checkpoint_failing and ctl's "checkpoints FAILING ... No space
#   left on device"; the shard's own /metrics and the coordinator's
#   omnilearn_coordinator_shard_checkpoint_failing{shard="1"} and ctl's shard row
#   "FAILING ... Read-only file system"; both back to 0 and "v<N> <S>s ago" once the disks
#   take checkpoints again; the job finishes with exactly 80,000 samples, every process 0.
# - A lone server's checkpoints: the newest gets a flipped byte, the one before is cut to
#   half its size (a half-written file); the server restarted on them resumes from the
#   third, and omnilearn_checkpoint_corrupt_skipped_total and ctl say 2 were skipped.
# Needs root (tmpfs mounts).
source "$(dirname "$0")/e2e_lib.sh"
CTL=$RUNFILES/tools/omnilearn_ctl
[ "$(id -u)" = 0 ] || fail "needs root (tmpfs mounts)"
MOUNTS=()
cleanup() {
  stop_all
  for m in "${MOUNTS[@]:-}"; do [ -n "$m" ] && umount -l "$m" 2>/dev/null || true; done
}
trap cleanup EXIT
tmpfs() {  # tmpfs DIR SIZE
  mkdir -p "$1"
  mount -t tmpfs -o size="$2" omnilearn-test "$1" || fail "cannot mount a tmpfs on $1"
  MOUNTS+=("$1")
}

# metric URL PATTERN: the scrape of URL has a line matching PATTERN (read whole first:
# grep -q quits at its match, and curl, cut off, would fail).
metric() {
  local text
  text=$(curl -sf "$1") || return 1
  grep -q "$2" <<<"$text"
}
status() { "$CTL" status --server="127.0.0.1:$PORT" --timeout=5 2>/dev/null; }
status_has() { grep -q "$1" <<<"$(status)"; }

# ---- A sharded job on a full disk and a read-only one.
tmpfs "$WORK/coord.ckpt" 256k
tmpfs "$WORK/shard.ckpt" 64m
MP=$(free_port)
SMP=$(free_port)
start_server disk --mode=sync --num_workers=2 --global_batch=64 --lr=0.05 --exit_when_done --shards=2 \
  --partition_mb=0.25 --checkpoint_every_s=1 --checkpoint_dir="$WORK/coord.ckpt" --metrics_port="$MP" \
  --metrics_bind=127.0.0.1
timeout 300 "$SERVER" --bind=127.0.0.1 --port="$(free_port)" --coordinator="127.0.0.1:$PORT" --shards=2 \
  --partition_mb=0.25 --checkpoint_dir="$WORK/shard.ckpt" --metrics_port="$SMP" --metrics_bind=127.0.0.1 \
  > "$WORK/disk.shard.log" 2>&1 &
SHARD_PID=$!
STARTED+=($!)
WORKER_PIDS=()
for w in w0 w1; do
  start_worker "$w" "$WORK/disk.$w.log" --epochs=4 --emulate_device=20:0.5:0 --evaluate=false --log_every=20
done
COORD=http://127.0.0.1:$MP/metrics
SHARD=http://127.0.0.1:$SMP/metrics

wait_until 600 "the coordinator's full disk in its /metrics" metric "$COORD" "^omnilearn_checkpoint_failing 1$"
metric "$COORD" "^omnilearn_checkpoint_failures_total [1-9]" || fail "no checkpoint failures counted"
wait_until 300 "ctl status saying the coordinator's checkpoints fail" \
  status_has "^checkpoints FAILING ([0-9]*): .*No space left on device"
grep -q "checkpoint failed: .*No space left on device" "$WORK/disk.server.log" || fail "no failure in the log"
wait_until 300 "the shard's first checkpoint reported to the coordinator" status_has "^1 .* v[0-9]* [0-9]*s ago$"
status | tee "$WORK/full.status"

# The disk turns read-only under the shard (as a file system remounted read-only after an
# error; a remount of our own is refused while the shard holds its lock file open): a
# read-only tmpfs mounted over the directory, unmounted to heal.
mount -t tmpfs -o ro,size=1m omnilearn-test "$WORK/shard.ckpt" || fail "cannot mount a read-only tmpfs"
MOUNTS+=("$WORK/shard.ckpt")
wait_until 300 "the shard's read-only disk in its own /metrics" metric "$SHARD" "^omnilearn_checkpoint_failing 1$"
wait_until 300 "the shard's read-only disk in the coordinator's /metrics" \
  metric "$COORD" '^omnilearn_coordinator_shard_checkpoint_failing{shard="1"} 1$'
wait_until 300 "ctl's shard row saying its checkpoints fail" status_has "^1 .*FAILING ([0-9]*): .*Read-only file system"
grep -q "checkpoint failed (training goes on" "$WORK/disk.shard.log" || fail "no failure in the shard's log"
status | tee "$WORK/readonly.status"
curl -sf "$COORD" > "$WORK/coordinator.prom" && curl -sf "$SHARD" > "$WORK/shard.prom" || fail "a scrape failed"
# Every series the alert rules in deploy/ name is exported (the coordinator's or a shard's).
for name in $(grep 'expr:' "$RUNFILES/deploy/omnilearn-alerts.yml" | grep -o 'omnilearn_[a-z_]*' | sort -u); do
  grep -q "^$name[ {]" "$WORK/coordinator.prom" "$WORK/shard.prom" || fail "an alert uses $name, which nobody exports"
done
before=$(grep -c " it=" "$WORK/disk.w0.log" || true)
trained() { [ "$(grep -c " it=" "$WORK/disk.w0.log" || true)" -gt "$before" ]; }
wait_until 300 "training to go on while no checkpoint can be written" trained

mount -o remount,size=64m "$WORK/coord.ckpt" || fail "cannot grow the coordinator's disk"
umount "$WORK/shard.ckpt" || fail "cannot make the shard's disk writable again"
wait_until 300 "the coordinator's checkpoints to be written again" metric "$COORD" "^omnilearn_checkpoint_failing 0$"
wait_until 300 "the shard's checkpoints to be written again (as reported)" \
  metric "$COORD" '^omnilearn_coordinator_shard_checkpoint_failing{shard="1"} 0$'
wait_until 300 "ctl to show both good again" status_has "^checkpoints v[0-9]* [0-9]*s ago$"
status | tee "$WORK/recovered.status"
grep -q "^1 .* v[0-9]* [0-9]*s ago$" "$WORK/recovered.status" || fail "ctl's shard row did not recover"

wait_workers || { tail -n 5 "$WORK"/disk.w*.log >&2; fail "a worker failed"; }
wait "$SERVER_PID" || { tail -n 20 "$WORK/disk.server.log" >&2; fail "the coordinator failed"; }
wait "$SHARD_PID" || { tail -n 20 "$WORK/disk.shard.log" >&2; fail "the shard failed"; }
samples=$(sed -n 's/.*training finished: model version [0-9]*, \([0-9]*\) samples.*/\1/p' "$WORK/disk.server.log")
[ "${samples:-0}" = 80000 ] || fail "trained ${samples:-no} samples, not 80000"
echo "disk: full and read-only disks seen and recovered; 80000 samples"

# ---- Corrupt and half-written checkpoints at a restart.
start_server lone --mode=sync --num_workers=1 --global_batch=32 --checkpoint_every_s=1 \
  --checkpoint_dir="$WORK/lone.ckpt" --metrics_port="$MP" --metrics_bind=127.0.0.1
WORKER_PIDS=()
start_worker w0 "$WORK/lone.w0.log" --epochs=0 --max_iterations=100000 --emulate_device=20:0.5:0 --log_every=20
three() { [ "$(ls "$WORK/lone.ckpt" | grep -c '^ckpt-.*safetensors$')" -ge 3 ]; }
wait_until 600 "three checkpoints of the lone server" three
stop_server
wait_workers || true  # told to stop, or cut off: either way it is not what is checked here
mapfile -t files < <(ls -r "$WORK/lone.ckpt"/ckpt-*.safetensors)
python3 - "${files[0]}" "${files[1]}" <<'PY'
import os, sys
newest, before = sys.argv[1:3]
with open(newest, "r+b") as f:  # a flipped byte in the tensors (past the header)
    f.seek(os.path.getsize(newest) - 100)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
os.truncate(before, os.path.getsize(before) // 2)  # a half-written file
PY
restart_server lone --mode=sync --num_workers=1 --global_batch=32 --checkpoint_every_s=1 \
  --checkpoint_dir="$WORK/lone.ckpt" --metrics_port="$MP" --metrics_bind=127.0.0.1
grep -q "resumed from ${files[2]}" "$WORK/lone.server.log" || fail "the restart did not resume from the third newest"
[ "$(grep -c "skipping unreadable checkpoint" "$WORK/lone.server.log")" = 2 ] || fail "not two files skipped"
wait_until 100 "the skipped files in /metrics" metric "$COORD" "^omnilearn_checkpoint_corrupt_skipped_total 2$"
wait_until 100 "ctl to count the skipped files" \
  status_has "^checkpoints v$(basename "${files[2]}" | sed 's/ckpt-0*\([0-9]\)/\1/; s/.safetensors//') .*; 2 corrupt skipped$"
status | head -n 3
stop_server
echo PASS
