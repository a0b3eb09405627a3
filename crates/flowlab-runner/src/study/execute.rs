//! Running a prepared study: the database and the runner's record in it, then each
//! trial claimed, its network and the servers on it made ready ([`Site`]), the trial
//! run at the place and recorded, in the plan's order.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use flowlab_db::{Claim, Db, Retake, StepRecord};
use flowlab_net::build;
use flowlab_results::study::{RunSummary, TrialEvent, TrialStatus};
use flowlab_study::{Cell, Study};

use super::lines::{self, Commands};
use super::places::{Places, RemoteScratch};
use super::prepare::Prepared;
use super::trial::{self, Ready, Stage};
use super::{RunError, topology};
use crate::error::io;
use crate::place::Place;
use crate::servers;

/// How a prepared study runs.
#[derive(Debug)]
pub struct Run<'a> {
    /// The results database (created when missing).
    pub db: &'a Path,
    /// Also run the trials a runner that is gone had claimed.
    pub resume: bool,
    /// Run again the trials that failed.
    pub retry_failed: bool,
    /// Where the steps and servers run.
    pub place: Arc<dyn Place>,
    /// The flowlab binary on this machine that emulates a topology's links where the
    /// kernel cannot.
    pub emulator: &'a Path,
    /// How the steps' command lines are read (again, with the servers' ports).
    pub commands: &'a dyn Commands,
    /// Set to stop: the running trial is given back, every finished one kept.
    pub stop: Arc<AtomicBool>,
    /// The runner's flowlab version, recorded with its trials.
    pub version: &'a str,
}

/// What a run says as it goes.
#[derive(Debug)]
pub enum Event<'a> {
    /// A trial ended, or was skipped.
    Trial(&'a TrialEvent),
    /// Something the user should know that changes nothing (a topology used as it was
    /// found, a setting that has no effect here, a topology that did not come down).
    Note(String),
}

/// Runs `p`'s trials not recorded yet into `run.db`, saying each as it ends to `on`;
/// what happened, for the summary.
pub fn execute(
    p: &Prepared,
    run: &Run<'_>,
    on: &mut dyn FnMut(Event<'_>),
) -> Result<RunSummary, RunError> {
    let (study, trials, pause) = (&p.study, &p.trials, p.pause);
    let plan = &p.plan;
    // Checked before anything is written (checked again as each network comes up).
    if let Some(net) = &p.net {
        topology::refuse_if_unusable(net, study)?;
    }
    if study.keep_cpus_awake {
        if let Some(why) = flowlab_net::awake::changes_nothing_here() {
            on(Event::Note(format!("keep_cpus_awake: {why}")));
        }
    }
    let mut db = Db::open(run.db)?;
    let row = db.study(&study.name, &p.text, p.plan.seed)?;
    let system = serde_json::to_string(&flowlab_engine::sysinfo::collect())
        .map_err(|e| RunError::Failed(format!("describing this system: {e}")))?;
    let runner = db.register_runner(run.version, &system)?;
    // Its claims hold while it beats: another runner sharing the database takes them
    // over once it stops (a killed runner, a lost controller).
    let _heartbeat = flowlab_db::Heartbeat::start(run.db, runner, flowlab_db::HEARTBEAT)?;
    let interrupt = &run.stop;
    Scratch::sweep();
    // `{run}`: the run's own directory, removed at the end.
    let run_dir = Scratch::new("run")?;
    // This machine, and each host over SSH with a directory of the run's there.
    let places = Places::connect(p, Arc::clone(&run.place), &run_dir.0, run.version)?;
    let used = used(p);
    // The hosts whose steps name `{scratch}`: a trial makes a directory at each.
    let scratch_at: Vec<&str> = study
        .steps
        .iter()
        .filter(|s| s.args.uses_scratch())
        .filter_map(|s| s.from.as_deref())
        .collect();
    for (text, argv) in study.setup.iter().zip(&p.setup_lines) {
        places.setup(text, argv, &used)?;
    }
    // Declared after the run's directory and the places, so dropped before them.
    let mut site = Site::default();
    let ready =
        |cell: &Cell, ports: &[(u16, Option<u16>)], here: &Scratch, there: &RemoteScratch<'_>| {
            p.ready(run.commands, cell, ports, &|node: Option<&str>| {
                there.of(node).unwrap_or_else(|| here.path())
            })
        };
    let begun = Instant::now();
    let mut summary = RunSummary {
        study: study.name.clone(),
        db: flowlab_db::display_name(run.db),
        ..RunSummary::default()
    };
    let mut took = Duration::ZERO;
    let mut ran = 0u32;
    let mut warmed = false;
    for (i, t) in trials.iter().enumerate() {
        if interrupt.load(Ordering::Acquire) || summary.stopped_on_error {
            summary.not_run += 1;
            continue;
        }
        let cell = &plan.cells[t.cell];
        let cell_label = study.cell_label(cell);
        let params = params_json(study, cell);
        let mut event = TrialEvent {
            index: i + 1,
            of: trials.len(),
            cell: cell_label.clone(),
            repetition: t.repetition,
            status: TrialStatus::Ok,
            seconds: 0.0,
            error: None,
            eta_seconds: None,
        };
        let id = match db.claim(
            row.id,
            runner,
            (&cell_label, &params),
            t.repetition,
            Retake {
                abandoned: run.resume,
                failed: run.retry_failed,
            },
        )? {
            Claim::Mine(id) => id,
            other => {
                let (status, count) = match other {
                    Claim::Done => (TrialStatus::Done, &mut summary.done_before),
                    Claim::Busy => (TrialStatus::Busy, &mut summary.busy),
                    _ => (TrialStatus::Abandoned, &mut summary.abandoned),
                };
                *count += 1;
                // Trials recorded before are counted, not listed one by one.
                if status != TrialStatus::Done {
                    event.status = status;
                    on(Event::Trial(&event));
                }
                continue;
            }
        };
        // The trial's network up and the servers on it (a new network: both anew).
        if let Err(e) = site.enter(p, run, p.network[t.cell], &places, &mut |n| {
            on(Event::Note(n))
        }) {
            db.release(id)?;
            return Err(e);
        }
        let ports = site.ports();
        // Warm-up trials, not recorded: the cell of the first trial this runner runs,
        // before it.
        if !warmed {
            warmed = true;
            for w in 1..=study.warmup {
                if interrupt.load(Ordering::Acquire) {
                    break;
                }
                if study.schedule_per_trial {
                    site.restart_schedules(run)?;
                }
                let t0 = Instant::now();
                let scratch = Scratch::new("warm-up")?;
                let there = places.scratch("warm-up", &scratch_at)?;
                let (error, _) = match ready(cell, &ports, &scratch, &there) {
                    Ok(stages) => run_trial(&places, &stages, interrupt),
                    Err(e) => (Some(e), None),
                };
                on(Event::Trial(&TrialEvent {
                    index: w as usize,
                    of: study.warmup as usize,
                    cell: cell_label.clone(),
                    repetition: 0,
                    status: TrialStatus::Warmup,
                    seconds: t0.elapsed().as_secs_f64(),
                    error,
                    eta_seconds: None,
                }));
                std::thread::sleep(pause);
            }
        }
        if ran > 0 {
            std::thread::sleep(pause);
        }
        if study.schedule_per_trial {
            if let Err(e) = site.restart_schedules(run) {
                db.release(id)?;
                return Err(e);
            }
        }
        let t0 = Instant::now();
        let name = format!("trial-{id}");
        let (scratch, there, clocks) = match (
            Scratch::new(&name),
            places.scratch(&name, &scratch_at),
            places.clocks(),
        ) {
            (Ok(s), Ok(t), Ok(c)) => (s, t, c),
            (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
                db.release(id)?;
                return Err(places.lost().unwrap_or(e));
            }
        };
        let (error, records) = match ready(cell, &ports, &scratch, &there) {
            Ok(stages) => run_trial(&places, &stages, interrupt),
            Err(e) => (Some(e), Some(Vec::new())),
        };
        drop(there);
        let Some(records) = records else {
            // Interrupted: given back, it runs on the next run.
            db.release(id)?;
            summary.interrupted = true;
            summary.not_run += 1;
            continue;
        };
        db.record_clocks(id, &clocks)?;
        db.finish(id, error.as_deref(), &records)?;
        took += t0.elapsed();
        ran += 1;
        if error.is_some() {
            summary.failed += 1;
            if study.on_error == flowlab_study::file::OnError::Stop {
                summary.stopped_on_error = true;
            }
        } else {
            summary.ok += 1;
        }
        let left = trials.len() - i - 1;
        event.status = if error.is_some() {
            TrialStatus::Failed
        } else {
            TrialStatus::Ok
        };
        event.seconds = t0.elapsed().as_secs_f64();
        event.error = error;
        event.eta_seconds =
            Some((took / ran).as_secs_f64() * left as f64 + pause.as_secs_f64() * left as f64);
        on(Event::Trial(&event));
        // A host lost ends the run (its trials would all fail): said once this trial is
        // recorded; the servers stop and the other hosts' directories go as it returns.
        if event.status == TrialStatus::Failed {
            if let Some(lost) = places.lost() {
                return Err(lost);
            }
        }
    }
    summary.interrupted |= interrupt.load(Ordering::Acquire);
    summary.seconds = begun.elapsed().as_secs_f64();
    if let Some(why) = site.leave() {
        on(Event::Note(why));
    }
    drop(run_dir);
    Ok(summary)
}

/// The topology and the servers as the current trial needs them. Dropped, the servers
/// stop first, then the topology comes down (when the study brought it up).
#[derive(Debug, Default)]
struct Site {
    running: Vec<servers::Running>,
    up: Option<topology::Up>,
    /// The network that is up (its index in the topology's networks).
    network: Option<usize>,
}

impl Site {
    /// Makes `network` the one up, with the study's servers started on it: nothing to
    /// do when it is up already; else the servers stop, the topology comes down and
    /// goes up with the network's link values, and the servers start again.
    fn enter(
        &mut self,
        p: &Prepared,
        run: &Run<'_>,
        network: usize,
        places: &Places,
        note: &mut dyn FnMut(String),
    ) -> Result<(), RunError> {
        if self.network == Some(network) {
            return Ok(());
        }
        let first = self.network.is_none();
        if let Some(why) = self.leave() {
            note(why);
        }
        if let Some(net) = &p.net {
            let up = topology::up(net, network, &p.study, run.emulator)?;
            if first && !up.ours() {
                note(format!(
                    "topology {} is up already: the study uses it as it is and leaves it up",
                    net.topo.name
                ));
            }
            self.up = Some(up);
        }
        for (s, argv) in p.study.servers.iter().zip(&p.serve_lines) {
            let at = places.at(s.node.as_deref());
            let argv = lines::with_run_dir(argv, &at.run.display().to_string());
            self.running.push(servers::start(
                at.place.as_ref(),
                &s.name,
                &argv,
                at.ns.as_deref(),
                at.dir,
            )?);
        }
        self.network = Some(network);
        Ok(())
    }

    /// Stops the servers, then takes the topology down (when the study brought it
    /// up); what went wrong, to be said.
    fn leave(&mut self) -> Option<String> {
        self.network = None;
        self.running.clear();
        self.up.take().and_then(topology::Up::down)
    }

    /// Starts the schedules of the topology the study brought up again from now
    /// ([`build::restart_schedule`]): what a study with `schedule_per_trial` does before
    /// each trial.
    fn restart_schedules(&self, run: &Run<'_>) -> Result<(), RunError> {
        let Some(up) = self.up.as_ref().filter(|u| u.ours()) else {
            return Ok(());
        };
        build::restart_schedule(&build::state_dir(), up.name(), run.emulator)
            .map(|_| ())
            .map_err(|e| RunError::Failed(format!("starting the schedules again: {e}")))
    }

    /// The servers' ports and QUIC ports, in the study's order.
    fn ports(&self) -> Vec<(u16, Option<u16>)> {
        self.running.iter().map(|r| (r.port, r.quic_port)).collect()
    }
}

/// Runs a trial's stages in order: the first failure ends the trial. Returns why it
/// failed and its steps' records (`None`: interrupted).
fn run_trial(
    places: &Places,
    stages: &[Vec<Ready>],
    interrupt: &Arc<AtomicBool>,
) -> (Option<String>, Option<Vec<StepRecord>>) {
    let mut records = Vec::new();
    for stage in stages {
        match trial::run_stage(places, stage, interrupt) {
            Stage::Interrupted => return (None, None),
            Stage::Ran(r) => {
                let failed = r
                    .iter()
                    .find_map(|s| s.error.as_ref().map(|e| format!("step '{}': {e}", s.name)));
                records.extend(r);
                if failed.is_some() {
                    return (failed, Some(records));
                }
            }
        }
    }
    (None, Some(records))
}

/// A cell's parameters as a JSON object of labels.
fn params_json(study: &Study, cell: &Cell) -> String {
    let map: serde_json::Map<String, serde_json::Value> = study
        .params
        .iter()
        .zip(&cell.0)
        .map(|(p, &v)| (p.name.clone(), p.values[v].label.clone().into()))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Where the setup commands run: where the servers run, whose options alone may name
/// `{run}` — each host over SSH that runs one, and this machine when one runs here or
/// on a topology's node (whose files are this machine's); this machine when there is
/// no server.
pub(super) fn used(p: &Prepared) -> Vec<Option<&str>> {
    let mut used: Vec<Option<&str>> = Vec::new();
    for s in &p.study.servers {
        let at = s
            .node
            .as_deref()
            .filter(|n| p.remotes.iter().any(|(r, _)| r == n));
        if !used.contains(&at) {
            used.push(at);
        }
    }
    if used.is_empty() {
        used.push(None);
    }
    used
}

/// An empty directory of a trial's own (`{scratch}`) or of the run's (`{run}`), removed
/// when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str) -> Result<Scratch, RunError> {
        let path = std::env::temp_dir().join(format!("flowlab-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .map_err(io(format!("making the directory {}", path.display())))?;
        Ok(Scratch(path))
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }

    /// Removes the directories of runners that are gone (killed before they could).
    fn sweep() {
        let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let pid = name
                .strip_prefix("flowlab-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
