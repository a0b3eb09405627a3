#!/usr/bin/env bash
# bench/feature_cost.sh — what flowlab's options cost, and whether they do what they say,
# on loopback: each case runs the option and its baseline alternately (bench/ab.py: at
# least 7 runs each, min / median / max, the ratio, runs spread over 25 % flagged).
#
#   trace-1ms-CC     flowlab test --trace=1ms  vs  the same test untraced (Gbit/s), under
#                    cubic and under bbr (-C)
#   zc-trace-CC      flowlab test -Z --trace   vs  flowlab test -Z (Gbit/s), cubic and bbr
#   sysinfo          flowlab sysinfo -J (what every test reads before its data flows)  vs
#                    flowlab --version: process start alone (ms)
#   rate-serving     fetch from one `serve --fragments --rate RATE` (Mbit/s)  vs  RATE:
#                    the ratio is what the server delivered over what it was asked
#   ratio-mode       fetch --ratio 1:3  vs  adaptive, from servers at 100M and 300M
#                    (seconds; 1:3 is their rates' ratio, so both should take the same)
#
# Env: BENCH_SECONDS (test length, default 3), BENCH_RUNS (default 7), BENCH_RATE_MBIT
#      (RATE in Mbit/s, default 200), BENCH_PORT (first of four ports, default 5411).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
T="${BENCH_SECONDS:-3}"
RUNS="${BENCH_RUNS:-7}"
RATE_MBIT="${BENCH_RATE_MBIT:-200}"
PORT="${BENCH_PORT:-5411}"
AB="python3 $ROOT/bench/ab.py"

die() { echo "feature_cost.sh: error: $*" >&2; exit 2; }
command -v python3 >/dev/null || die "python3 not found"
[[ "$T" =~ ^[0-9]+$ && "$T" -ge 1 ]] || die "BENCH_SECONDS must be a positive integer"
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 7 ]] || die "BENCH_RUNS must be 7 or more"
[[ "$RATE_MBIT" =~ ^[0-9]+$ && "$RATE_MBIT" -ge 1 ]] || die "BENCH_RATE_MBIT must be a positive integer"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

"$FLOWLAB" fragments make --size 64M --count 64 --out "$WORK/frags" >/dev/null
"$FLOWLAB" serve -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 & PIDS+=($!)
"$FLOWLAB" serve -B 127.0.0.1 -p $((PORT + 1)) --fragments "$WORK/frags" --rate "${RATE_MBIT}M" >/dev/null 2>&1 & PIDS+=($!)
"$FLOWLAB" serve -B 127.0.0.1 -p $((PORT + 2)) --fragments "$WORK/frags" --rate 100M >/dev/null 2>&1 & PIDS+=($!)
"$FLOWLAB" serve -B 127.0.0.1 -p $((PORT + 3)) --fragments "$WORK/frags" --rate 300M >/dev/null 2>&1 & PIDS+=($!)
sleep 0.5
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a flowlab serve did not start (ports $PORT-$((PORT + 3)))"; done

echo "# command:  $0  (BENCH_SECONDS=$T BENCH_RUNS=$RUNS BENCH_RATE_MBIT=$RATE_MBIT)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)"
echo "# tcp cc:   system default $(cat /proc/sys/net/ipv4/tcp_congestion_control); the test cases name theirs (-C)"
echo "# flowlab:  $("$FLOWLAB" --version)"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
echo

test_cmd() { echo "$FLOWLAB test 127.0.0.1 -p $PORT -t $T -i 0 -J $*"; }
fetch_cmd() { echo "rm -rf $WORK/got && $FLOWLAB fetch --out $WORK/got -J $*"; }
rows=()
for cc in cubic bbr; do
    rows+=("$($AB "trace-1ms-$cc" gbps "$(test_cmd -C $cc --trace=1ms)" "$(test_cmd -C $cc)" \
        --runs "$RUNS" --label-a traced --label-b plain | tee /dev/stderr | tail -1)")
    rows+=("$($AB "zc-trace-$cc" gbps "$(test_cmd -C $cc -Z --trace)" "$(test_cmd -C $cc -Z)" \
        --runs "$RUNS" --label-a traced --label-b plain | tee /dev/stderr | tail -1)")
done
rows+=("$($AB sysinfo wall-ms "$FLOWLAB sysinfo -J" "$FLOWLAB --version" \
    --runs "$RUNS" --label-a sysinfo --label-b start | tee /dev/stderr | tail -1)")
rows+=("$($AB rate-serving fetch-mbps "$(fetch_cmd --from 127.0.0.1:$((PORT + 1)))" \
    "printf '{\"bits_per_second\": ${RATE_MBIT}000000}'" \
    --runs "$RUNS" --label-a served --label-b asked | tee /dev/stderr | tail -1)")
rows+=("$($AB ratio-mode fetch-s "$(fetch_cmd --from 127.0.0.1:$((PORT + 2)) --from 127.0.0.1:$((PORT + 3)) --ratio 1:3)" \
    "$(fetch_cmd --from 127.0.0.1:$((PORT + 2)) --from 127.0.0.1:$((PORT + 3)))" \
    --runs "$RUNS" --label-a 1:3 --label-b adaptive | tee /dev/stderr | tail -1)")

echo
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
echo "| case | figure | A: min / median / max | B: min / median / max | A/B (medians) | A/B (median of pairs) | spread |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
