#!/usr/bin/env bash
# bench/fetch_many.sh OLD_FLOWLAB [NEW_FLOWLAB] — many small fragments: a set of 100 000
# fragments of 4 KiB (400 MB) fetched from two fragment servers on loopback, by two builds
# of flowlab side by side (each build with its own two servers), alternately (bench/ab.py:
# at least 7 runs each, min / median / max of the fetch's seconds, the ratio new/old,
# runs spread over 25 % flagged). With fragments this small the scheduler's cost per
# fragment, not the bytes, decides the time: a scheduler that scans every fragment on
# every request is O(n²) over a fetch.
#
# Cases: adaptive (the default), ratio 1:2 (--ratio 1:2).
#
# The set and the fetched copies live on /dev/shm (tmpfs) where there is one: on a
# disk file system, creating 100 000 files where 100 000 were just deleted costs far
# more than the fetch (ext4 scans for recently deleted inodes on every create; seen
# here: 5.9 s for the first run, 49 s for each later one, all of it in the kernel).
#
# Env: BENCH_RUNS (default 7), BENCH_COUNT (fragments, default 100000), BENCH_PORT
#      (first of four ports, default 5441), BENCH_DIR (where the files go; default
#      /dev/shm if it exists, else the system's temporary directory).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="${1:-}"
NEW="${2:-$ROOT/target/release/flowlab}"
RUNS="${BENCH_RUNS:-7}"
COUNT="${BENCH_COUNT:-100000}"
PORT="${BENCH_PORT:-5441}"
AB="python3 $ROOT/bench/ab.py"

die() { echo "fetch_many.sh: error: $*" >&2; exit 2; }
[[ -n "$OLD" ]] || die "usage: bench/fetch_many.sh OLD_FLOWLAB [NEW_FLOWLAB]"
[[ -x "$OLD" ]] || die "$OLD is not an executable flowlab"
[[ -x "$NEW" ]] || die "$NEW is not an executable flowlab (cargo build --release)"
[[ "$RUNS" =~ ^[0-9]+$ && "$RUNS" -ge 7 ]] || die "BENCH_RUNS must be 7 or more"
[[ "$COUNT" =~ ^[0-9]+$ && "$COUNT" -ge 2 ]] || die "BENCH_COUNT must be a number of fragments"

BASE="${BENCH_DIR:-}"
[[ -n "$BASE" || ! -d /dev/shm ]] || BASE=/dev/shm
WORK="$(mktemp -d ${BASE:+-p "$BASE"})"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
"$NEW" fragments make --size $((COUNT * 4))K --count "$COUNT" --out "$WORK/frags" >/dev/null
# Ports: new ×2, old ×2.
for i in 0 1; do "$NEW" serve -B 127.0.0.1 -p $((PORT + i)) --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!); done
for i in 2 3; do "$OLD" serve -B 127.0.0.1 -p $((PORT + i)) --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!); done
sleep 0.5
for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || die "a flowlab serve did not start (ports $PORT-$((PORT + 3)))"; done

echo "# command:  $0 $OLD $NEW  (BENCH_RUNS=$RUNS BENCH_COUNT=$COUNT)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)"
echo "# tcp cc:   system default $(cat /proc/sys/net/ipv4/tcp_congestion_control) (loopback)"
echo "# new:      $("$NEW" --version)   old: $("$OLD" --version)"
echo "# set:      $COUNT fragments of 4 KiB, in $(df --output=fstype "$WORK" | tail -n1) ($WORK)"
echo

f() { echo "rm -rf $WORK/got && $1 fetch --from 127.0.0.1:$2 --from 127.0.0.1:$(($2 + 1)) --out $WORK/got -J ${*:3}"; }
$AB adaptive fetch-s "$(f "$NEW" "$PORT")" "$(f "$OLD" $((PORT + 2)))" --runs "$RUNS" --label-a new --label-b old
$AB ratio-1:2 fetch-s "$(f "$NEW" "$PORT" --ratio 1:2)" "$(f "$OLD" $((PORT + 2)) --ratio 1:2)" --runs "$RUNS" --label-a new --label-b old
