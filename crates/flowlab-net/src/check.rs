//! `flowlab net check`'s verdict on one measured path (sans-IO): the fidelity bounds of
//! issue 5 applied to what was measured against what the topology file implies.

use std::time::Duration;

use crate::topology::PathInfo;

/// Measured RTT may differ from the implied one by this much.
pub const RTT_TOLERANCE: Duration = Duration::from_millis(1);
/// Measured throughput must lie within these shares of the bottleneck rate.
pub const RATE_LOW: f64 = 0.90;
pub const RATE_HIGH: f64 = 1.02;

/// What falls outside the bounds, one phrase each (empty: the path is as the file says).
/// An unshaped path has no rate to miss; an RTT that could not be measured is not judged.
pub fn deviations(implied: &PathInfo, rtt: Option<Duration>, bps: f64) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = rtt {
        let off = m.as_secs_f64() - implied.rtt.as_secs_f64();
        if off.abs() > RTT_TOLERANCE.as_secs_f64() {
            out.push(format!("RTT off by {:.1} ms", off * 1000.0));
        }
    }
    if let Some(r) = implied.bottleneck_bps {
        let share = bps / r as f64;
        if !(RATE_LOW..=RATE_HIGH).contains(&share) {
            out.push(format!(
                "throughput {:.0} % of the bottleneck",
                share * 100.0
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(rtt_ms: u64, rate: Option<u64>) -> PathInfo {
        PathInfo {
            nodes: vec!["h1".into(), "h2".into()],
            hops: Vec::new(),
            rtt: Duration::from_millis(rtt_ms),
            bottleneck_bps: rate,
        }
    }

    #[test]
    fn within_the_bounds_nothing_is_flagged() {
        let p = path(60, Some(30_000_000));
        assert!(deviations(&p, Some(Duration::from_micros(60_900)), 27_100_000.0).is_empty());
        assert!(deviations(&p, None, 30_600_000.0).is_empty());
        // An unshaped path has no bottleneck to miss.
        assert!(deviations(&path(0, None), Some(Duration::ZERO), 19e9).is_empty());
    }

    #[test]
    fn outside_them_each_miss_is_named() {
        let p = path(60, Some(30_000_000));
        let d = deviations(&p, Some(Duration::from_micros(61_200)), 26_000_000.0);
        assert_eq!(
            d,
            ["RTT off by 1.2 ms", "throughput 87 % of the bottleneck"]
        );
        let d = deviations(&p, Some(Duration::from_millis(58)), 31_000_000.0);
        assert_eq!(
            d,
            ["RTT off by -2.0 ms", "throughput 103 % of the bottleneck"]
        );
    }
}
