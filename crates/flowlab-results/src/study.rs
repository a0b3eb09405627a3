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

/// A study's run as it goes, as `flowlab run --http` shows it: the plan's size, each
/// trial as it ends, the run's notes and, once it ended, its summary or its error.
#[derive(Debug, Clone, Serialize)]
pub struct StudyProgress {
    pub study: String,
    pub db: String,
    /// When the run began (Unix seconds).
    pub started_unix: f64,
    /// Trials to run (after `--only` and `--repeat`).
    pub trials: usize,
    /// How far down the list of trials the run has come: the last trial's `index`.
    pub reached: usize,
    /// Trials of this run by what became of them (recorded before this run: in the
    /// summary's `done_before`, once it ended).
    pub ok: usize,
    pub failed: usize,
    pub busy: usize,
    pub abandoned: usize,
    pub warmup: usize,
    /// Time left, from the mean of the trials run so far.
    pub eta_seconds: Option<f64>,
    /// The last trials that ended, newest first.
    pub recent: std::collections::VecDeque<TrialEvent>,
    /// What the run noted that changes nothing (as `flowlab run` prints "note: …").
    pub notes: Vec<String>,
    /// Set when the run ended.
    pub summary: Option<RunSummary>,
    /// Set when the run ended in an error (no summary then).
    pub error: Option<String>,
}

/// Trials [`StudyProgress`] keeps, newest first.
pub const PROGRESS_RECENT: usize = 50;

impl StudyProgress {
    /// A run of `plan` into `db` beginning at `now_unix`.
    pub fn new(plan: &PlanSummary, db: &str, now_unix: f64) -> StudyProgress {
        StudyProgress {
            study: plan.study.clone(),
            db: db.into(),
            started_unix: now_unix,
            trials: plan.trials,
            reached: 0,
            ok: 0,
            failed: 0,
            busy: 0,
            abandoned: 0,
            warmup: 0,
            eta_seconds: None,
            recent: std::collections::VecDeque::new(),
            notes: Vec::new(),
            summary: None,
            error: None,
        }
    }

    /// Counts a trial that ended (or was skipped).
    pub fn trial(&mut self, e: &TrialEvent) {
        let count = match e.status {
            TrialStatus::Ok => &mut self.ok,
            TrialStatus::Failed => &mut self.failed,
            TrialStatus::Busy => &mut self.busy,
            TrialStatus::Abandoned => &mut self.abandoned,
            TrialStatus::Warmup => &mut self.warmup,
            TrialStatus::Done => return,
        };
        *count += 1;
        // A warm-up's index counts warm-ups, not the study's trials.
        if e.status != TrialStatus::Warmup {
            self.reached = self.reached.max(e.index);
            self.eta_seconds = e.eta_seconds.or(self.eta_seconds);
        }
        self.recent.push_front(e.clone());
        self.recent.truncate(PROGRESS_RECENT);
    }

    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// The run ended: how.
    pub fn ended(&mut self, summary: RunSummary) {
        self.reached = self.trials;
        self.eta_seconds = None;
        self.summary = Some(summary);
    }

    /// The run stopped on an error.
    pub fn failed_with(&mut self, error: String) {
        self.eta_seconds = None;
        self.error = Some(error);
    }

    /// Whether the run is still going.
    pub fn running(&self) -> bool {
        self.summary.is_none() && self.error.is_none()
    }
}

#[cfg(test)]
mod progress_tests {
    use super::*;

    fn plan(trials: usize) -> PlanSummary {
        PlanSummary {
            study: "s".into(),
            description: String::new(),
            order: "random".into(),
            seed: 1,
            repeat: 1,
            warmup: 1,
            scale: 1.0,
            setup: Vec::new(),
            servers: Vec::new(),
            cells: Vec::new(),
            planned: trials,
            trials,
            first: Vec::new(),
            estimated_seconds: 0.0,
            estimate_is_floor: false,
        }
    }

    fn event(index: usize, status: TrialStatus, eta: Option<f64>) -> TrialEvent {
        TrialEvent {
            index,
            of: 4,
            cell: "cc=bbr".into(),
            repetition: 1,
            status,
            seconds: 1.0,
            error: None,
            eta_seconds: eta,
        }
    }

    #[test]
    fn progress_counts_trials_by_status_and_ends_with_the_summary() {
        let mut p = StudyProgress::new(&plan(4), "r.db", 0.0);
        p.trial(&event(1, TrialStatus::Warmup, None));
        assert_eq!(
            (p.reached, p.warmup),
            (0, 1),
            "a warm-up is no step along the list"
        );
        p.trial(&event(1, TrialStatus::Ok, Some(3.0)));
        p.trial(&event(2, TrialStatus::Failed, Some(2.0)));
        p.trial(&event(3, TrialStatus::Busy, None));
        assert_eq!((p.ok, p.failed, p.busy, p.reached), (1, 1, 1, 3));
        assert_eq!(
            p.eta_seconds,
            Some(2.0),
            "a skipped trial keeps the last estimate"
        );
        assert_eq!(p.recent[0].status, TrialStatus::Busy, "newest first");
        assert!(p.running());
        p.ended(RunSummary::default());
        assert!(!p.running());
        assert_eq!((p.reached, p.eta_seconds), (4, None));
    }

    #[test]
    fn progress_keeps_the_last_trials_only() {
        let mut p = StudyProgress::new(&plan(100), "r.db", 0.0);
        for i in 1..=100 {
            p.trial(&event(i, TrialStatus::Ok, None));
        }
        assert_eq!(p.recent.len(), PROGRESS_RECENT);
        assert_eq!(p.recent[0].index, 100);
        assert_eq!(p.ok, 100);
    }
}
