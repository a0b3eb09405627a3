//! Socket options flowlab sets and reads, with the errors a user can act on (the
//! threads' CPUs and clocks are [`crate::cpu`]'s).

use flowlab_proto::trace::TraceSample;
use std::io;
use std::os::fd::{AsFd, AsRawFd};

use nix::sys::socket::{getsockopt, setsockopt, sockopt};
use serde::Serialize;

/// A socket option the kernel would not grant.
#[derive(Debug, thiserror::Error)]
pub enum SockError {
    #[error("congestion control '{asked}' is not available on this kernel; available: {available}")]
    Congestion { asked: String, available: String },
    #[error("cannot set {what}: {source}")]
    Option {
        what: &'static str,
        source: io::Error,
    },
    #[error("a socket buffer of {0} bytes is above the largest the kernel takes ({max})", max = flowlab_results::spec::MAX_WINDOW)]
    BufferTooLarge(u64),
    #[error("--cntl-ka: {0}")]
    Keepalive(String),
}

fn opt_err(what: &'static str) -> impl FnOnce(nix::Error) -> SockError {
    move |e| SockError::Option {
        what,
        source: io::Error::from(e),
    }
}

/// `--cntl-ka`: turns TCP keepalive on for a control connection, with the values given
/// and the kernel's for the others, and returns the three in force (idle s, interval s,
/// count). Refused, as iperf3 refuses it, when the idle time is not longer than the
/// probes take.
pub fn set_keepalive<F: AsFd>(
    sock: &F,
    ka: &flowlab_results::spec::Keepalive,
) -> Result<(u32, u32, u32), SockError> {
    let s = socket2::SockRef::from(sock);
    let fail = |what: &str, e: io::Error| SockError::Keepalive(format!("{what}: {e}"));
    let secs = |d: std::time::Duration| u32::try_from(d.as_secs()).unwrap_or(u32::MAX);
    let idle = match ka.idle {
        Some(v) => v,
        None => secs(
            s.tcp_keepalive_time()
                .map_err(|e| fail("TCP_KEEPIDLE", e))?,
        ),
    };
    let interval = match ka.interval {
        Some(v) => v,
        None => secs(
            s.tcp_keepalive_interval()
                .map_err(|e| fail("TCP_KEEPINTVL", e))?,
        ),
    };
    let count = match ka.count {
        Some(v) => v,
        None => s
            .tcp_keepalive_retries()
            .map_err(|e| fail("TCP_KEEPCNT", e))?,
    };
    ka.check(interval, count).map_err(SockError::Keepalive)?;
    let params = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(idle.into()))
        .with_interval(std::time::Duration::from_secs(interval.into()))
        .with_retries(count);
    s.set_tcp_keepalive(&params)
        .map_err(|e| fail("SO_KEEPALIVE", e))?;
    Ok((idle, interval, count))
}

/// Whether `--cntl-ka`'s values hold with this kernel's defaults for those left off
/// (tried on a socket of its own): what a server checks when it starts.
pub fn check_keepalive(ka: &flowlab_results::spec::Keepalive) -> Result<(), SockError> {
    let probe = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .map_err(|e| SockError::Keepalive(e.to_string()))?;
    set_keepalive(&probe, ka).map(|_| ())
}

/// The congestion control algorithms this kernel offers (and, as non-root, allows).
pub fn available_congestion() -> String {
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    read("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .or_else(|_| read("/proc/sys/net/ipv4/tcp_allowed_congestion_control"))
        .unwrap_or_else(|_| "unknown (cannot read /proc/sys/net/ipv4)".into())
}

/// Sets TCP_CONGESTION, naming the available algorithms when the kernel lacks `name`.
pub fn set_congestion<F: AsFd>(sock: &F, name: &str) -> Result<(), SockError> {
    let value = std::ffi::OsString::from(name);
    setsockopt(sock, sockopt::TcpCongestion, &value).map_err(|e| match e {
        nix::Error::ENOENT | nix::Error::EPERM | nix::Error::EINVAL => SockError::Congestion {
            asked: name.to_string(),
            available: available_congestion(),
        },
        other => opt_err("TCP_CONGESTION")(other),
    })
}

/// The congestion control algorithm a TCP socket uses.
pub fn congestion<F: AsFd>(sock: &F) -> Option<String> {
    getsockopt(sock, sockopt::TcpCongestion)
        .ok()
        .map(|s| s.to_string_lossy().trim_end_matches('\0').to_string())
}

/// Socket buffer sizes as the kernel reports them (Linux reports twice the size asked
/// for, the extra half being its bookkeeping allowance).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BufferSizes {
    pub sndbuf: u64,
    pub rcvbuf: u64,
}

/// Asks for `bytes` of send and receive buffer (0: leave the kernel's autotuning alone)
/// and returns what the kernel granted.
pub fn set_buffers(sock: &socket2::SockRef<'_>, bytes: u64) -> Result<BufferSizes, SockError> {
    if bytes > flowlab_results::spec::MAX_WINDOW {
        // socket2 would hand the kernel an int that wrapped around.
        return Err(SockError::BufferTooLarge(bytes));
    }
    if bytes > 0 {
        let b = usize::try_from(bytes).unwrap_or(usize::MAX);
        sock.set_send_buffer_size(b)
            .map_err(|source| SockError::Option {
                what: "SO_SNDBUF",
                source,
            })?;
        sock.set_recv_buffer_size(b)
            .map_err(|source| SockError::Option {
                what: "SO_RCVBUF",
                source,
            })?;
    }
    Ok(buffers(sock))
}

/// Sets the IP type of service of a socket whose packets go to `peer`: IP_TOS where
/// they are IPv4 (an IPv6 socket's to a v4-mapped peer included), and the traffic class
/// on an IPv6 socket.
pub fn set_tos(
    sock: &socket2::SockRef<'_>,
    peer: std::net::SocketAddr,
    tos: u8,
) -> std::io::Result<()> {
    if peer.ip().to_canonical().is_ipv4() {
        sock.set_tos_v4(u32::from(tos))?;
    }
    if peer.is_ipv6() {
        sock.set_tclass_v6(u32::from(tos))?;
    }
    Ok(())
}

/// The IP type of service of a socket whose packets go to `peer`, read back (see
/// [`set_tos`]).
pub fn tos(sock: &socket2::SockRef<'_>, peer: std::net::SocketAddr) -> Option<u8> {
    let v = if peer.ip().to_canonical().is_ipv4() {
        sock.tos_v4()
    } else {
        sock.tclass_v6()
    };
    v.ok().and_then(|v| u8::try_from(v).ok())
}

/// setsockopt(2) with a value of type `T`, whole (an int, a u64, one of the kernel's
/// structs): the kernel reads `size_of::<T>()` bytes of it, and refuses a size that is not
/// the option's.
fn set_raw<F: AsRawFd, T>(
    sock: &F,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: the fd is open for the borrow, and `value` is a live `T` of the size given.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets path MTU discovery on a UDP socket whose datagrams go to `peer` (iperf3's
/// `--dont-fragment`): IPv4 datagrams leave with the DF bit and one larger than the path's
/// MTU fails to send (EMSGSIZE) instead of being fragmented; the same for IPv6, which
/// routers never fragment, on the sending host.
pub fn set_dont_fragment<F: AsRawFd>(sock: &F, peer: std::net::SocketAddr) -> io::Result<()> {
    let (level, name, value) = mtu_discover(peer);
    set_raw(sock, level, name, &value)
}

/// Whether [`set_dont_fragment`] is in force on the socket, read back.
pub fn dont_fragment<F: AsRawFd>(sock: &F, peer: std::net::SocketAddr) -> Option<bool> {
    let (level, name, value) = mtu_discover(peer);
    get_int(sock, level, name).map(|v| v == value)
}

/// The option that sets path MTU discovery for packets to `peer`, and its "do" value:
/// IPv4's where they are IPv4 (an IPv6 socket's to a v4-mapped peer included), as
/// [`set_tos`].
fn mtu_discover(peer: std::net::SocketAddr) -> (libc::c_int, libc::c_int, libc::c_int) {
    if peer.ip().to_canonical().is_ipv4() {
        (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )
    } else {
        (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        )
    }
}

/// The IPv6 flow label manager's request (`struct in6_flowlabel_req`, linux/in6.h).
#[repr(C)]
struct FlowlabelRequest {
    dst: libc::in6_addr,
    label: u32,
    action: u8,
    share: u8,
    flags: u16,
    expires: u16,
    linger: u16,
    pad: u32,
}

/// Gives an IPv6 socket's packets to `server` the flow label `label` (20 bits; iperf3's
/// `-L`): the label is leased from the kernel's flow label manager (created, shared with
/// any socket asking for the same) and sent in every packet (IPV6_FLOWINFO_SEND). Returns
/// the address to connect to, which carries the label.
pub fn set_flowlabel<F: AsRawFd>(
    sock: &F,
    server: std::net::SocketAddrV6,
    label: u32,
) -> io::Result<std::net::SocketAddrV6> {
    const GET: u8 = 0; // IPV6_FL_A_GET
    const SHARE_ANY: u8 = 255; // IPV6_FL_S_ANY
    const CREATE: u16 = 1; // IPV6_FL_F_CREATE
    let request = FlowlabelRequest {
        dst: libc::in6_addr {
            s6_addr: server.ip().octets(),
        },
        label: (label & 0x000F_FFFF).to_be(),
        action: GET,
        share: SHARE_ANY,
        flags: CREATE,
        expires: 0,
        linger: 0,
        pad: 0,
    };
    set_raw(sock, libc::IPPROTO_IPV6, libc::IPV6_FLOWLABEL_MGR, &request)?;
    let on: libc::c_int = 1;
    set_raw(sock, libc::IPPROTO_IPV6, libc::IPV6_FLOWINFO_SEND, &on)?;
    // sin6_flowinfo goes to the kernel as it is: in network byte order.
    let mut to = server;
    to.set_flowinfo((label & 0x000F_FFFF).to_be());
    Ok(to)
}

/// The send and receive buffer sizes of a socket.
pub fn buffers(sock: &socket2::SockRef<'_>) -> BufferSizes {
    BufferSizes {
        sndbuf: sock.send_buffer_size().unwrap_or(0) as u64,
        rcvbuf: sock.recv_buffer_size().unwrap_or(0) as u64,
    }
}

/// Bounds the bytes a TCP socket holds written but not yet sent (TCP_NOTSENT_LOWAT): a
/// writer blocks until fewer are waiting.
pub fn set_notsent_lowat<F: AsRawFd>(sock: &F, bytes: u32) -> Result<(), SockError> {
    let v = bytes as libc::c_int;
    set_raw(sock, libc::IPPROTO_TCP, libc::TCP_NOTSENT_LOWAT, &v).map_err(|source| {
        SockError::Option {
            what: "TCP_NOTSENT_LOWAT",
            source,
        }
    })
}

/// Sets a TCP socket's receive low-water mark (SO_RCVLOWAT): the kernel wakes a reader
/// blocked on it only once this many bytes are queued (or the connection ends, or memory
/// runs short), and a blocking read waits for that many (or its timeout). 1 is the default.
/// On a buffer the user fixed (`-w`) the kernel caps it at half the buffer.
pub fn set_rcvlowat<F: AsRawFd>(sock: &F, bytes: usize) -> Result<(), SockError> {
    let v = bytes.min(libc::c_int::MAX as usize) as libc::c_int;
    set_raw(sock, libc::SOL_SOCKET, libc::SO_RCVLOWAT, &v).map_err(|source| SockError::Option {
        what: "SO_RCVLOWAT",
        source,
    })
}

/// A socket's receive low-water mark (SO_RCVLOWAT), as the kernel holds it.
pub fn rcvlowat<F: AsRawFd>(sock: &F) -> Option<usize> {
    get_int(sock, libc::SOL_SOCKET, libc::SO_RCVLOWAT).map(|v| v as usize)
}

/// An int-valued socket option, as the kernel holds it (`None`: the call failed).
fn get_int<F: AsRawFd>(sock: &F, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the fd is open for the borrow; `v` and `len` are a valid int and its size.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(v)
}

/// The least not-sent queue of a load-generating connection, bytes: one frame.
pub const MIN_NOTSENT: u64 = 16 * 1024;

/// Keeps a load-generating connection's not-sent queue near 5 ms of its delivery rate (at
/// least [`MIN_NOTSENT`]), as draft-ietf-ippm-responsiveness advises, so a request on it
/// waits behind the network's queue, not behind seconds of its own buffer.
pub fn pace_notsent(sock: &std::net::TcpStream) {
    let rate = trace_sample(sock, 0)
        .and_then(|s| s.delivery_rate)
        .unwrap_or(0);
    let bytes = (rate / 200).clamp(MIN_NOTSENT, 64 << 20);
    let _ = set_notsent_lowat(sock, bytes as u32);
}

/// Caps the kernel's pacing of a TCP socket (SO_MAX_PACING_RATE), so a `-b` target leaves
/// the host as an even stream of segments rather than bursts of whole writes.
pub fn set_max_pacing_rate<F: AsRawFd>(sock: &F, bytes_per_sec: u64) -> Result<(), SockError> {
    // A u64 (kernel ≥ 4.20); older kernels read its low 32 bits.
    set_raw(
        sock,
        libc::SOL_SOCKET,
        libc::SO_MAX_PACING_RATE,
        &bytes_per_sec,
    )
    .map_err(|source| SockError::Option {
        what: "SO_MAX_PACING_RATE",
        source,
    })
}

/// Reads TCP_INFO: the bytes this kernel fills, decoded by [`crate::tcpinfo`].
pub fn tcp_info<F: AsRawFd>(sock: &F) -> Option<crate::tcpinfo::TcpInfo> {
    let (raw, filled) = raw_tcp_info(sock)?;
    Some(crate::tcpinfo::totals(&raw[..filled]))
}

/// The kernel's `struct tcp_info` of `sock`, as many bytes of it as this kernel fills.
fn raw_tcp_info<F: AsRawFd>(sock: &F) -> Option<([u8; crate::tcpinfo::TCP_INFO_MAX], usize)> {
    let mut raw = [0u8; crate::tcpinfo::TCP_INFO_MAX];
    let mut len = raw.len() as libc::socklen_t;
    // SAFETY: a live buffer with its length passed alongside; the kernel writes at most
    // `len` bytes and stores how many it wrote.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            raw.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| (raw, (len as usize).min(raw.len())))
}

/// getsockopt(2) at `level`/`name` into a buffer starting with `input` (zeros after
/// it): the bytes the kernel returned, or its error.
fn get_raw<F: AsRawFd>(
    sock: &F,
    level: libc::c_int,
    name: libc::c_int,
    input: &[u8],
    len: usize,
) -> io::Result<Vec<u8>> {
    let mut raw = vec![0u8; len.max(input.len())];
    raw[..input.len()].copy_from_slice(input);
    let mut got = raw.len() as libc::socklen_t;
    // SAFETY: a live buffer with its length passed alongside; the kernel writes at most
    // `got` bytes and stores how many it wrote.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            level,
            name,
            raw.as_mut_ptr().cast(),
            &mut got,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    raw.truncate(got as usize);
    Ok(raw)
}

/// Subflows asked for at most in one MPTCP connection's figures (the kernel's limit is
/// 8 beyond the first).
const MPTCP_SUBFLOWS_MAX: usize = 16;

/// What the kernel says of an MPTCP socket's connection at this moment: `fallback` and
/// no subflows when it fell back to plain TCP (or was never MPTCP); `None` when the
/// socket cannot say (closed, or a kernel before 5.16).
pub fn mptcp_connection<F: AsRawFd>(
    sock: &F,
    stream: i64,
) -> Option<flowlab_results::result::MptcpConnection> {
    use crate::mptcp::*;
    let info = match get_raw(sock, SOL_MPTCP, MPTCP_INFO, &[], INFO_MAX) {
        Ok(raw) => crate::mptcp::info(&raw),
        // What a socket that fell back to TCP, or a plain TCP one, answers.
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => MptcpInfo {
            fallback: true,
            ..MptcpInfo::default()
        },
        Err(_) => return None,
    };
    let mut subflows = Vec::new();
    if !info.fallback {
        let tcp_max = crate::tcpinfo::TCP_INFO_MAX;
        let array = |name, element| {
            get_raw(
                sock,
                SOL_MPTCP,
                name,
                &request(element),
                HEADER + MPTCP_SUBFLOWS_MAX * element,
            )
            .unwrap_or_default()
        };
        let infos = array(MPTCP_TCPINFO, tcp_max);
        let addrs = array(MPTCP_SUBFLOW_ADDRS, ADDRS_LEN);
        let addrs = elements(&addrs);
        for (i, tcp) in elements(&infos).into_iter().enumerate() {
            subflows.push(subflow(tcp, addrs.get(i).copied().unwrap_or_default()));
        }
    }
    Some(flowlab_results::result::MptcpConnection {
        stream,
        fallback: info.fallback,
        bytes_sent: info.bytes_sent,
        bytes_retransmitted: info.bytes_retransmitted,
        bytes_received: info.bytes_received,
        subflows,
    })
}

/// The MPTCP path manager and packet scheduler of this network namespace
/// (`net.mptcp.path_manager`, or `pm_type` before Linux 6.15; `net.mptcp.scheduler`).
pub fn mptcp_policy() -> (Option<String>, Option<String>) {
    let read = |name: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/mptcp/{name}"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let manager = read("path_manager").or_else(|| {
        read("pm_type").map(|t| match t.as_str() {
            "0" => "kernel".to_string(),
            "1" => "userspace".to_string(),
            other => format!("pm_type {other}"),
        })
    });
    (manager, read("scheduler"))
}

/// Bytes a TCP socket has queued to send that its peer has not acknowledged yet (sent
/// or not: SIOCOUTQ). `None` if the socket cannot tell.
pub fn unacknowledged<F: AsRawFd>(sock: &F) -> Option<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ) writes one int through the pointer to a live local.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    (rc == 0).then(|| usize::try_from(n).unwrap_or(0))
}

/// One `--trace` sample of a TCP socket: TCP_INFO as far as this kernel provides it, and
/// the socket's buffer sizes. `None` if the socket is gone.
pub fn trace_sample(sock: &std::net::TcpStream, t_us: u64) -> Option<TraceSample> {
    let (raw, filled) = raw_tcp_info(sock)?;
    let mut sample = crate::tcpinfo::parse(&raw[..filled], t_us);
    let b = buffers(&socket2::SockRef::from(sock));
    sample.sndbuf = Some(b.sndbuf);
    sample.rcvbuf = Some(b.rcvbuf);
    Some(sample)
}

/// The least round trip a TCP connection has seen (`tcpi_min_rtt`, Linux 4.6: its
/// handshake's at least, which no delayed acknowledgement lengthens; the smoothed one on
/// an older kernel), or `None` if the socket cannot tell.
pub fn least_rtt(sock: &std::net::TcpStream) -> Option<std::time::Duration> {
    let s = trace_sample(sock, 0)?;
    // The kernel's least starts at u32::MAX ("none yet").
    s.min_rtt_us
        .filter(|&us| us < u64::from(u32::MAX))
        .or(s.srtt_us)
        .filter(|&us| us > 0)
        .map(std::time::Duration::from_micros)
}

/// A socket's receive queue: (bytes allocated to it, its receive buffer), both as the
/// kernel accounts them (SO_MEMINFO, Linux 4.12; `None` before that).
pub fn receive_queue<F: AsRawFd>(sock: &F) -> Option<(u64, u64)> {
    // include/uapi/linux/sock_diag.h: SK_MEMINFO_RMEM_ALLOC = 0, SK_MEMINFO_RCVBUF = 1,
    // nine u32s in all (SK_MEMINFO_VARS).
    const SO_MEMINFO: libc::c_int = 55;
    let mut info = [0u32; 9];
    let mut len = std::mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: a live buffer with its length passed alongside; the kernel writes at most
    // `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize >= 8).then(|| (u64::from(info[0]), u64::from(info[1])))
}

/// Enables UDP GRO on a receiving socket; false when the kernel lacks it.
pub fn enable_udp_gro<F: AsFd>(sock: &F) -> bool {
    setsockopt(sock, sockopt::UdpGroSegment, &true).is_ok()
}

/// Asks the kernel to stamp every datagram (or TCP segment) this socket receives with its
/// arrival time (SO_TIMESTAMPNS, the system clock); false when it will not.
pub fn enable_rx_timestamps<F: AsFd>(sock: &F) -> bool {
    setsockopt(sock, sockopt::ReceiveTimestampns, &true).is_ok()
}

/// A datagram read with [`recv_stamped`].
#[derive(Debug, Clone, Copy)]
pub struct Stamped {
    pub len: usize,
    pub from: Option<std::net::SocketAddr>,
    /// When it arrived, ns since the Unix epoch.
    pub at_ns: u64,
    /// `at_ns` is the kernel's arrival stamp (not the time it was read).
    pub kernel: bool,
}

/// Reads one datagram with the kernel's arrival time when [`enable_rx_timestamps`] is
/// on, else the time it was read.
pub fn recv_stamped<F: AsRawFd>(sock: &F, buf: &mut [u8]) -> io::Result<Stamped> {
    recv_stamped_with(sock, buf, nix::sys::socket::MsgFlags::empty())
}

/// Reads exactly `buf.len()` bytes from a TCP connection, with the kernel's arrival
/// stamp of the segment that brought the last of them (SO_TIMESTAMPNS, once
/// [`enable_rx_timestamps`] is on; else the time the last read returned). With `spin`
/// non-zero, it polls (non-blocking reads) for up to that long before it sleeps in a
/// blocking read (bounded by the socket's read timeout): a reply that comes within the
/// spin is read without this thread being woken, which on a VM can take tens of µs.
pub fn read_exact_stamped(
    conn: &std::net::TcpStream,
    buf: &mut [u8],
    spin: std::time::Duration,
) -> io::Result<Stamped> {
    use nix::sys::socket::MsgFlags;
    let start = std::time::Instant::now();
    let mut got = 0;
    let mut last = None;
    while got < buf.len() {
        let spinning = !spin.is_zero() && start.elapsed() < spin;
        let flags = if spinning {
            MsgFlags::MSG_DONTWAIT
        } else {
            MsgFlags::empty()
        };
        match recv_stamped_with(conn, &mut buf[got..], flags) {
            Ok(s) if s.len == 0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(s) => {
                got += s.len;
                last = Some(s);
            }
            Err(e) if spinning && e.kind() == io::ErrorKind::WouldBlock => {
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    last.ok_or_else(|| io::Error::other("nothing to read into"))
}

fn recv_stamped_with<F: AsRawFd>(
    sock: &F,
    buf: &mut [u8],
    flags: nix::sys::socket::MsgFlags,
) -> io::Result<Stamped> {
    use nix::sys::socket::{ControlMessageOwned, SockaddrStorage, recvmsg};
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), flags)
        .map_err(io::Error::from)?;
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampns(t) = c {
                stamp = Some(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64);
            }
        }
    }
    let peer = msg.address.and_then(|a| {
        a.as_sockaddr_in()
            .map(|v4| std::net::SocketAddr::V4((*v4).into()))
            .or_else(|| {
                a.as_sockaddr_in6()
                    .map(|v6| std::net::SocketAddr::V6((*v6).into()))
            })
    });
    Ok(Stamped {
        len: msg.bytes,
        from: peer,
        at_ns: stamp.unwrap_or_else(crate::cpu::unix_now_ns),
        kernel: stamp.is_some(),
    })
}

/// TCP_MAXSEG, set before connecting.
pub fn set_mss<F: AsFd>(sock: &F, mss: u32) -> Result<(), SockError> {
    setsockopt(sock, sockopt::TcpMaxSeg, &mss).map_err(opt_err("TCP_MAXSEG"))
}

/// Reads what `sock` holds now, without waiting: `WouldBlock` when it holds nothing
/// (recv(2) with MSG_DONTWAIT; the socket stays blocking for every other call).
pub fn recv_now<F: AsFd>(sock: &F, buf: &mut [u8]) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    recv(sock.as_fd().as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT).map_err(io::Error::from)
}

/// `--skip-rx-copy` on a TCP socket: consumes up to `len` bytes of what `sock` holds
/// (waiting as a read would) and discards them in the kernel, copying nothing into
/// `buf` (recv(2) with MSG_TRUNC); `without_waiting` adds MSG_DONTWAIT. Returns the
/// bytes consumed.
pub fn recv_discard<F: AsFd>(sock: &F, buf: &mut [u8], without_waiting: bool) -> io::Result<usize> {
    use nix::sys::socket::{MsgFlags, recv};
    let mut flags = MsgFlags::MSG_TRUNC;
    if without_waiting {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    recv(sock.as_fd().as_raw_fd(), buf, flags).map_err(io::Error::from)
}

/// Waits until `sock` has something to read or `timeout` passed (rounded up to a
/// millisecond); an interrupted wait returns early. Readiness is not reported: the caller
/// reads without waiting next.
pub fn wait_readable<F: AsFd>(sock: &F, timeout: std::time::Duration) -> io::Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let ms = timeout.as_micros().div_ceil(1000);
    let ms = u16::try_from(ms).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(_) | Err(nix::Error::EINTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
pub(crate) fn force_recv_buffer(sock: &impl AsRawFd, bytes: usize) -> bool {
    libc::c_int::try_from(bytes)
        .is_ok_and(|b| set_raw(sock, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &b).is_ok())
}

#[cfg(test)]
mod tests {
    /// `recv_now` never waits on a blocking socket: nothing queued is `WouldBlock` at
    /// once; what is queued comes back, up to the buffer.
    #[test]
    fn recv_now_takes_what_is_queued_without_waiting() {
        use std::io::Write;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        let mut buf = [0u8; 16];
        let t = std::time::Instant::now();
        let e = super::recv_now(&rx, &mut buf).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        tx.write_all(b"0123456789abcdefXYZ").unwrap();
        let mut got = Vec::new();
        while got.len() < 19 {
            match super::recv_now(&rx, &mut buf) {
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, b"0123456789abcdefXYZ");
        drop(tx);
        let mut n = 1;
        while n != 0 {
            n = match super::recv_now(&rx, &mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => 1,
                Err(e) => panic!("{e}"),
            };
        }
    }

    /// `recv_discard` consumes what is queued without copying it: the buffer keeps what
    /// it held, and the next read starts where the discarded bytes ended.
    #[test]
    fn recv_discard_consumes_without_copying() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut rx, _) = l.accept().unwrap();
        tx.write_all(b"0123456789abcdefXYZ").unwrap();
        let mut buf = [b'.'; 16];
        let mut discarded = 0;
        while discarded < 16 {
            discarded += super::recv_discard(&rx, &mut buf[..16 - discarded], false).unwrap();
        }
        assert_eq!(&buf, b"................", "nothing was copied");
        let mut rest = [0u8; 3];
        rx.read_exact(&mut rest).unwrap();
        assert_eq!(&rest, b"XYZ");
        let e = super::recv_discard(&rx, &mut buf, true).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    }

    /// `--cntl-ka` sets what it is given and keeps the kernel's defaults for the rest;
    /// an idle time no longer than the probes take is refused, naming both.
    #[test]
    fn keepalive_sets_what_is_given_and_keeps_the_kernels_defaults() {
        use flowlab_results::spec::Keepalive;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let s = socket2::SockRef::from(&c);
        let default_count = s.tcp_keepalive_retries().unwrap();
        let set = super::set_keepalive(&c, &Keepalive::parse("100/7").unwrap()).unwrap();
        assert_eq!(set, (100, 7, default_count));
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap().as_secs(), 100);
        assert_eq!(s.tcp_keepalive_interval().unwrap().as_secs(), 7);
        let e = super::set_keepalive(&c, &Keepalive::parse("10/5/2").unwrap()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--cntl-ka: the idle time (10 s) must be longer than the probes take (5 s × 2)"
        );
    }

    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn unknown_congestion_names_the_available_ones() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let err = set_congestion(&s, "no-such-cc").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("'no-such-cc' is not available"), "{msg}");
        assert!(msg.contains("reno") || msg.contains("cubic"), "{msg}");
        set_congestion(&s, "reno").unwrap();
        assert_eq!(congestion(&s).as_deref(), Some("reno"));
    }

    #[test]
    fn buffers_report_what_the_kernel_granted() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let got = set_buffers(&socket2::SockRef::from(&s), 64 * 1024).unwrap();
        // Linux doubles the value asked for.
        assert_eq!(got.sndbuf, 128 * 1024);
        assert_eq!(got.rcvbuf, 128 * 1024);
        let info = tcp_info(&s).unwrap();
        assert!(info.snd_mss > 0 && info.snd_cwnd_bytes > 0);
    }

    /// SIOCOUTQ counts what the peer has not acknowledged: bytes beyond what a receiver
    /// that does not read can buffer stay counted, and once it reads them all the count
    /// is zero.
    #[test]
    fn unacknowledged_counts_until_the_peer_has_it_all() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut tx =
            std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut rx, _) = listener.accept().expect("accept");
        // Small buffers: little to write before both are full, and quick to read.
        let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(16 * 1024);
        let _ = socket2::SockRef::from(&tx).set_send_buffer_size(16 * 1024);
        tx.set_nonblocking(true).expect("nonblocking");
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("read timeout");
        let mut sent = 0usize;
        let block = [7u8; 65536];
        // Writes until the peer's buffer and this one are full: refused for 50 ms on end
        // (a busy machine may process loopback later than the write returns).
        let mut refused_since = None;
        while refused_since.is_none_or(|t: std::time::Instant| t.elapsed().as_millis() < 50) {
            match tx.write(&block) {
                Ok(n) => {
                    sent += n;
                    refused_since = None;
                }
                Err(_) => {
                    refused_since.get_or_insert_with(std::time::Instant::now);
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
        let queued = super::unacknowledged(&tx).expect("SIOCOUTQ");
        assert!(queued > 0 && queued <= sent, "{queued} of {sent}");
        let mut buf = vec![0u8; 65536];
        let mut got = 0usize;
        while got < sent {
            got += rx.read(&mut buf).expect("read");
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while super::unacknowledged(&tx) != Some(0) {
            assert!(std::time::Instant::now() < deadline, "still unacknowledged");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
