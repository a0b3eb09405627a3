//! A study's report ([`flowlab_results::study_report`]) as it is shown: markdown
//! ([`markdown()`], `markdown.rs`), CSV ([`csv()`], `csv.rs`), JSON (through serde) or
//! HTML ([`crate::html`]); and the numbers, units and headings they share.

use flowlab_results::study_report::{CellRow, Ideal, MetricTable};

/// How a metric's values are shown: divided by `divisor`, in `unit` (bit/s as Mbit/s
/// or Gbit/s, seconds as ms when under one, milliseconds as µs, bytes in MB…), from the
/// largest value.
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
        // Jitter and loopback round trips are microseconds: "6.000 µs", not "0.000006 ms".
        "ms" => &[(1.0, "ms"), (1e-3, "µs"), (1e-6, "ns")],
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

/// A metric's heading: `Transfer time (ms) — step transfer`.
pub fn title(m: &MetricTable, unit: &str) -> String {
    format!("{} — step {}", quantity(&m.metric, unit), m.step)
}

/// A metric as a reader names it, with its unit: `throughput_bps` in Gbit/s is
/// "Throughput (Gbit/s)", `rtt_median_ms` "RTT median (ms)", `retransmits` "Retransmits";
/// the raw name stays in CSV and JSON.
pub fn quantity(metric: &str, unit: &str) -> String {
    let bare = ["_bps", "_s", "_ms", "_percent", "_bytes"]
        .iter()
        .find_map(|suffix| metric.strip_suffix(suffix))
        .unwrap_or(metric);
    let words: Vec<String> = bare
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| match w {
            "rtt" | "cpu" | "udp" | "tcp" | "rpm" => w.to_uppercase(),
            "transfer" if bare.starts_with("transfer") => "transfer time".into(),
            w => {
                // `server1` is "server 1" (`p95` stays).
                let digits = w.trim_start_matches(|c: char| !c.is_ascii_digit());
                if !digits.is_empty()
                    && w.len() - digits.len() > 2
                    && digits.chars().all(|c| c.is_ascii_digit())
                {
                    format!("{} {digits}", &w[..w.len() - digits.len()])
                } else {
                    w.to_string()
                }
            }
        })
        .collect();
    let mut name = words.join(" ");
    // What a bare name would not say: `server1_bps` is server 1's rate.
    let says = |words: &[&str]| words.iter().any(|w| bare.contains(w));
    if metric.ends_with("_bps") && !says(&["throughput", "goodput", "rate"]) {
        name += " rate";
    } else if metric.ends_with("_bytes") && !says(&["received", "sent", "bytes"]) {
        name += " bytes";
    }
    if let Some(first) = name.get(..1) {
        name = first.to_uppercase() + &name[1..];
    }
    if unit.is_empty() {
        name
    } else {
        format!("{name} ({unit})")
    }
}

/// The heading of the failed attempts that were run again.
pub const RETRIED: &str =
    "Failed attempts run again (--retry-failed; each trial's last run is in the statistics)";

mod csv;
mod markdown;

pub use csv::csv;
pub use markdown::{comparison_markdown, markdown};

#[cfg(test)]
mod tests {
    use super::quantity;

    #[test]
    fn metrics_are_named_as_a_reader_names_them() {
        for (metric, unit, name) in [
            ("throughput_bps", "Gbit/s", "Throughput (Gbit/s)"),
            ("throughput_up_bps", "Mbit/s", "Throughput up (Mbit/s)"),
            ("transfer_s", "s", "Transfer time (s)"),
            ("rtt_median_ms", "ms", "RTT median (ms)"),
            ("jitter_ms", "µs", "Jitter (µs)"),
            ("server1_bps", "Mbit/s", "Server 1 rate (Mbit/s)"),
            ("server2_bytes", "MB", "Server 2 bytes (MB)"),
            ("received_bytes", "GB", "Received (GB)"),
            ("retransmits", "", "Retransmits"),
            ("cpu_local_percent", "%", "CPU local (%)"),
            ("rtt_p95_ms", "µs", "RTT p95 (µs)"),
        ] {
            assert_eq!(quantity(metric, unit), name, "{metric}");
        }
    }
}
