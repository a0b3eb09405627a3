//! "What limited this transfer": a verdict per direction from the senders' TCP_INFO
//! samples (sans-IO: a trace in, a diagnosis out).
//!
//! The kernel itself accounts, since Linux 4.10, how long a sender had data to send
//! (`busy_time`) and, of that, how long it could not send because the peer's receive
//! window was full (`rwnd_limited`) or its own send buffer was (`sndbuf_limited`). Over
//! the traced span (first to last sample of each stream):
//!
//! | limit | time |
//! |---|---|
//! | receive window | Δ`rwnd_limited` |
//! | send buffer | Δ`sndbuf_limited` |
//! | congestion window / network | Δ`busy_time` − Δ`rwnd_limited` − Δ`sndbuf_limited` |
//! | application | span − Δ`busy_time` (the sender had nothing to send) |
//!
//! The kernel counts a sender as receive-window limited only when its send loop stops at
//! the window test; under bbr it mostly stops earlier, at the pacing or congestion-window
//! test, so a sender whose bytes in flight sit at the peer's window all the time is
//! counted as network limited. What the trace saw therefore has the last word: the
//! receive-window share is at least the share of samples whose sender was at the peer's
//! window ([`window_full`]: what it had sent filled the window, or its next segment did
//! not fit; needs `snd_wnd`, 5.4), the difference taken from the network's share, then
//! the application's (`method` "kernel+samples").
//!
//! On older kernels the samples are classified one by one instead: a sender at the
//! peer's window is the receive window; bytes in flight filling the congestion window
//! ([`fills`]) is the network; else the application.
//!
//! Advice sizes a window for the path: its lowest RTT times the rate it can carry, when
//! known ([`PathRate`]: a flowlab topology's bottleneck, or the `-b` target) — never the
//! rate a window-limited transfer achieved, which the window itself held down. Evidence
//! and advice are computed from the same samples; docs/metrics.md has the rules.

pub use crate::diagnosis::{Diagnosis, Evidence, Limit, Method, Shares};
use crate::result::Trace;
use crate::spec::StreamDirection;
pub use crate::spec::{PathRate, PathRates};
use crate::units::{decimal_bytes, rate_words, size_arg};
use flowlab_proto::trace::TraceSample;

/// A share of the time at or above which a limit is worth advice.
pub const NOTABLE: f64 = 0.10;
/// RTT growth under load (median smoothed RTT over the minimum) that counts as a queue
/// building up, if it is also at least [`QUEUE_MIN_US`] in absolute terms.
pub const QUEUE_INFLATION: f64 = 2.0;
pub const QUEUE_MIN_US: u64 = 1_000;

/// Whether `flight` bytes fill a window of `window` bytes: within 10 %, or within one
/// segment where a segment is small next to the window (loopback's 64 KB segments are
/// not). A closed window (0: the receiver's buffer is full and its application has not
/// read it yet) is full whatever is in flight — often nothing, all of it acknowledged: a
/// 4 KiB receive buffer on loopback, sampled 62 times on a busy host, never once caught
/// bytes in flight, so no sample counted as at the window though the kernel counted the
/// whole second as receive-window limited.
///
/// With `waiting` bytes written but not yet sent (`notsent_bytes`), a window is also
/// full when the sender's next segment — a whole one, or all that waits if less — does
/// not fit in what is left of it, however large a segment is next to the window: the
/// kernel's own window test (`tcp_snd_wnd_test`). The kernel then sends no part of a
/// segment into the window until its probe timer fires (sender-side silly-window
/// avoidance), and counts the time as receive-window limited. A fresh clone on another
/// host caught such a sender in all 61 samples: an 8 KiB window open, nothing in
/// flight, 4 MB waiting behind a 32 KiB segment.
///
/// Against the receiver's window, `flight` is what [`window_full`] gives: the segments
/// sent and not yet cumulatively acknowledged, each counted as a whole segment.
pub fn fills(flight: u64, window: u64, mss: u64, waiting: Option<u64>) -> bool {
    window == 0
        || flight as f64 >= 0.9 * window as f64
        || (mss * 8 <= window && flight + mss >= window)
        || waiting.is_some_and(|w| w > 0 && flight + w.min(mss) > window)
}

/// Whether a sample's sender was at the receiver's window ([`fills`]), if the sample
/// shows it. The window counts from the first byte not yet cumulatively acknowledged,
/// so what it holds is every segment sent since (`unacked`), those the receiver has
/// selectively acknowledged and those taken as lost included — not the bytes in flight,
/// which leave them out. TCP_INFO counts segments, so each is taken as a whole MSS: a
/// sender of part-filled segments (one that had little to send) can be counted at the
/// window before it is, as bytes in flight always were.
pub fn window_full(s: &TraceSample) -> Option<bool> {
    let mss = s.snd_mss?;
    Some(fills(s.unacked? * mss, s.snd_wnd?, mss, s.notsent_bytes))
}

/// Rates a window is sized for when the path's is unknown (bit/s), the lowest first.
pub const NAMED_RATES: [u64; 4] = [100_000_000, 1_000_000_000, 10_000_000_000, 100_000_000_000];

/// Diagnoses every direction whose senders were traced; `rates` sizes the advice.
pub fn diagnose(trace: &Trace, rates: &PathRates) -> Vec<Diagnosis> {
    [StreamDirection::Up, StreamDirection::Down]
        .into_iter()
        .filter_map(|d| {
            let streams: Vec<&[TraceSample]> = trace
                .streams
                .iter()
                .filter(|s| s.direction == d && s.sender && s.trace.samples.len() >= 2)
                .map(|s| s.trace.samples.as_slice())
                .collect();
            diagnose_direction(d, &streams, rates.of(d))
        })
        .collect()
}

/// Diagnoses one direction from its senders' samples (each oldest first), sizing windows
/// for `rate` where the path's is known.
pub fn diagnose_direction(
    d: StreamDirection,
    streams: &[&[TraceSample]],
    rate: Option<&PathRate>,
) -> Option<Diagnosis> {
    if streams.is_empty() {
        return None;
    }
    let by_kernel: Option<Vec<[f64; 5]>> = streams.iter().map(|s| kernel_times(s)).collect();
    let (method, shares) = match by_kernel {
        Some(times) => {
            let total: [f64; 5] = times
                .iter()
                .fold([0.0; 5], |acc, t| std::array::from_fn(|i| acc[i] + t[i]));
            let span = total[0];
            if span <= 0.0 {
                return None;
            }
            let [_, busy, rwnd, sndbuf, _] = total;
            (
                Method::Kernel,
                Shares {
                    receive_window: rwnd / span,
                    send_buffer: sndbuf / span,
                    network: (busy - rwnd - sndbuf).max(0.0) / span,
                    application: (span - busy).max(0.0) / span,
                },
            )
        }
        None => (Method::Samples, sample_shares(streams)?),
    };
    let evidence = evidence(streams, rate);
    let (method, shares) = match evidence.window_full_share() {
        Some(seen) if method == Method::Kernel && seen > shares.receive_window => {
            (Method::KernelAndSamples, shares.with_receive_window(seen))
        }
        _ => (method, shares),
    };
    let ranked = shares.ranked();
    let primary = ranked[0].0;
    Some(Diagnosis {
        direction: d,
        method,
        shares,
        primary,
        evidence,
        advice: advice(&shares, &evidence, rate),
    })
}

/// Puts first in the advice of every network-limited direction what the latency probes
/// saw of the bottleneck: a queue that built under the load
/// ([`crate::latency::TestLatency::queue_advice`]). Nothing changes when no queue built.
pub fn name_queue(diagnosis: &mut [Diagnosis], latency: &crate::latency::TestLatency) {
    let Some(advice) = latency.queue_advice() else {
        return;
    };
    for d in diagnosis.iter_mut().filter(|d| d.primary == Limit::Network) {
        d.advice.insert(0, advice.clone());
    }
}

/// `[span, busy, rwnd-limited, sndbuf-limited, 0]` in µs from the kernel's own clocks,
/// `None` when the kernel lacks them.
fn kernel_times(s: &[TraceSample]) -> Option<[f64; 5]> {
    let (a, b) = (s.first()?, s.last()?);
    let d = |f: fn(&TraceSample) -> Option<u64>| -> Option<f64> {
        Some(f(b)?.saturating_sub(f(a)?) as f64)
    };
    let span = b.t_us.saturating_sub(a.t_us) as f64;
    let busy = d(|x| x.busy_time_us)?.min(span);
    let rwnd = d(|x| x.rwnd_limited_us)?.min(busy);
    let sndbuf = d(|x| x.sndbuf_limited_us)?.min(busy - rwnd);
    Some([span, busy, rwnd, sndbuf, 0.0])
}

/// Shares by classifying each sample (older kernels).
fn sample_shares(streams: &[&[TraceSample]]) -> Option<Shares> {
    let mut counts = [0u64; 4];
    for s in streams.iter().flat_map(|s| s.iter()) {
        let (Some(flight), Some(mss)) = (s.in_flight_bytes(), s.snd_mss) else {
            continue;
        };
        let i = if window_full(s) == Some(true) {
            0
        } else if s
            .cwnd_bytes()
            .is_some_and(|c| fills(flight, c, mss, s.notsent_bytes))
        {
            2
        } else {
            3
        };
        counts[i] += 1;
    }
    let n = counts.iter().sum::<u64>() as f64;
    (n > 0.0).then(|| Shares {
        receive_window: counts[0] as f64 / n,
        send_buffer: 0.0,
        network: counts[2] as f64 / n,
        application: counts[3] as f64 / n,
    })
}

impl Evidence {
    /// The share of samples whose sender was at the peer's window ([`window_full`]), if
    /// any sample showed it.
    pub fn window_full_share(&self) -> Option<f64> {
        (self.window_samples > 0)
            .then(|| self.window_full_samples as f64 / self.window_samples as f64)
    }
}

/// How many samples before a window it is compared with to tell that it shrank (and any
/// later sample, that it reopened). Recent ones only, and reopened too: a receive buffer
/// set after the handshake (`--recv-window`) leaves the first window advertised far
/// larger than any later one, and that is no sign of a slow reader.
const READER_LOOKBACK: usize = 10;

/// What a window must hold for `bps` over `rtt_us`, in bytes (rounded up).
fn bdp(bps: u64, rtt_us: u64) -> u64 {
    (bps as u128 * rtt_us as u128).div_ceil(8_000_000) as u64
}

fn evidence(streams: &[&[TraceSample]], rate: Option<&PathRate>) -> Evidence {
    let all = || streams.iter().flat_map(|s| s.iter());
    let max = |f: fn(&TraceSample) -> Option<u64>| all().filter_map(f).max();
    let (mut window_samples, mut window_full_samples, mut reader_full_samples) = (0, 0, 0);
    for stream in streams {
        // The widest window advertised after each sample, in one pass from the end (a
        // trace of an hour holds hundreds of thousands of samples).
        let mut later = vec![0; stream.len()];
        for i in (1..stream.len()).rev() {
            later[i - 1] = later[i].max(stream[i].snd_wnd.unwrap_or(0));
        }
        for (i, s) in stream.iter().enumerate() {
            if let (Some(full), Some(w)) = (window_full(s), s.snd_wnd) {
                window_samples += 1;
                if full {
                    window_full_samples += 1;
                    let before = stream[i.saturating_sub(READER_LOOKBACK)..i]
                        .iter()
                        .filter_map(|s| s.snd_wnd)
                        .max()
                        .unwrap_or(0);
                    reader_full_samples += u64::from(2 * w < before && 2 * w < later[i]);
                }
            }
        }
    }
    let min_rtt_us = all().filter_map(|s| s.min_rtt_us).filter(|&r| r > 0).min();
    let delivery_rate = max(|s| s.delivery_rate);
    let bdp_bytes = match (delivery_rate, min_rtt_us) {
        (Some(r), Some(rtt)) => Some((r as u128 * rtt as u128 / 1_000_000) as u64),
        _ => None,
    };
    let path_bdp_bytes = match (rate, min_rtt_us) {
        (Some(r), Some(rtt)) => Some(bdp(r.bps, rtt)),
        _ => None,
    };
    let mut srtts: Vec<u64> = all().filter_map(|s| s.srtt_us).collect();
    srtts.sort_unstable();
    let median_srtt_us = srtts.get(srtts.len() / 2).copied();
    let rtt_inflation = match (median_srtt_us, min_rtt_us) {
        (Some(m), Some(lo)) if lo > 0 => Some(m as f64 / lo as f64),
        _ => None,
    };
    let delta = |f: fn(&TraceSample) -> Option<u64>| -> Option<u64> {
        streams
            .iter()
            .map(|s| Some(f(s.last()?)?.saturating_sub(f(s.first()?)?)))
            .sum()
    };
    let retransmits = delta(|s| s.total_retrans);
    let segs = delta(|s| s.data_segs_out);
    let retransmit_share = match (retransmits, segs) {
        (Some(r), Some(n)) if n > 0 => Some(r as f64 / n as f64),
        _ => None,
    };
    Evidence {
        peak_in_flight: all().filter_map(|s| s.in_flight_bytes()).max(),
        max_receive_window: max(|s| s.snd_wnd),
        window_full_samples,
        window_samples,
        reader_full_samples,
        delivery_rate,
        min_rtt_us,
        bdp_bytes,
        path_rate_bps: rate.map(|r| r.bps),
        path_bdp_bytes,
        median_srtt_us,
        rtt_inflation,
        retransmits,
        retransmit_share,
        sndbuf: max(|s| s.sndbuf),
    }
}

/// The advice for a receive-window limit. A window must hold the path's
/// bandwidth-delay product, the lowest RTT × the rate the path can carry; the receiver's
/// kernel doubles the buffer asked for (SO_RCVBUF) and advertises half or more of its
/// buffer as window, so `--recv-window` BDP gives a window of at least the BDP, and the
/// `tcp_rmem` maximum (the buffer itself) must be twice it.
fn receive_window_advice(pct: f64, e: &Evidence, rate: Option<&PathRate>) -> String {
    let window = e.max_receive_window.unwrap_or(0);
    let mut t = format!(
        "receive-window limited {pct:.0} % of the time (the sender was at the receiver's \
         window{}{})",
        e.max_receive_window
            .map(|w| format!(" of {}", decimal_bytes(w)))
            .unwrap_or_default(),
        if e.window_samples > 0 {
            format!(
                " in {} of {} samples",
                e.window_full_samples, e.window_samples
            )
        } else {
            String::new()
        }
    );
    // Milliseconds on a real path; microseconds on loopback, where "0.0 ms" says nothing.
    let rtt_ms = |us: u64| {
        if us < 1000 {
            format!("{us} µs")
        } else {
            format!("{:.1} ms", us as f64 / 1000.0)
        }
    };
    let queue = || {
        e.median_srtt_us
            .map(|m| format!(" (median {})", rtt_ms(m)))
            .unwrap_or_default()
    };
    let larger = |need: u64| {
        format!(
            "`--recv-window {}` (or `-w`), or net.ipv4.tcp_rmem max to at least {}",
            size_arg(need),
            decimal_bytes(2 * need)
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
        (Some(r), Some(rtt)) => {
            let need = bdp(r.bps, rtt);
            let product = format!(
                "the path's bandwidth-delay product, {} (the lowest RTT) × {} ({}) = {}",
                rtt_ms(rtt),
                rate_words(r.bps),
                r.source,
                decimal_bytes(need)
            );
            if need <= window {
                t += &format!(
                    ", although the window already holds {product}: the RTT under load{} grew \
                     beyond the lowest, so what was in flight beyond that product waited in a \
                     queue on the path, and a larger window would only lengthen that queue",
                    queue()
                );
            } else {
                t += &format!(
                    ": a window must hold {product}, so raise the receiver's buffer to {}",
                    larger(need)
                );
            }
        }
        (None, Some(rtt)) => {
            // Rates the transfer did not reach already, for which the window would grow.
            let reached = e.delivery_rate.unwrap_or(0).saturating_mul(8);
            let sizes: Vec<String> = NAMED_RATES
                .iter()
                .filter(|&&bps| bps > reached && bdp(bps, rtt) > window)
                .take(3)
                .map(|&bps| {
                    format!(
                        "for {} `--recv-window {}`",
                        rate_words(bps),
                        size_arg(bdp(bps, rtt))
                    )
                })
                .collect();
            if sizes.is_empty() {
                let need = e.peak_in_flight.unwrap_or(window).max(1);
                t += &format!(
                    ": the window already holds the lowest RTT ({}) × any rate this path could \
                     have, so the RTT under load{} filled it; to carry what was in flight twice \
                     over, raise the receiver's buffer to {}",
                    rtt_ms(rtt),
                    queue(),
                    larger(2 * need)
                );
            } else {
                t += &format!(
                    ": the path's rate is unknown (flowlab knows it inside a flowlab topology, or \
                     from `-b`), so at the lowest RTT, {}, a window needs {} (net.ipv4.tcp_rmem \
                     max twice that)",
                    rtt_ms(rtt),
                    sizes.join(", ")
                );
            }
        }
        (_, None) => {
            let need = e.peak_in_flight.unwrap_or(window).max(1);
            t += &format!(
                ": no RTT was sampled to size a window for the path; to carry what was in \
                 flight twice over, raise the receiver's buffer to {}",
                larger(2 * need)
            );
        }
    }
    t
}

fn advice(shares: &Shares, e: &Evidence, rate: Option<&PathRate>) -> Vec<String> {
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
                "send-buffer limited {pct:.0} % of the time{}: raise the sender's buffer, `-w {}`, \
                 or net.ipv4.tcp_wmem max to at least {}",
                e.sndbuf
                    .map(|b| format!(" (its buffer held {})", decimal_bytes(b)))
                    .unwrap_or_default(),
                size_arg(buffer),
                decimal_bytes(buffer)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A sender sample at `t_ms` with the kernel's chrono counters.
    fn chrono(t_ms: u64, busy_ms: u64, rwnd_ms: u64, sndbuf_ms: u64) -> TraceSample {
        TraceSample {
            t_us: t_ms * 1000,
            busy_time_us: Some(busy_ms * 1000),
            rwnd_limited_us: Some(rwnd_ms * 1000),
            sndbuf_limited_us: Some(sndbuf_ms * 1000),
            ..TraceSample::default()
        }
    }

    #[test]
    fn kernel_times_give_the_shares() {
        // 1000 ms traced: busy 900 (rwnd 410, sndbuf 90), idle 100.
        let s = [chrono(100, 50, 10, 0), chrono(1100, 950, 420, 90)];
        let d = diagnose_direction(StreamDirection::Up, &[&s], None).unwrap();
        assert_eq!(d.method, Method::Kernel);
        let sh = d.shares;
        assert!((sh.receive_window - 0.41).abs() < 1e-9, "{sh:?}");
        assert!((sh.send_buffer - 0.09).abs() < 1e-9);
        assert!((sh.network - 0.40).abs() < 1e-9);
        assert!((sh.application - 0.10).abs() < 1e-9);
        assert_eq!(d.primary, Limit::ReceiveWindow);
        assert!(
            d.advice[0].starts_with("receive-window limited 41 %"),
            "{:?}",
            d.advice
        );
    }

    /// A queue the probes saw build goes first in a network-limited direction's advice,
    /// and nowhere else; without a queue nothing changes.
    #[test]
    fn a_queue_the_probes_saw_is_named_where_the_network_limits() {
        let probes = |rtt_ms: u64| -> Vec<crate::ping::Probe> {
            (1..=50)
                .map(|i| crate::ping::Probe {
                    seq: i,
                    sent_ns: i * 10_000_000,
                    received_ns: Some((i * 10 + rtt_ms) * 1_000_000),
                    server_ns: Some(0),
                    forward_ns: None,
                    backward_ns: None,
                    duplicates: 0,
                    reordered: false,
                })
                .collect()
        };
        let of = |loaded_ms| {
            crate::latency::TestLatency::of(64, 0.01, "t", probes(10), probes(loaded_ms))
        };
        // Busy the whole second, never window-limited: the network; and a direction
        // limited by the receiver's window.
        let network = [chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0)];
        let window = [chrono(0, 0, 0, 0), chrono(1000, 1000, 1000, 0)];
        let diagnosed = || {
            vec![
                diagnose_direction(StreamDirection::Up, &[&network], None).unwrap(),
                diagnose_direction(StreamDirection::Down, &[&window], None).unwrap(),
            ]
        };
        let mut d = diagnosed();
        assert_eq!(
            (d[0].primary, d[1].primary),
            (Limit::Network, Limit::ReceiveWindow)
        );
        name_queue(&mut d, &of(60));
        assert!(
            d[0].advice[0].contains("queue-building bottleneck"),
            "{:?}",
            d[0]
        );
        assert_eq!(d[1].advice, diagnosed()[1].advice);
        let mut calm = diagnosed();
        name_queue(&mut calm, &of(10));
        assert_eq!(calm, diagnosed());
    }

    #[test]
    fn streams_of_a_direction_add_up() {
        let a = [chrono(0, 0, 0, 0), chrono(1000, 1000, 1000, 0)];
        let b = [chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0)];
        let d = diagnose_direction(StreamDirection::Down, &[&a, &b], None).unwrap();
        assert!((d.shares.receive_window - 0.5).abs() < 1e-9);
        assert!((d.shares.network - 0.5).abs() < 1e-9);
    }

    /// A window-limited sender's samples as bbr leaves them: the kernel counts the whole
    /// span as busy and none of it as receive-window limited, while bytes in flight sit
    /// at the peer's 64 KiB window in `full` of `n` samples (RTT 40 ms, 1.6 MB/s).
    fn window_limited_under_bbr(n: u64, full: u64) -> Vec<TraceSample> {
        (0..n)
            .map(|i| {
                let flight_segs = if i < full { 45 } else { 20 };
                TraceSample {
                    t_us: i * 10_000,
                    busy_time_us: Some(i * 10_000),
                    rwnd_limited_us: Some(0),
                    sndbuf_limited_us: Some(0),
                    unacked: Some(flight_segs),
                    sacked: Some(0),
                    lost: Some(0),
                    retrans: Some(0),
                    snd_mss: Some(1448),
                    snd_wnd: Some(65_536),
                    snd_cwnd: Some(200),
                    min_rtt_us: Some(40_000),
                    srtt_us: Some(41_000),
                    delivery_rate: Some(1_600_000),
                    ..TraceSample::default()
                }
            })
            .collect()
    }

    /// A fresh-clone run: a 4 KiB receive buffer on loopback, every sample taken while
    /// the receiver's window was closed or everything sent was acknowledged — no bytes
    /// in flight, so no sample counted as at the window.
    #[test]
    fn a_closed_window_is_full_whatever_is_in_flight() {
        assert!(fills(0, 0, 65_483, None));
        assert!(fills(0, 0, 1448, Some(0)));
        assert!(!fills(0, 4096, 65_483, None));
        let closed: Vec<TraceSample> = window_limited_under_bbr(10, 0)
            .into_iter()
            .map(|s| TraceSample {
                unacked: Some(0),
                snd_wnd: Some(0),
                ..s
            })
            .collect();
        let d = diagnose_direction(StreamDirection::Up, &[&closed], None).unwrap();
        assert_eq!(
            (d.evidence.window_full_samples, d.evidence.window_samples),
            (10, 10)
        );
        assert_eq!(d.primary, Limit::ReceiveWindow, "{d:?}");
    }

    /// CI on another host (a fresh clone): a 4 KiB receive buffer on loopback, the
    /// receiver's window open at 8 KiB in all 61 samples but nothing in flight — the
    /// sender's next segment (32 KiB, with 4 MB written and waiting) did not fit, so the
    /// kernel sent nothing and counted the whole second as receive-window limited.
    #[test]
    fn a_window_too_small_for_the_next_segment_is_full() {
        let (mss, window) = (32_768, 8_192);
        assert!(fills(0, window, mss, Some(4_096_000)));
        // What waits is less than a segment and more than the window: still held back.
        assert!(fills(0, window, mss, Some(window + 1)));
        // Nothing waits, or what waits fits: the window does not hold the sender.
        assert!(!fills(0, window, mss, Some(0)));
        assert!(!fills(0, window, mss, None));
        assert!(!fills(0, window, mss, Some(window)));
        // A window of four segments with room left for the next one is not full,
        // however much waits (three segments sent are under 90 % of it); one byte
        // smaller, it is.
        let four = 4 * mss;
        assert!(!fills(0, four, mss, Some(4_096_000)));
        assert!(!fills(3 * mss, four, mss, Some(4_096_000)));
        assert!(fills(3 * mss, four - 1, mss, Some(4_096_000)));
        assert!(!fills(3 * mss, four - 1, mss, None));
        let held: Vec<TraceSample> = window_limited_under_bbr(10, 0)
            .into_iter()
            .map(|s| TraceSample {
                unacked: Some(0),
                snd_mss: Some(mss),
                snd_wnd: Some(window),
                notsent_bytes: Some(4_096_000),
                ..s
            })
            .collect();
        let d = diagnose_direction(StreamDirection::Up, &[&held], None).unwrap();
        assert_eq!(
            (d.evidence.window_full_samples, d.evidence.window_samples),
            (10, 10)
        );
        assert_eq!(d.primary, Limit::ReceiveWindow, "{d:?}");
    }

    /// The window counts from the first unacknowledged byte: segments the receiver has
    /// selectively acknowledged, or that are taken as lost, still take their room in it,
    /// though they are no longer in flight.
    #[test]
    fn the_window_holds_every_segment_not_yet_acknowledged() {
        let s = TraceSample {
            unacked: Some(4),
            sacked: Some(2),
            lost: Some(1),
            retrans: Some(0),
            snd_mss: Some(1448),
            snd_wnd: Some(4 * 1448),
            notsent_bytes: Some(0),
            ..TraceSample::default()
        };
        assert_eq!(s.in_flight_bytes(), Some(1448));
        assert_eq!(window_full(&s), Some(true));
        let room = TraceSample {
            unacked: Some(2),
            ..s
        };
        assert_eq!(window_full(&room), Some(false));
        assert_eq!(window_full(&TraceSample::default()), None);
    }

    /// Regression (issue 11): under bbr the kernel's own clock counted a sender whose
    /// bytes in flight equalled the peer's window in 493 of 505 samples as network limited.
    #[test]
    fn what_the_trace_saw_at_the_window_outweighs_the_kernels_count() {
        let s = window_limited_under_bbr(505, 493);
        let d = diagnose_direction(StreamDirection::Up, &[&s], None).unwrap();
        assert_eq!(d.primary, Limit::ReceiveWindow, "{:?}", d.shares);
        assert_eq!(d.method, Method::KernelAndSamples);
        assert_eq!(
            (d.evidence.window_full_samples, d.evidence.window_samples),
            (493, 505)
        );
        let sh = d.shares;
        assert!((sh.receive_window - 493.0 / 505.0).abs() < 1e-9, "{sh:?}");
        assert!((sh.network - 12.0 / 505.0).abs() < 1e-6, "{sh:?}");
        assert!(
            (sh.receive_window + sh.network + sh.application + sh.send_buffer - 1.0).abs() < 1e-9
        );
        // Where the kernel's count is the larger (half the time, against 5 samples in
        // 100), it stands.
        let mut few = window_limited_under_bbr(100, 5);
        for x in &mut few {
            x.rwnd_limited_us = Some(x.t_us / 2);
        }
        let d = diagnose_direction(StreamDirection::Up, &[&few], None).unwrap();
        assert_eq!(d.method, Method::Kernel);
        assert!(
            (d.shares.receive_window - 0.5).abs() < 1e-9,
            "{:?}",
            d.shares
        );
    }

    #[test]
    fn advice_sizes_the_window_from_the_paths_rate_not_the_rate_achieved() {
        let s = window_limited_under_bbr(100, 95);
        let rate = PathRate {
            bps: 30_000_000,
            source: "the bottleneck of topology port, h1 → h4".into(),
        };
        let d = diagnose_direction(StreamDirection::Up, &[&s], Some(&rate)).unwrap();
        // 30 Mbit/s × 40 ms = 150 000 bytes; the achieved 1.6 MB/s would give 64 000.
        assert_eq!(d.evidence.path_bdp_bytes, Some(150_000));
        assert_eq!(d.evidence.bdp_bytes, Some(64_000));
        let first = &d.advice[0];
        assert!(
            first.contains("in 95 of 100 samples")
                && first.contains(
                    "40.0 ms (the lowest RTT) × 30 Mbit/s (the bottleneck of topology port, \
                     h1 → h4) = 150 kB"
                )
                && first.contains("`--recv-window 147K`")
                && first.contains("tcp_rmem max to at least 300 kB"),
            "{first}"
        );
        // Seed 002's numbers: 500 Mbit/s at 50 ms, a window of 3.125 MB.
        let mut seed = window_limited_under_bbr(10, 10);
        for x in &mut seed {
            x.min_rtt_us = Some(50_000);
        }
        let rate = PathRate {
            bps: 500_000_000,
            source: "the -b target".into(),
        };
        let d = diagnose_direction(StreamDirection::Up, &[&seed], Some(&rate)).unwrap();
        assert!(d.advice[0].contains("`--recv-window 3M`"), "{:?}", d.advice);
        assert!(d.advice[0].contains("at least 6.2 MB"), "{:?}", d.advice);
    }

    #[test]
    fn an_unknown_rate_gets_sizes_for_named_rates() {
        let s = window_limited_under_bbr(100, 95);
        let d = diagnose_direction(StreamDirection::Up, &[&s], None).unwrap();
        let first = &d.advice[0];
        // 40 ms × 100 Mbit/s = 500 kB, × 1 Gbit/s = 5 MB, × 10 Gbit/s = 50 MB.
        assert!(
            first.contains("the path's rate is unknown")
                && first.contains(
                    "for 100 Mbit/s `--recv-window 489K`, for 1 Gbit/s `--recv-window 5M`, \
                     for 10 Gbit/s `--recv-window 48M`"
                ),
            "{first}"
        );
    }

    #[test]
    fn loopback_rtts_are_said_in_microseconds() {
        // 5 µs × even 100 Gbit/s is 62.5 kB, below the window: the RTT under load (35 µs)
        // filled it, and "0.0 ms" would say nothing.
        let mut s = window_limited_under_bbr(100, 95);
        for x in &mut s {
            x.min_rtt_us = Some(5);
            x.srtt_us = Some(35);
        }
        let d = diagnose_direction(StreamDirection::Up, &[&s], None).unwrap();
        let first = &d.advice[0];
        assert!(
            first.contains("the window already holds the lowest RTT (5 µs)")
                && first.contains("(median 35 µs)"),
            "{first}"
        );
    }

    #[test]
    fn a_window_shrunk_by_unread_data_blames_the_reader_not_the_buffer() {
        // The window keeps reopening to 1 MB, then the receiving application falls
        // behind and it shrinks to 64 KiB, which bytes in flight then fill. The last
        // four samples see no reopening after them.
        let mut s = window_limited_under_bbr(100, 100);
        for x in s.iter_mut().step_by(5) {
            x.snd_wnd = Some(1_000_000);
            x.unacked = Some(10);
        }
        let d = diagnose_direction(StreamDirection::Up, &[&s], None).unwrap();
        assert_eq!(d.evidence.reader_full_samples, 76);
        assert!(
            d.advice[0].contains("so the reader (its CPU, on loopback) is the limit")
                && !d.advice[0].contains("--recv-window"),
            "{:?}",
            d.advice
        );
        // A first window far larger than the later ones (a buffer set after the
        // handshake) is not that: the window never reopens.
        let mut small = window_limited_under_bbr(100, 100);
        small[0].snd_wnd = Some(1_000_000);
        small[0].unacked = Some(10);
        let d = diagnose_direction(StreamDirection::Up, &[&small], None).unwrap();
        assert_eq!(d.evidence.reader_full_samples, 0);
        assert!(d.advice[0].contains("--recv-window"), "{:?}", d.advice);
    }

    #[test]
    fn a_window_that_holds_the_paths_bdp_is_not_to_be_raised() {
        // 1 Mbit/s × 40 ms = 5 kB, far below the 64 KiB window: a queue filled it.
        let s = window_limited_under_bbr(100, 95);
        let rate = PathRate {
            bps: 1_000_000,
            source: "the bottleneck of topology t, h1 → h2".into(),
        };
        let d = diagnose_direction(StreamDirection::Up, &[&s], Some(&rate)).unwrap();
        let first = &d.advice[0];
        assert!(
            first.contains("although the window already holds"),
            "{first}"
        );
        assert!(first.contains("would only lengthen that queue"), "{first}");
        assert!(!first.contains("--recv-window"), "{first}");
    }

    #[test]
    fn older_kernels_are_classified_sample_by_sample() {
        let s = |flight_segs: u64, wnd: u64, cwnd: u64| TraceSample {
            unacked: Some(flight_segs),
            sacked: Some(0),
            lost: Some(0),
            retrans: Some(0),
            snd_mss: Some(1000),
            snd_wnd: Some(wnd),
            snd_cwnd: Some(cwnd),
            ..TraceSample::default()
        };
        let samples = [
            s(10, 10_000, 100), // window full
            s(10, 10_000, 100),
            s(50, 1_000_000, 50), // cwnd full
            s(1, 1_000_000, 50),  // neither
        ];
        let d = diagnose_direction(StreamDirection::Up, &[&samples], None).unwrap();
        assert_eq!(d.method, Method::Samples);
        assert_eq!(d.shares.receive_window, 0.5);
        assert_eq!(d.shares.network, 0.25);
        assert_eq!(d.shares.application, 0.25);
        assert_eq!(d.evidence.window_full_samples, 2);
    }

    #[test]
    fn network_advice_names_loss_or_queueing() {
        let mut a = chrono(0, 0, 0, 0);
        let mut b = chrono(1000, 1000, 0, 0);
        a.total_retrans = Some(0);
        b.total_retrans = Some(50);
        a.data_segs_out = Some(0);
        b.data_segs_out = Some(1000);
        let d = diagnose_direction(StreamDirection::Up, &[&[a, b]], None).unwrap();
        assert_eq!(d.primary, Limit::Network);
        assert!(
            d.advice[0].contains("5.0 % of segments were retransmitted"),
            "{:?}",
            d.advice
        );
        let (mut a, mut b) = (chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0));
        a.min_rtt_us = Some(10_000);
        b.min_rtt_us = Some(10_000);
        a.srtt_us = Some(40_000);
        b.srtt_us = Some(40_000);
        let d = diagnose_direction(StreamDirection::Up, &[&[a, b]], None).unwrap();
        assert!(d.advice[0].contains("4.0× its minimum"), "{:?}", d.advice);
    }

    #[test]
    fn nothing_to_say_without_samples() {
        assert_eq!(diagnose_direction(StreamDirection::Up, &[], None), None);
        let bare = [TraceSample::default(), TraceSample::default()];
        assert_eq!(
            diagnose_direction(StreamDirection::Up, &[&bare], None),
            None
        );
    }
}
