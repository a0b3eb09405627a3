#!/usr/bin/env python3
"""flowlab ping against its peers on loopback, side by side (bench/latency.sh runs it).

Three cases, each tool run in turn (the order rotated every round), --runs rounds:

  udp-rtt   round trips at 1000 probes a second: flowlab ping (UDP), sockperf ping-pong
            (UDP, --full-rtt), iputils ping (ICMP, answered by the kernel itself)
  tcp-rtt   the same over one TCP connection: flowlab ping --tcp, sockperf ping-pong
            --tcp --full-rtt, iperf2 --bounceback (its mean: it reports no percentiles)
  tcp-tps   transactions a second back to back, one outstanding: flowlab ping --tcp -i 0,
            sockperf ping-pong --tcp --mps=max, iperf2 --bounceback --bounceback-period 0

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


def run(cmd, timeout):
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
    args = [a.flowlab, "ping", "127.0.0.1", "-p", str(a.port), "-t", str(a.seconds), "-q", "-J"]
    args += ["-i", "0" if rate is None else str(1 / rate)] + extra
    doc = json.loads(run(args, a.seconds + 30))
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
    args = ["sockperf", "pp", "-i", "127.0.0.1", "-p", str(a.port + (2 if tcp else 1))]
    args += ["-t", str(a.seconds), "--full-rtt", "--mps=" + ("max" if rate is None else str(rate))]
    if tcp:
        args.append("--tcp")
    out = re.sub(r"\x1b\[[0-9;]*m", "", run(args, a.seconds + 30))
    if rate is None:
        m = re.search(r"\[Valid Duration\] RunTime=([\d.]+) sec; SentMessages=\d+; ReceivedMessages=(\d+)", out)
        return {"tps": int(m.group(2)) / float(m.group(1))}
    p50 = re.search(r"percentile 50\.000 =\s+([\d.]+)", out)
    p99 = re.search(r"percentile 99\.000 =\s+([\d.]+)", out)
    return {"median": float(p50.group(1)), "p99": float(p99.group(1))}


def iputils_ping(a, rate):
    n = int(a.seconds * rate)
    out = run(["ping", "-n", "-c", str(n), "-i", str(1 / rate), "127.0.0.1"], a.seconds * 3 + 30)
    rtts = [float(x) * 1e3 for x in re.findall(r"time=([\d.]+) ms", out)]
    return {"median": statistics.median(rtts), "p99": pct(rtts, 0.99)}


def iperf2(a, back_to_back):
    args = ["iperf", "-c", "127.0.0.1", "-p", str(a.port + 3), "--bounceback", "-t", str(a.seconds)]
    if back_to_back:
        args += ["--bounceback-period", "0"]
    out = run(args, a.seconds + 30)
    # The whole run's line: "[  1] 0.0000-2.0139 sec … 31803=0.062/0.018/2.488/0.025 ms"
    rows = re.findall(r"0\.0000-([\d.]+) sec .*?(\d+)=([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms", out)
    secs, count, avg = float(rows[-1][0]), int(rows[-1][1]), float(rows[-1][2])
    if back_to_back:
        return {"tps": count / secs}
    return {"mean": avg * 1e3}


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
        ("sockperf tcp max", lambda a: sockperf(a, True, None)),
        ("iperf2 bounceback -period 0", lambda a: iperf2(a, True)),
    ],
}

UNITS = {"median": "µs", "p99": "µs", "mean": "µs", "full50": "µs", "full99": "µs", "tps": "1/s"}
# A peer's figure against flowlab's like one: its median against flowlab's full median
# (the peers do not take the server's time out).
LIKE = {"median": "full50", "p99": "full99", "mean": "mean", "tps": "tps"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowlab", required=True)
    ap.add_argument("--seconds", type=float, default=2)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--rate", type=int, default=1000, help="probes a second in the rtt cases")
    ap.add_argument("--port", type=int, default=5601)
    ap.add_argument("--cases", default=",".join(CASES))
    a = ap.parse_args()
    servers = [
        start([a.flowlab, "serve", "-p", str(a.port), "-B", "127.0.0.1", "--probe-rate", "1000000"]),
        start(["sockperf", "sr", "-i", "127.0.0.1", "-p", str(a.port + 1)]),
        start(["sockperf", "sr", "--tcp", "-i", "127.0.0.1", "-p", str(a.port + 2)]),
        start(["iperf", "-s", "-p", str(a.port + 3)]),
    ]
    try:
        for case in a.cases.split(","):
            tools = CASES[case]
            got = {name: [] for name, _ in tools}
            for r in range(a.runs):
                order = tools[r % len(tools):] + tools[: r % len(tools)]
                for name, f in order:
                    got[name].append(f(a))
            print(f"\n## {case}: {a.runs} runs each, alternating, {a.seconds:g} s a run"
                  + ("" if case == "tcp-tps" else f", {a.rate} probes/s"))
            print(f"{'tool':<30}{'metric':<8}{'min':>11}{'median':>11}{'max':>11}  spread  vs flowlab")
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
                    print(f"{name:<30}{metric:<8}{min(v):>11.1f}{med:>11.1f}{max(v):>11.1f}"
                          f"  {spread * 100:4.0f} %{ratio}{flag}  ({UNITS[metric]})")
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
            s.wait()


if __name__ == "__main__":
    main()
