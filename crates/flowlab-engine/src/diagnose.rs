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
//! On older kernels the samples are classified one by one instead: bytes in flight within
//! one segment of the peer's window (needs `snd_wnd`, 5.4) is the receive window; within
//! one segment of the congestion window is the network; else the application.
//! Evidence and advice are computed from the same samples; docs/metrics.md has the rules.

use serde::{Deserialize, Serialize};

use crate::result::{StreamDirection, Trace};
use flowlab_proto::trace::TraceSample;

/// A share of the time at or above which a limit is worth advice.
pub const NOTABLE: f64 = 0.10;
/// RTT growth under load (median smoothed RTT over the minimum) that counts as a queue
/// building up, if it is also at least [`QUEUE_MIN_US`] in absolute terms.
pub const QUEUE_INFLATION: f64 = 2.0;
pub const QUEUE_MIN_US: u64 = 1_000;

/// Whether `flight` bytes fill a window of `window` bytes: within 10 %, or within one
/// segment where a segment is small next to the window (loopback's 64 KB segments are
/// not).
pub fn fills(flight: u64, window: u64, mss: u64) -> bool {
    window > 0
        && (flight as f64 >= 0.9 * window as f64 || (mss * 8 <= window && flight + mss >= window))
}

/// What held a sender back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    ReceiveWindow,
    SendBuffer,
    Network,
    Application,
}

impl Limit {
    pub fn describe(self) -> &'static str {
        match self {
            Limit::ReceiveWindow => "the receiver's window",
            Limit::SendBuffer => "the sender's socket buffer",
            Limit::Network => "the congestion window (the network)",
            Limit::Application => "the application (nothing to send)",
        }
    }
}

/// Shares of the traced time, 0…1, summing to 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Shares {
    pub receive_window: f64,
    pub send_buffer: f64,
    pub network: f64,
    pub application: f64,
}

impl Shares {
    fn of(self, l: Limit) -> f64 {
        match l {
            Limit::ReceiveWindow => self.receive_window,
            Limit::SendBuffer => self.send_buffer,
            Limit::Network => self.network,
            Limit::Application => self.application,
        }
    }

    /// The limits, largest share first.
    pub fn ranked(&self) -> Vec<(Limit, f64)> {
        let mut v: Vec<(Limit, f64)> = [
            Limit::ReceiveWindow,
            Limit::SendBuffer,
            Limit::Network,
            Limit::Application,
        ]
        .into_iter()
        .map(|l| (l, self.of(l)))
        .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    }
}

/// The numbers behind a verdict (absent when the kernel did not provide their inputs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Largest bytes in flight seen, and the peer's largest advertised window.
    pub peak_in_flight: Option<u64>,
    pub max_receive_window: Option<u64>,
    /// Samples where bytes in flight reached the peer's window (within one segment).
    pub window_full_samples: u64,
    /// Highest delivery rate (bytes/s), lowest RTT (µs) and their product (bytes).
    pub delivery_rate: Option<u64>,
    pub min_rtt_us: Option<u64>,
    pub bdp_bytes: Option<u64>,
    /// Median smoothed RTT (µs) and its ratio to the lowest RTT.
    pub median_srtt_us: Option<u64>,
    pub rtt_inflation: Option<f64>,
    /// Segments retransmitted over the traced span, and as a share of segments sent.
    pub retransmits: Option<u64>,
    pub retransmit_share: Option<f64>,
    /// Largest send and receive buffers the sending sockets had.
    pub sndbuf: Option<u64>,
}

/// The verdict for one direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub direction: StreamDirection,
    /// How the shares were computed: `kernel` (busy/rwnd/sndbuf-limited time) or
    /// `samples` (one sample at a time, older kernels).
    pub method: String,
    pub shares: Shares,
    pub primary: Limit,
    pub evidence: Evidence,
    /// Concrete advice, one sentence each, most important first.
    pub advice: Vec<String>,
}

/// Diagnoses every direction whose senders were traced.
pub fn diagnose(trace: &Trace) -> Vec<Diagnosis> {
    [StreamDirection::Up, StreamDirection::Down]
        .into_iter()
        .filter_map(|d| {
            let streams: Vec<&[TraceSample]> = trace
                .streams
                .iter()
                .filter(|s| s.direction == d && s.sender && s.trace.samples.len() >= 2)
                .map(|s| s.trace.samples.as_slice())
                .collect();
            diagnose_direction(d, &streams)
        })
        .collect()
}

/// Diagnoses one direction from its senders' samples (each oldest first).
pub fn diagnose_direction(d: StreamDirection, streams: &[&[TraceSample]]) -> Option<Diagnosis> {
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
                "kernel",
                Shares {
                    receive_window: rwnd / span,
                    send_buffer: sndbuf / span,
                    network: (busy - rwnd - sndbuf).max(0.0) / span,
                    application: (span - busy).max(0.0) / span,
                },
            )
        }
        None => ("samples", sample_shares(streams)?),
    };
    let evidence = evidence(streams);
    let ranked = shares.ranked();
    let primary = ranked[0].0;
    Some(Diagnosis {
        direction: d,
        method: method.into(),
        shares,
        primary,
        evidence,
        advice: advice(&shares, &evidence),
    })
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
        let near = |limit: Option<u64>| limit.is_some_and(|l| fills(flight, l, mss));
        let i = if near(s.snd_wnd) {
            0
        } else if near(s.cwnd_bytes()) {
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

fn evidence(streams: &[&[TraceSample]]) -> Evidence {
    let all = || streams.iter().flat_map(|s| s.iter());
    let max = |f: fn(&TraceSample) -> Option<u64>| all().filter_map(f).max();
    let window_full_samples = all()
        .filter(|s| match (s.in_flight_bytes(), s.snd_wnd, s.snd_mss) {
            (Some(f), Some(w), Some(m)) => fills(f, w, m),
            _ => false,
        })
        .count() as u64;
    let min_rtt_us = all().filter_map(|s| s.min_rtt_us).filter(|&r| r > 0).min();
    let delivery_rate = max(|s| s.delivery_rate);
    let bdp_bytes = match (delivery_rate, min_rtt_us) {
        (Some(r), Some(rtt)) => Some((r as u128 * rtt as u128 / 1_000_000) as u64),
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
        delivery_rate,
        min_rtt_us,
        bdp_bytes,
        median_srtt_us,
        rtt_inflation,
        retransmits,
        retransmit_share,
        sndbuf: max(|s| s.sndbuf),
    }
}

/// Bytes as the user types them (`-w 8M`): binary units, rounded up.
fn size_arg(bytes: u64) -> String {
    const M: u64 = 1 << 20;
    const K: u64 = 1 << 10;
    if bytes >= M {
        format!("{}M", bytes.div_ceil(M))
    } else {
        format!("{}K", bytes.div_ceil(K).max(1))
    }
}

/// Bytes in decimal units, as sysctl values are usually discussed ("6.2 MB").
fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.0} kB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

fn advice(shares: &Shares, e: &Evidence) -> Vec<String> {
    let mut out = Vec::new();
    // What a window must hold: the path's bandwidth-delay product, or at least what the
    // sender already had in flight; the kernel advertises about half a socket buffer.
    let need = e
        .bdp_bytes
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
            Limit::ReceiveWindow => format!(
                "receive-window limited {pct:.0} % of the time (bytes in flight reached the \
                 receiver's window{}): raise the receiver's buffer, `--recv-window {}` (or `-w`), \
                 or net.ipv4.tcp_rmem max to at least {}",
                e.max_receive_window
                    .map(|w| format!(" of {}", human(w)))
                    .unwrap_or_default(),
                size_arg(buffer),
                human(buffer)
            ),
            Limit::SendBuffer => format!(
                "send-buffer limited {pct:.0} % of the time{}: raise the sender's buffer, `-w {}`, \
                 or net.ipv4.tcp_wmem max to at least {}",
                e.sndbuf
                    .map(|b| format!(" (its buffer held {})", human(b)))
                    .unwrap_or_default(),
                size_arg(buffer),
                human(buffer)
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
        let d = diagnose_direction(StreamDirection::Up, &[&s]).unwrap();
        assert_eq!(d.method, "kernel");
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

    #[test]
    fn streams_of_a_direction_add_up() {
        let a = [chrono(0, 0, 0, 0), chrono(1000, 1000, 1000, 0)];
        let b = [chrono(0, 0, 0, 0), chrono(1000, 1000, 0, 0)];
        let d = diagnose_direction(StreamDirection::Down, &[&a, &b]).unwrap();
        assert!((d.shares.receive_window - 0.5).abs() < 1e-9);
        assert!((d.shares.network - 0.5).abs() < 1e-9);
    }

    #[test]
    fn advice_sizes_the_buffer_from_the_bdp() {
        // 62.5 MB/s (500 Mbit/s) at 50 ms: BDP 3.125 MB, as in seed 002.
        let mut a = chrono(0, 0, 0, 0);
        let mut b = chrono(1000, 1000, 600, 0);
        for s in [&mut a, &mut b] {
            s.delivery_rate = Some(62_500_000);
            s.min_rtt_us = Some(50_000);
            s.snd_wnd = Some(3_000_000);
        }
        let d = diagnose_direction(StreamDirection::Up, &[&[a, b]]).unwrap();
        assert_eq!(d.evidence.bdp_bytes, Some(3_125_000));
        let first = &d.advice[0];
        assert!(first.contains("receiver's window of 3.0 MB"), "{first}");
        assert!(first.contains("`--recv-window 6M`"), "{first}");
        assert!(first.contains("tcp_rmem max to at least 6.2 MB"), "{first}");
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
        let d = diagnose_direction(StreamDirection::Up, &[&samples]).unwrap();
        assert_eq!(d.method, "samples");
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
        let d = diagnose_direction(StreamDirection::Up, &[&[a, b]]).unwrap();
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
        let d = diagnose_direction(StreamDirection::Up, &[&[a, b]]).unwrap();
        assert!(d.advice[0].contains("4.0× its minimum"), "{:?}", d.advice);
    }

    #[test]
    fn nothing_to_say_without_samples() {
        assert_eq!(diagnose_direction(StreamDirection::Up, &[]), None);
        let bare = [TraceSample::default(), TraceSample::default()];
        assert_eq!(diagnose_direction(StreamDirection::Up, &[&bare]), None);
    }
}
