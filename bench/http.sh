#!/usr/bin/env bash
# bench/http.sh — `flowlab serve --http` against nginx (Debian nginx-light) serving the
# same bytes on loopback, alternately (bench/ab.py), RUNS times each, over HTTP/1.1 in
# the clear: a 1 GiB download on one connection (curl), 8 downloads of 256 MiB at once,
# a 1 GiB upload streamed from a file (`curl -T` to /__up on both: nginx reads and
# drops the body of a `return 200`), the same upload named as a speed-test page's run
# (`/__up?run=ID`, whose bytes the server also counts for the run's result),
# and requests a second for a 1-byte object (wrk, 2 threads, 32 connections, 5 s).
# Transfers of a second or so each: shorter ones are mostly curl's start.
# Uploads run under cubic and under bbr (as root): the sender's congestion control sets
# their pace.
# Then the speed-test page in headless Chromium (bench/page-run.sh) against `flowlab
# test` on the same path, 5 s and 4 streams each way: on loopback, and (as root) across
# an emulated 100 Mbit/s link with 10 ms each way (topology `bpage`); the page's download
# against `flowlab test -R`, its upload against `flowlab test` (the server's count).
# nginx runs as Debian configures it (worker_processes auto, sendfile on); both are
# clients of the same curl and wrk. The time of a download is the whole command's:
# curl's start, the connection, the bytes.
#
# Usage: bench/http.sh [RUNS]        (default 7)
#        FLOWLAB=target/debug/flowlab bench/http.sh    with that binary, not built
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-7}"
command -v nginx >/dev/null || { echo "http.sh: needs nginx (Debian nginx-light)" >&2; exit 2; }
command -v wrk >/dev/null || { echo "http.sh: needs wrk (Debian wrk)" >&2; exit 2; }
command -v chromium >/dev/null || { echo "http.sh: needs chromium (Debian chromium)" >&2; exit 2; }
command -v jq >/dev/null || { echo "http.sh: needs jq (Debian jq)" >&2; exit 2; }
source bench/lib.sh
if [ -n "${FLOWLAB:-}" ]; then
  flowlab="$(realpath "$FLOWLAB")"
else
  cargo build --release --quiet -p flowlab
  flowlab="$PWD/target/release/flowlab"
fi
work="$(mktemp -d)"
chmod 755 "$work"
pids=()
topology=""
cleanup() {
  [ -n "${default_cc:-}" ] && sysctl -qw net.ipv4.tcp_congestion_control="$default_cc" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$topology" ] && "$flowlab" net down "$topology" >/dev/null 2>&1 || true
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

fport=18481 nport=18482
mkdir -p "$work/root"
head -c $((1 << 30)) /dev/urandom > "$work/root/big"
head -c $((256 << 20)) "$work/root/big" > "$work/root/part"
printf x > "$work/root/small"
chmod -R a+r "$work/root"
cat > "$work/nginx.conf" <<CONF
worker_processes auto;
pid $work/nginx.pid;
error_log $work/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nopush on;
  client_body_temp_path $work/body;
  proxy_temp_path $work/proxy;
  fastcgi_temp_path $work/fastcgi;
  uwsgi_temp_path $work/uwsgi;
  scgi_temp_path $work/scgi;
  server {
    listen 127.0.0.1:$nport;
    root $work/root;
    location = /__up { client_max_body_size 0; return 200; }
  }
}
CONF
nginx -c "$work/nginx.conf"
"$flowlab" serve -p 18480 --http "127.0.0.1:$fport" --http-max-bytes 1G --http-max-transfers-per-source 16 >/dev/null 2>&1 &
pids+=("$!")
until curl -s -o /dev/null "http://127.0.0.1:$fport/small" && curl -s -o /dev/null "http://127.0.0.1:$nport/small"; do sleep 0.1; done

f="http://127.0.0.1:$fport" n="http://127.0.0.1:$nport"
dl="curl -s -o /dev/null --fail"
# Uploads to the same path on both, without curl's `Expect: 100-continue`: curl waits
# for the server's 100 Continue before the body, and how that wait falls doubled some
# uploads' times depending on the request head's length alone (seen on both servers).
up="$dl -H Expect: -X POST -T $work/root/big"
eight() { printf "bash -c 'for i in 1 2 3 4 5 6 7 8; do %s %s & done; wait'" "$dl" "$1"; }
echo "machine: $(nproc) cores, kernel $(uname -r), congestion control $(sysctl -n net.ipv4.tcp_congestion_control) (default); flowlab $(checkout_id "$PWD"); $(nginx -v 2>&1); $(curl --version | head -1 | cut -d' ' -f1-2); wrk $(wrk -v 2>&1 | head -1 | cut -d' ' -f2)"
echo "| case | metric | flowlab: min / median / max | nginx: min / median / max | ratio of medians | median paired ratio | spread |"
python3 bench/ab.py "download 1 GiB, 1 connection" wall-ms \
  "$dl '$f/__down?bytes=$((1 << 30))'" "$dl '$n/big'" --runs "$runs" --label-a flowlab --label-b nginx
python3 bench/ab.py "download 8 × 256 MiB at once" wall-ms \
  "$(eight "'$f/__down?bytes=$((256 << 20))'")" "$(eight "'$n/part'")" --runs "$runs" --label-a flowlab --label-b nginx
# An upload's pace is set by the sender's (curl's) congestion control, which on loopback
# is the machine's default: as root the uploads run under cubic and under bbr each (the
# default set for the row, then put back); otherwise under the default, named.
default_cc="$(sysctl -n net.ipv4.tcp_congestion_control)"
upload_ccs="$default_cc"
if [ "$(id -u)" -eq 0 ]; then
  upload_ccs=""
  for cc in cubic bbr; do
    grep -qw "$cc" /proc/sys/net/ipv4/tcp_available_congestion_control && upload_ccs="$upload_ccs $cc"
  done
fi
for cc in $upload_ccs; do
  [ "$cc" = "$default_cc" ] || sysctl -qw net.ipv4.tcp_congestion_control="$cc"
  python3 bench/ab.py "upload 1 GiB (curl: $cc)" wall-ms \
    "$up '$f/__up'" "$up '$n/__up'" \
    --runs "$runs" --label-a flowlab --label-b nginx
  python3 bench/ab.py "upload 1 GiB, counted for a page run (?run=) (curl: $cc)" wall-ms \
    "$up '$f/__up?run=bench'" "$up '$n/__up?run=bench'" \
    --runs "$runs" --label-a flowlab --label-b nginx
  sysctl -qw net.ipv4.tcp_congestion_control="$default_cc"
done
python3 bench/ab.py "1-byte object, wrk -t2 -c32" wrk-rps \
  "wrk -t2 -c32 -d5s '$f/small'" "wrk -t2 -c32 -d5s '$n/small'" --runs "$runs" --label-a flowlab --label-b nginx

# The page against flowlab test: on loopback, then across an emulated link.
page() { printf 'bench/page-run.sh %s %s %s 5 4' "$1" "$2" "$3"; }
test_() { printf '%s %s test %s -p %s -t 5 -P 4 -J %s' "$1" "$flowlab" "$2" "$3" "$4"; }
echo "| case | metric | page: min / median / max | flowlab test: min / median / max | ratio of medians | median paired ratio | spread |"
python3 bench/ab.py "page download, loopback" gbps \
  "$(page "" "$f" download)" "$(test_ "" 127.0.0.1 18480 -R)" --runs "$runs" --label-a page --label-b "flowlab test"
python3 bench/ab.py "page upload, loopback" gbps \
  "$(page "" "$f" upload)" "$(test_ "" 127.0.0.1 18480 "")" --runs "$runs" --label-a page --label-b "flowlab test"
if [ "$(id -u)" -ne 0 ]; then
  echo "http.sh: the emulated link needs root (flowlab net up): loopback only" >&2
  exit 0
fi
cat > "$work/bpage.toml" <<'TOML'
name = "bpage"
hosts = ["c", "s"]
[[link]]
ends = ["c", "s"]
rate = "100M"
delay = "10ms"
TOML
"$flowlab" net up "$work/bpage.toml" >/dev/null
topology=bpage
echo "emulated link: 100 Mbit/s, 10 ms each way; congestion control $(ip netns exec fl-bpage-s sysctl -n net.ipv4.tcp_congestion_control) (the kernel's default)"
"$flowlab" net exec s -- "$flowlab" serve -p 5201 --http 8080 >/dev/null 2>&1 &
pids+=("$!")
until ip netns exec fl-bpage-c curl -s -o /dev/null http://10.0.1.2:8080/small; do sleep 0.1; done
in="ip netns exec fl-bpage-c"
python3 bench/ab.py "page download, 100 Mbit/s link" gbps \
  "$(page "-n fl-bpage-c" http://10.0.1.2:8080 download)" "$(test_ "$in" 10.0.1.2 5201 -R)" --runs "$runs" --label-a page --label-b "flowlab test"
python3 bench/ab.py "page upload, 100 Mbit/s link" gbps \
  "$(page "-n fl-bpage-c" http://10.0.1.2:8080 upload)" "$(test_ "$in" 10.0.1.2 5201 "")" --runs "$runs" --label-a page --label-b "flowlab test"
