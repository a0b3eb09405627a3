#!/usr/bin/env python3
"""bench/abuse.py — a public `flowlab serve` under abuse, beside a real test.

One server (`flowlab serve -J`) on a loopback port; a real client test (`flowlab test`,
TCP, one stream, paced at --rate so that the machine's CPU is not what is measured) runs
again and again, undisturbed and under each attack in turn, alternating, REPEAT times
each:

  idle        1000 idle TCP connections, 100 from each of 10 loopback addresses,
              reopened as the server closes them
  handshakes  1000 handshakes a second: connect, a cookie, garbage parameters, close
  udp-flood   stray UDP datagrams (stream handshakes and garbage) to the server's port,
              as fast as one thread sends them

Printed per case: the real test's throughput (min/median/max over the runs) and its
ratio to the undisturbed median, flagged when the runs spread by more than 25 %; the
server's highest resident memory (VmRSS) and thread count during the case (sampled
every 50 ms);
and the log lines the server wrote during the case (text log, rate-limited).

Usage: bench/abuse.py [--flowlab PATH] [--seconds 3] [--repeat 7] [--rate 1G]
Needs Linux (/proc) and python3; no root.
"""

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, flowlab, port):
        self.lines = 0
        self.proc = subprocess.Popen(
            [flowlab, "serve", "-p", str(port), "-B", "127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._count, daemon=True).start()
        self.peak_threads = 0
        self.peak_rss = 0
        self.sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _count(self):
        for _ in self.proc.stdout:
            self.lines += 1

    def status(self, key):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def _sample(self):
        while self.sampling and self.proc.poll() is None:
            self.peak_threads = max(self.peak_threads, self.status("Threads"))
            self.peak_rss = max(self.peak_rss, self.status("VmRSS"))
            time.sleep(0.05)

    def stop(self):
        self.sampling = False
        self.proc.terminate()
        self.proc.wait(timeout=10)


def real_test(flowlab, port, seconds, rate):
    out = subprocess.run(
        [flowlab, "test", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-b", rate, "-J"],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if out.returncode != 0:
        return None
    doc = json.loads(out.stdout)
    for s in doc["end"]["sums"]:
        if s["direction"] == "up" and s.get("receiver"):
            return s["receiver"]["bits_per_second"]
    return None


def idle(port, stop):
    conns = []
    sources = [f"127.0.0.{i}" for i in range(2, 12)]
    while not stop.is_set():
        conns = [c for c in conns if c.fileno() != -1]
        while len(conns) < 1000 and not stop.is_set():
            c = socket.socket()
            c.bind((sources[len(conns) % len(sources)], 0))
            c.setblocking(False)
            try:
                c.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            except OSError:
                c.close()
                break
            conns.append(c)
        # Drop the ones the server closed; they are reopened on the next pass.
        alive = []
        for c in conns:
            try:
                if c.recv(1) == b"":
                    c.close()
                    continue
            except BlockingIOError:
                pass
            except OSError:
                c.close()
                continue
            alive.append(c)
        conns = alive
        time.sleep(0.1)
    for c in conns:
        c.close()


def handshakes(port, stop):
    cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\x00"
    garbage = (1000).to_bytes(4, "big") + b"{" * 1000
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=1)
            c.sendall(cookie + garbage)
            c.close()
        except OSError:
            pass
        next_at += 0.001
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def udp_flood(port, stop):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payloads = [b"9876", (987654321).to_bytes(4, "little"), os.urandom(1400), os.urandom(16)]
    while not stop.is_set():
        for p in payloads:
            try:
                u.sendto(p, ("127.0.0.1", port))
            except OSError:
                pass


ATTACKS = {"idle": idle, "handshakes": handshakes, "udp-flood": udp_flood}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--flowlab", default=os.path.join(root, "target/release/flowlab"))
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rate", default="1G")
    a = ap.parse_args()
    port = free_port()
    server = Server(a.flowlab, port)
    time.sleep(0.5)
    rss0 = server.status("VmRSS")
    results = {name: [] for name in ["undisturbed", *ATTACKS]}
    peak = {name: (0, 0) for name in results}
    lines = {name: 0 for name in results}
    for rep in range(a.repeat):
        order = ["undisturbed", *ATTACKS]
        random.Random(rep).shuffle(order)
        for name in order:
            stop = threading.Event()
            t = None
            if name in ATTACKS:
                t = threading.Thread(target=ATTACKS[name], args=(port, stop), daemon=True)
                t.start()
                time.sleep(0.5)
            before = server.lines
            server.peak_threads = 0
            server.peak_rss = 0
            bps = real_test(a.flowlab, port, a.seconds, a.rate)
            stop.set()
            if t:
                t.join(timeout=10)
            lines[name] += server.lines - before
            peak[name] = (max(peak[name][0], server.peak_rss), max(peak[name][1], server.peak_threads))
            results[name].append(bps)
            time.sleep(1.5)  # the server lets go of what the attack left
    hwm = server.status("VmHWM")
    server.stop()
    base = statistics.median([x for x in results["undisturbed"] if x] or [0])
    print(f"flowlab serve under abuse: {a.repeat} runs per case, real test -t {a.seconds} -b {a.rate}")
    print(f"server RSS at start {rss0 / 1024:.1f} MiB, highest over the whole run (VmHWM) {hwm / 1024:.1f} MiB")
    print(f"{'case':<12} {'min':>9} {'median':>9} {'max':>9}  {'ratio':>6}  {'failed':>6}  {'peak RSS':>9}  {'threads':>7}  {'log lines':>9}")
    for name, xs in results.items():
        ok = [x for x in xs if x]
        failed = len(xs) - len(ok)
        if ok:
            lo, med, hi = min(ok), statistics.median(ok), max(ok)
            spread = " SPREAD>25%" if lo and (hi - lo) / med > 0.25 else ""
            ratio = med / base if base else 0
            row = f"{lo / 1e9:8.3f}G {med / 1e9:8.3f}G {hi / 1e9:8.3f}G  {ratio:6.3f}"
        else:
            row, spread = f"{'-':>9} {'-':>9} {'-':>9}  {'-':>6}", ""
        rss, threads = peak[name]
        print(f"{name:<12} {row}  {failed:>6}  {rss / 1024:7.1f}Mi  {threads:>7}  {lines[name]:>9}{spread}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
