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

The cases below each run against a server of their own, started for the run and
stopped after it (so what one attack leaves behind — slots still held, a thread stuck
on a FIFO — cannot reach the next case): with authentication (`--rsa-private-key-path`,
`--authorized-users-path`; a 2048-bit key made with openssl, user mario, password
rossi) for the auth cases, with a fragment set (`--fragments`; 64 MiB of random bytes
cut in 64 fragments) for the fetch cases. Attackers connect from 127.0.0.2 and up, the
honest client from 127.0.0.1.

  auth-undisturbed    (baseline) an authenticated `flowlab test` (--username,
                      --rsa-public-key-path, IPERF3_PASSWORD), TCP -b --rate
  fetch-undisturbed   (baseline) `flowlab fetch` of the whole set
  auth-bypass-rpm     beside an authenticated test: an unauthenticated load connection
                      (hello FLPL 01 'D' 00) reads all it is sent; a TCP echo hello
                      (FLPT 01 + size) tries one echo; in the first run an
                      unauthenticated `flowlab rpm -t 1 --interval 0.25` runs after the
                      test. Figure: the load connection's admission and bytes, the
                      echo's admission, whether rpm ran its loads
  auth-lockout        190 parameter messages a second without a token from 127.0.0.2
                      (cookie, PARAM_EXCHANGE, parameters, the answer, close) beside 20
                      authenticated tests (-t 1) in a row; figure: how many succeeded
  auth-lockout-garbage  the same with a garbage token (base64 of 256 random bytes)
  slot-exhaustion     16 (--max-tests) UDP tests from 127.0.0.2 with valid parameters
                      that never open their streams, reopened as the server drops
                      them; beside an honest TCP test, then an honest UDP test (-u -t 1,
                      -l 1400, -b --udp-rate). Figure: the UDP test's success and wall
                      time, the attacker's tests admitted
  slot-exhaustion-tcp the same with 16 TCP tests (time 60) that open their stream and
                      trickle a byte a second into it
  udp-setup-lock      the same as slot-exhaustion with 4 such UDP tests, leaving slots
                      free: what the honest UDP test waits for is the server's UDP
                      stream set-up (one test at a time, server-wide, before the fix)
  fragment-idle       64 fragment connections, 16 from each of 127.0.0.2-5, that send
                      the hello (FLFR 02, no token) and never read; beside a fetch.
                      Figure: the fetch's success and wall time, the server's threads
                      and open descriptors (/proc/PID/fd)
  auth-log-flood      authentication failures (token-less parameters) from 127.0.0.2 as
                      fast as two threads send them, beside an authenticated test;
                      figure: the server's log lines a second (against --log-rate 20),
                      counted over the whole attack (its 0.5 s lead, then at least
                      --seconds, however soon the test ends)
  fifo                a fragment replaced by a FIFO of its name after the server
                      started, requested from 127.0.0.2 (hello, manifest, G + name);
                      figure: whether the request is answered within 3 s, the server's
                      threads before, during, and 2 s after the FIFO is removed; then,
                      with the fragment restored, a fetch
  token-replay        one valid token (openssl pkeyutl, RSA-OAEP SHA-1) in the same
                      parameters three times within a second, and one dated 10 s ahead;
                      figure: how many the server accepted (CREATE_STREAMS, then
                      TEST_START once the stream is open) rather than refused; then an
                      authenticated test

Printed per case: the real test's throughput (min/median/max over the runs; a fetch's
is its bits_per_second) and its ratio to the undisturbed median of its kind (TCP, UDP,
authenticated, fetch), flagged when the runs spread by more than 25 %; how many honest
operations failed of those run; the server's highest resident memory (VmRSS), thread
count and open descriptors during the case (sampled every 50 ms); the log lines the
server wrote during the case (text log, rate-limited); for UDP, the receiver's median
loss and the forged datagrams it counted foreign (median) against those sent (median).
Then a line per case with its attack's figure, to quote.

Usage: bench/abuse.sh [--flowlab PATH] [--seconds 3] [--repeat 7] [--rate 1G]
                      [--udp-rate 500M] [--cases a,b,...] [--json FILE] [--verbose]
--cases runs a subset (adding the undisturbed baselines the chosen cases compare with);
auth-lockout and auth-lockout-garbage run once (20 tests each), slot-exhaustion,
slot-exhaustion-tcp, udp-setup-lock and fifo at most 3 times, whatever --repeat says.
Needs Linux (/proc, ss), python3 and openssl; no root.
"""

import argparse
import base64
import collections
import hashlib
import json
import os
import random
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ATTACKER = "127.0.0.2"
IP_BIND_ADDRESS_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)

# Control protocol (docs/protocol.md): state bytes.
PARAM_EXCHANGE, CREATE_STREAMS, TEST_START, ACCESS_DENIED, SERVER_ERROR = 9, 10, 1, 0xFF, 0xFE
COOKIE_ALPHABET = b"abcdefghijklmnopqrstuvwxyz234567"
FLFR_HELLO = b"FLFR\x02\x00\x00"  # fragment service: magic, version 2, no token
FRAG_SIZE = 64 << 20  # the fragment set's file, cut in 64


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, flowlab, port, extra=()):
        self.port = port
        self.lines = 0
        self.tail = collections.deque(maxlen=40)
        self.started = threading.Event()
        self.proc = subprocess.Popen(
            [flowlab, "serve", "-p", str(port), "-B", "127.0.0.1", *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._count, daemon=True).start()
        self.peak_threads = 0
        self.peak_rss = 0
        self.peak_fds = 0
        self.sampling = True
        threading.Thread(target=self._sample, daemon=True).start()

    def _count(self):
        for line in self.proc.stdout:
            self.lines += 1
            self.tail.append(line.rstrip())
            self.started.set()
        self.started.set()

    def wait_started(self, timeout=10):
        """Until the server listens on its port (/proc/net/tcp); raises if it exited."""
        want = f":{self.port:04X}"
        until = time.monotonic() + timeout
        while time.monotonic() < until and self.proc.poll() is None:
            with open("/proc/net/tcp") as f:
                # sl local_address rem_address st ...; LISTEN is 0A
                rows = [l.split() for l in list(f)[1:]]
            if any(r[1].endswith(want) and r[3] == "0A" for r in rows):
                break
            time.sleep(0.05)
        time.sleep(0.1)
        if self.proc.poll() is not None:
            time.sleep(0.2)
            raise RuntimeError("flowlab serve exited: " + " | ".join(self.tail))

    def status(self, key):
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith(key + ":"):
                        return int(line.split()[1])
        except OSError:
            pass
        return 0

    def fds(self):
        try:
            return len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        except OSError:
            return 0

    def reset_peaks(self):
        self.peak_threads = self.peak_rss = self.peak_fds = 0
        self.sample()

    def sample(self):
        """Takes the current figures into the peaks (also done every 50 ms)."""
        self.peak_threads = max(self.peak_threads, self.status("Threads"))
        self.peak_rss = max(self.peak_rss, self.status("VmRSS"))
        self.peak_fds = max(self.peak_fds, self.fds())

    def _sample(self):
        while self.sampling and self.proc.poll() is None:
            self.sample()
            time.sleep(0.05)

    def stop(self):
        self.sampling = False
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


# ---------------------------------------------------------------------------------------
# Honest operations: each returns a dict with ok, bps (or None), wall (s), err.


def last_line(text):
    lines = [l for l in (text or "").splitlines() if l.strip()]
    return lines[-1][:200] if lines else ""


def real_test(flowlab, port, seconds, rate, udp, auth=None, length=None, reverse=True):
    """A `flowlab test`: the receiver's bits/s and, for UDP, its loss % and foreign count."""
    args = [flowlab, "test", "127.0.0.1", "-p", str(port), "-t", str(seconds), "-b", rate, "-J"]
    if udp:
        args += ["-u", "-l", str(length or 1400)] + (["-R"] if reverse else [])
    env = None
    if auth:
        args += ["--username", auth["user"], "--rsa-public-key-path", auth["pub"]]
        env = dict(os.environ, IPERF3_PASSWORD=auth["password"])
    op = {"kind": "udp" if udp else "tcp", "ok": False, "bps": None, "wall": None, "err": ""}
    began = time.monotonic()
    try:
        out = subprocess.run(
            args, capture_output=True, text=True, timeout=seconds + 60,
            stdin=subprocess.DEVNULL, env=env,
        )
    except subprocess.TimeoutExpired:
        op.update(wall=time.monotonic() - began, err="timed out")
        return op
    op["wall"] = time.monotonic() - began
    if out.returncode != 0:
        op["err"] = last_line(out.stderr) or last_line(out.stdout) or f"exit {out.returncode}"
        return op
    try:
        doc = json.loads(out.stdout)
        want = "down" if udp and reverse else "up"
        for s in doc["end"]["sums"]:
            if s["direction"] == want and s.get("receiver"):
                r = s["receiver"]
                u = r.get("udp") or {}
                op.update(ok=True, bps=r["bits_per_second"], loss=u.get("lost_percent"),
                          foreign=u.get("foreign"))
                if not r.get("bytes"):
                    # Exit 0 but nothing received (seen once beside the load attack):
                    # for the user that is a failed test.
                    op.update(ok=False, err="the test ended, its receiver got 0 bytes: "
                              + (last_line(out.stderr) or "nothing on stderr"))
                return op
    except (ValueError, KeyError, TypeError) as e:
        op["err"] = f"unreadable JSON: {e}"
        return op
    op["err"] = "no receiver sum in the JSON"
    return op


def fetch(flowlab, port, tmp):
    """`flowlab fetch` of the whole set into a fresh directory (removed after)."""
    out = tempfile.mkdtemp(prefix="got-", dir=tmp)
    op = {"kind": "fetch", "ok": False, "bps": None, "wall": None, "err": ""}
    began = time.monotonic()
    try:
        r = subprocess.run(
            [flowlab, "fetch", "--from", f"127.0.0.1:{port}", "--out", out, "-J"],
            capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
        )
        op["wall"] = time.monotonic() - began
        if r.returncode != 0:
            op["err"] = last_line(r.stderr) or last_line(r.stdout) or f"exit {r.returncode}"
            return op
        doc = json.loads(r.stdout)
        op.update(ok=True, bps=doc.get("bits_per_second"))
    except subprocess.TimeoutExpired:
        op.update(wall=time.monotonic() - began, err="timed out")
    except ValueError as e:
        op["err"] = f"unreadable JSON: {e}"
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return op


# ---------------------------------------------------------------------------------------
# Raw clients.


def connect(port, src, timeout=3):
    """A TCP connection from `src` (its port chosen at connect, so TIME_WAIT from earlier
    floods never runs the address out of ports)."""
    s = socket.socket()
    try:
        s.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    except OSError:
        pass
    s.settimeout(timeout)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    return s


def recv_exact(s, n):
    """`n` bytes, or None if the peer closed or the socket's timeout passed first."""
    buf = b""
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except OSError:  # timeouts included
            return None
        if not chunk:
            return None
        buf += chunk
    return buf


def new_cookie():
    return bytes(COOKIE_ALPHABET[b % 32] for b in os.urandom(36)) + b"\0"


def frame(obj):
    body = json.dumps(obj).encode()
    return len(body).to_bytes(4, "big") + body


def read_admission(s):
    """The admission byte of the fragment service, echo and load hellos: 'W', 'D',
    'B: message', 'closed' (nothing came, or the peer closed)."""
    b = recv_exact(s, 1)
    if b is None:
        return "closed"
    if b == b"B":
        n = recv_exact(s, 2)
        msg = recv_exact(s, int.from_bytes(n, "big")) if n else None
        return "B: " + (msg or b"").decode(errors="replace")
    if b in (b"W", b"D"):
        return b.decode()
    return f"byte 0x{b[0]:02x}"


def open_test(port, src, params, reply_timeout=3):
    """A control connection that sends a cookie and `params`. Returns (socket or None,
    cookie, answer): 'create' (CREATE_STREAMS), 'error N' (SERVER_ERROR, iperf3 code N),
    'denied' (ACCESS_DENIED), 'hello' (a flowlab hello), 'pending' (no answer yet),
    'closed', or 'state N'."""
    ck = new_cookie()
    try:
        s = connect(port, src)
    except OSError:
        return None, ck, "closed"
    try:
        s.sendall(ck)
        b = recv_exact(s, 1)
        if b is None:
            return s, ck, "closed"
        if b[0] != PARAM_EXCHANGE:
            return s, ck, f"state {b[0]}"
        s.sendall(frame(params))
        s.settimeout(reply_timeout)
        try:
            b = s.recv(1)
        except socket.timeout:
            return s, ck, "pending"
        s.settimeout(3)
        if not b:
            return s, ck, "closed"
        if b[0] == CREATE_STREAMS:
            return s, ck, "create"
        if b[0] == SERVER_ERROR:
            e = recv_exact(s, 8)
            return s, ck, f"error {int.from_bytes(e[:4], 'big', signed=True)}" if e else "error"
        if b[0] == ACCESS_DENIED:
            return s, ck, "denied"
        if b[0] == 100:
            return s, ck, "hello"
        return s, ck, f"state {b[0]}"
    except OSError:
        return s, ck, "closed"


def exchange(port, src, params, reply_timeout=3):
    """One parameter message and its answer; the connection closed after."""
    s, _, answer = open_test(port, src, params, reply_timeout)
    if s:
        s.close()
    return answer


TCP_PARAMS = {"tcp": True, "time": 1, "parallel": 1, "len": 131072}


# ---------------------------------------------------------------------------------------
# The first attacks (main server): fn(port, stop, sent).


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
    u.close()


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
    u.close()
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
    if client is None:
        return
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
    u.close()
    sent.append(n)


def old_attack(fn):
    """One of the first attacks, in the new cases' shape: fn(ctx, stop, fig)."""
    def run(ctx, stop, fig):
        sent = []
        fn(ctx.port, stop, sent)
        if sent:
            fig["sent"] = sent[0]
    return run


# ---------------------------------------------------------------------------------------
# The new attacks: fn(ctx, stop, fig), fig a dict of what the attacker got.


def echo_check(port, src):
    """A TCP echo hello (FLPT 01 + size 64) and, when welcomed, one echo."""
    try:
        s = connect(port, src)
    except OSError:
        return "no connection"
    try:
        s.sendall(b"FLPT\x01" + (64).to_bytes(4, "big"))
        adm = read_admission(s)
        if adm == "W":
            msg = b"x" * 64
            s.sendall(msg)
            adm = "W, echoed" if recv_exact(s, 64) == msg else "W, no echo"
        return adm
    except OSError:
        return "closed"
    finally:
        s.close()


def load_bypass(ctx, stop, fig):
    """An unauthenticated download load connection that reads all it gets; an echo."""
    fig["echo"] = echo_check(ctx.port, ATTACKER)
    fig["load"], fig["load_bytes"], fig["load_secs"] = "no connection", 0, 0.0
    try:
        s = connect(ctx.port, ATTACKER)
    except OSError:
        return
    try:
        s.sendall(b"FLPL\x01D\x00")  # magic, version 1, download, default congestion
        fig["load"] = read_admission(s)
        began = time.monotonic()
        n = 0
        if fig["load"] == "W":
            s.settimeout(0.2)
            buf = bytearray(1 << 20)
            while not stop.is_set():
                try:
                    k = s.recv_into(buf)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if k == 0:
                    break
                n += k
        fig["load_bytes"], fig["load_secs"] = n, time.monotonic() - began
    except OSError:
        pass
    finally:
        s.close()


def rpm_check(ctx, fig):
    """In the case's first run: an unauthenticated `flowlab rpm`, briefly."""
    if ctx.rep != 0:
        return
    try:
        r = subprocess.run(
            [ctx.flowlab, "rpm", "127.0.0.1", "-p", str(ctx.port), "-t", "1",
             "--interval", "0.25", "-J"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        fig["rpm"] = "timed out"
        return
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("directions"):
        dirs = ", ".join(
            f"{d.get('direction')} {(d.get('goodput_bps') or 0) / 1e9:.2f} Gbit/s"
            for d in doc["directions"]
        )
        fig["rpm"] = f"ran its loads: {dirs}" + (f" (error: {doc['error']})" if doc.get("error") else "")
    else:
        why = (doc or {}).get("error") if isinstance(doc, dict) else None
        fig["rpm"] = "refused: " + (why or last_line(r.stderr) or last_line(r.stdout) or f"exit {r.returncode}")


def param_flood(rate, threads, token):
    """Parameter messages from 127.0.0.2 at `rate` a second (None: as fast as `threads`
    threads go), without a token or (token='garbage') with base64 of 256 random bytes."""
    def attack(ctx, stop, fig):
        answers = collections.Counter()
        lock = threading.Lock()

        def worker():
            period = threads / rate if rate else 0
            next_at = time.monotonic()
            while not stop.is_set():
                params = dict(TCP_PARAMS)
                if token == "garbage":
                    params["authtoken"] = base64.b64encode(os.urandom(256)).decode()
                answer = exchange(ctx.port, ATTACKER, params, reply_timeout=2)
                with lock:
                    answers[answer] += 1
                if period:
                    next_at += period
                    pause = next_at - time.monotonic()
                    if pause > 0:
                        stop.wait(pause)
                    elif pause < -1:
                        next_at = time.monotonic()  # fell behind: no catch-up burst

        began = time.monotonic()
        ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        fig["secs"] = time.monotonic() - began
        fig["answers"] = dict(answers)
        fig["sent"] = sum(answers.values())
    return attack


def slot_holders(udp, count=16):
    """`count` tests from 127.0.0.2 that take a slot each and hold it: UDP tests that never
    open their streams, or TCP tests (time 60) that open their stream and trickle a byte
    a second into it; each reopened when the server drops it."""
    if udp:
        params = {"udp": True, "time": 10, "parallel": 1, "len": 1400, "bandwidth": 1000000}
    else:
        params = {"tcp": True, "time": 60, "parallel": 1, "len": 131072}

    def attack(ctx, stop, fig):
        st = collections.Counter()
        lock = threading.Lock()

        def worker():
            while not stop.is_set():
                s, ck, answer = open_test(ctx.port, ATTACKER, params, reply_timeout=0.5)
                if answer not in ("create", "pending"):
                    with lock:
                        st["refused " + answer] += 1
                    if s:
                        s.close()
                    stop.wait(0.2)
                    continue
                with lock:
                    st["admitted"] += 1
                    st["held"] += 1
                    st["peak held"] = max(st["peak held"], st["held"])
                data = None
                try:
                    got_create = answer == "create"
                    s.settimeout(0.2)
                    trickled = time.monotonic()
                    while not stop.is_set():
                        if got_create and not udp and data is None:
                            data = connect(ctx.port, ATTACKER)
                            data.sendall(ck)
                        try:
                            b = s.recv(64)
                            if b == b"":
                                with lock:
                                    st["dropped by the server"] += 1
                                break
                            got_create = got_create or CREATE_STREAMS in b
                        except socket.timeout:
                            pass
                        if data is not None and time.monotonic() - trickled >= 1:
                            data.send(b"x")
                            trickled = time.monotonic()
                except OSError:
                    with lock:
                        st["dropped by the server"] += 1
                finally:
                    with lock:
                        st["held"] -= 1
                    s.close()
                    if data is not None:
                        data.close()

        ts = [threading.Thread(target=worker, daemon=True) for _ in range(count)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        st.pop("held", None)
        fig.update(st)
    return attack


def fragment_idle(ctx, stop, fig):
    """16 fragment connections from each of 127.0.0.2-5: the hello, then nothing read."""
    sources = [f"127.0.0.{i}" for i in range(2, 6)]
    conns = {}  # fd -> (socket, source)
    st = collections.Counter()
    peeked = False
    began = time.monotonic()
    while not stop.is_set():
        per = collections.Counter(src for _, src in conns.values())
        for src in sources:
            for _ in range(16 - per[src]):
                try:
                    s = connect(ctx.port, src, timeout=1)
                    s.sendall(FLFR_HELLO)
                    s.setblocking(False)
                except OSError:
                    st["connect failed"] += 1
                    continue
                conns[s.fileno()] = (s, src)
                st["opened"] += 1
        st["peak held"] = max(st["peak held"], len(conns))
        # Closed by the server? Asked without reading (POLLRDHUP), then reopened.
        p = select.poll()
        for fd in conns:
            p.register(fd, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
        for fd, _ in p.poll(0):
            s, _ = conns.pop(fd)
            s.close()
            st["closed by the server"] += 1
        if not peeked and time.monotonic() - began > 0.5:
            # What the server answered, peeked (the bytes stay unread).
            peeked = True
            for s, _ in conns.values():
                try:
                    b = s.recv(1, socket.MSG_PEEK)
                    st["answered " + b.decode(errors="replace")] += 1
                except (BlockingIOError, OSError):
                    st["no answer yet"] += 1
        stop.wait(0.2)
    for s, _ in conns.values():
        s.close()
    fig.update(st)


def fifo_attack(ctx, stop, fig):
    """A fragment replaced by a FIFO, requested; then the FIFO removed, the fragment back."""
    frags = ctx.frags
    name = frags["names"][len(frags["names"]) // 2]
    path = os.path.join(frags["dir"], name)
    aside = os.path.join(frags["dir"], "." + name + ".aside")
    fig["threads_before"] = ctx.server.status("Threads")
    os.rename(path, aside)
    try:
        os.mkfifo(path)
        fig["answer"], fig["answer_secs"] = "no connection", None
        try:
            s = connect(ctx.port, ATTACKER)
        except OSError:
            s = None
        if s:
            try:
                s.sendall(FLFR_HELLO)
                adm = read_admission(s)
                n = recv_exact(s, 4) if adm == "W" else None
                manifest = recv_exact(s, int.from_bytes(n, "big")) if n else None
                if manifest is None:
                    fig["answer"] = f"not admitted ({adm})"
                else:
                    raw = name.encode()
                    s.sendall(b"G" + len(raw).to_bytes(2, "big") + raw)
                    asked = time.monotonic()
                    s.settimeout(3)
                    tag = recv_exact(s, 1)
                    fig["answer_secs"] = time.monotonic() - asked
                    if tag is None:
                        fig["answer"] = "no answer within 3 s"
                        fig["answer_secs"] = None
                    elif tag == b"E":
                        ln = recv_exact(s, 2)
                        recv_exact(s, int.from_bytes(ln, "big"))
                        ln = recv_exact(s, 2)
                        msg = recv_exact(s, int.from_bytes(ln, "big")) if ln else b""
                        fig["answer"] = "refused: " + (msg or b"").decode(errors="replace")
                    else:
                        fig["answer"] = f"answered {tag!r}"
                fig["threads_during"] = ctx.server.status("Threads")
            except OSError as e:
                fig["answer"] = f"connection failed: {e}"
            finally:
                s.close()
    finally:
        if os.path.lexists(path):
            os.unlink(path)
        os.rename(aside, path)
    time.sleep(2)
    fig["threads_after"] = ctx.server.status("Threads")


def make_token(auth, unix_seconds):
    """iperf3's token: the plain text RSA-OAEP (SHA-1) encrypted with openssl, base64."""
    text = f"user: {auth['user']}\npwd:  {auth['password']}\nts:   {unix_seconds}"
    sealed = subprocess.run(
        ["openssl", "pkeyutl", "-encrypt", "-pubin", "-inkey", auth["pub"],
         "-pkeyopt", "rsa_padding_mode:oaep"],
        input=text.encode(), capture_output=True, check=True, timeout=30,
    ).stdout
    return base64.b64encode(sealed).decode()


def try_token(ctx, token):
    """Parameters with `token`; when the server goes on to CREATE_STREAMS, the stream is
    opened and TEST_START awaited, then both closed (the server ends the test)."""
    params = dict(TCP_PARAMS, authtoken=token)
    s, ck, answer = open_test(ctx.port, ATTACKER, params)
    data = None
    try:
        if answer == "create":
            data = connect(ctx.port, ATTACKER)
            data.sendall(ck)
            b = recv_exact(s, 1)
            answer = "accepted (TEST_START)" if b and b[0] == TEST_START else "accepted (CREATE_STREAMS)"
    except OSError:
        answer = "accepted (CREATE_STREAMS)"
    finally:
        if data is not None:
            data.close()
        if s:
            s.close()
    return answer


def token_replay(ctx, stop, fig):
    now = int(time.time())
    token = make_token(ctx.auth, now)
    ahead = make_token(ctx.auth, now + 10)
    began = time.monotonic()
    fig["replays"] = [try_token(ctx, token) for _ in range(3)]
    fig["replay_secs"] = time.monotonic() - began
    fig["ahead"] = try_token(ctx, ahead)


# ---------------------------------------------------------------------------------------
# Cases.


class Ctx:
    pass


def h_tcp(ctx):
    return [real_test(ctx.flowlab, ctx.port, ctx.seconds, ctx.rate, False)]


def h_udp(ctx):
    return [real_test(ctx.flowlab, ctx.port, ctx.seconds, ctx.udp_rate, True)]


def h_auth(ctx):
    op = real_test(ctx.flowlab, ctx.port, ctx.seconds, ctx.rate, False, auth=ctx.auth)
    op["kind"] = "auth"
    return [op]


def h_auth20(ctx):
    ops = []
    until = time.monotonic() + 120  # the whole series, bounded
    for _ in range(20):
        if time.monotonic() > until:
            ops.append({"kind": "auth", "ok": False, "bps": None, "wall": None,
                        "err": "not run: the series' 120 s were over"})
            continue
        op = real_test(ctx.flowlab, ctx.port, 1, ctx.rate, False, auth=ctx.auth)
        op["kind"] = "auth"
        ops.append(op)
    return ops


def h_slots(ctx):
    tcp = real_test(ctx.flowlab, ctx.port, ctx.seconds, ctx.rate, False)
    udp = real_test(ctx.flowlab, ctx.port, 1, ctx.udp_rate, True, reverse=False)
    udp["secondary"] = True
    return [tcp, udp]


def h_fetch(ctx):
    return [fetch(ctx.flowlab, ctx.port, ctx.tmp)]


class Case:
    def __init__(self, honest, attack=None, server=None, baseline="undisturbed", sync=False,
                 lead=0.5, post=None, cap=None, settle=1.5, whole=False):
        self.honest, self.attack, self.server = honest, attack, server
        self.baseline, self.sync, self.lead, self.post = baseline, sync, lead, post
        # whole: the log lines and peaks are counted over the whole attack, from its
        # start, and the attack lasts at least --seconds after its lead even when the
        # honest operation ends sooner (a refused test ends at once).
        self.cap, self.settle, self.whole = cap, settle, whole


CASES = {
    # The main server's (server=None).
    "undisturbed": Case(h_tcp),
    "idle": Case(h_tcp, old_attack(idle)),
    "handshakes": Case(h_tcp, old_attack(handshakes)),
    "udp-flood": Case(h_tcp, old_attack(udp_flood)),
    "probe-flood": Case(h_tcp, old_attack(probe_flood)),
    "udp-undisturbed": Case(h_udp, baseline="udp-undisturbed"),
    "forged": Case(h_udp, old_attack(forged), baseline="udp-undisturbed", lead=0),
    # A server of their own per run.
    "auth-undisturbed": Case(h_auth, server="auth", baseline="auth-undisturbed", settle=0.3),
    "fetch-undisturbed": Case(h_fetch, server="frags", baseline="fetch-undisturbed", settle=0.3),
    "auth-bypass-rpm": Case(h_auth, load_bypass, "auth", "auth-undisturbed", post=rpm_check,
                            settle=0.3),
    "auth-lockout": Case(h_auth20, param_flood(190, 4, None), "auth", "auth-undisturbed",
                         cap=1, lead=1.0, settle=0.3),
    "auth-lockout-garbage": Case(h_auth20, param_flood(190, 4, "garbage"), "auth",
                                 "auth-undisturbed", cap=1, lead=1.0, settle=0.3),
    "slot-exhaustion": Case(h_slots, slot_holders(True), "plain", cap=3, lead=1.0, settle=0.3),
    "slot-exhaustion-tcp": Case(h_slots, slot_holders(False), "plain", cap=3, lead=1.0,
                                settle=0.3),
    "udp-setup-lock": Case(h_slots, slot_holders(True, 4), "plain", cap=3, lead=1.0,
                           settle=0.3),
    "fragment-idle": Case(h_fetch, fragment_idle, "frags", "fetch-undisturbed", lead=1.0,
                          settle=0.3),
    "auth-log-flood": Case(h_auth, param_flood(None, 2, None), "auth", "auth-undisturbed",
                           settle=0.3, whole=True),
    "fifo": Case(h_fetch, fifo_attack, "frags", "fetch-undisturbed", sync=True, cap=3,
                 settle=0.3),
    "token-replay": Case(h_auth, token_replay, "auth", "auth-undisturbed", sync=True,
                         settle=0.3),
}


def server_args(kind, env):
    if kind == "auth":
        return ["--rsa-private-key-path", env.auth["key"],
                "--authorized-users-path", env.auth["users"]]
    if kind == "frags":
        return ["--fragments", env.frags["dir"]]
    return []


def make_auth(tmp):
    d = os.path.join(tmp, "auth")
    os.mkdir(d)
    key, pub, users = (os.path.join(d, n) for n in ("key.pem", "pub.pem", "users.csv"))
    subprocess.run(["openssl", "genrsa", "-out", key, "2048"], check=True,
                   capture_output=True, timeout=60)
    subprocess.run(["openssl", "rsa", "-in", key, "-pubout", "-out", pub], check=True,
                   capture_output=True, timeout=60)
    user, password = "mario", "rossi"
    digest = hashlib.sha256(("{" + user + "}" + password).encode()).hexdigest()
    with open(users, "w") as f:
        f.write(f"{user},{digest}\n")
    os.chmod(users, 0o600)
    return {"key": key, "pub": pub, "users": users, "user": user, "password": password}


def make_frags(flowlab, tmp, size=None, count=64):
    size = size or FRAG_SIZE
    src = os.path.join(tmp, "testdata.bin")
    with open(src, "wb") as f:
        for _ in range(size >> 20):
            f.write(os.urandom(1 << 20))
    d = os.path.join(tmp, "frags")
    subprocess.run([flowlab, "fragments", "split", src, "--count", str(count), "--out", d],
                   check=True, capture_output=True, timeout=120)
    os.unlink(src)
    with open(os.path.join(d, "manifest.json")) as f:
        names = [e["name"] for e in json.load(f)["fragments"]]
    return {"dir": d, "names": names, "size": size}


def guarded(fn, fig):
    """Runs an attack; an error in it is recorded in its figure, not raised."""
    def run(*args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 — a broken attack must not end the benchmark
            fig["attack error"] = f"{type(e).__name__}: {e}"
    return run


def honest_ops(case, ctx):
    try:
        return case.honest(ctx)
    except Exception as e:  # noqa: BLE001 — a failed honest run counts as failed
        return [{"kind": "?", "ok": False, "bps": None, "wall": None,
                 "err": f"{type(e).__name__}: {e}"}]


def run_case(name, case, env, main, rep):
    """One run of a case: its attack beside (or, sync, before) its honest operation(s)."""
    own = case.server is not None
    server = Server(env.flowlab, free_port(), server_args(case.server, env)) if own else main
    port = server.port
    rec = {"ops": [], "fig": {}}
    try:
        if own:
            server.wait_started()
        ctx = Ctx()
        ctx.__dict__.update(env.__dict__)
        ctx.port, ctx.server, ctx.rep = port, server, rep
        stop = threading.Event()
        t = None
        if own:
            server.reset_peaks()
        before, began = server.lines, time.monotonic()
        attack = guarded(case.attack, rec["fig"]) if case.attack else None
        if attack and case.sync:
            attack(ctx, stop, rec["fig"])
        elif attack:
            t = threading.Thread(target=attack, args=(ctx, stop, rec["fig"]), daemon=True)
            t.start()
            time.sleep(case.lead)
            if not case.whole:
                before, began = server.lines, time.monotonic()
                server.reset_peaks()
        elif not own:
            server.reset_peaks()
        rec["ops"] = honest_ops(case, ctx)
        if case.whole:
            stop.wait(began + case.lead + ctx.seconds - time.monotonic())
        server.sample()  # a window shorter than the sampling period still counts
        stop.set()
        if t:
            t.join(timeout=15)
            if t.is_alive():
                print(f"warning: {name}: the attack did not stop within 15 s", file=sys.stderr)
        rec["secs"] = time.monotonic() - began
        rec["lines"] = server.lines - before
        if case.post:
            guarded(case.post, rec["fig"])(ctx, rec["fig"])
        rec.update(rss=server.peak_rss, threads=server.peak_threads, fds=server.peak_fds)
        if env.verbose:
            print(f"[{name} run {rep + 1}] ops={rec['ops']} fig={rec['fig']} "
                  f"lines={rec['lines']} secs={rec['secs']:.1f} threads={rec['threads']} "
                  f"fds={rec['fds']}", file=sys.stderr)
            if own:
                for line in list(server.tail)[-5:]:
                    print(f"    server: {line}", file=sys.stderr)
    finally:
        if own:
            server.stop()
    time.sleep(case.settle)  # the server lets go of what the attack left
    return rec


# ---------------------------------------------------------------------------------------
# Report.


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def primary(recs):
    return [op for r in recs for op in r["ops"] if not op.get("secondary")]


def median_bps(recs):
    return med([op["bps"] for op in primary(recs) if op["ok"]]) or 0


def ok_count(ops):
    return f"{sum(1 for o in ops if o['ok'])}/{len(ops)}"


def gbit(bps):
    return "-" if bps is None else f"{bps / 1e9:.3f} Gbit/s"


def honest_summary(recs, base, what):
    ops = primary(recs)
    m = med([o["bps"] for o in ops if o["ok"]])
    rate = f", median {gbit(m)}" if m is not None else ""
    ratio = f", {m / base:.3f} of undisturbed" if m and base else ""
    errs = collections.Counter(o["err"] for o in ops if not o["ok"] and o["err"])
    why = f" (failed: {errs.most_common(1)[0][0]})" if errs else ""
    return f"{what} ok {ok_count(ops)}{rate}{ratio}{why}"


def runs_text(n):
    return f"{n} run" + ("s" if n != 1 else "")


def counts_text(c):
    """A tally as 'key n, key n' (empty when there is none)."""
    return ", ".join(f"{k} {v}" for k, v in sorted(c.items()))


def figs(recs, key):
    return [r["fig"].get(key) for r in recs if key in r["fig"]]


def quote(name, recs, base, a):
    """The case's line to quote: the honest operation's outcome and the attack's figure."""
    runs = len(recs)
    b = base.get(CASES[name].baseline)
    if name == "auth-undisturbed":
        return honest_summary(recs, None, f"authenticated test (-t {a.seconds})")
    if name == "fetch-undisturbed":
        walls = [o["wall"] for o in primary(recs) if o["ok"]]
        return (honest_summary(recs, None, f"fetch of the {FRAG_SIZE >> 20} MiB set") +
                f", wall median {med(walls) or 0:.2f} s; server peak threads "
                f"{max(r['threads'] for r in recs)}, fds {max(r['fds'] for r in recs)}")
    if name == "auth-bypass-rpm":
        got = [f for f in figs(recs, "load_bytes")]
        secs = figs(recs, "load_secs")
        admitted = sum(1 for x in figs(recs, "load") if x == "W")
        echo = collections.Counter(figs(recs, "echo"))
        rates = [n * 8 / s for n, s in zip(got, secs) if s]
        load_answers = collections.Counter(figs(recs, "load"))
        return (honest_summary(recs, b, f"authenticated test (-t {a.seconds})") +
                f"; unauthenticated load connection from {ATTACKER} welcomed in "
                f"{admitted}/{runs_text(runs)} (answers {dict(load_answers)}), received a median "
                f"{(med(got) or 0) / 1e9:.2f} GB in {med(secs) or 0:.1f} s "
                f"({(med(rates) or 0) / 1e9:.2f} Gbit/s); TCP echo: {dict(echo)}; "
                f"unauthenticated flowlab rpm: {'; '.join(figs(recs, 'rpm')) or 'not run'}")
    if name.startswith("auth-lockout"):
        tok = "a garbage token" if name.endswith("garbage") else "no token"
        ops = primary(recs)
        sent = sum(figs(recs, "sent"))
        secs = sum(figs(recs, "secs")) or 1
        answers = collections.Counter()
        for x in figs(recs, "answers"):
            answers.update(x)
        return (f"parameter messages with {tok} from {ATTACKER} ({sent / secs:.0f} a second, "
                f"answers {dict(answers)}) beside "
                + honest_summary(recs, b, f"{len(ops)} authenticated tests in a row (-t 1):")
                + f" ({runs_text(runs)})")
    if name.startswith("slot-exhaustion") or name == "udp-setup-lock":
        kind = {"slot-exhaustion": "16 UDP tests that never open their streams",
                "slot-exhaustion-tcp": "16 TCP tests trickling a byte a second",
                "udp-setup-lock": "4 UDP tests that never open their streams"}[name]
        udp = [o for r in recs for o in r["ops"] if o.get("secondary")]
        walls = [o["wall"] for o in udp if o["wall"] is not None]
        udp_errs = collections.Counter(o["err"] for o in udp if not o["ok"])
        st = collections.Counter()
        for r in recs:
            st.update({k: v for k, v in r["fig"].items() if k != "peak held"})
        peak = max(figs(recs, "peak held") or [0])
        admitted = st.pop("admitted", 0)
        rest = f"; {counts_text(st)}" if st else ""
        return (f"{kind} from {ATTACKER} (admitted {admitted} in {runs_text(runs)}, "
                f"at most {peak} held at once{rest}): honest TCP test "
                + honest_summary(recs, b, "").strip() +
                f"; honest UDP test (-u -t 1) ok {ok_count(udp)}, wall time (every attempt) median "
                f"{med(walls) or 0:.1f} s, max {max(walls or [0]):.1f} s"
                + (f" (failed: {udp_errs.most_common(1)[0][0]})" if udp_errs else ""))
    if name == "fragment-idle":
        walls = [o["wall"] for o in primary(recs) if o["wall"] is not None]
        st = collections.Counter()
        for r in recs:
            st.update({k: v for k, v in r["fig"].items() if k not in ("peak held",)})
        return (f"64 hello-only fragment connections from 127.0.0.2-5 (at most "
                f"{max(figs(recs, 'peak held') or [0])} held; {counts_text(st)}): honest "
                + honest_summary(recs, b, "fetch") +
                f", wall median {med(walls) or 0:.2f} s; server peak threads "
                f"{max(r['threads'] for r in recs)}, fds {max(r['fds'] for r in recs)}")
    if name == "auth-log-flood":
        per_s = [r["lines"] / r["secs"] for r in recs if r["secs"]]
        sent = [f["sent"] / f["secs"] for f in (r["fig"] for r in recs) if f.get("secs")]
        answers = collections.Counter()
        for x in figs(recs, "answers"):
            answers.update(x)
        return (f"authentication failures from {ATTACKER} as fast as 2 threads go "
                f"({med(sent) or 0:.0f} connections a second, answers {dict(answers)}; closed: beyond --handshake-rate): "
                f"the server logged a median {med(per_s) or 0:.0f} lines a second over the "
                f"attack's {med([r['secs'] for r in recs]) or 0:.1f} s "
                f"(max {max(per_s or [0]):.0f}; --log-rate 20); "
                + honest_summary(recs, b, f"authenticated test (-t {a.seconds})"))
    if name == "fifo":
        answers = collections.Counter(figs(recs, "answer"))
        secs = [x for x in figs(recs, "answer_secs") if x is not None]
        tb, td, ta = (med(figs(recs, k)) for k in ("threads_before", "threads_during",
                                                   "threads_after"))
        back = sum(1 for r in recs
                   if r["fig"].get("threads_after") == r["fig"].get("threads_before"))
        walls = [o["wall"] for o in primary(recs) if o["wall"] is not None]
        return (f"a FIFO in place of a fragment, requested from {ATTACKER}: {dict(answers)}"
                + (f" (in a median {med(secs):.3f} s)" if secs else "") +
                f"; server threads before {tb}, during {td}, 2 s after the FIFO was "
                f"removed {ta} (back to before in {back}/{runs_text(runs)}); then, restored, "
                + honest_summary(recs, b, "fetch") + f", wall median {med(walls) or 0:.2f} s")
    if name == "token-replay":
        replays = [x for xs in figs(recs, "replays") for x in xs]
        acc = sum(1 for x in replays if x.startswith("accepted"))
        ahead = figs(recs, "ahead")
        acc_ahead = sum(1 for x in ahead if x.startswith("accepted"))
        within = max(figs(recs, "replay_secs") or [0])
        return (f"one valid token sent 3 times within {within:.2f} s, {runs_text(runs)}: "
                f"{acc}/{len(replays)} accepted ({dict(collections.Counter(replays))}); a token "
                f"dated 10 s ahead: {acc_ahead}/{len(ahead)} accepted "
                f"({dict(collections.Counter(ahead))}); then "
                + honest_summary(recs, b, f"authenticated test (-t {a.seconds})"))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--flowlab", default=os.path.join(root, "target/release/flowlab"))
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--rate", default="1G")
    ap.add_argument("--udp-rate", default="500M")
    ap.add_argument("--cases", default=",".join(CASES),
                    help="comma-separated cases to run (default: all): " + ", ".join(CASES))
    ap.add_argument("--json", metavar="FILE", help="write every run's record here")
    ap.add_argument("--verbose", action="store_true", help="each run's record on stderr")
    a = ap.parse_args()
    chosen = [c.strip() for c in a.cases.split(",") if c.strip()]
    unknown = [c for c in chosen if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(CASES)}")
    # The baselines the chosen cases compare with, in the table's order.
    wanted = set(chosen) | {CASES[c].baseline for c in chosen}
    cases = [c for c in CASES if c in wanted]
    reps = {c: min(a.repeat, CASES[c].cap or a.repeat) for c in cases}

    tmp = tempfile.mkdtemp(prefix="flowlab-abuse-")
    main_server = None
    env = Ctx()
    env.flowlab, env.seconds, env.rate, env.udp_rate = a.flowlab, a.seconds, a.rate, a.udp_rate
    env.tmp, env.verbose, env.auth, env.frags = tmp, a.verbose, None, None
    records = {c: [] for c in cases}
    rss0 = hwm = None
    try:
        kinds = {CASES[c].server for c in cases}
        if "auth" in kinds:
            env.auth = make_auth(tmp)
        if "frags" in kinds:
            env.frags = make_frags(a.flowlab, tmp)
        if None in kinds:
            main_server = Server(a.flowlab, free_port())
            main_server.wait_started()
            rss0 = main_server.status("VmRSS")
        for rep in range(a.repeat):
            order = [c for c in cases if rep < reps[c]]
            random.Random(rep).shuffle(order)
            for name in order:
                records[name].append(run_case(name, CASES[name], env, main_server, rep))
        if main_server:
            hwm = main_server.status("VmHWM")
    finally:
        if main_server:
            main_server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "records": records}, f, indent=1, default=str)

    base = {c: median_bps(records[c]) for c in cases if CASES[c].baseline == c}
    print(
        f"flowlab serve under abuse: {a.repeat} runs per case, real test -t {a.seconds}: "
        f"TCP -b {a.rate}, UDP -R -l 1400 -b {a.udp_rate}"
    )
    fewer = [f"{c} {reps[c]}" for c in cases if reps[c] < a.repeat]
    if fewer:
        print("fewer runs (slow honest operations): " + ", ".join(fewer))
    if rss0 is not None:
        print(f"main server RSS at start {rss0 / 1024:.1f} MiB, highest over the whole run "
              f"(VmHWM) {(hwm or 0) / 1024:.1f} MiB; the cases from auth-undisturbed on run "
              f"against a server of their own each run")
    print(
        f"{'case':<21} {'min':>9} {'median':>9} {'max':>9}  {'ratio':>6}  {'failed':>6}  "
        f"{'peak RSS':>9}  {'threads':>7}  {'fds':>5}  {'log lines':>9}  {'loss %':>7}  "
        f"{'foreign':>9}  {'forged':>9}"
    )
    for name in cases:
        recs = records[name]
        ops = [op for r in recs for op in r["ops"]]
        prim = primary(recs)
        ok = [op for op in prim if op["ok"]]
        failed = f"{sum(1 for op in ops if not op['ok'])}/{len(ops)}"
        udp = name in ("udp-undisturbed", "forged")
        if ok:
            bps = [op["bps"] or 0 for op in ok]
            lo, md, hi = min(bps), statistics.median(bps), max(bps)
            spread = " SPREAD>25%" if md and (hi - lo) / md > 0.25 else ""
            b = base.get(CASES[name].baseline)
            ratio = f"{md / b:6.3f}" if b else f"{'-':>6}"
            row = f"{lo / 1e9:8.3f}G {md / 1e9:8.3f}G {hi / 1e9:8.3f}G  {ratio}"
        else:
            row, spread = f"{'-':>9} {'-':>9} {'-':>9}  {'-':>6}", ""
        extra = f"{'-':>7}  {'-':>9}  {'-':>9}"
        if udp and ok:
            loss = statistics.median([op.get("loss") or 0 for op in ok])
            foreign = statistics.median([op.get("foreign") or 0 for op in ok])
            sent = [r["fig"]["sent"] for r in recs if "sent" in r["fig"]]
            forged_sent = statistics.median(sent) if sent else 0
            extra = f"{loss:7.3f}  {foreign:9.0f}  {forged_sent:9.0f}"
        rss = max(r["rss"] for r in recs)
        threads = max(r["threads"] for r in recs)
        fds = max(r["fds"] for r in recs)
        lines = sum(r["lines"] for r in recs)
        print(
            f"{name:<21} {row}  {failed:>6}  {rss / 1024:7.1f}Mi  {threads:>7}  {fds:>5}  "
            f"{lines:>9}  {extra}{spread}"
        )
    if records.get("probe-flood"):
        runs = [r["fig"]["sent"] for r in records["probe-flood"] if "sent" in r["fig"]]
        if runs:
            probes = statistics.median(x[0] / x[2] for x in runs)
            answered = statistics.median(x[1] / x[2] for x in runs)
            secs = statistics.median(x[2] for x in runs)
            print(
                f"probe-flood: {probes:.0f} probes a second sent, {answered:.0f} a second answered "
                f"(medians over runs of {secs:.1f} s; the server's --probe-rate is 1000 a second "
                f"per source, the cost counted per 1500 bytes, with a burst of 4000)"
            )
    for name in cases:
        line = quote(name, records[name], base, a)
        errors = collections.Counter(r["fig"]["attack error"] for r in records[name]
                                     if "attack error" in r["fig"])
        if errors:
            line = (line or "") + f" [attack error in {sum(errors.values())} runs: " \
                f"{errors.most_common(1)[0][0]}]"
        if line:
            print(f"{name}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
