//! `flowlab fetch`'s and the ratio sweep's tables, and the fragment sets' one-liners.

use std::fmt::Write as _;

use crate::units::{Bytes, Rate, UnitFormat};
use flowlab_results::fetch::FileEntry;

/// `flowlab fetch`: the whole transfer, then one line per server.
pub fn fetch(r: &flowlab_results::fetch::FetchResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "fetched {} of {} fragments ({} skipped, already verified) of {}: {} in {:.2} s, {} ({})",
        r.fragments - r.skipped,
        r.fragments,
        r.skipped,
        r.file.name,
        Bytes(r.bytes, UnitFormat::Adaptive),
        r.seconds,
        Rate(r.bits_per_second, UnitFormat::Adaptive),
        r.mode
    );
    for s in &r.servers {
        let _ = write!(
            out,
            "  {:<22} {:>4} fragments  {:>12}  busy {:>6.2} s  {:>16}",
            s.address,
            s.fragments,
            Bytes(s.bytes, UnitFormat::Adaptive).to_string(),
            s.busy_seconds,
            Rate(s.bits_per_second, UnitFormat::Adaptive).to_string()
        );
        if s.corrupt > 0 {
            let _ = write!(out, "  corrupt {} (fetched again)", s.corrupt);
        }
        if s.duplicates > 0 {
            let _ = write!(out, "  duplicates {}", s.duplicates);
        }
        if s.refused > 0 {
            let _ = write!(out, "  refused {}", s.refused);
        }
        if let Some(f) = &s.failed {
            let _ = write!(out, "  FAILED: {f}");
        }
        out.push('\n');
    }
    out
}

/// `flowlab fetch --sweep-ratios`: seed 000's Table 2 — total transfer time per ratio.
pub fn sweep(r: &flowlab_results::fetch::SweepResult) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} ({}) from {}: total transfer time, seconds",
        r.file.name,
        Bytes(r.file.size, UnitFormat::Adaptive),
        r.servers.join(" and ")
    );
    let mut head = format!("{:<10}", "ratio");
    for i in 1..=r.repeat {
        let _ = write!(head, " {:>8}", format!("run {i}"));
    }
    if r.repeat > 1 {
        let _ = write!(head, " {:>8}", "mean");
    }
    let _ = writeln!(out, "{head}");
    let best = r
        .rows
        .iter()
        .map(|row| row.mean_seconds)
        .fold(f64::INFINITY, f64::min);
    for row in &r.rows {
        let mut line = format!("{:<10}", row.mode);
        for s in &row.seconds {
            let _ = write!(line, " {s:>8.2}");
        }
        if r.repeat > 1 {
            let _ = write!(line, " {:>8.2}", row.mean_seconds);
        }
        if row.mean_seconds == best {
            line += "  <- fastest";
        }
        let _ = writeln!(out, "{line}");
    }
    out
}

/// `flowlab serve --fragments`: the set served, and each connection's pace if any.
pub fn serving_fragments(fragments: usize, dir: &std::path::Path, rate: Option<u64>) -> String {
    format!(
        "serving {fragments} fragments from {}{}\n",
        dir.display(),
        rate.map(|r| format!(
            ", each connection paced to {}",
            Rate(r as f64, UnitFormat::Adaptive)
        ))
        .unwrap_or_default()
    )
}

/// `flowlab fragments split|make|join`: the set, then what was `done` with it.
pub fn fragment_set(file: &FileEntry, fragments: usize, done: &str) -> String {
    format!(
        "{}: {fragments} fragments, {} ({} bytes), blake3 {}; {done}\n",
        file.name,
        Bytes(file.size, UnitFormat::Adaptive),
        file.size,
        file.blake3
    )
}
