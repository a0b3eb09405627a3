//! Moving data over one TCP stream: streaming and stop-and-wait, send and receive.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use flowlab_proto::params::Mode;
use flowlab_proto::udp::Ack;

use crate::buf::PageBuf;
use crate::buf::payload;
use crate::pacing::Pacer;
use crate::speed::{MIN_MARK, RATE_WINDOW_US, fast_enough};
use crate::stream::{DataConfig, Drain, StreamCounters, TestControl, is_timeout};
use crate::trace::Tracer;

/// The least a TCP receiver reads at a time, bytes: four times iperf3's 128 KiB block
/// (which iperf3's receiver reads by), whatever block the sender writes. One read takes
/// what a wake-up finds queued (at least twice [`MAX_MARK`]), and a receiver that copies
/// longer per read likely keeps more of the stream's kernel work on its own CPU (not
/// measured with counters): on loopback a packet that arrives while the reader is inside
/// `recvmsg` waits on the socket's backlog for the reader to process, one that arrives
/// while it sleeps is processed by the sender's CPU, the bottleneck. 512 KiB took nearly
/// all of what 1 MiB reads gained over 128 KiB ones, at half the memory of 1 MiB (`-P
/// 128`: 64 MiB); `bench/compare.sh --cc cubic --streams 1` measures it
/// (docs/lab-notes/performance.md, "Reading 512 KiB at a time").
pub(crate) const RECEIVE_BYTES: usize = 512 * 1024;

/// The buffer a TCP receiver reads into: page-aligned ([`PageBuf`]), at least
/// [`RECEIVE_BYTES`], and at least the stream's block.
pub(crate) fn receive_buffer(len: usize) -> PageBuf {
    PageBuf::zeroed(len.max(RECEIVE_BYTES))
}

/// Bytes of the length that starts each stop-and-wait message.
const MESSAGE_PREFIX: usize = 4;

/// Sends until stopped or the budget is spent.
pub(crate) fn send(
    sock: &TcpStream,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
) -> io::Result<()> {
    let (mut tracer, poll) = Tracer::for_stream(cfg, c);
    sock.set_write_timeout(Some(poll))?;
    sock.set_read_timeout(Some(poll))?;
    if cfg.rate_bps > 0 && cfg.burst_bytes == 0 {
        // Kernel pacing smooths each write into evenly spaced segments; the pacer below
        // holds the long-run average. (Bursts asked for are left as bursts.)
        let _ = crate::sock::set_max_pacing_rate(sock, cfg.rate_bps / 8);
    }
    if cfg.fq_rate_bps > 0 {
        // `--fq-rate`: the kernel's pacing alone, as asked (over -b's, as iperf3's).
        crate::sock::set_max_pacing_rate(sock, cfg.fq_rate_bps / 8)
            .map_err(|e| io::Error::other(format!("--fq-rate: {e}")))?;
    }
    // Stop-and-wait messages start with their length, so a short last one (-n not a
    // multiple of -l) is still recognised and acknowledged. Prefix and payload leave in
    // one write, and without Nagle: a message split over two writes, or a tail segment
    // held back until the previous one is acknowledged, waits for the receiver's delayed
    // ACK (40 ms on Linux) and the test would measure that timer instead of the path.
    let framed = cfg.mode == Mode::StopAndWait;
    let head = if framed { MESSAGE_PREFIX } else { 0 };
    if framed {
        sock.set_nodelay(true)?;
    }
    let mut buf = payload(head + cfg.len, cfg.repeating_payload);
    let mut file = match (&cfg.file, cfg.zerocopy && !framed) {
        (Some(f), _) => Some(FileSource::reading(std::sync::Arc::clone(f))),
        (None, true) => Some(FileSource::block(&buf)?),
        (None, false) => None,
    };
    let mut pacer = (cfg.rate_bps > 0)
        .then(|| Pacer::new(cfg.rate_bps, ctl.epoch.elapsed()).with_burst(cfg.burst_bytes));
    let mut seq = 0u64;
    let mut spent = false;
    let result = loop {
        if ctl.stop_send.load(Ordering::Acquire) {
            break Ok(());
        }
        if let Some(t) = tracer.as_mut() {
            t.tick(sock, ctl);
        }
        if let Some(p) = pacer.as_mut() {
            let wait = p.wait(ctl.epoch.elapsed());
            if !wait.is_zero() {
                std::thread::sleep(wait.min(poll));
                continue;
            }
        }
        let Some(n) = ctl.budget.take(cfg.len) else {
            spent = true;
            break Ok(());
        };
        let (sent, failed) = match file.as_mut() {
            Some(f) => f.send(sock, n, ctl, tracer.as_mut()),
            None => {
                if framed {
                    buf[..head].copy_from_slice(&(n as u32).to_be_bytes());
                }
                let (sent, failed) = write_fully(sock, &buf[..head + n], ctl, tracer.as_mut());
                (sent.saturating_sub(head), failed)
            }
        };
        c.bytes.fetch_add(sent as u64, Ordering::Relaxed);
        if let Some(p) = pacer.as_mut() {
            p.sent(sent);
        }
        if let Some(e) = failed {
            ctl.budget.give_back(n - sent);
            break Err(e);
        }
        if sent < n {
            ctl.budget.give_back(n - sent);
            break Ok(());
        }
        c.blocks.fetch_add(1, Ordering::Relaxed);
        if framed {
            seq += 1;
            match wait_ack(sock, seq, ctl) {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        }
    };
    c.end_us.store(ctl.elapsed_us().max(1), Ordering::Release);
    if let Some(t) = tracer.as_mut() {
        t.finish(sock, ctl);
    }
    if cfg.close_when_done {
        let _ = sock.shutdown(Shutdown::Write);
    } else if spent {
        // A peer that does not read to end-of-file (a stock iperf3, a flowlab server
        // before clean-close) closes its streams when TEST_END arrives and loses what it
        // has not read by then: the test's amount is at least acknowledged (in the
        // peer's receive buffer, maybe not read yet) before this stream ends and the
        // client sends TEST_END.
        await_acknowledged(sock, ctl);
    }
    result
}

/// How long [`await_acknowledged`] waits without the peer acknowledging anything more
/// before it gives up (a stalled or vanished peer; a slow path keeps acknowledging).
const ACK_STALL: Duration = Duration::from_secs(1);

/// Waits until the peer has acknowledged everything this stream sent (SIOCOUTQ empty),
/// polling every millisecond; gives up when nothing more was acknowledged for
/// [`ACK_STALL`], when the connection failed, or when the test is stopped. (iperf 3.12's
/// server reads its streams and the control connection in one loop and closes the
/// streams on TEST_END; sending TEST_END right after the last write, flowlab's client lost
/// the tail of a paced `-F` transfer to it in 5 of 25 tries on a loaded machine, and none
/// after this.)
fn await_acknowledged(sock: &TcpStream, ctl: &TestControl) {
    let mut last = (usize::MAX, std::time::Instant::now());
    while !ctl.stop_send.load(Ordering::Acquire) {
        // A reset connection keeps its queue counted forever.
        if !matches!(sock.take_error(), Ok(None)) {
            return;
        }
        match crate::sock::unacknowledged(sock) {
            Some(0) | None => return,
            Some(n) if n < last.0 => last = (n, std::time::Instant::now()),
            Some(_) if last.1.elapsed() > ACK_STALL => return,
            Some(_) => {}
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes all of `buf` unless the test is stopped meanwhile; returns the bytes written,
/// and the error that ended the stream if one did.
fn write_fully(
    mut sock: &TcpStream,
    buf: &[u8],
    ctl: &TestControl,
    tracer: Option<&mut Tracer<'_>>,
) -> (usize, Option<io::Error>) {
    send_all(sock, buf.len(), ctl, tracer, |off| sock.write(&buf[off..]))
}

/// Sends `n` bytes with `send(bytes sent so far)` until done, the peer is gone, or the
/// test is stopped; returns the bytes sent, and the error that ended the stream if one
/// did (a reset, TCP_USER_TIMEOUT's ETIMEDOUT). A send blocked by a full send buffer
/// times out every trace period (the socket's SO_SNDTIMEO, EAGAIN), so a stalled stream
/// is still sampled on time and a stop is noticed.
fn send_all(
    sock: &TcpStream,
    n: usize,
    ctl: &TestControl,
    mut tracer: Option<&mut Tracer<'_>>,
    mut send: impl FnMut(usize) -> io::Result<usize>,
) -> (usize, Option<io::Error>) {
    let mut off = 0;
    while off < n {
        match send(off) {
            Ok(0) => break,
            // Short of `n`: the send timed out after moving part of it (SO_SNDTIMEO
            // returns the partial count, not an error), so it is a blocked send too.
            Ok(k) => {
                off += k;
                if off < n {
                    if let Some(t) = tracer.as_deref_mut() {
                        t.tick(sock, ctl);
                    }
                }
            }
            // SO_SNDTIMEO's EAGAIN; ETIMEDOUT is TCP_USER_TIMEOUT ending the connection.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                if ctl.stop_send.load(Ordering::Acquire) {
                    break;
                }
                if let Some(t) = tracer.as_deref_mut() {
                    t.tick(sock, ctl);
                }
            }
            Err(e) => return (off, Some(e)),
        }
    }
    (off, None)
}

/// Reads the acknowledgement of message `seq`; false when the test was stopped first.
fn wait_ack(mut sock: &TcpStream, seq: u64, ctl: &TestControl) -> io::Result<bool> {
    let mut ack = [0u8; Ack::LEN];
    let mut got = 0;
    while got < ack.len() {
        match sock.read(&mut ack[got..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed")),
            Ok(n) => got += n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if ctl.stop_send.load(Ordering::Acquire) {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e),
        }
    }
    match Ack::decode(&ack) {
        Ok(a) if a.seq == seq => Ok(true),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad stop-and-wait acknowledgement",
        )),
    }
}

/// Receives until end-of-file, or until told to stop and drained.
pub(crate) fn receive(
    mut sock: &TcpStream,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
) -> io::Result<()> {
    let (mut tracer, poll) = Tracer::for_stream(cfg, c);
    sock.set_read_timeout(Some(poll))?;
    let stop_and_wait = cfg.mode == Mode::StopAndWait;
    if stop_and_wait {
        // Each acknowledgement leaves at once (see `send`).
        sock.set_nodelay(true)?;
    }
    let mut buf = receive_buffer(cfg.len);
    // `--skip-rx-copy`: what is read is discarded in the kernel, never copied here (a
    // file being received needs its bytes: the two are refused together upstream).
    let discard = cfg.skip_rx_copy && cfg.file.is_none();
    // Streaming only (a stop-and-wait message must be read the moment it is whole): a
    // thread pinned to a CPU polls while data flows fast (and never batches: measured
    // slower there); any other batches its wake-ups.
    let mut spin = (!stop_and_wait && crate::cpu::pinned_to_one_cpu())
        .then(|| SpinRead::new(ctl.elapsed_us()));
    let mut batch = (!stop_and_wait && spin.is_none()).then(|| WakeBatch::new(ctl.elapsed_us()));
    let mut now_us = ctl.elapsed_us();
    let mut drain = Drain::default();
    // Stop-and-wait: the 4-byte length prefix being read, and the message it announced.
    let mut prefix = [0u8; MESSAGE_PREFIX];
    let mut prefix_got = 0usize;
    let mut message: Option<usize> = None;
    let mut in_message = 0usize;
    let mut seq = 0u64;
    loop {
        if let Some(t) = tracer.as_mut() {
            t.tick(sock, ctl);
        }
        if stop_and_wait && message.is_none() {
            match sock.read(&mut prefix[prefix_got..]) {
                Ok(0) => break,
                Ok(n) => {
                    prefix_got += n;
                    if prefix_got == MESSAGE_PREFIX {
                        let len = u32::from_be_bytes(prefix) as usize;
                        if len == 0 || len > buf.len() {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "bad stop-and-wait message length",
                            ));
                        }
                        message = Some(len);
                        prefix_got = 0;
                    }
                    continue;
                }
                Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                    if drain.done(ctl, false, cfg.drain_to_eof) {
                        break;
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
                Err(e) => return Err(e),
            }
        }
        let want = match message {
            Some(len) => len - in_message,
            None => buf.len(),
        };
        let polled = spin.as_ref().is_some_and(|p| p.polls(now_us));
        let read = match (polled, discard) {
            (true, false) => crate::sock::recv_now(sock, &mut buf[..want]),
            (false, false) => sock.read(&mut buf[..want]),
            (_, true) => crate::sock::recv_discard(sock, &mut buf[..want], polled),
        };
        let got = match read {
            Ok(0) => break,
            Ok(n) => n,
            // Nothing yet (a poll), the socket's timeout, or a signal.
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        };
        now_us = ctl.elapsed_us();
        if let Some(p) = spin.as_mut() {
            p.after_read(got, polled, now_us);
            if polled && got > 0 {
                c.polled_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(b) = batch.as_mut() {
            // Told to stop: the data still coming is read as it arrives, no new mark.
            let stopping = ctl.stop_recv.load(Ordering::Acquire);
            let mark = match b.after_read(got, want, now_us) {
                _ if stopping => (b.mark > 1).then_some(1),
                m => m,
            };
            if let Some(mark) = mark {
                match apply_mark(sock, mark, poll) {
                    Ok(set) => b.applied(set),
                    Err(e) => {
                        tracing::debug!("batching the receiver's wake-ups: {e}");
                        let _ = crate::sock::set_rcvlowat(sock, 1);
                        let _ = sock.set_read_timeout(Some(poll));
                        batch = None;
                    }
                }
            }
            if stopping && batch.as_ref().is_some_and(|b| b.mark == 1) {
                batch = None;
            }
        }
        if got > 0 {
            // Counted first: these bytes were received whatever becomes of them below.
            c.bytes.fetch_add(got as u64, Ordering::Relaxed);
            c.end_us.store(now_us.max(1), Ordering::Relaxed);
            if let Some(f) = &cfg.file {
                // `-F`: what was read, to the file; a write that fails ends the stream,
                // and is said (a stream's own errors are only logged at debug level).
                // The count above is then more than the file holds, which the command
                // reports as its error (even when the first write failed).
                if let Err(e) = (&**f).write_all(&buf[..got]) {
                    tracing::warn!("-F: writing what was received: {e}");
                    return Err(e);
                }
            }
            if let Some(len) = message {
                in_message += got;
                if in_message == len {
                    in_message = 0;
                    message = None;
                    seq += 1;
                    c.blocks.fetch_add(1, Ordering::Relaxed);
                    sock.write_all(&Ack { seq }.encode())?;
                }
            } else {
                c.blocks.fetch_add(1, Ordering::Relaxed);
            }
        }
        if drain.done(ctl, got > 0, cfg.drain_to_eof) {
            break;
        }
    }
    if let Some(t) = tracer.as_mut() {
        t.finish(sock, ctl);
    }
    Ok(())
}

/// How long a pinned receiver polls past the last data, µs ([`SpinRead`]).
const SPIN_US: u64 = 50;
/// How long polling rests after a span in which it did not pay, µs.
const SPIN_REST_US: u64 = 100_000;

/// Polls a fast receiver pinned to a CPU while data flows.
///
/// On loopback the kernel's work for both ends of a connection runs on whichever CPU
/// gets to it: a packet that arrives while the reader is inside `recvmsg` is left on the
/// socket's backlog for the reader to process (and acknowledge), one that arrives while
/// it sleeps is processed by the sender's CPU, the bottleneck. A reader that sleeps
/// between reads therefore leaves the sender nearly all of it. So a receiving thread
/// pinned to one CPU (with others online, where the sender may run) whose stream carried
/// at least [`MIN_MARK`] per [`POLL_SPAN_US`] over the last [`RATE_WINDOW_US`] (about
/// 2.6 Gbit/s) keeps reading without waiting (MSG_DONTWAIT) for
/// [`SPIN_US`] past its last data, and only then sleeps in a blocking read; its CPU is
/// busy while data flows fast, as a pinned thread's CPU is meant to be. Polling that does
/// not pay — more than one spell of [`SPIN_US`] running out empty for every eight polls
/// that found data, over [`RATE_WINDOW_US`]: packets further apart than a spell — rests
/// for [`SPIN_REST_US`]. (A sender on the same CPU is not detected: there the polls
/// mostly find data too. Measured in docs/lab-notes/performance.md, issue 14: `flowlab test -R -A
/// 0,1` against `iperf3 -s`, 14 Gbit/s with batched wake-ups, 20 without, 38 polling.)
#[derive(Debug)]
struct SpinRead {
    /// Reads poll until then, µs: [`SPIN_US`] past the last data.
    until_us: u64,
    /// Polling rests until then, µs.
    rest_until_us: u64,
    /// Whether the last span's rate was fast enough to poll for.
    fast: bool,
    window_start_us: u64,
    /// This span's bytes, its polls that found data, and its spells that ran out empty.
    bytes: u64,
    hits: u32,
    misses: u32,
}

impl SpinRead {
    fn new(now_us: u64) -> Self {
        SpinRead {
            until_us: 0,
            rest_until_us: 0,
            fast: false,
            window_start_us: now_us,
            bytes: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// Whether the next read polls (`now_us`: the time of the last one).
    fn polls(&self, now_us: u64) -> bool {
        self.fast && now_us < self.until_us && now_us >= self.rest_until_us
    }

    /// Called after each read attempt: `got` bytes (0: nothing, or a timeout), whether
    /// it `polled`, at `now_us`.
    fn after_read(&mut self, got: usize, polled: bool, now_us: u64) {
        if got > 0 {
            self.bytes += got as u64;
            self.hits += u32::from(polled);
            self.until_us = now_us + SPIN_US;
        } else if polled && now_us >= self.until_us {
            self.misses += 1;
        }
        let span = now_us.saturating_sub(self.window_start_us);
        if span < RATE_WINDOW_US {
            return;
        }
        self.fast = fast_enough(self.bytes, span);
        if self.misses.saturating_mul(8) > self.hits {
            self.rest_until_us = now_us + SPIN_REST_US;
        }
        self.window_start_us = now_us;
        self.bytes = 0;
        self.hits = 0;
        self.misses = 0;
    }
}

/// What a fast stream carries in this long sets its receiver's low-water mark
/// ([`WakeBatch`]), µs (at least [`MIN_MARK`]).
const WAKE_SPAN_US: u64 = 100;
/// A stream gets a mark when it carries [`MIN_MARK`] in this long, µs (about 1 Gbit/s):
/// the longest its bytes wait for the mark before they are read and counted, half of
/// [`MARKED_TIMEOUT`], so that a stream at that rate fills its mark before its read times
/// out. Each of several streams is slower than one alone: `-P 8` on loopback under bbr
/// carries about 2 Gbit/s a stream, and its eight threads, woken for every packet, made
/// the test 0.75–0.96 as fast as iperf3's at the median (docs/lab-notes/performance.md,
/// issue 14).
const MARK_SPAN_US: u64 = 500;
// A stream at the mark's threshold fills its mark before the read it waits in times out.
const _: () = assert!(2 * MARK_SPAN_US as u128 <= MARKED_TIMEOUT.as_micros());
/// Whether `bytes` over `span_us` is a stream fast enough for a low-water mark
/// ([`WakeBatch`]): at least [`MIN_MARK`] in [`MARK_SPAN_US`] (about 1 Gbit/s).
fn carries_a_mark(bytes: u64, span_us: u64) -> bool {
    span_us > 0 && bytes.saturating_mul(MARK_SPAN_US) / span_us >= MIN_MARK as u64
}
/// The highest mark: more batches no more wake-ups away, and holds bytes longer.
const MAX_MARK: usize = 256 * 1024;
const _: () = assert!(RECEIVE_BYTES >= 2 * MAX_MARK);
/// The read timeout while a mark is set: bytes below it (the rate fell, the sender
/// paused) wait no longer than this to be read and counted. The kernel rounds a socket
/// timeout up to a scheduler tick: 1 ms at HZ=1000, 4 ms at 250 (the reference machine),
/// 10 ms at 100. (Waiting in poll(2), whose timer keeps to 1 ms, was tried: it left the
/// two ends sharing one CPU in a quarter of the runs; docs/lab-notes/performance.md.)
const MARKED_TIMEOUT: Duration = Duration::from_millis(1);

/// Batches a fast TCP receiver's wake-ups with the socket's low-water mark (SO_RCVLOWAT).
///
/// A reader asleep on its socket is woken by the CPU that queues the next packet; on
/// loopback that is the sender's CPU, the bottleneck, and each cross-CPU wake-up costs it
/// time it would spend sending. Woken for every 64 KiB packet, flowlab's receiver took
/// about a fifth more wake-ups per byte than iperf3's (whose slower loop lets more
/// queue), and the test ran 9–12 % slower (docs/lab-notes/performance.md, issue 14). So a stream
/// that measures fast asks the kernel to wake its reader once per [`WAKE_SPAN_US`] of
/// data instead (at least [`MIN_MARK`], at most [`MAX_MARK`], at most an eighth of the
/// receive buffer); while one is set, reads time out after [`MARKED_TIMEOUT`], and one
/// that comes back short — the rate fell, the sender paused — drops the mark at once, as
/// does being told to stop. Slower streams (below [`MIN_MARK`] in [`MARK_SPAN_US`],
/// about 1 Gbit/s) never get one. (A read
/// already waiting for the mark keeps its threshold until data, the end of the stream or
/// its timeout ends it: the kernel fixes it when the read starts.)
#[derive(Debug)]
struct WakeBatch {
    /// The mark in force, bytes (1: the kernel's default, none). It may be below the
    /// mark asked for (the buffer caps it), which is then asked for again each window,
    /// so that it follows the buffer as autotuning grows it.
    mark: usize,
    window_start_us: u64,
    window_bytes: u64,
}

impl WakeBatch {
    fn new(now_us: u64) -> Self {
        WakeBatch {
            mark: 1,
            window_start_us: now_us,
            window_bytes: 0,
        }
    }

    /// Called after each read attempt: `got` bytes (0 for one that timed out) of the
    /// `want` asked for, at `now_us`. Returns the mark that should be in force when it
    /// should change; the caller sets it and reports what it set with [`Self::applied`].
    fn after_read(&mut self, got: usize, want: usize, now_us: u64) -> Option<usize> {
        if self.mark > 1 && got < self.mark.min(want) {
            // Back before the mark was reached: its timeout, or the stream's end.
            self.restart(now_us);
            return Some(1);
        }
        self.window_bytes += got as u64;
        let span = now_us.saturating_sub(self.window_start_us);
        if span < RATE_WINDOW_US {
            return None;
        }
        let carried = (self.window_bytes.saturating_mul(WAKE_SPAN_US) / span) as usize;
        let target = if carries_a_mark(self.window_bytes, span) {
            carried.clamp(MIN_MARK, MAX_MARK)
        } else {
            1
        };
        self.restart(now_us);
        // Hysteresis: a rate wobbling by a few per cent is not worth a system call.
        let moved = if target == 1 || self.mark == 1 {
            target != self.mark
        } else {
            target * 4 > self.mark * 5 || target * 5 < self.mark * 4
        };
        moved.then_some(target)
    }

    /// The mark now in force.
    fn applied(&mut self, mark: usize) {
        self.mark = mark;
    }

    fn restart(&mut self, now_us: u64) {
        self.window_start_us = now_us;
        self.window_bytes = 0;
    }
}

/// Sets `mark` as the socket's low-water mark, capped at an eighth of its receive buffer,
/// with the read timeout that goes with it; returns the mark set (1 where the cap leaves
/// too little). Bytes held unread under the mark narrow the window the receiver offers,
/// by at most that eighth of the buffer (a quarter or so of the window); and a mark that
/// small never makes the kernel grow the buffer or clamp the window for it.
fn apply_mark(sock: &TcpStream, mark: usize, poll: Duration) -> io::Result<usize> {
    let cap = if mark > 1 {
        socket2::SockRef::from(sock).recv_buffer_size()? / 8
    } else {
        0
    };
    let mark = if mark > 1 && mark.min(cap) >= MIN_MARK {
        mark.min(cap)
    } else {
        1
    };
    crate::sock::set_rcvlowat(sock, mark).map_err(io::Error::other)?;
    sock.set_read_timeout(Some(if mark > 1 {
        MARKED_TIMEOUT.min(poll)
    } else {
        poll
    }))?;
    Ok(mark)
}

/// Data sent with sendfile(2), never copied from user space: `-Z`'s memory-backed file
/// holding one block, sent again and again; or `-F`'s file, read on from its start.
struct FileSource {
    file: std::sync::Arc<std::fs::File>,
    /// Where the next send starts: the file's next byte (`-F`), or `None` for the
    /// block's start each time (`-Z`).
    at: Option<u64>,
}

impl FileSource {
    /// `-Z`: one block in memory.
    fn block(block: &[u8]) -> io::Result<Self> {
        let fd = nix::sys::memfd::memfd_create(
            c"flowlab-zerocopy",
            nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
        )
        .map_err(io::Error::from)?;
        let mut file = std::fs::File::from(fd);
        file.write_all(block)?;
        Ok(FileSource {
            file: std::sync::Arc::new(file),
            at: None,
        })
    }

    /// `-F`: the file's content, once, from its start.
    fn reading(file: std::sync::Arc<std::fs::File>) -> Self {
        FileSource { file, at: Some(0) }
    }

    /// Sends the next `n` bytes (sendfile), with the same retry, stop and trace rules as
    /// [`write_fully`]; fewer when the file ends first.
    fn send(
        &mut self,
        sock: &TcpStream,
        n: usize,
        ctl: &TestControl,
        tracer: Option<&mut Tracer<'_>>,
    ) -> (usize, Option<io::Error>) {
        let start = self.at.unwrap_or(0);
        let (sent, failed) = send_all(sock, n, ctl, tracer, |off| {
            let mut at = (start + off as u64) as libc::off_t;
            nix::sys::sendfile::sendfile(sock.as_fd(), self.file.as_fd(), Some(&mut at), n - off)
                .map_err(io::Error::from)
        });
        if let Some(at) = self.at.as_mut() {
            *at += sent as u64;
        }
        (sent, failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 14): the receive buffer was a `Vec` starting 16 bytes past a page,
    /// and the kernel's copy into it ran at half speed; the send payload likewise.
    #[test]
    fn data_buffers_are_page_aligned() {
        for len in [1000, 128 * 1024, 1 << 20] {
            let r = receive_buffer(len);
            assert_eq!(r.as_ptr() as usize % crate::buf::ALIGN, 0);
            // Regression (issue 14): the receiver read 128 KiB at a time whatever the
            // block, and a single cubic stream on loopback ran ~3 % slower than iperf3's.
            assert!(r.len() >= len.max(512 * 1024));
            let p = payload(len, false);
            assert_eq!(p.as_ptr() as usize % crate::buf::ALIGN, 0);
            assert_eq!(p.len(), len);
            assert_eq!(p[131], (131 * 131 % 251) as u8);
            assert_eq!(&payload(len, true)[..12], b"012345678901");
        }
    }

    /// Feeds `batch` reads of `read` bytes at `bytes_per_us` for `for_us` from `t0`; the
    /// marks it asked for, each applied as asked.
    fn feed(
        batch: &mut WakeBatch,
        t0: u64,
        bytes_per_us: u64,
        read: usize,
        for_us: u64,
    ) -> Vec<usize> {
        let step = read as u64 / bytes_per_us;
        let mut asked = Vec::new();
        let mut t = t0;
        while t < t0 + for_us {
            t += step;
            if let Some(m) = batch.after_read(read, 128 * 1024, t) {
                batch.applied(m);
                asked.push(m);
            }
        }
        asked
    }

    /// Regression (issue 14): a receiver woken for every packet cost the sender's CPU a
    /// wake-up per 64 KiB; a fast stream's reader is woken once per 100 µs of its data.
    #[test]
    fn a_fast_stream_is_woken_once_per_span_of_its_data() {
        let mut b = WakeBatch::new(0);
        // 20 Gbit/s: 2 500 bytes a µs, read 128 KiB at a time.
        let asked = feed(&mut b, 0, 2_500, 128 * 1024, 50_000);
        assert_eq!(
            asked.len(),
            1,
            "one mark, kept while the rate holds: {asked:?}"
        );
        let want = 2_500 * WAKE_SPAN_US as usize;
        assert!(
            asked[0].abs_diff(want) < want / 20,
            "{asked:?} against {want}"
        );
        // 100 Gbit/s: at most the cap.
        let mut b = WakeBatch::new(0);
        assert_eq!(feed(&mut b, 0, 12_500, 128 * 1024, 30_000), [MAX_MARK]);
    }

    #[test]
    fn a_stream_below_a_packet_per_mark_span_gets_no_mark() {
        // 0.8 Gbit/s: 50 KB in 500 µs, under one 64 KiB packet.
        let mut b = WakeBatch::new(0);
        assert!(feed(&mut b, 0, 100, 16 * 1024, 100_000).is_empty());
        assert_eq!(b.mark, 1);
    }

    /// Regression (issue 14): one of several streams (`-P 8` on loopback under bbr, 2
    /// Gbit/s each) had no mark, and its eight threads, woken for every packet, made the
    /// test 0.75–0.96 as fast as iperf3's. It gets the least mark, though 100 µs of its
    /// data is less.
    #[test]
    fn a_stream_of_a_packet_per_mark_span_gets_the_least_mark() {
        // 2 Gbit/s: 125 KB in 500 µs, 25 KB in 100 µs.
        let mut b = WakeBatch::new(0);
        assert_eq!(feed(&mut b, 0, 250, 128 * 1024, 100_000), [MIN_MARK]);
        // 1.1 Gbit/s: 69 KB in 500 µs, one packet and a little more.
        let mut b = WakeBatch::new(0);
        assert_eq!(feed(&mut b, 0, 137, 64 * 1024, 100_000), [MIN_MARK]);
    }

    #[test]
    fn the_mark_follows_the_rate_with_hysteresis() {
        let mut b = WakeBatch::new(0);
        assert_eq!(feed(&mut b, 0, 2_000, 128 * 1024, 10_100).len(), 1);
        let first = b.mark;
        // Ten per cent faster: not worth a system call.
        assert!(feed(&mut b, 10_100, 2_200, 128 * 1024, 30_000).is_empty());
        assert_eq!(b.mark, first);
        // Half as fast: follows (still above a packet a span).
        let asked = feed(&mut b, 40_100, 1_000, 128 * 1024, 30_000);
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert!(asked[0] < first * 3 / 5, "{asked:?} after {first}");
        // Slower than a packet a span (0.96 Gbit/s, reads no shorter than the mark):
        // dropped for the rate.
        assert_eq!(feed(&mut b, 70_100, 120, 128 * 1024, 30_000), [1]);
    }

    #[test]
    fn a_capped_mark_follows_the_buffer_as_it_grows() {
        let mut b = WakeBatch::new(0);
        let mut t = 0;
        let mut asked = Vec::new();
        // 25 Gbit/s for 50 ms: the buffer caps every mark at 100 000 bytes for the first
        // 30 ms, then grows (autotuning) and caps no more.
        while t < 50_000 {
            t += 50;
            if let Some(m) = b.after_read(128 * 1024, 128 * 1024, t) {
                b.applied(if t < 30_000 { m.min(100_000) } else { m });
                asked.push(m);
            }
        }
        assert!(asked.iter().all(|&m| m == MAX_MARK), "{asked:?}");
        assert!(asked.len() >= 3, "asked again while capped: {asked:?}");
        assert_eq!(b.mark, MAX_MARK, "the mark follows the grown buffer");
    }

    #[test]
    fn a_short_read_drops_the_mark_at_once() {
        let mut b = WakeBatch::new(0);
        feed(&mut b, 0, 2_500, 128 * 1024, 10_100);
        assert!(b.mark > 1);
        // Less than the mark came back: the timeout, or the stream's end.
        assert_eq!(b.after_read(10_000, 128 * 1024, 10_200), Some(1));
        b.applied(1);
        let mut b = WakeBatch::new(0);
        feed(&mut b, 0, 2_500, 128 * 1024, 10_100);
        // A read that timed out with nothing.
        assert_eq!(b.after_read(0, 128 * 1024, 11_200), Some(1));
        // A read shorter than the mark but as long as the buffer is not short.
        let mut b = WakeBatch::new(0);
        feed(&mut b, 0, 2_500, 128 * 1024, 10_100);
        assert_eq!(b.after_read(100_000, 100_000, 10_200), None);
    }

    /// Feeds `p` a fast stream from `t` for one span: 128 KiB every 20 µs (52 Gbit/s),
    /// each found by a poll; the time after.
    fn fast_span(p: &mut SpinRead, mut t: u64) -> u64 {
        let end = t + RATE_WINDOW_US;
        while t <= end {
            p.after_read(128 * 1024, p.polls(t), t);
            t += 20;
        }
        t
    }

    /// A pinned receiver polls for [`SPIN_US`] past each read that brought data, once its
    /// stream measured fast, and then sleeps in a blocking read.
    #[test]
    fn a_pinned_receiver_polls_past_its_last_data_once_fast() {
        let mut p = SpinRead::new(0);
        p.after_read(65_536, false, 100);
        assert!(!p.polls(100), "not measured fast yet");
        let t = fast_span(&mut p, 100);
        p.after_read(65_536, true, t);
        assert!(p.polls(t) && p.polls(t + SPIN_US - 1));
        p.after_read(0, true, t + 20);
        assert!(p.polls(t + 20), "an empty poll inside the spell");
        p.after_read(65_536, true, t + 30);
        assert!(
            p.polls(t + 30 + SPIN_US - 1),
            "{SPIN_US} µs past the latest data"
        );
        p.after_read(0, true, t + 30 + SPIN_US);
        assert!(
            !p.polls(t + 30 + SPIN_US),
            "the spell ran out: a blocking read"
        );
    }

    /// A stream under about 2.6 Gbit/s is never polled: 64 KiB every 500 µs (1 Gbit/s).
    #[test]
    fn a_slow_stream_is_not_polled() {
        let mut p = SpinRead::new(0);
        let mut t = 0;
        while t < 5 * RATE_WINDOW_US {
            p.after_read(65_536, false, t);
            assert!(!p.polls(t), "at {t} µs");
            t += 500;
        }
    }

    /// Polling rests when more than one spell in eight polls that found data runs out
    /// empty over a span; a blocking read that brings data is not a poll that found it.
    #[test]
    fn polling_rests_past_one_empty_spell_in_eight() {
        // One span's reads of 512 KiB, `hits` found by polls and the rest by blocking
        // reads, then one spell running out; returns the time after the span's judgement.
        fn span(p: &mut SpinRead, t: u64, hits: u64, blocking: u64) -> u64 {
            let step = RATE_WINDOW_US / (hits + blocking + 2);
            let mut at = t;
            for i in 0..hits + blocking {
                at += step;
                p.after_read(512 * 1024, i < hits, at);
            }
            p.after_read(0, true, at + SPIN_US);
            let end = t + RATE_WINDOW_US;
            p.after_read(512 * 1024, false, end);
            end
        }
        let mut p = SpinRead::new(0);
        let t = fast_span(&mut p, 0);
        let t = span(&mut p, t, 8, 0);
        assert!(p.polls(t), "8 found, 1 empty: goes on");
        let t = span(&mut p, t, 7, 1);
        assert!(!p.polls(t), "7 found, 1 empty: rests");
        // After the rest, a fast stream is polled again.
        let later = fast_span(&mut p, t + SPIN_REST_US);
        p.after_read(65_536, true, later);
        assert!(p.polls(later));
    }

    /// Polling that pays goes on: a fast stream whose polls find data, with a spell
    /// running out now and then (one in a hundred).
    #[test]
    fn polling_that_finds_data_goes_on() {
        let mut p = SpinRead::new(0);
        let mut t = fast_span(&mut p, 0);
        for i in 1..10_000u64 {
            t += 20;
            if i % 100 == 0 {
                // A gap: the spell runs out, the blocking read brings the next data.
                p.after_read(0, true, t + SPIN_US);
                t += 200;
                p.after_read(128 * 1024, false, t);
            } else {
                assert!(p.polls(t), "polling at {t} µs");
                p.after_read(128 * 1024, true, t);
            }
        }
    }

    /// The polling path end to end: a receiver on a thread pinned to one CPU polls a fast
    /// stream, counts every byte of it though it pauses (spells run out, blocking reads
    /// take over), and ends at its end of file.
    #[test]
    fn a_pinned_receiver_reads_every_byte_and_the_end() {
        let Some(cpu) = crate::cpu::cpu_to_pin_or_skip("no receiver polls") else {
            return;
        };
        let online = crate::cpu::online_cpus();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        const MIB: u64 = 384;
        let sender = std::thread::spawn(move || {
            let block = vec![5u8; 1 << 20];
            for i in 0..MIB {
                tx.write_all(&block).unwrap();
                if i % 64 == 63 {
                    std::thread::sleep(Duration::from_millis(3));
                }
            }
        });
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            crate::cpu::pin_thread(cpu).unwrap();
            let pinned = crate::cpu::pinned_to_one_cpu();
            let cfg = crate::stream::DataConfig {
                mode: Mode::Streaming,
                len: 128 * 1024,
                rate_bps: 0,
                counters_64bit: true,
                rto: Duration::from_secs(1),
                zerocopy: false,
                close_when_done: false,
                drain_to_eof: true,
                backoff: false,
                window: false,
                path_rtt: None,
                trace: None,
                affinity: Some(cpu),
                fq_rate_bps: 0,
                repeating_payload: false,
                burst_bytes: 0,
                file: None,
                skip_rx_copy: false,
                gso_bytes: 0,
                gro: false,
            };
            let ctl = crate::stream::TestControl::new(crate::stream::Budget::Unbounded);
            let c = StreamCounters::default();
            let r = receive(&rx, &cfg, &ctl, &c);
            let counts = (
                c.bytes.load(Ordering::Relaxed),
                c.polled_reads.load(Ordering::Relaxed),
            );
            let _ = done_tx.send((r, counts, pinned));
        });
        // Bounded: a receiver that never sees the end fails the test, not the suite.
        let (result, (bytes, polled), pinned) = done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the receiver ends within 60 s");
        sender.join().unwrap();
        assert!(pinned, "pinned to CPU {cpu} of {online}");
        result.unwrap();
        assert_eq!(bytes, MIB << 20);
        assert!(polled > 0, "a fast stream's receiver polled");
    }

    /// The mark and its timeout as the kernel holds them, capped by the receive buffer;
    /// bytes below the mark are still read (after the timeout).
    #[test]
    fn a_mark_is_set_capped_and_released() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        let poll = Duration::from_millis(50);
        // A fresh socket's buffer (the kernel's default, 128 KiB) leaves no room for one.
        let fresh = socket2::SockRef::from(&rx).recv_buffer_size().unwrap();
        if fresh / 8 < MIN_MARK {
            assert_eq!(apply_mark(&rx, 200_000, poll).unwrap(), 1);
            assert_eq!(crate::sock::rcvlowat(&rx), Some(1));
        }
        // A buffer with room for a mark: forced past net.core.rmem_max where allowed (root,
        // as CI), else as big as that lets it be.
        let forced = crate::sock::force_recv_buffer(&rx, 2 << 20);
        if !forced {
            socket2::SockRef::from(&rx)
                .set_recv_buffer_size(2 << 20)
                .unwrap();
        }
        let cap = socket2::SockRef::from(&rx).recv_buffer_size().unwrap() / 8;
        if cap < MIN_MARK {
            assert!(
                !forced && std::env::var_os("CI").is_none(),
                "a buffer of {} leaves no room for a mark",
                cap * 8
            );
            eprintln!(
                "skipped the rest: net.core.rmem_max leaves no room for a mark, and \
                 SO_RCVBUFFORCE needs root"
            );
            return;
        }
        let set = apply_mark(&rx, 200_000, poll).unwrap();
        assert_eq!(set, 200_000.min(cap));
        assert_eq!(crate::sock::rcvlowat(&rx), Some(set));
        // The timeout asked for (the kernel rounds it up to its tick).
        let t = rx.read_timeout().unwrap().unwrap();
        assert!(
            t >= MARKED_TIMEOUT && t <= Duration::from_millis(10),
            "{t:?}"
        );
        // Fewer bytes than the mark: read after the timeout, none held back.
        tx.write_all(&[7; 1000]).unwrap();
        let mut buf = vec![0; 256 * 1024];
        let mut got = 0;
        while got < 1000 {
            match (&rx).read(&mut buf[got..]) {
                Ok(n) => got += n,
                Err(e) if is_timeout(&e) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, 1000);
        assert_eq!(apply_mark(&rx, 1, poll).unwrap(), 1);
        assert_eq!(crate::sock::rcvlowat(&rx), Some(1));
        let t = rx.read_timeout().unwrap().unwrap();
        assert!(t >= poll && t <= poll + Duration::from_millis(10), "{t:?}");
    }
}
