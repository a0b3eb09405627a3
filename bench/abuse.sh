#!/usr/bin/env bash
# bench/abuse.sh — a public `flowlab serve` under abuse beside a real test: idle
# connections, a handshake flood, a UDP flood, a probe flood, and a forged-datagram storm
# into a running UDP stream; then, each against a server of its own (with authentication
# or a fragment set as the case needs), unauthenticated load and echo connections, an
# authentication lockout and log flood, test slots held without streams, idle fragment
# connections, a FIFO among the fragments, and a replayed token. Builds the release
# binary, then runs bench/abuse.py (its docstring has the details and the options).
#
# Usage: bench/abuse.sh [--seconds 3] [--repeat 7] [--rate 1G] [--udp-rate 500M]
#                       [--cases a,b,...] [--json FILE] [--verbose]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p flowlab
echo "machine: $(nproc) cores, kernel $(uname -r), congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
exec python3 bench/abuse.py --flowlab target/release/flowlab "$@"
