#!/usr/bin/env bash
# bench/emulator_links.sh — what the user-space emulator costs on the links it alone
# carries: a trace-driven link at its trace's peak rate, and a shared Wi-Fi medium with
# 2, 8 and 32 busy stations, beside a fixed link of the same rate (tbf's rate, the
# emulator's delay). Root (it builds namespaces).
#
# Cases, each `flowlab net check -J` of a topology built for it, on the user-space
# backend, the cases taken in turn round after round (BENCH_REPEAT rounds):
#   fix30     one link: 30 Mbit/s (tbf), 5 ms each way, a queue of 100 packets
#   trc30     one link: a steady trace of 30 Mbit/s (2.5 opportunities a ms), 5 ms each
#             way, a queue of 100 packets
#   airN      an 802.11g medium (54 Mbit/s stations: about 30 Mbit/s of air for all of
#             them together) with N stations and a server wired to its access point,
#             every station's TCP to the server at once (`--together`), N = 2, 8, 32
# Printed per case: the emulator process's CPU over the load's seconds (user + system,
# % of one core; the check's idle echoes before the load are counted in, so this errs
# high), the TCP throughput (all pairs together, under the system's default congestion
# control), and the emulator's own lateness under
# the load (the 99th percentile of its frames' lateness summed over a round trip's
# crossings, the median over pairs): min / median / max over the rounds, flagged when the
# runs spread by more than 25 %.
#
# Env: BENCH_SECONDS (default 10), BENCH_REPEAT (default 7), FLOWLAB (default
#      target/release/flowlab, built when missing), BENCH_BASE (an earlier build: each
#      case runs with it too, alternating with FLOWLAB's, as `base-CASE`, and each
#      case's median CPU is given as a ratio to its base's), BENCH_CASES (the cases to
#      run, default "fix30 trc30 air2 air8 air32").
set -euo pipefail
shopt -s inherit_errexit

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
FLOWLAB="${FLOWLAB:-$ROOT/target/release/flowlab}"
T="${BENCH_SECONDS:-10}"
REPEAT="${BENCH_REPEAT:-7}"

die() { echo "emulator_links.sh: error: $*" >&2; exit 2; }
command -v python3 >/dev/null || die "python3 not found (needed to read the JSON results)"
[[ $EUID -eq 0 ]] || die "needs root (network namespaces)"
[[ "$T" =~ ^[0-9]+$ && "$T" -ge 2 ]] || die "BENCH_SECONDS must be an integer of at least 2"
[[ "$REPEAT" =~ ^[0-9]+$ && "$REPEAT" -ge 1 ]] || die "BENCH_REPEAT must be a positive integer"
BASE="${BENCH_BASE:-}"
[[ -z "$BASE" || -x "$BASE" ]] || die "BENCH_BASE: $BASE is not an executable"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

DIR="$(mktemp -d)"
read -ra CASES <<< "${BENCH_CASES:-fix30 trc30 air2 air8 air32}"
for c in "${CASES[@]}"; do
    [[ " fix30 trc30 air2 air8 air32 " == *" $c "* ]] || die "BENCH_CASES: no case '$c'"
done
trap 'for n in "${CASES[@]}"; do "$FLOWLAB" net down "$n" >/dev/null 2>&1 || true; done; rm -rf "$DIR"' EXIT

two() { # name, link properties
    printf 'name = "%s"\nhosts = ["a", "b"]\n[[link]]\nends = ["a", "b"]\n%b\n' "$1" "$2" > "$DIR/$1.toml"
}
two fix30 'rate = "30M"\ndelay = "5ms"\nqueue = 100'
# 2 opportunities in odd milliseconds, 3 in even ones: 2.5 a ms, 30 Mbit/s.
python3 -c "
for ms in range(1, 1001):
    print(*([ms] * (2 if ms % 2 else 3)), sep='\n')" > "$DIR/steady30.trace"
two trc30 'trace = "steady30.trace"\ndelay = "5ms"\nqueue = 100'
air() { # stations
    local n=$1 f="$DIR/air$1.toml" hosts
    hosts=$(seq -f '"s%g"' 1 "$n" | paste -sd, -)
    printf 'name = "air%s"\nhosts = [%s, "srv"]\nrouters = ["ap"]\n[[link]]\nends = ["srv", "ap"]\n' "$n" "$hosts" > "$f"
    printf '[[medium]]\nname = "wlan"\nap = "ap"\nstandard = "802.11g"\nqueue = 100\n' >> "$f"
    for i in $(seq 1 "$n"); do printf '[[medium.station]]\nhost = "s%s"\nrate = "54M"\n' "$i" >> "$f"; done
}
pairs() { seq -f 's%g-srv' 1 "$1" | paste -sd, -; }
for n in 2 8 32; do air "$n"; done

echo "# command:  $0  (BENCH_SECONDS=$T BENCH_REPEAT=$REPEAT${BASE:+ BENCH_BASE=$BASE}${BENCH_CASES:+ BENCH_CASES=\"$BENCH_CASES\"})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
CPU_MODEL="$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)  cpu=${CPU_MODEL:-?}"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the system's default, which every TCP test here runs)"
echo "# flowlab:  $("$FLOWLAB" --version) (the checkout: $(checkout_id "$ROOT"))"
[[ -z "$BASE" ]] || echo "# base:     $("$BASE" --version)"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
echo

hz=$(getconf CLK_TCK)
# One round of checks, under the system's default (a check without -C runs cubic and bbr).
CC=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
one() { # case [label]: prints "label cpu% bps late_p99_ms" (label: the case)
    local name=$1 label=${2:-$1} pid before after doc extra=()
    case $name in air*) extra=(--pairs "$(pairs "${name#air}")" --together) ;; esac
    "$FLOWLAB" net up --backend userspace "$DIR/$name.toml" >/dev/null
    pid=$("$FLOWLAB" net status "$name" | sed -n "s/^$name: .*emulator pid \([0-9]*\).*/\1/p")
    [[ -n "$pid" ]] || die "no emulator found for $name"
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    doc=$("$FLOWLAB" net check "$name" -t "$T" -C "$CC" -J "${extra[@]}")
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    "$FLOWLAB" net down "$name" >/dev/null
    python3 -c "
import json, statistics, sys
d = json.loads(sys.argv[1])
# The load runs its second left out and load_seconds more.
cpu = 100 * ($after - $before) / $hz / (d['load_seconds'] + 1)
bps = sum(p['measured_bps'] for p in d['paths'])
late = [p['emulator_late_p99_ms'] for p in d['paths'] if p.get('emulator_late_p99_ms') is not None]
print('$label', f'{cpu:.1f}', f'{bps:.0f}', f'{statistics.median(late):.3f}' if late else 'nan')" "$doc"
}
for round in $(seq "$REPEAT"); do
    for c in "${CASES[@]}"; do
        [[ -z "$BASE" ]] || FLOWLAB=$BASE one "$c" "base-$c"
        one "$c"
    done
    echo "round $round done" >&2
done > "$DIR/results"

python3 - "$DIR/results" <<'PY'
import math, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, cpu, bps, late = line.split()
    runs.setdefault(name, []).append((float(cpu), float(bps), float(late)))
def three(v, fmt):
    v = [x for x in v if not math.isnan(x)]
    if not v:
        return "-"
    m = statistics.median(v)
    spread = (max(v) - min(v)) / m * 100 if m else 0
    flag = f" SPREAD {spread:.0f} %" if spread > 25 else ""
    return f"{fmt(min(v))} / {fmt(m)} / {fmt(max(v))}{flag}"
print(f"{'case':<8}  {'emulator CPU, % of a core':<32}  {'TCP, Mbit/s':<26}  emulator late p99, µs (min / median / max)")
for name, rs in runs.items():
    print(f"{name:<8}  {three([r[0] for r in rs], lambda x: f'{x:.1f}'):<32}  "
          f"{three([r[1] / 1e6 for r in rs], lambda x: f'{x:.1f}'):<26}  "
          f"{three([r[2] * 1000 for r in rs], lambda x: f'{x:.0f}')}")
for name, rs in runs.items():
    base = runs.get("base-" + name)
    if base:
        ratio = statistics.median(r[0] for r in rs) / statistics.median(r[0] for r in base)
        print(f"{name}: median CPU this / base {ratio:.2f}")
PY
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
