//! The client session: connects to a server (flowlab or a stock iperf3), negotiates the
//! test, runs the streams, reports intervals as they end and returns the [`TestResult`].

use std::io::Write;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use flowlab_proto::frame::{MAX_RESULTS_LEN, MAX_TRACED_RESULTS_LEN};
use flowlab_proto::hello::{ServerHello, feature};
use flowlab_proto::params::Protocol;
use flowlab_proto::results::PeerResults;
use flowlab_proto::state::decode_server_error;
use flowlab_proto::udp::{CONNECT_MSG, is_handshake_reply};
use flowlab_proto::{Cookie, State};
use socket2::{Domain, Protocol as SockProtocol, SockRef, Socket, Type};

use crate::control::{self, ControlError, Wake};
use crate::session::{DataSession, Snapshot};
use crate::sock::{self, SockError};
use crate::stream::{Budget, DataConfig, Role, StreamPlan, TestControl, Transport};
use flowlab_report::result::{
    self, Interval, IntervalStream, IntervalSum, PeerInfo, SCHEMA, StartInfo, StreamDirection,
    StreamInfo, TcpInterval, TestResult, Trace, UdpInterval,
};
use flowlab_report::spec::{Amount, Direction, TestSpec};

/// Why a test could not run.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot resolve '{host}': {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("the server is busy running its maximum number of tests; try again later")]
    Busy,
    #[error("the server refused the test: {0}")]
    Refused(String),
    #[error("the server reported error {code} (errno {errno}): {}", iperf3_error_text(*code))]
    ServerError { code: i32, errno: i32 },
    #[error("the server terminated the test")]
    ServerTerminated,
    #[error(
        "the server does not support {0} (it is not flowlab, or an older version); \
         no data was sent"
    )]
    Unsupported(String),
    #[error("unexpected control message {0:?} from the server")]
    Unexpected(State),
    #[error("opening data stream {id}: {source}")]
    Stream { id: i64, source: std::io::Error },
    #[error(transparent)]
    Sock(#[from] SockError),
    #[error(transparent)]
    Control(#[from] ControlError),
}

/// The messages of the iperf3 error codes a server is likely to send.
fn iperf3_error_text(code: i32) -> &'static str {
    match code {
        1 => "the server has terminated",
        4 => "the server is busy running a test",
        114 => "parameter exchange failed",
        117 => {
            "unable to set TCP_CONGESTION: supplied congestion control algorithm not supported on this host"
        }
        141 => "socket buffer size not set correctly",
        _ => "see iperf3's iperf_api.h for this code",
    }
}

/// Receives start information and intervals as the test runs.
pub trait Observer {
    fn started(&mut self, _start: &StartInfo) {}
    fn interval(&mut self, _interval: &Interval) {}
}

/// An observer that ignores everything.
#[derive(Debug, Default)]
pub struct Quiet;
impl Observer for Quiet {}

/// How long the client waits for each control message outside the data phase.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the data phase counts received bytes when that is how it learns the end.
const TICK: Duration = Duration::from_millis(10);
/// Longest the controller sleeps with nothing due (bounds how late Ctrl-C is noticed).
const IDLE_WAKE: Duration = Duration::from_millis(100);
/// A UDP receiver of a byte- or block-bounded test that has seen nothing for this long is
/// done (the tail was lost).
const UDP_IDLE_END: Duration = Duration::from_secs(2);

/// Runs one test. `interrupt` (Ctrl-C) ends it early; what was measured is still returned.
pub fn run(
    spec: &TestSpec,
    obs: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<TestResult, ClientError> {
    let addrs: Vec<SocketAddr> = (spec.host.as_str(), spec.port)
        .to_socket_addrs()
        .map_err(|source| ClientError::Resolve {
            host: spec.host.clone(),
            source,
        })?
        .collect();
    let mut ctrl = connect_any(&addrs, spec.connect_timeout)?;
    let server = ctrl.peer_addr().map_err(ControlError::Io)?;
    ctrl.set_nodelay(true).map_err(ControlError::Io)?;
    ctrl.set_read_timeout(Some(CONTROL_TIMEOUT))
        .map_err(ControlError::Io)?;
    let cookie = Cookie::from_random(random36());
    ctrl.write_all(&cookie.encode()).map_err(ControlError::Io)?;

    let params = spec.to_params();
    let mut hello: Option<ServerHello> = None;
    let mut plans = Vec::new();
    let mut infos = Vec::new();
    loop {
        match control::read_state(&mut ctrl)? {
            State::ParamExchange => control::write_frame(&mut ctrl, &params)?,
            State::FlowlabHello => {
                let h: ServerHello = control::read_frame(&mut ctrl, MAX_RESULTS_LEN)?;
                if let Some(e) = h.error {
                    return Err(ClientError::Refused(e));
                }
                hello = Some(h);
            }
            State::CreateStreams => {
                let offered = hello
                    .as_ref()
                    .map(|h| h.features.clone())
                    .unwrap_or_default();
                if let Some(missing) = spec
                    .required_features()
                    .into_iter()
                    .find(|f| !offered.contains(f))
                {
                    return Err(ClientError::Unsupported(missing));
                }
                (plans, infos) = create_streams(spec, server, &cookie)?;
            }
            State::TestStart => {}
            State::TestRunning => break,
            other => return Err(refusal(&mut ctrl, other)),
        }
    }

    let directions: Vec<(i64, StreamDirection)> = infos
        .iter()
        .map(|i: &StreamInfo| (i.id, i.direction))
        .collect();
    let sends = spec.direction != Direction::Reverse;
    let budget = match spec.amount {
        Amount::Bytes(n) if sends => Budget::Bytes(n.into()),
        Amount::Blocks(k) if sends => Budget::Blocks(k.into()),
        _ => Budget::Unbounded,
    };
    let features = hello
        .as_ref()
        .map(|h| h.features.clone())
        .unwrap_or_default();
    let cfg = DataConfig {
        mode: spec.mode,
        len: spec.len,
        rate_bps: spec.bitrate,
        counters_64bit: params.udp_counters_64bit,
        rto: spec.rto,
        zerocopy: spec.zerocopy,
        close_when_done: features.iter().any(|f| f == feature::CLEAN_CLOSE),
        drain_to_eof: features.iter().any(|f| f == feature::CLEAN_CLOSE),
        backoff: spec.wants_backoff() && features.iter().any(|f| f == feature::UDP_BACKOFF),
        trace: spec.trace.filter(|_| spec.protocol == Protocol::Tcp),
    };
    // The machine state is read (a `tc` process, ioctls per interface) before any data
    // flows, not during the first measured interval.
    let system = crate::sysinfo::collect();
    let ctl = TestControl::new(budget);
    let omit = Duration::from_secs(spec.omit);
    let mut session = DataSession::start(plans, cfg, ctl, omit)
        .map_err(|source| ClientError::Stream { id: 0, source })?;
    let start = StartInfo {
        timestamp: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        flowlab_version: env!("CARGO_PKG_VERSION").into(),
        spec: result::spec_json(spec),
        local: ctrl.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        remote: server.to_string(),
        peer: match &hello {
            Some(h) => PeerInfo {
                kind: "flowlab".into(),
                version: Some(h.server_version.clone()),
                features: h.features.clone(),
                system: h.system.clone(),
            },
            None => PeerInfo {
                kind: "iperf3".into(),
                version: None,
                features: Vec::new(),
                system: None,
            },
        },
        cookie: cookie.to_string(),
        streams: infos,
        system,
    };
    obs.started(&start);

    let mut intervals = Vec::new();
    let outcome = run_data_phase(
        spec,
        &mut session,
        &mut ctrl,
        &directions,
        obs,
        &mut intervals,
        interrupt,
    );
    let mut interrupted = interrupt.load(Ordering::Acquire);

    // End: stop our senders, tell the server, let our receivers drain, exchange results.
    session.stop_senders();
    let mut remote: Option<PeerResults> = None;
    let mut local: Option<PeerResults> = None;
    match outcome {
        Ok(PhaseEnd::Normal) => {
            control::write_state(&mut ctrl, State::TestEnd)?;
            session.ctl.stop_recv.store(true, Ordering::Release);
            loop {
                match control::read_state(&mut ctrl)? {
                    State::ExchangeResults => {
                        session.stop_receivers();
                        let snap = session.snapshot();
                        let mine = session.peer_results(&snap, session.ctl.epoch.elapsed());
                        control::write_frame(&mut ctrl, &mine)?;
                        local = Some(mine);
                        let max = if spec.trace.is_some() {
                            MAX_TRACED_RESULTS_LEN
                        } else {
                            MAX_RESULTS_LEN
                        };
                        remote = Some(control::read_frame(&mut ctrl, max)?);
                    }
                    State::DisplayResults => {
                        let _ = control::write_state(&mut ctrl, State::IperfDone);
                        break;
                    }
                    State::ServerTerminate => {
                        interrupted = true;
                        break;
                    }
                    other => return Err(refusal(&mut ctrl, other)),
                }
            }
        }
        Ok(PhaseEnd::ServerTerminated) => interrupted = true,
        Err(e) => {
            session.abort();
            return Err(e);
        }
    }
    session.abort();
    let local = local.unwrap_or_else(|| {
        let snap = session.snapshot();
        session.peer_results(&snap, session.ctl.epoch.elapsed())
    });
    let trace = spec.trace.map(|period| {
        let remote_traces = remote
            .as_mut()
            .map(|r| {
                r.streams
                    .iter_mut()
                    .filter_map(|s| s.trace.take())
                    .collect()
            })
            .unwrap_or_default();
        Trace::assemble(
            period.as_micros() as u64,
            &directions,
            session.take_traces(),
            remote_traces,
            &spec.window_rates(),
        )
    });
    let udp = spec.protocol == Protocol::Udp;
    let end = result::summarize(&directions, udp, &local, remote.as_ref(), interrupted);
    Ok(TestResult {
        schema: SCHEMA.into(),
        start,
        intervals,
        end: Some(end),
        trace,
    })
}

enum PhaseEnd {
    Normal,
    ServerTerminated,
}

fn run_data_phase(
    spec: &TestSpec,
    session: &mut DataSession,
    ctrl: &mut TcpStream,
    directions: &[(i64, StreamDirection)],
    obs: &mut dyn Observer,
    intervals: &mut Vec<Interval>,
    interrupt: &AtomicBool,
) -> Result<PhaseEnd, ClientError> {
    let omit = Duration::from_secs(spec.omit);
    // Intervals start from zero, not from a snapshot taken after the streams started.
    let mut last = vec![Snapshot::default(); session.streams.len()];
    let mut next_tick = spec.interval;
    let mut last_data = Instant::now();
    let mut last_rx = 0u64;
    // The tail of a UDP transfer may be lost: a receiver that has heard nothing for this
    // long (at least four datagram gaps at the target rate) is done.
    let gap = if spec.bitrate > 0 {
        Duration::from_secs_f64(spec.len as f64 * 8.0 / spec.bitrate as f64)
    } else {
        Duration::ZERO
    };
    let udp_idle_end = UDP_IDLE_END.max(gap * 4);
    // The loop sleeps until the next thing it must do: an interval report, the end of
    // the omitted seconds or of the test, a stream ending (the eventfd), or a message
    // from the server. Only a byte-bounded test whose end this side can tell only by
    // counting received bytes (UDP, or a peer that does not close its senders) looks at
    // the counters every TICK. Periodic wake-ups cost measurable throughput on loopback.
    let counts_to_end = !matches!(spec.amount, Amount::Seconds(_))
        && session.has(Role::Receive)
        && (spec.protocol == Protocol::Udp || !session.cfg.drain_to_eof);
    let cap = if counts_to_end { TICK } else { IDLE_WAKE };
    loop {
        let now = session.ctl.epoch.elapsed();
        let mut deadline = now + cap;
        if let Some(tick) = next_tick {
            deadline = deadline.min(tick);
        }
        if session.omitting() {
            deadline = deadline.min(omit);
        }
        if let Amount::Seconds(t) = spec.amount {
            deadline = deadline.min(omit + Duration::from_secs(t));
        }
        match control::wait_state(
            ctrl,
            session.ctl.ended.as_ref(),
            deadline.saturating_sub(now),
        ) {
            Ok(Wake::Timeout | Wake::Other) => {}
            Ok(Wake::State(State::ServerTerminate)) => return Ok(PhaseEnd::ServerTerminated),
            Ok(Wake::State(other)) => return Err(refusal(ctrl, other)),
            Err(e) => return Err(e.into()),
        }
        let now = session.ctl.epoch.elapsed();
        session.end_omit_if_due();
        if interrupt.load(Ordering::Acquire) {
            break;
        }
        if let (Some(iv), Some(tick)) = (spec.interval, next_tick) {
            if now >= tick {
                let snap = session.snapshot();
                let interval = build_interval(session, &last, &snap, directions, tick <= omit);
                obs.interval(&interval);
                intervals.push(interval);
                last = snap;
                next_tick = Some(tick + iv);
            }
        }
        let rx = session.total_bytes(Role::Receive);
        if rx > last_rx {
            last_rx = rx;
            last_data = Instant::now();
        }
        let done = match spec.amount {
            Amount::Seconds(t) => now >= omit + Duration::from_secs(t),
            Amount::Bytes(_) | Amount::Blocks(_) => {
                let target = match spec.amount {
                    Amount::Bytes(n) => n,
                    Amount::Blocks(k) => k.saturating_mul(spec.len as u64),
                    Amount::Seconds(_) => u64::MAX,
                };
                let sent_all = !session.has(Role::Send) || session.all_finished(Role::Send);
                let got_all = !session.has(Role::Receive)
                    || rx >= target
                    || session.all_finished(Role::Receive)
                    || (spec.protocol == Protocol::Udp && last_data.elapsed() > udp_idle_end);
                // Bidirectional tests end when both directions are done.
                sent_all && got_all
            }
        };
        if done {
            break;
        }
    }
    // The last, partial interval, when it is long enough to mean something.
    if let Some(iv) = spec.interval {
        let snap = session.snapshot();
        let len_us = snap.first().map_or(0, |s| s.at_us) - last.first().map_or(0, |s| s.at_us);
        if len_us as f64 > iv.as_micros() as f64 * 0.1 {
            let interval = build_interval(session, &last, &snap, directions, session.omitting());
            obs.interval(&interval);
            intervals.push(interval);
        }
    }
    Ok(PhaseEnd::Normal)
}

fn build_interval(
    session: &DataSession,
    a: &[Snapshot],
    b: &[Snapshot],
    directions: &[(i64, StreamDirection)],
    omitted: bool,
) -> Interval {
    let start = a.first().map_or(0, |s| s.at_us) as f64 / 1e6;
    let end = b.first().map_or(0, |s| s.at_us) as f64 / 1e6;
    let secs = end - start;
    let mut streams = Vec::new();
    for ((s, (x, y)), &(_, direction)) in
        session.streams.iter().zip(a.iter().zip(b)).zip(directions)
    {
        let bytes = y.bytes - x.bytes;
        let tcp = y.tcp.map(|t| TcpInterval {
            retransmits: t.total_retrans - x.tcp.map_or(0, |p| p.total_retrans),
            cwnd_bytes: t.snd_cwnd_bytes,
            rtt_us: t.rtt_us,
            rttvar_us: t.rttvar_us,
        });
        let udp = y
            .udp
            .map(|u| u.since(&x.udp.unwrap_or_default()).interval());
        streams.push(IntervalStream {
            id: s.id,
            direction,
            bytes,
            bits_per_second: result::bps(bytes, secs),
            tcp,
            udp,
        });
    }
    let mut sums = Vec::new();
    for direction in [StreamDirection::Up, StreamDirection::Down] {
        let of: Vec<&IntervalStream> = streams
            .iter()
            .filter(|s| s.direction == direction)
            .collect();
        if of.is_empty() {
            continue;
        }
        let bytes = of.iter().map(|s| s.bytes).sum();
        let retransmits = of
            .iter()
            .map(|s| s.tcp.map(|t| t.retransmits))
            .sum::<Option<u64>>();
        let udp = of
            .iter()
            .map(|s| s.udp)
            .collect::<Option<Vec<_>>>()
            .map(|u| UdpInterval::sum(&u));
        sums.push(IntervalSum {
            direction,
            bytes,
            bits_per_second: result::bps(bytes, secs),
            retransmits,
            udp,
        });
    }
    Interval {
        start,
        end,
        omitted,
        streams,
        sums,
    }
}

/// Turns a control message that ends the negotiation into an error.
fn refusal(ctrl: &mut TcpStream, state: State) -> ClientError {
    match state {
        State::AccessDenied => ClientError::Busy,
        State::ServerError => {
            let mut body = [0u8; 8];
            match control::read_exact(ctrl, &mut body) {
                Ok(()) => {
                    let (code, errno) = decode_server_error(&body);
                    ClientError::ServerError { code, errno }
                }
                Err(e) => e.into(),
            }
        }
        State::ServerTerminate => ClientError::ServerTerminated,
        other => ClientError::Unexpected(other),
    }
}

fn connect_any(addrs: &[SocketAddr], timeout: Duration) -> Result<TcpStream, ClientError> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(a, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some((a, e)),
        }
    }
    let (addr, source) = match last {
        Some((a, e)) => (a.to_string(), e),
        None => (
            "(no address)".into(),
            std::io::Error::other("the name resolved to no address"),
        ),
    };
    Err(ClientError::Connect { addr, source })
}

fn random36() -> [u8; 36] {
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

fn create_streams(
    spec: &TestSpec,
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
        let (transport, early) = match spec.protocol {
            Protocol::Tcp => (
                Transport::Tcp(Arc::new(open_tcp(spec, server, cookie, role).map_err(
                    |e| match e {
                        OpenError::Io(e) => serr(e),
                        OpenError::Sock(e) => ClientError::Sock(e),
                    },
                )?)),
                Vec::new(),
            ),
            Protocol::Udp => {
                let (s, early) = open_udp(spec, server).map_err(serr)?;
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
        infos.push(StreamInfo {
            id,
            direction,
            local,
            remote,
            sndbuf: bufs.sndbuf,
            rcvbuf: bufs.rcvbuf,
            congestion,
            mss,
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

fn open_tcp(
    spec: &TestSpec,
    server: SocketAddr,
    cookie: &Cookie,
    role: Role,
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
    let s = Socket::new(
        Domain::for_address(server),
        Type::STREAM,
        Some(SockProtocol::TCP),
    )
    .map_err(OpenError::Io)?;
    sock::set_buffers(&SockRef::from(&s), window).map_err(OpenError::Sock)?;
    if spec.mss > 0 {
        sock::set_mss(&s, spec.mss).map_err(OpenError::Sock)?;
    }
    s.connect_timeout(&server.into(), spec.connect_timeout)
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

fn open_udp(spec: &TestSpec, server: SocketAddr) -> std::io::Result<(UdpSocket, Vec<Vec<u8>>)> {
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
    s.connect(&server.into())?;
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
