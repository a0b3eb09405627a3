//! What a server did, for its log: the events `flowlab serve` prints, one per line, as
//! text (`flowlab_report::table::server_event`) or as JSON objects (`serve -J`).

use serde::{Deserialize, Serialize};

/// Something the server did, for its log.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ServerEvent {
    Listening {
        address: String,
        /// Where `--quic` serves QUIC (UDP `address:port`), when it does.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        quic: Option<String>,
    },
    TestStarted {
        test: u64,
        peer: String,
        protocol: String,
        streams: u64,
        reverse: bool,
        bidir: bool,
        client: Option<String>,
        /// A multicast test's group and port, which this server joined to receive it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        multicast: Option<String>,
    },
    TestFinished {
        test: u64,
        peer: String,
        bytes_received: u64,
        bytes_sent: u64,
        seconds: f64,
        /// Its streams were MPTCP connections: the subflows they had at the end, in all
        /// (absent for plain TCP, UDP and QUIC).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mptcp_subflows: Option<u64>,
    },
    /// A test or connection that ended badly; the server carries on.
    TestFailed {
        test: Option<u64>,
        peer: String,
        error: String,
    },
    Refused {
        peer: String,
        /// What kind of refusal (what a metric counts it as).
        kind: RefusalKind,
        reason: String,
    },
    /// Refusals and connection failures left out of the log (`--log-rate`) since the
    /// last line about them.
    Suppressed { count: u64 },
}

/// What kind of thing a server refused: [`ServerEvent::Refused`]'s `kind`, and the
/// `reason` label of `flowlab serve --metrics`' refusal counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// A test or connection beyond the server's places (`--max-tests`, per source, the
    /// fragment connections').
    Busy,
    /// New connections from one address beyond `--handshake-rate` or
    /// `--max-handshakes-per-source`.
    Flood,
    /// Latency probes beyond `--probe-rate`.
    Probes,
    /// A UDP stream's opening datagram for no test that waits for one.
    Stray,
    /// A connection whose greeting (cookie, hello) was malformed or came too late.
    Handshake,
    /// A credential or token that was missing or wrong.
    Credentials,
    /// An admitted connection that asked for nothing in time, or was closed to make room
    /// for others.
    Idle,
}

impl RefusalKind {
    pub const ALL: [RefusalKind; 7] = [
        RefusalKind::Busy,
        RefusalKind::Flood,
        RefusalKind::Probes,
        RefusalKind::Stray,
        RefusalKind::Handshake,
        RefusalKind::Credentials,
        RefusalKind::Idle,
    ];

    /// Its name in the JSON log and in metrics.
    pub fn name(self) -> &'static str {
        match self {
            RefusalKind::Busy => "busy",
            RefusalKind::Flood => "flood",
            RefusalKind::Probes => "probes",
            RefusalKind::Stray => "stray",
            RefusalKind::Handshake => "handshake",
            RefusalKind::Credentials => "credentials",
            RefusalKind::Idle => "idle",
        }
    }
}

/// Why `serve --http` refused a request: [`HttpRefusal::status`] is its answer, and
/// [`HttpRefusal::name`] the `reason` label of the metrics' HTTP refusal counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HttpRefusal {
    /// Beyond the transfers the server runs at once, in all or from one address (503).
    Busy,
    /// A download asked for, or an upload announced or sent, beyond the bytes one
    /// request may take (413).
    TooLarge,
    /// An upload that stalled or would take longer than one transfer may (408).
    Timeout,
    /// A request the endpoint cannot answer: a bad size, a bad `Host` (400).
    Bad,
}

impl HttpRefusal {
    pub const ALL: [HttpRefusal; 4] = [
        HttpRefusal::Busy,
        HttpRefusal::TooLarge,
        HttpRefusal::Timeout,
        HttpRefusal::Bad,
    ];

    /// Its name in metrics.
    pub fn name(self) -> &'static str {
        match self {
            HttpRefusal::Busy => "busy",
            HttpRefusal::TooLarge => "too_large",
            HttpRefusal::Timeout => "timeout",
            HttpRefusal::Bad => "bad",
        }
    }

    /// The HTTP status code that answers it.
    pub fn status(self) -> u16 {
        match self {
            HttpRefusal::Busy => 503,
            HttpRefusal::TooLarge => 413,
            HttpRefusal::Timeout => 408,
            HttpRefusal::Bad => 400,
        }
    }
}
