//! The client session: connects to a server (flowlab or a stock iperf3), negotiates the
//! test, runs the streams, reports intervals as they end and returns the [`TestResult`].

mod data_phase;
mod latency;
mod multicast;
mod streams;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use flowlab_proto::frame::{MAX_RESULTS_LEN, traced_results_limit};
use flowlab_proto::hello::ServerHello;
use flowlab_proto::params::{Protocol, TestParams};
use flowlab_proto::results::PeerResults;
use flowlab_proto::state::decode_server_error;
use flowlab_proto::system::SystemInfo;
use flowlab_proto::{Cookie, State};
use flowlab_results::result::{
    self, Interval, PeerInfo, PeerKind, SCHEMA, StartInfo, StreamDirection, StreamInfo, TestResult,
    Trace,
};
use flowlab_results::spec::{Amount, Direction, TestSpec};

use crate::control::{self, ControlError};
use crate::negotiate::{End, data_config};
use crate::session::DataSession;
use crate::sock::SockError;
use crate::stream::{Budget, StreamPlan, TestControl};
use data_phase::{PhaseEnd, Reports, run_data_phase};
use streams::{connect_any, create_streams, random36};

/// Why a test could not run.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Resolve(#[from] crate::reach::ResolveError),
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error(
        "the server is busy: it runs as many tests as it allows, in all or from this address; \
         try again later"
    )]
    Busy,
    #[error("authentication: {0}")]
    Auth(String),
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
    #[error("a QUIC test is run by flowlab_quic::measure, not by the TCP and UDP engine")]
    Quic,
    #[error(
        "-m/--mptcp: this system makes no MPTCP socket ({0}): a kernel without MPTCP, or \
         net.mptcp.enabled = 0"
    )]
    NoMptcp(std::io::Error),
    #[error("unexpected control message {0:?} from the server")]
    Unexpected(State),
    #[error("opening data stream {id}: {source}")]
    Stream { id: i64, source: std::io::Error },
    #[error("-F {path}: {source}")]
    File {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "--latency: {0} answered none of the {n} latency probes sent to its UDP port \
         (it is not a flowlab server with the echo service, or UDP to it is blocked); \
         no data was sent",
        n = latency::IDLE_PROBES
    )]
    NoEcho(SocketAddr),
    #[error("{0}")]
    Probes(String),
    #[error("multicast: {0}")]
    Multicast(String),
    #[error("receiver {receiver}: {source}")]
    Receiver {
        receiver: String,
        source: Box<ClientError>,
    },
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
        142 => "test authorization failed",
        204 => "unable to accept stream connection",
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
    // The engine speaks iperf3's protocol, TCP and UDP; QUIC is flowlab_quic's.
    let Some(proto) = spec.protocol.wire() else {
        return Err(ClientError::Quic);
    };
    if let Some(m) = &spec.multicast {
        return multicast::run(spec, m, obs, interrupt);
    }
    let mut params = spec.to_params();
    if let Some(c) = &spec.credentials {
        params.authtoken = Some(crate::credentials::token(c).map_err(ClientError::Auth)?);
    }
    // The idle round trips are measured before the test's first byte, and a server
    // without the echo is refused before any load is sent.
    let idle = match spec.latency {
        Some(interval) => Some((
            interval,
            latency::idle(resolve(spec)?[0], interval, interrupt)?,
        )),
        None => None,
    };
    // Before the server hears of the test: a file that cannot be opened stops it here.
    let file = data_file(spec)?;
    let (mut ctrl, server, cookie) = connect(spec)?;
    let Negotiated {
        hello,
        plans,
        infos,
    } = negotiate(&mut ctrl, spec, proto, &params, server, &cookie)?;
    if let Some(short) = streams::short_buffers(spec.window, spec.recv_window, &infos) {
        tracing::warn!("{short}");
    }
    let directions: Vec<(i64, StreamDirection)> =
        infos.iter().map(|i| (i.id, i.direction)).collect();
    let features = hello
        .as_ref()
        .map(|h| h.features.clone())
        .unwrap_or_default();
    let end = End::Client {
        features: &features,
        affinity: spec.affinity.client,
    };
    let mut cfg = data_config(&params, proto, end);
    cfg.file = file;
    cfg.path_rtt = crate::sock::least_rtt(&ctrl);
    // The machine state is read (a `tc` process, ioctls per interface) before any data
    // flows, not during the first measured interval.
    let system = crate::sysinfo::collect();
    let ctl = TestControl::new(budget(spec));
    let omit = Duration::from_secs(spec.omit);
    let mut session = DataSession::start(plans, cfg, ctl, omit)
        .map_err(|source| ClientError::Stream { id: 0, source })?;
    let prober = match idle {
        Some((interval, idle)) => Some(latency::LoadProber::start(
            server,
            interval,
            idle,
            session.ctl.epoch,
        )?),
        None => None,
    };
    let start = start_info(spec, &ctrl, server, hello.as_ref(), &cookie, infos, system);
    obs.started(&start);

    let mut intervals: Vec<Interval> = Vec::new();
    let outcome = run_data_phase(
        spec,
        &mut session,
        &mut ctrl,
        &directions,
        Reports {
            obs,
            intervals: &mut intervals,
            latency: prober.as_ref(),
        },
        interrupt,
    );
    let mut interrupted = interrupt.load(Ordering::Acquire);
    if let Some(p) = &prober {
        p.load_ended();
    }

    // End: stop our senders, tell the server, let our receivers drain, exchange results.
    session.stop_senders();
    let ended = match outcome {
        Ok(PhaseEnd::Normal) => end_test(&mut ctrl, spec, &mut session)?,
        Ok(PhaseEnd::ServerTerminated) => Ended::terminated(),
        // Ended here, as a server that stopped sending may not answer on the control
        // connection either; what was measured is kept.
        Ok(PhaseEnd::Stalled(limit)) => {
            tracing::warn!(
                "nothing received for {} ms (--rcv-timeout): the test ends here",
                limit.as_millis()
            );
            Ended::terminated()
        }
        Err(e) => {
            session.abort();
            return Err(e);
        }
    };
    interrupted |= ended.terminated;
    session.abort();
    // Read before the streams close: the connections' subflows go with them.
    let mptcp = spec.mptcp.then(|| {
        let (path_manager, scheduler) = crate::sock::mptcp_policy();
        flowlab_results::result::MptcpEnd {
            path_manager,
            scheduler,
            connections: session.mptcp(),
        }
    });
    let local = ended.local.unwrap_or_else(|| {
        let snap = session.snapshot();
        session.peer_results(&snap, session.ctl.epoch.elapsed())
    });
    let mut remote = ended.remote;
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
        let mut t = Trace::assemble(
            period.as_micros() as u64,
            &directions,
            session.take_traces(),
            remote_traces,
        );
        t.diagnose(&spec.window_rates());
        t
    });
    let udp = proto == Protocol::Udp;
    let mut end = result::summarize(&directions, udp, &local, remote.as_ref(), interrupted);
    // A test cut short (Ctrl-C, a server's limit) says so itself: its streams' errors
    // are what the cut did to them, not failures.
    if !interrupted {
        end.failed_streams = session.failures();
    }
    end.mptcp = mptcp;
    // A failure of the probes' thread costs their numbers, never the test's.
    let latency = prober.and_then(|p| {
        p.finish()
            .map_err(|e| tracing::warn!("{e}; the test's results are kept without them"))
            .ok()
    });
    Ok(TestResult {
        schema: SCHEMA.into(),
        start,
        intervals,
        end: Some(end),
        trace,
        latency,
    })
}

/// `-F`'s file, opened to be read (the client sends) or created anew (it receives).
fn data_file(spec: &TestSpec) -> Result<Option<std::sync::Arc<std::fs::File>>, ClientError> {
    let Some(path) = &spec.file else {
        return Ok(None);
    };
    let file = if spec.direction == Direction::Reverse {
        std::fs::File::create(path)
    } else {
        std::fs::File::open(path)
    };
    file.map(|f| Some(std::sync::Arc::new(f)))
        .map_err(|source| ClientError::File {
            path: path.display().to_string(),
            source,
        })
}

/// The control connection to the spec's server, its address, and the test's cookie
/// (sent).
fn connect(spec: &TestSpec) -> Result<(TcpStream, SocketAddr, Cookie), ClientError> {
    if spec.mptcp {
        // Said as what it is, before any connection is tried.
        socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::STREAM,
            Some(socket2::Protocol::MPTCP),
        )
        .map_err(ClientError::NoMptcp)?;
    }
    open_control(spec, &resolve(spec)?)
}

/// A control connection to the first of `addrs` that answers, set up, and the test's
/// cookie (sent).
fn open_control(
    spec: &TestSpec,
    addrs: &[SocketAddr],
) -> Result<(TcpStream, SocketAddr, Cookie), ClientError> {
    let mut ctrl = connect_any(addrs, spec)?;
    let server = ctrl.peer_addr().map_err(ControlError::Io)?;
    ctrl.set_nodelay(true).map_err(ControlError::Io)?;
    if let Some(ka) = &spec.control_keepalive {
        let (idle, interval, count) = crate::sock::set_keepalive(&ctrl, ka)?;
        tracing::info!(
            "control connection TCP keepalive: {idle} s idle, then every {interval} s, \
             {count} probes"
        );
    }
    ctrl.set_read_timeout(Some(CONTROL_TIMEOUT))
        .map_err(ControlError::Io)?;
    let cookie = Cookie::from_random(random36());
    ctrl.write_all(&cookie.encode()).map_err(ControlError::Io)?;
    Ok((ctrl, server, cookie))
}

/// The spec's server's addresses (at least one).
fn resolve(spec: &TestSpec) -> Result<Vec<SocketAddr>, ClientError> {
    use flowlab_results::spec::IpFamily;
    let addrs = crate::reach::addresses(&spec.host, spec.port, spec.family)?;
    // With -B, only the server's addresses of the bound address's family.
    let Some(ip) = spec.bind else {
        return Ok(addrs);
    };
    let family = if ip.is_ipv4() {
        IpFamily::Ipv4
    } else {
        IpFamily::Ipv6
    };
    let of: Vec<SocketAddr> = addrs.into_iter().filter(|a| family.holds(a)).collect();
    if of.is_empty() {
        return Err(crate::reach::ResolveError::NoAddressOf {
            host: spec.host.clone(),
            family,
            flag: "the family of -B",
        }
        .into());
    }
    Ok(of)
}

/// What the negotiation settled: the server's hello (a flowlab server's), the data
/// streams opened, each one's plan and description.
struct Negotiated {
    hello: Option<ServerHello>,
    plans: Vec<StreamPlan>,
    infos: Vec<StreamInfo>,
}

/// From the parameters to TEST_RUNNING.
fn negotiate(
    ctrl: &mut TcpStream,
    spec: &TestSpec,
    proto: Protocol,
    params: &TestParams,
    server: SocketAddr,
    cookie: &Cookie,
) -> Result<Negotiated, ClientError> {
    let mut hello: Option<ServerHello> = None;
    let mut plans = Vec::new();
    let mut infos = Vec::new();
    loop {
        match control::read_state(ctrl)? {
            State::ParamExchange => control::write_frame(ctrl, params)?,
            State::FlowlabHello => {
                let h: ServerHello = control::read_frame(ctrl, MAX_RESULTS_LEN)?;
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
                // A multicast test's one stream goes to the group, not to a server.
                if spec.multicast.is_none() {
                    (plans, infos) = create_streams(spec, proto, server, cookie)?;
                }
            }
            State::TestStart => {}
            State::TestRunning => {
                return Ok(Negotiated {
                    hello,
                    plans,
                    infos,
                });
            }
            other => return Err(refusal(ctrl, other)),
        }
    }
}

/// How much the client's senders send: `-n` bytes or `-k` blocks when it sends, else
/// until the test's time.
fn budget(spec: &TestSpec) -> Budget {
    let sends = spec.direction != Direction::Reverse;
    match spec.amount {
        Amount::Bytes(n) if sends => Budget::Bytes(n.into()),
        Amount::Blocks(k) if sends => Budget::Blocks(k.into()),
        _ => Budget::Unbounded,
    }
}

/// What the result says of the test's start: when, what was asked, between which ends,
/// on which machines.
fn start_info(
    spec: &TestSpec,
    ctrl: &TcpStream,
    server: SocketAddr,
    hello: Option<&ServerHello>,
    cookie: &Cookie,
    streams: Vec<StreamInfo>,
    system: SystemInfo,
) -> StartInfo {
    StartInfo {
        timestamp: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        flowlab_version: env!("CARGO_PKG_VERSION").into(),
        spec: TestSpec {
            credentials: None,
            ..spec.clone()
        },
        local: ctrl.local_addr().map(|a| a.to_string()).unwrap_or_default(),
        remote: server.to_string(),
        peer: match hello {
            Some(h) => PeerInfo {
                kind: PeerKind::Flowlab,
                version: Some(h.server_version.clone()),
                features: h.features.clone(),
                system: h.system.clone(),
            },
            None => PeerInfo {
                kind: PeerKind::Iperf3,
                version: None,
                features: Vec::new(),
                system: None,
            },
        },
        cookie: cookie.to_string(),
        streams,
        system,
    }
}

/// How a test's end went: both ends' results when they were exchanged, and whether the
/// server terminated the test instead.
struct Ended {
    local: Option<PeerResults>,
    remote: Option<PeerResults>,
    terminated: bool,
}

impl Ended {
    fn terminated() -> Ended {
        Ended {
            local: None,
            remote: None,
            terminated: true,
        }
    }
}

/// Ends a test that ran its course: TEST_END, our receivers drained, results exchanged,
/// IPERF_DONE.
fn end_test(
    ctrl: &mut TcpStream,
    spec: &TestSpec,
    session: &mut DataSession,
) -> Result<Ended, ClientError> {
    control::write_state(ctrl, State::TestEnd)?;
    session.ctl.stop_recv.store(true, Ordering::Release);
    exchange_results(ctrl, spec, session)
}

/// After TEST_END: our receivers drained, results exchanged, IPERF_DONE.
fn exchange_results(
    ctrl: &mut TcpStream,
    spec: &TestSpec,
    session: &mut DataSession,
) -> Result<Ended, ClientError> {
    let mut ended = Ended {
        local: None,
        remote: None,
        terminated: false,
    };
    loop {
        match control::read_state(ctrl)? {
            State::ExchangeResults => {
                session.stop_receivers();
                let snap = session.snapshot();
                let mine = session.peer_results(&snap, session.ctl.epoch.elapsed());
                control::write_frame(ctrl, &mine)?;
                ended.local = Some(mine);
                let max = match spec.trace {
                    Some(period) => traced_results_limit(
                        session.ctl.epoch.elapsed(),
                        period,
                        session.streams.len(),
                    ),
                    None => MAX_RESULTS_LEN,
                };
                ended.remote = Some(control::read_frame(ctrl, max)?);
            }
            State::DisplayResults => {
                let _ = control::write_state(ctrl, State::IperfDone);
                return Ok(ended);
            }
            State::ServerTerminate => {
                ended.terminated = true;
                return Ok(ended);
            }
            other => return Err(refusal(ctrl, other)),
        }
    }
}

/// Turns a control message that ends the negotiation into an error.
fn refusal(ctrl: &mut TcpStream, state: State) -> ClientError {
    match state {
        State::AccessDenied => ClientError::Busy,
        State::ServerError => {
            // iperf3's error code, then its errno — which some paths of iperf3 3.12 (a
            // failed authentication) never send before closing: read as 0.
            let mut body = [0u8; 8];
            if let Err(e) = control::read_exact(ctrl, &mut body[..4]) {
                return e.into();
            }
            if control::read_exact(ctrl, &mut body[4..]).is_err() {
                body[4..].fill(0);
            }
            let (code, errno) = decode_server_error(&body);
            ClientError::ServerError { code, errno }
        }
        State::ServerTerminate => ClientError::ServerTerminated,
        other => ClientError::Unexpected(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_proto::hello::feature;

    /// Whether a UDP test's sender keeps within the receiver's window, against a server
    /// offering `features`.
    fn windowed(bitrate: u64, features: &[&str]) -> bool {
        let mut spec = TestSpec::new("127.0.0.1");
        spec.protocol = flowlab_results::spec::Transport::Udp;
        spec.bitrate = bitrate;
        let features: Vec<String> = features.iter().map(|f| f.to_string()).collect();
        let end = End::Client {
            features: &features,
            affinity: None,
        };
        data_config(&spec.to_params(), Protocol::Udp, end).window
    }

    /// A paced test keeps within the window only against a server that reports in paced
    /// tests too: one offering only `udp-window` (builds before it) would leave the
    /// sender waiting for reports that never come.
    #[test]
    fn a_paced_window_needs_a_server_that_reports_in_paced_tests() {
        let both = [
            feature::UDP_BACKOFF,
            feature::UDP_WINDOW,
            feature::UDP_WINDOW_PACED,
        ];
        let unpaced_only = [feature::UDP_BACKOFF, feature::UDP_WINDOW];
        assert!(windowed(0, &both) && windowed(0, &unpaced_only));
        assert!(windowed(1_000_000_000, &both));
        assert!(!windowed(1_000_000_000, &unpaced_only));
        assert!(!windowed(1_000_000_000, &[]), "a stock iperf3 server");
    }
}
