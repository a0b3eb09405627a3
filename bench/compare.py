#!/usr/bin/env python3
"""bench/compare.py — flowlab against iperf3 on loopback, the receiver matrix of issue 14.

Every case is a pair of setups that differ only in the tool under test; the two run
alternately (A B, then B A, …; with --control three, in all six orders over six runs,
so use a multiple of six runs for each to take each position equally), RUNS times each, and the case prints min / median / max
of each side, the ratio of the medians and of the minimums (flowlab ÷ iperf3), the
median retransmissions, and a flag on any side whose runs spread (max − min) by more
than 25 % of its median: bimodal runs show up as a flag, not as an average.

Pairs, for every congestion control (-C), stream count (-P) and server mode:
  both      flowlab test → flowlab serve      against  iperf3 -c → iperf3 -s
  receiver  iperf3 -c → flowlab serve         against  iperf3 -c → iperf3 -s
            (the same stock client: only the receiving server differs)
  reverse   flowlab test -R → iperf3 -s       against  iperf3 -c -R → iperf3 -s
            (the same stock server sends: only the receiving client differs)
Server modes: `one-off` (a fresh server per run: flowlab serve -1, iperf3 -s -1) and
`long` (one server per tool for the whole mode, serving every run in turn).
`pinned` runs the P=1 pairs with -A 0,1 on both tools (client on CPU 0, server on 1).
UDP: flowlab test -u -b 0 → flowlab serve against iperf3 at the same flags, -P 1…4,
with and without -A; the table shows the loss (receiver's lost ÷ expected).

With --control every case gets a third side, the second side's setup run again (iperf3
against itself, interleaved with the other two, the order rotating run by run): what the
same tool gives against itself on this host, at this host's spread, beside what flowlab
gives against it.

Each comparison gets a verdict from a one-sided Mann-Whitney U test of its two sides'
runs (scipy's, exact at these sizes): "slower" when the first side's runs are shown
slower than the second's at p < 0.05, "faster" the other way, "unresolved" otherwise; the
summary counts them, for flowlab against iperf3 and for the control. Two identical tools
come out "slower" in about one case in twenty by chance alone; the control shows how
often on this host, whose runs are not independent draws (it has slow and fast phases).
Across the cases the summary also gives the geometric mean of the median ratios and a
sign test of how many lie below 1 (one-sided: the chance of at least that many by a
coin's toss): a gap too small for any case's runs to show alone, but on the same side
in nearly every case.

Throughput is what the receiver counted (flowlab: end.sums[].receiver; iperf3:
end.sum_received), retransmissions the sender's (flowlab: end.sums[].sender; iperf3:
end.sum_sent). Each run's figures are printed as they come.

Usage: compare.py [--seconds T] [--runs N] [--cc cubic,bbr] [--streams 1,2,4,8]
                  [--modes one-off,long,pinned,udp] [--pairs both,receiver,reverse]
                  [--port P] [--control]
"""

import argparse
import ctypes
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

try:
    from scipy.stats import mannwhitneyu
except ImportError:  # checked in main(), with what to install
    mannwhitneyu = None

SPREAD_FLAG = 0.25
ALPHA = 0.05
HOST = "127.0.0.1"

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no server outlives the driver


class RunError(Exception):
    pass


def listening(port):
    """True if a socket LISTENs on TCP `port` (from /proc: a probe connection would be
    taken by a one-off server for its one test)."""
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


class Server:
    """One server process on its own port; `one_off` servers serve one test and exit."""

    def __init__(self, cmd, port):
        self.cmd, self.port = cmd, port
        self.log = tempfile.TemporaryFile("w+")
        if listening(port):
            raise RunError(f"port {port} is in use already (--port sets the first one)")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + 10
        while not listening(port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise RunError(f"`{' '.join(cmd)}` did not listen on {port}:\n{self.log.read()}")
            time.sleep(0.02)

    def finish(self, timeout):
        """Waits for a one-off server to exit (kills it after `timeout`)."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print(f"# warning: `{' '.join(self.cmd)}` did not exit after its test; killed",
                  file=sys.stderr)
            self.stop()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # A killed server's listening socket is gone once the process is reaped.

    def tail(self):
        self.log.seek(0)
        return self.log.read()[-2000:]


class Tools:
    def __init__(self, flowlab, iperf3, seconds):
        self.flowlab, self.iperf3, self.t = flowlab, iperf3, seconds

    def server(self, tool, port, one_off):
        """The server's command; the server is never pinned itself: its CPU of -A comes
        through the test's parameters (iperf3's server_affinity), as in iperf3."""
        if tool == "flowlab":
            cmd = [self.flowlab, "serve", "-p", str(port)]
        else:
            cmd = [self.iperf3, "-s", "-p", str(port)]
        if one_off:
            cmd.append("-1")
        return cmd

    def client(self, tool, port, flags):
        if tool == "flowlab":
            return [self.flowlab, "test", HOST, "-p", str(port), "-t", str(self.t), "-J"] + flags
        return [self.iperf3, "-c", HOST, "-p", str(port), "-t", str(self.t), "-J"] + flags


def figures(doc, udp):
    """(receiver Gbit/s, sender retransmissions or None, loss % or None) of a -J document."""
    end = doc.get("end") or {}
    if doc.get("error") and not end:
        raise RunError(f"the test failed: {doc['error']}")
    if "sums" in end:  # flowlab
        sums = end["sums"]
        if not sums or any(s.get("receiver") is None for s in sums):
            raise RunError("flowlab: a sum without its receiver's totals")
        gbps = sum(s["receiver"]["bits_per_second"] for s in sums) / 1e9
        retr = None
        if not udp and all(s.get("sender") and s["sender"].get("retransmits") is not None
                           for s in sums):
            retr = sum(s["sender"]["retransmits"] for s in sums)
        loss = None
        if udp:
            lost = sum(s["receiver"]["udp"]["lost"] for s in sums)
            expected = sum(s["receiver"]["udp"]["expected"] for s in sums)
            loss = 100.0 * lost / expected if expected else 0.0
        return gbps, retr, loss
    if udp:
        s = end["sum"]
        return s["bits_per_second"] * (1 - s["lost_percent"] / 100) / 1e9, None, s["lost_percent"]
    return (end["sum_received"]["bits_per_second"] / 1e9,
            end.get("sum_sent", {}).get("retransmits"), None)


def run_client(cmd, timeout):
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout, preexec_fn=_die_with_parent)
    if p.returncode != 0:
        raise RunError(f"`{' '.join(cmd)}` exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-1000:]}")
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise RunError(f"`{' '.join(cmd)}` printed no JSON ({e}):\n{p.stdout[-2000:]}")


class Side:
    """One setup of a pair: which tool's client and server, and the client's flags."""

    def __init__(self, label, client, server, flags):
        self.label, self.client_tool, self.server_tool, self.flags = label, client, server, flags
        self.gbps, self.retr, self.loss = [], [], []


def pairs(kind, cc, streams, affinity, udp):
    base = ["-P", str(streams)]
    if udp:
        base += ["-u", "-b", "0"]
    else:
        base += ["-C", cc]
    if affinity:
        base += ["-A", affinity]
    if kind == "both":
        return Side("flowlab", "flowlab", "flowlab", base), Side("iperf3", "iperf3", "iperf3", base)
    if kind == "receiver":
        return (Side("iperf3→flowlab", "iperf3", "flowlab", base),
                Side("iperf3→iperf3", "iperf3", "iperf3", base))
    if kind == "reverse":
        return (Side("flowlab -R", "flowlab", "iperf3", base + ["-R"]),
                Side("iperf3 -R", "iperf3", "iperf3", base + ["-R"]))
    raise SystemExit(f"compare.py: unknown pair {kind}")


def spread(xs):
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / m if m else 0.0


def verdict(a, b):
    """The one-sided Mann-Whitney U test of runs `a` against runs `b`: ("slower", p) when
    `a` is shown slower at p < ALPHA, ("faster", p) when shown faster, else
    ("unresolved", the smaller of the two p)."""
    slower = mannwhitneyu(a, b, alternative="less").pvalue
    faster = mannwhitneyu(a, b, alternative="greater").pvalue
    if slower < ALPHA:
        return "slower", slower
    if faster < ALPHA:
        return "faster", faster
    return "unresolved", min(slower, faster)


def mmm(xs, spec=".2f"):
    return f"{min(xs):{spec}} / {statistics.median(xs):{spec}} / {max(xs):{spec}}"


class Driver:
    def __init__(self, args):
        self.args = args
        self.tools = Tools(args.flowlab, args.iperf3, args.seconds)
        self.ports = {"flowlab": args.port, "iperf3": args.port + 1}
        self.long = {}  # tool -> Server, in the long-running mode
        self.rows = []

    def start_long(self):
        for tool, port in self.ports.items():
            self.long[tool] = Server(self.tools.server(tool, port, False), port)

    def stop_long(self):
        for s in self.long.values():
            s.stop()
        self.long = {}
        time.sleep(0.3)

    def once(self, side, udp):
        port = self.ports[side.server_tool]
        server = self.long.get(side.server_tool)
        fresh = None
        if server is None:
            fresh = Server(self.tools.server(side.server_tool, port, True), port)
        try:
            doc = run_client(self.tools.client(side.client_tool, port, side.flags),
                             self.args.seconds + 60)
        except (RunError, subprocess.TimeoutExpired) as e:
            s = fresh or server
            raise RunError(f"{e}\n--- server log ---\n{s.tail()}")
        finally:
            if fresh is not None:
                fresh.finish(15)
        return figures(doc, udp)

    def case(self, name, a, b, udp):
        c = None
        if self.args.control:
            c = Side(b.label + " again", b.client_tool, b.server_tool, b.flags)
        for i in range(self.args.runs):
            if c is None:
                order = (a, b) if i % 2 == 0 else (b, a)
            else:  # each side first, middle and last in turn, forwards and backwards
                order = [(a, b, c)[(k + i) % 3] for k in range(3)]
                if (i // 3) % 2:
                    order.reverse()
            for side in order:
                g, r, loss = self.once(side, udp)
                side.gbps.append(g)
                side.retr.append(r)
                side.loss.append(loss)
                extra = f"loss {loss:.3f} %" if udp else f"retr {r if r is not None else '-'}"
                print(f"  {name:<28} run {i + 1}  {side.label:<15} {g:8.2f} Gbit/s  {extra}",
                      flush=True)
                time.sleep(0.3)
        self.rows.append((name, a, b, udp, c))
        print(self.row_text(name, a, b, udp, c), flush=True)

    @staticmethod
    def row_text(name, a, b, udp, c):
        flags = [f"{s.label} spread {100 * spread(s.gbps):.0f} %"
                 for s in (a, b, c) if s is not None and spread(s.gbps) > SPREAD_FLAG]
        med = statistics.median(a.gbps) / statistics.median(b.gbps)
        low = min(a.gbps) / min(b.gbps) if min(b.gbps) else float("nan")
        if udp:
            extra = (f"{statistics.median(a.loss):.3f} | {statistics.median(b.loss):.3f} "
                     f"| {max(a.loss):.3f}")
        else:
            def retr(s):
                known = [r for r in s.retr if r is not None]
                return f"{statistics.median(known):g}" if known else "-"
            extra = f"{retr(a)} | {retr(b)}"
        v, p = verdict(a.gbps, b.gbps)
        control = ""
        if c is not None:
            cv, cp = verdict(c.gbps, b.gbps)
            c_low = min(c.gbps) / min(b.gbps) if min(b.gbps) else float("nan")
            control = (f" {mmm(c.gbps)} | {statistics.median(c.gbps) / statistics.median(b.gbps):.3f}"
                       f" | {c_low:.3f} | {cv} (p {cp:.3f}) |")
        return (f"| {name} | {mmm(a.gbps)} | {mmm(b.gbps)} | {med:.3f} | {low:.3f} "
                f"| {v} (p {p:.3f}) |{control} {extra} | {'; '.join(flags) or 'ok'} |")

    def summary(self):
        tcp = [r for r in self.rows if not r[3]]
        udp = [r for r in self.rows if r[3]]
        control = self.args.control
        cols = ("| iperf3 again | its median ratio | its min ratio | its verdict " if control
                else "")
        aligns = "|---|---:|---:|---" if control else ""
        if tcp:
            print("\n## TCP: receiver Gbit/s, min / median / max; ratios flowlab ÷ iperf3 "
                  "(the first side ÷ the second)\n")
            print(f"| case | flowlab side | iperf3 side | median ratio | min ratio | verdict "
                  f"{cols}| retr (median) flowlab | iperf3 | spread |")
            print(f"|---|---|---|---:|---:|---{aligns}|---:|---:|---|")
            for r in tcp:
                print(self.row_text(*r))
            self.tally(tcp)
        if udp:
            print("\n## UDP -b 0: receiver goodput Gbit/s, min / median / max; loss %\n")
            print(f"| case | flowlab | iperf3 | median ratio | min ratio | verdict {cols}"
                  "| loss median flowlab | iperf3 | flowlab's worst | spread |")
            print(f"|---|---|---|---:|---:|---{aligns}|---:|---:|---:|---|")
            for r in udp:
                print(self.row_text(*r))
            self.tally(udp)

    @staticmethod
    def tally(rows):
        """The matrix's counts: medians and minimums at or above the other side's, and the
        verdicts, for flowlab against iperf3 and, with --control, iperf3 against itself."""
        def counts(pairs):
            verdicts = [verdict(x.gbps, y.gbps)[0] for x, y in pairs]
            ratios = [statistics.median(x.gbps) / statistics.median(y.gbps)
                      for x, y in pairs if statistics.median(y.gbps) > 0]
            return (sum(statistics.median(x.gbps) >= statistics.median(y.gbps) for x, y in pairs),
                    sum(min(x.gbps) >= min(y.gbps) for x, y in pairs),
                    verdicts.count("slower"), verdicts.count("faster"), ratios)
        n = len(rows)
        lines = [("flowlab ÷ iperf3", counts([(r[1], r[2]) for r in rows]))]
        if all(r[4] is not None for r in rows):
            lines.append(("iperf3 ÷ iperf3 (control)", counts([(r[4], r[2]) for r in rows])))
        print(f"\nOf {n} cases (verdicts: one-sided Mann-Whitney U, p < {ALPHA}; by chance "
              f"alone about {ALPHA * n:.1f} cases each way for two identical tools):")
        for label, (med, low, slower, faster, ratios) in lines:
            print(f"  {label:<26} median ≥ 1 in {med}, minimum ≥ 1 in {low}; "
                  f"shown slower in {slower}, shown faster in {faster}")
        # Across the cases: the geometric mean of the median ratios, and a sign test of
        # how many lie below 1 (each case one vote: are the cases below 1 more than
        # chance would put there?).
        for label, (*_, ratios) in lines:
            if not ratios or min(ratios) <= 0:
                print(f"  {label:<26} no geometric mean: a case's median was 0")
                continue
            below, cases = sum(r < 1 for r in ratios), len(ratios)
            mean = statistics.geometric_mean(ratios)
            # One-sided: the chance of at least `below` of `cases` below 1 by a coin.
            sign = sum(math.comb(cases, k) for k in range(below, cases + 1)) / 2 ** cases
            print(f"  {label:<26} geometric mean of the median ratios {mean:.3f}; "
                  f"below 1 in {below} of {cases}, sign test p {sign:.3f}")

    def run(self):
        a = self.args
        for mode in a.modes:
            if mode == "udp":
                continue
            if mode == "long":
                self.start_long()
            try:
                for cc in a.cc:
                    for p in (a.streams if mode != "pinned" else [1]):
                        for kind in a.pairs:
                            x, y = pairs(kind, cc, p, "0,1" if mode == "pinned" else None, False)
                            self.case(f"{mode} {cc} -P {p} {kind}", x, y, False)
            finally:
                if mode == "long":
                    self.stop_long()
        if "udp" in a.modes:
            for pin in (None, "0,1"):
                for p in a.udp_streams:
                    x, y = pairs("both", None, p, pin, True)
                    self.case(f"udp -P {p}{' -A 0,1' if pin else ''}", x, y, True)
        self.summary()


def csv_list(kind):
    return lambda text: [kind(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--flowlab", required=True)
    ap.add_argument("--iperf3", required=True)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--cc", type=csv_list(str), default=["cubic", "bbr"])
    ap.add_argument("--streams", type=csv_list(int), default=[1, 2, 4, 8])
    ap.add_argument("--udp-streams", type=csv_list(int), default=[1, 2, 3, 4])
    ap.add_argument("--modes", type=csv_list(str), default=["one-off", "long", "pinned", "udp"])
    ap.add_argument("--pairs", type=csv_list(str), default=["both", "receiver", "reverse"])
    ap.add_argument("--port", type=int, default=5401)
    ap.add_argument("--control", action="store_true",
                    help="run the second side's setup a second time in every case")
    args = ap.parse_args()
    if mannwhitneyu is None:
        sys.exit("compare.py: scipy not found (apt-get install python3-scipy)")
    if args.runs < 7:
        sys.exit("compare.py: at least 7 runs each (--runs)")
    for m in args.modes:
        if m not in ("one-off", "long", "pinned", "udp"):
            sys.exit(f"compare.py: unknown mode {m} (one-off, long, pinned, udp)")
    for p in args.pairs:
        if p not in ("both", "receiver", "reverse"):
            sys.exit(f"compare.py: unknown pair {p} (both, receiver, reverse)")
    avail = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
    for cc in args.cc:
        if cc not in avail:
            sys.exit(f"compare.py: this kernel has no {cc} (it has {' '.join(avail)})")
    default_cc = open("/proc/sys/net/ipv4/tcp_congestion_control").read().strip()
    print(f"# machine:  nproc={os.cpu_count()}  kernel={platform.release()}  "
          f"cpu={cpu_model()}")
    print(f"# tcp cc:   each TCP case sets its own (-C {','.join(args.cc)}); system default "
          f"{default_cc}; UDP cases none")
    print(f"# tcp_rmem: {open('/proc/sys/net/ipv4/tcp_rmem').read().split()}  "
          f"rmem_max: {open('/proc/sys/net/core/rmem_max').read().strip()}")
    order = "rotating through the six orders of three" if args.control else "alternating"
    print(f"# runs:     {args.runs} per side, {order}, -t {args.seconds}\n")
    d = Driver(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        d.run()
    except RunError as e:
        sys.exit(f"compare.py: error: {e}")
    except KeyboardInterrupt:
        d.summary()
        sys.exit(130)
    finally:
        d.stop_long()


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    main()
