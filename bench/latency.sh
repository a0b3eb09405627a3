#!/usr/bin/env bash
# bench/latency.sh — flowlab ping against its peers on loopback, side by side (issue 16):
# round trips at 1000 probes/s over UDP (flowlab ping, sockperf ping-pong --full-rtt,
# iputils ping) and TCP (flowlab ping --tcp, sockperf --tcp, iperf2 --bounceback), and
# transactions a second back to back (flowlab ping --tcp -i 0, sockperf --mps=max,
# iperf2 --bounceback-period 0), and the server's CPU per probe with 100 clients at 1000
# probes/s each (flowlab serve against sockperf's server). Alternating, BENCH_RUNS runs
# each (default 7): min / median / max, the ratio to flowlab, a flag where a tool's runs
# spread > 25 %. bench/latency.py has the details.
#
#   bench/latency.sh [--cases C,...]       on loopback
#   bench/latency.sh --emulated [...]      the round trips through an emulated link of
#                                          10 ms RTT (flowlab net; root)
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
if [[ "${1:-}" != "--emulated" ]]; then
    echo "# path:     loopback"
    python3 "$ROOT/bench/latency.py" --flowlab "$FLOWLAB" --seconds "${BENCH_SECONDS:-2}" \
        --runs "${BENCH_RUNS:-7}" --port "${BENCH_PORT:-5601}" "$@"
    exit
fi

# --emulated: the same round trips through an emulated link (two hosts, 5 ms each way on
# flowlab net's user-space emulator: RTT 10 ms), servers in h2, clients in h1. Root.
shift
[[ "$(id -u)" -eq 0 ]] || die "--emulated needs root (flowlab net up)"
dir="$(mktemp -d)"
cat > "$dir/blat.toml" <<'TOML'
# bench/latency.sh --emulated: two hosts, one link of 5 ms each way.
name = "blat"
hosts = ["h1", "h2"]
[[link]]
ends = ["h1", "h2"]
delay = "5ms"
TOML
cleanup() { "$FLOWLAB" net down "$dir/blat.toml" >/dev/null 2>&1 || true; rm -rf "$dir"; }
trap cleanup EXIT
"$FLOWLAB" net up "$dir/blat.toml" >/dev/null || die "flowlab net up failed"
echo "# path:     emulated: h1 -> h2, one link, 5 ms each way (flowlab net, user-space backend), RTT 10 ms"
python3 "$ROOT/bench/latency.py" --flowlab "$FLOWLAB" --seconds "${BENCH_SECONDS:-2}" \
    --runs "${BENCH_RUNS:-7}" --port "${BENCH_PORT:-5601}" --cases udp-rtt,tcp-rtt \
    --host 10.0.1.2 --client-prefix "$FLOWLAB net exec -t blat h1 --" \
    --server-prefix "$FLOWLAB net exec -t blat h2 --" "$@"
