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
//! The evidence holds the path's bandwidth-delay product: its lowest RTT times the rate
//! it can carry, when known ([`PathRate`]: a flowlab topology's bottleneck, or the `-b`
//! target) — never the rate a window-limited transfer achieved, which the window itself
//! held down. What the diagnosis advises, in sentences, is the formats'
//! (`flowlab_report::advice`); docs/metrics.md has the rules.

pub use crate::diagnosis::{Diagnosis, Evidence, Limit, Method, Shares};
use crate::result::Trace;
use crate::spec::StreamDirection;
pub use crate::spec::{PathRate, PathRates};
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

impl Trace {
    /// Fills in what limited each direction's senders ([`diagnose`]), or, where nothing
    /// can be said, why ([`undiagnosed`]).
    pub fn diagnose(&mut self, rates: &PathRates) {
        self.diagnosis = diagnose(self, rates);
        self.undiagnosed = undiagnosed(self).map(String::from);
    }
}

/// Why a trace has no diagnosis, in a sentence; `None` when it has one.
pub fn undiagnosed(trace: &Trace) -> Option<&'static str> {
    if !trace.diagnosis.is_empty() {
        return None;
    }
    let quic = trace
        .streams
        .iter()
        .any(|s| s.trace.samples.iter().any(|x| x.quic_cwnd_bytes.is_some()));
    let senders = trace.streams.iter().filter(|s| s.sender);
    Some(if quic {
        "A QUIC test traces this end's stack, which reports no bytes in flight"
    } else if senders.clone().next().is_none() {
        "No sender was traced (the sending end is not flowlab)"
    } else if senders.clone().all(|s| s.trace.samples.len() < 2) {
        "The senders were sampled fewer than twice (a test shorter than two periods)"
    } else {
        "The senders' samples span no time in which they could be judged"
    })
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
pub fn bdp(bps: u64, rtt_us: u64) -> u64 {
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

    /// A trace of one stream going up, sampled at `samples`, taken by its sender or not.
    fn one_stream(sender: bool, samples: Vec<TraceSample>) -> Trace {
        Trace {
            period_us: 10_000,
            streams: vec![crate::result::TracedStream {
                side: crate::result::Side::Client,
                direction: StreamDirection::Up,
                sender,
                trace: flowlab_proto::trace::StreamTrace {
                    id: 1,
                    period_us: 10_000,
                    samples,
                    ..Default::default()
                },
            }],
            diagnosis: Vec::new(),
            undiagnosed: None,
        }
    }

    #[test]
    fn a_trace_without_a_diagnosis_says_why() {
        let why = |mut t: Trace| {
            t.diagnose(&PathRates::default());
            t.undiagnosed
        };
        let busy = vec![chrono(100, 50, 10, 0), chrono(1100, 950, 420, 90)];
        assert_eq!(why(one_stream(true, busy.clone())), None);
        assert!(why(one_stream(false, busy)).is_some_and(|w| w.starts_with("No sender")));
        let once = vec![chrono(100, 50, 10, 0)];
        assert!(why(one_stream(true, once)).is_some_and(|w| w.contains("fewer than twice")));
        let still = vec![chrono(100, 50, 10, 0), chrono(100, 50, 10, 0)];
        assert!(why(one_stream(true, still)).is_some_and(|w| w.contains("span no time")));
        let quic = vec![
            TraceSample {
                quic_cwnd_bytes: Some(12_000),
                ..chrono(100, 0, 0, 0)
            };
            2
        ];
        assert!(why(one_stream(true, quic)).is_some_and(|w| w.starts_with("A QUIC test")));
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
        // A first window far larger than the later ones (a buffer set after the
        // handshake) is not that: the window never reopens.
        let mut small = window_limited_under_bbr(100, 100);
        small[0].snd_wnd = Some(1_000_000);
        small[0].unacked = Some(10);
        let d = diagnose_direction(StreamDirection::Up, &[&small], None).unwrap();
        assert_eq!(d.evidence.reader_full_samples, 0);
    }

    #[test]
    fn the_paths_bdp_is_from_its_rate_not_the_rate_achieved() {
        let s = window_limited_under_bbr(100, 95);
        let rate = PathRate {
            bps: 30_000_000,
            source: "the bottleneck of topology port, h1 → h4".into(),
        };
        let d = diagnose_direction(StreamDirection::Up, &[&s], Some(&rate)).unwrap();
        // 30 Mbit/s × 40 ms = 150 000 bytes; the achieved 1.6 MB/s would give 64 000.
        assert_eq!(d.evidence.path_bdp_bytes, Some(150_000));
        assert_eq!(d.evidence.path_rate_bps, Some(30_000_000));
        assert_eq!(d.evidence.bdp_bytes, Some(64_000));
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
    fn nothing_to_say_without_samples() {
        assert_eq!(diagnose_direction(StreamDirection::Up, &[], None), None);
        let bare = [TraceSample::default(), TraceSample::default()];
        assert_eq!(
            diagnose_direction(StreamDirection::Up, &[&bare], None),
            None
        );
    }
}
