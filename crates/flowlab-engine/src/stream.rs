//! Data streams: what one stream is, what it counts, and what its thread shares with the
//! test (`session` starts the threads; `tcp_data` and `udp_data` move the data).
//!
//! Client and server run streams the same way: each stream gets a thread that sends or
//! receives until told to stop (or until the shared byte/block budget runs out), counting
//! into [`StreamCounters`] that the control side snapshots for intervals and results.

use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlab_proto::params::Mode;

use crate::udp_stats::{UdpCounts, UdpReceiverStats};

/// Which way data flows on a stream, seen from this end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Send,
    Receive,
}

/// A connected data socket.
#[derive(Debug, Clone)]
pub enum Transport {
    Tcp(Arc<TcpStream>),
    Udp(Arc<UdpSocket>),
}

/// How the data on every stream of a test moves.
#[derive(Debug, Clone)]
pub struct DataConfig {
    pub mode: Mode,
    /// Bytes per write (TCP) or per datagram (UDP).
    pub len: usize,
    /// Target rate per stream in bits/s; 0 = unlimited.
    pub rate_bps: u64,
    pub counters_64bit: bool,
    /// Stop-and-wait over UDP: retransmission timeout.
    pub rto: Duration,
    /// TCP: send with sendfile(2) from an in-memory file instead of write(2).
    pub zerocopy: bool,
    /// TCP senders close their write side when they stop. A flowlab server always does
    /// (a stock iperf3 client blocks reading until the server's streams close); a flowlab
    /// client does when its peer is flowlab.
    pub close_when_done: bool,
    /// TCP receivers told to stop read on to end-of-file (the peer is flowlab and closes
    /// its side), so every byte sent is counted; otherwise they stop after a quiet gap.
    pub drain_to_eof: bool,
    /// UDP at unlimited rate, both ends flowlab: receivers report their socket's overflow
    /// drops to the sender, which backs off ([`crate::pacing::Backoff`]).
    pub backoff: bool,
    /// UDP streaming, both ends flowlab: receivers report their progress and the room in
    /// their socket, and senders keep within it ([`crate::pacing::ReceiverWindow`]).
    pub window: bool,
    /// The control connection's least round trip when the test started: a paced sender's
    /// estimate of what the path holds until its receiver's reports measure it.
    pub path_rtt: Option<Duration>,
    /// `--trace`: TCP streams sample TCP_INFO this often.
    pub trace: Option<Duration>,
    /// `-A`: the CPU each stream's thread runs on.
    pub affinity: Option<usize>,
    /// `--fq-rate`: senders' sockets paced by the kernel to this, bits/s (0: not set).
    pub fq_rate_bps: u64,
    /// `--repeating-payload`: senders send iperf3's repeating digits.
    pub repeating_payload: bool,
    /// Paced senders send this many bytes back to back ([`burst_bytes`]; 0: write by
    /// write).
    pub burst_bytes: u64,
    /// `-F`: TCP senders send this file's content, from its start, and receivers write
    /// what they read to it.
    pub file: Option<Arc<std::fs::File>>,
    /// `--skip-rx-copy`: receivers discard what they read in the kernel (MSG_TRUNC);
    /// a UDP receiver copies each datagram's header alone, one datagram a read.
    pub skip_rx_copy: bool,
    /// UDP senders hand the kernel up to this many bytes a send, cut into datagrams
    /// there (GSO); 0: one datagram a send.
    pub gso_bytes: usize,
    /// UDP receivers take the kernel's coalesced reads (GRO).
    pub gro: bool,
}

/// The bytes a paced sender sends at once: `burst` blocks of `len` (iperf3's `-b
/// RATE/BURST`), or what `rate_bps` moves in one `pacing_timer_us` when that timer is
/// coarser than 1 ms — iperf3 sends what its timer finds due each tick; flowlab paces each
/// write, at least as finely as iperf3's default 1 ms timer — whichever is more. 0: paced
/// write by write.
pub fn burst_bytes(rate_bps: u64, len: usize, burst: u64, pacing_timer_us: u64) -> u64 {
    let blocks = burst.saturating_mul(len as u64);
    let tick = if pacing_timer_us > 1000 {
        (rate_bps as f64 / 8.0 * pacing_timer_us as f64 / 1e6) as u64
    } else {
        0
    };
    if rate_bps == 0 { 0 } else { blocks.max(tick) }
}

/// Writes reserved together ([`Budget::take_batch`]): `writes` of the asked length but the
/// last, `bytes` in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub bytes: usize,
    pub writes: usize,
}

/// What bounds the amount of data over all streams of one direction.
#[derive(Debug)]
pub enum Budget {
    Unbounded,
    /// Bytes left to send.
    Bytes(AtomicU64),
    /// Blocks (writes or datagrams) left to send.
    Blocks(AtomicU64),
}

impl Budget {
    /// Reserves the next write of at most `len` bytes; `None` when the budget is spent.
    pub fn take(&self, len: usize) -> Option<usize> {
        match self {
            Budget::Unbounded => Some(len),
            Budget::Bytes(left) => Self::reserve(left, len as u64).map(|n| n as usize),
            Budget::Blocks(left) => Self::reserve(left, 1).map(|_| len),
        }
    }

    /// Reserves up to `count` writes of `len` bytes at once (a UDP GSO batch: one atomic
    /// operation for the batch, not one per datagram); only the last write may be short.
    /// `None` when the budget is spent.
    pub fn take_batch(&self, len: usize, count: usize) -> Option<Batch> {
        let (len, count) = (len.max(1), count.max(1));
        match self {
            Budget::Unbounded => Some(Batch {
                bytes: len * count,
                writes: count,
            }),
            Budget::Bytes(left) => Self::reserve(left, (len * count) as u64).map(|b| Batch {
                bytes: b as usize,
                writes: (b as usize).div_ceil(len),
            }),
            Budget::Blocks(left) => Self::reserve(left, count as u64).map(|k| Batch {
                bytes: k as usize * len,
                writes: k as usize,
            }),
        }
    }

    /// Gives back a batch that could not be sent.
    pub fn give_back_batch(&self, batch: Batch) {
        match self {
            Budget::Unbounded => {}
            Budget::Bytes(left) => {
                left.fetch_add(batch.bytes as u64, Ordering::AcqRel);
            }
            Budget::Blocks(left) => {
                left.fetch_add(batch.writes as u64, Ordering::AcqRel);
            }
        }
    }

    /// Takes up to `want` from `left`; what was taken, `None` when nothing was left.
    fn reserve(left: &AtomicU64, want: u64) -> Option<u64> {
        left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| {
            l.checked_sub(want.min(l)).filter(|_| l > 0)
        })
        .ok()
        .map(|l| want.min(l))
    }

    /// Gives back a reservation that could not be sent (the test was stopped).
    pub fn give_back(&self, len: usize) {
        match self {
            Budget::Unbounded => {}
            Budget::Bytes(left) => {
                left.fetch_add(len as u64, Ordering::AcqRel);
            }
            Budget::Blocks(left) => {
                left.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    pub fn is_bounded(&self) -> bool {
        !matches!(self, Budget::Unbounded)
    }
}

/// State shared by all streams of one test.
#[derive(Debug)]
pub struct TestControl {
    /// Set to end sending.
    pub stop_send: AtomicBool,
    /// Set to make receivers drain what is still in flight and finish.
    pub stop_recv: AtomicBool,
    /// Set to make receivers finish without draining: the test was cut short.
    pub cut: AtomicBool,
    /// The test's clock: when data started to flow.
    pub epoch: Instant,
    pub budget: Budget,
    /// Becomes readable when a stream thread ends, so a controller can sleep until
    /// something happens instead of polling (`None` where eventfd is unavailable).
    pub ended: Option<nix::sys::eventfd::EventFd>,
}

impl TestControl {
    pub fn new(budget: Budget) -> Arc<Self> {
        let ended = nix::sys::eventfd::EventFd::from_flags(
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )
        .ok();
        Arc::new(TestControl {
            stop_send: AtomicBool::new(false),
            stop_recv: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            epoch: Instant::now(),
            budget,
            ended,
        })
    }

    pub fn elapsed_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    pub fn stop(&self) {
        self.stop_send.store(true, Ordering::Release);
        self.stop_recv.store(true, Ordering::Release);
    }

    /// Stops everything at once: receivers do not wait for the data still coming.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::Release);
        self.stop();
    }
}

/// What one stream counted so far. Written by the stream's thread, read by anyone.
#[derive(Debug, Default)]
pub struct StreamCounters {
    /// Bytes sent or received (duplicates included).
    pub bytes: AtomicU64,
    /// Writes (TCP), datagrams (UDP) or messages (stop-and-wait) sent or received.
    pub blocks: AtomicU64,
    /// Stop-and-wait: messages sent again after a timeout.
    pub sw_retransmits: AtomicU64,
    /// When the thread stopped moving data, µs on the test clock (0: still running).
    pub end_us: AtomicU64,
    /// Thread CPU time, µs.
    pub cpu_user_us: AtomicU64,
    pub cpu_system_us: AtomicU64,
    pub finished: AtomicBool,
    /// UDP receivers: times the socket dropped arriving data because its buffer was full
    /// (the kernel's SO_RXQ_OVFL count: kernel packets, each one datagram or a GRO batch).
    pub rcvbuf_drops: AtomicU64,
    /// UDP senders with backoff: how often they slowed down on an overflow report.
    pub backoff_cuts: AtomicU64,
    /// UDP senders with a receiver window: how often they waited for the receiver's
    /// progress, and how many of those waits ran out before a report let them go on
    /// (counted for the tests and the debug log; not reported).
    pub window_waits: AtomicU64,
    /// Of those waits, the ones after the receiver's first report (the first is how a
    /// stream starts on a short path, not the receiver falling behind): in a paced test,
    /// times the receiver did not keep up (reported as `receiver_holds`).
    pub receiver_holds: AtomicU64,
    pub window_timeouts: AtomicU64,
    /// Receivers pinned to a CPU: reads made without waiting that found data (TCP's poll
    /// while data flows fast, `tcp_data::SpinRead`; UDP's nap between batches,
    /// `udp_data::NapRead`).
    pub polled_reads: AtomicU64,
    /// `--trace` samples of a TCP stream's socket, oldest first: handed over by its
    /// thread's tracer when the thread stops.
    pub trace: Mutex<Vec<flowlab_proto::trace::TraceSample>>,
    /// More samples were due than [`crate::trace::MAX_SAMPLES`].
    pub trace_truncated: AtomicBool,
    /// UDP receivers only.
    pub udp: Mutex<Option<UdpReceiverStats>>,
    /// Why the stream's thread ended while the test still ran (a reset, a timeout, a
    /// failed write): what a test whose every stream failed says. An error once the test
    /// is ending (the peer closing first) is not a failure.
    pub failure: Mutex<Option<String>>,
}

impl StreamCounters {
    pub fn udp_counts(&self) -> Option<UdpCounts> {
        self.udp
            .lock()
            .ok()
            .and_then(|g| g.as_ref().map(UdpReceiverStats::counts))
    }
}

/// Stream ids as iperf3 numbers them: 1, 3, 4, 5, …
pub fn stream_id(index: usize) -> i64 {
    if index == 0 { 1 } else { index as i64 + 2 }
}

/// UDP socket buffer asked for when `-w` is not given: large enough that a fast sender
/// does not overrun the receiver between two reads (the kernel caps it at rmem_max).
pub const UDP_DEFAULT_BUFFER: u64 = 4 * 1024 * 1024;

/// A stream ready to run.
#[derive(Debug)]
pub struct StreamPlan {
    /// iperf3's numbering: 1, 3, 4, 5, …
    pub id: i64,
    pub role: Role,
    pub transport: Transport,
    /// UDP datagrams that arrived before the handshake finished (reverse mode).
    pub early: Vec<Vec<u8>>,
}

/// How long a receiver told to stop keeps reading what is still in flight.
pub const DRAIN_IDLE: Duration = Duration::from_millis(100);
/// The longest a receiver drains, even when data keeps coming.
pub const DRAIN_MAX: Duration = Duration::from_secs(3);
/// Socket timeout that lets a blocked thread look at the stop flags.
pub const POLL: Duration = Duration::from_millis(50);

/// Tracks a receiver's drain phase.
#[derive(Debug, Default)]
pub struct Drain {
    since: Option<Instant>,
    last_data: Option<Instant>,
}

impl Drain {
    /// Called after each read attempt; true when the receiver should finish.
    /// `got_data` says whether the attempt returned data; `until_eof` makes the receiver
    /// wait for end-of-file (up to [`DRAIN_MAX`]) instead of an idle gap.
    pub fn done(&mut self, ctl: &TestControl, got_data: bool, until_eof: bool) -> bool {
        if !ctl.stop_recv.load(Ordering::Acquire) {
            return false;
        }
        if ctl.cut.load(Ordering::Acquire) {
            return true;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if got_data {
            self.last_data = Some(now);
        }
        if now - since > DRAIN_MAX {
            return true;
        }
        if until_eof {
            return false;
        }
        now - self.last_data.unwrap_or(since) > DRAIN_IDLE
    }
}

/// True for the errors a socket timeout produces.
pub fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_budget_is_exact_across_takers() {
        let b = Budget::Bytes(AtomicU64::new(1000));
        assert_eq!(b.take(300), Some(300));
        assert_eq!(b.take(300), Some(300));
        assert_eq!(b.take(300), Some(300));
        assert_eq!(b.take(300), Some(100));
        assert_eq!(b.take(300), None);
        b.give_back(50);
        assert_eq!(b.take(300), Some(50));
    }

    #[test]
    fn block_budget_counts_writes() {
        let b = Budget::Blocks(AtomicU64::new(2));
        assert_eq!(b.take(10), Some(10));
        assert_eq!(b.take(10), Some(10));
        assert_eq!(b.take(10), None);
        assert_eq!(Budget::Unbounded.take(7), Some(7));
    }

    /// A batch takes what single takes would have, in one reservation: whole writes of
    /// `len`, the last one short when the byte budget ends inside it.
    #[test]
    fn batches_take_what_single_writes_would() {
        let b = Budget::Bytes(AtomicU64::new(1000));
        let batch = |bytes, writes| Some(Batch { bytes, writes });
        assert_eq!(b.take_batch(300, 2), batch(600, 2));
        assert_eq!(b.take_batch(300, 2), batch(400, 2));
        assert_eq!(b.take_batch(300, 2), None);
        b.give_back_batch(Batch {
            bytes: 350,
            writes: 2,
        });
        assert_eq!(b.take_batch(300, 64), batch(350, 2));
        let k = Budget::Blocks(AtomicU64::new(5));
        assert_eq!(k.take_batch(1460, 4), batch(4 * 1460, 4));
        assert_eq!(k.take_batch(1460, 4), batch(1460, 1));
        assert_eq!(k.take_batch(1460, 4), None);
        k.give_back_batch(Batch {
            bytes: 2920,
            writes: 2,
        });
        assert_eq!(k.take_batch(1460, 4), batch(2920, 2));
        assert_eq!(Budget::Unbounded.take_batch(1460, 3), batch(4380, 3));
        // Shared by threads, a byte budget is exact: every byte is taken once.
        let shared = Budget::Bytes(AtomicU64::new(1_000_003));
        let taken: usize = std::thread::scope(|s| {
            let hands: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut n = 0;
                        while let Some(b) = shared.take_batch(1000, 7) {
                            assert!(b.writes >= 1 && b.bytes <= b.writes * 1000);
                            n += b.bytes;
                        }
                        n
                    })
                })
                .collect();
            hands.into_iter().map(|h| h.join().expect("thread")).sum()
        });
        assert_eq!(taken, 1_000_003);
    }
}
