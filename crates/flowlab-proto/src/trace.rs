//! TCP_INFO samples, as a traced test's results carry them (`--trace`).
//!
//! One [`TraceSample`] is what the kernel said about one TCP socket at one moment, plus
//! the socket's buffer sizes. Every kernel field is optional: a field the running kernel
//! does not provide is absent from the JSON, never zero. Units are the kernel's, named in
//! each field (segments, bytes, µs, bytes/s); docs/metrics.md lists which kernel release
//! brought each.

use serde::{Deserialize, Serialize};

/// One stream's samples on one end of the test.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamTrace {
    /// Stream id, as in the results.
    pub id: i64,
    /// Sampling period asked for, µs.
    pub period_us: u64,
    /// Congestion control of the socket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// More samples were due than the sampler keeps; the last ones are missing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    pub samples: Vec<TraceSample>,
}

/// TCP_INFO of one socket at one moment. Field names drop the kernel's `tcpi_` prefix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TraceSample {
    /// When, µs on this end's test clock (0 = when its data started to flow).
    pub t_us: u64,
    /// Socket buffer sizes now (SO_SNDBUF, SO_RCVBUF), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcvbuf: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_state: Option<u8>,
    /// Congestion window, segments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_cwnd: Option<u64>,
    /// Slow-start threshold, segments (the kernel's "infinity" is 2147483647).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_ssthresh: Option<u64>,
    /// Smoothed RTT and its variation, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srtt_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rttvar_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_rtt_us: Option<u64>,
    /// Sender's maximum segment size, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_mss: Option<u64>,
    /// Segments sent and not yet cumulatively acknowledged; of those, selectively
    /// acknowledged, presumed lost, and retransmitted and unacknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unacked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sacked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retrans: Option<u64>,
    /// The peer's advertised receive window, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snd_wnd: Option<u64>,
    /// The window this socket advertises, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_wnd: Option<u64>,
    /// Receive-buffer autotuning's estimate of what the sender sends per RTT, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rcv_space: Option<u64>,
    /// Bytes sent (retransmissions included), acknowledged, received, retransmitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_acked: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_received: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_retrans: Option<u64>,
    /// Segments retransmitted since the connection opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_retrans: Option<u64>,
    /// Segments sent and received, all and data-carrying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segs_out: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segs_in: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_segs_out: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_segs_in: Option<u64>,
    /// Bytes written by the application and not yet sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_bytes: Option<u64>,
    /// Latest delivery-rate sample and the pacing rate, bytes/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_rate: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pacing_rate: Option<u64>,
    /// Time since the connection opened that the sender had data to send, and of that,
    /// limited by the peer's receive window and by the send buffer, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_time_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rwnd_limited_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sndbuf_limited_us: Option<u64>,
    /// A QUIC connection's figures, from its stack's statistics (a QUIC stream's samples
    /// have these and `srtt_us`, `min_rtt_us`, `bytes_sent`, `bytes_received`, the
    /// connection's UDP bytes): its congestion window in bytes, the packets it has
    /// declared lost (their data is sent again in new packets), and its congestion
    /// events, each since the connection opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_cwnd_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_lost_packets: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quic_congestion_events: Option<u64>,
}

impl TraceSample {
    /// Bytes in flight as the kernel counts them: `(unacked − sacked − lost + retrans) ×
    /// snd_mss`.
    pub fn in_flight_bytes(&self) -> Option<u64> {
        let segs = (self.unacked? + self.retrans?).saturating_sub(self.sacked? + self.lost?);
        Some(segs * self.snd_mss?)
    }

    /// Congestion window in bytes (`snd_cwnd × snd_mss`; a QUIC stack's own).
    pub fn cwnd_bytes(&self) -> Option<u64> {
        self.quic_cwnd_bytes
            .or_else(|| Some(self.snd_cwnd? * self.snd_mss?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_fields_are_absent_in_json() {
        let s = TraceSample {
            t_us: 10_000,
            snd_cwnd: Some(10),
            snd_mss: Some(1448),
            ..TraceSample::default()
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, r#"{"t_us":10000,"snd_cwnd":10,"snd_mss":1448}"#);
        let back: TraceSample = serde_json::from_str(&json).unwrap();
        assert_eq!(back, s);
        assert_eq!(s.cwnd_bytes(), Some(14_480));
        assert_eq!(s.in_flight_bytes(), None);
    }

    #[test]
    fn in_flight_follows_the_kernels_rule() {
        let s = TraceSample {
            unacked: Some(20),
            sacked: Some(3),
            lost: Some(2),
            retrans: Some(1),
            snd_mss: Some(1000),
            ..TraceSample::default()
        };
        assert_eq!(s.in_flight_bytes(), Some(16_000));
    }
}
