//! What a test produced: [`TestResult`], the one type every output is made from (the
//! terminal table, `--json`, `--json-stream`). Its JSON form is documented field by field
//! in `docs/json-schema.md`; [`SCHEMA`] names its version.

use flowlab_proto::results::{PeerResults, StreamResults};
use serde::{Deserialize, Serialize};

use crate::spec::TestSpec;

/// Name and version of the JSON schema.
pub const SCHEMA: &str = "flowlab.test/1";

pub use crate::spec::StreamDirection;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestResult {
    pub schema: String,
    pub start: StartInfo,
    pub intervals: Vec<Interval>,
    pub end: Option<EndInfo>,
    /// `--trace`: TCP_INFO samples of every TCP stream on both ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Trace>,
    /// `--latency`: round trips before and during the load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::latency::TestLatency>,
}

/// The samples of a traced test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trace {
    /// Sampling period asked for, µs.
    pub period_us: u64,
    /// One entry per stream and end that sampled it.
    pub streams: Vec<TracedStream>,
    /// What limited each direction's senders ([`crate::diagnose`]).
    pub diagnosis: Vec<crate::diagnosis::Diagnosis>,
    /// Why there is no diagnosis, in a sentence; absent when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undiagnosed: Option<String>,
}

/// Which end of the test took a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Client,
    Server,
}

/// One stream's samples on one end, with where they come from.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TracedStream {
    pub side: Side,
    pub direction: StreamDirection,
    /// Whether this end sends (`true`) or receives on the stream.
    pub sender: bool,
    #[serde(flatten)]
    pub trace: flowlab_proto::trace::StreamTrace,
}

impl Trace {
    /// Joins this end's traces and those the server returned, labelled by side and role
    /// (not diagnosed yet: [`crate::diagnose::diagnose`]).
    pub fn assemble(
        period_us: u64,
        directions: &[(i64, StreamDirection)],
        local: Vec<flowlab_proto::trace::StreamTrace>,
        remote: Vec<flowlab_proto::trace::StreamTrace>,
    ) -> Trace {
        let direction = |id: i64| {
            directions
                .iter()
                .find(|(i, _)| *i == id)
                .map_or(StreamDirection::Up, |(_, d)| *d)
        };
        let mut streams = Vec::new();
        for (side, traces) in [(Side::Client, local), (Side::Server, remote)] {
            for trace in traces {
                let d = direction(trace.id);
                streams.push(TracedStream {
                    side,
                    direction: d,
                    sender: (side == Side::Client) == (d == StreamDirection::Up),
                    trace,
                });
            }
        }
        Trace {
            period_us,
            streams,
            diagnosis: Vec::new(),
            undiagnosed: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartInfo {
    /// Seconds since the Unix epoch when the test started.
    pub timestamp: u64,
    pub flowlab_version: String,
    /// What the test was asked (its credentials never: they are not written).
    pub spec: TestSpec,
    pub local: String,
    pub remote: String,
    pub peer: PeerInfo,
    pub cookie: String,
    pub streams: Vec<StreamInfo>,
    /// The client's machine state when the test started.
    #[serde(default)]
    pub system: flowlab_proto::system::SystemInfo,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PeerInfo {
    pub kind: PeerKind,
    pub version: Option<String>,
    pub features: Vec<String>,
    /// The server's machine state, as a flowlab server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<flowlab_proto::system::SystemInfo>,
}

/// What kind of server a test ran against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerKind {
    /// A flowlab server (it answered flowlab's hello).
    Flowlab,
    /// Any server that does not answer flowlab's hello: iperf3's, or another that
    /// speaks its protocol.
    Iperf3,
    /// A server of the QUIC performance protocol (`--quic`): flowlab's or another
    /// stack's; the protocol does not say which.
    #[serde(rename = "quic-perf")]
    QuicPerf,
}

impl std::fmt::Display for PeerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PeerKind::Flowlab => "flowlab",
            PeerKind::Iperf3 => "iperf3",
            PeerKind::QuicPerf => "QUIC perf server",
        })
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StreamInfo {
    pub id: i64,
    pub direction: StreamDirection,
    pub local: String,
    pub remote: String,
    /// Socket buffers of the client's socket as the kernel reports them (Linux doubles
    /// the value asked for).
    pub sndbuf: u64,
    pub rcvbuf: u64,
    pub congestion: Option<String>,
    pub mss: Option<u64>,
    /// The IP type of service read back from the socket, when `-S`/`--dscp` asked for
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// TCP_USER_TIMEOUT read back from the socket, milliseconds, when `--snd-timeout`
    /// asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Interval {
    /// Seconds since data started to flow.
    pub start: f64,
    pub end: f64,
    /// Inside the omitted seconds (`-O`): shown, not counted in the totals.
    pub omitted: bool,
    pub streams: Vec<IntervalStream>,
    pub sums: Vec<IntervalSum>,
    /// `--latency`: the round trips of the probe replies that arrived in the interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<crate::ping::Latency>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalStream {
    pub id: i64,
    pub direction: StreamDirection,
    /// Bytes the client sent (up) or received (down) in the interval.
    pub bytes: u64,
    pub bits_per_second: f64,
    pub tcp: Option<TcpInterval>,
    pub udp: Option<UdpInterval>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct TcpInterval {
    pub retransmits: u64,
    pub cwnd_bytes: u64,
    pub rtt_us: u64,
    pub rttvar_us: u64,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct UdpInterval {
    /// Datagrams received (duplicates included).
    pub packets: u64,
    /// Datagrams the sender sent in the interval as far as the receiver can tell:
    /// received − duplicates + lost.
    pub expected: u64,
    pub lost: u64,
    pub lost_percent: f64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IntervalSum {
    pub direction: StreamDirection,
    pub bytes: u64,
    pub bits_per_second: f64,
    pub retransmits: Option<u64>,
    pub udp: Option<UdpInterval>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndInfo {
    pub streams: Vec<EndStream>,
    pub sums: Vec<EndSum>,
    pub cpu: CpuInfo,
    /// Congestion control used by the client's and the server's sockets.
    pub congestion_local: Option<String>,
    pub congestion_remote: Option<String>,
    /// The test was cut short (Ctrl-C or a server-side limit); totals cover what ran.
    pub interrupted: bool,
    /// The server's own output for the test (`--get-server-output`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output: Option<ServerOutput>,
    /// This end's streams that failed while the test ran (a reset, a timeout), with why;
    /// absent when none did, and in a test cut short (`interrupted`). A test whose every
    /// stream failed is a failed test.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_streams: Vec<StreamFailure>,
    /// A QUIC test's connections as its stack reports them (`--quic`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic: Option<QuicEnd>,
    /// An MPTCP test's connections as the client's kernel reports them (`-m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mptcp: Option<MptcpEnd>,
    /// A multicast test's group and what reached each receiver (`--receivers`); the
    /// streams above hold the sender's figures only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<MulticastEnd>,
}

/// A multicast test: where the one stream went, and each receiver's account of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MulticastEnd {
    /// The group and port sent to.
    pub group: String,
    /// The sending socket's address: what source-specific receivers joined for.
    pub source: String,
    pub source_specific: bool,
    /// TTL (IPv4) or hop limit (IPv6) of the datagrams.
    pub ttl: u32,
    /// One per `--receivers` entry, in its order.
    pub receivers: Vec<MulticastReceiver>,
}

/// One receiver of a multicast test.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MulticastReceiver {
    /// The receiver as `--receivers` named it (`HOST:PORT`).
    pub name: String,
    /// The address its control connection reached.
    pub address: String,
    /// What reached it (datagrams, loss, jitter, duplicates, reordering, against what
    /// the sender sent); `None` when it gave no results (`error` says why).
    pub totals: Option<SideTotals>,
    /// The receiver's CPU use over the test, percent of one core's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<f64>,
    /// Why there are no results from this receiver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the client's kernel says of an MPTCP test's connections at its end, and how it
/// ran them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MptcpEnd {
    /// The client's path manager (`net.mptcp.path_manager`: "kernel", "userspace"),
    /// which opens subflows, and its packet scheduler (`net.mptcp.scheduler`), which
    /// spreads data over them; `None` where the kernel does not say.
    pub path_manager: Option<String>,
    pub scheduler: Option<String>,
    /// One per data stream, in the streams' order.
    pub connections: Vec<MptcpConnection>,
}

/// One MPTCP connection (a data stream) at the test's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MptcpConnection {
    /// The data stream's id.
    pub stream: i64,
    /// The connection fell back to plain TCP (the server, or something on the path, did
    /// not speak MPTCP): its figures are TCP's and it has no subflows.
    pub fallback: bool,
    /// Bytes sent over all subflows (retransmissions between subflows included), bytes
    /// resent, and bytes received: MPTCP's own counts (Linux 6.5), `None` before.
    pub bytes_sent: Option<u64>,
    pub bytes_retransmitted: Option<u64>,
    pub bytes_received: Option<u64>,
    pub subflows: Vec<MptcpSubflow>,
}

/// One subflow of an MPTCP connection: a TCP connection over one path, as its
/// `tcp_info` says at the test's end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MptcpSubflow {
    /// Its two ends, `address:port`.
    pub local: String,
    pub remote: String,
    /// Bytes it sent that were acknowledged, and bytes it received.
    pub bytes_acked: u64,
    pub bytes_received: u64,
    /// Segments it retransmitted.
    pub retransmits: u64,
    /// Smoothed round trip, µs, and congestion window, bytes.
    pub rtt_us: u64,
    pub cwnd_bytes: u64,
}

/// What the QUIC stack says of a QUIC test's connections at its end, and how it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuicEnd {
    /// The QUIC implementation of the client ("quinn 0.11").
    pub stack: String,
    /// The client's congestion controller (the stack's own, not the kernel's).
    pub congestion: String,
    /// Streams share one connection (`false`) or have one each (`--quic-connections`).
    pub connection_each: bool,
    pub connections: Vec<QuicConnection>,
}

/// One QUIC connection's figures, from the client's stack.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct QuicConnection {
    /// From the first packet sent to the handshake's end.
    pub handshake_ms: f64,
    /// Smoothed round trip and the least seen, µs.
    pub rtt_us: u64,
    pub min_rtt_us: u64,
    /// The client's congestion window, bytes.
    pub cwnd_bytes: u64,
    /// Packets the client declared lost, their bytes, and the congestion events they
    /// caused (the client's sending only: a download's losses are the server's).
    pub lost_packets: u64,
    pub lost_bytes: u64,
    pub congestion_events: u64,
    pub sent_packets: u64,
    /// The path's MTU as discovered (UDP payload bytes).
    pub mtu: u16,
    /// UDP payload bytes the client sent and received, QUIC's headers, acknowledgements
    /// and retransmissions included.
    pub udp_sent_bytes: u64,
    pub udp_received_bytes: u64,
}

/// A stream that failed while its test ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamFailure {
    pub id: i64,
    /// The error, as the system said it ("Connection reset by peer (os error 104)").
    pub error: String,
}

impl EndInfo {
    /// Whether every stream of the test failed: nothing was measured to the end.
    pub fn every_stream_failed(&self) -> bool {
        !self.streams.is_empty()
            && self
                .streams
                .iter()
                .all(|s| self.failed_streams.iter().any(|f| f.id == s.id))
    }
}

/// What a server printed for one test, sent to a client that asked for it (iperf3's
/// `--get-server-output`): text lines, or JSON from a server that prints JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerOutput {
    Text(String),
    Json(serde_json::Value),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndStream {
    pub id: i64,
    pub direction: StreamDirection,
    pub sender: Option<SideTotals>,
    pub receiver: Option<SideTotals>,
    /// What the kernel granted the server's socket of this stream (a flowlab server
    /// reports it; the client's own are in `start.streams`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_socket: Option<flowlab_proto::results::SocketSettings>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EndSum {
    pub direction: StreamDirection,
    pub sender: Option<SideTotals>,
    pub receiver: Option<SideTotals>,
}

/// One side's totals for a stream or a direction.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SideTotals {
    pub bytes: u64,
    pub seconds: f64,
    pub bits_per_second: f64,
    /// TCP sender: segments retransmitted (from TCP_INFO).
    pub retransmits: Option<u64>,
    /// TCP sender (flowlab): of `retransmits`, segments the receiver reported as received
    /// twice (D-SACK): not needed, the original had arrived (reordering, a spurious
    /// timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsack_dups: Option<u64>,
    /// TCP sender (flowlab): times its TCP saw segments reordered on the way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reordering: Option<u64>,
    /// UDP sender: datagrams sent; stop-and-wait: messages.
    pub packets: Option<u64>,
    /// Stop-and-wait sender: messages sent again after a timeout.
    pub sw_retransmits: Option<u64>,
    /// UDP sender at unlimited rate with receiver-overflow backoff (flowlab peers): how
    /// often it slowed down.
    pub backoff_cuts: Option<u64>,
    /// Paced UDP sender keeping within the receiver's window (flowlab peers): how often
    /// the receiver held it back, not keeping up with the rate. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_holds: Option<u64>,
    pub udp: Option<UdpTotals>,
}

/// A UDP receiver's totals.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct UdpTotals {
    /// Datagrams the sender had sent as far as the receiver can tell (highest sequence),
    /// or as the sender counted them where its count reaches the receiver's row (a
    /// multicast receiver's: [`UdpTotals::count_against`]).
    pub expected: u64,
    pub lost: u64,
    pub lost_percent: f64,
    pub out_of_order: u64,
    pub duplicates: u64,
    pub jitter_ms: f64,
    /// Bytes delivered (first copies) as a share of bytes sent, percent; `None` when the
    /// sender's count is unknown.
    pub integrity_percent: Option<f64>,
    /// Times the receiving socket dropped arriving data because its buffer was full (the
    /// receiving host did not keep up): kernel packets, each one datagram or a GRO batch
    /// of several. `None` when the receiver is not flowlab.
    pub rcvbuf_drops: Option<u64>,
    /// Datagrams that could not belong to the stream (forged, replayed, too long, or far
    /// outside the stream's sequence numbers), counted in nothing else. `None` when the
    /// receiver is not flowlab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct CpuInfo {
    pub local_total: f64,
    pub local_user: f64,
    pub local_system: f64,
    pub remote_total: f64,
    pub remote_user: f64,
    pub remote_system: f64,
}

/// `part` as a percentage of `whole` (0 when `whole` is 0).
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        part as f64 * 100.0 / whole as f64
    } else {
        0.0
    }
}

fn mean(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = values.len();
    if n == 0 {
        0.0
    } else {
        values.sum::<f64>() / n as f64
    }
}

impl UdpInterval {
    /// A stream's interval from what its receiver counted in it: datagrams received
    /// (duplicates included), lost, out of order and duplicated, and the jitter, µs.
    pub fn from_receiver(
        packets: u64,
        lost: u64,
        out_of_order: u64,
        duplicates: u64,
        jitter_us: f64,
    ) -> Self {
        let expected = packets - duplicates + lost;
        UdpInterval {
            packets,
            expected,
            lost,
            lost_percent: percent(lost, expected),
            out_of_order,
            duplicates,
            jitter_ms: jitter_us / 1000.0,
        }
    }

    /// Several streams' intervals as one; jitter is their mean.
    pub fn sum(parts: &[UdpInterval]) -> Self {
        let expected = parts.iter().map(|x| x.expected).sum();
        let lost = parts.iter().map(|x| x.lost).sum();
        UdpInterval {
            packets: parts.iter().map(|x| x.packets).sum(),
            expected,
            lost,
            lost_percent: percent(lost, expected),
            out_of_order: parts.iter().map(|x| x.out_of_order).sum(),
            duplicates: parts.iter().map(|x| x.duplicates).sum(),
            jitter_ms: mean(parts.iter().map(|x| x.jitter_ms)),
        }
    }
}

impl UdpTotals {
    /// Several streams' totals as one; jitter is their mean. Integrity needs the
    /// senders' bytes and is filled in by the caller.
    pub fn sum(parts: &[UdpTotals]) -> Self {
        let expected = parts.iter().map(|x| x.expected).sum();
        let lost = parts.iter().map(|x| x.lost).sum();
        UdpTotals {
            expected,
            lost,
            lost_percent: percent(lost, expected),
            out_of_order: parts.iter().map(|x| x.out_of_order).sum(),
            duplicates: parts.iter().map(|x| x.duplicates).sum(),
            jitter_ms: mean(parts.iter().map(|x| x.jitter_ms)),
            integrity_percent: None,
            rcvbuf_drops: parts.iter().map(|x| x.rcvbuf_drops).sum(),
            foreign: parts.iter().map(|x| x.foreign).sum(),
        }
    }

    /// Counts loss against `sent`, the sender's own count, rather than the highest
    /// sequence number the receiver saw: the datagrams after the last one that reached
    /// it were lost too. Never lowers what the receiver counted.
    pub fn count_against(&mut self, sent: u64) {
        if sent > self.expected {
            self.lost += sent - self.expected;
            self.expected = sent;
            self.lost_percent = percent(self.lost, self.expected);
        }
    }
}

/// bits per second of `bytes` over `seconds` (0 for an empty period).
pub fn bps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

fn sender_totals(s: &StreamResults) -> SideTotals {
    let seconds = s.end_time - s.start_time;
    SideTotals {
        bytes: s.bytes,
        seconds,
        bits_per_second: bps(s.bytes, seconds),
        retransmits: u64::try_from(s.retransmits).ok(),
        dsack_dups: s.dsack_dups,
        reordering: s.reordering,
        packets: u64::try_from(s.packets).ok(),
        sw_retransmits: s.sw_retransmits,
        backoff_cuts: s.backoff_cuts,
        receiver_holds: s.receiver_holds,
        udp: None,
    }
}

fn receiver_totals(s: &StreamResults, udp: bool, sent: Option<u64>) -> SideTotals {
    let seconds = s.end_time - s.start_time;
    let udp = udp.then(|| {
        let expected = u64::try_from(s.packets).unwrap_or(0);
        let lost = u64::try_from(s.errors).unwrap_or(0);
        UdpTotals {
            expected,
            lost,
            lost_percent: percent(lost, expected),
            out_of_order: s.out_of_order.unwrap_or(0),
            duplicates: s.duplicates.unwrap_or(0),
            jitter_ms: s.jitter * 1000.0,
            // Never above 100 %: bytes beyond what the sender sent were not its.
            integrity_percent: sent
                .filter(|&b| b > 0)
                .map(|b| s.delivered_bytes.unwrap_or(s.bytes).min(b) as f64 * 100.0 / b as f64),
            rcvbuf_drops: s.rcvbuf_drops,
            foreign: s.foreign,
        }
    });
    SideTotals {
        bytes: s.bytes,
        seconds,
        bits_per_second: bps(s.bytes, seconds),
        udp,
        ..SideTotals::default()
    }
}

/// Joins the client's own results with the server's into per-stream and per-direction
/// totals. `directions` gives each local stream id's direction.
pub fn summarize(
    directions: &[(i64, StreamDirection)],
    udp: bool,
    local: &PeerResults,
    remote: Option<&PeerResults>,
    interrupted: bool,
) -> EndInfo {
    let find = |r: &PeerResults, id: i64| r.streams.iter().find(|s| s.id == id).cloned();
    let mut streams = Vec::new();
    for &(id, direction) in directions {
        let mine = find(local, id);
        let theirs = remote.and_then(|r| find(r, id));
        let (snd, rcv) = match direction {
            StreamDirection::Up => (mine, theirs),
            StreamDirection::Down => (theirs, mine),
        };
        let sent = snd.as_ref().map(|s| s.bytes);
        let server_socket = match direction {
            StreamDirection::Up => rcv.as_ref(),
            StreamDirection::Down => snd.as_ref(),
        }
        .and_then(|s| s.socket.clone());
        streams.push(EndStream {
            id,
            direction,
            sender: snd.as_ref().map(sender_totals),
            receiver: rcv.as_ref().map(|r| receiver_totals(r, udp, sent)),
            server_socket,
        });
    }
    let mut sums = Vec::new();
    for direction in [StreamDirection::Up, StreamDirection::Down] {
        let of_dir: Vec<&EndStream> = streams
            .iter()
            .filter(|s| s.direction == direction)
            .collect();
        if of_dir.is_empty() {
            continue;
        }
        let add = |pick: fn(&EndStream) -> Option<&SideTotals>| -> Option<SideTotals> {
            let parts: Vec<&SideTotals> = of_dir.iter().filter_map(|s| pick(s)).collect();
            if parts.len() != of_dir.len() {
                return None;
            }
            let bytes = parts.iter().map(|p| p.bytes).sum();
            let seconds = parts.iter().map(|p| p.seconds).fold(0.0, f64::max);
            let opt_sum = |f: fn(&SideTotals) -> Option<u64>| -> Option<u64> {
                parts.iter().map(|p| f(p)).sum::<Option<u64>>()
            };
            let udp = parts
                .iter()
                .map(|p| p.udp)
                .collect::<Option<Vec<UdpTotals>>>()
                .map(|u| UdpTotals::sum(&u));
            Some(SideTotals {
                bytes,
                seconds,
                bits_per_second: bps(bytes, seconds),
                retransmits: opt_sum(|p| p.retransmits),
                dsack_dups: opt_sum(|p| p.dsack_dups),
                reordering: opt_sum(|p| p.reordering),
                packets: opt_sum(|p| p.packets),
                sw_retransmits: opt_sum(|p| p.sw_retransmits),
                backoff_cuts: opt_sum(|p| p.backoff_cuts),
                receiver_holds: opt_sum(|p| p.receiver_holds),
                udp,
            })
        };
        let sender = add(|s| s.sender.as_ref());
        let mut receiver = add(|s| s.receiver.as_ref());
        if let (Some(snd), Some(rcv)) = (&sender, &mut receiver) {
            if let Some(u) = rcv.udp.as_mut() {
                let delivered: f64 = of_dir
                    .iter()
                    .filter_map(|s| {
                        let r = s.receiver.as_ref()?;
                        let pct = r.udp?.integrity_percent?;
                        Some(pct / 100.0 * s.sender.as_ref()?.bytes as f64)
                    })
                    .sum();
                u.integrity_percent = (snd.bytes > 0).then(|| delivered * 100.0 / snd.bytes as f64);
            }
        }
        sums.push(EndSum {
            direction,
            sender,
            receiver,
        });
    }
    let remote_cpu = remote.map_or((0.0, 0.0, 0.0), |r| {
        (r.cpu_util_total, r.cpu_util_user, r.cpu_util_system)
    });
    EndInfo {
        streams,
        sums,
        cpu: CpuInfo {
            local_total: local.cpu_util_total,
            local_user: local.cpu_util_user,
            local_system: local.cpu_util_system,
            remote_total: remote_cpu.0,
            remote_user: remote_cpu.1,
            remote_system: remote_cpu.2,
        },
        congestion_local: local.congestion_used.clone(),
        congestion_remote: remote.and_then(|r| r.congestion_used.clone()),
        interrupted,
        server_output: remote.and_then(|r| {
            r.server_output_json
                .clone()
                .map(ServerOutput::Json)
                .or_else(|| r.server_output_text.clone().map(ServerOutput::Text))
        }),
        failed_streams: Vec::new(),
        quic: None,
        mptcp: None,
        multicast: None,
    }
}

/// Retransmissions of a TCP test across loopback while lo steered no packets: lo queues
/// each packet on the CPU that sent it, so one flow's segments sent from two CPUs (the
/// sender's writes on its own, the sends its ACKs set off in the other's softirq) can
/// overtake each other, and the receiver's SACKs of the ones ahead look like loss to
/// the sender. Gone with both ends on one CPU, or with lo's packets steered (each flow
/// then queued on one CPU): docs/lab-notes/performance.md, "Retransmissions on loopback".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopbackReordering {
    /// Segments the test's TCP senders retransmitted.
    pub retransmits: u64,
    /// Of them, reported back as received twice (D-SACK); None when a sender does not
    /// say (iperf3). Some(0) only with reordering seen: D-SACKs still on their way at
    /// the end, or not sent.
    pub not_needed: Option<u64>,
    /// A steering mask (as `rps_cpus` takes it) of CPUs 0 … n−1, n the CPUs the client
    /// may use (any mask that is not zero keeps each flow on one CPU's queue).
    pub steer_all: String,
}

/// [`LoopbackReordering`] when `r` is one: TCP senders that retransmitted, to a loopback
/// address, with lo's receive queues unsteered as the client read them at the start —
/// and not when the senders said that none of it was needed (D-SACK) and that they saw
/// no reordering: that would be loss, which reordering does not explain. Nothing is
/// said where lo's masks were not recorded (a document from before they were, or a
/// kernel without RPS), or the CPU count is unknown.
pub fn loopback_reordering(r: &TestResult) -> Option<LoopbackReordering> {
    // QUIC's losses are its stack's, which neither remedy touches.
    if r.start.spec.protocol == crate::spec::Transport::Quic {
        return None;
    }
    let remote: std::net::SocketAddr = r.start.remote.parse().ok()?;
    if !remote.ip().to_canonical().is_loopback() {
        return None;
    }
    let lo = r.start.system.interfaces.iter().find(|i| i.name == "lo")?;
    let unsteered = |mask: &String| mask.chars().all(|c| c == '0' || c == ',');
    if lo.rps_cpus.is_empty() || !lo.rps_cpus.iter().all(unsteered) {
        return None;
    }
    let cpus = r.start.system.cpus.filter(|&n| n > 0)?;
    let senders: Vec<&SideTotals> = r
        .end
        .as_ref()?
        .sums
        .iter()
        .filter_map(|s| s.sender.as_ref())
        .collect();
    let retransmits = senders.iter().filter_map(|s| s.retransmits).sum::<u64>();
    let not_needed = senders.iter().map(|s| s.dsack_dups).sum::<Option<u64>>();
    let reordered = senders.iter().map(|s| s.reordering).sum::<Option<u64>>();
    if retransmits == 0 || (not_needed == Some(0) && reordered == Some(0)) {
        return None;
    }
    Some(LoopbackReordering {
        retransmits,
        not_needed,
        steer_all: every_cpu_mask(cpus),
    })
}

/// A mask of CPUs 0 … n−1 as sysfs writes CPU masks: hex, in comma-separated groups of
/// 32 bits, the highest first.
fn every_cpu_mask(n: u64) -> String {
    let full = n / 32;
    let rest = n % 32;
    let mut groups: Vec<String> = Vec::new();
    if rest > 0 {
        groups.push(format!("{:x}", (1u32 << rest) - 1));
    }
    groups.extend((0..full).map(|_| "ffffffff".to_string()));
    groups.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_masks_are_hex_in_groups_of_32_bits_the_highest_first() {
        assert_eq!(every_cpu_mask(1), "1");
        assert_eq!(every_cpu_mask(2), "3");
        assert_eq!(every_cpu_mask(31), "7fffffff");
        assert_eq!(every_cpu_mask(32), "ffffffff");
        assert_eq!(every_cpu_mask(33), "1,ffffffff");
        assert_eq!(every_cpu_mask(72), "ff,ffffffff,ffffffff");
    }

    fn stream(id: i64, bytes: u64, secs: f64) -> StreamResults {
        StreamResults {
            id,
            bytes,
            end_time: secs,
            retransmits: -1,
            ..StreamResults::default()
        }
    }

    #[test]
    fn joins_sender_and_receiver_by_id() {
        let local = PeerResults {
            streams: vec![stream(1, 1000, 2.0), stream(3, 500, 2.0)],
            sender_has_retransmits: 1,
            ..PeerResults::default()
        };
        let remote = PeerResults {
            streams: vec![stream(3, 500, 2.0), stream(1, 990, 2.5)],
            ..PeerResults::default()
        };
        let dirs = [(1, StreamDirection::Up), (3, StreamDirection::Down)];
        let end = summarize(&dirs, false, &local, Some(&remote), false);
        let up = &end.streams[0];
        assert_eq!(up.sender.as_ref().unwrap().bytes, 1000);
        assert_eq!(up.receiver.as_ref().unwrap().bytes, 990);
        assert_eq!(
            up.receiver.as_ref().unwrap().bits_per_second,
            990.0 * 8.0 / 2.5
        );
        assert_eq!(end.sums.len(), 2);
        assert_eq!(end.sums[1].direction, StreamDirection::Down);
    }

    #[test]
    fn udp_integrity_is_delivered_over_sent() {
        let mut rcv = stream(1, 900, 1.0);
        rcv.packets = 10;
        rcv.errors = 1;
        rcv.delivered_bytes = Some(900);
        rcv.duplicates = Some(0);
        let local = PeerResults {
            streams: vec![stream(1, 1000, 1.0)],
            ..PeerResults::default()
        };
        let remote = PeerResults {
            streams: vec![rcv],
            ..PeerResults::default()
        };
        let end = summarize(
            &[(1, StreamDirection::Up)],
            true,
            &local,
            Some(&remote),
            false,
        );
        let u = end.sums[0].receiver.as_ref().unwrap().udp.unwrap();
        assert_eq!((u.expected, u.lost), (10, 1));
        assert!((u.lost_percent - 10.0).abs() < 1e-9);
        assert!((u.integrity_percent.unwrap() - 90.0).abs() < 1e-9);
    }

    #[test]
    fn a_receiver_counted_against_the_senders_count_loses_the_tail_too() {
        // Saw up to 90 of 100 sent, 5 lost among them: the last 10 were lost as well.
        let mut u = UdpTotals {
            expected: 90,
            lost: 5,
            lost_percent: percent(5, 90),
            ..UdpTotals::default()
        };
        u.count_against(100);
        assert_eq!((u.expected, u.lost), (100, 15));
        assert!((u.lost_percent - 15.0).abs() < 1e-9);
        // A sender's count below what the receiver saw changes nothing.
        u.count_against(80);
        assert_eq!((u.expected, u.lost), (100, 15));
    }

    #[test]
    fn udp_interval_sums_add_counts_and_average_jitter() {
        let a = UdpInterval::from_receiver(10, 2, 0, 1, 1000.0);
        assert_eq!(a.expected, 11);
        let b = UdpInterval {
            packets: 9,
            expected: 9,
            jitter_ms: 3.0,
            ..UdpInterval::default()
        };
        let s = UdpInterval::sum(&[a, b]);
        assert_eq!(
            (s.packets, s.expected, s.lost, s.duplicates),
            (19, 20, 2, 1)
        );
        assert!((s.lost_percent - 10.0).abs() < 1e-9);
        assert!((s.jitter_ms - 2.0).abs() < 1e-9);
        assert_eq!(percent(1, 0), 0.0);
    }

    #[test]
    fn missing_remote_leaves_receiver_unknown() {
        let local = PeerResults {
            streams: vec![stream(1, 10, 1.0)],
            ..PeerResults::default()
        };
        let end = summarize(&[(1, StreamDirection::Up)], false, &local, None, true);
        assert!(end.streams[0].receiver.is_none());
        assert!(end.sums[0].receiver.is_none());
        assert!(end.interrupted);
    }
}
