//! `flowlab run STUDY.toml`: a whole study, every trial recorded in a results database
//! the moment it ends.
//!
//! 1. Read and check the study, then every step of every cell as the command's own
//!    parser reads it ([`check`]): nothing starts unless all of it is valid.
//! 2. `--dry-run`: print the plan and stop.
//! 3. Open the database, record the study (its file and the order's seed), start the
//!    servers ([`servers`]).
//! 4. For each trial in the plan's order: claim it, run its stages ([`trial`]), record
//!    it; Ctrl-C gives the running trial back and keeps every finished one.

mod check;
mod servers;
mod topology;
mod trial;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args as ClapArgs;
use flowlab_db::{Claim, Db};
use flowlab_report::study::{CellPlan, PlanSummary, RunSummary, TrialEvent};
use flowlab_report::{json, table};
use flowlab_study::file::{Order, StepKind};
use flowlab_study::{Cell, Study};

use super::emit;
use crate::cli::Usage;
use check::StepLine;
use trial::{Ready, Stage};

#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The study file (TOML; docs/studies.md describes every key).
    pub study: PathBuf,
    /// The results database (SQLite; created when missing).
    #[arg(long, default_value = "results.db", value_name = "FILE")]
    pub db: PathBuf,
    /// Also run the trials a runner that is gone had claimed (trials already recorded
    /// are never run again).
    #[arg(long)]
    pub resume: bool,
    /// Only the cells that match, e.g. `length=1000,method=tcp-stream` (give it again
    /// for more: a cell matching any runs).
    #[arg(long, value_name = "PARAM=VALUE,…")]
    pub only: Vec<String>,
    /// Print the plan (cells, each step's command, trials, estimated time) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Multiply every test's duration or size, and the pauses, by F (0.1 for a quick
    /// pass).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub scale: f64,
    /// One JSON object per line (the plan, each trial, the summary) instead of text.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(Usage(format!(
            "--scale {}: give a factor above 0, up to 100",
            a.scale
        ))
        .into());
    }
    let text = std::fs::read_to_string(&a.study)
        .with_context(|| format!("cannot read {}", a.study.display()))?;
    let study =
        flowlab_study::parse(&text).map_err(|e| Usage(format!("{}: {e}", a.study.display())))?;
    let dir = match a.study.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let net = match &study.topology {
        Some(file) => Some(
            topology::Net::load(&dir.join(file))
                .map_err(|e| Usage(format!("{}: topology: {e:#}", a.study.display())))?,
        ),
        None => None,
    };
    topology::check(&study, net.as_ref())
        .map_err(|e| Usage(format!("{}: {e}", a.study.display())))?;
    let only = only(&study, &a.only)?;
    // Where step `i` reaches server `s`: its node's address on the path from the step's
    // node, or loopback (checked above: every pair is one or the other).
    let host = |i: usize, s: usize| -> String {
        match (&study.steps[i].from, &study.servers[s].node, &net) {
            (Some(from), Some(node), Some(net)) => net
                .address(from, node)
                .map(|a| a.to_string())
                .unwrap_or_default(),
            _ => "127.0.0.1".into(),
        }
    };
    let serve_lines = study
        .servers
        .iter()
        .map(|s| {
            check::serve_line(&s.args, s.node.is_none())
                .map_err(|e| Usage(format!("{}: server {}: {e}", a.study.display(), s.name)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cells = study.cells();
    // Every step of every cell, checked before anything starts.
    let mut lines: Vec<Vec<StepLine>> = Vec::new();
    for cell in &cells {
        let mut steps = Vec::new();
        for (i, step) in study.steps.iter().enumerate() {
            // The port is known once the server listens: 5201 stands for it here.
            let placeholder = |s: usize| (host(i, s), "5201".to_string());
            let line = check::step_line(&study, i, cell, &placeholder, a.scale).map_err(|e| {
                Usage(format!(
                    "{}: step '{}', cell {}: {e}",
                    a.study.display(),
                    step.name,
                    label(&study, cell)
                ))
            })?;
            steps.push(line);
        }
        lines.push(steps);
    }
    // The order's seed, unless the file gives one: drawn from the file's text, so that
    // a dry run shows the order the run will take, and a re-run resumes it.
    let plan = study.plan(default_seed(&text));
    let trials: Vec<_> = plan
        .trials
        .iter()
        .filter(|t| only.as_ref().is_none_or(|o| o.contains(&t.cell)))
        .copied()
        .collect();
    let pause = study.pause.mul_f64(a.scale);
    if a.dry_run {
        let summary = plan_summary(&study, &plan, &lines, &trials, a.scale, pause, &serve_lines);
        if a.json {
            emit(&json::event_line("plan", &summary));
        } else {
            emit(&table::study_plan(&summary));
        }
        return Ok(());
    }
    let mut db = Db::open(&a.db)?;
    let row = db.study(&study.name, &text, plan.seed)?;
    let system = serde_json::to_string(&flowlab_engine::sysinfo::collect())?;
    let runner = db.register_runner(env!("CARGO_PKG_VERSION"), &system)?;
    let interrupt = super::install_ctrl_c();
    // Declared before the servers, so dropped after them.
    let up = net.as_ref().map(topology::up).transpose()?;
    if let (Some(up), Some(net)) = (&up, &net) {
        if !up.ours() {
            eprintln!(
                "note: topology {} is up already: the study uses it as it is and leaves it up",
                net.topo.name
            );
        }
    }
    let mut running = Vec::new();
    for (s, argv) in study.servers.iter().zip(&serve_lines) {
        let ns = match (&s.node, &net) {
            (Some(node), Some(net)) => Some(net.ns(node)),
            _ => None,
        };
        running.push(servers::start(&s.name, argv, ns.as_deref(), &dir)?);
    }
    let ready = |cell: &Cell| -> anyhow::Result<Vec<Vec<Ready>>> {
        study
            .stages()
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .map(|&i| {
                        let address = |s: usize| (host(i, s), running[s].port.to_string());
                        let line = check::step_line(&study, i, cell, &address, a.scale)
                            .map_err(|e| anyhow::anyhow!("step '{}': {e}", study.steps[i].name))?;
                        Ok(Ready {
                            name: study.steps[i].name.clone(),
                            kind: kind_name(study.steps[i].kind),
                            line,
                            ns: match (&study.steps[i].from, &net) {
                                (Some(from), Some(net)) => Some(net.ns(from)),
                                _ => None,
                            },
                        })
                    })
                    .collect()
            })
            .collect()
    };
    let out = |e: &TrialEvent| {
        if a.json {
            emit(&json::event_line("trial", e));
        } else {
            emit(&table::study_trial(e));
        }
    };
    let begun = Instant::now();
    let mut summary = RunSummary {
        study: study.name.clone(),
        db: a.db.display().to_string(),
        ..RunSummary::default()
    };
    // Warm-up trials: the first cell in the plan's order, not recorded.
    if let Some(first) = trials.first() {
        for w in 1..=study.warmup {
            if interrupt.load(Ordering::Acquire) {
                break;
            }
            let t0 = Instant::now();
            let stages = ready(&plan.cells[first.cell])?;
            let (error, _) = run_trial(&stages, &dir, &interrupt);
            out(&TrialEvent {
                index: w as usize,
                of: study.warmup as usize,
                cell: label(&study, &plan.cells[first.cell]),
                repetition: 0,
                status: "warmup".into(),
                seconds: t0.elapsed().as_secs_f64(),
                error,
                eta_seconds: None,
            });
            std::thread::sleep(pause);
        }
    }
    let mut took = Duration::ZERO;
    let mut ran = 0u32;
    for (i, t) in trials.iter().enumerate() {
        if interrupt.load(Ordering::Acquire) || summary.stopped_on_error {
            summary.not_run += 1;
            continue;
        }
        let cell = &plan.cells[t.cell];
        let cell_label = label(&study, cell);
        let params = params_json(&study, cell);
        let mut event = TrialEvent {
            index: i + 1,
            of: trials.len(),
            cell: cell_label.clone(),
            repetition: t.repetition,
            status: String::new(),
            seconds: 0.0,
            error: None,
            eta_seconds: None,
        };
        let id = match db.claim(
            row.id,
            runner,
            (&cell_label, &params),
            t.repetition,
            a.resume,
        )? {
            Claim::Mine(id) => id,
            other => {
                let (status, count) = match other {
                    Claim::Done => ("done", &mut summary.done_before),
                    Claim::Busy => ("busy", &mut summary.busy),
                    _ => ("abandoned", &mut summary.abandoned),
                };
                *count += 1;
                // Trials recorded before are counted, not listed one by one.
                if status != "done" {
                    event.status = status.into();
                    out(&event);
                }
                continue;
            }
        };
        if ran > 0 {
            std::thread::sleep(pause);
        }
        let t0 = Instant::now();
        let (error, records) = match ready(cell) {
            Ok(stages) => run_trial(&stages, &dir, &interrupt),
            Err(e) => (Some(format!("{e:#}")), Some(Vec::new())),
        };
        let Some(records) = records else {
            // Interrupted: given back, it runs on the next run.
            db.release(id)?;
            summary.interrupted = true;
            summary.not_run += 1;
            continue;
        };
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
        event.status = if error.is_some() { "failed" } else { "ok" }.into();
        event.seconds = t0.elapsed().as_secs_f64();
        event.error = error;
        event.eta_seconds =
            Some((took / ran).as_secs_f64() * left as f64 + pause.as_secs_f64() * left as f64);
        out(&event);
    }
    summary.interrupted |= interrupt.load(Ordering::Acquire);
    summary.seconds = begun.elapsed().as_secs_f64();
    drop(running);
    drop(up);
    if a.json {
        emit(&json::event_line("summary", &summary));
    } else {
        emit(&table::study_summary(&summary));
    }
    if summary.interrupted {
        anyhow::bail!("interrupted; every finished trial is in {}", a.db.display());
    }
    if summary.failed > 0 {
        anyhow::bail!(
            "{} trials failed (recorded in {} with their errors)",
            summary.failed,
            a.db.display()
        );
    }
    Ok(())
}

/// Runs a trial's stages in order: the first failure ends the trial. Returns why it
/// failed and its steps' records (`None`: interrupted).
fn run_trial(
    stages: &[Vec<Ready>],
    dir: &Path,
    interrupt: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (Option<String>, Option<Vec<flowlab_db::StepRecord>>) {
    let mut records = Vec::new();
    for stage in stages {
        match trial::run_stage(stage, dir, interrupt) {
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

fn kind_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::Test => "test",
        StepKind::Fetch => "fetch",
        StepKind::Rtt => "rtt",
    }
}

/// A seed from the study file's text (BLAKE3's first eight bytes, kept below 2^63 so
/// that SQLite's signed integers hold it).
fn default_seed(text: &str) -> u64 {
    let hash = flowlab_db::study_hash(text);
    u64::from_str_radix(&hash[..16], 16).unwrap_or(0) >> 1
}

/// A cell's label, or `(one cell)` for a study without parameters.
fn label(study: &Study, cell: &Cell) -> String {
    study.cell_label(cell)
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

/// The cells `--only` keeps (`None`: every cell), or which filter names nothing.
fn only(study: &Study, filters: &[String]) -> Result<Option<Vec<usize>>, Usage> {
    if filters.is_empty() {
        return Ok(None);
    }
    let mut wanted: Vec<Vec<(usize, usize)>> = Vec::new();
    for f in filters {
        let mut all = Vec::new();
        for pair in f.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| Usage(format!("--only {f}: write PARAM=VALUE, e.g. length=1000")))?;
            let p = study
                .params
                .iter()
                .position(|p| p.name == name)
                .ok_or_else(|| {
                    Usage(format!(
                        "--only {f}: '{name}' is not a parameter of study {} (it has: {})",
                        study.name,
                        study
                            .params
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            let v = study.params[p]
                .values
                .iter()
                .position(|v| v.label == value)
                .ok_or_else(|| {
                    Usage(format!(
                        "--only {f}: '{value}' is not a value of '{name}' (it has: {})",
                        study.params[p]
                            .values
                            .iter()
                            .map(|v| v.label.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?;
            all.push((p, v));
        }
        wanted.push(all);
    }
    let cells: Vec<usize> = study
        .cells()
        .iter()
        .enumerate()
        .filter(|(_, c)| wanted.iter().any(|w| w.iter().all(|&(p, v)| c.0[p] == v)))
        .map(|(i, _)| i)
        .collect();
    if cells.is_empty() {
        return Err(Usage(format!(
            "--only {}: no cell of study {} matches",
            filters.join(" --only "),
            study.name
        )));
    }
    Ok(Some(cells))
}

fn plan_summary(
    study: &Study,
    plan: &flowlab_study::Plan,
    lines: &[Vec<StepLine>],
    trials: &[flowlab_study::Trial],
    scale: f64,
    pause: Duration,
    serve_lines: &[Vec<String>],
) -> PlanSummary {
    let stages = study.stages();
    // A trial takes its stages one after another, a stage as long as its longest step.
    let trial_time = |cell: usize| -> (Duration, bool) {
        let mut floor = false;
        let total = stages
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .map(|&i| {
                        let e = lines[cell][i].expected;
                        floor |= e.is_none();
                        e.unwrap_or_default()
                    })
                    .max()
                    .unwrap_or_default()
            })
            .sum();
        (total, floor)
    };
    let mut estimate = Duration::ZERO;
    let mut floor = false;
    for t in trials.iter().chain(std::iter::repeat_n(
        &trials[0],
        if trials.is_empty() {
            0
        } else {
            study.warmup as usize
        },
    )) {
        let (d, f) = trial_time(t.cell);
        estimate += d;
        floor |= f;
    }
    estimate += pause * trials.len().saturating_sub(1) as u32;
    PlanSummary {
        study: study.name.clone(),
        description: study.description.clone(),
        order: match study.order {
            Order::Random => "random",
            Order::Sequential => "sequential",
        }
        .into(),
        seed: plan.seed,
        repeat: study.repeat,
        warmup: study.warmup,
        scale,
        servers: study
            .servers
            .iter()
            .zip(serve_lines)
            .map(|(s, argv)| {
                (
                    s.name.clone(),
                    format!(
                        "{} on {}",
                        argv[1..].join(" "),
                        s.node.as_deref().unwrap_or("this machine's loopback")
                    ),
                )
            })
            .collect(),
        cells: plan
            .cells
            .iter()
            .enumerate()
            .map(|(c, cell)| CellPlan {
                label: label(study, cell),
                steps: study
                    .steps
                    .iter()
                    .zip(&lines[c])
                    .map(|(s, l)| {
                        format!(
                            "{}{}: {}",
                            s.name,
                            s.group
                                .as_deref()
                                .map(|g| format!(" (group {g})"))
                                .unwrap_or_default(),
                            if l.echoes.is_some() {
                                format!("ICMP echoes to {}", l.argv[1..].join(" "))
                            } else {
                                format!("flowlab {}", l.argv.join(" "))
                            }
                        )
                    })
                    .collect(),
            })
            .collect(),
        trials: trials.len(),
        first: trials
            .iter()
            .take(5)
            .map(|t| (label(study, &plan.cells[t.cell]), t.repetition))
            .collect(),
        estimated_seconds: estimate.as_secs_f64(),
        estimate_is_floor: floor,
    }
}
