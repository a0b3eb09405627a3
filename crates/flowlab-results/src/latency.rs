//! Latency under load (`flowlab test --latency`): UDP probes to the server's echo before
//! the load (idle) and beside it (loaded), their summaries, and what the load added.
//! docs/latency.md defines each number.

use serde::{Deserialize, Serialize};

use crate::ping::{self, Latency, PingSummary, Probe};

/// What a test's latency probes measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TestLatency {
    /// `udp`.
    pub protocol: String,
    /// Bytes of each probe (UDP payload).
    pub size: usize,
    /// Seconds between probes.
    pub interval_seconds: f64,
    /// Where the client's send and receive times come from.
    pub timestamps: String,
    /// Probes before the load started, with nothing else running.
    pub idle: PingSummary,
    /// Probes while the load ran (from its first byte until it stopped).
    pub loaded: PingSummary,
    /// Loaded minus idle round trip, at the median and at p99, ms (`None` when either
    /// side has no round trip).
    pub added: Added,
    /// The load built a standing queue: the loaded median round trip is above the idle
    /// p99 by at least [`QUEUE_MS`] (`None` when either side has no round trip).
    pub queue_building: Option<bool>,
    /// Every loaded probe; `sent_ns` and `received_ns` are since the load started (the
    /// time axis of the test's intervals).
    pub probes: Vec<Probe>,
    /// Every idle probe, timed from the first one.
    #[serde(default)]
    pub idle_probes: Vec<Probe>,
}

/// How far above the idle p99 the loaded median must be to call it a queue, ms.
pub const QUEUE_MS: f64 = 1.0;

/// What the load added to the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Added {
    pub median_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl Added {
    /// Loaded minus idle, where both have round trips.
    pub fn between(idle: &PingSummary, loaded: &PingSummary) -> Added {
        let (i, l) = (idle.rtt.as_ref(), loaded.rtt.as_ref());
        Added {
            median_ms: i.zip(l).map(|(i, l)| l.median_ms - i.median_ms),
            p99_ms: i.zip(l).map(|(i, l)| l.p99_ms - i.p99_ms),
        }
    }
}

impl TestLatency {
    /// From the idle and the loaded probes (the loaded ones timed from the load's start).
    pub fn of(
        size: usize,
        interval_seconds: f64,
        timestamps: &str,
        idle_probes: Vec<Probe>,
        loaded: Vec<Probe>,
    ) -> TestLatency {
        let idle = PingSummary::of(&idle_probes);
        let summary = PingSummary::of(&loaded);
        let queue_building = idle
            .rtt
            .as_ref()
            .zip(summary.rtt.as_ref())
            .map(|(i, l)| l.median_ms >= i.p99_ms + QUEUE_MS);
        TestLatency {
            queue_building,
            protocol: "udp".into(),
            size,
            interval_seconds,
            timestamps: timestamps.into(),
            added: Added::between(&idle, &summary),
            idle,
            loaded: summary,
            probes: loaded,
            idle_probes,
        }
    }
}

/// The round trips of the replies that arrived from `start` to `end` (seconds since the
/// load started): an interval's latency.
pub fn arrived_between(probes: &[Probe], start: f64, end: f64) -> Option<Latency> {
    let (a, b) = ((start * 1e9) as u64, (end * 1e9) as u64);
    let rtts: Vec<u64> = probes
        .iter()
        .filter(|p| p.received_ns.is_some_and(|r| (a..b).contains(&r)))
        .filter_map(Probe::rtt_ns)
        .collect();
    ping::latency(&rtts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(seq: u64, sent_ms: u64, rtt_ms: Option<u64>) -> Probe {
        Probe {
            seq,
            sent_ns: sent_ms * 1_000_000,
            received_ns: rtt_ms.map(|r| (sent_ms + r) * 1_000_000),
            server_ns: rtt_ms.map(|_| 0),
            forward_ns: None,
            backward_ns: None,
            duplicates: 0,
            reordered: false,
        }
    }

    #[test]
    fn the_load_adds_the_difference_of_the_percentiles() {
        let idle: Vec<Probe> = (1..=20).map(|i| probe(i, i * 10, Some(10))).collect();
        // Loaded: 40 ms for the first half second, 100 ms after; one lost.
        let loaded: Vec<Probe> = (1..=100)
            .map(|i| {
                let sent = i * 10;
                let rtt = if i == 50 {
                    None
                } else if sent < 500 {
                    Some(40)
                } else {
                    Some(100)
                };
                probe(i, sent, rtt)
            })
            .collect();
        let l = TestLatency::of(64, 0.01, "test", idle.clone(), loaded);
        assert_eq!((l.loaded.sent, l.loaded.lost), (100, 1));
        let added = l.added;
        // The loaded median is 100 ms (51 of 99 round trips are 100 ms): +90 over idle.
        assert!((added.median_ms.unwrap() - 90.0).abs() < 0.1, "{added:?}");
        assert!((added.p99_ms.unwrap() - 90.0).abs() < 0.1, "{added:?}");
        // Replies that arrived in the first half second: sent at 10..=450 ms, 40 ms each.
        let first = arrived_between(&l.probes, 0.0, 0.5).expect("replies");
        assert_eq!(first.samples, 45);
        assert!((first.max_ms - 40.0).abs() < 0.1, "{first:?}");
        let late = arrived_between(&l.probes, 0.5, 1.2).expect("replies");
        // Then the last four 40 ms ones (sent at 460..=490 ms) and the fifty of 100 ms.
        assert!(
            (late.max_ms - 100.0).abs() < 0.1 && late.samples == 54,
            "{late:?}"
        );
        assert_eq!(arrived_between(&l.probes, 5.0, 6.0), None);
        assert_eq!(l.queue_building, Some(true));
        let calm: Vec<Probe> = (1..=100).map(|i| probe(i, i * 10, Some(10))).collect();
        let calm = TestLatency::of(64, 0.01, "test", idle, calm);
        assert_eq!(calm.queue_building, Some(false));
        assert_eq!(
            TestLatency::of(64, 0.01, "t", Vec::new(), Vec::new()).queue_building,
            None
        );
        let none = Added::between(&PingSummary::of(&[]), &l.loaded);
        assert_eq!(
            none,
            Added {
                median_ms: None,
                p99_ms: None
            }
        );
    }
}
