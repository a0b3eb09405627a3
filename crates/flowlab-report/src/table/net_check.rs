//! `flowlab net check`'s table.

use std::fmt::Write as _;

use crate::units::{Rate, UnitFormat};
use flowlab_results::net::{EMULATOR_LATE_NOTED_MS, FAIRNESS_CC, NetCheck, STEAL_NOTED};

/// `flowlab net check`: what it judged and how, then a row per path and round, Jain's
/// index after each round run together, and notes on the host's disturbances.
pub fn net_check(c: &NetCheck) -> String {
    let rows = &c.paths;
    let jain = &c.jain_index_by_congestion;
    let rate = |bps: f64| Rate(bps, UnitFormat::Adaptive).to_string();
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
    let _ = writeln!(
        out,
        "load: {what}, {} s after a first second left out, under {}",
        c.load_seconds,
        ccs.join(", then ")
    );
    let _ = writeln!(
        out,
        "judged: idle RTT (median of 20 echoes) within ±{:.1} ms of the file; loaded RTT (95th \
         percentile of echoes during the load) at most the queue bound + {:.1} ms; {}{}",
        c.rtt_tolerance_ms,
        c.rtt_tolerance_ms,
        if together {
            "rates not judged (shared links), shown beside their max-min fair share"
        } else {
            "rate within the bounds shown"
        },
        if rows.iter().any(|r| r.implied_loss_percent > 0.0) {
            format!(
                "; loss within ±{:.0} % of the file's",
                c.loss_tolerance_percent
            )
        } else {
            String::new()
        }
    );
    let _ = writeln!(
        out,
        "{:<10} {:<6} {:>22} {:>32} {:>34} {:>18}  deviations",
        "path",
        "cc",
        "idle RTT (file ±tol)",
        "loaded RTT p95 ≤ bound (med/max)",
        if together {
            "rate (fair share)"
        } else {
            "rate (judged bounds)"
        },
        "loss (file bounds)",
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
        let name = if r.connections > 1 {
            format!("{}-{}:{}", r.from, r.to, r.connections)
        } else {
            format!("{}-{}", r.from, r.to)
        };
        let idle = format!(
            "{} ms ({:.1}±{:.1})",
            opt(r.measured_rtt_ms, 1),
            r.implied_rtt_ms,
            r.rtt_tolerance_ms
        );
        let loaded = match r.implied_bps {
            Some(_) => format!(
                "{} ≤ {:.1}+{:.0} ms ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                r.queue_bound_ms,
                r.rtt_tolerance_ms,
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
            // No rate limit, so no queue to bound.
            None => format!(
                "{} ms, no bound ({}/{})",
                opt(r.loaded_rtt_p95_ms, 1),
                opt(r.loaded_rtt_median_ms, 1),
                opt(r.loaded_rtt_ms, 1)
            ),
        };
        let reference = if together {
            r.fair_share_bps
                .map_or("(unlimited)".to_string(), |f| format!("({})", rate(f)))
        } else {
            match (r.rate_bounds_bps, r.implied_bps) {
                (Some([lo, hi]), _) => format!("({}–{})", rate(lo), rate(hi)),
                (None, None) => "(unlimited)".to_string(),
                (None, Some(_)) => "(random loss: not judged)".to_string(),
            }
        };
        let loss = match r.loss_bounds_percent {
            Some([lo, hi]) => format!("{} % ({lo:.2}–{hi:.2})", opt(r.measured_loss_percent, 2)),
            None => "-".to_string(),
        };
        let _ = writeln!(
            out,
            "{:<10} {:<6} {:>22} {:>32} {:>34} {:>18}  {}",
            name,
            cc,
            idle,
            loaded,
            format!("{} {reference}", rate(r.measured_bps)),
            loss,
            if r.deviations.is_empty() {
                "-".to_string()
            } else {
                r.deviations.join("; ")
            }
        );
        if !r.connection_bps.is_empty() {
            let each: Vec<String> = r.connection_bps.iter().map(|b| rate(*b)).collect();
            let _ = writeln!(out, "{:<10} connections: {}", "", each.join(", "));
        }
    }
    jain_line(&mut out, previous_cc);
    let disturbed: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let steal = r.host_steal_percent.filter(|s| *s >= STEAL_NOTED)?;
            Some(format!("{}-{} ({steal:.0} %)", r.from, r.to))
        })
        .collect();
    if !disturbed.is_empty() {
        let _ = writeln!(
            out,
            "note: this machine's hypervisor took CPU time from it (steal) while these loads \
             ran: {}; their figures may be the host's, not the network's",
            disturbed.join(", ")
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
        let _ = writeln!(
            out,
            "note: the link emulator waited for a CPU while these loads ran, which their queue \
             bounds allow (95th percentile of its lateness summed over the links crossed, there \
             and back): {}; delays finer than that are the host's to decide, not the file's",
            late.join(", ")
        );
    }
    out
}
