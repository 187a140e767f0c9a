#!/usr/bin/env bash
# Server and 3 workers train a small model for a bounded number of iterations in each
# mode: the loss falls; with devices of different speeds the batches move toward the speed
# ratio; with --controller=off they stay equal. The devices are emulated (2 ms + 0.5 ms per
# sample, and 4x slower per sample): a tiny model's real step on 2 shared cores is a few ms
# of mostly scheduling noise, which once planned batches of 94:1:1 for workers of speeds 1:1:4.
# Every mode trains exactly the job's samples (async and ssp once ran a few batches past).
# Local steps too: the C++ workers take 4 steps of their own SGD a round and push the
# round's pseudo-gradient; the server's SGD at rate 1 averages them (Local SGD); in sync and ssp.
source "$(dirname "$0")/e2e_lib.sh"
WORKER_PIDS=()

EXTRA=()  # more server flags for the next run_job
WEXTRA=() # more worker flags for the next run_job
run_job() {  # run_job NAME MODE CONTROLLER SLOWDOWNS...
  local name=$1 mode=$2 controller=$3; shift 3
  start_server "$name" --mode="$mode" --controller="$controller" --num_workers=3 --global_batch=96 \
    --adjust_every=5 --lr=0.05 "${EXTRA[@]}"
  EXTRA=()
  local i=0
  for s in "$@"; do
    start_worker "w$i" "$WORK/$name.w$i.log" --emulate_device="2:$(awk "BEGIN {print 0.5 * $s}")" --epochs=0.3 \
      "${WEXTRA[@]}"
    i=$((i + 1))
  done
  WEXTRA=()
  wait_workers || { tail -5 "$WORK/$name".w*.log >&2; fail "$name: a worker failed"; }
  stop_server
  read -r first last < <(first_and_last_loss "$WORK/$name.w0.log")
  echo "$name: loss $first -> $last; batches $(json "[w['final_batch'] for w in sorted(s['workers'], key=lambda w: w['name'])]")"
  python3 -c "import sys; sys.exit(0 if $last < 0.6 * $first else 1)" || fail "$name: loss did not fall ($first -> $last)"
  # Every mode ends on the job's exact count: 0.3 epochs, rounded up to a whole sample.
  local trained want
  trained=$(json "s['global_samples']")
  want=$(json "s['job_samples']")
  [ "$want" = "$(json "-(-3 * s['dataset_size'] // 10)")" ] || fail "$name: the job's count is $want samples"

  [ "$trained" = "$want" ] || fail "$name: $trained samples trained, the job's 0.3 epochs are $want"
}

batches() { json "' '.join(str(w['final_batch']) for w in sorted(s['workers'], key=lambda w: w['name']))"; }
# Mean batch over the whole run (async workers finish at different times, so their
# final batches include the shares of those that left first).
mean_batches() {
  json "' '.join(str(round(w['samples'] / w['iterations'])) for w in sorted(s['workers'], key=lambda w: w['name']))"
}

# toward_4_4_1 WHAT B0 B1 B2: the 4x slower w2 ends under a quarter of the batch; each fast
# one with over twice its batch.
toward_4_4_1() {
  [ "$4" -lt 24 ] && [ "$2" -gt $(($4 * 2)) ] && [ "$3" -gt $(($4 * 2)) ] ||
    fail "$1: batches $2 $3 $4 did not move toward 4:4:1"
}
# within_bound WHAT: w0 ran no more than 2 iterations (--staleness_bound) ahead of the slow w2.
within_bound() {
  local i0 i2
  read -r i0 i2 < <(json "' '.join(str(w['iterations']) for w in sorted(s['workers'], key=lambda w: w['name']) if w['name'] != 'w1')")
  [ $((i0 - i2)) -le 2 ] || fail "$1: w0 ran $i0 iterations, the slow w2 $i2: more than the bound 2 apart"
}

run_job sync-balanced sync omnilearn 1 1 4
read -r b0 b1 b2 < <(batches)
[ $((b0 + b1 + b2)) -eq 96 ] || fail "sync: batches $b0 $b1 $b2 do not sum to 96"
toward_4_4_1 sync $b0 $b1 $b2

run_job async-balanced async omnilearn 1 1 4
toward_4_4_1 "async (mean)" $(mean_batches)

# Bounded staleness: no worker more than 2 iterations ahead of the slowest, so the
# fast ones cannot run away; the controller still balances the batches.
EXTRA=(--staleness_bound=2)
run_job ssp-balanced ssp omnilearn 1 1 4
toward_4_4_1 "ssp (mean)" $(mean_batches)
within_bound ssp

# Local steps: a round is 4 steps of each worker's own SGD; the controller plans a round's
# batch from the first round on, so the slow worker's round ends with the others'.
EXTRA=(--local_steps=4 --lr=1)
WEXTRA=(--optimizer=sgd --lr=0.05)
run_job sync-local sync omnilearn 1 1 4
toward_4_4_1 "local steps" $(batches)
grep -q "local steps x4 a round" "$WORK/sync-local.server.log" || fail "local steps: the server did not say it runs them"
# Local steps in ssp: a round is an iteration, so no worker is more than 2 rounds ahead of the
# slowest, and the controller still balances the rounds.
EXTRA=(--local_steps=4 --lr=1 --staleness_bound=2)
WEXTRA=(--optimizer=sgd --lr=0.05)
run_job ssp-local ssp omnilearn 1 1 4
toward_4_4_1 "ssp local steps (mean)" $(mean_batches)
within_bound "ssp local steps (an iteration a round)"

run_job sync-off sync off 1 1 4
read -r b0 b1 b2 < <(batches)
[ "$b0" -eq 32 ] && [ "$b1" -eq 32 ] && [ "$b2" -eq 32 ] || fail "controller=off: batches $b0 $b1 $b2 are not equal"
echo "PASS"
