//! What a server is doing, for its live view (`serve --http`'s `/status`): the tests
//! running now, the last ones that ended, and totals since it started. Kept from the
//! server's own events ([`ServerEvent`]) and its HTTP transfers; clients' addresses are
//! kept masked (an IPv4 address's last byte, an IPv6 address's last 80 bits), since
//! anyone who can reach the page reads them.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::server::{HttpRefusal, ServerEvent};

/// Ended tests kept for the view.
pub const RECENT: usize = 20;

/// A server's state as its live view shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerStatus {
    pub flowlab_version: String,
    /// When the server started, Unix seconds.
    pub started_unix: f64,
    /// Tests running now, oldest first.
    pub running: Vec<RunningTest>,
    /// The last [`RECENT`] tests that ended, newest first.
    pub recent: VecDeque<EndedTest>,
    pub totals: Totals,
}

/// A test running now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningTest {
    pub test: u64,
    /// The client, masked.
    pub client: String,
    pub protocol: String,
    pub streams: u64,
    /// `up` (the client sends), `down` (`-R`) or `both` (`--bidir`).
    pub direction: String,
    pub started_unix: f64,
}

/// A test that ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedTest {
    /// `None`: a connection that failed before it was a test.
    pub test: Option<u64>,
    pub client: String,
    pub protocol: Option<String>,
    pub ended_unix: f64,
    /// Bytes the server received and sent, and over how long (a test that ran to its
    /// end).
    pub bytes_received: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub seconds: Option<f64>,
    /// Why it failed; `None` for a test that ran to its end.
    pub error: Option<String>,
}

/// Counts since the server started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub tests_started: u64,
    pub tests_served: u64,
    pub tests_failed: u64,
    pub refused: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub http_downloads: u64,
    pub http_uploads: u64,
    pub http_bytes_sent: u64,
    pub http_bytes_received: u64,
    pub http_refused: u64,
    /// Speed-test page runs whose results were sent.
    pub page_runs: u64,
}

/// What the HTTP endpoints did (`serve --http`), as they tell the metrics and the live
/// view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpActivity {
    /// A download began.
    Download,
    /// An upload began.
    Upload,
    /// Bytes handed to the connection.
    Sent(u64),
    /// Bytes of an upload read.
    Received(u64),
    /// A request refused, and why.
    Refused(HttpRefusal),
    /// The speed-test page sent a run's result.
    PageRun,
}

/// `peer` (an address, with or without a port) with its host part hidden: `192.0.2.x`,
/// `2001:db8:1::x` (the /48 kept). A peer that is no address is shown as it came.
pub fn mask(peer: &str) -> String {
    let ip = peer
        .parse::<SocketAddr>()
        .map(|a| a.ip())
        .or_else(|_| peer.parse::<IpAddr>());
    match ip.map(|ip| ip.to_canonical()) {
        Ok(IpAddr::V4(v4)) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.x")
        }
        Ok(IpAddr::V6(v6)) => {
            let s = v6.segments();
            format!("{:x}:{:x}:{:x}::x", s[0], s[1], s[2])
        }
        Err(_) => peer.to_string(),
    }
}

impl ServerStatus {
    /// A server's state before anything happened.
    pub fn new(flowlab_version: &str, started_unix: f64) -> ServerStatus {
        ServerStatus {
            flowlab_version: flowlab_version.into(),
            started_unix,
            ..ServerStatus::default()
        }
    }

    /// Counts `event`, which happened at `now_unix`.
    pub fn observe(&mut self, event: &ServerEvent, now_unix: f64) {
        let t = &mut self.totals;
        match event {
            ServerEvent::TestStarted {
                test,
                peer,
                protocol,
                streams,
                reverse,
                bidir,
                ..
            } => {
                t.tests_started += 1;
                let direction = match (bidir, reverse) {
                    (true, _) => "both",
                    (false, true) => "down",
                    (false, false) => "up",
                };
                self.running.push(RunningTest {
                    test: *test,
                    client: mask(peer),
                    protocol: protocol.clone(),
                    streams: *streams,
                    direction: direction.into(),
                    started_unix: now_unix,
                });
            }
            ServerEvent::TestFinished {
                test,
                peer,
                bytes_received,
                bytes_sent,
                seconds,
                ..
            } => {
                t.tests_served += 1;
                t.bytes_received += bytes_received;
                t.bytes_sent += bytes_sent;
                let protocol = self.end(*test);
                self.push(EndedTest {
                    test: Some(*test),
                    client: mask(peer),
                    protocol,
                    ended_unix: now_unix,
                    bytes_received: Some(*bytes_received),
                    bytes_sent: Some(*bytes_sent),
                    seconds: Some(*seconds),
                    error: None,
                });
            }
            ServerEvent::TestFailed { test, peer, error } => {
                t.tests_failed += 1;
                let protocol = test.and_then(|id| self.end(id));
                self.push(EndedTest {
                    test: *test,
                    client: mask(peer),
                    protocol,
                    ended_unix: now_unix,
                    bytes_received: None,
                    bytes_sent: None,
                    seconds: None,
                    error: Some(error.clone()),
                });
            }
            ServerEvent::Refused { .. } => t.refused += 1,
            ServerEvent::Listening { .. } | ServerEvent::Suppressed { .. } => {}
        }
    }

    /// Counts what the HTTP endpoints did.
    pub fn http(&mut self, activity: HttpActivity) {
        let t = &mut self.totals;
        match activity {
            HttpActivity::Download => t.http_downloads += 1,
            HttpActivity::Upload => t.http_uploads += 1,
            HttpActivity::Sent(n) => t.http_bytes_sent += n,
            HttpActivity::Received(n) => t.http_bytes_received += n,
            HttpActivity::Refused(_) => t.http_refused += 1,
            HttpActivity::PageRun => t.page_runs += 1,
        }
    }

    /// Takes test `id` off the running ones: its protocol, if it was running.
    fn end(&mut self, id: u64) -> Option<String> {
        let at = self.running.iter().position(|r| r.test == id)?;
        Some(self.running.remove(at).protocol)
    }

    fn push(&mut self, ended: EndedTest) {
        self.recent.push_front(ended);
        self.recent.truncate(RECENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(test: u64, peer: &str) -> ServerEvent {
        ServerEvent::TestStarted {
            test,
            peer: peer.into(),
            protocol: "tcp".into(),
            streams: 2,
            reverse: true,
            bidir: false,
            client: None,
            multicast: None,
        }
    }

    #[test]
    fn tests_run_then_end_newest_first_with_their_clients_masked() {
        let mut s = ServerStatus::new("0", 100.0);
        s.observe(&started(1, "192.0.2.7:40000"), 101.0);
        s.observe(&started(2, "[2001:db8:1:2::9]:40000"), 102.0);
        assert_eq!(s.running.len(), 2);
        assert_eq!(s.running[0].client, "192.0.2.x");
        assert_eq!(s.running[0].direction, "down");
        assert_eq!(s.running[1].client, "2001:db8:1::x");
        s.observe(
            &ServerEvent::TestFinished {
                test: 1,
                peer: "192.0.2.7:40000".into(),
                bytes_received: 10,
                bytes_sent: 1_000,
                seconds: 1.0,
                mptcp_subflows: None,
            },
            103.0,
        );
        s.observe(
            &ServerEvent::TestFailed {
                test: Some(2),
                peer: "[2001:db8:1:2::9]:40000".into(),
                error: "reset".into(),
            },
            104.0,
        );
        assert!(s.running.is_empty());
        assert_eq!(s.recent[0].error.as_deref(), Some("reset"));
        assert_eq!(s.recent[1].bytes_sent, Some(1_000));
        assert_eq!(s.recent[1].protocol.as_deref(), Some("tcp"));
        let t = &s.totals;
        assert_eq!((t.tests_started, t.tests_served, t.tests_failed), (2, 1, 1));
        assert_eq!((t.bytes_received, t.bytes_sent), (10, 1_000));
        // Only the last RECENT are kept.
        for id in 10..40 {
            s.observe(
                &ServerEvent::TestFailed {
                    test: Some(id),
                    peer: "x".into(),
                    error: "e".into(),
                },
                105.0,
            );
        }
        assert_eq!(s.recent.len(), RECENT);
        assert_eq!(s.recent[0].test, Some(39));
        assert_eq!(s.recent[0].client, "x", "not an address: shown as it came");
    }

    #[test]
    fn http_activity_is_counted() {
        let mut s = ServerStatus::new("0", 0.0);
        for a in [
            HttpActivity::Download,
            HttpActivity::Sent(5),
            HttpActivity::Upload,
            HttpActivity::Received(7),
            HttpActivity::Refused(HttpRefusal::Busy),
            HttpActivity::PageRun,
        ] {
            s.http(a);
        }
        let t = &s.totals;
        assert_eq!(
            (
                t.http_downloads,
                t.http_uploads,
                t.http_bytes_sent,
                t.http_bytes_received
            ),
            (1, 1, 5, 7)
        );
        assert_eq!((t.http_refused, t.page_runs), (1, 1));
        assert_eq!(mask("::ffff:198.51.100.4"), "198.51.100.x");
    }
}
