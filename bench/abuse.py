#!/usr/bin/env python3
"""bench/abuse.py — a public `flowlab serve` under abuse, beside a real test.

One server (`flowlab serve`) on a loopback port; a real client test (`flowlab test`,
one stream, paced at --rate so that the machine's CPU is not what is measured) runs
again and again, undisturbed and under each attack in turn, alternating, REPEAT times
each. TCP (an upload) beside:

  idle        1000 idle TCP connections, 100 from each of 10 loopback addresses,
              reopened as the server closes them
  handshakes  1000 handshakes a second from one address (127.0.0.2, not the real
              client's): connect, a cookie, garbage parameters, close
  udp-flood   stray UDP datagrams (stream handshakes and garbage) to the server's port,
              as fast as one thread sends them
  probe-flood latency probes (`flowlab ping`'s requests, 64 to 1400 bytes) to the
              server's port from 127.0.0.2, as fast as one thread sends them; the
              replies that come back are counted (the server answers at most
              --probe-rate a second per source: the reflection a spoofed source gets)

and UDP (a download, -u -R -l 1400, at --udp-rate) undisturbed and beside:

  forged      a storm of forged datagrams into the running stream: from the server's
              own address and port (shared with SO_REUSEADDR, as the server's sockets
              allow; any host on the path could spoof it) to the client's stream port,
              1400 bytes each with a random sequence number, as fast as one thread
              sends them

Printed per case: the real test's throughput (min/median/max over the runs) and its
ratio to the undisturbed median of its protocol, flagged when the runs spread by more
than 25 %; the server's highest resident memory (VmRSS) and thread count during the
case (sampled every 50 ms); the log lines the server wrote during the case (text log,
rate-limited); for UDP, the receiver's median loss and the forged datagrams it counted
foreign (median) against those sent (median).

Usage: bench/abuse.sh [--flowlab PATH] [--seconds 3] [--repeat 7] [--rate 1G] [--udp-rate 500M]
Needs Linux (/proc, ss) and python3; no root.
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


def real_test(flowlab, port, seconds, rate, udp):
    """The receiver's bits/s, and for UDP its (loss %, foreign datagrams); None if it failed."""
    args = [flowlab, "test", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-b", rate, "-J"]
    if udp:
        args += ["-u", "-R", "-l", "1400"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        return None
    doc = json.loads(out.stdout)
    for s in doc["end"]["sums"]:
        if s["direction"] == ("down" if udp else "up") and s.get("receiver"):
            r = s["receiver"]
            u = r.get("udp") or {}
            return r["bits_per_second"], u.get("lost_percent"), u.get("foreign")
    return None


def idle(port, stop, sent):
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


def handshakes(port, stop, sent):
    cookie = b"abcdefghijklmnopqrstuvwxyz234567abcd\x00"
    garbage = (1000).to_bytes(4, "big") + b"{" * 1000
    next_at = time.monotonic()
    while not stop.is_set():
        try:
            c = socket.create_connection(
                ("127.0.0.1", port), timeout=1, source_address=("127.0.0.2", 0)
            )
            c.sendall(cookie + garbage)
            c.close()
        except OSError:
            pass
        next_at += 0.001
        pause = next_at - time.monotonic()
        if pause > 0:
            time.sleep(pause)


def udp_flood(port, stop, sent):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    payloads = [b"9876", (987654321).to_bytes(4, "little"), os.urandom(1400), os.urandom(16)]
    while not stop.is_set():
        for p in payloads:
            try:
                u.sendto(p, ("127.0.0.1", port))
            except OSError:
                pass


def probe_flood(port, stop, sent):
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind(("127.0.0.2", 0))
    u.setblocking(False)
    sizes = [64, 200, 1400]
    n = answered = 0
    buf = bytearray(1500)
    began = time.monotonic()
    while not stop.is_set():
        size = sizes[n % len(sizes)]
        # FLPQ, version 1, reserved, session, sequence (from 1), send time; padding.
        probe = b"FLPQ\x01\x00\x00\x00" + (7).to_bytes(8, "big") + (n + 1).to_bytes(8, "big")
        probe += time.monotonic_ns().to_bytes(8, "big") + bytes(size - 32)
        try:
            u.sendto(probe, ("127.0.0.1", port))
            n += 1
        except OSError:
            pass
        while True:
            try:
                u.recv_into(buf)
                answered += 1
            except (BlockingIOError, OSError):
                break
    time.sleep(0.2)
    while True:
        try:
            u.recv_into(buf)
            answered += 1
        except (BlockingIOError, OSError):
            break
    sent.append((n, answered, time.monotonic() - began))


def stream_port(port):
    """The client's port of the server's UDP stream socket (local PORT, connected), if any."""
    out = subprocess.run(["ss", "-Hnu"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        # Recv-Q Send-Q Local Peer (connected UDP sockets only; some ss print a state first)
        local, peer = line.split()[-2:]
        if local == f"127.0.0.1:{port}" and peer.startswith("127.0.0.1:"):
            return int(peer.rsplit(":", 1)[1])
    return None


def forged(port, stop, sent):
    client = None
    while client is None and not stop.is_set():
        client = stream_port(port)
        time.sleep(0.01)
    # Bound only once the stream is open: bound earlier, this socket (the last on the
    # port) would take the client's stream handshake from the server.
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    u.bind(("127.0.0.1", port))
    body = bytearray(os.urandom(1400))
    n = 0
    while not stop.is_set():
        body[8:16] = os.urandom(8)
        try:
            u.sendto(body, ("127.0.0.1", client))
            n += 1
        except OSError:
            pass
    sent.append(n)


ATTACKS = {
    "idle": idle,
    "handshakes": handshakes,
    "udp-flood": udp_flood,
    "probe-flood": probe_flood,
    "forged": forged,
}
UDP_CASES = {"udp-undisturbed", "forged"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--flowlab", default=os.path.join(root, "target/release/flowlab"))
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rate", default="1G")
    ap.add_argument("--udp-rate", default="500M")
    a = ap.parse_args()
    port = free_port()
    server = Server(a.flowlab, port)
    time.sleep(0.5)
    rss0 = server.status("VmRSS")
    cases = [
        "undisturbed",
        "idle",
        "handshakes",
        "udp-flood",
        "probe-flood",
        "udp-undisturbed",
        "forged",
    ]
    results = {name: [] for name in cases}
    sent = {name: [] for name in cases}
    peak = {name: (0, 0) for name in results}
    lines = {name: 0 for name in results}
    for rep in range(a.repeat):
        order = list(cases)
        random.Random(rep).shuffle(order)
        for name in order:
            stop = threading.Event()
            t = None
            if name in ATTACKS:
                t = threading.Thread(
                    target=ATTACKS[name], args=(port, stop, sent[name]), daemon=True
                )
                t.start()
                if name != "forged":  # it waits for the test's stream itself
                    time.sleep(0.5)
            before = server.lines
            server.peak_threads = 0
            server.peak_rss = 0
            udp = name in UDP_CASES
            bps = real_test(a.flowlab, port, a.seconds, a.udp_rate if udp else a.rate, udp)
            stop.set()
            if t:
                t.join(timeout=10)
            lines[name] += server.lines - before
            peak[name] = (max(peak[name][0], server.peak_rss), max(peak[name][1], server.peak_threads))
            results[name].append(bps)
            time.sleep(1.5)  # the server lets go of what the attack left
    hwm = server.status("VmHWM")
    server.stop()
    def median_bps(case):
        return statistics.median([x[0] for x in results[case] if x] or [0])

    base = {"tcp": median_bps("undisturbed"), "udp": median_bps("udp-undisturbed")}
    print(
        f"flowlab serve under abuse: {a.repeat} runs per case, real test -t {a.seconds}: "
        f"TCP -b {a.rate}, UDP -R -l 1400 -b {a.udp_rate}"
    )
    print(f"server RSS at start {rss0 / 1024:.1f} MiB, highest over the whole run (VmHWM) {hwm / 1024:.1f} MiB")
    print(
        f"{'case':<16} {'min':>9} {'median':>9} {'max':>9}  {'ratio':>6}  {'failed':>6}  "
        f"{'peak RSS':>9}  {'threads':>7}  {'log lines':>9}  {'loss %':>7}  {'foreign':>9}  {'forged':>9}"
    )
    for name, xs in results.items():
        ok = [x for x in xs if x]
        failed = len(xs) - len(ok)
        udp = name in UDP_CASES
        if ok:
            bps = [x[0] for x in ok]
            lo, med, hi = min(bps), statistics.median(bps), max(bps)
            spread = " SPREAD>25%" if lo and (hi - lo) / med > 0.25 else ""
            b = base["udp" if udp else "tcp"]
            ratio = med / b if b else 0
            row = f"{lo / 1e9:8.3f}G {med / 1e9:8.3f}G {hi / 1e9:8.3f}G  {ratio:6.3f}"
        else:
            row, spread = f"{'-':>9} {'-':>9} {'-':>9}  {'-':>6}", ""
        extra = f"{'-':>7}  {'-':>9}  {'-':>9}"
        if udp and ok:
            loss = statistics.median([x[1] or 0 for x in ok])
            foreign = statistics.median([x[2] or 0 for x in ok])
            forged_sent = statistics.median(sent[name]) if sent[name] else 0
            extra = f"{loss:7.3f}  {foreign:9.0f}  {forged_sent:9.0f}"
        rss, threads = peak[name]
        print(
            f"{name:<16} {row}  {failed:>6}  {rss / 1024:7.1f}Mi  {threads:>7}  "
            f"{lines[name]:>9}  {extra}{spread}"
        )
    if sent["probe-flood"]:
        runs = sent["probe-flood"]
        probes = statistics.median(x[0] / x[2] for x in runs)
        answered = statistics.median(x[1] / x[2] for x in runs)
        secs = statistics.median(x[2] for x in runs)
        print(
            f"probe-flood: {probes:.0f} probes a second sent, {answered:.0f} a second answered "
            f"(medians over runs of {secs:.1f} s; the server's --probe-rate is 1000 a second "
            f"per source, the cost counted per 1500 bytes, with a burst of 4000)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
