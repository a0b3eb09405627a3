#!/usr/bin/env bash
# bench/mptcp_loopback.sh — one MPTCP stream on loopback, alternately (bench/ab.py), RUNS
# times each, 5 s each, under cubic and bbr:
#   1. flowlab (`flowlab test -m` against `flowlab serve`) against stock iperf3 made MPTCP
#      at both ends by `mptcpize run` (Debian's mptcpd; iperf3 3.12 has no -m), up and
#      down (-R): goodput;
#   2. flowlab's MPTCP against flowlab's plain TCP, up: what MPTCP itself costs here.
#
# Usage: bench/mptcp_loopback.sh [RUNS]        (default 7)
#        FLOWLAB=target/debug/flowlab bench/mptcp_loopback.sh    with that binary, not built
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-7}"
source bench/lib.sh
for tool in iperf3 mptcpize; do
  if ! command -v "$tool" >/dev/null; then
    echo "mptcp_loopback.sh: $tool is missing (apt-get install iperf3 mptcpd)" >&2
    exit 1
  fi
done
if [ -n "${FLOWLAB:-}" ]; then
  flowlab="$(realpath "$FLOWLAB")"
else
  cargo build --release --quiet -p flowlab
  flowlab="$PWD/target/release/flowlab"
fi
ours=25301 theirs=25302
pids=()
cleanup() { [ "${#pids[@]}" -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap cleanup EXIT
"$flowlab" serve -p "$ours" >/dev/null 2>&1 &
pids+=($!)
mptcpize run iperf3 -s -p "$theirs" >/dev/null 2>&1 &
pids+=($!)
for port in "$ours" "$theirs"; do
  until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
done

echo "machine: $(nproc) cores, kernel $(uname -r), kernel's default congestion control $(sysctl -n net.ipv4.tcp_congestion_control); MPTCP path manager $(cat /proc/sys/net/mptcp/path_manager 2>/dev/null || echo '?'), scheduler $(cat /proc/sys/net/mptcp/scheduler 2>/dev/null || echo '?'); $(iperf3 --version | head -1); flowlab $(checkout_id "$PWD")"
echo "| case | metric | A: min / median / max | B: min / median / max | ratio of medians | median paired ratio | spread |"
for cc in cubic bbr; do
  for way in up down; do
    r=""
    [ "$way" = down ] && r="-R"
    python3 bench/ab.py "one MPTCP stream $way, flowlab against iperf3 ($cc)" gbps \
      "$flowlab test 127.0.0.1 -p $ours -m -t 5 -i 0 -C $cc $r -J" \
      "mptcpize run iperf3 -c 127.0.0.1 -p $theirs -t 5 -i 0 -C $cc $r -J" \
      --runs "$runs" --label-a flowlab --label-b iperf3
  done
  python3 bench/ab.py "flowlab's MPTCP against its plain TCP, up ($cc)" gbps \
    "$flowlab test 127.0.0.1 -p $ours -m -t 5 -i 0 -C $cc -J" \
    "$flowlab test 127.0.0.1 -p $ours -t 5 -i 0 -C $cc -J" \
    --runs "$runs" --label-a MPTCP --label-b TCP
done
