//! The data side of one test, shared by client and server: the running streams, the
//! baseline taken when the omitted seconds end, snapshots for intervals, and this side's
//! results for the exchange.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use flowlab_proto::results::{PeerResults, SocketSettings, StreamResults};
use flowlab_proto::trace::StreamTrace;

use crate::sock;
use crate::stream::{DataConfig, Role, StreamCounters, StreamPlan, TestControl, Transport};
use crate::udp_stats::UdpCounts;
use crate::udp_stats::UdpReceiverStats;

/// One stream's counters at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    pub at_us: u64,
    pub bytes: u64,
    pub blocks: u64,
    pub sw_retransmits: u64,
    pub rcvbuf_drops: u64,
    pub backoff_cuts: u64,
    pub receiver_holds: u64,
    pub udp: Option<UdpCounts>,
    pub tcp: Option<crate::tcpinfo::TcpInfo>,
}

/// The streams of one test on this side.
#[derive(Debug)]
pub struct DataSession {
    pub ctl: Arc<TestControl>,
    pub streams: Vec<RunningStream>,
    /// How the streams move data.
    pub cfg: Arc<DataConfig>,
    /// Counters when the omitted seconds ended (zero when nothing is omitted).
    pub baseline: Vec<Snapshot>,
    pub omit: Duration,
    /// The omitted seconds have not ended yet (the baseline is still zero).
    omitting: bool,
}

impl DataSession {
    /// Starts a thread for each stream. If one cannot start, those already running are
    /// stopped (the session's `Drop`).
    pub fn start(
        plans: Vec<StreamPlan>,
        cfg: DataConfig,
        ctl: Arc<TestControl>,
        omit: Duration,
    ) -> std::io::Result<DataSession> {
        let cfg = Arc::new(cfg);
        // Counting starts from zero; with omitted seconds the baseline moves when they end.
        let mut session = DataSession {
            ctl,
            cfg,
            baseline: vec![Snapshot::default(); plans.len()],
            streams: Vec::with_capacity(plans.len()),
            omit,
            omitting: !omit.is_zero(),
        };
        for plan in plans {
            let s = spawn(plan, Arc::clone(&session.cfg), Arc::clone(&session.ctl))?;
            session.streams.push(s);
        }
        Ok(session)
    }

    /// Counters of every stream now.
    pub fn snapshot(&self) -> Vec<Snapshot> {
        let at_us = self.ctl.elapsed_us();
        self.streams
            .iter()
            .map(|s| {
                let c = &s.counters;
                Snapshot {
                    at_us,
                    bytes: c.bytes.load(Ordering::Relaxed),
                    blocks: c.blocks.load(Ordering::Relaxed),
                    sw_retransmits: c.sw_retransmits.load(Ordering::Relaxed),
                    rcvbuf_drops: c.rcvbuf_drops.load(Ordering::Relaxed),
                    backoff_cuts: c.backoff_cuts.load(Ordering::Relaxed),
                    receiver_holds: c.receiver_holds.load(Ordering::Relaxed),
                    udp: c.udp_counts(),
                    tcp: match &s.transport {
                        Transport::Tcp(t) if s.role == Role::Send => sock::tcp_info(t.as_ref()),
                        _ => None,
                    },
                }
            })
            .collect()
    }

    /// What the kernel says of each TCP stream's MPTCP connection now (an MPTCP test's
    /// end), in the streams' order.
    pub fn mptcp(&self) -> Vec<flowlab_results::result::MptcpConnection> {
        self.streams
            .iter()
            .filter_map(|s| match &s.transport {
                Transport::Tcp(t) => sock::mptcp_connection(t.as_ref(), s.id),
                _ => None,
            })
            .collect()
    }

    /// Takes the baseline when the omitted seconds have just ended.
    pub fn end_omit_if_due(&mut self) {
        if self.omitting && self.ctl.epoch.elapsed() >= self.omit {
            self.omitting = false;
            self.baseline = self.snapshot();
        }
    }

    /// Whether the omitted seconds are still running.
    pub fn omitting(&self) -> bool {
        self.omitting
    }

    /// Stops the senders and waits for them.
    pub fn stop_senders(&mut self) {
        self.ctl.stop_send.store(true, Ordering::Release);
        for s in self.streams.iter_mut().filter(|s| s.role == Role::Send) {
            let _ = s.join();
        }
    }

    /// Lets the receivers drain and waits for them (bounded by [`crate::stream::DRAIN_MAX`]).
    pub fn stop_receivers(&mut self) {
        self.ctl.stop_recv.store(true, Ordering::Release);
        for s in self.streams.iter_mut() {
            let _ = s.join();
        }
    }

    /// Stops everything at once (an aborted test).
    pub fn abort(&mut self) {
        self.ctl.stop();
        for s in self.streams.iter_mut() {
            let _ = s.join();
        }
    }

    /// Ends a test cut short (a limit, a vanished peer): like [`Self::abort`], but the
    /// receivers do not wait for data still in flight.
    pub fn cut(&mut self) {
        self.ctl.cut();
        for s in self.streams.iter_mut() {
            let _ = s.join();
        }
    }

    /// The streams that failed while the test ran, and why.
    pub fn failures(&self) -> Vec<flowlab_results::result::StreamFailure> {
        self.streams
            .iter()
            .filter_map(|s| {
                let why = s.counters.failure.lock().ok()?.clone()?;
                Some(flowlab_results::result::StreamFailure {
                    id: s.id,
                    error: why,
                })
            })
            .collect()
    }

    /// Bytes moved by this side's streams of `role` since the start (omit included).
    pub fn total_bytes(&self, role: Role) -> u64 {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .map(|s| s.counters.bytes.load(Ordering::Relaxed))
            .sum()
    }

    pub fn all_finished(&self, role: Role) -> bool {
        self.streams
            .iter()
            .filter(|s| s.role == role)
            .all(RunningStream::is_finished)
    }

    pub fn has(&self, role: Role) -> bool {
        self.streams.iter().any(|s| s.role == role)
    }

    /// CPU use of this side's stream threads, percent of one core: (total, user, system).
    pub fn cpu_percent(&self, wall: Duration) -> (f64, f64, f64) {
        let wall_us = wall.as_micros().max(1) as f64;
        let (mut user, mut system) = (0u64, 0u64);
        for s in &self.streams {
            user += s.counters.cpu_user_us.load(Ordering::Acquire);
            system += s.counters.cpu_system_us.load(Ordering::Acquire);
        }
        let pct = |v: u64| v as f64 * 100.0 / wall_us;
        (pct(user + system), pct(user), pct(system))
    }

    /// This side's results for the exchange, after all streams ended.
    /// `--trace`: takes every TCP stream's samples (empty when not tracing). Call once,
    /// after the streams stopped; the samples move out rather than being copied.
    pub fn take_traces(&self) -> Vec<StreamTrace> {
        let Some(period) = self.cfg.trace else {
            return Vec::new();
        };
        self.streams
            .iter()
            .filter_map(|s| match &s.transport {
                Transport::Tcp(t) => Some(StreamTrace {
                    id: s.id,
                    period_us: period.as_micros() as u64,
                    congestion: sock::congestion(t.as_ref()),
                    truncated: s.counters.trace_truncated.load(Ordering::Relaxed),
                    samples: s
                        .counters
                        .trace
                        .lock()
                        .map(|mut v| std::mem::take(&mut *v))
                        .unwrap_or_default(),
                }),
                Transport::Udp(_) => None,
            })
            .collect()
    }

    pub fn peer_results(&self, final_snap: &[Snapshot], wall: Duration) -> PeerResults {
        let (total, user, system) = self.cpu_percent(wall);
        let any_send = self.has(Role::Send);
        let tcp = self
            .streams
            .iter()
            .any(|s| matches!(s.transport, Transport::Tcp(_)));
        let streams = self
            .streams
            .iter()
            .zip(final_snap.iter().zip(&self.baseline))
            .map(|(s, (end, base))| stream_results(s, end, base, &self.cfg))
            .collect();
        PeerResults {
            cpu_util_total: total,
            cpu_util_user: user,
            cpu_util_system: system,
            sender_has_retransmits: match (any_send, tcp) {
                (false, _) => -1,
                (true, true) => 1,
                (true, false) => 0,
            },
            congestion_used: self.streams.iter().find_map(|s| match &s.transport {
                Transport::Tcp(t) => sock::congestion(t.as_ref()),
                Transport::Udp(_) => None,
            }),
            streams,
            server_output_json: None,
            server_output_text: None,
        }
    }
}

/// However a test ends — normally, or by an error on the control connection half-way —
/// its stream threads are stopped and joined, never left running.
impl Drop for DataSession {
    fn drop(&mut self) {
        self.abort();
    }
}

/// The end time of a stream on the test clock, µs.
pub fn stream_end_us(s: &RunningStream, snap: &Snapshot) -> u64 {
    match s.counters.end_us.load(Ordering::Acquire) {
        0 => snap.at_us,
        t => t,
    }
}

fn stream_results(
    s: &RunningStream,
    end: &Snapshot,
    base: &Snapshot,
    cfg: &DataConfig,
) -> StreamResults {
    let udp_sender = s.role == Role::Send && matches!(s.transport, Transport::Udp(_));
    let end_us = stream_end_us(s, end);
    let seconds = end_us.saturating_sub(base.at_us) as f64 / 1e6;
    let udp = end.udp.map(|u| (u, base.udp.unwrap_or_default()));
    let retransmits = match (&end.tcp, &base.tcp, s.role, &s.transport) {
        (Some(e), b, Role::Send, _) => (e.total_retrans - b.map_or(0, |b| b.total_retrans)) as i64,
        (None, _, Role::Send, Transport::Tcp(_)) => 0,
        _ => -1,
    };
    let sw = end.sw_retransmits - base.sw_retransmits;
    // The sender's D-SACK and reordering counts over the same span as `retransmits`.
    let tcp_delta =
        |f: fn(&crate::tcpinfo::TcpInfo) -> Option<u64>| match (&end.tcp, &base.tcp, s.role) {
            (Some(e), b, Role::Send) => {
                Some(f(e)?.saturating_sub(b.as_ref().and_then(f).unwrap_or(0)))
            }
            _ => None,
        };
    StreamResults {
        id: s.id,
        bytes: end.bytes - base.bytes,
        retransmits,
        jitter: udp.map_or(0.0, |(u, _)| u.jitter_us / 1e6),
        errors: udp.map_or(0, |(u, b)| signed(u.since(&b).lost)),
        // A UDP receiver reports the highest sequence number seen, as iperf3 does; a
        // sender the datagrams (or writes) it sent.
        packets: match udp {
            Some((u, b)) => signed(u.highest_seq - b.highest_seq),
            None => signed(end.blocks - base.blocks),
        },
        omitted_errors: udp.map_or(0, |(_, b)| signed(b.lost)),
        omitted_packets: udp.map_or(0, |(_, b)| signed(b.highest_seq)),
        start_time: 0.0,
        end_time: seconds,
        out_of_order: udp.map(|(u, b)| u.since(&b).out_of_order),
        duplicates: udp.map(|(u, b)| u.since(&b).duplicates),
        delivered_bytes: udp.map(|(u, b)| u.since(&b).unique_bytes),
        sw_retransmits: (sw > 0).then_some(sw),
        dsack_dups: tcp_delta(|t| t.dsack_dups),
        reordering: tcp_delta(|t| t.reord_seen),
        rcvbuf_drops: udp.map(|_| end.rcvbuf_drops.saturating_sub(base.rcvbuf_drops)),
        backoff_cuts: (cfg.backoff && udp_sender)
            .then(|| end.backoff_cuts.saturating_sub(base.backoff_cuts)),
        // At unlimited rate waiting for the receiver is how the sender goes; paced, it
        // means the receiver did not keep up with the rate.
        receiver_holds: (cfg.window && cfg.rate_bps > 0 && udp_sender)
            .then(|| end.receiver_holds.saturating_sub(base.receiver_holds)),
        foreign: udp.map(|(u, b)| u.since(&b).foreign),
        socket: None,
        trace: None,
    }
}

/// A count for iperf3's signed fields: never negative, however large.
fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What the kernel granted a stream's socket: its buffers, congestion control, and the
/// type of service where one is set.
pub fn socket_settings(s: &RunningStream) -> SocketSettings {
    let tos = |sock: &socket2::SockRef<'_>, peer: std::io::Result<std::net::SocketAddr>| {
        peer.ok()
            .and_then(|p| sock::tos(sock, p))
            .filter(|&t| t > 0)
    };
    match &s.transport {
        Transport::Tcp(t) => {
            let r = socket2::SockRef::from(t.as_ref());
            let b = sock::buffers(&r);
            SocketSettings {
                sndbuf: b.sndbuf,
                rcvbuf: b.rcvbuf,
                congestion: sock::congestion(t.as_ref()),
                tos: tos(&r, t.peer_addr()),
                dont_fragment: None,
                snd_timeout_ms: r
                    .tcp_user_timeout()
                    .ok()
                    .flatten()
                    .map(|d| d.as_millis() as u64),
            }
        }
        Transport::Udp(u) => {
            let r = socket2::SockRef::from(u.as_ref());
            let b = sock::buffers(&r);
            SocketSettings {
                sndbuf: b.sndbuf,
                rcvbuf: b.rcvbuf,
                congestion: None,
                tos: tos(&r, u.peer_addr()),
                dont_fragment: u
                    .peer_addr()
                    .ok()
                    .and_then(|p| sock::dont_fragment(u.as_ref(), p))
                    .filter(|&df| df),
                snd_timeout_ms: None,
            }
        }
    }
}

/// A stream whose thread is running.
#[derive(Debug)]
pub struct RunningStream {
    pub id: i64,
    pub role: Role,
    pub transport: Transport,
    pub counters: Arc<StreamCounters>,
    handle: Option<JoinHandle<std::io::Result<()>>>,
}

impl RunningStream {
    /// Waits for the thread; returns its error if it failed.
    pub fn join(&mut self) -> std::io::Result<()> {
        match self.handle.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("stream thread panicked"))),
            None => Ok(()),
        }
    }

    pub fn is_finished(&self) -> bool {
        self.counters.finished.load(Ordering::Acquire)
    }
}

/// Starts the thread of one stream.
pub fn spawn(
    plan: StreamPlan,
    cfg: Arc<DataConfig>,
    ctl: Arc<TestControl>,
) -> std::io::Result<RunningStream> {
    let counters = Arc::new(StreamCounters::default());
    if plan.role == Role::Receive && matches!(plan.transport, Transport::Udp(_)) {
        if let Ok(mut g) = counters.udp.lock() {
            *g = Some(UdpReceiverStats::new(crate::udp_data::datagram_len(&cfg)));
        }
    }
    let StreamPlan {
        id,
        role,
        transport,
        early,
    } = plan;
    let thread_counters = Arc::clone(&counters);
    let thread_transport = transport.clone();
    let handle = std::thread::Builder::new()
        .name(format!("stream-{id}"))
        .spawn(move || {
            let c = &thread_counters;
            let pinned = cfg.affinity.map_or(Ok(()), crate::cpu::pin_thread);
            let result = pinned.and_then(|()| match (&thread_transport, role) {
                (Transport::Tcp(s), Role::Send) => crate::tcp_data::send(s, &cfg, &ctl, c),
                (Transport::Tcp(s), Role::Receive) => crate::tcp_data::receive(s, &cfg, &ctl, c),
                (Transport::Udp(s), Role::Send) => crate::udp_data::send(s, &cfg, &ctl, c),
                (Transport::Udp(s), Role::Receive) => {
                    crate::udp_data::receive(s, &cfg, &ctl, c, early)
                }
            });
            if c.end_us.load(Ordering::Acquire) == 0 {
                c.end_us.store(ctl.elapsed_us().max(1), Ordering::Release);
            }
            let (user, system) = crate::cpu::thread_cpu_us();
            c.cpu_user_us.store(user, Ordering::Release);
            c.cpu_system_us.store(system, Ordering::Release);
            c.finished.store(true, Ordering::Release);
            if let Some(ended) = &ctl.ended {
                let _ = ended.write(1);
            }
            if let Err(e) = &result {
                tracing::debug!(stream = id, "stream ended with error: {e}");
                let ending = match role {
                    Role::Send => ctl.stop_send.load(Ordering::Acquire),
                    Role::Receive => ctl.stop_recv.load(Ordering::Acquire),
                } || ctl.cut.load(Ordering::Acquire);
                if !ending {
                    if let Ok(mut f) = c.failure.lock() {
                        *f = Some(e.to_string());
                    }
                }
            }
            result
        })?;
    Ok(RunningStream {
        id,
        role,
        transport,
        counters,
        handle: Some(handle),
    })
}
