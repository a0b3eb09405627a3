//! The AF_PACKET sockets a link's thread reads and writes its frames with: batches of
//! frames in and out, the kernel's arrival and transmit stamps, the clocks they are
//! read on.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Instant;

/// Frames up to this long are read whole (MTU 1500 plus headers, with room to spare).
pub(super) const FRAME: usize = 2048;
/// A super-frame's buffer on a GSO link: a 64 KiB IP packet, its link-layer header and
/// the virtio-net header in front.
pub(super) const SUPER_FRAME: usize = 65536 + 256;
/// `struct virtio_net_hdr` (include/uapi/linux/virtio_net.h), in front of every frame
/// of a socket with PACKET_VNET_HDR.
pub(super) const VNET_HDR: usize = 10;
/// Frames taken per recvmmsg / sendmmsg call.
pub(super) const BATCH: usize = 64;
/// Socket buffers of the emulator's sockets (root may exceed rmem_max / wmem_max).
pub(super) const SOCKET_BUFFER: libc::c_int = 32 << 20;

/// An AF_PACKET socket bound to one interface, seeing every frame that arrives there.
pub(super) struct PacketSocket {
    pub(super) fd: OwnedFd,
}

pub(super) fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
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
    pub(super) fn open(dev: &str, vnet: bool) -> io::Result<Self> {
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
    pub(super) fn transmit_stamps(&self) -> io::Result<Option<i128>> {
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
    pub(super) fn error(&self) -> i32 {
        match socket2::SockRef::from(&self.fd).take_error() {
            Ok(None) => 0,
            Ok(Some(e)) => e.raw_os_error().unwrap_or(libc::EIO),
            Err(_) => libc::EBADF,
        }
    }

    /// Frames the kernel dropped for this socket since the last call.
    pub(super) fn kernel_drops(&self) -> u64 {
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
pub(super) const CONTROL: usize = 128;

/// `SO_TIMESTAMPING` (asm-generic's `SO_TIMESTAMPING_OLD`, which is the one on 64-bit
/// architectures; the libc crate leaves it out for the time64 split). Its control
/// message, `SCM_TIMESTAMPING`, has the same number.
pub(super) const SO_TIMESTAMPING: libc::c_int = 37;

/// A frame: a buffer of FRAME bytes and how much of it is the frame.
pub(super) struct Frame {
    pub(super) buf: Box<[u8]>,
    pub(super) len: usize,
}

/// The recvmmsg / sendmmsg arrays, and the buffers the next receive fills (always
/// BATCH of them, so a receive of one frame replaces one buffer, not all).
pub(super) struct Batch {
    /// How long a receive buffer is: [`FRAME`], or [`SUPER_FRAME`] on a GSO link.
    pub(super) frame: usize,
    /// Buffers not in use, of `frame` bytes.
    pub(super) pool: Pool,
    /// On a GSO link, buffers of [`FRAME`] bytes: a short frame (an ACK, a datagram) is
    /// copied into one, so that the delay line does not hold 64 KiB for each.
    pub(super) small: Pool,
    pub(super) ready: Vec<Box<[u8]>>,
    pub(super) out: Vec<Frame>,
    pub(super) iov: Vec<libc::iovec>,
    pub(super) addrs: Vec<libc::sockaddr_ll>,
    pub(super) msgs: Vec<libc::mmsghdr>,
    /// u64s keep the control buffers aligned for cmsghdr.
    pub(super) control: Vec<[u64; CONTROL / 8]>,
}

impl Batch {
    /// Takes back a frame's buffer into the pool of its length.
    pub(super) fn give(&mut self, b: Box<[u8]>) {
        if b.len() == self.frame {
            self.pool.give(b);
        } else {
            self.small.give(b);
        }
    }

    pub(super) fn new(frame: usize) -> Self {
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

pub(super) fn new_buffer(len: usize) -> Box<[u8]> {
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
pub(super) struct Clock {
    pub(super) start: Instant,
}

impl Clock {
    pub(super) fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Wall-clock minus monotonic, now (both in ns).
    pub(super) fn wall_offset(&self) -> i128 {
        wall_ns() - self.now() as i128
    }
}

/// Buffers of one length not in use, so that steady forwarding allocates nothing.
pub(super) struct Pool {
    pub(super) len: usize,
    pub(super) free: Vec<Box<[u8]>>,
}

impl Pool {
    pub(super) fn new(len: usize) -> Self {
        Pool {
            len,
            free: Vec::new(),
        }
    }

    pub(super) fn take(&mut self) -> Box<[u8]> {
        self.free.pop().unwrap_or_else(|| new_buffer(self.len))
    }

    /// Takes back a buffer of this pool's length (one of another length is dropped).
    pub(super) fn give(&mut self, b: Box<[u8]>) {
        // Keep at most what a few batches need; the delay line holds the rest.
        if b.len() == self.len && self.free.len() < 8 * BATCH {
            self.free.push(b);
        }
    }
}
