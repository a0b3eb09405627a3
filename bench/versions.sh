#!/usr/bin/env bash
# bench/versions.sh OLD_FLOWLAB [NEW_FLOWLAB] — two builds of flowlab side by side on
# loopback, before and after a change: the same cases, run alternately (bench/ab.py: at
# least 7 runs each, min / median / max, the ratio new/old, runs spread over 25 %
# flagged). Each build talks to its own server, so the ratio covers both ends.
#
# Build the old one from a commit with
#     git worktree add /tmp/old COMMIT && (cd /tmp/old && cargo build --release -p flowlab)
# and pass /tmp/old/target/release/flowlab. NEW_FLOWLAB defaults to this tree's
# target/release/flowlab.
#
# Cases: tcp-cubic and tcp-bbr (one stream, -C), tcp-R (the server sends, system cc),
# tcp-P4 (four streams), udp-1G (-u -b 1G), fetch (a 256 MiB set from two unpaced
# fragment servers, adaptive; seconds).
#
# Env: BENCH_SECONDS (default 3), BENCH_RUNS (default 7), BENCH_PORT (first of six
#      ports, default 5421).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="${1:-}"
NEW="${2:-$ROOT/target/release/flowlab}"
T="${BENCH_SECONDS:-3}"
RUNS="${BENCH_RUNS:-7}"
PORT="${BENCH_PORT:-5421}"
AB="python3 $ROOT/bench/ab.py"

die() { echo "versions.sh: error: $*" >&2; exit 2; }
[[ -n "$OLD" ]] || die "usage: bench/versions.sh OLD_FLOWLAB [NEW_FLOWLAB]"
[[ -x "$OLD" ]] || die "$OLD is not an executable flowlab"
[[ -x "$NEW" ]] || die "$NEW is not an executable flowlab (cargo build --release)"
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 7 ]] || die "BENCH_RUNS must be 7 or more"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
"$NEW" fragments make --size 256M --count 160 --out "$WORK/frags" >/dev/null
# Ports: new test, old test, new fragments ×2, old fragments ×2.
"$NEW" serve -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 & PIDS+=($!)
"$OLD" serve -B 127.0.0.1 -p $((PORT + 1)) >/dev/null 2>&1 & PIDS+=($!)
for i in 2 3; do "$NEW" serve -B 127.0.0.1 -p $((PORT + i)) --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!); done
for i in 4 5; do "$OLD" serve -B 127.0.0.1 -p $((PORT + i)) --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!); done
sleep 0.5
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a flowlab serve did not start (ports $PORT-$((PORT + 5)))"; done

echo "# command:  $0 $OLD $NEW  (BENCH_SECONDS=$T BENCH_RUNS=$RUNS)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)"
echo "# tcp cc:   system default $(cat /proc/sys/net/ipv4/tcp_congestion_control); tcp-cubic and tcp-bbr set theirs (-C)"
echo "# new:      $("$NEW" --version)   old: $("$OLD" --version)"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
echo

t() { echo "$1 test 127.0.0.1 -p $2 -t $T -i 0 -J ${*:3}"; }
f() { echo "rm -rf $WORK/got && $1 fetch --from 127.0.0.1:$2 --from 127.0.0.1:$(($2 + 1)) --out $WORK/got -J"; }
rows=()
for c in "tcp-cubic:-C cubic" "tcp-bbr:-C bbr" "tcp-R:-R" "tcp-P4:-P 4" "udp-1G:-u -b 1G"; do
    name="${c%%:*}"; flags="${c#*:}"
    # shellcheck disable=SC2086
    rows+=("$($AB "$name" gbps "$(t "$NEW" "$PORT" $flags)" "$(t "$OLD" $((PORT + 1)) $flags)" \
        --runs "$RUNS" --label-a new --label-b old | tee /dev/stderr | tail -1)")
done
rows+=("$($AB fetch fetch-s "$(f "$NEW" $((PORT + 2)))" "$(f "$OLD" $((PORT + 4)))" \
    --runs "$RUNS" --label-a new --label-b old | tee /dev/stderr | tail -1)")

echo
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
echo "| case | figure | new: min / median / max | old: min / median / max | new/old (medians) | new/old (median of pairs) | spread |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
