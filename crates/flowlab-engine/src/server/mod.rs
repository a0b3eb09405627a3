//! The server: one TCP listener and one UDP socket on the same port, many tests at once.
//!
//! Every TCP connection starts with a cookie. A cookie that names a test waiting for its
//! data streams hands the connection to that test; any other well-formed cookie opens a
//! new test. The cookie and a new test's parameters must arrive within
//! `handshake_timeout` of the connection, and a test slot (of `max_tests`, and of
//! `max_tests_per_source` from one address; beyond them the client is told the server is
//! busy) is taken only once the parameters are complete and valid, so a peer that sends
//! slowly or not at all holds no slot; its data streams must then open within
//! `handshake_timeout` and a round trip per stream.
//! Each test runs in its own thread; nothing one peer sends or fails to send can stop the
//! others: every read has a deadline and every error ends only the test it belongs to.
//!
//! UDP streams carry no cookie. A stream-opening datagram is matched to the test that is
//! creating UDP streams from the same client address; tests from one address create
//! their UDP streams one after the other, so the match is never ambiguous, and a test
//! from another address never waits for them.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use flowlab_proto::Cookie;
use flowlab_proto::probe;
use flowlab_proto::udp::handshake_reply;
use flowlab_results::result::ServerOutput;
use flowlab_results::server::{RefusalKind, ServerEvent};
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};

use crate::control;
use error::TestError;
use test::run_test;

mod auth;
mod echo;
mod error;
mod limits;
mod load;
mod refusal;
mod streams;
mod test;

pub use auth::ServerAuth;
use limits::{Handshake, Handshakes, RateGate, RateLimited};
pub use limits::{Place, Places};

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind; `None` binds every address, IPv6 and IPv4.
    pub bind: Option<IpAddr>,
    /// The network device every socket is bound to (SO_BINDTODEVICE; iperf3's
    /// `--bind-dev`), or any.
    pub bind_dev: Option<String>,
    /// `-F`: every test's data is this file — sent from it when the server sends, written
    /// to it (anew) when the server receives; only TCP tests of one stream one way.
    pub file: Option<std::path::PathBuf>,
    /// TCP data streams whose data goes unacknowledged this long fail (TCP_USER_TIMEOUT;
    /// iperf3's `--snd-timeout`), or the system's default.
    pub snd_timeout: Option<Duration>,
    /// `--cntl-ka`: TCP keepalive on every test's control connection.
    pub control_keepalive: Option<flowlab_results::spec::Keepalive>,
    pub port: u16,
    /// Tests that may run at once.
    pub max_tests: usize,
    /// Tests that may run at once from one source (an IPv4 address, an IPv6 /64).
    pub max_tests_per_source: usize,
    /// Longest test allowed (time plus omitted seconds); `None`: no limit.
    pub max_duration: Option<Duration>,
    /// Highest rate allowed per test, bits/s, over all its streams.
    pub max_bitrate: Option<u64>,
    /// Most bytes one test may move.
    pub max_bytes: Option<u64>,
    /// Serve one test, then return.
    pub one_off: bool,
    /// How long a peer may stay silent while the server waits for it (a control message,
    /// a data stream), and how long a running test may move no data.
    pub idle_timeout: Duration,
    /// How long a new connection has to send its cookie and, for a new test, its whole
    /// parameters: a deadline for the handshake, however the bytes are spaced.
    pub handshake_timeout: Duration,
    /// How long past its time (time + omitted seconds, or `max_duration` when that is
    /// shorter) a test may run before the server ends it: the client's TEST_END is late
    /// by a round trip and its scheduling, never by more.
    pub end_grace: Duration,
    /// Connections the server holds before they become a test or a data stream (waiting
    /// for their cookie and parameters): each costs a thread for at most
    /// `handshake_timeout`. When all are taken, the oldest is closed to make room for a
    /// new one, so a flood of idle connections from many addresses cannot lock honest
    /// clients out (their handshakes take a round trip, the flood's forever).
    pub max_handshakes: usize,
    /// Connections in their handshake from one source (an IPv4 address, an IPv6 /64);
    /// beyond it, new connections from that source are closed at once.
    pub max_handshakes_per_source: usize,
    /// New connections a second from one source, in bursts of up to four seconds'
    /// worth; beyond it, new connections from that source are closed at once.
    pub handshake_rate: u32,
    /// Latency probes answered a second per source (a probe counts once per 1500 bytes
    /// or part), in bursts of up to four seconds' worth; the rest go unanswered.
    pub probe_rate: u32,
    /// Refusals and failed connections logged per second; the rest are counted and the
    /// count logged with the next line.
    pub log_rate: u32,
    /// Authenticate clients as iperf3 does (`--rsa-private-key-path`,
    /// `--authorized-users-path`); `None` serves everyone.
    pub auth: Option<Arc<ServerAuth>>,
    /// Another service on the same port (`serve --fragments`): connections that start
    /// with its magic bytes are handed to it instead of the test protocol.
    pub extra: Option<Arc<dyn ConnectionHandler>>,
}

/// A service that shares the test port, told apart by the first bytes a client sends
/// (test connections start with a cookie of `[a-z2-7]`).
pub trait ConnectionHandler: Send + Sync + std::fmt::Debug {
    /// The first four bytes of this service's connections.
    fn magic(&self) -> [u8; 4];
    /// Serves one connection, on its own thread, until it ends. The connection counts as
    /// in its handshake until the service calls [`Greeting::done`].
    fn handle(&self, conn: TcpStream, peer: SocketAddr, greeting: Greeting);
}

/// A connection handed to another service while its greeting is still due: it counts
/// against `max_handshakes` (in all and per source) until [`Greeting::done`], and its
/// greeting must be whole by `deadline` (`handshake_timeout` from the connection).
pub struct Greeting {
    pub deadline: control::Deadline,
    /// The server's log (rate-limited like its own refusals).
    pub log: Arc<dyn ServerLog>,
    held: Option<Handshake>,
}

impl Greeting {
    /// A greeting for a connection no server counts (a service driven by itself).
    pub fn new(allowed: Duration, log: Arc<dyn ServerLog>) -> Greeting {
        Greeting {
            deadline: control::Deadline::after(allowed),
            log,
            held: None,
        }
    }

    /// The greeting has been read: the connection no longer counts as in its handshake.
    pub fn done(&mut self) {
        self.held = None;
    }

    /// Logs that `peer`'s connection is refused, the kind of refusal and why (the peer
    /// is not told).
    pub fn refuse(&self, peer: SocketAddr, kind: RefusalKind, reason: String) {
        self.log.event(ServerEvent::Refused {
            peer: peer.to_string(),
            kind,
            reason,
        });
    }

    /// Denies `peer`'s connection (its credential): logged as [`Greeting::refuse`] does,
    /// and told to the peer as a denied admission, without the reason.
    pub fn deny(&self, conn: &mut TcpStream, peer: SocketAddr, why: String) {
        self.refuse(peer, RefusalKind::Credentials, why);
        let _ =
            std::io::Write::write_all(conn, &flowlab_proto::fragment::Admission::Denied.encode());
    }

    /// Turns `peer`'s connection away: logged as [`Greeting::refuse`] does, and told to
    /// the peer as a busy admission naming the reason.
    pub fn turn_away(&self, conn: &mut TcpStream, peer: SocketAddr, why: String) {
        self.refuse(peer, RefusalKind::Busy, why.clone());
        let _ = std::io::Write::write_all(
            conn,
            &flowlab_proto::fragment::Admission::Busy(why).encode(),
        );
    }
}

impl std::fmt::Debug for Greeting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Greeting")
            .field("deadline", &self.deadline)
            .field("held", &self.held.is_some())
            .finish()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: None,
            bind_dev: None,
            file: None,
            snd_timeout: None,
            control_keepalive: None,
            port: flowlab_proto::DEFAULT_PORT,
            max_tests: 16,
            max_tests_per_source: 4,
            max_duration: Some(DEFAULT_MAX_DURATION),
            max_bitrate: None,
            max_bytes: None,
            one_off: false,
            idle_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(5),
            end_grace: Duration::from_secs(2),
            max_handshakes: 256,
            max_handshakes_per_source: 160,
            handshake_rate: 200,
            probe_rate: 1000,
            log_rate: 20,
            auth: None,
            extra: None,
        }
    }
}

/// The longest test a server allows unless told otherwise: long enough for any
/// measurement a client asks of a public server, short enough that a test which moves a
/// byte now and then cannot hold its slot for ever.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(600);

/// Where server events go.
pub trait ServerLog: Send + Sync {
    fn event(&self, event: ServerEvent);

    /// What this log says of one test (its `events`), for a client that asks for the
    /// server's output (iperf3's `--get-server-output`): what it would have printed, in
    /// the log's own format (the engine formats nothing).
    fn output(&self, events: &[ServerEvent]) -> ServerOutput;
}

/// Sees every server event as it happens, none left out (metrics count them); never
/// asked for a test's output.
pub trait ServerObserver: Send + Sync {
    fn observe(&self, event: &ServerEvent);
}

/// A log whose events an observer sees first.
struct Observed {
    observer: Arc<dyn ServerObserver>,
    log: Arc<dyn ServerLog>,
}

impl ServerLog for Observed {
    fn event(&self, event: ServerEvent) {
        self.observer.observe(&event);
        self.log.event(event);
    }

    fn output(&self, events: &[ServerEvent]) -> ServerOutput {
        self.log.output(events)
    }
}

/// What happens beside a server's own tests (`flowlab serve --quic`'s connections), told
/// to its log and its observer as its tests are (under `--log-rate`), numbered with them.
#[derive(Clone)]
pub struct Reporter(Arc<Shared>);

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").finish_non_exhaustive()
    }
}

impl Reporter {
    /// The next test number of the server.
    pub fn next_test(&self) -> u64 {
        self.0.next_id.fetch_add(1, Ordering::AcqRel)
    }

    pub fn event(&self, event: ServerEvent) {
        self.0.log.event(event);
    }
}

/// A log that drops everything: a client asking for the server's output gets none.
#[derive(Debug, Default)]
pub struct NoLog;
impl ServerLog for NoLog {
    fn event(&self, _: ServerEvent) {}

    fn output(&self, _: &[ServerEvent]) -> ServerOutput {
        ServerOutput::Text(String::new())
    }
}

/// A data connection and its place in the accept order. The client opens its streams one
/// after another, so accept order is the client's stream order even though each
/// connection's cookie is read on a thread of its own.
type Numbered<T> = (u64, T);
type Pending<T> = Mutex<HashMap<Cookie, Sender<Numbered<T>>>>;

/// A test opening its UDP streams, waiting for their handshakes from its client's
/// address.
struct UdpPending {
    tx: Sender<UdpSocket>,
    /// Client ports already given a stream: a resent handshake opens nothing new.
    seen: Vec<SocketAddr>,
}

struct Shared {
    cfg: ServerConfig,
    log: Arc<dyn ServerLog>,
    /// Connections in their handshake.
    handshakes: Mutex<Handshakes>,
    /// New connections per second per source.
    gate: RateGate,
    /// Latency probes per second per source.
    probe_gate: RateGate,
    /// TCP echo connections (`flowlab ping --tcp`).
    echo_places: Places,
    /// Load-generating connections (`flowlab rpm`).
    load_places: Places,
    /// Running tests, in all and per source.
    test_places: Places,
    local: SocketAddr,
    /// The TCP listener is MPTCP: an MPTCP client's streams are served as MPTCP.
    mptcp: bool,
    next_id: AtomicU64,
    tcp_streams: Pending<TcpStream>,
    /// The test opening its UDP streams, per client address (see the module docs);
    /// another test from that address waits on `udp_turn` until it is done.
    udp_waiting: Mutex<HashMap<IpAddr, UdpPending>>,
    udp_turn: Condvar,
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

fn bind_socket(
    addr: SocketAddr,
    ty: Type,
    proto: SockProtocol,
    dev: Option<&str>,
) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), ty, Some(proto))?;
    if let Some(dev) = dev {
        s.bind_device(Some(dev.as_bytes()))
            .map_err(|e| std::io::Error::new(e.kind(), format!("--bind-dev {dev}: {e}")))?;
    }
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
        Server::bind_observed(cfg, log, None)
    }

    /// [`Server::bind`], with `observer` seeing every event before `log`'s rate limit
    /// (`--log-rate`) leaves any out: what counts them (metrics) misses none.
    pub fn bind_observed(
        cfg: ServerConfig,
        log: Arc<dyn ServerLog>,
        observer: Option<Arc<dyn ServerObserver>>,
    ) -> std::io::Result<Server> {
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
            let dev = cfg.bind_dev.as_deref();
            // MPTCP where the kernel makes it: a plain TCP client's connection is
            // accepted as a plain TCP socket, an MPTCP client's (-m) as MPTCP.
            let listen = |protocol| {
                bind_socket(addr, Type::STREAM, protocol, dev).and_then(|s| {
                    s.listen(128)?;
                    Ok(s)
                })
            };
            let (tcp, mptcp) = match listen(SockProtocol::MPTCP) {
                Ok(s) => (Ok(s), true),
                Err(_) => (listen(SockProtocol::TCP), false),
            };
            let tcp = match tcp {
                Ok(s) => TcpListener::from(s),
                Err(e) => {
                    last_err = Some(e);
                    continue;
                }
            };
            let local = tcp.local_addr()?;
            let udp = bind_socket(local, Type::DGRAM, SockProtocol::UDP, dev)?;
            crate::multicast::quiet_listener(&udp, local.is_ipv6());
            let udp: UdpSocket = udp.into();
            let limited = Arc::new(RateLimited::new(log.clone(), cfg.log_rate));
            let log: Arc<dyn ServerLog> = match &observer {
                Some(o) => Arc::new(Observed {
                    observer: o.clone(),
                    log: limited,
                }),
                None => limited,
            };
            let gate = RateGate::new(cfg.handshake_rate);
            let probe_gate = RateGate::new(cfg.probe_rate);
            let shared = Arc::new(Shared {
                gate,
                probe_gate,
                echo_places: echo::places(),
                load_places: load::places(),
                test_places: test_places(cfg.max_tests, cfg.max_tests_per_source),
                cfg,
                log,
                handshakes: Mutex::new(Handshakes::default()),
                local,
                mptcp,
                next_id: AtomicU64::new(1),
                tcp_streams: Mutex::new(HashMap::new()),
                udp_waiting: Mutex::new(HashMap::new()),
                udp_turn: Condvar::new(),
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

    /// A handle that tells this server's log of what is served beside it.
    pub fn reporter(&self) -> Reporter {
        Reporter(Arc::clone(&self.shared))
    }

    /// Serves until the process ends (or, with `one_off`, until one test has ended).
    pub fn run(self) -> std::io::Result<()> {
        let Server { tcp, udp, shared } = self;
        shared.log.event(ServerEvent::Listening {
            address: shared.local.to_string(),
            quic: None,
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
                    let admitted = if shared.gate.allow(peer.ip()) {
                        Handshake::admit(&shared, &conn, peer.ip()).ok_or(
                            "too many connections from this address in their handshake \
                             (--max-handshakes-per-source)",
                        )
                    } else {
                        Err("new connections from this address beyond --handshake-rate")
                    };
                    let handshake = match admitted {
                        Ok(h) => h,
                        Err(reason) => {
                            // Closed at once: a flood of connections costs no thread.
                            drop(conn);
                            shared.log.event(ServerEvent::Refused {
                                peer: peer.to_string(),
                                kind: RefusalKind::Flood,
                                reason: reason.into(),
                            });
                            continue;
                        }
                    };
                    let _ = conn.set_nonblocking(false);
                    accepted += 1;
                    let order = accepted;
                    let spawned = std::thread::Builder::new()
                        .name(format!("conn-{peer}"))
                        .spawn(move || handle_connection(conn, peer, order, handshake));
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
    // Probes are stamped by the kernel on arrival, so the server's time in a reply is
    // what it added, not when this thread got round to it.
    crate::sock::enable_rx_timestamps(&udp);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let (n, peer, arrived_ns) = match crate::sock::recv_stamped(&udp, &mut buf) {
            Ok(crate::sock::Stamped {
                len,
                from: Some(from),
                at_ns,
                ..
            }) => (len, from, at_ns),
            Ok(_) => continue,
            Err(e) => {
                tracing::debug!("UDP listener: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if probe::is_request(&buf[..n]) {
            echo_probe(&udp, &mut buf[..n], peer, arrived_ns, &shared);
            continue;
        }
        let Some(reply) = handshake_reply(&buf[..n]) else {
            tracing::debug!(%peer, len = n, "ignoring a stray UDP datagram");
            continue;
        };
        let Ok(mut waiting) = shared.udp_waiting.lock() else {
            continue;
        };
        let Some(w) = waiting.get_mut(&peer.ip().to_canonical()) else {
            drop(waiting);
            shared.log.event(ServerEvent::Refused {
                peer: peer.to_string(),
                kind: RefusalKind::Stray,
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
        let dev = shared.cfg.bind_dev.as_deref();
        let opened = bind_socket(shared.local, Type::DGRAM, SockProtocol::UDP, dev).and_then(|s| {
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

/// Answers a latency probe in place (same length: an echo never amplifies), within the
/// source's `--probe-rate`; beyond it the probe goes unanswered (the client counts it
/// lost), so a spoofed source cannot turn the server against a victim at more than that.
fn echo_probe(
    udp: &UdpSocket,
    datagram: &mut [u8],
    peer: SocketAddr,
    arrived_ns: u64,
    shared: &Shared,
) {
    // A probe costs one token per 1500 bytes or part: the limit is on what is reflected.
    let cost = datagram.len().div_ceil(1500) as u32;
    if !shared.probe_gate.allow_n(peer.ip(), cost) {
        shared.log.event(ServerEvent::Refused {
            peer: peer.to_string(),
            kind: RefusalKind::Probes,
            reason: "latency probes beyond --probe-rate".into(),
        });
        return;
    }
    probe::answer_in_place(datagram, arrived_ns, crate::cpu::unix_now_ns());
    let _ = udp.send_to(datagram, peer);
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

/// The test slots: `max` in all, `per_source` from one source.
fn test_places(max: usize, per_source: usize) -> Places {
    Places::new(
        max,
        per_source,
        "tests",
        ["--max-tests", "--max-tests-per-source"],
    )
}

fn handle_connection(mut conn: TcpStream, peer: SocketAddr, order: u64, handshake: Handshake) {
    let shared = &Arc::clone(handshake.shared());
    let deadline = control::Deadline::after(shared.cfg.handshake_timeout);
    let _ = conn.set_read_timeout(Some(deadline.allowed.min(shared.cfg.idle_timeout)));
    let _ = conn.set_write_timeout(Some(shared.cfg.idle_timeout));
    // The first four bytes say which service a connection is for (a test's cookie is
    // `[a-z2-7]`, the others' magic upper case). MSG_WAITALL under SO_RCVTIMEO: the
    // timeout bounds the whole peek.
    let start = peek_start::<4>(&conn);
    let greeting = |handshake| Greeting {
        deadline,
        log: Arc::clone(&shared.log),
        held: Some(handshake),
    };
    if start == Some(probe::TCP_MAGIC) {
        let idle = shared.cfg.idle_timeout;
        let auth = shared.cfg.auth.as_deref();
        echo::serve(
            conn,
            peer,
            greeting(handshake),
            &shared.echo_places,
            auth,
            idle,
        );
        return;
    }
    if start == Some(flowlab_proto::load::MAGIC) {
        let cfg = &shared.cfg;
        // A server that limits what a test may move cannot let load through unlimited.
        let refusal = (cfg.max_bitrate.is_some() || cfg.max_bytes.is_some()).then_some(
            "this server limits the rate or bytes of tests (--max-bitrate, --max-bytes): \
             no load-generating connections",
        );
        let lifetime = cfg
            .max_duration
            .map_or(load::MAX_LIFETIME, |d| d.min(load::MAX_LIFETIME));
        let service = load::Service {
            places: &shared.load_places,
            auth: cfg.auth.as_deref(),
            refusal,
            lifetime,
            idle: cfg.idle_timeout,
        };
        load::serve(conn, peer, greeting(handshake), &service);
        return;
    }
    if let Some(extra) = shared
        .cfg
        .extra
        .as_ref()
        .filter(|e| start == Some(e.magic()))
    {
        let _ = conn.set_read_timeout(Some(shared.cfg.idle_timeout));
        extra.handle(conn, peer, greeting(handshake));
        return;
    }
    let cookie = match control::read_cookie(&mut conn, deadline) {
        Ok(c) => c,
        Err(e) => {
            shared.log.event(ServerEvent::Refused {
                peer: peer.to_string(),
                kind: RefusalKind::Handshake,
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
        drop(handshake);
        let _ = tx.send((order, conn));
        return;
    }
    // A new test.
    let id = shared.next_id.fetch_add(1, Ordering::AcqRel);
    let outcome = run_test(&mut conn, peer, cookie, id, handshake, deadline, shared);
    if let Ok(mut m) = shared.tcp_streams.lock() {
        m.remove(&cookie);
    }
    let answered = match outcome {
        Ok(()) => true,
        Err(TestError::Busy(reason)) => {
            shared.log.event(ServerEvent::Refused {
                peer: peer.to_string(),
                kind: RefusalKind::Busy,
                reason,
            });
            false
        }
        Err(e) => {
            let answered = !e.before_parameters();
            shared.log.event(ServerEvent::TestFailed {
                test: Some(id),
                peer: peer.to_string(),
                error: e.to_string(),
            });
            answered
        }
    };
    // A one-off server ends after the first test whose parameters it answered (ran or
    // refused); a connection that never sent them, or found the slot taken, does not
    // count.
    if shared.cfg.one_off && answered {
        shared.done.store(true, Ordering::Release);
        // Wakes the accept loop: accept(2) on a listener shut down for reading fails.
        if let Some(l) = &shared.listener {
            let _ = SockRef::from(l).shutdown(std::net::Shutdown::Read);
        }
    }
}
