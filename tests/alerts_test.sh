#!/usr/bin/env bash
# deploy/omnilearn-alerts.yml: valid rules, loaded by deploy/prometheus.yml, and each alert
# fires when it should and not before (promtool's rule tests in tests/alerts_test.yml).
# That every series the rules name is exported is checked on live servers by
# tests/disk_faults_test.sh.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
WORK=${TEST_TMPDIR:-$(mktemp -d)}
SRC=$TEST_SRCDIR/omnilearn
cp "$SRC/deploy/prometheus.yml" "$SRC/deploy/omnilearn-alerts.yml" "$SRC/tests/alerts_test.yml" "$WORK/"
cd "$WORK"
promtool check rules omnilearn-alerts.yml || fail "the alert rules are not valid"
promtool check config prometheus.yml 2>&1 | tee config.out
grep -q "SUCCESS: 1 rule files found" config.out || fail "prometheus.yml does not load the alert rules"
promtool test rules alerts_test.yml || fail "an alert does not fire as its test says"
echo PASS
