//! `flowlab net check`'s table.

use std::fmt::Write as _;

use super::wrap;
use flowlab_results::net::{EMULATOR_LATE_NOTED_MS, FAIRNESS_CC, NetCheck, STEAL_NOTED};

/// The table's width: every line fits 100 columns (a deviation's words wrap).
const WIDTH: usize = 100;

/// `flowlab net check`: what it judged and how, then a row per path and round (its rates
/// in one unit, what fell out of bounds on the lines below it), Jain's index after each
/// round run together, the verdict, and notes on the host's disturbances.
pub fn net_check(c: &NetCheck) -> String {
    let rows = &c.paths;
    let jain = &c.jain_index_by_congestion;
    let opt =
        |v: Option<f64>, digits: usize| v.map_or("?".to_string(), |v| format!("{v:.digits$}"));
    let together = c.together;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "topology {}, emulation backend: {}{}",
        c.topology,
        c.backend,
        if c.cpus_kept_awake {
            " (CPUs kept awake)"
        } else {
            ""
        }
    );
    let what = if together {
        "every pair's TCP test at once"
    } else {
        "a TCP test per pair"
    };
    let ccs: Vec<String> = c
        .rounds
        .iter()
        .map(|cc| match cc.as_deref() {
            None => format!(
                "{} (the system's default; -C chooses)",
                c.congestion_default
            ),
            Some(FAIRNESS_CC) if together && !c.congestion_chosen => {
                format!("{FAIRNESS_CC} (loss-based, as the seed's kernels)")
            }
            Some(cc) if cc == c.congestion_default => format!("{cc} (the system's default)"),
            Some(cc) => cc.to_string(),
        })
        .collect();
    out += &wrap(
        &format!(
            "load: {what}, {} s after a first second left out, under {}",
            c.load_seconds,
            ccs.join(", then ")
        ),
        WIDTH,
        2,
    );
    out += &wrap(
        &format!(
            "judged: idle RTT (median of 20 echoes) within ±{:.1} ms of the file; loaded RTT (95th \
             percentile of echoes during the load) at most the queue bound + {:.1} ms; {}{}",
            c.rtt_tolerance_ms,
            c.rtt_tolerance_ms,
            if together {
                "rates not judged (shared links), shown beside their max-min fair share"
            } else {
                "rate within the bounds shown (a path with random loss: not judged)"
            },
            if rows.iter().any(|r| r.implied_loss_percent > 0.0) {
                format!(
                    "; loss within ±{:.0} % of the file's",
                    c.loss_tolerance_percent
                )
            } else {
                String::new()
            }
        ),
        WIDTH,
        2,
    );
    // One unit for every rate of the table, chosen by the largest bound (else the largest
    // rate measured), so an unlimited path's rate does not turn the others into "0.0".
    let largest = |rates: &mut dyn Iterator<Item = f64>| rates.fold(0.0, f64::max);
    let bounded = largest(&mut rows.iter().flat_map(|r| {
        [r.fair_share_bps, r.rate_bounds_bps.map(|[_, hi]| hi)]
            .into_iter()
            .flatten()
    }));
    let reference = if bounded > 0.0 {
        bounded
    } else {
        largest(&mut rows.iter().map(|r| r.measured_bps))
    };
    let power = (0..5)
        .rev()
        .find(|&p| reference >= 1000f64.powi(p))
        .unwrap_or(0);
    // Three significant digits, as every rate flowlab prints ("7.99", "37.5", "13600").
    let scaled = |bps: f64| {
        let v = bps / 1000f64.powi(power);
        let digits = if v < 9.995 {
            2
        } else if v < 99.95 {
            1
        } else {
            0
        };
        format!("{v:.digits$}")
    };
    let unit = crate::units::unit_name(power as usize, "bits/sec");
    let name = |r: &flowlab_results::net::CheckedPath| {
        if r.connections > 1 {
            format!("{}-{}:{}", r.from, r.to, r.connections)
        } else {
            format!("{}-{}", r.from, r.to)
        }
    };
    // The path column fits the longest pair's name ("laptop-server"), at least 10.
    let path_width = rows
        .iter()
        .map(|r| name(r).chars().count())
        .max()
        .unwrap_or(0)
        .max(10);
    let columns = |out: &mut String, cells: [&str; 6]| {
        let line = format!(
            "{:<path_width$} {:<6} {:<15}  {:<26}  {:<17}  {}",
            cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]
        );
        let _ = writeln!(out, "{}", line.trim_end());
    };
    columns(
        &mut out,
        [
            "",
            "",
            "idle RTT, ms",
            "loaded RTT p95, ms",
            &format!("rate, {unit}"),
            "loss, %",
        ],
    );
    columns(
        &mut out,
        [
            "path",
            "cc",
            "(file ±tol)",
            "≤ bound+tol (median/max)",
            if together {
                "(fair share)"
            } else {
                "(judged bounds)"
            },
            "(file bounds)",
        ],
    );
    let mut previous_cc: Option<&str> = None;
    let jain_line = |out: &mut String, cc: Option<&str>| {
        if let Some((cc, j)) = cc.and_then(|cc| jain.get_key_value(cc)) {
            let _ = writeln!(
                out,
                "Jain's fairness index over the pairs under {cc} (rate / fair share): {j:.3}"
            );
        }
    };
    for r in rows {
        let cc = r.congestion.as_deref().unwrap_or("?");
        if previous_cc.is_some_and(|p| p != cc) {
            jain_line(&mut out, previous_cc);
        }
        previous_cc = Some(cc);
        let idle = format!(
            "{} ({:.1}±{:.1})",
            opt(r.measured_rtt_ms, 1),
            r.implied_rtt_ms,
            r.rtt_tolerance_ms
        );
        let loaded = match r.implied_bps {
            Some(_) => format!(
                "{} ≤ {:.1}+{:.0} ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                r.queue_bound_ms,
                r.rtt_tolerance_ms,
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
            // No rate limit, so no queue to bound.
            None => format!(
                "{}, no bound ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
        };
        let reference = if together {
            r.fair_share_bps
                .map_or("(unlimited)".to_string(), |f| format!("({})", scaled(f)))
        } else {
            match (r.rate_bounds_bps, r.implied_bps) {
                (Some([lo, hi]), _) => format!("({}–{})", scaled(lo), scaled(hi)),
                (None, None) => "(unlimited)".to_string(),
                (None, Some(_)) => "(not judged)".to_string(),
            }
        };
        let loss = match r.loss_bounds_percent {
            Some([lo, hi]) => format!("{} ({lo:.2}–{hi:.2})", opt(r.measured_loss_percent, 2)),
            None => "-".to_string(),
        };
        columns(
            &mut out,
            [
                &name(r),
                cc,
                &idle,
                &loaded,
                &format!("{} {reference}", scaled(r.measured_bps)),
                &loss,
            ],
        );
        if !r.connection_bps.is_empty() {
            let each: Vec<String> = r.connection_bps.iter().map(|b| scaled(*b)).collect();
            let _ = writeln!(out, "  connections: {} {unit}", each.join(", "));
        }
        if !r.deviations.is_empty() {
            out += &wrap(
                &format!("  out of bounds: {}", r.deviations.join("; ")),
                WIDTH,
                4,
            );
        }
    }
    jain_line(&mut out, previous_cc);
    out += &verdict(c, &name);
    let disturbed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let steal = r.host_steal_percent.filter(|s| *s >= STEAL_NOTED)?;
            Some(format!("{}-{} ({steal:.0} %)", r.from, r.to))
        })
        .collect();
    if !disturbed.is_empty() {
        out += &wrap(
            &format!(
                "note: this machine's hypervisor took CPU time from it (steal) while these \
                 loads ran: {}; their figures may be the host's, not the network's",
                disturbed.join(", ")
            ),
            WIDTH,
            2,
        );
    }
    let busy: Vec<String> = rows
        .iter()
        .filter_map(|r| Some(format!("{}-{} ({})", r.from, r.to, r.busy_stations?)))
        .collect();
    if !busy.is_empty() {
        out += &wrap(
            &format!(
                "note: busy stations hold the air of these paths, as long as DCF's backoff \
                 decides, and contend with TCP as other flows would: their RTTs are shown, \
                 not judged, and their rates are held only below their ceilings: {}",
                busy.join(", ")
            ),
            WIDTH,
            2,
        );
    }
    let late: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let late = r
                .emulator_late_p95_ms
                .filter(|l| *l >= EMULATOR_LATE_NOTED_MS)?;
            Some(format!("{}-{} ({late:.1} ms)", r.from, r.to))
        })
        .collect();
    if !late.is_empty() {
        out += &wrap(
            &format!(
                "note: the link emulator waited for a CPU while these loads ran, which their \
                 queue bounds allow (95th percentile of its lateness summed over the links \
                 crossed, there and back): {}; delays finer than that are the host's to \
                 decide, not the file's",
                late.join(", ")
            ),
            WIDTH,
            2,
        );
    }
    out
}

/// "verdict: all 3 paths within bounds", or which were not. With several rounds (`-C a,b`
/// or the together mode's two), each path under each algorithm is a check.
fn verdict(c: &NetCheck, name: &dyn Fn(&flowlab_results::net::CheckedPath) -> String) -> String {
    let n = c.paths.len();
    let what = if c.rounds.len() > 1 {
        "checks"
    } else {
        "paths"
    };
    let out: Vec<String> = c
        .paths
        .iter()
        .filter(|r| !r.deviations.is_empty())
        .map(|r| match (&r.congestion, c.rounds.len() > 1) {
            (Some(cc), true) => format!("{} under {cc}", name(r)),
            _ => name(r),
        })
        .collect();
    let text = match (out.len(), n) {
        (0, 1) => format!(
            "verdict: the one {} is within bounds",
            &what[..what.len() - 1]
        ),
        (0, _) => format!("verdict: all {n} {what} within bounds"),
        (bad, _) => format!(
            "verdict: {} of {n} {what} within bounds; out of bounds: {}",
            n - bad,
            out.join(", ")
        ),
    };
    wrap(&text, WIDTH, 2)
}
