//! A topology's schedule at work: the process `up` starts for a topology whose links
//! change on a schedule (`[[link.schedule]]`). It makes each change at its time from its
//! own start, as `flowlab net set` makes one ([`super::set_to`]), and logs each to
//! `<state dir>/<topology>.schedule.log`; `down` stops it.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use super::files::state;
use super::{NetError, set_to};
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
    let Some(topology) = recorded.and_then(|s| s.topology) else {
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
        let done = link
            .at_step(moment.step)
            .map_err(NetError::from)
            .and_then(|to| set_to(dir, topo, &link.name, &to));
        match done {
            Ok(_) => say(log, start, &format!("{}: {what}", link.name)),
            Err(e) => say(log, start, &format!("{}: {what} failed: {e}", link.name)),
        }
    }
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
