#!/usr/bin/env bash
# bench/compare.sh — flowlab vs iperf3, side by side, on loopback (127.0.0.1).
#
# What it measures, per case (iperf3 client flags in brackets; flowlab gets the same flags):
#   tcp-1     TCP, 1 stream, client -> server          [-t T]
#   tcp-P4    TCP, 4 parallel streams                   [-t T -P 4]
#   tcp-R     TCP reverse, server -> client             [-t T -R]
#   udp-1460  UDP, unlimited rate, 1460-byte datagrams  [-t T -u -b 0 -l 1460]
# Each tool runs against its OWN one-off server on its own port:
#   iperf3 -s -p $BENCH_PORT_IPERF3 -1           iperf3 -c 127.0.0.1 -p ... -J ...
#   flowlab serve -p $BENCH_PORT_FLOWLAB -1      flowlab test 127.0.0.1 -p ... -J ...
#
# Throughput = what the RECEIVER counted, in bits/s (for UDP this is goodput):
#   iperf3:  end.sum_received.bits_per_second / .bytes      (client's -J document)
#   flowlab: sum over end.sums[] of receiver.bits_per_second / receiver.bytes
# UDP loss %: iperf3 end.sum_received.lost_percent; flowlab end.sums[].receiver.udp.lost_percent.
#
# CPU: user+sys seconds of the whole client process AND the whole server process (all
# threads), taken from the kernel with os.wait4() when each process exits (an embedded
# python3 driver starts both with subprocess and reaps them itself). Nothing is sampled and
# neither tool's self-reported CPU % is used.
#   CPU s/GB = (client cpu + server cpu) / (bytes received / 1e9)
# Lower is better. Ratios are flowlab/iperf3: throughput ratio > 1 means flowlab is faster,
# CPU ratio < 1 means flowlab spends less CPU per byte moved.
#
# Note on UDP: flowlab batches datagrams with UDP GSO on send and GRO on receive; iperf3 3.12
# does one send/recv per datagram. Datagrams are 1460 bytes either way, but on loopback the
# batching is most of the difference in both goodput and CPU s/GB.
#
# Usage:   bench/compare.sh                      (from anywhere; builds flowlab if needed)
# Env:     BENCH_SECONDS  test duration, -t            (default 10)
#          BENCH_REPEAT   runs per case and tool; the table shows the median (default 1)
#          BENCH_PORT_IPERF3 / BENCH_PORT_FLOWLAB  server ports (default 5401 / 5402)
#          BENCH_CASES    comma-separated subset of the cases above (default: all)
#          IPERF3         iperf3 binary (default: iperf3 on PATH)
# Per-run numbers are printed as they come; the summary table is printed at the end.
# Both client and server share the machine's cores, so on a small or busy machine the
# numbers say more about scheduling than about the tools: keep the machine otherwise idle.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FLOWLAB="$ROOT/target/release/flowlab"
BENCH_SECONDS="${BENCH_SECONDS:-10}"
BENCH_REPEAT="${BENCH_REPEAT:-1}"
BENCH_PORT_IPERF3="${BENCH_PORT_IPERF3:-5401}"
BENCH_PORT_FLOWLAB="${BENCH_PORT_FLOWLAB:-5402}"
BENCH_CASES="${BENCH_CASES:-}"

die() { echo "compare.sh: error: $*" >&2; exit 2; }

IPERF3="${IPERF3:-$(command -v iperf3 || true)}"
[[ -n "$IPERF3" && -x "$IPERF3" ]] || die "iperf3 not found (install it, e.g. 'apt-get install iperf3', or set IPERF3=/path/to/iperf3)"
command -v python3 >/dev/null || die "python3 not found (needed to run and time the processes)"
[[ "$BENCH_SECONDS" =~ ^[0-9]+$ && "$BENCH_SECONDS" -ge 1 ]] || die "BENCH_SECONDS must be a positive integer, got '$BENCH_SECONDS'"
[[ "$BENCH_REPEAT" =~ ^[0-9]+$ && "$BENCH_REPEAT" -ge 1 ]] || die "BENCH_REPEAT must be a positive integer, got '$BENCH_REPEAT'"
[[ "$BENCH_PORT_IPERF3" != "$BENCH_PORT_FLOWLAB" ]] || die "the two servers need distinct ports"

if [[ ! -x "$FLOWLAB" ]]; then
    echo "# $FLOWLAB missing: building it (cargo build --release)" >&2
    (cd "$ROOT" && cargo build --release) || die "cargo build --release failed"
    [[ -x "$FLOWLAB" ]] || die "build finished but $FLOWLAB is still missing"
fi

echo "# command:  $0 $*  (BENCH_SECONDS=$BENCH_SECONDS BENCH_REPEAT=$BENCH_REPEAT BENCH_CASES=${BENCH_CASES:-all})"
echo "# date:     $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
echo "# machine:  nproc=$(nproc)  kernel=$(uname -r)  cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
echo "# tcp cc:   $(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null || echo '?')"
echo "# iperf3:   $("$IPERF3" --version 2>&1 | head -n1)  ($IPERF3)"
echo "# flowlab:  $("$FLOWLAB" --version 2>&1 | head -n1)  ($FLOWLAB)"
echo

export FLOWLAB IPERF3 BENCH_CASES BENCH_SECONDS BENCH_REPEAT BENCH_PORT_IPERF3 BENCH_PORT_FLOWLAB

# The driver runs in the background so the trap below fires promptly on Ctrl-C / TERM.
# The driver itself kills its servers/clients on exit (and they get SIGKILL via
# PR_SET_PDEATHSIG should the driver die abruptly).
DRIVER_PID=""
cleanup() {
    if [[ -n "$DRIVER_PID" ]] && kill -0 "$DRIVER_PID" 2>/dev/null; then
        kill -TERM "$DRIVER_PID" 2>/dev/null || true
        wait "$DRIVER_PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

python3 - <<'PY' &
import ctypes, json, os, signal, statistics, subprocess, sys, tempfile, time

FLOWLAB = os.environ["FLOWLAB"]
IPERF3 = os.environ["IPERF3"]
T = int(os.environ["BENCH_SECONDS"])
REPEAT = int(os.environ["BENCH_REPEAT"])
PORTS = {"iperf3": int(os.environ["BENCH_PORT_IPERF3"]),
         "flowlab": int(os.environ["BENCH_PORT_FLOWLAB"])}
HOST = "127.0.0.1"

# case name, client flags (identical for both tools), is_udp
CASES = [
    ("tcp-1",    [],                              False),
    ("tcp-P4",   ["-P", "4"],                     False),
    ("tcp-R",    ["-R"],                          False),
    ("udp-1460", ["-u", "-b", "0", "-l", "1460"], True),
]
if os.environ["BENCH_CASES"]:
    wanted = os.environ["BENCH_CASES"].split(",")
    unknown = [w for w in wanted if w not in [c[0] for c in CASES]]
    if unknown:
        sys.exit(f"compare.sh: error: unknown case(s) in BENCH_CASES: {', '.join(unknown)}")
    CASES = [c for c in CASES if c[0] in wanted]

def server_cmd(tool, port):
    if tool == "iperf3":
        return [IPERF3, "-s", "-p", str(port), "-1"]
    return [FLOWLAB, "serve", "-p", str(port), "-1"]

def client_cmd(tool, port, flags):
    if tool == "iperf3":
        return [IPERF3, "-c", HOST, "-p", str(port), "-t", str(T), "-J"] + flags
    return [FLOWLAB, "test", HOST, "-p", str(port), "-t", str(T), "-J"] + flags

# ---- process handling -------------------------------------------------------------
live = []  # Popen objects not reaped yet

_libc = ctypes.CDLL(None, use_errno=True)
def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

def start(cmd, out):
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         preexec_fn=_die_with_parent)
    live.append(p)
    return p

def reap(p, timeout):
    """Wait for p to exit (at most timeout s, then SIGKILL); return (exit code, cpu s)."""
    deadline = time.monotonic() + timeout
    killed = False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        if time.monotonic() > deadline and not killed:
            p.kill()
            killed = True
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)  # so Popen never waits on it again
    live.remove(p)
    return (None if killed else p.returncode), ru.ru_utime + ru.ru_stime

def kill_all():
    for p in list(live):
        try:
            p.kill()
            os.waitpid(p.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        p.returncode = -9
        live.remove(p)

def on_term(signum, frame):
    raise SystemExit(128 + signum)
signal.signal(signal.SIGTERM, on_term)

def listening(port):
    """True if some socket LISTENs on TCP port (read from /proc; no probe connection,
    which a one-off server would take for its one test)."""
    want = ":%04X" % port
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    parts = line.split()
                    if parts[1].endswith(want) and parts[3] == "0A":
                        return True
        except FileNotFoundError:
            pass
    return False

class RunError(Exception):
    pass

# ---- one measurement ---------------------------------------------------------------
def parse(tool, doc, udp):
    """Return (receiver bytes, receiver bits/s, loss % or None) from a client -J document."""
    if tool == "iperf3":
        if doc.get("error"):
            raise RunError("iperf3 reported: %s" % doc["error"])
        r = doc["end"]["sum_received"]
        loss = r.get("lost_percent") if udp else None
        if udp and loss is None:
            loss = doc["end"]["sum"]["lost_percent"]
        return r["bytes"], r["bits_per_second"], loss
    sums = doc["end"]["sums"]
    if not sums:
        raise RunError("flowlab: end.sums is empty")
    nbytes = sum(s["receiver"]["bytes"] for s in sums)
    bps = sum(s["receiver"]["bits_per_second"] for s in sums)
    loss = None
    if udp:
        lost = sum(s["receiver"]["udp"]["lost"] for s in sums)
        expected = sum(s["receiver"]["udp"]["expected"] for s in sums)
        loss = (100.0 * lost / expected) if len(sums) > 1 and expected else sums[0]["receiver"]["udp"]["lost_percent"]
    return nbytes, bps, loss

def run_once(tool, case, flags, udp):
    port = PORTS[tool]
    if listening(port):
        raise RunError("port %d is already in use (set BENCH_PORT_%s)" % (port, tool.upper()))
    with tempfile.TemporaryFile("w+") as slog, tempfile.TemporaryFile("w+") as cout:
        srv = start(server_cmd(tool, port), slog)
        deadline = time.monotonic() + 10
        while not listening(port):
            if srv.poll() is not None or time.monotonic() > deadline:
                slog.seek(0)
                raise RunError("%s server did not start listening on %d:\n%s" % (tool, port, slog.read()))
            time.sleep(0.02)
        cli = start(client_cmd(tool, port, flags), cout)
        c_rc, c_cpu = reap(cli, T + 60)
        s_rc, s_cpu = reap(srv, 15)
        cout.seek(0); out = cout.read()
        slog.seek(0); slog_text = slog.read()
        if c_rc != 0:
            raise RunError("%s client exited with %s:\n%s\n--- server log ---\n%s"
                           % (tool, "timeout" if c_rc is None else c_rc, out[-3000:], slog_text[-2000:]))
        if s_rc is None:
            print("# warning: %s server did not exit after its one test; killed" % tool, file=sys.stderr)
        try:
            doc = json.loads(out)
        except ValueError as e:
            raise RunError("%s client printed no valid JSON (%s):\n%s" % (tool, e, out[-3000:]))
    nbytes, bps, loss = parse(tool, doc, udp)
    if nbytes <= 0:
        raise RunError("%s: receiver counted 0 bytes" % tool)
    gb = nbytes / 1e9
    return {"gbps": bps / 1e9, "gb": gb, "cpu_c": c_cpu, "cpu_s": s_cpu,
            "cpu_per_gb": (c_cpu + s_cpu) / gb, "loss": loss}

# ---- main --------------------------------------------------------------------------
def fmt(x, spec):
    return "-" if x is None else format(x, spec)

def main():
    results = {(c[0], t): [] for c in CASES for t in PORTS}
    print("# per run: case tool run  Gbit/s  GB-received  cpu-client s  cpu-server s  CPU s/GB  [loss %]")
    for r in range(REPEAT):
        # alternate which tool goes first, so neither always runs on a "warmer" machine
        order = ["iperf3", "flowlab"] if r % 2 == 0 else ["flowlab", "iperf3"]
        for name, flags, udp in CASES:
            for tool in order:
                m = run_once(tool, name, flags, udp)
                results[(name, tool)].append(m)
                print(("  %-9s %-7s %d  %8.2f  %8.2f  %7.2f  %7.2f  %8.3f  %s"
                       % (name, tool, r + 1, m["gbps"], m["gb"], m["cpu_c"], m["cpu_s"],
                          m["cpu_per_gb"], fmt(m["loss"], ".3f") if udp else "")).rstrip(),
                      flush=True)
                time.sleep(0.5)

    med = lambda xs: statistics.median(xs) if xs and None not in xs else None
    ratio = lambda a, b: (a / b) if a is not None and b else None
    hdr = ["case", "iperf3 Gbit/s", "flowlab Gbit/s", "ratio",
           "iperf3 CPU s/GB", "flowlab CPU s/GB", "ratio", "iperf3 loss %", "flowlab loss %"]
    rows = []
    for name, flags, udp in CASES:
        i, f = results[(name, "iperf3")], results[(name, "flowlab")]
        ig, fg = med([m["gbps"] for m in i]), med([m["gbps"] for m in f])
        ic, fc = med([m["cpu_per_gb"] for m in i]), med([m["cpu_per_gb"] for m in f])
        il = med([m["loss"] for m in i]) if udp else None
        fl = med([m["loss"] for m in f]) if udp else None
        rows.append([name, fmt(ig, ".2f"), fmt(fg, ".2f"), fmt(ratio(fg, ig), ".2f"),
                     fmt(ic, ".3f"), fmt(fc, ".3f"), fmt(ratio(fc, ic), ".2f"),
                     fmt(il, ".3f"), fmt(fl, ".3f")])
    widths = [max(len(h), *(len(row[k]) for row in rows)) for k, h in enumerate(hdr)]
    line = lambda cells: "| " + " | ".join(c.rjust(w) if k else c.ljust(w)
                                             for k, (c, w) in enumerate(zip(cells, widths))) + " |"
    print()
    print("# median of %d run(s), -t %d; throughput = receiver bits/s (UDP: goodput);"
          " CPU = client+server user+sys; ratios = flowlab/iperf3" % (REPEAT, T))
    print(line(hdr))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print(line(row))

try:
    main()
except RunError as e:
    print("compare.sh: error: %s" % e, file=sys.stderr)
    sys.exit(1)
except KeyboardInterrupt:
    sys.exit(130)
finally:
    kill_all()
PY
DRIVER_PID=$!
set +e
wait "$DRIVER_PID"
rc=$?
set -e
DRIVER_PID=""
exit "$rc"
