#!/usr/bin/env bash
# An emulated cluster on one machine: hosts as network namespaces on a bridge (the bridge
# lives in a namespace of its own, so the machine's own network is never touched), each
# host's link capped with tc tbf at a rate of its own, in both directions: its uploads on
# its eth0, its downloads on the bridge's port toward it. This kernel has tbf, not netem:
# links have a rate, not an added delay. Needs root and iproute2.
#
#   tests/cluster.sh up PREFIX HOST=RATE...       make the hosts (RATE as tc says it: 10gbit,
#                                                 1gbit, 200mbit); prints "HOST ADDRESS" lines.
#                                                 On any failure it removes what it made.
#   tests/cluster.sh addr PREFIX HOST             the host's address
#   tests/cluster.sh exec PREFIX HOST CMD...      runs CMD inside the host (one command)
#   tests/cluster.sh probe PREFIX FROM TO [MB]    sends MB (default 50) over TCP from FROM to
#                                                 TO; prints the rate it reached in Mbit/s
#   tests/cluster.sh cut PREFIX A B               cuts the link between hosts A and B both ways:
#                                                 their packets to each other are dropped
#                                                 silently (a partition: no error, no reset)
#   tests/cluster.sh heal PREFIX A B              heals it
#   tests/cluster.sh down PREFIX                  removes every namespace of PREFIX (idempotent)
#
# Every host's TCP congestion control is set, not inherited from the machine's default:
# OMNILEARN_CLUSTER_TCP_CC (default cubic, Linux's own default; bbr, reno: what the kernel
# offers), whether or not the machine allows it to namespaces (set_cc). A machine whose
# default is BBR (v1) otherwise gives the servers' many flows into one 50 ms queue 10-13% of their segments retransmitted (docs/performance.md). Likewise
# OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE (net.ipv4.tcp_slow_start_after_idle: 1, Linux's
# default, or 0: a connection idle for longer than its retransmission timeout keeps its
# congestion window; docs/operating.md, "Links").
#
# PREFIX names everything of one cluster (at most 10 characters, e.g. "ol$$"), so clusters
# of parallel runs cannot collide. Whoever calls `up` calls `down` in a trap that also runs
# on failure; the processes started inside are the caller's to stop first. Hosts get
# 10.214.0.1, .2, ... in the order given; only they and 127.0.0.0/8 are ever addressed.
set -euo pipefail

export PATH=$PATH:/usr/sbin:/sbin  # tc lives there; a test's PATH may lack it
STATE_ROOT=${OMNILEARN_CLUSTER_STATE:-/tmp/omnilearn-clusters}
TCP_CC=${OMNILEARN_CLUSTER_TCP_CC:-cubic}
SLOW_START_AFTER_IDLE=${OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE:-1}

die() { echo "cluster.sh: $*" >&2; exit 1; }

state() { echo "$STATE_ROOT/$1"; }

# rate_bytes RATE: bytes per second of a tc rate (kbit, mbit, gbit, bit; bps = bytes).
rate_bytes() {
  python3 - "$1" <<'PY'
import re, sys
m = re.fullmatch(r"([0-9.]+)(k|m|g)?(bit|bps)", sys.argv[1].lower())
if not m or float(m.group(1)) <= 0: sys.exit(f"cluster.sh: rate '{sys.argv[1]}' is not like 10gbit, 1gbit, 200mbit")
scale = {"k": 1e3, "m": 1e6, "g": 1e9, None: 1}[m.group(2)]
print(int(float(m.group(1)) * scale / (8 if m.group(3) == "bit" else 1)))
PY
}

# cap NS IF RATE: a token bucket on IF's egress. The burst is 1 ms of the rate and at
# least 64 KiB (one GSO segment): a transfer cannot run ahead of the rate by more than that
# (a larger bucket would let a whole small model through at once). The queue holds 50 ms.
cap() {
  local bytes burst
  bytes=$(rate_bytes "$3")
  burst=$(( bytes / 1000 > 65536 ? bytes / 1000 : 65536 ))
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 50ms
}

# set_cc NS: NS's TCP congestion control, TCP_CC. A namespace other than the machine's own
# may only take one the kernel allows (net.ipv4.tcp_allowed_congestion_control, global: a new
# Debian 12 machine allows "reno bbr", not cubic). One that is not allowed is added to the list
# for the moment of the write and the list put back at once, also if this is killed, all under
# a lock on that setting, so that parallel clusters never see each other's list. A namespace
# keeps its congestion control once set; nothing of the machine's stays changed.
ALLOWED_CC=/proc/sys/net/ipv4/tcp_allowed_congestion_control
set_cc() {
  local ns=$1
  (
    flock 9
    allowed=$(cat "$ALLOWED_CC")
    if ! grep -qwF -- "$TCP_CC" <<<"$allowed"; then
      trap 'echo "$allowed" > "$ALLOWED_CC"' EXIT
      echo "$allowed $TCP_CC" 2>/dev/null > "$ALLOWED_CC" ||
        die "the hosts' congestion control $TCP_CC is not in net.ipv4.tcp_allowed_congestion_control ($allowed) and cannot be added for a moment: run as root with /proc/sys writable, or set OMNILEARN_CLUSTER_TCP_CC to one of: $allowed"
    fi
    ip netns exec "$ns" sh -c "echo $TCP_CC > /proc/sys/net/ipv4/tcp_congestion_control" 2>/dev/null ||
      die "cannot set $TCP_CC as host $ns's congestion control"
  ) 9<"$ALLOWED_CC"
}

up() {
  local prefix=$1; shift
  [ ${#prefix} -le 10 ] || die "PREFIX '$prefix' is longer than 10 characters"
  [ $# -ge 1 ] || die "usage: up PREFIX HOST=RATE..."
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
  [ ! -e "$(state "$prefix")" ] || die "a cluster named $prefix exists already"
  grep -qwF -- "$TCP_CC" /proc/sys/net/ipv4/tcp_available_congestion_control ||
    die "OMNILEARN_CLUSTER_TCP_CC=$TCP_CC is not one of this kernel's: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control)"
  [[ "$SLOW_START_AFTER_IDLE" =~ ^[01]$ ]] ||
    die "OMNILEARN_CLUSTER_SLOW_START_AFTER_IDLE=$SLOW_START_AFTER_IDLE: want 1 (Linux's default) or 0"
  UP_PREFIX=$prefix UP_DONE=0
  trap '[ "$UP_DONE" = 1 ] || down "$UP_PREFIX" >/dev/null 2>&1' EXIT
  mkdir -p "$(state "$prefix")"
  local lan=$prefix-lan i=0 spec host rate
  ip netns add "$lan"
  ip -n "$lan" link add br0 type bridge
  ip -n "$lan" link set br0 up
  for spec in "$@"; do
    host=${spec%%=*}
    rate=${spec#*=}
    [[ "$spec" == *=* && "$host" =~ ^[a-z0-9]+$ ]] || die "'$spec' is not HOST=RATE (host: lower-case letters, digits)"
    rate_bytes "$rate" >/dev/null
    i=$((i + 1))
    ip netns add "$prefix-$host"
    ip -n "$prefix-$host" link set lo up
    set_cc "$prefix-$host"
    ip netns exec "$prefix-$host" sh -c "echo $SLOW_START_AFTER_IDLE > /proc/sys/net/ipv4/tcp_slow_start_after_idle"
    ip link add "${prefix}v$i" netns "$prefix-$host" type veth peer name "p$i" netns "$lan"
    ip -n "$prefix-$host" link set "${prefix}v$i" name eth0
    ip -n "$prefix-$host" addr add "10.214.0.$i/24" dev eth0
    ip -n "$prefix-$host" link set eth0 up
    ip -n "$lan" link set "p$i" master br0 up
    cap "$prefix-$host" eth0 "$rate"  # the host's uploads
    cap "$lan" "p$i" "$rate"          # its downloads
    echo "$host 10.214.0.$i $rate" >> "$(state "$prefix")/hosts"
    echo "$host 10.214.0.$i"
  done
  UP_DONE=1
}

addr() {
  [ -f "$(state "$1")/hosts" ] || die "no cluster named $1"
  awk -v h="$2" '$1 == h { print $2; found = 1 } END { exit !found }' "$(state "$1")/hosts" ||
    die "cluster $1 has no host $2"
}

run_in() {
  local prefix=$1 host=$2; shift 2
  addr "$prefix" "$host" >/dev/null
  exec ip netns exec "$prefix-$host" "$@"
}

probe() {
  local prefix=$1 from=$2 to=$3 mb=${4:-50} to_addr
  to_addr=$(addr "$prefix" "$to")
  addr "$prefix" "$from" >/dev/null
  local out
  out=$(mktemp)
  # The receiver times from the first byte to the last; it stops by itself after 60 s.
  timeout 60 ip netns exec "$prefix-$to" python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 20)
    if not b: break
    if t0 is None: t0 = time.monotonic()
    n += len(b)
print("%.1f" % (8 * n / (time.monotonic() - t0) / 1e6), flush=True)
' "$to_addr" > "$out" &
  local receiver=$!
  for _ in $(seq 100); do grep -q ready "$out" && break; sleep 0.05; done
  grep -q ready "$out" || { kill "$receiver" 2>/dev/null; die "probe: the receiver in $to did not listen within 5 s"; }
  timeout 60 ip netns exec "$prefix-$from" python3 -c '
import socket, sys
s = socket.create_connection((sys.argv[1], 5201)); block = b"\0" * (1 << 20)
for _ in range(int(sys.argv[2])): s.sendall(block)
s.close()
' "$to_addr" "$mb"
  wait "$receiver"
  tail -n 1 "$out"
  rm -f "$out"
}

# This kernel has no netfilter and no tc actions: a cut points each host's neighbour entry
# for the other at an address no port has, so the bridge floods the frames and nobody
# takes them. Healing deletes the entries (ARP finds the real ones again).
mac_nobody() { printf '02:00:00:00:%02x:%02x' "$1" "$2"; }
cut() {
  local prefix=$1 a=$2 b=$3 a_addr b_addr
  a_addr=$(addr "$prefix" "$a")
  b_addr=$(addr "$prefix" "$b")
  ip -n "$prefix-$a" neigh replace "$b_addr" lladdr "$(mac_nobody "${a_addr##*.}" "${b_addr##*.}")" nud permanent dev eth0
  ip -n "$prefix-$b" neigh replace "$a_addr" lladdr "$(mac_nobody "${b_addr##*.}" "${a_addr##*.}")" nud permanent dev eth0
}
heal() {
  local prefix=$1 a=$2 b=$3
  ip -n "$prefix-$a" neigh del "$(addr "$prefix" "$b")" dev eth0 2>/dev/null || true
  ip -n "$prefix-$b" neigh del "$(addr "$prefix" "$a")" dev eth0 2>/dev/null || true
}

down() {
  local prefix=$1 ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    case "$ns" in "$prefix"-*) ip netns del "$ns" 2>/dev/null || true ;; esac
  done
  rm -rf "$(state "$prefix")"
}

cmd=${1:-}
[ $# -ge 2 ] || die "usage: up|addr|exec|probe|cut|heal|down PREFIX ... (see the top of $0)"
shift
case "$cmd" in
  up) up "$@" ;;
  addr) [ $# -eq 2 ] || die "usage: addr PREFIX HOST"; addr "$@" ;;
  exec) [ $# -ge 3 ] || die "usage: exec PREFIX HOST CMD..."; run_in "$@" ;;
  probe) [ $# -ge 3 ] || die "usage: probe PREFIX FROM TO [MB]"; probe "$@" ;;
  cut) [ $# -eq 3 ] || die "usage: cut PREFIX A B"; cut "$@" ;;
  heal) [ $# -eq 3 ] || die "usage: heal PREFIX A B"; heal "$@" ;;
  down) down "$1" ;;
  *) die "unknown command '$cmd' (up, addr, exec, probe, cut, heal, down)" ;;
esac
