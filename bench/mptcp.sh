#!/usr/bin/env bash
# bench/mptcp.sh — flowlab's MPTCP (`flowlab test -m`) over two paths against the paths
# one at a time, alternately (bench/ab.py), RUNS times each, under cubic and bbr: a client
# and a server namespace joined by two veth pairs shaped by tbf (path 1 300 Mbit/s, path 2
# 200 Mbit/s, each way), the server announcing its second address so each MPTCP
# connection opens a subflow on each path. MPTCP's goodput against plain TCP's on path 1
# and on path 2 (5 s each): the sum of those two medians is what both paths carry.
#
# Usage: sudo bench/mptcp.sh [RUNS]        (default 7)
#        FLOWLAB=target/debug/flowlab bench/mptcp.sh    with that binary, not built
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-7}"
source bench/lib.sh
if [ "$(id -u)" -ne 0 ]; then
  echo "mptcp.sh: the two paths are namespaces: run as root" >&2
  exit 1
fi
if [ -n "${FLOWLAB:-}" ]; then
  flowlab="$(realpath "$FLOWLAB")"
else
  cargo build --release --quiet -p flowlab
  flowlab="$PWD/target/release/flowlab"
fi
c=bmptcp-c s=bmptcp-s
cleanup() {
  ip netns pids "$s" 2>/dev/null | xargs -r kill 2>/dev/null || true
  ip netns del "$c" 2>/dev/null || true
  ip netns del "$s" 2>/dev/null || true
}
trap cleanup EXIT
cleanup
ip netns add "$c"
ip netns add "$s"
rates=(300mbit 200mbit)
for i in 0 1; do
  net="10.72.$((i + 1))"
  ip link add "c$i" netns "$c" type veth peer name "s$i" netns "$s"
  ip -n "$c" addr add "$net.1/24" dev "c$i"
  ip -n "$s" addr add "$net.2/24" dev "s$i"
  for end in "$c c$i" "$s s$i"; do
    read -r ns dev <<<"$end"
    ip -n "$ns" link set "$dev" up
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "${rates[$i]}" burst 256kb latency 20ms
  done
done
for ns in "$c" "$s"; do
  ip -n "$ns" link set lo up
  ip -n "$ns" mptcp limits set subflows 2 add_addr_accepted 2
done
ip -n "$s" mptcp endpoint add 10.72.2.2 dev s1 signal
ip netns exec "$s" "$flowlab" serve -p 5201 >/dev/null 2>&1 &
until ip netns exec "$c" bash -c '(exec 3<>/dev/tcp/10.72.1.2/5201)' 2>/dev/null; do sleep 0.1; done

echo "machine: $(nproc) cores, kernel $(uname -r), kernel's default congestion control $(sysctl -n net.ipv4.tcp_congestion_control); MPTCP path manager $(ip netns exec "$c" cat /proc/sys/net/mptcp/path_manager 2>/dev/null || echo '?'), scheduler $(ip netns exec "$c" cat /proc/sys/net/mptcp/scheduler 2>/dev/null || echo '?'); flowlab $(checkout_id "$PWD")"
echo "paths: 1: ${rates[0]} (10.72.1.0/24), 2: ${rates[1]} (10.72.2.0/24), tbf each way, no added delay"
echo "| case | metric | MPTCP: min / median / max | TCP: min / median / max | ratio of medians | median paired ratio | spread |"
in_c="ip netns exec $c"
for cc in cubic bbr; do
  for path in 1 2; do
    python3 bench/ab.py "MPTCP over both paths against TCP on path $path ($cc)" gbps \
      "$in_c $flowlab test 10.72.1.2 -m -t 5 -i 0 -C $cc -J" \
      "$in_c $flowlab test 10.72.$path.2 -t 5 -i 0 -C $cc -J" \
      --runs "$runs" --label-a MPTCP --label-b "TCP, path $path"
  done
done
