//! A server's own counters: tests started, served and failed, bytes each way, refusals by
//! kind, tests running. Counted from the server's events (`ServerEvent`), all of them:
//! the engine hands them over before `--log-rate` leaves any out of the log.

use std::collections::HashMap;
use std::sync::Mutex;

use flowlab_results::server::{HttpRefusal, RefusalKind, ServerEvent};
use prometheus::{Encoder, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The protocols every server serves: their series exist from the start, at 0.
const PROTOCOLS: [&str; 2] = ["tcp", "udp"];

/// The ways of an HTTP transfer (`serve --http`).
pub const HTTP_DIRECTIONS: [&str; 2] = ["download", "upload"];

/// What one server did since it started, counted from its events.
#[derive(Debug)]
pub struct ServerMetrics {
    registry: Registry,
    started: IntCounterVec,
    served: IntCounterVec,
    failed: IntCounterVec,
    not_started: IntCounter,
    running: IntGauge,
    received_bytes: IntCounter,
    sent_bytes: IntCounter,
    refused: IntCounterVec,
    http_transfers: IntCounterVec,
    http_sent: IntCounter,
    http_received: IntCounter,
    http_refused: IntCounterVec,
    /// The protocol of each test started and not yet ended.
    open: Mutex<HashMap<u64, String>>,
}

impl ServerMetrics {
    /// Every metric registered, each series at 0 (a rate is defined from the first
    /// scrape). Fails only if a name here were not a valid metric name.
    pub fn new() -> prometheus::Result<ServerMetrics> {
        let by = |name: &str, help: &str, label: &str| {
            IntCounterVec::new(Opts::new(name, help), &[label])
        };
        let started = by(
            "flowlab_server_tests_started_total",
            "Tests whose parameters the server accepted and started.",
            "protocol",
        )?;
        let served = by(
            "flowlab_server_tests_served_total",
            "Tests that ran to their end.",
            "protocol",
        )?;
        let failed = by(
            "flowlab_server_tests_failed_total",
            "Tests that started and ended early (an error, a limit, the client gone).",
            "protocol",
        )?;
        let refused = by(
            "flowlab_server_refused_total",
            "Connections, tests and datagrams refused, by reason (busy: beyond the \
             server's places).",
            "reason",
        )?;
        let not_started = IntCounter::new(
            "flowlab_server_tests_not_started_total",
            "Tests that ended before they started: parameters refused (a limit, \
             authentication) or never come whole.",
        )?;
        let running = IntGauge::new("flowlab_server_tests_running", "Tests running now.")?;
        let received_bytes = IntCounter::new(
            "flowlab_server_received_bytes_total",
            "Test data the server received, over the tests served.",
        )?;
        let sent_bytes = IntCounter::new(
            "flowlab_server_sent_bytes_total",
            "Test data the server sent, over the tests served.",
        )?;
        let http_transfers = by(
            "flowlab_server_http_transfers_total",
            "HTTP downloads and uploads begun (serve --http).",
            "direction",
        )?;
        let http_refused = by(
            "flowlab_server_http_refused_total",
            "HTTP requests refused, by reason (busy: beyond --http-max-transfers).",
            "reason",
        )?;
        let http_sent = IntCounter::new(
            "flowlab_server_http_sent_bytes_total",
            "Bytes of HTTP downloads handed to their connections.",
        )?;
        let http_received = IntCounter::new(
            "flowlab_server_http_received_bytes_total",
            "Bytes of HTTP uploads read.",
        )?;
        for d in HTTP_DIRECTIONS {
            http_transfers.with_label_values(&[d]);
        }
        for r in HttpRefusal::ALL {
            http_refused.with_label_values(&[r.name()]);
        }
        let build = IntGaugeVec::new(
            Opts::new("flowlab_build_info", "The flowlab that serves (always 1)."),
            &["version"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        for protocol in PROTOCOLS {
            for family in [&started, &served, &failed] {
                family.with_label_values(&[protocol]);
            }
        }
        for kind in RefusalKind::ALL {
            refused.with_label_values(&[kind.name()]);
        }
        let registry = Registry::new();
        for family in [
            &started,
            &served,
            &failed,
            &refused,
            &http_transfers,
            &http_refused,
        ] {
            registry.register(Box::new(family.clone()))?;
        }
        registry.register(Box::new(http_sent.clone()))?;
        registry.register(Box::new(http_received.clone()))?;
        registry.register(Box::new(not_started.clone()))?;
        registry.register(Box::new(running.clone()))?;
        registry.register(Box::new(received_bytes.clone()))?;
        registry.register(Box::new(sent_bytes.clone()))?;
        registry.register(Box::new(build))?;
        Ok(ServerMetrics {
            registry,
            started,
            served,
            failed,
            not_started,
            running,
            received_bytes,
            sent_bytes,
            refused,
            http_transfers,
            http_sent,
            http_received,
            http_refused,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// An HTTP download or upload began (`direction`: one of [`HTTP_DIRECTIONS`]).
    pub fn http_transfer(&self, direction: &str) {
        self.http_transfers.with_label_values(&[direction]).inc();
    }

    /// Bytes of HTTP downloads sent.
    pub fn http_sent(&self, bytes: u64) {
        self.http_sent.inc_by(bytes);
    }

    /// Bytes of HTTP uploads read.
    pub fn http_received(&self, bytes: u64) {
        self.http_received.inc_by(bytes);
    }

    /// An HTTP request refused.
    pub fn http_refused(&self, reason: HttpRefusal) {
        self.http_refused.with_label_values(&[reason.name()]).inc();
    }

    /// Counts `event`.
    pub fn observe(&self, event: &ServerEvent) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            ServerEvent::TestStarted { test, protocol, .. } => {
                open.insert(*test, protocol.clone());
                self.started.with_label_values(&[protocol]).inc();
                self.running.inc();
            }
            ServerEvent::TestFinished {
                test,
                bytes_received,
                bytes_sent,
                ..
            } => {
                if let Some(protocol) = open.remove(test) {
                    self.served.with_label_values(&[&protocol]).inc();
                    self.running.dec();
                }
                self.received_bytes.inc_by(*bytes_received);
                self.sent_bytes.inc_by(*bytes_sent);
            }
            // A test that failed before it started (its parameters refused or never
            // whole) was never counted as started.
            ServerEvent::TestFailed { test: Some(id), .. } => match open.remove(id) {
                Some(protocol) => {
                    self.failed.with_label_values(&[&protocol]).inc();
                    self.running.dec();
                }
                None => self.not_started.inc(),
            },
            ServerEvent::Refused { kind, .. } => {
                self.refused.with_label_values(&[kind.name()]).inc();
            }
            ServerEvent::TestFailed { test: None, .. }
            | ServerEvent::Listening { .. }
            | ServerEvent::Suppressed { .. } => {}
        }
    }

    /// Every metric, in Prometheus's text format ([`crate::CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = Vec::new();
        // Writing to memory fails only for a family without a metric, and every family
        // here has its series from the start.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut text);
        String::from_utf8_lossy(&text).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(test: u64, protocol: &str) -> ServerEvent {
        ServerEvent::TestStarted {
            test,
            peer: "192.0.2.1:1".into(),
            protocol: protocol.into(),
            streams: 1,
            reverse: false,
            bidir: false,
            client: None,
            multicast: None,
        }
    }

    /// The value of the series `name` (with its labels, as written) in `text`.
    fn value(text: &str, name: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }

    /// A served test, a failed one, one still running, a test that failed before it
    /// started, two refusals: each counted where it belongs, and the bytes of the served
    /// test alone.
    #[test]
    fn each_event_is_counted_where_it_belongs() {
        let m = ServerMetrics::new().expect("metrics");
        for e in [
            started(1, "tcp"),
            started(2, "udp"),
            started(3, "tcp"),
            ServerEvent::TestFinished {
                test: 1,
                peer: "192.0.2.1:1".into(),
                bytes_received: 1_000_000,
                bytes_sent: 2_000,
                seconds: 1.0,
                mptcp_subflows: None,
            },
            ServerEvent::TestFailed {
                test: Some(2),
                peer: "192.0.2.1:1".into(),
                error: "the client ended the test".into(),
            },
            ServerEvent::TestFailed {
                test: Some(9),
                peer: "192.0.2.1:1".into(),
                error: "handshake".into(),
            },
            ServerEvent::Refused {
                peer: "192.0.2.2:1".into(),
                kind: RefusalKind::Busy,
                reason: "busy".into(),
            },
            ServerEvent::Refused {
                peer: "192.0.2.2:1".into(),
                kind: RefusalKind::Busy,
                reason: "busy".into(),
            },
            ServerEvent::Suppressed { count: 5 },
        ] {
            m.observe(&e);
        }
        let text = m.encode();
        let v = |name: &str| value(&text, name);
        assert_eq!(
            v("flowlab_server_tests_started_total{protocol=\"tcp\"}"),
            2.0
        );
        assert_eq!(
            v("flowlab_server_tests_started_total{protocol=\"udp\"}"),
            1.0
        );
        assert_eq!(
            v("flowlab_server_tests_served_total{protocol=\"tcp\"}"),
            1.0
        );
        assert_eq!(
            v("flowlab_server_tests_served_total{protocol=\"udp\"}"),
            0.0
        );
        assert_eq!(
            v("flowlab_server_tests_failed_total{protocol=\"udp\"}"),
            1.0
        );
        assert_eq!(
            v("flowlab_server_tests_failed_total{protocol=\"tcp\"}"),
            0.0
        );
        assert_eq!(v("flowlab_server_tests_running"), 1.0);
        assert_eq!(v("flowlab_server_tests_not_started_total"), 1.0);
        assert_eq!(v("flowlab_server_received_bytes_total"), 1e6);
        assert_eq!(v("flowlab_server_sent_bytes_total"), 2e3);
        assert_eq!(v("flowlab_server_refused_total{reason=\"busy\"}"), 2.0);
        // Every kind of refusal has its series from the start.
        for kind in RefusalKind::ALL {
            let series = format!(
                "flowlab_server_refused_total{{reason=\"{}\"}} ",
                kind.name()
            );
            assert!(text.contains(&series), "{series}: {text}");
        }
        assert_eq!(
            v(&format!(
                "flowlab_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )),
            1.0
        );
        assert!(
            text.contains("# TYPE flowlab_server_refused_total counter\n"),
            "{text}"
        );
    }
}
