#!/usr/bin/env bash
# bench/emulator.sh — what the user-space link emulator costs and how faithful it stays
# at speed: TCP through one emulated link (5 ms each way) beside the same two hosts on a
# plain veth, side by side in one run. Root (it builds namespaces).
#
# Cases, each one `flowlab net check -J` of a two-host topology built for it:
#   direct         plain veth pair (no emulator): the machine's ceiling
#   emu-unlimited  5 ms delay, no rate limit, TCP as fast as it goes
#   emu-1G-load    the same link, TCP paced at 1 Gbit/s: is the delay kept under load?
#   emu-1G-link    5 ms delay and a 1 Gbit/s tbf rate (queue 1000): fidelity at 1 Gbit/s
#   …-awake        the two 1 Gbit/s cases with `--keep-cpus-awake` (the emulator holds
#                  every CPU out of its deep idle states: docs/net.md)
# and, where the kernel has sch_netem, the three emulated cases again on the netem
# backend; then the emulator's own CPU at the seed's 30 Mbit/s (one link, TCP through
# it), without and with --keep-cpus-awake, run by run alternating.
# Printed per case: TCP throughput (median of BENCH_REPEAT runs), its ratio to direct,
# idle RTT (median of 20 ICMP echoes) and the median and highest RTT under load (ICMP
# echoes during the whole TCP test, each 10 ms after the previous reply; "load max" is the
# highest over all runs), and the emulator's own lateness under the load (the 99th
# percentile of its frames' lateness summed over the two crossings of a round trip,
# median over the runs: what the emulator itself added), and the part of it the
# emulator's wake-ups account for ("woke p99": the same sum over the part of each
# frame's lateness that passed while the emulator's thread was in its poll; the rest
# passed while it was up: its own work, or the CPU taken from it), and how late the
# emulator thread came back from its sleeps after the time it asked to be woken
# ("wake-up p99": the 99th percentile of its wake-ups under the load, by its timer or by
# a socket event that ended a sleep at or after its time, as when it got a CPU late,
# median over the runs: what the scheduler gave it under the load, to read against the
# host timer line below, taken with nothing else running). Needs python3.
# Then, where cyclictest (Debian rt-tests) is installed, the host's own floor under that
# lateness: a real-time thread on each CPU (SCHED_FIFO 1, no timer slack) asking to be
# woken every 400 µs, nothing else running, BENCH_SECONDS long, the CPUs' idle states
# left as they are (--laptop: cyclictest otherwise holds them shallow, which the
# emulator does not by default), and how late those wake-ups came (percentiles over all
# CPUs); then the same with the idle states held shallow (no --laptop: cyclictest holds
# /dev/cpu_dma_latency at 0, as the emulator does with --keep-cpus-awake). The
# emulator sleeps until a frame is due less its wake margin (the 90th percentile of its
# own wake-ups' lateness) and spins the rest, so a wake-up later than that margin makes
# its frames late by the overshoot: the host's tail beyond the margin is a floor under
# the emulator's lateness. The CPU time the hypervisor took (steal) over the whole run
# is printed too.
#
# Env: BENCH_SECONDS (default 10), BENCH_REPEAT (default 3), FLOWLAB (the build to
#      measure, default target/release/flowlab), BENCH_BASE (an earlier build: its
#      emulator's CPU at 30 Mbit/s is measured too, alternating run by run with FLOWLAB's,
#      and the ratio of the medians printed).
set -euo pipefail
shopt -s inherit_errexit  # a failing step inside $(…) stops the script too

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
FLOWLAB="${FLOWLAB:-$ROOT/target/release/flowlab}"
T="${BENCH_SECONDS:-10}"
REPEAT="${BENCH_REPEAT:-3}"

die() { echo "emulator.sh: error: $*" >&2; exit 2; }
command -v python3 >/dev/null || die "python3 not found (needed to read the JSON results)"
[[ $EUID -eq 0 ]] || die "needs root (network namespaces)"
[[ "$T" =~ ^[0-9]+$ && "$T" -ge 1 ]] || die "BENCH_SECONDS must be a positive integer"
[[ "$REPEAT" =~ ^[0-9]+$ && "$REPEAT" -ge 1 ]] || die "BENCH_REPEAT must be a positive integer"
BASE="${BENCH_BASE:-}"
[[ -z "$BASE" || -x "$BASE" ]] || die "BENCH_BASE: $BASE is not an executable"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

DIR="$(mktemp -d)"
trap 'for n in bdir bemu b1g b30; do "$FLOWLAB" net down $n >/dev/null 2>&1 || true; done; rm -rf "$DIR"' EXIT
topo() { # name, extra link properties
    printf 'name = "%s"\nhosts = ["a", "b"]\n[[link]]\nends = ["a", "b"]\n%b\n' "$1" "$2" > "$DIR/$1.toml"
}
topo bdir ''
topo bemu 'delay = "5ms"'
topo b1g 'delay = "5ms"\nrate = "1G"\nqueue = 1000'
topo b30 'delay = "5ms"\nrate = "30M"\nqueue = 100'

NETEM=no
if "$FLOWLAB" net up --backend netem "$DIR/bemu.toml" >/dev/null 2>&1; then NETEM=yes; fi
"$FLOWLAB" net down bemu >/dev/null 2>&1 || true

echo "# command:  $0  (BENCH_SECONDS=$T BENCH_REPEAT=$REPEAT${BASE:+ BENCH_BASE=$BASE})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
CPU_MODEL="$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)  cpu=${CPU_MODEL:-?}  netem: $NETEM"
# How idle CPUs sleep, and the CPU latency request in force before the runs: if another
# process holds the CPUs awake already, the cases without --keep-cpus-awake are not
# what they say.
read -r DRIVER HELD < <("$FLOWLAB" sysinfo --json | python3 -c 'import json, sys; s = json.load(sys.stdin); print(s.get("cpuidle_driver", "?"), s.get("cpu_latency_us", "?"))')
echo "# cpuidle:  driver $DRIVER; CPU latency request in force $HELD µs (2000000000: none held)"
[[ "$HELD" == "2000000000" || "$HELD" == "?" ]] || echo "# WARNING:  a process holds a CPU latency request already: the cases without --keep-cpus-awake run with the CPUs held too"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the system's default, which every TCP test here runs)"
echo "# flowlab:  $("$FLOWLAB" --version) (the checkout: $(checkout_id "$ROOT"); FLOWLAB is built only when missing)"
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks before"
echo

run() { # case name, topology, backend, extra check flags
    local name=$1 t=$2 backend=$3; shift 3
    for _ in $(seq "$REPEAT"); do
        "$FLOWLAB" net check "$DIR/$t.toml" --backend "$backend" -t "$T" -J "$@" \
            | python3 -c "import json,sys; d=json.load(sys.stdin); print('$name', json.dumps(d['paths'][0]))"
    done
}

{
    run direct bdir userspace
    run emu-unlimited bemu userspace
    run emu-1G-load bemu userspace -b 1G
    run emu-1G-link b1g userspace
    run emu-1G-load-awake bemu userspace -b 1G --keep-cpus-awake
    run emu-1G-link-awake b1g userspace --keep-cpus-awake
    if [[ $NETEM == yes ]]; then
        run netem-unlimited bemu netem
        run netem-1G-load bemu netem -b 1G
        run netem-1G-link b1g netem
    fi
} > "$DIR/results"

python3 - "$DIR/results" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, doc = line.split(" ", 1)
    runs.setdefault(name, []).append(json.loads(doc))
direct = statistics.median(r["measured_bps"] for r in runs["direct"])
def p99(rs, key="emulator_late_p99_ms"):
    """The emulator's own lateness under the load (or `key`'s part of it), summed over a
    round trip's crossings, 99th percentile (median over the runs, µs); '-' without an
    emulator."""
    v = [r.get(key) for r in rs]
    v = [x for x in v if x is not None]
    return f"{statistics.median(v) * 1000:.0f} µs" if v else "-"
print(f"{'case':<18} {'Gbit/s':>7} {'/direct':>8} {'/rate':>6} {'RTT file':>9} {'idle':>7} {'load med':>9} {'load max':>9} {'emu late p99':>13} {'woke p99':>9} {'wake-up p99':>12}")
for name, rs in runs.items():
    bps = statistics.median(r["measured_bps"] for r in rs)
    rate = rs[0]["implied_bps"]
    def med(k):
        v = [r[k] for r in rs if r[k] is not None]
        return f"{statistics.median(v):.2f}" if v else "?"
    highest = [r["loaded_rtt_ms"] for r in rs if r["loaded_rtt_ms"] is not None]
    print(f"{name:<18} {bps/1e9:7.2f} {bps/direct:8.2f} {(f'{bps/rate:.2f}' if rate else '-'):>6} "
          f"{rs[0]['implied_rtt_ms']:6.1f} ms {med('measured_rtt_ms'):>4} ms "
          f"{med('loaded_rtt_median_ms'):>6} ms {(f'{max(highest):.2f}' if highest else '?'):>6} ms"
          f" {p99(rs):>10} {p99(rs, 'emulator_woke_late_p99_ms'):>9}"
          f" {p99(rs, 'emulator_wakeup_late_p99_ms'):>12}")
PY

# The emulator's own CPU at the seed's rate: one link of 30 Mbit/s with 5 ms each way,
# TCP through it (`net check`, T s of load); the emulator process's user + system time
# over the load's seconds, per run (the check's idle echoes before the load are counted
# in, so this errs high).
hz=$(getconf CLK_TCK)
cpu_run() { # build [up flags]: prints its emulator's CPU, % of one core, over one check's load
    local f=$1 pid before after load
    shift
    "$f" net up --backend userspace "$@" "$DIR/b30.toml" >/dev/null
    pid=$("$f" net status | sed -n 's/^b30: .*emulator pid \([0-9]*\).*/\1/p')
    [[ -n "$pid" ]] || die "no emulator found for b30"
    before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    load=$("$f" net check "$DIR/b30.toml" -t "$T" -J | python3 -c "import json,sys; print(json.load(sys.stdin)['load_seconds'])")
    after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    "$f" net down b30 >/dev/null
    python3 -c "print(f'{100 * ($after - $before) / $hz / $load:.1f}')"
}
cpu=() base_cpu=() awake_cpu=()
for _ in $(seq "$REPEAT"); do
    cpu+=("$(cpu_run "$FLOWLAB")")
    awake_cpu+=("$(cpu_run "$FLOWLAB" --keep-cpus-awake)")
    if [[ -n "$BASE" ]]; then base_cpu+=("$(cpu_run "$BASE")"); fi
done
summary() { # runs' figures: min / median / max, and the spread when over 25 %
    python3 -c "
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
m = statistics.median(v)
spread = (max(v) - min(v)) / m * 100 if m else 0
flag = f'  SPREAD {spread:.0f} % (over 25 %)' if spread > 25 else ''
print(f'  min / median / max: {min(v):.1f} / {m:.1f} / {max(v):.1f} %{flag}')" "$@"
}
echo
echo "emulator CPU at 30 Mbit/s (one link, TCP through it), % of one core per run: ${cpu[*]}"
summary "${cpu[@]}"
echo "the same with --keep-cpus-awake, alternating with it (idle CPUs poll meanwhile, which no process is charged for): ${awake_cpu[*]}"
summary "${awake_cpu[@]}"
if [[ -n "$BASE" ]]; then
    echo "the same for BENCH_BASE ($BASE), alternating with it: ${base_cpu[*]}"
    summary "${base_cpu[@]}"
    python3 -c "import statistics,sys; n=int(sys.argv[1]); v=[float(x) for x in sys.argv[2:]]; print(f'  median ratio this / base: {statistics.median(v[:n]) / statistics.median(v[n:]):.2f}')" "${#cpu[@]}" "${cpu[@]}" "${base_cpu[@]}"
fi

# The host's timer wake-ups, the floor under the emulator's lateness (see the header).
echo
for idle in "--laptop" ""; do
what="the CPUs' idle states as they are"
[[ -z $idle ]] && what="the CPUs held awake"
if ! command -v cyclictest >/dev/null; then
    echo "host timer wake-ups: cyclictest not installed (apt-get install rt-tests): the host's floor not measured"
    break
elif ! cyclictest -q --smp $idle -i 400 -l $((T * 2500)) --policy fifo -p 1 \
        -h 10000 --histfile="$DIR/wakeups" >/dev/null 2>"$DIR/cyclictest.err"; then
    echo "host timer wake-ups: cyclictest failed ($(head -n1 "$DIR/cyclictest.err")): the host's floor not measured"
    break
else
    python3 - "$DIR/wakeups" "$T" "$what" <<'PY'
import sys
counts, overflows, most = {}, 0, 0
for line in open(sys.argv[1]):
    if line[:1].isdigit():
        us, *per_cpu = line.split()
        counts[int(us)] = sum(int(n) for n in per_cpu)
    elif line.startswith("# Histogram Overflows:"):
        # Wake-ups 10 000 µs late or more, beyond the histogram.
        overflows = sum(int(n) for n in line.split(":")[1].split())
    elif line.startswith("# Max Latencies:"):
        most = max(int(n) for n in line.split(":")[1].split())
total = sum(counts.values()) + overflows
def quantile(q):
    seen = 0
    for us in sorted(counts):
        seen += counts[us]
        if seen >= q * total:
            return str(us)
    return "≥10000"
late = sum(n for us, n in counts.items() if us > 500) + overflows
print(f"host timer wake-ups (cyclictest -i 400 --policy fifo -p 1, every CPU, {sys.argv[2]} s,"
      f" {sys.argv[3]}, nothing else running): {total}, µs late: p50 {quantile(0.5)},"
      f" p90 {quantile(0.9)}, p99 {quantile(0.99)}, p99.9 {quantile(0.999)}, max {most};"
      f" over 500 µs: {late}")
PY
fi
done
echo "# steal:    $(awk '/^cpu /{print $9}' /proc/stat) ticks after"
