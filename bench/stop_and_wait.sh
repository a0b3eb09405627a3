#!/usr/bin/env bash
# bench/stop_and_wait.sh — seed 003's study on loopback, and the watch on flowlab's
# stop-and-wait path (iperf3 has no stop-and-wait, so there is no peer to compare with).
#
# For each protocol (TCP, UDP), mechanism (stream, stop-and-wait) and message size
# (1000, 10000, 32500, 65000 bytes) it sends BENCH_BYTES (default 100M) with
# `flowlab test -n` against a `flowlab serve` on 127.0.0.1 and prints the transfer time,
# the receiver's goodput, messages per second and, for UDP, integrity (bytes delivered as
# a share of bytes sent) and stop-and-wait retransmissions.
#
# A stop-and-wait row far below its neighbours (e.g. TCP 1000 B at a few dozen messages
# per second) means a timer — delayed ACK, Nagle — is being measured instead of the path.
#
# Usage: bench/stop_and_wait.sh   Env: BENCH_BYTES (default 100M), BENCH_PORT (default 5403)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
BYTES="${BENCH_BYTES:-100M}"
PORT="${BENCH_PORT:-5403}"
[ -x "$FLOWLAB" ] || (cd "$ROOT" && cargo build --release)

"$FLOWLAB" serve -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  "$FLOWLAB" test 127.0.0.1 -p "$PORT" -n 1K -i 0 >/dev/null 2>&1 && break
  sleep 0.1
done

echo "# command: bench/stop_and_wait.sh  (BENCH_BYTES=$BYTES)"
echo "# machine: nproc=$(nproc) kernel=$(uname -r) $("$FLOWLAB" --version)"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the system's default, which every TCP test here runs)"
printf '%-4s %-14s %7s %10s %12s %12s %10s %8s\n' proto mechanism size seconds Mbit/s msgs/s integrity resent
for proto in tcp udp; do
  for mech in stream stop-and-wait; do
    for size in 1000 10000 32500 65000; do
      args=(-n "$BYTES" -l "$size" -i 0 -J)
      [ "$proto" = udp ] && args+=(-u)
      [ "$mech" = stop-and-wait ] && args+=(--stop-and-wait)
      "$FLOWLAB" test 127.0.0.1 -p "$PORT" "${args[@]}" | python3 -c '
import json, sys
proto, mech, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = json.load(sys.stdin)["end"]["sums"][0]
snd, rcv = s["sender"], s["receiver"]
secs = max(snd["seconds"], rcv["seconds"])
udp = rcv.get("udp") or {}
integrity = udp.get("integrity_percent")
print("%-4s %-14s %7d %10.3f %12.1f %12.0f %10s %8s" % (
    proto, mech, size, secs, rcv["bits_per_second"] / 1e6,
    (snd.get("packets") or 0) / secs if secs else 0,
    "-" if integrity is None else "%.2f%%" % integrity,
    snd.get("sw_retransmits") or 0))
' "$proto" "$mech" "$size"
    done
  done
done
