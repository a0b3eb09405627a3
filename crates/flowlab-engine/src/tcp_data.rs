//! Moving data over one TCP stream: streaming and stop-and-wait, send and receive.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;

use flowlab_proto::params::Mode;
use flowlab_proto::udp::Ack;

use crate::buf::PageBuf;
use crate::pacing::Pacer;
use crate::stream::{DataConfig, Drain, StreamCounters, TestControl, is_timeout};
use crate::trace::Tracer;

/// The payload every write carries, page-aligned ([`PageBuf`]: the kernel's copy runs at
/// full speed). Its content does not matter; a fixed, non-zero pattern of 251 bytes keeps
/// compression anywhere on the path from flattering the numbers. `repeating` (iperf3's
/// `--repeating-payload`) is iperf3's pattern instead: the digits 0 to 9 over and over.
pub(crate) fn payload(len: usize, repeating: bool) -> PageBuf {
    if repeating {
        PageBuf::filled(len, |i| b'0' + (i % 10) as u8)
    } else {
        PageBuf::filled(len, |i| (i.wrapping_mul(131) % 251) as u8)
    }
}

/// The buffer a TCP receiver reads into: page-aligned ([`PageBuf`]), at least 128 KiB
/// (iperf3's default block) so that one read can take what a wake-up finds queued.
pub(crate) fn receive_buffer(len: usize) -> PageBuf {
    PageBuf::zeroed(len.max(128 * 1024))
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
            break Ok(());
        };
        let sent = match file.as_mut() {
            Some(f) => f.send(sock, n, ctl, tracer.as_mut()),
            None => {
                if framed {
                    buf[..head].copy_from_slice(&(n as u32).to_be_bytes());
                }
                write_fully(sock, &buf[..head + n], ctl, tracer.as_mut()).saturating_sub(head)
            }
        };
        c.bytes.fetch_add(sent as u64, Ordering::Relaxed);
        if let Some(p) = pacer.as_mut() {
            p.sent(sent);
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
    }
    result
}

/// Writes all of `buf` unless the test is stopped meanwhile; returns the bytes written.
fn write_fully(
    mut sock: &TcpStream,
    buf: &[u8],
    ctl: &TestControl,
    tracer: Option<&mut Tracer<'_>>,
) -> usize {
    send_all(sock, buf.len(), ctl, tracer, |off| sock.write(&buf[off..]))
}

/// Sends `n` bytes with `send(bytes sent so far)` until done, the peer is gone, or the
/// test is stopped; returns the bytes sent. A send blocked by a full send buffer times
/// out every trace period (the socket's SO_SNDTIMEO), so a stalled stream is still
/// sampled on time and a stop is noticed.
fn send_all(
    sock: &TcpStream,
    n: usize,
    ctl: &TestControl,
    mut tracer: Option<&mut Tracer<'_>>,
    mut send: impl FnMut(usize) -> io::Result<usize>,
) -> usize {
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
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {
                if ctl.stop_send.load(Ordering::Acquire) {
                    break;
                }
                if let Some(t) = tracer.as_deref_mut() {
                    t.tick(sock, ctl);
                }
            }
            Err(_) => break,
        }
    }
    off
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
        let got = match sock.read(&mut buf[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => 0,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => break,
            Err(e) => return Err(e),
        };
        if got > 0 {
            if let Some(f) = &cfg.file {
                // `-F`: what was read, to the file; a write that fails ends the stream,
                // and is said (a stream's own errors are only logged at debug level).
                if let Err(e) = (&**f).write_all(&buf[..got]) {
                    tracing::warn!("-F: writing what was received: {e}");
                    return Err(e);
                }
            }
            c.bytes.fetch_add(got as u64, Ordering::Relaxed);
            c.end_us.store(ctl.elapsed_us().max(1), Ordering::Relaxed);
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
    ) -> usize {
        let start = self.at.unwrap_or(0);
        let sent = send_all(sock, n, ctl, tracer, |off| {
            let mut at = (start + off as u64) as libc::off_t;
            nix::sys::sendfile::sendfile(sock.as_fd(), self.file.as_fd(), Some(&mut at), n - off)
                .map_err(io::Error::from)
        });
        if let Some(at) = self.at.as_mut() {
            *at += sent as u64;
        }
        sent
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
            assert!(r.len() >= len.max(128 * 1024));
            let p = payload(len, false);
            assert_eq!(p.as_ptr() as usize % crate::buf::ALIGN, 0);
            assert_eq!(p.len(), len);
            assert_eq!(p[131], (131 * 131 % 251) as u8);
            assert_eq!(&payload(len, true)[..12], b"012345678901");
        }
    }
}
