#!/usr/bin/env bash
# bench/trace_cost.sh — what `--trace` costs: the same flowlab test with and without it,
# side by side in one run, on loopback against one `flowlab serve`.
#
# Cases (flowlab test flags): tcp-1 [-t T], tcp-R [-t T -R], tcp-P4 [-t T -P 4], each run
# plain and with --trace (default period 10 ms, or BENCH_TRACE). Runs alternate plain /
# traced so drift on the machine hits both alike. Throughput is what the receiver counted
# (end.sums[].receiver.bits_per_second of the client's -J document); the table shows the
# median of BENCH_REPEAT runs and the ratio traced/plain (1.00 = no cost).
#
# Env: BENCH_SECONDS (default 5), BENCH_REPEAT (default 3), BENCH_TRACE (default 10ms),
#      BENCH_PORT (default 5403).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
T="${BENCH_SECONDS:-5}"
REPEAT="${BENCH_REPEAT:-3}"
PERIOD="${BENCH_TRACE:-10ms}"
PORT="${BENCH_PORT:-5403}"

die() { echo "trace_cost.sh: error: $*" >&2; exit 2; }
command -v python3 >/dev/null || die "python3 not found (needed to read the JSON results)"
[[ "$T" =~ ^[0-9]+$ && "$T" -ge 1 ]] || die "BENCH_SECONDS must be a positive integer"
[[ "$REPEAT" =~ ^[0-9]+$ && "$REPEAT" -ge 1 ]] || die "BENCH_REPEAT must be a positive integer"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

"$FLOWLAB" serve -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true' EXIT
sleep 0.5
kill -0 "$SERVER" 2>/dev/null || die "flowlab serve did not start on port $PORT"

echo "# command:  $0  (BENCH_SECONDS=$T BENCH_REPEAT=$REPEAT BENCH_TRACE=$PERIOD)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the system's default, which every TCP test here runs)"
echo "# flowlab:  $("$FLOWLAB" --version)"
echo

gbps() { python3 -c 'import json,sys; d=json.load(sys.stdin); print("%.3f" % (sum(s["receiver"]["bits_per_second"] for s in d["end"]["sums"])/1e9))'; }

declare -A RESULTS
for c in "tcp-1:" "tcp-R:-R" "tcp-P4:-P 4"; do
    name="${c%%:*}"; flags="${c#*:}"
    for ((i = 1; i <= REPEAT; i++)); do
        # shellcheck disable=SC2086
        plain=$("$FLOWLAB" test 127.0.0.1 -p "$PORT" -t "$T" -J $flags | gbps)
        # shellcheck disable=SC2086
        traced=$("$FLOWLAB" test 127.0.0.1 -p "$PORT" -t "$T" -J $flags --trace="$PERIOD" | gbps)
        printf '  %-7s run %d  plain %8s Gbit/s  traced %8s Gbit/s\n' "$name" "$i" "$plain" "$traced"
        RESULTS[$name]+="$plain $traced;"
    done
done

echo
echo "| case | plain Gbit/s (median) | --trace=$PERIOD Gbit/s (median) | traced/plain |"
echo "|---|---|---|---|"
for name in tcp-1 tcp-R tcp-P4; do
    python3 - "$name" "${RESULTS[$name]}" <<'PY'
import statistics, sys
name, runs = sys.argv[1], [r.split() for r in sys.argv[2].split(";") if r.strip()]
p = statistics.median(float(r[0]) for r in runs)
t = statistics.median(float(r[1]) for r in runs)
print(f"| {name} | {p:.2f} | {t:.2f} | {t / p:.3f} |")
PY
done
