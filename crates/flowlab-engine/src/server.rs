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
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flowlab_proto::frame::{MAX_PARAMS_LEN, MAX_RESULTS_LEN};
use flowlab_proto::hello::{ServerHello, feature};
use flowlab_proto::params::{FLOWLAB_EXT_VERSION, Mode, Protocol, TestParams};
use flowlab_proto::results::PeerResults;
use flowlab_proto::state::{encode_server_error, error_code};
use flowlab_proto::udp::handshake_reply;
use flowlab_proto::{Cookie, State};
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};

use crate::control::{self, ControlError};
use crate::session::DataSession;
use crate::sock;
use crate::stream::{Budget, DataConfig, Role, StreamPlan, TestControl, Transport};
use crate::trace;
use flowlab_report::server::ServerEvent;
use flowlab_report::spec::MAX_UDP_LEN;

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

/// Why a test ended early.
#[derive(Debug, thiserror::Error)]
enum TestError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("waiting for data streams: {0}")]
    Streams(String),
    #[error("the client ended the test (CLIENT_TERMINATE)")]
    ClientTerminated,
    #[error("{0}; test terminated")]
    Limit(String),
    #[error("unexpected control message {0:?}")]
    Unexpected(State),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Why a test is refused: told to a flowlab client in its hello, logged by the server.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    #[error("only TCP and UDP tests are served")]
    Protocol,
    #[error("{0} parallel streams asked for; 1 to 128 are served")]
    Parallel(u64),
    #[error("block length {asked} is above the largest served ({max})")]
    BlockLength { asked: u64, max: u64 },
    #[error("stop-and-wait needs a message length")]
    NoMessageLength,
    #[error("tests are limited to {max} s here (--max-duration); asked for {asked} s")]
    Duration { max: u64, asked: u64 },
    #[error("tests are limited to {max} bit/s here (--max-bitrate); ask for less with -b")]
    Bitrate { max: u64 },
    #[error("tests are limited to {max} bytes here (--max-bytes); asked for {asked}")]
    Bytes { max: u64, asked: u64 },
    #[error("this server lacks the extension '{0}'")]
    Extension(String),
}

/// Bytes per write or datagram of a test: as asked, or the protocol's default.
fn block_len(p: &TestParams, proto: Protocol) -> usize {
    match (p.len, proto) {
        (0, Protocol::Tcp) => flowlab_report::spec::DEFAULT_TCP_LEN,
        (0, Protocol::Udp) => flowlab_report::spec::DEFAULT_UDP_LEN,
        (l, _) => l as usize,
    }
}

/// Checks a client's parameters against what the server can and may do.
fn validate(p: &TestParams, cfg: &ServerConfig) -> Result<Protocol, Refusal> {
    let proto = p.protocol().ok_or(Refusal::Protocol)?;
    if !(1..=128).contains(&p.parallel) {
        return Err(Refusal::Parallel(p.parallel));
    }
    let max_len = if proto == Protocol::Udp {
        MAX_UDP_LEN as u64
    } else {
        16 << 20
    };
    if p.len > max_len {
        return Err(Refusal::BlockLength {
            asked: p.len,
            max: max_len,
        });
    }
    if p.flowlab
        .as_ref()
        .is_some_and(|f| f.mode == Mode::StopAndWait)
        && p.len == 0
    {
        return Err(Refusal::NoMessageLength);
    }
    let seconds = p.time + p.omit;
    if let Some(max) = cfg.max_duration {
        if p.time == 0 && p.num == 0 && p.blockcount == 0 || seconds > max.as_secs() {
            return Err(Refusal::Duration {
                max: max.as_secs(),
                asked: seconds,
            });
        }
    }
    if let Some(max) = cfg.max_bitrate {
        let asked = p.bandwidth.saturating_mul(p.stream_count());
        if p.bandwidth == 0 || asked > max {
            return Err(Refusal::Bitrate { max });
        }
    }
    if let Some(max) = cfg.max_bytes {
        // -n and -k count per direction; the limit, like its enforcement in
        // `wait_for_end`, counts both directions of a --bidir test.
        let per_direction = p
            .num
            .max(p.blockcount.saturating_mul(block_len(p, proto) as u64));
        let asked = per_direction.saturating_mul(if p.bidirectional { 2 } else { 1 });
        if asked > max {
            return Err(Refusal::Bytes { max, asked });
        }
    }
    Ok(proto)
}

fn run_test(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    id: u64,
    shared: &Arc<Shared>,
) -> Result<(), TestError> {
    let cfg = &shared.cfg;
    ctrl.set_nodelay(true)?;
    control::write_state(ctrl, State::ParamExchange)?;
    let params: TestParams = control::read_frame(ctrl, MAX_PARAMS_LEN)?;
    let is_flowlab = params.flowlab.as_ref().is_some_and(|f| f.version >= 1);
    let features = [
        feature::STOP_AND_WAIT,
        feature::EXACT_BYTES,
        feature::CLEAN_CLOSE,
        feature::UDP_BACKOFF,
        feature::TRACE,
        feature::RECEIVER_TUNING,
    ];
    let mut verdict = validate(&params, cfg);
    if let (Ok(_), Some(f)) = (&verdict, &params.flowlab) {
        if let Some(missing) = f.require.iter().find(|r| !features.contains(&r.as_str())) {
            verdict = Err(Refusal::Extension(missing.clone()));
        }
    }
    if is_flowlab {
        let hello = ServerHello {
            version: FLOWLAB_EXT_VERSION,
            server_version: env!("CARGO_PKG_VERSION").into(),
            features: features.iter().map(|f| f.to_string()).collect(),
            error: verdict.as_ref().err().map(Refusal::to_string),
            system: verdict.is_ok().then(crate::sysinfo::collect),
        };
        control::write_state(ctrl, State::FlowlabHello)?;
        control::write_frame(ctrl, &hello)?;
    }
    let proto = match verdict {
        Ok(p) => p,
        Err(reason) => {
            if !is_flowlab {
                ctrl.write_all(&[State::ServerError.to_byte()])?;
                ctrl.write_all(&encode_server_error(error_code::RECV_PARAMS, libc::EINVAL))?;
            }
            return Err(TestError::Refused(reason));
        }
    };
    let mode = params.flowlab.as_ref().map_or(Mode::Streaming, |f| f.mode);
    let n = params.stream_count() as usize;
    shared.log.event(ServerEvent::TestStarted {
        test: id,
        peer: peer.to_string(),
        protocol: if proto == Protocol::Udp {
            "udp".into()
        } else {
            "tcp".into()
        },
        streams: params.stream_count(),
        reverse: params.reverse,
        bidir: params.bidirectional,
        client: params.client_version.clone(),
    });

    // Data streams: client-send streams first, so the server receives on the first
    // `parallel` of a bidirectional test.
    let transports = collect_streams(ctrl, peer, cookie, proto, n, shared)?;
    let p = params.parallel as usize;
    let mut plans = Vec::with_capacity(n);
    for (i, transport) in transports.into_iter().enumerate() {
        let role = if params.reverse || (params.bidirectional && i >= p) {
            Role::Send
        } else {
            Role::Receive
        };
        apply_options(&transport, &params, role);
        plans.push(StreamPlan {
            id: crate::stream::stream_id(i),
            role,
            transport,
            early: Vec::new(),
        });
    }
    let len = block_len(&params, proto);
    let sends = params.reverse || params.bidirectional;
    let budget = match (params.num, params.blockcount) {
        (n, _) if n > 0 && sends => Budget::Bytes(n.into()),
        (_, k) if k > 0 && sends => Budget::Blocks(k.into()),
        _ => Budget::Unbounded,
    };
    let data = DataConfig {
        mode,
        len,
        rate_bps: params.bandwidth,
        counters_64bit: params.udp_counters_64bit,
        rto: params
            .flowlab
            .as_ref()
            .and_then(|f| f.rto_ms)
            .map_or(Duration::from_secs(1), Duration::from_millis),
        zerocopy: params.zerocopy,
        close_when_done: true,
        drain_to_eof: is_flowlab,
        backoff: params.flowlab.as_ref().is_some_and(|f| f.udp_backoff)
            && mode == Mode::Streaming
            && params.bandwidth == 0,
        trace: params
            .flowlab
            .as_ref()
            .and_then(|f| f.trace_us)
            .map(|us| Duration::from_micros(us).clamp(trace::MIN_PERIOD, trace::MAX_PERIOD)),
    };
    // Receivers read before the client is told to send (an unread UDP socket overflows
    // at once); senders start a control round trip early, which the peer's socket
    // buffers absorb.
    let ctl = TestControl::new(budget);
    let mut session = DataSession::start(plans, data, ctl, Duration::from_secs(params.omit))?;
    control::write_state(ctrl, State::TestStart)?;
    control::write_state(ctrl, State::TestRunning)?;
    let idle_limit = idle_allowance(params.bandwidth, len, cfg.idle_timeout);
    let outcome = wait_for_end(ctrl, &mut session, &params, cfg, idle_limit);
    match outcome {
        Ok(()) => {}
        Err(TestError::Limit(reason)) => {
            session.abort();
            let _ = control::write_state(ctrl, State::ServerTerminate);
            return Err(TestError::Limit(reason));
        }
        Err(e) => {
            session.abort();
            return Err(e);
        }
    }
    session.stop_senders();
    session.stop_receivers();
    let snap = session.snapshot();
    let wall = session.ctl.epoch.elapsed();
    let mut mine = session.peer_results(&snap, wall);
    for trace in session.take_traces() {
        if let Some(s) = mine.streams.iter_mut().find(|s| s.id == trace.id) {
            s.trace = Some(trace);
        }
    }
    ctrl.set_read_timeout(Some(cfg.idle_timeout))?;
    control::write_state(ctrl, State::ExchangeResults)?;
    let _theirs: PeerResults = control::read_frame(ctrl, MAX_RESULTS_LEN)?;
    control::write_frame(ctrl, &mine)?;
    control::write_state(ctrl, State::DisplayResults)?;
    // IPERF_DONE, or the client just closing, both end the test well.
    match control::read_state(ctrl) {
        Ok(State::IperfDone) | Err(ControlError::Closed) => {}
        Ok(other) => tracing::debug!("expected IPERF_DONE, got {other:?}"),
        Err(e) => tracing::debug!("waiting for IPERF_DONE: {e}"),
    }
    shared.log.event(ServerEvent::TestFinished {
        test: id,
        peer: peer.to_string(),
        bytes_received: mine
            .streams
            .iter()
            .zip(&session.streams)
            .filter(|(_, s)| s.role == Role::Receive)
            .map(|(r, _)| r.bytes)
            .sum(),
        bytes_sent: mine
            .streams
            .iter()
            .zip(&session.streams)
            .filter(|(_, s)| s.role == Role::Send)
            .map(|(r, _)| r.bytes)
            .sum(),
        seconds: wall.as_secs_f64(),
    });
    Ok(())
}

/// Waits for TEST_END while enforcing the server's limits and noticing a vanished client.
fn wait_for_end(
    ctrl: &mut TcpStream,
    session: &mut DataSession,
    params: &TestParams,
    cfg: &ServerConfig,
    idle_limit: Duration,
) -> Result<(), TestError> {
    let started = Instant::now();
    // iperf3's safety margin: a timed test that has not ended 40 s after it should have.
    let safety = (params.time > 0).then(|| Duration::from_secs(params.time + params.omit + 40));
    let mut last_total = 0u64;
    let mut last_progress = Instant::now();
    loop {
        // Poll finely until the omitted seconds end, so the baseline is taken on time;
        // after that, rarely: TEST_END or a closed connection wakes the read at once, and
        // every wake-up of this thread is time taken from the data streams' CPUs.
        let poll = if !session.omitting() {
            Duration::from_millis(500)
        } else {
            Duration::from_millis(5)
        };
        ctrl.set_read_timeout(Some(poll))?;
        match control::read_state(ctrl) {
            Ok(State::TestEnd) => return Ok(()),
            Ok(State::ClientTerminate) => return Err(TestError::ClientTerminated),
            Ok(other) => return Err(TestError::Unexpected(other)),
            Err(ControlError::Timeout(_)) => {}
            Err(e) => return Err(e.into()),
        }
        session.end_omit_if_due();
        let elapsed = started.elapsed();
        let total = session.total_bytes(Role::Send) + session.total_bytes(Role::Receive);
        if total > last_total {
            last_total = total;
            last_progress = Instant::now();
        } else if last_progress.elapsed() > idle_limit {
            return Err(TestError::Limit(format!(
                "no data moved for {} s",
                idle_limit.as_secs()
            )));
        }
        if let Some(max) = cfg.max_duration {
            if elapsed > max + Duration::from_secs(2) {
                return Err(TestError::Limit(format!(
                    "test ran past --max-duration {} s",
                    max.as_secs()
                )));
            }
        }
        if let Some(max) = cfg.max_bytes {
            if total > max {
                return Err(TestError::Limit(format!(
                    "test moved more than --max-bytes {max}"
                )));
            }
        }
        if let Some(max) = cfg.max_bitrate {
            let secs = elapsed.as_secs_f64();
            // Judge the average after a second, with 10 % grace for pacing granularity.
            if secs > 1.0 && total as f64 * 8.0 / secs > max as f64 * 1.1 {
                return Err(TestError::Limit(format!(
                    "average rate above --max-bitrate {max} bit/s"
                )));
            }
        }
        if safety.is_some_and(|s| elapsed > s) {
            return Err(TestError::Limit("the client never ended the test".into()));
        }
    }
}

fn collect_streams(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    proto: Protocol,
    n: usize,
    shared: &Arc<Shared>,
) -> Result<Vec<Transport>, TestError> {
    let deadline = Instant::now() + shared.cfg.idle_timeout;
    let mut out = Vec::with_capacity(n);
    match proto {
        Protocol::Tcp => {
            let (tx, rx) = mpsc::channel();
            shared
                .tcp_streams
                .lock()
                .map_err(|_| TestError::Streams("lock poisoned".into()))?
                .insert(cookie, tx);
            control::write_state(ctrl, State::CreateStreams)?;
            let mut conns = Vec::with_capacity(n);
            while conns.len() < n {
                conns.push(recv_until(&rx, deadline, n - conns.len())?);
            }
            if let Ok(mut m) = shared.tcp_streams.lock() {
                m.remove(&cookie);
            }
            conns.sort_by_key(|(order, _)| *order);
            out.extend(conns.into_iter().map(|(_, s)| Transport::Tcp(Arc::new(s))));
        }
        Protocol::Udp => {
            // One test at a time creates UDP streams (they carry no cookie).
            let _turn = shared
                .udp_setup
                .lock()
                .map_err(|_| TestError::Streams("lock poisoned".into()))?;
            let (tx, rx) = mpsc::channel();
            *shared
                .udp_waiting
                .lock()
                .map_err(|_| TestError::Streams("lock poisoned".into()))? = Some(UdpPending {
                client: peer.ip(),
                tx,
                seen: Vec::new(),
            });
            let result = (|| -> Result<(), TestError> {
                control::write_state(ctrl, State::CreateStreams)?;
                let mut opened: Vec<UdpSocket> = Vec::with_capacity(n);
                while opened.len() < n {
                    // A stream socket, once connected, receives the client's repeated
                    // handshakes (the kernel prefers it to the listener): answer them
                    // while waiting, or a client that missed a reply waits forever.
                    let slice = deadline.min(Instant::now() + Duration::from_millis(20));
                    match recv_until(&rx, slice, n - opened.len()) {
                        Ok(s) => opened.push(s),
                        Err(e) if Instant::now() >= deadline => return Err(e),
                        Err(_) => opened.iter().for_each(answer_repeated_handshakes),
                    }
                }
                opened.iter().for_each(answer_repeated_handshakes);
                out.extend(opened.into_iter().map(|s| Transport::Udp(Arc::new(s))));
                Ok(())
            })();
            if let Ok(mut w) = shared.udp_waiting.lock() {
                *w = None;
            }
            result?;
        }
    }
    Ok(out)
}

/// How long a running test may move no data: `--idle-timeout`, or three write intervals
/// of a test paced (`bandwidth` bit/s, `len`-byte writes) so slowly that its writes are
/// further apart than that.
fn idle_allowance(bandwidth: u64, len: usize, idle_timeout: Duration) -> Duration {
    if bandwidth == 0 {
        return idle_timeout;
    }
    let gap = Duration::from_secs_f64(len as f64 * 8.0 / bandwidth as f64);
    idle_timeout.max(gap.saturating_mul(3))
}

/// Answers, without blocking, the handshakes waiting on a connected UDP stream socket.
fn answer_repeated_handshakes(s: &UdpSocket) {
    let mut buf = [0u8; 64];
    while let Ok(n) = nix::sys::socket::recv(
        std::os::fd::AsRawFd::as_raw_fd(s),
        &mut buf,
        nix::sys::socket::MsgFlags::MSG_DONTWAIT,
    ) {
        if let Some(reply) = handshake_reply(&buf[..n]) {
            let _ = s.send(&reply);
        }
    }
}

fn recv_until<T>(rx: &Receiver<T>, deadline: Instant, missing: usize) -> Result<T, TestError> {
    let left = deadline.saturating_duration_since(Instant::now());
    rx.recv_timeout(left)
        .map_err(|_| TestError::Streams(format!("{missing} data stream(s) never arrived")))
}

fn apply_options(t: &Transport, p: &TestParams, role: Role) {
    let tuning = p.flowlab.as_ref().filter(|_| role == Role::Receive);
    let recv_window = tuning.and_then(|f| f.recv_window);
    let recv_congestion = tuning.and_then(|f| f.recv_congestion.as_ref());
    let window = if let (Some(w), Transport::Tcp(_)) = (recv_window, t) {
        w
    } else if p.window > 0 {
        p.window
    } else if matches!(t, Transport::Udp(_)) {
        crate::stream::UDP_DEFAULT_BUFFER
    } else {
        0
    };
    match t {
        Transport::Tcp(s) => {
            let _ = sock::set_buffers(&SockRef::from(s.as_ref()), window);
            if p.nodelay {
                let _ = s.set_nodelay(true);
            }
            if p.mss > 0 && role == Role::Send {
                let _ = sock::set_mss(s.as_ref(), p.mss as u32);
            }
            if let Some(cc) = recv_congestion.or(p.congestion.as_ref()) {
                // As iperf3: an algorithm this kernel lacks is a warning on the server.
                if let Err(e) = sock::set_congestion(s.as_ref(), cc) {
                    tracing::warn!("{e}");
                }
            }
        }
        Transport::Udp(u) => {
            let _ = sock::set_buffers(&SockRef::from(u.as_ref()), window);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_allowance_grows_for_slowly_paced_tests() {
        let ten = Duration::from_secs(10);
        // Unpaced, or paced faster than a write per idle timeout: the timeout.
        assert_eq!(idle_allowance(0, 1460, ten), ten);
        assert_eq!(idle_allowance(1_000_000, 1460, ten), ten);
        // -u -b 1K: a datagram every 11.68 s; three of those may pass.
        let got = idle_allowance(1_000, 1460, ten).as_secs_f64();
        assert!((got - 35.04).abs() < 1e-6, "{got}");
    }

    #[test]
    fn max_bytes_counts_both_directions_of_a_bidir_test_and_the_default_length() {
        let cfg = ServerConfig {
            max_bytes: Some(1_000_000),
            ..ServerConfig::default()
        };
        let p = |num, blockcount, bidirectional| TestParams {
            udp: Some(true),
            num,
            blockcount,
            bidirectional,
            parallel: 1,
            ..TestParams::default()
        };
        assert!(validate(&p(600_000, 0, false), &cfg).is_ok());
        let e = validate(&p(600_000, 0, true), &cfg).unwrap_err();
        assert_eq!(
            e,
            Refusal::Bytes {
                max: 1_000_000,
                asked: 1_200_000
            }
        );
        assert!(e.to_string().contains("asked for 1200000"), "{e}");
        // -k with UDP's default 1460-byte datagrams: 700 × 1460 = 1 022 000.
        assert!(validate(&p(0, 600, false), &cfg).is_ok());
        assert!(validate(&p(0, 700, false), &cfg).is_err());
    }
}
