//! What the speed-test page (`serve --http`, `/`) measured: the figures a browser sends
//! ([`BrowserRun`]) and the document made of them ([`WebResult`], schema
//! `flowlab.web/1`), whose intervals, totals and latency are `flowlab test`'s own types,
//! summed and judged by the same code.

use serde::{Deserialize, Serialize};

use crate::latency::{TestLatency, arrived_between};
use crate::ping::Probe;
use crate::result::{EndSum, Interval, IntervalSum, SideTotals};
use crate::spec::StreamDirection;

/// The schema a [`WebResult`] names.
pub const SCHEMA: &str = "flowlab.web/1";

/// Most intervals or probes one direction may send: an hour of intervals, an hour of
/// probes ten a second.
const MAX_ITEMS: usize = 36_000;

/// What the page sends when its run ends (`POST /results`): times in milliseconds from
/// the browser's monotonic clock (`performance.now()`), bytes as it counted them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserRun {
    /// The id its uploads named (`/__up?run=ID`), by which the server counted what
    /// arrived.
    #[serde(default)]
    pub run: Option<String>,
    /// Concurrent transfers each way.
    pub streams: u32,
    /// Seconds each direction was asked to run.
    pub seconds: f64,
    /// Seconds between latency probes.
    pub probe_interval_seconds: f64,
    /// Round trips before any load, timed from the first.
    pub idle: Vec<BrowserProbe>,
    pub download: BrowserTransfer,
    pub upload: BrowserTransfer,
}

/// One direction's load, timed from its start.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserTransfer {
    /// How long it ran, s.
    pub seconds: f64,
    /// Bytes received (download) or sent (upload) by the page.
    pub bytes: u64,
    /// Bytes in each reporting interval, in order.
    pub intervals: Vec<BrowserInterval>,
    /// Round trips while it ran.
    pub probes: Vec<BrowserProbe>,
}

/// Bytes moved from `start` to `end`, s since the load started.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserInterval {
    pub start: f64,
    pub end: f64,
    pub bytes: u64,
}

/// One latency probe: sent at `sent_ms`, its round trip `rtt_ms` (`None`: it failed).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrowserProbe {
    pub sent_ms: f64,
    pub rtt_ms: Option<f64>,
}

/// What the server knows of the page's run: who asked, how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebStart {
    /// Seconds since the Unix epoch when the server received the run.
    pub timestamp: u64,
    pub flowlab_version: String,
    /// The client's address as the server saw it.
    pub client: String,
    /// The browser's `User-Agent`.
    pub user_agent: String,
    /// The HTTP version of the request that sent the run (`HTTP/1.1`, `HTTP/2`).
    pub http_version: String,
    /// It came over TLS.
    pub secure: bool,
    /// The server's default TCP congestion control: its downloads' (the browser's own
    /// system chooses the uploads', which no page can read).
    pub congestion_server: Option<String>,
    pub streams: u32,
    pub seconds: f64,
}

/// One direction of a page's run: the shapes of `flowlab test`'s document.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebTest {
    pub direction: StreamDirection,
    pub intervals: Vec<Interval>,
    /// The page's totals: as the receiver of a download, as the sender of an upload;
    /// and of an upload, what the server received of it.
    pub sum: EndSum,
    /// Idle and loaded round trips (protocol `http`).
    pub latency: TestLatency,
}

/// The document of a page's run (schema `flowlab.web/1`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WebResult {
    pub schema: String,
    pub start: WebStart,
    /// The download, then the upload.
    pub tests: Vec<WebTest>,
}

/// A run the page sent that cannot be a result: which field, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct BadRun {
    pub field: String,
    pub why: String,
}

fn bad(field: impl Into<String>, why: impl Into<String>) -> BadRun {
    BadRun {
        field: field.into(),
        why: why.into(),
    }
}

/// How the page times its probes, said in the document.
pub const TIMESTAMPS: &str = "browser: performance.now() around each request; the round trip \
                              from Resource Timing (requestStart to responseStart) where the \
                              browser gives it";

impl BrowserRun {
    /// The document of this run, or the first field that cannot be one. `received`:
    /// the bytes of its uploads the server received, when it counted them.
    pub fn judge(self, start: WebStart, received: Option<u64>) -> Result<WebResult, BadRun> {
        if self.streams == 0 || self.streams > 64 {
            return Err(bad("streams", format!("{} (1 to 64)", self.streams)));
        }
        seconds("seconds", self.seconds)?;
        seconds("probe_interval_seconds", self.probe_interval_seconds)?;
        let idle = probes("idle", &self.idle)?;
        let tests = [
            (StreamDirection::Down, "download", self.download),
            (StreamDirection::Up, "upload", self.upload),
        ]
        .into_iter()
        .map(|(direction, name, t)| {
            let received = received.filter(|_| direction == StreamDirection::Up);
            transfer(
                direction,
                name,
                t,
                received,
                idle.clone(),
                self.probe_interval_seconds,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
        Ok(WebResult {
            schema: SCHEMA.into(),
            start,
            tests,
        })
    }
}

fn seconds(field: &str, v: f64) -> Result<f64, BadRun> {
    if v.is_finite() && v > 0.0 && v <= 86_400.0 {
        Ok(v)
    } else {
        Err(bad(field, format!("{v} (more than 0 s, at most a day)")))
    }
}

/// The probes as `flowlab ping`'s, in order, their times in ns from the first reference.
fn probes(field: &str, given: &[BrowserProbe]) -> Result<Vec<Probe>, BadRun> {
    if given.len() > MAX_ITEMS {
        return Err(bad(
            field,
            format!("{} probes (at most {MAX_ITEMS})", given.len()),
        ));
    }
    given
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let ms = |v: f64, what: &str| {
                if v.is_finite() && (0.0..=86_400_000.0).contains(&v) {
                    Ok((v * 1e6).round() as u64)
                } else {
                    Err(bad(format!("{field}[{i}].{what}"), format!("{v} ms")))
                }
            };
            let sent_ns = ms(p.sent_ms, "sent_ms")?;
            let rtt_ns = p.rtt_ms.map(|r| ms(r, "rtt_ms")).transpose()?;
            Ok(Probe {
                seq: i as u64,
                sent_ns,
                received_ns: rtt_ns.map(|r| sent_ns + r),
                server_ns: None,
                forward_ns: None,
                backward_ns: None,
                duplicates: 0,
                reordered: false,
            })
        })
        .collect()
}

fn transfer(
    direction: StreamDirection,
    name: &str,
    t: BrowserTransfer,
    received: Option<u64>,
    idle: Vec<Probe>,
    probe_interval: f64,
) -> Result<WebTest, BadRun> {
    let total = seconds(&format!("{name}.seconds"), t.seconds)?;
    if t.intervals.len() > MAX_ITEMS {
        return Err(bad(
            format!("{name}.intervals"),
            format!("{} intervals (at most {MAX_ITEMS})", t.intervals.len()),
        ));
    }
    let loaded = probes(&format!("{name}.probes"), &t.probes)?;
    let mut previous_end = 0.0;
    let mut counted = 0u64;
    let mut intervals = Vec::with_capacity(t.intervals.len());
    for (i, iv) in t.intervals.iter().enumerate() {
        let field = format!("{name}.intervals[{i}]");
        let ordered = iv.start.is_finite()
            && iv.end.is_finite()
            && iv.start >= previous_end - 1e-6
            && iv.end > iv.start
            && iv.end <= total + 1e-6;
        if !ordered {
            return Err(bad(
                field,
                format!(
                    "{}–{} s: intervals run forward, one after another, within the {total} s \
                     the load ran",
                    iv.start, iv.end
                ),
            ));
        }
        previous_end = iv.end;
        counted = counted.saturating_add(iv.bytes);
        let bits_per_second = iv.bytes as f64 * 8.0 / (iv.end - iv.start);
        intervals.push(Interval {
            start: iv.start,
            end: iv.end,
            omitted: false,
            streams: Vec::new(),
            sums: vec![IntervalSum {
                direction,
                bytes: iv.bytes,
                bits_per_second,
                retransmits: None,
                udp: None,
            }],
            latency: arrived_between(&loaded, iv.start, iv.end),
        });
    }
    if counted > t.bytes {
        return Err(bad(
            format!("{name}.bytes"),
            format!(
                "{}, fewer than its intervals' {counted}: the total counts every interval",
                t.bytes
            ),
        ));
    }
    let totals = SideTotals {
        bytes: t.bytes,
        seconds: total,
        bits_per_second: t.bytes as f64 * 8.0 / total,
        ..SideTotals::default()
    };
    let sum = match direction {
        StreamDirection::Down => EndSum {
            direction,
            sender: None,
            receiver: Some(totals),
        },
        StreamDirection::Up => EndSum {
            direction,
            receiver: received.map(|bytes| SideTotals {
                bytes,
                seconds: total,
                bits_per_second: bytes as f64 * 8.0 / total,
                ..SideTotals::default()
            }),
            sender: Some(totals),
        },
    };
    let mut latency = TestLatency::of(1, probe_interval, TIMESTAMPS, idle, loaded);
    latency.protocol = "http".into();
    Ok(WebTest {
        direction,
        intervals,
        sum,
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> WebStart {
        WebStart {
            timestamp: 1,
            flowlab_version: "0".into(),
            client: "192.0.2.1".into(),
            user_agent: "test".into(),
            http_version: "HTTP/1.1".into(),
            secure: false,
            congestion_server: Some("cubic".into()),
            streams: 4,
            seconds: 2.0,
        }
    }

    fn run(json: &str) -> Result<WebResult, BadRun> {
        serde_json::from_str::<BrowserRun>(json)
            .expect("a run")
            .judge(start(), Some(2_000_000))
    }

    const RUN: &str = r#"{
        "streams": 4, "seconds": 2, "probe_interval_seconds": 0.1,
        "idle": [{"sent_ms": 0, "rtt_ms": 10}, {"sent_ms": 100, "rtt_ms": 12},
                 {"sent_ms": 200, "rtt_ms": null}],
        "download": {"seconds": 2, "bytes": 7500000,
            "intervals": [{"start": 0, "end": 1, "bytes": 3750000},
                          {"start": 1, "end": 2, "bytes": 3750000}],
            "probes": [{"sent_ms": 50, "rtt_ms": 40}, {"sent_ms": 1500, "rtt_ms": 60}]},
        "upload": {"seconds": 2, "bytes": 2500000,
            "intervals": [{"start": 0, "end": 1, "bytes": 1250000}],
            "probes": []}
    }"#;

    #[test]
    fn a_run_is_summed_and_judged_as_flowlab_test_does() {
        let doc = run(RUN).expect("a result");
        assert_eq!(doc.schema, SCHEMA);
        let [down, up] = &doc.tests[..] else {
            panic!("two directions")
        };
        assert_eq!(down.direction, StreamDirection::Down);
        let r = down.sum.receiver.as_ref().expect("the page received");
        assert_eq!(r.bits_per_second, 30e6);
        assert!(down.sum.sender.is_none());
        assert_eq!(down.intervals[1].sums[0].bits_per_second, 30e6);
        // Each interval's latency is of the replies that arrived in it.
        assert_eq!(
            down.intervals[0].latency.as_ref().map(|l| l.samples),
            Some(1)
        );
        assert_eq!(down.latency.protocol, "http");
        assert_eq!(down.latency.idle.sent, 3);
        assert_eq!(down.latency.idle.lost, 1);
        let idle = down.latency.idle.rtt.as_ref().expect("idle rtt");
        assert!((idle.min_ms - 10.0).abs() < 0.01, "{idle:?}");
        assert_eq!(down.latency.loaded.received, 2);
        // 40 and 60 ms loaded against an idle p99 of 12: a queue.
        assert_eq!(down.latency.queue_building, Some(true));
        assert_eq!(
            up.sum.sender.as_ref().map(|s| s.bits_per_second),
            Some(10e6)
        );
        // What the server received of the upload, over the same time.
        assert_eq!(
            up.sum.receiver.as_ref().map(|s| s.bits_per_second),
            Some(8e6)
        );
        assert!(up.latency.loaded.rtt.is_none());
        assert_eq!(up.latency.queue_building, None);
        // The document reads back as written.
        let text = serde_json::to_string(&doc).expect("JSON");
        let back: WebResult = serde_json::from_str(&text).expect("reads back");
        assert_eq!(back.start, doc.start);
    }

    #[test]
    fn a_run_that_cannot_be_a_result_names_its_field() {
        let with = |from: &str, to: &str| {
            assert!(RUN.contains(from), "{from}");
            run(&RUN.replacen(from, to, 1)).expect_err("refused")
        };
        assert_eq!(with(r#""streams": 4"#, r#""streams": 0"#).field, "streams");
        assert_eq!(
            with(r#""start": 1, "end": 2"#, r#""start": 0.5, "end": 2"#).field,
            "download.intervals[1]"
        );
        assert_eq!(
            with(
                r#""end": 2, "bytes": 3750000"#,
                r#""end": 3, "bytes": 3750000"#
            )
            .field,
            "download.intervals[1]"
        );
        assert_eq!(
            with(r#""bytes": 7500000"#, r#""bytes": 7499999"#).field,
            "download.bytes"
        );
        assert_eq!(
            with(
                r#""sent_ms": 100, "rtt_ms": 12"#,
                r#""sent_ms": -1, "rtt_ms": 12"#
            )
            .field,
            "idle[1].sent_ms"
        );
        assert_eq!(
            with(r#""upload": {"seconds": 2"#, r#""upload": {"seconds": 0"#).field,
            "upload.seconds"
        );
        // Fields it does not know are refused, not dropped.
        let unknown = serde_json::from_str::<BrowserRun>(&RUN.replacen(
            r#""streams": 4"#,
            r#""streams": 4, "stream": 1"#,
            1,
        ));
        assert!(unknown.is_err());
    }
}
