#!/usr/bin/env bash
# bench/copy_alignment.sh — does the kernel's copy into a misaligned user buffer cost
# throughput on this machine? Builds bench/copy_alignment.c (cc, -O2, pthreads) and
# runs it with the receiver's buffer at several offsets from a page boundary (0: page
# aligned, as iperf3's mmap'd buffer and flowlab's since issue 14; 16: where glibc puts a
# 128 KiB malloc, as flowlab's Vec did), the cases alternating run by run, BENCH_RUNS
# each (default 7); then the same for the sender's block. Prints min / median / max
# Gbit/s per case and flags a case whose runs spread by more than 25 % of its median.
#
# Env: BENCH_SECONDS (default 2), BENCH_RUNS (default 7), BENCH_CC (default cubic),
#      BENCH_OFFSETS (receiver offsets, default "0 8 16 32 48 64").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
T="${BENCH_SECONDS:-2}"
RUNS="${BENCH_RUNS:-7}"
CC_ALGO="${BENCH_CC:-cubic}"
OFFSETS="${BENCH_OFFSETS:-0 8 16 32 48 64}"
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 7 ]] || { echo "copy_alignment.sh: BENCH_RUNS must be 7 or more" >&2; exit 2; }
BIN="$(mktemp -d)/copy_alignment"
trap 'rm -rf "$(dirname "$BIN")"' EXIT
cc -O2 -pthread -o "$BIN" "$ROOT/bench/copy_alignment.c"

echo "# command:  bench/copy_alignment.sh  (BENCH_SECONDS=$T BENCH_RUNS=$RUNS BENCH_CC=$CC_ALGO)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
echo "# tcp cc:   $CC_ALGO (set on the sending socket); system default $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
cases=()
for o in $OFFSETS; do cases+=("recv+$o:$o 0"); done
for o in 16; do cases+=("send+$o:0 $o"); done
declare -A results
for ((r = 0; r < RUNS; r++)); do
    for c in "${cases[@]}"; do
        name="${c%%:*}"; args="${c#*:}"
        # shellcheck disable=SC2086
        g=$("$BIN" $args "$T" "$CC_ALGO")
        results[$name]+="$g "
        printf '  %-10s run %d  %8.2f Gbit/s\n' "$name" "$((r + 1))" "$g"
    done
done
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
echo
echo "| case (buffer offset from a page) | min / median / max Gbit/s | ÷ aligned (medians) | spread |"
echo "|---|---|---:|---|"
base=""
for c in "${cases[@]}"; do
    name="${c%%:*}"
    python3 - "$name" "${results[$name]}" "${base:-}" <<'PY'
import statistics, sys
name, xs, base = sys.argv[1], [float(x) for x in sys.argv[2].split()], sys.argv[3]
m = statistics.median(xs)
spread = (max(xs) - min(xs)) / m
ratio = m / float(base) if base else 1.0
flag = f"spread {100 * spread:.0f} %" if spread > 0.25 else "ok"
print(f"| {name} | {min(xs):.2f} / {m:.2f} / {max(xs):.2f} | {ratio:.2f} | {flag} |")
PY
    [[ -n "$base" ]] || base=$(python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1].split()))" "${results[$name]}")
done
