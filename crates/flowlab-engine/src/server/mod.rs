//! The server: one TCP listener and one UDP socket on the same port, many tests at once.
//!
//! Every TCP connection starts with a cookie. A cookie that names a test waiting for its
//! data streams hands the connection to that test; any other well-formed cookie opens a
//! new test (up to `max_tests`, beyond which the client is told the server is busy).
//! Each test runs in its own thread; nothing one peer sends or fails to send can stop the
//! others: every read has a timeout and every error ends only the test it belongs to.
//!
//! UDP streams carry no cookie. A stream-opening datagram is matched to the test that is
//! creating UDP streams, from the same client address; tests create their UDP streams one
//! after the other (server-wide), so the match is never ambiguous.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flowlab_proto::udp::handshake_reply;
use flowlab_proto::{Cookie, State};
use flowlab_report::server::ServerEvent;
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};

use crate::control;
use test::run_test;

mod refusal;
mod streams;
mod test;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `None` binds every address, IPv6 and IPv4.
    pub bind: Option<IpAddr>,
    pub port: u16,
    /// Tests that may run at once.
    pub max_tests: usize,
    /// Longest test allowed (time plus omitted seconds).
    pub max_duration: Option<Duration>,
    /// Highest rate allowed per test, bits/s, over all its streams.
    pub max_bitrate: Option<u64>,
    /// Most bytes one test may move.
    pub max_bytes: Option<u64>,
    /// Serve one test, then return.
    pub one_off: bool,
    /// How long a peer may stay silent while the server waits for it (a cookie, a
    /// control message, a data stream), and how long a running test may move no data.
    pub idle_timeout: Duration,
    /// Another service on the same port (`serve --fragments`): connections that start
    /// with its magic bytes are handed to it instead of the test protocol.
    pub extra: Option<Arc<dyn ConnectionHandler>>,
}

/// A service that shares the test port, told apart by the first bytes a client sends
/// (test connections start with a cookie of `[a-z2-7]`).
pub trait ConnectionHandler: Send + Sync + std::fmt::Debug {
    /// The first four bytes of this service's connections.
    fn magic(&self) -> [u8; 4];
    /// Serves one connection, on its own thread, until it ends.
    fn handle(&self, conn: TcpStream, peer: SocketAddr);
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            port: flowlab_proto::DEFAULT_PORT,
            max_tests: 16,
            max_duration: None,
            max_bitrate: None,
            max_bytes: None,
            one_off: false,
            idle_timeout: Duration::from_secs(10),
            extra: None,
        }
    }
}

/// Where server events go.
pub trait ServerLog: Send + Sync {
    fn event(&self, event: ServerEvent);
}

/// A log that drops everything.
#[derive(Debug, Default)]
pub struct NoLog;
impl ServerLog for NoLog {
    fn event(&self, _: ServerEvent) {}
}

/// A data connection and its place in the accept order. The client opens its streams one
/// after another, so accept order is the client's stream order even though each
/// connection's cookie is read on a thread of its own.
type Numbered<T> = (u64, T);
type Pending<T> = Mutex<HashMap<Cookie, Sender<Numbered<T>>>>;

struct UdpPending {
    client: IpAddr,
    tx: Sender<UdpSocket>,
    /// Client ports already given a stream: a resent handshake opens nothing new.
    seen: Vec<SocketAddr>,
}

struct Shared {
    cfg: ServerConfig,
    log: Arc<dyn ServerLog>,
    local: SocketAddr,
    active: AtomicUsize,
    next_id: AtomicU64,
    tcp_streams: Pending<TcpStream>,
    udp_waiting: Mutex<Option<UdpPending>>,
    /// Held by a test while it creates UDP streams (see the module docs).
    udp_setup: Mutex<()>,
    done: AtomicBool,
    /// A handle on the listening socket, shut down to wake the accept loop when a
    /// `one_off` server's test has ended (it blocks in accept rather than polling).
    listener: Option<TcpListener>,
}

/// A bound server, ready to run.
pub struct Server {
    tcp: TcpListener,
    udp: UdpSocket,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("local", &self.shared.local)
            .finish()
    }
}

fn bind_socket(addr: SocketAddr, ty: Type, proto: SockProtocol) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() && addr.ip().is_unspecified() {
        // Serve IPv4 clients too (as ::ffff:a.b.c.d).
        let _ = s.set_only_v6(false);
    }
    s.bind(&addr.into())?;
    Ok(s)
}

impl Server {
    /// Binds the TCP and UDP sockets. Port 0 picks a free TCP port and binds UDP to the same.
    pub fn bind(cfg: ServerConfig, log: Arc<dyn ServerLog>) -> std::io::Result<Server> {
        let ips: Vec<IpAddr> = match cfg.bind {
            Some(ip) => vec![ip],
            None => vec![
                IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                IpAddr::from([0u8, 0, 0, 0]),
            ],
        };
        let mut last_err = None;
        for ip in ips {
            let addr = SocketAddr::new(ip, cfg.port);
            let tcp = match bind_socket(addr, Type::STREAM, SockProtocol::TCP).and_then(|s| {
                s.listen(128)?;
                Ok(s)
            }) {
                Ok(s) => TcpListener::from(s),
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let local = tcp.local_addr()?;
            let udp: UdpSocket = bind_socket(local, Type::DGRAM, SockProtocol::UDP)?.into();
            let shared = Arc::new(Shared {
                cfg,
                log,
                local,
                active: AtomicUsize::new(0),
                next_id: AtomicU64::new(1),
                tcp_streams: Mutex::new(HashMap::new()),
                udp_waiting: Mutex::new(None),
                udp_setup: Mutex::new(()),
                done: AtomicBool::new(false),
                listener: tcp.try_clone().ok(),
            });
            return Ok(Server { tcp, udp, shared });
        }
        Err(last_err.unwrap_or_else(|| std::io::Error::other("no address to bind")))
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Serves until the process ends (or, with `one_off`, until one test has ended).
    pub fn run(self) -> std::io::Result<()> {
        let Server { tcp, udp, shared } = self;
        shared.log.event(ServerEvent::Listening {
            address: shared.local.to_string(),
        });
        let udp_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("udp-listener".into())
            .spawn(move || udp_listener(udp, udp_shared))?;
        let mut accepted = 0u64;
        loop {
            if shared.done.load(Ordering::Acquire) {
                return Ok(());
            }
            match tcp.accept() {
                Ok((conn, peer)) => {
                    let _ = conn.set_nonblocking(false);
                    let s = Arc::clone(&shared);
                    accepted += 1;
                    let order = accepted;
                    let spawned = std::thread::Builder::new()
                        .name(format!("conn-{peer}"))
                        .spawn(move || handle_connection(conn, peer, order, &s));
                    if let Err(e) = spawned {
                        shared.log.event(ServerEvent::TestFailed {
                            test: None,
                            peer: peer.to_string(),
                            error: format!("cannot start a thread: {e}"),
                        });
                    }
                }
                Err(_) if shared.done.load(Ordering::Acquire) => return Ok(()),
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not die.
                    tracing::warn!("accept failed: {e}");
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Runs the server on a background thread (in-process use: `flowlab quick`, tests).
    pub fn spawn(self) -> std::io::Result<std::thread::JoinHandle<std::io::Result<()>>> {
        std::thread::Builder::new()
            .name("flowlab-server".into())
            .spawn(move || self.run())
    }
}

fn udp_listener(udp: UdpSocket, shared: Arc<Shared>) {
    let mut buf = [0u8; 2048];
    loop {
        let (n, peer) = match udp.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("UDP listener: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Some(reply) = handshake_reply(&buf[..n]) else {
            tracing::debug!(%peer, len = n, "ignoring a stray UDP datagram");
            continue;
        };
        let Ok(mut waiting) = shared.udp_waiting.lock() else {
            continue;
        };
        let Some(w) = waiting.as_mut().filter(|w| same_ip(w.client, peer.ip())) else {
            drop(waiting);
            shared.log.event(ServerEvent::Refused {
                peer: peer.to_string(),
                reason: "UDP stream for no waiting test".into(),
            });
            continue;
        };
        if w.seen.contains(&peer) {
            // The client missed the reply: say it again.
            tracing::debug!(%peer, "repeated UDP handshake; the stream is open already");
            let _ = udp.send_to(&reply, peer);
            continue;
        }
        let opened = bind_socket(shared.local, Type::DGRAM, SockProtocol::UDP).and_then(|s| {
            s.connect(&peer.into())?;
            let u: UdpSocket = s.into();
            u.send(&reply)?;
            Ok(u)
        });
        match opened {
            Ok(u) => {
                w.seen.push(peer);
                let _ = w.tx.send(u);
            }
            Err(e) => shared.log.event(ServerEvent::TestFailed {
                test: None,
                peer: peer.to_string(),
                error: format!("opening UDP stream: {e}"),
            }),
        }
    }
}

fn same_ip(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}

/// Looks at the first `N` bytes of a connection without taking them (waiting for them up
/// to the read timeout); `None` if they do not come.
fn peek_start<const N: usize>(conn: &TcpStream) -> Option<[u8; N]> {
    let mut b = [0u8; N];
    // SAFETY: a live buffer with its length; MSG_PEEK leaves the bytes in the socket.
    let n = unsafe {
        libc::recv(
            std::os::fd::AsRawFd::as_raw_fd(conn),
            b.as_mut_ptr().cast(),
            N,
            libc::MSG_PEEK | libc::MSG_WAITALL,
        )
    };
    (n == N as isize).then_some(b)
}

fn handle_connection(mut conn: TcpStream, peer: SocketAddr, order: u64, shared: &Arc<Shared>) {
    let _ = conn.set_read_timeout(Some(shared.cfg.idle_timeout));
    let _ = conn.set_write_timeout(Some(shared.cfg.idle_timeout));
    if let Some(extra) = &shared.cfg.extra {
        if peek_start::<4>(&conn) == Some(extra.magic()) {
            extra.handle(conn, peer);
            return;
        }
    }
    let cookie = match control::read_cookie(&mut conn) {
        Ok(c) => c,
        Err(e) => {
            shared.log.event(ServerEvent::Refused {
                peer: peer.to_string(),
                reason: format!("no valid cookie: {e}"),
            });
            return;
        }
    };
    let stream_for = shared
        .tcp_streams
        .lock()
        .ok()
        .and_then(|m| m.get(&cookie).cloned());
    if let Some(tx) = stream_for {
        let _ = tx.send((order, conn));
        return;
    }
    // A new test.
    let active = shared.active.fetch_add(1, Ordering::AcqRel);
    if active >= shared.cfg.max_tests {
        shared.active.fetch_sub(1, Ordering::AcqRel);
        let _ = conn.write_all(&[State::AccessDenied.to_byte()]);
        shared.log.event(ServerEvent::Refused {
            peer: peer.to_string(),
            reason: format!("busy: {active} tests running (--max-tests)"),
        });
        return;
    }
    let id = shared.next_id.fetch_add(1, Ordering::AcqRel);
    let outcome = run_test(&mut conn, peer, cookie, id, shared);
    if let Ok(mut m) = shared.tcp_streams.lock() {
        m.remove(&cookie);
    }
    shared.active.fetch_sub(1, Ordering::AcqRel);
    if let Err(e) = outcome {
        shared.log.event(ServerEvent::TestFailed {
            test: Some(id),
            peer: peer.to_string(),
            error: e.to_string(),
        });
    }
    if shared.cfg.one_off {
        shared.done.store(true, Ordering::Release);
        // Wakes the accept loop: accept(2) on a listener shut down for reading fails.
        if let Some(l) = &shared.listener {
            let _ = SockRef::from(l).shutdown(std::net::Shutdown::Read);
        }
    }
}
