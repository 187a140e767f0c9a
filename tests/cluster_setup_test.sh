#!/usr/bin/env bash
# The emulated cluster's set-up on the kernel's defaults: a machine whose namespaces may take
# no congestion control but reno (net.ipv4.tcp_allowed_congestion_control, stricter than a new
# Debian 12 machine's "reno bbr") still gets every host the one asked for (cubic by default,
# bbr where the kernel has it), and the machine's list is as it was after each `up`, a failed
# one included. The test puts the list back as it found it. Needs root.
set -euo pipefail
CLUSTER=$(cd "$(dirname "$0")" && pwd)/cluster.sh
ALLOWED=/proc/sys/net/ipv4/tcp_allowed_congestion_control
P=olk$$
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "needs root (network namespaces, the kernel's settings)"
export PATH=$PATH:/usr/sbin:/sbin

original=$(cat "$ALLOWED")
# set_allowed LIST: the machine's list, under the lock tests/cluster.sh takes to change it.
set_allowed() { flock "$ALLOWED" sh -c "echo '$1' > $ALLOWED"; }
trap '"$CLUSTER" down "$P" >/dev/null 2>&1; set_allowed "$original"' EXIT
set_allowed reno
[ "$(cat "$ALLOWED")" = reno ] || fail "could not restrict the list to reno: $(cat "$ALLOWED")"

for cc in cubic bbr reno; do
  grep -qwF "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control || { echo "skip $cc: not in this kernel"; continue; }
  OMNILEARN_CLUSTER_TCP_CC=$cc "$CLUSTER" up "$P" a=100mbit b=100mbit >/dev/null ||
    fail "the cluster did not come up with $cc while the machine allows only reno"
  for h in a b; do
    got=$("$CLUSTER" exec "$P" "$h" cat /proc/sys/net/ipv4/tcp_congestion_control)
    [ "$got" = "$cc" ] || fail "host $h runs $got, not $cc"
  done
  [ "$(cat "$ALLOWED")" = reno ] || fail "up with $cc left the machine's list at '$(cat "$ALLOWED")'"
  "$CLUSTER" down "$P"
  echo "$cc: both hosts set, the machine's list left at reno"
done
# A set-up that fails half way (a bad rate) leaves the list as it was, and no namespace.
if "$CLUSTER" up "$P" a=100mbit b=fast >/dev/null 2>&1; then fail "a bad rate was accepted"; fi
[ "$(cat "$ALLOWED")" = reno ] || fail "a failed up left the machine's list at '$(cat "$ALLOWED")'"
[ "$(ip netns list | grep -c "^$P-" || true)" = 0 ] || fail "a failed up left namespaces"
echo "PASS"
