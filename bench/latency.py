#!/usr/bin/env python3
"""flowlab ping against its peers on loopback, side by side (bench/latency.sh runs it).

Three cases, each tool run in turn (the order rotated every round), --runs rounds:

  udp-rtt   round trips at 1000 probes a second: flowlab ping (UDP), sockperf ping-pong
            (UDP, --full-rtt), iputils ping (ICMP, answered by the kernel itself)
  tcp-rtt   the same over one TCP connection: flowlab ping --tcp, sockperf ping-pong
            --tcp --full-rtt, iperf2 --bounceback (its mean: it reports no percentiles)
  tcp-tps   transactions a second back to back, one outstanding: flowlab ping --tcp -i 0
            (which polls for each response for up to 200 µs before sleeping), the same with
            --spin 0 (sleeping at once, as the peers do), sockperf ping-pong --tcp
            --mps=max, iperf2 --bounceback --bounceback-period 0
  server-cpu  the server's CPU time per probe answered while 100 clients (UDP sockets on
            127.0.0.2 to 127.0.0.101, each its own source address) send 1000 probes a
            second each: flowlab serve's UDP echo and sockperf's UDP server, both driven by
            the same generator in this script (64-byte probes: flowlab's request header,
            or sockperf's ping header, padded). The server's CPU is its utime + stime
            from /proc over the run; lower is better.

For every tool and metric: min / median / max over the runs, the ratio of flowlab's
median to each peer's, and a flag on a tool whose runs spread by more than 25 % of their
median. Round trips in µs (lower is better), transactions in 1/s (higher is better).
flowlab's own round trip (`median`, `p99`) takes the server's time out; `full50`,
`full99` and `mean` are send to reply as the peers count them, and each peer's figure
is compared with flowlab's like one.
"""

import argparse
import json
import re
import signal
import statistics
import subprocess
import time


def run(cmd, timeout, a=None):
    # A client's command runs where the clients are (`flowlab net exec … h1 --` on an
    # emulated link; here on loopback).
    if a is not None:
        cmd = a.client_prefix + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr[-400:]}")
    return p.stdout + p.stderr


def start(cmd):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    if p.poll() is not None:
        raise RuntimeError(f"{' '.join(cmd)} exited at once")
    return p


def pct(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


# --- the tools: each returns {metric: value} ---------------------------------------


def flowlab_ping(a, extra, rate):
    args = [a.flowlab, "ping", a.host, "-p", str(a.port), "-t", str(a.seconds), "-q", "-J"]
    args += ["-i", "0" if rate is None else str(1 / rate)] + extra
    doc = json.loads(run(args, a.seconds + 30, a))
    s = doc["summary"]
    if rate is None:
        return {"tps": s["replies_per_second"]}
    # flowlab's own figure takes the server's time out; "full" is send to reply as the
    # peers count it (user space to user space on the server's side too).
    full = [(p["received_ns"] - p["sent_ns"]) / 1e3 for p in doc["probes"] if p["received_ns"]]
    return {
        "median": s["rtt"]["median_ms"] * 1e3,
        "p99": s["rtt"]["p99_ms"] * 1e3,
        "full50": statistics.median(full),
        "full99": pct(full, 0.99),
        "mean": statistics.fmean(full),
    }


def sockperf(a, tcp, rate):
    args = ["sockperf", "pp", "-i", a.host, "-p", str(a.port + (2 if tcp else 1))]
    args += ["-t", str(a.seconds), "--full-rtt", "--mps=" + ("max" if rate is None else str(rate))]
    if tcp:
        args.append("--tcp")
    out = re.sub(r"\x1b\[[0-9;]*m", "", run(args, a.seconds + 30, a))
    if rate is None:
        m = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)", out)
        return {"tps": int(m.group(2)) / float(m.group(1))}
    p50 = re.search(r"percentile 50\.000 =\s+([\d.]+)", out)
    p99 = re.search(r"percentile 99\.000 =\s+([\d.]+)", out)
    return {"median": float(p50.group(1)), "p99": float(p99.group(1))}


def iputils_ping(a, rate):
    n = int(a.seconds * rate)
    out = run(["ping", "-n", "-c", str(n), "-i", str(1 / rate), a.host], a.seconds * 3 + 30, a)
    rtts = [float(x) * 1e3 for x in re.findall(r"time=([\d.]+) ms", out)]
    return {"median": statistics.median(rtts), "p99": pct(rtts, 0.99)}


def iperf2(a, back_to_back):
    args = ["iperf", "-c", a.host, "-p", str(a.port + 3), "--bounceback", "-t", str(a.seconds)]
    if back_to_back:
        args += ["--bounceback-period", "0"]
    out = run(args, a.seconds + 30, a)
    # The whole run's line: "[  1] 0.0000-2.0139 sec … 31803=0.062/0.018/2.488/0.025 ms"
    rows = re.findall(r"0\.0000-([\d.]+) sec .*?(\d+)=([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    secs, count, avg = float(rows[-1][0]), int(rows[-1][1]), float(rows[-1][2])
    if back_to_back:
        return {"tps": count / secs}
    return {"mean": avg * 1e3}


def probe_load(a, server, port, message):
    """100 clients at 1000 probes/s each to `port` for the run: the server's CPU per probe
    answered (µs), the share answered, and the rate the generator reached."""
    import os
    import select
    import socket

    if a.client_prefix:
        raise SystemExit("latency.py: server-cpu runs on loopback only (its clients are this process)")

    clients = []
    for i in range(100):
        c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        c.bind((f"127.0.0.{2 + i}", 0))
        c.connect(("127.0.0.1", port))
        c.setblocking(False)
        clients.append(c)
    ep = select.epoll()
    for c in clients:
        ep.register(c.fileno(), select.EPOLLIN)
    by_fd = {c.fileno(): c for c in clients}
    tick = os.sysconf("SC_CLK_TCK")

    def cpu():
        f = open(f"/proc/{server.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / tick

    seconds = max(a.seconds, 4)
    sent = answered = 0
    cpu0, t0 = cpu(), time.monotonic()
    due = t0
    while True:
        now = time.monotonic()
        if now - t0 >= seconds:
            break
        if now >= due:
            for c in clients:
                try:
                    c.send(message)
                    sent += 1
                except OSError:
                    pass
            due += 0.001
            continue
        for fd, _ in ep.poll(max(0.0, due - now)):
            c = by_fd[fd]
            while True:
                try:
                    c.recv(2048)
                    answered += 1
                except OSError:
                    break
    elapsed = time.monotonic() - t0
    used = cpu() - cpu0
    ep.close()
    for c in clients:
        c.close()
    return {
        "cpu/probe": used / max(answered, 1) * 1e6,
        "answered": 100.0 * answered / max(sent, 1),
        "probes/s": sent / elapsed,
    }


def flowlab_probe_message():
    import struct
    m = bytearray(64)
    m[0:4] = b"FLPQ"
    m[4] = 1
    struct.pack_into(">QQQ", m, 8, 0x5EED, 1, time.time_ns())
    return bytes(m)


def sockperf_probe_message():
    import struct
    # sockperf's header: sequence number, flags (3: a ping the server answers), length.
    return struct.pack(">QHI", 1, 3, 64) + bytes(50)


CASES = {
    "udp-rtt": [
        ("flowlab ping", lambda a: flowlab_ping(a, [], a.rate)),
        ("sockperf udp", lambda a: sockperf(a, False, a.rate)),
        ("iputils ping", lambda a: iputils_ping(a, a.rate)),
    ],
    "tcp-rtt": [
        ("flowlab ping --tcp", lambda a: flowlab_ping(a, ["--tcp"], a.rate)),
        ("sockperf tcp", lambda a: sockperf(a, True, a.rate)),
        ("iperf2 bounceback", lambda a: iperf2(a, False)),
    ],
    "tcp-tps": [
        ("flowlab ping --tcp -i 0", lambda a: flowlab_ping(a, ["--tcp"], None)),
        # Like for like: the peers sleep for each response; this is flowlab doing so too.
        ("flowlab ping --tcp -i 0 --spin 0", lambda a: flowlab_ping(a, ["--tcp", "--spin", "0"], None)),
        ("sockperf tcp max", lambda a: sockperf(a, True, None)),
        ("iperf2 bounceback -period 0", lambda a: iperf2(a, True)),
    ],
    "server-cpu": [
        ("flowlab serve (UDP echo)",
         lambda a: probe_load(a, a.servers[0], a.port, flowlab_probe_message())),
        ("sockperf server (UDP)",
         lambda a: probe_load(a, a.servers[1], a.port + 1, sockperf_probe_message())),
    ],
}

UNITS = {"median": "µs", "p99": "µs", "mean": "µs", "full50": "µs", "full99": "µs", "tps": "1/s",
         "cpu/probe": "µs", "answered": "%", "probes/s": "1/s"}
# A peer's figure against flowlab's like one: its median against flowlab's full median
# (the peers do not take the server's time out).
LIKE = {"median": "full50", "p99": "full99", "mean": "mean", "tps": "tps",
        "cpu/probe": "cpu/probe", "answered": "answered", "probes/s": "probes/s"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowlab", required=True)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--rate", type=int, default=1000, help="probes a second in the rtt cases")
    ap.add_argument("--port", type=int, default=5601)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--host", default="127.0.0.1", help="the servers' address")
    ap.add_argument("--client-prefix", default="",
                    help="what runs a client where the clients are (e.g. flowlab net exec -t T h1 --)")
    ap.add_argument("--server-prefix", default="", help="the same for the servers")
    a = ap.parse_args()
    a.client_prefix = a.client_prefix.split()
    h, sp = a.host, a.server_prefix.split()
    servers = [
        start(sp + [a.flowlab, "serve", "-p", str(a.port), "-B", h, "--probe-rate", "1000000"]),
        start(sp + ["sockperf", "sr", "-i", h, "-p", str(a.port + 1)]),
        start(sp + ["sockperf", "sr", "--tcp", "-i", h, "-p", str(a.port + 2)]),
        start(sp + ["iperf", "-s", "-B", h, "-p", str(a.port + 3)]),
    ]
    a.servers = servers
    try:
        for case in a.cases.split(","):
            tools = CASES[case]
            got = {name: [] for name, _ in tools}
            for r in range(a.runs):
                order = tools[r % len(tools):] + tools[: r % len(tools)]
                for name, f in order:
                    got[name].append(f(a))
            secs = max(a.seconds, 4) if case == "server-cpu" else a.seconds
            print(f"\n## {case}: {a.runs} runs each, alternating, {secs:g} s a run"
                  + ("" if case in ("tcp-tps", "server-cpu") else f", {a.rate} probes/s"))
            print(f"{'tool':<34}{'metric':<10}{'min':>11}{'median':>11}{'max':>11}  spread  vs flowlab")
            ours = got[tools[0][0]]
            for name, _ in tools:
                for metric in got[name][0]:
                    v = [x[metric] for x in got[name]]
                    med = statistics.median(v)
                    spread = (max(v) - min(v)) / med if med else 0.0
                    flag = "  SPREAD>25%" if spread > 0.25 else ""
                    ratio = ""
                    if name != tools[0][0] and LIKE[metric] in ours[0]:
                        mine = statistics.median(x[LIKE[metric]] for x in ours)
                        ratio = f"  flowlab {LIKE[metric]}/this {mine / med:.2f}"
                    print(f"{name:<34}{metric:<10}{min(v):>11.1f}{med:>11.1f}{max(v):>11.1f}"
                          f"  {spread * 100:4.0f} %{ratio}{flag}  ({UNITS[metric]})")
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
            s.wait()


if __name__ == "__main__":
    main()
