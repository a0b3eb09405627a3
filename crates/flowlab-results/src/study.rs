//! What `flowlab run` shows of a study: the plan it expanded to (`--dry-run`), each
//! trial as it ends, and the run's outcome.

use serde::{Deserialize, Serialize};

/// A study's plan, as `--dry-run` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanSummary {
    pub study: String,
    pub description: String,
    /// `random` or `sequential`.
    pub order: String,
    /// The random order's seed.
    pub seed: u64,
    pub repeat: u32,
    /// Trials run first and not recorded.
    pub warmup: u32,
    /// Durations and sizes multiplied by this (`--scale`).
    pub scale: f64,
    /// Commands run once before the servers start.
    pub setup: Vec<String>,
    /// Servers the runner starts: name and where.
    pub servers: Vec<(String, String)>,
    pub cells: Vec<CellPlan>,
    /// Cells × repetitions.
    pub planned: usize,
    /// Trials to run (after `--only` and `--repeat`).
    pub trials: usize,
    /// The first trials in the order they run: cell label and repetition.
    pub first: Vec<(String, u32)>,
    /// A lower bound of the time the trials take (timed steps and pauses; a step that
    /// moves a given amount counts as no time).
    pub estimated_seconds: f64,
    /// Whether some step's time is unknown before it runs (so the estimate is a floor).
    pub estimate_is_floor: bool,
}

/// One cell's steps, as they will run.
#[derive(Debug, Clone, Serialize)]
pub struct CellPlan {
    pub label: String,
    /// The topology's links as the cell sets them (`[[link]]`): `b: rate 85M`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// Each step's command line (server addresses as placeholders).
    pub steps: Vec<String>,
}

/// A trial that ended (or was skipped), as `flowlab run` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct TrialEvent {
    /// From 1, of `of`.
    pub index: usize,
    pub of: usize,
    pub cell: String,
    pub repetition: u32,
    pub status: TrialStatus,
    pub seconds: f64,
    pub error: Option<String>,
    /// Time left, from the mean of the trials run so far.
    pub eta_seconds: Option<f64>,
}

/// How a run ended.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunSummary {
    pub study: String,
    pub db: String,
    pub ok: usize,
    pub failed: usize,
    /// Recorded before this run.
    pub done_before: usize,
    /// Left to other runners, or to a `--resume`.
    pub busy: usize,
    pub abandoned: usize,
    /// Not run: Ctrl-C, or `on_error = "stop"` after a failure.
    pub not_run: usize,
    pub interrupted: bool,
    pub stopped_on_error: bool,
    pub seconds: f64,
}

/// What became of a trial in a run, as `flowlab run` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TrialStatus {
    /// It ran, and was recorded.
    Ok,
    /// It ran and failed, and was recorded with its error.
    Failed,
    /// Recorded before this run.
    Done,
    /// Another runner has it.
    Busy,
    /// Claimed by a runner that is gone (`--resume` takes it over).
    Abandoned,
    /// A warm-up trial: run first, not recorded.
    Warmup,
}

impl TrialStatus {
    /// As the JSON and the text say it.
    pub fn as_str(self) -> &'static str {
        match self {
            TrialStatus::Ok => "ok",
            TrialStatus::Failed => "failed",
            TrialStatus::Done => "done",
            TrialStatus::Busy => "busy",
            TrialStatus::Abandoned => "abandoned",
            TrialStatus::Warmup => "warmup",
        }
    }

    /// Whether the trial ran in this run (so it has a time).
    pub fn ran(self) -> bool {
        matches!(
            self,
            TrialStatus::Ok | TrialStatus::Failed | TrialStatus::Warmup
        )
    }
}

impl std::fmt::Display for TrialStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a recorded trial stands in a results database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// Claimed by a runner, not finished.
    Running,
    Ok,
    Failed,
}

impl Outcome {
    /// As the database's `status` column holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
        }
    }

    /// The outcome `text` names, as the database holds it.
    pub fn parse(text: &str) -> Option<Outcome> {
        match text {
            "running" => Some(Outcome::Running),
            "ok" => Some(Outcome::Ok),
            "failed" => Some(Outcome::Failed),
            _ => None,
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
