//! What a client is asked to measure: one validated [`TestSpec`].

use std::time::Duration;

use flowlab_proto::params::{FLOWLAB_EXT_VERSION, FlowlabParams, Mode, Protocol, TestParams};
use serde::{Deserialize, Serialize};

/// The transport a test measures: TCP or UDP, run over iperf3's control protocol (the
/// wire's [`Protocol`]), or QUIC's performance protocol (`quic_perf`), which that
/// protocol never carries: a QUIC test is flowlab's alone, without a control connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    Tcp,
    Udp,
    Quic,
}

impl Transport {
    /// The protocol iperf3's parameters carry for it; `None` for QUIC.
    pub fn wire(self) -> Option<Protocol> {
        match self {
            Transport::Tcp => Some(Protocol::Tcp),
            Transport::Udp => Some(Protocol::Udp),
            Transport::Quic => None,
        }
    }
}

/// Which way data flows, seen from the client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Client sends (upload).
    #[default]
    Forward,
    /// Server sends (download), `-R`.
    Reverse,
    /// Both at once on separate streams, `--bidir`.
    Bidir,
}

/// How much data a test moves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Amount {
    /// For this many seconds (after the omitted ones), fractions allowed (`-t 1.5`).
    Seconds(f64),
    /// Exactly this many bytes in total per direction, over all streams.
    Bytes(u64),
    /// This many writes (TCP) or datagrams (UDP) per direction, over all streams.
    Blocks(u64),
}

/// Default bytes per TCP write.
pub const DEFAULT_TCP_LEN: usize = 128 * 1024;
/// Default bytes per UDP datagram: fits a 1500-byte Ethernet MTU with IPv4 and UDP
/// headers to spare.
pub const DEFAULT_UDP_LEN: usize = 1460;
/// Largest UDP datagram payload over IPv4.
pub const MAX_UDP_LEN: usize = 65_507;
/// Largest socket buffer that can be asked for (`-w`, `--recv-window`): the kernel takes
/// an `int` (and grants at most `net.core.wmem_max`/`rmem_max` unless forced), so 2 GiB
/// and more would wrap around to a few KiB.
pub const MAX_WINDOW: u64 = i32::MAX as u64;

/// iperf3's pacing timer when none is given, µs.
pub const DEFAULT_PACING_TIMER_US: u64 = 1000;

/// A throughput test, as the client runs it, and as its result records it
/// ([`crate::result::StartInfo::spec`]).
///
/// Read back from a result, a field that an older flowlab did not write takes the value
/// that means what that flowlab did: off, none or zero (a document without
/// `udp_window` is of a build that never kept within a receiver's window). The fields of
/// the first documents (`tests/fixtures/tcp-p2.json`) are required.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestSpec {
    pub host: String,
    pub port: u16,
    pub protocol: Transport,
    pub mode: Mode,
    /// Bytes per write or datagram.
    pub len: usize,
    pub amount: Amount,
    /// Interval report period; `None` for none.
    #[serde(serialize_with = "opt_secs", deserialize_with = "de_opt_secs", default)]
    pub interval: Option<Duration>,
    pub parallel: u32,
    pub direction: Direction,
    /// Target bit rate per stream; 0 = unlimited.
    pub bitrate: u64,
    /// Whole seconds at the start not counted.
    pub omit: u64,
    pub congestion: Option<String>,
    /// Socket buffer size asked for on both ends (0: kernel default).
    pub window: u64,
    pub mss: u32,
    pub nodelay: bool,
    pub zerocopy: bool,
    #[serde(serialize_with = "secs", deserialize_with = "de_secs")]
    pub connect_timeout: Duration,
    /// Stop-and-wait over UDP: retransmission timeout.
    #[serde(serialize_with = "secs", deserialize_with = "de_secs")]
    pub rto: Duration,
    pub title: Option<String>,
    /// UDP at unlimited rate against a flowlab peer: back off when the receiving socket
    /// overflows (`--no-backoff` clears it).
    pub udp_backoff: bool,
    /// UDP at unlimited rate against a flowlab peer, with backoff: keep within the
    /// receiver's window (`--no-window` clears it).
    #[serde(default)]
    pub udp_window: bool,
    /// `--trace`: sample TCP_INFO of every TCP stream on both ends this often.
    #[serde(serialize_with = "opt_secs", deserialize_with = "de_opt_secs", default)]
    pub trace: Option<Duration>,
    /// `--latency`: UDP probes to the server's echo this often, before and beside the load.
    #[serde(serialize_with = "opt_secs", deserialize_with = "de_opt_secs", default)]
    pub latency: Option<Duration>,
    /// Socket buffer of the receiving end of each stream (0: as `window`).
    pub recv_window: u64,
    /// Congestion control of the receiving end of each stream.
    pub recv_congestion: Option<String>,
    /// `-A`: the CPU this end's data streams run on, and the server's.
    #[serde(default, skip_serializing_if = "Affinity::is_none")]
    pub affinity: Affinity,
    /// `-S`/`--dscp`: the IP type of service of the data streams (0: not set).
    #[serde(default, skip_serializing_if = "is_zero_u8")]
    pub tos: u8,
    /// `-4`/`-6`: only the server's addresses of this family are tried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<IpFamily>,
    /// `--extra-data`: a string recorded with the result, and sent to the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_data: Option<String>,
    /// `--fq-rate`: the most each data socket sends, bits/s (SO_MAX_PACING_RATE, both
    /// ends; 0: not set).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub fq_rate: u64,
    /// `--dont-fragment`: UDP datagrams with the IPv4 DF bit, both ends.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dont_fragment: bool,
    /// `--repeating-payload`: senders fill their buffers with iperf3's repeating digits.
    #[serde(default, skip_serializing_if = "is_false")]
    pub repeating_payload: bool,
    /// `--get-server-output`: the server's own output for the test comes back with its
    /// results.
    #[serde(default, skip_serializing_if = "is_false")]
    pub get_server_output: bool,
    /// `--skip-rx-copy`: receivers, both ends, discard what they read in the kernel
    /// (MSG_TRUNC) instead of copying it out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub skip_rx_copy: bool,
    /// `--quic-connections`: a QUIC test's streams each on a connection of their own
    /// (else all on one).
    #[serde(default, skip_serializing_if = "is_false")]
    pub quic_connection_each: bool,
    /// `-m/--mptcp`: the data streams and the control connection are MPTCP connections
    /// (iperf3's control connection stays TCP).
    #[serde(default, skip_serializing_if = "is_false")]
    pub mptcp: bool,
    /// `--receivers`: `host` is a multicast group, to which the client sends one UDP
    /// stream, and these flowlab servers receive it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<MulticastSpec>,
    /// `--cntl-ka`: TCP keepalive on the client's control connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_keepalive: Option<Keepalive>,
    /// `-b RATE/BURST`: blocks sent back to back at the target rate (0: paced block by
    /// block).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub burst: u64,
    /// `--pacing-timer`, µs: iperf3's pacing granularity (see the engine's `burst_bytes`);
    /// absent: iperf3's default, 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_timer_us: Option<u64>,
    /// `-L`: the IPv6 flow label of the data streams (20 bits; 0: none).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub flowlabel: u32,
    /// `-F`: the file the client sends (its content, once, is the test's data) or, with
    /// `-R`, writes what it receives to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<std::path::PathBuf>,
    /// `-B`: the local address of the client's connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<std::net::IpAddr>,
    /// `--cport`: data stream `i` (client-send streams first) leaves from this port + `i`
    /// (0: any port).
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub cport: u16,
    /// `--bind-dev`, or `HOST%DEV`: the client's connections are bound to this network
    /// device (SO_BINDTODEVICE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_dev: Option<String>,
    /// `--snd-timeout`: a TCP data stream whose data goes unacknowledged this long fails
    /// (TCP_USER_TIMEOUT on the client's sockets).
    #[serde(
        serialize_with = "opt_secs",
        deserialize_with = "de_opt_secs",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub snd_timeout: Option<Duration>,
    /// `--rcv-timeout`: a test whose receiving streams get nothing this long fails.
    #[serde(
        serialize_with = "opt_secs",
        deserialize_with = "de_opt_secs",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub rcv_timeout: Option<Duration>,
    /// The rate the path can carry each way, where the caller knows it (the binary does
    /// inside a flowlab topology): what `--trace`'s advice sizes windows for.
    #[serde(default, skip_serializing_if = "PathRates::is_empty")]
    pub path_rates: PathRates,
    /// iperf3 authentication (`--username`): never in a result, never printed.
    #[serde(skip)]
    pub credentials: Option<Credentials>,
}

/// A multicast test: the group is the spec's `host` (an address), its port the spec's
/// `port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MulticastSpec {
    /// The flowlab servers that join the group and report what reached them.
    pub receivers: Vec<Receiver>,
    /// The datagrams' TTL (IPv4) or hop limit (IPv6): how many routers they may cross
    /// (1: the sender's own link).
    pub ttl: u32,
    /// Receivers join for the client's address only (source-specific multicast).
    #[serde(default, skip_serializing_if = "is_false")]
    pub source_specific: bool,
}

/// A multicast receiver's control address: a name or address, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receiver {
    pub host: String,
    pub port: u16,
}

impl Receiver {
    /// `HOST`, `HOST:PORT`, an IPv6 address, or `[IPV6]:PORT`; `port` where none is given.
    pub fn parse(text: &str, port: u16) -> Result<Receiver, String> {
        let bad = || format!("'{text}': give HOST, HOST:PORT or [IPV6]:PORT");
        let (host, given) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
            }
        } else {
            match text.split_once(':') {
                // Two colons or more: an IPv6 address alone.
                Some((_, rest)) if rest.contains(':') => (text, None),
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        let port = match given {
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| format!("'{text}': the port must be 1 to 65535"))?,
            None => port,
        };
        Ok(Receiver {
            host: host.to_string(),
            port,
        })
    }
}

impl std::fmt::Display for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// TCP keepalive on a control connection (iperf3's `--cntl-ka[=IDLE/INTERVAL/COUNT]`):
/// each value the kernel's default where not given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keepalive {
    /// Seconds idle before the first probe (TCP_KEEPIDLE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<u32>,
    /// Seconds between probes (TCP_KEEPINTVL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<u32>,
    /// Probes unanswered before the connection is dropped (TCP_KEEPCNT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

impl Keepalive {
    /// Reads iperf3's `IDLE/INTERVAL/COUNT`, any part empty or left off (`10`, `10/2`,
    /// `/2/3`, ``).
    pub fn parse(s: &str) -> Result<Keepalive, String> {
        let mut parts = s.split('/');
        let mut next = |what: &str| -> Result<Option<u32>, String> {
            match parts.next().map(str::trim) {
                None | Some("") => Ok(None),
                Some(v) => match v.parse::<u32>() {
                    Ok(0) | Err(_) => Err(format!(
                        "'{v}' is not a {what}: IDLE/INTERVAL/COUNT takes whole numbers above 0"
                    )),
                    Ok(n) => Ok(Some(n)),
                },
            }
        };
        let ka = Keepalive {
            idle: next("number of seconds idle")?,
            interval: next("number of seconds between probes")?,
            count: next("count of probes")?,
        };
        if parts.next().is_some() {
            return Err(format!("'{s}' has more than IDLE/INTERVAL/COUNT"));
        }
        Ok(ka)
    }

    /// iperf3's rule: the idle time must be longer than all the probes take (interval ×
    /// count), with the kernel's values for what was not given.
    pub fn check(&self, interval: u32, count: u32) -> Result<(), String> {
        match self.idle {
            Some(idle) if u64::from(idle) <= u64::from(interval) * u64::from(count) => {
                Err(format!(
                    "the idle time ({idle} s) must be longer than the probes take \
                 ({interval} s × {count})"
                ))
            }
            _ => Ok(()),
        }
    }
}

/// What a client authenticates with, as iperf3's `--username` and
/// `--rsa-public-key-path`: the token is made from these when the test starts.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: String,
    /// The server's RSA public key, PEM.
    pub public_key_pem: String,
    /// PKCS#1 v1.5 padding (iperf3 ≤ 3.16) instead of RSA-OAEP.
    pub pkcs1: bool,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"(hidden)")
            .field("pkcs1", &self.pkcs1)
            .finish()
    }
}

fn is_zero_u8(v: &u8) -> bool {
    *v == 0
}

/// An address family (`-4`, `-6`, as iperf3's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpFamily {
    Ipv4,
    Ipv6,
}

impl IpFamily {
    /// Whether `a` is of this family.
    pub fn holds(self, a: &std::net::SocketAddr) -> bool {
        match self {
            IpFamily::Ipv4 => a.is_ipv4(),
            IpFamily::Ipv6 => a.is_ipv6(),
        }
    }

    /// `IPv4` or `IPv6`, as messages say it.
    pub fn name(self) -> &'static str {
        match self {
            IpFamily::Ipv4 => "IPv4",
            IpFamily::Ipv6 => "IPv6",
        }
    }
}

/// `-A CPU[,CPU]` (iperf3's): the CPU the client's data streams run on and, after the
/// comma, the server's. Each stream's thread pins itself before it moves a byte.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Affinity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<usize>,
}

impl Affinity {
    pub fn is_none(&self) -> bool {
        self.client.is_none() && self.server.is_none()
    }
}

impl TestSpec {
    /// A default TCP test of `host` (the values `flowlab test HOST` uses).
    pub fn new(host: impl Into<String>) -> Self {
        TestSpec {
            host: host.into(),
            port: flowlab_proto::DEFAULT_PORT,
            protocol: Transport::Tcp,
            mode: Mode::Streaming,
            len: DEFAULT_TCP_LEN,
            amount: Amount::Seconds(10.0),
            interval: Some(Duration::from_secs(1)),
            parallel: 1,
            direction: Direction::Forward,
            bitrate: 0,
            omit: 0,
            congestion: None,
            window: 0,
            mss: 0,
            nodelay: false,
            zerocopy: false,
            connect_timeout: Duration::from_secs(5),
            rto: Duration::from_secs(1),
            title: None,
            udp_backoff: true,
            udp_window: true,
            trace: None,
            latency: None,
            recv_window: 0,
            recv_congestion: None,
            affinity: Affinity::default(),
            family: None,
            tos: 0,
            extra_data: None,
            fq_rate: 0,
            dont_fragment: false,
            repeating_payload: false,
            get_server_output: false,
            skip_rx_copy: false,
            quic_connection_each: false,
            mptcp: false,
            multicast: None,
            control_keepalive: None,
            burst: 0,
            pacing_timer_us: None,
            file: None,
            flowlabel: 0,
            bind: None,
            cport: 0,
            bind_dev: None,
            snd_timeout: None,
            rcv_timeout: None,
            path_rates: PathRates::default(),
            credentials: None,
        }
    }

    /// What the diagnosis sizes windows for: the path's rate each way where known, else
    /// the `-b` target of all the streams that go that way.
    pub fn window_rates(&self) -> PathRates {
        let target = (self.bitrate > 0).then(|| PathRate {
            bps: self.bitrate.saturating_mul(u64::from(self.parallel.max(1))),
            source: if self.parallel > 1 {
                format!("the -b target × {} streams", self.parallel)
            } else {
                "the -b target".into()
            },
        });
        let (up, down) = match self.direction {
            Direction::Forward => (true, false),
            Direction::Reverse => (false, true),
            Direction::Bidir => (true, true),
        };
        PathRates {
            up: self.path_rates.up.clone().or(target.clone().filter(|_| up)),
            down: self.path_rates.down.clone().or(target.filter(|_| down)),
        }
    }

    /// Whether the sender asks for receiver-overflow backoff: UDP streaming at unlimited
    /// rate, unless turned off.
    pub fn wants_backoff(&self) -> bool {
        // A group's receivers cannot report to its sender (it sends to the group).
        self.multicast.is_none()
            && self.udp_backoff
            && self.protocol == Transport::Udp
            && self.mode == Mode::Streaming
            && self.bitrate == 0
    }

    /// Whether the sender keeps within the receiver's window: UDP streaming, paced or at
    /// unlimited rate with backoff, unless turned off (`--no-window`).
    pub fn wants_window(&self) -> bool {
        self.multicast.is_none()
            && self.udp_window
            && self.protocol == Transport::Udp
            && self.mode == Mode::Streaming
            && (self.bitrate > 0 || self.wants_backoff())
    }

    /// The flowlab extensions this test cannot run without.
    pub fn required_features(&self) -> Vec<String> {
        let mut f = Vec::new();
        if self.mode == Mode::StopAndWait {
            f.push(flowlab_proto::hello::feature::STOP_AND_WAIT.to_string());
        }
        if self.recv_window > 0 || self.recv_congestion.is_some() {
            f.push(flowlab_proto::hello::feature::RECEIVER_TUNING.to_string());
        }
        if self.multicast.is_some() {
            f.push(flowlab_proto::hello::feature::MULTICAST.to_string());
        }
        f
    }

    /// The parameters sent to the server.
    pub fn to_params(&self) -> TestParams {
        let (time, num, blockcount) = match self.amount {
            // The wire (iperf3's) takes whole seconds: the server's limit is the next
            // one up, and the client ends the test at the time asked.
            Amount::Seconds(s) => (s.ceil() as u64, 0, 0),
            Amount::Bytes(b) => (0, b, 0),
            Amount::Blocks(k) => (0, 0, k),
        };
        TestParams {
            tcp: (self.protocol == Transport::Tcp).then_some(true),
            udp: (self.protocol == Transport::Udp).then_some(true),
            sctp: None,
            omit: self.omit,
            server_affinity: self.affinity.server.map(|c| c as u64),
            time,
            num,
            blockcount,
            mss: u64::from(self.mss),
            tos: u64::from(self.tos),
            nodelay: self.nodelay,
            parallel: u64::from(self.parallel),
            reverse: self.direction == Direction::Reverse,
            bidirectional: self.direction == Direction::Bidir,
            window: self.window,
            len: self.len as u64,
            bandwidth: self.bitrate,
            pacing_timer: self.pacing_timer_us.unwrap_or(DEFAULT_PACING_TIMER_US),
            burst: self.burst,
            flowlabel: u64::from(self.flowlabel),
            congestion: self.congestion.clone(),
            title: self.title.clone(),
            extra_data: self.extra_data.clone(),
            fq_rate: self.fq_rate,
            dont_fragment: self.dont_fragment,
            repeating_payload: self.repeating_payload,
            get_server_output: self.get_server_output,
            udp_counters_64bit: self.protocol == Transport::Udp,
            zerocopy: self.zerocopy,
            mptcp: self.mptcp,
            skip_rx_copy: self.skip_rx_copy,
            // The offloads as the server chooses them (flowlab's: on where the kernel
            // has them).
            gso: None,
            gso_dg_size: 0,
            gso_bf_size: 0,
            gro: None,
            gro_bf_size: 0,
            client_version: Some(format!("flowlab {}", env!("CARGO_PKG_VERSION"))),
            // Made from `credentials` by the engine when the test starts (it needs the
            // clock and randomness).
            authtoken: None,
            flowlab: Some(FlowlabParams {
                version: FLOWLAB_EXT_VERSION,
                mode: self.mode,
                rto_ms: (self.mode == Mode::StopAndWait).then_some(self.rto.as_millis() as u64),
                require: self.required_features(),
                udp_backoff: self.wants_backoff(),
                udp_window: self.wants_window(),
                trace_us: self.trace.map(|d| d.as_micros() as u64),
                recv_window: (self.recv_window > 0).then_some(self.recv_window),
                recv_congestion: self.recv_congestion.clone(),
                // The engine fills it in: it needs the sending socket's address.
                multicast: None,
            }),
        }
    }
}

/// Durations appear in JSON as seconds.
fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn opt_secs<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_f64(d.as_secs_f64()),
        None => s.serialize_none(),
    }
}

/// Seconds read back as a duration (a negative or endless number is refused).
fn de_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = f64::deserialize(d)?;
    Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom)
}

fn de_opt_secs<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<f64>::deserialize(d)?
        .map(|s| Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom))
        .transpose()
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u16(n: &u16) -> bool {
    *n == 0
}

/// Which way a stream's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamDirection {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

impl StreamDirection {
    /// `up` or `down`, as the JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamDirection::Up => "up",
            StreamDirection::Down => "down",
        }
    }
}

/// The rate a path can carry, as far as it is known, and how it is known: what the
/// advice sizes a window for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathRate {
    pub bps: u64,
    /// Where the rate comes from, as the advice words it: "the bottleneck of topology
    /// port, h1 → h4", "the -b target".
    pub source: String,
}

/// The path's rate in each direction, where known.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathRates {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub up: Option<PathRate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<PathRate>,
}

impl PathRates {
    pub fn is_empty(&self) -> bool {
        self.up.is_none() && self.down.is_none()
    }

    pub fn of(&self, d: StreamDirection) -> Option<&PathRate> {
        match d {
            StreamDirection::Up => self.up.as_ref(),
            StreamDirection::Down => self.down.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receiver_is_a_host_with_or_without_its_port() {
        let r = |t: &str| Receiver::parse(t, 5201).map(|r| (r.host, r.port));
        assert_eq!(r("h1"), Ok(("h1".into(), 5201)));
        assert_eq!(r("10.0.0.2:6000"), Ok(("10.0.0.2".into(), 6000)));
        assert_eq!(r("fd00::2"), Ok(("fd00::2".into(), 5201)));
        assert_eq!(r("[fd00::2]"), Ok(("fd00::2".into(), 5201)));
        assert_eq!(r("[fd00::2]:6000"), Ok(("fd00::2".into(), 6000)));
        for bad in ["", ":6000", "h1:0", "h1:x", "[fd00::2", "[fd00::2]6000"] {
            assert!(r(bad).is_err(), "{bad}");
        }
        let shown = Receiver::parse("[fd00::2]:6000", 1).unwrap().to_string();
        assert_eq!(shown, "[fd00::2]:6000");
    }
}
