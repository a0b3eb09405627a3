//! A study's report as one self-contained HTML page: inline CSS and inline SVG charts,
//! no script, nothing fetched, so it opens offline and on a phone.

use std::fmt::Write as _;

use flowlab_results::study_report::{Failure, StudyReport};

use crate::study_report::{IDEAL_NOTE, RETRIED, ideal_text, metric_unit, number, row_texts, title};

/// `text` safe inside HTML text and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1040px; padding: 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .92em; display: block; overflow-x: auto; }
th, td { padding: .25em .6em; border-bottom: 1px solid #eee; text-align: right; white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
.chart svg { width: 100%; height: auto; }
.note { color: #555; font-size: .92em; }
.failed { color: #a00; }
";

/// A study's report as one page ([`page`]) with its charts and traces, as a
/// [`crate::Format`].
#[derive(Debug, Clone, Copy)]
pub struct Page<'a> {
    /// Each metric's chart, then the scatter's, as SVG (none where it could not be
    /// drawn).
    pub charts: &'a [Option<String>],
    /// The traced trials' graphs: a heading and an SVG document each.
    pub traces: &'a [(String, String)],
}

impl crate::Format<StudyReport> for Page<'_> {
    fn write(&self, r: &StudyReport) -> Result<String, crate::Error> {
        Ok(page(r, self.charts, self.traces))
    }
}

/// The page: the study and its plan, the machines, per metric a chart (`charts[i]`, an
/// SVG document, for `report.metrics[i]`; `None` draws none) and its table, the
/// throughput-against-delay chart (`charts[metrics.len()]`) when the report has one,
/// the traced trials' graphs (`traces`: a heading and an SVG document each), then the
/// failed trials.
pub fn page(r: &StudyReport, charts: &[Option<String>], traces: &[(String, String)]) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Study {}</title><style>{STYLE}</style></head><body>\n",
        esc(&r.study)
    );
    let _ = writeln!(out, "<h1>Study {}</h1>", esc(&r.study));
    if !r.description.is_empty() {
        let _ = writeln!(out, "<p>{}</p>", esc(&r.description));
    }
    let params: Vec<String> = r
        .params
        .iter()
        .map(|p| format!("{} ∈ {{{}}}", p.name, p.labels.join(", ")))
        .collect();
    let _ = writeln!(
        out,
        "<p>{} of {} trials ok, <span class=\"{}\">{} failed</span>{}. {} repetitions per cell, \
         order {} (seed {}). Parameters: {}.</p>",
        r.ok,
        r.planned,
        if r.failed > 0 { "failed" } else { "" },
        r.failed,
        if r.running > 0 {
            format!(", {} not finished", r.running)
        } else {
            String::new()
        },
        r.repeat,
        esc(&r.order),
        r.seed,
        if params.is_empty() {
            "none".to_string()
        } else {
            esc(&params.join("; "))
        }
    );
    let _ = writeln!(
        out,
        "<p class=\"note\">Each table gives, per cell, the trials that ended ok (n), their mean, \
         median and standard deviation, and the {}% confidence interval of the mean (Student's t); \
         the charts draw the mean with that interval as error bars. Failed trials are listed at \
         the end, never averaged in.</p>",
        r.confidence_percent
    );
    if !r.machines.is_empty() {
        let _ = writeln!(out, "<ul class=\"note\">");
        for m in &r.machines {
            let _ = writeln!(out, "<li>{}</li>", esc(m));
        }
        let _ = writeln!(out, "</ul>");
    }
    for (i, m) in r.metrics.iter().enumerate() {
        let (div, unit) = metric_unit(m);
        let _ = writeln!(
            out,
            "<section class=\"metric\"><h2>{}</h2>",
            esc(&title(m, &unit))
        );
        if let Some(Some(svg)) = charts.get(i) {
            let _ = writeln!(out, "<div class=\"chart\">{svg}</div>");
        }
        let ideal = !m.ideals.is_empty();
        let _ = writeln!(
            out,
            "<table><tr><th>cell</th><th>n</th><th>mean</th><th>median</th><th>sd</th>\
             <th>{}% CI of the mean</th>{}</tr>",
            r.confidence_percent,
            if ideal { "<th>ideal</th>" } else { "" }
        );
        for row in &m.rows {
            let mut cells: Vec<String> = row_texts(row, div)
                .iter()
                .map(|t| format!("<td>{}</td>", esc(t)))
                .collect();
            if ideal {
                let v = row.ideal.map_or("–".into(), |v| number(v / div));
                cells.push(format!("<td>{v}</td>"));
            }
            let _ = writeln!(out, "<tr>{}</tr>", cells.concat());
        }
        let _ = writeln!(out, "</table>");
        if ideal {
            let _ = writeln!(
                out,
                "<p class=\"note\">{}</p><ul class=\"note\">",
                esc(IDEAL_NOTE)
            );
            for i in &m.ideals {
                let _ = writeln!(out, "<li>{}</li>", esc(&ideal_text(i, div, &unit)));
            }
            let _ = writeln!(out, "</ul>");
        }
        let _ = writeln!(out, "</section>");
    }
    if let (Some(sc), Some(Some(svg))) = (&r.scatter, charts.get(r.metrics.len())) {
        let _ = writeln!(
            out,
            "<section class=\"scatter\"><h2>Throughput against delay</h2>\
             <p class=\"note\">Each dot is a trial: {} of step {} against {} of step {}; \
             each ellipse, a cell's trials' one-standard-deviation spread around their \
             mean. Higher and further left is better.</p><div class=\"chart\">{svg}</div></section>",
            esc(&sc.throughput.0),
            esc(&sc.throughput.1),
            esc(&sc.delay.0),
            esc(&sc.delay.1)
        );
    }
    if !traces.is_empty() {
        let _ = writeln!(
            out,
            "<section class=\"traces\"><h2>Traced trials</h2><p class=\"note\">Each cell's \
             first traced trial, as <code>flowlab plot -g window</code> and <code>-g rtt</code> \
             draw it: the sender's congestion window, bytes in flight and the receiver's \
             window (rings where the window was full), and its RTT.</p>"
        );
        for (heading, svg) in traces {
            let _ = writeln!(
                out,
                "<h3>{}</h3><div class=\"chart\">{svg}</div>",
                esc(heading)
            );
        }
        let _ = writeln!(out, "</section>");
    }
    failure_list(
        &mut out,
        "<h2 class=\"failed\">Failed trials (not in the statistics)</h2>",
        &r.failures,
    );
    failure_list(&mut out, &format!("<h2>{}</h2>", esc(RETRIED)), &r.retried);
    let _ = writeln!(out, "</body></html>");
    out
}

/// A heading and a list of failures (cell, repetition, error); nothing when there are none.
fn failure_list(out: &mut String, heading: &str, failures: &[Failure]) {
    if failures.is_empty() {
        return;
    }
    let _ = writeln!(out, "{heading}<ul>");
    for f in failures {
        let _ = writeln!(
            out,
            "<li>{} #{}: {}</li>",
            esc(&f.cell),
            f.repetition,
            esc(&f.error)
        );
    }
    let _ = writeln!(out, "</ul>");
}
