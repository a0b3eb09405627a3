//! `flowlab run`'s lines: the plan (`--dry-run`), a line per trial, the outcome.

use std::fmt::Write;

use flowlab_results::study::{PlanSummary, RunSummary, TrialEvent};

/// Seconds as people read a wait: `42 s`, `3 min 20 s`, `2 h 05 min`.
pub fn wait(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s % 3600 / 60),
    }
}

/// The plan of a study, whole.
pub fn study_plan(p: &PlanSummary) -> String {
    let mut out = String::new();
    if p.description.is_empty() {
        let _ = writeln!(out, "study {}", p.study);
    } else {
        let _ = writeln!(out, "study {}: {}", p.study, p.description);
    }
    let _ = writeln!(
        out,
        "{} x {} = {}{}, order {} (seed {}){}{}",
        super::count(p.cells.len(), "cell", "cells"),
        super::count(p.repeat as usize, "repetition", "repetitions"),
        super::count(p.planned, "trial", "trials"),
        if p.trials < p.planned {
            format!(" ({} of them run: --only, --repeat)", p.trials)
        } else {
            String::new()
        },
        p.order,
        p.seed,
        if p.warmup > 0 {
            format!(
                ", {} first",
                super::count(p.warmup as usize, "warm-up trial", "warm-up trials")
            )
        } else {
            String::new()
        },
        if p.scale != 1.0 {
            format!(", durations and sizes x {}", p.scale)
        } else {
            String::new()
        }
    );
    for s in &p.setup {
        let _ = writeln!(out, "setup: flowlab {s}");
    }
    for (name, place) in &p.servers {
        let _ = writeln!(out, "server {name}: flowlab serve {place}");
    }
    if !p.servers.is_empty() {
        let _ = writeln!(
            out,
            "(a server's port is known once it listens: shown as 5201)"
        );
    }
    for c in &p.cells {
        let _ = writeln!(
            out,
            "cell {}",
            if c.label.is_empty() {
                "(one)"
            } else {
                &c.label
            }
        );
        for l in &c.links {
            let _ = writeln!(out, "  link {l}");
        }
        for s in &c.steps {
            let _ = writeln!(out, "  {s}");
        }
    }
    if !p.first.is_empty() {
        let first: Vec<String> = p
            .first
            .iter()
            .map(|(cell, rep)| {
                format!(
                    "{} #{rep}",
                    if cell.is_empty() { "(one cell)" } else { cell }
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "runs first: {}{}",
            first.join(", "),
            if p.trials > p.first.len() {
                ", …"
            } else {
                ""
            }
        );
    }
    let _ = writeln!(
        out,
        "estimated time: {}{}",
        if p.estimate_is_floor { "at least " } else { "" },
        wait(p.estimated_seconds)
    );
    out
}

/// One trial's line as it ends.
pub fn study_trial(e: &TrialEvent) -> String {
    let width = e.of.to_string().len();
    let cell = if e.cell.is_empty() {
        "(one cell)"
    } else {
        &e.cell
    };
    let mut out = format!(
        "[{:>width$}/{}] {cell} #{}: {}",
        e.index, e.of, e.repetition, e.status
    );
    if e.status.ran() {
        let _ = write!(out, " in {:.1} s", e.seconds);
    }
    if let Some(err) = &e.error {
        let _ = write!(out, " ({err})");
    }
    if let Some(eta) = e.eta_seconds {
        let _ = write!(out, ", {} left", wait(eta));
    }
    out.push('\n');
    out
}

/// How the run ended, and what to do next.
pub fn study_summary(s: &RunSummary) -> String {
    let mut out = format!(
        "study {}: {} ok, {} failed in {}",
        s.study,
        s.ok,
        s.failed,
        wait(s.seconds)
    );
    if s.done_before > 0 {
        let _ = write!(out, "; {} recorded before", s.done_before);
    }
    if s.busy > 0 {
        let _ = write!(out, "; {} left to another runner", s.busy);
    }
    out.push('\n');
    if s.abandoned > 0 {
        let _ = writeln!(
            out,
            "{} trials were claimed by a runner that is gone: --resume runs them",
            s.abandoned
        );
    }
    if s.interrupted || s.stopped_on_error {
        let _ = writeln!(
            out,
            "{} ({} trials not run): run the same command again to go on",
            if s.interrupted {
                "interrupted"
            } else {
                "stopped at the first failure (on_error = \"stop\")"
            },
            s.not_run
        );
    }
    let _ = writeln!(
        out,
        "results in {} (flowlab report {} draws them)",
        s.db, s.db
    );
    out
}
