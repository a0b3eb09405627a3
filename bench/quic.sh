#!/usr/bin/env bash
# bench/quic.sh — flowlab's QUIC (`flowlab test --quic` against `flowlab serve --quic`),
# alternately (bench/ab.py), RUNS times each:
#   1. on loopback, 1 GiB up and down, against a bare quinn client of the same protocol
#      and transport settings (crates/flowlab-quic/examples/quic_bare.rs: one stream,
#      nothing measured) to the same server: what flowlab's measuring costs, as the
#      whole command's time;
#   2. on loopback, 1 GiB up, against flowlab's TCP, under cubic and bbr (-C: quinn's
#      controller of that name for QUIC, the kernel's for TCP): goodput, and the client's CPU per
#      Gbit/s (for TCP the stream threads', for QUIC the whole process's: the stack's
#      threads, encryption included);
#   3. (as root) the same across an emulated 100 Mbit/s link with 10 ms each way
#      (topology `bquic`), 5 s each: goodput against the link, CPU per Gbit/s.
#
# Usage: bench/quic.sh [RUNS]        (default 7)
#        FLOWLAB=target/debug/flowlab bench/quic.sh    with that binary, not built
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-7}"
source bench/lib.sh
if [ -n "${FLOWLAB:-}" ]; then
  flowlab="$(realpath "$FLOWLAB")"
else
  cargo build --release --quiet -p flowlab
  flowlab="$PWD/target/release/flowlab"
fi
cargo build --release --quiet -p flowlab-quic --example quic_bare
bare="$PWD/target/release/examples/quic_bare"
work="$(mktemp -d)"
pids=()
topology=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$topology" ] && "$flowlab" net down "$topology" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

port=18491 quic=18492
"$flowlab" serve -p "$port" --quic="$quic" >/dev/null 2>&1 &
pids+=("$!")
until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
gib=$((1 << 30))
echo "machine: $(nproc) cores, kernel $(uname -r), kernel's default congestion control $(sysctl -n net.ipv4.tcp_congestion_control); flowlab $(checkout_id "$PWD"); quinn 0.11 (both QUIC clients, and the server)"

echo "| case | metric | flowlab: min / median / max | bare quinn: min / median / max | ratio of medians | median paired ratio | spread |"
python3 bench/ab.py "QUIC upload 1 GiB, loopback" wall-ms \
  "$flowlab test 127.0.0.1 --quic -p $quic -n $gib -i 0 -J" "$bare 127.0.0.1:$quic upload $gib" \
  --runs "$runs" --label-a flowlab --label-b "bare quinn"
python3 bench/ab.py "QUIC download 1 GiB, loopback" wall-ms \
  "$flowlab test 127.0.0.1 --quic -p $quic -n $gib -i 0 -R -J" "$bare 127.0.0.1:$quic download $gib" \
  --runs "$runs" --label-a flowlab --label-b "bare quinn"

# Under cubic and under bbr each: -C sets both ends' (quinn's for QUIC, the kernel's for
# TCP), whatever the machine's default.
against_tcp() {  # $1: the case's label; $2: the command's prefix; $3: host; $4: amount
  local cc metric
  for cc in cubic bbr; do
    for metric in gbps cpu-gbit; do
      python3 bench/ab.py "$1 ($cc)" "$metric" \
        "$2 $flowlab test $3 --quic -p $quic $4 -i 0 -C $cc -J" \
        "$2 $flowlab test $3 -p $port $4 -i 0 -C $cc -J" \
        --runs "$runs" --label-a QUIC --label-b TCP
    done
  done
}
echo "| case | metric | QUIC: min / median / max | TCP: min / median / max | ratio of medians | median paired ratio | spread |"
against_tcp "upload 1 GiB, loopback" "" 127.0.0.1 "-n $gib"

if [ "$(id -u)" -ne 0 ]; then
  echo "quic.sh: the emulated link needs root (flowlab net up): loopback only" >&2
  exit 0
fi
cat > "$work/bquic.toml" <<'TOML'
name = "bquic"
hosts = ["c", "s"]
[[link]]
ends = ["c", "s"]
rate = "100M"
delay = "10ms"
TOML
"$flowlab" net up "$work/bquic.toml" >/dev/null
topology=bquic
echo "emulated link: 100 Mbit/s, 10 ms each way"
"$flowlab" net exec s -- "$flowlab" serve -p "$port" --quic="$quic" >/dev/null 2>&1 &
pids+=("$!")
until ip netns exec fl-bquic-c bash -c "(exec 3<>/dev/tcp/10.0.1.2/$port)" 2>/dev/null; do sleep 0.1; done
against_tcp "upload 5 s, 100 Mbit/s link" "ip netns exec fl-bquic-c" 10.0.1.2 "-t 5"
