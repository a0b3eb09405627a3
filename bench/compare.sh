#!/usr/bin/env bash
# bench/compare.sh — flowlab against iperf3 on loopback: the receiver matrix of issue 14.
#
# For each congestion control (cubic, bbr), stream count (-P 1, 2, 4, 8) and server mode
# (a fresh one-off server per run, or one long-running server per tool), three pairs:
#   both      flowlab test → flowlab serve   vs  iperf3 -c → iperf3 -s
#   receiver  iperf3 -c → flowlab serve      vs  iperf3 -c → iperf3 -s   (same client)
#   reverse   flowlab test -R → iperf3 -s    vs  iperf3 -c -R → iperf3 -s (same sender)
# then the P=1 pairs pinned (-A 0,1: client on CPU 0, server on CPU 1, both tools), and
# UDP at -b 0, -P 1…4, unpinned and pinned (loss).
#
# Each case runs its two sides alternately (A B, B A, …), at least 7 runs each, and
# prints min / median / max of the receiver's Gbit/s per side, the ratios of the medians
# and of the minimums (flowlab ÷ iperf3), the senders' median retransmissions, and a
# flag on a side whose runs spread by more than 25 % of its median (bimodal runs are
# flagged, never averaged away), and a verdict from a one-sided Mann-Whitney U test (is a
# side shown slower or faster than the other?). --control runs iperf3's side a second
# time in every case, interleaved: iperf3 against itself, the host's own noise floor.
# bench/compare.py has the details.
#
# Usage:   bench/compare.sh [compare.py options]   e.g. --cc cubic --streams 1 --modes one-off
# Env:     BENCH_SECONDS (-t, default 3), BENCH_RUNS (default 7), BENCH_PORT (default
#          5401; the next port too), IPERF3 (default: iperf3 on PATH), PYTHON (default
#          python3; it needs scipy: apt-get install python3-scipy).
# Takes about (cases × 2 × runs × (T + 0.4 s)): the whole TCP matrix at the defaults, 54
# cases, about 42 minutes; with --control half as long again. Keep the machine otherwise
# idle.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
FLOWLAB="$ROOT/target/release/flowlab"
die() { echo "compare.sh: error: $*" >&2; exit 2; }

IPERF3="${IPERF3:-$(command -v iperf3 || true)}"
[[ -n "$IPERF3" && -x "$IPERF3" ]] || die "iperf3 not found (apt-get install iperf3, or IPERF3=/path)"
PYTHON="${PYTHON:-python3}"
command -v "$PYTHON" >/dev/null || die "$PYTHON not found"
"$PYTHON" -c 'import scipy.stats' 2>/dev/null || die "$PYTHON has no scipy (apt-get install python3-scipy, or PYTHON=/path)"
# Always built (a no-op when up to date), so that the binary is the checkout's.
(cd "$ROOT" && cargo build --release -p flowlab --quiet) || die "cargo build --release failed"

# The arguments as typed: quoted only where the shell needs it (printf %q alone would
# write `one-off\,long`).
ARGS=""
for arg in "$@"; do
    if [[ "$arg" =~ ^[A-Za-z0-9_.,=/:+-]+$ ]]; then ARGS+=" $arg"; else ARGS+=" $(printf '%q' "$arg")"; fi
done
echo "# command:  bench/compare.sh$ARGS  (BENCH_SECONDS=${BENCH_SECONDS:-3} BENCH_RUNS=${BENCH_RUNS:-7})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# iperf3:   $("$IPERF3" --version 2>&1 | head -n1)"
echo "# flowlab:  $("$FLOWLAB" --version 2>&1 | head -n1) ($(checkout_id "$ROOT"))"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
"$PYTHON" "$ROOT/bench/compare.py" --flowlab "$FLOWLAB" --iperf3 "$IPERF3" \
    --seconds "${BENCH_SECONDS:-3}" --runs "${BENCH_RUNS:-7}" --port "${BENCH_PORT:-5401}" "$@"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
