//! The client's connections: the control connection, and the data streams opened with
//! the options the test asked for.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use flowlab_proto::Cookie;
use flowlab_proto::params::Protocol;
use flowlab_proto::udp::{CONNECT_MSG, is_handshake_reply};
use flowlab_results::result::{StreamDirection, StreamInfo};
use flowlab_results::spec::{Direction, TestSpec};
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};

use super::ClientError;
use crate::sock::{self, SockError};
use crate::stream::{Role, StreamPlan, Transport};

/// The control connection: the first of `addrs` that accepts, from the local address and
/// device the spec binds to (`-B`, `--bind-dev`; any port). With `-m` it is MPTCP too,
/// so a test outlives the path it began on; against a server whose listener is plain
/// TCP (iperf3's control port is) it falls back to TCP, unseen.
pub(super) fn connect_any(addrs: &[SocketAddr], spec: &TestSpec) -> Result<TcpStream, ClientError> {
    let mut last = None;
    for a in addrs {
        let connected = tcp_socket(*a, spec).and_then(|s| {
            bind_local(&s, spec, *a, 0)?;
            s.connect_timeout(&(*a).into(), spec.connect_timeout)?;
            Ok(s)
        });
        match connected {
            Ok(s) => return Ok(s.into()),
            Err(e) => last = Some((a, e)),
        }
    }
    let (addr, source) = match last {
        // Said with the time waited and the option that sets it: "timed out" alone
        // leaves a user guessing how long and whether it can be longer.
        Some((a, e)) if e.kind() == std::io::ErrorKind::TimedOut => (
            a.to_string(),
            std::io::Error::new(
                e.kind(),
                format!(
                    "no answer within {} s (--connect-timeout)",
                    spec.connect_timeout.as_secs_f64()
                ),
            ),
        ),
        Some((a, e)) => (a.to_string(), e),
        None => (
            "(no address)".into(),
            std::io::Error::other("the name resolved to no address"),
        ),
    };
    Err(ClientError::Connect { addr, source })
}

/// 36 random bytes for the test's cookie.
pub(super) fn random36() -> [u8; 36] {
    let mut b = [0u8; 36];
    if getrandom::fill(&mut b).is_err() {
        // No entropy source: the cookie only has to be unique per server, so the clock will do.
        let t = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        for (i, x) in b.iter_mut().enumerate() {
            *x = (t >> (i % 16 * 8)) as u8 ^ i as u8;
        }
    }
    b
}

/// Opens the test's data streams as the server asked (CREATE_STREAMS): each one's plan
/// for the session and its description for the result.
pub(super) fn create_streams(
    spec: &TestSpec,
    proto: Protocol,
    server: SocketAddr,
    cookie: &Cookie,
) -> Result<(Vec<StreamPlan>, Vec<StreamInfo>), ClientError> {
    let p = spec.parallel as usize;
    let roles: Vec<Role> = match spec.direction {
        Direction::Forward => vec![Role::Send; p],
        Direction::Reverse => vec![Role::Receive; p],
        // Client-send streams first, as iperf3 orders them.
        Direction::Bidir => [vec![Role::Send; p], vec![Role::Receive; p]].concat(),
    };
    let mut plans = Vec::new();
    let mut infos = Vec::new();
    for (i, role) in roles.into_iter().enumerate() {
        let id = crate::stream::stream_id(i);
        let serr = |source| ClientError::Stream { id, source };
        let (transport, early) = match proto {
            Protocol::Tcp => (
                Transport::Tcp(Arc::new(open_tcp(spec, server, cookie, role, i).map_err(
                    |e| match e {
                        OpenError::Io(e) => serr(e),
                        OpenError::Sock(e) => ClientError::Sock(e),
                    },
                )?)),
                Vec::new(),
            ),
            Protocol::Udp => {
                let (s, early) = open_udp(spec, server, i).map_err(serr)?;
                (Transport::Udp(Arc::new(s)), early)
            }
        };
        let (local, remote, bufs, congestion, mss) = match &transport {
            Transport::Tcp(t) => (
                t.local_addr().map(|a| a.to_string()).unwrap_or_default(),
                t.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
                sock::buffers(&SockRef::from(t.as_ref())),
                sock::congestion(t.as_ref()),
                sock::tcp_info(t.as_ref()).map(|i| i.snd_mss),
            ),
            Transport::Udp(u) => (
                u.local_addr().map(|a| a.to_string()).unwrap_or_default(),
                u.peer_addr().map(|a| a.to_string()).unwrap_or_default(),
                sock::buffers(&SockRef::from(u.as_ref())),
                None,
                None,
            ),
        };
        let direction = if role == Role::Send {
            StreamDirection::Up
        } else {
            StreamDirection::Down
        };
        let tos = (spec.tos > 0)
            .then(|| {
                let peer = remote.parse().ok()?;
                match &transport {
                    Transport::Tcp(t) => sock::tos(&SockRef::from(t.as_ref()), peer),
                    Transport::Udp(u) => sock::tos(&SockRef::from(u.as_ref()), peer),
                }
            })
            .flatten();
        let snd_timeout_ms = match (&transport, spec.snd_timeout) {
            (Transport::Tcp(t), Some(_)) => SockRef::from(t.as_ref())
                .tcp_user_timeout()
                .ok()
                .flatten()
                .map(|d| d.as_millis() as u64),
            _ => None,
        };
        infos.push(StreamInfo {
            id,
            direction,
            local,
            remote,
            sndbuf: bufs.sndbuf,
            rcvbuf: bufs.rcvbuf,
            congestion,
            mss,
            tos,
            snd_timeout_ms,
        });
        plans.push(StreamPlan {
            id,
            role,
            transport,
            early,
        });
    }
    Ok((plans, infos))
}

enum OpenError {
    Io(std::io::Error),
    Sock(SockError),
}

/// Binds `s`, whose packets go to `server`, as the spec asks: to its device (`--bind-dev`),
/// then to its local address (`-B`) and `port` (0: any), or to the port alone. A port
/// given is reused at once (SO_REUSEADDR), as tests run one after another.
fn bind_local(s: &Socket, spec: &TestSpec, server: SocketAddr, port: u16) -> std::io::Result<()> {
    let said = |what: String| {
        move |e: std::io::Error| std::io::Error::new(e.kind(), format!("{what}: {e}"))
    };
    if let Some(dev) = &spec.bind_dev {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(said(format!("--bind-dev {dev}")))?;
    }
    if spec.bind.is_none() && port == 0 {
        return Ok(());
    }
    let ip = spec.bind.unwrap_or(match server {
        SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    });
    // TCP's TIME_WAIT would hold a given port a minute; a UDP port is not so held, and
    // reusing one would share it with another socket.
    if port != 0 && s.r#type()? == Type::STREAM {
        s.set_reuse_address(true)?;
    }
    let local = SocketAddr::new(ip, port);
    s.bind(&local.into())
        .map_err(said(format!("cannot bind {local} (-B/--cport)")))
}

/// Where a data stream connects: `server`, with `-L`'s flow label leased and carried
/// when one is asked for (IPv6 only).
fn labelled(s: &Socket, spec: &TestSpec, server: SocketAddr) -> std::io::Result<SocketAddr> {
    if spec.flowlabel == 0 {
        return Ok(server);
    }
    match server {
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_none() => {
            sock::set_flowlabel(s, v6, spec.flowlabel)
                .map(SocketAddr::V6)
                .map_err(|e| {
                    std::io::Error::new(e.kind(), format!("-L/--flowlabel {}: {e}", spec.flowlabel))
                })
        }
        _ => Err(std::io::Error::other(format!(
            "-L/--flowlabel: the server's address {server} is IPv4; flow labels are IPv6's (-6)"
        ))),
    }
}

/// The local port of data stream `index` with `--cport` (0 without): iperf3's, the port
/// plus the stream's place, client-send streams first.
fn stream_port(spec: &TestSpec, index: usize) -> std::io::Result<u16> {
    if spec.cport == 0 {
        return Ok(0);
    }
    u16::try_from(usize::from(spec.cport) + index).map_err(|_| {
        std::io::Error::other(format!(
            "--cport {}: stream {} would need a port above 65535",
            spec.cport,
            index + 1
        ))
    })
}

fn open_tcp(
    spec: &TestSpec,
    server: SocketAddr,
    cookie: &Cookie,
    role: Role,
    index: usize,
) -> Result<TcpStream, OpenError> {
    // `--recv-window` / `--recv-congestion` replace `-w` / `-C` on receiving sockets.
    let receiving = role == Role::Receive;
    let window = if receiving && spec.recv_window > 0 {
        spec.recv_window
    } else {
        spec.window
    };
    let congestion = match &spec.recv_congestion {
        Some(cc) if receiving => Some(cc),
        _ => spec.congestion.as_ref(),
    };
    let s = tcp_socket(server, spec).map_err(OpenError::Io)?;
    sock::set_buffers(&SockRef::from(&s), window).map_err(OpenError::Sock)?;
    if spec.tos > 0 {
        sock::set_tos(&SockRef::from(&s), server, spec.tos).map_err(OpenError::Io)?;
    }
    if spec.mss > 0 {
        sock::set_mss(&s, spec.mss).map_err(OpenError::Sock)?;
    }
    if let Some(t) = spec.snd_timeout {
        s.set_tcp_user_timeout(Some(t)).map_err(|e| {
            OpenError::Io(std::io::Error::new(e.kind(), format!("--snd-timeout: {e}")))
        })?;
    }
    stream_port(spec, index)
        .and_then(|port| bind_local(&s, spec, server, port))
        .map_err(OpenError::Io)?;
    let to = labelled(&s, spec, server).map_err(OpenError::Io)?;
    s.connect_timeout(&to.into(), spec.connect_timeout)
        .map_err(OpenError::Io)?;
    let mut t: TcpStream = s.into();
    if spec.nodelay {
        t.set_nodelay(true).map_err(OpenError::Io)?;
    }
    if let Some(cc) = congestion {
        sock::set_congestion(&t, cc).map_err(OpenError::Sock)?;
    }
    t.write_all(&cookie.encode()).map_err(OpenError::Io)?;
    Ok(t)
}

/// A TCP socket for `server`, or with `-m` an MPTCP one.
fn tcp_socket(server: SocketAddr, spec: &TestSpec) -> std::io::Result<Socket> {
    let protocol = if spec.mptcp {
        SockProtocol::MPTCP
    } else {
        SockProtocol::TCP
    };
    Socket::new(Domain::for_address(server), Type::STREAM, Some(protocol))
}

fn open_udp(
    spec: &TestSpec,
    server: SocketAddr,
    index: usize,
) -> std::io::Result<(UdpSocket, Vec<Vec<u8>>)> {
    let s = Socket::new(
        Domain::for_address(server),
        Type::DGRAM,
        Some(SockProtocol::UDP),
    )?;
    let want = if spec.window > 0 {
        spec.window
    } else {
        crate::stream::UDP_DEFAULT_BUFFER
    };
    sock::set_buffers(&SockRef::from(&s), want).map_err(std::io::Error::other)?;
    if spec.tos > 0 {
        sock::set_tos(&SockRef::from(&s), server, spec.tos)?;
    }
    if spec.dont_fragment {
        sock::set_dont_fragment(&s, server)
            .map_err(|e| std::io::Error::new(e.kind(), format!("--dont-fragment: {e}")))?;
    }
    bind_local(&s, spec, server, stream_port(spec, index)?)?;
    s.connect(&labelled(&s, spec, server)?.into())?;
    let u: UdpSocket = s.into();
    let deadline = Instant::now() + spec.connect_timeout.max(Duration::from_secs(1));
    let mut early = Vec::new();
    let mut buf = vec![0u8; 65_536];
    // The handshake datagram may be lost like any other: send it again every 500 ms.
    'resend: loop {
        u.send(&CONNECT_MSG)?;
        let resend_at = Instant::now() + Duration::from_millis(500);
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no answer to the UDP stream handshake",
                ));
            }
            if now >= resend_at {
                continue 'resend;
            }
            u.set_read_timeout(Some((resend_at - now).max(Duration::from_millis(1))))?;
            match u.recv(&mut buf) {
                Ok(n) if is_handshake_reply(&buf[..n]) => break 'resend,
                // Reverse mode: data from the server beat its reply, or the reply was
                // lost. The server sends data only once every stream is open, so this
                // stream is open too.
                Ok(n) => {
                    early.push(buf[..n].to_vec());
                    break 'resend;
                }
                Err(e) if crate::stream::is_timeout(&e) => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }
    u.set_read_timeout(None)?;
    Ok((u, early))
}

/// What to tell a user whose `-w` (or, on receiving TCP streams, `--recv-window`) the
/// kernel did not grant in full on this end's sockets (`infos`, buffers as the kernel
/// reports them: twice what it grants), or `None`. Without privilege the kernel caps
/// SO_SNDBUF/SO_RCVBUF at `net.core.wmem_max` and `rmem_max` (212992 by default); flowlab
/// runs the test with what it got (reported per stream) and says so. (iperf3 refuses a
/// `-w` above twice the cap, and runs a smaller one cut short without a word.)
pub(super) fn short_buffers(window: u64, recv_window: u64, infos: &[StreamInfo]) -> Option<String> {
    let mut said: Vec<String> = Vec::new();
    for info in infos {
        let (flag, asked) = if info.direction == StreamDirection::Down && recv_window > 0 {
            ("--recv-window", recv_window)
        } else {
            ("-w", window)
        };
        let mut parts = Vec::new();
        let mut caps = Vec::new();
        if asked > 0 && info.sndbuf < asked.saturating_mul(2) {
            parts.push(format!("a send buffer of {} bytes", info.sndbuf / 2));
            caps.push("net.core.wmem_max");
        }
        if asked > 0 && info.rcvbuf < asked.saturating_mul(2) {
            parts.push(format!("a receive buffer of {} bytes", info.rcvbuf / 2));
            caps.push("net.core.rmem_max");
        }
        if !parts.is_empty() {
            let verb = if caps.len() > 1 { "cap" } else { "caps" };
            let line = format!(
                "{flag} {asked}: the kernel granted {} ({} {verb} what it grants)",
                parts.join(" and "),
                caps.join(" and ")
            );
            if !said.contains(&line) {
                said.push(line);
            }
        }
    }
    (!said.is_empty()).then(|| format!("{}; the test runs with what it got", said.join("; ")))
}

#[cfg(test)]
mod tests {
    use flowlab_results::result::{StreamDirection, StreamInfo};

    fn info(direction: StreamDirection, sndbuf: u64, rcvbuf: u64) -> StreamInfo {
        StreamInfo {
            id: 1,
            direction,
            local: String::new(),
            remote: String::new(),
            sndbuf,
            rcvbuf,
            congestion: None,
            mss: None,
            tos: None,
            snd_timeout_ms: None,
        }
    }

    #[test]
    fn a_window_granted_short_is_told_with_what_was_granted() {
        let up = |snd, rcv| info(StreamDirection::Up, snd, rcv);
        let down = |snd, rcv| info(StreamDirection::Down, snd, rcv);
        // Granted in full (reported doubled): nothing to say; nor without -w.
        assert_eq!(
            super::short_buffers(1 << 20, 0, &[up(2 << 20, 2 << 20)]),
            None
        );
        assert_eq!(super::short_buffers(0, 0, &[up(4608, 131_072)]), None);
        // A receive buffer capped by the default rmem_max on one of two streams, said
        // once for both.
        let said = super::short_buffers(
            1 << 20,
            0,
            &[
                up(2 << 20, 425_984),
                up(2 << 20, 425_984),
                up(2 << 20, 2 << 20),
            ],
        )
        .expect("a short buffer is told");
        assert_eq!(
            said,
            "-w 1048576: the kernel granted a receive buffer of 212992 bytes \
             (net.core.rmem_max caps what it grants); the test runs with what it got"
        );
        // --recv-window on a receiving stream: judged against it, not -w.
        assert_eq!(
            super::short_buffers(1 << 20, 64 << 10, &[down(2 << 20, 128 << 10)]),
            None,
            "64 KiB asked and granted"
        );
        let said = super::short_buffers(0, 8 << 20, &[down(425_984, 425_984)])
            .expect("--recv-window cut short");
        assert!(
            said.starts_with("--recv-window 8388608: the kernel granted a send buffer of 212992 bytes and a receive buffer of 212992 bytes"),
            "{said}"
        );
    }
}
