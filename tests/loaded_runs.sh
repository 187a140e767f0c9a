#!/usr/bin/env bash
# The test command three times in a row from a fresh clone of HEAD, on a loaded machine:
# the libFuzzer targets (built by ./tests/fuzz_test.sh into build/clang) run beside it in a
# loop. Every run runs every test (`test --nocache_test_results` in ~/.bazelrc for the
# duration; the builds stay incremental). One line per run in $OUT/summary.
#   ./tests/loaded_runs.sh [RUNS]     default 3; OUT=/tmp/loaded by default
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUNS=${1:-3}
OUT=${OUT:-/tmp/loaded}
CLONE=$OUT/clone
for f in codec safetensors service; do
  [ -x "build/clang/fuzz/${f}_fuzzer" ] || { echo "no build/clang/fuzz/${f}_fuzzer: run ./tests/fuzz_test.sh first" >&2; exit 2; }
done
mkdir -p "$OUT"
rm -rf "$CLONE" "$OUT/stop"
git clone -q "$ROOT" "$CLONE"
had_rc=0
[ -e ~/.bazelrc ] && had_rc=1 && cp ~/.bazelrc "$OUT/bazelrc.saved"
echo 'test --nocache_test_results' >> ~/.bazelrc
restore() {
  touch "$OUT/stop"
  if [ $had_rc -eq 1 ]; then cp "$OUT/bazelrc.saved" ~/.bazelrc; else rm -f ~/.bazelrc; fi
  # The clone's own bazel server (another output base) would otherwise idle on for hours.
  (cd "$CLONE" && timeout 120 bazel shutdown) > /dev/null 2>&1 || true
}
trap restore EXIT
( while [ ! -e "$OUT/stop" ]; do
    for f in codec safetensors service; do
      [ -e "$OUT/stop" ] && break
      mkdir -p "$OUT/corpus_$f"
      "$ROOT/build/clang/fuzz/${f}_fuzzer" -max_total_time=60 "$OUT/corpus_$f" > /dev/null 2>&1
    done
  done ) &
echo "$(git -C "$CLONE" log --oneline -1)" > "$OUT/summary"
failed=0
for i in $(seq "$RUNS"); do
  start=$SECONDS
  (cd "$CLONE" && ./tests/run.sh) > "$OUT/run$i.log" 2>&1 || failed=1
  echo "run $i: $(tail -n 1 "$OUT/run$i.log"), $((SECONDS - start)) s" | tee -a "$OUT/summary"
done
exit $failed
