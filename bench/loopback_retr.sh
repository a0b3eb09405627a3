#!/usr/bin/env bash
# bench/loopback_retr.sh — what a plain single-stream TCP test's retransmissions on
# loopback are (issue 14): BENCH_RUNS rounds (default 7) of `flowlab test -t 3` against a
# one-off `flowlab serve`, for cubic and bbr, three placements each in turn: unpinned,
# the client's threads on CPU 0 (`-A 0`), and client and server both on CPU 0
# (`-A 0,0`). Per run: the receiver's rate, the sender's retransmits, how many of them
# the receiver D-SACKed (not needed) and the reordering its TCP saw, and the kernel's
# counters that moved (nstat: out-of-order queueing, undone recoveries, loss probes,
# timeouts, receive-queue and backlog drops). Then totals per case. Root not needed;
# nstat from iproute2. About 3 minutes.
# BENCH_RPS=1 (root) adds a fourth placement, `rps`: unpinned, with receive packet
# steering on lo for every CPU (/sys/class/net/lo/queues/rx-0/rps_cpus), so that each
# flow's segments queue on one CPU's backlog whichever CPU sent them; the mask is put
# back after each such run and on exit. About 4 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="$ROOT/target/release/flowlab"
PORT="${BENCH_PORT:-5963}"
[[ -x "$B" ]] || (cd "$ROOT" && cargo build --release -p flowlab)
command -v nstat >/dev/null || { echo "loopback_retr.sh: needs nstat (iproute2)" >&2; exit 2; }
out="$(mktemp)"
trap 'rm -f "$out" /tmp/loopback_retr.$$.json; [[ -n "${rps_was:-}" ]] && echo "$rps_was" > "$RPS"; true' EXIT
RPS=/sys/class/net/lo/queues/rx-0/rps_cpus
modes=(unpinned "-A 0" "-A 0,0")
# A mask of every CPU in the kernel's format: hex, in comma-separated groups of 32 bits.
every_cpu() {
  python3 -c 'import os; m = format((1 << os.cpu_count()) - 1, "x"); print(",".join(m[max(0, i - 8):i] for i in reversed(range(len(m), 0, -8))))'
}
if [[ "${BENCH_RPS:-0}" == 1 ]]; then
  [[ -w "$RPS" ]] || { echo "loopback_retr.sh: BENCH_RPS=1 needs root and $RPS" >&2; exit 2; }
  rps_was="$(cat "$RPS")"
  # Steered already, every placement would be: the comparison needs lo as it comes.
  [[ "$rps_was" =~ ^[0,]+$ ]] || { echo "loopback_retr.sh: lo is steered already (rps_cpus $rps_was)" >&2; rps_was=; exit 2; }
  modes+=(rps)
fi
echo "# command:  bench/loopback_retr.sh  (BENCH_RUNS=${BENCH_RUNS:-7} BENCH_RPS=${BENCH_RPS:-0})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  $(nproc) cores, kernel $(uname -r); system default congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control); each case sets its own (-C)"
echo "# flowlab:  $("$B" --version 2>&1 | head -n1) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
for cc in cubic bbr; do
  for i in $(seq 1 "${BENCH_RUNS:-7}"); do
    for mode in "${modes[@]}"; do
      args=(); [[ "$mode" == -A* ]] && read -ra args <<< "$mode"
      if [[ "$mode" == rps ]]; then
        # One write: sysfs takes each write(2) as a whole mask (a lone newline clears it).
        mask="$(every_cpu)"
        echo "$mask" > "$RPS"
        [[ "$(cat "$RPS")" =~ ^[0,]+$ ]] && { echo "loopback_retr.sh: the mask $mask did not take" >&2; exit 1; }
      fi
      "$B" serve -1 -p "$PORT" >/dev/null 2>&1 & sleep 0.3
      nstat -n
      "$B" test 127.0.0.1 -p "$PORT" -t 3 -C "$cc" "${args[@]}" -J > /tmp/loopback_retr.$$.json; wait
      [[ "$mode" == rps ]] && echo "$rps_was" > "$RPS"
      n=$(nstat | awk '/TcpExtTCPOFOQueue|TcpExtTCPDSACKUndo|TcpExtTCPLossProbes|TcpExtTCPTimeouts|TcpExtTCPRcvQDrop|TcpExtTCPBacklogDrop/{printf "%s=%s ",$1,$2}')
      python3 - "$cc" "$mode" "$n" /tmp/loopback_retr.$$.json <<'PY' | tee -a "$out"
import json, sys
cc, mode, counters, f = sys.argv[1:5]
d = json.load(open(f))["end"]["sums"][0]
s = d["sender"]
print(f"{cc:<6} {mode:<9} {d['receiver']['bits_per_second'] / 1e9:5.1f} Gbit/s  retr {s['retransmits']:>3}"
      f"  not needed (D-SACK) {s.get('dsack_dups')!s:>3}  reordering {s.get('reordering')!s:>3}  {counters}")
PY
    done
  done
done
echo
echo "# totals per case: runs, retransmits, of them D-SACKed, runs without any, runs with a drop or timeout counter"
python3 - "$out" <<'PY'
import re, sys
rows = open(sys.argv[1]).read().splitlines()
for cc in ("cubic", "bbr"):
    for mode in ("unpinned", "-A 0", "-A 0,0", "rps"):
        r = [l for l in rows if l.startswith(f"{cc:<6} {mode:<9} ")]
        if not r:
            continue
        retr = sum(int(re.search(r"retr +(\d+)", l).group(1)) for l in r)
        dsack = sum(int(re.search(r"\(D-SACK\) +(\d+)", l).group(1)) for l in r)
        zero = sum(1 for l in r if re.search(r"retr +0 ", l))
        drops = sum(1 for l in r if "Drop" in l or "Timeouts" in l)
        gbps = sorted(float(re.search(r"([\d.]+) Gbit/s", l).group(1)) for l in r)
        med = gbps[len(gbps) // 2] if gbps else 0
        print(f"{cc:<6} {mode:<9} runs {len(r)}  retr {retr:>3}  D-SACKed {dsack:>3}  runs with 0: {zero}  "
              f"with drops/timeouts: {drops}  Gbit/s min/median/max {gbps[0]:.1f}/{med:.1f}/{gbps[-1]:.1f}")
PY
