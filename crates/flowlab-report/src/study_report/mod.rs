//! A study's report ([`flowlab_results::study_report`]) as it is shown: markdown
//! ([`markdown()`], `markdown.rs`), CSV ([`csv()`], `csv.rs`), JSON (through serde) or
//! HTML ([`crate::html`]); and the numbers, units and headings they share.

use flowlab_results::study_report::{CellRow, Ideal, MetricTable};

/// How a metric's values are shown: divided by `divisor`, in `unit` (bit/s as Mbit/s
/// or Gbit/s, seconds as ms when under one, bytes in MB…), from the largest value.
pub fn display_unit(unit: &str, largest: f64) -> (f64, String) {
    let steps: &[(f64, &str)] = match unit {
        "bit/s" => &[
            (1e9, "Gbit/s"),
            (1e6, "Mbit/s"),
            (1e3, "kbit/s"),
            (1.0, "bit/s"),
        ],
        "B" => &[(1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")],
        "s" => &[(1.0, "s"), (1e-3, "ms"), (1e-6, "µs")],
        _ => return (1.0, unit.to_string()),
    };
    let largest = largest.abs();
    steps
        .iter()
        .find(|(d, _)| largest >= *d)
        .or(steps.last())
        .map_or((1.0, unit.to_string()), |(d, u)| (*d, u.to_string()))
}

/// A number with four significant digits (no exponent for everyday sizes).
pub fn number(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    // The magnitude after rounding to four digits (0.99999 is shown as 1.000).
    let magnitude = |x: f64| x.abs().log10().floor() as i32;
    let scale = 10f64.powi(magnitude(v) - 3);
    let digits = (3 - magnitude((v / scale).round() * scale)).clamp(0, 6) as usize;
    format!("{v:.digits$}")
}

/// How metric `m`'s values are shown: (divisor, unit), from the largest magnitude its
/// table shows (means and interval ends).
pub fn metric_unit(m: &MetricTable) -> (f64, String) {
    let largest = m
        .rows
        .iter()
        .flat_map(|r| [r.summary.mean, r.summary.ci.map_or(0.0, |c| c.1)])
        .fold(0.0, |a: f64, v| a.max(v.abs()));
    display_unit(&m.unit, largest)
}

/// A row of a metric's table in units of `div`: cell, n, mean, median, sd, interval.
pub fn row_texts(row: &CellRow, div: f64) -> [String; 6] {
    let s = &row.summary;
    [
        if row.cell.is_empty() {
            "(one cell)".to_string()
        } else {
            row.cell.clone()
        },
        s.n.to_string(),
        number(s.mean / div),
        number(s.median / div),
        number(s.sd / div),
        s.ci.map_or("–".to_string(), |(lo, hi)| {
            format!("{} – {}", number(lo / div), number(hi / div))
        }),
    ]
}

/// An ideal in words, its time in units of `div` (`unit`): `distance=long: server 1
/// 164.0 Mbit/s, server 2 85.00 Mbit/s; the capacity-proportional split (1.93:1)
/// would take 34.94 s`.
pub fn ideal_text(ideal: &Ideal, div: f64, unit: &str) -> String {
    let (cdiv, cunit) = display_unit(
        "bit/s",
        ideal.capacities_bps.iter().fold(0.0, |a: f64, &c| a.max(c)),
    );
    let smallest = ideal
        .capacities_bps
        .iter()
        .fold(f64::INFINITY, |a: f64, &c| a.min(c));
    let servers: Vec<String> = ideal
        .capacities_bps
        .iter()
        .enumerate()
        .map(|(i, c)| format!("server {} {} {cunit}", i + 1, number(c / cdiv)))
        .collect();
    let split: Vec<String> = ideal
        .capacities_bps
        .iter()
        .map(|c| {
            let text = format!("{:.2}", c / smallest);
            text.trim_end_matches('0').trim_end_matches('.').to_string()
        })
        .collect();
    format!(
        "{}: {}; the capacity-proportional split ({}) would take {} {unit}",
        if ideal.series.is_empty() {
            "every cell"
        } else {
            &ideal.series
        },
        servers.join(", "),
        split.join(":"),
        number(ideal.best_s / div)
    )
}

/// What a table's `ideal` column means, for the line under it.
pub const IDEAL_NOTE: &str = "ideal: the time each cell's split would take if every server \
     delivered at its capacity (its bytes over its busy seconds in the series' trials), the \
     slowest deciding; the model assumes the servers' paths share no bottleneck.";

/// A metric's heading: `transfer_s of step "transfer" (ms)`.
pub fn title(m: &MetricTable, unit: &str) -> String {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" ({unit})")
    };
    format!("{} — step {}{unit}", m.metric, m.step)
}

/// The heading of the failed attempts that were run again.
pub const RETRIED: &str =
    "Failed attempts run again (--retry-failed; each trial's last run is in the statistics)";

mod csv;
mod markdown;

pub use csv::csv;
pub use markdown::{comparison_markdown, markdown};
