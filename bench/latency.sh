#!/usr/bin/env bash
# bench/latency.sh — flowlab ping against its peers on loopback, side by side (issue 16):
# round trips at 1000 probes/s over UDP (flowlab ping, sockperf ping-pong --full-rtt,
# iputils ping) and TCP (flowlab ping --tcp, sockperf --tcp, iperf2 --bounceback), and
# transactions a second back to back (flowlab ping --tcp -i 0, sockperf --mps=max,
# iperf2 --bounceback-period 0). Alternating, BENCH_RUNS runs each (default 7):
# min / median / max, the ratio to flowlab, a flag where a tool's runs spread > 25 %.
# bench/latency.py has the details.
#
# Needs: sockperf, iperf (2), iputils-ping (Debian packages of those names; installed
# here when missing and running as root). Env: BENCH_SECONDS (default 2), BENCH_RUNS
# (default 7), BENCH_PORT (default 5601; the next three ports too). About 3 minutes.
# Keep the machine otherwise idle.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
die() { echo "latency.sh: error: $*" >&2; exit 2; }

missing=()
command -v sockperf >/dev/null || missing+=(sockperf)
command -v iperf >/dev/null || missing+=(iperf)
command -v ping >/dev/null || missing+=(iputils-ping)
if [[ ${#missing[@]} -gt 0 ]]; then
    [[ "$(id -u)" -eq 0 ]] || die "missing ${missing[*]} (apt-get install ${missing[*]})"
    apt-get install -y -qq "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi
if [[ ! -x "$FLOWLAB" ]]; then
    echo "# $FLOWLAB missing: building it (cargo build --release -p flowlab)" >&2
    (cd "$ROOT" && cargo build --release -p flowlab) || die "cargo build --release failed"
fi

echo "# command:  bench/latency.sh $*  (BENCH_SECONDS=${BENCH_SECONDS:-2} BENCH_RUNS=${BENCH_RUNS:-7})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  $(nproc) cores, kernel $(uname -r), congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
echo "# flowlab:  $("$FLOWLAB" --version 2>&1 | head -n1) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "# sockperf: $(sockperf --version 2>&1 | head -n1); iperf: $(iperf --version 2>&1 | head -n1); ping: $(ping -V 2>&1 | head -n1)"
python3 "$ROOT/bench/latency.py" --flowlab "$FLOWLAB" --seconds "${BENCH_SECONDS:-2}" \
    --runs "${BENCH_RUNS:-7}" --port "${BENCH_PORT:-5601}" "$@"
