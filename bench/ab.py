#!/usr/bin/env python3
"""bench/ab.py — one A/B case: two commands run alternately (A B A B …), RUNS times each,
one figure read from each run, then min / median / max of each side, the ratio of the
medians (A/B) and the median of the per-pair ratios (pairing keeps the ratio meaningful
when the machine drifts), and a flag on any side whose runs spread (max − min) by more
than 25 % of its median: its figures are noise, not a result.

Usage: ab.py CASE METRIC 'COMMAND A' 'COMMAND B' [--runs N] [--label-a A] [--label-b B]
             [--per N]

--per N also prints A − B per unit when each command does N units of work (e.g. the
runner's overhead per trial: a study of N trials against the same N commands run bare):
the difference of the medians and the median of the paired differences, divided by N.

METRIC says what each run's figure is:
  gbps       a `flowlab test -J` document (or iperf3 -J) on stdout: the receivers'
             bits/s summed over the result's sums, in Gbit/s; or a speed-test page's
             flowlab.web/1 document of one test (bench/page-run.sh): its receiver's;
  fetch-s    a `flowlab fetch -J` document: its `seconds`;
  fetch-mbps a `flowlab fetch -J` document: its `bits_per_second`, in Mbit/s;
  check-gbps a `flowlab net check -J` document: its first path's measured throughput,
             in Gbit/s;
  check-p95  the same: its first path's RTT under load, 95th percentile, in ms;
  cpu-gbit   a `flowlab test -J` document: this end's CPU (`end.cpu.local_total`, % of
             one core) per Gbit/s of its receivers' sum;
  udp-loss   a `flowlab test -u -J` document: the receivers' lost datagrams over the
             expected ones, in % (a UDP test's loss);
  wrk-rps    wrk's output: its requests a second;
  wall-ms    the command's own wall time, in milliseconds.
Commands run in a shell; a run that fails or prints no figure stops the case with its
output.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

SPREAD_FLAG = 0.25


def figure(metric, out):
    if metric == "wrk-rps":
        return float(next(l for l in out.splitlines() if l.startswith("Requests/sec:")).split()[1])
    doc = json.loads(out) if metric != "wall-ms" else None
    if metric == "gbps":
        if doc.get("schema") == "flowlab.web/1":
            [test] = doc["tests"]
            return test["sum"]["receiver"]["bits_per_second"] / 1e9
        end = doc["end"]
        if "sums" in end:  # flowlab
            return sum(s["receiver"]["bits_per_second"] for s in end["sums"]) / 1e9
        return end["sum_received"]["bits_per_second"] / 1e9  # iperf3
    if metric == "cpu-gbit":
        gbps = sum(s["receiver"]["bits_per_second"] for s in doc["end"]["sums"]) / 1e9
        return doc["end"]["cpu"]["local_total"] / gbps
    if metric == "udp-loss":
        sums = doc["end"]["sums"]
        lost = sum(s["receiver"]["udp"]["lost"] for s in sums)
        expected = sum(s["receiver"]["udp"]["expected"] for s in sums)
        return 100.0 * lost / expected if expected else 0.0
    if metric == "fetch-s":
        return doc["seconds"]
    if metric == "fetch-mbps":
        return doc["bits_per_second"] / 1e6
    if metric == "check-gbps":
        return doc["paths"][0]["measured_bps"] / 1e9
    if metric == "check-p95":
        return doc["paths"][0]["loaded_rtt_p95_ms"]
    raise SystemExit(f"ab.py: unknown metric {metric}")


def run(metric, command):
    start = time.monotonic()
    p = subprocess.run(command, shell=True, capture_output=True, text=True)
    wall = (time.monotonic() - start) * 1000
    if p.returncode != 0:
        sys.exit(f"ab.py: `{command}` failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    if metric == "wall-ms":
        return wall
    try:
        return figure(metric, p.stdout)
    except (ValueError, KeyError, TypeError, StopIteration) as e:
        sys.exit(f"ab.py: `{command}` printed no {metric} figure ({e}):\n{p.stdout[:2000]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument(
        "metric", choices=["gbps", "cpu-gbit", "udp-loss", "fetch-s", "fetch-mbps", "check-gbps", "check-p95", "wrk-rps", "wall-ms"]
    )
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--label-a", default="A")
    ap.add_argument("--label-b", default="B")
    ap.add_argument("--per", type=int, default=0)
    args = ap.parse_args()
    if args.runs < 7:
        sys.exit("ab.py: at least 7 runs each")
    a, b = [], []
    for i in range(args.runs):
        a.append(run(args.metric, args.a))
        b.append(run(args.metric, args.b))
        print(f"  {args.case:<14} run {i + 1}  {args.label_a} {a[-1]:10.3f}  {args.label_b} {b[-1]:10.3f}  {args.metric}", flush=True)
    ratios = [x / y for x, y in zip(a, b) if y]
    pair = f"{statistics.median(ratios):.3f}" if ratios else "-"
    mb = statistics.median(b)
    of_medians = f"{statistics.median(a) / mb:.3f}" if mb else "-"
    flags = []
    for label, xs in ((args.label_a, a), (args.label_b, b)):
        m = statistics.median(xs)
        if m and (max(xs) - min(xs)) / m > SPREAD_FLAG:
            flags.append(f"{label} spread {100 * (max(xs) - min(xs)) / m:.0f} %")
    fmt = lambda xs: f"{min(xs):.3f} / {statistics.median(xs):.3f} / {max(xs):.3f}"
    print(
        f"| {args.case} | {args.metric} | {args.label_a}: {fmt(a)} | {args.label_b}: {fmt(b)} "
        f"| {of_medians} | {pair} | {'; '.join(flags) or 'ok'} |",
        flush=True,
    )
    if args.per > 0:
        diff = (statistics.median(a) - statistics.median(b)) / args.per
        paired = statistics.median(x - y for x, y in zip(a, b)) / args.per
        print(
            f"  {args.case}: A − B per unit (of {args.per}): {diff:.3f} {args.metric} "
            f"(paired: {paired:.3f})",
            flush=True,
        )


if __name__ == "__main__":
    main()
