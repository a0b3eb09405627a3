//! What a diagnosis advises ([`flowlab_results::diagnose`]), one sentence each, most
//! important first: for each limit that held the sender a notable share of the time
//! ([`NOTABLE`]), what to change. A window is sized for the path — its lowest RTT times
//! the rate it can carry, when known ([`PathRate`]: a flowlab topology's bottleneck, or
//! the `-b` target) — never for the rate a window-limited transfer achieved, which the
//! window itself held down; docs/metrics.md has the rules. The table prints these under
//! the diagnosis and a JSON document carries them as each diagnosis's `advice`.

use flowlab_results::diagnose::{
    Diagnosis, Evidence, Limit, NAMED_RATES, NOTABLE, PathRate, QUEUE_INFLATION, QUEUE_MIN_US,
    Shares, bdp,
};
use flowlab_results::latency::TestLatency;
use flowlab_results::result::TestResult;

use crate::units::{Bytes, Rate, UnitFormat, rtt, size_arg};

/// What `d`, one direction's diagnosis, advises, its window sized for `rate`; a queue
/// the latency probes saw build under the load (`latency`) is named first where the
/// network limited the sender, and nowhere else.
pub fn of(d: &Diagnosis, rate: Option<&PathRate>, latency: Option<&TestLatency>) -> Vec<String> {
    let mut out = limits(&d.shares, &d.evidence, rate);
    if d.primary == Limit::Network {
        if let Some(queue) = latency.and_then(queue) {
            out.insert(0, queue);
        }
    }
    out
}

/// What `d`, a diagnosis of the test `r`, advises ([`of`]): sized for the path rate its
/// spec knows, with the queue its latency probes saw.
pub fn of_test(r: &TestResult, d: &Diagnosis) -> Vec<String> {
    let rates = r.start.spec.window_rates();
    of(d, rates.of(d.direction), r.latency.as_ref())
}

/// What the latency probes say of a queue that built under the load: `None` when none
/// did.
fn queue(l: &TestLatency) -> Option<String> {
    if l.queue_building != Some(true) {
        return None;
    }
    let (idle, loaded) = (l.idle.rtt.as_ref()?, l.loaded.rtt.as_ref()?);
    Some(format!(
        "The latency probes saw a queue build under this load: the round trip went from \
         {:.3} ms idle to {:.3} ms at the median ({:.3} ms at p99), a queue-building \
         bottleneck (bufferbloat); an AQM there (fq_codel, cake) or a smaller queue keeps \
         the round trip down without costing throughput.",
        idle.median_ms, loaded.median_ms, loaded.p99_ms
    ))
}

/// The advice for a receive-window limit. A window must hold the path's
/// bandwidth-delay product, the lowest RTT × the rate the path can carry; the receiver's
/// kernel doubles the buffer asked for (SO_RCVBUF) and advertises half or more of its
/// buffer as window, so `--recv-window` BDP gives a window of at least the BDP, and the
/// `tcp_rmem` maximum (the buffer itself) must be twice it. What to do comes first, with
/// its number, then why.
fn receive_window_advice(pct: f64, e: &Evidence, rate: Option<&PathRate>) -> String {
    let window = e.max_receive_window.unwrap_or(0);
    let mut at = Vec::new();
    if let Some(w) = e.max_receive_window {
        at.push(format!("{}", Bytes(w, UnitFormat::Adaptive)));
    }
    if e.window_samples > 0 {
        at.push(format!(
            "in {} of {} samples",
            e.window_full_samples, e.window_samples
        ));
    }
    let mut t = format!("receive-window limited {pct:.0} % of the time");
    if !at.is_empty() {
        t += &format!(" (at the receiver's window, {})", at.join(", "));
    }
    let queue = || {
        e.median_srtt_us
            .map(|m| format!(" (median {})", rtt(m)))
            .unwrap_or_default()
    };
    let larger = |need: u64, why: &str| {
        format!(
            "raise the receiver's buffer to `--recv-window {}` (or `-w`){why}, or \
             net.ipv4.tcp_rmem's max to at least {} bytes",
            size_arg(need),
            2 * need
        )
    };
    if e.window_full_samples > 0 && 2 * e.reader_full_samples >= e.window_full_samples {
        t += &format!(
            ", but in {} of those samples the window had shrunk below half of what the receiver \
             advertised just before: its buffer held data its application had not read yet, so the \
             reader (its CPU, on loopback) is the limit, not the buffer's size",
            e.reader_full_samples
        );
        return t;
    }
    match (rate, e.min_rtt_us) {
        (Some(r), Some(lowest)) => {
            let need = bdp(r.bps, lowest);
            let product = format!(
                "the path's bandwidth-delay product, {} (the lowest RTT) × {} ({}) = {}",
                rtt(lowest),
                Rate(r.bps as f64, UnitFormat::Adaptive),
                r.source,
                Bytes(need, UnitFormat::Adaptive)
            );
            if need <= window {
                t += &format!(
                    ", although the window already holds {product}: the RTT under load{} grew \
                     beyond the lowest, so what was in flight beyond that product waited in a \
                     queue on the path, and a larger window would only lengthen that queue",
                    queue()
                );
            } else {
                t += &format!(": {}, since a window must hold {product}", larger(need, ""));
            }
        }
        (None, Some(lowest)) => {
            // Rates the transfer did not reach already, for which the window would grow.
            let reached = e.delivery_rate.unwrap_or(0).saturating_mul(8);
            let sizes: Vec<String> = NAMED_RATES
                .iter()
                .filter(|&&bps| bps > reached && bdp(bps, lowest) > window)
                .take(3)
                .map(|&bps| {
                    format!(
                        "`--recv-window {}` for {}",
                        size_arg(bdp(bps, lowest)),
                        Rate(bps as f64, UnitFormat::Adaptive)
                    )
                })
                .collect();
            if sizes.is_empty() {
                let need = e.peak_in_flight.unwrap_or(window).max(1);
                t += &format!(
                    ": {}; the window already holds the lowest RTT ({}) × any rate this path \
                     could have, and filled because queuing raised the RTT{}",
                    larger(2 * need, ", twice the peak in flight"),
                    rtt(lowest),
                    queue()
                );
            } else {
                t += &format!(
                    ": at the lowest RTT, {}, a window needs {} (net.ipv4.tcp_rmem's max twice \
                     that); the path's rate is unknown (flowlab knows it inside a flowlab \
                     topology, or from `-b`)",
                    rtt(lowest),
                    sizes.join(", ")
                );
            }
        }
        (_, None) => {
            let need = e.peak_in_flight.unwrap_or(window).max(1);
            t += &format!(
                ": {}; no RTT was sampled to size a window for the path",
                larger(2 * need, ", twice the peak in flight")
            );
        }
    }
    t
}

fn limits(shares: &Shares, e: &Evidence, rate: Option<&PathRate>) -> Vec<String> {
    let mut out = Vec::new();
    // What a send buffer must hold: the path's bandwidth-delay product where the path's
    // rate is known, else the achieved one or what was in flight; the kernel keeps about
    // half a socket buffer for data.
    let need = e
        .path_bdp_bytes
        .or(e.bdp_bytes)
        .unwrap_or(0)
        .max(e.peak_in_flight.unwrap_or(0))
        .max(1);
    let buffer = 2 * need;
    for (limit, share) in shares.ranked() {
        if share < NOTABLE {
            continue;
        }
        let pct = share * 100.0;
        let text = match limit {
            Limit::ReceiveWindow => receive_window_advice(pct, e, rate),
            Limit::SendBuffer => format!(
                "send-buffer limited {pct:.0} % of the time{}: raise the sender's buffer to `-w \
                 {}`, or net.ipv4.tcp_wmem's max to at least {buffer} bytes",
                e.sndbuf
                    .map(|b| format!(" (its buffer held {})", Bytes(b, UnitFormat::Adaptive)))
                    .unwrap_or_default(),
                size_arg(buffer),
            ),
            Limit::Network => {
                let mut t = format!("congestion-window (network) limited {pct:.0} % of the time");
                match (e.retransmit_share, e.rtt_inflation) {
                    (Some(r), _) if r >= 0.01 => {
                        t += &format!(
                            ": {:.1} % of segments were retransmitted, so the path loses packets; \
                         a loss-tolerant algorithm (`-C bbr`) may do better",
                            r * 100.0
                        )
                    }
                    (_, Some(x))
                        if x >= QUEUE_INFLATION
                            && e.median_srtt_us.unwrap_or(0)
                                >= e.min_rtt_us.unwrap_or(0) + QUEUE_MIN_US =>
                    {
                        t += &format!(
                            ": the RTT under load was {x:.1}× its minimum, so a queue builds up on \
                         the path (bufferbloat); `-C bbr` or a smaller queue keeps it short"
                        )
                    }
                    _ => t += ": the path (or this host's CPU, on loopback) is the bottleneck",
                }
                t
            }
            Limit::Application => format!(
                "application limited {pct:.0} % of the time: the sender had nothing to send \
                 (a `-b` rate, a slow writer, or a CPU-bound host)"
            ),
        };
        out.push(text);
    }
    out
}
