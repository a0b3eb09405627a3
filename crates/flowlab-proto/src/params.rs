//! The test parameters a client sends after [`crate::State::ParamExchange`].
//!
//! Keys are iperf3's, so a stock iperf3 client's parameters parse here and flowlab's
//! parameters parse in a stock iperf3 server (which ignores keys it does not know, such as
//! the `flowlab` object). Numbers are read leniently — any JSON number, or a boolean for
//! flags — because iperf3 prints large integers in floating-point notation.

use serde::{Deserialize, Serialize};

use crate::lenient::{flag, num, opt_flag, opt_num};

/// Parameters of one test, as exchanged on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TestParams {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_flag"
    )]
    pub tcp: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_flag"
    )]
    pub udp: Option<bool>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_flag"
    )]
    pub sctp: Option<bool>,
    /// Seconds at the start whose data is not counted.
    #[serde(default, deserialize_with = "num")]
    pub omit: u64,
    /// The CPU the server's side of the test runs on (iperf3's `-A n,m`: m).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_num"
    )]
    pub server_affinity: Option<u64>,
    /// Test length in seconds (0 when `num` or `blockcount` bounds the test).
    #[serde(default, deserialize_with = "num")]
    pub time: u64,
    /// Bytes to send in total, over all streams (0: not bounded by bytes).
    #[serde(default, deserialize_with = "num")]
    pub num: u64,
    /// Blocks to send in total (0: not bounded by blocks).
    #[serde(default, deserialize_with = "num")]
    pub blockcount: u64,
    #[serde(
        rename = "MSS",
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "num"
    )]
    pub mss: u64,
    /// The IP type of service (iperf3's `-S`/`--dscp`) of the data streams, both ends;
    /// 0: not set.
    #[serde(
        rename = "TOS",
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "num"
    )]
    pub tos: u64,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub nodelay: bool,
    #[serde(default = "one", deserialize_with = "num")]
    pub parallel: u64,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub reverse: bool,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub bidirectional: bool,
    /// Socket buffer size in bytes (SO_SNDBUF and SO_RCVBUF).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub window: u64,
    /// Bytes per write (TCP) or per datagram (UDP).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub len: u64,
    /// Target bit rate per stream, bits/s (0: unlimited).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub bandwidth: u64,
    /// iperf3's pacing timer, µs (its default 1000).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub pacing_timer: u64,
    /// iperf3's `-L`: the IPv6 flow label of the client's data streams (0: none).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub flowlabel: u64,
    /// iperf3's `-b RATE/BURST`: blocks sent back to back (0: none).
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub burst: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// iperf3's `--extra-data`: a string both ends put in their JSON output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_data: Option<String>,
    /// iperf3's `--fq-rate`: the most a data socket sends, bits/s (SO_MAX_PACING_RATE);
    /// 0: not set.
    #[serde(
        rename = "fqrate",
        default,
        skip_serializing_if = "is_zero",
        deserialize_with = "num"
    )]
    pub fq_rate: u64,
    /// iperf3's `--dont-fragment`: UDP datagrams leave with the IPv4 DF bit set (path MTU
    /// discovery), so one larger than the path fails rather than being fragmented.
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub dont_fragment: bool,
    /// iperf3's `--repeating-payload`: senders fill their buffers with iperf3's repeating
    /// digits.
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub repeating_payload: bool,
    /// The client wants the server's own output for the test in the results
    /// (`server_output_text`, or `server_output_json` from a server printing JSON).
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub get_server_output: bool,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub udp_counters_64bit: bool,
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub zerocopy: bool,
    /// iperf3 3.19's `-m`/`--mptcp`: the data streams are MPTCP connections.
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub mptcp: bool,
    /// iperf3 3.19's `--skip-rx-copy`: receivers discard what they read with MSG_TRUNC
    /// instead of copying it out of the kernel.
    #[serde(default, skip_serializing_if = "is_false", deserialize_with = "flag")]
    pub skip_rx_copy: bool,
    /// iperf3 3.21's UDP segmentation offload: 1 when the client was given `--gsro`, 0
    /// when not (a 3.21 client sends it in every UDP test), absent from older clients.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_flag"
    )]
    pub gso: Option<bool>,
    /// The datagram each GSO send is cut into, bytes (a 3.21 client: `len`); 0: not said.
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub gso_dg_size: u64,
    /// The buffer a GSO send hands the kernel at once, bytes; 0: not said.
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub gso_bf_size: u64,
    /// iperf3 3.21's UDP receive offload, as `gso`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "opt_flag"
    )]
    pub gro: Option<bool>,
    /// The buffer a GRO read fills, bytes; 0: not said.
    #[serde(default, skip_serializing_if = "is_zero", deserialize_with = "num")]
    pub gro_bf_size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_version: Option<String>,
    /// iperf3's authentication token (see [`crate::auth`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authtoken: Option<String>,
    /// flowlab's extensions; present only when the client is flowlab.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flowlab: Option<FlowlabParams>,
}

/// The transport a test's parameters ask for: iperf3's control protocol carries TCP and
/// UDP tests (and SCTP, which flowlab does not speak).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl TestParams {
    /// The protocol asked for, or `None` for one flowlab does not speak (SCTP, or none).
    pub fn protocol(&self) -> Option<Protocol> {
        match (self.tcp, self.udp, self.sctp) {
            (_, _, Some(true)) => None,
            (_, Some(true), _) => Some(Protocol::Udp),
            (Some(true), _, _) => Some(Protocol::Tcp),
            _ => None,
        }
    }

    /// Data streams the test opens: `parallel`, doubled for bidirectional tests.
    pub fn stream_count(&self) -> u64 {
        if self.bidirectional {
            self.parallel * 2
        } else {
            self.parallel
        }
    }
}

/// How data moves on each stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Write as fast as allowed, never waiting for each message's acknowledgement (UDP
    /// between flowlab ends still keeps within the receiver's window).
    #[default]
    Streaming,
    /// Each message waits for the receiver's acknowledgement before the next.
    StopAndWait,
}

/// flowlab's extensions to the parameters, under the key `flowlab`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FlowlabParams {
    /// Version of flowlab's extension protocol the client speaks.
    pub version: u32,
    #[serde(default)]
    pub mode: Mode,
    /// Stop-and-wait over UDP: retransmission timeout in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rto_ms: Option<u64>,
    /// Extensions the client requires; the server refuses the test if it lacks one.
    #[serde(default)]
    pub require: Vec<String>,
    /// UDP at unlimited rate: receivers send `udp::Overflow` and senders back off on it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub udp_backoff: bool,
    /// UDP streaming (at unlimited rate, or paced where the server offers
    /// `udp-window-paced`): receivers send `udp::Progress` and senders keep within the
    /// window it gives.
    #[serde(default, skip_serializing_if = "is_false")]
    pub udp_window: bool,
    /// `--trace`: sample TCP_INFO of every TCP stream this often, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_us: Option<u64>,
    /// Socket buffer (SO_RCVBUF) of the receiving end of each TCP stream, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_window: Option<u64>,
    /// Congestion control of the receiving end of each TCP stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recv_congestion: Option<String>,
    /// The client sends one UDP stream to a multicast group, and this server is one of
    /// its receivers: it joins the group for the test instead of opening a stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multicast: Option<Multicast>,
}

/// A multicast test as a receiver sees it: where the stream goes and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Multicast {
    /// The group and port the client sends to.
    pub group: std::net::SocketAddr,
    /// The client's sending socket: the only source a receiver takes datagrams from.
    pub source: std::net::SocketAddr,
    /// Join the group for this source only (source-specific multicast, IGMPv3/MLDv2);
    /// otherwise for any source.
    #[serde(default, skip_serializing_if = "is_false")]
    pub source_specific: bool,
}

/// Current version of flowlab's extension protocol.
pub const FLOWLAB_EXT_VERSION: u32 = 1;

/// The most parallel streams a test may ask for (`-P`), as iperf3 allows: a client
/// refuses more, a server refuses a test that asks for more.
pub const MAX_PARALLEL: u64 = 128;

fn one() -> u64 {
    1
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_false(v: &bool) -> bool {
    !*v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    /// What a stock iperf3 3.12 client sends for `iperf3 -c host -u -b 10G -P 4 -R`.
    const IPERF3_UDP: &str = r#"{"udp":true,"omit":0,"time":10,"num":0,"blockcount":0,
        "parallel":4,"reverse":true,"len":1460,"bandwidth":1e+10,"pacing_timer":1000,
        "client_version":"3.12"}"#;

    #[test]
    fn parses_stock_iperf3_parameters() {
        let p: TestParams = frame::decode(IPERF3_UDP.as_bytes()).unwrap();
        assert_eq!(p.protocol(), Some(Protocol::Udp));
        assert_eq!(p.bandwidth, 10_000_000_000);
        assert_eq!(p.parallel, 4);
        assert!(p.reverse);
        assert_eq!(p.stream_count(), 4);
        assert_eq!(p.flowlab, None);
    }

    #[test]
    fn flags_accept_numbers_and_unknown_keys_are_ignored() {
        let p: TestParams = frame::decode(
            br#"{"tcp":true,"time":1,"parallel":2,"bidirectional":1,"get_server_output":1,
                "udp_counters_64bit":1,"authtoken":"xyz","gso":1}"#,
        )
        .unwrap();
        assert!(p.bidirectional && p.get_server_output && p.udp_counters_64bit);
        assert_eq!(p.stream_count(), 4);
    }

    #[test]
    fn refuses_negative_and_mistyped_numbers() {
        assert!(frame::decode::<TestParams>(br#"{"tcp":true,"time":-1}"#).is_err());
        assert!(frame::decode::<TestParams>(br#"{"tcp":true,"parallel":"4"}"#).is_err());
        assert!(frame::decode::<TestParams>(br#"{"tcp":true,"reverse":"yes"}"#).is_err());
    }

    #[test]
    fn protocol_needs_tcp_or_udp() {
        let none = TestParams::default();
        assert_eq!(none.protocol(), None);
        let sctp = TestParams {
            sctp: Some(true),
            ..TestParams::default()
        };
        assert_eq!(sctp.protocol(), None);
    }

    #[test]
    fn flowlab_extension_round_trips() {
        let p = TestParams {
            tcp: Some(true),
            time: 5,
            parallel: 1,
            flowlab: Some(FlowlabParams {
                version: FLOWLAB_EXT_VERSION,
                mode: Mode::StopAndWait,
                rto_ms: Some(250),
                require: vec!["stop-and-wait".into()],
                udp_backoff: false,
                udp_window: false,
                trace_us: Some(10_000),
                recv_window: Some(65_536),
                recv_congestion: Some("reno".into()),
                multicast: Some(Multicast {
                    group: "239.255.1.2:5201".parse().unwrap(),
                    source: "10.0.1.2:40000".parse().unwrap(),
                    source_specific: true,
                }),
            }),
            ..TestParams::default()
        };
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains(r#""mode":"stop-and-wait""#), "{json}");
        assert!(
            json.contains(r#""group":"239.255.1.2:5201""#),
            "addresses are written as text: {json}"
        );
        assert!(!json.contains("reverse"), "unset flags are omitted: {json}");
        let back: TestParams = frame::decode(json.as_bytes()).unwrap();
        assert_eq!(back, p);
    }
}
