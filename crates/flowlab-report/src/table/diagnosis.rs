//! `--trace`'s diagnosis under a test's table.

use std::fmt::Write as _;

use crate::units::{Bytes, Rate, UnitFormat, rtt};
use flowlab_results::diagnosis::Limit;
use flowlab_results::result::{Side, TestResult};

/// A limit as the table names it.
fn limit_name(l: Limit) -> &'static str {
    match l {
        Limit::ReceiveWindow => "the receiver's window",
        Limit::SendBuffer => "the sender's socket buffer",
        Limit::Network => "the congestion window (the network)",
        Limit::Application => "the application (nothing to send)",
    }
}

/// The rate the test's senders achieved in `direction`, bits a second.
fn achieved(r: &TestResult, direction: flowlab_results::result::StreamDirection) -> Option<f64> {
    let sum = r
        .end
        .as_ref()?
        .sums
        .iter()
        .find(|s| s.direction == direction)?;
    sum.receiver
        .as_ref()
        .or(sum.sender.as_ref())
        .map(|t| t.bits_per_second)
}

/// `--trace`: how much was sampled, what limited each direction's senders, and what to
/// change ([`crate::advice`]); nothing when `r` was not traced.
pub fn diagnosis(r: &TestResult) -> String {
    let mut out = String::new();
    let Some(t) = &r.trace else {
        return out;
    };
    let count = |side: Side| -> usize {
        t.streams
            .iter()
            .filter(|s| s.side == side)
            .map(|s| s.trace.samples.len())
            .sum()
    };
    let _ = writeln!(
        out,
        "Trace: every {} ms, {} samples on the client, {} on the server",
        t.period_us as f64 / 1000.0,
        count(Side::Client),
        count(Side::Server)
    );
    if t.streams.iter().any(|s| s.trace.truncated) {
        out.push_str("  (some streams had more samples than kept: traces truncated)\n");
    }
    for d in &t.diagnosis {
        let sh = &d.shares;
        let _ = writeln!(
            out,
            "What limited the sender ({}): {} — receive window {:.0} %, send buffer {:.0} %, network {:.0} %, application {:.0} %{}",
            d.direction.as_str(),
            limit_name(d.primary),
            sh.receive_window * 100.0,
            sh.send_buffer * 100.0,
            sh.network * 100.0,
            sh.application * 100.0,
            if d.method == flowlab_results::diagnosis::Method::KernelAndSamples {
                " (receive window from the samples at the window: the kernel's own count missed them)"
            } else {
                ""
            }
        );
        let e = &d.evidence;
        let mut ev = Vec::new();
        if let Some(p) = e.peak_in_flight {
            ev.push(format!("peak in flight {}", Bytes(p, UnitFormat::Adaptive)));
        }
        if let Some(w) = e.max_receive_window {
            ev.push(format!(
                "receive window up to {}",
                Bytes(w, UnitFormat::Adaptive)
            ));
        }
        if e.window_full_samples > 0 {
            ev.push(format!(
                "window full in {} of {} samples",
                e.window_full_samples, e.window_samples
            ));
        }
        if let (Some(b), Some(r), Some(lowest)) = (e.bdp_bytes, e.delivery_rate, e.min_rtt_us) {
            ev.push(format!(
                "BDP {} (peak delivery rate {} × min RTT {})",
                Bytes(b, UnitFormat::Adaptive),
                Rate(r as f64 * 8.0, UnitFormat::Adaptive),
                rtt(lowest)
            ));
        }
        if let Some(achieved) = achieved(r, d.direction) {
            ev.push(format!(
                "the test achieved {}",
                Rate(achieved, UnitFormat::Adaptive)
            ));
        }
        if let (Some(b), Some(r)) = (e.path_bdp_bytes, e.path_rate_bps) {
            ev.push(format!(
                "path BDP {} ({} × min RTT)",
                Bytes(b, UnitFormat::Adaptive),
                Rate(r as f64, UnitFormat::Adaptive)
            ));
        }
        if let (Some(m), Some(x)) = (e.median_srtt_us, e.rtt_inflation) {
            ev.push(format!("median RTT {} ({x:.1}× min)", rtt(m)));
        }
        if let Some(r) = e.retransmits {
            let s = if r == 1 { "" } else { "s" };
            ev.push(format!("{r} retransmitted segment{s}"));
        }
        if !ev.is_empty() {
            let _ = writeln!(out, "  evidence: {}", ev.join(", "));
        }
        for a in crate::advice::of_test(r, d) {
            let _ = writeln!(out, "  - {a}");
        }
    }
    // Said by the trace itself; a document of an older flowlab, which did not say, is
    // judged here the same way.
    let why = t
        .undiagnosed
        .as_deref()
        .or_else(|| flowlab_results::diagnose::undiagnosed(t));
    if let Some(why) = why {
        let _ = writeln!(out, "{why}: no diagnosis.");
    }
    out
}
