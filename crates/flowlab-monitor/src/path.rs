//! A mesh's figures per path for Prometheus, from the runs `flowlab monitor` reports
//! ([`PathRun`]). Every series is labelled with the mesh, the source, the target and the
//! direction (`forward`: the source sends).
//!
//! - The latest run's figures, as gauges. A throughput run's are named as the iperf3
//!   Prometheus exporter names its own (`iperf3_sent_bytes` → `flowlab_path_sent_bytes`,
//!   `iperf3_received_seconds`, `iperf3_retransmits`, `iperf3_up`); a latency run's are
//!   its round trips' percentiles, its loss and its jitter.
//! - Rolling figures, as counters and a histogram, for PromQL's `rate` and
//!   `histogram_quantile` over any window: bytes, seconds and retransmits over every
//!   throughput run, echoes sent and received, every echo's round trip in
//!   `flowlab_path_rtt_seconds`, runs and failures by kind.

use flowlab_results::monitor::{PathKind, PathRun};
use prometheus::{
    CounterVec, Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry,
};

const PATH: [&str; 4] = ["mesh", "source", "target", "direction"];
const PATH_KIND: [&str; 5] = ["mesh", "source", "target", "direction", "kind"];
const PATH_STAT: [&str; 5] = ["mesh", "source", "target", "direction", "stat"];

/// A mesh's figures per path.
#[derive(Debug)]
pub struct PathMetrics {
    registry: Registry,
    up: IntGaugeVec,
    last_run: GaugeVec,
    runs: IntCounterVec,
    failures: IntCounterVec,
    sent_bytes: GaugeVec,
    sent_seconds: GaugeVec,
    received_bytes: GaugeVec,
    received_seconds: GaugeVec,
    retransmits: GaugeVec,
    throughput: GaugeVec,
    sent_bytes_total: IntCounterVec,
    sent_seconds_total: CounterVec,
    received_bytes_total: IntCounterVec,
    received_seconds_total: CounterVec,
    retransmits_total: IntCounterVec,
    rtt_latest: GaugeVec,
    loss: GaugeVec,
    jitter: GaugeVec,
    echoes_sent: IntCounterVec,
    echoes_received: IntCounterVec,
    rtt: HistogramVec,
}

/// The bounds of `flowlab_path_rtt_seconds`'s buckets: from 100 µs up by half again each
/// (an interpolated percentile is within a quarter of the truth), to about 6 s.
fn rtt_buckets() -> Vec<f64> {
    prometheus::exponential_buckets(1e-4, 1.5, 28).unwrap_or_default()
}

impl PathMetrics {
    /// Every family registered; a path's series appear with its first run. Fails only
    /// if a name here were not a valid metric name.
    pub fn new() -> prometheus::Result<PathMetrics> {
        let registry = Registry::new();
        let gauge = |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<GaugeVec> {
            let g = GaugeVec::new(Opts::new(name, help), labels)?;
            registry.register(Box::new(g.clone()))?;
            Ok(g)
        };
        let counter =
            |name: &str, help: &str, labels: &[&str]| -> prometheus::Result<IntCounterVec> {
                let c = IntCounterVec::new(Opts::new(name, help), labels)?;
                registry.register(Box::new(c.clone()))?;
                Ok(c)
            };
        let seconds = |name: &str, help: &str| -> prometheus::Result<CounterVec> {
            let c = CounterVec::new(Opts::new(name, help), &PATH)?;
            registry.register(Box::new(c.clone()))?;
            Ok(c)
        };
        let up = IntGaugeVec::new(
            Opts::new(
                "flowlab_path_up",
                "Whether the path's latest run of the kind measured (1) or failed (0).",
            ),
            &PATH_KIND,
        )?;
        registry.register(Box::new(up.clone()))?;
        let rtt = HistogramVec::new(
            HistogramOpts::new(
                "flowlab_path_rtt_seconds",
                "Every echo's round trip without the server's time, over every latency run.",
            )
            .buckets(rtt_buckets()),
            &PATH,
        )?;
        registry.register(Box::new(rtt.clone()))?;
        let build = IntGaugeVec::new(
            Opts::new(
                "flowlab_build_info",
                "The flowlab that monitors (always 1).",
            ),
            &["version"],
        )?;
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        registry.register(Box::new(build))?;
        Ok(PathMetrics {
            up,
            last_run: gauge(
                "flowlab_path_last_run_timestamp_seconds",
                "When the path's latest run of the kind ended (Unix time).",
                &PATH_KIND,
            )?,
            runs: counter(
                "flowlab_path_runs_total",
                "Runs on the path, measured or failed, by kind.",
                &PATH_KIND,
            )?,
            failures: counter(
                "flowlab_path_failures_total",
                "Runs on the path that failed (no figures), by kind.",
                &PATH_KIND,
            )?,
            sent_bytes: gauge(
                "flowlab_path_sent_bytes",
                "Bytes the sender sent in the latest throughput run.",
                &PATH,
            )?,
            sent_seconds: gauge(
                "flowlab_path_sent_seconds",
                "The sender's duration of the latest throughput run.",
                &PATH,
            )?,
            received_bytes: gauge(
                "flowlab_path_received_bytes",
                "Bytes the receiver received in the latest throughput run.",
                &PATH,
            )?,
            received_seconds: gauge(
                "flowlab_path_received_seconds",
                "The receiver's duration of the latest throughput run.",
                &PATH,
            )?,
            retransmits: gauge(
                "flowlab_path_retransmits",
                "Segments the sender retransmitted in the latest throughput run.",
                &PATH,
            )?,
            throughput: gauge(
                "flowlab_path_throughput_bytes_per_second",
                "The receiver's rate in the latest throughput run (bytes, as Prometheus \
                 counts; times 8 for bits).",
                &PATH,
            )?,
            sent_bytes_total: counter(
                "flowlab_path_sent_bytes_total",
                "Bytes sent over every throughput run on the path.",
                &PATH,
            )?,
            sent_seconds_total: seconds(
                "flowlab_path_sent_seconds_total",
                "The senders' durations over every throughput run on the path.",
            )?,
            received_bytes_total: counter(
                "flowlab_path_received_bytes_total",
                "Bytes received over every throughput run on the path.",
                &PATH,
            )?,
            received_seconds_total: seconds(
                "flowlab_path_received_seconds_total",
                "The receivers' durations over every throughput run on the path.",
            )?,
            retransmits_total: counter(
                "flowlab_path_retransmits_total",
                "Segments retransmitted over every throughput run on the path.",
                &PATH,
            )?,
            rtt_latest: gauge(
                "flowlab_path_rtt_latest_seconds",
                "The latest latency run's round trips: min, median, p90, p99, max.",
                &PATH_STAT,
            )?,
            loss: gauge(
                "flowlab_path_loss_ratio",
                "The share of the latest latency run's echoes that were lost (0 to 1).",
                &PATH,
            )?,
            jitter: gauge(
                "flowlab_path_jitter_seconds",
                "The latest latency run's interarrival jitter (RFC 3550).",
                &PATH,
            )?,
            echoes_sent: counter(
                "flowlab_path_echoes_sent_total",
                "Echoes sent over every latency run on the path.",
                &PATH,
            )?,
            echoes_received: counter(
                "flowlab_path_echoes_received_total",
                "Echoes answered over every latency run on the path.",
                &PATH,
            )?,
            rtt,
            registry,
        })
    }

    /// Counts `run` and makes its figures the path's latest.
    pub fn observe(&self, run: &PathRun) {
        let path = [run.mesh.as_str(), &run.source, &run.target, &run.direction];
        let kind = [
            run.mesh.as_str(),
            &run.source,
            &run.target,
            &run.direction,
            run.kind.name(),
        ];
        self.runs.with_label_values(&kind).inc();
        self.up.with_label_values(&kind).set(i64::from(run.ok()));
        self.last_run.with_label_values(&kind).set(run.ended_unix);
        // At 0 from the path's first run, so a rate of failures is defined.
        let failures = self.failures.with_label_values(&kind);
        if !run.ok() {
            failures.inc();
        }
        match run.kind {
            PathKind::Throughput => {
                // A failed run's series stay at 0 until it first measures.
                self.sent_bytes_total.with_label_values(&path);
                let Some(t) = &run.throughput else { return };
                self.sent_bytes
                    .with_label_values(&path)
                    .set(t.sent_bytes as f64);
                self.sent_seconds
                    .with_label_values(&path)
                    .set(t.sent_seconds);
                self.received_bytes
                    .with_label_values(&path)
                    .set(t.received_bytes as f64);
                self.received_seconds
                    .with_label_values(&path)
                    .set(t.received_seconds);
                self.throughput
                    .with_label_values(&path)
                    .set(t.bits_per_second / 8.0);
                self.sent_bytes_total
                    .with_label_values(&path)
                    .inc_by(t.sent_bytes);
                self.sent_seconds_total
                    .with_label_values(&path)
                    .inc_by(t.sent_seconds);
                self.received_bytes_total
                    .with_label_values(&path)
                    .inc_by(t.received_bytes);
                self.received_seconds_total
                    .with_label_values(&path)
                    .inc_by(t.received_seconds);
                if let Some(r) = t.retransmits {
                    self.retransmits.with_label_values(&path).set(r as f64);
                    self.retransmits_total.with_label_values(&path).inc_by(r);
                }
            }
            PathKind::Latency => {
                let Some(l) = &run.latency else { return };
                self.echoes_sent.with_label_values(&path).inc_by(l.sent);
                self.echoes_received
                    .with_label_values(&path)
                    .inc_by(l.received);
                self.loss
                    .with_label_values(&path)
                    .set(l.loss_percent / 100.0);
                if let Some(j) = l.jitter_ms {
                    self.jitter.with_label_values(&path).set(j / 1e3);
                }
                let histogram = self.rtt.with_label_values(&path);
                for ms in &l.rtts_ms {
                    histogram.observe(ms / 1e3);
                }
                if let Some(rtt) = &l.rtt {
                    for (stat, ms) in [
                        ("min", rtt.min_ms),
                        ("median", rtt.median_ms),
                        ("p90", rtt.p90_ms),
                        ("p99", rtt.p99_ms),
                        ("max", rtt.max_ms),
                    ] {
                        let [m, s, t, d] = path;
                        self.rtt_latest
                            .with_label_values(&[m, s, t, d, stat])
                            .set(ms / 1e3);
                    }
                }
            }
        }
    }

    /// Every series in Prometheus's text format ([`crate::CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = Vec::new();
        // Encoding into memory fails only on a metric family without a name or type,
        // which `new` never registers.
        let _ = prometheus::TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowlab_results::monitor::{PathLatency, PathThroughput};
    use flowlab_results::ping::Latency;

    fn run(kind: PathKind) -> PathRun {
        PathRun {
            mesh: "lab".into(),
            probe: 0,
            kind,
            source: "h1".into(),
            target: "h2".into(),
            direction: "forward".into(),
            round: 0,
            started_unix: 1_000.0,
            ended_unix: 1_002.5,
            late_seconds: 0.0,
            error: None,
            latency: None,
            throughput: None,
            command: String::new(),
        }
    }

    /// The value of series `name{labels}` in `text`.
    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    }

    const PATH: &str = r#"direction="forward",mesh="lab",source="h1",target="h2""#;

    #[test]
    fn a_throughput_run_is_the_latest_and_adds_to_the_totals() {
        let m = PathMetrics::new().expect("metrics");
        let mut r = run(PathKind::Throughput);
        r.throughput = Some(PathThroughput {
            sent_bytes: 10_000_000,
            sent_seconds: 2.0,
            received_bytes: 9_900_000,
            received_seconds: 2.1,
            bits_per_second: 37_714_285.7,
            retransmits: Some(7),
            congestion: Some("cubic".into()),
        });
        m.observe(&r);
        m.observe(&r);
        let mut failed = run(PathKind::Throughput);
        failed.error = Some("refused".into());
        m.observe(&failed);
        let text = m.encode();
        assert_eq!(
            value(&text, &format!("flowlab_path_sent_bytes{{{PATH}}}")),
            1e7
        );
        assert_eq!(
            value(&text, &format!("flowlab_path_sent_bytes_total{{{PATH}}}")),
            2e7
        );
        assert_eq!(
            value(
                &text,
                &format!("flowlab_path_received_seconds_total{{{PATH}}}")
            ),
            4.2
        );
        assert_eq!(
            value(&text, &format!("flowlab_path_retransmits{{{PATH}}}")),
            7.0
        );
        assert_eq!(
            value(&text, &format!("flowlab_path_retransmits_total{{{PATH}}}")),
            14.0
        );
        let kind = r#"kind="throughput",mesh="lab",source="h1",target="h2""#;
        let kind = format!("{{direction=\"forward\",{kind}}}");
        assert_eq!(value(&text, &format!("flowlab_path_runs_total{kind}")), 3.0);
        assert_eq!(
            value(&text, &format!("flowlab_path_failures_total{kind}")),
            1.0
        );
        // The latest run failed: the path is down, its last figures stay.
        assert_eq!(value(&text, &format!("flowlab_path_up{kind}")), 0.0);
    }

    #[test]
    fn a_latency_runs_echoes_fill_the_histogram() {
        let m = PathMetrics::new().expect("metrics");
        let mut r = run(PathKind::Latency);
        r.latency = Some(PathLatency {
            sent: 4,
            received: 3,
            loss_percent: 25.0,
            rtt: Some(Latency {
                samples: 3,
                min_ms: 1.0,
                mean_ms: 2.0,
                median_ms: 2.0,
                p90_ms: 3.0,
                p99_ms: 3.0,
                p999_ms: 3.0,
                max_ms: 3.0,
                stdev_ms: 0.8,
            }),
            jitter_ms: Some(0.5),
            rtts_ms: vec![1.0, 2.0, 3.0],
        });
        m.observe(&r);
        let text = m.encode();
        assert_eq!(
            value(&text, &format!("flowlab_path_rtt_seconds_count{{{PATH}}}")),
            3.0
        );
        assert!(
            (value(&text, &format!("flowlab_path_rtt_seconds_sum{{{PATH}}}")) - 0.006).abs()
                < 1e-12
        );
        assert_eq!(
            value(&text, &format!("flowlab_path_loss_ratio{{{PATH}}}")),
            0.25
        );
        assert_eq!(
            value(&text, &format!("flowlab_path_jitter_seconds{{{PATH}}}")),
            0.0005
        );
        assert_eq!(
            value(
                &text,
                r#"flowlab_path_rtt_latest_seconds{direction="forward",mesh="lab",source="h1",stat="median",target="h2"}"#
            ),
            0.002
        );
        assert_eq!(
            value(
                &text,
                &format!("flowlab_path_echoes_received_total{{{PATH}}}")
            ),
            3.0
        );
    }
}
