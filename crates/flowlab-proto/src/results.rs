//! The results both ends exchange after `EXCHANGE_RESULTS`: the client sends its own first,
//! then the server sends its own. Each side reports the streams it ran, by stream id, so a
//! sender learns what its receiver counted.
//!
//! The keys are iperf3's (`send_results`/`get_results`). flowlab adds per-stream extras
//! (`out_of_order`, `duplicates`, stop-and-wait counts) that stock iperf3 ignores.

use serde::{Deserialize, Serialize};

use crate::lenient::{num, signed};

/// One side's results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerResults {
    /// CPU use of the test on this side, percent of one core.
    pub cpu_util_total: f64,
    pub cpu_util_user: f64,
    pub cpu_util_system: f64,
    /// 1 when this side sent and can count TCP retransmits, 0 when it cannot, -1 when it
    /// only received.
    #[serde(deserialize_with = "signed")]
    pub sender_has_retransmits: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion_used: Option<String>,
    pub streams: Vec<StreamResults>,
    /// The server's own output for the test, as JSON (a server that prints JSON), when
    /// the client asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_json: Option<serde_json::Value>,
    /// The same as text (a server that prints text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_output_text: Option<String>,
}

/// One stream's counts, from the side that reports them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamResults {
    #[serde(deserialize_with = "signed")]
    pub id: i64,
    /// Bytes this side sent or received on the stream (after the omitted seconds).
    #[serde(deserialize_with = "num")]
    pub bytes: u64,
    /// TCP retransmitted segments (sender), or -1 when unknown.
    #[serde(deserialize_with = "signed")]
    pub retransmits: i64,
    /// UDP receiver: RFC 3550 jitter in seconds.
    pub jitter: f64,
    /// UDP receiver: datagrams lost.
    #[serde(deserialize_with = "signed")]
    pub errors: i64,
    /// UDP: datagrams sent (sender); for a receiver, as in iperf3, the highest sequence
    /// number seen — the datagrams the sender had sent by then.
    #[serde(deserialize_with = "signed")]
    pub packets: i64,
    #[serde(default, deserialize_with = "signed")]
    pub omitted_errors: i64,
    #[serde(default, deserialize_with = "signed")]
    pub omitted_packets: i64,
    /// Seconds since the test started (absent from iperf3's older results: 0).
    #[serde(default)]
    pub start_time: f64,
    #[serde(default)]
    pub end_time: f64,
    /// flowlab: UDP datagrams that arrived after a later one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_of_order: Option<u64>,
    /// flowlab: UDP datagrams whose sequence number had already been received.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicates: Option<u64>,
    /// flowlab, UDP receiver: bytes of first copies (duplicates not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_bytes: Option<u64>,
    /// flowlab, TCP sender: of `retransmits`, segments the receiver reported as
    /// received twice (D-SACK): retransmissions that were not needed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsack_dups: Option<u64>,
    /// flowlab, TCP sender: times its TCP saw the segments reordered on the way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reordering: Option<u64>,
    /// flowlab, stop-and-wait sender: messages sent again after a timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sw_retransmits: Option<u64>,
    /// flowlab UDP receiver: times its socket dropped arriving data for want of buffer
    /// space (the kernel's SO_RXQ_OVFL count). Each drop is one kernel packet, which may
    /// be one datagram or a GRO batch of many, so this says that (and how often) the
    /// receiving host fell behind, not how many of `errors` it caused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvbuf_drops: Option<u64>,
    /// flowlab UDP receiver: datagrams that could not belong to the stream (forged,
    /// replayed from long ago, too long, sequence 0 or far ahead of the stream), counted
    /// in nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foreign: Option<u64>,
    /// flowlab UDP sender with receiver-overflow backoff: times it slowed down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_cuts: Option<u64>,
    /// flowlab paced UDP sender keeping within the receiver's window: times the receiver
    /// held it back (it did not keep up with the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_holds: Option<u64>,
    /// flowlab server: what the kernel granted this stream's socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<SocketSettings>,
    /// flowlab server, `--trace`: the TCP_INFO samples of this stream's socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::trace::StreamTrace>,
}

/// A socket's settings as the kernel reports them after they were asked for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketSettings {
    /// SO_SNDBUF and SO_RCVBUF (Linux reports twice the size asked for).
    pub sndbuf: u64,
    pub rcvbuf: u64,
    /// TCP congestion control (absent for UDP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// The IP type of service (or IPv6 traffic class) on the socket, when the client
    /// asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tos: Option<u8>,
    /// UDP: path MTU discovery (the DF bit) on the socket, when the client asked for it
    /// (`--dont-fragment`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dont_fragment: Option<bool>,
    /// TCP: TCP_USER_TIMEOUT on the socket, ms, when the server sets one (`serve
    /// --snd-timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_timeout_ms: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    /// Server results as a stock iperf3 3.12 server sends them for a UDP test.
    const IPERF3_SERVER: &str = r#"{"cpu_util_total":1.5,"cpu_util_user":0.5,
        "cpu_util_system":1,"sender_has_retransmits":-1,"streams":[{"id":1,
        "bytes":1.2e+10,"retransmits":-1,"jitter":0.0012,"errors":3,"packets":856,
        "omitted_errors":0,"omitted_packets":0,"start_time":0,"end_time":10.000041}]}"#;

    #[test]
    fn parses_stock_iperf3_results() {
        let r: PeerResults = frame::decode(IPERF3_SERVER.as_bytes()).unwrap();
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.streams.len(), 1);
        let s = &r.streams[0];
        assert_eq!(
            (s.id, s.bytes, s.errors, s.packets),
            (1, 12_000_000_000, 3, 856)
        );
        assert_eq!(s.duplicates, None);
    }

    /// iperf3 3.12 prints -1 as 2^64 - 1 (cJSON's PRIu64); it must read back as -1.
    #[test]
    fn reads_iperf3_312_negative_numbers() {
        let r: PeerResults = frame::decode(
            br#"{"cpu_util_total":1,"cpu_util_user":0,"cpu_util_system":1,
            "sender_has_retransmits":18446744073709551615,"streams":[{"id":1,"bytes":10,
            "retransmits":18446744073709551615,"jitter":0,"errors":0,"packets":0}]}"#,
        )
        .unwrap();
        assert_eq!(r.sender_has_retransmits, -1);
        assert_eq!(r.streams[0].retransmits, -1);
        assert_eq!(r.streams[0].start_time, 0.0);
    }

    #[test]
    fn round_trip_with_extras() {
        let r = PeerResults {
            cpu_util_total: 12.5,
            sender_has_retransmits: 1,
            congestion_used: Some("cubic".into()),
            streams: vec![StreamResults {
                id: 3,
                bytes: 1 << 40,
                retransmits: 7,
                duplicates: Some(2),
                out_of_order: Some(1),
                end_time: 10.0,
                ..StreamResults::default()
            }],
            ..PeerResults::default()
        };
        let wire = frame::encode(&r);
        assert_eq!(frame::decode::<PeerResults>(&wire[4..]).unwrap(), r);
    }

    #[test]
    fn refuses_results_without_streams() {
        assert!(frame::decode::<PeerResults>(br#"{"cpu_util_total":1}"#).is_err());
    }
}
