//! What a server did, for its log: the events `flowlab serve` prints, one per line, as
//! text (`flowlab_report::table::server_event`) or as JSON objects (`serve -J`).

use serde::{Deserialize, Serialize};

/// Something the server did, for its log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerEvent {
    Listening {
        address: String,
    },
    TestStarted {
        test: u64,
        peer: String,
        protocol: String,
        streams: u64,
        reverse: bool,
        bidir: bool,
        client: Option<String>,
    },
    TestFinished {
        test: u64,
        peer: String,
        bytes_received: u64,
        bytes_sent: u64,
        seconds: f64,
    },
    /// A test or connection that ended badly; the server carries on.
    TestFailed {
        test: Option<u64>,
        peer: String,
        error: String,
    },
    Refused {
        peer: String,
        reason: String,
    },
    /// Refusals and connection failures left out of the log (`--log-rate`) since the
    /// last line about them.
    Suppressed {
        count: u64,
    },
}
