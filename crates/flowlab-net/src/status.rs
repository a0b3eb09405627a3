//! The topologies that are up, as `flowlab net up` and `flowlab net status` report them:
//! read from the namespaces, each topology's state file and its emulator's stats file.

use std::path::Path;

use flowlab_results::net::{Built, BusyAir, EmulatedDirection, ScheduleStatus, TopologyStatus};

use crate::build::{self, State};
use crate::forward::LinkStats;

/// How topology `topo`, whose state is `state`, was built.
pub fn built(state: &State, topo: &str) -> Built {
    match state.backend {
        None => Built::TbfOnly,
        Some(b) => Built::Emulated {
            backend: b.to_string(),
            emulator_pid: state.emulator_pid,
            emulator_running: build::lost_emulator(state, topo).is_none(),
            links: state.emulated_links.clone(),
            cpus_kept_awake: state.cpus_kept_awake,
        },
    }
}

/// Every topology that is up, with the state `up` recorded under `dir` and the counters
/// its emulator last wrote there (none when it has no emulator or they cannot be read).
pub fn topologies(dir: &Path) -> Vec<TopologyStatus> {
    build::status()
        .into_iter()
        .map(|(name, namespaces)| {
            let built = build::state(dir, &name).map_or(Built::Unknown, |s| built(&s, &name));
            let stats: Vec<LinkStats> = std::fs::read_to_string(build::stats_file(dir, &name))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            let schedule = build::state(dir, &name)
                .and_then(|s| s.scheduler_pid)
                .map(|pid| schedule(dir, &name, pid));
            TopologyStatus {
                name,
                built,
                namespaces,
                emulated: stats
                    .iter()
                    .filter(|l| l.busy_stations.is_none())
                    .flat_map(directions)
                    .collect(),
                schedule,
                busy_air: stats.iter().filter_map(busy_air).collect(),
            }
        })
        .collect()
}

/// The schedule of topology `topo`, run by process `pid`: whether it still runs, and the
/// last line of its log.
fn schedule(dir: &Path, topo: &str, pid: u32) -> ScheduleStatus {
    let log = build::schedule_log(dir, topo);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let done = text.lines().any(|l| l.ends_with(build::SCHEDULE_DONE));
    let last = text
        .lines()
        .rfind(|l| !l.ends_with(build::SCHEDULE_DONE))
        .map(str::to_string);
    ScheduleStatus {
        pid,
        running: build::is_scheduler(pid, topo),
        log: log.display().to_string(),
        last,
        done,
    }
}

/// What a medium's busy stations sent, from their line of the stats file (None for a
/// link's line).
fn busy_air(l: &LinkStats) -> Option<BusyAir> {
    let d = &l.a_to_b;
    Some(BusyAir {
        medium: l.link.clone(),
        stations: l.busy_stations?,
        packets: d.forwarded,
        packet_bytes: d.forwarded_bytes.checked_div(d.forwarded).unwrap_or(0),
        airtime_s: d.airtime_ns.unwrap_or(0) as f64 / 1e9,
    })
}

/// A link's counters, a→b then b→a.
fn directions(l: &LinkStats) -> [EmulatedDirection; 2] {
    [("a→b", &l.a_to_b), ("b→a", &l.b_to_a)].map(|(way, d)| EmulatedDirection {
        link: l.link.clone(),
        way: way.to_string(),
        forwarded: d.forwarded,
        forwarded_bytes: d.forwarded_bytes,
        lost: d.lost,
        line_full: d.line_full,
        emulator_drops: d.emulator_drops,
        oversize: d.oversize,
        mean_late_us: d.mean_late_us(),
        late: d.late,
        max_late_us: d.max_late_us,
        send_cost_us: d.send_cost_ns as f64 / 1000.0,
        unused_opportunities: d.unused_opportunities,
        early_drops: d.early_drops,
        airtime_s: d.airtime_ns.map(|ns| ns as f64 / 1e9),
    })
}
