//! One test on its control connection, in the protocol's phases: the parameters and the
//! server's answer, the data streams, the data until TEST_END (the server's limits
//! enforced meanwhile), the results exchange.

use std::io::Write;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowlab_proto::frame::{MAX_PARAMS_LEN, MAX_RESULTS_LEN};
use flowlab_proto::hello::{ServerHello, feature};
use flowlab_proto::params::{FLOWLAB_EXT_VERSION, Multicast, Protocol, TestParams};
use flowlab_proto::results::PeerResults;
use flowlab_proto::state::{encode_server_error, error_code};
use flowlab_proto::{Cookie, State};
use flowlab_results::result::ServerOutput;
use flowlab_results::server::ServerEvent;

use super::error::TestError;
use super::refusal::{Refusal, validate};
use super::streams::{apply_options, collect_streams};
use super::{Handshake, Place, ServerConfig, Shared};
use crate::control::{self, ControlError, Deadline};
use crate::negotiate::{End, data_config};
use crate::session::DataSession;
use crate::stream::{Budget, Role, StreamPlan, TestControl, Transport};

/// The flowlab extensions this server has (told to flowlab clients in its hello).
const FEATURES: [&str; 9] = [
    feature::STOP_AND_WAIT,
    feature::EXACT_BYTES,
    feature::CLEAN_CLOSE,
    feature::UDP_BACKOFF,
    feature::UDP_WINDOW,
    feature::UDP_WINDOW_PACED,
    feature::TRACE,
    feature::RECEIVER_TUNING,
    feature::MULTICAST,
];

/// Runs one test on its control connection `ctrl`, from the parameters to the results
/// exchange; the server's log hears when it starts and when it ends well.
pub(super) fn run_test(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    cookie: Cookie,
    id: u64,
    handshake: Handshake,
    deadline: Deadline,
    shared: &Arc<Shared>,
) -> Result<(), TestError> {
    let cfg = &shared.cfg;
    ctrl.set_nodelay(true)?;
    if let Some(ka) = &cfg.control_keepalive {
        // Checked when the server started: only the kernel can refuse it here.
        if let Err(e) = crate::sock::set_keepalive(ctrl, ka) {
            tracing::warn!("{e}");
        }
    }
    let negotiated = negotiate(ctrl, peer, deadline, shared);
    // Out of the handshake, whether it ended in a test or not.
    drop(handshake);
    let (params, proto, slot, group) = negotiated?;
    let start = started(id, peer, &params, proto);
    shared.log.event(start.clone());
    let n = params.stream_count() as usize;
    let transports = match group {
        // A multicast test's one stream: the group joined; the client opens none.
        Some(s) => {
            control::write_state(ctrl, State::CreateStreams)?;
            vec![Transport::Udp(Arc::new(s))]
        }
        None => collect_streams(ctrl, peer, cookie, proto, params.mptcp, n, shared)?,
    };
    let mut data = data_config(&params, proto, End::Server);
    data.path_rtt = crate::sock::least_rtt(ctrl);
    if let Some(path) = &cfg.file {
        // Sending: the file as it is; receiving: the file anew.
        let file = if params.reverse {
            std::fs::File::open(path)
        } else {
            std::fs::File::create(path)
        };
        data.file = Some(Arc::new(file.map_err(|e| {
            TestError::Streams(format!("-F {}: {e}", path.display()))
        })?));
    }
    let idle_limit = idle_allowance(params.bandwidth, data.len, cfg.idle_timeout);
    // Receivers read before the client is told to send (an unread UDP socket overflows
    // at once); senders start a control round trip early, which the peer's socket
    // buffers absorb.
    let ctl = TestControl::new(budget(&params, proto));
    let plans = stream_plans(transports, &params, cfg);
    let mut session = DataSession::start(plans, data, ctl, Duration::from_secs(params.omit))?;
    control::write_state(ctrl, State::TestStart)?;
    control::write_state(ctrl, State::TestRunning)?;
    if let Err(e) = wait_for_end(ctrl, &mut session, &params, cfg, idle_limit) {
        // The client first, so it stops sending; then the streams, without a drain.
        if matches!(e, TestError::Limit(_)) {
            let _ = control::write_state(ctrl, State::ServerTerminate);
        }
        session.cut();
        return Err(e);
    }
    let (mut mine, wall) = own_results(&mut session);
    let done = finished(id, peer, &mine, &session, wall);
    // The streams are done: the slot is free before the client hears the results, so
    // a client that starts its next test at once is not told the server is busy.
    drop(slot);
    if params.get_server_output {
        match shared.log.output(&[start, done.clone()]) {
            ServerOutput::Text(t) => mine.server_output_text = Some(t),
            ServerOutput::Json(v) => mine.server_output_json = Some(v),
        }
    }
    exchange_results(ctrl, cfg, &mine)?;
    shared.log.event(done);
    Ok(())
}

/// A multicast test's receiving socket: the group joined on the interface the client
/// reached this server by. Joined before the test is agreed, so a client hears why not.
fn join_group(ctrl: &TcpStream, m: &Multicast, shared: &Shared) -> Result<UdpSocket, Refusal> {
    let local = ctrl
        .local_addr()
        .map_err(|e| Refusal::Join(e.to_string()))?
        .ip()
        .to_canonical();
    crate::multicast::join(m, local, shared.cfg.bind_dev.as_deref()).map_err(|e| {
        Refusal::Join(format!(
            "cannot join group {} on the interface holding {local}: {e}",
            m.group.ip()
        ))
    })
}

/// Whether the client speaks flowlab's extensions.
fn is_flowlab(params: &TestParams) -> bool {
    params.flowlab.as_ref().is_some_and(|f| f.version >= 1)
}

/// A test agreed: its parameters, protocol, place among the server's tests and, for a
/// multicast test, the group's socket.
type Negotiated<'s> = (TestParams, Protocol, Place<'s>, Option<UdpSocket>);

/// Reads the client's parameters (complete by `deadline`) and answers them: when they are
/// valid and a test slot is free, a flowlab client gets the server's hello (its features,
/// its machine, or why the test is refused); an iperf3 client that is refused gets
/// iperf3's own error message; either is told ACCESS_DENIED when every slot is taken.
fn negotiate<'s>(
    ctrl: &mut TcpStream,
    peer: SocketAddr,
    deadline: Deadline,
    shared: &'s Shared,
) -> Result<Negotiated<'s>, TestError> {
    let cfg = &shared.cfg;
    control::write_state(ctrl, State::ParamExchange)?;
    let params: TestParams =
        control::read_frame_by(ctrl, MAX_PARAMS_LEN, deadline).map_err(|e| match e {
            ControlError::Timeout(_) | ControlError::Closed => TestError::Handshake(e),
            e => TestError::Control(e),
        })?;
    ctrl.set_read_timeout(Some(cfg.idle_timeout))?;
    if let Some(auth) = &cfg.auth {
        if let Err(why) = auth.check(params.authtoken.as_deref(), peer.ip()) {
            // One answer for every failure; the log says which it was.
            refuse(
                ctrl,
                &params,
                "authentication failed",
                error_code::AUTH_FAILED,
                0,
            )?;
            return Err(TestError::Auth(why));
        }
    }
    let missing = params
        .flowlab
        .as_ref()
        .and_then(|f| f.require.iter().find(|r| !FEATURES.contains(&r.as_str())));
    let verdict = validate(&params, cfg, shared.mptcp).and_then(|proto| match missing {
        Some(m) => Err(Refusal::Extension(m.clone())),
        None => Ok(proto),
    });
    let multicast = params.flowlab.as_ref().and_then(|f| f.multicast.as_ref());
    let verdict = match verdict {
        Ok(proto) => match shared.test_places.take(peer.ip()) {
            Ok(slot) => match multicast {
                Some(m) => join_group(ctrl, m, shared).map(|s| (proto, slot, Some(s))),
                None => Ok((proto, slot, None)),
            },
            Err(busy) => {
                control::write_state(ctrl, State::AccessDenied)?;
                return Err(TestError::Busy(busy));
            }
        },
        Err(refusal) => Err(refusal),
    };
    if is_flowlab(&params) {
        let hello = ServerHello {
            features: FEATURES.iter().map(|f| f.to_string()).collect(),
            error: verdict.as_ref().err().map(Refusal::to_string),
            system: verdict.is_ok().then(crate::sysinfo::collect),
            ..bare_hello()
        };
        send_hello(ctrl, &hello)?;
    }
    match verdict {
        Ok((proto, slot, group)) => Ok((params, proto, slot, group)),
        Err(reason) => {
            if !is_flowlab(&params) {
                ctrl.write_all(&[State::ServerError.to_byte()])?;
                let errno = reason.errno();
                ctrl.write_all(&encode_server_error(error_code::RECV_PARAMS, errno))?;
            }
            Err(TestError::Refused(reason))
        }
    }
}

/// A hello that says nothing but the versions: no features, no error, no machine.
fn bare_hello() -> ServerHello {
    ServerHello {
        version: FLOWLAB_EXT_VERSION,
        server_version: env!("CARGO_PKG_VERSION").into(),
        features: Vec::new(),
        error: None,
        system: None,
    }
}

fn send_hello(ctrl: &mut TcpStream, hello: &ServerHello) -> Result<(), TestError> {
    control::write_state(ctrl, State::FlowlabHello)?;
    control::write_frame(ctrl, hello)?;
    Ok(())
}

/// Refuses a test before anything about the server is told: a flowlab client gets a
/// hello with `message` and nothing else, an iperf3 client iperf3's error `code`.
fn refuse(
    ctrl: &mut TcpStream,
    params: &TestParams,
    message: &str,
    code: i32,
    errno: i32,
) -> Result<(), TestError> {
    if is_flowlab(params) {
        let hello = ServerHello {
            error: Some(message.into()),
            ..bare_hello()
        };
        send_hello(ctrl, &hello)?;
    } else {
        ctrl.write_all(&[State::ServerError.to_byte()])?;
        ctrl.write_all(&encode_server_error(code, errno))?;
    }
    Ok(())
}

/// The log's event for a test that starts.
fn started(id: u64, peer: SocketAddr, params: &TestParams, proto: Protocol) -> ServerEvent {
    ServerEvent::TestStarted {
        test: id,
        peer: peer.to_string(),
        protocol: match (proto, params.mptcp) {
            (Protocol::Udp, _) => "udp".into(),
            (_, true) => "mptcp".into(),
            _ => "tcp".into(),
        },
        streams: params.stream_count(),
        reverse: params.reverse,
        bidir: params.bidirectional,
        client: params.client_version.clone(),
        multicast: params
            .flowlab
            .as_ref()
            .and_then(|f| f.multicast.as_ref())
            .map(|m| m.group.to_string()),
    }
}

/// Each stream's role, set up as the client asked. Client-send streams come first, so
/// the server receives on the first `parallel` streams of a bidirectional test.
fn stream_plans(
    transports: Vec<Transport>,
    params: &TestParams,
    cfg: &ServerConfig,
) -> Vec<StreamPlan> {
    let p = params.parallel as usize;
    transports
        .into_iter()
        .enumerate()
        .map(|(i, transport)| {
            let role = if params.reverse || (params.bidirectional && i >= p) {
                Role::Send
            } else {
                Role::Receive
            };
            apply_options(&transport, params, role);
            if let (Some(t), Transport::Tcp(s)) = (cfg.snd_timeout, &transport) {
                if let Err(e) = socket2::SockRef::from(s.as_ref()).set_tcp_user_timeout(Some(t)) {
                    tracing::warn!("--snd-timeout: {e}");
                }
            }
            StreamPlan {
                id: crate::stream::stream_id(i),
                role,
                transport,
                early: Vec::new(),
            }
        })
        .collect()
}

/// How much the server's senders send: `-n` bytes or `-k` blocks when it sends, else
/// until the client ends the test.
///
/// A stock iperf3 client ends a counted test once it has *received* the count, and over
/// UDP some datagrams are lost: iperf3's server sends on until the client's TEST_END,
/// and so does this one for such a client, or it would wait for a count that never
/// comes. A flowlab client ends on the stream's silence, and gets the count exactly.
fn budget(params: &TestParams, proto: Protocol) -> Budget {
    let sends = params.reverse || params.bidirectional;
    if sends && proto == Protocol::Udp && !is_flowlab(params) {
        return Budget::Unbounded;
    }
    match (params.num, params.blockcount) {
        (n, _) if n > 0 && sends => Budget::Bytes(n.into()),
        (_, k) if k > 0 && sends => Budget::Blocks(k.into()),
        _ => Budget::Unbounded,
    }
}

/// Stops the streams and returns the server's results (with each stream's socket
/// settings and trace) and the test's wall time.
fn own_results(session: &mut DataSession) -> (PeerResults, Duration) {
    session.stop_senders();
    session.stop_receivers();
    let snap = session.snapshot();
    let wall = session.ctl.epoch.elapsed();
    let mut mine = session.peer_results(&snap, wall);
    // What the kernel granted each socket, for the client's result (a client's own
    // results carry none: the server would only throw them away).
    for (r, s) in mine.streams.iter_mut().zip(&session.streams) {
        r.socket = Some(crate::session::socket_settings(s));
    }
    for trace in session.take_traces() {
        if let Some(s) = mine.streams.iter_mut().find(|s| s.id == trace.id) {
            s.trace = Some(trace);
        }
    }
    (mine, wall)
}

/// Exchanges results with the client, then waits for its IPERF_DONE.
fn exchange_results(
    ctrl: &mut TcpStream,
    cfg: &ServerConfig,
    mine: &PeerResults,
) -> Result<(), TestError> {
    ctrl.set_read_timeout(Some(cfg.idle_timeout))?;
    control::write_state(ctrl, State::ExchangeResults)?;
    // The client's results, complete within the idle timeout however they are dripped.
    let deadline = Deadline::after(cfg.idle_timeout);
    let _theirs: PeerResults = control::read_frame_by(ctrl, MAX_RESULTS_LEN, deadline)?;
    control::write_frame(ctrl, mine)?;
    control::write_state(ctrl, State::DisplayResults)?;
    // IPERF_DONE, or the client just closing, both end the test well.
    match control::read_state(ctrl) {
        Ok(State::IperfDone) | Err(ControlError::Closed) => {}
        Ok(other) => tracing::debug!("expected IPERF_DONE, got {other:?}"),
        Err(e) => tracing::debug!("waiting for IPERF_DONE: {e}"),
    }
    Ok(())
}

/// The log's event for a test that ended well: bytes received and sent by the server.
fn finished(
    id: u64,
    peer: SocketAddr,
    mine: &PeerResults,
    session: &DataSession,
    wall: Duration,
) -> ServerEvent {
    let bytes = |role| {
        mine.streams
            .iter()
            .zip(&session.streams)
            .filter(|(_, s)| s.role == role)
            .map(|(r, _)| r.bytes)
            .sum()
    };
    // An MPTCP client's streams are MPTCP (-m, or a program made MPTCP by mptcpize):
    // the kernel tells, not the parameters.
    let mptcp = session.mptcp();
    ServerEvent::TestFinished {
        test: id,
        peer: peer.to_string(),
        bytes_received: bytes(Role::Receive),
        bytes_sent: bytes(Role::Send),
        seconds: wall.as_secs_f64(),
        mptcp_subflows: mptcp
            .iter()
            .any(|c| !c.fallback)
            .then(|| mptcp.iter().map(|c| c.subflows.len() as u64).sum()),
    }
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
    let (end, why) = end_of(params, cfg);
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
        let poll = match end {
            Some(end) => poll.min(end.saturating_sub(started.elapsed())),
            None => poll,
        }
        .max(Duration::from_millis(1));
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
        if end.is_some_and(|end| elapsed >= end) {
            return Err(TestError::Limit(why));
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
    }
}

/// When the server ends a test that the client has not ended (counted from TEST_RUNNING),
/// and what it will say: its time plus omitted seconds, or `--max-duration` when that is
/// sooner, plus the grace. `None` for a test that ends at a byte or block count on a
/// server with no `--max-duration` (the idle limit ends one whose client vanished).
fn end_of(params: &TestParams, cfg: &ServerConfig) -> (Option<Duration>, String) {
    let grace = cfg.end_grace;
    let timed =
        (params.time > 0).then(|| Duration::from_secs(params.time.saturating_add(params.omit)));
    match (timed, cfg.max_duration) {
        (Some(t), max) if max.is_none_or(|m| t <= m) => (
            Some(t.saturating_add(grace)),
            format!(
                "the client had not ended its {} s test {} s after its time (--end-grace)",
                t.as_secs(),
                grace.as_secs_f64()
            ),
        ),
        (_, Some(max)) => (
            Some(max.saturating_add(grace)),
            format!("test ran past --max-duration {} s", max.as_secs()),
        ),
        _ => (None, String::new()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A stock iperf3 client's `-b 8M/10 -l 1000 -u` (and its pacing timer) reach the
    /// server's senders as bursts.
    #[test]
    fn an_iperf3_clients_burst_and_pacing_timer_set_the_servers_bursts() {
        let params = |extra: &str| -> TestParams {
            serde_json::from_str(&format!(
                r#"{{"udp":true,"time":1,"parallel":1,"reverse":true,"len":1000,
                    "bandwidth":8000000{extra}}}"#
            ))
            .expect("params")
        };
        let burst = |p: &TestParams| data_config(p, Protocol::Udp, End::Server).burst_bytes;
        assert_eq!(burst(&params(r#","pacing_timer":1000"#)), 0);
        assert_eq!(burst(&params(r#","pacing_timer":1000,"burst":10"#)), 10_000);
        // A 20 ms timer at 1 MB/s: 20 000 bytes a tick; the larger of it and the burst.
        assert_eq!(burst(&params(r#","pacing_timer":20000"#)), 20_000);
        assert_eq!(
            burst(&params(r#","pacing_timer":20000,"burst":30"#)),
            30_000
        );
    }

    /// The server keeps within (sending) and reports its progress for (receiving) the
    /// window in any UDP streaming test whose client asks for it, paced or not; never
    /// when the client does not ask (builds before the paced window, stock iperf3), and
    /// the backoff stays at unlimited rate only.
    #[test]
    fn the_window_follows_the_clients_ask_paced_or_not() {
        let config = |bandwidth: u64, flowlab: &str| {
            let p: TestParams = serde_json::from_str(&format!(
                r#"{{"udp":true,"time":1,"parallel":1,"len":1460,"bandwidth":{bandwidth}{flowlab}}}"#
            ))
            .expect("params");
            let c = data_config(&p, Protocol::Udp, End::Server);
            (c.window, c.backoff)
        };
        let asks = r#","flowlab":{"version":1,"udp_backoff":true,"udp_window":true}"#;
        let paced_ask = r#","flowlab":{"version":1,"udp_window":true}"#;
        assert_eq!(config(0, asks), (true, true));
        assert_eq!(config(1_000_000_000, paced_ask), (true, false));
        assert_eq!(
            config(1_000_000_000, r#","flowlab":{"version":1}"#),
            (false, false)
        );
        assert_eq!(
            config(1_000_000_000, ""),
            (false, false),
            "a stock iperf3 client"
        );
        let stop_and_wait = r#","flowlab":{"version":1,"mode":"stop-and-wait","udp_window":true}"#;
        assert_eq!(config(0, stop_and_wait), (false, false));
    }

    /// A parameter document captured from a newer iperf3 client
    /// (flowlab-proto/tests/fixtures/iperf3-params).
    fn newer(name: &str) -> TestParams {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../flowlab-proto/tests/fixtures/iperf3-params"
        );
        let text = std::fs::read(format!("{dir}/{name}.json")).expect(name);
        flowlab_proto::frame::decode(&text).expect(name)
    }

    /// What iperf3 3.21 asks of the offloads is what the server's streams do: a client
    /// without `--gsro` says 0 and gets none; with it, segments of its buffer's size;
    /// an older client leaves them to the server (on). `--skip-rx-copy` reaches the
    /// receivers.
    #[test]
    fn newer_clients_offloads_and_skip_rx_copy_reach_the_streams() {
        let cfg = |name: &str| {
            let p = newer(name);
            let proto = p.protocol().expect("a protocol");
            let c = data_config(&p, proto, End::Server);
            (c.gso_bytes, c.gro, c.skip_rx_copy)
        };
        assert_eq!(cfg("3.21-udp"), (0, false, false));
        assert_eq!(cfg("3.21-udp-gsro"), (32_768, true, false));
        assert_eq!(
            cfg("3.19.1-udp"),
            (crate::udp_data::MAX_GSO_BYTES, true, false)
        );
        assert!(cfg("3.21-skip-rx-copy").2);
        assert!(cfg("3.19.1-skip-rx-copy-reverse").2);
    }

    /// An MPTCP client is served by an MPTCP listener, and refused by a plain TCP one —
    /// never served as plain TCP: an iperf3 client hears "protocol not supported"; the
    /// others are served either way.
    #[test]
    fn newer_clients_mptcp_is_served_only_as_mptcp_and_the_rest_served() {
        let cfg = ServerConfig::default();
        for name in ["3.19.1-mptcp", "3.21-mptcp"] {
            let e = validate(&newer(name), &cfg, false).unwrap_err();
            assert_eq!(e, Refusal::Mptcp, "{name}");
            assert_eq!(e.errno(), libc::EPROTONOSUPPORT);
            assert_eq!(
                validate(&newer(name), &cfg, true),
                Ok(Protocol::Tcp),
                "{name}"
            );
        }
        for name in [
            "3.19.1-skip-rx-copy-reverse",
            "3.19.1-udp",
            "3.21-tcp",
            "3.21-udp",
            "3.21-udp-gsro",
            "3.21-skip-rx-copy",
        ] {
            assert!(validate(&newer(name), &cfg, false).is_ok(), "{name}");
            assert!(validate(&newer(name), &cfg, true).is_ok(), "{name}");
        }
        let mut odd = newer("3.21-udp-gsro");
        odd.gso_dg_size = 1400;
        assert_eq!(
            validate(&odd, &cfg, true).unwrap_err(),
            Refusal::GsoDatagram {
                dg: 1400,
                len: 32_768
            }
        );
        let file = ServerConfig {
            file: Some("received".into()),
            ..ServerConfig::default()
        };
        assert_eq!(
            validate(&newer("3.21-skip-rx-copy"), &file, true).unwrap_err(),
            Refusal::SkipWithFile
        );
        assert!(validate(&newer("3.19.1-skip-rx-copy-reverse"), &file, true).is_ok());
    }

    #[test]
    fn a_test_ends_at_its_time_or_the_max_duration_whichever_is_sooner_plus_the_grace() {
        let secs = Duration::from_secs;
        let cfg = |max: Option<u64>| ServerConfig {
            max_duration: max.map(secs),
            end_grace: secs(2),
            ..ServerConfig::default()
        };
        let p = |time, omit| TestParams {
            time,
            omit,
            ..TestParams::default()
        };
        assert_eq!(end_of(&p(10, 2), &cfg(None)).0, Some(secs(14)));
        assert_eq!(end_of(&p(10, 2), &cfg(Some(30))).0, Some(secs(14)));
        let (end, why) = end_of(&p(10, 2), &cfg(Some(5)));
        assert_eq!(end, Some(secs(7)));
        assert!(why.contains("--max-duration 5"), "{why}");
        // A test bounded by bytes ends at the limit, or only by the idle limit.
        assert_eq!(end_of(&p(0, 0), &cfg(Some(5))).0, Some(secs(7)));
        assert_eq!(end_of(&p(0, 0), &cfg(None)).0, None);
    }

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
}
