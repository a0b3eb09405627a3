#!/usr/bin/env bash
# bench/fetch_vs_aria2c.sh — one file from two servers on loopback: flowlab against aria2c.
#
# The job (issue 4's benchmark): BENCH_SIZE (default 1G) of test data in BENCH_COUNT
# (default 160) fragments, on two servers on 127.0.0.1, no rate limits, everything in the
# page cache (the data lives on tmpfs, /dev/shm, when there is one):
#   flowlab: two `flowlab serve --fragments DIR` and `flowlab fetch --from A --from B`
#            (adaptive; every fragment BLAKE3-verified before it is kept);
#   aria2c:  two nginx servers with the joined file and `aria2c` fetching it from both
#            (`--split 2`, one connection each, the whole file SHA-256-checked with
#            `--checksum`, as aria2c's closest equivalent to flowlab's verification).
# A third line runs aria2c without any verification, for reference.
# Each run starts from an empty output directory; runs alternate between the tools, and
# the table shows min / median / max of BENCH_REPEAT runs (default 7), the time ratio
# aria2c/flowlab of the medians (> 1: flowlab is faster), and flags a tool whose runs
# spread by more than 25 % of its median.
#
# Needs: aria2c and nginx (Debian: apt-get install aria2 nginx-light), python3.
# Env:   BENCH_SIZE, BENCH_COUNT, BENCH_REPEAT, BENCH_PORT (first of four ports, default 5410).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
SIZE="${BENCH_SIZE:-1G}"
COUNT="${BENCH_COUNT:-160}"
REPEAT="${BENCH_REPEAT:-7}"
PORT="${BENCH_PORT:-5410}"

die() { echo "fetch_vs_aria2c.sh: error: $*" >&2; exit 2; }
command -v aria2c >/dev/null || die "aria2c not found (apt-get install aria2)"
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
[[ -x "$NGINX" ]] || die "nginx not found (apt-get install nginx-light)"
command -v python3 >/dev/null || die "python3 not found"
[[ "$REPEAT" =~ ^[0-9]+$ && "$REPEAT" -ge 1 ]] || die "BENCH_REPEAT must be a positive integer"
if [[ ! -x "$FLOWLAB" ]]; then
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
fi

BASE=/tmp
[[ -d /dev/shm && -w /dev/shm ]] && BASE=/dev/shm
WORK="$(mktemp -d "$BASE/flowlab-bench.XXXXXX")"
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

"$FLOWLAB" fragments make --size "$SIZE" --count "$COUNT" --out "$WORK/frags" >/dev/null
mkdir -p "$WORK/www"
"$FLOWLAB" fragments join "$WORK/frags" --out "$WORK/www/testdata.bin" >/dev/null
SHA=$(sha256sum "$WORK/www/testdata.bin" | cut -d' ' -f1)
chmod 755 "$WORK" "$WORK/www" && chmod 644 "$WORK/www/testdata.bin" # nginx's workers are not root
cat "$WORK"/frags/* "$WORK/www/testdata.bin" >/dev/null # page cache

P1=$PORT P2=$((PORT + 1)) P3=$((PORT + 2)) P4=$((PORT + 3))
"$FLOWLAB" serve -B 127.0.0.1 -p "$P1" --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!)
"$FLOWLAB" serve -B 127.0.0.1 -p "$P2" --fragments "$WORK/frags" >/dev/null 2>&1 & PIDS+=($!)
for p in "$P3" "$P4"; do
    mkdir -p "$WORK/nginx-$p"
    cat > "$WORK/nginx-$p/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $WORK/nginx-$p/nginx.pid;
error_log $WORK/nginx-$p/error.log;
events { worker_connections 64; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path $WORK/nginx-$p;
    proxy_temp_path $WORK/nginx-$p;
    fastcgi_temp_path $WORK/nginx-$p;
    uwsgi_temp_path $WORK/nginx-$p;
    scgi_temp_path $WORK/nginx-$p;
    server { listen 127.0.0.1:$p; root $WORK/www; }
}
EOF
    "$NGINX" -c "$WORK/nginx-$p/nginx.conf" -p "$WORK/nginx-$p" -e "$WORK/nginx-$p/error.log" & PIDS+=($!)
done
sleep 1

echo "# command:  $0  (BENCH_SIZE=$SIZE BENCH_COUNT=$COUNT BENCH_REPEAT=$REPEAT)"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)  data on $BASE"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control) (the system's default, which every TCP test here runs)"
echo "# flowlab:  $("$FLOWLAB" --version)"
echo "# aria2c:   $(aria2c --version | head -n1);  nginx: $("$NGINX" -v 2>&1 | sed 's/.*: //')"
echo

now() { python3 -c 'import time; print(time.monotonic())'; }
F_TIMES=() A_TIMES=() U_TIMES=()
for ((i = 1; i <= REPEAT; i++)); do
    rm -rf "$WORK/out-f" "$WORK/out-a"
    t0=$(now)
    "$FLOWLAB" fetch --from "127.0.0.1:$P1" --from "127.0.0.1:$P2" --out "$WORK/out-f" -J >/dev/null \
        || die "flowlab fetch failed"
    t1=$(now)
    aria2c -q --allow-overwrite=true --file-allocation=none --split=2 --max-connection-per-server=1 \
        --min-split-size=1M --checksum="sha-256=$SHA" -d "$WORK/out-a" -o testdata.bin \
        "http://127.0.0.1:$P3/testdata.bin" "http://127.0.0.1:$P4/testdata.bin" \
        || die "aria2c failed (nginx logs: $WORK/nginx-*/error.log)"
    t2=$(now)
    rm -rf "$WORK/out-a"
    aria2c -q --allow-overwrite=true --file-allocation=none --split=2 --max-connection-per-server=1 \
        --min-split-size=1M -d "$WORK/out-a" -o testdata.bin \
        "http://127.0.0.1:$P3/testdata.bin" "http://127.0.0.1:$P4/testdata.bin" \
        || die "aria2c failed (nginx logs: $WORK/nginx-*/error.log)"
    t3=$(now)
    f=$(python3 -c "print(f'{$t1 - $t0:.3f}')")
    a=$(python3 -c "print(f'{$t2 - $t1:.3f}')")
    u=$(python3 -c "print(f'{$t3 - $t2:.3f}')")
    printf '  run %d  flowlab %7s s   aria2c %7s s   aria2c unverified %7s s\n' "$i" "$f" "$a" "$u"
    F_TIMES+=("$f") A_TIMES+=("$a") U_TIMES+=("$u")
done
python3 - "$SIZE" "${F_TIMES[*]}" "${A_TIMES[*]}" "${U_TIMES[*]}" <<'PY'
import statistics, sys
size = sys.argv[1]
f, a, u = ([float(x) for x in arg.split()] for arg in sys.argv[2:5])
mf = statistics.median(f)
print()
print("| tool | seconds, whole command: min / median / max | ratio aria2c/flowlab (medians) | spread |")
print("|---|---|---:|---|")
for name, xs in [
    ("flowlab fetch (2 servers, adaptive, BLAKE3 per fragment)", f),
    ("aria2c (2 nginx, --split 2, SHA-256 of the file)", a),
    ("aria2c, same without verification", u),
]:
    m = statistics.median(xs)
    spread = (max(xs) - min(xs)) / m
    flag = f"{spread:.0%}" + ("  SPREAD>25%" if spread > 0.25 else "")
    ratio = "" if xs is f else f"{m / mf:.2f}"
    print(f"| {name} | {min(xs):.3f} / {m:.3f} / {max(xs):.3f} | {ratio} | {flag} |")
PY
