//! A topology's schedule at work: the process `up` starts for a topology whose links
//! change on a schedule (`[[link.schedule]]`). It makes each change at its time from its
//! own start, as `flowlab net set` makes one ([`super::set_to`]), and logs each to
//! `<state dir>/<topology>.schedule.log`; `down` stops it.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::files::{lock_changes, state, write_state};
use super::processes::{is_scheduler, start_scheduler, stop};
use super::{NetError, set, set_to};
use crate::topology::{Link, Moment};

/// How the log's last line ends once no link changes any more.
pub const SCHEDULE_DONE: &str = "schedule done: no link changes any more";

/// Runs the schedule of topology `topo` (as `up` recorded it under `dir`) from now,
/// writing a line to `log` for its start and for each change: its wall-clock time, its
/// time from the start, and what changed or why it could not. Returns when no link
/// changes any more (never, with a repeating schedule).
pub fn run(dir: &Path, topo: &str, log: &mut dyn Write) -> Result<(), NetError> {
    let start = Instant::now();
    // `up` recorded the topology (atomically) before starting this process.
    let recorded = state(dir, topo);
    let Some(topology) = recorded.and_then(|s| s.built.or(s.topology)) else {
        return Err(NetError::Unsupported(format!(
            "no topology named '{topo}' is up with its links recorded"
        )));
    };
    // The links' own values, as the file gave them: each round starts from them.
    let links: Vec<&Link> = topology
        .links
        .iter()
        .filter(|l| !l.schedule.is_empty())
        .collect();
    let mut next: Vec<_> = links
        .iter()
        .map(|l| l.schedule.moments().peekable())
        .collect();
    say(log, start, &format!("schedule of topology {topo} started"));
    loop {
        let soonest = next
            .iter_mut()
            .enumerate()
            .filter_map(|(i, m)| m.peek().map(|m| (m.at, i)))
            .min();
        let Some((_, i)) = soonest else {
            say(log, start, SCHEDULE_DONE);
            return Ok(());
        };
        let Some(moment) = next[i].next() else {
            continue;
        };
        if let Some(wait) = moment.at.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        if state(dir, topo).is_none() {
            // Taken down by other means than `down`, which stops this process first.
            say(
                log,
                start,
                "the topology is no longer up: the schedule ends",
            );
            return Ok(());
        }
        let link = links[i];
        let what = describe(link, &moment);
        let done = match topology.station_at(link, moment.step) {
            // A station's hop: its rates, as `net set` sets them.
            Some(pairs) => {
                let pairs: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                set(dir, topo, &link.name, &pairs)
            }
            None => link
                .at_step(moment.step)
                .map_err(NetError::from)
                .and_then(|to| set_to(dir, topo, &link.name, &to)),
        };
        match done {
            Ok(_) => say(log, start, &format!("{}: {what}", link.name)),
            Err(e) => say(log, start, &format!("{}: {what} failed: {e}", link.name)),
        }
    }
}

/// Starts the schedule of topology `topo`, which is up, again from now, as `up` started
/// it: its process stopped, each scheduled link set back to its own values (the file's,
/// as `set` sets them), and a new process started with `program`, whose times count from
/// here. A study does this before each trial when its schedule runs per trial. Returns
/// whether the topology has a schedule (without one, nothing is done).
pub fn restart_schedule(dir: &Path, topo: &str, program: &Path) -> Result<bool, NetError> {
    let Some(recorded) = state(dir, topo) else {
        return Err(NetError::Unsupported(format!(
            "no topology named '{topo}' is up (flowlab net status lists them)"
        )));
    };
    let Some(built) = recorded.built.or(recorded.topology) else {
        return Err(NetError::Unsupported(format!(
            "topology {topo} was brought up by a flowlab that did not record its links: bring it up again"
        )));
    };
    let scheduled: Vec<&Link> = built
        .links
        .iter()
        .filter(|l| !l.schedule.is_empty())
        .collect();
    if scheduled.is_empty() {
        return Ok(false);
    }
    if let Some(pid) = recorded.scheduler_pid.filter(|&p| is_scheduler(p, topo)) {
        let stuck = stop(&[pid]);
        if !stuck.is_empty() {
            return Err(NetError::Unsupported(format!(
                "the schedule's process {pid} did not stop"
            )));
        }
    }
    for l in scheduled {
        match built.station_at(l, None) {
            Some(pairs) => {
                let pairs: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                set(dir, topo, &l.name, &pairs)?
            }
            None => set_to(dir, topo, &l.name, l)?,
        };
    }
    // Its first change waits for its pid to be recorded.
    let _recording = lock_changes(dir, topo)?;
    let mut now = state(dir, topo).ok_or_else(|| {
        NetError::Unsupported(format!(
            "topology {topo} went down while its schedule started"
        ))
    })?;
    now.scheduler_pid = Some(start_scheduler(topo, dir, program)?);
    write_state(dir, topo, &now)?;
    Ok(true)
}

/// What a moment does to `link`: "rate=10M delay=40ms", or its own values again.
fn describe(link: &Link, m: &Moment) -> String {
    let round = if link.schedule.repeat.is_some() {
        format!(" (round {})", m.round + 1)
    } else {
        String::new()
    };
    match m.step {
        Some(i) => format!("{}{round}", link.schedule.steps[i].said()),
        None => format!("the file's values again{round}"),
    }
}

/// Writes a line to `log`: the UTC time to the millisecond (RFC 3339), the time since
/// `start` ("+1.503 s"), and `text`.
fn say(log: &mut dyn Write, start: Instant, text: &str) {
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.3fZ");
    let since = start.elapsed().as_secs_f64();
    let _ = writeln!(log, "{now} +{since:.3} s  {text}");
    let _ = log.flush();
}
