//! One trial: its stages in order, the steps of a stage (one step, or a group) started
//! together, each a `flowlab test`/`fetch -J` child whose document is the step's result;
//! an RTT step's echoes are sent by a thread of the runner (in its node's namespace).
//!
//! Children, not threads, for measurements: a step that hangs is killed at its deadline
//! or on Ctrl-C, and a step in a topology runs in its node's namespace (`ip netns
//! exec`), as `net check`'s clients do. Echoes cannot hang: each waits its timeout.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use flowlab_db::StepRecord;

use flowlab_report::rtt::RttResult;

use super::check::{Echoes, StepLine};
use crate::cmd::Reaped;

/// How often running steps are looked at.
const POLL: Duration = Duration::from_millis(2);

/// A step ready to run.
#[derive(Debug)]
pub struct Ready {
    pub name: String,
    pub kind: &'static str,
    pub line: StepLine,
    /// The network namespace its client runs in.
    pub ns: Option<String>,
}

/// How a stage ended.
pub enum Stage {
    /// Every step ran (each record says whether it failed).
    Ran(Vec<StepRecord>),
    /// Ctrl-C: the steps were stopped; nothing of the stage is kept.
    Interrupted,
}

struct Started {
    child: Reaped,
    out: JoinHandle<Vec<u8>>,
    err: JoinHandle<Vec<u8>>,
    started: f64,
    begun: Instant,
    status: Option<std::process::ExitStatus>,
    ended: f64,
}

/// An RTT step's thread: its document, or why it failed.
type Echoing = JoinHandle<Result<String, String>>;

/// Sends `e`'s echoes from namespace `ns` (this machine's when `None`), one at a time,
/// until done or interrupted; the step's document.
fn echo(e: Echoes, ns: Option<String>, interrupt: Arc<AtomicBool>) -> Echoing {
    std::thread::spawn(move || {
        if let Some(ns) = &ns {
            flowlab_net::netns::enter(ns).map_err(|err| format!("entering {ns}: {err}"))?;
        }
        let mut pinger = flowlab_net::probe::Pinger::open(None)
            .map_err(|err| format!("cannot open an ICMP socket (root needed): {err}"))?;
        let started = flowlab_db::now();
        let t0 = Instant::now();
        let mut samples = Vec::new();
        let mut sent = 0;
        for i in 0..e.count {
            if interrupt.load(Ordering::Acquire) {
                break;
            }
            // Echoes on a fixed schedule: a late reply does not shift the next.
            let due = e.interval * i as u32;
            std::thread::sleep(due.saturating_sub(t0.elapsed()));
            sent += 1;
            match pinger.ping(e.to, e.timeout) {
                Ok(Some(rtt)) => samples.push(rtt.as_secs_f64() * 1000.0),
                Ok(None) => {}
                Err(err) => return Err(format!("echo to {}: {err}", e.to)),
            }
        }
        let r = RttResult::new(
            &e.to.to_string(),
            sent,
            (
                e.interval.as_secs_f64() * 1000.0,
                e.timeout.as_secs_f64() * 1000.0,
            ),
            samples,
            started,
        );
        serde_json::to_string(&r).map_err(|err| err.to_string())
    })
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

fn spawn(step: &Ready, dir: &Path) -> std::io::Result<Started> {
    let mut cmd = crate::cmd::flowlab_child(step.ns.as_deref())?;
    cmd.args(&step.line.argv)
        .arg("-J")
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = flowlab_db::now();
    let mut child = Reaped(cmd.spawn()?);
    let out = drain(
        child
            .0
            .stdout
            .take()
            .ok_or(std::io::ErrorKind::BrokenPipe)?,
    );
    let err = drain(
        child
            .0
            .stderr
            .take()
            .ok_or(std::io::ErrorKind::BrokenPipe)?,
    );
    Ok(Started {
        child,
        out,
        err,
        started,
        begun: Instant::now(),
        status: None,
        ended: 0.0,
    })
}

/// Runs `steps` at once in `dir` and waits for all of them.
pub fn run_stage(steps: &[Ready], dir: &Path, interrupt: &Arc<AtomicBool>) -> Stage {
    let mut started = Vec::new();
    let mut records: Vec<Option<StepRecord>> = Vec::new();
    let mut echoes = Vec::new();
    for step in steps {
        if let Some(e) = &step.line.echoes {
            let at = flowlab_db::now();
            echoes.push(Some((
                echo(e.clone(), step.ns.clone(), Arc::clone(interrupt)),
                at,
            )));
            started.push(None);
            records.push(None);
            continue;
        }
        echoes.push(None);
        match spawn(step, dir) {
            Ok(s) => {
                started.push(Some(s));
                records.push(None);
            }
            Err(e) => {
                let now = flowlab_db::now();
                started.push(None);
                records.push(Some(record(
                    step,
                    (now, now),
                    Err((format!("cannot start flowlab {}: {e}", step.kind), None)),
                )));
            }
        }
    }
    loop {
        if interrupt.load(Ordering::Acquire) {
            // The children are killed as they drop.
            return Stage::Interrupted;
        }
        let mut running = false;
        for (step, s) in steps.iter().zip(started.iter_mut()) {
            let Some(s) = s else { continue };
            if s.status.is_some() {
                continue;
            }
            match s.child.0.try_wait() {
                Ok(Some(status)) => {
                    s.status = Some(status);
                    s.ended = flowlab_db::now();
                }
                Ok(None) => {
                    if step.line.deadline().is_some_and(|d| s.begun.elapsed() > d) {
                        let _ = s.child.0.kill();
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
        *rec = Some(record(step, (at, flowlab_db::now()), outcome));
    }
    if interrupt.load(Ordering::Acquire) {
        return Stage::Interrupted;
    }
    for ((step, s), rec) in steps.iter().zip(started).zip(records.iter_mut()) {
        let Some(s) = s else { continue };
        let out = s.out.join().unwrap_or_default();
        let err = s.err.join().unwrap_or_default();
        let outcome = outcome(step, s.status, &out, &err, s.begun.elapsed());
        *rec = Some(record(step, (s.started, s.ended), outcome));
    }
    Stage::Ran(records.into_iter().flatten().collect())
}

/// What a child left: its document, or why it failed (its `-J` error, else its last
/// line on stderr).
fn outcome(
    step: &Ready,
    status: Option<std::process::ExitStatus>,
    out: &[u8],
    err: &[u8],
    took: Duration,
) -> Result<String, (String, Option<String>)> {
    let doc = String::from_utf8_lossy(out).trim().to_string();
    let document = (!doc.is_empty()).then_some(doc);
    match status {
        Some(s) if s.success() => document.ok_or_else(|| ("it wrote no result".into(), None)),
        _ => {
            let from_json = document
                .as_deref()
                .and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
                .and_then(|v| v["error"].as_str().map(str::to_string));
            let stderr = String::from_utf8_lossy(err);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let why = match (status, from_json, last) {
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
