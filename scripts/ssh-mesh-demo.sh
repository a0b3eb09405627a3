#!/usr/bin/env bash
# A mesh of hosts over SSH on this machine, for docs/distributed.md: an emulated
# topology of three "sites" and a controller, a real sshd in each site's namespace with
# a key made here, and `flowlab monitor` run from the controller's namespace exactly as
# it would reach real hosts. Prints the monitor's output and a scrape of its metrics,
# then takes everything down. Needs root, iproute2 and openssh-server.
#
#   scripts/ssh-mesh-demo.sh [SECONDS]     watch for SECONDS (default 30)
#   FLOWLAB=target/debug/flowlab scripts/ssh-mesh-demo.sh    with that binary
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
[ "$(id -u)" -eq 0 ] || { echo "ssh-mesh-demo.sh: needs root (namespaces)" >&2; exit 2; }
[ -x /usr/sbin/sshd ] || { echo "ssh-mesh-demo.sh: needs openssh-server" >&2; exit 2; }

if [ -n "${FLOWLAB:-}" ]; then
  flowlab="$(realpath "$FLOWLAB")"
else
  cargo build --release --quiet -p flowlab
  flowlab="$PWD/target/release/flowlab"
fi
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$flowlab" net down demo >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/demo.toml" <<'EOF'
# Three sites and a controller: lon and fra 10 ms apart, nyc 40 ms from both, each
# site behind a 100 Mbit/s link.
name = "demo"
hosts = ["ctl", "lon", "fra", "nyc"]
switches = ["core"]
[[link]]
ends = ["ctl", "core"]
[[link]]
ends = ["lon", "core"]
rate = "100M"
delay = "5ms"
[[link]]
ends = ["fra", "core"]
rate = "100M"
delay = "5ms"
[[link]]
ends = ["nyc", "core"]
rate = "100M"
delay = "35ms"
EOF
"$flowlab" net up "$work/demo.toml" >/dev/null

ssh-keygen -q -t ed25519 -N '' -f "$work/key"
mkdir -p /run/sshd
for site in lon fra nyc; do
  ssh-keygen -q -t ed25519 -N '' -f "$work/$site.host"
  cat > "$work/$site.sshd" <<EOF
ListenAddress 0.0.0.0:22
HostKey $work/$site.host
AuthorizedKeysFile $work/key.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile none
EOF
  ip netns exec "fl-demo-$site" /usr/sbin/sshd -D -e -f "$work/$site.sshd" 2>/dev/null &
  pids+=("$!")
done
sleep 1

cat > "$work/mesh.toml" <<EOF
name = "sites"
hosts = ["lon", "fra", "nyc"]
ssh_options = ["-i", "$work/key", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]

[ssh]
lon = { url = "ssh://root@lon", flowlab = "$flowlab" }
fra = { url = "ssh://root@fra", flowlab = "$flowlab" }
nyc = { url = "ssh://root@nyc", flowlab = "$flowlab" }

[[probe]]
kind = "latency"
every = "10s"
pairs = "mesh"
count = 20

[[probe]]
kind = "throughput"
every = "30s"
pairs = ["lon-fra", "fra-nyc", "nyc-lon"]
seconds = 3
EOF

(cd "$work" && "$flowlab" net exec -t demo ctl -- "$flowlab" monitor mesh.toml \
  --for "${seconds}s" --seed 7 --metrics 127.0.0.1:9470 --db runs.db) &
monitor=$!
sleep $((seconds - 2))
echo
echo "--- metrics (from the controller's namespace), lon → nyc:"
"$flowlab" net exec -t demo ctl -- bash -c 'exec 3<>/dev/tcp/127.0.0.1/9470 && printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
  | grep -E '^flowlab_path_(rtt_latest_seconds|throughput_bytes_per_second|up)\{[^}]*source="lon",[^}]*target="nyc"' || true
wait "$monitor"
