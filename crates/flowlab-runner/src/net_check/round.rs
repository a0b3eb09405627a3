//! One round of a check: every pair measured (one at a time, or all at once with
//! `--together`) under one congestion control, each set beside what its path implies.

use std::net::Ipv4Addr;
use std::time::Duration;

use flowlab_net::check::{
    RTT_TOLERANCE, deviations, jain_index, loss_bounds, max_min_shares, queue_bound, rate_bounds,
};
use flowlab_net::topology::{PathInfo, Plan, Topology};
use flowlab_results::net::CheckedPath;

use super::Load;
use super::clients::Job;
use super::measure;
use super::pairs::Pair;
use crate::{Error, Place};

/// Measures every pair (one at a time, or all at once with `--together`) under `load`,
/// into rows; with `--together`, also Jain's index over the pairs.
pub fn measure(
    t: &Topology,
    pairs: &[Pair],
    paths: &[(PathInfo, Ipv4Addr)],
    load: &Load,
    place: &dyn Place,
) -> Result<(Vec<CheckedPath>, Option<f64>), Error> {
    let groups: Vec<Vec<usize>> = if load.together {
        vec![(0..pairs.len()).collect()]
    } else {
        (0..pairs.len()).map(|i| vec![i]).collect()
    };
    let mut measured: Vec<Option<measure::PairResult>> = (0..pairs.len()).map(|_| None).collect();
    let plan = Plan::of(t);
    let crossings: Vec<Vec<(&str, bool)>> = pairs
        .iter()
        .zip(paths)
        .map(|(p, (there, _))| {
            let back = plan
                .path(&p.to, &p.from)
                .map(|b| b.hops)
                .unwrap_or_default();
            there
                .hops
                .iter()
                .chain(&back)
                .map(|h| (t.links[h.link].name.as_str(), h.forward))
                .collect()
        })
        .collect();
    for group in groups {
        let jobs: Vec<Job<'_>> = group
            .iter()
            .enumerate()
            .map(|(k, &i)| Job {
                topo: &t.name,
                pair: &pairs[i],
                implied: &paths[i].0,
                to: paths[i].1,
                // One server port per pair of the group: 5201, 5202, …
                port: 5201 + k as u16,
                crossings: crossings[i].clone(),
                place,
            })
            .collect();
        for (i, m) in group.iter().zip(measure::measure(&jobs, load)?) {
            measured[*i] = Some(m);
        }
    }
    // Fair shares: every connection is a flow over its pair's hops.
    let fair: Vec<Option<f64>> = if load.together {
        let mut flows = Vec::new();
        let mut owner = Vec::new();
        for (i, p) in pairs.iter().enumerate() {
            for _ in 0..p.connections {
                flows.push(
                    paths[i]
                        .0
                        .hops
                        .iter()
                        .map(|h| (h.link, h.forward))
                        .collect(),
                );
                owner.push(i);
            }
        }
        let shares = max_min_shares(&flows, |l, fwd| {
            let link = &t.links[l];
            if fwd {
                link.a_to_b.rate_bps
            } else {
                link.b_to_a.rate_bps
            }
        });
        (0..pairs.len())
            .map(|i| {
                owner
                    .iter()
                    .zip(&shares)
                    .filter(|(o, _)| **o == i)
                    .map(|(_, s)| *s)
                    .sum()
            })
            .collect()
    } else {
        vec![None; pairs.len()]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut rows = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let implied = &paths[i].0;
        let Some(measure::PairResult {
            measured: m,
            connection_bps,
            congestion,
            host_steal_percent,
            idle_runs,
        }) = measured[i].take()
        else {
            continue;
        };
        rows.push(CheckedPath {
            from: p.from.clone(),
            to: p.to.clone(),
            connections: p.connections,
            congestion,
            implied_rtt_ms: ms(implied.rtt),
            measured_rtt_ms: m.rtt.map(ms),
            measured_rtt_runs: idle_runs,
            queue_bound_ms: ms(queue_bound(implied, &m)),
            host_delay_p95_ms: m.host_delay_p95.map(ms),
            emulator_late_p95_ms: m.emulator_late_p95.map(ms),
            emulator_late_p99_ms: m.emulator_late_p99.map(ms),
            emulator_woke_late_p99_ms: m.emulator_woke_late_p99.map(ms),
            emulator_wakeup_late_p99_ms: m.emulator_wakeup_late_p99.map(ms),
            loaded_rtt_ms: m.loaded_rtt.map(ms),
            loaded_rtt_median_ms: m.loaded_rtt_median.map(ms),
            loaded_rtt_p95_ms: m.loaded_rtt_p95.map(ms),
            implied_bps: implied.bottleneck_bps,
            measured_bps: m.bps,
            connection_bps: if p.connections > 1 {
                connection_bps
            } else {
                Vec::new()
            },
            fair_share_bps: fair[i],
            host_steal_percent,
            implied_loss_percent: implied.loss * 100.0,
            measured_loss_percent: m.loss.map(|l| l * 100.0),
            rtt_tolerance_ms: ms(RTT_TOLERANCE),
            rate_bounds_bps: rate_bounds(implied, &m),
            loss_bounds_percent: loss_bounds(implied).map(|b| b.map(|l| l * 100.0)),
            deviations: deviations(implied, &m),
            busy_stations: (implied.busy_stations > 0).then_some(implied.busy_stations),
        });
    }
    // Jain's index over pairs, each rate taken relative to its fair share.
    let jain = if load.together {
        let relative: Vec<f64> = rows
            .iter()
            .filter_map(|r| Some(r.measured_bps / r.fair_share_bps?))
            .collect();
        jain_index(&relative)
    } else {
        None
    };
    Ok((rows, jain))
}
