#!/usr/bin/env bash
# bench/monitor_mesh.sh — what `flowlab monitor` costs the controller: a mesh of HOSTS
# emulated hosts on one switch (no link emulation: the kernel forwards), round trips
# between every ordered pair every 5 minutes and a throughput test in rotation (each
# host to the next, 5 s, every 30 minutes), watched for SECONDS with --db and --metrics.
# The monitor process's own CPU time and peak memory (its children — the ping and test
# runs, which on real hosts run there — are not counted), the runs, the database's size
# and its growth extrapolated to a day. Needs root.
#
# Usage: bench/monitor_mesh.sh [SECONDS] [HOSTS]      (default 600 s, 20 hosts)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
hosts="${2:-20}"
[ "$(id -u)" -eq 0 ] || { echo "monitor_mesh.sh: needs root (namespaces)" >&2; exit 2; }
source bench/lib.sh
cargo build --release --quiet -p flowlab
flowlab="$PWD/target/release/flowlab"
work="$(mktemp -d)"
trap '"$flowlab" net down bmesh >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

names=()
for i in $(seq 1 "$hosts"); do names+=("m$i"); done
{
  echo 'name = "bmesh"'
  printf 'hosts = [%s]\n' "$(printf '"%s",' "${names[@]}" | sed 's/,$//')"
  echo 'switches = ["sw"]'
  for n in "${names[@]}"; do printf '[[link]]\nends = ["%s", "sw"]\n' "$n"; done
} > "$work/bmesh.toml"
ring=()
for i in $(seq 1 "$hosts"); do ring+=("\"m$i-m$(( i % hosts + 1 ))\""); done
{
  echo 'name = "bench"'
  echo 'topology = "bmesh.toml"'
  printf 'hosts = [%s]\n' "$(printf '"%s",' "${names[@]}" | sed 's/,$//')"
  printf '[[probe]]\nkind = "latency"\nevery = "5m"\npairs = "mesh"\ncount = 20\n'
  printf '[[probe]]\nkind = "throughput"\nevery = "30m"\npairs = [%s]\nseconds = 5\n' "$(IFS=,; echo "${ring[*]}")"
} > "$work/mesh.toml"

echo "machine: $(nproc) cores, kernel $(uname -r), congestion control $(cat /proc/sys/net/ipv4/tcp_congestion_control); flowlab $(checkout_id "$PWD")"
echo "mesh: $hosts hosts, latency every ordered pair every 5 min, throughput ${hosts} pairs in rotation every 30 min; watched ${seconds} s"
(cd "$work" && exec "$flowlab" monitor mesh.toml --for "${seconds}s" --seed 1 --db runs.db \
  --metrics 127.0.0.1:0 --json > monitor.jsonl) &
pid=$!
ticks=$(getconf CLK_TCK)
cpu=0 peak=0
while kill -0 "$pid" 2>/dev/null; do
  # utime + stime of the monitor itself (fields 14 and 15), and its peak RSS.
  if stat=$(cat "/proc/$pid/stat" 2>/dev/null); then
    cpu=$(awk -v s="${stat#*) }" 'BEGIN { split(s, f, " "); print f[12] + f[13] }')
    peak=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "$peak")
  fi
  sleep 1
done
wait "$pid" || true
runs=$(grep -c '"event":"run"' "$work/monitor.jsonl" || true)
failed=$(grep '"event":"run"' "$work/monitor.jsonl" | grep -vc '"error":null' || true)
db=$(stat -c %s "$work/runs.db")
wal=$(stat -c %s "$work/runs.db-wal" 2>/dev/null || echo 0)
awk -v cpu="$cpu" -v t="$ticks" -v s="$seconds" -v peak="$peak" -v runs="$runs" \
    -v failed="$failed" -v db="$db" -v wal="$wal" 'BEGIN {
  c = cpu / t
  printf "runs: %d (%d failed), %.2f a second\n", runs, failed, runs / s
  printf "monitor CPU: %.1f s in %d s = %.2f %% of a core; peak memory %.1f MiB\n", c, s, 100 * c / s, peak / 1024
  printf "database: %.1f KiB (+ %.1f KiB WAL), %.0f bytes a run; a day at this rate: %.1f MiB\n", db / 1024, wal / 1024, (db + wal) / runs, (db + wal) / s * 86400 / 1048576
}'
