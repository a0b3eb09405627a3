//! flowlab's answer to a client that announced flowlab extensions.
//!
//! A flowlab client always sends a `flowlab` object in its parameters. A flowlab server
//! answers with [`crate::State::FlowlabHello`] and this JSON before `CREATE_STREAMS`; a
//! stock iperf3 server ignores the object and goes straight to `CREATE_STREAMS`. So the
//! client learns before any data flows whether its peer can do what it asked for.

use serde::{Deserialize, Serialize};

/// The server's side of the extension handshake.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerHello {
    /// Extension protocol version the server speaks.
    pub version: u32,
    /// flowlab's version string.
    pub server_version: String,
    /// Extensions the server offers, e.g. `"stop-and-wait"`, `"exact-bytes"`.
    pub features: Vec<String>,
    /// Set when the server refuses the test; the client prints it and stops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The server's machine state (kernel, TCP settings, qdiscs, offloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<crate::system::SystemInfo>,
}

/// Extension names.
pub mod feature {
    /// Stop-and-wait mode over TCP and UDP.
    pub const STOP_AND_WAIT: &str = "stop-and-wait";
    /// `-n` counts bytes exactly on the server's senders too.
    pub const EXACT_BYTES: &str = "exact-bytes";
    /// The server closes its senders' write side at the end, so receivers drain exactly.
    pub const CLEAN_CLOSE: &str = "clean-close";
    /// UDP receivers report their socket's overflow drops and unlimited-rate senders back
    /// off on them (`udp::Overflow`).
    pub const UDP_BACKOFF: &str = "udp-backoff";
    /// UDP receivers report their progress and the room in their socket, and
    /// unlimited-rate senders keep no more than that unread (`udp::Progress`).
    pub const UDP_WINDOW: &str = "udp-window";
    /// Paced UDP senders keep within the receiver's window too, and receivers report
    /// their progress in paced tests.
    pub const UDP_WINDOW_PACED: &str = "udp-window-paced";
    /// The server samples TCP_INFO of its streams (`--trace`) and returns the samples.
    pub const TRACE: &str = "trace";
    /// The server applies `recv_window` and `recv_congestion` to its receiving sockets.
    pub const RECEIVER_TUNING: &str = "receiver-tuning";
    /// The server receives a test sent to a multicast group (`params::Multicast`): it
    /// joins the group for the test and reports what arrived.
    pub const MULTICAST: &str = "multicast";
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;

    #[test]
    fn round_trip() {
        let h = ServerHello {
            version: 1,
            server_version: "0.1.0".into(),
            features: vec![feature::STOP_AND_WAIT.into()],
            error: Some("busy".into()),
            system: None,
        };
        let wire = frame::encode(&h);
        let back: ServerHello = frame::decode(&wire[4..]).unwrap();
        assert_eq!(back, h);
    }
}
