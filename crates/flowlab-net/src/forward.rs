//! The user-space link emulator's I/O: for each emulated link, one thread in the link's
//! middle namespace reads every frame arriving on one of its two veths with an AF_PACKET
//! socket, passes it through that direction's [`DelayLine`], and writes it, when due, to
//! the other veth. The middle namespace has no addresses and no forwarding, so its kernel
//! drops the frames itself; the emulator is the only way across.
//!
//! ```text
//!  node a: l<i> ⇄ a │ fl-<topo>-link.<i> │ b ⇄ l<i> :node b
//!   tbf (rate,queue) │  emulator thread  │ tbf (rate,queue)
//! ```

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::emulator::{DelayLine, RecentPolls, SendCost, Verdict, WakeMargin, arrivals_can_wait};

/// One direction's emulation, as the `up` process hands it to the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LineSpec {
    pub delay_us: u64,
    pub jitter_us: u64,
    pub loss: f64,
    pub limit: u64,
}

/// One link for the emulator: its middle namespace and the two veths there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmulatedLink {
    pub name: String,
    pub namespace: String,
    /// Frames from node a arrive on this device.
    pub a: String,
    pub b: String,
    pub a_to_b: LineSpec,
    pub b_to_a: LineSpec,
    /// Carry TCP's and UDP's GSO super-frames whole (up to 64 KiB, with a virtio-net
    /// header saying how the kernel is to cut them later: PACKET_VNET_HDR) instead of
    /// frames cut to the MTU before the emulator. Set for links without random loss and
    /// jitter, where a frame's fate applies to all its segments alike; the nodes' ends
    /// keep their offloads on.
    #[serde(default)]
    pub gso: bool,
}

impl EmulatedLink {
    /// Whether a link with these directions can carry super-frames ([`Self::gso`]):
    /// loss and jitter are decided per frame, and a super-frame would lose or reorder
    /// up to 44 segments together.
    pub fn gso_fits(a_to_b: &LineSpec, b_to_a: &LineSpec) -> bool {
        [a_to_b, b_to_a]
            .iter()
            .all(|s| s.loss == 0.0 && s.jitter_us == 0)
    }
}

/// What happened to the frames of one direction.
#[derive(Debug)]
pub struct Counters {
    pub forwarded: AtomicU64,
    /// Bytes of the frames forwarded (with their link-layer header).
    pub forwarded_bytes: AtomicU64,
    /// Dropped by the configured random loss.
    pub lost: AtomicU64,
    /// Dropped because the delay line was full.
    pub line_full: AtomicU64,
    /// Dropped by the kernel before the emulator read them (its socket buffer overflowed:
    /// the emulator could not keep up), or refused when written.
    pub emulator_drops: AtomicU64,
    /// Frames longer than the receive buffer (an offload left on).
    pub oversize: AtomicU64,
    /// Frames written more than [`LATE`] after they were due (the emulator's thread did
    /// not get a CPU in time), and the latest of them, µs.
    pub late: AtomicU64,
    pub max_late_us: AtomicU64,
    /// The lateness of every forwarded frame added up, ns (its mean is what an emulated
    /// crossing adds to the configured delay).
    pub late_total_ns: AtomicU64,
    /// The current estimate of what handing a frame on costs, ns ([`SendCost`]): frames
    /// are written that much before they are due.
    pub send_cost_ns: AtomicU64,
    /// Forwarded frames by lateness ([`late_bucket`]): its quantiles are what the
    /// emulator's own waiting for a CPU added to a crossing.
    pub late_histogram: [AtomicU64; LATE_BUCKETS],
    /// Forwarded frames by the part of their lateness that passed while the emulator's
    /// thread was in its poll ([`RecentPolls`]): its wake-ups'. The rest passed while
    /// the thread was up (its own work on other frames, or the CPU taken from it).
    pub woke_late_histogram: [AtomicU64; LATE_BUCKETS],
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            forwarded: AtomicU64::new(0),
            forwarded_bytes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            line_full: AtomicU64::new(0),
            emulator_drops: AtomicU64::new(0),
            oversize: AtomicU64::new(0),
            late: AtomicU64::new(0),
            max_late_us: AtomicU64::new(0),
            late_total_ns: AtomicU64::new(0),
            send_cost_ns: AtomicU64::new(0),
            late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
            woke_late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Buckets of the lateness histogram: under 1 µs, then a quarter octave each from 1 µs
/// to 2^16.75 µs (110 ms), the last one holding everything later.
pub const LATE_BUCKETS: usize = 1 + 4 * 17;

/// The histogram bucket of a frame written `late_ns` after it was due:
/// 1 + ⌊4 · log2(late_ns / 1000)⌋ from 1 µs on, without floating point (it runs for
/// every frame). With o = ⌊log2 late_ns⌋ and m = late_ns / 2^o in [1, 2), that is
/// 1 + 4o − 40 + j, where j counts the thresholds 2^((j − 40 + 4·log2 1000) / 4) that m
/// reaches (log2 1000 = 9.966: 4·log2 1000 is 0.137 short of 40), here in 16-bit fixed
/// point.
pub fn late_bucket(late_ns: u64) -> usize {
    const THRESHOLDS: [u64; 4] = [76_110, 90_510, 107_635, 128_000];
    if late_ns < 1000 {
        return 0;
    }
    let octave = 63 - late_ns.leading_zeros() as usize;
    let mantissa = ((u128::from(late_ns) << 16) >> octave) as u64;
    let j = THRESHOLDS.iter().filter(|&&t| mantissa >= t).count();
    (1 + 4 * octave + j - 40).min(LATE_BUCKETS - 1)
}

/// The upper edge of bucket `i`, µs (bucket 0: 1 µs; the last: unbounded, `None`).
fn late_bucket_edge_us(i: usize) -> Option<f64> {
    (i < LATE_BUCKETS - 1).then(|| 2f64.powf(i as f64 / 4.0))
}

/// A frame written this much after its due time counts as late, ns.
pub const LATE: u64 = 500_000;

/// The counters of one link, both directions, and of its thread.
#[derive(Debug)]
pub struct LinkCounters {
    pub a_to_b: Counters,
    pub b_to_a: Counters,
    /// The thread's wake-ups by how late it came back from a sleep after the time it
    /// asked for ([`late_bucket`]; which sleeps count: `Slept::settle`): what the host's
    /// scheduler gave it, to compare with the frames'
    /// lateness (a wake-up later than the margin makes its frames late by the
    /// overshoot) and with another program's wake-ups on the same host.
    pub wakeup_late_histogram: [AtomicU64; LATE_BUCKETS],
}

impl Default for LinkCounters {
    fn default() -> Self {
        LinkCounters {
            a_to_b: Counters::default(),
            b_to_a: Counters::default(),
            wakeup_late_histogram: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// A snapshot of [`Counters`], for the stats file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DirectionStats {
    pub forwarded: u64,
    #[serde(default)]
    pub forwarded_bytes: u64,
    pub lost: u64,
    pub line_full: u64,
    pub emulator_drops: u64,
    pub oversize: u64,
    #[serde(default)]
    pub late: u64,
    #[serde(default)]
    pub max_late_us: u64,
    #[serde(default)]
    pub late_total_ns: u64,
    #[serde(default)]
    pub send_cost_ns: u64,
    /// Forwarded frames per lateness bucket ([`late_bucket`]), trailing empty buckets
    /// left out.
    #[serde(default)]
    pub late_histogram: Vec<u64>,
    /// Forwarded frames per bucket of the part of their lateness that passed while the
    /// thread was in its poll ([`Counters::woke_late_histogram`]), trailing empty
    /// buckets left out (empty from an emulator older than it).
    #[serde(default)]
    pub woke_late_histogram: Vec<u64>,
}

impl DirectionStats {
    /// The mean lateness of a forwarded frame, µs.
    pub fn mean_late_us(&self) -> f64 {
        self.late_total_ns as f64 / 1000.0 / self.forwarded.max(1) as f64
    }

    /// How late the frames forwarded since `earlier` (a snapshot of the same direction)
    /// were: (lateness, frames) per non-empty bucket, each lateness its bucket's upper
    /// edge (at most 19 % over; for the last bucket the latest frame's, or its lower
    /// edge, 110 ms, if that is more).
    pub fn late_since(&self, earlier: &DirectionStats) -> Vec<(Duration, u64)> {
        self.buckets_since(&self.late_histogram, &earlier.late_histogram)
    }

    /// The part of that lateness that passed while the thread was in its poll, in the
    /// same form (None from an emulator that did not count it). A frame's part is at
    /// most its lateness, so each quantile of this is at most the same quantile of
    /// [`late_since`](Self::late_since), but for frames counted between the reads of
    /// the two histograms (a snapshot is not atomic).
    pub fn woke_late_since(&self, earlier: &DirectionStats) -> Option<Vec<(Duration, u64)>> {
        let uncounted = self.woke_late_histogram.is_empty() && !self.late_histogram.is_empty();
        (!uncounted)
            .then(|| self.buckets_since(&self.woke_late_histogram, &earlier.woke_late_histogram))
    }

    fn buckets_since(&self, now: &[u64], earlier: &[u64]) -> Vec<(Duration, u64)> {
        buckets_between(now, earlier, self.max_late_us)
    }
}

/// The counts of histogram `now` less those of the same histogram's earlier snapshot,
/// as (lateness, count) per non-empty bucket, each lateness its bucket's upper edge; the
/// last bucket's at `latest_us` (the latest seen, which is read before the histograms
/// and so may lag them), never under the bucket's lower edge (110 ms).
fn buckets_between(now: &[u64], earlier: &[u64], latest_us: u64) -> Vec<(Duration, u64)> {
    (0..LATE_BUCKETS)
        .filter_map(|i| {
            let at = |h: &[u64]| h.get(i).copied().unwrap_or(0);
            let n = at(now).saturating_sub(at(earlier));
            let us = late_bucket_edge_us(i).unwrap_or_else(|| {
                let lower = late_bucket_edge_us(LATE_BUCKETS - 2).unwrap_or(0.0);
                (latest_us as f64).max(lower)
            });
            (n > 0).then(|| (Duration::from_secs_f64(us / 1e6), n))
        })
        .collect()
}

impl From<&Counters> for DirectionStats {
    fn from(c: &Counters) -> Self {
        DirectionStats {
            forwarded: c.forwarded.load(Relaxed),
            forwarded_bytes: c.forwarded_bytes.load(Relaxed),
            lost: c.lost.load(Relaxed),
            line_full: c.line_full.load(Relaxed),
            emulator_drops: c.emulator_drops.load(Relaxed),
            oversize: c.oversize.load(Relaxed),
            late: c.late.load(Relaxed),
            max_late_us: c.max_late_us.load(Relaxed),
            late_total_ns: c.late_total_ns.load(Relaxed),
            send_cost_ns: c.send_cost_ns.load(Relaxed),
            late_histogram: trimmed(&c.late_histogram),
            woke_late_histogram: trimmed(&c.woke_late_histogram),
        }
    }
}

/// A histogram's counts without its trailing empty buckets.
fn trimmed(histogram: &[AtomicU64]) -> Vec<u64> {
    let mut h: Vec<u64> = histogram.iter().map(|b| b.load(Relaxed)).collect();
    while h.last() == Some(&0) {
        h.pop();
    }
    h
}

/// One link's line in the stats file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkStats {
    pub link: String,
    pub a_to_b: DirectionStats,
    pub b_to_a: DirectionStats,
    /// The link thread's wake-ups per bucket of their lateness
    /// ([`LinkCounters::wakeup_late_histogram`]), trailing empty buckets left out; None
    /// from an emulator older than it.
    #[serde(default)]
    pub wakeup_late_histogram: Option<Vec<u64>>,
}

impl LinkStats {
    /// A snapshot of link `name`'s counters.
    pub fn of(name: &str, c: &LinkCounters) -> Self {
        LinkStats {
            link: name.to_owned(),
            a_to_b: (&c.a_to_b).into(),
            b_to_a: (&c.b_to_a).into(),
            wakeup_late_histogram: Some(trimmed(&c.wakeup_late_histogram)),
        }
    }

    /// How late the thread came back from its sleeps since `earlier` (a snapshot of the
    /// same link) after the time it asked for: (lateness, wake-ups) per non-empty bucket, each
    /// lateness its bucket's upper edge (the last bucket's its lower edge, 110 ms: a
    /// lower bound there). None when either snapshot is from an emulator that did not
    /// count them.
    pub fn wakeup_late_since(&self, earlier: &LinkStats) -> Option<Vec<(Duration, u64)>> {
        let now = self.wakeup_late_histogram.as_deref()?;
        let before = earlier.wakeup_late_histogram.as_deref()?;
        Some(buckets_between(now, before, 0))
    }
}

/// Frames up to this long are read whole (MTU 1500 plus headers, with room to spare).
const FRAME: usize = 2048;
/// A super-frame's buffer on a GSO link: a 64 KiB IP packet, its link-layer header and
/// the virtio-net header in front.
const SUPER_FRAME: usize = 65536 + 256;
/// `struct virtio_net_hdr` (include/uapi/linux/virtio_net.h), in front of every frame
/// of a socket with PACKET_VNET_HDR.
const VNET_HDR: usize = 10;
/// Frames taken per recvmmsg / sendmmsg call.
const BATCH: usize = 64;
/// Socket buffers of the emulator's sockets (root may exceed rmem_max / wmem_max).
const SOCKET_BUFFER: libc::c_int = 32 << 20;

/// An AF_PACKET socket bound to one interface, seeing every frame that arrives there.
struct PacketSocket {
    fd: OwnedFd,
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

pub(crate) fn set_int(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int of the size given.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

impl PacketSocket {
    /// A socket on `dev`; with `vnet`, frames carry a virtio-net header ([`VNET_HDR`])
    /// and may be GSO super-frames.
    fn open(dev: &str, vnet: bool) -> io::Result<Self> {
        let name = std::ffi::CString::new(dev)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
        // SAFETY: a plain C call on a valid NUL-terminated string.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{dev}: {e}")));
        }
        // Protocol 0: nothing is queued until the bind below names the interface.
        // SAFETY: a plain socket(2) call; the descriptor is owned at once.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `fd` was just returned by socket(2) and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Frames this socket itself writes are not read back (Linux 4.20; on older
        // kernels they are skipped by their packet type below).
        let _ = set_int(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1);
        if vnet {
            set_int(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, 1)
                .map_err(|e| io::Error::new(e.kind(), format!("{dev}: PACKET_VNET_HDR: {e}")))?;
        }
        set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, SOCKET_BUFFER)
            .or_else(|_| set_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, SOCKET_BUFFER))?;
        set_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, SOCKET_BUFFER)
            .or_else(|_| set_int(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, SOCKET_BUFFER))?;
        // Report software transmit stamps, without the frame, for the frames that ask
        // for one (see [`SendCost`]), and no second stamp on received frames (RX_FILTER,
        // Linux 4.13; older kernels add one, which CONTROL has room for). A kernel that
        // refuses both gets no compensation.
        let report = libc::SOF_TIMESTAMPING_SOFTWARE | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        let _ = set_int(
            &fd,
            libc::SOL_SOCKET,
            SO_TIMESTAMPING,
            (report | libc::SOF_TIMESTAMPING_OPT_RX_FILTER) as libc::c_int,
        )
        .or_else(|_| {
            set_int(
                &fd,
                libc::SOL_SOCKET,
                SO_TIMESTAMPING,
                report as libc::c_int,
            )
        });
        // SAFETY: sockaddr_ll is plain old data.
        let mut addr: libc::sockaddr_ll = unsafe { zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        addr.sll_ifindex = index as i32;
        // SAFETY: the address is a live sockaddr_ll of the size given.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(PacketSocket { fd })
    }

    /// The newest software transmit stamp waiting on the socket's error queue (wall clock,
    /// ns), reading them all; `None` when there was none.
    fn transmit_stamps(&self) -> io::Result<Option<i128>> {
        let mut newest = None;
        loop {
            let mut control = [0u64; CONTROL / 8];
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_control = control.as_mut_ptr().cast();
            h.msg_controllen = CONTROL as _;
            // SAFETY: the header points into `control`, which lives for the call; with
            // OPT_TSONLY there is no payload to read.
            let n = unsafe {
                libc::recvmsg(
                    self.fd.as_raw_fd(),
                    &mut h,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(newest),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            // SAFETY: the CMSG macros walk the control buffer the kernel filled, within
            // the length it reported in `h`.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPING {
                        // struct scm_timestamping: the software stamp comes first.
                        let t =
                            std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                        newest = Some(i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec));
                    }
                    c = libc::CMSG_NXTHDR(&h, c);
                }
            }
        }
    }

    /// The socket's pending error (SO_ERROR, as an errno; 0 for none), cleared by
    /// reading it.
    fn error(&self) -> i32 {
        match socket2::SockRef::from(&self.fd).take_error() {
            Ok(None) => 0,
            Ok(Some(e)) => e.raw_os_error().unwrap_or(libc::EIO),
            Err(_) => libc::EBADF,
        }
    }

    /// Frames the kernel dropped for this socket since the last call.
    fn kernel_drops(&self) -> u64 {
        // SAFETY: tpacket_stats is plain old data.
        let mut st: libc::tpacket_stats = unsafe { zeroed() };
        let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: the option buffer is a live tpacket_stats of the size given.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc == 0 { u64::from(st.tp_drops) } else { 0 }
    }
}

/// Control-message room per frame: one SCM_TIMESTAMPNS (a 16-byte header and a
/// 16-byte timespec) and, on kernels that add it, one SCM_TIMESTAMPING (a header and
/// three timespecs), with space to spare.
const CONTROL: usize = 128;

/// `SO_TIMESTAMPING` (asm-generic's `SO_TIMESTAMPING_OLD`, which is the one on 64-bit
/// architectures; the libc crate leaves it out for the time64 split). Its control
/// message, `SCM_TIMESTAMPING`, has the same number.
const SO_TIMESTAMPING: libc::c_int = 37;

/// A frame: a buffer of FRAME bytes and how much of it is the frame.
struct Frame {
    buf: Box<[u8]>,
    len: usize,
}

/// The recvmmsg / sendmmsg arrays, and the buffers the next receive fills (always
/// BATCH of them, so a receive of one frame replaces one buffer, not all).
struct Batch {
    /// How long a receive buffer is: [`FRAME`], or [`SUPER_FRAME`] on a GSO link.
    frame: usize,
    /// Buffers not in use, of `frame` bytes.
    pool: Pool,
    /// On a GSO link, buffers of [`FRAME`] bytes: a short frame (an ACK, a datagram) is
    /// copied into one, so that the delay line does not hold 64 KiB for each.
    small: Pool,
    ready: Vec<Box<[u8]>>,
    out: Vec<Frame>,
    iov: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_ll>,
    msgs: Vec<libc::mmsghdr>,
    /// u64s keep the control buffers aligned for cmsghdr.
    control: Vec<[u64; CONTROL / 8]>,
}

impl Batch {
    /// Takes back a frame's buffer into the pool of its length.
    fn give(&mut self, b: Box<[u8]>) {
        if b.len() == self.frame {
            self.pool.give(b);
        } else {
            self.small.give(b);
        }
    }

    fn new(frame: usize) -> Self {
        Batch {
            frame,
            pool: Pool::new(frame),
            small: Pool::new(FRAME),
            ready: (0..BATCH).map(|_| new_buffer(frame)).collect(),
            out: Vec::with_capacity(BATCH),
            // SAFETY: iovec, sockaddr_ll and mmsghdr are plain old data.
            iov: vec![unsafe { zeroed() }; BATCH],
            addrs: vec![unsafe { zeroed() }; BATCH],
            msgs: vec![unsafe { zeroed() }; BATCH],
            control: vec![[0; CONTROL / 8]; BATCH],
        }
    }
}

fn new_buffer(len: usize) -> Box<[u8]> {
    vec![0u8; len].into_boxed_slice()
}

/// The kernel's arrival time of a received message (SCM_TIMESTAMPNS, on the wall
/// clock), ns since the epoch.
pub(crate) fn arrival_ns(h: &libc::msghdr) -> Option<i128> {
    // SAFETY: the CMSG macros walk the control buffer the kernel filled, within the
    // length it reported in `h`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SO_TIMESTAMPNS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                return Some(i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec));
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Now on the wall clock (the clock of SO_TIMESTAMPNS), ns since the epoch.
pub(crate) fn wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

/// The emulator's clock: nanoseconds since it started (monotonic), and the conversion of
/// the kernel's wall-clock arrival stamps to it.
struct Clock {
    start: Instant,
}

impl Clock {
    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Wall-clock minus monotonic, now (both in ns).
    fn wall_offset(&self) -> i128 {
        wall_ns() - self.now() as i128
    }
}

/// Buffers of one length not in use, so that steady forwarding allocates nothing.
struct Pool {
    len: usize,
    free: Vec<Box<[u8]>>,
}

impl Pool {
    fn new(len: usize) -> Self {
        Pool {
            len,
            free: Vec::new(),
        }
    }

    fn take(&mut self) -> Box<[u8]> {
        self.free.pop().unwrap_or_else(|| new_buffer(self.len))
    }

    /// Takes back a buffer of this pool's length (one of another length is dropped).
    fn give(&mut self, b: Box<[u8]>) {
        // Keep at most what a few batches need; the delay line holds the rest.
        if b.len() == self.len && self.free.len() < 8 * BATCH {
            self.free.push(b);
        }
    }
}

/// Reads every frame waiting on `from` (up to a few batches, so that due frames are not
/// held back behind a flood) into `line`, stamped with its arrival time. Says whether
/// it read them all (false: a flood, more are waiting).
fn receive(
    from: &PacketSocket,
    line: &mut DelayLine<Frame>,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<bool> {
    for _ in 0..8 {
        for i in 0..BATCH {
            batch.iov[i] = libc::iovec {
                iov_base: batch.ready[i].as_mut_ptr().cast(),
                iov_len: batch.frame,
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_ll).cast();
            h.msg_namelen = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            h.msg_iov = &mut batch.iov[i];
            h.msg_iovlen = 1;
            h.msg_control = batch.control[i].as_mut_ptr().cast();
            h.msg_controllen = CONTROL as _;
            batch.msgs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: every header points into buffers, iovecs, addresses and control
        // buffers that live in `batch` for the call; the count is the arrays' length.
        let n = unsafe {
            libc::recvmmsg(
                from.fd.as_raw_fd(),
                batch.msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let now = clock.now();
        let offset = clock.wall_offset();
        let got = if n < 0 {
            let e = io::Error::last_os_error();
            if !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                return Err(e);
            }
            0
        } else {
            n as usize
        };
        for i in 0..got {
            let m = &batch.msgs[i];
            if batch.addrs[i].sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
                counters.oversize.fetch_add(1, Relaxed);
                continue;
            }
            // The delay runs from when the frame arrived, not from when this thread got
            // round to reading it (a sleeping vCPU can take 100 µs to wake).
            let arrived = arrival_ns(&m.msg_hdr).map_or(now, |wall| on_clock(wall, offset, now));
            let len = m.msg_len as usize;
            let frame = if batch.frame > FRAME && len <= FRAME {
                // A short frame on a GSO link moves to a small buffer; the large one
                // stays ready for the next receive.
                let mut small = batch.small.take();
                small[..len].copy_from_slice(&batch.ready[i][..len]);
                Frame { buf: small, len }
            } else {
                Frame {
                    buf: std::mem::replace(&mut batch.ready[i], batch.pool.take()),
                    len,
                }
            };
            match line.push(arrived, frame) {
                (Verdict::Queued(_), _) => {}
                (Verdict::Lost, Some(f)) => {
                    counters.lost.fetch_add(1, Relaxed);
                    batch.give(f.buf);
                }
                (Verdict::Full, Some(f)) => {
                    counters.line_full.fetch_add(1, Relaxed);
                    batch.give(f.buf);
                }
                (_, None) => {}
            }
        }
        if got < BATCH {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`receive`] from `from`, saying since when the socket is known to be empty (None: a
/// flood is left waiting).
fn read_all(
    from: &PacketSocket,
    line: &mut DelayLine<Frame>,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<Option<u64>> {
    let before = clock.now();
    Ok(receive(from, line, counters, batch, clock)?.then_some(before))
}

/// When a frame stamped `wall` (wall-clock ns) by the kernel arrived, on the emulator's
/// clock, read at `now` when the wall clock was `offset` ahead of it. A clock step could
/// put the stamp anywhere, and a frame that came before the clock started (between the
/// socket's opening and the first read) has no time on it: such stamps, and any more
/// than 10 ms old, count as `now`. (A negative time once wrapped to 2^64 − x: that
/// frame, and every frame behind it, would have left never.)
fn on_clock(wall: i128, offset: i128, now: u64) -> u64 {
    let mono = wall - offset;
    let earliest = (i128::from(now) - 10_000_000).max(0);
    if (earliest..=i128::from(now)).contains(&mono) {
        mono as u64
    } else {
        now
    }
}

/// Writes to `to` every frame of `line` that will be due by the time it reaches the next
/// node if written at `now` (`cost` estimates how long that takes), and asks for a
/// transmit stamp on one frame now and then to keep that estimate up to date. Each
/// frame's lateness is counted, and the part of it that passed while the thread was in
/// its poll.
fn transmit(
    line: &mut DelayLine<Frame>,
    at: Pass<'_>,
    to: &PacketSocket,
    cost: &mut SendCost,
    counters: &Counters,
    batch: &mut Batch,
    clock: &Clock,
) -> io::Result<()> {
    let Pass { now, polls } = at;
    let arrives = now + cost.estimate();
    loop {
        batch.out.clear();
        let mut late_ns = 0;
        while batch.out.len() < BATCH {
            match line.pop_due(arrives) {
                Some((due, f)) => {
                    let late = arrives - due;
                    late_ns += late;
                    counters.late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
                    let woke_late = polls.overdue_within(late, now);
                    counters.woke_late_histogram[late_bucket(woke_late)].fetch_add(1, Relaxed);
                    if late > LATE {
                        counters.late.fetch_add(1, Relaxed);
                        counters.max_late_us.fetch_max(late / 1000, Relaxed);
                    }
                    batch.out.push(f)
                }
                None => break,
            }
        }
        if batch.out.is_empty() {
            return Ok(());
        }
        counters.late_total_ns.fetch_add(late_ns, Relaxed);
        for (i, f) in batch.out.iter_mut().enumerate() {
            batch.iov[i] = libc::iovec {
                iov_base: f.buf.as_mut_ptr().cast(),
                iov_len: f.len,
            };
            // SAFETY: plain old data.
            let mut h: libc::msghdr = unsafe { zeroed() };
            h.msg_iov = &mut batch.iov[i];
            h.msg_iovlen = 1;
            batch.msgs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        let total = batch.out.len();
        if cost.wants_sample(now) {
            // The first frame carries a control message asking for a software transmit
            // stamp, which the veth driver takes as it hands the frame on.
            let c = &mut batch.control[0];
            c.fill(0);
            let h = &mut batch.msgs[0].msg_hdr;
            h.msg_control = c.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE is arithmetic; the buffer is CONTROL bytes, far more.
            h.msg_controllen = unsafe { libc::CMSG_SPACE(size_of::<u32>() as u32) } as _;
            // SAFETY: the header points at a zeroed, aligned buffer large enough for one
            // control message carrying a u32.
            unsafe {
                let cm = libc::CMSG_FIRSTHDR(h);
                (*cm).cmsg_level = libc::SOL_SOCKET;
                (*cm).cmsg_type = SO_TIMESTAMPING;
                (*cm).cmsg_len = libc::CMSG_LEN(size_of::<u32>() as u32) as _;
                std::ptr::write_unaligned(
                    libc::CMSG_DATA(cm).cast::<u32>(),
                    libc::SOF_TIMESTAMPING_TX_SOFTWARE,
                );
            }
            cost.sent_sample(clock.now());
        }
        let mut sent = 0;
        while sent < total {
            // SAFETY: the headers from `sent` on point into frames and iovecs that live
            // in `batch` for the call.
            let n = unsafe {
                libc::sendmmsg(
                    to.fd.as_raw_fd(),
                    batch.msgs.as_mut_ptr().add(sent),
                    (total - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                let n = n as usize;
                let head = if batch.frame > FRAME { VNET_HDR } else { 0 };
                let bytes: usize = batch.out[sent..sent + n].iter().map(|f| f.len - head).sum();
                counters.forwarded.fetch_add(n as u64, Relaxed);
                counters.forwarded_bytes.fetch_add(bytes as u64, Relaxed);
                sent += n;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                // The device or its queue refused this frame: count it and go on.
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EMSGSIZE) => {
                    counters.emulator_drops.fetch_add(1, Relaxed);
                    sent += 1;
                }
                _ => return Err(e),
            }
        }
        let mut out = std::mem::take(&mut batch.out);
        for f in out.drain(..) {
            batch.give(f.buf);
        }
        batch.out = out;
    }
}

/// A pass of the forwarding loop writing its due frames: when (each frame's lateness is
/// measured at it), and when the thread was last in its poll.
#[derive(Clone, Copy)]
struct Pass<'a> {
    now: u64,
    polls: &'a RecentPolls,
}

/// A poll of the forwarding loop, as it ended.
struct Slept {
    /// When it asked to be woken: None without a timeout, or when that time had passed
    /// as it began (a backlog's pass, not a sleep).
    asked: Option<u64>,
    /// When it returned.
    woke: u64,
    /// What it returned: 0 when the timer ended it, more when a socket did, less when a
    /// signal interrupted it.
    rc: libc::c_int,
}

impl Slept {
    /// How late the thread came back after the time it asked for: learnt for the margin
    /// when the timer woke it, and counted in `wakeups` whenever it came back at or
    /// after that time — by the timer, or by a socket event (a frame, a transmit stamp)
    /// that ended the poll then, as when the thread got a CPU only after its time
    /// (the poll then returns the event, not the timeout: leaving it out would leave
    /// out the wake-ups that waited longest on a busy host). A poll a socket ended
    /// before its time, or a signal interrupted, was no late wake-up.
    fn settle(&self, wake: &mut WakeMargin, wakeups: &[AtomicU64; LATE_BUCKETS]) {
        let Some(t) = self.asked else {
            return;
        };
        if self.rc < 0 || (self.rc > 0 && self.woke < t) {
            return;
        }
        let late = self.woke.saturating_sub(t);
        if self.rc == 0 {
            wake.learn(late);
        }
        wakeups[late_bucket(late)].fetch_add(1, Relaxed);
    }
}

/// Whether `e` says the socket's interface went away (the topology was taken down).
fn link_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENODEV | libc::ENXIO)
    )
}

/// Forwards one link's frames both ways between sockets `a` and `b` until their
/// interfaces go away (the topology was taken down) or an error occurs.
fn forward(
    a: PacketSocket,
    b: PacketSocket,
    link: &EmulatedLink,
    counters: &LinkCounters,
    seed: u64,
) -> io::Result<()> {
    let line = |s: &LineSpec, seed| {
        DelayLine::<Frame>::new(
            Duration::from_micros(s.delay_us),
            Duration::from_micros(s.jitter_us),
            s.loss,
            s.limit,
            seed,
        )
    };
    let mut ab = line(&link.a_to_b, seed);
    let mut ba = line(&link.b_to_a, seed.rotate_left(32) ^ 0x9e37_79b9);
    set_int(&a.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    set_int(&b.fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)?;
    // Wake on time: the default 50 µs timer slack would add to every delay.
    // SAFETY: prctl with an integer argument.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    // The highest nice level (root may take it): on a machine whose CPUs are busy with
    // other work, an ordinary thread waits its turn, often milliseconds, and a path's
    // 95th-percentile RTT through three links rose 3.5 ms over the topology's on the
    // 2-vCPU development machine under `stress-ng --cpu 2`; at −20 it stays within
    // 0.3 ms. Not real-time priority (SCHED_FIFO): that cut late frames at 85 Mbit/s
    // too, but made every crossing ~45 µs slower when idle, and when the thread kept a
    // CPU busy (1 Gbit/s and more) the kernel's protection of ordinary tasks stopped it
    // for 45–65 ms at a time. Late frames are counted (`late`, `max_late_us`) for
    // `net status`.
    // SAFETY: plain calls; on Linux a nice level belongs to one thread, named by its id.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -20) };
    let clock = Clock {
        start: Instant::now(),
    };
    let mut batch = Batch::new(if link.gso { SUPER_FRAME } else { FRAME });
    let mut stats_due = Duration::from_secs(1);
    // Timer wake-ups come late (25 µs at the median, 95 µs at the 99th percentile from an
    // idle vCPU on the development VM, more than the configured delay can absorb when a
    // path crosses several links): the thread asks to be woken early by a margin learnt
    // as it goes, and spins the rest.
    let mut wake = WakeMargin::new();
    // Frames a→b are written to `b`, whose transmit stamps measure that direction.
    let (mut cost_ab, mut cost_ba) = (SendCost::new(), SendCost::new());
    // When each socket was last seen empty (by a read that left nothing, or a poll that
    // found nothing), on the emulator's clock: what arrived since may be unread. None
    // when not known (a read left a flood waiting, a poll was interrupted).
    let (mut empty_a, mut empty_b) = (Some(0), Some(0));
    let mut polls = RecentPolls::default();
    loop {
        let now = clock.now();
        let slept_at = now;
        // When the next frame must be written to reach the next node on time.
        let next = [
            ab.next_due().map(|d| d.saturating_sub(cost_ab.estimate())),
            ba.next_due().map(|d| d.saturating_sub(cost_ba.estimate())),
        ]
        .into_iter()
        .flatten()
        .min();
        let margin = wake.margin();
        let target = next.map(|due| due.saturating_sub(margin));
        let timeout = target.map(|t| {
            let wait = t.saturating_sub(now);
            libc::timespec {
                tv_sec: (wait / 1_000_000_000) as libc::time_t,
                tv_nsec: (wait % 1_000_000_000) as libc::c_long,
            }
        });
        // A socket whose frames cannot be due before the thread wakes anyway is not
        // watched for them (`arrivals_can_wait`); it is read once the thread is up and
        // the frames then due have gone.
        let waits = |line: &DelayLine<Frame>, cost: &SendCost, empty: Option<u64>| {
            let (Some(since), Some(next)) = (empty, next) else {
                return false;
            };
            arrivals_can_wait(since, next, line.least_delay_ns(), cost.estimate())
        };
        let (wait_a, wait_b) = (waits(&ab, &cost_ab, empty_a), waits(&ba, &cost_ba, empty_b));
        let watch = |waits: bool| if waits { 0 } else { libc::POLLIN };
        // POLLERR comes back whether asked for or not: transmit stamps on the error
        // queue, or the socket's error when its interface went away.
        let mut fds = [
            libc::pollfd {
                fd: a.fd.as_raw_fd(),
                events: watch(wait_a),
                revents: 0,
            },
            libc::pollfd {
                fd: b.fd.as_raw_fd(),
                events: watch(wait_b),
                revents: 0,
            },
        ];
        // SAFETY: `fds` and the optional timeout live for the call.
        let rc = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                2,
                timeout.as_ref().map_or(std::ptr::null(), |t| t as *const _),
                std::ptr::null(),
            )
        };
        let woke = clock.now();
        // From the top of the pass: its setup before the poll (well under a µs) is
        // counted in rather than read off the clock a second time.
        polls.record(slept_at, woke);
        let slept = Slept {
            asked: target.filter(|&t| t > slept_at),
            woke,
            rc,
        };
        slept.settle(&mut wake, &counters.wakeup_late_histogram);
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        if fds
            .iter()
            .any(|f| f.revents & (libc::POLLHUP | libc::POLLNVAL) != 0)
        {
            return Ok(());
        }
        for (i, socket, cost) in [(0, &a, &mut cost_ba), (1, &b, &mut cost_ab)] {
            if fds[i].revents & libc::POLLERR == 0 {
                continue;
            }
            match socket.transmit_stamps()? {
                Some(wall) => {
                    cost.stamped((wall - clock.wall_offset()).max(0) as u64);
                    let c = if i == 0 {
                        &counters.b_to_a
                    } else {
                        &counters.a_to_b
                    };
                    c.send_cost_ns.store(cost.estimate(), Relaxed);
                }
                // An interface that went away reports an error on its socket: the link
                // is gone. Any other error is said and forwarding goes on.
                None => match socket.error() {
                    0 => {}
                    e if link_gone(&io::Error::from_raw_os_error(e)) => return Ok(()),
                    e => eprintln!(
                        "flowlab net emulator: link {}: {}",
                        link.name,
                        io::Error::from_raw_os_error(e)
                    ),
                },
            }
        }
        // A watched socket is read if the poll said so, and was otherwise empty when the
        // poll returned (an interrupted poll said nothing). Unwatched ones wait until the
        // due frames have gone: nothing on them can be due sooner.
        for (waited, fd, socket, line, c, empty) in [
            (wait_a, &fds[0], &a, &mut ab, &counters.a_to_b, &mut empty_a),
            (wait_b, &fds[1], &b, &mut ba, &counters.b_to_a, &mut empty_b),
        ] {
            if waited {
                continue;
            }
            *empty = if fd.revents & libc::POLLIN != 0 {
                match read_all(socket, line, c, &mut batch, &clock) {
                    Err(e) if link_gone(&e) => return Ok(()),
                    r => r?,
                }
            } else {
                (rc >= 0).then_some(woke)
            };
        }
        let mut now = clock.now();
        if rc == 0 {
            if let Some(due) = next {
                // Woken by the timer: spin to the due time.
                while now < due && due - now <= margin {
                    std::hint::spin_loop();
                    now = clock.now();
                }
            }
        }
        let at = Pass { now, polls: &polls };
        let mut send =
            |line, to, cost, counters| transmit(line, at, to, cost, counters, &mut batch, &clock);
        send(&mut ab, &b, &mut cost_ab, &counters.a_to_b)?;
        send(&mut ba, &a, &mut cost_ba, &counters.b_to_a)?;
        for (waited, socket, line, c, empty) in [
            (wait_a, &a, &mut ab, &counters.a_to_b, &mut empty_a),
            (wait_b, &b, &mut ba, &counters.b_to_a, &mut empty_b),
        ] {
            if waited {
                *empty = match read_all(socket, line, c, &mut batch, &clock) {
                    Err(e) if link_gone(&e) => return Ok(()),
                    r => r?,
                };
            }
        }
        if Duration::from_nanos(now) >= stats_due {
            stats_due += Duration::from_secs(1);
            counters
                .a_to_b
                .emulator_drops
                .fetch_add(a.kernel_drops(), Relaxed);
            counters
                .b_to_a
                .emulator_drops
                .fetch_add(b.kernel_drops(), Relaxed);
        }
    }
}

/// Runs the emulator for `links`: one thread per link, each in its namespace. Calls
/// `ready` once every link's sockets are open (or returns the first link's error), then
/// calls `report` with the counters about once a second until every link has ended.
pub fn run(
    links: Vec<EmulatedLink>,
    ready: impl FnOnce(),
    mut report: impl FnMut(&[LinkStats]),
) -> io::Result<()> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id());
    let (tx, rx) = std::sync::mpsc::channel::<io::Result<()>>();
    let mut threads = Vec::new();
    let mut all = Vec::new();
    for (i, link) in links.into_iter().enumerate() {
        let counters = Arc::new(LinkCounters::default());
        all.push((link.name.clone(), counters.clone()));
        let tx = tx.clone();
        let link_seed = seed.wrapping_add((i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        threads.push(std::thread::spawn(move || {
            if let Err(e) = crate::netns::enter(&link.namespace) {
                let _ = tx.send(Err(e));
                return;
            }
            let open = |dev: &str| PacketSocket::open(dev, link.gso);
            match open(&link.a).and_then(|a| Ok((a, open(&link.b)?))) {
                Ok((a, b)) => {
                    let _ = tx.send(Ok(()));
                    // Not held while forwarding: if any thread dies early, `run` sees
                    // the channel close instead of waiting for ever.
                    drop(tx);
                    match forward(a, b, &link, &counters, link_seed) {
                        Ok(()) => eprintln!(
                            "flowlab net emulator: link {}: its interfaces went away",
                            link.name
                        ),
                        Err(e) => {
                            eprintln!("flowlab net emulator: link {}: stopped: {e}", link.name)
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(io::Error::new(
                        e.kind(),
                        format!("link {}: {e}", link.name),
                    )));
                }
            }
        }));
    }
    drop(tx);
    for _ in 0..threads.len() {
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(io::Error::other("an emulator thread ended early")),
        }
    }
    ready();
    let snapshot = |all: &[(String, Arc<LinkCounters>)]| -> Vec<LinkStats> {
        all.iter().map(|(name, c)| LinkStats::of(name, c)).collect()
    };
    while !threads.iter().all(|t| t.is_finished()) {
        std::thread::sleep(Duration::from_secs(1));
        report(&snapshot(&all));
    }
    report(&snapshot(&all));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i128 = 1_000_000;

    #[test]
    fn arrival_stamps_are_trusted_only_within_the_last_10_ms_of_the_clock() {
        let offset = 1_700_000_000_000 * MS;
        let now = 50_000_000u64;
        // Stamped 3 ms before the read: kept.
        assert_eq!(on_clock(offset + 47 * MS, offset, now), 47_000_000);
        // From the future or older than 10 ms (a clock step): the read's time.
        assert_eq!(on_clock(offset + 51 * MS, offset, now), now);
        assert_eq!(on_clock(offset + 39 * MS, offset, now), now);
    }

    #[test]
    fn a_frame_from_before_the_clock_started_arrives_now_not_at_the_end_of_time() {
        let offset = 1_700_000_000_000 * MS;
        // Read 2 ms after the clock started; the frame came 1 ms before it did.
        assert_eq!(on_clock(offset - MS, offset, 2_000_000), 2_000_000);
        assert_eq!(on_clock(offset, offset, 2_000_000), 0);
    }

    #[test]
    fn lateness_buckets_are_quarter_octaves_and_read_as_their_upper_edge() {
        assert_eq!(late_bucket(0), 0);
        assert_eq!(late_bucket(999), 0);
        assert_eq!(late_bucket(1_000), 1);
        // 2 µs starts the fifth quarter octave above 1 µs; 1 ms is 2^9.97 µs.
        assert_eq!(late_bucket(2_000), 5);
        assert_eq!(late_bucket(1_000_000), 1 + 39);
        assert_eq!(late_bucket(u64::MAX), LATE_BUCKETS - 1);
        // The same as 1 + ⌊4 · log2 µs⌋ in floating point, across the whole range.
        let mut ns = 1_000u64;
        while ns < 200_000_000 {
            let float =
                (1 + (4.0 * (ns as f64 / 1000.0).log2()).floor() as usize).min(LATE_BUCKETS - 1);
            assert_eq!(late_bucket(ns), float, "{ns} ns");
            ns += 1 + ns / 97;
        }
        let c = Counters::default();
        let record = |ns: u64, n: u64| {
            c.late_histogram[late_bucket(ns)].fetch_add(n, Relaxed);
        };
        record(50_000, 90);
        let earlier = DirectionStats::from(&c);
        // Since `earlier`: 95 frames 100 µs late, 5 frames 3 ms late.
        record(100_000, 95);
        record(3_000_000, 5);
        c.max_late_us.store(3_000, Relaxed);
        let now = DirectionStats::from(&c);
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let since: Vec<(f64, u64)> = now
            .late_since(&earlier)
            .iter()
            .map(|&(d, n)| (us(d), n))
            .collect();
        assert_eq!(since.len(), 2, "{since:?}");
        assert!(
            (100.0..=119.0).contains(&since[0].0) && since[0].1 == 95,
            "{since:?}"
        );
        assert!(
            (3_000.0..=3_568.0).contains(&since[1].0) && since[1].1 == 5,
            "{since:?}"
        );
        // Nothing forwarded in between: nothing.
        assert!(now.late_since(&now).is_empty());
        // The stats file leaves out trailing empty buckets.
        assert_eq!(now.late_histogram.len(), late_bucket(3_000_000) + 1);
    }

    #[test]
    fn the_polls_part_of_the_lateness_is_read_from_its_own_histogram() {
        const US: u64 = 1_000;
        // The two histograms are read apart: the polls' part from its own.
        let c = Counters::default();
        let earlier = DirectionStats::from(&c);
        for (late, woke) in [(200 * US, 150 * US), (200 * US, 0), (40 * US, 0)] {
            c.late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
            c.woke_late_histogram[late_bucket(woke)].fetch_add(1, Relaxed);
        }
        let now = DirectionStats::from(&c);
        let us = |v: Vec<(Duration, u64)>| -> Vec<(u64, u64)> {
            v.iter().map(|&(d, n)| (d.as_micros() as u64, n)).collect()
        };
        let under_1us = 1;
        assert_eq!(
            us(now.woke_late_since(&earlier).expect("counted")),
            [(under_1us, 2), (152, 1)],
            "{now:?}"
        );
        assert_eq!(us(now.late_since(&earlier)), [(45, 1), (215, 2)], "{now:?}");
        assert_eq!(now.woke_late_histogram.len(), late_bucket(150 * US) + 1);
        // An emulator from before the split counted lateness only: its part is unknown,
        // not nothing.
        let older = DirectionStats {
            woke_late_histogram: Vec::new(),
            ..now.clone()
        };
        assert_eq!(older.woke_late_since(&earlier), None);
        // Nothing forwarded at all: nothing to split.
        assert_eq!(earlier.woke_late_since(&earlier), Some(Vec::new()));
    }

    #[test]
    fn transmit_writes_the_due_frames_and_books_their_lateness_and_its_polls_part() {
        use std::os::unix::net::UnixDatagram;
        const US: u64 = 1_000;
        // Any datagram socket takes sendmmsg: a pair stands in for the next node's.
        let (ours, theirs) = UnixDatagram::pair().expect("socket pair");
        let to = PacketSocket {
            fd: OwnedFd::from(ours),
        };
        let mut line = DelayLine::new(Duration::from_millis(1), Duration::ZERO, 0.0, 16, 1);
        let frame = |byte: u8| {
            let mut buf = new_buffer(FRAME);
            buf[..3].fill(byte);
            Frame { buf, len: 3 }
        };
        // Due at 1.0 ms and at 1.3 ms.
        line.push(0, frame(b'a'));
        line.push(300 * US, frame(b'b'));
        // The thread was in its poll until 1.15 ms (woken late), up since: at 1.2 ms
        // the first frame is 200 µs late, 150 of them passed in the poll.
        let mut polls = RecentPolls::default();
        polls.record(400 * US, 1_150 * US);
        let now = 1_200 * US;
        let mut cost = SendCost::new();
        // A stamp already pending: no control message (a Unix socket refuses one).
        cost.sent_sample(now);
        let counters = Counters::default();
        let mut batch = Batch::new(FRAME);
        let clock = Clock {
            start: Instant::now(),
        };
        let pass = Pass { now, polls: &polls };
        transmit(
            &mut line, pass, &to, &mut cost, &counters, &mut batch, &clock,
        )
        .expect("transmit");
        let mut got = [0u8; 16];
        assert_eq!(theirs.recv(&mut got).expect("the due frame"), 3);
        assert_eq!(&got[..3], b"aaa");
        theirs.set_nonblocking(true).expect("nonblocking");
        assert!(
            theirs.recv(&mut got).is_err(),
            "a frame not yet due was written"
        );
        assert_eq!(line.len(), 1);
        let stats = DirectionStats::from(&counters);
        assert_eq!((stats.forwarded, stats.forwarded_bytes), (1, 3));
        assert_eq!(stats.late_total_ns, 200 * US);
        let only = |bucket: usize| {
            let mut h = vec![0; bucket + 1];
            h[bucket] = 1;
            h
        };
        assert_eq!(stats.late_histogram, only(late_bucket(200 * US)));
        assert_eq!(stats.woke_late_histogram, only(late_bucket(150 * US)));
        // Not late enough to count as late.
        assert_eq!((stats.late, stats.max_late_us), (0, 0));
    }

    #[test]
    fn a_wake_up_is_counted_when_the_thread_came_back_at_or_after_its_time() {
        const US: u64 = 1_000;
        let counted = |slept: Slept| {
            let mut wake = WakeMargin::new();
            let before = wake.margin();
            let wakeups = LinkCounters::default().wakeup_late_histogram;
            slept.settle(&mut wake, &wakeups);
            let h = trimmed(&wakeups);
            (
                h.iter().sum::<u64>(),
                h.len().checked_sub(1),
                wake.margin() != before,
            )
        };
        let asked = Some(1_000 * US);
        let at = |woke: u64, rc| Slept { asked, woke, rc };
        let bucket = |late| Some(late_bucket(late));
        // The timer, 30 µs late: counted, and learnt for the margin.
        assert_eq!(counted(at(1_030 * US, 0)), (1, bucket(30 * US), true));
        // A frame woke it after its time (the timer had fired while it waited for a
        // CPU): counted, not learnt (a frame's wake-up says nothing of the timer's).
        assert_eq!(counted(at(1_200 * US, 1)), (1, bucket(200 * US), false));
        // A frame woke it before its time, a signal interrupted it, or it never slept
        // (no timeout, or one already past): no wake-up to count.
        assert_eq!(counted(at(900 * US, 1)), (0, None, false));
        assert_eq!(counted(at(1_200 * US, -1)), (0, None, false));
        let never = |asked| Slept {
            asked,
            woke: 1_200 * US,
            rc: 0,
        };
        assert_eq!(counted(never(None)), (0, None, false));
    }

    #[test]
    fn the_threads_wake_ups_are_read_per_link_and_absent_from_an_older_emulator() {
        const US: u64 = 1_000;
        let c = LinkCounters::default();
        let stats = |c: &LinkCounters| LinkStats::of("l", c);
        c.wakeup_late_histogram[late_bucket(30 * US)].fetch_add(5, Relaxed);
        let earlier = stats(&c);
        for late in [30 * US, 30 * US, 400 * US] {
            c.wakeup_late_histogram[late_bucket(late)].fetch_add(1, Relaxed);
        }
        let now = stats(&c);
        let us = |v: Vec<(Duration, u64)>| -> Vec<(u64, u64)> {
            v.iter().map(|&(d, n)| (d.as_micros() as u64, n)).collect()
        };
        // Only the wake-ups since `earlier`, each at its bucket's upper edge.
        assert_eq!(
            us(now.wakeup_late_since(&earlier).expect("counted")),
            [(32, 2), (430, 1)]
        );
        // Either snapshot from an emulator without them: unknown, not none; and the
        // stats file of one reads so.
        let older = LinkStats {
            wakeup_late_histogram: None,
            ..earlier.clone()
        };
        assert_eq!(now.wakeup_late_since(&older), None);
        assert_eq!(older.wakeup_late_since(&earlier), None);
        let text = serde_json::to_string(&older).expect("json");
        let text = text.replace(",\"wakeup_late_histogram\":null", "");
        assert!(!text.contains("wakeup"), "{text}");
        let read: LinkStats = serde_json::from_str(&text).expect("an older line");
        assert_eq!(read.wakeup_late_histogram, None);
    }

    #[test]
    fn the_last_buckets_frames_are_never_read_as_under_its_lower_edge() {
        let c = Counters::default();
        let earlier = DirectionStats::from(&c);
        // A frame 200 ms late counted, the latest seen not yet raised (read before).
        c.late_histogram[LATE_BUCKETS - 1].fetch_add(1, Relaxed);
        c.max_late_us.store(600, Relaxed);
        let since = DirectionStats::from(&c).late_since(&earlier);
        assert_eq!(since.len(), 1);
        assert!(since[0].0 >= Duration::from_micros(110_000), "{since:?}");
    }
}
