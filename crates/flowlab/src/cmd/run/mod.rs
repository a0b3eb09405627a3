//! `flowlab run STUDY.toml`: a whole study, every trial recorded in a results database
//! the moment it ends. [`flowlab_runner::study`] prepares and runs it, at this machine
//! ([`flowlab_runner::Local`]), with the steps read by flowlab's own parsers
//! ([`commands`]); this prints what it says.

mod commands;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args as ClapArgs;
use flowlab_report::{json, table};
use flowlab_results::study::StudyProgress;
use flowlab_runner::study::{self, Event, RunError};
use flowlab_web::progress::ProgressHub;

use super::{emit, emit_json};
use crate::usage::Usage;
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The study file (TOML; docs/studies.md describes every key).
    pub study: PathBuf,
    /// The results database: a SQLite file (created when missing), or a PostgreSQL
    /// database shared with other runners (postgres://USER@HOST:PORT/NAME).
    #[arg(long, default_value = "results.db", value_name = "FILE|URL")]
    pub db: PathBuf,
    /// Also run the trials a runner that is gone had claimed (trials already recorded
    /// are never run again).
    #[arg(long)]
    pub resume: bool,
    /// Run again the trials that failed (a server that was down, a binary replaced
    /// mid-study); each failed attempt is kept in the database's `attempt` table.
    #[arg(long)]
    pub retry_failed: bool,
    /// Only the cells that match, e.g. `length=1000,method=tcp-stream` (give it again
    /// for more: a cell matching any runs).
    #[arg(long, value_name = "PARAM=VALUE,…")]
    pub only: Vec<String>,
    /// Print the plan (cells, each step's command, trials, estimated time) and exit.
    #[arg(long)]
    pub dry_run: bool,
    /// Run only the first N repetitions of each cell (a quick pass; the others run on a
    /// later run without it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: Option<u32>,
    /// Multiply every test's duration or size, and the pauses, by F (0.1 for a quick
    /// pass).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub scale: f64,
    /// One JSON object per line (the plan, each trial, the summary) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Serve the run's progress at http://ADDRESS:PORT/ (each trial as it ends, the time
    /// left) and its report as recorded so far at /report, while it runs (a port alone:
    /// every address).
    #[arg(long, value_name = "[ADDRESS:]PORT", value_parser = super::serve::parse_http_at)]
    pub http: Option<super::serve::HttpAt>,
    #[command(flatten, next_help_heading = "Output")]
    pub output: crate::args::OutputArgs,
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    let options = study::Options {
        only: a.only.clone(),
        repeat: a.repeat,
        scale: a.scale,
    };
    let prepared = study::prepare(&a.study, &options, &commands::Parsers).map_err(refusal)?;
    if a.dry_run {
        let summary = prepared.plan();
        if a.json {
            emit_json(&json::event_line("plan", &summary));
        } else {
            emit(&table::study_plan(&summary));
        }
        return Ok(());
    }
    let flowlab =
        super::own_binary().map_err(|e| anyhow::anyhow!("finding flowlab's own binary: {e}"))?;
    let run = study::Run {
        db: &a.db,
        resume: a.resume,
        retry_failed: a.retry_failed,
        place: Arc::new(flowlab_runner::Local::new(flowlab.clone())),
        emulator: &flowlab,
        commands: &commands::Parsers,
        stop: super::install_ctrl_c(),
        version: env!("CARGO_PKG_VERSION"),
    };
    let watched = match a.http {
        Some(at) => Some(serve_progress(a, at, &prepared)?),
        None => None,
    };
    let hub = watched.as_ref().map(|(hub, _)| hub);
    let outcome = study::execute(&prepared, &run, &mut |e| {
        match &e {
            Event::Trial(t) if a.json => emit_json(&json::event_line("trial", t)),
            Event::Trial(t) => emit(&table::study_trial(t)),
            Event::Note(n) => eprintln!("note: {n}"),
        }
        if let Some(hub) = hub {
            match e {
                Event::Trial(t) => hub.update(|p| p.trial(t)),
                Event::Note(n) => hub.update(|p| p.note(n)),
            }
        }
    });
    if let Some(hub) = hub {
        match &outcome {
            Ok(summary) => hub.update(|p| p.ended(summary.clone())),
            Err(e) => hub.update(|p| p.failed_with(e.to_string())),
        }
    }
    let summary = outcome.map_err(refusal)?;
    if a.json {
        emit_json(&json::event_line("summary", &summary));
    } else {
        emit(&table::study_summary(&summary));
    }
    if summary.interrupted {
        anyhow::bail!(
            "interrupted; every finished trial is in {}",
            flowlab_db::display_name(&a.db)
        );
    }
    if summary.failed > 0 {
        anyhow::bail!(
            "{} trials failed (recorded in {} with their errors; --retry-failed runs them again)",
            summary.failed,
            flowlab_db::display_name(&a.db)
        );
    }
    Ok(())
}

/// `--http`: the run's progress and its report served at `at` until the run ends (the
/// pages have its last state by then); what the pages are told, and the server.
fn serve_progress(
    a: &Args,
    at: super::serve::HttpAt,
    prepared: &study::Prepared,
) -> anyhow::Result<(Arc<ProgressHub>, flowlab_web::Serving)> {
    let addr = at.socket_addr(None);
    let listener = flowlab_web::Listener::bind(addr)
        .with_context(|| format!("--http {addr}: cannot listen there"))?;
    let plan = prepared.plan();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let hub = ProgressHub::new(StudyProgress::new(
        &plan,
        &flowlab_db::display_name(&a.db),
        now,
    ));
    let (db, name) = (a.db.clone(), plan.study.clone());
    let report: flowlab_web::progress::Report =
        Arc::new(move || super::report::html_now(&db, &name).map_err(|e| format!("{e:#}")));
    let at = listener.local_addr()?;
    let serving = listener.serve(flowlab_web::Routes::new().progress(hub.clone(), report))?;
    eprintln!("the run's progress at http://{at}/, its report so far at http://{at}/report");
    Ok((hub, serving))
}

/// A study refused as given is a usage error (the parse error shown where it is).
fn refusal(e: RunError) -> anyhow::Error {
    match e {
        RunError::Parse { file, text, error } => {
            let place = crate::usage::snippet(&text, error.line, error.column);
            Usage(format!("{}: {error}{place}", file.display())).into()
        }
        RunError::Refused(why) => Usage(why).into(),
        other => other.into(),
    }
}
