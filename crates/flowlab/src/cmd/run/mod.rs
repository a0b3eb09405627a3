//! `flowlab run STUDY.toml`: a whole study, every trial recorded in a results database
//! the moment it ends.
//!
//! 1. [`prepare`]: read and check the study and its topology ([`topology`]), then every
//!    step of every cell as the command's own parser reads it ([`check`]): nothing
//!    starts unless all of it is valid.
//! 2. `--dry-run`: print the plan ([`plan`]) and stop.
//! 3. [`execute`]: open the database, record the study (its file and the order's seed);
//!    for each trial in the plan's order, claim it, bring its network up with the
//!    servers on it when another (or none) is up ([`topology`], [`servers`]), run its
//!    stages ([`trial`]), record it. Ctrl-C gives the running trial back and keeps
//!    every finished one.

mod check;
mod execute;
mod plan;
mod prepare;
mod servers;
mod topology;
mod trial;

use std::path::PathBuf;

use clap::Args as ClapArgs;
use flowlab_report::{json, table};

use super::{emit, emit_json};
use crate::cli::Usage;
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
}

pub fn run(a: &Args) -> anyhow::Result<()> {
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        return Err(Usage(format!(
            "--scale {}: give a factor above 0, up to 100",
            a.scale
        ))
        .into());
    }
    let prepared = prepare::prepare(a)?;
    if a.dry_run {
        let summary = plan::summary(&prepared, a.scale);
        if a.json {
            emit_json(&json::event_line("plan", &summary));
        } else {
            emit(&table::study_plan(&summary));
        }
        return Ok(());
    }
    let summary = execute::execute(&prepared, a)?;
    if a.json {
        emit_json(&json::event_line("summary", &summary));
    } else {
        emit(&table::study_summary(&summary));
    }
    if summary.interrupted {
        anyhow::bail!("interrupted; every finished trial is in {}", a.db.display());
    }
    if summary.failed > 0 {
        anyhow::bail!(
            "{} trials failed (recorded in {} with their errors; --retry-failed runs them again)",
            summary.failed,
            a.db.display()
        );
    }
    Ok(())
}
