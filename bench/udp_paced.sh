#!/usr/bin/env bash
# bench/udp_paced.sh — a paced UDP test with the receiver's window (the default between
# flowlab ends) against the same without it (`--no-window`), on loopback (issue 14):
# BENCH_RUNS rounds (default 7) of `flowlab test -u -b BENCH_RATE -t BENCH_SECONDS`
# (defaults 1G, 2) against one long-running `flowlab serve`, each round window up,
# window down (-R), --no-window up, --no-window down. Per run: datagrams lost and
# dropped in the receiver's socket, the receiver's Mbit/s, jitter, and the CPU of
# sender and receiver (% of one core, the result's `cpu`); then per case min / median /
# max and how many runs lost any. Run it at the host's `net.core.rmem_max` and, to see
# what the window is for, at the kernel's default (sysctl -w net.core.rmem_max=212992
# net.core.wmem_max=212992; put the old values back after). About 2 minutes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="$ROOT/target/release/flowlab"
PORT="${BENCH_PORT:-5962}"
RATE="${BENCH_RATE:-1G}"
SECONDS_EACH="${BENCH_SECONDS:-2}"
[[ -x "$B" ]] || (cd "$ROOT" && cargo build --release -p flowlab)
out="$(mktemp)"; json="$(mktemp)"
"$B" serve -B 127.0.0.1 -p "$PORT" >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$out" "$json"' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
echo "# command:  bench/udp_paced.sh  (BENCH_RUNS=${BENCH_RUNS:-7} BENCH_RATE=$RATE BENCH_SECONDS=$SECONDS_EACH)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  $(nproc) cores, kernel $(uname -r); congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control) (UDP: none)"
echo "# buffers:  net.core.rmem_max $(sysctl -n net.core.rmem_max), wmem_max $(sysctl -n net.core.wmem_max)"
echo "# flowlab:  $("$B" --version 2>&1 | head -n1) ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
for _ in $(seq 1 "${BENCH_RUNS:-7}"); do
  for mode in window no-window; do
    for dir in up down; do
      args=(); [[ $mode == no-window ]] && args+=(--no-window); [[ $dir == down ]] && args+=(-R)
      "$B" test 127.0.0.1 -p "$PORT" -u -b "$RATE" -t "$SECONDS_EACH" ${args[@]+"${args[@]}"} -J > "$json"
      python3 - "$mode" "$dir" "$json" <<'PY' | tee -a "$out"
import json, sys
mode, direction, f = sys.argv[1:4]
e = json.load(open(f))["end"]
s, cpu = e["sums"][0], e["cpu"]
u = s["receiver"]["udp"]
# The client is the sender up, the receiver down (-R).
snd, rcv = ("local_total", "remote_total") if direction == "up" else ("remote_total", "local_total")
print(f"{mode} {direction} lost {u['lost']} of {u['expected']} drops {u['rcvbuf_drops']}"
      f" rx {s['receiver']['bits_per_second'] / 1e6:.1f} jitter_us {u['jitter_ms'] * 1000:.2f}"
      f" cpu_sender {cpu[snd]:.1f} cpu_receiver {cpu[rcv]:.1f}")
PY
    done
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def mmm(v, f):
    v = sorted(v)
    return " / ".join(f % x for x in (v[0], statistics.median(v), v[-1]))
print("\n# case: runs with loss; lost; received Mbit/s; jitter µs; CPU sender ; receiver % (min / median / max)")
for mode in ("window", "no-window"):
    for d in ("up", "down"):
        rs = [r for r in rows if r[0] == mode and r[1] == d]
        col = lambda k: [float(r[r.index(k) + 1]) for r in rs]
        lost = col("lost")
        print(f"{mode:<9} {d:<4} {sum(x > 0 for x in lost)} of {len(rs)}; {mmm(lost, '%d')}; {mmm(col('rx'), '%.1f')};"
              f" {mmm(col('jitter_us'), '%.2f')}; {mmm(col('cpu_sender'), '%.1f')} ; {mmm(col('cpu_receiver'), '%.1f')}")
PY
