//! Moving data over one UDP stream.
//!
//! Streaming senders batch datagrams with UDP GSO (one `sendmsg` carries up to 64
//! datagrams that the kernel segments), receivers take them in batches with UDP GRO; where
//! the kernel lacks either, one system call per datagram. Stop-and-wait sends one
//! datagram, waits for its acknowledgement and retransmits it after the timeout.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use flowlab_proto::params::Mode;
use flowlab_proto::udp::{
    Ack, CONNECT_MSG, DatagramHeader, Overflow, Progress, QueueHigh, handshake_reply,
};
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

use crate::buf::PageBuf;
use crate::buf::payload;
use crate::cpu;
use crate::pacing::{Backoff, Pacer, QueueWatch, ReceiverWindow, progress_every, receiver_window};
use crate::sock;
use crate::speed::{RATE_WINDOW_US, fast_enough};
use crate::stream::{DataConfig, Drain, POLL, StreamCounters, TestControl, is_timeout};
use crate::udp_stats::{UdpReceiverStats, Verdict};

/// What a `--skip-rx-copy` receiver copies of each datagram: its header (at most 16
/// bytes) or a handshake, with room to spare.
const SKIP_COPY_HEAD: usize = 64;

/// Most datagrams one GSO send carries (the kernel's UDP_MAX_SEGMENTS is 64 or more).
const MAX_SEGMENTS: usize = 64;
/// Largest UDP payload of one GSO send.
pub(crate) const MAX_GSO_BYTES: usize = 65_000;

fn stamp(buf: &mut [u8], seq: u64, now_us: u64, counters_64bit: bool) {
    let header = DatagramHeader {
        sec: (now_us / 1_000_000) as u32,
        usec: (now_us % 1_000_000) as u32,
        seq,
    };
    header.encode(buf, counters_64bit);
}

/// Sends until stopped or the budget is spent.
pub(crate) fn send(
    sock: &UdpSocket,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
) -> io::Result<()> {
    let result = match cfg.mode {
        Mode::Streaming => send_streaming(sock, cfg, ctl, c),
        Mode::StopAndWait => send_stop_and_wait(sock, cfg, ctl, c),
    };
    c.end_us.store(ctl.elapsed_us().max(1), Ordering::Release);
    result
}

fn send_streaming(
    sock: &UdpSocket,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
) -> io::Result<()> {
    let hdr = DatagramHeader::len(cfg.counters_64bit);
    let len = datagram_len(cfg);
    let max_segs = match cfg.gso_bytes {
        0 => 1,
        bytes => (bytes.min(MAX_GSO_BYTES) / len).clamp(1, MAX_SEGMENTS),
    };
    let mut gso = max_segs > 1;
    let mut buf = payload(len * max_segs, cfg.repeating_payload);
    if cfg.fq_rate_bps > 0 {
        // `--fq-rate`: paced by the fq qdisc, where the interface has one.
        crate::sock::set_max_pacing_rate(sock, cfg.fq_rate_bps / 8)
            .map_err(|e| io::Error::other(format!("--fq-rate: {e}")))?;
    }
    let mut fixed = (cfg.rate_bps > 0)
        .then(|| Pacer::new(cfg.rate_bps, ctl.epoch.elapsed()).with_burst(cfg.burst_bytes));
    let mut backoff = (cfg.backoff && cfg.rate_bps == 0).then(|| Backoff::new(ctl.epoch.elapsed()));
    let mut window = cfg.window.then(|| match cfg.rate_bps {
        0 => ReceiverWindow::new(len),
        rate => ReceiverWindow::paced(len, rate, cfg.path_rtt.unwrap_or_default()),
    });
    // Since when the receiver's window has held this sender back.
    let mut held_since: Option<Duration> = None;
    let mut seq = 0u64;
    sock.set_write_timeout(Some(POLL))?;
    loop {
        if ctl.stop_send.load(Ordering::Acquire) {
            log_window(window.as_ref(), c);
            return Ok(());
        }
        let mut want = if gso { max_segs } else { 1 };
        let now = ctl.epoch.elapsed();
        if backoff.is_some() || window.is_some() {
            // Before every batch: a report read a batch later is a probe too many, and
            // the cost is one system call per up to 64 datagrams (docs/lab-notes/performance.md).
            read_reports(sock, backoff.as_mut(), window.as_mut(), now, seq);
        }
        if let Some(b) = &backoff {
            c.backoff_cuts.store(b.cuts(), Ordering::Relaxed);
        }
        if let Some(w) = window.as_mut() {
            let mut room = w.room(seq);
            if room == 0 {
                // As many datagrams unread as the receiver can hold: wait for its next
                // report, leaving the CPU to it; when none came in time, probe.
                let since = *held_since.get_or_insert_with(|| {
                    c.window_waits.fetch_add(1, Ordering::Relaxed);
                    if w.has_reported() {
                        c.receiver_holds.fetch_add(1, Ordering::Relaxed);
                    }
                    now
                });
                let held = now.saturating_sub(since);
                if held < w.wait() {
                    sock::wait_readable(sock, (w.wait() - held).min(POLL))?;
                    continue;
                }
                c.window_timeouts.fetch_add(1, Ordering::Relaxed);
                w.timed_out(seq);
                room = w.room(seq);
            }
            held_since = None;
            want = want.min(usize::try_from(room).unwrap_or(usize::MAX));
        }
        let pacer = match (&mut fixed, &mut backoff) {
            (Some(p), _) => Some(p),
            (None, Some(b)) => b.pacer(now),
            (None, None) => None,
        };
        if let Some(p) = pacer {
            let wait = p.wait(now);
            if !wait.is_zero() {
                std::thread::sleep(wait.min(POLL));
                continue;
            }
            // A burst's datagrams go in one batch; otherwise what is due.
            let due = p.burst_left().unwrap_or_else(|| p.due_bytes(now));
            want = want.min(((due / len as f64).ceil() as usize).max(1));
        }
        // Reserve the batch at once and stamp it; only its last datagram may be short.
        let now_us = ctl.elapsed_us();
        let Some(batch) = ctl.budget.take_batch(len, want) else {
            log_window(window.as_ref(), c);
            return Ok(());
        };
        let segs = batch.writes;
        // A last datagram shorter than the header is padded to it on the wire (`total`);
        // only what the budget gave goes back on failure.
        let mut total = 0usize;
        for i in 0..segs {
            let n = if i + 1 == segs {
                batch.bytes - i * len
            } else {
                len
            };
            stamp(
                &mut buf[i * len..],
                seq + 1 + i as u64,
                now_us,
                cfg.counters_64bit,
            );
            total += n.max(hdr);
        }
        let sent = if segs > 1 {
            let seg = len as u16;
            let cmsg = [ControlMessage::UdpGsoSegments(&seg)];
            sendmsg::<()>(
                sock.as_raw_fd(),
                &[IoSlice::new(&buf[..total])],
                &cmsg,
                MsgFlags::empty(),
                None,
            )
            .map_err(io::Error::from)
        } else {
            sock.send(&buf[..total])
        };
        match sent {
            Ok(_) => {
                seq += segs as u64;
                c.bytes.fetch_add(total as u64, Ordering::Relaxed);
                c.blocks.fetch_add(segs as u64, Ordering::Relaxed);
                if let Some(p) = fixed.as_mut() {
                    p.sent(total);
                }
                if let Some(b) = backoff.as_mut() {
                    b.sent(ctl.epoch.elapsed(), total);
                }
            }
            Err(e) => {
                // Nothing of the batch left: hand its budget back and decide.
                ctl.budget.give_back_batch(batch);
                match e.raw_os_error() {
                    // The kernel cannot segment (no GSO, or a datagram above the path MTU).
                    Some(libc::EIO | libc::EINVAL | libc::EMSGSIZE | libc::ENOPROTOOPT)
                        if segs > 1 =>
                    {
                        tracing::debug!("UDP GSO unavailable ({e}); sending one datagram per call");
                        gso = false;
                    }
                    // Local queue full: try again shortly.
                    Some(libc::ENOBUFS | libc::EAGAIN) => {
                        std::thread::sleep(Duration::from_micros(20))
                    }
                    _ if is_timeout(&e) => {}
                    // The peer's port is not (yet, or no longer) open.
                    Some(libc::ECONNREFUSED) => std::thread::sleep(Duration::from_millis(1)),
                    _ => return Err(e),
                }
            }
        }
    }
}

/// Logs (debug) what a sender's receiver window came to and how often it waited.
fn log_window(window: Option<&ReceiverWindow>, c: &StreamCounters) {
    if let Some(w) = window {
        tracing::debug!(
            "UDP sender: receiver window {w}; waited for it {} times, {} of them in vain",
            c.window_waits.load(Ordering::Relaxed),
            c.window_timeouts.load(Ordering::Relaxed)
        );
    }
}

/// Reads between two looks at the receiving socket's queue (one system call each).
const QUEUE_EVERY: u64 = 4;

/// Reads every report of the receiver's waiting on the socket, without blocking: overflow
/// and queue reports for the backoff, progress for the window; `now` is the test clock.
fn read_reports(
    sock: &UdpSocket,
    mut backoff: Option<&mut Backoff>,
    mut window: Option<&mut ReceiverWindow>,
    now: Duration,
    sent_seq: u64,
) {
    let mut buf = [0u8; 64];
    loop {
        match sock::recv_now(sock, &mut buf) {
            Ok(n) => {
                let got = &buf[..n];
                if let (Some(w), Ok(p)) = (window.as_deref_mut(), Progress::decode(got)) {
                    let now_us = now.as_micros() as u64;
                    w.on_progress(now_us, &p, sent_seq);
                } else if let Some(b) = backoff.as_deref_mut() {
                    if let Ok(o) = Overflow::decode(got) {
                        b.on_overflow(now, o.drops, o.seq, sent_seq);
                    } else if let Ok(q) = QueueHigh::decode(got) {
                        b.on_queue_high(now, q.count, q.seq, sent_seq);
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // EAGAIN: nothing (more) waiting; ECONNREFUSED: a stale ICMP error.
            Err(_) => return,
        }
    }
}

fn send_stop_and_wait(
    sock: &UdpSocket,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
) -> io::Result<()> {
    let hdr = DatagramHeader::len(cfg.counters_64bit);
    let len = datagram_len(cfg);
    let mut buf = payload(len, cfg.repeating_payload);
    let mut ack = [0u8; 64];
    let mut seq = 0u64;
    // The socket's read timeout, changed only when the wait left before a resend drops
    // below POLL (near a deadline, or with an RTO under POLL): not a syscall per message.
    let mut timeout = POLL;
    sock.set_read_timeout(Some(timeout))?;
    while !ctl.stop_send.load(Ordering::Acquire) {
        let Some(n) = ctl.budget.take(len) else {
            return Ok(());
        };
        let n = n.max(hdr);
        seq += 1;
        let mut first = true;
        'retransmit: loop {
            stamp(&mut buf, seq, ctl.elapsed_us(), cfg.counters_64bit);
            match sock.send(&buf[..n]) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
                Err(e) => return Err(e),
            }
            if first {
                c.bytes.fetch_add(n as u64, Ordering::Relaxed);
                c.blocks.fetch_add(1, Ordering::Relaxed);
                first = false;
            } else {
                c.sw_retransmits.fetch_add(1, Ordering::Relaxed);
            }
            let deadline = Instant::now() + cfg.rto;
            loop {
                if ctl.stop_send.load(Ordering::Acquire) {
                    return Ok(());
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    continue 'retransmit;
                }
                let wait = left.min(POLL);
                if wait != timeout {
                    sock.set_read_timeout(Some(wait))?;
                    timeout = wait;
                }
                match sock.recv(&mut ack) {
                    Ok(k) => {
                        if Ack::decode(&ack[..k]).is_ok_and(|a| a.seq == seq) {
                            break 'retransmit;
                        }
                        // A late acknowledgement of an earlier message: keep waiting.
                    }
                    Err(e) if is_timeout(&e) || e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(())
}

/// Bytes in every datagram of a stream: the block length, at least a header.
pub(crate) fn datagram_len(cfg: &DataConfig) -> usize {
    cfg.len.max(DatagramHeader::len(cfg.counters_64bit))
}

/// Receives until told to stop and drained. `early` holds datagrams that arrived before
/// the stream's handshake finished.
pub(crate) fn receive(
    sock: &UdpSocket,
    cfg: &DataConfig,
    ctl: &TestControl,
    c: &StreamCounters,
    early: Vec<Vec<u8>>,
) -> io::Result<()> {
    sock.set_read_timeout(Some(POLL))?;
    // A receiver that waits for a CPU while senders run lets its socket overflow: short
    // slices let it preempt them when it wakes (docs/lab-notes/performance.md, UDP loss).
    match cpu::request_slice(cpu::RECEIVER_SLICE_NS) {
        Ok(cpu::Slice::Granted(ns)) => {
            tracing::debug!("UDP receiver: scheduling slice {} µs", ns / 1000)
        }
        Ok(cpu::Slice::NotKept) => {
            tracing::debug!("UDP receiver: this kernel keeps no scheduling slices")
        }
        Ok(cpu::Slice::NotNormal) => {
            tracing::debug!("UDP receiver: not of the normal scheduling policy; slice left")
        }
        Err(e) => tracing::debug!("UDP receiver: scheduling slice refused: {e}"),
    }
    let stop_and_wait = cfg.mode == Mode::StopAndWait;
    // `--skip-rx-copy`: each datagram read alone, its header copied and the rest
    // discarded in the kernel (GRO would hand over many, and their headers are needed).
    let skip_copy = cfg.skip_rx_copy && !stop_and_wait;
    if !stop_and_wait && cfg.gro && !skip_copy {
        crate::sock::enable_udp_gro(sock);
    }
    // The kernel attaches to each datagram read its count of packets this socket dropped
    // because its buffer was full: loss that happened here, not in the network.
    let _ = nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::RxqOvfl, &1);
    let mut reported_drops = 0u64;
    let (mut queue, mut reads) = (QueueWatch::default(), 0u64);
    // Counts a read's datagrams; returns how many belonged to the stream (not foreign),
    // for stop-and-wait the sequence numbers to acknowledge, and the highest sequence
    // number read with its send stamp. `whole`: `data` is the head of one datagram of
    // that length, the rest discarded (`--skip-rx-copy`).
    let account = |data: &[u8],
                   seg: usize,
                   whole: Option<usize>,
                   now_us: u64|
     -> (u64, Vec<u64>, Option<(u64, u64)>) {
        let mut acks = Vec::new();
        let mut highest: Option<(u64, u64)> = None;
        let Ok(mut guard) = c.udp.lock() else {
            return (0, acks, highest);
        };
        let stats: &mut UdpReceiverStats =
            guard.get_or_insert_with(|| UdpReceiverStats::new(datagram_len(cfg)));
        // The shared counters are updated once per batch, not per datagram.
        let (mut bytes, mut datagrams) = (0u64, 0u64);
        let step = if whole.is_some() { data.len() } else { seg };
        for d in data.chunks(step.max(1)) {
            let len = whole.unwrap_or(d.len());
            let Ok(h) = DatagramHeader::decode(d, cfg.counters_64bit) else {
                continue;
            };
            if stats.on_datagram(h.seq, len, h.micros(), now_us) == Verdict::Foreign {
                continue;
            }
            bytes += len as u64;
            datagrams += 1;
            if stop_and_wait {
                acks.push(h.seq);
            }
            if highest.is_none_or(|(seq, _)| h.seq > seq) {
                highest = Some((h.seq, h.micros()));
            }
        }
        c.bytes.fetch_add(bytes, Ordering::Relaxed);
        c.blocks.fetch_add(datagrams, Ordering::Relaxed);
        (datagrams, acks, highest)
    };
    for d in &early {
        // Stop-and-wait: a message that beat the handshake is acknowledged like any other.
        for seq in account(d, d.len(), None, ctl.elapsed_us()).1 {
            let _ = sock.send(&Ack { seq }.encode());
        }
    }
    // Page-aligned, like every data buffer (crate::buf): GRO hands over up to 64 KiB a read.
    let mut buf = PageBuf::zeroed(1 << 17);
    let mut cmsg_space = nix::cmsg_space!(i32, u32, libc::timespec);
    let mut drain = Drain::default();
    // A fast stream at full speed into a thread pinned to a CPU is read in batches, not
    // woken per datagram batch; paced tests never nap (their jitter would show it), nor
    // does a receiver whose buffer a nap could fill.
    let rcvbuf = socket2::SockRef::from(sock).recv_buffer_size().unwrap_or(0);
    let roomy = rcvbuf >= NAP_MIN_RCVBUF;
    // The window offered to a sender that keeps within it, and how often it hears of
    // this receiver's progress: every `every` sequence numbers (datagrams lost on the
    // path count, so loss never holds the sender back), the first read at once (the
    // sender starts with a smaller window), and when no datagram came for a while after
    // some that were not reported (the sender may be waiting for them: its probes).
    let offered = cfg.window.then(|| {
        let window = receiver_window(rcvbuf as u64, datagram_len(cfg));
        (window, progress_every(window, cfg.rate_bps > 0))
    });
    let mut reported: Option<u64> = None;
    let mut unreported: Option<ReadOf> = None;
    // The reports say how long what they report waited here, from the kernel's arrival
    // stamps (datagrams queued before this are stamped when read: a wait of 0, which only
    // makes a round trip look longer).
    if offered.is_some() && !sock::enable_rx_timestamps(sock) {
        tracing::debug!("UDP receiver: no arrival stamps; its reports count no wait");
    }
    let mut nap = (!stop_and_wait && cfg.rate_bps == 0 && roomy && cpu::pinned_to_one_cpu())
        .then(|| NapRead::new(ctl.elapsed_us()));
    // What a read copies: everything, or with `--skip-rx-copy` a datagram's head.
    let take = if skip_copy { SKIP_COPY_HEAD } else { buf.len() };
    loop {
        let mut iov = [IoSliceMut::new(&mut buf[..take])];
        let without_waiting = nap.as_ref().is_some_and(|n| !n.blocks());
        let mut flags = if without_waiting {
            MsgFlags::MSG_DONTWAIT
        } else {
            MsgFlags::empty()
        };
        if skip_copy {
            // The datagram's whole length comes back; only its head is copied.
            flags |= MsgFlags::MSG_TRUNC;
        }
        // When what this read returns arrived (the kernel's stamp, for the window's reports).
        let mut arrived_ns = None;
        let got = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg_space), flags) {
            Ok(msg) => {
                let mut seg = msg.bytes;
                if let Ok(cmsgs) = msg.cmsgs() {
                    for cm in cmsgs {
                        match cm {
                            ControlMessageOwned::UdpGroSegments(s) => {
                                seg = usize::try_from(s).unwrap_or(seg);
                            }
                            ControlMessageOwned::RxqOvfl(d) => {
                                c.rcvbuf_drops.store(u64::from(d), Ordering::Relaxed);
                            }
                            ControlMessageOwned::ScmTimestampns(t) => {
                                arrived_ns = u64::try_from(t.tv_sec()).ok().and_then(|s| {
                                    let ns = u64::try_from(t.tv_nsec()).ok()?;
                                    s.checked_mul(1_000_000_000)?.checked_add(ns)
                                });
                            }
                            _ => {}
                        }
                    }
                }
                Some((msg.bytes, seg))
            }
            Err(nix::Error::EAGAIN | nix::Error::EINTR | nix::Error::ECONNREFUSED) => None,
            Err(e) => return Err(e.into()),
        };
        // The arrival time of what was read (one clock read for the nap and the count).
        let now_us = ctl.elapsed_us();
        if let Some(n) = nap.as_mut() {
            let bytes = got.map_or(0, |(bytes, _)| bytes);
            if without_waiting && bytes > 0 {
                c.polled_reads.fetch_add(1, Ordering::Relaxed);
            }
            if n.after_read(bytes, now_us) {
                std::thread::sleep(Duration::from_micros(NAP_US));
            }
        }
        if let Some((n, _)) = got.filter(|&(n, _)| n == CONNECT_MSG.len()) {
            // The client missed our handshake reply and asks again (a datagram this short
            // is never data: the header alone is 12 bytes).
            if let Some(reply) = handshake_reply(&buf[..n.min(take)]) {
                let _ = sock.send(&reply);
                continue;
            }
        }
        // Foreign datagrams (forged, stray) neither extend the stream's time nor keep the
        // drain waiting: a storm of them after the test must not stretch the result.
        let mut ours = 0;
        if let Some((n, seg)) = got {
            let (acks, highest);
            (ours, acks, highest) = if skip_copy {
                account(&buf[..n.min(take)], n, Some(n), now_us)
            } else {
                account(&buf[..n], seg, None, now_us)
            };
            if ours > 0 {
                c.end_us.store(now_us.max(1), Ordering::Relaxed);
            }
            if let (Some((window, every)), Some((seq, sent_us))) = (offered, highest) {
                let read = ReadOf {
                    seq,
                    sent_us,
                    arrived_ns,
                    read_us: now_us,
                };
                if reported.is_none_or(|r| seq >= r.saturating_add(every)) {
                    reported = Some(seq);
                    unreported = None;
                    let _ = sock.send(&read.progress(window, ctl).encode());
                } else if reported.is_some_and(|r| seq > r) {
                    unreported = Some(read);
                }
            }
            for seq in acks {
                let _ = sock.send(&Ack { seq }.encode());
            }
            let drops = c.rcvbuf_drops.load(Ordering::Relaxed);
            if cfg.backoff && drops > reported_drops {
                reported_drops = drops;
                let seq = c.udp_counts().map_or(0, |u| u.highest_seq);
                let _ = sock.send(&Overflow { drops, seq }.encode());
            }
            // The early warning: the queue past half the buffer, looked at every few
            // reads (one system call each), so that the sender slows down before the
            // kernel must drop. Not to a sender that keeps within this receiver's window
            // (half the buffer, the reports' lag and the path's allowance on top).
            reads += 1;
            if cfg.backoff && offered.is_none() && reads % QUEUE_EVERY == 0 {
                if let Some(count) = sock::receive_queue(sock)
                    .and_then(|(queued, capacity)| queue.observe(queued, capacity))
                {
                    let seq = c.udp_counts().map_or(0, |u| u.highest_seq);
                    let _ = sock.send(&QueueHigh { count, seq }.encode());
                }
            }
        }
        if got.is_none() && !without_waiting {
            // A read waited in vain: what was read since the last report is all there
            // is; a sender held at its limit learns it now, not after its probes.
            if let (Some(read), Some((window, _))) = (unreported.take(), offered) {
                reported = Some(read.seq);
                let _ = sock.send(&read.progress(window, ctl).encode());
            }
        }
        if drain.done(ctl, ours > 0, false) {
            return Ok(());
        }
    }
}

/// A read a receiver's progress report is of: its highest sequence number and that
/// datagram's send stamp, when the read's first packet arrived (the kernel's stamp, ns
/// since the Unix epoch) and when it was read (µs on the test clock). Kept as it is, so
/// that a read costs no clock reading of its own; a report's clocks are read when sent.
#[derive(Debug, Clone, Copy)]
struct ReadOf {
    seq: u64,
    sent_us: u64,
    arrived_ns: Option<u64>,
    read_us: u64,
}

impl ReadOf {
    /// The report of this read, with how long the datagram has been at this receiver:
    /// from its arrival (the kernel's stamp; without one, from its read) to now, its wait
    /// in the socket and any before the report (an idle report's 50 ms). The sender takes
    /// that out of its round trip: the queue is the window's, a late report the
    /// receiver's, neither the path's.
    fn progress(&self, window: u64, ctl: &TestControl) -> Progress {
        let held_us = match self.arrived_ns {
            Some(at) => cpu::unix_now_ns().saturating_sub(at) / 1_000,
            None => ctl.elapsed_us().saturating_sub(self.read_us),
        };
        Progress {
            seq: self.seq,
            sent_us: self.sent_us,
            held_us,
            window,
        }
    }
}

/// How long a pinned UDP receiver sleeps when it finds its queue empty, µs ([`NapRead`]).
const NAP_US: u64 = 50;
/// The least receive buffer (SO_RCVBUF as the kernel reports it, twice what was granted)
/// a receiver naps with: a nap of [`NAP_US`], stretched to 100 µs or more by timer slack
/// and wake-up, is 625 KB at 50 Gbit/s. flowlab asks for 4 MiB; a host whose
/// `net.core.rmem_max` is the kernel's default gives about 416 KiB, and never naps.
const NAP_MIN_RCVBUF: usize = 2 << 20;

/// Reads a fast UDP stream at full speed into a thread pinned to a CPU in batches.
///
/// A receiver asleep in `recvmsg` is woken by every batch of datagrams its sender
/// queues, and (with its short scheduling slice) preempts whatever runs there to read two
/// or three of them: the wake-ups, not the copies, are most of its cost. So a receiving
/// thread pinned to one CPU (with others online), of a test at full speed (`-b 0`), whose
/// stream carried at least 2.6 Gbit/s over the last [`RATE_WINDOW_US`] (as a pinned TCP
/// receiver's polling asks, `speed::fast_enough`) reads without waiting while datagrams are
/// there; when it finds none it sleeps [`NAP_US`] once, and only if there are still none
/// does it wait in a blocking read. Paced tests (`-b RATE`) never nap: a datagram read up
/// to [`NAP_US`] late would add to the jitter they report. Unpinned receivers do not
/// either: there senders overrun them; nor one whose buffer is under [`NAP_MIN_RCVBUF`].
/// (Measured in docs/lab-notes/performance.md, issue 14, "a pinned UDP receiver naps".)
#[derive(Debug)]
struct NapRead {
    /// Napped since the last data: the next read that finds nothing makes the one after
    /// it wait.
    napped: bool,
    /// The next read waits for data.
    waiting: bool,
    /// Whether the last span's rate was fast enough to nap for.
    fast: bool,
    window_start_us: u64,
    bytes: u64,
}

impl NapRead {
    fn new(now_us: u64) -> Self {
        NapRead {
            napped: false,
            waiting: true,
            fast: false,
            window_start_us: now_us,
            bytes: 0,
        }
    }

    /// Whether the next read waits for data.
    fn blocks(&self) -> bool {
        self.waiting || !self.fast
    }

    /// Called after each read: `got` bytes (0: none, or a timeout) at `now_us`; true when
    /// the receiver should nap now.
    fn after_read(&mut self, got: usize, now_us: u64) -> bool {
        self.bytes += got as u64;
        let span = now_us.saturating_sub(self.window_start_us);
        if span >= RATE_WINDOW_US {
            self.fast = fast_enough(self.bytes, span);
            self.window_start_us = now_us;
            self.bytes = 0;
        }
        if got > 0 {
            (self.napped, self.waiting) = (false, false);
            return false;
        }
        if self.waiting || !self.fast {
            return false; // a blocking read's timeout
        }
        if self.napped {
            (self.napped, self.waiting) = (false, true);
            return false;
        }
        self.napped = true;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::Budget;

    /// Two loopback UDP sockets connected to each other: the stream's and its peer's.
    fn connected_pair() -> (UdpSocket, UdpSocket) {
        let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let peer = UdpSocket::bind("127.0.0.1:0").expect("bind");
        peer.connect(sock.local_addr().expect("addr"))
            .expect("connect");
        sock.connect(peer.local_addr().expect("addr"))
            .expect("connect");
        (sock, peer)
    }

    /// A stream's settings with nothing asked for but `mode`, 64-bit counters on.
    fn config(mode: Mode) -> DataConfig {
        DataConfig {
            mode,
            len: 1460,
            rate_bps: 0,
            counters_64bit: true,
            rto: Duration::from_secs(1),
            zerocopy: false,
            close_when_done: false,
            drain_to_eof: false,
            backoff: false,
            window: false,
            path_rtt: None,
            trace: None,
            affinity: None,
            fq_rate_bps: 0,
            repeating_payload: false,
            burst_bytes: 0,
            file: None,
            skip_rx_copy: false,
            gso_bytes: MAX_GSO_BYTES,
            gro: true,
        }
    }

    /// `-b RATE/BURST`: datagrams leave in bursts of BURST, back to back, a burst's time
    /// apart: by the send times stamped in them (one per batch, so the receiver's own
    /// scheduling does not count), the long gaps are only where a burst begins.
    #[test]
    fn bursts_leave_back_to_back_a_bursts_time_apart() {
        let (sock, peer) = connected_pair();
        // 8 Mbit/s = 1000 bytes a millisecond: bursts of 10 datagrams of 1000 bytes, 10 ms
        // apart; 8 bursts.
        let cfg = DataConfig {
            len: 1000,
            rate_bps: 8_000_000,
            burst_bytes: 10_000,
            ..config(Mode::Streaming)
        };
        let ctl = TestControl::new(Budget::Blocks(80.into()));
        let c = StreamCounters::default();
        let arrivals = std::thread::spawn(move || {
            let mut buf = [0u8; 2048];
            let mut seen = Vec::new();
            peer.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            while seen.len() < 80 {
                let Ok(n) = peer.recv(&mut buf) else { break };
                let h = DatagramHeader::decode(&buf[..n], true).expect("header");
                let sent = Duration::from_secs(u64::from(h.sec))
                    + Duration::from_micros(u64::from(h.usec));
                seen.push((h.seq, sent));
            }
            seen
        });
        send(&sock, &cfg, &ctl, &c).expect("sent");
        let seen = arrivals.join().expect("receiver");
        assert_eq!(seen.len(), 80, "every datagram arrived on loopback");
        // Where the gap before a datagram is 5 ms or more: at a burst's first datagram
        // (sequence numbers 11, 21, …), never inside one.
        let long: Vec<u64> = seen
            .windows(2)
            .filter(|w| w[1].1 - w[0].1 >= Duration::from_millis(5))
            .map(|w| w[1].0)
            .collect();
        assert!(
            long.iter().all(|seq| seq % 10 == 1),
            "long gaps inside a burst, before {long:?}"
        );
        assert!(
            long.len() >= 5,
            "only {} of 7 gaps between bursts: {long:?}",
            long.len()
        );
    }

    /// A UDP receiving thread runs with the short slice (where the kernel keeps slices:
    /// it reports one for every normal thread then), from before its first datagram.
    #[test]
    fn a_receiving_thread_asks_for_short_slices() {
        let (sock, peer) = connected_pair();
        let ctl = TestControl::new(Budget::Unbounded);
        let c = std::sync::Arc::new(StreamCounters::default());
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let receiver = {
            let (ctl, c) = (ctl.clone(), c.clone());
            std::thread::spawn(move || {
                tid_tx.send(nix::unistd::gettid().as_raw()).expect("tid");
                receive(&sock, &config(Mode::Streaming), &ctl, &c, Vec::new())
            })
        };
        let tid = tid_rx.recv().expect("tid");
        let mut datagram = vec![0u8; 1460];
        stamp(&mut datagram, 1, 0, true);
        // Until the receiver has counted a datagram: it asked for its slice before.
        let deadline = Instant::now() + Duration::from_secs(10);
        while c.blocks.load(Ordering::Relaxed) == 0 {
            assert!(
                !receiver.is_finished() && Instant::now() < deadline,
                "the receiver counted nothing"
            );
            let _ = peer.send(&datagram);
            std::thread::sleep(Duration::from_millis(5));
        }
        let slice = cpu::thread_slice(tid);
        ctl.cut();
        receiver.join().expect("receiver").expect("received");
        // The receiving thread started as this one: a normal thread gets the slice where
        // the kernel keeps slices; otherwise it keeps what it inherited.
        let normal =
            cpu::thread_attr(0).expect("sched_getattr").sched_policy == libc::SCHED_OTHER as u32;
        let want = match (normal, cpu::thread_slice(0)) {
            (true, Some(_)) => Some(cpu::RECEIVER_SLICE_NS),
            (_, inherited) => inherited,
        };
        assert_eq!(slice, want);
    }

    /// Feeds `p` 64 KiB every 100 µs (about 5 Gbit/s) for one rate window from `t`;
    /// returns the time after it.
    fn fast_window(p: &mut NapRead, mut t: u64) -> u64 {
        let end = t + RATE_WINDOW_US;
        while t <= end {
            assert!(!p.after_read(64 * 1024, t), "no nap after data");
            t += 100;
        }
        t
    }

    /// A receiver naps only for a stream of 2.6 Gbit/s and up: slower, every read waits.
    #[test]
    fn a_slow_stream_is_never_read_with_naps() {
        let mut p = NapRead::new(0);
        assert!(p.blocks(), "waits until a window was fast");
        let mut t = 0;
        // 8 KiB every 100 µs: about 0.66 Gbit/s, for three windows.
        while t < 3 * RATE_WINDOW_US {
            assert!(!p.after_read(8 * 1024, t));
            assert!(p.blocks(), "at {t} µs");
            assert!(!p.after_read(0, t + 1), "no nap at {t} µs");
            t += 100;
        }
    }

    /// Fast: reads go on without waiting while data is there; the first read that finds
    /// none naps, the next that finds none waits, and data ends the wait.
    #[test]
    fn a_fast_receiver_naps_once_then_waits() {
        let mut p = NapRead::new(0);
        let t = fast_window(&mut p, 0);
        assert!(!p.after_read(64 * 1024, t));
        assert!(!p.blocks(), "data there: the next read does not wait");
        assert!(p.after_read(0, t + 10), "an empty queue: nap");
        assert!(!p.blocks(), "after the nap, a look without waiting");
        assert!(!p.after_read(0, t + 70), "empty again: no second nap");
        assert!(p.blocks(), "then a read that waits");
        assert!(!p.after_read(0, t + 80), "its timeout is no reason to nap");
        assert!(!p.after_read(1460, t + 90));
        assert!(!p.blocks(), "data again: reads without waiting");
        assert!(p.after_read(0, t + 95), "and the next empty queue naps");
    }

    /// A window below the rate turns napping off until a fast one.
    #[test]
    fn napping_stops_when_the_stream_slows() {
        let mut p = NapRead::new(0);
        let t = fast_window(&mut p, 0);
        // A slow window: one datagram, then the window closes.
        assert!(!p.after_read(1460, t + 10));
        assert!(!p.after_read(1460, t + RATE_WINDOW_US + 10));
        assert!(p.blocks(), "a slow window: reads wait");
        assert!(!p.after_read(0, t + RATE_WINDOW_US + 20), "no nap");
        let t = fast_window(&mut p, t + RATE_WINDOW_US + 30);
        assert!(!p.after_read(64 * 1024, t));
        assert!(!p.blocks(), "fast again");
    }

    /// A progress report says how long the datagrams it reports waited in the receiving
    /// socket (from the kernel's arrival stamp), so that the sender does not take the
    /// receiver's queue for path. A receiver with a window turns the stamps on; eight
    /// datagrams that then waited 50 ms before the receiver ran are reported as having
    /// waited about that long.
    #[test]
    fn a_progress_report_says_how_long_its_datagrams_waited() {
        let cfg = DataConfig {
            window: true,
            ..config(Mode::Streaming)
        };
        // Runs a receiver on `rx` until told, keeping a handle on its socket.
        let start = |rx: UdpSocket| {
            let ctl = TestControl::new(Budget::Unbounded);
            let c = std::sync::Arc::new(StreamCounters::default());
            let (ctl2, cfg) = (ctl.clone(), cfg.clone());
            let handle = rx.try_clone().expect("clone");
            let t = std::thread::spawn(move || receive(&rx, &cfg, &ctl2, &c, Vec::new()));
            (ctl, t, handle)
        };
        let first_report = |tx: &UdpSocket| {
            tx.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let mut buf = [0u8; 64];
            let n = tx.recv(&mut buf).expect("a report within 5 s");
            Progress::decode(&buf[..n]).expect("a progress report")
        };
        let blind = DataConfig {
            window: false,
            ..cfg.clone()
        };
        let send_eight = |tx: &UdpSocket| {
            let ctl = TestControl::new(Budget::Blocks(8u64.into()));
            send(tx, &blind, &ctl, &StreamCounters::default()).expect("sent");
        };
        // The receiver turns the arrival stamps on.
        let (tx, rx) = connected_pair();
        let (ctl, t, handle) = start(rx);
        send_eight(&tx);
        first_report(&tx);
        assert!(
            nix::sys::socket::getsockopt(&handle, nix::sys::socket::sockopt::ReceiveTimestampns)
                .expect("read"),
            "the receiver turned the arrival stamps on"
        );
        ctl.cut();
        t.join().expect("receiver").expect("received");
        // Stamps on (as the receiver had them before its sender started), eight datagrams
        // wait 50 ms before the receiver runs.
        let (tx, rx) = connected_pair();
        assert!(sock::enable_rx_timestamps(&rx));
        // Taken before they are sent: they cannot have waited longer than since then.
        let stamped = Instant::now();
        send_eight(&tx);
        std::thread::sleep(Duration::from_millis(50));
        let (ctl, t, _) = start(rx);
        let p = first_report(&tx);
        let waited = stamped.elapsed();
        ctl.cut();
        t.join().expect("receiver").expect("received");
        // The receiver reports its first read at once: one of the eight datagrams or more.
        assert!((1..=8).contains(&p.seq), "reported {}", p.seq);
        assert!(
            (45_000..=waited.as_micros() as u64 + 1_000).contains(&p.held_us),
            "waited {} µs in the socket, reported {} µs",
            waited.as_micros(),
            p.held_us
        );
        assert!(p.window > 0);
    }

    /// A receiver reports its progress by sequence number, not by datagrams read, so that
    /// loss on the path never holds its sender back; and when nothing more comes after
    /// datagrams it has not reported, it reports them (a held sender learns at once that
    /// all it sent was read). With the socket's default buffer (on a stock kernel a window
    /// of 69 datagrams, a report every 4 sequence numbers): datagrams 1, 1 + 2 × 4 and
    /// 1 + 7 × 4 (the rest lost) are three reports, where three datagrams read would be
    /// one; the next sequence number alone is reported once the receiver waited in vain.
    #[test]
    fn progress_is_reported_past_loss_and_when_the_stream_pauses() {
        let (tx, rx) = connected_pair();
        let rcvbuf = socket2::SockRef::from(&rx)
            .recv_buffer_size()
            .expect("size");
        let window = receiver_window(rcvbuf as u64, 1460);
        let cfg = DataConfig {
            window: true,
            ..config(Mode::Streaming)
        };
        let ctl = TestControl::new(Budget::Unbounded);
        let c = std::sync::Arc::new(StreamCounters::default());
        let receiver = {
            let (ctl, c, cfg) = (ctl.clone(), c.clone(), cfg.clone());
            std::thread::spawn(move || receive(&rx, &cfg, &ctl, &c, Vec::new()))
        };
        tx.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let every = progress_every(window, false);
        let mut datagram = vec![0u8; 1460];
        let mut reports = Vec::new();
        for seq in [1, 1 + every * 2, 1 + every * 7, 2 + every * 7] {
            let h = DatagramHeader {
                sec: 0,
                usec: 0,
                seq,
            };
            h.encode(&mut datagram, true);
            tx.send(&datagram).expect("send");
            if seq == 2 + every * 7 {
                // Not yet: one more sequence number is no report until the receiver waits.
                std::thread::sleep(Duration::from_millis(5));
                let mut buf = [0u8; 64];
                tx.set_nonblocking(true).expect("nonblocking");
                assert!(tx.recv(&mut buf).is_err(), "reported before a pause");
                tx.set_nonblocking(false).expect("blocking");
            }
            let mut buf = [0u8; 64];
            let n = tx.recv(&mut buf).expect("a report within 5 s");
            reports.push(Progress::decode(&buf[..n]).expect("a progress report").seq);
        }
        ctl.cut();
        receiver.join().expect("receiver").expect("received");
        assert_eq!(
            reports,
            [1, 1 + every * 2, 1 + every * 7, 2 + every * 7],
            "one report a datagram (every {every}), the last after a pause"
        );
    }

    /// Issue 14: between two flowlab ends at full speed the sender keeps within its
    /// receiver's window. Its first window sent, the sender waits for a report (the
    /// receiver starts only then); from there on the receiver's progress releases it —
    /// without reports it would creep on by probes of 8 datagrams every 10 ms and take
    /// over four minutes — and the receiving socket never overflows though the sender
    /// alone could fill it many times over. Without the window this sender would not
    /// wait at all.
    #[test]
    fn a_sender_at_full_speed_keeps_within_its_receivers_window() {
        let (tx, rx) = connected_pair();
        // 1 MiB (2 MiB as the kernel counts it): a window of 341 datagrams. Past rmem_max
        // where allowed (root, as CI), else as big as that lets it be.
        if !sock::force_recv_buffer(&rx, 1 << 20) {
            let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(1 << 20);
        }
        let cfg = DataConfig {
            backoff: true,
            window: true,
            ..config(Mode::Streaming)
        };
        let datagrams = 200_000u64;
        let sending = std::sync::Arc::new(StreamCounters::default());
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        {
            let (cfg, c) = (cfg.clone(), sending.clone());
            std::thread::spawn(move || {
                let ctl = TestControl::new(Budget::Blocks(datagrams.into()));
                let _ = sent_tx.send(send(&tx, &cfg, &ctl, &c));
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while sending.window_waits.load(Ordering::Relaxed) == 0 {
            assert!(Instant::now() < deadline, "the sender never waited");
            std::thread::sleep(Duration::from_micros(100));
        }
        let ctl = TestControl::new(Budget::Unbounded);
        let c = std::sync::Arc::new(StreamCounters::default());
        let receiver = {
            let (ctl, c) = (ctl.clone(), c.clone());
            std::thread::spawn(move || receive(&rx, &cfg, &ctl, &c, Vec::new()))
        };
        sent_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the sender finished within a minute: its receiver's reports let it go")
            .expect("sent");
        let deadline = Instant::now() + Duration::from_secs(20);
        while c.blocks.load(Ordering::Relaxed) < datagrams && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        ctl.cut();
        receiver.join().expect("receiver").expect("received");
        assert_eq!(
            c.rcvbuf_drops.load(Ordering::Relaxed),
            0,
            "the socket overflowed"
        );
        assert_eq!(
            c.blocks.load(Ordering::Relaxed),
            datagrams,
            "every datagram read"
        );
        assert_eq!(sending.blocks.load(Ordering::Relaxed), datagrams);
    }

    /// A receiving thread pinned to one CPU naps between batches of a fast stream at full
    /// speed (it reads without waiting and finds data), and ends when told; the same
    /// stream into a receiver whose test is paced never does (the sender here is the
    /// test's own loop either way: this checks the receiver's rule). Where the host's
    /// `rmem_max` grants less than a nap needs, no receiver naps, and the test says so.
    #[test]
    fn a_pinned_receiver_at_full_speed_naps_and_a_paced_one_does_not() {
        let Some(cpu) = cpu::cpu_to_pin_or_skip("no receiver naps") else {
            return;
        };
        let online = cpu::online_cpus();
        // How long the stream at full speed lasted: the paced receiver gets as long.
        let mut lasted = Duration::from_millis(300);
        for rate_bps in [0, 1_000_000_000] {
            let (sock, peer) = connected_pair();
            // Past rmem_max where allowed (root, as CI), else as big as that lets it be.
            let forced = sock::force_recv_buffer(&sock, 4 << 20);
            let sock_ref = socket2::SockRef::from(&sock);
            if !forced {
                let _ = sock_ref.set_recv_buffer_size(4 << 20);
            }
            let roomy = sock_ref.recv_buffer_size().expect("SO_RCVBUF") >= NAP_MIN_RCVBUF;
            assert!(
                roomy || !forced,
                "a forced buffer of 4 MiB is room for a nap"
            );
            let ctl = TestControl::new(Budget::Unbounded);
            let c = std::sync::Arc::new(StreamCounters::default());
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            {
                let (ctl, c) = (ctl.clone(), c.clone());
                std::thread::spawn(move || {
                    cpu::pin_thread(cpu).expect("pin");
                    let pinned = cpu::pinned_to_one_cpu();
                    let cfg = DataConfig {
                        len: 8192,
                        rate_bps,
                        affinity: Some(cpu),
                        ..config(Mode::Streaming)
                    };
                    let r = receive(&sock, &cfg, &ctl, &c, Vec::new());
                    let _ = done_tx.send((r, pinned));
                });
            }
            // 8 KiB datagrams, as fast as one thread sends them (64 KiB every 200 µs is
            // 2.6 Gbit/s, eight sends), with a pause now and then for the queue to run
            // dry: for 300 ms, and at full speed on until the receiver has read without
            // waiting (10 s at most): on a busy host the sender may get too little of a
            // CPU to keep up that rate over every 10 ms window for a while.
            let mut datagram = vec![0u8; 8192];
            let (mut seq, mut sent) = (0u64, 0u64);
            let start = Instant::now();
            let more = |elapsed: Duration| {
                elapsed < lasted
                    || (rate_bps == 0
                        && c.polled_reads.load(Ordering::Relaxed) == 0
                        && elapsed < Duration::from_secs(10))
            };
            while more(start.elapsed()) {
                for _ in 0..256 {
                    seq += 1;
                    stamp(&mut datagram, seq, 0, true);
                    if peer.send(&datagram).is_ok() {
                        sent += datagram.len() as u64;
                    }
                }
                std::thread::sleep(Duration::from_micros(300));
            }
            if rate_bps == 0 {
                lasted = start.elapsed();
            }
            // Until the count stops growing (a datagram the socket dropped is never
            // read), then stop.
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut last = u64::MAX;
            while Instant::now() < deadline {
                let now = c.bytes.load(Ordering::Relaxed);
                if now == last {
                    break;
                }
                last = now;
                std::thread::sleep(Duration::from_millis(50));
            }
            ctl.cut();
            // Bounded: a receiver that never ends fails the test, not the suite.
            let (result, pinned) = done_rx
                .recv_timeout(Duration::from_secs(60))
                .expect("the receiver ends within 60 s");
            result.expect("received");
            assert!(pinned, "pinned to CPU {cpu} of {online}");
            let (bytes, polled) = (
                c.bytes.load(Ordering::Relaxed),
                c.polled_reads.load(Ordering::Relaxed),
            );
            assert!(bytes > 0 && bytes <= sent, "{bytes} of {sent} bytes");
            if rate_bps == 0 && roomy {
                assert!(polled > 0, "a fast stream at full speed: read between naps");
            } else if rate_bps == 0 {
                assert_eq!(polled, 0, "a buffer too small for a nap: no nap");
                eprintln!("net.core.rmem_max grants less than a nap needs: checked no nap");
            } else {
                assert_eq!(polled, 0, "a paced test's receiver never naps");
            }
        }
    }

    /// Three messages to a peer that ignores the first copy of the second: the sender
    /// waits one RTO for it (no sooner), sends it again once, and ends when the third
    /// is acknowledged.
    #[test]
    fn stop_and_wait_resends_after_the_rto_and_only_then() {
        let (sock, peer) = connected_pair();
        let rto = Duration::from_millis(120);
        let cfg = DataConfig {
            len: 100,
            rto,
            ..config(Mode::StopAndWait)
        };
        let ctl = TestControl::new(Budget::Blocks(3.into()));
        let c = StreamCounters::default();
        let acks = std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            let mut dropped_at = None;
            let mut resent_after = None;
            loop {
                let (n, from) = peer.recv_from(&mut buf).expect("recv");
                let seq = DatagramHeader::decode(&buf[..n], true).expect("header").seq;
                if seq == 2 && dropped_at.is_none() {
                    dropped_at = Some(Instant::now());
                    continue;
                }
                if seq == 2 && resent_after.is_none() {
                    resent_after = dropped_at.map(|t| t.elapsed());
                }
                peer.send_to(&Ack { seq }.encode(), from).expect("ack");
                if seq == 3 {
                    return resent_after;
                }
            }
        });
        send_stop_and_wait(&sock, &cfg, &ctl, &c).expect("sent");
        let waited = acks
            .join()
            .expect("peer")
            .expect("message 2 was sent again");
        assert_eq!(c.blocks.load(Ordering::Relaxed), 3);
        assert_eq!(c.sw_retransmits.load(Ordering::Relaxed), 1);
        // The peer starts its clock when the first copy arrives, a little after it
        // left: allow that much (far less than a tenth of the RTO on loopback).
        assert!(
            waited >= rto.mul_f64(0.9),
            "resent after {waited:?}, before the RTO"
        );
    }
}
