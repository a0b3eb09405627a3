//! What `flowlab monitor` reports: the mesh it watches ([`MonitorStart`]), each run on a
//! path as it ends ([`PathRun`]), and how the watch ended ([`MonitorSummary`]). The
//! runner fills them in; the table, the JSON lines and the Prometheus metrics are made
//! from them.

use serde::{Deserialize, Serialize};

use crate::ping::Latency;

/// What a mesh's run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathKind {
    /// UDP echoes to the target's `flowlab serve` (`flowlab ping`).
    Latency,
    /// A TCP test from the source to the target's `flowlab serve` (`flowlab test`).
    Throughput,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Latency => "latency",
            PathKind::Throughput => "throughput",
        }
    }
}

/// The mesh being watched, once its servers listen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorStart {
    pub mesh: String,
    /// The topology whose nodes the hosts are (`None`: hosts over SSH), and whether the
    /// monitor brought it up (it takes it down when it ends) or found it up.
    pub topology: Option<String>,
    pub topology_ours: bool,
    pub hosts: Vec<String>,
    /// Each probe in words ("latency, 20 echoes, 6 pairs every 5 min").
    pub probes: Vec<String>,
    /// Draws each run's jitter: the same seed, the same schedule.
    pub seed: u64,
    /// The controller's clock when the schedule started, seconds since the Unix epoch.
    pub started_unix: f64,
    /// Each host's clock against the controller's, measured as it connected (hosts over
    /// SSH; a topology's nodes share this machine's clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clocks: Vec<ClockOffset>,
}

/// A host's clock against this one's, as Cristian's algorithm measures it: the host
/// reads its clock between two readings of ours; of several tries, the one with the
/// shortest round trip is kept. The host's clock is `offset_ms` ahead (behind when
/// negative), give or take `uncertainty_ms` (half that round trip: where in it the
/// host read its clock is unknown).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    pub host: String,
    pub offset_ms: f64,
    pub uncertainty_ms: f64,
    /// Readings tried.
    pub samples: u32,
}

impl ClockOffset {
    /// The offset of the reading `remote` (s) taken between our `before` and `after`
    /// (s), of the tries `(before, remote, after)` the one with the shortest round trip;
    /// `None` with no tries.
    pub fn best_of(host: &str, tries: &[(f64, f64, f64)]) -> Option<ClockOffset> {
        let (before, remote, after) = tries
            .iter()
            .copied()
            .min_by(|a, b| (a.2 - a.0).total_cmp(&(b.2 - b.0)))?;
        Some(ClockOffset {
            host: host.to_string(),
            offset_ms: (remote - (before + after) / 2.0) * 1e3,
            uncertainty_ms: (after - before) / 2.0 * 1e3,
            samples: tries.len() as u32,
        })
    }
}

/// A latency run's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathLatency {
    pub sent: u64,
    pub received: u64,
    pub loss_percent: f64,
    /// The round trips without the server's time; `None` when none came back.
    pub rtt: Option<Latency>,
    /// RFC 3550's interarrival jitter over the round trips, ms.
    pub jitter_ms: Option<f64>,
    /// Every echo's round trip, ms, in the order sent (lost ones left out): for the
    /// metrics' histogram, not the JSON lines (the percentiles above say it).
    #[serde(skip)]
    pub rtts_ms: Vec<f64>,
}

/// A throughput run's figures: the sender's and the receiver's totals, as iperf3's
/// end-of-test summary has them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathThroughput {
    pub sent_bytes: u64,
    pub sent_seconds: f64,
    pub received_bytes: u64,
    pub received_seconds: f64,
    /// The receiver's rate, bits per second.
    pub bits_per_second: f64,
    /// Segments the sender retransmitted; `None` where the kernel does not say.
    pub retransmits: Option<u64>,
    /// The sender's congestion control.
    pub congestion: Option<String>,
}

/// One run on a path, ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathRun {
    pub mesh: String,
    /// Its probe, by its place in the mesh file (from 0).
    pub probe: usize,
    pub kind: PathKind,
    /// Where it ran from, and the host it measured to.
    pub source: String,
    pub target: String,
    /// `forward`: the source sends (a throughput run's data, a latency run's echoes).
    pub direction: String,
    /// Its pair's round, from 0, counting rounds skipped.
    pub round: u64,
    /// The controller's clock when it started and ended, seconds since the Unix epoch.
    pub started_unix: f64,
    pub ended_unix: f64,
    /// How much later than its slot it started (its path busy, or another throughput run
    /// under way), seconds.
    pub late_seconds: f64,
    /// Why it failed; `None` when it measured.
    pub error: Option<String>,
    pub latency: Option<PathLatency>,
    pub throughput: Option<PathThroughput>,
    /// The flowlab command it ran, at the source.
    pub command: String,
}

impl PathRun {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// How a watch ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MonitorSummary {
    pub mesh: String,
    pub runs: u64,
    pub failed: u64,
    /// Rounds skipped because a pair's run ended after its next slot.
    pub skipped_rounds: u64,
    pub seconds: f64,
    /// Ended by Ctrl-C (else by `--for`).
    pub interrupted: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_the_shortest_round_trips() {
        // Ahead by 2.5 s: read 2.5 s after the midpoint of the 4 ms try; the 40 ms try
        // (its reading late in it) is not kept.
        let c = ClockOffset::best_of(
            "lon",
            &[(100.0, 102.539, 100.040), (200.0, 202.502, 200.004)],
        )
        .expect("an offset");
        assert!((c.offset_ms - 2500.0).abs() < 1e-6, "{c:?}");
        assert!((c.uncertainty_ms - 2.0).abs() < 1e-6, "{c:?}");
        assert_eq!(c.samples, 2);
        assert_eq!(ClockOffset::best_of("lon", &[]), None);
    }
}
