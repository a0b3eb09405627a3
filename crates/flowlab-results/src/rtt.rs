//! What an RTT step of a study measured: ICMP echoes from one node to a host, each
//! sample from just before the send to the kernel's arrival stamp of its reply.

use serde::{Deserialize, Serialize};

/// Echoes sent one at a time, `interval_ms` apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttResult {
    /// `flowlab.rtt/1`.
    pub schema: String,
    pub to: String,
    pub sent: u64,
    pub interval_ms: f64,
    /// How long a reply was waited for.
    pub timeout_ms: f64,
    /// Each reply's RTT, in the order sent (a lost echo has none).
    pub samples_ms: Vec<f64>,
    pub lost_percent: f64,
    pub min_ms: Option<f64>,
    pub median_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// Unix seconds of the first echo (steps of a group compare their starts).
    pub started: f64,
}

/// The nearest-rank quantile `q` of sorted `v`.
fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

impl RttResult {
    /// The result of `sent` echoes to `to` whose replies took `samples_ms`.
    pub fn new(
        to: &str,
        sent: u64,
        (interval_ms, timeout_ms): (f64, f64),
        samples_ms: Vec<f64>,
        started: f64,
    ) -> RttResult {
        let mut sorted = samples_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let lost = sent.saturating_sub(samples_ms.len() as u64);
        RttResult {
            schema: "flowlab.rtt/1".into(),
            to: to.into(),
            sent,
            interval_ms,
            timeout_ms,
            lost_percent: crate::result::percent(lost, sent),
            min_ms: sorted.first().copied(),
            median_ms: quantile(&sorted, 0.5),
            p95_ms: quantile(&sorted, 0.95),
            max_ms: sorted.last().copied(),
            samples_ms,
            started,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank_and_loss() {
        let r = RttResult::new(
            "10.0.0.1",
            5,
            (100.0, 1000.0),
            vec![4.0, 1.0, 3.0, 2.0],
            0.0,
        );
        assert_eq!((r.min_ms, r.max_ms), (Some(1.0), Some(4.0)));
        // Ranks: median ⌈0.5·4⌉ = 2nd → 2; p95 ⌈0.95·4⌉ = 4th → 4.
        assert_eq!((r.median_ms, r.p95_ms), (Some(2.0), Some(4.0)));
        assert_eq!(r.lost_percent, 20.0);
        let none = RttResult::new("h", 3, (1.0, 1.0), Vec::new(), 0.0);
        assert_eq!((none.median_ms, none.lost_percent), (None, 100.0));
    }
}
