#!/usr/bin/env bash
# The deploy files that cannot run here, checked as far as possible against the built
# binaries: systemd-analyze verify of every unit (silent, or it fails); the Kubernetes
# manifests, the container file and the environment files by tests/check_deploy.py (and
# the checker must catch broken copies); the container's runtime packages derived from the
# binaries by deploy/runtime-packages.sh. (Slurm runs for real: tests/slurm_test.sh.)
set -euo pipefail
RUNFILES=${TEST_SRCDIR:-$PWD/bazel-bin/tests/deploy_test.runfiles}/omnilearn
WORK=${TEST_TMPDIR:-$(mktemp -d)}
SERVER=$RUNFILES/server/omnilearn_server
WORKER=$RUNFILES/worker/omnilearn_worker
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- systemd: every unit verifies without a word, against the built binaries
mkdir -p "$WORK/units"
cp "$RUNFILES"/deploy/systemd/*.service "$WORK/units/"
sed -i "s|/usr/local/bin/omnilearn_server|$SERVER|; s|/usr/local/bin/omnilearn_worker|$WORKER|" "$WORK"/units/*.service
cd "$WORK/units"
for unit in omnilearn-server.service omnilearn-worker@0.service omnilearn-worker@7.service; do
  out=$(systemd-analyze verify "./$unit" 2>&1) || fail "systemd-analyze verify $unit: $out"
  [ -z "$out" ] || fail "systemd-analyze verify $unit is not silent: $out"
  echo "systemd-analyze verify $unit: clean"
done
echo "Bogus=1" >> "omnilearn-worker@.service"
out=$(systemd-analyze verify ./omnilearn-worker@0.service 2>&1 || true)
grep -q "Unknown key 'Bogus'" <<<"$out" || fail "verify does not see a broken unit: $out"
cd "$WORK"

# ---- runtime packages from the binaries, then the offline checks
"$RUNFILES/deploy/runtime-packages.sh" "$SERVER" "$WORKER" > packages.txt || fail "runtime-packages.sh failed"
CHECK=(/usr/bin/python3 "$RUNFILES/tests/check_deploy.py" --server="$SERVER" --worker="$WORKER" --packages=packages.txt)
"${CHECK[@]}" --deploy="$RUNFILES/deploy" || fail "the deploy files do not check"

# ---- the checker catches what it claims to
cp -rL "$RUNFILES/deploy" broken && chmod -R u+w broken
sed -i 's/claimName: omnilearn-state/claimName: omnilearn-gone/; s/--checkpoint_every_s=60/--checkpoint_every=60/' \
  broken/k8s/server.yaml
sed -i 's/selector: {app: omnilearn, role: server}/selector: {app: omnilearn, role: srv}/' broken/k8s/server.yaml
sed -i 's/--server=omnilearn-server:50051/--server=omnilearn:50051/' broken/k8s/workers.yaml
sed -i 's/--epochs=10/--epoch=10/' broken/systemd/worker.env
sed -i 's/^USER 10001:10001/USER root/' broken/Containerfile
sed -i 's/replicas: 3  # OMNILEARN_SHARDS - 1/replicas: 2/; s/--coordinator=omnilearn-server:50051/--coordinator=omnilearn:50051/' \
  broken/k8s/sharded.yaml
sed -i 's/matchLabels: {app: omnilearn, role: worker}}/matchLabels: {app: omnilearn, role: wrk}}/' broken/k8s/sharded.yaml
sed -i 's|--checkpoint_dir=/var/lib/omnilearn/checkpoints|--checkpoint_dir=/tmp/checkpoints|' broken/k8s/sharded.yaml
out=$("${CHECK[@]}" --deploy=broken 2>&1) && fail "broken deploy files passed the check"
for expect in "claims omnilearn-gone" "--checkpoint_every is not a flag" "selects no server pod" \
    "--server names no Service" "--epoch is not a flag" "non-root" "not OMNILEARN_SHARDS - 1" \
    "--coordinator is not the coordinator's Service" "shard: --checkpoint_dir is not on the persistent volume" \
    "no pod affinity to the workers' nodes"; do
  grep -q -- "$expect" <<<"$out" || { echo "$out" >&2; fail "the checker missed: $expect"; }
done
echo "check_deploy.py catches a missing claim, an unknown flag, a wrong selector, a wrong server name, root," \
  "a shard count off the ConfigMap, a wrong coordinator, a shard's checkpoints off its volume, servers not beside" \
  "the workers"
echo "deploy_test: OK"
