//! A study's report, and a comparison of two cells, as markdown.

use std::fmt::Write as _;

use flowlab_results::stats::Summary;
use flowlab_results::study_report::{Comparison, StudyReport};

use super::{IDEAL_NOTE, RETRIED, display_unit, ideal_text, metric_unit, number, row_texts, title};

/// The report as markdown: the study, then a table per metric, then the failures.
pub fn markdown(r: &StudyReport) -> String {
    let mut out = format!("# Study {}\n\n", r.study);
    if !r.description.is_empty() {
        let _ = writeln!(out, "{}\n", r.description);
    }
    let _ = writeln!(
        out,
        "{} of {} trials ok, {} failed{}; {} repetitions per cell, order {} (seed {}). Intervals: {}% confidence of the mean (Student's t).\n",
        r.ok,
        r.planned,
        r.failed,
        if r.running > 0 {
            format!(", {} not finished", r.running)
        } else {
            String::new()
        },
        r.repeat,
        r.order,
        r.seed,
        r.confidence_percent
    );
    for m in &r.machines {
        let _ = writeln!(out, "- {m}");
    }
    if !r.machines.is_empty() {
        out.push('\n');
    }
    for m in &r.metrics {
        let (div, unit) = metric_unit(m);
        let ideal = !m.ideals.is_empty();
        let _ = writeln!(out, "## {}\n", title(m, &unit));
        let _ = writeln!(
            out,
            "| cell | n | mean | median | sd | 95% CI |{}",
            if ideal { " ideal |" } else { "" }
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---|{}",
            if ideal { "---:|" } else { "" }
        );
        for row in &m.rows {
            let _ = write!(out, "| {} |", row_texts(row, div).join(" | "));
            if ideal {
                let v = row.ideal.map_or("–".into(), |v| number(v / div));
                let _ = write!(out, " {v} |");
            }
            out.push('\n');
        }
        if ideal {
            let _ = writeln!(out, "\n{IDEAL_NOTE}\n");
            for i in &m.ideals {
                let _ = writeln!(out, "- {}", ideal_text(i, div, &unit));
            }
        }
        out.push('\n');
    }
    if let Some(sc) = &r.scatter {
        let _ = writeln!(
            out,
            "## Throughput against delay\n\n{} of step {} against {} of step {}, means over each cell's trials.\n",
            sc.throughput.0, sc.throughput.1, sc.delay.0, sc.delay.1
        );
        let _ = writeln!(out, "| cell | n | delay (ms) | throughput (Mbit/s) |");
        let _ = writeln!(out, "|---|---:|---:|---:|");
        for c in &sc.cells {
            let n = c.points.len() as f64;
            let (d, t) = c
                .points
                .iter()
                .fold((0.0, 0.0), |(d, t), p| (d + p.0 / n, t + p.1 / n));
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                c.cell,
                c.points.len(),
                number(d),
                number(t / 1e6)
            );
        }
        out.push('\n');
    }
    if !r.failures.is_empty() {
        let _ = writeln!(out, "## Failed trials (not in the statistics)\n");
        for f in &r.failures {
            let _ = writeln!(out, "- {} #{}: {}", f.cell, f.repetition, f.error);
        }
        out.push('\n');
    }
    if !r.retried.is_empty() {
        let _ = writeln!(out, "## {RETRIED}\n");
        for f in &r.retried {
            let _ = writeln!(out, "- {} #{}: {}", f.cell, f.repetition, f.error);
        }
        out.push('\n');
    }
    out
}

/// A comparison as markdown: per metric both cells, the difference with its interval,
/// and whether it is larger than the noise.
pub fn comparison_markdown(c: &Comparison) -> String {
    let mut out = format!("# {} against {}\n\n", c.b, c.a);
    let _ = writeln!(
        out,
        "| metric | A: {} | B: {} | B − A | 95% CI of B − A | p (Welch) | verdict |",
        c.a, c.b
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---|---:|---|");
    for row in &c.rows {
        let largest = row.a.mean.abs().max(row.b.mean.abs());
        let (div, unit) = display_unit(&row.unit, largest);
        let mean = |s: &Summary| format!("{} (n={})", number(s.mean / div), s.n);
        let (diff, ci, p, verdict) = match &row.difference {
            Some(d) => (
                format!(
                    "{}{}",
                    number(d.diff / div),
                    d.relative_percent
                        .map(|p| format!(" ({p:+.1}%)"))
                        .unwrap_or_default()
                ),
                format!("{} – {}", number(d.ci.0 / div), number(d.ci.1 / div)),
                format!("{:.3}", d.p),
                if d.significant {
                    "larger than the noise"
                } else {
                    "within the noise"
                },
            ),
            None => (
                number((row.b.mean - row.a.mean) / div),
                "–".into(),
                "–".into(),
                "too few trials to tell",
            ),
        };
        let unit = if unit.is_empty() {
            String::new()
        } else {
            format!(" ({unit})")
        };
        let _ = writeln!(
            out,
            "| {} {}{unit} | {} | {} | {diff} | {ci} | {p} | {verdict} |",
            row.step,
            row.metric,
            mean(&row.a),
            mean(&row.b)
        );
    }
    out
}
