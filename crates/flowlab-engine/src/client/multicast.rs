//! A multicast test (`--receivers`): one UDP stream sent to a group, and a control
//! connection to each receiver — a flowlab server that joins the group for the test and
//! returns what reached it, so the sender's side gathers every receiver's loss, jitter,
//! duplicates and reordering.

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flowlab_proto::hello::ServerHello;
use flowlab_proto::params::{Multicast, Protocol};
use flowlab_proto::results::PeerResults;
use flowlab_proto::{Cookie, State};
use flowlab_results::result::{
    self, MulticastEnd, MulticastReceiver, SCHEMA, StreamDirection, StreamInfo, TestResult,
};
use flowlab_results::spec::{IpFamily, MulticastSpec, TestSpec};
use socket2::SockRef;

use super::data_phase::{PhaseEnd, Reports, run_data_phase};
use super::{
    ClientError, Ended, Negotiated, Observer, budget, data_file, exchange_results, negotiate,
    open_control, start_info,
};
use crate::control::{self, ControlError};
use crate::negotiate::{End, data_config};
use crate::session::DataSession;
use crate::sock;
use crate::stream::{Role, StreamPlan, TestControl, Transport};

/// One receiver's control connection and what it said.
struct Receiver {
    /// As the user gave it (`--receivers`).
    name: String,
    ctrl: TcpStream,
    addr: SocketAddr,
    cookie: Cookie,
    hello: Option<ServerHello>,
}

/// Runs a multicast test: every receiver joins before the first datagram is sent; each
/// one's results are kept even when another's are lost.
pub(super) fn run(
    spec: &TestSpec,
    m: &MulticastSpec,
    obs: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<TestResult, ClientError> {
    let group_ip: IpAddr = spec.host.parse().map_err(|_| {
        ClientError::Multicast(format!(
            "{}: a multicast test sends to a group's address, not a name",
            spec.host
        ))
    })?;
    if !group_ip.is_multicast() {
        return Err(ClientError::Multicast(format!(
            "{group_ip} is not a multicast group address (224.0.0.0/4, ff00::/8)"
        )));
    }
    let group = SocketAddr::new(group_ip, spec.port);
    let family = if group.is_ipv4() {
        IpFamily::Ipv4
    } else {
        IpFamily::Ipv6
    };
    let file = data_file(spec)?;
    let mut receivers = Vec::with_capacity(m.receivers.len());
    for r in &m.receivers {
        let name = r.to_string();
        let named = |source: ClientError| ClientError::Receiver {
            receiver: name.clone(),
            source: Box::new(source),
        };
        let addrs = crate::reach::addresses(&r.host, r.port, Some(family)).map_err(|e| {
            named(match e {
                crate::reach::ResolveError::NoAddressOf { host, family, .. } => {
                    crate::reach::ResolveError::NoAddressOf {
                        host,
                        family,
                        flag: "the group's family",
                    }
                    .into()
                }
                e => e.into(),
            })
        })?;
        let (ctrl, addr, cookie) = open_control(spec, &addrs).map_err(named)?;
        receivers.push(Receiver {
            name,
            ctrl,
            addr,
            cookie,
            hello: None,
        });
    }
    let first = receivers
        .first()
        .ok_or_else(|| ClientError::Multicast("a multicast test needs a receiver".into()))?;
    // The group's datagrams leave by -B's address, or by the interface the first
    // receiver is reached by.
    let via = match spec.bind {
        Some(ip) => ip,
        None => first.ctrl.local_addr().map_err(ControlError::Io)?.ip(),
    };
    let id = crate::stream::stream_id(0);
    let sock = crate::multicast::sender(group, via, m.ttl, spec.bind_dev.as_deref())
        .map_err(|source| ClientError::Stream { id, source })?;
    let want = match spec.window {
        0 => crate::stream::UDP_DEFAULT_BUFFER,
        w => w,
    };
    sock::set_buffers(&SockRef::from(&sock), want)?;
    let source = sock
        .local_addr()
        .map_err(|source| ClientError::Stream { id, source })?;
    // As the kernel holds it, not as asked.
    let ttl = {
        let s = SockRef::from(&sock);
        match group {
            SocketAddr::V4(_) => s.multicast_ttl_v4(),
            SocketAddr::V6(_) => s.multicast_hops_v6(),
        }
        .map_err(|source| ClientError::Stream { id: 1, source })?
    };

    let mut params = spec.to_params();
    if let Some(c) = &spec.credentials {
        params.authtoken = Some(crate::credentials::token(c).map_err(ClientError::Auth)?);
    }
    if let Some(f) = params.flowlab.as_mut() {
        f.multicast = Some(Multicast {
            group,
            source,
            source_specific: m.source_specific,
        });
    }
    // Each receiver joins before it answers TEST_RUNNING, so none misses the start.
    for r in &mut receivers {
        let Negotiated { hello, .. } =
            negotiate(&mut r.ctrl, spec, Protocol::Udp, &params, r.addr, &r.cookie).map_err(
                |e| ClientError::Receiver {
                    receiver: r.name.clone(),
                    source: Box::new(e),
                },
            )?;
        r.hello = hello;
    }

    let bufs = sock::buffers(&SockRef::from(&sock));
    let info = StreamInfo {
        id,
        direction: StreamDirection::Up,
        local: source.to_string(),
        remote: group.to_string(),
        sndbuf: bufs.sndbuf,
        rcvbuf: bufs.rcvbuf,
        congestion: None,
        mss: None,
        tos: (spec.tos > 0)
            .then(|| sock::tos(&SockRef::from(&sock), group))
            .flatten(),
        snd_timeout_ms: None,
    };
    let plans = vec![StreamPlan {
        id,
        role: Role::Send,
        transport: Transport::Udp(Arc::new(sock)),
        early: Vec::new(),
    }];
    let directions = [(id, StreamDirection::Up)];
    // No window, no backoff: nothing a receiver says can reach a socket connected to a
    // group (`TestSpec::wants_window`).
    let end = End::Client {
        features: &[],
        affinity: spec.affinity.client,
    };
    let mut cfg = data_config(&params, Protocol::Udp, end);
    cfg.file = file;
    cfg.path_rtt = sock::least_rtt(&receivers[0].ctrl);
    let system = crate::sysinfo::collect();
    let ctl = TestControl::new(budget(spec));
    let mut session = DataSession::start(plans, cfg, ctl, Duration::from_secs(spec.omit))
        .map_err(|source| ClientError::Stream { id, source })?;
    let first = &receivers[0];
    let start = start_info(
        spec,
        &first.ctrl,
        first.addr,
        first.hello.as_ref(),
        &first.cookie,
        vec![info],
        system,
    );
    obs.started(&start);

    let mut intervals = Vec::new();
    // The first receiver's control connection is watched while the data flows (a
    // server's limit ends the test there); the others are heard at the end.
    let outcome = run_data_phase(
        spec,
        &mut session,
        &mut receivers[0].ctrl,
        &directions,
        Reports {
            obs,
            intervals: &mut intervals,
            latency: None,
        },
        interrupt,
    );
    let mut interrupted = interrupt.load(Ordering::Acquire);
    session.stop_senders();
    // Whether the first receiver's server ended the test itself (a limit), or stopped
    // answering: nothing more is said to it.
    let first_ended = match outcome {
        Ok(PhaseEnd::Normal) => false,
        Ok(PhaseEnd::ServerTerminated | PhaseEnd::Stalled(_)) => true,
        Err(e) => {
            session.abort();
            return Err(e);
        }
    };
    let ended_already = |i: usize| i == 0 && first_ended;
    // TEST_END to every receiver first, so they stop together; then each one's results.
    let told: Vec<Result<(), ControlError>> = receivers
        .iter_mut()
        .enumerate()
        .map(|(i, r)| {
            if ended_already(i) {
                Ok(())
            } else {
                control::write_state(&mut r.ctrl, State::TestEnd)
            }
        })
        .collect();
    session.ctl.stop_recv.store(true, Ordering::Release);
    let ended: Vec<Result<Ended, ClientError>> = receivers
        .iter_mut()
        .zip(told)
        .enumerate()
        .map(|(i, (r, told))| {
            if ended_already(i) {
                Ok(Ended::terminated())
            } else {
                told.map_err(ClientError::from)
                    .and_then(|()| exchange_results(&mut r.ctrl, spec, &mut session))
            }
        })
        .collect();
    interrupted |= ended.iter().any(|e| e.as_ref().is_ok_and(|e| e.terminated));
    session.abort();
    let snap = session.snapshot();
    let local = session.peer_results(&snap, session.ctl.epoch.elapsed());
    let mut end = result::summarize(&directions, true, &local, None, interrupted);
    if !interrupted {
        end.failed_streams = session.failures();
    }
    end.multicast = Some(MulticastEnd {
        group: group.to_string(),
        source: source.to_string(),
        source_specific: m.source_specific,
        ttl,
        receivers: receivers
            .iter()
            .zip(ended)
            .map(|(r, e)| receiver_end(r, e, &directions, &local, interrupted))
            .collect(),
    });
    Ok(TestResult {
        schema: SCHEMA.into(),
        start,
        intervals,
        end: Some(end),
        trace: None,
        latency: None,
    })
}

/// What one receiver reported, or why it reported nothing.
fn receiver_end(
    r: &Receiver,
    ended: Result<Ended, ClientError>,
    directions: &[(i64, StreamDirection)],
    local: &PeerResults,
    interrupted: bool,
) -> MulticastReceiver {
    let (name, address) = (r.name.clone(), r.addr.to_string());
    let remote = match ended {
        Ok(Ended {
            remote: Some(remote),
            ..
        }) => remote,
        Ok(_) => {
            return MulticastReceiver {
                name,
                address,
                totals: None,
                cpu_percent: None,
                error: Some("the test ended before results were exchanged".into()),
            };
        }
        Err(e) => {
            return MulticastReceiver {
                name,
                address,
                totals: None,
                cpu_percent: None,
                error: Some(e.to_string()),
            };
        }
    };
    let end = result::summarize(directions, true, local, Some(&remote), interrupted);
    let stream = end.streams.into_iter().next();
    // Over the time the stream was sent: a receiver's own clock starts when it joined,
    // and receivers join one after another (one whose control connection lost a
    // segment, a retransmission later than the rest), which would lower the first ones'
    // rates by the wait for the last.
    let sender = stream.as_ref().and_then(|s| s.sender.as_ref());
    let (sent_for, sent) = (sender.map(|s| s.seconds), sender.and_then(|s| s.packets));
    let totals = stream.and_then(|s| s.receiver).map(|mut t| {
        if let Some(seconds) = sent_for {
            t.seconds = seconds;
            t.bits_per_second = result::bps(t.bytes, seconds);
        }
        // The sender's count is here: a receiver that lost the last datagrams lost
        // them too, which its highest sequence number cannot tell.
        if let (Some(u), Some(sent)) = (t.udp.as_mut(), sent) {
            u.count_against(sent);
        }
        t
    });
    MulticastReceiver {
        name,
        address,
        totals,
        cpu_percent: Some(end.cpu.remote_total),
        error: None,
    }
}
