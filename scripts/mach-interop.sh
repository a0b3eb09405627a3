#!/usr/bin/env bash
# scripts/mach-interop.sh — Cloudflare's responsiveness client, `mach` (crate cf-mach),
# against `flowlab serve --http --tls-self-signed`: the check behind docs/web.md's
# "Responsiveness clients". Not in the suite: cf-mach builds BoringSSL (cmake,
# libclang-dev), minutes on two cores.
#
# First one run of each client on loopback (do they speak to each other at all); then,
# as root, both clients against one server across an emulated link (topology `mach`:
# 50 Mbit/s, 10 ms each way, a 100-packet queue), alternating, RUNS runs each. For each
# direction it prints each tool's RPM as min/median/max and whether the two medians lie
# within the spread (max - min) of either tool's own runs.
#
# Usage: scripts/mach-interop.sh            (installs cf-mach under target/mach once)
#        MACH=/path/to/mach RUNS=7 CC=cubic scripts/mach-interop.sh
# CC sets both hosts' congestion control (default: the kernel's); a namespace may default
# only to an algorithm in tcp_allowed_congestion_control, so CC is added to that list
# while the script runs.
set -euo pipefail
cd "$(dirname "$0")/.."
mach="${MACH:-target/mach/bin/mach}"
runs="${RUNS:-5}"
if [ ! -x "$mach" ]; then
  command -v cmake >/dev/null && dpkg -s libclang-dev >/dev/null 2>&1 || {
    echo "mach-interop.sh: building cf-mach needs cmake and libclang-dev (Debian packages)" >&2
    exit 2
  }
  cargo install --locked cf-mach --root target/mach
fi
command -v jq >/dev/null || { echo "mach-interop.sh: needs jq (Debian package jq)" >&2; exit 2; }
cargo build --release --quiet -p flowlab
flowlab="$PWD/target/release/flowlab"
mach="$(cd "$(dirname "$mach")" && pwd)/$(basename "$mach")"

server=""
topology=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; fi
  if [ -n "$topology" ]; then "$flowlab" net down "$topology" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

echo "$("$mach" --version); flowlab $(git rev-parse --short HEAD); $(nproc) cores, kernel $(uname -r)"

# --- Loopback: one run each.
port=18561
"$flowlab" serve -p 18560 --http "127.0.0.1:$port" --tls-self-signed >/dev/null 2>&1 &
server=$!
until curl -sk -o /dev/null "https://127.0.0.1:$port/small"; do sleep 0.1; done
echo "\$ mach rpm -c https://127.0.0.1:$port/config --insecure --disable-aim-scores"
"$mach" rpm -c "https://127.0.0.1:$port/config" --insecure --disable-aim-scores
echo "\$ flowlab rpm https://127.0.0.1:$port/config -k -q"
"$flowlab" rpm "https://127.0.0.1:$port/config" -k -q || true
kill "$server"; wait "$server" 2>/dev/null || true
server=""

# --- An emulated link: both clients, alternating.
if [ "$(id -u)" -ne 0 ]; then
  echo "mach-interop.sh: the emulated link needs root (flowlab net up); loopback only" >&2
  exit 0
fi
dir="$(mktemp -d)"
trap 'cleanup; rm -rf "$dir"' EXIT
cat > "$dir/mach.toml" <<'EOF'
name = "mach"
hosts = ["c", "s"]
[[link]]
ends = ["c", "s"]
rate = "50M"
delay = "10ms"
queue = 100
EOF
"$flowlab" net up "$dir/mach.toml"
topology=mach
if [ -n "${CC:-}" ]; then
  allowed="$(sysctl -n net.ipv4.tcp_allowed_congestion_control)"
  sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed $CC"
  for ns in fl-mach-c fl-mach-s; do ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$CC"; done
  sysctl -qw net.ipv4.tcp_allowed_congestion_control="$allowed"
  echo "congestion control: $CC (both hosts, set by CC)"
else
  echo "congestion control: $(ip netns exec fl-mach-s sysctl -n net.ipv4.tcp_congestion_control) (both hosts, the kernel's default)"
fi
cc="$(ip netns exec fl-mach-s sysctl -n net.ipv4.tcp_congestion_control)"
"$flowlab" net exec s -- "$flowlab" serve -p 5201 --http 8443 --tls-self-signed >/dev/null 2>&1 &
server=$!
url=https://10.0.1.2:8443/config
until "$flowlab" net exec c -- curl -sk -o /dev/null "$url"; do sleep 0.1; done
for i in $(seq "$runs"); do
  "$flowlab" net exec c -- "$mach" rpm -c "$url" --insecure --disable-aim-scores \
    > "$dir/mach.$i.json"
  "$flowlab" net exec c -- "$flowlab" rpm "$url" -k -q -J > "$dir/flowlab.$i.json" || true
  printf 'run %d/%d: mach download %s upload %s; flowlab download %s upload %s RPM\n' "$i" "$runs" \
    "$(jq -r '.download.rpm' "$dir/mach.$i.json")" "$(jq -r '.upload.rpm' "$dir/mach.$i.json")" \
    "$(jq -r '.directions[] | select(.direction == "download") | .responsiveness.rpm | floor' "$dir/flowlab.$i.json")" \
    "$(jq -r '.directions[] | select(.direction == "upload") | .responsiveness.rpm | floor' "$dir/flowlab.$i.json")"
done
# min, median, max of the numbers on stdin, one a line.
stats() { sort -n | awk '{ v[NR] = $1 } END { printf "%d %d %d\n", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
# One figure of both tools judged: WHAT, UNIT, mach's jq filter, flowlab's jq filter
# (each giving a whole number), for direction $d.
judge() {
  local what="$1" unit="$2" m_min m_med m_max f_min f_med f_max gap spread verdict
  read -r m_min m_med m_max < <(for i in $(seq "$runs"); do jq -r "$3" "$dir/mach.$i.json"; done | stats)
  read -r f_min f_med f_max < <(for i in $(seq "$runs"); do jq -r "$4" "$dir/flowlab.$i.json"; done | stats)
  gap=$(( m_med > f_med ? m_med - f_med : f_med - m_med ))
  spread=$(( (m_max - m_min) > (f_max - f_min) ? m_max - m_min : f_max - f_min ))
  verdict="within"
  [ "$gap" -le "$spread" ] || verdict="OUTSIDE"
  printf '%-8s %-16s mach %d/%d/%d  flowlab %d/%d/%d %s: medians %d apart, %s the larger spread (%d)\n' \
    "$d" "$what" "$m_min" "$m_med" "$m_max" "$f_min" "$f_med" "$f_max" "$unit" "$gap" "$verdict" "$spread"
}
echo "on the link ($runs runs each; $cc; min/median/max):"
for d in download upload; do
  f=".directions[] | select(.direction == \"$d\")"
  judge responsiveness RPM ".$d.rpm" "$f | .responsiveness.rpm | floor"
  # The loaded (self) probes: a request on a load connection, as each tool reports it.
  judge "loaded latency" ms ".$d.loaded_latency_ms | floor" "$f | .responsiveness.request_loaded_ms | floor"
  judge goodput Mbit/s ".$d.throughput / 1e6 | floor" "$f | .goodput_bps / 1e6 | floor"
done
