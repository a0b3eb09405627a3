//! `flowlab net check`'s verdict on one measured path (sans-IO): the fidelity bounds of
//! issue 5 applied to what was measured against what the topology file implies.

use std::time::Duration;

use crate::topology::PathInfo;

/// Measured RTT may differ from the implied one by this much.
pub const RTT_TOLERANCE: Duration = Duration::from_millis(1);
/// Measured throughput must lie within these shares of the bottleneck rate.
pub const RATE_LOW: f64 = 0.90;
pub const RATE_HIGH: f64 = 1.02;
/// Queues holding less than this share of a path's bandwidth-delay product are shallow:
/// a loss-based TCP may not fill the path (said beside a rate short of the bottleneck).
pub const SHALLOW: f64 = 1.0;
/// Measured random loss may differ from the configured one by this share of it.
pub const LOSS_TOLERANCE: f64 = 0.20;

/// What `net check` measured on a path; `None` where it did not measure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measured {
    /// RTT of the idle path (median of small probes).
    pub rtt: Option<Duration>,
    /// TCP throughput, bits per second.
    pub bps: f64,
    /// The highest RTT while the TCP test filled the path (shown, not judged: one echo
    /// held up by the host's scheduling is enough to raise it).
    pub loaded_rtt: Option<Duration>,
    /// The 95th percentile of the RTT while the TCP test ran (judged against the queue
    /// bound).
    pub loaded_rtt_p95: Option<Duration>,
    /// The median RTT while the TCP test ran.
    pub loaded_rtt_median: Option<Duration>,
    /// The 95th percentile of echoes to the source's own loopback while the TCP test
    /// ran: how long the busy host itself held an echo (its softirq backlog, its
    /// scheduling), which no queue of the file explains and the queue bound allows.
    pub host_delay_p95: Option<Duration>,
    /// What the user-space emulator's own waiting for a CPU added to an echo while the
    /// TCP test ran: the 95th percentile of the sum of its frames' lateness over the
    /// links the echo crosses, there and back ([`quantile_of_sum`]; `None` without an
    /// emulator). The host's delay, not the topology's: the queue bound allows it.
    pub emulator_late_p95: Option<Duration>,
    /// The same sum's 99th percentile: reported, not judged.
    pub emulator_late_p99: Option<Duration>,
    /// The 99th percentile of the same sum taken over the part of each frame's lateness
    /// that passed while the emulator's thread was in its poll (its wake-ups'; see
    /// `forward::Counters::woke_late_histogram`): at most `emulator_late_p99`, but for a
    /// snapshot's non-atomic reads; the rest passed while the thread was up. Reported,
    /// not judged; `None` without an emulator or from one older than the split.
    pub emulator_woke_late_p99: Option<Duration>,
    /// How late the emulator's threads of the links the echo crosses came back from
    /// their sleeps after the time they asked for (`forward::LinkStats::
    /// wakeup_late_since`), 99th percentile over their wake-ups pooled (on the same 10 µs
    /// grid): the host's scheduler as the emulator met it under the load. Reported, not
    /// judged; `None` without an emulator, when no sleep of theirs ended at or after
    /// its time, or from an emulator that did not count them.
    pub emulator_wakeup_late_p99: Option<Duration>,
    /// Share of UDP datagrams lost.
    pub loss: Option<f64>,
    /// The path carried other pairs' traffic too (`net check --together`): its rate is
    /// not held to the bottleneck.
    pub shared: bool,
}

/// The bottleneck rate a path's TCP throughput is judged against, if any: random loss
/// caps TCP below the link rate (Mathis et al.), so a lossy path has none, nor has a path
/// that other pairs shared, nor an unshaped one.
pub fn judged_rate(implied: &PathInfo, m: &Measured) -> Option<u64> {
    implied
        .bottleneck_bps
        .filter(|_| implied.loss == 0.0 && !m.shared)
}

/// The rates a path's TCP throughput is held within, bits per second: from
/// [`RATE_LOW`] of its floor (the judged rate, or on a path relayed across a shared
/// medium the rate with the sender and the access point contending) to [`RATE_HIGH`]
/// of its ceiling (the judged rate, or on a shared medium the rate without
/// acknowledgements on the air).
///
/// Beside busy stations a path has no floor: they contend with the TCP flow as other
/// flows would, and what TCP keeps of its turns depends on its own dynamics (its
/// acknowledgements wait for the air too).
pub fn rate_bounds(implied: &PathInfo, m: &Measured) -> Option<[f64; 2]> {
    let r = judged_rate(implied, m)?;
    let floor = implied.rate_floor_bps.unwrap_or(r).min(r);
    let ceiling = implied.rate_ceiling_bps.unwrap_or(r).max(r);
    let low = if implied.busy_stations > 0 {
        0.0
    } else {
        RATE_LOW * floor as f64
    };
    Some([low, RATE_HIGH * ceiling as f64])
}

/// The loss a path with configured random loss may show, as a fraction: the configured
/// loss ± [`LOSS_TOLERANCE`] of it; `None` without configured loss.
pub fn loss_bounds(implied: &PathInfo) -> Option<[f64; 2]> {
    (implied.loss > 0.0).then_some([
        implied.loss * (1.0 - LOSS_TOLERANCE),
        implied.loss * (1.0 + LOSS_TOLERANCE),
    ])
}

/// The most the RTT under load may reach: the idle RTT as measured (the file's where it
/// was not measured), every full queue on the way there, and the host's own delay under
/// the same load ([`Measured::host_delay_p95`], [`Measured::emulator_late_p95`]). Judged
/// with [`RTT_TOLERANCE`] on top.
pub fn queue_bound(implied: &PathInfo, m: &Measured) -> Duration {
    m.rtt.unwrap_or(implied.rtt)
        + implied.queue_delay
        + m.host_delay_p95.unwrap_or_default()
        + m.emulator_late_p95.unwrap_or_default()
}

/// The `q` quantile of a sum of independent delays, each given as (delay, count) pairs
/// (its histogram): the delays one packet meets at each stage of its way, when each
/// stage's may come at any time. `None` when some stage has no count.
///
/// Not the sum of each stage's quantile, which is as if every stage were slow at once:
/// four stages late by 10 ms one time in five each make a 95th percentile of 20 ms, not
/// 40. Computed on a 10 µs grid, each delay rounded up to it.
pub fn quantile_of_sum(stages: &[Vec<(Duration, u64)>], q: f64) -> Option<Duration> {
    const GRID_US: f64 = 10.0;
    let mut sum = vec![1.0f64];
    for stage in stages {
        let total: u64 = stage.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return None;
        }
        let steps: Vec<(usize, f64)> = stage
            .iter()
            .map(|&(d, n)| {
                let step = (d.as_secs_f64() * 1e6 / GRID_US).ceil() as usize;
                (step, n as f64 / total as f64)
            })
            .collect();
        let longest = steps.iter().map(|(s, _)| *s).max().unwrap_or(0);
        let mut next = vec![0.0; sum.len() + longest];
        for (i, p) in sum.iter().enumerate().filter(|(_, p)| **p > 0.0) {
            for &(s, ps) in &steps {
                next[i + s] += p * ps;
            }
        }
        sum = next;
    }
    let mut seen = 0.0;
    // A hair under q, so that float rounding of an exact q does not skip a step.
    let step = sum.iter().position(|p| {
        seen += p;
        seen >= q - 1e-9
    })?;
    Some(Duration::from_secs_f64(step as f64 * GRID_US / 1e6))
}

/// What falls outside the bounds, one phrase each (empty: the path is as the file says).
/// An unshaped path has no rate to miss, nor has one with random loss (TCP cannot fill
/// it); what was not measured is not judged; loss is judged only on paths with
/// configured loss.
pub fn deviations(implied: &PathInfo, m: &Measured) -> Vec<String> {
    let mut out = Vec::new();
    // Busy stations hold the air as long as DCF's backoff decides: no bound on the RTT.
    let rtt_judged = implied.busy_stations == 0;
    if let Some(rtt) = m.rtt.filter(|_| rtt_judged) {
        let off = rtt.as_secs_f64() - implied.rtt.as_secs_f64();
        if off.abs() > RTT_TOLERANCE.as_secs_f64() {
            out.push(format!("RTT off by {:.1} ms", off * 1000.0));
        }
    }
    if let (Some(r), Some([low, high])) = (judged_rate(implied, m), rate_bounds(implied, m)) {
        let share = m.bps / r as f64;
        if !(low..=high).contains(&m.bps) {
            // The bottleneck's queue against the path's bandwidth-delay product, in
            // time: a loss-based sender needs (1 − β)/β of a BDP of queue to keep the
            // link busy after it backs off (reno: one BDP, the rule of thumb; cubic:
            // 0.43 in steady state, more after slow start's overshoot into a tail-drop
            // queue), so below one BDP a rate short of the bottleneck may be TCP's, not
            // the emulation's.
            let depth = implied.bottleneck_queue_delay.as_secs_f64() / implied.rtt.as_secs_f64();
            out.push(if share < RATE_LOW && depth < SHALLOW {
                format!(
                    "throughput {:.0} % of the bottleneck (its queue holds {:.2} of the path's \
                     bandwidth-delay product: a loss-based TCP may not fill it)",
                    share * 100.0,
                    depth
                )
            } else {
                format!("throughput {:.0} % of the bottleneck", share * 100.0)
            });
        }
    }
    // Only a rate limit makes a queue (elsewhere the bound would be the hosts' own
    // buffers, which the file does not describe).
    if let (Some(loaded), Some(_), true) = (m.loaded_rtt_p95, implied.bottleneck_bps, rtt_judged) {
        let bound = queue_bound(implied, m) + RTT_TOLERANCE;
        if loaded > bound {
            out.push(format!(
                "RTT under load (95th percentile) {:.1} ms, above the queue bound {:.1} ms",
                loaded.as_secs_f64() * 1000.0,
                bound.as_secs_f64() * 1000.0
            ));
        }
    }
    if let (Some(loss), Some([low, high])) = (m.loss, loss_bounds(implied)) {
        if !(low..=high).contains(&loss) {
            out.push(format!(
                "loss {:.2} % instead of {:.2} %",
                loss * 100.0,
                implied.loss * 100.0
            ));
        }
    }
    out
}

/// Max-min fair shares of flows that run together: each flow is the (link, direction)
/// hops it crosses, and each hop's capacity is its rate (`None`: unlimited). Water
/// filling: all flows grow together; when a hop fills, its flows are frozen at their
/// share, and the rest grow on. A flow that crosses no limited hop gets `None`.
pub fn max_min_shares(
    flows: &[Vec<(usize, bool)>],
    capacity: impl Fn(usize, bool) -> Option<u64>,
) -> Vec<Option<f64>> {
    let mut share: Vec<Option<f64>> = vec![None; flows.len()];
    let mut frozen: Vec<bool> = flows
        .iter()
        .map(|f| f.iter().all(|&(l, d)| capacity(l, d).is_none()))
        .collect();
    let mut hops: Vec<(usize, bool)> = flows.iter().flatten().copied().collect();
    hops.sort_unstable();
    hops.dedup();
    let mut level = 0.0;
    while frozen.iter().any(|f| !f) {
        // The hop that fills first as the unfrozen flows grow from `level`.
        let mut next: Option<(f64, (usize, bool))> = None;
        for &hop in &hops {
            let Some(cap) = capacity(hop.0, hop.1) else {
                continue;
            };
            let users = |fz: bool| {
                flows
                    .iter()
                    .zip(&frozen)
                    .enumerate()
                    .filter(move |(_, (f, z))| f.contains(&hop) && **z == fz)
                    .map(|(i, _)| i)
            };
            let growing = users(false).count();
            if growing == 0 {
                continue;
            }
            let used: f64 = users(true).filter_map(|i| share[i]).sum();
            let fill = (cap as f64 - used) / growing as f64;
            if next.is_none_or(|(f, _)| fill < f) {
                next = Some((fill, hop));
            }
        }
        let Some((fill, hop)) = next else { break };
        level = fill.max(level);
        for (i, f) in flows.iter().enumerate() {
            if !frozen[i] && f.contains(&hop) {
                frozen[i] = true;
                share[i] = Some(level);
            }
        }
    }
    share
}

/// Jain's fairness index of `rates`: (Σx)² / (n Σx²), 1 when all are equal, 1/n when one
/// takes everything.
pub fn jain_index(rates: &[f64]) -> Option<f64> {
    let sum: f64 = rates.iter().sum();
    let squares: f64 = rates.iter().map(|x| x * x).sum();
    (squares > 0.0).then(|| sum * sum / (rates.len() as f64 * squares))
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
            queue_delay: Duration::from_millis(40),
            bottleneck_queue_delay: Duration::from_millis(40),
            loss: 0.0,
            rate_ceiling_bps: None,
            rate_floor_bps: None,
            busy_stations: 0,
            on_air: false,
        }
    }

    fn measured(rtt_us: Option<u64>, bps: f64) -> Measured {
        Measured {
            rtt: rtt_us.map(Duration::from_micros),
            bps,
            ..Measured::default()
        }
    }

    #[test]
    fn beside_busy_stations_rtts_are_not_judged_and_the_rate_has_no_floor() {
        let mut p = path(10, Some(10_000_000));
        p.rate_ceiling_bps = Some(12_000_000);
        // Off by 30 ms idle, far over the queue bound loaded, a fifth of the rate.
        let m = Measured {
            loaded_rtt_p95: Some(Duration::from_millis(500)),
            ..measured(Some(40_000), 2_000_000.0)
        };
        assert_eq!(deviations(&p, &m).len(), 3, "{:?}", deviations(&p, &m));
        p.busy_stations = 4;
        assert_eq!(deviations(&p, &m), Vec::<String>::new());
        assert_eq!(rate_bounds(&p, &m), Some([0.0, RATE_HIGH * 12e6]));
        // Above the ceiling is still out of bounds.
        let fast = measured(Some(40_000), 13e6);
        assert_eq!(
            deviations(&p, &fast).len(),
            1,
            "{:?}",
            deviations(&p, &fast)
        );
    }

    #[test]
    fn shares_fill_the_tightest_link_first() {
        // Seed 001: L1 (link 0) 40M, L2 (1) 30M, L3 (2) 20M, all crossed forward.
        let cap = |l: usize, _: bool| Some([40_000_000, 30_000_000, 20_000_000][l]);
        let l1l2 = vec![(0, true), (1, true)];
        let l2l3 = vec![(1, true), (2, true)];
        let l3 = vec![(2, true)];
        // Two or three pairs over L1 and L2 split L2.
        assert_eq!(
            max_min_shares(&[l1l2.clone(), l1l2.clone()], cap),
            [Some(15e6), Some(15e6)]
        );
        assert_eq!(
            max_min_shares(&[l1l2.clone(), l1l2.clone(), l1l2.clone()], cap),
            [Some(10e6); 3]
        );
        // h1-h4 and h7-h9 share only L2: 15 each (L3's 20 does not bind).
        assert_eq!(
            max_min_shares(&[l1l2.clone(), l2l3.clone()], cap),
            [Some(15e6), Some(15e6)]
        );
        // h1-h4 and h8-h9 share nothing: each gets its own bottleneck.
        assert_eq!(
            max_min_shares(&[l1l2.clone(), l3.clone()], cap),
            [Some(30e6), Some(20e6)]
        );
        // A flow held back elsewhere (by a 5 Mbit/s link) leaves the rest of a shared
        // 30 Mbit/s link to the others: (30 − 5) / 2 each.
        let cap2 = |l: usize, _: bool| Some([5_000_000, 30_000_000][l]);
        let shares = max_min_shares(
            &[vec![(0, true), (1, true)], vec![(1, true)], vec![(1, true)]],
            cap2,
        );
        assert_eq!(shares, [Some(5e6), Some(12.5e6), Some(12.5e6)]);
        // Unlimited paths have no share; directions are separate hops.
        let none = |_: usize, d: bool| d.then_some(10_000_000);
        assert_eq!(
            max_min_shares(&[vec![(0, false)], vec![(0, true)]], none),
            [None, Some(10e6)]
        );
    }

    #[test]
    fn jain_is_one_for_equal_rates_and_one_over_n_for_a_hog() {
        assert_eq!(jain_index(&[5.0, 5.0, 5.0]), Some(1.0));
        assert!((jain_index(&[9.0, 0.0, 0.0]).unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(jain_index(&[]), None);
    }

    #[test]
    fn within_the_bounds_nothing_is_flagged() {
        let p = path(60, Some(30_000_000));
        assert!(deviations(&p, &measured(Some(60_900), 27_100_000.0)).is_empty());
        assert!(deviations(&p, &measured(None, 30_600_000.0)).is_empty());
        // An unshaped path has no bottleneck to miss.
        assert!(deviations(&path(0, None), &measured(Some(0), 19e9)).is_empty());
        // A full queue: 60 + 40 ms, plus the tolerance.
        let full = Measured {
            loaded_rtt_p95: Some(Duration::from_micros(100_900)),
            // The highest is not judged.
            loaded_rtt: Some(Duration::from_micros(150_000)),
            ..measured(Some(60_000), 29e6)
        };
        assert!(deviations(&p, &full).is_empty());
        let lossy = PathInfo {
            loss: 0.05,
            ..path(60, None)
        };
        let m = Measured {
            loss: Some(0.0590),
            ..measured(None, 0.0)
        };
        assert!(deviations(&lossy, &m).is_empty());
        // Nor is a lossy path's throughput held to its rate.
        let lossy_limited = PathInfo {
            loss: 0.05,
            ..path(10, Some(50_000_000))
        };
        assert!(deviations(&lossy_limited, &measured(None, 20e6)).is_empty());
    }

    #[test]
    fn outside_them_each_miss_is_named() {
        // A queue of one BDP: a shortfall is not TCP's to explain.
        let deep = PathInfo {
            bottleneck_queue_delay: Duration::from_millis(60),
            ..path(60, Some(30_000_000))
        };
        let d = deviations(&deep, &measured(Some(61_200), 26_000_000.0));
        assert_eq!(
            d,
            ["RTT off by 1.2 ms", "throughput 87 % of the bottleneck"]
        );
        let p = path(60, Some(30_000_000));
        let d = deviations(&p, &measured(Some(61_200), 26_000_000.0));
        assert_eq!(
            d,
            [
                "RTT off by 1.2 ms",
                "throughput 87 % of the bottleneck (its queue holds 0.67 of the path's \
              bandwidth-delay product: a loss-based TCP may not fill it)"
            ]
        );
        let d = deviations(&p, &measured(Some(58_000), 31_000_000.0));
        assert_eq!(
            d,
            ["RTT off by -2.0 ms", "throughput 103 % of the bottleneck"]
        );
        // Seed 001's h1–h9: 16 packets of queue on L3 (9.7 ms) against an 80 ms RTT.
        let shallow = PathInfo {
            bottleneck_queue_delay: Duration::from_micros(9_690),
            ..path(80, Some(20_000_000))
        };
        assert_eq!(
            deviations(&shallow, &measured(None, 17.8e6)),
            [
                "throughput 89 % of the bottleneck (its queue holds 0.12 of the path's \
              bandwidth-delay product: a loss-based TCP may not fill it)"
            ]
        );
        let over = Measured {
            loaded_rtt_p95: Some(Duration::from_micros(101_100)),
            ..measured(None, 29e6)
        };
        // Without a rate limit there is no queue to bound.
        assert!(deviations(&path(60, None), &over).is_empty());
        assert_eq!(
            deviations(&p, &over),
            ["RTT under load (95th percentile) 101.1 ms, above the queue bound 101.0 ms"]
        );
        // The bound starts from the idle RTT as measured, and allows the host's own delay
        // under the load: 60.5 + 40 + 0.4 ms, plus the tolerance.
        let busy = Measured {
            loaded_rtt_p95: Some(Duration::from_micros(101_800)),
            host_delay_p95: Some(Duration::from_micros(400)),
            ..measured(Some(60_500), 29e6)
        };
        assert_eq!(queue_bound(&p, &busy), Duration::from_micros(100_900));
        assert!(deviations(&p, &busy).is_empty());
        let busier = Measured {
            loaded_rtt_p95: Some(Duration::from_micros(102_000)),
            ..busy
        };
        assert_eq!(
            deviations(&p, &busier),
            ["RTT under load (95th percentile) 102.0 ms, above the queue bound 101.9 ms"]
        );
        // An emulator that waited for a CPU: its lateness, added up over the crossings,
        // is allowed too.
        let late = Measured {
            emulator_late_p95: Some(Duration::from_micros(2_000)),
            ..busier.clone()
        };
        assert_eq!(queue_bound(&p, &late), Duration::from_micros(102_900));
        assert!(deviations(&p, &late).is_empty());
        let lossy = PathInfo {
            loss: 0.05,
            ..path(60, None)
        };
        for (loss, says) in [
            (0.0610, "loss 6.10 % instead of 5.00 %"),
            (0.0390, "loss 3.90 % instead of 5.00 %"),
        ] {
            let m = Measured {
                loss: Some(loss),
                ..measured(None, 0.0)
            };
            assert_eq!(deviations(&lossy, &m), [says]);
        }
        // Loss is not judged where none is configured.
        let m = Measured {
            loss: Some(0.3),
            ..measured(None, 29e6)
        };
        assert!(deviations(&p, &m).is_empty());
    }

    #[test]
    fn the_quantile_of_a_sum_is_not_the_sum_of_quantiles() {
        let ms = Duration::from_millis;
        // Four stages, each 10 ms late one time in five: 95 % of packets meet at most
        // two late stages (1 − P(3 or 4 of 4) = 0.9728; with at most one, 0.8192).
        let stage = vec![(ms(0), 80), (ms(10), 20)];
        assert_eq!(quantile_of_sum(&vec![stage.clone(); 4], 0.95), Some(ms(20)));
        assert_eq!(quantile_of_sum(&vec![stage.clone(); 4], 0.80), Some(ms(10)));
        // One stage: its own quantile, rounded up to the 10 µs grid.
        let one = vec![
            (Duration::from_micros(95), 95),
            (Duration::from_micros(3_001), 5),
        ];
        assert_eq!(
            quantile_of_sum(std::slice::from_ref(&one), 0.95),
            Some(Duration::from_micros(100))
        );
        assert_eq!(
            quantile_of_sum(std::slice::from_ref(&one), 0.96),
            Some(Duration::from_micros(3_010))
        );
        // No stages: nothing added; a stage that saw nothing: unknown.
        assert_eq!(quantile_of_sum(&[], 0.95), Some(Duration::ZERO));
        assert_eq!(quantile_of_sum(&[one, Vec::new()], 0.95), None);
    }
}
