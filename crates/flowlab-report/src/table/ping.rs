//! `flowlab ping`'s lines: a header, one line per reply, the summary, the histogram.

use std::fmt::Write as _;

use flowlab_results::ping::{Latency, PingResult, Probe, Variation, histogram, quantile};

/// What is probed, how (printed before the name is resolved); `protocol` as in
/// `PingStart::protocol`.
pub fn ping_header(
    host: &str,
    port: u16,
    protocol: &str,
    size: usize,
    interval_seconds: f64,
) -> String {
    let every = if interval_seconds == 0.0 {
        "back to back".to_string()
    } else {
        format!("every {} s", trim(interval_seconds))
    };
    let what = match protocol {
        "tcp" => format!("{size}-byte TCP requests and responses on one connection"),
        "tcp-connect" => "TCP connection set-ups".to_string(),
        _ => format!("{size}-byte UDP probes"),
    };
    format!("PING {host} port {port}: {what} {every}\n")
}

fn trim(x: f64) -> String {
    let t = format!("{x:.6}");
    t.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// One reply (`protocol` as in `PingStart::protocol`).
pub fn ping_reply(p: &Probe, from: &str, protocol: &str, size: usize) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let rtt = ms(p.rtt_ns().unwrap_or(0));
    if protocol == "tcp-connect" {
        return format!("connected to {from}: seq={} time={rtt:.3} ms\n", p.seq);
    }
    let unit = if size == 1 { "byte" } else { "bytes" };
    let mut line = format!("{size} {unit} from {from}: seq={} rtt={rtt:.3} ms", p.seq);
    if let Some(server) = p.server_ns {
        let _ = write!(line, " server={:.3} ms", ms(server));
    }
    if p.reordered {
        line += " (reordered)";
    }
    line.push('\n');
    line
}

fn latency_line(name: &str, l: &Latency) -> String {
    format!(
        "{name:<10} min {:.3}  mean {:.3}  median {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  stdev {:.3}",
        l.min_ms, l.mean_ms, l.median_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms, l.stdev_ms
    )
}

fn variation_line(name: &str, v: &Variation, synced: bool) -> String {
    let mut line = format!(
        "{name:<10} variation median {:.3}  p99 {:.3}  max {:.3}",
        v.median_ms, v.p99_ms, v.max_ms
    );
    if synced {
        let _ = write!(line, "  (smallest one-way delay {:.3})", v.min_raw_ms);
    }
    line
}

/// The summary after the run.
pub fn ping_summary(r: &PingResult) -> String {
    let s = &r.summary;
    let mut out = String::new();
    let _ = writeln!(out, "--- {} ping statistics ---", r.start.host);
    let _ = writeln!(
        out,
        "{} sent, {} received, {} lost ({:.1} %), {} duplicates, {} reordered{}",
        s.sent,
        s.received,
        s.lost,
        s.loss_percent,
        s.duplicates,
        s.reordered,
        if r.interrupted { ", interrupted" } else { "" }
    );
    if let Some(rtt) = &s.rtt {
        // Messages too short for the server's times (TCP, under 48 bytes) carry none.
        let taken_out = if s.server.is_some() {
            ", server's time taken out"
        } else {
            ""
        };
        let _ = writeln!(out, "{} (ms{taken_out})", latency_line("rtt", rtt));
        if let Some(j) = s.jitter_ms {
            let _ = writeln!(out, "{:<10} {j:.3} ms (RFC 3550)", "jitter");
        }
    }
    if let Some(server) = &s.server {
        let _ = writeln!(
            out,
            "{:<10} median {:.3}  max {:.3} (ms)",
            "server", server.median_ms, server.max_ms
        );
    }
    let synced = r.start.clocks_synced;
    if let Some(f) = &s.forward {
        let _ = writeln!(out, "{} (ms)", variation_line("forward", f, synced));
    }
    if let Some(b) = &s.backward {
        let _ = writeln!(out, "{} (ms)", variation_line("backward", b, synced));
    }
    if r.start.interval_seconds == 0.0 {
        if let Some(tps) = s.replies_per_second {
            let _ = writeln!(out, "{:<10} {tps:.0} transactions/s (back to back)", "rate");
        }
    }
    let _ = writeln!(out, "timestamps: {}", r.start.timestamps);
    out
}

/// The round trips' percentile distribution (HdrHistogram's, a row each time the
/// distance to 100 % halves), ms.
pub fn ping_histogram(r: &PingResult) -> String {
    let rtts: Vec<u64> = r.probes.iter().filter_map(Probe::rtt_ns).collect();
    let mut out = String::new();
    if rtts.is_empty() {
        return out;
    }
    let h = histogram(rtts.iter().copied());
    // Bucket values stay within what was measured (the extremes are known exactly).
    let (lo, hi) = (
        rtts.iter().copied().min().unwrap_or(0),
        rtts.iter().copied().max().unwrap_or(0),
    );
    let _ = writeln!(
        out,
        "{:>12}  {:>12}  {:>10}  {:>12}",
        "rtt ms", "percentile", "count", "1/(1-p)"
    );
    let mut last = None;
    for v in h.iter_quantiles(1) {
        let p = v.quantile_iterated_to();
        let value = quantile(&h, p).clamp(lo, hi);
        if last == Some((value, v.count_since_last_iteration())) && p < 1.0 {
            continue;
        }
        last = Some((value, v.count_since_last_iteration()));
        let inverse = if p < 1.0 {
            format!("{:.2}", 1.0 / (1.0 - p))
        } else {
            "∞".to_string()
        };
        let _ = writeln!(
            out,
            "{:>12.3}  {:>11.5}%  {:>10}  {:>12}",
            value as f64 / 1e6,
            100.0 * p,
            v.count_since_last_iteration(),
            inverse
        );
        if p >= 1.0 {
            break;
        }
    }
    out
}
