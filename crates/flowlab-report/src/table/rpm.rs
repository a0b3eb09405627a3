//! `flowlab rpm`'s lines: a heading, a line per interval as the ramp goes, and the
//! summary per load.

use std::fmt::Write as _;

use crate::units::{Rate, UnitFormat};
use flowlab_results::rpm::{Confidence, DirectionResult, Idle, Interval, Params, RpmResult};

/// The heading: what is measured (`target`: "HOST port PORT", or a configuration's URL),
/// by which method.
pub fn rpm_header(target: &str, p: &Params, loads: &[&str]) -> String {
    format!(
        "RPM {target}: {}, {} (MAD {}, interval {} s, trimmed mean of the fastest {} %, stable within {} %, up to {} connections, {} s each at most)\n",
        loads.join(" then "),
        flowlab_results::rpm::DRAFT,
        p.mad,
        p.interval_seconds,
        p.trimmed_share * 100.0,
        p.stability_share * 100.0,
        p.max_connections,
        p.max_seconds
    )
}

fn rate(bps: f64) -> String {
    Rate(bps, UnitFormat::Adaptive).to_string()
}

/// One interval of a load's ramp.
pub fn rpm_interval(load: &str, iv: &Interval) -> String {
    // `both` opens a connection each way per step.
    let conns = if load == "both" {
        format!("{}+{}", iv.connections, iv.connections)
    } else {
        iv.connections.to_string()
    };
    let mut out = format!(
        "{load:<9}{:>6.2} s  {conns:>5} conn  {:>16}",
        iv.end,
        rate(iv.goodput_bps)
    );
    if let Some(m) = iv.moving_goodput_bps {
        let _ = write!(out, "  moving {}", rate(m));
    }
    if iv.saturated {
        out.push_str("  saturated");
    }
    if let Some(r) = iv.rpm {
        let _ = write!(out, "  RPM {r:.0}");
    }
    out.push('\n');
    out
}

/// A foreign probe's parts: "set-up 0.1, TLS 0.4, request 0.2" (TLS only over TLS).
fn parts(tcp: f64, tls: Option<f64>, request: f64) -> String {
    match tls {
        Some(tls) => format!("set-up {tcp:.3}, TLS {tls:.3}, request {request:.3}"),
        None => format!("set-up {tcp:.3}, request {request:.3}"),
    }
}

fn idle_line(i: &Idle) -> String {
    match (i.latency_ms, i.tcp_foreign_ms, i.request_foreign_ms, i.rpm) {
        (Some(l), Some(t), Some(r), Some(rpm)) => format!(
            "idle      latency {l:.3} ms ({}; {} probes{}): {rpm:.0} RPM\n",
            parts(t, i.tls_foreign_ms, r),
            i.probes,
            i.median_ms
                .map(|m| format!(", median {m:.3}"))
                .unwrap_or_default()
        ),
        _ => "idle      no probe completed\n".into(),
    }
}

fn confidence(c: Confidence) -> &'static str {
    match c {
        Confidence::High => "high confidence: stable",
        Confidence::Medium => "medium confidence: never stable",
        Confidence::Low => "low confidence: too short to judge",
    }
}

fn direction(d: &DirectionResult, idle: &Idle) -> String {
    let conns = if d.direction == "both" {
        format!("{}+{} connections", d.connections, d.connections)
    } else if d.connections == 1 {
        "1 connection".into()
    } else {
        format!("{} connections", d.connections)
    };
    let mut out = format!(
        "{:<9} goodput {} over {conns}, {:.1} s{}\n",
        d.direction,
        d.goodput_bps.map_or_else(|| "?".into(), rate),
        d.seconds,
        if d.saturated {
            ""
        } else {
            " (never saturated)"
        }
    );
    if let Some(why) = &d.stopped_adding {
        let _ = writeln!(out, "          no more connections could be added: {why}");
    }
    match &d.responsiveness {
        Some(r) => {
            let _ = writeln!(
                out,
                "          responsiveness {:.0} RPM ({})",
                r.rpm,
                confidence(d.confidence)
            );
            let _ = writeln!(
                out,
                "          separate connections {:.3} ms ({}): {:.0} RPM; load connections {:.3} ms: {:.0} RPM",
                r.foreign_ms,
                parts(r.tcp_foreign_ms, r.tls_foreign_ms, r.request_foreign_ms),
                r.rpm_foreign,
                r.request_loaded_ms,
                r.rpm_loaded
            );
            if let Some(i) = idle.latency_ms {
                // Never a negative "added": a round trip the load shortened is said so.
                let change = |v: f64| {
                    if v < -0.0005 {
                        format!("took {:.3} ms off", -v)
                    } else {
                        format!("added {:.3} ms", v.max(0.0))
                    }
                };
                let (foreign, own) = (r.foreign_ms - i, r.request_loaded_ms - i);
                let (foreign, own) = if foreign < -0.0005 || own < -0.0005 {
                    (change(foreign), change(own))
                } else {
                    (format!("added {foreign:.3} ms"), format!("{own:.3} ms"))
                };
                let _ = writeln!(
                    out,
                    "          the load {foreign} on separate connections, {own} on its own (idle {i:.3} ms)"
                );
            }
        }
        None => out.push_str("          responsiveness: no probes of every kind completed\n"),
    }
    out
}

/// The summary of a run.
pub fn rpm_summary(r: &RpmResult) -> String {
    let mut out = String::from("- - - - - - - - - - - - - - - - - - - - - - - - -\n");
    out += &idle_line(&r.idle);
    for d in &r.directions {
        out += &direction(d, &r.idle);
    }
    let _ = writeln!(
        out,
        "congestion control: {}",
        r.start
            .congestion
            .as_deref()
            .unwrap_or("each end's default")
    );
    if r.interrupted {
        out.push_str("(interrupted: what ran is shown)\n");
    }
    if let Some(e) = &r.error {
        let _ = writeln!(out, "stopped: {e} (what ran before is shown)");
    }
    out
}
