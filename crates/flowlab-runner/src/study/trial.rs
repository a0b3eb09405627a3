//! One trial: its stages in order, the steps of a stage (one step, or a group) started
//! together at the place, each a `flowlab test`/`fetch -J` whose document is the step's
//! result; an RTT step's echoes are sent by the place ([`Place::echo`]) on a thread of
//! the runner.
//!
//! The runner owns each step's deadline and the stop: a step that hangs is killed at its
//! deadline, and every step when the run stops. Echoes cannot hang: each waits its
//! timeout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlab_db::StepRecord;

use super::lines::StepLine;
use super::places::Places;
use crate::place::{Exit, Job, Output, Process};

/// How often running steps are looked at.
const POLL: Duration = Duration::from_millis(2);
/// How often the hosts over SSH are asked whether their connection lasts: a lost one
/// ends the stage's steps at once rather than at their deadlines.
const LOOK_FOR_LOST: Duration = Duration::from_millis(500);

/// A step ready to run.
#[derive(Debug)]
pub struct Ready {
    pub name: String,
    pub kind: &'static str,
    pub line: StepLine,
    /// The node its client runs on (a topology's, or a host over SSH); this machine
    /// when `None`.
    pub from: Option<String>,
}

/// How a stage ended.
pub enum Stage {
    /// Every step ran (each record says whether it failed).
    Ran(Vec<StepRecord>),
    /// Stopped: the steps were killed; nothing of the stage is kept.
    Interrupted,
}

struct Started {
    process: Box<dyn Process>,
    started: f64,
    begun: Instant,
    exit: Option<Exit>,
    ended: f64,
}

/// An RTT step's thread: its document, or why it failed.
type Echoing = JoinHandle<Result<String, String>>;

/// Sends `step`'s echoes at its place on a thread of their own, until done or stopped.
fn echo(places: &Places, step: &Ready, stop: &Arc<AtomicBool>) -> Option<Echoing> {
    let e = step.line.echoes.clone()?;
    let at = places.at(step.from.as_deref());
    let (place, ns, stop) = (Arc::clone(at.place), at.ns, Arc::clone(stop));
    Some(std::thread::spawn(move || {
        let r = place.echo(&e, ns.as_deref(), &stop)?;
        serde_json::to_string(&r).map_err(|err| err.to_string())
    }))
}

fn spawn(places: &Places, step: &Ready) -> std::io::Result<Started> {
    let mut argv = step.line.argv.clone();
    argv.push("-J".into());
    let at = places.at(step.from.as_deref());
    let place = at.place;
    let job = Job {
        argv: &argv,
        dir: at.dir,
        ns: at.ns.as_deref(),
    };
    let started = place.now();
    let process = place.start(&job, Output::Keep)?;
    Ok(Started {
        process,
        started,
        begun: Instant::now(),
        exit: None,
        ended: 0.0,
    })
}

/// Runs `steps` at once, each at its node's place, and waits for all of them. Steps
/// are stamped with this machine's clock (a host's may be off: its offset is recorded
/// with the trial).
pub fn run_stage(places: &Places, steps: &[Ready], stop: &Arc<AtomicBool>) -> Stage {
    let place = places.at(None).place;
    let mut started: Vec<Option<Started>> = Vec::new();
    let mut records: Vec<Option<StepRecord>> = Vec::new();
    // The echo steps first: a thread each starts in microseconds, where a process takes
    // milliseconds to fork (tens on a busy host), so the group starts together.
    let echoes: Vec<_> = steps
        .iter()
        .map(|step| echo(places, step, stop).map(|e| (e, place.now())))
        .collect();
    for (step, echoed) in steps.iter().zip(&echoes) {
        records.push(None);
        if echoed.is_some() {
            started.push(None);
            continue;
        }
        match spawn(places, step) {
            Ok(s) => started.push(Some(s)),
            Err(e) => {
                let now = place.now();
                started.push(None);
                if let Some(last) = records.last_mut() {
                    *last = Some(record(
                        step,
                        (now, now),
                        Err((format!("cannot start flowlab {}: {e}", step.kind), None)),
                    ));
                }
            }
        }
    }
    // A host lost while the stage runs: said as the error of every step it ends.
    let mut lost: Option<String> = None;
    let mut looked = Instant::now();
    loop {
        if stop.load(Ordering::Acquire) {
            // The processes are killed as they drop.
            return Stage::Interrupted;
        }
        if lost.is_none() && looked.elapsed() >= LOOK_FOR_LOST {
            looked = Instant::now();
            lost = places.lost_host();
        }
        let mut running = false;
        for (step, s) in steps.iter().zip(started.iter_mut()) {
            let Some(s) = s else { continue };
            if s.exit.is_some() {
                continue;
            }
            match s.process.try_wait() {
                Ok(Some(exit)) => {
                    s.exit = Some(exit);
                    s.ended = place.now();
                }
                Ok(None) => {
                    if lost.is_some() || step.line.deadline().is_some_and(|d| s.begun.elapsed() > d)
                    {
                        s.process.kill();
                    } else {
                        running = true;
                    }
                }
                Err(_) => {}
            }
        }
        if !running {
            break;
        }
        std::thread::sleep(POLL);
    }
    // The echoes end on their own schedule (they were sized to the load beside them).
    for ((step, e), rec) in steps.iter().zip(echoes).zip(records.iter_mut()) {
        let Some((handle, at)) = e else { continue };
        let outcome = handle
            .join()
            .unwrap_or_else(|_| Err("the echo thread panicked".into()))
            .map_err(|why| (why, None));
        *rec = Some(record(step, (at, place.now()), outcome));
    }
    if stop.load(Ordering::Acquire) {
        return Stage::Interrupted;
    }
    for ((step, s), rec) in steps.iter().zip(started).zip(records.iter_mut()) {
        let Some(s) = s else { continue };
        let took = s.begun.elapsed();
        let written = s.process.finish();
        let mut outcome = outcome(step, s.exit, &written.stdout, &written.stderr, took);
        if let (Err((why, _)), Some(l)) = (&mut outcome, &lost) {
            why.clone_from(l);
        }
        *rec = Some(record(step, (s.started, s.ended), outcome));
    }
    Stage::Ran(records.into_iter().flatten().collect())
}

/// What a step left: its document, or why it failed (its `-J` error, else its last
/// line on stderr).
fn outcome(
    step: &Ready,
    exit: Option<Exit>,
    out: &[u8],
    err: &[u8],
    took: Duration,
) -> Result<String, (String, Option<String>)> {
    let doc = String::from_utf8_lossy(out).trim().to_string();
    let document = (!doc.is_empty()).then_some(doc);
    match exit {
        Some(s) if s.success() => document.ok_or_else(|| ("it wrote no result".into(), None)),
        _ => {
            let from_json = document
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .and_then(|v| v["error"].as_str().map(str::to_string));
            let stderr = String::from_utf8_lossy(err);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let why = match (exit, from_json, last) {
                (None, ..) => "it could not be waited for".to_string(),
                (Some(_), _, _) if step.line.deadline().is_some_and(|d| took > d) => {
                    format!(
                        "killed after {:.0} s, past its deadline",
                        took.as_secs_f64()
                    )
                }
                (_, Some(e), _) => e,
                (_, None, Some(l)) => l.trim_start_matches("error: ").to_string(),
                (Some(s), None, None) => format!("it exited with {s}"),
            };
            Err((why, document))
        }
    }
}

fn record(
    step: &Ready,
    (started, ended): (f64, f64),
    outcome: Result<String, (String, Option<String>)>,
) -> StepRecord {
    let (error, result) = match outcome {
        Ok(doc) => (None, Some(doc)),
        Err((why, doc)) => (Some(why), doc),
    };
    StepRecord {
        name: step.name.clone(),
        kind: step.kind.into(),
        args: shlex::try_join(step.line.argv[1..].iter().map(String::as_str))
            .unwrap_or_else(|_| step.line.argv[1..].join(" ")),
        started,
        ended,
        error,
        result,
    }
}
